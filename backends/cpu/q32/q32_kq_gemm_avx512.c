/* AVX-512 VNNI prefill tiles on plain rows (the gemm entry) for Q5_0 and
 * Q4_K (its section below), bit-identical to the one-row dot (tests/cpu/test_cpu_gemm.c).
 *
 * The reference (ggml's AVX2 Q5_0 dot and tinyBLAS) keeps eight float lanes
 * per output: lane l = the exact int sum of v * x over elements 4l..4l+3 of
 * the block (v = (nibble | high bit << 4) - 16), acc = fma(dw * dx,
 * float(lane), acc), hsum_float_8 at the end. Here two activation rows share
 * a zmm (row j in the low 256 bits, j + 1 in the high), the weight block is
 * unpacked once to u = v + 16 (0..31, element order, both halves) and
 * vpdpbusd(corr, u, x) with corr = -16 * (the 4-byte lane sums of x) gives
 * the exact lane. The activation side (x pairs, corr, dx in both halves)
 * is laid out once per call for a chunk of up to 8 rows in a stack buffer
 * and serves every weight row of the call. Tiles: 4 weight rows x up to 4
 * row pairs. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "base/types.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>

#include "backends/cpu/packed/packed.h"

enum { UNIT = 192, XBUF = 48 * 1024 }; /* bytes per pair-block: x | corr | dx */

/* pairs of rows j0.. (nr real rows, the last repeated) -> units of UNIT bytes per block */
static WEFT_AVX512_VNNI void prep_q8_0_pairs(const uint8_t *x, size_t xs, int nr, int64_t nb, uint8_t *dst, int corr_mul)
{
    const __m512i cm = _mm512_set1_epi8((char)corr_mul);
    for (int p = 0; 2 * p < nr; p++) {
        const struct weft_block_q8_0 *r0 = (const struct weft_block_q8_0 *)(x + (size_t)(2 * p) * xs);
        const struct weft_block_q8_0 *r1 =
            (const struct weft_block_q8_0 *)(x + (size_t)(2 * p + 1 < nr ? 2 * p + 1 : 2 * p) * xs);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *u = dst + ((size_t)p * nb + b) * UNIT;
            const __m512i xx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)r0[b].qs)),
                                                  _mm256_loadu_si256((const __m256i *)r1[b].qs), 1);
            _mm512_store_si512((void *)u, xx);
            _mm512_store_si512((void *)(u + 64), _mm512_sub_epi32(_mm512_setzero_si512(),
                                                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), cm, xx)));
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(r0[b].d)), _mm256_set1_ps(_cvtsh_ss(r1[b].d)), 1);
            _mm512_store_ps((void *)(u + 128), dx);
        }
    }
}

/* ---- Q5_0 ---- */

/* u = v + 16 of a Q5_0 block, elements in order, in both 256-bit halves */
AI WEFT_AVX512_VNNI __m512i q5_0_u(const struct weft_block_q5_0 *b)
{
    const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b->qs));
    const __m512i nib =
        _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const __mmask64 hb = _cvtu64_mask64((uint64_t)qh | (uint64_t)qh << 32);
    return _mm512_mask_add_epi8(nib, hb, nib, _mm512_set1_epi8(16));
}

AI WEFT_AVX512_VNNI void q5_0_tile(const uint8_t *w, size_t ws, const uint8_t *xu, int64_t nb, float *out, size_t ldo, int nr,
                        const int MR, const int NP)
{
    const struct weft_block_q5_0 *wr[4];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q5_0 *)(w + (size_t)i * ws);
    __m512 acc[4][4];
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < MR; i++) {
            const __m512i u = q5_0_u(&wr[i][b]);
            const __m512 dw = _mm512_set1_ps(_cvtsh_ss(wr[i][b].d));
            for (int p = 0; p < NP; p++) {
                const uint8_t *ub = xu + ((size_t)p * nb + b) * UNIT;
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_load_ps((const void *)(ub + 128))),
                                            _mm512_cvtepi32_ps(lanes_corr(ub, u)), acc[i][p]);
            }
        }
    }
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < MR; i += 2) {
            float t[16] __attribute__((aligned(64)));
            _mm512_store_ps(t, hsum8_x4(acc[i][p], acc[i + 1 < MR ? i + 1 : i][p]));
            out[2 * p * ldo + i] = t[0];
            if (2 * p + 1 < nr) out[(2 * p + 1) * ldo + i] = t[4];
            if (i + 1 < MR) {
                out[2 * p * ldo + i + 1] = t[8];
                if (2 * p + 1 < nr) out[(2 * p + 1) * ldo + i + 1] = t[12];
            }
        }
}

#define QCASE(m, q) case (m) * 8 + (q): q5_0_tile(wp, ws, xp, nb, o, ldo, nr, m, q); break;
#define QCASES(m) QCASE(m, 1) QCASE(m, 2) QCASE(m, 3) QCASE(m, 4)

static WEFT_AVX512_VNNI void gemm_q5_0_z(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                              float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK5_0;
    uint8_t xbuf[XBUF] __attribute__((aligned(64)));
    int pairs = (int)(XBUF / ((size_t)nb * UNIT)); /* row pairs per chunk */
    if (pairs > 4) pairs = 4;
    if (pairs < 1) { /* rows too long for the buffer: no tiling, same results */
        for (int j = 0; j < nx; j++)
            for (int i = 0; i < nw; i++)
                out[(size_t)j * ldo + i] = weft_vec_dot(WEFT_TYPE_Q5_0, (const uint8_t *)w + (size_t)i * ws,
                                                        (const uint8_t *)x + (size_t)j * xs, n);
        return;
    }
    for (int j = 0; j < nx; j += 2 * pairs) {
        const int nr = nx - j < 2 * pairs ? nx - j : 2 * pairs;
        prep_q8_0_pairs((const uint8_t *)x + (size_t)j * xs, xs, nr, nb, xbuf, 16);
        for (int i = 0; i < nw; i += 4) {
            const int mr = nw - i < 4 ? nw - i : 4;
            const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = xbuf;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + (nr + 1) / 2) {
                QCASES(1) QCASES(2) QCASES(3) QCASES(4)
            default: break;
            }
        }
    }
}

/* ---- Q4_K ----
 *
 * Mirrors dot_q4_k_avx2 (kquant/kq_dot_avx2.c) per output: int32 lane l sums the
 * elements e % 8 == l times the sub-block scale (bytes shuffled to
 * 0,8,1,9,.. within 16-byte halves, maddubs, the two sub-blocks' int16 sums
 * interleaved, one vpdpwssd with both scales), then per block acc = acc +
 * d * float(lane) (mul, add) with d = dw * xd, sumf = sumf - dmin * xd *
 * summ, and at the end sumf + lane 0 + ... + lane 7 in order. Two activation
 * rows per zmm (weights broadcast to both halves); their shuffled qs, xd in
 * both halves and pairwise bsums are laid out once per call. Tiles: 2
 * weight rows x 2 row pairs. */

enum { KUNIT = 640 }; /* per pair and super-block: ylo/yhi x 4 (512), xd (64), bs (2 x 8 int32) */

static WEFT_AVX512_VNNI void prep_q8_k_pairs(const uint8_t *x, size_t xs, int nr, int64_t nb, uint8_t *dst)
{
    const __m512i pair8 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15));
    for (int p = 0; 2 * p < nr; p++) {
        const struct weft_block_q8_k *r[2] = {
            (const struct weft_block_q8_k *)(x + (size_t)(2 * p) * xs),
            (const struct weft_block_q8_k *)(x + (size_t)(2 * p + 1 < nr ? 2 * p + 1 : 2 * p) * xs)};
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *u = dst + ((size_t)p * nb + b) * KUNIT;
            for (int k = 0; k < 8; k++) { /* k = 2c (low nibbles' 32 elements), 2c + 1 (high) */
                const __m512i y = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r[0][b].qs + 32 * k))),
                    _mm256_loadu_si256((const __m256i *)(r[1][b].qs + 32 * k)), 1);
                _mm512_store_si512((void *)(u + 64 * k), _mm512_shuffle_epi8(y, pair8));
            }
            _mm512_store_ps((void *)(u + 512), _mm512_insertf32x8(_mm512_set1_ps(r[0][b].d), _mm256_set1_ps(r[1][b].d), 1));
            int32_t bs[16];
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 8; j++) bs[8 * h + j] = r[h][b].bsums[2 * j] + r[h][b].bsums[2 * j + 1];
            memcpy(u + 576, bs, 64);
        }
    }
}

/* Q4_K scales[12] -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15), as weft_k4_scale_min (base/quant_blocks.h) */
static inline void k4_scales(const uint8_t scales[WEFT_K_SCALE_SIZE], uint32_t u[4])
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = uaux;
    u[0] &= kmask1;
}

AI WEFT_AVX512_VNNI void q4k_tile(const uint8_t *w, size_t ws, const uint8_t *xu, int64_t nb, float *out, size_t ldo, int nr,
                       const int MR, const int NP)
{
    const struct weft_block_q4_k *wr[2];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q4_k *)(w + (size_t)i * ws);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i pair8 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15));
    const __m512i ix1 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), ix2 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    __m512 acc[2][2];
    float sumf[2][4] = {{0}};
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        uint32_t u[2][4];
        for (int i = 0; i < MR; i++) k4_scales(wr[i][b].scales, u[i]);
        __m512i a03[2][2], a47[2][2];
        for (int i = 0; i < MR; i++)
            for (int p = 0; p < NP; p++) a03[i][p] = a47[i][p] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < MR; i++) {
                const uint8_t *sc = (const uint8_t *)u[i];
                const __m512i q4 = _mm512_shuffle_epi8(
                    _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wr[i][b].qs + 32 * c))), pair8);
                const __m512i alo = _mm512_and_si512(q4, m4), ahi = _mm512_and_si512(_mm512_srli_epi16(q4, 4), m4);
                const __m512i scp = _mm512_set1_epi32((int)((uint32_t)sc[2 * c] | (uint32_t)sc[2 * c + 1] << 16));
                for (int p = 0; p < NP; p++) {
                    const uint8_t *ub = xu + ((size_t)p * nb + b) * KUNIT + 128 * c;
                    const __m512i plo = _mm512_maddubs_epi16(alo, _mm512_load_si512((const void *)ub));
                    const __m512i phi = _mm512_maddubs_epi16(ahi, _mm512_load_si512((const void *)(ub + 64)));
                    a03[i][p] = _mm512_dpwssd_epi32(a03[i][p], _mm512_unpacklo_epi16(plo, phi), scp);
                    a47[i][p] = _mm512_dpwssd_epi32(a47[i][p], _mm512_unpackhi_epi16(plo, phi), scp);
                }
            }
        for (int i = 0; i < MR; i++) {
            const float dw = _cvtsh_ss(wr[i][b].d), dmin = _cvtsh_ss(wr[i][b].dmin);
            const uint8_t *mins = (const uint8_t *)u[i] + 8;
            for (int p = 0; p < NP; p++) {
                const uint8_t *ub = xu + ((size_t)p * nb + b) * KUNIT;
                const __m512i lanes = _mm512_add_epi32(_mm512_permutex2var_epi64(a03[i][p], ix1, a47[i][p]),
                                                       _mm512_permutex2var_epi64(a03[i][p], ix2, a47[i][p]));
                const __m512 xd = _mm512_load_ps((const void *)(ub + 512));
                acc[i][p] = _mm512_add_ps(acc[i][p], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(dw), xd),
                                                                   _mm512_cvtepi32_ps(lanes)));
                for (int h = 0; h < 2; h++) {
                    const int32_t *bs = (const int32_t *)(ub + 576) + 8 * h;
                    int summ = 0;
                    for (int j = 0; j < 8; j++) summ += bs[j] * mins[j];
                    float xdh;
                    memcpy(&xdh, ub + 512 + 32 * h, 4);
                    sumf[i][2 * p + h] -= dmin * xdh * (float)summ;
                }
            }
        }
    }
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++) {
            float t[16] __attribute__((aligned(64)));
            _mm512_store_ps(t, acc[i][p]);
            for (int h = 0; h < 2 && 2 * p + h < nr; h++) {
                float s = sumf[i][2 * p + h];
                for (int l = 0; l < 8; l++) s += t[8 * h + l];
                out[(size_t)(2 * p + h) * ldo + i] = s;
            }
        }
}

#define KCASE(m, q) case (m) * 8 + (q): q4k_tile(wp, ws, xp, nb, o, ldo, nr, m, q); break;

static WEFT_AVX512_VNNI void gemm_q4_k_z(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                              float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK_K;
    uint8_t xbuf[XBUF] __attribute__((aligned(64)));
    int pairs = (int)(XBUF / ((size_t)nb * KUNIT));
    if (pairs > 2) pairs = 2;
    if (pairs < 1) {
        for (int j = 0; j < nx; j++)
            for (int i = 0; i < nw; i++)
                out[(size_t)j * ldo + i] = weft_vec_dot(WEFT_TYPE_Q4_K, (const uint8_t *)w + (size_t)i * ws,
                                                        (const uint8_t *)x + (size_t)j * xs, n);
        return;
    }
    for (int j = 0; j < nx; j += 2 * pairs) {
        const int nr = nx - j < 2 * pairs ? nx - j : 2 * pairs;
        prep_q8_k_pairs((const uint8_t *)x + (size_t)j * xs, xs, nr, nb, xbuf);
        for (int i = 0; i < nw; i += 2) {
            const int mr = nw - i < 2 ? nw - i : 2;
            const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = xbuf;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + (nr + 1) / 2) {
                KCASE(1, 1) KCASE(1, 2) KCASE(2, 1) KCASE(2, 2)
            default: break;
            }
        }
    }
}

void weft_cpu_kernels_fill_avx512_gemmq(struct weft_cpu_kernels *k, bool vnni)
{
    if (!vnni) return;
    k->gemm[WEFT_TYPE_Q5_0] = gemm_q5_0_z;
    k->gemm[WEFT_TYPE_Q4_K] = gemm_q4_k_z;
}

#else

void weft_cpu_kernels_fill_avx512_gemmq(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
