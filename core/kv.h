/* Paged KV cache: a pool of fixed-size blocks on one device and per-sequence
 * block tables. This is the simple allocator (free list); reference counts,
 * prefix caching and host tiers build on it in the block manager. */
#ifndef WEFT_KV_H
#define WEFT_KV_H

#include "backends/backend.h"

struct weft_kv_pool {
    struct weft_backend *be;       /* not owned */
    struct weft_buffer *buf;       /* n_blocks blocks, layout in backend.h */
    uint32_t n_blocks, n_layer, n_kv_head, head_dim;
    size_t block_bytes;            /* all layers, K and V */
    int32_t *free_ids;             /* stack of free block ids */
    uint32_t n_free;
};

/* A sequence's block table: blocks[i] holds positions [16 i, 16 i + 16). */
struct weft_kv_seq {
    int32_t *blocks;
    uint32_t n_blocks, cap;
};

/* Allocate n_blocks blocks on be. *out untouched on failure. */
weft_status weft_kv_pool_init(struct weft_kv_pool *kv, struct weft_backend *be, uint32_t n_layer,
                              uint32_t n_kv_head, uint32_t head_dim, uint32_t n_blocks);
void weft_kv_pool_free(struct weft_kv_pool *kv);

/* Make seq able to hold n_tokens positions, taking blocks from the pool.
 * WEFT_ERR_NO_ROOM (an ordinary answer) when the pool is short; then seq is
 * unchanged. */
weft_status weft_kv_seq_reserve(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t n_tokens);
/* Return all of seq's blocks to the pool. */
void weft_kv_seq_release(struct weft_kv_pool *kv, struct weft_kv_seq *seq);

/* View of one layer of the pool for ROPE_KV / ATTENTION ops. */
struct weft_kv_view weft_kv_layer_view(const struct weft_kv_pool *kv, uint32_t layer);

#endif
