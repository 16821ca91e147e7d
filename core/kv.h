/* Paged KV cache: the block manager.
 *
 * A pool of fixed-size blocks on one device (one block = WEFT_KV_BLOCK_TOKENS
 * tokens of K and V for every layer; byte layout in backends/backend.h, the
 * same whatever backend wrote it), per-sequence block tables, reference
 * counts, and a prefix cache:
 *
 *  - A full block is named by a chained hash: hash(parent block's hash, its 16
 *    token ids). Once a sequence has computed a full block it is registered
 *    under that hash; a new sequence whose prompt starts with the same tokens
 *    takes the registered blocks (ref count + 1) instead of computing them.
 *  - A block whose ref count drops to 0 and that is registered stays cached:
 *    it joins an LRU list and can still be hit, until an allocation that
 *    finds no never-used/unregistered free block evicts the least recently
 *    freed one.
 *
 * Sliding-window layers (a Gemma 3 local layer attends to its last W
 * positions only) keep their K/V in a second group of blocks, the window
 * group (vLLM v1's KV cache groups): a block of the main group holds the
 * other layers and names the block (hash, ref count, the sequence's table);
 * its window block, when it has one, holds the window layers for the same
 * 16 positions. A sequence holds window blocks only for the blocks its
 * window still overlaps (at most W/16 + 1 while decoding): once no later
 * position needs one it is dropped (counted). A dropped window block of a
 * registered block stays cached (its own LRU), so a later prefix hit at a
 * boundary B finds the window before B; a hit is only taken up to the
 * longest boundary whose window is still held. Eviction takes a window
 * block from its main block (which still serves the full-attention layers
 * of longer hits). Every tier (swap, host prefix tier, export/import)
 * carries a block's window part when it has one.
 *
 * Two host tiers: one holds blocks of sequences swapped out by the
 * scheduler; the other (n_host_cache_blocks) is a second-level prefix cache:
 * a cached block the device evicts is copied there, still registered under
 * its hash, and a prefix match that misses the device finds it there and
 * promotes it back into a device block instead of recomputing it. A block's
 * hash is in one tier at a time (the device's wins).
 *
 * Hybrid models (Qwen3.5's Gated DeltaNet layers) have recurrent layers that keep no KV but a
 * fixed-size state per sequence: the pool holds them in state slots beside the blocks (vLLM's
 * and SGLang's separate state cache for such models), one per live sequence, taken with its
 * first blocks and zeroed then, given back at release; swapped to host memory and back with
 * its blocks. A slot's bytes are the same whatever the sequence's length. A block alone cannot
 * resume such a sequence: its prefix cache needs state checkpoints (below), which travel with
 * the blocks they end (base/kv_block.h's STATE runs).
 *
 * "No room" (WEFT_ERR_NO_ROOM) is an ordinary answer: the scheduler preempts
 * or waits. Functions that fail leave the pool and the sequence unchanged.
 * Not thread-safe: one owner (the engine thread) drives a pool. */
#ifndef WEFT_KV_H
#define WEFT_KV_H

#include "backends/backend.h"
#include "base/kv_block.h"

/* With layers split over devices each device holds its layers' part of every
 * block (the block layout of backend.h with n_layer = that part's count); a
 * device whose buffers are limited (weft_backend_max_buffer) holds its layers
 * in several such buffers, whole layers each. */
#define WEFT_KV_MAX_PARTS 8     /* devices */
#define WEFT_KV_MAX_BUFS 64     /* buffers over all devices */
struct weft_kv_part {
    struct weft_backend *be;       /* not owned */
    uint32_t layer0, n_layer;      /* indices within the part's group */
    struct weft_buffer *buf;       /* n_blocks blocks of this part's layers */
    size_t block_bytes;            /* this part's bytes of one block */
};

struct weft_kv_config {
    uint32_t n_layer, n_kv_head, head_dim;
    uint32_t head_dim_v;          /* V's head dim (backend.h's layout); 0: head_dim */
    /* 0: every layer on the pool's device; else consecutive layer counts per
     * device, summing to n_layer */
    uint32_t n_parts;
    struct weft_backend *part_be[WEFT_KV_MAX_PARTS];
    uint32_t part_layers[WEFT_KV_MAX_PARTS];
    uint32_t n_blocks;            /* device blocks (>= 1) */
    uint32_t n_host_blocks;       /* host swap tier capacity, 0 = none */
    uint32_t n_host_cache_blocks; /* host prefix tier capacity, 0 = none (needs prefix_cache) */
    enum weft_type type;          /* WEFT_TYPE_F16 (default when 0 is passed as F32) */
    bool prefix_cache;            /* register and reuse full blocks */
    /* sliding window: window_layer[l] (n_layer flags) marks the layers
     * that attend to the last `window` positions only; their K/V go to the
     * window group of n_window_blocks blocks (0: n_blocks). window 0 or
     * no window layer: one group, every block kept (as llama.cpp's
     * --swa-full). */
    uint32_t window;
    const bool *window_layer;
    uint32_t n_window_blocks;
    /* a latent cache (MLA): no V stored; V is the last head_dim_v values of each K row
     * (n_kv_head 1; backends/backend.h's v_in_k) */
    bool latent;
    /* a hybrid model: state_layer[l] (n_layer flags) marks the recurrent layers, which keep no
     * KV but state_layer_bytes per sequence in one of n_state_slots slots (>= 1) */
    const bool *state_layer;
    size_t state_layer_bytes;
    uint32_t n_state_slots;
    /* prefix caching with recurrent state: with a prefix cache, a sequence's state is copied
     * to a host checkpoint whenever it has computed a multiple of state_ckpt_every tokens
     * (a multiple of 16) or its ck_at, named by the hash of the block ending there, in at most
     * n_state_ckpts checkpoints (the least recently used replaced); a prefix hit then takes
     * the longest prefix ending at a checkpoint, the state restored. 0: no prefix cache for
     * a hybrid model */
    uint32_t state_ckpt_every, n_state_ckpts;
    /* layers of two shapes (Gemma 4): the window group's K/V heads and head dims (0s: the
     * main group's); window layers of another shape need the window group. kv_source (NULL:
     * every layer its own): layer l keeps no K/V and attends to layer kv_source[l]'s (< l, on
     * the same device) */
    uint32_t window_n_kv_head, window_head_dim, window_head_dim_v;
    const uint32_t *kv_source;
};

struct weft_kv_stats {
    uint32_t n_blocks, used, cached, free;   /* used: ref > 0; cached: ref 0, reusable */
    uint64_t bytes_per_token;                /* one token's K/V over every layer (block bytes / 16) */
    uint32_t n_host_blocks, host_used;
    uint64_t hit_blocks;                     /* blocks taken from the prefix cache */
    uint64_t evictions;
    uint64_t imported_blocks;                /* put in by weft_kv_import */
    uint64_t hit_imported_blocks;            /* of hit_blocks, ones that were imported */
    /* host prefix tier */
    uint32_t n_host_cache_blocks, host_cache_used;
    uint64_t host_hit_blocks;                /* of hit_blocks, ones promoted from the host tier */
    uint64_t host_demotions, host_evictions;
    uint32_t pinned;                         /* references held by weft_kv_pin (leases) */
    /* the window group (0s without one) */
    uint32_t window, n_window_blocks, window_used, window_cached, window_free;
    uint64_t window_dropped;                 /* window blocks sequences let go of (out of their window) */
    uint64_t window_evictions;               /* cached window blocks taken for others */
    uint32_t window_peak;                    /* the most window blocks one sequence held after a step */
    /* recurrent state (0s without): slots, those held, one sequence's bytes (every state layer) */
    uint32_t n_state_slots, state_used;
    uint64_t state_bytes_per_seq;
    uint64_t state_swaps;                    /* slots copied to the host with a swapped-out sequence */
    /* state checkpoints (0s without): every how many tokens, capacity, held, bytes each; taken,
     * restored by a prefix hit, replaced when full */
    uint32_t ckpt_every, n_ckpts, ckpts_used;
    uint64_t ckpt_bytes, ckpts_stored, ckpt_hits, ckpts_replaced;
    uint64_t ckpts_imported;                 /* put in by weft_kv_checkpoint_put */
};

/* What the prefix cache tells a listener (e.g. a router, through weft
 * serve's /v1/kv/events): a full block was registered under its chained
 * hash, or a registered block was evicted; a hybrid's state checkpoint was
 * taken (or imported) under the hash of the block it ends, or replaced
 * (parent 0). Called from inside the pool's operations (the engine thread,
 * under its lock): must be quick and must not call back into the pool. */
enum weft_kv_event_kind {
    WEFT_KV_EVENT_STORED = 1,
    WEFT_KV_EVENT_REMOVED = 2,
    WEFT_KV_EVENT_CKPT_STORED = 3,
    WEFT_KV_EVENT_CKPT_REMOVED = 4,
};
typedef void (*weft_kv_event_fn)(void *user, enum weft_kv_event_kind kind, uint64_t hash, uint64_t parent);

struct weft_kv_pool {
    struct weft_backend *be;       /* = parts[0].be, not owned */
    struct weft_buffer *buf;       /* = parts[0].buf: n_blocks blocks, layout in backend.h */
    struct weft_kv_part parts[WEFT_KV_MAX_BUFS];
    uint32_t n_parts;              /* buffers, in layer order */
    uint32_t n_blocks, n_layer, n_kv_head, head_dim;
    uint32_t head_dim_v;           /* = head_dim unless the model's V heads differ */
    bool latent;                   /* V inside K (weft_kv_config's latent) */
    enum weft_type type;
    bool prefix_cache;
    size_t block_bytes;            /* all layers (every part, both groups), K and V */
    size_t main_bytes;             /* the main group's layers: a block without its window part */
    /* layer l is index lidx[l] of group lgroup[l] (0 main, 1 window, 2 recurrent state, 3 none:
     * it reads layer ksrc[l]'s K/V) */
    uint8_t *lgroup;
    uint32_t *lidx;
    /* the window group: its buffers, blocks and bookkeeping (n_wblocks 0:
     * none). wof[b]: main block b's window block or -1; wowner[w]: the main
     * block window block w belongs to, -1 when free; wref[w]: sequences
     * whose window covers it; cached ones (wref 0, owner registered) in an
     * LRU, oldest at wlru_head */
    uint32_t window, n_wblocks, n_wparts, n_wlayer;
    struct weft_kv_part wparts[WEFT_KV_MAX_BUFS];
    size_t wblock_bytes;
    int32_t *wof, *wowner, *wlru_prev, *wlru_next, *wfree;
    uint32_t *wref;
    int32_t wlru_head, wlru_tail;
    uint32_t n_wfree, n_wcached;
    uint64_t wdropped, wevictions;
    uint32_t wpeak;
    /* per block */
    uint32_t *ref;
    uint64_t *hash;                /* 0 = not registered */
    uint64_t *parent;              /* parent hash of a registered block */
    int32_t *toks;                 /* [n_blocks][16] ids of a registered block */
    int32_t *lru_prev, *lru_next;  /* cached blocks, oldest at lru_head */
    int32_t lru_head, lru_tail;
    int32_t *free_ids;             /* stack of free unregistered blocks */
    uint32_t n_free, n_cached;
    /* hash -> block (open addressing, linear probing) */
    uint64_t *ht_key;
    int32_t *ht_val;
    uint32_t ht_mask;
    /* host tier */
    unsigned char *host;
    uint32_t n_host_blocks;
    int32_t *host_free;
    uint32_t n_host_free;
    uint64_t hit_blocks, evictions;
    uint8_t *imported;             /* per block: its K/V came from weft_kv_import */
    uint64_t imported_blocks, hit_imported_blocks;
    /* host prefix tier: a cached block evicted from the device demotes here
     * (a copy, registered under its hash), and a prefix match that misses
     * the device promotes it back; LRU of filled slots, oldest at hc_head */
    unsigned char *hc, *hc_scratch;  /* n_hc blocks; one block */
    uint32_t n_hc, n_hc_free;
    uint64_t *hc_hash, *hc_parent;
    int32_t *hc_toks, *hc_prev, *hc_next, *hc_free;
    uint8_t *hc_win;                 /* per slot: it holds the window part too */
    int32_t hc_head, hc_tail;
    uint64_t *hc_key;
    int32_t *hc_val;
    uint32_t hc_mask;
    uint64_t host_hit_blocks, host_demotions, host_evictions;
    uint32_t pinned;               /* weft_kv_pin references outstanding */
    /* recurrent state: state layers in lgroup 2, their slots in sparts (slot s of a part at
     * s · its block_bytes: its layers' state_layer_bytes each); a stack of free slots; a zeroed
     * host copy of the largest part's slot (a new sequence's state) */
    uint32_t n_slots, n_slayer, n_sparts, n_sfree;
    struct weft_kv_part sparts[WEFT_KV_MAX_BUFS];
    size_t state_layer_bytes, slot_bytes;
    int32_t *sfree;
    unsigned char *szero;
    uint64_t state_swaps;
    /* the window group's K/V shape (= the main group's unless the config gave one); layers
     * reading another's cache (lgroup 3): ksrc[l], n_kshared of them */
    uint32_t wn_kv_head, whead_dim, whead_dim_v;
    uint32_t *ksrc;
    uint32_t n_kshared;
    /* state checkpoints on the host: ck_hash[i] (0: free) names checkpoint i's slot_bytes at
     * ck_data + i · slot_bytes; ck_used[i]: its last use (LRU by tick) */
    uint32_t ck_every, n_ck, ck_held;
    uint64_t *ck_hash, *ck_used, ck_tick;
    unsigned char *ck_data;
    uint64_t ck_stored, ck_hits, ck_replaced, ck_imported;
    weft_kv_event_fn on_event;     /* NULL: none */
    void *on_event_user;
};

/* A sequence's block table: blocks[i] holds positions [16 i, 16 i + 16).
 * n_hashed leading blocks are registered (their hashes chain from 0);
 * last_hash is blocks[n_hashed - 1]'s. With a window group the sequence
 * holds the window blocks of blocks[wfirst..n_blocks) (one reference each);
 * those before wfirst fell out of its window. */
struct weft_kv_seq {
    int32_t *blocks;
    uint32_t n_blocks, cap;
    uint32_t wfirst;
    uint32_t n_hashed;
    uint64_t last_hash;
    /* when swapped out: host slots, one per block (n_blocks of them) */
    int32_t *host;
    bool swapped;
    /* a pool with recurrent state: the sequence's slot + 1 (0: none yet); swapped out, the
     * slot's bytes (slot_bytes) on the host */
    int32_t state;
    unsigned char *state_host;
    /* a checkpoint is also taken when the sequence has computed ck_at tokens (a multiple of 16;
     * 0: none): the scheduler sets it to a prompt's last full block before its last token, so
     * that the prompt's prefix resumes where its blocks end (a repeat, a hand-off) */
    uint32_t ck_at;
};

weft_status weft_kv_pool_create(struct weft_kv_pool *kv, struct weft_backend *be, const struct weft_kv_config *cfg);
/* F16, no host tier, no prefix cache. */
weft_status weft_kv_pool_init(struct weft_kv_pool *kv, struct weft_backend *be, uint32_t n_layer,
                              uint32_t n_kv_head, uint32_t head_dim, uint32_t n_blocks);
void weft_kv_pool_free(struct weft_kv_pool *kv);
void weft_kv_stats(const struct weft_kv_pool *kv, struct weft_kv_stats *out);
/* Blocks an allocation could get now (free + cached), in the main group;
 * weft_kv_window_available: in the window group (0 without one). */
uint32_t weft_kv_available(const struct weft_kv_pool *kv);
uint32_t weft_kv_window_available(const struct weft_kv_pool *kv);
/* The pool has a window group: window layers whose blocks are dropped. */
static inline bool weft_kv_has_window(const struct weft_kv_pool *kv) { return kv->n_wblocks > 0; }
/* Layer l's K/V live in the window group. */
static inline bool weft_kv_layer_in_window(const struct weft_kv_pool *kv, uint32_t l)
{
    if (kv->lgroup && kv->lgroup[l] == 3) l = kv->ksrc[l];
    return kv->lgroup && kv->lgroup[l] == 1;
}
/* Main block b's window block (-1: none: no window group, or dropped). */
static inline int32_t weft_kv_window_block(const struct weft_kv_pool *kv, int32_t b)
{
    return kv->wof ? kv->wof[b] : -1;
}

/* On an empty seq: take the longest registered prefix of tokens[0..n) in
 * whole blocks, leaving at least one token to compute (so the last prompt
 * token always produces logits); with a window group, only up to the
 * longest boundary whose window blocks are all held. Returns the number of
 * tokens covered. */
uint32_t weft_kv_seq_match_prefix(struct weft_kv_pool *kv, struct weft_kv_seq *seq, const int32_t *tokens, uint32_t n);

/* Make seq able to hold n_tokens positions, taking fresh blocks (evicting
 * cached ones when needed) and, with recurrent state, a zeroed slot when it has none.
 * WEFT_ERR_NO_ROOM when the pool is short (blocks or slots); then seq is unchanged. */
weft_status weft_kv_seq_reserve(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t n_tokens);
/* Blocks seq would need to take to hold n_tokens positions. */
uint32_t weft_kv_seq_blocks_needed(const struct weft_kv_seq *seq, uint32_t n_tokens);

/* tokens[0..n_computed) now have their K/V in seq's blocks: register the
 * newly full blocks (with a prefix cache; a block whose hash is already
 * registered by another block stays unregistered), then, with a window
 * group, drop the window blocks no position from n_computed on needs
 * (the sequence never goes back). */
void weft_kv_seq_commit(struct weft_kv_pool *kv, struct weft_kv_seq *seq, const int32_t *tokens, uint32_t n_computed);

/* Drop seq's references (last block first, so a prefix outlives its tail in
 * the LRU) and its host copies; seq becomes empty. */
void weft_kv_seq_release(struct weft_kv_pool *kv, struct weft_kv_seq *seq);

/* Window blocks seq holds (0 without a window group). */
static inline uint32_t weft_kv_seq_window_held(const struct weft_kv_pool *kv, const struct weft_kv_seq *seq)
{
    return kv->n_wblocks && !seq->swapped ? seq->n_blocks - seq->wfirst : 0;
}

/* Copy seq's blocks to the host tier and drop the device references.
 * WEFT_ERR_NO_ROOM if the host tier is short (seq unchanged). Waits for the
 * backend to finish pending work first. */
weft_status weft_kv_seq_swap_out(struct weft_kv_pool *kv, struct weft_kv_seq *seq);
/* Bring a swapped-out seq back into fresh device blocks. WEFT_ERR_NO_ROOM if
 * the device is short (seq unchanged, still swapped). */
weft_status weft_kv_seq_swap_in(struct weft_kv_pool *kv, struct weft_kv_seq *seq);

/* ---- blocks in and out (base/kv_block.h is their format) ----
 * A block's bytes, as read and imported here: the main group's layers in
 * order, then the window group's, each K then V, [16][n_kv_head][head_dim]
 * and [16][n_kv_head][head_dim_v] of the pool's type (block_bytes); a block
 * without its window part is its first main_bytes. */

/* The registered block named hash (its parent and tokens are in parent[]
 * and toks[]), or -1. */
int32_t weft_kv_lookup(const struct weft_kv_pool *kv, uint64_t hash);
/* The state checkpoint named hash (the recurrent state after the block of that hash:
 * slot_bytes on the host, valid until the pool next changes), or NULL. */
const void *weft_kv_checkpoint(const struct weft_kv_pool *kv, uint64_t hash);
/* Hold a checkpoint made elsewhere (an import) under hash: bytes must be slot_bytes; one
 * already held under that name stays (*added false). WEFT_ERR_UNSUPPORTED without
 * checkpoints. */
weft_status weft_kv_checkpoint_put(struct weft_kv_pool *kv, uint64_t hash, const void *state, size_t bytes,
                                   bool *added);
/* The pool holds a block named hash, on the device or in the host tier. */
bool weft_kv_holds(const struct weft_kv_pool *kv, uint64_t hash);
/* The host prefix tier's copy of the block named hash: its payload
 * (block_bytes, valid until the pool next changes; its window part only
 * when *window), parent and tokens; false when the tier does not hold it.
 * window may be NULL. */
bool weft_kv_host_block(const struct weft_kv_pool *kv, uint64_t hash, const void **payload, uint64_t *parent,
                        const int32_t **tokens, bool *window);
/* Copy block b's bytes to host (block_bytes; the window part only when b
 * has one: weft_kv_window_block), after the backends' pending work. */
weft_status weft_kv_block_read(struct weft_kv_pool *kv, int32_t b, void *host);
/* Put a block computed elsewhere into the prefix cache, registered under
 * hash = weft_kv_block_hash(parent, tokens) as a cached block (ref 0, the
 * most recent in the LRU), so a prompt with that prefix takes it instead of
 * computing it. A hash already registered is left as it is (*added false),
 * unless the device block lacks the window part the payload brings (then
 * that is added). payload holds payload_bytes: the pool's block_bytes, or
 * main_bytes for a block without its window part (a window group only).
 * WEFT_ERR_NO_ROOM when no block is free or evictable; WEFT_ERR_INVALID_ARG
 * without a prefix cache, for a payload of another size or for a hash that
 * is not the tokens' (nothing is copied then). */
weft_status weft_kv_import(struct weft_kv_pool *kv, uint64_t parent, uint64_t hash, const int32_t *tokens,
                           const void *payload, size_t payload_bytes, bool *added);

/* Hold the registered device block named hash (a reference, as a
 * sequence's): it is neither evicted nor demoted until weft_kv_unpin. For
 * blocks that arrived ahead of the request that will use them (a prefill
 * instance's output, under a lease). false when the device does not hold
 * it (absent, or only in the host tier). */
bool weft_kv_pin(struct weft_kv_pool *kv, uint64_t hash);
/* Drop one weft_kv_pin reference to hash (no-op when it holds none). */
void weft_kv_unpin(struct weft_kv_pool *kv, uint64_t hash);

/* View of one layer of the pool for ROPE_KV / ATTENTION ops (no buffer for a recurrent layer). */
struct weft_kv_view weft_kv_layer_view(const struct weft_kv_pool *kv, uint32_t layer);

/* The pool keeps recurrent state; layer l is one of its state layers. */
static inline bool weft_kv_has_state(const struct weft_kv_pool *kv) { return kv->n_slots > 0; }
static inline bool weft_kv_layer_state(const struct weft_kv_pool *kv, uint32_t l)
{
    return kv->lgroup && l < kv->n_layer && kv->lgroup[l] == 2;
}
/* Recurrent layer l's state: slot s's state_layer_bytes at offset + s · stride of buf, for
 * n_slots slots (a zero view when l keeps none). */
struct weft_kv_state_view {
    struct weft_buffer *buf;
    size_t offset, stride;
    uint32_t n_slots;
};
struct weft_kv_state_view weft_kv_state_view(const struct weft_kv_pool *kv, uint32_t l);
/* Free state slots (0 without state). */
static inline uint32_t weft_kv_state_available(const struct weft_kv_pool *kv) { return kv->n_sfree; }

/* Internal consistency check (ref counts vs free/cached lists vs hash
 * table) for tests; WEFT_OK or WEFT_ERR_INVALID_ARG naming the problem. */
weft_status weft_kv_check(const struct weft_kv_pool *kv);

#endif
