/* MATMUL kernels that do not depend on a vendor's matrix instructions:
 * activation quantization to Q8_1, the quantized matrix-vector product for
 * decode (integer dp4a dots, kernels-common/dequant.cuh) and a plain float
 * kernel for F32/F16/BF16 weights (and as the fallback for any type).
 *
 * Shapes: x [R][K] f32 (rows x_ld floats apart), W [N][K] of type T (rows
 * w_nb1 bytes apart), out [R][N] f32 (out_ld), optional bias [N] f32 added
 * to each dot before the optional add [R][N] (add_ld), which may alias out
 * (each element is read before it is written, by the same thread). */
#ifndef WEFT_KC_MATMUL_CUH
#define WEFT_KC_MATMUL_CUH

#include "kernels-common/dequant.cuh"

/* the weight types with a dot32 (Q8_1 activations, integer dots); the others (F32, F16, BF16)
 * take the float kernels */
static inline bool weft_kc_is_quant(int wt)
{
    switch (wt) {
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q5_1:
    case WEFT_TYPE_Q8_0: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_IQ4_XS:
    case WEFT_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

/* x [R][K] -> xq [R][K/32] Q8_1 blocks. Block (blockDim.x = 256): 8 groups
 * of 32 lanes, one Q8_1 block per group; grid.x covers R * K/32 blocks. */
static __global__ void weft_k_quantize_q8_1(const float *x, size_t x_ld, int64_t R, int64_t nb32,
                                     struct weft_block_q8_1 *xq)
{
    const int lane = threadIdx.x % 32;
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (blk >= R * nb32) return;   /* whole groups leave together */
    const int64_t r = blk / nb32, b = blk % nb32;
    weft_quantize_q8_1_group(x[r * x_ld + b * 32 + lane], lane, &xq[blk]);
}

/* out[r][n] from a finished dot v: (v + bias[n]) + add[r][n], the CPU's order */
WEFT_DEV float weft_mm_epilogue(float v, const float *bias, int64_t n, const float *add, size_t add_ld, int64_t r)
{
    if (bias) v = v + bias[n];
    return add ? v + add[r * add_ld + n] : v;
}

/* Decode: out[r][n] = W[n] · x[r] (+ bias) (+ add) for r < R <= NR. One
 * 32-lane group per weight row n (blockDim = (32, rows per block)); lanes
 * stride over the row's 32-element sub-blocks. */
template <int T, int NR>
static __global__ void weft_k_mmvq(const uint8_t *w, size_t w_nb1, int64_t N, int64_t nb32,
                            const struct weft_block_q8_1 *xq, int R, float *out, size_t out_ld,
                            const float *add, size_t add_ld, const float *bias)
{
    const int64_t n = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (n >= N) return;
    const uint8_t *row = w + n * w_nb1;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    for (int64_t s = threadIdx.x; s < nb32; s += 32) {
#pragma unroll
        for (int r = 0; r < NR; r++)
            if (r < R) acc[r] += weft_dq<T>::dot32(row, (int)s, &xq[r * nb32 + s]);
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float v = weft_group_sum<32>(acc[r]);
        if (threadIdx.x == 0 && r < R) out[r * out_ld + n] = weft_mm_epilogue(v, bias, n, add, add_ld, r);
    }
}

/* Any weight type, float math: one 32-lane group per (weight row n, 8
 * activation rows starting at 8 * blockIdx.y); lanes stride over k so the
 * reads of W and x are coalesced. blockDim = (32, rows per block). */
template <int T>
static __global__ void weft_k_mm_float(const uint8_t *w, size_t w_nb1, int64_t N, int64_t K, const float *x,
                                size_t x_ld, int64_t R, float *out, size_t out_ld, const float *add,
                                size_t add_ld, const float *bias)
{
    enum { RB = 8 };
    const int64_t n = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const int64_t r0 = (int64_t)blockIdx.y * RB;
    if (n >= N) return;
    const uint8_t *row = w + n * w_nb1;
    float acc[RB];
#pragma unroll
    for (int r = 0; r < RB; r++) acc[r] = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += 32) {
        const float wv = weft_dq<T>::at(row, k);
#pragma unroll
        for (int r = 0; r < RB; r++)
            if (r0 + r < R) acc[r] = fmaf(wv, x[(r0 + r) * x_ld + k], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < RB; r++) {
        float v = weft_group_sum<32>(acc[r]);
        if (threadIdx.x == 0 && r0 + r < R)
            out[(r0 + r) * out_ld + n] = weft_mm_epilogue(v, bias, n, add, add_ld, r0 + r);
    }
}

#endif
