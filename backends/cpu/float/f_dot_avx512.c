/* AVX-512 kernels: the F32 and BF16 dots (vec_dot and tinyBLAS orders) with
 * one native __m512 per 16-lane accumulator of the reference (backends/cpu/cpu_ref_dot.c),
 * bit-identical to it.
 *
 * BF16 does not use _mm512_dpbf16_ps: VDPBF16PS treats denormal inputs as
 * zero and flushes denormal results (DAZ/FTZ regardless of MXCSR), where the
 * reference's dpbf16_step is two exact fmaf steps; they differ whenever a
 * bf16 product or the running sum is subnormal. The step is emulated instead:
 * a bf16 pair in a 32-bit lane is widened to two floats with one shift and
 * one mask, then two _mm512_fmadd_ps (odd element first), which is exactly
 * dpbf16_step on every input.
 *
 * Only entries that beat the AVX2 ones are filled (the rest fall back to the
 * AVX2 table); each function has its own target attribute, so this file
 * builds without -mavx512f. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>
#include <math.h>

#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif

/* _mm512_reduce_add_ps spelled out (512 -> 256 -> 128 -> 64 -> 32), the
 * order of the reference's reduce_add_16. */
WEFT_AVX512 static inline float hsum512(__m512 x)
{
    __m256 t = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* dpbf16_step on 16 lanes over 32 bf16: acc += a[2l+1]*b[2l+1]; acc += a[2l]*b[2l]. */
WEFT_AVX512 static inline __m512 dpbf16_16(__m512 acc, const weft_bf16 *a, const weft_bf16 *b)
{
    const __m512i himask = _mm512_set1_epi32((int)0xffff0000u);
    __m512i ua = _mm512_loadu_si512(a), ub = _mm512_loadu_si512(b);
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(ua, himask)),
                          _mm512_castsi512_ps(_mm512_and_si512(ub, himask)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(ua, 16)),
                           _mm512_castsi512_ps(_mm512_slli_epi32(ub, 16)), acc);
}

/* ---- single-row dot: 4 accumulators over 64-element steps ---- */

WEFT_AVX512 static float dot_f32_avx512(const void *wv, const void *xv, int64_t n)
{
    const float *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < np; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 0), _mm512_loadu_ps(b + i + 0), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    float s = hsum512(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
    const int64_t vec_end = np + ((n - np) & ~(int64_t)3);
    int64_t i = np;
    for (; i < vec_end; i++) s += a[i] * b[i];
    for (; i < n; i++) {
#if WEFT_GGML_SCALAR_CONTRACT
        s = fmaf(a[i], b[i], s);
#else
        s = s + a[i] * b[i];
#endif
    }
    return s;
}

WEFT_AVX512 static float dot_bf16_avx512(const void *wv, const void *xv, int64_t n)
{
    const weft_bf16 *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    __m512 c1 = _mm512_setzero_ps(), c2 = c1;
    for (int64_t i = 0; i < np; i += 64) {
        c1 = dpbf16_16(c1, a + i, b + i);
        c2 = dpbf16_16(c2, a + i + 32, b + i + 32);
    }
    double s = 0;
    s += (double)hsum512(c1);
    s += (double)hsum512(c2);
    for (int64_t i = np; i < n; i++) s += (double)(weft_bf16_to_f32(a[i]) * weft_bf16_to_f32(b[i]));
    return (float)s;
}

/* ---- multi-row dot (tinyBLAS order): one 16-lane accumulator ---- */

WEFT_AVX512 static float dot_mm_f32_avx512(const void *wv, const void *xv, int64_t k)
{
    if (k % 16) return dot_f32_avx512(wv, xv, k);
    const float *a = wv, *b = xv;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    return hsum512(acc);
}

WEFT_AVX512 static float dot_mm_bf16_avx512(const void *wv, const void *xv, int64_t k)
{
    if (k % 32) return dot_bf16_avx512(wv, xv, k);
    const weft_bf16 *a = wv, *b = xv;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 32) acc = dpbf16_16(acc, a + i, b + i);
    return hsum512(acc);
}

void weft_cpu_kernels_fill_avx512(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    /* Measured on a Sapphire-Rapids-class core (tests/cpu/test_cpu_float
     * times them): F32 1.2-1.3x and BF16 1.0-1.2x the AVX2 kernels with
     * cache-resident weights; F16 0.87-0.95x (the 512-bit vcvtph2ps costs
     * more than it saves), so F16 stays on the AVX2 kernels (its 16-lane
     * version was written, checked bit-identical and dropped), and so do the
     * converters, which are memory-bound. */
    k->dot[WEFT_TYPE_F32] = dot_f32_avx512;
    k->dot[WEFT_TYPE_BF16] = dot_bf16_avx512;
    k->dot_mm[WEFT_TYPE_F32] = dot_mm_f32_avx512;
    k->dot_mm[WEFT_TYPE_BF16] = dot_mm_bf16_avx512;
    k->mm_k_multiple[WEFT_TYPE_F32] = 16;
    k->mm_k_multiple[WEFT_TYPE_BF16] = 32;
}

#else

void weft_cpu_kernels_fill_avx512(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
