/* NEON (AArch64) float kernels: the F16 and F32 dots and flash attention's F16
 * accumulator updates (f16_mad, f16_scale), bit-identical to the portable
 * reference (cpu_ref_dot.c, cpu_kernels.c) and so to the x86 tables
 * (tests/cpu/test_cpu_float.c and tests/cpu/test_cpu_attn.c check every
 * table this machine runs). With these the generic attention row, which
 * calls dot[F16] per position and f16_mad per position, runs vectorized.
 *
 * The dots are ggml_vec_dot_f16 / _f32 on AVX-512 as the reference mirrors
 * them: element e of each 64-element step in accumulator (e/16)%4, lane
 * e%16, by fused multiply-adds; a 16-lane accumulator is four float32x4
 * here (lanes 4q..4q+3 in quarter q). Then (s0+s2)+(s1+s3) lane-wise and
 * weft_cpu_reduce_add_16's tree (lane l + lane l+8, then l + l+4, then
 * (u0+u2)+(u1+u3)); the tails as the reference's (F16: products added in
 * double; F32: products rounded and added in element order, the last n % 4
 * fused).
 *
 * SwiGLU: swiglu/swiglu.c's AVX2 form on four lanes (ggml_v_expf's steps,
 * each fmaf a vfmaq / vfmsq, ldexpf(j, n) as (j * 2^(n >> 1)) * 2^(n - (n >> 1)),
 * the |n| > 192 blend), 16-element chunks and the reference for the rest;
 * a NaN n converts to 0 here (INT_MIN on x86), whose factors are 1.0 too.
 *
 * Conversions: vcvt_f32_f16 widens exactly; vcvt_f16_f32 rounds to nearest
 * even (the default FPCR mode), as weft_f32_to_half does for every non-NaN
 * value, and the accumulator never holds NaN unless its inputs do. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>

#include "base/types.h"

#define AI static inline __attribute__((always_inline))

/* ggml's scalar `sumf += x * y` of the F32 tail's last n % 4, contracted in
 * ggml's GCC build (cpu_ref_dot.c's switch; keep in step with it) */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif

AI float32x4_t h4(const weft_half *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* (s0+s2)+(s1+s3) of the four 16-lane accumulators, then
 * weft_cpu_reduce_add_16 */
AI float reduce64(float32x4_t s[4][4])
{
    float32x4_t r[4];
    for (int q = 0; q < 4; q++) r[q] = vaddq_f32(vaddq_f32(s[0][q], s[2][q]), vaddq_f32(s[1][q], s[3][q]));
    const float32x4_t u = vaddq_f32(vaddq_f32(r[0], r[2]), vaddq_f32(r[1], r[3])); /* t[i] + t[i+4] */
    return (vgetq_lane_f32(u, 0) + vgetq_lane_f32(u, 2)) + (vgetq_lane_f32(u, 1) + vgetq_lane_f32(u, 3));
}

static float dot_f16_neon(const void *wv, const void *xv, int64_t n)
{
    const weft_half *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    float32x4_t s[4][4];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < 4; q++) s[j][q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < 4; q++) s[j][q] = vfmaq_f32(s[j][q], h4(a + i + 16 * j + 4 * q), h4(b + i + 16 * j + 4 * q));
    double t = reduce64(s);
    for (int64_t i = np; i < n; i++) t += (double)(weft_half_to_f32(a[i]) * weft_half_to_f32(b[i]));
    return (float)t;
}

static float dot_f32_neon(const void *wv, const void *xv, int64_t n)
{
    const float *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    float32x4_t s[4][4];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < 4; q++) s[j][q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < 4; q++)
                s[j][q] = vfmaq_f32(s[j][q], vld1q_f32(a + i + 16 * j + 4 * q), vld1q_f32(b + i + 16 * j + 4 * q));
    float t = reduce64(s);
    const int64_t vec_end = np + ((n - np) & ~(int64_t)3);
    int64_t i = np;
    for (; i < vec_end; i++) t += a[i] * b[i];
    for (; i < n; i++) {
#if WEFT_GGML_SCALAR_CONTRACT
        t = fmaf(a[i], b[i], t);
#else
        t = t + a[i] * b[i];
#endif
    }
    return t;
}

static void f16_mad_neon(weft_half *acc, const weft_half *v, float s, int64_t n)
{
    const float32x4_t vs = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t r = vfmaq_f32(h4(acc + i), h4(v + i), vs);
        vst1_u16(acc + i, vreinterpret_u16_f16(vcvt_f16_f32(r)));
    }
    for (; i < n; i++) acc[i] = weft_f32_to_half(fmaf(weft_half_to_f32(v[i]), s, weft_half_to_f32(acc[i])));
}

static void f16_scale_neon(weft_half *acc, float s, int64_t n)
{
    const float32x4_t vs = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(acc + i, vreinterpret_u16_f16(vcvt_f16_f32(vmulq_f32(h4(acc + i), vs))));
    for (; i < n; i++) acc[i] = weft_f32_to_half(weft_half_to_f32(acc[i]) * s);
}

/* ggml_v_expf, as swiglu.c's expf_avx2 */
AI float32x4_t expf_neon(float32x4_t x)
{
    const float32x4_t r = vdupq_n_f32(0x1.8p23f);
    const float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(0x1.715476p+0f));
    const float32x4_t n = vsubq_f32(z, r);
    const float32x4_t b =
        vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n, vdupq_n_f32(0x1.7f7d1cp-20f));
    const uint32x4_t d = vcgtq_f32(vabsq_f32(n), vdupq_n_f32(192));
    const float32x4_t u = vmulq_f32(b, b);
    const float32x4_t j = vfmaq_f32(
        vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(0x1.ffffecp-1f), b),
        vfmaq_f32(vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b),
                  vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b), u),
        u);
    const int32x4_t ni = vcvtq_s32_f32(n);
    const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t p1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t p2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    const float32x4_t res = vmulq_f32(vmulq_f32(j, p1), p2);
    if (vmaxvq_u32(d) == 0) return res;
    const float32x4_t alt = vbslq_f32(vclezq_f32(n), vdupq_n_f32(0.0f), vdupq_n_f32(INFINITY));
    return vbslq_f32(d, alt, res);
}

static void swiglu_neon(float *out, const float *gate, const float *up, int64_t n)
{
    const float32x4_t one = vdupq_n_f32(1.0f), zero = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) /* 16-element chunks, as the reference, in quarters */
        for (int q = 0; q < 16; q += 4) {
            const float32x4_t x = vld1q_f32(gate + i + q);
            const float32x4_t e = expf_neon(vsubq_f32(zero, x));
            const float32x4_t sl = vdivq_f32(x, vaddq_f32(one, e));
            vst1q_f32(out + i + q, vmulq_f32(sl, vld1q_f32(up + i + q)));
        }
    if (i < n) weft_cpu_swiglu_ref(out + i, gate + i, up + i, n - i);
}

void weft_cpu_kernels_fill_neon_f(struct weft_cpu_kernels *k)
{
    k->swiglu = swiglu_neon;
    k->dot[WEFT_TYPE_F16] = dot_f16_neon;
    k->dot[WEFT_TYPE_F32] = dot_f32_neon;
    k->f16_mad = f16_mad_neon;
    k->f16_scale = f16_scale_neon;
}

#else

void weft_cpu_kernels_fill_neon_f(struct weft_cpu_kernels *k) { (void)k; }

#endif
