/* CPU backend internals shared by its files. */
#ifndef WEFT_CPU_IMPL_H
#define WEFT_CPU_IMPL_H

#include "backends/backend.h"
#include "base/rope.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_pool.h"

/* A weight matrix of a buffer with a repacked copy (weight_prepare). */
struct weft_cpu_packed_w {
    size_t offset, nb1;        /* the plain view it stands for */
    enum weft_type type;
    int64_t ne0, ne1;
    int64_t rows;              /* leading rows packed: ne1 rounded down to pk->rows */
    const struct weft_cpu_packed *pk;  /* layout and kernel (of the table that packed it) */
    uint8_t *data;             /* owned, rows * row size bytes */
};

struct weft_buffer {
    uint8_t *data;
    size_t size;
    bool owned;                /* false when wrapping host memory */
    struct weft_cpu_packed_w *packed;  /* sorted by offset; owned */
    size_t n_packed, cap_packed;
};

struct weft_cpu_backend {
    struct weft_backend base;
    struct weft_cpu_pool *pool;
    const struct weft_cpu_kernels *kern;  /* the instruction set's kernel table */
    bool no_pack;              /* WEFT_CPU_NOPACK=1: weight_prepare keeps the plain layout */
    uint8_t *scratch;          /* per-run working memory (activation quantization...) */
    size_t scratch_size;
    /* WEFT_CPU_PROFILE=1: wall time and calls per op kind (a matmul group
     * counts once, under its first op), printed to stderr at close */
    bool profile;
    /* ROPE_KV's cos/sin per batch row, kept while the positions and the
     * rope parameters stay the same (every layer of a step asks for the
     * very same table) */
    float *rope_cs;            /* [rope_rows][rope_n_rot] */
    int32_t *rope_pos;         /* the positions rope_cs was made for */
    int64_t rope_rows;         /* -1: none */
    size_t rope_cs_cap, rope_pos_cap; /* floats, positions */
    uint32_t rope_n_rot;
    float rope_base, rope_scale;
    struct weft_rope_ext rope_ext; /* the scaling rope_cs was made with (freq_factors -> rope_ff) */
    float rope_ff[256];            /* the frequency factors' values it was made with */
    uint64_t expert_passes;    /* MATMUL_ID: experts read (one per op per chosen expert) */
    float route_margin;        /* MOE_ROUTE: the smallest choice margin since last read (0: none seen) */
    bool route_seen;
    double prof_s[WEFT_OP_COUNT_];
    uint64_t prof_calls[WEFT_OP_COUNT_], prof_rows[WEFT_OP_COUNT_];
};

static inline uint8_t *cpu_ptr(const struct weft_view *v) { return v->buf->data + v->offset; }
static inline float *cpu_row_f32(const struct weft_view *v, int64_t r)
{
    return (float *)(cpu_ptr(v) + (size_t)r * v->nb1);
}

/* Ensure the backend's scratch has `size` bytes; WEFT_ERR_NOMEM otherwise.
 * Growing keeps the contents but moves the memory: re-read be->scratch
 * after every call, never keep a pointer into it across one. */
weft_status weft_cpu_scratch(struct weft_cpu_backend *be, size_t size);

/* weight_prepare: a repacked copy of w when the kernel table has a layout for
 * its type (see ops/ops_prepare.c). */
weft_status weft_cpu_weight_prepare(struct weft_backend *b, const struct weft_view *w);
/* The packed copy standing for view w (same offset, type, row length and
 * stride, no more rows), or NULL. */
const struct weft_cpu_packed_w *weft_cpu_packed_find(const struct weft_view *w);
void weft_cpu_packed_free(struct weft_buffer *buf);

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
/* ops/ops_moe.c; n_expert at most WEFT_CPU_MAX_EXPERTS */
#define WEFT_CPU_MAX_EXPERTS 512
weft_status weft_cpu_moe_route(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_matmul_id(struct weft_cpu_backend *be, const struct weft_op *op);
/* ops/ops_recurrent.c (api 9); DELTA_NET's head_dim at most WEFT_CPU_MAX_DN_HEAD */
#define WEFT_CPU_MAX_DN_HEAD 256
weft_status weft_cpu_ssm_conv(struct weft_cpu_backend *be, const struct weft_op *op);
weft_status weft_cpu_delta_net(struct weft_cpu_backend *be, const struct weft_op *op);
/* How many expert matrices the CPU backend b's MATMUL_IDs have read (each op counts each
 * expert some row chose once): what tests check "each expert read once a step" by. 0 for
 * another backend. */
uint64_t weft_cpu_expert_passes(struct weft_backend *b);
/* The smallest margin by which the CPU backend b's MOE_ROUTEs chose since the last call (then
 * forgotten): per row, the k-th chosen expert's choice value less the best one not chosen, and
 * with expert groups the last kept group's score less the best dropped one. A golden test
 * reads it to tell a router near-tie (another engine may choose otherwise) from an error.
 * INFINITY when no MOE_ROUTE ran (or for another backend). */
float weft_cpu_route_margin(struct weft_backend *b);

/* Parts for a job of n independent rows: one per thread, at most n (one row
 * runs inline on the caller, with no synchronisation). */
static inline int cpu_parts(const struct weft_cpu_backend *be, int64_t n)
{
    int nth = weft_cpu_pool_threads(be->pool);
    return n < nth ? (n < 1 ? 1 : (int)n) : nth;
}

/* Split [0, n) into nth near-equal chunks; chunk ith is [*lo, *hi). */
static inline void cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

#endif
