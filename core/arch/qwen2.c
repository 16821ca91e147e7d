/* qwen2: Qwen2 / Qwen2.5 dense models. Llama's block with biases on the Q,
 * K and V projections (not on the output one) and NEOX RoPE.
 *
 * One layer, R rows, E = n_embd, H·D and Hkv·D the Q and K/V widths, F = n_ff:
 *   xb = rmsnorm(x) · attn_norm                          (R, E)
 *   q, k, v = xb · Wq, Wk, Wvᵀ + bq, bk, bv               (R, H·D), (R, Hkv·D) ×2
 *   rope(q, k) (NEOX); k, v -> paged cache
 *   att = softmax(q kᵀ / √D) v   (causal, GQA)            (R, H·D)
 *   x += att · Woᵀ                                        (R, E)
 *   xb = rmsnorm(x) · ffn_norm
 *   hb = silu(xb · Wgateᵀ) · (xb · Wupᵀ)                  (R, F)
 *   x += hb · Wdownᵀ */
#include "core/arch/build.h"

static weft_status qwen2_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    (void)g;
    hp->rope_mode = WEFT_ROPE_NEOX;
    return WEFT_OK;
}

static void qwen2_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        return;
    }
    weft_family_dense_tensors(hp, s);
    s[WEFT_T_ATTN_Q_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head * hp->head_dim, 1, 0};
    s[WEFT_T_ATTN_K_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head_kv * hp->head_dim, 1, 0};
    s[WEFT_T_ATTN_V_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head_kv * hp->head_dim_v, 1, 0};
}

const struct weft_family weft_family_qwen2 = {
    .arch = "qwen2",
    .hparams = qwen2_hparams,
    .tensors = qwen2_tensors,
    .layer = weft_llama_layer,  /* the biases come in through weft_b_attn_in */
};
