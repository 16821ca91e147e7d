/* /v1/kv/blocks: KV blocks in and out of this instance, in format v3
 * (base/kv_block.h), for other instances (and the router) to move cached
 * prefixes around: GET ?hashes=H1,H2,... answers the held ones (stopping at
 * the first it does not hold) as one stream; POST takes a stream into the
 * prefix cache (both on the worker pool: block I/O waits for the engine to
 * be between two steps). A push may name a PD hand-off (x-weft-pd-id,
 * x-weft-pd-end: server/pd.h). Both need shared KV on (a fleet secret) and
 * a trusted caller (api.c): a block carries its tokens (another tenant's
 * prompt), and a pushed block is believed once its MAC shows a fleet member
 * made it (its name is checked, not the arithmetic that made its payload). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

#define KV_MAX_HASHES 4096
#define KV_CONTENT_TYPE "application/x-weft-kv-blocks"

static void kv_error(struct weft_server *s, struct http_conn *c, int status, const char *code, const char *msg)
{
    weft_metrics_request(&s->metrics, "/v1/kv/blocks", status);
    char *b = NULL;
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type",
                          status == 401 || status == 403 ? "authentication_error" : "invalid_request_error", "param",
                          "code", code);
    b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    weft_http_respond(c, status, "application/json", NULL, b ? b : "{}", b ? strlen(b) : 2);
    free(b);
}

/* "hashes=0123abcd...,..." -> up to KV_MAX_HASHES values; -1 on a bad list */
static int parse_hashes(const char *query, uint64_t *out, char *msg, size_t cap)
{
    const char *p = strstr(query, "hashes=");
    if (!p || (p != query && p[-1] != '&')) {
        snprintf(msg, cap, "GET /v1/kv/blocks needs ?hashes=H1,H2,... (16 hex digits each, a chain in order)");
        return -1;
    }
    p += 7;
    int n = 0;
    while (*p && *p != '&') {
        if (n == KV_MAX_HASHES) {
            snprintf(msg, cap, "at most %d hashes a request", KV_MAX_HASHES);
            return -1;
        }
        char *end;
        unsigned long long v = strtoull(p, &end, 16);
        if (end - p != 16 || v == 0 || (*end && *end != ',' && *end != '&')) {
            snprintf(msg, cap, "hash %d is not 16 hex digits", n);
            return -1;
        }
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0) snprintf(msg, cap, "no hashes given");
    return n ? n : -1;
}

/* A fetch, exported on a worker (the export waits for the engine to be
 * between two steps: never on the loop). */
struct kv_fetch {
    struct weft_server *s;
    struct http_conn *c;              /* NULL once the client left */
    uint64_t *hashes;
    uint32_t n, nb;
    unsigned char *buf;
    size_t len;
    weft_status st;
    char msg[300];
};

static void fetch_gone(void *user) { ((struct kv_fetch *)user)->c = NULL; }

static void fetch_work(void *arg)
{
    struct kv_fetch *f = arg;
    f->st = weft_engine_kv_export_hashes(f->s->eng, f->hashes, f->n, &f->buf, &f->len, &f->nb);
    if (f->st != WEFT_OK) snprintf(f->msg, sizeof f->msg, "%s", weft_last_error());
}

static void fetch_done(void *arg)
{
    struct kv_fetch *f = arg;
    struct http_conn *c = f->c;
    if (c) {
        weft_http_conn_on_close(c, NULL, NULL);
        if (f->st != WEFT_OK) {
            kv_error(f->s, c, 503, "server_error", f->msg);
        } else {
            char extra[96];
            snprintf(extra, sizeof extra, "X-Weft-Kv-Blocks: %u\r\nCache-Control: no-store\r\n", f->nb);
            weft_metrics_request(&f->s->metrics, "/v1/kv/blocks", 200);
            weft_http_respond(c, 200, KV_CONTENT_TYPE, extra, (const char *)f->buf, f->len);
        }
    }
    free(f->buf);
    free(f->hashes);
    free(f);
}

static void kv_get(struct weft_server *s, struct http_conn *c, const struct http_request *req)
{
    struct kv_fetch *f = calloc(1, sizeof *f);
    uint64_t *hashes = malloc(sizeof *hashes * KV_MAX_HASHES);
    char msg[160];
    if (!f || !hashes) {
        free(f);
        free(hashes);
        kv_error(s, c, 503, "server_error", "out of memory");
        return;
    }
    int n = parse_hashes(req->query, hashes, msg, sizeof msg);
    if (n < 0) {
        free(f);
        free(hashes);
        kv_error(s, c, 400, "invalid_hashes", msg);
        return;
    }
    *f = (struct kv_fetch){.s = s, .c = c, .hashes = hashes, .n = (uint32_t)n, .st = WEFT_OK};
    if (weft_workers_submit(s->workers, fetch_work, fetch_done, f) != WEFT_OK) {
        free(f);
        free(hashes);
        kv_error(s, c, 503, "server_busy", "too much work queued; retry");
        return;
    }
    weft_http_conn_on_close(c, fetch_gone, f);
}

/* A push, imported on a worker (the import waits for the engine to be
 * between two steps: never on the loop). */
struct kv_push {
    struct weft_server *s;
    struct http_conn *c;              /* NULL once the sender left */
    unsigned char *body;
    size_t len;
    char pd_id[PD_ID_MAX];            /* "" unless a PD hand-off's blocks */
    char end[8];                      /* its x-weft-pd-end, "" when none */
    struct weft_engine_kv_stats a, b;
    uint32_t added, n_pinned;
    uint64_t *pinned;
    weft_status st;
    char msg[300];
};

static void push_gone(void *user) { ((struct kv_push *)user)->c = NULL; }

static void push_work(void *arg)
{
    struct kv_push *k = arg;
    struct weft_engine *e = k->s->eng;
    weft_engine_kv_stats(e, &k->a);
    if (k->len == 0 && k->pd_id[0] && k->end[0]) {
        k->st = WEFT_OK;  /* an end marker alone */
    } else if (k->pd_id[0]) {
        k->st = weft_engine_kv_import_pinned(e, k->body, k->len, &k->added, &k->pinned, &k->n_pinned);
    } else {
        k->st = weft_engine_kv_import(e, k->body, k->len, &k->added);
    }
    if (k->st != WEFT_OK) snprintf(k->msg, sizeof k->msg, "%s", weft_last_error());
    weft_engine_kv_stats(e, &k->b);
}

static void push_done(void *arg)
{
    struct kv_push *k = arg;
    struct weft_server *s = k->s;
    struct http_conn *c = k->c;
    if (c) weft_http_conn_on_close(c, NULL, NULL);
    /* the blocks taken under a PD id belong to its ticket, sender gone or not */
    if (k->pd_id[0]) {
        bool failed = k->st != WEFT_OK && k->st != WEFT_ERR_NO_ROOM;
        weft_server_pd_arrived(s, k->pd_id, k->pinned, k->n_pinned, k->added, k->len,
                          k->end[0] ? k->end : failed ? "failed" : NULL);
        k->pinned = NULL;
    }
    weft_status st = k->st;
    if (!c) {
    } else if (st == WEFT_ERR_MISMATCH) {
        kv_error(s, c, 409, "kv_blocks_foreign", k->msg);
    } else if (st == WEFT_ERR_AUTH) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s (%u blocks before it were taken)", k->msg, k->added);
        kv_error(s, c, 403, "kv_blocks_unauthenticated", msg);
    } else if (st == WEFT_ERR_FORMAT) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s (%u blocks before it were taken)", k->msg, k->added);
        kv_error(s, c, 400, "kv_blocks_rejected", msg);
    } else if (st != WEFT_OK && st != WEFT_ERR_NO_ROOM) {
        kv_error(s, c, st == WEFT_ERR_UNSUPPORTED ? 400 : 503, "kv_blocks_not_taken", k->msg);
    } else {
        /* no room partway is not the sender's fault: what fitted is taken */
        weft_metrics_request(&s->metrics, "/v1/kv/blocks", 200);
        json_t *j = json_pack("{s:i,s:i,s:i,s:b}", "imported", (int)k->added, "already",
                              (int)(k->b.already - k->a.already), "converted", (int)(k->b.converted - k->a.converted),
                              "complete", st == WEFT_OK);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        weft_http_respond(c, 200, "application/json", NULL, body ? body : "{}", body ? strlen(body) : 2);
        free(body);
    }
    free(k->pinned);
    free(k->body);
    free(k);
}

static void kv_post(struct weft_server *s, struct http_conn *c, const struct http_request *req)
{
    struct kv_push *k = calloc(1, sizeof *k);
    const char *id = weft_http_header_get(req, "x-weft-pd-id"), *end = weft_http_header_get(req, "x-weft-pd-end");
    if (!k) {
        kv_error(s, c, 503, "server_error", "out of memory");
        return;
    }
    if (id) {
        uint32_t unused;
        char buf[PD_ID_MAX + 8];
        snprintf(buf, sizeof buf, "id=%.*s", PD_ID_MAX, id);
        if (!weft_server_pd_parse_wait(buf, k->pd_id, &unused)) {
            free(k);
            kv_error(s, c, 400, "invalid_pd_id", "x-weft-pd-id must be 1 to 63 of [0-9A-Za-z_-]");
            return;
        }
        if (end && strcmp(end, "done") && strcmp(end, "failed") && strcmp(end, "abort")) {
            free(k);
            kv_error(s, c, 400, "invalid_pd_end", "x-weft-pd-end must be done, failed or abort");
            return;
        }
        if (end) snprintf(k->end, sizeof k->end, "%s", end);
    }
    k->s = s;
    k->c = c;
    /* the body itself, not a copy: a push is held once (http.h's total bound counts it) */
    k->body = (unsigned char *)weft_http_conn_take_body(c, &k->len);
    if (weft_workers_submit(s->workers, push_work, push_done, k) != WEFT_OK) {
        free(k->body);
        free(k);
        kv_error(s, c, 503, "server_busy", "too much work queued; retry");
        return;
    }
    weft_http_conn_on_close(c, push_gone, k);
}

void weft_server_do_kv_blocks(struct weft_server *s, struct http_conn *c, const struct http_request *req,
                         const struct tenant_cfg *t)
{
    (void)t;  /* a fleet caller (api.c checked it) */
    if (req->method == HTTP_M_POST) kv_post(s, c, req);
    else kv_get(s, c, req);
}
