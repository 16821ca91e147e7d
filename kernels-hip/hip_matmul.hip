/* MATMUL launchers: type dispatch over kernels-common/matmul.cuh (Q8_1
 * quantization, integer-dot matrix-vector, float kernel) and, for prefill,
 * the LDS-tiled GEMM in hip_gemm.hip. */
#include "kernels-hip/hip_prims.h"
#include "kernels-common/matmul.cuh"
#include "kernels-hip/hip_kernels.h"

/* ---- dispatch ---- */

#define WEFT_MMVQ_ROWS 8   /* up to this many rows take the matrix-vector path */

extern "C" hipError_t weft_hip_gemm(const struct weft_hip_mm *m, hipStream_t st);   /* hip_gemm.hip */

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

extern "C" int weft_hip_matmul_type_ok(int wt)
{
    return is_quant(wt) || wt == WEFT_TYPE_F32 || wt == WEFT_TYPE_F16 || wt == WEFT_TYPE_BF16;
}

extern "C" size_t weft_hip_matmul_scratch(int wt, int64_t K, int64_t R)
{
    if (!is_quant(wt) || R > WEFT_MMVQ_ROWS) return 0;
    return (size_t)R * (size_t)(K / 32) * sizeof(struct weft_block_q8_1);
}

/* kernels-common's kernels take blockDim (32, rows per block): 128 threads
 * = two 32-lane groups per CDNA wavefront, one per RDNA wavefront */
template <int T> static void launch_float(const struct weft_hip_mm *m, hipStream_t st)
{
    dim3 block(32, 8), grid((unsigned)((m->N + 7) / 8), (unsigned)((m->R + 7) / 8));
    weft_k_mm_float<T><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, m->K, m->x, m->x_ld, m->R, m->out, m->out_ld,
                                               m->add, m->add_ld);
}

template <int T> static void launch_mmvq(const struct weft_hip_mm *m, void *scratch, hipStream_t st)
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

template <int T> static hipError_t launch_quant(const struct weft_hip_mm *m, void *scratch, hipStream_t st)
{
    if (m->R > WEFT_MMVQ_ROWS) return weft_hip_gemm(m, st);
    launch_mmvq<T>(m, scratch, st);
    return hipSuccess;
}

extern "C" hipError_t weft_hip_matmul(const struct weft_hip_mm *m, void *scratch, hipStream_t st)
{
    if (m->R <= 0 || m->N <= 0 || m->K <= 0) return hipSuccess;
    hipError_t e = hipSuccess;
    switch (m->wt) {
    case WEFT_TYPE_F32: launch_float<WEFT_TYPE_F32>(m, st); break;
    case WEFT_TYPE_BF16: launch_float<WEFT_TYPE_BF16>(m, st); break;
    case WEFT_TYPE_F16:
        if (m->R <= WEFT_MMVQ_ROWS) launch_float<WEFT_TYPE_F16>(m, st);
        else e = weft_hip_gemm(m, st);
        break;
    case WEFT_TYPE_Q4_0: e = launch_quant<WEFT_TYPE_Q4_0>(m, scratch, st); break;
    case WEFT_TYPE_Q4_1: e = launch_quant<WEFT_TYPE_Q4_1>(m, scratch, st); break;
    case WEFT_TYPE_Q5_0: e = launch_quant<WEFT_TYPE_Q5_0>(m, scratch, st); break;
    case WEFT_TYPE_Q5_1: e = launch_quant<WEFT_TYPE_Q5_1>(m, scratch, st); break;
    case WEFT_TYPE_Q8_0: e = launch_quant<WEFT_TYPE_Q8_0>(m, scratch, st); break;
    case WEFT_TYPE_Q4_K: e = launch_quant<WEFT_TYPE_Q4_K>(m, scratch, st); break;
    case WEFT_TYPE_Q5_K: e = launch_quant<WEFT_TYPE_Q5_K>(m, scratch, st); break;
    case WEFT_TYPE_Q6_K: e = launch_quant<WEFT_TYPE_Q6_K>(m, scratch, st); break;
    default: return hipErrorInvalidValue;
    }
    return e != hipSuccess ? e : hipGetLastError();
}
