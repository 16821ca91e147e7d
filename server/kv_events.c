/* The prefix cache as seen from outside (FLEET.md, "What an instance
 * publishes"): GET /v1/kv/events streams "stored" / "removed" events of
 * core/kv's chained block hashes as server-sent events, each with a
 * sequence number (and, for a hybrid model, "checkpoint" /
 * "checkpoint_removed" events of its state checkpoints, named by the block
 * they end); GET /v1/kv/index is a snapshot of every registered block (and
 * checkpoint) at one sequence number, for a router that saw a gap (or just
 * connected).
 *
 * The engine thread reports events (core/kv.h's hook) into a queue; the
 * loop thread numbers them, applies them to its copy of the index (bounded:
 * never more entries than the pool has blocks) and sends them to every
 * subscriber in one write per batch. A subscriber that lets more than
 * SUB_MAX_PENDING pile up unread is told so in an error event and dropped:
 * it resyncs from the index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "base/buf.h"
#include "server/kv_remote.h"

#define SUB_MAX_PENDING (1u << 20)

struct kv_ev {
    uint8_t kind;
    uint64_t hash, parent;
};

/* open addressing, 0 = empty (hashes are never 0); sized for twice its most entries */
struct hidx {
    uint64_t *keys, *parents;
    uint32_t mask, count;
};

struct kv_sub {
    struct weft_server *s;
    struct http_conn *c;
    struct kv_sub *prev, *next;
};

struct kv_events {
    pthread_mutex_t mu;
    struct kv_ev *q, *q2;         /* engine -> loop, swapped on delivery */
    uint32_t n_q, cap_q, cap_q2;
    bool lost;                    /* an event could not be queued: make a gap */
    bool closing;
    uv_async_t async;
    uint64_t seq;
    struct hidx blocks;           /* registered blocks (and their parents) */
    struct hidx ckpts;            /* a hybrid's state checkpoints (parents 0) */
    struct kv_sub *subs;
    uint32_t n_subs;
    uint64_t dropped_subs;
    struct kv_remote *remote;     /* write-behind of stored blocks (under mu), or NULL */
    struct weft_server *s;
};

/* ---- the index ---- */

static uint32_t slot_of(const struct hidx *x, uint64_t h)
{
    uint32_t i = (uint32_t)(h ^ (h >> 29)) & x->mask;
    while (x->keys[i] && x->keys[i] != h) i = (i + 1) & x->mask;
    return i;
}

static void index_put(struct hidx *x, uint64_t h, uint64_t parent)
{
    if (!x->keys) return;
    uint32_t i = slot_of(x, h);
    if (!x->keys[i]) {
        if (x->count + 1 > x->mask / 2) return;  /* cannot happen: sized for twice the pool */
        x->count++;
    }
    x->keys[i] = h;
    x->parents[i] = parent;
}

static void index_del(struct hidx *x, uint64_t h)
{
    if (!x->keys) return;
    uint32_t i = slot_of(x, h);
    if (!x->keys[i]) return;
    x->keys[i] = 0;
    x->count--;
    /* re-place the rest of the cluster (linear probing deletion) */
    for (uint32_t j = (i + 1) & x->mask; x->keys[j]; j = (j + 1) & x->mask) {
        uint64_t key = x->keys[j], par = x->parents[j];
        x->keys[j] = 0;
        uint32_t t = slot_of(x, key);
        x->keys[t] = key;
        x->parents[t] = par;
    }
}

/* room for n entries (none: an empty index that takes nothing) */
static bool index_init(struct hidx *x, uint32_t n)
{
    if (!n) return true;
    uint32_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    x->keys = calloc(cap, sizeof *x->keys);
    x->parents = calloc(cap, sizeof *x->parents);
    x->mask = cap - 1;
    return x->keys && x->parents;
}

static void index_free(struct hidx *x)
{
    free(x->keys);
    free(x->parents);
}

/* ---- subscribers ---- */

static void sub_unlink(struct kv_events *k, struct kv_sub *u)
{
    if (u->prev) u->prev->next = u->next;
    else k->subs = u->next;
    if (u->next) u->next->prev = u->prev;
    k->n_subs--;
}

static void sub_gone(void *user)
{
    struct kv_sub *u = user;
    sub_unlink(u->s->kv_events, u);
    free(u);
}

static void sub_end(struct kv_events *k, struct kv_sub *u, const char *why)
{
    char b[400];
    memcpy(b, "data: ", 6);
    size_t n = weft_http_error_body(b + 6, sizeof b - 8, "server_error", NULL, why);
    memcpy(b + 6 + n, "\n\n", 2);
    weft_http_stream_write(u->c, b, n + 8);
    struct http_conn *c = u->c;
    sub_unlink(k, u);
    free(u);
    weft_http_stream_end(c);  /* clears the on_close hook with the request */
}

static void broadcast(struct kv_events *k, const char *data, size_t len)
{
    for (struct kv_sub *u = k->subs, *next; u; u = next) {
        next = u->next;
        if (weft_http_conn_pending(u->c) > SUB_MAX_PENDING) {
            k->dropped_subs++;
            sub_end(k, u, "this subscriber did not read its KV events: resync from GET /v1/kv/index");
            continue;
        }
        weft_http_stream_write(u->c, data, len);  /* a failed write: on_close follows */
    }
}

/* ---- engine thread -> loop ---- */

static void on_kv_event(void *user, enum weft_kv_event_kind kind, uint64_t hash, uint64_t parent)
{
    struct kv_events *k = user;
    pthread_mutex_lock(&k->mu);
    if (k->n_q == k->cap_q) {
        struct kv_ev *q = weft_grow32(k->q, &k->cap_q, (size_t)k->n_q + 1, sizeof *q);
        if (!q) {
            k->lost = true;
            pthread_mutex_unlock(&k->mu);
            return;
        }
        k->q = q;
    }
    k->q[k->n_q++] = (struct kv_ev){(uint8_t)kind, hash, parent};
    /* a block, or a state checkpoint its block (in Redis already) now carries */
    if (k->remote && (kind == WEFT_KV_EVENT_STORED || kind == WEFT_KV_EVENT_CKPT_STORED))
        weft_kv_remote_stored(k->remote, hash);
    bool closing = k->closing;
    pthread_mutex_unlock(&k->mu);
    if (!closing) uv_async_send(&k->async);
}

static void deliver(uv_async_t *a)
{
    struct kv_events *k = a->data;
    pthread_mutex_lock(&k->mu);
    struct kv_ev *q = k->q;
    uint32_t n = k->n_q, cap = k->cap_q;
    bool lost = k->lost;
    k->q = k->q2;
    k->cap_q = k->cap_q2;
    k->n_q = 0;
    k->q2 = q;
    k->cap_q2 = cap;
    k->lost = false;
    pthread_mutex_unlock(&k->mu);
    if (lost) k->seq++;  /* a number nobody gets: subscribers see the gap and resync */
    if (n == 0) return;
    weft_server_pd_kick(k->s);  /* blocks committed: PD pushes move on */
    size_t per = 200, len = 0;  /* one event is at most ~152 bytes */
    char *buf = k->subs ? malloc(per * n) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t seq = ++k->seq;
        static const char *const type[] = {"", "stored", "removed", "checkpoint", "checkpoint_removed"};
        switch (q[i].kind) {
        case WEFT_KV_EVENT_STORED: index_put(&k->blocks, q[i].hash, q[i].parent); break;
        case WEFT_KV_EVENT_REMOVED: index_del(&k->blocks, q[i].hash); break;
        case WEFT_KV_EVENT_CKPT_STORED: index_put(&k->ckpts, q[i].hash, 0); break;
        default: index_del(&k->ckpts, q[i].hash); break;
        }
        if (buf)
            len += (size_t)snprintf(buf + len, per, "id: %llu\ndata: {\"seq\":%llu,\"type\":\"%s\",\"hash\":\"%016llx\","
                                                  "\"parent\":\"%016llx\"}\n\n",
                                    (unsigned long long)seq, (unsigned long long)seq, type[q[i].kind <= 4 ? q[i].kind : 4],
                                    (unsigned long long)q[i].hash, (unsigned long long)q[i].parent);
    }
    if (buf && len) broadcast(k, buf, len);
    free(buf);
}

/* ---- lifecycle and endpoints ---- */

weft_status weft_server_kv_events_init(struct weft_server *s, uint32_t n_blocks, uint32_t n_ckpts)
{
    struct kv_events *k = calloc(1, sizeof *k);
    if (!k || !index_init(&k->blocks, n_blocks ? n_blocks : 1) || !index_init(&k->ckpts, n_ckpts)) {
        if (k) index_free(&k->blocks), index_free(&k->ckpts);
        free(k);
        return weft_error(WEFT_ERR_NOMEM, "server: out of memory for the KV index");
    }
    pthread_mutex_init(&k->mu, NULL);
    uv_async_init(s->loop, &k->async, deliver);
    k->async.data = k;
    s->kv_events = k;
    k->remote = s->kv_remote;
    k->s = s;
    weft_engine_on_kv_event(s->eng, on_kv_event, k);
    return WEFT_OK;
}

void weft_server_kv_events_drop_remote(struct weft_server *s)
{
    struct kv_events *k = s->kv_events;
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    k->remote = NULL;
    pthread_mutex_unlock(&k->mu);
}

void weft_server_kv_events_end_all(struct weft_server *s, const char *why)
{
    struct kv_events *k = s->kv_events;
    if (!k) return;
    while (k->subs) sub_end(k, k->subs, why);
}

static void on_async_closed(uv_handle_t *h)
{
    struct kv_events *k = h->data;
    pthread_mutex_destroy(&k->mu);
    free(k->q);
    free(k->q2);
    index_free(&k->blocks);
    index_free(&k->ckpts);
    free(k);
}

void weft_server_kv_events_close(struct weft_server *s)
{
    struct kv_events *k = s->kv_events;
    if (!k) return;
    s->kv_events = NULL;
    /* no event comes after this: the hook runs under the engine's lock, which unhooking takes */
    if (s->eng) weft_engine_on_kv_event(s->eng, NULL, NULL);
    pthread_mutex_lock(&k->mu);
    k->closing = true;
    pthread_mutex_unlock(&k->mu);
    while (k->subs) {  /* their connections are being closed: forget them */
        struct kv_sub *u = k->subs;
        weft_http_conn_on_close(u->c, NULL, NULL);
        sub_unlink(k, u);
        free(u);
    }
    uv_close((uv_handle_t *)&k->async, on_async_closed);
}

void weft_server_do_kv_events(struct weft_server *s, struct http_conn *c)
{
    struct kv_events *k = s->kv_events;
    struct kv_sub *u = k && !s->draining ? calloc(1, sizeof *u) : NULL;
    if (!u) {
        weft_metrics_request(&s->metrics, "/v1/kv/events", 503);
        weft_http_respond_error(c, 503, "server_error", NULL, s->draining ? "the server is shutting down" : "out of memory");
        return;
    }
    weft_metrics_request(&s->metrics, "/v1/kv/events", 200);
    u->s = s;
    u->c = c;
    u->next = k->subs;
    if (k->subs) k->subs->prev = u;
    k->subs = u;
    k->n_subs++;
    weft_http_conn_on_close(c, sub_gone, u);
    weft_http_stream_begin(c, 200, "text/event-stream", "Cache-Control: no-cache\r\n");
    char hello[160];
    int n = snprintf(hello, sizeof hello, "id: %llu\ndata: {\"seq\":%llu,\"type\":\"hello\",\"block_tokens\":%d}\n\n",
                     (unsigned long long)k->seq, (unsigned long long)k->seq, WEFT_KV_BLOCK_TOKENS);
    weft_http_stream_write(c, hello, (size_t)n);
}

void weft_server_do_kv_index(struct weft_server *s, struct http_conn *c)
{
    struct kv_events *k = s->kv_events;
    size_t cap = 256 + (size_t)(k ? k->blocks.count + k->ckpts.count : 0) * 40, len = 0;
    char *b = malloc(cap);
    if (!b || !k) {
        free(b);
        weft_metrics_request(&s->metrics, "/v1/kv/index", 503);
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    char fp[WEFT_FINGERPRINT_STR];
    weft_fingerprint_str(weft_model_fingerprint(s->m), fp);
    len += (size_t)snprintf(b, cap, "{\"seq\":%llu,\"block_tokens\":%d,\"fingerprint\":\"%s\",\"count\":%u,\"blocks\":[",
                            (unsigned long long)k->seq, WEFT_KV_BLOCK_TOKENS, fp, k->blocks.count);
    bool first = true;
    for (uint32_t i = 0; i <= k->blocks.mask; i++) {
        if (!k->blocks.keys[i]) continue;
        len += (size_t)snprintf(b + len, cap - len, "%s[\"%016llx\",\"%016llx\"]", first ? "" : ",",
                                (unsigned long long)k->blocks.keys[i], (unsigned long long)k->blocks.parents[i]);
        first = false;
    }
    if (k->ckpts.keys) {
        /* a hybrid's: the blocks a prefix hit can resume after */
        len += (size_t)snprintf(b + len, cap - len, "],\"checkpoints\":[");
        first = true;
        for (uint32_t i = 0; i <= k->ckpts.mask; i++) {
            if (!k->ckpts.keys[i]) continue;
            len += (size_t)snprintf(b + len, cap - len, "%s\"%016llx\"", first ? "" : ",",
                                    (unsigned long long)k->ckpts.keys[i]);
            first = false;
        }
    }
    len += (size_t)snprintf(b + len, cap - len, "]}");
    weft_metrics_request(&s->metrics, "/v1/kv/index", 200);
    weft_http_respond(c, 200, "application/json", "Cache-Control: no-store\r\n", b, len);
    free(b);
}

uint32_t weft_server_kv_subscribers(const struct weft_server *s) { return s->kv_events ? s->kv_events->n_subs : 0; }
