/* The MOE_ROUTE and MATMUL_ID launchers (kernels-common/launch_moe.cuh) on
 * HIP's primitives. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/launch_moe.cuh"
