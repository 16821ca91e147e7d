/* The continuous-batching scheduler (core/sched) without a model: a fake
 * step "computes" what was scheduled and samples a token that depends only
 * on the request and its length. Pins the token budget and chunked prefill,
 * priority and FCFS order, preemption (swap and recompute) and resumption,
 * tenant quotas, queue-full and never-fits rejections, abort, prefix hits,
 * and that every block ends free or cached. */
#include <string.h>

#include "core/sched.h"
#include "tests/check.h"

static struct weft_backend *be;

struct env {
    struct weft_kv_pool kv;
    struct weft_sched *s;
};

static void env_init(struct env *e, uint32_t n_blocks, uint32_t n_host, bool cache, struct weft_sched_config cfg)
{
    struct weft_kv_config c = {.n_layer = 1, .n_kv_head = 1, .head_dim = 32, .n_blocks = n_blocks,
                               .n_host_blocks = n_host, .type = WEFT_TYPE_F16, .prefix_cache = cache};
    CHECK(weft_kv_pool_create(&e->kv, be, &c) == WEFT_OK);
    if (!cfg.n_ctx) cfg.n_ctx = 4096;
    CHECK(weft_sched_create(&cfg, &e->kv, &e->s) == WEFT_OK);
}

static void env_free(struct env *e)
{
    struct weft_sched_req *const *q;
    CHECK_EQ_INT(weft_sched_running(e->s, &q), 0);
    CHECK_EQ_INT(weft_sched_waiting(e->s, &q), 0);
    struct weft_kv_stats ks;
    weft_kv_stats(&e->kv, &ks);
    CHECK_EQ_INT(ks.used, 0);
    CHECK_EQ_INT(ks.free + ks.cached, ks.n_blocks);
    CHECK_EQ_INT(ks.host_used, 0);
    CHECK(weft_kv_check(&e->kv) == WEFT_OK);
    weft_sched_free(e->s);
    weft_kv_pool_free(&e->kv);
}

static struct weft_sched_req *add(struct env *e, uint64_t id, uint32_t n_prompt, uint32_t max_new, int32_t prio,
                                  uint32_t tenant)
{
    int32_t p[2048];
    for (uint32_t i = 0; i < n_prompt; i++) p[i] = (int32_t)((id * 1000003u + i * 7919u) % 5000);
    struct weft_sched_req *r = NULL;
    weft_status st = weft_sched_add(e->s, id, p, n_prompt, max_new, prio, tenant, NULL, &r);
    CHECK_MSG(st == WEFT_OK, "add %llu: %s", (unsigned long long)id, weft_last_error());
    return r;
}

static int32_t fake_token(const struct weft_sched_req *r) { return (int32_t)((r->id * 31 + r->n_tokens * 17) % 5000); }

/* One fake step: returns items scheduled; finishes requests at max_total.
 * The "model" checks that every computed token's slot lies in a block the
 * request holds. */
static uint32_t step(struct env *e, struct weft_sched_item *copy, uint32_t *n_done, uint64_t *done_ids)
{
    struct weft_sched_item *it;
    uint32_t n;
    CHECK(weft_sched_schedule(e->s, &it, &n) == WEFT_OK);
    for (uint32_t i = 0; i < n; i++) {
        CHECK(!it[i].req->kv.swapped);
        CHECK((uint64_t)it[i].req->kv.n_blocks * WEFT_KV_BLOCK_TOKENS >= it[i].pos0 + it[i].n);
        CHECK(it[i].pos0 == it[i].req->n_computed);
        if (copy) copy[i] = it[i];
    }
    weft_sched_step_done(e->s, it, n);
    for (uint32_t i = 0; i < n; i++) {
        struct weft_sched_req *r = it[i].req;
        if (!it[i].sample) continue;
        if (r->n_tokens + 1 >= r->max_total) {  /* the last token is never computed */
            if (done_ids) done_ids[(*n_done)++] = r->id;
            weft_sched_finish(e->s, r);
            /* items after i may not point at r (each request appears once) */
        } else {
            CHECK(weft_sched_append(e->s, r, fake_token(r)) == WEFT_OK);
        }
    }
    CHECK(weft_kv_check(&e->kv) == WEFT_OK);
    return n;
}

static void run_to_end(struct env *e, uint32_t *n_done, uint64_t *done_ids)
{
    for (int guard = 0; guard < 100000; guard++) {
        struct weft_sched_req *const *q;
        if (!weft_sched_running(e->s, &q) && !weft_sched_waiting(e->s, &q)) return;
        if (step(e, NULL, n_done, done_ids) == 0) {
            CHECK_MSG(0, "scheduler stalled with work left");
            return;
        }
    }
    CHECK_MSG(0, "did not finish");
}

static void budget_decodes_first_then_chunked_prefill(void)
{
    struct env e;
    env_init(&e, 64, 0, false, (struct weft_sched_config){.max_step_tokens = 64, .max_running = 8});
    add(&e, 1, 50, 4, 0, 0);
    add(&e, 2, 40, 4, 0, 0);
    add(&e, 3, 30, 4, 0, 0);
    struct weft_sched_item it[8];
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 2);
    CHECK(it[0].req->id == 1 && it[0].n == 50 && it[0].sample);
    CHECK(it[1].req->id == 2 && it[1].n == 14 && !it[1].sample);  /* chunk of the budget left */
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 3);
    CHECK(it[0].req->id == 1 && it[0].n == 1 && it[0].sample);   /* decode first */
    CHECK(it[1].req->id == 2 && it[1].pos0 == 14 && it[1].n == 26 && it[1].sample);
    CHECK(it[2].req->id == 3 && it[2].n == 30 && it[2].sample);  /* 64 - 1 - 26 = 37 left */
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void prefill_chunk_limit_and_max_running(void)
{
    struct env e;
    env_init(&e, 64, 0, false,
             (struct weft_sched_config){.max_step_tokens = 100, .max_running = 2, .max_prefill_chunk = 32});
    add(&e, 1, 70, 3, 0, 0);
    add(&e, 2, 10, 3, 0, 0);
    add(&e, 3, 10, 3, 0, 0);
    struct weft_sched_item it[4];
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 2);
    CHECK(it[0].n == 32 && it[1].req->id == 2 && it[1].n == 10);
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 2);  /* request 3 waits: two running at most */
    CHECK(it[0].req->id == 1 && it[0].n == 32 && it[1].req->id == 2 && it[1].n == 1);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void priority_then_fcfs(void)
{
    struct env e;
    env_init(&e, 64, 0, false, (struct weft_sched_config){.max_step_tokens = 16, .max_running = 1});
    add(&e, 1, 8, 2, 0, 0);
    add(&e, 2, 8, 2, 5, 0);
    add(&e, 3, 8, 2, 0, 0);
    add(&e, 4, 8, 2, 5, 0);
    add(&e, 5, 8, 2, -1, 0);
    uint64_t done[8];
    uint32_t n_done = 0;
    run_to_end(&e, &n_done, done);
    CHECK_EQ_INT(n_done, 5);
    uint64_t want[5] = {2, 4, 1, 3, 5};
    for (int i = 0; i < 5; i++) CHECK_MSG(done[i] == want[i], "finish %d: %llu", i, (unsigned long long)done[i]);
    env_free(&e);
}

/* Pool of 6 blocks: three requests of 2 blocks' prompt that grow to 3 each. */
static void preemption_swaps_latest_lowest_and_resumes(void)
{
    struct env e;
    env_init(&e, 6, 16, false, (struct weft_sched_config){.max_step_tokens = 256, .max_running = 8});
    struct weft_sched_req *a = add(&e, 1, 31, 16, 0, 0);
    struct weft_sched_req *b = add(&e, 2, 31, 16, 0, 0);
    struct weft_sched_req *c = add(&e, 3, 31, 16, 0, 0);
    CHECK_EQ_INT(step(&e, NULL, NULL, NULL), 3);  /* 6 blocks, all used */
    CHECK_EQ_INT(step(&e, NULL, NULL, NULL), 3);  /* position 31 still fits */
    /* position 32 needs a third block each: c (latest) is swapped out */
    struct weft_sched_item it[8];
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 2);
    CHECK(it[0].req == a && it[1].req == b);
    CHECK(c->state == WEFT_REQ_WAITING && c->kv.swapped && c->n_preempt == 1);
    struct weft_sched_stats st;
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.preempt_swap, 1);
    CHECK_EQ_INT(st.swapped, 1);
    uint32_t c_computed = c->n_computed;
    CHECK_EQ_INT(c_computed, 32);
    uint64_t done[4];
    uint32_t n_done = 0;
    run_to_end(&e, &n_done, done);
    CHECK(n_done == 3 && done[2] == 3);  /* c resumed after a and b and finished */
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.preempt_recompute, 0);
    CHECK_EQ_INT(st.prefill_tokens, 93);  /* swap kept c's K/V: nothing recomputed */
    env_free(&e);
}

static void preemption_recomputes_when_host_is_full(void)
{
    struct env e;
    env_init(&e, 6, 1, false, (struct weft_sched_config){.max_step_tokens = 256, .max_running = 8});
    add(&e, 1, 31, 16, 0, 0);
    add(&e, 2, 31, 16, 0, 0);
    struct weft_sched_req *c = add(&e, 3, 31, 16, 0, 0);
    for (int i = 0; i < 3; i++) step(&e, NULL, NULL, NULL);
    CHECK(c->state == WEFT_REQ_WAITING && !c->kv.swapped && c->n_computed == 0 && c->kv.n_blocks == 0);
    CHECK_EQ_INT(c->n_tokens, 33);  /* the tokens it generated are kept for the recompute */
    struct weft_sched_stats st;
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.preempt_recompute, 1);
    run_to_end(&e, NULL, NULL);
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.prefill_tokens, 93 + 31);  /* c's prompt again (its generated tokens are not prompt) */
    env_free(&e);
}

static void higher_priority_arrival_preempts_lower(void)
{
    struct env e;
    env_init(&e, 4, 8, false, (struct weft_sched_config){.max_step_tokens = 256, .max_running = 8});
    struct weft_sched_req *lo = add(&e, 1, 40, 8, 0, 0);  /* 3 blocks */
    step(&e, NULL, NULL, NULL);
    struct weft_sched_req *hi = add(&e, 2, 40, 8, 9, 0);
    struct weft_sched_item it[4];
    /* the waiting high-priority request needs 3 blocks of 1 free: lo gives way */
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 1);
    CHECK(it[0].req == hi && lo->kv.swapped && lo->state == WEFT_REQ_WAITING);
    uint64_t done[2];
    uint32_t n_done = 0;
    run_to_end(&e, &n_done, done);
    CHECK(n_done == 2 && done[0] == 2 && done[1] == 1);
    env_free(&e);
}

/* Every sequence slot busy (KV to spare): a waiting request of higher
 * priority takes the slot of the lowest running one (the step after the
 * preemption admits it), rather than waiting for one to finish. */
static void higher_priority_takes_a_busy_slot(void)
{
    struct env e;
    env_init(&e, 64, 64, false, (struct weft_sched_config){.max_step_tokens = 256, .max_running = 2});
    struct weft_sched_req *a = add(&e, 1, 20, 50, 0, 0), *b = add(&e, 2, 20, 50, 0, 0);
    step(&e, NULL, NULL, NULL);
    CHECK(a->state == WEFT_REQ_RUNNING && b->state == WEFT_REQ_RUNNING);
    struct weft_sched_req *hi = add(&e, 3, 20, 4, 5, 0);
    struct weft_sched_item it[4];
    step(&e, it, NULL, NULL);                  /* b (the latest of the lowest) gives its slot */
    CHECK(b->state == WEFT_REQ_WAITING && b->n_preempt == 1 && a->state == WEFT_REQ_RUNNING);
    uint32_t n = step(&e, it, NULL, NULL);
    int hi_in = 0;
    for (uint32_t k = 0; k < n; k++) hi_in |= it[k].req == hi;
    CHECK(hi_in && hi->state == WEFT_REQ_RUNNING);
    /* equal priority never preempts for a slot */
    struct weft_sched_req *c = add(&e, 4, 20, 4, 0, 0);
    step(&e, NULL, NULL, NULL);
    CHECK(c->state == WEFT_REQ_WAITING && a->n_preempt == 0);
    uint64_t done[4];
    uint32_t n_done = 0;
    run_to_end(&e, &n_done, done);
    CHECK(n_done == 4 && done[0] == 3);
    env_free(&e);
}

/* While a higher priority prefills, a lower one's prompt chunks wait (its
 * decode rows do not): the higher priority's first token is not held up by
 * lower prompts. */
static void lower_prefill_waits_while_a_higher_one_prefills(void)
{
    struct env e;
    env_init(&e, 64, 0, false,
             (struct weft_sched_config){.max_step_tokens = 256, .max_running = 4, .max_prefill_chunk = 16});
    struct weft_sched_req *dec = add(&e, 1, 8, 40, 0, 0);
    struct weft_sched_item it[8];
    step(&e, it, NULL, NULL);                       /* dec's prompt: 8 tokens, decoding from now */
    struct weft_sched_req *lo = add(&e, 2, 64, 4, 0, 0);
    step(&e, it, NULL, NULL);                       /* lo's first chunk */
    CHECK_EQ_INT(lo->n_computed, 16);
    struct weft_sched_req *hi = add(&e, 3, 32, 4, 5, 0);
    uint32_t n = step(&e, it, NULL, NULL);
    int has_hi = 0, has_lo = 0, has_dec = 0;
    for (uint32_t k = 0; k < n; k++) {
        has_hi |= it[k].req == hi;
        has_lo |= it[k].req == lo;
        has_dec |= it[k].req == dec;
    }
    CHECK(has_hi && !has_lo && has_dec);
    CHECK_EQ_INT(lo->n_computed, 16);
    step(&e, it, NULL, NULL);                       /* hi's second chunk: its prompt is done */
    CHECK_EQ_INT(hi->n_computed, 32);
    CHECK_EQ_INT(lo->n_computed, 16);
    step(&e, it, NULL, NULL);                       /* hi decodes: lo's chunks go on */
    CHECK_EQ_INT(lo->n_computed, 32);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

/* low_prefill_tokens: while no higher priority has been seen, prompts take
 * the whole budget; once one has, prompts below it take at most that many
 * tokens of a step in all (decodes and the top priority's prompts do not
 * count), and they still finish. */
static uint32_t prompt_tokens(const struct weft_sched_item *it, uint32_t n, int32_t below)
{
    uint32_t t = 0;
    for (uint32_t k = 0; k < n; k++)
        if (it[k].req->priority < below && it[k].pos0 < it[k].req->n_prompt) t += it[k].n;
    return t;
}

static void low_priority_prefill_is_bounded(void)
{
    struct env e;
    env_init(&e, 64, 0, false,
             (struct weft_sched_config){.max_step_tokens = 256, .max_running = 8, .low_prefill_tokens = 24});
    struct weft_sched_req *a = add(&e, 1, 100, 60, 0, 0);  /* decodes throughout: nothing in `it` is freed */
    struct weft_sched_item it[8];
    uint32_t n = step(&e, it, NULL, NULL);          /* only priority 0 so far: it is the top */
    CHECK(n == 1 && it[0].n == 100);
    struct weft_sched_req *b = add(&e, 2, 60, 4, 0, 0), *c = add(&e, 3, 60, 4, 0, 0);
    struct weft_sched_req *hi = add(&e, 4, 40, 30, 5, 0);
    n = step(&e, it, NULL, NULL);                   /* hi's prompt alone prefills; a decodes */
    CHECK_EQ_INT(hi->n_computed, 40);
    CHECK_EQ_INT(prompt_tokens(it, n, 5), 0);
    for (int k = 0; k < 3; k++) {                   /* hi decodes: b and c share 24 tokens a step */
        n = step(&e, it, NULL, NULL);
        CHECK_EQ_INT(prompt_tokens(it, n, 5), 24);
    }
    CHECK_EQ_INT(b->n_computed + c->n_computed, 72);
    CHECK_EQ_INT(b->n_computed, 60);                /* b first (earlier), then c */
    struct weft_sched_stats st;
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.low_prefill_limited, 3);
    CHECK_EQ_INT(st.low_prefill_tokens, 24);
    struct weft_sched_req *hi2 = add(&e, 5, 50, 4, 5, 0);
    n = step(&e, it, NULL, NULL);                   /* the top priority's prompt is not bounded */
    CHECK_EQ_INT(hi2->n_computed, 50);
    weft_sched_set_low_prefill(e.s, 0);             /* no limit: c's 48 left in one chunk */
    n = step(&e, it, NULL, NULL);
    CHECK_EQ_INT(c->n_computed, 60);
    (void)a;
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void tenant_limits(void)
{
    struct env e;
    env_init(&e, 64, 0, false, (struct weft_sched_config){.max_step_tokens = 512, .max_running = 16});
    uint32_t ta, tb;
    struct weft_tenant_limits la = {.max_running = 1}, lb = {.max_kv_blocks = 4};
    CHECK(weft_sched_tenant(e.s, "a", &la, &ta) == WEFT_OK && ta == 1);
    CHECK(weft_sched_tenant(e.s, "b", &lb, &tb) == WEFT_OK && tb == 2);
    uint32_t again;
    CHECK(weft_sched_tenant(e.s, "a", NULL, &again) == WEFT_OK && again == ta);
    add(&e, 1, 10, 4, 0, ta);
    add(&e, 2, 10, 4, 0, ta);   /* waits: tenant a runs one at a time */
    add(&e, 3, 40, 8, 0, tb);   /* 3 blocks of b's 4 */
    add(&e, 4, 20, 4, 0, tb);   /* 2 more would exceed b's quota: waits */
    add(&e, 5, 10, 4, 0, 0);    /* the default tenant is not held up by them */
    struct weft_sched_item it[8];
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 3);
    CHECK(it[0].req->id == 1 && it[1].req->id == 3 && it[2].req->id == 5);
    CHECK(weft_sched_tenant_blocks(e.s, tb) <= 4);
    /* a request that could never fit its tenant's quota is refused up front */
    int32_t p[100] = {0};
    struct weft_sched_req *r;
    CHECK(weft_sched_add(e.s, 9, p, 80, 10, 0, tb, NULL, &r) == WEFT_ERR_QUOTA && r == NULL);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void tenant_quota_preempts_within_tenant(void)
{
    /* two of tenant b's requests grow past its quota: b's latest is
     * preempted, not the default tenant's even later one */
    struct env e;
    env_init(&e, 64, 16, false, (struct weft_sched_config){.max_step_tokens = 512, .max_running = 16});
    uint32_t tb;
    struct weft_tenant_limits lb = {.max_kv_blocks = 4};
    CHECK(weft_sched_tenant(e.s, "b", &lb, &tb) == WEFT_OK);
    struct weft_sched_req *b1 = add(&e, 1, 31, 8, 0, tb);
    struct weft_sched_req *b2 = add(&e, 2, 31, 8, 0, tb);
    struct weft_sched_req *d = add(&e, 3, 31, 8, 0, 0);
    step(&e, NULL, NULL, NULL);  /* 2 blocks each; b at its quota */
    step(&e, NULL, NULL, NULL);
    step(&e, NULL, NULL, NULL);  /* position 32 needs a third block */
    CHECK(b1->state == WEFT_REQ_RUNNING && b2->state == WEFT_REQ_WAITING && d->state == WEFT_REQ_RUNNING);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void refusals(void)
{
    struct env e;
    env_init(&e, 8, 0, false, (struct weft_sched_config){.n_ctx = 256, .max_waiting = 2});
    int32_t p[300] = {0};
    struct weft_sched_req *r;
    CHECK(weft_sched_add(e.s, 1, p, 0, 10, 0, 0, NULL, &r) == WEFT_ERR_INVALID_ARG);
    CHECK(weft_sched_add(e.s, 1, p, 250, 10, 0, 0, NULL, &r) == WEFT_ERR_CONTEXT);
    CHECK(weft_sched_add(e.s, 1, p, 200, 20, 0, 0, NULL, &r) == WEFT_ERR_NO_ROOM);  /* > 8 blocks */
    CHECK(weft_sched_add(e.s, 1, p, 100, 10, 0, 7, NULL, &r) == WEFT_ERR_INVALID_ARG);  /* unknown tenant */
    CHECK(weft_sched_add(e.s, 1, p, 10, 10, 0, 0, NULL, &r) == WEFT_OK);
    CHECK(weft_sched_add(e.s, 2, p, 10, 10, 0, 0, NULL, &r) == WEFT_OK);
    CHECK(weft_sched_add(e.s, 3, p, 10, 10, 0, 0, NULL, &r) == WEFT_ERR_BUSY);
    CHECK(strstr(weft_last_error(), "full") != NULL);
    struct weft_sched_stats st;
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.rejected_full, 1);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void abort_frees_blocks_at_once(void)
{
    struct env e;
    env_init(&e, 16, 8, false, (struct weft_sched_config){.max_step_tokens = 512});
    struct weft_sched_req *a = add(&e, 1, 60, 50, 0, 0);
    struct weft_sched_req *b = add(&e, 2, 60, 50, 0, 0);
    step(&e, NULL, NULL, NULL);
    struct weft_kv_stats ks;
    weft_kv_stats(&e.kv, &ks);
    CHECK_EQ_INT(ks.used, 8);
    CHECK(weft_sched_find(e.s, 1) == a);
    weft_sched_finish(e.s, a);
    weft_kv_stats(&e.kv, &ks);
    CHECK_EQ_INT(ks.used, 4);
    CHECK(weft_sched_find(e.s, 1) == NULL);
    /* a swapped-out request's host blocks go too */
    CHECK(weft_kv_seq_swap_out(&e.kv, &b->kv) == WEFT_OK);
    weft_sched_finish(e.s, b);
    env_free(&e);
}

static void prefix_hits_are_counted(void)
{
    struct env e;
    env_init(&e, 64, 0, true, (struct weft_sched_config){.max_step_tokens = 512});
    int32_t p[240];
    for (int i = 0; i < 240; i++) p[i] = (i * 37) % 1000;
    struct weft_sched_req *r;
    CHECK(weft_sched_add(e.s, 1, p, 210, 4, 0, 0, NULL, &r) == WEFT_OK);
    run_to_end(&e, NULL, NULL);
    for (int i = 200; i < 240; i++) p[i] = 999 - i;  /* shares 200 tokens */
    CHECK(weft_sched_add(e.s, 2, p, 230, 4, 0, 0, NULL, &r) == WEFT_OK);
    struct weft_sched_item it[2];
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 1);
    CHECK(it[0].pos0 == 192 && it[0].n == 230 - 192 && r->n_cached == 192);
    run_to_end(&e, NULL, NULL);
    struct weft_sched_stats st;
    weft_sched_stats(e.s, &st);
    CHECK_EQ_INT(st.prefix_hit_tokens, 192);
    CHECK_EQ_INT(st.prefill_tokens, 210 + 38);
    env_free(&e);
}

/* Random load on a tight pool: everything finishes and the accounting holds. */
static void random_load_finishes(void)
{
    struct env e;
    env_init(&e, 24, 10, true, (struct weft_sched_config){.max_step_tokens = 96, .max_running = 6, .max_waiting = 64,
                                                          .max_prefill_chunk = 40});
    uint64_t rng = 99;
    uint32_t n_done = 0, added = 0;
    uint64_t done[200];
    for (int round = 0; round < 60; round++) {
        for (int k = 0; k < 2; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(rng >> 33);
            struct weft_sched_req *q;
            int32_t p[200];
            uint32_t np = 1 + r % 150, share = (r >> 8) % 3;
            for (uint32_t i = 0; i < np; i++) p[i] = (int32_t)(i < 64 ? share * 100 + i : (r >> 4) + i) % 3000;
            if (weft_sched_add(e.s, 1000 + added, p, np, 1 + (r >> 12) % 40, (int32_t)((r >> 20) % 3), 0, NULL, &q) ==
                WEFT_OK)
                added++;
        }
        step(&e, NULL, &n_done, done);
    }
    run_to_end(&e, &n_done, done);
    CHECK_EQ_INT(n_done, added);
    struct weft_sched_stats st;
    weft_sched_stats(e.s, &st);
    printf("  %u requests, %llu steps, %llu preempted (swap %llu), %llu prefix-hit tokens\n", added,
           (unsigned long long)st.steps, (unsigned long long)(st.preempt_swap + st.preempt_recompute),
           (unsigned long long)st.preempt_swap, (unsigned long long)st.prefix_hit_tokens);
    CHECK(st.preempt_swap + st.preempt_recompute > 0);
    env_free(&e);
}

/* Stall-free batching by the cost model: four streams decode when a
 * 1,500-token prompt arrives; every step plans within the 30 ms target (a
 * 10 ms decode step beside 200 prompt tokens of 0.1 ms) and the prompt is
 * spread over 8 steps; a step without decode rows takes the whole budget.
 * With spread_steps 4, the backlog's quarter raises the cap (counted). */
static void itl_target_spreads_a_long_prompt(void)
{
    struct env e;
    env_init(&e, 512, 0, false, (struct weft_sched_config){.max_step_tokens = 512, .max_running = 16});
    struct weft_sched_cost c = {.target_s = 0.030, .decode_fixed_s = 0.010, .prefill_token_s = 0.0001};
    weft_sched_set_cost(e.s, &c);
    for (uint64_t id = 1; id <= 4; id++) add(&e, id, 20, 100, 0, 0);
    struct weft_sched_item it[16];
    struct weft_sched_stats ss;
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 4);
    weft_sched_stats(e.s, &ss);
    CHECK(ss.last.prefill_cap == UINT32_MAX && ss.last.prefill_tokens == 80 && ss.last.decode_rows == 0);
    struct weft_sched_req *r5 = add(&e, 5, 1500, 4, 0, 0);
    uint32_t chunks = 0, tokens = 0;
    for (int guard = 0; guard < 100 && r5->n_computed < 1500; guard++) {
        CHECK_EQ_INT(step(&e, it, NULL, NULL), 5);
        weft_sched_stats(e.s, &ss);
        CHECK_EQ_INT(ss.last.decode_rows, 4);
        CHECK_EQ_INT(ss.last.prefill_cap, 200);
        CHECK_MSG(ss.last.planned_s <= c.target_s * (1 + 1e-9), "planned %.4f s", ss.last.planned_s);
        CHECK(ss.last.prefill_tokens <= 200 && ss.last.prefill_chunks == 1);
        chunks++;
        tokens += ss.last.prefill_tokens;
    }
    CHECK_EQ_INT(chunks, 8);
    CHECK_EQ_INT(tokens, 1500);
    CHECK_EQ_INT(ss.itl_over, 0);
    CHECK_EQ_INT(ss.itl_limited, 7);
    /* a backlog spread over 4 steps: 1,600 tokens go 400, 300, 225, then 200 (the target's) */
    c.spread_steps = 4;
    weft_sched_set_cost(e.s, &c);
    struct weft_sched_req *r6 = add(&e, 6, 1600, 4, 0, 0);
    uint32_t want[] = {400, 300, 225, 200};
    for (int k = 0; k < 4; k++) {
        step(&e, it, NULL, NULL);
        weft_sched_stats(e.s, &ss);
        CHECK_MSG(ss.last.prefill_tokens == want[k], "step %d: %u prompt tokens", k, ss.last.prefill_tokens);
    }
    CHECK(r6->n_computed == 1125);
    CHECK_EQ_INT(ss.itl_spread, 3);
    CHECK_EQ_INT(ss.itl_over, 3);  /* planned 50, 40 and 32.5 ms against 30 */
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

/* The auto target is relative to the step's own decode rows: twice a
 * decode step of 2 ms + 1 ms per row. Six rows (8 ms) leave 80 prompt
 * tokens of 0.1 ms beside them, two rows (4 ms) 40; every step plans within
 * its own target and the 200-token prompts go in 3 and 5 steps. */
static void itl_target_follows_the_rows(void)
{
    struct env e;
    env_init(&e, 512, 0, false, (struct weft_sched_config){.max_step_tokens = 512, .max_running = 16});
    struct weft_sched_cost c = {.target_factor = 2, .decode_fixed_s = 0.002, .decode_row_s = 0.001,
                                .prefill_token_s = 0.0001};
    weft_sched_set_cost(e.s, &c);
    struct weft_sched_req *st[6];
    for (uint64_t id = 1; id <= 6; id++) st[id - 1] = add(&e, id, 20, 200, 0, 0);
    struct weft_sched_item it[16];
    struct weft_sched_stats ss;
    CHECK_EQ_INT(step(&e, it, NULL, NULL), 6);
    weft_sched_stats(e.s, &ss);
    CHECK(ss.last.prefill_cap == UINT32_MAX && ss.last.target_s == 0);
    uint32_t rows[2] = {6, 2}, caps[2] = {80, 40};
    struct weft_sched_req *r = NULL;
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {  /* four streams and the first prompt's go */
            for (int k = 0; k < 4; k++) weft_sched_finish(e.s, st[k]);
            weft_sched_finish(e.s, r);
        }
        r = add(&e, 10 + (uint64_t)phase, 200, 100, 0, 0);
        uint32_t chunks = 0;
        double want_target = 2 * (0.002 + 0.001 * rows[phase]);
        for (int guard = 0; guard < 50 && r->n_computed < 200; guard++) {
            step(&e, it, NULL, NULL);
            weft_sched_stats(e.s, &ss);
            CHECK_EQ_INT(ss.last.decode_rows, rows[phase]);
            CHECK_EQ_INT(ss.last.prefill_cap, caps[phase]);
            CHECK_MSG(fabs(ss.last.target_s - want_target) < 1e-12, "target %.6f s", ss.last.target_s);
            CHECK_MSG(ss.last.planned_s <= ss.last.target_s * (1 + 1e-9), "planned %.6f s", ss.last.planned_s);
            chunks++;
        }
        CHECK_EQ_INT(chunks, (200 + caps[phase] - 1) / caps[phase]);
    }
    CHECK_EQ_INT(ss.itl_over, 0);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

/* A higher-priority arrival that preempts decode rows for KV room is sized
 * by the rows left: 4 streams hold 12 of 13 blocks; a 200-token prompt
 * (4 blocks for its first 60 tokens) takes one out, so the step has 3 rows
 * (target 2 x 5 ms) and 50 prompt tokens, not the 60 of 4 rows' target. */
static void itl_target_after_a_preemption(void)
{
    struct env e;
    env_init(&e, 13, 16, false, (struct weft_sched_config){.max_step_tokens = 512, .max_running = 8});
    struct weft_sched_cost c = {.target_factor = 2, .decode_fixed_s = 0.002, .decode_row_s = 0.001,
                                .prefill_token_s = 0.0001};
    weft_sched_set_cost(e.s, &c);
    for (uint64_t id = 1; id <= 4; id++) add(&e, id, 40, 6, 0, 0);
    step(&e, NULL, NULL, NULL);
    struct weft_sched_stats ss;
    add(&e, 9, 200, 4, 5, 0);
    step(&e, NULL, NULL, NULL);
    weft_sched_stats(e.s, &ss);
    CHECK_MSG(ss.preempt_swap + ss.preempt_recompute == 1, "%llu preempted",
              (unsigned long long)(ss.preempt_swap + ss.preempt_recompute));
    CHECK_EQ_INT(ss.last.decode_rows, 3);
    CHECK_EQ_INT(ss.last.prefill_cap, 50);
    CHECK_EQ_INT(ss.last.prefill_tokens, 50);
    CHECK_MSG(ss.last.planned_s <= ss.last.target_s * (1 + 1e-9), "planned %.4f s against %.4f", ss.last.planned_s,
              ss.last.target_s);
    CHECK_EQ_INT(ss.itl_over, 0);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

/* The decode cost fit: steps of 1..8 rows at 2 ms + 0.5 ms per row give back
 * both parts; then steps of 8 rows only at 10 ms move the level (its
 * prediction for 8 rows follows) with the fixed part and slope never
 * negative; a fit with no steps says so. */
static void decode_cost_fit(void)
{
    struct weft_step_fit f = {0};
    double fixed, row;
    CHECK(!weft_step_fit_get(&f, &fixed, &row));
    for (int k = 0; k < 400; k++) weft_step_fit_add(&f, 1 + k % 8, 0.002 + 0.0005 * (1 + k % 8));
    CHECK(weft_step_fit_get(&f, &fixed, &row));
    CHECK_MSG(fabs(fixed - 0.002) < 1e-9 && fabs(row - 0.0005) < 1e-9, "fixed %.9f, row %.9f", fixed, row);
    for (int k = 0; k < 200; k++) weft_step_fit_add(&f, 8, 0.010);
    CHECK(weft_step_fit_get(&f, &fixed, &row));
    printf("  after the level moved: fixed %.3f ms, %.3f ms per row\n", 1e3 * fixed, 1e3 * row);
    CHECK_MSG(fabs(fixed + 8 * row - 0.010) < 1e-4, "8 rows predicted %.6f s", fixed + 8 * row);
    CHECK(fixed >= 0 && row > 0);
    /* time falling with rows (noise) is no negative slope */
    struct weft_step_fit g = {0};
    for (int k = 0; k < 100; k++) weft_step_fit_add(&g, 1 + k % 4, 0.010 - 0.001 * (k % 4));
    CHECK(weft_step_fit_get(&g, &fixed, &row));
    CHECK(row == 0 && fixed > 0);
    struct weft_step_fit g0 = g;
    weft_step_fit_add(&g, 0, 1.0);  /* ignored: no rows */
    weft_step_fit_add(&g, 3, -1.0); /* ignored: no time */
    CHECK(!memcmp(&g, &g0, sizeof g));
}

/* unfinished requests of a tenant */
static uint32_t tenant_open(struct env *e, uint32_t tenant)
{
    struct weft_sched_req *const *q;
    uint32_t n = 0, k = weft_sched_running(e->s, &q);
    for (uint32_t i = 0; i < k; i++) n += q[i]->tenant == tenant;
    k = weft_sched_waiting(e->s, &q);
    for (uint32_t i = 0; i < k; i++) n += q[i]->tenant == tenant;
    return n;
}

/* Time slices: tenant a keeps 2,000-token prompts coming, tenant b short
 * ones; over a window in which both have work their prompt tokens are within
 * 10 % of their shares' ratio. Then tenant c, idle so far, starts: it comes
 * back level with them, not with credit for its idle time. */
static void tenants_share_prompt_tokens(uint32_t share_a, uint32_t share_b)
{
    struct env e;
    env_init(&e, 4096, 0, false,
             (struct weft_sched_config){.max_step_tokens = 256, .max_running = 64, .n_ctx = 4096});
    uint32_t ta, tb, tc;
    CHECK(weft_sched_tenant(e.s, "a", &(struct weft_tenant_limits){.share = share_a}, &ta) == WEFT_OK);
    CHECK(weft_sched_tenant(e.s, "b", &(struct weft_tenant_limits){.share = share_b}, &tb) == WEFT_OK);
    CHECK(weft_sched_tenant(e.s, "c", NULL, &tc) == WEFT_OK);
    uint64_t id = 1, a0 = 0, b0 = 0;
    for (int k = 0; k < 400; k++) {
        while (tenant_open(&e, ta) < 2) add(&e, id++, 2000, 2, 0, ta);
        while (tenant_open(&e, tb) < 8) add(&e, id++, 40, 2, 0, tb);
        if (k == 40) {  /* the window starts */
            a0 = weft_sched_tenant_prefill(e.s, ta);
            b0 = weft_sched_tenant_prefill(e.s, tb);
        }
        step(&e, NULL, NULL, NULL);
    }
    double a = (double)(weft_sched_tenant_prefill(e.s, ta) - a0), b = (double)(weft_sched_tenant_prefill(e.s, tb) - b0);
    double want = (double)share_a / share_b;
    printf("  shares %u:%u: %.0f and %.0f prompt tokens, %.3f (want %.3f)\n", share_a, share_b, a, b, a / b, want);
    CHECK_MSG(a / b >= want * 0.9 && a / b <= want * 1.1, "ratio %.3f, want %.3f", a / b, want);
    struct weft_sched_stats ss;
    weft_sched_stats(e.s, &ss);
    CHECK(ss.share_deferred > 0);
    /* c starts now: over the next 20 steps it gets about its share (1 of
     * share_a + share_b + 1), not everything for its idle time */
    uint64_t c0 = weft_sched_tenant_prefill(e.s, tc), all0 = ss.prefill_tokens;
    for (int k = 0; k < 20; k++) {
        while (tenant_open(&e, ta) < 2) add(&e, id++, 2000, 2, 0, ta);
        while (tenant_open(&e, tb) < 8) add(&e, id++, 40, 2, 0, tb);
        while (tenant_open(&e, tc) < 8) add(&e, id++, 40, 2, 0, tc);
        step(&e, NULL, NULL, NULL);
    }
    weft_sched_stats(e.s, &ss);
    double c_share = (double)(weft_sched_tenant_prefill(e.s, tc) - c0) / (double)(ss.prefill_tokens - all0);
    double c_want = 1.0 / (share_a + share_b + 1);
    printf("  tenant c, back: %.3f of the prompt tokens (its share %.3f)\n", c_share, c_want);
    CHECK_MSG(c_share >= c_want * 0.5 && c_share <= c_want * 1.5, "c had %.3f", c_share);
    run_to_end(&e, NULL, NULL);
    env_free(&e);
}

static void tenants_share_equally(void) { tenants_share_prompt_tokens(1, 1); }
static void tenants_share_three_to_one(void) { tenants_share_prompt_tokens(3, 1); }

int main(void)
{
    if (weft_backend_open("cpu", 1, &be) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        return 1;
    }
    RUN(budget_decodes_first_then_chunked_prefill);
    RUN(prefill_chunk_limit_and_max_running);
    RUN(priority_then_fcfs);
    RUN(preemption_swaps_latest_lowest_and_resumes);
    RUN(preemption_recomputes_when_host_is_full);
    RUN(higher_priority_arrival_preempts_lower);
    RUN(higher_priority_takes_a_busy_slot);
    RUN(lower_prefill_waits_while_a_higher_one_prefills);
    RUN(low_priority_prefill_is_bounded);
    RUN(tenant_limits);
    RUN(tenant_quota_preempts_within_tenant);
    RUN(refusals);
    RUN(abort_frees_blocks_at_once);
    RUN(prefix_hits_are_counted);
    RUN(random_load_finishes);
    RUN(itl_target_spreads_a_long_prompt);
    RUN(itl_target_follows_the_rows);
    RUN(itl_target_after_a_preemption);
    RUN(decode_cost_fit);
    RUN(tenants_share_equally);
    RUN(tenants_share_three_to_one);
    weft_backend_close(be);
    return check_summary();
}
