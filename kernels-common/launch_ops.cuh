/* The launchers of EMBED (+ scale), RMSNORM (and the LOGITS gather),
 * SILU_MUL (the GLUs, api 7's clamped SwiGLU, api 9's sigmoid gate), ADD (+ api 10's scale)
 * and ROPE_KV (+ RoPE scaling; a latent cache's K only; api 10's q only)
 * (kernels-common/launch.h) over kernels-common/ops.cuh, shared by the
 * backends: a backend's kernels file includes its primitives
 * (kernels-common/prims.cuh lists them, including the runtime's stream
 * type, last error and invalid-value code) and then this file once.
 * Block sizes are multiples of 64, so every block is whole warps on NVIDIA
 * and whole wavefronts on CDNA (64 lanes) and RDNA (32). */
#ifndef WEFT_KC_LAUNCH_OPS_CUH
#define WEFT_KC_LAUNCH_OPS_CUH

#include "kernels-common/ops.cuh"
#include "kernels-common/launch.h"

template <int T>
static void embed_t(const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids, int64_t R,
                    float scale, float *out, size_t out_ld, int *err, weft_stream_t st)
{
    dim3 grid((unsigned)((E + 255) / 256), (unsigned)R);
    weft_k_embed<T><<<grid, 256, 0, st>>>(table, t_nb1, V, E, ids, scale, out, out_ld, err);
}

extern "C" int weft_gk_embed_scaled(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E,
                                    const int32_t *ids, int64_t R, float scale, float *out, size_t out_ld, int *err,
                                    void *stream)
{
    if (R <= 0) return 0;
    const weft_stream_t st = (weft_stream_t)stream;
#define E_(T)                                                                               \
    case WEFT_TYPE_##T:                                                                     \
        embed_t<WEFT_TYPE_##T>(table, t_nb1, V, E, ids, R, scale, out, out_ld, err, st); \
        break;
    switch (wt) {
        E_(F32) E_(F16) E_(BF16) E_(Q4_0) E_(Q4_1) E_(Q5_0) E_(Q5_1) E_(Q8_0) E_(Q4_K) E_(Q5_K) E_(Q6_K)
        E_(Q2_K) E_(Q3_K) E_(IQ4_NL) E_(IQ4_XS) E_(MXFP4)
    default: return WEFT_LAUNCH_EINVAL;
    }
#undef E_
    return weft_launch_error();
}

extern "C" int weft_gk_embed(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                             int64_t R, float *out, size_t out_ld, int *err, void *stream)
{
    return weft_gk_embed_scaled(wt, table, t_nb1, V, E, ids, R, 0.0f, out, out_ld, err, stream);
}

extern "C" int weft_gk_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows, const float *add,
                               size_t add_ld, float *sum, size_t sum_ld, const float *w, float *out, size_t out_ld,
                               int64_t R, int64_t K, float eps, int *err, void *stream)
{
    if (R <= 0) return 0;
    const int threads = K >= 1024 ? 1024 : K >= 256 ? 256 : 64;
    weft_k_rmsnorm<<<(unsigned)R, threads, 0, (weft_stream_t)stream>>>(x, x_ld, rows, n_x_rows, add, add_ld, sum,
                                                                       sum_ld, w, out, out_ld, K, eps, err);
    return weft_launch_error();
}

extern "C" int weft_gk_glu(int act, const float *g, size_t g_ld, const float *u, size_t u_ld, float *out,
                           size_t out_ld, int64_t R, int64_t K, void *stream)
{
    if (act != WEFT_GLU_SILU && act != WEFT_GLU_GELU_TANH && act != WEFT_GLU_SIGMOID) return WEFT_LAUNCH_EINVAL;
    if (R <= 0) return 0;
    const weft_stream_t st = (weft_stream_t)stream;
    dim3 grid((unsigned)((K + 255) / 256), (unsigned)R);
    if (act == WEFT_GLU_GELU_TANH)
        weft_k_glu<WEFT_GLU_GELU_TANH><<<grid, 256, 0, st>>>(g, g_ld, u, u_ld, out, out_ld, K, 0.0f, 0.0f);
    else if (act == WEFT_GLU_SIGMOID)
        weft_k_glu<WEFT_GLU_SIGMOID><<<grid, 256, 0, st>>>(g, g_ld, u, u_ld, out, out_ld, K, 0.0f, 0.0f);
    else
        weft_k_glu<WEFT_GLU_SILU><<<grid, 256, 0, st>>>(g, g_ld, u, u_ld, out, out_ld, K, 0.0f, 0.0f);
    return weft_launch_error();
}

extern "C" int weft_gk_swiglu_oai(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out,
                                  size_t out_ld, int64_t R, int64_t K, float alpha, float limit, void *stream)
{
    if (R <= 0) return 0;
    dim3 grid((unsigned)((K + 255) / 256), (unsigned)R);
    weft_k_glu<WEFT_GLU_SWIGLU_OAI><<<grid, 256, 0, (weft_stream_t)stream>>>(g, g_ld, u, u_ld, out, out_ld, K, alpha,
                                                                            limit);
    return weft_launch_error();
}

extern "C" int weft_gk_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                                int64_t R, int64_t K, void *stream)
{
    return weft_gk_glu(WEFT_GLU_SILU, g, g_ld, u, u_ld, out, out_ld, R, K, stream);
}

extern "C" int weft_gk_add_scaled(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out,
                                  size_t out_ld, int64_t R, int64_t K, float scale, void *stream)
{
    if (R <= 0) return 0;
    dim3 grid((unsigned)((K + 255) / 256), (unsigned)R);
    weft_k_add<<<grid, 256, 0, (weft_stream_t)stream>>>(a, a_ld, b, b_ld, out, out_ld, K, scale);
    return weft_launch_error();
}

extern "C" int weft_gk_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                           int64_t R, int64_t K, void *stream)
{
    return weft_gk_add_scaled(a, a_ld, b, b_ld, out, out_ld, R, K, 0.0f, stream);
}

extern "C" int weft_gk_softcap(float *x, size_t ld, int64_t R, int64_t K, float cap, void *stream)
{
    if (R <= 0) return 0;
    dim3 grid((unsigned)((K + 255) / 256), (unsigned)R);
    weft_k_softcap<<<grid, 256, 0, (weft_stream_t)stream>>>(x, ld, K, cap, 1.0f / cap);
    return weft_launch_error();
}

/* the rotation of q's n_head heads and k's n_kv (0: q only, k not read), heads hd apart */
static void rope_launch(float *q, size_t q_ld, float *k, size_t k_ld, const int32_t *pos, int64_t R, int n_head,
                        int n_kv, int hd, int n_rot, float theta_scale, float freq_scale, int neox,
                        const struct weft_gk_rope_ext *ext, weft_stream_t st)
{
    struct weft_kc_rope_ext e = {NULL, 0.0f, 0.0f, 0.0f, 1.0f};
    if (ext) e = {ext->freq_factors, ext->ext_factor, ext->corr_dims[0], ext->corr_dims[1], ext->mscale};
    const int64_t nt = R * (n_head + n_kv) * (n_rot / 2);
    if (nt > 0)
        weft_k_rope<<<(unsigned)((nt + 255) / 256), 256, 0, st>>>(q, q_ld, k, k_ld, pos, R, n_head, n_kv, hd, n_rot,
                                                                  theta_scale, freq_scale, neox, e);
}

extern "C" int weft_gk_rope_q(float *q, size_t q_ld, const int32_t *pos, int64_t R, int n_head, int hd, int n_rot,
                              float theta_scale, float freq_scale, int neox, const struct weft_gk_rope_ext *ext,
                              void *stream)
{
    if (R <= 0) return 0;
    if (n_head < 0 || n_rot < 0 || n_rot % 2 || n_rot > hd) return WEFT_LAUNCH_EINVAL;
    rope_launch(q, q_ld, NULL, 0, pos, R, n_head, 0, hd, n_rot, theta_scale, freq_scale, neox, ext,
                (weft_stream_t)stream);
    return weft_launch_error();
}

extern "C" int weft_gk_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld,
                               const int32_t *pos, const int32_t *slot, int64_t R, int n_head, int n_rot,
                               float theta_scale, float freq_scale, int neox,
                               const struct weft_gk_rope_ext *ext, const struct weft_gk_kv *kv, void *stream)
{
    if (R <= 0) return 0;
    const weft_stream_t st = (weft_stream_t)stream;
    rope_launch(q, q_ld, k, k_ld, pos, R, n_head, kv->n_kv, kv->hd, n_rot, theta_scale, freq_scale, neox, ext, st);
    const struct weft_kc_kv d = weft_kc_kv_of(*kv);
    const int hd_v = d.v_in_k ? 0 : d.hd_v;   /* a latent cache: K only */
    if (kv->type == WEFT_TYPE_Q8_0) {
        const int64_t groups = R * ((int64_t)d.n_kv * d.hd / 32 + (int64_t)d.n_kv * hd_v / 32);
        weft_k_kv_write_q8_0<<<(unsigned)((groups + 7) / 8), 256, 0, st>>>(k, k_ld, v, v_ld, slot, R, d);
    } else {
        const int64_t n = R * (int64_t)d.n_kv * (d.hd > hd_v ? d.hd : hd_v);
        weft_k_kv_write_f16<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(k, k_ld, v, v_ld, slot, R, d);
    }
    return weft_launch_error();
}

#endif
