/* Helpers shared by the AVX2 kernel files (include inside their
 * `#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)` block). Each
 * mirrors a piece of ggml's x86 code whose float order the kernels keep. */
#ifndef WEFT_CPU_AVX2_COMMON_H
#define WEFT_CPU_AVX2_COMMON_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/types.h"
#include "backends/cpu/cpu_target.h"

/* backends/cpu/cpu_ref_dot.c: ggml's scalar `summs += m * s`, contracted to an fma by GCC
 * in ggml's build; keep in step with the reference's switch. */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif

static inline WEFT_AVX2 float h2f(weft_half h) { return _cvtsh_ss(h); }

static inline WEFT_AVX2 float ggml_scalar_madd(float a, float b, float c)
{
#if WEFT_GGML_SCALAR_CONTRACT
    return fmaf(a, b, c);
#else
    return c + a * b;
#endif
}

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), as ggml's hsum_float_8 */
static inline WEFT_AVX2 float hsum_float_8(__m256 x)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)); /* x0+x4 .. x3+x7 */
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));                                         /* r0+r2, r1+r3 */
    r = _mm_add_ss(r, _mm_movehdup_ps(r));                                          /* (r0+r2)+(r1+r3) */
    return _mm_cvtss_f32(r);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles in bytes 0..15 (elements
 * 0..15), high nibbles in bytes 16..31 (elements 16..31). */
static inline WEFT_AVX2 __m256i bytes_from_nibbles_32(const uint8_t *qs)
{
    /* the 16 bytes in both halves (a load-only broadcast), the high half shifted by 4 */
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi32(t, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

/* byte j = 0xFF if bit j of the little-endian 32-bit qh is set, else 0 */
static inline WEFT_AVX2 __m256i bytes_from_bits_32(const uint8_t qh[4])
{
    uint32_t x32;
    memcpy(&x32, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* int32 lane l = sum over bytes 4l..4l+3 of u[j] (unsigned) * s[j] (signed) */
static inline WEFT_AVX2 __m256i lanes_us(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

static inline WEFT_AVX2 __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Q3_K's 16 six-bit scales minus 32 (weft_q3_k_scales) as int8 lanes: the low
 * nibbles of bytes 0..7, then their high nibbles; the 2-bit high parts from
 * bytes 8..11, shifted by 0, 2, 4, 6 for scales 0-3, 4-7, 8-11, 12-15. Reads
 * exactly the 12 bytes. */
static inline WEFT_AVX2 __m128i q3k_scales_i8(const uint8_t q[12])
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i l = _mm_loadl_epi64((const __m128i *)q);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
    int32_t h32;
    memcpy(&h32, q + 8, 4);
    const __m128i h = _mm_srlv_epi32(_mm_set1_epi32(h32), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i hi = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi8(3)), 4);
    return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}

#endif
