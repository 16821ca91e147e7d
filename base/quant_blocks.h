/* How the quantized block formats of base/types.h pack their elements: the
 * unpacking steps every reader of a block shares (the reference kernels of
 * base/quant.c, the CPU backend's reference dot products). Layout only: no
 * arithmetic order is implied here. */
#ifndef WEFT_QUANT_BLOCKS_H
#define WEFT_QUANT_BLOCKS_H

#include "base/types.h"

/* Q4_K/Q5_K: scales[12] packs 8 six-bit scales and 8 six-bit mins.
 *   j < 4 : scale = q[j] & 63, min = q[j+4] & 63
 *   j >= 4: low 4 bits from q[j+4] (scale: low nibble, min: high nibble),
 *           high 2 bits from the top bits of q[j-4] (scale) and q[j] (min). */
static inline void weft_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q5: bit j of the little-endian qh word is the 5th bit of element j. */
static inline uint32_t weft_qh_load(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* Q6_K 6-bit value of element (128*h + 32*k + l), h = half, k = 0..3, l = 0..31:
 * low 4 bits from ql[64h + l + 32*(k&1)] (low nibble for k<2, high for k>=2),
 * high 2 bits are bits 2k..2k+1 of qh[32h + l]. Minus 32. */
static inline void weft_q6_k_unpack(const struct weft_block_q6_k *b, int8_t a[WEFT_QK_K])
{
    const uint8_t *ql = b->ql, *qh = b->qh;
    for (int h = 0; h < 2; h++, a += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            a[l + 0] = (int8_t)(((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32);
            a[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32);
            a[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
            a[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
    }
}

/* Q3_K: the 16 six-bit scales (minus 32) packed in scales[12]: scale s has its low 4 bits in
 * nibble s/8 of byte s%8 and its high 2 bits at bits 2(s/4)..2(s/4)+1 of byte 8 + s%4. */
static inline void weft_q3_k_scales(const uint8_t q[12], int8_t sc[16])
{
    for (int s = 0; s < 16; s++) {
        int lo = (q[s % 8] >> (4 * (s / 8))) & 0xF;
        int hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
        sc[s] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* IQ4_XS: sub-block s's six-bit scale, minus 32 */
static inline int weft_iq4_xs_scale(const struct weft_block_iq4_xs *b, int s)
{
    return (((b->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b->scales_h >> (2 * s)) & 3) << 4)) - 32;
}

/* Q2_K/Q3_K low 2 bits of element e (0..255) */
static inline int weft_q2_bits(const uint8_t qs[64], int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Q3_K's 3rd bit of element e (1: set, the value is q; 0: q - 4) */
static inline int weft_q3_hbit(const uint8_t hmask[32], int e)
{
    return (hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
}

#endif
