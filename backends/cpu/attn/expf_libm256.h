/* glibc's expf for 8 float lanes with AVX2 (attn/expf_libm.h says how glibc
 * computes it): two 4-lane double halves, the table read with a 64-bit
 * gather. Include after <immintrin.h>, inside the x86 guard. */
#ifndef WEFT_CPU_EXPF_LIBM256_H
#define WEFT_CPU_EXPF_LIBM256_H
#include "backends/cpu/cpu_target.h"

#include "backends/cpu/attn/expf_libm.h"

#include <math.h>

static inline WEFT_AVX2 __m256d weft_expf4_pd(__m256d xd)
{
    const __m256d shift = _mm256_set1_pd(WEFT_EXPF_SHIFT);
    const __m256d z = _mm256_mul_pd(_mm256_set1_pd(WEFT_EXPF_INVLN2N), xd);
    const __m256d kd0 = _mm256_add_pd(z, shift);
    const __m256d kd = _mm256_sub_pd(kd0, shift);
    const __m256d r = _mm256_sub_pd(z, kd);
    const __m256i ki = _mm256_castpd_si256(kd0);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256i t = _mm256_i64gather_epi64((const long long *)weft_expf_tab, idx, 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    const __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(WEFT_EXPF_C0), r, _mm256_set1_pd(WEFT_EXPF_C1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d q = _mm256_fmadd_pd(_mm256_set1_pd(WEFT_EXPF_C2), r, _mm256_set1_pd(1.0));
    return _mm256_mul_pd(_mm256_fmadd_pd(p, r2, q), s);
}

/* expf of each lane of x, as glibc's */
static inline WEFT_AVX2 __m256 weft_expf8(__m256 x)
{
    const __m128 lo = _mm256_cvtpd_ps(weft_expf4_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    const __m128 hi = _mm256_cvtpd_ps(weft_expf4_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    const __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
    /* |x| >= 88 (top 12 bits of the magnitude >= 0x42b), inf or NaN: glibc's
     * special cases */
    const __m256i abstop = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    const __m256i big = _mm256_cmpgt_epi32(abstop, _mm256_set1_epi32(WEFT_EXPF_TOP_BIG - 1));
    if (__builtin_expect(_mm256_testz_si256(big, big), 1)) return y;
    const __m256 bigf = _mm256_castsi256_ps(big);
    const __m256 under = _mm256_and_ps(bigf, _mm256_cmp_ps(x, _mm256_set1_ps(WEFT_EXPF_UNDER), _CMP_LT_OQ));
    const __m256 over = _mm256_and_ps(bigf, _mm256_cmp_ps(x, _mm256_set1_ps(WEFT_EXPF_OVER), _CMP_GT_OQ));
    const __m256 nonfinite =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(abstop, _mm256_set1_epi32(0x7f8 - 1))); /* implies big */
    __m256 out = _mm256_blendv_ps(y, _mm256_setzero_ps(), under); /* -inf too */
    out = _mm256_blendv_ps(out, _mm256_set1_ps(INFINITY), over);
    return _mm256_blendv_ps(out, _mm256_add_ps(x, x), _mm256_andnot_ps(under, nonfinite)); /* NaN, +inf */
}

static WEFT_AVX2 void weft_expf8_arrays(const float *in, float *out)
{
    _mm256_store_ps(out, weft_expf8(_mm256_load_ps(in)));
    _mm256_store_ps(out + 8, weft_expf8(_mm256_load_ps(in + 8)));
}

/* whether weft_expf8 equals this process's libm expf */
static inline bool weft_cpu_expf8_matches_libm(void) { return weft_cpu_vexpf_matches_libm(weft_expf8_arrays); }

#endif
