/* Element-wise CPU ops: EMBED, RMSNORM, SILU_MUL (SwiGLU, GeGLU), ADD. Rows are split across
 * the pool's threads. */
#include "backends/cpu/cpu_impl.h"
#include "base/quant.h"

#include <math.h>
#include <pthread.h>

struct rows_job { struct weft_cpu_backend *be; const struct weft_op *op; };

static void embed_job(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    const struct weft_view *t = &j->op->u.embed.table, *ids = &j->op->u.embed.ids, *out = &j->op->u.embed.out;
    int64_t n = ids->ne0 * ids->ne1, lo, hi;
    cpu_split(n, ith, nth, &lo, &hi);
    const int32_t *id = (const int32_t *)cpu_ptr(ids);
    const float scale = j->op->u.embed.scale;
    for (int64_t r = lo; r < hi; r++) {
        float *y = cpu_row_f32(out, r);
        weft_dequantize_row(t->type, cpu_ptr(t) + (size_t)id[r] * t->nb1, y, t->ne0);
        if (scale != 0.0f)  /* ggml_scale after get_rows (Gemma's sqrt(n_embd)) */
            for (int64_t k = 0; k < t->ne0; k++) y[k] *= scale;
    }
}

weft_status weft_cpu_embed(struct weft_cpu_backend *be, const struct weft_op *op)
{
    /* ids are checked up front so the workers never see a bad one */
    const struct weft_view *ids = &op->u.embed.ids;
    const int32_t *id = (const int32_t *)cpu_ptr(ids);
    for (int64_t r = 0; r < ids->ne0 * ids->ne1; r++)
        if (id[r] < 0 || id[r] >= op->u.embed.table.ne1)
            return weft_error(WEFT_ERR_INVALID_ARG, "cpu: token id %d outside the embedding table (%lld rows)",
                              id[r], (long long)op->u.embed.table.ne1);
    struct rows_job j = {be, op};
    weft_cpu_pool_run_parts(be->pool, embed_job, &j, cpu_parts(be, ids->ne0 * ids->ne1));
    return WEFT_OK;
}

/* 1/sqrt(mean(x²) + eps) as ggml_compute_forward_rms_norm_f32: each square is
 * rounded to float, then summed in double (ggml_float) in element order; the
 * mean is rounded to float before eps is added. The caller then forms
 * (x * scale) * w: ggml_vec_scale_f32 followed by the separate MUL by the
 * norm weight. Mirrored exactly: llama.cpp's F16 KV cache turns last-bit
 * differences into visible logprob drift over a greedy decode. */
float weft_cpu_rms_scale(const float *x, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t k = 0; k < n; k++) sum += (double)(x[k] * x[k]);
    const float mean = (float)(sum / (double)n);
    return 1.0f / sqrtf(mean + eps);
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
        float scale = weft_cpu_rms_scale(h, K, o->eps);
        for (int64_t k = 0; k < K; k++) y[k] = h[k] * scale * w[k];
    }
}

weft_status weft_cpu_rmsnorm(struct weft_cpu_backend *be, const struct weft_op *op)
{
    struct rows_job j = {be, op};
    weft_cpu_pool_run_parts(be->pool, rmsnorm_job, &j, cpu_parts(be, op->u.rmsnorm.x.ne1));
    return WEFT_OK;
}

/* GeLU (tanh form) of x through ggml's F16 table: every F16 value's GeLU,
 * computed in F32 with libm's tanhf and rounded to F16 (ggml_table_gelu_f16),
 * built once. */
static uint16_t gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void)
{
    for (uint32_t i = 0; i < (1u << 16); i++) {
        float x = weft_half_to_f32((weft_half)i);
        float y = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
        gelu_table[i] = weft_f32_to_half(y);
    }
}

/* out = gelu(gate) * up as ggml_vec_geglu_f32 (GGML_GELU_FP16) */
static void geglu_row(float *y, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        if (x <= -10.0f) y[i] = 0.0f;
        else if (x >= 10.0f) y[i] = x * u[i];
        else y[i] = weft_half_to_f32(gelu_table[weft_f32_to_half(x)]) * u[i];
    }
}

/* gpt-oss's clamped SwiGLU, as ggml's swiglu_oai (libm expf) */
static void swiglu_oai_row(float *y, const float *g, const float *u, int64_t n, float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float v = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        const float glu = x / (1.0f + expf(alpha * -x));
        y[i] = glu * (v + 1.0f);
    }
}

/* SwiGLU: the kernel table's swiglu (ggml_vec_swiglu_f32's exact float
 * order, see weft_cpu_swiglu_ref in cpu_kernels.c), one row at a time;
 * GeGLU: geglu_row; SIGMOID: up · sigmoid(gate) (a gated attention output). */
static void silu_mul_job(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    const struct weft_op_silu_mul *o = &j->op->u.silu_mul;
    int64_t K = o->out.ne0, lo, hi;
    cpu_split(o->out.ne1, ith, nth, &lo, &hi);
    const weft_cpu_swiglu_fn swiglu = j->be->kern->swiglu;
    for (int64_t r = lo; r < hi; r++) {
        const float *g = cpu_row_f32(&o->gate, r), *u = cpu_row_f32(&o->up, r);
        float *y = cpu_row_f32(&o->out, r);
        if (o->act == WEFT_GLU_GELU_TANH) geglu_row(y, g, u, K);
        else if (o->act == WEFT_GLU_SWIGLU_OAI) swiglu_oai_row(y, g, u, K, o->alpha, o->limit);
        else if (o->act == WEFT_GLU_SIGMOID)  /* ggml's sigmoid (libm expf), then the product */
            for (int64_t i = 0; i < K; i++) y[i] = u[i] * (1.0f / (1.0f + expf(-g[i])));
        else swiglu(y, g, u, K);
    }
}

weft_status weft_cpu_silu_mul(struct weft_cpu_backend *be, const struct weft_op *op)
{
    if (op->u.silu_mul.act == WEFT_GLU_GELU_TANH) pthread_once(&gelu_once, gelu_table_init);
    struct rows_job j = {be, op};
    weft_cpu_pool_run_parts(be->pool, silu_mul_job, &j, cpu_parts(be, op->u.silu_mul.out.ne1));
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
        if (o->scale != 0.0f) {
            /* the sum rounded to F32, then the product (ggml's ADD, then MUL) */
            for (int64_t k = 0; k < K; k++) {
                const float t = a[k] + b[k];
                y[k] = t * o->scale;
            }
        } else {
            for (int64_t k = 0; k < K; k++) y[k] = a[k] + b[k];
        }
    }
}

weft_status weft_cpu_add(struct weft_cpu_backend *be, const struct weft_op *op)
{
    struct rows_job j = {be, op};
    weft_cpu_pool_run_parts(be->pool, add_job, &j, cpu_parts(be, op->u.add.out.ne1));
    return WEFT_OK;
}
