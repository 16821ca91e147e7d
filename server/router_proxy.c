/* weft router's requests (router.h): parse and tokenize on the worker pool,
 * decide (server/fleet.h), proxy to the chosen instance, stream the answer
 * back with backpressure, account for it at the end. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/params.h"
#include "base/buf.h"
#include "server/router_internal.h"

#define STREAM_HIGH (1u << 20)     /* client bytes unsent before the upstream is paused */
#define STREAM_LOW (256u << 10)    /* ... and resumed */
#define MAX_EVENT (1u << 20)       /* an SSE event from an instance never longer (logprobs included) */
#define MAX_ANSWER ((size_t)64 << 20) /* a non-stream answer held for checking, at most */
#define STALL_STEPS 50             /* a stream silent for this many of its instance's steps has stalled */

const double weft_router_ttft_bounds[ROUTER_TTFT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                                                        1.0,   1.5,  2.0,   3.0,  5.0,   7.5, 10,  15,  20,  30};
const double weft_router_lat_bounds[ROUTER_LAT_BUCKETS] = {0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075,
                                                      0.001,   0.0015, 0.002,  0.003,  0.005,  0.0075,
                                                      0.01,    0.025,  0.05,   0.1,    0.25,   1.0};

/* Give back what the request reserved and did not use (looked up by name). */
static void refund(struct pxy *x)
{
    if (!x->charged) return;
    x->charged = false;
    struct tenant_cfg *t = weft_tenants_find(&x->r->tenants, x->tenant);
    if (!t) return;
    double unused;
    if (!x->delivered) unused = x->reserved;  /* nothing was generated for it */
    else if (x->generated >= 0) unused = x->reserved_max > x->generated ? (double)(x->reserved_max - x->generated) : 0;
    else unused = 0;  /* not known: keep it all (no overshoot) */
    if (unused > 0) weft_tenant_refund(t, weft_router_now(x->r), unused);
}

static void io_link(struct pxy *x, struct inst_io *io)
{
    x->on_io = io;
    x->io_prev = NULL;
    x->io_next = io->inflight;
    if (io->inflight) io->inflight->io_prev = x;
    io->inflight = x;
}

static void io_unlink(struct pxy *x)
{
    struct inst_io *io = x->on_io;
    if (!io) return;
    if (x->io_prev) x->io_prev->io_next = x->io_next;
    else io->inflight = x->io_next;
    if (x->io_next) x->io_next->io_prev = x->io_prev;
    x->on_io = NULL;
    x->io_prev = x->io_next = NULL;
}

static void pxy_unref(struct pxy *x)
{
    if (--x->refs > 0) return;
    refund(x);
    io_unlink(x);
    for (uint32_t i = 0; i < x->n_tried; i++) weft_fleet_instance_unref(x->tried[i]);
    weft_gen_params_free(&x->p);
    json_decref(x->root);
    weft_shape_ctx_free(x->sh);
    free(x->ids);
    free(x->gen);
    free(x->ev);
    free(x->body);
    free(x);
}

const char *weft_router_client_auth(const struct http_request *req, char *buf, size_t n)
{
    const char *a = weft_http_header_get(req, "authorization");
    const char *k = weft_http_header_get(req, "x-api-key");  /* Anthropic's SDK */
    if (a || !k || strlen(k) + 8 > n) return a;
    snprintf(buf, n, "Bearer %s", k);
    return buf;
}

static void status_count(struct weft_router *r, int status)
{
    int k = status >= 100 && status < 600 ? status / 100 - 1 : 5;
    r->by_status[k]++;
}

static void reply(struct pxy *x, int status, const char *type, const char *fmt, const char *arg)
{
    char msg[400];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    status_count(x->r, status);
    weft_http_respond_error(x->c, status, type, NULL, "%s", msg);
}

/* The worker pool's queue is full: 503, to come back in a second. */
static void reply_busy(struct weft_router *r, struct http_conn *c)
{
    static const char msg[] = "{\"error\":{\"message\":\"the router is busy\",\"type\":\"server_busy\",\"param\":null,"
                              "\"code\":null}}";
    status_count(r, 503);
    weft_http_respond(c, 503, "application/json", "Retry-After: 1\r\n", msg, sizeof msg - 1);
}

static void respond_json(struct weft_router *r, struct http_conn *c, int status, json_t *j)
{
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    status_count(r, b ? status : 500);
    if (!b) {
        weft_http_respond_error(c, 500, "server_error", NULL, "out of memory");
        return;
    }
    weft_http_respond(c, status, "application/json", NULL, b, strlen(b));
    free(b);
}

void weft_router_observe_overhead(struct weft_router *r, double s)
{
    r->lat_count++;
    r->lat_sum += s;
    uint32_t k = 0;
    while (k < ROUTER_LAT_BUCKETS && s > weft_router_lat_bounds[k]) k++;
    r->lat_hist[k]++;
}

/* ---- the answer ---- */

/* The last complete "key":N in b[0..len) (-1 none); digits that end at the
 * buffer's end may go on in the next chunk and do not count yet. */
static int64_t last_number(const char *b, size_t len, const char *key, size_t kl, int64_t prev)
{
    for (size_t i = 0; i + kl < len; i++) {
        if (b[i] != '"' || memcmp(b + i, key, kl) != 0) continue;
        size_t j = i + kl;
        int64_t v = 0;
        while (j < len && b[j] >= '0' && b[j] <= '9') v = v * 10 + (b[j++] - '0');
        if (j < len && j > i + kl) prev = v;
    }
    return prev;
}

static void scan_usage(struct pxy *x, const char *d, size_t n)
{
    /* "cached_tokens" and "completion_tokens" in what came so far (they may
     * straddle chunks: the tail carries over) */
    static const char k_cached[] = "\"cached_tokens\":", k_gen[] = "\"completion_tokens\":";
    char local[4096], *b = local;
    size_t len = x->tail_len + n;
    if (len > sizeof local && !(b = malloc(len))) return;
    memcpy(b, x->tail, x->tail_len);
    memcpy(b + x->tail_len, d, n);
    x->cached = last_number(b, len, k_cached, sizeof k_cached - 1, x->cached);
    x->d.generated = last_number(b, len, k_gen, sizeof k_gen - 1, x->d.generated);
    size_t keep = len < TAIL ? len : TAIL;
    memcpy(x->tail, b + len - keep, keep);
    x->tail_len = keep;
    if (b != local) free(b);
}

/* ---- the stream: the router's weft.ids come off each chunk ---- */

static void gen_add(struct pxy *x, int32_t id)
{
    if (x->n_gen == x->cap_gen) {
        int32_t *g = weft_grow32(x->gen, &x->cap_gen, (size_t)x->n_gen + 1, sizeof *g);
        if (!g) return;  /* then a move continues from fewer tokens (the client would see a repeat): rare */
        x->gen = g;
    }
    x->gen[x->n_gen++] = id;
}

static void observe_ttft(struct weft_router *r, double s)
{
    r->ttft_count++;
    r->ttft_sum += s;
    uint32_t k = 0;
    while (k < ROUTER_TTFT_BUCKETS && s > weft_router_ttft_bounds[k]) k++;
    r->ttft_hist[k]++;
}

/* The first token of an answer reached the client: the router's TTFT, and
 * its instance's (the dashboard's per-instance chart). */
static void first_content(struct pxy *x)
{
    double s = weft_router_now(x->r) - x->t_arrival;
    x->first_content = true;
    observe_ttft(x->r, s);
    if (x->decided) {
        x->d.in->ttft_count++;
        x->d.in->ttft_sum += s;
    }
}

static bool client_write(struct pxy *x, const char *d, size_t n);

/* One chat event ("data: {...}\n\n" or "data: [DONE]\n\n") to the client:
 * as it is, or as the events of the API the client asked in (x->sh). */
static void deliver(struct pxy *x, const char *e, size_t n)
{
    if (!x->sh) {
        client_write(x, e, n);
        return;
    }
    const char *pl = e + 6;
    size_t plen = n - 6;
    while (plen && (pl[plen - 1] == '\n' || pl[plen - 1] == '\r')) plen--;
    struct weft_strbuf b = {0};
    if (plen == 6 && !memcmp(pl, "[DONE]", 6)) {
        weft_shape_stream_end(x->sh, &b);
    } else {
        json_t *j = json_loadb(pl, plen, 0, NULL);
        if (j) weft_shape_stream_chunk(x->sh, j, &b);
        json_decref(j);
    }
    if (b.len) client_write(x, b.p, b.len);
    weft_sb_free(&b);
}

/* One whole event ("data: ...\n\n"): the weft member is cut off (its ids
 * kept), [DONE] and usage noted, an error event held back (the stream
 * moves instead); the rest goes to the client unchanged. */
static void stream_event(struct pxy *x, const char *e, size_t n)
{
    if (n < 8 || memcmp(e, "data: ", 6) != 0) {
        /* what else an SSE stream may hold: comments and fields weft does not use */
        if (e[0] != ':' && e[0] != '\n' && e[0] != '\r' && strncmp(e, "event:", 6) && strncmp(e, "id:", 3) &&
            strncmp(e, "retry:", 6)) {
            x->invalid = true;
            return;
        }
        client_write(x, e, n);
        return;
    }
    const char *pl = e + 6;
    size_t plen = n - 6;
    while (plen && (pl[plen - 1] == '\n' || pl[plen - 1] == '\r')) plen--;
    if (plen == 6 && !memcmp(pl, "[DONE]", 6)) {
        x->done_seen = true;
        deliver(x, e, n);
        return;
    }
    /* every other event is one JSON object: anything else is not forwarded */
    json_t *whole = json_loadb(pl, plen, 0, NULL);
    bool object = json_is_object(whole);
    json_decref(whole);
    if (!object) {
        x->invalid = true;
        return;
    }
    if (!x->ext) {
        if (x->routed) scan_usage(x, e, n);
        if (x->routed && !x->first_content) first_content(x);
        deliver(x, e, n);
        return;
    }
    if (plen > 9 && !memcmp(pl, "{\"error\"", 8)) {
        x->stream_error = true;  /* the instance gave up on it (shutdown, failure): move it */
        return;
    }
    static const char mark[] = ",\"weft\":{";
    const size_t ml = sizeof mark - 1;
    long at = -1;
    for (size_t i = plen >= ml + 1 ? plen - ml - 1 : 0; i-- > 0;)
        if (!memcmp(pl + i, mark, ml)) {
            at = (long)i;
            break;
        }
    if (at < 0 || pl[plen - 1] != '}') {
        deliver(x, e, n);
        return;
    }
    json_t *w = json_loadb(pl + at + 8, plen - (size_t)at - 9, 0, NULL);
    if (w) {
        json_t *ids = json_object_get(w, "ids"), *sd = json_object_get(w, "seed"), *v;
        size_t i;
        json_array_foreach(ids, i, v) gen_add(x, (int32_t)json_integer_value(v));
        if (x->decided) x->d.in->completion_tokens += json_array_size(ids);  /* as they stream, per instance */
        if (json_is_integer(sd)) {
            x->seed = (long long)json_integer_value(sd);
            x->seed_known = true;
        }
        json_decref(w);
    }
    if (!x->rid_known) {
        /* the chunk's first members: "id":"...", "object", "created":N */
        char buf[256];
        size_t k = (size_t)at < sizeof buf - 2 ? (size_t)at : sizeof buf - 2;
        memcpy(buf, pl, k);
        buf[k] = 0;
        const char *pid = strstr(buf, "\"id\":\""), *pc = strstr(buf, "\"created\":");
        if (pid && pc) {
            pid += 6;
            const char *q = strchr(pid, '"');
            if (q && (size_t)(q - pid) < sizeof x->rid) {
                memcpy(x->rid, pid, (size_t)(q - pid));
                x->rid[q - pid] = 0;
                x->created = strtoll(pc + 10, NULL, 10);
                x->rid_known = true;
            }
        }
    }
    char local[2048], *out = local;
    size_t olen = 6 + (size_t)at + 1 + 2;
    if (olen > sizeof local && !(out = malloc(olen))) return;
    memcpy(out, "data: ", 6);
    memcpy(out + 6, pl, (size_t)at);
    memcpy(out + 6 + at, "}\n\n", 3);
    if (x->routed) scan_usage(x, out, olen);
    if (!x->first_content && x->n_gen > 0) first_content(x);
    deliver(x, out, olen);
    if (out != local) free(out);
}

static void stream_feed(struct pxy *x, const char *d, size_t n)
{
    if (x->ev_len + n > x->ev_cap) {
        size_t c = x->ev_cap ? x->ev_cap * 2 : 4096;
        while (c < x->ev_len + n) c *= 2;
        char *b = realloc(x->ev, c);
        if (!b) return;
        x->ev = b;
        x->ev_cap = c;
    }
    memcpy(x->ev + x->ev_len, d, n);
    x->ev_len += n;
    size_t start = 0;
    /* from where the last search stopped: each byte is looked at once */
    for (size_t i = x->ev_scan > 1 ? x->ev_scan : 1; i < x->ev_len; i++)
        if (x->ev[i] == '\n' && x->ev[i - 1] == '\n') {
            stream_event(x, x->ev + start, i + 1 - start);
            start = i + 1;
            if (x->gone || x->invalid) return;
        }
    memmove(x->ev, x->ev + start, x->ev_len - start);
    x->ev_len -= start;
    x->ev_scan = x->ev_len;
    if (x->ev_len > MAX_EVENT) x->invalid = true;  /* an event that never ends */
}

/* ---- the answer ---- */

static bool can_move(const struct pxy *x)
{
    const struct router_limits { uint32_t retries, migrations; } l = {
        x->r->cfg.max_retries ? x->r->cfg.max_retries : 2, x->r->cfg.max_migrations ? x->r->cfg.max_migrations : 2};
    if (x->n_tried + 1 >= MAX_TRIED) return false;
    return x->head_sent ? x->ext && x->migrations < l.migrations : x->retries < l.retries;
}

static void up_head(void *u, int status, const struct http_header *h, uint32_t n)
{
    struct pxy *x = u;
    const char *ctype = "application/json";
    bool no_room = false, request_fault = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!strcmp(h[i].name, "content-type")) ctype = h[i].value;
        else if (!strcmp(h[i].name, "x-weft-reject") && !strcmp(h[i].value, "no_kv_room")) no_room = true;
        else if (!strcmp(h[i].name, "x-weft-fault") && !strcmp(h[i].value, "request")) request_fault = true;
        else if (!strcmp(h[i].name, "x-weft-seed") && x->ext) {
            x->seed = strtoll(h[i].value, NULL, 10);
            x->seed_known = true;
        }
    }
    /* a refusal or a failure before anything reached the client, or any
     * non-200 to a move: try another instance (the body is dropped). Not a
     * client error (4xx) nor a failure the instance says is the request's
     * own (X-Weft-Fault: request): another instance would answer the same,
     * and the instance is not at fault (up_done counts it as answered) */
    if (x->routed && ((status >= 500 && !request_fault) || (x->head_sent && status != 200)) && can_move(x)) {
        x->refused = true;
        x->refusal = no_room ? RETRY_NO_KV_ROOM : status == 503 ? RETRY_BUSY : RETRY_5XX;
        if (x->decided) {
            if (no_room) weft_router_scale_signal(x->r, x->d.in, SO_NO_KV_ROOM);
            else if (status == 503) weft_router_scale_signal(x->r, x->d.in, SO_BUSY);
        }
        return;
    }
    if (x->head_sent) return;  /* a move's answer: the client has its head */
    x->delivered = status == 200;
    x->t_last = weft_router_now(x->r);
    size_t len = strlen(x->extra);
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(h[i].name, "retry-after") || !strcmp(h[i].name, "cache-control") ||
            !strcmp(h[i].name, "www-authenticate") || !strcmp(h[i].name, "x-weft-fault") ||
            (!strcmp(h[i].name, "x-weft-seed") && !x->ext))
            len += (size_t)snprintf(x->extra + len, sizeof x->extra > len ? sizeof x->extra - len : 0, "%s: %s\r\n",
                                    h[i].name, h[i].value);
    if (len >= sizeof x->extra) x->extra[sizeof x->extra - 1] = 0;
    x->sse = strstr(ctype, "text/event-stream") != NULL;
    if (x->ext && !x->sse) x->ext = false;
    if (!x->sse) {
        /* a whole answer: held until it is known to be what it says (up_done) */
        x->buffered = true;
        x->up_status = status;
        snprintf(x->up_ctype, sizeof x->up_ctype, "%s", ctype);
        return;
    }
    status_count(x->r, status);
    weft_http_stream_begin(x->c, status, ctype, x->extra);
    x->head_sent = true;
    /* not the first token yet: weft serve starts a stream's head when the
     * request is queued, and its tokens count as queued here until the first
     * token comes (the next /load poll may not have them yet) */
}

static void on_writable(void *u)
{
    struct pxy *x = u;
    if (x->up) weft_hcl_resume(x->up);
}

static bool client_write(struct pxy *x, const char *d, size_t n)
{
    if (!weft_http_stream_write(x->c, d, n)) return false;  /* the client is gone: on_close follows */
    if (x->up && weft_http_conn_pending(x->c) > STREAM_HIGH) {
        /* a slow client: stop reading upstream (the instance's own slow-reader
         * rule then applies to the router's connection) */
        weft_hcl_pause(x->up);
        weft_http_conn_on_writable(x->c, STREAM_LOW, on_writable, x);
    }
    return true;
}

static void invalid_answer(struct pxy *x);

static void up_body(void *u, const char *d, size_t n)
{
    struct pxy *x = u;
    if (x->refused || x->invalid) return;
    x->t_last = weft_router_now(x->r);
    if (x->decided) weft_fleet_first_token(&x->r->fleet, &x->d);
    if (x->buffered) {
        if (x->body_len + n > MAX_ANSWER) {
            x->invalid = true;
        } else {
            if (x->body_len + n > x->body_cap) {
                size_t c = x->body_cap ? x->body_cap * 2 : 8192;
                while (c < x->body_len + n) c *= 2;
                char *b = realloc(x->body, c);
                if (!b) {
                    x->invalid = true;  /* not held whole: not forwarded (502) */
                    invalid_answer(x);
                    return;
                }
                x->body = b;
                x->body_cap = c;
            }
            memcpy(x->body + x->body_len, d, n);
            x->body_len += n;
        }
    } else if (x->sse) {
        stream_feed(x, d, n);  /* checked event by event */
    } else {
        client_write(x, d, n);
    }
    if (x->invalid) invalid_answer(x);
}

static void finish(struct pxy *x, bool failed)
{
    io_unlink(x);
    if (x->ext) x->generated = x->n_gen;
    else if (x->decided && x->d.generated > 0) x->generated = x->d.generated;
    /* a stream the router can move counted its tokens as they came (stream_event); the
     * others are known from their usage at the end */
    if (x->decided && !x->ext && x->d.generated > 0) x->d.in->completion_tokens += (uint64_t)x->d.generated;
    if (x->decided) {
        struct scale_class *c = weft_router_class(x->r, x->d.in);
        if (c && !failed) {
            double dur = weft_router_now(x->r) - x->t_dispatch;
            c->dur_mean = c->dur_mean > 0 ? c->dur_mean + 0.05 * (dur - c->dur_mean) : dur;
            x->r->dur_mean = x->r->dur_mean > 0 ? x->r->dur_mean + 0.05 * (dur - x->r->dur_mean) : dur;
        }
        weft_fleet_finished(&x->r->fleet, &x->d, failed ? -1 : x->cached, failed);
        x->decided = false;
        weft_router_queue_kick(x->r);  /* a slot may have freed */
    }
    if (x->target) {
        weft_fleet_instance_unref(x->target);
        x->target = NULL;
    }
}

static void route_and_forward(struct pxy *x);

/* End a stream that cannot go on, with an error event (no [DONE]). */
static void stream_fail(struct pxy *x, const char *msg)
{
    char body[480], ev[560];
    weft_http_error_body(body, sizeof body, "server_error", NULL, msg);
    int k = snprintf(ev, sizeof ev, "data: %s\n\n", body);
    if (x->sse && x->sh) {
        struct weft_strbuf b = {0};
        weft_shape_stream_error(x->sh, "server_error", msg, &b);
        if (b.len) weft_http_stream_write(x->c, b.p, b.len);
        weft_sb_free(&b);
    } else if (x->sse) {
        weft_http_stream_write(x->c, ev, (size_t)k);
    }
    finish(x, true);
    weft_http_conn_on_close(x->c, NULL, NULL);
    weft_http_stream_end(x->c);
    pxy_unref(x);
}

/* The current attempt failed (why: RETRY_* before the first byte, MIG_*
 * after): try the next instance, continuing the stream where it stood. */
static void move_on(struct pxy *x, bool health, int why, const char *what)
{
    struct weft_router *r = x->r;
    struct fleet_instance *in = x->decided ? x->d.in : NULL;
    if (in) {
        if (health) weft_fleet_request_result(in, false);  /* a capacity refusal says nothing of its health */
        in->refs++;
        x->tried[x->n_tried++] = in;
    }
    if (x->head_sent) {
        x->migrations++;
        r->migrations[why]++;
        fprintf(stderr, "weft router: moving a stream from %s after %u tokens (%s)\n", in ? in->name : "?", x->n_gen,
                what);
    } else {
        x->retries++;
        r->retries[why]++;
    }
    finish(x, true);
    x->refused = x->stream_error = x->done_seen = x->invalid = x->buffered = false;
    x->ev_len = x->ev_scan = 0;
    x->body_len = 0;
    x->tail_len = 0;
    x->cached = -1;
    route_and_forward(x);
}

static void up_done(void *u, int err)
{
    struct pxy *x = u;
    x->up = NULL;
    io_unlink(x);
    const char *name = x->decided ? x->d.in->name : x->target ? x->target->name : "?";
    const char *why = err == HCL_E_TIMEOUT ? "timed out" : err == HCL_E_PROTOCOL ? "sent no HTTP" : err ? uv_strerror(err) : "";
    if (x->refused) {
        move_on(x, x->refusal == RETRY_5XX, x->head_sent ? MIG_ERROR_EVENT : x->refusal, "refused");
        return;
    }
    if (err) x->r->upstream_errors++;
    if (err && !x->head_sent) {
        if (x->routed && can_move(x)) {
            move_on(x, true, RETRY_CONNECT, why);
            return;
        }
        char msg[300];
        snprintf(msg, sizeof msg, "instance %s failed: %s", name, why);
        if (x->decided) weft_fleet_request_result(x->d.in, false);
        finish(x, true);
        weft_http_conn_on_close(x->c, NULL, NULL);
        reply(x, 502, "server_error", "%s", msg);
        pxy_unref(x);
        return;
    }
    if (x->invalid) return;  /* invalid_answer ended it */
    if (x->buffered) {
        /* the whole answer is here: a JSON answer must be JSON (else it is
         * not forwarded: garbage inside a 200 is the instance's fault) */
        bool json = x->up_status == 200 && strstr(x->up_ctype, "json") != NULL;
        json_t *j = json ? json_loadb(x->body ? x->body : "", x->body_len, 0, NULL) : NULL;
        if (json && !j) {
            x->invalid = true;
            invalid_answer(x);
            return;
        }
        if (x->sh) {
            /* the answer in the client's API: the response object, or the error in its form */
            json_t *shaped = NULL;
            if (j) {
                shaped = weft_shape_response(x->sh, j);
            } else {
                json_t *ej = json_loadb(x->body ? x->body : "", x->body_len, 0, NULL), *e = json_object_get(ej, "error");
                const char *em = json_string_value(json_object_get(e, "message"));
                const char *et = json_string_value(json_object_get(e, "type"));
                shaped = weft_shape_error(x->shape, x->up_status, et ? et : "api_error",
                                          json_string_value(json_object_get(e, "param")),
                                          em ? em : "the instance's answer was not JSON");
                json_decref(ej);
            }
            char *text = shaped ? json_dumps(shaped, JSON_COMPACT) : NULL;
            json_decref(shaped);
            if (text) {
                free(x->body);
                x->body = text;
                x->body_len = x->body_cap = strlen(text);
                snprintf(x->up_ctype, sizeof x->up_ctype, "application/json");
            }
        }
        json_decref(j);
        if (x->routed) scan_usage(x, x->body ? x->body : "", x->body_len);
        if (x->decided) weft_fleet_request_result(x->d.in, true);
        finish(x, false);
        weft_http_conn_on_close(x->c, NULL, NULL);
        status_count(x->r, x->up_status);
        weft_http_respond(x->c, x->up_status, x->up_ctype, x->extra, x->body ? x->body : "", x->body_len);
        pxy_unref(x);
        return;
    }
    if (x->ext && (err || !x->done_seen)) {
        /* the stream broke after its first byte: continue it elsewhere */
        if (can_move(x)) {
            move_on(x, true, x->stream_error ? MIG_ERROR_EVENT : MIG_DIED, err ? why : x->stream_error ? "error event" : "closed");
            return;
        }
        char msg[300];
        x->r->migration_limit++;
        snprintf(msg, sizeof msg, "instance %s failed mid-answer (%s) and the stream was moved %u times already",
                 name, err ? why : "closed", x->migrations);
        if (x->decided) weft_fleet_request_result(x->d.in, false);
        stream_fail(x, msg);
        return;
    }
    if (err) {
        char msg[300];
        snprintf(msg, sizeof msg, "instance %s failed mid-answer: %s", name, why);
        if (x->decided) weft_fleet_request_result(x->d.in, false);
        if (x->sse) {
            stream_fail(x, msg);
            return;
        }
    } else if (x->decided) {
        weft_fleet_request_result(x->d.in, true);
    }
    finish(x, err != 0);
    weft_http_conn_on_close(x->c, NULL, NULL);
    weft_http_stream_end(x->c);
    pxy_unref(x);
}

static const struct hcl_callbacks up_cbs = {up_head, up_body, up_done};

/* The instance sent what no weft serve sends (x->invalid): a 200 whose JSON
 * does not parse, an event that is not JSON or never ends. Nothing more of
 * it goes to the client; it counts against the instance, and the request
 * moves (before its first byte, or a stream that can) or fails. */
static void invalid_answer(struct pxy *x)
{
    const char *name = x->decided ? x->d.in->name : x->target ? x->target->name : "?";
    x->r->invalid_answers++;
    fprintf(stderr, "weft router: %s sent an invalid answer (not forwarded)\n", name);
    if (x->up) {
        weft_hcl_cancel(x->up);
        x->up = NULL;
    }
    io_unlink(x);
    if (x->routed && can_move(x) && (!x->head_sent || x->ext)) {
        move_on(x, true, x->head_sent ? MIG_INVALID : RETRY_INVALID, "invalid answer");
        return;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "instance %s sent an invalid answer", name);
    if (x->decided) weft_fleet_request_result(x->d.in, false);
    if (x->head_sent) {
        stream_fail(x, msg);
        return;
    }
    finish(x, true);
    weft_http_conn_on_close(x->c, NULL, NULL);
    reply(x, 502, "server_error", "%s", msg);
    pxy_unref(x);
}

/* Streams whose instance has sent nothing for a measured multiple of its
 * step time (its one-sequence decode rate from /load), after their first
 * token: a stall the instance's health check does not see (it answers
 * /load). They move elsewhere, continuing where they stood. */
void weft_router_check_stalls(struct weft_router *r)
{
    double now = weft_router_now(r), floor_s = r->cfg.stall_ms ? r->cfg.stall_ms / 1000.0 : 10.0;
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        struct fleet_instance *in = r->fleet.inst[i];
        struct inst_io *io = in->io;
        if (!io) continue;
        double step = in->has_load && in->load.decode_row_tps > 0 ? 1.0 / in->load.decode_row_tps : 0;
        double limit = STALL_STEPS * step > floor_s ? STALL_STEPS * step : floor_s;
        for (struct pxy *x = io->inflight, *next; x; x = next) {
            next = x->io_next;
            if (!x->up || !x->head_sent || !x->sse || !x->first_content || now - x->t_last <= limit) continue;
            fprintf(stderr, "weft router: a stream on %s sent nothing for %.1f s (limit %.1f s)\n", in->name,
                    now - x->t_last, limit);
            weft_hcl_cancel(x->up);
            x->up = NULL;
            io_unlink(x);
            if (x->routed && x->ext && can_move(x)) {
                move_on(x, true, MIG_STALL, "stalled");
            } else {
                if (x->decided) weft_fleet_request_result(x->d.in, false);
                stream_fail(x, "the instance stopped sending this stream");
            }
        }
    }
}

void weft_router_instance_failed(struct weft_router *r, struct inst_io *io)
{
    (void)r;
    while (io->inflight) {
        struct pxy *x = io->inflight;
        io_unlink(x);
        if (x->up) {
            weft_hcl_cancel(x->up);
            x->up = NULL;
        }
        if (x->routed && can_move(x)) {
            move_on(x, true, x->head_sent ? MIG_HANG : RETRY_HANG, "its health check failed");
        } else if (x->head_sent) {
            char msg[200];
            snprintf(msg, sizeof msg, "instance %s stopped answering", io->in->name);
            stream_fail(x, msg);
        } else {
            finish(x, true);
            weft_http_conn_on_close(x->c, NULL, NULL);
            reply(x, 502, "server_error", "instance %s stopped answering", io->in->name);
            pxy_unref(x);
        }
    }
}

static void on_client_gone(void *u)
{
    struct pxy *x = u;
    x->gone = true;
    atomic_store(&x->cancelled, true);
    x->r->client_gone++;
    weft_router_queue_remove(x);
    if (x->up) {
        weft_hcl_cancel(x->up);  /* the instance sees its client leave and stops the work */
        x->up = NULL;
    }
    finish(x, false);
    pxy_unref(x);
}

/* The body sent upstream: the client's, or for a stream the router can
 * move, with weft.ids asked for, and once it has moved a continuation of
 * what the client already has (its token ids, completion id, created and
 * seed). NULL: send the client's body as it is. */
static char *upstream_body(struct pxy *x, size_t *len)
{
    if (!x->ext && x->clamp_max <= 0 && !x->sh) return NULL;
    if (x->clamp_max > 0) json_object_set_new(x->root, "max_tokens", json_integer(x->clamp_max));
    if (!x->ext) {
        char *b = json_dumps(x->root, JSON_COMPACT);
        *len = b ? strlen(b) : 0;
        return b;
    }
    json_t *w = json_pack("{s:b}", "ids", 1);
    bool cont = x->head_sent;
    if (cont) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < x->n_gen; i++) json_array_append_new(a, json_integer(x->gen[i]));
        json_object_set_new(w, "continue", a);
        if (x->rid_known) {
            json_object_set_new(w, "id", json_string(x->rid));
            json_object_set_new(w, "created", json_integer(x->created));
        }
        if (!x->p.seed_given && x->seed_known) json_object_set_new(x->root, "seed", json_integer(x->seed));
    }
    json_object_set_new(x->root, "weft", w);
    char *b = json_dumps(x->root, JSON_COMPACT);
    json_object_del(x->root, "weft");
    if (cont && !x->p.seed_given) json_object_del(x->root, "seed");
    *len = b ? strlen(b) : 0;
    return b;
}

static void forward(struct pxy *x, struct fleet_instance *in)
{
    struct weft_router *r = x->r;
    struct inst_io *io = weft_router_io(in);
    const struct http_request *req = x->req;
    const char *ct = weft_http_header_get(req, "content-type");
    size_t len = (size_t)snprintf(x->upstream_hdrs, sizeof x->upstream_hdrs, "Content-Type: %s\r\n",
                                  ct ? ct : "application/json");
    if (r->upstream_auth) {
        len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "%s", r->upstream_auth);
    } else {
        char ab[320];
        const char *a = weft_router_client_auth(req, ab, sizeof ab);
        if (a && strlen(a) < 600) len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "Authorization: %s\r\n", a);
    }
    /* the end tenant and its priority, as client_tenant decided them from the
     * client's key: never a header the client sent */
    if (x->has_tenant) {
        len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "x-weft-tenant: %s\r\n",
                                x->end_tenant);
        if (x->routed)
            len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "x-weft-priority: %d\r\n",
                                    x->prio);
    }
    if (x->decided && x->d.pd_in && in == x->d.in) {
        char pd[160];
        weft_router_pd_start(x, pd, sizeof pd);
        if (len + strlen(pd) < sizeof x->upstream_hdrs) len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "%s", pd);
    }
    char path[600];
    /* a translated API goes upstream as the chat it is */
    snprintf(path, sizeof path, "%s%s%s", x->sh ? "/v1/chat/completions" : req->path, req->query[0] ? "?" : "",
             req->query);
    size_t blen = 0;
    char *body = upstream_body(x, &blen);
    struct hcl_opts o = {.method = req->method_name, .path = path, .headers = x->upstream_hdrs,
                         .body = body ? body : req->body, .body_len = body ? blen : req->body_len,
                         .timeout_ms = r->cfg.timeout_ms};
    int rc = io ? weft_hcl_request(io->pool, &o, &up_cbs, x, &x->up) : HCL_E_CLOSED;
    free(body);
    if (x->n_tried == 0) weft_router_observe_overhead(r, weft_router_now(r) - x->t_arrival);
    x->t_dispatch = x->t_last = weft_router_now(r);  /* a moved stream's silence counts from here */
    if (rc != 0) {
        x->up = NULL;
        r->upstream_errors++;
        if (x->routed && can_move(x)) {
            move_on(x, true, x->head_sent ? MIG_DIED : RETRY_CONNECT, "cannot be reached");
            return;
        }
        if (x->head_sent) {
            stream_fail(x, "no instance could continue the stream");
            return;
        }
        finish(x, true);
        weft_http_conn_on_close(x->c, NULL, NULL);
        reply(x, 502, "server_error", "instance %s cannot be reached", in->name);
        pxy_unref(x);
        return;
    }
    io_link(x, io);
}

/* ---- routing ---- */

void weft_router_dispatch(struct pxy *x) { route_and_forward(x); }

void weft_router_reply_busy(struct pxy *x, const char *headers, const char *msg)
{
    char body[600];
    size_t bl = weft_http_error_body(body, sizeof body, "server_busy", NULL, msg);
    char hdr[600];
    snprintf(hdr, sizeof hdr, "%s%s", headers ? headers : "", x->rl_hdrs);
    weft_http_conn_on_close(x->c, NULL, NULL);
    status_count(x->r, 503);
    weft_http_respond(x->c, 503, "application/json", hdr, body, bl);
    pxy_unref(x);
}

static void route_and_forward(struct pxy *x)
{
    struct weft_router *r = x->r;
    if (!x->head_sent && x->n_tried == 0 && weft_router_queue_wants(r, x)) {
        weft_router_queue_add(x);  /* every instance is saturated: wait for room (or shed) */
        weft_router_queue_kick(r);
        return;
    }
    uint32_t mt = x->p.max_tokens > 0 ? (uint32_t)(x->p.max_tokens < 1000000 ? x->p.max_tokens : 1000000) : 16;
    mt *= (x->p.n ? x->p.n : 1) * x->p.n_prompts;  /* every choice decodes on the instance it goes to */
    weft_status st = weft_fleet_decide_except(&r->fleet, x->ids, x->n_ids, mt, weft_router_now(r), x->tried, x->n_tried, &x->d);
    if (st != WEFT_OK) {
        r->rejected++;
        if (x->n_tried) r->failover_exhausted++;
        weft_router_scale_signal(r, NULL, SO_NO_INSTANCE);
        if (x->head_sent) {
            stream_fail(x, "no other instance can continue the stream now");
            return;
        }
        weft_http_conn_on_close(x->c, NULL, NULL);
        status_count(r, 503);
        static const char msg[] = "{\"error\":{\"message\":\"no instance can take the request now\",\"type\":"
                                  "\"server_busy\",\"param\":null,\"code\":null}}";
        weft_http_respond(x->c, 503, "application/json", "Retry-After: 1\r\n", msg, sizeof msg - 1);
        pxy_unref(x);
        return;
    }
    x->decided = true;
    /* a prompt array is computed where it goes: no hand-off (it takes one prompt) */
    if (x->p.n_prompts > 1) weft_fleet_pd_finished(&r->fleet, &x->d, false);
    const struct fleet_decision *d = &x->d;
    if (!x->head_sent) {
        int k = snprintf(x->extra, sizeof x->extra,
                         "x-weft-instance: %s\r\nx-weft-route: policy=%s; reason=%s; matched=%u; prompt=%u; "
                         "predicted_ttft_ms=%.3f; predicted_e2e_ms=%.3f",
                         d->in->name, weft_route_policy_name(r->fleet.cfg.policy),
                         weft_route_reason_name(d->best.reason), d->best.matched_tokens, d->n_prompt,
                         d->best.predicted_ttft_s * 1e3, d->best.predicted_e2e_s * 1e3);
        if (d->runner_up && k > 0 && (size_t)k < sizeof x->extra)
            k += snprintf(x->extra + k, sizeof x->extra - (size_t)k,
                          "; runner_up=%s; runner_up_ttft_ms=%.3f; runner_up_e2e_ms=%.3f", d->runner_up->name,
                          d->second.predicted_ttft_s * 1e3, d->second.predicted_e2e_s * 1e3);
        if (d->pd_in && k > 0 && (size_t)k < sizeof x->extra)
            k += snprintf(x->extra + k, sizeof x->extra - (size_t)k, "; pd=%s; pd_predicted_ms=%.3f", d->pd_in->name,
                          d->pd.predicted_s * 1e3);
        if (k > 0 && (size_t)k < sizeof x->extra - 3) snprintf(x->extra + k, sizeof x->extra - (size_t)k, "\r\n");
        if (x->retries && k > 0 && (size_t)k < sizeof x->extra - 40)
            snprintf(x->extra + strlen(x->extra), sizeof x->extra - strlen(x->extra), "x-weft-retries: %u\r\n",
                     x->retries);
        if (strlen(x->extra) + strlen(x->rl_hdrs) < sizeof x->extra)
            memcpy(x->extra + strlen(x->extra), x->rl_hdrs, strlen(x->rl_hdrs) + 1);
    }
    forward(x, d->in);
}

static uint32_t fleet_n_ctx(const struct weft_router *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->fleet.n; i++)
        if (r->fleet.inst[i]->has_load && r->fleet.inst[i]->load.n_ctx > n) n = r->fleet.inst[i]->load.n_ctx;
    return n;
}

/* Who x is for, from the client's credentials only (once, before admit):
 * the tenant its key names, or anonymous. A trusted key (another weft
 * router, a gateway that authenticated its user) may name the end tenant in
 * x-weft-tenant or the Gateway API's x-gateway-inference-fairness-id; the
 * end tenant's own configuration here, when it has one, is what is charged
 * and caps the priority. Anyone else's identity headers are dropped and
 * counted: an anonymous client claiming a tenant is still anonymous. Sets
 * x->has_tenant, tenant, end_tenant, prio, qname; returns the tenant charged
 * (NULL: none). */
static struct tenant_cfg *client_tenant(struct pxy *x)
{
    struct weft_router *r = x->r;
    const struct http_request *req = x->req;
    const char *named = weft_http_header_get(req, "x-weft-tenant");
    if (!named) named = weft_http_header_get(req, "x-gateway-inference-fairness-id");
    bool anon = false;
    char ab[320];
    struct tenant_cfg *t =
        r->has_tenants ? weft_tenants_auth(&r->tenants, weft_router_client_auth(req, ab, sizeof ab), &anon) : NULL;
    x->has_tenant = t != NULL;
    x->tenant[0] = x->end_tenant[0] = x->qname[0] = 0;
    if (named && !(t && t->trusted)) {
        r->identity_dropped++;
        named = NULL;
    }
    if (named && !weft_tenant_name_valid(named)) named = NULL;
    if (t) {
        struct tenant_cfg *end = named ? weft_tenants_find(&r->tenants, named) : NULL;
        snprintf(x->end_tenant, sizeof x->end_tenant, "%s", named ? named : t->name);
        if (end) t = end;
        snprintf(x->tenant, sizeof x->tenant, "%s", t->name);
        snprintf(x->qname, sizeof x->qname, "%s", x->end_tenant);
    }
    x->prio = weft_tenant_priority(t, x->p.priority_given, x->p.priority);
    return t;
}

/* Take need tokens (and one request) from tenant t's buckets, fleet-wide,
 * before any instance sees x; a refusal is answered here (429 with when
 * its share will be there: a reservation, tenants.h; a request bigger than
 * the whole budget can never fit: refused at once, naming param). false when
 * refused (x released). */
static bool charge(struct pxy *x, struct tenant_cfg *t, double need, const char *why_big, const char *param)
{
    struct weft_router *r = x->r;
    if (!t) return true;
    double now = weft_router_now(r), ra = 0;
    if (!weft_tenant_admit(t, now, need, &ra)) {
        r->throttled[isinf(ra) ? THROTTLE_TOO_LARGE : THROTTLE_RATE]++;
        char hdr[512], msg[400];
        size_t n = 0;
        if (!isinf(ra)) n = (size_t)snprintf(hdr, sizeof hdr, "Retry-After: %d\r\n", (int)ceil(ra) > 0 ? (int)ceil(ra) : 1);
        weft_tenant_ratelimit_headers(t, now, hdr + n, sizeof hdr - n);
        if (isinf(ra))
            snprintf(msg, sizeof msg,
                     "this request needs %.0f tokens (%s), more than tenant '%s' may use in a whole minute "
                     "(tokens_per_minute %.0f): it can never be admitted; send fewer tokens",
                     need, why_big, t->name, t->tpm);
        else
            snprintf(msg, sizeof msg, "rate limit of tenant '%s' reached; retry in %.1f s", t->name, ra);
        char body[600];
        size_t bl = weft_http_error_body(body, sizeof body, "rate_limit_error", isinf(ra) ? param : NULL, msg);
        weft_http_conn_on_close(x->c, NULL, NULL);
        status_count(r, 429);
        weft_http_respond(x->c, 429, "application/json", hdr, body, bl);
        pxy_unref(x);
        return false;
    }
    r->admitted++;
    x->charged = t->tpm > 0;
    x->reserved = need;
    weft_tenant_ratelimit_headers(t, now, x->rl_hdrs, sizeof x->rl_hdrs);
    return true;
}

/* A generation's share: prompt + max_tokens reserved now (the unused part
 * comes back at the end, refund). */
static bool admit(struct pxy *x, struct tenant_cfg *t)
{
    if (!t) return true;
    int64_t mt = x->p.max_tokens;
    double nc = (x->p.n ? x->p.n : 1) * (double)x->p.n_prompts;  /* choices: each prompt once, max_tokens each */
    if (mt <= 0) {
        uint32_t ctx = fleet_n_ctx(x->r);
        mt = x->chat && ctx > x->n_ids ? (int64_t)(ctx - x->n_ids) : 16;
        /* the default fits the budget: never refused for it (as weft serve does) */
        if (t->tpm > 0 && (double)x->n_ids + nc <= t->tpm && (double)x->n_ids + (double)mt * nc > t->tpm) {
            mt = (int64_t)((t->tpm - (double)x->n_ids) / nc);
            x->clamp_max = mt;
        }
    }
    double need = (double)(x->n_ids + x->n_more) + (double)mt * nc;
    char why[120];
    snprintf(why, sizeof why, "%zu in the prompt + max_tokens %lld", x->n_ids + x->n_more, (long long)mt);
    if (!charge(x, t, need, why, "max_tokens")) return false;
    x->reserved_max = (uint32_t)((double)mt * nc);
    return true;
}

static void tokenize_work(void *arg)
{
    struct pxy *x = arg;
    if (atomic_load(&x->cancelled)) return;
    x->tok_status = weft_prompt_tokens(&x->r->cfg.rules, &x->p, &x->ids, &x->n_ids, NULL, x->tok_msg, sizeof x->tok_msg);
    /* a prompt array: routed by its first prompt, charged for all of them */
    for (uint32_t i = 1; x->tok_status == WEFT_OK && i < x->p.n_prompts; i++) {
        json_t *v = json_array_get(x->p.prompt_list, i);
        if (json_is_array(v)) {
            x->n_more += json_array_size(v);
            continue;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        struct gen_params q = x->p;
        q.prompt = json_string_value(v);
        q.prompt_ids = NULL;
        x->tok_status = weft_prompt_tokens(&x->r->cfg.rules, &q, &ids, &n, NULL, x->tok_msg, sizeof x->tok_msg);
        free(ids);
        x->n_more += n;
    }
}

/* A tokenizing job is back (loop): true when x goes on; false when it
 * ended here (its client left, or its input was refused: 400 naming param). */
static bool job_back(struct pxy *x, const char *param)
{
    x->r->tokenized++;
    if (x->gone) {
        pxy_unref(x);
        return false;
    }
    x->refs--;  /* the job's; the connection's remains */
    if (x->tok_status != WEFT_OK) {
        weft_http_conn_on_close(x->c, NULL, NULL);
        status_count(x->r, 400);
        weft_http_respond_error(x->c, 400, NULL, param, "%s", x->tok_msg);
        pxy_unref(x);
        return false;
    }
    return true;
}

static void tokenize_done(void *arg)
{
    struct pxy *x = arg;
    if (!job_back(x, NULL)) return;
    if (x->n_ids == 0) {
        weft_http_conn_on_close(x->c, NULL, NULL);
        reply(x, 400, NULL, "%s", "the prompt is empty");
        pxy_unref(x);
        return;
    }
    if (!admit(x, client_tenant(x))) return;
    route_and_forward(x);
}

static struct pxy *pxy_new(struct weft_router *r, struct http_conn *c, const struct http_request *req)
{
    struct pxy *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->r = r;
    x->c = c;
    x->req = req;
    x->refs = 1;
    x->cached = -1;
    x->generated = -1;
    x->t_arrival = weft_router_now(r);
    return x;
}

/* A 400 in the request's API. */
static void reply_400(struct pxy *x, const char *param, const char *msg)
{
    status_count(x->r, 400);
    if (x->shape == SHAPE_CHAT) {
        weft_http_respond_error(x->c, 400, NULL, param, "%s", msg);
        return;
    }
    json_t *e = weft_shape_error(x->shape, 400, "invalid_request_error", param, msg);
    char *b = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    if (b) weft_http_respond(x->c, 400, "application/json", NULL, b, strlen(b));
    else weft_http_respond_error(x->c, 500, "server_error", NULL, "out of memory");
    free(b);
}

static void generate(struct weft_router *r, struct http_conn *c, const struct http_request *req, bool chat,
                     enum api_shape shape)
{
    struct pxy *x = pxy_new(r, c, req);
    if (!x) {
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    x->chat = chat || shape != SHAPE_CHAT;
    chat = x->chat;
    x->shape = shape;
    x->routed = true;
    const char *param = NULL;
    char msg[300];
    const char *body = req->body ? req->body : "";
    size_t body_len = req->body_len;
    char *translated = NULL;
    if (weft_json_depth_exceeds(body, body_len, WEFT_MAX_JSON_DEPTH)) {
        snprintf(msg, sizeof msg, "the JSON body nests deeper than %d", WEFT_MAX_JSON_DEPTH);
        reply_400(x, NULL, msg);
        pxy_unref(x);
        return;
    }
    if (shape != SHAPE_CHAT) {
        /* another API: routed and forwarded as the chat it asks for */
        translated = weft_shape_translate(shape, body, body_len, r->shapes, &x->sh, &param, msg, sizeof msg);
        if (!translated) {
            reply_400(x, param, msg);
            pxy_unref(x);
            return;
        }
        body = translated;
        body_len = strlen(translated);
    }
    bool parsed = weft_gen_params_parse(body, body_len, chat, &x->p, &x->root, &param, msg, sizeof msg);
    free(translated);
    if (!parsed || (x->p.suffix && r->cfg.rules.fim_pre < 0)) {
        if (parsed) {
            param = "suffix";
            snprintf(msg, sizeof msg, "'suffix' needs a model with fill-in-the-middle tokens "
                                      "(tokenizer.ggml.fim_pre_token_id, <|fim_prefix|>, ...): this model has none");
        }
        reply_400(x, param, msg);
        pxy_unref(x);
        return;
    }
    /* a stream the router can move: unless the client uses the extension itself */
    x->ext = x->p.stream && !json_object_get(x->root, "weft") && x->p.n <= 1 && x->p.n_prompts <= 1;
    weft_http_conn_on_close(c, on_client_gone, x);
    x->refs++;  /* the job's */
    if (weft_workers_submit(r->workers, tokenize_work, tokenize_done, x) != WEFT_OK) {
        x->refs--;
        weft_http_conn_on_close(c, NULL, NULL);
        reply_busy(r, c);
        pxy_unref(x);
    }
}

/* not routed by prefix: the least loaded usable instance (NULL: none) */
static struct fleet_instance *least_loaded(struct weft_router *r)
{
    struct fleet_instance *best = NULL;
    uint64_t best_load = UINT64_MAX;
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        struct fleet_instance *in = r->fleet.inst[i];
        if (!in->has_load || !in->healthy || in->load.draining) continue;
        uint64_t l = (uint64_t)in->own_running + in->load.running + in->load.waiting;
        if (l < best_load) best_load = l, best = in;
    }
    return best;
}

/* Forward x (its tenant decided) to the least loaded instance. */
static void forward_to_any(struct pxy *x)
{
    struct fleet_instance *best = least_loaded(x->r);
    if (!best) {
        weft_http_conn_on_close(x->c, NULL, NULL);
        status_count(x->r, 503);
        weft_http_respond_error(x->c, 503, "server_busy", NULL, "no instance is up");
        pxy_unref(x);
        return;
    }
    x->target = best;
    best->refs++;
    snprintf(x->extra, sizeof x->extra, "x-weft-instance: %s\r\n%s", best->name, x->rl_hdrs);
    forward(x, best);
}

static void forward_any(struct weft_router *r, struct http_conn *c, const struct http_request *req)
{
    struct pxy *x = pxy_new(r, c, req);
    if (!x) {
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    client_tenant(x);  /* not charged: the instance computes nothing for it */
    weft_http_conn_on_close(c, on_client_gone, x);
    forward_to_any(x);
}

/* POST /v1/embeddings: its inputs' tokens are charged to the tenant as the
 * instance would count them (tokenized on the worker pool), then it goes
 * to the least loaded instance. */
static void embed_work(void *arg)
{
    struct pxy *x = arg;
    if (atomic_load(&x->cancelled)) return;
    uint64_t n = 0;
    x->tok_status = weft_prompt_embed_tokens(&x->r->cfg.rules, json_object_get(x->root, "input"), &n, x->tok_msg,
                                             sizeof x->tok_msg)
                        ? WEFT_OK
                        : WEFT_ERR_INVALID_ARG;
    x->n_ids = (size_t)n;
}

static void embed_done(void *arg)
{
    struct pxy *x = arg;
    if (!job_back(x, "input")) return;
    struct tenant_cfg *t = client_tenant(x);
    char why[64];
    snprintf(why, sizeof why, "%zu in the inputs", x->n_ids);
    if (!charge(x, t, (double)x->n_ids, why, "input")) return;
    forward_to_any(x);
}

static void embeddings(struct weft_router *r, struct http_conn *c, const struct http_request *req)
{
    struct pxy *x = pxy_new(r, c, req);
    if (!x) {
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    json_error_t je;
    const char *body = req->body ? req->body : "";
    if (weft_json_depth_exceeds(body, req->body_len, WEFT_MAX_JSON_DEPTH) ||
        !(x->root = json_loadb(body, req->body_len, 0, &je)) || !json_is_object(x->root)) {
        status_count(r, 400);
        weft_http_respond_error(c, 400, NULL, NULL, "the body must be a JSON object (nesting at most %d deep)",
                                WEFT_MAX_JSON_DEPTH);
        pxy_unref(x);
        return;
    }
    weft_http_conn_on_close(c, on_client_gone, x);
    x->refs++;  /* the job's */
    if (weft_workers_submit(r->workers, embed_work, embed_done, x) != WEFT_OK) {
        x->refs--;
        weft_http_conn_on_close(c, NULL, NULL);
        reply_busy(r, c);
        pxy_unref(x);
    }
}

static void models(struct weft_router *r, struct http_conn *c)
{
    json_t *data = json_array();
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        const struct fleet_instance *in = r->fleet.inst[i];
        if (!in->has_load || !in->load.model[0]) continue;
        bool dup = false;
        size_t k;
        json_t *m;
        json_array_foreach(data, k, m) dup |= !strcmp(json_string_value(json_object_get(m, "id")), in->load.model);
        if (!dup)
            json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", in->load.model, "object", "model",
                                                  "created", (json_int_t)0, "owned_by", "weft", "max_model_len",
                                                  (int)in->load.n_ctx));
    }
    respond_json(r, c, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* GET /v1/models/{id}: a model the fleet reports, else the question goes
 * to an instance (it knows its aliases; it answers 404 for a name it does
 * not serve). */
static void model(struct weft_router *r, struct http_conn *c, const struct http_request *req)
{
    const char *id = req->path + 11;
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        const struct fleet_instance *in = r->fleet.inst[i];
        if (!in->has_load || strcmp(in->load.model, id) != 0) continue;
        respond_json(r, c, 200, json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", in->load.model, "object", "model", "created",
                                          (json_int_t)0, "owned_by", "weft", "max_model_len", (int)in->load.n_ctx));
        return;
    }
    forward_any(r, c, req);
}

static bool any_usable(const struct weft_router *r)
{
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        const struct fleet_instance *in = r->fleet.inst[i];
        if (in->has_load && in->healthy && !in->load.draining) return true;
    }
    return false;
}

void weft_router_handle(void *ctx, struct http_conn *c, const struct http_request *req)
{
    struct weft_router *r = ctx;
    r->requests++;
    const char *p = req->path;
    if (!strcmp(p, "/health") && req->method == HTTP_M_GET) {
        respond_json(r, c, 200, json_pack("{s:s}", "status", "ok"));
        return;
    }
    if (!strcmp(p, "/ready") && req->method == HTTP_M_GET) {
        /* with --hold-empty-s the router takes requests with no instance up:
         * it holds them while an autoscaler brings one (scale from zero);
         * before the first instance is up (--hold-startup-s: weft fleet's
         * instances loading) it holds them too but is not ready yet */
        bool up = any_usable(r);
        if (up) r->ever_up = true;
        bool starting = !up && !r->ever_up && r->cfg.hold_startup_s > 0;
        bool ok = !r->draining && !starting && (up || r->cfg.hold_empty_s > 0);
        respond_json(r, c, ok ? 200 : 503,
                     json_pack("{s:s}", "status", r->draining ? "draining" : up ? "ready" : starting ? "starting"
                                                                             : ok ? "holding" : "no instance up"));
        return;
    }
    if (!strcmp(p, "/metrics") && req->method == HTTP_M_GET) {
        size_t len = 0;
        char *b = weft_router_metrics_render(r, &len);
        status_count(r, b ? 200 : 503);
        if (!b) weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        else weft_http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b, len);
        free(b);
        return;
    }
    if (req->method == HTTP_M_GET && (!strcmp(p, "/") || !strcmp(p, "/fleet"))) {
        /* the dashboard and its state: read-only, open as /metrics is */
        status_count(r, weft_router_dash_respond(r, c, p[1] == 0));
        return;
    }
    /* the rest may need an API key (the router checks it; the instance trusts the router) */
    if (r->has_tenants) {
        bool anon;
        char ab[320];
        struct tenant_cfg *t = weft_tenants_auth(&r->tenants, weft_router_client_auth(req, ab, sizeof ab), &anon);
        if (!t && !anon) {
            status_count(r, 401);
            weft_http_respond(c, 401, "application/json", "WWW-Authenticate: Bearer\r\n",
                         "{\"error\":{\"message\":\"missing or invalid API key\",\"type\":\"authentication_error\","
                         "\"param\":null,\"code\":\"invalid_api_key\"}}",
                         strlen("{\"error\":{\"message\":\"missing or invalid API key\",\"type\":\"authentication_error\","
                                "\"param\":null,\"code\":\"invalid_api_key\"}}"));
            return;
        }
    }
    if (!strcmp(p, "/v1/models") && req->method == HTTP_M_GET) {
        models(r, c);
        return;
    }
    if (!strncmp(p, "/v1/models/", 11) && p[11] && req->method == HTTP_M_GET) {
        model(r, c, req);
        return;
    }
    bool post = req->method == HTTP_M_POST;
    if (r->draining && post) {
        status_count(r, 503);
        weft_http_respond_error(c, 503, "server_busy", NULL, "the router is shutting down");
        return;
    }
    if (post && (!strcmp(p, "/v1/completions") || !strcmp(p, "/v1/chat/completions"))) {
        generate(r, c, req, p[4] == 'c' && p[5] == 'h', SHAPE_CHAT);
        return;
    }
    if (post && weft_shape_of_path(p) != SHAPE_CHAT) {
        generate(r, c, req, true, weft_shape_of_path(p));
        return;
    }
    if (post && !strcmp(p, "/v1/embeddings")) {
        embeddings(r, c, req);
        return;
    }
    if (post && (!strcmp(p, "/tokenize") || !strcmp(p, "/detokenize") || !strcmp(p, "/apply-template"))) {
        forward_any(r, c, req);
        return;
    }
    status_count(r, 404);
    weft_http_respond_error(c, 404, NULL, NULL, "no such endpoint: %s %s", req->method_name, p);
}
