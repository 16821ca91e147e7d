/* What the NEON kernel files share (include inside their __aarch64__ block,
 * after <arm_neon.h>): the inline and dotprod target attributes, ggml's
 * scalar `s += a * b` as its GCC build contracts it (cpu_ref_dot.c's switch),
 * the four-byte lane dots with and without the dot product instructions, and
 * hsum_float_8's order on two float32x4. */
#ifndef WEFT_CPU_NEON_COMMON_H
#define WEFT_CPU_NEON_COMMON_H

#include <arm_neon.h>
#include <math.h>

#define AI static inline __attribute__((always_inline))
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif
AI float scalar_madd(float a, float b, float c)
{
#if WEFT_GGML_SCALAR_CONTRACT
    return fmaf(a, b, c);
#else
    return c + a * b;
#endif
}

/* int32 lane l = sum over bytes 4l..4l+3 of a * b */
AI int32x4_t dot4_base(int8x16_t a, int8x16_t b)
{
    const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpaddq_s32(lo, vpaddlq_s16(vmull_high_s8(a, b)));
}
AI DOTPROD int32x4_t dot4_dp(int8x16_t a, int8x16_t b) { return vdotq_s32(vdupq_n_s32(0), a, b); }

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)) of lanes 0..3 = lo, 4..7 = hi */
AI float hsum8(float32x4_t lo, float32x4_t hi)
{
    const float32x4_t r = vaddq_f32(lo, hi);
    return (vgetq_lane_f32(r, 0) + vgetq_lane_f32(r, 2)) + (vgetq_lane_f32(r, 1) + vgetq_lane_f32(r, 3));
}

/* Prefill driver over a 256-element-block tile TILE(wp, ws, xp, xs, nb, o, ldo, mr, nr, T)
 * (neon/kq_gemm_neon.c, neon/kq_low_gemm_neon.c): the weight-row tiles outermost (a tile's
 * rows stay in cache while the activations stream by); 2 x 4 tiles, the edges as smaller ones */
#define NEON_K2X4_CASE(TILE, m, r, T)                                                                              \
    case (m) * 8 + (r): TILE(wp, ws, xp, xs, nb, o, ldo, m, r, T); break;
#define NEON_K2X4_DRIVER(TILE, ATTR, FN, T)                                                                        \
    static ATTR void FN(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n, float *out, \
                        size_t ldo)                                                                                \
    {                                                                                                              \
        const int64_t nb = n / WEFT_QK_K;                                                                          \
        for (int i = 0; i < nw; i += 2) {                                                                          \
            const int mr = nw - i < 2 ? nw - i : 2;                                                                \
            for (int j = 0; j < nx; j += 4) {                                                                      \
                const int nr = nx - j < 4 ? nx - j : 4;                                                            \
                const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = (const uint8_t *)x + (size_t)j * xs; \
                float *o = out + (size_t)j * ldo + i;                                                              \
                switch (mr * 8 + nr) {                                                                             \
                    NEON_K2X4_CASE(TILE, 1, 1, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 1, 2, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 1, 3, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 1, 4, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 2, 1, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 2, 2, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 2, 3, T)                                                                  \
                    NEON_K2X4_CASE(TILE, 2, 4, T)                                                                  \
                default: break;                                                                                    \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }

#endif
