/* Which ops the OpenCL kernels take (supports) and how each is queued
 * (run): a few kernel launches per op on the device's in-order queue, no
 * host round trip inside a step (MOE_ROUTE and MATMUL_ID: ocl_moe.c). */
#include "backends/opencl/ocl_internal.h"
#include "base/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- supports ---- */

static bool view_in(const struct weft_view *v)
{
    if (!v->buf || v->ne0 <= 0 || v->ne1 <= 0 || v->ne0 > INT32_MAX || v->ne1 > INT32_MAX) return false;
    const size_t rs = weft_row_size(v->type, v->ne0);
    if (v->nb1 < rs || v->offset > v->buf->size || rs > v->buf->size - v->offset) return false;
    return v->ne1 == 1 || v->nb1 <= (v->buf->size - v->offset - rs) / (uint64_t)(v->ne1 - 1);
}

static bool f32_ok(const struct weft_view *v)
{
    return v->type == WEFT_TYPE_F32 && view_in(v) && v->offset % 4 == 0 && v->nb1 % 4 == 0;
}

static bool i32_ok(const struct weft_view *v, int64_t n)
{
    return v->type == WEFT_TYPE_I32 && v->buf && v->offset % 4 == 0 && v->ne0 * v->ne1 >= n &&
           v->offset <= v->buf->size && (uint64_t)n * 4 <= v->buf->size - v->offset;
}

/* an I32 matrix read row by row (MoE's ids) */
static bool i32v_ok(const struct weft_view *v)
{
    return v->type == WEFT_TYPE_I32 && view_in(v) && v->offset % 4 == 0 && v->nb1 % 4 == 0;
}

static bool weight_ok(const struct weft_view *w)
{
    switch (w->type) {
    case WEFT_TYPE_F32: return f32_ok(w);
    case WEFT_TYPE_F16: case WEFT_TYPE_BF16: case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_0:
    case WEFT_TYPE_Q5_1: case WEFT_TYPE_Q8_0: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_IQ4_XS:
        /* F16 values are read 2-byte aligned (every block layout keeps them so) */
        return view_in(w) && w->ne0 % weft_type_get(w->type)->block_size == 0 && w->offset % 2 == 0 && w->nb1 % 2 == 0;
    case WEFT_TYPE_MXFP4:
        /* 17-byte blocks, read byte by byte: rows at any offset */
        return view_in(w) && w->ne0 % weft_type_get(w->type)->block_size == 0;
    default: return false;
    }
}

static bool same_rows(const struct weft_view *a, const struct weft_view *b) { return a->ne0 == b->ne0 && a->ne1 == b->ne1; }

/* MATMUL's bias: n F32 values one after another (a vector view, or rows
 * packed without gaps) */
static bool bias_ok(const struct weft_view *v, int64_t n)
{
    return f32_ok(v) && v->ne0 * v->ne1 == n && (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4);
}

/* whole blocks the KV buffer holds (backend.h's layout) */
static uint64_t kv_blocks(const struct weft_kv_view *kv)
{
    const uint64_t per = (uint64_t)kv->n_layer * WEFT_KV_BLOCK_TOKENS *
                         (weft_row_size(kv->type, (int64_t)kv->n_kv_head * kv->head_dim) +
                          (kv->v_in_k ? 0 : weft_row_size(kv->type, (int64_t)kv->n_kv_head * weft_kv_head_dim_v(kv))));
    return per ? kv->buf->size / per : 0;
}

/* K heads of head_dim and V heads of head_dim_v: each at most the
 * attention kernel's ATT_MAX_HD (576, DeepSeek's latent), whole Q8_0 blocks in a Q8_0 cache */
static bool kv_ok(const struct weft_kv_view *kv, const struct weft_batch_view *bv)
{
    const uint32_t hdv = weft_kv_head_dim_v(kv);
    /* api 7's latent cache: one KV head whose K row ends with the V */
    if (kv->v_in_k && (kv->n_kv_head != 1 || hdv >= kv->head_dim ||
                       (kv->type == WEFT_TYPE_Q8_0 && (kv->head_dim - hdv) % 32)))
        return false;
    return kv->buf && kv->layer < kv->n_layer && kv->head_dim > 0 && kv->head_dim <= 576 && hdv <= 576 &&
           kv->n_kv_head > 0 &&
           (kv->type == WEFT_TYPE_F16 || (kv->type == WEFT_TYPE_Q8_0 && kv->head_dim % 32 == 0 && hdv % 32 == 0)) &&
           i32_ok(&bv->pos, bv->n_rows) && i32_ok(&bv->slot, bv->n_rows) && i32_ok(&bv->seq, bv->n_rows);
}

/* an I32 vector of at least n values (the recurrent ops' slots) */
static bool i32vec_ok(const struct weft_view *v, int64_t n)
{
    return i32_ok(v, n) && (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4);
}

/* a per-v-head F32 vector (DELTA_NET's dt_bias and a): n values one after another */
static bool head_vec_ok(const struct weft_view *v, int64_t n)
{
    return f32_ok(v) && v->ne0 * v->ne1 >= n && (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4);
}

bool ocl_supports(struct weft_backend *b, const struct weft_op *op)
{
    const struct ocl_backend *ob = (const struct ocl_backend *)b;
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return weight_ok(&o->table) && f32_ok(&o->out) && o->out.ne0 == o->table.ne0 &&
               i32_ok(&o->ids, o->ids.ne0 * o->ids.ne1) && o->out.ne1 >= o->ids.ne0 * o->ids.ne1;
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return f32_ok(&o->x) && f32_ok(&o->w) && f32_ok(&o->out) && same_rows(&o->x, &o->out) &&
               o->w.ne0 >= o->x.ne0 &&
               (!o->has_add || (f32_ok(&o->add) && f32_ok(&o->sum) && same_rows(&o->x, &o->add) &&
                                same_rows(&o->x, &o->sum)));
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        return weight_ok(&o->w) && f32_ok(&o->x) && f32_ok(&o->out) && o->x.ne0 == o->w.ne0 &&
               o->out.ne0 == o->w.ne1 && o->out.ne1 == o->x.ne1 &&
               (!o->has_add || (f32_ok(&o->add) && same_rows(&o->add, &o->out))) &&
               (!o->has_bias || bias_ok(&o->bias, o->w.ne1));
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        const uint32_t hd = o->kv.head_dim, hdv = weft_kv_head_dim_v(&o->kv);
        /* v: not read with a latent cache (v_in_k); k and v not with q_only (api 10) */
        const bool v_ok = o->q_only || o->kv.v_in_k ||
                          (f32_ok(&o->v) && o->v.ne0 >= (int64_t)o->kv.n_kv_head * hdv && o->v.ne1 >= o->batch.n_rows);
        const bool k_ok = o->q_only || (f32_ok(&o->k) && o->k.ne0 >= (int64_t)o->kv.n_kv_head * hd &&
                                        o->k.ne1 >= o->batch.n_rows);
        return kv_ok(&o->kv, &o->batch) && f32_ok(&o->q) && k_ok && v_ok && o->n_rot <= hd &&
               o->n_rot % 2 == 0 && o->n_head % o->kv.n_kv_head == 0 && o->q.ne0 >= (int64_t)o->n_head * hd &&
               o->q.ne1 >= o->batch.n_rows &&
               /* freq_factors: n_rot/2 F32 values one after another (the
                * table reads them back, the kernel indexes them) */
               (!o->has_freq_factors || (o->n_rot > 0 && bias_ok(&o->freq_factors, o->n_rot / 2)));
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        const uint32_t hd = o->kv.head_dim, hdv = weft_kv_head_dim_v(&o->kv);
        return kv_ok(&o->kv, &o->batch) && f32_ok(&o->q) && f32_ok(&o->out) && o->n_head % o->kv.n_kv_head == 0 &&
               o->q.ne0 >= (int64_t)o->n_head * hd && o->out.ne0 >= (int64_t)o->n_head * hdv &&
               o->q.ne1 >= o->batch.n_rows && o->out.ne1 >= o->batch.n_rows && o->batch.bt.buf &&
               i32_ok(&o->batch.bt_off, o->batch.n_seq) && i32_ok(&o->batch.bt, 1) &&
               /* api 7: a sink logit per head, n_head F32 values one after another */
               (!o->has_sinks || (f32_ok(&o->sinks) && o->sinks.ne0 * o->sinks.ne1 >= o->n_head &&
                                  (o->sinks.ne1 == 1 || o->sinks.nb1 == (size_t)o->sinks.ne0 * 4)));
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        return (o->act == WEFT_GLU_SILU || o->act == WEFT_GLU_GELU_TANH || o->act == WEFT_GLU_SWIGLU_OAI ||
                o->act == WEFT_GLU_SIGMOID) &&
               f32_ok(&o->gate) && f32_ok(&o->up) &&
               f32_ok(&o->out) && same_rows(&o->gate, &o->out) && same_rows(&o->up, &o->out);
    }
    case WEFT_OP_ADD: {
        const struct weft_op_add *o = &op->u.add;
        return f32_ok(&o->a) && f32_ok(&o->b) && f32_ok(&o->out) && same_rows(&o->a, &o->out) &&
               same_rows(&o->b, &o->out);
    }
    case WEFT_OP_COPY:
        return op->u.copy.src && op->u.copy.dst && op->u.copy.src->ob == op->u.copy.dst->ob;
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        const int64_t n_out = o->rows.ne0;
        return weight_ok(&o->w) && f32_ok(&o->x) && f32_ok(&o->norm_w) && f32_ok(&o->out) &&
               o->w.ne0 == o->x.ne0 && o->norm_w.ne0 >= o->x.ne0 && i32_ok(&o->rows, n_out) &&
               o->out.ne0 == o->w.ne1 && o->out.ne1 >= n_out;
    }
    case WEFT_OP_MOE_ROUTE: {
        const struct weft_op_moe_route *m = &op->u.moe_route;
        return f32_ok(&m->logits) && i32v_ok(&m->ids) && f32_ok(&m->weights) && m->k >= 1 &&
               m->logits.ne0 >= m->k && m->logits.ne0 <= OCL_MAX_EXPERTS && m->ids.ne0 >= m->k &&
               m->weights.ne0 >= m->k && m->ids.ne1 == m->logits.ne1 && m->weights.ne1 == m->logits.ne1 &&
               m->gating <= WEFT_MOE_SOFTMAX_TOPK && weft_moe_groups_ok(m) &&
               (!m->has_bias || bias_ok(&m->bias, m->logits.ne0)) &&
               (!m->has_expert_scale || bias_ok(&m->expert_scale, m->logits.ne0));  /* api 10 */
    }
    case WEFT_OP_MATMUL_ID: {
        const struct weft_op_matmul_id *m = &op->u.matmul_id;
        if (!weight_ok(&m->w) || !i32v_ok(&m->ids) || !f32_ok(&m->x) || !f32_ok(&m->out) || m->n_expert < 1 ||
            m->n_expert > OCL_MAX_EXPERTS || m->w.ne1 % m->n_expert || m->x.ne0 != m->w.ne0)
            return false;
        const int64_t N = m->w.ne1 / m->n_expert, slots = m->ids.ne0 * m->ids.ne1;
        if (slots > INT32_MAX / 2 || m->out.ne0 != N || m->x.ne1 != (m->x_per_slot ? slots : m->ids.ne1)) return false;
        if (m->has_weights ? (!f32_ok(&m->weights) || m->weights.ne0 < m->ids.ne0 || m->weights.ne1 != m->ids.ne1 ||
                              m->out.ne1 != m->ids.ne1 ||
                              (m->has_add && (!f32_ok(&m->add) || !same_rows(&m->add, &m->out))))
                           : (m->has_add || m->out.ne1 != slots))
            return false;
        return !m->has_bias || bias_ok(&m->bias, m->w.ne1);
    }
    case WEFT_OP_SSM_CONV: {
        const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
        const int64_t rows = o->x.ne1, C = o->x.ne0, K = o->w.ne0;
        return f32_ok(&o->x) && f32_ok(&o->w) && f32_ok(&o->out) && f32_ok(&o->state) && K >= 2 &&
               K <= OCL_REC_MAX_K && o->w.ne1 == C && same_rows(&o->x, &o->out) && o->state.ne0 == (K - 1) * C &&
               i32vec_ok(&o->slots, rows);
    }
    case WEFT_OP_DELTA_NET: {
        const struct weft_op_delta_net *o = &op->u.delta_net;
        const int64_t rows = o->in.ne1, S = o->head_dim, Hk = o->n_k_head, Hv = o->n_v_head;
        /* a work-group of S items per v head and sequence */
        return f32_ok(&o->in) && f32_ok(&o->beta) && f32_ok(&o->alpha) && f32_ok(&o->out) && f32_ok(&o->state) &&
               S >= 1 && S <= OCL_DN_MAX_S && (size_t)S <= ob->dn_wg && Hk >= 1 && Hv >= Hk && Hv % Hk == 0 &&
               o->eps > 0.0f && o->in.ne0 == (2 * Hk + Hv) * S && o->beta.ne0 >= Hv && o->alpha.ne0 >= Hv &&
               o->beta.ne1 == rows && o->alpha.ne1 == rows && head_vec_ok(&o->dt_bias, Hv) && head_vec_ok(&o->a, Hv) &&
               o->out.ne0 == Hv * S && o->out.ne1 == rows && o->state.ne0 == Hv * S * S && i32vec_ok(&o->slots, rows);
    }
    default:
        return false;
    }
}

/* ---- kernel launches ---- */

weft_status ocl_launch(struct ocl_backend *ob, struct args *a, const char *what, cl_uint dims, const size_t *gsz,
                       const size_t *lsz)
{
    if (a->e != CL_SUCCESS) return ocl_err(a->e, what);
    for (cl_uint d = 0; d < dims; d++)
        if (gsz[d] == 0) return WEFT_OK;
    cl_int e = clEnqueueNDRangeKernel(ob->q, a->k, dims, NULL, gsz, lsz, 0, NULL, NULL);
    return e == CL_SUCCESS ? WEFT_OK : ocl_err(e, what);
}

/* ---- ops ---- */

static weft_status op_embed(struct ocl_backend *ob, const struct weft_op_embed *o)
{
    struct args a = {ob->k[OK_EMBED], 0, CL_SUCCESS};
    const int64_t n = o->ids.ne0 * o->ids.ne1;
    /* ids known on the host are checked before anything runs, as the CPU does */
    const int32_t *id = ocl_host_i32(&o->ids);
    for (int64_t r = 0; id && r < n; r++)
        if (id[r] < 0 || id[r] >= o->table.ne1)
            return weft_error(WEFT_ERR_INVALID_ARG, "opencl: token id %d outside the embedding table (%lld rows)", id[r],
                              (long long)o->table.ne1);
    a_buf(&a, &o->table);
    a_u64(&a, o->table.nb1);
    a_i32(&a, o->table.type);
    a_i32(&a, o->table.ne0);
    a_i32(&a, o->table.ne1);
    a_buf(&a, &o->ids);
    a_f32v(&a, &o->out);
    a_f32(&a, o->scale);
    a_mem(&a, ob->err);
    ocl_dirty(o->out.buf);
    const size_t g[2] = {ocl_up((size_t)o->table.ne0, 64), (size_t)n}, l[2] = {64, 1};
    return ocl_launch(ob, &a, "EMBED", 2, g, l);
}

static weft_status op_rmsnorm(struct ocl_backend *ob, const struct weft_op_rmsnorm *o)
{
    struct args a = {ob->k[OK_RMSNORM], 0, CL_SUCCESS};
    const struct weft_view *add = o->has_add ? &o->add : &o->x, *sum = o->has_add ? &o->sum : &o->x;
    a_f32v(&a, &o->x);
    a_f32v(&a, add);
    a_f32v(&a, sum);
    a_buf(&a, &o->w);
    a_f32v(&a, &o->out);
    a_i32(&a, o->x.ne0);
    a_f32(&a, o->eps);
    a_i32(&a, o->has_add);
    if (o->has_add) ocl_dirty(o->sum.buf);
    ocl_dirty(o->out.buf);
    const size_t g[1] = {64 * (size_t)o->x.ne1}, l[1] = {64};
    return ocl_launch(ob, &a, "RMSNORM", 1, g, l);
}

weft_status ocl_grow(struct ocl_backend *ob, cl_mem *m, size_t *size, size_t need, const char *what)
{
    if (need <= *size) return WEFT_OK;
    cl_int e;
    cl_mem nm = clCreateBuffer(ob->ctx, CL_MEM_READ_WRITE, need, NULL, &e);
    if (e != CL_SUCCESS) return ocl_err(e, what);
    if (*m) clReleaseMemObject(*m);
    *m = nm;
    *size = need;
    return WEFT_OK;
}

weft_status ocl_quant_act(struct ocl_backend *ob, enum weft_type wt, const struct weft_view *x, int64_t M)
{
    const bool with_sum = wt == WEFT_TYPE_Q4_1 || wt == WEFT_TYPE_Q5_1;
    const size_t xbs = sizeof(struct weft_block_q8_0) + (with_sum ? 2 : 0), nb = (size_t)x->ne0 / 32;
    weft_status st = ocl_grow(ob, &ob->act, &ob->act_size, (size_t)M * nb * xbs, "allocating the activations' blocks");
    if (st != WEFT_OK) return st;
    struct args q = {ob->k[OK_QUANT_ACT], 0, CL_SUCCESS};
    a_f32v(&q, x);
    a_mem(&q, ob->act);
    a_i32(&q, x->ne0);
    a_i32(&q, M);
    a_i32(&q, with_sum);
    const size_t gq[2] = {ocl_up(nb, 16), ocl_up((size_t)M, 4)}, lq[2] = {16, 4};
    return ocl_launch(ob, &q, "quantizing activations", 2, gq, lq);
}

/* The exact forms of the 32-element quants: x quantized as the CPU does
 * (ocl_quant_act), then each output in ggml's vec_dot order (IQ4_NL's
 * tinyBLAS order where the CPU takes it: several rows, N a multiple of 4) */
static weft_status matmul_exact_q(struct ocl_backend *ob, const struct weft_view *w, const struct weft_view *x,
                                  const struct weft_view *out, const struct weft_view *add,
                                  const struct weft_view *bias, int64_t M)
{
    weft_status st = ocl_quant_act(ob, w->type, x, M);
    if (st != WEFT_OK) return st;
    const int rows = M >= 4 ? 4 : 1;  /* per work-item: mm_exact_q4 shares each weight block's unpacking */
    struct args a = {ob->k[rows == 4 ? OK_MM_EXACT_Q4 : OK_MM_EXACT_Q], 0, CL_SUCCESS};
    a_buf(&a, w);
    a_u64(&a, w->nb1);
    a_i32(&a, w->type);
    a_mem(&a, ob->act);
    a_u64(&a, 0);
    a_u64(&a, 0);
    a_f32v(&a, out);
    a_f32v(&a, add ? add : out);
    a_i32(&a, add != NULL);
    a_bias(&a, bias, out);
    a_i32(&a, w->ne0);
    a_i32(&a, w->ne1);
    a_i32(&a, M);
    a_i32(&a, w->type == WEFT_TYPE_IQ4_NL && M >= 2 && w->ne1 % 4 == 0);
    ocl_dirty(out->buf);
    const size_t g[2] = {ocl_up((size_t)w->ne1, 64), (size_t)(M + rows - 1) / rows}, l[2] = {64, 1};
    return ocl_launch(ob, &a, "MATMUL", 2, g, l);
}

/* out = (x · Wᵀ (+ bias)) (+ add): the vector form for up to 8 rows per
 * weight row's pass (decode), tiles otherwise */
static weft_status matmul(struct ocl_backend *ob, const struct weft_view *w, const struct weft_view *x,
                          const struct weft_view *out, const struct weft_view *add, const struct weft_view *bias,
                          int64_t M)
{
    if (ob->exact && ocl_exact_q(w->type)) return matmul_exact_q(ob, w, x, out, add, bias, M);
    const bool vec = M <= 8;
    /* exact: F32/F16 in the CPU's order, tinyBLAS's (mm) where ggml takes it */
    const bool exact = ob->exact && (w->type == WEFT_TYPE_F32 || w->type == WEFT_TYPE_F16);
    struct args a = {ob->k[exact ? OK_MM_EXACT_F : vec ? OK_MM_VEC : OK_MM_TILE], 0, CL_SUCCESS};
    a_buf(&a, w);
    a_u64(&a, w->nb1);
    a_i32(&a, w->type);
    a_f32v(&a, x);
    a_f32v(&a, out);
    a_f32v(&a, add ? add : out);
    a_i32(&a, add != NULL);
    a_bias(&a, bias, out);
    a_i32(&a, w->ne0);
    a_i32(&a, w->ne1);
    a_i32(&a, M);
    ocl_dirty(out->buf);
    if (exact) {
        a_i32(&a, M >= 2 && w->ne1 % 4 == 0 && w->ne0 % 16 == 0);
        const size_t g[2] = {ocl_up((size_t)w->ne1, 64), (size_t)M}, l[2] = {64, 1};
        return ocl_launch(ob, &a, "MATMUL", 2, g, l);
    }
    if (vec) {
        const size_t g[2] = {64 * (size_t)w->ne1, (size_t)(M + 7) / 8}, l[2] = {64, 1};
        return ocl_launch(ob, &a, "MATMUL", 2, g, l);
    }
    const size_t g[2] = {ocl_up((size_t)w->ne1, 16), ocl_up((size_t)M, 16)}, l[2] = {16, 16};
    return ocl_launch(ob, &a, "MATMUL", 2, g, l);
}

static weft_status op_logits(struct ocl_backend *ob, const struct weft_op_logits *o)
{
    const int64_t n_out = o->rows.ne0, K = o->x.ne0;
    if (n_out == 0) return WEFT_OK;
    const int32_t *idx = ocl_host_i32(&o->rows);
    for (int64_t i = 0; idx && i < n_out; i++)
        if (idx[i] < 0 || idx[i] >= o->x.ne1)
            return weft_error(WEFT_ERR_INVALID_ARG, "opencl: logits row %d outside [0, %lld)", idx[i], (long long)o->x.ne1);
    weft_status st = ocl_grow(ob, &ob->scratch, &ob->scratch_size, (size_t)n_out * (size_t)K * sizeof(float),
                          "allocating LOGITS' scratch");
    if (st != WEFT_OK) return st;
    struct args a = {ob->k[OK_LOGITS_NORM], 0, CL_SUCCESS};
    a_f32v(&a, &o->x);
    a_i32(&a, o->x.ne1);
    a_buf(&a, &o->rows);
    a_buf(&a, &o->norm_w);
    a_mem(&a, ob->scratch);
    a_u64(&a, 0);
    a_i32(&a, K);
    a_f32(&a, o->eps);
    a_mem(&a, ob->err);
    const size_t g[1] = {64 * (size_t)n_out}, l[1] = {64};
    st = ocl_launch(ob, &a, "LOGITS", 1, g, l);
    if (st != WEFT_OK) return st;
    /* the normalised rows as a view of the scratch cl_mem */
    struct weft_buffer sb = {.ob = ob, .mem = ob->scratch, .off = 0, .size = ob->scratch_size};
    const struct weft_view xv = {&sb, 0, WEFT_TYPE_F32, K, n_out, (size_t)K * sizeof(float)};
    st = matmul(ob, &o->w, &xv, &o->out, NULL, NULL, n_out);
    if (st != WEFT_OK || o->softcap == 0.0f) return st;
    /* api 6: soft-capped, in place */
    struct args c = {ob->k[OK_SOFTCAP], 0, CL_SUCCESS};
    a_f32v(&c, &o->out);
    a_i32(&c, o->out.ne0);
    a_f32(&c, o->softcap);
    a_f32(&c, 1.0f / o->softcap);
    ocl_dirty(o->out.buf);
    const size_t gc[2] = {ocl_up(o->out.ne0, 64), (size_t)n_out}, lc[2] = {64, 1};
    return ocl_launch(ob, &c, "LOGITS", 2, gc, lc);
}

/* GeGLU's table (made once per device): every F16 value's GeLU-tanh in
 * F32 with libm's tanhf, rounded to F16, as the CPU's (ggml's) table */
static weft_status gelu_table(struct ocl_backend *ob)
{
    if (ob->gelu_tab) return WEFT_OK;
    weft_half *t = malloc((size_t)(1u << 16) * sizeof *t);
    if (!t) return weft_error(WEFT_ERR_NOMEM, "opencl: out of host memory (GeLU table)");
    for (uint32_t i = 0; i < (1u << 16); i++) {
        const float x = weft_half_to_f32((weft_half)i);
        const float y = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
        t[i] = weft_f32_to_half(y);
    }
    cl_int e;
    ob->gelu_tab = clCreateBuffer(ob->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)(1u << 16) * sizeof *t, t,
                                  &e);
    free(t);
    if (e != CL_SUCCESS) {
        ob->gelu_tab = NULL;
        return ocl_err(e, "allocating GeGLU's table");
    }
    return WEFT_OK;
}

static weft_status op_silu_add(struct ocl_backend *ob, const struct weft_op *op)
{
    const bool silu = op->kind == WEFT_OP_SILU_MUL;
    const struct weft_view *x = silu ? &op->u.silu_mul.gate : &op->u.add.a, *y = silu ? &op->u.silu_mul.up : &op->u.add.b,
                           *out = silu ? &op->u.silu_mul.out : &op->u.add.out;
    const bool gelu = silu && op->u.silu_mul.act == WEFT_GLU_GELU_TANH;
    if (gelu) {
        weft_status st = gelu_table(ob);
        if (st != WEFT_OK) return st;
    }
    struct args a = {ob->k[silu ? OK_SILU_MUL : OK_ADD], 0, CL_SUCCESS};
    a_f32v(&a, x);
    a_f32v(&a, y);
    a_f32v(&a, out);
    a_i32(&a, out->ne0);
    if (silu) {
        a_i32(&a, op->u.silu_mul.act);
        a_mem(&a, gelu ? ob->gelu_tab : ob->err);  /* unread but for GeGLU */
        a_f32(&a, op->u.silu_mul.alpha);           /* SWIGLU_OAI's (api 7) */
        a_f32(&a, op->u.silu_mul.limit);
    } else {
        a_f32(&a, op->u.add.scale);                /* api 10: (a + b) * scale; 0: a + b */
    }
    ocl_dirty(out->buf);
    const size_t g[2] = {ocl_up((size_t)out->ne0, 64), (size_t)out->ne1}, l[2] = {64, 1};
    return ocl_launch(ob, &a, silu ? "SILU_MUL" : "ADD", 2, g, l);
}

/* The largest of the batch's positions: from the buffer's host copy when
 * it is current, else (exact forms only) read back from the device, which
 * waits for the ops queued before; once per step, not per layer: the value
 * is kept while the buffer is not written. -1: unknown, or a negative
 * position. */
static int32_t max_position(struct ocl_backend *ob, const struct weft_op_rope_kv *o)
{
    const struct weft_buffer *pb = o->batch.pos.buf;
    const uint32_t n = o->batch.n_rows;
    int32_t *tmp = NULL;
    const int32_t *pos;
    if (pb->shadow && pb->shadow_ok) {
        pos = (const int32_t *)(pb->shadow + o->batch.pos.offset);
    } else if (ob->pos_id == pb->id && ob->pos_gen == pb->gen && ob->pos_off == o->batch.pos.offset && ob->pos_n == n) {
        return ob->pos_max;
    } else {
        if (!ob->exact || !(tmp = malloc((size_t)n * sizeof *tmp))) return -1;
        if (clEnqueueReadBuffer(ob->q, pb->mem, CL_TRUE, pb->off + o->batch.pos.offset, (size_t)n * sizeof *tmp, tmp, 0,
                                NULL, NULL) != CL_SUCCESS) {
            free(tmp);
            return -1;
        }
        pos = tmp;
    }
    int32_t max = 0;
    for (uint32_t r = 0; r < n && max >= 0; r++) max = pos[r] < 0 ? -1 : pos[r] > max ? pos[r] : max;
    if (tmp) {
        ob->pos_id = pb->id;
        ob->pos_gen = pb->gen;
        ob->pos_off = o->batch.pos.offset;
        ob->pos_n = n;
        ob->pos_max = max;
    }
    free(tmp);
    return max;
}

/* two floats the same bit for bit (a table key: -0 and NaN as they are) */
static bool same_f32(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The n_rot/2 freq_factors of o on the host: kept from an earlier read
 * while their buffer (id, gen) and offset are the same, else from the
 * buffer's host copy when it is current, else read back from the device
 * (waiting for the ops queued before: once per layer's vector, as the
 * model's are not written again). NULL: out of memory or the read failed. */
static const float *ff_values(struct ocl_backend *ob, const struct weft_op_rope_kv *o)
{
    struct weft_buffer *fb = o->freq_factors.buf;
    const uint32_t n = o->n_rot / 2;
    const size_t off = o->freq_factors.offset;
    struct ocl_ff_entry *e = NULL;
    for (uint32_t i = 0; i < ob->ff_len && !e; i++)
        if (ob->ff[i].id == fb->id && ob->ff[i].off == off && ob->ff[i].n == n) e = &ob->ff[i];
    if (e && e->gen == fb->gen) return e->vals;
    if (!e) {
        if (!ob->ff) {
            if (!(ob->ff = calloc(OCL_FF_ENTRIES, sizeof *ob->ff))) return NULL;
        }
        if (ob->ff_len < OCL_FF_ENTRIES) {
            e = &ob->ff[ob->ff_len++];
        } else {
            e = &ob->ff[ob->ff_next];
            ob->ff_next = (ob->ff_next + 1) % OCL_FF_ENTRIES;
        }
        float *v = realloc(e->vals, (size_t)n * sizeof *v);
        if (!v) return NULL;
        e->vals = v;
        e->n = n;
        e->off = off;
        e->id = fb->id;
    }
    e->gen = fb->gen - 1;  /* nothing valid until read */
    if (fb->shadow && fb->shadow_ok) {
        memcpy(e->vals, fb->shadow + off, (size_t)n * sizeof *e->vals);
    } else if (ocl_buffer_read(fb, off, e->vals, (size_t)n * sizeof *e->vals) != WEFT_OK) {
        return NULL;
    }
    e->gen = fb->gen;
    return e->vals;
}

/* The RoPE table (cos/sin of every position below rope_rows, from
 * base/rope.h's weft_rope_cos_sin_ext: the CPU's own libm calls, with the
 * op's freq_factors, ext_factor, attn_factor and corr_dims), grown to cover
 * the batch's positions when they are known (max_position), made again
 * when any field it depends on differs (the freq_factors by value).
 * false: the kernel computes its own angles. */
static bool rope_table(struct ocl_backend *ob, const struct weft_op_rope_kv *o)
{
    const int32_t max = max_position(ob, o);
    if (max < 0 || o->n_rot == 0) return false;
    const uint32_t half = o->n_rot / 2;
    const float *ff = NULL;
    if (o->has_freq_factors && !(ff = ff_values(ob, o))) return false;
    const bool same = ob->rope_tab && ob->rope_n_rot == o->n_rot && same_f32(ob->rope_base, o->freq_base) &&
                      same_f32(ob->rope_scale, o->freq_scale) && ob->rope_has_ff == o->has_freq_factors &&
                      (!ff || memcmp(ob->rope_ff, ff, (size_t)half * sizeof *ff) == 0) &&
                      same_f32(ob->rope_ext, o->ext_factor) && same_f32(ob->rope_attn, o->attn_factor) &&
                      same_f32(ob->rope_corr[0], o->corr_dims[0]) && same_f32(ob->rope_corr[1], o->corr_dims[1]);
    if (same && (uint32_t)max < ob->rope_rows) return true;
    uint32_t cap = 256;
    while (cap <= (uint32_t)max && cap < (1u << 24)) cap *= 2;
    if ((uint32_t)max >= cap) return false;
    const size_t bytes = (size_t)cap * o->n_rot * sizeof(float);
    float *t = malloc(bytes), *key_ff = NULL;
    if (!t || (ff && !(key_ff = malloc((size_t)half * sizeof *key_ff)))) {
        free(t);
        return false;
    }
    if (ff) memcpy(key_ff, ff, (size_t)half * sizeof *ff);
    const struct weft_rope_ext ext = {.freq_factors = key_ff, .ext_factor = o->ext_factor,
                                      .attn_factor = o->attn_factor, .corr_dims = {o->corr_dims[0], o->corr_dims[1]}};
    for (uint32_t p = 0; p < cap; p++)
        weft_rope_cos_sin_ext((int32_t)p, o->n_rot, o->freq_base, o->freq_scale, &ext, t + (size_t)p * o->n_rot);
    cl_int e;
    cl_mem m = clCreateBuffer(ob->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, t, &e);
    free(t);
    if (e != CL_SUCCESS) {
        free(key_ff);
        return false;
    }
    if (ob->rope_tab) clReleaseMemObject(ob->rope_tab);
    free(ob->rope_ff);
    ob->rope_tab = m;
    ob->rope_rows = cap;
    ob->rope_n_rot = o->n_rot;
    ob->rope_base = o->freq_base;
    ob->rope_scale = o->freq_scale;
    ob->rope_has_ff = o->has_freq_factors;
    ob->rope_ff = key_ff;
    ob->rope_ext = o->ext_factor;
    ob->rope_attn = o->attn_factor;
    ob->rope_corr[0] = o->corr_dims[0];
    ob->rope_corr[1] = o->corr_dims[1];
    return true;
}

/* the paged KV cache's arguments, in the order rope_kv and attention take them */
static void a_kv(struct args *a, const struct weft_kv_view *kv)
{
    a_mem(a, kv->buf->mem);
    a_u64(a, kv->buf->off);
    a_i32(a, kv->type == WEFT_TYPE_Q8_0);
    a_i32(a, kv->n_layer);
    a_i32(a, kv->layer);
    a_i32(a, kv->n_kv_head);
    a_i32(a, kv->head_dim);
    a_i32(a, weft_kv_head_dim_v(kv));
    a_i32(a, kv->v_in_k);
}

static weft_status op_rope_kv(struct ocl_backend *ob, const struct weft_op_rope_kv *o)
{
    const bool tab = rope_table(ob, o);
    if (!tab && ob->exact && o->n_rot > 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "opencl: ROPE_KV: no table of RoPE's angles for these positions (a "
                          "negative one, freq_factors that could not be read back, or out of memory): the exact forms take the CPU's angles only");
    struct args a = {ob->k[OK_ROPE_KV], 0, CL_SUCCESS};
    /* api 10's q_only reads no k or v: q stands in (unread) */
    const struct weft_view *k = o->q_only ? &o->q : &o->k;
    a_f32v(&a, &o->q);
    a_f32v(&a, k);
    a_f32v(&a, o->q_only || o->kv.v_in_k ? k : &o->v);  /* k: an unread stand-in */
    a_kv(&a, &o->kv);
    a_i32(&a, o->n_head);
    a_i32(&a, o->n_rot);
    a_i32(&a, o->mode == WEFT_ROPE_NEOX);
    a_f32(&a, o->freq_scale);
    a_f32(&a, o->n_rot ? powf(o->freq_base, -2.0f / (float)o->n_rot) : 1.0f);
    /* the kernel's own angles (positions past the table, or none): the
     * same scaling as base/rope.h, the magnitude formed here as there */
    a_buf(&a, o->has_freq_factors ? &o->freq_factors : &o->q);  /* q: an unread stand-in */
    a_i32(&a, o->has_freq_factors);
    a_f32(&a, o->ext_factor);
    float mscale = o->attn_factor != 0.0f ? o->attn_factor : 1.0f;
    if (o->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / o->freq_scale);
    a_f32(&a, mscale);
    a_f32(&a, o->corr_dims[0]);
    a_f32(&a, o->corr_dims[1]);
    a_buf(&a, &o->batch.pos);
    a_buf(&a, &o->batch.slot);
    a_mem(&a, tab ? ob->rope_tab : ob->err);
    a_i32(&a, tab);
    a_i32(&a, tab ? (int64_t)ob->rope_rows : 0);
    a_i32(&a, o->batch.n_rows);
    const cl_long n_slots = (cl_long)kv_blocks(&o->kv) * WEFT_KV_BLOCK_TOKENS;
    a_set(&a, sizeof n_slots, &n_slots);
    a_mem(&a, ob->err);
    a_i32(&a, o->q_only);
    ocl_dirty(o->q.buf);
    if (!o->q_only) {  /* q_only leaves k and the cache as they were */
        ocl_dirty(o->k.buf);
        ocl_dirty(o->kv.buf);
    }
    const size_t g[1] = {ocl_up(o->batch.n_rows, 64)}, l[1] = {64};
    return ocl_launch(ob, &a, "ROPE_KV", 1, g, l);
}

static weft_status op_attention(struct ocl_backend *ob, const struct weft_op_attention *o)
{
    struct args a = {ob->k[OK_ATTENTION], 0, CL_SUCCESS};
    a_f32v(&a, &o->q);
    a_f32v(&a, &o->out);
    a_kv(&a, &o->kv);
    a_i32(&a, o->n_head);
    a_f32(&a, o->softcap != 0.0f ? o->scale / o->softcap : o->scale);
    /* a window past every int32 position masks nothing */
    a_i32(&a, o->window <= INT32_MAX ? (int64_t)o->window : 0);
    a_f32(&a, o->softcap);
    a_buf(&a, &o->batch.pos);
    a_buf(&a, &o->batch.seq);
    a_buf(&a, &o->batch.bt_off);
    a_buf(&a, &o->batch.bt);
    a_i32(&a, o->batch.n_rows);
    a_i32(&a, o->batch.n_seq);
    a_i32(&a, (int64_t)((o->batch.bt.buf->size - o->batch.bt.offset) / 4));
    a_i32(&a, (int64_t)(kv_blocks(&o->kv) < INT32_MAX ? kv_blocks(&o->kv) : INT32_MAX));
    a_mem(&a, ob->err);
    a_buf(&a, o->has_sinks ? &o->sinks : &o->q);  /* q: an unread stand-in */
    a_i32(&a, o->has_sinks);
    ocl_dirty(o->out.buf);
    const size_t g[2] = {ocl_up(o->n_head, 8), ocl_up(o->batch.n_rows, 8)}, l[2] = {8, 8};
    return ocl_launch(ob, &a, "ATTENTION", 2, g, l);
}

weft_status ocl_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct ocl_backend *ob = (struct ocl_backend *)b;
    for (size_t i = 0; i < n; i++) {
        const struct weft_op *op = &ops[i];
        if (!ocl_supports(b, op))
            return weft_error(WEFT_ERR_UNSUPPORTED, "opencl: op %zu (kind %d) not supported", i, (int)op->kind);
        weft_status st;
        switch (op->kind) {
        case WEFT_OP_EMBED: st = op_embed(ob, &op->u.embed); break;
        case WEFT_OP_RMSNORM: st = op_rmsnorm(ob, &op->u.rmsnorm); break;
        case WEFT_OP_MATMUL: {
            const struct weft_op_matmul *o = &op->u.matmul;
            st = matmul(ob, &o->w, &o->x, &o->out, o->has_add ? &o->add : NULL, o->has_bias ? &o->bias : NULL,
                        o->x.ne1);
            break;
        }
        case WEFT_OP_ROPE_KV: st = op_rope_kv(ob, &op->u.rope_kv); break;
        case WEFT_OP_ATTENTION: st = op_attention(ob, &op->u.attention); break;
        case WEFT_OP_SILU_MUL: case WEFT_OP_ADD: st = op_silu_add(ob, op); break;
        case WEFT_OP_COPY: {
            const struct weft_op_copy *o = &op->u.copy;
            st = ocl_buffer_copy(o->dst, o->dst_off, o->src, o->src_off, o->bytes);
            break;
        }
        case WEFT_OP_LOGITS: st = op_logits(ob, &op->u.logits); break;
        case WEFT_OP_MOE_ROUTE: st = ocl_moe_route(ob, &op->u.moe_route); break;
        case WEFT_OP_MATMUL_ID: st = ocl_matmul_id(ob, &op->u.matmul_id); break;
        case WEFT_OP_SSM_CONV: st = ocl_ssm_conv(ob, &op->u.ssm_conv); break;
        case WEFT_OP_DELTA_NET: st = ocl_delta_net(ob, &op->u.delta_net); break;
        default: st = weft_error(WEFT_ERR_UNSUPPORTED, "opencl: op kind %d", (int)op->kind);
        }
        if (st != WEFT_OK) return st;
    }
    return WEFT_OK;
}
