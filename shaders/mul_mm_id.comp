#version 450
// MATMUL_ID's tiled product for prefill: for each slot s = r * k + j whose
// expert ids[r][j] is e,
//   out[s][n] = x[xr(s)] · W_e[n] (+ bias[e * N + n]),  xr(s) = s (x_per_slot) or s / k,
// W_e's rows n at w_off + (e * N + n) * w_stride bytes (the 3-D experts tensor).
// One workgroup per (64 of an expert's weight rows: group x, expert: group
// y). It gathers the slots that chose its expert (moe_gather.glsl), 64 at a
// time, and returns at once when none did, so an unchosen expert's weights
// are never read; each batch of 64 slots is mul_mm.comp's 64 x 64 tile with
// the x rows gathered and the outputs scattered to the slots' rows: the
// expert's tile is dequantized once for every 64 slots that chose it.
// Bindings and push constants as mul_mat_vec_id.comp.
// variants: f32:-DTYPE_F32 f16:-DTYPE_F16 bf16:-DTYPE_BF16 q8_0:-DTYPE_Q8_0 q4_0:-DTYPE_Q4_0 q4_1:-DTYPE_Q4_1 q5_0:-DTYPE_Q5_0 q5_1:-DTYPE_Q5_1 q4_k:-DTYPE_Q4_K q5_k:-DTYPE_Q5_K q6_k:-DTYPE_Q6_K q2_k:-DTYPE_Q2_K q3_k:-DTYPE_Q3_K iq4_nl:-DTYPE_IQ4_NL iq4_xs:-DTYPE_IQ4_XS mxfp4:-DTYPE_MXFP4
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : enable

#define BN 64u
#define BM 64u
#define BK 32u
#define PAD 1u
#define WG 128u

layout(local_size_x = 128) in;

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
#define GATHER_CAP BM
#define MOE_ID(i) uint(data_ids[pc.ids_off + ((i) / pc.k) * pc.ids_stride + (i) % pc.k])
#include "moe_gather.glsl"

/* the x row of gathered slot m */
uint x_row(uint m) { return pc.x_per_slot != 0u ? g_list[m] : g_list[m] / pc.k; }

shared float sw[BK * (BN + PAD)]; /* [k][n] */
shared float sx[BK * (BM + PAD)]; /* [k][m] */

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint e = gl_WorkGroupID.y;
    const uint n0 = gl_WorkGroupID.x * BN;
    const uint tn = tid % 16u, tm = tid / 16u;
    const uint w_e = pc.w_off + e * pc.N * pc.w_stride;  /* expert e's first row */

    uint cursor = 0u;
    for (;;) {
        const uint M = gather_slots(e, cursor, pc.n_slots);
        if (M == 0u) break;  /* uniform: no (further) slot chose e */

        float acc[8][4];
        [[unroll]] for (uint j = 0u; j < 8u; j++)
            [[unroll]] for (uint i = 0u; i < 4u; i++) acc[j][i] = 0.0;

        for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
            /* W tile: 64 rows x 32 k, four passes of 16 rows, 8 threads a row */
            [[unroll]] for (uint p = 0u; p < 4u; p++) {
                const uint idx = tid + p * WG, r = idx / 8u, kc = (idx % 8u) * 4u;
                const uint n = n0 + r, k = k0 + kc;
                vec4 v = vec4(0.0);
                if (n < pc.N) {
                    const uint row = w_e + n * pc.w_stride;
                    if (k + 4u <= pc.K) {
                        v = dq_get4(row, k);
                    } else {
                        [[unroll]] for (uint c = 0u; c < 4u; c++)
                            if (k + c < pc.K) v[c] = dq_get(row, k + c);
                    }
                }
                [[unroll]] for (uint c = 0u; c < 4u; c++) sw[(kc + c) * (BN + PAD) + r] = v[c];
            }
            /* x tile: the gathered slots' rows, 32 consecutive floats each */
            [[unroll]] for (uint p = 0u; p < 16u; p++) {
                const uint idx = tid + p * WG, r = idx / BK, kk = idx % BK;
                const uint k = k0 + kk;
                sx[kk * (BM + PAD) + r] = (r < M && k < pc.K) ? data_x[pc.x_off + x_row(r) * pc.x_stride + k] : 0.0;
            }
            barrier();
            [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
                float a[4], b[8];
                [[unroll]] for (uint i = 0u; i < 4u; i++) a[i] = sw[kk * (BN + PAD) + tn + 16u * i];
                [[unroll]] for (uint j = 0u; j < 8u; j++) b[j] = sx[kk * (BM + PAD) + tm + 8u * j];
                [[unroll]] for (uint j = 0u; j < 8u; j++)
                    [[unroll]] for (uint i = 0u; i < 4u; i++) acc[j][i] += a[i] * b[j];
            }
            barrier();
        }

        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            const uint m = tm + 8u * j;
            if (m >= M) continue;
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                const uint n = n0 + tn + 16u * i;
                if (n >= pc.N) continue;
                float s = acc[j][i];
#ifdef DQ_SPLIT_MIN
                const uint row = w_e + n * pc.w_stride, xr = x_row(m);
                for (uint blk = 0u; blk < pc.K / 32u; blk++) s += dq_min(row, blk) * data_x[pc.s_off + xr * pc.s_stride + blk];
#endif
                if (pc.has_bias != 0u) s += data_b[pc.b_off + e * pc.N + n];
                data_o[pc.o_off + g_list[m] * pc.o_stride + n] = s;
            }
        }
    }
}
