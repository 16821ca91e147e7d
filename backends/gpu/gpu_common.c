/* The CUDA and HIP backends' shared host code (see gpu_common.h): op
 * validation, scratch, and running an op list through the vendor's hooks.
 *
 * Step graphs: a step's launches are described by a key (every view's
 * buffer id, offset and shape, every scalar and flag, api 5's, 7's, 9's and
 * 10's fields included; not the data). The first time a key is seen the ops run
 * eagerly; the second time they are captured into a graph and launched;
 * from then on the graph is replayed, so a decode step costs one launch
 * instead of dozens. Data that changes between steps
 * (token ids, positions, block tables, the experts MOE_ROUTE chose, the
 * recurrent state slots and their states) lives in
 * device buffers the kernels read, and launch shapes never depend on it: a
 * graph stays valid while contexts grow and routes change. Scratch growth
 * drops every graph (they hold its address). */
#include "backends/gpu/gpu_common.h"
#include "kernels-common/launch.h"   /* the kernels' limits: WEFT_GK_ATTN_MAX_HD, WEFT_GK_MOE_MAX_EXPERTS */
#include "kernels-common/recurrent_geom.h"   /* the recurrent kernels' shapes (api 9) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t weft_gpu_next_buffer_id(void)
{
    static uint64_t next_buffer_id = 1;
    return __atomic_fetch_add(&next_buffer_id, 1, __ATOMIC_RELAXED);
}

bool weft_gpu_in_range(const struct weft_buffer *buf, size_t off, size_t n)
{
    return off <= buf->size && n <= buf->size - off;
}

weft_status weft_gpu_range(const struct weft_buffer *buf, size_t off, size_t n, const char *verb)
{
    if (weft_gpu_in_range(buf, off, n)) return WEFT_OK;
    return weft_error(WEFT_ERR_INVALID_ARG, "%s: %s [%zu, +%zu) outside buffer of %zu", buf->gpu->hooks->name, verb,
                      off, n, buf->size);
}

weft_status weft_gpu_take_input_error(struct weft_gpu *g)
{
    int err = *(volatile int *)g->err_host;
    if (!err) return WEFT_OK;
    *(volatile int *)g->err_host = 0;
    return weft_error(WEFT_ERR_INVALID_ARG, "%s: %s outside its table in the last op list (zeros were used)",
                      g->hooks->name,
                      err == 1   ? "a token id"
                      : err == 3 ? "a MATMUL_ID expert id"
                      : err == 4 ? "a recurrent state slot (SSM_CONV, DELTA_NET)"
                                 : "a LOGITS row index");
}

/* ---- supports ---- */

/* A view's rows lie inside its buffer and are aligned for the kernels
 * (4 bytes for F32/I32 rows, 2 for every weight block format but MXFP4's
 * 17-byte blocks, which the kernels read byte by byte). */
static bool view_ok(const struct weft_view *v)
{
    if (!v->buf || v->ne0 <= 0 || v->ne1 <= 0) return false;
    const struct weft_type_info *ti = weft_type_get(v->type);
    if (!ti || v->ne0 % ti->block_size) return false;
    size_t row = weft_row_size(v->type, v->ne0);
    size_t align = v->type == WEFT_TYPE_F32 || v->type == WEFT_TYPE_I32 ? 4 : v->type == WEFT_TYPE_MXFP4 ? 1 : 2;
    if (v->offset % align || v->nb1 % align) return false;
    size_t end = v->offset + (size_t)(v->ne1 - 1) * v->nb1 + row;
    return end <= v->buf->size && v->nb1 >= row;
}

static bool is_f32(const struct weft_view *v) { return v->type == WEFT_TYPE_F32 && view_ok(v); }
static bool is_i32(const struct weft_view *v) { return v->type == WEFT_TYPE_I32 && view_ok(v); }

static bool weight_ok(const struct weft_gpu_hooks *h, const struct weft_view *w)
{
    return h->type_ok((int)w->type) && view_ok(w);  /* block types: ne0 % block checked */
}

/* MATMUL's bias: N contiguous F32 values (a vector view, or rows packed
 * without gaps, as the kernels index bias[n]); also ATTENTION's sinks, MOE_ROUTE's choice
 * bias and api 10's expert_scale, and MATMUL_ID's per-expert bias */
static bool bias_ok(const struct weft_view *b, int64_t N)
{
    return is_f32(b) && b->ne0 * b->ne1 == N && (b->ne1 == 1 || b->nb1 == (size_t)b->ne0 * sizeof(float));
}

/* ROPE_KV's freq_factors: n_rot/2 contiguous F32 values (the kernel
 * indexes ff[i]), aligned and inside the buffer */
static bool freq_factors_ok(const struct weft_view *f, uint32_t n_rot)
{
    return is_f32(f) && f->ne0 * f->ne1 == (int64_t)(n_rot / 2) &&
           (f->ne1 == 1 || f->nb1 == (size_t)f->ne0 * sizeof(float));
}

static bool kv_ok(const struct weft_kv_view *kv, uint32_t n_head)
{
    const uint32_t hdv = weft_kv_head_dim_v(kv);
    /* api 7's latent cache: one KV head, V the tail of each K row (whole Q8_0 blocks in) */
    if (kv->v_in_k && (kv->n_kv_head != 1 || hdv >= kv->head_dim ||
                       (kv->type == WEFT_TYPE_Q8_0 && (kv->head_dim - hdv) % 32)))
        return false;
    return kv->buf && kv->layer < kv->n_layer && kv->n_kv_head > 0 && kv->head_dim > 0 &&
           kv->head_dim <= WEFT_GK_ATTN_MAX_HD && hdv <= WEFT_GK_ATTN_MAX_HD && n_head % kv->n_kv_head == 0 &&
           (kv->type == WEFT_TYPE_F16 || (kv->type == WEFT_TYPE_Q8_0 && kv->head_dim % 32 == 0 && hdv % 32 == 0));
}

/* MATMUL_ID (api 7): the shapes backend.h gives it, as the CPU checks them; the kernels' bounds
 * (experts, the weighted sum's grid of rows) */
static bool matmul_id_ok(const struct weft_gpu_hooks *h, const struct weft_op_matmul_id *o)
{
    if (!h->matmul_id || !h->matmul_id_scratch || !weight_ok(h, &o->w) || !is_i32(&o->ids) || !is_f32(&o->x) ||
        !is_f32(&o->out) || o->n_expert < 1 || o->n_expert > WEFT_GK_MOE_MAX_EXPERTS || o->w.ne1 % o->n_expert ||
        o->x.ne0 != o->w.ne0 || o->ids.ne1 > 65535 || o->ids.ne0 * o->ids.ne1 > INT32_MAX)
        return false;
    const int64_t N = o->w.ne1 / o->n_expert, rows = o->ids.ne1, slots = o->ids.ne0 * rows;
    if (o->out.ne0 != N || o->x.ne1 != (o->x_per_slot ? slots : rows)) return false;
    if (o->has_weights ? (!is_f32(&o->weights) || o->weights.ne0 < o->ids.ne0 || o->weights.ne1 != rows ||
                          o->out.ne1 != rows ||
                          (o->has_add && (!is_f32(&o->add) || o->add.ne0 != N || o->add.ne1 != rows)))
                       : (o->has_add || o->out.ne1 != slots))
        return false;
    return !o->has_bias || bias_ok(&o->bias, o->w.ne1);
}

/* n or more F32 (or I32) values laid end to end (read as one array) */
static bool vector_ok(const struct weft_view *v, enum weft_type t, int64_t n)
{
    return v->type == t && view_ok(v) && (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * sizeof(float)) &&
           v->ne0 * v->ne1 >= n;
}

/* whether two views' byte ranges meet */
static bool overlap(const struct weft_view *a, const struct weft_view *b)
{
    if (a->buf != b->buf) return false;
    const size_t ea = a->offset + (size_t)(a->ne1 - 1) * a->nb1 + weft_row_size(a->type, a->ne0);
    const size_t eb = b->offset + (size_t)(b->ne1 - 1) * b->nb1 + weft_row_size(b->type, b->ne0);
    return a->offset < eb && b->offset < ea;
}

/* SSM_CONV and DELTA_NET (api 9): the shapes backend.h gives them, as the CPU checks them; the
 * kernels' bounds (recurrent_geom.h); outputs apart from the inputs and the state (a row's
 * SSM_CONV reads the x rows before it while others are written) */
static bool ssm_conv_ok(const struct weft_gpu_hooks *h, const struct weft_op_ssm_conv *o)
{
    const int64_t rows = o->x.ne1, C = o->x.ne0, K = o->w.ne0;
    struct weft_gk_conv_geom geo;
    return h->ssm_conv && is_f32(&o->x) && is_f32(&o->w) && is_f32(&o->out) && is_f32(&o->state) &&
           K >= 2 && K <= WEFT_GK_CONV_MAX_K && o->w.ne1 == C && o->out.ne0 == C && o->out.ne1 == rows &&
           o->state.ne0 == (K - 1) * C && vector_ok(&o->slots, WEFT_TYPE_I32, rows) &&
           !weft_gk_conv_geom(rows, C, (int)K, &geo) && !overlap(&o->out, &o->x) && !overlap(&o->out, &o->state) &&
           !overlap(&o->x, &o->state);
}

static bool delta_net_ok(const struct weft_gpu *g, const struct weft_op_delta_net *o)
{
    const int64_t rows = o->in.ne1, S = o->head_dim, Hk = o->n_k_head, Hv = o->n_v_head;
    struct weft_gk_dn_geom geo;
    return g->hooks->delta_net && is_f32(&o->in) && is_f32(&o->beta) && is_f32(&o->alpha) && is_f32(&o->out) &&
           is_f32(&o->state) && Hk >= 1 && Hv >= Hk && Hv % Hk == 0 && o->eps > 0.0f &&
           !weft_gk_dn_geom(rows, o->state.ne1, (int)Hv, (int)S, g->n_mp, &geo) &&
           o->in.ne0 == (2 * Hk + Hv) * S && o->beta.ne0 >= Hv && o->alpha.ne0 >= Hv && o->beta.ne1 == rows &&
           o->alpha.ne1 == rows && vector_ok(&o->dt_bias, WEFT_TYPE_F32, Hv) && vector_ok(&o->a, WEFT_TYPE_F32, Hv) &&
           o->out.ne0 == Hv * S && o->out.ne1 == rows && o->state.ne0 == Hv * S * S &&
           vector_ok(&o->slots, WEFT_TYPE_I32, rows) && !overlap(&o->out, &o->in) && !overlap(&o->out, &o->state) &&
           !overlap(&o->in, &o->state);
}

static bool batch_ok(const struct weft_batch_view *bv)
{
    return bv->n_rows > 0 && is_i32(&bv->pos) && is_i32(&bv->seq) && is_i32(&bv->slot) && is_i32(&bv->bt_off) &&
           is_i32(&bv->bt);
}

bool weft_gpu_supports(struct weft_backend *b, const struct weft_op *op)
{
    const struct weft_gpu *g = (const struct weft_gpu *)b;
    const struct weft_gpu_hooks *h = g->hooks;
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return h->type_ok((int)o->table.type) && view_ok(&o->table) && is_i32(&o->ids) && o->ids.ne1 == 1 &&
               is_f32(&o->out) && o->out.ne0 == o->table.ne0 && o->out.ne1 >= o->ids.ne0 &&
               (o->scale == 0.0f || h->embed_scaled);
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return is_f32(&o->x) && is_f32(&o->w) && is_f32(&o->out) &&
               (!o->has_add || (is_f32(&o->add) && is_f32(&o->sum)));
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        return weight_ok(h, &o->w) && is_f32(&o->x) && is_f32(&o->out) && o->x.ne0 == o->w.ne0 &&
               o->out.ne0 == o->w.ne1 && o->out.ne1 >= o->x.ne1 && (!o->has_add || is_f32(&o->add)) &&
               (!o->has_bias || bias_ok(&o->bias, o->w.ne1));
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        /* a latent cache's ROPE_KV does not read v; api 10's q_only reads neither k nor v (the
         * kv view gives the head dim; the cache is not touched) and needs the rope_q hook */
        return kv_ok(&o->kv, o->n_head) && batch_ok(&o->batch) && is_f32(&o->q) &&
               (o->q_only ? h->rope_q != NULL : is_f32(&o->k) && (o->kv.v_in_k || is_f32(&o->v))) &&
               o->n_rot % 2 == 0 && o->n_rot <= o->kv.head_dim &&
               (!o->has_freq_factors || freq_factors_ok(&o->freq_factors, o->n_rot));
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        /* every window is honoured (the kernel's first attended position) */
        return kv_ok(&o->kv, o->n_head) && batch_ok(&o->batch) && is_f32(&o->q) && is_f32(&o->out) &&
               (!o->has_sinks || bias_ok(&o->sinks, o->n_head));   /* api 7: a sink per head */
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        return (o->act == WEFT_GLU_SILU || ((o->act == WEFT_GLU_GELU_TANH || o->act == WEFT_GLU_SIGMOID) && h->glu) ||
                (o->act == WEFT_GLU_SWIGLU_OAI && h->swiglu_oai)) &&
               is_f32(&o->gate) && is_f32(&o->up) && is_f32(&o->out);
    }
    case WEFT_OP_ADD:   /* api 10: a scale only with the add_scaled hook */
        return is_f32(&op->u.add.a) && is_f32(&op->u.add.b) && is_f32(&op->u.add.out) &&
               (op->u.add.scale == 0.0f || h->add_scaled);
    case WEFT_OP_COPY: {
        const struct weft_op_copy *o = &op->u.copy;
        return o->src && o->dst && weft_gpu_in_range(o->src, o->src_off, o->bytes) &&
               weft_gpu_in_range(o->dst, o->dst_off, o->bytes);
    }
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        return weight_ok(h, &o->w) && is_f32(&o->x) && is_f32(&o->norm_w) && is_i32(&o->rows) && is_f32(&o->out) &&
               o->x.ne0 == o->w.ne0 && o->out.ne0 == o->w.ne1 && o->out.ne1 >= o->rows.ne0;
    }
    case WEFT_OP_MOE_ROUTE: {
        const struct weft_op_moe_route *o = &op->u.moe_route;
        return h->moe_route && is_f32(&o->logits) && is_i32(&o->ids) && is_f32(&o->weights) && o->k >= 1 &&
               o->logits.ne0 >= o->k && o->logits.ne0 <= WEFT_GK_MOE_MAX_EXPERTS && o->ids.ne0 >= o->k &&
               o->weights.ne0 >= o->k && o->ids.ne1 == o->logits.ne1 && o->weights.ne1 == o->logits.ne1 &&
               (unsigned)o->gating <= WEFT_MOE_SOFTMAX_TOPK && weft_moe_groups_ok(o) &&
               (!o->has_bias || bias_ok(&o->bias, o->logits.ne0)) &&
               (!o->has_expert_scale || bias_ok(&o->expert_scale, o->logits.ne0));   /* api 10 */
    }
    case WEFT_OP_MATMUL_ID:
        return matmul_id_ok(h, &op->u.matmul_id);
    case WEFT_OP_SSM_CONV:
        return ssm_conv_ok(h, &op->u.ssm_conv);
    case WEFT_OP_DELTA_NET:
        return delta_net_ok(g, &op->u.delta_net);
    default:
        return false;
    }
}

/* ---- scratch ---- */

int weft_gpu_attn_splits(const struct weft_gpu *g, const struct weft_op_attention *o)
{
    return g->hooks->attn_splits(o->batch.n_rows, (int)o->n_head, g->n_mp);
}

size_t weft_gpu_logits_norm_bytes(const struct weft_op_logits *o)
{
    return weft_gpu_align256((size_t)o->rows.ne0 * o->x.ne0 * sizeof(float));
}

/* scratch bytes an op needs while it runs */
static size_t op_scratch(const struct weft_gpu *g, const struct weft_op *op)
{
    const struct weft_gpu_hooks *h = g->hooks;
    switch (op->kind) {
    case WEFT_OP_MATMUL:
        return h->matmul_scratch((int)op->u.matmul.w.type, op->u.matmul.w.ne0, op->u.matmul.x.ne1);
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        return weft_gpu_logits_norm_bytes(o) + h->matmul_scratch((int)o->w.type, o->w.ne0, o->rows.ne0);
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        /* the split partials hold V's head dim (the output's) */
        return h->attention_scratch(o->batch.n_rows, (int)o->n_head, (int)weft_kv_head_dim_v(&o->kv),
                                    weft_gpu_attn_splits(g, o));
    }
    case WEFT_OP_MATMUL_ID: {
        const struct weft_op_matmul_id *o = &op->u.matmul_id;
        if (!h->matmul_id_scratch || o->n_expert < 1) return 0;
        return h->matmul_id_scratch((int)o->w.type, o->w.ne0, o->w.ne1 / o->n_expert, (int)o->n_expert, o->ids.ne1,
                                    (int)o->ids.ne0, o->x_per_slot, o->has_weights);
    }
    default:
        return 0;
    }
}

static weft_status ensure_scratch(struct weft_gpu *g, size_t need)
{
    const struct weft_gpu_hooks *h = g->hooks;
    if (need <= g->scratch_size) return WEFT_OK;
    size_t cap = weft_gpu_align256(need + need / 2);
    int e = h->stream_sync(g);
    if (e) return h->error(e, "waiting before growing scratch");
    weft_gpu_graphs_clear(g);
    if (g->scratch) h->dev_free(g, g->scratch);
    g->scratch = NULL;
    g->scratch_size = 0;
    void *p = NULL;
    if ((e = h->dev_alloc(g, cap, &p))) return h->error(e, "allocating scratch");
    g->scratch = p;
    g->scratch_size = cap;
    return WEFT_OK;
}

/* ---- running ops ---- */


static weft_status encode_all(struct weft_gpu *g, const struct weft_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int e = g->hooks->encode(g, &ops[i]);
        if (e) {
            char what[64];
            snprintf(what, sizeof what, "op %zu (%s)", i,
                     weft_op_name(ops[i].kind));
            return g->hooks->error(e, what);
        }
    }
    return WEFT_OK;
}

/* ---- graph keys ---- */

struct keyb {
    uint64_t *p;
    size_t n, cap;
    bool oom;
};

static void put(struct keyb *k, uint64_t v)
{
    if (k->oom) return;
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        uint64_t *p = realloc(k->p, cap * sizeof *p);
        if (!p) { k->oom = true; return; }
        k->p = p;
        k->cap = cap;
    }
    k->p[k->n++] = v;
}

static void put_f(struct keyb *k, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put(k, u);
}

static void put_view(struct keyb *k, const struct weft_view *v)
{
    put(k, v->buf ? v->buf->id : 0);
    put(k, v->offset);
    put(k, (uint64_t)v->type);
    put(k, (uint64_t)v->ne0);
    put(k, (uint64_t)v->ne1);
    put(k, v->nb1);
}

static void put_kv(struct keyb *k, const struct weft_kv_view *kv)
{
    put(k, kv->buf ? kv->buf->id : 0);
    put(k, (uint64_t)kv->type);
    put(k, kv->n_layer);
    put(k, kv->layer);
    put(k, kv->n_kv_head);
    put(k, kv->head_dim);
    put(k, weft_kv_head_dim_v(kv));
    put(k, kv->v_in_k);
}

static void put_batch(struct keyb *k, const struct weft_batch_view *b)
{
    put(k, b->n_rows);
    put(k, b->n_seq);
    put_view(k, &b->pos);
    put_view(k, &b->seq);
    put_view(k, &b->slot);
    put_view(k, &b->bt_off);
    /* the block table's length is not a launch parameter: only where it is */
    put(k, b->bt.buf ? b->bt.buf->id : 0);
    put(k, b->bt.offset);
}

static void put_op(struct keyb *k, const struct weft_op *op)
{
    put(k, (uint64_t)op->kind);
    switch (op->kind) {
    case WEFT_OP_EMBED:
        put_view(k, &op->u.embed.table); put_view(k, &op->u.embed.ids); put_view(k, &op->u.embed.out);
        put_f(k, op->u.embed.scale);
        break;
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        put_view(k, &o->x); put_view(k, &o->w); put_view(k, &o->out); put_f(k, o->eps); put(k, o->has_add);
        if (o->has_add) { put_view(k, &o->add); put_view(k, &o->sum); }
        break;
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        put_view(k, &o->x); put_view(k, &o->w); put_view(k, &o->out); put(k, o->has_add);
        if (o->has_add) put_view(k, &o->add);
        put(k, o->has_bias);
        if (o->has_bias) put_view(k, &o->bias);
        break;
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        put_view(k, &o->q); put_view(k, &o->k); put_view(k, &o->v); put_kv(k, &o->kv); put_batch(k, &o->batch);
        put(k, o->n_head); put(k, o->n_rot); put_f(k, o->freq_base); put_f(k, o->freq_scale); put(k, (uint64_t)o->mode);
        put(k, o->has_freq_factors);
        if (o->has_freq_factors) put_view(k, &o->freq_factors);
        put_f(k, o->ext_factor); put_f(k, o->attn_factor); put_f(k, o->corr_dims[0]); put_f(k, o->corr_dims[1]);
        put(k, o->q_only);
        break;
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        put_view(k, &o->q); put_view(k, &o->out); put_kv(k, &o->kv); put_batch(k, &o->batch);
        put(k, o->n_head); put_f(k, o->scale); put(k, o->window); put_f(k, o->softcap);
        put(k, o->has_sinks);
        if (o->has_sinks) put_view(k, &o->sinks);
        break;
    }
    case WEFT_OP_SILU_MUL:
        put_view(k, &op->u.silu_mul.gate); put_view(k, &op->u.silu_mul.up); put_view(k, &op->u.silu_mul.out);
        put(k, (uint64_t)op->u.silu_mul.act);
        put_f(k, op->u.silu_mul.alpha); put_f(k, op->u.silu_mul.limit);
        break;
    case WEFT_OP_ADD:
        put_view(k, &op->u.add.a); put_view(k, &op->u.add.b); put_view(k, &op->u.add.out);
        put_f(k, op->u.add.scale);
        break;
    case WEFT_OP_COPY:
        put(k, op->u.copy.src->id); put(k, op->u.copy.dst->id);
        put(k, op->u.copy.src_off); put(k, op->u.copy.dst_off); put(k, op->u.copy.bytes);
        break;
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        put_view(k, &o->x); put_view(k, &o->rows); put_view(k, &o->norm_w); put_view(k, &o->w); put_view(k, &o->out);
        put_f(k, o->eps); put_f(k, o->softcap);
        break;
    }
    case WEFT_OP_MOE_ROUTE: {
        const struct weft_op_moe_route *o = &op->u.moe_route;
        put_view(k, &o->logits); put_view(k, &o->ids); put_view(k, &o->weights);
        put(k, o->k); put(k, (uint64_t)o->gating); put(k, o->norm); put_f(k, o->scale); put(k, o->has_bias);
        if (o->has_bias) put_view(k, &o->bias);
        put(k, o->n_group > 1 ? o->n_group : 0); put(k, o->group_used);
        put(k, o->has_expert_scale);
        if (o->has_expert_scale) put_view(k, &o->expert_scale);
        break;
    }
    case WEFT_OP_MATMUL_ID: {
        const struct weft_op_matmul_id *o = &op->u.matmul_id;
        put_view(k, &o->x); put_view(k, &o->w); put_view(k, &o->ids); put_view(k, &o->out);
        put(k, o->n_expert); put(k, o->x_per_slot); put(k, o->has_weights); put(k, o->has_add); put(k, o->has_bias);
        if (o->has_weights) put_view(k, &o->weights);
        if (o->has_add) put_view(k, &o->add);
        if (o->has_bias) put_view(k, &o->bias);
        break;
    }
    case WEFT_OP_SSM_CONV: {
        const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
        put_view(k, &o->x); put_view(k, &o->w); put_view(k, &o->out); put_view(k, &o->state);
        put_view(k, &o->slots); put(k, o->silu);
        break;
    }
    case WEFT_OP_DELTA_NET: {
        const struct weft_op_delta_net *o = &op->u.delta_net;
        put_view(k, &o->in); put_view(k, &o->beta); put_view(k, &o->alpha); put_view(k, &o->dt_bias);
        put_view(k, &o->a); put_view(k, &o->out); put_view(k, &o->state); put_view(k, &o->slots);
        put(k, o->n_k_head); put(k, o->n_v_head); put(k, o->head_dim); put_f(k, o->eps); put(k, o->k_grouped);
        break;
    }
    default:
        break;
    }
}

/* ---- the graph table ---- */

static void graph_drop(const struct weft_gpu_hooks *h, struct weft_gpu_graph *gr)
{
    if (gr->exec) h->graph_destroy(gr->exec);
    free(gr->key);
    memset(gr, 0, sizeof *gr);
}

void weft_gpu_graphs_clear(struct weft_gpu *g)
{
    for (int i = 0; i < WEFT_GPU_GRAPHS; i++) graph_drop(g->hooks, &g->graph[i]);
}

void weft_gpu_release(struct weft_gpu *g)
{
    weft_gpu_graphs_clear(g);
    if (g->scratch) g->hooks->dev_free(g, g->scratch);
    g->scratch = NULL;
    g->scratch_size = 0;
    free(g->key_tmp);
    g->key_tmp = NULL;
    g->key_cap = 0;
}

/* Capture ops into a graph for gr and launch it. On a capture failure
 * graphs are turned off for this backend and the ops run eagerly. */
static weft_status capture_and_launch(struct weft_gpu *g, struct weft_gpu_graph *gr, const struct weft_op *ops,
                                      size_t n)
{
    const struct weft_gpu_hooks *h = g->hooks;
    int e = h->capture_begin(g);
    if (!e) {
        bool launched_ok = true;
        for (size_t i = 0; i < n && launched_ok; i++) launched_ok = h->encode(g, &ops[i]) == 0;
        void *exec = NULL;
        e = h->capture_end(g, launched_ok, &exec);
        if (!e) {
            gr->exec = exec;
            g->n_captures++;
            g->n_graph_launches++;
            e = h->graph_launch(g, exec);
            return !e ? WEFT_OK : h->error(e, "launching a step graph");
        }
    }
    if (e == h->err_oom) return h->error(e, "capturing a step graph");
    h->clear_error();
    if (g->debug)
        fprintf(stderr, "weft %s: graph capture failed (%s); running without graphs\n", h->name, h->error_str(e));
    g->graphs = false;
    weft_gpu_graphs_clear(g);
    return encode_all(g, ops, n);
}

weft_status weft_gpu_run(struct weft_gpu *g, const struct weft_op *ops, size_t n)
{
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = op_scratch(g, &ops[i]);
        if (s > need) need = s;
    }
    weft_status st = ensure_scratch(g, need);
    if (st != WEFT_OK) return st;
    if (!g->graphs || n < 2) return encode_all(g, ops, n);

    struct keyb k = {g->key_tmp, 0, g->key_cap, false};
    for (size_t i = 0; i < n; i++) put_op(&k, &ops[i]);
    g->key_tmp = k.p;
    g->key_cap = k.cap;
    if (k.oom) return encode_all(g, ops, n);

    g->use_clock++;
    struct weft_gpu_graph *hit = NULL, *lru = &g->graph[0];
    for (int i = 0; i < WEFT_GPU_GRAPHS; i++) {
        struct weft_gpu_graph *gr = &g->graph[i];
        if (gr->key && gr->key_len == k.n && !memcmp(gr->key, k.p, k.n * sizeof *k.p)) { hit = gr; break; }
        if (gr->last_use < lru->last_use) lru = gr;
    }
    if (hit) {
        hit->last_use = g->use_clock;
        hit->seen++;
        if (hit->exec) {
            g->n_graph_launches++;
            int e = g->hooks->graph_launch(g, hit->exec);
            return !e ? WEFT_OK : g->hooks->error(e, "launching a step graph");
        }
        return capture_and_launch(g, hit, ops, n);
    }
    /* first sighting: run eagerly, remember the key */
    st = encode_all(g, ops, n);
    if (st != WEFT_OK) return st;
    uint64_t *key = malloc(k.n * sizeof *key);
    if (!key) return WEFT_OK;   /* just no graph for it */
    memcpy(key, k.p, k.n * sizeof *key);
    graph_drop(g->hooks, lru);
    lru->key = key;
    lru->key_len = k.n;
    lru->seen = 1;
    lru->last_use = g->use_clock;
    return WEFT_OK;
}
