/* HIP backend, host side: devices, buffers (hipMalloc'd device memory,
 * stream-ordered copies), op validation, and the module entry point.
 * Running ops (and graphs) is in hip_run.c; kernels in kernels-hip/.
 *
 * The module links libamdhip64. Where that library is absent, dlopen of
 * libweft-hip.so fails and `weft devices` says so; where it is present but
 * the ROCm kernel driver (/dev/kfd) or an AMD GPU is not, devices() returns
 * 0 with the reason. Either way weft carries on with its other backends.
 * No HIP failure aborts: each becomes a weft_status (weft_hip_err).
 *
 * Built with WEFT_HIP_ON_CUDA the same code runs on CUDA's runtime
 * (kernels-hip/hip_to_cuda.h): the backend is still "hip", on an NVIDIA GPU. */
#include "backends/hip/hip_impl.h"
#include "backends/module.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

weft_status weft_hip_err(hipError_t e, const char *what)
{
    const char *msg = hipGetErrorString(e);
    hipGetLastError();  /* clear it unless sticky */
    switch (e) {
    case hipErrorOutOfMemory:
        return weft_error(WEFT_ERR_NOMEM, "hip: %s: out of device memory (%s)", what, msg);
    case hipErrorNoDevice:
    case hipErrorInsufficientDriver:
    case hipErrorInvalidDevice:
        return weft_error(WEFT_ERR_NO_DEVICE, "hip: %s: %s", what, msg);
    default:
        return weft_error(WEFT_ERR_DEVICE, "hip: %s: %s (error %d)", what, msg, (int)e);
    }
}

static char devices_why[256];

#ifndef WEFT_HIP_ON_CUDA
#ifndef WEFT_HIP_TARGETS_STR
#define WEFT_HIP_TARGETS_STR "gfx90a,gfx940,gfx1030"   /* backends/hip/CMakeLists.txt passes the real list */
#endif
/* Whether the kernels were built for this device's target ("gfx90a" out of
 * gcnArchName "gfx90a:sramecc+:xnack-"): a code object runs only on its own
 * target, so e.g. gfx942 (MI300X) or gfx1100 need their own build. */
static bool target_built(const char *gcn_arch)
{
    const size_t n = strcspn(gcn_arch, ":");
    for (const char *t = WEFT_HIP_TARGETS_STR; *t;) {
        const size_t m = strcspn(t, ",");
        if (m == n && !strncmp(t, gcn_arch, n)) return true;
        t += m + (t[m] == ',');
    }
    return false;
}
#endif

static int hip_devices(struct weft_device_info *infos, int max, const char **why)
{
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess || n <= 0) {
#ifdef WEFT_HIP_ON_CUDA
        const bool no_driver = e == hipErrorInsufficientDriver;
        const char *driver = "the NVIDIA driver (libcuda.so.1; this libweft-hip.so is the nvcc build)";
#else
        const bool no_driver = e == hipErrorInsufficientDriver || access("/dev/kfd", F_OK) != 0;
        const char *driver = "the ROCm kernel driver (/dev/kfd)";
#endif
        if (no_driver)
            snprintf(devices_why, sizeof devices_why, "%s is not present (%s)", driver, hipGetErrorString(e));
        else if (e == hipErrorNoDevice || (e == hipSuccess && n <= 0))
            snprintf(devices_why, sizeof devices_why, "no GPU found (%s is present; %s)", driver, hipGetErrorString(e));
        else
            snprintf(devices_why, sizeof devices_why, "HIP unavailable: %s (error %d)", hipGetErrorString(e), (int)e);
        hipGetLastError();
        if (why) *why = devices_why;
        return 0;
    }
    int prev = 0;
    hipGetDevice(&prev);
    for (int i = 0; i < n && i < max; i++) {
        hipDeviceProp_t p;
        memset(&infos[i], 0, sizeof infos[i]);
        snprintf(infos[i].id, sizeof infos[i].id, "hip:%d", i);
        if (hipGetDeviceProperties(&p, i) != hipSuccess) {
            hipGetLastError();
            snprintf(infos[i].name, sizeof infos[i].name, "HIP device %d (properties unavailable)", i);
            continue;
        }
#ifdef WEFT_HIP_ON_CUDA
        snprintf(infos[i].name, sizeof infos[i].name, "%.80s (sm_%d%d via CUDA, wave%d, %d SMs)", p.name, p.major,
                 p.minor, p.warpSize, p.multiProcessorCount);
#else
        /* gcnArchName: "gfx90a:sramecc+:xnack-"; the part before ':' is the target */
        snprintf(infos[i].name, sizeof infos[i].name, "%.64s (%.*s, wave%d, %d CUs%s)", p.name,
                 (int)strcspn(p.gcnArchName, ":"), p.gcnArchName, p.warpSize, p.multiProcessorCount,
                 target_built(p.gcnArchName) ? "" : "; no kernels built for this target");
#endif
        infos[i].mem_total = p.totalGlobalMem;
        size_t fr = 0, tot = 0;
        if (hipSetDevice(i) == hipSuccess && hipMemGetInfo(&fr, &tot) == hipSuccess) infos[i].mem_free = fr;
        hipGetLastError();
    }
    hipSetDevice(prev);
    return n;
}

static void hip_close(struct weft_backend *b)
{
    struct weft_hip_backend *be = (struct weft_hip_backend *)b;
    if (!be) return;
    hipSetDevice(be->device);
    if (be->stream) hipStreamSynchronize(be->stream);
    weft_hip_graphs_clear(be);
    if (be->scratch) hipFree(be->scratch);
    if (be->err_host) hipHostFree(be->err_host);
    if (be->stream) hipStreamDestroy(be->stream);
    hipGetLastError();
    free(be->key_tmp);
    free(be);
}

static const struct weft_backend_iface hip_iface;

static weft_status hip_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess) return weft_hip_err(e, "counting devices");
    if (p->device < 0 || p->device >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "hip: no device %d (%d found)", p->device, n);
    if ((e = hipSetDevice(p->device)) != hipSuccess) return weft_hip_err(e, "selecting the device");
#ifndef WEFT_HIP_ON_CUDA
    hipDeviceProp_t prop;
    if ((e = hipGetDeviceProperties(&prop, p->device)) != hipSuccess) return weft_hip_err(e, "reading the device");
    if (!target_built(prop.gcnArchName))
        return weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: %.*s is not one of the targets this libweft-hip.so was built for (%s; "
                          "rebuild with -DWEFT_HIP_TARGETS=...)", p->device, (int)strcspn(prop.gcnArchName, ":"),
                          prop.gcnArchName, WEFT_HIP_TARGETS_STR);
#endif
    struct weft_hip_backend *be = calloc(1, sizeof *be);
    if (!be) return weft_error(WEFT_ERR_NOMEM, "hip: out of host memory");
    be->base.iface = &hip_iface;
    be->device = p->device;
    /* Graphs: on by default in the nvcc build (as the CUDA backend); opt-in
     * (WEFT_HIP_GRAPHS=1) on ROCm, whose stream capture is younger */
    const char *g = getenv("WEFT_HIP_GRAPHS");
#ifdef WEFT_HIP_ON_CUDA
    be->graphs = !(g && !strcmp(g, "0"));
#else
    be->graphs = g && strcmp(g, "0") != 0;
#endif
    weft_status st = WEFT_OK;
    if ((e = hipStreamCreateWithFlags(&be->stream, hipStreamNonBlocking)) != hipSuccess) {
        st = weft_hip_err(e, "creating a stream");
        goto err;
    }
    if ((e = hipDeviceGetAttribute(&be->n_cu, hipDeviceAttributeMultiprocessorCount, p->device)) != hipSuccess ||
        (e = hipDeviceGetAttribute(&be->warp, hipDeviceAttributeWarpSize, p->device)) != hipSuccess) {
        st = weft_hip_err(e, "reading the compute-unit count and wavefront size");
        goto err;
    }
    if (be->warp < 32) {   /* kernels-common works in 32-lane groups inside one wavefront */
        st = weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: wavefront of %d lanes (weft's kernels need 32 or 64)",
                        p->device, be->warp);
        goto err;
    }
    if ((e = hipHostMalloc((void **)&be->err_host, sizeof(int), hipHostMallocMapped)) != hipSuccess ||
        (e = hipHostGetDevicePointer((void **)&be->err_dev, be->err_host, 0)) != hipSuccess) {
        st = weft_hip_err(e, "allocating the error word");
        goto err;
    }
    *be->err_host = 0;
    *out = &be->base;
    return WEFT_OK;
err:
    hip_close(&be->base);
    return st;
}

static uint64_t next_buffer_id = 1;

static weft_status hip_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    struct weft_hip_backend *be = (struct weft_hip_backend *)b;
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "hip: out of host memory");
    hipSetDevice(be->device);
    size_t asz = size ? (size + 255) & ~(size_t)255 : 256;
    if (asz < size) {  /* size near SIZE_MAX */
        free(buf);
        return weft_error(WEFT_ERR_NOMEM, "hip: cannot allocate a buffer of %zu bytes", size);
    }
    hipError_t e = hipMalloc((void **)&buf->dev, asz);
    if (e != hipSuccess) {
        free(buf);
        size_t fr = 0, tot = 0;
        hipGetLastError();
        hipMemGetInfo(&fr, &tot);
        hipGetLastError();
        if (e == hipErrorOutOfMemory)
            return weft_error(WEFT_ERR_NOMEM, "hip:%d: out of device memory for a buffer of %zu bytes (%zu of %zu free)",
                              be->device, size, fr, tot);
        return weft_hip_err(e, "allocating a buffer");
    }
    if ((e = hipMemsetAsync(buf->dev, 0, asz, be->stream)) != hipSuccess) {
        hipFree(buf->dev);
        free(buf);
        return weft_hip_err(e, "clearing a new buffer");
    }
    buf->be = be;
    buf->size = size;
    buf->id = __atomic_fetch_add(&next_buffer_id, 1, __ATOMIC_RELAXED);
    *out = buf;
    return WEFT_OK;
}

static void hip_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    hipSetDevice(buf->be->device);
    hipStreamSynchronize(buf->be->stream);  /* no queued op may still use it */
    hipFree(buf->dev);
    hipGetLastError();
    free(buf);
}

static bool in_range(const struct weft_buffer *buf, size_t off, size_t n)
{
    return off <= buf->size && n <= buf->size - off;
}

/* Copies are queued on the backend's stream, so they are ordered with the
 * ops around them; write and read return once the host memory is done with. */
static weft_status hip_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    if (!in_range(buf, off, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "hip: write [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    if (n == 0) return WEFT_OK;
    struct weft_hip_backend *be = buf->be;
    hipSetDevice(be->device);
    hipError_t e = hipMemcpyAsync(buf->dev + off, src, n, hipMemcpyHostToDevice, be->stream);
    if (e == hipSuccess) e = hipStreamSynchronize(be->stream);
    return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "writing a buffer");
}

static weft_status hip_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    if (!in_range(buf, off, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "hip: read [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    if (n == 0) return WEFT_OK;
    struct weft_hip_backend *be = buf->be;
    hipSetDevice(be->device);
    hipError_t e = hipMemcpyAsync(dst, buf->dev + off, n, hipMemcpyDeviceToHost, be->stream);
    if (e == hipSuccess) e = hipStreamSynchronize(be->stream);
    return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "reading a buffer");
}

static weft_status hip_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff,
                                    size_t n)
{
    if (!in_range(dst, doff, n) || !in_range(src, soff, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "hip: copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    struct weft_hip_backend *be = dst->be;
    hipSetDevice(be->device);
    hipError_t e = hipMemcpyAsync(dst->dev + doff, src->dev + soff, n, hipMemcpyDeviceToDevice, be->stream);
    return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "copying between buffers");
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
    return weft_hip_matmul_type_ok((int)w->type) && view_ok(w);  /* block types: ne0 % block checked */
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

static bool hip_supports(struct weft_backend *b, const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return weft_hip_matmul_type_ok((int)o->table.type) && view_ok(&o->table) && is_i32(&o->ids) &&
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
static weft_status hip_sync(struct weft_backend *b)
{
    struct weft_hip_backend *be = (struct weft_hip_backend *)b;
    hipSetDevice(be->device);
    hipError_t e = hipStreamSynchronize(be->stream);
    if (e != hipSuccess) return weft_hip_err(e, "running the op list");
    int err = *(volatile int *)be->err_host;
    if (err) {
        *(volatile int *)be->err_host = 0;
        return weft_error(WEFT_ERR_INVALID_ARG, "hip: %s outside its table in the last op list (zeros were used)",
                          err == 1 ? "a token id" : "a LOGITS row index");
    }
    return WEFT_OK;
}

static const struct weft_backend_iface hip_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "hip",
    .devices = hip_devices,
    .open = hip_open,
    .close = hip_close,
    .buffer_alloc = hip_buffer_alloc,
    .buffer_wrap_host = NULL,   /* weights are uploaded into device memory */
    .buffer_free = hip_buffer_free,
    .buffer_write = hip_buffer_write,
    .buffer_read = hip_buffer_read,
    .buffer_copy = hip_buffer_copy,
    .supports = hip_supports,
    .run = weft_hip_run,
    .sync = hip_sync,
    .weight_prepare = NULL,
    .max_buffer = NULL,         /* no limit below device memory: kernels index with 64-bit offsets */
};

WEFT_MODULE_EXPORT const struct weft_backend_iface *weft_backend_module_init(const struct weft_module_host *host,
                                                                            const char **why)
{
    if (!host || host->abi != WEFT_MODULE_ABI) {
        if (why) *why = "module ABI mismatch (rebuild libweft-hip.so with this weft)";
        return NULL;
    }
    weft_module_host_ = host;
    return &hip_iface;
}
