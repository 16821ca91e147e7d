/* ggml_v_expf's polynomial (ARM's optimized-routines expf, ~1.5 ulp), the
 * CPU backend's ggml_v_expf_lane (backends/cpu/cpu_kernels.c) step for step:
 * fma_x (exact.glsl) where it uses fmaf, ldexp for ldexpf (an exact scale by 2^n), the
 * same overflow/underflow blend for |n| > 192. Every step is `precise`, so
 * on a device with IEEE float arithmetic (lavapipe) the bits are the CPU's.
 * The constants are given by their bits (GLSL has no hex floats). */
#ifndef WEFT_EXPV_GLSL
#define WEFT_EXPV_GLSL
#include "exact.glsl"
float expv(float x)
{
    const float r = uintBitsToFloat(0x4b400000u);        /* 0x1.8p23 */
    precise float z = fma_x(x, uintBitsToFloat(0x3fb8aa3bu), r);
    precise float n = z - r;
    precise float b0 = fma_x(-n, uintBitsToFloat(0x3f317200u), x);
    precise float b = fma_x(-n, uintBitsToFloat(0x35bfbe8eu), b0);
    precise float u = b * b;
    precise float p0 = fma_x(uintBitsToFloat(0x3c072010u), b, uintBitsToFloat(0x3d2b9f17u));
    precise float p1 = fma_x(uintBitsToFloat(0x3e2aaf33u), b, uintBitsToFloat(0x3efffedbu));
    precise float p2 = fma_x(uintBitsToFloat(0x3f7ffff6u), b, 1.0);
    precise float j = fma_x(fma_x(p0, u, p1), u, p2);
    if (abs(n) > 192.0) return n <= 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
    return ldexp(j, int(n));
}
#endif
