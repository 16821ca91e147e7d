/* Repacked decode layouts for the K-quants (AVX-512 VNNI), as
 * packed/packed_q32.c does for the 32-element types: a group of rows is
 * stored block column by block column, one 32-bit lane per row, so one
 * kernel call streams one contiguous run and needs no horizontal sums.
 * out[i] is bit-identical to the table's one-row dot of row i
 * (tests/cpu/test_cpu_packed.c checks it).
 *
 *  - Q4_K, 16 rows. The reference (backends/cpu/cpu_ref_dot.c dot_q4_k, ggml's AVX2
 *    order) keeps per row 8 int32 lanes per block (lane l: the elements e
 *    with e % 8 == l, each times its 32-element sub-block scale), adds
 *    d * float(lane) (mul, then add) into 8 float lanes, subtracts
 *    (dmin * dx) * float(summ) from a scalar sumf per block, and at the end
 *    adds the 8 float lanes to sumf one by one. Here the 8 int lanes of 16
 *    rows are 8 zmm (lane r = row r) and every float step is the same step
 *    in lane r. Block column (2304 bytes = 16 blocks): d[16], dmin[16]
 *    (f16), the scales as three 64-byte planes (plane k, lane r: bytes
 *    4k..4k+3 of row r's scales[12], unpacked in the kernel as
 *    weft_k4_scale_min), then 32 chunks of 64 bytes: chunk 8c + l holds, in
 *    lane r, qs bytes 32c + l + {0, 8, 16, 24} of row r, so its low nibbles
 *    are elements 64c + l + {0, 8, 16, 24} (sub-block 2c) and its high
 *    nibbles the same + 32 (sub-block 2c + 1): four elements of int lane l
 *    under one scale. vpmaddubsw against the activations' matching 4 bytes
 *    (broadcast), then vpdpwssd with the scale as an int16 pair, adds
 *    scale * (the 4 products) to lane l; exact in int (|pairs| <= 3840).
 *    The mins term sum_j m_j * (bsums[2j] + bsums[2j+1]) is 4 vpdpwssd.
 *
 * aux (one per activation row, from its Q8_K blocks), 288 bytes per block:
 * the 256 qs rearranged (sub-block j, lane l: bytes 32j + 4l.. hold
 * x[32j + l + {0, 8, 16, 24}]), int16 bsum pairs B[8] (B[j] = bsums[2j] +
 * bsums[2j+1]), float dx, pad. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/types.h"
#include "backends/cpu/packed/layouts.h"

/* -DWEFT_NO_PACKEDK builds without these layouts (for A/B timing) */
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD) && !defined(WEFT_NO_PACKEDK)

#include <immintrin.h>

#define ROWP(T, r) ((const T *)((const uint8_t *)w + (size_t)(r) * stride))

/* ---- Q4_K x 16 layout ---- */
#define Q4K_COL 2304 /* 16 * sizeof(struct weft_block_q4_k) */
#define Q4K_QS 256   /* offset of the 32 qs chunks in a block column */

static void pack_q4_kx16(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK_K;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 16)
        for (int64_t i = 0; i < nb; i++, o += Q4K_COL)
            for (int r = 0; r < 16; r++) {
                const struct weft_block_q4_k *b = ROWP(struct weft_block_q4_k, g + r) + i;
                memcpy(o + 2 * r, &b->d, 2);
                memcpy(o + 32 + 2 * r, &b->dmin, 2);
                for (int k = 0; k < 3; k++) memcpy(o + 64 + 64 * k + 4 * r, b->scales + 4 * k, 4);
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 8; l++)
                        for (int t = 0; t < 4; t++)
                            o[Q4K_QS + 64 * (8 * c + l) + 4 * r + t] = b->qs[32 * c + l + 8 * t];
            }
}

#define Q4K_AUX 288

size_t weft_cpu_aux_q4_k_size(int64_t n) { return (size_t)(n / WEFT_QK_K) * Q4K_AUX; }

void weft_cpu_aux_q4_k(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_k *x = vx;
    uint8_t *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK_K; i++, a += Q4K_AUX) {
        memset(a, 0, Q4K_AUX);
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 8; l++)
                for (int t = 0; t < 4; t++) a[32 * j + 4 * l + t] = (uint8_t)x[i].qs[32 * j + l + 8 * t];
        for (int j = 0; j < 8; j++) {
            const int16_t b = (int16_t)(x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
            memcpy(a + 256 + 2 * j, &b, 2);
        }
        memcpy(a + 272, &x[i].d, 4);
    }
}

#include "backends/cpu/packed/packed.h"

/* per dword: bytes (b, b) of the dword as an int16 pair (b, b) */
AI WEFT_AVX512_VNNI __m512i pair_idx(int b)
{
    const __m128i i = _mm_setr_epi8((char)b, -1, (char)b, -1, (char)(4 + b), -1, (char)(4 + b), -1, (char)(8 + b), -1,
                                    (char)(8 + b), -1, (char)(12 + b), -1, (char)(12 + b), -1);
    return _mm512_broadcast_i32x4(i);
}

/* ---- Q4_K x Q8_K, 16 rows ---- */
/* k4_unpack_scales lane-wise on a block column's three scale planes: u0, u1
 * the scales of sub-blocks 0..3, 4..7; u2, u3 the mins (a byte each) */
AI WEFT_AVX512_VNNI void q4k_scales(const uint8_t *p, __m512i *u0, __m512i *u1, __m512i *u2, __m512i *u3)
{
    const __m512i km1 = _mm512_set1_epi32(0x3f3f3f3f), km2 = _mm512_set1_epi32(0x0f0f0f0f),
                  km3 = _mm512_set1_epi32(0x03030303);
    const __m512i s0 = _mm512_loadu_si512((const void *)(p + 64));
    const __m512i s1 = _mm512_loadu_si512((const void *)(p + 128));
    const __m512i s2 = _mm512_loadu_si512((const void *)(p + 192));
    *u3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), km2),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, 6), km3), 4));
    *u1 = _mm512_or_si512(_mm512_and_si512(s2, km2),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, 6), km3), 4));
    *u2 = _mm512_and_si512(s1, km1);
    *u0 = _mm512_and_si512(s0, km1);
}

static WEFT_AVX512_VNNI void dotp_q4_kx16(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    (void)vx;
    const uint8_t *p = wp, *a = vaux;
    const int64_t nb = n / WEFT_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i b0 = pair_idx(0), b1 = pair_idx(1), b2 = pair_idx(2), b3 = pair_idx(3);
    /* per dword: bytes (0, 1) / (2, 3) as int16s */
    const __m512i mlo = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1));
    const __m512i mhi =
        _mm512_broadcast_i32x4(_mm_setr_epi8(2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1));
    __m512 f0 = _mm512_setzero_ps(), f1 = f0, f2 = f0, f3 = f0, f4 = f0, f5 = f0, f6 = f0, f7 = f0, sumf = f0;
    for (int64_t i = 0; i < nb; i++, p += Q4K_COL, a += Q4K_AUX) {
        PREFETCH_COLUMN(p, Q4K_COL);
        __m512i u0, u1, u2, u3;
        q4k_scales(p, &u0, &u1, &u2, &u3);
        /* summ = sum_j m_j * B_j, exact */
        __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi8(u2, mlo), bcast32(a + 256));
        summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(u2, mhi), bcast32(a + 260));
        summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(u3, mlo), bcast32(a + 264));
        summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(u3, mhi), bcast32(a + 268));
        __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0, l4 = l0, l5 = l0, l6 = l0, l7 = l0;
        const uint8_t *q = p + Q4K_QS;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++, q += 512) {
            const __m512i ulo = c < 2 ? u0 : u1;
            const __m512i sclo = _mm512_shuffle_epi8(ulo, (c & 1) ? b2 : b0);
            const __m512i schi = _mm512_shuffle_epi8(ulo, (c & 1) ? b3 : b1);
            const uint8_t *xlo = a + 64 * c, *xhi = a + 64 * c + 32;
#define Q4K_STEP(acc, l)                                                                                      \
            do {                                                                                              \
                const __m512i qv = _mm512_loadu_si512((const void *)(q + 64 * (l)));                          \
                acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_and_si512(qv, m4), bcast32(xlo + 4 * (l))), \
                                          sclo);                                                              \
                acc = _mm512_dpwssd_epi32(                                                                    \
                    acc, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(qv, 4), m4), bcast32(xhi + 4 * (l))), \
                    schi);                                                                                    \
            } while (0)
            Q4K_STEP(l0, 0);
            Q4K_STEP(l1, 1);
            Q4K_STEP(l2, 2);
            Q4K_STEP(l3, 3);
            Q4K_STEP(l4, 4);
            Q4K_STEP(l5, 5);
            Q4K_STEP(l6, 6);
            Q4K_STEP(l7, 7);
#undef Q4K_STEP
        }
        float dx;
        memcpy(&dx, a + 272, 4);
        const __m512 vdx = _mm512_set1_ps(dx);
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)), vdx);
        const __m512 dm = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32))), vdx);
        f0 = _mm512_add_ps(f0, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l0)));
        f1 = _mm512_add_ps(f1, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l1)));
        f2 = _mm512_add_ps(f2, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l2)));
        f3 = _mm512_add_ps(f3, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l3)));
        f4 = _mm512_add_ps(f4, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l4)));
        f5 = _mm512_add_ps(f5, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l5)));
        f6 = _mm512_add_ps(f6, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l6)));
        f7 = _mm512_add_ps(f7, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l7)));
        sumf = _mm512_sub_ps(sumf, _mm512_mul_ps(dm, _mm512_cvtepi32_ps(summ)));
    }
    sumf = _mm512_add_ps(sumf, f0);
    sumf = _mm512_add_ps(sumf, f1);
    sumf = _mm512_add_ps(sumf, f2);
    sumf = _mm512_add_ps(sumf, f3);
    sumf = _mm512_add_ps(sumf, f4);
    sumf = _mm512_add_ps(sumf, f5);
    sumf = _mm512_add_ps(sumf, f6);
    sumf = _mm512_add_ps(sumf, f7);
    _mm512_storeu_ps(out, sumf);
}

/* ---- Q4_K x 16 prefill (xpack + gemmp): up to 4 activation rows against
 * one group, the weights' nibbles unpacked once per chunk for all of them.
 * A unit is one activation row's aux (above). Every float step is the decode
 * kernel's in the same order, per activation row; int lane l is summed over
 * the 4 chunks 8c + l before its float step (exact). ---- */
void weft_cpu_xpack_q4_k(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride, (void)nx; /* one row per unit */
    weft_cpu_aux_q4_k(x, n, dst);
}

AI WEFT_AVX512_VNNI void q4kp_tile(const uint8_t *p, const uint8_t *x, size_t ubytes, int64_t nb, float *out,
                                   size_t ldo, const int NR)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i mlo = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1));
    const __m512i mhi =
        _mm512_broadcast_i32x4(_mm_setr_epi8(2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1));
    __m512 f[4][8], sumf[4];
    for (int j = 0; j < NR; j++) {
        sumf[j] = _mm512_setzero_ps();
        for (int l = 0; l < 8; l++) f[j][l] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++, p += Q4K_COL) {
        PREFETCH_COLUMN(p, Q4K_COL);
        __m512i u0, u1, u2, u3;
        q4k_scales(p, &u0, &u1, &u2, &u3);
        __m512i sc[8]; /* 2c: sub-block 2c's scale, 2c + 1: 2c + 1's, as int16 pairs per lane */
        for (int c = 0; c < 4; c++) {
            const __m512i uc = c < 2 ? u0 : u1;
            sc[2 * c] = _mm512_shuffle_epi8(uc, pair_idx(2 * (c & 1)));
            sc[2 * c + 1] = _mm512_shuffle_epi8(uc, pair_idx(2 * (c & 1) + 1));
        }
        const __m512i m2l = _mm512_shuffle_epi8(u2, mlo), m2h = _mm512_shuffle_epi8(u2, mhi),
                      m3l = _mm512_shuffle_epi8(u3, mlo), m3h = _mm512_shuffle_epi8(u3, mhi);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
        const uint8_t *a[4];
        __m512 d[4];
        for (int j = 0; j < NR; j++) {
            a[j] = x + (size_t)j * ubytes + (size_t)i * Q4K_AUX;
            float dx;
            memcpy(&dx, a[j] + 272, 4);
            const __m512 vdx = _mm512_set1_ps(dx);
            d[j] = _mm512_mul_ps(dw, vdx);
            __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m2l, bcast32(a[j] + 256));
            summ = _mm512_dpwssd_epi32(summ, m2h, bcast32(a[j] + 260));
            summ = _mm512_dpwssd_epi32(summ, m3l, bcast32(a[j] + 264));
            summ = _mm512_dpwssd_epi32(summ, m3h, bcast32(a[j] + 268));
            sumf[j] = _mm512_sub_ps(sumf[j], _mm512_mul_ps(_mm512_mul_ps(dmin, vdx), _mm512_cvtepi32_ps(summ)));
        }
        const uint8_t *q = p + Q4K_QS;
        for (int l = 0; l < 8; l++) {
            __m512i acc[4];
            for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) {
                const __m512i qv = _mm512_loadu_si512((const void *)(q + 512 * c + 64 * l));
                const __m512i lo = _mm512_and_si512(qv, m4), hi = _mm512_and_si512(_mm512_srli_epi16(qv, 4), m4);
                for (int j = 0; j < NR; j++) {
                    acc[j] = _mm512_dpwssd_epi32(acc[j], _mm512_maddubs_epi16(lo, bcast32(a[j] + 64 * c + 4 * l)),
                                                 sc[2 * c]);
                    acc[j] = _mm512_dpwssd_epi32(
                        acc[j], _mm512_maddubs_epi16(hi, bcast32(a[j] + 64 * c + 32 + 4 * l)), sc[2 * c + 1]);
                }
            }
            for (int j = 0; j < NR; j++) f[j][l] = _mm512_add_ps(f[j][l], _mm512_mul_ps(d[j], _mm512_cvtepi32_ps(acc[j])));
        }
    }
    for (int j = 0; j < NR; j++) {
        __m512 s = sumf[j];
        for (int l = 0; l < 8; l++) s = _mm512_add_ps(s, f[j][l]);
        _mm512_storeu_ps(out + (size_t)j * ldo, s);
    }
}

/* A packed prefill over `groups` 16-row groups and nx activation rows, 4 rows at a time
 * (the tile's NR a constant in each case); unit_bytes: one activation row's unit */
#define GEMMP_16(name, tile, col_bytes, unit_bytes)                                                           \
    static WEFT_AVX512_VNNI void name(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, \
                                      size_t ldo)                                                             \
    {                                                                                                         \
        const int64_t nb = n / WEFT_QK_K;                                                                     \
        const size_t gbytes = (size_t)nb * (col_bytes), ubytes = (unit_bytes);                                \
        for (int j = 0; j < nx; j += 4) {                                                                     \
            const int nr = nx - j < 4 ? nx - j : 4;                                                           \
            const uint8_t *x = (const uint8_t *)xp + (size_t)j * ubytes;                                      \
            for (int g = 0; g < groups; g++) {                                                                \
                const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;                                  \
                float *o = out + (size_t)j * ldo + 16 * g;                                                    \
                switch (nr) {                                                                                 \
                case 1: tile(w, x, ubytes, nb, o, ldo, 1); break;                                             \
                case 2: tile(w, x, ubytes, nb, o, ldo, 2); break;                                             \
                case 3: tile(w, x, ubytes, nb, o, ldo, 3); break;                                             \
                default: tile(w, x, ubytes, nb, o, ldo, 4); break;                                            \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

GEMMP_16(gemmp_q4_k, q4kp_tile, Q4K_COL, (size_t)nb * Q4K_AUX)

/* ---- Q6_K x 16 layout ---- */
#define Q6K_COL 3360 /* 16 * sizeof(struct weft_block_q6_k) */
#define Q6K_QL 288   /* 32 ql planes */
#define Q6K_QH 2336  /* 16 qh planes */

static void pack_q6_kx16(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK_K;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 16)
        for (int64_t i = 0; i < nb; i++, o += Q6K_COL)
            for (int r = 0; r < 16; r++) {
                const struct weft_block_q6_k *b = ROWP(struct weft_block_q6_k, g + r) + i;
                memcpy(o + 2 * r, &b->d, 2);
                for (int k = 0; k < 4; k++) memcpy(o + 32 + 64 * k + 4 * r, b->scales + 4 * k, 4);
                for (int h = 0; h < 4; h++)
                    for (int l = 0; l < 8; l++) memcpy(o + Q6K_QL + 64 * (8 * h + l) + 4 * r, b->ql + 32 * h + 4 * l, 4);
                for (int h = 0; h < 2; h++)
                    for (int l = 0; l < 8; l++) memcpy(o + Q6K_QH + 64 * (8 * h + l) + 4 * r, b->qh + 32 * h + 4 * l, 4);
            }
}

/* per dword: bytes b0, b1 of the dword as sign-extended int16s (after srai 8) */
AI WEFT_AVX512_VNNI __m512i sx_pair(__m512i v, int b0, int b1)
{
    const __m128i i = _mm_setr_epi8(-1, (char)b0, -1, (char)b1, -1, (char)(4 + b0), -1, (char)(4 + b1), -1,
                                    (char)(8 + b0), -1, (char)(8 + b1), -1, (char)(12 + b0), -1, (char)(12 + b1));
    return _mm512_srai_epi16(_mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(i)), 8);
}

/* 32-element group k (0..7) of a block column, int lane l (0..7): the 6-bit
 * values (0..63) of its 4 elements in each row's dword */
AI WEFT_AVX512_VNNI __m512i q6k_chunk(const uint8_t *p, int k, int l)
{
    const int nh = k >> 2, j = k & 3;
    const uint8_t *ql = p + Q6K_QL + 64 * 8 * (2 * nh + (j & 1)), *qh = p + Q6K_QH + 64 * 8 * nh;
    __m512i lo = _mm512_loadu_si512((const void *)(ql + 64 * l));
    __m512i hb = _mm512_loadu_si512((const void *)(qh + 64 * l));
    lo = j & 2 ? _mm512_srli_epi16(lo, 4) : lo;
    hb = j == 0 ? _mm512_slli_epi16(hb, 4) : j == 1 ? _mm512_slli_epi16(hb, 2) : j == 3 ? _mm512_srli_epi16(hb, 2) : hb;
    return _mm512_ternarylogic_epi32(_mm512_and_si512(lo, _mm512_set1_epi8(0x0F)), hb, _mm512_set1_epi8(0x30), 0xF8);
}

/* ---- Q6_K x Q8_K, 16 rows: int lane l = the elements 32k + 4l..4l+3 (all
 * k) times their 16-element scale, minus 32 * (bsums[2l] sc[2l] +
 * bsums[2l+1] sc[2l+1]); acc = fma(d, float(lane), acc); hsum_float_8 ---- */
static WEFT_AVX512_VNNI void dotp_q6_kx16(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    (void)vaux;
    const uint8_t *p = wp;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    __m512 f0 = _mm512_setzero_ps(), f1 = f0, f2 = f0, f3 = f0, f4 = f0, f5 = f0, f6 = f0, f7 = f0;
    for (int64_t i = 0; i < nb; i++, p += Q6K_COL) {
        PREFETCH_COLUMN(p, Q6K_COL);
        const __m512i sp[4] = {_mm512_loadu_si512((const void *)(p + 32)), _mm512_loadu_si512((const void *)(p + 96)),
                               _mm512_loadu_si512((const void *)(p + 160)), _mm512_loadu_si512((const void *)(p + 224))};
        const int8_t *xq = x[i].qs;
        __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0, l4 = l0, l5 = l0, l6 = l0, l7 = l0;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i sclo = sx_pair(sp[k >> 1], 2 * (k & 1), 2 * (k & 1));
            const __m512i schi = sx_pair(sp[k >> 1], 2 * (k & 1) + 1, 2 * (k & 1) + 1);
#define Q6K_STEP(acc, l, sc) \
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q6k_chunk(p, k, l), bcast32(xq + 32 * k + 4 * (l))), sc)
            Q6K_STEP(l0, 0, sclo);
            Q6K_STEP(l1, 1, sclo);
            Q6K_STEP(l2, 2, sclo);
            Q6K_STEP(l3, 3, sclo);
            Q6K_STEP(l4, 4, schi);
            Q6K_STEP(l5, 5, schi);
            Q6K_STEP(l6, 6, schi);
            Q6K_STEP(l7, 7, schi);
#undef Q6K_STEP
        }
        const int16_t *bs = x[i].bsums;
        const __m512i z = _mm512_setzero_si512();
#define Q6K_OFF(acc, l)                                                                                         \
        acc = _mm512_sub_epi32(                                                                                 \
            acc, _mm512_slli_epi32(_mm512_dpwssd_epi32(z, sx_pair(sp[(l) >> 1], 2 * ((l) & 1), 2 * ((l) & 1) + 1), \
                                                       bcast32(bs + 2 * (l))), 5))
        Q6K_OFF(l0, 0);
        Q6K_OFF(l1, 1);
        Q6K_OFF(l2, 2);
        Q6K_OFF(l3, 3);
        Q6K_OFF(l4, 4);
        Q6K_OFF(l5, 5);
        Q6K_OFF(l6, 6);
        Q6K_OFF(l7, 7);
#undef Q6K_OFF
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(x[i].d), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)));
        f0 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l0), f0);
        f1 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l1), f1);
        f2 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l2), f2);
        f3 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l3), f3);
        f4 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l4), f4);
        f5 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l5), f5);
        f6 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l6), f6);
        f7 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l7), f7);
    }
    /* hsum_float_8: ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)) */
    const __m512 h = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(f0, f4), _mm512_add_ps(f2, f6)),
                                   _mm512_add_ps(_mm512_add_ps(f1, f5), _mm512_add_ps(f3, f7)));
    _mm512_storeu_ps(out, h);
}

/* ---- Q6_K x 16 prefill (xpack + gemmp): up to 4 activation rows against
 * one group, each 6-bit chunk assembled once for all of them. A unit is the
 * activation row itself (its Q8_K blocks). Per activation row every step is
 * the decode kernel's: int lane l summed over k (exact, in any order), minus
 * the offset term, then the fma and at the end hsum_float_8. ---- */
static size_t xp_size_q6_k(int64_t n) { return weft_row_size(WEFT_TYPE_Q8_K, n); }

static void xpack_q6_k(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride, (void)nx; /* one row per unit */
    memcpy(dst, x, xp_size_q6_k(n));
}

AI WEFT_AVX512_VNNI void q6kp_tile(const uint8_t *p, const uint8_t *x, size_t ubytes, int64_t nb, float *out,
                                   size_t ldo, const int NR)
{
    __m512 f[4][8];
    for (int j = 0; j < NR; j++)
        for (int l = 0; l < 8; l++) f[j][l] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, p += Q6K_COL) {
        PREFETCH_COLUMN(p, Q6K_COL);
        const __m512i sp[4] = {_mm512_loadu_si512((const void *)(p + 32)), _mm512_loadu_si512((const void *)(p + 96)),
                               _mm512_loadu_si512((const void *)(p + 160)), _mm512_loadu_si512((const void *)(p + 224))};
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const struct weft_block_q8_k *xb[4];
        for (int j = 0; j < NR; j++) xb[j] = (const struct weft_block_q8_k *)(x + (size_t)j * ubytes) + i;
        for (int l = 0; l < 8; l++) {
            __m512i acc[4];
            for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i sc = sx_pair(sp[k >> 1], 2 * (k & 1) + (l >= 4), 2 * (k & 1) + (l >= 4));
                const __m512i u = q6k_chunk(p, k, l);
                for (int j = 0; j < NR; j++)
                    acc[j] = _mm512_dpwssd_epi32(acc[j], _mm512_maddubs_epi16(u, bcast32(xb[j]->qs + 32 * k + 4 * l)),
                                                 sc);
            }
            const __m512i off = sx_pair(sp[l >> 1], 2 * (l & 1), 2 * (l & 1) + 1), z = _mm512_setzero_si512();
            for (int j = 0; j < NR; j++) {
                acc[j] = _mm512_sub_epi32(
                    acc[j], _mm512_slli_epi32(_mm512_dpwssd_epi32(z, off, bcast32(xb[j]->bsums + 2 * l)), 5));
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(xb[j]->d), dw);
                f[j][l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(acc[j]), f[j][l]);
            }
        }
    }
    for (int j = 0; j < NR; j++) {
        /* hsum_float_8: ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)) */
        const __m512 h = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(f[j][0], f[j][4]), _mm512_add_ps(f[j][2], f[j][6])),
                                       _mm512_add_ps(_mm512_add_ps(f[j][1], f[j][5]), _mm512_add_ps(f[j][3], f[j][7])));
        _mm512_storeu_ps(out + (size_t)j * ldo, h);
    }
}

GEMMP_16(gemmp_q6_k, q6kp_tile, Q6K_COL, xp_size_q6_k(n))

void weft_cpu_kernels_fill_avx512_packedk(struct weft_cpu_kernels *k, bool vnni)
{
    if (!vnni) return;
    k->packed[WEFT_TYPE_Q4_K] = (struct weft_cpu_packed){.rows = 16, .pack = pack_q4_kx16, .aux_size = weft_cpu_aux_q4_k_size,
                                                         .aux = weft_cpu_aux_q4_k, .dot = dotp_q4_kx16, .xrows = 1,
                                                         .xp_size = weft_cpu_aux_q4_k_size, .xpack = weft_cpu_xpack_q4_k,
                                                         .gemmp = gemmp_q4_k};
    k->packed[WEFT_TYPE_Q6_K] = (struct weft_cpu_packed){.rows = 16, .pack = pack_q6_kx16, .dot = dotp_q6_kx16,
                                                         .xrows = 1, .xp_size = xp_size_q6_k, .xpack = xpack_q6_k,
                                                         .gemmp = gemmp_q6_k};
}

#else

void weft_cpu_kernels_fill_avx512_packedk(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
