/* CUDA backend, host side: what only CUDA has to say (how devices are
 * named, graphs on by default). Everything else is the GPU host code shared
 * with the HIP backend: backends/gpu/gpu_runtime.h instantiated below with
 * CUDA's names (open, close, buffers of cudaMalloc'd device memory,
 * stream-ordered copies, the module entry point), over gpu_common.c (op
 * validation, running ops with CUDA graphs) and gpu_encode.c (ops as
 * launches); kernels in kernels-cuda/ over kernels-common/.
 *
 * cudart is linked statically and finds the driver (libcuda.so.1) itself at
 * run time, so this module loads on machines without one: devices() then
 * returns 0 with the reason, and weft carries on with its other backends.
 * No CUDA failure aborts: each becomes a weft_status (weft_rt_err). */
#include <cuda_runtime_api.h>

#include "backends/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEFT_RT(x) cuda##x
#define WEFT_RT_OOM cudaErrorMemoryAllocation
#define WEFT_RT_NAME "cuda"
#define WEFT_RT_ATTR_MP cudaDevAttrMultiProcessorCount
#define WEFT_RT_HOST_ALLOC_MAPPED(pp, n) cudaHostAlloc(pp, n, cudaHostAllocMapped)
#define WEFT_RT_HOST_FREE(p) cudaFreeHost(p)
#include "backends/gpu/gpu_runtime.h"

static char devices_why[256];

static int weft_rt_devices(struct weft_device_info *infos, int max, const char **why)
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
        infos[i].mem_free = weft_rt_mem_free(i);
    }
    cudaSetDevice(prev);
    return n;
}

static weft_status weft_rt_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    struct weft_gpu *g;
    weft_status st = weft_rt_open_gpu(p, &g);
    *out = NULL;
    if (st != WEFT_OK) return st;
    g->graphs = weft_opt_flag(p->options, "cuda.graphs", true);
    *out = &g->base;
    return WEFT_OK;
}
