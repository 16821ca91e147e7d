/* SSM_CONV's taps for channels [c0, c1) of one row (backends/backend.h; ops/ops_recurrent.c
 * calls it, then applies SiLU): channel c's kept inputs win[0..K-2] (state, the oldest first)
 * and x[c],
 *   y[c] = win[0] · w[c][0], then y = fmaf(win[i], w[c][i], y) for i = 1 .. K-2, then
 *   y = fmaf(x[c], w[c][K-1], y); the state then keeps win[1..K-2], x[c].
 * weft_cpu_conv_row_ref is the portable form (the scalar table's entry); the AVX2 form takes
 * eight channels at a time with the same single-rounding FMAs: the same bits. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#include <math.h>

void weft_cpu_conv_row_ref(float *y, float *st, const float *x, const float *w, size_t w_nb1, int64_t C, int64_t K,
                           int64_t c0, int64_t c1)
{
    for (int64_t c = c0; c < c1; c++) {
        const float *wc = (const float *)((const unsigned char *)w + (size_t)c * w_nb1);
        const float xv = x[c];
        float v = st[c] * wc[0];
        for (int64_t i = 1; i < K - 1; i++) v = fmaf(st[i * C + c], wc[i], v);
        v = fmaf(xv, wc[K - 1], v);
        for (int64_t i = 0; i + 1 < K - 1; i++) st[i * C + c] = st[(i + 1) * C + c];
        st[(K - 2) * C + c] = xv;
        y[c - c0] = v;
    }
}

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
#include <immintrin.h>

WEFT_AVX2 static void conv_row_avx2(float *y, float *st, const float *x, const float *w, size_t w_nb1, int64_t C,
                                    int64_t K, int64_t c0, int64_t c1)
{
    int64_t c = c0;
    /* channel c's tap i at w + c·w_nb1 + 4i: a gather of eight channels per tap (w_nb1 < 2^31 / 8) */
    if (w_nb1 % 4 == 0 && w_nb1 / 4 < (1u << 27)) {
        const int32_t stride = (int32_t)(w_nb1 / 4);
        const __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
        for (; c + 8 <= c1; c += 8) {
            const float *wb = (const float *)((const unsigned char *)w + (size_t)c * w_nb1);
            const __m256 xv = _mm256_loadu_ps(x + c);
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(st + c), _mm256_i32gather_ps(wb, lanes, 4));
            for (int64_t i = 1; i < K - 1; i++)
                v = _mm256_fmadd_ps(_mm256_loadu_ps(st + i * C + c), _mm256_i32gather_ps(wb + i, lanes, 4), v);
            v = _mm256_fmadd_ps(xv, _mm256_i32gather_ps(wb + K - 1, lanes, 4), v);
            for (int64_t i = 0; i + 1 < K - 1; i++) _mm256_storeu_ps(st + i * C + c, _mm256_loadu_ps(st + (i + 1) * C + c));
            _mm256_storeu_ps(st + (K - 2) * C + c, xv);
            _mm256_storeu_ps(y + (c - c0), v);
        }
    }
    if (c < c1) weft_cpu_conv_row_ref(y + (c - c0), st, x, w, w_nb1, C, K, c, c1);
}

void weft_cpu_kernels_fill_avx2_conv(struct weft_cpu_kernels *kt, bool vnni)
{
    (void)vnni;
    kt->conv_row = conv_row_avx2;
}
#endif
