/* CUDA backend internals shared by its host files (cuda_backend.c: devices,
 * buffers, supports; cuda_run.c: op encoding, scratch, CUDA graphs). */
#ifndef WEFT_CUDA_IMPL_H
#define WEFT_CUDA_IMPL_H

#include <cuda_runtime_api.h>

#include "backends/backend.h"
#include "kernels-cuda/cuda_kernels.h"

/* Device memory from cudaMalloc (never managed memory). id is unique for
 * the process: a graph keyed on ids can never replay against a buffer that
 * was freed and whose address was reused. */
struct weft_buffer {
    struct weft_cuda_backend *be;
    uint8_t *dev;
    size_t size;
    uint64_t id;
};

#define WEFT_CUDA_GRAPHS 8   /* step graphs kept, least recently used replaced */

struct weft_cuda_graph {
    uint64_t *key;           /* the step's launch description (cuda_run.c) */
    size_t key_len;
    unsigned seen;           /* times this key was run */
    uint64_t last_use;
    cudaGraphExec_t exec;    /* NULL until captured (second sighting) */
};

struct weft_cuda_backend {
    struct weft_backend base;
    int device;
    int n_sm;
    cudaStream_t stream;
    uint8_t *scratch;        /* per-op temporaries; ops run in order, so one suffices */
    size_t scratch_size;
    int *err_host, *err_dev; /* mapped pinned word kernels set on bad input */
    bool graphs;             /* WEFT_CUDA_GRAPHS=0 turns capture off */
    struct weft_cuda_graph graph[WEFT_CUDA_GRAPHS];
    uint64_t use_clock;
    uint64_t *key_tmp;       /* scratch for building a key */
    size_t key_cap;
    uint64_t n_graph_launches, n_captures;  /* for tests and debugging */
};

/* A failed CUDA call as a weft_status: out-of-memory -> WEFT_ERR_NOMEM,
 * no device/driver -> WEFT_ERR_NO_DEVICE, anything else WEFT_ERR_DEVICE;
 * the message names `what` and CUDA's own words. Clears CUDA's last error
 * when it is not sticky. */
weft_status weft_cuda_err(cudaError_t e, const char *what);

weft_status weft_cuda_run(struct weft_backend *b, const struct weft_op *ops, size_t n);
void weft_cuda_graphs_clear(struct weft_cuda_backend *be);

#endif
