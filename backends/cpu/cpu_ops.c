/* Element-wise CPU ops: EMBED, RMSNORM, SILU_MUL, ADD. Rows are split across
 * the pool's threads. */
#include "backends/cpu/cpu_impl.h"
#include "core/quant.h"

#include <math.h>

struct rows_job { struct weft_cpu_backend *be; const struct weft_op *op; weft_status st; };

static void embed_job(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    const struct weft_view *t = &j->op->u.embed.table, *ids = &j->op->u.embed.ids, *out = &j->op->u.embed.out;
    int64_t n = ids->ne0 * ids->ne1, lo, hi;
    cpu_split(n, ith, nth, &lo, &hi);
    const int32_t *id = (const int32_t *)cpu_ptr(ids);
    for (int64_t r = lo; r < hi; r++) {
        if (id[r] < 0 || id[r] >= t->ne1) { j->st = WEFT_ERR_INVALID_ARG; continue; }
        weft_dequantize_row(t->type, cpu_ptr(t) + (size_t)id[r] * t->nb1, cpu_row_f32(out, r), t->ne0);
    }
}

weft_status weft_cpu_embed(struct weft_cpu_backend *be, const struct weft_op *op)
{
    struct rows_job j = {be, op, WEFT_OK};
    weft_cpu_pool_run(be->pool, embed_job, &j);
    if (j.st != WEFT_OK) return weft_error(j.st, "cpu: token id outside the embedding table");
    return WEFT_OK;
}

/* y = h / sqrt(mean(h²) + eps) * w, h = x (+ add, stored to sum) */
static void rmsnorm_job(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    const struct weft_op_rmsnorm *o = &j->op->u.rmsnorm;
    int64_t K = o->x.ne0, lo, hi;
    cpu_split(o->x.ne1, ith, nth, &lo, &hi);
    const float *w = (const float *)cpu_ptr(&o->w);
    for (int64_t r = lo; r < hi; r++) {
        const float *x = cpu_row_f32(&o->x, r);
        float *y = cpu_row_f32(&o->out, r);
        const float *h = x;
        if (o->has_add) {
            const float *a = cpu_row_f32(&o->add, r);
            float *s = cpu_row_f32(&o->sum, r);
            for (int64_t k = 0; k < K; k++) s[k] = x[k] + a[k];
            h = s;
        }
        double ss = 0;
        for (int64_t k = 0; k < K; k++) ss += (double)h[k] * h[k];
        float scale = 1.0f / sqrtf((float)(ss / K) + o->eps);
        for (int64_t k = 0; k < K; k++) y[k] = h[k] * scale * w[k];
    }
}

weft_status weft_cpu_rmsnorm(struct weft_cpu_backend *be, const struct weft_op *op)
{
    struct rows_job j = {be, op, WEFT_OK};
    weft_cpu_pool_run(be->pool, rmsnorm_job, &j);
    return WEFT_OK;
}

static void silu_mul_job(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    const struct weft_op_silu_mul *o = &j->op->u.silu_mul;
    int64_t K = o->out.ne0, lo, hi;
    cpu_split(o->out.ne1, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *g = cpu_row_f32(&o->gate, r), *u = cpu_row_f32(&o->up, r);
        float *y = cpu_row_f32(&o->out, r);
        for (int64_t k = 0; k < K; k++) y[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
    }
}

weft_status weft_cpu_silu_mul(struct weft_cpu_backend *be, const struct weft_op *op)
{
    struct rows_job j = {be, op, WEFT_OK};
    weft_cpu_pool_run(be->pool, silu_mul_job, &j);
    return WEFT_OK;
}

static void add_job(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    const struct weft_op_add *o = &j->op->u.add;
    int64_t K = o->out.ne0, lo, hi;
    cpu_split(o->out.ne1, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *a = cpu_row_f32(&o->a, r), *b = cpu_row_f32(&o->b, r);
        float *y = cpu_row_f32(&o->out, r);
        for (int64_t k = 0; k < K; k++) y[k] = a[k] + b[k];
    }
}

weft_status weft_cpu_add(struct weft_cpu_backend *be, const struct weft_op *op)
{
    struct rows_job j = {be, op, WEFT_OK};
    weft_cpu_pool_run(be->pool, add_job, &j);
    return WEFT_OK;
}
