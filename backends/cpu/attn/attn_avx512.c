/* AVX-512 attention row (struct weft_cpu_attn_args), bit-identical to
 * weft_cpu_attn_row_generic (tests/cpu/test_cpu_attn.c checks it) for
 * head_dim 64, 128, 192, 256.
 *
 * The generic row does, per position: a ggml_vec_dot_f16 of K and the
 * F16-rounded q, an online-softmax step with libm expf, and an F16
 * accumulator update, each a call into the kernel table, with the
 * accumulator in memory as halves. Here:
 *  - the scores of a KV block's 16 tokens are computed together: per token
 *    the four 16-lane accumulators (element e in accumulator (e/16)%4, lane
 *    e%16, fma over 64-element chunks) and (s0+s2)+(s1+s3) exactly as the
 *    dot, then the sixteen _mm512_reduce_add_ps trees (halves 512 -> 256 ->
 *    128 -> 64 -> 32) run transposed, four shuffle+add steps for all
 *    tokens at once, each lane adding the very same pairs;
 *  - the accumulator stays in registers as floats that are always exact
 *    halves: every update is rounded to F16 and back (vcvtps2ph with
 *    round-to-nearest-even, vcvtph2ps), which is what storing it as halves
 *    and loading it again does;
 *  - the softmax steps of a block's 16 tokens: the running maximum and each
 *    token's expf argument in position order (scalar compares and
 *    subtractions, as the row does them), the 16 expf at once with
 *    weft_expf16 (glibc's expf, attn/expf_libm512.h; libm's own where that
 *    would not be equal), then S = fma(S, ms, vs) in position order. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>
#include <math.h>

#include "backends/cpu/attn/attn_steps.h"
#include "backends/cpu/attn/expf_libm512.h"

/* weft_expf16 equals this process's libm expf (checked once when the table
 * is filled); false: the softmax steps call libm's expf one at a time */
static bool vexp_ok;

#define AI static inline __attribute__((always_inline))

AI WEFT_AVX512 __m512 h16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
AI WEFT_AVX512 __m512 round_f16(__m512 x)
{
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* (s0+s2)+(s1+s3) of one token's K row against q (C chunks of 64) */
AI WEFT_AVX512 __m512 token_lanes(const uint8_t *k, const __m512 *q, const int C)
{
    const __m512 z = _mm512_setzero_ps();
    __m512 s0 = z, s1 = z, s2 = z, s3 = z;
    for (int c = 0; c < C; c++) {
        s0 = _mm512_fmadd_ps(h16(k + 128 * c), q[4 * c], s0);
        s1 = _mm512_fmadd_ps(h16(k + 128 * c + 32), q[4 * c + 1], s1);
        s2 = _mm512_fmadd_ps(h16(k + 128 * c + 64), q[4 * c + 2], s2);
        s3 = _mm512_fmadd_ps(h16(k + 128 * c + 96), q[4 * c + 3], s3);
    }
    return _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
}

/* r[0..15] -> lane t = _mm512_reduce_add_ps(r[t]) */
AI WEFT_AVX512 __m512 reduce16(const __m512 *r)
{
    __m512 t[8], u[4], w[2];
    for (int i = 0; i < 8; i++) /* t: lanes 0..7 token 2i, 8..15 token 2i+1: x[l] + x[l+8] */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++) /* u: quarter q token 4i+q: t[l] + t[l+4] */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++) /* w: quarter q (u0+u2, u1+u3) of tokens 8i+q, 8i+4+q */
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* x = w0 + w1: quarter q element e is token q + 4e */
    const __m512 x = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), x);
}

/* lane i <- lane i - K, lanes below K <- fill */
AI WEFT_AVX512 __m512 shl16(__m512 x, const int K, __m512 fill)
{
    const __m512i idx = _mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(K));
    return _mm512_mask_permutexvar_ps(fill, (__mmask16)(0xFFFFu << K), idx, x);
}

/* The online-softmax steps of one head over a block's scores s (attn_steps.h),
 * but for S: weft_attn_softmax_args, the vector expf and the ms / vs of
 * weft_attn_softmax_finish. The maximum before token t (pm) is a scan of the
 * scores, NaN and tokens past nt as -inf (they never raise it): max_ps(later,
 * earlier) keeps the earlier value on ties (-0 == +0), so any grouping gives
 * the scalar loop's m = s > m ? s : m. A token raises it where s > pm, exactly
 * where the loop moves m; its argument is pm - s, otherwise s - pm (0 past nt). */
AI WEFT_AVX512 void softmax_vec16(__m512 s, int nt, float *M, float *ms, float *vs)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    const __mmask16 valid = (__mmask16)((1u << nt) - 1u);
    __m512 x = _mm512_mask_mov_ps(ninf, valid & _mm512_cmp_ps_mask(s, s, _CMP_ORD_Q), s);
    x = _mm512_max_ps(x, shl16(x, 1, ninf));
    x = _mm512_max_ps(x, shl16(x, 2, ninf));
    x = _mm512_max_ps(x, shl16(x, 4, ninf));
    x = _mm512_max_ps(x, shl16(x, 8, ninf));
    const __m512 m = _mm512_set1_ps(*M);
    const __m512 pm = _mm512_max_ps(shl16(x, 1, ninf), m);
    *M = _mm512_cvtss_f32(_mm512_max_ps(_mm512_permutexvar_ps(_mm512_set1_epi32(15), x), m));
    const __mmask16 up = valid & _mm512_cmp_ps_mask(s, pm, _CMP_GT_OQ);
    const __m512 arg = _mm512_maskz_mov_ps(valid, _mm512_mask_blend_ps(up, _mm512_sub_ps(s, pm), _mm512_sub_ps(pm, s)));
    const __m512 e = weft_expf16(arg);
    _mm512_storeu_ps(ms, _mm512_mask_blend_ps(up, one, e));
    _mm512_storeu_ps(vs, _mm512_mask_blend_ps(up, e, one));
}

/* the softmax steps of G heads over a block: their scores s[h], then the
 * heads' S chains side by side (with libm's expf one at a time where the
 * vector one differs from it) */
AI WEFT_AVX512 void softmax_heads(const __m512 *s, const int G, int nt, float *M, float *S, float (*ms)[16],
                                  float (*vs)[16])
{
    if (!vexp_ok) {
        float sc[16] __attribute__((aligned(64)));
        for (int h = 0; h < G; h++) {
            _mm512_store_ps(sc, s[h]);
            weft_attn_softmax_libm(sc, nt, &M[h], &S[h], ms[h], vs[h]);
        }
        return;
    }
    for (int h = 0; h < G; h++) softmax_vec16(s[h], nt, &M[h], ms[h], vs[h]);
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < G; h++) S[h] = fmaf(S[h], ms[h][t], vs[h][t]);
}

AI WEFT_AVX512 void attn_row_c(const struct weft_cpu_attn_args *a, const int C)
{
    __m512 q[16], acc[16];
    for (int i = 0; i < 4 * C; i++) {
        q[i] = round_f16(_mm512_loadu_ps(a->q + 16 * i));
        acc[i] = _mm512_setzero_ps();
    }
    float M = -INFINITY, S = 0.0f;
    for (int64_t p0 = 0; p0 < a->n_pos; p0 += 16) {
        const uint8_t *kb = a->k0 + (size_t)a->bt[p0 / 16] * a->block_bytes;
        const int nt = a->n_pos - p0 < 16 ? (int)(a->n_pos - p0) : 16;
        weft_attn_prefetch_block(a, p0, 2 * C);
        __m512 r[16];
        for (int t = 0; t < 16; t++) r[t] = t < nt ? token_lanes(kb + (size_t)t * a->tok_bytes, q, C) : _mm512_setzero_ps();
        const __m512 sc = _mm512_mul_ps(reduce16(r), _mm512_set1_ps(a->scale));
        float ms[1][16] __attribute__((aligned(64))), vs[1][16] __attribute__((aligned(64)));
        softmax_heads(&sc, 1, nt, &M, &S, ms, vs);
        for (int t = 0; t < nt; t++) {
            if (ms[0][t] != 1.0f) { /* a new maximum (ms == 1 leaves acc as it is) */
                const __m512 m = _mm512_set1_ps(ms[0][t]);
                for (int i = 0; i < 4 * C; i++) acc[i] = round_f16(_mm512_mul_ps(acc[i], m));
            }
            const uint8_t *v = kb + (size_t)t * a->tok_bytes + a->v_off;
            const __m512 vv = _mm512_set1_ps(vs[0][t]);
            for (int i = 0; i < 4 * C; i++) acc[i] = round_f16(_mm512_fmadd_ps(h16(v + 32 * i), vv, acc[i]));
        }
    }
    const __m512 inv = _mm512_set1_ps(1.0f / S);
    for (int i = 0; i < 4 * C; i++) _mm512_storeu_ps(a->out + 16 * i, _mm512_mul_ps(acc[i], inv));
}

static WEFT_AVX512 void attn_row_512(const struct weft_cpu_attn_args *a)
{
    switch (a->hd) {
    case 64: attn_row_c(a, 1); break;
    case 128: attn_row_c(a, 2); break;
    case 192: attn_row_c(a, 3); break;
    default: attn_row_c(a, 4); break; /* 256 */
    }
}

/* G heads sharing one KV head and positions (GQA), each exactly attn_row_c's
 * computation, in three phases per KV block: the G x 16 scores, each K row
 * converted once for all heads; the softmax steps per head (softmax_steps,
 * whose expf would otherwise spill every live zmm); then the accumulator
 * updates with no call in between, each V row converted once for all heads
 * and the G accumulator chains interleaved. */
AI WEFT_AVX512 void attn_group_c(const struct weft_cpu_attn_args *a, const int C, const int G)
{
    __m512 q[4][8], acc[4][8];
    float M[4], S[4];
    for (int h = 0; h < G; h++) {
        for (int i = 0; i < 4 * C; i++) {
            q[h][i] = round_f16(_mm512_loadu_ps(a[h].q + 16 * i));
            acc[h][i] = _mm512_setzero_ps();
        }
        M[h] = -INFINITY;
        S[h] = 0.0f;
    }
    const float scale = a[0].scale;
    for (int64_t p0 = 0; p0 < a[0].n_pos; p0 += 16) {
        const uint8_t *kb = a[0].k0 + (size_t)a[0].bt[p0 / 16] * a[0].block_bytes;
        const int nt = a[0].n_pos - p0 < 16 ? (int)(a[0].n_pos - p0) : 16;
        weft_attn_prefetch_block(a, p0, 2 * C);
        __m512 r[4][16]; /* per head, per token: token_lanes' (s0+s2)+(s1+s3), each K row converted once */
        for (int t = 0; t < 16; t++) {
            if (t >= nt) {
                for (int h = 0; h < G; h++) r[h][t] = _mm512_setzero_ps();
                continue;
            }
            const uint8_t *k = kb + (size_t)t * a[0].tok_bytes;
            __m512 kh[8];
            for (int i = 0; i < 4 * C; i++) kh[i] = h16(k + 32 * i);
            for (int h = 0; h < G; h++) {
                const __m512 z = _mm512_setzero_ps();
                __m512 s0 = z, s1 = z, s2 = z, s3 = z;
                for (int c = 0; c < C; c++) {
                    s0 = _mm512_fmadd_ps(kh[4 * c], q[h][4 * c], s0);
                    s1 = _mm512_fmadd_ps(kh[4 * c + 1], q[h][4 * c + 1], s1);
                    s2 = _mm512_fmadd_ps(kh[4 * c + 2], q[h][4 * c + 2], s2);
                    s3 = _mm512_fmadd_ps(kh[4 * c + 3], q[h][4 * c + 3], s3);
                }
                r[h][t] = _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
            }
        }
        __m512 sc[4];
        for (int h = 0; h < G; h++) sc[h] = _mm512_mul_ps(reduce16(r[h]), _mm512_set1_ps(scale));
        float ms[4][16] __attribute__((aligned(64))), vs[4][16] __attribute__((aligned(64)));
        softmax_heads(sc, G, nt, M, S, ms, vs);
        for (int t = 0; t < nt; t++) {
            const uint8_t *v = kb + (size_t)t * a[0].tok_bytes + a[0].v_off;
            __m512 vh[8];
            for (int i = 0; i < 4 * C; i++) vh[i] = h16(v + 32 * i);
            for (int h = 0; h < G; h++) {
                if (ms[h][t] != 1.0f) { /* a new maximum (ms == 1 leaves acc as it is) */
                    const __m512 m = _mm512_set1_ps(ms[h][t]);
                    for (int i = 0; i < 4 * C; i++) acc[h][i] = round_f16(_mm512_mul_ps(acc[h][i], m));
                }
                const __m512 vv = _mm512_set1_ps(vs[h][t]);
                for (int i = 0; i < 4 * C; i++) acc[h][i] = round_f16(_mm512_fmadd_ps(vh[i], vv, acc[h][i]));
            }
        }
    }
    for (int h = 0; h < G; h++) {
        const __m512 inv = _mm512_set1_ps(1.0f / S[h]);
        for (int i = 0; i < 4 * C; i++) _mm512_storeu_ps(a[h].out + 16 * i, _mm512_mul_ps(acc[h][i], inv));
    }
}

static WEFT_AVX512 void attn_group_512(const struct weft_cpu_attn_args *a, int n)
{
    while (n > 0) {
        const int g = n < 4 ? n : n == 5 ? 2 : n == 6 ? 3 : 4; /* no group of one after a group */
        if (a->hd == 64) {
            switch (g) {
            case 1: attn_group_c(a, 1, 1); break;
            case 2: attn_group_c(a, 1, 2); break;
            case 3: attn_group_c(a, 1, 3); break;
            default: attn_group_c(a, 1, 4); break;
            }
        } else if (a->hd == 128) {
            switch (g) {
            case 1: attn_group_c(a, 2, 1); break;
            case 2: attn_group_c(a, 2, 2); break;
            case 3: attn_group_c(a, 2, 3); break;
            default: attn_group_c(a, 2, 4); break;
            }
        } else {
            for (int h = 0; h < g; h++) attn_row_512(a + h);
        }
        a += g;
        n -= g;
    }
}

void weft_cpu_kernels_fill_avx512_attn(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    /* the tables are filled on every CPU: run the check only where it can */
    vexp_ok = weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512) && weft_cpu_expf16_matches_libm();
    k->attn_row = attn_row_512;
    k->attn_group = attn_group_512;
}

#else

void weft_cpu_kernels_fill_avx512_attn(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
