/* SwiGLU (out = silu(gate) * up) in AVX-512 and AVX2, bit-identical to
 * weft_cpu_swiglu_ref in cpu_kernels.c, which mirrors ggml_vec_swiglu_f32's
 * AVX512F+DQ branch one lane at a time.
 *
 * AVX-512 uses ggml's own instructions: the fmaf calls are _mm512_fmadd_ps /
 * _mm512_fnmadd_ps (one rounding each, as fmaf), ldexpf(j, n) is
 * _mm512_scalef_ps(j, n) (n is an integer in [-192, 192] on every lane that
 * is not blended away, and both round the scaled result once, to nearest
 * even, subnormals included), and |n| > 192 takes the same 0 / inf blend.
 *
 * AVX2 has no scalef: j * 2^n is formed as (j * 2^n1) * 2^n2 with
 * n1 = n >> 1, n2 = n - n1, both in [-96, 96]. j is in about [0.7, 1.5], so
 * the first product is a normal float and exact, and only the second one
 * rounds: the same single rounding as ldexpf. NaN lanes (n NaN) convert to
 * INT_MIN, whose halves give the factor 1.0, so the NaN passes unchanged.
 *
 * Both process 16-element chunks and hand the n % 16 leftovers to the
 * reference itself (libm expf there). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
#include <immintrin.h>
#include <math.h>

/* ggml_v_expf (AVX512F+DQ) */
WEFT_AVX512 static inline __m512 expf_avx512(__m512 x)
{
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d)) return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}

WEFT_AVX512 static void swiglu_avx512(float *out, const float *gate, const float *up, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(gate + i);
        const __m512 e = expf_avx512(_mm512_sub_ps(zero, x));
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    if (i < n) weft_cpu_swiglu_ref(out + i, gate + i, up + i, n - i);
}

/* the same, 8 lanes, scalef emulated (see the top) */
WEFT_AVX2 static inline __m256 expf_avx2(__m256 x)
{
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 d = _mm256_cmp_ps(absn, _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvttps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    if (_mm256_testz_ps(d, d)) return res;
    const __m256 zero = _mm256_setzero_ps();
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), zero, _mm256_cmp_ps(n, zero, _CMP_LE_OQ));
    return _mm256_blendv_ps(res, alt, d);
}

WEFT_AVX2 static void swiglu_avx2(float *out, const float *gate, const float *up, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {  /* 16-element chunks, as the reference, in two halves */
        for (int h = 0; h < 16; h += 8) {
            const __m256 x = _mm256_loadu_ps(gate + i + h);
            const __m256 e = expf_avx2(_mm256_sub_ps(zero, x));
            const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(out + i + h, _mm256_mul_ps(s, _mm256_loadu_ps(up + i + h)));
        }
    }
    if (i < n) weft_cpu_swiglu_ref(out + i, gate + i, up + i, n - i);
}

void weft_cpu_kernels_fill_avx512_swiglu(struct weft_cpu_kernels *k, bool vnni) { (void)vnni; k->swiglu = swiglu_avx512; }
void weft_cpu_kernels_fill_avx2_swiglu(struct weft_cpu_kernels *k, bool vnni) { (void)vnni; k->swiglu = swiglu_avx2; }
#else
void weft_cpu_kernels_fill_avx512_swiglu(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }
void weft_cpu_kernels_fill_avx2_swiglu(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
