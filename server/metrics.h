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

struct metrics {
    struct metric_req_key reqs[64]; /* requests by endpoint and status */
    uint32_t n_reqs;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t rejected_rate, rejected_queue, rejected_auth, rejected_conns, client_disconnects, slow_client_aborts;
    struct metric_hist ttft, itl, e2e;
};

void metrics_init(struct metrics *m);
void metrics_request(struct metrics *m, const char *endpoint, int status);
void metrics_observe(struct metric_hist *h, double seconds);
/* Render everything (plus the engine's stats and device memory) into a
 * malloc'd string. */
char *metrics_render(const struct metrics *m, const struct weft_engine_stats *es, uint64_t kv_bytes,
                     uint64_t weight_bytes, size_t *len);

#endif
