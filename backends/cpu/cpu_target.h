/* The x86 instruction sets the CPU kernels are compiled for: one function
 * attribute per level of cpu_kernels.h. A function carrying one runs only in
 * a table of that level or above, which weft_cpu_isa_supported (the one
 * feature probe) has found the CPU to have; one binary runs anywhere. */
#ifndef WEFT_CPU_TARGET_H
#define WEFT_CPU_TARGET_H

#define WEFT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define WEFT_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define WEFT_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

#endif
