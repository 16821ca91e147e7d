/* CUDA backend, host side: devices, open and close, and the module entry
 * point. Buffers (cudaMalloc'd device memory, stream-ordered copies), op
 * validation and running ops (with CUDA graphs) are the shared GPU host
 * code's: backends/gpu/gpu_runtime.h instantiated below with CUDA's names,
 * over backends/gpu/gpu_common.c and gpu_encode.c; kernels in kernels-cuda/
 * over kernels-common/.
 *
 * cudart is linked statically and finds the driver (libcuda.so.1) itself at
 * run time, so this module loads on machines without one: devices() then
 * returns 0 with the reason, and weft carries on with its other backends.
 * No CUDA failure aborts: each becomes a weft_status (weft_rt_err). */
#include <cuda_runtime_api.h>

#include "backends/backend.h"
#include "backends/module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEFT_RT(x) cuda##x
#define WEFT_RT_OOM cudaErrorMemoryAllocation
#define WEFT_RT_NAME "cuda"
#define WEFT_RT_DEBUG_ENV "WEFT_CUDA_DEBUG"
#include "backends/gpu/gpu_runtime.h"

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
    struct weft_gpu *g = (struct weft_gpu *)b;
    if (!g) return;
    cudaSetDevice(g->device);
    if (g->stream) cudaStreamSynchronize(weft_rt_stream(g));
    weft_gpu_release(g);
    if (g->err_host) cudaFreeHost(g->err_host);
    if (g->stream) cudaStreamDestroy(weft_rt_stream(g));
    cudaGetLastError();
    free(g);
}

static const struct weft_backend_iface cuda_iface;

static weft_status cuda_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return weft_rt_err(e, "counting devices");
    if (p->device < 0 || p->device >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "cuda: no device %d (%d found)", p->device, n);
    if ((e = cudaSetDevice(p->device)) != cudaSuccess) return weft_rt_err(e, "selecting the device");
    struct weft_gpu *g = calloc(1, sizeof *g);
    if (!g) return weft_error(WEFT_ERR_NOMEM, "cuda: out of host memory");
    g->base.iface = &cuda_iface;
    g->hooks = &weft_rt_hooks;
    g->device = p->device;
    const char *graphs = getenv("WEFT_CUDA_GRAPHS");
    g->graphs = !(graphs && !strcmp(graphs, "0"));
    weft_status st = WEFT_OK;
    cudaStream_t stream = NULL;
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = weft_rt_err(e, "creating a stream");
        goto err;
    }
    g->stream = stream;
    if ((e = cudaDeviceGetAttribute(&g->n_mp, cudaDevAttrMultiProcessorCount, p->device)) != cudaSuccess) {
        st = weft_rt_err(e, "reading the multiprocessor count");
        goto err;
    }
    if ((e = cudaHostAlloc((void **)&g->err_host, sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
        (e = cudaHostGetDevicePointer((void **)&g->err_dev, g->err_host, 0)) != cudaSuccess) {
        st = weft_rt_err(e, "allocating the error word");
        goto err;
    }
    *g->err_host = 0;
    *out = &g->base;
    return WEFT_OK;
err:
    cuda_close(&g->base);
    return st;
}

static const struct weft_backend_iface cuda_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "cuda",
    .devices = cuda_devices,
    .open = cuda_open,
    .close = cuda_close,
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
