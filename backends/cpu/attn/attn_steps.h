/* The parts of the SIMD attention rows (attn_avx512.c, attn_avx2.c) that are
 * not vector width: prefetching the next KV block, and the online-softmax
 * steps of a block's scores around a vector expf. */
#ifndef WEFT_CPU_ATTN_STEPS_H
#define WEFT_CPU_ATTN_STEPS_H

#include <math.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernels.h"

/* Prefetch the head's K and V rows of the sequence's next KV block (16
 * tokens, `lines` cache lines each): blocks sit far apart (a block holds every
 * layer), so the hardware prefetchers start cold at each one. */
static inline __attribute__((always_inline)) void weft_attn_prefetch_block(const struct weft_cpu_attn_args *a,
                                                                           int64_t p0, const int lines)
{
    if (p0 + 16 >= a->n_pos) return;
    const uint8_t *nb = a->k0 + (size_t)a->bt[p0 / 16 + 1] * a->block_bytes;
    for (int t = 0; t < 16; t++)
        for (int c = 0; c < lines; c++) {
            __builtin_prefetch(nb + (size_t)t * a->tok_bytes + 64 * c, 0, 3);
            __builtin_prefetch(nb + (size_t)t * a->tok_bytes + a->v_off + 64 * c, 0, 3);
        }
}

/* The online-softmax steps of one head over a block's scores sc[0..nt):
 * per token, a new maximum gives ms = expf(Mold - M), vs = 1, otherwise
 * ms = 1, vs = expf(s - M); then S = fma(S, ms, vs). Exactly the scalar
 * loop's values (NaN scores included: they never make a new maximum).
 * With libm's expf, one at a time: */
static inline void weft_attn_softmax_libm(const float *sc, int nt, float *M, float *S, float *ms, float *vs)
{
    float m = *M, s_ = *S;
    for (int t = 0; t < nt; t++) {
        const float s = sc[t];
        ms[t] = vs[t] = 1.0f;
        if (s > m) {
            const float mold = m;
            m = s;
            ms[t] = expf(mold - m);
        } else {
            vs[t] = expf(s - m);
        }
        s_ = fmaf(s_, ms[t], vs[t]);
    }
    *M = m;
    *S = s_;
}

/* ... or in two halves around a vector expf: the 16 expf arguments in
 * position order (0 past nt) and the mask of tokens raising the maximum, */
static inline unsigned weft_attn_softmax_args(const float *sc, int nt, float *M, float *arg)
{
    float m = *M;
    unsigned nm = 0;
    for (int t = 0; t < 16; t++) {
        if (t >= nt) {
            arg[t] = 0.0f;
            continue;
        }
        const float s = sc[t];
        if (s > m) {
            arg[t] = m - s;
            m = s;
            nm |= 1u << t;
        } else {
            arg[t] = s - m;
        }
    }
    *M = m;
    return nm;
}

/* then, from their expf e[], ms, vs and S */
static inline void weft_attn_softmax_finish(const float *e, unsigned nm, int nt, float *S, float *ms, float *vs)
{
    float s_ = *S;
    for (int t = 0; t < nt; t++) {
        const int up = (nm >> t) & 1;
        ms[t] = up ? e[t] : 1.0f;
        vs[t] = up ? 1.0f : e[t];
        s_ = fmaf(s_, ms[t], vs[t]);
    }
    *S = s_;
}

#endif
