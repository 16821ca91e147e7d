/* The launchers of api 9's SSM_CONV and DELTA_NET (kernels-common/launch_recurrent.cuh) on
 * HIP's primitives. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/launch_recurrent.cuh"
