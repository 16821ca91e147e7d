/* CUDA backend internals shared by its host files (cuda_backend.c: devices,
 * buffers, open/close; cuda_run.c: op encoding and the runtime hooks of the
 * shared GPU host code, backends/gpu/gpu_common.h). */
#ifndef WEFT_CUDA_IMPL_H
#define WEFT_CUDA_IMPL_H

#include <cuda_runtime_api.h>

#include "backends/backend.h"
#include "backends/gpu/gpu_common.h"
#include "kernels-cuda/cuda_kernels.h"

struct weft_cuda_backend {
    struct weft_gpu gpu;     /* first: the shared state (device, scratch, graphs) */
    cudaStream_t stream;
};

static inline struct weft_cuda_backend *weft_cuda_of(struct weft_gpu *g) { return (struct weft_cuda_backend *)g; }

/* A failed CUDA call as a weft_status: out-of-memory -> WEFT_ERR_NOMEM,
 * no device/driver -> WEFT_ERR_NO_DEVICE, anything else WEFT_ERR_DEVICE;
 * the message names `what` and CUDA's own words. Clears CUDA's last error
 * when it is not sticky. */
weft_status weft_cuda_err(cudaError_t e, const char *what);

/* The runtime's side of backends/gpu/gpu_common.c (cuda_run.c). */
extern const struct weft_gpu_hooks weft_cuda_hooks;

weft_status weft_cuda_run(struct weft_backend *b, const struct weft_op *ops, size_t n);

#endif
