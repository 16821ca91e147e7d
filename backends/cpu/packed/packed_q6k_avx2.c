/* Repacked Q6_K for AVX2 machines (no AVX-512): decode and prefill on groups
 * of 8 rows, as packed/packed_kq_avx2.c does for Q4_K, so Q4_K_M models'
 * Q6_K tensors (the output head, half the FFN down projections) get prefill
 * tiles too. out is bit-identical to the one-row dot (tests/cpu/test_cpu_packed.c,
 * tests/cpu/test_cpu_packed_prefill.c).
 *
 * The reference (cpu_ref_dot.c dot_q6_k, ggml's AVX2 order) keeps per output
 * 8 int32 lanes per block: lane l sums sc[e / 16] * u(e) * x(e) over the
 * elements e with (e % 32) / 4 == l (u = the 6-bit value, 0..63), minus
 * 32 * (bsums[2l] sc[2l] + bsums[2l+1] sc[2l+1]); then
 * acc[l] = fma(d, float(lane), acc[l]) with d = dx * dw, and at the end
 * ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). Here one ymm per output holds
 * those lanes. The 32-element groups go in pairs (2m, 2m + 1), m = 0..3,
 * each pair as two vectors A and B: byte 4l + t of A holds element
 * 32 (2m + t/2) + 4l + t%2 of the row, B the same + 2. vpmaddubsw of each
 * against the activations arranged alike, vpaddw of the two (each int16 the
 * four products of one group in lane l, at most 4 * 63 * 128), and one
 * vpmaddwd by the pair's scales (lanes 0..3: sc[4m], sc[4m+2]; lanes 4..7:
 * sc[4m+1], sc[4m+3]) add both groups to each lane, exact in int32.
 *
 * Block column of a group (1680 bytes, 8 blocks' worth): d[8] (f16), row
 * r's 16 scales (int8, as stored) at 16 + 16r, then row r's 192 bytes at
 * 144 + 192r: the pairs' low four bits at 32m (byte j: A[j] in the low
 * nibble, B[j] in the high one), then at 128 + 32h the high two bits of
 * pairs 2h and 2h + 1 (byte j, bits 0-1: A_2h[j], 2-3: B_2h[j], 4-5:
 * A_2h+1[j], 6-7: B_2h+1[j]).
 *
 * Activation unit (aux_q6_k8r, 296 bytes per Q8_K block): byte 64m + 32v + j
 * the activation under byte j of the pair's A (v = 0) or B (v = 1); the 16
 * bsums (int16) at 256; dx (float) at 288. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD) && !defined(WEFT_NO_PACKEDK)

#include <immintrin.h>

#include "backends/cpu/cpu_target.h"
#include "backends/cpu/packed/packed.h"
#include "backends/cpu/packed/kq_avx2.h"

#define Q6K8_COL 1680 /* 8 * sizeof(struct weft_block_q6_k) */
#define Q6K8_Q 144    /* row 0's bytes in a block column */
#define Q6K_UNIT 296  /* bytes per block of an activation unit */
#define LT 8          /* activation rows per lanes pass */
#define KB 8          /* blocks per step of the prefill (LT * KB units stay in L1) */

static void pack_q6_kx8r(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK_K;
    uint8_t *o = dst;
    int8_t a[WEFT_QK_K];
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += Q6K8_COL)
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q6_k *b =
                    (const struct weft_block_q6_k *)((const uint8_t *)w + (size_t)(g + r) * stride) + i;
                memcpy(o + 2 * r, &b->d, 2);
                memcpy(o + 16 + 16 * r, b->scales, 16);
                weft_q6_k_unpack(b, a); /* a[e] + 32: the 6-bit value */
                uint8_t *q = o + Q6K8_Q + 192 * r;
                memset(q + 128, 0, 64);
                for (int m = 0; m < 4; m++)
                    for (int j = 0; j < 32; j++) {
                        const int ua = a[kq8_pair_elem(m, 0, j)] + 32, ub = a[kq8_pair_elem(m, 1, j)] + 32;
                        q[32 * m + j] = (uint8_t)((ua & 0xF) | (ub & 0xF) << 4);
                        q[128 + 32 * (m >> 1) + j] |= (uint8_t)(((ua >> 4) | (ub >> 4) << 2) << (4 * (m & 1)));
                    }
            }
}

static size_t aux_q6_k8r_size(int64_t n) { return (size_t)(n / WEFT_QK_K) * Q6K_UNIT; }

static void aux_q6_k8r(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_k *x = vx;
    uint8_t *u = vaux;
    for (int64_t i = 0; i < n / WEFT_QK_K; i++, u += Q6K_UNIT) {
        memset(u, 0, Q6K_UNIT);
        for (int m = 0; m < 4; m++)
            for (int v = 0; v < 2; v++)
                for (int j = 0; j < 32; j++) u[64 * m + 32 * v + j] = (uint8_t)x[i].qs[kq8_pair_elem(m, v, j)];
        memcpy(u + 256, x[i].bsums, 32);
        memcpy(u + 288, &x[i].d, 4);
    }
}

static void xpack_q6_k8r(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride, (void)nx; /* one row per unit */
    aux_q6_k8r(x, n, dst);
}

/* A row's block: its pairs' scale vectors (sp[m]) and its 16 scales as int16 (returned) */
AI WEFT_AVX2 __m256i q6k8_scales(const uint8_t *sc, __m256i sp[4])
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)sc);
    /* dword 2m: (sc[4m], sc[4m+2]), dword 2m + 1: (sc[4m+1], sc[4m+3]) */
    const __m256i arr = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15)));
    for (int m = 0; m < 4; m++)
        sp[m] = _mm256_permutevar8x32_epi32(arr, _mm256_setr_epi32(2 * m, 2 * m, 2 * m, 2 * m, 2 * m + 1, 2 * m + 1,
                                                                   2 * m + 1, 2 * m + 1));
    return _mm256_cvtepi8_epi16(raw);
}

/* pair m's A and B (6-bit values) of a row's 192 bytes at q */
AI WEFT_AVX2 void q6k8_pair(const uint8_t *q, int m, __m256i *A, __m256i *B)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * m));
    const __m256i h = _mm256_loadu_si256((const __m256i *)(q + 128 + 32 * (m >> 1)));
    const __m256i ha = m & 1 ? h : _mm256_slli_epi16(h, 4), hb = m & 1 ? _mm256_srli_epi16(h, 2) : _mm256_slli_epi16(h, 2);
    *A = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(ha, m30));
    *B = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(hb, m30));
}

/* both groups of pair m in each lane, against the unit's activations at y */
AI WEFT_AVX2 __m256i q6k8_pair_dot(__m256i A, __m256i B, const uint8_t *y, __m256i sp)
{
    const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(A, _mm256_loadu_si256((const __m256i *)y)),
                                       _mm256_maddubs_epi16(B, _mm256_loadu_si256((const __m256i *)(y + 32))));
    return _mm256_madd_epi16(t, sp);
}

/* 32 * (bsums[2l] sc[2l] + bsums[2l+1] sc[2l+1]) in lane l */
AI WEFT_AVX2 __m256i q6k8_offset(__m256i sc16, const uint8_t *u)
{
    return _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(u + 256))), 5);
}

/* decode: one group against one activation unit */
static WEFT_AVX2 void dotp_q6_kx8r(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    (void)vx;
    const uint8_t *p = wp, *u = vaux;
    const int64_t nb = n / WEFT_QK_K;
    __m256 acc[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, p += Q6K8_COL, u += Q6K_UNIT) {
        PREFETCH_COLUMN(p, Q6K8_COL);
        float dd[8] __attribute__((aligned(32)));
        _mm256_store_ps(dd, _mm256_mul_ps(_mm256_broadcast_ss((const float *)(u + 288)),
                                          _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p))));
        __asm__("" : "+m"(dd)); /* broadcast each from memory */
        for (int r = 0; r < 8; r++) {
            __m256i sp[4];
            const __m256i sc16 = q6k8_scales(p + 16 + 16 * r, sp);
            const uint8_t *q = p + Q6K8_Q + 192 * r;
            __m256i ia = _mm256_sub_epi32(_mm256_setzero_si256(), q6k8_offset(sc16, u));
            for (int m = 0; m < 4; m++) {
                __m256i A, B;
                q6k8_pair(q, m, &A, &B);
                ia = _mm256_add_epi32(ia, q6k8_pair_dot(A, B, u + 64 * m, sp[m]));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(dd + r), _mm256_cvtepi32_ps(ia), acc[r]);
        }
    }
    for (int r = 0; r < 8; r++) out[r] = hsum8(acc[r]);
}

/* prefill: row r of the group against NR <= LT activation rows (units at x,
 * ubytes apart) over blocks b0..b1, the float lanes acc[a] going on from
 * what they hold. A row's unpacked values and scales serve NR activation rows. */
AI WEFT_AVX2 void q6k8_lanes(const uint8_t *w, int r, const uint8_t *x, size_t ubytes, int64_t b0, int64_t b1,
                             float (*acc)[8], const int NR)
{
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + (size_t)b * Q6K8_COL;
        const uint8_t *q = p + Q6K8_Q + 192 * r;
        PREFETCH_COLUMN(q, 192);
        __m256i sp[4];
        const __m256i sc16 = q6k8_scales(p + 16 + 16 * r, sp);
        weft_half dh;
        memcpy(&dh, p + 2 * r, 2);
        const float dw = weft_half_to_f32(dh);
        float dd[LT] __attribute__((aligned(32)));
        for (int a = 0; a < NR; a++) {
            float dx;
            memcpy(&dx, x + (size_t)a * ubytes + (size_t)b * Q6K_UNIT + 288, 4);
            dd[a] = dx * dw;
        }
        __asm__("" : "+m"(dd), "+m"(sp)); /* broadcast / read each from memory */
        __m256i ia[LT];
        for (int a = 0; a < NR; a++)
            ia[a] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                     q6k8_offset(sc16, x + (size_t)a * ubytes + (size_t)b * Q6K_UNIT));
        for (int m = 0; m < 4; m++) {
            __m256i A, B;
            q6k8_pair(q, m, &A, &B);
            for (int a = 0; a < NR; a++)
                ia[a] = _mm256_add_epi32(
                    ia[a], q6k8_pair_dot(A, B, x + (size_t)a * ubytes + (size_t)b * Q6K_UNIT + 64 * m, sp[m]));
        }
        for (int a = 0; a < NR; a++)
            _mm256_store_ps(acc[a], _mm256_fmadd_ps(_mm256_broadcast_ss(dd + a), _mm256_cvtepi32_ps(ia[a]),
                                                    _mm256_load_ps(acc[a])));
    }
}

/* one group against nx activation rows: out[a * ldo + r] */
static WEFT_AVX2 void q6k8_group(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, int nx, float *out,
                                 size_t ldo)
{
    float acc[8][LT][8] __attribute__((aligned(32)));
    for (int a0 = 0; a0 < nx; a0 += LT) {
        const int nr = nx - a0 < LT ? nx - a0 : LT;
        const uint8_t *xa = x + (size_t)a0 * ubytes;
        memset(acc, 0, sizeof acc);
        for (int64_t b0 = 0; b0 < nb; b0 += KB) {
            const int64_t b1 = nb - b0 < KB ? nb : b0 + KB;
            KQ8_LANES_STEP(q6k8_lanes, w, xa, ubytes, b0, b1, acc, nr);
        }
        for (int r = 0; r < 8; r++)
            for (int a = 0; a < nr; a++) out[(size_t)(a0 + a) * ldo + r] = hsum8(_mm256_load_ps(acc[r][a]));
    }
}

/* activation rows per call of q6k8_group (its outputs' rows of 64 float lanes
 * each stay in L1 and L2 with the group's weights) */
#define MAX_ACTS 64

KQ8_GEMMP(gemmp_q6_kx8r, q6k8_group, Q6K8_COL, Q6K_UNIT, MAX_ACTS)

void weft_cpu_kernels_fill_avx2_packed_q6k(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni; /* the avx512vnni table has its own (packed/packed_kq.c) */
    k->packed[WEFT_TYPE_Q6_K] = (struct weft_cpu_packed){
        .rows = 8, .pack = pack_q6_kx8r, .aux_size = aux_q6_k8r_size, .aux = aux_q6_k8r, .dot = dotp_q6_kx8r,
        .xrows = 1, .xp_size = aux_q6_k8r_size, .xpack = xpack_q6_k8r, .gemmp = gemmp_q6_kx8r};
}

#else

void weft_cpu_kernels_fill_avx2_packed_q6k(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
