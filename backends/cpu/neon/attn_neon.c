/* NEON (AArch64) flash attention: the row and group forms (attn_row,
 * attn_group) over a paged F16 KV cache, bit-identical to
 * weft_cpu_attn_row_generic (tests/cpu/test_cpu_attn.c checks them) for
 * head_dim 64, 128, 192, 256, as attn/attn_avx2.c and attn_avx512.c are on x86.
 *
 * The generic row does, per position: dot[F16] of K and the F16-rounded q,
 * an online-softmax step with libm expf, and the F16 accumulator updates
 * (f16_scale on a new maximum, then f16_mad), each a call into the table,
 * with the accumulator in memory as halves. Here, per KV block of 16 tokens:
 *  - the scores: per token, dot_f16_neon's order (f_neon.c): four 16-lane
 *    accumulators, each four float32x4 (element e of a 64-element chunk in
 *    accumulator (e/16)%4, quarter (e%16)/4), fused multiply-adds from zero,
 *    (s0+s2)+(s1+s3) lane-wise, then weft_cpu_reduce_add_16's first two
 *    levels ((r0+r2)+(r1+r3), one float32x4 per token) and its last,
 *    (u0+u2)+(u1+u3), for four tokens at once transposed (each lane adding
 *    the very same pairs); then times scale;
 *  - the softmax steps per head with libm's expf, one token at a time
 *    (attn_steps.h's weft_attn_softmax_libm: the generic row's own steps);
 *  - the accumulator as floats that are always exact halves: every update
 *    rounded to F16 and back (vcvt_f16_f32 rounds to nearest even, as
 *    weft_f32_to_half does for every non-NaN value; the accumulator holds
 *    no NaN its inputs did not make), which is what storing it as halves and
 *    loading them again does; ms == 1 leaves it as it is (rounding acc * 1
 *    gives acc back), so the rescale runs only on a new maximum.
 * The group form runs G <= 4 heads of one KV head together: each K row is
 * converted once for the G scores, each V row once for the G accumulators. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>

#include "backends/cpu/attn/attn_steps.h"
#include "backends/cpu/neon/neon_common.h"
#include "base/types.h"

AI float32x4_t h4(const uint8_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p))); }
AI float32x4_t round_f16(float32x4_t x) { return vcvt_f32_f16(vcvt_f16_f32(x)); }

/* q rounded to F16 as weft_f32_to_half: a NaN becomes its sign's quiet NaN
 * without payload first (as quant_f16_neon) */
AI float32x4_t q_f16(const float *p)
{
    const float32x4_t v = vld1q_f32(p);
    const uint32x4_t u = vreinterpretq_u32_f32(v), nan = vmvnq_u32(vceqq_f32(v, v));
    const uint32x4_t c = vbslq_u32(nan, vorrq_u32(vandq_u32(u, vdupq_n_u32(0x80000000u)), vdupq_n_u32(0x7fc00000u)), u);
    return round_f16(vreinterpretq_f32_u32(c));
}

/* One token's K row kh (16 C quarters) against one head's q: the four
 * 16-lane accumulators, (s0+s2)+(s1+s3), then the 16 lanes' first two
 * tree levels: lane i of the result is u[i] of weft_cpu_reduce_add_16 */
AI float32x4_t token_u(const float32x4_t *kh, const float32x4_t *q, const int C)
{
    const float32x4_t z = vdupq_n_f32(0.0f);
    float32x4_t s[4][4];
    for (int j = 0; j < 4; j++)
        for (int r = 0; r < 4; r++) s[j][r] = vfmaq_f32(z, kh[4 * j + r], q[4 * j + r]);
    for (int c = 1; c < C; c++)
        for (int j = 0; j < 4; j++)
            for (int r = 0; r < 4; r++) s[j][r] = vfmaq_f32(s[j][r], kh[16 * c + 4 * j + r], q[16 * c + 4 * j + r]);
    float32x4_t t[4];
    for (int r = 0; r < 4; r++) t[r] = vaddq_f32(vaddq_f32(s[0][r], s[2][r]), vaddq_f32(s[1][r], s[3][r]));
    return vaddq_f32(vaddq_f32(t[0], t[2]), vaddq_f32(t[1], t[3]));
}

/* lane i = (x[i]0 + x[i]2) + (x[i]1 + x[i]3) of four tokens' u */
AI float32x4_t reduce4(const float32x4_t *x)
{
    /* (a0+a2, c0+c2, a1+a3, c1+c3) and the same of b, d */
    const float32x4_t p = vpaddq_f32(vuzp1q_f32(x[0], x[2]), vuzp2q_f32(x[0], x[2]));
    const float32x4_t r = vpaddq_f32(vuzp1q_f32(x[1], x[3]), vuzp2q_f32(x[1], x[3]));
    /* (a0+a2, a1+a3, b0+b2, b1+b3) + (c.., d..) pairwise */
    return vpaddq_f32(vuzp1q_f32(p, r), vuzp2q_f32(p, r));
}

/* G heads sharing one KV head and positions (G = 1: a single row), hd = 64 C,
 * in three phases per KV block: the G x 16 scores, each K row converted once
 * for all heads; the softmax steps per head; then the accumulator updates,
 * each V row converted once for all heads. */
AI void attn_group_c(const struct weft_cpu_attn_args *a, const int C, const int G)
{
    float32x4_t q[4][64], acc[4][64];
    float M[4], S[4];
    for (int h = 0; h < G; h++) {
        for (int i = 0; i < 16 * C; i++) {
            q[h][i] = q_f16(a[h].q + 4 * i);
            acc[h][i] = vdupq_n_f32(0.0f);
        }
        M[h] = -INFINITY;
        S[h] = 0.0f;
    }
    const float32x4_t scale = vdupq_n_f32(a[0].scale);
    for (int64_t p0 = 0; p0 < a[0].n_pos; p0 += 16) {
        const uint8_t *kb = a[0].k0 + (size_t)a[0].bt[p0 / 16] * a[0].block_bytes;
        const int nt = a[0].n_pos - p0 < 16 ? (int)(a[0].n_pos - p0) : 16;
        weft_attn_prefetch_block(a, p0, 2 * C);
        float sc[4][16];
        for (int t4 = 0; t4 < nt; t4 += 4) {
            float32x4_t u[4][4]; /* per head, the four tokens' u */
            for (int t = 0; t < 4; t++) {
                if (t4 + t >= nt) {
                    for (int h = 0; h < G; h++) u[h][t] = vdupq_n_f32(0.0f);
                    continue;
                }
                const uint8_t *k = kb + (size_t)(t4 + t) * a[0].tok_bytes;
                float32x4_t kh[64];
                for (int i = 0; i < 16 * C; i++) kh[i] = h4(k + 8 * i);
                for (int h = 0; h < G; h++) u[h][t] = token_u(kh, q[h], C);
            }
            for (int h = 0; h < G; h++) vst1q_f32(sc[h] + t4, vmulq_f32(reduce4(u[h]), scale));
        }
        float ms[4][16], vs[4][16];
        for (int h = 0; h < G; h++) weft_attn_softmax_libm(sc[h], nt, &M[h], &S[h], ms[h], vs[h]);
        for (int t = 0; t < nt; t++) {
            const uint8_t *v = kb + (size_t)t * a[0].tok_bytes + a[0].v_off;
            float32x4_t vh[64];
            for (int i = 0; i < 16 * C; i++) vh[i] = h4(v + 8 * i);
            for (int h = 0; h < G; h++) {
                if (ms[h][t] != 1.0f) { /* a new maximum: f16_scale */
                    const float32x4_t m = vdupq_n_f32(ms[h][t]);
                    for (int i = 0; i < 16 * C; i++) acc[h][i] = round_f16(vmulq_f32(acc[h][i], m));
                }
                const float32x4_t w = vdupq_n_f32(vs[h][t]); /* f16_mad: fma(v, vs, acc) */
                for (int i = 0; i < 16 * C; i++) acc[h][i] = round_f16(vfmaq_f32(acc[h][i], vh[i], w));
            }
        }
    }
    for (int h = 0; h < G; h++) {
        const float32x4_t inv = vdupq_n_f32(1.0f / S[h]);
        for (int i = 0; i < 16 * C; i++) vst1q_f32(a[h].out + 4 * i, vmulq_f32(acc[h][i], inv));
    }
}

#define GROUP_C(a, C, g)                                                                                    \
    switch (g) {                                                                                            \
    case 1: attn_group_c(a, C, 1); break;                                                                   \
    case 2: attn_group_c(a, C, 2); break;                                                                   \
    case 3: attn_group_c(a, C, 3); break;                                                                   \
    default: attn_group_c(a, C, 4); break;                                                                  \
    }

static void attn_row_neon(const struct weft_cpu_attn_args *a)
{
    switch (a->hd) {
    case 64: attn_group_c(a, 1, 1); break;
    case 128: attn_group_c(a, 2, 1); break;
    case 192: attn_group_c(a, 3, 1); break;
    default: attn_group_c(a, 4, 1); break; /* 256 */
    }
}

static void attn_group_neon(const struct weft_cpu_attn_args *a, int n)
{
    while (n > 0) {
        const int g = n < 4 ? n : n == 5 ? 2 : n == 6 ? 3 : 4; /* no group of one after a group */
        switch (a->hd) {
        case 64: GROUP_C(a, 1, g); break;
        case 128: GROUP_C(a, 2, g); break;
        case 192: GROUP_C(a, 3, g); break;
        default: GROUP_C(a, 4, g); break; /* 256 */
        }
        a += g;
        n -= g;
    }
}

void weft_cpu_kernels_fill_neon_attn(struct weft_cpu_kernels *k)
{
    k->attn_row = attn_row_neon;
    k->attn_group = attn_group_neon;
}

#else

void weft_cpu_kernels_fill_neon_attn(struct weft_cpu_kernels *k) { (void)k; }

#endif
