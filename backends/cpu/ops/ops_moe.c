/* MOE_ROUTE and MATMUL_ID on the CPU (the ops are described in backends/backend.h).
 *
 * MATMUL_ID converts each activation row once to the weight type's vec_dot
 * type, sorts the step's (row, slot) pairs by expert, and splits the work as
 * (expert, tile of 16 weight rows) items over the threads: a tile of an expert
 * is read once and dotted with every row that chose the expert, and an expert
 * no row chose is never touched. Dots are the single-row kernels (ggml's
 * mul_mat_id calls vec_dot for every shape). */
#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/cpu_expf.h"
#include "backends/cpu/cpu_ref.h"
#include "base/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COL_TILE 16
#define GEMM_MIN_SLOTS 8   /* an expert chosen by this many rows takes the gemm tiles (as MATMUL) */


/* ggml's soft_max of n values in place (AVX-512 build): max; y = exp(x - max), 16 at a time
 * with ggml_v_expf's polynomial (each chunk's sum reduced, then added in double), the rest
 * with libm's expf added in double; then y *= (float)(1 / sum) */
static void softmax_ggml(float *y, const float *x, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    double sum = 0.0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; l++) y[i + l] = weft_cpu_expf(x[i + l] - max);
        sum += (double)weft_cpu_reduce_add_16(y + i);
    }
    for (; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += (double)y[i];
    }
    const float s = (float)(1.0 / sum);
    for (i = 0; i < n; i++) y[i] *= s;
}

/* expert groups (backend.h, api 8): a group's score is the sum of its two largest choice
 * values (a NaN never one of them); the experts of all but the group_used best groups (equal:
 * the lower group) are marked taken, so the top k never picks them */
static float moe_mask_groups(const float *sel, int E, uint32_t n_group, uint32_t used, uint8_t *taken)
{
    const int G = E / (int)n_group;
    float score[WEFT_MOE_MAX_GROUPS];
    uint8_t kept[WEFT_MOE_MAX_GROUPS] = {0};
    for (uint32_t g = 0; g < n_group; g++) {
        float a = -INFINITY, b = -INFINITY;
        for (int e = (int)g * G; e < (int)(g + 1) * G; e++) {
            if (sel[e] > a) {
                b = a;
                a = sel[e];
            } else if (sel[e] > b) {
                b = sel[e];
            }
        }
        score[g] = a + b;
    }
    float last = 0;
    for (uint32_t j = 0; j < used; j++) {
        int best = -1;
        for (uint32_t g = 0; g < n_group; g++)
            if (!kept[g] && (best < 0 || score[g] > score[best])) best = (int)g;
        kept[best] = 1;
        last = score[best];
    }
    for (int e = 0; e < E; e++) taken[e] = !kept[e / G];
    float margin = INFINITY;  /* the choice's margin (weft_cpu_route_margin) */
    for (uint32_t g = 0; g < n_group; g++)
        if (!kept[g] && last - score[g] < margin) margin = last - score[g];
    return margin;
}

weft_status weft_cpu_moe_route(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_op_moe_route *m = &op->u.moe_route;
    const int E = (int)m->logits.ne0, K = (int)m->k;
    const float *bias = m->has_bias ? (const float *)cpu_ptr(&m->bias) : NULL;
    const float *escale = m->has_expert_scale ? (const float *)cpu_ptr(&m->expert_scale) : NULL;
    float p[WEFT_CPU_MAX_EXPERTS], sel[WEFT_CPU_MAX_EXPERTS], chosen[WEFT_CPU_MAX_EXPERTS];
    for (int64_t r = 0; r < m->logits.ne1; r++) {
        const float *l = cpu_row_f32(&m->logits, r);
        int32_t *ids = (int32_t *)(cpu_ptr(&m->ids) + (size_t)r * m->ids.nb1);
        float *w = cpu_row_f32(&m->weights, r);
        if (m->gating == WEFT_MOE_SIGMOID)
            for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-l[e]));
        else
            softmax_ggml(p, l, E);
        for (int e = 0; e < E; e++) sel[e] = bias ? p[e] + bias[e] : p[e];
        /* top-k, best first; a NaN never wins; equal values: the lower expert */
        uint8_t taken[WEFT_CPU_MAX_EXPERTS] = {0};
        float margin = INFINITY;
        if (m->n_group > 1) margin = moe_mask_groups(sel, E, m->n_group, m->group_used, taken);
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || sel[e] > sel[best])) best = e;
            taken[best] = 1;
            ids[j] = best;
        }
        for (int e = 0; e < E; e++)
            if (!taken[e] && sel[ids[K - 1]] - sel[e] < margin) margin = sel[ids[K - 1]] - sel[e];
        if (!be->route_seen || margin < be->route_margin) be->route_margin = margin;
        be->route_seen = true;
        if (m->gating == WEFT_MOE_SOFTMAX_TOPK) {
            for (int j = 0; j < K; j++) chosen[j] = l[ids[j]];
            softmax_ggml(w, chosen, K);
        } else {
            for (int j = 0; j < K; j++) w[j] = p[ids[j]];
        }
        if (m->norm) {
            double s = 0.0;
            for (int j = 0; j < K; j++) s += (double)w[j];
            float sum = (float)s;
            if (!(sum >= 6.103515625e-5f)) sum = 6.103515625e-5f;
            for (int j = 0; j < K; j++) w[j] = w[j] / sum;
        }
        if (m->scale != 0.0f)
            for (int j = 0; j < K; j++) w[j] = w[j] * m->scale;
        if (escale)
            for (int j = 0; j < K; j++) w[j] = w[j] * escale[ids[j]];
    }
    return WEFT_OK;
}

struct mid_job {
    const struct weft_op_matmul_id *m;
    int64_t rows, k, N, K, n_xrows;
    size_t qrow;
    uint8_t *xq;               /* [n_xrows][qrow] */
    int32_t *order;            /* slots sorted by expert */
    int32_t *start;            /* [n_expert + 1]: expert e's slots are order[start[e] .. start[e+1]) */
    int32_t *used;             /* the experts some slot chose, ascending */
    int n_used;
    float *y;                  /* [rows * k][N] when the slots are summed; else NULL (out directly) */
    const float *bias;
    weft_cpu_quant_fn quant;
    weft_cpu_dot_fn dot;
    weft_cpu_dot4_fn dot4;
    weft_cpu_gemm_fn gemm;     /* the register-blocked form of dot (NULL: none) */
    const struct weft_cpu_packed_w *wp; /* the experts' repacked decode copy (weight_prepare), or NULL */
    size_t auxoff, qrow_w;     /* where a converted row's aux bytes start (wp's); a weight row's bytes */
    uint8_t *xg;               /* with gemm: the slots' converted rows in expert order ([n_slots][qrow]) */
    bool gemmp;                /* with gemm: the packed copy's prefill (wp->pk->gemmp, one row per unit): xg
                                * holds the slots' units ([n_slots][xp_bytes]) instead */
    size_t xp_bytes;
};

static const float *mid_x_row(const struct mid_job *j, int64_t xr) { return cpu_row_f32(&j->m->x, xr); }

static void mid_quantize(void *ctx, int ith, int nth)
{
    struct mid_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n_xrows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        uint8_t *dst = j->xq + (size_t)r * j->qrow;
        j->quant(mid_x_row(j, r), dst, j->K);
        if (j->wp && j->wp->pk->aux) j->wp->pk->aux(dst, j->K, dst + j->auxoff);
    }
}

/* with gemm: each slot's converted row, copied in expert order (an expert's slots one run) */
static void mid_gather(void *ctx, int ith, int nth)
{
    struct mid_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->rows * j->k, ith, nth, &lo, &hi);
    for (int64_t s = lo; s < hi; s++) {
        const int64_t slot = j->order[s], xr = j->m->x_per_slot ? slot : slot / j->k;
        if (j->gemmp)
            j->wp->pk->xpack(j->xq + (size_t)xr * j->qrow, j->qrow, 1, j->K, j->xg + (size_t)s * j->xp_bytes);
        else
            memcpy(j->xg + (size_t)s * j->qrow, j->xq + (size_t)xr * j->qrow, j->qrow);
    }
}

static float *mid_out_row(const struct mid_job *j, int64_t slot)
{
    return j->y ? j->y + (size_t)slot * (size_t)j->N : cpu_row_f32(&j->m->out, slot);
}

static void mid_dot(void *ctx, int ith, int nth)
{
    struct mid_job *j = ctx;
    const struct weft_view *w = &j->m->w;
    const int64_t tiles = (j->N + COL_TILE - 1) / COL_TILE;
    int64_t i0, i1;
    cpu_split((int64_t)j->n_used * tiles, ith, nth, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
        const int e = j->used[it / tiles];
        const int64_t n0 = (it % tiles) * COL_TILE, n1 = n0 + COL_TILE < j->N ? n0 + COL_TILE : j->N;
        const uint8_t *we = cpu_ptr(w) + (size_t)e * (size_t)j->N * w->nb1;
        const float *bias = j->bias ? j->bias + (size_t)e * (size_t)j->N : NULL;
        int32_t s = j->start[e];
        if ((j->gemm || j->gemmp) && j->start[e + 1] - s >= GEMM_MIN_SLOTS) {
            /* many slots: register-blocked tiles over the expert's run of rows (bit for bit
             * the dot's), out through a small buffer */
            enum { RC = 64 };
            float tmp[RC * COL_TILE];
            const int nw = (int)(n1 - n0);
            const int64_t row0 = (int64_t)e * j->N + n0;
            const bool packed = j->gemmp && nw == COL_TILE && row0 + nw <= j->wp->rows;
            for (; s < j->start[e + 1]; s += RC) {
                const int nx = j->start[e + 1] - s < RC ? j->start[e + 1] - s : RC;
                if (packed)  /* the tile's groups of the packed copy */
                    j->wp->pk->gemmp(j->wp->data + (size_t)row0 * j->qrow_w, COL_TILE / j->wp->pk->rows,
                                     j->xg + (size_t)s * j->xp_bytes, nx, j->K, tmp, COL_TILE);
                else if (j->gemmp)  /* a partial tile: one dot per output */
                    for (int x = 0; x < nx; x++) {
                        const int64_t slot = j->order[s + x], xr = j->m->x_per_slot ? slot : slot / j->k;
                        for (int i = 0; i < nw; i++)
                            tmp[x * COL_TILE + i] =
                                j->dot(we + (size_t)(n0 + i) * w->nb1, j->xq + (size_t)xr * j->qrow, j->K);
                    }
                else
                    j->gemm(we + (size_t)n0 * w->nb1, w->nb1, nw, j->xg + (size_t)s * j->qrow, j->qrow, nx, j->K, tmp,
                            COL_TILE);
                for (int x = 0; x < nx; x++) {
                    float *out = mid_out_row(j, j->order[s + x]);
                    for (int i = 0; i < nw; i++)
                        out[n0 + i] = bias ? tmp[x * COL_TILE + i] + bias[n0 + i] : tmp[x * COL_TILE + i];
                }
            }
            continue;
        }
        for (; s < j->start[e + 1]; s++) {
            const int64_t slot = j->order[s];
            const int64_t xr = j->m->x_per_slot ? slot : slot / j->k;
            const uint8_t *xq = j->xq + (size_t)xr * j->qrow;
            float *out = mid_out_row(j, slot);
            int64_t n = n0;
            if (j->wp) {
                /* the repacked groups of this expert's rows (a tile is whole groups) */
                const int G = j->wp->pk->rows;
                const int64_t row0 = (int64_t)e * j->N;
                for (; n + G <= n1 && row0 + n + G <= j->wp->rows; n += G)
                    j->wp->pk->dot(j->wp->data + (size_t)((row0 + n) / G) * G * j->qrow_w, xq, xq + j->auxoff, j->K,
                                   out + n);
            }
            if (j->dot4)
                for (; n + 4 <= n1; n += 4) j->dot4(we + (size_t)n * w->nb1, w->nb1, xq, j->K, out + n);
            for (; n < n1; n++) out[n] = j->dot(we + (size_t)n * w->nb1, xq, j->K);
            if (bias)
                for (n = n0; n < n1; n++) out[n] += bias[n];
        }
    }
}

/* out[r] = ((w0 · y0 + w1 · y1) + ...) (+ add[r]) */
static void mid_sum(void *ctx, int ith, int nth)
{
    struct mid_job *j = ctx;
    const struct weft_op_matmul_id *m = j->m;
    int64_t lo, hi;
    cpu_split(j->rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *wt = cpu_row_f32(&m->weights, r);
        const float *add = m->has_add ? cpu_row_f32(&m->add, r) : NULL;
        float *out = cpu_row_f32(&m->out, r);
        for (int64_t n = 0; n < j->N; n++) {
            float s = wt[0] * j->y[(size_t)(r * j->k) * (size_t)j->N + (size_t)n];
            for (int64_t q = 1; q < j->k; q++) s = s + wt[q] * j->y[(size_t)(r * j->k + q) * (size_t)j->N + (size_t)n];
            out[n] = add ? s + add[n] : s;
        }
    }
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

weft_status weft_cpu_matmul_id(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_op_matmul_id *m = &op->u.matmul_id;
    struct mid_job j = {.m = m, .rows = m->ids.ne1, .k = m->ids.ne0, .K = m->w.ne0};
    const int E = (int)m->n_expert;
    j.N = m->w.ne1 / E;
    j.n_xrows = m->x_per_slot ? j.rows * j.k : j.rows;
    const struct weft_cpu_kernels *kt = be->kern;
    const enum weft_type wt = m->w.type, vdt = weft_vec_dot_type(wt);
    j.quant = kt->quant[vdt];
    j.dot = kt->dot[wt];
    j.dot4 = kt->dot4[wt];
    j.gemm = kt->gemm[wt];
    j.qrow = align64(weft_row_size(vdt, j.K));
    j.qrow_w = weft_row_size(wt, j.K);
    /* decode: the experts' repacked copy where the table has one and groups fit the tiles
     * and the experts' boundaries */
    j.wp = weft_cpu_packed_find(&m->w);
    if (j.wp && (COL_TILE % j.wp->pk->rows || j.N % j.wp->pk->rows || j.wp->pk != &kt->packed[wt])) j.wp = NULL;
    if (j.wp && j.wp->pk->aux_size) {
        j.auxoff = j.qrow;
        j.qrow = align64(j.auxoff + j.wp->pk->aux_size(j.K));
    }
    j.bias = m->has_bias ? (const float *)cpu_ptr(&m->bias) : NULL;
    const size_t n_slots = (size_t)(j.rows * j.k);
    const size_t xq_bytes = (size_t)j.n_xrows * j.qrow, idx_bytes = align64(sizeof(int32_t) * (n_slots + 2 * (size_t)E + 1));
    const size_t y_bytes = m->has_weights ? sizeof(float) * n_slots * (size_t)j.N : 0;
    /* the gemm tiles pay where experts have several rows each (prefill) */
    const bool tiles = n_slots >= (size_t)GEMM_MIN_SLOTS * 2;
    if (!tiles) j.gemm = NULL;
    /* the packed copy's own prefill where it has one of single-row units (it reads the copy decode
     * streams, in fewer instructions: Q4_K 2x the plain tile; Q6_K has no plain tile) */
    if (tiles && j.wp && j.wp->pk->gemmp && j.wp->pk->xrows == 1) {
        j.gemmp = true;
        j.xp_bytes = j.wp->pk->xp_size(j.K);  /* units back to back, as gemmp reads them */
    }
    const size_t xg_bytes = j.gemm || j.gemmp ? n_slots * (j.gemmp ? j.xp_bytes : j.qrow) : 0;
    weft_status st = weft_cpu_scratch(be, xq_bytes + idx_bytes + y_bytes + xg_bytes);
    if (st != WEFT_OK) return st;
    j.xq = be->scratch;
    j.order = (int32_t *)(be->scratch + xq_bytes);
    j.start = j.order + n_slots;
    j.used = j.start + E + 1;
    j.y = m->has_weights ? (float *)(be->scratch + xq_bytes + idx_bytes) : NULL;
    j.xg = j.gemm || j.gemmp ? be->scratch + xq_bytes + idx_bytes + y_bytes : NULL;
    /* counting sort of the slots by expert (slot order kept within an expert) */
    memset(j.start, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t r = 0; r < j.rows; r++) {
        const int32_t *ids = (const int32_t *)(cpu_ptr(&m->ids) + (size_t)r * m->ids.nb1);
        for (int64_t q = 0; q < j.k; q++) {
            if (ids[q] < 0 || ids[q] >= E)
                return weft_error(WEFT_ERR_INVALID_ARG, "cpu: matmul_id: row %lld chose expert %d of %d", (long long)r,
                                  ids[q], E);
            j.start[ids[q] + 1]++;
        }
    }
    for (int e = 0; e < E; e++) {
        if (j.start[e + 1]) j.used[j.n_used++] = e;
        j.start[e + 1] += j.start[e];
    }
    {
        /* place the slots: start[e] runs as expert e's cursor, ending at e's end */
        for (int64_t r = 0; r < j.rows; r++) {
            const int32_t *ids = (const int32_t *)(cpu_ptr(&m->ids) + (size_t)r * m->ids.nb1);
            for (int64_t q = 0; q < j.k; q++) j.order[j.start[ids[q]]++] = (int32_t)(r * j.k + q);
        }
        /* start[e] now holds where e's run ends (e + 1's start): shift back */
        for (int e = E; e > 0; e--) j.start[e] = j.start[e - 1];
        j.start[0] = 0;
    }
    be->expert_passes += (uint64_t)j.n_used;
    weft_cpu_pool_run(be->pool, mid_quantize, &j);
    if (j.gemm || j.gemmp) weft_cpu_pool_run(be->pool, mid_gather, &j);
    weft_cpu_pool_run(be->pool, mid_dot, &j);
    if (m->has_weights) weft_cpu_pool_run(be->pool, mid_sum, &j);
    return WEFT_OK;
}

float weft_cpu_route_margin(struct weft_backend *b)
{
    if (!b || strcmp(b->iface->name, "cpu")) return INFINITY;
    struct weft_cpu_backend *be = (struct weft_cpu_backend *)b;
    const float m = be->route_seen ? be->route_margin : INFINITY;
    be->route_seen = false;
    return m;
}

uint64_t weft_cpu_expert_passes(struct weft_backend *b)
{
    return b && !strcmp(b->iface->name, "cpu") ? ((struct weft_cpu_backend *)b)->expert_passes : 0;
}
