/* The HIP kernels' launchers, callable from C (the host files in backends/hip/).
 *
 * Same contract as kernels-cuda/cuda_kernels.h: every pointer is a device
 * address already resolved from a (buffer, offset) view; strides named *_ld
 * are in elements, *_nb1 in bytes. A launcher only enqueues work on `st` and
 * returns the launch's hipError_t; it never synchronizes, allocates or
 * aborts, so it may be captured into a graph. Device-side input errors (a
 * token id outside the table, a LOGITS row outside x) write zeros and set
 * *err to nonzero.
 *
 * Built by hipcc for AMD GPUs, or by nvcc through kernels-hip/hip_to_cuda.h
 * (WEFT_HIP_ON_CUDA) to run the same kernels on an NVIDIA GPU. */
#ifndef WEFT_HIP_KERNELS_H
#define WEFT_HIP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels-hip/hip_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[R][N] = x[R][K] · W[N][K]ᵀ (+ add, which may alias out).
 * wt: any weight type of core/types.h (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1
 * Q8_0 Q4_K Q5_K Q6_K). Paths: R <= 8 and a quantized type: x quantized to
 * Q8_1 blocks in scratch, integer-dot matrix-vector kernel
 * (kernels-common/matmul.cuh); R > 8 and a quantized type or F16: the
 * LDS-tiled float GEMM (hip_gemm.hip) with W dequantized tile by tile;
 * F32/BF16 and few-row F16: the float kernel. */
struct weft_hip_mm {
    int wt;                       /* enum weft_type */
    const uint8_t *w;
    size_t w_nb1;
    int64_t K, N, R;
    const float *x;
    size_t x_ld;
    float *out;
    size_t out_ld;
    const float *add;             /* NULL: none */
    size_t add_ld;
};
/* scratch bytes weft_hip_matmul needs for this shape (0 if none) */
size_t weft_hip_matmul_scratch(int wt, int64_t K, int64_t R);
/* whether weft_hip_matmul handles weight type wt */
int weft_hip_matmul_type_ok(int wt);
hipError_t weft_hip_matmul(const struct weft_hip_mm *m, void *scratch, hipStream_t st);

hipError_t weft_hip_embed(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                          int64_t R, float *out, size_t out_ld, int *err, hipStream_t st);

/* rows == NULL: output row r normalises x row r; else x row rows[r]
 * (LOGITS' gather). add/sum: the fused residual (add == NULL: none). */
hipError_t weft_hip_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows, const float *add,
                            size_t add_ld, float *sum, size_t sum_ld, const float *w, float *out, size_t out_ld,
                            int64_t R, int64_t K, float eps, int *err, hipStream_t st);

hipError_t weft_hip_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                             int64_t R, int64_t K, hipStream_t st);
hipError_t weft_hip_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                        int64_t R, int64_t K, hipStream_t st);

/* One layer of the paged KV cache (backends/backend.h). */
struct weft_hip_kv {
    uint8_t *base;                /* the cache buffer */
    int type;                     /* WEFT_TYPE_F16 or WEFT_TYPE_Q8_0 (hd % 32 == 0) */
    int n_layer, layer, n_kv, hd;
};

hipError_t weft_hip_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld,
                            const int32_t *pos, const int32_t *slot, int64_t R, int n_head, int n_rot,
                            float theta_scale, float freq_scale, int neox, const struct weft_hip_kv *kv,
                            hipStream_t st);

struct weft_hip_attn_args {
    const float *q;
    size_t q_ld;
    float *out;
    size_t out_ld;
    struct weft_hip_kv kv;
    const int32_t *pos, *seq, *bt_off, *bt;
    int64_t n_rows;
    int n_head;
    float scale;
};
/* How many splits of the context for n_rows x n_head units on n_cu compute
 * units (shapes only, so a graph of the step stays valid). */
int weft_hip_attn_splits(int64_t n_rows, int n_head, int n_cu);
size_t weft_hip_attention_scratch(int64_t n_rows, int n_head, int hd, int n_split);
/* head_dim <= 256; n_head a multiple of kv.n_kv */
hipError_t weft_hip_attention(const struct weft_hip_attn_args *a, int n_split, void *scratch, hipStream_t st);

#ifdef __cplusplus
}
#endif

#endif
