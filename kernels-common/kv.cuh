/* The paged KV cache as device code sees it (layout: backends/backend.h). */
#ifndef WEFT_KC_KV_CUH
#define WEFT_KC_KV_CUH

#include "kernels-common/dequant.cuh"

/* Paged cache addressing (backends/backend.h): with KB = 16 * tok_bytes
 * (one layer's K in a block, K heads of hd) and VB = 16 * v_tok_bytes (its
 * V, heads of hd_v), token `slot`'s K (which 0) row of the layer starts at
 * (slot/16 * n_layer + layer) * layer_bytes + (slot%16) * tok_bytes, its V
 * (which 1) row at (slot/16 * n_layer + layer) * layer_bytes + KB +
 * (slot%16) * v_tok_bytes, layer_bytes = KB + VB. With hd_v == hd that is
 * ((slot/16 * n_layer + layer) * 2 + which) * KB + (slot%16) * tok_bytes.
 * A latent cache (v_in_k, api 7) stores no V: layer_bytes = KB, and a token's V row is the
 * tail of its K row, v_in_k_off = the bytes of its first hd - hd_v values (V rows are then
 * tok_bytes apart: v_tok_bytes = tok_bytes). */
struct weft_kc_kv {
    uint8_t *base;
    size_t layer_bytes, tok_bytes, head_bytes;   /* tok_bytes, head_bytes: K's */
    size_t v_tok_bytes, v_head_bytes;            /* V's */
    size_t v_in_k_off;                           /* v_in_k: the V row's bytes into the K row */
    int n_layer, layer, n_kv, hd, hd_v;
    int v_in_k;                                  /* api 7: a latent cache (below) */
};

/* The device-side description of one cache layer, made on the host from
 * a launcher struct K (struct weft_gk_kv of kernels-common/launch.h: base, type,
 * n_layer, layer, n_kv, hd, hd_v (0: hd), v_in_k). */
template <class K> __host__ __device__ inline struct weft_kc_kv weft_kc_kv_of(const K &kv)
{
    struct weft_kc_kv d;
    const int hd_v = kv.hd_v > 0 ? kv.hd_v : kv.hd;
    const bool q8 = kv.type == WEFT_TYPE_Q8_0;
    const size_t head_bytes = q8 ? (size_t)kv.hd / WEFT_QK8_0 * WEFT_BSZ(q8_0) : (size_t)kv.hd * 2;
    const size_t v_head_bytes = q8 ? (size_t)hd_v / WEFT_QK8_0 * WEFT_BSZ(q8_0) : (size_t)hd_v * 2;
    d.base = kv.base;
    d.head_bytes = head_bytes;
    d.tok_bytes = head_bytes * (size_t)kv.n_kv;
    d.v_head_bytes = v_head_bytes;
    d.v_tok_bytes = v_head_bytes * (size_t)kv.n_kv;
    d.layer_bytes = (d.tok_bytes + d.v_tok_bytes) * WEFT_KV_BLOCK_TOKENS;
    d.v_in_k = kv.v_in_k != 0;
    d.v_in_k_off = 0;
    if (d.v_in_k) {
        /* K only in the block; V heads inside the K rows (n_kv 1), K's stride */
        d.layer_bytes = d.tok_bytes * WEFT_KV_BLOCK_TOKENS;
        d.v_tok_bytes = d.tok_bytes;
        d.v_in_k_off = q8 ? (size_t)(kv.hd - hd_v) / WEFT_QK8_0 * WEFT_BSZ(q8_0) : (size_t)(kv.hd - hd_v) * 2;
    }
    d.n_layer = kv.n_layer;
    d.layer = kv.layer;
    d.n_kv = kv.n_kv;
    d.hd = kv.hd;
    d.hd_v = hd_v;
    return d;
}

WEFT_DEV uint8_t *weft_kv_row(const struct weft_kc_kv &kv, int64_t slot, int which)
{
    const int64_t blk = slot / WEFT_KV_BLOCK_TOKENS, off = slot % WEFT_KV_BLOCK_TOKENS;
    uint8_t *layer = kv.base + ((size_t)blk * kv.n_layer + kv.layer) * kv.layer_bytes;
    if (which && kv.v_in_k) return layer + (size_t)off * kv.tok_bytes + kv.v_in_k_off;
    return layer + (which ? (size_t)WEFT_KV_BLOCK_TOKENS * kv.tok_bytes + (size_t)off * kv.v_tok_bytes
                          : (size_t)off * kv.tok_bytes);
}

#endif
