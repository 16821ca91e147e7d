/* The runtime calls of a GPU backend, written once for CUDA's and HIP's
 * runtime APIs, which name the same calls alike (cudaMalloc / hipMalloc,
 * cudaStreamSynchronize / hipStreamSynchronize, ...): error reporting,
 * buffers (allocation, stream-ordered copies), sync, and the runtime hooks
 * of the shared host code (backends/gpu/gpu_common.h: launches go through
 * backends/gpu/gpu_encode.c, graphs through stream capture).
 *
 * Not a normal header: a backend's host file (backends/cuda/cuda_backend.c,
 * backends/hip/hip_backend.c) defines
 *   WEFT_RT(x)     its runtime's name for x: cuda##x or hip##x (the HIP
 *                  names resolve to CUDA's through kernels-hip/hip_to_cuda.h
 *                  in the HIP backend's nvcc build)
 *   WEFT_RT_OOM    its out-of-memory code (cudaErrorMemoryAllocation, hipErrorOutOfMemory)
 *   WEFT_RT_NAME   its name in messages and its options' prefix ("cuda", "hip":
 *                  <name>.graphs, <name>.debug)
 *   WEFT_RT_ATTR_MP    the device attribute of its multiprocessor count
 *   WEFT_RT_HOST_ALLOC_MAPPED(pp, n), WEFT_RT_HOST_FREE(p)   mapped pinned
 *                  host memory (the two runtimes name these differently)
 * then includes this file once, and defines the two functions that differ
 * between the vendors (how devices are named and checked, graphs by
 * default), declared here:
 *   static int weft_rt_devices(struct weft_device_info *infos, int max, const char **why);
 *   static weft_status weft_rt_open(const struct weft_backend_params *p, struct weft_backend **out);
 * It gets: weft_rt_err, weft_rt_open_gpu and weft_rt_mem_free (the shared
 * parts of open and devices), the runtime hooks, the backend's iface
 * (weft_rt_iface: close, buffers, run and sync from here) and the module's
 * entry point, weft_backend_module_init.
 *
 * No call here aborts: each failure becomes a weft_status. */
#ifndef WEFT_GPU_RUNTIME_H
#define WEFT_GPU_RUNTIME_H

#if !defined(WEFT_RT) || !defined(WEFT_RT_OOM) || !defined(WEFT_RT_NAME) || \
    !defined(WEFT_RT_ATTR_MP) || !defined(WEFT_RT_HOST_ALLOC_MAPPED) || !defined(WEFT_RT_HOST_FREE)
#error "define WEFT_RT(x) and the other WEFT_RT_* macros before including backends/gpu/gpu_runtime.h"
#endif

#include "backends/gpu/gpu_common.h"
#include "backends/module.h"
#include "base/options.h"
#include "kernels-common/launch.h"

#include <stdlib.h>

_Static_assert(WEFT_RT(Success) == 0, "gpu_common.h: runtime codes are 0 on success");

typedef WEFT_RT(Error_t) weft_rt_error_t;
typedef WEFT_RT(Stream_t) weft_rt_stream_t;

static inline weft_rt_stream_t weft_rt_stream(const struct weft_gpu *g) { return (weft_rt_stream_t)g->stream; }

/* A failed runtime call as a weft_status: out-of-memory -> WEFT_ERR_NOMEM,
 * no device/driver -> WEFT_ERR_NO_DEVICE, anything else WEFT_ERR_DEVICE;
 * the message names `what` and the runtime's own words. Clears the
 * runtime's last error when it is not sticky. */
static weft_status weft_rt_err(weft_rt_error_t e, const char *what)
{
    const char *msg = WEFT_RT(GetErrorString)(e);
    WEFT_RT(GetLastError)();  /* clear it unless sticky */
    switch (e) {
    case WEFT_RT_OOM:
        return weft_error(WEFT_ERR_NOMEM, WEFT_RT_NAME ": %s: out of device memory (%s)", what, msg);
    case WEFT_RT(ErrorNoDevice):
    case WEFT_RT(ErrorInsufficientDriver):
    case WEFT_RT(ErrorInvalidDevice):
        return weft_error(WEFT_ERR_NO_DEVICE, WEFT_RT_NAME ": %s: %s", what, msg);
    default:
        return weft_error(WEFT_ERR_DEVICE, WEFT_RT_NAME ": %s: %s (error %d)", what, msg, (int)e);
    }
}

/* ---- open and close ---- */

static const struct weft_gpu_hooks weft_rt_hooks;
static const struct weft_backend_iface weft_rt_iface;

/* the backend's own (see the top of this file) */
static int weft_rt_devices(struct weft_device_info *infos, int max, const char **why);
static weft_status weft_rt_open(const struct weft_backend_params *p, struct weft_backend **out);

/* The free memory of device i for devices() (0 when unknown); leaves i selected. */
static size_t weft_rt_mem_free(int i)
{
    size_t fr = 0, tot = 0;
    if (WEFT_RT(SetDevice)(i) != WEFT_RT(Success) || WEFT_RT(MemGetInfo)(&fr, &tot) != WEFT_RT(Success)) fr = 0;
    WEFT_RT(GetLastError)();
    return fr;
}

static void weft_rt_close(struct weft_backend *b)
{
    struct weft_gpu *g = (struct weft_gpu *)b;
    if (!g) return;
    WEFT_RT(SetDevice)(g->device);
    if (g->stream) WEFT_RT(StreamSynchronize)(weft_rt_stream(g));
    weft_gpu_release(g);
    if (g->err_host) WEFT_RT_HOST_FREE(g->err_host);
    if (g->stream) WEFT_RT(StreamDestroy)(weft_rt_stream(g));
    WEFT_RT(GetLastError)();
    free(g);
}

/* What every backend's open does: device p->device selected; a weft_gpu
 * with the iface, the runtime hooks, the device, a non-blocking stream, the
 * multiprocessor count and the mapped error word; graphs off (the backend
 * decides). On failure nothing is left allocated. */
static weft_status weft_rt_open_gpu(const struct weft_backend_params *p, struct weft_gpu **out)
{
    *out = NULL;
    static const char *const known[] = {WEFT_RT_NAME ".graphs", WEFT_RT_NAME ".debug"};
    char bad[64];
    if (weft_opt_unknown(p->options, WEFT_RT_NAME ".", known, 2, bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, WEFT_RT_NAME ": unknown option '%s' (known: " WEFT_RT_NAME
                          ".graphs, " WEFT_RT_NAME ".debug)", bad);
    int n = 0;
    weft_rt_error_t e = WEFT_RT(GetDeviceCount)(&n);
    if (e != WEFT_RT(Success)) return weft_rt_err(e, "counting devices");
    if (p->device < 0 || p->device >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, WEFT_RT_NAME ": no device %d (%d found)", p->device, n);
    if ((e = WEFT_RT(SetDevice)(p->device)) != WEFT_RT(Success)) return weft_rt_err(e, "selecting the device");
    struct weft_gpu *g = calloc(1, sizeof *g);
    if (!g) return weft_error(WEFT_ERR_NOMEM, WEFT_RT_NAME ": out of host memory");
    g->base.iface = &weft_rt_iface;
    g->hooks = &weft_rt_hooks;
    g->debug = weft_opt_flag(p->options, WEFT_RT_NAME ".debug", false);
    g->device = p->device;
    weft_status st = WEFT_OK;
    weft_rt_stream_t stream = NULL;
    if ((e = WEFT_RT(StreamCreateWithFlags)(&stream, WEFT_RT(StreamNonBlocking))) != WEFT_RT(Success)) {
        st = weft_rt_err(e, "creating a stream");
        goto err;
    }
    g->stream = stream;
    if ((e = WEFT_RT(DeviceGetAttribute)(&g->n_mp, WEFT_RT_ATTR_MP, p->device)) != WEFT_RT(Success)) {
        st = weft_rt_err(e, "reading the multiprocessor count");
        goto err;
    }
    if ((e = WEFT_RT_HOST_ALLOC_MAPPED((void **)&g->err_host, sizeof(int))) != WEFT_RT(Success) ||
        (e = WEFT_RT(HostGetDevicePointer)((void **)&g->err_dev, g->err_host, 0)) != WEFT_RT(Success)) {
        st = weft_rt_err(e, "allocating the error word");
        goto err;
    }
    *g->err_host = 0;
    *out = g;
    return WEFT_OK;
err:
    weft_rt_close(&g->base);
    return st;
}

/* ---- buffers ---- */

static weft_status weft_rt_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    struct weft_gpu *g = (struct weft_gpu *)b;
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, WEFT_RT_NAME ": out of host memory");
    WEFT_RT(SetDevice)(g->device);
    size_t asz = size ? (size + 255) & ~(size_t)255 : 256;
    if (asz < size) {  /* size near SIZE_MAX */
        free(buf);
        return weft_error(WEFT_ERR_NOMEM, WEFT_RT_NAME ": cannot allocate a buffer of %zu bytes", size);
    }
    weft_rt_error_t e = WEFT_RT(Malloc)((void **)&buf->dev, asz);
    if (e != WEFT_RT(Success)) {
        free(buf);
        size_t fr = 0, tot = 0;
        WEFT_RT(GetLastError)();
        WEFT_RT(MemGetInfo)(&fr, &tot);
        WEFT_RT(GetLastError)();
        if (e == WEFT_RT_OOM)
            return weft_error(WEFT_ERR_NOMEM,
                              WEFT_RT_NAME ":%d: out of device memory for a buffer of %zu bytes (%zu of %zu free)",
                              g->device, size, fr, tot);
        return weft_rt_err(e, "allocating a buffer");
    }
    if ((e = WEFT_RT(MemsetAsync)(buf->dev, 0, asz, weft_rt_stream(g))) != WEFT_RT(Success)) {
        WEFT_RT(Free)(buf->dev);
        free(buf);
        return weft_rt_err(e, "clearing a new buffer");
    }
    buf->gpu = g;
    buf->size = size;
    buf->id = weft_gpu_next_buffer_id();
    *out = buf;
    return WEFT_OK;
}

static void weft_rt_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    WEFT_RT(SetDevice)(buf->gpu->device);
    WEFT_RT(StreamSynchronize)(weft_rt_stream(buf->gpu));  /* no queued op may still use it */
    WEFT_RT(Free)(buf->dev);
    WEFT_RT(GetLastError)();
    free(buf);
}

/* Copies are queued on the backend's stream, so they are ordered with the
 * ops around them; write and read return once the host memory is done with. */
static weft_status weft_rt_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    weft_status st = weft_gpu_range(buf, off, n, "write");
    if (st != WEFT_OK || n == 0) return st;
    const weft_rt_stream_t s = weft_rt_stream(buf->gpu);
    WEFT_RT(SetDevice)(buf->gpu->device);
    weft_rt_error_t e = WEFT_RT(MemcpyAsync)(buf->dev + off, src, n, WEFT_RT(MemcpyHostToDevice), s);
    if (e == WEFT_RT(Success)) e = WEFT_RT(StreamSynchronize)(s);
    return e == WEFT_RT(Success) ? WEFT_OK : weft_rt_err(e, "writing a buffer");
}

static weft_status weft_rt_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    weft_status st = weft_gpu_range(buf, off, n, "read");
    if (st != WEFT_OK || n == 0) return st;
    const weft_rt_stream_t s = weft_rt_stream(buf->gpu);
    WEFT_RT(SetDevice)(buf->gpu->device);
    weft_rt_error_t e = WEFT_RT(MemcpyAsync)(dst, buf->dev + off, n, WEFT_RT(MemcpyDeviceToHost), s);
    if (e == WEFT_RT(Success)) e = WEFT_RT(StreamSynchronize)(s);
    return e == WEFT_RT(Success) ? WEFT_OK : weft_rt_err(e, "reading a buffer");
}

static weft_status weft_rt_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff,
                                       size_t n)
{
    if (!weft_gpu_in_range(dst, doff, n) || !weft_gpu_in_range(src, soff, n))
        return weft_error(WEFT_ERR_INVALID_ARG, WEFT_RT_NAME ": copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    WEFT_RT(SetDevice)(dst->gpu->device);
    weft_rt_error_t e = WEFT_RT(MemcpyAsync)(dst->dev + doff, src->dev + soff, n, WEFT_RT(MemcpyDeviceToDevice),
                                             weft_rt_stream(dst->gpu));
    return e == WEFT_RT(Success) ? WEFT_OK : weft_rt_err(e, "copying between buffers");
}

/* Waits for everything queued, then reports bad input the kernels met. */
static weft_status weft_rt_sync(struct weft_backend *b)
{
    struct weft_gpu *g = (struct weft_gpu *)b;
    WEFT_RT(SetDevice)(g->device);
    weft_rt_error_t e = WEFT_RT(StreamSynchronize)(weft_rt_stream(g));
    if (e != WEFT_RT(Success)) return weft_rt_err(e, "running the op list");
    return weft_gpu_take_input_error(g);
}

static weft_status weft_rt_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct weft_gpu *g = (struct weft_gpu *)b;
    WEFT_RT(SetDevice)(g->device);
    return weft_gpu_run(g, ops, n);
}

/* ---- the runtime hooks of backends/gpu/gpu_common.h ---- */

static weft_status weft_rt_hook_error(int e, const char *what) { return weft_rt_err((weft_rt_error_t)e, what); }
static const char *weft_rt_hook_error_str(int e) { return WEFT_RT(GetErrorString)((weft_rt_error_t)e); }
static void weft_rt_hook_clear_error(void) { WEFT_RT(GetLastError)(); }

static int weft_rt_hook_stream_sync(struct weft_gpu *g) { return WEFT_RT(StreamSynchronize)(weft_rt_stream(g)); }
static int weft_rt_hook_dev_alloc(struct weft_gpu *g, size_t n, void **out) { return WEFT_RT(Malloc)(out, n); }
static void weft_rt_hook_dev_free(struct weft_gpu *g, void *p) { WEFT_RT(Free)(p); }

static int weft_rt_hook_copy(struct weft_gpu *g, void *dst, const void *src, size_t n)
{
    return WEFT_RT(MemcpyAsync)(dst, src, n, WEFT_RT(MemcpyDeviceToDevice), weft_rt_stream(g));
}

static int weft_rt_hook_capture_begin(struct weft_gpu *g)
{
    return WEFT_RT(StreamBeginCapture)(weft_rt_stream(g), WEFT_RT(StreamCaptureModeThreadLocal));
}

static int weft_rt_hook_capture_end(struct weft_gpu *g, bool launched_ok, void **exec)
{
    WEFT_RT(Graph_t) graph = NULL;
    weft_rt_error_t e = WEFT_RT(StreamEndCapture)(weft_rt_stream(g), &graph);
    if (e == WEFT_RT(Success) && !launched_ok) e = WEFT_RT(ErrorStreamCaptureInvalidated);
    WEFT_RT(GraphExec_t) x = NULL;
    if (e == WEFT_RT(Success)) e = WEFT_RT(GraphInstantiateWithFlags)(&x, graph, 0);
    if (graph) WEFT_RT(GraphDestroy)(graph);
    *exec = e == WEFT_RT(Success) ? x : NULL;
    return e;
}

static int weft_rt_hook_graph_launch(struct weft_gpu *g, void *exec)
{
    return WEFT_RT(GraphLaunch)((WEFT_RT(GraphExec_t))exec, weft_rt_stream(g));
}

static void weft_rt_hook_graph_destroy(void *exec) { WEFT_RT(GraphExecDestroy)((WEFT_RT(GraphExec_t))exec); }

static const struct weft_gpu_hooks weft_rt_hooks = {
    .name = WEFT_RT_NAME,
    .err_oom = WEFT_RT_OOM,
    .err_invalid = WEFT_RT(ErrorInvalidValue),
    .type_ok = weft_gk_matmul_type_ok,
    .matmul_scratch = weft_gk_matmul_scratch,
    .attn_splits = weft_gk_attn_splits,
    .attention_scratch = weft_gk_attention_scratch,
    .error = weft_rt_hook_error,
    .error_str = weft_rt_hook_error_str,
    .clear_error = weft_rt_hook_clear_error,
    .stream_sync = weft_rt_hook_stream_sync,
    .dev_alloc = weft_rt_hook_dev_alloc,
    .dev_free = weft_rt_hook_dev_free,
    .copy = weft_rt_hook_copy,
    .encode = weft_gpu_encode,
    .glu = weft_gk_glu,
    .embed_scaled = weft_gk_embed_scaled,
    .swiglu_oai = weft_gk_swiglu_oai,
    .moe_route = weft_gk_moe_route,
    .matmul_id_scratch = weft_gk_matmul_id_scratch,
    .matmul_id = weft_gk_matmul_id,
    .ssm_conv = weft_gk_ssm_conv,
    .delta_net = weft_gk_delta_net,
    .add_scaled = weft_gk_add_scaled,
    .rope_q = weft_gk_rope_q,
    .capture_begin = weft_rt_hook_capture_begin,
    .capture_end = weft_rt_hook_capture_end,
    .graph_launch = weft_rt_hook_graph_launch,
    .graph_destroy = weft_rt_hook_graph_destroy,
};

/* ---- the backend ---- */

static const struct weft_backend_iface weft_rt_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = WEFT_RT_NAME,
    .devices = weft_rt_devices,
    .open = weft_rt_open,
    .close = weft_rt_close,
    .buffer_alloc = weft_rt_buffer_alloc,
    .buffer_wrap_host = NULL,   /* weights are uploaded into device memory */
    .buffer_free = weft_rt_buffer_free,
    .buffer_write = weft_rt_buffer_write,
    .buffer_read = weft_rt_buffer_read,
    .buffer_copy = weft_rt_buffer_copy,
    .supports = weft_gpu_supports,
    .run = weft_rt_run,
    .sync = weft_rt_sync,
    .weight_prepare = NULL,
    .max_buffer = NULL,         /* no limit below device memory: kernels index with 64-bit offsets */
};

WEFT_MODULE_EXPORT const struct weft_backend_iface *weft_backend_module_init(const struct weft_module_host *host,
                                                                            const char **why)
{
    if (!host || host->abi != WEFT_MODULE_ABI) {
        if (why) *why = "module ABI mismatch (rebuild libweft-" WEFT_RT_NAME ".so with this weft)";
        return NULL;
    }
    weft_module_host_ = host;
    return &weft_rt_iface;
}

#endif
