/* Running an op list on the CUDA backend: each op becomes one or two
 * kernel launches on the backend's stream (kernels-cuda/cuda_kernels.h).
 * Scratch, graph keys and the graph table are the shared GPU host code's
 * (backends/gpu/gpu_common.c); this file is the CUDA runtime calls it is
 * given as hooks: launches, stream capture into CUDA graphs, scratch memory. */
#include "backends/cuda/cuda_impl.h"

#include <math.h>

_Static_assert(cudaSuccess == 0, "gpu_common.h: runtime codes are 0 on success");

static struct weft_cu_kv kv_desc(const struct weft_kv_view *kv)
{
    struct weft_cu_kv d = {kv->buf->dev, (int)kv->type, (int)kv->n_layer, (int)kv->layer, (int)kv->n_kv_head,
                           (int)kv->head_dim};
    return d;
}

static int cuda_encode(struct weft_gpu *g, const struct weft_op *op)
{
    cudaStream_t st = weft_cuda_of(g)->stream;
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return weft_cu_embed((int)o->table.type, weft_gpu_ptr(&o->table), o->table.nb1, o->table.ne1, o->table.ne0,
                             weft_gpu_i32(&o->ids), o->ids.ne0, weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                             g->err_dev, st);
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return weft_cu_rmsnorm(weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), NULL, o->x.ne1,
                               o->has_add ? weft_gpu_f32(&o->add) : NULL, o->has_add ? weft_gpu_ld(&o->add) : 0,
                               o->has_add ? weft_gpu_f32(&o->sum) : NULL, o->has_add ? weft_gpu_ld(&o->sum) : 0,
                               weft_gpu_f32(&o->w), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->x.ne1, o->x.ne0,
                               o->eps, g->err_dev, st);
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        struct weft_cu_mm m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, o->x.ne1,
                               weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                               o->has_add ? weft_gpu_f32(&o->add) : NULL, o->has_add ? weft_gpu_ld(&o->add) : 0};
        return weft_cu_matmul(&m, g->scratch, st);
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        struct weft_cu_kv kv = kv_desc(&o->kv);
        /* as the CPU: theta_scale from the host's powf */
        float theta_scale = powf(o->freq_base, -2.0f / (float)o->n_rot);
        return weft_cu_rope_kv(weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_f32(&o->k), weft_gpu_ld(&o->k),
                               weft_gpu_f32(&o->v), weft_gpu_ld(&o->v), weft_gpu_i32(&o->batch.pos),
                               weft_gpu_i32(&o->batch.slot), o->batch.n_rows, (int)o->n_head, (int)o->n_rot,
                               theta_scale, o->freq_scale, o->mode == WEFT_ROPE_NEOX, &kv, st);
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        struct weft_cu_attn_args a = {weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_f32(&o->out),
                                      weft_gpu_ld(&o->out), kv_desc(&o->kv), weft_gpu_i32(&o->batch.pos),
                                      weft_gpu_i32(&o->batch.seq), weft_gpu_i32(&o->batch.bt_off),
                                      weft_gpu_i32(&o->batch.bt), o->batch.n_rows, (int)o->n_head, o->scale};
        return weft_cu_attention(&a, weft_gpu_attn_splits(g, o), g->scratch, st);
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        return weft_cu_silu_mul(weft_gpu_f32(&o->gate), weft_gpu_ld(&o->gate), weft_gpu_f32(&o->up),
                                weft_gpu_ld(&o->up), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1,
                                o->out.ne0, st);
    }
    case WEFT_OP_ADD: {
        const struct weft_op_add *o = &op->u.add;
        return weft_cu_add(weft_gpu_f32(&o->a), weft_gpu_ld(&o->a), weft_gpu_f32(&o->b), weft_gpu_ld(&o->b),
                           weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1, o->out.ne0, st);
    }
    case WEFT_OP_COPY: {
        const struct weft_op_copy *o = &op->u.copy;
        if (!o->bytes) return cudaSuccess;
        return cudaMemcpyAsync(o->dst->dev + o->dst_off, o->src->dev + o->src_off, o->bytes, cudaMemcpyDeviceToDevice,
                               st);
    }
    case WEFT_OP_LOGITS: {
        /* rmsnorm of the listed rows into scratch, then the output matmul */
        const struct weft_op_logits *o = &op->u.logits;
        const int64_t n_out = o->rows.ne0, K = o->x.ne0;
        float *normed = (float *)g->scratch;
        cudaError_t e = weft_cu_rmsnorm(weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_i32(&o->rows), o->x.ne1,
                                        NULL, 0, NULL, 0, weft_gpu_f32(&o->norm_w), normed, (size_t)K, n_out, K,
                                        o->eps, g->err_dev, st);
        if (e != cudaSuccess) return e;
        struct weft_cu_mm m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, n_out, normed,
                               (size_t)K, weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), NULL, 0};
        return weft_cu_matmul(&m, g->scratch + weft_gpu_logits_norm_bytes(o), st);
    }
    default:
        return cudaErrorInvalidValue;
    }
}

/* ---- the runtime hooks ---- */

static weft_status cuda_error(int e, const char *what) { return weft_cuda_err((cudaError_t)e, what); }
static const char *cuda_error_str(int e) { return cudaGetErrorString((cudaError_t)e); }
static void cuda_clear_error(void) { cudaGetLastError(); }

static int cuda_stream_sync(struct weft_gpu *g) { return cudaStreamSynchronize(weft_cuda_of(g)->stream); }
static int cuda_dev_alloc(struct weft_gpu *g, size_t n, void **out) { return cudaMalloc(out, n); }
static void cuda_dev_free(struct weft_gpu *g, void *p) { cudaFree(p); }

static int cuda_capture_begin(struct weft_gpu *g)
{
    return cudaStreamBeginCapture(weft_cuda_of(g)->stream, cudaStreamCaptureModeThreadLocal);
}

static int cuda_capture_end(struct weft_gpu *g, bool launched_ok, void **exec)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(weft_cuda_of(g)->stream, &graph);
    if (e == cudaSuccess && !launched_ok) e = cudaErrorStreamCaptureInvalidated;
    cudaGraphExec_t x = NULL;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&x, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    *exec = e == cudaSuccess ? x : NULL;
    return e;
}

static int cuda_graph_launch(struct weft_gpu *g, void *exec)
{
    return cudaGraphLaunch((cudaGraphExec_t)exec, weft_cuda_of(g)->stream);
}

static void cuda_graph_destroy(void *exec) { cudaGraphExecDestroy((cudaGraphExec_t)exec); }

const struct weft_gpu_hooks weft_cuda_hooks = {
    .name = "cuda",
    .debug_env = "WEFT_CUDA_DEBUG",
    .err_oom = cudaErrorMemoryAllocation,
    .type_ok = weft_cu_matmul_type_ok,
    .matmul_scratch = weft_cu_matmul_scratch,
    .attn_splits = weft_cu_attn_splits,
    .attention_scratch = weft_cu_attention_scratch,
    .error = cuda_error,
    .error_str = cuda_error_str,
    .clear_error = cuda_clear_error,
    .stream_sync = cuda_stream_sync,
    .dev_alloc = cuda_dev_alloc,
    .dev_free = cuda_dev_free,
    .encode = cuda_encode,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
};

weft_status weft_cuda_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct weft_gpu *g = (struct weft_gpu *)b;
    cudaSetDevice(g->device);
    return weft_gpu_run(g, ops, n);
}
