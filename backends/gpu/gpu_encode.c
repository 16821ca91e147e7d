/* Encoding an op as kernel launches, for every GPU backend: each op becomes
 * one or two launches (kernels-common/launch.h) on the backend's stream.
 * api 5's fields: MATMUL's bias, ATTENTION's window and ROPE_KV's scaling
 * (freq_factors, YaRN, attn_factor) travel in the launchers' arguments;
 * SILU_MUL with another activation and EMBED with a scale go to the
 * launchers the hooks name (glu, embed_scaled). api 7: ATTENTION's sinks and
 * the KV view's v_in_k travel in the launchers' arguments; SILU_MUL's
 * SWIGLU_OAI, MOE_ROUTE and MATMUL_ID go to the hooks' swiglu_oai, moe_route
 * and matmul_id. api 9: SILU_MUL's SIGMOID goes to glu, SSM_CONV and DELTA_NET
 * (one launch each, the state views' slot stride in elements) to ssm_conv and
 * delta_net. api 10: ADD with a scale goes to add_scaled, ROPE_KV's q_only to
 * rope_q (q alone: k, v and the cache are not handed on), MOE_ROUTE's
 * expert_scale travels in the moe_route hook's arguments.
 * Compiled into each GPU module next to gpu_common.c; the launchers it
 * calls are that module's (kernels-cuda/ or kernels-hip/). The one runtime
 * call an op needs beyond a launch, COPY's device-to-device copy, is the
 * backend's copy hook. */
#include "backends/gpu/gpu_common.h"
#include "kernels-common/launch.h"

#include <math.h>

static struct weft_gk_kv kv_desc(const struct weft_kv_view *kv)
{
    struct weft_gk_kv d = {kv->buf->dev, (int)kv->type, (int)kv->n_layer, (int)kv->layer, (int)kv->n_kv_head,
                           (int)kv->head_dim, (int)weft_kv_head_dim_v(kv), kv->v_in_k};
    return d;
}

int weft_gpu_encode(struct weft_gpu *g, const struct weft_op *op)
{
    void *st = g->stream;
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        if (o->scale != 0.0f) {
            if (!g->hooks->embed_scaled) return g->hooks->err_invalid;
            return g->hooks->embed_scaled((int)o->table.type, weft_gpu_ptr(&o->table), o->table.nb1, o->table.ne1,
                                          o->table.ne0, weft_gpu_i32(&o->ids), o->ids.ne0, o->scale,
                                          weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), g->err_dev, st);
        }
        return weft_gk_embed((int)o->table.type, weft_gpu_ptr(&o->table), o->table.nb1, o->table.ne1, o->table.ne0,
                             weft_gpu_i32(&o->ids), o->ids.ne0, weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                             g->err_dev, st);
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return weft_gk_rmsnorm(weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), NULL, o->x.ne1,
                               o->has_add ? weft_gpu_f32(&o->add) : NULL, o->has_add ? weft_gpu_ld(&o->add) : 0,
                               o->has_add ? weft_gpu_f32(&o->sum) : NULL, o->has_add ? weft_gpu_ld(&o->sum) : 0,
                               weft_gpu_f32(&o->w), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->x.ne1, o->x.ne0,
                               o->eps, g->err_dev, st);
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        struct weft_gk_mm m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, o->x.ne1,
                               weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                               o->has_add ? weft_gpu_f32(&o->add) : NULL, o->has_add ? weft_gpu_ld(&o->add) : 0,
                               o->has_bias ? weft_gpu_f32(&o->bias) : NULL};
        return weft_gk_matmul(&m, g->scratch, st);
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        struct weft_gk_kv kv = kv_desc(&o->kv);
        /* as the CPU (base/rope.h): theta_scale from the host's powf, the
         * magnitude from its logf */
        float theta_scale = powf(o->freq_base, -2.0f / (float)o->n_rot);
        struct weft_gk_rope_ext ext = {o->has_freq_factors ? weft_gpu_f32(&o->freq_factors) : NULL, o->ext_factor,
                                       {o->corr_dims[0], o->corr_dims[1]},
                                       o->attn_factor != 0.0f ? o->attn_factor : 1.0f};
        if (o->ext_factor != 0.0f) ext.mscale *= 1.0f + 0.1f * logf(1.0f / o->freq_scale);
        if (o->q_only) {   /* api 10: q alone; k, v and the cache are not handed on */
            if (!g->hooks->rope_q) return g->hooks->err_invalid;
            return g->hooks->rope_q(weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_i32(&o->batch.pos),
                                    o->batch.n_rows, (int)o->n_head, kv.hd, (int)o->n_rot, theta_scale,
                                    o->freq_scale, o->mode == WEFT_ROPE_NEOX, &ext, st);
        }
        /* a latent cache has no V to write: v is not looked at */
        const bool v = !o->kv.v_in_k;
        return weft_gk_rope_kv(weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_f32(&o->k), weft_gpu_ld(&o->k),
                               v ? weft_gpu_f32(&o->v) : NULL, v ? weft_gpu_ld(&o->v) : 0, weft_gpu_i32(&o->batch.pos),
                               weft_gpu_i32(&o->batch.slot), o->batch.n_rows, (int)o->n_head, (int)o->n_rot,
                               theta_scale, o->freq_scale, o->mode == WEFT_ROPE_NEOX, &ext, &kv, st);
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        struct weft_gk_attn_args a = {weft_gpu_f32(&o->q), weft_gpu_ld(&o->q), weft_gpu_f32(&o->out),
                                      weft_gpu_ld(&o->out), kv_desc(&o->kv), weft_gpu_i32(&o->batch.pos),
                                      weft_gpu_i32(&o->batch.seq), weft_gpu_i32(&o->batch.bt_off),
                                      weft_gpu_i32(&o->batch.bt), o->batch.n_rows, (int)o->n_head, o->scale,
                                      o->window, o->softcap, o->has_sinks ? weft_gpu_f32(&o->sinks) : NULL};
        return weft_gk_attention(&a, weft_gpu_attn_splits(g, o), g->scratch, st);
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        if (o->act == WEFT_GLU_SWIGLU_OAI) {
            if (!g->hooks->swiglu_oai) return g->hooks->err_invalid;
            return g->hooks->swiglu_oai(weft_gpu_f32(&o->gate), weft_gpu_ld(&o->gate), weft_gpu_f32(&o->up),
                                        weft_gpu_ld(&o->up), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1,
                                        o->out.ne0, o->alpha, o->limit, st);
        }
        if (o->act != WEFT_GLU_SILU) {
            if (!g->hooks->glu) return g->hooks->err_invalid;
            return g->hooks->glu((int)o->act, weft_gpu_f32(&o->gate), weft_gpu_ld(&o->gate), weft_gpu_f32(&o->up),
                                 weft_gpu_ld(&o->up), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1,
                                 o->out.ne0, st);
        }
        return weft_gk_silu_mul(weft_gpu_f32(&o->gate), weft_gpu_ld(&o->gate), weft_gpu_f32(&o->up),
                                weft_gpu_ld(&o->up), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1,
                                o->out.ne0, st);
    }
    case WEFT_OP_ADD: {
        const struct weft_op_add *o = &op->u.add;
        if (o->scale != 0.0f) {   /* api 10 */
            if (!g->hooks->add_scaled) return g->hooks->err_invalid;
            return g->hooks->add_scaled(weft_gpu_f32(&o->a), weft_gpu_ld(&o->a), weft_gpu_f32(&o->b),
                                        weft_gpu_ld(&o->b), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1,
                                        o->out.ne0, o->scale, st);
        }
        return weft_gk_add(weft_gpu_f32(&o->a), weft_gpu_ld(&o->a), weft_gpu_f32(&o->b), weft_gpu_ld(&o->b),
                           weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), o->out.ne1, o->out.ne0, st);
    }
    case WEFT_OP_COPY: {
        const struct weft_op_copy *o = &op->u.copy;
        if (!o->bytes) return 0;
        return g->hooks->copy(g, o->dst->dev + o->dst_off, o->src->dev + o->src_off, o->bytes);
    }
    case WEFT_OP_LOGITS: {
        /* rmsnorm of the listed rows into scratch, then the output matmul */
        const struct weft_op_logits *o = &op->u.logits;
        const int64_t n_out = o->rows.ne0, K = o->x.ne0;
        float *normed = (float *)g->scratch;
        int e = weft_gk_rmsnorm(weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_i32(&o->rows), o->x.ne1, NULL, 0,
                                NULL, 0, weft_gpu_f32(&o->norm_w), normed, (size_t)K, n_out, K, o->eps, g->err_dev,
                                st);
        if (e) return e;
        struct weft_gk_mm m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, n_out, normed,
                               (size_t)K, weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), NULL, 0, NULL};
        e = weft_gk_matmul(&m, g->scratch + weft_gpu_logits_norm_bytes(o), st);
        if (e || o->softcap == 0.0f) return e;
        return weft_gk_softcap(weft_gpu_f32(&o->out), weft_gpu_ld(&o->out), n_out, o->out.ne0, o->softcap, st);
    }
    case WEFT_OP_MOE_ROUTE: {
        const struct weft_op_moe_route *o = &op->u.moe_route;
        if (!g->hooks->moe_route) return g->hooks->err_invalid;
        struct weft_gk_moe_route a = {weft_gpu_f32(&o->logits), weft_gpu_ld(&o->logits),
                                      (int32_t *)weft_gpu_ptr(&o->ids), o->ids.nb1 / sizeof(int32_t),
                                      weft_gpu_f32(&o->weights), weft_gpu_ld(&o->weights), o->logits.ne1,
                                      (int)o->logits.ne0, (int)o->k, (int)o->gating, o->norm, o->scale,
                                      o->has_bias ? weft_gpu_f32(&o->bias) : NULL,
                                      o->n_group > 1 ? (int)o->n_group : 0, (int)o->group_used,
                                      o->has_expert_scale ? weft_gpu_f32(&o->expert_scale) : NULL};
        return g->hooks->moe_route(&a, st);
    }
    case WEFT_OP_MATMUL_ID: {
        /* out, add and x may be strided views (DeepSeek's per-head MATMUL_IDs) */
        const struct weft_op_matmul_id *o = &op->u.matmul_id;
        if (!g->hooks->matmul_id) return g->hooks->err_invalid;
        struct weft_gk_mmid m = {(int)o->w.type, weft_gpu_ptr(&o->w), o->w.nb1, o->w.ne0,
                                 o->w.ne1 / (int64_t)o->n_expert, (int)o->n_expert, weft_gpu_i32(&o->ids),
                                 o->ids.nb1 / sizeof(int32_t), o->ids.ne1, (int)o->ids.ne0, o->x_per_slot,
                                 weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                                 o->has_weights ? weft_gpu_f32(&o->weights) : NULL,
                                 o->has_weights ? weft_gpu_ld(&o->weights) : 0,
                                 o->has_weights && o->has_add ? weft_gpu_f32(&o->add) : NULL,
                                 o->has_weights && o->has_add ? weft_gpu_ld(&o->add) : 0,
                                 o->has_bias ? weft_gpu_f32(&o->bias) : NULL, g->err_dev};
        return g->hooks->matmul_id(&m, g->scratch, st);
    }
    case WEFT_OP_SSM_CONV: {
        const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
        if (!g->hooks->ssm_conv) return g->hooks->err_invalid;
        struct weft_gk_ssm_conv a = {weft_gpu_f32(&o->x), weft_gpu_ld(&o->x), weft_gpu_f32(&o->w),
                                     weft_gpu_ld(&o->w), weft_gpu_f32(&o->out), weft_gpu_ld(&o->out),
                                     weft_gpu_f32(&o->state), weft_gpu_ld(&o->state), weft_gpu_i32(&o->slots),
                                     o->state.ne1, o->x.ne1, o->x.ne0, (int)o->w.ne0, o->silu, g->err_dev};
        return g->hooks->ssm_conv(&a, st);
    }
    case WEFT_OP_DELTA_NET: {
        const struct weft_op_delta_net *o = &op->u.delta_net;
        if (!g->hooks->delta_net) return g->hooks->err_invalid;
        struct weft_gk_delta_net a = {weft_gpu_f32(&o->in), weft_gpu_ld(&o->in), weft_gpu_f32(&o->beta),
                                      weft_gpu_ld(&o->beta), weft_gpu_f32(&o->alpha), weft_gpu_ld(&o->alpha),
                                      weft_gpu_f32(&o->dt_bias), weft_gpu_f32(&o->a), weft_gpu_f32(&o->out),
                                      weft_gpu_ld(&o->out), weft_gpu_f32(&o->state), weft_gpu_ld(&o->state),
                                      weft_gpu_i32(&o->slots), o->state.ne1, o->in.ne1, (int)o->n_k_head,
                                      (int)o->n_v_head, (int)o->head_dim, o->k_grouped, o->eps, g->n_mp, g->err_dev};
        return g->hooks->delta_net(&a, st);
    }
    default:
        return g->hooks->err_invalid;
    }
}
