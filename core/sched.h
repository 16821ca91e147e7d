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
};

/* 0 = unlimited. */
struct weft_tenant_limits {
    uint32_t max_kv_blocks;      /* blocks held by the tenant's running sequences */
    uint32_t max_running;        /* its sequences running at once */
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
};

struct weft_sched;

weft_status weft_sched_create(const struct weft_sched_config *cfg, struct weft_kv_pool *kv, struct weft_sched **out);
/* Change low_prefill_tokens (from the next step on): the engine sizes it from
 * its measured prefill rate. */
void weft_sched_set_low_prefill(struct weft_sched *s, uint32_t tokens);
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
/* Zero the totals in the stats (steps, tokens, preemptions, prefix hits). */
void weft_sched_reset_totals(struct weft_sched *s);
/* Queues in order (for tests): running then waiting. */
uint32_t weft_sched_running(const struct weft_sched *s, struct weft_sched_req *const **reqs);
uint32_t weft_sched_waiting(const struct weft_sched *s, struct weft_sched_req *const **reqs);
/* Blocks the tenant's running sequences hold. */
uint32_t weft_sched_tenant_blocks(const struct weft_sched *s, uint32_t tenant);

#endif
