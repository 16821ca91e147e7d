/* HIP backend internals shared by its host files (hip_backend.c: devices,
 * buffers, supports; hip_run.c: op encoding, scratch, graphs).
 *
 * These files are backends/cuda's host side with HIP's names (the logic is
 * the same; see the lead's note on sharing one host layer). They build
 * against AMD's HIP runtime, or against CUDA's through
 * kernels-hip/hip_to_cuda.h (WEFT_HIP_ON_CUDA). */
#ifndef WEFT_HIP_IMPL_H
#define WEFT_HIP_IMPL_H

#include "kernels-hip/hip_api.h"

#include "backends/backend.h"
#include "kernels-hip/hip_kernels.h"

/* Device memory from hipMalloc (never managed memory). id is unique for
 * the process: a graph keyed on ids can never replay against a buffer that
 * was freed and whose address was reused. */
struct weft_buffer {
    struct weft_hip_backend *be;
    uint8_t *dev;
    size_t size;
    uint64_t id;
};

#define WEFT_HIP_N_GRAPHS 8  /* step graphs kept, least recently used replaced */

struct weft_hip_graph {
    uint64_t *key;           /* the step's launch description (hip_run.c) */
    size_t key_len;
    unsigned seen;           /* times this key was run */
    uint64_t last_use;
    hipGraphExec_t exec;     /* NULL until captured (second sighting) */
};

struct weft_hip_backend {
    struct weft_backend base;
    int device;
    int n_cu;                /* compute units (multiprocessors on NVIDIA) */
    int warp;                /* wavefront size: 64 on CDNA, 32 on RDNA and NVIDIA */
    hipStream_t stream;
    uint8_t *scratch;        /* per-op temporaries; ops run in order, so one suffices */
    size_t scratch_size;
    int *err_host, *err_dev; /* mapped pinned word kernels set on bad input */
    bool graphs;             /* WEFT_HIP_GRAPHS=1 turns capture on (hip_backend.c) */
    struct weft_hip_graph graph[WEFT_HIP_N_GRAPHS];
    uint64_t use_clock;
    uint64_t *key_tmp;       /* scratch for building a key */
    size_t key_cap;
    uint64_t n_graph_launches, n_captures;  /* for tests and debugging */
};

/* A failed HIP call as a weft_status: out-of-memory -> WEFT_ERR_NOMEM,
 * no device/driver -> WEFT_ERR_NO_DEVICE, anything else WEFT_ERR_DEVICE;
 * the message names `what` and the runtime's own words. Clears the
 * runtime's last error when it is not sticky. */
weft_status weft_hip_err(hipError_t e, const char *what);

weft_status weft_hip_run(struct weft_backend *b, const struct weft_op *ops, size_t n);
void weft_hip_graphs_clear(struct weft_hip_backend *be);

#endif
