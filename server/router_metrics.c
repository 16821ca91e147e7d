/* weft router's /metrics (Prometheus text): requests by instance, policy
 * decisions by reason, predicted vs actual cached tokens, the router-added
 * latency histogram, per-instance load as the router sees it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/router_internal.h"

#include "base/buf.h"

static void head(struct weft_strbuf *m, const char *name, const char *type, const char *help)
{
    weft_sb_printf(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

struct scale_class *weft_router_class(struct weft_router *r, const struct fleet_instance *in)
{
    const char *name = weft_fleet_instance_class(in);
    for (uint32_t i = 0; i < r->n_classes; i++)
        if (!strcmp(r->classes[i].name, name)) {
            if (in && in->load.max_seqs > r->classes[i].max_seqs) r->classes[i].max_seqs = in->load.max_seqs;
            return &r->classes[i];
        }
    if (r->n_classes == ROUTER_MAX_CLASSES) return &r->classes[ROUTER_MAX_CLASSES - 1];
    struct scale_class *c = &r->classes[r->n_classes++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    if (in) c->max_seqs = in->load.max_seqs;
    return c;
}

/* Refusals count in one-minute windows (this one and the last). */
static void class_roll(struct scale_class *c, double now)
{
    if (c->win_start == 0) c->win_start = now;
    while (now - c->win_start >= 60) {
        c->win_prev = now - c->win_start >= 120 ? 0 : c->win_now;
        c->win_now = 0;
        c->win_start = now - c->win_start >= 120 ? now : c->win_start + 60;
    }
}

void weft_router_scale_signal(struct weft_router *r, const struct fleet_instance *in, int reason)
{
    struct scale_class *c = weft_router_class(r, in);
    double now = weft_router_now(r);
    class_roll(c, now);
    c->signals[reason]++;
    c->win_now++;
}

/* Instances of a class it would take to serve what it refused (Little's
 * law): refused requests per second over the last minute x the seconds a
 * request takes there / the sequences one instance runs at once. */
static uint32_t desired_extra(struct scale_class *c, double now)
{
    class_roll(c, now);
    double span = now - c->win_start + (c->win_prev ? 60 : 0);
    if (span < 1) span = 1;
    double rate = (double)(c->win_now + c->win_prev) / span;
    if (rate <= 0) return 0;
    double dur = c->dur_mean > 0 ? c->dur_mean : 1.0;
    double per = c->max_seqs ? c->max_seqs : 1;
    double n = rate * dur / per;
    return n > 1000 ? 1000 : (uint32_t)ceil(n);
}

static void label_value(char *out, size_t cap, const char *v)
{
    size_t k = 0;
    for (; *v && k + 3 < cap; v++) {
        if (*v == '"' || *v == '\\') out[k++] = '\\';
        if (*v == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
            continue;
        }
        out[k++] = *v;
    }
    out[k] = 0;
}

static void failover_metrics(struct weft_strbuf *m, struct weft_router *r)
{
    const struct fleet *f = &r->fleet;
    static const char *rr[RETRY_N] = {"connect", "5xx", "busy", "no_kv_room", "hang", "invalid"};
    static const char *mr[MIG_N] = {"died", "hang", "error_event", "stall", "invalid"};
    static const char *so[SO_N] = {"no_kv_room", "busy", "no_instance"};
    head(m, "weft_router_retries_total", "counter",
         "Requests sent to another instance before their first byte, by why the last one did not answer.");
    for (int k = 0; k < RETRY_N; k++)
        weft_sb_printf(m, "weft_router_retries_total{reason=\"%s\"} %llu\n", rr[k], (unsigned long long)r->retries[k]);
    head(m, "weft_router_migrations_total", "counter",
         "Streams continued on another instance after their first byte (weft.continue), by why.");
    for (int k = 0; k < MIG_N; k++)
        weft_sb_printf(m, "weft_router_migrations_total{reason=\"%s\"} %llu\n", mr[k], (unsigned long long)r->migrations[k]);
    head(m, "weft_router_migration_limit_total", "counter",
         "Streams ended with an error event because they had moved --max-migrations times.");
    weft_sb_printf(m, "weft_router_migration_limit_total %llu\n", (unsigned long long)r->migration_limit);
    head(m, "weft_router_failover_exhausted_total", "counter",
         "Requests that failed over and found no other instance to take them.");
    weft_sb_printf(m, "weft_router_failover_exhausted_total %llu\n", (unsigned long long)r->failover_exhausted);
    head(m, "weft_router_admission_total", "counter",
         "Generation requests at the router's tenant buckets: admitted, throttled (429 with a Retry-After "
         "reservation), too_large (more than the tenant's whole budget: 429 at once).");
    weft_sb_printf(m, "weft_router_admission_total{result=\"admitted\"} %llu\n", (unsigned long long)r->admitted);
    weft_sb_printf(m, "weft_router_admission_total{result=\"throttled\"} %llu\n", (unsigned long long)r->throttled[THROTTLE_RATE]);
    weft_sb_printf(m, "weft_router_admission_total{result=\"too_large\"} %llu\n",
        (unsigned long long)r->throttled[THROTTLE_TOO_LARGE]);
    head(m, "weft_router_queue_depth", "gauge", "Requests waiting in the router's queue (the fleet saturated), by priority.");
    {
        int32_t last = 0;
        uint32_t n = 0;
        bool any = false;
        for (struct pxy *x = r->q_head; x; x = x->q_next) {
            if (any && x->prio != last) {
                weft_sb_printf(m, "weft_router_queue_depth{priority=\"%d\"} %u\n", last, n);
                n = 0;
            }
            last = x->prio, any = true, n++;
        }
        if (any) weft_sb_printf(m, "weft_router_queue_depth{priority=\"%d\"} %u\n", last, n);
        else weft_sb_printf(m, "weft_router_queue_depth{priority=\"0\"} 0\n");
    }
    head(m, "weft_router_queue_tenant_depth", "gauge", "Requests waiting in the router's queue, by tenant.");
    for (uint32_t i = 0; i < r->n_qt; i++) {
        char lv[200];
        label_value(lv, sizeof lv, r->qt[i].name);
        weft_sb_printf(m, "weft_router_queue_tenant_depth{tenant=\"%s\"} %u\n", lv, r->qt[i].queued);
    }
    head(m, "weft_router_queued_total", "counter", "Requests that waited in the router's queue.");
    weft_sb_printf(m, "weft_router_queued_total %llu\n", (unsigned long long)r->queued_total);
    head(m, "weft_router_queue_wait_seconds", "summary", "Time requests waited in the router's queue.");
    weft_sb_printf(m, "weft_router_queue_wait_seconds_sum %.6f\nweft_router_queue_wait_seconds_count %llu\n", r->q_wait_sum,
        (unsigned long long)r->q_wait_n);
    head(m, "weft_router_shed_total", "counter",
         "Requests refused with 503 because the fleet was saturated and the queue full (queue_full), their "
         "tenant's share full (tenant_full), or a higher priority took their place (displaced), or because no instance came up within --hold-empty-s (no_instance).");
    static const char *sr[SHED_N] = {"queue_full", "tenant_full", "displaced", "no_instance"};
    for (int k = 0; k < SHED_N; k++)
        weft_sb_printf(m, "weft_router_shed_total{reason=\"%s\"} %llu\n", sr[k], (unsigned long long)r->shed[k]);
    head(m, "weft_router_circuit_state", "gauge", "Each instance's circuit breaker: 0 closed, 1 half-open, 2 open.");
    for (uint32_t i = 0; i < f->n; i++)
        weft_sb_printf(m, "weft_router_circuit_state{instance=\"%s\"} %d\n", f->inst[i]->name, (int)f->inst[i]->circuit);
    head(m, "weft_router_circuit_opens_total", "counter", "Times each instance's circuit opened.");
    for (uint32_t i = 0; i < f->n; i++)
        weft_sb_printf(m, "weft_router_circuit_opens_total{instance=\"%s\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->circuit_opens);
    head(m, "weft_router_instance_failures_total", "counter",
         "Requests that failed on each instance (connect errors, 5xx, broken or hung answers).");
    for (uint32_t i = 0; i < f->n; i++)
        weft_sb_printf(m, "weft_router_instance_failures_total{instance=\"%s\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->failures);
    head(m, "weft_router_scale_out_signals_total", "counter",
         "Requests refused for capacity, by reason and the refusing instances' device class "
         "(no_kv_room: its KV cache can never hold the request; busy: its queue is full; no_instance: nothing could "
         "take it).");
    double now = weft_router_now(r);
    for (uint32_t i = 0; i < r->n_classes; i++) {
        char lv[200];
        label_value(lv, sizeof lv, r->classes[i].name);
        for (int k = 0; k < SO_N; k++)
            weft_sb_printf(m, "weft_router_scale_out_signals_total{reason=\"%s\",device_class=\"%s\"} %llu\n", so[k], lv,
                (unsigned long long)r->classes[i].signals[k]);
    }
    head(m, "weft_router_desired_extra_instances", "gauge",
         "Extra instances per device class that would have served what was refused in the last minute "
         "(refusals per second x mean request seconds / max_seqs).");
    for (uint32_t i = 0; i < r->n_classes; i++) {
        char lv[200];
        label_value(lv, sizeof lv, r->classes[i].name);
        weft_sb_printf(m, "weft_router_desired_extra_instances{device_class=\"%s\"} %u\n", lv, desired_extra(&r->classes[i], now));
    }
    head(m, "weft_router_ttft_seconds", "histogram",
         "Time from a stream's arrival at the router to its first token leaving it (moves included).");
    uint64_t cum = 0;
    for (int k = 0; k < ROUTER_TTFT_BUCKETS; k++) {
        cum += r->ttft_hist[k];
        weft_sb_printf(m, "weft_router_ttft_seconds_bucket{le=\"%g\"} %llu\n", weft_router_ttft_bounds[k], (unsigned long long)cum);
    }
    weft_sb_printf(m, "weft_router_ttft_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)r->ttft_count);
    weft_sb_printf(m, "weft_router_ttft_seconds_sum %.6f\nweft_router_ttft_seconds_count %llu\n", r->ttft_sum,
        (unsigned long long)r->ttft_count);
}

char *weft_router_metrics_render(struct weft_router *r, size_t *len)
{
    struct weft_strbuf m = {0};
    const struct fleet *f = &r->fleet;
    head(&m, "weft_router_http_requests_total", "counter", "Requests answered by the router, by status class.");
    static const char *cls[6] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
    for (int k = 0; k < 6; k++) weft_sb_printf(&m, "weft_router_http_requests_total{code=\"%s\"} %llu\n", cls[k], (unsigned long long)r->by_status[k]);
    head(&m, "weft_router_requests_total", "counter", "Generation requests routed to each instance.");
    for (uint32_t i = 0; i < f->n; i++)
        weft_sb_printf(&m, "weft_router_requests_total{instance=\"%s\"} %llu\n", f->inst[i]->name, (unsigned long long)f->inst[i]->requests);
    head(&m, "weft_router_prompt_tokens_total", "counter", "Prompt tokens routed to each instance (kind: all, uncached as predicted).");
    for (uint32_t i = 0; i < f->n; i++) {
        weft_sb_printf(&m, "weft_router_prompt_tokens_total{instance=\"%s\",kind=\"all\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->prompt_tokens);
        weft_sb_printf(&m, "weft_router_prompt_tokens_total{instance=\"%s\",kind=\"uncached\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->uncached_tokens);
    }
    head(&m, "weft_router_decisions_total", "counter", "Routing decisions by reason.");
    for (int k = 0; k < 4; k++)
        weft_sb_printf(&m, "weft_router_decisions_total{policy=\"%s\",reason=\"%s\"} %llu\n", weft_route_policy_name(f->cfg.policy),
            weft_route_reason_name((enum weft_route_reason)k), (unsigned long long)f->decisions[k]);
    head(&m, "weft_router_no_instance_total", "counter", "Requests no instance could take (answered 503).");
    weft_sb_printf(&m, "weft_router_no_instance_total %llu\n", (unsigned long long)f->no_instance);
    head(&m, "weft_router_cached_tokens_total", "counter", "Prompt tokens predicted cached by the router and reported cached by the instance.");
    weft_sb_printf(&m, "weft_router_cached_tokens_total{kind=\"predicted\"} %llu\n", (unsigned long long)f->cached_predicted);
    weft_sb_printf(&m, "weft_router_cached_tokens_total{kind=\"actual\"} %llu\n", (unsigned long long)f->cached_actual);
    head(&m, "weft_router_cache_predictions_total", "counter", "Answers by how far the predicted cached tokens were from the instance's.");
    weft_sb_printf(&m, "weft_router_cache_predictions_total{result=\"exact\"} %llu\n", (unsigned long long)f->pred_exact);
    weft_sb_printf(&m, "weft_router_cache_predictions_total{result=\"within_block\"} %llu\n", (unsigned long long)f->pred_within_block);
    weft_sb_printf(&m, "weft_router_cache_predictions_total{result=\"off\"} %llu\n", (unsigned long long)f->pred_off);
    head(&m, "weft_router_overhead_seconds", "histogram", "Time from a request's arrival to its dispatch upstream (parse, tokenize, hash, rank).");
    uint64_t cum = 0;
    for (int k = 0; k < ROUTER_LAT_BUCKETS; k++) {
        cum += r->lat_hist[k];
        weft_sb_printf(&m, "weft_router_overhead_seconds_bucket{le=\"%g\"} %llu\n", weft_router_lat_bounds[k], (unsigned long long)cum);
    }
    cum += r->lat_hist[ROUTER_LAT_BUCKETS];
    weft_sb_printf(&m, "weft_router_overhead_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    weft_sb_printf(&m, "weft_router_overhead_seconds_sum %.9f\nweft_router_overhead_seconds_count %llu\n", r->lat_sum,
        (unsigned long long)r->lat_count);
    head(&m, "weft_router_pd_handoffs_total", "counter",
         "Prompts computed on a prefill instance for their decode instance, by the prefill side's result "
         "(failed: the decode instance was told to compute the rest).");
    weft_sb_printf(&m, "weft_router_pd_handoffs_total{result=\"ok\"} %llu\nweft_router_pd_handoffs_total{result=\"failed\"} %llu\n",
        (unsigned long long)r->pd_prefill_ok, (unsigned long long)r->pd_prefill_failed);
    head(&m, "weft_router_pd_started_total", "counter", "Prefill/decode hand-offs started.");
    weft_sb_printf(&m, "weft_router_pd_started_total %llu\n", (unsigned long long)r->pd_started);
    head(&m, "weft_router_pd_aborts_total", "counter", "Decode instances told to stop waiting for a failed prefill.");
    weft_sb_printf(&m, "weft_router_pd_aborts_total %llu\n", (unsigned long long)r->pd_aborts_sent);
    head(&m, "weft_router_upstream_errors_total", "counter", "Upstream requests that failed (connect, reset, timeout).");
    weft_sb_printf(&m, "weft_router_upstream_errors_total %llu\n", (unsigned long long)r->upstream_errors);
    head(&m, "weft_router_client_disconnects_total", "counter", "Clients that left before their answer ended (upstream aborted).");
    weft_sb_printf(&m, "weft_router_client_disconnects_total %llu\n", (unsigned long long)r->client_gone);
    head(&m, "weft_router_invalid_answers_total", "counter",
         "Answers from instances that were not what they said (a 200 whose JSON does not parse, an SSE event that "
         "is not JSON or never ends): never forwarded; the request moved or failed with 502.");
    weft_sb_printf(&m, "weft_router_invalid_answers_total %llu\n", (unsigned long long)r->invalid_answers);
    head(&m, "weft_router_identity_headers_dropped_total", "counter",
         "Requests whose x-weft-tenant or x-gateway-inference-fairness-id was dropped: the client's key is not a "
         "trusted one.");
    weft_sb_printf(&m, "weft_router_identity_headers_dropped_total %llu\n", (unsigned long long)r->identity_dropped);
    head(&m, "weft_router_instances", "gauge", "Instances known to the router.");
    weft_sb_printf(&m, "weft_router_instances %u\n", f->n);
    head(&m, "weft_router_index_bytes", "gauge", "Memory held by the prefix indexes.");
    weft_sb_printf(&m, "weft_router_index_bytes %zu\n", weft_fleet_index_bytes(f));
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
            char dv[200], cl[80];
            label_value(dv, sizeof dv, in->load.device);
            label_value(cl, sizeof cl, weft_fleet_instance_class(in));
            weft_sb_printf(&m, "%s{instance=\"%s\",device=\"%s\",vendor=\"%s\",device_class=\"%s\"} %g\n", g[k].name, in->name,
                dv, in->load.vendor, cl, v);
        }
    }
    head(&m, "weft_router_instance_kv_event_gaps_total", "counter", "Gaps seen in an instance's KV event stream (each resynced).");
    for (uint32_t i = 0; i < f->n; i++)
        weft_sb_printf(&m, "weft_router_instance_kv_event_gaps_total{instance=\"%s\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->ev_gaps);
    head(&m, "weft_router_instance_kv_resyncs_total", "counter", "Index snapshots loaded from an instance.");
    for (uint32_t i = 0; i < f->n; i++)
        weft_sb_printf(&m, "weft_router_instance_kv_resyncs_total{instance=\"%s\"} %llu\n", f->inst[i]->name,
            (unsigned long long)f->inst[i]->resyncs);
    failover_metrics(&m, r);
    if (m.oom) {
        weft_sb_free(&m);
        return NULL;
    }
    *len = m.len;
    return weft_sb_take(&m);
}
