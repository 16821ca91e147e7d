/* The CPU backend's reference dot products: scalar, portable C that follows
 * the floating-point order of the x86 SIMD kernels ggml's CPU backend runs
 * (AVX2/AVX-512 with VNNI and BF16, as on the machine that produced
 * ../shared/golden/), lane by lane. They are the oracle for this backend's
 * SIMD kernels and its scalar table (WEFT_CPU_ISA=scalar runs them), which is
 * how the CPU backend matches llama.cpp's logprobs exactly. Integer partial
 * sums are exact in any order; only the float steps are mirrored.
 *
 * The activation row x has already been quantized to weft_vec_dot_type(wtype)
 * by weft_quantize_row_act (base/quant.h). No function allocates or fails. */
#ifndef WEFT_CPU_REF_H
#define WEFT_CPU_REF_H

#include "base/types.h"

/* Dot product of one weight row (type wtype, n elements) with one activation
 * row: integer arithmetic inside blocks, float across blocks, in the order of
 * ggml's x86 vec_dot kernel for wtype. */
float weft_vec_dot(enum weft_type wtype, const void *w, const void *x, int64_t n);

/* weft_vec_dot for one element of a matmul of n_wrows weight rows by
 * n_xrows activation rows: the same value up to float summation order, in
 * the order ggml's CPU backend uses for that shape (llamafile's tinyBLAS for
 * several F16/BF16 rows, the vec_dot kernels otherwise). */
float weft_vec_dot_mm(enum weft_type wtype, const void *w, const void *x, int64_t k, int64_t n_wrows,
                      int64_t n_xrows);

/* _mm512_reduce_add_ps's order (GCC and clang): halves 512->256->128->64->32 */
static inline float weft_cpu_reduce_add_16(const float x[16])
{
    float t[8], u[4];
    for (int i = 0; i < 8; i++) t[i] = x[i] + x[i + 8];
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

#endif
