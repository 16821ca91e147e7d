/* The HIP names weft's HIP backend uses, mapped onto CUDA's, so the same
 * sources (the .hip files in kernels-hip/, the .c files in backends/hip/)
 * also build with nvcc and gcc and run on an NVIDIA GPU. That build is how the HIP kernels get
 * executed on this project's machines, which have no AMD GPU.
 *
 * Only what weft uses is mapped; a HIP name missing here is a compile
 * error in the nvcc build, never a silent fallback. Included instead of
 * <hip/hip_runtime_api.h> when WEFT_HIP_ON_CUDA is defined (see
 * kernels-hip/hip_api.h). Works from C (host runtime API) and from nvcc
 * (device intrinsics, under __CUDACC__). */
#ifndef WEFT_HIP_TO_CUDA_H
#define WEFT_HIP_TO_CUDA_H

#include <cuda_runtime_api.h>

/* ---- types and constants ---- */
#define hipError_t cudaError_t
#define hipStream_t cudaStream_t
#define hipGraph_t cudaGraph_t
#define hipGraphExec_t cudaGraphExec_t
#define hipDeviceProp_t struct cudaDeviceProp

#define hipSuccess cudaSuccess
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorInvalidDevice cudaErrorInvalidDevice
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorStreamCaptureInvalidated cudaErrorStreamCaptureInvalidated

#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipHostMallocMapped cudaHostAllocMapped
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeMaxSharedMemoryPerBlock cudaDevAttrMaxSharedMemoryPerBlock

/* ---- runtime functions (same arguments unless noted) ---- */
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipMemGetInfo cudaMemGetInfo
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaHostAlloc          /* (ptr, size, flags) on both */
#define hipHostFree cudaFreeHost
#define hipHostGetDevicePointer cudaHostGetDevicePointer
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyAsync cudaMemcpyAsync
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphDestroy cudaGraphDestroy

/* ---- device side ---- */
#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* HIP's warp functions have no member mask: every lane of the warp takes
 * part, which on CUDA is the full mask. */
#define __shfl_xor(v, m, w) __shfl_xor_sync(0xffffffffu, (v), (m), (w))
#define __shfl_down(v, d, w) __shfl_down_sync(0xffffffffu, (v), (d), (w))
#endif

#endif
