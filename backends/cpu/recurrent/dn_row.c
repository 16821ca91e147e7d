/* DELTA_NET's work for one (row, v head) of a sequence (backends/backend.h; ops/ops_recurrent.c
 * calls it): the decay of the S x S state, then per state row j the delta and the output,
 *   M *= decay;  d = (v[j] - dot(M[j], k)) * b;  M[j][i] = fmaf(k[i], d, M[j][i]);
 *   out[j] = dot(M[j], q) * qscale
 * with dot as ggml's AVX ggml_vec_dot_f32: 4 accumulators of 8 lanes over 32-element chunks
 * (an FMA each), lanes (acc0 + acc2) + (acc1 + acc3), then t_m + t_{m+4}, then
 * (u0 + u1) + (u2 + u3), the n % 32 tail's products added in double.
 *
 * weft_cpu_dn_row_ref is the portable form (the scalar table's entry; with a compiler that
 * does not contract, fmaf is a libm call: exact, slow); the AVX2 form uses the very
 * instructions ggml's dot does, so both give the same bits. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#include <math.h>

static float dot_ref(const float *x, const float *y, int64_t n)
{
    const int64_t n32 = n & ~(int64_t)31;
    float acc[4][8] = {{0}};
    for (int64_t c = 0; c < n32; c += 32)
        for (int a = 0; a < 4; a++)
            for (int l = 0; l < 8; l++) acc[a][l] = fmaf(x[c + 8 * a + l], y[c + 8 * a + l], acc[a][l]);
    float t[8];
    for (int l = 0; l < 8; l++) t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    float u[4];
    for (int m = 0; m < 4; m++) u[m] = t[m] + t[m + 4];
    double s = (double)((u[0] + u[1]) + (u[2] + u[3]));
    for (int64_t i = n32; i < n; i++) s += (double)(x[i] * y[i]);
    return (float)s;
}

void weft_cpu_dn_row_ref(float *M, const float *q, const float *k, const float *v, float b, float decay, float qscale,
                         float *out, int64_t S)
{
    for (int64_t e = 0; e < S * S; e++) M[e] *= decay;
    for (int64_t j = 0; j < S; j++) {
        float *m = M + j * S;
        const float d = (v[j] - dot_ref(m, k, S)) * b;
        for (int64_t i = 0; i < S; i++) m[i] = fmaf(k[i], d, m[i]);
        out[j] = dot_ref(m, q, S) * qscale;
    }
}

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
#include <immintrin.h>

WEFT_AVX2 static inline float dot_avx2(const float *x, const float *y, int64_t n)
{
    const int64_t n32 = n & ~(int64_t)31;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < n32; c += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(y + c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), _mm256_loadu_ps(y + c + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 16), _mm256_loadu_ps(y + c + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 24), _mm256_loadu_ps(y + c + 24), a3);
    }
    const __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    float w[4];
    _mm_storeu_ps(w, u);
    double s = (double)((w[0] + w[1]) + (w[2] + w[3]));
    for (int64_t i = n32; i < n; i++) s += (double)(x[i] * y[i]);
    return (float)s;
}

WEFT_AVX2 static void dn_row_avx2(float *M, const float *q, const float *k, const float *v, float b, float decay,
                                  float qscale, float *out, int64_t S)
{
    const int64_t S8 = S & ~(int64_t)7;
    const __m256 dv = _mm256_set1_ps(decay);
    for (int64_t j = 0; j < S; j++) {
        float *m = M + j * S;
        /* the decay, row by row (elementwise: the same products in any order) */
        int64_t i = 0;
        for (; i < S8; i += 8) _mm256_storeu_ps(m + i, _mm256_mul_ps(_mm256_loadu_ps(m + i), dv));
        for (; i < S; i++) m[i] *= decay;
        const float d = (v[j] - dot_avx2(m, k, S)) * b;
        const __m256 dd = _mm256_set1_ps(d);
        for (i = 0; i < S8; i += 8)
            _mm256_storeu_ps(m + i, _mm256_fmadd_ps(_mm256_loadu_ps(k + i), dd, _mm256_loadu_ps(m + i)));
        for (; i < S; i++) m[i] = fmaf(k[i], d, m[i]);
        out[j] = dot_avx2(m, q, S) * qscale;
    }
}

void weft_cpu_kernels_fill_avx2_dn(struct weft_cpu_kernels *kt, bool vnni)
{
    (void)vnni;
    kt->dn_row = dn_row_avx2;
}
#endif
