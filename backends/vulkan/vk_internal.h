/* Vulkan backend internals shared by its .c files (not a public header).
 *
 * Contract between the backend's runtime (device, memory, pipelines, command
 * recording: vk_backend.c, vk_pipeline.c, vk_cmd.c ...) and its op files
 * (vk_ops_*.c, vk_matmul.c):
 *
 *  - Shaders are shaders/NAME.comp, compiled by glslc at build time and
 *    embedded in the module. A shader may declare variants on a line
 *      // variants: q4_0:-DTYPE_Q4_0 q4_1:-DTYPE_Q4_1,-DOTHER=1 ...
 *    each compiled as pipeline "NAME_VARIANT" (commas separate defines);
 *    without that line the pipeline is "NAME".
 *  - Every storage buffer binding of a dispatch is bound as a whole buffer
 *    (offset 0): set 0, bindings 0..n_bind-1, in the order of `binds`. A
 *    shader gets its offsets (in elements of the type it reads) from push
 *    constants, so no view offset ever meets an alignment rule.
 *  - Push constants: at most 128 bytes, one struct per shader.
 *  - Specialization constants 0..3 (uint) are the op file's to use (workgroup
 *    size, subgroup size, ...).
 *  - vk_dispatch records into the step being built; the runtime inserts the
 *    barriers the declared byte ranges need (read-after-write,
 *    write-after-read, write-after-write) and no others.
 *  - Errors: weft_error(...) and return a weft_status; never abort. */
#ifndef WEFT_VK_INTERNAL_H
#define WEFT_VK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

struct vk_backend;   /* the device: struct weft_backend + Vulkan state */
struct vk_pipeline;  /* opaque, owned and cached by the backend */

/* What the device offers, read once at open. */
struct vk_caps {
    uint32_t subgroup_size;        /* 0 if unknown */
    bool subgroup_arith;           /* subgroupAdd etc. in compute shaders */
    bool subgroup_shuffle;
    bool fp16_arith;               /* shaderFloat16 */
    bool storage16;                /* storageBuffer16BitAccess */
    bool storage8;                 /* storageBuffer8BitAccess */
    bool int8_arith;               /* shaderInt8 */
    bool unified_memory;           /* device-local memory is host-visible */
    bool cpu_device;               /* VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe): few, big workgroups pay */
    bool fp64;                     /* shaderFloat64 (the exact RMS norms sum in double, as the CPU) */
    uint32_t max_workgroup_invocations;
    uint32_t max_workgroup_count[3];
    uint32_t max_shared_bytes;
    uint64_t max_storage_range;    /* maxStorageBufferRange */
};
const struct vk_caps *vk_get_caps(const struct vk_backend *vb);
/* the vulkan.mv_nr option (0: not set) and vulkan.matvec_tree */
uint32_t vk_opt_mv_nr(const struct vk_backend *vb);
bool vk_opt_matvec_tree(const struct vk_backend *vb);

/* Element-wise ops, norms, RoPE and attention bit for bit as the CPU
 * backend's (shaders' EXACT variants): on CPU-type devices with shaderFloat64
 * (lavapipe), whose float arithmetic is IEEE step for step; a GPU keeps the
 * faster forms. vulkan.exact=0|1 overrides (tests). */
bool vk_exact_ops(const struct vk_backend *vb);

/* The pipeline for embedded shader `name` ("mul_mat_vec_q4_0"), created on
 * first use and cached (also across runs, by the on-disk pipeline cache).
 * spec: n_spec uint32 specialization constants (ids 0..n_spec-1), part of the
 * cache key. NULL (with weft_error set) if the shader is unknown or creation
 * fails. */
struct vk_pipeline *vk_pipeline_get(struct vk_backend *vb, const char *name, uint32_t n_bind,
                                    uint32_t push_bytes, const uint32_t *spec, uint32_t n_spec);

/* One storage buffer a dispatch uses, and the byte range it reads or writes
 * there (for hazard tracking; the whole buffer is bound). */
struct vk_bind {
    struct weft_buffer *buf;
    size_t offset, size;
    bool write;
};

/* Record a dispatch of p with these bindings and push constants. */
weft_status vk_dispatch(struct vk_backend *vb, struct vk_pipeline *p, const struct vk_bind *binds,
                        uint32_t n_bind, const void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy,
                        uint32_t gz);

/* Scratch device memory valid for the current run() (e.g. activations
 * quantized once per op). Reused across ops: the hazard tracker orders it. */
weft_status vk_scratch(struct vk_backend *vb, size_t bytes, struct weft_buffer **out);

/* Op files. Each returns false / WEFT_ERR_UNSUPPORTED for what it does not do. */
bool vk_matmul_supports(struct vk_backend *vb, const struct weft_op *op);     /* MATMUL, LOGITS */
weft_status vk_op_matmul(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_logits(struct vk_backend *vb, const struct weft_op *op);

#endif

/* ---- added by the runtime (helper V1) ---- */

/* Bytes the buffer was allocated with. */
size_t vk_buffer_size(const struct weft_buffer *buf);

/* A view lies inside its buffer, rows of whole blocks, nb1 >= row bytes. */
bool vk_view_ok(const struct weft_view *v);

/* The byte alignment shaders/dequant.glsl needs of a weight row's offset and
 * stride: 2 (its u16/u32 reads), 1 for MXFP4 (17-byte blocks, read by bytes). */
static inline size_t vk_weight_align(enum weft_type t) { return t == WEFT_TYPE_MXFP4 ? 1 : 2; }

/* vk_matmul.c's pieces that vk_moe.c's MATMUL_ID shares: the weight-type
 * suffix of the matmul shaders' variants (NULL: none reads the type), the
 * view checks, and the activations' rounding (quant_act) into scratch, as
 * MATMUL's non-exact paths do it: M rows of K floats (then, for Q4_1/Q5_1,
 * their f16 block sums at *s_off floats) at xq_off; *xv becomes that view;
 * nothing for F32 weights. vk_mm_act_bytes: its scratch bytes. */
const char *vk_mm_type_suffix(enum weft_type t);
bool vk_mm_weight_ok(const struct vk_backend *vb, const struct weft_view *w);
bool vk_mm_addressable(const struct vk_backend *vb, const struct weft_view *v, size_t align);
bool vk_mm_has_block_sums(enum weft_type t);
size_t vk_mm_act_bytes(enum weft_type t, int64_t M, int64_t K);
weft_status vk_mm_round_activations(struct vk_backend *vb, const struct weft_view *w, struct weft_view *xv, int64_t M,
                                    struct weft_buffer *scratch, size_t xq_off, uint32_t *s_off);
uint32_t vk_mm_mv_nr(const struct vk_backend *vb);                        /* mul_mat_vec's weight rows per group */
uint32_t vk_mm_matvec_threads(const struct vk_backend *vb, int64_t K);    /* and its threads */
bool vk_mm_subgroup_reduce(const struct vk_backend *vb);                   /* its _sg variants */

/* Mixtures of experts (vk_moe.c, api 7): MOE_ROUTE, MATMUL_ID. */
bool vk_moe_supports(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_moe_route(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_matmul_id(struct vk_backend *vb, const struct weft_op *op);

/* The recurrent layers of hybrid models (vk_recurrent.c, api 9): SSM_CONV,
 * DELTA_NET. vk_recurrent_check_slots: every row of those ops in ops[0..n)
 * names a slot inside its state (WEFT_ERR_INVALID_ARG naming the op and row
 * if not); it reads the slots back, so run() calls it before recording. */
bool vk_recurrent_supports(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_recurrent_check_slots(struct vk_backend *vb, const struct weft_op *ops, size_t n);
weft_status vk_op_ssm_conv(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_delta_net(struct vk_backend *vb, const struct weft_op *op);

/* Element-wise and attention ops (vk_ops.c, vk_attention.c). */
bool vk_ops_supports(struct vk_backend *vb, const struct weft_op *op);   /* all but MATMUL/LOGITS/COPY */
weft_status vk_op_embed(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_rmsnorm(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_silu_mul(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_add(struct vk_backend *vb, const struct weft_op *op);
bool vk_attention_supports(struct vk_backend *vb, const struct weft_op *op);  /* ROPE_KV, ATTENTION */
weft_status vk_op_rope_kv(struct vk_backend *vb, const struct weft_op *op);
weft_status vk_op_attention(struct vk_backend *vb, const struct weft_op *op);
