#include "core/kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BT WEFT_KV_BLOCK_TOKENS


/* ---- hash tables: registered hash -> block (device) or slot (host) ---- */

static uint32_t ht_slot(uint64_t h, uint32_t mask) { return (uint32_t)(h ^ (h >> 29)) & mask; }

static int32_t ht_find(const uint64_t *key, const int32_t *val, uint32_t mask, uint64_t h)
{
    for (uint32_t i = ht_slot(h, mask);; i = (i + 1) & mask) {
        if (key[i] == 0) return -1;
        if (key[i] == h) return val[i];
    }
}

static void ht_insert(uint64_t *key, int32_t *val, uint32_t mask, uint64_t h, int32_t b)
{
    uint32_t i = ht_slot(h, mask);
    while (key[i] != 0) i = (i + 1) & mask;
    key[i] = h;
    val[i] = b;
}

/* Linear-probing delete by backward shift (no tombstones). */
static void ht_remove(uint64_t *key, int32_t *val, uint32_t m, uint64_t h)
{
    uint32_t i = ht_slot(h, m);
    while (key[i] != h) {
        if (key[i] == 0) return;
        i = (i + 1) & m;
    }
    for (uint32_t j = (i + 1) & m;; j = (j + 1) & m) {
        if (key[j] == 0) break;
        uint32_t home = ht_slot(key[j], m);
        /* move j back to i if its home is not in (i, j] (cyclically) */
        bool in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            key[i] = key[j];
            val[i] = val[j];
            i = j;
        }
    }
    key[i] = 0;
}

static int32_t ht_get(const struct weft_kv_pool *kv, uint64_t h) { return ht_find(kv->ht_key, kv->ht_val, kv->ht_mask, h); }
static void ht_put(struct weft_kv_pool *kv, uint64_t h, int32_t b) { ht_insert(kv->ht_key, kv->ht_val, kv->ht_mask, h, b); }
static void ht_del(struct weft_kv_pool *kv, uint64_t h) { ht_remove(kv->ht_key, kv->ht_val, kv->ht_mask, h); }

static uint32_t ht_cap_for(uint32_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

/* ---- LRU lists: doubly linked through prev/next arrays, oldest at head ---- */

static void list_push(int32_t *prev, int32_t *next, int32_t *head, int32_t *tail, int32_t i)
{
    prev[i] = *tail;
    next[i] = -1;
    if (*tail >= 0) next[*tail] = i;
    else *head = i;
    *tail = i;
}

static void list_remove(int32_t *prev, int32_t *next, int32_t *head, int32_t *tail, int32_t i)
{
    int32_t p = prev[i], n = next[i];
    if (p >= 0) next[p] = n; else *head = n;
    if (n >= 0) prev[n] = p; else *tail = p;
    prev[i] = next[i] = -1;
}

/* cached (ref 0, registered) device blocks */
static void lru_push(struct weft_kv_pool *kv, int32_t b)
{
    list_push(kv->lru_prev, kv->lru_next, &kv->lru_head, &kv->lru_tail, b);
    kv->n_cached++;
}

static void lru_remove(struct weft_kv_pool *kv, int32_t b)
{
    list_remove(kv->lru_prev, kv->lru_next, &kv->lru_head, &kv->lru_tail, b);
    kv->n_cached--;
}

/* ---- the window group ---- */

static void wlru_push(struct weft_kv_pool *kv, int32_t w)
{
    list_push(kv->wlru_prev, kv->wlru_next, &kv->wlru_head, &kv->wlru_tail, w);
    kv->n_wcached++;
}

static void wlru_remove(struct weft_kv_pool *kv, int32_t w)
{
    list_remove(kv->wlru_prev, kv->wlru_next, &kv->wlru_head, &kv->wlru_tail, w);
    kv->n_wcached--;
}

/* Window block w leaves its main block and goes back to the free stack. */
static void wunlink(struct weft_kv_pool *kv, int32_t w)
{
    if (kv->wowner[w] >= 0) kv->wof[kv->wowner[w]] = -1;
    kv->wowner[w] = -1;
    kv->wref[w] = 0;
    kv->wfree[kv->n_wfree++] = w;
}

/* A window block for main block b, held once (wref 1): a free one, else
 * the least recently dropped cached one, taken from its main block. -1 if
 * none. */
static int32_t take_wblock(struct weft_kv_pool *kv, int32_t b)
{
    int32_t w;
    if (kv->n_wfree) {
        w = kv->wfree[--kv->n_wfree];
    } else if (kv->wlru_head >= 0) {
        w = kv->wlru_head;
        wlru_remove(kv, w);
        kv->wof[kv->wowner[w]] = -1;
        kv->wevictions++;
    } else {
        return -1;
    }
    kv->wowner[w] = b;
    kv->wof[b] = w;
    kv->wref[w] = 1;
    return w;
}

/* One holder less of window block w: with none left it stays cached while
 * its main block is registered (a later hit's window), else it is freed. */
static void wunref(struct weft_kv_pool *kv, int32_t w)
{
    if (w < 0 || --kv->wref[w] > 0) return;
    if (kv->hash[kv->wowner[w]]) wlru_push(kv, w);
    else wunlink(kv, w);
}

/* Take a reference to main block b's window block (cached or held). */
static void wref_take(struct weft_kv_pool *kv, int32_t b)
{
    int32_t w = kv->wof[b];
    if (kv->wref[w]++ == 0) wlru_remove(kv, w);
}

/* Main block b is evicted or freed: its window block (unheld) goes too. */
static void wdrop(struct weft_kv_pool *kv, int32_t b)
{
    int32_t w = kv->wof ? kv->wof[b] : -1;
    if (w < 0) return;
    if (kv->wref[w] == 0) wlru_remove(kv, w);  /* linked and unheld: cached */
    wunlink(kv, w);
}

/* The first block a row at position p still needs: its window starts at
 * p - window + 1. */
static uint32_t wfirst_for(const struct weft_kv_pool *kv, uint32_t p)
{
    return p + 1 > kv->window ? (p + 1 - kv->window) / BT : 0;
}

/* ---- pool ---- */

/* One group's buffers: per device, the group's layers in its range of the
 * model's layers, in buffers of as many whole layers as its largest buffer
 * holds (a device with none of the group's layers gets none). */
static weft_status group_parts(const struct weft_kv_config *cfg, struct weft_backend *be, const uint8_t *lgroup,
                               uint8_t g, uint32_t n_blocks, size_t layer_bytes, struct weft_kv_part *parts,
                               uint32_t *n_parts)
{
    uint32_t n_dev = cfg->n_parts ? cfg->n_parts : 1, l0 = 0, gi = 0;
    for (uint32_t p = 0; p < n_dev; p++) {
        struct weft_backend *pbe = cfg->n_parts ? cfg->part_be[p] : be;
        uint32_t nl = cfg->n_parts ? cfg->part_layers[p] : cfg->n_layer;
        if (!pbe || !nl || l0 + nl > cfg->n_layer || (p + 1 == n_dev && l0 + nl != cfg->n_layer))
            return weft_error(WEFT_ERR_INVALID_ARG, "kv: split parts do not cover the %u layers", cfg->n_layer);
        uint32_t ng = 0;
        for (uint32_t l = l0; l < l0 + nl; l++) ng += lgroup[l] == g;
        l0 += nl;
        if (!ng) continue;
        uint64_t per_layer = (uint64_t)n_blocks * layer_bytes, lim = weft_backend_max_buffer(pbe);
        if (per_layer > lim)
            return weft_error(WEFT_ERR_NO_ROOM, "kv: %u blocks of one layer take %llu MiB, more than the %s device's "
                              "largest buffer (%llu MiB); use fewer blocks (--kv-mib) or a shorter context",
                              n_blocks, (unsigned long long)(per_layer >> 20), pbe->iface->name,
                              (unsigned long long)(lim >> 20));
        uint32_t per_buf = lim / per_layer > ng ? ng : (uint32_t)(lim / per_layer);
        for (uint32_t done = 0; done < ng; done += per_buf) {
            if (*n_parts == WEFT_KV_MAX_BUFS)
                return weft_error(WEFT_ERR_NO_ROOM, "kv: the cache needs more than %d buffers", WEFT_KV_MAX_BUFS);
            struct weft_kv_part *kp = &parts[(*n_parts)++];
            kp->be = pbe;
            kp->layer0 = gi + done;
            kp->n_layer = ng - done < per_buf ? ng - done : per_buf;
            kp->block_bytes = kp->n_layer * layer_bytes;
        }
        gi += ng;
    }
    return WEFT_OK;
}

static weft_status window_alloc(struct weft_kv_pool *k, const struct weft_kv_config *cfg, size_t layer_bytes)
{
    uint32_t nw = cfg->n_window_blocks ? cfg->n_window_blocks : cfg->n_blocks;
    if (nw > cfg->n_blocks) nw = cfg->n_blocks;
    k->window = cfg->window;
    k->n_wblocks = nw;
    k->wblock_bytes = (size_t)k->n_wlayer * layer_bytes;
    k->wof = malloc(cfg->n_blocks * sizeof *k->wof);
    k->wowner = malloc(nw * sizeof *k->wowner);
    k->wlru_prev = malloc(nw * sizeof *k->wlru_prev);
    k->wlru_next = malloc(nw * sizeof *k->wlru_next);
    k->wfree = malloc(nw * sizeof *k->wfree);
    k->wref = calloc(nw, sizeof *k->wref);
    if (!k->wof || !k->wowner || !k->wlru_prev || !k->wlru_next || !k->wfree || !k->wref)
        return weft_error(WEFT_ERR_NOMEM, "kv: out of memory for %u window blocks' bookkeeping", nw);
    for (uint32_t i = 0; i < cfg->n_blocks; i++) k->wof[i] = -1;
    for (uint32_t i = 0; i < nw; i++) {
        k->wowner[i] = k->wlru_prev[i] = k->wlru_next[i] = -1;
        k->wfree[i] = (int32_t)(nw - 1 - i);
    }
    k->n_wfree = nw;
    k->wlru_head = k->wlru_tail = -1;
    return WEFT_OK;
}

/* The device (split part) layer l is on: its index in the config's parts (0 without). */
static uint32_t layer_device(const struct weft_kv_config *cfg, uint32_t l)
{
    uint32_t d = 0, l0 = 0;
    while (cfg->n_parts && d + 1 < cfg->n_parts && l >= l0 + cfg->part_layers[d]) l0 += cfg->part_layers[d++];
    return d;
}

/* Layer l keeps no K/V: it reads an earlier layer's, on its device (lgroup 3). */
static weft_status kv_shared_layer(struct weft_kv_pool *k, const struct weft_kv_config *cfg, uint32_t l)
{
    const uint32_t src = cfg->kv_source[l];
    if (src >= l || k->lgroup[src] > 1 || (cfg->state_layer && cfg->state_layer[l]))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: layer %u cannot read layer %u's K/V", l, src);
    if (layer_device(cfg, l) != layer_device(cfg, src))
        return weft_error(WEFT_ERR_UNSUPPORTED, "kv: layer %u reads layer %u's K/V, which a split puts on another "
                          "device; split the layers so that they share one", l, src);
    if (!k->ksrc && !(k->ksrc = calloc(cfg->n_layer, sizeof *k->ksrc)))
        return weft_error(WEFT_ERR_NOMEM, "kv: out of memory");
    k->lgroup[l] = 3;
    k->ksrc[l] = src;
    k->n_kshared++;
    return WEFT_OK;
}

weft_status weft_kv_pool_create(struct weft_kv_pool *kv, struct weft_backend *be, const struct weft_kv_config *cfg)
{
    enum weft_type type = cfg->type == WEFT_TYPE_F32 ? WEFT_TYPE_F16 : cfg->type;
    if (type != WEFT_TYPE_F16 && type != WEFT_TYPE_Q8_0)
        return weft_error(WEFT_ERR_UNSUPPORTED, "kv: cache type %s (F16 or Q8_0 allowed)", weft_type_name(type));
    if (cfg->n_blocks == 0 || cfg->n_blocks > (1u << 30))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: pool needs 1..2^30 blocks, got %u", cfg->n_blocks);
    const uint32_t hd_v = cfg->head_dim_v ? cfg->head_dim_v : cfg->head_dim;
    if (!cfg->n_layer || !cfg->n_kv_head || !cfg->head_dim || cfg->head_dim % weft_type_get(type)->block_size ||
        hd_v % weft_type_get(type)->block_size ||
        (cfg->latent && (cfg->n_kv_head != 1 || hd_v >= cfg->head_dim)))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: bad shape (%u layers, %u heads of %u, V %u) for %s", cfg->n_layer,
                          cfg->n_kv_head, cfg->head_dim, hd_v, weft_type_name(type));
    if (cfg->n_parts > WEFT_KV_MAX_PARTS)
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: %u parts (at most %d)", cfg->n_parts, WEFT_KV_MAX_PARTS);
    if (cfg->state_layer && (!cfg->n_state_slots || !cfg->state_layer_bytes || cfg->n_state_slots > (1u << 20)))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: recurrent state needs 1..2^20 slots of > 0 bytes (%u of %zu)",
                          cfg->n_state_slots, cfg->state_layer_bytes);
    struct weft_kv_pool k = {.be = be, .n_blocks = cfg->n_blocks, .n_layer = cfg->n_layer,
                             .n_kv_head = cfg->n_kv_head, .head_dim = cfg->head_dim, .head_dim_v = hd_v, .type = type,
                             .prefix_cache = cfg->prefix_cache, .lru_head = -1, .lru_tail = -1, .hc_head = -1, .hc_tail = -1,
                             .latent = cfg->latent};
    /* a layer's K, then its V (a latent cache: K only); the window group's may be of another
     * shape */
    size_t layer_bytes = weft_kv_block_layer_bytes(type, cfg->n_kv_head, cfg->head_dim) +
                         (cfg->latent ? 0 : weft_kv_block_layer_bytes(type, cfg->n_kv_head, hd_v));
    k.wn_kv_head = cfg->window_n_kv_head ? cfg->window_n_kv_head : cfg->n_kv_head;
    k.whead_dim = cfg->window_head_dim ? cfg->window_head_dim : cfg->head_dim;
    k.whead_dim_v = cfg->window_head_dim_v ? cfg->window_head_dim_v : cfg->window_head_dim ? k.whead_dim : hd_v;
    const bool wshape = k.wn_kv_head != cfg->n_kv_head || k.whead_dim != cfg->head_dim || k.whead_dim_v != hd_v;
    if (wshape && (cfg->latent || k.whead_dim % weft_type_get(type)->block_size ||
                   k.whead_dim_v % weft_type_get(type)->block_size))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: bad window shape (%u heads of %u, V %u) for %s", k.wn_kv_head,
                          k.whead_dim, k.whead_dim_v, weft_type_name(type));
    size_t wlayer_bytes = weft_kv_block_layer_bytes(type, k.wn_kv_head, k.whead_dim) +
                          (cfg->latent ? 0 : weft_kv_block_layer_bytes(type, k.wn_kv_head, k.whead_dim_v));
    /* the groups: window layers to group 1 when the pool drops window blocks */
    k.lgroup = calloc(cfg->n_layer, 1);
    k.lidx = calloc(cfg->n_layer, sizeof *k.lidx);
    if (!k.lgroup || !k.lidx) {
        weft_kv_pool_free(&k);
        return weft_error(WEFT_ERR_NOMEM, "kv: out of memory");
    }
    uint32_t n_in[3] = {0, 0, 0};
    weft_status st = WEFT_OK;
    for (uint32_t l = 0; l < cfg->n_layer && st == WEFT_OK; l++) {
        k.lgroup[l] = cfg->state_layer && cfg->state_layer[l] ? 2 : cfg->window && cfg->window_layer && cfg->window_layer[l];
        if (wshape && cfg->window_layer && cfg->window_layer[l] && k.lgroup[l] != 1)
            st = weft_error(WEFT_ERR_UNSUPPORTED, "kv: the sliding-window layers' K/V (%u heads of %u) differ from "
                            "the other layers' (%u of %u): they need the window group (--swa-full is not supported "
                            "for this model)", k.wn_kv_head, k.whead_dim, cfg->n_kv_head, cfg->head_dim);
        if (cfg->kv_source && cfg->kv_source[l] != l) {
            st = kv_shared_layer(&k, cfg, l);
            continue;
        }
        k.lidx[l] = n_in[k.lgroup[l]]++;
    }
    if (st != WEFT_OK) {
        weft_kv_pool_free(&k);
        return st;
    }
    if (!n_in[0]) {
        weft_kv_pool_free(&k);
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: no layer of the %u keeps K/V in the main group", cfg->n_layer);
    }
    k.n_wlayer = n_in[1];
    k.n_slayer = n_in[2];
    k.main_bytes = (size_t)n_in[0] * layer_bytes;
    k.block_bytes = k.main_bytes + (size_t)n_in[1] * wlayer_bytes;
    if (k.n_slayer) {
        /* a prefix cache only with state checkpoints to restore (core/kv.h) */
        if (!cfg->state_ckpt_every || !cfg->n_state_ckpts || cfg->state_ckpt_every % BT) k.prefix_cache = false;
        k.n_slots = cfg->n_state_slots;
        k.state_layer_bytes = cfg->state_layer_bytes;
        k.slot_bytes = (size_t)k.n_slayer * cfg->state_layer_bytes;
    }
    st = group_parts(cfg, be, k.lgroup, 0, cfg->n_blocks, layer_bytes, k.parts, &k.n_parts);
    if (st == WEFT_OK && k.n_wlayer) st = window_alloc(&k, cfg, wlayer_bytes);
    if (st == WEFT_OK && k.n_wlayer)
        st = group_parts(cfg, be, k.lgroup, 1, k.n_wblocks, wlayer_bytes, k.wparts, &k.n_wparts);
    if (st == WEFT_OK && k.n_slayer)
        st = group_parts(cfg, be, k.lgroup, 2, k.n_slots, k.state_layer_bytes, k.sparts, &k.n_sparts);
    if (st != WEFT_OK) {
        weft_kv_pool_free(&k);
        return st;
    }
    k.be = k.n_parts ? k.parts[0].be : k.wparts[0].be;
    uint32_t n = cfg->n_blocks, cap = 16;
    while (cap < 2 * n) cap <<= 1;
    k.ht_mask = cap - 1;
    k.ref = calloc(n, sizeof *k.ref);
    k.hash = calloc(n, sizeof *k.hash);
    k.parent = calloc(n, sizeof *k.parent);
    k.toks = calloc((size_t)n * BT, sizeof *k.toks);
    k.lru_prev = malloc(n * sizeof *k.lru_prev);
    k.lru_next = malloc(n * sizeof *k.lru_next);
    k.free_ids = malloc(n * sizeof *k.free_ids);
    k.ht_key = calloc(cap, sizeof *k.ht_key);
    k.ht_val = calloc(cap, sizeof *k.ht_val);
    k.imported = calloc(n, 1);
    if (!k.ref || !k.hash || !k.parent || !k.toks || !k.lru_prev || !k.lru_next || !k.free_ids || !k.ht_key || !k.ht_val ||
        !k.imported)
        st = weft_error(WEFT_ERR_NOMEM, "kv: out of memory for %u blocks' bookkeeping", n);
    if (st == WEFT_OK && k.n_slayer) {
        size_t most = 0;
        for (uint32_t p = 0; p < k.n_sparts; p++) most = k.sparts[p].block_bytes > most ? k.sparts[p].block_bytes : most;
        k.sfree = malloc(k.n_slots * sizeof *k.sfree);
        k.szero = calloc(1, most);
        if (!k.sfree || !k.szero) st = weft_error(WEFT_ERR_NOMEM, "kv: out of memory for %u state slots", k.n_slots);
        for (uint32_t i = 0; st == WEFT_OK && i < k.n_slots; i++) k.sfree[i] = (int32_t)(k.n_slots - 1 - i);
        k.n_sfree = k.n_slots;
    }
    if (st == WEFT_OK && k.n_slayer && k.prefix_cache) {
        k.ck_every = cfg->state_ckpt_every;
        k.n_ck = cfg->n_state_ckpts;
        k.ck_hash = calloc(k.n_ck, sizeof *k.ck_hash);
        k.ck_used = calloc(k.n_ck, sizeof *k.ck_used);
        k.ck_data = malloc(k.slot_bytes * k.n_ck);
        if (!k.ck_hash || !k.ck_used || !k.ck_data)
            st = weft_error(WEFT_ERR_NOMEM, "kv: out of memory for %u state checkpoints of %zu bytes", k.n_ck,
                            k.slot_bytes);
    }
    if (st == WEFT_OK && cfg->n_host_cache_blocks && k.prefix_cache) {
        uint32_t nh = cfg->n_host_cache_blocks, hcap = ht_cap_for(nh);
        k.n_hc = nh;
        k.hc = malloc(k.block_bytes * nh);
        k.hc_scratch = malloc(k.block_bytes);
        k.hc_hash = calloc(nh, sizeof *k.hc_hash);
        k.hc_parent = calloc(nh, sizeof *k.hc_parent);
        k.hc_toks = calloc((size_t)nh * BT, sizeof *k.hc_toks);
        k.hc_prev = malloc(nh * sizeof *k.hc_prev);
        k.hc_next = malloc(nh * sizeof *k.hc_next);
        k.hc_free = malloc(nh * sizeof *k.hc_free);
        k.hc_win = calloc(nh, 1);
        k.hc_key = calloc(hcap, sizeof *k.hc_key);
        k.hc_val = calloc(hcap, sizeof *k.hc_val);
        k.hc_mask = hcap - 1;
        k.hc_head = k.hc_tail = -1;
        if (!k.hc || !k.hc_scratch || !k.hc_hash || !k.hc_parent || !k.hc_toks || !k.hc_prev || !k.hc_next || !k.hc_free || !k.hc_key ||
            !k.hc_val || !k.hc_win)
            st = weft_error(WEFT_ERR_NOMEM, "kv: cannot allocate a host prefix tier of %u blocks (%zu MiB)", nh,
                            (k.block_bytes * nh) >> 20);
        for (uint32_t i = 0; st == WEFT_OK && i < nh; i++) k.hc_free[i] = (int32_t)(nh - 1 - i);
        k.n_hc_free = nh;
    }
    if (st == WEFT_OK && cfg->n_host_blocks) {
        k.n_host_blocks = cfg->n_host_blocks;
        k.host = malloc(k.block_bytes * cfg->n_host_blocks);
        k.host_free = malloc(cfg->n_host_blocks * sizeof *k.host_free);
        if (!k.host || !k.host_free)
            st = weft_error(WEFT_ERR_NOMEM, "kv: cannot allocate a host tier of %u blocks (%zu MiB)", cfg->n_host_blocks,
                            (k.block_bytes * cfg->n_host_blocks) >> 20);
    }
    for (uint32_t p = 0; p < k.n_parts && st == WEFT_OK; p++) {
        struct weft_kv_part *kp = &k.parts[p];
        st = kp->be->iface->buffer_alloc(kp->be, kp->block_bytes * n, &kp->buf);
        if (st != WEFT_OK) kp->buf = NULL;
    }
    for (uint32_t p = 0; p < k.n_wparts && st == WEFT_OK; p++) {
        struct weft_kv_part *kp = &k.wparts[p];
        st = kp->be->iface->buffer_alloc(kp->be, kp->block_bytes * k.n_wblocks, &kp->buf);
        if (st != WEFT_OK) kp->buf = NULL;
    }
    for (uint32_t p = 0; p < k.n_sparts && st == WEFT_OK; p++) {
        struct weft_kv_part *kp = &k.sparts[p];
        st = kp->be->iface->buffer_alloc(kp->be, kp->block_bytes * k.n_slots, &kp->buf);
        if (st != WEFT_OK) kp->buf = NULL;
    }
    k.buf = k.n_parts ? k.parts[0].buf : k.wparts[0].buf;
    if (st != WEFT_OK) {
        weft_kv_pool_free(&k);
        return st;
    }
    for (uint32_t i = 0; i < n; i++) {
        k.free_ids[i] = (int32_t)(n - 1 - i);  /* block 0 is taken first */
        k.lru_prev[i] = k.lru_next[i] = -1;
    }
    k.n_free = n;
    for (uint32_t i = 0; i < k.n_host_blocks; i++) k.host_free[i] = (int32_t)(k.n_host_blocks - 1 - i);
    k.n_host_free = k.n_host_blocks;
    *kv = k;
    return WEFT_OK;
}

weft_status weft_kv_pool_init(struct weft_kv_pool *kv, struct weft_backend *be, uint32_t n_layer,
                              uint32_t n_kv_head, uint32_t head_dim, uint32_t n_blocks)
{
    struct weft_kv_config c = {.n_layer = n_layer, .n_kv_head = n_kv_head, .head_dim = head_dim,
                               .n_blocks = n_blocks, .type = WEFT_TYPE_F16};
    return weft_kv_pool_create(kv, be, &c);
}

void weft_kv_pool_free(struct weft_kv_pool *kv)
{
    for (uint32_t p = 0; p < kv->n_parts; p++)
        if (kv->parts[p].buf) kv->parts[p].be->iface->buffer_free(kv->parts[p].buf);
    for (uint32_t p = 0; p < kv->n_wparts; p++)
        if (kv->wparts[p].buf) kv->wparts[p].be->iface->buffer_free(kv->wparts[p].buf);
    for (uint32_t p = 0; p < kv->n_sparts; p++)
        if (kv->sparts[p].buf) kv->sparts[p].be->iface->buffer_free(kv->sparts[p].buf);
    free(kv->sfree);
    free(kv->szero);
    kv->buf = NULL;
    free(kv->lgroup); free(kv->lidx); free(kv->ksrc);
    free(kv->ck_hash); free(kv->ck_used); free(kv->ck_data);
    free(kv->wof); free(kv->wowner); free(kv->wlru_prev); free(kv->wlru_next); free(kv->wfree); free(kv->wref);
    free(kv->hc_win);
    free(kv->ref); free(kv->hash); free(kv->parent); free(kv->toks);
    free(kv->lru_prev); free(kv->lru_next); free(kv->free_ids);
    free(kv->ht_key); free(kv->ht_val); free(kv->imported);
    free(kv->hc); free(kv->hc_scratch); free(kv->hc_hash); free(kv->hc_parent); free(kv->hc_toks);
    free(kv->hc_prev); free(kv->hc_next); free(kv->hc_free); free(kv->hc_key); free(kv->hc_val);
    free(kv->host); free(kv->host_free);
    memset(kv, 0, sizeof *kv);
}

void weft_kv_stats(const struct weft_kv_pool *kv, struct weft_kv_stats *out)
{
    *out = (struct weft_kv_stats){
        .n_blocks = kv->n_blocks, .used = kv->n_blocks - kv->n_free - kv->n_cached, .cached = kv->n_cached,
        .free = kv->n_free, .n_host_blocks = kv->n_host_blocks, .host_used = kv->n_host_blocks - kv->n_host_free,
        .hit_blocks = kv->hit_blocks, .evictions = kv->evictions, .imported_blocks = kv->imported_blocks,
        .hit_imported_blocks = kv->hit_imported_blocks, .n_host_cache_blocks = kv->n_hc,
        .host_cache_used = kv->n_hc - kv->n_hc_free, .host_hit_blocks = kv->host_hit_blocks,
        .host_demotions = kv->host_demotions, .host_evictions = kv->host_evictions, .pinned = kv->pinned,
        .window = kv->window, .n_window_blocks = kv->n_wblocks,
        .window_used = kv->n_wblocks - kv->n_wfree - kv->n_wcached, .window_cached = kv->n_wcached,
        .window_free = kv->n_wfree, .window_dropped = kv->wdropped, .window_evictions = kv->wevictions,
        .window_peak = kv->wpeak,
        .n_state_slots = kv->n_slots, .state_used = kv->n_slots - kv->n_sfree, .state_bytes_per_seq = kv->slot_bytes,
        .state_swaps = kv->state_swaps, .ckpt_every = kv->ck_every, .n_ckpts = kv->n_ck, .ckpts_used = kv->ck_held,
        .ckpt_bytes = kv->n_ck ? kv->slot_bytes : 0, .ckpts_stored = kv->ck_stored, .ckpt_hits = kv->ck_hits,
        .ckpts_replaced = kv->ck_replaced, .ckpts_imported = kv->ck_imported,
        .bytes_per_token = kv->block_bytes / WEFT_KV_BLOCK_TOKENS};
}

uint32_t weft_kv_available(const struct weft_kv_pool *kv) { return kv->n_free + kv->n_cached; }
uint32_t weft_kv_window_available(const struct weft_kv_pool *kv) { return kv->n_wfree + kv->n_wcached; }


static weft_status block_io(struct weft_kv_pool *kv, int32_t b, unsigned char *host, bool to_device);

/* Wait for the backends holding the pool's buffers. */
static weft_status pool_sync(struct weft_kv_pool *kv)
{
    weft_status st = WEFT_OK;
    for (uint32_t p = 0; p < kv->n_parts && st == WEFT_OK; p++) st = kv->parts[p].be->iface->sync(kv->parts[p].be);
    for (uint32_t p = 0; p < kv->n_wparts && st == WEFT_OK; p++) st = kv->wparts[p].be->iface->sync(kv->wparts[p].be);
    return st;
}

/* ---- host prefix tier ---- */

static int32_t hc_get(const struct weft_kv_pool *kv, uint64_t h)
{
    return kv->n_hc ? ht_find(kv->hc_key, kv->hc_val, kv->hc_mask, h) : -1;
}

static void hc_lru_push(struct weft_kv_pool *kv, int32_t i)
{
    list_push(kv->hc_prev, kv->hc_next, &kv->hc_head, &kv->hc_tail, i);
}

static void hc_lru_remove(struct weft_kv_pool *kv, int32_t i)
{
    list_remove(kv->hc_prev, kv->hc_next, &kv->hc_head, &kv->hc_tail, i);
}

/* Slot i (out of the LRU) leaves the tier: its hash unregistered, the slot free. */
static void hc_release(struct weft_kv_pool *kv, int32_t i)
{
    ht_remove(kv->hc_key, kv->hc_val, kv->hc_mask, kv->hc_hash[i]);
    kv->hc_hash[i] = 0;
    kv->hc_free[kv->n_hc_free++] = i;
}

/* Device block b (registered, ref 0, just unlinked from the device's table)
 * is being evicted: keep a copy in the host tier, evicting the tier's oldest
 * when it is full. True when the block's hash is still held (here, or in
 * the tier already). */
static bool demote(struct weft_kv_pool *kv, int32_t b)
{
    if (!kv->n_hc) return false;
    if (hc_get(kv, kv->hash[b]) >= 0) return true;
    if (!kv->n_hc_free) {
        int32_t old = kv->hc_head;
        if (old < 0) return false;  /* the only slots are being promoted */
        uint64_t h = kv->hc_hash[old], parent = kv->hc_parent[old];
        hc_lru_remove(kv, old);
        hc_release(kv, old);
        kv->host_evictions++;
        if (kv->on_event && ht_get(kv, h) < 0) kv->on_event(kv->on_event_user, WEFT_KV_EVENT_REMOVED, h, parent);
    }
    int32_t i = kv->hc_free[kv->n_hc_free - 1];
    weft_status st = pool_sync(kv);
    if (st == WEFT_OK) st = block_io(kv, b, kv->hc + (size_t)i * kv->block_bytes, false);
    if (st != WEFT_OK) return false;  /* dropped, as without the tier */
    kv->n_hc_free--;
    kv->hc_win[i] = weft_kv_window_block(kv, b) >= 0;
    kv->hc_hash[i] = kv->hash[b];
    kv->hc_parent[i] = kv->parent[b];
    memcpy(kv->hc_toks + (size_t)i * BT, kv->toks + (size_t)b * BT, sizeof(int32_t) * BT);
    ht_insert(kv->hc_key, kv->hc_val, kv->hc_mask, kv->hash[b], i);
    hc_lru_push(kv, i);
    kv->host_demotions++;
    return true;
}

static int32_t take_block(struct weft_kv_pool *kv);
static void unref_block(struct weft_kv_pool *kv, int32_t b);

/* The host tier holds the block named h (parent, tokens t): copy it into a
 * fresh device block, registered there (ref 1). -1 when the tier does not
 * hold it or the device has no block to give. */
static int32_t promote(struct weft_kv_pool *kv, uint64_t h, uint64_t parent, const int32_t *t)
{
    int32_t i = hc_get(kv, h);
    if (i < 0 || kv->hc_parent[i] != parent || memcmp(kv->hc_toks + (size_t)i * BT, t, sizeof(int32_t) * BT) ||
        weft_kv_available(kv) == 0)
        return -1;
    /* out of the tier first (through the scratch copy): the device block
     * take_block evicts for it demotes into the slot it leaves, so a full
     * tier never evicts the rest of the chain being promoted */
    memcpy(kv->hc_scratch, kv->hc + (size_t)i * kv->block_bytes, kv->block_bytes);
    bool win = kv->hc_win[i];
    hc_lru_remove(kv, i);
    hc_release(kv, i);
    int32_t b = take_block(kv);
    /* the window part comes back as a cached window block (the hit decides
     * which it holds), when one is to be had */
    int32_t w = b >= 0 && win ? take_wblock(kv, b) : -1;
    if (b < 0 || block_io(kv, b, kv->hc_scratch, true) != WEFT_OK) {
        if (w >= 0) wunlink(kv, w);
        if (b >= 0) unref_block(kv, b);
        if (kv->on_event && ht_get(kv, h) < 0) kv->on_event(kv->on_event_user, WEFT_KV_EVENT_REMOVED, h, parent);
        return -1;
    }
    kv->hash[b] = h;
    kv->parent[b] = parent;
    memcpy(kv->toks + (size_t)b * BT, t, sizeof(int32_t) * BT);
    ht_put(kv, h, b);
    if (w >= 0) {
        kv->wref[w] = 0;
        wlru_push(kv, w);
    }
    kv->host_hit_blocks++;
    return b;
}

/* Take a block for writing: never-used/unregistered first, else evict the
 * least recently freed cached block. -1 if none. */
static int32_t take_block(struct weft_kv_pool *kv)
{
    int32_t b;
    if (kv->n_free) {
        b = kv->free_ids[--kv->n_free];
    } else if (kv->lru_head >= 0) {
        b = kv->lru_head;
        lru_remove(kv, b);
        ht_del(kv, kv->hash[b]);
        /* still held on this instance when it goes to the host tier */
        if (!demote(kv, b) && kv->on_event)
            kv->on_event(kv->on_event_user, WEFT_KV_EVENT_REMOVED, kv->hash[b], kv->parent[b]);
        wdrop(kv, b);
        kv->hash[b] = 0;
        kv->evictions++;
    } else {
        return -1;
    }
    kv->ref[b] = 1;
    kv->imported[b] = 0;
    return b;
}

static void unref_block(struct weft_kv_pool *kv, int32_t b)
{
    if (--kv->ref[b] > 0) return;
    if (kv->hash[b]) {
        lru_push(kv, b);
    } else {
        wdrop(kv, b);
        kv->free_ids[kv->n_free++] = b;
    }
}

static void commit_hashes(struct weft_kv_pool *kv, struct weft_kv_seq *seq, const int32_t *tokens, uint32_t n_computed);

/* ---- recurrent state slots ---- */

/* Slot i's bytes in every state part <-> host (slot_bytes, the parts' back to back); host
 * NULL: write zeros. */
static weft_status slot_io(struct weft_kv_pool *kv, int32_t i, unsigned char *host, bool to_device)
{
    for (uint32_t p = 0; p < kv->n_sparts; p++) {
        const struct weft_kv_part *kp = &kv->sparts[p];
        size_t off = (size_t)i * kp->block_bytes;
        weft_status st = to_device ? kp->be->iface->buffer_write(kp->buf, off, host ? host : kv->szero, kp->block_bytes)
                                   : kp->be->iface->buffer_read(kp->buf, off, host, kp->block_bytes);
        if (st != WEFT_OK) return st;
        if (host) host += kp->block_bytes;
    }
    return WEFT_OK;
}

/* A free slot holding host's bytes (NULL: zeroed) for seq: WEFT_ERR_NO_ROOM when none is
 * free; nothing taken on failure. */
static weft_status slot_take(struct weft_kv_pool *kv, struct weft_kv_seq *seq, unsigned char *host)
{
    if (!kv->n_sfree) return weft_error(WEFT_ERR_NO_ROOM, "kv: all %u recurrent state slots are held", kv->n_slots);
    int32_t i = kv->sfree[kv->n_sfree - 1];
    weft_status st = slot_io(kv, i, host, true);
    if (st != WEFT_OK) return st;
    kv->n_sfree--;
    seq->state = i + 1;
    return WEFT_OK;
}

static void slot_give(struct weft_kv_pool *kv, struct weft_kv_seq *seq)
{
    if (seq->state) kv->sfree[kv->n_sfree++] = seq->state - 1;
    seq->state = 0;
}

/* ---- state checkpoints ---- */

/* The checkpoint named hash, or -1. */
static int32_t ck_find(const struct weft_kv_pool *kv, uint64_t hash)
{
    for (uint32_t i = 0; hash && i < kv->n_ck; i++)
        if (kv->ck_hash[i] == hash) return (int32_t)i;
    return -1;
}

/* A checkpoint to write over: a free one, else the least recently used (its name dropped,
 * told). */
static uint32_t ck_slot(struct weft_kv_pool *kv)
{
    uint32_t at = 0;
    for (uint32_t i = 1; i < kv->n_ck; i++)
        if (kv->ck_used[i] < kv->ck_used[at]) at = i;  /* a free one has 0 */
    if (kv->ck_hash[at]) {
        if (kv->on_event) kv->on_event(kv->on_event_user, WEFT_KV_EVENT_CKPT_REMOVED, kv->ck_hash[at], 0);
        kv->ck_hash[at] = 0;
        kv->ck_used[at] = 0;
        kv->ck_held--;
        kv->ck_replaced++;
    }
    return at;
}

static void ck_name(struct weft_kv_pool *kv, uint32_t at, uint64_t hash)
{
    kv->ck_hash[at] = hash;
    kv->ck_used[at] = ++kv->ck_tick;
    kv->ck_held++;
    if (kv->on_event) kv->on_event(kv->on_event_user, WEFT_KV_EVENT_CKPT_STORED, hash, 0);
}

/* seq has computed n tokens, the last block registered (its hash seq->last_hash): copy its
 * state to a checkpoint under that name at a checkpoint boundary or seq->ck_at. A failed
 * read stores nothing (a prefix cache only misses what it lacks). */
static void ck_store(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t n)
{
    if (!kv->n_ck || !seq->state || n == 0 || (n % kv->ck_every && n != seq->ck_at) || seq->n_hashed * BT != n ||
        !seq->last_hash || ck_find(kv, seq->last_hash) >= 0)
        return;
    uint32_t at = ck_slot(kv);
    if (pool_sync(kv) != WEFT_OK || slot_io(kv, seq->state - 1, kv->ck_data + (size_t)at * kv->slot_bytes, false) != WEFT_OK)
        return;
    ck_name(kv, at, seq->last_hash);
    kv->ck_stored++;
}

const void *weft_kv_checkpoint(const struct weft_kv_pool *kv, uint64_t hash)
{
    int32_t i = kv->n_ck ? ck_find(kv, hash) : -1;
    return i < 0 ? NULL : kv->ck_data + (size_t)i * kv->slot_bytes;
}

weft_status weft_kv_checkpoint_put(struct weft_kv_pool *kv, uint64_t hash, const void *state, size_t bytes,
                                   bool *added)
{
    *added = false;
    if (!kv->n_ck) return weft_error(WEFT_ERR_UNSUPPORTED, "kv: this pool keeps no state checkpoints");
    if (bytes != kv->slot_bytes)
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: a state checkpoint of %zu bytes, this pool's hold %zu", bytes,
                          kv->slot_bytes);
    if (!hash) return weft_error(WEFT_ERR_INVALID_ARG, "kv: a state checkpoint needs its block's name");
    if (ck_find(kv, hash) >= 0) return WEFT_OK;
    uint32_t at = ck_slot(kv);
    memcpy(kv->ck_data + (size_t)at * kv->slot_bytes, state, bytes);
    ck_name(kv, at, hash);
    kv->ck_imported++;
    *added = true;
    return WEFT_OK;
}

/* A prefix hit of got blocks on a hybrid: the longest k <= got ending at a checkpoint, its
 * state restored into a slot for seq; 0 (nothing taken) when none is, or no slot is free. */
static uint32_t ck_hit(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t got)
{
    for (uint32_t k = got; k > 0; k--) {
        /* at a multiple of ck_every, or where a prompt's blocks ended (any block) */
        int32_t i = ck_find(kv, kv->hash[seq->blocks[k - 1]]);
        if (i < 0) continue;
        if (slot_take(kv, seq, kv->ck_data + (size_t)i * kv->slot_bytes) != WEFT_OK) return 0;
        kv->ck_used[i] = ++kv->ck_tick;
        kv->ck_hits++;
        return k;
    }
    return 0;
}

struct weft_kv_state_view weft_kv_state_view(const struct weft_kv_pool *kv, uint32_t l)
{
    if (!weft_kv_layer_state(kv, l)) return (struct weft_kv_state_view){0};
    uint32_t i = kv->lidx[l], p = 0;
    while (p + 1 < kv->n_sparts && i >= kv->sparts[p].layer0 + kv->sparts[p].n_layer) p++;
    const struct weft_kv_part *kp = &kv->sparts[p];
    return (struct weft_kv_state_view){kp->buf, (size_t)(i - kp->layer0) * kv->state_layer_bytes, kp->block_bytes,
                                       kv->n_slots};
}

static weft_status seq_grow(struct weft_kv_seq *seq, uint32_t need)
{
    if (need <= seq->cap) return WEFT_OK;
    uint32_t cap = need > 2 * seq->cap ? need : 2 * seq->cap;
    int32_t *b = realloc(seq->blocks, sizeof(int32_t) * cap);
    if (!b) return weft_error(WEFT_ERR_NOMEM, "kv: out of memory");
    seq->blocks = b;
    seq->cap = cap;
    return WEFT_OK;
}

/* With a window group: the longest k <= got whose boundary 16 k has its
 * window's blocks [wfirst_for(16 k), k) all holding their window part. */
static uint32_t window_hit(const struct weft_kv_pool *kv, const int32_t *blocks, uint32_t got)
{
    for (uint32_t k = got; k > 0; k--) {
        uint32_t i = wfirst_for(kv, k * BT);
        while (i < k && kv->wof[blocks[i]] >= 0) i++;
        if (i == k) return k;
    }
    return 0;
}

uint32_t weft_kv_seq_match_prefix(struct weft_kv_pool *kv, struct weft_kv_seq *seq, const int32_t *tokens, uint32_t n)
{
    if (!kv->prefix_cache || seq->n_blocks || n == 0) return 0;
    uint32_t max_blocks = (n - 1) / BT, got = 0;
    uint64_t h = 0;
    if (seq_grow(seq, max_blocks) != WEFT_OK) return 0;
    for (; got < max_blocks; got++) {
        const int32_t *t = tokens + (size_t)got * BT;
        uint64_t hn = weft_kv_block_hash(h, t);
        int32_t b = ht_get(kv, hn);
        if (b < 0) {
            if ((b = promote(kv, hn, h, t)) < 0) break;
        } else {
            if (kv->parent[b] != h || memcmp(kv->toks + (size_t)b * BT, t, sizeof(int32_t) * BT)) break;
            if (kv->ref[b]++ == 0) lru_remove(kv, b);
        }
        seq->blocks[seq->n_blocks++] = b;
        h = hn;
    }
    if (kv->n_slots) {
        /* a hybrid: only as far as a state checkpoint, restored; the rest goes back */
        uint32_t k = ck_hit(kv, seq, got);
        while (seq->n_blocks > k) unref_block(kv, seq->blocks[--seq->n_blocks]);
        if (k < got) h = k ? kv->hash[seq->blocks[k - 1]] : 0;
        got = k;
    }
    if (kv->n_wblocks) {
        /* only as far as the window before the boundary is held: the rest
         * goes back (still cached), and the window blocks are taken */
        uint32_t k = window_hit(kv, seq->blocks, got);
        while (seq->n_blocks > k) unref_block(kv, seq->blocks[--seq->n_blocks]);
        if (k < got) h = k ? kv->hash[seq->blocks[k - 1]] : 0;
        got = k;
        seq->wfirst = wfirst_for(kv, k * BT);
        for (uint32_t i = seq->wfirst; i < k; i++) wref_take(kv, seq->blocks[i]);
    }
    for (uint32_t i = 0; i < got; i++) kv->hit_imported_blocks += kv->imported[seq->blocks[i]];
    seq->n_hashed = got;
    seq->last_hash = h;
    kv->hit_blocks += got;
    return got * BT;
}

uint32_t weft_kv_seq_blocks_needed(const struct weft_kv_seq *seq, uint32_t n_tokens)
{
    uint32_t need = (n_tokens + BT - 1) / BT;
    return need > seq->n_blocks ? need - seq->n_blocks : 0;
}

weft_status weft_kv_seq_reserve(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t n_tokens)
{
    if (seq->swapped) return weft_error(WEFT_ERR_INVALID_ARG, "kv: sequence is swapped out");
    uint32_t more = weft_kv_seq_blocks_needed(seq, n_tokens);
    if (more == 0) return WEFT_OK;
    const bool new_state = kv->n_slots && !seq->state;
    if (more > weft_kv_available(kv))
        return weft_error(WEFT_ERR_NO_ROOM, "kv: need %u more blocks, %u available", more, weft_kv_available(kv));
    /* each new block is inside the window: it takes a window block too (a
     * main block taken by eviction frees its window block, never takes one) */
    if (kv->n_wblocks && more > weft_kv_window_available(kv))
        return weft_error(WEFT_ERR_NO_ROOM, "kv: need %u more window blocks, %u available", more,
                          weft_kv_window_available(kv));
    if (new_state && !kv->n_sfree)
        return weft_error(WEFT_ERR_NO_ROOM, "kv: all %u recurrent state slots are held", kv->n_slots);
    weft_status st = seq_grow(seq, seq->n_blocks + more);
    if (st == WEFT_OK && new_state) st = slot_take(kv, seq, NULL);
    if (st != WEFT_OK) return st;
    while (more--) {
        int32_t b = take_block(kv);
        if (kv->n_wblocks) take_wblock(kv, b);
        seq->blocks[seq->n_blocks++] = b;
    }
    return WEFT_OK;
}

/* Drop the window blocks no position from n_next on needs. */
static void seq_slide(struct weft_kv_pool *kv, struct weft_kv_seq *seq, uint32_t n_next)
{
    uint32_t first = wfirst_for(kv, n_next);
    if (first > seq->n_blocks) first = seq->n_blocks;
    for (; seq->wfirst < first; seq->wfirst++) {
        wunref(kv, kv->wof[seq->blocks[seq->wfirst]]);
        kv->wdropped++;
    }
}

void weft_kv_seq_commit(struct weft_kv_pool *kv, struct weft_kv_seq *seq, const int32_t *tokens, uint32_t n_computed)
{
    if (seq->swapped) return;
    commit_hashes(kv, seq, tokens, n_computed);
    if (kv->n_ck) ck_store(kv, seq, n_computed);
    if (!kv->n_wblocks) return;
    seq_slide(kv, seq, n_computed);
    if (seq->n_blocks - seq->wfirst > kv->wpeak) kv->wpeak = seq->n_blocks - seq->wfirst;
}

static void commit_hashes(struct weft_kv_pool *kv, struct weft_kv_seq *seq, const int32_t *tokens, uint32_t n_computed)
{
    if (!kv->prefix_cache) return;
    uint32_t full = n_computed / BT;
    if (full > seq->n_blocks) full = seq->n_blocks;
    for (; seq->n_hashed < full; seq->n_hashed++) {
        const int32_t *t = tokens + (size_t)seq->n_hashed * BT;
        uint64_t h = weft_kv_block_hash(seq->last_hash, t);
        int32_t b = seq->blocks[seq->n_hashed];
        if (kv->hash[b] == 0 && ht_get(kv, h) < 0) {
            kv->hash[b] = h;
            kv->parent[b] = seq->last_hash;
            memcpy(kv->toks + (size_t)b * BT, t, sizeof(int32_t) * BT);
            ht_put(kv, h, b);
            if (kv->on_event) kv->on_event(kv->on_event_user, WEFT_KV_EVENT_STORED, h, seq->last_hash);
        }
        seq->last_hash = h;
    }
}

void weft_kv_seq_release(struct weft_kv_pool *kv, struct weft_kv_seq *seq)
{
    if (seq->swapped) {
        for (uint32_t i = 0; i < seq->n_blocks; i++) kv->host_free[kv->n_host_free++] = seq->host[i];
    } else {
        for (uint32_t i = seq->n_blocks; i-- > 0;) {
            if (kv->n_wblocks && i >= seq->wfirst) wunref(kv, kv->wof[seq->blocks[i]]);
            unref_block(kv, seq->blocks[i]);
        }
    }
    slot_give(kv, seq);
    free(seq->blocks);
    free(seq->host);
    free(seq->state_host);
    memset(seq, 0, sizeof *seq);
}

static weft_status parts_io(const struct weft_kv_part *parts, uint32_t n_parts, int32_t b, unsigned char *host,
                            bool to_device)
{
    for (uint32_t p = 0; p < n_parts; p++) {
        const struct weft_kv_part *kp = &parts[p];
        size_t off = (size_t)b * kp->block_bytes;
        weft_status st = to_device ? kp->be->iface->buffer_write(kp->buf, off, host, kp->block_bytes)
                                   : kp->be->iface->buffer_read(kp->buf, off, host, kp->block_bytes);
        if (st != WEFT_OK) return st;
        host += kp->block_bytes;
    }
    return WEFT_OK;
}

/* Device block b <-> one host-tier block (the parts' bytes back to back):
 * the main group's, then, when b has a window block, the window group's. */
static weft_status block_io(struct weft_kv_pool *kv, int32_t b, unsigned char *host, bool to_device)
{
    weft_status st = parts_io(kv->parts, kv->n_parts, b, host, to_device);
    int32_t w = weft_kv_window_block(kv, b);
    if (st == WEFT_OK && w >= 0) st = parts_io(kv->wparts, kv->n_wparts, w, host + kv->main_bytes, to_device);
    return st;
}

int32_t weft_kv_lookup(const struct weft_kv_pool *kv, uint64_t hash)
{
    return hash && kv->prefix_cache ? ht_get(kv, hash) : -1;
}

bool weft_kv_holds(const struct weft_kv_pool *kv, uint64_t hash)
{
    return weft_kv_lookup(kv, hash) >= 0 || (kv->prefix_cache && hash && hc_get(kv, hash) >= 0);
}

weft_status weft_kv_block_read(struct weft_kv_pool *kv, int32_t b, void *host)
{
    if (b < 0 || (uint32_t)b >= kv->n_blocks) return weft_error(WEFT_ERR_INVALID_ARG, "kv: no block %d", b);
    weft_status st = pool_sync(kv);
    return st == WEFT_OK ? block_io(kv, b, host, false) : st;
}

weft_status weft_kv_import(struct weft_kv_pool *kv, uint64_t parent, uint64_t hash, const int32_t *tokens,
                           const void *payload, size_t payload_bytes, bool *added)
{
    *added = false;
    if (!kv->prefix_cache) return weft_error(WEFT_ERR_INVALID_ARG, "kv: import needs the prefix cache");
    bool win = kv->n_wblocks && payload_bytes == kv->block_bytes;
    if (payload_bytes != kv->block_bytes && !(kv->n_wblocks && payload_bytes == kv->main_bytes))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: a block of %zu bytes, this pool's blocks hold %zu", payload_bytes,
                          kv->block_bytes);
    if (hash != weft_kv_block_hash(parent, tokens))
        return weft_error(WEFT_ERR_INVALID_ARG, "kv: block hash %016llx is not its tokens'", (unsigned long long)hash);
    int32_t b = ht_get(kv, hash);
    if (b >= 0 && win && kv->wof[b] < 0) {
        /* held without its window part: add the one this payload brings */
        int32_t w = take_wblock(kv, b);
        if (w < 0) return WEFT_OK;
        weft_status st = parts_io(kv->wparts, kv->n_wparts, w, (unsigned char *)payload + kv->main_bytes, true);
        kv->wref[w] = 0;
        if (st != WEFT_OK) {
            wunlink(kv, w);
            return st;
        }
        /* held by sequences: they took it from wfirst on, so none holds this one */
        wlru_push(kv, w);
        *added = true;
        return WEFT_OK;
    }
    if (b >= 0 || hc_get(kv, hash) >= 0) return WEFT_OK;
    b = take_block(kv);
    if (b < 0) return weft_error(WEFT_ERR_NO_ROOM, "kv: no free or cached block to import into");
    int32_t w = win ? take_wblock(kv, b) : -1;  /* none to be had: the block comes without its window part */
    weft_status st = block_io(kv, b, (unsigned char *)payload, true);
    if (st != WEFT_OK) {
        if (w >= 0) wunlink(kv, w);
        unref_block(kv, b);  /* unregistered: back on the free stack */
        return st;
    }
    if (w >= 0) {
        kv->wref[w] = 0;
        wlru_push(kv, w);
    }
    kv->hash[b] = hash;
    kv->parent[b] = parent;
    memcpy(kv->toks + (size_t)b * BT, tokens, sizeof(int32_t) * BT);
    ht_put(kv, hash, b);
    kv->imported[b] = 1;
    kv->imported_blocks++;
    kv->ref[b] = 0;
    lru_push(kv, b);
    if (kv->on_event) kv->on_event(kv->on_event_user, WEFT_KV_EVENT_STORED, hash, parent);
    *added = true;
    return WEFT_OK;
}

bool weft_kv_host_block(const struct weft_kv_pool *kv, uint64_t hash, const void **payload, uint64_t *parent,
                        const int32_t **tokens, bool *window)
{
    int32_t i = kv->n_hc ? hc_get(kv, hash) : -1;
    if (i < 0) return false;
    if (window) *window = kv->hc_win[i];
    *payload = kv->hc + (size_t)i * kv->block_bytes;
    *parent = kv->hc_parent[i];
    *tokens = kv->hc_toks + (size_t)i * BT;
    return true;
}

bool weft_kv_pin(struct weft_kv_pool *kv, uint64_t hash)
{
    int32_t b = kv->prefix_cache ? ht_get(kv, hash) : -1;
    if (b < 0) return false;
    if (kv->ref[b]++ == 0) lru_remove(kv, b);
    kv->pinned++;
    return true;
}

void weft_kv_unpin(struct weft_kv_pool *kv, uint64_t hash)
{
    int32_t b = kv->prefix_cache && kv->pinned ? ht_get(kv, hash) : -1;
    if (b < 0 || kv->ref[b] == 0) return;
    kv->pinned--;
    unref_block(kv, b);
}

weft_status weft_kv_seq_swap_out(struct weft_kv_pool *kv, struct weft_kv_seq *seq)
{
    if (seq->swapped) return WEFT_OK;
    if (seq->n_blocks > kv->n_host_free)
        return weft_error(WEFT_ERR_NO_ROOM, "kv: host tier has %u free blocks, %u needed", kv->n_host_free, seq->n_blocks);
    int32_t *slots = malloc(sizeof(int32_t) * (seq->n_blocks ? seq->n_blocks : 1));
    unsigned char *sh = seq->state ? malloc(kv->slot_bytes) : NULL;
    if (!slots || (seq->state && !sh)) {
        free(slots);
        free(sh);
        return weft_error(WEFT_ERR_NOMEM, "kv: out of memory");
    }
    weft_status st = pool_sync(kv);
    if (st == WEFT_OK && sh) st = slot_io(kv, seq->state - 1, sh, false);
    /* blocks before wfirst carry no window part (their window block, if it
     * is still cached, is not this sequence's) */
    for (uint32_t i = 0; i < seq->n_blocks && st == WEFT_OK; i++) {
        int32_t h = kv->host_free[kv->n_host_free - 1 - i];
        unsigned char *dst = kv->host + (size_t)h * kv->block_bytes;
        st = parts_io(kv->parts, kv->n_parts, seq->blocks[i], dst, false);
        if (st == WEFT_OK && kv->n_wblocks && i >= seq->wfirst)
            st = parts_io(kv->wparts, kv->n_wparts, kv->wof[seq->blocks[i]], dst + kv->main_bytes, false);
        slots[i] = h;
    }
    if (st != WEFT_OK) {
        free(slots);
        free(sh);
        return st;
    }
    if (sh) {
        slot_give(kv, seq);
        free(seq->state_host);
        seq->state_host = sh;
        kv->state_swaps++;
    }
    kv->n_host_free -= seq->n_blocks;
    for (uint32_t i = seq->n_blocks; i-- > 0;) {
        if (kv->n_wblocks && i >= seq->wfirst) wunref(kv, kv->wof[seq->blocks[i]]);
        unref_block(kv, seq->blocks[i]);
    }
    free(seq->host);
    seq->host = slots;
    seq->swapped = true;
    return WEFT_OK;
}

weft_status weft_kv_seq_swap_in(struct weft_kv_pool *kv, struct weft_kv_seq *seq)
{
    if (!seq->swapped) return WEFT_OK;
    if (seq->n_blocks > weft_kv_available(kv))
        return weft_error(WEFT_ERR_NO_ROOM, "kv: need %u blocks to swap in, %u available", seq->n_blocks,
                          weft_kv_available(kv));
    uint32_t nw = kv->n_wblocks ? seq->n_blocks - seq->wfirst : 0;
    if (nw > weft_kv_window_available(kv))
        return weft_error(WEFT_ERR_NO_ROOM, "kv: need %u window blocks to swap in, %u available", nw,
                          weft_kv_window_available(kv));
    /* the state first (a free slot, else nothing is taken) */
    weft_status st = seq->state_host ? slot_take(kv, seq, seq->state_host) : WEFT_OK;
    if (st != WEFT_OK) return st;
    uint32_t i = 0;
    for (; i < seq->n_blocks; i++) {
        int32_t b = take_block(kv);
        if (kv->n_wblocks && i >= seq->wfirst) take_wblock(kv, b);
        st = block_io(kv, b, kv->host + (size_t)seq->host[i] * kv->block_bytes, true);
        if (st != WEFT_OK) {
            wdrop(kv, b);
            unref_block(kv, b);
            break;
        }
        seq->blocks[i] = b;
    }
    if (st != WEFT_OK) {
        /* give back what was taken; the host copy is still whole */
        while (i-- > 0) {
            wdrop(kv, seq->blocks[i]);
            unref_block(kv, seq->blocks[i]);
        }
        if (seq->state_host) slot_give(kv, seq);
        return st;
    }
    free(seq->state_host);
    seq->state_host = NULL;
    for (i = 0; i < seq->n_blocks; i++) kv->host_free[kv->n_host_free++] = seq->host[i];
    free(seq->host);
    seq->host = NULL;
    seq->swapped = false;
    return WEFT_OK;
}

struct weft_kv_view weft_kv_layer_view(const struct weft_kv_pool *kv, uint32_t layer)
{
    if (!kv->lgroup || layer >= kv->n_layer || kv->lgroup[layer] == 2) return (struct weft_kv_view){0};
    if (kv->lgroup[layer] == 3) layer = kv->ksrc[layer];
    bool win = kv->lgroup[layer] == 1;
    const struct weft_kv_part *parts = win ? kv->wparts : kv->parts;
    uint32_t n = win ? kv->n_wparts : kv->n_parts, i = kv->lidx[layer], p = 0;
    while (p + 1 < n && i >= parts[p].layer0 + parts[p].n_layer) p++;
    const struct weft_kv_part *kp = &parts[p];
    struct weft_kv_view v = {kp->buf, kv->type, kp->n_layer, i - kp->layer0, kv->n_kv_head, kv->head_dim,
                             kv->head_dim_v != kv->head_dim ? kv->head_dim_v : 0, kv->latent};
    if (win) {
        v.n_kv_head = kv->wn_kv_head;
        v.head_dim = kv->whead_dim;
        v.head_dim_v = kv->whead_dim_v != kv->whead_dim ? kv->whead_dim_v : 0;
    }
    return v;
}

weft_status weft_kv_check(const struct weft_kv_pool *kv)
{
    uint32_t n_ref0_hashed = 0, n_ref0_plain = 0, n_ht = 0;
    for (uint32_t b = 0; b < kv->n_blocks; b++) {
        if (kv->ref[b] == 0 && kv->hash[b]) n_ref0_hashed++;
        if (kv->ref[b] == 0 && !kv->hash[b]) n_ref0_plain++;
        if (kv->hash[b] && ht_get(kv, kv->hash[b]) != (int32_t)b)
            return weft_error(WEFT_ERR_INVALID_ARG, "kv check: block %u's hash is not in the table", b);
    }
    for (uint32_t i = 0; i <= kv->ht_mask; i++) n_ht += kv->ht_key[i] != 0;
    uint32_t n_lru = 0;
    for (int32_t b = kv->lru_head; b >= 0; b = kv->lru_next[b], n_lru++)
        if (kv->ref[b] || !kv->hash[b] || n_lru > kv->n_blocks)
            return weft_error(WEFT_ERR_INVALID_ARG, "kv check: LRU holds block %d (ref %u)", b, kv->ref[b]);
    for (uint32_t i = 0; i < kv->n_free; i++)
        if (kv->ref[kv->free_ids[i]] || kv->hash[kv->free_ids[i]])
            return weft_error(WEFT_ERR_INVALID_ARG, "kv check: free list holds block %d in use", kv->free_ids[i]);
    if (n_lru != kv->n_cached || n_lru != n_ref0_hashed || kv->n_free != n_ref0_plain)
        return weft_error(WEFT_ERR_INVALID_ARG, "kv check: %u in LRU, %u cached, %u ref-0 registered; %u free vs %u",
                          n_lru, kv->n_cached, n_ref0_hashed, kv->n_free, n_ref0_plain);
    uint32_t n_hc_lru = 0, n_hc_ht = 0;
    for (int32_t i = kv->hc_head; i >= 0; i = kv->hc_next[i], n_hc_lru++)
        if (!kv->hc_hash[i] || hc_get(kv, kv->hc_hash[i]) != i || n_hc_lru > kv->n_hc)
            return weft_error(WEFT_ERR_INVALID_ARG, "kv check: host tier slot %d is not registered", i);
    for (uint32_t i = 0; kv->n_hc && i <= kv->hc_mask; i++) n_hc_ht += kv->hc_key[i] != 0;
    if (n_hc_lru + kv->n_hc_free != kv->n_hc || n_hc_ht != n_hc_lru)
        return weft_error(WEFT_ERR_INVALID_ARG, "kv check: host tier: %u in LRU, %u free, %u entries, %u slots",
                          n_hc_lru, kv->n_hc_free, n_hc_ht, kv->n_hc);
    if (kv->n_wblocks) {
        uint32_t n_wl = 0, n_wlinked = 0, n_wheld = 0;
        for (int32_t w = kv->wlru_head; w >= 0; w = kv->wlru_next[w], n_wl++)
            if (kv->wref[w] || kv->wowner[w] < 0 || !kv->hash[kv->wowner[w]] || n_wl > kv->n_wblocks)
                return weft_error(WEFT_ERR_INVALID_ARG, "kv check: window LRU holds window block %d (ref %u)", w,
                                  kv->wref[w]);
        for (uint32_t w = 0; w < kv->n_wblocks; w++) {
            if (kv->wowner[w] < 0) continue;
            n_wlinked++;
            n_wheld += kv->wref[w] > 0;
            if (kv->wof[kv->wowner[w]] != (int32_t)w)
                return weft_error(WEFT_ERR_INVALID_ARG, "kv check: window block %u and main block %d disagree", w,
                                  kv->wowner[w]);
            if (kv->wref[w] > kv->ref[kv->wowner[w]])
                return weft_error(WEFT_ERR_INVALID_ARG, "kv check: window block %u held %u times, its block %u",
                                  w, kv->wref[w], kv->ref[kv->wowner[w]]);
        }
        for (uint32_t b = 0; b < kv->n_blocks; b++)
            if (kv->wof[b] >= 0 && kv->wowner[kv->wof[b]] != (int32_t)b)
                return weft_error(WEFT_ERR_INVALID_ARG, "kv check: block %u's window block is another's", b);
        if (n_wl != kv->n_wcached || n_wlinked - n_wheld != n_wl || n_wlinked + kv->n_wfree != kv->n_wblocks)
            return weft_error(WEFT_ERR_INVALID_ARG, "kv check: window group: %u cached, %u in LRU, %u linked, %u held, "
                              "%u free of %u", kv->n_wcached, n_wl, n_wlinked, n_wheld, kv->n_wfree, kv->n_wblocks);
    }
    if (kv->n_slots) {
        /* the free slots are distinct slots of the pool */
        if (kv->n_sfree > kv->n_slots)
            return weft_error(WEFT_ERR_INVALID_ARG, "kv check: %u free state slots of %u", kv->n_sfree, kv->n_slots);
        for (uint32_t i = 0; i < kv->n_sfree; i++) {
            if (kv->sfree[i] < 0 || (uint32_t)kv->sfree[i] >= kv->n_slots)
                return weft_error(WEFT_ERR_INVALID_ARG, "kv check: free state slot %d out of range", kv->sfree[i]);
            for (uint32_t j = 0; j < i; j++)
                if (kv->sfree[j] == kv->sfree[i])
                    return weft_error(WEFT_ERR_INVALID_ARG, "kv check: state slot %d free twice", kv->sfree[i]);
        }
    }
    uint32_t n_hashed = 0;
    for (uint32_t b = 0; b < kv->n_blocks; b++) n_hashed += kv->hash[b] != 0;
    if (n_ht != n_hashed)
        return weft_error(WEFT_ERR_INVALID_ARG, "kv check: %u hash entries for %u registered blocks", n_ht, n_hashed);
    return WEFT_OK;
}
