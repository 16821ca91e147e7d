/* Register-blocked prefill tiles (weft_cpu_gemm_fn): for i < nw, j < nx,
 *   out[j * ldo + i] = dot(w + i * wstride, x + j * xstride, n)
 * bit-identical to the table's one-row dot (q32/q32_dot_avx2.c, backends/cpu/cpu_ref_dot.c).
 *
 * Each micro-tile runs MR weight rows against NR activation rows over the
 * whole row: a weight block is loaded/unpacked once for NR outputs, an
 * activation block once for MR outputs, and the MR*NR accumulator chains are
 * independent. Per output the float steps are exactly the one-row kernel's:
 *  - Q8_0, Q4_1: int32 lane l = exact sum over elements 4l..4l+3 of the block
 *    (any instruction sequence giving the same int32 is fine), then
 *    acc = fma(dw*dx, float(lane), acc) in that output's own 8 lanes
 *    (dw*dx: the product of two broadcasts equals the scalar product), then
 *    hsum_float_8, then "+ summs" for Q4_1 (summs = fma(m, s, summs) per
 *    block, kept per output in one lane of an xmm);
 *  - Q4_0: exact int block total, then sumf = sumf + (float(total) * dw) * dx,
 *    eight outputs per ymm (lane-wise the same scalar operations).
 * The AVX-512 VNNI form of Q8_0 (zmm, two activation rows per register) is
 * the avx512vnni level's; its int32 lanes come from vpdpbusd on (x + 128) as
 * unsigned bytes, starting from -128 * (lane sum of w), which is the same
 * exact integer. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/types.h"

#define AI static inline __attribute__((always_inline))

AI WEFT_AVX2 float g_h2f(weft_half h) { return _cvtsh_ss(h); }

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), as ggml's hsum_float_8 */
AI WEFT_AVX2 float g_hsum_float_8(__m256 x)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AI WEFT_AVX2 __m256i g_load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

AI WEFT_AVX2 __m256i g_nibbles(const uint8_t *qs)
{
    /* the 16 bytes in both halves (a load-only broadcast), the high half shifted by 4 */
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi32(t, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

#define MAXR 6

/* pr[j][i] = dw_i * dx_j (i < 4, j < NR), the products the reference
 * broadcasts per block, four rows per vmulps (lane-wise the scalar
 * products); the tiles broadcast each from memory into its fma, since a
 * full-width vmulps per output would take the FP pipes the integer
 * multiplies need. hw: the rows' f16 scales (unused ones 0). */
AI WEFT_AVX2 void scale_products(const uint16_t hw[4], const float *dx, int NR, float pr[][4])
{
    const __m128 dw4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)hw));
    for (int j = 0; j < NR; j++) _mm_store_ps(pr[j], _mm_mul_ps(dw4, _mm_set1_ps(dx[j])));
}

/* ---- Q8_0 x Q8_0 ---- */

/* AVX2: lanes from |w| times x with w's sign (as the one-row kernel) */
AI WEFT_AVX2 void q8_0_tile_avx2(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,
                            size_t ldo, const int MR, const int NR)
{
    const struct weft_block_q8_0 *wr[MAXR], *xr[MAXR];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q8_0 *)(w + i * ws);
    for (int j = 0; j < NR; j++) xr[j] = (const struct weft_block_q8_0 *)(x + j * xs);
    __m256 acc[MAXR][MAXR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        uint16_t hw[4] = {0, 0, 0, 0};
        float dxs[MAXR], pr[MAXR][4] __attribute__((aligned(16)));
        for (int i = 0; i < MR; i++) memcpy(&hw[i], &wr[i][b].d, 2);
        for (int j = 0; j < NR; j++) dxs[j] = g_h2f(xr[j][b].d);
        scale_products(hw, dxs, NR, pr);
        __asm__("" : "+m"(pr));
        for (int i = 0; i < MR; i++) {
            __m256i wv = g_load32(wr[i][b].qs);
            __m256i wa = _mm256_sign_epi8(wv, wv);
            for (int j = 0; j < NR; j++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(g_load32(xr[j][b].qs), wv)), ones);
                acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pr[j][i]), _mm256_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) out[j * ldo + i] = g_hsum_float_8(acc[i][j]);
}

/* ---- Q5_0 x Q8_0 ----
 * The reference's steps are Q8_0's (lanes of four, fma(dw * dx, lanes, acc),
 * hsum_float_8) on v = u - 16, u = nibble | high bit << 4 in 0..31: the lanes
 * come as maddubs(u, x) (pairs at most 2 * 31 * 128) minus 16 times the
 * activations' lane sums (made once per activation block for MR rows), the
 * same exact int32. */
/* the 32 five-bit values of a block (its qh bits, its nibbles) */
AI WEFT_AVX2 __m256i q5_u(const uint8_t *qh4, const uint8_t *qs)
{
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    hb = _mm256_cmpeq_epi8(_mm256_or_si256(hb, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
    return _mm256_or_si256(g_nibbles(qs), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}

AI WEFT_AVX2 __m256i q5_0_u(const struct weft_block_q5_0 *b) { return q5_u(b->qh, b->qs); }

AI WEFT_AVX2 void q5_0_tile_avx2(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,
                                 size_t ldo, const int MR, const int NR)
{
    const struct weft_block_q5_0 *wr[MAXR];
    const struct weft_block_q8_0 *xr[MAXR];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q5_0 *)(w + i * ws);
    for (int j = 0; j < NR; j++) xr[j] = (const struct weft_block_q8_0 *)(x + j * xs);
    __m256 acc[MAXR][MAXR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        __m256i xq[MAXR], c16[MAXR];
        for (int j = 0; j < NR; j++) {
            xq[j] = g_load32(xr[j][b].qs);
            /* 16 * (the lane sums of x) */
            c16[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(16), xq[j]), ones);
        }
        uint16_t hw[4] = {0, 0, 0, 0};
        float dxs[MAXR], pr[MAXR][4] __attribute__((aligned(16)));
        for (int i = 0; i < MR; i++) memcpy(&hw[i], &wr[i][b].d, 2);
        for (int j = 0; j < NR; j++) dxs[j] = g_h2f(xr[j][b].d);
        scale_products(hw, dxs, NR, pr);
        __asm__("" : "+m"(pr));
        for (int i = 0; i < MR; i++) {
            const __m256i u = q5_0_u(&wr[i][b]);
            for (int j = 0; j < NR; j++) {
                __m256i p = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, xq[j]), ones), c16[j]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pr[j][i]), _mm256_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) out[j * ldo + i] = g_hsum_float_8(acc[i][j]);
}

/* summs + m * s as the reference's ggml_scalar_madd (fused unless
 * WEFT_GGML_SCALAR_CONTRACT is 0, as q32/q32_avx2.h), four outputs lane-wise */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif
AI WEFT_AVX2 __m128 summs_step(__m128 m, __m128 s, __m128 acc)
{
#if WEFT_GGML_SCALAR_CONTRACT
    return _mm_fmadd_ps(m, s, acc);
#else
    return _mm_add_ps(acc, _mm_mul_ps(m, s));
#endif
}

/* ---- Q4_1 and Q5_1 x Q8_1 (the same steps on 4- or 5-bit values; Q5: the
 * block {d, m, qh[4], qs[16]}, else {d, m, qs[16]}) ---- */

AI WEFT_AVX2 void q41_tile_avx2(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,
                                size_t ldo, const int MR, const int NR, const int Q5)
{
    const size_t bs = Q5 ? sizeof(struct weft_block_q5_1) : sizeof(struct weft_block_q4_1);
    const uint8_t *wr[MAXR];
    const struct weft_block_q8_1 *xr[MAXR];
    for (int i = 0; i < MR; i++) wr[i] = w + i * ws;
    for (int j = 0; j < NR; j++) xr[j] = (const struct weft_block_q8_1 *)(x + j * xs);
    __m256 acc[MAXR][MAXR];
    __m128 summs[MAXR][2]; /* lane j & 3 of summs[i][j >> 2]: output (i, j) */
    for (int i = 0; i < MR; i++) {
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
        summs[i][0] = summs[i][1] = _mm_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        uint16_t hw[4] = {0, 0, 0, 0};
        float dxs[MAXR], pr[MAXR][4] __attribute__((aligned(16)));
        for (int i = 0; i < MR; i++) memcpy(&hw[i], wr[i] + b * bs, 2);
        for (int j = 0; j < NR; j++) dxs[j] = g_h2f(xr[j][b].d);
        scale_products(hw, dxs, NR, pr);
        __asm__("" : "+m"(pr));
        __m128 sx[2];
        sx[0] = _mm_cvtph_ps(_mm_setr_epi16((short)xr[0][b].s, (short)(NR > 1 ? xr[NR > 1 ? 1 : 0][b].s : 0),
                                            (short)(NR > 2 ? xr[NR > 2 ? 2 : 0][b].s : 0),
                                            (short)(NR > 3 ? xr[NR > 3 ? 3 : 0][b].s : 0), 0, 0, 0, 0));
        sx[1] = _mm_cvtph_ps(_mm_setr_epi16((short)(NR > 4 ? xr[NR > 4 ? 4 : 0][b].s : 0),
                                            (short)(NR > 5 ? xr[NR > 5 ? 5 : 0][b].s : 0), 0, 0, 0, 0, 0, 0));
        for (int i = 0; i < MR; i++) {
            const uint8_t *wb = wr[i] + b * bs;
            const __m256i wv = Q5 ? q5_u(wb + 4, wb + 8) : g_nibbles(wb + 4);
            weft_half mh;
            memcpy(&mh, wb + 2, 2);
            const __m128 m = _mm_set1_ps(g_h2f(mh));
            summs[i][0] = summs_step(m, sx[0], summs[i][0]);
            if (NR > 4) summs[i][1] = summs_step(m, sx[1], summs[i][1]);
            for (int j = 0; j < NR; j++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, g_load32(xr[j][b].qs)), ones);
                acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pr[j][i]), _mm256_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < MR; i++) {
        float s[8];
        _mm_storeu_ps(s, summs[i][0]);
        _mm_storeu_ps(s + 4, summs[i][1]);
        for (int j = 0; j < NR; j++) out[j * ldo + i] = g_hsum_float_8(acc[i][j]) + s[j];
    }
}

AI WEFT_AVX2 void q4_1_tile_avx2(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,
                                 size_t ldo, const int MR, const int NR)
{
    q41_tile_avx2(w, ws, x, xs, nb, out, ldo, MR, NR, 0);
}

AI WEFT_AVX2 void q5_1_tile_avx2(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,
                                 size_t ldo, const int MR, const int NR)
{
    q41_tile_avx2(w, ws, x, xs, nb, out, ldo, MR, NR, 1);
}

/* ---- Q4_0 x Q8_0: a 4 x 2 tile, rows clamped at the edges ---- */

AI WEFT_AVX2 __m256i q4_0_lanes(__m256i v, const int8_t *xq)
{
    __m256i x = g_load32(xq);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v)),
                             _mm256_set1_epi16(1));
}

/* totals of P0..P3 (low half of q0/q1's 128-bit lanes) */
AI WEFT_AVX2 __m256i hsum8x8(const __m256i P[8])
{
    __m256i h01 = _mm256_hadd_epi32(P[0], P[1]), h23 = _mm256_hadd_epi32(P[2], P[3]);
    __m256i h45 = _mm256_hadd_epi32(P[4], P[5]), h67 = _mm256_hadd_epi32(P[6], P[7]);
    __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

static WEFT_AVX2 void q4_0_tile(const uint8_t *w, size_t ws, int mr, const uint8_t *x, size_t xs, int nr, int64_t nb,
                           float *out, size_t ldo)
{
    const struct weft_block_q4_0 *wr[4];
    const struct weft_block_q8_0 *xr[2];
    for (int i = 0; i < 4; i++) wr[i] = (const struct weft_block_q4_0 *)(w + (i < mr ? i : mr - 1) * ws);
    for (int j = 0; j < 2; j++) xr[j] = (const struct weft_block_q8_0 *)(x + (j < nr ? j : nr - 1) * xs);
    __m256 sumf = _mm256_setzero_ps(); /* lane j * 4 + i: output (i, j) */
    const __m256i m8 = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++) {
        __m256i P[8];
        for (int i = 0; i < 4; i++) {
            __m256i v = _mm256_sub_epi8(g_nibbles(wr[i][b].qs), m8);
            P[i] = q4_0_lanes(v, xr[0][b].qs);
            P[4 + i] = q4_0_lanes(v, xr[1][b].qs);
        }
        __m256i T = hsum8x8(P);
        __m128i dwh = _mm_setr_epi16((short)wr[0][b].d, (short)wr[1][b].d, (short)wr[2][b].d, (short)wr[3][b].d,
                                     (short)wr[0][b].d, (short)wr[1][b].d, (short)wr[2][b].d, (short)wr[3][b].d);
        __m128i dxh = _mm_setr_epi16((short)xr[0][b].d, (short)xr[0][b].d, (short)xr[0][b].d, (short)xr[0][b].d,
                                     (short)xr[1][b].d, (short)xr[1][b].d, (short)xr[1][b].d, (short)xr[1][b].d);
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(T), _mm256_cvtph_ps(dwh)), _mm256_cvtph_ps(dxh));
        sumf = _mm256_add_ps(sumf, t);
    }
    float s[8];
    _mm256_storeu_ps(s, sumf);
    for (int j = 0; j < nr; j++)
        for (int i = 0; i < mr; i++) out[j * ldo + i] = s[j * 4 + i];
}

static WEFT_AVX2 void gemm_q4_0(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n, float *out,
                           size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_0;
    for (int j = 0; j < nx; j += 2)
        for (int i = 0; i < nw; i += 4)
            q4_0_tile((const uint8_t *)w + (size_t)i * ws, ws, nw - i < 4 ? nw - i : 4,
                      (const uint8_t *)x + (size_t)j * xs, xs, nx - j < 2 ? nx - j : 2, nb, out + (size_t)j * ldo + i,
                      ldo);
}

/* ---- drivers: MR x NR tiles over the block, smaller tiles at the edges ---- */

#define TILE_CASE(tile, m, r)                                                                            \
    case (m) * 8 + (r): tile(wp, ws, xp, xs, nb, o, ldo, m, r); break;
#define TILE_CASES_M(tile, m)                                                                            \
    TILE_CASE(tile, m, 1) TILE_CASE(tile, m, 2) TILE_CASE(tile, m, 3) TILE_CASE(tile, m, 4)            \
    TILE_CASE(tile, m, 5) TILE_CASE(tile, m, 6)

#define GEMM_DRIVER(ATTR, name, tile, QK, MR, NR)                                                        \
    static ATTR void name(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,  \
                          float *out, size_t ldo)                                                        \
    {                                                                                                    \
        const int64_t nb = n / (QK);                                                                     \
        for (int j = 0; j < nx; j += (NR)) {                                                             \
            int nr = nx - j < (NR) ? nx - j : (NR);                                                      \
            for (int i = 0; i < nw; i += (MR)) {                                                         \
                int mr = nw - i < (MR) ? nw - i : (MR);                                                  \
                const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws;                                 \
                const uint8_t *xp = (const uint8_t *)x + (size_t)j * xs;                                 \
                float *o = out + (size_t)j * ldo + i;                                                    \
                switch (mr * 8 + nr) {                                                                   \
                    TILE_CASES_M(tile, 1) TILE_CASES_M(tile, 2) TILE_CASES_M(tile, 3)                    \
                    TILE_CASES_M(tile, 4)                                                                \
                default: break;                                                                          \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }

GEMM_DRIVER(WEFT_AVX2, gemm_q8_0_avx2, q8_0_tile_avx2, WEFT_QK8_0, 4, 3)
GEMM_DRIVER(WEFT_AVX2, gemm_q4_1_avx2, q4_1_tile_avx2, WEFT_QK4_1, 4, 3)
GEMM_DRIVER(WEFT_AVX2, gemm_q5_1_avx2, q5_1_tile_avx2, WEFT_QK5_1, 4, 3)

/* Q5_1 decode: four rows against one activation row, the tile's 4 x 1 form */
static WEFT_AVX2 void dot4_q5_1_avx2(const void *w, size_t stride, const void *x, int64_t n, float out[4])
{
    q5_1_tile_avx2(w, stride, x, 0, n / WEFT_QK5_1, out, 1, 4, 1);
}
GEMM_DRIVER(WEFT_AVX2, gemm_q5_0_direct, q5_0_tile_avx2, WEFT_QK5_0, 4, 2)

/* Q5_0 through the Q8_0 tile: the reference's Q5_0 steps are Q8_0's on the
 * values u - 16 in [-16, 15] with the same d (cpu_ref_dot.c), so a weight
 * block rewritten as a Q8_0 block gives every output bit for bit. Each group
 * of 4 weight rows is rewritten once per call, onto the stack, and then
 * serves all nx activation rows at Q8_0's cost per output (the unpacking of
 * the 5-bit values, per weight block and tile, was most of Q5_0's). Rows of
 * over Q5_MAX_NB blocks take the direct tile. */
#define Q5_MAX_NB 512

AI WEFT_AVX2 void q5_0_as_q8_0(const struct weft_block_q5_0 *b, struct weft_block_q8_0 *o)
{
    o->d = b->d;
    _mm256_storeu_si256((__m256i *)o->qs, _mm256_sub_epi8(q5_0_u(b), _mm256_set1_epi8(16)));
}

static WEFT_AVX2 void gemm_q5_0_avx2(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                                     float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK5_0;
    if (nb > Q5_MAX_NB || nb < 1) { /* (no zero-length buffer) */
        gemm_q5_0_direct(w, ws, nw, x, xs, nx, n, out, ldo);
        return;
    }
    struct weft_block_q8_0 buf[4 * nb]; /* at most 4 * Q5_MAX_NB blocks (68 KiB) */
    const size_t bs = (size_t)nb * sizeof(struct weft_block_q8_0);
    for (int i = 0; i < nw; i += 4) {
        const int mr = nw - i < 4 ? nw - i : 4;
        for (int r = 0; r < mr; r++) {
            const struct weft_block_q5_0 *wr = (const struct weft_block_q5_0 *)((const uint8_t *)w + (size_t)(i + r) * ws);
            for (int64_t b = 0; b < nb; b++) q5_0_as_q8_0(&wr[b], &buf[r * nb + b]);
        }
        for (int j = 0; j < nx; j += 3) {
            const int nr = nx - j < 3 ? nx - j : 3;
            const uint8_t *bp = (const uint8_t *)buf, *xp = (const uint8_t *)x + (size_t)j * xs;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + nr) {
#define Q8CASE(m, r) case (m) * 8 + (r): q8_0_tile_avx2(bp, bs, xp, xs, nb, o, ldo, m, r); break;
                Q8CASE(1, 1) Q8CASE(1, 2) Q8CASE(1, 3) Q8CASE(2, 1) Q8CASE(2, 2) Q8CASE(2, 3)
                Q8CASE(3, 1) Q8CASE(3, 2) Q8CASE(3, 3) Q8CASE(4, 1) Q8CASE(4, 2) Q8CASE(4, 3)
#undef Q8CASE
            default: break;
            }
        }
    }
}

/* AVX-512 VNNI with zmm: two activation rows per zmm (low half row j, high
 * half row j + 1), the weight block broadcast to both halves; each 256-bit
 * half gives, for its own output, the int32 lanes and float steps of the
 * AVX2 tile above (vpdpbusd on x + 128, from -128 * the lane sums of w). */

AI WEFT_AVX512_VNNI void q8_0_tile_z(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int nr, int64_t nb, float *out,
                         size_t ldo, const int MR, const int NP)
{
    const struct weft_block_q8_0 *wr[4], *xr[8];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q8_0 *)(w + i * ws);
    for (int j = 0; j < 2 * NP; j++) xr[j] = (const struct weft_block_q8_0 *)(x + (j < nr ? j : nr - 1) * xs);
    __m512 acc[4][4];
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        __m512 dx[4];
        __m512i xu[4];
        for (int p = 0; p < NP; p++) {
            const struct weft_block_q8_0 *x0 = &xr[2 * p][b], *x1 = &xr[2 * p + 1][b];
            dx[p] = _mm512_insertf32x8(_mm512_set1_ps(g_h2f(x0->d)), _mm256_set1_ps(g_h2f(x1->d)), 1);
            __m512i xx = _mm512_inserti64x4(_mm512_castsi256_si512(g_load32(x0->qs)), g_load32(x1->qs), 1);
            xu[p] = _mm512_xor_si512(xx, bias);
        }
        for (int i = 0; i < MR; i++) {
            __m512i wv = _mm512_broadcast_i64x4(g_load32(wr[i][b].qs));
            __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wv));
            __m512 dw = _mm512_set1_ps(g_h2f(wr[i][b].d));
            for (int p = 0; p < NP; p++) {
                __m512i q = _mm512_dpbusd_epi32(corr, xu[p], wv);
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[p]), _mm512_cvtepi32_ps(q), acc[i][p]);
            }
        }
    }
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++) {
            out[2 * p * ldo + i] = g_hsum_float_8(_mm512_castps512_ps256(acc[i][p]));
            if (2 * p + 1 < nr) out[(2 * p + 1) * ldo + i] = g_hsum_float_8(_mm512_extractf32x8_ps(acc[i][p], 1));
        }
}

#define ZCASE(m, q) case (m) * 8 + (q): q8_0_tile_z(wp, ws, xp, xs, nr, nb, o, ldo, m, q); break;
#define ZCASES(m) ZCASE(m, 1) ZCASE(m, 2) ZCASE(m, 3) ZCASE(m, 4)

static WEFT_AVX512_VNNI void gemm_q8_0_z(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                             float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK8_0;
    for (int j = 0; j < nx; j += 8) {
        int nr = nx - j < 8 ? nx - j : 8;
        for (int i = 0; i < nw; i += 4) {
            int mr = nw - i < 4 ? nw - i : 4;
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

/* vnni: the avx512vnni level, where the zmm VNNI tile replaces the AVX2 Q8_0 tile */
void weft_cpu_kernels_fill_avx2_gemm(struct weft_cpu_kernels *k, bool vnni)
{
    k->gemm[WEFT_TYPE_Q8_0] = vnni ? gemm_q8_0_z : gemm_q8_0_avx2;
    k->gemm[WEFT_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[WEFT_TYPE_Q4_1] = gemm_q4_1_avx2;
    k->gemm[WEFT_TYPE_Q5_0] = gemm_q5_0_avx2;
    k->gemm[WEFT_TYPE_Q5_1] = gemm_q5_1_avx2;
    k->dot4[WEFT_TYPE_Q5_1] = dot4_q5_1_avx2;
}

#else

void weft_cpu_kernels_fill_avx2_gemm(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
