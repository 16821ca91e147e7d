/* Register-blocked prefill tiles: none yet, so prefill calls dot[] per output. */
#include "backends/cpu/cpu_kernels.h"

void weft_cpu_kernels_fill_avx2_gemm(struct weft_cpu_kernels *k) { (void)k; }
