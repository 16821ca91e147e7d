#include "core/sched.h"
#include "base/buf.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct tenant {
    char name[WEFT_TENANT_NAME_MAX];
    struct weft_tenant_limits lim;
    double vtime;                /* prompt tokens planned for it / its share */
    uint64_t prefill;            /* prompt tokens computed for it */
    bool active;                 /* it had prompt work at the last step */
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
    struct weft_sched_cost cost;
    uint32_t prefill_left;       /* prompt tokens the ITL target leaves in the step (UINT32_MAX: no limit) */
    bool itl_capped;             /* and it held a prompt back */
    /* time slices, for the step being planned: the tenants with prompt work
     * at fair_prio (fair: more than one); pass 0 defers the prompts of a
     * tenant served ahead of another of them, pass 1 gives them what is left */
    bool fair, deferred;
    int32_t fair_prio;
    uint32_t top[WEFT_SCHED_MAX_TENANTS], n_top;
    uint32_t pass;
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
    struct weft_sched_req **p = weft_grow32(*q, cap, need, sizeof *p);
    if (!p) return weft_error(WEFT_ERR_NOMEM, "sched: out of memory");
    *q = p;
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

void weft_sched_set_cost(struct weft_sched *s, const struct weft_sched_cost *c) { s->cost = *c; }

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

uint32_t weft_sched_n_tenants(const struct weft_sched *s) { return s->n_tenants; }

const char *weft_sched_tenant_name(const struct weft_sched *s, uint32_t tenant)
{
    return tenant < s->n_tenants ? s->tenants[tenant].name : NULL;
}

uint64_t weft_sched_tenant_prefill(const struct weft_sched *s, uint32_t tenant)
{
    return tenant < s->n_tenants ? s->tenants[tenant].prefill : 0;
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
    if (left > 1 && left > s->prefill_left) left = s->prefill_left;
    if (left > budget) left = budget;
    const uint32_t a = s->cfg.align_chunks;
    if (a && left > 1) {
        /* end at the first checkpoint boundary the chunk would pass: a multiple of a, or
         * the prompt's last full block before its last token (kv.ck_at) */
        uint32_t next = (r->n_computed / a + 1) * a;
        if (r->kv.ck_at > r->n_computed && r->kv.ck_at < next) next = r->kv.ck_at;
        if (r->n_computed + left > next) left = next - r->n_computed;
    }
    return left;
}

/* prompt work: more than one token to compute */
static bool is_prefill(const struct weft_sched_req *r) { return r->n_tokens - r->n_computed > 1; }

/* r's chunk of n tokens is scheduled: the ITL target's and the tenant's accounts */
static void take_prefill(struct weft_sched *s, struct weft_sched_req *r, uint32_t n)
{
    r->planned_step = s->step_no;
    if (!is_prefill(r)) return;
    if (s->prefill_left != UINT32_MAX) {
        if (n == s->prefill_left && r->n_tokens - r->n_computed > n) s->itl_capped = true;
        s->prefill_left -= n;
    }
    struct tenant *t = &s->tenants[r->tenant];
    t->vtime += (double)n / (t->lim.share ? t->lim.share : 1);
}

/* Pass 0 leaves r's prompt chunk for later in the step: its tenant has had
 * more per unit of share than another tenant with prompts waiting (so far,
 * this step's chunks included). */
static bool fair_defer(struct weft_sched *s, const struct weft_sched_req *r)
{
    if (!s->fair || s->pass != 0 || r->priority != s->fair_prio || !is_prefill(r)) return false;
    double v = s->tenants[r->tenant].vtime;
    for (uint32_t k = 0; k < s->n_top; k++) {
        double o = s->tenants[s->top[k]].vtime;
        if (s->top[k] != r->tenant && v > o * (1 + 1e-12) + 1e-9) {
            s->deferred = true;
            return true;
        }
    }
    return false;
}

/* The step's time slices: which tenants have prompt work, at which priority;
 * a tenant that comes back starts level with those that stayed. */
static void fair_begin(struct weft_sched *s)
{
    bool work[WEFT_SCHED_MAX_TENANTS] = {0}, top[WEFT_SCHED_MAX_TENANTS] = {0};
    int32_t prio = INT32_MIN;
    for (int q = 0; q < 2; q++) {
        struct weft_sched_req **v = q ? s->waiting : s->running;
        uint32_t n = q ? s->n_waiting : s->n_running;
        for (uint32_t i = 0; i < n; i++)
            if (is_prefill(v[i])) {
                work[v[i]->tenant] = true;
                if (v[i]->priority > prio) prio = v[i]->priority;
            }
    }
    for (int q = 0; q < 2; q++) {
        struct weft_sched_req **v = q ? s->waiting : s->running;
        uint32_t n = q ? s->n_waiting : s->n_running;
        for (uint32_t i = 0; i < n; i++)
            if (is_prefill(v[i]) && v[i]->priority == prio) top[v[i]->tenant] = true;
    }
    double stayed = INFINITY, any = INFINITY;
    for (uint32_t t = 0; t < s->n_tenants; t++) {
        if (!work[t]) continue;
        if (s->tenants[t].active && s->tenants[t].vtime < stayed) stayed = s->tenants[t].vtime;
        if (s->tenants[t].vtime < any) any = s->tenants[t].vtime;
    }
    double level = stayed < INFINITY ? stayed : any;
    s->n_top = 0;
    for (uint32_t t = 0; t < s->n_tenants; t++) {
        struct tenant *tn = &s->tenants[t];
        if (work[t] && !tn->active && tn->vtime < level) tn->vtime = level;
        tn->active = work[t];
        if (top[t]) s->top[s->n_top++] = t;
    }
    s->fair = s->n_top > 1;
    s->fair_prio = prio;
    s->deferred = false;
}

#define FIT_ALPHA 0.05     /* weight of the newest decode step in the fit (a window of ~20) */
#define FIT_MIN_VAR 0.2    /* rows' variance that tells the slope (steps a row apart: 0.25) */

void weft_step_fit_add(struct weft_step_fit *f, uint32_t rows, double seconds)
{
    if (!(seconds > 0) || rows == 0) return;
    double k = f->w > 0 ? 1 - FIT_ALPHA : 0, r = rows;
    f->w = f->w * k + 1;
    f->r = f->r * k + r;
    f->rr = f->rr * k + r * r;
    f->t = f->t * k + seconds;
    f->rt = f->rt * k + r * seconds;
    double mr = f->r / f->w, mt = f->t / f->w;
    double var = f->rr / f->w - mr * mr;
    if (var >= FIT_MIN_VAR) {
        double b = (f->rt / f->w - mr * mt) / var;
        f->slope = b > 0 ? b : 0;
    }
}

bool weft_step_fit_get(const struct weft_step_fit *f, double *fixed_s, double *row_s)
{
    *fixed_s = *row_s = 0;
    if (!(f->w > 0)) return false;
    double mr = f->r / f->w, mt = f->t / f->w;
    double b = f->slope < mt / mr ? f->slope : mt / mr;  /* the fixed part is not negative */
    *fixed_s = mt - b * mr > 0 ? mt - b * mr : 0;
    *row_s = b;
    return mt > 0;
}

/* The model's decode rows' part of a step of n rows (0: unmeasured) */
static double decode_cost(const struct weft_sched_cost *c, uint32_t rows)
{
    return rows ? c->decode_fixed_s + c->decode_row_s * rows : 0;
}

/* The target of a step with these decode rows (0: none) */
static double step_target(const struct weft_sched_cost *c, uint32_t rows)
{
    if (!rows || !(c->prefill_token_s > 0) || !(decode_cost(c, rows) > 0)) return 0;
    return c->target_s > 0 ? c->target_s : c->target_factor > 0 ? c->target_factor * decode_cost(c, rows) : 0;
}

/* The prompt tokens a step may carry by the ITL target: UINT32_MAX without
 * decode rows or a measured cost, else what fits beside them (at least 1). */
static uint32_t itl_cap(const struct weft_sched *s, bool *spread)
{
    const struct weft_sched_cost *c = &s->cost;
    uint32_t rows = 0;  /* generated positions: a prompt's last token is a prompt token */
    for (uint32_t i = 0; i < s->n_running; i++) {
        const struct weft_sched_req *r = s->running[i];
        rows += r->n_tokens - r->n_computed == 1 && r->n_computed >= r->n_prompt;
    }
    double target = step_target(c, rows);
    if (!(target > 0)) return UINT32_MAX;
    double room = (target - decode_cost(c, rows)) / c->prefill_token_s + 1e-6;  /* 199.99999... is 200 */
    uint32_t cap = room >= 1 ? (room < 1e9 ? (uint32_t)room : 1000000000u) : 1;
    if (c->spread_steps) {
        uint64_t backlog = 0;
        for (int q = 0; q < 2; q++) {
            struct weft_sched_req **v = q ? s->waiting : s->running;
            uint32_t n = q ? s->n_waiting : s->n_running;
            for (uint32_t i = 0; i < n; i++)
                if (is_prefill(v[i])) backlog += v[i]->n_tokens - v[i]->n_computed;
        }
        uint64_t share = (backlog + c->spread_steps - 1) / c->spread_steps;
        if (share > cap) {
            cap = share < 1000000000u ? (uint32_t)share : 1000000000u;
            *spread = true;
        }
    }
    return cap;
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
    if (!r->kv.swapped && r->kv.n_blocks == 0 && s->cfg.align_chunks)
        r->kv.ck_at = (r->n_prompt - 1) / WEFT_KV_BLOCK_TOKENS * WEFT_KV_BLOCK_TOKENS;
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

/* The step being planned: what is left of its budget, its items so far. */
struct plan {
    uint32_t budget, ni;
    int32_t top_prefill;         /* see below */
};

/* 1. running sequences, in priority order (pass 1: the prompt chunks pass 0
 *    deferred, with no preemption: what is scheduled stays scheduled) */
static void plan_running(struct weft_sched *s, struct plan *p)
{
    struct weft_kv_pool *kv = s->kv;
    for (uint32_t i = 0; i < s->n_running && p->budget > 0 && p->ni < s->cfg.max_running;) {
        struct weft_sched_req *r = s->running[i];
        if (s->pass && (r->planned_step == s->step_no || !is_prefill(r))) { i++; continue; }
        uint32_t n = chunk_for(s, r, p->budget);
        if (n == 0) {  /* nothing to compute until the engine appends, or no low_left / ITL room */
            s->low_capped |= low_prefill(s, r);
            s->itl_capped |= is_prefill(r) && s->prefill_left == 0;
            i++;
            continue;
        }
        bool prefill = is_prefill(r);
        if (prefill && r->priority < p->top_prefill) { i++; continue; }
        if (prefill && r->priority > p->top_prefill) p->top_prefill = r->priority;
        if (fair_defer(s, r)) { i++; continue; }
        const struct weft_tenant_limits *lim = &s->tenants[r->tenant].lim;
        bool scheduled = false;
        for (;;) {
            uint32_t need = weft_kv_seq_blocks_needed(&r->kv, r->n_computed + n);
            bool over = lim->max_kv_blocks && weft_sched_tenant_blocks(s, r->tenant) + need > lim->max_kv_blocks;
            if (!over && weft_kv_seq_reserve(kv, &r->kv, r->n_computed + n) == WEFT_OK) {
                scheduled = true;
                break;
            }
            if (s->pass) break;
            /* victims come from the tail, at or behind r: nothing already
             * scheduled in this step is taken back */
            struct weft_sched_req *v = last_running(s, over ? (int64_t)r->tenant : -1);
            preempt(s, v);
            if (v == r) break;
        }
        if (!scheduled && s->pass) { i++; continue; }
        if (!scheduled) continue;  /* r was preempted: running[i] is now the one after it */
        if (low_prefill(s, r)) take_low(s, r, n);
        take_prefill(s, r, n);
        s->items[p->ni++] = (struct weft_sched_item){r, r->n_computed, n, r->n_computed + n == r->n_tokens};
        p->budget -= n;
        i++;
    }
}

/* 2. waiting requests */
static void plan_waiting(struct weft_sched *s, struct plan *p)
{
    for (uint32_t i = 0; i < s->n_waiting && p->budget > 0 && p->ni < s->cfg.max_running &&
                         s->n_running < s->cfg.max_running;) {
        struct weft_sched_req *r = s->waiting[i];
        const struct weft_tenant_limits *lim = &s->tenants[r->tenant].lim;
        if (r->priority < p->top_prefill) break;  /* the rest rank lower still (see above) */
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
        if (is_prefill(r) && s->prefill_left == 0) {
            s->itl_capped = true;
            i++;
            continue;
        }
        if (fair_defer(s, r)) { i++; continue; }
        uint32_t n;
        enum admit_result a = admit(s, r, p->budget, &n);
        if (a == ADMIT_TENANT) { i++; continue; }  /* its tenant is full; others may go */
        if (a == ADMIT_NO_ROOM) break;             /* nobody behind r jumps ahead for room */
        q_remove(s->waiting, &s->n_waiting, r);
        r->state = WEFT_REQ_RUNNING;
        q_insert(s->running, &s->n_running, r);
        if (low_prefill(s, r)) take_low(s, r, n);
        take_prefill(s, r, n);
        s->items[p->ni++] = (struct weft_sched_item){r, r->n_computed, n, r->n_computed + n == r->n_tokens};
        p->budget -= n;
    }
}

weft_status weft_sched_schedule(struct weft_sched *s, struct weft_sched_item **items, uint32_t *n_items)
{
    struct weft_kv_pool *kv = s->kv;
    s->step_no++;
    s->low_left = s->cfg.low_prefill_tokens;
    s->low_capped = false;
    bool spread = false;
    s->prefill_left = itl_cap(s, &spread);
    s->itl_capped = false;
    uint64_t preempts0 = s->st.preempt_swap + s->st.preempt_recompute;
    fair_begin(s);
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
    if (preempts1 != preempts0) {  /* fewer decode rows: their target */
        spread = false;
        s->prefill_left = itl_cap(s, &spread);
    }
    s->st.itl_spread += spread;
    uint32_t cap = s->prefill_left;

    /* A step that prefills a request of some priority carries no prefill of a
     * lower one (their decode rows still run): the higher priority's first
     * token does not wait for lower prompts' chunks. The waiting request of
     * step 0 counts when it has a slot and the KV room to start in. */
    struct plan p = {.budget = s->cfg.max_step_tokens, .top_prefill = step0_prio};
    for (s->pass = 0; s->pass < 2; s->pass++) {
        if (s->pass == 1 && !s->deferred) break;
        plan_running(s, &p);
        /* waiting requests, unless this step had to preempt */
        if (s->st.preempt_swap + s->st.preempt_recompute == preempts1) plan_waiting(s, &p);
    }
    s->st.share_deferred += s->deferred;
    uint32_t ni = p.ni;

    struct weft_sched_plan *pl = &s->st.last;
    *pl = (struct weft_sched_plan){.prefill_cap = cap};
    for (uint32_t k = 0; k < ni; k++) {
        const struct weft_sched_item *it = &s->items[k];
        if (it->n == 1 && it->pos0 >= it->req->n_prompt) {
            pl->decode_rows++;
        } else {
            pl->prefill_tokens += it->n;
            pl->prefill_chunks++;
        }
    }
    pl->target_s = step_target(&s->cost, pl->decode_rows);
    if (decode_cost(&s->cost, 1) > 0 && s->cost.prefill_token_s > 0)
        pl->planned_s = decode_cost(&s->cost, pl->decode_rows) + pl->prefill_tokens * s->cost.prefill_token_s;
    if (pl->decode_rows && pl->target_s > 0 && pl->planned_s > pl->target_s * (1 + 1e-9)) s->st.itl_over++;
    s->st.steps += ni > 0;
    s->st.low_prefill_limited += s->low_capped;
    s->st.itl_limited += s->itl_capped;
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
            s->tenants[r->tenant].prefill += pe - items[i].pos0;
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

const struct weft_sched_plan *weft_sched_last_plan(const struct weft_sched *s) { return &s->st.last; }

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
