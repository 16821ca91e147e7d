#version 450
// DELTA_NET (backends/backend.h, api 9): the gated delta rule over each
// sequence's state, S x S per v head (M[j][i], j the value index). Per row,
// with q, k its l2-normalised heads (v head h reads q and k head h % Hk, or
// h / (Hv / Hk) with k_grouped: push constant kgrp = Hv / Hk, else 0):
//   b = sigmoid(beta), g = softplus(alpha + dt_bias) * a, M *= exp(g),
//   d[j] = (v[j] - dot(M[j], k)) * b, M[j][i] = fma(k[i], d[j], M[j][i]),
//   out[h * S + j] = dot(M[j], q) * (1 / sqrt(S)).
// Rows of one sequence (one slot) run in row order; sequences, v heads and
// the rows j of M are independent (d[j] and out[j] use row j only). One
// workgroup per (v head, JR = WG / L rows j, candidate row r0): it works
// only when r0 is the first row naming its slot (the rows before it scanned
// backwards), then walks that slot's rows, L lanes per row j, lane l holding
// M[j][l + L e] (e < E) in registers, and writes them back at the end. A
// slot outside the state (the host refuses those steps) is skipped.
// exact (lavapipe, L = 32): the CPU's float order (ops_recurrent.c): the
// l2 norm as ggml's (float squares summed in double by one thread, sqrtf,
// fmaxf, 1 / x), sigmoid and decay by glibc's expf (expf_libm.glsl),
// softplus by glibc's logf (logf_libm.glsl), dot as ggml's AVX
// ggml_vec_dot_f32 (lane 8a + l is accumulator a's lane l: fma_x over the
// 32-element chunks, then (acc0 + acc2) + (acc1 + acc3), m + (m + 4),
// (t0 + t1) + (t2 + t3), the S % 32 tail products added in double), fma_x
// for the update, every step `precise`: the CPU's bits.
// std: the device's exp, log and fma, float sums over the L lanes by
// shared memory; std_sg: by subgroupShuffleXor (L lanes of one subgroup).
// Spec constants: 0 WG (threads), 1 L (lanes per row j, a power of two,
// 32 for exact), 2 E (ceil(S / L)).
// variants: std:-DSTD std_sg:-DSTD,-DUSE_SUBGROUP exact:-DEXACT
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : enable
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint L = 32;
layout(constant_id = 2) const uint E = 4;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer In { float xin[]; };
layout(std430, binding = 1) readonly buffer Beta { float beta[]; };
layout(std430, binding = 2) readonly buffer Alpha { float alpha[]; };
layout(std430, binding = 3) readonly buffer Dtb { float dtb[]; };
layout(std430, binding = 4) readonly buffer A { float av[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(std430, binding = 6) buffer St { float st[]; };
layout(std430, binding = 7) readonly buffer Sl { int slots[]; };

/* offsets and row strides in elements; njb = ceil(S / (WG / L)) */
layout(push_constant) uniform P {
    uint in_off, in_rs, b_off, b_rs, al_off, al_rs, dt_off, a_off, o_off, o_rs, s_off, s_rs, sl_off;
    uint rows, n_slots, hk, hv, S, njb, kgrp;
    float eps;
} p;

#ifdef EXACT
#include "exact.glsl"
#include "expf_libm.glsl"
#include "logf_libm.glsl"
shared float red[2u * WG];   /* per row j: 32 accumulator lanes, then 32 tail products */
shared float sh[4];          /* q scale, k scale, b, decay */
#elif !defined(USE_SUBGROUP)
shared vec2 red[WG];
#endif
shared uint dup;

uint tid, g, lane;

#ifndef EXACT
/* (a, b) summed over the L lanes of row group g; every lane gets the sums */
vec2 lane_sum(vec2 v)
{
#ifdef USE_SUBGROUP
    [[unroll]] for (uint m = L / 2u; m > 0u; m >>= 1) v += subgroupShuffleXor(v, m);
    return v;
#else
    red[tid] = v;
    barrier();
    vec2 s = vec2(0.0);
    for (uint i = 0u; i < L; i++) s += red[g * L + i];
    barrier();
    return s;
#endif
}
#else
/* ggml's ggml_vec_dot_f32 (AVX) of row g's M[j] and y: lane l holds elements
 * l + 32 e; the chunk count nf = S / 32, the tail S % 32 */
float dot_x(const float m[E], const float y[E], uint nf, uint tail)
{
    precise float acc = 0.0, tp = 0.0;
    [[unroll]] for (uint e = 0u; e < E; e++) {
        if (e < nf) acc = fma_x(m[e], y[e], acc);
        else if (lane < tail) tp = m[e] * y[e];
    }
    red[g * 64u + lane] = acc;
    red[g * 64u + 32u + lane] = tp;
    barrier();
    const uint b = g * 64u;
    precise float t0 = (red[b + 0u] + red[b + 16u]) + (red[b + 8u] + red[b + 24u]);
    precise float t1 = (red[b + 1u] + red[b + 17u]) + (red[b + 9u] + red[b + 25u]);
    precise float t2 = (red[b + 2u] + red[b + 18u]) + (red[b + 10u] + red[b + 26u]);
    precise float t3 = (red[b + 3u] + red[b + 19u]) + (red[b + 11u] + red[b + 27u]);
    precise float t4 = (red[b + 4u] + red[b + 20u]) + (red[b + 12u] + red[b + 28u]);
    precise float t5 = (red[b + 5u] + red[b + 21u]) + (red[b + 13u] + red[b + 29u]);
    precise float t6 = (red[b + 6u] + red[b + 22u]) + (red[b + 14u] + red[b + 30u]);
    precise float t7 = (red[b + 7u] + red[b + 23u]) + (red[b + 15u] + red[b + 31u]);
    precise float u0 = t0 + t4, u1 = t1 + t5, u2 = t2 + t6, u3 = t3 + t7;
    precise float tot = (u0 + u1) + (u2 + u3);
    precise double s = double(tot);
    for (uint i = 0u; i < tail; i++) s += double(red[b + 32u + i]);
    barrier();
    return float(s);
}

/* ggml's l2_norm scale of the S floats at xin[off]: 1 / fmaxf(sqrtf((float)
 * (sum of the float squares in double)), eps) */
float l2_scale(uint off)
{
    precise double sum = 0.0;
    for (uint i = 0u; i < p.S; i++) {
        const float v = xin[off + i];
        precise float v2 = v * v;
        sum += double(v2);
    }
    const float r = float(sqrt(double(float(sum))));   /* sqrtf: the double root rounded once more */
    precise float sc = 1.0 / (r > p.eps ? r : p.eps);
    return sc;
}
#endif

void main()
{
    tid = gl_LocalInvocationID.x;
#ifdef USE_SUBGROUP
    lane = gl_SubgroupInvocationID % L;
    g = (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID) / L;
#else
    lane = tid % L;
    g = tid / L;
#endif
    const uint S = p.S, h = gl_WorkGroupID.x / p.njb, kh = p.kgrp != 0u ? h / p.kgrp : h % p.hk;
    const uint j = (gl_WorkGroupID.x % p.njb) * (WG / L) + g;
    const bool jok = j < S;
#ifdef EXACT
    const uint nf = S / 32u, tail = S % 32u;
    const float fs = float(sqrt(double(float(S))));
    precise float qscale = 1.0 / fs;
#else
    const float qscale = 1.0 / sqrt(float(S));
#endif
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
        if (!first) continue;  /* uniform */

        const uint sb = p.s_off + uint(s) * p.s_rs + (h * S + j) * S;
        float m[E];
        [[unroll]] for (uint e = 0u; e < E; e++) {
            const uint i = lane + L * e;
            m[e] = jok && i < S ? st[sb + i] : 0.0;
        }
        for (uint r = r0; r < p.rows; r++) {
            if (slots[p.sl_off + r] != s) continue;  /* uniform */
            const uint ib = p.in_off + r * p.in_rs, qo = ib + kh * S, ko = ib + (p.hk + kh) * S;
            const float vj = jok ? xin[ib + (2u * p.hk + h) * S + j] : 0.0;
            float qv[E], kv[E];
#ifdef EXACT
            if (tid == 0u) {
                sh[0] = l2_scale(qo);
                sh[1] = l2_scale(ko);
                const float nb = -beta[p.b_off + r * p.b_rs + h];
                precise float den = 1.0 + expf_libm(nb);
                precise float b = 1.0 / den;
                precise float xa = alpha[p.al_off + r * p.al_rs + h] + dtb[p.dt_off + h];
                precise float sp1 = 1.0 + expf_libm(xa);
                precise float gg = (xa > 20.0 ? xa : logf_libm(sp1)) * av[p.a_off + h];
                sh[2] = b;
                sh[3] = expf_libm(gg);
            }
            barrier();
            const float qs = sh[0], ks = sh[1], b = sh[2], decay = sh[3];
            barrier();
            [[unroll]] for (uint e = 0u; e < E; e++) {
                const uint i = lane + 32u * e;
                precise float qn = (i < S ? xin[qo + i] : 0.0) * qs;
                precise float kn = (i < S ? xin[ko + i] : 0.0) * ks;
                qv[e] = qn;
                kv[e] = kn;
                precise float md = m[e] * decay;
                m[e] = md;
            }
            precise float kd = dot_x(m, kv, nf, tail);
            precise float d = (vj - kd) * b;
            [[unroll]] for (uint e = 0u; e < E; e++) m[e] = fma_x(kv[e], d, m[e]);
            precise float od = dot_x(m, qv, nf, tail) * qscale;
            if (lane == 0u && jok) o[p.o_off + r * p.o_rs + h * S + j] = od;
#else
            vec2 nq = vec2(0.0);
            [[unroll]] for (uint e = 0u; e < E; e++) {
                const uint i = lane + L * e;
                qv[e] = i < S ? xin[qo + i] : 0.0;
                kv[e] = i < S ? xin[ko + i] : 0.0;
                nq += vec2(qv[e] * qv[e], kv[e] * kv[e]);
            }
            nq = lane_sum(nq);
            const float qs = qscale / max(sqrt(nq.x), p.eps), ks = 1.0 / max(sqrt(nq.y), p.eps);
            const float b = 1.0 / (1.0 + exp(-beta[p.b_off + r * p.b_rs + h]));
            const float xa = alpha[p.al_off + r * p.al_rs + h] + dtb[p.dt_off + h];
            const float decay = exp((xa > 20.0 ? xa : log(1.0 + exp(xa))) * av[p.a_off + h]);
            float pk = 0.0;
            [[unroll]] for (uint e = 0u; e < E; e++) {
                kv[e] *= ks;
                m[e] *= decay;
                pk = fma(m[e], kv[e], pk);
            }
            const float d = (vj - lane_sum(vec2(pk, 0.0)).x) * b;
            float pq = 0.0;
            [[unroll]] for (uint e = 0u; e < E; e++) {
                m[e] = fma(kv[e], d, m[e]);
                pq = fma(m[e], qv[e], pq);
            }
            const float od = lane_sum(vec2(pq, 0.0)).x * qs;
            if (lane == 0u && jok) o[p.o_off + r * p.o_rs + h * S + j] = od;
#endif
        }
        [[unroll]] for (uint e = 0u; e < E; e++) {
            const uint i = lane + L * e;
            if (jok && i < S) st[sb + i] = m[e];
        }
    }
}
