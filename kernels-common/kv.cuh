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

WEFT_DEV uint8_t *weft_kv_row(const struct weft_kc_kv &kv, int64_t slot, int which)
{
    const int64_t blk = slot / WEFT_KV_BLOCK_TOKENS, off = slot % WEFT_KV_BLOCK_TOKENS;
    return kv.base + (((size_t)blk * kv.n_layer + kv.layer) * 2 + which) * kv.layer_bytes + (size_t)off * kv.tok_bytes;
}

#endif
