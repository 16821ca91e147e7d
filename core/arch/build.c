/* The shared builders (build.h). */
#include "core/arch/build.h"
#include "base/rope.h"

#include <stdlib.h>
#include <string.h>

struct weft_op *weft_b_push(struct weft_build *b, enum weft_op_kind kind)
{
    static struct weft_op scratch;
    if (b->n_ops == b->cap_ops) {
        size_t cap = b->cap_ops ? 2 * b->cap_ops : 64;
        struct weft_op *ops = realloc(b->ops, cap * sizeof *ops);
        if (!ops) {
            b->nomem = true;
            memset(&scratch, 0, sizeof scratch);
            return &scratch;
        }
        b->ops = ops;
        b->cap_ops = cap;
    }
    struct weft_op *op = &b->ops[b->n_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

struct weft_view weft_b_rows(struct weft_view w, int64_t first, int64_t n)
{
    w.offset += (size_t)first * w.nb1;
    w.ne1 = n;
    return w;
}

void weft_b_rmsnorm(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_RMSNORM);
    op->u.rmsnorm = (struct weft_op_rmsnorm){.x = x, .w = w, .out = out, .eps = b->hp->rms_eps};
}

void weft_b_head_rmsnorm(struct weft_build *b, struct weft_view v, struct weft_view w)
{
    int64_t d = w.ne0, heads = v.ne0 / d;
    struct weft_view rows = weft_view_2d(v.buf, v.offset, v.type, d, v.ne1 * heads);
    weft_b_rmsnorm(b, rows, w, rows);
}

void weft_b_matmul(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_MATMUL);
    op->u.matmul = (struct weft_op_matmul){.x = x, .w = w, .out = out};
}

void weft_b_matmul_bias(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view bias,
                        struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_MATMUL);
    op->u.matmul = (struct weft_op_matmul){.x = x, .w = w, .out = out, .bias = bias, .has_bias = true};
}

void weft_b_matmul_add(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_MATMUL);
    op->u.matmul = (struct weft_op_matmul){.x = x, .w = w, .out = out, .add = out, .has_add = true};
}

void weft_b_silu_mul(struct weft_build *b, struct weft_view gate, struct weft_view up, struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_SILU_MUL);
    op->u.silu_mul = (struct weft_op_silu_mul){.gate = gate, .up = up, .out = out};
}

void weft_b_glu(struct weft_build *b, enum weft_glu_act act, struct weft_view gate, struct weft_view up,
                struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_SILU_MUL);
    op->u.silu_mul = (struct weft_op_silu_mul){.gate = gate, .up = up, .out = out, .act = act};
}

void weft_b_add(struct weft_build *b, struct weft_view a, struct weft_view bb, struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_ADD);
    op->u.add = (struct weft_op_add){.a = a, .b = bb, .out = out};
}

/* The block tables layer l's K/V are found through: its group's. */
static struct weft_batch_view layer_batch(const struct weft_build *b, uint32_t l)
{
    return weft_kv_layer_in_window(b->kv, l) ? b->batch_w : b->batch;
}

void weft_b_rope_kv_at(struct weft_build *b, uint32_t l, float freq_base, float freq_scale)
{
    const struct weft_hparams *hp = b->hp;
    struct weft_op *op = weft_b_push(b, WEFT_OP_ROPE_KV);
    op->u.rope_kv = (struct weft_op_rope_kv){
        .q = b->q, .k = b->k, .v = b->v, .kv = weft_kv_layer_view(b->kv, l), .batch = layer_batch(b, l),
        .n_head = hp->n_head, .n_rot = weft_hp_n_rot(hp, l), .freq_base = freq_base, .freq_scale = freq_scale,
        .mode = hp->rope_mode, .ext_factor = hp->rope_ext_factor, .attn_factor = hp->rope_attn_factor,
        .corr_dims = {hp->rope_corr_dims[0], hp->rope_corr_dims[1]}};
    /* YaRN's ramp follows the base (ggml forms it per op): a layer with its own
     * base (a local one) gets its own */
    if (hp->rope_ext_factor != 0 && freq_base != hp->rope_freq_base)
        weft_rope_yarn_corr_dims(hp->n_rot, hp->rope_n_ctx_orig, freq_base, hp->rope_beta_fast, hp->rope_beta_slow,
                                 op->u.rope_kv.corr_dims);
    /* frequency factors: Llama 3.1's rope_freqs, or LongRoPE's long or
     * short ones (long when a sequence may pass the original context, as
     * llama.cpp chooses by its context size) */
    const struct weft_view *t = b->w->t;
    const struct weft_view *ff = t[WEFT_T_ROPE_FREQS].buf ? &t[WEFT_T_ROPE_FREQS]
                               : b->rope_long && t[WEFT_T_ROPE_LONG].buf ? &t[WEFT_T_ROPE_LONG]
                               : t[WEFT_T_ROPE_SHORT].buf ? &t[WEFT_T_ROPE_SHORT] : NULL;
    if (ff) {
        op->u.rope_kv.freq_factors = *ff;
        op->u.rope_kv.has_freq_factors = true;
    }
}

void weft_b_rope_kv(struct weft_build *b, uint32_t l)
{
    weft_b_rope_kv_at(b, l, b->hp->rope_freq_base, b->hp->rope_freq_scale);
}

static struct weft_op *attention_op(struct weft_build *b, uint32_t l, float scale, uint32_t window)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_ATTENTION);
    op->u.attention = (struct weft_op_attention){
        .q = b->q, .out = b->att, .kv = weft_kv_layer_view(b->kv, l), .batch = layer_batch(b, l),
        .n_head = b->hp->n_head, .scale = scale, .window = window};
    return op;
}

void weft_b_attention_window(struct weft_build *b, uint32_t l, float scale, uint32_t window)
{
    attention_op(b, l, scale, window);
}

void weft_b_attention_sinks(struct weft_build *b, uint32_t l, float scale, uint32_t window, struct weft_view sinks)
{
    struct weft_op *op = attention_op(b, l, scale, window);
    op->u.attention.sinks = sinks;
    op->u.attention.has_sinks = true;
}

void weft_b_attention(struct weft_build *b, uint32_t l, float scale)
{
    weft_b_attention_window(b, l, scale, 0);
}

/* Move the kept rows of the views vs (rows of equal length) to their front,
 * keeping their order: each run of consecutive kept rows is one move, in
 * pieces no longer than the distance it moves, so no COPY overlaps itself (a
 * piece lands where the one before it was read from). */
static void pack_rows(struct weft_build *b, const struct weft_view *vs, int n_vs)
{
    const uint32_t *keep = b->keep;
    for (uint32_t i = 0; i < b->n_keep;) {
        uint32_t run = 1;
        while (i + run < b->n_keep && keep[i + run] == keep[i] + run) run++;
        uint32_t d = keep[i] - i;  /* rows to move up; keep[] ascends, so keep[i] >= i */
        for (uint32_t k = 0; d && k < run; k += d) {
            uint32_t n = run - k < d ? run - k : d;
            for (int o = 0; o < n_vs; o++) {
                size_t row = vs[o].nb1;
                struct weft_op *op = weft_b_push(b, WEFT_OP_COPY);
                op->u.copy = (struct weft_op_copy){vs[o].buf, vs[o].buf, vs[o].offset + (keep[i] + k) * row,
                                                   vs[o].offset + (i + k) * row, n * row};
            }
        }
        i += run;
    }
}

bool weft_b_keep_rows_of(struct weft_build *b, uint32_t l, struct weft_view out)
{
    if (l != b->last_layer || b->n_keep == b->n_rows) return true;
    if (b->n_keep == 0) return false;
    const struct weft_view vs[3] = {out, b->x, b->ple};
    pack_rows(b, vs, b->ple.buf ? 3 : 2);
    struct weft_view *all[] = {&b->x, &b->xb, &b->q, &b->k, &b->v, &b->att, &b->gate, &b->up, &b->hb,
                               &b->moe_logits, &b->moe_ids, &b->moe_w, &b->mla_ids, &b->ssm_qkv, &b->ssm_conv,
                               &b->ssm_z, &b->ssm_o, &b->ssm_beta, &b->ssm_alpha, &b->qgate, &b->ple, &b->ple_tmp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) all[i]->ne1 = b->n_keep;
    b->n_rows = b->n_keep;
    return true;
}

bool weft_b_keep_rows(struct weft_build *b, uint32_t l)
{
    return weft_b_keep_rows_of(b, l, b->att);
}

void weft_b_attn_in(struct weft_build *b)
{
    const struct weft_view *w = b->w->t;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_NORM], b->xb);
    static const enum weft_tensor_id mat[3] = {WEFT_T_ATTN_Q, WEFT_T_ATTN_K, WEFT_T_ATTN_V};
    static const enum weft_tensor_id bias[3] = {WEFT_T_ATTN_Q_B, WEFT_T_ATTN_K_B, WEFT_T_ATTN_V_B};
    const struct weft_view out[3] = {b->q, b->k, b->v};
    for (int i = 0; i < 3; i++) {
        if (w[bias[i]].buf) weft_b_matmul_bias(b, b->xb, w[mat[i]], w[bias[i]], out[i]);
        else weft_b_matmul(b, b->xb, w[mat[i]], out[i]);
    }
}

void weft_b_moe_ffn(struct weft_build *b, const struct weft_moe_cfg *cfg)
{
    const struct weft_view *w = b->w->t;
    const struct weft_hparams *hp = b->hp;
    if (!cfg->xb_ready) weft_b_experts_begin(b);
    w = b->w->t;  /* the experts' device's views when they are apart */
    const uint32_t K = hp->n_expert_used, R = b->n_rows;
    if (!cfg->xb_ready) weft_b_rmsnorm(b, b->x, w[cfg->norm_w], b->xb);
    /* the router: logits (+ bias), then the k experts and their weights of each row */
    if (w[WEFT_T_FFN_GATE_INP_B].buf) weft_b_matmul_bias(b, b->xb, w[WEFT_T_FFN_GATE_INP], w[WEFT_T_FFN_GATE_INP_B], b->moe_logits);
    else weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE_INP], b->moe_logits);
    struct weft_op *op = weft_b_push(b, WEFT_OP_MOE_ROUTE);
    op->u.moe_route = (struct weft_op_moe_route){.logits = b->moe_logits, .ids = b->moe_ids, .weights = b->moe_w,
                                                 .k = K, .gating = cfg->gating, .norm = cfg->norm, .scale = cfg->scale,
                                                 .bias = w[WEFT_T_EXP_PROBS_B], .has_bias = w[WEFT_T_EXP_PROBS_B].buf != NULL,
                                                 .n_group = hp->expert_groups, .group_used = hp->expert_group_used};
    /* a row per (row, slot): the experts' gate and up projections (+ biases), the GLU */
    const struct weft_view g = weft_view_2d(b->gate.buf, b->gate.offset, WEFT_TYPE_F32, hp->n_ff_exp, (int64_t)R * K);
    const struct weft_view u = weft_view_2d(b->up.buf, b->up.offset, WEFT_TYPE_F32, hp->n_ff_exp, (int64_t)R * K);
    const struct weft_view h = weft_view_2d(b->hb.buf, b->hb.offset, WEFT_TYPE_F32, hp->n_ff_exp, (int64_t)R * K);
    static const enum weft_tensor_id mats[2] = {WEFT_T_FFN_GATE_EXPS, WEFT_T_FFN_UP_EXPS};
    static const enum weft_tensor_id biases[2] = {WEFT_T_FFN_GATE_EXPS_B, WEFT_T_FFN_UP_EXPS_B};
    const struct weft_view outs[2] = {g, u};
    for (int i = 0; i < 2; i++) {
        op = weft_b_push(b, WEFT_OP_MATMUL_ID);
        op->u.matmul_id = (struct weft_op_matmul_id){.x = b->xb, .w = w[mats[i]], .ids = b->moe_ids, .out = outs[i],
                                                     .n_expert = hp->n_expert, .bias = w[biases[i]],
                                                     .has_bias = w[biases[i]].buf != NULL};
    }
    op = weft_b_push(b, WEFT_OP_SILU_MUL);
    op->u.silu_mul = (struct weft_op_silu_mul){.gate = g, .up = u, .out = h, .act = cfg->act, .alpha = cfg->alpha,
                                               .limit = cfg->limit};
    /* x += the slots' down projections (+ bias), weighted and summed */
    op = weft_b_push(b, WEFT_OP_MATMUL_ID);
    op->u.matmul_id = (struct weft_op_matmul_id){.x = h, .w = w[WEFT_T_FFN_DOWN_EXPS], .ids = b->moe_ids, .out = b->x,
                                                 .n_expert = hp->n_expert, .x_per_slot = true, .weights = b->moe_w,
                                                 .has_weights = true, .add = b->x, .has_add = true,
                                                 .bias = w[WEFT_T_FFN_DOWN_EXPS_B],
                                                 .has_bias = w[WEFT_T_FFN_DOWN_EXPS_B].buf != NULL};
    if (!cfg->xb_ready) weft_b_experts_end(b);
}

void weft_b_experts_begin(struct weft_build *b)
{
    if (b->experts_begin) b->experts_begin(b);
}

void weft_b_experts_end(struct weft_build *b)
{
    if (b->experts_end) b->experts_end(b);
}

void weft_b_matmul_bias_add(struct weft_build *b, struct weft_view x, struct weft_view w, struct weft_view bias,
                            struct weft_view out)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_MATMUL);
    op->u.matmul = (struct weft_op_matmul){.x = x, .w = w, .out = out, .add = out, .has_add = true, .bias = bias,
                                           .has_bias = true};
}

void weft_b_ffn_dense(struct weft_build *b)
{
    const struct weft_view *w = b->w->t;
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_NORM], b->xb);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE], b->gate);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP], b->up);
    weft_b_silu_mul(b, b->gate, b->up, b->hb);
    weft_b_matmul_add(b, b->hb, w[WEFT_T_FFN_DOWN], b->x);
}

void weft_b_ffn_swiglu(struct weft_build *b)
{
    if (b->hp->n_expert) {
        /* Mixtral, Qwen3-MoE: softmax over every expert, the top k renormalised */
        const struct weft_moe_cfg cfg = {.gating = WEFT_MOE_SOFTMAX, .norm = true, .act = WEFT_GLU_SILU,
                                         .norm_w = WEFT_T_FFN_NORM};
        weft_b_moe_ffn(b, &cfg);
        return;
    }
    weft_b_ffn_dense(b);
}
