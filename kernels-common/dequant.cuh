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
 * Rows must be 2-byte aligned (MXFP4's, of 17-byte blocks, may start at any
 * byte: it loads bytes); activation blocks 4-byte aligned. */
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

/* ---- 16-entry int8 code books (IQ4_NL/IQ4_XS, MXFP4), looked up with byte permutes ---- */

/* the 16 entries as 4 little-endian words (entries 4k..4k+3 in word k) */
struct weft_cb16 {
    uint32_t w[4];
};

WEFT_DEV uint32_t weft_pack_i8x4(int a, int b, int c, int d)
{
    return (uint32_t)(uint8_t)a | ((uint32_t)(uint8_t)b << 8) | ((uint32_t)(uint8_t)c << 16) |
           ((uint32_t)(uint8_t)d << 24);
}

/* from base/types.h's definitions; constant indices, so the words fold to immediates */
#define WEFT_CB16_FROM_(KV)                                                                        \
    {                                                                                              \
        const int8_t v[16] = KV;                                                                   \
        weft_cb16 cb = {{weft_pack_i8x4(v[0], v[1], v[2], v[3]), weft_pack_i8x4(v[4], v[5], v[6], v[7]), \
                         weft_pack_i8x4(v[8], v[9], v[10], v[11]),                                 \
                         weft_pack_i8x4(v[12], v[13], v[14], v[15])}};                             \
        return cb;                                                                                 \
    }
WEFT_DEV weft_cb16 weft_cb_iq4nl() WEFT_CB16_FROM_(WEFT_KVALUES_IQ4NL)
WEFT_DEV weft_cb16 weft_cb_mxfp4() WEFT_CB16_FROM_(WEFT_KVALUES_MXFP4)
#undef WEFT_CB16_FROM_

/* entry q (0..15) of the code book */
WEFT_DEV int weft_cb16_at(const weft_cb16 &cb, int q)
{
    const uint32_t a = weft_byte_perm(cb.w[0], cb.w[1], (uint32_t)q), b = weft_byte_perm(cb.w[2], cb.w[3], (uint32_t)q);
    return (int)(int8_t)(uint8_t)(q & 8 ? b : a);
}

/* The entries of the 8 nibbles of q4 (byte t: low nibble n_2t, high n_2t+1):
 * *lo = those of the low nibbles as an int8 word (entry of n_2t in byte t),
 * *hi = those of the high nibbles. Per half of q4, two permutes pick each
 * nibble's entry among entries 0..7 and among 8..15 (its low 3 bits), a third
 * picks between them by the nibble's bit 3; two more deinterleave. */
WEFT_DEV void weft_cb16_lut8(const weft_cb16 &cb, uint32_t q4, int *lo, int *hi)
{
    const uint32_t pick = 0x32103210u | ((q4 & 0x88888888u) >> 1);
    uint32_t v[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t s = q4 >> (16 * h);
        const uint32_t a = weft_byte_perm(cb.w[0], cb.w[1], s), b = weft_byte_perm(cb.w[2], cb.w[3], s);
        v[h] = weft_byte_perm(a, b, pick >> (16 * h));
    }
    *lo = (int)weft_byte_perm(v[0], v[1], 0x6420);
    *hi = (int)weft_byte_perm(v[0], v[1], 0x7531);
}

/* struct weft_block_iq4_nl (18 bytes): d, qs[16]; x = d * kvalues_iq4nl[q]; nibbles as Q4_0 */
template <> struct weft_dq<WEFT_TYPE_IQ4_NL> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK4_NL) * WEFT_BSZ(iq4_nl);
        int j = (int)(i % WEFT_QK4_NL);
        int q = j < 16 ? (b[WEFT_BOFF(iq4_nl, qs) + j] & 0xF) : (b[WEFT_BOFF(iq4_nl, qs) + j - 16] >> 4);
        return weft_ld_half(b) * (float)weft_cb16_at(weft_cb_iq4nl(), q);
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(iq4_nl);
        const int *xq = weft_q8_words(x);
        const weft_cb16 cb = weft_cb_iq4nl();
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int lo, hi;
            weft_cb16_lut8(cb, weft_ld_u32_a2(b + WEFT_BOFF(iq4_nl, qs) + 4 * k), &lo, &hi);
            sumi = weft_dp4a(lo, xq[k], sumi);
            sumi = weft_dp4a(hi, xq[k + 4], sumi);
        }
        return weft_ld_half(b) * weft_h2f(x->d) * (float)sumi;
    }
};

/* IQ4_XS: sub-block s's six-bit scale, minus 32 (base/quant_blocks.h's weft_iq4_xs_scale) */
WEFT_DEV int weft_iq4_xs_scale(const uint8_t *b, int s)
{
    const uint32_t h = (uint32_t)b[WEFT_BOFF(iq4_xs, scales_h)] | ((uint32_t)b[WEFT_BOFF(iq4_xs, scales_h) + 1] << 8);
    const int lo = (b[WEFT_BOFF(iq4_xs, scales_l) + s / 2] >> (4 * (s % 2))) & 0xF;
    return (lo | (int)((h >> (2 * s)) & 3) << 4) - 32;
}

/* struct weft_block_iq4_xs (136 bytes): d, scales_h, scales_l[4], qs[128]; sub-block s of 32:
 * x = (d * sc) * kvalues_iq4nl[q], its nibbles in qs[16s .. 16s+16) as Q4_0's */
template <> struct weft_dq<WEFT_TYPE_IQ4_XS> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_K) * WEFT_BSZ(iq4_xs);
        int e = (int)(i % WEFT_QK_K), s = e / 32, j = e % 32;
        const uint8_t *qs = b + WEFT_BOFF(iq4_xs, qs) + 16 * s;
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        float dl = weft_ld_half(b) * (float)weft_iq4_xs_scale(b, s);
        return dl * (float)weft_cb16_at(weft_cb_iq4nl(), q);
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s32, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)(s32 / 8) * WEFT_BSZ(iq4_xs);
        const int s = s32 % 8;
        const int *xq = weft_q8_words(x);
        const weft_cb16 cb = weft_cb_iq4nl();
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int lo, hi;
            weft_cb16_lut8(cb, weft_ld_u32_a2(b + WEFT_BOFF(iq4_xs, qs) + 16 * s + 4 * k), &lo, &hi);
            sumi = weft_dp4a(lo, xq[k], sumi);
            sumi = weft_dp4a(hi, xq[k + 4], sumi);
        }
        return weft_ld_half(b) * (float)weft_iq4_xs_scale(b, s) * weft_h2f(x->d) * (float)sumi;
    }
};

/* MXFP4's E8M0 scale halved, 2^(e - 128) (base/types.h's weft_e8m0_to_f32_half) */
WEFT_DEV float weft_e8m0_half(uint8_t e)
{
    return __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* struct weft_block_mxfp4 (17 bytes, so any alignment: byte loads): e, qs[16];
 * x = kvalues_mxfp4[q] * 2^(e - 128); nibbles as Q4_0 */
template <> struct weft_dq<WEFT_TYPE_MXFP4> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_MXFP4) * WEFT_BSZ(mxfp4);
        int j = (int)(i % WEFT_QK_MXFP4);
        int q = j < 16 ? (b[WEFT_BOFF(mxfp4, qs) + j] & 0xF) : (b[WEFT_BOFF(mxfp4, qs) + j - 16] >> 4);
        return (float)weft_cb16_at(weft_cb_mxfp4(), q) * weft_e8m0_half(b[WEFT_BOFF(mxfp4, e)]);
    }
    static WEFT_DEV float dot32(const uint8_t *row, int s, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)s * WEFT_BSZ(mxfp4);
        const int *xq = weft_q8_words(x);
        const weft_cb16 cb = weft_cb_mxfp4();
        int sumi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int lo, hi;
            weft_cb16_lut8(cb, weft_ld_u32_a1(b + WEFT_BOFF(mxfp4, qs) + 4 * k), &lo, &hi);
            sumi = weft_dp4a(lo, xq[k], sumi);
            sumi = weft_dp4a(hi, xq[k + 4], sumi);
        }
        /* the power of two last: d8 * sumi is a normal float, and a small 2^(e - 128) scales it
         * into the subnormals without first rounding d8 there */
        return weft_h2f(x->d) * (float)sumi * weft_e8m0_half(b[WEFT_BOFF(mxfp4, e)]);
    }
};

/* struct weft_block_q2_k (84 bytes): scales[16], qs[64], d, dmin; 16 sub-blocks of 16.
 * Element 128c + 32k + l: q = bits 2k..2k+1 of qs[32c + l];
 * x = (d * (sc & 0xF)) * q - dmin * (sc >> 4), sc = scales[e / 16] */
template <> struct weft_dq<WEFT_TYPE_Q2_K> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_K) * WEFT_BSZ(q2_k);
        int e = (int)(i % WEFT_QK_K), c = e / 128, k = (e % 128) / 32, l = e % 32;
        int sc = b[WEFT_BOFF(q2_k, scales) + e / 16];
        int q = (b[WEFT_BOFF(q2_k, qs) + 32 * c + l] >> (2 * k)) & 3;
        float dl = weft_ld_half(b + WEFT_BOFF(q2_k, d)) * (float)(sc & 0xF);
        float ml = weft_ld_half(b + WEFT_BOFF(q2_k, dmin)) * (float)(sc >> 4);
        return dl * (float)q - ml;
    }
    /* sub-block s of 32 = 16-element sub-blocks 2s, 2s+1, each with its scale and min */
    static WEFT_DEV float dot32(const uint8_t *row, int s32, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)(s32 / 8) * WEFT_BSZ(q2_k);
        const int s = s32 % 8, c = s / 4, k = s % 4;
        const int *xq = weft_q8_words(x);
        int sumi[2] = {0, 0}, sumq[2] = {0, 0};
#pragma unroll
        for (int t = 0; t < 8; t++) {
            uint32_t q = (weft_ld_u32_a2(b + WEFT_BOFF(q2_k, qs) + 32 * c + 4 * t) >> (2 * k)) & 0x03030303u;
            sumi[t / 4] = weft_dp4a((int)q, xq[t], sumi[t / 4]);
            sumq[t / 4] = weft_dp4a(0x01010101, xq[t], sumq[t / 4]);
        }
        const uint8_t *sc = b + WEFT_BOFF(q2_k, scales) + 2 * s;
        int part = (sc[0] & 0xF) * sumi[0] + (sc[1] & 0xF) * sumi[1];
        int mins = (sc[0] >> 4) * sumq[0] + (sc[1] >> 4) * sumq[1];
        float d8 = weft_h2f(x->d);
        return weft_ld_half(b + WEFT_BOFF(q2_k, d)) * d8 * (float)part -
               weft_ld_half(b + WEFT_BOFF(q2_k, dmin)) * d8 * (float)mins;
    }
};

/* Q3_K: the six-bit scale of sub-block s (0..15), minus 32 (base/quant_blocks.h's weft_q3_k_scales) */
WEFT_DEV int weft_q3_k_scale(const uint8_t *q, int s)
{
    int lo = (q[s % 8] >> (4 * (s / 8))) & 0xF;
    int hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* struct weft_block_q3_k (110 bytes): hmask[32], qs[64], scales[12], d; 16 sub-blocks of 16.
 * Element 128c + 32k + l: low 2 bits as Q2_K's, 3rd bit = bit 4c + k of hmask[l];
 * x = (d * sc) * (q - 4 * !hbit) */
template <> struct weft_dq<WEFT_TYPE_Q3_K> {
    static WEFT_DEV float at(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / WEFT_QK_K) * WEFT_BSZ(q3_k);
        int e = (int)(i % WEFT_QK_K), c = e / 128, k = (e % 128) / 32, l = e % 32;
        int q = (b[WEFT_BOFF(q3_k, qs) + 32 * c + l] >> (2 * k)) & 3;
        int h = (b[WEFT_BOFF(q3_k, hmask) + l] >> (4 * c + k)) & 1;
        float dl = weft_ld_half(b + WEFT_BOFF(q3_k, d)) * (float)weft_q3_k_scale(b + WEFT_BOFF(q3_k, scales), e / 16);
        return dl * (float)(q - (h ? 0 : 4));
    }
    /* bytes q | hbit << 2 (0..7) in the dp4a, minus 4 * the sum of x per 16-element sub-block */
    static WEFT_DEV float dot32(const uint8_t *row, int s32, const struct weft_block_q8_1 *x)
    {
        const uint8_t *b = row + (size_t)(s32 / 8) * WEFT_BSZ(q3_k);
        const int s = s32 % 8, c = s / 4, k = s % 4;
        const int *xq = weft_q8_words(x);
        int sumi[2] = {0, 0}, sumq[2] = {0, 0};
#pragma unroll
        for (int t = 0; t < 8; t++) {
            uint32_t lo = (weft_ld_u32_a2(b + WEFT_BOFF(q3_k, qs) + 32 * c + 4 * t) >> (2 * k)) & 0x03030303u;
            uint32_t hi = (weft_ld_u32_a2(b + WEFT_BOFF(q3_k, hmask) + 4 * t) >> (4 * c + k)) & 0x01010101u;
            sumi[t / 4] = weft_dp4a((int)(lo | (hi << 2)), xq[t], sumi[t / 4]);
            sumq[t / 4] = weft_dp4a(0x01010101, xq[t], sumq[t / 4]);
        }
        const uint8_t *scales = b + WEFT_BOFF(q3_k, scales);
        int part = weft_q3_k_scale(scales, 2 * s) * (sumi[0] - 4 * sumq[0]) +
                   weft_q3_k_scale(scales, 2 * s + 1) * (sumi[1] - 4 * sumq[1]);
        return weft_ld_half(b + WEFT_BOFF(q3_k, d)) * weft_h2f(x->d) * (float)part;
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
