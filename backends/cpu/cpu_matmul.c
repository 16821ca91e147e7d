/* MATMUL and LOGITS on the CPU: out[r][n] = x[r] · W[n] (+ add[r][n]).
 *
 * Activations are converted once per op to the weight type's vec_dot type
 * (Q8_0/Q8_1/Q8_K blocks, F16, BF16 or F32 — as ggml does), then each
 * thread takes a slice of the output columns (weight rows) and runs the
 * type's dot product against every activation row, so each weight row is
 * read from memory once per op. */
#include "backends/cpu/cpu_impl.h"
#include "core/quant.h"

#include <math.h>

#define COL_TILE 16  /* weight rows per tile: reused across all activation rows */

struct mm_job {
    const struct weft_view *x, *w, *out, *add; /* add may be NULL */
    const float *xrows;         /* if set, x rows are contiguous here instead of in *x */
    int64_t n_rows;
    enum weft_type vdt;
    size_t qrow;                /* bytes of one converted activation row */
    uint8_t *xq;                /* [n_rows][qrow] */
    weft_cpu_quant_fn quant;    /* activations -> vdt */
    weft_cpu_dot_fn dot;        /* in the float order ggml uses for this shape */
};

static void mm_quantize(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    int64_t lo, hi, K = j->w->ne0;
    cpu_split(j->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *src = j->xrows ? j->xrows + r * K : cpu_row_f32(j->x, r);
        j->quant(src, j->xq + (size_t)r * j->qrow, K);
    }
}

static void mm_dot(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    int64_t N = j->w->ne1, K = j->w->ne0;
    /* split columns in whole tiles so threads do not share cache lines of out */
    int64_t tiles = (N + COL_TILE - 1) / COL_TILE, t0, t1;
    cpu_split(tiles, ith, nth, &t0, &t1);
    const uint8_t *wbase = cpu_ptr(j->w);
    const weft_cpu_dot_fn dot = j->dot;
    for (int64_t t = t0; t < t1; t++) {
        int64_t n0 = t * COL_TILE, n1 = n0 + COL_TILE < N ? n0 + COL_TILE : N;
        for (int64_t r = 0; r < j->n_rows; r++) {
            const uint8_t *xq = j->xq + (size_t)r * j->qrow;
            float *out = cpu_row_f32(j->out, r);
            const float *add = j->add ? cpu_row_f32(j->add, r) : NULL;
            for (int64_t n = n0; n < n1; n++) {
                float v = dot(wbase + (size_t)n * j->w->nb1, xq, K);
                out[n] = add ? v + add[n] : v;
            }
        }
    }
}

static weft_status matmul_rows(struct weft_cpu_backend *be, const struct weft_view *x, const float *xrows,
                               int64_t n_rows, const struct weft_view *w, const struct weft_view *out,
                               const struct weft_view *add, size_t scratch_off)
{
    struct mm_job j = {.x = x, .w = w, .out = out, .add = add, .xrows = xrows, .n_rows = n_rows};
    j.vdt = weft_vec_dot_type(w->type);
    const struct weft_cpu_kernels *k = be->kern;
    j.quant = k->quant[j.vdt];
    /* ggml takes llamafile's tinyBLAS path (another summation order) for
     * several activation rows when the shapes allow it; follow it */
    int mk = k->mm_k_multiple[w->type];
    bool mm = k->dot_mm[w->type] && n_rows >= 2 && w->ne1 % 4 == 0 && mk && w->ne0 % mk == 0;
    j.dot = mm ? k->dot_mm[w->type] : k->dot[w->type];

    j.qrow = weft_row_size(j.vdt, w->ne0);
    weft_status st = weft_cpu_scratch(be, scratch_off + (size_t)n_rows * j.qrow + 64);
    if (st != WEFT_OK) return st;
    j.xq = be->scratch + scratch_off;
    weft_cpu_pool_run(be->pool, mm_quantize, &j);
    weft_cpu_pool_run(be->pool, mm_dot, &j);
    return WEFT_OK;
}

weft_status weft_cpu_matmul(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_view *x = &op->u.matmul.x;
    return matmul_rows(be, x, NULL, x->ne1, &op->u.matmul.w, &op->u.matmul.out,
                       op->u.matmul.has_add ? &op->u.matmul.add : NULL, 0);
}

/* ggml's RMS_NORM scale (float squares summed in double); defined in
 * cpu_ops.c, shared so the final norm rounds exactly as the per-layer ones. */
float weft_cpu_rms_scale(const float *x, int64_t n, float eps);

/* LOGITS: gather the requested rows, RMS-normalise them into scratch, then
 * multiply by the output head. Only these rows pay for the (large) lm_head. */
weft_status weft_cpu_logits(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_view *x = &op->u.logits.x, *rows = &op->u.logits.rows;
    int64_t n_out = rows->ne0, K = x->ne0;
    size_t normed_bytes = ((size_t)n_out * K * sizeof(float) + 63) & ~(size_t)63;
    weft_status st = weft_cpu_scratch(be, normed_bytes);
    if (st != WEFT_OK) return st;
    float *normed = (float *)be->scratch;
    const int32_t *idx = (const int32_t *)cpu_ptr(rows);
    const float *w = (const float *)cpu_ptr(&op->u.logits.norm_w);
    for (int64_t i = 0; i < n_out; i++) {
        if (idx[i] < 0 || idx[i] >= x->ne1)
            return weft_error(WEFT_ERR_INVALID_ARG, "cpu: logits row %d outside [0, %lld)", idx[i],
                              (long long)x->ne1);
        const float *src = cpu_row_f32(x, idx[i]);
        float scale = weft_cpu_rms_scale(src, K, op->u.logits.eps);
        for (int64_t k = 0; k < K; k++) normed[i * K + k] = src[k] * scale * w[k];
    }
    return matmul_rows(be, NULL, normed, n_out, &op->u.logits.w, &op->u.logits.out, NULL, normed_bytes);
}
