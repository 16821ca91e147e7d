/* AVX-512 VNNI prefill tiles (the gemm entry, see cpu_kernels.h) for Q4_1,
 * bit-identical to the one-row dot (tests/test_cpu_kernels_gemm.c), whose
 * reference (core/quant.c dot_q4_1) is one float chain per output:
 * acc = fma(dw*dx, float(isum), acc) and summs = fma(m, s, summs) per
 * block, then acc + summs.
 *
 * A tile is up to 4 weight rows x 8 activation rows. Two activation rows
 * per zmm (low half row 2p, high half row 2p + 1), each weight block's 32
 * nibbles (unsigned, element order) broadcast to both halves, vpdpbusd
 * against the signed activations: int32 lane l of a half = the exact sum
 * over elements 4l..4l+3. The four zmm of a weight row (8 outputs x 8
 * lanes) are folded by an unpack/add tree into one ymm of the 8 outputs'
 * exact block sums, in the order (rows 0, 2, 4, 6, 1, 3, 5, 7); the float
 * chains of weight row i are the 8 lanes of acc[i] and sm[i] in that order,
 * with the activations' d and s widened in the same order. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#include "core/types.h"

#define Z512V __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define AI static inline __attribute__((always_inline))

AI Z512V float h2f(weft_half h) { return _cvtsh_ss(h); }

/* a Q4_1 block's 32 values (0..15) in element order, in both 256-bit halves */
AI Z512V __m512i nibbles2(const uint8_t qs[16])
{
    const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs));
    return _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
}

/* q[p]: two outputs' 8 int32 lanes (rows 2p, 2p+1). Element k of the result:
 * the total of output 2k (k < 4) or 2(k-4)+1 (k >= 4). */
AI Z512V __m256i fold4(__m512i q0, __m512i q1, __m512i q2, __m512i q3)
{
    /* per 128-bit lane L: (q0, q1, q0, q1) partial sums, then (q0, q1, q2, q3) */
    const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(q0, q1), _mm512_unpackhi_epi32(q0, q1));
    const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(q2, q3), _mm512_unpackhi_epi32(q2, q3));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
    /* 128-bit lanes 0 + 1 (even rows), 2 + 3 (odd rows) */
    const __m512i a = _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i b = _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_castsi512_si256(b));
}

AI Z512V void q4_1_tile_z(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int nr, int64_t nb, float *out,
                          size_t ldo, const int MR, const int NP)
{
    const struct weft_block_q4_1 *wr[4];
    const struct weft_block_q8_1 *xr[8];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q4_1 *)(w + i * ws);
    for (int j = 0; j < 8; j++) xr[j] = (const struct weft_block_q8_1 *)(x + (j < nr ? j : nr - 1) * xs);
    __m256 acc[4], sm[4];
    for (int i = 0; i < MR; i++) acc[i] = sm[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i xx[4];
        for (int p = 0; p < NP; p++)
            xx[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xr[2 * p][b].qs)),
                                       _mm256_loadu_si256((const __m256i *)xr[2 * p + 1][b].qs), 1);
        const __m256 dx = _mm256_cvtph_ps(_mm_setr_epi16((short)xr[0][b].d, (short)xr[2][b].d, (short)xr[4][b].d,
                                                         (short)xr[6][b].d, (short)xr[1][b].d, (short)xr[3][b].d,
                                                         (short)xr[5][b].d, (short)xr[7][b].d));
        const __m256 sx = _mm256_cvtph_ps(_mm_setr_epi16((short)xr[0][b].s, (short)xr[2][b].s, (short)xr[4][b].s,
                                                         (short)xr[6][b].s, (short)xr[1][b].s, (short)xr[3][b].s,
                                                         (short)xr[5][b].s, (short)xr[7][b].s));
        for (int i = 0; i < MR; i++) {
            const __m512i wv = nibbles2(wr[i][b].qs);
            __m512i q[4];
            for (int p = 0; p < 4; p++)
                q[p] = p < NP ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xx[p]) : _mm512_setzero_si512();
            const __m256 f = _mm256_cvtepi32_ps(fold4(q[0], q[1], q[2], q[3]));
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(h2f(wr[i][b].d)), dx), f, acc[i]);
            sm[i] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wr[i][b].m)), sx, sm[i]);
        }
    }
    for (int i = 0; i < MR; i++) {
        float s[8];
        _mm256_storeu_ps(s, _mm256_add_ps(acc[i], sm[i]));
        for (int j = 0; j < nr; j++) out[j * ldo + i] = s[(j >> 1) + 4 * (j & 1)];
    }
}

#define ZCASE(m, q) case (m) * 8 + (q): q4_1_tile_z(wp, ws, xp, xs, nr, nb, o, ldo, m, q); break;
#define ZCASES(m) ZCASE(m, 1) ZCASE(m, 2) ZCASE(m, 3) ZCASE(m, 4)

static Z512V void gemm_q4_1_z(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                              float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_1;
    for (int j = 0; j < nx; j += 8) {
        const int nr = nx - j < 8 ? nx - j : 8;
        for (int i = 0; i < nw; i += 4) {
            const int mr = nw - i < 4 ? nw - i : 4;
            const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws;
            const uint8_t *xp = (const uint8_t *)x + (size_t)j * xs;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + (nr + 1) / 2) {
                ZCASES(1) ZCASES(2) ZCASES(3) ZCASES(4)
            default: break;
            }
        }
    }
}

static bool have_vnni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (c >> 11) & 1; /* AVX512_VNNI */
}

void weft_cpu_kernels_fill_avx512_gemm(struct weft_cpu_kernels *k)
{
    if (have_vnni()) k->gemm[WEFT_TYPE_Q4_1] = gemm_q4_1_z;
}

#else

void weft_cpu_kernels_fill_avx512_gemm(struct weft_cpu_kernels *k) { (void)k; }

#endif
