/* AVX2 (+FMA, F16C) kernels for the 32-element block formats: dot products
 * of Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 weights with Q8_0/Q8_1 activations, and the
 * Q8_0/Q8_1 activation quantizers.
 *
 * Each kernel is bit-identical to its portable reference in backends/cpu/cpu_ref_dot.c
 * (tests/cpu/test_cpu_q32.c checks this):
 *  - integer parts are exact, so any instruction sequence that yields the
 *    same per-lane int32 values will do: int32 lane l of a block holds the
 *    products of elements 4l..4l+3 (maddubs pairs, then madd with ones);
 *  - float parts follow the reference operation by operation: per block
 *    acc = fma(dw*dx, float(lane), acc) in 8 lanes, hsum_float_8 as
 *    ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), then "+ summs" where the
 *    reference has it (summs = fma(m, s, summs) block by block, scalar);
 *    Q4_0 keeps the reference's scalar float loop over per-block int sums.
 *
 * int16 saturation cannot occur in _mm256_maddubs_epi16: the unsigned operand
 * is at most 31 (Q4_1/Q5_1 values), 16 (|Q4_0/Q5_0 values|, sign moved onto
 * the activation) or 128 (|Q8_0 weight|), and the signed operand is an
 * activation in [-127, 127] (the Q8 quantizers never produce -128:
 * |x * (127/amax)| rounds to at most 127), so a pair is at most
 * 2 * 128 * 127 = 32512. (An activation byte of -128, which no quantizer
 * writes, would be mis-negated by _mm256_sign_epi8 in Q4_0/Q5_0/Q8_0, as in
 * ggml.)
 *
 * f16 scales are widened with F16C, which is exact and equals
 * weft_half_to_f32 for every non-NaN half; the quantizers store d and s with
 * weft_f32_to_half itself. Every function carries its own target attribute,
 * so this file builds without -mavx2 and the table filler runs anywhere. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include "backends/cpu/q32/q32_avx2.h"

/* the same for two signed operands: |a| times b with a's sign */
static inline WEFT_AVX2 __m256i lanes_ss(__m256i a, __m256i b)
{
    return lanes_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/* ---- dot products ---- */

static inline WEFT_AVX2 __m256i q4_0_lanes(const struct weft_block_q4_0 *w, const struct weft_block_q8_0 *x)
{
    __m256i v = _mm256_sub_epi8(bytes_from_nibbles_32(w->qs), _mm256_set1_epi8(8));
    return lanes_ss(v, load32(x->qs));
}

/* Reference: sumf += (float)(s0 + s1) * dw * dx per block, in a scalar
 * chain; the block sums come four at a time from one hadd tree. */
static WEFT_AVX2 float dot_q4_0(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q4_0 *w = vw;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK4_0;
    float sumf = 0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        __m256i p0 = q4_0_lanes(&w[i], &x[i]), p1 = q4_0_lanes(&w[i + 1], &x[i + 1]);
        __m256i p2 = q4_0_lanes(&w[i + 2], &x[i + 2]), p3 = q4_0_lanes(&w[i + 3], &x[i + 3]);
        __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        int32_t si[4];
        _mm_storeu_si128((__m128i *)si, s);
        for (int k = 0; k < 4; k++) sumf += (float)si[k] * h2f(w[i + k].d) * h2f(x[i + k].d);
    }
    for (; i < nb; i++) {
        __m256i p = q4_0_lanes(&w[i], &x[i]);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
        sumf += (float)_mm_cvtsi128_si32(s) * h2f(w[i].d) * h2f(x[i].d);
    }
    return sumf;
}

static WEFT_AVX2 float dot_q4_1(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q4_1 *w = vw;
    const struct weft_block_q8_1 *x = vx;
    const int64_t nb = n / WEFT_QK4_1;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < nb; i++) {
        summs = ggml_scalar_madd(h2f(w[i].m), h2f(x[i].s), summs);
        __m256i p = lanes_us(bytes_from_nibbles_32(w[i].qs), load32(x[i].qs));
        __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_float_8(acc) + summs;
}

static WEFT_AVX2 float dot_q5_0(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q5_0 *w = vw;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK5_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        /* (nibble | hbit << 4) - 16 as int8: nibble where the bit is set,
         * nibble | 0xF0 (= nibble - 16) where it is not */
        __m256i v = bytes_from_nibbles_32(w[i].qs);
        __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(w[i].qh), _mm256_set1_epi8((char)0xF0));
        v = _mm256_or_si256(v, hi);
        __m256i p = lanes_ss(v, load32(x[i].qs));
        __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_float_8(acc);
}

static WEFT_AVX2 float dot_q5_1(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q5_1 *w = vw;
    const struct weft_block_q8_1 *x = vx;
    const int64_t nb = n / WEFT_QK5_1;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < nb; i++) {
        summs = ggml_scalar_madd(h2f(w[i].m), h2f(x[i].s), summs);
        __m256i v = bytes_from_nibbles_32(w[i].qs);
        __m256i hi = _mm256_and_si256(bytes_from_bits_32(w[i].qh), _mm256_set1_epi8(0x10));
        v = _mm256_or_si256(v, hi);
        __m256i p = lanes_us(v, load32(x[i].qs));
        __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_float_8(acc) + summs;
}

static WEFT_AVX2 float dot_q8_0(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q8_0 *w = vw;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK8_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i p = lanes_ss(load32(w[i].qs), load32(x[i].qs));
        __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_float_8(acc);
}

/* ---- activation quantizers (runtime rounding) ---- */

/* amax = max |x[j]| over 32 floats. Order-independent for non-NaN input;
 * a NaN element is skipped as fmaxf(amax, NaN) skips it (max_ps returns its
 * second operand, the running maximum, when the first is NaN). */
static inline WEFT_AVX2 float absmax32(const float *x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), m);
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* q[j] = (int8_t)nearbyintf(x[j] * id) for 32 elements; returns sum(q).
 * The int8 cast keeps the low byte of the int32 conversion, as GCC compiles
 * the scalar cast on x86. This matters only where the scalar cast is
 * undefined: NaN input, or amax < 127/FLT_MAX (127/amax = inf), where both
 * give 0 for the finite elements' inf/NaN products. */
static inline WEFT_AVX2 int quant32(const float *x, float id, int8_t *q)
{
    const __m256 vid = _mm256_set1_ps(id);
    __m256i v[4];
    __m256i sum = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        __m256 f = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid);
        f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i i = _mm256_cvtps_epi32(f);
        v[k] = _mm256_srai_epi32(_mm256_slli_epi32(i, 24), 24);
        sum = _mm256_add_epi32(sum, v[k]);
    }
    /* packs work per 128-bit half: after both packs the bytes are in the
     * dword order 0 4 1 5 2 6 3 7; permute them back */
    __m256i a = _mm256_packs_epi32(v[0], v[1]), b = _mm256_packs_epi32(v[2], v[3]);
    __m256i r = _mm256_packs_epi16(a, b);
    r = _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, r);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static WEFT_AVX2 void quant_q8_0(const float *x, void *vy, int64_t n)
{
    struct weft_block_q8_0 *y = vy;
    const int64_t nb = n / WEFT_QK8_0;
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK8_0) {
        float amax = absmax32(x);
        y[i].d = weft_f32_to_half(amax / 127);
        quant32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
    }
}

static WEFT_AVX2 void quant_q8_1(const float *x, void *vy, int64_t n)
{
    struct weft_block_q8_1 *y = vy;
    const int64_t nb = n / WEFT_QK8_1;
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK8_1) {
        float amax = absmax32(x), d = amax / 127;
        y[i].d = weft_f32_to_half(d);
        int sum = quant32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
        y[i].s = weft_f32_to_half((float)sum * d);
    }
}

void weft_cpu_kernels_fill_avx2_q(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->dot[WEFT_TYPE_Q4_0] = dot_q4_0;
    k->dot[WEFT_TYPE_Q4_1] = dot_q4_1;
    k->dot[WEFT_TYPE_Q5_0] = dot_q5_0;
    k->dot[WEFT_TYPE_Q5_1] = dot_q5_1;
    k->dot[WEFT_TYPE_Q8_0] = dot_q8_0;
    k->quant[WEFT_TYPE_Q8_0] = quant_q8_0;
    k->quant[WEFT_TYPE_Q8_1] = quant_q8_1;
}

#else

void weft_cpu_kernels_fill_avx2_q(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
