/* weft_gk_gemm (kernels-common/launch.h): the type dispatch of a backend's
 * prefill GEMM. The including file (kernels-cuda/cuda_gemm.cu,
 * kernels-hip/hip_gemm.hip) first defines
 *   template <int T> static void gemm_launch(const struct weft_gk_mm *m, weft_stream_t st);
 * which enqueues its GEMM for weight type T; every type but F32/BF16 (which
 * the float kernel handles at every R) comes here. */
#ifndef WEFT_KC_LAUNCH_GEMM_CUH
#define WEFT_KC_LAUNCH_GEMM_CUH

#include "kernels-common/launch.h"

extern "C" int weft_gk_gemm(const struct weft_gk_mm *m, void *stream)
{
    const weft_stream_t st = (weft_stream_t)stream;
    switch (m->wt) {
#define G_(T) case WEFT_TYPE_##T: gemm_launch<WEFT_TYPE_##T>(m, st); break;
        G_(F16) G_(Q4_0) G_(Q4_1) G_(Q5_0) G_(Q5_1) G_(Q8_0) G_(Q4_K) G_(Q5_K) G_(Q6_K)
        G_(Q2_K) G_(Q3_K) G_(IQ4_NL) G_(IQ4_XS) G_(MXFP4)
#undef G_
    default: return WEFT_LAUNCH_EINVAL;
    }
    return weft_launch_error();
}

#endif
