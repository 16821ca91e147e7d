/* AVX-512 VNNI prefill tiles (the gemm entry, see cpu_kernels.h) for Q4_1,
 * bit-identical to the one-row dot (tests/cpu/test_cpu_gemm.c).
 *
 * As the Q8_0 zmm tile in q32/q32_gemm_avx2.c: two activation rows per zmm (low
 * half row j, high half row j + 1), each weight block broadcast to both
 * halves, so every 256-bit half is the one-row kernel's computation for its
 * own output: int32 lane l = the exact sum over elements 4l..4l+3 (the
 * block's 32 nibbles unpacked in element order, unsigned, straight into
 * vpdpbusd against the signed activations), acc = fma(dw*dx, float(lane),
 * acc) per block, hsum_float_8 at the end; plus the per-output scalar chain
 * summs = fma(m, s, summs) (eight activation rows per ymm, one ymm per weight
 * row, in a second pass over the blocks), added last. A tile is up to 4 weight rows x 8 activation rows. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>
#include <string.h>

#include "base/types.h"

#define AI static inline __attribute__((always_inline))

AI WEFT_AVX512_VNNI float h2f(weft_half h) { return _cvtsh_ss(h); }

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), as ggml's hsum_float_8 */
AI WEFT_AVX512_VNNI float hsum_float_8(__m256 x)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* a Q4_1 block's 32 values (0..15) in element order, in both 256-bit halves */
AI WEFT_AVX512_VNNI __m512i nibbles2(const uint8_t qs[16])
{
    const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs));
    return _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
}

AI WEFT_AVX512_VNNI void q4_1_tile_z(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int nr, int64_t nb, float *out,
                          size_t ldo, const int MR, const int NP)
{
    const struct weft_block_q4_1 *wr[4];
    const struct weft_block_q8_1 *xr[8];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q4_1 *)(w + i * ws);
    for (int j = 0; j < 8; j++) xr[j] = (const struct weft_block_q8_1 *)(x + (j < nr ? j : nr - 1) * xs);
    __m512 acc[4][4];
    __m256 sm[4];
    for (int i = 0; i < MR; i++) {
        sm[i] = _mm256_setzero_ps();
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        __m512 dx[4];
        __m512i xx[4];
        for (int p = 0; p < NP; p++) {
            const struct weft_block_q8_1 *x0 = &xr[2 * p][b], *x1 = &xr[2 * p + 1][b];
            dx[p] = _mm512_insertf32x8(_mm512_set1_ps(h2f(x0->d)), _mm256_set1_ps(h2f(x1->d)), 1);
            xx[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0->qs)),
                                       _mm256_loadu_si256((const __m256i *)x1->qs), 1);
        }
        for (int i = 0; i < MR; i++) {
            const __m512i wv = nibbles2(wr[i][b].qs);
            const __m512 dw = _mm512_set1_ps(h2f(wr[i][b].d));
            for (int p = 0; p < NP; p++) {
                const __m512i q = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xx[p]);
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[p]), _mm512_cvtepi32_ps(q), acc[i][p]);
            }
        }
    }
    /* the summs chains in a pass of their own (fewer live registers above) */
    for (int64_t b = 0; b < nb; b++) {
        const __m256 sx = _mm256_cvtph_ps(_mm_setr_epi16((short)xr[0][b].s, (short)xr[1][b].s, (short)xr[2][b].s,
                                                         (short)xr[3][b].s, (short)xr[4][b].s, (short)xr[5][b].s,
                                                         (short)xr[6][b].s, (short)xr[7][b].s));
        for (int i = 0; i < MR; i++) sm[i] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wr[i][b].m)), sx, sm[i]);
    }
    for (int i = 0; i < MR; i++) {
        float s[8];
        _mm256_storeu_ps(s, sm[i]);
        for (int p = 0; p < NP; p++) {
            out[2 * p * ldo + i] = hsum_float_8(_mm512_castps512_ps256(acc[i][p])) + s[2 * p];
            if (2 * p + 1 < nr)
                out[(2 * p + 1) * ldo + i] = hsum_float_8(_mm512_extractf32x8_ps(acc[i][p], 1)) + s[2 * p + 1];
        }
    }
}

#define ZCASE(m, q) case (m) * 8 + (q): q4_1_tile_z(wp, ws, xp, xs, nr, nb, o, ldo, m, q); break;
#define ZCASES(m) ZCASE(m, 1) ZCASE(m, 2) ZCASE(m, 3) ZCASE(m, 4)

static WEFT_AVX512_VNNI void gemm_q4_1_z(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                              float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_1;
    for (int j = 0; j < nx; j += 8) {
        const int nr = nx - j < 8 ? nx - j : 8;
        for (int i = 0; i < nw; i += 4) {
            const int mr = nw - i < 4 ? nw - i : 4;
            const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws;
            const uint8_t *xp = (const uint8_t *)x + (size_t)j * xs;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + (nr + 1) / 2) {
                ZCASES(1) ZCASES(2) ZCASES(3) ZCASES(4)
            default: break;
            }
        }
    }
}

void weft_cpu_kernels_fill_avx512_gemm(struct weft_cpu_kernels *k, bool vnni)
{
    if (vnni) k->gemm[WEFT_TYPE_Q4_1] = gemm_q4_1_z;
}

#else

void weft_cpu_kernels_fill_avx512_gemm(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
