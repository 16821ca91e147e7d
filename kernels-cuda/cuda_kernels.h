/* The CUDA kernels' launchers, callable from C (the host files in backends/cuda/).
 *
 * Every pointer is a device address already resolved from a (buffer,
 * offset) view; strides named *_ld are in elements, *_nb1 in bytes. A
 * launcher only enqueues work on `st` and returns the launch's
 * cudaError_t (cudaSuccess, or e.g. cudaErrorInvalidConfiguration); it
 * never synchronizes, allocates or aborts, so it may be captured into a
 * CUDA graph. Device-side input errors (a token id outside the table, a
 * LOGITS row outside x) write zeros and set *err to nonzero. */
#ifndef WEFT_CUDA_KERNELS_H
#define WEFT_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[R][N] = x[R][K] · W[N][K]ᵀ (+ add, which may alias out).
 * wt: any weight type of core/types.h (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1
 * Q8_0 Q4_K Q5_K Q6_K). Paths: R <= 8 and a quantized type: x quantized to
 * Q8_1 blocks in scratch, dp4a matrix-vector kernel; R > 8 and a quantized
 * type or F16: tensor-core (wmma, F16 in / F32 accumulate) GEMM with W
 * dequantized tile by tile into shared memory; F32/BF16: float kernel. */
struct weft_cu_mm {
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
/* scratch bytes weft_cu_matmul needs for this shape (0 if none) */
size_t weft_cu_matmul_scratch(int wt, int64_t K, int64_t R);
/* whether weft_cu_matmul handles weight type wt */
int weft_cu_matmul_type_ok(int wt);
cudaError_t weft_cu_matmul(const struct weft_cu_mm *m, void *scratch, cudaStream_t st);

cudaError_t weft_cu_embed(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                          int64_t R, float *out, size_t out_ld, int *err, cudaStream_t st);

/* rows == NULL: output row r normalises x row r; else x row rows[r]
 * (LOGITS' gather). add/sum: the fused residual (add == NULL: none). */
cudaError_t weft_cu_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows, const float *add,
                            size_t add_ld, float *sum, size_t sum_ld, const float *w, float *out, size_t out_ld,
                            int64_t R, int64_t K, float eps, int *err, cudaStream_t st);

cudaError_t weft_cu_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                             int64_t R, int64_t K, cudaStream_t st);
cudaError_t weft_cu_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                        int64_t R, int64_t K, cudaStream_t st);

/* One layer of the paged KV cache (backends/backend.h). */
struct weft_cu_kv {
    uint8_t *base;                /* the cache buffer */
    int type;                     /* WEFT_TYPE_F16 or WEFT_TYPE_Q8_0 (hd % 32 == 0) */
    int n_layer, layer, n_kv, hd;
};

cudaError_t weft_cu_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld,
                            const int32_t *pos, const int32_t *slot, int64_t R, int n_head, int n_rot,
                            float theta_scale, float freq_scale, int neox, const struct weft_cu_kv *kv,
                            cudaStream_t st);

struct weft_cu_attn_args {
    const float *q;
    size_t q_ld;
    float *out;
    size_t out_ld;
    struct weft_cu_kv kv;
    const int32_t *pos, *seq, *bt_off, *bt;
    int64_t n_rows;
    int n_head;
    float scale;
};
/* How many splits of the context for n_rows x n_head units on n_sm
 * multiprocessors (shapes only, so a graph of the step stays valid). */
int weft_cu_attn_splits(int64_t n_rows, int n_head, int n_sm);
size_t weft_cu_attention_scratch(int64_t n_rows, int n_head, int hd, int n_split);
/* head_dim <= 256; n_head a multiple of kv.n_kv */
cudaError_t weft_cu_attention(const struct weft_cu_attn_args *a, int n_split, void *scratch, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
