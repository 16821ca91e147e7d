/* The routing policy (route.h). */
#include "core/route.h"

#include <string.h>

#define DEF_STALE_S 2.0
#define DEF_GEN_TOKENS 64.0
#define MAX_GEN_TOKENS 512u

static bool eligible(const struct weft_route_config *cfg, const struct weft_route_instance *in)
{
    double stale = cfg->stale_s > 0 ? cfg->stale_s : DEF_STALE_S;
    if (!in->healthy || !(in->age_s <= stale)) return false;
    /* full: no slot free and no room to wait */
    bool no_slot = in->max_seqs && in->running >= in->max_seqs;
    if (no_slot && in->max_waiting && in->waiting >= in->max_waiting) return false;
    return true;
}

static uint32_t uncached(const struct weft_route_request *req, const struct weft_route_instance *in,
                         uint32_t *matched)
{
    uint64_t m = (uint64_t)in->matched_blocks * WEFT_ROUTE_BLOCK_TOKENS;
    /* the last prompt token is always computed (its logits are needed) */
    if (m >= req->n_prompt) m = req->n_prompt ? req->n_prompt - 1 : 0;
    *matched = (uint32_t)m;
    return req->n_prompt - (uint32_t)m;
}

static double predicted_ttft(const struct weft_route_request *req, const struct weft_route_instance *in,
                             uint32_t *matched)
{
    uint32_t todo = uncached(req, in, matched);
    double t = ((double)in->queued_prefill_tokens + todo) / in->prefill_tps;
    if (in->max_seqs && in->running >= in->max_seqs) {
        /* no slot: wait for running requests to finish, one per slot ahead of us;
         * a sequence's own decode rate when measured (the total's share per
         * running request assumes a batch as large as the count now) */
        double per_row = in->decode_row_tps > 0                  ? in->decode_row_tps
                         : in->decode_tps > 0 && in->running ? in->decode_tps / in->running
                                                             : 0;
        double gen = in->mean_gen_tokens > 0 ? in->mean_gen_tokens : DEF_GEN_TOKENS;
        double ahead = (double)in->waiting + 1;
        double slots = in->max_seqs ? in->max_seqs : 1;
        t += per_row > 0 ? gen / per_row * (ahead / slots) : 1e6;
    }
    return t;
}

/* a before b? (strict, total: the index decides last) */
static bool better(const struct weft_route_config *cfg, const struct weft_route_choice *a,
                   const struct weft_route_choice *b, const struct weft_route_instance *inst)
{
    const struct weft_route_instance *x = &inst[a->index], *y = &inst[b->index];
    uint64_t lx = (uint64_t)x->running + x->waiting, ly = (uint64_t)y->running + y->waiting;
    if (cfg->policy == WEFT_ROUTE_LEAST_LOAD) {
        if (x->queued_prefill_tokens != y->queued_prefill_tokens)
            return x->queued_prefill_tokens < y->queued_prefill_tokens;
        if (lx != ly) return lx < ly;
        return a->index < b->index;
    }
    /* weft: seconds to the end first, compared with a relative tolerance so
     * that float noise (the same work on equal instances) falls to the tie-breaks */
    double ta = a->predicted_e2e_s, tb = b->predicted_e2e_s;
    double tol = 1e-9 * (ta > tb ? ta : tb);
    if (ta < tb - tol) return true;
    if (tb < ta - tol) return false;
    if (a->matched_tokens != b->matched_tokens) return a->matched_tokens > b->matched_tokens;
    if (lx != ly) return lx < ly;
    return a->index < b->index;
}

weft_status weft_route_rank(const struct weft_route_config *cfg, const struct weft_route_request *req,
                            const struct weft_route_instance *inst, uint32_t n, struct weft_route_choice *out,
                            uint32_t *n_out)
{
    *n_out = 0;
    if (!cfg || !req || !inst || !out || req->n_prompt == 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "route: no request or no instances");
    uint32_t k = 0, best_match = 0;
    /* prefill instances take requests only when no other instance can */
    bool others = false;
    for (uint32_t i = 0; i < n && !others; i++)
        others = inst[i].role != WEFT_ROUTE_ROLE_PREFILL && eligible(cfg, &inst[i]) &&
                 (cfg->policy != WEFT_ROUTE_WEFT || inst[i].prefill_tps > 0);
    for (uint32_t i = 0; i < n; i++) {
        if (!eligible(cfg, &inst[i])) continue;
        if (others && inst[i].role == WEFT_ROUTE_ROLE_PREFILL) continue;
        if (cfg->policy == WEFT_ROUTE_WEFT && !(inst[i].prefill_tps > 0)) continue;  /* not measured yet */
        struct weft_route_choice c = {.index = i};
        if (cfg->policy == WEFT_ROUTE_WEFT) {
            c.predicted_ttft_s = predicted_ttft(req, &inst[i], &c.matched_tokens);
            c.predicted_e2e_s = c.predicted_ttft_s;
            uint32_t gen = req->max_tokens < MAX_GEN_TOKENS ? req->max_tokens : MAX_GEN_TOKENS;
            if (cfg->decode_aware && gen && inst[i].decode_row_tps > 0) c.predicted_e2e_s += gen / inst[i].decode_row_tps;
            if (inst[i].kv_known) {
                /* blocks this request takes there beyond the free ones evict cached prefixes */
                uint64_t total = ((uint64_t)req->n_prompt + gen + WEFT_ROUTE_BLOCK_TOKENS - 1) / WEFT_ROUTE_BLOCK_TOKENS;
                uint64_t need = total > c.matched_tokens / WEFT_ROUTE_BLOCK_TOKENS
                                    ? total - c.matched_tokens / WEFT_ROUTE_BLOCK_TOKENS : 0;
                if (need > inst[i].kv_free_blocks)
                    c.predicted_e2e_s += (double)(need - inst[i].kv_free_blocks) * WEFT_ROUTE_BLOCK_TOKENS /
                                         inst[i].prefill_tps;
            }
        } else {
            uncached(req, &inst[i], &c.matched_tokens);
        }
        if (c.matched_tokens > best_match) best_match = c.matched_tokens;
        out[k++] = c;
    }
    if (cfg->policy == WEFT_ROUTE_ROUND_ROBIN) {
        /* rotate the eligible ones so the turn's comes first */
        uint32_t start = k ? (uint32_t)(cfg->rr_next % k) : 0;
        struct weft_route_choice tmp[k ? k : 1];
        for (uint32_t i = 0; i < k; i++) tmp[i] = out[(start + i) % k];
        for (uint32_t i = 0; i < k; i++) {
            out[i] = tmp[i];
            out[i].reason = WEFT_ROUTE_R_ROUND_ROBIN;
        }
        *n_out = k;
        return WEFT_OK;
    }
    /* insertion sort: fleets are small, and it is stable and simple */
    for (uint32_t i = 1; i < k; i++) {
        struct weft_route_choice c = out[i];
        uint32_t j = i;
        while (j > 0 && better(cfg, &c, &out[j - 1], inst)) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = c;
    }
    for (uint32_t i = 0; i < k; i++)
        out[i].reason = cfg->policy == WEFT_ROUTE_LEAST_LOAD                          ? WEFT_ROUTE_R_LOAD
                        : out[i].matched_tokens > 0 && out[i].matched_tokens == best_match ? WEFT_ROUTE_R_PREFIX
                                                                                        : WEFT_ROUTE_R_SPEED;
    *n_out = k;
    return WEFT_OK;
}

bool weft_route_pd(const struct weft_route_config *cfg, uint32_t min_uncached, const struct weft_route_request *req,
                   const struct weft_route_instance *inst, uint32_t n, const struct weft_route_choice *d,
                   struct weft_route_pd_choice *out)
{
    if (!min_uncached || !cfg || !req || !inst || !d || d->index >= n || req->n_prompt == 0) return false;
    const struct weft_route_instance *dec = &inst[d->index];
    if (dec->role == WEFT_ROUTE_ROLE_PREFILL) return false;
    if (req->n_prompt - d->matched_tokens < min_uncached) return false;
    double own = d->predicted_ttft_s;
    if (cfg->policy != WEFT_ROUTE_WEFT || !(own > 0)) {
        uint32_t m;
        own = dec->prefill_tps > 0 ? predicted_ttft(req, dec, &m) : 1e300;
    }
    bool found = false;
    struct weft_route_pd_choice best = {0};
    for (uint32_t i = 0; i < n; i++) {
        const struct weft_route_instance *p = &inst[i];
        if (i == d->index || p->role != WEFT_ROUTE_ROLE_PREFILL || !eligible(cfg, p) || !(p->prefill_tps > 0)) continue;
        struct weft_route_pd_choice c = {.index = i};
        c.predicted_s = predicted_ttft(req, p, &c.matched_tokens);
        double tol = 1e-9 * (c.predicted_s > best.predicted_s ? c.predicted_s : best.predicted_s);
        if (!found || c.predicted_s < best.predicted_s - tol ||
            (!(best.predicted_s < c.predicted_s - tol) && c.matched_tokens > best.matched_tokens)) {
            best = c;
            found = true;
        }
    }
    if (!found) return false;
    double tol = 1e-9 * (best.predicted_s > own ? best.predicted_s : own);
    double stalls = (cfg->pd_slack > 0 ? cfg->pd_slack : WEFT_ROUTE_PD_SLACK) + (double)dec->running;
    bool wins = dec->role == WEFT_ROUTE_ROLE_DECODE ? best.predicted_s <= own * stalls + tol
                                                    : best.predicted_s < own - tol;
    if (wins) *out = best;
    return wins;
}

const char *weft_route_role_name(enum weft_route_role r)
{
    switch (r) {
    case WEFT_ROUTE_ROLE_BOTH: return "both";
    case WEFT_ROUTE_ROLE_PREFILL: return "prefill";
    case WEFT_ROUTE_ROLE_DECODE: return "decode";
    }
    return "?";
}

bool weft_route_role_parse(const char *s, enum weft_route_role *out)
{
    for (int r = WEFT_ROUTE_ROLE_BOTH; r <= WEFT_ROUTE_ROLE_DECODE; r++)
        if (s && !strcmp(s, weft_route_role_name((enum weft_route_role)r))) {
            *out = (enum weft_route_role)r;
            return true;
        }
    return false;
}

const char *weft_route_policy_name(enum weft_route_policy p)
{
    switch (p) {
    case WEFT_ROUTE_WEFT: return "weft";
    case WEFT_ROUTE_LEAST_LOAD: return "least-load";
    case WEFT_ROUTE_ROUND_ROBIN: return "round-robin";
    }
    return "?";
}

bool weft_route_policy_parse(const char *s, enum weft_route_policy *out)
{
    for (int p = WEFT_ROUTE_WEFT; p <= WEFT_ROUTE_ROUND_ROBIN; p++)
        if (s && !strcmp(s, weft_route_policy_name((enum weft_route_policy)p))) {
            *out = (enum weft_route_policy)p;
            return true;
        }
    return false;
}

const char *weft_route_reason_name(enum weft_route_reason r)
{
    switch (r) {
    case WEFT_ROUTE_R_PREFIX: return "prefix";
    case WEFT_ROUTE_R_SPEED: return "speed";
    case WEFT_ROUTE_R_LOAD: return "load";
    case WEFT_ROUTE_R_ROUND_ROBIN: return "round-robin";
    }
    return "?";
}

void weft_route_dispatched(struct weft_route_instance *in, uint32_t uncached_tokens)
{
    in->queued_prefill_tokens += uncached_tokens;
    if (in->max_seqs && in->running >= in->max_seqs) in->waiting++;
    else in->running++;
}

void weft_route_first_token(struct weft_route_instance *in, uint32_t uncached_tokens)
{
    in->queued_prefill_tokens = in->queued_prefill_tokens > uncached_tokens ? in->queued_prefill_tokens - uncached_tokens
                                                                            : 0;
}

void weft_route_finished(struct weft_route_instance *in)
{
    if (in->waiting) {
        in->waiting--;  /* one waiting takes the freed slot */
        return;
    }
    if (in->running) in->running--;
}
