/* Mixtures of experts (api 7, backends/backend.h): MOE_ROUTE and MATMUL_ID.
 *
 * MOE_ROUTE: one work-item per row, in the CPU's float order
 * (backends/cpu/ops/ops_moe.c): softmax_ggml's max, exps and sum, the top k
 * by repeated scans (equal values: the lower expert; a NaN as the CPU's
 * comparisons take it), the weights renormalised and scaled (then, api 10,
 * each times its expert's expert_scale when has_es). The softmax's
 * values are formed again where needed instead of kept (n_expert up to
 * MOE_MAX_E, too many for private memory): the same operations give the
 * same bits.
 *
 * MATMUL_ID: moe_sort groups the step's (row, slot) pairs by expert on the
 * device (the ids come from a MOE_ROUTE queued before: nothing is read
 * back), then one of the dot kernels runs work-groups over (weight rows,
 * the j-th expert some slot chose): a group past the chosen experts returns
 * at once, so an unchosen expert's bytes are never loaded, and each chosen
 * expert's rows are dotted with every slot that chose it in the one group.
 * The weighted form writes each slot's output to a scratch (ld N) and
 * moe_sum adds them up in slot order, then the residual.
 *
 * moe_sort's index buffer (ints): [0, E]: start[e] (expert e's slots are
 * order[start[e] .. start[e + 1])); [E + 1]: how many experts were chosen;
 * [E + 2, 2E + 2): those experts, ascending; [2E + 2, + rows * k): order,
 * the slots (r * k + j) grouped by expert. MOE_MAX_E (the host's
 * OCL_MAX_EXPERTS, a multiple of 32) bounds n_expert. */

#ifdef WEFT_F64
#define MOE_SUM double
#define MOE_ONE 1.0
#else
#define MOE_SUM float
#define MOE_ONE 1.0f
#endif

/* softmax_ggml's max and (float)(1 / sum) over n values: exps 16 at a time
 * through ggml's polynomial (each chunk reduced as _mm512_reduce_add_ps,
 * then added in double), the rest through libm's expf added in double */
inline void sm_stats(global const float *l, int n, float *max_out, float *s_out)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = max > l[i] ? max : l[i];
    MOE_SUM sum = 0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        float t[16];
        for (int j = 0; j < 16; j++) t[j] = expf_poly(l[i + j] - max);
        sum += (MOE_SUM)reduce16(t);
    }
    for (; i < n; i++) sum += (MOE_SUM)expf_libm(l[i] - max);
    *max_out = max;
    *s_out = (float)(MOE_ONE / sum);
}

/* p of expert e: sigmoid (gating 1) or softmax_ggml's value (max and s from sm_stats) */
inline float route_p(global const float *l, int e, int n, int gating, float max, float s)
{
    if (gating == 1) return 1.0f / (1.0f + expf_libm(-l[e]));
    const float y = e < (n & ~15) ? expf_poly(l[e] - max) : expf_libm(l[e] - max);
    return y * s;
}

/* softmax_ggml of n values in place */
inline void sm_inplace(global float *y, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = max > y[i] ? max : y[i];
    MOE_SUM sum = 0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        float t[16];
        for (int j = 0; j < 16; j++) y[i + j] = t[j] = expf_poly(y[i + j] - max);
        sum += (MOE_SUM)reduce16(t);
    }
    for (; i < n; i++) {
        y[i] = expf_libm(y[i] - max);
        sum += (MOE_SUM)y[i];
    }
    const float s = (float)(MOE_ONE / sum);
    for (i = 0; i < n; i++) y[i] *= s;
}

/* global (rows): ids[r][0..k) and weights[r][0..k) from logits[r][0..E) */
kernel void moe_route(global const uchar *lb, ulong l_off, ulong l_ld, global uchar *ib, ulong i_off, ulong i_ld,
                      global uchar *wb, ulong w_off, ulong w_ld, global const uchar *bb, ulong b_off, int has_bias,
                      int E, int k, int gating, int norm, float scale, int rows, int n_group, int group_used,
                      global const uchar *esb, ulong es_off, int has_es)
{
    const int r = get_global_id(0);
    if (r >= rows) return;
    global const float *l = F32P(lb, l_off) + (ulong)r * l_ld;
    global int *ids = (global int *)(ib + i_off) + (ulong)r * i_ld;
    global float *w = F32P(wb, w_off) + (ulong)r * w_ld;
    global const float *bias = F32P(bb, b_off);
    float max = 0.0f, s = 0.0f;
    if (gating != 1) sm_stats(l, E, &max, &s);
    uint taken[MOE_MAX_E / 32];
    for (int i = 0; i < MOE_MAX_E / 32; i++) taken[i] = 0;
    if (n_group > 1) {  /* expert groups: the sum of a group's two best choice values; the best group_used kept */
        const int G = E / n_group;
        float gsc[64];
        ulong kept = 0;
        for (int q = 0; q < n_group; q++) {
            float a = -INFINITY, b = -INFINITY;
            for (int e = q * G; e < (q + 1) * G; e++) {
                float v = route_p(l, e, E, gating, max, s);
                if (has_bias) v = v + bias[e];
                if (v > a) {
                    b = a;
                    a = v;
                } else if (v > b) {
                    b = v;
                }
            }
            gsc[q] = a + b;
        }
        for (int j = 0; j < group_used; j++) {
            int best = -1;
            for (int q = 0; q < n_group; q++)
                if (!((kept >> q) & 1) && (best < 0 || gsc[q] > gsc[best])) best = q;
            kept |= (ulong)1 << best;
        }
        for (int e = 0; e < E; e++)
            if (!((kept >> (e / G)) & 1)) taken[e >> 5] |= 1u << (e & 31);
    }
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0.0f;
        for (int e = 0; e < E; e++) {
            if (taken[e >> 5] & (1u << (e & 31))) continue;
            float v = route_p(l, e, E, gating, max, s);
            if (has_bias) v = v + bias[e];
            if (best < 0 || v > bv) {
                best = e;
                bv = v;
            }
        }
        taken[best >> 5] |= 1u << (best & 31);
        ids[j] = best;
    }
    if (gating == 2) {  /* SOFTMAX_TOPK: the softmax of the chosen logits */
        for (int j = 0; j < k; j++) w[j] = l[ids[j]];
        sm_inplace(w, k);
    } else {
        for (int j = 0; j < k; j++) w[j] = route_p(l, ids[j], E, gating, max, s);
    }
    if (norm) {
        MOE_SUM t = 0;
        for (int j = 0; j < k; j++) t += (MOE_SUM)w[j];
        float sum = (float)t;
        if (!(sum >= 6.103515625e-5f)) sum = 6.103515625e-5f;
        for (int j = 0; j < k; j++) w[j] = w[j] / sum;
    }
    if (scale != 0.0f)
        for (int j = 0; j < k; j++) w[j] = w[j] * scale;
    if (has_es) {
        global const float *es = F32P(esb, es_off);
        for (int j = 0; j < k; j++) w[j] = w[j] * es[ids[j]];
    }
}

/* The index buffer from ids ([rows, k], row stride i_ld ints): one
 * work-group of 256. An id outside [0, E) is flagged (the error word's 5)
 * and left out. */
kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void moe_sort(global const uchar *ib, ulong i_off, ulong i_ld, int rows, int k, int E, global int *idx,
              global int *err)
{
    local int cnt[MOE_MAX_E + 1];
    const int lid = get_local_id(0), slots = rows * k;
    global const int *ids = (global const int *)(ib + i_off);
    for (int e = lid; e <= E; e += 256) cnt[e] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lid; s < slots; s += 256) {
        const int id = ids[(ulong)(s / k) * i_ld + s % k];
        if (id >= 0 && id < E) atomic_inc(&cnt[id]);
        else FLAG_ERROR(err, 5);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        int at = 0, nu = 0;
        for (int e = 0; e < E; e++) {
            const int c = cnt[e];
            idx[e] = at;
            if (c) idx[E + 2 + nu++] = e;
            cnt[e] = at;  /* from here expert e's cursor */
            at += c;
        }
        idx[E] = at;
        idx[E + 1] = nu;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lid; s < slots; s += 256) {
        const int id = ids[(ulong)(s / k) * i_ld + s % k];
        if (id >= 0 && id < E) idx[2 * E + 2 + atomic_inc(&cnt[id])] = s;
    }
}

/* The j-th chosen expert and its slots' range in order; false past the chosen ones */
inline bool id_expert(global const int *idx, int E, int j, int *e, int *s0, int *s1)
{
    if (j >= idx[E + 1]) return false;
    *e = idx[E + 2 + j];
    *s0 = idx[*e];
    *s1 = idx[*e + 1];
    return true;
}

/* slot s's activation row: its own (x_per_slot) or its row's */
#define XROW(s) (x_per_slot ? (s) : (s) / topk)

/* Every dot kernel writes y[slot] = x_slot · W_e[n] (+ bias[e * N + n]) to
 * row slot of o and takes the same arguments. */
#define MM_ID_ARGS                                                                                                    \
    global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *x, ulong x_off, ulong x_ld,      \
        global uchar *o, ulong o_off, ulong o_ld, global const uchar *bias_b, ulong bias_off, int has_bias,           \
        global const int *idx, int E, int topk, int x_per_slot, int K, int N

/* mm_vec's form (decode): a work-group of MM_WG per (weight row n, chosen
 * expert), the expert's slots MM_VEC_ROWS at a time. global (MM_WG * N, experts) */
kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1)))
void mm_id_vec(MM_ID_ARGS)
{
    const int n = get_group_id(0), lid = get_local_id(0);
    int e, s0, s1;
    if (!id_expert(idx, E, get_group_id(1), &e, &s0, &s1)) return;
    global const int *order = idx + 2 * E + 2;
    global const uchar *row = w + w_off + ((ulong)e * N + n) * w_nb1;
    local float red[MM_VEC_ROWS][MM_WG];
    for (int c0 = s0; c0 < s1; c0 += MM_VEC_ROWS) {
        const int nr = min(MM_VEC_ROWS, s1 - c0);
        global const float *xr[MM_VEC_ROWS];
        float acc[MM_VEC_ROWS];
        for (int r = 0; r < MM_VEC_ROWS; r++) {
            acc[r] = 0.0f;
            xr[r] = F32P(x, x_off) + (r < nr ? (ulong)XROW(order[c0 + r]) * x_ld : 0);
        }
        for (int k = lid; k < K; k += MM_WG) {
            const float wv = dq(row, type, k);
            for (int r = 0; r < nr; r++) acc[r] = fma(wv, xr[r][k], acc[r]);
        }
        for (int r = 0; r < MM_VEC_ROWS; r++) red[r][lid] = acc[r];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = MM_WG / 2; s > 0; s >>= 1) {
            if (lid < s)
                for (int r = 0; r < nr; r++) red[r][lid] += red[r][lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid < nr) {
            float v = red[lid][0];
            if (has_bias) v += F32P(bias_b, bias_off)[(ulong)e * N + n];
            (F32P(o, o_off) + (ulong)order[c0 + lid] * o_ld)[n] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* red is refilled */
    }
}

/* mm_tile's form (prefill): MM_T weight rows x MM_T of the expert's slots
 * per pass, the work-group looping over the expert's slots. global
 * (N rounded up to MM_T, MM_T * experts) */
kernel __attribute__((reqd_work_group_size(MM_T, MM_T, 1)))
void mm_id_tile(MM_ID_ARGS)
{
    const int tn = get_local_id(0), tr = get_local_id(1), n0 = get_group_id(0) * MM_T;
    int e, s0, s1;
    if (!id_expert(idx, E, get_group_id(1), &e, &s0, &s1)) return;
    global const int *order = idx + 2 * E + 2;
    local float ws[MM_T][MM_TK + 1], xs[MM_T][MM_TK + 1];
    const int lin = tr * MM_T + tn;
    for (int c0 = s0; c0 < s1; c0 += MM_T) {
        const int nr = min(MM_T, s1 - c0);
        float acc = 0.0f;
        for (int k0 = 0; k0 < K; k0 += MM_TK) {
            for (int i = lin; i < MM_T * MM_TK; i += MM_T * MM_T) {
                const int rr = i / MM_TK, kk = i % MM_TK, k = k0 + kk, n = n0 + rr;
                ws[rr][kk] = n < N && k < K ? dq(w + w_off + ((ulong)e * N + n) * w_nb1, type, k) : 0.0f;
                xs[rr][kk] = rr < nr && k < K ? (F32P(x, x_off) + (ulong)XROW(order[c0 + rr]) * x_ld)[k] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < MM_TK; kk++) acc = fma(ws[tn][kk], xs[tr][kk], acc);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const int n = n0 + tn;
        if (n < N && tr < nr) {
            float v = acc;
            if (has_bias) v += F32P(bias_b, bias_off)[(ulong)e * N + n];
            (F32P(o, o_off) + (ulong)order[c0 + tr] * o_ld)[n] = v;
        }
    }
}

/* Exact forms (CPU-type devices), one work-item per weight row n of a
 * chosen expert, over every slot that chose it, each dot in the CPU's
 * single-row (vec_dot) order as MATMUL's decode: F32/F16 weights against x
 * (F16's rounded to F16 as it reads them), the 32-element quants against
 * quant_act's blocks (x's rows, given as x). global (N rounded up to 64,
 * experts) */
kernel void mm_id_exact_f(MM_ID_ARGS)
{
    const int n = get_global_id(0);
    int e, s0, s1;
    if (n >= N || !id_expert(idx, E, get_group_id(1), &e, &s0, &s1)) return;
    global const int *order = idx + 2 * E + 2;
    global const uchar *row = w + w_off + ((ulong)e * N + n) * w_nb1;
    for (int s = s0; s < s1; s++) {
        const int slot = order[s];
        float v = dot_exact_f(row, type == WEFT_T_F16, F32P(x, x_off) + (ulong)XROW(slot) * x_ld, K, 0);
        if (has_bias) v += F32P(bias_b, bias_off)[(ulong)e * N + n];
        (F32P(o, o_off) + (ulong)slot * o_ld)[n] = v;
    }
}

kernel void mm_id_exact_q(MM_ID_ARGS)
{
    const int n = get_global_id(0);
    int e, s0, s1;
    if (n >= N || !id_expert(idx, E, get_group_id(1), &e, &s0, &s1)) return;
    global const int *order = idx + 2 * E + 2;
    global const uchar *row = w + w_off + ((ulong)e * N + n) * w_nb1;
    for (int c0 = s0; c0 < s1; c0 += MMQ_ROWS) {
        const int nr = min(MMQ_ROWS, s1 - c0);
        int xrow[MMQ_ROWS];
        float res[MMQ_ROWS];
        for (int i = 0; i < MMQ_ROWS; i++) xrow[i] = i < nr ? XROW(order[c0 + i]) : 0;
        q_dots(row, type, x + x_off, xrow, nr, K, 0, res, MMQ_ROWS);
        for (int i = 0; i < nr; i++) {
            float v = res[i];
            if (has_bias) v += F32P(bias_b, bias_off)[(ulong)e * N + n];
            (F32P(o, o_off) + (ulong)order[c0 + i] * o_ld)[n] = v;
        }
    }
}

/* The weighted form's sum: out[r] = ((w0 * y0 + w1 * y1) + ...) (+ add[r]),
 * each product rounded, in slot order (add may alias out: each element is
 * read before it is written). y: the slots' outputs, row r * k + j, ld N.
 * global (N rounded up to 64, rows) */
kernel void moe_sum(global const float *y, global const uchar *wb, ulong w_off, ulong w_ld, global const uchar *ab,
                    ulong a_off, ulong a_ld, int has_add, global uchar *o, ulong o_off, ulong o_ld, int topk, int N)
{
    const int n = get_global_id(0), r = get_global_id(1);
    if (n >= N) return;
    global const float *wt = F32P(wb, w_off) + (ulong)r * w_ld;
    global const float *yr = y + (ulong)r * topk * N + n;
    float s = wt[0] * yr[0];
    for (int q = 1; q < topk; q++) s = s + wt[q] * yr[(ulong)q * N];
    if (has_add) s = s + (F32P(ab, a_off) + (ulong)r * a_ld)[n];
    (F32P(o, o_off) + (ulong)r * o_ld)[n] = s;
}
