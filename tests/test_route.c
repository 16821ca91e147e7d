/* The routing policy (core/route.h) on synthetic instance states: the
 * prefix holder wins while quick and loses once waiting for it costs more
 * than recomputing; unequal speeds get proportional shares; ties break the
 * same way every time; unhealthy, stale and full instances are never
 * chosen; without shared prefixes on equal instances its choices are
 * least-load's; round-robin takes turns. */
#include <string.h>

#include "core/route.h"
#include "tests/check.h"

/* splitmix64: the traces are the same on every run */
static uint64_t test_rand_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static struct weft_route_instance idle(double prefill_tps)
{
    return (struct weft_route_instance){.healthy = true, .age_s = 0.1, .prefill_tps = prefill_tps,
                                        .decode_tps = prefill_tps / 10, .max_seqs = 64, .max_waiting = 256};
}

static const struct weft_route_config weft = {.policy = WEFT_ROUTE_WEFT};
static const struct weft_route_config least = {.policy = WEFT_ROUTE_LEAST_LOAD};

static uint32_t pick(const struct weft_route_config *cfg, const struct weft_route_request *rq,
                     const struct weft_route_instance *in, uint32_t n, struct weft_route_choice *c)
{
    struct weft_route_choice out[16];
    uint32_t k = 0;
    CHECK(weft_route_rank(cfg, rq, in, n, out, &k) == WEFT_OK);
    if (k == 0) return UINT32_MAX;
    if (c) *c = out[0];
    return out[0].index;
}

static void prefix_holder_wins_when_idle(void)
{
    struct weft_route_instance in[3] = {idle(1000), idle(1000), idle(1000)};
    in[1].matched_blocks = 10;
    struct weft_route_request rq = {.n_prompt = 200, .max_tokens = 16};
    struct weft_route_choice c;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 1);
    CHECK_EQ_INT(c.matched_tokens, 160);
    CHECK(c.reason == WEFT_ROUTE_R_PREFIX);
    CHECK_NEAR(c.predicted_ttft_s, 40.0 / 1000, 1e-12);
    /* a whole-prompt match still computes the last token */
    in[1].matched_blocks = 13;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 1);
    CHECK_EQ_INT(c.matched_tokens, 199);
}

static void prefix_holder_loses_when_its_wait_exceeds_recompute(void)
{
    struct weft_route_instance in[2] = {idle(1000), idle(1000)};
    in[0].matched_blocks = 12;  /* 192 of 200 */
    struct weft_route_request rq = {.n_prompt = 200};
    /* its queue costs less than recomputing 192 tokens: it still wins */
    in[0].queued_prefill_tokens = 150;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, NULL), 0);
    /* more than that: recomputing elsewhere is quicker, so the prefix is copied there */
    in[0].queued_prefill_tokens = 250;
    struct weft_route_choice c;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, &c), 1);
    CHECK(c.reason == WEFT_ROUTE_R_SPEED && c.matched_tokens == 0);
    /* a faster instance without the prefix beats a slow holder */
    struct weft_route_instance f[2] = {idle(100), idle(10000)};
    f[0].matched_blocks = 6;
    CHECK_EQ_INT(pick(&weft, &rq, f, 2, NULL), 1);
    /* and a slot wait (no free sequence slot) counts against the holder */
    in[0].queued_prefill_tokens = 0;
    in[0].running = in[0].max_seqs = 8;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, NULL), 1);
}

/* Under KV pressure a copy evicts cached prefixes the instance will have to
 * recompute: the holder keeps a request it would lose with room to spare. */
static void a_copy_that_would_evict_costs_its_damage(void)
{
    struct weft_route_instance in[2] = {idle(1000), idle(1000)};
    in[0].matched_blocks = 12;
    in[0].queued_prefill_tokens = 250;  /* the wait at the holder exceeds recomputing 192 tokens */
    struct weft_route_request rq = {.n_prompt = 200};
    in[0].kv_known = in[1].kv_known = true;
    in[0].kv_free_blocks = in[1].kv_free_blocks = 100;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, NULL), 1);  /* room: copied */
    in[1].kv_free_blocks = 0;                        /* full: 13 blocks evicted there (208 tokens to redo) */
    struct weft_route_choice c;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, &c), 0);
    CHECK_NEAR(c.predicted_e2e_s, (250.0 + 8) / 1000, 1e-9);
    /* a much longer wait still moves it */
    in[0].queued_prefill_tokens = 2000;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, NULL), 1);
}

/* Requests of unique prompts arrive at 1.2x what the fleet can compute
 * (saturated: every queue grows); each instance drains its queue at its
 * rate. Each request goes where it would start soonest, so the queues grow
 * in step and the tokens split in proportion to speed. (Below saturation
 * the faster instances take more than their share: a request finishes
 * sooner there.) */
static void unequal_speeds_get_proportional_shares(void)
{
    const double rate[4] = {4000, 2000, 1000, 1000};
    struct weft_route_instance in[4];
    for (int i = 0; i < 4; i++) in[i] = idle(rate[i]);
    double routed[4] = {0}, total = 0;
    struct weft_route_request rq = {.n_prompt = 500};
    const double dt = 0.01;
    uint64_t rng = 7;
    double arrivals = 0;
    for (int step = 0; step < 20000; step++) {
        arrivals += 1.2 * 8000 * dt / 500;
        while (arrivals >= 1) {
            arrivals -= 1;
            rq.n_prompt = 400 + (uint32_t)(test_rand_next(&rng) % 201);
            uint32_t k = pick(&weft, &rq, in, 4, NULL);
            if (k == UINT32_MAX) continue;
            in[k].queued_prefill_tokens += rq.n_prompt;
            routed[k] += rq.n_prompt;
            total += rq.n_prompt;
        }
        for (int i = 0; i < 4; i++) {
            double d = rate[i] * dt;
            in[i].queued_prefill_tokens = in[i].queued_prefill_tokens > d ? in[i].queued_prefill_tokens - (uint64_t)d : 0;
        }
    }
    for (int i = 0; i < 4; i++) {
        double share = routed[i] / total, want = rate[i] / 8000;
        CHECK_MSG(share > want * 0.9 && share < want * 1.1, "instance %d: %.3f of the tokens, %.3f wanted", i, share,
                  want);
    }
}

/* "Finish soonest": with equal prefill, the faster decoder takes a long
 * answer; a request that says nothing of its length is a tie. */
static void a_long_answer_goes_to_the_faster_decoder(void)
{
    const struct weft_route_config weft = {.policy = WEFT_ROUTE_WEFT, .decode_aware = true};
    struct weft_route_instance in[2] = {idle(2000), idle(2000)};
    in[0].decode_row_tps = 20;
    in[1].decode_row_tps = 80;
    struct weft_route_request rq = {.n_prompt = 200, .max_tokens = 100};
    struct weft_route_choice c;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, &c), 1);
    CHECK_NEAR(c.predicted_e2e_s - c.predicted_ttft_s, 100.0 / 80, 1e-9);
    rq.max_tokens = 0;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, NULL), 0);
    /* not asked for (the default): the generation time is not counted */
    static const struct weft_route_config plain = {.policy = WEFT_ROUTE_WEFT};
    rq.max_tokens = 100;
    CHECK_EQ_INT(pick(&plain, &rq, in, 2, NULL), 0);
    /* a long prefill queue at the fast decoder outweighs its decode gain */
    rq.max_tokens = 100;
    in[1].queued_prefill_tokens = 20000;  /* 10 s */
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, NULL), 0);
}

/* No free slot: the wait is for running requests to finish, at one
 * sequence's measured decode rate and the answers' mean length there. A
 * total decode rate measured at batch 1 divided by 64 running would make a
 * fast instance look 64 times slower to free a slot (a burst then split
 * evenly over 4:2:1:1 instances). */
static void a_full_instance_waits_for_a_slot_at_its_row_rate(void)
{
    struct weft_route_instance in[2] = {idle(16000), idle(4000)};
    in[0].running = 64;             /* every slot taken */
    in[0].waiting = 20;
    in[0].queued_prefill_tokens = 64000;  /* 4 s at 16000/s */
    in[0].decode_tps = 400;         /* measured on one row */
    in[0].decode_row_tps = 400;
    in[0].mean_gen_tokens = 4;
    in[1].queued_prefill_tokens = 16000;  /* 4 s at 4000/s */
    struct weft_route_request rq = {.n_prompt = 1000, .max_tokens = 4};
    struct weft_route_choice c;
    /* 4.06 s + 21 slots ahead x 4 tokens / 400/s / 64 slots (about 3 ms) vs 4.25 s */
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, &c), 0);
    CHECK_NEAR(c.predicted_ttft_s, 65000.0 / 16000 + 4.0 / 400 * 21 / 64, 1e-9);
    /* without the row rate, the total's share per running request */
    in[0].decode_row_tps = 0;
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, &c), 1);
    /* long answers there: the slot wait is long (64 tokens at 400/s, 21/64 of them) */
    in[0].decode_row_tps = 400;
    in[0].mean_gen_tokens = 0;      /* none seen: 64 tokens */
    CHECK_EQ_INT(pick(&weft, &rq, in, 2, &c), 0);
    CHECK_NEAR(c.predicted_ttft_s, 65000.0 / 16000 + 64.0 / 400 * 21 / 64, 1e-9);
}

static void ties_break_the_same_way_every_time(void)
{
    struct weft_route_instance in[4] = {idle(1000), idle(1000), idle(1000), idle(1000)};
    struct weft_route_request rq = {.n_prompt = 100};
    for (int r = 0; r < 3; r++) CHECK_EQ_INT(pick(&weft, &rq, in, 4, NULL), 0);
    /* equal time: more matched tokens, then fewer requests, then the lower index */
    in[0].running = 3;
    in[2].running = 1;
    in[3].running = 1;
    CHECK_EQ_INT(pick(&weft, &rq, in, 4, NULL), 1);
    in[1].running = 2;
    CHECK_EQ_INT(pick(&weft, &rq, in, 4, NULL), 2);
    struct weft_route_choice out[4];
    uint32_t k;
    CHECK(weft_route_rank(&weft, &rq, in, 4, out, &k) == WEFT_OK && k == 4);
    CHECK(out[0].index == 2 && out[1].index == 3 && out[2].index == 1 && out[3].index == 0);
}

static void unhealthy_stale_and_full_are_never_chosen(void)
{
    struct weft_route_instance in[4] = {idle(1000), idle(100000), idle(1000), idle(1000)};
    struct weft_route_request rq = {.n_prompt = 300};
    in[1].healthy = false;  /* fastest and holding the prefix, but down */
    in[1].matched_blocks = 18;
    in[2].age_s = 5;  /* no state for 5 s */
    in[2].matched_blocks = 18;
    in[3].running = in[3].max_seqs;  /* no slot and no room to wait */
    in[3].waiting = in[3].max_waiting;
    in[3].matched_blocks = 18;
    in[0].queued_prefill_tokens = 1000000;
    struct weft_route_choice out[4];
    uint32_t k;
    CHECK(weft_route_rank(&weft, &rq, in, 4, out, &k) == WEFT_OK);
    CHECK(k == 1 && out[0].index == 0);
    CHECK(weft_route_rank(&least, &rq, in, 4, out, &k) == WEFT_OK && k == 1 && out[0].index == 0);
    in[0].healthy = false;
    CHECK(weft_route_rank(&weft, &rq, in, 4, out, &k) == WEFT_OK && k == 0);
    struct weft_route_config rr = {.policy = WEFT_ROUTE_ROUND_ROBIN};
    CHECK(weft_route_rank(&rr, &rq, in, 4, out, &k) == WEFT_OK && k == 0);
    /* not yet measured: weft cannot rank it */
    struct weft_route_instance u = idle(0);
    CHECK(weft_route_rank(&weft, &rq, &u, 1, out, &k) == WEFT_OK && k == 0);
    CHECK(weft_route_rank(&weft, NULL, &u, 1, out, &k) == WEFT_ERR_INVALID_ARG);
}

/* A replayed trace of unique prompts on four equal instances, with the load
 * each dispatch and completion leaves: weft's choice is least-load's. */
static void without_shared_prefixes_it_is_least_load(void)
{
    struct weft_route_instance a[4], b[4];
    for (int i = 0; i < 4; i++) a[i] = b[i] = idle(2000);
    uint64_t rng = 11;
    struct { uint32_t inst, uncached; } live[64];
    int n_live = 0, agree = 0, n = 0;
    for (int t = 0; t < 5000; t++) {
        if (n_live == 64 || (n_live && test_rand_next(&rng) % 3 == 0)) {
            int j = (int)(test_rand_next(&rng) % (uint64_t)n_live);
            weft_route_first_token(&a[live[j].inst], live[j].uncached);
            weft_route_finished(&a[live[j].inst]);
            weft_route_first_token(&b[live[j].inst], live[j].uncached);
            weft_route_finished(&b[live[j].inst]);
            live[j] = live[--n_live];
            continue;
        }
        struct weft_route_request rq = {.n_prompt = 16 + (uint32_t)(test_rand_next(&rng) % 2000)};
        uint32_t x = pick(&weft, &rq, a, 4, NULL), y = pick(&least, &rq, b, 4, NULL);
        n++;
        agree += x == y;
        if (x == UINT32_MAX) continue;
        weft_route_dispatched(&a[x], rq.n_prompt);
        weft_route_dispatched(&b[x], rq.n_prompt);  /* the same history for both */
        live[n_live].inst = x;
        live[n_live++].uncached = rq.n_prompt;
    }
    CHECK_EQ_INT(agree, n);
}

static void round_robin_takes_turns_over_the_eligible(void)
{
    struct weft_route_instance in[3] = {idle(1000), idle(1000), idle(1000)};
    in[1].healthy = false;
    struct weft_route_request rq = {.n_prompt = 10};
    struct weft_route_config rr = {.policy = WEFT_ROUTE_ROUND_ROBIN};
    uint32_t seen[4];
    for (uint64_t t = 0; t < 4; t++) {
        rr.rr_next = t;
        struct weft_route_choice c = {0};
        seen[t] = pick(&rr, &rq, in, 3, &c);
        CHECK(c.reason == WEFT_ROUTE_R_ROUND_ROBIN);
    }
    CHECK(seen[0] == 0 && seen[1] == 2 && seen[2] == 0 && seen[3] == 2);
}

static void names_round_trip(void)
{
    enum weft_route_policy p;
    CHECK(weft_route_policy_parse("least-load", &p) && p == WEFT_ROUTE_LEAST_LOAD);
    CHECK(weft_route_policy_parse("weft", &p) && p == WEFT_ROUTE_WEFT);
    CHECK(!weft_route_policy_parse("random", &p));
    CHECK(!strcmp(weft_route_reason_name(WEFT_ROUTE_R_PREFIX), "prefix"));
}

/* Roles: a prefill instance is not a decode pick while another can take
 * the request; PD hands a long uncached prompt to the quickest prefill
 * instance when it is no slower (a decode instance) or faster (both). */
static void prefill_instances_take_long_prompts_for_decoders(void)
{
    struct weft_route_instance in[3] = {idle(1000), idle(1000), idle(2000)};
    in[0].role = WEFT_ROUTE_ROLE_DECODE;
    in[1].role = WEFT_ROUTE_ROLE_PREFILL;
    in[2].role = WEFT_ROUTE_ROLE_PREFILL;
    struct weft_route_request rq = {.n_prompt = 1000, .max_tokens = 16};
    struct weft_route_choice c;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);  /* the faster prefill instance is not a decode pick */
    struct weft_route_pd_choice pd;
    CHECK(weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    CHECK_EQ_INT(pd.index, 2);
    CHECK_NEAR(pd.predicted_s, 0.5, 1e-12);
    /* below the threshold, or with PD off: the decoder prefills itself */
    struct weft_route_request shortrq = {.n_prompt = 400, .max_tokens = 16};
    CHECK_EQ_INT(pick(&weft, &shortrq, in, 3, &c), 0);
    CHECK(!weft_route_pd(&weft, 512, &shortrq, in, 3, &c, &pd));
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(!weft_route_pd(&weft, 0, &rq, in, 3, &c, &pd));
    /* the decoder's cached prefix counts: only its uncached part is handed off */
    in[0].matched_blocks = 40;  /* 640 of 1000 */
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(!weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    in[0].matched_blocks = 0;
    /* equal speeds: a decode instance hands off on a tie, one doing both does not */
    in[2].prefill_tps = 1000;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd) && pd.index == 1);  /* the tie: lower index */
    in[0].role = WEFT_ROUTE_ROLE_BOTH;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(!weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    in[0].role = WEFT_ROUTE_ROLE_DECODE;
    /* a decode instance hands off within the slack, not past it */
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 240;  /* 1.24 s against its 1 s */
    CHECK(weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 260;
    CHECK(!weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    /* an operator's larger slack (router --pd-slack) hands it off; 0 is the default */
    struct weft_route_config slack = weft;
    slack.pd_slack = 4;
    CHECK(weft_route_pd(&slack, 512, &rq, in, 3, &c, &pd));
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 3100;  /* 4.1 s against 1 s x 4 */
    CHECK(!weft_route_pd(&slack, 512, &rq, in, 3, &c, &pd));
    /* busy prefill instances: the decoder is quicker, it prefills */
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 5000;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(!weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    /* ... unless its own prefill would stall the sequences it decodes: 6 s against 1 s x (1.25 + 4) */
    in[0].running = 4;
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(!weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 4000;  /* 5 s */
    CHECK_EQ_INT(pick(&weft, &rq, in, 3, &c), 0);
    CHECK(weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    in[0].running = 0;
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 5000;
    /* one prefill instance holding the prompt's prefix is quicker than the idle one */
    in[1].queued_prefill_tokens = in[2].queued_prefill_tokens = 0;
    in[2].matched_blocks = 50;
    CHECK(weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd) && pd.index == 2 && pd.matched_tokens == 800);
    /* unhealthy or stale prefill instances are never handed a prompt */
    in[1].healthy = false;
    in[2].age_s = 10;
    CHECK(!weft_route_pd(&weft, 512, &rq, in, 3, &c, &pd));
    /* nothing but prefill instances: they take requests themselves */
    struct weft_route_instance only[2] = {idle(1000), idle(1000)};
    only[0].role = only[1].role = WEFT_ROUTE_ROLE_PREFILL;
    CHECK_EQ_INT(pick(&weft, &rq, only, 2, &c), 0);
    CHECK(!weft_route_pd(&weft, 512, &rq, only, 2, &c, &pd));
    enum weft_route_role r;
    CHECK(weft_route_role_parse("decode", &r) && r == WEFT_ROUTE_ROLE_DECODE);
    CHECK(!weft_route_role_parse("Decode", &r));
    CHECK(!strcmp(weft_route_role_name(WEFT_ROUTE_ROLE_PREFILL), "prefill"));
}

int main(void)
{
    RUN(prefix_holder_wins_when_idle);
    RUN(prefix_holder_loses_when_its_wait_exceeds_recompute);
    RUN(a_copy_that_would_evict_costs_its_damage);
    RUN(unequal_speeds_get_proportional_shares);
    RUN(a_long_answer_goes_to_the_faster_decoder);
    RUN(a_full_instance_waits_for_a_slot_at_its_row_rate);
    RUN(ties_break_the_same_way_every_time);
    RUN(unhealthy_stale_and_full_are_never_chosen);
    RUN(without_shared_prefixes_it_is_least_load);
    RUN(round_robin_takes_turns_over_the_eligible);
    RUN(names_round_trip);
    RUN(prefill_instances_take_long_prompts_for_decoders);
    return check_summary();
}
