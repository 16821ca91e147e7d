/* phi3: Phi-3 / Phi-4 (mini) dense models. Llama's block with Q, K and V in
 * one fused matrix (rows Q | K | V) and gate and up in one (rows gate | up),
 * both read through row views (no copies: each output row of a matmul is
 * its own dot product, so three views are the fused matmul exactly), NEOX
 * RoPE.
 *
 * One layer, R rows, E = n_embd, H·D and Hkv·D the Q and K/V widths, F = n_ff:
 *   xb = rmsnorm(x) · attn_norm                          (R, E)
 *   q | k | v = xb · Wqkvᵀ  (three row views of Wqkv)     (R, H·D), (R, Hkv·D) ×2
 *   rope(q, k) (NEOX); k, v -> paged cache
 *   att = softmax(q kᵀ / √D) v   (causal, GQA)            (R, H·D)
 *   x += att · Woᵀ                                        (R, E)
 *   xb = rmsnorm(x) · ffn_norm
 *   gate | up = xb · Wupᵀ  (two row views of ffn_up)       (R, F) ×2
 *   hb = silu(gate) · up;  x += hb · Wdownᵀ                (R, E) */
#include "core/arch/build.h"

#include <math.h>

static weft_status phi3_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    (void)g;
    hp->rope_mode = WEFT_ROPE_NEOX;
    return WEFT_OK;
}

static void phi3_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        /* LongRoPE (Phi-3 128k, Phi-4 mini): per-pair factors for short and
         * long contexts, cos/sin scaled by rope.scaling.attn_factor */
        s[WEFT_T_ROPE_LONG] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, hp->n_rot / 2, 1, 0};
        s[WEFT_T_ROPE_SHORT] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, hp->n_rot / 2, 1, 0};
        return;
    }
    uint32_t E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    s[WEFT_T_ATTN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_ATTN_QKV] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, Q + 2 * KV, 0};
    s[WEFT_T_ATTN_OUT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, Q, E, 0};
    s[WEFT_T_FFN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_FFN_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 2 * F, 0};
    s[WEFT_T_FFN_DOWN] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, E, 0};
}

static void phi3_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_view *w = b->w->t;
    int64_t Q = b->q.ne0, KV = b->k.ne0, F = b->gate.ne0;
    /* xb = rmsnorm(x) · attn_norm                                     (R, E) */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_NORM], b->xb);
    /* q | k | v = xb · Wqkvᵀ, through row views        (R, H·D), (R, Hkv·D) ×2 */
    weft_b_matmul(b, b->xb, weft_b_rows(w[WEFT_T_ATTN_QKV], 0, Q), b->q);
    weft_b_matmul(b, b->xb, weft_b_rows(w[WEFT_T_ATTN_QKV], Q, KV), b->k);
    weft_b_matmul(b, b->xb, weft_b_rows(w[WEFT_T_ATTN_QKV], Q + KV, KV), b->v);
    /* rotate q, k by position (NEOX); k, v into the cache */
    weft_b_rope_kv(b, l);
    /* att = softmax(q kᵀ / √D) v                                    (R, H·D) */
    weft_b_attention(b, l, 1.0f / sqrtf((float)b->hp->head_dim));
    if (!weft_b_keep_rows(b, l)) return;
    /* x += att · Woᵀ                                                  (R, E) */
    weft_b_matmul_add(b, b->att, w[WEFT_T_ATTN_OUT], b->x);
    /* xb = rmsnorm(x) · ffn_norm                                      (R, E) */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_NORM], b->xb);
    /* gate | up = xb · Wupᵀ, through row views                     (R, F) ×2 */
    weft_b_matmul(b, b->xb, weft_b_rows(w[WEFT_T_FFN_UP], 0, F), b->gate);
    weft_b_matmul(b, b->xb, weft_b_rows(w[WEFT_T_FFN_UP], F, F), b->up);
    /* x += (silu(gate) · up) · Wdownᵀ                                 (R, E) */
    weft_b_silu_mul(b, b->gate, b->up, b->hb);
    weft_b_matmul_add(b, b->hb, w[WEFT_T_FFN_DOWN], b->x);
}

const struct weft_family weft_family_phi3 = {
    .arch = "phi3",
    .hparams = phi3_hparams,
    .tensors = phi3_tensors,
    .layer = phi3_layer,
};
