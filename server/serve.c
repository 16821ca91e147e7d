/* The server's lifecycle (serve.h): create, run the loop, drain on
 * SIGTERM/SIGINT with a deadline, reload tenants on SIGHUP, free.
 *
 * Shutdown, in order: the drain stops the listener and lets requests in
 * flight finish; once no connection is left (drained) and every request has
 * been released (n_active 0: a client that left mid-stream may still have
 * an abort on its way through the engine), the last handles are closed and
 * the loop ends. The deadline (or a second stop) cuts what is left first. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/route.h"
#include "core/tokenizer.h"
#include "server/server.h"
#include "server/kv_fetch.h"
#include "server/kv_remote.h"

#define DEF_DRAIN_MS 30000u
#define DEF_STREAM_BUFFER (4u << 20)

static void close_handle(uv_handle_t *h)
{
    if (h->loop && !uv_is_closing(h)) uv_close(h, NULL);
}

/* Every loop handle and both listeners; the loop ends once they are closed. */
static void close_all(struct weft_server *s)
{
    pthread_mutex_lock(&s->qmu);
    s->closing = true;
    pthread_mutex_unlock(&s->qmu);
    close_handle((uv_handle_t *)&s->async);
    close_handle((uv_handle_t *)&s->stop_async);
    close_handle((uv_handle_t *)&s->drain_timer);
    if (s->signals) {
        close_handle((uv_handle_t *)&s->sig_term);
        close_handle((uv_handle_t *)&s->sig_int);
        close_handle((uv_handle_t *)&s->sig_hup);
        close_handle((uv_handle_t *)&s->sig_usr1);
        close_handle((uv_handle_t *)&s->sig_usr2);
    }
    if (s->http) weft_http_server_free(s->http);
    if (s->http_metrics) weft_http_server_free(s->http_metrics);
    s->http = s->http_metrics = NULL;
    weft_server_pd_close(s);
    weft_kv_fetch_close(s->kv_fetch);
    if (s->workers) weft_workers_free(s->workers);
    s->workers = NULL;
    if (s->grammar_workers) weft_workers_free(s->grammar_workers);
    s->grammar_workers = NULL;
    weft_server_kv_events_close(s);  /* unhooks the engine first */
}

/* A KV push's large body only from a trusted key (or on a server without keys). */
static bool trusted_push(void *user, const struct http_header *h, uint32_t n)
{
    struct weft_server *s = user;
    if (!weft_server_kv_on(s)) return false;
    const char *auth = NULL;
    for (uint32_t i = 0; i < n && !auth; i++)
        if (!strcmp(h[i].name, "authorization")) auth = h[i].value;
    bool anon;
    const struct tenant_cfg *t = auth ? weft_tenants_auth(&s->tenants, auth, &anon) : NULL;
    return t && t->trusted;
}

static void close_if_idle(struct weft_server *s)
{
    if (!s->drained || s->n_active || s->closing) return;
    close_all(s);
}

static void on_drained(void *arg)
{
    struct weft_server *s = arg;
    s->drained = true;
    close_if_idle(s);  /* frees the drained listener (close_all) once no request is left */
}

/* The deadline: end every request left, close every connection. The
 * answers just queued (error events, 503s) get CUT_FLUSH_MS to go out; a
 * half-received request or a client that does not read is closed then at
 * the latest. The drain's done callback (on_drained) follows. */
#define CUT_FLUSH_MS 1000u
static void cut(struct weft_server *s, const char *why)
{
    if (s->cut || s->closing) return;
    s->cut = true;
    uv_timer_stop(&s->drain_timer);
    fprintf(stderr, "weft serve: %s: ending %u requests still in flight\n", why, s->n_active);
    weft_server_cut_all(s, "the server is shutting down and this request was ended at the drain deadline");
    weft_http_server_close_soon(s->http, CUT_FLUSH_MS);
}

static void on_drain_timer(uv_timer_t *t) { cut(t->data, "drain timeout"); }

static void begin_drain(struct weft_server *s, const char *why)
{
    if (s->draining) {
        cut(s, why);
        return;
    }
    fprintf(stderr, "weft serve: %s, draining %u requests in flight (at most %u ms; again to end them now)\n", why,
            s->n_active, s->cfg.drain_timeout_ms);
    s->draining = true;
    uv_timer_start(&s->drain_timer, on_drain_timer, s->cfg.drain_timeout_ms, 0);
    /* KV-event subscriptions never end by themselves: end them so the drain can finish */
    weft_server_kv_events_end_all(s, "the server is shutting down");
    /* the metrics listener stays up until the end: /ready says "draining" */
    weft_http_server_drain(s->http, on_drained, s);
}

static void reload_tenants(struct weft_server *s)
{
    if (!s->tenants_path[0]) {
        fprintf(stderr, "weft serve: SIGHUP: no --config file to reload\n");
        return;
    }
    char msg[512];
    if (!weft_tenants_reload(&s->tenants, s->tenants_path, msg, sizeof msg)) {
        s->reload_failures++;
        fprintf(stderr, "weft serve: SIGHUP: %s: kept the tenants as they were\n", msg);
        return;
    }
    for (uint32_t i = 0; i < s->tenants.n; i++)
        if (weft_engine_tenant(s->eng, s->tenants.t[i].name, &s->tenants.t[i].lim) != WEFT_OK)
            fprintf(stderr, "weft serve: SIGHUP: tenant '%s': %s\n", s->tenants.t[i].name, weft_last_error());
    s->reloads++;
    fprintf(stderr, "weft serve: SIGHUP: reloaded %u tenants from %s\n", s->tenants.n, s->tenants_path);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct weft_server *s = h->data;
    if (signum == SIGHUP) reload_tenants(s);
    else if (signum == SIGTERM || signum == SIGINT) begin_drain(s, signum == SIGTERM ? "SIGTERM" : "SIGINT");
    /* SIGUSR1, SIGUSR2: ignored (they would kill the process by default) */
}

static void on_stop_async(uv_async_t *a)
{
    struct weft_server *s = a->data;
    while (s->stops_handled < atomic_load(&s->stop_requests)) {
        s->stops_handled++;
        begin_drain(s, "stop requested");
    }
}

void weft_server_stop(struct weft_server *s)
{
    if (!s) return;
    atomic_fetch_add(&s->stop_requests, 1);
    pthread_mutex_lock(&s->qmu);
    bool closing = s->closing;
    pthread_mutex_unlock(&s->qmu);
    if (!closing) uv_async_send(&s->stop_async);
}

static void idle_cb(struct weft_server *s) { close_if_idle(s); }

static size_t longest_piece(const struct weft_tokenizer *t)
{
    size_t best = 1;
    for (int32_t id = 0; id < weft_tokenizer_n_vocab(t); id++) {
        const char *p = weft_tokenizer_piece(t, id);
        size_t n = p ? strlen(p) : 0;
        if (n > best) best = n;
    }
    return best;
}

static void signal_on(struct weft_server *s, uv_signal_t *h, int signum)
{
    uv_signal_init(s->loop, h);
    h->data = s;
    uv_signal_start(h, on_signal, signum);
}

weft_status weft_server_create(const struct weft_model *m, const struct weft_server_config *cfg,
                               struct weft_server **out)
{
    *out = NULL;
    struct weft_server *s = calloc(1, sizeof *s);
    if (!s) return weft_error(WEFT_ERR_NOMEM, "server: out of memory");
    s->cfg = *cfg;
    if (!s->cfg.drain_timeout_ms) s->cfg.drain_timeout_ms = DEF_DRAIN_MS;
    s->max_stream_buffer = cfg->max_stream_buffer ? cfg->max_stream_buffer : DEF_STREAM_BUFFER;
    s->metrics_key = cfg->metrics_key;
    s->m = m;
    s->created = (uint64_t)time(NULL);
    s->max_waiting = cfg->engine.max_waiting ? cfg->engine.max_waiting : 1024;
    s->weight_bytes = weft_model_weight_bytes(m);
    snprintf(s->model_id, sizeof s->model_id, "%s", cfg->model_id ? cfg->model_id : "default");
    if (cfg->tenants_path) snprintf(s->tenants_path, sizeof s->tenants_path, "%s", cfg->tenants_path);
    weft_metrics_init(&s->metrics);
    pthread_mutex_init(&s->qmu, NULL);
    s->on_idle = idle_cb;
    char msg[512] = "";
    if (!weft_tenants_load(&s->tenants, cfg->tenants_path, msg, sizeof msg)) {
        pthread_mutex_destroy(&s->qmu);
        free(s);
        return weft_error(WEFT_ERR_INVALID_ARG, "bad --config: %s", msg);
    }
    if (cfg->api_key && !weft_tenants_add_shared_key(&s->tenants, cfg->api_key, msg, sizeof msg)) {
        weft_tenants_free(&s->tenants);
        pthread_mutex_destroy(&s->qmu);
        free(s);
        return weft_error(WEFT_ERR_INVALID_ARG, "%s", msg);
    }
    if ((cfg->kv_secret || cfg->kv_secret_previous) &&
        (!cfg->kv_secret || !weft_tenants_set_fleet(&s->tenants, cfg->kv_secret, cfg->kv_secret_previous, msg,
                                                    sizeof msg) ||
         !weft_fleet_credential(cfg->kv_secret, s->fleet_cred) ||
         weft_kvb_keys_derive(cfg->kv_secret, cfg->kv_secret_previous, &s->kv_keys) != WEFT_OK)) {
        if (!cfg->kv_secret) snprintf(msg, sizeof msg, "--kv-secret-previous needs --kv-secret");
        else if (!msg[0]) snprintf(msg, sizeof msg, "%s", weft_last_error());
        weft_tenants_free(&s->tenants);
        pthread_mutex_destroy(&s->qmu);
        free(s);
        return weft_error(WEFT_ERR_INVALID_ARG, "%s", msg);
    }
    if (cfg->role != WEFT_ROUTE_ROLE_BOTH && !s->kv_keys.n) {
        weft_tenants_free(&s->tenants);
        pthread_mutex_destroy(&s->qmu);
        free(s);
        return weft_error(WEFT_ERR_INVALID_ARG, "--role %s hands KV blocks between instances: it needs --kv-secret "
                          "(the fleet secret)", weft_route_role_name((enum weft_route_role)cfg->role));
    }
    if (cfg->kv_remote && !s->kv_keys.n) {
        weft_tenants_free(&s->tenants);
        pthread_mutex_destroy(&s->qmu);
        free(s);
        return weft_error(WEFT_ERR_INVALID_ARG, "--kv-remote needs --kv-secret: every block written to Redis carries a "
                          "MAC under the fleet secret, and a block without one is refused (whoever can write Redis "
                          "must not be able to change answers)");
    }
    s->rules.tok = weft_model_tokenizer(m);
    s->rules.tmpl = &s->tmpl;
    weft_prompt_rules_fim(&s->rules, weft_model_gguf(m));
    /* the end-of-generation tokens, for min_tokens */
    {
        const struct weft_tokenizer *tok = weft_model_tokenizer(m);
        int32_t nv = weft_tokenizer_n_vocab(tok);
        for (int32_t id = 0; id < nv; id++)
            if (weft_tokenizer_is_eog(tok, id)) {
                int32_t *g = realloc(s->eog_ids, sizeof(int32_t) * (s->n_eog + 1));
                if (!g) break;
                s->eog_ids = g;
                s->eog_ids[s->n_eog++] = id;
            }
    }
    s->max_piece_bytes = longest_piece(weft_model_tokenizer(m));

    /* the model's Jinja template: refused here, named, when weft cannot run it */
    weft_status st = weft_chat_template_load(&s->tmpl, weft_model_gguf(m), weft_model_tokenizer(m), cfg->chat_template);
    /* /v1/responses' stored responses: the latest 1024, at most 64 MiB of conversation */
    if (st == WEFT_OK && !(s->shapes = weft_shape_store_new(1024, (size_t)64 << 20)))
        st = weft_error(WEFT_ERR_NOMEM, "out of memory");
    if (st == WEFT_OK) {
        char d[160];
        weft_chat_template_describe(&s->tmpl, d, sizeof d);
        fprintf(stderr, "weft serve: chat template %s\n", d);
        st = weft_engine_create(m, &cfg->engine, &s->eng);
    }
    if (st != WEFT_OK) goto fail_early;
    weft_engine_kv_set_keys(s->eng, &s->kv_keys);
    s->n_ctx = weft_engine_n_ctx(s->eng);
    struct weft_kv_pool *kv = weft_engine_kv(s->eng);
    s->kv_bytes = (uint64_t)kv->block_bytes * kv->n_blocks;
    for (uint32_t i = 0; i < s->tenants.n; i++)
        if ((st = weft_engine_tenant(s->eng, s->tenants.t[i].name, &s->tenants.t[i].lim)) != WEFT_OK) goto fail_early;

    s->loop = &s->loop_storage;
    if (uv_loop_init(s->loop) != 0) {
        st = weft_error(WEFT_ERR_NOMEM, "server: cannot create the event loop");
        goto fail_early;
    }
    s->loop_thread = pthread_self();
    uv_async_init(s->loop, &s->async, weft_server_drain_events);
    s->async.data = s;
    uv_async_init(s->loop, &s->stop_async, on_stop_async);
    s->stop_async.data = s;
    uv_timer_init(s->loop, &s->drain_timer);
    s->drain_timer.data = s;
    /* KV block pushes (/v1/kv/blocks) carry more than a request body does */
    struct http_limits lim = cfg->http;
    if (!lim.big_body_path) {
        lim.big_body_path = "/v1/kv/blocks";
        lim.big_body_max = cfg->max_kv_push ? cfg->max_kv_push : (size_t)64 << 20;
        lim.big_body_total = cfg->max_kv_push_total ? cfg->max_kv_push_total : 4 * lim.big_body_max;
        lim.big_body_ok = trusted_push;  /* an anonymous client cannot make it buffer 64 MiB */
        lim.big_body_user = s;
    }
    int err = weft_http_server_start(s->loop, cfg->host, cfg->port, &lim, weft_server_handle, s, &s->http);
    if (err) {
        st = weft_error(WEFT_ERR_IO, "cannot listen on %s:%d: %s", cfg->host ? cfg->host : "127.0.0.1", cfg->port,
                        uv_strerror(err));
        goto fail;
    }
    if (cfg->metrics_port > 0) {
        err = weft_http_server_start(s->loop, cfg->host, cfg->metrics_port, &cfg->http, weft_server_handle_metrics, s,
                                &s->http_metrics);
        if (err) {
            st = weft_error(WEFT_ERR_IO, "cannot listen on %s:%d for /metrics: %s", cfg->host ? cfg->host : "127.0.0.1",
                            cfg->metrics_port, uv_strerror(err));
            goto fail;
        }
    }
    if ((st = weft_workers_create(s->loop, cfg->n_workers, cfg->max_queued_work, &s->workers)) != WEFT_OK) goto fail;
    if ((st = weft_workers_create(s->loop, 1, cfg->max_queued_work, &s->grammar_workers)) != WEFT_OK) goto fail;
    if ((st = weft_server_pd_init(s)) != WEFT_OK) goto fail;
    weft_server_describe_devices(s, cfg->devices);
    if (cfg->kv_remote) {
        struct kv_remote_config rc = {.url = cfg->kv_remote, .ttl_ms = cfg->kv_remote_ttl_ms,
                                      .timeout_ms = cfg->kv_remote_timeout_ms};
        if ((st = weft_kv_remote_create(&rc, s->eng, weft_model_fingerprint(m), &s->kv_remote)) != WEFT_OK) goto fail;
        if ((st = weft_kv_fetch_create(s->loop, s->kv_remote, s->eng, &s->kv_fetch)) != WEFT_OK) goto fail;
    }
    if ((st = weft_server_kv_events_init(s, kv->n_blocks, kv->n_ck)) != WEFT_OK) goto fail;
    /* measured rates for /load from the first poll on */
    if (!cfg->no_calibrate && (st = weft_engine_calibrate(s->eng, 0)) != WEFT_OK) goto fail;
    if ((st = weft_engine_start(s->eng)) != WEFT_OK) goto fail;
    if (cfg->handle_signals) {
        s->signals = true;
        signal_on(s, &s->sig_term, SIGTERM);
        signal_on(s, &s->sig_int, SIGINT);
        signal_on(s, &s->sig_hup, SIGHUP);
        signal_on(s, &s->sig_usr1, SIGUSR1);
        signal_on(s, &s->sig_usr2, SIGUSR2);
    }
    *out = s;
    return WEFT_OK;
fail:
    weft_server_free(s);
    return st;
fail_early:
    weft_engine_free(s->eng);
    weft_chat_template_free(&s->tmpl);
    weft_shape_store_free(s->shapes);
    free(s->eog_ids);
    weft_tenants_free(&s->tenants);
    pthread_mutex_destroy(&s->qmu);
    free(s);
    return st;
}

int weft_server_port(const struct weft_server *s) { return weft_http_server_port(s->http); }
int weft_server_metrics_port(const struct weft_server *s)
{
    return s->http_metrics ? weft_http_server_port(s->http_metrics) : -1;
}
bool weft_server_has_keys(const struct weft_server *s) { return s->tenants.any_keys; }
uint32_t weft_server_n_ctx(const struct weft_server *s) { return s->n_ctx; }

weft_status weft_server_run(struct weft_server *s)
{
    s->loop_thread = pthread_self();
    uv_run(s->loop, UV_RUN_DEFAULT);
    return WEFT_OK;
}

void weft_server_free(struct weft_server *s)
{
    if (!s) return;
    /* the engine first: its last events (none once drained) go to a queue nobody reads */
    pthread_mutex_lock(&s->qmu);
    s->closing = true;
    pthread_mutex_unlock(&s->qmu);
    /* the remote tier's threads read blocks from the engine: they stop first
     * (the fetch thread's loop handles close below, its memory after that) */
    weft_server_kv_events_drop_remote(s);
    weft_kv_fetch_stop(s->kv_fetch);
    weft_kv_remote_free(s->kv_remote);
    s->kv_remote = NULL;
    weft_engine_free(s->eng);
    s->eng = NULL;
    s->closing = false;
    close_all(s);  /* whatever run left open (create failed, or run never called) */
    uv_run(s->loop, UV_RUN_DEFAULT);
    weft_kv_fetch_free(s->kv_fetch);
    s->kv_fetch = NULL;
    uv_loop_close(s->loop);
    weft_server_pd_free(s);
    weft_chat_template_free(&s->tmpl);
    weft_shape_store_free(s->shapes);
    free(s->eog_ids);
    free(s->q);
    free(s->q2);
    weft_tenants_free(&s->tenants);
    pthread_mutex_destroy(&s->qmu);
    free(s);
}
