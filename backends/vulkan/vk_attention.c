/* Vulkan ROPE_KV and ATTENTION over the paged KV cache, F16 or Q8_0
 * (shaders/rope_kv.comp, shaders/attention.comp; backend.h gives the
 * layout). The shaders address the cache in 32-bit words (F16) or bytes
 * (Q8_0), so supports() wants it within 2^32 of those.
 * api 5: ROPE_KV's scaling (freq_factors, ext_factor, attn_factor,
 * corr_dims) goes into the exact table (weft_rope_cos_sin_ext) or the
 * shader's own angles; ATTENTION's sliding window starts each row's pass at
 * its window's first position, in every variant.
 * api 6: V heads of head_dim_v (push constant hdv), K's staying head_dim.
 * api 7: attention sinks (binding 7, a logit per head) after the last
 * position, in every variant (the exact one too: the CPU's bits); the
 * latent cache (v_in_k: K rows only, V the tail of each, n_kv_head 1).
 * api 10: ROPE_KV's q_only rotates q alone (push constant q_only): k, v,
 * the slots and the cache are not touched, their bindings stand-ins (q,
 * pos; the cache bound as read, so no write hazard is recorded). */
#include "backends/vulkan/vk_priv.h"  /* the rope tables live in the backend */
#include "base/rope.h"

#include <math.h>
#include <string.h>

#define MAX_HEAD_DIM 512 /* attention.comp: 2 * 64 invocations * 4 pairs */
#define MAX_GROUPS 65535u

static size_t view_bytes(const struct weft_view *v)
{
    return (size_t)(v->ne1 - 1) * v->nb1 + weft_row_size(v->type, v->ne0);
}

static bool fits(const struct vk_backend *vb, const struct weft_view *v)
{
    return (v->offset + view_bytes(v)) / 4 <= UINT32_MAX && vk_buffer_size(v->buf) <= vk_get_caps(vb)->max_storage_range;
}

/* F32 activations [rows, heads*hd], 4-byte aligned */
static bool act_ok(const struct vk_backend *vb, const struct weft_view *v, uint32_t n_rows, uint64_t width)
{
    return v->type == WEFT_TYPE_F32 && vk_view_ok(v) && v->offset % 4 == 0 && v->nb1 % 4 == 0 &&
           (uint64_t)v->ne0 >= width && v->ne1 >= (int64_t)n_rows && fits(vb, v);
}

static bool ids_ok(const struct vk_backend *vb, const struct weft_view *v, int64_t n)
{
    return v->type == WEFT_TYPE_I32 && vk_view_ok(v) && v->offset % 4 == 0 && v->ne0 * v->ne1 >= n &&
           (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4) && fits(vb, v);
}

/* K heads of head_dim and V heads of head_dim_v (api 6), each even (the
 * shaders work in pairs: an F16 word) and at most MAX_HEAD_DIM; Q8_0 both
 * whole blocks of 32 */
static bool kv_ok(const struct vk_backend *vb, const struct weft_kv_view *kv)
{
    const uint32_t hdv = weft_kv_head_dim_v(kv);
    if (!kv->buf || kv->layer >= kv->n_layer || kv->n_kv_head == 0 || kv->head_dim == 0 || kv->head_dim % 2 ||
        kv->head_dim > MAX_HEAD_DIM || hdv % 2 || hdv > MAX_HEAD_DIM)
        return false;
    /* api 7's latent cache: one K head whose tail (whole Q8_0 blocks) is the V */
    if (kv->v_in_k && (kv->n_kv_head != 1 || hdv >= kv->head_dim ||
                       (kv->type == WEFT_TYPE_Q8_0 && (kv->head_dim - hdv) % 32)))
        return false;
    size_t sz = vk_buffer_size(kv->buf);
    if (sz > vk_get_caps(vb)->max_storage_range) return false;
    if (kv->type == WEFT_TYPE_F16) return sz / 4 <= UINT32_MAX;
    return kv->type == WEFT_TYPE_Q8_0 && kv->head_dim % 32 == 0 && hdv % 32 == 0 && sz <= UINT32_MAX;
}

/* freq_factors as n_rot/2 contiguous floats (a vector view, or rows back
 * to back), the view trimmed to them; false if the view is not that */
static bool ff_view(const struct weft_op_rope_kv *o, struct weft_view *out)
{
    const struct weft_view *f = &o->freq_factors;
    if (f->type != WEFT_TYPE_F32 || f->ne0 * f->ne1 != (int64_t)(o->n_rot / 2) || (f->ne1 != 1 && f->nb1 != (size_t)f->ne0 * 4))
        return false;
    *out = *f;
    out->ne0 = o->n_rot / 2;
    out->ne1 = 1;
    out->nb1 = (size_t)out->ne0 * 4;
    return true;
}

bool vk_attention_supports(struct vk_backend *vb, const struct weft_op *op)
{
    if (op->kind == WEFT_OP_ROPE_KV) {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        const struct weft_kv_view *kv = &o->kv;
        const uint32_t R = o->batch.n_rows;
        struct weft_view ffv;
        if (o->has_freq_factors && (!ff_view(o, &ffv) || !act_ok(vb, &ffv, 1, o->n_rot / 2))) return false;
        if (!kv_ok(vb, kv) || o->n_head == 0 || o->n_rot % 2 || o->n_rot > kv->head_dim || R == 0 ||
            !act_ok(vb, &o->q, R, (uint64_t)o->n_head * kv->head_dim) || !ids_ok(vb, &o->batch.pos, R))
            return false;
        /* api 10's q_only: k, v and the slots are not read */
        return o->q_only || (act_ok(vb, &o->k, R, (uint64_t)kv->n_kv_head * kv->head_dim) &&
                             (kv->v_in_k || act_ok(vb, &o->v, R, (uint64_t)kv->n_kv_head * weft_kv_head_dim_v(kv))) &&
                             ids_ok(vb, &o->batch.slot, R));
    }
    if (op->kind == WEFT_OP_ATTENTION) {
        const struct weft_op_attention *o = &op->u.attention;
        const struct weft_kv_view *kv = &o->kv;
        const uint32_t R = o->batch.n_rows;
        /* api 7: the sinks, n_head contiguous floats (a vector view, or rows back to back) */
        const struct weft_view *sk = &o->sinks;
        if (o->has_sinks && (sk->ne0 * sk->ne1 != (int64_t)o->n_head || (sk->ne1 != 1 && sk->nb1 != (size_t)sk->ne0 * 4) ||
                             !act_ok(vb, sk, (uint32_t)sk->ne1, (uint64_t)sk->ne0)))
            return false;
        return kv_ok(vb, kv) && o->n_head > 0 && o->n_head % kv->n_kv_head == 0 && o->n_head <= MAX_GROUPS &&
               R > 0 && act_ok(vb, &o->q, R, (uint64_t)o->n_head * kv->head_dim) &&
               act_ok(vb, &o->out, R, (uint64_t)o->n_head * weft_kv_head_dim_v(kv)) && ids_ok(vb, &o->batch.pos, R) &&
               ids_ok(vb, &o->batch.seq, R) && ids_ok(vb, &o->batch.bt_off, o->batch.n_seq ? o->batch.n_seq : 1) &&
               ids_ok(vb, &o->batch.bt, 1);
    }
    return false;
}

static struct vk_bind bind_view(const struct weft_view *v, bool write)
{
    return (struct vk_bind){v->buf, v->offset, view_bytes(v), write};
}

static uint32_t elems(const struct weft_view *v) { return (uint32_t)(v->offset / 4); }
static uint32_t stride(const struct weft_view *v) { return (uint32_t)(v->nb1 / 4); }

/* host pointer of a buffer in mapped memory, or NULL */
static const uint8_t *host_ptr(const struct weft_buffer *b)
{
    return b->chunk && b->chunk->mapped ? b->chunk->mapped + b->mem_off : NULL;
}

/* The exact ROPE_KV's table, covering every position of the batch: its cos
 * and sin come from weft_rope_cos_sin_ext, the CPU backend's own code (with
 * the op's scaling fields and freq_factors), so the shader rotates by the
 * CPU's bits (GPU sin/cos are not libm's). Needs the positions (and the
 * freq_factors) in mapped memory (they are read while the step is recorded;
 * the core writes them before run). NULL (no error) where that is not so:
 * the shader then computes its own angles. Tables are kept per rotation (a
 * model may use several, e.g. gemma3's local and global bases); the least
 * recently used one makes room, retired until the step completes, as
 * dispatches recorded before may bind it. */
static struct weft_buffer *rope_table(struct vk_backend *vb, const struct weft_op_rope_kv *o)
{
    const uint8_t *pp = host_ptr(o->batch.pos.buf);
    if (!vk_exact_ops(vb) || !pp || o->n_rot / 2 > VK_ROPE_MAX_FF) return NULL;
    const float *ff = NULL;
    struct weft_view fv;
    if (o->has_freq_factors) {
        const uint8_t *fp = ff_view(o, &fv) ? host_ptr(fv.buf) : NULL;
        if (!fp) return NULL;
        ff = (const float *)(fp + fv.offset);
    }
    const int32_t *pos = (const int32_t *)(pp + o->batch.pos.offset);
    int32_t max = 0;
    for (uint32_t r = 0; r < o->batch.n_rows; r++) {
        if (pos[r] < 0) return NULL;
        if (pos[r] > max) max = pos[r];
    }
    struct vk_rope_tab *e = NULL, *victim = &vb->rope_tabs[0];
    for (int i = 0; i < VK_ROPE_TABS && !e; i++) {
        struct vk_rope_tab *t = &vb->rope_tabs[i];
        if (t->buf && t->n_rot == o->n_rot && t->base == o->freq_base && t->scale == o->freq_scale &&
            t->ext_factor == o->ext_factor && t->attn_factor == o->attn_factor && t->corr_dims[0] == o->corr_dims[0] &&
            t->corr_dims[1] == o->corr_dims[1] && t->has_ff == (ff != NULL) &&
            (!ff || memcmp(t->ff, ff, (o->n_rot / 2) * sizeof *ff) == 0))
            e = t;
        if (!t->buf ? victim->buf != NULL : (victim->buf && t->used < victim->used)) victim = t;
    }
    if (e && (uint32_t)max < e->cap) {
        e->used = ++vb->rope_clock;
        return e->buf;
    }
    if (!e) e = victim;
    uint32_t cap = 256;
    while (cap <= (uint32_t)max && cap < (1u << 30)) cap *= 2;
    if ((uint32_t)max >= cap) return NULL;
    struct weft_buffer *t = NULL;
    if (vk_buffer_new(vb, (size_t)cap * o->n_rot * sizeof(float), false, false, &t) != WEFT_OK) return NULL;
    float *dst = (float *)host_ptr(t);
    if (!dst) {
        vk_buffer_destroy_now(t);  /* never bound */
        return NULL;
    }
    if (e->buf && vk_retire(vb, e->buf) != WEFT_OK) {
        vk_buffer_destroy_now(t);
        return NULL;
    }
    const struct weft_rope_ext ext = {.freq_factors = ff, .ext_factor = o->ext_factor, .attn_factor = o->attn_factor,
                                      .corr_dims = {o->corr_dims[0], o->corr_dims[1]}};
    for (uint32_t p = 0; p < cap; p++)
        weft_rope_cos_sin_ext((int32_t)p, o->n_rot, o->freq_base, o->freq_scale, &ext, dst + (size_t)p * o->n_rot);
    *e = (struct vk_rope_tab){.buf = t, .cap = cap, .n_rot = o->n_rot, .base = o->freq_base, .scale = o->freq_scale,
                              .ext_factor = o->ext_factor, .attn_factor = o->attn_factor,
                              .corr_dims = {o->corr_dims[0], o->corr_dims[1]}, .has_ff = ff != NULL,
                              .used = ++vb->rope_clock};
    if (ff) memcpy(e->ff, ff, (o->n_rot / 2) * sizeof *ff);
    return t;
}

weft_status vk_op_rope_kv(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_rope_kv *o = &op->u.rope_kv;
    const struct weft_kv_view *kv = &o->kv;
    /* the shader's own angles (no table): base/rope.h's steps, the magnitude
     * as the CPU forms it */
    float mscale = o->attn_factor != 0.0f ? o->attn_factor : 1.0f;
    if (o->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / o->freq_scale);
    struct weft_view ffv = {0};
    const bool has_ff = o->has_freq_factors && ff_view(o, &ffv);
    struct {
        uint32_t q_off, q_rs, k_off, k_rs, v_off, v_rs, pos_off, slot_off, n_rows;
        uint32_t n_head, n_kv, hd, n_rot, neox, n_layer, layer;
        float freq_scale, theta_scale;
        float ext_factor, corr0, corr1, mscale;   /* api 5 scaling */
        uint32_t ff_off, has_ff;                   /* freq_factors (binding 6 without a table) */
        uint32_t hdv;                              /* api 6: V's head dim */
        uint32_t v_in_k;                           /* api 7: a latent cache (v not read) */
        uint32_t q_only;                           /* api 10: q rotated, nothing else touched */
    } pc = {elems(&o->q), stride(&o->q), elems(&o->k), stride(&o->k), elems(&o->v), stride(&o->v),
            elems(&o->batch.pos), elems(&o->batch.slot), o->batch.n_rows, o->n_head, kv->n_kv_head, kv->head_dim,
            o->n_rot, o->mode == WEFT_ROPE_NEOX, kv->n_layer, kv->layer, o->freq_scale,
            powf(o->freq_base, -2.0f / (float)o->n_rot), o->ext_factor, o->corr_dims[0], o->corr_dims[1], mscale,
            has_ff ? elems(&ffv) : 0, has_ff, weft_kv_head_dim_v(kv), kv->v_in_k, o->q_only};
    struct weft_buffer *tab = rope_table(vb, o);
    const bool q8 = kv->type == WEFT_TYPE_Q8_0;
    const char *name = tab ? (q8 ? "rope_kv_q8_0x" : "rope_kv_f16x") : (q8 ? "rope_kv_q8_0" : "rope_kv_f16");
    struct vk_pipeline *p = vk_pipeline_get(vb, name, 7, sizeof pc, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    /* a latent cache reads no v; q_only reads neither (nor the slots: pos stands in) */
    struct weft_view q = o->q, k = o->q_only ? o->q : o->k, v = o->q_only || kv->v_in_k ? k : o->v;
    q.ne1 = k.ne1 = v.ne1 = o->batch.n_rows;
    if (o->q_only) pc.k_off = pc.k_rs = pc.v_off = pc.v_rs = pc.slot_off = 0;
    /* binding 6: the table, else the freq_factors (else a stand-in, unread) */
    const struct vk_bind b6 = tab ? (struct vk_bind){tab, 0, vk_buffer_size(tab), false}
                                  : has_ff ? bind_view(&ffv, false) : bind_view(&o->batch.pos, false);
    /* the slots written are only known on the device: the whole cache is declared written */
    const struct vk_bind b[7] = {bind_view(&q, true),
                                 bind_view(&k, !o->q_only),
                                 bind_view(&v, false),
                                 {kv->buf, 0, vk_buffer_size(kv->buf), !o->q_only},
                                 bind_view(&o->batch.pos, false),
                                 bind_view(o->q_only ? &o->batch.pos : &o->batch.slot, false),
                                 b6};
    uint32_t g = o->batch.n_rows < MAX_GROUPS ? o->batch.n_rows : MAX_GROUPS;
    return vk_dispatch(vb, p, b, 7, &pc, sizeof pc, g, 1, 1);
}

weft_status vk_op_attention(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_attention *o = &op->u.attention;
    const struct weft_kv_view *kv = &o->kv;
    struct {
        uint32_t q_off, q_rs, o_off, o_rs, pos_off, seq_off, bto_off, bt_off0, n_rows;
        uint32_t n_head, n_kv, hd, n_layer, layer;
        float scale;
        uint32_t window;   /* api 5: positions pos - window + 1 .. pos; 0: all */
        float softcap;     /* api 6: s = softcap · tanh(q·k · scale / softcap); 0: none */
        uint32_t hdv;      /* api 6: V's head dim (out is [rows, n_head*hdv]) */
        uint32_t sinks_off, has_sinks; /* api 7: a sink logit per head (binding 7) */
        uint32_t v_in_k;   /* api 7: a latent cache, V the tail of the K row */
    } pc = {elems(&o->q), stride(&o->q), elems(&o->out), stride(&o->out), elems(&o->batch.pos),
            elems(&o->batch.seq), elems(&o->batch.bt_off), elems(&o->batch.bt), o->batch.n_rows, o->n_head,
            kv->n_kv_head, kv->head_dim, kv->n_layer, kv->layer, o->softcap != 0.0f ? o->scale / o->softcap : o->scale,
            o->window, o->softcap, weft_kv_head_dim_v(kv), o->has_sinks ? elems(&o->sinks) : 0, o->has_sinks,
            kv->v_in_k};
    const struct vk_caps *c = vk_get_caps(vb);
    const bool sg = c->subgroup_arith && c->subgroup_size >= 4;
    const bool q8 = kv->type == WEFT_TYPE_Q8_0;
    const char *name = q8 ? (sg ? "attention_q8_0_sg" : "attention_q8_0")
                          : vk_exact_ops(vb) ? "attention_f16x" : (sg ? "attention_f16_sg" : "attention_f16");
    struct vk_pipeline *p = vk_pipeline_get(vb, name, 8, sizeof pc, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    struct weft_view q = o->q, out = o->out;
    q.ne1 = out.ne1 = o->batch.n_rows;
    const struct vk_bind b[8] = {bind_view(&q, false),
                                 bind_view(&out, true),
                                 {kv->buf, 0, vk_buffer_size(kv->buf), false},
                                 bind_view(&o->batch.pos, false),
                                 bind_view(&o->batch.seq, false),
                                 bind_view(&o->batch.bt_off, false),
                                 bind_view(&o->batch.bt, false),
                                 o->has_sinks ? bind_view(&o->sinks, false) : bind_view(&q, false)};
    uint32_t gy = o->batch.n_rows < MAX_GROUPS ? o->batch.n_rows : MAX_GROUPS;
    return vk_dispatch(vb, p, b, 8, &pc, sizeof pc, o->n_head, gy, 1);
}
