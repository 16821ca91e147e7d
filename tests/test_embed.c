/* Embedding requests through the engine (weft_request.embed): the vector is
 * the pooled final hidden state of a direct forward pass, unit length, and
 * does not depend on batching (32 at once beside generation == each alone),
 * on how the prompt is chunked, on preemption (swap and recompute) or on a
 * layer split; mean pooling takes no prefix-cache hits but registers its
 * blocks; refusals; abort; the mock engine; and Vulkan (or the device
 * WEFT_TEST_DEVICE names) against the CPU by normalised error when present.
 * On stories260K, and on SmolLM2-135M when fetched. */
#include <pthread.h>
#include <string.h>

#include "backends/backend.h"
#include "core/model_impl.h"
#include "core/engine.h"
#include "core/forward.h"
#include "tests/check.h"
#include "tools/cli.h"

#define MAXN 32
#define MAXP 160
#define MAXE 1024

struct out {
    float vec[MAXE];
    uint32_t n_vec, n_cached, n_prompt, n_events;
    int32_t ids[8];
    uint32_t n_ids;
    enum weft_finish finish;
    bool done;
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    CHECK(!o->done);
    o->n_events++;
    if (ev->has_token && o->n_ids < 8) o->ids[o->n_ids++] = ev->token.id;
    if (ev->finish == WEFT_FINISH_NONE) {
        CHECK(ev->embedding == NULL);
        return;
    }
    o->finish = ev->finish;
    o->n_cached = ev->n_cached;
    o->n_prompt = ev->n_prompt;
    o->n_vec = ev->embedding ? ev->n_embedding : 0;
    if (ev->embedding && ev->n_embedding <= MAXE) memcpy(o->vec, ev->embedding, sizeof(float) * ev->n_embedding);
    o->done = true;
}

struct job {
    int32_t prompt[MAXP];
    uint32_t n;
};

static struct job jobs[MAXN];
static struct out alone[MAXN], batched[MAXN], other[MAXN], gen[MAXN];

static void make_jobs(uint32_t n, uint32_t vocab, uint32_t max_p, uint64_t seed)
{
    uint64_t x = seed;
    for (uint32_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        jobs[i].n = 1 + (uint32_t)(x >> 33) % max_p;
        jobs[i].prompt[0] = 1;
        for (uint32_t k = 1; k < jobs[i].n; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            jobs[i].prompt[k] = 3 + (int32_t)((x >> 35) % (vocab - 3));
        }
    }
}

static void submit_embed(struct weft_engine *e, const struct job *j, enum weft_embed_pooling pool, struct out *o,
                         uint64_t *id)
{
    memset(o, 0, sizeof *o);
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n, .embed = pool, .cb = on_event, .user = o};
    uint64_t tmp;
    weft_status st = weft_engine_submit(e, &rq, id ? id : &tmp);
    CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
}

static void submit_gen(struct weft_engine *e, const struct job *j, struct out *o)
{
    memset(o, 0, sizeof *o);
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n, .max_tokens = 6, .ignore_eos = true,
                              .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_OK);
}

static void check_clean(struct weft_engine *e)
{
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.running + st.waiting, 0);
    CHECK_EQ_INT(st.kv.used, 0);
    CHECK_EQ_INT(st.kv.host_used, 0);
    CHECK(weft_kv_check(weft_engine_kv(e)) == WEFT_OK);
}

/* n embeddings through one engine, `conc` submitted at a time (with one
 * generation request beside each group when gen_beside). */
static void run_embeds(const struct weft_model *m, const struct weft_engine_config *cfg, uint32_t n, uint32_t conc,
                       enum weft_embed_pooling pool, bool gen_beside, struct out *outs)
{
    struct weft_engine *e;
    CHECK(weft_engine_create(m, cfg, &e) == WEFT_OK);
    if (!e) return;
    for (uint32_t g = 0; g < n; g += conc) {
        if (gen_beside) submit_gen(e, &jobs[(g + 1) % n], &gen[g / conc]);
        for (uint32_t i = g; i < n && i < g + conc; i++) submit_embed(e, &jobs[i], pool, &outs[i], NULL);
        CHECK(weft_engine_run_all(e) == WEFT_OK);
    }
    for (uint32_t i = 0; i < n; i++) {
        CHECK(outs[i].done && outs[i].finish == WEFT_FINISH_STOP && outs[i].n_events == 1);
        CHECK_EQ_INT(outs[i].n_vec, weft_model_hparams(m)->n_embd);
        CHECK_EQ_INT(outs[i].n_prompt, jobs[i].n);
    }
    if (gen_beside)
        for (uint32_t g = 0; g < n; g += conc) CHECK(gen[g / conc].done && gen[g / conc].n_ids == 6);
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    uint64_t toks = 0;
    for (uint32_t i = 0; i < n; i++) toks += jobs[i].n;
    CHECK_EQ_INT(st.embed_requests, n);
    CHECK_EQ_INT(st.embed_tokens, toks);
    check_clean(e);
    weft_engine_free(e);
}

/* sum |a-b|² / sum |a|² over all vectors */
static double nmse(const struct out *a, const struct out *b, uint32_t n)
{
    double e = 0, s = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < a[i].n_vec; d++) {
            double x = a[i].vec[d], y = d < b[i].n_vec ? b[i].vec[d] : 0;
            e += (x - y) * (x - y);
            s += x * x;
        }
    return s > 0 ? e / s : 0;
}

/* The same vectors: bit for bit when exact, else within a normalised error
 * of 1e-5 (the CPU's F32/F16/BF16 matmuls sum a single row in another order
 * than several rows, as ggml does: a row's last bits depend on how many
 * rows share its matmul; quantized weights do not). */
static void compare(const struct out *a, const struct out *b, uint32_t n, const char *what, bool exact)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        CHECK(a[i].n_vec == b[i].n_vec);
        if (memcmp(a[i].vec, b[i].vec, sizeof(float) * a[i].n_vec) && bad++ < 3 && exact)
            fprintf(stderr, "  %s: input %u (%u tokens) differs\n", what, i, jobs[i].n);
    }
    double e = nmse(a, b, n);
    if (!exact) printf("  %s: %u of %u bitwise equal, nmse %.3g\n", what, n - bad, n, e);
    if (exact) CHECK_MSG(bad == 0, "%s: %u of %u vectors differ", what, bad, n);
    else CHECK_MSG(e <= 1e-5, "%s: nmse %.3g", what, e);
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

/* The reference: one forward pass over the whole prompt asking for every
 * row's hidden state, pooled here (double sums, mean or last), normalised. */
static void reference(const struct weft_model *m, struct weft_backend *be, const struct job *j,
                      enum weft_embed_pooling pool, float *out)
{
    const struct weft_hparams *hp = weft_model_hparams(m);
    struct weft_kv_pool kv;
    struct weft_kv_config kc = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv, .head_dim = hp->head_dim,
                                .n_blocks = (MAXP + 15) / 16, .type = WEFT_TYPE_F16};
    CHECK(weft_kv_pool_create(&kv, be, &kc) == WEFT_OK);
    struct weft_kv_seq sq = {0};
    CHECK(weft_kv_seq_reserve(&kv, &sq, j->n) == WEFT_OK);
    struct weft_forward *fw;
    CHECK(weft_forward_init(m, &kv, MAXP, 1, kc.n_blocks, &fw) == WEFT_OK);
    struct weft_fwd_seq fs = {.tokens = j->prompt, .n_tokens = j->n, .kv = &sq, .n_hidden = j->n};
    const float *lg;
    uint32_t n_lg;
    CHECK(weft_forward_step(fw, &fs, 1, &lg, &n_lg) == WEFT_OK && n_lg == 0);
    const float *h = weft_forward_hidden(fw, 0);
    CHECK(h != NULL);
    double sum[MAXE] = {0}, ss = 0;
    uint32_t E = hp->n_embd, from = pool == WEFT_EMBED_LAST ? j->n - 1 : 0;
    for (uint32_t r = from; h && r < j->n; r++)
        for (uint32_t d = 0; d < E; d++) sum[d] += h[(size_t)r * E + d];
    double n = j->n - from;
    for (uint32_t d = 0; d < E; d++) ss += (sum[d] / n) * (sum[d] / n);
    for (uint32_t d = 0; d < E; d++) out[d] = (float)(sum[d] / n / sqrt(ss));
    weft_forward_free(fw);
    weft_kv_seq_release(&kv, &sq);
    weft_kv_pool_free(&kv);
}

/* The engine's vector is the direct pass's pooled hidden state, unit length;
 * 32 inputs at once (chunked in small steps, beside generation) give what
 * each gives alone. */
static void batching_and_reference(const char *path, uint32_t n, uint32_t max_p, bool exact, bool preempt)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    make_jobs(n, weft_model_hparams(m)->n_vocab, max_p, 11);
    for (int pool = WEFT_EMBED_MEAN; pool <= WEFT_EMBED_LAST; pool++) {
        const char *pn = pool == WEFT_EMBED_MEAN ? "mean" : "last";
        struct weft_engine_config one = {.n_ctx = 256, .max_step_tokens = 256};
        run_embeds(m, &one, n, 1, pool, false, alone);
        char what[64];
        for (uint32_t i = 0; i < n; i++) {
            reference(m, be, &jobs[i], pool, other[i].vec);
            other[i].n_vec = weft_model_hparams(m)->n_embd;
            double norm = 0;
            for (uint32_t d = 0; d < weft_model_hparams(m)->n_embd; d++) norm += (double)alone[i].vec[d] * alone[i].vec[d];
            CHECK_NEAR(norm, 1.0, 1e-5);
        }
        snprintf(what, sizeof what, "%s: engine vs the direct forward pass", pn);
        compare(other, alone, n, what, exact);
        /* all at once, in steps of 48 tokens (prompts cut into chunks), beside a generation */
        struct weft_engine_config small = {.n_ctx = 256, .max_step_tokens = 48, .max_seqs = 16};
        run_embeds(m, &small, n, n, pool, true, batched);
        snprintf(what, sizeof what, "%s: %u at once, chunked", pn, n);
        compare(alone, batched, n, what, exact);
        if (!preempt) continue;
        /* a pool far too small: preemption by swap, then by recompute */
        struct weft_engine_config tight = {.n_ctx = 256, .max_step_tokens = 64, .kv_blocks = 12};
        run_embeds(m, &tight, n, n, pool, true, other);
        snprintf(what, sizeof what, "%s: preempted (swap)", pn);
        compare(alone, other, n, what, exact);
        tight.no_swap = true;
        run_embeds(m, &tight, n, n, pool, true, other);
        snprintf(what, sizeof what, "%s: preempted (recompute)", pn);
        compare(alone, other, n, what, exact);
    }
    weft_model_free(m);
    weft_backend_close(be);
}

/* Layers split over two CPU backends: the hidden states come from the last. */
static void split_model(const char *path)
{
    struct weft_backend *b0, *b1;
    CHECK(weft_backend_open("cpu", 1, &b0) == WEFT_OK && weft_backend_open("cpu", 1, &b1) == WEFT_OK);
    struct weft_model *m = NULL, *ms = NULL;
    CHECK(weft_model_load(path, b0, &m) == WEFT_OK);
    struct weft_split_part parts[2] = {{b0, 2}, {b1, 0}};
    CHECK_MSG(weft_model_load_split(path, parts, 2, &ms) == WEFT_OK, "%s", weft_last_error());
    if (m && ms) {
        make_jobs(12, weft_model_hparams(m)->n_vocab, 90, 5);
        struct weft_engine_config cfg = {.n_ctx = 256, .max_step_tokens = 64};
        run_embeds(m, &cfg, 12, 12, WEFT_EMBED_MEAN, true, alone);
        run_embeds(ms, &cfg, 12, 12, WEFT_EMBED_MEAN, true, batched);
        compare(alone, batched, 12, "split over two CPU backends", true);
    }
    weft_model_free(ms);
    weft_model_free(m);
    weft_backend_close(b1);
    weft_backend_close(b0);
}

/* Mean pooling computes every row even when the cache holds the prompt's
 * blocks, and registers its own blocks for others; last pooling may hit. */
static void prefix_cache(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    make_jobs(1, weft_model_hparams(m)->n_vocab, 1, 3);
    jobs[0].n = 70;
    for (uint32_t k = 1; k < 70; k++) jobs[0].prompt[k] = 3 + (int32_t)((k * 37) % (weft_model_hparams(m)->n_vocab - 3));
    struct weft_engine_config cfg = {.n_ctx = 256};
    struct weft_engine *e;
    CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
    if (!e) goto out;
    submit_embed(e, &jobs[0], WEFT_EMBED_MEAN, &alone[0], NULL);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK_EQ_INT(alone[0].n_cached, 0);
    /* its blocks serve a generation of the same prompt */
    submit_gen(e, &jobs[0], &gen[0]);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK_EQ_INT(gen[0].n_cached, 64);
    /* the same embedding again: no hits, the same vector */
    submit_embed(e, &jobs[0], WEFT_EMBED_MEAN, &batched[0], NULL);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK_EQ_INT(batched[0].n_cached, 0);
    CHECK(!memcmp(alone[0].vec, batched[0].vec, sizeof(float) * weft_model_hparams(m)->n_embd));
    /* last pooling takes the hits, and gives what it gives without them */
    submit_embed(e, &jobs[0], WEFT_EMBED_LAST, &other[0], NULL);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK_EQ_INT(other[0].n_cached, 64);
    check_clean(e);
    weft_engine_free(e);
    struct weft_engine_config nocache = {.n_ctx = 256, .no_prefix_cache = true};
    CHECK(weft_engine_create(m, &nocache, &e) == WEFT_OK);
    if (!e) goto out;
    submit_embed(e, &jobs[0], WEFT_EMBED_LAST, &other[1], NULL);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK_EQ_INT(other[1].n_cached, 0);
    CHECK(!memcmp(other[0].vec, other[1].vec, sizeof(float) * weft_model_hparams(m)->n_embd));
    weft_engine_free(e);
out:
    weft_model_free(m);
    weft_backend_close(be);
}

/* Refusals are immediate and send nothing; an abort ends with no vector. */
static void refusals_and_abort(const char *path)
{
    struct weft_backend *be;
    struct weft_model *m = load(&be, path);
    CHECK(m != NULL);
    if (!m) return;
    struct weft_engine_config cfg = {.n_ctx = 64};
    struct weft_engine *e;
    CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
    if (!e) goto out;
    static struct job big;
    big.n = 65;
    for (uint32_t k = 0; k < big.n; k++) big.prompt[k] = 3 + (int32_t)k;
    struct out o = {0};
    uint64_t id;
    struct weft_request rq = {.prompt = big.prompt, .n_prompt = 65, .embed = WEFT_EMBED_MEAN, .cb = on_event,
                              .user = &o};
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_CONTEXT);
    rq.n_prompt = 64;  /* the whole context: fits (nothing is generated) */
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_OK);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK(o.done && o.finish == WEFT_FINISH_STOP && o.n_vec == weft_model_hparams(m)->n_embd);
    memset(&o, 0, sizeof o);
    rq.embed = (enum weft_embed_pooling)7;
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_INVALID_ARG);
    rq.embed = WEFT_EMBED_LAST;
    rq.grammar = (const struct weft_grammar *)&big;  /* never looked at: refused first */
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_INVALID_ARG);
    rq.grammar = NULL;
    rq.n_prompt = 0;
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(o.n_events, 0);
    rq.n_prompt = 40;
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_OK);
    CHECK(weft_engine_abort(e, id) == WEFT_OK);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    CHECK(o.done && o.finish == WEFT_FINISH_ABORT && o.n_vec == 0 && o.n_events == 1);
    /* shutting down with one queued: aborted, final event sent */
    memset(&o, 0, sizeof o);
    CHECK(weft_engine_submit(e, &rq, &id) == WEFT_OK);
    weft_engine_free(e);
    CHECK(o.done && o.finish == WEFT_FINISH_ABORT);
out:
    weft_model_free(m);
    weft_backend_close(be);
}

/* A mock engine's vectors: unit length, fixed per prompt, batch-independent. */
static void mock_engine(const char *path)
{
    struct weft_model *m = NULL;
    struct weft_backend *be;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK);
    CHECK(weft_model_load_meta(path, be, &m) == WEFT_OK);
    if (!m) {
        weft_backend_close(be);
        return;
    }
    make_jobs(8, weft_model_hparams(m)->n_vocab, 100, 9);
    struct weft_engine_config cfg = {.n_ctx = 256, .mock_prefill_tps = 1e7, .mock_decode_tps = 1e6};
    run_embeds(m, &cfg, 8, 1, WEFT_EMBED_MEAN, false, alone);
    run_embeds(m, &cfg, 8, 8, WEFT_EMBED_MEAN, true, batched);
    compare(alone, batched, 8, "mock", true);
    double norm = 0;
    for (uint32_t d = 0; d < weft_model_hparams(m)->n_embd; d++) norm += (double)alone[0].vec[d] * alone[0].vec[d];
    CHECK_NEAR(norm, 1.0, 1e-5);
    CHECK(memcmp(alone[0].vec, alone[1].vec, sizeof(float) * weft_model_hparams(m)->n_embd) != 0);
    weft_model_free(m);
    weft_backend_close(be);
}

/* A GPU device (vulkan:0, or WEFT_TEST_DEVICE=cuda:0 / hip:0) against the
 * CPU: n inputs at once (beside a generation), by normalised error; and on
 * the device, at once against one at a time. */
static void device_vs_cpu(const char *path, uint32_t n, uint32_t max_p, int last_pool, bool gen_beside)
{
    const char *spec = getenv("WEFT_TEST_DEVICE") ? getenv("WEFT_TEST_DEVICE") : "vulkan:0";
    char name[16];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec, ":"), spec);
    const struct weft_backend_iface *vi = weft_backend_find(name);
    struct weft_device_info info[4];
    const char *why = NULL;
    struct weft_backend *vk = NULL, *cpu = NULL;
    if (!vi || vi->devices(info, 4, &why) <= 0 || weft_backend_open(spec, 0, &vk) != WEFT_OK) {
        printf("  (no %s device: skipped)\n", spec);
        return;
    }
    struct weft_model *mv = NULL, *mc = load(&cpu, path);
    CHECK_MSG(weft_model_load_split(path, &(struct weft_split_part){vk, 0}, 1, &mv) == WEFT_OK, "%s",
              weft_last_error());
    if (mc && mv) {
        make_jobs(n, mc->hp.n_vocab, max_p, 21);
        for (int pool = WEFT_EMBED_MEAN; pool <= last_pool; pool++) {
            struct weft_engine_config cfg = {.n_ctx = 256, .max_step_tokens = 128, .kv_blocks = 64};
            run_embeds(mc, &cfg, n, n, pool, gen_beside, alone);
            run_embeds(mv, &cfg, n, n, pool, gen_beside, batched);
            run_embeds(mv, &cfg, n, 1, pool, false, other);
            double e = nmse(alone, batched, n);
            uint32_t same = 0;
            for (uint32_t i = 0; i < n; i++)
                same += !memcmp(alone[i].vec, batched[i].vec, sizeof(float) * mc->hp.n_embd);
            printf("  %s on %s: %s vs cpu nmse %.3g (%u of %u bitwise equal)\n",
                   pool == WEFT_EMBED_MEAN ? "mean" : "last", info[0].name, spec, e, same, n);
            CHECK(e <= 1e-5);
            /* the engine's batch-independence holds per backend; on a GPU the
             * rows of a matmul may round differently with the batch shape */
            double eb = nmse(other, batched, n);
            printf("  %s batched vs alone nmse %.3g\n", spec, eb);
            CHECK(eb <= 1e-5);
        }
    }
    weft_model_free(mv);
    weft_model_free(mc);
    if (cpu) weft_backend_close(cpu);
    weft_backend_close(vk);
}

static char stories[1024], *smollm2;

static void stories_batching(void) { batching_and_reference(stories, 32, 150, false, true); }  /* F32 weights */
static void stories_split(void) { split_model(stories); }
static void stories_prefix_cache(void) { prefix_cache(stories); }
static void stories_refusals_and_abort(void) { refusals_and_abort(stories); }
static void stories_mock(void) { mock_engine(stories); }
static void stories_device(void) { device_vs_cpu(stories, 8, 60, WEFT_EMBED_LAST, true); }
/* Q4_1: exact; preemption is stories' (the same code, a 20x smaller model) */
static void smollm2_batching(void) { batching_and_reference(smollm2, 12, 32, true, false); }
#ifndef __SANITIZE_ADDRESS__  /* minutes more under ASan; stories_device runs the same code */
/* lavapipe takes minutes over SmolLM2's output head: mean pooling alone, no generation beside */
static void smollm2_device(void) { device_vs_cpu(smollm2, 4, 24, WEFT_EMBED_MEAN, false); }
#endif

int main(void)
{
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    RUN(stories_batching);
    RUN(stories_split);
    RUN(stories_prefix_cache);
    RUN(stories_refusals_and_abort);
    RUN(stories_mock);
    RUN(stories_device);
    smollm2 = weft_default_model_path();
    if (smollm2) {
        RUN(smollm2_batching);
#ifndef __SANITIZE_ADDRESS__
        RUN(smollm2_device);
#endif
        free(smollm2);
    } else {
        printf("SmolLM2 cases skipped: the default model is not fetched (bash scripts/fetch-model.sh)\n");
    }
    return check_summary();
}
