/* Dequantization and integer dot products of weft's block formats
 * (base/types.h), for any backend's device code (see prims.cuh).
 *
 * weft_dq<T>::at(row, i)   element i of a row of type T, as float, computed
 *                          with the same float operations in the same order
 *                          as base/quant.c's weft_dequantize_row (compile
 *                          without fma contraction for bit-equality).
 * weft_dq<T>::dot32(row, s, x)  dot of the row's elements [32s, 32s+32)
 *                          with one Q8_1 activation block x: integer dp4a
 *                          sums inside, scales applied once, as float.
 *                          (Q8_1: x = d * q; its s field is not used: sums of
 *                          q are recomputed exactly with dp4a.)
 * Rows must be 2-byte aligned; activation blocks 4-byte aligned. */
#ifndef WEFT_KC_DEQUANT_CUH
#define WEFT_KC_DEQUANT_CUH

#include "kernels-common/prims.cuh"

#include <stddef.h>

/* a block's size and a field's offset, from the layouts base/types.h
 * defines (and checks) for every backend: no literal byte counts here */
#define WEFT_BSZ(B) ((int)sizeof(struct weft_block_##B))
#define WEFT_BOFF(B, f) ((int)offsetof(struct weft_block_##B, f))

/* the activation block's 8 words of int8 values */
WEFT_DEV const int *weft_q8_words(const struct weft_block_q8_1 *x) { return (const int *)x->qs; }

/* exact sum of the 32 int8 values of x */
WEFT_DEV int weft_q8_sum(const int *xq)
{
    int s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) s = weft_dp4a(0x01010101, xq[k], s);
    return s;
}

WEFT_DEV void weft_k4_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <int T> struct weft_dq;

template <> struct weft_dq<WEFT_TYPE_F32> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i) { return ((const float *)row)[i]; }
};

template <> struct weft_dq<WEFT_TYPE_F16> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i) { return weft_h2f(((const uint16_t *)row)[i]); }
};

template <> struct weft_dq<WEFT_TYPE_BF16> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
    }
};

/* struct weft_block_q4_0 (18 bytes): d, qs[16]; x = (q - 8) * d; byte j: element j low, j+16 high */
template <> struct weft_dq<WEFT_TYPE_Q4_0> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK4_0) * WEFT_BSZ(q4_0);
        int j = (int)(i % WEFT_QK4_0);
        int q = j < 16 ? (b[WEFT_BOFF(q4_0, qs) + j] & 0xF) : (b[WEFT_BOFF(q4_0, qs) + j - 16] >> 4);
        return (float)(q - 8) * weft_ld_half(b);
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(q4_0);
        const int *xq = weft_q8_words(x);
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = weft_ld_u32_a2(b + WEFT_BOFF(q4_0, qs) + 4 * k);
            sumi = weft_dp4a((int)(w & 0x0F0F0F0Fu), xq[k], sumi);
            sumi = weft_dp4a((int)((w >> 4) & 0x0F0F0F0Fu), xq[k + 4], sumi);
        }
        return weft_ld_half(b) * weft_h2f(x->d) * (float)(sumi - 8 * weft_q8_sum(xq));
    }
};

/* struct weft_block_q4_1 (20 bytes): d, m, qs[16]; x = q * d + m */
template <> struct weft_dq<WEFT_TYPE_Q4_1> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK4_1) * WEFT_BSZ(q4_1);
        int j = (int)(i % WEFT_QK4_1);
        int q = j < 16 ? (b[WEFT_BOFF(q4_1, qs) + j] & 0xF) : (b[WEFT_BOFF(q4_1, qs) + j - 16] >> 4);
        return (float)q * weft_ld_half(b) + weft_ld_half(b + WEFT_BOFF(q4_1, m));
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(q4_1);
        const int *xq = weft_q8_words(x);
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = weft_ld_u32_a2(b + WEFT_BOFF(q4_1, qs) + 4 * k);
            sumi = weft_dp4a((int)(w & 0x0F0F0F0Fu), xq[k], sumi);
            sumi = weft_dp4a((int)((w >> 4) & 0x0F0F0F0Fu), xq[k + 4], sumi);
        }
        float d8 = weft_h2f(x->d);
        return weft_ld_half(b) * d8 * (float)sumi + weft_ld_half(b + WEFT_BOFF(q4_1, m)) * d8 * (float)weft_q8_sum(xq);
    }
};

/* bytes b[t] of word w, each ORed with bit (bit0 + t) of qh shifted to bit 4 */
WEFT_DEV int weft_or_5th_bits(uint32_t w, uint32_t qh, int bit0)
{
    uint32_t v = w;
#pragma unroll
    for (int t = 0; t < 4; t++) v |= ((qh >> (bit0 + t)) & 1u) << (8 * t + 4);
    return (int)v;
}

/* struct weft_block_q5_0 (22 bytes): d, qh[4], qs[16]; x = ((q | h << 4) - 16) * d */
template <> struct weft_dq<WEFT_TYPE_Q5_0> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK5_0) * WEFT_BSZ(q5_0);
        int j = (int)(i % WEFT_QK5_0);
        uint32_t qh = weft_ld_u32_a2(b + WEFT_BOFF(q5_0, qh));
        int q = j < 16 ? (b[WEFT_BOFF(q5_0, qs) + j] & 0xF) : (b[WEFT_BOFF(q5_0, qs) + j - 16] >> 4);
        q |= (int)((qh >> j) & 1) << 4;
        return (float)(q - 16) * weft_ld_half(b);
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(q5_0);
        const int *xq = weft_q8_words(x);
        uint32_t qh = weft_ld_u32_a2(b + WEFT_BOFF(q5_0, qh));
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = weft_ld_u32_a2(b + WEFT_BOFF(q5_0, qs) + 4 * k);
            sumi = weft_dp4a(weft_or_5th_bits(w & 0x0F0F0F0Fu, qh, 4 * k), xq[k], sumi);
            sumi = weft_dp4a(weft_or_5th_bits((w >> 4) & 0x0F0F0F0Fu, qh, 16 + 4 * k), xq[k + 4], sumi);
        }
        return weft_ld_half(b) * weft_h2f(x->d) * (float)(sumi - 16 * weft_q8_sum(xq));
    }
};

/* struct weft_block_q5_1 (24 bytes): d, m, qh[4], qs[16]; x = (q | h << 4) * d + m */
template <> struct weft_dq<WEFT_TYPE_Q5_1> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK5_1) * WEFT_BSZ(q5_1);
        int j = (int)(i % WEFT_QK5_1);
        uint32_t qh = weft_ld_u32_a2(b + WEFT_BOFF(q5_1, qh));
        int q = j < 16 ? (b[WEFT_BOFF(q5_1, qs) + j] & 0xF) : (b[WEFT_BOFF(q5_1, qs) + j - 16] >> 4);
        q |= (int)((qh >> j) & 1) << 4;
        return (float)q * weft_ld_half(b) + weft_ld_half(b + WEFT_BOFF(q5_1, m));
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(q5_1);
        const int *xq = weft_q8_words(x);
        uint32_t qh = weft_ld_u32_a2(b + WEFT_BOFF(q5_1, qh));
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = weft_ld_u32_a2(b + WEFT_BOFF(q5_1, qs) + 4 * k);
            sumi = weft_dp4a(weft_or_5th_bits(w & 0x0F0F0F0Fu, qh, 4 * k), xq[k], sumi);
            sumi = weft_dp4a(weft_or_5th_bits((w >> 4) & 0x0F0F0F0Fu, qh, 16 + 4 * k), xq[k + 4], sumi);
        }
        float d8 = weft_h2f(x->d);
        return weft_ld_half(b) * d8 * (float)sumi + weft_ld_half(b + WEFT_BOFF(q5_1, m)) * d8 * (float)weft_q8_sum(xq);
    }
};

/* struct weft_block_q8_0 (34 bytes): d, qs[32] int8; x = q * d */
template <> struct weft_dq<WEFT_TYPE_Q8_0> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK8_0) * WEFT_BSZ(q8_0);
        return (float)(int8_t)b[WEFT_BOFF(q8_0, qs) + i % WEFT_QK8_0] * weft_ld_half(b);
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(q8_0);
        const int *xq = weft_q8_words(x);
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) sumi = weft_dp4a((int)weft_ld_u32_a2(b + WEFT_BOFF(q8_0, qs) + 4 * k), xq[k], sumi);
        return weft_ld_half(b) * weft_h2f(x->d) * (float)sumi;
    }
};

/* struct weft_block_q4_k (144 bytes): d, dmin, scales[12], qs[128]; sub-block s of 32 uses
 * qs[32*(s/2) ...] low nibbles (s even) or high (s odd); x = d*sc*q - dmin*m */
template <> struct weft_dq<WEFT_TYPE_Q4_K> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_K) * WEFT_BSZ(q4_k);
        int e = (int)(i % WEFT_QK_K), s = e / 32, l = e % 32, sc, m;
        weft_k4_scale_min(s, b + WEFT_BOFF(q4_k, scales), &sc, &m);
        int q = (b[WEFT_BOFF(q4_k, qs) + 32 * (s / 2) + l] >> (4 * (s & 1))) & 0xF;
        float d1 = weft_ld_half(b) * (float)sc, m1 = weft_ld_half(b + WEFT_BOFF(q4_k, dmin)) * (float)m;
        return d1 * (float)q - m1;
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s32, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)(s32 / 8) * WEFT_BSZ(q4_k);
        const int s = s32 % 8, sh = 4 * (s & 1);
        const int *xq = weft_q8_words(x);
        int sc, m;
        weft_k4_scale_min(s, b + WEFT_BOFF(q4_k, scales), &sc, &m);
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t w = weft_ld_u32_a2(b + WEFT_BOFF(q4_k, qs) + 32 * (s / 2) + 4 * k);
            sumi = weft_dp4a((int)((w >> sh) & 0x0F0F0F0Fu), xq[k], sumi);
        }
        float d8 = weft_h2f(x->d);
        return weft_ld_half(b) * (float)sc * d8 * (float)sumi -
               weft_ld_half(b + WEFT_BOFF(q4_k, dmin)) * (float)m * d8 * (float)weft_q8_sum(xq);
    }
};

/* struct weft_block_q5_k (176 bytes): d, dmin, scales[12], qh[32], qs[128]; as Q4_K plus bit s of
 * qh[l] as the 5th bit of element l of sub-block s */
template <> struct weft_dq<WEFT_TYPE_Q5_K> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_K) * WEFT_BSZ(q5_k);
        int e = (int)(i % WEFT_QK_K), s = e / 32, l = e % 32, sc, m;
        weft_k4_scale_min(s, b + WEFT_BOFF(q5_k, scales), &sc, &m);
        int q = (b[WEFT_BOFF(q5_k, qs) + 32 * (s / 2) + l] >> (4 * (s & 1))) & 0xF;
        q += (b[WEFT_BOFF(q5_k, qh) + l] >> s) & 1 ? 16 : 0;
        float d1 = weft_ld_half(b) * (float)sc, m1 = weft_ld_half(b + WEFT_BOFF(q5_k, dmin)) * (float)m;
        return d1 * (float)q - m1;
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s32, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)(s32 / 8) * WEFT_BSZ(q5_k);
        const int s = s32 % 8, sh = 4 * (s & 1);
        const int *xq = weft_q8_words(x);
        int sc, m;
        weft_k4_scale_min(s, b + WEFT_BOFF(q5_k, scales), &sc, &m);
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uint32_t lo = (weft_ld_u32_a2(b + WEFT_BOFF(q5_k, qs) + 32 * (s / 2) + 4 * k) >> sh) & 0x0F0F0F0Fu;
            uint32_t hi = (weft_ld_u32_a2(b + WEFT_BOFF(q5_k, qh) + 4 * k) >> s) & 0x01010101u;
            sumi = weft_dp4a((int)(lo | (hi << 4)), xq[k], sumi);
        }
        float d8 = weft_h2f(x->d);
        return weft_ld_half(b) * (float)sc * d8 * (float)sumi -
               weft_ld_half(b + WEFT_BOFF(q5_k, dmin)) * (float)m * d8 * (float)weft_q8_sum(xq);
    }
};

/* struct weft_block_q6_k (210 bytes): ql[128], qh[64], scales[16] int8, d. Element 128h + 32k + l:
 * low 4 bits from ql[64h + 32(k&1) + l] (low nibble for k < 2, high else),
 * high 2 bits = bits 2k, 2k+1 of qh[32h + l]; x = d * scales[e/16] * (q - 32) */
template <> struct weft_dq<WEFT_TYPE_Q6_K> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_K) * WEFT_BSZ(q6_k);
        int e = (int)(i % WEFT_QK_K), h = e / 128, k = (e % 128) / 32, l = e % 32;
        int lo = b[WEFT_BOFF(q6_k, ql) + 64 * h + 32 * (k & 1) + l];
        lo = k < 2 ? (lo & 0xF) : (lo >> 4);
        int hi = (b[WEFT_BOFF(q6_k, qh) + 32 * h + l] >> (2 * k)) & 3;
        int a = (lo | (hi << 4)) - 32;
        return weft_ld_half(b + WEFT_BOFF(q6_k, d)) * (float)(int8_t)b[WEFT_BOFF(q6_k, scales) + e / 16] * (float)a;
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s32, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)(s32 / 8) * WEFT_BSZ(q6_k);
        const int s = s32 % 8, h = s / 4, k = s % 4;
        const int *xq = weft_q8_words(x);
        int sumi[2] = {0, 0}, sumq[2] = {0, 0};
#pragma unroll
        for (int t = 0; t < 8; t++) {
            uint32_t wl = weft_ld_u32_a2(b + WEFT_BOFF(q6_k, ql) + 64 * h + 32 * (k & 1) + 4 * t);
            uint32_t lo = (k < 2 ? wl : wl >> 4) & 0x0F0F0F0Fu;
            uint32_t hi = (weft_ld_u32_a2(b + WEFT_BOFF(q6_k, qh) + 32 * h + 4 * t) >> (2 * k)) & 0x03030303u;
            sumi[t / 4] = weft_dp4a((int)(lo | (hi << 4)), xq[t], sumi[t / 4]);
            sumq[t / 4] = weft_dp4a(0x01010101, xq[t], sumq[t / 4]);
        }
        const int8_t *sc = (const int8_t *)(b + WEFT_BOFF(q6_k, scales) + 8 * h + 2 * k);
        int part = sc[0] * (sumi[0] - 32 * sumq[0]) + sc[1] * (sumi[1] - 32 * sumq[1]);
        return weft_ld_half(b + WEFT_BOFF(q6_k, d)) * weft_h2f(x->d) * (float)part;
    }
};

/* Quantize 32 consecutive floats (one per lane of a 32-lane group) into a
 * Q8_1 block: d = amax/127, q = round-to-nearest-even(x/d), s = d * sum(q).
 * Every lane of the group must call it; lane 0 writes d and s. */
WEFT_DEV void weft_quantize_q8_1_group(float v, int lane, struct weft_block_q8_1 *out)
{
    float amax = weft_group_max<32>(fabsf(v));
    float d = amax / 127.0f;
    int q = amax != 0.0f ? __float2int_rn(v / d) : 0;
    out->qs[lane] = (int8_t)q;
    int sum = weft_group_sum_i<32>(q);
    if (lane == 0) {
        out->d = weft_f2h(d);
        out->s = weft_f2h(d * (float)sum);
    }
}

#endif
