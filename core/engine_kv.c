/* KV blocks in and out of an engine's prefix cache, in format v5
 * (base/kv_block.h): what the host tier, Redis, instance-to-instance
 * transfers and prefill/decode disaggregation are built on. */
#include <stdlib.h>
#include <string.h>

#include "core/engine_internal.h"
#include "base/buf.h"
#include "core/model_impl.h"

/* The engine's lock, once no step is computing: the backends are not shared
 * with a forward in flight. The engine thread lets a waiter in between two
 * steps (kv_waiters), so block I/O is not starved by a busy engine. */
static void lock_idle(struct weft_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->kv_waiters++;
    while (e->in_forward) pthread_cond_wait(&e->fwd_cv, &e->mu);
}

static void unlock_idle(struct weft_engine *e)
{
    e->kv_waiters--;
    pthread_cond_broadcast(&e->fwd_cv);
    pthread_mutex_unlock(&e->mu);
}

/* Layer l is a sliding-window one (the model's, whether or not this pool
 * drops window blocks: instances that keep every block share blocks with
 * those that do). */
static bool window_layer(const struct weft_engine *e, uint32_t l)
{
    return e->kv.n_layer == e->m->hp.n_layer && weft_hp_window(&e->m->hp, l) > 0;
}

/* The header's runs split where layers keep no K/V: layers that read another layer's (a
 * SHARED run each, Gemma 4) and recurrent layers (STATE runs, Qwen3.5). */
static void special_runs(const struct weft_engine *e, struct weft_kvb_header *h)
{
    const struct weft_kv_pool *kv = &e->kv;
    bool which[4096] = {0};
    const struct weft_kvb_layout shared = {.kind = WEFT_KVB_SHARED, .type = (uint8_t)kv->type},
                                 state = {.kind = WEFT_KVB_STATE, .type = WEFT_TYPE_F32,
                                          .a = (uint32_t)kv->state_layer_bytes};
    for (int g = 3; g >= 2; g--) {
        if (!h->n_layout || (g == 3 ? !kv->n_kshared || kv->latent : !weft_kv_has_state(kv))) continue;
        for (uint32_t l = 0; l < kv->n_layer && l < 4096; l++) which[l] = kv->lgroup[l] == g;
        if (!weft_kvb_layout_replace(h, which, g == 3 ? &shared : &state))
            h->n_layout = 0;  /* more runs than a header holds: refused by weft_kvb_header_init */
    }
}

/* The header of this engine's blocks (n_blocks 0): every layer, attention
 * K/V of one shape, the window layers' as WINDOW runs. */
static void own_header(const struct weft_engine *e, struct weft_kvb_header *h)
{
    memset(h, 0, sizeof *h);
    h->fp = e->m->fingerprint;
    h->n_layer = e->kv.n_layer;
    h->layer0 = 0;
    h->n_layers = e->kv.n_layer;
    h->mac = e->kv_keys.n > 0;
    uint8_t win[4096] = {0};
    for (uint32_t l = 0; l < e->kv.n_layer && l < 4096; l++) win[l] = window_layer(e, l);
    if (e->kv.latent)
        weft_kvb_layout_latent(h, e->kv.type, e->kv.n_layer, e->kv.head_dim, e->kv.head_dim_v);
    else if (!weft_kvb_layout_window(h, e->kv.type, e->kv.n_layer, e->kv.n_kv_head, e->kv.head_dim, e->kv.head_dim_v,
                                     win))
        h->n_layout = 0;  /* more runs than a header holds: refused by weft_kvb_header_init */
    /* window layers of their own shape, layers reading another's K/V (Gemma 4) */
    for (uint32_t i = 0; i < h->n_layout; i++)
        if (h->layout[i].kind == WEFT_KVB_WINDOW) {
            h->layout[i].a = e->kv.wn_kv_head;
            h->layout[i].b = e->kv.whead_dim;
            h->layout[i].c = e->kv.whead_dim_v != e->kv.whead_dim ? e->kv.whead_dim_v : 0;
        }
    special_runs(e, h);
}

/* A pool that keeps every block holds its window layers in layer order with
 * the rest; the format puts them after the others: move one block's layers
 * between the two orders (to_stream: pool -> stream). Without window layers,
 * or in a pool that has its own window group (already in stream order), a
 * copy. */
static void reorder(const struct weft_engine *e, const unsigned char *src, unsigned char *dst, bool to_stream)
{
    const struct weft_kv_pool *kv = &e->kv;
    if (weft_kv_has_window(kv)) {
        memcpy(dst, src, kv->block_bytes);
        return;
    }
    size_t lb = kv->block_bytes / (kv->n_layer - kv->n_kshared - kv->n_slayer), at = 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t l = 0; l < kv->n_layer; l++) {
            if (window_layer(e, l) != (pass == 1) || kv->lgroup[l] >= 2) continue;
            /* the pool's layer: its index in the main group (recurrent layers have none) */
            const size_t p = (size_t)kv->lidx[l] * lb;
            if (to_stream) memcpy(dst + at, src + p, lb);
            else memcpy(dst + p, src + at, lb);
            at += lb;
        }
}

void weft_engine_kv_expect(const struct weft_engine *e, struct weft_kvb_expect *out)
{
    struct weft_kvb_header h;
    own_header(e, &h);
    memset(out, 0, sizeof *out);
    out->fp = h.fp;
    out->n_layer = h.n_layer;
    out->n_layout = h.n_layout;
    memcpy(out->layout, h.layout, sizeof h.layout[0] * h.n_layout);
    out->allow_convert = e->cfg.kv_import_convert;
    out->keys = &e->kv_keys;
}

void weft_engine_kv_set_keys(struct weft_engine *e, const struct weft_kvb_keys *keys)
{
    pthread_mutex_lock(&e->mu);
    e->kv_keys = keys ? *keys : (struct weft_kvb_keys){.n = 0};
    pthread_mutex_unlock(&e->mu);
}

void weft_engine_kv_stats(struct weft_engine *e, struct weft_engine_kv_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->kvio;
    struct weft_kv_stats ks;
    weft_kv_stats(&e->kv, &ks);
    out->hit_imported = ks.hit_imported_blocks;
    pthread_mutex_unlock(&e->mu);
}

/* Write the held blocks among hashes[0..n) after a header: up to the first
 * missing one, or (skip) every held one not imported; from the device, or
 * from the host tier for a block the device has evicted since; each with its
 * state checkpoint when it ends one (only the block named *ckpt's, unless NULL);
 * lock held. ids[i] < 0: the host tier's. */
static weft_status export_locked(struct weft_engine *e, const uint64_t *hashes, uint32_t n, bool skip, const uint64_t *ckpt,
                                 unsigned char **out, size_t *n_out, uint32_t *n_blocks)
{
    struct weft_kv_pool *kv = &e->kv;
    uint32_t held = 0;
    int32_t *ids = malloc(sizeof *ids * (n ? n : 1));
    uint64_t *names = malloc(sizeof *names * (n ? n : 1));
    const void **cks = malloc(sizeof *cks * (n ? n : 1));  /* each block's state checkpoint, or NULL */
    if (!ids || !names || !cks) {
        free(ids);
        free(names);
        free(cks);
        return weft_error(WEFT_ERR_NOMEM, "kv export: out of memory");
    }
    for (uint32_t i = 0; i < n; i++) {
        int32_t b = weft_kv_lookup(kv, hashes[i]);
        const void *hp;
        uint64_t hpar;
        const int32_t *htok;
        if (b < 0 && weft_kv_host_block(kv, hashes[i], &hp, &hpar, &htok, NULL)) b = -1;  /* demoted: still here */
        else if (b < 0 && !skip) break;
        else if (b < 0 || (skip && kv->imported[b])) continue;
        ids[held] = b;
        names[held++] = hashes[i];
    }
    struct weft_kvb_header h;
    own_header(e, &h);
    h.n_blocks = held;
    weft_status st = weft_kvb_header_init(&h);
    if (st == WEFT_OK && h.payload_bytes != kv->block_bytes)
        st = weft_error(WEFT_ERR_INVALID_ARG, "kv export: pool blocks of %zu bytes, the format's %u", kv->block_bytes,
                        h.payload_bytes);
    if (st == WEFT_OK && h.state_bytes != (weft_kv_has_state(kv) ? kv->slot_bytes : 0))
        st = weft_error(WEFT_ERR_INVALID_ARG, "kv export: state checkpoints of %zu bytes, the format's %u",
                        kv->slot_bytes, h.state_bytes);
    if (st != WEFT_OK) {
        free(ids);
        free(names);
        free(cks);
        return st;
    }
    /* a block that ends at a state checkpoint carries it (looked up once: the lock is held) */
    size_t total = h.header_bytes;
    for (uint32_t i = 0; i < held; i++) {
        cks[i] = !ckpt || names[i] == *ckpt ? weft_kv_checkpoint(kv, names[i]) : NULL;
        total += weft_kvb_record_bytes_flags(&h, cks[i] ? WEFT_KVB_BLOCK_STATE : 0);
    }
    unsigned char *buf = malloc(total);
    unsigned char *payload = malloc(kv->block_bytes), *ordered = malloc(kv->block_bytes);
    if (!buf || !payload || !ordered) {
        free(buf);
        free(payload);
        free(ordered);
        free(ids);
        free(names);
        free(cks);
        return weft_error(WEFT_ERR_NOMEM, "kv export: out of memory for %u blocks", held);
    }
    weft_kvb_write_header(&h, buf);
    unsigned char *at = buf + h.header_bytes;
    for (uint32_t i = 0; i < held && st == WEFT_OK; i++) {
        int32_t b = ids[i];
        const void *ck = cks[i];
        const uint32_t with_ck = ck ? WEFT_KVB_BLOCK_STATE : 0;
        /* a pool without a window group has every block's window part */
        bool win = !weft_kv_has_window(kv);
        if (b < 0) {
            const void *hp;
            uint64_t hpar;
            const int32_t *htok;
            bool hwin;
            weft_kv_host_block(kv, names[i], &hp, &hpar, &htok, &hwin);
            reorder(e, hp, ordered, true);
            weft_kvb_write_block(&h, &e->kv_keys, hpar, names[i], htok,
                                 (win || hwin ? WEFT_KVB_BLOCK_WINDOW : 0) | with_ck, ordered, ck, at);
        } else {
            win |= weft_kv_window_block(kv, b) >= 0;
            st = weft_kv_block_read(kv, b, payload);
            reorder(e, payload, ordered, true);
            if (st == WEFT_OK)
                weft_kvb_write_block(&h, &e->kv_keys, kv->parent[b], names[i],
                                     kv->toks + (size_t)b * WEFT_KV_BLOCK_TOKENS,
                                     (win ? WEFT_KVB_BLOCK_WINDOW : 0) | with_ck, ordered, ck, at);
        }
        at += weft_kvb_record_bytes_flags(&h, with_ck);
        e->kvio.ckpts_out += ck != NULL;
    }
    free(payload);
    free(ordered);
    free(ids);
    free(names);
    free(cks);
    if (st != WEFT_OK) {
        free(buf);
        return st;
    }
    e->kvio.exported += held;
    e->kvio.bytes_out += total;
    *out = buf;
    *n_out = total;
    *n_blocks = held;
    return WEFT_OK;
}

weft_status weft_engine_kv_export_hashes(struct weft_engine *e, const uint64_t *hashes, uint32_t n,
                                         unsigned char **out, size_t *n_out, uint32_t *n_blocks)
{
    *out = NULL;
    *n_out = 0;
    *n_blocks = 0;
    lock_idle(e);
    weft_status st = export_locked(e, hashes, n, false, NULL, out, n_out, n_blocks);
    unlock_idle(e);
    return st;
}

weft_status weft_engine_kv_export_hashes_ckpt(struct weft_engine *e, const uint64_t *hashes, uint32_t n, uint64_t ckpt,
                                              unsigned char **out, size_t *n_out, uint32_t *n_blocks)
{
    *out = NULL;
    *n_out = 0;
    *n_blocks = 0;
    lock_idle(e);
    weft_status st = export_locked(e, hashes, n, false, &ckpt, out, n_out, n_blocks);
    unlock_idle(e);
    return st;
}

weft_status weft_engine_kv_export_held(struct weft_engine *e, const uint64_t *hashes, uint32_t n, unsigned char **out,
                                       size_t *n_out, uint32_t *n_blocks)
{
    *out = NULL;
    *n_out = 0;
    *n_blocks = 0;
    lock_idle(e);
    weft_status st = export_locked(e, hashes, n, true, NULL, out, n_out, n_blocks);
    unlock_idle(e);
    return st;
}

weft_status weft_engine_kv_export_prefix(struct weft_engine *e, const int32_t *tokens, uint32_t n_tokens,
                                         unsigned char **out, size_t *n_out, uint32_t *n_blocks)
{
    uint32_t nb = n_tokens / WEFT_KV_BLOCK_TOKENS;
    uint64_t *hashes = malloc(sizeof *hashes * (nb ? nb : 1));
    if (!hashes) return weft_error(WEFT_ERR_NOMEM, "kv export: out of memory");
    uint64_t h = 0;
    for (uint32_t i = 0; i < nb; i++) hashes[i] = h = weft_kv_block_hash(h, tokens + (size_t)i * WEFT_KV_BLOCK_TOKENS);
    weft_status st = weft_engine_kv_export_hashes(e, hashes, nb, out, n_out, n_blocks);
    free(hashes);
    return st;
}

struct import_ctx {
    struct weft_engine *e;
    unsigned char *conv;     /* a block converted to the pool's type */
    unsigned char *ordered;  /* a block in the pool's order */
    uint32_t added;
    weft_status fail;        /* a pool failure (not a bad block) */
    bool pin;                /* pin each block taken (or held already) */
    uint64_t *pinned;        /* [n_pinned], grown here */
    uint32_t n_pinned, cap_pinned;
};

static weft_status pin_one(struct import_ctx *c, uint64_t hash)
{
    if (c->n_pinned == c->cap_pinned) {
        uint64_t *p = weft_grow32(c->pinned, &c->cap_pinned, (size_t)c->n_pinned + 1, sizeof *p);
        if (!p) return c->fail = weft_error(WEFT_ERR_NOMEM, "kv import: out of memory");
        c->pinned = p;
    }
    if (weft_kv_pin(&c->e->kv, hash)) c->pinned[c->n_pinned++] = hash;
    return WEFT_OK;
}

static weft_status import_one(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b)
{
    struct import_ctx *c = user;
    struct weft_engine *e = c->e;
    const void *payload = b->payload;
    size_t bytes = h->payload_bytes;
    bool convert = false;
    for (uint32_t i = 0; i < h->n_layout; i++)
        convert |= h->layout[i].kind != WEFT_KVB_STATE && h->layout[i].type != e->kv.type;
    if (convert) {
        /* the checked header's layout is the pool's: its payload converts to one block */
        bytes = weft_kvb_payload_bytes_as(h, e->kv.type);
        if (bytes != e->kv.block_bytes)
            return c->fail = weft_error(WEFT_ERR_INVALID_ARG, "kv import: a block of %zu bytes, the pool's hold %zu",
                                        bytes, e->kv.block_bytes);
        weft_status st = weft_kvb_convert(h, b->payload, e->kv.type, c->conv);
        if (st != WEFT_OK) return c->fail = st;
        payload = c->conv;
    }
    if (h->window_bytes && !(b->flags & WEFT_KVB_BLOCK_WINDOW)) {
        /* its writer had dropped the window part: only a pool that drops
         * them too takes the rest */
        if (!weft_kv_has_window(&e->kv))
            return c->fail = weft_error(WEFT_ERR_UNSUPPORTED, "kv import: block %016llx comes without its "
                                        "sliding-window layers' K/V, and this instance keeps every block (--swa-full)",
                                        (unsigned long long)b->hash);
        bytes = e->kv.main_bytes;
    } else if (!weft_kv_has_window(&e->kv) && h->window_bytes) {
        reorder(e, payload, c->ordered, false);
        payload = c->ordered;
    }
    bool added = false;
    weft_status st = weft_kv_import(&e->kv, b->parent, b->hash, b->tokens, payload, bytes, &added);
    if (st == WEFT_ERR_NO_ROOM) {
        e->kvio.no_room++;
        return c->fail = st;
    }
    if (st != WEFT_OK) return c->fail = st;
    if (added) {
        c->added++;
        e->kvio.imported++;
        e->kvio.converted += convert;
    } else {
        e->kvio.already++;
    }
    if (b->state) {
        /* the state after this block: a hybrid resumes here (checked block first: only a
         * block this pool holds names a checkpoint) */
        bool ck_added = false;
        st = weft_kv_checkpoint_put(&e->kv, b->hash, b->state, h->state_bytes, &ck_added);
        if (st != WEFT_OK) return c->fail = st;
        e->kvio.ckpts_in += ck_added;
    }
    return c->pin ? pin_one(c, b->hash) : WEFT_OK;
}

static weft_status import(struct weft_engine *e, const unsigned char *buf, size_t n, uint32_t *n_imported,
                          uint64_t **pinned, uint32_t *n_pinned)
{
    if (n_imported) *n_imported = 0;
    struct weft_kvb_expect want;
    weft_engine_kv_expect(e, &want);
    struct import_ctx c = {.e = e, .pin = pinned != NULL};
    c.conv = malloc(e->kv.block_bytes);
    c.ordered = malloc(e->kv.block_bytes);
    if (!c.conv || !c.ordered) {
        free(c.conv);
        free(c.ordered);
        return weft_error(WEFT_ERR_NOMEM, "kv import: out of memory");
    }
    lock_idle(e);
    e->kvio.bytes_in += n;
    struct weft_kvb_header h;
    uint32_t good = 0;
    weft_status st = WEFT_OK;
    if (!e->kv.prefix_cache) st = weft_error(WEFT_ERR_UNSUPPORTED, "kv import: the prefix cache is off");
    /* the header first, so that a refused stream and a bad block count apart */
    if (st == WEFT_OK && (st = weft_kvb_read_header(buf, n, &h)) == WEFT_OK) st = weft_kvb_check_model(&h, &want);
    if (st == WEFT_OK) {
        st = weft_kvb_read_stream(buf, n, &want, &h, import_one, &c, &good);
        if (st != WEFT_OK && c.fail == WEFT_OK) {
            /* a block's fault, or a size that does not match the header (then none was read) */
            if (st == WEFT_ERR_AUTH) e->kvio.rejected_mac++;
            else if (good == 0 && !weft_kvb_sizes_ok(&h, buf, n)) e->kvio.rejected_streams++;
            else e->kvio.rejected++;
        }
    } else if (st == WEFT_ERR_AUTH) {
        e->kvio.rejected_mac++;  /* a stream of blocks without MACs */
    } else if (e->kv.prefix_cache) {
        e->kvio.rejected_streams++;
    }
    unlock_idle(e);
    free(c.conv);
    free(c.ordered);
    if (n_imported) *n_imported = c.added;
    if (pinned) {
        *pinned = c.pinned;
        *n_pinned = c.n_pinned;
    }
    return st;
}

weft_status weft_engine_kv_import(struct weft_engine *e, const unsigned char *buf, size_t n, uint32_t *n_imported)
{
    return import(e, buf, n, n_imported, NULL, NULL);
}

weft_status weft_engine_kv_import_pinned(struct weft_engine *e, const unsigned char *buf, size_t n,
                                         uint32_t *n_imported, uint64_t **pinned, uint32_t *n_pinned)
{
    *pinned = NULL;
    *n_pinned = 0;
    return import(e, buf, n, n_imported, pinned, n_pinned);
}

void weft_engine_kv_unpin(struct weft_engine *e, const uint64_t *hashes, uint32_t n)
{
    if (!n) return;
    pthread_mutex_lock(&e->mu);
    for (uint32_t i = 0; i < n; i++) weft_kv_unpin(&e->kv, hashes[i]);
    /* blocks back in the LRU may be what a waiting request needs */
    e->wake++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

uint32_t weft_engine_kv_held(struct weft_engine *e, const uint64_t *hashes, uint32_t n)
{
    pthread_mutex_lock(&e->mu);
    uint32_t k = 0;
    while (k < n && weft_kv_holds(&e->kv, hashes[k])) k++;
    pthread_mutex_unlock(&e->mu);
    return k;
}

size_t weft_engine_kv_block_bytes(const struct weft_engine *e) { return e->kv.block_bytes; }

bool weft_engine_kv_imported(struct weft_engine *e, uint64_t hash)
{
    pthread_mutex_lock(&e->mu);
    int32_t b = weft_kv_lookup(&e->kv, hash);
    bool imp = b >= 0 && e->kv.imported[b];
    pthread_mutex_unlock(&e->mu);
    return imp;
}
