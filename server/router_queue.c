/* weft router's queue for an overloaded fleet.
 *
 * A request goes to an instance at once while some instance has room for
 * it; when every usable instance is saturated (all its sequence slots busy
 * and --saturate-waiting requests waiting there, by its report or by what
 * the router sent it since; or no KV block free with requests waiting) it
 * waits here instead, and is bound to an instance only when one has room:
 * the routing decision happens then (late binding keeps prefix affinity).
 * An instance also has room for a request that outranks one the router has
 * running there, when the router passes priorities on (a trusted upstream
 * key: weft serve preempts the lower priority).
 *
 * Order: strict priority between levels; within a level, fair between
 * tenants (the tenant served longest ago goes first), first come first
 * served within a tenant. Bounds: --queue-max in all and
 * --queue-per-tenant per tenant; past them the lowest priority is shed
 * first (a newcomer that outranks the lowest queued request takes its
 * place), with 503 and Retry-After = the predicted drain time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/router_internal.h"

static uint32_t cfg_sat(const struct weft_router *r) { return r->cfg.saturate_waiting ? r->cfg.saturate_waiting : 2; }
static uint32_t cfg_max(const struct weft_router *r) { return r->cfg.queue_max ? r->cfg.queue_max : 1024; }
static uint32_t cfg_per(const struct weft_router *r) { return r->cfg.queue_per_tenant ? r->cfg.queue_per_tenant : 256; }

static bool usable(const struct fleet_instance *in)
{
    return in->has_load && in->healthy && !in->load.draining && in->circuit != FLEET_CIRCUIT_OPEN;
}

static bool saturated(const struct weft_router *r, const struct fleet_instance *in)
{
    /* half-open with its one trial request in flight: it takes no other until that ends */
    if (in->circuit == FLEET_CIRCUIT_HALF_OPEN && in->probing) return true;
    uint32_t running = in->load.running > in->own_running ? in->load.running : in->own_running;
    uint32_t waiting = in->load.waiting > in->own_waiting ? in->load.waiting : in->own_waiting;
    uint32_t slots = in->load.max_seqs ? in->load.max_seqs : 64;
    if (running >= slots && waiting >= cfg_sat(r)) return true;
    return in->load.kv_total && in->load.kv_free == 0 && waiting > 0;
}

bool weft_router_saturated_for(struct weft_router *r, int32_t prio)
{
    uint32_t n_usable = 0;
    for (uint32_t i = 0; i < r->fleet.n; i++) {
        struct fleet_instance *in = r->fleet.inst[i];
        if (!usable(in)) continue;
        n_usable++;
        if (!saturated(r, in)) return false;
        /* it would preempt a lower priority there, if the instance takes the
         * priority from the router (it trusts the router's key) */
        struct inst_io *io = r->upstream_auth ? weft_router_io(in) : NULL;
        for (struct pxy *x = io ? io->inflight : NULL; x; x = x->io_next)
            if (x->prio < prio) return false;
    }
    /* none usable: held for one to come up with --hold-empty-s (or, before
     * the first, --hold-startup-s), else not a queueing matter (the
     * decision answers 503) */
    if (n_usable) r->ever_up = true;
    return n_usable > 0 || (weft_router_hold_s(r) > 0 && !r->draining);
}

uint32_t weft_router_hold_s(const struct weft_router *r)
{
    uint32_t hold = r->cfg.hold_empty_s;
    if (!r->ever_up && r->cfg.hold_startup_s > hold) hold = r->cfg.hold_startup_s;
    return hold;
}

static struct qtenant *qt_get(struct weft_router *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_qt; i++)
        if (!strcmp(r->qt[i].name, name)) return &r->qt[i];
    if (r->n_qt == ROUTER_MAX_QTENANTS) {
        /* reuse an entry nobody is queued under */
        for (uint32_t i = 0; i < r->n_qt; i++)
            if (!r->qt[i].queued) {
                snprintf(r->qt[i].name, sizeof r->qt[i].name, "%s", name);
                r->qt[i].served = 0;
                return &r->qt[i];
            }
        return &r->qt[ROUTER_MAX_QTENANTS - 1];
    }
    struct qtenant *t = &r->qt[r->n_qt++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

static const char *who(const struct pxy *x) { return x->qname; }

/* Seconds until the queue ahead would drain: requests ahead x the mean
 * request time / the sequences the usable fleet runs at once; at least 1. */
int weft_router_queue_drain_s(const struct weft_router *r, uint32_t ahead)
{
    double slots = 0;
    for (uint32_t i = 0; i < r->fleet.n; i++)
        if (usable(r->fleet.inst[i])) slots += r->fleet.inst[i]->load.max_seqs ? r->fleet.inst[i]->load.max_seqs : 64;
    double dur = r->dur_mean > 0 ? r->dur_mean : 1.0;
    double t = slots > 0 ? (double)(ahead + 1) * dur / slots : 5.0;
    if (!(t >= 1)) return 1;
    return t > 3600 ? 3600 : (int)ceil(t);
}

static void unlink_q(struct weft_router *r, struct pxy *x)
{
    if (x->q_prev) x->q_prev->q_next = x->q_next;
    else r->q_head = x->q_next;
    if (x->q_next) x->q_next->q_prev = x->q_prev;
    else r->q_tail = x->q_prev;
    x->q_prev = x->q_next = NULL;
    x->queued = false;
    r->q_len--;
    struct qtenant *t = qt_get(r, who(x));
    if (t->queued) t->queued--;
}

void weft_router_queue_remove(struct pxy *x)
{
    if (x->queued) unlink_q(x->r, x);
}

static void shed(struct pxy *x, int reason)
{
    struct weft_router *r = x->r;
    r->shed[reason]++;
    char hdr[64], msg[200];
    snprintf(hdr, sizeof hdr, "Retry-After: %d\r\n", weft_router_queue_drain_s(r, r->q_len));
    snprintf(msg, sizeof msg, "%s",
             reason == SHED_TENANT_FULL ? "the fleet is saturated and this tenant's share of the router's queue is full"
             : reason == SHED_DISPLACED ? "the fleet is saturated: a higher-priority request took this one's place"
             : reason == SHED_NO_INSTANCE ? "no instance came up to take the request"
                                        : "the fleet is saturated and the router's queue is full");
    weft_router_reply_busy(x, hdr, msg);
}

void weft_router_queue_add(struct pxy *x)
{
    struct weft_router *r = x->r;
    struct qtenant *t = qt_get(r, who(x));
    if (t->queued >= cfg_per(r)) {
        shed(x, SHED_TENANT_FULL);
        return;
    }
    if (r->q_len >= cfg_max(r)) {
        struct pxy *low = r->q_tail;  /* the lowest priority, the latest of it */
        if (!low || low->prio >= x->prio) {
            shed(x, SHED_QUEUE_FULL);
            return;
        }
        unlink_q(r, low);
        shed(low, SHED_DISPLACED);
        t = qt_get(r, who(x));
    }
    /* after the last of the same or higher priority */
    struct pxy *after = r->q_tail;
    while (after && after->prio < x->prio) after = after->q_prev;
    x->q_prev = after;
    x->q_next = after ? after->q_next : r->q_head;
    if (x->q_next) x->q_next->q_prev = x;
    else r->q_tail = x;
    if (after) after->q_next = x;
    else r->q_head = x;
    x->queued = true;
    x->t_queued = weft_router_now(r);
    r->q_len++;
    r->queued_total++;
    t->queued++;
}

static void pump(uv_timer_t *tm)
{
    struct weft_router *r = tm->data;
    r->pump_armed = false;
    while (r->q_head) {
        int32_t top = r->q_head->prio;
        if (weft_router_saturated_for(r, top)) break;
        /* within the top level: the tenant served longest ago, its oldest request */
        struct pxy *pick = NULL;
        uint64_t best = UINT64_MAX;
        for (struct pxy *x = r->q_head; x && x->prio == top; x = x->q_next) {
            uint64_t s = qt_get(r, who(x))->served;
            if (s < best) best = s, pick = x;
        }
        unlink_q(r, pick);
        qt_get(r, who(pick))->served = ++r->q_tick;
        pick->from_queue = true;
        double waited = weft_router_now(r) - pick->t_queued;
        r->q_wait_sum += waited;
        r->q_wait_n++;
        weft_router_dispatch(pick);
    }
}

void weft_router_queue_kick(struct weft_router *r)
{
    if (!r->q_head || r->pump_armed || r->stopped) return;
    r->pump_armed = true;
    uv_timer_start(&r->pump_timer, pump, 0, 0);
}

void weft_router_queue_expire(struct weft_router *r)
{
    bool any = false;
    for (uint32_t i = 0; i < r->fleet.n && !any; i++) any = usable(r->fleet.inst[i]);
    double now = weft_router_now(r);
    if (any) {
        r->empty_since = 0;
        r->ever_up = true;
        return;
    }
    if (r->empty_since == 0) r->empty_since = now;
    double hold = weft_router_hold_s(r);
    struct pxy *x = r->q_head;
    while (x) {
        struct pxy *next = x->q_next;
        double since = x->t_queued > r->empty_since ? x->t_queued : r->empty_since;
        if (r->draining || now - since >= hold) {
            unlink_q(r, x);
            shed(x, SHED_NO_INSTANCE);
        }
        x = next;
    }
}

bool weft_router_queue_wants(struct weft_router *r, const struct pxy *x)
{
    if (x->from_queue) return false;
    /* behind those already waiting at its level or above (first come first served) */
    if (r->q_head && r->q_head->prio >= x->prio) return true;
    return weft_router_saturated_for(r, x->prio);
}
