/* deepseek2: DeepSeek V2 / V3 / R1 (and Kimi K2's layout): multi-head latent
 * attention (MLA) whose cache holds a compressed latent instead of K and V per
 * head, leading dense layers, then routed experts (sigmoid or softmax gating,
 * a choice bias, renormalised and scaled weights) plus shared experts.
 *
 * MLA in its absorbed form (llama.cpp's for decode, used here for every row):
 * with P = n_rot, L = kv_lora_rank, N = qk_nope = mla_qk - P, V = mla_v, per
 * token the cache keeps c = rmsnorm(latent) (L) and k_pe = rope(k_pe) (P), as
 * one K row [k_pe | c] of a single KV head (head_dim P + L), whose tail c is
 * the V (head_dim_v L, backends/backend.h's v_in_k). One layer, R rows:
 *   xb = rmsnorm(x) · attn_norm
 *   q = (rmsnorm(xb · Wq_aᵀ) · q_a_norm) · Wq_bᵀ  (or xb · Wqᵀ)    (R, H·(N+P))
 *   [c | k_pe] = xb · Wkv_aᵀ;  c = rmsnorm(c) · kv_a_norm          (R, L+P)
 *   K row = [k_pe | c];  Q head h = [q_pe_h | q_nope_h · W_kb,hᵀ]  (absorbed: L wide)
 *   rope(q_pe, k_pe) (the first P of each head); K -> the latent cache
 *   o_h = softmax(Q_h · Kᵀ / √(N+P)) · C                            (R·H, L)
 *   x += [o_h · W_vb,hᵀ]_h · Woᵀ                                    (R, H·V) -> (R, E)
 *   the FFN: dense for the first n_dense_lead layers, else
 *   xb = rmsnorm(x) · ffn_norm; x += shared experts' SwiGLU(xb) + routed experts of xb
 * The per-head matrices W_kb, W_vb are MATMUL_IDs with the head as the expert;
 * moving the roped parts into place is a MATMUL by the n_rot identity (exact). */
#include "core/arch/build.h"

#include <math.h>
#include <stdio.h>

static weft_status deepseek2_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    const char *a = hp->arch;
    weft_status st;
    uint32_t gating = 0;
    bool norm = false;
    hp->expert_weights_scale = 0;
    if ((st = weft_hp_opt_u32(g, a, "attention.q_lora_rank", &hp->q_lora_rank)) ||
        (st = weft_hp_opt_u32(g, a, "attention.kv_lora_rank", &hp->kv_lora_rank)) ||
        (st = weft_hp_opt_u32(g, a, "attention.key_length_mla", &hp->mla_qk)) ||
        (st = weft_hp_opt_u32(g, a, "attention.value_length_mla", &hp->mla_v)) ||
        (st = weft_hp_opt_u32(g, a, "leading_dense_block_count", &hp->n_dense_lead)) ||
        (st = weft_hp_opt_u32(g, a, "expert_shared_count", &hp->n_expert_shared)) ||
        (st = weft_hp_opt_u32(g, a, "expert_gating_func", &gating)) ||
        (st = weft_hp_opt_f32(g, a, "expert_weights_scale", &hp->expert_weights_scale)))
        return st;
    char key[96];
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    if ((st = weft_gguf_get_bool(g, key, &norm)) && st != WEFT_ERR_NOT_FOUND) return st;
    hp->expert_weights_norm = norm;
    if (!hp->kv_lora_rank || !hp->mla_qk || !hp->mla_v)
        return weft_error(WEFT_ERR_UNSUPPORTED, "model: deepseek2 without %s.attention.kv_lora_rank, key_length_mla and "
                          "value_length_mla (an older file's un-split MLA) is not supported", a);
    /* the cache's shape is the latent's: K = [roped part | latent], V = the latent */
    if (hp->n_head_kv != 1 || hp->head_dim != hp->n_rot + hp->kv_lora_rank || hp->head_dim_v != hp->kv_lora_rank ||
        hp->mla_qk <= hp->n_rot)
        return weft_error(WEFT_ERR_FORMAT, "model: deepseek2's latent cache: head_count_kv %u, key_length %u, "
                          "value_length %u, rope dims %u, kv_lora_rank %u, key_length_mla %u do not fit", hp->n_head_kv,
                          hp->head_dim, hp->head_dim_v, hp->n_rot, hp->kv_lora_rank, hp->mla_qk);
    if (hp->n_expert && (gating > 2))
        return weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.expert_gating_func %u (1 softmax, 2 sigmoid)", a, gating);
    /* Under YaRN (f = 1 / freq_scale), llama.cpp's (llama-context.cpp, models/deepseek2.cpp),
     * in its float order: the rope's attn_factor is A = y / (1 + 0.1 ln f) · rope_attn_factor,
     * y = get_mscale(f, 1) = 1 + 0.1 ln f (f > 1; else 1) without a yarn_log_multiplier m and
     * get_mscale's ratio 1 with one (m read as m / 0.1, DeepSeek's special case); Q·K's scale
     * is mscale² / √mla_qk, mscale = A (1 + 0.1 ln f) (1 + 0.1 (m / 0.1) ln f). Without YaRN:
     * 1 / √mla_qk. */
    if (hp->rope_ext_factor != 0) {
        const float f = 1.0f / hp->rope_freq_scale, log_mul = hp->rope_yarn_log_mul / 0.1f;
        float A = log_mul != 0 ? 1.0f : f <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(f) + 1.0f;
        A *= 1.0f / (1.0f + 0.1f * logf(f));
        A *= hp->rope_attn_factor != 0 ? hp->rope_attn_factor : 1.0f;
        hp->rope_attn_factor = A;
        const float org = A * (1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale));
        const float mscale = org * (1.0f + 0.1f * log_mul * logf(1.0f / hp->rope_freq_scale));
        hp->attn_scale = 1.0f * mscale * mscale / sqrtf((float)hp->mla_qk);
    }
    if (hp->n_dense_lead > hp->n_layer) hp->n_dense_lead = hp->n_layer;
    hp->expert_gating = gating == 2 ? WEFT_MOE_SIGMOID : WEFT_MOE_SOFTMAX;
    hp->kv_latent = true;
    hp->rope_mode = WEFT_ROPE_NORMAL;
    return WEFT_OK;
}

static void deepseek2_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        return;
    }
    const uint32_t E = hp->n_embd, H = hp->n_head, P = hp->n_rot, L = hp->kv_lora_rank;
    const uint32_t N = hp->mla_qk - P, V = hp->mla_v;
    s[WEFT_T_ATTN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    if (hp->q_lora_rank) {
        s[WEFT_T_ATTN_Q_A] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, hp->q_lora_rank, 0};
        s[WEFT_T_ATTN_Q_A_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->q_lora_rank, 1, 0};
        s[WEFT_T_ATTN_Q_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->q_lora_rank, H * (N + P), 0};
    } else {
        s[WEFT_T_ATTN_Q] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, H * (N + P), 0};
    }
    s[WEFT_T_ATTN_KV_A_MQA] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, L + P, 0};
    s[WEFT_T_ATTN_KV_A_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, L, 1, 0};
    s[WEFT_T_ATTN_K_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, N, L, H};
    s[WEFT_T_ATTN_V_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, L, V, H};
    s[WEFT_T_ATTN_OUT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, H * V, E, 0};
    s[WEFT_T_FFN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    if (l < hp->n_dense_lead || !hp->n_expert) {
        s[WEFT_T_FFN_GATE] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, hp->n_ff, 0};
        s[WEFT_T_FFN_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, hp->n_ff, 0};
        s[WEFT_T_FFN_DOWN] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->n_ff, E, 0};
        return;
    }
    const uint32_t X = hp->n_expert, F = hp->n_ff_exp, S = hp->n_expert_shared * hp->n_ff_exp;
    s[WEFT_T_FFN_GATE_INP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, X, 0};
    s[WEFT_T_EXP_PROBS_B] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, X, 1, 0};
    s[WEFT_T_FFN_GATE_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, X};
    s[WEFT_T_FFN_UP_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, X};
    s[WEFT_T_FFN_DOWN_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, E, X};
    if (S) {
        s[WEFT_T_FFN_GATE_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, S, 0};
        s[WEFT_T_FFN_UP_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, S, 0};
        s[WEFT_T_FFN_DOWN_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, S, E, 0};
    }
}

/* rows [.., ..) of a view's columns as a view of their own: ne0 = n from column c0, ne1
 * rows, rows nb1 apart (a strided view into a wider buffer) */
static struct weft_view cols(struct weft_view v, int64_t c0, int64_t n, int64_t rows, size_t nb1)
{
    struct weft_view r = weft_view_2d(v.buf, v.offset + (size_t)c0 * sizeof(float), WEFT_TYPE_F32, n, rows);
    r.nb1 = nb1;
    return r;
}

static void deepseek2_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *w = b->w->t;
    const uint32_t H = hp->n_head, P = hp->n_rot, L = hp->kv_lora_rank, N = hp->mla_qk - P, V = hp->mla_v;
    const uint32_t R = b->n_rows;
    const size_t f = sizeof(float), qk = (size_t)(P + L) * f;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_NORM], b->xb);
    /* the full-width q (R, H·(N+P)) in gate; q_a in up */
    const struct weft_view qfull = weft_view_2d(b->gate.buf, b->gate.offset, WEFT_TYPE_F32, (int64_t)H * (N + P), R);
    if (hp->q_lora_rank) {
        const struct weft_view qa = weft_view_2d(b->up.buf, b->up.offset, WEFT_TYPE_F32, hp->q_lora_rank, R);
        weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_Q_A], qa);
        weft_b_rmsnorm(b, qa, w[WEFT_T_ATTN_Q_A_NORM], qa);
        weft_b_matmul(b, qa, w[WEFT_T_ATTN_Q_UP], qfull);
    } else {
        weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_Q], qfull);
    }
    /* [c | k_pe] (R, L+P) in up; K row = [k_pe | rmsnorm(c)] in b->k */
    const struct weft_view kva = weft_view_2d(b->up.buf, b->up.offset, WEFT_TYPE_F32, L + P, R);
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_KV_A_MQA], kva);
    weft_b_rmsnorm(b, cols(kva, 0, L, R, (size_t)(L + P) * f), w[WEFT_T_ATTN_KV_A_NORM], cols(b->k, P, L, R, qk));
    weft_b_matmul(b, cols(kva, L, P, R, (size_t)(L + P) * f), b->mla_eye, cols(b->k, 0, P, R, qk));
    /* Q head h = [q_pe | q_nope · W_kbᵀ] in b->q (R·H rows of P + L) */
    const size_t qrow = (size_t)(N + P) * f;
    weft_b_matmul(b, cols(qfull, N, P, (int64_t)R * H, qrow), b->mla_eye, cols(b->q, 0, P, (int64_t)R * H, qk));
    struct weft_op *op = weft_b_push(b, WEFT_OP_MATMUL_ID);
    op->u.matmul_id = (struct weft_op_matmul_id){.x = cols(qfull, 0, N, (int64_t)R * H, qrow), .w = w[WEFT_T_ATTN_K_UP],
                                                 .ids = b->mla_ids, .out = cols(b->q, P, L, (int64_t)R * H, qk),
                                                 .n_expert = H, .x_per_slot = true};
    /* rotate the first P of each head; K into the latent cache */
    weft_b_rope_kv(b, l);
    /* o_h = softmax(Q_h Kᵀ / √(N+P)) · C                                 (R, H·L) */
    weft_b_attention(b, l, hp->attn_scale != 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->mla_qk));
    if (!weft_b_keep_rows(b, l)) return;
    /* x += [o_h · W_vbᵀ]_h · Woᵀ: the heads' V in gate (R·H rows of V) */
    const uint32_t Rk = b->n_rows;
    const struct weft_view vh = weft_view_2d(b->gate.buf, b->gate.offset, WEFT_TYPE_F32, V, (int64_t)Rk * H);
    op = weft_b_push(b, WEFT_OP_MATMUL_ID);
    op->u.matmul_id = (struct weft_op_matmul_id){
        .x = weft_view_2d(b->att.buf, b->att.offset, WEFT_TYPE_F32, L, (int64_t)Rk * H), .w = w[WEFT_T_ATTN_V_UP],
        .ids = b->mla_ids, .out = vh, .n_expert = H, .x_per_slot = true};
    weft_b_matmul_add(b, weft_view_2d(b->gate.buf, b->gate.offset, WEFT_TYPE_F32, (int64_t)H * V, Rk),
                      w[WEFT_T_ATTN_OUT], b->x);
    if (l < hp->n_dense_lead || !hp->n_expert) {
        weft_b_ffn_dense(b);
        return;
    }
    /* the FFN, on the experts' device when they are placed apart */
    weft_b_experts_begin(b);
    w = b->w->t;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_NORM], b->xb);
    if (hp->n_expert_shared) {
        /* the shared experts' SwiGLU of xb, added first (llama.cpp adds it to the routed sum) */
        const int64_t S = (int64_t)hp->n_expert_shared * hp->n_ff_exp;
        const struct weft_view g = weft_view_2d(b->gate.buf, b->gate.offset, WEFT_TYPE_F32, S, Rk);
        const struct weft_view u = weft_view_2d(b->up.buf, b->up.offset, WEFT_TYPE_F32, S, Rk);
        const struct weft_view h = weft_view_2d(b->hb.buf, b->hb.offset, WEFT_TYPE_F32, S, Rk);
        weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE_SHEXP], g);
        weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP_SHEXP], u);
        weft_b_silu_mul(b, g, u, h);
        weft_b_matmul_add(b, h, w[WEFT_T_FFN_DOWN_SHEXP], b->x);
    }
    const struct weft_moe_cfg cfg = {.gating = hp->expert_gating, .norm = hp->expert_weights_norm,
                                     .scale = hp->expert_weights_scale, .act = WEFT_GLU_SILU,
                                     .norm_w = WEFT_T_FFN_NORM, .xb_ready = true};
    weft_b_moe_ffn(b, &cfg);
    weft_b_experts_end(b);
}

const struct weft_family weft_family_deepseek2 = {
    .arch = "deepseek2",
    .hparams = deepseek2_hparams,
    .tensors = deepseek2_tensors,
    .layer = deepseek2_layer,
    .experts = true,
    .yarn_log_mul = true,
};
