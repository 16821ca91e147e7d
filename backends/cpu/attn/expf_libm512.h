/* glibc's expf (2.27 and later: ARM optimized-routines' expf, the one the
 * CPU softmax calls) for 16 float lanes with AVX-512, step for step in
 * double as glibc computes it (shaders/expf_libm.glsl describes the same
 * steps for the Vulkan exact attention). With N = 32:
 *   z = x * N/ln2, kd = (z + 1.5*2^52) - 1.5*2^52 (z rounded to an integer,
 *   ties to even), r = z - kd, s = 2^(k/N) from the table of 2^(i/N) whose
 *   bits have i << 47 taken off (adding k << 47 then scales by
 *   2^floor(k/N)), y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) (glibc's FMA
 *   build contracts those three steps), result float(y * s);
 *   -inf -> 0, NaN and +inf -> x + x, x > 88.72 -> inf, x < -103.97 -> 0.
 * Whether it equals the libm this process runs on is not assumed:
 * weft_cpu_expf16_matches_libm() compares it on a sweep of inputs, and the
 * attention kernel calls it only where that holds (libm's expf otherwise).
 * Include after <immintrin.h>, inside the x86 guard. */
#ifndef WEFT_CPU_EXPF_LIBM512_H
#define WEFT_CPU_EXPF_LIBM512_H
#include "backends/cpu/cpu_target.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static const uint64_t weft_expf16_tab[32] __attribute__((aligned(64))) = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

static inline WEFT_AVX512 __m512d weft_expf8_pd(__m512d xd)
{
    const __m512d shift = _mm512_set1_pd(0x1.8p52);
    const __m512d z = _mm512_mul_pd(_mm512_set1_pd(0x1.71547652b82fep+0 * 32), xd);
    const __m512d kd0 = _mm512_add_pd(z, shift);
    const __m512d kd = _mm512_sub_pd(kd0, shift);
    const __m512d r = _mm512_sub_pd(z, kd);
    const __m512i ki = _mm512_castpd_si512(kd0);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i *tv = (const __m512i *)weft_expf16_tab;
    const __m512i lo = _mm512_permutex2var_epi64(_mm512_load_si512(tv), idx, _mm512_load_si512(tv + 1));
    const __m512i hi = _mm512_permutex2var_epi64(_mm512_load_si512(tv + 2), idx, _mm512_load_si512(tv + 3));
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32), r,
                                      _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d q = _mm512_fmadd_pd(_mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32), r, _mm512_set1_pd(1.0));
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
    const __mmask16 big = _mm512_cmpge_epu32_mask(abstop, _mm512_set1_epi32(0x42b));
    if (__builtin_expect(!big, 1)) return y;
    __m512 out = y;
    const __mmask16 under = _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
    const __mmask16 over = _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
    const __mmask16 nonfinite = _mm512_mask_cmpge_epu32_mask(big, abstop, _mm512_set1_epi32(0x7f8));
    out = _mm512_mask_mov_ps(out, under, _mm512_setzero_ps());          /* -inf too */
    out = _mm512_mask_mov_ps(out, over, _mm512_set1_ps(INFINITY));
    out = _mm512_mask_mov_ps(out, nonfinite & ~under, _mm512_add_ps(x, x)); /* NaN, +inf */
    return out;
}

/* Whether weft_expf16 equals this process's libm expf: every float in
 * [-104, 0] at a stride, a stretch of consecutive floats near 0, -1 and -88,
 * and the special values. */
static inline WEFT_AVX512 bool weft_cpu_expf16_matches_libm(void)
{
    float in[16] __attribute__((aligned(64))), out[16] __attribute__((aligned(64)));
    int n = 0;
    bool ok = true;
    const float specials[] = {0.0f, -0.0f, -INFINITY, INFINITY, NAN, -NAN, 88.0f, 88.72f, 89.0f, -87.9f,
                              -88.0f, -103.0f, -103.28f, -103.97f, -104.0f, -150.0f, 1.0f, 1e-30f, -1e-30f};
    uint32_t start = 0, stop = 0, step = 1;
    for (int phase = 0; phase < 5 && ok; phase++) {
        switch (phase) {
        case 0: start = 0x80000000u; stop = 0xc2d00000u; step = 40009; break; /* -0 .. -104, strided */
        case 1: start = 0x80000000u; stop = 0x80001000u; step = 1; break;     /* tiny negatives */
        case 2: start = 0xbf7ff800u; stop = 0xbf800800u; step = 1; break;     /* around -1 */
        case 3: start = 0xc2affc00u; stop = 0xc2b00400u; step = 1; break;     /* around -88 */
        default: start = 0; stop = sizeof specials / sizeof specials[0]; step = 1; break;
        }
        for (uint32_t u = start; u < stop && ok; u += step) {
            float f;
            if (phase == 4) f = specials[u];
            else memcpy(&f, &u, 4);
            in[n++] = f;
            if (n < 16 && !(u + step >= stop)) continue;
            for (int i = n; i < 16; i++) in[i] = in[0];
            _mm512_store_ps(out, weft_expf16(_mm512_load_ps(in)));
            for (int i = 0; i < n; i++) {
                const float e = expf(in[i]);
                if (memcmp(&e, &out[i], 4) != 0 && !(isnan(e) && isnan(out[i]))) ok = false;
            }
            n = 0;
        }
    }
    return ok;
}

#endif
