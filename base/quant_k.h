/* File quantizers of the super-block formats (Q2_K..Q6_K), the non-linear 4-bit
 * formats (IQ4_NL, IQ4_XS) and MXFP4: the reference search llama-quantize runs
 * when it has no importance matrix, element for element and in its float order
 * (plain float ops in source order, no fused multiply-adds; ggml's quantizers
 * live in ggml-base, built without -march), so a row quantized here has the
 * bytes llama-quantize writes for it. base/quant.c's weft_quantize_row is the
 * entry point; these are its helpers, one per type.
 *
 * x holds nb blocks of the type's block size (256 for the K-quants and IQ4_XS,
 * 32 for IQ4_NL and MXFP4); y receives nb blocks. Every block is quantized on
 * its own, so a row may be split anywhere on a block boundary. Nothing is
 * allocated and nothing fails: non-finite input gives unspecified bytes. */
#ifndef WEFT_QUANT_K_H
#define WEFT_QUANT_K_H

#include "base/types.h"

void weft_quant_q2_k(const float *x, struct weft_block_q2_k *y, int64_t nb);
void weft_quant_q3_k(const float *x, struct weft_block_q3_k *y, int64_t nb);
void weft_quant_q4_k(const float *x, struct weft_block_q4_k *y, int64_t nb);
void weft_quant_q5_k(const float *x, struct weft_block_q5_k *y, int64_t nb);
void weft_quant_q6_k(const float *x, struct weft_block_q6_k *y, int64_t nb);
/* IQ4_NL and IQ4_XS as ggml's quantize_iq4_nl / quantize_iq4_xs with no
 * importance matrix (what llama-quantize calls: 7 trial scales either side of
 * the first guess). ggml's quantize_row_iq4_nl_ref is another search (no
 * trials, the first guess's sign flipped); its IQ4_XS ref is this one. */
void weft_quant_iq4_nl(const float *x, struct weft_block_iq4_nl *y, int64_t nb);
void weft_quant_iq4_xs(const float *x, struct weft_block_iq4_xs *y, int64_t nb);
void weft_quant_mxfp4(const float *x, struct weft_block_mxfp4 *y, int64_t nb);

#endif
