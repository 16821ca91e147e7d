/* MATMUL and LOGITS on the CPU: out[r][n] = (x[r] · W[n] (+ bias[n])) (+ add[r][n]).
 *
 * Activations are converted once per op to the weight type's vec_dot type
 * (Q8_0/Q8_1/Q8_K blocks, F16, BF16 or F32 — as ggml does), then each
 * thread takes a slice of the output columns (weight rows) and runs the
 * type's dot product against every activation row, so each weight row is
 * read from memory once per op. */
#include "backends/cpu/cpu_impl.h"
#include "base/quant.h"

#include <math.h>
#include <string.h>

#define COL_TILE 16      /* weight rows per tile: reused across all activation rows */
#define MAX_GROUP 4      /* matmuls sharing one input run as one job (q/k/v, gate/up) */
#define SMALL_ROWS 4     /* up to this many rows, every thread converts x itself */

/* One or more matmuls over the same activations x and the same weight type. */
struct mm_job {
    const struct weft_view *x;  /* NULL: rows are contiguous at xrows */
    const float *xrows;
    int64_t n_rows, K;
    int n_mm;
    const struct weft_view *w[MAX_GROUP], *out[MAX_GROUP], *add[MAX_GROUP];
    const float *bias[MAX_GROUP];  /* F32 per weight row, or NULL */
    size_t qrow_w[MAX_GROUP];    /* bytes of one weight row */
    int64_t tile_end[MAX_GROUP]; /* cumulative tile counts over the group */
    size_t qrow;                 /* bytes of one converted activation row */
    size_t xstride;              /* bytes per row in xq: qrow, then the packed kernels' aux */
    size_t auxoff;               /* where in a row of xq the aux bytes start (64-byte aligned) */
    const struct weft_cpu_packed *pk;  /* packed kernels for the group's packed matrices, or NULL */
    const struct weft_cpu_packed_w *wp[MAX_GROUP]; /* repacked copies (NULL: none) */
    uint8_t *xq;                 /* shared [n_rows][qrow], or per thread when private */
    uint8_t *xp;                 /* prefill on packed weights: units of pk->xrows rows (NULL: none) */
    size_t xp_unit;              /* bytes of one unit */
    bool private_x;              /* each thread converts x into xq + ith * n_rows * qrow */
    weft_cpu_quant_fn quant;     /* activations -> vec_dot type */
    weft_cpu_dot_fn dot;         /* in the float order ggml uses for this shape */
    weft_cpu_dot4_fn dot4;       /* same results, four weight rows at a time; may be NULL */
    weft_cpu_gemm_fn gemm;       /* same results, register-blocked over many rows; may be NULL */
};

static const float *x_row(const struct mm_job *j, int64_t r)
{
    return j->xrows ? j->xrows + r * j->K : cpu_row_f32(j->x, r);
}

/* activation row r into xq's row r: the vec_dot type, then the aux bytes */
static void mm_convert(const struct mm_job *j, int64_t r, uint8_t *xq)
{
    uint8_t *dst = xq + (size_t)r * j->xstride;
    j->quant(x_row(j, r), dst, j->K);
    if (j->pk && j->pk->aux && !j->xp) j->pk->aux(dst, j->K, dst + j->auxoff);  /* decode's aux */
}

static void mm_quantize(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    int64_t lo, hi;
    if (!j->xp) {
        cpu_split(j->n_rows, ith, nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) mm_convert(j, r, j->xq);
        return;
    }
    /* whole units per thread: a unit's rows are converted, then packed */
    const int xr = j->pk->xrows;
    cpu_split((j->n_rows + xr - 1) / xr, ith, nth, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        const int64_t r0 = u * xr, nr = j->n_rows - r0 < xr ? j->n_rows - r0 : xr;
        for (int64_t r = r0; r < r0 + nr; r++) mm_convert(j, r, j->xq);
        j->pk->xpack(j->xq + (size_t)r0 * j->xstride, j->xstride, (int)nr, j->K, j->xp + (size_t)u * j->xp_unit);
    }
}

/* out[i] = t[i] (+ bias[i]) (+ add[i]), i < n: a prefill tile's row into its
 * output; add is out itself (the residual, in place) or apart from it. Each
 * case its own loop, so the in-place one vectorizes too (a loop reading add
 * and writing out would take its scalar version when they coincide). */
static void tile_out(float *out, const float *t, const float *bias, const float *add, int n)
{
    if (add == out) {
        if (bias)
            for (int i = 0; i < n; i++) out[i] = (t[i] + bias[i]) + out[i];
        else
            for (int i = 0; i < n; i++) out[i] = t[i] + out[i];
    } else if (add) {
        if (bias)
            for (int i = 0; i < n; i++) out[i] = (t[i] + bias[i]) + add[i];
        else
            for (int i = 0; i < n; i++) out[i] = t[i] + add[i];
    } else if (bias) {
        for (int i = 0; i < n; i++) out[i] = t[i] + bias[i];
    } else {
        memcpy(out, t, (size_t)n * sizeof(float));
    }
}

static void mm_dot(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    const uint8_t *xq = j->xq;
    if (j->private_x) {  /* small batch: converting x is cheaper than a barrier */
        uint8_t *mine = j->xq + (size_t)ith * j->n_rows * j->xstride;
        for (int64_t r = 0; r < j->n_rows; r++) mm_convert(j, r, mine);
        xq = mine;
    }
    /* split the group's tiles (whole tiles, so threads never share a cache
     * line of out) evenly across threads */
    int64_t t0, t1;
    cpu_split(j->tile_end[j->n_mm - 1], ith, nth, &t0, &t1);
    const weft_cpu_dot_fn dot = j->dot;
    int g = 0;
    for (int64_t t = t0; t < t1; t++) {
        while (t >= j->tile_end[g]) g++;
        const struct weft_view *w = j->w[g];
        int64_t n0 = (t - (g ? j->tile_end[g - 1] : 0)) * COL_TILE, N = w->ne1;
        int64_t n1 = n0 + COL_TILE < N ? n0 + COL_TILE : N;
        const uint8_t *wbase = cpu_ptr(w);
        const float *bias = j->bias[g];
        const struct weft_cpu_packed_w *wp = j->wp[g];
        if (j->xp && wp && n1 <= wp->rows && (n1 - n0) % wp->pk->rows == 0) {
            /* prefill on the packed copy: whole groups (tiles start at
             * multiples of COL_TILE, a multiple of the group) */
            enum { RC = 64 };
            float tmp[RC * COL_TILE];
            const int G = wp->pk->rows, nw = (int)(n1 - n0);
            const uint8_t *wg = wp->data + (size_t)(n0 / G) * G * j->qrow_w[g];
            for (int64_t r0 = 0; r0 < j->n_rows; r0 += RC) {
                int nx = (int)(j->n_rows - r0 < RC ? j->n_rows - r0 : RC);
                wp->pk->gemmp(wg, nw / G, j->xp + (size_t)(r0 / wp->pk->xrows) * j->xp_unit, nx, j->K, tmp, COL_TILE);
                for (int x = 0; x < nx; x++)
                    tile_out(cpu_row_f32(j->out[g], r0 + x) + n0, tmp + x * COL_TILE, bias ? bias + n0 : NULL,
                             j->add[g] ? cpu_row_f32(j->add[g], r0 + x) + n0 : NULL, nw);
            }
            continue;
        }
        if (j->gemm) {
            /* prefill: one call per (tile, chunk of activation rows), into a
             * small buffer so a residual that aliases out can be added after */
            enum { RC = 64 };
            float tmp[RC * COL_TILE];
            int nw = (int)(n1 - n0);
            for (int64_t r0 = 0; r0 < j->n_rows; r0 += RC) {
                int nx = (int)(j->n_rows - r0 < RC ? j->n_rows - r0 : RC);
                j->gemm(wbase + (size_t)n0 * w->nb1, w->nb1, nw, xq + (size_t)r0 * j->xstride, j->xstride, nx, j->K,
                        tmp, COL_TILE);
                for (int x = 0; x < nx; x++)
                    tile_out(cpu_row_f32(j->out[g], r0 + x) + n0, tmp + x * COL_TILE, bias ? bias + n0 : NULL,
                             j->add[g] ? cpu_row_f32(j->add[g], r0 + x) + n0 : NULL, nw);
            }
            continue;
        }
        for (int64_t r = 0; r < j->n_rows; r++) {
            const uint8_t *xr = xq + (size_t)r * j->xstride;
            float *out = cpu_row_f32(j->out[g], r);
            const float *add = j->add[g] ? cpu_row_f32(j->add[g], r) : NULL;
            int64_t n = n0;
            if (wp && !j->xp) {
                /* tiles start at multiples of COL_TILE, a multiple of the group */
                const int G = wp->pk->rows;
                const size_t gbytes = (size_t)G * j->qrow_w[g];
                float v[COL_TILE];
                for (; n + G <= n1 && n + G <= wp->rows; n += G) {
                    wp->pk->dot(wp->data + (size_t)(n / G) * gbytes, xr, xr + j->auxoff, j->K, v);
                    for (int i = 0; i < G; i++) {
                        float vi = bias ? v[i] + bias[n + i] : v[i];
                        out[n + i] = add ? vi + add[n + i] : vi;
                    }
                }
            }
            if (j->dot4) {
                for (; n + 4 <= n1; n += 4) {
                    float v[4];
                    j->dot4(wbase + (size_t)n * w->nb1, w->nb1, xr, j->K, v);
                    for (int i = 0; i < 4; i++) {
                        float vi = bias ? v[i] + bias[n + i] : v[i];
                        out[n + i] = add ? vi + add[n + i] : vi;
                    }
                }
            }
            for (; n < n1; n++) {
                float v = dot(wbase + (size_t)n * w->nb1, xr, j->K);
                if (bias) v += bias[n];
                out[n] = add ? v + add[n] : v;
            }
        }
    }
}

/* Run n matmuls (same x rows, same weight type and shape class) as one job. */
/* x == NULL: the activation rows are contiguous F32 rows at the start of the
 * backend's scratch, and the job's own scratch starts at scratch_off. They
 * are addressed only after the scratch has grown to its final size (growing
 * moves it), never through a pointer taken before. */
static weft_status matmul_group(struct weft_cpu_backend *be, const struct weft_view *x, int64_t n_rows, int n,
                                const struct weft_view *const *w, const struct weft_view *const *out,
                                const struct weft_view *const *add, const struct weft_view *const *bias,
                                size_t scratch_off)
{
    if (n < 1 || n > MAX_GROUP) return weft_error(WEFT_ERR_INVALID_ARG, "cpu: matmul group of %d", n);
    struct mm_job j = {.x = x, .n_rows = n_rows, .K = w[0]->ne0, .n_mm = n};
    const struct weft_cpu_kernels *k = be->kern;
    enum weft_type wt = w[0]->type, vdt = weft_vec_dot_type(wt);
    int64_t tiles = 0;
    bool all_div4 = true;
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i];
        j.out[i] = out[i];
        j.add[i] = add[i];
        j.bias[i] = bias && bias[i] ? (const float *)cpu_ptr(bias[i]) : NULL;
        tiles += (w[i]->ne1 + COL_TILE - 1) / COL_TILE;
        j.tile_end[i] = tiles;
        all_div4 &= w[i]->ne1 % 4 == 0;
    }
    j.quant = k->quant[vdt];
    /* ggml takes llamafile's tinyBLAS path (another summation order) for
     * several activation rows when the shapes allow it; follow it */
    int mk = k->mm_k_multiple[wt];
    bool mm = k->dot_mm[wt] && n_rows >= 2 && all_div4 && mk && j.K % mk == 0;
    j.dot = mm ? k->dot_mm[wt] : k->dot[wt];
    j.dot4 = mm ? NULL : k->dot4[wt];
    j.gemm = n_rows < 8 ? NULL : mm ? k->gemm_mm[wt] : k->gemm[wt];
    j.qrow = weft_row_size(vdt, j.K);
    j.xstride = j.qrow;
    const struct weft_cpu_packed *pkt = &k->packed[wt];
    bool prefill_packed = false;
    if (!mm && n_rows >= 8 && pkt->gemmp) {
        /* prefill on the packed copies where every matrix of the group has
         * one (leftover rows past a copy, or a tile not of whole groups, take
         * the plain gemm / dot) */
        prefill_packed = true;
        for (int i = 0; i < n; i++) {
            j.qrow_w[i] = weft_row_size(wt, j.K);
            j.wp[i] = weft_cpu_packed_find(w[i]);
            if (!j.wp[i] || j.wp[i]->pk != pkt || COL_TILE % pkt->rows) prefill_packed = false;
        }
        if (!prefill_packed)
            for (int i = 0; i < n; i++) j.wp[i] = NULL;
        else
            j.pk = pkt;
    }
    if (!j.gemm && !mm && !prefill_packed) {
        /* few rows: stream the repacked copies where there are any */
        for (int i = 0; i < n; i++) {
            j.qrow_w[i] = weft_row_size(wt, j.K);
            j.wp[i] = weft_cpu_packed_find(w[i]);
            if (j.wp[i] && COL_TILE % j.wp[i]->pk->rows) j.wp[i] = NULL;
            if (j.wp[i] && j.pk && j.wp[i]->pk != j.pk) j.wp[i] = NULL; /* one aux form per job */
            if (j.wp[i]) j.pk = j.wp[i]->pk;
        }
        if (j.pk && j.pk->aux_size) {
            j.auxoff = (j.qrow + 63) & ~(size_t)63;
            j.xstride = (j.auxoff + j.pk->aux_size(j.K) + 63) & ~(size_t)63;
        }
    }
    int nth = weft_cpu_pool_threads(be->pool);
    j.private_x = n_rows <= SMALL_ROWS && nth > 1;
    size_t need = (size_t)n_rows * j.xstride * (j.private_x ? (size_t)nth : 1), xp_off = 0;
    if (prefill_packed) {
        j.xp_unit = pkt->xp_size(j.K);
        xp_off = (need + 63) & ~(size_t)63;
        need = xp_off + (size_t)((n_rows + pkt->xrows - 1) / pkt->xrows) * j.xp_unit;
    }
    weft_status st = weft_cpu_scratch(be, scratch_off + need + 64);
    if (st != WEFT_OK) return st;
    if (!x) j.xrows = (const float *)be->scratch;
    j.xq = be->scratch + scratch_off;
    if (prefill_packed) j.xp = j.xq + xp_off;
    if (!j.private_x) weft_cpu_pool_run(be->pool, mm_quantize, &j);
    weft_cpu_pool_run(be->pool, mm_dot, &j);
    return WEFT_OK;
}

static bool same_view(const struct weft_view *a, const struct weft_view *b)
{
    return a->buf == b->buf && a->offset == b->offset && a->ne0 == b->ne0 && a->ne1 == b->ne1 && a->nb1 == b->nb1;
}

static bool overlaps(const struct weft_view *a, const struct weft_view *b)
{
    if (a->buf != b->buf) return false;
    size_t a1 = a->offset + (size_t)a->ne1 * a->nb1, b1 = b->offset + (size_t)b->ne1 * b->nb1;
    return a->offset < b1 && b->offset < a1;
}

int weft_cpu_matmul_groupable(const struct weft_op *ops, size_t n)
{
    const struct weft_op_matmul *m0 = &ops[0].u.matmul;
    int g = 1;
    while ((size_t)g < n && g < MAX_GROUP && ops[g].kind == WEFT_OP_MATMUL) {
        const struct weft_op_matmul *m = &ops[g].u.matmul;
        if (!same_view(&m->x, &m0->x) || m->w.type != m0->w.type || m->w.ne0 != m0->w.ne0) break;
        /* ggml decides tinyBLAS's order per matmul (its rows a multiple of 4): a group shares one
         * decision (matmul_group's all_div4), so a matrix that would decide otherwise starts
         * another (Qwen3-Next's 2-row ssm_ba parts after its qkv and z) */
        if ((m->w.ne1 % 4 == 0) != (m0->w.ne1 % 4 == 0)) break;
        /* no earlier output of the group may feed (or alias) this one */
        bool dep = false;
        for (int i = 0; i <= g; i++) {
            const struct weft_op_matmul *p = &ops[i].u.matmul;
            if (overlaps(&p->out, &m->x) || (i < g && (overlaps(&p->out, &m->out) || (m->has_add && overlaps(&p->out, &m->add)))))
                dep = true;
        }
        if (dep) break;
        g++;
    }
    return g;
}

weft_status weft_cpu_matmul(struct weft_cpu_backend *be, const struct weft_op *ops, int n)
{
    const struct weft_view *w[MAX_GROUP], *out[MAX_GROUP], *add[MAX_GROUP], *bias[MAX_GROUP];
    for (int i = 0; i < n; i++) {
        w[i] = &ops[i].u.matmul.w;
        out[i] = &ops[i].u.matmul.out;
        add[i] = ops[i].u.matmul.has_add ? &ops[i].u.matmul.add : NULL;
        bias[i] = ops[i].u.matmul.has_bias ? &ops[i].u.matmul.bias : NULL;
    }
    const struct weft_view *x = &ops[0].u.matmul.x;
    return matmul_group(be, x, x->ne1, n, w, out, add, bias, 0);
}

/* ggml's RMS_NORM scale (float squares summed in double); defined in
 * ops/ops_elementwise.c, shared so the final norm rounds exactly as the per-layer ones. */
float weft_cpu_rms_scale(const float *x, int64_t n, float eps);

/* LOGITS: gather the requested rows, RMS-normalise them into scratch, then
 * multiply by the output head. Only these rows pay for the (large) lm_head. */
weft_status weft_cpu_logits(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_view *x = &op->u.logits.x, *rows = &op->u.logits.rows;
    int64_t n_out = rows->ne0, K = x->ne0;
    size_t normed_bytes = ((size_t)n_out * K * sizeof(float) + 63) & ~(size_t)63;
    weft_status st = weft_cpu_scratch(be, normed_bytes);
    if (st != WEFT_OK) return st;
    float *normed = (float *)be->scratch;
    const int32_t *idx = (const int32_t *)cpu_ptr(rows);
    const float *g = (const float *)cpu_ptr(&op->u.logits.norm_w);
    for (int64_t i = 0; i < n_out; i++) {
        if (idx[i] < 0 || idx[i] >= x->ne1)
            return weft_error(WEFT_ERR_INVALID_ARG, "cpu: logits row %d outside [0, %lld)", idx[i],
                              (long long)x->ne1);
        const float *src = cpu_row_f32(x, idx[i]);
        float scale = weft_cpu_rms_scale(src, K, op->u.logits.eps);
        for (int64_t k = 0; k < K; k++) normed[i * K + k] = src[k] * scale * g[k];
    }
    const struct weft_view *w = &op->u.logits.w, *out = &op->u.logits.out, *add = NULL;
    /* normed stays at the start of scratch; matmul_group may grow (move) it */
    st = matmul_group(be, NULL, n_out, 1, &w, &out, &add, NULL, normed_bytes);
    const float cap = op->u.logits.softcap;
    if (st != WEFT_OK || cap == 0.0f) return st;
    /* soft-capped: tanh(l · (1/c)) · c, as llama.cpp's scale, tanh, scale */
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n_out; i++) {
        float *l = cpu_row_f32(out, i);
        for (int64_t v = 0; v < out->ne0; v++) l[v] = tanhf(l[v] * inv) * cap;
    }
    return WEFT_OK;
}
