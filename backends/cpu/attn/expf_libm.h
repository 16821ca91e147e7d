/* glibc's expf (2.27 and later: ARM optimized-routines' expf, the one the
 * CPU softmax calls), step for step in double as glibc computes it, for the
 * SIMD attention rows (expf_libm512.h: 16 lanes on AVX-512, expf_libm256.h:
 * 8 lanes on AVX2; shaders/expf_libm.glsl describes the same steps for the
 * Vulkan exact attention). With N = 32:
 *   z = x * N/ln2, kd = (z + 1.5*2^52) - 1.5*2^52 (z rounded to an integer,
 *   ties to even), r = z - kd, s = 2^(k/N) from the table of 2^(i/N) whose
 *   bits have i << 47 taken off (adding k << 47 then scales by
 *   2^floor(k/N)), y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) (glibc's FMA
 *   build contracts those three steps), result float(y * s);
 *   -inf -> 0, NaN and +inf -> x + x, x > 88.72 -> inf, x < -103.97 -> 0.
 * Whether a SIMD form equals the libm this process runs on is not assumed:
 * weft_cpu_vexpf_matches_libm() compares it on a sweep of inputs, and the
 * attention kernels call it only where that holds (libm's expf otherwise). */
#ifndef WEFT_CPU_EXPF_LIBM_H
#define WEFT_CPU_EXPF_LIBM_H

#include <stdbool.h>
#include <stdint.h>

static const uint64_t weft_expf_tab[32] __attribute__((aligned(64))) = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

/* glibc's polynomial and reduction constants (N = 32) */
#define WEFT_EXPF_INVLN2N (0x1.71547652b82fep+0 * 32)
#define WEFT_EXPF_SHIFT 0x1.8p52
#define WEFT_EXPF_C0 (0x1.c6af84b912394p-5 / 32 / 32 / 32)
#define WEFT_EXPF_C1 (0x1.ebfce50fac4f3p-3 / 32 / 32)
#define WEFT_EXPF_C2 (0x1.62e42ff0c52d6p-1 / 32)
/* glibc's special-case bounds: |x| >= 88 is top12 >= 0x42b; over, under */
#define WEFT_EXPF_TOP_BIG 0x42b
#define WEFT_EXPF_OVER 0x1.62e42ep6f
#define WEFT_EXPF_UNDER (-0x1.9fe368p6f)

/* Whether exp16 (16 lanes in, 16 out) equals this process's libm expf: every
 * float in [-104, 0] at a stride, a stretch of consecutive floats near 0, -1
 * and -88, and the special values (attn/expf_check.c). */
bool weft_cpu_vexpf_matches_libm(void (*exp16)(const float *in, float *out));

#endif
