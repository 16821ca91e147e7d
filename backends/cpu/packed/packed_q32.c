/* Repacked weight layouts for decode (AVX-512 VNNI): a group of rows is
 * stored block column by block column, so one kernel call streams one
 * contiguous run of memory and loads whole registers with no gathers or
 * shuffles of the weights. out[i] is bit-identical to the table's one-row
 * dot of row i (tests/cpu/test_cpu_packed.c checks it): the integer
 * parts are exact whatever instructions compute them, the float steps are
 * the reference's, lane for lane.
 *
 *  - Q4_0, 16 rows, one 32-bit lane per row. The reference (ggml's repacked
 *    Q4_0 gemv order) is one float chain per row:
 *      sum += ((float)isum * dw) * dx
 *    so sixteen rows are sixteen lanes of a zmm. Block column (288 bytes):
 *    d[16] (f16), then four 64-byte chunks; chunk k holds bytes 4k..4k+3 of
 *    every row's qs at 4r, so its low nibbles are elements 4k..4k+3 and its
 *    high nibbles 16+4k..16+4k+3 of row r, in lane r. vpdpbusd on the
 *    unsigned nibbles with the activations' 4-byte groups broadcast, started
 *    from -8 * sum(block of x) (aux), gives the exact sum of (q - 8) * x.
 *  - Q4_1, 8 rows. The reference keeps 8 float lanes per row (lane l: the
 *    int sum of elements 4l..4l+3) and a summs chain. Block column (160
 *    bytes): (d, m)[8] (f16), then rows 0..3's qs (row r: bytes 16r..),
 *    rows 4..7's: one load per four rows; low nibbles against x[0..15]
 *    give lanes 0..3, high nibbles against x[16..31] lanes 4..7 (as
 *    q32/q32_dot4_avx512.c, without its permutes and per-row loads).
 *  - Q8_0, 8 rows. Lanes as Q4_1; block column (272 bytes): d[8] (f16),
 *    then rows (0,1), (2,3), (4,5), (6,7) as 256-bit halves of four 64-byte
 *    chunks, each weight stored + 128 (xor 0x80), unsigned for vpdpbusd,
 *    which starts from -128 * (the activations' 4-byte lane sums) (aux).
 *  - Q5_0, 8 rows. Lanes as Q8_0; block column (176 bytes): d[8], qh[8],
 *    then rows (0,1), (2,3), ... qs as 32-byte pairs; a pair is unpacked to
 *    u = v + 16 (0..31) in element order, one row per 256-bit half
 *    (vpermq, nibble shifts, the high bits from qh as a byte mask), and
 *    vpdpbusd starts from -16 * (the activations' 4-byte lane sums) (aux).
 *
 * aux (one per activation row, from its Q8_0 / Q8_1 blocks): Q4_0 {int32
 * -8 sum(x), float dx} per block; Q4_1 {float dx, float sx}; Q8_0 {int32
 * -128 lane sums [8], float dx, pad} (64 bytes); Q5_0 the same with -16. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/types.h"
#include "backends/cpu/packed/layouts.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>

/* ---- layouts ---- */

#define ROWP(T, r) ((const T *)((const uint8_t *)w + (size_t)(r) * stride))

void weft_cpu_pack_q4_0x16(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK4_0;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 16)
        for (int64_t i = 0; i < nb; i++, o += 16 * sizeof(struct weft_block_q4_0))
            for (int r = 0; r < 16; r++) {
                const struct weft_block_q4_0 *b = ROWP(struct weft_block_q4_0, g + r) + i;
                memcpy(o + 2 * r, &b->d, 2);
                for (int k = 0; k < 4; k++) memcpy(o + 32 + 64 * k + 4 * r, b->qs + 4 * k, 4);
            }
}

void weft_cpu_pack_q4_1x8(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK4_1;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += 8 * sizeof(struct weft_block_q4_1))
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q4_1 *b = ROWP(struct weft_block_q4_1, g + r) + i;
                memcpy(o + 4 * r, &b->d, 2);
                memcpy(o + 4 * r + 2, &b->m, 2);
                memcpy(o + 32 + 16 * r, b->qs, 16);
            }
}

static void pack_q8_0x8(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK8_0;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += 8 * sizeof(struct weft_block_q8_0))
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q8_0 *b = ROWP(struct weft_block_q8_0, g + r) + i;
                memcpy(o + 2 * r, &b->d, 2);
                for (int j = 0; j < 32; j++) o[16 + 32 * r + j] = (uint8_t)b->qs[j] ^ 0x80;
            }
}

/* Q5_0 x 8: d[8] (16 bytes), qh[8] (32), then per row pair (r, r + 1) its
 * two qs (16 + 16) */
static void pack_q5_0x8(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK5_0;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += 8 * sizeof(struct weft_block_q5_0))
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q5_0 *b = ROWP(struct weft_block_q5_0, g + r) + i;
                memcpy(o + 2 * r, &b->d, 2);
                memcpy(o + 16 + 4 * r, b->qh, 4);
                memcpy(o + 48 + 16 * r, b->qs, 16);
            }
}

/* ---- activation aux data ---- */

size_t weft_cpu_aux8_size(int64_t n) { return (size_t)(n / 32) * 8; }
static size_t aux64_size(int64_t n) { return (size_t)(n / 32) * 64; }

void weft_cpu_aux_q4_0(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_0 *x = vx;
    uint8_t *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK8_0; i++, a += 8) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += x[i].qs[j];
        s *= -8;
        const float d = weft_half_to_f32(x[i].d);
        memcpy(a, &s, 4);
        memcpy(a + 4, &d, 4);
    }
}

void weft_cpu_aux_q4_1(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_1 *x = vx;
    float *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK8_1; i++) {
        a[2 * i] = weft_half_to_f32(x[i].d);
        a[2 * i + 1] = weft_half_to_f32(x[i].s);
    }
}

static void aux_q8_0(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_0 *x = vx;
    uint8_t *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK8_0; i++, a += 64) {
        int32_t c[16] = {0};
        for (int l = 0; l < 8; l++)
            c[l] = -128 * (x[i].qs[4 * l] + x[i].qs[4 * l + 1] + x[i].qs[4 * l + 2] + x[i].qs[4 * l + 3]);
        const float d = weft_half_to_f32(x[i].d);
        memcpy(&c[8], &d, 4);
        memcpy(a, c, 64);
    }
}

/* as aux_q8_0 with -16: {int32 -16 lane sums [8], float dx, pad} per block */
static void aux_q5_0(const void *vx, int64_t n, void *vaux)
{
    const struct weft_block_q8_0 *x = vx;
    uint8_t *a = vaux;
    for (int64_t i = 0; i < n / WEFT_QK8_0; i++, a += 64) {
        int32_t c[16] = {0};
        for (int l = 0; l < 8; l++)
            c[l] = -16 * (x[i].qs[4 * l] + x[i].qs[4 * l + 1] + x[i].qs[4 * l + 2] + x[i].qs[4 * l + 3]);
        const float d = weft_half_to_f32(x[i].d);
        memcpy(&c[8], &d, 4);
        memcpy(a, c, 64);
    }
}

#include "backends/cpu/packed/packed.h"

/* ---- Q4_0 x Q8_0, 16 rows ---- */
static WEFT_AVX512_VNNI void dotp_q4_0x16(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    const uint8_t *p = wp, *a = vaux;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK8_0;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, p += 288, a += 8) {
        PREFETCH_COLUMN(p, 288);
        const int8_t *xq = x[i].qs;
        __m512i s0 = bcast32(a), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            const __m512i q = _mm512_loadu_si512((const void *)(p + 32 + 64 * k));
            s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(q, m4), bcast32(xq + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4), bcast32(xq + 16 + 4 * k));
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        float dx;
        memcpy(&dx, a + 4, 4);
        const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(f, dw), _mm512_set1_ps(dx)));
    }
    _mm512_storeu_ps(out, acc);
}

/* ---- Q4_1 x Q8_1, 8 rows ---- */
static WEFT_AVX512_VNNI void dotp_q4_1x8(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    const uint8_t *p = wp;
    const float *a = vaux;
    const struct weft_block_q8_1 *x = vx;
    const int64_t nb = n / WEFT_QK4_1;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* d*dx of row r (lane 2r) into 128-bit lane r, rows 0..3 / 4..7 */
    const __m512i i0 = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m512i i1 = _mm512_setr_epi32(8, 8, 8, 8, 10, 10, 10, 10, 12, 12, 12, 12, 14, 14, 14, 14);
    __m512 lo0 = _mm512_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0, sm = lo0;
    for (int64_t i = 0; i < nb; i++, p += 160) {
        PREFETCH_COLUMN(p, 160);
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        double xds_d;
        memcpy(&xds_d, a + 2 * i, 8);
        const __m512 xds = _mm512_castpd_ps(_mm512_set1_pd(xds_d));
        sm = _mm512_fmadd_ps(dm, xds, sm); /* odd lanes: fmaf(m, s, summs) */
        const __m512 pr = _mm512_mul_ps(dm, xds);
        const __m512 d0 = _mm512_permutexvar_ps(i0, pr), d1 = _mm512_permutexvar_ps(i1, pr);
        const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x[i].qs));
        const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(x[i].qs + 16)));
        const __m512i q0 = _mm512_loadu_si512((const void *)(p + 32));
        const __m512i q1 = _mm512_loadu_si512((const void *)(p + 96));
        const __m512i z = _mm512_setzero_si512();
        lo0 = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, _mm512_and_si512(q0, m4), xlo)), lo0);
        hi0 = _mm512_fmadd_ps(
            d0, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4), xhi)), hi0);
        lo1 = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, _mm512_and_si512(q1, m4), xlo)), lo1);
        hi1 = _mm512_fmadd_ps(
            d1, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4), xhi)), hi1);
    }
    const __m512 h0 = hsum8_lanes(lo0, hi0), h1 = hsum8_lanes(lo1, hi1);
    /* rows 0..3 from h0's elements 0, 4, 8, 12; rows 4..7 from h1's; summs of row r at sm lane 2r+1 */
    const __m256 h = _mm512_castps512_ps256(
        _mm512_permutex2var_ps(h0, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0), h1));
    const __m256 s = _mm512_castps512_ps256(
        _mm512_permutexvar_ps(_mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0), sm));
    _mm256_storeu_ps(out, _mm256_add_ps(h, s));
}

/* ---- Q8_0 x Q8_0, 8 rows ---- */
static WEFT_AVX512_VNNI void dotp_q8_0x8(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    const uint8_t *p = wp, *a = vaux;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK8_0;
    /* d*dx of rows (2k, 2k+1) into the two 256-bit halves */
    const __m512i i0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m512i i2 = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m512i i3 = _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < nb; i++, p += 272, a += 64) {
        PREFETCH_COLUMN(p, 272);
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qs));
        const __m512i corr = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)a));
        const __m512 d = _mm512_castps256_ps512(
            _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), _mm256_broadcast_ss((const float *)(a + 32))));
#define Q8_STEP(acc, k, idx)                                                                                      \
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, d),                                                      \
                              _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(                                             \
                                  corr, _mm512_loadu_si512((const void *)(p + 16 + 64 * (k))), xq)),            \
                              acc)
        Q8_STEP(a0, 0, i0);
        Q8_STEP(a1, 1, i1);
        Q8_STEP(a2, 2, i2);
        Q8_STEP(a3, 3, i3);
#undef Q8_STEP
    }
    /* per 256-bit half (one row): lanes 0..3 + lanes 4..7, then as hsum8_lanes */
    float t[4][16] __attribute__((aligned(64)));
    const __m512 acc[4] = {a0, a1, a2, a3};
    for (int k = 0; k < 4; k++) {
        const __m512 v = acc[k];
        _mm512_store_ps(t[k], hsum8_lanes(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1))));
        out[2 * k] = t[k][0];
        out[2 * k + 1] = t[k][8];
    }
}

/* ---- Q5_0 x Q8_0, 8 rows: as Q8_0 x 8, the weights unpacked per row pair
 * to u = v + 16 (0..31) in element order, lanes from -16 * lane sums ---- */
static WEFT_AVX512_VNNI void dotp_q5_0x8(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    const uint8_t *p = wp, *a = vaux;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK5_0;
    const __m512i i0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m512i i2 = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m512i i3 = _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7);
    const __m512i dup = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);     /* qs_r, qs_r, qs_r+1, qs_r+1 */
    const __m512i sh = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);      /* low nibbles, then high */
    const __m512i m4 = _mm512_set1_epi8(0x0F), h16 = _mm512_set1_epi8(16);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < nb; i++, p += 176, a += 64) {
        PREFETCH_COLUMN(p, 176);
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qs));
        const __m512i corr = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)a));
        const __m512 d = _mm512_castps256_ps512(
            _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), _mm256_broadcast_ss((const float *)(a + 32))));
        uint64_t qh[4];
        memcpy(qh, p + 16, 32);
#define Q5_STEP(acc, k, idx)                                                                                     \
        do {                                                                                                     \
            const __m512i q = _mm512_permutexvar_epi64(                                                          \
                dup, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 48 + 32 * (k)))));          \
            const __m512i nib = _mm512_and_si512(_mm512_srlv_epi64(q, sh), m4);                                  \
            const __m512i u = _mm512_mask_add_epi8(nib, _cvtu64_mask64(qh[k]), nib, h16);                        \
            acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, d),                                                 \
                                  _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u, xq)), acc);                    \
        } while (0)
        Q5_STEP(a0, 0, i0);
        Q5_STEP(a1, 1, i1);
        Q5_STEP(a2, 2, i2);
        Q5_STEP(a3, 3, i3);
#undef Q5_STEP
    }
    float t[4][16] __attribute__((aligned(64)));
    const __m512 acc[4] = {a0, a1, a2, a3};
    for (int k = 0; k < 4; k++) {
        const __m512 v = acc[k];
        _mm512_store_ps(t[k], hsum8_lanes(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1))));
        out[2 * k] = t[k][0];
        out[2 * k + 1] = t[k][8];
    }
}

void weft_cpu_kernels_fill_avx512_packed(struct weft_cpu_kernels *k, bool vnni)
{
    if (!vnni) return;
    k->packed[WEFT_TYPE_Q4_0] = (struct weft_cpu_packed){.rows = 16, .pack = weft_cpu_pack_q4_0x16, .aux_size = weft_cpu_aux8_size, .aux = weft_cpu_aux_q4_0, .dot = dotp_q4_0x16};
    k->packed[WEFT_TYPE_Q4_1] = (struct weft_cpu_packed){.rows = 8, .pack = weft_cpu_pack_q4_1x8, .aux_size = weft_cpu_aux8_size, .aux = weft_cpu_aux_q4_1, .dot = dotp_q4_1x8};
    k->packed[WEFT_TYPE_Q8_0] = (struct weft_cpu_packed){.rows = 8, .pack = pack_q8_0x8, .aux_size = aux64_size, .aux = aux_q8_0, .dot = dotp_q8_0x8};
    k->packed[WEFT_TYPE_Q5_0] = (struct weft_cpu_packed){.rows = 8, .pack = pack_q5_0x8, .aux_size = aux64_size, .aux = aux_q5_0, .dot = dotp_q5_0x8};
}

#else

void weft_cpu_kernels_fill_avx512_packed(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
