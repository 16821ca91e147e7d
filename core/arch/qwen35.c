/* qwen35: Qwen3.5 / Qwen3.6 dense, a hybrid of Gated DeltaNet (linear attention) layers and
 * gated full-attention layers: layer l is recurrent unless (l + 1) % full_attention_interval
 * == 0 (three of every four). A recurrent layer keeps a fixed-size state per sequence in the
 * KV pool's state slots (core/kv.h) instead of KV; the attention layers use the paged cache.
 * docs/hybrid.md has the oracle's forward pass and its float order.
 *
 * One recurrent layer, R rows, E = n_embd, Hk q/k heads and Hv v heads of S (ssm.group_count,
 * ssm.time_step_rank, ssm.state_size), C = (2 Hk + Hv) S conv channels, K conv taps:
 *   xb = rmsnorm(x) · attn_norm                                      (R, E)
 *   qkv = xb · Wqkvᵀ; z = xb · Wgateᵀ; b = xb · Wbetaᵀ; α = xb · Walphaᵀ  (R, C), (R, Hv S), (R, Hv) ×2
 *   c = silu(causal conv of qkv over the sequence's last K inputs)   (R, C)   SSM_CONV
 *   o = the gated delta rule over c's q, k, v heads (v head h reads q and k head h % Hk),
 *       β = sigmoid(b), decay softplus(α + dt_bias) · ssm_a        (R, Hv S) DELTA_NET
 *   o = rmsnorm(o per head) · ssm_norm · silu(z)                     (R·Hv, S)
 *   x += o · Woutᵀ                                                    (R, E)
 * One attention layer (attn_q's rows per head: D of q, then D of its output gate):
 *   [q | g] = xb · Wqᵀ (R, H·2D); k, v = xb · Wk, Wvᵀ; q, k = rmsnorm per head · q_norm, k_norm
 *   rope(q, k) (NEOX on the first rope.dimension_count dims); k, v -> paged cache
 *   att = softmax(q kᵀ / √D) v · sigmoid(g);  x += att · Woᵀ
 * Then, every layer, a SwiGLU FFN on rmsnorm(x) · post_attention_norm; the output head is
 * token_embd (tied) unless the file has one.
 *
 * qwen35moe (Qwen3.5 / 3.6 MoE): the same layers with, for the FFN, a routed mixture (softmax over
 * the experts, the top k renormalised) plus one shared expert scaled by a sigmoid gate:
 *   x += Σ_j w_j · SwiGLU_e_j(xb);  x += sigmoid(xb · g_shexp) · SwiGLU_shexp(xb)
 * the gate's sigmoid as a MOE_ROUTE of one "expert" (sigmoid gating, k 1) and the shared
 * expert's down projection as a MATMUL_ID of one expert weighted by it.
 *
 * qwen3next (Qwen3-Next): qwen35moe's layers but for three things: beta and alpha come from one
 * matrix, ssm_ba, whose rows are grouped per k head as [beta of its Hv/Hk v heads | their
 * alpha] (per-group MATMULs into beta's and alpha's columns); the v heads of a k head are
 * consecutive (v head h reads k head h / (Hv/Hk): DELTA_NET's k_grouped); plain NEOX rope.
 *
 * rope.dimension_sections (Qwen3.5's multi-section rope) gives each section of the rotated
 * dims its own position stream (time, height, width) for images and video; weft runs text,
 * where every stream is the token's position, which makes it NEOX rope on those dims. */
#include "core/arch/build.h"

#include <math.h>

extern const struct weft_family weft_family_qwen3next;
/* Qwen3-Next's fused ssm_ba and grouped v heads */
static bool is_next(const struct weft_hparams *hp) { return hp->family == &weft_family_qwen3next; }

static weft_status qwen35_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    const char *a = hp->arch;
    weft_status st;
    if ((st = weft_hp_opt_u32(g, a, "full_attention_interval", &hp->full_attn_interval)) ||
        (st = weft_hp_opt_u32(g, a, "ssm.conv_kernel", &hp->ssm_conv_kernel)) ||
        (st = weft_hp_opt_u32(g, a, "ssm.state_size", &hp->ssm_state)) ||
        (st = weft_hp_opt_u32(g, a, "ssm.group_count", &hp->ssm_groups)) ||
        (st = weft_hp_opt_u32(g, a, "ssm.time_step_rank", &hp->ssm_dt_rank)) ||
        (st = weft_hp_opt_u32(g, a, "ssm.inner_size", &hp->ssm_inner)))
        return st;
    if (!hp->full_attn_interval || !hp->ssm_conv_kernel || !hp->ssm_state || !hp->ssm_groups || !hp->ssm_dt_rank)
        return weft_error(WEFT_ERR_FORMAT, "model: %s needs %s.full_attention_interval and %s.ssm.conv_kernel, "
                          "state_size, group_count and time_step_rank (all > 0)", a, a, a);
    if (hp->family->experts && (!hp->n_expert || !hp->n_ff_shexp))
        return weft_error(WEFT_ERR_FORMAT, "model: %s needs %s.expert_count and expert_shared_feed_forward_length", a, a);
    if (hp->ssm_conv_kernel < 2 || hp->ssm_conv_kernel > 64)
        return weft_error(WEFT_ERR_FORMAT, "model: %s.ssm.conv_kernel %u (2..64)", a, hp->ssm_conv_kernel);
    if (hp->ssm_dt_rank % hp->ssm_groups)
        return weft_error(WEFT_ERR_FORMAT, "model: %s.ssm.time_step_rank %u (v heads) is not a multiple of "
                          "ssm.group_count %u (k heads)", a, hp->ssm_dt_rank, hp->ssm_groups);
    if (hp->ssm_inner && hp->ssm_inner != hp->ssm_dt_rank * hp->ssm_state)
        return weft_error(WEFT_ERR_FORMAT, "model: %s.ssm.inner_size %u is not time_step_rank %u x state_size %u", a,
                          hp->ssm_inner, hp->ssm_dt_rank, hp->ssm_state);
    hp->ssm_inner = hp->ssm_dt_rank * hp->ssm_state;
    uint32_t nextn = 0;
    if ((st = weft_hp_opt_u32(g, a, "nextn_predict_layers", &nextn))) return st;
    if (nextn)
        return weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.nextn_predict_layers %u: multi-token prediction layers are "
                          "not supported (a file converted without them runs)", a, nextn);
    if (weft_hp_kv_layers(hp) == 0)
        return weft_error(WEFT_ERR_FORMAT, "model: %s.full_attention_interval %u leaves none of the %u layers "
                          "with attention", a, hp->full_attn_interval, hp->n_layer);
    hp->rope_mode = WEFT_ROPE_NEOX;
    return WEFT_OK;
}

static void qwen35_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        return;
    }
    const uint32_t E = hp->n_embd, F = hp->n_ff;
    s[WEFT_T_ATTN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_ATTN_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    if (hp->n_expert) {
        const uint32_t X = hp->n_expert, FE = hp->n_ff_exp, FS = hp->n_ff_shexp;
        s[WEFT_T_FFN_GATE_INP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, X, 0};
        s[WEFT_T_FFN_GATE_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, FE, X};
        s[WEFT_T_FFN_UP_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, FE, X};
        s[WEFT_T_FFN_DOWN_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, FE, E, X};
        s[WEFT_T_FFN_GATE_INP_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
        s[WEFT_T_FFN_GATE_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, FS, 0};
        s[WEFT_T_FFN_UP_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, FS, 0};
        s[WEFT_T_FFN_DOWN_SHEXP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, FS, E, 0};
    } else {
        s[WEFT_T_FFN_GATE] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, 0};
        s[WEFT_T_FFN_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, 0};
        s[WEFT_T_FFN_DOWN] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, E, 0};
    }
    if (weft_hp_recurrent(hp, l)) {
        const uint32_t C = (uint32_t)weft_hp_ssm_channels(hp), Hv = hp->ssm_dt_rank, V = hp->ssm_inner;
        s[WEFT_T_ATTN_QKV] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, C, 0};
        s[WEFT_T_ATTN_GATE] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, V, 0};
        if (is_next(hp)) {
            s[WEFT_T_SSM_BA] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 2 * Hv, 0};
        } else {
            s[WEFT_T_SSM_BETA] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, Hv, 0};
            s[WEFT_T_SSM_ALPHA] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, Hv, 0};
        }
        s[WEFT_T_SSM_CONV1D] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->ssm_conv_kernel, C, 0};
        s[WEFT_T_SSM_DT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, Hv, 1, 0};
        s[WEFT_T_SSM_A] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, Hv, 1, 0};
        s[WEFT_T_SSM_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, hp->ssm_state, 1, 0};
        s[WEFT_T_SSM_OUT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, V, E, 0};
        return;
    }
    const uint32_t H = hp->n_head, D = hp->head_dim, KV = hp->n_head_kv;
    s[WEFT_T_ATTN_Q] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 2 * H * D, 0};
    s[WEFT_T_ATTN_K] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, KV * D, 0};
    s[WEFT_T_ATTN_V] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, KV * hp->head_dim_v, 0};
    s[WEFT_T_ATTN_OUT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, H * hp->head_dim_v, E, 0};
    s[WEFT_T_ATTN_Q_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, D, 1, 0};
    s[WEFT_T_ATTN_K_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, D, 1, 0};
}

/* The view of every head's D values at column c0 of rows 2D wide: (R·H, D) rows 2D apart */
static struct weft_view half_heads(struct weft_view qg, int64_t c0, int64_t D, int64_t rows)
{
    struct weft_view v = weft_view_2d(qg.buf, qg.offset + (size_t)c0 * sizeof(float), WEFT_TYPE_F32, D, rows);
    v.nb1 = (size_t)2 * D * sizeof(float);
    return v;
}

static void qwen35_attention(struct weft_build *b, uint32_t l)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *w = b->w->t;
    const int64_t H = hp->n_head, D = hp->head_dim, R = b->n_rows;
    /* [q_h | g_h] per head; k, v */
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_Q], b->qgate);
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_K], b->k);
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_V], b->v);
    /* q = rmsnorm of each head's q half · q_norm, gathered into b->q        (R·H, D) */
    weft_b_rmsnorm(b, half_heads(b->qgate, 0, D, R * H), w[WEFT_T_ATTN_Q_NORM],
                   weft_view_2d(b->q.buf, b->q.offset, WEFT_TYPE_F32, D, R * H));
    weft_b_head_rmsnorm(b, b->k, w[WEFT_T_ATTN_K_NORM]);
    weft_b_rope_kv(b, l);
    weft_b_attention(b, l, 1.0f / sqrtf((float)D));
    /* att = att · sigmoid(g), per head                                     (R·H, Dv) */
    const int64_t Dv = hp->head_dim_v;
    const struct weft_view att = weft_view_2d(b->att.buf, b->att.offset, WEFT_TYPE_F32, Dv, R * H);
    weft_b_glu(b, WEFT_GLU_SIGMOID, half_heads(b->qgate, D, Dv, R * H), att, att);
}

/* The state views of recurrent layer l: the conv window and the delta rule's matrices of each
 * slot (backends/backend.h's SSM_CONV and DELTA_NET state) */
static void state_views(struct weft_build *b, uint32_t l, struct weft_view *conv, struct weft_view *delta)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_kv_state_view s = weft_kv_state_view(b->kv, l);
    *conv = weft_view_2d(s.buf, s.offset, WEFT_TYPE_F32, (int64_t)weft_hp_conv_floats(hp), s.n_slots);
    conv->nb1 = s.stride;
    *delta = weft_view_2d(s.buf, s.offset + weft_hp_state_delta_off(hp), WEFT_TYPE_F32,
                          (int64_t)weft_hp_delta_floats(hp), s.n_slots);
    delta->nb1 = s.stride;
}

static void qwen35_deltanet(struct weft_build *b, uint32_t l)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *w = b->w->t;
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_QKV], b->ssm_qkv);
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_GATE], b->ssm_z);
    if (is_next(hp)) {
        /* k head g's rows of ssm_ba: [beta of v heads g·r .. g·r + r - 1 | their alpha] */
        const int64_t Hk = hp->ssm_groups, r = hp->ssm_dt_rank / Hk, R = b->n_rows;
        for (int64_t g = 0; g < Hk; g++)
            for (int part = 0; part < 2; part++) {
                const struct weft_view dst = part ? b->ssm_alpha : b->ssm_beta;
                struct weft_view out = weft_view_2d(dst.buf, dst.offset + (size_t)(g * r) * sizeof(float), WEFT_TYPE_F32,
                                                    r, R);
                out.nb1 = dst.nb1;
                weft_b_matmul(b, b->xb, weft_b_rows(w[WEFT_T_SSM_BA], (2 * g + part) * r, r), out);
            }
    } else {
        weft_b_matmul(b, b->xb, w[WEFT_T_SSM_BETA], b->ssm_beta);
        weft_b_matmul(b, b->xb, w[WEFT_T_SSM_ALPHA], b->ssm_alpha);
    }
    struct weft_view conv_state, delta_state;
    state_views(b, l, &conv_state, &delta_state);
    struct weft_op *op = weft_b_push(b, WEFT_OP_SSM_CONV);
    op->u.ssm_conv = (struct weft_op_ssm_conv){.x = b->ssm_qkv, .w = w[WEFT_T_SSM_CONV1D], .out = b->ssm_conv,
                                               .state = conv_state, .slots = b->state_slots, .silu = true};
    op = weft_b_push(b, WEFT_OP_DELTA_NET);
    op->u.delta_net = (struct weft_op_delta_net){
        .in = b->ssm_conv, .beta = b->ssm_beta, .alpha = b->ssm_alpha, .dt_bias = w[WEFT_T_SSM_DT], .a = w[WEFT_T_SSM_A],
        .out = b->ssm_o, .state = delta_state, .slots = b->state_slots, .n_k_head = hp->ssm_groups,
        .n_v_head = hp->ssm_dt_rank, .head_dim = hp->ssm_state, .eps = hp->rms_eps, .k_grouped = is_next(hp)};
    /* o = rmsnorm(o per head) · ssm_norm, then · silu(z) */
    weft_b_head_rmsnorm(b, b->ssm_o, w[WEFT_T_SSM_NORM]);
    weft_b_silu_mul(b, b->ssm_z, b->ssm_o, b->ssm_o);
}

/* the mixture's FFN: routed experts, then the gated shared expert (on the experts' device when
 * they are placed apart) */
static void qwen35moe_ffn(struct weft_build *b)
{
    const struct weft_hparams *hp = b->hp;
    weft_b_experts_begin(b);
    const struct weft_view *w = b->w->t;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_POST_NORM], b->xb);
    const struct weft_moe_cfg cfg = {.gating = WEFT_MOE_SOFTMAX, .norm = true, .act = WEFT_GLU_SILU,
                                     .norm_w = WEFT_T_ATTN_POST_NORM, .xb_ready = true};
    weft_b_moe_ffn(b, &cfg);
    w = b->w->t;
    const int64_t R = b->n_rows, FS = hp->n_ff_shexp;
    const struct weft_view g = weft_view_2d(b->gate.buf, b->gate.offset, WEFT_TYPE_F32, FS, R);
    const struct weft_view u = weft_view_2d(b->up.buf, b->up.offset, WEFT_TYPE_F32, FS, R);
    const struct weft_view h = weft_view_2d(b->hb.buf, b->hb.offset, WEFT_TYPE_F32, FS, R);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE_SHEXP], g);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP_SHEXP], u);
    weft_b_silu_mul(b, g, u, h);
    /* its gate: sigmoid(xb · g_shexp) per row, as the weight of a one-expert route */
    const struct weft_view gl = weft_view_2d(b->moe_logits.buf, b->moe_logits.offset, WEFT_TYPE_F32, 1, R);
    const struct weft_view gid = weft_view_2d(b->moe_ids.buf, b->moe_ids.offset, WEFT_TYPE_I32, 1, R);
    const struct weft_view gw = weft_view_2d(b->moe_w.buf, b->moe_w.offset, WEFT_TYPE_F32, 1, R);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE_INP_SHEXP], gl);
    struct weft_op *op = weft_b_push(b, WEFT_OP_MOE_ROUTE);
    op->u.moe_route = (struct weft_op_moe_route){.logits = gl, .ids = gid, .weights = gw, .k = 1,
                                                 .gating = WEFT_MOE_SIGMOID};
    op = weft_b_push(b, WEFT_OP_MATMUL_ID);
    op->u.matmul_id = (struct weft_op_matmul_id){.x = h, .w = w[WEFT_T_FFN_DOWN_SHEXP], .ids = gid, .out = b->x,
                                                 .n_expert = 1, .x_per_slot = true, .weights = gw,
                                                 .has_weights = true, .add = b->x, .has_add = true};
    weft_b_experts_end(b);
}

/* x += SwiGLU FFN of rmsnorm(x) · post_attention_norm */
static void qwen35_ffn(struct weft_build *b)
{
    if (b->hp->n_expert) {
        qwen35moe_ffn(b);
        return;
    }
    const struct weft_view *w = b->w->t;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_POST_NORM], b->xb);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE], b->gate);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP], b->up);
    weft_b_silu_mul(b, b->gate, b->up, b->hb);
    weft_b_matmul_add(b, b->hb, w[WEFT_T_FFN_DOWN], b->x);
}

static void qwen35_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_view *w = b->w->t;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_NORM], b->xb);
    if (weft_hp_recurrent(b->hp, l)) {
        /* every row updates the state; only the kept rows go on past the last layer's mixer */
        qwen35_deltanet(b, l);
        if (!weft_b_keep_rows_of(b, l, b->ssm_o)) return;
        weft_b_matmul_add(b, b->ssm_o, w[WEFT_T_SSM_OUT], b->x);
    } else {
        qwen35_attention(b, l);
        if (!weft_b_keep_rows(b, l)) return;
        weft_b_matmul_add(b, b->att, w[WEFT_T_ATTN_OUT], b->x);
    }
    qwen35_ffn(b);
}

const struct weft_family weft_family_qwen35 = {
    .arch = "qwen35",
    .hparams = qwen35_hparams,
    .tensors = qwen35_tensors,
    .layer = qwen35_layer,
};

const struct weft_family weft_family_qwen35moe = {
    .arch = "qwen35moe",
    .hparams = qwen35_hparams,
    .tensors = qwen35_tensors,
    .layer = qwen35_layer,
    .experts = true,
};

const struct weft_family weft_family_qwen3next = {
    .arch = "qwen3next",
    .hparams = qwen35_hparams,
    .tensors = qwen35_tensors,
    .layer = qwen35_layer,
    .experts = true,
};
