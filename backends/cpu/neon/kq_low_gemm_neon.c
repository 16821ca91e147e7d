/* NEON prefill tiles (weft_cpu_gemm_fn) for Q2_K, Q3_K and IQ4_XS against Q8_K activations,
 * and IQ4_XS's four-row decode dot (weft_cpu_dot4_fn, the tile's 4 x 1 form), on the neon and
 * neon_dotprod levels (neon_i8mm takes the dotprod ones through merge_lower), bit-identical
 * to the same table's one-row dots (neon/kq_low_neon.c, which follows cpu_ref_dot.c;
 * tests/cpu/test_cpu_gemm.c and tests/cpu/test_cpu_q32_dot4.c check every table against them).
 *
 * A 256-element block is 16 chunks of 16 elements; chunk k (elements 16k .. 16k + 15) adds
 * (its scale) x (the four-byte lane dots of its values with x.qs + 16k) into the int32 lanes
 * l[k % 2] (lanes 0..3 of the one-row dot's pair for even k, 4..7 for odd k), which is the
 * one-row dots' grouping:
 *   - Q2_K: values (qs[32h + 16(k % 2) + i] >> 2j) & 3, h = k / 8, j = (k % 8) / 2, scale
 *     scales[k] & 15; the mins' lanes as q2_min_lanes;
 *   - Q3_K: the same two bits | (bit 4h + j of hmask[16(k % 2) + i]) << 2, minus 4, scale
 *     weft_q3_k_scales's k;
 *   - IQ4_XS: the code-book values of the low (even k) or high (odd k) nibbles of
 *     qs[16(k / 2) ..], scale weft_iq4_xs_scale(k / 2).
 * The int lanes are exact whatever the order (vdotq_s32 on neon_dotprod, vmull_s8 + pairwise
 * adds on neon). The float steps per output and block are the one-row dots': Q2_K first
 * acc = fma(float(min lanes), -x.d * dmin, acc), then (all three) acc = fma(float(lanes),
 * x.d * d, acc); hsum8 at the end. A tile of MR weight rows x NR activation rows unpacks each
 * weight chunk once for its NR activations and loads each activation chunk once for its MR
 * weight rows; edge tiles are their own (smaller) instances. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/neon/neon_common.h"

/* by the FCVT instruction: the exact widening weft_half_to_f32 gives (a NaN's quiet bit aside) */
AI float h2f_at(const void *p)
{
    __fp16 f;
    memcpy(&f, p, sizeof f);
    return (float)f;
}

/* kq_low_neon.c's Q2_K mins lanes: lane l = mn[2l] * bsums[2l] + mn[2l+1] * bsums[2l+1] */
AI void q2_min_lanes(const uint8_t scales[16], const int16_t bsums[16], int32x4_t *m0, int32x4_t *m1)
{
    const uint8x16_t mn = vshrq_n_u8(vld1q_u8(scales), 4);
    const int16x8_t s0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
    const int16x8_t s1 = vreinterpretq_s16_u16(vmovl_high_u8(mn));
    const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    *m0 = vpaddq_s32(vmull_s16(vget_low_s16(s0), vget_low_s16(b0)), vmull_high_s16(s0, b0));
    *m1 = vpaddq_s32(vmull_s16(vget_low_s16(s1), vget_low_s16(b1)), vmull_high_s16(s1, b1));
}

static const int8_t kv_nl[16] = WEFT_KVALUES_IQ4NL;

enum { KQ2 = 0, KQ3 = 1, KXS = 2 };
#define K_MAXR 4
#define K_MAXC 4

/* the 16 scales of a weight block, one per chunk, and its d */
AI float kq_scales(const uint8_t *wb, const int T, int32_t sc[16])
{
    if (T == KQ2) {
        const struct weft_block_q2_k *b = (const struct weft_block_q2_k *)wb;
        for (int k = 0; k < 16; k++) sc[k] = b->scales[k] & 0xF;
        return h2f_at(&b->d);
    }
    if (T == KQ3) {
        const struct weft_block_q3_k *b = (const struct weft_block_q3_k *)wb;
        int8_t s8[16];
        weft_q3_k_scales(b->scales, s8);
        for (int k = 0; k < 16; k++) sc[k] = s8[k];
        return h2f_at(&b->d);
    }
    const struct weft_block_iq4_xs *b = (const struct weft_block_iq4_xs *)wb;
    for (int k = 0; k < 16; k++) sc[k] = weft_iq4_xs_scale(b, k / 2);
    return h2f_at(&b->d);
}

/* chunk k of a weight block as 16 int8 values */
AI int8x16_t kq_chunk(const uint8_t *wb, const int T, int k, int8x16_t kv)
{
    if (T == KXS) {
        const uint8x16_t q = vld1q_u8(((const struct weft_block_iq4_xs *)wb)->qs + 16 * (k / 2));
        return vqtbl1q_s8(kv, (k & 1) ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0x0F)));
    }
    const int h = k / 8, j = (k % 8) / 2, half = k & 1;
    const uint8_t *qs = T == KQ2 ? ((const struct weft_block_q2_k *)wb)->qs : ((const struct weft_block_q3_k *)wb)->qs;
    const uint8x16_t q = vandq_u8(vshlq_u8(vld1q_u8(qs + 32 * h + 16 * half), vdupq_n_s8((int8_t)(-2 * j))),
                                  vdupq_n_u8(3));
    if (T == KQ2) return vreinterpretq_s8_u8(q);
    const uint8x16_t hm = vld1q_u8(((const struct weft_block_q3_k *)wb)->hmask + 16 * half);
    const uint8x16_t hb = vandq_u8(vshlq_u8(hm, vdupq_n_s8((int8_t)(-(4 * h + j)))), vdupq_n_u8(1));
    return vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(q, vshlq_n_u8(hb, 2))), vdupq_n_s8(4));
}

/* MR weight rows at w (ws apart) x NR Q8_K activation rows at x (xs apart), nb blocks */
#define K_TILE(SFX, ATTR, DOT4)                                                                                    \
    AI ATTR void k_tile_##SFX(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,    \
                              size_t ldo, const int MR, const int NR, const int T)                                 \
    {                                                                                                              \
        const size_t bs = T == KQ2   ? sizeof(struct weft_block_q2_k)                                              \
                          : T == KQ3 ? sizeof(struct weft_block_q3_k)                                              \
                                     : sizeof(struct weft_block_iq4_xs);                                           \
        const int8x16_t kv = vld1q_s8(kv_nl);                                                                      \
        float32x4_t acc[K_MAXR][K_MAXC][2];                                                                        \
        for (int r = 0; r < MR; r++)                                                                               \
            for (int c = 0; c < NR; c++) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0);                             \
        for (int64_t b = 0; b < nb; b++) {                                                                         \
            const uint8_t *wb[K_MAXR];                                                                             \
            const struct weft_block_q8_k *xb[K_MAXC];                                                              \
            int32_t sc[K_MAXR][16];                                                                                \
            float dw[K_MAXR];                                                                                      \
            for (int r = 0; r < MR; r++) {                                                                         \
                wb[r] = w + r * ws + (size_t)b * bs;                                                               \
                dw[r] = kq_scales(wb[r], T, sc[r]);                                                                \
            }                                                                                                      \
            for (int c = 0; c < NR; c++) xb[c] = (const struct weft_block_q8_k *)(x + c * xs) + b;                 \
            int32x4_t l[K_MAXR][K_MAXC][2];                                                                        \
            for (int r = 0; r < MR; r++)                                                                           \
                for (int c = 0; c < NR; c++) l[r][c][0] = l[r][c][1] = vdupq_n_s32(0);                             \
            for (int k = 0; k < 16; k++) {                                                                         \
                int8x16_t v[K_MAXR];                                                                               \
                for (int r = 0; r < MR; r++) v[r] = kq_chunk(wb[r], T, k, kv);                                     \
                for (int c = 0; c < NR; c++) {                                                                     \
                    const int8x16_t xv = vld1q_s8(xb[c]->qs + 16 * k);                                             \
                    for (int r = 0; r < MR; r++)                                                                   \
                        l[r][c][k & 1] = vmlaq_n_s32(l[r][c][k & 1], DOT4(v[r], xv), sc[r][k]);                    \
                }                                                                                                  \
            }                                                                                                      \
            for (int r = 0; r < MR; r++)                                                                           \
                for (int c = 0; c < NR; c++) {                                                                     \
                    if (T == KQ2) {                                                                                \
                        const float dmin = -xb[c]->d * h2f_at(&((const struct weft_block_q2_k *)wb[r])->dmin);    \
                        int32x4_t m0, m1;                                                                          \
                        q2_min_lanes(((const struct weft_block_q2_k *)wb[r])->scales, xb[c]->bsums, &m0, &m1);     \
                        acc[r][c][0] = vfmaq_n_f32(acc[r][c][0], vcvtq_f32_s32(m0), dmin);                         \
                        acc[r][c][1] = vfmaq_n_f32(acc[r][c][1], vcvtq_f32_s32(m1), dmin);                         \
                    }                                                                                              \
                    const float d = xb[c]->d * dw[r];                                                              \
                    acc[r][c][0] = vfmaq_n_f32(acc[r][c][0], vcvtq_f32_s32(l[r][c][0]), d);                        \
                    acc[r][c][1] = vfmaq_n_f32(acc[r][c][1], vcvtq_f32_s32(l[r][c][1]), d);                        \
                }                                                                                                  \
        }                                                                                                          \
        for (int r = 0; r < MR; r++)                                                                               \
            for (int c = 0; c < NR; c++) out[c * ldo + r] = hsum8(acc[r][c][0], acc[r][c][1]);                     \
    }

#define K_DRIVER(SFX, ATTR, NAME, T) NEON_K2X4_DRIVER(k_tile_##SFX, ATTR, NAME##_##SFX, T)

/* every form on one level: SFX base (neon) or dp (neon_dotprod) */
#define K_FORMS(SFX, ATTR, DOT4)                                                                                   \
    K_TILE(SFX, ATTR, DOT4)                                                                                        \
    K_DRIVER(SFX, ATTR, gemm_q2_k, KQ2)                                                                            \
    K_DRIVER(SFX, ATTR, gemm_q3_k, KQ3)                                                                            \
    K_DRIVER(SFX, ATTR, gemm_iq4_xs, KXS)                                                                          \
    /* decode: four rows against one activation row, the tile's 4 x 1 form */                                      \
    static ATTR void dot4_iq4_xs_##SFX(const void *w, size_t stride, const void *x, int64_t n, float out[4])       \
    {                                                                                                              \
        k_tile_##SFX(w, stride, x, 0, n / WEFT_QK_K, out, 1, 4, 1, KXS);                                           \
    }

K_FORMS(base, , dot4_base)
K_FORMS(dp, DOTPROD, dot4_dp)

void weft_cpu_kernels_fill_neon_low_gemm(struct weft_cpu_kernels *k, bool dotprod)
{
    k->gemm[WEFT_TYPE_Q2_K] = dotprod ? gemm_q2_k_dp : gemm_q2_k_base;
    k->gemm[WEFT_TYPE_Q3_K] = dotprod ? gemm_q3_k_dp : gemm_q3_k_base;
    k->gemm[WEFT_TYPE_IQ4_XS] = dotprod ? gemm_iq4_xs_dp : gemm_iq4_xs_base;
    k->dot4[WEFT_TYPE_IQ4_XS] = dotprod ? dot4_iq4_xs_dp : dot4_iq4_xs_base;
}

#else

void weft_cpu_kernels_fill_neon_low_gemm(struct weft_cpu_kernels *k, bool dotprod) { (void)k, (void)dotprod; }

#endif
