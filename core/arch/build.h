/* The shared builders a family's layer is written with: each appends one op
 * (or a few) to the step's list. The views in struct weft_build are the
 * step's activations on the device running the layer, one row per batch
 * row, F32; forward.c sets them (and moves them to the next device's
 * buffers at a split). Shapes in the comments: R rows, E = n_embd,
 * H / Hkv heads, D = head_dim (K), Dv = head_dim_v, F = n_ff. */
#ifndef WEFT_ARCH_BUILD_H
#define WEFT_ARCH_BUILD_H

#include "core/arch/family.h"
#include "core/kv.h"

struct weft_build {
    const struct weft_hparams *hp;
    const struct weft_layer_weights *w;   /* the layer's tensors, by id */
    struct weft_kv_pool *kv;
    struct weft_batch_view batch;
    struct weft_batch_view batch_w;       /* the same for the window group's layers (core/kv.h) */
    /* x (R, E) the residual stream; xb (R, E) its normed copy; q (R, H·D),
     * k (R, Hkv·D), v (R, Hkv·Dv); att (R, H·Dv); gate, up, hb (R, F) */
    struct weft_view x, xb, q, k, v, att, gate, up, hb;
    /* a mixture of experts' router logits (R, n_expert) F32, chosen experts (R, k) I32 and
     * their weights (R, k) F32; gate, up and hb then hold a row per (row, chosen expert):
     * (R·k, n_ff_exp) */
    struct weft_view moe_logits, moe_ids, moe_w;
    /* MLA (kv_latent): the head index of each (row, head) slot (R, H) I32, and the n_rot
     * identity (F32) */
    struct weft_view mla_ids, mla_eye;
    /* a hybrid model's recurrent layers (hp->full_attn_interval): qkv and its conv (R, C), z
     * and the heads' output o (R, Hv·S), beta and alpha (R, Hv), each row's state slot (R) I32
     * (core/kv.h); its attention layers' q with each head's output gate after it (R, H·2D) */
    struct weft_view ssm_qkv, ssm_conv, ssm_z, ssm_o, ssm_beta, ssm_alpha, state_slots, qgate;
    /* Gemma 4: the step's token ids (R) I32 and the model's own tensors (the per-layer
     * embeddings'); the per-layer inputs (R, n_layer · P) and a scratch as wide, P =
     * n_embd_per_layer; constants: ones (a weightless RMS norm's weight, as wide as the
     * widest head or the embedding) and each layer's router input scale (n_embd, n_layer) over
     * sqrt(n_embd); each layer's output scale on the host (NULL: none) */
    struct weft_view ids, ple, ple_tmp, ones, route_w;
    const struct weft_layer_weights *glob;
    const float *layer_scale;
    uint32_t n_rows;
    /* after the last layer's attention only these rows (ascending) go on:
     * the sampled ones and the hidden ones asked for */
    const uint32_t *keep;
    uint32_t n_keep, last_layer;
    /* the op list */
    struct weft_op *ops;
    size_t n_ops, cap_ops;
    bool nomem;                /* an op could not be appended */
    /* experts placed apart: a mixture layer's FFN ops go between these (forward.c switches
     * the device and b->w); NULL: one device */
    void (*experts_begin)(struct weft_build *b);
    void (*experts_end)(struct weft_build *b);
    void *owner;
    bool rope_long;            /* LongRoPE: a sequence may pass the original context */
};

/* A new op of `kind`, zeroed but for its kind (a scratch one when out of
 * memory: b->nomem says so). */
struct weft_op *weft_b_push(struct weft_build *b, enum weft_op_kind kind);

/* rows [first, first + n) of a weight matrix view (a fused matrix's part) */
struct weft_view weft_b_rows(struct weft_view w, int64_t first, int64_t n);

/* out = x / rms(x) · w (w: the norm's weight, a view of E floats) */
void weft_b_rmsnorm(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view out);
/* v = rmsnorm of each head's D values · w (w: D floats), in place: v's rows
 * seen as (rows · heads, D) */
void weft_b_head_rmsnorm(struct weft_build *b, struct weft_view v, struct weft_view w);
/* out = x · Wᵀ */
void weft_b_matmul(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view out);
/* out = x · Wᵀ + bias (bias: an F32 vector of W's rows) */
void weft_b_matmul_bias(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view bias,
                        struct weft_view out);
/* out += x · Wᵀ (the residual add fused into the matmul) */
void weft_b_matmul_add(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view out);
/* out = silu(gate) · up */
void weft_b_silu_mul(struct weft_build *b, struct weft_view gate, struct weft_view up, struct weft_view out);
/* out = act(gate) · up (a GLU: SiLU, GeLU-tanh) */
void weft_b_glu(struct weft_build *b, enum weft_glu_act act, struct weft_view gate, struct weft_view up,
                struct weft_view out);
/* out = a + b */
void weft_b_add(struct weft_build *b, struct weft_view a, struct weft_view bb, struct weft_view out);
/* rotate b->q, b->k in place at each row's position (the model's RoPE);
 * write b->k, b->v into layer l's paged cache slots */
void weft_b_rope_kv(struct weft_build *b, uint32_t l);
/* the same with this layer's own RoPE base and scale (a family whose layers
 * differ: Gemma's local and global ones) */
void weft_b_rope_kv_at(struct weft_build *b, uint32_t l, float freq_base, float freq_scale);
/* b->att = softmax(q kᵀ · scale) v over each row's sequence so far (causal,
 * GQA, through the block tables of layer l's cache) */
void weft_b_attention(struct weft_build *b, uint32_t l, float scale);
/* the same over the last `window` positions only (0: all) */
void weft_b_attention_window(struct weft_build *b, uint32_t l, float scale, uint32_t window);
/* The pieces most families share, over the layer's tensors (b->w):
 * xb = rmsnorm(x) · attn_norm; q, k, v = xb · Wq, Wk, Wvᵀ (+ the layer's Q/K/V
 * biases where it has them)                     (R, E) -> (R, H·D), (R, Hkv·D) ×2 */
void weft_b_attn_in(struct weft_build *b);
/* xb = rmsnorm(x) · ffn_norm; x += (silu(xb · Wgateᵀ) · (xb · Wupᵀ)) · Wdownᵀ   (R, E);
 * with experts (hp->n_expert), the routed mixture weft_b_moe_ffn instead */
void weft_b_ffn_swiglu(struct weft_build *b);
/* A routed mixture of SwiGLU experts (llama.cpp's build_moe_ffn with softmax gating):
 *   xb = rmsnorm(x) · ffn_norm; logits = xb · Wrouterᵀ                      (R, n_expert)
 *   ids, w = the top k experts of softmax(logits), w renormalised to sum 1  (R, k)
 *   g, u = xb · W_gate[e]ᵀ, xb · W_up[e]ᵀ for each chosen e                 (R·k, F_exp)
 *   x += Σ_j w_j · (silu(g_j) · u_j) · W_down[e_j]ᵀ                          (R, E) */
struct weft_moe_cfg {
    enum weft_moe_gating gating;
    bool norm;                 /* the chosen weights renormalised to sum 1 */
    float scale;               /* the weights times this (0: 1) */
    enum weft_glu_act act;     /* the experts' GLU (SiLU; gpt-oss: SWIGLU_OAI with alpha, limit) */
    float alpha, limit;
    enum weft_tensor_id norm_w;/* the FFN's input norm (FFN_NORM; gpt-oss: post_attention_norm) */
    bool xb_ready;             /* b->xb already holds the normed input (a shared expert used it) */
};
/* The router's and the experts' biases are used where the layer has them
 * (ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias). Without xb_ready the FFN runs on the
 * experts' device when they are placed apart (weft_b_experts_begin / end); a family that
 * adds ops before it (a shared expert) calls those itself. */
void weft_b_experts_begin(struct weft_build *b);
void weft_b_experts_end(struct weft_build *b);
void weft_b_moe_ffn(struct weft_build *b, const struct weft_moe_cfg *cfg);
/* xb = rmsnorm(x) · ffn_norm; x += (silu(xb · Wgateᵀ) · (xb · Wupᵀ)) · Wdownᵀ over the
 * layer's dense ffn_gate/up/down, even in a model with experts (DeepSeek's leading layers) */
void weft_b_ffn_dense(struct weft_build *b);
/* out = x · Wᵀ + bias + out (the residual add fused, with a bias) */
void weft_b_matmul_bias_add(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view bias,
                            struct weft_view out);
/* weft_b_attention_window with an attention sink per head (F32, n_head values) */
void weft_b_attention_sinks(struct weft_build *b, uint32_t l, float scale, uint32_t window, struct weft_view sinks);

/* Llama's layer (core/arch/llama.c), which Qwen2's is too: weft_b_attn_in
 * adds the Q/K/V biases a layer has, and the RoPE mode is the family's. */
void weft_llama_layer(struct weft_build *b, uint32_t l);

/* On the last layer, after attention: move the kept rows of b->att and b->x
 * to the front and narrow every view to them (as llama.cpp does, the rest of
 * the layer runs only for rows whose output is read). False when no row is
 * kept: the layer ends there (a prefill chunk that samples nothing). */
bool weft_b_keep_rows(struct weft_build *b, uint32_t l);
/* The same for a layer whose mixer wrote its rows to `out` instead of b->att (a recurrent
 * layer's o): out and b->x are packed. */
bool weft_b_keep_rows_of(struct weft_build *b, uint32_t l, struct weft_view out);

#endif
