/* The MATMUL launchers (kernels-common/launch_matmul.cuh) on CUDA's
 * primitives; the prefill GEMM they call is cuda_gemm.cu's. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/launch_matmul.cuh"
