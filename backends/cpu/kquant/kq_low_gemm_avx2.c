/* AVX2 prefill tiles (weft_cpu_gemm_fn) for Q2_K and Q3_K against Q8_K
 * activations, bit-identical to the table's one-row dots
 * (kquant/kq_low_avx2.c, cpu_ref_dot.c dot_q2_k / dot_q3_k): the same int32
 * lanes per block (maddubs pairs of the 2-bit values, Q3_K's missing third
 * bit as a second maddubs taken off, vpmaddwd by the 16-element scales) and
 * the same float steps per output (Q2_K: the mins' fma, then the quants';
 * Q3_K: one fma; hsum_float_8). Each weight row's block is unpacked (its
 * 2-bit planes, third bits and scales) once for NR activation rows, whose
 * int lanes stay in registers through the block. */
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
#define LO_NR 6 /* activation rows per tile */

/* int16 scales for one 32-element chunk: sc[a] for its elements 0..15, sc[a+1] for 16..31 */
AI WEFT_AVX2 __m256i sc16_pair(__m128i sc8, int a)
{
    const __m128i sel = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_add_epi8(sel, _mm_set1_epi8((char)a))));
}

AI WEFT_AVX2 const struct weft_block_q8_k *xblk(const uint8_t *x, size_t xs, int j, int64_t b)
{
    return (const struct weft_block_q8_k *)(x + (size_t)j * xs) + b;
}

/* one Q2_K weight row against NR activation rows: out[j * ldo] */
AI WEFT_AVX2 void q2k_tile(const uint8_t *w, const uint8_t *x, size_t xs, int64_t nb, float *out, size_t ldo,
                           const int NR)
{
    const struct weft_block_q2_k *wr = (const struct weft_block_q2_k *)w;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc[LO_NR];
    for (int j = 0; j < NR; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const float dw = weft_half_to_f32(wr[b].d), dmw = weft_half_to_f32(wr[b].dmin);
        const __m128i ms = _mm_loadu_si128((const __m128i *)wr[b].scales);
        const __m128i sc8 = _mm_and_si128(ms, m4);
        const __m256i mn16 = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(ms, 4), m4));
        __m256i ia[LO_NR];
        for (int j = 0; j < NR; j++) {
            const struct weft_block_q8_k *xb = xblk(x, xs, j, b);
            const __m256i prod = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)xb->bsums));
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(-xb->d * dmw), _mm256_cvtepi32_ps(prod), acc[j]);
            ia[j] = _mm256_setzero_si256();
        }
        for (int c = 0; c < 2; c++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(wr[b].qs + 32 * c));
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                const __m256i sc = sc16_pair(sc8, 8 * c + 2 * k);
                for (int j = 0; j < NR; j++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(xblk(x, xs, j, b)->qs + 32 * (4 * c + k)));
                    ia[j] = _mm256_add_epi32(ia[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc));
                }
            }
        }
        for (int j = 0; j < NR; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xblk(x, xs, j, b)->d * dw), _mm256_cvtepi32_ps(ia[j]), acc[j]);
    }
    for (int j = 0; j < NR; j++) out[j * ldo] = hsum_float_8(acc[j]);
}

/* one Q3_K weight row against NR activation rows: out[j * ldo] */
AI WEFT_AVX2 void q3k_tile(const uint8_t *w, const uint8_t *x, size_t xs, int64_t nb, float *out, size_t ldo,
                           const int NR)
{
    const struct weft_block_q3_k *wr = (const struct weft_block_q3_k *)w;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[LO_NR];
    for (int j = 0; j < NR; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m128i sc8 = q3k_scales_i8(wr[b].scales);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)wr[b].hmask);
        const float dw = weft_half_to_f32(wr[b].d);
        __m256i ia[LO_NR];
        for (int j = 0; j < NR; j++) ia[j] = _mm256_setzero_si256();
        for (int c = 0; c < 2; c++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(wr[b].qs + 32 * c));
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * c + k), one);
                const __m256i h4 = _mm256_slli_epi16(_mm256_andnot_si256(hb, one), 2);
                const __m256i sc = sc16_pair(sc8, 8 * c + 2 * k);
                for (int j = 0; j < NR; j++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(xblk(x, xs, j, b)->qs + 32 * (4 * c + k)));
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(h4, y));
                    ia[j] = _mm256_add_epi32(ia[j], _mm256_madd_epi16(p, sc));
                }
            }
        }
        for (int j = 0; j < NR; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xblk(x, xs, j, b)->d * dw), _mm256_cvtepi32_ps(ia[j]), acc[j]);
    }
    for (int j = 0; j < NR; j++) out[j * ldo] = hsum_float_8(acc[j]);
}

#define LO_DRIVER(name, tile)                                                                                    \
    static WEFT_AVX2 void name(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,    \
                               float *out, size_t ldo)                                                           \
    {                                                                                                            \
        const int64_t nb = n / WEFT_QK_K;                                                                        \
        for (int j = 0; j < nx; j += LO_NR) {                                                                    \
            const int nr = nx - j < LO_NR ? nx - j : LO_NR;                                                      \
            const uint8_t *xp = (const uint8_t *)x + (size_t)j * xs;                                             \
            for (int i = 0; i < nw; i++) {                                                                       \
                const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws;                                         \
                float *o = out + (size_t)j * ldo + i;                                                            \
                switch (nr) {                                                                                    \
                case 1: tile(wp, xp, xs, nb, o, ldo, 1); break;                                                  \
                case 2: tile(wp, xp, xs, nb, o, ldo, 2); break;                                                  \
                case 3: tile(wp, xp, xs, nb, o, ldo, 3); break;                                                  \
                case 4: tile(wp, xp, xs, nb, o, ldo, 4); break;                                                  \
                case 5: tile(wp, xp, xs, nb, o, ldo, 5); break;                                                  \
                default: tile(wp, xp, xs, nb, o, ldo, 6); break;                                                 \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
    }

LO_DRIVER(gemm_q2_k_avx2, q2k_tile)
LO_DRIVER(gemm_q3_k_avx2, q3k_tile)

void weft_cpu_kernels_fill_avx2_low_gemm(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->gemm[WEFT_TYPE_Q2_K] = gemm_q2_k_avx2;
    k->gemm[WEFT_TYPE_Q3_K] = gemm_q3_k_avx2;
}

#else

void weft_cpu_kernels_fill_avx2_low_gemm(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
