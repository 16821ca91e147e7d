/* `weft serve` as a library: one OpenAI-compatible HTTP server over one
 * engine, with its lifecycle (create / run / stop / free), signals and
 * drain. tools/cmd_serve.c is a thin command over it; weft router reuses the
 * HTTP stack (server/http.h, server/workers.h) the same way.
 *
 * Threads: weft_server_run() runs the libuv loop on the calling thread; the
 * engine steps on its own thread; tokenization runs on a small worker pool.
 *
 * Signals (when cfg.handle_signals): SIGTERM or SIGINT starts a drain: stop
 * accepting, let requests in flight finish, return from run. A second
 * SIGTERM/SIGINT, or drain_timeout_ms after the first, ends what is left
 * at once: generation streams get an error event and their end, generation
 * requests not yet answered get 503 (both get a second to go out), every
 * other connection — a half-received request, a /tokenize in progress — is
 * closed, and run returns WEFT_OK (the command exits 0). During the drain
 * /ready answers 503 "draining" (on the metrics listener too). SIGHUP reloads the tenants file (a bad file is reported
 * and the old configuration kept); SIGUSR1 and SIGUSR2 are ignored. */
#ifndef WEFT_SERVER_SERVE_H
#define WEFT_SERVER_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "core/model.h"
#include "server/http.h"

struct weft_server_config {
    const char *host;                /* NULL: 127.0.0.1 */
    int port;                        /* 0: any free port (weft_server_port) */
    const char *tenants_path;        /* --config FILE (server/tenants.h), NULL: none */
    const char *model_id;            /* name answered in /v1/models; NULL: "default" */
    const char *const *model_aliases;/* --model-alias: more names requests may use for the model (listed
                                        in /v1/models; an answer names the model as it was asked) */
    uint32_t n_model_aliases;
    const char *api_key;             /* --api-key: one shared key (tenants.h, weft_tenants_add_shared_key) */
    struct weft_engine_config engine;
    const char *chat_template;       /* --chat-template FILE: this Jinja template instead of the model's */
    size_t max_stream_buffer;        /* unread stream bytes before the client is cut (0: 4 MiB) */
    uint32_t drain_timeout_ms;       /* 0: 30 s */
    struct http_limits http;         /* zero fields: http.h's defaults */
    int metrics_port;                /* > 0: /metrics (and /health, /ready) on their own listener
                                        at host:metrics_port, and no longer on the main one; 0: none */
    const char *metrics_key;         /* non-NULL: /metrics needs "Authorization: Bearer KEY" */
    bool metrics_vllm;               /* --metrics-compat vllm: also the vllm:* names autoscalers read */
    uint32_t n_workers;              /* tokenizing threads (0: 2) */
    uint32_t max_queued_work;        /* requests tokenizing or waiting to (0: 64); past it 503 */
    bool handle_signals;             /* install the SIGTERM/SIGINT/SIGHUP/SIGUSR1 handlers above */
    const char *devices;             /* what the model runs on, for /load: "cpu", "vulkan:0", or a
                                        --split spec "cpu=10,vulkan:0"; NULL: "cpu" */
    /* The fleet secret (--kv-secret; the one it replaces during a rotation:
     * --kv-secret-previous). It turns shared KV on: /v1/kv/..., prefill/decode
     * hand-offs and the Redis tier, for trusted callers only (a trusted API
     * key, or a fleet member's credential: tenants.h weft_fleet_credential);
     * every block this instance writes carries an HMAC-SHA256 under it and
     * every block it takes must (base/kv_block.h). NULL: shared KV is off. */
    const char *kv_secret, *kv_secret_previous;
    size_t max_kv_push;              /* bytes of one POST /v1/kv/blocks (0: 64 MiB) */
    size_t max_kv_push_total;        /* bytes of every POST /v1/kv/blocks body held at once (0: 4 x max_kv_push) */
    const char *kv_remote;           /* redis://HOST:PORT or unix:///PATH: the remote KV tier (kv_remote.h) */
    uint32_t kv_remote_ttl_ms, kv_remote_timeout_ms;
    int role;                        /* enum weft_route_role (core/route.h): reported in /load */
    const char *device_class;        /* reported in /load as device_class: the class a router counts
                                        this instance in for scaling ("nvidia", "amd", "cpu", ...;
                                        NULL: the first device's vendor) */
    uint32_t pd_idle_ms;             /* a PD wait with no block for this long falls back (0: 10 s) */
    uint32_t pd_lease_ms;            /* blocks pushed for a request that never came are unpinned (0: 30 s) */
    bool no_calibrate;               /* skip the short rate measurement at start (weft_engine_calibrate) */
    uint32_t watchdog_ms;            /* an engine with work and no step for this long is stalled: /health and
                                        /load answer 503 (0: 30 s) */
    bool test_hooks;                 /* --test-hooks: POST /test/engine-pause {"paused": bool} (for tests of
                                        the watchdog and of a router's stall detection; never in production) */
    /* --mock (engine.mock_prefill_tps > 0): /load names one device "mock:0"
     * with these (NULL: "mock"); each generation request fails first, with
     * these probabilities, as: 429, 503 (overload), 500, a hang (no answer
     * until the client leaves or shutdown), 503 for no KV room. Drawn from
     * mock_seed (0: 1), on the loop thread, so a run is reproducible. */
    const char *mock_vendor, *mock_device;
    double mock_fail[5];
    uint64_t mock_seed;
};

enum { WEFT_MOCK_FAIL_429, WEFT_MOCK_FAIL_503, WEFT_MOCK_FAIL_500, WEFT_MOCK_FAIL_HANG, WEFT_MOCK_FAIL_NOKV };

struct weft_server;

/* Everything but the loop: tenants, the engine (started), the listener(s)
 * and the worker pool. m must outlive the server. On failure *out is NULL
 * and weft_last_error() says what (bad tenants file, address in use, ...);
 * nothing is left behind. Call from the thread that will call run. */
weft_status weft_server_create(const struct weft_model *m, const struct weft_server_config *cfg,
                               struct weft_server **out);
int weft_server_port(const struct weft_server *s);
int weft_server_metrics_port(const struct weft_server *s);  /* -1 when none */
bool weft_server_has_keys(const struct weft_server *s);
uint32_t weft_server_n_ctx(const struct weft_server *s);
/* Run the loop until the server has stopped (drained, or cut at the
 * deadline). WEFT_OK. */
weft_status weft_server_run(struct weft_server *s);
/* Start the drain (as SIGTERM does). Any thread; the second call cuts at once. */
void weft_server_stop(struct weft_server *s);
/* After run returned (or instead of run): stops the engine, frees everything. */
void weft_server_free(struct weft_server *s);

#endif
