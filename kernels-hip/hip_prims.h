/* HIP's mapping of the primitives kernels-common/ is written against (see
 * kernels-common/prims.cuh). Include this first in every .hip file.
 *
 * Wavefronts: 64 lanes on CDNA (gfx90a, gfx940), 32 on RDNA (gfx1030).
 * kernels-common works in 32-lane groups with reductions of a given width
 * (__shfl_xor's width argument), so a 64-lane wavefront runs two groups
 * side by side and nothing here assumes either size. WEFT_WARP_SIZE is the
 * size the current device pass compiles for; host code never uses it to
 * pick launch shapes (one host pass serves every target): it asks the
 * device (hipDeviceAttributeWarpSize).
 *
 * The same file builds with nvcc (WEFT_HIP_ON_CUDA), through
 * kernels-hip/hip_to_cuda.h. */
#ifndef WEFT_HIP_PRIMS_H
#define WEFT_HIP_PRIMS_H

#include "kernels-hip/hip_api.h"
#include <stdint.h>
#if defined(WEFT_HIP_ON_CUDA)
#include <cuda_fp16.h>
#else
#include <hip/hip_fp16.h>
#endif

#define WEFT_DEV __device__ __forceinline__

#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define WEFT_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define WEFT_WARP_SIZE 32   /* NVIDIA, and the host pass (unused there) */
#endif
static_assert(WEFT_WARP_SIZE >= 32, "kernels-common's 32-lane groups must fit in one wavefront");

WEFT_DEV float weft_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
WEFT_DEV uint16_t weft_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

/* c + the dot of the four signed bytes of a and b. v_dot4_i32_i8 on CDNA
 * and RDNA2 (wraps on overflow like dp4a: clamp off); portable elsewhere
 * (e.g. RDNA3 has only the mixed-sign v_dot4_i32_iu8). */
WEFT_DEV int weft_dp4a(int a, int b, int c)
{
#if defined(WEFT_HIP_ON_CUDA)
    return __dp4a(a, b, c);
#elif defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx1030__) || defined(__gfx1031__) ||   \
    defined(__gfx1032__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    const int8_t *x = (const int8_t *)&a, *y = (const int8_t *)&b;
    return c + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
#endif
}

WEFT_DEV float weft_shfl_xor(float v, int mask, int width) { return __shfl_xor(v, mask, width); }
WEFT_DEV int weft_shfl_xor_i(int v, int mask, int width) { return __shfl_xor(v, mask, width); }

/* CUDA's __byte_perm (kernels-common/prims.cuh). HIP's own __byte_perm
 * indexes a byte array, which may go through scratch memory; shifts of the
 * 64-bit y:x stay in registers. */
WEFT_DEV uint32_t weft_byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
#if defined(WEFT_HIP_ON_CUDA)
    return __byte_perm(x, y, s);
#else
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
#pragma unroll
    for (int n = 0; n < 4; n++) r |= (uint32_t)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFFu) << (8 * n);
    return r;
#endif
}

/* the runtime, for kernels-common/launch_*.cuh (CUDA's through
 * hip_to_cuda.h in the nvcc build) */
typedef hipStream_t weft_stream_t;
static inline int weft_launch_error(void) { return (int)hipGetLastError(); }
#define WEFT_LAUNCH_EINVAL ((int)hipErrorInvalidValue)

#define WEFT_PRIMS_MAPPED 1
#include "kernels-common/prims.cuh"

#endif
