/* The OpenCL backend's internals (libweft-opencl.so, over the ICD loader).
 *
 * One context and one in-order queue per opened device: every op, copy and
 * write is queued in order, so a step's ops run without host round trips
 * and a buffer freed while ops that use it are queued stays alive
 * (OpenCL keeps a released cl_mem until the commands using it finish).
 * Buffers up to OCL_SUB_MAX bytes are carved from shared arenas (one cl_mem
 * each), larger ones get their own cl_mem; kernels take every buffer as a
 * (cl_mem, byte offset) pair, so both look the same to them.
 *
 * The kernels (the .cl files in backends/opencl/kernels/, embedded at build time) are
 * built once per device at open and kept in the cache folder as the
 * driver's binary (ocl_program.c). */
#ifndef WEFT_OCL_INTERNAL_H
#define WEFT_OCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001  /* cl_khr_icd: the loader found no platform */
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

#define OCL_SUB_MAX (256u << 10)     /* buffers up to this size share an arena */
#define OCL_ARENA_BYTES (4u << 20)   /* one arena */
#define OCL_SHADOW_MAX (1u << 20)    /* host copies kept of buffers this small (the forward pass's
                                      * metadata: RoPE's positions, read without a round trip) */

enum ocl_kernel {
    OK_EMBED, OK_RMSNORM, OK_LOGITS_NORM, OK_SILU_MUL, OK_ADD, OK_MM_VEC, OK_MM_TILE, OK_ROPE_KV, OK_ATTENTION,
    OK_MM_EXACT_F, OK_QUANT_ACT, OK_MM_EXACT_Q, OK_MM_EXACT_Q4, OK_SOFTCAP,
    OK_MOE_ROUTE, OK_MOE_SORT, OK_MM_ID_VEC, OK_MM_ID_TILE, OK_MM_ID_EXACT_F, OK_MM_ID_EXACT_Q, OK_MOE_SUM,
    OK_REC_INDEX, OK_SSM_CONV, OK_DELTA_NET, OK_COUNT_
};

/* the work-group size (items) each kernel is launched with (ocl_ops.c); DELTA_NET's is its
 * head_dim, which supports() holds to the kernel's own limit (ocl_backend.dn_wg) */
static const int ocl_kernel_wg[OK_COUNT_] = {
    [OK_EMBED] = 64, [OK_RMSNORM] = 64, [OK_LOGITS_NORM] = 64, [OK_SILU_MUL] = 64, [OK_ADD] = 64, [OK_MM_VEC] = 64,
    [OK_MM_TILE] = 256, [OK_ROPE_KV] = 64, [OK_ATTENTION] = 64, [OK_MM_EXACT_F] = 64, [OK_QUANT_ACT] = 64,
    [OK_MM_EXACT_Q] = 64, [OK_MM_EXACT_Q4] = 64, [OK_SOFTCAP] = 64, [OK_MOE_ROUTE] = 64, [OK_MOE_SORT] = 256,
    [OK_MM_ID_VEC] = 64, [OK_MM_ID_TILE] = 256, [OK_MM_ID_EXACT_F] = 64, [OK_MM_ID_EXACT_Q] = 64, [OK_MOE_SUM] = 64,
    [OK_REC_INDEX] = 256, [OK_SSM_CONV] = 64, [OK_DELTA_NET] = 1,
};

#define OCL_MAX_EXPERTS 512          /* MOE_ROUTE's and MATMUL_ID's n_expert at most (moe.cl's MOE_MAX_E:
                                      * the sort's local counts, the route's taken bits) */
#define OCL_REC_MAX_K 64             /* SSM_CONV's taps at most (recurrent.cl's REC_MAX_K) */
#define OCL_DN_MAX_S 256             /* DELTA_NET's head_dim at most (recurrent.cl's DN_MAX_S) */

struct ocl_arena {
    cl_mem mem;
    size_t used;             /* bump pointer */
    unsigned live;           /* buffers carved from it and not freed */
    struct ocl_arena *next;
};

struct weft_buffer {
    struct ocl_backend *ob;
    cl_mem mem;              /* the arena's, or its own */
    size_t off, size;
    struct ocl_arena *arena; /* NULL: owns mem */
    uint8_t *shadow;         /* small buffers: what buffer_write put there (NULL: none) */
    bool shadow_ok;          /* no op or copy has written it since (or a write covered it all) */
    uint64_t id, gen;        /* unique per backend; bumped by every write to it */
};

/* freq_factors known on the host: from which buffer (id, gen) and offset,
 * how many, their values */
struct ocl_ff_entry {
    uint64_t id, gen;
    size_t off;
    uint32_t n;
    float *vals;
};
#define OCL_FF_ENTRIES 256

struct ocl_backend {
    struct weft_backend base;
    int index;               /* opencl:N */
    cl_platform_id platform;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    cl_kernel k[OK_COUNT_];
    cl_mem err;              /* int: input errors the kernels met */
    struct ocl_arena *arenas;
    cl_ulong max_alloc;      /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    size_t max_wg;           /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    bool fp64;               /* the kernels sum RMSNORM and the F16 dot tail in double */
    bool exact;              /* opencl.exact (default: on CPU-type devices): the matmul forms that
                              * equal the CPU backend bit for bit */
    cl_mem scratch;          /* LOGITS' normalised rows */
    size_t scratch_size;
    cl_mem act;              /* the exact forms' quantized activations */
    size_t act_size;
    /* MATMUL_ID: the step's slots sorted by expert (moe.cl's moe_sort layout) and the ids
     * they were sorted from (buffer id, gen, offset, stride, rows, k, n_expert: the three
     * MATMUL_IDs after one MOE_ROUTE sort once); the weighted form's per-slot outputs */
    cl_mem moe_idx;
    size_t moe_idx_size;
    uint64_t moe_key_id, moe_key_gen;
    size_t moe_key_off, moe_key_nb1;
    int64_t moe_key_rows, moe_key_k, moe_key_e;
    bool moe_key_ok;
    cl_mem moe_y;
    size_t moe_y_size;
    /* SSM_CONV and DELTA_NET: the sequences of a slots vector (recurrent.cl's rec_index layout)
     * and what they were found from (buffer id, gen, offset, rows, slots in the state: a
     * layer's two ops, and every recurrent layer of a step, share one list) */
    cl_mem rec_idx;
    size_t rec_idx_size;
    uint64_t rec_key_id, rec_key_gen;
    size_t rec_key_off;
    int64_t rec_key_rows, rec_key_slots;
    bool rec_key_ok;
    size_t dn_wg;            /* the delta_net kernel's most work-items per group (its head_dim at most) */
    /* the RoPE table (cos/sin per position from base/rope.h's
     * weft_rope_cos_sin_ext) and every ROPE_KV field it was made with:
     * its key */
    cl_mem rope_tab;
    uint32_t rope_rows, rope_n_rot;
    float rope_base, rope_scale;
    bool rope_has_ff;
    float *rope_ff;          /* the n_rot/2 freq_factors it divided by (has_ff) */
    float rope_ext, rope_attn, rope_corr[2];
    /* the freq_factors read from the device (a model places a copy per
     * layer: one entry each), so a step reads none of them again */
    struct ocl_ff_entry *ff;
    uint32_t ff_len, ff_next;  /* entries held; the one replaced next when full */
    cl_mem gelu_tab;         /* GeGLU's table: every F16 value's GeLU-tanh as F16 (made at first use) */
    /* the largest position last read back from the device: for which
     * buffer (id, gen), offset and row count */
    uint64_t pos_id, pos_gen;
    size_t pos_off;
    uint32_t pos_n;
    int32_t pos_max;
    uint64_t next_buffer_id;
    char cache_dir[512];
    char name[128];
    bool program_from_cache; /* for tests: the program came from the cache folder */
};

/* A failed OpenCL call as a weft_status naming what was being done. */
weft_status ocl_err(cl_int e, const char *what);
/* Build (or load from the cache folder) the program and its kernels. */
weft_status ocl_program_build(struct ocl_backend *ob);

/* ops (ocl_ops.c) */
bool ocl_supports(struct weft_backend *b, const struct weft_op *op);
weft_status ocl_run(struct weft_backend *b, const struct weft_op *ops, size_t n);

/* kernel arguments, set in order; the first failure is kept in e */
struct args {
    cl_kernel k;
    cl_uint i;
    cl_int e;
};

static inline void a_set(struct args *a, size_t n, const void *v)
{
    if (a->e == CL_SUCCESS) a->e = clSetKernelArg(a->k, a->i, n, v);
    a->i++;
}
static inline void a_mem(struct args *a, cl_mem m) { a_set(a, sizeof m, &m); }
static inline void a_u64(struct args *a, uint64_t v) { cl_ulong x = v; a_set(a, sizeof x, &x); }
static inline void a_i32(struct args *a, int64_t v) { cl_int x = (cl_int)v; a_set(a, sizeof x, &x); }
static inline void a_f32(struct args *a, float v) { a_set(a, sizeof v, &v); }
/* a view: its buffer, its byte offset in that buffer's cl_mem */
static inline void a_buf(struct args *a, const struct weft_view *v)
{
    a_mem(a, v->buf->mem);
    a_u64(a, v->buf->off + v->offset);
}
/* an F32 view with its row stride in floats */
static inline void a_f32v(struct args *a, const struct weft_view *v)
{
    a_buf(a, v);
    a_u64(a, v->nb1 / 4);
}
/* MATMUL's bias (NULL: none; out stands in as an unread argument) */
static inline void a_bias(struct args *a, const struct weft_view *bias, const struct weft_view *out)
{
    a_buf(a, bias ? bias : out);
    a_i32(a, bias != NULL);
}
static inline size_t ocl_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Queue a's kernel over gsz (lsz per group; nothing when a size is 0). */
weft_status ocl_launch(struct ocl_backend *ob, struct args *a, const char *what, cl_uint dims, const size_t *gsz,
                       const size_t *lsz);
/* *m holds at least need bytes (a new cl_mem when it grows: one released
 * stays alive for the queued ops that use it) */
weft_status ocl_grow(struct ocl_backend *ob, cl_mem *m, size_t *size, size_t need, const char *what);
/* The 32-element quants the exact forms dot against quantized activations */
static inline bool ocl_exact_q(enum weft_type t)
{
    return t == WEFT_TYPE_Q4_0 || t == WEFT_TYPE_Q4_1 || t == WEFT_TYPE_Q5_0 || t == WEFT_TYPE_Q5_1 ||
           t == WEFT_TYPE_Q8_0 || t == WEFT_TYPE_IQ4_NL || t == WEFT_TYPE_MXFP4;
}
/* x's rows quantized into ob->act as the exact forms take them (Q8_1 for
 * the types with a min, Q8_0 for the others) */
weft_status ocl_quant_act(struct ocl_backend *ob, enum weft_type wt, const struct weft_view *x, int64_t M);
/* The I32 values of v when the buffer's host copy is current, else NULL */
static inline const int32_t *ocl_host_i32(const struct weft_view *v)
{
    return v->buf->shadow && v->buf->shadow_ok ? (const int32_t *)(v->buf->shadow + v->offset) : NULL;
}

/* the recurrent layers' ops, api 9 (ocl_recurrent.c) */
weft_status ocl_ssm_conv(struct ocl_backend *ob, const struct weft_op_ssm_conv *o);
weft_status ocl_delta_net(struct ocl_backend *ob, const struct weft_op_delta_net *o);

/* mixtures of experts (ocl_moe.c) */
weft_status ocl_moe_route(struct ocl_backend *ob, const struct weft_op_moe_route *o);
weft_status ocl_matmul_id(struct ocl_backend *ob, const struct weft_op_matmul_id *o);

/* buffers (ocl_mem.c) */
weft_status ocl_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out);
void ocl_buffer_free(struct weft_buffer *buf);
weft_status ocl_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n);
weft_status ocl_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n);
weft_status ocl_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff, size_t n);
void ocl_arenas_free(struct ocl_backend *ob);
/* a buffer an op or copy writes: its host copy no longer says what it holds */
static inline void ocl_dirty(struct weft_buffer *b)
{
    if (b) {
        b->shadow_ok = false;
        b->gen++;
    }
}

/* the kernels' source (generated from the kernels/ folder) */
extern const char weft_ocl_source[];
extern const size_t weft_ocl_source_len;

#endif
