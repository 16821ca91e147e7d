/* The MATMUL launchers (kernels-common/launch.h), shared by the backends
 * (included once by a backend's kernels file after its primitives): type
 * dispatch over kernels-common/matmul.cuh (Q8_1 quantization, integer-dot
 * matrix-vector, float kernel) and, for prefill, the backend's own GEMM
 * (weft_gk_gemm, in a file of its own: kernels-common/launch_gemm.cuh).
 * kernels-common's matmul kernels take blockDim (32, rows per block): 32 x 8
 * and 32 x 4 threads are whole warps on NVIDIA and whole wavefronts on
 * CDNA (64 lanes) and RDNA (32). */
#ifndef WEFT_KC_LAUNCH_MATMUL_CUH
#define WEFT_KC_LAUNCH_MATMUL_CUH

#include "kernels-common/matmul.cuh"
#include "kernels-common/launch.h"

static bool is_quant(int wt) { return weft_kc_is_quant(wt); }

extern "C" int weft_gk_matmul_type_ok(int wt)
{
    return is_quant(wt) || wt == WEFT_TYPE_F32 || wt == WEFT_TYPE_F16 || wt == WEFT_TYPE_BF16;
}

extern "C" size_t weft_gk_matmul_scratch(int wt, int64_t K, int64_t R)
{
    if (!is_quant(wt) || R > WEFT_GK_MMVQ_MAX_ROWS) return 0;
    return (size_t)R * (size_t)(K / 32) * sizeof(struct weft_block_q8_1);
}

template <int T> static void launch_float(const struct weft_gk_mm *m, weft_stream_t st)
{
    dim3 block(32, 8), grid((unsigned)((m->N + 7) / 8), (unsigned)((m->R + 7) / 8));
    weft_k_mm_float<T><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, m->K, m->x, m->x_ld, m->R, m->out, m->out_ld,
                                               m->add, m->add_ld, m->bias);
}

template <int T> static void launch_mmvq(const struct weft_gk_mm *m, void *scratch, weft_stream_t st)
{
    const int64_t nb32 = m->K / 32;
    struct weft_block_q8_1 *xq = (struct weft_block_q8_1 *)scratch;
    const int64_t nblk = m->R * nb32;
    weft_k_quantize_q8_1<<<(unsigned)((nblk + 7) / 8), 256, 0, st>>>(m->x, m->x_ld, m->R, nb32, xq);
    dim3 block(32, 4), grid((unsigned)((m->N + 3) / 4));
    /* WEFT_GK_MMVQ_ROWS rows per launch: more rows than that read W once per
     * launch (row r's out and add rows move with it; the bias is per column) */
    for (int64_t r0 = 0; r0 < m->R; r0 += WEFT_GK_MMVQ_ROWS) {
        const int R = (int)(m->R - r0 < WEFT_GK_MMVQ_ROWS ? m->R - r0 : WEFT_GK_MMVQ_ROWS);
        const struct weft_block_q8_1 *q = xq + r0 * nb32;
        float *out = m->out + r0 * (int64_t)m->out_ld;
        const float *add = m->add ? m->add + r0 * (int64_t)m->add_ld : NULL;
#define MMVQ_(NR)                                                                                  \
    weft_k_mmvq<T, NR><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, nb32, q, R, out, m->out_ld, add, \
                                               m->add_ld, m->bias)
        if (R == 1) MMVQ_(1);
        else if (R == 2) MMVQ_(2);
        else if (R <= 4) MMVQ_(4);
        else MMVQ_(8);
#undef MMVQ_
    }
}

extern "C" int weft_gk_matmul(const struct weft_gk_mm *m, void *scratch, void *stream)
{
    if (m->R <= 0 || m->N <= 0 || m->K <= 0) return 0;
    const weft_stream_t st = (weft_stream_t)stream;
    const bool few = m->R <= WEFT_GK_MMVQ_MAX_ROWS;
    switch (m->wt) {
    case WEFT_TYPE_F32: launch_float<WEFT_TYPE_F32>(m, st); break;
    case WEFT_TYPE_BF16: launch_float<WEFT_TYPE_BF16>(m, st); break;
    case WEFT_TYPE_F16:
        if (m->R > WEFT_GK_MMVQ_ROWS) return weft_gk_gemm(m, stream);
        launch_float<WEFT_TYPE_F16>(m, st);
        break;
#define Q_(T)                                                \
    case WEFT_TYPE_##T:                                      \
        if (!few) return weft_gk_gemm(m, stream);            \
        launch_mmvq<WEFT_TYPE_##T>(m, scratch, st);          \
        break;
        Q_(Q4_0) Q_(Q4_1) Q_(Q5_0) Q_(Q5_1) Q_(Q8_0) Q_(Q4_K) Q_(Q5_K) Q_(Q6_K)
        Q_(Q2_K) Q_(Q3_K) Q_(IQ4_NL) Q_(IQ4_XS) Q_(MXFP4)
#undef Q_
    default: return WEFT_LAUNCH_EINVAL;
    }
    return weft_launch_error();
}

#endif
