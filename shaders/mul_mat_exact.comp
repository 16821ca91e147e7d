#version 450
// MATMUL bit for bit as the CPU backend's reference dot products
// (backends/cpu/cpu_ref_dot.c weft_vec_dot), for devices whose float add/mul/div are IEEE
// with no reassociation (lavapipe: SPIR-V compiled to x86 code; every float
// step here is `precise`). One invocation per output (weight row n,
// activation row r; fma_x: exact.glsl): per 32-element block the integer sums of q_w * q_x are
// exact in any order; the float steps follow the CPU's order exactly:
//   one chain (the q8_0 / q4_1 variants):
//     acc = fma(dw * dx, float(block sum), acc);
//   LANES8 (ggml's AVX2 order, the *_lanes variants, which backends/cpu/cpu_ref_dot.c's
//   Q8_0 and Q4_1 dots follow; vk_matmul.c DOT_ONE_CHAIN picks): 8 lanes, lane l = the
//     integer sum of elements 4l..4l+3, acc[l] = fma(dw * dx, float(lane),
//     acc[l]) block after block, then ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7));
//   Q4_1 adds summs = fma(m, s, summs) (s: the activation block's f16 sum)
//   at the end: acc + summs; then + bias[n] when has_bias; then + add[r][n]
//   when has_add (the CPU's order).
// Activations come from quant_act's exact variants: int8 q packed four to a
// word ([M][K/4] words at x_off, row stride x_stride words) and per block
// (d, s) as float bits ([M][K/32][2] at s_off, row stride s_stride blocks).
// A residual `add` may alias `out` (each invocation reads add[r][n] first).
// Bindings: 0 W (words), 1 activations (words), 2 out, 3 add, 4 bias (f32).
// variants: q8_0:-DTYPE_Q8_0 q4_1:-DTYPE_Q4_1,-DDQ_SPLIT_MIN q8_0_lanes:-DTYPE_Q8_0,-DLANES8 q4_1_lanes:-DTYPE_Q4_1,-DDQ_SPLIT_MIN,-DLANES8
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 64) in;

layout(binding = 0) readonly buffer WBuf { uint data_w[]; };
layout(binding = 1) readonly buffer XBuf { uint data_x[]; };
layout(binding = 2) buffer OBuf { float data_o[]; };
layout(binding = 3) readonly buffer ABuf { float data_a[]; };
layout(binding = 4) readonly buffer BBuf { float data_b[]; };

#define DQ_WORD(i) data_w[i]
#include "dequant.glsl"
#include "exact.glsl"

layout(push_constant) uniform Push {
    uint w_off, w_stride;   /* bytes */
    uint x_off, x_stride;   /* words */
    uint o_off, o_stride;   /* floats */
    uint a_off, a_stride;
    uint K, N, M, has_add;
    uint s_off, s_stride;   /* words; blocks */
    uint b_off, has_bias;   /* the bias (f32, one per weight row n), floats */
} pc;

/* sum of the products of the four signed bytes of a and of x */
int dot_s8(uint a, uint x)
{
    const int ia = int(a), ix = int(x);
    return bitfieldExtract(ia, 0, 8) * bitfieldExtract(ix, 0, 8) + bitfieldExtract(ia, 8, 8) * bitfieldExtract(ix, 8, 8) +
           bitfieldExtract(ia, 16, 8) * bitfieldExtract(ix, 16, 8) + bitfieldExtract(ia, 24, 8) * bitfieldExtract(ix, 24, 8);
}

/* the same with the bytes of a unsigned (nibbles 0..15) */
int dot_u8(uint a, uint x)
{
    const int ix = int(x);
    return int(a & 0xffu) * bitfieldExtract(ix, 0, 8) + int((a >> 8) & 0xffu) * bitfieldExtract(ix, 8, 8) +
           int((a >> 16) & 0xffu) * bitfieldExtract(ix, 16, 8) + int(a >> 24) * bitfieldExtract(ix, 24, 8);
}

void main()
{
    const uint n = gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y;
    if (n >= pc.N || r >= pc.M) return;
    const uint row = pc.w_off + n * pc.w_stride;
    const uint xq = pc.x_off + r * pc.x_stride;
    const uint xs = pc.s_off + r * pc.s_stride * 2u;
    const uint nb = pc.K / 32u;
#ifdef LANES8
    float acc[8];
    [[unroll]] for (uint l = 0u; l < 8u; l++) acc[l] = 0.0;
#else
    float acc = 0.0;
#endif
#ifdef DQ_SPLIT_MIN
    float summs = 0.0;
#endif
    for (uint b = 0u; b < nb; b++) {
        const uint wb = row + b * DQ_QB;
        const float dx = uintBitsToFloat(data_x[xs + 2u * b]);
        precise float d = unpackHalf2x16(dq_u16(wb)).x * dx;
        int lane[8];
#if defined(TYPE_Q8_0)
        [[unroll]] for (uint l = 0u; l < 8u; l++) lane[l] = dot_s8(dq_u32(wb + 2u + 4u * l), data_x[xq + 8u * b + l]);
#elif defined(TYPE_Q4_1)
        /* element j < 16: low nibble of qs[j]; j >= 16: high nibble of qs[j - 16] */
        [[unroll]] for (uint l = 0u; l < 4u; l++) {
            const uint wq = dq_u32(wb + 4u + 4u * l);
            lane[l] = dot_u8(wq & 0x0f0f0f0fu, data_x[xq + 8u * b + l]);
            lane[l + 4u] = dot_u8((wq >> 4) & 0x0f0f0f0fu, data_x[xq + 8u * b + l + 4u]);
        }
        precise float sm = fma_x(unpackHalf2x16(dq_u16(wb + 2u)).x, uintBitsToFloat(data_x[xs + 2u * b + 1u]), summs);
        summs = sm;
#endif
#ifdef LANES8
        [[unroll]] for (uint l = 0u; l < 8u; l++) {
            precise float a = fma_x(d, float(lane[l]), acc[l]);
            acc[l] = a;
        }
#else
        const int isum = lane[0] + lane[1] + lane[2] + lane[3] + lane[4] + lane[5] + lane[6] + lane[7];
        precise float a = fma_x(d, float(isum), acc);
        acc = a;
#endif
    }
#ifdef LANES8
    precise float v = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
#else
    precise float v = acc;
#endif
#ifdef DQ_SPLIT_MIN
    v = v + summs;
#endif
    if (pc.has_bias != 0u) v = v + data_b[pc.b_off + n];
    if (pc.has_add != 0u) v = v + data_a[pc.a_off + r * pc.a_stride + n];
    data_o[pc.o_off + r * pc.o_stride + n] = v;
}
