/* Running an op list on the HIP backend: each op becomes one or two
 * kernel launches on the backend's stream (kernels-hip/hip_kernels.h).
 * Scratch, graph keys and the graph table are the shared GPU host code's
 * (backends/gpu/gpu_common.c); this file is the HIP runtime calls it is
 * given as hooks: launches, stream capture into graphs, scratch memory.
 * Graphs are on only when hip_backend.c's open says so. */
#include "backends/hip/hip_impl.h"

#include <math.h>

_Static_assert(hipSuccess == 0, "gpu_common.h: runtime codes are 0 on success");

static struct weft_hip_kv kv_desc(const struct weft_kv_view *kv)
{
    struct weft_hip_kv d = {kv->buf->dev, (int)kv->type, (int)kv->n_layer, (int)kv->layer, (int)kv->n_kv_head,
                           (int)kv->head_dim};
    return d;
}

static int hip_encode(struct weft_gpu *g, const struct weft_op *op)
{
    hipStream_t st = weft_hip_of(g)->stream;
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return weft_hip_embed((int)o->table.type, weft_gpu_ptr(&o->table), o->table.nb1, o->table.ne1, o->table.ne0,
                             weft_gpu_i32(&o->ids), o->ids.ne0, weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                             g->err_dev, st);
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return weft_hip_rmsnorm(weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), NULL, o->x.ne1,
                               o->has_add ? weft_gpu_f32(&o->add) : NULL, o->has_add ? weft_gpu_ld(&o->add) : 0,
                               o->has_add ? weft_gpu_f32(&o->sum) : NULL, o->has_add ? weft_gpu_ld(&o->sum) : 0,
                               weft_gpu_f32(&o->w), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->x.ne1, o->x.ne0,
                               o->eps, g->err_dev, st);
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        struct weft_hip_mm m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, o->x.ne1,
                               weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                               o->has_add ? weft_gpu_f32(&o->add) : NULL, o->has_add ? weft_gpu_ld(&o->add) : 0};
        return weft_hip_matmul(&m, g->scratch, st);
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        struct weft_hip_kv kv = kv_desc(&o->kv);
        /* as the CPU: theta_scale from the host's powf */
        float theta_scale = powf(o->freq_base, -2.0f / (float)o->n_rot);
        return weft_hip_rope_kv(weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_f32(&o->k), weft_gpu_ld(&o->k),
                               weft_gpu_f32(&o->v), weft_gpu_ld(&o->v), weft_gpu_i32(&o->batch.pos),
                               weft_gpu_i32(&o->batch.slot), o->batch.n_rows, (int)o->n_head, (int)o->n_rot,
                               theta_scale, o->freq_scale, o->mode == WEFT_ROPE_NEOX, &kv, st);
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        struct weft_hip_attn_args a = {weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_f32(&o->out),
                                      weft_gpu_ld(&o->out), kv_desc(&o->kv), weft_gpu_i32(&o->batch.pos),
                                      weft_gpu_i32(&o->batch.seq), weft_gpu_i32(&o->batch.bt_off),
                                      weft_gpu_i32(&o->batch.bt), o->batch.n_rows, (int)o->n_head, o->scale};
        return weft_hip_attention(&a, weft_gpu_attn_splits(g, o), g->scratch, st);
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        return weft_hip_silu_mul(weft_gpu_f32(&o->gate), weft_gpu_ld(&o->gate), weft_gpu_f32(&o->up),
                                weft_gpu_ld(&o->up), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1,
                                o->out.ne0, st);
    }
    case WEFT_OP_ADD: {
        const struct weft_op_add *o = &op->u.add;
        return weft_hip_add(weft_gpu_f32(&o->a), weft_gpu_ld(&o->a), weft_gpu_f32(&o->b), weft_gpu_ld(&o->b),
                           weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1, o->out.ne0, st);
    }
    case WEFT_OP_COPY: {
        const struct weft_op_copy *o = &op->u.copy;
        if (!o->bytes) return hipSuccess;
        return hipMemcpyAsync(o->dst->dev + o->dst_off, o->src->dev + o->src_off, o->bytes, hipMemcpyDeviceToDevice,
                               st);
    }
    case WEFT_OP_LOGITS: {
        /* rmsnorm of the listed rows into scratch, then the output matmul */
        const struct weft_op_logits *o = &op->u.logits;
        const int64_t n_out = o->rows.ne0, K = o->x.ne0;
        float *normed = (float *)g->scratch;
        hipError_t e = weft_hip_rmsnorm(weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_i32(&o->rows), o->x.ne1,
                                        NULL, 0, NULL, 0, weft_gpu_f32(&o->norm_w), normed, (size_t)K, n_out, K,
                                        o->eps, g->err_dev, st);
        if (e != hipSuccess) return e;
        struct weft_hip_mm m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, n_out, normed,
                               (size_t)K, weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), NULL, 0};
        return weft_hip_matmul(&m, g->scratch + weft_gpu_logits_norm_bytes(o), st);
    }
    default:
        return hipErrorInvalidValue;
    }
}

/* ---- the runtime hooks ---- */

static weft_status hip_error(int e, const char *what) { return weft_hip_err((hipError_t)e, what); }
static const char *hip_error_str(int e) { return hipGetErrorString((hipError_t)e); }
static void hip_clear_error(void) { hipGetLastError(); }

static int hip_stream_sync(struct weft_gpu *g) { return hipStreamSynchronize(weft_hip_of(g)->stream); }
static int hip_dev_alloc(struct weft_gpu *g, size_t n, void **out) { return hipMalloc(out, n); }
static void hip_dev_free(struct weft_gpu *g, void *p) { hipFree(p); }

static int hip_capture_begin(struct weft_gpu *g)
{
    return hipStreamBeginCapture(weft_hip_of(g)->stream, hipStreamCaptureModeThreadLocal);
}

static int hip_capture_end(struct weft_gpu *g, bool launched_ok, void **exec)
{
    hipGraph_t graph = NULL;
    hipError_t e = hipStreamEndCapture(weft_hip_of(g)->stream, &graph);
    if (e == hipSuccess && !launched_ok) e = hipErrorStreamCaptureInvalidated;
    hipGraphExec_t x = NULL;
    if (e == hipSuccess) e = hipGraphInstantiateWithFlags(&x, graph, 0);
    if (graph) hipGraphDestroy(graph);
    *exec = e == hipSuccess ? x : NULL;
    return e;
}

static int hip_graph_launch(struct weft_gpu *g, void *exec)
{
    return hipGraphLaunch((hipGraphExec_t)exec, weft_hip_of(g)->stream);
}

static void hip_graph_destroy(void *exec) { hipGraphExecDestroy((hipGraphExec_t)exec); }

const struct weft_gpu_hooks weft_hip_hooks = {
    .name = "hip",
    .debug_env = "WEFT_HIP_DEBUG",
    .err_oom = hipErrorOutOfMemory,
    .type_ok = weft_hip_matmul_type_ok,
    .matmul_scratch = weft_hip_matmul_scratch,
    .attn_splits = weft_hip_attn_splits,
    .attention_scratch = weft_hip_attention_scratch,
    .error = hip_error,
    .error_str = hip_error_str,
    .clear_error = hip_clear_error,
    .stream_sync = hip_stream_sync,
    .dev_alloc = hip_dev_alloc,
    .dev_free = hip_dev_free,
    .encode = hip_encode,
    .capture_begin = hip_capture_begin,
    .capture_end = hip_capture_end,
    .graph_launch = hip_graph_launch,
    .graph_destroy = hip_graph_destroy,
};

weft_status weft_hip_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct weft_gpu *g = (struct weft_gpu *)b;
    hipSetDevice(g->device);
    return weft_gpu_run(g, ops, n);
}
