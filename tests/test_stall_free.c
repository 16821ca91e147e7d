/* Stall-free batching and tenant time slices through the engine on a real
 * model (stories260K; SmolLM2-135M too when fetched), by the scheduler's own
 * cost model, never the clock: with a long prompt arriving while 4 streams
 * decode, every step that carries decode rows plans within the ITL target
 * (or carries the one-token floor), the prompt is spread over several such
 * steps, and every greedy output equals the unbounded scheduler's. Two
 * tenants with shares 3:1 and the default tenant give the same outputs as
 * one tenant, and the per-tenant prompt tokens add up. */
#include <string.h>

#include "core/engine.h"
#include "tests/check.h"
#include "tools/cli.h"

#define MAXT 512

struct out {
    int32_t ids[MAXT];
    uint32_t n;
    bool done;
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    if (ev->has_token && o->n < MAXT) o->ids[o->n++] = ev->token.id;
    if (ev->finish != WEFT_FINISH_NONE) o->done = true;
}

struct job {
    int32_t prompt[MAXT];
    uint32_t n_prompt, max_new;
    const char *tenant;
};

static void make_job(struct job *j, uint32_t vocab, uint32_t n_prompt, uint32_t max_new, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    j->n_prompt = n_prompt;
    j->max_new = max_new;
    j->prompt[0] = 1;
    for (uint32_t k = 1; k < n_prompt; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        j->prompt[k] = 3 + (int32_t)((x >> 35) % (vocab - 3));
    }
}

static void submit(struct weft_engine *e, const struct job *j, struct out *o)
{
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_new,
                              .ignore_eos = true, .tenant = j->tenant, .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    CHECK_MSG(weft_engine_submit(e, &rq, &id) == WEFT_OK, "%s", weft_last_error());
}

static struct weft_model *load(struct weft_backend **be, const char *path)
{
    struct weft_model *m = NULL;
    if (weft_backend_open("cpu", 1, be) != WEFT_OK) return NULL;
    if (weft_model_load(path, *be, &m) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        weft_backend_close(*be);
        return NULL;
    }
    return m;
}

#define N_STREAMS 4
static struct job jobs[N_STREAMS + 1];
static struct out bounded[N_STREAMS + 1], unbounded[N_STREAMS + 1];

/* Run the four streams, then the long prompt once all four decode; step by
 * step, checking each plan when check_target. */
static void run_streams(const struct weft_model *m, double itl_ms, struct out *outs, bool check_target)
{
    struct weft_engine_config cfg = {.n_ctx = 512, .itl_target_ms = itl_ms};
    struct weft_engine *e;
    CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
    if (!e) return;
    CHECK(weft_engine_calibrate(e, 64) == WEFT_OK);
    memset(outs, 0, sizeof *outs * (N_STREAMS + 1));
    for (int i = 0; i < N_STREAMS; i++) submit(e, &jobs[i], &outs[i]);
    bool long_in = false, did = true;
    uint32_t with_chunk = 0, planned = 0;
    for (int guard = 0; guard < 10000 && did; guard++) {
        if (!long_in) {
            bool all = true;
            for (int i = 0; i < N_STREAMS; i++) all = all && outs[i].n >= 1;
            if (all) {
                submit(e, &jobs[N_STREAMS], &outs[N_STREAMS]);
                long_in = true;
            }
        }
        CHECK(weft_engine_step(e, &did) == WEFT_OK);
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        const struct weft_sched_plan *p = &st.last_plan;
        if (!did || !check_target || !long_in || p->decode_rows == 0) continue;
        planned++;
        CHECK(p->target_s > 0);
        CHECK_MSG(p->planned_s <= p->target_s * (1 + 1e-9) || p->prefill_tokens <= 1,
                  "a step of %u decode rows and %u prompt tokens planned %.3f ms against %.3f", p->decode_rows,
                  p->prefill_tokens, 1e3 * p->planned_s, 1e3 * p->target_s);
        if (p->prefill_tokens > 1) with_chunk++;
    }
    for (int i = 0; i <= N_STREAMS; i++) CHECK(outs[i].done);
    if (check_target) {
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        printf("  target %.2f ms: the %u-token prompt in %u steps beside decode rows (%llu steps held back)\n",
               1e3 * st.itl_target_s, jobs[N_STREAMS].n_prompt, with_chunk, (unsigned long long)st.itl_limited);
        CHECK_MSG(with_chunk >= 2, "the long prompt went in %u step(s) beside decode rows", with_chunk);
        CHECK(planned > 0 && st.itl_limited > 0);
    }
    weft_engine_free(e);
}

static void long_prompt_is_spread_within_the_target(const char *path, uint32_t long_n)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    if (!m) {
        CHECK_MSG(0, "cannot load %s", path);
        return;
    }
    uint32_t vocab = weft_model_hparams(m)->n_vocab;
    for (int i = 0; i < N_STREAMS; i++) make_job(&jobs[i], vocab, 8 + 3 * i, 40, 100 + i);
    make_job(&jobs[N_STREAMS], vocab, long_n, 6, 7);
    /* the target: a decode step of the 4 streams by this engine's cost model,
     * plus 16 prompt tokens (calibrated once here; each engine below plans with its own rates) */
    struct weft_engine *e;
    struct weft_engine_config cfg = {.n_ctx = 512};
    CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
    CHECK(weft_engine_calibrate(e, 64) == WEFT_OK);
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    weft_engine_free(e);
    CHECK(st.decode_fixed_s + st.decode_row_s > 0 && st.prefill_tps > 0);
    double target_ms = 1e3 * (st.decode_fixed_s + N_STREAMS * st.decode_row_s + 16.0 / st.prefill_tps);
    run_streams(m, target_ms, bounded, true);
    run_streams(m, -1, unbounded, false);
    for (int i = 0; i <= N_STREAMS; i++)
        CHECK_MSG(bounded[i].n == unbounded[i].n && !memcmp(bounded[i].ids, unbounded[i].ids, 4 * bounded[i].n),
                  "request %d differs with the ITL target", i);
    weft_model_free(m);
    weft_backend_close(be);
}

/* Tenants with shares 3:1 (and the default one) change no output. */
static void tenant_shares_change_no_output(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    if (!m) return;
    uint32_t vocab = weft_model_hparams(m)->n_vocab;
    enum { N = 12 };
    static struct job tj[N];
    static struct out shared[N], single[N];
    static const char *const names[3] = {"a", "b", NULL};
    for (int i = 0; i < N; i++) make_job(&tj[i], vocab, i % 3 == 0 ? 200 : 12 + i, 12, 300 + i);
    for (int pass = 0; pass < 2; pass++) {
        struct out *o = pass ? single : shared;
        struct weft_engine_config cfg = {.n_ctx = 512, .max_step_tokens = 64};
        struct weft_engine *e;
        CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
        if (!e) break;
        if (!pass) {
            CHECK(weft_engine_tenant(e, "a", &(struct weft_tenant_limits){.share = 3}) == WEFT_OK);
            CHECK(weft_engine_tenant(e, "b", &(struct weft_tenant_limits){.share = 1}) == WEFT_OK);
        }
        memset(o, 0, sizeof shared);
        for (int i = 0; i < N; i++) {
            tj[i].tenant = pass ? NULL : names[i % 3];
            submit(e, &tj[i], &o[i]);
        }
        CHECK(weft_engine_run_all(e) == WEFT_OK);
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        char name[WEFT_TENANT_NAME_MAX];
        uint64_t sum = 0, tok;
        uint32_t n_t = 0;
        for (uint32_t t = 0; weft_engine_tenant_prefill(e, t, name, &tok); t++, n_t++) sum += tok;
        CHECK_EQ_INT(n_t, pass ? 1 : 3);
        CHECK_MSG(sum == st.prefill_tokens, "tenants' prompt tokens %llu, the engine's %llu",
                  (unsigned long long)sum, (unsigned long long)st.prefill_tokens);
        if (!pass) CHECK(st.share_deferred > 0);
        weft_engine_free(e);
    }
    for (int i = 0; i < N; i++)
        CHECK_MSG(shared[i].n == single[i].n && !memcmp(shared[i].ids, single[i].ids, 4 * shared[i].n),
                  "request %d differs with tenant shares", i);
    weft_model_free(m);
    weft_backend_close(be);
}

/* Calibration leaves the decode cost model measured (both parts: a run of
 * several rows) and nothing of its own behind: no request, no target, no
 * count. A waiting queue too short for its several-row run is no error. */
static void calibration_fits_the_decode_cost(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    if (!m) return;
    for (uint32_t max_waiting = 1024; max_waiting; max_waiting = max_waiting > 2 ? 2 : 0) {
        struct weft_engine_config cfg = {.n_ctx = 512, .max_waiting = max_waiting};
        struct weft_engine *e;
        CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
        if (!e) break;
        CHECK_MSG(weft_engine_calibrate(e, 0) == WEFT_OK, "max_waiting %u: %s", max_waiting, weft_last_error());
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        printf("  max_waiting %u: decode step %.3f ms + %.3f ms per row\n", max_waiting, 1e3 * st.decode_fixed_s,
               1e3 * st.decode_row_s);
        CHECK(st.decode_fixed_s + st.decode_row_s > 0 && st.prefill_tps > 0);
        CHECK(st.running == 0 && st.waiting == 0 && st.submitted == 0 && st.steps == 0);
        CHECK(st.itl_target_s == 0);
        weft_engine_free(e);
    }
    weft_model_free(m);
    weft_backend_close(be);
}

static char stories[1024], *smollm2;

static void stories_spread(void) { long_prompt_is_spread_within_the_target(stories, 400); }
static void stories_tenants(void) { tenant_shares_change_no_output(stories); }
static void smollm2_spread(void) { long_prompt_is_spread_within_the_target(smollm2, 300); }
static void stories_calibration(void) { calibration_fits_the_decode_cost(stories); }

int main(void)
{
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    RUN(stories_spread);
    RUN(stories_tenants);
    RUN(stories_calibration);
    smollm2 = weft_default_model_path();
    if (smollm2) {
        RUN(smollm2_spread);
        free(smollm2);
    } else {
        printf("SmolLM2 case skipped: the default model is not fetched (bash scripts/fetch-model.sh)\n");
    }
    return check_summary();
}
