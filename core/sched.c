#include "core/sched.h"

#include <stdint.h>

#include <stdlib.h>
#include <string.h>

struct tenant {
    char name[WEFT_TENANT_NAME_MAX];
    struct weft_tenant_limits lim;
};

struct weft_sched {
    struct weft_sched_config cfg;
    struct weft_kv_pool *kv;
    struct weft_sched_req **running, **waiting;
    uint32_t n_running, n_waiting, cap_running, cap_waiting;
    struct weft_sched_item *items;
    uint32_t cap_items;
    struct tenant tenants[WEFT_SCHED_MAX_TENANTS];
    uint32_t n_tenants;
    uint64_t next_arrival, step_no;
    int32_t top_prio;            /* highest priority added so far (INT32_MIN: none) */
    uint32_t low_left;           /* low_prefill_tokens left in the step being planned */
    bool low_capped;             /* and it held a lower prompt back */
    struct weft_sched_stats st;
};

#define BT WEFT_KV_BLOCK_TOKENS

static uint32_t blocks_for(uint32_t n_tokens) { return (n_tokens + BT - 1) / BT; }

/* a before b: higher priority, then earlier arrival */
static bool before(const struct weft_sched_req *a, const struct weft_sched_req *b)
{
    return a->priority != b->priority ? a->priority > b->priority : a->arrival < b->arrival;
}

static weft_status q_reserve(struct weft_sched_req ***q, uint32_t *cap, uint32_t need)
{
    if (need <= *cap) return WEFT_OK;
    uint32_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    struct weft_sched_req **p = realloc(*q, sizeof *p * c);
    if (!p) return weft_error(WEFT_ERR_NOMEM, "sched: out of memory");
    *q = p;
    *cap = c;
    return WEFT_OK;
}

/* Insert in order; capacity must already be there. */
static void q_insert(struct weft_sched_req **q, uint32_t *n, struct weft_sched_req *r)
{
    uint32_t i = *n;
    while (i > 0 && before(r, q[i - 1])) {
        q[i] = q[i - 1];
        i--;
    }
    q[i] = r;
    (*n)++;
}

static bool q_remove(struct weft_sched_req **q, uint32_t *n, struct weft_sched_req *r)
{
    for (uint32_t i = 0; i < *n; i++) {
        if (q[i] != r) continue;
        memmove(q + i, q + i + 1, sizeof *q * (*n - i - 1));
        (*n)--;
        return true;
    }
    return false;
}

weft_status weft_sched_create(const struct weft_sched_config *cfg, struct weft_kv_pool *kv, struct weft_sched **out)
{
    *out = NULL;
    struct weft_sched_config c = *cfg;
    if (!c.max_step_tokens) c.max_step_tokens = 512;
    if (!c.max_running) c.max_running = 64;
    if (!c.max_waiting) c.max_waiting = 1024;
    if (!c.max_prefill_chunk || c.max_prefill_chunk > c.max_step_tokens) c.max_prefill_chunk = c.max_step_tokens;
    if (!c.n_ctx) return weft_error(WEFT_ERR_INVALID_ARG, "sched: n_ctx must be set");
    struct weft_sched *s = calloc(1, sizeof *s);
    if (!s) return weft_error(WEFT_ERR_NOMEM, "sched: out of memory");
    s->cfg = c;
    s->kv = kv;
    s->n_tenants = 1;  /* tenant 0: "" without limits */
    s->top_prio = INT32_MIN;
    s->cap_items = c.max_running;
    s->items = calloc(s->cap_items, sizeof *s->items);
    weft_status st = s->items ? WEFT_OK : weft_error(WEFT_ERR_NOMEM, "sched: out of memory");
    if (st == WEFT_OK) st = q_reserve(&s->running, &s->cap_running, c.max_running + 1);
    /* room for preempted requests on top of the bound, so preempting never fails */
    if (st == WEFT_OK) st = q_reserve(&s->waiting, &s->cap_waiting, c.max_waiting + c.max_running + 1);
    if (st != WEFT_OK) {
        weft_sched_free(s);
        return st;
    }
    *out = s;
    return WEFT_OK;
}

void weft_sched_set_low_prefill(struct weft_sched *s, uint32_t tokens) { s->cfg.low_prefill_tokens = tokens; }

static void req_free(struct weft_sched *s, struct weft_sched_req *r)
{
    weft_kv_seq_release(s->kv, &r->kv);
    free(r->tokens);
    free(r);
}

void weft_sched_free(struct weft_sched *s)
{
    if (!s) return;
    for (uint32_t i = 0; i < s->n_running; i++) req_free(s, s->running[i]);
    for (uint32_t i = 0; i < s->n_waiting; i++) req_free(s, s->waiting[i]);
    free(s->running);
    free(s->waiting);
    free(s->items);
    free(s);
}

weft_status weft_sched_tenant(struct weft_sched *s, const char *name, const struct weft_tenant_limits *lim,
                              uint32_t *idx)
{
    if (!name) name = "";
    if (strlen(name) >= WEFT_TENANT_NAME_MAX)
        return weft_error(WEFT_ERR_INVALID_ARG, "sched: tenant name longer than %d bytes", WEFT_TENANT_NAME_MAX - 1);
    uint32_t i = 0;
    while (i < s->n_tenants && strcmp(s->tenants[i].name, name) != 0) i++;
    if (i == s->n_tenants) {
        if (i == WEFT_SCHED_MAX_TENANTS)
            return weft_error(WEFT_ERR_INVALID_ARG, "sched: more than %d tenants", WEFT_SCHED_MAX_TENANTS);
        strcpy(s->tenants[i].name, name);
        s->n_tenants++;
    }
    if (lim) s->tenants[i].lim = *lim;
    *idx = i;
    return WEFT_OK;
}

uint32_t weft_sched_tenant_blocks(const struct weft_sched *s, uint32_t tenant)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->tenant == tenant) n += s->running[i]->kv.n_blocks;
    return n;
}

static uint32_t tenant_running(const struct weft_sched *s, uint32_t tenant)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_running; i++) n += s->running[i]->tenant == tenant;
    return n;
}

weft_status weft_sched_add(struct weft_sched *s, uint64_t id, const int32_t *prompt, uint32_t n_prompt,
                           uint32_t max_new, int32_t priority, uint32_t tenant, void *user,
                           struct weft_sched_req **out)
{
    *out = NULL;
    if (n_prompt == 0) return weft_error(WEFT_ERR_INVALID_ARG, "sched: empty prompt");
    if (tenant >= s->n_tenants) return weft_error(WEFT_ERR_INVALID_ARG, "sched: unknown tenant %u", tenant);
    if (s->n_waiting >= s->cfg.max_waiting) {
        s->st.rejected_full++;
        return weft_error(WEFT_ERR_BUSY, "sched: waiting queue is full (%u requests)", s->cfg.max_waiting);
    }
    uint64_t total = (uint64_t)n_prompt + max_new;
    if (total > s->cfg.n_ctx)
        return weft_error(WEFT_ERR_CONTEXT, "prompt of %u tokens + %u new tokens exceeds the context of %u",
                          n_prompt, max_new, s->cfg.n_ctx);
    /* the last sampled token is never computed, so total - 1 positions; a
     * prompt-only request computes all of its prompt */
    uint32_t need = blocks_for(max_new ? (uint32_t)total - 1 : n_prompt);
    if (need > s->kv->n_blocks)
        return weft_error(WEFT_ERR_NO_ROOM, "request needs %u KV blocks, the pool has %u", need, s->kv->n_blocks);
    const struct weft_tenant_limits *lim = &s->tenants[tenant].lim;
    if (lim->max_kv_blocks && need > lim->max_kv_blocks) {
        s->st.rejected_quota++;
        return weft_error(WEFT_ERR_QUOTA, "request needs %u KV blocks, tenant '%s' may hold %u", need,
                          s->tenants[tenant].name, lim->max_kv_blocks);
    }
    struct weft_sched_req *r = calloc(1, sizeof *r);
    uint32_t cap = (uint32_t)total;
    int32_t *toks = malloc(sizeof(int32_t) * cap);
    if (!r || !toks) {
        free(r);
        free(toks);
        return weft_error(WEFT_ERR_NOMEM, "sched: out of memory");
    }
    memcpy(toks, prompt, sizeof(int32_t) * n_prompt);
    *r = (struct weft_sched_req){.id = id, .priority = priority, .tenant = tenant, .arrival = s->next_arrival++,
                                 .tokens = toks, .n_tokens = n_prompt, .cap = cap, .n_prompt = n_prompt,
                                 .max_total = (uint32_t)total, .state = WEFT_REQ_WAITING, .user = user};
    q_insert(s->waiting, &s->n_waiting, r);
    if (priority > s->top_prio) s->top_prio = priority;
    *out = r;
    return WEFT_OK;
}

/* Move a running request back to the waiting queue, keeping its K/V on the
 * host when the tier has room, else dropping it for recompute. The waiting
 * queue has capacity for every running request on top of its bound. */
static void preempt(struct weft_sched *s, struct weft_sched_req *r)
{
    q_remove(s->running, &s->n_running, r);
    if (weft_kv_seq_swap_out(s->kv, &r->kv) == WEFT_OK) {
        s->st.preempt_swap++;
    } else {
        weft_kv_seq_release(s->kv, &r->kv);
        r->n_computed = 0;
        s->st.preempt_recompute++;
    }
    r->state = WEFT_REQ_WAITING;
    r->n_preempt++;
    r->preempted_step = s->step_no;
    q_insert(s->waiting, &s->n_waiting, r);
}

/* Last running request (lowest priority, latest) for a victim; of `tenant`
 * if tenant >= 0. */
static struct weft_sched_req *last_running(struct weft_sched *s, int64_t tenant)
{
    for (uint32_t i = s->n_running; i-- > 0;)
        if (tenant < 0 || s->running[i]->tenant == (uint32_t)tenant) return s->running[i];
    return NULL;
}

/* a prompt chunk of r counts against low_prefill_tokens */
static bool low_prefill(const struct weft_sched *s, const struct weft_sched_req *r)
{
    return s->cfg.low_prefill_tokens && r->priority < s->top_prio && r->n_tokens - r->n_computed > 1;
}

static uint32_t chunk_for(const struct weft_sched *s, const struct weft_sched_req *r, uint32_t budget)
{
    uint32_t left = r->n_tokens - r->n_computed;
    if (left > 1 && left > s->cfg.max_prefill_chunk) left = s->cfg.max_prefill_chunk;
    if (low_prefill(s, r) && left > s->low_left) left = s->low_left;
    return left < budget ? left : budget;
}

/* r's chunk of n tokens is scheduled: it spends low_left */
static void take_low(struct weft_sched *s, const struct weft_sched_req *r, uint32_t n)
{
    if (n == s->low_left && r->n_tokens - r->n_computed > n) s->low_capped = true;
    s->low_left -= n;
}

enum admit_result { ADMIT_OK, ADMIT_NO_ROOM, ADMIT_TENANT };

/* Take the waiting request r into running for *n tokens, swapping it in or
 * matching its prefix first. On failure r is unchanged. */
static enum admit_result admit(struct weft_sched *s, struct weft_sched_req *r, uint32_t budget, uint32_t *n_out)
{
    const struct weft_tenant_limits *lim = &s->tenants[r->tenant].lim;
    struct weft_kv_pool *kv = s->kv;
    bool matched = false;
    enum admit_result res = ADMIT_NO_ROOM;
    if (!r->kv.swapped && r->kv.n_blocks == 0 && !r->no_prefix_hits) {
        r->n_computed = weft_kv_seq_match_prefix(kv, &r->kv, r->tokens, r->n_tokens);
        r->n_cached = r->n_computed;
        matched = true;
    }
    {
        uint32_t n = chunk_for(s, r, budget);
        uint32_t held = r->kv.n_blocks;
        uint32_t after = blocks_for(r->n_computed + n);
        if (after < held) after = held;
        /* a swapped sequence needs all its blocks back; a matched prefix
         * already holds its blocks (they count for the tenant below) */
        uint32_t need_dev = r->kv.swapped ? after : after - held;
        if (lim->max_kv_blocks && weft_sched_tenant_blocks(s, r->tenant) + after > lim->max_kv_blocks) {
            res = ADMIT_TENANT;
        } else if (need_dev <= weft_kv_available(kv) &&
                   (!r->kv.swapped || weft_kv_seq_swap_in(kv, &r->kv) == WEFT_OK) &&
                   weft_kv_seq_reserve(kv, &r->kv, r->n_computed + n) == WEFT_OK) {
            if (matched) s->st.prefix_hit_tokens += r->n_cached;
            *n_out = n;
            return ADMIT_OK;
        }
    }
    if (matched) {
        /* do not hold cache hits while waiting; they stay cached */
        weft_kv_seq_release(kv, &r->kv);
        r->n_computed = 0;
        r->n_cached = 0;
    }
    return res;
}

weft_status weft_sched_schedule(struct weft_sched *s, struct weft_sched_item **items, uint32_t *n_items)
{
    struct weft_kv_pool *kv = s->kv;
    uint32_t budget = s->cfg.max_step_tokens, ni = 0;
    s->step_no++;
    s->low_left = s->cfg.low_prefill_tokens;
    s->low_capped = false;
    *items = s->items;
    *n_items = 0;

    /* 0. the first waiting request that may run makes room for itself (KV
     *    blocks and a sequence slot) by preempting running ones of strictly
     *    lower priority */
    int32_t step0_prio = INT32_MIN;
    for (uint32_t i = 0; i < s->n_waiting; i++) {
        struct weft_sched_req *w = s->waiting[i];
        const struct weft_tenant_limits *lim = &s->tenants[w->tenant].lim;
        if (lim->max_running && tenant_running(s, w->tenant) >= lim->max_running) continue;
        uint32_t first = chunk_for(s, w, s->cfg.max_step_tokens);
        uint32_t need = blocks_for(w->n_computed + first);
        if (!w->kv.swapped) need -= w->kv.n_blocks < need ? w->kv.n_blocks : need;
        for (;;) {
            struct weft_sched_req *v = last_running(s, -1);
            bool room = need <= weft_kv_available(kv) && s->n_running < s->cfg.max_running;
            if (room) step0_prio = w->priority;
            if (room || !v || v->priority >= w->priority) break;
            preempt(s, v);
        }
        break;
    }
    uint64_t preempts1 = s->st.preempt_swap + s->st.preempt_recompute;

    /* A step that prefills a request of some priority carries no prefill of a
     * lower one (their decode rows still run): the higher priority's first
     * token does not wait for lower prompts' chunks. The waiting request of
     * step 0 counts when it has a slot and the KV room to start in. */
    int32_t top_prefill = step0_prio;

    /* 1. running sequences, in priority order */
    for (uint32_t i = 0; i < s->n_running && budget > 0 && ni < s->cfg.max_running;) {
        struct weft_sched_req *r = s->running[i];
        uint32_t n = chunk_for(s, r, budget);
        if (n == 0) {  /* nothing to compute until the engine appends, or no low_left */
            s->low_capped |= low_prefill(s, r);
            i++;
            continue;
        }
        bool prefill = r->n_tokens - r->n_computed > 1;
        if (prefill && r->priority < top_prefill) { i++; continue; }
        if (prefill && r->priority > top_prefill) top_prefill = r->priority;
        const struct weft_tenant_limits *lim = &s->tenants[r->tenant].lim;
        bool scheduled = false;
        for (;;) {
            uint32_t need = weft_kv_seq_blocks_needed(&r->kv, r->n_computed + n);
            bool over = lim->max_kv_blocks && weft_sched_tenant_blocks(s, r->tenant) + need > lim->max_kv_blocks;
            if (!over && weft_kv_seq_reserve(kv, &r->kv, r->n_computed + n) == WEFT_OK) {
                scheduled = true;
                break;
            }
            /* victims come from the tail, at or behind r: nothing already
             * scheduled in this step is taken back */
            struct weft_sched_req *v = last_running(s, over ? (int64_t)r->tenant : -1);
            preempt(s, v);
            if (v == r) break;
        }
        if (!scheduled) continue;  /* r was preempted: running[i] is now the one after it */
        if (low_prefill(s, r)) take_low(s, r, n);
        s->items[ni++] = (struct weft_sched_item){r, r->n_computed, n, r->n_computed + n == r->n_tokens};
        budget -= n;
        i++;
    }

    /* 2. waiting requests, unless this step had to preempt */
    bool preempted = s->st.preempt_swap + s->st.preempt_recompute != preempts1;
    for (uint32_t i = 0; !preempted && i < s->n_waiting && budget > 0 && ni < s->cfg.max_running &&
                         s->n_running < s->cfg.max_running;) {
        struct weft_sched_req *r = s->waiting[i];
        const struct weft_tenant_limits *lim = &s->tenants[r->tenant].lim;
        if (r->priority < top_prefill) break;  /* the rest rank lower still (see above) */
        if (r->preempted_step == s->step_no ||
            (lim->max_running && tenant_running(s, r->tenant) >= lim->max_running)) {
            i++;
            continue;
        }
        if (low_prefill(s, r) && s->low_left == 0) {
            s->low_capped = true;
            i++;
            continue;
        }
        uint32_t n;
        enum admit_result a = admit(s, r, budget, &n);
        if (a == ADMIT_TENANT) { i++; continue; }  /* its tenant is full; others may go */
        if (a == ADMIT_NO_ROOM) break;             /* nobody behind r jumps ahead for room */
        /* victims admit() preempted rank below r, so r is still at i */
        q_remove(s->waiting, &s->n_waiting, r);
        r->state = WEFT_REQ_RUNNING;
        q_insert(s->running, &s->n_running, r);
        if (low_prefill(s, r)) take_low(s, r, n);
        s->items[ni++] = (struct weft_sched_item){r, r->n_computed, n, r->n_computed + n == r->n_tokens};
        budget -= n;
    }
    s->st.steps += ni > 0;
    s->st.low_prefill_limited += s->low_capped;
    for (uint32_t k = 0; k < ni; k++) s->st.step_tokens += s->items[k].n;
    *n_items = ni;
    return WEFT_OK;
}

void weft_sched_step_done(struct weft_sched *s, const struct weft_sched_item *items, uint32_t n_items)
{
    for (uint32_t i = 0; i < n_items; i++) {
        struct weft_sched_req *r = items[i].req;
        uint32_t end = items[i].pos0 + items[i].n;
        if (items[i].pos0 < r->n_prompt) {
            uint32_t pe = end < r->n_prompt ? end : r->n_prompt;
            r->n_prefilled += pe - items[i].pos0;
            s->st.prefill_tokens += pe - items[i].pos0;
        }
        r->n_computed = end;
        weft_kv_seq_commit(s->kv, &r->kv, r->tokens, r->n_computed);
    }
}

weft_status weft_sched_append(struct weft_sched *s, struct weft_sched_req *r, int32_t token)
{
    (void)s;
    if (r->n_tokens >= r->cap)
        return weft_error(WEFT_ERR_INVALID_ARG, "sched: request %llu is at its token limit (%u)",
                          (unsigned long long)r->id, r->cap);
    r->tokens[r->n_tokens++] = token;
    return WEFT_OK;
}

void weft_sched_finish(struct weft_sched *s, struct weft_sched_req *r)
{
    if (!q_remove(s->running, &s->n_running, r)) q_remove(s->waiting, &s->n_waiting, r);
    req_free(s, r);
}

struct weft_sched_req *weft_sched_find(struct weft_sched *s, uint64_t id)
{
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->id == id) return s->running[i];
    for (uint32_t i = 0; i < s->n_waiting; i++)
        if (s->waiting[i]->id == id) return s->waiting[i];
    return NULL;
}

void weft_sched_stats(const struct weft_sched *s, struct weft_sched_stats *out)
{
    *out = s->st;
    out->low_prefill_tokens = s->cfg.low_prefill_tokens;
    out->running = s->n_running;
    out->waiting = s->n_waiting;
    out->swapped = 0;
    for (uint32_t i = 0; i < s->n_waiting; i++) out->swapped += s->waiting[i]->kv.swapped;
}

void weft_sched_reset_totals(struct weft_sched *s) { memset(&s->st, 0, sizeof s->st); }

uint32_t weft_sched_running(const struct weft_sched *s, struct weft_sched_req *const **reqs)
{
    *reqs = s->running;
    return s->n_running;
}

uint32_t weft_sched_waiting(const struct weft_sched *s, struct weft_sched_req *const **reqs)
{
    *reqs = s->waiting;
    return s->n_waiting;
}
