/* Continuous batching: which sequences run in the next step, and how many of
 * their tokens.
 *
 * Requests wait in a queue ordered by priority (higher first), then arrival
 * (first come, first served). Every step fills a token budget: first the
 * running sequences (a decode is one token; a prefill in progress takes its
 * next chunk), then chunks of waiting prompts (chunked prefill), as long as
 * the budget, the sequence limit, the tenants' limits and the KV pool allow.
 *
 * The scheduler never touches blocks itself: it asks core/kv for room, and
 * "no room" is an ordinary answer. When a running sequence cannot grow, the
 * lowest-priority, latest-arrived running sequence (of the same tenant, when
 * it is the tenant's KV quota that is short) is preempted: its blocks are
 * swapped to the host tier, or dropped to be recomputed when the host tier is
 * full, and it goes back to the waiting queue in its original place. A
 * waiting request of higher priority than some running one may preempt it
 * the same way, for KV room or for a sequence slot (all max_running busy).
 * A step that prefills a request of some priority carries no prompt chunk
 * of a lower one (decode rows of every priority still run), so a higher
 * priority's first token does not wait for lower prompts; a steady stream of
 * higher-priority prompts holds lower prompts back (strict priority). With
 * low_prefill_tokens, prompts below the top priority seen take at most that
 * many tokens of any step, so the step a higher-priority arrival finds in
 * progress is short. A resumed sequence continues exactly where it stopped.
 *
 * Stall-free batching: a step that carries decode rows carries at most the
 * prompt tokens that fit the inter-token-latency target by the cost model
 * the engine sets from its measured rates (weft_sched_set_cost): the decode
 * rows' part (a fixed part and one per row) plus prompt tokens at their
 * per-token cost stays within the target, absolute or relative to the decode
 * rows' part (at least one prompt token per step, so prompts always advance), and
 * a long prompt is spread over several steps. With spread_steps N, a step
 * carries at least 1/N of the prompt backlog. A step without decode rows
 * takes the whole budget. Chunking changes no output.
 *
 * Time slices between tenants: among the prompts of the top priority with
 * waiting work, the prompt tokens of steps go first to the tenant that has had
 * the fewest per unit of its share (weft_tenant_limits.share): a tenant served
 * ahead of the others gets a step's tokens only when they leave some, and a
 * tenant that had no work comes back level with the others, not with credit.
 * With one such tenant, order is as above.
 *
 * The scheduler knows token ids only; sampling and stop conditions belong to
 * the engine, which appends each sampled token and finishes requests.
 * Not thread-safe: the engine thread owns it. */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#include "core/kv.h"

#define WEFT_SCHED_MAX_TENANTS 256
#define WEFT_TENANT_NAME_MAX 64

struct weft_sched_config {
    uint32_t n_ctx;              /* max positions of one sequence (prompt + generated) */
    uint32_t max_step_tokens;    /* token budget of a step (default 512) */
    uint32_t max_running;        /* sequences in one step (default 64) */
    uint32_t max_waiting;        /* waiting queue bound; add() is refused beyond (default 1024) */
    uint32_t max_prefill_chunk;  /* most tokens of one prompt in one step (0 = budget) */
    /* Most prompt tokens, over all its prompts below the top priority (the
     * highest this scheduler has been given), in one step; 0 = no limit.
     * Bounds how long a step of low-priority prefill runs, which is what a
     * higher-priority arrival waits for before its own prefill starts. */
    uint32_t low_prefill_tokens;
    /* A prompt chunk that would pass a multiple of this many positions, or the prompt's last
     * full block before its last token, ends there (a hybrid's state checkpoints are taken at
     * them, core/kv.h); 0 = anywhere. */
    uint32_t align_chunks;
};

/* 0 = unlimited. */
struct weft_tenant_limits {
    uint32_t max_kv_blocks;      /* blocks held by the tenant's running sequences */
    uint32_t max_running;        /* its sequences running at once */
    uint32_t share;              /* weight of its prompt-token time slice (0 = 1) */
};

/* The engine's cost model of a step (seconds), for stall-free batching: the
 * decode rows cost decode_fixed_s + decode_row_s per row, each prompt token
 * prefill_token_s. A step with decode rows plans at most target_s, or, with
 * target_s 0, target_factor times its own decode rows' cost (so a step that
 * carries prompt tokens costs at most that many times one that does not).
 * Neither, or an unmeasured cost: no limit. */
struct weft_sched_cost {
    double target_s;             /* strict target */
    double target_factor;        /* or relative to the step's decode cost */
    double decode_fixed_s;       /* the decode rows' part of a step: fixed */
    double decode_row_s;         /* and per row */
    double prefill_token_s;      /* one prompt token */
    /* 0: the target is strict. N: a step also carries at least 1/N of the
     * prompt tokens waiting (its own share of a backlog spread over N steps),
     * so prompts keep pace with arrivals where the target alone would let
     * them pile up (a machine whose prefill is slow for its decode). */
    uint32_t spread_steps;
};

/* The decode part of the cost model, fitted to measured decode-only steps:
 * time = fixed + per_row * rows, by least squares over a moving window
 * (exponentially weighted). The per-row slope is refitted only while the
 * window holds steps of different row counts (rows' variance 0.2, as in a
 * window of steps a row apart); otherwise the last slope is kept and the
 * level follows the recent steps. */
struct weft_step_fit {
    double w, r, rr, t, rt;      /* weighted sums: 1, rows, rows^2, time, rows*time */
    double slope;                /* seconds per row (>= 0) */
};
void weft_step_fit_add(struct weft_step_fit *f, uint32_t rows, double seconds);
/* false while nothing is measured */
bool weft_step_fit_get(const struct weft_step_fit *f, double *fixed_s, double *row_s);

/* What the last schedule() planned (for the stats, the logs and tests). */
struct weft_sched_plan {
    uint32_t decode_rows;        /* one-token rows of generated positions */
    uint32_t prefill_tokens;     /* the rest */
    uint32_t prefill_chunks;
    uint32_t prefill_cap;        /* the prompt tokens the target allowed (UINT32_MAX: no limit) */
    double planned_s;            /* the step's cost by the model (0: unmeasured) */
    double target_s;             /* the target it planned against (0: none, or no decode rows) */
};

enum weft_req_state {
    WEFT_REQ_WAITING,            /* not started, or preempted (see kv.swapped) */
    WEFT_REQ_RUNNING,
};

struct weft_sched_req {
    uint64_t id;
    int32_t priority;
    uint32_t tenant;
    uint64_t arrival;
    int32_t *tokens;             /* prompt, then generated ids */
    uint32_t n_tokens, cap;
    uint32_t n_prompt;
    uint32_t max_total;          /* n_prompt + most new tokens */
    uint32_t n_computed;         /* leading tokens whose K/V are in the cache */
    uint32_t n_cached;           /* prompt tokens the prefix cache supplied (last admission) */
    uint32_t n_prefilled;        /* prompt tokens computed for it (all admissions) */
    uint32_t n_preempt;
    uint64_t preempted_step;     /* not re-admitted in the step that preempted it */
    uint64_t planned_step;       /* the last step that scheduled it */
    enum weft_req_state state;
    struct weft_kv_seq kv;
    void *user;                  /* the engine's */
    /* The prefix cache supplies none of its prompt: every row is computed
     * (an embedding that pools them all). Set by the caller right after
     * add(); its full blocks are still registered as they are computed. */
    bool no_prefix_hits;
};

/* One entry of a step: compute tokens[pos0 .. pos0+n) of req; sample after
 * the last of them when `sample` (the chunk reaches the end of its tokens). */
struct weft_sched_item {
    struct weft_sched_req *req;
    uint32_t pos0, n;
    bool sample;
};

struct weft_sched_stats {
    uint32_t running, waiting, swapped;
    uint64_t steps, step_tokens;         /* totals, for tokens per step */
    uint64_t preempt_swap, preempt_recompute;
    uint64_t prefix_hit_tokens, prefill_tokens;
    uint64_t rejected_full, rejected_quota;
    uint64_t low_prefill_limited;        /* steps whose lower-priority prompts low_prefill_tokens held back */
    uint32_t low_prefill_tokens;         /* the limit now (0 = none) */
    uint64_t itl_limited;                /* steps whose prompt tokens the ITL target held back */
    uint64_t itl_over;                   /* steps with decode rows planned over the target (its
                                            one-token floor, the backlog's share, decode rows
                                            alone over it, or rows a KV preemption took out
                                            after the step's prompt tokens were sized) */
    uint64_t itl_spread;                 /* steps whose cap the backlog's share raised */
    uint64_t share_deferred;             /* steps that gave a tenant ahead of its share only leftovers */
    struct weft_sched_plan last;
};

struct weft_sched;

weft_status weft_sched_create(const struct weft_sched_config *cfg, struct weft_kv_pool *kv, struct weft_sched **out);
/* Change low_prefill_tokens (from the next step on): the engine sizes it from
 * its measured prefill rate. */
void weft_sched_set_low_prefill(struct weft_sched *s, uint32_t tokens);
/* The cost model for the next steps (stall-free batching, above). */
void weft_sched_set_cost(struct weft_sched *s, const struct weft_sched_cost *c);
/* Finishes (frees) every request still held. */
void weft_sched_free(struct weft_sched *s);

/* Tenant by name (created on first use; tenant 0 is "" with no limits).
 * Setting limits applies from the next step. */
weft_status weft_sched_tenant(struct weft_sched *s, const char *name, const struct weft_tenant_limits *lim,
                              uint32_t *idx);

/* Queue a request. max_new 0 makes a prompt-only request (an embedding):
 * all n_prompt positions are computed, the item of its last chunk has
 * `sample` set, and nothing is appended. Refused with WEFT_ERR_BUSY when the
 * waiting queue is full, WEFT_ERR_CONTEXT when prompt + max_new exceeds n_ctx, WEFT_ERR_NO_ROOM
 * when it could never fit in the pool, WEFT_ERR_QUOTA when it could never fit
 * in its tenant's KV quota, WEFT_ERR_INVALID_ARG for an empty prompt or an
 * unknown tenant. */
weft_status weft_sched_add(struct weft_sched *s, uint64_t id, const int32_t *prompt, uint32_t n_prompt,
                           uint32_t max_new, int32_t priority, uint32_t tenant, void *user,
                           struct weft_sched_req **out);

/* Plan the next step: *items (owned by s, valid until the next call) lists
 * what to compute, running sequences first. May preempt. n_items 0 when
 * nothing can run. */
weft_status weft_sched_schedule(struct weft_sched *s, struct weft_sched_item **items, uint32_t *n_items);

/* The step ran: advance each item's computed count and register full blocks
 * in the prefix cache. */
void weft_sched_step_done(struct weft_sched *s, const struct weft_sched_item *items, uint32_t n_items);

/* Append a sampled token to a running request. */
weft_status weft_sched_append(struct weft_sched *s, struct weft_sched_req *r, int32_t token);

/* Remove a request in any state and free its blocks now (finish or abort);
 * r is freed. */
void weft_sched_finish(struct weft_sched *s, struct weft_sched_req *r);

struct weft_sched_req *weft_sched_find(struct weft_sched *s, uint64_t id);
void weft_sched_stats(const struct weft_sched *s, struct weft_sched_stats *out);
/* What the last schedule() planned (stats' last) */
const struct weft_sched_plan *weft_sched_last_plan(const struct weft_sched *s);
/* Zero the totals in the stats (steps, tokens, preemptions, prefix hits). */
void weft_sched_reset_totals(struct weft_sched *s);
/* Queues in order (for tests): running then waiting. */
uint32_t weft_sched_running(const struct weft_sched *s, struct weft_sched_req *const **reqs);
uint32_t weft_sched_waiting(const struct weft_sched *s, struct weft_sched_req *const **reqs);
/* Blocks the tenant's running sequences hold. */
uint32_t weft_sched_tenant_blocks(const struct weft_sched *s, uint32_t tenant);
/* Tenants so far (index 0 is ""), a tenant's name, and the prompt tokens
 * computed for it (all steps; not reset with the totals). */
uint32_t weft_sched_n_tenants(const struct weft_sched *s);
const char *weft_sched_tenant_name(const struct weft_sched *s, uint32_t tenant);
uint64_t weft_sched_tenant_prefill(const struct weft_sched *s, uint32_t tenant);

#endif
