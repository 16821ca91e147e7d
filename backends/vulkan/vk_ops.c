/* Vulkan element-wise ops: EMBED (with its api-5 scale), RMSNORM, SILU_MUL
 * (SwiGLU, GeGLU, api 7's SwiGLU-OAI of gpt-oss or api 9's sigmoid gate by act), ADD
 * (api 10: times its scale when not 0, after the sum) (shaders/embed.comp, rmsnorm.comp,
 * silu_mul.comp, add.comp).
 * F32 views travel as float offsets and row strides in push constants, so
 * supports() wants them 4-byte aligned and within 2^32 floats. */
#include "backends/vulkan/vk_priv.h"  /* the GeLU table lives in the backend */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_DISPATCH 65535u /* y groups; shaders walk further rows */

/* Bytes a view spans in its buffer. */
static size_t view_bytes(const struct weft_view *v)
{
    return (size_t)(v->ne1 - 1) * v->nb1 + weft_row_size(v->type, v->ne0);
}

static bool fits_u32(const struct vk_backend *vb, const struct weft_view *v, size_t unit)
{
    size_t end = v->offset + view_bytes(v);
    return end / unit <= UINT32_MAX && v->nb1 / unit <= UINT32_MAX &&
           vk_buffer_size(v->buf) <= vk_get_caps(vb)->max_storage_range;
}

static bool f32_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return v->type == WEFT_TYPE_F32 && vk_view_ok(v) && v->offset % 4 == 0 && v->nb1 % 4 == 0 && fits_u32(vb, v, 4);
}

static bool i32_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return v->type == WEFT_TYPE_I32 && vk_view_ok(v) && v->offset % 4 == 0 && fits_u32(vb, v, 4) &&
           (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4);  /* read as ne0*ne1 contiguous ids */
}

static bool same_rows(const struct weft_view *a, const struct weft_view *b)
{
    return a->ne0 == b->ne0 && a->ne1 == b->ne1;
}

static const char *embed_variant(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_F32: return "embed_f32";
    case WEFT_TYPE_F16: return "embed_f16";
    case WEFT_TYPE_BF16: return "embed_bf16";
    case WEFT_TYPE_Q8_0: return "embed_q8_0";
    case WEFT_TYPE_Q4_0: return "embed_q4_0";
    case WEFT_TYPE_Q4_1: return "embed_q4_1";
    case WEFT_TYPE_Q5_0: return "embed_q5_0";
    case WEFT_TYPE_Q5_1: return "embed_q5_1";
    case WEFT_TYPE_Q4_K: return "embed_q4_k";
    case WEFT_TYPE_Q5_K: return "embed_q5_k";
    case WEFT_TYPE_Q6_K: return "embed_q6_k";
    case WEFT_TYPE_Q2_K: return "embed_q2_k";
    case WEFT_TYPE_Q3_K: return "embed_q3_k";
    case WEFT_TYPE_IQ4_NL: return "embed_iq4_nl";
    case WEFT_TYPE_IQ4_XS: return "embed_iq4_xs";
    case WEFT_TYPE_MXFP4: return "embed_mxfp4";
    default: return NULL;
    }
}

bool vk_ops_supports(struct vk_backend *vb, const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        const struct weft_view *t = &o->table;
        const size_t al = vk_weight_align(t->type);  /* 2, or 1 for MXFP4's 17-byte blocks */
        return embed_variant(t->type) && vk_view_ok(t) && t->offset % al == 0 && t->nb1 % al == 0 &&
               fits_u32(vb, t, 1) && i32_ok(vb, &o->ids) && f32_ok(vb, &o->out) && o->out.ne0 == t->ne0 &&
               o->out.ne1 >= o->ids.ne0 * o->ids.ne1;
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return f32_ok(vb, &o->x) && f32_ok(vb, &o->w) && f32_ok(vb, &o->out) && same_rows(&o->x, &o->out) &&
               o->w.ne0 >= o->x.ne0 &&
               (!o->has_add || (f32_ok(vb, &o->add) && f32_ok(vb, &o->sum) && same_rows(&o->x, &o->add) &&
                                same_rows(&o->x, &o->sum)));
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        return (o->act == WEFT_GLU_SILU || o->act == WEFT_GLU_GELU_TANH || o->act == WEFT_GLU_SWIGLU_OAI ||
                o->act == WEFT_GLU_SIGMOID) &&
               f32_ok(vb, &o->gate) && f32_ok(vb, &o->up) && f32_ok(vb, &o->out) && same_rows(&o->gate, &o->out) &&
               same_rows(&o->up, &o->out);
    }
    case WEFT_OP_ADD: {
        const struct weft_op_add *o = &op->u.add;
        return f32_ok(vb, &o->a) && f32_ok(vb, &o->b) && f32_ok(vb, &o->out) && same_rows(&o->a, &o->out) &&
               same_rows(&o->b, &o->out);
    }
    default: return false;
    }
}

static struct vk_bind bind_view(const struct weft_view *v, bool write)
{
    return (struct vk_bind){v->buf, v->offset, view_bytes(v), write};
}

static uint32_t groups(int64_t n, uint32_t per) { return (uint32_t)((n + per - 1) / per); }
static uint32_t row_groups(int64_t rows) { return rows < ROWS_PER_DISPATCH ? (uint32_t)rows : ROWS_PER_DISPATCH; }

weft_status vk_op_embed(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_embed *o = &op->u.embed;
    const int64_t n = o->ids.ne0 * o->ids.ne1;
    struct { uint32_t t_off, t_rs, t_rows, id_off, o_off, o_rs, ne0, n; float scale; } pc = {
        (uint32_t)o->table.offset, (uint32_t)o->table.nb1, (uint32_t)o->table.ne1, (uint32_t)(o->ids.offset / 4),
        (uint32_t)(o->out.offset / 4), (uint32_t)(o->out.nb1 / 4), (uint32_t)o->out.ne0, (uint32_t)n, o->scale};
    struct vk_pipeline *p = vk_pipeline_get(vb, embed_variant(o->table.type), 3, sizeof pc, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    struct weft_view out = o->out;
    out.ne1 = n;
    const struct vk_bind b[3] = {bind_view(&o->table, false), bind_view(&o->ids, false), bind_view(&out, true)};
    return vk_dispatch(vb, p, b, 3, &pc, sizeof pc, groups(o->out.ne0, 256), row_groups(n), 1);
}

weft_status vk_op_rmsnorm(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
    struct {
        uint32_t x_off, x_rs, w_off, o_off, o_rs, a_off, a_rs, s_off, s_rs, ne0, ne1;
        float eps;
    } pc = {(uint32_t)(o->x.offset / 4), (uint32_t)(o->x.nb1 / 4), (uint32_t)(o->w.offset / 4),
            (uint32_t)(o->out.offset / 4), (uint32_t)(o->out.nb1 / 4), 0, 0, 0, 0, (uint32_t)o->x.ne0,
            (uint32_t)o->x.ne1, o->eps};
    struct weft_view w = o->w;
    w.ne0 = o->x.ne0;
    w.ne1 = 1;
    struct vk_bind b[5] = {bind_view(&o->x, false), bind_view(&w, false), bind_view(&o->out, true)};
    uint32_t nb = 3;
    if (o->has_add) {
        pc.a_off = (uint32_t)(o->add.offset / 4);
        pc.a_rs = (uint32_t)(o->add.nb1 / 4);
        pc.s_off = (uint32_t)(o->sum.offset / 4);
        pc.s_rs = (uint32_t)(o->sum.nb1 / 4);
        b[3] = bind_view(&o->add, false);
        b[4] = bind_view(&o->sum, true);
        nb = 5;
    }
    const bool exact = vk_exact_ops(vb);
    struct vk_pipeline *p = vk_pipeline_get(vb, o->has_add ? (exact ? "rmsnorm_add_x" : "rmsnorm_add")
                                                           : (exact ? "rmsnorm_plain_x" : "rmsnorm_plain"),
                                            nb, sizeof pc, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    return vk_dispatch(vb, p, b, nb, &pc, sizeof pc, row_groups(o->x.ne1), 1, 1);
}

/* out = f(x, y) row-wise, 8 push words (add.comp and silu_mul.comp) and
 * n_extra floats after them (silu_mul_oai's alpha, limit); `tab`
 * (silu_mul_gelu's table), when not NULL, is binding 3 */
static weft_status binary_ext(struct vk_backend *vb, const char *name, const struct weft_view *x,
                              const struct weft_view *y, const struct weft_view *out, struct weft_buffer *tab,
                              const float *extra, uint32_t n_extra)
{
    uint32_t pc[10] = {(uint32_t)(x->offset / 4), (uint32_t)(x->nb1 / 4), (uint32_t)(y->offset / 4),
                       (uint32_t)(y->nb1 / 4),    (uint32_t)(out->offset / 4), (uint32_t)(out->nb1 / 4),
                       (uint32_t)out->ne0,        (uint32_t)out->ne1};
    if (n_extra > 2) n_extra = 2;
    if (n_extra) memcpy(pc + 8, extra, n_extra * sizeof(float));
    const uint32_t pc_bytes = (8 + n_extra) * sizeof(uint32_t);
    const uint32_t nb = tab ? 4 : 3;
    struct vk_pipeline *p = vk_pipeline_get(vb, name, nb, pc_bytes, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    const struct vk_bind b[4] = {bind_view(x, false), bind_view(y, false), bind_view(out, true),
                                 {tab, 0, tab ? vk_buffer_size(tab) : 0, false}};
    return vk_dispatch(vb, p, b, nb, pc, pc_bytes, groups(out->ne0, 256), row_groups(out->ne1), 1);
}

static weft_status binary(struct vk_backend *vb, const char *name, const struct weft_view *x,
                          const struct weft_view *y, const struct weft_view *out, struct weft_buffer *tab)
{
    return binary_ext(vb, name, x, y, out, tab, NULL, 0);
}

#define GELU_TAB_BYTES ((size_t)65536 * sizeof(weft_half))

/* The CPU's GeGLU table (backends/cpu ops_elementwise.c, ggml's
 * GGML_GELU_FP16 scheme): for every F16 value x, the F16 of
 * 0.5x(1 + tanhf(sqrt(2/pi) x (1 + 0.044715x²))) evaluated in F32 with the
 * process's libm, so the shader's lookups give the CPU's bits. */
weft_status vk_gelu_table(struct vk_backend *vb)
{
    if (vb->gelu_tab) return WEFT_OK;
    weft_half *h = malloc(GELU_TAB_BYTES);
    if (!h) return weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
    for (uint32_t i = 0; i < 65536u; i++) {
        const float x = weft_half_to_f32((weft_half)i);
        const float y = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
        h[i] = weft_f32_to_half(y);
    }
    struct weft_buffer *t = NULL;
    weft_status st = vk_buffer_new(vb, GELU_TAB_BYTES, false, false, &t);
    if (st == WEFT_OK) st = vk_buffer_write(t, 0, h, GELU_TAB_BYTES);
    free(h);
    if (st != WEFT_OK) {
        if (t) vk_buffer_destroy_now(t);
        return st;
    }
    vb->gelu_tab = t;
    return WEFT_OK;
}

weft_status vk_op_silu_mul(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_silu_mul *o = &op->u.silu_mul;
    if (o->act == WEFT_GLU_GELU_TANH) {
        if (!vb->gelu_tab)  /* vk_run makes it before recording */
            return weft_error(WEFT_ERR_INVALID_ARG, "vulkan SILU_MUL: the GeLU table was not made");
        return binary(vb, "silu_mul_gelu", &o->gate, &o->up, &o->out, vb->gelu_tab);
    }
    if (o->act == WEFT_GLU_SWIGLU_OAI) {
        const float ext[2] = {o->alpha, o->limit};
        return binary_ext(vb, vk_exact_ops(vb) ? "silu_mul_oai_x" : "silu_mul_oai", &o->gate, &o->up, &o->out, NULL,
                          ext, 2);
    }
    if (o->act == WEFT_GLU_SIGMOID)
        return binary(vb, vk_exact_ops(vb) ? "silu_mul_sig_x" : "silu_mul_sig", &o->gate, &o->up, &o->out, NULL);
    if (o->act != WEFT_GLU_SILU) return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan SILU_MUL: activation %d", (int)o->act);
    return binary(vb, vk_exact_ops(vb) ? "silu_mul_exact" : "silu_mul_std", &o->gate, &o->up, &o->out, NULL);
}

/* api 10's scale follows the 8 push words (0: a plain sum) */
weft_status vk_op_add(struct vk_backend *vb, const struct weft_op *op)
{
    const float scale = op->u.add.scale;
    return binary_ext(vb, "add", &op->u.add.a, &op->u.add.b, &op->u.add.out, NULL, &scale, 1);
}
