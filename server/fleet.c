/* The router's fleet state and decisions (fleet.h). */
#include "server/fleet.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_client.h"
#include "server/prompt.h"

#define DEF_INDEX_MIN 4096u
#define DEF_INDEX_MAX (1u << 20)
#define MAX_PROMPT_BLOCKS (1u << 16)

static void copy_str(char *dst, size_t cap, json_t *v)
{
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static uint32_t u32_of(json_t *v) { return json_is_integer(v) && json_integer_value(v) > 0 ? (uint32_t)json_integer_value(v) : 0; }

bool weft_fleet_parse_load(const char *text, size_t len, struct fleet_load *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j || !json_is_object(j)) {
        snprintf(err, err_size, "/load is not a JSON object: %s", j ? "" : je.text);
        json_decref(j);
        return false;
    }
    json_t *kv = json_object_get(j, "kv"), *lim = json_object_get(j, "limits");
    json_t *pf = json_object_get(j, "prefill_tokens_per_s"), *dc = json_object_get(j, "decode_tokens_per_s");
    if (!json_is_object(kv) || !json_is_object(lim) || !json_is_number(pf) || !json_is_integer(json_object_get(j, "running"))) {
        snprintf(err, err_size, "/load lacks kv, limits, running or prefill_tokens_per_s");
        json_decref(j);
        return false;
    }
    copy_str(out->role, sizeof out->role, json_object_get(j, "role"));
    copy_str(out->model, sizeof out->model, json_object_get(j, "model"));
    copy_str(out->fingerprint, sizeof out->fingerprint, json_object_get(j, "fingerprint"));
    out->draining = json_is_true(json_object_get(j, "draining"));
    out->running = u32_of(json_object_get(j, "running"));
    out->waiting = u32_of(json_object_get(j, "waiting"));
    out->tokenizing = u32_of(json_object_get(j, "tokenizing"));
    json_t *q = json_object_get(j, "queued_prefill_tokens");
    out->queued_prefill_tokens = json_is_integer(q) && json_integer_value(q) > 0 ? (uint64_t)json_integer_value(q) : 0;
    out->prefill_tps = json_number_value(pf);
    out->decode_tps = json_is_number(dc) ? json_number_value(dc) : 0;
    out->decode_rows = u32_of(json_object_get(j, "decode_rows"));
    json_t *dr = json_object_get(j, "decode_row_tokens_per_s");
    out->decode_row_tps = json_is_number(dr) ? json_number_value(dr) : 0;
    out->block_tokens = u32_of(json_object_get(kv, "block_tokens"));
    out->ckpt_tokens = u32_of(json_object_get(kv, "state_checkpoint_tokens"));
    json_t *dev = json_object_get(kv, "device"), *host = json_object_get(kv, "host");
    out->kv_used = u32_of(json_object_get(dev, "used"));
    out->kv_cached = u32_of(json_object_get(dev, "cached"));
    out->kv_free = u32_of(json_object_get(dev, "free"));
    out->kv_total = u32_of(json_object_get(dev, "total"));
    out->host_used = u32_of(json_object_get(host, "used"));
    out->host_total = u32_of(json_object_get(host, "total"));
    out->max_seqs = u32_of(json_object_get(lim, "max_seqs"));
    out->max_waiting = u32_of(json_object_get(lim, "max_waiting"));
    out->n_ctx = u32_of(json_object_get(lim, "n_ctx"));
    json_t *d0 = json_array_get(json_object_get(j, "devices"), 0);
    copy_str(out->device, sizeof out->device, json_object_get(d0, "name"));
    copy_str(out->vendor, sizeof out->vendor, json_object_get(d0, "vendor"));
    copy_str(out->backend, sizeof out->backend, json_object_get(d0, "backend"));
    copy_str(out->device_class, sizeof out->device_class, json_object_get(j, "device_class"));
    json_decref(j);
    return true;
}

const char *weft_fleet_instance_class(const struct fleet_instance *in)
{
    if (!in || !in->has_load) return "";
    if (in->load.device_class[0]) return in->load.device_class;
    return in->load.device[0] ? in->load.device : in->load.backend;
}

void weft_fleet_init(struct fleet *f, const struct fleet_config *cfg)
{
    memset(f, 0, sizeof *f);
    if (cfg) f->cfg = *cfg;
    if (!f->cfg.index_min_blocks) f->cfg.index_min_blocks = DEF_INDEX_MIN;
    if (!f->cfg.index_max_blocks) f->cfg.index_max_blocks = DEF_INDEX_MAX;
    if (f->cfg.index_min_blocks > f->cfg.index_max_blocks) f->cfg.index_min_blocks = f->cfg.index_max_blocks;
}

static void instance_free(struct fleet_instance *in)
{
    weft_prefix_index_free(&in->ix);
    weft_prefix_index_free(&in->ckx);
    free(in->url);
    free(in->name);
    free(in);
}

void weft_fleet_instance_unref(struct fleet_instance *in)
{
    if (in && --in->refs == 0) instance_free(in);
}

void weft_fleet_free(struct fleet *f)
{
    for (uint32_t i = 0; i < f->n; i++) {
        f->inst[i]->removed = true;
        weft_fleet_instance_unref(f->inst[i]);
    }
    f->n = 0;
}

weft_status weft_fleet_add(struct fleet *f, const char *url, struct fleet_instance **out)
{
    if (out) *out = NULL;
    if (f->n == FLEET_MAX_INSTANCES) return weft_error(WEFT_ERR_BUSY, "router: at most %d instances", FLEET_MAX_INSTANCES);
    char *host;
    int port;
    if (!weft_hcl_parse_url(url, &host, &port)) return weft_error(WEFT_ERR_INVALID_ARG, "router: '%s' is not http://host:port", url);
    struct fleet_instance *in = calloc(1, sizeof *in);
    char name[300];
    snprintf(name, sizeof name, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    free(host);
    if (in) {
        in->url = strdup(url);
        in->name = strdup(name);
    }
    if (!in || !in->url || !in->name || weft_prefix_index_init(&in->ix, f->cfg.index_min_blocks) != WEFT_OK) {
        if (in) instance_free(in);
        return weft_error(WEFT_ERR_NOMEM, "router: out of memory for an instance");
    }
    in->refs = 1;
    f->inst[f->n++] = in;
    if (out) *out = in;
    return WEFT_OK;
}

struct fleet_instance *weft_fleet_find(const struct fleet *f, const char *url)
{
    for (uint32_t i = 0; i < f->n; i++)
        if (!strcmp(f->inst[i]->url, url)) return f->inst[i];
    return NULL;
}

void weft_fleet_remove(struct fleet *f, struct fleet_instance *in)
{
    for (uint32_t i = 0; i < f->n; i++)
        if (f->inst[i] == in) {
            memmove(f->inst + i, f->inst + i + 1, sizeof *f->inst * (f->n - i - 1));
            f->n--;
            in->removed = true;
            weft_fleet_instance_unref(in);
            return;
        }
}

void weft_fleet_apply_load(struct fleet *f, struct fleet_instance *in, const struct fleet_load *l, double now)
{
    in->load = *l;
    in->has_load = true;
    in->load_at = now;
    in->healthy = true;
    in->poll_failures = 0;
    /* the active check passed: an open circuit lets one request try it */
    if (in->circuit == FLEET_CIRCUIT_OPEN) {
        in->circuit = FLEET_CIRCUIT_HALF_OPEN;
        in->probing = false;
        in->consecutive_failures = 0;
    }
    /* what the instance can hold (device blocks are its prefix cache), plus
     * room for what is dispatched and not yet reported */
    uint64_t want = 2ull * l->kv_total;
    if (want < f->cfg.index_min_blocks) want = f->cfg.index_min_blocks;
    if (want > f->cfg.index_max_blocks) want = f->cfg.index_max_blocks;
    /* resize only on a real change, not on every poll's jitter */
    if (want > in->ix.cap || want < in->ix.cap / 2) weft_prefix_index_resize(&in->ix, (uint32_t)want);
}

void weft_fleet_poll_failed(struct fleet_instance *in)
{
    in->poll_failures++;
    in->healthy = false;
    /* never up yet (still starting): not a failure of the circuit's kind,
     * so its first good report lets it take traffic at once */
    if (!in->has_load) {
        in->probing = false;
        return;
    }
    if (in->circuit != FLEET_CIRCUIT_OPEN) {
        in->circuit = FLEET_CIRCUIT_OPEN;
        in->circuit_opens++;
    }
    in->probing = false;
}

void weft_fleet_request_result(struct fleet_instance *in, bool ok)
{
    if (ok) {
        in->consecutive_failures = 0;
        if (in->circuit == FLEET_CIRCUIT_HALF_OPEN) in->circuit = FLEET_CIRCUIT_CLOSED;
        in->probing = false;
        return;
    }
    in->failures++;
    in->consecutive_failures++;
    in->probing = false;
    if (in->circuit == FLEET_CIRCUIT_HALF_OPEN ||
        (in->circuit == FLEET_CIRCUIT_CLOSED && in->consecutive_failures >= FLEET_CIRCUIT_FAILURES)) {
        in->circuit = FLEET_CIRCUIT_OPEN;
        in->circuit_opens++;
    }
}

/* The checkpoint index, taken when first needed: an instance holds at most 4096 (core/kv.h);
 * NULL when out of memory (its hybrid prefixes then count no hit). */
#define CKPT_INDEX_CAP 4096u
static struct weft_prefix_index *ck_index(struct fleet_instance *in)
{
    if (!in->ckx.cap && weft_prefix_index_init(&in->ckx, CKPT_INDEX_CAP) != WEFT_OK) return NULL;
    return &in->ckx;
}

bool weft_fleet_kv_event(struct fleet_instance *in, uint64_t seq, enum weft_kv_event_kind kind, uint64_t hash)
{
    if (!in->ev_synced) return false;
    if (seq <= in->ev_seq) return true;  /* already in the snapshot */
    if (seq != in->ev_seq + 1) {
        in->ev_gaps++;
        in->ev_synced = false;
        return false;
    }
    in->ev_seq = seq;
    struct weft_prefix_index *ck = kind >= WEFT_KV_EVENT_CKPT_STORED ? ck_index(in) : NULL;
    switch (kind) {
    case WEFT_KV_EVENT_STORED: weft_prefix_index_insert(&in->ix, hash); break;
    case WEFT_KV_EVENT_REMOVED: weft_prefix_index_remove(&in->ix, hash); break;
    case WEFT_KV_EVENT_CKPT_STORED: if (ck) weft_prefix_index_insert(ck, hash); break;
    case WEFT_KV_EVENT_CKPT_REMOVED: if (ck) weft_prefix_index_remove(ck, hash); break;
    }
    in->ev_applied++;
    return true;
}

void weft_fleet_kv_snapshot_begin(struct fleet_instance *in)
{
    weft_prefix_index_clear(&in->ix);
    if (in->ckx.cap) weft_prefix_index_clear(&in->ckx);
    in->ev_synced = false;
}

void weft_fleet_kv_snapshot_block(struct fleet_instance *in, uint64_t hash) { weft_prefix_index_insert(&in->ix, hash); }

void weft_fleet_kv_snapshot_ckpt(struct fleet_instance *in, uint64_t hash)
{
    struct weft_prefix_index *ck = ck_index(in);
    if (ck) weft_prefix_index_insert(ck, hash);
}

void weft_fleet_kv_snapshot_end(struct fleet_instance *in, uint64_t seq)
{
    in->ev_seq = seq;
    in->ev_synced = true;
    in->resyncs++;
}

void weft_fleet_kv_unsynced(struct fleet_instance *in) { in->ev_synced = false; }

static bool usable(const struct fleet *f, const struct fleet_instance *in)
{
    (void)f;
    if (in->circuit == FLEET_CIRCUIT_OPEN) return false;
    if (in->circuit == FLEET_CIRCUIT_HALF_OPEN && in->probing) return false;  /* one trial at a time */
    return in->has_load && in->healthy && !in->load.draining;
}

static bool excluded(const struct fleet_instance *in, struct fleet_instance *const *except, uint32_t n_except)
{
    for (uint32_t i = 0; i < n_except; i++)
        if (except[i] == in) return true;
    return false;
}

/* Routing history: the prompt's full blocks will be on in, and on a hybrid its state
 * checkpoints: at multiples of its interval and at the prompt's last full block before its
 * last token (core/kv.h; its events correct both). */
static void history(struct fleet_instance *in, const uint64_t *hashes, uint32_t n_hashes, uint32_t n_prompt)
{
    weft_prefix_index_insert_chain(&in->ix, hashes, n_hashes);
    const uint32_t per = in->load.ckpt_tokens / 16, last = n_prompt ? (n_prompt - 1) / 16 : 0;
    struct weft_prefix_index *ck = per ? ck_index(in) : NULL;
    for (uint32_t k = 1; ck && k <= n_hashes && k <= last; k++)
        if (k % per == 0 || k == last) weft_prefix_index_insert(ck, hashes[k - 1]);
}

static weft_status decide(struct fleet *f, const uint64_t *hashes, uint32_t n_hashes, uint32_t n_prompt,
                          uint32_t max_tokens, double now, struct fleet_instance *const *except, uint32_t n_except,
                          struct fleet_decision *d)
{
    memset(d, 0, sizeof *d);
    struct weft_route_instance ri[FLEET_MAX_INSTANCES];
    struct weft_route_choice out[FLEET_MAX_INSTANCES];
    /* an instance not measured yet (started with --no-calibrate, no traffic
     * yet) counts at the fleet's mean measured rate, or 1000 tokens/s */
    double sum_p = 0, sum_d = 0;
    uint32_t n_p = 0, n_d = 0;
    for (uint32_t i = 0; i < f->n; i++) {
        if (f->inst[i]->load.prefill_tps > 0) sum_p += f->inst[i]->load.prefill_tps, n_p++;
        if (f->inst[i]->load.decode_tps > 0) sum_d += f->inst[i]->load.decode_tps, n_d++;
    }
    double def_p = n_p ? sum_p / n_p : 1000.0, def_d = n_d ? sum_d / n_d : 100.0;
    for (uint32_t i = 0; i < f->n; i++) {
        const struct fleet_instance *in = f->inst[i];
        const struct fleet_load *l = &in->load;
        struct weft_route_instance *r = &ri[i];
        memset(r, 0, sizeof *r);
        r->healthy = usable(f, in) && !excluded(in, except, n_except);
        r->age_s = now - in->load_at;
        r->prefill_tps = l->prefill_tps > 0 ? l->prefill_tps : def_p;
        r->decode_tps = l->decode_tps > 0 ? l->decode_tps : def_d;
        r->decode_row_tps = l->decode_row_tps;
        r->mean_gen_tokens = in->gen_mean;
        /* the report, or the router's own count when that is larger (dispatched since) */
        r->running = l->running > in->own_running ? l->running : in->own_running;
        r->waiting = l->waiting > in->own_waiting ? l->waiting : in->own_waiting;
        r->max_seqs = l->max_seqs;
        r->max_waiting = l->max_waiting;
        r->queued_prefill_tokens = l->queued_prefill_tokens > in->own_queued ? l->queued_prefill_tokens : in->own_queued;
        r->matched_blocks = n_hashes ? weft_prefix_index_match(&in->ix, hashes, n_hashes) : 0;
        if (l->ckpt_tokens && r->matched_blocks) {
            /* a hybrid resumes only after a block that ends at a state checkpoint, before the
             * prompt's last token (core/kv.h): a checkpoint counts like a block */
            const uint32_t most = n_prompt ? (n_prompt - 1) / 16 : 0;
            uint32_t k = r->matched_blocks < most ? r->matched_blocks : most;
            while (k && !(in->ckx.cap && weft_prefix_index_contains(&in->ckx, hashes[k - 1]))) k--;
            r->matched_blocks = k;
        }
        /* free blocks as reported, less what the router dispatched since (its uncached prompts) */
        uint64_t pending = in->own_queued / 16;
        r->kv_known = l->kv_total > 0;
        r->kv_free_blocks = l->kv_free > pending ? (uint32_t)(l->kv_free - pending) : 0;
        enum weft_route_role role = WEFT_ROUTE_ROLE_BOTH;
        r->role = weft_route_role_parse(l->role, &role) ? role : WEFT_ROUTE_ROLE_BOTH;
    }
    struct weft_route_config rc = {.policy = f->cfg.policy, .stale_s = f->cfg.stale_s, .rr_next = f->rr_next,
                                   .pd_slack = f->cfg.pd_slack};
    struct weft_route_request rq = {.n_prompt = n_prompt, .max_tokens = max_tokens};
    uint32_t k = 0;
    weft_status st = f->n ? weft_route_rank(&rc, &rq, ri, f->n, out, &k) : WEFT_OK;
    if (st != WEFT_OK) return st;
    if (k == 0) {
        f->no_instance++;
        return weft_error(WEFT_ERR_NO_ROOM, "router: no instance can take the request (%u known, none healthy "
                          "with room)", f->n);
    }
    if (f->cfg.policy == WEFT_ROUTE_ROUND_ROBIN) f->rr_next++;
    d->best = out[0];
    d->in = f->inst[out[0].index];
    d->in->refs++;
    if (k > 1) {
        d->second = out[1];
        d->runner_up = f->inst[out[1].index];
    }
    d->n_prompt = n_prompt;
    d->uncached = n_prompt - d->best.matched_tokens;
    struct weft_route_pd_choice pdc;
    if (f->cfg.pd_min_uncached && weft_route_pd(&rc, f->cfg.pd_min_uncached, &rq, ri, f->n, &out[0], &pdc)) {
        /* the prompt is computed there; the decoder computes its last part only */
        struct fleet_instance *p = f->inst[pdc.index];
        d->pd_in = p;
        d->pd = pdc;
        d->pd_measured = p->load.prefill_tps > 0;
        p->refs++;
        d->pd_uncached = n_prompt - pdc.matched_tokens;
        p->own_queued += d->pd_uncached;
        p->own_running++;
        p->requests++;
        p->prompt_tokens += n_prompt;
        p->uncached_tokens += d->pd_uncached;
        history(p, hashes, n_hashes, n_prompt);
        uint32_t tail = n_prompt - (n_prompt - 1) / WEFT_ROUTE_BLOCK_TOKENS * WEFT_ROUTE_BLOCK_TOKENS;
        if (d->uncached > tail) d->uncached = tail;
        f->pd_handoffs++;
    }
    struct fleet_instance *in = d->in;
    if (in->circuit == FLEET_CIRCUIT_HALF_OPEN) in->probing = true;
    /* in-flight, as core/route counts it */
    in->own_queued += d->uncached;
    if (in->load.max_seqs && in->own_running >= in->load.max_seqs) in->own_waiting++;
    else in->own_running++;
    in->requests++;
    in->prompt_tokens += n_prompt;
    in->uncached_tokens += d->uncached;
    history(in, hashes, n_hashes, n_prompt);
    f->decisions[d->best.reason]++;
    return WEFT_OK;
}

weft_status weft_fleet_decide_hashed(struct fleet *f, const uint64_t *hashes, uint32_t n_hashes, uint32_t n_prompt,
                                uint32_t max_tokens, double now, struct fleet_decision *d)
{
    return decide(f, hashes, n_hashes, n_prompt, max_tokens, now, NULL, 0, d);
}

weft_status weft_fleet_decide(struct fleet *f, const int32_t *ids, size_t n, uint32_t max_tokens, double now,
                         struct fleet_decision *d)
{
    return weft_fleet_decide_except(f, ids, n, max_tokens, now, NULL, 0, d);
}

weft_status weft_fleet_decide_except(struct fleet *f, const int32_t *ids, size_t n, uint32_t max_tokens, double now,
                                struct fleet_instance *const *except, uint32_t n_except, struct fleet_decision *d)
{
    uint32_t nb = (uint32_t)(n / 16 < MAX_PROMPT_BLOCKS ? n / 16 : MAX_PROMPT_BLOCKS);
    uint64_t stackbuf[256], *h = nb <= 256 ? stackbuf : malloc(sizeof(uint64_t) * nb);
    if (!h) return weft_error(WEFT_ERR_NOMEM, "router: out of memory");
    nb = weft_prompt_block_hashes(ids, n, h, nb);
    weft_status st = decide(f, h, nb, (uint32_t)n, max_tokens, now, except, n_except, d);
    if (h != stackbuf) free(h);
    return st;
}

void weft_fleet_first_token(struct fleet *f, struct fleet_decision *d)
{
    (void)f;
    if (!d->in || d->first_token_seen) return;
    d->first_token_seen = true;
    d->in->own_queued = d->in->own_queued > d->uncached ? d->in->own_queued - d->uncached : 0;
}

void weft_fleet_finished(struct fleet *f, struct fleet_decision *d, int64_t actual_cached, bool failed)
{
    struct fleet_instance *in = d->in;
    if (!in) return;
    weft_fleet_first_token(f, d);
    in->probing = false;
    if (in->own_waiting) in->own_waiting--;
    else if (in->own_running) in->own_running--;
    if (failed) in->errors++;
    if (!failed && d->generated > 0)
        in->gen_mean = in->gen_mean > 0 ? in->gen_mean + 0.05 * ((double)d->generated - in->gen_mean)
                                        : (double)d->generated;
    if (actual_cached >= 0) {
        uint64_t p = d->best.matched_tokens, a = (uint64_t)actual_cached;
        f->cached_predicted += p;
        f->cached_actual += a;
        uint64_t diff = p > a ? p - a : a - p;
        if (diff == 0) f->pred_exact++;
        else if (diff <= WEFT_ROUTE_BLOCK_TOKENS) f->pred_within_block++;
        else f->pred_off++;
    }
    d->in = NULL;
    d->runner_up = NULL;
    weft_fleet_instance_unref(in);
}

void weft_fleet_pd_finished(struct fleet *f, struct fleet_decision *d, bool failed)
{
    (void)f;
    struct fleet_instance *p = d->pd_in;
    if (!p) return;
    p->own_queued = p->own_queued > d->pd_uncached ? p->own_queued - d->pd_uncached : 0;
    if (p->own_running) p->own_running--;
    if (failed) p->errors++;
    d->pd_in = NULL;
    weft_fleet_instance_unref(p);
}

size_t weft_fleet_index_bytes(const struct fleet *f)
{
    size_t b = 0;
    for (uint32_t i = 0; i < f->n; i++) b += weft_prefix_index_bytes(&f->inst[i]->ix);
    return b;
}
