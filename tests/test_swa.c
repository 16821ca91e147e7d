/* Sliding-window KV (core/kv.h's window group) end to end on the Gemma 3
 * random-weight model (window 16: one block; layers 0, 1, 3 local, 2
 * global): a sequence decoding past 4x its window holds at most
 * window/16 + 1 window blocks (counter), and every output is the one the
 * same engine gives keeping every block (--swa-full): batched, with prefix
 * hits across dropped windows, under preemption (swap and recompute), and
 * through KV blocks exported and imported between instances of either
 * kind. Then the pool alone: a hit stops where the window before the
 * boundary is gone, and an imported block's window part is added later.
 * WEFT_TEST_DEVICE=vulkan:0 runs the counter, output and transfer cases
 * there. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/kv.h"
#include "tests/check.h"

#define MAXT 320
#define N 8

struct out {
    int32_t ids[MAXT];
    uint32_t n, n_cached;
    bool done;
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    if (ev->has_token && o->n < MAXT) o->ids[o->n++] = ev->token.id;
    if (ev->finish != WEFT_FINISH_NONE) {
        CHECK_MSG(ev->finish != WEFT_FINISH_ERROR, "request failed: %s", ev->message ? ev->message : "?");
        o->n_cached = ev->n_cached;
        o->done = true;
    }
}

struct job {
    int32_t prompt[MAXT];
    uint32_t n_prompt, max_new;
};

static const char *device = "cpu";
static char model_path[1024];

static void make_jobs(struct job *jobs, uint32_t n, uint32_t vocab, uint64_t seed)
{
    uint64_t x = seed;
    for (uint32_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* short prompts (decode past the window from inside it) and long
         * ones (prefill past it) */
        jobs[i].n_prompt = i % 2 ? 3 + (uint32_t)(x >> 33) % 12 : 40 + (uint32_t)(x >> 33) % 60;
        jobs[i].max_new = 70 + (uint32_t)(x >> 45) % 20;  /* past 4x the window of 16 */
        jobs[i].prompt[0] = 1;
        for (uint32_t k = 1; k < jobs[i].n_prompt; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            jobs[i].prompt[k] = 3 + (int32_t)((x >> 35) % (vocab - 3));
        }
    }
}

static void submit(struct weft_engine *e, const struct job *j, struct out *o)
{
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_new,
                              .ignore_eos = true, .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    CHECK_MSG(weft_engine_submit(e, &rq, &id) == WEFT_OK, "%s", weft_last_error());
}

static void check_clean(struct weft_engine *e)
{
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.kv.used, 0);
    CHECK_EQ_INT(st.kv.window_used, 0);
    CHECK_EQ_INT(st.kv.window_free + st.kv.window_cached, st.kv.n_window_blocks);
    weft_status cs = weft_kv_check(weft_engine_kv(e));
    CHECK_MSG(cs == WEFT_OK, "%s", weft_last_error());
}

/* jobs through one engine, conc at a time */
static void run(struct weft_engine *e, const struct job *jobs, uint32_t n, uint32_t conc, struct out *outs)
{
    memset(outs, 0, sizeof *outs * n);
    for (uint32_t g = 0; g < n; g += conc) {
        for (uint32_t i = g; i < n && i < g + conc; i++) submit(e, &jobs[i], &outs[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK);
    }
    for (uint32_t i = 0; i < n; i++) CHECK(outs[i].done);
}

static void same(const struct out *a, const struct out *b, uint32_t n, const char *what)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++)
        if (a[i].n != b[i].n || memcmp(a[i].ids, b[i].ids, sizeof(int32_t) * a[i].n)) {
            uint32_t k = 0;
            while (k < a[i].n && k < b[i].n && a[i].ids[k] == b[i].ids[k]) k++;
            if (bad++ < 3) fprintf(stderr, "  %s: request %u differs at token %u\n", what, i, k);
        }
    CHECK_MSG(bad == 0, "%s: %u of %u requests differ", what, bad, n);
}

static struct weft_backend *be;
static struct weft_model *m;
static struct job jobs[N];
static struct out full[N], win[N];
static uint32_t nj = N;  /* jobs the decoding case runs (fewer on a software GPU device: its steps are slow) */

static struct weft_engine *engine(bool swa_full, uint32_t kv_blocks, bool no_prefix, bool no_swap)
{
    struct weft_engine_config c = {.n_ctx = 256, .max_step_tokens = 64, .max_seqs = N, .swa_full = swa_full,
                                   .kv_blocks = kv_blocks, .no_prefix_cache = no_prefix, .no_swap = no_swap};
    struct weft_engine *e = NULL;
    weft_status st = weft_engine_create(m, &c, &e);
    CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
    return e;
}

/* The counter and the outputs: alone and eight at once, windowed against
 * every block kept. */
static void decoding_past_the_window_holds_its_window_only(void)
{
    struct weft_engine *ef = engine(true, 0, true, false), *ew = engine(false, 0, true, false);
    if (!ef || !ew) return;
    struct weft_engine_stats st;
    weft_engine_stats(ef, &st);
    CHECK_EQ_INT(st.kv.n_window_blocks, 0);  /* --swa-full: one group */
    weft_engine_stats(ew, &st);
    CHECK_EQ_INT(st.kv.window, 16);
    CHECK(st.kv.n_window_blocks > 0 && st.kv.n_window_blocks < st.kv.n_blocks);
    run(ef, jobs, nj, 1, full);
    /* the short prompts alone first: a decode's own bound */
    struct out w1[N];
    for (uint32_t i = 1; i < nj; i += 2) {
        struct out *o = &w1[i];
        memset(o, 0, sizeof *o);
        submit(ew, &jobs[i], o);
        CHECK(weft_engine_run_all(ew) == WEFT_OK);
        CHECK(o->n == jobs[i].max_new && jobs[i].n_prompt + o->n > 4 * 16);
        same(&full[i], o, 1, "alone, windowed vs every block");
    }
    weft_engine_stats(ew, &st);
    printf("  decoding alone: at most %u window blocks a sequence (window 16: bound 2), %llu dropped\n",
           st.kv.window_peak, (unsigned long long)st.kv.window_dropped);
    CHECK(st.kv.window_peak <= 16 / 16 + 1);
    CHECK(st.kv.window_dropped > 0);
    check_clean(ew);
    run(ew, jobs, nj, nj, win);
    same(full, win, nj, "all at once, windowed vs every block");
    weft_engine_stats(ew, &st);
    printf("  all at once: at most %u a sequence after each step, %llu dropped, %u of %u window blocks\n",
           st.kv.window_peak, (unsigned long long)st.kv.window_dropped, st.kv.n_window_blocks, st.kv.n_blocks);
    check_clean(ew);
    weft_engine_free(ef);
    weft_engine_free(ew);
}

/* The same prompts again with the prefix cache on, the last first: the
 * most recent long prompt hits its whole prefix (the window before the
 * boundary was kept, cached, after the sequence dropped it); the older
 * ones as far as their windows survived the LRU. Output unchanged. */
static void prefix_hits_keep_the_window_before_the_boundary(void)
{
    struct weft_engine *e = engine(false, 0, false, false);
    if (!e) return;
    struct out a[N], b[N];
    run(e, jobs, N, 1, a);
    same(full, a, N, "prefix cache, first pass");
    memset(b, 0, sizeof b);
    for (uint32_t i = N; i-- > 0;) {
        submit(e, &jobs[i], &b[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK);
    }
    same(full, b, N, "prefix cache, second pass");
    const uint32_t last = N - 2;  /* the last long prompt */
    CHECK_MSG(b[last].n_cached == (jobs[last].n_prompt - 1) / 16 * 16, "%u cached of %u", b[last].n_cached,
              jobs[last].n_prompt);
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    printf("  second pass, cached tokens of the long prompts:");
    for (uint32_t i = 0; i < N; i += 2) printf(" %u/%u", b[i].n_cached, jobs[i].n_prompt);
    printf("; %llu window blocks evicted, %u cached\n", (unsigned long long)st.kv.window_evictions,
           st.kv.window_cached);
    check_clean(e);
    weft_engine_free(e);
}

/* A pool far too small: preempted sequences swap their window blocks out
 * and back, or recompute; output unchanged. */
static void preemption_keeps_outputs(void)
{
    for (int mode = 0; mode < 2; mode++) {
        struct weft_engine *e = engine(false, 14, true, mode == 1);
        if (!e) return;
        run(e, jobs, N, N, win);
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        printf("  %s: %llu swapped, %llu recomputed\n", mode ? "recompute" : "swap",
               (unsigned long long)st.preempt_swap, (unsigned long long)st.preempt_recompute);
        CHECK(st.preempt_swap + st.preempt_recompute > 0);
        same(full, win, N, mode ? "recompute" : "swap");
        check_clean(e);
        weft_engine_free(e);
    }
}

/* Export jobs[0]'s prefix from src and import it into a windowed and an
 * every-block instance: each runs it from the blocks it took, output
 * unchanged; an every-block instance refuses, by name, a block that comes
 * without its window part. Returns the blocks that had theirs. */
static uint32_t travel(struct weft_engine *src, const char *what)
{
    const struct job *j = &jobs[0];
    unsigned char *buf = NULL;
    size_t n = 0;
    uint32_t nb = 0, with = 0;
    CHECK(weft_engine_kv_export_prefix(src, j->prompt, j->n_prompt, &buf, &n, &nb) == WEFT_OK);
    CHECK_EQ_INT(nb, j->n_prompt / 16);
    struct weft_kvb_header h;
    CHECK(weft_kvb_read_header(buf, n, &h) == WEFT_OK);
    CHECK(h.window_bytes == h.payload_bytes * 3 / 4);  /* three of four layers local */
    size_t rec = weft_kvb_record_bytes(&h);
    for (uint32_t b = 0; b < nb; b++) {
        struct weft_kvb_block blk;
        CHECK(weft_kvb_read_block(&h, NULL, buf + h.header_bytes + b * rec, rec, &blk) == WEFT_OK);
        with += (blk.flags & WEFT_KVB_BLOCK_WINDOW) != 0;
    }
    printf("  %s: %u blocks, %u with their window part\n", what, nb, with);
    for (int d = 0; d < 2; d++) {
        struct weft_engine *dst = engine(d == 1, 0, false, false);
        if (!dst) break;
        uint32_t got = 0;
        weft_status st = weft_engine_kv_import(dst, buf, n, &got);
        if (d == 1 && with < nb) {
            CHECK_MSG(st == WEFT_ERR_UNSUPPORTED && strstr(weft_last_error(), "--swa-full"), "%s", weft_last_error());
        } else {
            CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
            CHECK_EQ_INT(got, nb);
        }
        struct out r = {0};
        submit(dst, j, &r);
        CHECK(weft_engine_run_all(dst) == WEFT_OK);
        if (with == nb) CHECK_MSG(r.n_cached == nb * 16, "%u cached", r.n_cached);
        printf("    into %s: %u tokens cached\n", d ? "an every-block instance" : "a windowed instance", r.n_cached);
        same(&full[0], &r, 1, what);
        check_clean(dst);
        weft_engine_free(dst);
    }
    free(buf);
    return with;
}

/* Blocks out of one instance and into another: windowed -> either right
 * after the prompt ran (its window parts still cached), and again once
 * other requests evicted them (the early blocks come without); every
 * block -> either (the layers reordered to the format's and back). */
static void blocks_travel_between_instances(void)
{
    for (int s = 0; s < 2; s++) {
        struct weft_engine *src = engine(s == 1, 0, false, false);
        if (!src) return;
        struct out o[N];
        run(src, jobs, 1, 1, o);
        uint32_t with = travel(src, s ? "every block ->" : "windowed ->");
        CHECK_EQ_INT(with, jobs[0].n_prompt / 16);
        if (s == 0 && !strcmp(device, "cpu")) {  /* eviction is the pool's, not the device's */
            run(src, jobs + 1, N - 1, 1, o + 1);
            with = travel(src, "windowed, its windows evicted since ->");
            CHECK(with < jobs[0].n_prompt / 16);
        }
        check_clean(src);
        weft_engine_free(src);
    }
}

/* ---- the pool alone ---- */

static const bool WL[4] = {true, true, false, true};

static void pool(struct weft_kv_pool *kv, uint32_t n_blocks, uint32_t n_w)
{
    struct weft_kv_config c = {.n_layer = 4, .n_kv_head = 1, .head_dim = 32, .n_blocks = n_blocks,
                               .n_host_blocks = 8, .prefix_cache = true, .window = 16, .window_layer = WL,
                               .n_window_blocks = n_w, .n_host_cache_blocks = 4};
    weft_status st = weft_kv_pool_create(kv, be, &c);
    CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
}

static void toks(int32_t *t, uint32_t n, int32_t base)
{
    for (uint32_t i = 0; i < n; i++) t[i] = base + (int32_t)i;
}

/* A sequence of 5 blocks decodes on: it keeps two window blocks; the
 * dropped ones of registered blocks stay cached, and a later hit takes them
 * back. When they are evicted, a hit stops at the longest boundary whose
 * window is still there. */
static void pool_hits_stop_where_the_window_is_gone(void)
{
    struct weft_kv_pool kv;
    pool(&kv, 16, 6);
    int32_t t[96];
    toks(t, 96, 10);
    struct weft_kv_seq a = {0};
    CHECK(weft_kv_seq_reserve(&kv, &a, 80) == WEFT_OK);
    CHECK_EQ_INT(weft_kv_seq_window_held(&kv, &a), 5);
    weft_kv_seq_commit(&kv, &a, t, 80);  /* the next position 80 needs 65.. : block 4 only */
    CHECK_EQ_INT(weft_kv_seq_window_held(&kv, &a), 1);
    struct weft_kv_stats s;
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.window_cached, 4);     /* blocks 0..3 were registered: their window parts stay cached */
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_seq_release(&kv, &a);
    /* block 4 was registered at 80 too: its window part is cached as well */
    struct weft_kv_seq b = {0};
    uint32_t got = weft_kv_seq_match_prefix(&kv, &b, t, 81);
    CHECK_EQ_INT(got, 80);
    CHECK_EQ_INT(b.wfirst, 4);
    weft_kv_seq_release(&kv, &b);
    /* a new sequence takes all six window blocks: the cached ones go */
    int32_t u[96];
    toks(u, 96, 500);
    struct weft_kv_seq c = {0};
    CHECK(weft_kv_seq_reserve(&kv, &c, 96) == WEFT_OK);
    weft_kv_stats(&kv, &s);
    CHECK_EQ_INT(s.window_evictions, 5);
    weft_kv_seq_commit(&kv, &c, u, 96);
    weft_kv_seq_release(&kv, &c);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    /* the blocks of t still name a prefix, but their windows are gone: a hit
     * needs block i-1's window for a boundary at i (window 16) */
    struct weft_kv_seq d = {0};
    got = weft_kv_seq_match_prefix(&kv, &d, t, 81);
    CHECK_MSG(got == 0, "hit %u tokens without their window", got);
    weft_kv_seq_release(&kv, &d);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_pool_free(&kv);
}

/* A block imported without its window part serves full layers; the same
 * block with it adds the part; swap out and in keep the window part only
 * of the blocks the sequence holds it for. */
static void pool_import_and_swap(void)
{
    struct weft_kv_pool kv;
    pool(&kv, 16, 8);
    int32_t t[48];
    toks(t, 48, 7);
    unsigned char *payload = malloc(kv.block_bytes);
    for (size_t i = 0; i < kv.block_bytes; i++) payload[i] = (unsigned char)(i * 7);
    uint64_t h0 = weft_kv_block_hash(0, t), h1 = weft_kv_block_hash(h0, t + 16);
    bool added;
    CHECK(weft_kv_import(&kv, 0, h0, t, payload, kv.main_bytes, &added) == WEFT_OK && added);
    CHECK(weft_kv_import(&kv, h0, h1, t + 16, payload, kv.block_bytes, &added) == WEFT_OK && added);
    CHECK(weft_kv_import(&kv, 0, h0, t, payload, kv.main_bytes + 1, &added) == WEFT_ERR_INVALID_ARG);
    struct weft_kv_seq a = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &a, t, 48), 32);  /* block 0's window is not needed at 32 */
    CHECK_EQ_INT(a.wfirst, 1);
    weft_kv_seq_release(&kv, &a);
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &a, t, 17), 0);    /* at 16 it is */
    weft_kv_seq_release(&kv, &a);
    CHECK(weft_kv_import(&kv, 0, h0, t, payload, kv.block_bytes, &added) == WEFT_OK && added);
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &a, t, 17), 16);
    unsigned char *back = malloc(kv.block_bytes);
    CHECK(weft_kv_block_read(&kv, a.blocks[0], back) == WEFT_OK);
    CHECK(weft_kv_window_block(&kv, a.blocks[0]) >= 0 && !memcmp(back, payload, kv.block_bytes));
    weft_kv_seq_release(&kv, &a);
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &a, t, 48), 32);
    /* on to 40 positions, then out and back in */
    CHECK(weft_kv_seq_reserve(&kv, &a, 40) == WEFT_OK);
    weft_kv_seq_commit(&kv, &a, t, 40);
    CHECK_EQ_INT(a.wfirst, 1);
    CHECK(weft_kv_seq_swap_out(&kv, &a) == WEFT_OK);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    CHECK(weft_kv_seq_swap_in(&kv, &a) == WEFT_OK);
    CHECK_EQ_INT(weft_kv_seq_window_held(&kv, &a), 2);
    CHECK(weft_kv_window_block(&kv, a.blocks[1]) >= 0 && weft_kv_window_block(&kv, a.blocks[2]) >= 0);
    CHECK(weft_kv_block_read(&kv, a.blocks[1], back) == WEFT_OK && !memcmp(back, payload, kv.block_bytes));
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_seq_release(&kv, &a);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    free(back);
    free(payload);
    weft_kv_pool_free(&kv);
}

int main(void)
{
    if (getenv("WEFT_TEST_DEVICE")) device = getenv("WEFT_TEST_DEVICE");
    snprintf(model_path, sizeof model_path, "%s/models/arch/gemma3-F16.gguf", WEFT_SHARED_DIR);
    if (weft_backend_open(device, 1, &be) != WEFT_OK) SKIP_ALL("device %s: %s", device, weft_last_error());
    if (weft_model_load(model_path, be, &m) != WEFT_OK) {
        weft_backend_close(be);
        SKIP_ALL("%s: %s", model_path, weft_last_error());
    }
    make_jobs(jobs, N, weft_model_hparams(m)->n_vocab, 5);
    if (strcmp(device, "cpu")) nj = 4;
    RUN(decoding_past_the_window_holds_its_window_only);
    /* on a device: its views of the window group and its block I/O (the
     * scheduling around them is the CPU run's) */
    if (!strcmp(device, "cpu")) {
        RUN(prefix_hits_keep_the_window_before_the_boundary);
        RUN(preemption_keeps_outputs);
    }
    RUN(blocks_travel_between_instances);
    RUN(pool_hits_stop_where_the_window_is_gone);
    RUN(pool_import_and_swap);
    weft_model_free(m);
    weft_backend_close(be);
    return check_summary();
}
