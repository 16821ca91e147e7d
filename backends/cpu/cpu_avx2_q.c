/* Placeholder table filler: no SIMD kernels in this family yet, so every
 * entry falls back to the next lower table (see cpu_kernels.c). */
#include "backends/cpu/cpu_kernels.h"

void weft_cpu_kernels_fill_avx2_q(struct weft_cpu_kernels *k) { (void)k; }
