/* Tensor element types and quantized block layouts.
 *
 * The numeric values of enum weft_type are ggml's (and GGUF's) type ids, and
 * every block struct below is byte-for-byte ggml's layout, so tensors are used
 * straight from the mmapped file. This header is the one definition every
 * backend (CPU, Vulkan shaders via their own mirror, CUDA, HIP) follows. It is
 * plain C with fixed-width fields and no padding. */
#ifndef WEFT_TYPES_H
#define WEFT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum weft_type {
    WEFT_TYPE_F32  = 0,
    WEFT_TYPE_F16  = 1,
    WEFT_TYPE_Q4_0 = 2,
    WEFT_TYPE_Q4_1 = 3,
    WEFT_TYPE_Q5_0 = 6,
    WEFT_TYPE_Q5_1 = 7,
    WEFT_TYPE_Q8_0 = 8,
    WEFT_TYPE_Q8_1 = 9,   /* activations only */
    WEFT_TYPE_Q2_K = 10,
    WEFT_TYPE_Q3_K = 11,
    WEFT_TYPE_Q4_K = 12,
    WEFT_TYPE_Q5_K = 13,
    WEFT_TYPE_Q6_K = 14,
    WEFT_TYPE_Q8_K = 15,  /* activations only */
    WEFT_TYPE_IQ4_NL = 20,
    WEFT_TYPE_IQ4_XS = 23,
    WEFT_TYPE_I32  = 26,  /* indices (token ids, positions, block tables); not a weight type */
    WEFT_TYPE_BF16 = 30,
    WEFT_TYPE_MXFP4 = 39,
    WEFT_TYPE_COUNT_ = 40 /* one past the largest id; not a type */
};

typedef uint16_t weft_half;  /* IEEE binary16 bits */
typedef uint16_t weft_bf16;  /* bfloat16 bits */

#define WEFT_QK4_0 32
#define WEFT_QK4_1 32
#define WEFT_QK5_0 32
#define WEFT_QK5_1 32
#define WEFT_QK8_0 32
#define WEFT_QK8_1 32
#define WEFT_QK_K 256
#define WEFT_QK4_NL 32
#define WEFT_QK_MXFP4 32
#define WEFT_K_SCALE_SIZE 12

/* x = d * (q - 8), q in [0,15]; low nibbles hold elements 0..15, high 16..31 */
struct weft_block_q4_0 { weft_half d; uint8_t qs[WEFT_QK4_0 / 2]; };
/* x = d * q + m */
struct weft_block_q4_1 { weft_half d; weft_half m; uint8_t qs[WEFT_QK4_1 / 2]; };
/* 5th bit of element j is bit j of qh (little-endian u32); x = d * (q - 16) */
struct weft_block_q5_0 { weft_half d; uint8_t qh[4]; uint8_t qs[WEFT_QK5_0 / 2]; };
/* x = d * q + m */
struct weft_block_q5_1 { weft_half d; weft_half m; uint8_t qh[4]; uint8_t qs[WEFT_QK5_1 / 2]; };
/* x = d * q */
struct weft_block_q8_0 { weft_half d; int8_t qs[WEFT_QK8_0]; };
/* x = d * q; s = d * sum(q) */
struct weft_block_q8_1 { weft_half d; weft_half s; int8_t qs[WEFT_QK8_1]; };
/* 8 sub-blocks of 32; 6-bit scales and mins packed in scales[12] */
struct weft_block_q4_k {
    weft_half d; weft_half dmin;
    uint8_t scales[WEFT_K_SCALE_SIZE];
    uint8_t qs[WEFT_QK_K / 2];
};
struct weft_block_q5_k {
    weft_half d; weft_half dmin;
    uint8_t scales[WEFT_K_SCALE_SIZE];
    uint8_t qh[WEFT_QK_K / 8];
    uint8_t qs[WEFT_QK_K / 2];
};
/* 16 sub-blocks of 16; x = d * scales[i] * (q - 32), q 6-bit (4 low in ql, 2 high in qh) */
struct weft_block_q6_k {
    uint8_t ql[WEFT_QK_K / 2];
    uint8_t qh[WEFT_QK_K / 4];
    int8_t scales[WEFT_QK_K / 16];
    weft_half d;
};
/* 16 sub-blocks of 16: x = d * (scales[s] & 0xF) * q - dmin * (scales[s] >> 4), q 2-bit:
 * element 128c + 32k + l (c = 0,1; k = 0..3; l = 0..31) is bits 2k..2k+1 of qs[32c + l] */
struct weft_block_q2_k {
    uint8_t scales[WEFT_QK_K / 16];
    uint8_t qs[WEFT_QK_K / 4];
    weft_half d; weft_half dmin;
};
/* 16 sub-blocks of 16: x = d * (sc - 32) * (q - 4 * !hbit), q's low 2 bits as Q2_K's, the
 * 3rd bit of element 128c + 32k + l is bit 4c + k of hmask[l]; 16 six-bit scales in 12 bytes
 * (weft_q3_k_scales) */
struct weft_block_q3_k {
    uint8_t hmask[WEFT_QK_K / 8];
    uint8_t qs[WEFT_QK_K / 4];
    uint8_t scales[12];
    weft_half d;
};
/* x = d * weft_kvalues_iq4nl[q]; nibbles as Q4_0 */
struct weft_block_iq4_nl { weft_half d; uint8_t qs[WEFT_QK4_NL / 2]; };
/* 8 sub-blocks of 32 with 6-bit scales (low 4 bits: nibble s%2 of scales_l[s/2]; high 2 bits:
 * bits 2s..2s+1 of scales_h); x = d * (sc - 32) * weft_kvalues_iq4nl[q], sub-block s's nibbles
 * in qs[16s .. 16s+16) as Q4_0's */
struct weft_block_iq4_xs {
    weft_half d;
    uint16_t scales_h;
    uint8_t scales_l[WEFT_QK_K / 64];
    uint8_t qs[WEFT_QK_K / 2];
};
/* OCP microscaling FP4: an E8M0 shared exponent e and 32 E2M1 codes (nibbles as Q4_0);
 * x = weft_kvalues_mxfp4[q] * 2^(e - 128) (the table holds twice the E2M1 value) */
struct weft_block_mxfp4 { uint8_t e; uint8_t qs[WEFT_QK_MXFP4 / 2]; };
/* activations for K-quant dot products; bsums = sums of groups of 16 */
struct weft_block_q8_k {
    float d;
    int8_t qs[WEFT_QK_K];
    int16_t bsums[WEFT_QK_K / 16];
};

/* C11 and C++ (nvcc/hipcc compile the kernels against this header) */
#ifdef __cplusplus
#define WEFT_STATIC_ASSERT static_assert
#else
#define WEFT_STATIC_ASSERT _Static_assert
#endif
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q4_0) == 18, "q4_0 layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q4_1) == 20, "q4_1 layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q5_0) == 22, "q5_0 layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q5_1) == 24, "q5_1 layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q8_0) == 34, "q8_0 layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q8_1) == 36, "q8_1 layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q4_k) == 144, "q4_k layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q5_k) == 176, "q5_k layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q6_k) == 210, "q6_k layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q8_k) == 292, "q8_k layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q2_k) == 84, "q2_k layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_q3_k) == 110, "q3_k layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_iq4_nl) == 18, "iq4_nl layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_iq4_xs) == 136, "iq4_xs layout");
WEFT_STATIC_ASSERT(sizeof(struct weft_block_mxfp4) == 17, "mxfp4 layout");

/* The non-linear code books of IQ4_NL/IQ4_XS and of MXFP4 (E2M1 values doubled, so integers):
 * the formats' definitions, shared by every backend. */
#define WEFT_KVALUES_IQ4NL {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
#define WEFT_KVALUES_MXFP4 {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

struct weft_type_info {
    const char *name;       /* "Q4_0" ... ; NULL for ids that are not types */
    uint32_t block_size;    /* elements per block (1 for F32/F16/BF16) */
    uint32_t type_size;     /* bytes per block */
    bool is_quantized;
    bool weight_ok;         /* valid as a model weight type (not Q8_1/Q8_K) */
};

/* Info for a type id; returns NULL for ids that are not known types. */
const struct weft_type_info *weft_type_get(uint32_t type);
const char *weft_type_name(enum weft_type t);
/* Parse "Q4_1", "q4_1", "f16"...; returns false if unknown. */
bool weft_type_from_name(const char *name, enum weft_type *out);
/* Bytes of one row of n elements; n must be a multiple of the block size. */
size_t weft_row_size(enum weft_type t, int64_t n);

/* ---- scalar conversions (exact, portable) ---- */
static inline uint32_t weft_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float weft_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float weft_half_to_f32(weft_half h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return weft_bits_f32(sign);
        /* subnormal: man * 2^-24 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    if (exp == 31) return weft_bits_f32(sign | 0x7f800000u | (man << 13));
    return weft_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* round-to-nearest-even, as ggml's and the hardware conversion */
static inline weft_half weft_f32_to_half(float f)
{
    uint32_t x = weft_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (weft_half)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (weft_half)(sign | 0x7c00);          /* overflow -> inf */
    if (ax < 0x38800000u) {                                            /* subnormal or zero */
        if (ax < 0x33000000u) return (weft_half)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;                                       /* 14..24 */
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (weft_half)(sign | hm);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (weft_half)(sign | h);
}

/* MXFP4's E8M0 scale halved (the code book is doubled): 2^(e - 128), exact (2^-128 and 2^-127
 * are subnormal) */
static inline float weft_e8m0_to_f32_half(uint8_t e)
{
    return weft_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

static inline float weft_bf16_to_f32(weft_bf16 h) { return weft_bits_f32((uint32_t)h << 16); }

static inline weft_bf16 weft_f32_to_bf16(float f)
{
    uint32_t u = weft_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (weft_bf16)((u >> 16) | 64); /* quiet NaN */
    return (weft_bf16)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
