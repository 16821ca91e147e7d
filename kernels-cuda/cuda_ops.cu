/* The launchers of EMBED, RMSNORM, SILU_MUL, ADD and ROPE_KV
 * (kernels-common/launch_ops.cuh) on CUDA's primitives. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/launch_ops.cuh"
