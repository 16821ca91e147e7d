/* Routing and the small endpoints of `weft serve`: /health, /ready,
 * /metrics, /v1/models, /tokenize, /detokenize; authentication; the
 * generation endpoints are in api_gen.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>

#include "core/tokenizer.h"
#include "server/api_embed.h"
#include "server/dash.h"
#include "server/params.h"
#include "server/server.h"
#include "server/kv_fetch.h"
#include "server/kv_remote.h"

double weft_server_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void reply_json(struct weft_server *s, struct http_conn *c, const char *ep, int status, json_t *j)
{
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    weft_metrics_request(&s->metrics, ep, b ? status : 500);
    if (!b) {
        weft_http_respond_error(c, 500, "server_error", NULL, "out of memory");
        return;
    }
    weft_http_respond(c, status, "application/json", NULL, b, strlen(b));
    free(b);
}

static void reply_error(struct weft_server *s, struct http_conn *c, const char *ep, int status, const char *type,
                        const char *param, const char *msg)
{
    weft_metrics_request(&s->metrics, ep, status);
    weft_http_respond_error(c, status, type, param, "%s", msg);
}

static json_t *parse_body(struct weft_server *s, struct http_conn *c, const char *ep, const struct http_request *req)
{
    if (weft_json_depth_exceeds(req->body, req->body_len, WEFT_MAX_JSON_DEPTH)) {
        reply_error(s, c, ep, 400, "invalid_request_error", NULL, "JSON nested too deeply");
        return NULL;
    }
    json_error_t err;
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &err);
    if (!j || !json_is_object(j)) {
        char msg[256];
        snprintf(msg, sizeof msg, "the request body must be a JSON object%s%s", j ? "" : ": ", j ? "" : err.text);
        json_decref(j);
        reply_error(s, c, ep, 400, "invalid_request_error", NULL, msg);
        return NULL;
    }
    return j;
}

/* POST /tokenize: the tokenizing runs on the worker pool, like a
 * generation request's. */
struct tok_job {
    struct weft_server *s;
    struct http_conn *c;          /* NULL once the client left */
    atomic_bool gone;             /* the same, for the worker: skip the work */
    char *text;
    size_t len;
    bool add_special;
    bool chat;                    /* text is a chat request's body ({"messages": ...}): rendered as a chat is */
    const char *param;            /* the field a failure names */
    int32_t *ids;
    size_t n;
    weft_status st;
    char msg[256];
};

static void tok_job_gone(void *user)
{
    struct tok_job *j = user;
    j->c = NULL;
    atomic_store(&j->gone, true);
}

static void tok_job_work(void *arg)
{
    struct tok_job *j = arg;
    if (atomic_load(&j->gone)) return;
    if (pthread_equal(pthread_self(), j->s->loop_thread)) atomic_fetch_add(&j->s->tokenized_on_loop, 1);
    else atomic_fetch_add(&j->s->tokenized_on_worker, 1);
    if (j->chat) {
        /* the prompt a chat request with these messages (tools, chat_template_kwargs, ...) computes */
        struct gen_params p;
        json_t *root = NULL;
        const char *param = NULL;
        if (!weft_gen_params_parse(j->text, j->len, true, &p, &root, &param, j->msg, sizeof j->msg)) {
            j->st = WEFT_ERR_INVALID_ARG;
            j->param = param ? param : "messages";
        } else {
            j->st = weft_prompt_tokens(&j->s->rules, &p, &j->ids, &j->n, NULL, j->msg, sizeof j->msg);
            j->param = "messages";
        }
        weft_gen_params_free(&p);
        json_decref(root);
        return;
    }
    j->st = weft_tokenize(weft_model_tokenizer(j->s->m), j->text, j->len, j->add_special, true, &j->ids, &j->n);
    if (j->st != WEFT_OK) snprintf(j->msg, sizeof j->msg, "%s", weft_last_error());
}

static void tok_job_done(void *arg)
{
    struct tok_job *j = arg;
    struct weft_server *s = j->s;
    const char *ep = "/tokenize";
    if (j->c && j->st != WEFT_OK) {
        reply_error(s, j->c, ep, 400, "invalid_request_error", j->param ? j->param : "prompt", j->msg);
    } else if (j->c) {
        json_t *arr = json_array();
        for (size_t i = 0; i < j->n; i++) json_array_append_new(arr, json_integer(j->ids[i]));
        reply_json(s, j->c, ep, 200,
                   json_pack("{s:o,s:i,s:i}", "tokens", arr, "count", (int)j->n, "max_model_len", (int)s->n_ctx));
    }
    free(j->ids);
    free(j->text);
    free(j);
    if (--s->n_active == 0 && s->on_idle) s->on_idle(s);
}

static void do_tokenize(struct weft_server *s, struct http_conn *c, const struct http_request *req)
{
    const char *ep = "/tokenize";
    json_t *jb = parse_body(s, c, ep, req);
    if (!jb) return;
    json_t *pr = json_object_get(jb, "prompt"), *content = json_object_get(jb, "content");
    json_t *as = json_object_get(jb, "add_special");
    if (!pr) pr = content;
    bool chat = json_object_get(jb, "messages") != NULL;
    if (chat && (pr || as)) {
        json_decref(jb);
        reply_error(s, c, ep, 400, "invalid_request_error", "messages",
                    "give 'messages' (tokenized as a chat) or 'prompt', not both ('add_special' is the prompt's)");
        return;
    }
    if (chat) {
        /* the body itself is the chat request */
        pr = NULL;
    } else if (!json_is_string(pr) || (as && !json_is_boolean(as))) {
        json_decref(jb);
        reply_error(s, c, ep, 400, "invalid_request_error", "prompt",
                    "'prompt' must be a string ('add_special' a boolean)");
        return;
    }
    struct tok_job *j = calloc(1, sizeof *j);
    if (j) j->text = malloc(chat ? req->body_len + 1 : json_string_length(pr) + 1);
    if (!j || !j->text) {
        free(j);
        json_decref(jb);
        reply_error(s, c, ep, 503, "server_error", NULL, "out of memory");
        return;
    }
    j->s = s;
    j->c = c;
    j->chat = chat;
    if (chat) {
        j->len = req->body_len;
        memcpy(j->text, req->body, j->len);
        j->text[j->len] = 0;
    } else {
        j->len = json_string_length(pr);
        memcpy(j->text, json_string_value(pr), j->len + 1);
    }
    j->add_special = !as || json_is_true(as);
    json_decref(jb);
    if (weft_workers_submit(s->workers, tok_job_work, tok_job_done, j) != WEFT_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        free(j->text);
        free(j);
        weft_metrics_request(&s->metrics, ep, 503);
        weft_http_respond_error(c, 503, "server_busy", NULL, "%s", msg);
        return;
    }
    s->n_active++;
    weft_http_conn_on_close(c, tok_job_gone, j);
}

static void do_detokenize(struct weft_server *s, struct http_conn *c, const struct http_request *req)
{
    const char *ep = "/detokenize";
    json_t *j = parse_body(s, c, ep, req);
    if (!j) return;
    json_t *arr = json_object_get(j, "tokens");
    size_t n = json_array_size(arr);
    int32_t *ids = json_is_array(arr) ? malloc(sizeof(int32_t) * (n ? n : 1)) : NULL;
    bool ok = ids != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *v = json_array_get(arr, i);
        ok = json_is_integer(v) && json_integer_value(v) >= 0 &&
             json_integer_value(v) < weft_tokenizer_n_vocab(weft_model_tokenizer(s->m));
        if (ok) ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(j);
    if (!ok) {
        free(ids);
        reply_error(s, c, ep, 400, "invalid_request_error", "tokens",
                    "'tokens' must be an array of token ids within the vocabulary");
        return;
    }
    char *text = NULL;
    size_t len = 0;
    weft_status st = weft_detokenize(weft_model_tokenizer(s->m), ids, n, false, &text, &len);
    free(ids);
    if (st != WEFT_OK) {
        reply_error(s, c, ep, 503, "server_error", NULL, "out of memory");
        return;
    }
    reply_json(s, c, ep, 200, json_pack("{s:s%}", "prompt", text, len));
    free(text);
}

/* POST /apply-template: the prompt the model's Jinja chat template makes of
 * {messages, tools, chat_template_kwargs, add_generation_prompt}, as
 * llama-server answers it: {"prompt": text} */
static void do_apply_template(struct weft_server *s, struct http_conn *c, const struct http_request *req)
{
    const char *ep = "/apply-template";
    json_t *j = parse_body(s, c, ep, req);
    if (!j) return;
    char *text = NULL, msg[600];
    size_t n = 0;
    weft_status st = weft_chat_template_apply(&s->tmpl, j, &text, &n, msg, sizeof msg);
    json_decref(j);
    if (st != WEFT_OK) {
        reply_error(s, c, ep, st == WEFT_ERR_NOMEM ? 503 : 400, st == WEFT_ERR_NOMEM ? "server_error" : "invalid_request_error",
                    NULL, msg);
        return;
    }
    reply_json(s, c, ep, 200, json_pack("{s:s%}", "prompt", text, n));
    free(text);
}

static void do_metrics(struct weft_server *s, struct http_conn *c, const struct http_request *req)
{
    if (s->metrics_key) {
        const char *a = weft_http_header_get(req, "authorization");
        /* constant time over the key's length: no early exit on a matching prefix */
        size_t kl = strlen(s->metrics_key), al = a && !strncasecmp(a, "Bearer ", 7) ? strlen(a + 7) : 0;
        unsigned char d = al != kl;
        for (size_t i = 0; i < kl; i++) d |= (unsigned char)((i < al ? a[7 + i] : 0) ^ s->metrics_key[i]);
        bool ok = al && d == 0;
        if (!ok) {
            weft_metrics_request(&s->metrics, "/metrics", 401);
            weft_http_respond(c, 401, "application/json", "WWW-Authenticate: Bearer\r\n",
                         "{\"error\":{\"message\":\"/metrics needs the metrics key\",\"type\":\"authentication_error\","
                         "\"param\":null,\"code\":\"invalid_api_key\"}}",
                         strlen("{\"error\":{\"message\":\"/metrics needs the metrics key\",\"type\":"
                                "\"authentication_error\",\"param\":null,\"code\":\"invalid_api_key\"}}"));
            return;
        }
    }
    struct weft_engine_stats es;
    weft_engine_stats(s->eng, &es);
    weft_metrics_request(&s->metrics, "/metrics", 200);
    struct metrics_extra x = {
        .model_name = s->model_id, .vllm_compat = s->cfg.metrics_vllm,
        .out_now = weft_http_server_output_now(s->http), .out_peak = weft_http_server_output_peak(s->http),
        .conns = weft_http_server_n_conns(s->http), .stalled = weft_http_server_n_stalled(s->http),
        .tok_pending = weft_workers_pending(s->workers),
        .tok_worker = atomic_load(&s->tokenized_on_worker), .tok_loop = atomic_load(&s->tokenized_on_loop),
        .reloads_ok = s->reloads, .reloads_err = s->reload_failures,
        .mock_injected = s->cfg.engine.mock_prefill_tps > 0 ? s->mock_injected : NULL};
    x.grammar_compiles = atomic_load(&s->grammar_compiles);
    x.grammar_pending = weft_workers_pending(s->grammar_workers);
    struct http_big_budget big = weft_http_server_big_budget(s->http);
    x.kv_push_held = big.held;
    x.kv_push_refused = big.refused;
    struct weft_engine_kv_stats kvio;
    weft_engine_kv_stats(s->eng, &kvio);
    x.kvio = &kvio;
    struct pd_stats pd;
    weft_server_pd_stats(s, &pd);
    x.pd = &pd;
    x.eng = s->eng;
    struct weft_kv_remote_stats remote;
    struct kv_fetch_stats fetch;
    if (s->kv_remote) {
        weft_kv_remote_stats(s->kv_remote, &remote);
        weft_kv_fetch_stats(s->kv_fetch, &fetch);
        x.fetch = &fetch;
        x.remote = &remote;
    }
    size_t len = 0;
    char *b = weft_metrics_render(&s->metrics, &es, s->kv_bytes, s->weight_bytes, &x, &len);
    if (!b) {
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    weft_http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b, len);
    free(b);
}

const char *weft_server_model_name(const struct weft_server *s, const char *asked)
{
    if (!asked || !strcmp(asked, "default") || !strcmp(asked, s->model_id)) return s->model_id;
    for (uint32_t i = 0; i < s->cfg.n_model_aliases; i++)
        if (!strcmp(asked, s->cfg.model_aliases[i])) return s->cfg.model_aliases[i];
    return NULL;
}

static json_t *model_json(const struct weft_server *s, const char *id)
{
    /* chat_template: which one renders chats ("gguf", "file", "chatml" built in, "none") */
    json_t *model = json_pack("{s:s,s:s,s:I,s:s,s:i,s:s}", "id", id, "object", "model", "created",
                              (json_int_t)s->created, "owned_by", "weft", "max_model_len", (int)s->n_ctx,
                              "chat_template", s->tmpl.source);
    /* how replies are read back: the call format, the reasoning markers */
    if (model && s->tmpl.t) {
        const struct chat_format *f = &s->tmpl.fmt;
        json_object_set_new(model, "tool_call_format", json_string(weft_chat_calls_name(f->calls)));
        json_object_set_new(model, "reasoning_format",
                            json_string(f->think == CHAT_THINK_TAGS      ? f->think_open
                                        : f->think == CHAT_THINK_HARMONY ? "harmony"
                                                                         : "none"));
    }
    return model;
}

/* GET /v1/models: the model and its aliases */
static void do_models(struct weft_server *s, struct http_conn *c)
{
    json_t *data = json_array();
    json_array_append_new(data, model_json(s, s->model_id));
    for (uint32_t i = 0; i < s->cfg.n_model_aliases; i++)
        json_array_append_new(data, model_json(s, s->cfg.model_aliases[i]));
    reply_json(s, c, "/v1/models", 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* %XX-decode src into dst (cap bytes); false when malformed or too long. */
static bool pct_decode(const char *src, char *dst, size_t cap)
{
    size_t n = 0;
    for (const char *p = src; *p; p++) {
        if (n + 1 >= cap) return false;
        if (*p == '%') {
            int v = 0;
            for (int k = 1; k <= 2; k++) {
                char h = p[k];
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) return false;
                v = v * 16 + d;
            }
            if (v == 0) return false;
            dst[n++] = (char)v;
            p += 2;
        } else {
            dst[n++] = *p;
        }
    }
    dst[n] = 0;
    return n > 0;
}

/* GET /v1/models/{id} (OpenAI's "retrieve model"); an alias names itself */
static void do_model(struct weft_server *s, struct http_conn *c, const char *raw_id)
{
    const char *ep = "/v1/models/{id}";
    char id[256];
    const char *name = pct_decode(raw_id, id, sizeof id) ? weft_server_model_name(s, id) : NULL;
    if (name && !strcmp(id, "default")) name = NULL;  /* "default" is accepted in requests, not a model */
    if (!name) {
        weft_metrics_request(&s->metrics, ep, 404);
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist; this server serves '%s'", id, s->model_id);
        json_t *j = json_pack("{s:{s:s,s:s,s:s,s:s}}", "error", "message", msg, "type", "invalid_request_error",
                              "param", "model", "code", "model_not_found");
        char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (b) weft_http_respond(c, 404, "application/json", NULL, b, strlen(b));
        else weft_http_respond_error(c, 404, "invalid_request_error", "model", "no such model");
        free(b);
        return;
    }
    reply_json(s, c, ep, 200, model_json(s, name));
}

struct route {
    const char *path;
    enum http_method method;
    int id;
};

enum { R_DASH, R_HEALTH, R_READY, R_METRICS, R_LOAD, R_KV_EVENTS, R_KV_INDEX, R_KV_BLOCKS, R_KV_PUSH, R_MODELS, R_MODEL, R_TOKENIZE, R_DETOKENIZE, R_APPLY_TEMPLATE, R_COMPLETIONS, R_CHAT, R_RESPONSES, R_MESSAGES, R_EMBEDDINGS, R_TEST_PAUSE };

/* GET /v1/models/{id}: not in the table (its path has a parameter) */
static const struct route model_route = {"/v1/models/{id}", HTTP_M_GET, R_MODEL};

static const struct route routes[] = {
    {"/", HTTP_M_GET, R_DASH},  /* the dashboard (server/dash.h): it polls /load */
    {"/health", HTTP_M_GET, R_HEALTH},           {"/ready", HTTP_M_GET, R_READY},
    {"/metrics", HTTP_M_GET, R_METRICS},         {"/v1/models", HTTP_M_GET, R_MODELS},
    {"/load", HTTP_M_GET, R_LOAD},              {"/v1/kv/events", HTTP_M_GET, R_KV_EVENTS},
    {"/v1/kv/index", HTTP_M_GET, R_KV_INDEX},
    {"/v1/kv/blocks", HTTP_M_GET, R_KV_BLOCKS},   {"/v1/kv/blocks", HTTP_M_POST, R_KV_PUSH},
    {"/tokenize", HTTP_M_POST, R_TOKENIZE},      {"/detokenize", HTTP_M_POST, R_DETOKENIZE},
    {"/apply-template", HTTP_M_POST, R_APPLY_TEMPLATE},  /* llama-server's name */
    {"/v1/completions", HTTP_M_POST, R_COMPLETIONS}, {"/v1/chat/completions", HTTP_M_POST, R_CHAT},
    {"/v1/responses", HTTP_M_POST, R_RESPONSES},  /* OpenAI's Responses API, as a chat (server/shape.h) */
    {"/v1/messages", HTTP_M_POST, R_MESSAGES},    /* Anthropic's Messages API, as a chat */
    {"/v1/embeddings", HTTP_M_POST, R_EMBEDDINGS},  /* server/api_embed.c */
    {"/test/engine-pause", HTTP_M_POST, R_TEST_PAUSE},  /* --test-hooks only */
};

static void handle(struct weft_server *s, struct http_conn *c, const struct http_request *req, bool metrics_only)
{
    const struct route *r = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(req->path, routes[i].path) && (!r || routes[i].method == req->method)) r = &routes[i];
    if (!r && !strncmp(req->path, "/v1/models/", 11) && req->path[11]) r = &model_route;
    /* with its own listener, /metrics is served there only; that listener serves nothing else but probes */
    if (r && metrics_only && r->id != R_METRICS && r->id != R_HEALTH && r->id != R_READY && r->id != R_LOAD) r = NULL;
    if (r && !metrics_only && r->id == R_METRICS && s->cfg.metrics_port > 0) r = NULL;
    if (r && r->id == R_TEST_PAUSE && !s->cfg.test_hooks) r = NULL;
    /* past the per-client connection limit: only a trusted upstream (weft
     * router) goes on, and the probes (an orchestrator's health checks come
     * from one address too, beside whatever else it holds open): answered,
     * then closed as every over-limit connection is */
    bool probe = r && (r->id == R_HEALTH || r->id == R_READY);
    if (weft_http_conn_over_client_limit(c)) {
        bool anon0;
        struct tenant_cfg *t0 = weft_tenants_auth(&s->tenants, weft_http_header_get(req, "authorization"), &anon0);
        if (t0 && t0->trusted) {
            weft_http_conn_exempt(c);
        } else if (!probe) {
            char msg[200];
            snprintf(msg, sizeof msg, "too many connections from %s (at most %u per client address); reuse a "
                     "keep-alive connection", weft_http_conn_peer(c), s->cfg.http.max_conns_per_client ?
                     s->cfg.http.max_conns_per_client : 64);
            s->metrics.rejected_conns++;
            reply_error(s, c, r ? r->path : "other", 429, "rate_limit_error", NULL, msg);
            return;
        }
    }
    if (!r) {
        char msg[160];
        snprintf(msg, sizeof msg, "no such endpoint: %.100s", req->path);
        reply_error(s, c, "other", 404, "not_found_error", NULL, msg);
        return;
    }
    bool head_ok = r->method == HTTP_M_GET && req->method == HTTP_M_HEAD;
    if (req->method != r->method && !head_ok) {
        char msg[160], allow[64];
        snprintf(msg, sizeof msg, "%s does not allow %.16s", r->path, req->method_name);
        snprintf(allow, sizeof allow, "Allow: %s\r\n", r->method == HTTP_M_GET ? "GET, HEAD" : "POST");
        weft_metrics_request(&s->metrics, r->path, 405);
        char body[256];
        json_t *j = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", msg, "type", "invalid_request_error",
                              "param", "code");
        char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        snprintf(body, sizeof body, "%s", b ? b : "{}");
        free(b);
        weft_http_respond(c, 405, "application/json", allow, body, strlen(body));
        return;
    }
    switch (r->id) {
    case R_HEALTH: {
        struct weft_engine_stats es;
        weft_engine_stats(s->eng, &es);
        bool stalled = weft_server_stalled(s, &es);
        json_t *j = json_pack("{s:s}", "status", stalled ? "stalled" : "ok");
        if (stalled && j) json_object_set_new(j, "stalled_seconds", json_real(es.stalled_s));
        /* a dependency in trouble shows, without making the instance unhealthy: it recomputes */
        if (s->kv_remote && j) {
            struct weft_kv_remote_stats rs;
            struct kv_fetch_stats fs;
            weft_kv_remote_stats(s->kv_remote, &rs);
            weft_kv_fetch_stats(s->kv_fetch, &fs);
            json_object_set_new(j, "kv_remote", json_string(fs.stalled ? "stalled" : rs.up ? "up" : "down"));
        }
        reply_json(s, c, r->path, stalled ? 503 : 200, j);
        return;
    }
    case R_READY: {
        struct weft_engine_stats es;
        weft_engine_stats(s->eng, &es);
        bool ready = !s->draining && es.waiting < s->max_waiting;
        reply_json(s, c, r->path, ready ? 200 : 503,
                   json_pack("{s:s,s:i,s:i}", "status", s->draining ? "draining" : ready ? "ready" : "overloaded",
                             "running", (int)es.running, "waiting", (int)es.waiting));
        return;
    }
    case R_METRICS: do_metrics(s, c, req); return;
    case R_LOAD: weft_server_do_load(s, c); return;
    case R_DASH:
        weft_metrics_request(&s->metrics, r->path, 200);
        weft_http_respond(c, 200, "text/html; charset=utf-8", DASH_PAGE_HEADERS, weft_dash_serve_html, weft_dash_serve_html_len);
        return;
    default: break;
    }
    /* the rest may need an API key */
    bool anon;
    /* Anthropic's SDK sends its key as x-api-key */
    const char *auth = weft_http_header_get(req, "authorization");
    char xkey[320];
    const char *xk = weft_http_header_get(req, "x-api-key");
    if (!auth && xk && strlen(xk) < sizeof xkey - 8) {
        snprintf(xkey, sizeof xkey, "Bearer %s", xk);
        auth = xkey;
    }
    struct tenant_cfg *t = weft_tenants_auth(&s->tenants, auth, &anon);
    if (!t && !anon) {
        s->metrics.rejected_auth++;
        weft_metrics_request(&s->metrics, r->path, 401);
        weft_http_respond(c, 401, "application/json", "WWW-Authenticate: Bearer\r\n",
                     "{\"error\":{\"message\":\"missing or invalid API key\",\"type\":\"authentication_error\","
                     "\"param\":null,\"code\":\"invalid_api_key\"}}",
                     strlen("{\"error\":{\"message\":\"missing or invalid API key\",\"type\":\"authentication_error\","
                            "\"param\":null,\"code\":\"invalid_api_key\"}}"));
        return;
    }
    /* the fleet's surfaces: prefixes other users cached, blocks in and out */
    if (r->id == R_KV_EVENTS || r->id == R_KV_INDEX || r->id == R_KV_BLOCKS || r->id == R_KV_PUSH) {
        const char *why = NULL;
        if (!weft_server_fleet_caller(s, t, &why)) {
            weft_metrics_request(&s->metrics, r->path, 403);
            char body[600];
            size_t n = weft_http_error_body(body, sizeof body, "authentication_error", NULL, why);
            weft_http_respond(c, 403, "application/json", NULL, body, n);
            return;
        }
    }
    switch (r->id) {
    case R_KV_EVENTS: weft_server_do_kv_events(s, c); return;
    case R_KV_INDEX: weft_server_do_kv_index(s, c); return;
    case R_MODELS: do_models(s, c); return;
    case R_MODEL: do_model(s, c, req->path + 11); return;
    case R_TOKENIZE: do_tokenize(s, c, req); return;
    case R_KV_BLOCKS:
    case R_KV_PUSH: weft_server_do_kv_blocks(s, c, req, t); return;
    case R_DETOKENIZE: do_detokenize(s, c, req); return;
    case R_APPLY_TEMPLATE: do_apply_template(s, c, req); return;
    case R_COMPLETIONS:
    case R_CHAT:
    case R_RESPONSES:
    case R_MESSAGES:
        if (s->draining) {
            weft_metrics_request(&s->metrics, r->path, 503);
            weft_http_respond(c, 503, "application/json", "Retry-After: 5\r\n",
                         "{\"error\":{\"message\":\"the server is shutting down\",\"type\":\"server_busy\",\"param\":null,"
                         "\"code\":null}}",
                         strlen("{\"error\":{\"message\":\"the server is shutting down\",\"type\":\"server_busy\","
                                "\"param\":null,\"code\":null}}"));
            return;
        }
        weft_server_generate(s, c, req, weft_shape_of_path(r->path), r->id == R_CHAT, t);
        return;
    case R_EMBEDDINGS: weft_server_embeddings(s, c, req, t); return;
    case R_TEST_PAUSE: {
        /* --test-hooks: hold the engine still, as a hung device would */
        json_t *j = json_loadb(req->body ? req->body : "", req->body_len, 0, NULL);
        json_t *p = json_object_get(j, "paused");
        if (!json_is_boolean(p)) {
            json_decref(j);
            reply_error(s, c, r->path, 400, "invalid_request_error", "paused", "expected {\"paused\": true|false}");
            return;
        }
        weft_engine_test_pause(s->eng, json_is_true(p));
        reply_json(s, c, r->path, 200, json_pack("{s:b}", "paused", json_is_true(p)));
        json_decref(j);
        return;
    }
    default: break;
    }
}

bool weft_server_fleet_caller(const struct weft_server *s, const struct tenant_cfg *t, const char **why)
{
    if (!weft_server_kv_on(s)) {
        *why = "shared KV is off on this instance: start weft serve with --kv-secret (the fleet secret) to serve "
               "/v1/kv/* and prefill/decode hand-offs to trusted callers";
        return false;
    }
    if (!t || !t->trusted) {
        *why = "/v1/kv/* and the x-weft-pd headers need a trusted caller: a trusted API key, or a fleet member's "
               "credential (weft router --kv-secret)";
        return false;
    }
    return true;
}

void weft_server_handle(void *arg, struct http_conn *c, const struct http_request *req) { handle(arg, c, req, false); }

void weft_server_handle_metrics(void *arg, struct http_conn *c, const struct http_request *req)
{
    handle(arg, c, req, true);
}
