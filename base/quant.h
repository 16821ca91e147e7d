/* Reference (scalar, portable) quantization kernels for every weft_type:
 * dequantization, ggml's reference file quantizers and the activation
 * quantizers, element for element as ggml's generic C code (the same block
 * layouts, element order and rounding). They follow no SIMD machine's
 * floating-point order: the dot products that do (ggml's x86 kernels, lane by
 * lane, the CPU backend's oracle) are backends/cpu/cpu_ref.h's.
 *
 * All lengths are element counts and must be multiples of the type's block
 * size (checked by callers; asserted here). No function allocates or fails. */
#ifndef WEFT_QUANT_H
#define WEFT_QUANT_H

#include "base/types.h"

/* dst[0..n) = dequantized src (one row of `type`). */
void weft_dequantize_row(enum weft_type type, const void *src, float *dst, int64_t n);

/* Quantize n floats into dst (weft_row_size(type, n) bytes), rounding the way
 * ggml's reference quantizers do (so results are bit-identical to ggml's).
 * Supported: F32, F16, BF16, Q8_0, Q8_1, Q4_0, Q4_1, Q5_0, Q5_1, Q8_K, and
 * (base/quant_k.c) Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 as
 * llama-quantize writes them without an importance matrix.
 * Returns false (and writes nothing) for types without a quantizer. */
bool weft_quantize_row(enum weft_type type, const float *src, void *dst, int64_t n);

/* Quantize activations for a matmul: like weft_quantize_row, but Q8_0/Q8_1
 * round as ggml's CPU backend does at run time (inverse scale 127/amax,
 * round half to even) rather than as its reference file quantizer. */
bool weft_quantize_row_act(enum weft_type type, const float *src, void *dst, int64_t n);

/* The activation type a weight type is multiplied with, as in ggml:
 * Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4 -> Q8_0, Q4_1/Q5_1 -> Q8_1,
 * Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS -> Q8_K,
 * F16 -> F16, BF16 -> BF16, F32 -> F32. */
enum weft_type weft_vec_dot_type(enum weft_type weight_type);

/* Float reference: sum_i dequant(w)[i] * x[i], accumulated in double (so in
 * no machine's order, and near every one's). Slow; for tests only. */
double weft_vec_dot_f32_ref(enum weft_type wtype, const void *w, const float *x, int64_t n);

#endif
