/* weft router's /metrics (Prometheus text): requests by instance, policy
 * decisions by reason, predicted vs actual cached tokens, the router-added
 * latency histogram, per-instance load as the router sees it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/router_internal.h"

struct mbuf {
    char *b;
    size_t len, cap;
    bool oom;
};

static void put(struct mbuf *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct mbuf *m, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(m->b ? m->b + m->len : NULL, m->b ? m->cap - m->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (m->b && m->len + (size_t)n < m->cap) {
            m->len += (size_t)n;
            return;
        }
        size_t c = m->cap ? m->cap * 2 : 16384;
        while (c < m->len + (size_t)n + 1) c *= 2;
        char *nb = realloc(m->b, c);
        if (!nb) {
            m->oom = true;
            return;
        }
        m->b = nb;
        m->cap = c;
    }
}

static void head(struct mbuf *m, const char *name, const char *type, const char *help)
{
    put(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *router_metrics_render(struct weft_router *r, size_t *len)
{
    struct mbuf m = {0};
    const struct fleet *f = &r->fleet;
    head(&m, "weft_router_http_requests_total", "counter", "Requests answered by the router, by status class.");
    static const char *cls[6] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
    for (int k = 0; k < 6; k++) put(&m, "weft_router_http_requests_total{code=\"%s\"} %llu\n", cls[k], (unsigned long long)r->by_status[k]);
    head(&m, "weft_router_requests_total", "counter", "Generation requests routed to each instance.");
    for (uint32_t i = 0; i < f->n; i++)
        put(&m, "weft_router_requests_total{instance=\"%s\"} %llu\n", f->inst[i]->name, (unsigned long long)f->inst[i]->requests);
    head(&m, "weft_router_prompt_tokens_total", "counter", "Prompt tokens routed to each instance (kind: all, uncached as predicted).");
    for (uint32_t i = 0; i < f->n; i++) {
        put(&m, "weft_router_prompt_tokens_total{instance=\"%s\",kind=\"all\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->prompt_tokens);
        put(&m, "weft_router_prompt_tokens_total{instance=\"%s\",kind=\"uncached\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->uncached_tokens);
    }
    head(&m, "weft_router_decisions_total", "counter", "Routing decisions by reason.");
    for (int k = 0; k < 4; k++)
        put(&m, "weft_router_decisions_total{policy=\"%s\",reason=\"%s\"} %llu\n", weft_route_policy_name(f->cfg.policy),
            weft_route_reason_name((enum weft_route_reason)k), (unsigned long long)f->decisions[k]);
    head(&m, "weft_router_no_instance_total", "counter", "Requests no instance could take (answered 503).");
    put(&m, "weft_router_no_instance_total %llu\n", (unsigned long long)f->no_instance);
    head(&m, "weft_router_cached_tokens_total", "counter", "Prompt tokens predicted cached by the router and reported cached by the instance.");
    put(&m, "weft_router_cached_tokens_total{kind=\"predicted\"} %llu\n", (unsigned long long)f->cached_predicted);
    put(&m, "weft_router_cached_tokens_total{kind=\"actual\"} %llu\n", (unsigned long long)f->cached_actual);
    head(&m, "weft_router_cache_predictions_total", "counter", "Answers by how far the predicted cached tokens were from the instance's.");
    put(&m, "weft_router_cache_predictions_total{result=\"exact\"} %llu\n", (unsigned long long)f->pred_exact);
    put(&m, "weft_router_cache_predictions_total{result=\"within_block\"} %llu\n", (unsigned long long)f->pred_within_block);
    put(&m, "weft_router_cache_predictions_total{result=\"off\"} %llu\n", (unsigned long long)f->pred_off);
    head(&m, "weft_router_overhead_seconds", "histogram", "Time from a request's arrival to its dispatch upstream (parse, tokenize, hash, rank).");
    uint64_t cum = 0;
    for (int k = 0; k < ROUTER_LAT_BUCKETS; k++) {
        cum += r->lat_hist[k];
        put(&m, "weft_router_overhead_seconds_bucket{le=\"%g\"} %llu\n", router_lat_bounds[k], (unsigned long long)cum);
    }
    cum += r->lat_hist[ROUTER_LAT_BUCKETS];
    put(&m, "weft_router_overhead_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    put(&m, "weft_router_overhead_seconds_sum %.9f\nweft_router_overhead_seconds_count %llu\n", r->lat_sum,
        (unsigned long long)r->lat_count);
    head(&m, "weft_router_upstream_errors_total", "counter", "Upstream requests that failed (connect, reset, timeout).");
    put(&m, "weft_router_upstream_errors_total %llu\n", (unsigned long long)r->upstream_errors);
    head(&m, "weft_router_client_disconnects_total", "counter", "Clients that left before their answer ended (upstream aborted).");
    put(&m, "weft_router_client_disconnects_total %llu\n", (unsigned long long)r->client_gone);
    head(&m, "weft_router_instances", "gauge", "Instances known to the router.");
    put(&m, "weft_router_instances %u\n", f->n);
    head(&m, "weft_router_index_bytes", "gauge", "Memory held by the prefix indexes.");
    put(&m, "weft_router_index_bytes %zu\n", fleet_index_bytes(f));
    /* per instance, as the router sees it */
    struct { const char *name, *help; } g[] = {
        {"weft_router_instance_up", "1 when the last /load poll answered."},
        {"weft_router_instance_running", "Running requests (reported)."},
        {"weft_router_instance_waiting", "Waiting requests (reported)."},
        {"weft_router_instance_queued_prefill_tokens", "Queued prompt tokens (reported)."},
        {"weft_router_instance_inflight", "Requests the router has dispatched there and not seen end."},
        {"weft_router_instance_prefill_tokens_per_second", "Measured prefill rate (reported)."},
        {"weft_router_instance_decode_tokens_per_second", "Measured decode rate (reported)."},
        {"weft_router_instance_index_blocks", "Blocks in the router's index of the instance."},
        {"weft_router_instance_kv_events_synced", "1 when the index follows the instance's KV events."},
    };
    for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) {
        head(&m, g[k].name, "gauge", g[k].help);
        for (uint32_t i = 0; i < f->n; i++) {
            const struct fleet_instance *in = f->inst[i];
            double v = 0;
            switch (k) {
            case 0: v = in->healthy; break;
            case 1: v = in->load.running; break;
            case 2: v = in->load.waiting; break;
            case 3: v = (double)in->load.queued_prefill_tokens; break;
            case 4: v = in->own_running + in->own_waiting; break;
            case 5: v = in->load.prefill_tps; break;
            case 6: v = in->load.decode_tps; break;
            case 7: v = in->ix.n; break;
            case 8: v = in->ev_synced; break;
            }
            put(&m, "%s{instance=\"%s\",device=\"%s\",vendor=\"%s\"} %g\n", g[k].name, in->name, in->load.device,
                in->load.vendor, v);
        }
    }
    head(&m, "weft_router_instance_kv_event_gaps_total", "counter", "Gaps seen in an instance's KV event stream (each resynced).");
    for (uint32_t i = 0; i < f->n; i++)
        put(&m, "weft_router_instance_kv_event_gaps_total{instance=\"%s\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->ev_gaps);
    head(&m, "weft_router_instance_kv_resyncs_total", "counter", "Index snapshots loaded from an instance.");
    for (uint32_t i = 0; i < f->n; i++)
        put(&m, "weft_router_instance_kv_resyncs_total{instance=\"%s\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->resyncs);
    if (m.oom) {
        free(m.b);
        return NULL;
    }
    *len = m.len;
    return m.b;
}
