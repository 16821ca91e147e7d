#version 450
// SILU_MUL, a GLU: out = act(gate) * up.
// SwiGLU (std, exact): out = gate / (1 + exp(-gate)) * up, the CPU's float order.
// exact (lavapipe): as the CPU's weft_cpu_swiglu_ref, exp is ggml_v_expf's
// polynomial (expv.glsl) for the elements of whole 16-element chunks and
// glibc's expf (expf_libm.glsl) for the n % 16 leftovers of a row, every
// step `precise`, so the bits are the CPU's.
// GeGLU (gelu, act GELU_TANH): g(x) = 0 for x <= -10, x for x >= 10, else the
// F16 table entry of x rounded to F16 (ties to even, in integer arithmetic as
// base/types.h's weft_f32_to_half) — the table is the CPU's: every F16
// value's tanh-GeLU computed on the host with libm and rounded to F16
// (vk_ops.c), binding 3 — then one F32 multiply by up: the CPU's bits on any
// device.
// SwiGLU-OAI (oai, oai_x; act SWIGLU_OAI, gpt-oss): x = min(gate, limit),
// y = clamp(up, -limit, limit), out = x / (1 + exp(alpha * -x)) * (y + 1), the
// CPU's float order (ggml's swiglu_oai); oai_x (lavapipe) with glibc's expf
// (expf_libm.glsl), as the CPU calls it: its bits. alpha and limit follow
// the 8 push words.
// Sigmoid (sig, sig_x; act SIGMOID, Qwen3.5's gated attention output):
// out = up * (1 / (1 + exp(-gate))), the CPU's float order (ggml's sigmoid,
// then the product); sig_x (lavapipe) with glibc's expf (expf_libm.glsl):
// the CPU's bits.
// variants: std:-DSTD exact:-DEXACT gelu:-DGELU oai:-DOAI oai_x:-DOAI,-DOAI_EXACT sig:-DSIG sig_x:-DSIG,-DSIG_EXACT
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
#ifdef GELU
layout(std430, binding = 3) readonly buffer T { uint gelu_tab[]; };  /* 65536 F16, two per word */
#endif
#ifdef OAI
layout(push_constant) uniform P { uint g_off, g_rs, u_off, u_rs, o_off, o_rs, ne0, ne1; float alpha, limit; } p;
#else
layout(push_constant) uniform P { uint g_off, g_rs, u_off, u_rs, o_off, o_rs, ne0, ne1; } p;
#endif
#if defined(OAI_EXACT) || defined(SIG_EXACT)
#include "expf_libm.glsl"
#endif
#ifdef EXACT
#include "expv.glsl"
#include "expf_libm.glsl"
#endif

#ifdef GELU
/* the F16 bits nearest f (ties to even): NaN keeps a quiet NaN, overflow
 * gives inf, F16 subnormals rounded at their own bit */
uint f16_bits(float f)
{
    const uint x = floatBitsToUint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return sign;
        const uint e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, sh = 126u - e;  /* 14..24 */
        uint hm = m >> sh;
        const uint rem = m & ((1u << sh) - 1u), half_ = 1u << (sh - 1u);
        if (rem > half_ || (rem == half_ && (hm & 1u) != 0u)) hm++;
        return sign | hm;
    }
    uint h = (ax - 0x38000000u) >> 13;
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}

/* F16 bits to F32, exactly (subnormals included, whatever the device's
 * denormal mode for F16) */
float f16_value(uint h)
{
    const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0u) {
        precise float v = float(m) * (1.0 / 16777216.0);   /* m * 2^-24: exact */
        return uintBitsToFloat(sign | floatBitsToUint(v));
    }
    if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}
#endif

void main()
{
    uint k = gl_GlobalInvocationID.x;
    if (k >= p.ne0) return;
    for (uint r = gl_WorkGroupID.y; r < p.ne1; r += gl_NumWorkGroups.y) {
        float x = g[p.g_off + r * p.g_rs + k];
#ifdef GELU
        float y = 0.0;
        if (x >= 10.0) {
            precise float xy = x * u[p.u_off + r * p.u_rs + k];
            y = xy;
        } else if (!(x <= -10.0)) {
            const uint hb = f16_bits(x);
            const float gl = f16_value((gelu_tab[hb >> 1] >> ((hb & 1u) * 16u)) & 0xffffu);
            precise float gy = gl * u[p.u_off + r * p.u_rs + k];
            y = gy;
        }
        o[p.o_off + r * p.o_rs + k] = y;
#elif defined(OAI)
        const float xc = x < p.limit ? x : p.limit;
        const float uv = u[p.u_off + r * p.u_rs + k];
        const float yc = uv < -p.limit ? -p.limit : uv > p.limit ? p.limit : uv;
        precise float t = p.alpha * -xc;
#ifdef OAI_EXACT
        precise float den = 1.0 + expf_libm(t);
#else
        precise float den = 1.0 + exp(t);
#endif
        precise float glu = xc / den;
        precise float y1 = yc + 1.0;
        precise float y = glu * y1;
        o[p.o_off + r * p.o_rs + k] = y;
#elif defined(SIG)
        precise float nx = -x;
#ifdef SIG_EXACT
        precise float den = 1.0 + expf_libm(nx);
#else
        precise float den = 1.0 + exp(nx);
#endif
        precise float sg = 1.0 / den;
        precise float y = u[p.u_off + r * p.u_rs + k] * sg;
        o[p.o_off + r * p.o_rs + k] = y;
#else
#ifdef EXACT
        precise float nx = 0.0 - x;
        precise float den = 1.0 + (k < (p.ne0 & ~15u) ? expv(nx) : expf_libm(nx));
        precise float s = x / den;
#else
        precise float s = x / (1.0 + exp(-x));
#endif
        precise float y = s * u[p.u_off + r * p.u_rs + k];
        o[p.o_off + r * p.o_rs + k] = y;
#endif
    }
}
