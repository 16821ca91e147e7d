/* weft router: lifecycle, instance polling, KV event subscriptions and DNS
 * discovery (router.h). Requests are router_proxy.c's. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/router_internal.h"

#define DEF_POLL_MS 200
#define DEF_DNS_MS 5000
#define MAX_LOAD_BODY (256u << 10)
#define MAX_INDEX_BODY (256u << 20)
#define MAX_EVENT_LINE (64u << 10)
#define MAX_HELD (1u << 18)

double weft_router_now(const struct weft_router *r) { return (double)uv_hrtime() * 1e-9 - r->t0; }

struct inst_io *weft_router_io(const struct fleet_instance *in) { return in->io; }

static bool buf_add(char **b, size_t *len, size_t *cap, const char *d, size_t n, size_t max)
{
    if (*len + n + 1 > max) return false;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1) c *= 2;
        char *nb = realloc(*b, c);
        if (!nb) return false;
        *b = nb;
        *cap = c;
    }
    memcpy(*b + *len, d, n);
    *len += n;
    (*b)[*len] = 0;
    return true;
}

/* ---- /load polling ---- */

/* head and body callbacks of a whole-answer request (user: a struct body_buf) */
static void collect_head(void *u, int status, const struct http_header *h, uint32_t n)
{
    (void)h;
    (void)n;
    ((struct body_buf *)u)->status = status;
}

static void collect_body(void *u, const char *d, size_t n)
{
    struct body_buf *b = u;
    if (!buf_add(&b->b, &b->len, &b->cap, d, n, b->max)) b->status = -1;
}

static void body_reset(struct body_buf *b, bool release)
{
    b->len = 0;
    b->status = 0;
    if (release) {
        free(b->b);
        b->b = NULL;
        b->cap = 0;
    }
}

static void poll_done(void *u, int err)
{
    struct inst_io *io = ((struct body_buf *)u)->io;
    struct weft_router *r = io->r;
    io->poll = NULL;
    struct fleet_load l;
    char msg[160];
    bool was = io->in->healthy;
    if (err == 0 && io->load.status == 200 &&
        weft_fleet_parse_load(io->load.b ? io->load.b : "", io->load.len, &l, msg, sizeof msg)) {
        if (!r->fingerprint[0] && l.fingerprint[0]) {
            snprintf(r->fingerprint, sizeof r->fingerprint, "%s", l.fingerprint);
            fprintf(stderr, "weft router: fleet model %s (fingerprint %s, from %s)\n", l.model, l.fingerprint,
                    io->in->name);
        }
        if (l.fingerprint[0] && strcmp(l.fingerprint, r->fingerprint) != 0) {
            /* another model: its blocks are not this fleet's; never routed to */
            if (!io->fp_warned)
                fprintf(stderr, "weft router: %s serves another model (fingerprint %s, the fleet's is %s); not used\n",
                        io->in->name, l.fingerprint, r->fingerprint);
            io->fp_warned = true;
            weft_fleet_poll_failed(io->in);
        } else {
            weft_fleet_apply_load(&r->fleet, io->in, &l, weft_router_now(r));
            weft_router_queue_kick(r);  /* it may have room now */
            if (!was) fprintf(stderr, "weft router: %s up (%s %s, %.0f prefill tok/s)\n", io->in->name, l.backend,
                              l.device, l.prefill_tps);
        }
    } else {
        weft_fleet_poll_failed(io->in);
        if (was || io->in->poll_failures == 1)
            fprintf(stderr, "weft router: %s did not answer /load (%s)\n", io->in->name,
                    err ? (err == HCL_E_TIMEOUT ? "timeout" : err == HCL_E_PROTOCOL ? "not HTTP" : uv_strerror(err))
                        : io->load.status == 200 ? msg : "bad status");
        if (io->events) {  /* what it holds is unknown until it is back */
            weft_hcl_cancel(io->events);
            io->events = NULL;
            weft_fleet_kv_unsynced(io->in);
        }
        /* a hung or dead instance: what it was answering moves elsewhere now */
        if (io->inflight) weft_router_instance_failed(r, io);
    }
    body_reset(&io->load, false);
}

static const struct hcl_callbacks poll_cbs = {collect_head, collect_body, poll_done};

static void upstream_headers(const struct weft_router *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", r->upstream_auth ? r->upstream_auth : "");
}

/* ---- KV events and index snapshots ---- */

static void snapshot_start(struct inst_io *io);

static void apply_event(struct inst_io *io, uint64_t seq, enum weft_kv_event_kind kind, uint64_t hash)
{
    if (io->snapshot) {  /* hold it until the snapshot is in */
        if (io->n_held == io->cap_held) {
            uint32_t c = io->cap_held ? io->cap_held * 2 : 1024;
            void *n = c <= MAX_HELD ? realloc(io->held, sizeof *io->held * c) : NULL;
            if (!n) {
                io->held_overflow = true;
                return;
            }
            io->held = n;
            io->cap_held = c;
        }
        io->held[io->n_held].seq = seq;
        io->held[io->n_held].hash = hash;
        io->held[io->n_held].kind = (uint8_t)kind;
        io->n_held++;
        return;
    }
    if (!weft_fleet_kv_event(io->in, seq, kind, hash)) snapshot_start(io);
}

static uint64_t hex64(const char *s)
{
    return s ? strtoull(s, NULL, 16) : 0;
}

static void event_line(struct inst_io *io, const char *data, size_t n)
{
    json_t *j = json_loadb(data, n, 0, NULL);
    if (!j) return;
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *sq = json_object_get(j, "seq");
    uint64_t seq = json_is_integer(sq) ? (uint64_t)json_integer_value(sq) : 0;
    if (type && !strcmp(type, "hello")) {
        if (!io->in->ev_synced && !io->snapshot) snapshot_start(io);
    } else if (type) {
        static const char *const kinds[] = {"stored", "removed", "checkpoint", "checkpoint_removed"};
        for (int k = 0; k < 4; k++)
            if (!strcmp(type, kinds[k]))
                apply_event(io, seq, (enum weft_kv_event_kind)(k + 1), hex64(json_string_value(json_object_get(j, "hash"))));
    }
    json_decref(j);
}

static void events_body(void *u, const char *d, size_t n)
{
    struct inst_io *io = u;
    if (!buf_add(&io->ebuf, &io->elen, &io->ecap, d, n, MAX_EVENT_LINE)) {
        io->elen = 0;  /* no event is this long: drop it and resync */
        weft_fleet_kv_unsynced(io->in);
        return;
    }
    size_t start = 0;
    for (;;) {
        char *e = strstr(io->ebuf + start, "\n\n");
        if (!e) break;
        /* one event: its data: line */
        size_t end = (size_t)(e - io->ebuf);
        for (size_t p = start; p < end;) {
            size_t q = p;
            while (q < end && io->ebuf[q] != '\n') q++;
            if (q - p > 6 && !strncmp(io->ebuf + p, "data: ", 6)) event_line(io, io->ebuf + p + 6, q - p - 6);
            p = q + 1;
        }
        start = end + 2;
    }
    memmove(io->ebuf, io->ebuf + start, io->elen - start + 1);
    io->elen -= start;
}

static void events_done(void *u, int err)
{
    struct inst_io *io = u;
    (void)err;
    io->events = NULL;
    io->elen = 0;
    weft_fleet_kv_unsynced(io->in);  /* reconnected from the next poll */
}

static const struct hcl_callbacks events_cbs = {NULL, events_body, events_done};

static void events_start(struct inst_io *io)
{
    char h[512];
    upstream_headers(io->r, h, sizeof h);
    struct hcl_opts o = {.method = "GET", .path = "/v1/kv/events", .headers = h, .timeout_ms = 0};
    if (weft_hcl_request(io->pool, &o, &events_cbs, io, &io->events) != 0) io->events = NULL;
}

static void snap_done(void *u, int err)
{
    struct inst_io *io = ((struct body_buf *)u)->io;
    io->snapshot = NULL;
    json_t *j = err == 0 && io->index.status == 200 ? json_loadb(io->index.b, io->index.len, 0, NULL) : NULL;
    json_t *blocks = json_object_get(j, "blocks");
    json_t *sq = json_object_get(j, "seq");
    bool ok = json_is_array(blocks) && json_is_integer(sq) && !io->held_overflow;
    if (ok) {
        weft_fleet_kv_snapshot_begin(io->in);
        size_t i;
        json_t *b;
        json_array_foreach(blocks, i, b) weft_fleet_kv_snapshot_block(io->in, hex64(json_string_value(json_array_get(b, 0))));
        json_array_foreach(json_object_get(j, "checkpoints"), i, b) weft_fleet_kv_snapshot_ckpt(io->in, hex64(json_string_value(b)));
        weft_fleet_kv_snapshot_end(io->in, (uint64_t)json_integer_value(sq));
        for (uint32_t k = 0; k < io->n_held && ok; k++)
            ok = weft_fleet_kv_event(io->in, io->held[k].seq, (enum weft_kv_event_kind)io->held[k].kind, io->held[k].hash);
    }
    json_decref(j);
    io->n_held = 0;
    io->held_overflow = false;
    body_reset(&io->index, true);  /* snapshots are rare and large: do not keep the buffer */
    if (!ok) weft_fleet_kv_unsynced(io->in);  /* the next hello or poll tries again */
}

static const struct hcl_callbacks snap_cbs = {collect_head, collect_body, snap_done};

static void snapshot_start(struct inst_io *io)
{
    if (io->snapshot) return;
    weft_fleet_kv_unsynced(io->in);
    io->n_held = 0;
    io->held_overflow = false;
    char h[512];
    upstream_headers(io->r, h, sizeof h);
    struct hcl_opts o = {.method = "GET", .path = "/v1/kv/index", .headers = h, .timeout_ms = 30000};
    body_reset(&io->index, false);
    if (weft_hcl_request(io->pool, &o, &snap_cbs, &io->index, &io->snapshot) != 0) io->snapshot = NULL;
}

/* ---- instances ---- */

static struct inst_io *io_create(struct weft_router *r, struct fleet_instance *in)
{
    char *host;
    int port;
    if (!weft_hcl_parse_url(in->url, &host, &port)) return NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);  /* once, at start or from discovery (numeric then) */
    struct inst_io *io = rc == 0 ? calloc(1, sizeof *io) : NULL;
    if (io) {
        io->r = r;
        io->in = in;
        io->load = (struct body_buf){.io = io, .max = MAX_LOAD_BODY};
        io->index = (struct body_buf){.io = io, .max = MAX_INDEX_BODY};
        if (weft_hcl_pool_create(r->loop, res->ai_addr, in->name, 32, 0, &io->pool) != 0) {
            free(io);
            io = NULL;
        }
    }
    if (rc != 0) weft_error(WEFT_ERR_INVALID_ARG, "router: cannot resolve %s: %s", host, gai_strerror(rc));
    if (res) freeaddrinfo(res);
    free(host);
    if (io) in->io = io;
    return io;
}

static void io_release(struct inst_io *io)
{
    if (io->poll) weft_hcl_cancel(io->poll);
    if (io->events) weft_hcl_cancel(io->events);
    if (io->snapshot) weft_hcl_cancel(io->snapshot);
    io->poll = io->events = io->snapshot = NULL;
}

static void io_free(struct inst_io *io)
{
    io_release(io);
    weft_hcl_pool_free(io->pool);
    io->in->io = NULL;
    free(io->load.b);
    free(io->index.b);
    free(io->ebuf);
    free(io->held);
    free(io);
}

static void reap_dead(struct weft_router *r, bool all)
{
    for (struct inst_io **p = &r->dead; *p;) {
        struct inst_io *io = *p;
        if (all || weft_hcl_pool_active(io->pool) == 0) {
            *p = io->next_dead;
            struct fleet_instance *in = io->in;
            io_free(io);
            weft_fleet_instance_unref(in);
        } else {
            p = &io->next_dead;
        }
    }
}

static void instance_drop(struct weft_router *r, struct fleet_instance *in)
{
    struct inst_io *io = in->io;
    fprintf(stderr, "weft router: %s left the fleet\n", in->name);
    in->refs++;  /* the dead list's, until its requests end */
    weft_fleet_remove(&r->fleet, in);
    io_release(io);
    io->next_dead = r->dead;
    r->dead = io;
}

static weft_status instance_add(struct weft_router *r, const char *url)
{
    struct fleet_instance *in;
    weft_status st = weft_fleet_add(&r->fleet, url, &in);
    if (st != WEFT_OK) return st;
    if (!io_create(r, in)) {
        weft_fleet_remove(&r->fleet, in);
        return WEFT_ERR_INVALID_ARG;
    }
    return WEFT_OK;
}

static void on_poll(uv_timer_t *t)
{
    struct weft_router *r = t->data;
    char h[512];
    upstream_headers(r, h, sizeof h);
    uint32_t timeout = r->cfg.poll_ms * 5 > 1000 ? r->cfg.poll_ms * 5 : 1000;
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        struct inst_io *io = r->fleet.inst[i]->io;
        if (!io) continue;
        if (!io->poll) {
            struct hcl_opts o = {.method = "GET", .path = "/load", .headers = h, .timeout_ms = timeout};
            body_reset(&io->load, false);
            if (weft_hcl_request(io->pool, &o, &poll_cbs, &io->load, &io->poll) != 0) {
                io->poll = NULL;
                weft_fleet_poll_failed(io->in);
            }
        }
        if (!r->cfg.no_kv_events && io->in->healthy && !io->events && !r->draining) events_start(io);
    }
    weft_router_queue_expire(r);
    weft_router_check_stalls(r);
    reap_dead(r, false);
}

/* ---- DNS discovery ---- */

static void dns_start(struct weft_router *r);

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    struct weft_router *r = g->data;
    r->gai_busy = false;
    if (r->stopped) {
        uv_freeaddrinfo(res);
        return;
    }
    if (status < 0) {
        /* keep what we have: a resolver hiccup is not a fleet change */
        fprintf(stderr, "weft router: resolving %s: %s (keeping %u instances)\n", r->dns_host, uv_strerror(status),
                r->fleet.n);
        return;
    }
    char urls[FLEET_MAX_INSTANCES][80];
    uint32_t n = 0;
    for (struct addrinfo *a = res; a && n < FLEET_MAX_INSTANCES; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN] = "";
        if (a->ai_family == AF_INET) uv_ip4_name((struct sockaddr_in *)a->ai_addr, ip, sizeof ip);
        else if (a->ai_family == AF_INET6) uv_ip6_name((struct sockaddr_in6 *)a->ai_addr, ip, sizeof ip);
        else continue;
        char u[80];
        snprintf(u, sizeof u, a->ai_family == AF_INET6 ? "http://[%s]:%d" : "http://%s:%d", ip, r->dns_port);
        bool dup = false;
        for (uint32_t k = 0; k < n; k++) dup |= !strcmp(urls[k], u);
        if (!dup) memcpy(urls[n++], u, sizeof u);
    }
    uv_freeaddrinfo(res);
    for (uint32_t i = 0; i < r->fleet.n;) {
        bool keep = false;
        for (uint32_t k = 0; k < n; k++) keep |= !strcmp(urls[k], r->fleet.inst[i]->url);
        if (!keep) instance_drop(r, r->fleet.inst[i]);
        else i++;
    }
    for (uint32_t k = 0; k < n; k++)
        if (!weft_fleet_find(&r->fleet, urls[k])) {
            if (instance_add(r, urls[k]) == WEFT_OK) fprintf(stderr, "weft router: %s joined (%s)\n", urls[k], r->dns_host);
        }
}

static void dns_start(struct weft_router *r)
{
    if (r->gai_busy || r->stopped) return;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char ps[16];
    snprintf(ps, sizeof ps, "%d", r->dns_port);
    r->gai.data = r;
    if (uv_getaddrinfo(r->loop, &r->gai, on_resolved, r->dns_host, ps, &hints) == 0) r->gai_busy = true;
}

static void on_dns_timer(uv_timer_t *t) { dns_start(t->data); }

/* ---- lifecycle ---- */

static void begin_drain(struct weft_router *r);

static void on_signal(uv_signal_t *s, int sig)
{
    (void)sig;
    weft_router_stop(s->data);
}

static void on_stop_async(uv_async_t *a)
{
    struct weft_router *r = a->data;
    int n = atomic_load(&r->stop_requests);
    if (n >= 2 && r->http) weft_http_server_close_soon(r->http, 1000);
    if (n >= 1) begin_drain(r);
}

static void on_drained(void *arg)
{
    struct weft_router *r = arg;
    r->stopped = true;
    uv_timer_stop(&r->poll_timer);
    uv_timer_stop(&r->dns_timer);
    for (uint32_t i = 0; i < r->fleet.n; i++)
        if (r->fleet.inst[i]->io) io_release(r->fleet.inst[i]->io);
    uv_close((uv_handle_t *)&r->poll_timer, NULL);
    uv_timer_stop(&r->pump_timer);
    uv_close((uv_handle_t *)&r->pump_timer, NULL);
    uv_close((uv_handle_t *)&r->dns_timer, NULL);
    uv_close((uv_handle_t *)&r->stop_async, NULL);
    if (r->cfg.handle_signals) {
        uv_close((uv_handle_t *)&r->sig_term, NULL);
        uv_close((uv_handle_t *)&r->sig_int, NULL);
    }
    weft_http_server_free(r->http);
    r->http = NULL;
    /* the pools and the workers go last: proxied requests are answered by now */
    for (uint32_t i = 0; i < r->fleet.n; i++)
        if (r->fleet.inst[i]->io) io_free(r->fleet.inst[i]->io);
    reap_dead(r, true);
    weft_workers_free(r->workers);
    r->workers = NULL;
}

static void begin_drain(struct weft_router *r)
{
    if (r->draining) return;
    r->draining = true;
    fprintf(stderr, "weft router: draining\n");
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        struct inst_io *io = r->fleet.inst[i]->io;
        if (io && io->events) {
            weft_hcl_cancel(io->events);
            io->events = NULL;
        }
    }
    weft_http_server_drain(r->http, on_drained, r);
}

weft_status weft_router_create(const struct weft_router_config *cfg, struct weft_router **out)
{
    *out = NULL;
    if (!cfg->rules.tok) return weft_error(WEFT_ERR_INVALID_ARG, "router: no tokenizer (give --model)");
    if (!cfg->n_instances && !cfg->dns) return weft_error(WEFT_ERR_INVALID_ARG, "router: no instances (--instance URL or --instances-dns NAME:PORT)");
    struct weft_router *r = calloc(1, sizeof *r);
    if (!r) return weft_error(WEFT_ERR_NOMEM, "router: out of memory");
    r->cfg = *cfg;
    if (!r->cfg.poll_ms) r->cfg.poll_ms = DEF_POLL_MS;
    if (!r->cfg.dns_interval_ms) r->cfg.dns_interval_ms = DEF_DNS_MS;
    if (!r->cfg.timeout_ms) r->cfg.timeout_ms = 600000;
    r->t0 = (double)uv_hrtime() * 1e-9;
    r->pd_epoch = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    r->loop = &r->own_loop;
    uv_loop_init(r->loop);
    char msg[256] = "";
    weft_status st = WEFT_OK;
    if (!weft_tenants_load(&r->tenants, cfg->tenants_path, msg, sizeof msg)) {
        st = weft_error(WEFT_ERR_INVALID_ARG, "router: bad --config: %s", msg);
        goto fail;
    }
    r->has_tenants = cfg->tenants_path != NULL;
    if (cfg->api_key) {
        if (!weft_tenants_add_shared_key(&r->tenants, cfg->api_key, msg, sizeof msg)) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "router: %s", msg);
            goto fail;
        }
        r->has_tenants = true;
    }
    const char *key = cfg->upstream_key;
    char cred[65];
    if (!key && cfg->kv_secret) {
        if (strlen(cfg->kv_secret) < 16 || !weft_fleet_credential(cfg->kv_secret, cred)) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "router: --kv-secret must have at least 16 characters");
            goto fail;
        }
        key = cred;
    }
    for (uint32_t i = 0; !key && i < r->tenants.n; i++)
        if (r->tenants.t[i].trusted && r->tenants.t[i].n_keys) key = r->tenants.t[i].keys[0];
    /* /v1/responses' stored responses: the latest 1024, at most 64 MiB of conversation */
    if (!(r->shapes = weft_shape_store_new(1024, (size_t)64 << 20))) {
        st = weft_error(WEFT_ERR_NOMEM, "router: out of memory");
        goto fail;
    }
    if (key) {
        size_t n = strlen(key) + 40;
        r->upstream_auth = malloc(n);
        if (r->upstream_auth) snprintf(r->upstream_auth, n, "Authorization: Bearer %s\r\n", key);
    }
    /* a hand-off is asked of instances in x-weft-pd headers, which they take
     * from a trusted caller only: without a credential for them, none */
    bool pd = !cfg->no_pd && r->upstream_auth;
    if (!cfg->no_pd && !r->upstream_auth)
        fprintf(stderr, "weft router: no credential the instances trust (--kv-secret or --upstream-key): "
                        "prefill/decode hand-offs are off\n");
    struct fleet_config fc = {.policy = cfg->policy, .stale_s = 10.0 * r->cfg.poll_ms / 1000.0 + 1.0,
                              .index_max_blocks = cfg->index_max_blocks,
                              .pd_min_uncached = !pd ? 0 : cfg->pd_threshold ? cfg->pd_threshold : 512,
                              .pd_slack = cfg->pd_slack};
    weft_fleet_init(&r->fleet, &fc);
    for (uint32_t i = 0; i < cfg->n_instances; i++)
        if ((st = instance_add(r, cfg->instances[i])) != WEFT_OK) goto fail;
    if (cfg->dns) {
        const char *colon = strrchr(cfg->dns, ':');
        if (!colon || colon == cfg->dns || atoi(colon + 1) <= 0 || atoi(colon + 1) > 65535) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "router: --instances-dns wants NAME:PORT, not '%s'", cfg->dns);
            goto fail;
        }
        r->dns_host = strndup(cfg->dns, (size_t)(colon - cfg->dns));
        r->dns_port = atoi(colon + 1);
    }
    st = weft_workers_create(r->loop, cfg->n_workers, cfg->max_queued_work ? cfg->max_queued_work : 256, &r->workers);
    if (st != WEFT_OK) goto fail;
    int rc = weft_http_server_start(r->loop, cfg->host, cfg->port, &cfg->http, weft_router_handle, r, &r->http);
    if (rc < 0) {
        st = weft_error(WEFT_ERR_IO, "router: cannot listen on %s:%d: %s", cfg->host ? cfg->host : "127.0.0.1",
                        cfg->port, uv_strerror(rc));
        goto fail;
    }
    uv_timer_init(r->loop, &r->poll_timer);
    r->poll_timer.data = r;
    uv_timer_init(r->loop, &r->pump_timer);
    r->pump_timer.data = r;
    uv_timer_start(&r->poll_timer, on_poll, 0, r->cfg.poll_ms);
    uv_timer_init(r->loop, &r->dns_timer);
    r->dns_timer.data = r;
    if (r->dns_host) uv_timer_start(&r->dns_timer, on_dns_timer, 0, r->cfg.dns_interval_ms);
    uv_async_init(r->loop, &r->stop_async, on_stop_async);
    r->stop_async.data = r;
    if (cfg->handle_signals) {
        uv_signal_init(r->loop, &r->sig_term);
        uv_signal_init(r->loop, &r->sig_int);
        r->sig_term.data = r->sig_int.data = r;
        uv_signal_start(&r->sig_term, on_signal, SIGTERM);
        uv_signal_start(&r->sig_int, on_signal, SIGINT);
    }
    *out = r;
    return WEFT_OK;
fail:
    if (r->workers) weft_workers_free(r->workers);
    for (uint32_t i = 0; i < r->fleet.n; i++)
        if (r->fleet.inst[i]->io) io_free(r->fleet.inst[i]->io);
    uv_run(r->loop, UV_RUN_DEFAULT);
    weft_fleet_free(&r->fleet);
    weft_tenants_free(&r->tenants);
    weft_shape_store_free(r->shapes);
    uv_loop_close(r->loop);
    free(r->upstream_auth);
    free(r->dns_host);
    free(r);
    return st;
}

int weft_router_port(const struct weft_router *r) { return r->http ? weft_http_server_port(r->http) : -1; }

weft_status weft_router_run(struct weft_router *r)
{
    uv_run(r->loop, UV_RUN_DEFAULT);
    return WEFT_OK;
}

void weft_router_stop(struct weft_router *r)
{
    atomic_fetch_add(&r->stop_requests, 1);
    uv_async_send(&r->stop_async);
}

void weft_router_free(struct weft_router *r)
{
    if (!r) return;
    if (!r->stopped && r->http) {
        /* not run (or not to the end): close everything now */
        r->draining = true;
        on_drained(r);
    }
    uv_run(r->loop, UV_RUN_DEFAULT);
    weft_fleet_free(&r->fleet);
    weft_tenants_free(&r->tenants);
    weft_shape_store_free(r->shapes);
    uv_loop_close(r->loop);
    free(r->upstream_auth);
    free(r->dns_host);
    free(r);
}
