/* Reference quantizers of the K-quants, IQ4_NL/IQ4_XS and MXFP4 (see base/quant_k.h).
 *
 * Bit-identical output with llama-quantize is the contract, so every search
 * below keeps ggml's float order: each sum accumulates left to right in float,
 * a product of three factors is evaluated as (a*b)*c, every comparison is the
 * same strict/non-strict one, and ties go the same way. The project builds
 * with -ffp-contract=off, so nothing here is fused into an fma (ggml-base,
 * where these quantizers live upstream, is built for the baseline ISA: no fma
 * either). Rewriting any expression "equivalently" changes output bytes. */
#include "base/quant_k.h"
#include "base/quant_blocks.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* A group whose largest magnitude is below this is all zero (ggml's GROUP_MAX_EPS). */
#define ZERO_GROUP 1e-15f

static inline float h2f(weft_half h) { return weft_half_to_f32(h); }
static inline weft_half f2h(float f) { return weft_f32_to_half(f); }
/* the scale as the block stores it and every reader sees it */
static inline float as_half(float f) { return h2f(f2h(f)); }

/* Round to nearest, ties to even, by the 1.5*2^23 trick (ggml's nearest_int).
 * Valid for |f| < 2^22; outside that it returns the same wrapped value as
 * ggml's (which only asserts in debug builds), so even degenerate groups match. */
static inline int round_ne(float f)
{
    float v = f + 12582912.f;
    uint32_t i = weft_f32_bits(v);
    return (int)(i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---------------------------------------------------------------------------
 * Scale searches (ggml's make_qkx2_quants, make_q3_quants, make_qx_quants). */

/* Asymmetric fit x ~ scale * L + lo with L in [0, nmax] and lo <= 0, weighted
 * by w; the error is |e| (abs_err) or e^2. Starting from the range, it tries
 * nstep + 1 inverse scales (rmin + rdelta * k + nmax) / range, refits scale
 * and offset to each one's levels by weighted least squares, and keeps the
 * best. Returns the scale; *neg_lo = -lo (the min as a positive number). */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_lo,
                           uint8_t *Ltry, float rmin, float rdelta, int nstep, bool abs_err)
{
    float lo = x[0], hi = x[0];
    float sw = w[0];
    float sx = sw * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sw += w[i];
        sx += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_lo = -lo;
        return 0.f;
    }
    float iscale = nmax / (hi - lo);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(round_ne(iscale * (x[i] - lo)), 0, nmax);
        float e = scale * L[i] + lo - x[i];
        e = abs_err ? fabsf(e) : e * e;
        best += w[i] * e;
    }
    if (nstep < 1) {
        *neg_lo = -lo;
        return scale;
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * k + nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_ne(iscale * (x[i] - lo)), 0, nmax);
            Ltry[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        float det = sw * sl2 - sl * sl;
        if (!(det > 0)) continue;
        float s = (sw * sxl - sx * sl) / det;
        float m = (sl2 * sx - sl * sxl) / det;
        if (m > 0) {
            m = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float e = s * Ltry[i] + m - x[i];
            e = abs_err ? fabsf(e) : e * e;
            err += w[i] * e;
        }
        if (err < best) {
            memcpy(L, Ltry, (size_t)n);
            best = err;
            scale = s;
            lo = m;
        }
    }
    *neg_lo = -lo;
    return scale;
}

/* Symmetric fit with levels l in [-nmax, nmax-1], the largest magnitude at
 * -nmax, weighted by x^2: start from that scale, then up to 5 passes of
 * coordinate descent that move one level at a time when it raises
 * (sum w x l)^2 / (sum w l^2). L gets l + nmax. Returns the least-squares scale. */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < ZERO_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sxl = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_ne(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sxl += w * x[i] * l;
        sl2 += w * l * l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float sxl_i = sxl - w * x[i] * L[i];
            if (!(sxl_i > 0)) continue;
            float sl2_i = sl2 - w * L[i] * L[i];
            int l = clampi(round_ne(x[i] * sl2_i / sxl_i), -nmax, nmax - 1);
            if (l == L[i]) continue;
            sxl_i += w * x[i] * l;
            sl2_i += w * l * l;
            if (sl2_i > 0 && sxl_i * sxl_i * sl2 > sxl * sxl * sl2_i) {
                L[i] = (int8_t)l;
                sxl = sxl_i;
                sl2 = sl2_i;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sl2 > 0.0f ? sxl / sl2 : 0.0f;
}

/* Levels l = round(iscale * x) clamped to [-nmax, nmax-1], with their
 * x^2-weighted sums (Q6_K's objective, ggml's make_qx_quants rmse_type 1). */
static void qx_levels(int n, int nmax, const float *x, float iscale, int8_t *L, float *sxl, float *sl2)
{
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_ne(iscale * x[i]), -nmax, nmax - 1);
        if (L) L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        a += w * x[i] * l;
        b += w * l * l;
    }
    *sxl = a;
    *sl2 = b;
}

/* Symmetric fit for Q6_K: the largest magnitude at -nmax, then the 18 inverse
 * scales -(nmax + k/10)/max (k = -9..9, k != 0), keeping the one with the
 * largest (sum w x l)^2 / (sum w l^2); scale = its least-squares value. */
static float fit_scale_qx(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < ZERO_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float sxl, sl2;
    qx_levels(n, nmax, x, -nmax / max, L, &sxl, &sl2);
    float scale = sl2 ? sxl / sl2 : 0.0f;
    float best = scale * sxl;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        float iscale = -(nmax + 0.1f * k) / max;
        qx_levels(n, nmax, x, iscale, NULL, &sxl, &sl2);
        if (sl2 > 0 && sxl * sxl > best * sl2) {
            qx_levels(n, nmax, x, iscale, L, &sxl, &sl2);
            scale = sxl / sl2;
            best = scale * sxl;
        }
    }
    return scale;
}

/* ---------------------------------------------------------------------------
 * Packing helpers shared by the formats. */

/* Q2_K/Q3_K: element 128c + 32k + l (2-bit level) goes to bits 2k..2k+1 of qs[32c + l]. */
static void pack_2bit(const uint8_t *L, uint8_t qs[WEFT_QK_K / 4])
{
    for (int c = 0; c < WEFT_QK_K; c += 128)
        for (int l = 0; l < 32; l++)
            qs[c / 4 + l] = (uint8_t)(L[c + l] | L[c + l + 32] << 2 | L[c + l + 64] << 4 | L[c + l + 96] << 6);
}

/* Q4_K/Q5_K: 8 six-bit scales and mins into 12 bytes (inverse of weft_k4_scale_min). */
static void pack_k4_scales(uint8_t q[WEFT_K_SCALE_SIZE], const uint8_t *ls, const uint8_t *lm)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(ls[j] | (ls[j + 4] >> 4) << 6);
        q[j + 4] = (uint8_t)(lm[j] | (lm[j + 4] >> 4) << 6);
        q[j + 8] = (uint8_t)((ls[j + 4] & 0xF) | (lm[j + 4] & 0xF) << 4);
    }
}

/* ---------------------------------------------------------------------------
 * Q2_K: 16 groups of 16, each fitted as scale * L + min (L in 0..3, least
 * absolute error weighted by |x|); scales and mins quantized to 4 bits against
 * their maxima, then the levels redone against the stored values. */
void weft_quant_q2_k(const float *x, struct weft_block_q2_k *y, int64_t nb)
{
    uint8_t L[WEFT_QK_K], Ltry[16];
    float w[16], scales[16], mins[16];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        struct weft_block_q2_k *b = &y[i];
        float max_scale = 0, max_min = 0;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * g + l]);
            scales[g] = fit_scale_min(16, 3, x + 16 * g, w, L + 16 * g, &mins[g], Ltry, -0.5f, 0.1f, 15, true);
            if (scales[g] > max_scale) max_scale = scales[g];
            if (mins[g] > max_min) max_min = mins[g];
        }
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int g = 0; g < 16; g++) b->scales[g] = (uint8_t)round_ne(iscale * scales[g]);
            b->d = f2h(max_scale / 15.f);
        } else {
            memset(b->scales, 0, sizeof b->scales);
            b->d = f2h(0.f);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int g = 0; g < 16; g++) b->scales[g] |= (uint8_t)(round_ne(iscale * mins[g]) << 4);
            b->dmin = f2h(max_min / 15.f);
        } else {
            b->dmin = f2h(0.f);
        }
        for (int g = 0; g < 16; g++) {
            float d = h2f(b->d) * (b->scales[g] & 0xF);
            if (!d) continue;
            float dm = h2f(b->dmin) * (b->scales[g] >> 4);
            for (int l = 0; l < 16; l++) L[16 * g + l] = (uint8_t)clampi(round_ne((x[16 * g + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, b->qs);
    }
}

/* ---------------------------------------------------------------------------
 * Q3_K: 16 groups of 16, symmetric 3-bit levels (-4..3) per group
 * (fit_scale_q3), the 16 group scales to 6 bits against the one of largest
 * magnitude (stored d = max / -32), then the levels redone. */
void weft_quant_q3_k(const float *x, struct weft_block_q3_k *y, int64_t nb)
{
    int8_t L[WEFT_QK_K];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        struct weft_block_q3_k *b = &y[i];
        float max_scale = 0, amax = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_q3(16, 4, x + 16 * g, L + 16 * g);
            float a = fabsf(scales[g]);
            if (a > amax) {
                amax = a;
                max_scale = scales[g];
            }
        }
        memset(b->scales, 0, sizeof b->scales);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int g = 0; g < 16; g++) {
                int8_t l = (int8_t)round_ne(iscale * scales[g]);
                int q = clampi(l, -32, 31) + 32; /* 0..63: nibble g/8 of byte g%8, 2 bits in byte 8 + g%4 */
                b->scales[g % 8] |= (uint8_t)((q & 0xF) << (4 * (g / 8)));
                b->scales[8 + g % 4] |= (uint8_t)((q >> 4) << (2 * (g / 4)));
            }
            b->d = f2h(1 / iscale);
        } else {
            b->d = f2h(0.f);
        }
        int8_t sc[16];
        weft_q3_k_scales(b->scales, sc);
        for (int g = 0; g < 16; g++) {
            float d = h2f(b->d) * sc[g];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * g + l] = (int8_t)(clampi(round_ne(x[16 * g + l] / d), -4, 3) + 4);
        }
        /* the 3rd bit of element e is bit e/32 of hmask[e%32]; the low 2 bits as Q2_K's */
        memset(b->hmask, 0, sizeof b->hmask);
        uint8_t low[WEFT_QK_K];
        for (int e = 0; e < WEFT_QK_K; e++) {
            int l = L[e];
            if (l > 3) {
                b->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                l -= 4;
            }
            low[e] = (uint8_t)l;
        }
        pack_2bit(low, b->qs);
    }
}

/* ---------------------------------------------------------------------------
 * Q4_K / Q5_K: 8 groups of 32 fitted as scale * L + min (squared error
 * weighted by rms(group) + |x|); scales and mins to 6 bits against their
 * maxima (d = max / 63), then the levels redone against the stored values. */
static void quant_k45(const float *x, int nmax, float rmin, int nstep, weft_half *hd, weft_half *hdmin,
                      uint8_t scales_packed[WEFT_K_SCALE_SIZE], uint8_t L[WEFT_QK_K])
{
    uint8_t Ltry[32];
    float w[32], scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int g = 0; g < 8; g++) {
        const float *xg = x + 32 * g;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xg[l] * xg[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xg[l]);
        scales[g] = fit_scale_min(32, nmax, xg, w, L + 32 * g, &mins[g], Ltry, rmin, 0.1f, nstep, false);
        if (scales[g] > max_scale) max_scale = scales[g];
        if (mins[g] > max_min) max_min = mins[g];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int g = 0; g < 8; g++) {
        uint8_t s = (uint8_t)round_ne(inv_scale * scales[g]);
        uint8_t m = (uint8_t)round_ne(inv_min * mins[g]);
        ls[g] = s < 63 ? s : 63;
        lm[g] = m < 63 ? m : 63;
    }
    pack_k4_scales(scales_packed, ls, lm);
    *hd = f2h(max_scale / 63.f);
    *hdmin = f2h(max_min / 63.f);
    for (int g = 0; g < 8; g++) {
        uint8_t sc, m;
        weft_k4_scale_min(g, scales_packed, &sc, &m);
        float d = h2f(*hd) * sc;
        if (!d) continue;
        float dm = h2f(*hdmin) * m;
        for (int l = 0; l < 32; l++) L[32 * g + l] = (uint8_t)clampi(round_ne((x[32 * g + l] + dm) / d), 0, nmax);
    }
}

void weft_quant_q4_k(const float *x, struct weft_block_q4_k *y, int64_t nb)
{
    uint8_t L[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        struct weft_block_q4_k *b = &y[i];
        quant_k45(x, 15, -1.f, 20, &b->d, &b->dmin, b->scales, L);
        /* chunk c of 64: low nibbles sub-block 2c, high nibbles sub-block 2c+1 */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + l + 32] << 4);
    }
}

void weft_quant_q5_k(const float *x, struct weft_block_q5_k *y, int64_t nb)
{
    uint8_t L[WEFT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        struct weft_block_q5_k *b = &y[i];
        quant_k45(x, 31, -0.5f, 15, &b->d, &b->dmin, b->scales, L);
        /* as Q4_K's nibbles; the 5th bit of sub-block s's element l is bit s of qh[l] */
        memset(b->qh, 0, sizeof b->qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * c + l], hi = L[64 * c + l + 32];
                if (lo > 15) {
                    lo -= 16;
                    b->qh[l] |= (uint8_t)(1u << (2 * c));
                }
                if (hi > 15) {
                    hi -= 16;
                    b->qh[l] |= (uint8_t)(2u << (2 * c));
                }
                b->qs[32 * c + l] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

/* ---------------------------------------------------------------------------
 * Q6_K: 16 groups of 16 with symmetric 6-bit levels (fit_scale_qx), the group
 * scales to signed 8 bits against the one of largest magnitude
 * (d = max / -128), then the levels redone. */
void weft_quant_q6_k(const float *x, struct weft_block_q6_k *y, int64_t nb)
{
    int8_t L[WEFT_QK_K];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        struct weft_block_q6_k *b = &y[i];
        float max_scale = 0, max_abs = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_qx(16, 32, x + 16 * g, L + 16 * g);
            float a = fabsf(scales[g]);
            if (a > max_abs) {
                max_abs = a;
                max_scale = scales[g];
            }
        }
        if (max_abs < ZERO_GROUP) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float iscale = -128.f / max_scale;
        b->d = f2h(1 / iscale);
        for (int g = 0; g < 16; g++) {
            int s = round_ne(iscale * scales[g]);
            b->scales[g] = (int8_t)(s < 127 ? s : 127);
        }
        for (int g = 0; g < 16; g++) {
            float d = h2f(b->d) * b->scales[g];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * g + l] = (int8_t)(clampi(round_ne(x[16 * g + l] / d), -32, 31) + 32);
        }
        /* the inverse of weft_q6_k_unpack */
        for (int h = 0; h < 2; h++) {
            const int8_t *q = L + 128 * h;
            uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((q[l] & 0xF) | (q[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((q[l + 32] & 0xF) | (q[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)(q[l] >> 4 | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ---------------------------------------------------------------------------
 * IQ4_NL / IQ4_XS: levels from the non-linear code book. */

static const int8_t iq4_values[16] = WEFT_KVALUES_IQ4NL;

/* Index of the code-book value nearest to v (ties to the larger one): v picks
 * level k once 2v reaches values[k-1] + values[k], both sides exact in float. */
static inline int iq4_index(float v)
{
    float v2 = v + v;
    int k = 0;
    for (int step = 8; step > 0; step >>= 1) {
        int j = k + step;
        if (v2 >= (float)(iq4_values[j - 1] + iq4_values[j])) k = j;
    }
    return k;
}

/* One group of 32: the scale d maximising (sum w q x)^2 / (sum w q^2) over the
 * code-book levels (w = x^2), trying the largest magnitude on the code book's
 * end and 15 inverse scales (k + values[0]) / max, k = -7..7. Levels in L. */
static float iq4_group_scale(const float *x, uint8_t *L)
{
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax < ZERO_GROUP) {
        memset(L, 0, 32);
        return 0;
    }
    float d = -max / iq4_values[0];
    float id = 1 / d;
    float sqx = 0, sq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = iq4_index(id * x[j]);
        L[j] = (uint8_t)l;
        float q = iq4_values[l];
        float w = x[j] * x[j];
        sqx += w * q * x[j];
        sq2 += w * q * q;
    }
    d = sq2 > 0 ? sqx / sq2 : 0.f;
    float best = d * sqx;
    for (int k = -7; k <= 7; k++) {
        id = (k + iq4_values[0]) / max;
        sqx = sq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = iq4_values[iq4_index(id * x[j])];
            float w = x[j] * x[j];
            sqx += w * q * x[j];
            sq2 += w * q * q;
        }
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    return d;
}

/* 32 levels into 16 bytes: low nibbles elements 0..15, high nibbles 16..31 */
static void pack_nibbles32(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

void weft_quant_iq4_nl(const float *x, struct weft_block_iq4_nl *y, int64_t nb)
{
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK4_NL) {
        float d = iq4_group_scale(x, L);
        y[i].d = f2h(d);
        /* the levels again against the unrounded scale (the search's own may be another trial's) */
        float id = d ? 1 / d : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(id * x[j]);
        pack_nibbles32(L, y[i].qs);
    }
}

/* IQ4_XS: 8 groups of 32 as IQ4_NL's, their scales to signed 6 bits against
 * the one of largest magnitude (d = max / -32), then the levels redone
 * against d * l (unrounded d). */
void weft_quant_iq4_xs(const float *x, struct weft_block_iq4_xs *y, int64_t nb)
{
    uint8_t L[WEFT_QK_K];
    float scales[8];
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_K) {
        struct weft_block_iq4_xs *b = &y[i];
        float max_scale = 0, amax_scale = 0;
        for (int g = 0; g < 8; g++) {
            scales[g] = iq4_group_scale(x + 32 * g, L + 32 * g);
            float a = fabsf(scales[g]);
            if (a > amax_scale) {
                amax_scale = a;
                max_scale = scales[g];
            }
        }
        float d = -max_scale / 32;
        b->d = f2h(d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        float id = d ? 1 / d : 0.f;
        for (int g = 0; g < 8; g++) {
            int l = clampi(round_ne(id * scales[g]), -32, 31);
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * g + j] = (uint8_t)iq4_index(idl * x[32 * g + j]);
            l += 32;
            b->scales_l[g / 2] |= (uint8_t)((l & 0xF) << (4 * (g % 2)));
            b->scales_h |= (uint16_t)((l >> 4) << (2 * g));
        }
        for (int g = 0; g < 8; g++) pack_nibbles32(L + 32 * g, b->qs + 16 * g);
    }
}

/* ---------------------------------------------------------------------------
 * MXFP4: a power-of-two scale 2^(floor(log2(amax)) - 2) (so amax lands in the
 * code book's top octave, 4..8 times the scale, where E2M1 reaches 6), each
 * element to the code nearest to it (first on ties: +0 before -0). */
static const int8_t mxfp4_values[16] = WEFT_KVALUES_MXFP4;

void weft_quant_mxfp4(const float *x, struct weft_block_mxfp4 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += WEFT_QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < WEFT_QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* log2f, not the exponent bits: just below a power of two it rounds up, as ggml's does */
        uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        float d = weft_e8m0_to_f32_half(e);
        y[i].e = e;
        uint8_t L[WEFT_QK_MXFP4];
        for (int j = 0; j < WEFT_QK_MXFP4; j++) {
            int best = 0;
            float best_err = fabsf(mxfp4_values[0] * d - x[j]);
            for (int k = 1; k < 16; k++) {
                float err = fabsf(mxfp4_values[k] * d - x[j]);
                if (err < best_err) {
                    best = k;
                    best_err = err;
                }
            }
            L[j] = (uint8_t)best;
        }
        pack_nibbles32(L, y[i].qs);
    }
}
