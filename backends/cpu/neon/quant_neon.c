/* NEON (AArch64) activation quantizers: Q8_0, Q8_1 (ggml's x86 runtime
 * rounding) and Q8_K, byte for byte the reference's (base/quant.c,
 * weft_quantize_row_act; tests/cpu/test_cpu_q32.c and test_cpu_kquant.c check
 * every table this machine runs). The same for both NEON levels: no dot
 * products here.
 *
 * Q8_0 / Q8_1: amax = the largest |x| (vmaxnmq, the instruction GCC makes of
 * the reference's fmaxf, so NaNs are skipped as there), d = f16(amax / 127),
 * q = int8(nearbyint(x * (127 / amax))): vcvtnq_s32_f32 rounds to nearest
 * even and saturates like the reference's frinti + fcvtzs on AArch64, and the
 * two narrowing moves keep the low byte as the int8 cast does. Q8_1's
 * s = f16(float(sum q) * d) with the unrounded d.
 *
 * Q8_K: max = the first value of the largest magnitude (the reference's
 * strict compare: NaNs never win), iscale = -127 / max, q = ggml's
 * nearest_int(iscale * x) (the product, plus 1.5 * 2^23, rounded twice, the
 * low mantissa bits less 2^22), min(127, q) and the low byte; bsums from the
 * stored bytes; d = 1 / iscale. An all-zero block is written as zeros. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"

#define AI static inline __attribute__((always_inline))

/* max |x| over 32 floats (0 for an all-zero or all-NaN block) */
AI float absmax32(const float *x)
{
    float32x4_t m0 = vabsq_f32(vld1q_f32(x)), m1 = vabsq_f32(vld1q_f32(x + 4));
    m0 = vmaxnmq_f32(m0, vabsq_f32(vld1q_f32(x + 8)));
    m1 = vmaxnmq_f32(m1, vabsq_f32(vld1q_f32(x + 12)));
    m0 = vmaxnmq_f32(m0, vabsq_f32(vld1q_f32(x + 16)));
    m1 = vmaxnmq_f32(m1, vabsq_f32(vld1q_f32(x + 20)));
    m0 = vmaxnmq_f32(m0, vabsq_f32(vld1q_f32(x + 24)));
    m1 = vmaxnmq_f32(m1, vabsq_f32(vld1q_f32(x + 28)));
    /* the reference starts from +0: an all-NaN block gives 0 */
    return vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(m0, m1), vdupq_n_f32(0.0f)));
}

/* int8 of the int32 lanes' low bytes, 16 of them */
AI int8x16_t low_bytes(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d)
{
    const int16x8_t ab = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
    const int16x8_t cd = vcombine_s16(vmovn_s32(c), vmovn_s32(d));
    return vcombine_s8(vmovn_s16(ab), vmovn_s16(cd));
}

/* q[j] = int8(nearbyint(x[j] * id)) for 32 elements; returns sum(q) */
AI int quant32(const float *x, float id, int8_t *q)
{
    int32x4_t v[8];
    for (int k = 0; k < 8; k++) v[k] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4 * k), id));
    const int8x16_t q0 = low_bytes(v[0], v[1], v[2], v[3]), q1 = low_bytes(v[4], v[5], v[6], v[7]);
    vst1q_s8(q, q0);
    vst1q_s8(q + 16, q1);
    return vaddlvq_s8(q0) + vaddlvq_s8(q1);
}

static void quant_q8_0_neon(const float *x, void *vy, int64_t n)
{
    struct weft_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WEFT_QK8_0; i++, x += WEFT_QK8_0) {
        const float amax = absmax32(x);
        y[i].d = weft_f32_to_half(amax / 127);
        quant32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
    }
}

static void quant_q8_1_neon(const float *x, void *vy, int64_t n)
{
    struct weft_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WEFT_QK8_1; i++, x += WEFT_QK8_1) {
        const float amax = absmax32(x), d = amax / 127;
        y[i].d = weft_f32_to_half(d);
        const int sum = quant32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
        y[i].s = weft_f32_to_half((float)sum * d);
    }
}

static void quant_q8_k_neon(const float *x, void *vy, int64_t n)
{
    struct weft_block_q8_k *b = vy;
    const float32x4_t magic = vdupq_n_f32(12582912.f);
    const int32x4_t mant = vdupq_n_s32(0x007fffff), bias = vdupq_n_s32(0x00400000), c127 = vdupq_n_s32(127);
    for (int64_t i = 0; i < n / WEFT_QK_K; i++, x += WEFT_QK_K) {
        /* the largest |x|; a NaN lane compares false and keeps the running max */
        float32x4_t m0 = vdupq_n_f32(0.0f), m1 = m0;
        for (int j = 0; j < WEFT_QK_K; j += 8) {
            const float32x4_t a0 = vabsq_f32(vld1q_f32(x + j)), a1 = vabsq_f32(vld1q_f32(x + j + 4));
            m0 = vbslq_f32(vcgtq_f32(a0, m0), a0, m0);
            m1 = vbslq_f32(vcgtq_f32(a1, m1), a1, m1);
        }
        const float amax = vmaxvq_f32(vmaxq_f32(m0, m1));
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* the first element of that magnitude */
        float max = 0.0f;
        const float32x4_t av = vdupq_n_f32(amax);
        for (int j = 0; j < WEFT_QK_K; j += 4) {
            if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + j)), av)) == 0) continue;
            int k = 0;
            while (!(x[j + k] == amax || x[j + k] == -amax)) k++;
            max = x[j + k];
            break;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < WEFT_QK_K; j += 16) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++) {
                const float32x4_t v = vaddq_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale), magic);
                const int32x4_t t = vsubq_s32(vandq_s32(vreinterpretq_s32_f32(v), mant), bias);
                q[k] = vminq_s32(t, c127);
            }
            const int8x16_t p = low_bytes(q[0], q[1], q[2], q[3]);
            vst1q_s8(b[i].qs + j, p);
            b[i].bsums[j / 16] = vaddlvq_s8(p);
        }
        b[i].d = 1 / iscale;
    }
}

void weft_cpu_kernels_fill_neon_quant(struct weft_cpu_kernels *k)
{
    k->quant[WEFT_TYPE_Q8_0] = quant_q8_0_neon;
    k->quant[WEFT_TYPE_Q8_1] = quant_q8_1_neon;
    k->quant[WEFT_TYPE_Q8_K] = quant_q8_k_neon;
}

#else

void weft_cpu_kernels_fill_neon_quant(struct weft_cpu_kernels *k) { (void)k; }

#endif
