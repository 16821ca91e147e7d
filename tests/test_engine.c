/* The engine end to end on real models (stories260K, and SmolLM2-135M when
 * fetched): greedy outputs do not depend on batching (1, 4, 16, 64 at once
 * == each alone == the single-sequence session), on the prefix cache, or on
 * preemption (swap and recompute) under a pool far too small; the engine
 * thread with aborts; and every block free or cached afterwards. */
#include <pthread.h>
#include <string.h>

#include "core/engine.h"
#include "core/session.h"
#include "tests/check.h"
#include "tools/cli.h"

#define MAXN 64
#define MAXT 256

struct out {
    int32_t ids[MAXT];
    uint32_t n, n_cached, n_events;
    enum weft_finish finish;
    bool done;
};

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t n_done;
};
static struct waiter W = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    CHECK(!o->done);
    o->n_events++;
    if (ev->has_token && o->n < MAXT) o->ids[o->n++] = ev->token.id;
    if (ev->finish != WEFT_FINISH_NONE) {
        o->finish = ev->finish;
        o->n_cached = ev->n_cached;
        pthread_mutex_lock(&W.mu);
        o->done = true;
        W.n_done++;
        pthread_cond_broadcast(&W.cv);
        pthread_mutex_unlock(&W.mu);
    }
}

struct job {
    int32_t prompt[MAXT];
    uint32_t n_prompt, max_new;
    bool ignore_eos;
};

static void make_jobs(struct job *jobs, uint32_t n, uint32_t vocab, uint32_t min_p, uint32_t max_p, uint32_t max_new,
                      uint64_t seed)
{
    uint64_t x = seed;
    for (uint32_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        jobs[i].n_prompt = min_p + (uint32_t)(x >> 33) % (max_p - min_p + 1);
        jobs[i].max_new = 1 + (uint32_t)(x >> 45) % max_new;
        jobs[i].ignore_eos = (i % 2) == 0;
        jobs[i].prompt[0] = 1;  /* BOS-like start, then varied ids */
        for (uint32_t k = 1; k < jobs[i].n_prompt; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            jobs[i].prompt[k] = 3 + (int32_t)((x >> 35) % (vocab - 3));
        }
    }
}

static void check_clean(struct weft_engine *e)
{
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.waiting, 0);
    CHECK_EQ_INT(st.kv.used, 0);
    CHECK_EQ_INT(st.kv.free + st.kv.cached, st.kv.n_blocks);
    CHECK_EQ_INT(st.kv.host_used, 0);
    CHECK(weft_kv_check(weft_engine_kv(e)) == WEFT_OK);
}

static void submit(struct weft_engine *e, const struct job *j, struct out *o, int32_t prio, uint64_t *id)
{
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_new,
                              .ignore_eos = j->ignore_eos, .priority = prio, .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t tmp;
    weft_status st = weft_engine_submit(e, &rq, id ? id : &tmp);
    CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
}

/* Run jobs[0..n) in groups of `conc` at a time through one engine. */
static void run_groups(const struct weft_model *m, const struct weft_engine_config *cfg, const struct job *jobs,
                       uint32_t n, uint32_t conc, struct out *outs, struct weft_engine_stats *stats)
{
    struct weft_engine *e;
    CHECK(weft_engine_create(m, cfg, &e) == WEFT_OK);
    if (!e) return;
    memset(outs, 0, sizeof *outs * n);
    for (uint32_t g = 0; g < n; g += conc) {
        for (uint32_t i = g; i < n && i < g + conc; i++) submit(e, &jobs[i], &outs[i], (int32_t)(i % 3), NULL);
        CHECK(weft_engine_run_all(e) == WEFT_OK);
    }
    for (uint32_t i = 0; i < n; i++) CHECK(outs[i].done);
    check_clean(e);
    if (stats) weft_engine_stats(e, stats);
    weft_engine_free(e);
}

static uint32_t compare(const struct out *a, const struct out *b, uint32_t n, const char *what)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        bool same = a[i].n == b[i].n && a[i].finish == b[i].finish && !memcmp(a[i].ids, b[i].ids, a[i].n * 4);
        if (!same && bad++ < 3)
            fprintf(stderr, "  %s: request %u differs (%u vs %u tokens, finish %d vs %d)\n", what, i, a[i].n, b[i].n,
                    a[i].finish, b[i].finish);
    }
    CHECK_MSG(bad == 0, "%s: %u of %u requests differ", what, bad, n);
    return bad;
}

static struct weft_model *load(struct weft_backend **be, const char *path)
{
    struct weft_model *m = NULL;
    /* one thread: outputs do not depend on it (test_model covers two), and
     * the test stays quick on a loaded machine */
    if (weft_backend_open("cpu", 1, be) != WEFT_OK) return NULL;
    if (weft_model_load(path, *be, &m) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        weft_backend_close(*be);
        return NULL;
    }
    return m;
}

static struct job jobs[MAXN];
static struct out alone[MAXN], batched[MAXN];

/* 1, 4, 16, 64 at once produce what each produces alone. */
static void batching_does_not_change_outputs(const char *path, uint32_t max_p, uint32_t max_new)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    make_jobs(jobs, MAXN, weft_model_hparams(m)->n_vocab, 1, max_p, max_new, 7);
    struct weft_engine_config cfg = {.n_ctx = 512, .no_prefix_cache = true, .max_step_tokens = 256};
    run_groups(m, &cfg, jobs, MAXN, 1, alone, NULL);
    /* alone == the single-sequence session (the path the golden tests pin) */
    struct weft_session *s;
    CHECK(weft_session_init(m, 512, 64, &s) == WEFT_OK);
    for (uint32_t i = 0; i < 4 && s; i++) {
        weft_session_reset(s);
        const float *lg;
        CHECK(weft_session_eval(s, jobs[i].prompt, jobs[i].n_prompt, &lg) == WEFT_OK);
        for (uint32_t k = 0; k < alone[i].n; k++) {
            int32_t best = 0;
            for (uint32_t v = 1; v < weft_model_hparams(m)->n_vocab; v++)
                if (lg[v] > lg[best]) best = (int32_t)v;
            CHECK_MSG(best == alone[i].ids[k], "request %u token %u: session %d engine %d", i, k, best,
                      alone[i].ids[k]);
            if (best != alone[i].ids[k]) break;
            CHECK(weft_session_eval(s, &best, 1, &lg) == WEFT_OK);
        }
    }
    weft_session_free(s);
    uint32_t total = 0;
    for (uint32_t i = 0; i < MAXN; i++) total += alone[i].n;
    printf("  %u requests alone: %u tokens generated\n", MAXN, total);
    static const uint32_t levels[] = {4, 16, 64};
    for (int l = 0; l < 3; l++) {
        struct weft_engine_stats st;
        cfg.no_prefix_cache = l != 1;  /* the cache on at one level too */
        run_groups(m, &cfg, jobs, MAXN, levels[l], batched, &st);
        char what[64];
        snprintf(what, sizeof what, "%u at once", levels[l]);
        compare(alone, batched, MAXN, what);
        printf("  %u at once: %llu steps, %.1f tokens per step\n", levels[l], (unsigned long long)st.steps,
               (double)st.step_tokens / (double)(st.steps ? st.steps : 1));
    }
    weft_model_free(m);
    weft_backend_close(be);
}

/* A request sharing a 200-token prefix with an earlier one prefills only
 * the rest, and its output is what it is with the cache off. */
static void prefix_cache_reuses_and_changes_nothing(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    struct job j[2];
    make_jobs(j, 2, weft_model_hparams(m)->n_vocab, 230, 230, 1, 11);
    memcpy(j[1].prompt, j[0].prompt, 200 * sizeof(int32_t));
    j[0].max_new = j[1].max_new = 24;
    j[0].ignore_eos = j[1].ignore_eos = true;
    struct out on[2], off[2];
    for (int cache = 0; cache < 2; cache++) {
        struct weft_engine_config cfg = {.n_ctx = 512, .no_prefix_cache = !cache};
        struct weft_engine *e;
        CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
        if (!e) break;
        struct out *o = cache ? on : off;
        memset(o, 0, sizeof on);
        for (int i = 0; i < 2; i++) {
            submit(e, &j[i], &o[i], 0, NULL);
            CHECK(weft_engine_run_all(e) == WEFT_OK);
        }
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        if (cache) {
            printf("  cache on: second request took %u cached tokens; %llu prompt tokens computed in all\n",
                   o[1].n_cached, (unsigned long long)st.prefill_tokens);
            CHECK_EQ_INT(o[1].n_cached, 192);  /* 12 full blocks of the 200 shared */
            CHECK_EQ_INT(st.prefill_tokens, 230 + 230 - 192);
            CHECK_EQ_INT(st.prefix_hit_tokens, 192);
        } else {
            CHECK_EQ_INT(o[1].n_cached, 0);
            CHECK_EQ_INT(st.prefill_tokens, 460);
        }
        check_clean(e);
        weft_engine_free(e);
    }
    compare(off, on, 2, "prefix cache on vs off");
    weft_model_free(m);
    weft_backend_close(be);
}

/* A pool far too small: everything completes, output unchanged. */
static void preemption_keeps_outputs(const char *path, uint32_t min_p, uint32_t max_p, uint32_t max_new,
                                    uint32_t kv_blocks)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    enum { N = 24 };
    make_jobs(jobs, N, weft_model_hparams(m)->n_vocab, min_p, max_p, max_new, 23);
    struct weft_engine_config big = {.n_ctx = 256, .no_prefix_cache = true};
    run_groups(m, &big, jobs, N, 1, alone, NULL);
    for (int mode = 0; mode < 3; mode++) {
        /* room for about two of the 24 at their longest */
        struct weft_engine_config small = {.n_ctx = 256, .kv_blocks = kv_blocks, .max_seqs = 16,
                                           .no_swap = mode == 1, .host_blocks = mode == 2 ? 4 : 0,
                                           .no_prefix_cache = mode != 2};
        struct weft_engine_stats st;
        run_groups(m, &small, jobs, N, N, batched, &st);
        const char *name[] = {"swap", "recompute", "small host tier + prefix cache"};
        printf("  %s: %llu swapped, %llu recomputed\n", name[mode], (unsigned long long)st.preempt_swap,
               (unsigned long long)st.preempt_recompute);
        CHECK(st.preempt_swap + st.preempt_recompute > 0);
        if (mode == 0) CHECK(st.preempt_swap > 0);
        if (mode == 1) CHECK(st.preempt_swap == 0 && st.preempt_recompute > 0);
        compare(alone, batched, N, name[mode]);
    }
    weft_model_free(m);
    weft_backend_close(be);
}

/* The engine thread: requests submitted while it runs, some aborted midway;
 * the rest match their alone outputs; aborted ones end with ABORT. */
static void engine_thread_with_aborts(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    enum { N = 16 };
    make_jobs(jobs, N, weft_model_hparams(m)->n_vocab, 5, 40, 60, 31);
    for (int i = 0; i < N; i++) { jobs[i].ignore_eos = true; jobs[i].max_new = 40 + i; }
    struct weft_engine_config cfg = {.n_ctx = 256};
    run_groups(m, &cfg, jobs, N, 1, alone, NULL);
    struct weft_engine *e;
    CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
    if (!e) return;
    CHECK(weft_engine_start(e) == WEFT_OK);
    memset(batched, 0, sizeof batched);
    pthread_mutex_lock(&W.mu);
    W.n_done = 0;
    pthread_mutex_unlock(&W.mu);
    uint64_t ids[N];
    for (int i = 0; i < N; i++) submit(e, &jobs[i], &batched[i], 0, &ids[i]);
    /* abort every fourth once it has produced a few tokens (or at once) */
    for (int i = 0; i < N; i += 4) {
        for (int spin = 0; spin < 2000; spin++) {
            pthread_mutex_lock(&W.mu);
            bool started = batched[i].n_events >= 3 || batched[i].done;
            pthread_mutex_unlock(&W.mu);
            if (started) break;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        CHECK(weft_engine_abort(e, ids[i]) == WEFT_OK);
    }
    pthread_mutex_lock(&W.mu);
    while (W.n_done < N) pthread_cond_wait(&W.cv, &W.mu);
    pthread_mutex_unlock(&W.mu);
    CHECK(weft_engine_abort(e, ids[1]) == WEFT_ERR_NOT_FOUND);  /* finished already */
    for (int i = 0; i < N; i++) {
        if (i % 4 == 0) {
            CHECK(batched[i].finish == WEFT_FINISH_ABORT);
            CHECK(batched[i].n < alone[i].n);
            CHECK(memcmp(batched[i].ids, alone[i].ids, batched[i].n * 4) == 0);  /* a prefix of it */
        } else {
            compare(&alone[i], &batched[i], 1, "engine thread");
        }
    }
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.aborted, 4);
    CHECK_EQ_INT(st.finished, N);
    check_clean(e);
    /* refusals are immediate and send no events */
    struct job big;
    make_jobs(&big, 1, weft_model_hparams(m)->n_vocab, 200, 200, 1, 5);
    big.max_new = 100;
    struct out o = {0};
    uint64_t id;
    struct weft_request rq = {.prompt = big.prompt, .n_prompt = 200, .max_tokens = 100, .cb = on_event, .user = &o};
    weft_sampling_params_default(&rq.sampling);
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_CONTEXT && id == 0);
    rq.max_tokens = 0;
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_INVALID_ARG);
    int32_t bad = (int32_t)weft_model_hparams(m)->n_vocab;
    rq = (struct weft_request){.prompt = &bad, .n_prompt = 1, .max_tokens = 1, .cb = on_event, .user = &o};
    weft_sampling_params_default(&rq.sampling);
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(o.n_events, 0);
    /* shutting down with requests in flight aborts them with a final event */
    memset(batched, 0, sizeof batched);
    for (int i = 0; i < 4; i++) submit(e, &jobs[i], &batched[i], 0, NULL);
    weft_engine_free(e);
    for (int i = 0; i < 4; i++) CHECK(batched[i].done);
    weft_model_free(m);
    weft_backend_close(be);
}

/* The Q8_0 KV cache option: logits close to the F16 cache's, and outputs
 * still independent of batching. */
static void q8_0_kv_cache(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    const struct weft_hparams *hp = weft_model_hparams(m);
    if (hp->head_dim % 32) {
        /* heads are not whole Q8_0 blocks: refused up front, with the reason */
        struct weft_engine_config cfg = {.n_ctx = 256, .kv_type = WEFT_TYPE_Q8_0};
        struct weft_engine *e = NULL;
        CHECK(weft_engine_create(m, &cfg, &e) == WEFT_ERR_INVALID_ARG && e == NULL);
        CHECK(strstr(weft_last_error(), "Q8_0") != NULL);
        weft_model_free(m);
        weft_backend_close(be);
        return;
    }
    enum { NT = 40 };
    struct job j;
    make_jobs(&j, 1, hp->n_vocab, NT, NT, 1, 3);
    float *lg[2];
    for (int t = 0; t < 2; t++) {
        struct weft_kv_pool kv;
        struct weft_kv_config kc = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv, .head_dim = hp->head_dim,
                                    .n_blocks = 4, .type = t ? WEFT_TYPE_Q8_0 : WEFT_TYPE_F16};
        CHECK(weft_kv_pool_create(&kv, be, &kc) == WEFT_OK);
        struct weft_kv_seq sq = {0};
        CHECK(weft_kv_seq_reserve(&kv, &sq, NT) == WEFT_OK);
        struct weft_forward *fw;
        CHECK(weft_forward_init(m, &kv, 64, 1, 4, &fw) == WEFT_OK);
        struct weft_fwd_seq fs = {j.prompt, NT, 0, &sq, true, 0};
        const float *out;
        uint32_t n_out;
        CHECK(weft_forward_step(fw, &fs, 1, &out, &n_out) == WEFT_OK && n_out == 1);
        lg[t] = malloc(sizeof(float) * hp->n_vocab);
        memcpy(lg[t], out, sizeof(float) * hp->n_vocab);
        weft_forward_free(fw);
        weft_kv_seq_release(&kv, &sq);
        weft_kv_pool_free(&kv);
    }
    double e = 0, n = 0;
    for (uint32_t i = 0; i < hp->n_vocab; i++) {
        e += (lg[0][i] - lg[1][i]) * (double)(lg[0][i] - lg[1][i]);
        n += (double)lg[0][i] * lg[0][i];
    }
    printf("  Q8_0 vs F16 KV cache: logits nmse %.3g\n", e / n);
    CHECK(e / n < 1e-3);
    free(lg[0]);
    free(lg[1]);
    enum { N = 16 };
    make_jobs(jobs, N, hp->n_vocab, 1, 60, 24, 41);
    struct weft_engine_config cfg = {.n_ctx = 256, .kv_type = WEFT_TYPE_Q8_0};
    run_groups(m, &cfg, jobs, N, 1, alone, NULL);
    run_groups(m, &cfg, jobs, N, N, batched, NULL);
    compare(alone, batched, N, "Q8_0 cache, 16 at once");
    weft_model_free(m);
    weft_backend_close(be);
}

static char stories[1024], *smollm2;

static void stories_batching(void) { batching_does_not_change_outputs(stories, 100, 40); }
static void stories_prefix_cache(void) { prefix_cache_reuses_and_changes_nothing(stories); }
static void stories_preemption(void) { preemption_keeps_outputs(stories, 20, 60, 48, 12); }
static void stories_engine_thread(void) { engine_thread_with_aborts(stories); }
static void stories_q8_0_kv(void) { q8_0_kv_cache(stories); }
static void smollm2_q8_0_kv(void) { q8_0_kv_cache(smollm2); }
static void smollm2_batching(void) { batching_does_not_change_outputs(smollm2, 24, 16); }
static void smollm2_prefix_cache(void) { prefix_cache_reuses_and_changes_nothing(smollm2); }
static void smollm2_preemption(void) { preemption_keeps_outputs(smollm2, 8, 30, 32, 8); }

int main(void)
{
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    RUN(stories_batching);
    RUN(stories_prefix_cache);
    RUN(stories_preemption);
    RUN(stories_engine_thread);
    RUN(stories_q8_0_kv);
    smollm2 = weft_default_model_path();
    if (smollm2) {
        RUN(smollm2_batching);
        RUN(smollm2_prefix_cache);
        RUN(smollm2_preemption);
        RUN(smollm2_q8_0_kv);
        free(smollm2);
    } else {
        printf("SmolLM2 cases skipped: the default model is not fetched (bash scripts/fetch-model.sh)\n");
    }
    return check_summary();
}
