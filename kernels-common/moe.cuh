/* MOE_ROUTE and MATMUL_ID (api 7, backends/backend.h) for any backend's device code.
 *
 * MOE_ROUTE: one 32-lane group per row and no block synchronisation. Lane l owns experts
 * l, l + 32, ... (their probabilities in shared memory, read back by that lane only); the
 * softmax's sums and each top-k choice are group reductions; lane 0 forms the k weights. The
 * float order is the CPU's (backends/cpu/ops/ops_moe.c): the softmax as ggml's soft_max (max;
 * y = expf(x - max); chunks of 16 summed in reduce_add_16's tree, each added to a double, then
 * the rest one by one in double; y *= (float)(1 / sum)), sigmoid 1 / (1 + expf(-x)), the top k
 * as the CPU's scan (best first, equal values: the lower expert; a NaN never wins unless it is
 * the first expert not yet taken), the renormalising sum in double, then the scale, then
 * api 10's per-expert scale (w[j] * expert_scale[ids[j]]). The device's expf stands
 * for the CPU's (ggml's polynomial in the chunks, libm's elsewhere): probabilities agree to an
 * ulp or two, not bit for bit.
 *
 * MATMUL_ID: three or four launches, no host synchronisation (the ids may come from a
 * MOE_ROUTE earlier in the same step or graph):
 *   weft_k_quantize_q8_1 (matmul.cuh): each activation row to Q8_1 once (quantized weights);
 *   weft_k_mmid_index, one block: the step's slots (rows x k) grouped by expert on the device:
 *     expert e's slots are order[start[e] .. start[e+1]), the chosen experts ascending in
 *     used[0 .. *n_used);
 *   weft_k_mmid<T>, grid (tiles of 4 weight rows, min(E, slots)): block (t, u) takes expert
 *     used[u] (past *n_used: it exits at once, so an unchosen expert is never read) and dots
 *     its tile's rows with all of the expert's slots, WEFT_MMID_SLOTS at a time: each weight
 *     row comes from memory once per op, and each slot's dot is the decode matvec's
 *     (weft_k_mmvq: dot32 on Q8_1, lanes over 32-element sub-blocks; weft_k_mm_float for
 *     F32/F16/BF16), bias added after (the CPU's order);
 *   weft_k_mmid_sum (weights): out[r] = ((w0 · y0 + w1 · y1) + ...) (+ add[r]), each product
 *     rounded, in slot order, as the CPU.
 * The slots' order within an expert comes from shared-memory atomics, but a slot's result is
 * the same float operations whichever batch it lands in: outputs are the same bits every run. */
#ifndef WEFT_KC_MOE_CUH
#define WEFT_KC_MOE_CUH

#include "kernels-common/matmul.cuh"

#define WEFT_KC_MOE_MAX_E 1024   /* launch.h's WEFT_GK_MOE_MAX_EXPERTS: a lane's experts fit a 32-bit mask */
#define WEFT_MOE_NONE 0x7fffffff /* no candidate */
#define WEFT_KC_MOE_MAX_GROUPS 64   /* backend.h's WEFT_MOE_MAX_GROUPS */

/* _mm512_reduce_add_ps's order over 16 values (the CPU's reduce_add_16) */
WEFT_DEV float weft_reduce_add_16(const float *x)
{
    float t[8], u[4];
#pragma unroll
    for (int i = 0; i < 8; i++) t[i] = x[i] + x[i + 8];
#pragma unroll
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

/* ggml's soft_max of n values in place, by one thread (the CPU's softmax_ggml) */
WEFT_DEV void weft_softmax_seq(float *y, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = mx > y[i] ? mx : y[i];
    double sum = 0.0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; l++) y[i + l] = expf(y[i + l] - mx);
        sum += (double)weft_reduce_add_16(y + i);
    }
    for (; i < n; i++) {
        y[i] = expf(y[i] - mx);
        sum += (double)y[i];
    }
    const float s = (float)(1.0 / sum);
    for (i = 0; i < n; i++) y[i] *= s;
}

/* (bv, bi) becomes (v, i) when that is the better choice: a candidate (i != NONE) of larger
 * value, or of equal value and lower index. Symmetric, so a butterfly leaves every lane with
 * the same winner. */
WEFT_DEV void weft_moe_better(float &bv, int &bi, float v, int i)
{
    if (i != WEFT_MOE_NONE && (bi == WEFT_MOE_NONE || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

struct weft_kc_moe_route {
    const float *logits;
    size_t l_ld;
    int32_t *ids;
    size_t ids_ld;
    float *w;
    size_t w_ld;
    int64_t R;
    int E, k, gating, norm;
    float scale;
    const float *bias;   /* E floats or NULL */
    int n_group, group_used;   /* expert groups (n_group <= 1: none) */
    const float *escale;   /* api 10: E floats, each chosen weight's last factor; NULL: none */
};

/* One 32-lane group per row: grid ceil(R / blockDim.y), blockDim (32, groups), dynamic shared
 * memory groups * E floats. */
static __global__ void weft_k_moe_route(struct weft_kc_moe_route a)
{
    extern __shared__ float weft_moe_p[];
    const int lane = threadIdx.x % 32, E = a.E, ncol = (E + 31) / 32;
    const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= a.R) return;   /* whole groups leave together */
    float *p = weft_moe_p + (size_t)threadIdx.y * E;   /* p[e] written and read by lane e % 32 only */
    const float *l = a.logits + r * a.l_ld;
    if (a.gating == WEFT_MOE_SIGMOID) {
        for (int e = lane; e < E; e += 32) p[e] = 1.0f / (1.0f + expf(-l[e]));
    } else {
        float mx = -INFINITY;
        for (int e = lane; e < E; e += 32) mx = mx > l[e] ? mx : l[e];
        mx = weft_group_max<32>(mx);
        /* column c holds chunks 2c (lanes 0..15) and 2c + 1 (16..31); the butterfly over 8, 4,
         * 2, 1 is reduce_add_16's tree (float addition commutes exactly), so every lane of a
         * half gets its chunk's sum; every lane adds the chunks in order, the same double */
        const int nchunk = E / 16;
        double sum = 0.0;
        for (int c = 0; c < ncol; c++) {
            const int e = lane + 32 * c;
            const float y = e < E ? expf(l[e] - mx) : 0.0f;
            if (e < E) p[e] = y;
            float t = y + weft_shfl_xor(y, 8, 32);
            t = t + weft_shfl_xor(t, 4, 32);
            t = t + weft_shfl_xor(t, 2, 32);
            t = t + weft_shfl_xor(t, 1, 32);
            const float o = weft_shfl_xor(t, 16, 32);
            if (2 * c < nchunk) sum += (double)(lane < 16 ? t : o);
            if (2 * c + 1 < nchunk) sum += (double)(lane < 16 ? o : t);
        }
        for (int e = 16 * nchunk; e < E; e++) sum += (double)expf(l[e] - mx);   /* the same value as p[e] */
        const float s = (float)(1.0 / sum);
        for (int e = lane; e < E; e += 32) p[e] *= s;
    }
    int32_t *ids = a.ids + r * a.ids_ld;
    float *w = a.w + r * a.w_ld;
    /* expert groups: each lane's two best choice values of a group, merged over the lanes (the
     * top two of a union, exact and symmetric, so every lane holds the group's), added; every
     * lane then keeps the same group_used best groups (equal: the lower group) */
    const int G = a.n_group > 1 ? E / a.n_group : E;
    uint64_t keep = 1;   /* bit g: group g kept */
    if (a.n_group > 1) {
        float score[WEFT_KC_MOE_MAX_GROUPS];
        for (int g = 0; g < a.n_group; g++) {
            float ta = -INFINITY, tb = -INFINITY;
            for (int c = 0; c < ncol; c++) {
                const int e = lane + 32 * c;
                if (e < g * G || e >= (g + 1) * G) continue;
                const float v = a.bias ? p[e] + a.bias[e] : p[e];
                if (v > ta) {
                    tb = ta;
                    ta = v;
                } else if (v > tb) {
                    tb = v;
                }
            }
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) {
                const float oa = weft_shfl_xor(ta, m, 32), ob = weft_shfl_xor(tb, m, 32);
                const float lo = ta < oa ? ta : oa, hi2 = tb > ob ? tb : ob;
                ta = ta > oa ? ta : oa;
                tb = lo > hi2 ? lo : hi2;
            }
            score[g] = ta + tb;
        }
        keep = 0;
        for (int j = 0; j < a.group_used; j++) {
            int best = -1;
            for (int g = 0; g < a.n_group; g++)
                if (!(keep >> g & 1u) && (best < 0 || score[g] > score[best])) best = g;
            keep |= (uint64_t)1 << best;
        }
    }
    uint32_t taken = 0;   /* bit c: expert lane + 32c chosen */
    for (int j = 0; j < a.k; j++) {
        /* the CPU's scan: the first expert not taken, replaced by any strictly larger value
         * (a NaN never replaces; a NaN first stays) */
        int first = WEFT_MOE_NONE, bi = WEFT_MOE_NONE;   /* first: 2e + (its value is NaN) */
        float bv = -INFINITY;
        for (int c = 0; c < ncol; c++) {
            const int e = lane + 32 * c;
            if (e >= E || (taken >> c & 1u) || !(keep >> (e / G) & 1u)) continue;
            const float v = a.bias ? p[e] + a.bias[e] : p[e];
            if (first == WEFT_MOE_NONE) first = 2 * e + (v != v);
            if (v == v) weft_moe_better(bv, bi, v, e);
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) {
            const int f = weft_shfl_xor_i(first, m, 32);
            first = f < first ? f : first;
            const float v = weft_shfl_xor(bv, m, 32);
            const int i = weft_shfl_xor_i(bi, m, 32);
            weft_moe_better(bv, bi, v, i);
        }
        const int best = first & 1 ? first >> 1 : bi;
        const int owner = best % 32;
        if (lane == owner) taken |= 1u << (best / 32);
        /* lane 0 gets p[best] from its owner (lane 0 ^ owner) */
        const float pb = weft_shfl_xor(lane == owner ? p[best] : 0.0f, owner, 32);
        if (lane == 0) {
            ids[j] = best;
            w[j] = pb;
        }
    }
    if (lane != 0) return;
    if (a.gating == WEFT_MOE_SOFTMAX_TOPK) {   /* the softmax of the chosen logits instead */
        for (int j = 0; j < a.k; j++) w[j] = l[ids[j]];
        weft_softmax_seq(w, a.k);
    }
    if (a.norm) {
        double s = 0.0;
        for (int j = 0; j < a.k; j++) s += (double)w[j];
        float sum = (float)s;
        if (!(sum >= 6.103515625e-5f)) sum = 6.103515625e-5f;
        for (int j = 0; j < a.k; j++) w[j] = w[j] / sum;
    }
    if (a.scale != 0.0f)
        for (int j = 0; j < a.k; j++) w[j] = w[j] * a.scale;
    if (a.escale)   /* api 10: the chosen expert's own scale, one product (ids[j] is this lane's) */
        for (int j = 0; j < a.k; j++) w[j] = w[j] * a.escale[ids[j]];
}

/* ---- MATMUL_ID ---- */

#define WEFT_MMID_INDEX_THREADS 256
#define WEFT_MMID_SLOTS 8   /* slots dotted per pass over a weight row */

struct weft_kc_mmid_index {
    const int32_t *ids;
    size_t ids_ld;
    int64_t R;
    int k, E;
    int32_t *start, *used, *n_used, *order;   /* [E + 1], [E], [1], [R * k] */
    float *bad_out;                           /* a bad slot's row s: bad_out + s * bad_ld, N zeros */
    size_t bad_ld;
    int64_t N;
    int *err;
};

/* One block of WEFT_MMID_INDEX_THREADS: count the slots per expert, scan the counts (and the
 * chosen flags) into start and used, then place every slot. */
static __global__ void weft_k_mmid_index(struct weft_kc_mmid_index a)
{
    enum { NT = WEFT_MMID_INDEX_THREADS };
    __shared__ int cnt[WEFT_KC_MOE_MAX_E], cur[WEFT_KC_MOE_MAX_E], sc[NT], su[NT];
    const int tid = threadIdx.x, E = a.E;
    const int64_t S = a.R * a.k;
    for (int e = tid; e < E; e += NT) cnt[e] = 0;
    __syncthreads();
    for (int64_t s = tid; s < S; s += NT) {
        const int e = a.ids[(s / a.k) * a.ids_ld + s % a.k];
        if (e >= 0 && e < E) {
            atomicAdd(&cnt[e], 1);
        } else {
            if (a.err) *a.err = 3;
            for (int64_t n = 0; n < a.N; n++) a.bad_out[s * a.bad_ld + n] = 0.0f;
        }
    }
    __syncthreads();
    /* thread t owns experts [t * per, (t + 1) * per): its slot count and chosen count, then an
     * inclusive scan of both over the threads */
    const int per = (E + NT - 1) / NT, e0 = tid * per, e1 = e0 + per < E ? e0 + per : E;
    int c = 0, u = 0;
    for (int e = e0; e < e1; e++) {
        c += cnt[e];
        u += cnt[e] > 0;
    }
    sc[tid] = c;
    su[tid] = u;
    __syncthreads();
    for (int off = 1; off < NT; off <<= 1) {
        const int tc = tid >= off ? sc[tid - off] : 0, tu = tid >= off ? su[tid - off] : 0;
        __syncthreads();
        sc[tid] += tc;
        su[tid] += tu;
        __syncthreads();
    }
    int bc = sc[tid] - c, bu = su[tid] - u;
    for (int e = e0; e < e1; e++) {
        a.start[e] = bc;
        cur[e] = bc;
        if (cnt[e] > 0) a.used[bu++] = e;
        bc += cnt[e];
    }
    if (tid == NT - 1) {
        a.start[E] = sc[NT - 1];
        *a.n_used = su[NT - 1];
    }
    __syncthreads();
    for (int64_t s = tid; s < S; s += NT) {
        const int e = a.ids[(s / a.k) * a.ids_ld + s % a.k];
        if (e >= 0 && e < E) a.order[atomicAdd(&cur[e], 1)] = (int32_t)s;
    }
}

struct weft_kc_mmid {
    const uint8_t *w;
    size_t w_nb1;
    int64_t N, K;                             /* an expert's rows, their length */
    int k, x_per_slot;
    const struct weft_block_q8_1 *xq;         /* quantized weights: x's rows as Q8_1, K/32 blocks each */
    const float *x;                           /* float weights: x itself */
    size_t x_ld;
    const int32_t *start, *used, *n_used, *order;
    float *out;                               /* slot s's row: out + s * out_ld */
    size_t out_ld;
    const float *bias;                        /* E * N floats or NULL */
};

/* grid (ceil(N / blockDim.y), min(E, slots)), blockDim (32, rows per block): one 32-lane group
 * per weight row n of expert used[blockIdx.y] */
template <int T>
static __global__ void weft_k_mmid(struct weft_kc_mmid a)
{
    enum { NS = WEFT_MMID_SLOTS };
    constexpr bool quant = T != WEFT_TYPE_F32 && T != WEFT_TYPE_F16 && T != WEFT_TYPE_BF16;
    const int lane = threadIdx.x % 32;
    const int64_t n = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if ((int)blockIdx.y >= *a.n_used || n >= a.N) return;
    const int e = a.used[blockIdx.y];
    const int s0 = a.start[e], s1 = a.start[e + 1];
    const uint8_t *row = a.w + ((size_t)e * a.N + n) * a.w_nb1;
    const int64_t nb32 = a.K / 32;
    for (int b0 = s0; b0 < s1; b0 += NS) {
        const int nb = s1 - b0 < NS ? s1 - b0 : NS;   /* the same for the whole group */
        int64_t slot[NS], xr[NS];
        float acc[NS];
#pragma unroll
        for (int i = 0; i < NS; i++) {
            slot[i] = i < nb ? a.order[b0 + i] : 0;
            xr[i] = a.x_per_slot ? slot[i] : slot[i] / a.k;
            acc[i] = 0.0f;
        }
        if constexpr (quant) {
            for (int64_t s = lane; s < nb32; s += 32) {
#pragma unroll
                for (int i = 0; i < NS; i++)
                    if (i < nb) acc[i] += weft_dq<T>::dot32(row, (int)s, &a.xq[xr[i] * nb32 + s]);
            }
        } else {
            for (int64_t kk = lane; kk < a.K; kk += 32) {
                const float wv = weft_dq<T>::at(row, kk);
#pragma unroll
                for (int i = 0; i < NS; i++)
                    if (i < nb) acc[i] = fmaf(wv, a.x[xr[i] * a.x_ld + kk], acc[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < NS; i++) {
            if (i < nb) {   /* nb is the group's: every lane takes part in the sum */
                const float v = weft_group_sum<32>(acc[i]);
                if (lane == 0) a.out[slot[i] * a.out_ld + n] = a.bias ? v + a.bias[(size_t)e * a.N + n] : v;
            }
        }
    }
}

/* out[r][n] = ((w[r][0] · y[r·k][n] + w[r][1] · y[r·k + 1][n]) + ...) (+ add[r][n]), the CPU's
 * order; grid (ceil(N / blockDim.x), R). add may alias out (read, then written, by one thread). */
static __global__ void weft_k_mmid_sum(const float *y, int64_t N, int k, const float *wts, size_t wts_ld,
                                       const float *add, size_t add_ld, float *out, size_t out_ld)
{
    const int64_t r = blockIdx.y, n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float *wt = wts + r * wts_ld, *yr = y + (size_t)r * k * N + n;
    float s = wt[0] * yr[0];
    for (int q = 1; q < k; q++) s = s + wt[q] * yr[(size_t)q * N];
    out[r * out_ld + n] = add ? s + add[r * add_ld + n] : s;
}

#endif
