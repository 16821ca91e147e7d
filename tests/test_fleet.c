/* The router's fleet state without sockets (server/fleet.h): /load parsing,
 * routing history sending a shared prefix back to its holder, KV events
 * correcting the index (gaps detected), and bounded memory over a million
 * unique prompts through the same decide/finish path the router runs. */
#include <string.h>
#include <sys/resource.h>

#include "server/fleet.h"
#include "server/prompt.h"
#include "tests/check.h"

static const char *LOAD =
    "{\"role\":\"both\",\"model\":\"m\",\"draining\":false,\"running\":2,\"waiting\":1,\"queued_prefill_tokens\":300,"
    "\"tokenizing\":0,\"kv\":{\"block_tokens\":16,\"device\":{\"used\":10,\"cached\":5,\"free\":85,\"total\":100},"
    "\"host\":{\"used\":0,\"total\":0}},\"prefill_tokens_per_s\":1000.5,\"decode_tokens_per_s\":50,\"decode_rows\":2,"
    "\"devices\":[{\"id\":\"cpu:0\",\"name\":\"Xeon\",\"backend\":\"cpu\",\"vendor\":\"intel\",\"memory_bytes\":0}],"
    "\"fingerprint\":\"0123456789abcdef0123456789abcdef\",\"kv_type\":\"f16\","
    "\"limits\":{\"max_seqs\":8,\"max_waiting\":64,\"n_ctx\":2048}}";

static void parse_load(void)
{
    struct fleet_load l;
    char err[128];
    CHECK(weft_fleet_parse_load(LOAD, strlen(LOAD), &l, err, sizeof err));
    CHECK_EQ_INT(l.running, 2);
    CHECK_EQ_INT(l.waiting, 1);
    CHECK_EQ_INT(l.queued_prefill_tokens, 300);
    CHECK_EQ_INT(l.kv_total, 100);
    CHECK_EQ_INT(l.max_seqs, 8);
    CHECK_NEAR(l.prefill_tps, 1000.5, 1e-9);
    CHECK(!strcmp(l.vendor, "intel") && !strcmp(l.device, "Xeon"));
    CHECK(!strcmp(l.fingerprint, "0123456789abcdef0123456789abcdef"));
    CHECK(!weft_fleet_parse_load("{\"running\":1}", 13, &l, err, sizeof err));
    CHECK(!weft_fleet_parse_load("nope", 4, &l, err, sizeof err));
    CHECK(!weft_fleet_parse_load(LOAD, 40, &l, err, sizeof err));  /* cut short */
}

static void make_fleet(struct fleet *f, uint32_t n, enum weft_route_policy pol, uint32_t kv_total)
{
    struct fleet_config cfg = {.policy = pol, .index_min_blocks = 64};
    weft_fleet_init(f, &cfg);
    for (uint32_t i = 0; i < n; i++) {
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.%u:8000", i + 1);
        struct fleet_instance *in;
        CHECK(weft_fleet_add(f, url, &in) == WEFT_OK);
        struct fleet_load l;
        char err[64];
        weft_fleet_parse_load(LOAD, strlen(LOAD), &l, err, sizeof err);
        l.running = l.waiting = 0;
        l.queued_prefill_tokens = 0;
        l.kv_total = kv_total;
        l.max_seqs = 1u << 20;
        weft_fleet_apply_load(f, in, &l, 0);
    }
}

static void prompt(int32_t *ids, uint32_t n, uint32_t group, uint32_t uniq)
{
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)(i < n - 8 ? group * 1000 + i : 500000 + uniq * 8 + i);
}

static void history_keeps_prefix_together(void)
{
    struct fleet f;
    make_fleet(&f, 3, WEFT_ROUTE_WEFT, 1000);
    int32_t ids[200];
    static struct fleet_decision d[40];
    /* five groups, decoding together: each's first request goes where the
     * fewest run, the rest follow their group's prefix */
    struct fleet_instance *home[5] = {0};
    for (uint32_t r = 0; r < 40; r++) {
        uint32_t g = r % 5;
        prompt(ids, 200, g, r);  /* 12 full blocks shared by the group, then 8 unique tokens */
        CHECK(weft_fleet_decide(&f, ids, 200, 16, 0.1, &d[r]) == WEFT_OK);
        weft_fleet_first_token(&f, &d[r]);  /* its prompt is done; it keeps its slot while it decodes */
        if (!home[g]) {
            home[g] = d[r].in;
            CHECK_EQ_INT(d[r].best.matched_tokens, 0);
        } else {
            CHECK(d[r].in == home[g]);
            CHECK_EQ_INT(d[r].best.matched_tokens, 192);
            CHECK_EQ_INT(d[r].best.reason, WEFT_ROUTE_R_PREFIX);
        }
    }
    for (uint32_t r = 0; r < 40; r++) weft_fleet_finished(&f, &d[r], d[r].best.matched_tokens, false);
    CHECK_EQ_INT(f.pred_exact, 40);
    for (uint32_t i = 0; i < 3; i++) CHECK_EQ_INT(f.inst[i]->own_running + f.inst[i]->own_queued, 0);
    CHECK(home[0] != home[1] || home[1] != home[2]);  /* the groups did not all land on one */
    weft_fleet_free(&f);
}

static void events_correct_the_index(void)
{
    struct fleet f;
    make_fleet(&f, 2, WEFT_ROUTE_WEFT, 1000);
    int32_t ids[64];
    prompt(ids, 64, 7, 0);
    uint64_t h[4];
    CHECK_EQ_INT(weft_prompt_block_hashes(ids, 64, h, 4), 4);
    struct fleet_instance *b = f.inst[1];
    /* instance b reports it holds the prompt's first three blocks */
    weft_fleet_kv_snapshot_begin(b);
    weft_fleet_kv_snapshot_end(b, 10);
    CHECK(weft_fleet_kv_event(b, 11, WEFT_KV_EVENT_STORED, h[0]));
    CHECK(weft_fleet_kv_event(b, 12, WEFT_KV_EVENT_STORED, h[1]));
    CHECK(weft_fleet_kv_event(b, 12, WEFT_KV_EVENT_STORED, h[1]));  /* a repeat is ignored */
    CHECK(weft_fleet_kv_event(b, 13, WEFT_KV_EVENT_STORED, h[2]));
    struct fleet_decision d;
    CHECK(weft_fleet_decide(&f, ids, 64, 16, 0.1, &d) == WEFT_OK);
    CHECK(d.in == b);
    CHECK_EQ_INT(d.best.matched_tokens, 48);
    weft_fleet_finished(&f, &d, 48, false);
    /* it evicts the first: the chain breaks there */
    CHECK(weft_fleet_kv_event(b, 14, WEFT_KV_EVENT_REMOVED, h[0]));
    CHECK_EQ_INT(weft_prefix_index_match(&b->ix, h, 4), 0);
    /* a gap: not applied, the caller must resync */
    CHECK(!weft_fleet_kv_event(b, 16, WEFT_KV_EVENT_STORED, h[0]));
    CHECK(!b->ev_synced);
    CHECK_EQ_INT(b->ev_gaps, 1);
    weft_fleet_free(&f);
}

/* A hybrid instance (its /load names a checkpoint interval): a prefix counts only up to the
 * last block a state checkpoint ends, as its events (and routing history) say; a checkpoint
 * replaced takes the count back to the one before. */
static void hybrid_matches_end_at_checkpoints(void)
{
    struct fleet f;
    make_fleet(&f, 2, WEFT_ROUTE_WEFT, 1000);
    int32_t ids[100];
    prompt(ids, 100, 9, 0);
    uint64_t h[6];
    CHECK_EQ_INT(weft_prompt_block_hashes(ids, 100, h, 6), 6);
    struct fleet_instance *b = f.inst[1];
    for (uint32_t i = 0; i < 2; i++) f.inst[i]->load.ckpt_tokens = 32;
    weft_fleet_kv_snapshot_begin(b);
    weft_fleet_kv_snapshot_ckpt(b, h[1]);  /* a snapshot's checkpoint at 32 */
    weft_fleet_kv_snapshot_end(b, 20);
    for (uint32_t i = 0; i < 6; i++) CHECK(weft_fleet_kv_event(b, 21 + i, WEFT_KV_EVENT_STORED, h[i]));
    CHECK(weft_fleet_kv_event(b, 27, WEFT_KV_EVENT_CKPT_STORED, h[3]));  /* 64 */
    struct fleet_decision d;
    CHECK(weft_fleet_decide(&f, ids, 100, 16, 0.1, &d) == WEFT_OK);
    CHECK(d.in == b && d.best.reason == WEFT_ROUTE_R_PREFIX);
    CHECK_EQ_INT(d.best.matched_tokens, 64);  /* six blocks held, the last checkpoint at 64 */
    weft_fleet_finished(&f, &d, 64, false);
    /* dispatched, the prompt leaves a checkpoint at its last full block (96 of 100): history */
    CHECK(weft_fleet_decide(&f, ids, 100, 16, 0.1, &d) == WEFT_OK);
    CHECK(d.in == b);
    CHECK_EQ_INT(d.best.matched_tokens, 96);
    weft_fleet_finished(&f, &d, 96, false);
    /* the instance replaced those two: back to 32 */
    CHECK(weft_fleet_kv_event(b, 28, WEFT_KV_EVENT_CKPT_REMOVED, h[5]));
    CHECK(weft_fleet_kv_event(b, 29, WEFT_KV_EVENT_CKPT_REMOVED, h[3]));
    CHECK(weft_fleet_decide(&f, ids, 100, 16, 0.1, &d) == WEFT_OK);
    CHECK_EQ_INT(d.best.matched_tokens, 32);
    weft_fleet_finished(&f, &d, 32, false);
    weft_fleet_free(&f);
}

static void unhealthy_and_draining_are_skipped(void)
{
    struct fleet f;
    make_fleet(&f, 2, WEFT_ROUTE_LEAST_LOAD, 1000);
    int32_t ids[32];
    prompt(ids, 32, 1, 1);
    struct fleet_decision d;
    weft_fleet_poll_failed(f.inst[0]);
    f.inst[1]->load.draining = true;
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.1, &d) == WEFT_ERR_NO_ROOM);
    f.inst[1]->load.draining = false;
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.1, &d) == WEFT_OK);
    CHECK(d.in == f.inst[1]);
    weft_fleet_finished(&f, &d, -1, false);
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 5.0, &d) == WEFT_ERR_NO_ROOM);  /* its report is stale by then */
    weft_fleet_free(&f);
}

static long maxrss_kib(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* A million unique prompts (no two share a block) over four instances with
 * events arriving for some: the indexes stay at their capacity, the bytes
 * they hold never change, and the process does not grow past the warm-up. */
static void million_unique_prompts_bounded(void)
{
    struct fleet f;
    make_fleet(&f, 4, WEFT_ROUTE_WEFT, 5000);
    size_t bytes0 = weft_fleet_index_bytes(&f);
    int32_t ids[160];
    struct fleet_decision d;
    long rss_warm = 0;
    uint64_t seq[4] = {0};
    for (uint32_t i = 0; i < 4; i++) {
        weft_fleet_kv_snapshot_begin(f.inst[i]);
        weft_fleet_kv_snapshot_end(f.inst[i], 0);
    }
    for (uint32_t r = 0; r < 1000000; r++) {
        for (uint32_t t = 0; t < 160; t++) ids[t] = (int32_t)((r * 160u + t) % 2000003u);
        CHECK(weft_fleet_decide(&f, ids, 160, 16, 0.1, &d) == WEFT_OK);
        uint32_t k = 0;
        while (k < 4 && f.inst[k] != d.in) k++;
        /* the instance confirms the first block, and later evicts it */
        uint64_t h[10];
        weft_prompt_block_hashes(ids, 160, h, 10);
        weft_fleet_kv_event(d.in, ++seq[k], WEFT_KV_EVENT_STORED, h[0]);
        if (r % 3 == 0) weft_fleet_kv_event(d.in, ++seq[k], WEFT_KV_EVENT_REMOVED, h[0]);
        weft_fleet_finished(&f, &d, 0, false);
        if (r == 20000) rss_warm = maxrss_kib();
    }
    for (uint32_t i = 0; i < 4; i++) {
        CHECK(f.inst[i]->ix.n <= f.inst[i]->ix.cap);
        CHECK_EQ_INT(f.inst[i]->ix.cap, 10000);  /* 2 x the reported 5000 blocks */
        CHECK(f.inst[i]->ev_synced);
        CHECK_EQ_INT(f.inst[i]->own_running, 0);
    }
    CHECK_EQ_INT(weft_fleet_index_bytes(&f), bytes0);
    long grown = maxrss_kib() - rss_warm;
    printf("  1M prompts: index %zu bytes for 4 instances, RSS grew %ld KiB after the first 20k\n", bytes0, grown);
    CHECK_MSG(grown < 1024, "RSS grew %ld KiB", grown);
    weft_fleet_free(&f);
}

static void device_class_or_the_device_name(void)
{
    /* no device_class (an older instance): the class is the device's name; with one, that */
    struct fleet f;
    make_fleet(&f, 1, WEFT_ROUTE_LEAST_LOAD, 100);
    CHECK(!strcmp(weft_fleet_instance_class(f.inst[0]), "Xeon"));
    snprintf(f.inst[0]->load.device_class, sizeof f.inst[0]->load.device_class, "cpu");
    CHECK(!strcmp(weft_fleet_instance_class(f.inst[0]), "cpu"));
    weft_fleet_free(&f);
}

/* A fleet starting up: an instance whose first polls fail (still loading)
 * is only unhealthy, and takes traffic fully from its first report; one
 * that was up and then fails its check opens its circuit and comes back
 * half-open (one trial request). */
static void an_instance_still_starting_is_not_a_failed_one(void)
{
    struct fleet_config cfg = {.policy = WEFT_ROUTE_LEAST_LOAD, .index_min_blocks = 64};
    struct fleet f;
    weft_fleet_init(&f, &cfg);
    struct fleet_instance *in;
    CHECK(weft_fleet_add(&f, "http://127.0.0.1:8001", &in) == WEFT_OK);
    int32_t ids[32];
    prompt(ids, 32, 1, 1);
    struct fleet_decision d[2];
    weft_fleet_poll_failed(in);
    weft_fleet_poll_failed(in);
    CHECK(!in->healthy && in->circuit == FLEET_CIRCUIT_CLOSED && in->circuit_opens == 0);
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.1, &d[0]) == WEFT_ERR_NO_ROOM);
    struct fleet_load l;
    char err[64];
    CHECK(weft_fleet_parse_load(LOAD, strlen(LOAD), &l, err, sizeof err));
    l.running = l.waiting = 0;
    weft_fleet_apply_load(&f, in, &l, 0.2);
    CHECK(in->circuit == FLEET_CIRCUIT_CLOSED);
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.3, &d[0]) == WEFT_OK);
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.3, &d[1]) == WEFT_OK);  /* no one-at-a-time trial */
    weft_fleet_finished(&f, &d[0], -1, false);
    weft_fleet_finished(&f, &d[1], -1, false);
    /* up, then gone: the circuit opens; back: half-open, one trial at a time */
    weft_fleet_poll_failed(in);
    CHECK(in->circuit == FLEET_CIRCUIT_OPEN && in->circuit_opens == 1);
    weft_fleet_apply_load(&f, in, &l, 0.5);
    CHECK(in->circuit == FLEET_CIRCUIT_HALF_OPEN);
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.6, &d[0]) == WEFT_OK);
    CHECK(weft_fleet_decide(&f, ids, 32, 16, 0.6, &d[1]) == WEFT_ERR_NO_ROOM);
    weft_fleet_request_result(in, true);
    weft_fleet_finished(&f, &d[0], -1, false);
    CHECK(in->circuit == FLEET_CIRCUIT_CLOSED);
    weft_fleet_free(&f);
}

int main(void)
{
    RUN(parse_load);
    RUN(device_class_or_the_device_name);
    RUN(history_keeps_prefix_together);
    RUN(events_correct_the_index);
    RUN(hybrid_matches_end_at_checkpoints);
    RUN(unhealthy_and_draining_are_skipped);
    RUN(an_instance_still_starting_is_not_a_failed_one);
    RUN(million_unique_prompts_bounded);
    return check_summary();
}
