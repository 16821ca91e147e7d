/* The launchers of api 9's SSM_CONV and DELTA_NET (kernels-common/launch_recurrent.cuh) on
 * CUDA's primitives. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/launch_recurrent.cuh"
