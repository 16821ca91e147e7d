#include "core/kv.h"

#include <stdlib.h>

weft_status weft_kv_pool_init(struct weft_kv_pool *kv, struct weft_backend *be, uint32_t n_layer,
                              uint32_t n_kv_head, uint32_t head_dim, uint32_t n_blocks)
{
    struct weft_kv_pool k = {.be = be, .n_blocks = n_blocks, .n_layer = n_layer,
                             .n_kv_head = n_kv_head, .head_dim = head_dim};
    k.block_bytes = (size_t)2 * n_layer * WEFT_KV_BLOCK_TOKENS * n_kv_head * head_dim * sizeof(weft_half);
    if (n_blocks == 0) return weft_error(WEFT_ERR_INVALID_ARG, "kv: pool needs at least one block");
    k.free_ids = malloc(sizeof(int32_t) * n_blocks);
    if (!k.free_ids) return weft_error(WEFT_ERR_NOMEM, "kv: out of memory");
    weft_status st = be->iface->buffer_alloc(be, k.block_bytes * n_blocks, &k.buf);
    if (st != WEFT_OK) { free(k.free_ids); return st; }
    for (uint32_t i = 0; i < n_blocks; i++) k.free_ids[i] = (int32_t)(n_blocks - 1 - i);
    k.n_free = n_blocks;
    *kv = k;
    return WEFT_OK;
}

void weft_kv_pool_free(struct weft_kv_pool *kv)
{
    if (kv->buf) kv->be->iface->buffer_free(kv->buf);
    free(kv->free_ids);
    kv->buf = NULL;
    kv->free_ids = NULL;
}

weft_status weft_kv_seq_reserve(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t n_tokens)
{
    uint32_t need = (n_tokens + WEFT_KV_BLOCK_TOKENS - 1) / WEFT_KV_BLOCK_TOKENS;
    if (need <= seq->n_blocks) return WEFT_OK;
    if (need - seq->n_blocks > kv->n_free)
        return weft_error(WEFT_ERR_NO_ROOM, "kv: need %u more blocks, %u free", need - seq->n_blocks, kv->n_free);
    if (need > seq->cap) {
        uint32_t cap = need > 2 * seq->cap ? need : 2 * seq->cap;
        int32_t *b = realloc(seq->blocks, sizeof(int32_t) * cap);
        if (!b) return weft_error(WEFT_ERR_NOMEM, "kv: out of memory");
        seq->blocks = b;
        seq->cap = cap;
    }
    while (seq->n_blocks < need) seq->blocks[seq->n_blocks++] = kv->free_ids[--kv->n_free];
    return WEFT_OK;
}

void weft_kv_seq_release(struct weft_kv_pool *kv, struct weft_kv_seq *seq)
{
    for (uint32_t i = 0; i < seq->n_blocks; i++) kv->free_ids[kv->n_free++] = seq->blocks[i];
    free(seq->blocks);
    seq->blocks = NULL;
    seq->n_blocks = seq->cap = 0;
}

struct weft_kv_view weft_kv_layer_view(const struct weft_kv_pool *kv, uint32_t layer)
{
    struct weft_kv_view v = {kv->buf, WEFT_TYPE_F16, kv->n_layer, layer, kv->n_kv_head, kv->head_dim};
    return v;
}
