/* AVX-512 VNNI prefill tiles on plain rows (the gemm entry) for Q5_0,
 * bit-identical to the one-row dot (tests/test_cpu_kernels_gemm.c).
 *
 * The reference (ggml's AVX2 Q5_0 dot and tinyBLAS) keeps eight float lanes
 * per output: lane l = the exact int sum of v * x over elements 4l..4l+3 of
 * the block (v = (nibble | high bit << 4) - 16), acc = fma(dw * dx,
 * float(lane), acc), hsum_float_8 at the end. Here two activation rows share
 * a zmm (row j in the low 256 bits, j + 1 in the high), the weight block is
 * unpacked once to u = v + 16 (0..31, element order, both halves) and
 * vpdpbusd(corr, u, x) with corr = -16 * (the 4-byte lane sums of x) gives
 * the exact lane. The activation side (x pairs, corr, dx in both halves)
 * is laid out once per call for a chunk of up to 8 rows in a stack buffer
 * and serves every weight row of the call. Tiles: 4 weight rows x up to 4
 * row pairs. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "core/quant.h"
#include "core/types.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <cpuid.h>
#include <immintrin.h>

#define Z512V __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define AI static inline __attribute__((always_inline))

enum { UNIT = 192, XBUF = 48 * 1024 }; /* bytes per pair-block: x | corr | dx */

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)) of each 256-bit half of a and b:
 * elements 0 (a lo), 4 (a hi), 8 (b lo), 12 (b hi) */
AI Z512V __m512 hsum8_x4(__m512 a, __m512 b)
{
    const __m512 lo = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    __m512 r = _mm512_add_ps(lo, hi);
    r = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(r, _mm512_movehdup_ps(r));
}

/* corr from memory into a fresh register, then += u . x (x from memory) */
AI Z512V __m512i lanes_mem(const uint8_t *ub, __m512i u)
{
    __m512i t;
    __asm__("vmovdqu64 %[c], %[t]\n\tvpdpbusd %[x], %[w], %[t]"
            : [t] "=&v"(t)
            : [c] "m"(*(const __m512i *)(ub + 64)), [x] "m"(*(const __m512i *)ub), [w] "v"(u));
    return t;
}

/* pairs of rows j0.. (nr real rows, the last repeated) -> units of UNIT bytes per block */
static Z512V void prep_q8_0_pairs(const uint8_t *x, size_t xs, int nr, int64_t nb, uint8_t *dst, int corr_mul)
{
    const __m512i cm = _mm512_set1_epi8((char)corr_mul);
    for (int p = 0; 2 * p < nr; p++) {
        const struct weft_block_q8_0 *r0 = (const struct weft_block_q8_0 *)(x + (size_t)(2 * p) * xs);
        const struct weft_block_q8_0 *r1 =
            (const struct weft_block_q8_0 *)(x + (size_t)(2 * p + 1 < nr ? 2 * p + 1 : 2 * p) * xs);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *u = dst + ((size_t)p * nb + b) * UNIT;
            const __m512i xx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)r0[b].qs)),
                                                  _mm256_loadu_si256((const __m256i *)r1[b].qs), 1);
            _mm512_store_si512((void *)u, xx);
            _mm512_store_si512((void *)(u + 64), _mm512_sub_epi32(_mm512_setzero_si512(),
                                                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), cm, xx)));
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(r0[b].d)), _mm256_set1_ps(_cvtsh_ss(r1[b].d)), 1);
            _mm512_store_ps((void *)(u + 128), dx);
        }
    }
}

/* ---- Q5_0 ---- */

/* u = v + 16 of a Q5_0 block, elements in order, in both 256-bit halves */
AI Z512V __m512i q5_0_u(const struct weft_block_q5_0 *b)
{
    const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b->qs));
    const __m512i nib =
        _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const __mmask64 hb = _cvtu64_mask64((uint64_t)qh | (uint64_t)qh << 32);
    return _mm512_mask_add_epi8(nib, hb, nib, _mm512_set1_epi8(16));
}

AI Z512V void q5_0_tile(const uint8_t *w, size_t ws, const uint8_t *xu, int64_t nb, float *out, size_t ldo, int nr,
                        const int MR, const int NP)
{
    const struct weft_block_q5_0 *wr[4];
    for (int i = 0; i < MR; i++) wr[i] = (const struct weft_block_q5_0 *)(w + (size_t)i * ws);
    __m512 acc[4][4];
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < MR; i++) {
            const __m512i u = q5_0_u(&wr[i][b]);
            const __m512 dw = _mm512_set1_ps(_cvtsh_ss(wr[i][b].d));
            for (int p = 0; p < NP; p++) {
                const uint8_t *ub = xu + ((size_t)p * nb + b) * UNIT;
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_load_ps((const void *)(ub + 128))),
                                            _mm512_cvtepi32_ps(lanes_mem(ub, u)), acc[i][p]);
            }
        }
    }
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < MR; i += 2) {
            float t[16] __attribute__((aligned(64)));
            _mm512_store_ps(t, hsum8_x4(acc[i][p], acc[i + 1 < MR ? i + 1 : i][p]));
            out[2 * p * ldo + i] = t[0];
            if (2 * p + 1 < nr) out[(2 * p + 1) * ldo + i] = t[4];
            if (i + 1 < MR) {
                out[2 * p * ldo + i + 1] = t[8];
                if (2 * p + 1 < nr) out[(2 * p + 1) * ldo + i + 1] = t[12];
            }
        }
}

#define QCASE(m, q) case (m) * 8 + (q): q5_0_tile(wp, ws, xp, nb, o, ldo, nr, m, q); break;
#define QCASES(m) QCASE(m, 1) QCASE(m, 2) QCASE(m, 3) QCASE(m, 4)

static Z512V void gemm_q5_0_z(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                              float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK5_0;
    uint8_t xbuf[XBUF] __attribute__((aligned(64)));
    int pairs = (int)(XBUF / ((size_t)nb * UNIT)); /* row pairs per chunk */
    if (pairs > 4) pairs = 4;
    if (pairs < 1) { /* rows too long for the buffer: no tiling, same results */
        for (int j = 0; j < nx; j++)
            for (int i = 0; i < nw; i++)
                out[(size_t)j * ldo + i] = weft_vec_dot(WEFT_TYPE_Q5_0, (const uint8_t *)w + (size_t)i * ws,
                                                        (const uint8_t *)x + (size_t)j * xs, n);
        return;
    }
    for (int j = 0; j < nx; j += 2 * pairs) {
        const int nr = nx - j < 2 * pairs ? nx - j : 2 * pairs;
        prep_q8_0_pairs((const uint8_t *)x + (size_t)j * xs, xs, nr, nb, xbuf, 16);
        for (int i = 0; i < nw; i += 4) {
            const int mr = nw - i < 4 ? nw - i : 4;
            const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = xbuf;
            float *o = out + (size_t)j * ldo + i;
            switch (mr * 8 + (nr + 1) / 2) {
                QCASES(1) QCASES(2) QCASES(3) QCASES(4)
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

void weft_cpu_kernels_fill_avx512_gemmq(struct weft_cpu_kernels *k)
{
    if (have_vnni()) k->gemm[WEFT_TYPE_Q5_0] = gemm_q5_0_z;
}

#else

void weft_cpu_kernels_fill_avx512_gemmq(struct weft_cpu_kernels *k) { (void)k; }

#endif
