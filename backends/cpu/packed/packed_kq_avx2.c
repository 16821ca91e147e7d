/* Repacked Q4_K for AVX2 machines (no AVX-512): decode and prefill on groups
 * of 8 rows, so an AVX2-only CPU gets Q4_K's (and Q4_K_M's) prefill tiles.
 * out is bit-identical to the one-row dot (tests/cpu/test_cpu_packed.c,
 * tests/cpu/test_cpu_packed_prefill.c).
 *
 * The reference (cpu_ref_dot.c dot_q4_k, ggml's AVX2 order) keeps per output
 * 8 int32 lanes per block, lane l the elements e with e % 8 == l, each times
 * its 32-element sub-block's scale; adds d * float(lane) (d = dw * dx; mul,
 * then add) into 8 float lanes; subtracts (dmin * dx) * float(summ) from a
 * scalar sumf per block (summ = sum_j min_j * (bsums[2j] + bsums[2j + 1]));
 * and at the end adds the 8 float lanes to sumf one by one. The two chains
 * never meet before that end, so they run as two passes here:
 *  - lanes: one ymm per output, its lanes the reference's. Int32 lane l
 *    gathers, for sub-block j, the elements 32j + l + 8t (t = 0..3). A chunk
 *    c (sub-blocks 2c and 2c + 1) is stored as 32 bytes whose low nibbles
 *    give, in lane l, (e(2c, l, 0), e(2c, l, 1), e(2c+1, l, 0), e(2c+1, l, 1))
 *    and whose high nibbles give the same for t = 2, 3; the activations
 *    (aux_q4_k8r) are arranged to match. vpmaddubsw of each against its
 *    activations (pairs at most 2 * 15 * 128), vpaddw of the two (each int16
 *    the sum of one sub-block's four products, at most 4 * 15 * 128), then
 *    one vpmaddwd by the chunk's (scale_2c, scale_2c+1) pair adds
 *    scale_j * (four products) of both sub-blocks to each lane, exact in
 *    int32: three multiplies per 64 elements where one sub-block per vpmaddwd
 *    took four. A row's unpacked nibbles and scales serve 8 activation rows.
 *  - mins: eight outputs (rows) per ymm, the sumf chains lane-wise:
 *    summ from vpmaddwd of each row's mins with the activation's B[j] =
 *    bsums[2j] + bsums[2j + 1] (int16), exact, then
 *    sumf - (dmin * dx) * float(summ).
 *
 * Block column of a group (1152 bytes, 8 blocks' worth): d[8], dmin[8]
 * (f16), the rows' scales[12] at 32 + 12r, then row r's 128 qs at
 * 128 + 128r: byte 32c + 4l + k holds, for k = 2h + t (h, t in {0, 1}),
 * the nibbles of elements 64c + 32h + l + 8t (low) and 64c + 32h + l + 8t + 16
 * (high).
 *
 * Activation unit (aux_q4_k8r, 288 bytes per Q8_K block): at 64c + 4l + k
 * x[64c + 32h + l + 8t], at 64c + 32 + 4l + k the same + 16; B[8] as int16
 * at 256; dx (float) at 272. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/packed/layouts.h"

/* -DWEFT_NO_PACKEDK builds without the K-quant layouts (packed/packed_kq.c) */
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD) && !defined(WEFT_NO_PACKEDK)

#include <immintrin.h>

#include "backends/cpu/cpu_target.h"
#include "backends/cpu/packed/packed.h"
#include "backends/cpu/packed/kq_avx2.h"

#define Q4K8_COL 1152 /* 8 * sizeof(struct weft_block_q4_k) */
#define Q4K_UNIT 288  /* bytes per block of an activation unit (aux_q4_k8r) */
#define MAX_ACTS 64   /* activation rows per mins pass */

static void pack_q4_kx8r(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK_K;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += Q4K8_COL)
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q4_k *b =
                    (const struct weft_block_q4_k *)((const uint8_t *)w + (size_t)(g + r) * stride) + i;
                memcpy(o + 2 * r, &b->d, 2);
                memcpy(o + 16 + 2 * r, &b->dmin, 2);
                memcpy(o + 32 + 12 * r, b->scales, 12);
                /* element 64c + 32h + i is nibble h of qs[32c + i] */
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 8; l++)
                        for (int k = 0; k < 4; k++) {
                            const int h = k >> 1, i = l + 8 * (k & 1);
                            const int e0 = (b->qs[32 * c + i] >> (4 * h)) & 0xF;
                            const int e1 = (b->qs[32 * c + i + 16] >> (4 * h)) & 0xF;
                            o[128 + 128 * r + 32 * c + 4 * l + k] = (uint8_t)(e0 | e1 << 4);
                        }
            }
}

static size_t aux_q4_k8r_size(int64_t n) { return (size_t)(n / WEFT_QK_K) * Q4K_UNIT; }

static void aux_q4_k8r(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_k *x = vx;
    uint8_t *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK_K; i++, a += Q4K_UNIT) {
        memset(a, 0, Q4K_UNIT);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 8; l++)
                for (int k = 0; k < 4; k++) {
                    const int e = 64 * c + 32 * (k >> 1) + l + 8 * (k & 1);
                    a[64 * c + 4 * l + k] = (uint8_t)x[i].qs[e];
                    a[64 * c + 32 + 4 * l + k] = (uint8_t)x[i].qs[e + 16];
                }
        for (int j = 0; j < 8; j++) {
            const int16_t b = (int16_t)(x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
            memcpy(a + 256 + 2 * j, &b, 2);
        }
        memcpy(a + 272, &x[i].d, 4);
    }
}

static void xpack_q4_k8r(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride, (void)nx; /* one row per unit */
    aux_q4_k8r(x, n, dst);
}

/* scale_2c * (sub-block 2c's four products) + scale_2c+1 * (2c + 1's) per
 * lane, of a chunk's low and high nibbles (lo, hi) against its activations
 * at y and y + 32, sc the broadcast scale pair */
AI WEFT_AVX2 __m256i k4_chunk(__m256i lo, __m256i hi, const uint8_t *y, __m256i sc)
{
    const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)y)),
                                       _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 32))));
    return _mm256_madd_epi16(t, sc);
}

/* mins pass: sumf[a][r] for activation rows a < na (units at x, ubytes apart) */
AI WEFT_AVX2 void q4k8_mins(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, int na, float *sumf)
{
    for (int a = 0; a < na; a++) _mm256_storeu_ps(sumf + 8 * a, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * Q4K8_COL;
        __m256i mn[4];
        k4_mins8(p, mn);
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
        for (int a = 0; a < na; a++) {
            const uint8_t *u = x + (size_t)a * ubytes + (size_t)b * Q4K_UNIT;
            const __m256i s = k4_summ8(mn, u + 256);
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(dmin, _mm256_broadcast_ss((const float *)(u + 272))),
                                           _mm256_cvtepi32_ps(s));
            _mm256_storeu_ps(sumf + 8 * a, _mm256_sub_ps(_mm256_loadu_ps(sumf + 8 * a), t));
        }
    }
}

/* lanes pass: row r of the group against NR <= LT activation rows (units at
 * x, ubytes apart) over blocks b0..b1; the float lanes, acc[a][0..8), go on
 * from what they hold. A row's unpacked nibbles and scales serve LT
 * activation rows; their int lanes stay in registers through a block, their
 * float lanes (one add per block) in memory. */
#define LT 8
AI WEFT_AVX2 void q4k8_lanes(const uint8_t *w, int r, const uint8_t *x, size_t ubytes, int64_t b0, int64_t b1,
                             float (*acc)[8], const int NR)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + (size_t)b * Q4K8_COL;
        PREFETCH_COLUMN(p + 128 + 128 * r, 128);
        int32_t sp[4] __attribute__((aligned(16)));
        (void)k4_pairs(p + 32 + 12 * r, sp);
        weft_half dh;
        memcpy(&dh, p + 2 * r, 2);
        /* dw * dx of each activation row, broadcast from memory below */
        float dd[LT] __attribute__((aligned(32)));
        const float dw = weft_half_to_f32(dh);
        for (int a = 0; a < NR; a++) {
            float dx;
            memcpy(&dx, x + (size_t)a * ubytes + (size_t)b * Q4K_UNIT + 272, 4);
            dd[a] = dw * dx;
        }
        __asm__("" : "+m"(sp), "+m"(dd));
        __m256i ia[LT];
        for (int a = 0; a < NR; a++) ia[a] = _mm256_setzero_si256();
        const uint8_t *q = p + 128 + 128 * r;
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            const __m256i sc = bc32(sp + c);
            for (int a = 0; a < NR; a++)
                ia[a] = _mm256_add_epi32(ia[a], k4_chunk(lo, hi, x + (size_t)a * ubytes + (size_t)b * Q4K_UNIT + 64 * c, sc));
        }
        for (int a = 0; a < NR; a++)
            _mm256_store_ps(acc[a], _mm256_add_ps(_mm256_load_ps(acc[a]), _mm256_mul_ps(_mm256_broadcast_ss(dd + a),
                                                                                      _mm256_cvtepi32_ps(ia[a]))));
    }
}

/* blocks per step of the lanes passes: LT activation rows' units of KB
 * blocks (LT * KB * 288 bytes) stay in L1 while the group's 8 rows take them
 * (each step of every row's chains goes on in block order) */
#define KB 8

/* one group against na <= MAX_ACTS activation rows: out[a * ldo + r] */
static WEFT_AVX2 void q4k8_group(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, int na, float *out,
                                 size_t ldo)
{
    float sumf[MAX_ACTS * 8];
    float acc[8][LT][8] __attribute__((aligned(32)));
    q4k8_mins(w, x, ubytes, nb, na, sumf);
    for (int a0 = 0; a0 < na; a0 += LT) {
        const int nr = na - a0 < LT ? na - a0 : LT;
        const uint8_t *xa = x + (size_t)a0 * ubytes;
        memset(acc, 0, sizeof acc);
        for (int64_t b0 = 0; b0 < nb; b0 += KB) {
            const int64_t b1 = nb - b0 < KB ? nb : b0 + KB;
            KQ8_LANES_STEP(q4k8_lanes, w, xa, ubytes, b0, b1, acc, nr);
        }
        for (int r = 0; r < 8; r++)
            for (int a = 0; a < nr; a++) {
                float s = sumf[8 * (a0 + a) + r];
                for (int l = 0; l < 8; l++) s += acc[r][a][l];
                out[(size_t)(a0 + a) * ldo + r] = s;
            }
    }
}

/* decode: one group against one activation row, block by block, the eight
 * rows' lane accumulators and the mins chains (one ymm) side by side */
static WEFT_AVX2 void dotp_q4_kx8r(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    (void)vx;
    const uint8_t *p = wp, *u = vaux;
    const int64_t nb = n / WEFT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[8], sumf = _mm256_setzero_ps();
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, p += Q4K8_COL, u += Q4K_UNIT) {
        PREFETCH_COLUMN(p, Q4K8_COL);
        int32_t sp[8][4] __attribute__((aligned(16)));
        __m128i mn[8];
        for (int r = 0; r < 8; r++) mn[r] = k4_pairs(p + 32 + 12 * r, sp[r]);
        __m256i m4x[4];
        for (int k = 0; k < 4; k++) m4x[k] = _mm256_set_m128i(mn[k + 4], mn[k]);
        const __m256 dx = _mm256_broadcast_ss((const float *)(u + 272));
        const __m256i s = k4_summ8(m4x, u + 256);
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
        sumf = _mm256_sub_ps(sumf, _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(s)));
        float dd[8] __attribute__((aligned(32)));
        _mm256_store_ps(dd, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), dx));
        __asm__("" : "+m"(dd), "+m"(sp)); /* broadcast each from memory */
        for (int r = 0; r < 8; r++) {
            const uint8_t *q = p + 128 + 128 * r;
            __m256i ia = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                ia = _mm256_add_epi32(ia, k4_chunk(lo, hi, u + 64 * c, bc32(&sp[r][c])));
            }
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_broadcast_ss(dd + r), _mm256_cvtepi32_ps(ia)));
        }
    }
    float sm[8], l[8];
    _mm256_storeu_ps(sm, sumf);
    for (int r = 0; r < 8; r++) {
        _mm256_storeu_ps(l, acc[r]);
        float v = sm[r];
        for (int k = 0; k < 8; k++) v += l[k];
        out[r] = v;
    }
}

KQ8_GEMMP(gemmp_q4_kx8r, q4k8_group, Q4K8_COL, Q4K_UNIT, MAX_ACTS)

void weft_cpu_kernels_fill_avx2_packedk(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni; /* the avx512vnni table has its own (packed/packed_kq.c) */
    k->packed[WEFT_TYPE_Q4_K] = (struct weft_cpu_packed){
        .rows = 8, .pack = pack_q4_kx8r, .aux_size = aux_q4_k8r_size, .aux = aux_q4_k8r,
        .dot = dotp_q4_kx8r, .xrows = 1, .xp_size = aux_q4_k8r_size, .xpack = xpack_q4_k8r,
        .gemmp = gemmp_q4_kx8r};
}

#else

void weft_cpu_kernels_fill_avx2_packedk(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
