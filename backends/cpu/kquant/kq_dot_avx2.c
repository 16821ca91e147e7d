/* AVX2 (+FMA, F16C) kernels for the K-quants: Q4_K, Q5_K, Q6_K dot products
 * against Q8_K activations, and the Q8_K activation quantizer.
 *
 * Each kernel is bit-identical to its portable reference in backends/cpu/cpu_ref_dot.c
 * (dot_q4_k, dot_q5_k, dot_q6_k, quant_q8_k). The integer parts are exact,
 * so any instruction sequence giving the same int32 lane values is used
 * (maddubs/madd, byte shuffles); every float operation of the reference is
 * reproduced in the same order: the same products, fma where the reference
 * calls fmaf and mul+add where it does not, the same per-lane accumulation
 * across blocks and the same horizontal sums. tests/cpu/test_cpu_kquant.c
 * checks them bit for bit.
 *
 * int16 saturation cannot happen: maddubs pairs are at most
 * 2 * 63 * 128 = 16128 in magnitude (Q6_K, unsigned 6-bit values; Q4_K 15,
 * Q5_K 31), and madd multiplies those by scales of magnitude <= 128 into
 * int32.
 *
 * Compiled per function with target attributes so the file builds without
 * -mavx2; the table filler only stores function pointers and is called only
 * when the CPU has AVX2, FMA and F16C (backends/cpu/cpu_kernels.c). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__)

#include "backends/cpu/q32/q32_avx2.h"  /* hsum_float_8 */
#include <immintrin.h>
#include <math.h>
#include <string.h>


static inline WEFT_AVX2 int hsum_epi32_8(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* Q4_K/Q5_K scales[12] -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15),
 * the same values as weft_k4_scale_min in base/quant_blocks.h. */
static inline void k4_unpack_scales(const uint8_t scales[WEFT_K_SCALE_SIZE], uint32_t u[4])
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = uaux;
    u[0] &= kmask1;
}

/* sum_j (bsums[2j] + bsums[2j+1]) * min[j], exact in int32 (k4_scales_mins_dot) */
static inline WEFT_AVX2 int k4_mins_dot(const uint32_t u[4], const int16_t bsums[16])
{
    __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2]));
    __m256i mdup = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
    __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    return hsum_epi32_8(_mm256_madd_epi16(bs, mdup));
}

/* ---- Q4_K: mirrors dot_q4_k (k_lanes_add / k_lanes_total) ----
 * int32 lane l sums the elements e with e % 8 == l (times the sub-block
 * scale); each block adds d * float(lane) (mul, then add) into 8 float
 * lanes; the mins term is subtracted from a scalar sumf per block; the lanes
 * are added to sumf one by one at the end. Bytes are shuffled within each
 * 16-byte half to 0,8,1,9,...,7,15 so that maddubs pairs two elements of
 * the same lane; unpacking the low- and high-nibble sub-blocks' int16 sums
 * side by side lets one madd apply both sub-block scales. */
static WEFT_AVX2 float dot_q4_k_avx2(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q4_k *w = vw;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i pair8 = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
                                           0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    __m256 acc = _mm256_setzero_ps();
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t u[4];
        k4_unpack_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        const int summ = k4_mins_dot(u, x[i].bsums);
        __m256i acc03 = _mm256_setzero_si256(), acc47 = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i q4 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c)), pair8);
            __m256i alo = _mm256_and_si256(q4, m4);
            __m256i ahi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            __m256i ylo = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * c)), pair8);
            __m256i yhi = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * c + 32)), pair8);
            __m256i plo = _mm256_maddubs_epi16(alo, ylo); /* per half: lanes 0..7 */
            __m256i phi = _mm256_maddubs_epi16(ahi, yhi);
            __m256i scp = _mm256_set1_epi32((int)((uint32_t)sc[2 * c] | (uint32_t)sc[2 * c + 1] << 16));
            acc03 = _mm256_add_epi32(acc03, _mm256_madd_epi16(_mm256_unpacklo_epi16(plo, phi), scp));
            acc47 = _mm256_add_epi32(acc47, _mm256_madd_epi16(_mm256_unpackhi_epi16(plo, phi), scp));
        }
        __m256i lanes = _mm256_add_epi32(_mm256_permute2x128_si256(acc03, acc47, 0x20),
                                         _mm256_permute2x128_si256(acc03, acc47, 0x31));
        const float d = weft_half_to_f32(w[i].d) * x[i].d;
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes)));
        sumf -= weft_half_to_f32(w[i].dmin) * x[i].d * (float)summ;
    }
    float sums[8];
    _mm256_storeu_ps(sums, acc);
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

/* ---- Q5_K: mirrors dot_q5_k ----
 * int32 lane l sums the elements with (e % 32) / 4 == l (maddubs, then madd
 * with the sub-block scale); acc = fma(d, float(lane), acc) per block;
 * summs = fma(dmin, float(summ), summs); hsum_float_8(acc) + summs. */
static WEFT_AVX2 float dot_q5_k_avx2(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q5_k *w = vw;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t u[4];
        k4_unpack_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        const int summ = k4_mins_dot(u, x[i].bsums);
        __m256i hb = _mm256_loadu_si256((const __m256i *)w[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i q5 = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            /* bit 2c (low nibbles) and 2c+1 (high nibbles) of qh[l] -> 16 */
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
            hb = _mm256_srli_epi16(hb, 2);
            __m256i alo = _mm256_or_si256(_mm256_and_si256(q5, m4), h0);
            __m256i ahi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5, 4), m4), h1);
            __m256i ylo = _mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * c));
            __m256i yhi = _mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * c + 32));
            __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(alo, ylo), _mm256_set1_epi16((short)sc[2 * c]));
            __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(ahi, yhi), _mm256_set1_epi16((short)sc[2 * c + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        const float d = x[i].d * weft_half_to_f32(w[i].d);
        const float dmin = -x[i].d * weft_half_to_f32(w[i].dmin);
        summs = fmaf(dmin, (float)summ, summs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_float_8(acc) + summs;
}

/* ---- Q6_K: mirrors dot_q6_k ----
 * unsigned 6-bit values (0..63) times q8, int32 lane l sums the elements with
 * (e % 32) / 4 == l times their 16-element scale; minus 32 * (bsums[2l] *
 * sc[2l] + bsums[2l+1] * sc[2l+1]); acc = fma(d, float(lane), acc);
 * hsum_float_8(acc). */
static WEFT_AVX2 float dot_q6_k_avx2(const void *vw, const void *vx, int64_t n)
{
    const struct weft_block_q6_k *w = vw;
    const struct weft_block_q8_k *x = vx;
    const int64_t nb = n / WEFT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
    const __m128i sc_base = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x[i].bsums);
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
        __m256i sumi = _mm256_setzero_si256();
        __m128i scsel = sc_base;
        const int8_t *y = x[i].qs;
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            __m256i a[4];
            a[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            a[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            a[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            a[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
            for (int k = 0; k < 4; k++, y += 32) {
                /* 16-bit scales: sc[2c] for elements 0..15, sc[2c+1] for 16..31 */
                const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, scsel));
                scsel = _mm_add_epi8(scsel, _mm_set1_epi8(2));
                const __m256i p = _mm256_maddubs_epi16(a[k], _mm256_loadu_si256((const __m256i *)y));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        sumi = _mm256_sub_epi32(sumi, off);
        const float d = x[i].d * weft_half_to_f32(w[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_float_8(acc);
}

/* ---- Q8_K activations: mirrors quant_q8_k ----
 * max = the first value of largest magnitude (NaNs never win, as in the
 * reference's strict compare); iscale = -127/max; q = nearest_int(iscale*x)
 * computed with the same magic-number addition and bit extraction, then
 * min(127, q) and the int8 conversion (low byte); bsums from the stored
 * bytes; d = 1/iscale. An all-zero block is written as zeros. */
static WEFT_AVX2 void quant_q8_k_avx2(const float *x, void *vy, int64_t n)
{
    struct weft_block_q8_k *b = vy;
    const int64_t nb = n / WEFT_QK_K;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 magic = _mm256_set1_ps(12582912.f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), bias = _mm256_set1_epi32(0x00400000);
    const __m256i c127 = _mm256_set1_epi32(127), lowbyte = _mm256_set1_epi32(0xFF);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        /* amax: operand order keeps a NaN |x| from replacing the running max */
        __m256 mv = _mm256_setzero_ps();
        for (int j = 0; j < WEFT_QK_K; j += 8)
            mv = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), mv);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float max = 0.0f;
        const __m256 av = _mm256_set1_ps(amax);
        for (int j = 0; j < WEFT_QK_K; j += 8) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), av, _CMP_EQ_OQ));
            if (mask) { max = x[j + __builtin_ctz((unsigned)mask)]; break; }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        int16_t bsums[WEFT_QK_K / 16];
        for (int j = 0; j < WEFT_QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                __m256 v = _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + j + 8 * k)), magic);
                __m256i t = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), bias);
                q[k] = _mm256_and_si256(_mm256_min_epi32(t, c127), lowbyte);
            }
            /* 0..255 values: the unsigned packs are exact */
            __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, order);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), p);
            /* sum of 16 int8 = sum of (q + 128) over 16 bytes - 2048 */
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(p, flip), _mm256_setzero_si256());
            bsums[j / 16] = (int16_t)(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) - 2048);
            bsums[j / 16 + 1] = (int16_t)(_mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3) - 2048);
        }
        memcpy(b[i].bsums, bsums, sizeof bsums);
        b[i].d = 1 / iscale;
    }
}

void weft_cpu_kernels_fill_avx2_k(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->dot[WEFT_TYPE_Q4_K] = dot_q4_k_avx2;
    k->dot[WEFT_TYPE_Q5_K] = dot_q5_k_avx2;
    k->dot[WEFT_TYPE_Q6_K] = dot_q6_k_avx2;
    k->quant[WEFT_TYPE_Q8_K] = quant_q8_k_avx2;
}

#else

void weft_cpu_kernels_fill_avx2_k(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
