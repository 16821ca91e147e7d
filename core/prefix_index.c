/* Bounded LRU set of block hashes (prefix_index.h). */
#include "core/prefix_index.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct weft_prefix_entry {
    uint64_t hash;
    uint32_t prev, next;           /* LRU neighbours + 1 (0 = none); next also chains the free list */
};

static uint32_t table_size(uint32_t cap)
{
    uint32_t t = 16;
    while (t < 2u * cap && t < (1u << 31)) t <<= 1;
    return t;
}

/* the chained hashes are already well mixed; fold the high bits in anyway */
static uint32_t home(const struct weft_prefix_index *ix, uint64_t h)
{
    return (uint32_t)(h ^ (h >> 29) ^ (h >> 47)) & ix->mask;
}

static void reset(struct weft_prefix_index *ix)
{
    memset(ix->slot, 0, sizeof(uint32_t) * ((size_t)ix->mask + 1));
    ix->n = 0;
    ix->lru_head = ix->lru_tail = 0;
    for (uint32_t i = 0; i < ix->cap; i++) ix->e[i].next = i + 2 <= ix->cap ? i + 2 : 0;
    ix->free_head = ix->cap ? 1 : 0;
}

weft_status weft_prefix_index_init(struct weft_prefix_index *ix, uint32_t cap)
{
    memset(ix, 0, sizeof *ix);
    if (cap < 1) cap = 1;
    if (cap > (1u << 30)) return weft_error(WEFT_ERR_INVALID_ARG, "prefix index: capacity %u is too large", cap);
    uint32_t t = table_size(cap);
    ix->slot = malloc(sizeof(uint32_t) * t);
    ix->e = malloc(sizeof *ix->e * cap);
    if (!ix->slot || !ix->e) {
        free(ix->slot);
        free(ix->e);
        memset(ix, 0, sizeof *ix);
        return weft_error(WEFT_ERR_NOMEM, "prefix index: out of memory for %u blocks", cap);
    }
    ix->cap = cap;
    ix->mask = t - 1;
    reset(ix);
    return WEFT_OK;
}

void weft_prefix_index_free(struct weft_prefix_index *ix)
{
    free(ix->slot);
    free(ix->e);
    memset(ix, 0, sizeof *ix);
}

/* slot position holding hash, or UINT32_MAX */
static uint32_t find(const struct weft_prefix_index *ix, uint64_t h)
{
    if (!ix->slot) return UINT32_MAX;
    for (uint32_t p = home(ix, h);; p = (p + 1) & ix->mask) {
        uint32_t s = ix->slot[p];
        if (!s) return UINT32_MAX;
        if (ix->e[s - 1].hash == h) return p;
    }
}

static void lru_unlink(struct weft_prefix_index *ix, uint32_t i)
{
    struct weft_prefix_entry *x = &ix->e[i - 1];
    if (x->prev) ix->e[x->prev - 1].next = x->next;
    else ix->lru_head = x->next;
    if (x->next) ix->e[x->next - 1].prev = x->prev;
    else ix->lru_tail = x->prev;
    x->prev = x->next = 0;
}

static void lru_push_front(struct weft_prefix_index *ix, uint32_t i)
{
    struct weft_prefix_entry *x = &ix->e[i - 1];
    x->prev = 0;
    x->next = ix->lru_head;
    if (ix->lru_head) ix->e[ix->lru_head - 1].prev = i;
    ix->lru_head = i;
    if (!ix->lru_tail) ix->lru_tail = i;
}

/* backward-shift deletion at slot position p (keeps probe chains intact) */
static void slot_delete(struct weft_prefix_index *ix, uint32_t p)
{
    uint32_t q = p;
    for (;;) {
        ix->slot[p] = 0;
        for (;;) {
            q = (q + 1) & ix->mask;
            uint32_t s = ix->slot[q];
            if (!s) return;
            uint32_t h = home(ix, ix->e[s - 1].hash);
            /* may s move to p? only if its home is not cyclically in (p, q] */
            bool stays = p <= q ? (p < h && h <= q) : (p < h || h <= q);
            if (!stays) {
                ix->slot[p] = s;
                p = q;
                break;
            }
        }
    }
}

static void drop_entry(struct weft_prefix_index *ix, uint32_t p)
{
    uint32_t i = ix->slot[p];
    slot_delete(ix, p);
    lru_unlink(ix, i);
    ix->e[i - 1].next = ix->free_head;
    ix->free_head = i;
    ix->n--;
}

void weft_prefix_index_insert(struct weft_prefix_index *ix, uint64_t hash)
{
    if (!ix->cap) return;
    uint32_t p = find(ix, hash);
    if (p != UINT32_MAX) {
        uint32_t i = ix->slot[p];
        lru_unlink(ix, i);
        lru_push_front(ix, i);
        return;
    }
    if (ix->n == ix->cap) {
        uint32_t victim = find(ix, ix->e[ix->lru_tail - 1].hash);
        drop_entry(ix, victim);
        ix->evicted++;
    }
    uint32_t i = ix->free_head;
    ix->free_head = ix->e[i - 1].next;
    ix->e[i - 1].hash = hash;
    lru_push_front(ix, i);
    for (p = home(ix, hash); ix->slot[p]; p = (p + 1) & ix->mask) {}
    ix->slot[p] = i;
    ix->n++;
    ix->inserted++;
}

void weft_prefix_index_insert_chain(struct weft_prefix_index *ix, const uint64_t *hashes, uint32_t n)
{
    for (uint32_t k = n; k > 0; k--) weft_prefix_index_insert(ix, hashes[k - 1]);
}

void weft_prefix_index_remove(struct weft_prefix_index *ix, uint64_t hash)
{
    uint32_t p = find(ix, hash);
    if (p == UINT32_MAX) return;
    drop_entry(ix, p);
    ix->removed++;
}

void weft_prefix_index_clear(struct weft_prefix_index *ix)
{
    if (ix->cap) reset(ix);
}

int weft_prefix_index_contains(const struct weft_prefix_index *ix, uint64_t hash)
{
    return find(ix, hash) != UINT32_MAX;
}

uint32_t weft_prefix_index_match(const struct weft_prefix_index *ix, const uint64_t *hashes, uint32_t n)
{
    uint32_t k = 0;
    while (k < n && find(ix, hashes[k]) != UINT32_MAX) k++;
    return k;
}

weft_status weft_prefix_index_resize(struct weft_prefix_index *ix, uint32_t cap)
{
    if (cap < 1) cap = 1;
    if (cap == ix->cap) return WEFT_OK;
    struct weft_prefix_index nx;
    weft_status st = weft_prefix_index_init(&nx, cap);
    if (st != WEFT_OK) return st;
    /* oldest first among those that fit, so recency order carries over */
    uint32_t keep = ix->n < cap ? ix->n : cap, i = ix->lru_head;
    for (uint32_t k = 1; k < keep && i; k++) i = ix->e[i - 1].next;
    for (; i; i = ix->e[i - 1].prev) weft_prefix_index_insert(&nx, ix->e[i - 1].hash);
    nx.inserted = ix->inserted;
    nx.evicted = ix->evicted + (ix->n - keep);
    nx.removed = ix->removed;
    weft_prefix_index_free(ix);
    *ix = nx;
    return WEFT_OK;
}

size_t weft_prefix_index_bytes(const struct weft_prefix_index *ix)
{
    return ix->cap ? sizeof(uint32_t) * ((size_t)ix->mask + 1) + sizeof(struct weft_prefix_entry) * ix->cap : 0;
}
