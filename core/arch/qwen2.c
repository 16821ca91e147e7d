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

#include <math.h>

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
    s[WEFT_T_ATTN_Q_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head * hp->head_dim, 1};
    s[WEFT_T_ATTN_K_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head_kv * hp->head_dim, 1};
    s[WEFT_T_ATTN_V_B] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_head_kv * hp->head_dim_v, 1};
}

static void qwen2_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_view *w = b->w->t;
    /* xb = rmsnorm(x) · attn_norm                                     (R, E) */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_NORM], b->xb);
    /* q, k, v = xb · Wq, Wk, Wvᵀ + their biases            (R, H·D), (R, Hkv·D) */
    weft_b_matmul_bias(b, b->xb, w[WEFT_T_ATTN_Q], w[WEFT_T_ATTN_Q_B], b->q);
    weft_b_matmul_bias(b, b->xb, w[WEFT_T_ATTN_K], w[WEFT_T_ATTN_K_B], b->k);
    weft_b_matmul_bias(b, b->xb, w[WEFT_T_ATTN_V], w[WEFT_T_ATTN_V_B], b->v);
    /* rotate q, k by position (NEOX); k, v into the cache */
    weft_b_rope_kv(b, l);
    /* att = softmax(q kᵀ / √D) v                                    (R, H·D) */
    weft_b_attention(b, l, 1.0f / sqrtf((float)b->hp->head_dim));
    if (!weft_b_keep_rows(b, l)) return;
    /* x += att · Woᵀ                                                  (R, E) */
    weft_b_matmul_add(b, b->att, w[WEFT_T_ATTN_OUT], b->x);
    /* x += swiglu FFN of rmsnorm(x) · ffn_norm                        (R, E) */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_NORM], b->xb);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE], b->gate);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP], b->up);
    weft_b_silu_mul(b, b->gate, b->up, b->hb);
    weft_b_matmul_add(b, b->hb, w[WEFT_T_FFN_DOWN], b->x);
}

const struct weft_family weft_family_qwen2 = {
    .arch = "qwen2",
    .hparams = qwen2_hparams,
    .tensors = qwen2_tensors,
    .layer = qwen2_layer,
};
