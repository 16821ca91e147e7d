/* A model of one of the families in core/arch/ (family.h): hyperparameters
 * from GGUF, weights placed on a backend. Its layout is core's (core/model_impl.h: forward.c reads the
 * fields); the CLI and server use the accessors below. */
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include "backends/backend.h"
#include "core/arch/tensors.h"
#include "core/fingerprint.h"
#include "core/gguf.h"
#include "core/tokenizer.h"

struct weft_family;

struct weft_hparams {
    char arch[32];             /* general.architecture: "llama", ... */
    const struct weft_family *family;   /* core/arch/family.h */
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
    uint32_t head_dim, n_rot;  /* head_dim: of Q and K (attention.key_length) */
    uint32_t head_dim_v;       /* of V (attention.value_length; = head_dim when absent) */
    float rms_eps, rope_freq_base, rope_freq_scale;
    enum weft_rope_mode rope_mode;
    bool tied_output;          /* output.weight absent: lm_head = token_embd */
    /* per-layer attention (families whose layers differ; 0s elsewhere):
     * layer l is a sliding-window one of n_swa positions when swa_pattern
     * and l % swa_pattern < swa_pattern - 1 (weft_hp_window), with its own
     * RoPE base rope_freq_base_swa and scale 1 */
    uint32_t n_swa, swa_pattern;
    float rope_freq_base_swa;
    float attn_scale;          /* the attention's scale of q·k; 0: 1/sqrt(head_dim) */
    /* RoPE scaling beyond freq_scale (base/rope.h): YaRN's mix and ramp, the
     * cos/sin magnitude (0: 1), the original context (YaRN, LongRoPE) */
    float rope_ext_factor, rope_attn_factor;
    float rope_corr_dims[2];           /* YaRN's ramp for rope_freq_base */
    float rope_beta_fast, rope_beta_slow; /* YaRN: the ramp for another base (a local layer's) */
    uint32_t rope_n_ctx_orig;
    float rope_yarn_log_mul;   /* rope.scaling.yarn_log_multiplier as the file has it (0: none); read
                                * only by families that say so (weft_family.yarn_log_mul) */
    float embd_scale;          /* EMBED's scale of the embedding rows; 0: none */
    /* a mixture of experts (expert_count; 0: a dense FFN): each token's FFN is the weighted
     * sum of n_expert_used of n_expert SwiGLU experts of n_ff_exp rows
     * (expert_feed_forward_length; the families without that key: n_ff) */
    uint32_t n_expert, n_expert_used, n_ff_exp;
    /* group-limited routing (expert_group_count / expert_group_used_count, DeepSeek V3):
     * the experts in expert_groups groups, only the expert_group_used best searched (MOE_ROUTE's
     * n_group / group_used); 0: none (a file's 1 / 1 too) */
    uint32_t expert_groups, expert_group_used;
    /* the mixture's details where a family has them (DeepSeek): shared experts (their FFN
     * n_expert_shared · n_ff_exp wide), the first n_dense_lead layers dense, the gating, the
     * chosen weights renormalised and scaled (0: 1) */
    uint32_t n_expert_shared, n_dense_lead;
    uint32_t n_ff_shexp;       /* expert_shared_feed_forward_length: one gated shared expert's rows
                                * (Qwen3.5-MoE, Qwen3-Next); 0: none, or DeepSeek's n_expert_shared */
    enum weft_moe_gating expert_gating;
    bool expert_weights_norm;
    float expert_weights_scale;
    /* multi-head latent attention (DeepSeek's MLA; 0s elsewhere): Q through a rank-q_lora
     * bottleneck (0: a plain attn_q), K and V from a rank-kv_lora latent; per head
     * mla_qk = nope + n_rot wide for Q·K and mla_v for V. The cache then holds the latent:
     * head_dim = n_rot + kv_lora (K: the roped part, then the latent), head_dim_v = kv_lora
     * (V: the latent, inside K), one KV head (kv_latent) */
    uint32_t q_lora_rank, kv_lora_rank, mla_qk, mla_v;
    bool kv_latent;
    /* hybrid linear attention (Qwen3.5 / Qwen3-Next's Gated DeltaNet; 0s elsewhere): layer l
     * is recurrent (weft_hp_recurrent) unless (l + 1) % full_attn_interval == 0. A recurrent
     * layer keeps no KV; its state per sequence is a causal conv window of ssm_conv_kernel - 1
     * inputs of (2 · ssm_groups + ssm_dt_rank) · ssm_state channels and the delta rule's
     * ssm_dt_rank matrices of ssm_state² (ssm.conv_kernel, ssm.state_size, ssm.group_count:
     * q/k heads, ssm.time_step_rank: v heads, ssm.inner_size = ssm_dt_rank · ssm_state) */
    uint32_t full_attn_interval;
    uint32_t ssm_conv_kernel, ssm_state, ssm_groups, ssm_dt_rank, ssm_inner;
    /* layers of two shapes (Gemma 4; 0s elsewhere): a sliding-window layer's head dims, KV
     * heads and rotated dims (attention.key_length_swa, value_length_swa, the head_count_kv
     * array, rope.dimension_count_swa; 0: as the global layers'). The last n_kv_shared
     * layers keep no KV: each attends to the cache of the last earlier layer of its kind
     * (weft_hp_kv_source), and its FFN is n_ff_kv_shared wide (0: n_ff). Per-layer embeddings
     * n_embd_per_layer wide (0: none); the output's soft-cap (final_logit_softcapping; 0:
     * none); experts whose gate and up projections are one tensor (ffn_gate_up_exps) */
    uint32_t head_dim_swa, head_dim_v_swa, n_head_kv_swa, n_rot_swa;
    uint32_t n_kv_shared, n_ff_kv_shared, n_embd_per_layer;
    float final_softcap;
    bool expert_gate_up;
};

/* Layer l keeps a recurrent state instead of KV (a hybrid model's linear-attention layer). */
static inline bool weft_hp_recurrent(const struct weft_hparams *hp, uint32_t l)
{
    return hp->full_attn_interval && (l + 1) % hp->full_attn_interval != 0;
}
/* A recurrent layer's conv channels; its state per sequence (the KV pool's state slot for the
 * layer): the conv window's floats (backends/backend.h's SSM_CONV state), then, from
 * weft_hp_state_delta_off bytes, the delta rule's ssm_dt_rank matrices of ssm_state² floats
 * (DELTA_NET's), weft_hp_state_layer_bytes in all (both parts 256-byte aligned). */
static inline uint64_t weft_hp_ssm_channels(const struct weft_hparams *hp)
{
    return (uint64_t)(2 * hp->ssm_groups + hp->ssm_dt_rank) * hp->ssm_state;
}
static inline uint64_t weft_hp_conv_floats(const struct weft_hparams *hp)
{
    return (uint64_t)(hp->ssm_conv_kernel - 1) * weft_hp_ssm_channels(hp);
}
static inline uint64_t weft_hp_delta_floats(const struct weft_hparams *hp)
{
    return (uint64_t)hp->ssm_dt_rank * hp->ssm_state * hp->ssm_state;
}
static inline size_t weft_hp_state_delta_off(const struct weft_hparams *hp)
{
    return (size_t)((weft_hp_conv_floats(hp) * 4 + 255) & ~(uint64_t)255);
}
static inline size_t weft_hp_state_layer_bytes(const struct weft_hparams *hp)
{
    return (size_t)((weft_hp_state_delta_off(hp) + weft_hp_delta_floats(hp) * 4 + 255) & ~(uint64_t)255);
}
/* Layer l's sliding window (positions it attends), 0 for a global layer. */
static inline uint32_t weft_hp_window(const struct weft_hparams *hp, uint32_t l)
{
    return hp->swa_pattern && l % hp->swa_pattern < hp->swa_pattern - 1 ? hp->n_swa : 0;
}

/* Layer l's attention shape: K's and V's head dims, KV heads, rotated dims. */
static inline uint32_t weft_hp_head_dim(const struct weft_hparams *hp, uint32_t l)
{
    return hp->head_dim_swa && weft_hp_window(hp, l) ? hp->head_dim_swa : hp->head_dim;
}
static inline uint32_t weft_hp_head_dim_v(const struct weft_hparams *hp, uint32_t l)
{
    return hp->head_dim_v_swa && weft_hp_window(hp, l) ? hp->head_dim_v_swa : hp->head_dim_v;
}
static inline uint32_t weft_hp_n_head_kv(const struct weft_hparams *hp, uint32_t l)
{
    return hp->n_head_kv_swa && weft_hp_window(hp, l) ? hp->n_head_kv_swa : hp->n_head_kv;
}
static inline uint32_t weft_hp_n_rot(const struct weft_hparams *hp, uint32_t l)
{
    return hp->n_rot_swa && weft_hp_window(hp, l) ? hp->n_rot_swa : hp->n_rot;
}
/* The layer whose KV cache layer l attends to: l itself, or for the last n_kv_shared layers
 * the last earlier layer of its kind (sliding or global). */
static inline uint32_t weft_hp_kv_source(const struct weft_hparams *hp, uint32_t l)
{
    const uint32_t first = hp->n_layer - hp->n_kv_shared;
    if (!hp->n_kv_shared || l < first) return l;
    for (uint32_t j = first; j-- > 0;)
        if ((weft_hp_window(hp, j) > 0) == (weft_hp_window(hp, l) > 0)) return j;
    return l;
}
/* Layer l's FFN width (the dense one). */
static inline uint32_t weft_hp_n_ff(const struct weft_hparams *hp, uint32_t l)
{
    return hp->n_ff_kv_shared && weft_hp_kv_source(hp, l) != l ? hp->n_ff_kv_shared : hp->n_ff;
}
/* Layers that keep KV (all but the recurrent ones and those reading another's). */
static inline uint32_t weft_hp_kv_layers(const struct weft_hparams *hp)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) n += !weft_hp_recurrent(hp, l) && weft_hp_kv_source(hp, l) == l;
    return n;
}

/* One layer's tensors (or the model's own ones), by id of core/arch/tensors.h;
 * those the family does not use have no buffer. */
struct weft_layer_weights {
    struct weft_view t[WEFT_T_COUNT_];
};

/* Layers placed on several devices (--split cpu=2,vulkan:0=3): part i runs
 * n_layer consecutive layers on be. The first part also runs EMBED, the last
 * one LOGITS; activations cross between parts at layer boundaries. */
#define WEFT_MAX_PARTS 8
struct weft_split_part {
    struct weft_backend *be;       /* not owned */
    uint32_t n_layer;
};

/* Opaque outside core/ (core/model_impl.h holds the layout, for core's own
 * files and tests): tools and server read a model through these. */
struct weft_model;
const struct weft_hparams *weft_model_hparams(const struct weft_model *m);
const struct weft_tokenizer *weft_model_tokenizer(const struct weft_model *m);
/* the GGUF it was loaded from (metadata such as the chat template) */
const struct weft_gguf *weft_model_gguf(const struct weft_model *m);
const struct weft_fingerprint *weft_model_fingerprint(const struct weft_model *m);
/* the backend of its first part (the only one without a split) */
struct weft_backend *weft_model_backend(const struct weft_model *m);
uint32_t weft_model_n_parts(const struct weft_model *m);
enum weft_type weft_model_ftype(const struct weft_model *m);   /* most weights' type, for display */
uint64_t weft_model_n_params(const struct weft_model *m);
size_t weft_model_weight_bytes(const struct weft_model *m);      /* bytes of weights placed */
/* the weight bytes one decoded token reads: every layer's matrices and the
 * output matrix (not the norms, nor the embedding row) */
uint64_t weft_model_bytes_per_token(const struct weft_model *m);

/* The same with the mixture layers' FFN (router, experts, shared experts) on experts_be
 * (llama.cpp's --cpu-moe: experts in host memory on the CPU, the rest on a GPU);
 * experts_be NULL: as weft_model_load_split. A model without experts is refused. */
weft_status weft_model_load_placed(const char *path, const struct weft_split_part *parts, uint32_t n_parts,
                                   struct weft_backend *experts_be, struct weft_model **out);

/* Read and validate the hyperparameters of an open GGUF (no weights).
 * WEFT_ERR_FORMAT with a one-line message naming the key on failure. */
weft_status weft_hparams_load(const struct weft_gguf *g, struct weft_hparams *hp);

/* Open `path`, validate it (GGUF structure, hyperparameters, every tensor the
 * forward pass needs with the right shape and a supported type, tokenizer),
 * and place the weights on `be` (zero-copy where the backend can wrap host
 * memory). *out is NULL on failure and nothing is left open. */
weft_status weft_model_load(const char *path, struct weft_backend *be, struct weft_model **out);
/* The same with layers split over devices; the parts' n_layer must sum to
 * the model's layer count (a last part of 0 takes the rest). A device that cannot wrap host memory gets only
 * the tensors its layers use. */
weft_status weft_model_load_split(const char *path, const struct weft_split_part *parts, uint32_t n_parts,
                                  struct weft_model **out);
/* The hyperparameters, tokenizer and fingerprint of `path`, without placing
 * any weight (n_parts 0, no layers): for a mock engine
 * (weft_engine_config.mock_prefill_tps). be is kept for the KV pool. */
weft_status weft_model_load_meta(const char *path, struct weft_backend *be, struct weft_model **out);
void weft_model_free(struct weft_model *m);

#endif
