/* NEON (AArch64) dots for Q4_K, Q5_K and Q6_K, in the x86
 * order as neon/q32_neon.c (tests/cpu/test_cpu_kquant.c checks every table
 * against cpu_ref_dot.c bit for bit). The int32 lanes are exact whatever
 * computes them; the float steps are the reference's:
 *  - Q4_K: lane l sums the elements e with e % 8 == l, each times its
 *    sub-block's scale: per sub-block, four vmull_s8 of 8 elements (element
 *    8t + l in int16 lane l of product t), added (at most 4 * 15 * 128),
 *    then vmlal by the scale. acc[l] + d * float(lane) per block (mul, then
 *    add), sumf - (dmin * dx) * float(summ) per block, the lanes added to
 *    sumf one by one at the end.
 *  - Q6_K: lane l sums elements 4l..4l+3 of each 32 (u = q + 32, 0..63,
 *    times x, times the 16-element scale), minus 32 * (bsums by scales);
 *    acc = fma(d, float(lanes), acc) and hsum_float_8, as the AVX2 kernel.
 *    The four-byte groups are vdotq_s32's lanes (dotprod) or vmull + two
 *    pairwise adds (neon).
 *  - Q5_K: lane l sums elements 4l..4l+3 of each 32 (nibble | qh bit << 4,
 *    0..31, times x), times the 32-element scale; per block
 *    summs = fma(-x.d * dmin, float(summ), summs) and
 *    acc = fma(x.d * d, float(lanes), acc); hsum_float_8(acc) + summs. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/neon/neon_common.h"




/* ---- Q4_K (the same code for both levels: no four-byte groups here) ---- */
static float dot_q4_k_neon(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q4_k *w = vw;
    const struct weft_block_q8_k *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0;
    float sumf = 0;
    for (int64_t i = 0; i < n / WEFT_QK_K; i++) {
        uint8_t sc[8], mn[8];
        int summ = 0;
        for (int j = 0; j < 8; j++) {
            weft_k4_scale_min(j, w[i].scales, &sc[j], &mn[j]);
            summ += (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]) * mn[j];
        }
        int32x4_t l0 = vdupq_n_s32(0), l1 = l0;
        for (int c = 0; c < 4; c++) {
            const uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * c), q1 = vld1q_u8(w[i].qs + 32 * c + 16);
            for (int h = 0; h < 2; h++) { /* sub-block 2c + h: low nibbles, then high */
                const int8x16_t v0 = vreinterpretq_s8_u8(h ? vshrq_n_u8(q0, 4) : vandq_u8(q0, m4));
                const int8x16_t v1 = vreinterpretq_s8_u8(h ? vshrq_n_u8(q1, 4) : vandq_u8(q1, m4));
                const int8_t *y = x[i].qs + 64 * c + 32 * h;
                const int8x16_t y0 = vld1q_s8(y), y1 = vld1q_s8(y + 16);
                int16x8_t p = vmull_s8(vget_low_s8(v0), vget_low_s8(y0));
                p = vaddq_s16(p, vmull_high_s8(v0, y0));
                p = vaddq_s16(p, vmull_s8(vget_low_s8(v1), vget_low_s8(y1)));
                p = vaddq_s16(p, vmull_high_s8(v1, y1));
                const int16_t s = (int16_t)sc[2 * c + h];
                l0 = vmlal_n_s16(l0, vget_low_s16(p), s);
                l1 = vmlal_high_n_s16(l1, p, s);
            }
        }
        const float d = weft_half_to_f32(w[i].d) * x[i].d;
        a0 = vaddq_f32(a0, vmulq_n_f32(vcvtq_f32_s32(l0), d));
        a1 = vaddq_f32(a1, vmulq_n_f32(vcvtq_f32_s32(l1), d));
        sumf -= weft_half_to_f32(w[i].dmin) * x[i].d * (float)summ;
    }
    float l[8];
    vst1q_f32(l, a0);
    vst1q_f32(l + 4, a1);
    for (int k = 0; k < 8; k++) sumf += l[k];
    return sumf;
}

/* ---- Q6_K ---- */
#define Q6K(SFX, ATTR, DOT4)                                                                                       \
    static ATTR float dot_q6_k_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q6_k *w = vw;                                                                      \
        const struct weft_block_q8_k *x = vx;                                                                      \
        const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);                                                \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t i = 0; i < n / WEFT_QK_K; i++) {                                                              \
            const int8_t *sc = w[i].scales;                                                                        \
            int32x4_t l0 = vdupq_n_s32(0), l1 = l0;                                                                \
            for (int hh = 0; hh < 2; hh++) {                                                                       \
                const uint8_t *ql = w[i].ql + 64 * hh, *qh = w[i].qh + 32 * hh;                                    \
                for (int g = 0; g < 2; g++) { /* l = 16g .. 16g + 15 */                                            \
                    const uint8x16_t L0 = vld1q_u8(ql + 16 * g), L1 = vld1q_u8(ql + 32 + 16 * g);                  \
                    const uint8x16_t H = vld1q_u8(qh + 16 * g);                                                    \
                    /* u = q + 32 of elements 128hh + 32k + 16g + (0..15), k = 0..3 */                             \
                    uint8x16_t u[4];                                                                               \
                    u[0] = vorrq_u8(vandq_u8(L0, m4), vshlq_n_u8(vandq_u8(H, m3), 4));                             \
                    u[1] = vorrq_u8(vandq_u8(L1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(H, 2), m3), 4));              \
                    u[2] = vorrq_u8(vshrq_n_u8(L0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(H, 4), m3), 4));             \
                    u[3] = vorrq_u8(vshrq_n_u8(L1, 4), vshlq_n_u8(vshrq_n_u8(H, 6), 4));                           \
                    for (int k = 0; k < 4; k++) {                                                                  \
                        const int e = 128 * hh + 32 * k + 16 * g;                                                  \
                        const int32x4_t t = DOT4(vreinterpretq_s8_u8(u[k]), vld1q_s8(x[i].qs + e));                \
                        if (g == 0) l0 = vmlaq_n_s32(l0, t, sc[e / 16]);                                           \
                        else l1 = vmlaq_n_s32(l1, t, sc[e / 16]);                                                  \
                    }                                                                                              \
                }                                                                                                  \
            }                                                                                                      \
            int32_t corr[8];                                                                                       \
            for (int l = 0; l < 8; l++)                                                                            \
                corr[l] = (x[i].bsums[2 * l] * sc[2 * l] + x[i].bsums[2 * l + 1] * sc[2 * l + 1]) * 32;            \
            l0 = vsubq_s32(l0, vld1q_s32(corr));                                                                   \
            l1 = vsubq_s32(l1, vld1q_s32(corr + 4));                                                               \
            const float d = x[i].d * weft_half_to_f32(w[i].d);                                                     \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }

Q6K(base, , dot4_base)
Q6K(dp, DOTPROD, dot4_dp)

/* ---- Q5_K ---- */
#define Q5K(SFX, ATTR, DOT4)                                                                                       \
    static ATTR float dot_q5_k_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q5_k *w = vw;                                                                      \
        const struct weft_block_q8_k *x = vx;                                                                      \
        const uint8x16_t m4 = vdupq_n_u8(0x0F), b1 = vdupq_n_u8(1), b2 = vdupq_n_u8(2);                            \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        float summs = 0.0f;                                                                                        \
        for (int64_t i = 0; i < n / WEFT_QK_K; i++) {                                                              \
            uint8_t sc[8], mn[8];                                                                                  \
            int summ = 0;                                                                                          \
            for (int j = 0; j < 8; j++) {                                                                          \
                weft_k4_scale_min(j, w[i].scales, &sc[j], &mn[j]);                                                 \
                summ += (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]) * mn[j];                                       \
            }                                                                                                      \
            uint8x16_t h0 = vld1q_u8(w[i].qh), h1 = vld1q_u8(w[i].qh + 16);                                        \
            int32x4_t l0 = vdupq_n_s32(0), l1 = l0;                                                                \
            for (int c = 0; c < 4; c++) {                                                                          \
                const uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * c), q1 = vld1q_u8(w[i].qs + 32 * c + 16);            \
                /* elements 64c + (0..31): low nibbles, qh bit 2c; 64c + 32 + (0..31): high, bit 2c + 1 */         \
                const uint8x16_t u00 = vorrq_u8(vandq_u8(q0, m4), vshlq_n_u8(vandq_u8(h0, b1), 4));                \
                const uint8x16_t u01 = vorrq_u8(vandq_u8(q1, m4), vshlq_n_u8(vandq_u8(h1, b1), 4));                \
                const uint8x16_t u10 = vorrq_u8(vshrq_n_u8(q0, 4), vshlq_n_u8(vandq_u8(h0, b2), 3));               \
                const uint8x16_t u11 = vorrq_u8(vshrq_n_u8(q1, 4), vshlq_n_u8(vandq_u8(h1, b2), 3));               \
                h0 = vshrq_n_u8(h0, 2);                                                                            \
                h1 = vshrq_n_u8(h1, 2);                                                                            \
                const int8_t *y = x[i].qs + 64 * c;                                                                \
                l0 = vmlaq_n_s32(l0, DOT4(vreinterpretq_s8_u8(u00), vld1q_s8(y)), sc[2 * c]);                      \
                l1 = vmlaq_n_s32(l1, DOT4(vreinterpretq_s8_u8(u01), vld1q_s8(y + 16)), sc[2 * c]);                 \
                l0 = vmlaq_n_s32(l0, DOT4(vreinterpretq_s8_u8(u10), vld1q_s8(y + 32)), sc[2 * c + 1]);             \
                l1 = vmlaq_n_s32(l1, DOT4(vreinterpretq_s8_u8(u11), vld1q_s8(y + 48)), sc[2 * c + 1]);             \
            }                                                                                                      \
            const float d = x[i].d * weft_half_to_f32(w[i].d), dmin = -x[i].d * weft_half_to_f32(w[i].dmin);      \
            summs = fmaf(dmin, (float)summ, summs);                                                                \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1) + summs;                                                                              \
    }

Q5K(base, , dot4_base)
Q5K(dp, DOTPROD, dot4_dp)

void weft_cpu_kernels_fill_neon_k(struct weft_cpu_kernels *k, bool dotprod)
{
    k->dot[WEFT_TYPE_Q4_K] = dot_q4_k_neon;
    k->dot[WEFT_TYPE_Q6_K] = dotprod ? dot_q6_k_dp : dot_q6_k_base;
    k->dot[WEFT_TYPE_Q5_K] = dotprod ? dot_q5_k_dp : dot_q5_k_base;
}

#else

void weft_cpu_kernels_fill_neon_k(struct weft_cpu_kernels *k, bool dotprod) { (void)k, (void)dotprod; }

#endif
