/* Server metrics in Prometheus text format. Updated and read on the loop
 * thread only (engine figures are sampled when /metrics is scraped). */
#ifndef WEFT_SERVER_METRICS_H
#define WEFT_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"

#define METRIC_HIST_BUCKETS 14

struct metric_hist {
    const double *bounds;          /* METRIC_HIST_BUCKETS upper bounds, seconds */
    uint64_t counts[METRIC_HIST_BUCKETS + 1];
    double sum;
    uint64_t n;
};

struct metric_req_key { char endpoint[32]; int status; uint64_t n; };

enum metric_finish {
    METRIC_FINISH_STOP, METRIC_FINISH_LENGTH, METRIC_FINISH_ABORT, METRIC_FINISH_ERROR,
    METRIC_FINISH_CLIENT_GONE, METRIC_FINISH_SLOW_CLIENT, METRIC_FINISH_SHUTDOWN, METRIC_FINISH_N
};
const char *weft_metrics_finish_name(enum metric_finish f);

/* Figures from outside struct metrics, and how to render. */
struct weft_kv_remote_stats;
struct kv_fetch_stats;
struct pd_stats;

struct metrics_extra {
    const char *model_name;        /* the model_name label of every series */
    bool vllm_compat;              /* also vllm:num_requests_running/waiting, kv_cache_usage_perc, cache_config_info */
    size_t out_now, out_peak;
    uint32_t conns, stalled, tok_pending;  /* stalled: weft_http_server_n_stalled */
    uint64_t grammar_compiles;     /* request grammars compiled (on their own thread) */
    uint32_t grammar_pending;      /* ... compiling or waiting to */
    size_t kv_push_held;           /* bytes of KV pushes held now (http_limits.big_body_total) */
    uint64_t kv_push_refused;      /* pushes refused for it (503) */
    uint64_t tok_worker, tok_loop, reloads_ok, reloads_err;
    const uint64_t *mock_injected; /* --mock: failures injected by kind (429, 503, 500, hang, nokv); NULL otherwise */
    const struct weft_engine_kv_stats *kvio; /* KV blocks in and out (/v1/kv/blocks); NULL: none */
    const struct weft_kv_remote_stats *remote;     /* the Redis tier (--kv-remote); NULL: none */
    const struct kv_fetch_stats *fetch;            /* its fetches (server/kv_fetch.h); NULL: none */
    const struct pd_stats *pd;                /* prefill/decode hand-offs; NULL: none */
    struct weft_engine *eng;                  /* per-tenant prompt tokens; NULL: none */
};

struct metrics {
    struct metric_req_key reqs[64]; /* requests by endpoint and status */
    uint32_t n_reqs;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t rejected_rate, rejected_queue, rejected_auth, rejected_conns, client_disconnects, slow_client_aborts;
    uint64_t rejected_no_room;       /* could never fit this instance's KV cache (503) */
    uint64_t continuations;          /* weft.continue requests carried on here */
    struct metric_hist ttft, itl, e2e, queue;
    uint64_t finish[METRIC_FINISH_N];
};

void weft_metrics_init(struct metrics *m);
void weft_metrics_request(struct metrics *m, const char *endpoint, int status);
void weft_metrics_observe(struct metric_hist *h, double seconds);
/* Render everything (plus the engine's stats, device memory and x, which
 * may be NULL) into a malloc'd string; NULL when out of memory. */
char *weft_metrics_render(const struct metrics *m, const struct weft_engine_stats *es, uint64_t kv_bytes,
                     uint64_t weight_bytes, const struct metrics_extra *x, size_t *len);

#endif
