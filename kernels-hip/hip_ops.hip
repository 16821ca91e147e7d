/* The launchers of EMBED, RMSNORM, SILU_MUL, ADD and ROPE_KV
 * (kernels-common/launch_ops.cuh) on HIP's primitives. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/launch_ops.cuh"
