/* The MOE_ROUTE and MATMUL_ID launchers (kernels-common/launch.h, api 7) over
 * kernels-common/moe.cuh, shared by the backends (included once by a backend's kernels file
 * after its primitives). Blocks: MOE_ROUTE 32 x 4 (a row per 32-lane group), MATMUL_ID's
 * index one block of 256, its dots 32 x 4 as the decode matvec's, its weighted sum 256: whole
 * warps on NVIDIA, whole wavefronts on CDNA (64 lanes) and RDNA (32). */
#ifndef WEFT_KC_LAUNCH_MOE_CUH
#define WEFT_KC_LAUNCH_MOE_CUH

#include "kernels-common/moe.cuh"
#include "kernels-common/launch.h"

static_assert(WEFT_KC_MOE_MAX_E == WEFT_GK_MOE_MAX_EXPERTS, "moe.cuh's bound is launch.h's");
static_assert(WEFT_KC_MOE_MAX_E <= 32 * 32, "a lane's experts fit MOE_ROUTE's 32-bit mask");

enum { MOE_ROUTE_GROUPS = 4, MMID_ROWS = 4 };

extern "C" int weft_gk_moe_route(const struct weft_gk_moe_route *a, void *stream)
{
    if (a->R <= 0) return 0;
    if (a->E < 1 || a->E > WEFT_GK_MOE_MAX_EXPERTS || a->k < 1 || a->k > a->E || a->gating < WEFT_MOE_SOFTMAX ||
        a->gating > WEFT_MOE_SOFTMAX_TOPK)
        return WEFT_LAUNCH_EINVAL;
    if (a->n_group > 1 && (a->n_group > WEFT_KC_MOE_MAX_GROUPS || a->E % a->n_group || a->E / a->n_group < 2 ||
                           a->group_used < 1 || a->group_used >= a->n_group || a->k > a->group_used * (a->E / a->n_group)))
        return WEFT_LAUNCH_EINVAL;
    struct weft_kc_moe_route k = {a->logits, a->l_ld, a->ids, a->ids_ld, a->w, a->w_ld, a->R, a->E, a->k,
                                  a->gating, a->norm, a->scale, a->bias, a->n_group > 1 ? a->n_group : 0,
                                  a->group_used, a->expert_scale};
    dim3 block(32, MOE_ROUTE_GROUPS);
    const unsigned grid = (unsigned)((a->R + MOE_ROUTE_GROUPS - 1) / MOE_ROUTE_GROUPS);
    const size_t smem = sizeof(float) * MOE_ROUTE_GROUPS * (size_t)a->E;
    weft_k_moe_route<<<grid, block, smem, (weft_stream_t)stream>>>(k);
    return weft_launch_error();
}

/* MATMUL_ID's scratch, each part 256-byte aligned: x's rows as Q8_1 (quantized weights), the
 * index (start[E + 1], used[E], n_used, order[slots]), the slots' rows (with weights) */
struct mmid_layout {
    size_t idx, y, total;   /* byte offsets of the index and the slots' rows; the Q8_1 rows at 0 */
};

static size_t mmid_align(size_t n) { return (n + 255) & ~(size_t)255; }

static struct mmid_layout mmid_layout_of(int wt, int64_t K, int64_t N, int E, int64_t R, int k, int x_per_slot,
                                         int weighted)
{
    const int64_t S = R * k, nx = x_per_slot ? S : R;
    struct mmid_layout L;
    size_t o = weft_kc_is_quant(wt) ? mmid_align((size_t)nx * (size_t)(K / 32) * sizeof(struct weft_block_q8_1)) : 0;
    L.idx = o;
    o += mmid_align(sizeof(int32_t) * (size_t)(2 * (int64_t)E + 2 + S));
    L.y = o;
    if (weighted) o += (size_t)S * (size_t)N * sizeof(float);
    L.total = o;
    return L;
}

extern "C" size_t weft_gk_matmul_id_scratch(int wt, int64_t K, int64_t N, int E, int64_t R, int k, int x_per_slot,
                                            int weighted)
{
    if (R <= 0 || k <= 0 || E <= 0) return 0;
    return mmid_layout_of(wt, K, N, E, R, k, x_per_slot, weighted).total;
}

template <int T> static void mmid_launch(const struct weft_kc_mmid &k, int64_t N, int64_t n_blocks_y, weft_stream_t st)
{
    dim3 block(32, MMID_ROWS), grid((unsigned)((N + MMID_ROWS - 1) / MMID_ROWS), (unsigned)n_blocks_y);
    weft_k_mmid<T><<<grid, block, 0, st>>>(k);
}

extern "C" int weft_gk_matmul_id(const struct weft_gk_mmid *m, void *scratch, void *stream)
{
    if (m->R <= 0 || m->N <= 0 || m->K <= 0 || m->k <= 0) return 0;
    if (m->E < 1 || m->E > WEFT_GK_MOE_MAX_EXPERTS || (!m->wts && m->add) || (weft_kc_is_quant(m->wt) && m->K % 32))
        return WEFT_LAUNCH_EINVAL;
    const weft_stream_t st = (weft_stream_t)stream;
    const struct mmid_layout L = mmid_layout_of(m->wt, m->K, m->N, m->E, m->R, m->k, m->x_per_slot, m->wts != NULL);
    uint8_t *sc = (uint8_t *)scratch;
    const int64_t S = m->R * m->k, nx = m->x_per_slot ? S : m->R, nb32 = m->K / 32;
    const bool quant = weft_kc_is_quant(m->wt);
    struct weft_block_q8_1 *xq = quant ? (struct weft_block_q8_1 *)sc : NULL;
    int32_t *idx = (int32_t *)(sc + L.idx);
    float *y = m->wts ? (float *)(sc + L.y) : NULL;   /* the slots' rows, N floats each, before the sum */
    float *rows = y ? y : m->out;
    const size_t rows_ld = y ? (size_t)m->N : m->out_ld;
    if (quant) {
        const int64_t nblk = nx * nb32;
        weft_k_quantize_q8_1<<<(unsigned)((nblk + 7) / 8), 256, 0, st>>>(m->x, m->x_ld, nx, nb32, xq);
    }
    const int E = m->E;
    struct weft_kc_mmid_index ix = {m->ids, m->ids_ld, m->R, m->k, E, idx, idx + E + 1, idx + 2 * E + 1,
                                    idx + 2 * E + 2, rows, rows_ld, m->N, m->err};
    weft_k_mmid_index<<<1, WEFT_MMID_INDEX_THREADS, 0, st>>>(ix);
    struct weft_kc_mmid k = {m->w, m->w_nb1, m->N, m->K, m->k, m->x_per_slot, xq, m->x, m->x_ld,
                             ix.start, ix.used, ix.n_used, ix.order, rows, rows_ld, m->bias};
    const int64_t ny = S < E ? S : E;   /* at most this many experts were chosen */
    switch (m->wt) {
#define ID_(T) case WEFT_TYPE_##T: mmid_launch<WEFT_TYPE_##T>(k, m->N, ny, st); break;
        ID_(F32) ID_(F16) ID_(BF16) ID_(Q4_0) ID_(Q4_1) ID_(Q5_0) ID_(Q5_1) ID_(Q8_0) ID_(Q4_K) ID_(Q5_K) ID_(Q6_K)
        ID_(Q2_K) ID_(Q3_K) ID_(IQ4_NL) ID_(IQ4_XS) ID_(MXFP4)
#undef ID_
    default: return WEFT_LAUNCH_EINVAL;
    }
    if (y) {
        dim3 grid((unsigned)((m->N + 255) / 256), (unsigned)m->R);
        weft_k_mmid_sum<<<grid, 256, 0, st>>>(y, m->N, m->k, m->wts, m->wts_ld, m->add, m->add_ld, m->out,
                                               m->out_ld);
    }
    return weft_launch_error();
}

#endif
