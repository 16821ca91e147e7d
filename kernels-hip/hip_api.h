/* The one place that decides which runtime the HIP backend's sources talk
 * to: AMD's HIP runtime (the normal build), or CUDA's through
 * kernels-hip/hip_to_cuda.h (WEFT_HIP_ON_CUDA: the nvcc build that lets the
 * HIP kernels run on an NVIDIA GPU). Included by host C files and .hip files. */
#ifndef WEFT_HIP_API_H
#define WEFT_HIP_API_H

#if defined(WEFT_HIP_ON_CUDA)
#include "kernels-hip/hip_to_cuda.h"
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1   /* the C host files: AMD's runtime API only */
#endif
#include <hip/hip_runtime_api.h>
#endif

#endif
