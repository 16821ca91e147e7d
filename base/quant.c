/* Reference scalar quantization kernels (see base/quant.h).
 *
 * Every loop here follows ggml's reference code element for element: the same
 * block layouts, the same element ordering inside a block, the same rounding in
 * the quantizers, so that a tensor quantized or dequantized here matches ggml's
 * generic CPU path bit for bit. The dot products, which follow ggml's x86 SIMD
 * order, are the CPU backend's (backends/cpu/cpu_ref_dot.c). */
#include "base/quant.h"
#include "base/quant_blocks.h"
#include "base/quant_k.h"

#include <assert.h>
#include <float.h>
#include <math.h>

#define MIN_(a, b) ((a) < (b) ? (a) : (b))

static inline float h2f(weft_half h) { return weft_half_to_f32(h); }
static inline weft_half f2h(float f) { return weft_f32_to_half(f); }

/* Round to nearest, ties to even, for |f| <= 2^22 - 1: adding 1.5 * 2^23
 * leaves the rounded integer in the low mantissa bits (ggml's nearest_int). */
static inline int nearest_int(float f)
{
    assert(fabsf(f) <= 4194303.f);
    float v = f + 12582912.f;
    uint32_t i = weft_f32_bits(v);
    return (int)(i & 0x007fffff) - 0x00400000;
}


/* ---------------------------------------------------------------------------
 * Dequantization. In the 32-element formats byte j of qs holds element j in
 * its low nibble and element j+16 in its high nibble. */

static void dequant_q4_0(const struct weft_block_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK4_0) {
        float d = h2f(b[i].d);
        for (int j = 0; j < WEFT_QK4_0 / 2; j++) {
            y[j] = ((b[i].qs[j] & 0xF) - 8) * d;
            y[j + WEFT_QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const struct weft_block_q4_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK4_1) {
        float d = h2f(b[i].d), m = h2f(b[i].m);
        for (int j = 0; j < WEFT_QK4_1 / 2; j++) {
            y[j] = (b[i].qs[j] & 0xF) * d + m;
            y[j + WEFT_QK4_1 / 2] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}


static void dequant_q5_0(const struct weft_block_q5_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK5_0) {
        float d = h2f(b[i].d);
        uint32_t qh = weft_qh_load(b[i].qh);
        for (int j = 0; j < WEFT_QK5_0 / 2; j++) {
            int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = (((b[i].qs[j] & 0xF) | h0) - 16) * d;
            y[j + WEFT_QK5_0 / 2] = (((b[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void dequant_q5_1(const struct weft_block_q5_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK5_1) {
        float d = h2f(b[i].d), m = h2f(b[i].m);
        uint32_t qh = weft_qh_load(b[i].qh);
        for (int j = 0; j < WEFT_QK5_1 / 2; j++) {
            int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = ((b[i].qs[j] & 0xF) | h0) * d + m;
            y[j + WEFT_QK5_1 / 2] = ((b[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void dequant_q8_0(const struct weft_block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK8_0) {
        float d = h2f(b[i].d);
        for (int j = 0; j < WEFT_QK8_0; j++) y[j] = b[i].qs[j] * d;
    }
}

static void dequant_q8_1(const struct weft_block_q8_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK8_1) {
        float d = h2f(b[i].d);
        for (int j = 0; j < WEFT_QK8_1; j++) y[j] = b[i].qs[j] * d;
    }
}

/* Q4_K: 4 chunks of 64 elements; chunk c uses qs[32c .. 32c+32): low nibbles
 * are sub-block 2c, high nibbles sub-block 2c+1. x = d*sc*q - dmin*m. */
static void dequant_q4_k(const struct weft_block_q4_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            weft_k4_scale_min(is, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            weft_k4_scale_min(is + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: as Q4_K, plus the 5th bit of element 32*s + l is bit s of qh[l]
 * (sub-block s = 0..7). */
static void dequant_q5_k(const struct weft_block_q5_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            weft_k4_scale_min(is, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            weft_k4_scale_min(is + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            uint8_t u1 = (uint8_t)(1u << is), u2 = (uint8_t)(2u << is);
            for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}


/* x = d * scales[e/16] * q. */
static void dequant_q6_k(const struct weft_block_q6_k *b, float *y, int64_t nb)
{
    int8_t a[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK_K) {
        float d = h2f(b[i].d);
        weft_q6_k_unpack(&b[i], a);
        /* d * sc * q in float, left to right, as ggml */
        for (int e = 0; e < WEFT_QK_K; e++) y[e] = d * b[i].scales[e / 16] * a[e];
    }
}

/* Q2_K: x = (d * (sc & 0xF)) * q - dmin * (sc >> 4), sub-block by sub-block (ggml's order) */
static void dequant_q2_k(const struct weft_block_q2_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK_K) {
        float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        for (int e = 0; e < WEFT_QK_K; e++) {
            uint8_t sc = b[i].scales[e / 16];
            float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
            y[e] = dl * weft_q2_bits(b[i].qs, e) - ml;
        }
    }
}

/* Q3_K: x = (d * (sc - 32)) * (q - 4 * !hbit) */
static void dequant_q3_k(const struct weft_block_q3_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK_K) {
        float d = h2f(b[i].d);
        int8_t sc[16];
        weft_q3_k_scales(b[i].scales, sc);
        for (int e = 0; e < WEFT_QK_K; e++) {
            float dl = d * sc[e / 16];
            y[e] = dl * (weft_q2_bits(b[i].qs, e) - (weft_q3_hbit(b[i].hmask, e) ? 0 : 4));
        }
    }
}

static const int8_t kvalues_iq4nl[16] = WEFT_KVALUES_IQ4NL;
static const int8_t kvalues_mxfp4[16] = WEFT_KVALUES_MXFP4;

static void dequant_iq4_nl(const struct weft_block_iq4_nl *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK4_NL) {
        float d = h2f(b[i].d);
        for (int j = 0; j < WEFT_QK4_NL / 2; j++) {
            y[j] = d * kvalues_iq4nl[b[i].qs[j] & 0xF];
            y[j + WEFT_QK4_NL / 2] = d * kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

static void dequant_iq4_xs(const struct weft_block_iq4_xs *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = h2f(b[i].d);
        for (int s = 0; s < WEFT_QK_K / 32; s++, y += 32) {
            float dl = d * weft_iq4_xs_scale(&b[i], s);
            const uint8_t *q = b[i].qs + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * kvalues_iq4nl[q[j] & 0xF];
                y[j + 16] = dl * kvalues_iq4nl[q[j] >> 4];
            }
        }
    }
}

static void dequant_mxfp4(const struct weft_block_mxfp4 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK_MXFP4) {
        float d = weft_e8m0_to_f32_half(b[i].e);
        for (int j = 0; j < WEFT_QK_MXFP4 / 2; j++) {
            y[j] = kvalues_mxfp4[b[i].qs[j] & 0xF] * d;
            y[j + WEFT_QK_MXFP4 / 2] = kvalues_mxfp4[b[i].qs[j] >> 4] * d;
        }
    }
}

static void dequant_q8_k(const struct weft_block_q8_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK_K)
        for (int j = 0; j < WEFT_QK_K; j++) y[j] = b[i].d * b[i].qs[j];
}

static int64_t n_blocks(enum weft_type type, int64_t n)
{
    const struct weft_type_info *ti = weft_type_get((uint32_t)type);
    assert(ti && n >= 0 && n % ti->block_size == 0);
    return ti ? n / ti->block_size : 0;
}

void weft_dequantize_row(enum weft_type type, const void *src, float *dst, int64_t n)
{
    int64_t nb = n_blocks(type, n);
    switch (type) {
    case WEFT_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case WEFT_TYPE_F16: {
        const weft_half *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = h2f(s[i]);
        break;
    }
    case WEFT_TYPE_BF16: {
        const weft_bf16 *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = weft_bf16_to_f32(s[i]);
        break;
    }
    case WEFT_TYPE_Q4_0: dequant_q4_0(src, dst, nb); break;
    case WEFT_TYPE_Q4_1: dequant_q4_1(src, dst, nb); break;
    case WEFT_TYPE_Q5_0: dequant_q5_0(src, dst, nb); break;
    case WEFT_TYPE_Q5_1: dequant_q5_1(src, dst, nb); break;
    case WEFT_TYPE_Q8_0: dequant_q8_0(src, dst, nb); break;
    case WEFT_TYPE_Q8_1: dequant_q8_1(src, dst, nb); break;
    case WEFT_TYPE_Q4_K: dequant_q4_k(src, dst, nb); break;
    case WEFT_TYPE_Q5_K: dequant_q5_k(src, dst, nb); break;
    case WEFT_TYPE_Q6_K: dequant_q6_k(src, dst, nb); break;
    case WEFT_TYPE_Q8_K: dequant_q8_k(src, dst, nb); break;
    case WEFT_TYPE_Q2_K: dequant_q2_k(src, dst, nb); break;
    case WEFT_TYPE_Q3_K: dequant_q3_k(src, dst, nb); break;
    case WEFT_TYPE_IQ4_NL: dequant_iq4_nl(src, dst, nb); break;
    case WEFT_TYPE_IQ4_XS: dequant_iq4_xs(src, dst, nb); break;
    case WEFT_TYPE_MXFP4: dequant_mxfp4(src, dst, nb); break;
    default: assert(!"weft_dequantize_row: unknown type"); break;
    }
}

/* ---------------------------------------------------------------------------
 * Quantization (ggml's *_ref quantizers; the K-quants, IQ4 and MXFP4 are
 * base/quant_k.c's). */

/* Symmetric formats take the signed value of largest magnitude (first one on
 * ties) so that it maps exactly onto the extreme code -8 / -16. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static void quant_q4_0(const float *x, struct weft_block_q4_0 *b, int64_t nb)
{
    const int qk = WEFT_QK4_0;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        float d = signed_absmax(x, qk) / -8;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = f2h(d);
        for (int j = 0; j < qk / 2; j++) {
            uint8_t q0 = (uint8_t)MIN_(15, (int8_t)(x[j] * id + 8.5f));
            uint8_t q1 = (uint8_t)MIN_(15, (int8_t)(x[j + qk / 2] * id + 8.5f));
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void quant_q4_1(const float *x, struct weft_block_q4_1 *b, int64_t nb)
{
    const int qk = WEFT_QK4_1;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        float mn, mx;
        min_max(x, qk, &mn, &mx);
        float d = (mx - mn) / 15;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = f2h(d);
        b[i].m = f2h(mn);
        for (int j = 0; j < qk / 2; j++) {
            uint8_t q0 = (uint8_t)MIN_(15, (int8_t)((x[j] - mn) * id + 0.5f));
            uint8_t q1 = (uint8_t)MIN_(15, (int8_t)((x[j + qk / 2] - mn) * id + 0.5f));
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static inline void store_qh(uint8_t qh[4], uint32_t v)
{
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(v >> (8 * k));
}

static void quant_q5_0(const float *x, struct weft_block_q5_0 *b, int64_t nb)
{
    const int qk = WEFT_QK5_0;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        float d = signed_absmax(x, qk) / -16;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; j++) {
            uint8_t q0 = (uint8_t)MIN_(31, (int8_t)(x[j] * id + 16.5f));
            uint8_t q1 = (uint8_t)MIN_(31, (int8_t)(x[j + qk / 2] * id + 16.5f));
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j;
            qh |= (uint32_t)(q1 >> 4 & 1) << (j + qk / 2);
        }
        store_qh(b[i].qh, qh);
    }
}

/* Unlike Q4_1, ggml's Q5_1 reference does not clamp to 31 (the +0.5 cannot
 * exceed 31.5 for finite input); kept identical. */
static void quant_q5_1(const float *x, struct weft_block_q5_1 *b, int64_t nb)
{
    const int qk = WEFT_QK5_1;
    for (int64_t i = 0; i < nb; i++, x += qk) {
        float mn, mx;
        min_max(x, qk, &mn, &mx);
        float d = (mx - mn) / 31;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = f2h(d);
        b[i].m = f2h(mn);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; j++) {
            uint8_t q0 = (uint8_t)((x[j] - mn) * id + 0.5f);
            uint8_t q1 = (uint8_t)((x[j + qk / 2] - mn) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j;
            qh |= (uint32_t)(q1 >> 4 & 1) << (j + qk / 2);
        }
        store_qh(b[i].qh, qh);
    }
}

static float absmax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* 8-bit block quantizers in two roundings. File quantization (runtime =
 * false) follows ggml's reference: id = 1/d, round half away from zero.
 * Matmul activations (runtime = true) follow ggml's x86 CPU path: id =
 * 127/amax, round half to even. Random-weight models amplify even such
 * rounding differences, so each use mirrors the ggml code it stands for. */
static inline int8_t q8_round(float x, float amax, bool runtime)
{
    if (runtime) return (int8_t)nearbyintf(x * (amax != 0.0f ? 127.0f / amax : 0.0f));
    float d = amax / 127;
    return (int8_t)roundf(x * (d ? 1.0f / d : 0.0f));
}

static void quant_q8_0(const float *x, struct weft_block_q8_0 *b, int64_t nb, bool runtime)
{
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK8_0) {
        float amax = absmax(x, WEFT_QK8_0);
        b[i].d = f2h(amax / 127);
        for (int j = 0; j < WEFT_QK8_0; j++) b[i].qs[j] = q8_round(x[j], amax, runtime);
    }
}

/* s = d * sum(q) with the unrounded float d, as ggml. */
static void quant_q8_1(const float *x, struct weft_block_q8_1 *b, int64_t nb, bool runtime)
{
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK8_1) {
        float amax = absmax(x, WEFT_QK8_1), d = amax / 127;
        b[i].d = f2h(d);
        int sum = 0;
        for (int j = 0; j < WEFT_QK8_1; j++) {
            b[i].qs[j] = q8_round(x[j], amax, runtime);
            sum += b[i].qs[j];
        }
        b[i].s = f2h((float)sum * d);
    }
}

/* Scale by -127/max so the largest-magnitude value maps to -127 exactly; the
 * stored d is 1/iscale (negative when max is positive). */
static void quant_q8_k(const float *x, struct weft_block_q8_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        float max = signed_absmax(x, WEFT_QK_K);
        if (max == 0.0f) {
            /* ggml leaves bsums untouched here; zero them so output is defined */
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < WEFT_QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            b[i].qs[j] = (int8_t)MIN_(127, v);
        }
        for (int g = 0; g < WEFT_QK_K / 16; g++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += b[i].qs[16 * g + k];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}

bool weft_quantize_row(enum weft_type type, const float *src, void *dst, int64_t n)
{
    switch (type) {
    case WEFT_TYPE_F32: case WEFT_TYPE_F16: case WEFT_TYPE_BF16:
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q5_1:
    case WEFT_TYPE_Q8_0: case WEFT_TYPE_Q8_1: case WEFT_TYPE_Q8_K:
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
    case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_IQ4_XS: case WEFT_TYPE_MXFP4:
        break;
    default:
        return false;
    }
    int64_t nb = n_blocks(type, n);
    switch (type) {
    case WEFT_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case WEFT_TYPE_F16: {
        weft_half *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = f2h(src[i]);
        break;
    }
    case WEFT_TYPE_BF16: {
        weft_bf16 *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = weft_f32_to_bf16(src[i]);
        break;
    }
    case WEFT_TYPE_Q4_0: quant_q4_0(src, dst, nb); break;
    case WEFT_TYPE_Q4_1: quant_q4_1(src, dst, nb); break;
    case WEFT_TYPE_Q5_0: quant_q5_0(src, dst, nb); break;
    case WEFT_TYPE_Q5_1: quant_q5_1(src, dst, nb); break;
    case WEFT_TYPE_Q8_0: quant_q8_0(src, dst, nb, false); break;
    case WEFT_TYPE_Q8_1: quant_q8_1(src, dst, nb, false); break;
    case WEFT_TYPE_Q8_K: quant_q8_k(src, dst, nb); break;
    case WEFT_TYPE_Q2_K: weft_quant_q2_k(src, dst, nb); break;
    case WEFT_TYPE_Q3_K: weft_quant_q3_k(src, dst, nb); break;
    case WEFT_TYPE_Q4_K: weft_quant_q4_k(src, dst, nb); break;
    case WEFT_TYPE_Q5_K: weft_quant_q5_k(src, dst, nb); break;
    case WEFT_TYPE_Q6_K: weft_quant_q6_k(src, dst, nb); break;
    case WEFT_TYPE_IQ4_NL: weft_quant_iq4_nl(src, dst, nb); break;
    case WEFT_TYPE_IQ4_XS: weft_quant_iq4_xs(src, dst, nb); break;
    case WEFT_TYPE_MXFP4: weft_quant_mxfp4(src, dst, nb); break;
    default: break;
    }
    return true;
}

/* Activation-only types (Q8_1, Q8_K) have no dot product; they map to
 * themselves. */
enum weft_type weft_vec_dot_type(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q8_0: case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_MXFP4:
        return WEFT_TYPE_Q8_0;
    case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_1: return WEFT_TYPE_Q8_1;
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
    case WEFT_TYPE_IQ4_XS:
        return WEFT_TYPE_Q8_K;
    default: return t;
    }
}

double weft_vec_dot_f32_ref(enum weft_type wtype, const void *w, const float *x, int64_t n)
{
    const struct weft_type_info *ti = weft_type_get((uint32_t)wtype);
    assert(ti && n % ti->block_size == 0);
    if (!ti) return 0.0;
    /* chunks of one super-block: a multiple of every block size */
    float buf[WEFT_QK_K];
    const uint8_t *p = w;
    double s = 0;
    for (int64_t i = 0; i < n; i += WEFT_QK_K) {
        int64_t len = MIN_(n - i, (int64_t)WEFT_QK_K);
        weft_dequantize_row(wtype, p, buf, len);
        p += weft_row_size(wtype, len);
        for (int64_t j = 0; j < len; j++) s += (double)buf[j] * (double)x[i + j];
    }
    return s;
}

bool weft_quantize_row_act(enum weft_type type, const float *src, void *dst, int64_t n)
{
    if (type == WEFT_TYPE_Q8_0) { quant_q8_0(src, dst, n / WEFT_QK8_0, true); return true; }
    if (type == WEFT_TYPE_Q8_1) { quant_q8_1(src, dst, n / WEFT_QK8_1, true); return true; }
    return weft_quantize_row(type, src, dst, n);
}
