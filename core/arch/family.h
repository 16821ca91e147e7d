/* The model-family layer: what one GGUF architecture ("llama", "qwen3", ...)
 * reads and computes. A family is a small file (core/arch/<family>.c) that
 * gives
 *   - its hyperparameters beyond the common ones (model.c reads those: sizes,
 *     heads, head dims from attention.key_length / value_length, norm eps,
 *     RoPE base and scaling),
 *   - the tensors each layer uses, required or optional, with their shapes
 *     (ids of core/arch/tensors.h), so that the loader refuses a file missing
 *     one or holding one nothing reads,
 *   - its layer as ops, over the shared builders of core/arch/build.h.
 * core/forward.c stages the batch, walks the layers over the devices and
 * reads results back; it knows no family. */
#ifndef WEFT_ARCH_FAMILY_H
#define WEFT_ARCH_FAMILY_H

#include "core/arch/tensors.h"
#include "core/model.h"

enum weft_tensor_use { WEFT_USE_NONE = 0, WEFT_USE_REQUIRED, WEFT_USE_OPTIONAL };

/* What a family uses of one tensor id: ne0 = row length, ne1 = rows (1 for a
 * vector), ne2 = experts (an EXPERTS tensor; 0 elsewhere). */
struct weft_tensor_spec {
    enum weft_tensor_use use;
    int64_t ne0, ne1, ne2;
};

#define WEFT_GLOBAL_TENSORS UINT32_MAX  /* the "layer" of the model's own tensors */

struct weft_build;

struct weft_family {
    const char *arch;          /* general.architecture */
    /* The family's keys and defaults, after model.c read the common ones
     * (rope_mode is NORMAL until this sets it). NULL: none. */
    weft_status (*hparams)(const struct weft_gguf *g, struct weft_hparams *hp);
    /* spec[id] for layer l (WEFT_GLOBAL_TENSORS: token_embd, output, ...);
     * spec arrives zeroed. */
    void (*tensors)(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *spec);
    /* Append layer l's ops (core/arch/build.h). */
    void (*layer)(struct weft_build *b, uint32_t l);
    /* The family reads expert_count (a routed mixture of SwiGLU experts in place of the
     * dense FFN: weft_family_dense_tensors, weft_b_ffn_swiglu); false: a file with
     * experts is refused by name. */
    bool experts;
    /* The family's hparams hook reads rope.scaling.yarn_log_multiplier (DeepSeek's
     * attention magnitude under YaRN, hp->rope_yarn_log_mul); false: a file with one is
     * refused by name. */
    bool yarn_log_mul;
    /* The family reads per-layer arrays of attention.head_count_kv and feed_forward_length
     * (model.c takes their first value; the hparams hook the rest); false: an array is
     * refused by name. */
    bool layer_arrays;
};

#define WEFT_MAX_EXPERTS 512  /* expert_count weft runs (DeepSeek V3: 256) */

/* "<arch>.<suffix>" if present (*out untouched when absent): WEFT_OK, or
 * WEFT_ERR_FORMAT for a key of another type or a non-finite float. */
weft_status weft_hp_opt_u32(const struct weft_gguf *g, const char *arch, const char *suffix, uint32_t *out);
weft_status weft_hp_opt_f32(const struct weft_gguf *g, const char *arch, const char *suffix, float *out);
/* "<arch>.<suffix>" as n per-layer values: a scalar repeated, or an array of exactly n
 * numbers (bools as 0/1) that fit in a u32; *present false (out untouched) when absent. */
weft_status weft_hp_layer_u32(const struct weft_gguf *g, const char *arch, const char *suffix, uint32_t n,
                              uint32_t *out, bool *present);

/* The family of general.architecture `arch`, or NULL. */
const struct weft_family *weft_family_find(const char *arch);
/* The families weft runs, comma-separated ("llama, qwen2, ..."), for messages. */
const char *weft_family_names(void);

/* The spec every dense family shares for the model's own tensors: the
 * embedding table, the final norm, and an output head that may be tied to
 * the embedding (absent). */
void weft_family_global_tensors(const struct weft_hparams *hp, struct weft_tensor_spec *spec);

/* One line naming what the model uses beyond a plain Llama block (for
 * `weft info`): "QK-norm, NEOX rope, head_dim 64 (q width 512)" or "plain". */
void weft_family_describe(const struct weft_hparams *hp, char *out, size_t cap);

/* A pre-norm attention block and a gated FFN with separate matrices:
 * attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down. With experts
 * (hp->n_expert), the FFN is a routed mixture instead: ffn_gate_inp (the
 * router) and ffn_gate/up/down_exps. */
void weft_family_dense_tensors(const struct weft_hparams *hp, struct weft_tensor_spec *spec);

#endif
