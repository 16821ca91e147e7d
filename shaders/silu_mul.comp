#version 450
// SILU_MUL (SwiGLU): out = gate / (1 + exp(-gate)) * up, the CPU's float order.
// exact (lavapipe): as the CPU's weft_cpu_swiglu_ref, exp is ggml_v_expf's
// polynomial (expv.glsl) for the elements of whole 16-element chunks and
// glibc's expf (expf_libm.glsl) for the n % 16 leftovers of a row, every
// step `precise`, so the bits are the CPU's.
// variants: std:-DSTD exact:-DEXACT
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint g_off, g_rs, u_off, u_rs, o_off, o_rs, ne0, ne1; } p;
#ifdef EXACT
#include "expv.glsl"
#include "expf_libm.glsl"
#endif

void main()
{
    uint k = gl_GlobalInvocationID.x;
    if (k >= p.ne0) return;
    for (uint r = gl_WorkGroupID.y; r < p.ne1; r += gl_NumWorkGroups.y) {
        float x = g[p.g_off + r * p.g_rs + k];
#ifdef EXACT
        precise float nx = 0.0 - x;
        precise float den = 1.0 + (k < (p.ne0 & ~15u) ? expv(nx) : expf_libm(nx));
        precise float s = x / den;
#else
        precise float s = x / (1.0 + exp(-x));
#endif
        precise float y = s * u[p.u_off + r * p.u_rs + k];
        o[p.o_off + r * p.o_rs + k] = y;
    }
}
