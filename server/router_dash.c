/* weft router's dashboard (server/dash.h): the page at GET / and the state
 * it polls at GET /fleet, one JSON object made from what the router already
 * holds (each instance's last /load report, its own in-flight accounting,
 * circuit, counters). Counters are cumulative: the page turns them into
 * rates over its own polling interval, so the router keeps no history. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/dash.h"
#include "server/router_internal.h"

const char *weft_dash_instance_state(const struct fleet *f, const struct fleet_instance *in, double now)
{
    double stale = f->cfg.stale_s > 0 ? f->cfg.stale_s : 2.0;  /* core/route.c's default */
    if (!in->has_load && in->healthy) return "starting";
    if (!in->healthy) return in->has_load ? "down" : "starting";
    if (in->circuit == FLEET_CIRCUIT_OPEN) return "open";
    if (in->circuit == FLEET_CIRCUIT_HALF_OPEN) return "half_open";
    if (in->load.draining) return "draining";
    if (!(now - in->load_at <= stale)) return "stale";
    return "up";
}

static const char *circuit_name(enum fleet_circuit c)
{
    return c == FLEET_CIRCUIT_OPEN ? "open" : c == FLEET_CIRCUIT_HALF_OPEN ? "half_open" : "closed";
}

/* One instance; NULL when out of memory. */
static json_t *instance_json(const struct fleet *f, const struct fleet_instance *in, double now)
{
    const struct fleet_load *l = &in->load;
    json_t *j = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:b,s:s,s:b,s:b,"
        "s:i,s:i,s:i,s:I,s:i,s:i,"
        "s:{s:i,s:i,s:I},"
        "s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i},"
        "s:f,s:f,"
        "s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}",
        "name", in->name, "url", in->url, "device", l->device, "vendor", l->vendor, "backend", l->backend, "role",
        l->role[0] ? l->role : "both", "model", l->model, "state", weft_dash_instance_state(f, in, now), "healthy",
        in->healthy, "circuit", circuit_name(in->circuit), "draining", l->draining, "removed", in->removed,
        "running", (int)l->running, "waiting", (int)l->waiting, "tokenizing", (int)l->tokenizing,
        "queued_prefill_tokens", (json_int_t)l->queued_prefill_tokens, "max_seqs", (int)l->max_seqs, "n_ctx",
        (int)l->n_ctx,
        "own", "running", (int)in->own_running, "waiting", (int)in->own_waiting, "queued_tokens",
        (json_int_t)in->own_queued,
        "kv", "block_tokens", (int)l->block_tokens, "used", (int)l->kv_used, "cached", (int)l->kv_cached, "free",
        (int)l->kv_free, "total", (int)l->kv_total, "host_used", (int)l->host_used, "host_total", (int)l->host_total,
        "prefill_tokens_per_s", l->prefill_tps, "decode_tokens_per_s", l->decode_tps,
        "requests", (json_int_t)in->requests, "prompt_tokens", (json_int_t)in->prompt_tokens, "uncached_tokens",
        (json_int_t)in->uncached_tokens, "errors", (json_int_t)in->errors, "failures", (json_int_t)in->failures,
        "circuit_opens", (json_int_t)in->circuit_opens, "completion_tokens", (json_int_t)in->completion_tokens,
        "ttft_count", (json_int_t)in->ttft_count, "ttft_sum_s", in->ttft_sum);
    if (!j) return NULL;
    /* the report's age: null before the first one; the class it scales in (as /metrics labels it) */
    if (json_object_set_new(j, "load_age_s", in->has_load ? json_real(now - in->load_at) : json_null()) != 0 ||
        json_object_set_new(j, "device_class", json_string(weft_fleet_instance_class(in))) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *weft_dash_fleet_instances(const struct fleet *f, double now)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < f->n; i++) {
        json_t *o = instance_json(f, f->inst[i], now);
        if (!o || json_array_append_new(a, o) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* GET /fleet's body; NULL when out of memory. */
static json_t *fleet_json(struct weft_router *r)
{
    double now = weft_router_now(r);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    json_t *inst = weft_dash_fleet_instances(&r->fleet, now);
    if (!inst) return NULL;
    /* an instance serving another model is polled but never routed to: say so */
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        const struct inst_io *io = weft_router_io(r->fleet.inst[i]);
        if (io && io->fp_warned) json_object_set_new(json_array_get(inst, i), "foreign_model", json_true());
    }
    uint64_t routed = 0, shed = 0, completion = 0;
    for (int k = 0; k < 4; k++) routed += r->fleet.decisions[k];
    for (int k = 0; k < SHED_N; k++) shed += r->shed[k];
    for (uint32_t i = 0; i < r->fleet.n; i++) completion += r->fleet.inst[i]->completion_tokens;
    const char *model = "";
    for (uint32_t i = 0; i < r->fleet.n && !model[0]; i++) model = r->fleet.inst[i]->load.model;
    return json_pack("{s:s,s:I,s:f,s:s,s:s,s:s,s:b,"
                     "s:I,s:I,s:I,s:I,s:I,"
                     "s:{s:i,s:i,s:I,s:I},"
                     "s:{s:I,s:f},"
                     "s:o}",
                     "object", "weft.fleet", "time_ms", (json_int_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                     "uptime_s", now, "policy", weft_route_policy_name(r->fleet.cfg.policy), "model", model,
                     "fingerprint", r->fingerprint, "draining", r->draining,
                     "http_requests", (json_int_t)r->requests, "routed", (json_int_t)routed, "rejected",
                     (json_int_t)r->rejected, "no_instance", (json_int_t)r->fleet.no_instance, "completion_tokens",
                     (json_int_t)completion,
                     "queue", "depth", (int)r->q_len, "max", (int)(r->cfg.queue_max ? r->cfg.queue_max : 1024),
                     "queued_total", (json_int_t)r->queued_total, "shed", (json_int_t)shed,
                     "ttft", "count", (json_int_t)r->ttft_count, "sum_s", r->ttft_sum,
                     "instances", inst);
}

int weft_router_dash_respond(struct weft_router *r, struct http_conn *c, bool page)
{
    if (page) {
        weft_http_respond(c, 200, "text/html; charset=utf-8", DASH_PAGE_HEADERS, weft_dash_router_html, weft_dash_router_html_len);
        return 200;
    }
    json_t *j = fleet_json(r);
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!b) {
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return 503;
    }
    weft_http_respond(c, 200, "application/json", "Cache-Control: no-store\r\n", b, strlen(b));
    free(b);
    return 200;
}
