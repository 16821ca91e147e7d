/* Vulkan MATMUL and LOGITS: out[r] = (x[r] · Wᵀ (+ bias)) (+ add[r]).
 *
 * Two paths by the number of activation rows M:
 *   M <= MV_MAX_ROWS  mul_mat_vec_TYPE[_sg]: one workgroup per two weight rows,
 *                     all M rows of x at once, so W is read once (decode);
 *   M >  MV_MAX_ROWS  mul_mm_TYPE: 64 x 64 output tiles, W dequantized into
 *                     shared memory per 32-wide k step (prefill).
 * Activations are first rounded as the CPU backend (and ggml) rounds them
 * for this weight type (quant_act: Q8_0 / Q8_K blocks, F16, BF16; none for
 * F32) into scratch, so both backends multiply the same values; the shaders
 * then multiply by dequantized weights in f32. Results agree up to summation
 * order (and, for Q4_1/Q5_1, ggml's f16-rounded Q8_1 block sums).
 * On CPU-type devices (lavapipe; exact_mode) Q8_0 and Q4_1 take a third
 * path for every M: quant_act_q8_{0,1}x writes the activations' integer
 * blocks and mul_mat_exact computes each output as backends/cpu/cpu_ref_dot.c's dot does,
 * step for step, so the results equal the CPU's bit for bit (decode and
 * prefill alike). GPUs keep the faster paths above.
 * MATMUL's bias (api 5: F32, one per weight row) is added to each dot
 * product before the residual, in every path (binding 4 of every matmul
 * shader; LOGITS binds x there with has_bias 0).
 * LOGITS gathers and RMS-normalises the selected rows into scratch
 * (logits_norm) and then runs the same matmul with the output head.
 *
 * Offsets and strides travel in push constants as 32-bit values (W in bytes,
 * f32 views in floats) and every buffer is bound from its start, so
 * supports() refuses views that end past 4 GiB or past the device's
 * maxStorageBufferRange (a larger buffer is fine up to there). */
#include "backends/vulkan/vk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MV_MAX_ROWS 8 /* shaders/mul_mat_vec.comp: activation rows */
/* shaders/mul_mat_vec.comp: weight rows per workgroup: 2 on a GPU; on a CPU
 * device (lavapipe) a workgroup costs far more than its work, so 16 */
static uint32_t mv_nr(const struct vk_backend *vb)
{
    if (vk_opt_mv_nr(vb)) return vk_opt_mv_nr(vb);   /* vulkan.mv_nr: experiments */
    return vk_get_caps(vb)->cpu_device ? 16 : 2;
}
#define MM_TILE 64    /* shaders/mul_mm.comp: BN = BM */
#define EXACT_WG 64   /* shaders/mul_mat_exact.comp: outputs per workgroup (x) */

/* Bit-exact matmuls (shaders/mul_mat_exact.comp: the CPU's reference dot
 * products step for step) for the weight types that have them, on CPU-type
 * devices (lavapipe), whose IEEE float arithmetic makes that possible and
 * where it costs little; a GPU keeps the faster shaders (vk_exact_ops:
 * vulkan.exact=0|1 overrides). */
static bool exact_mode(const struct vk_backend *vb, enum weft_type t)
{
    return (t == WEFT_TYPE_Q8_0 || t == WEFT_TYPE_Q4_1) && vk_exact_ops(vb);  /* fma_x needs shaderFloat64 */
}

/* backends/cpu/cpu_ref_dot.c's Q8_0 and Q4_1 dot order: one float chain per row (1) or
 * ggml's eight AVX2 lanes (0); mul_mat_exact's q8_0, q4_1 / *_lanes variants */
#define DOT_ONE_CHAIN 0

struct mm_push {
    uint32_t w_off, w_stride;
    uint32_t x_off, x_stride;
    uint32_t o_off, o_stride;
    uint32_t a_off, a_stride;
    uint32_t K, N, M, has_add;
    uint32_t s_off, s_stride;   /* Q4_1/Q5_1: activation block sums (floats, in x's buffer) */
    uint32_t b_off, has_bias;   /* the bias, floats */
};

struct quant_act_push {
    uint32_t x_off, x_stride;
    uint32_t o_off, o_stride;
    uint32_t K, M;
    uint32_t s_off, s_stride;
};

struct logits_norm_push {
    uint32_t x_off, x_stride, x_rows;
    uint32_t rows_off, g_off;
    uint32_t o_off, o_stride;
    uint32_t K;
    float eps;
};

/* the variant suffix of a weight type, or NULL if no shader reads it */
static const char *type_suffix(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_F32: return "f32";
    case WEFT_TYPE_F16: return "f16";
    case WEFT_TYPE_BF16: return "bf16";
    case WEFT_TYPE_Q8_0: return "q8_0";
    case WEFT_TYPE_Q4_0: return "q4_0";
    case WEFT_TYPE_Q4_1: return "q4_1";
    case WEFT_TYPE_Q5_0: return "q5_0";
    case WEFT_TYPE_Q5_1: return "q5_1";
    case WEFT_TYPE_Q4_K: return "q4_k";
    case WEFT_TYPE_Q5_K: return "q5_k";
    case WEFT_TYPE_Q6_K: return "q6_k";
    case WEFT_TYPE_Q2_K: return "q2_k";
    case WEFT_TYPE_Q3_K: return "q3_k";
    case WEFT_TYPE_IQ4_NL: return "iq4_nl";
    case WEFT_TYPE_IQ4_XS: return "iq4_xs";
    case WEFT_TYPE_MXFP4: return "mxfp4";
    default: return NULL;
    }
}

/* the quant_act variant that rounds activations as the CPU's vec_dot type of
 * weight type t does (Q8_1: Q8_0's values plus the f16 block sums the CPU's
 * Q4_1/Q5_1 dot multiplies m by), or NULL for none */
static const char *act_variant(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_F16: return "quant_act_f16";
    case WEFT_TYPE_BF16: return "quant_act_bf16";
    case WEFT_TYPE_Q8_0: case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q5_0: case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_MXFP4:
        return "quant_act_q8_0";
    case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_1: return "quant_act_q8_1";
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
    case WEFT_TYPE_IQ4_XS:
        return "quant_act_q8_k";
    default: return NULL;
    }
}

#define SCRATCH_ALIGN 256

static size_t align_up(size_t n) { return (n + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1); }

/* scratch bytes run_matmul needs for M rows of K (0 for F32 weights) */
static bool has_block_sums(enum weft_type t) { return t == WEFT_TYPE_Q4_1 || t == WEFT_TYPE_Q5_1; }

static size_t act_bytes_exact(int64_t M, int64_t K)
{
    return align_up((size_t)M * (size_t)K) + align_up((size_t)M * (size_t)(K / 32) * 2 * sizeof(float));
}

static size_t act_bytes(const struct vk_backend *vb, enum weft_type t, int64_t M, int64_t K)
{
    if (exact_mode(vb, t)) return act_bytes_exact(M, K);
    if (!act_variant(t)) return 0;
    size_t sums = has_block_sums(t) ? align_up((size_t)M * (size_t)(K / 32) * sizeof(float)) : 0;
    return align_up((size_t)M * (size_t)K * sizeof(float)) + sums;
}

/* bytes from the buffer start to the end of the view's last row */
static uint64_t view_end(const struct weft_view *v)
{
    return (uint64_t)v->offset + (uint64_t)(v->ne1 - 1) * v->nb1 + weft_row_size(v->type, v->ne0);
}

/* a view the shaders can address: inside its buffer, offsets that fit the
 * 32-bit push constants and the storage range, aligned to `align` bytes */
static bool addressable(const struct vk_backend *vb, const struct weft_view *v, size_t align)
{
    if (!vk_view_ok(v) || v->offset % align || v->nb1 % align) return false;
    /* the runtime binds min(buffer, maxStorageBufferRange rounded down to 16) */
    uint64_t lim = vk_get_caps(vb)->max_storage_range & ~(uint64_t)15;
    if (lim == 0 || lim > UINT32_MAX) lim = UINT32_MAX;
    return view_end(v) <= lim;
}

static bool f32_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return v->type == WEFT_TYPE_F32 && addressable(vb, v, 4);
}

/* a weight matrix: a type the shaders read, rows 2-byte aligned (every
 * block size but MXFP4's is even; MXFP4 rows may start at any byte:
 * vk_weight_align), whole blocks per row (vk_view_ok) */
static bool weight_ok(const struct vk_backend *vb, const struct weft_view *v)
{
    return type_suffix(v->type) && addressable(vb, v, vk_weight_align(v->type));
}

static bool dispatchable(const struct vk_backend *vb, enum weft_type t, int64_t N, int64_t M)
{
    const struct vk_caps *c = vk_get_caps(vb);
    uint64_t gx = c->max_workgroup_count[0], gy = c->max_workgroup_count[1];
    if (exact_mode(vb, t)) return (uint64_t)((N + EXACT_WG - 1) / EXACT_WG) <= gx && (uint64_t)M <= gy;
    if (M <= MV_MAX_ROWS) return (uint64_t)((N + mv_nr(vb) - 1) / mv_nr(vb)) <= gx * gy;
    return (uint64_t)((N + MM_TILE - 1) / MM_TILE) <= gx && (uint64_t)((M + MM_TILE - 1) / MM_TILE) <= gy;
}

bool vk_matmul_supports(struct vk_backend *vb, const struct weft_op *op)
{
    if (op->kind == WEFT_OP_MATMUL) {
        const struct weft_op_matmul *m = &op->u.matmul;
        if (!weight_ok(vb, &m->w) || !f32_ok(vb, &m->x) || !f32_ok(vb, &m->out)) return false;
        if (m->x.ne0 != m->w.ne0 || m->out.ne0 != m->w.ne1 || m->out.ne1 != m->x.ne1) return false;
        if (m->has_add && (!f32_ok(vb, &m->add) || m->add.ne0 != m->out.ne0 || m->add.ne1 != m->out.ne1))
            return false;
        /* the bias: W.ne1 contiguous floats (a vector view, or rows packed back to back) */
        if (m->has_bias && (!f32_ok(vb, &m->bias) || m->bias.ne0 * m->bias.ne1 != m->w.ne1 ||
                            (m->bias.ne1 != 1 && m->bias.nb1 != (size_t)m->bias.ne0 * 4)))
            return false;
        return act_bytes(vb, m->w.type, m->x.ne1, m->w.ne0) <= UINT32_MAX && dispatchable(vb, m->w.type, m->w.ne1, m->x.ne1);
    }
    if (op->kind == WEFT_OP_LOGITS) {
        const struct weft_op_logits *l = &op->u.logits;
        if (!weight_ok(vb, &l->w) || !f32_ok(vb, &l->x) || !f32_ok(vb, &l->norm_w) || !f32_ok(vb, &l->out))
            return false;
        if (l->rows.type != WEFT_TYPE_I32 || !addressable(vb, &l->rows, 4)) return false;
        const int64_t n_out = l->rows.ne0;
        if (l->x.ne0 != l->w.ne0 || l->norm_w.ne0 < l->x.ne0 || l->out.ne0 != l->w.ne1 || l->out.ne1 < n_out)
            return false;
        /* the normalised rows live in scratch: their offsets must fit too */
        if (align_up((size_t)n_out * (size_t)l->x.ne0 * 4) + act_bytes(vb, l->w.type, n_out, l->x.ne0) > UINT32_MAX)
            return false;
        return n_out <= (int64_t)vk_get_caps(vb)->max_workgroup_count[0] && dispatchable(vb, l->w.type, l->w.ne1, n_out);
    }
    return false;
}

/* bytes of a view (from its offset) for the hazard tracker */
static size_t view_bytes(const struct weft_view *v) { return (size_t)(view_end(v) - v->offset); }

static struct vk_bind bind_of(const struct weft_view *v, bool write)
{
    return (struct vk_bind){v->buf, v->offset, view_bytes(v), write};
}

/* the bias as one row of N floats, or NULL */
static const struct weft_view *bias_row(const struct weft_op_matmul *m, struct weft_view *tmp)
{
    if (!m->has_bias) return NULL;
    *tmp = m->bias;
    tmp->ne0 = m->w.ne1;
    tmp->ne1 = 1;
    tmp->nb1 = (size_t)tmp->ne0 * sizeof(float);
    return tmp;
}

static uint32_t matvec_threads(const struct vk_backend *vb, int64_t K)
{
    uint32_t wg = K >= 4096 ? 256 : K >= 1024 ? 128 : 64;
    const struct vk_caps *c = vk_get_caps(vb);
    /* the reduction's shared array: MV_NR * MV_MAX_ROWS floats per thread */
    if (c->cpu_device) wg = 32;
    while (wg > 32 && (wg > c->max_workgroup_invocations || wg * mv_nr(vb) * MV_MAX_ROWS * 4 > c->max_shared_bytes)) wg /= 2;
    return wg;
}

/* matrix-vector partial sums reduced with subgroupAdd where the device has
 * it; vulkan.matvec_tree=1 forces the shared-memory tree (tests run both) */
static bool subgroup_reduce(const struct vk_backend *vb)
{
    return vk_get_caps(vb)->subgroup_arith && !vk_opt_matvec_tree(vb);
}

/* x' = x rounded as the CPU rounds activations for w's type, into scratch at
 * xq_off ([M][K] dense); *xv becomes that view. Nothing to do for F32. */
static weft_status round_activations(struct vk_backend *vb, const struct weft_view *w, struct weft_view *xv,
                                     int64_t M, struct weft_buffer *scratch, size_t xq_off, uint32_t *s_off)
{
    const char *name = act_variant(w->type);
    if (!name) return WEFT_OK;
    const int64_t K = w->ne0, qa = w->type == WEFT_TYPE_F16 || w->type == WEFT_TYPE_BF16 ? 1
                                   : weft_type_get(w->type)->block_size;
    /* [M][K] rounded values, then (Q8_1) [M][K/32] block sums; bound as one view */
    struct weft_view xq = weft_view_2d(scratch, xq_off, WEFT_TYPE_F32, K, M);
    const size_t s_at = xq_off + align_up((size_t)M * (size_t)K * sizeof(float));
    struct weft_view xq_all = xq;
    if (has_block_sums(w->type)) {
        xq_all.ne0 = (int64_t)((s_at - xq_off) / sizeof(float) + (size_t)M * (size_t)(K / 32));
        xq_all.ne1 = 1;
        xq_all.nb1 = (size_t)xq_all.ne0 * sizeof(float);
        *s_off = (uint32_t)(s_at / 4);
    }
    struct quant_act_push pc = {
        .x_off = (uint32_t)(xv->offset / 4), .x_stride = (uint32_t)(xv->nb1 / 4),
        .o_off = (uint32_t)(xq_off / 4), .o_stride = (uint32_t)K, .K = (uint32_t)K, .M = (uint32_t)M,
        .s_off = (uint32_t)(s_at / 4), .s_stride = (uint32_t)(K / 32),
    };
    struct weft_view xin = *xv;
    xin.ne1 = M;
    struct vk_bind b[2] = {bind_of(&xin, false), bind_of(&xq_all, true)};
    struct vk_pipeline *p = vk_pipeline_get(vb, name, 2, sizeof pc, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    const uint64_t groups = ((uint64_t)M * (uint64_t)(K / qa) + 63) / 64;
    const uint32_t mx = vk_get_caps(vb)->max_workgroup_count[0];
    const uint32_t gx = (uint32_t)(groups < mx ? groups : mx), gy = (uint32_t)((groups + gx - 1) / gx);
    weft_status st = vk_dispatch(vb, p, b, 2, &pc, sizeof pc, gx, gy, 1);
    if (st == WEFT_OK) *xv = xq;
    return st;
}

/* run_matmul on exact_mode's path: quant_act_q8_{0,1}x writes the
 * activations' integer blocks to scratch at xq_off ([M][K] int8, then
 * [M][K/32] (d, s) float pairs), then mul_mat_exact gives each output the
 * CPU's dot product, for any M (decode and prefill alike). */
static weft_status run_matmul_exact(struct vk_backend *vb, const struct weft_view *x_in, const struct weft_view *w,
                                    const struct weft_view *out, const struct weft_view *add,
                                    const struct weft_view *bias, int64_t M, struct weft_buffer *scratch,
                                    size_t xq_off)
{
    const int64_t K = w->ne0, N = w->ne1;
    const bool q8_1 = w->type == WEFT_TYPE_Q4_1;
    const size_t s_at = xq_off + align_up((size_t)M * (size_t)K);
    const size_t all = act_bytes_exact(M, K);
    struct weft_view xq_all = weft_view_2d(scratch, xq_off, WEFT_TYPE_F32, (int64_t)(all / 4), 1);
    struct quant_act_push qp = {
        .x_off = (uint32_t)(x_in->offset / 4), .x_stride = (uint32_t)(x_in->nb1 / 4),
        .o_off = (uint32_t)(xq_off / 4), .o_stride = (uint32_t)(K / 4), .K = (uint32_t)K, .M = (uint32_t)M,
        .s_off = (uint32_t)(s_at / 4), .s_stride = (uint32_t)(K / 32),
    };
    struct weft_view xin = *x_in;
    xin.ne1 = M;
    struct vk_bind qb[2] = {bind_of(&xin, false), bind_of(&xq_all, true)};
    struct vk_pipeline *p = vk_pipeline_get(vb, q8_1 ? "quant_act_q8_1x" : "quant_act_q8_0x", 2, sizeof qp, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    const uint64_t groups = ((uint64_t)M * (uint64_t)(K / 32) + 63) / 64;
    const uint32_t mx = vk_get_caps(vb)->max_workgroup_count[0];
    const uint32_t qx = (uint32_t)(groups < mx ? groups : mx), qy = (uint32_t)((groups + qx - 1) / qx);
    weft_status st = vk_dispatch(vb, p, qb, 2, &qp, sizeof qp, qx, qy, 1);
    if (st != WEFT_OK) return st;
    struct mm_push pc = {
        .w_off = (uint32_t)w->offset, .w_stride = (uint32_t)w->nb1,
        .x_off = qp.o_off, .x_stride = qp.o_stride,
        .o_off = (uint32_t)(out->offset / 4), .o_stride = (uint32_t)(out->nb1 / 4),
        .K = (uint32_t)K, .N = (uint32_t)N, .M = (uint32_t)M, .has_add = add != NULL,
        .s_off = qp.s_off, .s_stride = qp.s_stride, .has_bias = bias != NULL,
    };
    if (add) {
        pc.a_off = (uint32_t)(add->offset / 4);
        pc.a_stride = (uint32_t)(add->nb1 / 4);
    }
    if (bias) pc.b_off = (uint32_t)(bias->offset / 4);
    struct weft_view o = *out;
    o.ne1 = M;
    struct vk_bind binds[5] = {bind_of(w, false), bind_of(&xq_all, false), bind_of(&o, true),
                               add ? bind_of(add, false) : bind_of(&xq_all, false),
                               bias ? bind_of(bias, false) : bind_of(&xq_all, false)};
    const char *name = DOT_ONE_CHAIN ? (q8_1 ? "mul_mat_exact_q4_1" : "mul_mat_exact_q8_0")
                                     : (q8_1 ? "mul_mat_exact_q4_1_lanes" : "mul_mat_exact_q8_0_lanes");
    p = vk_pipeline_get(vb, name, 5, sizeof pc, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    return vk_dispatch(vb, p, binds, 5, &pc, sizeof pc, (uint32_t)((N + EXACT_WG - 1) / EXACT_WG), (uint32_t)M, 1);
}

/* out[M rows] = (x[M rows] · wᵀ (+ bias)) (+ add): the view shapes were
 * checked by supports(); x, out and add name M rows, bias N floats. The rounded activations go to
 * scratch at xq_off (act_bytes of room). */
static weft_status run_matmul(struct vk_backend *vb, const struct weft_view *x_in, const struct weft_view *w,
                              const struct weft_view *out, const struct weft_view *add, const struct weft_view *bias,
                              int64_t M, struct weft_buffer *scratch, size_t xq_off)
{
    const int64_t K = w->ne0, N = w->ne1;
    if (exact_mode(vb, w->type)) return run_matmul_exact(vb, x_in, w, out, add, bias, M, scratch, xq_off);
    struct weft_view xv = *x_in;
    xv.ne1 = M;
    uint32_t s_off = 0;
    weft_status st = round_activations(vb, w, &xv, M, scratch, xq_off, &s_off);
    if (st != WEFT_OK) return st;
    const struct weft_view *x = &xv;
    struct mm_push pc = {
        .w_off = (uint32_t)w->offset, .w_stride = (uint32_t)w->nb1,
        .x_off = (uint32_t)(x->offset / 4), .x_stride = (uint32_t)(x->nb1 / 4),
        .o_off = (uint32_t)(out->offset / 4), .o_stride = (uint32_t)(out->nb1 / 4),
        .K = (uint32_t)K, .N = (uint32_t)N, .M = (uint32_t)M, .has_add = add != NULL,
        .s_off = s_off, .s_stride = (uint32_t)(K / 32), .has_bias = bias != NULL,
    };
    if (add) {
        pc.a_off = (uint32_t)(add->offset / 4);
        pc.a_stride = (uint32_t)(add->nb1 / 4);
    }
    if (bias) pc.b_off = (uint32_t)(bias->offset / 4);
    struct vk_bind binds[5] = {bind_of(w, false), bind_of(x, false), bind_of(out, true),
                               add ? bind_of(add, false) : bind_of(x, false),
                               bias ? bind_of(bias, false) : bind_of(x, false)};
    if (s_off) binds[1].size = (size_t)s_off * 4 + (size_t)M * (size_t)(K / 32) * 4 - binds[1].offset;  /* + the sums */
    const struct vk_caps *caps = vk_get_caps(vb);
    char name[64];
    struct vk_pipeline *p;
    uint32_t gx, gy;
    if (M <= MV_MAX_ROWS) {
        uint32_t wg = matvec_threads(vb, K);
        snprintf(name, sizeof name, "mul_mat_vec_%s%s", type_suffix(w->type), subgroup_reduce(vb) ? "_sg" : "");
        const uint32_t spec[2] = {wg, mv_nr(vb)};
        p = vk_pipeline_get(vb, name, 5, sizeof pc, spec, 2);
        const int64_t groups = (N + spec[1] - 1) / spec[1];
        gx = (uint32_t)(groups < caps->max_workgroup_count[0] ? groups : caps->max_workgroup_count[0]);
        gy = (uint32_t)((groups + gx - 1) / gx);
    } else {
        snprintf(name, sizeof name, "mul_mm_%s", type_suffix(w->type));
        p = vk_pipeline_get(vb, name, 5, sizeof pc, NULL, 0);
        gx = (uint32_t)((N + MM_TILE - 1) / MM_TILE);
        gy = (uint32_t)((M + MM_TILE - 1) / MM_TILE);
    }
    if (!p) return WEFT_ERR_DEVICE; /* vk_pipeline_get set the message */
    return vk_dispatch(vb, p, binds, 5, &pc, sizeof pc, gx, gy, 1);
}

weft_status vk_op_matmul(struct vk_backend *vb, const struct weft_op *op)
{
    if (!vk_matmul_supports(vb, op))
        return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan MATMUL: weight type %s or view shapes not supported",
                          weft_type_name(op->u.matmul.w.type));
    const struct weft_op_matmul *m = &op->u.matmul;
    const size_t need = act_bytes(vb, m->w.type, m->x.ne1, m->w.ne0);
    struct weft_buffer *scratch = NULL;
    if (need) {
        weft_status st = vk_scratch(vb, need, &scratch);
        if (st != WEFT_OK) return st;
    }
    struct weft_view bias;
    return run_matmul(vb, &m->x, &m->w, &m->out, m->has_add ? &m->add : NULL, bias_row(m, &bias), m->x.ne1,
                      scratch, 0);
}

weft_status vk_op_logits(struct vk_backend *vb, const struct weft_op *op)
{
    if (!vk_matmul_supports(vb, op))
        return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan LOGITS: weight type %s or view shapes not supported",
                          weft_type_name(op->u.logits.w.type));
    const struct weft_op_logits *l = &op->u.logits;
    const int64_t n_out = l->rows.ne0, K = l->x.ne0;
    /* scratch: normed [n_out][K] f32, then its rounded copy; asked for at
     * once, as a larger request may replace the buffer */
    const size_t normed_bytes = align_up((size_t)n_out * (size_t)K * sizeof(float));
    struct weft_buffer *scratch = NULL;
    weft_status st = vk_scratch(vb, normed_bytes + act_bytes(vb, l->w.type, n_out, K), &scratch);
    if (st != WEFT_OK) return st;
    struct weft_view normed = weft_view_2d(scratch, 0, WEFT_TYPE_F32, K, n_out);
    struct weft_view rows = l->rows, g = l->norm_w;
    rows.ne1 = 1;
    g.ne0 = K;
    g.ne1 = 1;
    struct logits_norm_push pn = {
        .x_off = (uint32_t)(l->x.offset / 4), .x_stride = (uint32_t)(l->x.nb1 / 4), .x_rows = (uint32_t)l->x.ne1,
        .rows_off = (uint32_t)(l->rows.offset / 4), .g_off = (uint32_t)(l->norm_w.offset / 4),
        .o_off = 0, .o_stride = (uint32_t)K, .K = (uint32_t)K, .eps = l->eps,
    };
    struct vk_bind nb[4] = {bind_of(&l->x, false), bind_of(&rows, false), bind_of(&g, false), bind_of(&normed, true)};
    struct vk_pipeline *p = vk_pipeline_get(vb, vk_exact_ops(vb) ? "logits_norm_exact" : "logits_norm_std", 4, sizeof pn, NULL, 0);
    if (!p) return WEFT_ERR_DEVICE;
    st = vk_dispatch(vb, p, nb, 4, &pn, sizeof pn, (uint32_t)n_out, 1, 1);
    if (st != WEFT_OK) return st;
    struct weft_view out = l->out;
    out.ne1 = n_out;
    st = run_matmul(vb, &normed, &l->w, &out, NULL, NULL, n_out, scratch, normed_bytes);
    if (st != WEFT_OK || l->softcap == 0.0f) return st;
    /* api 6: soft-capped, in place (softcap.comp) */
    struct {
        uint32_t o_off, o_rs, ne0, ne1;
        float cap, inv;
    } pc = {(uint32_t)(out.offset / 4), (uint32_t)(out.nb1 / 4), (uint32_t)out.ne0, (uint32_t)n_out, l->softcap,
            1.0f / l->softcap};
    struct vk_pipeline *ps = vk_pipeline_get(vb, "softcap", 1, sizeof pc, NULL, 0);
    if (!ps) return WEFT_ERR_DEVICE;
    const struct vk_bind ob[1] = {bind_of(&out, true)};
    uint32_t gy = (uint32_t)(n_out < 65535 ? n_out : 65535);
    return vk_dispatch(vb, ps, ob, 1, &pc, sizeof pc, (uint32_t)((out.ne0 + 255) / 256), gy, 1);
}

/* ---- shared with vk_moe.c's MATMUL_ID (vk_internal.h) ---- */

const char *vk_mm_type_suffix(enum weft_type t) { return type_suffix(t); }
bool vk_mm_weight_ok(const struct vk_backend *vb, const struct weft_view *w) { return weight_ok(vb, w); }
bool vk_mm_addressable(const struct vk_backend *vb, const struct weft_view *v, size_t align)
{
    return addressable(vb, v, align);
}
bool vk_mm_has_block_sums(enum weft_type t) { return has_block_sums(t); }

size_t vk_mm_act_bytes(enum weft_type t, int64_t M, int64_t K)
{
    if (!act_variant(t)) return 0;
    size_t sums = has_block_sums(t) ? align_up((size_t)M * (size_t)(K / 32) * sizeof(float)) : 0;
    return align_up((size_t)M * (size_t)K * sizeof(float)) + sums;
}

weft_status vk_mm_round_activations(struct vk_backend *vb, const struct weft_view *w, struct weft_view *xv, int64_t M,
                                    struct weft_buffer *scratch, size_t xq_off, uint32_t *s_off)
{
    return round_activations(vb, w, xv, M, scratch, xq_off, s_off);
}

uint32_t vk_mm_mv_nr(const struct vk_backend *vb) { return mv_nr(vb); }
uint32_t vk_mm_matvec_threads(const struct vk_backend *vb, int64_t K) { return matvec_threads(vb, K); }
bool vk_mm_subgroup_reduce(const struct vk_backend *vb) { return subgroup_reduce(vb); }
