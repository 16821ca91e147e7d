/* CUDA's prefill GEMM for MATMUL (R > WEFT_GK_MMVQ_MAX_ROWS rows, quantized or
 * F16 weights) on tensor cores: weft_gk_gemm (kernels-common/launch.h), in
 * a file of its own so its instantiations compile in parallel with
 * cuda_matmul.cu's. The HIP backend's counterpart is kernels-hip/hip_gemm.hip. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/dequant.cuh"
#include "kernels-common/launch.h"

#include <mma.h>

/* ---- prefill GEMM on tensor cores (wmma m16n16k16, F16 in, F32 accumulate) ----
 * Block: 128 threads (4 warps) computing a 64 (x rows) x 64 (W rows) tile of
 * out; each warp owns 32 x 32 (2 x 2 fragments). Per 32-wide k step the
 * block stages x (converted to F16) and W (dequantized to F16) into shared
 * memory, zero-padded past R, N and K. The epilogue adds the bias (if any),
 * then the residual (if any). */
enum { GB_M = 64, GB_N = 64, GB_K = 32, GB_LD = GB_K + 8, GB_CLD = GB_N + 4 };

template <int T>
__global__ void __launch_bounds__(128) weft_k_gemm_wmma(const uint8_t *w, size_t w_nb1, int64_t N, int64_t K,
                                                        const float *x, size_t x_ld, int64_t R, float *out,
                                                        size_t out_ld, const float *add, size_t add_ld,
                                                        const float *bias)
{
    using namespace nvcuda;
    __shared__ __align__(32) half xs[GB_M * GB_LD];
    __shared__ __align__(32) half ws[GB_N * GB_LD];
    __shared__ __align__(32) float cs[GB_M * GB_CLD];
    const int tid = threadIdx.x, warp = tid / 32;
    const int wm = warp / 2, wn = warp % 2;
    const int64_t m0 = (int64_t)blockIdx.y * GB_M, n0 = (int64_t)blockIdx.x * GB_N;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int64_t k0 = 0; k0 < K; k0 += GB_K) {
        for (int idx = tid; idx < GB_M * GB_K; idx += 128) {
            const int rr = idx / GB_K, kk = idx % GB_K;
            const int64_t m = m0 + rr, n = n0 + rr, k = k0 + kk;
            xs[rr * GB_LD + kk] = __float2half(m < R && k < K ? x[m * x_ld + k] : 0.0f);
            ws[rr * GB_LD + kk] = __float2half(n < N && k < K ? weft_dq<T>::at(w + n * w_nb1, k) : 0.0f);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GB_K; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], xs + (wm * 32 + 16 * i) * GB_LD + kk, GB_LD);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], ws + (wn * 32 + 16 * j) * GB_LD + kk, GB_LD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(cs + (wm * 32 + 16 * i) * GB_CLD + wn * 32 + 16 * j, acc[i][j], GB_CLD,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int idx = tid; idx < GB_M * GB_N; idx += 128) {
        const int rr = idx / GB_N, cc = idx % GB_N;
        const int64_t m = m0 + rr, n = n0 + cc;
        if (m < R && n < N) {
            float v = cs[rr * GB_CLD + cc];
            if (bias) v = v + bias[n];   /* before the residual, as the CPU */
            out[m * out_ld + n] = add ? v + add[m * add_ld + n] : v;
        }
    }
}

template <int T> static void gemm_launch(const struct weft_gk_mm *m, weft_stream_t st)
{
    dim3 grid((unsigned)((m->N + GB_N - 1) / GB_N), (unsigned)((m->R + GB_M - 1) / GB_M));
    weft_k_gemm_wmma<T><<<grid, 128, 0, st>>>(m->w, m->w_nb1, m->N, m->K, m->x, m->x_ld, m->R, m->out, m->out_ld,
                                              m->add, m->add_ld, m->bias);
}

#include "kernels-common/launch_gemm.cuh"
