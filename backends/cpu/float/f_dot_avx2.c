/* AVX2 + FMA + F16C kernels for the float weight types (F32, F16, BF16):
 * single-row dot (ggml's vec_dot order), multi-row dot (tinyBLAS order) and
 * the F16/BF16 activation converters.
 *
 * The reference (backends/cpu/cpu_ref_dot.c) mirrors ggml's AVX-512 kernels, whose
 * accumulators are 16 float lanes wide. Here every 16-lane accumulator is a
 * pair of __m256 (lo = lanes 0..7, hi = lanes 8..15) and every float step of
 * the reference is the same IEEE operation on the same lane: fmaf becomes
 * _mm256_fmadd_ps, the lane-wise adds and the reduction tree are added in the
 * same pairs, and scalar tails stay scalar with the same operations. So the
 * results are bit-identical to weft_vec_dot / weft_vec_dot_mm /
 * weft_quantize_row_act (tests/cpu/test_cpu_float.c checks them bit for bit).
 *
 * Each function carries its own target attribute, so this file compiles in a
 * build without -mavx2; the table filler only stores pointers and is called
 * only where cpu_kernels.c has checked the CPU. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>
#include <math.h>

/* same default as backends/cpu/cpu_ref_dot.c: ggml's scalar `s += a*b` tail is fused */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif

/* reduce_add_16 of the 16 lanes (lo, hi): t = lo + hi (x[i] + x[i+8]),
 * u[i] = t[i] + t[i+4], then (u0 + u2) + (u1 + u3). */
WEFT_AVX2 static inline float hsum16(__m256 lo, __m256 hi)
{
    __m256 t = _mm256_add_ps(lo, hi);
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u)); /* v0 = u0+u2, v1 = u1+u3 */
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

WEFT_AVX2 static inline __m256 load_h8(const weft_half *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* 16 bf16 = 8 pairs: lane l holds elements 2l (low half) and 2l+1 (high). */
WEFT_AVX2 static inline __m256 bf16_even(__m256i u) { return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)); }
WEFT_AVX2 static inline __m256 bf16_odd(__m256i u)
{
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}

/* dpbf16_step on 8 lanes: acc += a[2l+1]*b[2l+1], then acc += a[2l]*b[2l]. */
WEFT_AVX2 static inline __m256 dpbf16_8(__m256 acc, const weft_bf16 *a, const weft_bf16 *b)
{
    __m256i ua = _mm256_loadu_si256((const __m256i *)a), ub = _mm256_loadu_si256((const __m256i *)b);
    acc = _mm256_fmadd_ps(bf16_odd(ua), bf16_odd(ub), acc);
    return _mm256_fmadd_ps(bf16_even(ua), bf16_even(ub), acc);
}

/* ---- single-row dot (backends/cpu/cpu_ref_dot.c dot_f32 / dot_f16 / dot_bf16) ---- */

/* 4 accumulators of 16 lanes over 64-element steps: acc j = (s[2j], s[2j+1])
 * covers elements 16j..16j+15 of each step. */
WEFT_AVX2 static float dot_f32_avx2(const void *wv, const void *xv, int64_t n)
{
    const float *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (int64_t i = 0; i < np; i += 64) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 0), _mm256_loadu_ps(b + i + 0), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
        s4 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 32), _mm256_loadu_ps(b + i + 32), s4);
        s5 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 40), _mm256_loadu_ps(b + i + 40), s5);
        s6 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 48), _mm256_loadu_ps(b + i + 48), s6);
        s7 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 56), _mm256_loadu_ps(b + i + 56), s7);
    }
    /* r = (acc0 + acc2) + (acc1 + acc3), lane-wise */
    __m256 lo = _mm256_add_ps(_mm256_add_ps(s0, s4), _mm256_add_ps(s2, s6));
    __m256 hi = _mm256_add_ps(_mm256_add_ps(s1, s5), _mm256_add_ps(s3, s7));
    float s = hsum16(lo, hi);
    /* tail: products rounded, added in element order; the last n % 4 fused */
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

WEFT_AVX2 static float dot_f16_avx2(const void *wv, const void *xv, int64_t n)
{
    const weft_half *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (int64_t i = 0; i < np; i += 64) {
        s0 = _mm256_fmadd_ps(load_h8(a + i + 0), load_h8(b + i + 0), s0);
        s1 = _mm256_fmadd_ps(load_h8(a + i + 8), load_h8(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_h8(a + i + 16), load_h8(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_h8(a + i + 24), load_h8(b + i + 24), s3);
        s4 = _mm256_fmadd_ps(load_h8(a + i + 32), load_h8(b + i + 32), s4);
        s5 = _mm256_fmadd_ps(load_h8(a + i + 40), load_h8(b + i + 40), s5);
        s6 = _mm256_fmadd_ps(load_h8(a + i + 48), load_h8(b + i + 48), s6);
        s7 = _mm256_fmadd_ps(load_h8(a + i + 56), load_h8(b + i + 56), s7);
    }
    __m256 lo = _mm256_add_ps(_mm256_add_ps(s0, s4), _mm256_add_ps(s2, s6));
    __m256 hi = _mm256_add_ps(_mm256_add_ps(s1, s5), _mm256_add_ps(s3, s7));
    double s = hsum16(lo, hi);
    for (int64_t i = np; i < n; i++) s += (double)(weft_half_to_f32(a[i]) * weft_half_to_f32(b[i]));
    return (float)s;
}

/* c1 = (c1l, c1h) covers elements 0..31 of each 64-element step, c2 32..63. */
WEFT_AVX2 static float dot_bf16_avx2(const void *wv, const void *xv, int64_t n)
{
    const weft_bf16 *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    __m256 c1l = _mm256_setzero_ps(), c1h = c1l, c2l = c1l, c2h = c1l;
    for (int64_t i = 0; i < np; i += 64) {
        c1l = dpbf16_8(c1l, a + i + 0, b + i + 0);
        c1h = dpbf16_8(c1h, a + i + 16, b + i + 16);
        c2l = dpbf16_8(c2l, a + i + 32, b + i + 32);
        c2h = dpbf16_8(c2h, a + i + 48, b + i + 48);
    }
    double s = 0;
    s += (double)hsum16(c1l, c1h);
    s += (double)hsum16(c2l, c2h);
    for (int64_t i = np; i < n; i++) s += (double)(weft_bf16_to_f32(a[i]) * weft_bf16_to_f32(b[i]));
    return (float)s;
}

/* ---- multi-row dot (weft_vec_dot_mm, tinyBLAS order): one 16-lane
 * accumulator, lane l takes elements l, l+16, ... (BF16: pairs 2l, 2l+1 of
 * each 32), then reduce_add_16. Other k fall back to vec_dot, as the
 * reference does. ---- */

WEFT_AVX2 static float dot_mm_f32_avx2(const void *wv, const void *xv, int64_t k)
{
    if (k % 16) return dot_f32_avx2(wv, xv, k);
    const float *a = wv, *b = xv;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < k; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    return hsum16(lo, hi);
}

WEFT_AVX2 static float dot_mm_f16_avx2(const void *wv, const void *xv, int64_t k)
{
    if (k % 16) return dot_f16_avx2(wv, xv, k);
    const weft_half *a = wv, *b = xv;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < k; i += 16) {
        lo = _mm256_fmadd_ps(load_h8(a + i), load_h8(b + i), lo);
        hi = _mm256_fmadd_ps(load_h8(a + i + 8), load_h8(b + i + 8), hi);
    }
    return hsum16(lo, hi);
}

WEFT_AVX2 static float dot_mm_bf16_avx2(const void *wv, const void *xv, int64_t k)
{
    if (k % 32) return dot_bf16_avx2(wv, xv, k);
    const weft_bf16 *a = wv, *b = xv;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < k; i += 32) {
        lo = dpbf16_8(lo, a + i, b + i);
        hi = dpbf16_8(hi, a + i + 16, b + i + 16);
    }
    return hsum16(lo, hi);
}

/* ---- activation converters ---- */

/* F16: the hardware's round-to-nearest-even conversion agrees with
 * weft_f32_to_half on every finite value, infinity, overflow and subnormal;
 * only NaNs differ (hardware keeps the top payload bits, the reference makes
 * every NaN sign|0x7e00), so NaN lanes are replaced by sign|0x7fc00000 first,
 * which converts to exactly sign|0x7e00. */
WEFT_AVX2 static void quant_f16_avx2(const float *x, void *yv, int64_t n)
{
    weft_half *y = yv;
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), qnan), nan);
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = weft_f32_to_half(x[i]);
}

/* BF16: weft_f32_to_bf16 in integer lanes: round to nearest even by adding
 * 0x7fff + lsb; NaNs keep their top bits with the quiet bit (64) set. */
WEFT_AVX2 static void quant_bf16_avx2(const float *x, void *yv, int64_t n)
{
    weft_bf16 *y = yv;
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(64);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(hi, one)), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
        __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(y + i), p);
    }
    for (; i < n; i++) y[i] = weft_f32_to_bf16(x[i]);
}

void weft_cpu_kernels_fill_avx2_f(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->dot[WEFT_TYPE_F32] = dot_f32_avx2;
    k->dot[WEFT_TYPE_F16] = dot_f16_avx2;
    k->dot[WEFT_TYPE_BF16] = dot_bf16_avx2;
    k->dot_mm[WEFT_TYPE_F32] = dot_mm_f32_avx2;
    k->dot_mm[WEFT_TYPE_F16] = dot_mm_f16_avx2;
    k->dot_mm[WEFT_TYPE_BF16] = dot_mm_bf16_avx2;
    k->mm_k_multiple[WEFT_TYPE_F32] = 16;
    k->mm_k_multiple[WEFT_TYPE_F16] = 16;
    k->mm_k_multiple[WEFT_TYPE_BF16] = 32;
    k->quant[WEFT_TYPE_F16] = quant_f16_avx2;
    k->quant[WEFT_TYPE_BF16] = quant_bf16_avx2;
    /* F32 "quantization" is a copy; the reference memcpy is already optimal */
}

#else

void weft_cpu_kernels_fill_avx2_f(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
