#version 450
// Tiled matrix product for prefill: out[m][n] = (x[m] · W[n] (+ bias[n]))
// (+ add[m][n]).
//
// A workgroup of 128 threads computes a tile of BN = 64 weight rows (n) by
// BM = 64 activation rows (m). Per step of BK = 32 along k it dequantizes the
// W tile into shared memory (eight threads per row, four elements each:
// consecutive threads read consecutive bytes), copies the x tile (32
// consecutive floats per row), and each thread accumulates a 4 (n) x 8 (m)
// block in f32 registers: n = tn + 16 i, m = tm + 8 j, so the stores of a
// warp are consecutive in n. Rows past N or M and k past K read as zero;
// every tail (odd N, M, and K for the unquantized types) is handled.
// A residual `add` may alias `out`: each output is read then written by
// the same thread.
//
// Bindings and push constants as mul_mat_vec.comp (M unbounded here).
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

shared float sw[BK * (BN + PAD)]; /* [k][n] */
shared float sx[BK * (BM + PAD)]; /* [k][m] */

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    const uint tn = tid % 16u, tm = tid / 16u;

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
                const uint row = pc.w_off + n * pc.w_stride;
                if (k + 4u <= pc.K) {
                    v = dq_get4(row, k);
                } else {
                    [[unroll]] for (uint e = 0u; e < 4u; e++)
                        if (k + e < pc.K) v[e] = dq_get(row, k + e);
                }
            }
            [[unroll]] for (uint e = 0u; e < 4u; e++) sw[(kc + e) * (BN + PAD) + r] = v[e];
        }
        /* x tile: 64 rows x 32 k, 32 consecutive floats per row */
        [[unroll]] for (uint p = 0u; p < 16u; p++) {
            const uint idx = tid + p * WG, r = idx / BK, kk = idx % BK;
            const uint m = m0 + r, k = k0 + kk;
            sx[kk * (BM + PAD) + r] = (m < pc.M && k < pc.K) ? data_x[pc.x_off + m * pc.x_stride + k] : 0.0;
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
        const uint m = m0 + tm + 8u * j;
        if (m >= pc.M) continue;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            const uint n = n0 + tn + 16u * i;
            if (n >= pc.N) continue;
            float s = acc[j][i];
#ifdef DQ_SPLIT_MIN
            const uint row = pc.w_off + n * pc.w_stride;
            for (uint blk = 0u; blk < pc.K / 32u; blk++) s += dq_min(row, blk) * data_x[pc.s_off + m * pc.s_stride + blk];
#endif
            if (pc.has_bias != 0u) s += data_b[pc.b_off + n];
            if (pc.has_add != 0u) s += data_a[pc.a_off + m * pc.a_stride + n];
            data_o[pc.o_off + m * pc.o_stride + n] = s;
        }
    }
}
