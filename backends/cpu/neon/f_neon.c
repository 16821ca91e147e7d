/* NEON (AArch64) float kernels: the F16, F32 and BF16 dots, their multi-row
 * (tinyBLAS) dot_mm forms, the F16 and BF16 activation converters and flash
 * attention's F16 accumulator updates (f16_mad, f16_scale), bit-identical to the portable
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
 * BF16: ggml_vec_dot_bf16's AVX512BF16 order as the reference has it (two
 * 16-lane accumulators per 64 elements, lane l taking elements 2l + 1 then
 * 2l by exact-product fmas, vld2q_u16 splitting odd from even; each reduced
 * by weft_cpu_reduce_add_16's tree and added in double, the tail in double).
 * dot_mm: one 16-lane accumulator (BF16: dpbf16 over 32-element chunks),
 * the same tree. quant[F16]: vcvt_f16_f32 after a NaN is made its sign's
 * payload-free quiet NaN; quant[BF16]: integer round-to-nearest-even.
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

/* ---- BF16, the multi-row (tinyBLAS) orders, the F16 / BF16 activation converters ---- */

/* weft_cpu_reduce_add_16 of the 16 lanes r[0..3] (lanes 4q..4q+3 in r[q]) */
AI float reduce16(const float32x4_t r[4])
{
    const float32x4_t u = vaddq_f32(vaddq_f32(r[0], r[2]), vaddq_f32(r[1], r[3]));
    return (vgetq_lane_f32(u, 0) + vgetq_lane_f32(u, 2)) + (vgetq_lane_f32(u, 1) + vgetq_lane_f32(u, 3));
}

AI float32x4_t bf_lo(uint16x8_t v) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16)); }
AI float32x4_t bf_hi(uint16x8_t v) { return vreinterpretq_f32_u32(vshll_high_n_u16(v, 16)); }

/* dpbf16_step on the 16 lanes of 32 elements at a, b (lane l: elements 2l,
 * 2l + 1): acc += a[2l+1] * b[2l+1], then acc += a[2l] * b[2l] (exact
 * products, so the fused steps round as the adds) */
AI void dpbf16_16(float32x4_t c[4], const weft_bf16 *a, const weft_bf16 *b)
{
    for (int h = 0; h < 2; h++) {
        const uint16x8x2_t ua = vld2q_u16(a + 16 * h), ub = vld2q_u16(b + 16 * h); /* [0] even, [1] odd */
        c[2 * h] = vfmaq_f32(c[2 * h], bf_lo(ua.val[1]), bf_lo(ub.val[1]));
        c[2 * h] = vfmaq_f32(c[2 * h], bf_lo(ua.val[0]), bf_lo(ub.val[0]));
        c[2 * h + 1] = vfmaq_f32(c[2 * h + 1], bf_hi(ua.val[1]), bf_hi(ub.val[1]));
        c[2 * h + 1] = vfmaq_f32(c[2 * h + 1], bf_hi(ua.val[0]), bf_hi(ub.val[0]));
    }
}

/* ggml_vec_dot_bf16's AVX512BF16 order: c1 over elements i..i+31 and c2 over
 * i+32..i+63 of each 64, each reduced and added in double, the tail in double */
static float dot_bf16_neon(const void *wv, const void *xv, int64_t n)
{
    const weft_bf16 *a = wv, *b = xv;
    const int64_t np = n & ~(int64_t)63;
    float32x4_t c1[4], c2[4];
    for (int q = 0; q < 4; q++) c1[q] = c2[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < np; i += 64) {
        dpbf16_16(c1, a + i, b + i);
        dpbf16_16(c2, a + i + 32, b + i + 32);
    }
    double s = 0;
    s += (double)reduce16(c1);
    s += (double)reduce16(c2);
    for (int64_t i = np; i < n; i++) s += (double)(weft_bf16_to_f32(a[i]) * weft_bf16_to_f32(b[i]));
    return (float)s;
}

/* tinyBLAS: one 16-lane accumulator, element i in lane i % 16 (n % 16 == 0) */
static float dot_mm_f32_neon(const void *wv, const void *xv, int64_t n)
{
    const float *a = wv, *b = xv;
    float32x4_t c[4];
    for (int q = 0; q < 4; q++) c[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
        for (int q = 0; q < 4; q++) c[q] = vfmaq_f32(c[q], vld1q_f32(a + i + 4 * q), vld1q_f32(b + i + 4 * q));
    return reduce16(c);
}

static float dot_mm_f16_neon(const void *wv, const void *xv, int64_t n)
{
    const weft_half *a = wv, *b = xv;
    float32x4_t c[4];
    for (int q = 0; q < 4; q++) c[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
        for (int q = 0; q < 4; q++) c[q] = vfmaq_f32(c[q], h4(a + i + 4 * q), h4(b + i + 4 * q));
    return reduce16(c);
}

/* tinyBLAS<32, __m512bh>: one accumulator, dpbf16 over 32-element chunks (n % 32 == 0) */
static float dot_mm_bf16_neon(const void *wv, const void *xv, int64_t n)
{
    const weft_bf16 *a = wv, *b = xv;
    float32x4_t c[4];
    for (int q = 0; q < 4; q++) c[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 32) dpbf16_16(c, a + i, b + i);
    return reduce16(c);
}

/* F16: vcvt_f16_f32 rounds to nearest even as weft_f32_to_half; a NaN becomes
 * the quiet NaN of its sign first (weft_f32_to_half drops the payload) */
static void quant_f16_neon(const float *x, void *yv, int64_t n)
{
    weft_half *y = yv;
    const uint32x4_t sign = vdupq_n_u32(0x80000000u), qnan = vdupq_n_u32(0x7fc00000u);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        const uint32x4_t u = vreinterpretq_u32_f32(v);
        const uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
        const float32x4_t c = vreinterpretq_f32_u32(vbslq_u32(nan, vorrq_u32(vandq_u32(u, sign), qnan), u));
        vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(c)));
    }
    for (; i < n; i++) y[i] = weft_f32_to_half(x[i]);
}

/* BF16: weft_f32_to_bf16 in integer lanes (round to nearest even by adding
 * 0x7fff + lsb; a NaN keeps its top bits with the quiet bit 64 set) */
static void quant_bf16_neon(const float *x, void *yv, int64_t n)
{
    weft_bf16 *y = yv;
    const uint32x4_t bias = vdupq_n_u32(0x7fff), one = vdupq_n_u32(1), absm = vdupq_n_u32(0x7fffffffu);
    const uint32x4_t inf = vdupq_n_u32(0x7f800000u), quiet = vdupq_n_u32(64);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + i));
        const uint32x4_t hi = vshrq_n_u32(u, 16);
        const uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, bias), vandq_u32(hi, one)), 16);
        const uint32x4_t nan = vcgtq_u32(vandq_u32(u, absm), inf);
        vst1_u16(y + i, vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, quiet), r)));
    }
    for (; i < n; i++) y[i] = weft_f32_to_bf16(x[i]);
}

void weft_cpu_kernels_fill_neon_f(struct weft_cpu_kernels *k)
{
    k->dot[WEFT_TYPE_BF16] = dot_bf16_neon;
    k->dot_mm[WEFT_TYPE_F32] = dot_mm_f32_neon;
    k->dot_mm[WEFT_TYPE_F16] = dot_mm_f16_neon;
    k->dot_mm[WEFT_TYPE_BF16] = dot_mm_bf16_neon;
    k->mm_k_multiple[WEFT_TYPE_F32] = 16;
    k->mm_k_multiple[WEFT_TYPE_F16] = 16;
    k->mm_k_multiple[WEFT_TYPE_BF16] = 32;
    k->quant[WEFT_TYPE_F16] = quant_f16_neon;
    k->quant[WEFT_TYPE_BF16] = quant_bf16_neon;
    k->swiglu = swiglu_neon;
    k->dot[WEFT_TYPE_F16] = dot_f16_neon;
    k->dot[WEFT_TYPE_F32] = dot_f32_neon;
    k->f16_mad = f16_mad_neon;
    k->f16_scale = f16_scale_neon;
}

#else

void weft_cpu_kernels_fill_neon_f(struct weft_cpu_kernels *k) { (void)k; }

#endif
