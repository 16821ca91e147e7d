#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[METRIC_HIST_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
                                                        1, 2.5, 5, 10, 20, 40, 80};
static const double itl_bounds[METRIC_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06,
                                                       0.08, 0.1, 0.15, 0.25, 0.5, 1, 2.5};
static const double e2e_bounds[METRIC_HIST_BUCKETS] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120, 300};

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof *m);
    m->ttft.bounds = ttft_bounds;
    m->itl.bounds = itl_bounds;
    m->e2e.bounds = e2e_bounds;
}

void metrics_request(struct metrics *m, const char *endpoint, int status)
{
    for (uint32_t i = 0; i < m->n_reqs; i++)
        if (m->reqs[i].status == status && !strcmp(m->reqs[i].endpoint, endpoint)) {
            m->reqs[i].n++;
            return;
        }
    if (m->n_reqs == sizeof m->reqs / sizeof m->reqs[0]) return;  /* bounded: endpoints are a fixed set */
    struct metric_req_key *k = &m->reqs[m->n_reqs++];
    snprintf(k->endpoint, sizeof k->endpoint, "%s", endpoint);
    k->status = status;
    k->n = 1;
}

void metrics_observe(struct metric_hist *h, double s)
{
    int i = 0;
    while (i < METRIC_HIST_BUCKETS && s > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += s;
    h->n++;
}

struct sbuf { char *p; size_t len, cap; bool oom; };

static void put(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = true; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
}

static void hist(struct sbuf *b, const char *name, const char *help, const struct metric_hist *h)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < METRIC_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[METRIC_HIST_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
        name, (unsigned long long)h->n);
}

static void one(struct sbuf *b, const char *name, const char *type, const char *help, double v)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *metrics_render(const struct metrics *m, const struct weft_engine_stats *es, uint64_t kv_bytes,
                     uint64_t weight_bytes, size_t *len)
{
    struct sbuf b = {malloc(8192), 0, 8192, false};
    if (!b.p) return NULL;
    put(&b, "# HELP weft_requests_total HTTP requests by endpoint and status.\n# TYPE weft_requests_total counter\n");
    for (uint32_t i = 0; i < m->n_reqs; i++)
        put(&b, "weft_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->reqs[i].endpoint, m->reqs[i].status,
            (unsigned long long)m->reqs[i].n);
    one(&b, "weft_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)m->prompt_tokens);
    one(&b, "weft_generation_tokens_total", "counter", "Generated tokens sent.", (double)m->generation_tokens);
    one(&b, "weft_rejected_rate_limit_total", "counter", "Requests refused by a tenant's rate limit (429).",
        (double)m->rejected_rate);
    one(&b, "weft_rejected_queue_full_total", "counter", "Requests refused because the queue was full (503).",
        (double)m->rejected_queue);
    one(&b, "weft_rejected_auth_total", "counter", "Requests refused for a missing or wrong API key (401).",
        (double)m->rejected_auth);
    one(&b, "weft_client_disconnects_total", "counter", "Requests aborted because the client went away.",
        (double)m->client_disconnects);
    one(&b, "weft_rejected_connections_total", "counter",
        "Connections refused past the per-client connection limit (429).", (double)m->rejected_conns);
    one(&b, "weft_slow_client_aborts_total", "counter",
        "Streams ended because the client did not read (more than --max-stream-buffer queued).",
        (double)m->slow_client_aborts);
    hist(&b, "weft_time_to_first_token_seconds", "Time from request to first token.", &m->ttft);
    hist(&b, "weft_inter_token_latency_seconds", "Time between consecutive tokens of a request.", &m->itl);
    hist(&b, "weft_request_duration_seconds", "Time from request to last token.", &m->e2e);
    one(&b, "weft_requests_running", "gauge", "Requests being computed.", es->running);
    one(&b, "weft_requests_waiting", "gauge", "Requests queued (including preempted).", es->waiting);
    one(&b, "weft_requests_swapped", "gauge", "Preempted requests whose KV is in host memory.", es->swapped);
    one(&b, "weft_kv_blocks_used", "gauge", "KV blocks referenced by sequences.", es->kv.used);
    one(&b, "weft_kv_blocks_free", "gauge", "KV blocks never used or released unregistered.", es->kv.free);
    one(&b, "weft_kv_blocks_cached", "gauge", "Free KV blocks kept for prefix reuse.", es->kv.cached);
    one(&b, "weft_kv_blocks_total", "gauge", "KV blocks in the device pool.", es->kv.n_blocks);
    one(&b, "weft_kv_host_blocks_used", "gauge", "Host-tier KV blocks holding swapped sequences.", es->kv.host_used);
    one(&b, "weft_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
        (double)es->prefix_hit_tokens);
    one(&b, "weft_prefill_tokens_total", "counter", "Prompt tokens computed.", (double)es->prefill_tokens);
    one(&b, "weft_preemptions_total", "counter", "Sequences preempted (swap or recompute).",
        (double)(es->preempt_swap + es->preempt_recompute));
    one(&b, "weft_engine_steps_total", "counter", "Engine steps run.", (double)es->steps);
    one(&b, "weft_engine_step_tokens_total", "counter", "Tokens computed over all steps.", (double)es->step_tokens);
    put(&b, "# HELP weft_device_memory_bytes Device memory held, by use.\n# TYPE weft_device_memory_bytes gauge\n"
            "weft_device_memory_bytes{use=\"weights\"} %llu\nweft_device_memory_bytes{use=\"kv_cache\"} %llu\n",
        (unsigned long long)weight_bytes, (unsigned long long)kv_bytes);
    if (b.oom) { free(b.p); return NULL; }
    *len = b.len;
    return b.p;
}
