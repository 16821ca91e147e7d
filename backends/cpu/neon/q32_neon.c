/* NEON (AArch64) dots for the 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; Q4_0 and Q8_0 also four
 * rows at once, dot4, checked by tests/cpu/test_cpu_q32_dot4.c), written to the x86 order so
 * ARM output equals x86 output bit for bit (tests/cpu/test_cpu_q32.c checks
 * every table this machine runs against the reference, cpu_ref_dot.c, which
 * emulates ggml's AVX2 lanes).
 *
 * An AVX2 ymm of 8 float lanes is two float32x4 here (lanes 0..3, 4..7).
 * The int32 lane l of a block, the sum of elements 4l..4l+3 of w * x, is
 * vdotq_s32's lane where the CPU has dotprod (the neon_dotprod table), and
 * vmull_s8 + two pairwise adds where it has not (neon): both exact, so the
 * two tables give the same bits. The float steps are the AVX2 kernels':
 * fused multiply-adds (vfmaq), the scalar chains of Q4_0 and of the Q4_1 /
 * Q5_1 mins, and hsum_float_8's order ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)).
 *
 * Built for any AArch64 (Advanced SIMD is part of the base ISA); the dotprod
 * forms carry their own target attribute and are chosen at run time
 * (cpu_kernels.c, getauxval's HWCAP_ASIMDDP), as the x86 levels are. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/neon/neon_common.h"


AI float h2f(weft_half h) { return weft_half_to_f32(h); }





/* Each kernel once per form: NAME##_base with dot4_base, NAME##_dp with the
 * dotprod instruction. */
#define KERNELS(SFX, ATTR, DOT4)                                                                                    \
    static ATTR float dot_q8_0_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q8_0 *w = vw, *x = vx;                                                             \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t i = 0; i < n / WEFT_QK8_0; i++) {                                                             \
            const int32x4_t l0 = DOT4(vld1q_s8(w[i].qs), vld1q_s8(x[i].qs));                                       \
            const int32x4_t l1 = DOT4(vld1q_s8(w[i].qs + 16), vld1q_s8(x[i].qs + 16));                             \
            const float d = h2f(w[i].d) * h2f(x[i].d);                                                             \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }                                                                                                              \
    /* Q4_0: the exact block total, then sumf += ((float)total * dw) * dx */                                      \
    static ATTR float dot_q4_0_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q4_0 *w = vw;                                                                      \
        const struct weft_block_q8_0 *x = vx;                                                                      \
        const uint8x16_t m4 = vdupq_n_u8(0x0F);                                                                    \
        const int8x16_t s8 = vdupq_n_s8(8);                                                                        \
        float sumf = 0;                                                                                            \
        for (int64_t i = 0; i < n / WEFT_QK4_0; i++) {                                                             \
            const uint8x16_t q = vld1q_u8(w[i].qs);                                                                \
            const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), s8);                               \
            const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), s8);                              \
            const int32x4_t l = vaddq_s32(DOT4(lo, vld1q_s8(x[i].qs)), DOT4(hi, vld1q_s8(x[i].qs + 16)));          \
            sumf += ((float)vaddvq_s32(l) * h2f(w[i].d)) * h2f(x[i].d);                                            \
        }                                                                                                          \
        return sumf;                                                                                               \
    }                                                                                                              \
    /* Q4_1: 8 lanes of unsigned nibbles (low nibbles x[0..15]: lanes 0..3,                                        \
     * high x[16..31]: 4..7), acc = fma(dw * dx, lanes, acc), summs = scalar_madd(m, s, summs) */                       \
    static ATTR float dot_q4_1_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q4_1 *w = vw;                                                                      \
        const struct weft_block_q8_1 *x = vx;                                                                      \
        const uint8x16_t m4 = vdupq_n_u8(0x0F);                                                                    \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        float summs = 0;                                                                                           \
        for (int64_t i = 0; i < n / WEFT_QK4_1; i++) {                                                             \
            summs = scalar_madd(h2f(w[i].m), h2f(x[i].s), summs);                                                         \
            const uint8x16_t q = vld1q_u8(w[i].qs);                                                                \
            const int32x4_t l0 = DOT4(vreinterpretq_s8_u8(vandq_u8(q, m4)), vld1q_s8(x[i].qs));                    \
            const int32x4_t l1 = DOT4(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vld1q_s8(x[i].qs + 16));              \
            const float d = h2f(w[i].d) * h2f(x[i].d);                                                             \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1) + summs;                                                                              \
    }

/* byte j = 0x10 where bit j of the 16 bits b is set */
AI uint8x16_t hbit16(uint32_t b)
{
    static const uint8_t m[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)b), vdup_n_u8((uint8_t)(b >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(m)), vdupq_n_u8(0x10));
}

/* Q5_0 / Q5_1: u = nibble | high bit << 4 (0..31), elements 0..15 from the low
 * nibbles and qh bits 0..15, 16..31 from the high nibbles and bits 16..31 */
#define Q5_LANES(DOT4, b, x, sub, l0, l1)                                                                           \
    do {                                                                                                           \
        const uint32_t qh_ = weft_qh_load((b).qh);                                                                 \
        const uint8x16_t q_ = vld1q_u8((b).qs);                                                                    \
        int8x16_t u0_ = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q_, vdupq_n_u8(0x0F)), hbit16(qh_)));                 \
        int8x16_t u1_ = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q_, 4), hbit16(qh_ >> 16)));                        \
        u0_ = vsubq_s8(u0_, vdupq_n_s8(sub));                                                                      \
        u1_ = vsubq_s8(u1_, vdupq_n_s8(sub));                                                                      \
        l0 = DOT4(u0_, vld1q_s8((x).qs));                                                                          \
        l1 = DOT4(u1_, vld1q_s8((x).qs + 16));                                                                     \
    } while (0)

/* Q5_0 as Q8_0 on v = u - 16; Q5_1 as Q4_1 on u */
#define KERNELS5(SFX, ATTR, DOT4)                                                                                   \
    static ATTR float dot_q5_0_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q5_0 *w = vw;                                                                      \
        const struct weft_block_q8_0 *x = vx;                                                                      \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        for (int64_t i = 0; i < n / WEFT_QK5_0; i++) {                                                             \
            int32x4_t l0, l1;                                                                                      \
            Q5_LANES(DOT4, w[i], x[i], 16, l0, l1);                                                                \
            const float d = h2f(w[i].d) * h2f(x[i].d);                                                             \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1);                                                                                      \
    }                                                                                                              \
    static ATTR float dot_q5_1_##SFX(const void *vw, const void *vx, int64_t n)                                    \
    {                                                                                                              \
        const struct weft_block_q5_1 *w = vw;                                                                      \
        const struct weft_block_q8_1 *x = vx;                                                                      \
        float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                                                  \
        float summs = 0;                                                                                           \
        for (int64_t i = 0; i < n / WEFT_QK5_1; i++) {                                                             \
            summs = scalar_madd(h2f(w[i].m), h2f(x[i].s), summs);                                                         \
            int32x4_t l0, l1;                                                                                      \
            Q5_LANES(DOT4, w[i], x[i], 0, l0, l1);                                                                 \
            const float d = h2f(w[i].d) * h2f(x[i].d);                                                             \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(l0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(l1), d);                                                            \
        }                                                                                                          \
        return hsum8(a0, a1) + summs;                                                                              \
    }

/* Four rows at once (weft_cpu_dot4_fn): the activation block loaded once,
 * each row's float steps exactly its one-row kernel's. Q8_0: row r's two
 * accumulators, hsum8 each. Q4_0: the four block totals in one int32x4, then
 * ((float)total * dw) * dx lane by lane into four row sums. */
#define ROW(w, r, stride, T) ((const T *)((const uint8_t *)(w) + (size_t)(r) * (stride)))
#define KERNELS4(SFX, ATTR, DOT4)                                                                                   \
    static ATTR void dot4_q8_0_##SFX(const void *vw, size_t stride, const void *vx, int64_t n, float out[4])       \
    {                                                                                                              \
        const struct weft_block_q8_0 *x = vx, *w[4];                                                               \
        for (int r = 0; r < 4; r++) w[r] = ROW(vw, r, stride, struct weft_block_q8_0);                             \
        float32x4_t a[4][2];                                                                                       \
        for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = vdupq_n_f32(0);                                            \
        for (int64_t i = 0; i < n / WEFT_QK8_0; i++) {                                                             \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                                   \
            const float dx = h2f(x[i].d);                                                                          \
            for (int r = 0; r < 4; r++) {                                                                          \
                const int32x4_t l0 = DOT4(vld1q_s8(w[r][i].qs), x0);                                               \
                const int32x4_t l1 = DOT4(vld1q_s8(w[r][i].qs + 16), x1);                                          \
                const float d = h2f(w[r][i].d) * dx;                                                               \
                a[r][0] = vfmaq_n_f32(a[r][0], vcvtq_f32_s32(l0), d);                                              \
                a[r][1] = vfmaq_n_f32(a[r][1], vcvtq_f32_s32(l1), d);                                              \
            }                                                                                                      \
        }                                                                                                          \
        for (int r = 0; r < 4; r++) out[r] = hsum8(a[r][0], a[r][1]);                                              \
    }                                                                                                              \
    static ATTR void dot4_q4_0_##SFX(const void *vw, size_t stride, const void *vx, int64_t n, float out[4])       \
    {                                                                                                              \
        const struct weft_block_q8_0 *x = vx;                                                                      \
        const struct weft_block_q4_0 *w[4];                                                                        \
        for (int r = 0; r < 4; r++) w[r] = ROW(vw, r, stride, struct weft_block_q4_0);                             \
        const uint8x16_t m4 = vdupq_n_u8(0x0F);                                                                    \
        const int8x16_t s8 = vdupq_n_s8(8);                                                                        \
        float32x4_t sum = vdupq_n_f32(0);                                                                          \
        for (int64_t i = 0; i < n / WEFT_QK4_0; i++) {                                                             \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                                   \
            int32x4_t l[4];                                                                                        \
            float dw[4];                                                                                           \
            for (int r = 0; r < 4; r++) {                                                                          \
                const uint8x16_t q = vld1q_u8(w[r][i].qs);                                                         \
                const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), s8);                           \
                const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), s8);                          \
                l[r] = vaddq_s32(DOT4(lo, x0), DOT4(hi, x1));                                                      \
                dw[r] = h2f(w[r][i].d);                                                                            \
            }                                                                                                      \
            const int32x4_t t = vpaddq_s32(vpaddq_s32(l[0], l[1]), vpaddq_s32(l[2], l[3]));                        \
            sum = vaddq_f32(sum, vmulq_n_f32(vmulq_f32(vcvtq_f32_s32(t), vld1q_f32(dw)), h2f(x[i].d)));            \
        }                                                                                                          \
        vst1q_f32(out, sum);                                                                                       \
    }

KERNELS(base, , dot4_base)
KERNELS(dp, DOTPROD, dot4_dp)
KERNELS5(base, , dot4_base)
KERNELS5(dp, DOTPROD, dot4_dp)
KERNELS4(base, , dot4_base)
KERNELS4(dp, DOTPROD, dot4_dp)

void weft_cpu_kernels_fill_neon_q(struct weft_cpu_kernels *k, bool dotprod)
{
    k->dot[WEFT_TYPE_Q8_0] = dotprod ? dot_q8_0_dp : dot_q8_0_base;
    k->dot[WEFT_TYPE_Q4_0] = dotprod ? dot_q4_0_dp : dot_q4_0_base;
    k->dot[WEFT_TYPE_Q4_1] = dotprod ? dot_q4_1_dp : dot_q4_1_base;
    k->dot[WEFT_TYPE_Q5_0] = dotprod ? dot_q5_0_dp : dot_q5_0_base;
    k->dot[WEFT_TYPE_Q5_1] = dotprod ? dot_q5_1_dp : dot_q5_1_base;
    k->dot4[WEFT_TYPE_Q8_0] = dotprod ? dot4_q8_0_dp : dot4_q8_0_base;
    k->dot4[WEFT_TYPE_Q4_0] = dotprod ? dot4_q4_0_dp : dot4_q4_0_base;
}

#else

void weft_cpu_kernels_fill_neon_q(struct weft_cpu_kernels *k, bool dotprod) { (void)k, (void)dotprod; }

#endif
