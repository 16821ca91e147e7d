/* What the AVX-512 VNNI kernels share (the packed decode kernels of
 * packed/packed_q32.c and packed/packed_kq.c, the prefill tiles of
 * packed/packed_prefill.c and q32/q32_kq_gemm_avx512.c): target attributes, a 32-bit
 * broadcast, the software prefetch on the packed stream, ggml's 8-lane
 * horizontal sum and the corrected vpdpbusd lanes. Include after <immintrin.h>, inside the x86 guard. */
#ifndef WEFT_CPU_AVX512_PACKED_H
#define WEFT_CPU_AVX512_PACKED_H
#include "backends/cpu/cpu_target.h"

#include <stdint.h>
#include <string.h>

/* Software prefetch on the packed stream: one prefetch per cache line of a
 * block column, weft_cpu_prefetch bytes ahead of the column being read (-1:
 * none; cpu_kernels.c chooses it per CPU, the cpu.prefetch option
 * overrides). On the shared machine of December 1 (SmolLM2 Q4_1 tg64, 2
 * threads) 2560 bytes took 112 to 174 t/s. On this AMD EPYC (Zen 4) the
 * current column itself (0) is best, one thread from memory
 * (bench_cpu_kernels packed): Q6_K 20.8 GB/s at 0, 7.7 with none (its
 * planes are read out of order), 10.9 at 2560; Q4_K 25-29 at 0 or none,
 * 20 at 2560. */
#define PREFETCH_COLUMN(p, bytes)                                                                               \
    do {                                                                                                        \
        const int d_ = __atomic_load_n(&weft_cpu_prefetch, __ATOMIC_RELAXED);                                                                     \
        if (d_ >= 0)                                                                                              \
            for (int l_ = 0; l_ < (bytes); l_ += 64) _mm_prefetch((const char *)(p) + d_ + l_, _MM_HINT_T0);    \
    } while (0)

#define AI static inline __attribute__((always_inline))

AI WEFT_AVX512_VNNI __m512i bcast32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* hsum_float_8 as ggml: ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)).
 * Per 128-bit lane, of lanes 0..3 = lo and lanes 4..7 = hi, in the lane's
 * element 0. */
AI WEFT_AVX512_VNNI __m512 hsum8_lanes(__m512 lo, __m512 hi)
{
    __m512 r = _mm512_add_ps(lo, hi);
    r = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(r, _mm512_movehdup_ps(r));
}

/* The same of each 256-bit half of a and b: in elements 0 (a lo), 4 (a hi),
 * 8 (b lo), 12 (b hi). */
AI WEFT_AVX512_VNNI __m512 hsum8_x4(__m512 a, __m512 b)
{
    const __m512 lo = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return hsum8_lanes(lo, hi);
}

/* t = corr; t += vpdpbusd(w, x), for a unit of the two-row activation layout
 * (x at u, the int32 corrections at u + 64): corr and x are read from
 * memory, since a fresh load of corr costs a load port where a register copy
 * would cost a vector ALU slot. */
AI WEFT_AVX512_VNNI __m512i lanes_corr(const uint8_t *u, __m512i w)
{
    __m512i t;
    __asm__("vmovdqu64 %[c], %[t]\n\tvpdpbusd %[x], %[w], %[t]"
            : [t] "=&v"(t)
            : [c] "m"(*(const __m512i *)(u + 64)), [x] "m"(*(const __m512i *)u), [w] "v"(w));
    return t;
}

#endif
