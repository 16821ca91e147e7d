/* AVX-512 prefill tiles for the float weight types in the multi-row
 * (tinyBLAS) order: the gemm_mm entry, bit-identical to dot_mm (one 16-lane
 * accumulator per output, element e in lane e % 16, fma over the chunks in
 * order, then _mm512_reduce_add_ps spelled out; BF16: per 32-element chunk
 * the odd elements' fma, then the even ones', as the reference's
 * dpbf16_step). tests/cpu/test_cpu_gemm.c checks them.
 *
 * A tile is MR = 4 weight rows x NR = 6 activation rows: per chunk four
 * weight loads (converted once), six activation loads (converted once), 24
 * independent fma chains, so the conversions cost a fraction of what the
 * one-output dot pays (two per fma). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>

#include "base/types.h"

#define AI static inline __attribute__((always_inline))

/* _mm512_reduce_add_ps as the reference's reduce_add_16 */
AI WEFT_AVX512 float hsum512(__m512 x)
{
    __m256 t = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

enum { MR = 4, NR = 6 };

/* F16 / F32: chunk c of row p is 16 elements */
AI WEFT_AVX512 __m512 ld_f16(const uint8_t *p, int64_t c) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * c))); }
AI WEFT_AVX512 __m512 ld_f32(const uint8_t *p, int64_t c) { return _mm512_loadu_ps((const void *)(p + 64 * c)); }

#define FLOAT_TILE(name, LD, CHUNK)                                                                                    \
    AI WEFT_AVX512 void name(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, size_t ldo,    \
                      const int mr, const int nr)                                                                     \
    {                                                                                                                 \
        __m512 acc[MR][NR];                                                                                           \
        for (int i = 0; i < mr; i++)                                                                                  \
            for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();                                             \
        for (int64_t c = 0; c < n / (CHUNK); c++) {                                                                   \
            __m512 wv[MR];                                                                                            \
            for (int i = 0; i < mr; i++) wv[i] = LD(w + (size_t)i * ws, c);                                           \
            for (int j = 0; j < nr; j++) {                                                                            \
                const __m512 xv = LD(x + (size_t)j * xs, c);                                                          \
                for (int i = 0; i < mr; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);                       \
            }                                                                                                         \
        }                                                                                                             \
        for (int j = 0; j < nr; j++)                                                                                  \
            for (int i = 0; i < mr; i++) out[(size_t)j * ldo + i] = hsum512(acc[i][j]);                               \
    }

FLOAT_TILE(tile_f16, ld_f16, 16)
FLOAT_TILE(tile_f32, ld_f32, 16)

/* BF16: a 32-element chunk as its odd elements (high halves of the 32-bit
 * lanes) and even elements (shifted up), each an exact float */
AI WEFT_AVX512 void tile_bf16(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, size_t ldo,
                       const int mr, const int nr)
{
    const __m512i himask = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[MR][NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < n / 32; c++) {
        __m512 wo[MR], we[MR];
        for (int i = 0; i < mr; i++) {
            const __m512i u = _mm512_loadu_si512((const void *)(w + (size_t)i * ws + 64 * c));
            wo[i] = _mm512_castsi512_ps(_mm512_and_si512(u, himask));
            we[i] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
        }
        for (int j = 0; j < nr; j++) {
            const __m512i u = _mm512_loadu_si512((const void *)(x + (size_t)j * xs + 64 * c));
            const __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(u, himask));
            const __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_fmadd_ps(we[i], xe, _mm512_fmadd_ps(wo[i], xo, acc[i][j]));
        }
    }
    for (int j = 0; j < nr; j++)
        for (int i = 0; i < mr; i++) out[(size_t)j * ldo + i] = hsum512(acc[i][j]);
}

#define TCASE(tile, m, r) case (m) * 8 + (r): tile(wp, ws, xp, xs, n, o, ldo, m, r); break;
#define TCASES(tile, m) TCASE(tile, m, 1) TCASE(tile, m, 2) TCASE(tile, m, 3) TCASE(tile, m, 4) TCASE(tile, m, 5) TCASE(tile, m, 6)

#define FLOAT_GEMM(name, tile)                                                                                        \
    static WEFT_AVX512 void name(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n, float *out, \
                          size_t ldo)                                                                                 \
    {                                                                                                                 \
        for (int j = 0; j < nx; j += NR) {                                                                            \
            const int nr = nx - j < NR ? nx - j : NR;                                                                 \
            for (int i = 0; i < nw; i += MR) {                                                                        \
                const int mr = nw - i < MR ? nw - i : MR;                                                             \
                const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = (const uint8_t *)x + (size_t)j * xs;   \
                float *o = out + (size_t)j * ldo + i;                                                                 \
                switch (mr * 8 + nr) {                                                                                \
                    TCASES(tile, 1) TCASES(tile, 2) TCASES(tile, 3) TCASES(tile, 4)                                   \
                default: break;                                                                                       \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
    }

FLOAT_GEMM(gemm_mm_f16, tile_f16)
FLOAT_GEMM(gemm_mm_f32, tile_f32)
FLOAT_GEMM(gemm_mm_bf16, tile_bf16)

void weft_cpu_kernels_fill_avx512_gemmf(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->gemm_mm[WEFT_TYPE_F16] = gemm_mm_f16;
    k->gemm_mm[WEFT_TYPE_F32] = gemm_mm_f32;
    k->gemm_mm[WEFT_TYPE_BF16] = gemm_mm_bf16;
}

#else

void weft_cpu_kernels_fill_avx512_gemmf(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
