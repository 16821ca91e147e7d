/* HIP backend, host side: devices, buffers (hipMalloc'd device memory,
 * stream-ordered copies), and the module entry point. Op validation and
 * running ops (with graphs) are the shared GPU host code's
 * (backends/gpu/gpu_common.c) over hip_run.c's hooks; kernels in kernels-hip/.
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
    hipSetDevice(be->gpu.device);
    if (be->stream) hipStreamSynchronize(be->stream);
    weft_gpu_release(&be->gpu);
    if (be->gpu.err_host) hipHostFree(be->gpu.err_host);
    if (be->stream) hipStreamDestroy(be->stream);
    hipGetLastError();
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
    be->gpu.base.iface = &hip_iface;
    be->gpu.hooks = &weft_hip_hooks;
    be->gpu.device = p->device;
    /* Graphs: on by default in the nvcc build (as the CUDA backend); opt-in
     * (WEFT_HIP_GRAPHS=1) on ROCm, whose stream capture is younger */
    const char *g = getenv("WEFT_HIP_GRAPHS");
#ifdef WEFT_HIP_ON_CUDA
    be->gpu.graphs = !(g && !strcmp(g, "0"));
#else
    be->gpu.graphs = g && strcmp(g, "0") != 0;
#endif
    weft_status st = WEFT_OK;
    if ((e = hipStreamCreateWithFlags(&be->stream, hipStreamNonBlocking)) != hipSuccess) {
        st = weft_hip_err(e, "creating a stream");
        goto err;
    }
    if ((e = hipDeviceGetAttribute(&be->gpu.n_mp, hipDeviceAttributeMultiprocessorCount, p->device)) != hipSuccess ||
        (e = hipDeviceGetAttribute(&be->warp, hipDeviceAttributeWarpSize, p->device)) != hipSuccess) {
        st = weft_hip_err(e, "reading the compute-unit count and wavefront size");
        goto err;
    }
    if (be->warp < 32) {   /* kernels-common works in 32-lane groups inside one wavefront */
        st = weft_error(WEFT_ERR_NO_DEVICE, "hip:%d: wavefront of %d lanes (weft's kernels need 32 or 64)",
                        p->device, be->warp);
        goto err;
    }
    if ((e = hipHostMalloc((void **)&be->gpu.err_host, sizeof(int), hipHostMallocMapped)) != hipSuccess ||
        (e = hipHostGetDevicePointer((void **)&be->gpu.err_dev, be->gpu.err_host, 0)) != hipSuccess) {
        st = weft_hip_err(e, "allocating the error word");
        goto err;
    }
    *be->gpu.err_host = 0;
    *out = &be->gpu.base;
    return WEFT_OK;
err:
    hip_close(&be->gpu.base);
    return st;
}

static weft_status hip_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    struct weft_hip_backend *be = (struct weft_hip_backend *)b;
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "hip: out of host memory");
    hipSetDevice(be->gpu.device);
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
                              be->gpu.device, size, fr, tot);
        return weft_hip_err(e, "allocating a buffer");
    }
    if ((e = hipMemsetAsync(buf->dev, 0, asz, be->stream)) != hipSuccess) {
        hipFree(buf->dev);
        free(buf);
        return weft_hip_err(e, "clearing a new buffer");
    }
    buf->gpu = &be->gpu;
    buf->size = size;
    buf->id = weft_gpu_next_buffer_id();
    *out = buf;
    return WEFT_OK;
}

static void hip_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    hipSetDevice(buf->gpu->device);
    hipStreamSynchronize(weft_hip_of(buf->gpu)->stream);  /* no queued op may still use it */
    hipFree(buf->dev);
    hipGetLastError();
    free(buf);
}

/* Copies are queued on the backend's stream, so they are ordered with the
 * ops around them; write and read return once the host memory is done with. */
static weft_status hip_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    weft_status st = weft_gpu_range(buf, off, n, "write");
    if (st != WEFT_OK || n == 0) return st;
    struct weft_hip_backend *be = weft_hip_of(buf->gpu);
    hipSetDevice(be->gpu.device);
    hipError_t e = hipMemcpyAsync(buf->dev + off, src, n, hipMemcpyHostToDevice, be->stream);
    if (e == hipSuccess) e = hipStreamSynchronize(be->stream);
    return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "writing a buffer");
}

static weft_status hip_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    weft_status st = weft_gpu_range(buf, off, n, "read");
    if (st != WEFT_OK || n == 0) return st;
    struct weft_hip_backend *be = weft_hip_of(buf->gpu);
    hipSetDevice(be->gpu.device);
    hipError_t e = hipMemcpyAsync(dst, buf->dev + off, n, hipMemcpyDeviceToHost, be->stream);
    if (e == hipSuccess) e = hipStreamSynchronize(be->stream);
    return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "reading a buffer");
}

static weft_status hip_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff,
                                    size_t n)
{
    if (!weft_gpu_in_range(dst, doff, n) || !weft_gpu_in_range(src, soff, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "hip: copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    struct weft_hip_backend *be = weft_hip_of(dst->gpu);
    hipSetDevice(be->gpu.device);
    hipError_t e = hipMemcpyAsync(dst->dev + doff, src->dev + soff, n, hipMemcpyDeviceToDevice, be->stream);
    return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "copying between buffers");
}

/* Waits for everything queued, then reports bad input the kernels met. */
static weft_status hip_sync(struct weft_backend *b)
{
    struct weft_hip_backend *be = (struct weft_hip_backend *)b;
    hipSetDevice(be->gpu.device);
    hipError_t e = hipStreamSynchronize(be->stream);
    if (e != hipSuccess) return weft_hip_err(e, "running the op list");
    return weft_gpu_take_input_error(&be->gpu);
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
    .supports = weft_gpu_supports,
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
