/* The MATMUL launchers (kernels-common/launch_matmul.cuh) on HIP's
 * primitives; the prefill GEMM they call is hip_gemm.hip's. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/launch_matmul.cuh"
