/* The ATTENTION launchers (kernels-common/launch_attention.cuh) on HIP's
 * primitives. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/launch_attention.cuh"
