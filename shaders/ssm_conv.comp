#version 450
// SSM_CONV (backends/backend.h, api 9): the causal depthwise convolution of
// K taps over C channels, each sequence's K - 1 previous inputs kept in its
// state slot (input j back at (K - 1 - j) * C: the oldest first).
//   y = win[0] * w[c][0], then y = fma(win[i], w[c][i], y) for i = 1 .. K-1
//   (win[K-1] the current input), out = silu ? y / (1 + e(0 - y)) : y.
// Rows of one sequence (one slot) run in row order, each seeing the window
// the previous one left; sequences are independent. One workgroup per
// (WG channels, candidate row r0): r0's workgroup works only when r0 is the
// first row naming its slot (found by scanning the rows before it,
// backwards: in a prefill chunk the row just before matches at once), then
// walks the rows after r0 of that slot, each thread keeping its channel's
// window and taps in registers, and writes the window back at the end. A
// slot outside the state (the host refuses those steps) is skipped: no
// state read or write.
// exact (lavapipe): fma_x (exact.glsl) for the CPU's fmaf chain, e = ggml's
// polynomial (expv.glsl) on the first C & ~15 channels and glibc's expf
// (expf_libm.glsl) on the rest, every step `precise`: the CPU's bits.
// std: the device's fma and exp.
// Spec constants: 0 WG (threads), 1 KM1 (K - 1, 1..63).
// variants: std:-DSTD exact:-DEXACT
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : enable

layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint KM1 = 3;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) buffer S { float st[]; };
layout(std430, binding = 4) readonly buffer L { int slots[]; };

/* offsets and row strides in elements */
layout(push_constant) uniform P {
    uint x_off, x_rs, w_off, w_rs, o_off, o_rs, s_off, s_rs, sl_off;
    uint C, rows, n_slots, silu;
} p;

#ifdef EXACT
#include "exact.glsl"
#include "expv.glsl"
#include "expf_libm.glsl"
#endif

shared uint dup;

void main()
{
    const uint tid = gl_LocalInvocationID.x, c = gl_WorkGroupID.x * WG + tid;
    const bool live = c < p.C;
    for (uint r0 = gl_WorkGroupID.y; r0 < p.rows; r0 += gl_NumWorkGroups.y) {
        const int s = slots[p.sl_off + r0];
        if (s < 0 || uint(s) >= p.n_slots) continue;  /* uniform */
        /* is r0 the first row of slot s? */
        if (tid == 0u) dup = 0u;
        barrier();
        bool first = true;
        for (uint base = 0u; base < r0 && first; base += WG) {
            const uint i = base + tid;
            if (i < r0 && slots[p.sl_off + r0 - 1u - i] == s) dup = 1u;
            barrier();
            first = dup == 0u;
            barrier();
        }
        if (!first || !live) continue;  /* uniform, then per thread: no barrier follows */

        const uint sb = p.s_off + uint(s) * p.s_rs + c;
        float win[KM1], tap[KM1 + 1u];
        [[unroll]] for (uint i = 0u; i < KM1; i++) win[i] = st[sb + i * p.C];
        [[unroll]] for (uint i = 0u; i <= KM1; i++) tap[i] = w[p.w_off + c * p.w_rs + i];
        for (uint r = r0; r < p.rows; r++) {
            if (slots[p.sl_off + r] != s) continue;
            const float xv = x[p.x_off + r * p.x_rs + c];
#ifdef EXACT
            precise float y = win[0] * tap[0];
            [[unroll]] for (uint i = 1u; i < KM1; i++) y = fma_x(win[i], tap[i], y);
            y = fma_x(xv, tap[KM1], y);
            if (p.silu != 0u) {
                precise float ny = 0.0 - y;
                precise float den = 1.0 + (c < (p.C & ~15u) ? expv(ny) : expf_libm(ny));
                precise float sy = y / den;
                y = sy;
            }
#else
            float y = win[0] * tap[0];
            [[unroll]] for (uint i = 1u; i < KM1; i++) y = fma(win[i], tap[i], y);
            y = fma(xv, tap[KM1], y);
            if (p.silu != 0u) y = y / (1.0 + exp(-y));
#endif
            [[unroll]] for (uint i = 0u; i + 1u < KM1; i++) win[i] = win[i + 1u];
            win[KM1 - 1u] = xv;
            o[p.o_off + r * p.o_rs + c] = y;
        }
        [[unroll]] for (uint i = 0u; i < KM1; i++) st[sb + i * p.C] = win[i];
    }
}
