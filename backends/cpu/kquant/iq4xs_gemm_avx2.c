/* AVX2 prefill tile (weft_cpu_gemm_fn) and four-row decode dot
 * (weft_cpu_dot4_fn) for IQ4_XS against Q8_K activations, bit-identical to
 * the table's one-row dot (kquant/kq_low_avx2.c dot_iq4_xs_avx2,
 * cpu_ref_dot.c dot_iq4_xs): per block, int32 lane l sums over the 8
 * sub-blocks s (sc_s - 32) * (the code-book values of elements 32s + 4l..4l+3
 * times the activations), exactly; acc = fma(dw * dx, float(lane), acc);
 * hsum_float_8 at the end. A weight block's values, their absolute values
 * and its scales are unpacked once for NR activation rows. The values'
 * signs move onto the activations (vpsignb), exact because the Q8_K
 * quantizer never writes -128 (it clamps to +-127). */
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
#define XS_MR 2
#define XS_NR 4

AI WEFT_AVX2 void xs_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out, size_t ldo,
                          const int MR, const int NR)
{
    static const int8_t kv[16] = WEFT_KVALUES_IQ4NL;
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv));
    __m256 acc[4][XS_NR]; /* (MR is 4 in the decode form) */
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float dw[4] = {0, 0, 0, 0};
        for (int i = 0; i < MR; i++)
            dw[i] = h2f(((const struct weft_block_iq4_xs *)(w + i * ws))[b].d);
        const __m128 dw4 = _mm_setr_ps(dw[0], dw[1], dw[2], dw[3]);
        float pr[XS_NR][4] __attribute__((aligned(16)));
        for (int j = 0; j < NR; j++)
            _mm_store_ps(pr[j], _mm_mul_ps(dw4, _mm_set1_ps(((const struct weft_block_q8_k *)(x + j * xs))[b].d)));
        __asm__("" : "+m"(pr));
        for (int i = 0; i < MR; i++) {
            const struct weft_block_iq4_xs *wb = (const struct weft_block_iq4_xs *)(w + i * ws) + b;
            __m256i ia[XS_NR];
            for (int j = 0; j < NR; j++) ia[j] = _mm256_setzero_si256();
            for (int s = 0; s < WEFT_QK_K / 32; s++) {
                const __m256i v = _mm256_shuffle_epi8(book, bytes_from_nibbles_32(wb->qs + 16 * s));
                const __m256i va = _mm256_sign_epi8(v, v);
                const __m256i sc = _mm256_set1_epi16((int16_t)weft_iq4_xs_scale(wb, s));
                for (int j = 0; j < NR; j++) {
                    const int8_t *y = ((const struct weft_block_q8_k *)(x + j * xs))[b].qs + 32 * s;
                    ia[j] = _mm256_add_epi32(
                        ia[j], _mm256_madd_epi16(_mm256_maddubs_epi16(va, _mm256_sign_epi8(load32(y), v)), sc));
                }
            }
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pr[j][i]), _mm256_cvtepi32_ps(ia[j]), acc[i][j]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) out[j * ldo + i] = hsum_float_8(acc[i][j]);
}

#define XS_CASE(m, r) case (m) * 8 + (r): xs_tile(wp, ws, xp, xs, nb, o, ldo, m, r); break;

static WEFT_AVX2 void gemm_iq4_xs_avx2(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                                      float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK_K;
    for (int j = 0; j < nx; j += XS_NR) {
        const int nr = nx - j < XS_NR ? nx - j : XS_NR;
        for (int i = 0; i < nw; i += XS_MR) {
            const int mr = nw - i < XS_MR ? nw - i : XS_MR;
            const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = (const uint8_t *)x + (size_t)j * xs;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + nr) {
                XS_CASE(1, 1) XS_CASE(1, 2) XS_CASE(1, 3) XS_CASE(1, 4)
                XS_CASE(2, 1) XS_CASE(2, 2) XS_CASE(2, 3) XS_CASE(2, 4)
            default: break;
            }
        }
    }
}

/* decode: four rows against one activation row, the tile's 4 x 1 form */
static WEFT_AVX2 void dot4_iq4_xs_avx2(const void *w, size_t stride, const void *x, int64_t n, float out[4])
{
    xs_tile(w, stride, x, 0, n / WEFT_QK_K, out, 1, 4, 1);
}

void weft_cpu_kernels_fill_avx2_iq4xs_gemm(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->gemm[WEFT_TYPE_IQ4_XS] = gemm_iq4_xs_avx2;
    k->dot4[WEFT_TYPE_IQ4_XS] = dot4_iq4_xs_avx2;
}

#else

void weft_cpu_kernels_fill_avx2_iq4xs_gemm(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
