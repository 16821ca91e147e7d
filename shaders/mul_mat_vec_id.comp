#version 450
// MATMUL_ID's product for a few slots per expert (decode): for each slot
// s = r * k + j whose expert ids[r][j] is e,
//   out[s][n] = x[xr(s)] · W_e[n] (+ bias[e * N + n]),  xr(s) = s (x_per_slot) or s / k,
// W_e's rows n at w_off + (e * N + n) * w_stride bytes (the 3-D experts tensor).
// One workgroup per (MV_NR weight rows of an expert: group x, expert: group
// y). It gathers the slots that chose its expert (moe_gather.glsl), up to
// MV_MAX_ROWS at a time, and returns at once when none did, so an unchosen
// expert's weights are never read; for each batch it is mul_mat_vec.comp:
// threads stride over K four elements at a time, one partial sum per (weight
// row, slot), reduced by subgroupAdd (USE_SUBGROUP) or a shared-memory tree.
// A weight row is read once per batch, i.e. once for all the (at most
// MV_MAX_ROWS) slots of a decode step that chose the expert.
//
// Bindings: 0 W (uint words), 1 x (rounded activations, f32), 2 out (f32),
// 3 ids (I32), 4 bias (f32; bound, unread, without has_bias). Offsets and
// strides from push constants: W in bytes, the rest in elements.
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
layout(binding = 2) writeonly buffer OBuf { float data_o[]; };
layout(binding = 3) readonly buffer IBuf { int data_ids[]; };
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
    uint K, N;              /* an expert's matrix: N rows of K */
    uint n_slots, k;        /* rows * k slots, k per row */
    uint x_per_slot;
    uint ids_off, ids_stride;  /* ints: ids[r][j] at ids_off + r * ids_stride + j */
    uint s_off, s_stride;   /* Q4_1/Q5_1: the activation blocks' f16 sums, in x's buffer */
    uint b_off, has_bias;   /* the bias (f32, n_expert * N), floats */
} pc;

#define GATHER_WG WG
#define GATHER_CAP MV_MAX_ROWS
#define MOE_ID(i) uint(data_ids[pc.ids_off + ((i) / pc.k) * pc.ids_stride + (i) % pc.k])
#include "moe_gather.glsl"

/* [weight row][slot][subgroup (USE_SUBGROUP) or thread] */
shared float red[MV_NR * MV_MAX_ROWS * WG];

vec4 x4(uint xb, uint i) { return vec4(data_x[xb + i], data_x[xb + i + 1u], data_x[xb + i + 2u], data_x[xb + i + 3u]); }

void main()
{
    const uint e = gl_WorkGroupID.y;
    const uint n0 = MV_NR * gl_WorkGroupID.x;
    if (n0 >= pc.N) return; /* uniform over the workgroup */
    const uint tid = gl_LocalInvocationID.x;
    const uint nr = min(MV_NR, pc.N - n0); /* weight rows this group has */
    const uint w_row0 = pc.w_off + (e * pc.N + n0) * pc.w_stride;

    uint cursor = 0u;
    for (;;) {
        const uint M = gather_slots(e, cursor, pc.n_slots);
        if (M == 0u) break;  /* uniform: no (further) slot chose e */
        uint slot[MV_MAX_ROWS], xr[MV_MAX_ROWS];
        [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
            slot[r] = r < M ? g_list[r] : 0u;
            xr[r] = pc.x_off + (pc.x_per_slot != 0u ? slot[r] : slot[r] / pc.k) * pc.x_stride;
        }

        float acc[MV_NR][MV_MAX_ROWS];
        [[unroll]] for (uint q = 0u; q < MV_NR; q++)
            [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) acc[q][r] = 0.0;

        const uint K4 = pc.K & ~3u;
        for (uint i = 4u * tid; i < K4; i += 4u * WG) {
            vec4 wv[MV_NR];
            [[unroll]] for (uint q = 0u; q < MV_NR; q++)
                wv[q] = q < nr ? dq_get4(w_row0 + q * pc.w_stride, i) : vec4(0.0);
            [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
                if (r < M) {
                    const vec4 xv = x4(xr[r], i);
                    [[unroll]] for (uint q = 0u; q < MV_NR; q++) acc[q][r] += dot(wv[q], xv);
                }
            }
        }
        /* K % 4 elements left: only F32/F16/BF16 rows have them */
        for (uint i = K4 + tid; i < pc.K; i += WG) {
            float wv[MV_NR];
            [[unroll]] for (uint q = 0u; q < MV_NR; q++) wv[q] = q < nr ? dq_get(w_row0 + q * pc.w_stride, i) : 0.0;
            [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
                if (r < M) {
                    const float xv = data_x[xr[r] + i];
                    [[unroll]] for (uint q = 0u; q < MV_NR; q++) acc[q][r] += wv[q] * xv;
                }
            }
        }
#ifdef DQ_SPLIT_MIN
        for (uint blk = tid; blk < pc.K / 32u; blk += WG) {
            float mn[MV_NR];
            [[unroll]] for (uint q = 0u; q < MV_NR; q++) mn[q] = q < nr ? dq_min(w_row0 + q * pc.w_stride, blk) : 0.0;
            [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
                if (r < M) {
                    const uint xrow = pc.x_per_slot != 0u ? slot[r] : slot[r] / pc.k;
                    const float sb = data_x[pc.s_off + xrow * pc.s_stride + blk];
                    [[unroll]] for (uint q = 0u; q < MV_NR; q++) acc[q][r] += mn[q] * sb;
                }
            }
        }
#endif

#ifdef USE_SUBGROUP
        [[unroll]] for (uint q = 0u; q < MV_NR; q++)
            [[unroll]] for (uint r = 0u; r < MV_MAX_ROWS; r++) {
                if (r < M) {
                    const float s = subgroupAdd(acc[q][r]);
                    if (subgroupElect()) red[(q * MV_MAX_ROWS + r) * WG + gl_SubgroupID] = s;
                }
            }
        barrier();
        for (uint o = tid; o < nr * M; o += WG) {
            const uint q = o / M, r = o % M;
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
                        if (r < M) red[(q * MV_MAX_ROWS + r) * WG + tid] += red[(q * MV_MAX_ROWS + r) * WG + tid + h];
            }
            barrier();
        }
        for (uint o = tid; o < nr * M; o += WG) {
            const uint q = o / M, r = o % M;
            float s = red[(q * MV_MAX_ROWS + r) * WG];
#endif
            const uint n = n0 + q;
            if (pc.has_bias != 0u) s += data_b[pc.b_off + e * pc.N + n];
            data_o[pc.o_off + g_list[r] * pc.o_stride + n] = s;
        }
        barrier();  /* red is rewritten by the next batch */
    }
}
