#version 450
// MOE_ROUTE (backend.h, api 7): for each row of router logits, the k experts
// of largest p (+ the per-expert choice bias) best first, ties to the lower
// expert, and their weights:
//   p = softmax(logits) (SOFTMAX, SOFTMAX_TOPK) or sigmoid(logits) (SIGMOID);
//   w[j] = p[ids[j]], or for SOFTMAX_TOPK the softmax of the k chosen logits;
//   norm: w /= max(sum w, 6.103515625e-5); scale (0: 1): w *= scale;
//   has_es (api 10): w[j] *= expert_scale[ids[j]] (one F32 product).
// One workgroup of 64 per row (rows walked by the group count in x):
// the exps are element-wise over the threads, the sums single-threaded in
// the CPU's order (ggml's soft_max: 16-wide chunks each reduced as
// _mm512_reduce_add_ps, the chunk sums and the tail added in double; the sum
// for norm in double), and each of the k choices a tree argmax over the
// threads (equal values: the lower expert; a NaN never beats a number).
// exact (lavapipe, shaderFloat64): the CPU's bits — ggml_v_expf's polynomial
// (expv.glsl) for whole 16-element chunks, glibc's expf (expf_libm.glsl) for
// the rest and for the sigmoid, every step `precise`.
// std: the GPU's exp, the sums in float (a tree for the softmax's).
// Expert groups (api 8, n_group > 1): thread g < n_group scores group g (its
// two largest choice values added), thread 0 keeps the group_used best (equal:
// the lower group), and the other groups' experts are marked taken.
// Bindings: 0 logits, 1 ids (I32, written), 2 weights (written), 3 bias (bound,
// unread, without has_bias), 4 expert_scale (bound, unread, without has_es).
// Offsets and row strides in elements.
// variants: std:-DSTD exact:-DEXACT
#extension GL_GOOGLE_include_directive : require
#define WG 64u
#define MAX_E 512u
#define MAX_K 64u
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) writeonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer W { float wt[]; };
layout(std430, binding = 3) readonly buffer B { float bias[]; };
layout(std430, binding = 4) readonly buffer S { float escale[]; };
layout(push_constant) uniform P {
    uint l_off, l_rs, i_off, i_rs, w_off, w_rs;
    uint E, k, rows, gating, norm, has_bias, b_off;
    float scale;
    uint n_group, group_used;
    uint has_es, es_off;   /* api 10: the per-expert scale */
} p;
#ifdef EXACT
#include "expv.glsl"
#include "expf_libm.glsl"
#endif

#define G_SIGMOID 1u
#define G_SOFTMAX_TOPK 2u

shared float sp[MAX_E];   /* p */
shared float ss[MAX_E];   /* p + bias: what the choice compares */
shared uint taken[MAX_E];
shared float rv[WG];
shared uint ri[WG];
shared int chosen[MAX_K];
shared float gsc[64];     /* expert groups: a group's score */
shared uint gkept[64];
shared float cw[MAX_K];
shared float s_max, s_inv;

#ifdef EXACT
float ex_chunk(float x) { return expv(x); }
float ex_tail(float x) { return expf_libm(x); }
#else
float ex_chunk(float x) { return exp(x); }
float ex_tail(float x) { return exp(x); }
#endif

/* _mm512_reduce_add_ps's order over y[b .. b+16) (backends/cpu ops_moe.c reduce_add_16) */
float reduce_add_16(uint b)
{
    float t[8], u[4];
    for (uint i = 0u; i < 8u; i++) { precise float v = sp[b + i] + sp[b + i + 8u]; t[i] = v; }
    for (uint i = 0u; i < 4u; i++) { precise float v = t[i] + t[i + 4u]; u[i] = v; }
    precise float a = u[0] + u[2];
    precise float c = u[1] + u[3];
    precise float r = a + c;
    return r;
}

/* a beats b: larger, or equal and a lower index; a NaN never beats a number */
bool beats(float av, uint ai, float bv, uint bi)
{
    if (ai == 0xffffffffu) return false;
    if (bi == 0xffffffffu) return true;
    if (isnan(bv)) return !isnan(av) || ai < bi;
    if (isnan(av)) return false;
    return av > bv || (av == bv && ai < bi);
}

/* ggml's soft_max over cw[0..n) in place, by thread 0 (SOFTMAX_TOPK's chosen logits) */
void softmax_small(uint n)
{
    float mx = uintBitsToFloat(0xff800000u);
    for (uint i = 0u; i < n; i++) mx = mx > cw[i] ? mx : cw[i];
#ifdef EXACT
    double sum = 0.0;
#else
    float sum = 0.0;
#endif
    uint i = 0u;
    for (; i + 16u <= n; i += 16u) {
        float t[16];
        for (uint l = 0u; l < 16u; l++) { precise float d = cw[i + l] - mx; t[l] = ex_chunk(d); cw[i + l] = t[l]; }
        float a8[8], a4[4];
        for (uint l = 0u; l < 8u; l++) { precise float v = t[l] + t[l + 8u]; a8[l] = v; }
        for (uint l = 0u; l < 4u; l++) { precise float v = a8[l] + a8[l + 4u]; a4[l] = v; }
        precise float a = a4[0] + a4[2];
        precise float c = a4[1] + a4[3];
        precise float r = a + c;
#ifdef EXACT
        precise double sn = sum + double(r);
#else
        precise float sn = sum + r;
#endif
        sum = sn;
    }
    for (; i < n; i++) {
        precise float d = cw[i] - mx;
        const float y = ex_tail(d);
        cw[i] = y;
#ifdef EXACT
        precise double sn = sum + double(y);
#else
        precise float sn = sum + y;
#endif
        sum = sn;
    }
#ifdef EXACT
    precise double inv = 1.0LF / sum;
    const float s = float(inv);
#else
    precise float s = 1.0 / sum;
#endif
    for (i = 0u; i < n; i++) { precise float v = cw[i] * s; cw[i] = v; }
}

void main()
{
    const uint t = gl_LocalInvocationID.x;
    const uint E = p.E, K = p.k;
    for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
        const uint lb = p.l_off + r * p.l_rs;
        /* p */
        if (p.gating == G_SIGMOID) {
            for (uint e = t; e < E; e += WG) {
                precise float nx = 0.0 - lg[lb + e];
                precise float den = 1.0 + ex_tail(nx);
                precise float v = 1.0 / den;
                sp[e] = v;
            }
        } else {
            /* the max (order-free), then exp(x - max) */
            float m = uintBitsToFloat(0xff800000u);
            for (uint e = t; e < E; e += WG) m = max(m, lg[lb + e]);
            rv[t] = m;
            barrier();
            for (uint h = WG / 2u; h > 0u; h >>= 1) {
                if (t < h) rv[t] = max(rv[t], rv[t + h]);
                barrier();
            }
            const float mx = rv[0];
            const uint E16 = E & ~15u;
            for (uint e = t; e < E; e += WG) {
                precise float d = lg[lb + e] - mx;
                sp[e] = e < E16 ? ex_chunk(d) : ex_tail(d);
            }
            barrier();
#ifdef EXACT
            /* the CPU's order, single-threaded */
            if (t == 0u) {
                double sum = 0.0;
                uint i = 0u;
                for (; i + 16u <= E; i += 16u) { precise double sn = sum + double(reduce_add_16(i)); sum = sn; }
                for (; i < E; i++) { precise double sn = sum + double(sp[i]); sum = sn; }
                precise double inv = 1.0LF / sum;
                s_inv = float(inv);
            }
            barrier();
            const float inv = s_inv;
#else
            float part = 0.0;
            for (uint e = t; e < E; e += WG) part += sp[e];
            rv[t] = part;
            barrier();
            for (uint h = WG / 2u; h > 0u; h >>= 1) {
                if (t < h) rv[t] += rv[t + h];
                barrier();
            }
            const float inv = 1.0 / rv[0];
#endif
            for (uint e = t; e < E; e += WG) { precise float v = sp[e] * inv; sp[e] = v; }
        }
        /* the choice values */
        for (uint e = t; e < E; e += WG) {
            precise float v = p.has_bias != 0u ? sp[e] + bias[p.b_off + e] : sp[e];
            ss[e] = v;
            taken[e] = 0u;
        }
        barrier();
        if (p.n_group > 1u) {
            const uint G = E / p.n_group;
            if (t < p.n_group) {
                float a = uintBitsToFloat(0xff800000u), b = a;
                for (uint e = t * G; e < (t + 1u) * G; e++) {
                    const float v = ss[e];
                    if (v > a) { b = a; a = v; }
                    else if (v > b) b = v;
                }
                precise float sc = a + b;
                gsc[t] = sc;
            }
            barrier();
            if (t == 0u) {
                for (uint g = 0u; g < p.n_group; g++) gkept[g] = 0u;
                for (uint j = 0u; j < p.group_used; j++) {
                    uint best = 0xffffffffu;
                    for (uint g = 0u; g < p.n_group; g++)
                        if (gkept[g] == 0u && (best == 0xffffffffu || gsc[g] > gsc[best])) best = g;
                    gkept[best] = 1u;
                }
            }
            barrier();
            for (uint e = t; e < E; e += WG)
                if (gkept[e / G] == 0u) taken[e] = 1u;
            barrier();
        }
        /* top k, best first */
        for (uint j = 0u; j < K; j++) {
            float bv = 0.0;
            uint bi = 0xffffffffu;
            for (uint e = t; e < E; e += WG)
                if (taken[e] == 0u && beats(ss[e], e, bv, bi)) { bv = ss[e]; bi = e; }
            rv[t] = bv;
            ri[t] = bi;
            barrier();
            for (uint h = WG / 2u; h > 0u; h >>= 1) {
                if (t < h && beats(rv[t + h], ri[t + h], rv[t], ri[t])) { rv[t] = rv[t + h]; ri[t] = ri[t + h]; }
                barrier();
            }
            if (t == 0u) {
                chosen[j] = int(ri[0]);
                taken[ri[0]] = 1u;
            }
            barrier();
        }
        /* the weights (thread 0: k values) */
        if (t == 0u) {
            if (p.gating == G_SOFTMAX_TOPK) {
                for (uint j = 0u; j < K; j++) cw[j] = lg[lb + uint(chosen[j])];
                softmax_small(K);
            } else {
                for (uint j = 0u; j < K; j++) cw[j] = sp[uint(chosen[j])];
            }
            if (p.norm != 0u) {
#ifdef EXACT
                double s = 0.0;
                for (uint j = 0u; j < K; j++) { precise double sn = s + double(cw[j]); s = sn; }
                float sum = float(s);
#else
                float sum = 0.0;
                for (uint j = 0u; j < K; j++) sum += cw[j];
#endif
                if (!(sum >= 6.103515625e-5)) sum = 6.103515625e-5;
                for (uint j = 0u; j < K; j++) { precise float v = cw[j] / sum; cw[j] = v; }
            }
            if (p.scale != 0.0)
                for (uint j = 0u; j < K; j++) { precise float v = cw[j] * p.scale; cw[j] = v; }
            if (p.has_es != 0u)
                for (uint j = 0u; j < K; j++) {
                    precise float v = cw[j] * escale[p.es_off + uint(chosen[j])];
                    cw[j] = v;
                }
            for (uint j = 0u; j < K; j++) {
                ids[p.i_off + r * p.i_rs + j] = chosen[j];
                wt[p.w_off + r * p.w_rs + j] = cw[j];
            }
        }
        barrier();  /* sp, ss, taken are rewritten for the next row */
    }
}
