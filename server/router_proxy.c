/* weft router's requests (router.h): parse and tokenize on the worker pool,
 * decide (server/fleet.h), proxy to the chosen instance, stream the answer
 * back with backpressure, account for it at the end. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/params.h"
#include "server/router_internal.h"

#define STREAM_HIGH (1u << 20)     /* client bytes unsent before the upstream is paused */
#define STREAM_LOW (256u << 10)    /* ... and resumed */
#define TAIL 48                    /* bytes kept across chunks to find "cached_tokens" and "completion_tokens" */

const double router_lat_bounds[ROUTER_LAT_BUCKETS] = {0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075,
                                                      0.001,   0.0015, 0.002,  0.003,  0.005,  0.0075,
                                                      0.01,    0.025,  0.05,   0.1,    0.25,   1.0};

struct pxy {
    struct weft_router *r;
    struct http_conn *c;
    const struct http_request *req;   /* valid until the response ends */
    bool chat, routed;
    struct gen_params p;
    json_t *root;
    int32_t *ids;
    size_t n_ids;
    weft_status tok_status;
    char tok_msg[200];
    atomic_bool cancelled;
    int refs;                         /* the connection's, the job's */
    bool gone;                        /* the client left */
    struct fleet_decision d;
    bool decided;
    struct fleet_instance *target;    /* forwarded (not routed) requests */
    struct hcl_req *up;
    bool head_sent, sse;
    double t_arrival;
    char extra[640];
    char upstream_hdrs[1024];
    char tail[TAIL * 2 + 1];
    size_t tail_len;
    int64_t cached;                   /* last "cached_tokens" seen in the answer, -1 none */
};

static void pxy_unref(struct pxy *x)
{
    if (--x->refs > 0) return;
    gen_params_free(&x->p);
    json_decref(x->root);
    free(x->ids);
    free(x);
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
    http_respond_error(x->c, status, type, NULL, "%s", msg);
}

static void respond_json(struct weft_router *r, struct http_conn *c, int status, json_t *j)
{
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    status_count(r, b ? status : 500);
    if (!b) {
        http_respond_error(c, 500, "server_error", NULL, "out of memory");
        return;
    }
    http_respond(c, status, "application/json", NULL, b, strlen(b));
    free(b);
}

void router_observe_overhead(struct weft_router *r, double s)
{
    r->lat_count++;
    r->lat_sum += s;
    uint32_t k = 0;
    while (k < ROUTER_LAT_BUCKETS && s > router_lat_bounds[k]) k++;
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

static void up_head(void *u, int status, const struct http_header *h, uint32_t n)
{
    struct pxy *x = u;
    const char *ctype = "application/json";
    size_t len = strlen(x->extra);
    for (uint32_t i = 0; i < n; i++) {
        if (!strcmp(h[i].name, "content-type")) ctype = h[i].value;
        else if (!strcmp(h[i].name, "retry-after") || !strcmp(h[i].name, "cache-control") ||
                 !strcmp(h[i].name, "www-authenticate"))
            len += (size_t)snprintf(x->extra + len, sizeof x->extra > len ? sizeof x->extra - len : 0, "%s: %s\r\n",
                                    h[i].name, h[i].value);
    }
    if (len >= sizeof x->extra) x->extra[sizeof x->extra - 1] = 0;
    x->sse = strstr(ctype, "text/event-stream") != NULL;
    status_count(x->r, status);
    http_stream_begin(x->c, status, ctype, x->extra);
    x->head_sent = true;
    /* not the first token yet: weft serve starts a stream's head when the
     * request is queued, and its tokens count as queued here until the first
     * token comes (the next /load poll may not have them yet) */
}

static void on_writable(void *u)
{
    struct pxy *x = u;
    if (x->up) hcl_resume(x->up);
}

static void up_body(void *u, const char *d, size_t n)
{
    struct pxy *x = u;
    if (x->decided) fleet_first_token(&x->r->fleet, &x->d);
    if (x->routed) scan_usage(x, d, n);
    if (!http_stream_write(x->c, d, n)) return;  /* the client is gone: on_close follows */
    if (http_conn_pending(x->c) > STREAM_HIGH) {
        /* a slow client: stop reading upstream (the instance's own slow-reader
         * rule then applies to the router's connection) */
        hcl_pause(x->up);
        http_conn_on_writable(x->c, STREAM_LOW, on_writable, x);
    }
}

static void finish(struct pxy *x, bool failed)
{
    if (x->decided) {
        fleet_finished(&x->r->fleet, &x->d, failed ? -1 : x->cached, failed);
        x->decided = false;
    }
    if (x->target) {
        fleet_instance_unref(x->target);
        x->target = NULL;
    }
}

static void up_done(void *u, int err)
{
    struct pxy *x = u;
    x->up = NULL;
    const char *name = x->decided ? x->d.in->name : x->target ? x->target->name : "?";
    if (err) {
        x->r->upstream_errors++;
        const char *why = err == HCL_E_TIMEOUT ? "timed out" : err == HCL_E_PROTOCOL ? "sent no HTTP" : uv_strerror(err);
        if (!x->head_sent) {
            char msg[300];
            snprintf(msg, sizeof msg, "instance %s failed: %s", name, why);
            finish(x, true);
            http_conn_on_close(x->c, NULL, NULL);
            reply(x, 502, "server_error", "%s", msg);
            pxy_unref(x);
            return;
        }
        if (x->sse) {
            char body[400], ev[480];
            char msg[300];
            snprintf(msg, sizeof msg, "instance %s failed mid-answer: %s", name, why);
            http_error_body(body, sizeof body, "server_error", NULL, msg);
            int k = snprintf(ev, sizeof ev, "data: %s\n\n", body);
            http_stream_write(x->c, ev, (size_t)k);
        }
    }
    finish(x, err != 0);
    http_conn_on_close(x->c, NULL, NULL);
    http_stream_end(x->c);
    pxy_unref(x);
}

static const struct hcl_callbacks up_cbs = {up_head, up_body, up_done};

static void on_client_gone(void *u)
{
    struct pxy *x = u;
    x->gone = true;
    atomic_store(&x->cancelled, true);
    x->r->client_gone++;
    if (x->up) {
        hcl_cancel(x->up);  /* the instance sees its client leave and stops the work */
        x->up = NULL;
    }
    finish(x, false);
    pxy_unref(x);
}

static void forward(struct pxy *x, struct fleet_instance *in)
{
    struct weft_router *r = x->r;
    struct inst_io *io = router_io(in);
    const struct http_request *req = x->req;
    const char *ct = http_header_get(req, "content-type");
    size_t len = (size_t)snprintf(x->upstream_hdrs, sizeof x->upstream_hdrs, "Content-Type: %s\r\n",
                                  ct ? ct : "application/json");
    if (r->upstream_auth) {
        len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "%s", r->upstream_auth);
    } else {
        const char *a = http_header_get(req, "authorization");
        if (a && strlen(a) < 600) len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "Authorization: %s\r\n", a);
    }
    if (r->has_tenants) {
        bool anon;
        struct tenant_cfg *t = tenants_auth(&r->tenants, http_header_get(req, "authorization"), &anon);
        if (t) {
            len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "x-weft-tenant: %s\r\n", t->name);
            if (x->routed)
                len += (size_t)snprintf(x->upstream_hdrs + len, sizeof x->upstream_hdrs - len, "x-weft-priority: %d\r\n",
                                        tenant_priority(t, x->p.priority_given, x->p.priority));
        }
    }
    char path[600];
    snprintf(path, sizeof path, "%s%s%s", req->path, req->query[0] ? "?" : "", req->query);
    struct hcl_opts o = {.method = req->method_name, .path = path, .headers = x->upstream_hdrs, .body = req->body,
                         .body_len = req->body_len, .timeout_ms = r->cfg.timeout_ms};
    int rc = io ? hcl_request(io->pool, &o, &up_cbs, x, &x->up) : HCL_E_CLOSED;
    router_observe_overhead(r, router_now(r) - x->t_arrival);
    if (rc != 0) {
        x->up = NULL;
        r->upstream_errors++;
        finish(x, true);
        http_conn_on_close(x->c, NULL, NULL);
        reply(x, 502, "server_error", "instance %s cannot be reached", in->name);
        pxy_unref(x);
    }
}

/* ---- routing ---- */

static void route_and_forward(struct pxy *x)
{
    struct weft_router *r = x->r;
    uint32_t mt = x->p.max_tokens > 0 ? (uint32_t)(x->p.max_tokens < 1000000 ? x->p.max_tokens : 1000000) : 16;
    weft_status st = fleet_decide(&r->fleet, x->ids, x->n_ids, mt, router_now(r), &x->d);
    if (st != WEFT_OK) {
        r->rejected++;
        http_conn_on_close(x->c, NULL, NULL);
        status_count(r, 503);
        http_respond(x->c, 503, "application/json", "Retry-After: 1\r\n",
                     "{\"error\":{\"message\":\"no instance can take the request now\",\"type\":\"server_busy\","
                     "\"param\":null,\"code\":null}}",
                     strlen("{\"error\":{\"message\":\"no instance can take the request now\",\"type\":\"server_busy\","
                            "\"param\":null,\"code\":null}}"));
        pxy_unref(x);
        return;
    }
    x->decided = true;
    const struct fleet_decision *d = &x->d;
    int k = snprintf(x->extra, sizeof x->extra,
                     "x-weft-instance: %s\r\nx-weft-route: policy=%s; reason=%s; matched=%u; prompt=%u; "
                     "predicted_ttft_ms=%.3f; predicted_e2e_ms=%.3f",
                     d->in->name, weft_route_policy_name(r->fleet.cfg.policy), weft_route_reason_name(d->best.reason),
                     d->best.matched_tokens, d->n_prompt, d->best.predicted_ttft_s * 1e3, d->best.predicted_e2e_s * 1e3);
    if (d->runner_up && k > 0 && (size_t)k < sizeof x->extra)
        k += snprintf(x->extra + k, sizeof x->extra - (size_t)k, "; runner_up=%s; runner_up_ttft_ms=%.3f; runner_up_e2e_ms=%.3f",
                      d->runner_up->name, d->second.predicted_ttft_s * 1e3, d->second.predicted_e2e_s * 1e3);
    if (k > 0 && (size_t)k < sizeof x->extra - 3) snprintf(x->extra + k, sizeof x->extra - (size_t)k, "\r\n");
    forward(x, d->in);
}

static void tokenize_work(void *arg)
{
    struct pxy *x = arg;
    if (atomic_load(&x->cancelled)) return;
    x->tok_status = prompt_tokens(&x->r->cfg.rules, &x->p, &x->ids, &x->n_ids, x->tok_msg, sizeof x->tok_msg);
}

static void tokenize_done(void *arg)
{
    struct pxy *x = arg;
    x->r->tokenized++;
    if (x->gone) {
        pxy_unref(x);
        return;
    }
    x->refs--;  /* the job's; the connection's remains */
    if (x->tok_status != WEFT_OK) {
        http_conn_on_close(x->c, NULL, NULL);
        reply(x, 400, NULL, "%s", x->tok_msg);
        pxy_unref(x);
        return;
    }
    if (x->n_ids == 0) {
        http_conn_on_close(x->c, NULL, NULL);
        reply(x, 400, NULL, "%s", "the prompt is empty");
        pxy_unref(x);
        return;
    }
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
    x->t_arrival = router_now(r);
    return x;
}

static void generate(struct weft_router *r, struct http_conn *c, const struct http_request *req, bool chat)
{
    struct pxy *x = pxy_new(r, c, req);
    if (!x) {
        http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    x->chat = chat;
    x->routed = true;
    const char *param = NULL;
    char msg[300];
    if (json_depth_exceeds(req->body ? req->body : "", req->body_len, WEFT_MAX_JSON_DEPTH) ||
        !gen_params_parse(req->body ? req->body : "", req->body_len, chat, &x->p, &x->root, &param, msg, sizeof msg)) {
        if (json_depth_exceeds(req->body ? req->body : "", req->body_len, WEFT_MAX_JSON_DEPTH))
            snprintf(msg, sizeof msg, "the JSON body nests deeper than %d", WEFT_MAX_JSON_DEPTH);
        status_count(r, 400);
        http_respond_error(c, 400, NULL, param, "%s", msg);
        pxy_unref(x);
        return;
    }
    http_conn_on_close(c, on_client_gone, x);
    x->refs++;  /* the job's */
    if (weft_workers_submit(r->workers, tokenize_work, tokenize_done, x) != WEFT_OK) {
        x->refs--;
        http_conn_on_close(c, NULL, NULL);
        status_count(r, 503);
        http_respond(c, 503, "application/json", "Retry-After: 1\r\n",
                     "{\"error\":{\"message\":\"the router is busy\",\"type\":\"server_busy\",\"param\":null,\"code\":null}}",
                     strlen("{\"error\":{\"message\":\"the router is busy\",\"type\":\"server_busy\",\"param\":null,"
                            "\"code\":null}}"));
        pxy_unref(x);
    }
}

/* not routed by prefix: the least loaded usable instance */
static void forward_any(struct weft_router *r, struct http_conn *c, const struct http_request *req)
{
    struct fleet_instance *best = NULL;
    uint64_t best_load = UINT64_MAX;
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        struct fleet_instance *in = r->fleet.inst[i];
        if (!in->has_load || !in->healthy || in->load.draining) continue;
        uint64_t l = (uint64_t)in->own_running + in->load.running + in->load.waiting;
        if (l < best_load) best_load = l, best = in;
    }
    if (!best) {
        status_count(r, 503);
        http_respond_error(c, 503, "server_busy", NULL, "no instance is up");
        return;
    }
    struct pxy *x = pxy_new(r, c, req);
    if (!x) {
        http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    x->target = best;
    best->refs++;
    snprintf(x->extra, sizeof x->extra, "x-weft-instance: %s\r\n", best->name);
    http_conn_on_close(c, on_client_gone, x);
    forward(x, best);
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

static bool any_usable(const struct weft_router *r)
{
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        const struct fleet_instance *in = r->fleet.inst[i];
        if (in->has_load && in->healthy && !in->load.draining) return true;
    }
    return false;
}

void router_handle(void *ctx, struct http_conn *c, const struct http_request *req)
{
    struct weft_router *r = ctx;
    r->requests++;
    const char *p = req->path;
    if (!strcmp(p, "/health") && req->method == HTTP_M_GET) {
        respond_json(r, c, 200, json_pack("{s:s}", "status", "ok"));
        return;
    }
    if (!strcmp(p, "/ready") && req->method == HTTP_M_GET) {
        bool ok = !r->draining && any_usable(r);
        respond_json(r, c, ok ? 200 : 503, json_pack("{s:s}", "status", r->draining ? "draining" : ok ? "ready" : "no instance up"));
        return;
    }
    if (!strcmp(p, "/metrics") && req->method == HTTP_M_GET) {
        size_t len = 0;
        char *b = router_metrics_render(r, &len);
        status_count(r, b ? 200 : 503);
        if (!b) http_respond_error(c, 503, "server_error", NULL, "out of memory");
        else http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b, len);
        free(b);
        return;
    }
    /* the rest may need an API key (the router checks it; the instance trusts the router) */
    if (r->has_tenants) {
        bool anon;
        struct tenant_cfg *t = tenants_auth(&r->tenants, http_header_get(req, "authorization"), &anon);
        if (!t && !anon) {
            status_count(r, 401);
            http_respond(c, 401, "application/json", "WWW-Authenticate: Bearer\r\n",
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
    bool post = req->method == HTTP_M_POST;
    if (r->draining && post) {
        status_count(r, 503);
        http_respond_error(c, 503, "server_busy", NULL, "the router is shutting down");
        return;
    }
    if (post && (!strcmp(p, "/v1/completions") || !strcmp(p, "/v1/chat/completions"))) {
        generate(r, c, req, p[4] == 'c' && p[5] == 'h');
        return;
    }
    if (post && (!strcmp(p, "/tokenize") || !strcmp(p, "/detokenize"))) {
        forward_any(r, c, req);
        return;
    }
    status_count(r, 404);
    http_respond_error(c, 404, NULL, NULL, "no such endpoint: %s %s", req->method_name, p);
}
