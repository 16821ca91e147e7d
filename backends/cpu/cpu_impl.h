/* CPU backend internals shared by its files. */
#ifndef WEFT_CPU_IMPL_H
#define WEFT_CPU_IMPL_H

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_pool.h"

struct weft_buffer {
    uint8_t *data;
    size_t size;
    bool owned;                /* false when wrapping host memory */
};

struct weft_cpu_backend {
    struct weft_backend base;
    struct weft_cpu_pool *pool;
    const struct weft_cpu_kernels *kern;  /* the instruction set's kernel table */
    uint8_t *scratch;          /* per-run working memory (activation quantization...) */
    size_t scratch_size;
};

static inline uint8_t *cpu_ptr(const struct weft_view *v) { return v->buf->data + v->offset; }
static inline float *cpu_row_f32(const struct weft_view *v, int64_t r)
{
    return (float *)(cpu_ptr(v) + (size_t)r * v->nb1);
}

/* Ensure the backend's scratch has `size` bytes; WEFT_ERR_NOMEM otherwise. */
weft_status weft_cpu_scratch(struct weft_cpu_backend *be, size_t size);

/* Op kernels: each runs one op on the pool and returns when done. The op was
 * validated by weft_cpu_supports. */
weft_status weft_cpu_embed(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_rmsnorm(struct weft_cpu_backend *be, const struct weft_op *op);
/* ops[0..n) are MATMULs sharing x (see weft_cpu_matmul_groupable). */
weft_status weft_cpu_matmul(struct weft_cpu_backend *be, const struct weft_op *ops, int n);
/* How many MATMULs from ops[0] can run as one job: same input, weight type
 * and row length, and no output feeding a later one (at least 1). */
int weft_cpu_matmul_groupable(const struct weft_op *ops, size_t n);
weft_status weft_cpu_rope_kv(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_attention(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_silu_mul(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_add(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_logits(struct weft_cpu_backend *be, const struct weft_op *op);

/* Split [0, n) into nth near-equal chunks; chunk ith is [*lo, *hi). */
static inline void cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

#endif
