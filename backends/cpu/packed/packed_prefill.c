/* Prefill on the packed weight layouts (struct weft_cpu_packed's xpack and
 * gemmp, AVX-512 VNNI), so prefill and decode stream the same copy. out is
 * bit-identical to the one-row dot (tests/cpu/test_cpu_packed_prefill.c): each
 * float step is the reference's, lane for lane.
 *
 *  - Q8_0 (weights packed 8 rows x block column, each byte + 128 unsigned,
 *    see packed/packed_q32.c). A unit is two activation rows; per block
 *    (192 bytes): qs of row 0 | row 1 (64), their -128 * 4-byte lane sums
 *    as int32 (64), dx of row 0 x 8 | row 1 x 8 as float (64). Per weight
 *    row i and unit p: lanes = vpdpbusd(corr, w + 128, x) (the exact sums of
 *    w * x over each 4 elements), acc = fma(dw * dx, float(lanes), acc); the
 *    weight row is broadcast to both halves from memory, dw broadcast from a
 *    per-block float copy of the group's eight scales. Tiles are 8 weight rows
 *    x 2 units (16 accumulators). Everything the activations need is made
 *    once per op by xpack, so the inner loop is vpdpbusd, vcvtdq2ps, vmulps,
 *    vfmadd per 64 multiply-adds.
 *  - Q4_0 (x16 layout, one lane per weight row): see the Q4_0 section; its
 *    reference keeps one float chain per output over exact block totals,
 *    so the integer work dominates and a block's unpacked nibbles serve up
 *    to 8 activation rows.
 *  - Q4_1 (x8 decode layout, ggml's 8 float lanes per output plus a summs
 *    chain): see the Q4_1 section; a block's unpacked nibbles and scales
 *    serve up to 8 activation rows. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/types.h"
#include "backends/cpu/packed/layouts.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>

#include "backends/cpu/packed/packed.h"

/* ---- Q8_0 ---- */

#define Q8P_UNIT 192 /* bytes per block of a two-row unit */
#define Q8P_GROUP 272 /* bytes per block column of an 8-row group */

static size_t xp_size_q8_0(int64_t n) { return (size_t)(n / WEFT_QK8_0) * Q8P_UNIT; }

static void xpack_q8_0(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    const int64_t nb = n / WEFT_QK8_0;
    uint8_t *o = dst;
    for (int r = 0; r < 2; r++) {
        const struct weft_block_q8_0 *b = (const struct weft_block_q8_0 *)((const uint8_t *)x +
                                                                           (size_t)(r < nx ? r : nx - 1) * xstride);
        for (int64_t i = 0; i < nb; i++) {
            uint8_t *u = o + (size_t)i * Q8P_UNIT;
            memcpy(u + 32 * r, b[i].qs, 32);
            int32_t c[8];
            for (int l = 0; l < 8; l++)
                c[l] = -128 * (b[i].qs[4 * l] + b[i].qs[4 * l + 1] + b[i].qs[4 * l + 2] + b[i].qs[4 * l + 3]);
            memcpy(u + 64 + 32 * r, c, 32);
            const float d = weft_half_to_f32(b[i].d);
            for (int l = 0; l < 8; l++) memcpy(u + 128 + 32 * r + 4 * l, &d, 4);
        }
    }
}

/* one 8-row group x NP units (2 * NP activation rows, nr of them real) */
AI WEFT_AVX512_VNNI void q8p_tile(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, float *out, size_t ldo, int nr,
                       const int NP)
{
    __m512 acc[8][2];
    for (int i = 0; i < 8; i++)
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * Q8P_GROUP;
        PREFETCH_COLUMN(wb, Q8P_GROUP);
        float dwf[8] __attribute__((aligned(32)));
        _mm256_store_ps(dwf, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb)));
        __asm__("" : "+m"(dwf)); /* broadcast each scale from memory, not by shuffles */
        const uint8_t *xb[2];
        __m512 dx[2];
        for (int p = 0; p < NP; p++) {
            xb[p] = x + (size_t)p * ubytes + (size_t)b * Q8P_UNIT;
            dx[p] = _mm512_loadu_ps((const void *)(xb[p] + 128));
        }
        for (int i = 0; i < 8; i++) {
            const __m512i wv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb + 16 + 32 * i)));
            const __m512 dw = _mm512_set1_ps(dwf[i]);
            for (int p = 0; p < NP; p++)
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[p]), _mm512_cvtepi32_ps(lanes_corr(xb[p], wv)),
                                            acc[i][p]);
        }
    }
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < 8; i += 2) {
            float t[16] __attribute__((aligned(64)));
            _mm512_store_ps(t, hsum8_x4(acc[i][p], acc[i + 1][p]));
            out[2 * p * ldo + i] = t[0];
            out[2 * p * ldo + i + 1] = t[8];
            if (2 * p + 1 < nr) {
                out[(2 * p + 1) * ldo + i] = t[4];
                out[(2 * p + 1) * ldo + i + 1] = t[12];
            }
        }
}

static WEFT_AVX512_VNNI void gemmp_q8_0(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK8_0;
    const size_t gbytes = (size_t)nb * Q8P_GROUP, ubytes = (size_t)nb * Q8P_UNIT;
    for (int j = 0; j < nx; j += 4) {
        const int nr = nx - j < 4 ? nx - j : 4;
        const uint8_t *x = (const uint8_t *)xp + (size_t)(j / 2) * ubytes;
        for (int g = 0; g < groups; g++) {
            const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;
            float *o = out + (size_t)j * ldo + 8 * g;
            if (nr > 2) q8p_tile(w, x, ubytes, nb, o, ldo, nr, 2);
            else q8p_tile(w, x, ubytes, nb, o, ldo, nr, 1);
        }
    }
}

/* ---- Q4_0 ----
 *
 * Weights in the x16 layout (packed/packed_q32.c: one 32-bit lane per row,
 * chunk k holding bytes 4k..4k+3 of every row's qs). The reference order
 * (ggml's repacked Q4_0) is one float chain per output over exact block
 * totals: sum += ((float)total * dw) * dx, which is lane-wise what the x16
 * decode kernel does; here a block's eight unpacked nibble vectors are made
 * once and serve up to 8 activation rows, each a zmm of 16 outputs. A unit
 * is one activation row: per block its 32 qs, -8 * their sum (int32) and dx
 * (float), 40 bytes. */

#define Q4P_UNIT WEFT_Q4P_UNIT
#define Q4P_GROUP WEFT_Q4P_GROUP

size_t weft_cpu_xp_size_q4_0(int64_t n) { return (size_t)(n / WEFT_QK8_0) * Q4P_UNIT; }

void weft_cpu_xpack_q4_0(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride;
    (void)nx; /* one row per unit */
    const struct weft_block_q8_0 *b = x;
    uint8_t *o = dst;
    for (int64_t i = 0; i < n / WEFT_QK8_0; i++, o += Q4P_UNIT) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += b[i].qs[j];
        s *= -8;
        const float d = weft_half_to_f32(b[i].d);
        memcpy(o, b[i].qs, 32);
        memcpy(o + 32, &s, 4);
        memcpy(o + 36, &d, 4);
    }
}

AI WEFT_AVX512_VNNI void q4p_tile(const uint8_t *w, const uint8_t *x, int64_t nb, float *out, size_t ldo, const int NR)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8];
    for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * Q4P_GROUP;
        PREFETCH_COLUMN(p, Q4P_GROUP);
        __m512i lo[4], hi[4];
        for (int k = 0; k < 4; k++) {
            const __m512i q = _mm512_loadu_si512((const void *)(p + 32 + 64 * k));
            lo[k] = _mm512_and_si512(q, m4);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        for (int j = 0; j < NR; j++) {
            const uint8_t *xb = x + ((size_t)j * nb + b) * Q4P_UNIT;
            __m512i s0 = bcast32(xb + 32), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                s0 = _mm512_dpbusd_epi32(s0, lo[k], bcast32(xb + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, hi[k], bcast32(xb + 16 + 4 * k));
            }
            float dx;
            memcpy(&dx, xb + 36, 4);
            const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(_mm512_mul_ps(f, dw), _mm512_set1_ps(dx)));
        }
    }
    for (int j = 0; j < NR; j++) _mm512_storeu_ps(out + (size_t)j * ldo, acc[j]);
}

static WEFT_AVX512_VNNI void gemmp_q4_0(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_0;
    const size_t gbytes = (size_t)nb * Q4P_GROUP, ubytes = (size_t)nb * Q4P_UNIT;
    for (int j = 0; j < nx; j += 8) {
        const int nr = nx - j < 8 ? nx - j : 8;
        const uint8_t *x = (const uint8_t *)xp + (size_t)j * ubytes;
        for (int g = 0; g < groups; g++) {
            const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;
            float *o = out + (size_t)j * ldo + 16 * g;
            switch (nr) {
            case 1: q4p_tile(w, x, nb, o, ldo, 1); break;
            case 2: q4p_tile(w, x, nb, o, ldo, 2); break;
            case 3: q4p_tile(w, x, nb, o, ldo, 3); break;
            case 4: q4p_tile(w, x, nb, o, ldo, 4); break;
            case 5: q4p_tile(w, x, nb, o, ldo, 5); break;
            case 6: q4p_tile(w, x, nb, o, ldo, 6); break;
            case 7: q4p_tile(w, x, nb, o, ldo, 7); break;
            default: q4p_tile(w, x, nb, o, ldo, 8); break;
            }
        }
    }
}

/* ---- Q4_1 ----
 *
 * Weights in the x8 decode layout (packed/packed_q32.c: per block column
 * (d, m)[8] as f16, then rows 0..3's qs at 16r, rows 4..7's). The reference
 * (ggml's AVX2 Q4_1 dot) keeps 8 float lanes per output, lane l the exact
 * int sum over elements 4l..4l+3: acc[l] = fma(dw * dx, float(lane), acc[l]),
 * a separate chain summs = fma(m, s, summs), and hsum_float_8(acc) + summs.
 * As in the decode kernel, one zmm holds four weight rows x four lanes (row
 * r in 128-bit lane r) of one activation row: low nibbles against x[0..15]
 * give lanes 0..3, high nibbles against x[16..31] lanes 4..7. Per 4-row
 * half of a group, a block's two unpacked nibble vectors and its d vector
 * (d of row r repeated over its 128-bit lane) are made once and serve up to
 * 8 activation rows (16 lane accumulators; per activation row and block:
 * one vmulps for d * dx, two each of vpdpbusd, vcvtdq2ps, vfmadd: what
 * ggml's order costs); the summs chains take a third, cheap pass over the
 * blocks. (Whole groups x 4 activation rows, the unpacking shared by fewer
 * rows, measured about 5% slower.)
 * A unit is one activation row: per block its 32 qs, dx and s as floats,
 * padded to 48 bytes (no 16-byte load crosses a cache line). */

#define Q41P_UNIT 48
#define Q41P_GROUP 160

static size_t xp_size_q4_1(int64_t n) { return (size_t)(n / WEFT_QK8_1) * Q41P_UNIT; }

static void xpack_q4_1(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride;
    (void)nx; /* one row per unit */
    const struct weft_block_q8_1 *b = x;
    uint8_t *o = dst;
    for (int64_t i = 0; i < n / WEFT_QK8_1; i++, o += Q41P_UNIT) {
        const float f[4] = {weft_half_to_f32(b[i].d), weft_half_to_f32(b[i].s), 0.0f, 0.0f};
        memcpy(o, b[i].qs, 32);
        memcpy(o + 32, f, 16);
    }
}

/* one 8-row group x NR activation rows (units at x, ubytes apart): each
 * 4-row half in a pass of its own (16 lane accumulators), its hsum_float_8
 * results kept in hb, then the summs pass, then hb + summs */
AI WEFT_AVX512_VNNI void q41p_tile8(const uint8_t *w, const uint8_t *x, size_t ubytes, int64_t nb, float *out, size_t ldo,
                         const int NR)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    float hb[8][8] __attribute__((aligned(32)));
    for (int h = 0; h < 2; h++) {
        const __m512i ih = h ? _mm512_setr_epi32(8, 8, 8, 8, 10, 10, 10, 10, 12, 12, 12, 12, 14, 14, 14, 14)
                             : _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
        __m512 lo[8], hi[8];
        for (int j = 0; j < NR; j++) lo[j] = hi[j] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *p = w + (size_t)b * Q41P_GROUP;
            if (!h) PREFETCH_COLUMN(p, Q41P_GROUP); /* the second pass finds the group in L1 */
            const __m512 dw = _mm512_permutexvar_ps(ih, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)));
            const __m512i q = _mm512_loadu_si512((const void *)(p + 32 + 64 * h));
            const __m512i l = _mm512_and_si512(q, m4), u = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            for (int j = 0; j < NR; j++) {
                const uint8_t *xb = x + (size_t)j * ubytes + (size_t)b * Q41P_UNIT;
                const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xb));
                const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xb + 16)));
                float dxf;
                memcpy(&dxf, xb + 32, 4);
                const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dxf));
                const __m512i z = _mm512_setzero_si512();
                lo[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, l, xlo)), lo[j]);
                hi[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, u, xhi)), hi[j]);
            }
        }
        const __m512i i4 = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        for (int j = 0; j < NR; j++)
            _mm_store_ps(&hb[j][4 * h], _mm512_castps512_ps128(_mm512_permutexvar_ps(i4, hsum8_lanes(lo[j], hi[j]))));
    }
    __m512 sm[8];
    for (int j = 0; j < NR; j++) sm[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)b * Q41P_GROUP)));
        for (int j = 0; j < NR; j++) {
            double xds;
            memcpy(&xds, x + (size_t)j * ubytes + (size_t)b * Q41P_UNIT + 32, 8);
            sm[j] = _mm512_fmadd_ps(dm, _mm512_castpd_ps(_mm512_set1_pd(xds)), sm[j]);
        }
    }
    const __m512i is = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int j = 0; j < NR; j++) {
        const __m256 sv = _mm512_castps512_ps256(_mm512_permutexvar_ps(is, sm[j]));
        _mm256_storeu_ps(out + (size_t)j * ldo, _mm256_add_ps(_mm256_load_ps(hb[j]), sv));
    }
}

static WEFT_AVX512_VNNI void gemmp_q4_1(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_1;
    const size_t gbytes = (size_t)nb * Q41P_GROUP, ubytes = (size_t)nb * Q41P_UNIT;
    for (int j = 0; j < nx; j += 8) {
        const int nr = nx - j < 8 ? nx - j : 8;
        const uint8_t *x = (const uint8_t *)xp + (size_t)j * ubytes;
        for (int g = 0; g < groups; g++) {
            const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;
            float *o = out + (size_t)j * ldo + 8 * g;
            switch (nr) {
            case 1: q41p_tile8(w, x, ubytes, nb, o, ldo, 1); break;
            case 2: q41p_tile8(w, x, ubytes, nb, o, ldo, 2); break;
            case 3: q41p_tile8(w, x, ubytes, nb, o, ldo, 3); break;
            case 4: q41p_tile8(w, x, ubytes, nb, o, ldo, 4); break;
            case 5: q41p_tile8(w, x, ubytes, nb, o, ldo, 5); break;
            case 6: q41p_tile8(w, x, ubytes, nb, o, ldo, 6); break;
            case 7: q41p_tile8(w, x, ubytes, nb, o, ldo, 7); break;
            default: q41p_tile8(w, x, ubytes, nb, o, ldo, 8); break;
            }
        }
    }
}

void weft_cpu_kernels_fill_avx512_gemmp(struct weft_cpu_kernels *k, bool vnni)
{
    if (!vnni) return;
    struct weft_cpu_packed *q4 = &k->packed[WEFT_TYPE_Q4_0];
    if (q4->rows == 16) {
        q4->xrows = 1;
        q4->xp_size = weft_cpu_xp_size_q4_0;
        q4->xpack = weft_cpu_xpack_q4_0;
        q4->gemmp = gemmp_q4_0;
    }
    struct weft_cpu_packed *q41 = &k->packed[WEFT_TYPE_Q4_1];
    if (q41->rows == 8) {
        q41->xrows = 1;
        q41->xp_size = xp_size_q4_1;
        q41->xpack = xpack_q4_1;
        q41->gemmp = gemmp_q4_1;
    }
    struct weft_cpu_packed *q8 = &k->packed[WEFT_TYPE_Q8_0];
    if (q8->rows == 8) {
        q8->xrows = 2;
        q8->xp_size = xp_size_q8_0;
        q8->xpack = xpack_q8_0;
        q8->gemmp = gemmp_q8_0;
    }
}

#else

void weft_cpu_kernels_fill_avx512_gemmp(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
