/* qwen3: Qwen3 dense models; qwen3moe: the same attention with a routed mixture of
 * experts for the FFN (Qwen3-30B-A3B, 235B-A22B: weft_b_moe_ffn, softmax gating, the top
 * k weights renormalised). Llama's block with per-head RMS norms on Q and
 * K before RoPE (QK-norm), NEOX RoPE (pairs (i, i + D/2)), and a head size
 * of its own (attention.key_length: H·D need not be E).
 *
 * One layer, R rows, E = n_embd, H·D and Hkv·D the Q and K/V widths, F = n_ff:
 *   xb = rmsnorm(x) · attn_norm                          (R, E)
 *   q, k, v = xb · Wq, Wk, Wvᵀ                            (R, H·D), (R, Hkv·D) ×2
 *   q = rmsnorm(q per head) · q_norm;  k likewise          (R·H, D), (R·Hkv, D)
 *   rope(q, k) (NEOX); k, v -> paged cache
 *   att = softmax(q kᵀ / √D) v   (causal, GQA)            (R, H·D)
 *   x += att · Woᵀ                                        (R, E)
 *   xb = rmsnorm(x) · ffn_norm
 *   hb = silu(xb · Wgateᵀ) · (xb · Wupᵀ)                  (R, F)
 *   x += hb · Wdownᵀ */
#include "core/arch/build.h"

#include <math.h>

static weft_status qwen3_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    (void)g;
    hp->rope_mode = WEFT_ROPE_NEOX;
    return WEFT_OK;
}

static void qwen3_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        return;
    }
    weft_family_dense_tensors(hp, s);
    s[WEFT_T_ATTN_Q_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->head_dim, 1, 0};
    s[WEFT_T_ATTN_K_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->head_dim, 1, 0};
}

static void qwen3_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_view *w = b->w->t;
    /* xb = rmsnorm(x) · attn_norm; q, k, v = xb · Wq, Wk, Wvᵀ      (R, H·D), (R, Hkv·D) */
    weft_b_attn_in(b);
    /* q, k = rmsnorm per head · q_norm, k_norm                (R·H, D), (R·Hkv, D) */
    weft_b_head_rmsnorm(b, b->q, w[WEFT_T_ATTN_Q_NORM]);
    weft_b_head_rmsnorm(b, b->k, w[WEFT_T_ATTN_K_NORM]);
    /* rotate q, k by position (NEOX); k, v into the cache */
    weft_b_rope_kv(b, l);
    /* att = softmax(q kᵀ / √D) v                                    (R, H·D) */
    weft_b_attention(b, l, 1.0f / sqrtf((float)b->hp->head_dim));
    if (!weft_b_keep_rows(b, l)) return;
    /* x += att · Woᵀ                                                  (R, E) */
    weft_b_matmul_add(b, b->att, w[WEFT_T_ATTN_OUT], b->x);
    /* x += swiglu FFN of rmsnorm(x) · ffn_norm                        (R, E) */
    weft_b_ffn_swiglu(b);
}

const struct weft_family weft_family_qwen3 = {
    .arch = "qwen3",
    .hparams = qwen3_hparams,
    .tensors = qwen3_tensors,
    .layer = qwen3_layer,
};

static weft_status qwen3moe_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    if (!hp->n_expert) return weft_error(WEFT_ERR_FORMAT, "model: qwen3moe without qwen3moe.expert_count");
    return qwen3_hparams(g, hp);
}

const struct weft_family weft_family_qwen3moe = {
    .arch = "qwen3moe",
    .hparams = qwen3moe_hparams,
    .tensors = qwen3_tensors,
    .layer = qwen3_layer,
    .experts = true,
};
