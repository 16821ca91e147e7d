/* gpt-oss: OpenAI's open-weight mixtures of experts (gpt-oss-20b, -120b).
 * Llama-like attention with biases on Q, K, V and the output, a learned sink
 * logit per head, sliding-window (even layers) and full attention
 * alternating, YaRN; then a routed mixture whose router and experts have
 * biases, the top k chosen by the router's logits and weighted by the softmax
 * of those k only, and gpt-oss's clamped SwiGLU (alpha 1.702, limit 7).
 *
 * One layer, R rows, E = n_embd, H·D / Hkv·D the Q and K/V widths, k of X
 * experts of F rows:
 *   xb = rmsnorm(x) · attn_norm
 *   q, k, v = xb · Wq, Wk, Wvᵀ + bq, bk, bv
 *   rope(q, k) (NEOX, YaRN); k, v -> paged cache (the window's on even layers)
 *   att = softmax([q kᵀ / √D, sink_h]) v (the sink: a position with no value)
 *   x += att · Woᵀ + bo
 *   xb = rmsnorm(x) · post_attention_norm
 *   ids = top k of xb · Wrᵀ + br; w = softmax of those k logits
 *   x += Σ_j w_j · swiglu_oai(xb·W_gate[e_j]ᵀ + bg, xb·W_up[e_j]ᵀ + bu) · W_down[e_j]ᵀ + bd */
#include "core/arch/build.h"

#include <math.h>

static weft_status gpt_oss_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    hp->rope_mode = WEFT_ROPE_NEOX;
    if (!hp->n_expert) return weft_error(WEFT_ERR_FORMAT, "model: gpt-oss without gpt-oss.expert_count");
    weft_status st = weft_hp_opt_u32(g, hp->arch, "attention.sliding_window", &hp->n_swa);
    if (st) return st;
    if (!hp->n_swa) return weft_error(WEFT_ERR_FORMAT, "model: missing key 'gpt-oss.attention.sliding_window'");
    /* every other layer (the even ones) attends a window, at the model's own RoPE */
    hp->swa_pattern = 2;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    return WEFT_OK;
}

static void gpt_oss_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        return;
    }
    const uint32_t E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
    const uint32_t VV = hp->n_head_kv * hp->head_dim_v, X = hp->n_expert, F = hp->n_ff_exp;
    weft_family_dense_tensors(hp, s);  /* attention, the router and the experts */
    s[WEFT_T_FFN_NORM].use = WEFT_USE_NONE;  /* the FFN's norm is post_attention_norm */
    s[WEFT_T_ATTN_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_ATTN_Q_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, Q, 1, 0};
    s[WEFT_T_ATTN_K_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, KV, 1, 0};
    s[WEFT_T_ATTN_V_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, VV, 1, 0};
    s[WEFT_T_ATTN_OUT_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_ATTN_SINKS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head, 1, 0};
    s[WEFT_T_FFN_GATE_INP_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, X, 1, 0};
    s[WEFT_T_FFN_GATE_EXPS_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, X, 0};
    s[WEFT_T_FFN_UP_EXPS_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, X, 0};
    s[WEFT_T_FFN_DOWN_EXPS_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, X, 0};
}

static void gpt_oss_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_view *w = b->w->t;
    /* xb = rmsnorm(x) · attn_norm; q, k, v = xb · Wq, Wk, Wvᵀ + biases */
    weft_b_attn_in(b);
    /* rotate q, k (NEOX, YaRN); k, v into the cache */
    weft_b_rope_kv(b, l);
    /* att = softmax over the window (even layers) or all, with the head's sink */
    weft_b_attention_sinks(b, l, 1.0f / sqrtf((float)b->hp->head_dim), weft_hp_window(b->hp, l), w[WEFT_T_ATTN_SINKS]);
    if (!weft_b_keep_rows(b, l)) return;
    /* x += att · Woᵀ + bo */
    weft_b_matmul_bias_add(b, b->att, w[WEFT_T_ATTN_OUT], w[WEFT_T_ATTN_OUT_B], b->x);
    /* x += the routed experts of rmsnorm(x) · post_attention_norm */
    const struct weft_moe_cfg cfg = {.gating = WEFT_MOE_SOFTMAX_TOPK, .norm = false, .act = WEFT_GLU_SWIGLU_OAI,
                                     .alpha = 1.702f, .limit = 7.0f, .norm_w = WEFT_T_ATTN_POST_NORM};
    weft_b_moe_ffn(b, &cfg);
}

const struct weft_family weft_family_gpt_oss = {
    .arch = "gpt-oss",
    .hparams = gpt_oss_hparams,
    .tensors = gpt_oss_tensors,
    .layer = gpt_oss_layer,
    .experts = true,
};
