#version 450
// Matrix-vector product for decode: out[r][n] = (x[r] · W[n] (+ bias[n]))
// (+ add[r][n]) for
// up to MV_MAX_ROWS activation rows r, so a small batch reads W once.
//
// One workgroup per MV_NR weight rows (2 on GPUs, more on a CPU device where
// each workgroup costs more than its work; n0 = MV_NR * (group x + group y *
// groups in x)); its WG threads stride over the rows four elements at a time
// (consecutive threads read consecutive bytes of W and x; each x value
// serves both rows), each keeping one partial sum per (weight row,
// activation row); the partials are reduced with subgroupAdd (USE_SUBGROUP)
// or a shared-memory tree, and the threads write the MV_NR*M outputs.
// A residual `add` may alias `out`: the thread that writes out[r][n] is the
// one that read add[r][n] just before.
//
// Bindings: 0 W (uint words), 1 x, 2 out, 3 add, 4 bias (f32; bound, unread,
// when has_add / has_bias is 0). Offsets and strides
// from push constants: W in bytes, the rest in floats.
// Spec constants: 0 WG (threads, a power of two), 1 MV_NR (weight rows).
// variants: f32:-DTYPE_F32 f16:-DTYPE_F16 bf16:-DTYPE_BF16 q8_0:-DTYPE_Q8_0 q4_0:-DTYPE_Q4_0 q4_1:-DTYPE_Q4_1 q5_0:-DTYPE_Q5_0 q5_1:-DTYPE_Q5_1 q4_k:-DTYPE_Q4_K q5_k:-DTYPE_Q5_K q6_k:-DTYPE_Q6_K q2_k:-DTYPE_Q2_K q3_k:-DTYPE_Q3_K iq4_nl:-DTYPE_IQ4_NL iq4_xs:-DTYPE_IQ4_XS mxfp4:-DTYPE_MXFP4 f32_sg:-DTYPE_F32,-DUSE_SUBGROUP f16_sg:-DTYPE_F16,-DUSE_SUBGROUP bf16_sg:-DTYPE_BF16,-DUSE_SUBGROUP q8_0_sg:-DTYPE_Q8_0,-DUSE_SUBGROUP q4_0_sg:-DTYPE_Q4_0,-DUSE_SUBGROUP q4_1_sg:-DTYPE_Q4_1,-DUSE_SUBGROUP q5_0_sg:-DTYPE_Q5_0,-DUSE_SUBGROUP q5_1_sg:-DTYPE_Q5_1,-DUSE_SUBGROUP q4_k_sg:-DTYPE_Q4_K,-DUSE_SUBGROUP q5_k_sg:-DTYPE_Q5_K,-DUSE_SUBGROUP q6_k_sg:-DTYPE_Q6_K,-DUSE_SUBGROUP q2_k_sg:-DTYPE_Q2_K,-DUSE_SUBGROUP q3_k_sg:-DTYPE_Q3_K,-DUSE_SUBGROUP iq4_nl_sg:-DTYPE_IQ4_NL,-DUSE_SUBGROUP iq4_xs_sg:-DTYPE_IQ4_XS,-DUSE_SUBGROUP mxfp4_sg:-DTYPE_MXFP4,-DUSE_SUBGROUP
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : enable
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#define MV_MAX_ROWS 8

layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MV_NR = 2;
layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer WBuf { uint data_w[]; };
layout(binding = 1) readonly buffer XBuf { float data_x[]; };
layout(binding = 2) buffer OBuf { float data_o[]; };
layout(binding = 3) readonly buffer ABuf { float data_a[]; };
layout(binding = 4) readonly buffer BBuf { float data_b[]; };

#define DQ_WORD(i) data_w[i]
#if defined(TYPE_Q4_1) || defined(TYPE_Q5_1)
#define DQ_SPLIT_MIN 1  /* + m * (the Q8_1 block sum s, f16-rounded), as the CPU */
#endif
#include "dequant.glsl"

layout(push_constant) uniform Push {
    uint w_off, w_stride;   /* bytes */
    uint x_off, x_stride;   /* floats */
    uint o_off, o_stride;
    uint a_off, a_stride;
    uint K, N, M, has_add;
    uint s_off, s_stride;   /* Q4_1/Q5_1: the activation blocks' f16 sums, in x's buffer */
    uint b_off, has_bias;   /* the bias (f32, one per weight row n), floats */
} pc;

/* [weight row][activation row][subgroup (USE_SUBGROUP) or thread] */
shared float red[MV_NR * MV_MAX_ROWS * WG];

vec4 x4(uint r, uint i)
{
    uint b = pc.x_off + r * pc.x_stride + i;
    return vec4(data_x[b], data_x[b + 1u], data_x[b + 2u], data_x[b + 3u]);
}

void main()
{
    const uint n0 = MV_NR * (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x);
    if (n0 >= pc.N) return; /* uniform over the workgroup */
    const uint tid = gl_LocalInvocationID.x;
    const uint nr = min(MV_NR, pc.N - n0); /* weight rows this group has */

    float acc[MV_NR][MV_MAX_ROWS];
    [[unroll]] for (uint q = 0u; q < MV_NR; q++)
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) acc[q][r] = 0.0;

    const uint K4 = pc.K & ~3u;
    for (uint i = 4u * tid; i < K4; i += 4u * WG) {
        vec4 wv[MV_NR];
        [[unroll]] for (uint q = 0u; q < MV_NR; q++)
            wv[q] = q < nr ? dq_get4(pc.w_off + (n0 + q) * pc.w_stride, i) : vec4(0.0);
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
            if (r < pc.M) {
                const vec4 xv = x4(r, i);
                [[unroll]] for (uint q = 0u; q < MV_NR; q++) acc[q][r] += dot(wv[q], xv);
            }
        }
    }
    /* K % 4 elements left: only F32/F16/BF16 rows have them */
    for (uint i = K4 + tid; i < pc.K; i += WG) {
        float wv[MV_NR];
        [[unroll]] for (uint q = 0u; q < MV_NR; q++)
            wv[q] = q < nr ? dq_get(pc.w_off + (n0 + q) * pc.w_stride, i) : 0.0;
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
            if (r < pc.M) {
                const float xv = data_x[pc.x_off + r * pc.x_stride + i];
                [[unroll]] for (uint q = 0u; q < MV_NR; q++) acc[q][r] += wv[q] * xv;
            }
        }
    }

#ifdef DQ_SPLIT_MIN
    for (uint blk = tid; blk < pc.K / 32u; blk += WG) {
        float mn[MV_NR];
        [[unroll]] for (uint q = 0u; q < MV_NR; q++) mn[q] = q < nr ? dq_min(pc.w_off + (n0 + q) * pc.w_stride, blk) : 0.0;
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
            if (r < pc.M) {
                const float sb = data_x[pc.s_off + r * pc.s_stride + blk];
                [[unroll]] for (uint q = 0u; q < MV_NR; q++) acc[q][r] += mn[q] * sb;
            }
        }
    }
#endif

#ifdef USE_SUBGROUP
    [[unroll]] for (uint q = 0u; q < MV_NR; q++)
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
            if (r < pc.M) {
                const float s = subgroupAdd(acc[q][r]);
                if (subgroupElect()) red[(q * MV_MAX_ROWS + r) * WG + gl_SubgroupID] = s;
            }
        }
    barrier();
    for (uint o = tid; o < nr * pc.M; o += WG) { /* MV_NR * M outputs may outnumber the threads */
        const uint q = o / pc.M, r = o % pc.M;
        float s = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; g++) s += red[(q * MV_MAX_ROWS + r) * WG + g];
#else
    [[unroll]] for (uint q = 0u; q < MV_NR; q++)
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) red[(q * MV_MAX_ROWS + r) * WG + tid] = acc[q][r];
    barrier();
    for (uint h = WG / 2u; h > 0u; h >>= 1) {
        if (tid < h) {
            [[unroll]] for (uint q = 0u; q < MV_NR; q++)
                [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++)
                    if (r < pc.M) red[(q * MV_MAX_ROWS + r) * WG + tid] += red[(q * MV_MAX_ROWS + r) * WG + tid + h];
        }
        barrier();
    }
    for (uint o = tid; o < nr * pc.M; o += WG) {
        const uint q = o / pc.M, r = o % pc.M;
        float s = red[(q * MV_MAX_ROWS + r) * WG];
#endif
        const uint n = n0 + q;
        if (pc.has_bias != 0u) s += data_b[pc.b_off + n];
        if (pc.has_add != 0u) s += data_a[pc.a_off + r * pc.a_stride + n];
        data_o[pc.o_off + r * pc.o_stride + n] = s;
    }
}
