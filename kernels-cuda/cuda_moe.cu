/* The MOE_ROUTE and MATMUL_ID launchers (kernels-common/launch_moe.cuh) on
 * CUDA's primitives. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/launch_moe.cuh"
