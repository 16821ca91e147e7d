/* Vulkan mixtures of experts (api 7; backend.h gives the math): MOE_ROUTE
 * (shaders/moe_route.comp) and MATMUL_ID (shaders/mul_mat_vec_id.comp,
 * mul_mm_id.comp, moe_sum.comp).
 *
 * MOE_ROUTE: one workgroup per row; on CPU-type devices (vk_exact_ops) the
 * exact variant gives the CPU's bits (its exp polynomial and libm expf, its
 * sums in double in its order), elsewhere the GPU's exp and float sums.
 * api 10's expert_scale (binding 4) multiplies each chosen weight last.
 *
 * MATMUL_ID never reads the ids back: they come from MOE_ROUTE in the same
 * command buffer. The activations are first rounded to the weight type's
 * vec_dot type, once per x row, into scratch (MATMUL's quant_act,
 * vk_mm_round_activations). Then one dispatch over (tile of an expert's
 * output rows, expert): each workgroup reads the step's ids (rows * k
 * ints), gathers the slots that chose its expert (shaders/moe_gather.glsl)
 * and returns at once when there are none, so an unchosen expert's weight
 * bytes are never loaded; a chosen expert's tile is dequantized once per
 * batch of gathered slots — MV_MAX_ROWS of them in mul_mat_vec_id (a decode
 * step: every slot of an expert in one batch), 64 in mul_mm_id (prefill, by
 * use_mm), i.e. once per op for all the rows that chose it up to those batch
 * sizes (a larger batch re-reads the tile, as any tiled matmul does).
 * Without weights the products go straight to out[slot]; with weights to
 * scratch ([slots][N]) and moe_sum forms out[r] = ((w0*y0 + w1*y1) + ...)
 * (+ add[r]) in slot order (add may alias out). Ids outside [0, n_expert)
 * match no expert: their slots' products are left unwritten (the CPU
 * refuses such a step; a device cannot without reading the ids back).
 * Not bit-exact with the CPU on lavapipe (MATMUL's mul_mat_exact path has
 * no _id form): results agree up to summation order. */
#include "backends/vulkan/vk_internal.h"

#include <stdio.h>
#include <string.h>

#define MV_MAX_ROWS 8      /* shaders/mul_mat_vec_id.comp: slots per batch */
#define MM_TILE 64         /* shaders/mul_mm_id.comp: weight rows and slots per tile */
#define MAX_EXPERTS 512    /* shaders/moe_route.comp MAX_E (the CPU's limit too) */
#define MAX_K 64           /* shaders/moe_route.comp MAX_K */
#define SCRATCH_ALIGN 256

static size_t align_up(size_t n) { return (n + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1); }

/* bytes from the view's offset to the end of its last row */
static size_t view_bytes(const struct weft_view *v)
{
    return (size_t)(v->ne1 - 1) * v->nb1 + weft_row_size(v->type, v->ne0);
}

static struct vk_bind bind_of(const struct weft_view *v, bool write)
{
    return (struct vk_bind){v->buf, v->offset, view_bytes(v), write};
}

static bool f32_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return v->type == WEFT_TYPE_F32 && vk_mm_addressable(vb, v, 4);
}

static bool i32_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return v->type == WEFT_TYPE_I32 && vk_mm_addressable(vb, v, 4);
}

/* n contiguous floats: a vector view, or rows back to back */
static bool f32_vec_ok(const struct vk_backend *vb, const struct weft_view *v, int64_t n)
{
    return f32_ok(vb, v) && v->ne0 * v->ne1 == n && (v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4);
}

/* the same view as one row of its ne0 * ne1 floats (f32_vec_ok's views) */
static struct weft_view flat(const struct weft_view *v)
{
    struct weft_view f = *v;
    f.ne0 = v->ne0 * v->ne1;
    f.ne1 = 1;
    f.nb1 = (size_t)f.ne0 * 4;
    return f;
}

/* mul_mm_id (batches of 64 slots, 64 x 64 tiles) where the experts average more than half
 * a matrix-vector batch of slots; else mul_mat_vec_id (batches of MV_MAX_ROWS: a decode
 * step, or a short prefill spread over many experts). Either serves any count. */
static bool use_mm(int64_t slots, uint32_t n_expert) { return slots * 2 > (int64_t)MV_MAX_ROWS * n_expert; }

/* scratch of a MATMUL_ID: the rounded activations, then (with weights) the slots' products */
static void mid_scratch(const struct weft_op_matmul_id *m, size_t *xq_bytes, size_t *y_bytes)
{
    const int64_t rows = m->ids.ne1, slots = m->ids.ne0 * rows, N = m->w.ne1 / m->n_expert;
    *xq_bytes = align_up(vk_mm_act_bytes(m->w.type, m->x_per_slot ? slots : rows, m->w.ne0));
    *y_bytes = m->has_weights ? align_up((size_t)slots * (size_t)N * sizeof(float)) : 0;
}

static bool route_ok(struct vk_backend *vb, const struct weft_op_moe_route *m)
{
    const int64_t E = m->logits.ne0, R = m->logits.ne1;
    if (!f32_ok(vb, &m->logits) || !i32_ok(vb, &m->ids) || !f32_ok(vb, &m->weights)) return false;
    if (m->k < 1 || m->k > MAX_K || E < (int64_t)m->k || E > MAX_EXPERTS || m->ids.ne0 < (int64_t)m->k ||
        m->weights.ne0 < (int64_t)m->k || m->ids.ne1 != R || m->weights.ne1 != R || m->gating > WEFT_MOE_SOFTMAX_TOPK ||
        !weft_moe_groups_ok(m))
        return false;
    return (!m->has_bias || f32_vec_ok(vb, &m->bias, E)) &&
           (!m->has_expert_scale || f32_vec_ok(vb, &m->expert_scale, E));
}

static bool matmul_id_ok(struct vk_backend *vb, const struct weft_op_matmul_id *m)
{
    if (!vk_mm_weight_ok(vb, &m->w) || !f32_ok(vb, &m->x) || !f32_ok(vb, &m->out) || !i32_ok(vb, &m->ids))
        return false;
    if (m->n_expert < 1 || m->n_expert > MAX_EXPERTS || m->w.ne1 % m->n_expert || m->x.ne0 != m->w.ne0) return false;
    const int64_t N = m->w.ne1 / m->n_expert, rows = m->ids.ne1, k = m->ids.ne0, slots = rows * k;
    if (m->out.ne0 != N || m->x.ne1 != (m->x_per_slot ? slots : rows)) return false;
    if (m->has_weights) {
        if (!f32_ok(vb, &m->weights) || m->weights.ne0 < k || m->weights.ne1 != rows || m->out.ne1 != rows) return false;
        if (m->has_add && (!f32_ok(vb, &m->add) || m->add.ne0 != N || m->add.ne1 != rows)) return false;
    } else if (m->has_add || m->out.ne1 != slots) {
        return false;  /* add belongs to the weighted form */
    }
    if (m->has_bias && !f32_vec_ok(vb, &m->bias, m->w.ne1)) return false;
    /* scratch offsets travel in 32-bit push constants (floats) */
    size_t xq, y;
    mid_scratch(m, &xq, &y);
    if (xq + y > UINT32_MAX || (uint64_t)slots > UINT32_MAX / 4) return false;
    const struct vk_caps *c = vk_get_caps(vb);
    const uint32_t per = use_mm(slots, m->n_expert) ? MM_TILE : vk_mm_mv_nr(vb);
    return (uint64_t)((N + per - 1) / per) <= c->max_workgroup_count[0] && m->n_expert <= c->max_workgroup_count[1];
}

bool vk_moe_supports(struct vk_backend *vb, const struct weft_op *op)
{
    if (op->kind == WEFT_OP_MOE_ROUTE) return route_ok(vb, &op->u.moe_route);
    if (op->kind == WEFT_OP_MATMUL_ID) return matmul_id_ok(vb, &op->u.matmul_id);
    return false;
}

weft_status vk_op_moe_route(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_moe_route *m = &op->u.moe_route;
    if (!route_ok(vb, m)) return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan MOE_ROUTE: view shapes not supported");
    struct weft_view bias = m->has_bias ? flat(&m->bias) : m->logits;
    struct weft_view es = m->has_expert_scale ? flat(&m->expert_scale) : m->logits;  /* logits: unread */
    struct {
        uint32_t l_off, l_rs, i_off, i_rs, w_off, w_rs;
        uint32_t E, k, rows, gating, norm, has_bias, b_off;
        float scale;
        uint32_t n_group, group_used;
        uint32_t has_es, es_off;
    } pc = {(uint32_t)(m->logits.offset / 4), (uint32_t)(m->logits.nb1 / 4), (uint32_t)(m->ids.offset / 4),
            (uint32_t)(m->ids.nb1 / 4), (uint32_t)(m->weights.offset / 4), (uint32_t)(m->weights.nb1 / 4),
            (uint32_t)m->logits.ne0, m->k, (uint32_t)m->logits.ne1, (uint32_t)m->gating, m->norm, m->has_bias,
            (uint32_t)(bias.offset / 4), m->scale, m->n_group > 1 ? m->n_group : 0, m->group_used,
            m->has_expert_scale, (uint32_t)(es.offset / 4)};
    struct vk_pipeline *p = vk_pipeline_get(vb, vk_exact_ops(vb) ? "moe_route_exact" : "moe_route_std", 5, sizeof pc,
                                            NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    const struct vk_bind b[5] = {bind_of(&m->logits, false), bind_of(&m->ids, true), bind_of(&m->weights, true),
                                 bind_of(&bias, false), bind_of(&es, false)};
    const uint32_t mx = vk_get_caps(vb)->max_workgroup_count[0];
    const uint32_t gx = m->logits.ne1 < (int64_t)mx ? (uint32_t)m->logits.ne1 : mx;
    return vk_dispatch(vb, p, b, 5, &pc, sizeof pc, gx, 1, 1);
}

struct mid_push {
    uint32_t w_off, w_stride;
    uint32_t x_off, x_stride;
    uint32_t o_off, o_stride;
    uint32_t K, N;
    uint32_t n_slots, k;
    uint32_t x_per_slot;
    uint32_t ids_off, ids_stride;
    uint32_t s_off, s_stride;
    uint32_t b_off, has_bias;
};

weft_status vk_op_matmul_id(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_matmul_id *m = &op->u.matmul_id;
    if (!matmul_id_ok(vb, m))
        return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan MATMUL_ID: weight type %s or view shapes not supported",
                          weft_type_name(m->w.type));
    const int64_t rows = m->ids.ne1, k = m->ids.ne0, slots = rows * k, K = m->w.ne0, N = m->w.ne1 / m->n_expert;
    const int64_t n_xrows = m->x_per_slot ? slots : rows;
    size_t xq_bytes, y_bytes;
    mid_scratch(m, &xq_bytes, &y_bytes);
    struct weft_buffer *scratch = NULL;
    weft_status st;
    if (xq_bytes + y_bytes && (st = vk_scratch(vb, xq_bytes + y_bytes, &scratch)) != WEFT_OK) return st;
    /* the activations, rounded once per x row (nothing to do for F32 weights) */
    struct weft_view xv = m->x;
    xv.ne1 = n_xrows;
    uint32_t s_off = 0;
    if ((st = vk_mm_round_activations(vb, &m->w, &xv, n_xrows, scratch, 0, &s_off)) != WEFT_OK) return st;
    /* the products: to out[slot], or to scratch for moe_sum */
    const struct weft_view y = m->has_weights ? weft_view_2d(scratch, xq_bytes, WEFT_TYPE_F32, N, slots) : m->out;
    const struct weft_view bias = m->has_bias ? flat(&m->bias) : xv;
    struct mid_push pc = {
        .w_off = (uint32_t)m->w.offset, .w_stride = (uint32_t)m->w.nb1,
        .x_off = (uint32_t)(xv.offset / 4), .x_stride = (uint32_t)(xv.nb1 / 4),
        .o_off = (uint32_t)(y.offset / 4), .o_stride = (uint32_t)(y.nb1 / 4),
        .K = (uint32_t)K, .N = (uint32_t)N, .n_slots = (uint32_t)slots, .k = (uint32_t)k,
        .x_per_slot = m->x_per_slot, .ids_off = (uint32_t)(m->ids.offset / 4), .ids_stride = (uint32_t)(m->ids.nb1 / 4),
        .s_off = s_off, .s_stride = (uint32_t)(K / 32), .b_off = (uint32_t)(bias.offset / 4), .has_bias = m->has_bias,
    };
    struct vk_bind binds[5] = {bind_of(&m->w, false), bind_of(&xv, false), bind_of(&y, true), bind_of(&m->ids, false),
                               bind_of(&bias, false)};
    if (s_off) binds[1].size = (size_t)s_off * 4 + (size_t)n_xrows * (size_t)(K / 32) * 4 - binds[1].offset;  /* + the sums */
    char name[64];
    struct vk_pipeline *p;
    uint32_t gx;
    if (use_mm(slots, m->n_expert)) {
        snprintf(name, sizeof name, "mul_mm_id_%s", vk_mm_type_suffix(m->w.type));
        p = vk_pipeline_get(vb, name, 5, sizeof pc, NULL, 0);
        gx = (uint32_t)((N + MM_TILE - 1) / MM_TILE);
    } else {
        const uint32_t spec[2] = {vk_mm_matvec_threads(vb, K), vk_mm_mv_nr(vb)};
        snprintf(name, sizeof name, "mul_mat_vec_id_%s%s", vk_mm_type_suffix(m->w.type),
                 vk_mm_subgroup_reduce(vb) ? "_sg" : "");
        p = vk_pipeline_get(vb, name, 5, sizeof pc, spec, 2);
        gx = (uint32_t)((N + spec[1] - 1) / spec[1]);
    }
    if (!p) return WEFT_ERR_DEVICE;
    if ((st = vk_dispatch(vb, p, binds, 5, &pc, sizeof pc, gx, m->n_expert, 1)) != WEFT_OK || !m->has_weights) return st;
    /* out[r] = ((w0 * y0 + w1 * y1) + ...) (+ add[r]) */
    struct {
        uint32_t y_off, w_off, w_rs, a_off, a_rs, o_off, o_rs, N, rows, k, has_add;
    } sp = {(uint32_t)(y.offset / 4), (uint32_t)(m->weights.offset / 4), (uint32_t)(m->weights.nb1 / 4),
            m->has_add ? (uint32_t)(m->add.offset / 4) : 0, m->has_add ? (uint32_t)(m->add.nb1 / 4) : 0,
            (uint32_t)(m->out.offset / 4), (uint32_t)(m->out.nb1 / 4), (uint32_t)N, (uint32_t)rows, (uint32_t)k,
            m->has_add};
    struct vk_pipeline *ps = vk_pipeline_get(vb, "moe_sum", 4, sizeof sp, NULL, 0);
    if (!ps) return WEFT_ERR_DEVICE;
    const struct vk_bind sb[4] = {bind_of(&y, false), bind_of(&m->weights, false),
                                  m->has_add ? bind_of(&m->add, false) : bind_of(&y, false), bind_of(&m->out, true)};
    const uint32_t gy = rows < 65535 ? (uint32_t)rows : 65535u;
    return vk_dispatch(vb, ps, sb, 4, &sp, sizeof sp, (uint32_t)((N + 255) / 256), gy, 1);
}
