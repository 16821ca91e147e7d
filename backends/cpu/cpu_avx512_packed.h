/* What the AVX-512 VNNI packed decode kernels share (cpu_avx512_packed.c for
 * the 32-element block types, cpu_avx512_packedk.c for the K-quants):
 * target attributes, a 32-bit broadcast and the software prefetch on the
 * packed stream. Include after <immintrin.h>, inside the x86 guard. */
#ifndef WEFT_CPU_AVX512_PACKED_H
#define WEFT_CPU_AVX512_PACKED_H

#include <stdint.h>
#include <string.h>

/* Software prefetch distance in bytes on the packed stream (0: none), one
 * prefetch per cache line of a block column. The hardware prefetchers alone
 * leave these kernels waiting on the stream: SmolLM2 Q4_1 tg64 with 2
 * threads on the shared 2-core machine went from 112 to 174 t/s (medians of
 * 5 paired runs) with 2560 bytes, 164 with 5120. */
#ifndef WEFT_PACKED_PREFETCH
#define WEFT_PACKED_PREFETCH 2560
#endif
#if WEFT_PACKED_PREFETCH > 0
#define PREFETCH_COLUMN(p, bytes) \
    for (int l_ = 0; l_ < (bytes); l_ += 64) _mm_prefetch((const char *)(p) + WEFT_PACKED_PREFETCH + l_, _MM_HINT_T0)
#else
#define PREFETCH_COLUMN(p, bytes) ((void)0)
#endif

#define Z512V __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define AI static inline __attribute__((always_inline))

AI Z512V __m512i bcast32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

#endif
