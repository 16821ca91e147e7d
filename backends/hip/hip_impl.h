/* HIP backend internals shared by its host files (hip_backend.c: devices,
 * buffers, open/close; hip_run.c: op encoding and the runtime hooks of the
 * shared GPU host code, backends/gpu/gpu_common.h).
 *
 * They build against AMD's HIP runtime, or against CUDA's through
 * kernels-hip/hip_to_cuda.h (WEFT_HIP_ON_CUDA). */
#ifndef WEFT_HIP_IMPL_H
#define WEFT_HIP_IMPL_H

#include "kernels-hip/hip_api.h"

#include "backends/backend.h"
#include "backends/gpu/gpu_common.h"
#include "kernels-hip/hip_kernels.h"

struct weft_hip_backend {
    struct weft_gpu gpu;     /* first: the shared state (device, scratch, graphs) */
    int warp;                /* wavefront size: 64 on CDNA, 32 on RDNA and NVIDIA */
    hipStream_t stream;
};

static inline struct weft_hip_backend *weft_hip_of(struct weft_gpu *g) { return (struct weft_hip_backend *)g; }

/* A failed HIP call as a weft_status: out-of-memory -> WEFT_ERR_NOMEM,
 * no device/driver -> WEFT_ERR_NO_DEVICE, anything else WEFT_ERR_DEVICE;
 * the message names `what` and the runtime's own words. Clears the
 * runtime's last error when it is not sticky. */
weft_status weft_hip_err(hipError_t e, const char *what);

/* The runtime's side of backends/gpu/gpu_common.c (hip_run.c). */
extern const struct weft_gpu_hooks weft_hip_hooks;

weft_status weft_hip_run(struct weft_backend *b, const struct weft_op *ops, size_t n);

#endif
