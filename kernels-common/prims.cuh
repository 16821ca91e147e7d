/* The primitives weft's type-generic device code is written against.
 *
 * The .cuh files in kernels-common/ hold device code that both the CUDA and
 * the HIP backends compile (block decoding, integer dot products, reductions,
 * the kernels themselves as templates). They never name a vendor intrinsic:
 * a backend's mapping header (kernels-cuda/cuda_prims.cuh,
 * kernels-hip/hip_prims.h) defines the functions below and then includes
 * this file, which checks they are there.
 *
 * Required from the mapping header (all __device__ inline):
 *   WEFT_DEV                          the function qualifier for helpers
 *   float    weft_h2f(uint16_t h)     IEEE half bits -> float (exact)
 *   uint16_t weft_f2h(float f)        float -> half bits, round to nearest even
 *   int      weft_dp4a(int a, int b, int c)   c + dot of the 4 signed bytes
 *   float    weft_shfl_xor(float v, int mask, int width)  butterfly exchange
 *   int      weft_shfl_xor_i(int v, int mask, int width)
 *   uint32_t weft_byte_perm(uint32_t x, uint32_t y, uint32_t s)   CUDA's __byte_perm:
 *                                     byte n (0..3) of the result is byte (s >> 4n) & 7 of
 *                                     the 8 bytes y:x (x's bytes are 0..3); other bits of s
 *                                     are ignored (the code-book lookups of dequant.cuh)
 *   WEFT_WARP_SIZE                    the hardware warp/wavefront size
 * and for the shared launchers (kernels-common/launch_*.cuh), the runtime:
 *   weft_stream_t                     its stream type (cudaStream_t, hipStream_t)
 *   int      weft_launch_error(void)  its last launch error, cleared (0: none)
 *   WEFT_LAUNCH_EINVAL                its invalid-value error code, as int
 * and, under the same names on both vendors: __uint_as_float,
 * __float2int_rn, expf/sqrtf/cosf/sinf/roundf/fmaf, threadIdx/blockIdx,
 * __syncthreads, __shared__ (and extern __shared__ arrays sized at launch),
 * atomicAdd on shared-memory ints, __global__.
 *
 * Sub-group width: every kernel here works in groups of 32 threads (one
 * 32-element quant block per group); reductions take the group width as a
 * template parameter, so a 64-wide wavefront runs two groups side by side. */
#ifndef WEFT_KC_PRIMS_CUH
#define WEFT_KC_PRIMS_CUH

#if !defined(WEFT_PRIMS_MAPPED)
#error "include your backend's mapping header (e.g. kernels-cuda/cuda_prims.cuh), not kernels-common directly"
#endif

/* base/types.h is C11 and uses _Static_assert, which C++ spells static_assert */
#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert
#define WEFT_KC_UNDEF_SA_
#endif
#include "base/types.h"
#include "backends/backend.h"   /* WEFT_KV_BLOCK_TOKENS, the paged-cache layout */
#ifdef WEFT_KC_UNDEF_SA_
#undef _Static_assert
#undef WEFT_KC_UNDEF_SA_
#endif

/* ---- reductions over a sub-group of W consecutive lanes (W a power of 2, W <= warp size) ---- */
template <int W> WEFT_DEV float weft_group_sum(float v)
{
#pragma unroll
    for (int m = W / 2; m > 0; m >>= 1) v += weft_shfl_xor(v, m, W);
    return v;
}

template <int W> WEFT_DEV float weft_group_max(float v)
{
#pragma unroll
    for (int m = W / 2; m > 0; m >>= 1) v = fmaxf(v, weft_shfl_xor(v, m, W));
    return v;
}

template <int W> WEFT_DEV int weft_group_sum_i(int v)
{
#pragma unroll
    for (int m = W / 2; m > 0; m >>= 1) v += weft_shfl_xor_i(v, m, W);
    return v;
}

/* ---- unaligned-safe loads: every weft block is a whole number of 2-byte
 * words and rows start 2-byte aligned, but 18/34-byte blocks put 4-byte
 * fields at 2-byte boundaries ---- */
WEFT_DEV uint32_t weft_ld_u32_a2(const uint8_t *p)
{
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

WEFT_DEV float weft_ld_half(const uint8_t *p) { return weft_h2f(*(const uint16_t *)p); }

/* any alignment: MXFP4's 17-byte blocks start at every byte offset */
WEFT_DEV uint32_t weft_ld_u32_a1(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#endif
