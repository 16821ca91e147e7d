/* AVX2 (+FMA, F16C) dot products for the low-bit types published GGUFs use:
 * Q2_K, Q3_K and IQ4_XS against Q8_K activations, IQ4_NL and MXFP4 against
 * Q8_0 (and IQ4_NL's multi-row form, tinyBLAS's single accumulator).
 *
 * Each is bit-identical to its portable reference in backends/cpu/cpu_ref_dot.c
 * (dot_q2_k, dot_q3_k, dot_iq4_xs, dot_nl_pairs): the int32 lane values are
 * exact whatever the instruction sequence, and every float step of the
 * reference (which fma, which accumulator, the horizontal sum) is the same
 * here. tests/cpu/test_cpu_kquant.c checks them bit for bit.
 *
 * int16 saturation cannot happen: maddubs pairs are at most 2 * 3 * 128
 * (Q2_K, Q3_K: 2-bit values; the 3rd bit of Q3_K is subtracted as its own
 * maddubs) or 2 * 127 * 128 = 32512 (the code books, |value| <= 127, signed
 * into the activation: activations are in [-127, 127] except Q8_K's and
 * Q8_0's never-written -128).
 *
 * Compiled per function with target attributes (the file builds without
 * -mavx2); the filler runs only where the CPU has AVX2, FMA and F16C. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__)

#include "backends/cpu/q32/q32_avx2.h"  /* hsum_float_8, ggml_scalar_madd */
#include "base/quant_blocks.h"

/* int16 scales for one 32-element chunk: sc[a] for its elements 0..15, sc[a+1] for 16..31 */
static inline WEFT_AVX2 __m256i scales16_pair(__m128i sc8, int a)
{
    const __m128i sel = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_add_epi8(sel, _mm_set1_epi8((char)a))));
}

/* Q2_K: the mins lanes first (one madd of the 16 mins with the 16 bsums), then the quants */
static WEFT_AVX2 float dot_q2_k_avx2(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q2_k *w = vw;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = x[i].d * weft_half_to_f32(w[i].d), dmin = -x[i].d * weft_half_to_f32(w[i].dmin);
        const __m128i ms = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m128i sc8 = _mm_and_si128(ms, m4), mn8 = _mm_and_si128(_mm_srli_epi16(ms, 4), m4);
        const __m256i prod = _mm256_madd_epi16(_mm256_cvtepi8_epi16(mn8), _mm256_loadu_si256((const __m256i *)x[i].bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        __m256i sumi = _mm256_setzero_si256();
        const int8_t *y = x[i].qs;
        for (int c = 0; c < 2; c++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            for (int k = 0; k < 4; k++, y += 32) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales16_pair(sc8, 8 * c + 2 * k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_float_8(acc);
}

/* Q3_K: the low 2 bits through maddubs, minus 4 * q8 where the 3rd bit is clear */
static WEFT_AVX2 float dot_q3_k_avx2(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q3_k *w = vw;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m128i sc8 = q3k_scales_i8(w[i].scales);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        const int8_t *y = x[i].qs;
        for (int c = 0; c < 2; c++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            for (int k = 0; k < 4; k++, y += 32) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * c + k), one);
                const __m256i h4 = _mm256_slli_epi16(_mm256_andnot_si256(hb, one), 2);
                const __m256i y8 = _mm256_loadu_si256((const __m256i *)y);
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y8), _mm256_maddubs_epi16(h4, y8));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales16_pair(sc8, 8 * c + 2 * k)));
            }
        }
        const float d = x[i].d * weft_half_to_f32(w[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_float_8(acc);
}

/* the 32 code-book values of 16 nibble bytes: low nibbles (elements 0..15), then high */
static inline WEFT_AVX2 __m256i nl_values(const uint8_t *qs, __m128i book)
{
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(book), bytes_from_nibbles_32(qs));
}

/* int16 pair sums of v * y (v signed: its sign moved onto y) */
static inline WEFT_AVX2 __m256i mul_pairs(__m256i v, __m256i y)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
}

static WEFT_AVX2 float dot_iq4_xs_avx2(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_iq4_xs *w = vw;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    static const int8_t kv[16] = WEFT_KVALUES_IQ4NL;
    const __m128i book = _mm_loadu_si128((const __m128i *)kv);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int s = 0; s < WEFT_QK_K / 32; s++) {
            const __m256i v = nl_values(w[i].qs + 16 * s, book);
            const __m256i p = mul_pairs(v, _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * s)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((int16_t)weft_iq4_xs_scale(&w[i], s))));
        }
        const float d = weft_half_to_f32(w[i].d) * x[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_float_8(acc);
}

/* IQ4_NL / MXFP4: the block's lanes (elements 4l..4l+3) and its scale, as dot_nl_pairs */
static inline WEFT_AVX2 __m256 nl_block(const uint8_t *b, bool mx, const struct weft_block_q8_0 *x, __m128i book,
                                        float *scale)
{
    const uint8_t *qs = mx ? ((const struct weft_block_mxfp4 *)b)->qs : ((const struct weft_block_iq4_nl *)b)->qs;
    *scale = mx ? weft_half_to_f32(x->d) * weft_e8m0_to_f32_half(b[0])
                : weft_half_to_f32(x->d) * weft_half_to_f32(((const struct weft_block_iq4_nl *)b)->d);
    const __m256i p = mul_pairs(nl_values(qs, book), _mm256_loadu_si256((const __m256i *)x->qs));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

static inline WEFT_AVX2 float dot_nl_avx2(const void *vw, const void *vx, int64_t n, bool mx, bool one_chain)
{
    static const int8_t kv_nl[16] = WEFT_KVALUES_IQ4NL, kv_mx[16] = WEFT_KVALUES_MXFP4;
    const __m128i book = _mm_loadu_si128((const __m128i *)(mx ? kv_mx : kv_nl));
    const size_t bsz = mx ? sizeof(struct weft_block_mxfp4) : sizeof(struct weft_block_iq4_nl);
    const uint8_t *w = vw;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / 32;
    __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    int64_t ib = 0;
    float s;
    if (one_chain) {
        for (; ib < nb; ib++) {
            __m256 p = nl_block(w + (size_t)ib * bsz, mx, &x[ib], book, &s);
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(s), p, acc1);
        }
        return hsum_float_8(acc1);
    }
    for (; ib + 1 < nb; ib += 2) {
        float s2;
        __m256 p1 = nl_block(w + (size_t)ib * bsz, mx, &x[ib], book, &s);
        __m256 p2 = nl_block(w + (size_t)(ib + 1) * bsz, mx, &x[ib + 1], book, &s2);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(s), p1, acc1);
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(s2), p2, acc2);
    }
    float sumf = hsum_float_8(_mm256_add_ps(acc1, acc2));
    if (ib < nb) {
        /* the odd last block: an int sum, then sumf = fma(scale, sum, sumf) (the reference's
         * contracted scalar step) */
        __m256 p = nl_block(w + (size_t)ib * bsz, mx, &x[ib], book, &s);
        float lanes[8];
        _mm256_storeu_ps(lanes, p);
        int sumi = 0;
        for (int l = 0; l < 8; l++) sumi += (int)lanes[l];
        sumf = ggml_scalar_madd(s, (float)sumi, sumf);
    }
    return sumf;
}

static WEFT_AVX2 float dot_iq4_nl_avx2(const void *w, const void *x, int64_t n) { return dot_nl_avx2(w, x, n, false, false); }
static WEFT_AVX2 float dot_mm_iq4_nl_avx2(const void *w, const void *x, int64_t n) { return dot_nl_avx2(w, x, n, false, true); }
static WEFT_AVX2 float dot_mxfp4_avx2(const void *w, const void *x, int64_t n) { return dot_nl_avx2(w, x, n, true, false); }

void weft_cpu_kernels_fill_avx2_low(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->dot[WEFT_TYPE_Q2_K] = dot_q2_k_avx2;
    k->dot[WEFT_TYPE_Q3_K] = dot_q3_k_avx2;
    k->dot[WEFT_TYPE_IQ4_XS] = dot_iq4_xs_avx2;
    k->dot[WEFT_TYPE_IQ4_NL] = dot_iq4_nl_avx2;
    k->dot_mm[WEFT_TYPE_IQ4_NL] = dot_mm_iq4_nl_avx2;
    k->mm_k_multiple[WEFT_TYPE_IQ4_NL] = 32;
    k->dot[WEFT_TYPE_MXFP4] = dot_mxfp4_avx2;
}

#else

void weft_cpu_kernels_fill_avx2_low(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
