/* MATMUL launchers: type dispatch over kernels-common/matmul.cuh (Q8_1
 * quantization, dp4a matrix-vector, float kernel) and the tensor-core GEMM
 * below for prefill. */
#include "kernels-cuda/cuda_prims.cuh"
#include "kernels-common/matmul.cuh"
#include "kernels-cuda/cuda_kernels.h"

#include <mma.h>

/* ---- prefill GEMM on tensor cores (wmma m16n16k16, F16 in, F32 accumulate) ----
 * Block: 128 threads (4 warps) computing a 64 (x rows) x 64 (W rows) tile of
 * out; each warp owns 32 x 32 (2 x 2 fragments). Per 32-wide k step the
 * block stages x (converted to F16) and W (dequantized to F16) into shared
 * memory, zero-padded past R, N and K. */
enum { GB_M = 64, GB_N = 64, GB_K = 32, GB_LD = GB_K + 8, GB_CLD = GB_N + 4 };

template <int T>
__global__ void __launch_bounds__(128) weft_k_gemm_wmma(const uint8_t *w, size_t w_nb1, int64_t N, int64_t K,
                                                        const float *x, size_t x_ld, int64_t R, float *out,
                                                        size_t out_ld, const float *add, size_t add_ld)
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
            const float v = cs[rr * GB_CLD + cc];
            out[m * out_ld + n] = add ? v + add[m * add_ld + n] : v;
        }
    }
}

/* ---- dispatch ---- */

#define WEFT_MMVQ_ROWS 8   /* up to this many rows take the matrix-vector path */

static bool is_quant(int wt)
{
    switch (wt) {
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q5_1:
    case WEFT_TYPE_Q8_0: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

extern "C" int weft_cu_matmul_type_ok(int wt)
{
    return is_quant(wt) || wt == WEFT_TYPE_F32 || wt == WEFT_TYPE_F16 || wt == WEFT_TYPE_BF16;
}

extern "C" size_t weft_cu_matmul_scratch(int wt, int64_t K, int64_t R)
{
    if (!is_quant(wt) || R > WEFT_MMVQ_ROWS) return 0;
    return (size_t)R * (size_t)(K / 32) * sizeof(struct weft_block_q8_1);
}

template <int T> static void launch_float(const struct weft_cu_mm *m, cudaStream_t st)
{
    dim3 block(32, 8), grid((unsigned)((m->N + 7) / 8), (unsigned)((m->R + 7) / 8));
    weft_k_mm_float<T><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, m->K, m->x, m->x_ld, m->R, m->out, m->out_ld,
                                               m->add, m->add_ld);
}

template <int T> static void launch_gemm(const struct weft_cu_mm *m, cudaStream_t st)
{
    dim3 grid((unsigned)((m->N + GB_N - 1) / GB_N), (unsigned)((m->R + GB_M - 1) / GB_M));
    weft_k_gemm_wmma<T><<<grid, 128, 0, st>>>(m->w, m->w_nb1, m->N, m->K, m->x, m->x_ld, m->R, m->out, m->out_ld,
                                              m->add, m->add_ld);
}

template <int T> static void launch_mmvq(const struct weft_cu_mm *m, void *scratch, cudaStream_t st)
{
    const int64_t nb32 = m->K / 32;
    struct weft_block_q8_1 *xq = (struct weft_block_q8_1 *)scratch;
    const int64_t nblk = m->R * nb32;
    weft_k_quantize_q8_1<<<(unsigned)((nblk + 7) / 8), 256, 0, st>>>(m->x, m->x_ld, m->R, nb32, xq);
    dim3 block(32, 4), grid((unsigned)((m->N + 3) / 4));
    const int R = (int)m->R;
    if (R == 1)
        weft_k_mmvq<T, 1><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, nb32, xq, R, m->out, m->out_ld, m->add, m->add_ld);
    else if (R == 2)
        weft_k_mmvq<T, 2><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, nb32, xq, R, m->out, m->out_ld, m->add, m->add_ld);
    else if (R <= 4)
        weft_k_mmvq<T, 4><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, nb32, xq, R, m->out, m->out_ld, m->add, m->add_ld);
    else
        weft_k_mmvq<T, 8><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, nb32, xq, R, m->out, m->out_ld, m->add, m->add_ld);
}

template <int T> static void launch_quant(const struct weft_cu_mm *m, void *scratch, cudaStream_t st)
{
    if (m->R <= WEFT_MMVQ_ROWS) launch_mmvq<T>(m, scratch, st);
    else launch_gemm<T>(m, st);
}

extern "C" cudaError_t weft_cu_matmul(const struct weft_cu_mm *m, void *scratch, cudaStream_t st)
{
    if (m->R <= 0 || m->N <= 0 || m->K <= 0) return cudaSuccess;
    switch (m->wt) {
    case WEFT_TYPE_F32: launch_float<WEFT_TYPE_F32>(m, st); break;
    case WEFT_TYPE_BF16: launch_float<WEFT_TYPE_BF16>(m, st); break;
    case WEFT_TYPE_F16:
        if (m->R <= WEFT_MMVQ_ROWS) launch_float<WEFT_TYPE_F16>(m, st);
        else launch_gemm<WEFT_TYPE_F16>(m, st);
        break;
    case WEFT_TYPE_Q4_0: launch_quant<WEFT_TYPE_Q4_0>(m, scratch, st); break;
    case WEFT_TYPE_Q4_1: launch_quant<WEFT_TYPE_Q4_1>(m, scratch, st); break;
    case WEFT_TYPE_Q5_0: launch_quant<WEFT_TYPE_Q5_0>(m, scratch, st); break;
    case WEFT_TYPE_Q5_1: launch_quant<WEFT_TYPE_Q5_1>(m, scratch, st); break;
    case WEFT_TYPE_Q8_0: launch_quant<WEFT_TYPE_Q8_0>(m, scratch, st); break;
    case WEFT_TYPE_Q4_K: launch_quant<WEFT_TYPE_Q4_K>(m, scratch, st); break;
    case WEFT_TYPE_Q5_K: launch_quant<WEFT_TYPE_Q5_K>(m, scratch, st); break;
    case WEFT_TYPE_Q6_K: launch_quant<WEFT_TYPE_Q6_K>(m, scratch, st); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
