/* HIP's prefill GEMM for MATMUL (R > WEFT_GK_MMVQ_MAX_ROWS rows, quantized or
 * F16 weights): weft_gk_gemm (kernels-common/launch.h), in a file of its own
 * so its instantiations (one per weight type and target) compile in
 * parallel with hip_matmul.hip's.
 *
 * Why a GEMM of its own: CUDA's prefill path uses NVIDIA's wmma tensor-core
 * API, which has no HIP equivalent on all three targets (gfx1030 has no
 * matrix cores; CDNA's MFMA has other shapes). This one needs only LDS and
 * plain float math, so it runs on every AMD target and, through
 * hip_to_cuda.h, on NVIDIA GPUs, where it is checked. On gfx90a/gfx940 the
 * compiler pairs the 4 x 4 register tile's fmaf into packed v_pk_fma_f32. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/dequant.cuh"
#include "kernels-common/launch.h"

/* ---- prefill GEMM: out tile 64 (x rows) x 64 (W rows) per 256-thread block ----
 * Per 32-wide k step the block stages x and W (dequantized) as f32 in LDS,
 * zero-padded past R, N and K: 2 x 64 x 33 floats = 16.5 KiB, so several
 * blocks share a CU's 64 KiB (CDNA) / WGP's 128 KiB (RDNA). Thread (tr, tc)
 * = (tid / 16, tid % 16) owns the 4 x 4 outputs at rows tr + 16i, cols
 * tc + 16j; rows of 33 floats keep the 16 W rows a wavefront reads in
 * distinct LDS banks. 256 threads = 4 wave64 or 8 wave32 (or 8 NVIDIA
 * warps): nothing depends on the wavefront size. Each output is one fmaf
 * chain in k order. */
enum { GT_M = 64, GT_N = 64, GT_K = 32, GT_LD = GT_K + 1, GT_THREADS = 256 };

template <int T>
__global__ void __launch_bounds__(GT_THREADS) weft_k_gemm_lds(const uint8_t *w, size_t w_nb1, int64_t N, int64_t K,
                                                              const float *x, size_t x_ld, int64_t R, float *out,
                                                              size_t out_ld, const float *add, size_t add_ld,
                                                              const float *bias)
{
    __shared__ float xs[GT_M * GT_LD];
    __shared__ float ws[GT_N * GT_LD];
    const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
    const int64_t m0 = (int64_t)blockIdx.y * GT_M, n0 = (int64_t)blockIdx.x * GT_N;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int64_t k0 = 0; k0 < K; k0 += GT_K) {
        for (int idx = tid; idx < GT_M * GT_K; idx += GT_THREADS) {
            const int rr = idx / GT_K, kk = idx % GT_K;
            const int64_t m = m0 + rr, n = n0 + rr, k = k0 + kk;
            xs[rr * GT_LD + kk] = m < R && k < K ? x[m * x_ld + k] : 0.0f;
            ws[rr * GT_LD + kk] = n < N && k < K ? weft_dq<T>::at(w + n * w_nb1, k) : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < GT_K; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = xs[(tr + 16 * i) * GT_LD + kk];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = ws[(tc + 16 * j) * GT_LD + kk];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t m = m0 + tr + 16 * i, n = n0 + tc + 16 * j;
            if (m < R && n < N) {
                const float v = bias ? acc[i][j] + bias[n] : acc[i][j];   /* bias before the residual */
                out[m * out_ld + n] = add ? v + add[m * add_ld + n] : v;
            }
        }
}

template <int T> static void gemm_launch(const struct weft_gk_mm *m, weft_stream_t st)
{
    dim3 grid((unsigned)((m->N + GT_N - 1) / GT_N), (unsigned)((m->R + GT_M - 1) / GT_M));
    weft_k_gemm_lds<T><<<grid, GT_THREADS, 0, st>>>(m->w, m->w_nb1, m->N, m->K, m->x, m->x_ld, m->R, m->out,
                                                    m->out_ld, m->add, m->add_ld, m->bias);
}

#include "kernels-common/launch_gemm.cuh"
