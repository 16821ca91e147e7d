/* Repacked Q5_K for AVX2 machines (no AVX-512): decode and prefill on groups
 * of 8 rows, as packed/packed_kq_avx2.c (Q4_K) and packed/packed_q6k_avx2.c
 * (Q6_K) do, for Q5_K_M models. out is bit-identical to the one-row dot
 * (tests/cpu/test_cpu_packed.c, tests/cpu/test_cpu_packed_prefill.c).
 *
 * The reference (cpu_ref_dot.c dot_q5_k, ggml's AVX2 order) keeps per output
 * 8 int32 lanes per block: lane l sums sc[e / 32] * u(e) * x(e) over the
 * elements e with (e % 32) / 4 == l (u the 5-bit value, 0..31), then
 * acc[l] = fma(d, float(lane), acc[l]) with d = dx * dw; beside it a scalar
 * chain summs = fma(dmin, float(summ), summs) with dmin = -dx * dminw and
 * summ = sum_j min_j * (bsums[2j] + bsums[2j + 1]); the result is
 * ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) + summs. The two chains meet only
 * at the end, so they run as two passes:
 *  - lanes: one ymm per output, the 32-element groups in pairs (2m, 2m + 1)
 *    in kq_avx2.h's natural-lane order: two vpmaddubsw (pairs at most
 *    2 * 31 * 128), vpaddw (four products, at most 4 * 31 * 128), one
 *    vpmaddwd by the pair's scales (sc[2m], sc[2m + 1]);
 *  - mins: eight outputs (rows) per ymm, the summs chains lane-wise.
 *
 * Block column of a group (1408 bytes, 8 blocks' worth): d[8], dmin[8]
 * (f16), the rows' scales[12] at 32 + 12r, then row r's 160 bytes at
 * 128 + 160r: the pairs' low four bits at 32m (byte j: A[j] in the low
 * nibble, B[j] in the high one), then at 128 the fifth bits (byte j, bit
 * 2m: A_m[j], bit 2m + 1: B_m[j]).
 *
 * Activation unit (aux_q5_k8r, 288 bytes per Q8_K block): byte 64m + 32v + j
 * the activation under byte j of pair m's A (v = 0) or B (v = 1); B[8] =
 * bsums[2j] + bsums[2j + 1] (int16) at 256; dx (float) at 272. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD) && !defined(WEFT_NO_PACKEDK)

#include <immintrin.h>

#include "backends/cpu/cpu_target.h"
#include "backends/cpu/packed/packed.h"
#include "backends/cpu/packed/kq_avx2.h"

#define Q5K8_COL 1408 /* 8 * sizeof(struct weft_block_q5_k) */
#define Q5K8_Q 128    /* row 0's bytes in a block column */
#define Q5K_UNIT 288  /* bytes per block of an activation unit */
#define LT 8          /* activation rows per lanes pass */
#define KB 8          /* blocks per step of the prefill (LT * KB units stay in L1) */
#define MAX_ACTS 64   /* activation rows per mins pass */

static void pack_q5_kx8r(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK_K;
    uint8_t *o = dst;
    uint8_t u[WEFT_QK_K];
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += Q5K8_COL)
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q5_k *b =
                    (const struct weft_block_q5_k *)((const uint8_t *)w + (size_t)(g + r) * stride) + i;
                memcpy(o + 2 * r, &b->d, 2);
                memcpy(o + 16 + 2 * r, &b->dmin, 2);
                memcpy(o + 32 + 12 * r, b->scales, 12);
                /* element 64c + 32h + l: nibble h of qs[32c + l], fifth bit qh[l] bit 2c + h */
                for (int c = 0; c < 4; c++)
                    for (int h = 0; h < 2; h++)
                        for (int l = 0; l < 32; l++)
                            u[64 * c + 32 * h + l] = (uint8_t)(((b->qs[32 * c + l] >> (4 * h)) & 0xF) |
                                                               ((b->qh[l] >> (2 * c + h)) & 1) << 4);
                uint8_t *q = o + Q5K8_Q + 160 * r;
                memset(q + 128, 0, 32);
                for (int m = 0; m < 4; m++)
                    for (int j = 0; j < 32; j++) {
                        const int ua = u[kq8_pair_elem(m, 0, j)], ub = u[kq8_pair_elem(m, 1, j)];
                        q[32 * m + j] = (uint8_t)((ua & 0xF) | (ub & 0xF) << 4);
                        q[128 + j] |= (uint8_t)(((ua >> 4) | (ub >> 4) << 1) << (2 * m));
                    }
            }
}

static size_t aux_q5_k8r_size(int64_t n) { return (size_t)(n / WEFT_QK_K) * Q5K_UNIT; }

static void aux_q5_k8r(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_k *x = vx;
    uint8_t *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK_K; i++, a += Q5K_UNIT) {
        memset(a, 0, Q5K_UNIT);
        for (int m = 0; m < 4; m++)
            for (int v = 0; v < 2; v++)
                for (int j = 0; j < 32; j++) a[64 * m + 32 * v + j] = (uint8_t)x[i].qs[kq8_pair_elem(m, v, j)];
        for (int j = 0; j < 8; j++) {
            const int16_t s = (int16_t)(x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
            memcpy(a + 256 + 2 * j, &s, 2);
        }
        memcpy(a + 272, &x[i].d, 4);
    }
}

static void xpack_q5_k8r(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride, (void)nx; /* one row per unit */
    aux_q5_k8r(x, n, dst);
}

/* pair m's A and B (5-bit values) of a row's 160 bytes at q, h its fifth-bit plane */
AI WEFT_AVX2 void q5k8_pair(const uint8_t *q, __m256i h, int m, __m256i *A, __m256i *B)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * m));
    /* bit 2m of each byte to bit 4 (A), bit 2m + 1 to bit 4 (B) */
    const __m256i ha = m == 0 ? _mm256_slli_epi16(h, 4) : m == 1 ? _mm256_slli_epi16(h, 2) : m == 2 ? h : _mm256_srli_epi16(h, 2);
    const __m256i hb = m == 0 ? _mm256_slli_epi16(h, 3) : m == 1 ? _mm256_slli_epi16(h, 1)
                     : m == 2 ? _mm256_srli_epi16(h, 1) : _mm256_srli_epi16(h, 3);
    *A = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(ha, m10));
    *B = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(hb, m10));
}

/* both sub-blocks of pair m in each lane, against the unit's activations at y, sc the scale pair */
AI WEFT_AVX2 __m256i q5k8_pair_dot(__m256i A, __m256i B, const uint8_t *y, __m256i sc)
{
    const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(A, _mm256_loadu_si256((const __m256i *)y)),
                                       _mm256_maddubs_epi16(B, _mm256_loadu_si256((const __m256i *)(y + 32))));
    return _mm256_madd_epi16(t, sc);
}

/* the summs step of 8 rows (lane r) for one block column p and unit u */
AI WEFT_AVX2 __m256 q5k8_summs(const uint8_t *p, const __m256i mn[4], const uint8_t *u, __m256 summs)
{
    const __m256 dmin = _mm256_mul_ps(_mm256_broadcast_ss((const float *)(u + 272)),
                                      _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))));
    const __m256 ndmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f)); /* -dx * dminw */
    return _mm256_fmadd_ps(ndmin, _mm256_cvtepi32_ps(k4_summ8(mn, u + 256)), summs);
}

/* decode: one group against one activation unit */
static WEFT_AVX2 void dotp_q5_kx8r(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    (void)vx;
    const uint8_t *p = wp, *u = vaux;
    const int64_t nb = n / WEFT_QK_K;
    __m256 acc[8], summs = _mm256_setzero_ps();
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, p += Q5K8_COL, u += Q5K_UNIT) {
        PREFETCH_COLUMN(p, Q5K8_COL);
        int32_t sp[8][4] __attribute__((aligned(16)));
        __m128i mn[8];
        for (int r = 0; r < 8; r++) mn[r] = k4_pairs(p + 32 + 12 * r, sp[r]);
        __m256i m4x[4];
        for (int k = 0; k < 4; k++) m4x[k] = _mm256_set_m128i(mn[k + 4], mn[k]);
        summs = q5k8_summs(p, m4x, u, summs);
        float dd[8] __attribute__((aligned(32)));
        _mm256_store_ps(dd, _mm256_mul_ps(_mm256_broadcast_ss((const float *)(u + 272)),
                                          _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p))));
        __asm__("" : "+m"(dd), "+m"(sp)); /* broadcast each from memory */
        for (int r = 0; r < 8; r++) {
            const uint8_t *q = p + Q5K8_Q + 160 * r;
            const __m256i h = _mm256_loadu_si256((const __m256i *)(q + 128));
            __m256i ia = _mm256_setzero_si256();
            for (int m = 0; m < 4; m++) {
                __m256i A, B;
                q5k8_pair(q, h, m, &A, &B);
                ia = _mm256_add_epi32(ia, q5k8_pair_dot(A, B, u + 64 * m, bc32(&sp[r][m])));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(dd + r), _mm256_cvtepi32_ps(ia), acc[r]);
        }
    }
    float sm[8];
    _mm256_storeu_ps(sm, summs);
    for (int r = 0; r < 8; r++) out[r] = hsum8(acc[r]) + sm[r];
}

/* mins pass: summs[a][r] for activation rows a < na (units at x, ubytes apart) */
AI WEFT_AVX2 void q5k8_mins(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, int na, float *summs)
{
    for (int a = 0; a < na; a++) _mm256_storeu_ps(summs + 8 * a, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * Q5K8_COL;
        __m256i mn[4];
        k4_mins8(p, mn);
        for (int a = 0; a < na; a++)
            _mm256_storeu_ps(summs + 8 * a, q5k8_summs(p, mn, x + (size_t)a * ubytes + (size_t)b * Q5K_UNIT,
                                                      _mm256_loadu_ps(summs + 8 * a)));
    }
}

/* lanes pass: row r of the group against NR <= LT activation rows (units at
 * x, ubytes apart) over blocks b0..b1, the float lanes acc[a] going on from
 * what they hold */
AI WEFT_AVX2 void q5k8_lanes(const uint8_t *w, int r, const uint8_t *x, size_t ubytes, int64_t b0, int64_t b1,
                             float (*acc)[8], const int NR)
{
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + (size_t)b * Q5K8_COL;
        const uint8_t *q = p + Q5K8_Q + 160 * r;
        PREFETCH_COLUMN(q, 160);
        int32_t sp[4] __attribute__((aligned(16)));
        (void)k4_pairs(p + 32 + 12 * r, sp);
        weft_half dh;
        memcpy(&dh, p + 2 * r, 2);
        const float dw = weft_half_to_f32(dh);
        float dd[LT] __attribute__((aligned(32)));
        for (int a = 0; a < NR; a++) {
            float dx;
            memcpy(&dx, x + (size_t)a * ubytes + (size_t)b * Q5K_UNIT + 272, 4);
            dd[a] = dx * dw;
        }
        __asm__("" : "+m"(dd), "+m"(sp)); /* broadcast each from memory */
        const __m256i h = _mm256_loadu_si256((const __m256i *)(q + 128));
        __m256i ia[LT];
        for (int a = 0; a < NR; a++) ia[a] = _mm256_setzero_si256();
        for (int m = 0; m < 4; m++) {
            __m256i A, B;
            q5k8_pair(q, h, m, &A, &B);
            const __m256i sc = bc32(sp + m);
            for (int a = 0; a < NR; a++)
                ia[a] = _mm256_add_epi32(
                    ia[a], q5k8_pair_dot(A, B, x + (size_t)a * ubytes + (size_t)b * Q5K_UNIT + 64 * m, sc));
        }
        for (int a = 0; a < NR; a++)
            _mm256_store_ps(acc[a], _mm256_fmadd_ps(_mm256_broadcast_ss(dd + a), _mm256_cvtepi32_ps(ia[a]),
                                                    _mm256_load_ps(acc[a])));
    }
}

/* one group against na <= MAX_ACTS activation rows: out[a * ldo + r] */
static WEFT_AVX2 void q5k8_group(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, int na, float *out,
                                 size_t ldo)
{
    float summs[MAX_ACTS * 8];
    float acc[8][LT][8] __attribute__((aligned(32)));
    q5k8_mins(w, x, ubytes, nb, na, summs);
    for (int a0 = 0; a0 < na; a0 += LT) {
        const int nr = na - a0 < LT ? na - a0 : LT;
        const uint8_t *xa = x + (size_t)a0 * ubytes;
        memset(acc, 0, sizeof acc);
        for (int64_t b0 = 0; b0 < nb; b0 += KB) {
            const int64_t b1 = nb - b0 < KB ? nb : b0 + KB;
            KQ8_LANES_STEP(q5k8_lanes, w, xa, ubytes, b0, b1, acc, nr);
        }
        for (int r = 0; r < 8; r++)
            for (int a = 0; a < nr; a++)
                out[(size_t)(a0 + a) * ldo + r] = hsum8(_mm256_load_ps(acc[r][a])) + summs[8 * (a0 + a) + r];
    }
}

KQ8_GEMMP(gemmp_q5_kx8r, q5k8_group, Q5K8_COL, Q5K_UNIT, MAX_ACTS)

void weft_cpu_kernels_fill_avx2_packed_q5k(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->packed[WEFT_TYPE_Q5_K] = (struct weft_cpu_packed){
        .rows = 8, .pack = pack_q5_kx8r, .aux_size = aux_q5_k8r_size, .aux = aux_q5_k8r, .dot = dotp_q5_kx8r,
        .xrows = 1, .xp_size = aux_q5_k8r_size, .xpack = xpack_q5_k8r, .gemmp = gemmp_q5_kx8r};
}

#else

void weft_cpu_kernels_fill_avx2_packed_q5k(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
