/* `weft router` as a library: one OpenAI-compatible endpoint in front of
 * many `weft serve` instances (FLEET.md, "Routing"). It tokenizes each
 * prompt with the model's own tokenizer, hashes its 16-token blocks as
 * core/kv does, looks them up in a per-instance prefix index (routing
 * history corrected by the instances' KV events), ranks the instances with
 * core/route on their polled /load plus its own in-flight accounting, and
 * proxies the request there, streaming the answer back with backpressure.
 *
 * Endpoints: POST /v1/completions and /v1/chat/completions (routed; n > 1
 * goes whole to one instance, which shares the prompt's blocks between the
 * choices, and such a stream is not moved if its instance fails), POST
 * /tokenize, /detokenize and /v1/embeddings (forwarded to the least
 * loaded), GET /v1/models (the fleet's models), /v1/models/{id} (one of
 * them, else asked of an instance: it knows its aliases), /health, /ready
 * (some instance usable),
 * /metrics, / (the dashboard, server/dash.h) and /fleet (its state).
 * Answers carry x-weft-instance and x-weft-route (policy, reason, matched
 * tokens, predicted TTFT, runner-up).
 *
 * Threads: run() runs the libuv loop on the calling thread; tokenization
 * runs on a small worker pool (server/workers.h). Signals (when asked):
 * SIGTERM/SIGINT stop accepting and let requests in flight finish (a second
 * one cuts them). */
#ifndef WEFT_SERVER_ROUTER_H
#define WEFT_SERVER_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/route.h"
#include "base/status.h"
#include "server/http.h"
#include "server/prompt.h"

#define WEFT_ROUTER_MAX_URLS 64

struct weft_router_config {
    const char *host;                /* NULL: 127.0.0.1 */
    int port;                        /* 0: any free port */
    const char *instances[WEFT_ROUTER_MAX_URLS];  /* http://host:port */
    uint32_t n_instances;
    const char *dns;                 /* "NAME:PORT": every address NAME resolves to is an instance */
    uint32_t dns_interval_ms;        /* re-resolve period (0: 5000) */
    enum weft_route_policy policy;
    uint32_t poll_ms;                /* /load period per instance (0: 200) */
    uint32_t max_retries;            /* attempts elsewhere before a request's first byte (0: 2; --max-retries) */
    uint32_t max_migrations;         /* moves of a stream after it (0: 2; --max-migrations) */
    uint32_t saturate_waiting;       /* an instance with every slot busy and this many waiting is
                                        saturated (0: 2; --saturate-waiting) */
    uint32_t queue_max;              /* requests the router's queue holds (0: 1024; --queue-max) */
    uint32_t queue_per_tenant;       /* ... of one tenant (0: 256; --queue-per-tenant) */
    uint32_t hold_empty_s;           /* with no usable instance, requests wait in the queue up to this
                                        many seconds for one to come up (an autoscaler scaling from
                                        zero), then 503; /ready stays 200 meanwhile (0: 503 at once;
                                        --hold-empty-s) */
    uint32_t hold_startup_s;         /* until an instance has first come up, requests wait in the queue
                                        up to this many seconds (the longer of the two holds) and /ready
                                        answers 503 "starting" (weft fleet's router: its instances are
                                        loading; 0: as hold_empty_s; --hold-startup-s) */
    struct prompt_rules rules;       /* the model's tokenizer and chat rendering (as the instances') */
    const char *tenants_path;        /* --config: the tenants file weft serve reads; its trusted key
                                        is what the router sends upstream; client keys are checked */
    const char *upstream_key;        /* overrides the trusted key from tenants_path */
    const char *kv_secret;           /* --kv-secret: the fleet secret; without upstream_key the router
                                        presents its fleet credential (tenants.h weft_fleet_credential)
                                        upstream, which instances with the same secret trust */
    const char *api_key;             /* --api-key: one shared client key (tenants.h, a trusted tenant
                                        "api-key": it is also what the router sends upstream) */
    bool no_kv_events;               /* routing history only, no /v1/kv/events subscriptions */
    uint32_t index_max_blocks;       /* per instance (0: 1M) */
    uint32_t pd_threshold;           /* hand prompts with more uncached tokens than this to a prefill
                                        instance (--role prefill) when quicker (0: 512; --pd-threshold) */
    bool no_pd;                      /* never (--no-pd) */
    double pd_slack;                 /* a decode instance's own prefill counts this many times
                                        (+ its running requests) against a prefill instance's
                                        (0: 1.25; --pd-slack) */
    uint32_t timeout_ms;             /* upstream inactivity (0: 600 s) */
    uint32_t stall_ms;               /* a stream silent this long after its first token, or 50 of its
                                        instance's steps if longer, has stalled: it moves (0: 10 s) */
    uint32_t n_workers;              /* tokenizing threads (0: 2) */
    uint32_t max_queued_work;        /* (0: 256) */
    struct http_limits http;
    bool handle_signals;
};

struct weft_router;

/* Listener, worker pool, instances (polled from the first loop turn). On
 * failure *out is NULL and weft_last_error() says why. */
weft_status weft_router_create(const struct weft_router_config *cfg, struct weft_router **out);
int weft_router_port(const struct weft_router *r);
weft_status weft_router_run(struct weft_router *r);
/* Any thread: stop accepting and drain (the second call cuts). */
void weft_router_stop(struct weft_router *r);
void weft_router_free(struct weft_router *r);

#endif
