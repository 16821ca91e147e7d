/* AVX2 + F16C flash attention: the F16 accumulator updates (f16_mad,
 * f16_scale), bit-identical to the scalar ones in cpu_kernels.c (F16C converts
 * with round-to-nearest-even exactly as weft_f32_to_half does for every
 * non-NaN value, and the accumulator never holds NaN unless its inputs do),
 * and the attention row and group forms, bit-identical to
 * weft_cpu_attn_row_generic (tests/cpu/test_cpu_attn.c checks them) for
 * head_dim 64, 128, 192, 256. As attn_avx512.c does with 16 lanes:
 *  - per token, the score is dot_f16_avx2's: eight 8-lane fma chains (element
 *    e in chain (e/8)%8), lo = (s0+s4)+(s2+s6), hi = (s1+s5)+(s3+s7), then
 *    hsum16(lo, hi); the lo + hi adds run per token, and the rest of hsum16
 *    (128-bit halves, then pairs, then the last two) for 8 tokens at once
 *    transposed, each lane adding the very same pairs;
 *  - the accumulator as floats that are always exact halves (every update
 *    rounded to F16 and back, as storing and loading halves does);
 *  - the softmax steps of a KV block's 16 tokens around one vector expf
 *    (attn/expf_libm256.h: glibc's, where it equals this libm's). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
#include <immintrin.h>
#include <math.h>

#include "backends/cpu/attn/attn_steps.h"
#include "backends/cpu/attn/expf_libm256.h"

WEFT_AVX2 static void f16_mad_avx2(weft_half *acc, const weft_half *v, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        a = _mm256_fmadd_ps(b, vs, a);
        _mm_storeu_si128((__m128i *)(acc + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) acc[i] = weft_f32_to_half(fmaf(weft_half_to_f32(v[i]), s, weft_half_to_f32(acc[i])));
}

WEFT_AVX2 static void f16_scale_avx2(weft_half *acc, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + i)));
        _mm_storeu_si128((__m128i *)(acc + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(a, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) acc[i] = weft_f32_to_half(weft_half_to_f32(acc[i]) * s);
}

/* weft_expf8 equals this process's libm expf (checked once when the table is
 * filled); false: the softmax steps call libm's expf one at a time */
static bool vexp_ok;

#define AI static inline __attribute__((always_inline))

AI WEFT_AVX2 __m256 h8(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AI WEFT_AVX2 __m256 round_f16(__m256 x)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* t[0..7] (each token's lo + hi) -> lane i = the rest of hsum16 on t[i]:
 * u = t's 128-bit halves added, v = (u0+u2, u1+u3), v0 + v1 */
AI WEFT_AVX2 __m256 reduce8(const __m256 *t)
{
    __m256 p[4];
    for (int i = 0; i < 4; i++) /* lanes 0..3: u of token 2i, 4..7: of token 2i+1 */
        p[i] = _mm256_add_ps(_mm256_permute2f128_ps(t[2 * i], t[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(t[2 * i], t[2 * i + 1], 0x31));
    /* (v0, v1) of tokens 0, 2 | 1, 3 and of 4, 6 | 5, 7 */
    const __m256 q0 = _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 q1 = _mm256_add_ps(_mm256_shuffle_ps(p[2], p[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(p[2], p[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* tokens 0, 2, 4, 6 | 1, 3, 5, 7 */
    const __m256 x = _mm256_add_ps(_mm256_shuffle_ps(q0, q1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(q0, q1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* lane i <- lane i - K, lanes below K <- fill (K = 1, 2, 4) */
#define SHL_LANES(x, K, fill)                                                                              \
    _mm256_blend_ps(_mm256_permutevar8x32_ps((x), _mm256_setr_epi32(0, 1 - (K) < 0 ? 0 : 1 - (K),         \
                                                                     2 - (K) < 0 ? 0 : 2 - (K),              \
                                                                     3 - (K) < 0 ? 0 : 3 - (K), 4 - (K),     \
                                                                     5 - (K), 6 - (K), 7 - (K))),            \
                    (fill), (1 << (K)) - 1)

/* lane t = the running maximum after x[0..t] as the scalar steps keep it (m
 * = s > m ? s : m, from -inf): the earliest of the greatest values, which a
 * scan can build in any grouping since max_ps(later, earlier) keeps the
 * earlier one on ties (-0 == +0); no lane may be NaN */
AI WEFT_AVX2 __m256 scan_max8(__m256 x)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    x = _mm256_max_ps(x, SHL_LANES(x, 1, ninf));
    x = _mm256_max_ps(x, SHL_LANES(x, 2, ninf));
    return _mm256_max_ps(x, SHL_LANES(x, 4, ninf));
}

AI WEFT_AVX2 __m256 lane7(__m256 x) { return _mm256_permutevar8x32_ps(x, _mm256_set1_epi32(7)); }

/* weft_attn_softmax_args + vector expf + the ms / vs selection of
 * weft_attn_softmax_finish for one head's block scores s0 (tokens 0..7), s1
 * (8..15), in vectors: the maximum before token t (pm) comes from a scan of
 * the scores (NaN and tokens past nt as -inf, which never raise it), a token
 * raises it where s > pm, exactly the tokens the scalar loop moves m on, and
 * its argument is pm - s, otherwise s - pm (0 past nt). S is left to the
 * caller (a serial fma per token). */
AI WEFT_AVX2 void softmax_vec(__m256 s0, __m256 s1, int nt, float *M, float *ms, float *vs)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 v0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nt), iota));
    const __m256 v1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nt - 8), iota));
    const __m256 c0 = _mm256_blendv_ps(ninf, s0, _mm256_and_ps(v0, _mm256_cmp_ps(s0, s0, _CMP_ORD_Q)));
    const __m256 c1 = _mm256_blendv_ps(ninf, s1, _mm256_and_ps(v1, _mm256_cmp_ps(s1, s1, _CMP_ORD_Q)));
    const __m256 i0 = scan_max8(c0);
    const __m256 last0 = lane7(i0);
    const __m256 i1 = _mm256_max_ps(scan_max8(c1), last0);
    const __m256 m = _mm256_set1_ps(*M);
    const __m256 pm0 = _mm256_max_ps(SHL_LANES(i0, 1, ninf), m);
    const __m256 pm1 = _mm256_max_ps(SHL_LANES(i1, 1, last0), m);
    *M = _mm256_cvtss_f32(_mm256_max_ps(lane7(i1), m));
    const __m256 up0 = _mm256_and_ps(v0, _mm256_cmp_ps(s0, pm0, _CMP_GT_OQ));
    const __m256 up1 = _mm256_and_ps(v1, _mm256_cmp_ps(s1, pm1, _CMP_GT_OQ));
    const __m256 a0 = _mm256_and_ps(v0, _mm256_blendv_ps(_mm256_sub_ps(s0, pm0), _mm256_sub_ps(pm0, s0), up0));
    const __m256 a1 = _mm256_and_ps(v1, _mm256_blendv_ps(_mm256_sub_ps(s1, pm1), _mm256_sub_ps(pm1, s1), up1));
    const __m256 e0 = weft_expf8(a0);
    _mm256_storeu_ps(ms, _mm256_blendv_ps(one, e0, up0));
    _mm256_storeu_ps(vs, _mm256_blendv_ps(e0, one, up0));
    if (nt > 8) {
        const __m256 e1 = weft_expf8(a1);
        _mm256_storeu_ps(ms + 8, _mm256_blendv_ps(one, e1, up1));
        _mm256_storeu_ps(vs + 8, _mm256_blendv_ps(e1, one, up1));
    }
}

/* G heads sharing one KV head and positions (GQA; G = 1: a single row), hd
 * = 64 C, in three phases per KV block: the G x 16 scores, each K row
 * converted once for all heads; the softmax steps per head; then the
 * accumulator updates, each V row converted once for all heads. */
AI WEFT_AVX2 void attn_group_c(const struct weft_cpu_attn_args *a, const int C, const int G)
{
    __m256 q[4][32], acc[4][32];
    float M[4], S[4];
    for (int h = 0; h < G; h++) {
        for (int i = 0; i < 8 * C; i++) {
            q[h][i] = round_f16(_mm256_loadu_ps(a[h].q + 8 * i));
            acc[h][i] = _mm256_setzero_ps();
        }
        M[h] = -INFINITY;
        S[h] = 0.0f;
    }
    const __m256 scale = _mm256_set1_ps(a[0].scale);
    for (int64_t p0 = 0; p0 < a[0].n_pos; p0 += 16) {
        const uint8_t *kb = a[0].k0 + (size_t)a[0].bt[p0 / 16] * a[0].block_bytes;
        const int nt = a[0].n_pos - p0 < 16 ? (int)(a[0].n_pos - p0) : 16;
        weft_attn_prefetch_block(a, p0, 2 * C);
        __m256 r[4][16]; /* per head, per token: lo + hi, each K row converted once */
        for (int t = 0; t < 16; t++) {
            if (t >= nt) {
                for (int h = 0; h < G; h++) r[h][t] = _mm256_setzero_ps();
                continue;
            }
            const uint8_t *k = kb + (size_t)t * a[0].tok_bytes;
            __m256 kh[32];
            for (int i = 0; i < 8 * C; i++) kh[i] = h8(k + 16 * i);
            for (int h = 0; h < G; h++) {
                __m256 s[8];
                for (int j = 0; j < 8; j++) s[j] = _mm256_fmadd_ps(kh[j], q[h][j], _mm256_setzero_ps());
                for (int c = 1; c < C; c++)
                    for (int j = 0; j < 8; j++) s[j] = _mm256_fmadd_ps(kh[8 * c + j], q[h][8 * c + j], s[j]);
                const __m256 lo = _mm256_add_ps(_mm256_add_ps(s[0], s[4]), _mm256_add_ps(s[2], s[6]));
                const __m256 hi = _mm256_add_ps(_mm256_add_ps(s[1], s[5]), _mm256_add_ps(s[3], s[7]));
                r[h][t] = _mm256_add_ps(lo, hi);
            }
        }
        float sc[16] __attribute__((aligned(32)));
        float ms[4][16] __attribute__((aligned(32))), vs[4][16] __attribute__((aligned(32)));
        if (vexp_ok) {
            for (int h = 0; h < G; h++)
                softmax_vec(_mm256_mul_ps(reduce8(r[h]), scale),
                            nt > 8 ? _mm256_mul_ps(reduce8(r[h] + 8), scale) : _mm256_setzero_ps(), nt, &M[h], ms[h],
                            vs[h]);
            for (int t = 0; t < nt; t++) /* the heads' S chains side by side */
                for (int h = 0; h < G; h++) S[h] = fmaf(S[h], ms[h][t], vs[h][t]);
        } else {
            for (int h = 0; h < G; h++) {
                _mm256_store_ps(sc, _mm256_mul_ps(reduce8(r[h]), scale));
                if (nt > 8) _mm256_store_ps(sc + 8, _mm256_mul_ps(reduce8(r[h] + 8), scale));
                weft_attn_softmax_libm(sc, nt, &M[h], &S[h], ms[h], vs[h]);
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *v = kb + (size_t)t * a[0].tok_bytes + a[0].v_off;
            __m256 vh[32];
            for (int i = 0; i < 8 * C; i++) vh[i] = h8(v + 16 * i);
            for (int h = 0; h < G; h++) {
                if (ms[h][t] != 1.0f) { /* a new maximum (ms == 1 leaves acc as it is) */
                    const __m256 m = _mm256_set1_ps(ms[h][t]);
                    for (int i = 0; i < 8 * C; i++) acc[h][i] = round_f16(_mm256_mul_ps(acc[h][i], m));
                }
                const __m256 vv = _mm256_set1_ps(vs[h][t]);
                for (int i = 0; i < 8 * C; i++) acc[h][i] = round_f16(_mm256_fmadd_ps(vh[i], vv, acc[h][i]));
            }
        }
    }
    for (int h = 0; h < G; h++) {
        const __m256 inv = _mm256_set1_ps(1.0f / S[h]);
        for (int i = 0; i < 8 * C; i++) _mm256_storeu_ps(a[h].out + 8 * i, _mm256_mul_ps(acc[h][i], inv));
    }
}

static WEFT_AVX2 void attn_row_avx2(const struct weft_cpu_attn_args *a)
{
    switch (a->hd) {
    case 64: attn_group_c(a, 1, 1); break;
    case 128: attn_group_c(a, 2, 1); break;
    case 192: attn_group_c(a, 3, 1); break;
    default: attn_group_c(a, 4, 1); break; /* 256 */
    }
}

static WEFT_AVX2 void attn_group_avx2(const struct weft_cpu_attn_args *a, int n)
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
            for (int h = 0; h < g; h++) attn_row_avx2(a + h);
        }
        a += g;
        n -= g;
    }
}

void weft_cpu_kernels_fill_avx2_attn(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    /* the tables are filled on every CPU: run the check only where it can */
    vexp_ok = weft_cpu_isa_supported(WEFT_CPU_ISA_AVX2) && weft_cpu_expf8_matches_libm();
    k->f16_mad = f16_mad_avx2;
    k->f16_scale = f16_scale_avx2;
    k->attn_row = attn_row_avx2;
    k->attn_group = attn_group_avx2;
}
#else
void weft_cpu_kernels_fill_avx2_attn(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
