/* What the AVX2 K-quant layouts of 8 rows share (packed/packed_kq_avx2.c
 * Q4_K, packed/packed_q5k_avx2.c Q5_K, packed/packed_q6k_avx2.c Q6_K): the
 * Q4_K/Q5_K scale and min unpacking, the mins sums of 8 rows, a 32-bit
 * broadcast, ggml's hsum_float_8 and the element order of the layouts whose
 * int lanes are the reference's natural ones (lane l: elements 4l..4l+3 of
 * each 32). Include after <immintrin.h> and packed.h, inside the x86 guard. */
#ifndef WEFT_CPU_KQ_AVX2_H
#define WEFT_CPU_KQ_AVX2_H

/* A block's scales as int16 pairs (scale_2c, scale_2c+1), pair c of the
 * chunk c, stored to sp[0..4), and its mins as int16 (min_0 .. min_7),
 * returned: weft_k4_scale_min's values, unpacked as ggml's four 32-bit
 * words (v0 = scales 0..3, v1 = 4..7, v2 = mins 0..3, v3 = mins 4..7). s12
 * may be read 4 bytes past its 12 (inside the block column). */
AI WEFT_AVX2 __m128i k4_pairs(const uint8_t *s12, int32_t *sp)
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)s12); /* u0 u1 u2 . */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)),
                                                    _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_slli_epi32(_mm_srli_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0)), 6), 4),
                                     _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    const __m128i v = _mm_or_si128(lo, hi); /* v0 v1 v2 v3 */
    _mm_storeu_si128((__m128i *)sp, _mm_cvtepu8_epi16(v));
    return _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
}

/* the mins sums of eight rows with the activation's B pairs (bsums[2j] +
 * bsums[2j + 1], int16 at B), lane r = row r; m[k] holds row k's mins
 * (int16) in its low half and row k + 4's in its high half */
AI WEFT_AVX2 __m256i k4_summ8(const __m256i m[4], const uint8_t *B)
{
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)B));
    const __m256i t01 = _mm256_hadd_epi32(_mm256_madd_epi16(m[0], b), _mm256_madd_epi16(m[1], b));
    const __m256i t23 = _mm256_hadd_epi32(_mm256_madd_epi16(m[2], b), _mm256_madd_epi16(m[3], b));
    return _mm256_hadd_epi32(t01, t23);
}

/* a block column's mins in k4_summ8's order */
AI WEFT_AVX2 void k4_mins8(const uint8_t *p, __m256i m[4])
{
    int32_t sp[4];
    for (int k = 0; k < 4; k++)
        m[k] = _mm256_set_m128i(k4_pairs(p + 32 + 12 * (k + 4), sp), k4_pairs(p + 32 + 12 * k, sp));
}

AI WEFT_AVX2 __m256i bc32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* ggml's hsum_float_8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) */
AI WEFT_AVX2 float hsum8(__m256 a)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* The natural-lane layouts (Q5_K, Q6_K) take the 32-element groups in pairs
 * (2m, 2m + 1), m = 0..3, each pair as two vectors A and B: byte 4l + t of A
 * holds element 32 (2m + t/2) + 4l + t%2, B the same + 2. vpmaddubsw of
 * each, vpaddw of the two, leaves in int32 lane l group 2m's four products
 * (int16) beside group 2m + 1's, for one vpmaddwd by their scales. */
/* the element of a 256-element block under byte j (0..31) of pair m's A (v = 0) or B (v = 1) */
AI int kq8_pair_elem(int m, int v, int j)
{
    const int l = j >> 2, t = j & 3;
    return 32 * (2 * m + (t >> 1)) + 4 * l + 2 * v + (t & 1);
}

/* The prefill drivers of the 8-row layouts. KQ8_LANES_STEP: the lanes pass
 * `lanes` of each of the group's 8 rows over blocks b0..b1 against nr (1..8)
 * activation rows, the count a constant in each case. KQ8_GEMMP: a gemmp
 * over `groups` groups of col_bytes per block column and nx activation rows
 * (units of unit_bytes per block), at most max_acts at a time through
 * `group` (w, x, ubytes, nb, na, out, ldo). */
#define KQ8_LANES_STEP(lanes, w, xa, ubytes, b0, b1, acc, nr)                                                  \
    for (int r_ = 0; r_ < 8; r_++) switch (nr) {                                                                \
        case 1: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 1); break;                                          \
        case 2: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 2); break;                                          \
        case 3: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 3); break;                                          \
        case 4: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 4); break;                                          \
        case 5: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 5); break;                                          \
        case 6: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 6); break;                                          \
        case 7: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 7); break;                                          \
        default: lanes(w, r_, xa, ubytes, b0, b1, (acc)[r_], 8); break;                                         \
        }

#define KQ8_GEMMP(name, group, col_bytes, unit_bytes, max_acts)                                                 \
    static WEFT_AVX2 void name(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out,        \
                               size_t ldo)                                                                      \
    {                                                                                                           \
        const int64_t nb = n / WEFT_QK_K;                                                                       \
        const size_t ubytes = (size_t)nb * (unit_bytes);                                                        \
        for (int a0 = 0; a0 < nx; a0 += (max_acts)) {                                                           \
            const int na = nx - a0 < (max_acts) ? nx - a0 : (max_acts);                                         \
            for (int g = 0; g < groups; g++)                                                                    \
                group((const uint8_t *)wp + (size_t)g * nb * (col_bytes), (const uint8_t *)xp + (size_t)a0 * ubytes, \
                      ubytes, nb, na, out + (size_t)a0 * ldo + 8 * g, ldo);                                     \
        }                                                                                                       \
    }

#endif
