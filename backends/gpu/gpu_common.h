/* What the CUDA and HIP backends share on the host: buffers as the shared
 * code sees them, op validation (supports), per-op scratch, and running an
 * op list with step graphs (keys, an LRU table, capture on the second
 * sighting). The runtime calls come in as a struct weft_gpu_hooks; this
 * code never names a vendor function. The rest of the shared host code:
 * gpu_encode.c (each op as launches of kernels-common/launch.h) and
 * gpu_runtime.h (the runtime calls and hooks, written once for both
 * runtimes' names), so a backend keeps only devices, open and close.
 *
 * Compiled into each GPU module (backends/cuda, backends/hip), not into
 * weft_core. Runtime error codes travel as int, 0 meaning success
 * (cudaSuccess and hipSuccess are both 0). */
#ifndef WEFT_GPU_COMMON_H
#define WEFT_GPU_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

struct weft_gpu;
struct weft_gk_moe_route;   /* kernels-common/launch.h */
struct weft_gk_mmid;
struct weft_gk_ssm_conv;
struct weft_gk_delta_net;
struct weft_gk_rope_ext;

/* Device memory from the runtime's malloc (never managed memory). id is
 * unique for the process: a graph keyed on ids can never replay against a
 * buffer that was freed and whose address was reused. */
struct weft_buffer {
    struct weft_gpu *gpu;    /* the backend that owns it */
    uint8_t *dev;
    size_t size;
    uint64_t id;
};

/* The vendor's side. Every slot is required but glu and embed_scaled (api 5),
 * swiglu_oai, moe_route, matmul_id_scratch and matmul_id (api 7), ssm_conv and
 * delta_net (api 9), and add_scaled and rope_q (api 10). */
struct weft_gpu_hooks {
    const char *name;        /* "cuda": starts error messages */
    int err_oom;             /* the runtime's out-of-memory code */
    int err_invalid;         /* its invalid-value code */

    /* The kernels' shape queries (weft_gk_* of kernels-common/launch.h). */
    int (*type_ok)(int wt);  /* weight types the matmul takes */
    size_t (*matmul_scratch)(int wt, int64_t K, int64_t R);
    int (*attn_splits)(int64_t n_rows, int n_head, int n_mp);
    size_t (*attention_scratch)(int64_t n_rows, int n_head, int hd, int n_split);

    /* Runtime errors: as a weft_status with a message naming `what`
     * (clears the runtime's last error unless sticky); the runtime's words
     * for e; clear the runtime's last error. */
    weft_status (*error)(int e, const char *what);
    const char *(*error_str)(int e);
    void (*clear_error)(void);

    /* Wait for the backend's stream; device memory for scratch. */
    int (*stream_sync)(struct weft_gpu *g);
    int (*dev_alloc)(struct weft_gpu *g, size_t n, void **out);
    void (*dev_free)(struct weft_gpu *g, void *p);
    /* Enqueue a device-to-device copy of n bytes on the stream. */
    int (*copy)(struct weft_gpu *g, void *dst, const void *src, size_t n);

    /* Enqueue one op (already accepted by weft_gpu_supports) on the stream:
     * weft_gpu_encode for the real backends. */
    int (*encode)(struct weft_gpu *g, const struct weft_op *op);

    /* The launchers of api 5's op fields (kernels-common/launch.h), which
     * weft_gpu_encode reaches through here (the ops at those fields' zero
     * values take the plain launchers): SILU_MUL with act != SiLU
     * (weft_gk_glu) and EMBED with scale != 0 (weft_gk_embed_scaled). NULL:
     * the runtime has none, and weft_gpu_supports refuses those ops. */
    int (*glu)(int act, const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
               int64_t R, int64_t K, void *stream);
    int (*embed_scaled)(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                        int64_t R, float scale, float *out, size_t out_ld, int *err, void *stream);

    /* api 7's launchers, reached the same way: SILU_MUL with act SWIGLU_OAI
     * (weft_gk_swiglu_oai), MOE_ROUTE (weft_gk_moe_route), MATMUL_ID
     * (weft_gk_matmul_id, its scratch from weft_gk_matmul_id_scratch). NULL: the
     * runtime has none, and weft_gpu_supports refuses those ops. */
    int (*swiglu_oai)(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                      int64_t R, int64_t K, float alpha, float limit, void *stream);
    int (*moe_route)(const struct weft_gk_moe_route *a, void *stream);
    size_t (*matmul_id_scratch)(int wt, int64_t K, int64_t N, int E, int64_t R, int k, int x_per_slot,
                                int weighted);
    int (*matmul_id)(const struct weft_gk_mmid *m, void *scratch, void *stream);

    /* api 9's launchers, reached the same way: SSM_CONV (weft_gk_ssm_conv) and DELTA_NET
     * (weft_gk_delta_net); SILU_MUL's SIGMOID goes to glu. NULL: the runtime has none, and
     * weft_gpu_supports refuses those ops. */
    int (*ssm_conv)(const struct weft_gk_ssm_conv *a, void *stream);
    int (*delta_net)(const struct weft_gk_delta_net *a, void *stream);

    /* api 10's launchers, reached the same way (the ops at the fields' zero values take the
     * plain launchers): ADD with scale != 0 (weft_gk_add_scaled) and ROPE_KV with q_only
     * (weft_gk_rope_q: q rotated, k, v and the cache never handed on). MOE_ROUTE's
     * expert_scale travels in struct weft_gk_moe_route (the moe_route hook). NULL: the
     * runtime has none, and weft_gpu_supports refuses those ops. */
    int (*add_scaled)(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                      int64_t R, int64_t K, float scale, void *stream);
    int (*rope_q)(float *q, size_t q_ld, const int32_t *pos, int64_t R, int n_head, int hd, int n_rot,
                  float theta_scale, float freq_scale, int neox, const struct weft_gk_rope_ext *ext, void *stream);

    /* Graphs: start capturing the stream; end the capture and, when the
     * launches in it succeeded (launched_ok) and so did the capture,
     * instantiate it into *exec (otherwise an error code, *exec NULL; the
     * captured graph itself is destroyed either way); launch an
     * instantiated graph on the stream; destroy one. */
    int (*capture_begin)(struct weft_gpu *g);
    int (*capture_end)(struct weft_gpu *g, bool launched_ok, void **exec);
    int (*graph_launch)(struct weft_gpu *g, void *exec);
    void (*graph_destroy)(void *exec);
};

#define WEFT_GPU_GRAPHS 8    /* step graphs kept, least recently used replaced */

struct weft_gpu_graph {
    uint64_t *key;           /* the step's launch description (gpu_common.c) */
    size_t key_len;
    unsigned seen;           /* times this key was run */
    uint64_t last_use;
    void *exec;              /* the runtime's instantiated graph; NULL until captured */
};

/* The state every GPU backend has; a vendor backend struct starts with it. */
struct weft_gpu {
    struct weft_backend base;
    const struct weft_gpu_hooks *hooks;
    int device;
    int n_mp;                /* multiprocessors: SMs on NVIDIA, compute units on AMD */
    void *stream;            /* the runtime's stream (cudaStream_t, hipStream_t) every op is queued on */
    uint8_t *scratch;        /* per-op temporaries; ops run in order, so one suffices */
    size_t scratch_size;
    int *err_host, *err_dev; /* mapped pinned word kernels set on bad input */
    bool graphs;             /* capture step graphs (each backend's open decides: <name>.graphs) */
    bool debug;              /* <name>.debug: say on stderr why graph capture was given up */
    struct weft_gpu_graph graph[WEFT_GPU_GRAPHS];
    uint64_t use_clock;
    uint64_t *key_tmp;       /* scratch for building a key */
    size_t key_cap;
    uint64_t n_graph_launches, n_captures;  /* for tests and debugging */
};

/* ---- views as device addresses (for the hooks' encode) ---- */
static inline uint8_t *weft_gpu_ptr(const struct weft_view *v) { return v->buf->dev + v->offset; }
static inline const int32_t *weft_gpu_i32(const struct weft_view *v) { return (const int32_t *)weft_gpu_ptr(v); }
static inline float *weft_gpu_f32(const struct weft_view *v) { return (float *)weft_gpu_ptr(v); }
static inline size_t weft_gpu_ld(const struct weft_view *v) { return v->nb1 / sizeof(float); }

static inline size_t weft_gpu_align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* How many context splits an attention op runs with (shapes only). */
int weft_gpu_attn_splits(const struct weft_gpu *g, const struct weft_op_attention *o);
/* LOGITS' scratch: the normalised rows first, this many bytes, then the matmul's. */
size_t weft_gpu_logits_norm_bytes(const struct weft_op_logits *o);

/* A process-wide unique buffer id (never 0). */
uint64_t weft_gpu_next_buffer_id(void);

/* WEFT_OK when [off, off+n) lies inside buf; else WEFT_ERR_INVALID_ARG
 * with "NAME: VERB [off, +n) outside buffer of SIZE". */
weft_status weft_gpu_range(const struct weft_buffer *buf, size_t off, size_t n, const char *verb);
bool weft_gpu_in_range(const struct weft_buffer *buf, size_t off, size_t n);

/* The iface's supports: kind, types, shapes and alignment the kernels take. */
bool weft_gpu_supports(struct weft_backend *b, const struct weft_op *op);

/* The iface's run, once the backend has selected its device: grows scratch
 * to what the ops need, then runs them eagerly or through a step graph.
 * On failure nothing after the failing op was enqueued. */
weft_status weft_gpu_run(struct weft_gpu *g, const struct weft_op *ops, size_t n);

/* After the stream is idle: the input error the kernels reported in
 * *err_host since the last call (cleared), as WEFT_ERR_INVALID_ARG, or WEFT_OK. */
weft_status weft_gpu_take_input_error(struct weft_gpu *g);

/* Enqueue one op as kernel launches on g's stream (gpu_encode.c); the
 * runtime's error code, 0 on success. */
int weft_gpu_encode(struct weft_gpu *g, const struct weft_op *op);

/* Destroy every graph (they hold scratch's and buffers' addresses). */
void weft_gpu_graphs_clear(struct weft_gpu *g);
/* Free what the shared code allocated (graphs, scratch, the key buffer);
 * the stream must be idle. The backend frees its own runtime objects. */
void weft_gpu_release(struct weft_gpu *g);

#endif
