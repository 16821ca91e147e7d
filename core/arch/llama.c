/* llama: Llama 1/2/3, SmolLM, Mistral-style dense models (llama.cpp's
 * "llama" architecture), RMSNorm, SwiGLU, RoPE on pairs (2i, 2i+1), with
 * Llama 3.1's frequency factors (rope_freqs.weight) and linear or YaRN
 * scaling where the file has them; with llama.expert_count, Mixtral's routed
 * mixture of SwiGLU experts for the FFN (feed_forward_length: an expert's).
 *
 * One layer, R rows, E = n_embd, H·D = n_head · head_dim, Hkv·D for K and V,
 * F = n_ff:
 *   xb = rmsnorm(x) · attn_norm                          (R, E)
 *   q, k, v = xb · Wq, Wk, Wvᵀ                            (R, H·D), (R, Hkv·D) ×2
 *   rope(q, k); k, v -> paged cache
 *   att = softmax(q kᵀ / √D) v   (causal, GQA)            (R, H·D)
 *   x += att · Woᵀ                                        (R, E)
 *   xb = rmsnorm(x) · ffn_norm
 *   hb = silu(xb · Wgateᵀ) · (xb · Wupᵀ)                  (R, F)
 *   x += hb · Wdownᵀ */
#include "core/arch/build.h"

#include <math.h>

static void llama_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        /* Llama 3.1+: each rotated pair's frequency divided by a factor */
        s[WEFT_T_ROPE_FREQS] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, hp->n_rot / 2, 1, 0};
        return;
    }
    weft_family_dense_tensors(hp, s);
}

void weft_llama_layer(struct weft_build *b, uint32_t l)
{
    /* xb = rmsnorm(x) · attn_norm; q, k, v = xb · Wq, Wk, Wvᵀ      (R, H·D), (R, Hkv·D) */
    weft_b_attn_in(b);
    /* rotate q, k by position; k, v into the cache */
    weft_b_rope_kv(b, l);
    /* att = softmax(q kᵀ / √D) v                                    (R, H·D) */
    weft_b_attention(b, l, 1.0f / sqrtf((float)b->hp->head_dim));
    if (!weft_b_keep_rows(b, l)) return;
    /* x += att · Woᵀ                                                  (R, E) */
    weft_b_matmul_add(b, b->att, b->w->t[WEFT_T_ATTN_OUT], b->x);
    /* x += swiglu FFN of rmsnorm(x) · ffn_norm                        (R, E) */
    weft_b_ffn_swiglu(b);
}

const struct weft_family weft_family_llama = {
    .arch = "llama",
    .tensors = llama_tensors,
    .layer = weft_llama_layer,
    .experts = true,
};
