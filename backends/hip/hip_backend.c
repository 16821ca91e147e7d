/* HIP backend, host side: devices, open and close, and the module entry
 * point. Buffers (hipMalloc'd device memory, stream-ordered copies), op
 * validation and running ops (with graphs) are the shared GPU host code's:
 * backends/gpu/gpu_runtime.h instantiated below with HIP's names, over
 * backends/gpu/gpu_common.c and gpu_encode.c; kernels in kernels-hip/ over
 * kernels-common/.
 *
 * The module links libamdhip64. Where that library is absent, dlopen of
 * libweft-hip.so fails and `weft devices` says so; where it is present but
 * the ROCm kernel driver (/dev/kfd) or an AMD GPU is not, devices() returns
 * 0 with the reason. Either way weft carries on with its other backends.
 * No HIP failure aborts: each becomes a weft_status (weft_rt_err).
 *
 * Built with WEFT_HIP_ON_CUDA the same code runs on CUDA's runtime
 * (kernels-hip/hip_to_cuda.h): the backend is still "hip", on an NVIDIA GPU. */
#include "kernels-hip/hip_api.h"

#include "backends/backend.h"
#include "backends/module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WEFT_RT(x) hip##x
#define WEFT_RT_OOM hipErrorOutOfMemory
#define WEFT_RT_NAME "hip"
#define WEFT_RT_DEBUG_ENV "WEFT_HIP_DEBUG"
#include "backends/gpu/gpu_runtime.h"

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
    struct weft_gpu *g = (struct weft_gpu *)b;
    if (!g) return;
    hipSetDevice(g->device);
    if (g->stream) hipStreamSynchronize(weft_rt_stream(g));
    weft_gpu_release(g);
    if (g->err_host) hipHostFree(g->err_host);
    if (g->stream) hipStreamDestroy(weft_rt_stream(g));
    hipGetLastError();
    free(g);
}

static const struct weft_backend_iface hip_iface;

static weft_status hip_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess) return weft_rt_err(e, "counting devices");
    if (p->device < 0 || p->device >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "hip: no device %d (%d found)", p->device, n);
    if ((e = hipSetDevice(p->device)) != hipSuccess) return weft_rt_err(e, "selecting the device");
#ifndef WEFT_HIP_ON_CUDA
    hipDeviceProp_t prop;
    if ((e = hipGetDeviceProperties(&prop, p->device)) != hipSuccess) return weft_rt_err(e, "reading the device");
    if (!target_built(prop.gcnArchName))
        return weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: %.*s is not one of the targets this libweft-hip.so was built for (%s; "
                          "rebuild with -DWEFT_HIP_TARGETS=...)", p->device, (int)strcspn(prop.gcnArchName, ":"),
                          prop.gcnArchName, WEFT_HIP_TARGETS_STR);
#endif
    struct weft_gpu *g = calloc(1, sizeof *g);
    if (!g) return weft_error(WEFT_ERR_NOMEM, "hip: out of host memory");
    g->base.iface = &hip_iface;
    g->hooks = &weft_rt_hooks;
    g->device = p->device;
    /* Graphs: on by default in the nvcc build (as the CUDA backend); opt-in
     * (WEFT_HIP_GRAPHS=1) on ROCm, whose stream capture is younger */
    const char *graphs = getenv("WEFT_HIP_GRAPHS");
#ifdef WEFT_HIP_ON_CUDA
    g->graphs = !(graphs && !strcmp(graphs, "0"));
#else
    g->graphs = graphs && strcmp(graphs, "0") != 0;
#endif
    weft_status st = WEFT_OK;
    hipStream_t stream = NULL;
    int warp = 0;
    if ((e = hipStreamCreateWithFlags(&stream, hipStreamNonBlocking)) != hipSuccess) {
        st = weft_rt_err(e, "creating a stream");
        goto err;
    }
    g->stream = stream;
    if ((e = hipDeviceGetAttribute(&g->n_mp, hipDeviceAttributeMultiprocessorCount, p->device)) != hipSuccess ||
        (e = hipDeviceGetAttribute(&warp, hipDeviceAttributeWarpSize, p->device)) != hipSuccess) {
        st = weft_rt_err(e, "reading the compute-unit count and wavefront size");
        goto err;
    }
    if (warp < 32) {   /* kernels-common works in 32-lane groups inside one wavefront */
        st = weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: wavefront of %d lanes (weft's kernels need 32 or 64)",
                        p->device, warp);
        goto err;
    }
    if ((e = hipHostMalloc((void **)&g->err_host, sizeof(int), hipHostMallocMapped)) != hipSuccess ||
        (e = hipHostGetDevicePointer((void **)&g->err_dev, g->err_host, 0)) != hipSuccess) {
        st = weft_rt_err(e, "allocating the error word");
        goto err;
    }
    *g->err_host = 0;
    *out = &g->base;
    return WEFT_OK;
err:
    hip_close(&g->base);
    return st;
}

static const struct weft_backend_iface hip_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "hip",
    .devices = hip_devices,
    .open = hip_open,
    .close = hip_close,
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
        if (why) *why = "module ABI mismatch (rebuild libweft-hip.so with this weft)";
        return NULL;
    }
    weft_module_host_ = host;
    return &hip_iface;
}
