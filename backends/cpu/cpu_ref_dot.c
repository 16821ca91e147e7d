/* The CPU backend's reference dot products (see cpu_ref.h): portable C that
 * evaluates each dot product in the floating-point order of the x86 SIMD
 * kernel ggml's CPU backend runs for it, so weft's CPU results match
 * llama.cpp's outputs (../shared/golden/) bit for bit. The block layouts and
 * the file quantizers are base/'s (base/quant.h); the arithmetic order is
 * this backend's. */
#include "backends/cpu/cpu_ref.h"

#include <assert.h>
#include <math.h>

#include "base/quant.h"
#include "base/quant_blocks.h"

static inline float h2f(weft_half h) { return weft_half_to_f32(h); }

static int64_t n_blocks(enum weft_type type, int64_t n)
{
    const struct weft_type_info *ti = weft_type_get((uint32_t)type);
    assert(ti && n >= 0 && n % ti->block_size == 0);
    return ti ? n / ti->block_size : 0;
}

/* Dot products. 32-element formats: exact int sum per block, then
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
        uint32_t qh = weft_qh_load(w[i].qh);
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
        uint32_t qh = weft_qh_load(w[i].qh);
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
    double s = weft_cpu_reduce_add_16(r);
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
    float s = weft_cpu_reduce_add_16(r);
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
    s += (double)weft_cpu_reduce_add_16(c1);
    s += (double)weft_cpu_reduce_add_16(c2);
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
        weft_k4_scale_min(j, scales, &s, &m);
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
        weft_q6_k_unpack(&w[i], a);
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

/* Q2_K x Q8_K: ggml_vec_dot_q2_K_q8_K, AVX2 branch. Per block, first the mins: int32 lane l
 * is mins[2l] * bsums[2l] + mins[2l+1] * bsums[2l+1] (one madd of the 16 four-bit mins with
 * the 16 bsums), added as acc[l] = fma(dmin, lane, acc[l]) with dmin = -y.d * x.dmin; then the
 * quants: lane l sums sc[e/16] * q(e) * q8(e) over the elements e with (e % 32) / 4 == l
 * (maddubs pairs, madd with the scales), acc[l] = fma(d, lane, acc[l]), d = y.d * x.d. */
static float dot_q2_k(const struct weft_block_q2_k *w, const struct weft_block_q8_k *x, int64_t nb)
{
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        const float d = x[i].d * h2f(w[i].d), dmin = -x[i].d * h2f(w[i].dmin);
        int32_t lanes[8] = {0};
        for (int l = 0; l < 8; l++)
            lanes[l] = (w[i].scales[2 * l] >> 4) * x[i].bsums[2 * l] + (w[i].scales[2 * l + 1] >> 4) * x[i].bsums[2 * l + 1];
        for (int l = 0; l < 8; l++) acc[l] = fmaf(dmin, (float)lanes[l], acc[l]);
        for (int l = 0; l < 8; l++) lanes[l] = 0;
        for (int e = 0; e < WEFT_QK_K; e++)
            lanes[(e & 31) >> 2] += (w[i].scales[e / 16] & 0xF) * (weft_q2_bits(w[i].qs, e) * x[i].qs[e]);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    return hsum_float_8(acc);
}

/* Q3_K x Q8_K: ggml_vec_dot_q3_K_q8_K, AVX2 branch: lane l sums (sc[e/16] - 32) * (q(e) - 4 *
 * !hbit(e)) * q8(e) over the elements e with (e % 32) / 4 == l (exact in int), then
 * acc[l] = fma(d, lane, acc[l]) with d = y.d * x.d, and hsum_float_8. */
static float dot_q3_k(const struct weft_block_q3_k *w, const struct weft_block_q8_k *x, int64_t nb)
{
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        const float d = x[i].d * h2f(w[i].d);
        int8_t sc[16];
        weft_q3_k_scales(w[i].scales, sc);
        int32_t lanes[8] = {0};
        for (int e = 0; e < WEFT_QK_K; e++) {
            int q = weft_q2_bits(w[i].qs, e) - (weft_q3_hbit(w[i].hmask, e) ? 0 : 4);
            lanes[(e & 31) >> 2] += sc[e / 16] * (q * x[i].qs[e]);
        }
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    return hsum_float_8(acc);
}

static const int8_t kvalues_iq4nl[16] = WEFT_KVALUES_IQ4NL;
static const int8_t kvalues_mxfp4[16] = WEFT_KVALUES_MXFP4;

/* The 32 code-book values of a nibble block (IQ4_NL, MXFP4): qs[j] low nibble is element j,
 * high nibble element j + 16 */
static inline void nl_unpack(const uint8_t qs[16], const int8_t kv[16], int v[32])
{
    for (int j = 0; j < 16; j++) {
        v[j] = kv[qs[j] & 0xF];
        v[j + 16] = kv[qs[j] >> 4];
    }
}

/* IQ4_NL and MXFP4 x Q8_0 (ggml_vec_dot_iq4_nl_q8_0 / ggml_vec_dot_mxfp4_q8_0, AVX2 branch):
 * blocks in pairs, the even block into accumulator 1 and the odd one into accumulator 2, each
 * acc[l] = fma(scale, float(lane l: elements 4l..4l+3), acc[l]); the sum is
 * hsum_float_8(acc1 + acc2, lane by lane); an odd last block is added after it as
 * sumf += scale * int, which GCC contracts to an fma. scale: IQ4_NL y.d * x.d, MXFP4
 * y.d * 2^(e-128). tinyBLAS (prefill, weft_vec_dot_mm) keeps one accumulator for IQ4_NL. */
static float dot_nl_pairs(const uint8_t *w, size_t bsz, const struct weft_block_q8_0 *x, int64_t nb, bool mx,
                          bool one_chain)
{
    float acc1[8] = {0}, acc2[8] = {0};
    int v[32];
    int64_t ib = 0;
    const int64_t paired = one_chain ? nb : nb & ~(int64_t)1;  /* ggml: for (; ib + 1 < nb; ib += 2) */
    for (; ib < paired; ib++) {
        const uint8_t *b = w + (size_t)ib * bsz;
        float s = mx ? h2f(x[ib].d) * weft_e8m0_to_f32_half(b[0])
                     : (one_chain ? h2f(((const struct weft_block_iq4_nl *)b)->d) * h2f(x[ib].d)
                                  : h2f(x[ib].d) * h2f(((const struct weft_block_iq4_nl *)b)->d));
        nl_unpack(mx ? ((const struct weft_block_mxfp4 *)b)->qs : ((const struct weft_block_iq4_nl *)b)->qs,
                  mx ? kvalues_mxfp4 : kvalues_iq4nl, v);
        block32_fma_lanes(one_chain || ib % 2 == 0 ? acc1 : acc2, v, x[ib].qs, s);
    }
    float sumf;
    if (one_chain) {
        sumf = hsum_float_8(acc1);
    } else {
        float a[8];
        for (int l = 0; l < 8; l++) a[l] = acc1[l] + acc2[l];
        sumf = hsum_float_8(a);
    }
    for (; ib < nb; ib++) {
        const uint8_t *b = w + (size_t)ib * bsz;
        float s = mx ? h2f(x[ib].d) * weft_e8m0_to_f32_half(b[0])
                     : h2f(x[ib].d) * h2f(((const struct weft_block_iq4_nl *)b)->d);
        nl_unpack(mx ? ((const struct weft_block_mxfp4 *)b)->qs : ((const struct weft_block_iq4_nl *)b)->qs,
                  mx ? kvalues_mxfp4 : kvalues_iq4nl, v);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += v[j] * x[ib].qs[j];
        sumf = ggml_scalar_madd(s, (float)sumi, sumf);
    }
    return sumf;
}

/* IQ4_XS x Q8_K: ggml_vec_dot_iq4_xs_q8_K, AVX2 branch: int32 lane l of a block sums, over
 * its 8 sub-blocks s, (sc_s - 32) * (elements 4l..4l+3 of s) (even and odd sub-blocks in two
 * int accumulators, added: exact); acc[l] = fma(x.d * y.d, float(lane), acc[l]); hsum. */
static float dot_iq4_xs(const struct weft_block_iq4_xs *w, const struct weft_block_q8_k *x, int64_t nb)
{
    float acc[8] = {0};
    int v[32];
    for (int64_t i = 0; i < nb; i++) {
        int32_t lanes[8] = {0};
        for (int s = 0; s < WEFT_QK_K / 32; s++) {
            nl_unpack(w[i].qs + 16 * s, kvalues_iq4nl, v);
            int ls = weft_iq4_xs_scale(&w[i], s);
            const int8_t *q8 = x[i].qs + 32 * s;
            for (int l = 0; l < 8; l++)
                lanes[l] += ls * (v[4 * l] * q8[4 * l] + v[4 * l + 1] * q8[4 * l + 1] + v[4 * l + 2] * q8[4 * l + 2] +
                                  v[4 * l + 3] * q8[4 * l + 3]);
        }
        const float d = h2f(w[i].d) * x[i].d;
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
    case WEFT_TYPE_Q2_K: return dot_q2_k(w, x, nb);
    case WEFT_TYPE_Q3_K: return dot_q3_k(w, x, nb);
    case WEFT_TYPE_IQ4_NL: return dot_nl_pairs(w, sizeof(struct weft_block_iq4_nl), x, nb, false, false);
    case WEFT_TYPE_IQ4_XS: return dot_iq4_xs(w, x, nb);
    case WEFT_TYPE_MXFP4: return dot_nl_pairs(w, sizeof(struct weft_block_mxfp4), x, nb, true, false);
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
 *    over 32-element chunks (lane l: elements 2l+1 then 2l), reduce_add;
 *  - IQ4_NL: tinyBLAS_Q0_AVX as Q8_0: one accumulator, fma(x.d * y.d, lanes), hsum
 *    (the vec_dot alternates two accumulators).
 * tinyBLAS needs n_wrows % 4 == 0 and k a multiple of its chunk, else ggml
 * falls back to vec_dot. (llama.cpp runs the last layer's FFN and the output
 * head on the last token only, i.e. with one row.) */
float weft_vec_dot_mm(enum weft_type wtype, const void *w, const void *x, int64_t k, int64_t n_wrows,
                      int64_t n_xrows)
{
    if (n_xrows >= 2 && wtype == WEFT_TYPE_IQ4_NL)
        return dot_nl_pairs(w, sizeof(struct weft_block_iq4_nl), x, k / WEFT_QK4_NL, false, true);
    if (n_xrows >= 2 && n_wrows % 4 == 0) {
        if (wtype == WEFT_TYPE_F32 && k % 16 == 0) {
            const float *a = w, *b = x;
            float acc[16];
            for (int l = 0; l < 16; l++) {
                float c = 0.0f;
                for (int64_t i = l; i < k; i += 16) c = fmaf(a[i], b[i], c);
                acc[l] = c;
            }
            return weft_cpu_reduce_add_16(acc);
        }
        if (wtype == WEFT_TYPE_F16 && k % 16 == 0) {
            const weft_half *a = w, *b = x;
            float acc[16];
            for (int l = 0; l < 16; l++) {
                float c = 0.0f;
                for (int64_t i = l; i < k; i += 16) c = fmaf(h2f(a[i]), h2f(b[i]), c);
                acc[l] = c;
            }
            return weft_cpu_reduce_add_16(acc);
        }
        if (wtype == WEFT_TYPE_BF16 && k % 32 == 0) {
            const weft_bf16 *a = w, *b = x;
            float acc[16];
            for (int l = 0; l < 16; l++) {
                float c = 0.0f;
                for (int64_t i = 2 * l; i < k; i += 32) c = dpbf16_step(c, a + i, b + i);
                acc[l] = c;
            }
            return weft_cpu_reduce_add_16(acc);
        }
    }
    return weft_vec_dot(wtype, w, x, k);
}
