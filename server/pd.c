/* Prefill/decode disaggregation on an instance (pd.h). */
#include "server/pd.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "server/http_client.h"
#include "server/server.h"

#define DEF_IDLE_MS 10000u
#define DEF_LEASE_MS 30000u
#define MAX_POOLS 16

struct pd_ticket {
    struct pd *pd;
    char id[PD_ID_MAX];
    uint64_t *pinned;
    uint32_t n_pinned, cap_pinned;
    uint64_t *want;                /* the request's prompt blocks */
    uint32_t n_want;
    bool attached, waiting, ended, got_block;
    void (*ready)(void *user, bool complete);
    void *user;
    uint32_t wait_ms;
    double t_wait0;
    uv_timer_t timer;              /* the lease (no request yet) or the wait */
    struct pd_ticket *prev, *next;
};

struct pd_pool {
    char url[256];
    struct hcl_pool *pool;
};

struct pd_push {
    struct pd *pd;
    char id[PD_ID_MAX];
    char url[256];
    char *auth;
    uint64_t *hashes;
    uint32_t n, sent;
    bool req_done, busy, closing, ok;
    void (*on_end)(void *user, bool ok);  /* once: the transfer is over and the request ended */
    void *end_user;
    struct pd_pool *target;
    /* the worker's answer */
    bool resolved;
    struct sockaddr_storage addr;
    unsigned char *buf;
    size_t len;
    uint32_t nb;
    weft_status st;
    char msg[200];
    /* the POST in flight */
    struct hcl_req *req;
    int status;
    bool sent_end;
    double t0;
    struct pd_push *prev, *next;
};

struct pd {
    struct weft_server *s;
    uint32_t idle_ms, lease_ms;
    uint32_t pinned, max_pinned;     /* blocks pinned by every ticket; at most half the pool */
    uint32_t max_pinned_ticket;      /* ... by one: what one request's prompt can use */
    struct pd_ticket *tickets;
    struct pd_push *pushes;
    struct pd_pool pools[MAX_POOLS];
    uint32_t n_pools;
    struct pd_stats st;
};

/* ---- parsing ---- */

static bool id_ok(const char *b, size_t n)
{
    if (n == 0 || n >= PD_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool take_id(const char *p, char *id)
{
    if (strncmp(p, "id=", 3)) return false;
    p += 3;
    size_t n = strcspn(p, ";");
    if (!id_ok(p, n)) return false;
    memcpy(id, p, n);
    id[n] = 0;
    return true;
}

bool weft_server_pd_parse_wait(const char *v, char *id, uint32_t *wait_ms)
{
    if (!v || !take_id(v, id)) return false;
    *wait_ms = 0;
    const char *w = strstr(v, ";wait_ms=");
    if (w) {
        char *end;
        unsigned long ms = strtoul(w + 9, &end, 10);
        if (end == w + 9 || (*end && *end != ';') || ms > 600000) return false;
        *wait_ms = (uint32_t)ms;
    }
    return true;
}

bool weft_server_pd_parse_push(const char *v, char *url, size_t cap, char *id)
{
    if (!v) return false;
    const char *semi = strchr(v, ';');
    if (!semi || (size_t)(semi - v) >= cap || strncmp(v, "http://", 7)) return false;
    memcpy(url, v, (size_t)(semi - v));
    url[semi - v] = 0;
    char *host = NULL;
    int port = 0;
    bool ok = weft_hcl_parse_url(url, &host, &port);
    free(host);
    return ok && take_id(semi + 1, id);
}

/* ---- lifecycle ---- */

weft_status weft_server_pd_init(struct weft_server *s)
{
    struct pd *pd = calloc(1, sizeof *pd);
    if (!pd) return weft_error(WEFT_ERR_NOMEM, "server: out of memory");
    pd->s = s;
    pd->idle_ms = s->cfg.pd_idle_ms ? s->cfg.pd_idle_ms : DEF_IDLE_MS;
    struct weft_kv_pool *kv = weft_engine_kv(s->eng);
    pd->max_pinned = kv->n_blocks / 2;
    pd->max_pinned_ticket = weft_engine_n_ctx(s->eng) / WEFT_KV_BLOCK_TOKENS + 1;
    pd->lease_ms = s->cfg.pd_lease_ms ? s->cfg.pd_lease_ms : DEF_LEASE_MS;
    s->pd = pd;
    return WEFT_OK;
}

void weft_server_pd_stats(const struct weft_server *s, struct pd_stats *out)
{
    memset(out, 0, sizeof *out);
    if (s->pd) *out = s->pd->st;
}

/* ---- the decode side: tickets ---- */

static void ticket_closed(uv_handle_t *h)
{
    struct pd_ticket *t = h->data;
    free(t->pinned);
    free(t->want);
    free(t);
}

static void ticket_free(struct pd_ticket *t)
{
    struct pd *pd = t->pd;
    if (t->prev) t->prev->next = t->next;
    else pd->tickets = t->next;
    if (t->next) t->next->prev = t->prev;
    pd->st.tickets--;
    pd->pinned -= t->n_pinned;
    if (pd->s->eng) weft_engine_kv_unpin(pd->s->eng, t->pinned, t->n_pinned);
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, ticket_closed);
}

static void finish_wait(struct pd_ticket *t, bool complete)
{
    struct pd *pd = t->pd;
    t->waiting = false;
    uv_timer_stop(&t->timer);
    pd->st.wait_s += weft_server_now() - t->t_wait0;
    if (complete) pd->st.complete++;
    t->ready(t->user, complete);
}

static void on_ticket_timer(uv_timer_t *h)
{
    struct pd_ticket *t = h->data;
    if (t->waiting) {
        t->pd->st.fallback_timeout++;
        finish_wait(t, false);
    } else if (!t->attached) {
        t->pd->st.leases_expired++;  /* its request never came: free the blocks */
        ticket_free(t);
    }
}

static void arm(struct pd_ticket *t)
{
    uint32_t ms = !t->attached ? t->pd->lease_ms : t->got_block || !t->wait_ms ? t->pd->idle_ms : t->wait_ms;
    uv_timer_start(&t->timer, on_ticket_timer, ms, 0);
}

static struct pd_ticket *ticket_get(struct pd *pd, const char *id)
{
    for (struct pd_ticket *t = pd->tickets; t; t = t->next)
        if (!strcmp(t->id, id)) return t;
    struct pd_ticket *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->pd = pd;
    snprintf(t->id, sizeof t->id, "%s", id);
    uv_timer_init(pd->s->loop, &t->timer);
    t->timer.data = t;
    t->next = pd->tickets;
    if (pd->tickets) pd->tickets->prev = t;
    pd->tickets = t;
    pd->st.tickets++;
    arm(t);  /* the lease, until its request attaches */
    return t;
}

bool weft_server_pd_attach(struct weft_server *s, const char *id, const uint64_t *hashes, uint32_t n, uint32_t wait_ms,
                      void (*ready)(void *user, bool complete), void *user, struct pd_ticket **out)
{
    struct pd *pd = s->pd;
    *out = NULL;
    struct pd_ticket *t = pd ? ticket_get(pd, id) : NULL;
    if (!t || t->attached) return true;  /* out of memory, or a second request under one id: no wait */
    t->want = malloc(sizeof *t->want * (n ? n : 1));
    if (!t->want) return true;
    memcpy(t->want, hashes, sizeof *hashes * n);
    t->n_want = n;
    t->attached = true;
    uv_timer_stop(&t->timer);
    *out = t;
    pd->st.requests++;
    if (weft_engine_kv_held(s->eng, hashes, n) == n) {
        pd->st.complete++;
        return true;
    }
    if (t->ended) {
        pd->st.fallback_ended++;
        return true;
    }
    t->waiting = true;
    t->ready = ready;
    t->user = user;
    t->wait_ms = wait_ms;
    t->t_wait0 = weft_server_now();
    arm(t);
    return false;
}

void weft_server_pd_detach(struct weft_server *s, struct pd_ticket *t)
{
    (void)s;
    if (t) ticket_free(t);
}

void weft_server_pd_arrived(struct weft_server *s, const char *id, uint64_t *pinned, uint32_t n_pinned, uint32_t n_blocks,
                       size_t bytes, const char *end)
{
    struct pd *pd = s->pd;
    struct pd_ticket *t = pd ? ticket_get(pd, id) : NULL;
    if (t && n_pinned) {
        /* pins are bounded: a ticket holds what one prompt can use, all of
         * them half the pool; past that a block stays cached, unpinned */
        uint32_t room = t->n_pinned < pd->max_pinned_ticket ? pd->max_pinned_ticket - t->n_pinned : 0;
        uint32_t all = pd->pinned < pd->max_pinned ? pd->max_pinned - pd->pinned : 0;
        uint32_t keep = n_pinned < room ? n_pinned : room;
        keep = keep < all ? keep : all;
        if (keep < n_pinned) {
            weft_engine_kv_unpin(s->eng, pinned + keep, n_pinned - keep);
            pd->st.pins_refused += n_pinned - keep;
            n_pinned = keep;
        }
    }
    if (t && n_pinned && t->cap_pinned - t->n_pinned < n_pinned) {
        uint32_t cap = t->n_pinned + n_pinned;
        cap = cap < 2 * t->cap_pinned ? 2 * t->cap_pinned : cap;
        uint64_t *p = realloc(t->pinned, sizeof *p * cap);
        if (p) {
            t->pinned = p;
            t->cap_pinned = cap;
        }
    }
    if (!t || t->cap_pinned - t->n_pinned < n_pinned) {
        weft_engine_kv_unpin(s->eng, pinned, n_pinned);  /* nothing can hold them: let them go */
        free(pinned);
        return;
    }
    if (n_pinned) memcpy(t->pinned + t->n_pinned, pinned, sizeof *pinned * n_pinned);
    t->n_pinned += n_pinned;
    pd->pinned += n_pinned;
    free(pinned);
    pd->st.blocks_in += n_blocks;
    pd->st.bytes_in += bytes;
    if (n_blocks) t->got_block = true;
    if (end) t->ended = true;
    if (!t->attached) {
        arm(t);  /* the lease runs from the last block */
        return;
    }
    if (!t->waiting) return;
    if (weft_engine_kv_held(s->eng, t->want, t->n_want) == t->n_want) {
        finish_wait(t, true);
    } else if (t->ended) {
        pd->st.fallback_ended++;
        finish_wait(t, false);
    } else {
        arm(t);
    }
}

/* ---- the prefill side: pushes ---- */

static void push_pump(struct pd_push *p);

static void push_free(struct pd_push *p)
{
    struct pd *pd = p->pd;
    if (p->prev) p->prev->next = p->next;
    else pd->pushes = p->next;
    if (p->next) p->next->prev = p->prev;
    pd->st.push_s += weft_server_now() - p->t0;
    if (p->req) weft_hcl_cancel(p->req);
    free(p->buf);
    free(p->auth);
    free(p->hashes);
    free(p);
}

/* The transfer is over (all sent, or failed): the push goes once its
 * request has ended too (that call still names it). */
static void notify(struct pd_push *p)
{
    void (*fn)(void *, bool) = p->on_end;
    p->on_end = NULL;
    if (fn) fn(p->end_user, p->ok);
}

static void push_end(struct pd_push *p, bool ok)
{
    if (p->closing) return;
    p->closing = true;
    p->ok = ok;
    if (ok) p->pd->st.pushes_done++;
    else p->pd->st.pushes_failed++;
    if (p->req_done) notify(p);
    if (p->req_done && !p->busy && !p->req) push_free(p);
}

static void push_work(void *arg)
{
    struct pd_push *p = arg;
    struct weft_server *s = p->pd->s;
    p->nb = 0;
    p->st = WEFT_OK;
    if (!s->eng || p->closing) {
        p->st = WEFT_ERR_INVALID_ARG;
        snprintf(p->msg, sizeof p->msg, "the server is closing");
        return;
    }
    if (!p->resolved && !p->target) {
        char *host = NULL, port[16];
        int portn = 0;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        if (!weft_hcl_parse_url(p->url, &host, &portn)) {
            p->st = WEFT_ERR_INVALID_ARG;
            snprintf(p->msg, sizeof p->msg, "bad push URL");
        } else {
            snprintf(port, sizeof port, "%d", portn);
            if (getaddrinfo(host, port, &hints, &res) != 0 || !res) {
                p->st = WEFT_ERR_IO;
                snprintf(p->msg, sizeof p->msg, "cannot resolve %s", host);
            } else {
                memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
                p->resolved = true;
            }
            if (res) freeaddrinfo(res);
        }
        free(host);
        if (p->st != WEFT_OK) return;
    }
    uint32_t held = weft_engine_kv_held(s->eng, p->hashes, p->n);
    if (held > p->sent) {
        /* a hybrid's decode side resumes from the state checkpoint of the prompt's last block */
        p->st = weft_engine_kv_export_hashes_ckpt(s->eng, p->hashes + p->sent, held - p->sent, p->hashes[p->n - 1],
                                                  &p->buf, &p->len, &p->nb);
        if (p->st != WEFT_OK) snprintf(p->msg, sizeof p->msg, "%s", weft_last_error());
    }
}

static struct pd_pool *pool_for(struct pd *pd, const char *url, const struct sockaddr *addr)
{
    for (uint32_t i = 0; i < pd->n_pools; i++)
        if (!strcmp(pd->pools[i].url, url)) return &pd->pools[i];
    if (pd->n_pools == MAX_POOLS) {
        /* the oldest target goes (its requests in flight end with HCL_E_CLOSED) */
        weft_hcl_pool_free(pd->pools[0].pool);
        memmove(pd->pools, pd->pools + 1, sizeof pd->pools[0] * (MAX_POOLS - 1));
        pd->n_pools--;
        for (struct pd_push *q = pd->pushes; q; q = q->next) q->target = NULL, q->resolved = false;
    }
    struct pd_pool *pl = &pd->pools[pd->n_pools];
    char *host = NULL;
    int port = 0;
    weft_hcl_parse_url(url, &host, &port);
    int rc = weft_hcl_pool_create(pd->s->loop, addr, host ? host : "", 4, 0, &pl->pool);
    free(host);
    if (rc != 0) return NULL;
    snprintf(pl->url, sizeof pl->url, "%s", url);
    pd->n_pools++;
    return pl;
}

static void post_head(void *u, int status, const struct http_header *h, uint32_t n)
{
    (void)h;
    (void)n;
    ((struct pd_push *)u)->status = status;
}

static void post_done(void *u, int err)
{
    struct pd_push *p = u;
    p->req = NULL;
    bool ok = err == 0 && p->status == 200;
    if (ok) {
        p->sent += p->nb;
        p->pd->st.blocks_out += p->nb;
        p->pd->st.bytes_out += p->len;
        p->pd->st.batches++;
    }
    free(p->buf);
    p->buf = NULL;
    p->len = p->nb = 0;
    if (p->closing) {
        if (p->req_done) push_free(p);
        return;
    }
    if (!ok || p->sent_end) {
        push_end(p, ok && p->sent == p->n);
        return;
    }
    push_pump(p);
}

static const struct hcl_callbacks post_cbs = {post_head, NULL, post_done};

/* POST what the worker exported (or, with end, the end marker) to the target. */
static void post(struct pd_push *p, const char *end)
{
    char hdrs[512];
    snprintf(hdrs, sizeof hdrs, "Content-Type: application/x-weft-kv-blocks\r\nx-weft-pd-id: %s\r\n%s%s%s%s", p->id,
             end ? "x-weft-pd-end: " : "", end ? end : "", end ? "\r\n" : "", p->auth ? p->auth : "");
    struct hcl_opts o = {.method = "POST", .path = "/v1/kv/blocks", .headers = hdrs, .body = (const char *)p->buf,
                         .body_len = p->len, .timeout_ms = p->pd->idle_ms};  /* past it the decode side gave up */
    p->status = 0;
    p->sent_end = end != NULL;
    if (!p->target || weft_hcl_request(p->target->pool, &o, &post_cbs, p, &p->req) != 0) {
        p->req = NULL;
        free(p->buf);
        p->buf = NULL;
        p->nb = 0;
        push_end(p, false);
    }
}

static void push_done(void *arg)
{
    struct pd_push *p = arg;
    p->busy = false;
    if (p->closing) {
        if (p->req_done) push_free(p);
        return;
    }
    if (p->st != WEFT_OK) {
        fprintf(stderr, "weft serve: PD push %s to %s: %s\n", p->id, p->url, p->msg);
        if (p->target) post(p, "failed");
        else push_end(p, false);
        return;
    }
    if (!p->target && p->resolved) p->target = pool_for(p->pd, p->url, (const struct sockaddr *)&p->addr);
    if (!p->target) {
        push_end(p, false);
        return;
    }
    if (p->nb) {
        /* the last batch carries the end marker */
        post(p, p->req_done && p->sent + p->nb == p->n ? "done" : NULL);
    } else if (p->req_done) {
        post(p, p->sent == p->n ? "done" : "failed");  /* nothing more will come */
    } else {
        free(p->buf);  /* a header alone */
        p->buf = NULL;
        p->len = 0;
    }
}

static void push_pump(struct pd_push *p)
{
    if (p->busy || p->req || p->closing) return;
    struct weft_server *s = p->pd->s;
    /* a worker only when there is something to send (every committed block of any request kicks) */
    if (p->resolved && !p->req_done && weft_engine_kv_held(s->eng, p->hashes, p->n) <= p->sent) return;
    p->busy = true;
    if (weft_workers_submit(s->workers, push_work, push_done, p) != WEFT_OK) {
        p->busy = false;
        push_end(p, false);
    }
}

struct pd_push *weft_server_pd_push_start(struct weft_server *s, const char *url, const char *id, const char *auth,
                                     const int32_t *prompt, uint32_t n)
{
    struct pd *pd = s->pd;
    struct pd_push *p = pd ? calloc(1, sizeof *p) : NULL;
    uint32_t nb = n ? (n - 1) / WEFT_KV_BLOCK_TOKENS : 0;  /* what the decode side's prefix match uses */
    if (!p) return NULL;
    p->hashes = malloc(sizeof *p->hashes * (nb ? nb : 1));
    p->auth = auth ? strdup(auth) : NULL;
    if (!p->hashes || (auth && !p->auth)) {
        free(p->hashes);
        free(p->auth);
        free(p);
        return NULL;
    }
    uint64_t h = 0;
    for (uint32_t i = 0; i < nb; i++) p->hashes[i] = h = weft_kv_block_hash(h, prompt + (size_t)i * WEFT_KV_BLOCK_TOKENS);
    p->pd = pd;
    p->n = nb;
    snprintf(p->id, sizeof p->id, "%s", id);
    snprintf(p->url, sizeof p->url, "%s", url);
    p->t0 = weft_server_now();
    for (uint32_t i = 0; i < pd->n_pools; i++)
        if (!strcmp(pd->pools[i].url, url)) p->target = &pd->pools[i], p->resolved = true;
    p->next = pd->pushes;
    if (pd->pushes) pd->pushes->prev = p;
    pd->pushes = p;
    pd->st.pushes++;
    push_pump(p);
    return p;
}

void weft_server_pd_push_request_done(struct weft_server *s, struct pd_push *p, void (*on_end)(void *user, bool ok),
                                 void *user)
{
    (void)s;
    if (!p) return;
    p->req_done = true;
    p->on_end = on_end;
    p->end_user = user;
    if (p->closing) {
        notify(p);
        if (!p->busy && !p->req) push_free(p);
        return;
    }
    push_pump(p);
}

void weft_server_pd_kick(struct weft_server *s)
{
    if (!s->pd) return;
    for (struct pd_push *p = s->pd->pushes, *next; p; p = next) {
        next = p->next;
        push_pump(p);
    }
}

void weft_server_pd_free(struct weft_server *s)
{
    free(s->pd);
    s->pd = NULL;
}

void weft_server_pd_close(struct weft_server *s)
{
    struct pd *pd = s->pd;
    if (!pd) return;
    while (pd->tickets) ticket_free(pd->tickets);
    for (struct pd_push *p = pd->pushes, *next; p; p = next) {
        next = p->next;
        if (p->req) weft_hcl_cancel(p->req);
        p->req = NULL;
        p->closing = p->req_done = true;
        notify(p);
        if (!p->busy) push_free(p);
    }
    for (uint32_t i = 0; i < pd->n_pools; i++) weft_hcl_pool_free(pd->pools[i].pool);
    pd->n_pools = 0;
}
