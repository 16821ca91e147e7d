/* The backend contract: devices, buffers, and a fused op list per step.
 *
 * A backend is a `struct weft_backend_iface` (function pointers, designated
 * initializers) plus a private context, registered by name ("cpu", later
 * "vulkan", "cuda", "hip"). core/ only ever talks to a backend through this
 * header, so nothing in core/ knows which vendor runs an op.
 *
 * Ownership: buffers belong to the backend that allocated them; core/ holds
 * opaque handles and frees them with buffer_free. An op refers to memory as
 * (buffer, byte offset) pairs, never raw pointers, so a GPU backend can run
 * the same op list it is given.
 *
 * Versioning: the iface only grows by appending slots; api_version says how
 * many exist. Optional slots are marked and say what happens when NULL. */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kv_block.h"
#include "base/status.h"
#include "base/types.h"

#define WEFT_BACKEND_API_VERSION 10  /* 2: weight_prepare; 3: max_buffer; 4: params.options, cache_dir;
                                      * 5: op fields MATMUL bias, SILU_MUL act, EMBED scale,
                                      *    ATTENTION window, ROPE_KV scaling (freq_factors,
                                      *    ext_factor, attn_factor, corr_dims); zero: the
                                      *    behaviour before them;
                                      * 6: ATTENTION softcap, LOGITS softcap, the KV view's
                                      *    head_dim_v (K and V head dims apart);
                                      * 7: ops MOE_ROUTE and MATMUL_ID (mixtures of experts),
                                      *    ATTENTION sinks, SILU_MUL act SWIGLU_OAI (gpt-oss);
                                      * 8: MOE_ROUTE's expert groups (DeepSeek V3);
                                      * 9: ops SSM_CONV and DELTA_NET over per-sequence state
                                      *    (hybrid linear-attention models), SILU_MUL act
                                      *    SIGMOID;
                                      * 10: ADD scale, ROPE_KV q_only, MOE_ROUTE expert_scale
                                      *    (Gemma 4) */

struct weft_buffer;  /* opaque, backend-owned */

/* A 2-D view of a buffer: ne1 rows of ne0 elements of `type`, rows nb1 bytes
 * apart. A vector is ne1 = 1. */
struct weft_view {
    struct weft_buffer *buf;
    size_t offset;
    enum weft_type type;
    int64_t ne0, ne1;
    size_t nb1;
};

enum weft_op_kind {
    WEFT_OP_EMBED,      /* out[r] = dequant(table[ids[r]])                     */
    WEFT_OP_RMSNORM,    /* [sum = x + add;] out = sum / rms(sum) * w           */
    WEFT_OP_MATMUL,     /* out = x · Wᵀ [+ add]                                */
    WEFT_OP_ROPE_KV,    /* rotate q,k in place; write k,v into paged cache     */
    WEFT_OP_ATTENTION,  /* paged causal GQA attention over block tables        */
    WEFT_OP_SILU_MUL,   /* out = act(gate) * up (a GLU; act SiLU unless set)   */
    WEFT_OP_ADD,        /* out = a + b                                          */
    WEFT_OP_COPY,       /* raw bytes between buffers (KV tiers, devices)       */
    WEFT_OP_LOGITS,     /* logits[i] = rmsnorm(x[rows[i]]) · Wᵀ                */
    WEFT_OP_MOE_ROUTE,  /* api 7: router logits -> top-k experts and weights    */
    WEFT_OP_MATMUL_ID,  /* api 7: each row times its chosen experts' matrices   */
    WEFT_OP_SSM_CONV,   /* api 9: causal depthwise conv over a per-sequence state */
    WEFT_OP_DELTA_NET,  /* api 9: the gated delta rule over a per-sequence state  */
    WEFT_OP_COUNT_
};

/* The one name table of the op kinds (tracing, profiles, dumps). */
static inline const char *weft_op_name(enum weft_op_kind k)
{
    /* in enum order */
    static const char *const names[WEFT_OP_COUNT_] = {"embed", "rmsnorm", "matmul", "rope_kv", "attention",
                                                      "silu_mul", "add", "copy", "logits", "moe_route",
                                                      "matmul_id", "ssm_conv", "delta_net"};
    return (unsigned)k < WEFT_OP_COUNT_ && names[k] ? names[k] : "?";
}

enum weft_rope_mode {
    WEFT_ROPE_NORMAL = 0, /* rotate pairs (2i, 2i+1)        — llama */
    WEFT_ROPE_NEOX = 1,   /* rotate pairs (i, i + n_rot/2)  — neox/qwen */
};

/* Paged KV cache, as the forward pass sees it. One buffer holds every block;
 * a block is WEFT_KV_BLOCK_TOKENS tokens of K and V for every layer. With KB
 * the bytes of one layer's K in a block ([WEFT_KV_BLOCK_TOKENS][n_kv_head]
 * [head_dim] of `type`) and VB its V's ([WEFT_KV_BLOCK_TOKENS][n_kv_head]
 * [head_dim_v]):
 *   block b, layer l, K: offset (b * n_layer + l) * (KB + VB)
 *                     V: offset (b * n_layer + l) * (KB + VB) + KB
 *   (with head_dim_v = head_dim: ((b * n_layer + l) * 2 + 0 or 1) * KB)
 *   `type`: F16, or Q8_0 (each head a whole number of 34-byte blocks of 32;
 *   head_dim and head_dim_v % 32 == 0). A latent cache (v_in_k) has VB = 0.
 * A token's slot is block * WEFT_KV_BLOCK_TOKENS + (pos % WEFT_KV_BLOCK_TOKENS)
 * (WEFT_KV_BLOCK_TOKENS: base/kv_block.h, the layout every tier shares). */
struct weft_kv_view {
    struct weft_buffer *buf;
    enum weft_type type;       /* F16 or Q8_0 */
    uint32_t n_layer, layer;   /* which layer this op touches */
    uint32_t n_kv_head, head_dim;
    uint32_t head_dim_v;       /* api 6: V's head dim (ROPE_KV's v and ATTENTION's out are
                                * n_kv_head / n_head heads of it); 0: head_dim */
    /* api 7: a latent cache (DeepSeek's MLA): the cache holds no V. A layer's part of a block
     * is its K only (KB bytes, VB = 0), and a position's V row is the last head_dim_v values
     * of its K row (n_kv_head 1; for Q8_0, head_dim - head_dim_v % 32 == 0). ROPE_KV writes k
     * only (v is not read). */
    bool v_in_k;
};

/* V's head dim of a KV view. */
static inline uint32_t weft_kv_head_dim_v(const struct weft_kv_view *kv)
{
    return kv->head_dim_v ? kv->head_dim_v : kv->head_dim;
}

/* Per-step batch metadata, written by core into backend buffers:
 *   pos[r]   int32, position of row r in its sequence
 *   seq[r]   int32, sequence index of row r (0..n_seq)
 *   slot[r]  int32, KV slot row r writes
 *   bt_off[s] int32, start of sequence s's block list in `bt`
 *   bt[...]  int32, physical block ids
 * Row r attends to positions 0..pos[r] of sequence seq[r] (causal). */
struct weft_batch_view {
    uint32_t n_rows, n_seq;
    struct weft_view pos, seq, slot, bt_off, bt;
};

/* Ops grow by appended fields whose zero value is the behaviour before them
 * (a backend that does not know a field refuses the op in supports() when
 * it is not zero). */
struct weft_op_embed {
    struct weft_view table, ids, out;
    float scale;                    /* api 5: out = dequant(row) * scale in F32; 0: no scaling */
};
struct weft_op_rmsnorm { struct weft_view x, add, sum, w, out; float eps; bool has_add; };
struct weft_op_matmul {
    struct weft_view x, w, out, add;
    bool has_add;
    /* api 5: out[r][n] = (x[r] · W[n] + bias[n]) [+ add[r][n]], F32 bias of
     * W.ne1 values (a vector view), added to the dot product before add */
    struct weft_view bias;
    bool has_bias;
};
struct weft_op_rope_kv {
    struct weft_view q, k, v;       /* [rows, n_head*hd], [rows, n_kv*hd], [rows, n_kv*hd_v], F32 */
    struct weft_kv_view kv;
    struct weft_batch_view batch;
    uint32_t n_head, n_rot;
    float freq_base, freq_scale;
    enum weft_rope_mode mode;
    /* api 5: RoPE scaling, as base/rope.h's weft_rope_cos_sin_ext (ggml's
     * rope_yarn): each pair's angle divided by freq_factors[i] (F32, n_rot/2
     * values: Llama 3.1's rope_freqs, LongRoPE), YaRN's mix (ext_factor,
     * corr_dims) and the cos/sin magnitude attn_factor (0: 1) */
    struct weft_view freq_factors;
    bool has_freq_factors;
    float ext_factor, attn_factor;
    float corr_dims[2];
    /* api 10: rotate q only; k, v and the cache are not touched (kv still gives the head dim:
     * a layer that attends to another layer's cache, Gemma 4's KV-shared layers) */
    bool q_only;
};
struct weft_op_attention {
    struct weft_view q, out;        /* [rows, n_head*hd], [rows, n_head*hd_v] F32 */
    struct weft_kv_view kv;
    struct weft_batch_view batch;
    uint32_t n_head;
    float scale;                    /* usually 1/sqrt(hd) */
    /* api 5: sliding window: a row at position p attends only positions j
     * with p - j < window (llama.cpp's standard SWA mask); 0: all of 0..p */
    uint32_t window;
    /* api 6: soft-capped scores (Gemma 2), as ggml's flash attention forms
     * them: s = softcap · tanh(q·k · (scale / softcap)); 0: s = q·k · scale */
    float softcap;
    /* api 7: attention sinks (gpt-oss): one learned logit per query head (an F32 vector of
     * n_head values), a position every row attends that has no value row: after the last
     * position (F16 V accumulated in F32 from there), s = sinks[h]: s > M: ms = expf(M - s),
     * acc *= ms, M = s; else vs = expf(s - M); S = S·ms + vs (a product, then a sum); as
     * ggml's flash attention. !has_sinks: none */
    struct weft_view sinks;
    bool has_sinks;
};
/* GLU activations (api 5). GELU_TANH is ggml's CPU geglu: g(x) = 0 for
 * x <= -10, x for x >= 10, else half(gelu(half(x))) with
 * gelu(x) = 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715x²))) in F32 and half()
 * rounding to F16 (ggml looks it up in a table of F16 values). */
/* SWIGLU_OAI (api 7, gpt-oss): x = min(gate, limit), y = clamp(up, -limit, limit),
 * out = x / (1 + expf(alpha · -x)) · (y + 1) (ggml's swiglu_oai; libm expf). */
/* SIGMOID (api 9, Qwen3.5 / Qwen3-Next's gated attention output): out = (1 / (1 + expf(-gate)))
 * · up (ggml's sigmoid, libm expf). */
enum weft_glu_act { WEFT_GLU_SILU = 0, WEFT_GLU_GELU_TANH = 1, WEFT_GLU_SWIGLU_OAI = 2, WEFT_GLU_SIGMOID = 3 };
struct weft_op_silu_mul {
    struct weft_view gate, up, out;
    enum weft_glu_act act;          /* api 5: out = act(gate) * up; 0: SiLU */
    float alpha, limit;             /* api 7: SWIGLU_OAI's (gpt-oss: 1.702, 7) */
};
struct weft_op_add {
    struct weft_view a, b, out;
    /* api 10: out = (a + b) · scale, the sum rounded to F32 before the product (ggml's ADD
     * then MUL: Gemma 4's layer_output_scale); 0: out = a + b */
    float scale;
};
struct weft_op_copy { struct weft_buffer *src, *dst; size_t src_off, dst_off, bytes; };
struct weft_op_logits {
    struct weft_view x;             /* [rows, n_embd] F32 */
    struct weft_view rows;          /* I32 row indices, ne0 = n_out */
    struct weft_view norm_w, w, out;/* out [n_out, n_vocab] F32 */
    float eps;
    /* api 6: soft-capped logits (Gemma 2 and 4's final_logit_softcapping), as
     * llama.cpp's graph forms them: out = tanh(l · (1 / softcap)) · softcap;
     * 0: out = l */
    float softcap;
};

/* api 7: mixtures of experts (llama.cpp's build_moe_ffn).
 *
 * MOE_ROUTE, for each row r of `logits` ([rows, n_expert] F32):
 *   p = softmax(logits[r]) (SOFTMAX, SOFTMAX_TOPK) or sigmoid(logits[r]) (SIGMOID);
 *   the k experts of largest p (+ bias, when has_bias: a per-expert F32 vector used for the
 *   choice only, DeepSeek V3) go to ids[r] ([rows, k] I32), best first (equal values: the
 *   lower expert first);
 *   weights[r][j] ([rows, k] F32) = p of ids[r][j]; SOFTMAX_TOPK (gpt-oss): the softmax of the
 *   chosen k logits instead; then, with norm, divided by their sum (clamped below at
 *   6.103515625e-5, as llama.cpp); then times scale (0: 1).
 *   Float order (the CPU's): softmax as ggml's soft_max (max, then libm expf(x - max) summed in
 *   double, then times (float)(1 / sum)); the sum for norm in double, rounded to float.
 *   api 8, expert groups (DeepSeek V3's group-limited routing; n_group 0 or 1: none): the
 *   n_expert experts are n_group groups of G = n_expert / n_group consecutive experts (G >= 2);
 *   a group's score is a + b, a and b its two largest choice values (p + bias; a NaN is never
 *   one of them; one float add); the group_used groups of largest score are kept (equal: the
 *   lower group first; 1 <= group_used < n_group) and the k experts are chosen among theirs
 *   only (k <= group_used · G), as llama.cpp's build_moe_ffn masks the others to -inf.
 *
 * MATMUL_ID: the experts' matrices are one weight view w (ne0 = K, ne1 = n_expert · N: expert
 * e's N rows from row e · N; a GGUF's 3-D ffn_*_exps tensor as it lies in the file). For row
 * r (rows = ids.ne1) and slot j < k = ids.ne0, with e = ids[r][j]:
 *   y[r][j] = x_rj · W_eᵀ (+ bias[e · N ..] when has_bias), x_rj = x[r · k + j] when
 *   x_per_slot (x has one row per slot: the down projection after the GLU), else x[r];
 *   without weights: out[r · k + j] = y[r][j]  (out: [rows · k, N]);
 *   with weights (has_weights, [rows, k] F32): out[r] = ((w_r0 · y_r0 + w_r1 · y_r1) + ...)
 *   (+ add[r] when has_add), each product rounded, summed in slot order (out: [rows, N]).
 * A backend reads only the experts some row chose, each once per op for all the rows that
 * chose it (tests/test_backend_ops.c fills the others with NaN). Activations are converted to
 * the weight type's vec_dot type once per row; dots in the single-row (vec_dot) order. */
enum weft_moe_gating { WEFT_MOE_SOFTMAX = 0, WEFT_MOE_SIGMOID = 1, WEFT_MOE_SOFTMAX_TOPK = 2 };
struct weft_op_moe_route {
    struct weft_view logits, ids, weights;
    uint32_t k;
    enum weft_moe_gating gating;
    bool norm;
    float scale;
    struct weft_view bias;
    bool has_bias;
    uint32_t n_group, group_used;  /* api 8: expert groups (0: none) */
    /* api 10: then each chosen weight times expert_scale[its id] (F32, n_expert values;
     * Gemma 4's ffn_down_exps.scale), one F32 product */
    struct weft_view expert_scale;
    bool has_expert_scale;
};
struct weft_op_matmul_id {
    struct weft_view x, w, ids, out;
    uint32_t n_expert;
    bool x_per_slot;
    struct weft_view weights;
    bool has_weights;
    struct weft_view add;
    bool has_add;
    struct weft_view bias;      /* F32, n_expert · N values */
    bool has_bias;
};

/* api 9: the recurrent layers of hybrid models (Qwen3.5 / Qwen3-Next's Gated DeltaNet) keep a
 * fixed-size state per sequence in a state buffer apart from the paged KV. Row r of an op
 * belongs to the sequence whose state is slot slots[r] (I32, ne0 >= rows); a sequence's rows
 * come in position order and run one after another, each seeing the state the previous one
 * left. Slot s is the ne0 F32 values at state.offset + s · state.nb1 (ne1 = the slots).
 *
 * SSM_CONV, the causal depthwise convolution of K taps over C channels; the state keeps the
 * K - 1 previous inputs of each channel (ne0 = (K - 1) · C; input j back at (K - 1 - j) · C: the
 * oldest first). With win[0..K-1] the K - 1 kept inputs then x[r]:
 *   y[c] = win[0][c] · w[c][0], then y = fmaf(win[i][c], w[c][i], y) for i = 1 .. K-1
 *   out[r][c] = silu ? y / (1 + e(0 - y)) : y  (e: ggml's polynomial expf on whole 16-element
 *   chunks of a row, libm on the rest, as SILU_MUL's SiLU); the state then keeps win[1..K-1].
 *   x, out: [rows, C] F32; w: [C, K] F32 (channel c's taps, the last for the current input).
 *
 * DELTA_NET, the gated delta rule with l2-normalised q and k. Row r of `in` ([rows, (2·Hk +
 * Hv)·S] F32) holds Hk q heads, Hk k heads and Hv v heads of S values (Hk = n_k_head, Hv =
 * n_v_head, S = head_dim, Hv a multiple of Hk; v head h reads q and k head h % Hk, or with
 * k_grouped h / (Hv / Hk): Qwen3.5 tiles its v heads over the k heads, Qwen3-Next groups them). beta and
 * alpha ([rows, Hv] F32) are the raw gates, dt_bias and a ([Hv] F32) per v head. Per row:
 *   q, k = x · (1 / fmaxf(sqrtf((float)Σ x² (in double)), eps)) per head (ggml's l2_norm)
 *   b = 1 / (1 + expf(-beta)); g = softplus(alpha + dt_bias) · a, softplus(x) = x > 20 ? x :
 *   logf(1 + expf(x)); then per v head, state M (S × S, M[j][i], j the value index) at
 *   (h · S + j) · S + i of the slot:
 *     M *= expf(g);  d[j] = (v[j] - dot(M[j], k)) · b;  M[j][i] = fmaf(k[i], d[j], M[j][i]);
 *     out[r][h · S + j] = dot(M[j], q) · (1 / sqrtf(S))
 *   dot(x, y): 4 × 8 lanes of fmaf over 32-element chunks (lane l of accumulator a: element
 *   32c + 8a + l), a_l = (acc0 + acc2) + (acc1 + acc3), t_m = a_m + a_{m+4}, (t0 + t1) + (t2 +
 *   t3), then the n % 32 tail products added in double (ggml's AVX ggml_vec_dot_f32).
 *   The state slot holds Hv · S · S values. */
struct weft_op_ssm_conv {
    struct weft_view x, w, out, state, slots;
    bool silu;
};
struct weft_op_delta_net {
    struct weft_view in, beta, alpha, dt_bias, a, out, state, slots;
    uint32_t n_k_head, n_v_head, head_dim;
    float eps;
    bool k_grouped;
};

/* MOE_ROUTE's expert groups are well formed (backend.h above; at most
 * WEFT_MOE_MAX_GROUPS groups): every backend's supports() asks this */
#define WEFT_MOE_MAX_GROUPS 64
static inline bool weft_moe_groups_ok(const struct weft_op_moe_route *m)
{
    if (m->n_group <= 1) return true;
    const int64_t E = m->logits.ne0, G = E / m->n_group;
    return m->n_group <= WEFT_MOE_MAX_GROUPS && E % m->n_group == 0 && G >= 2 && m->group_used >= 1 &&
           m->group_used < m->n_group && (int64_t)m->k <= (int64_t)m->group_used * G;
}

struct weft_op {
    enum weft_op_kind kind;
    union {
        struct weft_op_embed embed;
        struct weft_op_rmsnorm rmsnorm;
        struct weft_op_matmul matmul;
        struct weft_op_rope_kv rope_kv;
        struct weft_op_attention attention;
        struct weft_op_silu_mul silu_mul;
        struct weft_op_add add;
        struct weft_op_copy copy;
        struct weft_op_logits logits;
        struct weft_op_moe_route moe_route;
        struct weft_op_matmul_id matmul_id;
        struct weft_op_ssm_conv ssm_conv;
        struct weft_op_delta_net delta_net;
    } u;
};

struct weft_device_info {
    char name[128];            /* human-readable, e.g. "CPU (2 threads, AVX-512)" */
    char id[32];               /* "cpu:0" */
    uint64_t mem_total, mem_free; /* bytes; 0 if unknown */
    uint32_t n_threads;        /* CPU only; 0 elsewhere */
};

struct weft_backend_params {
    int device;                /* index within the backend */
    int n_threads;             /* CPU: worker threads (0 = all cores) */
    /* ---- api_version >= 4 ---- */
    const char *options;       /* base/options.h: the backend reads the keys of
                                * its own prefix ("vulkan.validate=1") and fails
                                * open on one it does not know; NULL: none */
    const char *cache_dir;     /* where a backend may keep files between runs
                                * (Vulkan's pipeline cache); NULL: nowhere */
};

struct weft_backend;

struct weft_backend_iface {
    uint32_t api_version;
    const char *name;          /* "cpu" */

    /* Devices this backend sees. Returns the count (0 if its runtime is
     * missing); `why` (may be NULL) gets a reason when 0. Fills at most
     * max infos. */
    int (*devices)(struct weft_device_info *infos, int max, const char **why);

    /* Open one device. *out is NULL on failure. */
    weft_status (*open)(const struct weft_backend_params *p, struct weft_backend **out);
    void (*close)(struct weft_backend *b);

    /* Buffers. alloc returns zero-filled memory or WEFT_ERR_NOMEM. */
    weft_status (*buffer_alloc)(struct weft_backend *b, size_t size, struct weft_buffer **out);
    /* Optional (NULL: core allocs + writes). Wrap host memory without copying;
     * the memory must outlive the buffer (used for mmapped weights). */
    weft_status (*buffer_wrap_host)(struct weft_backend *b, const void *ptr, size_t size,
                                    struct weft_buffer **out);
    void (*buffer_free)(struct weft_buffer *buf);
    weft_status (*buffer_write)(struct weft_buffer *buf, size_t off, const void *src, size_t n);
    weft_status (*buffer_read)(struct weft_buffer *buf, size_t off, void *dst, size_t n);
    weft_status (*buffer_copy)(struct weft_buffer *dst, size_t dst_off,
                               struct weft_buffer *src, size_t src_off, size_t n);

    /* Whether run() accepts this op (its kind, types and shapes). */
    bool (*supports)(struct weft_backend *b, const struct weft_op *op);
    /* Record and run ops[0..n) in order. May return before completion on an
     * async backend; sync waits. On failure nothing after the failing op ran. */
    weft_status (*run)(struct weft_backend *b, const struct weft_op *ops, size_t n);
    weft_status (*sync)(struct weft_backend *b);

    /* ---- api_version >= 2 ---- */
    /* Optional (NULL: nothing to do). w is a MATMUL / LOGITS weight matrix
     * whose bytes are final: they must not change while its buffer lives.
     * The backend may keep its own faster layout of it (e.g. rows
     * interleaved for its kernels), costing extra memory, and use it
     * whenever an op names exactly this view (or its leading rows); results
     * stay bit-identical to the plain layout. Calling it again for the same
     * view is harmless. Fails only on an invalid view; running short of
     * memory just leaves the plain layout in use. */
    weft_status (*weight_prepare)(struct weft_backend *b, const struct weft_view *w);

    /* ---- api_version >= 3 ---- */
    /* Optional (NULL: no limit). The largest buffer an op can address on this
     * device (e.g. Vulkan's maxStorageBufferRange): core keeps weight chunks
     * and KV buffers under it. */
    uint64_t (*max_buffer)(struct weft_backend *b);
};


/* Every backend object starts with its iface pointer. */
struct weft_backend {
    const struct weft_backend_iface *iface;
};

/* The device's buffer limit (UINT64_MAX when it has none). */
static inline uint64_t weft_backend_max_buffer(struct weft_backend *b)
{
    uint64_t v = b->iface->api_version >= 3 && b->iface->max_buffer ? b->iface->max_buffer(b) : 0;
    return v ? v : UINT64_MAX;
}

/* ---- registry ---- */
/* Backends compiled into this build, in preference order. */
int weft_backend_count(void);
const struct weft_backend_iface *weft_backend_get(int i);
const struct weft_backend_iface *weft_backend_find(const char *name);

/* Open a device by spec "cpu", "cpu:0", "vulkan:1"... with the process's
 * options and cache folder (below). On failure *out is NULL and the message
 * says whether the backend is unknown, not built, the device index is out of
 * range, or an option of its prefix is unknown. */
weft_status weft_backend_open(const char *spec, int n_threads, struct weft_backend **out);
/* The same with these options instead of the process's (NULL: none). */
weft_status weft_backend_open_opts(const char *spec, int n_threads, const char *options,
                                   struct weft_backend **out);

/* The process's settings, which the library takes from no environment
 * variable: tools/env.c sets them from WEFT_* variables at start.
 *
 * weft_backend_set_options: the options string (base/options.h) every later
 * weft_backend_open, and model loading ("model.*" keys), uses; NULL or "" for
 * none. WEFT_ERR_INVALID_ARG for a malformed string or a prefix that is no
 * backend's nor "model". Safe to call while other threads open devices; a
 * backend open already reads the options it was given. */
weft_status weft_backend_set_options(const char *options);
/* The current options string ("" when none). It stays valid for the
 * process's life (a later set replaces, never frees, it), so a reader needs
 * no lock; opens copy it. */
const char *weft_backend_options(void);
/* The folder backends may keep files in between runs (NULL: none). */
weft_status weft_backend_set_cache_dir(const char *dir);
/* Where modules are looked for before the executable's folder and
 * <that>/../lib/weft: ':'-separated folders (NULL: none); none = true loads
 * no module (CPU only). Effective only before the first registry call
 * (WEFT_ERR_INVALID_ARG after it: the modules are loaded once). */
weft_status weft_backend_set_module_path(const char *dirs, bool none);
static inline void weft_backend_close(struct weft_backend *b) { if (b) b->iface->close(b); }

/* Convenience view constructors. */
static inline struct weft_view weft_view_2d(struct weft_buffer *buf, size_t off, enum weft_type t,
                                            int64_t ne0, int64_t ne1)
{
    struct weft_view v = {buf, off, t, ne0, ne1, weft_row_size(t, ne0)};
    return v;
}

#endif
