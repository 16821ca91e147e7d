/* The ATTENTION launchers (kernels-common/launch.h) over
 * kernels-common/attention.cuh, shared by the backends (included once by a
 * backend's kernels file after its primitives): split-K partials then
 * their merge, or one pass when the rows alone fill the GPU. Blocks are
 * 32 x 4 = 128 threads: four 32-lane units, i.e. four NVIDIA warps, two per
 * 64-lane CDNA wavefront or one per RDNA wavefront. */
#ifndef WEFT_KC_LAUNCH_ATTENTION_CUH
#define WEFT_KC_LAUNCH_ATTENTION_CUH

#include "kernels-common/attention.cuh"
#include "kernels-common/launch.h"

static_assert(32 * WEFT_ATTN_MAXJ_WIDE >= WEFT_GK_ATTN_MAX_HD, "the wide kernel covers every head dim taken");

/* units per 128-thread block; splits aim at 16 units per multiprocessor */
enum { ATTN_GROUPS = 4, ATTN_MAX_SPLIT = 64, ATTN_MIN_CHUNK = 64 };

extern "C" int weft_gk_attn_splits(int64_t n_rows, int n_head, int n_mp)
{
    const int64_t units = n_rows * n_head, target = (int64_t)(n_mp > 0 ? n_mp : 1) * 16;
    if (units >= target) return 1;
    int64_t s = (target + units - 1) / units;
    return (int)(s > ATTN_MAX_SPLIT ? ATTN_MAX_SPLIT : s);
}

/* hd: V's head dim (each split's partial is M, S and hd_v accumulators) */
extern "C" size_t weft_gk_attention_scratch(int64_t n_rows, int n_head, int hd, int n_split)
{
    return n_split > 1 ? (size_t)n_rows * n_head * n_split * (size_t)(hd + 2) * sizeof(float) : 0;
}

extern "C" int weft_gk_attention(const struct weft_gk_attn_args *a, int n_split, void *scratch, void *stream)
{
    if (a->n_rows <= 0) return 0;
    const int hd_v = a->kv.hd_v > 0 ? a->kv.hd_v : a->kv.hd;
    if (a->kv.hd > WEFT_GK_ATTN_MAX_HD || hd_v > WEFT_GK_ATTN_MAX_HD || a->kv.n_kv <= 0 || a->n_head % a->kv.n_kv ||
        (a->kv.v_in_k && (a->kv.n_kv != 1 || hd_v >= a->kv.hd)))
        return WEFT_LAUNCH_EINVAL;
    const weft_stream_t st = (weft_stream_t)stream;
    struct weft_kc_attn k;
    k.q = a->q;
    k.q_ld = a->q_ld;
    k.out = a->out;
    k.out_ld = a->out_ld;
    k.kv = weft_kc_kv_of(a->kv);
    k.pos = a->pos;
    k.seq = a->seq;
    k.bt_off = a->bt_off;
    k.bt = a->bt;
    k.n_rows = a->n_rows;
    k.n_head = a->n_head;
    k.group = a->n_head / a->kv.n_kv;
    k.scale = a->softcap != 0.0f ? a->scale / a->softcap : a->scale;
    k.softcap = a->softcap;
    k.n_split = n_split < 1 ? 1 : n_split;
    k.min_chunk = ATTN_MIN_CHUNK;
    k.part = (float *)scratch;
    k.window = (int64_t)a->window;
    k.sinks = a->sinks;
    const int64_t units = a->n_rows * a->n_head;
    dim3 block(32, ATTN_GROUPS), grid((unsigned)((units + ATTN_GROUPS - 1) / ATTN_GROUPS), (unsigned)k.n_split);
    /* the registers a lane keeps (qv, acc) sized for the widest head */
    const bool wide = a->kv.hd > 32 * WEFT_ATTN_MAXJ || hd_v > 32 * WEFT_ATTN_MAXJ;
    if (a->kv.type == WEFT_TYPE_Q8_0) {
        if (wide) weft_k_attention<WEFT_TYPE_Q8_0, WEFT_ATTN_MAXJ_WIDE><<<grid, block, 0, st>>>(k);
        else weft_k_attention<WEFT_TYPE_Q8_0, WEFT_ATTN_MAXJ><<<grid, block, 0, st>>>(k);
    } else {
        if (wide) weft_k_attention<WEFT_TYPE_F16, WEFT_ATTN_MAXJ_WIDE><<<grid, block, 0, st>>>(k);
        else weft_k_attention<WEFT_TYPE_F16, WEFT_ATTN_MAXJ><<<grid, block, 0, st>>>(k);
    }
    if (k.n_split > 1)
        weft_k_attn_combine<<<(unsigned)((units + ATTN_GROUPS - 1) / ATTN_GROUPS), block, 0, st>>>(k);
    return weft_launch_error();
}

#endif
