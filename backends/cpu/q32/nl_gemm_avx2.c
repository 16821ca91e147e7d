/* AVX2 prefill tiles (weft_cpu_gemm_fn) and four-row decode dots
 * (weft_cpu_dot4_fn, the tiles' 4 x 1 form) for the code-book types against Q8_0
 * activations: IQ4_NL (gemm: the one-row dot's order; gemm_mm: tinyBLAS's
 * one-chain order, which the dense prefill takes) and MXFP4 (gemm, which the
 * mixtures' MATMUL_ID prefill of gpt-oss takes), bit-identical to the same
 * table's dot / dot_mm (kquant/kq_low_avx2.c, cpu_ref_dot.c dot_nl_pairs):
 *   - int32 lane l of a block = the exact sum over its elements 4l..4l+3 of
 *     value * x (the code-book values through vpshufb, their signs moved onto x);
 *   - the dot: blocks 0, 2, 4, .. into one 8-lane float accumulator and 1, 3,
 *     5, .. into a second, acc = fma(dx * dw, float(lane), acc); then
 *     hsum_float_8(acc1 + acc2); an odd last block adds its int total as
 *     sumf = fma(dx * dw, float(total), sumf);
 *   - dot_mm (IQ4_NL): one accumulator, fma(dw * dx, ...), hsum_float_8.
 * Each MR x NR micro-tile loads and unpacks a weight block once for NR
 * activation rows and an activation block once for MR weight rows. The
 * values' signs move onto the activations (vpsignb), exact because the
 * activation quantizers never write -128 (they clamp to +-127). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/q32/q32_avx2.h"

#define AI static inline __attribute__((always_inline))
#define NL_MR 4 /* (4 x 2 measured best of 2x2 .. 4x2 here) */
#define NL_NR 2

/* the block's 32 code-book values (low nibbles: elements 0..15, then the high ones) */
AI WEFT_AVX2 __m256i nl_vals(const uint8_t *qs, __m256i book)
{
    return _mm256_shuffle_epi8(book, bytes_from_nibbles_32(qs));
}

/* a weight block's scale as the dot reads it (MXFP4: e8m0 halved; IQ4_NL: its f16 d) */
AI WEFT_AVX2 float nl_dw(const uint8_t *b, const int MX)
{
    if (MX) return weft_e8m0_to_f32_half(b[0]);
    weft_half d;
    memcpy(&d, b, 2);
    return h2f(d);
}

/* MR weight rows (blocks of bs bytes, rows ws apart) x NR activation rows;
 * ONE: tinyBLAS's one-chain order (IQ4_NL's dot_mm), else the dot's two */
AI WEFT_AVX2 void nl_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out, size_t ldo,
                          const int MR, const int NR, const int MX, const int ONE)
{
    static const int8_t kv_nl[16] = WEFT_KVALUES_IQ4NL, kv_mx[16] = WEFT_KVALUES_MXFP4;
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(MX ? kv_mx : kv_nl)));
    const size_t bs = MX ? sizeof(struct weft_block_mxfp4) : sizeof(struct weft_block_iq4_nl);
    const size_t qoff = MX ? 1 : 2; /* the nibbles' offset in a block */
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][NL_MR][NL_NR];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[c][i][j] = _mm256_setzero_ps();
    const int64_t paired = ONE ? nb : nb & ~(int64_t)1;
    /* ONE: every block into acc[0]; else blocks in pairs, the second into acc[1] */
    for (int64_t b0 = 0; b0 < paired; b0 += ONE ? 1 : 2)
        for (int c = 0; c < (ONE ? 1 : 2); c++) {
            const int64_t b = b0 + c;
            float dw[4] = {0, 0, 0, 0};
            float pr[NL_NR][4] __attribute__((aligned(16)));
            for (int i = 0; i < MR; i++) dw[i] = nl_dw(w + i * ws + (size_t)b * bs, MX);
            const __m128 dw4 = _mm_setr_ps(dw[0], dw[1], dw[2], dw[3]); /* (no store-to-load through memory) */
            for (int j = 0; j < NR; j++) {
                const struct weft_block_q8_0 *xb = (const struct weft_block_q8_0 *)(x + j * xs) + b;
                /* dx * dw as the dot's scalar product (dw * dx in dot_mm: the same float) */
                _mm_store_ps(pr[j], _mm_mul_ps(_mm_set1_ps(h2f(xb->d)), dw4));
            }
            __asm__("" : "+m"(pr));
            for (int i = 0; i < MR; i++) {
                const __m256i v = nl_vals(w + i * ws + (size_t)b * bs + qoff, book);
                const __m256i va = _mm256_sign_epi8(v, v);
                for (int j = 0; j < NR; j++) {
                    const struct weft_block_q8_0 *xb = (const struct weft_block_q8_0 *)(x + j * xs) + b;
                    const __m256i p =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(va, _mm256_sign_epi8(load32(xb->qs), v)), ones);
                    acc[c][i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pr[j][i]), _mm256_cvtepi32_ps(p), acc[c][i][j]);
                }
            }
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            if (ONE) {
                out[j * ldo + i] = hsum_float_8(acc[0][i][j]);
                continue;
            }
            float sumf = hsum_float_8(_mm256_add_ps(acc[0][i][j], acc[1][i][j]));
            if (paired < nb) { /* the odd last block: its int total, one scalar fma */
                const uint8_t *wb = w + i * ws + (size_t)paired * bs;
                const struct weft_block_q8_0 *xb = (const struct weft_block_q8_0 *)(x + j * xs) + paired;
                const __m256i v = nl_vals(wb + qoff, book);
                const __m256i p = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(load32(xb->qs), v)), ones);
                int32_t l[8];
                _mm256_storeu_si256((__m256i *)l, p);
                int sumi = 0;
                for (int k = 0; k < 8; k++) sumi += l[k];
                sumf = ggml_scalar_madd(h2f(xb->d) * nl_dw(wb, MX), (float)sumi, sumf);
            }
            out[j * ldo + i] = sumf;
        }
}

#define NL_CASE(m, r, MX, ONE)                                                                                     \
    case (m) * 8 + (r): nl_tile(wp, ws, xp, xs, nb, o, ldo, m, r, MX, ONE); break;
#define NL_DRIVER(name, MX, ONE)                                                                                   \
    static WEFT_AVX2 void name(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,     \
                               float *out, size_t ldo)                                                            \
    {                                                                                                              \
        const int64_t nb = n / 32;                                                                                 \
        for (int j = 0; j < nx; j += NL_NR) {                                                                      \
            const int nr = nx - j < NL_NR ? nx - j : NL_NR;                                                        \
            for (int i = 0; i < nw; i += NL_MR) {                                                                  \
                const int mr = nw - i < NL_MR ? nw - i : NL_MR;                                                    \
                const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = (const uint8_t *)x + (size_t)j * xs; \
                float *o = out + (size_t)j * ldo + i;                                                              \
                switch (mr * 8 + nr) {                                                                             \
                    NL_CASE(1, 1, MX, ONE) NL_CASE(1, 2, MX, ONE) NL_CASE(2, 1, MX, ONE) NL_CASE(2, 2, MX, ONE)    \
                    NL_CASE(3, 1, MX, ONE) NL_CASE(3, 2, MX, ONE) NL_CASE(4, 1, MX, ONE) NL_CASE(4, 2, MX, ONE)    \
                default: break;                                                                                    \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }

NL_DRIVER(gemm_iq4_nl_avx2, 0, 0)
NL_DRIVER(gemm_mm_iq4_nl_avx2, 0, 1)
NL_DRIVER(gemm_mxfp4_avx2, 1, 0)

/* decode: four rows against one activation row (weft_cpu_dot4_fn), the tile's 4 x 1 form */
static WEFT_AVX2 void dot4_iq4_nl_avx2(const void *w, size_t stride, const void *x, int64_t n, float out[4])
{
    nl_tile(w, stride, x, 0, n / 32, out, 1, 4, 1, 0, 0);
}

static WEFT_AVX2 void dot4_mxfp4_avx2(const void *w, size_t stride, const void *x, int64_t n, float out[4])
{
    nl_tile(w, stride, x, 0, n / 32, out, 1, 4, 1, 1, 0);
}

void weft_cpu_kernels_fill_avx2_nl_gemm(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->gemm[WEFT_TYPE_IQ4_NL] = gemm_iq4_nl_avx2;
    k->gemm_mm[WEFT_TYPE_IQ4_NL] = gemm_mm_iq4_nl_avx2;
    k->gemm[WEFT_TYPE_MXFP4] = gemm_mxfp4_avx2;
    k->dot4[WEFT_TYPE_IQ4_NL] = dot4_iq4_nl_avx2;
    k->dot4[WEFT_TYPE_MXFP4] = dot4_mxfp4_avx2;
}

#else

void weft_cpu_kernels_fill_avx2_nl_gemm(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
