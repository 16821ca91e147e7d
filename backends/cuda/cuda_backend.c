/* CUDA backend, host side: devices, buffers (cudaMalloc'd device memory,
 * stream-ordered copies), and the module entry point. Op validation and
 * running ops (with CUDA graphs) are the shared GPU host code's
 * (backends/gpu/gpu_common.c) over cuda_run.c's hooks; kernels in kernels-cuda/.
 *
 * cudart is linked statically and finds the driver (libcuda.so.1) itself at
 * run time, so this module loads on machines without one: devices() then
 * returns 0 with the reason, and weft carries on with its other backends.
 * No CUDA failure aborts: each becomes a weft_status (weft_cuda_err). */
#include "backends/cuda/cuda_impl.h"
#include "backends/module.h"

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
    cudaSetDevice(be->gpu.device);
    if (be->stream) cudaStreamSynchronize(be->stream);
    weft_gpu_release(&be->gpu);
    if (be->gpu.err_host) cudaFreeHost(be->gpu.err_host);
    if (be->stream) cudaStreamDestroy(be->stream);
    cudaGetLastError();
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
    be->gpu.base.iface = &cuda_iface;
    be->gpu.hooks = &weft_cuda_hooks;
    be->gpu.device = p->device;
    const char *g = getenv("WEFT_CUDA_GRAPHS");
    be->gpu.graphs = !(g && !strcmp(g, "0"));
    weft_status st = WEFT_OK;
    if ((e = cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = weft_cuda_err(e, "creating a stream");
        goto err;
    }
    if ((e = cudaDeviceGetAttribute(&be->gpu.n_mp, cudaDevAttrMultiProcessorCount, p->device)) != cudaSuccess) {
        st = weft_cuda_err(e, "reading the multiprocessor count");
        goto err;
    }
    if ((e = cudaHostAlloc((void **)&be->gpu.err_host, sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
        (e = cudaHostGetDevicePointer((void **)&be->gpu.err_dev, be->gpu.err_host, 0)) != cudaSuccess) {
        st = weft_cuda_err(e, "allocating the error word");
        goto err;
    }
    *be->gpu.err_host = 0;
    *out = &be->gpu.base;
    return WEFT_OK;
err:
    cuda_close(&be->gpu.base);
    return st;
}

static weft_status cuda_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    struct weft_cuda_backend *be = (struct weft_cuda_backend *)b;
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "cuda: out of host memory");
    cudaSetDevice(be->gpu.device);
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
                              be->gpu.device, size, fr, tot);
        return weft_cuda_err(e, "allocating a buffer");
    }
    if ((e = cudaMemsetAsync(buf->dev, 0, asz, be->stream)) != cudaSuccess) {
        cudaFree(buf->dev);
        free(buf);
        return weft_cuda_err(e, "clearing a new buffer");
    }
    buf->gpu = &be->gpu;
    buf->size = size;
    buf->id = weft_gpu_next_buffer_id();
    *out = buf;
    return WEFT_OK;
}

static void cuda_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    cudaSetDevice(buf->gpu->device);
    cudaStreamSynchronize(weft_cuda_of(buf->gpu)->stream);  /* no queued op may still use it */
    cudaFree(buf->dev);
    cudaGetLastError();
    free(buf);
}

/* Copies are queued on the backend's stream, so they are ordered with the
 * ops around them; write and read return once the host memory is done with. */
static weft_status cuda_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    weft_status st = weft_gpu_range(buf, off, n, "write");
    if (st != WEFT_OK || n == 0) return st;
    struct weft_cuda_backend *be = weft_cuda_of(buf->gpu);
    cudaSetDevice(be->gpu.device);
    cudaError_t e = cudaMemcpyAsync(buf->dev + off, src, n, cudaMemcpyHostToDevice, be->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
    return e == cudaSuccess ? WEFT_OK : weft_cuda_err(e, "writing a buffer");
}

static weft_status cuda_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    weft_status st = weft_gpu_range(buf, off, n, "read");
    if (st != WEFT_OK || n == 0) return st;
    struct weft_cuda_backend *be = weft_cuda_of(buf->gpu);
    cudaSetDevice(be->gpu.device);
    cudaError_t e = cudaMemcpyAsync(dst, buf->dev + off, n, cudaMemcpyDeviceToHost, be->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
    return e == cudaSuccess ? WEFT_OK : weft_cuda_err(e, "reading a buffer");
}

static weft_status cuda_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff,
                                    size_t n)
{
    if (!weft_gpu_in_range(dst, doff, n) || !weft_gpu_in_range(src, soff, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "cuda: copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    struct weft_cuda_backend *be = weft_cuda_of(dst->gpu);
    cudaSetDevice(be->gpu.device);
    cudaError_t e = cudaMemcpyAsync(dst->dev + doff, src->dev + soff, n, cudaMemcpyDeviceToDevice, be->stream);
    return e == cudaSuccess ? WEFT_OK : weft_cuda_err(e, "copying between buffers");
}

/* Waits for everything queued, then reports bad input the kernels met. */
static weft_status cuda_sync(struct weft_backend *b)
{
    struct weft_cuda_backend *be = (struct weft_cuda_backend *)b;
    cudaSetDevice(be->gpu.device);
    cudaError_t e = cudaStreamSynchronize(be->stream);
    if (e != cudaSuccess) return weft_cuda_err(e, "running the op list");
    return weft_gpu_take_input_error(&be->gpu);
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
    .supports = weft_gpu_supports,
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
