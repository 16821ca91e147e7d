/* CUDA's mapping of the primitives kernels-common/ is written against
 * (see kernels-common/prims.cuh). Include this first in every .cu file. */
#ifndef WEFT_CUDA_PRIMS_CUH
#define WEFT_CUDA_PRIMS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define WEFT_DEV __device__ __forceinline__
#define WEFT_WARP_SIZE 32

WEFT_DEV float weft_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
WEFT_DEV uint16_t weft_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
WEFT_DEV int weft_dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
WEFT_DEV float weft_shfl_xor(float v, int mask, int width) { return __shfl_xor_sync(0xffffffffu, v, mask, width); }
WEFT_DEV int weft_shfl_xor_i(int v, int mask, int width) { return __shfl_xor_sync(0xffffffffu, v, mask, width); }
WEFT_DEV uint32_t weft_byte_perm(uint32_t x, uint32_t y, uint32_t s) { return __byte_perm(x, y, s); }

/* the runtime, for kernels-common/launch_*.cuh */
typedef cudaStream_t weft_stream_t;
static inline int weft_launch_error(void) { return (int)cudaGetLastError(); }
#define WEFT_LAUNCH_EINVAL ((int)cudaErrorInvalidValue)

#define WEFT_PRIMS_MAPPED 1
#include "kernels-common/prims.cuh"

#endif
