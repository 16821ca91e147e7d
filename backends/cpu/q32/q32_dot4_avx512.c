/* AVX-512 four-row dots for the AVX-512 table: weight rows w, w + stride,
 * w + 2 stride, w + 3 stride against one activation row, out[i]
 * bit-identical to k->dot[type](w + i * stride, x, n) (the AVX2 one-row
 * kernels the AVX-512 table inherits, and so backends/cpu/cpu_ref_dot.c);
 * tests/cpu/test_cpu_q32_dot4_512.c and test_cpu_kernels_dot4.c check it.
 *
 * Several rows share one 512-bit register, but every output row keeps the
 * float operation sequence of its one-row kernel: 8 float lanes of its own,
 * each lane its own chain acc = fma(dw*dx, float(int32 lane), acc) per block,
 * the same scale products (dw*dx from F16C widenings; the product commutes),
 * the same final hsum_float_8 order ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)),
 * the same scalar terms (Q4_1: summs = fma(m, s, summs) per block, added
 * last). Lane l of a row is the exact int32 sum over its block elements
 * 4l..4l+3 of w*x, whatever instructions compute it:
 *  - Q4_1: one zmm holds the four rows' 16 nibble bytes (128-bit lane r =
 *    row r). Its low nibbles times the activations' first 16 bytes
 *    (broadcast to all four 128-bit lanes) give the rows' lanes 0..3, its
 *    high nibbles times the last 16 give lanes 4..7; two zmm accumulators
 *    (lanes 0..3 / lanes 4..7 of every row) and no shuffles in the loop.
 *    hsum's first step (low half + high half) is acc_lo + acc_hi. Nibbles
 *    are unsigned (0..15), activations signed: vpdpbusd directly, or
 *    maddubs + madd (pairs <= 2*15*127, no int16 saturation).
 *  - Q8_0: two rows per zmm (256-bit half r = row r). VNNI: vpdpbusd on
 *    (w + 128) as unsigned bytes times x, started from -128 * (lane sums
 *    of x), computed once per block for all rows: the same exact integer.
 *    Without VNNI: maddubs(|w|, x negated where w < 0) + madd, as the
 *    one-row kernel's sign_epi8 form (|x| <= 127 from the quantizer).
 * The VNNI forms fill the avx512vnni level, the AVX512BW forms the avx512
 * level (cpu_kernels.h). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/types.h"

#define AI static inline __attribute__((always_inline))

/* keep in step with backends/cpu/cpu_ref_dot.c and q32/q32_dot_avx2.c */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif

/* Software prefetch distance in bytes ahead on each weight row (0: none). */
#ifndef WEFT_DOT4_512_PREFETCH
#define WEFT_DOT4_512_PREFETCH 512
#endif

#define ROW(T, r) ((const T *)((const uint8_t *)vw + (size_t)(r) * stride))

AI WEFT_AVX512 float z_h2f(weft_half h) { return _cvtsh_ss(h); }

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), as ggml's hsum_float_8 */
AI WEFT_AVX512 float z_hsum_float_8(__m256 x)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AI WEFT_AVX512 void prefetch_rows(const uint8_t *p, size_t stride)
{
#if WEFT_DOT4_512_PREFETCH > 0
    _mm_prefetch((const char *)p + WEFT_DOT4_512_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)p + stride + WEFT_DOT4_512_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)p + 2 * stride + WEFT_DOT4_512_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)p + 3 * stride + WEFT_DOT4_512_PREFETCH, _MM_HINT_T0);
#else
    (void)p, (void)stride;
#endif
}

/* the 32-bit words at the four blocks' starts (d, or d and m) */
AI WEFT_AVX512 __m128i head4(const void *b0, const void *b1, const void *b2, const void *b3)
{
    uint32_t u0, u1, u2, u3;
    memcpy(&u0, b0, 4), memcpy(&u1, b1, 4), memcpy(&u2, b2, 4), memcpy(&u3, b3, 4);
    return _mm_setr_epi32((int)u0, (int)u1, (int)u2, (int)u3);
}

AI WEFT_AVX512 __m512i load16x4(const void *p0, const void *p1, const void *p2, const void *p3)
{
    __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)p1), 1);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)p3), 3);
}

AI WEFT_AVX512 __m512i load32x2(const void *p0, const void *p1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* unsigned u times signed s, 4-byte lane sums, exact */
AI WEFT_AVX512 __m512i lanes_us_bw(__m512i u, __m512i s)
{
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

AI WEFT_AVX512_VNNI __m512i lanes_us_vnni(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }

/* the rows' summs chains, each lane its own fmaf(m, s, summs) (odd lanes) */
AI WEFT_AVX512 __m256 summs_step(__m256 dm, __m256 xs, __m256 sm)
{
#if WEFT_GGML_SCALAR_CONTRACT
    return _mm256_fmadd_ps(dm, xs, sm);
#else
    return _mm256_add_ps(sm, _mm256_mul_ps(dm, xs));
#endif
}

/* Two rows' Q4_1 blocks (20 bytes each) as the two 256-bit halves: all 32
 * bytes from the block's start (the rest is the row's next block), or only
 * the 20 (masked) on a row's last block, which may end a buffer. */
AI WEFT_AVX512 __m512i load_blk2(const void *p0, const void *p1, int last)
{
    if (last)
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(0xFFFFF, p0)),
                                  _mm256_maskz_loadu_epi8(0xFFFFF, p1), 1);
    return load32x2(p0, p1);
}

/* ---- Q4_1 x Q8_1 ---- */

/* Activation scales of up to X4_CH blocks, widened once per call: block j's
 * (xd, xs) pair repeated four times (8 floats), so the loop's scale vectors
 * are plain loads. */
#define X4_CH 32
AI WEFT_AVX512 void x_scales(const struct weft_block_q8_1 *x, int64_t cn, float *xb)
{
    for (int64_t j = 0; j < cn; j++) {
        uint32_t u;
        memcpy(&u, &x[j], 4);
        const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
        _mm256_store_ps(xb + 8 * j, _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(f))));
    }
}

/* one block's nibbles (row r in 128-bit lane r) into the two accumulators */
#define Q4_1_INT(LANES, q, xp, d, alo, ahi) \
    do { \
        const __m512i xlo_ = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xp))); \
        const __m512i xhi_ = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)((xp) + 16))); \
        const __m512i lo_ = _mm512_and_si512(q, m4), hi_ = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4); \
        alo = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(LANES(lo_, xlo_)), alo); \
        ahi = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(LANES(hi_, xhi_)), ahi); \
    } while (0)

/* Two blocks per step: the 32 bytes loaded from block i's start hold block
 * i+1's (d, m) too, so one permute gathers the 8 heads, one vcvtph2ps zmm
 * widens them: floats [row r block i: d m] at 2r, [row r block i+1: d m] at
 * 8 + 2r. The per-row chains still take block i, then block i+1. */
#define DOT4_Q4_1(ATTR, NAME, LANES) \
static ATTR void NAME(const void *vw, size_t stride, const void *vx, int64_t n, float out[4]) \
{ \
    const struct weft_block_q4_1 *w0 = ROW(struct weft_block_q4_1, 0), *w1 = ROW(struct weft_block_q4_1, 1); \
    const struct weft_block_q4_1 *w2 = ROW(struct weft_block_q4_1, 2), *w3 = ROW(struct weft_block_q4_1, 3); \
    const struct weft_block_q8_1 *x = vx; \
    const int64_t nb = n / WEFT_QK4_1; \
    const __m512i m4 = _mm512_set1_epi8(0x0F); \
    const __m512i qidx = _mm512_setr_epi32(1, 2, 3, 4, 9, 10, 11, 12, 17, 18, 19, 20, 25, 26, 27, 28); \
    const __m512i hidx = _mm512_setr_epi32(0, 8, 16, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); \
    const __m512i hidx2 = _mm512_setr_epi32(0, 8, 16, 24, 5, 13, 21, 29, 0, 0, 0, 0, 0, 0, 0, 0); \
    /* d of row r (lane 2r, or 8 + 2r for the second block) into 128-bit lane r */ \
    const __m512i didx = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6); \
    const __m512i didx1 = _mm512_setr_epi32(8, 8, 8, 8, 10, 10, 10, 10, 12, 12, 12, 12, 14, 14, 14, 14); \
    float xb[8 * X4_CH] __attribute__((aligned(64))); \
    __m512 alo = _mm512_setzero_ps(), ahi = alo; \
    __m256 sm = _mm256_setzero_ps(); \
    for (int64_t c0 = 0; c0 < nb; c0 += X4_CH) { \
        const int64_t cn = nb - c0 < X4_CH ? nb - c0 : X4_CH; \
        x_scales(x + c0, cn, xb); \
        int64_t j = 0; \
        for (; j + 2 <= cn; j += 2) { \
            const int64_t i = c0 + j; \
            prefetch_rows((const uint8_t *)&w0[i], stride); \
            const __m512i r01 = load32x2(&w0[i], &w1[i]), r23 = load32x2(&w2[i], &w3[i]); \
            const __m512i s01 = load_blk2(&w0[i + 1], &w1[i + 1], i + 2 == nb); \
            const __m512i s23 = load_blk2(&w2[i + 1], &w3[i + 1], i + 2 == nb); \
            const __m512 dm = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi32(r01, hidx2, r23))); \
            const __m512 xds = _mm512_load_ps(xb + 8 * j); \
            sm = summs_step(_mm512_castps512_ps256(dm), _mm256_load_ps(xb + 8 * j), sm); \
            sm = summs_step(_mm512_extractf32x8_ps(dm, 1), _mm256_load_ps(xb + 8 * j + 8), sm); \
            const __m512 p = _mm512_mul_ps(dm, xds); \
            const __m512 d0 = _mm512_permutexvar_ps(didx, p), d1 = _mm512_permutexvar_ps(didx1, p); \
            Q4_1_INT(LANES, _mm512_permutex2var_epi32(r01, qidx, r23), x[i].qs, d0, alo, ahi); \
            Q4_1_INT(LANES, _mm512_permutex2var_epi32(s01, qidx, s23), x[i + 1].qs, d1, alo, ahi); \
        } \
        if (j < cn) { \
            const int64_t i = c0 + j; \
            const __m512i r01 = load_blk2(&w0[i], &w1[i], i + 1 == nb), r23 = load_blk2(&w2[i], &w3[i], i + 1 == nb); \
            const __m256 dm = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi32(r01, hidx, r23))); \
            const __m256 xds = _mm256_load_ps(xb + 8 * j); \
            sm = summs_step(dm, xds, sm); \
            const __m512 d = _mm512_permutexvar_ps(didx, _mm512_castps256_ps512(_mm256_mul_ps(dm, xds))); \
            Q4_1_INT(LANES, _mm512_permutex2var_epi32(r01, qidx, r23), x[i].qs, d, alo, ahi); \
        } \
    } \
    /* per 128-bit lane r: hsum_float_8 of row r's (lanes 0..3, lanes 4..7) */ \
    __m512 r = _mm512_add_ps(alo, ahi);                                   /* x0+x4 x1+x5 x2+x6 x3+x7 */ \
    r = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(3, 2, 3, 2))); /* (x0+x4)+(x2+x6), ... */ \
    r = _mm512_add_ps(r, _mm512_movehdup_ps(r)); \
    const __m128 h = _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, \
                                                                                    0, 0, 0, 0, 0), r)); \
    const __m128 s = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(sm, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7))); \
    _mm_storeu_ps(out, _mm_add_ps(h, s)); \
}

DOT4_Q4_1(WEFT_AVX512, dot4_q4_1_bw, lanes_us_bw)
DOT4_Q4_1(WEFT_AVX512_VNNI, dot4_q4_1_vnni, lanes_us_vnni)

/* ---- Q8_0 x Q8_0 ---- */

/* VNNI: sum((w + 128) x) - 128 sum(x) */
#define Q8_LANES_VNNI(q01, q23, xq, p01, p23)                                                          \
    do {                                                                                               \
        const __m512i bias_ = _mm512_set1_epi8((char)0x80);                                            \
        const __m512i corr_ = _mm512_sub_epi32(_mm512_setzero_si512(), lanes_us_vnni(bias_, xq));      \
        p01 = _mm512_dpbusd_epi32(corr_, _mm512_xor_si512(q01, bias_), xq);                            \
        p23 = _mm512_dpbusd_epi32(corr_, _mm512_xor_si512(q23, bias_), xq);                            \
    } while (0)
/* BW: |w| times x negated where w < 0 */
#define Q8_LANES_BW(q01, q23, xq, p01, p23)                                                            \
    do {                                                                                               \
        const __m512i z_ = _mm512_setzero_si512();                                                     \
        p01 = lanes_us_bw(_mm512_abs_epi8(q01), _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(q01), z_, xq)); \
        p23 = lanes_us_bw(_mm512_abs_epi8(q23), _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(q23), z_, xq)); \
    } while (0)

#define DOT4_Q8_0(ATTR, NAME, LANES8) \
static ATTR void NAME(const void *vw, size_t stride, const void *vx, int64_t n, float out[4]) \
{ \
    const struct weft_block_q8_0 *w0 = ROW(struct weft_block_q8_0, 0), *w1 = ROW(struct weft_block_q8_0, 1); \
    const struct weft_block_q8_0 *w2 = ROW(struct weft_block_q8_0, 2), *w3 = ROW(struct weft_block_q8_0, 3); \
    const struct weft_block_q8_0 *x = vx; \
    const int64_t nb = n / WEFT_QK8_0; \
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2); \
    const __m512i i23 = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6); \
    __m512 a01 = _mm512_setzero_ps(), a23 = a01; \
    for (int64_t i = 0; i < nb; i++) { \
        prefetch_rows((const uint8_t *)&w0[i], stride); \
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qs)); \
        const __m512i q01 = load32x2(w0[i].qs, w1[i].qs), q23 = load32x2(w2[i].qs, w3[i].qs); \
        __m512i p01, p23; \
        LANES8(q01, q23, xq, p01, p23); \
        const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtph_ps(head4(&w0[i], &w1[i], &w2[i], &w3[i])), \
                                                              _mm256_set1_ps(z_h2f(x[i].d)))); \
        a01 = _mm512_fmadd_ps(_mm512_permutexvar_ps(i01, d), _mm512_cvtepi32_ps(p01), a01); \
        a23 = _mm512_fmadd_ps(_mm512_permutexvar_ps(i23, d), _mm512_cvtepi32_ps(p23), a23); \
    } \
    out[0] = z_hsum_float_8(_mm512_castps512_ps256(a01)); \
    out[1] = z_hsum_float_8(_mm512_extractf32x8_ps(a01, 1)); \
    out[2] = z_hsum_float_8(_mm512_castps512_ps256(a23)); \
    out[3] = z_hsum_float_8(_mm512_extractf32x8_ps(a23, 1)); \
}

DOT4_Q8_0(WEFT_AVX512, dot4_q8_0_bw, Q8_LANES_BW)
DOT4_Q8_0(WEFT_AVX512_VNNI, dot4_q8_0_vnni, Q8_LANES_VNNI)

void weft_cpu_kernels_fill_avx512_dot4(struct weft_cpu_kernels *k, bool vnni)
{
    const bool v = vnni;
    k->dot4[WEFT_TYPE_Q4_1] = v ? dot4_q4_1_vnni : dot4_q4_1_bw;
    k->dot4[WEFT_TYPE_Q8_0] = v ? dot4_q8_0_vnni : dot4_q8_0_bw;
}

#else

void weft_cpu_kernels_fill_avx512_dot4(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
