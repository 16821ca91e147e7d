/* What one instance holds, as the router believes it: a set of KV block
 * hashes (core/kv's chained 16-token hashes) with a fixed capacity and
 * least-recently-used eviction. The router fills it from its routing
 * history (a request's prompt blocks, at dispatch) and corrects it from the
 * instance's KV events (stored / removed) and index snapshots.
 *
 * Memory is fixed at init (about 24 bytes per block of capacity) and never
 * grows: the caller sizes it from the instance's reported KV capacity, so a
 * million unique prompts cost the same memory as ten. Pure, no locking:
 * one thread owns an index. */
#ifndef WEFT_PREFIX_INDEX_H
#define WEFT_PREFIX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct weft_prefix_entry;

struct weft_prefix_index {
    uint32_t cap, n;
    uint32_t mask;                 /* table size - 1 (a power of two >= 2 cap) */
    uint32_t *slot;                /* entry + 1, 0 = empty (linear probing) */
    struct weft_prefix_entry *e;   /* cap entries */
    uint32_t lru_head, lru_tail;   /* most / least recently used entry + 1, 0 = none */
    uint32_t free_head;            /* unused entries, chained through next */
    uint64_t inserted, evicted, removed;
};

/* cap blocks (>= 1). WEFT_ERR_NOMEM. */
weft_status weft_prefix_index_init(struct weft_prefix_index *ix, uint32_t cap);
void weft_prefix_index_free(struct weft_prefix_index *ix);
/* Change the capacity, keeping the most recently used blocks that fit. On
 * failure (WEFT_ERR_NOMEM) the index is unchanged. */
weft_status weft_prefix_index_resize(struct weft_prefix_index *ix, uint32_t cap);
/* Add (or refresh) a block; when full, the least recently used one goes. */
void weft_prefix_index_insert(struct weft_prefix_index *ix, uint64_t hash);
/* Insert hashes[0..n) so that hashes[0] ends up most recently used (a
 * prefix outlives its tail, as in core/kv's LRU). */
void weft_prefix_index_insert_chain(struct weft_prefix_index *ix, const uint64_t *hashes, uint32_t n);
void weft_prefix_index_remove(struct weft_prefix_index *ix, uint64_t hash);
void weft_prefix_index_clear(struct weft_prefix_index *ix);
int weft_prefix_index_contains(const struct weft_prefix_index *ix, uint64_t hash);
/* Leading blocks of hashes[0..n) present (a chain breaks at the first miss). */
uint32_t weft_prefix_index_match(const struct weft_prefix_index *ix, const uint64_t *hashes, uint32_t n);
/* Bytes this index holds (fixed by its capacity). */
size_t weft_prefix_index_bytes(const struct weft_prefix_index *ix);

#endif
