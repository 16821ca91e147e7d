/* Gemma 4 in the engine (issue 38 (e)) on the random-weight model of ../shared (6 layers
 * SSFSSF, window 16; sliding layers 2 KV heads of 32, global ones 1 of 64; the last 3 layers
 * read layers 1 and 2's K/V; per-layer embeddings):
 *  - the KV pool holds the two shapes in its two groups and nothing for the KV-shared layers:
 *    a token's K/V is 768 bytes in F16 (3 layers of 256), not 6 layers' (counter);
 *  - eight requests at once, windowed (window blocks dropped), give what they give keeping
 *    every block (--swa-full), bit for bit; alone, batched and preempted (swap, recompute),
 *    every output is greedy by teacher forcing through a session (within 0.1 of the best
 *    logit: a batch's F16 matmuls round otherwise than a row alone's, as ggml's);
 *  - a prefix's blocks leave one instance and enter another (the format's WINDOW runs of the
 *    sliding shape, SHARED runs for the layers without K/V): the continuation unchanged, the
 *    whole prefix a hit;
 *  - a prompt past the window through the session (the goldens' path) equals the engine's.
 * WEFT_TEST_DEVICE=vulkan:0 runs it there. */
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/kv.h"
#include "core/session.h"
#include "tests/check.h"

#define MAXT 200
#define N 8

struct out {
    int32_t ids[MAXT];
    uint32_t n, n_cached;
    bool done;
};

struct job {
    int32_t prompt[MAXT];
    uint32_t n_prompt, max_new;
};

static const char *device = "cpu";
static struct weft_backend *be;
static struct weft_model *m;
static struct job jobs[N];
static struct out alone[N];

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

static void submit(struct weft_engine *e, const struct job *j, struct out *o)
{
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_new,
                              .ignore_eos = true, .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    CHECK_MSG(weft_engine_submit(e, &rq, &id) == WEFT_OK, "%s", weft_last_error());
}

static struct weft_engine *engine(bool swa_full, uint32_t kv_blocks, bool no_prefix)
{
    struct weft_engine_config c = {.n_ctx = 256, .max_step_tokens = 48, .max_seqs = N, .swa_full = swa_full,
                                   .kv_blocks = kv_blocks, .no_prefix_cache = no_prefix};
    struct weft_engine *e = NULL;
    CHECK_MSG(weft_engine_create(m, &c, &e) == WEFT_OK, "%s", weft_last_error());
    return e;
}

static void same(const struct out *a, const struct out *b, uint32_t n, const char *what)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!b[i].done || a[i].n != b[i].n || memcmp(a[i].ids, b[i].ids, sizeof(int32_t) * a[i].n)) {
            uint32_t k = 0;
            while (k < a[i].n && k < b[i].n && a[i].ids[k] == b[i].ids[k]) k++;
            if (bad++ < 3) fprintf(stderr, "  %s: request %u (prompt %u) differs at token %u\n", what, i, jobs[i].n_prompt, k);
        }
    CHECK_MSG(bad == 0, "%s: %u of %u requests differ", what, bad, n);
}

static void clean(struct weft_engine *e)
{
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.kv.used, 0);
    CHECK_EQ_INT(st.kv.window_used, 0);
    CHECK_MSG(weft_kv_check(weft_engine_kv(e)) == WEFT_OK, "%s", weft_last_error());
}

static void the_pool_holds_two_shapes_and_no_shared_layer(void)
{
    struct weft_engine *e = engine(false, 0, true);
    if (!e) return;
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    /* F16: the global layer 16 · (64 + 64) · 2 bytes a block, the two sliding ones 16 · (2·32 + 2·32) · 2 */
    CHECK_EQ_INT(st.kv.bytes_per_token, 768);
    CHECK_EQ_INT(st.kv.window, 16);
    const struct weft_kv_pool *kv = weft_engine_kv(e);
    CHECK_EQ_INT(kv->n_kshared, 3);
    struct weft_kv_view g = weft_kv_layer_view(kv, 5), s = weft_kv_layer_view(kv, 4), s1 = weft_kv_layer_view(kv, 1);
    CHECK(g.n_kv_head == 1 && g.head_dim == 64 && s.n_kv_head == 2 && s.head_dim == 32);
    CHECK(s.buf == s1.buf && s.layer == s1.layer);  /* layer 4 reads layer 1's */
    weft_engine_free(e);
}

/* Each output a greedy one by teacher forcing through a session (the goldens' path): every
 * token's logit within tol of the best (batches differ from a row alone in the last bits: the
 * F16 matmuls' batched path, as ggml's) */
static void near_greedy(const struct out *o, uint32_t n, const char *what)
{
    uint32_t bad = 0, V = weft_model_hparams(m)->n_vocab;
    double worst = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct weft_session *s = NULL;
        CHECK_MSG(weft_session_init(m, 256, 64, &s) == WEFT_OK, "%s", weft_last_error());
        const float *lg = NULL;
        if (!s || weft_session_eval(s, jobs[i].prompt, jobs[i].n_prompt, &lg) != WEFT_OK) {
            CHECK(0);
            weft_session_free(s);
            continue;
        }
        for (uint32_t k = 0; lg && k < o[i].n; k++) {
            float best = lg[0];
            for (uint32_t v = 1; v < V; v++) best = lg[v] > best ? lg[v] : best;
            const double d = best - lg[o[i].ids[k]];
            worst = d > worst ? d : worst;
            bad += d > 0.1;
            if (weft_session_eval(s, &o[i].ids[k], 1, &lg) != WEFT_OK) lg = NULL;
        }
        weft_session_free(s);
    }
    printf("  %s: worst gap to the greedy logit %.4f\n", what, worst);
    CHECK_MSG(bad == 0, "%s: %u tokens more than 0.1 below the greedy one", what, bad);
}

static void batched_windowed_and_preempted(void)
{
    /* alone, every block kept: the session's greedy ids */
    struct weft_engine *ef = engine(true, 0, true);
    if (!ef) return;
    for (uint32_t i = 0; i < N; i++) {
        submit(ef, &jobs[i], &alone[i]);
        CHECK(weft_engine_run_all(ef) == WEFT_OK);
    }
    near_greedy(alone, N, "alone");
    /* eight at once, every block kept and windowed (window blocks dropped): the same batches,
     * the same bits; then with too few blocks (preempted: swap, then recompute) */
    struct out batched[N];
    memset(batched, 0, sizeof batched);
    for (uint32_t i = 0; i < N; i++) submit(ef, &jobs[i], &batched[i]);
    CHECK(weft_engine_run_all(ef) == WEFT_OK);
    weft_engine_free(ef);
    near_greedy(batched, N, "eight at once");
    for (int mode = 0; mode < 3; mode++) {
        struct weft_engine *e = mode ? NULL : engine(false, 0, true);
        if (mode) {
            struct weft_engine_config c = {.n_ctx = 256, .max_step_tokens = 48, .max_seqs = N, .kv_blocks = 24,
                                           .no_prefix_cache = true, .no_swap = mode == 2};
            CHECK_MSG(weft_engine_create(m, &c, &e) == WEFT_OK, "%s", weft_last_error());
        }
        if (!e) return;
        struct out outs[N];
        memset(outs, 0, sizeof outs);
        for (uint32_t i = 0; i < N; i++) submit(e, &jobs[i], &outs[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK);
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        const char *what = mode == 0 ? "eight at once, windowed" : mode == 1 ? "swapped" : "recomputed";
        if (mode == 0) CHECK(st.kv.window_dropped > 0);
        if (mode) CHECK(st.preempt_swap + st.preempt_recompute > 0);
        printf("  %s: %llu window blocks dropped, %llu swapped, %llu recomputed\n", what,
               (unsigned long long)st.kv.window_dropped, (unsigned long long)st.preempt_swap,
               (unsigned long long)st.preempt_recompute);
        if (mode == 0) same(batched, outs, N, what);
        else near_greedy(outs, N, what);
        clean(e);
        weft_engine_free(e);
    }
}

static void blocks_travel_between_instances(void)
{
    const struct job *j = &jobs[0];
    struct weft_engine *src = engine(false, 0, false);
    if (!src) return;
    struct out r0 = {0};
    submit(src, j, &r0);
    CHECK(weft_engine_run_all(src) == WEFT_OK);
    unsigned char *buf = NULL;
    size_t n = 0;
    uint32_t nb = 0;
    CHECK_MSG(weft_engine_kv_export_prefix(src, j->prompt, j->n_prompt, &buf, &n, &nb) == WEFT_OK, "%s",
              weft_last_error());
    CHECK_EQ_INT(nb, j->n_prompt / 16);
    struct weft_kvb_header h;
    CHECK(weft_kvb_read_header(buf, n, &h) == WEFT_OK);
    /* layers S S F | S S F: ATTN-kind runs by layer, the last three SHARED */
    bool shared = false, window = false;
    for (uint32_t i = 0; i < h.n_layout; i++) {
        shared |= h.layout[i].kind == WEFT_KVB_SHARED && h.layout[i].n_layers == 3;
        window |= h.layout[i].kind == WEFT_KVB_WINDOW && h.layout[i].a == 2 && h.layout[i].b == 32;
    }
    CHECK(shared && window && h.payload_bytes == 768 * 16);
    for (int d = 0; d < 2; d++) {
        struct weft_engine *dst = engine(d == 1, 0, false);
        if (!dst) break;
        uint32_t got = 0;
        CHECK_MSG(weft_engine_kv_import(dst, buf, n, &got) == WEFT_OK, "%s", weft_last_error());
        CHECK_EQ_INT(got, nb);
        struct out r = {0};
        submit(dst, j, &r);
        CHECK(weft_engine_run_all(dst) == WEFT_OK);
        CHECK_MSG(r.n_cached == nb * 16, "%u cached", r.n_cached);
        same(&alone[0], &r, 1, d ? "into an every-block instance" : "into a windowed instance");
        clean(dst);
        weft_engine_free(dst);
    }
    free(buf);
    weft_engine_free(src);
}

static void the_session_equals_the_engine(void)
{
    const struct job *j = &jobs[0];
    struct weft_session *s = NULL;
    CHECK_MSG(weft_session_init(m, 256, 64, &s) == WEFT_OK, "%s", weft_last_error());
    if (!s) return;
    const float *lg = NULL;
    uint32_t V = weft_model_hparams(m)->n_vocab, k = 0;
    int32_t tok = 0;
    CHECK(weft_session_eval(s, j->prompt, j->n_prompt, &lg) == WEFT_OK);
    for (k = 0; lg && k < alone[0].n && k < 24; k++) {
        uint32_t best = 0;
        for (uint32_t v = 1; v < V; v++) best = lg[v] > lg[best] ? v : best;
        if ((int32_t)best != alone[0].ids[k]) break;
        tok = (int32_t)best;
        if (weft_session_eval(s, &tok, 1, &lg) != WEFT_OK) break;
    }
    CHECK_MSG(k == 24, "the session left the engine's greedy ids at %u", k);
    weft_session_free(s);
}

int main(void)
{
    if (getenv("WEFT_TEST_DEVICE")) device = getenv("WEFT_TEST_DEVICE");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/arch/gemma4-F16.gguf", WEFT_SHARED_DIR);
    if (weft_backend_open(device, 1, &be) != WEFT_OK) SKIP_ALL("device %s: %s", device, weft_last_error());
    if (weft_model_load(path, be, &m) != WEFT_OK) {
        weft_backend_close(be);
        SKIP_ALL("%s: %s", path, weft_last_error());
    }
    uint64_t x = 11;
    for (uint32_t i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        jobs[i].n_prompt = i % 2 ? 3 + (uint32_t)(x >> 33) % 12 : 40 + (uint32_t)(x >> 33) % 40;
        jobs[i].max_new = 40 + (uint32_t)(x >> 45) % 10;  /* past the window of 16 */
        jobs[i].prompt[0] = 1;
        for (uint32_t k = 1; k < jobs[i].n_prompt; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            jobs[i].prompt[k] = 3 + (int32_t)((x >> 35) % 500);
        }
    }
    RUN(the_pool_holds_two_shapes_and_no_shared_layer);
    RUN(batched_windowed_and_preempted);
    RUN(blocks_travel_between_instances);
    RUN(the_session_equals_the_engine);
    weft_model_free(m);
    weft_backend_close(be);
    return check_summary();
}
