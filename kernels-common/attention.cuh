/* Paged causal GQA attention with split-K (flash-decoding).
 *
 * A unit is one (row r, query head h); it attends to positions
 * first..pos[r] of its sequence through the block table, with the kv head
 * h / group: first = 0, or with a sliding window (window > 0)
 * max(0, pos[r] - window + 1). One 32-lane group per (unit, split): lanes
 * own dims lane, lane+32, ... of the head (head_dim and V's head_dim_v
 * <= 32 * MAXJ: WEFT_ATTN_MAXJ, or WEFT_ATTN_MAXJ_WIDE for DeepSeek's
 * latent rows), each position's score is a group sum over K's hd dims, and
 * an online softmax keeps (max M, sum S, acc[hd_v]) in registers; head h's
 * output is at column h * hd_v. A latent cache (v_in_k) reads each V row
 * from the tail of its K row (kv.cuh).
 *
 * n_split == 1 writes out = acc / S directly (prefill: the many rows fill
 * the machine). n_split > 1 gives split s the positions first + [s*chunk,
 * (s+1)*chunk), chunk = max(ceil(n_pos / n_split), min_chunk) with n_pos
 * the count attended, writes its (M, S, acc) to part[unit][s][hd_v + 2], and
 * weft_k_attn_combine merges them. The grid depends only on shapes, never
 * on positions, so a step can be replayed as a graph while contexts grow.
 *
 * Sinks (api 7, gpt-oss): head h's sink logit counts once, as one more
 * position with no value row after the last one, on the F32 accumulator
 * (weft_attn_sink, the CPU's attn_sink): in the one pass after its loop, in
 * the merge after the splits are combined. */
#ifndef WEFT_KC_ATTENTION_CUH
#define WEFT_KC_ATTENTION_CUH

#include "kernels-common/kv.cuh"

#define WEFT_ATTN_MAXJ 8        /* head_dim, head_dim_v <= 256 */
#define WEFT_ATTN_MAXJ_WIDE 18  /* <= 576 (launch.h's WEFT_GK_ATTN_MAX_HD) */

struct weft_kc_attn {
    const float *q;
    size_t q_ld;
    float *out;
    size_t out_ld;
    struct weft_kc_kv kv;
    const int32_t *pos, *seq, *bt_off, *bt;
    int64_t n_rows;
    int n_head, group;
    float scale;
    int n_split, min_chunk;
    float *part;
    int64_t window;   /* 0: none */
    float softcap;    /* 0: none; else scale came divided by it (ggml's flash attention form) */
    const float *sinks;   /* n_head logits; NULL: none */
};

/* The sink s after the last position (backends/cpu/ops/ops_attention.c's attn_sink): a position
 * with logit s and no value row. Returns the new S; *ms is what the accumulators are to be
 * multiplied by (1 when s <= M). S·ms + vs is a product then a sum (no fma), as ggml. */
WEFT_DEV float weft_attn_sink(float s, float M, float S, float *ms)
{
    float vs = 1.0f;
    *ms = 1.0f;
    if (s > M) *ms = expf(M - s);
    else vs = expf(s - M);
    const float t = S * *ms;
    return t + vs;
}

/* element d of a cached head row: F16, or Q8_0 blocks of 32 (34 bytes) */
template <int KVT> WEFT_DEV float weft_kv_elem(const uint8_t *head, int d);
template <> WEFT_DEV float weft_kv_elem<WEFT_TYPE_F16>(const uint8_t *head, int d)
{
    return weft_ld_half(head + 2 * d);
}
template <> WEFT_DEV float weft_kv_elem<WEFT_TYPE_Q8_0>(const uint8_t *head, int d)
{
    const uint8_t *b = head + WEFT_BSZ(q8_0) * (d / WEFT_QK8_0);
    return (float)(int8_t)b[WEFT_BOFF(q8_0, qs) + d % WEFT_QK8_0] * weft_ld_half(b);
}

/* grid (ceil(units / blockDim.y), n_split), blockDim (32, groups per block) */
template <int KVT, int MAXJ>
static __global__ void weft_k_attention(struct weft_kc_attn a)
{
    const int lane = threadIdx.x % 32;
    const int64_t u = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (u >= a.n_rows * a.n_head) return;
    const int split = blockIdx.y, hd = a.kv.hd, hdv = a.kv.hd_v;
    const int64_t r = u / a.n_head;
    const int h = (int)(u % a.n_head), kh = h / a.group;
    const int64_t end = (int64_t)a.pos[r] + 1;   /* one past the last position */
    const int64_t first = a.window && end > a.window ? end - a.window : 0;
    const int64_t n_pos = end - first;
    const int32_t *bt = a.bt + a.bt_off[a.seq[r]];
    int64_t chunk = (n_pos + a.n_split - 1) / a.n_split;
    if (chunk < a.min_chunk) chunk = a.min_chunk;
    const int64_t p0 = first + (int64_t)split * chunk;
    const int64_t p1 = p0 + chunk < end ? p0 + chunk : end;

    float qv[MAXJ], acc[MAXJ];
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        const int d = lane + 32 * j;
        qv[j] = d < hd ? a.q[r * a.q_ld + (size_t)h * hd + d] : 0.0f;
        acc[j] = 0.0f;
    }
    float M = -INFINITY, S = 0.0f;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t slot = (int64_t)bt[p / WEFT_KV_BLOCK_TOKENS] * WEFT_KV_BLOCK_TOKENS + p % WEFT_KV_BLOCK_TOKENS;
        const uint8_t *kr = weft_kv_row(a.kv, slot, 0) + (size_t)kh * a.kv.head_bytes;
        const uint8_t *vr = weft_kv_row(a.kv, slot, 1) + (size_t)kh * a.kv.v_head_bytes;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            const int d = lane + 32 * j;
            if (d < hd) s = fmaf(qv[j], weft_kv_elem<KVT>(kr, d), s);
        }
        s = weft_group_sum<32>(s) * a.scale;
        if (a.softcap != 0.0f) s = a.softcap * tanhf(s);
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            ms = expf(M - s);   /* 0 on the first position (M = -inf) */
            M = s;
        } else {
            vs = expf(s - M);
        }
        S = fmaf(S, ms, vs);
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            const int d = lane + 32 * j;
            if (d < hdv) acc[j] = fmaf(weft_kv_elem<KVT>(vr, d), vs, acc[j] * ms);
        }
    }
    if (a.n_split == 1) {
        if (a.sinks) {
            float ms;
            S = weft_attn_sink(a.sinks[h], M, S, &ms);
#pragma unroll
            for (int j = 0; j < MAXJ; j++) acc[j] *= ms;
        }
        const float inv = S > 0.0f ? 1.0f / S : 0.0f;
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            const int d = lane + 32 * j;
            if (d < hdv) a.out[r * a.out_ld + (size_t)h * hdv + d] = acc[j] * inv;
        }
        return;
    }
    float *pp = a.part + ((size_t)u * a.n_split + split) * (size_t)(hdv + 2);
    if (lane == 0) {
        pp[0] = M;
        pp[1] = S;
    }
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        const int d = lane + 32 * j;
        if (d < hdv) pp[2 + d] = acc[j];
    }
}

/* Merge the splits of each unit: one 32-lane group per unit. Splits that
 * saw no position have S == 0 and are skipped. A sink joins after the
 * merge: den = den·ms + vs, each output num·ms / den. */
static __global__ void weft_k_attn_combine(struct weft_kc_attn a)
{
    const int lane = threadIdx.x % 32;
    const int64_t u = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (u >= a.n_rows * a.n_head) return;
    const int hdv = a.kv.hd_v;   /* the partials and the output are V-wide */
    const int64_t r = u / a.n_head;
    const int h = (int)(u % a.n_head);
    const float *pp = a.part + (size_t)u * a.n_split * (size_t)(hdv + 2);
    float M = -INFINITY;
    for (int s = 0; s < a.n_split; s++)
        if (pp[(size_t)s * (hdv + 2) + 1] > 0.0f) M = fmaxf(M, pp[(size_t)s * (hdv + 2)]);
    float den = 0.0f;
    for (int s = 0; s < a.n_split; s++) {
        const float *ps = pp + (size_t)s * (hdv + 2);
        if (ps[1] > 0.0f) den = fmaf(ps[1], expf(ps[0] - M), den);
    }
    float ms = 1.0f;
    if (a.sinks) den = weft_attn_sink(a.sinks[h], M, den, &ms);
    const float inv = den > 0.0f ? 1.0f / den : 0.0f;
    for (int d = lane; d < hdv; d += 32) {
        float num = 0.0f;
        for (int s = 0; s < a.n_split; s++) {
            const float *ps = pp + (size_t)s * (hdv + 2);
            if (ps[1] > 0.0f) num = fmaf(ps[2 + d], expf(ps[0] - M), num);
        }
        if (a.sinks) num = num * ms;
        a.out[r * a.out_ld + (size_t)h * hdv + d] = num * inv;
    }
}

#endif
