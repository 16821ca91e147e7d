/* Reference scalar quantization kernels (see core/quant.h).
 *
 * Every loop here follows ggml's reference code element for element: the same
 * block layouts, the same element ordering inside a block, the same rounding in
 * the quantizers and the same integer/float split in the dot products, so that
 * a tensor or a dot product computed here matches ggml's generic CPU path. */
#include "core/quant.h"

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

/* Q4_K/Q5_K: scales[12] packs 8 six-bit scales and 8 six-bit mins.
 *   j < 4 : scale = q[j] & 63, min = q[j+4] & 63
 *   j >= 4: low 4 bits from q[j+4] (scale: low nibble, min: high nibble),
 *           high 2 bits from the top bits of q[j-4] (scale) and q[j] (min). */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
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

/* Q5: bit j of the little-endian qh word is the 5th bit of element j. */
static inline uint32_t load_qh(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void dequant_q5_0(const struct weft_block_q5_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK5_0) {
        float d = h2f(b[i].d);
        uint32_t qh = load_qh(b[i].qh);
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
        uint32_t qh = load_qh(b[i].qh);
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
            get_scale_min_k4(is, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(is + 1, b[i].scales, &sc, &m);
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
            get_scale_min_k4(is, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(is + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            uint8_t u1 = (uint8_t)(1u << is), u2 = (uint8_t)(2u << is);
            for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K 6-bit value of element (128*h + 32*k + l), h = half, k = 0..3, l = 0..31:
 * low 4 bits from ql[64h + l + 32*(k&1)] (low nibble for k<2, high for k>=2),
 * high 2 bits are bits 2k..2k+1 of qh[32h + l]. Minus 32. */
static inline void q6_k_unpack(const struct weft_block_q6_k *b, int8_t a[WEFT_QK_K])
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

/* x = d * scales[e/16] * q. */
static void dequant_q6_k(const struct weft_block_q6_k *b, float *y, int64_t nb)
{
    int8_t a[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++, y += WEFT_QK_K) {
        float d = h2f(b[i].d);
        q6_k_unpack(&b[i], a);
        /* d * sc * q in float, left to right, as ggml */
        for (int e = 0; e < WEFT_QK_K; e++) y[e] = d * b[i].scales[e / 16] * a[e];
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
    default: assert(!"weft_dequantize_row: unknown type"); break;
    }
}

/* ---------------------------------------------------------------------------
 * Quantization (ggml's *_ref quantizers). */

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
    default: break;
    }
    return true;
}

/* Activation-only types (Q8_1, Q8_K) have no dot product; they map to
 * themselves. */
enum weft_type weft_vec_dot_type(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q8_0: return WEFT_TYPE_Q8_0;
    case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_1: return WEFT_TYPE_Q8_1;
    case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K: return WEFT_TYPE_Q8_K;
    default: return t;
    }
}

/* ---------------------------------------------------------------------------
 * Dot products. 32-element formats: exact int sum per block, then
 * float(sumi) * dw * dx (or (dw*dx) * sumi + m*s) accumulated in float. */

static float dot_q4_0(const struct weft_block_q4_0 *w, const struct weft_block_q8_0 *x, int64_t nb)
{
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            s0 += ((w[i].qs[j] & 0xF) - 8) * x[i].qs[j];
            s1 += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
        }
        sumf += (float)(s0 + s1) * h2f(w[i].d) * h2f(x[i].d);
    }
    return sumf;
}

/* ---- Lane-exact emulation of ggml's x86 SIMD kernels ----------------------
 *
 * The reference outputs come from llama.cpp on an AVX-512 machine (AVX2, FMA,
 * F16C, AVX512F/BW/VL/VNNI/BF16). The synth models are random-weight and
 * chaotic: one ulp of difference in a dot product can flip the rounding of a
 * later 8-bit activation quantization and so move logprobs by 0.1-1.0. So the
 * kernels below reproduce the floating-point evaluation order of the SIMD
 * kernels ggml picks on that machine, lane by lane, in portable C: integer
 * partial sums are exact in any order, only the float steps are mirrored.
 *
 * Common pieces of the AVX2 32-element block kernels (ggml-cpu/arch/x86/
 * quants.c): with AVX512VNNI+VL, mul_sum_us8_pairs_float / mul_sum_i8_pairs_
 * float do one _mm256_dpbusd_epi32, so int32 lane l (0..7) holds the sum of
 * products of elements 4l..4l+3 of the block, converted to float. Blocks are
 * accumulated with _mm256_fmadd_ps into 8 float lanes (fmaf here), and
 * hsum_float_8 adds the 8 lanes as ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)). */

/* GCC builds ggml as gnu11/gnu++17, where -ffp-contract=fast turns the scalar
 * `summs += m * s` of the Q4_1/Q5_1/Q5_K kernels into one fused multiply-add. */
#ifndef WEFT_GGML_SCALAR_CONTRACT
#define WEFT_GGML_SCALAR_CONTRACT 1
#endif
static inline float ggml_scalar_madd(float a, float b, float c)
{
#if WEFT_GGML_SCALAR_CONTRACT
    return fmaf(a, b, c);
#else
    return c + a * b;
#endif
}

static inline float hsum_float_8(const float x[8])
{
    return ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7]));
}

/* _mm512_reduce_add_ps (GCC and clang): halves 512->256->128->64->32. */
static inline float reduce_add_16(const float x[16])
{
    float t[8], u[4];
    for (int i = 0; i < 8; i++) t[i] = x[i] + x[i + 8];
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

/* acc[l] = fma(d, float(sum of v[j]*q[j] for j in 4l..4l+3), acc[l]) */
static inline void block32_fma_lanes(float acc[8], const int v[32], const int8_t q[32], float d)
{
    for (int l = 0; l < 8; l++) {
        int s = v[4 * l] * q[4 * l] + v[4 * l + 1] * q[4 * l + 1] + v[4 * l + 2] * q[4 * l + 2] +
                v[4 * l + 3] * q[4 * l + 3];
        acc[l] = fmaf(d, (float)s, acc[l]);
    }
}

/* Q4_1 x Q8_1: ggml_vec_dot_q4_1_q8_1, AVX2 branch. Nibbles are unsigned
 * (0..15); d0*d1 scales the lanes, m*s is summed separately in a scalar. */
static float dot_q4_1(const struct weft_block_q4_1 *w, const struct weft_block_q8_1 *x, int64_t nb)
{
    float acc[8] = {0}, summs = 0;
    int v[32];
    for (int64_t i = 0; i < nb; i++) {
        summs = ggml_scalar_madd(h2f(w[i].m), h2f(x[i].s), summs);
        for (int j = 0; j < 16; j++) {
            v[j] = w[i].qs[j] & 0xF;
            v[j + 16] = w[i].qs[j] >> 4;
        }
        block32_fma_lanes(acc, v, x[i].qs, h2f(w[i].d) * h2f(x[i].d));
    }
    return hsum_float_8(acc) + summs;
}

/* Q5_0 x Q8_0: ggml_vec_dot_q5_0_q8_0, AVX2 branch, for decode and prefill
 * alike (weft_vec_dot_mm keeps this order for any batch; only F32/F16/BF16
 * take tinyBLAS's). Values are (nibble | high bit << 4) - 16. */
static float dot_q5_0(const struct weft_block_q5_0 *w, const struct weft_block_q8_0 *x, int64_t nb)
{
    float acc[8] = {0};
    int v[32];
    for (int64_t i = 0; i < nb; i++) {
        uint32_t qh = load_qh(w[i].qh);
        for (int j = 0; j < 16; j++) {
            v[j] = ((w[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
            v[j + 16] = ((w[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
        }
        block32_fma_lanes(acc, v, x[i].qs, h2f(w[i].d) * h2f(x[i].d));
    }
    return hsum_float_8(acc);
}

/* Q5_1 x Q8_1: ggml_vec_dot_q5_1_q8_1, AVX2 branch (as Q4_1, 5-bit values). */
static float dot_q5_1(const struct weft_block_q5_1 *w, const struct weft_block_q8_1 *x, int64_t nb)
{
    float acc[8] = {0}, summs = 0;
    int v[32];
    for (int64_t i = 0; i < nb; i++) {
        summs = ggml_scalar_madd(h2f(w[i].m), h2f(x[i].s), summs);
        uint32_t qh = load_qh(w[i].qh);
        for (int j = 0; j < 16; j++) {
            v[j] = (w[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            v[j + 16] = (w[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        }
        block32_fma_lanes(acc, v, x[i].qs, h2f(w[i].d) * h2f(x[i].d));
    }
    return hsum_float_8(acc) + summs;
}

/* Q8_0 x Q8_0: ggml_vec_dot_q8_0_q8_0, AVX2 branch, for decode and prefill
 * alike (as Q5_0: see weft_vec_dot_mm). */
static float dot_q8_0(const struct weft_block_q8_0 *w, const struct weft_block_q8_0 *x, int64_t nb)
{
    float acc[8] = {0};
    int v[32];
    for (int64_t i = 0; i < nb; i++) {
        for (int j = 0; j < 32; j++) v[j] = w[i].qs[j];
        block32_fma_lanes(acc, v, x[i].qs, h2f(w[i].d) * h2f(x[i].d));
    }
    return hsum_float_8(acc);
}

/* F16 x F16: ggml_vec_dot_f16 with GGML_SIMD on AVX512F (no AVX512-FP16):
 * GGML_F16_STEP 64, EPR 16, so 4 accumulators of 16 lanes; element e goes to
 * accumulator (e/16)%4, lane e%16, with _mm512_fmadd_ps (the products of two
 * halves are exact in float). GGML_F32Cx16_REDUCE: (s0+s2) + (s1+s3), then
 * _mm512_reduce_add_ps. A tail (n % 64) is added in double, as ggml. */
static float dot_f16(const weft_half *a, const weft_half *b, int64_t n)
{
    float sum[4][16];
    int64_t np = n & ~(int64_t)63;
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 16; l++) {
            float c = 0.0f;
            for (int64_t e = 16 * j + l; e < np; e += 64) c = fmaf(h2f(a[e]), h2f(b[e]), c);
            sum[j][l] = c;
        }
    float r[16];
    for (int l = 0; l < 16; l++) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    double s = reduce_add_16(r);
    for (int64_t i = np; i < n; i++) s += (double)(h2f(a[i]) * h2f(b[i]));
    return (float)s;
}

/* F32 x F32: ggml_vec_dot_f32 with GGML_SIMD on AVX512F: GGML_F32_STEP 64,
 * EPR 16, so 4 accumulators of 16 lanes; element e goes to accumulator
 * (e/16)%4, lane e%16, with _mm512_fmadd_ps. GGML_F32x16_REDUCE adds them as
 * (s0+s2) + (s1+s3), then _mm512_reduce_add_ps. Unlike the F16 kernel, sumf
 * is a float here, and the tail (n % 64, e.g. 44 of stories260K's n_ff 172)
 * is `sumf += x[i]*y[i]`, which GCC 12 -O3 -march=<AVX-512 CPU> vectorizes as
 * an in-order (fold-left) reduction: 8 then 4 products at a time with
 * vmulps (each product rounded), added one by one in element order; only the
 * last tail % 4 elements run in the scalar epilogue, where -ffp-contract=fast
 * fuses them into vfmadd231ss. Mirrored bit for bit because the F16 KV cache
 * rounding amplifies any last-bit difference over the decode (stories260K:
 * with a fully fused tail the first drift showed at decode step 2, with this
 * split not before step 22). */
static float dot_f32(const float *a, const float *b, int64_t n)
{
    float sum[4][16];
    int64_t np = n & ~(int64_t)63;
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 16; l++) {
            float c = 0.0f;
            for (int64_t e = 16 * j + l; e < np; e += 64) c = fmaf(a[e], b[e], c);
            sum[j][l] = c;
        }
    float r[16];
    for (int l = 0; l < 16; l++) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    float s = reduce_add_16(r);
    const int64_t vec_end = np + ((n - np) & ~(int64_t)3);
    for (int64_t i = np; i < vec_end; i++) s += a[i] * b[i];
    for (int64_t i = vec_end; i < n; i++) s = ggml_scalar_madd(a[i], b[i], s);
    return s;
}

/* One _mm512_dpbf16_ps lane step: acc += a[1]*b[1], then acc += a[0]*b[0]
 * (Intel's pseudo-code order; the bf16 products are exact in float, each add
 * rounds to nearest even). Written with fmaf, which is the same arithmetic
 * here since the products are exact: GCC 12 -O3 miscompiles the plain
 * `acc += p1; acc += p0;` chain when it vectorizes it as an in-order
 * (fold-left) reduction. */
static inline float dpbf16_step(float acc, const weft_bf16 *a, const weft_bf16 *b)
{
    acc = fmaf(weft_bf16_to_f32(a[1]), weft_bf16_to_f32(b[1]), acc);
    return fmaf(weft_bf16_to_f32(a[0]), weft_bf16_to_f32(b[0]), acc);
}

/* BF16 x BF16: ggml_vec_dot_bf16, __AVX512BF16__ branch: two __m512
 * accumulators c1 (elements i..i+31) and c2 (i+32..i+63) per 64 elements,
 * lane l of a vector covering elements 2l and 2l+1; each reduced with
 * _mm512_reduce_add_ps and summed in double; the tail in double. */
static float dot_bf16(const weft_bf16 *a, const weft_bf16 *b, int64_t n)
{
    float c1[16], c2[16];
    int64_t np = n & ~(int64_t)63, i;
    for (int l = 0; l < 16; l++) {
        float s1 = 0.0f, s2 = 0.0f;
        for (i = 2 * l; i < np; i += 64) {
            s1 = dpbf16_step(s1, a + i, b + i);
            s2 = dpbf16_step(s2, a + i + 32, b + i + 32);
        }
        c1[l] = s1;
        c2[l] = s2;
    }
    i = np;
    double s = 0;
    s += (double)reduce_add_16(c1);
    s += (double)reduce_add_16(c2);
    for (; i < n; i++) s += (double)(weft_bf16_to_f32(a[i]) * weft_bf16_to_f32(b[i]));
    return (float)s;
}

/* K-quants, as ggml's generic kernels: weights are unpacked to int8 a[256]
 * in element order; products a*q8 times the sub-block scale are summed into
 * 8 int lanes (lane = element index mod 8); each block adds d*lane into 8
 * float lanes, which are summed at the end. The Q4_K/Q5_K mins term is
 * dmin * sum_g(bsums[g] * min[g/2]), subtracted per block. */
struct k_lanes { float sums[8]; };

static void k_lanes_add(struct k_lanes *acc, const int8_t *a, const int8_t *q8,
                        const int *scale, int sub_len, float d)
{
    int32_t aux32[8] = {0};
    for (int e = 0; e < WEFT_QK_K; e++) aux32[e & 7] += scale[e / sub_len] * (a[e] * q8[e]);
    for (int l = 0; l < 8; l++) acc->sums[l] += d * (float)aux32[l];
}

static float k_lanes_total(const struct k_lanes *acc, float sumf)
{
    for (int l = 0; l < 8; l++) sumf += acc->sums[l];
    return sumf;
}

static int k4_scales_mins_dot(const uint8_t scales[WEFT_K_SCALE_SIZE], const int16_t *bsums, int sc[8])
{
    int summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        get_scale_min_k4(j, scales, &s, &m);
        sc[j] = s;
        summ += (bsums[2 * j] + bsums[2 * j + 1]) * m;
    }
    return summ;
}

static float dot_q4_k(const struct weft_block_q4_k *w, const struct weft_block_q8_k *x, int64_t nb)
{
    struct k_lanes acc = {{0}};
    float sumf = 0;
    int8_t a[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = w[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            for (int l = 0; l < 32; l++) a[64 * c + l] = (int8_t)(q[l] & 0xF);
            for (int l = 0; l < 32; l++) a[64 * c + 32 + l] = (int8_t)(q[l] >> 4);
        }
        int sc[8];
        int summ = k4_scales_mins_dot(w[i].scales, x[i].bsums, sc);
        k_lanes_add(&acc, a, x[i].qs, sc, 32, h2f(w[i].d) * x[i].d);
        sumf -= h2f(w[i].dmin) * x[i].d * (float)summ;
    }
    return k_lanes_total(&acc, sumf);
}

/* Q5_K x Q8_K: ggml_vec_dot_q5_K_q8_K, AVX2 branch (x86 has no Q5_K repack,
 * and tinyBLAS takes no K-quants, so decode and prefill both come here). As
 * for Q6_K, int32 lane l of each block sums the elements e with
 * (e % 32) / 4 == l (maddubs pairs, then madd with the sub-block scale),
 * exactly in int; the block adds fma(d, float(lane), acc) with
 * d = y.d * x.d. The mins term is a float summs += dmin * int, with
 * dmin = -y.d * x.dmin, which GCC contracts to an fma; the result is
 * hsum_float_8(acc) + summs. */
static float dot_q5_k(const struct weft_block_q5_k *w, const struct weft_block_q8_k *x, int64_t nb)
{
    float acc[8] = {0}, summs = 0.0f;
    int8_t a[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = w[i].qs, *qh = w[i].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) a[64 * c + l] = (int8_t)((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0));
            for (int l = 0; l < 32; l++) a[64 * c + 32 + l] = (int8_t)((q[l] >> 4) + (qh[l] & u2 ? 16 : 0));
        }
        int sc[8];
        int summ = k4_scales_mins_dot(w[i].scales, x[i].bsums, sc);
        int32_t lanes[8] = {0};
        for (int e = 0; e < WEFT_QK_K; e++) lanes[(e & 31) >> 2] += sc[e / 32] * (a[e] * x[i].qs[e]);
        const float d = x[i].d * h2f(w[i].d), dmin = -x[i].d * h2f(w[i].dmin);
        summs = fmaf(dmin, (float)summ, summs);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    return hsum_float_8(acc) + summs;
}

/* Q6_K x Q8_K: ggml_vec_dot_q6_K_q8_K, AVX2 branch (no x86 repack for
 * Q6_K), as rewritten by llama.cpp PR #22345 (April 2026, "optimize avx2
 * q6_k"): the 6-bit values are used unsigned (0..63) and the -32 offset is
 * taken off afterwards through the activation's bsums. Within each 32-element
 * chunk, int32 lane l gets elements 4l..4l+3 (maddubs pairs, then madd with
 * the 16-element scales), so over the block lane l sums the elements e with
 * (e % 32) / 4 == l. The offset term is one madd of the 16 bsums with the 16
 * scales, shifted left by 5: lane l holds
 * 32 * (bsums[2l]*sc[2l] + bsums[2l+1]*sc[2l+1]), i.e. the offset of 32-element
 * sub-block l, which is subtracted lane-wise from the sums. All of this is
 * exact int arithmetic, but it distributes the block's integer total over the
 * 8 lanes differently from the older code (which subtracted 32*q8 per element
 * pair), and the lanes are what the float steps see: each block adds
 * fma(d, float(lane), acc) with d = y.d * x.d; then hsum_float_8. */
static float dot_q6_k(const struct weft_block_q6_k *w, const struct weft_block_q8_k *x, int64_t nb)
{
    float acc[8] = {0};
    int8_t a[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++) {
        q6_k_unpack(&w[i], a);
        const int8_t *sc = w[i].scales;
        int32_t lanes[8] = {0};
        for (int e = 0; e < WEFT_QK_K; e++)
            lanes[(e & 31) >> 2] += sc[e / 16] * ((a[e] + 32) * x[i].qs[e]);
        for (int l = 0; l < 8; l++)
            lanes[l] -= (x[i].bsums[2 * l] * sc[2 * l] + x[i].bsums[2 * l + 1] * sc[2 * l + 1]) * 32;
        float d = x[i].d * h2f(w[i].d);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    return hsum_float_8(acc);
}

float weft_vec_dot(enum weft_type wtype, const void *w, const void *x, int64_t n)
{
    int64_t nb = n_blocks(wtype, n);
    switch (wtype) {
    case WEFT_TYPE_F32: return dot_f32(w, x, n);
    case WEFT_TYPE_F16: return dot_f16(w, x, n);
    case WEFT_TYPE_BF16: return dot_bf16(w, x, n);
    case WEFT_TYPE_Q4_0: return dot_q4_0(w, x, nb);
    case WEFT_TYPE_Q4_1: return dot_q4_1(w, x, nb);
    case WEFT_TYPE_Q5_0: return dot_q5_0(w, x, nb);
    case WEFT_TYPE_Q5_1: return dot_q5_1(w, x, nb);
    case WEFT_TYPE_Q8_0: return dot_q8_0(w, x, nb);
    case WEFT_TYPE_Q4_K: return dot_q4_k(w, x, nb);
    case WEFT_TYPE_Q5_K: return dot_q5_k(w, x, nb);
    case WEFT_TYPE_Q6_K: return dot_q6_k(w, x, nb);
    default: assert(!"weft_vec_dot: not a weight type"); return 0.0f;
    }
}

/* Dot product as ggml computes it inside a matmul of n_xrows activation rows
 * by n_wrows weight rows of k elements. For one activation row (decode)
 * ggml's mul_mat always calls the type's vec_dot (weft_vec_dot). For two or
 * more rows (prefill) llamafile_sgemm (ggml-cpu/llamafile/sgemm.cpp) takes
 * over for some types, with its own accumulation order:
 *  - Q8_0, Q5_0 (and Q4_0 when not repacked): tinyBLAS_Q0_AVX keeps one
 *    __m256 accumulator per output and adds fma(dA*dB, updot lanes) per block,
 *    the same float order as the AVX2 vec_dot, so weft_vec_dot serves both;
 *  - F32: tinyBLAS<16, __m512, __m512, float>: one 16-lane accumulator per
 *    output, element e in lane e%16, _mm512_fmadd_ps over 16-element chunks,
 *    then _mm512_reduce_add_ps (stories260K: wq/wk/wv/wo/w1/w3 and the head
 *    during prefill; w2 has k = n_ff = 172, not a multiple of 16: vec_dot);
 *  - F16: tinyBLAS<16, __m512>: one 16-lane accumulator per output, element e
 *    in lane e%16, _mm512_fmadd_ps over 16-element chunks, then
 *    _mm512_reduce_add_ps (vs. 4 accumulators in the vec_dot);
 *  - BF16: tinyBLAS<32, __m512, __m512bh>: one accumulator, _mm512_dpbf16_ps
 *    over 32-element chunks (lane l: elements 2l+1 then 2l), reduce_add.
 * tinyBLAS needs n_wrows % 4 == 0 and k a multiple of its chunk, else ggml
 * falls back to vec_dot. (llama.cpp runs the last layer's FFN and the output
 * head on the last token only, i.e. with one row.) */
float weft_vec_dot_mm(enum weft_type wtype, const void *w, const void *x, int64_t k, int64_t n_wrows,
                      int64_t n_xrows)
{
    if (n_xrows >= 2 && n_wrows % 4 == 0) {
        if (wtype == WEFT_TYPE_F32 && k % 16 == 0) {
            const float *a = w, *b = x;
            float acc[16];
            for (int l = 0; l < 16; l++) {
                float c = 0.0f;
                for (int64_t i = l; i < k; i += 16) c = fmaf(a[i], b[i], c);
                acc[l] = c;
            }
            return reduce_add_16(acc);
        }
        if (wtype == WEFT_TYPE_F16 && k % 16 == 0) {
            const weft_half *a = w, *b = x;
            float acc[16];
            for (int l = 0; l < 16; l++) {
                float c = 0.0f;
                for (int64_t i = l; i < k; i += 16) c = fmaf(h2f(a[i]), h2f(b[i]), c);
                acc[l] = c;
            }
            return reduce_add_16(acc);
        }
        if (wtype == WEFT_TYPE_BF16 && k % 32 == 0) {
            const weft_bf16 *a = w, *b = x;
            float acc[16];
            for (int l = 0; l < 16; l++) {
                float c = 0.0f;
                for (int64_t i = 2 * l; i < k; i += 32) c = dpbf16_step(c, a + i, b + i);
                acc[l] = c;
            }
            return reduce_add_16(acc);
        }
    }
    return weft_vec_dot(wtype, w, x, k);
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
