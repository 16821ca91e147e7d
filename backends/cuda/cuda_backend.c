/* CUDA backend, host side: devices, buffers (cudaMalloc'd device memory,
 * stream-ordered copies), op validation, and the module entry point.
 * Running ops (and CUDA graphs) is in cuda_run.c; kernels in kernels-cuda/.
 *
 * cudart is linked statically and finds the driver (libcuda.so.1) itself at
 * run time, so this module loads on machines without one: devices() then
 * returns 0 with the reason, and weft carries on with its other backends.
 * No CUDA failure aborts: each becomes a weft_status (weft_cuda_err). */
#include "backends/cuda/cuda_impl.h"
#include "backends/module.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

weft_status weft_cuda_err(cudaError_t e, const char *what)
{
    const char *msg = cudaGetErrorString(e);
    cudaGetLastError();  /* clear it unless sticky */
    switch (e) {
    case cudaErrorMemoryAllocation:
        return weft_error(WEFT_ERR_NOMEM, "cuda: %s: out of device memory (%s)", what, msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
        return weft_error(WEFT_ERR_NO_DEVICE, "cuda: %s: %s", what, msg);
    default:
        return weft_error(WEFT_ERR_DEVICE, "cuda: %s: %s (error %d)", what, msg, (int)e);
    }
}

static char devices_why[256];

static int cuda_devices(struct weft_device_info *infos, int max, const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        if (e == cudaErrorInsufficientDriver)
            snprintf(devices_why, sizeof devices_why, "CUDA driver not found or too old (needs libcuda.so.1): %s",
                     cudaGetErrorString(e));
        else if (e == cudaErrorNoDevice || (e == cudaSuccess && n <= 0))
            snprintf(devices_why, sizeof devices_why, "no CUDA devices (driver present)");
        else
            snprintf(devices_why, sizeof devices_why, "CUDA unavailable: %s (error %d)", cudaGetErrorString(e), (int)e);
        cudaGetLastError();
        if (why) *why = devices_why;
        return 0;
    }
    int prev = 0;
    cudaGetDevice(&prev);
    for (int i = 0; i < n && i < max; i++) {
        struct cudaDeviceProp p;
        memset(&infos[i], 0, sizeof infos[i]);
        snprintf(infos[i].id, sizeof infos[i].id, "cuda:%d", i);
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            cudaGetLastError();
            snprintf(infos[i].name, sizeof infos[i].name, "CUDA device %d (properties unavailable)", i);
            continue;
        }
        snprintf(infos[i].name, sizeof infos[i].name, "%.96s (sm_%d%d, %d SMs)", p.name, p.major, p.minor,
                 p.multiProcessorCount);
        infos[i].mem_total = p.totalGlobalMem;
        size_t fr = 0, tot = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess) infos[i].mem_free = fr;
        cudaGetLastError();
    }
    cudaSetDevice(prev);
    return n;
}

static void cuda_close(struct weft_backend *b)
{
    struct weft_cuda_backend *be = (struct weft_cuda_backend *)b;
    if (!be) return;
    cudaSetDevice(be->device);
    if (be->stream) cudaStreamSynchronize(be->stream);
    weft_cuda_graphs_clear(be);
    if (be->scratch) cudaFree(be->scratch);
    if (be->err_host) cudaFreeHost(be->err_host);
    if (be->stream) cudaStreamDestroy(be->stream);
    cudaGetLastError();
    free(be->key_tmp);
    free(be);
}

static const struct weft_backend_iface cuda_iface;

static weft_status cuda_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return weft_cuda_err(e, "counting devices");
    if (p->device < 0 || p->device >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "cuda: no device %d (%d found)", p->device, n);
    if ((e = cudaSetDevice(p->device)) != cudaSuccess) return weft_cuda_err(e, "selecting the device");
    struct weft_cuda_backend *be = calloc(1, sizeof *be);
    if (!be) return weft_error(WEFT_ERR_NOMEM, "cuda: out of host memory");
    be->base.iface = &cuda_iface;
    be->device = p->device;
    const char *g = getenv("WEFT_CUDA_GRAPHS");
    be->graphs = !(g && !strcmp(g, "0"));
    weft_status st = WEFT_OK;
    if ((e = cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = weft_cuda_err(e, "creating a stream");
        goto err;
    }
    if ((e = cudaDeviceGetAttribute(&be->n_sm, cudaDevAttrMultiProcessorCount, p->device)) != cudaSuccess) {
        st = weft_cuda_err(e, "reading the multiprocessor count");
        goto err;
    }
    if ((e = cudaHostAlloc((void **)&be->err_host, sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
        (e = cudaHostGetDevicePointer((void **)&be->err_dev, be->err_host, 0)) != cudaSuccess) {
        st = weft_cuda_err(e, "allocating the error word");
        goto err;
    }
    *be->err_host = 0;
    *out = &be->base;
    return WEFT_OK;
err:
    cuda_close(&be->base);
    return st;
}

static uint64_t next_buffer_id = 1;

static weft_status cuda_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    struct weft_cuda_backend *be = (struct weft_cuda_backend *)b;
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "cuda: out of host memory");
    cudaSetDevice(be->device);
    size_t asz = size ? (size + 255) & ~(size_t)255 : 256;
    if (asz < size) {  /* size near SIZE_MAX */
        free(buf);
        return weft_error(WEFT_ERR_NOMEM, "cuda: cannot allocate a buffer of %zu bytes", size);
    }
    cudaError_t e = cudaMalloc((void **)&buf->dev, asz);
    if (e != cudaSuccess) {
        free(buf);
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return weft_error(WEFT_ERR_NOMEM, "cuda:%d: out of device memory for a buffer of %zu bytes (%zu of %zu free)",
                              be->device, size, fr, tot);
        return weft_cuda_err(e, "allocating a buffer");
    }
    if ((e = cudaMemsetAsync(buf->dev, 0, asz, be->stream)) != cudaSuccess) {
        cudaFree(buf->dev);
        free(buf);
        return weft_cuda_err(e, "clearing a new buffer");
    }
    buf->be = be;
    buf->size = size;
    buf->id = __atomic_fetch_add(&next_buffer_id, 1, __ATOMIC_RELAXED);
    *out = buf;
    return WEFT_OK;
}

static void cuda_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    cudaSetDevice(buf->be->device);
    cudaStreamSynchronize(buf->be->stream);  /* no queued op may still use it */
    cudaFree(buf->dev);
    cudaGetLastError();
    free(buf);
}

static bool in_range(const struct weft_buffer *buf, size_t off, size_t n)
{
    return off <= buf->size && n <= buf->size - off;
}

/* Copies are queued on the backend's stream, so they are ordered with the
 * ops around them; write and read return once the host memory is done with. */
static weft_status cuda_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    if (!in_range(buf, off, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "cuda: write [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    if (n == 0) return WEFT_OK;
    struct weft_cuda_backend *be = buf->be;
    cudaSetDevice(be->device);
    cudaError_t e = cudaMemcpyAsync(buf->dev + off, src, n, cudaMemcpyHostToDevice, be->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
    return e == cudaSuccess ? WEFT_OK : weft_cuda_err(e, "writing a buffer");
}

static weft_status cuda_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    if (!in_range(buf, off, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "cuda: read [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    if (n == 0) return WEFT_OK;
    struct weft_cuda_backend *be = buf->be;
    cudaSetDevice(be->device);
    cudaError_t e = cudaMemcpyAsync(dst, buf->dev + off, n, cudaMemcpyDeviceToHost, be->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
    return e == cudaSuccess ? WEFT_OK : weft_cuda_err(e, "reading a buffer");
}

static weft_status cuda_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff,
                                    size_t n)
{
    if (!in_range(dst, doff, n) || !in_range(src, soff, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "cuda: copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    struct weft_cuda_backend *be = dst->be;
    cudaSetDevice(be->device);
    cudaError_t e = cudaMemcpyAsync(dst->dev + doff, src->dev + soff, n, cudaMemcpyDeviceToDevice, be->stream);
    return e == cudaSuccess ? WEFT_OK : weft_cuda_err(e, "copying between buffers");
}

/* ---- supports ---- */

/* A view's rows lie inside its buffer and are aligned for the kernels
 * (4 bytes for F32/I32 rows, 2 for every weight block format). */
static bool view_ok(const struct weft_view *v)
{
    if (!v->buf || v->ne0 <= 0 || v->ne1 <= 0) return false;
    const struct weft_type_info *ti = weft_type_get(v->type);
    if (!ti || v->ne0 % ti->block_size) return false;
    size_t row = weft_row_size(v->type, v->ne0);
    size_t align = v->type == WEFT_TYPE_F32 || v->type == WEFT_TYPE_I32 ? 4 : 2;
    if (v->offset % align || v->nb1 % align) return false;
    size_t end = v->offset + (size_t)(v->ne1 - 1) * v->nb1 + row;
    return end <= v->buf->size && v->nb1 >= row;
}

static bool is_f32(const struct weft_view *v) { return v->type == WEFT_TYPE_F32 && view_ok(v); }
static bool is_i32(const struct weft_view *v) { return v->type == WEFT_TYPE_I32 && view_ok(v); }

static bool weight_ok(const struct weft_view *w)
{
    return weft_cu_matmul_type_ok((int)w->type) && view_ok(w);  /* block types: ne0 % block checked */
}

static bool kv_ok(const struct weft_kv_view *kv, uint32_t n_head)
{
    return kv->buf && kv->layer < kv->n_layer && kv->n_kv_head > 0 && kv->head_dim > 0 && kv->head_dim <= 256 &&
           n_head % kv->n_kv_head == 0 &&
           (kv->type == WEFT_TYPE_F16 || (kv->type == WEFT_TYPE_Q8_0 && kv->head_dim % 32 == 0));
}

static bool batch_ok(const struct weft_batch_view *bv)
{
    return bv->n_rows > 0 && is_i32(&bv->pos) && is_i32(&bv->seq) && is_i32(&bv->slot) && is_i32(&bv->bt_off) &&
           is_i32(&bv->bt);
}

static bool cuda_supports(struct weft_backend *b, const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return weft_cu_matmul_type_ok((int)o->table.type) && view_ok(&o->table) && is_i32(&o->ids) &&
               o->ids.ne1 == 1 && is_f32(&o->out) && o->out.ne0 == o->table.ne0 && o->out.ne1 >= o->ids.ne0;
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return is_f32(&o->x) && is_f32(&o->w) && is_f32(&o->out) &&
               (!o->has_add || (is_f32(&o->add) && is_f32(&o->sum)));
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        return weight_ok(&o->w) && is_f32(&o->x) && is_f32(&o->out) && o->x.ne0 == o->w.ne0 &&
               o->out.ne0 == o->w.ne1 && o->out.ne1 >= o->x.ne1 && (!o->has_add || is_f32(&o->add));
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        return kv_ok(&o->kv, o->n_head) && batch_ok(&o->batch) && is_f32(&o->q) && is_f32(&o->k) &&
               is_f32(&o->v) && o->n_rot % 2 == 0 && o->n_rot <= o->kv.head_dim;
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        return kv_ok(&o->kv, o->n_head) && batch_ok(&o->batch) && is_f32(&o->q) && is_f32(&o->out);
    }
    case WEFT_OP_SILU_MUL:
        return is_f32(&op->u.silu_mul.gate) && is_f32(&op->u.silu_mul.up) && is_f32(&op->u.silu_mul.out);
    case WEFT_OP_ADD:
        return is_f32(&op->u.add.a) && is_f32(&op->u.add.b) && is_f32(&op->u.add.out);
    case WEFT_OP_COPY:
        return op->u.copy.src && op->u.copy.dst && in_range(op->u.copy.src, op->u.copy.src_off, op->u.copy.bytes) &&
               in_range(op->u.copy.dst, op->u.copy.dst_off, op->u.copy.bytes);
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        return weight_ok(&o->w) && is_f32(&o->x) && is_f32(&o->norm_w) && is_i32(&o->rows) && is_f32(&o->out) &&
               o->x.ne0 == o->w.ne0 && o->out.ne0 == o->w.ne1 && o->out.ne1 >= o->rows.ne0;
    }
    default:
        return false;
    }
}

/* Waits for everything queued, then reports bad input the kernels met. */
static weft_status cuda_sync(struct weft_backend *b)
{
    struct weft_cuda_backend *be = (struct weft_cuda_backend *)b;
    cudaSetDevice(be->device);
    cudaError_t e = cudaStreamSynchronize(be->stream);
    if (e != cudaSuccess) return weft_cuda_err(e, "running the op list");
    int err = *(volatile int *)be->err_host;
    if (err) {
        *(volatile int *)be->err_host = 0;
        return weft_error(WEFT_ERR_INVALID_ARG, "cuda: %s outside its table in the last op list (zeros were used)",
                          err == 1 ? "a token id" : "a LOGITS row index");
    }
    return WEFT_OK;
}

static const struct weft_backend_iface cuda_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "cuda",
    .devices = cuda_devices,
    .open = cuda_open,
    .close = cuda_close,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_wrap_host = NULL,   /* weights are uploaded into device memory */
    .buffer_free = cuda_buffer_free,
    .buffer_write = cuda_buffer_write,
    .buffer_read = cuda_buffer_read,
    .buffer_copy = cuda_buffer_copy,
    .supports = cuda_supports,
    .run = weft_cuda_run,
    .sync = cuda_sync,
    .weight_prepare = NULL,
};

WEFT_MODULE_EXPORT const struct weft_backend_iface *weft_backend_module_init(const struct weft_module_host *host,
                                                                            const char **why)
{
    if (!host || host->abi != WEFT_MODULE_ABI) {
        if (why) *why = "module ABI mismatch (rebuild libweft-cuda.so with this weft)";
        return NULL;
    }
    weft_module_host_ = host;
    return &cuda_iface;
}
