/* AVX2 (+FMA, F16C) four-row dots: weight rows w, w + stride, w + 2 stride,
 * w + 3 stride against one activation row, out[i] bit-identical to
 * k->dot[type](w + i * stride, x, n) and so to the reference in backends/cpu/cpu_ref_dot.c
 * (tests/cpu/test_cpu_q32_dot4.c checks this for every table).
 *
 * Each row keeps the float operation sequence of the one-row kernels in
 * q32/q32_dot_avx2.c / kquant/kq_dot_avx2.c: its own 8-lane accumulator, the same scale
 * products (dw * dx, multiplication commutes exactly), the same fma or
 * mul+add per block, the same scalar chains and final horizontal sums. Only
 * the integer lane values may come from other instruction sequences, and they
 * are exact:
 *  - Q4_0 / Q5_0: the one-row kernels multiply the signed values v = u - 8
 *    (u - 16) by the activations; here the unsigned u (0..15, 0..31) go
 *    through maddubs and 8 (16) times the activations' 4-byte lane sums,
 *    computed once per block for all four rows, are subtracted: the same
 *    int32 per lane, without the per-row sign fix-ups;
 *  - Q4_0's reference is a scalar float chain per block,
 *    sumf += ((float)s * dw) * dx; here the four rows' chains are the four
 *    lanes of one 128-bit vector (mul, mul, add: the same IEEE ops).
 * What is shared: the activation block loads (and their shuffles and lane
 * sums), the activation scales' conversions, the loop; four independent
 * accumulator chains hide the fma latency.
 *
 * int16 saturation in maddubs: unsigned operands are at most 31 (Q5_0 u),
 * 15 (Q4_0/Q4_1), 63 (Q6_K) or 128 (|Q8_0 weight|), signed ones activations in
 * [-127, 127]; pairs stay below 32767 as in the one-row kernels. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include "backends/cpu/q32/q32_avx2.h"

/* Software prefetch distance in bytes ahead on each weight row (0: none).
 * End to end (SmolLM2-135M Q4_1, 2 threads, noisy shared machine) 512 gave
 * tg medians 93-108 t/s against 72-108 without; the L2-resident microbench
 * shows no difference. */
#ifndef WEFT_DOT4_PREFETCH
#define WEFT_DOT4_PREFETCH 512
#endif

/* byte j = 0x10 if bit j of the little-endian 32-bit qh is set, else 0 */
static inline WEFT_AVX2 __m256i hbit16_from_bits_32(const uint8_t qh[4])
{
    return _mm256_and_si256(bytes_from_bits_32(qh), _mm256_set1_epi8(0x10));
}

static inline WEFT_AVX2 void prefetch_rows(const uint8_t *p, size_t stride)
{
#if WEFT_DOT4_PREFETCH > 0
    _mm_prefetch((const char *)p + WEFT_DOT4_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)p + stride + WEFT_DOT4_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)p + 2 * stride + WEFT_DOT4_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)p + 3 * stride + WEFT_DOT4_PREFETCH, _MM_HINT_T0);
#else
    (void)p, (void)stride;
#endif
}

#define ROW(T, r) ((const T *)((const uint8_t *)vw + (size_t)(r) * stride))

/* ---- Q4_1 x Q8_1 (dot_q4_1: acc = fma(dw*dx, lanes, acc); summs = fma(m, s, summs)) ---- */

/* The four rows' scales: the 32-bit words at the blocks' starts (d, or d
 * and m) as four int32; F16C widens them exactly as h2f. */
static inline WEFT_AVX2 __m128i head4(const void *b0, const void *b1, const void *b2, const void *b3)
{
    uint32_t u0, u1, u2, u3;
    memcpy(&u0, b0, 4), memcpy(&u1, b1, 4), memcpy(&u2, b2, 4), memcpy(&u3, b3, 4);
    return _mm_setr_epi32((int)u0, (int)u1, (int)u2, (int)u3);
}

static inline WEFT_AVX2 __m256 bcast_lane(__m256 v, int l) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(l)); }

static inline WEFT_AVX2 __m256 q4_1_lanes_f(const struct weft_block_q4_1 *w, __m256i xq)
{
    return _mm256_cvtepi32_ps(lanes_us(bytes_from_nibbles_32(w->qs), xq));
}

/* dm = (d0 m0 d1 m1 d2 m2 d3 m3) of the four rows' blocks: the even lanes of
 * dm * xd are the rows' dw * dx; the odd lanes of sm = fma(dm, xs, sm) are
 * the rows' scalar summs chains (each lane its own fmaf chain; the even
 * lanes are unused). */
static WEFT_AVX2 void dot4_q4_1(const void *vw, size_t stride, const void *vx, int64_t n, float out[4])
{
    const struct weft_block_q4_1 *w0 = ROW(struct weft_block_q4_1, 0), *w1 = ROW(struct weft_block_q4_1, 1);
    const struct weft_block_q4_1 *w2 = ROW(struct weft_block_q4_1, 2), *w3 = ROW(struct weft_block_q4_1, 3);
    const struct weft_block_q8_1 *x = vx;
    const int64_t nb = n / WEFT_QK4_1;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, sm = a0;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_rows((const uint8_t *)&w0[i], stride);
        const __m256i xq = load32(x[i].qs);
        const __m256 xd = _mm256_set1_ps(h2f(x[i].d)), xs = _mm256_set1_ps(h2f(x[i].s));
        const __m256 dm = _mm256_cvtph_ps(head4(&w0[i], &w1[i], &w2[i], &w3[i]));
#if WEFT_GGML_SCALAR_CONTRACT
        sm = _mm256_fmadd_ps(dm, xs, sm);
#else
        sm = _mm256_add_ps(sm, _mm256_mul_ps(dm, xs));
#endif
        const __m256 d = _mm256_mul_ps(dm, xd);
        a0 = _mm256_fmadd_ps(bcast_lane(d, 0), q4_1_lanes_f(&w0[i], xq), a0);
        a1 = _mm256_fmadd_ps(bcast_lane(d, 2), q4_1_lanes_f(&w1[i], xq), a1);
        a2 = _mm256_fmadd_ps(bcast_lane(d, 4), q4_1_lanes_f(&w2[i], xq), a2);
        a3 = _mm256_fmadd_ps(bcast_lane(d, 6), q4_1_lanes_f(&w3[i], xq), a3);
    }
    float s[8];
    _mm256_storeu_ps(s, sm);
    out[0] = hsum_float_8(a0) + s[1];
    out[1] = hsum_float_8(a1) + s[3];
    out[2] = hsum_float_8(a2) + s[5];
    out[3] = hsum_float_8(a3) + s[7];
}

/* ---- Q8_0 x Q8_0 (dot_q8_0: acc = fma(dw*dx, lanes, acc)) ----
 * lanes as the one-row kernel: maddubs(|w|, x with w's sign) */

static inline WEFT_AVX2 __m256 q8_0_lanes_f(const struct weft_block_q8_0 *w, __m256i xq)
{
    __m256i wq = load32(w->qs);
    return _mm256_cvtepi32_ps(lanes_us(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xq, wq)));
}

/* the even lanes of cvtph(head4) * xd are the rows' dw * dx (the odd lanes
 * hold whatever follows d in the block, unused) */
static WEFT_AVX2 void dot4_q8_0(const void *vw, size_t stride, const void *vx, int64_t n, float out[4])
{
    const struct weft_block_q8_0 *w0 = ROW(struct weft_block_q8_0, 0), *w1 = ROW(struct weft_block_q8_0, 1);
    const struct weft_block_q8_0 *w2 = ROW(struct weft_block_q8_0, 2), *w3 = ROW(struct weft_block_q8_0, 3);
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK8_0;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_rows((const uint8_t *)&w0[i], stride);
        const __m256i xq = load32(x[i].qs);
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(head4(&w0[i], &w1[i], &w2[i], &w3[i])),
                                       _mm256_set1_ps(h2f(x[i].d)));
        a0 = _mm256_fmadd_ps(bcast_lane(d, 0), q8_0_lanes_f(&w0[i], xq), a0);
        a1 = _mm256_fmadd_ps(bcast_lane(d, 2), q8_0_lanes_f(&w1[i], xq), a1);
        a2 = _mm256_fmadd_ps(bcast_lane(d, 4), q8_0_lanes_f(&w2[i], xq), a2);
        a3 = _mm256_fmadd_ps(bcast_lane(d, 6), q8_0_lanes_f(&w3[i], xq), a3);
    }
    out[0] = hsum_float_8(a0);
    out[1] = hsum_float_8(a1);
    out[2] = hsum_float_8(a2);
    out[3] = hsum_float_8(a3);
}

/* ---- Q5_0 x Q8_0 (dot_q5_0: acc = fma(dw*dx, lanes, acc)) ----
 * lanes = sum(u * x) - 16 * sum(x) per 4-byte lane, u = nibble | hbit << 4 */

static inline WEFT_AVX2 __m256 q5_0_lanes_f(const struct weft_block_q5_0 *w, __m256i xq, __m256i xsum16)
{
    __m256i u = _mm256_or_si256(bytes_from_nibbles_32(w->qs), hbit16_from_bits_32(w->qh));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes_us(u, xq), xsum16));
}

static WEFT_AVX2 void dot4_q5_0(const void *vw, size_t stride, const void *vx, int64_t n, float out[4])
{
    const struct weft_block_q5_0 *w0 = ROW(struct weft_block_q5_0, 0), *w1 = ROW(struct weft_block_q5_0, 1);
    const struct weft_block_q5_0 *w2 = ROW(struct weft_block_q5_0, 2), *w3 = ROW(struct weft_block_q5_0, 3);
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK5_0;
    const __m256i ones8 = _mm256_set1_epi8(1);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_rows((const uint8_t *)&w0[i], stride);
        const __m256i xq = load32(x[i].qs);
        const __m256i xsum16 = _mm256_slli_epi32(lanes_us(ones8, xq), 4);
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(head4(&w0[i], &w1[i], &w2[i], &w3[i])),
                                       _mm256_set1_ps(h2f(x[i].d)));
        a0 = _mm256_fmadd_ps(bcast_lane(d, 0), q5_0_lanes_f(&w0[i], xq, xsum16), a0);
        a1 = _mm256_fmadd_ps(bcast_lane(d, 2), q5_0_lanes_f(&w1[i], xq, xsum16), a1);
        a2 = _mm256_fmadd_ps(bcast_lane(d, 4), q5_0_lanes_f(&w2[i], xq, xsum16), a2);
        a3 = _mm256_fmadd_ps(bcast_lane(d, 6), q5_0_lanes_f(&w3[i], xq, xsum16), a3);
    }
    out[0] = hsum_float_8(a0);
    out[1] = hsum_float_8(a1);
    out[2] = hsum_float_8(a2);
    out[3] = hsum_float_8(a3);
}

/* ---- Q4_0 x Q8_0 (dot_q4_0: sumf += ((float)s * dw) * dx, block by block) ----
 * s = sum(u * x) - 8 * sum(x) for the nibbles u; the four rows' block sums
 * come out of one hadd tree as the four int32 of a 128-bit vector, and the
 * four scalar chains run as its four float lanes. */

static inline WEFT_AVX2 __m128i half4_row_scales(const weft_half *d0, const weft_half *d1, const weft_half *d2,
                                            const weft_half *d3)
{
    return _mm_setr_epi16((short)*d0, (short)*d1, (short)*d2, (short)*d3, 0, 0, 0, 0);
}

static WEFT_AVX2 void dot4_q4_0(const void *vw, size_t stride, const void *vx, int64_t n, float out[4])
{
    const struct weft_block_q4_0 *w0 = ROW(struct weft_block_q4_0, 0), *w1 = ROW(struct weft_block_q4_0, 1);
    const struct weft_block_q4_0 *w2 = ROW(struct weft_block_q4_0, 2), *w3 = ROW(struct weft_block_q4_0, 3);
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK4_0;
    const __m256i ones8 = _mm256_set1_epi8(1);
    __m128 sumf = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_rows((const uint8_t *)&w0[i], stride);
        const __m256i xq = load32(x[i].qs);
        const __m256i xsum = lanes_us(ones8, xq); /* 4-byte lane sums of x */
        __m256i p0 = lanes_us(bytes_from_nibbles_32(w0[i].qs), xq);
        __m256i p1 = lanes_us(bytes_from_nibbles_32(w1[i].qs), xq);
        __m256i p2 = lanes_us(bytes_from_nibbles_32(w2[i].qs), xq);
        __m256i p3 = lanes_us(bytes_from_nibbles_32(w3[i].qs), xq);
        __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        /* 8 * sum(x) over the block, in every int32 */
        __m128i xs = _mm_add_epi32(_mm256_castsi256_si128(xsum), _mm256_extracti128_si256(xsum, 1));
        xs = _mm_add_epi32(xs, _mm_shuffle_epi32(xs, _MM_SHUFFLE(1, 0, 3, 2)));
        xs = _mm_add_epi32(xs, _mm_shuffle_epi32(xs, _MM_SHUFFLE(2, 3, 0, 1)));
        s = _mm_sub_epi32(s, _mm_slli_epi32(xs, 3));
        __m128 dw = _mm_cvtph_ps(half4_row_scales(&w0[i].d, &w1[i].d, &w2[i].d, &w3[i].d));
        __m128 t = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(s), dw), _mm_set1_ps(h2f(x[i].d)));
        sumf = _mm_add_ps(sumf, t);
    }
    _mm_storeu_ps(out, sumf);
}

/* K-quants: none. Four-row forms of Q4_K and Q6_K that share the
 * activations' shuffles and bsums (four or two rows per pass) measured no
 * faster than four calls of the one-row kernels (0.8-1.0x, register spills;
 * the 256-element blocks already amortize the loop), so the matmul keeps
 * calling dot[] for them. */

void weft_cpu_kernels_fill_avx2_dot4(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->dot4[WEFT_TYPE_Q4_0] = dot4_q4_0;
    k->dot4[WEFT_TYPE_Q4_1] = dot4_q4_1;
    k->dot4[WEFT_TYPE_Q5_0] = dot4_q5_0;
    k->dot4[WEFT_TYPE_Q8_0] = dot4_q8_0;
}

#else

void weft_cpu_kernels_fill_avx2_dot4(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
