/* NEON (AArch64) dots for the low-bit types: Q2_K, Q3_K and IQ4_XS against
 * Q8_K, IQ4_NL and MXFP4 against Q8_0, in the x86 order as neon/q32_neon.c
 * and neon/kq_neon.c (tests/cpu/test_cpu_kquant.c checks every table against
 * cpu_ref_dot.c bit for bit). The int32 lanes are exact whatever computes
 * them (vdotq_s32 on neon_dotprod, vmull_s8 + two pairwise adds on neon);
 * the float steps are the reference's, which mirrors the AVX2 kernels:
 *  - Q2_K: per block, first acc = fma(-x.d * dmin, float(mins lanes), acc),
 *    lane l = min[2l] * bsums[2l] + min[2l+1] * bsums[2l+1]; then
 *    acc = fma(x.d * d, float(lanes), acc), lane l summing the elements e
 *    with (e % 32) / 4 == l times their 16-element scale; hsum_float_8.
 *  - Q3_K: as Q2_K's second step, values q - 4 * !hbit, scales (sc - 32).
 *  - IQ4_XS: lane l of a block sums (sc_s - 32) * (elements 4l..4l+3 of
 *    sub-block s); acc = fma(d * x.d, float(lanes), acc); hsum_float_8.
 *  - IQ4_NL, MXFP4: code-book values by vqtbl1q_s8; blocks in pairs, the
 *    even one into acc1, the odd one into acc2 (fma(scale, float(lanes))),
 *    hsum_float_8(acc1 + acc2), an odd last block added as a scalar fma of
 *    its int total. IQ4_NL's dot_mm (tinyBLAS) keeps one accumulator. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/neon/neon_common.h"





AI float h2f(weft_half h) { return weft_half_to_f32(h); }

/* Q2_K's mins lanes: lane l = mn[2l] * bsums[2l] + mn[2l+1] * bsums[2l+1] */
AI void q2_min_lanes(const uint8_t scales[16], const int16_t bsums[16], int32x4_t *m0, int32x4_t *m1)
{
    const uint8x16_t mn = vshrq_n_u8(vld1q_u8(scales), 4);
    const int16x8_t s0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
    const int16x8_t s1 = vreinterpretq_s16_u16(vmovl_high_u8(mn));
    const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    *m0 = vpaddq_s32(vmull_s16(vget_low_s16(s0), vget_low_s16(b0)), vmull_high_s16(s0, b0));
    *m1 = vpaddq_s32(vmull_s16(vget_low_s16(s1), vget_low_s16(b1)), vmull_high_s16(s1, b1));
}

/* Q2_K / Q3_K: elements 128h + 32j + (0..15) are (qs[32h + (0..15)] >> 2j) & 3
 * (lanes 0..3, scale 8h + 2j), + (16..31) from qs[32h + 16 ..] (lanes 4..7,
 * scale 8h + 2j + 1). Q3_K's third bit of element 128h + 32j + l is bit
 * 4h + j of hmask[l]: the masks shift right by one per 32 elements. */
#define KLOW(SFX, ATTR, DOT4)                                                                                      \
    static ATTR float dot_q2_k_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q2_k *w = vw;                                                                      \
        const struct weft_block_q8_k *x = vx;                                                                      \
        const uint8x16_t m3 = vdupq_n_u8(3);                                                                       \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t i = 0; i < n / WEFT_QK_K; i++) {                                                              \
            const float d = x[i].d * h2f(w[i].d), dmin = -x[i].d * h2f(w[i].dmin);                                 \
            int32x4_t l0, l1;                                                                                      \
            q2_min_lanes(w[i].scales, x[i].bsums, &l0, &l1);                                                       \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), dmin);                                                         \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), dmin);                                                         \
            l0 = vdupq_n_s32(0), l1 = l0;                                                                          \
            const uint8_t *sc = w[i].scales;                                                                       \
            const int8_t *y = x[i].qs;                                                                             \
            for (int h = 0; h < 2; h++) {                                                                          \
                uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * h), q1 = vld1q_u8(w[i].qs + 32 * h + 16);                  \
                for (int j = 0; j < 4; j++, y += 32, sc += 2) {                                                    \
                    const int8x16_t v0 = vreinterpretq_s8_u8(vandq_u8(q0, m3));                                    \
                    const int8x16_t v1 = vreinterpretq_s8_u8(vandq_u8(q1, m3));                                    \
                    q0 = vshrq_n_u8(q0, 2);                                                                        \
                    q1 = vshrq_n_u8(q1, 2);                                                                        \
                    l0 = vmlaq_n_s32(l0, DOT4(v0, vld1q_s8(y)), sc[0] & 0xF);                                      \
                    l1 = vmlaq_n_s32(l1, DOT4(v1, vld1q_s8(y + 16)), sc[1] & 0xF);                                 \
                }                                                                                                  \
            }                                                                                                      \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }                                                                                                              \
    static ATTR float dot_q3_k_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q3_k *w = vw;                                                                      \
        const struct weft_block_q8_k *x = vx;                                                                      \
        const uint8x16_t m3 = vdupq_n_u8(3), b1 = vdupq_n_u8(1);                                                   \
        const int8x16_t four = vdupq_n_s8(4);                                                                      \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t i = 0; i < n / WEFT_QK_K; i++) {                                                              \
            const float d = x[i].d * h2f(w[i].d);                                                                  \
            int8_t sc[16];                                                                                         \
            weft_q3_k_scales(w[i].scales, sc);                                                                     \
            uint8x16_t hm0 = vld1q_u8(w[i].hmask), hm1 = vld1q_u8(w[i].hmask + 16);                                \
            int32x4_t l0 = vdupq_n_s32(0), l1 = l0;                                                                \
            const int8_t *y = x[i].qs;                                                                             \
            const int8_t *s = sc;                                                                                  \
            for (int h = 0; h < 2; h++) {                                                                          \
                uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * h), q1 = vld1q_u8(w[i].qs + 32 * h + 16);                  \
                for (int j = 0; j < 4; j++, y += 32, s += 2) {                                                     \
                    /* (q2 | hbit << 2) - 4 */                                                                     \
                    const uint8x16_t u0 = vorrq_u8(vandq_u8(q0, m3), vshlq_n_u8(vandq_u8(hm0, b1), 2));            \
                    const uint8x16_t u1 = vorrq_u8(vandq_u8(q1, m3), vshlq_n_u8(vandq_u8(hm1, b1), 2));            \
                    q0 = vshrq_n_u8(q0, 2);                                                                        \
                    q1 = vshrq_n_u8(q1, 2);                                                                        \
                    hm0 = vshrq_n_u8(hm0, 1);                                                                      \
                    hm1 = vshrq_n_u8(hm1, 1);                                                                      \
                    const int8x16_t v0 = vsubq_s8(vreinterpretq_s8_u8(u0), four);                                  \
                    const int8x16_t v1 = vsubq_s8(vreinterpretq_s8_u8(u1), four);                                  \
                    l0 = vmlaq_n_s32(l0, DOT4(v0, vld1q_s8(y)), s[0]);                                             \
                    l1 = vmlaq_n_s32(l1, DOT4(v1, vld1q_s8(y + 16)), s[1]);                                        \
                }                                                                                                  \
            }                                                                                                      \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }

/* the code-book values of a nibble block: lo = elements 0..15 (low nibbles), hi = 16..31 */
AI void nl_values(const uint8_t *qs, int8x16_t kv, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vqtbl1q_s8(kv, vandq_u8(q, vdupq_n_u8(0x0F)));
    *hi = vqtbl1q_s8(kv, vshrq_n_u8(q, 4));
}

static const int8_t kvalues_iq4nl[16] = WEFT_KVALUES_IQ4NL;
static const int8_t kvalues_mxfp4[16] = WEFT_KVALUES_MXFP4;

/* IQ4_NL / MXFP4 block ib's scale: IQ4_NL x.d * w.d (one_chain: w.d * x.d, as
 * the reference's tinyBLAS form writes it; the products are the same), MXFP4
 * x.d * 2^(e - 128) */
#define NL_SCALE(w, x, ib, mx)                                                                                     \
    ((mx) ? h2f((x)[ib].d) * weft_e8m0_to_f32_half(((const struct weft_block_mxfp4 *)(w))[ib].e)                 \
          : h2f((x)[ib].d) * h2f(((const struct weft_block_iq4_nl *)(w))[ib].d))
#define NL_QS(w, ib, mx)                                                                                           \
    ((mx) ? ((const struct weft_block_mxfp4 *)(w))[ib].qs : ((const struct weft_block_iq4_nl *)(w))[ib].qs)

#define KNL(SFX, ATTR, DOT4)                                                                                       \
    static ATTR float nl_pairs_##SFX(const void *w, const struct weft_block_q8_0 *x, int64_t nb, bool mx)        \
    {                                                                                                              \
        const int8x16_t kv = vld1q_s8(mx ? kvalues_mxfp4 : kvalues_iq4nl);                                         \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0, c0 = a0, c1 = a0;                                                \
        int64_t ib = 0;                                                                                            \
        for (; ib + 1 < nb; ib += 2) {                                                                             \
            int8x16_t lo, hi;                                                                                      \
            nl_values(NL_QS(w, ib, mx), kv, &lo, &hi);                                                             \
            int32x4_t l0 = DOT4(lo, vld1q_s8(x[ib].qs)), l1 = DOT4(hi, vld1q_s8(x[ib].qs + 16));                   \
            float s = NL_SCALE(w, x, ib, mx);                                                                      \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), s);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), s);                                                            \
            nl_values(NL_QS(w, ib + 1, mx), kv, &lo, &hi);                                                         \
            l0 = DOT4(lo, vld1q_s8(x[ib + 1].qs)), l1 = DOT4(hi, vld1q_s8(x[ib + 1].qs + 16));                     \
            s = NL_SCALE(w, x, ib + 1, mx);                                                                        \
            c0 = vfmaq_n_f32(c0, vcvtq_f32_s32(l0), s);                                                            \
            c1 = vfmaq_n_f32(c1, vcvtq_f32_s32(l1), s);                                                            \
        }                                                                                                          \
        float sumf = hsum8(vaddq_f32(a0, c0), vaddq_f32(a1, c1));                                                  \
        for (; ib < nb; ib++) {                                                                                    \
            int8x16_t lo, hi;                                                                                      \
            nl_values(NL_QS(w, ib, mx), kv, &lo, &hi);                                                             \
            const int32x4_t l = vaddq_s32(DOT4(lo, vld1q_s8(x[ib].qs)), DOT4(hi, vld1q_s8(x[ib].qs + 16)));        \
            sumf = scalar_madd(NL_SCALE(w, x, ib, mx), (float)vaddvq_s32(l), sumf);                                \
        }                                                                                                          \
        return sumf;                                                                                               \
    }                                                                                                              \
    static ATTR float dot_iq4_nl_##SFX(const void *w, const void *x, int64_t n)                                    \
    {                                                                                                              \
        return nl_pairs_##SFX(w, x, n / WEFT_QK4_NL, false);                                                       \
    }                                                                                                              \
    static ATTR float dot_mxfp4_##SFX(const void *w, const void *x, int64_t n)                                     \
    {                                                                                                              \
        return nl_pairs_##SFX(w, x, n / WEFT_QK_MXFP4, true);                                                      \
    }                                                                                                              \
    /* tinyBLAS's form: one accumulator over every block, then hsum_float_8 */                                     \
    static ATTR float dot_mm_iq4_nl_##SFX(const void *vw, const void *vx, int64_t n)                               \
    {                                                                                                              \
        const struct weft_block_iq4_nl *w = vw;                                                                    \
        const struct weft_block_q8_0 *x = vx;                                                                      \
        const int8x16_t kv = vld1q_s8(kvalues_iq4nl);                                                              \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t ib = 0; ib < n / WEFT_QK4_NL; ib++) {                                                         \
            int8x16_t lo, hi;                                                                                      \
            nl_values(w[ib].qs, kv, &lo, &hi);                                                                     \
            const float s = h2f(w[ib].d) * h2f(x[ib].d);                                                           \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(DOT4(lo, vld1q_s8(x[ib].qs))), s);                                  \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(DOT4(hi, vld1q_s8(x[ib].qs + 16))), s);                             \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }                                                                                                              \
    static ATTR float dot_iq4_xs_##SFX(const void *vw, const void *vx, int64_t n)                                  \
    {                                                                                                              \
        const struct weft_block_iq4_xs *w = vw;                                                                    \
        const struct weft_block_q8_k *x = vx;                                                                      \
        const int8x16_t kv = vld1q_s8(kvalues_iq4nl);                                                              \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t i = 0; i < n / WEFT_QK_K; i++) {                                                              \
            int32x4_t l0 = vdupq_n_s32(0), l1 = l0;                                                                \
            for (int s = 0; s < WEFT_QK_K / 32; s++) {                                                             \
                int8x16_t lo, hi;                                                                                  \
                nl_values(w[i].qs + 16 * s, kv, &lo, &hi);                                                         \
                const int ls = weft_iq4_xs_scale(&w[i], s);                                                        \
                l0 = vmlaq_n_s32(l0, DOT4(lo, vld1q_s8(x[i].qs + 32 * s)), ls);                                    \
                l1 = vmlaq_n_s32(l1, DOT4(hi, vld1q_s8(x[i].qs + 32 * s + 16)), ls);                               \
            }                                                                                                      \
            const float d = h2f(w[i].d) * x[i].d;                                                                  \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }

KLOW(base, , dot4_base)
KLOW(dp, DOTPROD, dot4_dp)
KNL(base, , dot4_base)
KNL(dp, DOTPROD, dot4_dp)

void weft_cpu_kernels_fill_neon_low(struct weft_cpu_kernels *k, bool dotprod)
{
    k->dot[WEFT_TYPE_Q2_K] = dotprod ? dot_q2_k_dp : dot_q2_k_base;
    k->dot[WEFT_TYPE_Q3_K] = dotprod ? dot_q3_k_dp : dot_q3_k_base;
    k->dot[WEFT_TYPE_IQ4_XS] = dotprod ? dot_iq4_xs_dp : dot_iq4_xs_base;
    k->dot[WEFT_TYPE_IQ4_NL] = dotprod ? dot_iq4_nl_dp : dot_iq4_nl_base;
    k->dot[WEFT_TYPE_MXFP4] = dotprod ? dot_mxfp4_dp : dot_mxfp4_base;
    k->dot_mm[WEFT_TYPE_IQ4_NL] = dotprod ? dot_mm_iq4_nl_dp : dot_mm_iq4_nl_base;
    k->mm_k_multiple[WEFT_TYPE_IQ4_NL] = 32;
}

#else

void weft_cpu_kernels_fill_neon_low(struct weft_cpu_kernels *k, bool dotprod) { (void)k, (void)dotprod; }

#endif
