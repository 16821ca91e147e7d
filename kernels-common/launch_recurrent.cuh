/* The launchers of api 9's SSM_CONV and DELTA_NET (kernels-common/launch.h) over
 * kernels-common/recurrent.cuh, shared by the backends (included once by a backend's kernels
 * file after its primitives). One launch per op, its shape from
 * kernels-common/recurrent_geom.h (shapes only: graph-safe); the sequences are found on the
 * device. */
#ifndef WEFT_KC_LAUNCH_RECURRENT_CUH
#define WEFT_KC_LAUNCH_RECURRENT_CUH

#include "kernels-common/launch.h"
#include "kernels-common/recurrent.cuh"

extern "C" int weft_gk_ssm_conv(const struct weft_gk_ssm_conv *a, void *stream)
{
    if (a->R <= 0) return 0;
    struct weft_gk_conv_geom geo;
    if (weft_gk_conv_geom(a->R, a->C, a->K, &geo)) return WEFT_LAUNCH_EINVAL;
    dim3 grid(geo.grid_x, geo.grid_y);
    weft_k_ssm_conv<<<grid, geo.threads, 0, (weft_stream_t)stream>>>(*a);
    return weft_launch_error();
}

template <int NC, int JW>
static void dn_launch(const struct weft_gk_dn_geom &geo, const struct weft_kc_dn &k, weft_stream_t st)
{
    dim3 grid(geo.grid_x, geo.grid_y, geo.grid_z);
    weft_k_delta_net<NC, JW><<<grid, geo.threads, 0, st>>>(k);
}

template <int NC>
static void dn_launch_nc(const struct weft_gk_dn_geom &geo, const struct weft_kc_dn &k, weft_stream_t st)
{
    switch (geo.jw) {
    case 1: dn_launch<NC, 1>(geo, k, st); break;
    case 2: dn_launch<NC, 2>(geo, k, st); break;
    case 4: dn_launch<NC, 4>(geo, k, st); break;
    default: dn_launch<NC, 8>(geo, k, st); break;
    }
}

extern "C" int weft_gk_delta_net(const struct weft_gk_delta_net *a, void *stream)
{
    if (a->R <= 0) return 0;
    const int Hk = a->n_k_head, Hv = a->n_v_head, S = a->head_dim;
    struct weft_gk_dn_geom geo;
    if (Hk < 1 || Hv < Hk || Hv % Hk || weft_gk_dn_geom(a->R, a->n_slots, Hv, S, a->n_mp, &geo))
        return WEFT_LAUNCH_EINVAL;
    struct weft_kc_dn k;
    k.a = *a;
    k.qscale = 1.0f / sqrtf((float)S);   /* as the CPU */
    k.per_block = geo.per_block;
    const weft_stream_t st = (weft_stream_t)stream;
    switch (geo.nc) {
    case 1: dn_launch_nc<1>(geo, k, st); break;
    case 2: dn_launch_nc<2>(geo, k, st); break;
    case 4: dn_launch_nc<4>(geo, k, st); break;
    default: dn_launch_nc<8>(geo, k, st); break;
    }
    return weft_launch_error();
}

#endif
