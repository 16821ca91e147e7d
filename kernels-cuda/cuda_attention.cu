/* The ATTENTION launchers (kernels-common/launch_attention.cuh) on CUDA's
 * primitives. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/launch_attention.cuh"
