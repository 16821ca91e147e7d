/* gemma3: Gemma 3 (text). Embeddings scaled by √E; per-head RMS norms on Q
 * and K (QK-norm); RMS norms after attention and after the FFN as well as
 * before them; a GeLU(tanh)-gated FFN; interleaved local and global layers:
 * a local layer attends to the last n_swa positions only and rotates with
 * its own RoPE base (rope.freq_base_swa, scale 1), a global one attends to
 * everything with the model's base and scaling; NEOX RoPE.
 *
 * x = token_embd[ids] · √E, then per layer (R rows, E = n_embd, H·D and
 * Hkv·D the Q and K/V widths, F = n_ff, W the layer's window or all):
 *   xb = rmsnorm(x) · attn_norm                          (R, E)
 *   q, k, v = xb · Wq, Wk, Wvᵀ                            (R, H·D), (R, Hkv·D) ×2
 *   q = rmsnorm(q per head) · q_norm;  k likewise          (R·H, D), (R·Hkv, D)
 *   rope(q, k) at the layer's base (NEOX); k, v -> cache
 *   att = softmax(q kᵀ · s) v over the last W positions    (R, H·D)
 *   x += rmsnorm(att · Woᵀ) · post_attention_norm         (R, E)
 *   xb = rmsnorm(x) · ffn_norm
 *   hb = gelu(xb · Wgateᵀ) · (xb · Wupᵀ)                  (R, F)
 *   x += rmsnorm(hb · Wdownᵀ) · post_ffw_norm             (R, E)
 * with s = 1/√D (query_pre_attn_scalar = D), except Gemma 3 27B's
 * E/H = 168, as llama.cpp has it. */
#include "core/arch/build.h"

#include <math.h>
#include <string.h>

static weft_status gemma3_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    hp->rope_mode = WEFT_ROPE_NEOX;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    /* Gemma 3's layout when a file names no pattern: five local layers, then
     * a global one (llama.cpp's value for gemma3; converters write only the
     * window); the local RoPE base 10000 likewise */
    hp->swa_pattern = 6;
    hp->rope_freq_base_swa = 10000.0f;
    weft_status st;
    if ((st = weft_hp_opt_u32(g, hp->arch, "attention.sliding_window", &hp->n_swa)) ||
        (st = weft_hp_opt_u32(g, hp->arch, "attention.sliding_window_pattern", &hp->swa_pattern)) ||
        (st = weft_hp_opt_f32(g, hp->arch, "rope.freq_base_swa", &hp->rope_freq_base_swa)))
        return st;
    if (!hp->n_swa) return weft_error(WEFT_ERR_FORMAT, "model: missing key '%s.attention.sliding_window'", hp->arch);
    if (!hp->swa_pattern)
        return weft_error(WEFT_ERR_FORMAT, "model: '%s.attention.sliding_window_pattern' is 0", hp->arch);
    if (!(hp->rope_freq_base_swa > 0))
        return weft_error(WEFT_ERR_FORMAT, "model: '%s.rope.freq_base_swa' must be > 0", hp->arch);
    /* soft-capping belongs to Gemma 2 (and 4): a Gemma 3 file with it is
     * refused by name rather than run without it */
    static const char *const refused[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        float v = 0;
        if ((st = weft_hp_opt_f32(g, hp->arch, refused[i], &v))) return st;
        if (v != 0)
            return weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.%s %g is not supported", hp->arch, refused[i], v);
    }
    hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                       : 1.0f / sqrtf((float)hp->head_dim);
    return WEFT_OK;
}

static void gemma3_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        return;
    }
    weft_family_dense_tensors(hp, s);
    s[WEFT_T_ATTN_Q_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->head_dim, 1, 0};
    s[WEFT_T_ATTN_K_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->head_dim, 1, 0};
    s[WEFT_T_ATTN_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_embd, 1, 0};
    s[WEFT_T_FFN_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_embd, 1, 0};
}

static void gemma3_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *w = b->w->t;
    const uint32_t window = weft_hp_window(hp, l);
    /* xb = rmsnorm(x) · attn_norm; q, k, v = xb · Wq, Wk, Wvᵀ      (R, H·D), (R, Hkv·D) */
    weft_b_attn_in(b);
    /* q, k = rmsnorm per head · q_norm, k_norm                (R·H, D), (R·Hkv, D) */
    weft_b_head_rmsnorm(b, b->q, w[WEFT_T_ATTN_Q_NORM]);
    weft_b_head_rmsnorm(b, b->k, w[WEFT_T_ATTN_K_NORM]);
    /* rotate q, k at the layer's base (NEOX); k, v into the cache */
    if (window) weft_b_rope_kv_at(b, l, hp->rope_freq_base_swa, 1.0f);
    else weft_b_rope_kv(b, l);
    /* att = softmax(q kᵀ · s) v over the window (local) or all (global)   (R, H·D) */
    weft_b_attention_window(b, l, hp->attn_scale, window);
    if (!weft_b_keep_rows(b, l)) return;
    /* x += rmsnorm(att · Woᵀ) · post_attention_norm                   (R, E) */
    weft_b_matmul(b, b->att, w[WEFT_T_ATTN_OUT], b->xb);
    weft_b_rmsnorm(b, b->xb, w[WEFT_T_ATTN_POST_NORM], b->xb);
    weft_b_add(b, b->x, b->xb, b->x);
    /* hb = gelu(xb · Wgateᵀ) · (xb · Wupᵀ), xb = rmsnorm(x) · ffn_norm    (R, F) */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_NORM], b->xb);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE], b->gate);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP], b->up);
    weft_b_glu(b, WEFT_GLU_GELU_TANH, b->gate, b->up, b->hb);
    /* x += rmsnorm(hb · Wdownᵀ) · post_ffw_norm                       (R, E) */
    weft_b_matmul(b, b->hb, w[WEFT_T_FFN_DOWN], b->xb);
    weft_b_rmsnorm(b, b->xb, w[WEFT_T_FFN_POST_NORM], b->xb);
    weft_b_add(b, b->x, b->xb, b->x);
}

const struct weft_family weft_family_gemma3 = {
    .arch = "gemma3",
    .hparams = gemma3_hparams,
    .tensors = gemma3_tensors,
    .layer = gemma3_layer,
};
