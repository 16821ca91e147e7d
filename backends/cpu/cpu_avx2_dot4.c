/* Four-row dots: none yet for any type, so the matmul calls dot[] per row. */
#include "backends/cpu/cpu_kernels.h"

void weft_cpu_kernels_fill_avx2_dot4(struct weft_cpu_kernels *k) { (void)k; }
