/* Tests for base/quant.c: block layouts (hand-built blocks with known values),
 * reference quantizer rounding, round-trip error, dot products against the
 * float reference, and the half/bfloat16 conversions in base/types.h. */
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"

#include <stdint.h>
#include <string.h>

/* ---- deterministic random numbers (splitmix64) ---- */

static uint64_t rng_state = 0x5eed1234abcd0001ull;

static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)rng_unit(); }

static float rng_normal(void)
{
    double u1 = rng_unit(), u2 = rng_unit();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Mostly normal data, with an occasional outlier and a shifted-mean block so
 * min/max formats are exercised off-centre. */
static void fill_data(float *x, int64_t n)
{
    float shift = rng_uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        x[i] = rng_normal() + ((i / 32) % 3 == 1 ? shift : 0.0f);
        if (rng_u64() % 97 == 0) x[i] *= 6.0f;
    }
}

static void fill_bytes(void *p, size_t n)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rng_u64();
}

static weft_half h(float f) { return weft_f32_to_half(f); }

/* ---- F16 / BF16 conversions ---- */

static void f16_roundtrip_of_every_finite_half_is_exact(void)
{
    int bad = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        if (((u >> 10) & 0x1f) == 0x1f) continue;
        float f = weft_half_to_f32((weft_half)u);
        if (weft_f32_to_half(f) != u) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* infinities survive; NaN stays NaN */
    CHECK_EQ_INT(weft_f32_to_half(weft_half_to_f32(0x7c00)), 0x7c00);
    CHECK_EQ_INT(weft_f32_to_half(weft_half_to_f32(0xfc00)), 0xfc00);
    CHECK(isnan(weft_half_to_f32(0x7e00)));
    CHECK_EQ_INT(weft_f32_to_half(NAN) & 0x7c00, 0x7c00);
    CHECK(weft_f32_to_half(NAN) & 0x3ff);
}

static void f16_rounds_to_nearest_even(void)
{
    const float ulp1 = 1.0f / 1024.0f; /* half ulp at 1.0 is 2^-10 */
    CHECK_EQ_INT(weft_f32_to_half(1.0f), 0x3c00);
    CHECK_EQ_INT(weft_f32_to_half(1.0f + 0.5f * ulp1), 0x3c00);           /* tie -> even */
    CHECK_EQ_INT(weft_f32_to_half(1.0f + 1.5f * ulp1), 0x3c02);           /* tie -> even */
    CHECK_EQ_INT(weft_f32_to_half(1.0f + 0.5f * ulp1 + 1e-6f), 0x3c01);   /* above tie */
    CHECK_EQ_INT(weft_f32_to_half(1.0f + 0.5f * ulp1 - 1e-7f), 0x3c00);   /* below tie */
    CHECK_EQ_INT(weft_f32_to_half(-(1.0f + 1.5f * ulp1)), 0xbc02);
    CHECK_EQ_INT(weft_f32_to_half(65504.0f), 0x7bff);                     /* largest finite */
    CHECK_EQ_INT(weft_f32_to_half(65519.0f), 0x7bff);
    CHECK_EQ_INT(weft_f32_to_half(65520.0f), 0x7c00);                     /* tie rounds to inf */
    CHECK_EQ_INT(weft_f32_to_half(1e10f), 0x7c00);
    CHECK_EQ_INT(weft_f32_to_half(-1e10f), 0xfc00);
    CHECK_EQ_INT(weft_f32_to_half(-0.0f), 0x8000);
    CHECK(weft_half_to_f32(0x3555) == 0.333251953125f);
}

static void f16_subnormals_convert_exactly(void)
{
    const float t24 = 1.0f / 16777216.0f; /* 2^-24, smallest subnormal */
    CHECK(weft_half_to_f32(0x0001) == t24);
    CHECK(weft_half_to_f32(0x03ff) == 1023 * t24);
    CHECK(weft_half_to_f32(0x0400) == 1024 * t24);                        /* smallest normal */
    CHECK(weft_half_to_f32(0x8001) == -t24);
    CHECK_EQ_INT(weft_f32_to_half(t24), 0x0001);
    CHECK_EQ_INT(weft_f32_to_half(0.5f * t24), 0x0000);                   /* tie -> even (0) */
    CHECK_EQ_INT(weft_f32_to_half(0.5f * t24 * 1.0001f), 0x0001);
    CHECK_EQ_INT(weft_f32_to_half(1.5f * t24), 0x0002);                   /* tie -> even (2) */
    CHECK_EQ_INT(weft_f32_to_half(2.5f * t24), 0x0002);                   /* tie -> even (2) */
    CHECK_EQ_INT(weft_f32_to_half(1023.5f * t24), 0x0400);                /* rounds up into normal */
    CHECK_EQ_INT(weft_f32_to_half(-3 * t24), 0x8003);
    CHECK_EQ_INT(weft_f32_to_half(1e-30f), 0x0000);
}

static void bf16_roundtrip_and_rounding(void)
{
    int bad = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        if (((u >> 7) & 0xff) == 0xff) continue;
        if (weft_f32_to_bf16(weft_bf16_to_f32((weft_bf16)u)) != u) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(weft_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(weft_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);            /* tie -> even */
    CHECK_EQ_INT(weft_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);            /* tie -> even */
    CHECK_EQ_INT(weft_f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 4096), 0x3f81);
    CHECK_EQ_INT(weft_f32_to_bf16(weft_bits_f32(0x00010000u)), 0x0001);   /* subnormal kept */
    CHECK(isnan(weft_bf16_to_f32(weft_f32_to_bf16(NAN))));
    CHECK_EQ_INT(weft_f32_to_bf16(weft_bits_f32(0x7f800001u)) & 0x40, 0x40); /* quiet */
}

/* ---- dequantization of hand-built blocks ---- */

#define CHECK_ROW(got, want, n) do { int bad_ = 0, first_ = -1; \
    for (int i_ = 0; i_ < (n); i_++) if ((got)[i_] != (want)[i_]) { bad_++; if (first_ < 0) first_ = i_; } \
    CHECK_MSG(bad_ == 0, "%d mismatches, first at %d: %.9g vs %.9g", bad_, first_, \
              first_ < 0 ? 0.0 : (double)(got)[first_], first_ < 0 ? 0.0 : (double)(want)[first_]); } while (0)

static void dequant_f32_f16_bf16_are_plain_conversions(void)
{
    float src[4] = {1.5f, -2.25f, 0.0f, 65504.0f}, out[4];
    weft_dequantize_row(WEFT_TYPE_F32, src, out, 4);
    CHECK_ROW(out, src, 4);
    weft_half hs[4] = {0x3e00, 0xc080, 0x0000, 0x7bff};
    weft_dequantize_row(WEFT_TYPE_F16, hs, out, 4);
    CHECK_ROW(out, src, 4);
    weft_bf16 bs[4] = {0x3fc0, 0xc010, 0x0000, 0x477f};
    float bwant[4] = {1.5f, -2.25f, 0.0f, 65280.0f};
    weft_dequantize_row(WEFT_TYPE_BF16, bs, out, 4);
    CHECK_ROW(out, bwant, 4);
}

/* Byte j holds element j (low nibble) and element j+16 (high nibble). */
static void dequant_q4_0_nibble_order(void)
{
    struct weft_block_q4_0 b[2];
    float want[64], out[64];
    for (int k = 0; k < 2; k++) {
        b[k].d = h(k ? -0.25f : 0.5f);
        for (int j = 0; j < 16; j++) b[k].qs[j] = (uint8_t)(j | (15 - j) << 4);
        for (int j = 0; j < 16; j++) {
            want[32 * k + j] = (j - 8) * (k ? -0.25f : 0.5f);
            want[32 * k + 16 + j] = (7 - j) * (k ? -0.25f : 0.5f);
        }
    }
    weft_dequantize_row(WEFT_TYPE_Q4_0, b, out, 64);
    CHECK_ROW(out, want, 64);
    CHECK(out[0] == -4.0f && out[16] == 3.5f && out[15] == 3.5f && out[31] == -4.0f);
}

static void dequant_q4_1_nibble_order_and_min(void)
{
    struct weft_block_q4_1 b;
    float want[32], out[32];
    b.d = h(0.25f);
    b.m = h(-1.5f);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)((j * 5 + 3) % 16 | ((j * 3 + 1) % 16) << 4);
    for (int j = 0; j < 16; j++) {
        want[j] = ((j * 5 + 3) % 16) * 0.25f - 1.5f;
        want[16 + j] = ((j * 3 + 1) % 16) * 0.25f - 1.5f;
    }
    weft_dequantize_row(WEFT_TYPE_Q4_1, &b, out, 32);
    CHECK_ROW(out, want, 32);
}

/* qh is a little-endian u32 whose bit j is the 5th bit of element j. */
static const uint8_t qh_pattern[4] = {0x96, 0x0f, 0xc3, 0xa5}; /* u32 0xa5c30f96 */

static void dequant_q5_0_high_bits(void)
{
    struct weft_block_q5_0 b;
    float want[32], out[32];
    b.d = h(0.125f);
    memcpy(b.qh, qh_pattern, 4);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)((15 - j) | j << 4);
    const uint32_t qh = 0xa5c30f96u;
    for (int j = 0; j < 16; j++) {
        want[j] = (int)(((15 - j) | ((qh >> j) & 1) << 4) - 16) * 0.125f;
        want[16 + j] = (int)((j | ((qh >> (16 + j)) & 1) << 4) - 16) * 0.125f;
    }
    weft_dequantize_row(WEFT_TYPE_Q5_0, &b, out, 32);
    CHECK_ROW(out, want, 32);
    /* element 1: low 14, bit 1 of 0x96 set -> 30 - 16; element 16: low 0, bit 16 (0xc3 bit 0) set */
    CHECK(out[1] == 14 * 0.125f && out[16] == 0.0f && out[0] == -1 * 0.125f);
}

static void dequant_q5_1_high_bits_and_min(void)
{
    struct weft_block_q5_1 b;
    float want[32], out[32];
    b.d = h(0.5f);
    b.m = h(-8.0f);
    memcpy(b.qh, qh_pattern, 4);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)((j * 7) % 16 | ((j * 11 + 5) % 16) << 4);
    const uint32_t qh = 0xa5c30f96u;
    for (int j = 0; j < 16; j++) {
        want[j] = (float)(((j * 7) % 16) | ((qh >> j) & 1) << 4) * 0.5f - 8.0f;
        want[16 + j] = (float)(((j * 11 + 5) % 16) | ((qh >> (16 + j)) & 1) << 4) * 0.5f - 8.0f;
    }
    weft_dequantize_row(WEFT_TYPE_Q5_1, &b, out, 32);
    CHECK_ROW(out, want, 32);
}

static void dequant_q8_0_q8_1_signed_bytes(void)
{
    struct weft_block_q8_0 a;
    struct weft_block_q8_1 b;
    float want[32], out[32];
    a.d = h(0.125f);
    b.d = h(-2.0f);
    b.s = h(1000.0f); /* not used by dequantization */
    for (int j = 0; j < 32; j++) a.qs[j] = b.qs[j] = (int8_t)(j * 8 - 128 + (j == 31 ? 7 : 0));
    for (int j = 0; j < 32; j++) want[j] = (j * 8 - 128 + (j == 31 ? 7 : 0)) * 0.125f;
    weft_dequantize_row(WEFT_TYPE_Q8_0, &a, out, 32);
    CHECK_ROW(out, want, 32);
    CHECK(out[0] == -16.0f && out[31] == 127 * 0.125f);
    for (int j = 0; j < 32; j++) want[j] *= -16.0f;
    weft_dequantize_row(WEFT_TYPE_Q8_1, &b, out, 32);
    CHECK_ROW(out, want, 32);
}

/* K-quant 6-bit scales/mins, packed by hand (see weft_k4_scale_min in base/quant_blocks.h):
 *   bytes 0..3 : scale[j] | (scale[j+4] >> 4) << 6
 *   bytes 4..7 : min[j]   | (min[j+4] >> 4) << 6
 *   bytes 8..11: (scale[j+4] & 15) | (min[j+4] & 15) << 4 */
static const uint8_t k4_sc[8] = {1, 17, 33, 63, 5, 20, 40, 62};
static const uint8_t k4_mn[8] = {2, 18, 34, 60, 7, 31, 48, 16};
static const uint8_t k4_packed[12] = {1, 81, 161, 255, 2, 82, 226, 124, 117, 244, 8, 14};

static void dequant_q4_k_scale_packing_and_order(void)
{
    struct weft_block_q4_k b;
    float want[256], out[256];
    b.d = h(0.5f);
    b.dmin = h(0.25f);
    memcpy(b.scales, k4_packed, 12);
    for (int k = 0; k < 128; k++) b.qs[k] = (uint8_t)(k * 7 + 3);
    /* element e: sub-block s = e/32; 64-chunk c = e/64 uses qs[32c..32c+32),
     * low nibble for even s, high nibble for odd s */
    for (int e = 0; e < 256; e++) {
        int s = e / 32, l = e % 32;
        uint8_t byte = b.qs[32 * (e / 64) + l];
        int q = (s & 1) ? byte >> 4 : byte & 15;
        want[e] = (float)(0.5 * k4_sc[s] * q - 0.25 * k4_mn[s]);
    }
    weft_dequantize_row(WEFT_TYPE_Q4_K, &b, out, 256);
    CHECK_ROW(out, want, 256);
    /* element 224: sub-block 7 (scale 62, min 16), high nibble of qs[96] = 675 & 255 = 0xa3 */
    CHECK(out[224] == 0.5f * 62 * 0xa - 0.25f * 16);
}

static void dequant_q5_k_high_bits(void)
{
    struct weft_block_q5_k b;
    float want[256], out[256];
    b.d = h(0.25f);
    b.dmin = h(0.125f);
    memcpy(b.scales, k4_packed, 12);
    for (int k = 0; k < 128; k++) b.qs[k] = (uint8_t)(k * 13 + 5);
    for (int l = 0; l < 32; l++) b.qh[l] = (uint8_t)(l * 37 + 11);
    /* the 5th bit of element e is bit (e/32) of qh[e%32] */
    for (int e = 0; e < 256; e++) {
        int s = e / 32, l = e % 32;
        uint8_t byte = b.qs[32 * (e / 64) + l];
        int q = ((s & 1) ? byte >> 4 : byte & 15) | ((b.qh[l] >> s) & 1) << 4;
        want[e] = (float)(0.25 * k4_sc[s] * q - 0.125 * k4_mn[s]);
    }
    weft_dequantize_row(WEFT_TYPE_Q5_K, &b, out, 256);
    CHECK_ROW(out, want, 256);
}

static void dequant_q6_k_interleaving(void)
{
    struct weft_block_q6_k b;
    float want[256], out[256];
    b.d = h(0.5f);
    for (int k = 0; k < 128; k++) b.ql[k] = (uint8_t)(k * 29 + 7);
    for (int k = 0; k < 64; k++) b.qh[k] = (uint8_t)(k * 53 + 19);
    for (int k = 0; k < 16; k++) b.scales[k] = (int8_t)(k * 17 - 128);
    /* element e = 128*hf + 32*k + l: low 4 bits from ql[64hf + l + 32*(k&1)]
     * (low nibble for k < 2, high for k >= 2); high 2 bits are bits 2k..2k+1
     * of qh[32hf + l]; value q - 32 with scale scales[e/16] */
    for (int e = 0; e < 256; e++) {
        int hf = e / 128, k = (e % 128) / 32, l = e % 32;
        uint8_t lo = b.ql[64 * hf + l + 32 * (k & 1)];
        int q = ((k < 2) ? lo & 15 : lo >> 4) | ((b.qh[32 * hf + l] >> (2 * k)) & 3) << 4;
        want[e] = (float)(0.5 * b.scales[e / 16] * (q - 32));
    }
    weft_dequantize_row(WEFT_TYPE_Q6_K, &b, out, 256);
    CHECK_ROW(out, want, 256);
    /* element 0: ql[0]=7, qh[0]=19 -> bits 0..1 = 3 -> q = 55 -> 23; scale -128 */
    CHECK(out[0] == 0.5f * -128 * 23);
}

static void dequant_q8_k_uses_float_scale(void)
{
    struct weft_block_q8_k b;
    float want[256], out[256];
    memset(&b, 0, sizeof b);
    b.d = -0.0078125f;
    for (int j = 0; j < 256; j++) b.qs[j] = (int8_t)(j - 128);
    for (int j = 0; j < 256; j++) want[j] = (j - 128) * -0.0078125f;
    weft_dequantize_row(WEFT_TYPE_Q8_K, &b, out, 256);
    CHECK_ROW(out, want, 256);
}

/* ---- quantizer rounding (ggml reference quantizers) ---- */

static void quantize_q8_0_rounds_half_away_from_zero(void)
{
    float x[32] = {0};
    x[0] = 127.0f;   /* amax 127 -> d = 1 */
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.49f;
    x[4] = -126.5f;
    struct weft_block_q8_0 b;
    struct weft_block_q8_1 c;
    CHECK(weft_quantize_row(WEFT_TYPE_Q8_0, x, &b, 32));
    CHECK_EQ_INT(b.d, 0x3c00);
    CHECK_EQ_INT(b.qs[0], 127);
    CHECK_EQ_INT(b.qs[1], 3);
    CHECK_EQ_INT(b.qs[2], -3);
    CHECK_EQ_INT(b.qs[3], 0);
    CHECK_EQ_INT(b.qs[4], -127);
    CHECK(weft_quantize_row(WEFT_TYPE_Q8_1, x, &c, 32));
    CHECK_EQ_INT(memcmp(b.qs, c.qs, 32), 0);
    CHECK(weft_half_to_f32(c.s) == 127 + 3 - 3 - 127);
    x[5] = 100.0f;
    CHECK(weft_quantize_row(WEFT_TYPE_Q8_1, x, &c, 32));
    CHECK(weft_half_to_f32(c.s) == 100.0f);
    /* all-zero block: d = 0, all codes 0 */
    float z[32] = {0};
    CHECK(weft_quantize_row(WEFT_TYPE_Q8_0, z, &b, 32));
    CHECK_EQ_INT(b.d, 0);
    for (int j = 0; j < 32; j++) CHECK_EQ_INT(b.qs[j], 0);
}

static void quantize_q4_0_keeps_sign_of_max(void)
{
    float x[32];
    struct weft_block_q4_0 b;
    /* max by magnitude is -8 -> d = 1, q = x + 8 */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16 - 8);
    CHECK(weft_quantize_row(WEFT_TYPE_Q4_0, x, &b, 32));
    CHECK(weft_half_to_f32(b.d) == 1.0f);
    for (int j = 0; j < 16; j++) CHECK_EQ_INT(b.qs[j], j | j << 4);
    /* max by magnitude is +8 -> d = -1, q = 8 - x; x = -7.6 gives 16.1 -> clamped to 15 */
    for (int j = 0; j < 32; j++) x[j] = 0.0f;
    x[0] = 8.0f;
    x[1] = -7.6f;
    x[2] = 3.0f;
    x[17] = 2.5f; /* 2.5*(-1) + 8.5 = 6.0 -> 6 */
    CHECK(weft_quantize_row(WEFT_TYPE_Q4_0, x, &b, 32));
    CHECK(weft_half_to_f32(b.d) == -1.0f);
    CHECK_EQ_INT(b.qs[0] & 15, 0);
    CHECK_EQ_INT(b.qs[1] & 15, 15);
    CHECK_EQ_INT(b.qs[2] & 15, 5);
    CHECK_EQ_INT(b.qs[1] >> 4, 6);
    CHECK_EQ_INT(b.qs[3], 8 | 8 << 4);
}

static void quantize_q4_1_q5_1_use_min_and_range(void)
{
    float x[32];
    struct weft_block_q4_1 b;
    struct weft_block_q5_1 c;
    /* range 15 -> d = 1, m = -3; (x - m) + 0.5 truncated */
    for (int j = 0; j < 32; j++) x[j] = -3.0f + (float)(j % 16);
    x[20] = -3.0f + 4.5f;  /* 4.5 + 0.5 = 5.0 -> 5 */
    x[21] = -3.0f + 4.49f; /* -> 4 */
    CHECK(weft_quantize_row(WEFT_TYPE_Q4_1, x, &b, 32));
    CHECK(weft_half_to_f32(b.d) == 1.0f && weft_half_to_f32(b.m) == -3.0f);
    CHECK_EQ_INT(b.qs[0], 0 | 0 << 4);
    CHECK_EQ_INT(b.qs[15], 15 | 15 << 4);
    CHECK_EQ_INT(b.qs[4] >> 4, 5);
    CHECK_EQ_INT(b.qs[5] >> 4, 4);
    /* Q5_1: range 31 -> d = 1; 5th bits into qh */
    for (int j = 0; j < 32; j++) x[j] = 10.0f + (float)((j * 7) % 32);
    CHECK(weft_quantize_row(WEFT_TYPE_Q5_1, x, &c, 32));
    CHECK(weft_half_to_f32(c.d) == 1.0f && weft_half_to_f32(c.m) == 10.0f);
    uint32_t qh = (uint32_t)c.qh[0] | (uint32_t)c.qh[1] << 8 | (uint32_t)c.qh[2] << 16 | (uint32_t)c.qh[3] << 24;
    for (int j = 0; j < 32; j++) {
        int q = (j < 16 ? c.qs[j] & 15 : c.qs[j - 16] >> 4) | ((qh >> j) & 1) << 4;
        CHECK_EQ_INT(q, (j * 7) % 32);
    }
}

static void quantize_q5_0_maps_max_to_minus_16(void)
{
    float x[32];
    struct weft_block_q5_0 b;
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16); /* max by magnitude -16 -> d = 1 */
    CHECK(weft_quantize_row(WEFT_TYPE_Q5_0, x, &b, 32));
    CHECK(weft_half_to_f32(b.d) == 1.0f);
    uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 | (uint32_t)b.qh[2] << 16 | (uint32_t)b.qh[3] << 24;
    CHECK_EQ_INT(qh, 0xffff0000u); /* codes 0..15 then 16..31 */
    for (int j = 0; j < 16; j++) CHECK_EQ_INT(b.qs[j], j | j << 4);
}

static void quantize_q8_k_rounds_to_even_and_sums(void)
{
    float x[256] = {0};
    struct weft_block_q8_k b;
    x[0] = 127.0f;  /* max positive -> iscale = -1, d = -1 */
    x[1] = 2.5f;    /* -2.5 -> -2 (ties to even) */
    x[2] = 3.5f;    /* -3.5 -> -4 */
    x[3] = -1.5f;   /* 1.5 -> 2 */
    x[16] = -100.0f;
    CHECK(weft_quantize_row(WEFT_TYPE_Q8_K, x, &b, 256));
    CHECK(b.d == -1.0f);
    CHECK_EQ_INT(b.qs[0], -127);
    CHECK_EQ_INT(b.qs[1], -2);
    CHECK_EQ_INT(b.qs[2], -4);
    CHECK_EQ_INT(b.qs[3], 2);
    CHECK_EQ_INT(b.qs[16], 100);
    CHECK_EQ_INT(b.bsums[0], -127 - 2 - 4 + 2);
    CHECK_EQ_INT(b.bsums[1], 100);
    for (int g = 2; g < 16; g++) CHECK_EQ_INT(b.bsums[g], 0);
    float z[256] = {0};
    CHECK(weft_quantize_row(WEFT_TYPE_Q8_K, z, &b, 256));
    CHECK(b.d == 0.0f);
    for (int g = 0; g < 16; g++) CHECK_EQ_INT(b.bsums[g], 0);
}

/* Every weight type has a quantizer now (the K-quants, IQ4 and MXFP4 are
 * tests/test_quantizers.c's, against llama-quantize's bytes); what is left is
 * I32 and ids that are no type. */
static void quantize_rejects_types_without_quantizer(void)
{
    float x[256] = {0};
    uint8_t dst[256 * 4];
    const enum weft_type no[] = {WEFT_TYPE_I32, (enum weft_type)4, (enum weft_type)WEFT_TYPE_COUNT_};
    for (size_t t = 0; t < sizeof no / sizeof no[0]; t++) {
        memset(dst, 0xab, sizeof dst);
        CHECK(!weft_quantize_row(no[t], x, dst, 256));
        int touched = 0;
        for (size_t i = 0; i < sizeof dst; i++) touched += dst[i] != 0xab;
        CHECK_EQ_INT(touched, 0);
    }
}

static void quantize_f16_bf16_f32_convert_elementwise(void)
{
    float x[64], back[64];
    weft_half hb[64];
    weft_bf16 bb[64];
    fill_data(x, 64);
    CHECK(weft_quantize_row(WEFT_TYPE_F16, x, hb, 64));
    CHECK(weft_quantize_row(WEFT_TYPE_BF16, x, bb, 64));
    for (int i = 0; i < 64; i++) {
        CHECK_EQ_INT(hb[i], weft_f32_to_half(x[i]));
        CHECK_EQ_INT(bb[i], weft_f32_to_bf16(x[i]));
    }
    CHECK(weft_quantize_row(WEFT_TYPE_F32, x, back, 64));
    CHECK_ROW(back, x, 64);
}

/* ---- round trip on random data ---- */

struct rt_case { enum weft_type t; double nrmse_max; };

/* Per element: |x - dq| <= step * d + slack, where d is the block's scale,
 * step is 1/2 (or 1 for Q4_0/Q5_0, whose codes run one past the top code
 * for x near -max and are clamped), and slack covers storing d (and m) as a
 * half. */
static void check_round_trip(enum weft_type t, int64_t n, double nrmse_max)
{
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    void *q = malloc(weft_row_size(t, n));
    fill_data(x, n);
    CHECK(weft_quantize_row(t, x, q, n));
    weft_dequantize_row(t, q, y, n);
    int qk = (int)weft_type_get(t)->block_size;
    double se = 0, sx = 0;
    int bad = 0;
    for (int64_t b = 0; b < n / qk; b++) {
        double amax = 0, mn = INFINITY, mx = -INFINITY;
        for (int j = 0; j < qk; j++) {
            double v = x[b * qk + j];
            amax = fmax(amax, fabs(v));
            mn = fmin(mn, v);
            mx = fmax(mx, v);
        }
        double d, step = 0.5, slack;
        switch (t) {
        case WEFT_TYPE_Q8_0: d = amax / 127; slack = amax * 1e-3; break;
        case WEFT_TYPE_Q4_0: d = amax / 8; step = 1.0; slack = amax * 1e-3; break;
        case WEFT_TYPE_Q5_0: d = amax / 16; step = 1.0; slack = amax * 1e-3; break;
        case WEFT_TYPE_Q4_1: d = (mx - mn) / 15; slack = (mx - mn + fabs(mn)) * 1e-3; break;
        case WEFT_TYPE_Q5_1: d = (mx - mn) / 31; slack = (mx - mn + fabs(mn)) * 1e-3; break;
        default: d = amax / 127; slack = amax * 1e-6; break; /* Q8_K: float scale */
        }
        for (int j = 0; j < qk; j++) {
            double e = fabs((double)x[b * qk + j] - y[b * qk + j]);
            if (!(e <= step * d + slack)) bad++;
            se += e * e;
            sx += (double)x[b * qk + j] * x[b * qk + j];
        }
    }
    double nrmse = sqrt(se / sx);
    CHECK_MSG(bad == 0, "%s n=%lld: %d elements over the per-block bound", weft_type_name(t), (long long)n, bad);
    CHECK_MSG(nrmse <= nrmse_max, "%s n=%lld: nrmse %.4g > %.4g", weft_type_name(t), (long long)n, nrmse, nrmse_max);
    free(x);
    free(y);
    free(q);
}

static void quantize_round_trip_error_is_bounded(void)
{
    /* nrmse limits: about 1.5x what this data gives (the x6 outliers widen
     * the scales, most of all in Q8_K's 256-element blocks) */
    const struct rt_case cases[] = {
        {WEFT_TYPE_Q8_0, 0.012}, {WEFT_TYPE_Q4_0, 0.18}, {WEFT_TYPE_Q4_1, 0.16},
        {WEFT_TYPE_Q5_0, 0.12}, {WEFT_TYPE_Q5_1, 0.08}, {WEFT_TYPE_Q8_K, 0.03},
    };
    const int64_t n32[] = {32, 96, 32 * 37, 32 * 101};
    const int64_t n256[] = {256, 256 * 3, 256 * 7};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bool k = cases[c].t == WEFT_TYPE_Q8_K;
        const int64_t *ns = k ? n256 : n32;
        size_t nn = k ? 3 : 4;
        for (size_t i = 0; i < nn; i++) check_round_trip(cases[c].t, ns[i], cases[c].nrmse_max);
    }
}

/* ---- dot products ---- */

static float rand_scale_half(float lo, float hi) { return weft_half_to_f32(h(rng_uniform(lo, hi))); }

/* A random weight row of type t for n elements. Types with a quantizer get
 * quantized random data; K-quants get random bytes with small finite d/dmin. */
static void make_weights(enum weft_type t, void *w, int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    fill_data(x, n);
    int64_t nb = n / WEFT_QK_K;
    switch (t) {
    case WEFT_TYPE_Q4_K: {
        struct weft_block_q4_k *b = w;
        fill_bytes(b, (size_t)nb * sizeof *b);
        for (int64_t i = 0; i < nb; i++) {
            b[i].d = h(rand_scale_half(1e-3f, 3e-2f));
            b[i].dmin = h(rand_scale_half(1e-3f, 3e-2f));
        }
        break;
    }
    case WEFT_TYPE_Q5_K: {
        struct weft_block_q5_k *b = w;
        fill_bytes(b, (size_t)nb * sizeof *b);
        for (int64_t i = 0; i < nb; i++) {
            b[i].d = h(rand_scale_half(1e-3f, 3e-2f));
            b[i].dmin = h(rand_scale_half(1e-3f, 3e-2f));
        }
        break;
    }
    case WEFT_TYPE_Q6_K: {
        struct weft_block_q6_k *b = w;
        fill_bytes(b, (size_t)nb * sizeof *b);
        for (int64_t i = 0; i < nb; i++) b[i].d = h(rand_scale_half(-1e-3f, 1e-3f));
        break;
    }
    default:
        CHECK(weft_quantize_row(t, x, w, n));
        break;
    }
    free(x);
}

/* vec_dot (activations quantized to vec_dot_type) against the double
 * reference, twice: with the dequantized activations (differences are only
 * float accumulation order, plus the half-rounded s of Q8_1) and with the
 * original floats (adds the activation quantization error). Errors are
 * normalised by sum |w_i x_i|. */
static void check_vec_dot(enum weft_type t, int64_t n, double tol_same, double tol_orig)
{
    enum weft_type xt = weft_vec_dot_type(t);
    void *w = malloc(weft_row_size(t, n));
    void *xq = malloc(weft_row_size(xt, n));
    float *x = malloc((size_t)n * sizeof *x), *xd = malloc((size_t)n * sizeof *xd);
    float *wd = malloc((size_t)n * sizeof *wd);
    make_weights(t, w, n);
    fill_data(x, n);
    CHECK(weft_quantize_row(xt, x, xq, n));
    weft_dequantize_row(xt, xq, xd, n);
    weft_dequantize_row(t, w, wd, n);
    double norm = 1e-30;
    for (int64_t i = 0; i < n; i++) norm += fabs((double)wd[i] * x[i]);
    double got = weft_vec_dot(t, w, xq, n);
    double ref_same = weft_vec_dot_f32_ref(t, w, xd, n);
    double ref_orig = weft_vec_dot_f32_ref(t, w, x, n);
    double e_same = fabs(got - ref_same) / norm, e_orig = fabs(got - ref_orig) / norm;
    CHECK_MSG(e_same <= tol_same, "%s n=%lld: %.9g vs %.9g (quantized x), err %.3g > %.3g",
              weft_type_name(t), (long long)n, got, ref_same, e_same, tol_same);
    CHECK_MSG(e_orig <= tol_orig, "%s n=%lld: %.9g vs %.9g (float x), err %.3g > %.3g",
              weft_type_name(t), (long long)n, got, ref_orig, e_orig, tol_orig);
    /* the multi-row (prefill) order is just another summation order */
    double got_mm = weft_vec_dot_mm(t, w, xq, n, 4, 2);
    double e_mm = fabs(got_mm - ref_same) / norm;
    CHECK_MSG(e_mm <= tol_same, "%s n=%lld: vec_dot_mm %.9g vs %.9g (quantized x), err %.3g > %.3g",
              weft_type_name(t), (long long)n, got_mm, ref_same, e_mm, tol_same);
    free(w);
    free(xq);
    free(x);
    free(xd);
    free(wd);
}

static void vec_dot_matches_float_reference(void)
{
    const struct { enum weft_type t; double tol_same, tol_orig; } cases[] = {
        {WEFT_TYPE_F32, 1e-6, 1e-6},  {WEFT_TYPE_F16, 1e-6, 2e-3},  {WEFT_TYPE_BF16, 1e-6, 1e-2},
        {WEFT_TYPE_Q8_0, 1e-5, 3e-2}, {WEFT_TYPE_Q4_0, 1e-5, 3e-2}, {WEFT_TYPE_Q5_0, 1e-5, 3e-2},
        {WEFT_TYPE_Q4_1, 2e-3, 3e-2}, {WEFT_TYPE_Q5_1, 2e-3, 3e-2}, {WEFT_TYPE_Q4_K, 1e-5, 3e-2},
        {WEFT_TYPE_Q5_K, 1e-5, 3e-2}, {WEFT_TYPE_Q6_K, 1e-5, 3e-2},
    };
    const int64_t nblocks[] = {1, 3, 5, 37};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t qk = weft_type_get(cases[c].t)->block_size;
        if (qk == 1) qk = 32; /* float types: odd multiples of 32 */
        for (size_t i = 0; i < sizeof nblocks / sizeof nblocks[0]; i++)
            for (int rep = 0; rep < 4; rep++)
                check_vec_dot(cases[c].t, qk * nblocks[i], cases[c].tol_same, cases[c].tol_orig);
    }
}

/* A K-quant dot with one non-zero activation picks out exactly one weight:
 * pins that vec_dot's unpacking agrees with dequantization element by element. */
static void vec_dot_k_quants_pick_single_elements(void)
{
    const enum weft_type ts[] = {WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K};
    for (size_t t = 0; t < 3; t++) {
        uint8_t w[sizeof(struct weft_block_q6_k) * 2]; /* largest K block */
        make_weights(ts[t], w, 512);
        float wd[512];
        weft_dequantize_row(ts[t], w, wd, 512);
        int bad = 0;
        for (int e = 0; e < 512; e += 7) {
            float x[512] = {0};
            struct weft_block_q8_k xq[2];
            x[e] = 1.0f;
            CHECK(weft_quantize_row(WEFT_TYPE_Q8_K, x, xq, 512));
            float got = weft_vec_dot(ts[t], w, xq, 512);
            if (fabsf(got - wd[e]) > 1e-5f * (fabsf(wd[e]) + 1.0f)) bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d single-element dots disagree with dequantization", weft_type_name(ts[t]), bad);
    }
}

/* Q6_K x Q8_K follows the float order of ggml's AVX2 kernel as of llama.cpp
 * PR #22345 (the one the reference outputs were made with): unsigned 6-bit
 * values (0..63) summed into 8 int lanes, lane l getting the elements e with
 * (e % 32) / 4 == l times scales[e/16], minus the -32 offset of 32-element
 * sub-block l (32 * (bsums[2l]*sc[2l] + bsums[2l+1]*sc[2l+1])); per block
 * fma(y.d * x.d, float(lane), acc); then hsum_float_8. The integer total is
 * the same in any split, only the lanes (and so the float rounding) differ,
 * so random blocks are checked bit for bit against this written-out order,
 * and the older split (offset taken per element, signed values in each lane)
 * must disagree somewhere, or the test would not discriminate. */
static float hsum8(const float v[8])
{
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

static void vec_dot_q6_k_follows_ggml_avx2_lanes(void)
{
    enum { NB = 3, N = NB * 256 };
    int differs_from_old = 0, bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        struct weft_block_q6_k w[NB];
        struct weft_block_q8_k xq[NB];
        int q[NB][256];
        float x[N];
        for (int i = 0; i < N; i++) x[i] = rng_normal();
        CHECK(weft_quantize_row(WEFT_TYPE_Q8_K, x, xq, N));
        for (int b = 0; b < NB; b++) {
            for (int e = 0; e < 256; e++) q[b][e] = (int)(rng_u64() % 64);
            for (int k = 0; k < 16; k++) w[b].scales[k] = (int8_t)(rng_u64() % 256);
            w[b].d = h(rng_uniform(1e-3f, 3e-2f));
            /* pack (layout pinned by dequant_q6_k_interleaving) */
            memset(w[b].ql, 0, sizeof w[b].ql);
            memset(w[b].qh, 0, sizeof w[b].qh);
            for (int e = 0; e < 256; e++) {
                int hf = e / 128, k = (e % 128) / 32, l = e % 32;
                uint8_t *lo = &w[b].ql[64 * hf + l + 32 * (k & 1)];
                *lo |= (uint8_t)((q[b][e] & 15) << (k < 2 ? 0 : 4));
                w[b].qh[32 * hf + l] |= (uint8_t)((q[b][e] >> 4) << (2 * k));
            }
        }
        float acc_new[8] = {0}, acc_old[8] = {0};
        for (int b = 0; b < NB; b++) {
            const int8_t *sc = w[b].scales, *q8 = xq[b].qs;
            int32_t ln[8] = {0}, lo[8] = {0};
            for (int e = 0; e < 256; e++) {
                ln[(e % 32) / 4] += sc[e / 16] * q[b][e] * q8[e];
                lo[(e % 32) / 4] += sc[e / 16] * (q[b][e] - 32) * q8[e];
            }
            for (int l = 0; l < 8; l++)
                ln[l] -= 32 * (xq[b].bsums[2 * l] * sc[2 * l] + xq[b].bsums[2 * l + 1] * sc[2 * l + 1]);
            float d = xq[b].d * weft_half_to_f32(w[b].d);
            for (int l = 0; l < 8; l++) {
                acc_new[l] = fmaf(d, (float)ln[l], acc_new[l]);
                acc_old[l] = fmaf(d, (float)lo[l], acc_old[l]);
            }
        }
        float want = hsum8(acc_new), got = weft_vec_dot(WEFT_TYPE_Q6_K, w, xq, N);
        if (memcmp(&got, &want, sizeof got) != 0) bad++;
        if (hsum8(acc_old) != want) differs_from_old++;
    }
    CHECK_MSG(bad == 0, "Q6_K vec_dot: %d of 200 dots not bit-equal to ggml's AVX2 lane order", bad);
    CHECK_MSG(differs_from_old > 0, "Q6_K lane test does not tell the two offset splits apart");
}

/* Same for the 32-element formats, against Q8_0/Q8_1 activations. */
static void vec_dot_small_blocks_pick_single_elements(void)
{
    const enum weft_type ts[] = {WEFT_TYPE_Q4_0, WEFT_TYPE_Q5_0, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_1};
    for (size_t t = 0; t < 5; t++) {
        uint8_t w[sizeof(struct weft_block_q8_0) * 3]; /* largest of these */
        make_weights(ts[t], w, 96);
        float wd[96];
        weft_dequantize_row(ts[t], w, wd, 96);
        int bad = 0;
        for (int e = 0; e < 96; e++) {
            float x[96] = {0};
            uint8_t xq[sizeof(struct weft_block_q8_1) * 3];
            x[e] = 1.0f;
            CHECK(weft_quantize_row(weft_vec_dot_type(ts[t]), x, xq, 96));
            float got = weft_vec_dot(ts[t], w, xq, 96);
            /* x dequantizes to exactly 127 * half(1/127) ~= 1 - 2^-13 */
            float xs = 127.0f * weft_half_to_f32(h(1.0f / 127));
            if (fabsf(got - wd[e] * xs) > 2e-3f * (fabsf(wd[e]) + 1.0f)) bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d single-element dots disagree with dequantization", weft_type_name(ts[t]), bad);
    }
}

/* F32 dots follow ggml's AVX-512 summation order exactly (stories260K's
 * logprobs drift through the F16 KV cache otherwise). Inputs are chosen so
 * that any other order gives a different float. */
static void vec_dot_f32_follows_ggml_order(void)
{
    float a[128] = {0}, b[128];
    for (int i = 0; i < 128; i++) b[i] = 1.0f;
    /* ggml_vec_dot_f32: 4 accumulators (element e -> (e/16)%4), reduced
     * (s0+s2)+(s1+s3): 1e8 and -1e8 cancel before the 1 is added. In element
     * order 1e8 + 1 rounds back to 1e8 and the result would be 0. */
    a[0] = 1e8f;
    a[16] = 1.0f;
    a[32] = -1e8f;
    CHECK_MSG(weft_vec_dot(WEFT_TYPE_F32, a, b, 64) == 1.0f, "F32 vec_dot: accumulators not paired as ggml");

    /* tinyBLAS (prefill, k % 16 == 0, 4 | weight rows): one accumulator,
     * element e in lane e%16. n = 32 is all tail for vec_dot (element order,
     * result 0); tinyBLAS cancels 1e8 and -1e8 in lane 0, the 1 is in lane 1. */
    float t[32] = {0};
    t[0] = 1e8f;
    t[1] = 1.0f;
    t[16] = -1e8f;
    CHECK_MSG(weft_vec_dot(WEFT_TYPE_F32, t, b, 32) == 0.0f, "F32 vec_dot: n < 64 not summed in element order");
    CHECK_MSG(weft_vec_dot_mm(WEFT_TYPE_F32, t, b, 32, 4, 2) == 1.0f, "F32 vec_dot_mm: not tinyBLAS's lane order");
    CHECK_MSG(weft_vec_dot_mm(WEFT_TYPE_F32, t, b, 32, 4, 1) == 0.0f, "F32 vec_dot_mm: one row must use vec_dot");
    CHECK_MSG(weft_vec_dot_mm(WEFT_TYPE_F32, t, b, 32, 6, 2) == 0.0f, "F32 vec_dot_mm: 6 weight rows: no tinyBLAS");

    /* The tail past the last 64: GCC's fold-left vectorization rounds each
     * product of the first (tail & ~3) elements; the last tail % 4 are fused
     * (vfmadd231ss). p = (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is not a float. */
    const float e = 1.0f + 0x1p-12f, m = -(1.0f + 0x1p-11f);
    float c[69] = {0}, d[69] = {0};
    c[64] = e, d[64] = e;    /* rounded product: 1 + 2^-11 */
    c[65] = m, d[65] = 1.0f; /* sum back to exactly 0 */
    c[67] = m, d[67] = 1.0f; /* -(1 + 2^-11) */
    c[68] = e, d[68] = e;    /* fused: leaves exactly 2^-24 */
    float got = weft_vec_dot(WEFT_TYPE_F32, c, d, 69);
    CHECK_MSG(got == 0x1p-24f, "F32 vec_dot tail: %a, want 0x1p-24", got);
}

static void vec_dot_type_follows_ggml(void)
{
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q4_0), WEFT_TYPE_Q8_0);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q5_0), WEFT_TYPE_Q8_0);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q8_0), WEFT_TYPE_Q8_0);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q4_1), WEFT_TYPE_Q8_1);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q5_1), WEFT_TYPE_Q8_1);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q4_K), WEFT_TYPE_Q8_K);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q5_K), WEFT_TYPE_Q8_K);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_Q6_K), WEFT_TYPE_Q8_K);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_F16), WEFT_TYPE_F16);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_BF16), WEFT_TYPE_BF16);
    CHECK_EQ_INT(weft_vec_dot_type(WEFT_TYPE_F32), WEFT_TYPE_F32);
}

int main(void)
{
    RUN(f16_roundtrip_of_every_finite_half_is_exact);
    RUN(f16_rounds_to_nearest_even);
    RUN(f16_subnormals_convert_exactly);
    RUN(bf16_roundtrip_and_rounding);
    RUN(dequant_f32_f16_bf16_are_plain_conversions);
    RUN(dequant_q4_0_nibble_order);
    RUN(dequant_q4_1_nibble_order_and_min);
    RUN(dequant_q5_0_high_bits);
    RUN(dequant_q5_1_high_bits_and_min);
    RUN(dequant_q8_0_q8_1_signed_bytes);
    RUN(dequant_q4_k_scale_packing_and_order);
    RUN(dequant_q5_k_high_bits);
    RUN(dequant_q6_k_interleaving);
    RUN(dequant_q8_k_uses_float_scale);
    RUN(quantize_q8_0_rounds_half_away_from_zero);
    RUN(quantize_q4_0_keeps_sign_of_max);
    RUN(quantize_q4_1_q5_1_use_min_and_range);
    RUN(quantize_q5_0_maps_max_to_minus_16);
    RUN(quantize_q8_k_rounds_to_even_and_sums);
    RUN(quantize_rejects_types_without_quantizer);
    RUN(quantize_f16_bf16_f32_convert_elementwise);
    RUN(quantize_round_trip_error_is_bounded);
    RUN(vec_dot_type_follows_ggml);
    RUN(vec_dot_matches_float_reference);
    RUN(vec_dot_f32_follows_ggml_order);
    RUN(vec_dot_k_quants_pick_single_elements);
    RUN(vec_dot_small_blocks_pick_single_elements);
    RUN(vec_dot_q6_k_follows_ggml_avx2_lanes);
    return check_summary();
}
