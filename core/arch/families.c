/* The registry of families (family.h). */
#include "core/arch/family.h"

#include <stdio.h>
#include <string.h>

extern const struct weft_family weft_family_llama, weft_family_qwen2, weft_family_qwen3, weft_family_phi3,
    weft_family_gemma3, weft_family_qwen3moe, weft_family_gpt_oss, weft_family_deepseek2, weft_family_qwen35,
    weft_family_qwen35moe, weft_family_qwen3next, weft_family_gemma4;

static const struct weft_family *const families[] = {
    &weft_family_llama,
    &weft_family_qwen2,
    &weft_family_qwen3,
    &weft_family_phi3,
    &weft_family_gemma3,
    &weft_family_qwen3moe,
    &weft_family_gpt_oss,
    &weft_family_deepseek2,
    &weft_family_qwen35,
    &weft_family_qwen35moe,
    &weft_family_qwen3next,
    &weft_family_gemma4,
};

const struct weft_family *weft_family_find(const char *arch)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (!strcmp(families[i]->arch, arch)) return families[i];
    return NULL;
}

const char *weft_family_names(void)
{
    return "llama (with or without experts), qwen2, qwen3, qwen3moe, qwen35, qwen35moe, qwen3next, gpt-oss, deepseek2, phi3, gemma3, gemma4";
}

void weft_family_global_tensors(const struct weft_hparams *hp, struct weft_tensor_spec *spec)
{
    spec[WEFT_T_TOKEN_EMBD] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_embd, hp->n_vocab, 0};
    spec[WEFT_T_OUTPUT_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_embd, 1, 0};
    spec[WEFT_T_OUTPUT] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, hp->n_embd, hp->n_vocab, 0};
}

void weft_family_dense_tensors(const struct weft_hparams *hp, struct weft_tensor_spec *s)
{
    uint32_t E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    uint32_t O = hp->n_head * hp->head_dim_v, VV = hp->n_head_kv * hp->head_dim_v;
    s[WEFT_T_ATTN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_ATTN_Q] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, Q, 0};
    s[WEFT_T_ATTN_K] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, KV, 0};
    s[WEFT_T_ATTN_V] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, VV, 0};
    s[WEFT_T_ATTN_OUT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, O, E, 0};
    s[WEFT_T_FFN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    if (hp->n_expert) {
        const uint32_t X = hp->n_expert, FE = hp->n_ff_exp;
        s[WEFT_T_FFN_GATE_INP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, X, 0};
        s[WEFT_T_FFN_GATE_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, FE, X};
        s[WEFT_T_FFN_UP_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, FE, X};
        s[WEFT_T_FFN_DOWN_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, FE, E, X};
        return;
    }
    s[WEFT_T_FFN_GATE] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, 0};
    s[WEFT_T_FFN_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, 0};
    s[WEFT_T_FFN_DOWN] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, E, 0};
}

void weft_family_describe(const struct weft_hparams *hp, char *out, size_t cap)
{
    struct weft_tensor_spec spec[WEFT_T_COUNT_] = {0};
    uint32_t l0 = 0;  /* the first attention layer's tensors (a hybrid's recurrent ones are described apart) */
    while (l0 + 1 < hp->n_layer && weft_hp_recurrent(hp, l0)) l0++;
    hp->family->tensors(hp, l0, spec);
    size_t n = 0;
    out[0] = 0;
#define ADD(...) do { if (n < cap) n += (size_t)snprintf(out + n, cap - n, "%s", n ? ", " : ""); \
                      if (n < cap) n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__); } while (0)
    if (spec[WEFT_T_ATTN_Q_B].use) ADD("QKV bias");
    if (spec[WEFT_T_ATTN_QKV].use) ADD("fused QKV");
    if (spec[WEFT_T_ATTN_Q_NORM].use) ADD("QK-norm");
    if (spec[WEFT_T_ATTN_POST_NORM].use) ADD("post-attention/FFN norms");
    if (hp->rope_mode == WEFT_ROPE_NEOX) ADD("NEOX rope");
    if (hp->swa_pattern) ADD("sliding window %u on %u of every %u layers (local rope base %g)", hp->n_swa,
                             hp->swa_pattern - 1, hp->swa_pattern, hp->rope_freq_base_swa);
    if (hp->embd_scale) ADD("embeddings x%g", hp->embd_scale);
    if (hp->rope_freq_scale != 1.0f)
        ADD("%s rope scaling x%g%s", hp->rope_ext_factor != 0 ? "YaRN" : "linear", 1.0 / hp->rope_freq_scale,
            hp->rope_yarn_log_mul != 0 ? " (with DeepSeek's log multiplier)" : "");
    if (hp->head_dim * hp->n_head != hp->n_embd) ADD("head_dim %u (q width %u)", hp->head_dim, hp->head_dim * hp->n_head);
    if (hp->n_expert) ADD("%u of %u experts of %u rows per token", hp->n_expert_used, hp->n_expert, hp->n_ff_exp);
    if (hp->n_expert_shared) ADD("%u shared", hp->n_expert_shared);
    if (hp->n_ff_shexp) ADD("a gated shared expert of %u rows", hp->n_ff_shexp);
    if (hp->expert_groups) ADD("experts in %u groups, %u searched", hp->expert_groups, hp->expert_group_used);
    if (hp->full_attn_interval)
        ADD("Gated DeltaNet on %u of %u layers (%u q/k and %u v heads of %u, conv %u), gated attention on the rest",
            hp->n_layer - weft_hp_kv_layers(hp), hp->n_layer, hp->ssm_groups, hp->ssm_dt_rank, hp->ssm_state,
            hp->ssm_conv_kernel);
    if (hp->kv_latent) ADD("latent KV cache (MLA: %u + %u per token)", hp->n_rot, hp->kv_lora_rank);
    if (hp->head_dim_swa || hp->n_head_kv_swa)
        ADD("sliding layers %u KV heads of %u, %u rotated", weft_hp_n_head_kv(hp, 0), weft_hp_head_dim(hp, 0),
            weft_hp_n_rot(hp, 0));
    if (hp->n_kv_shared) ADD("the last %u layers read earlier layers' KV", hp->n_kv_shared);
    if (hp->n_ff_kv_shared) ADD("their FFN %u rows", hp->n_ff_kv_shared);
    if (hp->n_embd_per_layer) ADD("per-layer embeddings of %u", hp->n_embd_per_layer);
    if (hp->final_softcap != 0) ADD("logits soft-capped at %g", hp->final_softcap);
#undef ADD
    if (!out[0]) snprintf(out, cap, "plain");
}
