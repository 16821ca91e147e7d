/* One expf for every softmax and SiLU of the CPU backend: ggml_v_expf's
 * polynomial (AVX512F+DQ branch of ggml-cpu/vec.h, i.e. ARM's
 * optimized-routines expf, max error ~1.5 ulp) for one lane in portable C:
 * fmaf where ggml uses _mm512_fmadd_ps/_mm512_fnmadd_ps, ldexpf for
 * _mm512_scalef_ps (an exact scale by 2^n, n an integer here), and ggml's
 * overflow/underflow blend for |n| > 192. Only IEEE add/mul/fma and an exact
 * scale: any backend that can do those step for step (shaders/expv.glsl on
 * lavapipe) gets the same bits, which libm's expf would not allow.
 * Header only (static inline). */
#ifndef WEFT_CPU_EXPF_H
#define WEFT_CPU_EXPF_H

#include <math.h>

static inline float weft_cpu_expf(float x)
{
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}

#endif
