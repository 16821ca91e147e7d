/* Vulkan runtime state shared by the runtime's own files (vk_backend.c,
 * vk_mem.c, vk_pipeline.c, vk_cmd.c). Op files use vk_internal.h only, but
 * for vk_attention.c's exact RoPE tables (rope_tabs below, and a buffer's
 * mapped pointer), vk_ops.c's GeLU table (gelu_tab) and vk_recurrent.c's
 * slots check (vk_buffer_read). */
#ifndef WEFT_VK_PRIV_H
#define WEFT_VK_PRIV_H

#include <vulkan/vulkan.h>

#include "backends/vulkan/vk_internal.h"

/* One large VkDeviceMemory that buffers are carved from (first fit over a
 * sorted free list), or a dedicated allocation for one large buffer. */
struct vk_free_range { VkDeviceSize off, size; };
struct vk_chunk {
    VkDeviceMemory mem;
    VkDeviceSize size;
    uint32_t type_index;
    uint8_t *mapped;               /* host pointer when host-visible */
    struct vk_free_range *free;    /* sorted by offset, coalesced */
    uint32_t n_free, cap_free;
    uint32_t n_live;               /* buffers inside */
    bool dedicated;
};

struct weft_buffer {
    struct vk_backend *vb;
    VkBuffer buf;
    size_t size;                   /* what the caller asked for */
    struct vk_chunk *chunk;
    VkDeviceSize mem_off, mem_size;
};

/* A byte range touched since the last barrier (hazard tracking). */
struct vk_access { VkBuffer buf; size_t lo, hi; bool write; };

struct vk_prof { uint64_t calls; double total_ms; };

struct vk_validation {
    bool enabled;
    bool error;                    /* an ERROR message arrived since the last check */
    char msg[512];
};

/* One exact-RoPE table: cos/sin of positions [0, cap), [pos][n_rot/2][2]
 * floats, for one rotation (base, scale, scaling fields, freq_factors). */
#define VK_ROPE_TABS 4
#define VK_ROPE_MAX_FF 256         /* freq_factors kept in the key (n_rot/2 <= this) */
struct vk_rope_tab {
    struct weft_buffer *buf;       /* NULL: a free entry */
    uint32_t cap, n_rot;
    float base, scale, ext_factor, attn_factor, corr_dims[2];
    bool has_ff;
    float ff[VK_ROPE_MAX_FF];      /* the freq_factors it was made with */
    uint64_t used;
};

#define VK_MAX_CHUNKS 256
#define VK_MAX_QUERIES 4096

/* the vulkan.* options (base/options.h) of this backend, read at open */
struct vk_opts {
    int exact;                     /* vulkan.exact: -1 unset (exact on CPU-type devices), 0, 1 */
    bool validate;                 /* vulkan.validate: the Khronos layer; an error fails the run */
    bool profile;                  /* vulkan.profile: per-op GPU time at close */
    bool no_unified;               /* vulkan.no_unified: staging even on unified memory (tests) */
    bool no_subgroup;              /* vulkan.no_subgroup: the shared-memory fallbacks (tests) */
    bool matvec_tree;              /* vulkan.matvec_tree: matrix-vector sums by tree (tests) */
    uint32_t mv_nr;                /* vulkan.mv_nr: weight rows per matrix-vector workgroup; 0 auto */
};

struct vk_backend {
    struct weft_backend base;
    int index;
    struct vk_opts opt;
    char cache_dir[900];           /* the pipeline cache's folder; "" none */
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    struct vk_validation *val;     /* heap: the messenger callback points at it */
    VkPhysicalDevice pd;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memprops;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    struct vk_caps caps;

    /* memory */
    uint32_t dev_type, stage_type; /* memory type indices */
    bool dev_mapped;               /* device buffers are host-mapped (unified) */
    VkDeviceSize chunk_size;
    struct vk_chunk *chunks[VK_MAX_CHUNKS];
    uint32_t n_chunks;
    struct weft_buffer *staging;   /* host-visible bounce buffer (non-unified only) */

    /* pipelines */
    struct vk_pipeline **pipes;
    uint32_t n_pipes, cap_pipes;
    VkPipelineCache pcache;
    char pcache_path[1024];

    /* command recording */
    VkCommandPool cmd_pool;
    VkCommandBuffer cb;
    VkFence fence;
    bool recording, in_flight;
    VkDescriptorPool *dpools;
    uint32_t n_dpools, cur_dpool;
    struct vk_access *acc;
    uint32_t n_acc, cap_acc;
    struct weft_buffer *scratch;
    struct weft_buffer **retired;  /* freed once the step in flight completes */
    uint32_t n_retired, cap_retired;

    /* exact ROPE_KV (vk_attention.c): cos/sin tables by the CPU's
     * weft_rope_cos_sin_ext, one per rotation a model uses (gemma3 has two) */
    struct vk_rope_tab rope_tabs[VK_ROPE_TABS];
    uint64_t rope_clock;           /* last-use stamps: the oldest table makes room */

    /* SILU_MUL's GeGLU (vk_ops.c): every F16 value's tanh-GeLU as the CPU
     * computes it, 65536 F16; made by vk_gelu_table before a step needs it */
    struct weft_buffer *gelu_tab;

    /* vulkan.profile */
    bool profile;
    VkQueryPool qpool;
    uint32_t n_queries;
    int query_kind[VK_MAX_QUERIES / 2];
    struct vk_prof prof[WEFT_OP_COUNT_];
    int cur_kind;
    uint32_t step_queries;         /* queries written by the step in flight */
};

/* vk_backend.c */
weft_status vk_check_validation(struct vk_backend *vb);
weft_status vk_result(struct vk_backend *vb, VkResult r, const char *what);

/* vk_mem.c */
weft_status vk_mem_init(struct vk_backend *vb);
void vk_mem_free_all(struct vk_backend *vb);
weft_status vk_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out);
/* host: in host-visible staging memory; zero: fill with zeros (a one-shot
 * submit on non-mapped memory, so not while a step is being recorded). */
weft_status vk_buffer_new(struct vk_backend *vb, size_t size, bool host, bool zero, struct weft_buffer **out);
void vk_buffer_free(struct weft_buffer *buf);
void vk_buffer_destroy_now(struct weft_buffer *buf);
weft_status vk_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n);
weft_status vk_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n);
weft_status vk_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff, size_t n);

/* vk_pipeline.c */
weft_status vk_pipelines_init(struct vk_backend *vb);
void vk_pipelines_free(struct vk_backend *vb);
VkPipeline vk_pipeline_handle(const struct vk_pipeline *p);
VkPipelineLayout vk_pipeline_layout(const struct vk_pipeline *p);
VkDescriptorSetLayout vk_pipeline_set_layout(const struct vk_pipeline *p);

/* vk_cmd.c */
weft_status vk_cmd_init(struct vk_backend *vb);
void vk_cmd_free(struct vk_backend *vb);
weft_status vk_wait_idle(struct vk_backend *vb);         /* the step in flight, if any */
weft_status vk_oneshot_begin(struct vk_backend *vb);      /* recording into vb->cb */
weft_status vk_oneshot_submit(struct vk_backend *vb);     /* submit and wait */
weft_status vk_step_begin(struct vk_backend *vb);
weft_status vk_step_submit(struct vk_backend *vb);
void vk_step_abort(struct vk_backend *vb);                /* end recording, submit nothing */
void vk_op_begin(struct vk_backend *vb, int kind);        /* profiling marks */
void vk_op_end(struct vk_backend *vb);
/* Record a transfer (copy) with hazard tracking. */
weft_status vk_record_copy(struct vk_backend *vb, struct weft_buffer *dst, size_t doff,
                           struct weft_buffer *src, size_t soff, size_t n);
void vk_profile_print(struct vk_backend *vb);
/* Free b once the step being recorded (or in flight) has completed: a
 * dispatch recorded before may still bind it. */
weft_status vk_retire(struct vk_backend *vb, struct weft_buffer *b);

/* vk_ops.c: vb->gelu_tab, made once (outside a step: it may submit an upload) */
weft_status vk_gelu_table(struct vk_backend *vb);

/* vk_spirv_data.c (generated) */
const uint32_t *vk_spirv_find(const char *name, size_t *bytes);

#endif
