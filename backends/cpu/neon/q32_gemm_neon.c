/* NEON prefill tiles (weft_cpu_gemm_fn) for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, and the four-row
 * decode dots (weft_cpu_dot4_fn, the lane tiles' 4 x 1 form) of Q4_1, Q5_0 and Q5_1, on the neon and
 * neon_dotprod levels (the neon_i8mm table takes the dotprod ones through merge_lower, save
 * Q4_0, which has its smmla tile in q32_i8mm.c): for i < nw, j < nx,
 *   out[j * ldo + i] = dot(w + i * wstride, x + j * xstride, n)
 * bit-identical to the same table's one-row dot (neon/q32_neon.c; tests/cpu/test_cpu_gemm.c
 * and tests/cpu/test_cpu_q32_dot4.c check every table's tiles and dot4s against its dot).
 *
 * A tile is 4 weight rows x NR activation rows: each weight block is loaded
 * (and unpacked) once for the NR activations, each activation block once for
 * the 4 weight rows. The int32 lanes are exact, so any sum order gives them;
 * every output keeps its one-row kernel's float chain:
 *   Q8_0, Q5_0: two float32x4 accumulators, acc = fma(lanes, dw * dx, acc), hsum8;
 *   Q4_1, Q5_1: the same plus summs = madd(m, s, summs), hsum8 + summs (summs of the
 *         4 rows lane by lane, as fmaf / c + a * b of q32_neon.c's scalar_madd);
 *   Q4_0: sum += ((float)total * dw) * dx, the 4 rows' totals in one int32x4
 *         (as dot4_q4_0), lane by lane.
 * Edge tiles (nw % 4, nx % NR) repeat the last row and store only the real
 * outputs. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/neon/neon_common.h"


/* the scales by the FCVT instruction: the exact widening weft_half_to_f32
 * gives (a NaN's quiet bit aside), without its branches in the inner loop */
AI float h2f(weft_half h)
{
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

/* q32_neon.c's scalar_madd: ggml's `summs += m * s`, an fma where its GCC
 * build contracts it (keep in step with q32_neon.c and cpu_ref_dot.c) */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif
/* lane by lane: c + a * s */
AI float32x4_t madd_n(float32x4_t c, float32x4_t a, float s)
{
#if WEFT_GGML_SCALAR_CONTRACT
    return vfmaq_n_f32(c, a, s);
#else
    return vaddq_f32(c, vmulq_n_f32(a, s));
#endif
}


/* acc + (int32 lane l = sum over bytes 4l..4l+3 of a * b) */
AI int32x4_t dota_base(int32x4_t acc, int8x16_t a, int8x16_t b)
{
    const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    const int32x4_t hi = vpaddlq_s16(vmull_high_s8(a, b));
    return vaddq_s32(acc, vpaddq_s32(lo, hi));
}

AI DOTPROD int32x4_t dota_dp(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

/* q32_neon.c's hbit16: byte j = 0x10 where bit j of the 16 bits b is set */
AI uint8x16_t hbit16(uint32_t b)
{
    static const uint8_t m[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)b), vdup_n_u8((uint8_t)(b >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(m)), vdupq_n_u8(0x10));
}

/* the 32 weights of a block as int8 lo = elements 0..15, hi = 16..31 */
AI void w_q8_0(const struct weft_block_q8_0 *b, int8x16_t *lo, int8x16_t *hi)
{
    *lo = vld1q_s8(b->qs);
    *hi = vld1q_s8(b->qs + 16);
}
AI void w_q4_0(const struct weft_block_q4_0 *b, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t q = vld1q_u8(b->qs);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
}
AI void w_q4_1(const struct weft_block_q4_1 *b, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t q = vld1q_u8(b->qs);
    *lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
    *hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
}
/* Q5_0 / Q5_1: u = nibble | high bit << 4 (0..31), less sub */
#define W_Q5(NAME, T, SUB)                                                                                         \
    AI void NAME(const T *b, int8x16_t *lo, int8x16_t *hi)                                                         \
    {                                                                                                              \
        const uint32_t qh = weft_qh_load(b->qh);                                                                   \
        const uint8x16_t q = vld1q_u8(b->qs);                                                                      \
        *lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), hbit16(qh))), vdupq_n_s8(SUB)); \
        *hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), hbit16(qh >> 16))), vdupq_n_s8(SUB));        \
    }
W_Q5(w_q5_0, struct weft_block_q5_0, 16)
W_Q5(w_q5_1, struct weft_block_q5_1, 0)

/* Q4_1's / Q5_1's m and Q8_1's s (read only where HAS_MIN; void * so every type compiles) */
AI const weft_half *m_q4_1(const void *b) { return &((const struct weft_block_q4_1 *)b)->m; }
AI const weft_half *m_q5_1(const void *b) { return &((const struct weft_block_q5_1 *)b)->m; }
AI float blk_s(const void *b) { return h2f(((const struct weft_block_q8_1 *)b)->s); }

/* four scales (weight rows 0..3) as floats, exact (vcvt_f32_f16) */
AI float32x4_t d4(const weft_half *a, const weft_half *b, const weft_half *c, const weft_half *d)
{
    uint16x4_t v = vld1_dup_u16(a);
    v = vld1_lane_u16(b, v, 1);
    v = vld1_lane_u16(c, v, 2);
    v = vld1_lane_u16(d, v, 3);
    return vcvt_f32_f16(vreinterpret_f16_u16(v));
}

#define MR 4
/* the tile's 4 weight rows' d of block b */
#define DW4(wr, b) d4(&(wr)[0][b].d, &(wr)[1][b].d, &(wr)[2][b].d, &(wr)[3][b].d)
/* weight row R (a literal) of a lane tile against its NR activations:
 * acc += lanes * (dw * dx), dv[c] lane R holding dw_R * dx_c */
#define LANES_ROW(R, NR, DOTA, WLOAD)                                                                              \
    do {                                                                                                           \
        int8x16_t lo_, hi_;                                                                                        \
        WLOAD(&wr[R][b], &lo_, &hi_);                                                                              \
        for (int c = 0; c < (NR); c++) {                                                                           \
            acc[R][c][0] = vfmaq_laneq_f32(acc[R][c][0], vcvtq_f32_s32(DOTA(z, lo_, x0[c])), dv[c], R);            \
            acc[R][c][1] = vfmaq_laneq_f32(acc[R][c][1], vcvtq_f32_s32(DOTA(z, hi_, x1[c])), dv[c], R);            \
        }                                                                                                          \
    } while (0)
#define ROWP(base, r, stride, T) ((const T *)((const uint8_t *)(base) + (size_t)(r) * (stride)))

/* The lane-accumulator types (Q8_0, Q5_0, Q4_1): tile of MR weight rows at w
 * (mr of them real) x NR activation rows at x (nr real). HAS_MIN: Q4_1's /
 * Q5_1's m * s chain. */
#define TILE_LANES(NAME, ATTR, DOTA, WT, XT, WLOAD, NR, HAS_MIN, BLK_M)                                            \
    static ATTR void NAME(const uint8_t *w, size_t ws, int mr, const uint8_t *x, size_t xs, int nr, int64_t nb,    \
                          float *out, size_t ldo)                                                                  \
    {                                                                                                              \
        const WT *wr[MR];                                                                                          \
        const XT *xr[NR];                                                                                          \
        for (int r = 0; r < MR; r++) wr[r] = ROWP(w, r < mr ? r : mr - 1, ws, WT);                                 \
        for (int c = 0; c < NR; c++) xr[c] = ROWP(x, c < nr ? c : nr - 1, xs, XT);                                 \
        float32x4_t acc[MR][NR][2], summs[NR];                                                                     \
        for (int c = 0; c < NR; c++) {                                                                             \
            summs[c] = vdupq_n_f32(0);                                                                             \
            for (int r = 0; r < MR; r++) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0);                             \
        }                                                                                                          \
        const int32x4_t z = vdupq_n_s32(0);                                                                        \
        for (int64_t b = 0; b < nb; b++) {                                                                         \
            int8x16_t x0[NR], x1[NR];                                                                              \
            float32x4_t dv[NR];                                                                                    \
            const float32x4_t dwv = DW4(wr, b);                                                                    \
            for (int c = 0; c < NR; c++) {                                                                         \
                x0[c] = vld1q_s8(xr[c][b].qs);                                                                     \
                x1[c] = vld1q_s8(xr[c][b].qs + 16);                                                                \
                dv[c] = vmulq_n_f32(dwv, h2f(xr[c][b].d));                                                         \
            }                                                                                                      \
            if (HAS_MIN) {                                                                                         \
                const float32x4_t mv =                                                                             \
                    d4(BLK_M(&wr[0][b]), BLK_M(&wr[1][b]), BLK_M(&wr[2][b]), BLK_M(&wr[3][b]));                    \
                for (int c = 0; c < NR; c++) summs[c] = madd_n(summs[c], mv, blk_s(&xr[c][b]));                    \
            }                                                                                                      \
            LANES_ROW(0, NR, DOTA, WLOAD);                                                                         \
            LANES_ROW(1, NR, DOTA, WLOAD);                                                                         \
            LANES_ROW(2, NR, DOTA, WLOAD);                                                                         \
            LANES_ROW(3, NR, DOTA, WLOAD);                                                                         \
        }                                                                                                          \
        /* constant trip counts, so acc stays in registers */                                                   \
        for (int c = 0; c < NR; c++) {                                                                             \
            float s[MR];                                                                                           \
            vst1q_f32(s, summs[c]);                                                                                \
            for (int r = 0; r < MR; r++) {                                                                         \
                const float h = hsum8(acc[r][c][0], acc[r][c][1]);                                                 \
                if (c < nr && r < mr) out[(size_t)c * ldo + r] = HAS_MIN ? h + s[r] : h;                           \
            }                                                                                                      \
        }                                                                                                          \
    }

/* Q4_0: MR weight rows x NR activation rows, sum[c] lane r = output (r, c) */
#define TILE_Q4_0(NAME, ATTR, DOTA, NR)                                                                            \
    static ATTR void NAME(const uint8_t *w, size_t ws, int mr, const uint8_t *x, size_t xs, int nr, int64_t nb,    \
                          float *out, size_t ldo)                                                                  \
    {                                                                                                              \
        const struct weft_block_q4_0 *wr[MR];                                                                      \
        const struct weft_block_q8_0 *xr[NR];                                                                      \
        for (int r = 0; r < MR; r++) wr[r] = ROWP(w, r < mr ? r : mr - 1, ws, struct weft_block_q4_0);             \
        for (int c = 0; c < NR; c++) xr[c] = ROWP(x, c < nr ? c : nr - 1, xs, struct weft_block_q8_0);             \
        float32x4_t sum[NR];                                                                                       \
        for (int c = 0; c < NR; c++) sum[c] = vdupq_n_f32(0);                                                      \
        const int32x4_t z = vdupq_n_s32(0);                                                                        \
        for (int64_t b = 0; b < nb; b++) {                                                                         \
            int8x16_t lo[MR], hi[MR];                                                                              \
            for (int r = 0; r < MR; r++) w_q4_0(&wr[r][b], &lo[r], &hi[r]);                                        \
            const float32x4_t dwv = DW4(wr, b);                                                                    \
            for (int c = 0; c < NR; c++) {                                                                         \
                const int8x16_t x0 = vld1q_s8(xr[c][b].qs), x1 = vld1q_s8(xr[c][b].qs + 16);                       \
                int32x4_t l[MR];                                                                                   \
                for (int r = 0; r < MR; r++) l[r] = DOTA(DOTA(z, lo[r], x0), hi[r], x1);                           \
                const int32x4_t t = vpaddq_s32(vpaddq_s32(l[0], l[1]), vpaddq_s32(l[2], l[3]));                    \
                sum[c] = vaddq_f32(sum[c], vmulq_n_f32(vmulq_f32(vcvtq_f32_s32(t), dwv), h2f(xr[c][b].d)));        \
            }                                                                                                      \
        }                                                                                                          \
        for (int c = 0; c < NR; c++) {                                                                             \
            float s[MR];                                                                                           \
            vst1q_f32(s, sum[c]);                                                                                  \
            for (int r = 0; r < MR; r++)                                                                           \
                if (c < nr && r < mr) out[(size_t)c * ldo + r] = s[r];                                             \
        }                                                                                                          \
    }

/* the weight-row tiles outermost (a tile's rows stay in cache while the
 * activations stream by) */
#define GEMM(NAME, ATTR, TILE, NR, QK)                                                                             \
    static ATTR void NAME(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,           \
                          float *out, size_t ldo)                                                                  \
    {                                                                                                              \
        const int64_t nb = n / (QK);                                                                               \
        for (int i = 0; i < nw; i += MR) {                                                                         \
            const int mr = nw - i < MR ? nw - i : MR;                                                              \
            for (int j = 0; j < nx; j += (NR)) {                                                                   \
                const int nr = nx - j < (NR) ? nx - j : (NR);                                                      \
                TILE((const uint8_t *)w + (size_t)i * ws, ws, mr, (const uint8_t *)x + (size_t)j * xs, xs, nr, nb, \
                     out + (size_t)j * ldo + i, ldo);                                                              \
            }                                                                                                      \
        }                                                                                                          \
    }

/* weft_cpu_dot4_fn: rows w, w + stride, .. against x, out[r] */
#define DOT4(NAME, ATTR, TILE, QK)                                                                                 \
    static ATTR void NAME(const void *w, size_t stride, const void *x, int64_t n, float out[4])                    \
    {                                                                                                              \
        TILE((const uint8_t *)w, stride, MR, (const uint8_t *)x, 0, 1, n / (QK), out, 1);                          \
    }

#define FORMS(SFX, ATTR, DOTA)                                                                                     \
    TILE_LANES(tile_q8_0_##SFX, ATTR, DOTA, struct weft_block_q8_0, struct weft_block_q8_0, w_q8_0, 2, 0, m_q4_1)  \
    TILE_LANES(tile_q5_0_##SFX, ATTR, DOTA, struct weft_block_q5_0, struct weft_block_q8_0, w_q5_0, 2, 0, m_q4_1)  \
    TILE_LANES(tile_q4_1_##SFX, ATTR, DOTA, struct weft_block_q4_1, struct weft_block_q8_1, w_q4_1, 2, 1, m_q4_1)  \
    TILE_LANES(tile_q5_1_##SFX, ATTR, DOTA, struct weft_block_q5_1, struct weft_block_q8_1, w_q5_1, 2, 1, m_q5_1)  \
    TILE_Q4_0(tile_q4_0_##SFX, ATTR, DOTA, 4)                                                                      \
    GEMM(gemm_q8_0_##SFX, ATTR, tile_q8_0_##SFX, 2, WEFT_QK8_0)                                                    \
    GEMM(gemm_q5_0_##SFX, ATTR, tile_q5_0_##SFX, 2, WEFT_QK5_0)                                                    \
    GEMM(gemm_q4_1_##SFX, ATTR, tile_q4_1_##SFX, 2, WEFT_QK4_1)                                                    \
    GEMM(gemm_q5_1_##SFX, ATTR, tile_q5_1_##SFX, 2, WEFT_QK5_1)                                                    \
    GEMM(gemm_q4_0_##SFX, ATTR, tile_q4_0_##SFX, 4, WEFT_QK4_0)                                                    \
    /* decode: four rows against one activation row, the lane tiles' 4 x 1 form */                                 \
    TILE_LANES(tile1_q5_0_##SFX, ATTR, DOTA, struct weft_block_q5_0, struct weft_block_q8_0, w_q5_0, 1, 0, m_q4_1) \
    TILE_LANES(tile1_q4_1_##SFX, ATTR, DOTA, struct weft_block_q4_1, struct weft_block_q8_1, w_q4_1, 1, 1, m_q4_1) \
    TILE_LANES(tile1_q5_1_##SFX, ATTR, DOTA, struct weft_block_q5_1, struct weft_block_q8_1, w_q5_1, 1, 1, m_q5_1) \
    DOT4(dot4_q5_0_##SFX, ATTR, tile1_q5_0_##SFX, WEFT_QK5_0)                                                      \
    DOT4(dot4_q4_1_##SFX, ATTR, tile1_q4_1_##SFX, WEFT_QK4_1)                                                      \
    DOT4(dot4_q5_1_##SFX, ATTR, tile1_q5_1_##SFX, WEFT_QK5_1)

FORMS(base, , dota_base)
FORMS(dp, DOTPROD, dota_dp)

void weft_cpu_kernels_fill_neon_gemm(struct weft_cpu_kernels *k, bool dotprod)
{
    k->gemm[WEFT_TYPE_Q8_0] = dotprod ? gemm_q8_0_dp : gemm_q8_0_base;
    k->gemm[WEFT_TYPE_Q4_0] = dotprod ? gemm_q4_0_dp : gemm_q4_0_base;
    k->gemm[WEFT_TYPE_Q4_1] = dotprod ? gemm_q4_1_dp : gemm_q4_1_base;
    k->gemm[WEFT_TYPE_Q5_0] = dotprod ? gemm_q5_0_dp : gemm_q5_0_base;
    k->gemm[WEFT_TYPE_Q5_1] = dotprod ? gemm_q5_1_dp : gemm_q5_1_base;
    k->dot4[WEFT_TYPE_Q4_1] = dotprod ? dot4_q4_1_dp : dot4_q4_1_base;
    k->dot4[WEFT_TYPE_Q5_0] = dotprod ? dot4_q5_0_dp : dot4_q5_0_base;
    k->dot4[WEFT_TYPE_Q5_1] = dotprod ? dot4_q5_1_dp : dot4_q5_1_base;
}

#else

void weft_cpu_kernels_fill_neon_gemm(struct weft_cpu_kernels *k, bool dotprod) { (void)k, (void)dotprod; }

#endif
