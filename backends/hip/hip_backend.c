/* HIP backend, host side: what only HIP has to say (how devices are named,
 * which targets the kernels were built for, wavefront sizes, graphs opt-in
 * on ROCm). Everything else is the GPU host code shared with the CUDA
 * backend: backends/gpu/gpu_runtime.h instantiated below with HIP's names
 * (open, close, buffers of hipMalloc'd device memory, stream-ordered
 * copies, the module entry point), over gpu_common.c (op validation,
 * running ops with graphs) and gpu_encode.c (ops as launches); kernels in
 * kernels-hip/ over kernels-common/.
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WEFT_RT(x) hip##x
#define WEFT_RT_OOM hipErrorOutOfMemory
#define WEFT_RT_NAME "hip"
#define WEFT_RT_ATTR_MP hipDeviceAttributeMultiprocessorCount
#define WEFT_RT_HOST_ALLOC_MAPPED(pp, n) hipHostMalloc(pp, n, hipHostMallocMapped)
#define WEFT_RT_HOST_FREE(p) hipHostFree(p)
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

static int weft_rt_devices(struct weft_device_info *infos, int max, const char **why)
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
        infos[i].mem_free = weft_rt_mem_free(i);
    }
    hipSetDevice(prev);
    return n;
}

/* What the devices must have beyond weft_rt_open_gpu's: kernels built for
 * the target (AMD) and wavefronts of at least 32 lanes. */
static weft_status hip_check_device(int device)
{
#ifndef WEFT_HIP_ON_CUDA
    hipDeviceProp_t prop;
    hipError_t e = hipGetDeviceProperties(&prop, device);
    if (e != hipSuccess) return weft_rt_err(e, "reading the device");
    if (!target_built(prop.gcnArchName))
        return weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: %.*s is not one of the targets this libweft-hip.so was built for (%s; "
                          "rebuild with -DWEFT_HIP_TARGETS=...)", device, (int)strcspn(prop.gcnArchName, ":"),
                          prop.gcnArchName, WEFT_HIP_TARGETS_STR);
#endif
    int warp = 0;
    hipError_t w = hipDeviceGetAttribute(&warp, hipDeviceAttributeWarpSize, device);
    if (w != hipSuccess) return weft_rt_err(w, "reading the wavefront size");
    if (warp < 32)   /* kernels-common works in 32-lane groups inside one wavefront */
        return weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: wavefront of %d lanes (weft's kernels need 32 or 64)", device,
                          warp);
    return WEFT_OK;
}

static weft_status weft_rt_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    struct weft_gpu *g;
    weft_status st = weft_rt_open_gpu(p, &g);
    *out = NULL;
    if (st != WEFT_OK) return st;
    if ((st = hip_check_device(p->device)) != WEFT_OK) {
        weft_rt_close(&g->base);
        return st;
    }
    /* Graphs: on by default in the nvcc build (as the CUDA backend); opt-in
     * (hip.graphs=1, WEFT_HIP_GRAPHS) on ROCm, whose stream capture is younger */
#ifdef WEFT_HIP_ON_CUDA
    g->graphs = weft_opt_flag(p->options, "hip.graphs", true);
#else
    g->graphs = weft_opt_flag(p->options, "hip.graphs", false);
#endif
    *out = &g->base;
    return WEFT_OK;
}
