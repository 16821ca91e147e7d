/* `weft serve`: the OpenAI-compatible HTTP server.
 *
 *   weft serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--device cpu]
 *              [--config FILE] [-t THREADS] [-c N_CTX] [--max-seqs 64]
 *              [--max-waiting 256] [--kv-mib 1024] [--model-name NAME]
 *
 * The libuv loop runs on this (main) thread, the engine on its own; engine
 * events reach the loop through a queue and a uv_async. SIGTERM or SIGINT:
 * stop accepting, let requests in flight finish, then exit 0. */
#include <signal.h>  /* SIGTERM, SIGINT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "tools/cli.h"
#include "tools/cli_common.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: weft serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--device cpu] [--config FILE]\n"
            "                  [-t THREADS] [-c N_CTX] [--max-seqs 64] [--max-waiting 256] [--kv-mib 1024]\n"
            "                  [--model-name NAME] [--no-prefix-cache] [--template-system] [--kv-type f16|q8_0]\n"
            "                  [--max-stream-buffer-kib 4096]\n"
            "  --config FILE: API keys, tenants, rate limits and KV quotas (JSON; see server/tenants.h)\n"
            "  --port 0 picks a free port; the address is printed on stderr once listening\n"
            "  --max-stream-buffer-kib: a streaming client that lets more than this pile up unread is dropped\n"
            "  --template-system: chats without a system message get the one the model's template defines\n");
}

static uv_signal_t sig_term, sig_int;

static bool drained;

/* Once no connection is left and every request has been released (a
 * client that left mid-stream may still have an abort on its way through
 * the engine), close the last handles so the loop ends. */
static void close_if_idle(struct server *s)
{
    if (!drained || s->n_active || s->closing) return;
    pthread_mutex_lock(&s->qmu);
    s->closing = true;
    pthread_mutex_unlock(&s->qmu);
    uv_close((uv_handle_t *)&s->async, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
    http_server_free(s->http);  /* no connection left; the loop releases it */
    s->http = NULL;
}

static void on_drained(void *arg)
{
    drained = true;
    close_if_idle(arg);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct server *s = h->data;
    if (s->draining) return;
    fprintf(stderr, "weft serve: %s, draining %u requests in flight\n", signum == SIGTERM ? "SIGTERM" : "SIGINT",
            s->n_active);
    s->draining = true;
    uv_signal_stop(&sig_term);
    uv_signal_stop(&sig_int);
    http_server_drain(s->http, on_drained, s);
}

static int parse_u32(const char *a, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "weft serve: %s expects an integer in %u..%u\n", a, lo, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

int weft_cmd_serve(int argc, char **argv)
{
    struct cli_opts o;
    cli_opts_default(&o);
    const char *host = "127.0.0.1", *config = NULL, *name = NULL;
    uint32_t port = 8080, max_seqs = 64, max_waiting = 256, kv_mib = 0, max_stream_kib = 4096;
    bool no_prefix = false, template_system = false;
    enum weft_type kv_type = WEFT_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "--host") && v) { host = argv[++i]; continue; }
        if (!strcmp(a, "--config") && v) { config = argv[++i]; continue; }
        if (!strcmp(a, "--model-name") && v) { name = argv[++i]; continue; }
        if (!strcmp(a, "--no-prefix-cache")) { no_prefix = true; continue; }
        if (!strcmp(a, "--template-system")) { template_system = true; continue; }
        if (!strcmp(a, "--kv-type") && v) {
            i++;
            if (!weft_type_from_name(argv[i], &kv_type) || (kv_type != WEFT_TYPE_F16 && kv_type != WEFT_TYPE_Q8_0)) {
                fprintf(stderr, "weft serve: --kv-type expects f16 or q8_0\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--port") && v) { if (parse_u32(a, argv[++i], 0, 65535, &port)) return 2; continue; }
        if (!strcmp(a, "--max-seqs") && v) { if (parse_u32(a, argv[++i], 1, 4096, &max_seqs)) return 2; continue; }
        if (!strcmp(a, "--max-waiting") && v) { if (parse_u32(a, argv[++i], 1, 1 << 20, &max_waiting)) return 2; continue; }
        if (!strcmp(a, "--max-stream-buffer-kib") && v) {
            if (parse_u32(a, argv[++i], 1, 1 << 20, &max_stream_kib)) return 2;
            continue;
        }
        if (!strcmp(a, "--kv-mib") && v) { if (parse_u32(a, argv[++i], 1, 1 << 24, &kv_mib)) return 2; continue; }
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            usage();
            return 2;
        }
    }
    static struct server s;
    memset(&s, 0, sizeof s);
    char msg[512];
    if (!tenants_load(&s.tenants, config, msg, sizeof msg)) {
        fprintf(stderr, "weft serve: bad --config: %s\n", msg);
        return 1;
    }
    struct weft_backend *be;
    struct weft_model *m;
    if (cli_open(&o, &be, &m)) {
        tenants_free(&s.tenants);
        return 1;
    }
    int rc = 1;
    s.m = m;
    s.created = (uint64_t)time(NULL);
    s.max_waiting = max_waiting;
    s.weight_bytes = m->weight_bytes;
    s.max_stream_buffer = (size_t)max_stream_kib << 10;
    metrics_init(&s.metrics);
    pthread_mutex_init(&s.qmu, NULL);
    s.on_idle = close_if_idle;
    if (name) {
        snprintf(s.model_id, sizeof s.model_id, "%s", name);
    } else {
        const char *path = o.model ? o.model : "SmolLM2-135M-Instruct.Q4_1.gguf";
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(s.model_id, sizeof s.model_id, "%s", base);
        size_t n = strlen(s.model_id);
        if (n > 5 && !strcmp(s.model_id + n - 5, ".gguf")) s.model_id[n - 5] = '\0';
    }
    const char *tmpl = NULL;
    weft_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl, NULL);
    s.chat_style = weft_chat_detect(tmpl);
    /* like `weft chat` and llama.cpp's built-in templates: no system prompt
     * unless the request has one, or --template-system asks for the one the
     * model's Jinja template would inject */
    s.default_system = template_system ? weft_chat_default_system(tmpl) : NULL;
    struct weft_engine_config ec = {.n_ctx = o.n_ctx > 0 ? (uint32_t)o.n_ctx : 0, .max_seqs = max_seqs,
                                    .max_waiting = max_waiting, .kv_mib = kv_mib,
                                    .max_step_tokens = o.batch > 0 ? (uint32_t)o.batch : 0,
                                    .no_prefix_cache = no_prefix, .kv_type = kv_type};
    if (weft_engine_create(m, &ec, &s.eng) != WEFT_OK) {
        cli_fail("cannot create the engine");
        goto out;
    }
    s.n_ctx = weft_engine_n_ctx(s.eng);
    struct weft_kv_pool *kv = weft_engine_kv(s.eng);
    s.kv_bytes = (uint64_t)kv->block_bytes * kv->n_blocks;
    for (uint32_t i = 0; i < s.tenants.n; i++)
        if (weft_engine_tenant(s.eng, s.tenants.t[i].name, &s.tenants.t[i].lim) != WEFT_OK) {
            cli_fail("tenant");
            goto out;
        }
    uv_loop_t *loop = uv_default_loop();
    s.loop = loop;
    uv_async_init(loop, &s.async, server_drain_events);
    s.async.data = &s;
    struct http_limits lim = {0};
    int err = http_server_start(loop, host, (int)port, &lim, server_handle, &s, &s.http);
    if (err) {
        fprintf(stderr, "weft serve: cannot listen on %s:%u: %s\n", host, port, err < 0 ? uv_strerror(err) : "error");
        s.closing = true;
        uv_close((uv_handle_t *)&s.async, NULL);
        uv_run(loop, UV_RUN_DEFAULT);
        goto out;
    }
    if (weft_engine_start(s.eng) != WEFT_OK) {
        cli_fail("cannot start the engine");
        goto out;
    }
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    sig_term.data = sig_int.data = &s;
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    fprintf(stderr, "weft serve: listening on http://%s:%d (model %s, context %u, %s%s)\n", host,
            http_server_port(s.http), s.model_id, s.n_ctx, s.tenants.any_keys ? "API keys required" : "no API keys",
            s.tenants.n ? ", tenants configured" : "");
    fflush(stderr);
    uv_run(loop, UV_RUN_DEFAULT);
    rc = 0;
    fprintf(stderr, "weft serve: stopped\n");
out:
    /* the engine first: its last events (none once drained) go to a queue nobody reads */
    s.closing = true;
    weft_engine_free(s.eng);
    s.eng = NULL;
    if (s.http) {
        http_server_free(s.http);
        uv_run(uv_default_loop(), UV_RUN_DEFAULT);
    }
    uv_loop_close(uv_default_loop());
    free(s.q);
    free(s.q2);
    tenants_free(&s.tenants);
    cli_close(be, m);
    return rc;
}
