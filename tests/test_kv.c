/* The KV block manager (core/kv): allocation and "no room", reference
 * counts, the prefix cache (chained hashes, LRU of freed cached blocks,
 * eviction), and the host tier (swap out / in keeps the bytes). Every case
 * ends with the pool consistent and every block free or cached. */
#include <string.h>

#include "core/kv.h"
#include "tests/check.h"

static struct weft_backend *be;

static void make_pool(struct weft_kv_pool *kv, uint32_t n_blocks, uint32_t n_host, bool cache)
{
    struct weft_kv_config c = {.n_layer = 2, .n_kv_head = 2, .head_dim = 32, .n_blocks = n_blocks,
                               .n_host_blocks = n_host, .type = WEFT_TYPE_F16, .prefix_cache = cache};
    CHECK(weft_kv_pool_create(kv, be, &c) == WEFT_OK);
}

static void all_free_or_cached(const struct weft_kv_pool *kv)
{
    struct weft_kv_stats s;
    weft_kv_stats(kv, &s);
    CHECK_EQ_INT(s.used, 0);
    CHECK_EQ_INT(s.free + s.cached, s.n_blocks);
    CHECK_EQ_INT(s.host_used, 0);
    CHECK(weft_kv_check(kv) == WEFT_OK);
}

static void seq_tokens(int32_t *t, uint32_t n, int32_t salt)
{
    for (uint32_t i = 0; i < n; i++) t[i] = (int32_t)((i * 2654435761u + (uint32_t)salt) % 1000);
}

static void reserve_and_no_room(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 8, 0, false);
    struct weft_kv_seq a = {0}, b = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 1) == WEFT_OK && a.n_blocks == 1);
    CHECK(weft_kv_seq_reserve(&kv, &a, 16) == WEFT_OK && a.n_blocks == 1);
    CHECK(weft_kv_seq_reserve(&kv, &a, 17) == WEFT_OK && a.n_blocks == 2);
    CHECK(weft_kv_seq_reserve(&kv, &b, 16 * 6) == WEFT_OK && b.n_blocks == 6);
    CHECK_EQ_INT(weft_kv_available(&kv), 0);
    /* no room is an ordinary answer and changes nothing */
    CHECK(weft_kv_seq_reserve(&kv, &a, 33) == WEFT_ERR_NO_ROOM);
    CHECK_EQ_INT(a.n_blocks, 2);
    for (uint32_t i = 0; i < 2; i++)
        for (uint32_t j = 0; j < 6; j++) CHECK(a.blocks[i] != b.blocks[j]);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_seq_release(&kv, &a);
    weft_kv_seq_release(&kv, &b);
    all_free_or_cached(&kv);
    CHECK(kv.block_bytes == 2 * 2 * 16 * 2 * 32 * 2);
    weft_kv_pool_free(&kv);
}

static void prefix_cache_shares_full_blocks(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 16, 0, true);
    int32_t t[100];
    seq_tokens(t, 100, 1);
    struct weft_kv_seq a = {0};
    CHECK(weft_kv_seq_match_prefix(&kv, &a, t, 100) == 0);  /* empty cache */
    CHECK(weft_kv_seq_reserve(&kv, &a, 100) == WEFT_OK);
    weft_kv_seq_commit(&kv, &a, t, 40);                      /* 2 full blocks computed */
    CHECK_EQ_INT(a.n_hashed, 2);
    weft_kv_seq_commit(&kv, &a, t, 100);                     /* 6 full blocks */
    CHECK_EQ_INT(a.n_hashed, 6);

    /* b shares the first 70 tokens: 4 full blocks (64 tokens) are reused */
    int32_t u[90];
    memcpy(u, t, sizeof(int32_t) * 70);
    seq_tokens(u + 70, 20, 7);
    struct weft_kv_seq b = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &b, u, 90), 64);
    for (int i = 0; i < 4; i++) CHECK(b.blocks[i] == a.blocks[i] && kv.ref[a.blocks[i]] == 2);
    CHECK(weft_kv_seq_reserve(&kv, &b, 90) == WEFT_OK && b.n_blocks == 6);
    CHECK(b.blocks[4] != a.blocks[4]);
    CHECK(weft_kv_check(&kv) == WEFT_OK);

    /* a prompt that is exactly cached still leaves its last token to compute */
    struct weft_kv_seq c = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &c, t, 96), 80);
    weft_kv_seq_release(&kv, &c);
    /* a different first token shares nothing (the chain differs from block 0) */
    int32_t w[40];
    memcpy(w, t, sizeof w);
    w[0] ^= 1;
    struct weft_kv_seq d = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &d, w, 40), 0);
    weft_kv_seq_release(&kv, &d);
    /* same block contents at a different place in the chain do not match */
    struct weft_kv_seq e = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &e, t + 16, 60), 0);
    weft_kv_seq_release(&kv, &e);

    weft_kv_seq_release(&kv, &a);
    weft_kv_seq_release(&kv, &b);
    struct weft_kv_stats s;
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.cached, 6);  /* a's six registered blocks stay reusable */
    all_free_or_cached(&kv);
    /* and are hit after their owner is gone */
    struct weft_kv_seq f = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &f, t, 100), 96);
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.cached, 0);
    CHECK_EQ_INT(s.used, 6);
    weft_kv_seq_release(&kv, &f);
    all_free_or_cached(&kv);
    weft_kv_pool_free(&kv);
}

static void lru_evicts_oldest_and_tail_first(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 6, 0, true);
    int32_t p[48], q[48];
    seq_tokens(p, 48, 3);
    seq_tokens(q, 48, 4);
    struct weft_kv_seq a = {0}, b = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 48) == WEFT_OK);
    weft_kv_seq_commit(&kv, &a, p, 48);
    weft_kv_seq_release(&kv, &a);  /* freed first: oldest in the LRU */
    CHECK(weft_kv_seq_reserve(&kv, &b, 48) == WEFT_OK);
    weft_kv_seq_commit(&kv, &b, q, 48);
    weft_kv_seq_release(&kv, &b);
    struct weft_kv_stats s;
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.cached, 6);
    CHECK_EQ_INT(s.free, 0);
    /* taking two blocks evicts p's last two blocks (released tail first) */
    struct weft_kv_seq c = {0};
    CHECK(weft_kv_seq_reserve(&kv, &c, 32) == WEFT_OK);
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.evictions, 2);
    struct weft_kv_seq d = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &d, p, 48), 16);  /* p's head survives */
    weft_kv_seq_release(&kv, &d);
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &d, q, 48), 32);  /* q whole (last token left) */
    weft_kv_seq_release(&kv, &d);
    weft_kv_seq_release(&kv, &c);
    all_free_or_cached(&kv);
    weft_kv_pool_free(&kv);
}

/* A pinned block (a lease) is neither evicted nor counted free or cached;
 * unpinning puts it back in the LRU, and only what was pinned is unpinned. */
static void pins_hold_blocks_until_unpinned(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 4, 0, true);
    int32_t p[48];
    seq_tokens(p, 48, 7);
    struct weft_kv_seq a = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 48) == WEFT_OK);
    weft_kv_seq_commit(&kv, &a, p, 48);
    weft_kv_seq_release(&kv, &a);
    uint64_t h0 = weft_kv_block_hash(0, p), h1 = weft_kv_block_hash(h0, p + 16);
    CHECK(weft_kv_pin(&kv, h0) && weft_kv_pin(&kv, h1));
    CHECK(!weft_kv_pin(&kv, 12345));  /* not held: nothing pinned */
    struct weft_kv_stats s;
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.pinned, 2);
    CHECK_EQ_INT(s.used, 2);
    CHECK_EQ_INT(weft_kv_available(&kv), 2);
    /* the two pinned blocks survive a sequence that takes all the rest */
    struct weft_kv_seq b = {0};
    CHECK(weft_kv_seq_reserve(&kv, &b, 32) == WEFT_OK);
    CHECK(weft_kv_seq_reserve(&kv, &b, 48) == WEFT_ERR_NO_ROOM);
    CHECK(weft_kv_lookup(&kv, h0) >= 0 && weft_kv_lookup(&kv, h1) >= 0);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    /* a pinned block is still a prefix hit (its reference is shared) */
    struct weft_kv_seq c = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &c, p, 48), 32);
    weft_kv_seq_release(&kv, &c);
    weft_kv_unpin(&kv, h0);
    weft_kv_unpin(&kv, h1);
    weft_kv_unpin(&kv, h1);  /* nothing pinned is left: a no-op */
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.pinned, 0);
    weft_kv_seq_release(&kv, &b);
    all_free_or_cached(&kv);
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &c, p, 48), 32);  /* still cached */
    weft_kv_seq_release(&kv, &c);
    weft_kv_pool_free(&kv);
}

struct evlog {
    int n;
    int kind[16];
    uint64_t hash[16], parent[16];
};

static void log_event(void *user, enum weft_kv_event_kind kind, uint64_t hash, uint64_t parent)
{
    struct evlog *l = user;
    if (l->n < 16) l->kind[l->n] = kind, l->hash[l->n] = hash, l->parent[l->n] = parent;
    l->n++;
}

/* The hook sees every registration (chained: parent 0, then the previous
 * block's hash) and every eviction of a registered block, nothing else. */
static void events_report_stores_and_evictions(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 3, 0, true);
    struct evlog l = {0};
    kv.on_event = log_event;
    kv.on_event_user = &l;
    int32_t p[48], q[48];
    seq_tokens(p, 48, 5);
    seq_tokens(q, 48, 6);
    struct weft_kv_seq a = {0}, b = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 48) == WEFT_OK);
    CHECK_EQ_INT(l.n, 0);  /* reserving registers nothing */
    weft_kv_seq_commit(&kv, &a, p, 40);  /* two full blocks */
    CHECK_EQ_INT(l.n, 2);
    CHECK(l.kind[0] == WEFT_KV_EVENT_STORED && l.parent[0] == 0 && l.hash[0] == weft_kv_block_hash(0, p));
    CHECK(l.kind[1] == WEFT_KV_EVENT_STORED && l.parent[1] == l.hash[0] &&
          l.hash[1] == weft_kv_block_hash(l.hash[0], p + 16));
    weft_kv_seq_release(&kv, &a);
    CHECK_EQ_INT(l.n, 2);  /* released blocks stay cached: no event */
    /* q needs all three blocks: the unregistered one first, then the two cached ones are evicted */
    CHECK(weft_kv_seq_reserve(&kv, &b, 48) == WEFT_OK);
    CHECK_EQ_INT(l.n, 4);
    CHECK(l.kind[2] == WEFT_KV_EVENT_REMOVED && l.kind[3] == WEFT_KV_EVENT_REMOVED);
    CHECK((l.hash[2] == l.hash[0] && l.hash[3] == l.hash[1]) || (l.hash[2] == l.hash[1] && l.hash[3] == l.hash[0]));
    weft_kv_seq_release(&kv, &b);
    all_free_or_cached(&kv);
    weft_kv_pool_free(&kv);
}

static void duplicate_blocks_stay_private(void)
{
    /* two sequences compute the same prefix at once: the first to commit
     * registers it, the other's copy stays private and is freed, not cached */
    struct weft_kv_pool kv;
    make_pool(&kv, 8, 0, true);
    int32_t t[40];
    seq_tokens(t, 40, 9);
    struct weft_kv_seq a = {0}, b = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 40) == WEFT_OK);
    CHECK(weft_kv_seq_reserve(&kv, &b, 40) == WEFT_OK);
    weft_kv_seq_commit(&kv, &a, t, 40);
    weft_kv_seq_commit(&kv, &b, t, 40);
    CHECK(kv.hash[a.blocks[0]] != 0 && kv.hash[b.blocks[0]] == 0);
    CHECK_EQ_INT(b.n_hashed, 2);
    weft_kv_seq_release(&kv, &b);
    struct weft_kv_stats s;
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.cached, 0);
    weft_kv_seq_release(&kv, &a);
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.cached, 2);
    all_free_or_cached(&kv);
    weft_kv_pool_free(&kv);
}

static void swap_round_trip_keeps_bytes(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 6, 4, true);
    struct weft_kv_seq a = {0}, b = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 40) == WEFT_OK);  /* 3 blocks */
    size_t bb = kv.block_bytes;
    unsigned char *pat = malloc(bb * 3), *back = malloc(bb);
    for (size_t i = 0; i < bb * 3; i++) pat[i] = (unsigned char)(i * 131 + 7);
    for (int i = 0; i < 3; i++)
        CHECK(be->iface->buffer_write(kv.buf, (size_t)a.blocks[i] * bb, pat + i * bb, bb) == WEFT_OK);
    CHECK(weft_kv_seq_swap_out(&kv, &a) == WEFT_OK && a.swapped);
    struct weft_kv_stats s;
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.used, 0);
    CHECK_EQ_INT(s.host_used, 3);
    /* the host tier is short for another 3-block sequence */
    CHECK(weft_kv_seq_reserve(&kv, &b, 48) == WEFT_OK);
    CHECK(weft_kv_seq_swap_out(&kv, &b) == WEFT_ERR_NO_ROOM && !b.swapped);
    /* the device is short for a's return while b holds 3 of 6 and one more */
    struct weft_kv_seq c = {0};
    CHECK(weft_kv_seq_reserve(&kv, &c, 1) == WEFT_OK);
    CHECK(weft_kv_seq_swap_in(&kv, &a) == WEFT_ERR_NO_ROOM && a.swapped);
    weft_kv_seq_release(&kv, &c);
    CHECK(weft_kv_seq_swap_in(&kv, &a) == WEFT_OK && !a.swapped);
    for (int i = 0; i < 3; i++) {
        CHECK(be->iface->buffer_read(kv.buf, (size_t)a.blocks[i] * bb, back, bb) == WEFT_OK);
        CHECK(memcmp(back, pat + i * bb, bb) == 0);
    }
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.host_used, 0);
    /* releasing a swapped-out sequence frees its host blocks */
    CHECK(weft_kv_seq_swap_out(&kv, &b) == WEFT_OK);
    weft_kv_seq_release(&kv, &b);
    weft_kv_seq_release(&kv, &a);
    all_free_or_cached(&kv);
    free(pat);
    free(back);
    weft_kv_pool_free(&kv);
}

static void bad_configs_are_refused(void)
{
    struct weft_kv_pool kv;
    struct weft_kv_config c = {.n_layer = 2, .n_kv_head = 2, .head_dim = 32, .n_blocks = 0};
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_ERR_INVALID_ARG);
    c.n_blocks = 4;
    c.type = WEFT_TYPE_Q4_K;
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_ERR_UNSUPPORTED);
    c.type = WEFT_TYPE_Q8_0;
    c.head_dim = 48;  /* not a whole number of Q8_0 blocks */
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_ERR_INVALID_ARG);
    c.head_dim = 64;
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_OK);
    CHECK_EQ_INT(kv.block_bytes, 2 * 2 * 16 * 2 * 2 * 34);
    weft_kv_pool_free(&kv);
}

/* Random operations against the invariants. */
static void random_workload_keeps_invariants(void)
{
    struct weft_kv_pool kv;
    make_pool(&kv, 24, 12, true);
    enum { NS = 6 };
    struct weft_kv_seq seqs[NS] = {{0}};
    int32_t toks[NS][128];
    uint32_t len[NS] = {0};
    uint64_t rng = 12345;
    for (int it = 0; it < 4000; it++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rng >> 33);
        int i = (int)(r % NS);
        struct weft_kv_seq *s = &seqs[i];
        switch ((r >> 8) % 5) {
        case 0:  /* start: a prompt from a few shared prefixes */
            if (s->n_blocks || s->swapped) break;
            seq_tokens(toks[i], 128, (int32_t)((r >> 12) % 3));
            for (int k = 40 + (int)((r >> 16) % 60); k < 128; k++) toks[i][k] = (int32_t)((r >> 20) + (uint32_t)k) % 1000;
            len[i] = weft_kv_seq_match_prefix(&kv, s, toks[i], 100);
            break;
        case 1:  /* grow */
            if (s->swapped) break;
            if (len[i] < 128 && weft_kv_seq_reserve(&kv, s, len[i] + 8 > 128 ? 128 : len[i] + 8) == WEFT_OK) {
                len[i] = len[i] + 8 > 128 ? 128 : len[i] + 8;
                weft_kv_seq_commit(&kv, s, toks[i], len[i]);
            }
            break;
        case 2: weft_kv_seq_swap_out(&kv, s); break;
        case 3: weft_kv_seq_swap_in(&kv, s); break;
        case 4: if ((r >> 20) % 3 == 0) { weft_kv_seq_release(&kv, s); len[i] = 0; } break;
        }
        if (weft_kv_check(&kv) != WEFT_OK) {
            CHECK_MSG(0, "iteration %d: %s", it, weft_last_error());
            break;
        }
    }
    for (int i = 0; i < NS; i++) weft_kv_seq_release(&kv, &seqs[i]);
    all_free_or_cached(&kv);
    weft_kv_pool_free(&kv);
}

int main(void)
{
    if (weft_backend_open("cpu", 1, &be) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        return 1;
    }
    RUN(reserve_and_no_room);
    RUN(prefix_cache_shares_full_blocks);
    RUN(lru_evicts_oldest_and_tail_first);
    RUN(pins_hold_blocks_until_unpinned);
    RUN(duplicate_blocks_stay_private);
    RUN(events_report_stores_and_evictions);
    RUN(swap_round_trip_keeps_bytes);
    RUN(bad_configs_are_refused);
    RUN(random_workload_keeps_invariants);
    weft_backend_close(be);
    return check_summary();
}
