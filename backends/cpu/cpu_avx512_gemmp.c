/* Prefill on the packed weight layouts (struct weft_cpu_packed's xpack and
 * gemmp, AVX-512 VNNI), so prefill and decode stream the same copy. out is
 * bit-identical to the one-row dot (tests/test_cpu_kernels_gemmp.c): each
 * float step is the reference's, lane for lane.
 *
 *  - Q4_0, Q4_1 and Q8_0 (x16 layouts, one lane per weight row): see their
 *    sections; their references keep one float chain per output over exact
 *    block totals, so the integer work dominates and a block's (unpacked)
 *    weight chunks serve up to 8 activation rows. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "core/types.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <cpuid.h>
#include <immintrin.h>

#define Z512V __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define AI static inline __attribute__((always_inline))

/* ---- Q4_0 ----
 *
 * Weights in the x16 layout (cpu_avx512_packed.c: one 32-bit lane per row,
 * chunk k holding bytes 4k..4k+3 of every row's qs). The reference order
 * (ggml's repacked Q4_0) is one float chain per output over exact block
 * totals: sum += ((float)total * dw) * dx, which is lane-wise what the x16
 * decode kernel does; here a block's eight unpacked nibble vectors are made
 * once and serve up to 8 activation rows, each a zmm of 16 outputs. A unit
 * is one activation row: per block its 32 qs, -8 * their sum (int32) and dx
 * (float), 40 bytes. */

#define Q4P_UNIT 40
#define Q4P_GROUP 288

static size_t xp_size_q4_0(int64_t n) { return (size_t)(n / WEFT_QK8_0) * Q4P_UNIT; }

static void xpack_q4_0(const void *x, size_t xstride, int nx, int64_t n, void *dst)
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

AI Z512V __m512i bcast32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

AI Z512V void q4p_tile(const uint8_t *w, const uint8_t *x, int64_t nb, float *out, size_t ldo, const int NR)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8];
    for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * Q4P_GROUP;
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

static Z512V void gemmp_q4_0(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, size_t ldo)
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

/* ---- Q8_0 ----
 *
 * Weights in the x16 layout (cpu_avx512_packed.c: one 32-bit lane per row,
 * chunk k holding bytes 4k..4k+3 of every row's qs, + 128). The reference is
 * one float chain per output, acc = fma(dw * dx, float(isum), acc); as for
 * Q4_0 a block's eight weight chunks are loaded once and serve up to 8
 * activation rows, each a zmm of 16 outputs. A unit is one activation row:
 * per block its 32 qs, -128 * their sum (int32) and dx (float), 40 bytes. */

#define Q8P_UNIT 40
#define Q8P_GROUP 544

static size_t xp_size_q8_0(int64_t n) { return (size_t)(n / WEFT_QK8_0) * Q8P_UNIT; }

static void xpack_q8_0(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride;
    (void)nx; /* one row per unit */
    const struct weft_block_q8_0 *b = x;
    uint8_t *o = dst;
    for (int64_t i = 0; i < n / WEFT_QK8_0; i++, o += Q8P_UNIT) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += b[i].qs[j];
        s *= -128;
        const float d = weft_half_to_f32(b[i].d);
        memcpy(o, b[i].qs, 32);
        memcpy(o + 32, &s, 4);
        memcpy(o + 36, &d, 4);
    }
}

AI Z512V void q8p_tile(const uint8_t *w, const uint8_t *x, int64_t nb, float *out, size_t ldo, const int NR)
{
    __m512 acc[8];
    for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * Q8P_GROUP;
        __m512i q[8];
        for (int k = 0; k < 8; k++) q[k] = _mm512_loadu_si512((const void *)(p + 32 + 64 * k));
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        for (int j = 0; j < NR; j++) {
            const uint8_t *xb = x + ((size_t)j * nb + b) * Q8P_UNIT;
            __m512i s0 = bcast32(xb + 32), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                s0 = _mm512_dpbusd_epi32(s0, q[k], bcast32(xb + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, q[4 + k], bcast32(xb + 16 + 4 * k));
            }
            float dx;
            memcpy(&dx, xb + 36, 4);
            const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), f, acc[j]);
        }
    }
    for (int j = 0; j < NR; j++) _mm512_storeu_ps(out + (size_t)j * ldo, acc[j]);
}

static Z512V void gemmp_q8_0(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK8_0;
    const size_t gbytes = (size_t)nb * Q8P_GROUP, ubytes = (size_t)nb * Q8P_UNIT;
    for (int j = 0; j < nx; j += 8) {
        const int nr = nx - j < 8 ? nx - j : 8;
        const uint8_t *x = (const uint8_t *)xp + (size_t)j * ubytes;
        for (int g = 0; g < groups; g++) {
            const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;
            float *o = out + (size_t)j * ldo + 16 * g;
            switch (nr) {
            case 1: q8p_tile(w, x, nb, o, ldo, 1); break;
            case 2: q8p_tile(w, x, nb, o, ldo, 2); break;
            case 3: q8p_tile(w, x, nb, o, ldo, 3); break;
            case 4: q8p_tile(w, x, nb, o, ldo, 4); break;
            case 5: q8p_tile(w, x, nb, o, ldo, 5); break;
            case 6: q8p_tile(w, x, nb, o, ldo, 6); break;
            case 7: q8p_tile(w, x, nb, o, ldo, 7); break;
            default: q8p_tile(w, x, nb, o, ldo, 8); break;
            }
        }
    }
}

/* ---- Q4_1 ----
 *
 * Weights in the x16 layout (cpu_avx512_packed.c: d[16], m[16], then Q4_0's
 * nibble chunks). The reference is two float chains per output,
 * acc = fma(dw * dx, float(isum), acc) and summs = fma(m, s, summs), then
 * acc + summs; a block's eight unpacked nibble vectors serve up to 8
 * activation rows, each two zmm of 16 outputs. A unit is one activation
 * row: per block its 32 qs, dx and s (floats), 40 bytes. */

#define Q41P_UNIT 40
#define Q41P_GROUP 320

static size_t xp_size_q4_1(int64_t n) { return (size_t)(n / WEFT_QK8_1) * Q41P_UNIT; }

static void xpack_q4_1(const void *x, size_t xstride, int nx, int64_t n, void *dst)
{
    (void)xstride;
    (void)nx; /* one row per unit */
    const struct weft_block_q8_1 *b = x;
    uint8_t *o = dst;
    for (int64_t i = 0; i < n / WEFT_QK8_1; i++, o += Q41P_UNIT) {
        const float d = weft_half_to_f32(b[i].d), sx = weft_half_to_f32(b[i].s);
        memcpy(o, b[i].qs, 32);
        memcpy(o + 32, &d, 4);
        memcpy(o + 36, &sx, 4);
    }
}

AI Z512V void q41p_tile(const uint8_t *w, const uint8_t *x, int64_t nb, float *out, size_t ldo, const int NR)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8], sm[8];
    for (int j = 0; j < NR; j++) acc[j] = sm[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * Q41P_GROUP;
        __m512i lo[4], hi[4];
        for (int k = 0; k < 4; k++) {
            const __m512i q = _mm512_loadu_si512((const void *)(p + 64 + 64 * k));
            lo[k] = _mm512_and_si512(q, m4);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
        for (int j = 0; j < NR; j++) {
            const uint8_t *xb = x + ((size_t)j * nb + b) * Q41P_UNIT;
            __m512i s0 = _mm512_setzero_si512(), s1 = s0;
            for (int k = 0; k < 4; k++) {
                s0 = _mm512_dpbusd_epi32(s0, lo[k], bcast32(xb + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, hi[k], bcast32(xb + 16 + 4 * k));
            }
            float dx, sx;
            memcpy(&dx, xb + 32, 4);
            memcpy(&sx, xb + 36, 4);
            const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), f, acc[j]);
            sm[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), sm[j]);
        }
    }
    for (int j = 0; j < NR; j++) _mm512_storeu_ps(out + (size_t)j * ldo, _mm512_add_ps(acc[j], sm[j]));
}

static Z512V void gemmp_q4_1(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_1;
    const size_t gbytes = (size_t)nb * Q41P_GROUP, ubytes = (size_t)nb * Q41P_UNIT;
    for (int j = 0; j < nx; j += 8) {
        const int nr = nx - j < 8 ? nx - j : 8;
        const uint8_t *x = (const uint8_t *)xp + (size_t)j * ubytes;
        for (int g = 0; g < groups; g++) {
            const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;
            float *o = out + (size_t)j * ldo + 16 * g;
            switch (nr) {
            case 1: q41p_tile(w, x, nb, o, ldo, 1); break;
            case 2: q41p_tile(w, x, nb, o, ldo, 2); break;
            case 3: q41p_tile(w, x, nb, o, ldo, 3); break;
            case 4: q41p_tile(w, x, nb, o, ldo, 4); break;
            case 5: q41p_tile(w, x, nb, o, ldo, 5); break;
            case 6: q41p_tile(w, x, nb, o, ldo, 6); break;
            case 7: q41p_tile(w, x, nb, o, ldo, 7); break;
            default: q41p_tile(w, x, nb, o, ldo, 8); break;
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

void weft_cpu_kernels_fill_avx512_gemmp(struct weft_cpu_kernels *k)
{
    if (!have_vnni()) return;
    struct weft_cpu_packed *q4 = &k->packed[WEFT_TYPE_Q4_0];
    if (q4->rows == 16) {
        q4->xrows = 1;
        q4->xp_size = xp_size_q4_0;
        q4->xpack = xpack_q4_0;
        q4->gemmp = gemmp_q4_0;
    }
    struct weft_cpu_packed *q41 = &k->packed[WEFT_TYPE_Q4_1];
    if (q41->rows == 16) {
        q41->xrows = 1;
        q41->xp_size = xp_size_q4_1;
        q41->xpack = xpack_q4_1;
        q41->gemmp = gemmp_q4_1;
    }
    struct weft_cpu_packed *q8 = &k->packed[WEFT_TYPE_Q8_0];
    if (q8->rows == 16) {
        q8->xrows = 1;
        q8->xp_size = xp_size_q8_0;
        q8->xpack = xpack_q8_0;
        q8->gemmp = gemmp_q8_0;
    }
}

#else

void weft_cpu_kernels_fill_avx512_gemmp(struct weft_cpu_kernels *k) { (void)k; }

#endif
