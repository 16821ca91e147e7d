/* The paged KV cache as device code sees it (layout: backends/backend.h). */
#ifndef WEFT_KC_KV_CUH
#define WEFT_KC_KV_CUH

#include "kernels-common/dequant.cuh"

/* Paged cache addressing (backends/backend.h): token `slot`'s K (which 0)
 * or V (which 1) row of the layer starts at
 * ((slot/16 * n_layer + layer) * 2 + which) * layer_bytes + (slot%16) * tok_bytes. */
struct weft_kc_kv {
    uint8_t *base;
    size_t layer_bytes, tok_bytes, head_bytes;
    int n_layer, layer, n_kv, hd;
};

/* The device-side description of one cache layer, made on the host from
 * a launcher struct K (struct weft_gk_kv of kernels-common/launch.h: base, type,
 * n_layer, layer, n_kv, hd). */
template <class K> __host__ __device__ inline struct weft_kc_kv weft_kc_kv_of(const K &kv)
{
    struct weft_kc_kv d;
    const size_t head_bytes =
        kv.type == WEFT_TYPE_Q8_0 ? (size_t)kv.hd / WEFT_QK8_0 * WEFT_BSZ(q8_0) : (size_t)kv.hd * 2;
    d.base = kv.base;
    d.head_bytes = head_bytes;
    d.tok_bytes = head_bytes * (size_t)kv.n_kv;
    d.layer_bytes = d.tok_bytes * WEFT_KV_BLOCK_TOKENS;
    d.n_layer = kv.n_layer;
    d.layer = kv.layer;
    d.n_kv = kv.n_kv;
    d.hd = kv.hd;
    return d;
}

WEFT_DEV uint8_t *weft_kv_row(const struct weft_kc_kv &kv, int64_t slot, int which)
{
    const int64_t blk = slot / WEFT_KV_BLOCK_TOKENS, off = slot % WEFT_KV_BLOCK_TOKENS;
    return kv.base + (((size_t)blk * kv.n_layer + kv.layer) * 2 + which) * kv.layer_bytes + (size_t)off * kv.tok_bytes;
}

#endif
