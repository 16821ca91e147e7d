/* Vulkan recurrent-state ops of hybrid models (api 9; backend.h gives the
 * math and the float order): SSM_CONV (shaders/ssm_conv.comp) and
 * DELTA_NET (shaders/delta_net.comp), one dispatch each.
 *
 * A sequence's rows run in row order inside one workgroup (its state kept
 * in registers from its first row to its last); sequences, channels (SSM_CONV)
 * and v heads and rows j of the state matrix (DELTA_NET) are spread over
 * workgroups. Which rows belong together is found on the device from the
 * slots: the dispatch has a workgroup row per candidate first row, and one
 * whose row is not the first of its slot returns at once.
 *
 * On CPU-type devices (vk_exact_ops) the exact variants give the CPU's bits:
 * its FMA chain and SiLU exp for SSM_CONV; for DELTA_NET its l2 norm,
 * glibc's expf and logf (shaders/expf_libm.glsl, logf_libm.glsl), ggml's
 * AVX dot order and single-rounding FMAs. Elsewhere the device's exp, log,
 * fma and float sums.
 *
 * Slots: a row naming a slot outside the state is refused before the step is
 * recorded (vk_recurrent_check_slots reads the slots, as the CPU backend
 * does; the slots are host-written metadata, and run() waits for the step
 * before anyway). The shaders skip such rows too, so no state outside the
 * view is ever touched, even by slots an earlier op of the same step
 * rewrote. */
#include "backends/vulkan/vk_priv.h"  /* vk_buffer_read, for the slots check */

#include <stdlib.h>

/* workgroup rows of a dispatch: candidate first rows r0, r0 + 64, ... each
 * (a prefill chunk's rows would otherwise each launch a workgroup row that
 * returns at once; 64 sequences at a time fill a GPU, and a decode step
 * has little work per sequence) */
#define ROWS_PER_DISPATCH 64u
#define MAX_KM1 63u               /* SSM_CONV's K - 1 (core allows kernels of 2..64) */
#define MAX_DN_HEAD 256           /* DELTA_NET's head_dim (the CPU backend's limit too) */
#define DN_LANES 32u              /* lanes per state row j (exact: ggml's 32-element chunks), at most */

static size_t view_bytes(const struct weft_view *v)
{
    return (size_t)(v->ne1 - 1) * v->nb1 + weft_row_size(v->type, v->ne0);
}

static bool f32_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return v->type == WEFT_TYPE_F32 && vk_mm_addressable(vb, v, 4);
}

/* values laid end to end (read as one array of ne0 * ne1) */
static bool is_vector(const struct weft_view *v) { return v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * 4; }

static bool slots_ok(const struct vk_backend *vb, const struct weft_view *v, int64_t rows)
{
    return v->type == WEFT_TYPE_I32 && vk_mm_addressable(vb, v, 4) && is_vector(v) && v->ne0 * v->ne1 >= rows;
}

static struct vk_bind bind_of(const struct weft_view *v, bool write)
{
    return (struct vk_bind){v->buf, v->offset, view_bytes(v), write};
}

static uint32_t row_groups(int64_t rows) { return rows < ROWS_PER_DISPATCH ? (uint32_t)rows : ROWS_PER_DISPATCH; }

/* DELTA_NET's launch shape: threads, lanes per row j (L), elements per lane
 * (E), row blocks per v head, and the pipeline */
struct dn_shape { uint32_t wg, lanes, per_lane, njb; const char *name; };

static struct dn_shape dn_shape(const struct vk_backend *vb, int64_t S)
{
    const struct vk_caps *c = vk_get_caps(vb);
    struct dn_shape sh = {128, DN_LANES, 0, 0, "delta_net_std"};
    if (vk_exact_ops(vb)) {
        sh.wg = 256;
        sh.name = "delta_net_exact";
    } else if (c->subgroup_shuffle && c->subgroup_size >= 8 && c->subgroup_size <= sh.wg &&
               (c->subgroup_size & (c->subgroup_size - 1)) == 0) {
        /* a row's lanes inside one subgroup: 32 of a 32..128 wide one, all of an 8 or 16 wide one */
        sh.name = "delta_net_std_sg";
        if (c->subgroup_size < DN_LANES) sh.lanes = c->subgroup_size;
    }
    sh.per_lane = (uint32_t)((S + sh.lanes - 1) / sh.lanes);
    const uint32_t jr = sh.wg / sh.lanes;
    sh.njb = (uint32_t)((S + jr - 1) / jr);
    return sh;
}

bool vk_recurrent_supports(struct vk_backend *vb, const struct weft_op *op)
{
    const struct vk_caps *c = vk_get_caps(vb);
    if (op->kind == WEFT_OP_SSM_CONV) {
        const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
        const int64_t rows = o->x.ne1, C = o->x.ne0, K = o->w.ne0;
        return f32_ok(vb, &o->x) && f32_ok(vb, &o->w) && f32_ok(vb, &o->out) && f32_ok(vb, &o->state) &&
               slots_ok(vb, &o->slots, rows) && K >= 2 && K - 1 <= (int64_t)MAX_KM1 && o->w.ne1 == C &&
               o->out.ne0 == C && o->out.ne1 == rows && o->state.ne0 == (K - 1) * C && o->state.ne1 >= 1 &&
               (uint64_t)(C + 127) / 128 <= c->max_workgroup_count[0];
    }
    if (op->kind == WEFT_OP_DELTA_NET) {
        const struct weft_op_delta_net *o = &op->u.delta_net;
        const int64_t rows = o->in.ne1, S = o->head_dim, Hk = o->n_k_head, Hv = o->n_v_head;
        if (!(f32_ok(vb, &o->in) && f32_ok(vb, &o->beta) && f32_ok(vb, &o->alpha) && f32_ok(vb, &o->dt_bias) &&
              f32_ok(vb, &o->a) && f32_ok(vb, &o->out) && f32_ok(vb, &o->state) && slots_ok(vb, &o->slots, rows) &&
              S >= 1 && S <= MAX_DN_HEAD && Hk >= 1 && Hv >= Hk && Hv % Hk == 0 && o->eps > 0.0f &&
              o->in.ne0 == (2 * Hk + Hv) * S && o->beta.ne0 >= Hv && o->alpha.ne0 >= Hv && o->beta.ne1 == rows &&
              o->alpha.ne1 == rows && is_vector(&o->dt_bias) && o->dt_bias.ne0 * o->dt_bias.ne1 >= Hv &&
              is_vector(&o->a) && o->a.ne0 * o->a.ne1 >= Hv && o->out.ne0 == Hv * S && o->out.ne1 == rows &&
              o->state.ne0 == Hv * S * S && o->state.ne1 >= 1))
            return false;
        return (uint64_t)Hv * dn_shape(vb, S).njb <= c->max_workgroup_count[0];
    }
    return false;
}

weft_status vk_recurrent_check_slots(struct vk_backend *vb, const struct weft_op *ops, size_t n)
{
    int32_t *v = NULL;
    size_t cap = 0;
    const struct weft_view *have = NULL;   /* the slots now in v: have_rows of them */
    int64_t have_rows = 0;
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && st == WEFT_OK; i++) {
        const struct weft_view *sl, *state;
        int64_t rows;
        const char *name;
        if (ops[i].kind == WEFT_OP_SSM_CONV) {
            sl = &ops[i].u.ssm_conv.slots, state = &ops[i].u.ssm_conv.state, rows = ops[i].u.ssm_conv.x.ne1;
            name = "ssm_conv";
        } else if (ops[i].kind == WEFT_OP_DELTA_NET) {
            sl = &ops[i].u.delta_net.slots, state = &ops[i].u.delta_net.state, rows = ops[i].u.delta_net.in.ne1;
            name = "delta_net";
        } else {
            continue;
        }
        if (!have || have->buf != sl->buf || have->offset != sl->offset || rows > have_rows) {
            if ((size_t)rows > cap) {
                int32_t *nv = realloc(v, (size_t)rows * sizeof *v);
                if (!nv) {
                    st = weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
                    break;
                }
                v = nv;
                cap = (size_t)rows;
            }
            if ((st = vk_buffer_read(sl->buf, sl->offset, v, (size_t)rows * sizeof *v)) != WEFT_OK) break;
            have = sl;
            have_rows = rows;
        }
        for (int64_t r = 0; r < rows; r++)
            if (v[r] < 0 || v[r] >= state->ne1) {
                st = weft_error(WEFT_ERR_INVALID_ARG, "vulkan: op %zu (%s): row %lld's state slot %d is not one of the %lld",
                                i, name, (long long)r, v[r], (long long)state->ne1);
                break;
            }
    }
    free(v);
    return st;
}

/* a view's offset and row stride in floats (supports() keeps them 4-aligned, under 4 GiB) */
static uint32_t off4(const struct weft_view *v) { return (uint32_t)(v->offset / 4); }
static uint32_t rs4(const struct weft_view *v) { return (uint32_t)(v->nb1 / 4); }

weft_status vk_op_ssm_conv(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
    const int64_t rows = o->x.ne1, C = o->x.ne0, K = o->w.ne0;
    struct {
        uint32_t x_off, x_rs, w_off, w_rs, o_off, o_rs, s_off, s_rs, sl_off, C, rows, n_slots, silu;
    } pc = {off4(&o->x),     rs4(&o->x),     off4(&o->w),      rs4(&o->w),       off4(&o->out),
            rs4(&o->out),    off4(&o->state), rs4(&o->state),  off4(&o->slots),  (uint32_t)C,
            (uint32_t)rows,  (uint32_t)o->state.ne1, o->silu ? 1u : 0u};
    const uint32_t wg = vk_get_caps(vb)->cpu_device ? 256 : 128, spec[2] = {wg, (uint32_t)(K - 1)};
    struct vk_pipeline *p =
        vk_pipeline_get(vb, vk_exact_ops(vb) ? "ssm_conv_exact" : "ssm_conv_std", 5, sizeof pc, spec, 2);
    if (!p) return WEFT_ERR_DEVICE;
    const struct vk_bind b[5] = {bind_of(&o->x, false), bind_of(&o->w, false), bind_of(&o->out, true),
                                 bind_of(&o->state, true), {o->slots.buf, o->slots.offset, (size_t)rows * 4, false}};
    return vk_dispatch(vb, p, b, 5, &pc, sizeof pc, (uint32_t)((C + wg - 1) / wg), row_groups(rows), 1);
}

weft_status vk_op_delta_net(struct vk_backend *vb, const struct weft_op *op)
{
    const struct weft_op_delta_net *o = &op->u.delta_net;
    const int64_t rows = o->in.ne1, S = o->head_dim;
    const struct dn_shape sh = dn_shape(vb, S);
    struct {
        uint32_t in_off, in_rs, b_off, b_rs, al_off, al_rs, dt_off, a_off, o_off, o_rs, s_off, s_rs, sl_off;
        uint32_t rows, n_slots, hk, hv, S, njb, kgrp;
        float eps;
    } pc = {off4(&o->in),    rs4(&o->in),     off4(&o->beta),  rs4(&o->beta),   off4(&o->alpha),
            rs4(&o->alpha),  off4(&o->dt_bias), off4(&o->a),   off4(&o->out),   rs4(&o->out),
            off4(&o->state), rs4(&o->state),  off4(&o->slots), (uint32_t)rows,  (uint32_t)o->state.ne1,
            o->n_k_head,     o->n_v_head,     (uint32_t)S,     sh.njb,
            o->k_grouped ? o->n_v_head / o->n_k_head : 0u,     o->eps};
    const uint32_t spec[3] = {sh.wg, sh.lanes, sh.per_lane};
    struct vk_pipeline *p = vk_pipeline_get(vb, sh.name, 8, sizeof pc, spec, 3);
    if (!p) return WEFT_ERR_DEVICE;
    const struct vk_bind b[8] = {bind_of(&o->in, false),      bind_of(&o->beta, false), bind_of(&o->alpha, false),
                                 bind_of(&o->dt_bias, false), bind_of(&o->a, false),    bind_of(&o->out, true),
                                 bind_of(&o->state, true),    {o->slots.buf, o->slots.offset, (size_t)rows * 4, false}};
    return vk_dispatch(vb, p, b, 8, &pc, sizeof pc, o->n_v_head * sh.njb, row_groups(rows), 1);
}
