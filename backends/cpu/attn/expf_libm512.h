/* glibc's expf for 16 float lanes with AVX-512 (attn/expf_libm.h says how
 * glibc computes it). Include after <immintrin.h>, inside the x86 guard. */
#ifndef WEFT_CPU_EXPF_LIBM512_H
#define WEFT_CPU_EXPF_LIBM512_H
#include "backends/cpu/cpu_target.h"

#include "backends/cpu/attn/expf_libm.h"

#include <math.h>

static inline WEFT_AVX512 __m512d weft_expf8_pd(__m512d xd)
{
    const __m512d shift = _mm512_set1_pd(WEFT_EXPF_SHIFT);
    const __m512d z = _mm512_mul_pd(_mm512_set1_pd(WEFT_EXPF_INVLN2N), xd);
    const __m512d kd0 = _mm512_add_pd(z, shift);
    const __m512d kd = _mm512_sub_pd(kd0, shift);
    const __m512d r = _mm512_sub_pd(z, kd);
    const __m512i ki = _mm512_castpd_si512(kd0);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i *tv = (const __m512i *)weft_expf_tab;
    const __m512i lo = _mm512_permutex2var_epi64(_mm512_load_si512(tv), idx, _mm512_load_si512(tv + 1));
    const __m512i hi = _mm512_permutex2var_epi64(_mm512_load_si512(tv + 2), idx, _mm512_load_si512(tv + 3));
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(WEFT_EXPF_C0), r,
                                      _mm512_set1_pd(WEFT_EXPF_C1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d q = _mm512_fmadd_pd(_mm512_set1_pd(WEFT_EXPF_C2), r, _mm512_set1_pd(1.0));
    return _mm512_mul_pd(_mm512_fmadd_pd(p, r2, q), s);
}

/* expf of each lane of x, as glibc's */
static inline WEFT_AVX512 __m512 weft_expf16(__m512 x)
{
    const __m256 lo = _mm256_castpd_ps(_mm256_castsi256_pd(_mm512_castsi512_si256(_mm512_castps_si512(x))));
    const __m256 hi = _mm512_extractf32x8_ps(x, 1);
    const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(weft_expf8_pd(_mm512_cvtps_pd(lo)))),
                                        _mm512_cvtpd_ps(weft_expf8_pd(_mm512_cvtps_pd(hi))), 1);
    /* |x| >= 88 (top 12 bits of the magnitude >= 0x42b), inf or NaN: glibc's
     * special cases */
    const __m512i ux = _mm512_castps_si512(x);
    const __m512i abstop = _mm512_and_si512(_mm512_srli_epi32(ux, 20), _mm512_set1_epi32(0x7ff));
    const __mmask16 big = _mm512_cmpge_epu32_mask(abstop, _mm512_set1_epi32(WEFT_EXPF_TOP_BIG));
    if (__builtin_expect(!big, 1)) return y;
    __m512 out = y;
    const __mmask16 under = _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(WEFT_EXPF_UNDER), _CMP_LT_OQ);
    const __mmask16 over = _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(WEFT_EXPF_OVER), _CMP_GT_OQ);
    const __mmask16 nonfinite = _mm512_mask_cmpge_epu32_mask(big, abstop, _mm512_set1_epi32(0x7f8));
    out = _mm512_mask_mov_ps(out, under, _mm512_setzero_ps());          /* -inf too */
    out = _mm512_mask_mov_ps(out, over, _mm512_set1_ps(INFINITY));
    out = _mm512_mask_mov_ps(out, nonfinite & ~under, _mm512_add_ps(x, x)); /* NaN, +inf */
    return out;
}

static WEFT_AVX512 void weft_expf16_arrays(const float *in, float *out)
{
    _mm512_store_ps(out, weft_expf16(_mm512_load_ps(in)));
}

/* whether weft_expf16 equals this process's libm expf */
static inline bool weft_cpu_expf16_matches_libm(void) { return weft_cpu_vexpf_matches_libm(weft_expf16_arrays); }

#endif
