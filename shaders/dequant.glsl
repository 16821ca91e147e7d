/* Weight dequantization for the Vulkan shaders: ggml's block layouts,
 * byte-exact with base/types.h, whose structs give every size and offset
 * here (weft_blocks.glsl, generated at build time by
 * shaders/gen_block_layout.c).
 *
 * The including shader
 *   - #defines DQ_WORD(i): uint word i (32-bit, little-endian) of the
 *     readonly weight buffer,
 *   - #defines exactly one of TYPE_F32 TYPE_F16 TYPE_BF16 TYPE_Q8_0
 *     TYPE_Q4_0 TYPE_Q4_1 TYPE_Q5_0 TYPE_Q5_1 TYPE_Q4_K TYPE_Q5_K TYPE_Q6_K
 *     TYPE_Q2_K TYPE_Q3_K TYPE_IQ4_NL TYPE_IQ4_XS TYPE_MXFP4,
 * (DQ_WORD's expansion must not use the short local names below: b, c, d, e,
 * i, j, k, l, g, h, n, s, t, u, q, row, sm, sc, lo, hi, hb, hu, sh, w0, w1; a
 * buffer named e.g. `data_w` is safe), and gets
 *   DQ_QK, DQ_QB            elements and bytes per block,
 *   float dq_get(row, i)    element i of a row starting at byte offset `row`
 *                           (any 2-byte-aligned offset; MXFP4: any offset),
 *   vec4 dq_get4(row, i)    elements i..i+3, i % 4 == 0 (never crosses a
 *                           block: every block size is a multiple of 4).
 * With DQ_SPLIT_MIN defined, Q4_1 and Q5_1 give d * q only, and
 *   float dq_min(row, blk)  the block's m, for the matmuls, which add m times
 *                           the activation block's f16 sum as the CPU's
 *                           Q8_1 dot product does.
 *
 * Every block size in bytes but MXFP4's (17) is even, so with a
 * 2-byte-aligned row every field read below (u16 scales, u32 groups of
 * quants) is 2-byte-aligned too; dq_u32 joins two words when it straddles
 * them. MXFP4 rows start at any byte: its blocks are read with dq_u8 and
 * dq_u32b (any offset), never a u16 or an aligned u32.
 * The code books of IQ4_NL/IQ4_XS and MXFP4 come from base/types.h's
 * WEFT_KVALUES_* (weft_blocks.glsl). */
#ifndef WEFT_DEQUANT_GLSL
#define WEFT_DEQUANT_GLSL

#include "weft_blocks.glsl"

#ifndef DQ_WORD
#error "define DQ_WORD(i) before including dequant.glsl"
#endif

uint dq_u8(uint b) { return (DQ_WORD(b >> 2) >> ((b & 3u) * 8u)) & 0xffu; }
/* b even */
uint dq_u16(uint b) { return (DQ_WORD(b >> 2) >> ((b & 2u) * 8u)) & 0xffffu; }
/* b even */
uint dq_u32(uint b)
{
    uint dq_w = b >> 2;
    if ((b & 2u) == 0u) return DQ_WORD(dq_w);
    return (DQ_WORD(dq_w) >> 16) | (DQ_WORD(dq_w + 1u) << 16);
}
/* any b: the bytes b..b+3, reading only the words that hold them */
uint dq_u32b(uint b)
{
    uint sh = (b & 3u) * 8u;
    uint w0 = DQ_WORD(b >> 2);
    if (sh == 0u) return w0;
    uint w1 = DQ_WORD((b + 3u) >> 2);
    return (w0 >> sh) | (w1 << (32u - sh));
}
float dq_f16(uint b) { return unpackHalf2x16(dq_u16(b)).x; }
int dq_i8(uint b) { return bitfieldExtract(int(dq_u8(b)), 0, 8); }
/* the four bytes of u as signed / unsigned values, byte 0 first */
vec4 dq_i8x4(uint u)
{
    int s = int(u);
    return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                bitfieldExtract(s, 24, 8));
}
/* (u >> shift) & 15 of each byte */
vec4 dq_nib4(uint u, uint shift)
{
    u = (u >> shift) & 0x0f0f0f0fu;
    return vec4(u & 0xffu, (u >> 8) & 0xffu, (u >> 16) & 0xffu, u >> 24);
}
/* the four bytes of u as unsigned values, byte 0 first */
vec4 dq_byte4(uint u) { return vec4(u & 0xffu, (u >> 8) & 0xffu, (u >> 16) & 0xffu, u >> 24); }
/* bit `bit` of each byte of u */
vec4 dq_bit4(uint u, uint bit)
{
    u = (u >> bit) & 0x01010101u;
    return vec4(u & 0xffu, (u >> 8) & 0xffu, (u >> 16) & 0xffu, u >> 24);
}

/* K-quants: 6-bit scale and min of sub-block j (0..7) from scales[12] at byte b
 * (ggml's get_scale_min_k4) */
vec2 dq_scale_min_k4(uint b, uint j)
{
    if (j < 4u) return vec2(dq_u8(b + j) & 63u, dq_u8(b + j + 4u) & 63u);
    uint q4 = dq_u8(b + j + 4u);
    return vec2((q4 & 0xfu) | ((dq_u8(b + j - 4u) >> 6) << 4), (q4 >> 4) | ((dq_u8(b + j) >> 6) << 4));
}

/* the non-linear code books (base/types.h), indexed by a 4-bit code */
#if defined(TYPE_IQ4_NL) || defined(TYPE_IQ4_XS)
const float dq_kv[16] = WEFT_KVALUES_IQ4NL;
#define DQ_HAS_KV 1
#elif defined(TYPE_MXFP4)
const float dq_kv[16] = WEFT_KVALUES_MXFP4;
#define DQ_HAS_KV 1
#endif
#ifdef DQ_HAS_KV
/* the code book's values for the four bytes of u (each 0..15) */
vec4 dq_kv4(uint u) { return vec4(dq_kv[u & 0xffu], dq_kv[(u >> 8) & 0xffu], dq_kv[(u >> 16) & 0xffu], dq_kv[u >> 24]); }
#endif

#if defined(TYPE_F32)
#define DQ_QK 1u
#define DQ_QB 4u
float dq_get(uint row, uint i) { return uintBitsToFloat(dq_u32(row + 4u * i)); }
vec4 dq_get4(uint row, uint i)
{
    uint b = row + 4u * i;
    return uintBitsToFloat(uvec4(dq_u32(b), dq_u32(b + 4u), dq_u32(b + 8u), dq_u32(b + 12u)));
}

#elif defined(TYPE_F16)
#define DQ_QK 1u
#define DQ_QB 2u
float dq_get(uint row, uint i) { return dq_f16(row + 2u * i); }
vec4 dq_get4(uint row, uint i)
{
    uint b = row + 2u * i;
    return vec4(unpackHalf2x16(dq_u32(b)), unpackHalf2x16(dq_u32(b + 4u)));
}

#elif defined(TYPE_BF16)
#define DQ_QK 1u
#define DQ_QB 2u
float dq_get(uint row, uint i) { return uintBitsToFloat(dq_u16(row + 2u * i) << 16); }
vec4 dq_get4(uint row, uint i)
{
    uint b = row + 2u * i, u0 = dq_u32(b), u1 = dq_u32(b + 4u);
    return uintBitsToFloat(uvec4(u0 << 16, u0 & 0xffff0000u, u1 << 16, u1 & 0xffff0000u));
}

#elif defined(TYPE_Q8_0)
/* d: f16, qs: int8[32]; x = d * q */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_Q8_0
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB;
    return dq_f16(b) * float(dq_i8(b + WEFT_BOFF_Q8_0_QS + i % DQ_QK));
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB;
    return dq_f16(b) * dq_i8x4(dq_u32(b + WEFT_BOFF_Q8_0_QS + i % DQ_QK));
}

#elif defined(TYPE_Q4_0)
/* d: f16, qs[16]: element j < 16 in the low nibble of qs[j], j >= 16 in the
 * high nibble of qs[j - 16]; x = d * (q - 8) */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_Q4_0
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint q = (dq_u8(b + WEFT_BOFF_Q4_0_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 15u;
    return dq_f16(b) * (float(q) - 8.0);
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    return dq_f16(b) * (dq_nib4(dq_u32(b + WEFT_BOFF_Q4_0_QS + (j & 15u)), (j & 16u) >> 2) - 8.0);
}

#elif defined(TYPE_Q4_1)
/* d, m: f16, qs[16] as Q4_0; x = d * q + m */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_Q4_1
#ifdef DQ_SPLIT_MIN
#define DQ_M(b) 0.0
float dq_min(uint row, uint blk) { return dq_f16(row + blk * DQ_QB + WEFT_BOFF_Q4_1_M); }
#else
#define DQ_M(b) dq_f16((b) + WEFT_BOFF_Q4_1_M)
#endif
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint q = (dq_u8(b + WEFT_BOFF_Q4_1_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 15u;
    return dq_f16(b) * float(q) + DQ_M(b);
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    return dq_f16(b) * dq_nib4(dq_u32(b + WEFT_BOFF_Q4_1_QS + (j & 15u)), (j & 16u) >> 2) + DQ_M(b);
}

#elif defined(TYPE_Q5_0)
/* d: f16, qh: u32 (bit j = 5th bit of element j), qs[16] as Q4_0;
 * x = d * (q - 16) */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_Q5_0
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint q = ((dq_u8(b + WEFT_BOFF_Q5_0_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 15u) | (((dq_u32(b + WEFT_BOFF_Q5_0_QH) >> j) & 1u) << 4);
    return dq_f16(b) * (float(q) - 16.0);
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint hb = (dq_u32(b + WEFT_BOFF_Q5_0_QH) >> j) & 15u; /* 5th bits of j..j+3 */
    vec4 h = vec4(hb & 1u, (hb >> 1) & 1u, (hb >> 2) & 1u, hb >> 3) * 16.0;
    return dq_f16(b) * (dq_nib4(dq_u32(b + WEFT_BOFF_Q5_0_QS + (j & 15u)), (j & 16u) >> 2) + h - 16.0);
}

#elif defined(TYPE_Q5_1)
/* d, m: f16, qh: u32, qs[16]; x = d * q + m */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_Q5_1
#ifdef DQ_SPLIT_MIN
#define DQ_M(b) 0.0
float dq_min(uint row, uint blk) { return dq_f16(row + blk * DQ_QB + WEFT_BOFF_Q5_1_M); }
#else
#define DQ_M(b) dq_f16((b) + WEFT_BOFF_Q5_1_M)
#endif
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint q = ((dq_u8(b + WEFT_BOFF_Q5_1_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 15u) | (((dq_u32(b + WEFT_BOFF_Q5_1_QH) >> j) & 1u) << 4);
    return dq_f16(b) * float(q) + DQ_M(b);
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint hb = (dq_u32(b + WEFT_BOFF_Q5_1_QH) >> j) & 15u;
    vec4 h = vec4(hb & 1u, (hb >> 1) & 1u, (hb >> 2) & 1u, hb >> 3) * 16.0;
    return dq_f16(b) * (dq_nib4(dq_u32(b + WEFT_BOFF_Q5_1_QS + (j & 15u)), (j & 16u) >> 2) + h) + DQ_M(b);
}

#elif defined(TYPE_Q4_K)
/* d, dmin: f16, scales[12], qs[128]. Element j: group g = j/64, half
 * h = (j/32)&1, l = j%32: nibble h of qs[32g + l], sub-block 2g + h;
 * x = d * sc * q - dmin * m */
#define DQ_QK WEFT_QKK
#define DQ_QB WEFT_BSZ_Q4_K
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, g = j / 64u, h = (j / 32u) & 1u, l = j % 32u;
    vec2 sm = dq_scale_min_k4(b + WEFT_BOFF_Q4_K_SCALES, 2u * g + h);
    uint q = (dq_u8(b + WEFT_BOFF_Q4_K_QS + 32u * g + l) >> (4u * h)) & 15u;
    return dq_f16(b) * sm.x * float(q) - dq_f16(b + WEFT_BOFF_Q4_K_DMIN) * sm.y;
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, g = j / 64u, h = (j / 32u) & 1u, l = j % 32u;
    vec2 sm = dq_scale_min_k4(b + WEFT_BOFF_Q4_K_SCALES, 2u * g + h);
    return dq_f16(b) * sm.x * dq_nib4(dq_u32(b + WEFT_BOFF_Q4_K_QS + 32u * g + l), 4u * h) - dq_f16(b + WEFT_BOFF_Q4_K_DMIN) * sm.y;
}

#elif defined(TYPE_Q5_K)
/* d, dmin: f16, scales[12], qh[32], qs[128]: as Q4_K, the 5th bit of
 * element j is bit 2g + h of qh[l] */
#define DQ_QK WEFT_QKK
#define DQ_QB WEFT_BSZ_Q5_K
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, g = j / 64u, h = (j / 32u) & 1u, l = j % 32u;
    vec2 sm = dq_scale_min_k4(b + WEFT_BOFF_Q5_K_SCALES, 2u * g + h);
    uint q = ((dq_u8(b + WEFT_BOFF_Q5_K_QS + 32u * g + l) >> (4u * h)) & 15u) | (((dq_u8(b + WEFT_BOFF_Q5_K_QH + l) >> (2u * g + h)) & 1u) << 4);
    return dq_f16(b) * sm.x * float(q) - dq_f16(b + WEFT_BOFF_Q5_K_DMIN) * sm.y;
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, g = j / 64u, h = (j / 32u) & 1u, l = j % 32u;
    vec2 sm = dq_scale_min_k4(b + WEFT_BOFF_Q5_K_SCALES, 2u * g + h);
    vec4 q = dq_nib4(dq_u32(b + WEFT_BOFF_Q5_K_QS + 32u * g + l), 4u * h) + 16.0 * dq_bit4(dq_u32(b + WEFT_BOFF_Q5_K_QH + l), 2u * g + h);
    return dq_f16(b) * sm.x * q - dq_f16(b + WEFT_BOFF_Q5_K_DMIN) * sm.y;
}

#elif defined(TYPE_Q6_K)
/* ql[128], qh[64], scales: int8[16], d: f16. Element j: n = j/128,
 * quarter t = (j%128)/32, l = j%32: low 4 bits in nibble t>>1 of
 * ql[64n + 32(t&1) + l], high 2 bits at bit 2t of qh[32n + l], scale
 * scales[8n + 2t + l/16]; x = d * sc * (q - 32) */
#define DQ_QK WEFT_QKK
#define DQ_QB WEFT_BSZ_Q6_K
#ifndef WEFT_Q6_K_QL_FIRST
#error "dequant.glsl reads Q6_K's ql at the block's start"
#endif
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, n = j / 128u, t = (j % 128u) / 32u, l = j % 32u;
    uint lo = (dq_u8(b + 64u * n + 32u * (t & 1u) + l) >> (4u * (t >> 1))) & 15u;
    uint hi = (dq_u8(b + WEFT_BOFF_Q6_K_QH + 32u * n + l) >> (2u * t)) & 3u;
    float sc = float(dq_i8(b + WEFT_BOFF_Q6_K_SCALES + 8u * n + 2u * t + l / 16u));
    return dq_f16(b + WEFT_BOFF_Q6_K_D) * sc * (float(lo | (hi << 4)) - 32.0);
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, n = j / 128u, t = (j % 128u) / 32u, l = j % 32u;
    vec4 lo = dq_nib4(dq_u32(b + 64u * n + 32u * (t & 1u) + l), 4u * (t >> 1));
    uint hu = (dq_u32(b + WEFT_BOFF_Q6_K_QH + 32u * n + l) >> (2u * t)) & 0x03030303u;
    vec4 hi = vec4(hu & 0xffu, (hu >> 8) & 0xffu, (hu >> 16) & 0xffu, hu >> 24);
    float sc = float(dq_i8(b + WEFT_BOFF_Q6_K_SCALES + 8u * n + 2u * t + l / 16u));
    return dq_f16(b + WEFT_BOFF_Q6_K_D) * sc * (lo + 16.0 * hi - 32.0);
}

#elif defined(TYPE_Q2_K)
/* scales[16] (sub-block j/16: scale in the low nibble, min in the high),
 * qs[64], d, dmin: f16. Element j: c = j/128, k = (j%128)/32, l = j%32: bits
 * 2k..2k+1 of qs[32c + l] (weft_q2_bits); x = (d * sc) * q - dmin * m */
#define DQ_QK WEFT_QKK
#define DQ_QB WEFT_BSZ_Q2_K
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, c = j / 128u, k = (j % 128u) / 32u, l = j % 32u;
    uint sc = dq_u8(b + WEFT_BOFF_Q2_K_SCALES + j / 16u);
    uint q = (dq_u8(b + WEFT_BOFF_Q2_K_QS + 32u * c + l) >> (2u * k)) & 3u;
    return dq_f16(b + WEFT_BOFF_Q2_K_D) * float(sc & 15u) * float(q) - dq_f16(b + WEFT_BOFF_Q2_K_DMIN) * float(sc >> 4);
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, c = j / 128u, k = (j % 128u) / 32u, l = j % 32u;
    uint sc = dq_u8(b + WEFT_BOFF_Q2_K_SCALES + j / 16u);
    vec4 q = dq_byte4((dq_u32(b + WEFT_BOFF_Q2_K_QS + 32u * c + l) >> (2u * k)) & 0x03030303u);
    return dq_f16(b + WEFT_BOFF_Q2_K_D) * float(sc & 15u) * q - dq_f16(b + WEFT_BOFF_Q2_K_DMIN) * float(sc >> 4);
}

#elif defined(TYPE_Q3_K)
/* hmask[32], qs[64], scales[12], d: f16. Element j: c, k, l as Q2_K's, its
 * low 2 bits as Q2_K's, its 3rd bit h: bit 4c + k of hmask[l]
 * (weft_q3_hbit); x = (d * sc) * (q - 4 * !h) with sub-block j/16's
 * six-bit scale minus 32 (dq_q3_k_scale) */
#define DQ_QK WEFT_QKK
#define DQ_QB WEFT_BSZ_Q3_K
/* scale s: low 4 bits in nibble s/8 of scales[s%8], high 2 at bits
 * 2(s/4)..2(s/4)+1 of scales[8 + s%4]; minus 32 (weft_q3_k_scales) */
float dq_q3_k_scale(uint b, uint s)
{
    uint lo = (dq_u8(b + WEFT_BOFF_Q3_K_SCALES + s % 8u) >> (4u * (s / 8u))) & 15u;
    uint hi = (dq_u8(b + WEFT_BOFF_Q3_K_SCALES + 8u + s % 4u) >> (2u * (s / 4u))) & 3u;
    return float(int(lo | (hi << 4)) - 32);
}
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, c = j / 128u, k = (j % 128u) / 32u, l = j % 32u;
    uint q = (dq_u8(b + WEFT_BOFF_Q3_K_QS + 32u * c + l) >> (2u * k)) & 3u;
    uint h = (dq_u8(b + WEFT_BOFF_Q3_K_HMASK + l) >> (4u * c + k)) & 1u;
    return dq_f16(b + WEFT_BOFF_Q3_K_D) * dq_q3_k_scale(b, j / 16u) * (float(q) - (h != 0u ? 0.0 : 4.0));
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, c = j / 128u, k = (j % 128u) / 32u, l = j % 32u;
    vec4 q = dq_byte4((dq_u32(b + WEFT_BOFF_Q3_K_QS + 32u * c + l) >> (2u * k)) & 0x03030303u);
    vec4 h = dq_bit4(dq_u32(b + WEFT_BOFF_Q3_K_HMASK + l), 4u * c + k);
    return dq_f16(b + WEFT_BOFF_Q3_K_D) * dq_q3_k_scale(b, j / 16u) * (q + 4.0 * h - 4.0);
}

#elif defined(TYPE_IQ4_NL)
/* d: f16, qs[16]: 4-bit codes as Q4_0's; x = d * kvalues_iq4nl[q] */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_IQ4_NL
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint q = (dq_u8(b + WEFT_BOFF_IQ4_NL_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 15u;
    return dq_f16(b + WEFT_BOFF_IQ4_NL_D) * dq_kv[q];
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint u = (dq_u32(b + WEFT_BOFF_IQ4_NL_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 0x0f0f0f0fu;
    return dq_f16(b + WEFT_BOFF_IQ4_NL_D) * dq_kv4(u);
}

#elif defined(TYPE_IQ4_XS)
/* d: f16, scales_h: u16, scales_l[4], qs[128]. Sub-block s = j/32 has its
 * six-bit scale's low 4 bits in nibble s%2 of scales_l[s/2], its high 2 at
 * bits 2s..2s+1 of scales_h (minus 32: weft_iq4_xs_scale) and its codes in
 * qs[16s .. 16s+16) as Q4_0's; x = (d * sc) * kvalues_iq4nl[q] */
#define DQ_QK WEFT_QKK
#define DQ_QB WEFT_BSZ_IQ4_XS
float dq_iq4_xs_scale(uint b, uint s)
{
    uint lo = (dq_u8(b + WEFT_BOFF_IQ4_XS_SCALES_L + s / 2u) >> (4u * (s % 2u))) & 15u;
    uint hi = (dq_u16(b + WEFT_BOFF_IQ4_XS_SCALES_H) >> (2u * s)) & 3u;
    return float(int(lo | (hi << 4)) - 32);
}
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, s = j / 32u, l = j % 32u;
    uint q = (dq_u8(b + WEFT_BOFF_IQ4_XS_QS + 16u * s + (l & 15u)) >> ((l & 16u) >> 2)) & 15u;
    return dq_f16(b + WEFT_BOFF_IQ4_XS_D) * dq_iq4_xs_scale(b, s) * dq_kv[q];
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK, s = j / 32u, l = j % 32u;
    uint u = (dq_u32(b + WEFT_BOFF_IQ4_XS_QS + 16u * s + (l & 15u)) >> ((l & 16u) >> 2)) & 0x0f0f0f0fu;
    return dq_f16(b + WEFT_BOFF_IQ4_XS_D) * dq_iq4_xs_scale(b, s) * dq_kv4(u);
}

#elif defined(TYPE_MXFP4)
/* e: E8M0 exponent, qs[16]: E2M1 codes as Q4_0's; x = kvalues_mxfp4[q] *
 * 2^(e - 128) (the code book holds twice the E2M1 values). 17-byte blocks:
 * bytes only (dq_u8, dq_u32b), any row offset. */
#define DQ_QK WEFT_QK32
#define DQ_QB WEFT_BSZ_MXFP4
/* weft_e8m0_to_f32_half: 2^(e - 128), exact (e < 2: subnormal) */
float dq_e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); }
float dq_get(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint q = (dq_u8(b + WEFT_BOFF_MXFP4_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 15u;
    return dq_kv[q] * dq_e8m0_half(dq_u8(b + WEFT_BOFF_MXFP4_E));
}
vec4 dq_get4(uint row, uint i)
{
    uint b = row + (i / DQ_QK) * DQ_QB, j = i % DQ_QK;
    uint u = (dq_u32b(b + WEFT_BOFF_MXFP4_QS + (j & 15u)) >> ((j & 16u) >> 2)) & 0x0f0f0f0fu;
    return dq_kv4(u) * dq_e8m0_half(dq_u8(b + WEFT_BOFF_MXFP4_E));
}

#else
#error "dequant.glsl: define one TYPE_xxx"
#endif

#endif
