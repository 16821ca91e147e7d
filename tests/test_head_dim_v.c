/* K and V heads of different widths (attention.value_length != key_length,
 * the KV view's head_dim_v) through a whole model: a random-weight llama of
 * K heads of 64 and V heads of 32 (weft gen --head-dim-v). The engine,
 * batched, gives the single-sequence session's greedy tokens; its KV blocks
 * say the V width in the format's header and serve another engine's prompt
 * (the same tokens); with WEFT_TEST_DEVICE=vulkan:0 (opencl:0) the device's
 * teacher-forced logits are the CPU's within tolerance. The op itself
 * against a double reference: test_backend_ops' "ROPE_KV + ATTENTION
 * head_dim_v". */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/engine.h"
#include "core/session.h"
#include "tests/check.h"
#include "tools/gen_model.h"

#define N 6
#define MAXT 128

static const char *device = "cpu";
static char path[256];
static struct weft_backend *cpu_be;
static struct weft_model *cpu_m;

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
        CHECK_MSG(ev->finish != WEFT_FINISH_ERROR, "%s", ev->message ? ev->message : "?");
        o->n_cached = ev->n_cached;
        o->done = true;
    }
}

static int32_t prompts[N][80];
static uint32_t n_prompt[N];

static void submit(struct weft_engine *e, int i, struct out *o, uint32_t max_new)
{
    struct weft_request rq = {.prompt = prompts[i], .n_prompt = n_prompt[i], .max_tokens = max_new,
                              .ignore_eos = true, .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    CHECK_MSG(weft_engine_submit(e, &rq, &id) == WEFT_OK, "%s", weft_last_error());
}

static int32_t argmax(const float *v, uint32_t n)
{
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int32_t)i;
    return best;
}

/* Greedy through the session (the path the goldens pin) against the engine,
 * all prompts at once; then the blocks of one prompt into a second engine. */
static void engine_matches_session_and_blocks_travel(void)
{
    const uint32_t V = weft_model_hparams(cpu_m)->n_vocab, NEW = 24;
    struct weft_engine_config c = {.n_ctx = 256, .max_step_tokens = 64};
    struct weft_engine *e = NULL, *e2 = NULL;
    CHECK(weft_engine_create(cpu_m, &c, &e) == WEFT_OK);
    CHECK(weft_engine_create(cpu_m, &c, &e2) == WEFT_OK);
    if (!e || !e2) return;
    struct out o[N];
    memset(o, 0, sizeof o);
    for (int i = 0; i < N; i++) submit(e, i, &o[i], NEW);
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    struct weft_session *s = NULL;
    CHECK(weft_session_init(cpu_m, 256, 64, &s) == WEFT_OK);
    for (int i = 0; i < N && s; i++) {
        weft_session_reset(s);
        const float *lg;
        CHECK(weft_session_eval(s, prompts[i], n_prompt[i], &lg) == WEFT_OK);
        for (uint32_t k = 0; k < o[i].n; k++) {
            int32_t t = argmax(lg, V);
            CHECK_MSG(t == o[i].ids[k], "prompt %d token %u: session %d, engine %d", i, k, t, o[i].ids[k]);
            if (t != o[i].ids[k]) break;
            CHECK(weft_session_eval(s, &t, 1, &lg) == WEFT_OK);
        }
    }
    weft_session_free(s);
    /* the blocks of prompt 0 into the second engine */
    unsigned char *buf = NULL;
    size_t n = 0;
    uint32_t nb = 0, got = 0;
    CHECK(weft_engine_kv_export_prefix(e, prompts[0], n_prompt[0], &buf, &n, &nb) == WEFT_OK);
    CHECK_EQ_INT(nb, n_prompt[0] / 16);
    struct weft_kvb_header h;
    CHECK(weft_kvb_read_header(buf, n, &h) == WEFT_OK);
    CHECK(h.n_layout == 1 && h.layout[0].b == 64 && h.layout[0].c == 32);
    /* per layer: 16 tokens x 2 KV heads x (64 + 32) F16 values */
    CHECK_EQ_INT(h.payload_bytes, 2 * 16 * 2 * (64 + 32) * 2);
    CHECK_MSG(weft_engine_kv_import(e2, buf, n, &got) == WEFT_OK, "%s", weft_last_error());
    CHECK_EQ_INT(got, nb);
    struct out r = {0};
    submit(e2, 0, &r, NEW);
    CHECK(weft_engine_run_all(e2) == WEFT_OK);
    CHECK_EQ_INT(r.n_cached, nb * 16);
    CHECK(r.n == o[0].n && !memcmp(r.ids, o[0].ids, sizeof(int32_t) * r.n));
    printf("  %d prompts: engine == session; %u blocks of %u payload bytes served the other engine\n", N, nb,
           h.payload_bytes);
    free(buf);
    weft_engine_free(e);
    weft_engine_free(e2);
}

/* The device's logits, teacher-forced over every prompt, against the CPU's. */
static void device_matches_cpu(void)
{
    struct weft_backend *be = NULL;
    struct weft_model *m = NULL;
    if (weft_backend_open(device, 1, &be) != WEFT_OK || weft_model_load(path, be, &m) != WEFT_OK) {
        CHECK_MSG(0, "%s: %s", device, weft_last_error());
        if (be) weft_backend_close(be);
        return;
    }
    const uint32_t V = weft_model_hparams(m)->n_vocab;
    struct weft_session *a = NULL, *b = NULL;
    CHECK(weft_session_init(cpu_m, 256, 64, &a) == WEFT_OK);
    CHECK(weft_session_init(m, 256, 64, &b) == WEFT_OK);
    double worst = 0;
    for (int i = 0; i < N && a && b; i++) {
        weft_session_reset(a);
        weft_session_reset(b);
        for (uint32_t k = 0; k < n_prompt[i]; k++) {
            const float *la, *lb;
            CHECK(weft_session_eval(a, &prompts[i][k], 1, &la) == WEFT_OK);
            CHECK(weft_session_eval(b, &prompts[i][k], 1, &lb) == WEFT_OK);
            double num = 0, den = 0;
            for (uint32_t v = 0; v < V; v++) {
                num += ((double)la[v] - lb[v]) * ((double)la[v] - lb[v]);
                den += (double)la[v] * la[v];
            }
            if (num / den > worst) worst = num / den;
        }
    }
    printf("  %s: worst nmse of the logits against the CPU's %.3g\n", device, worst);
    CHECK(worst < 1e-4);
    weft_session_free(a);
    weft_session_free(b);
    weft_model_free(m);
    weft_backend_close(be);
}

int main(void)
{
    if (getenv("WEFT_TEST_DEVICE")) device = getenv("WEFT_TEST_DEVICE");
    if (strcmp(device, "cpu")) {
        struct weft_backend *be = NULL;
        if (weft_backend_open(device, 1, &be) != WEFT_OK) SKIP_ALL("device %s: %s", device, weft_last_error());
        weft_backend_close(be);
    }
    snprintf(path, sizeof path, "/tmp/weft-test-head-dim-v-%d.gguf", (int)getpid());
    struct weft_gen_params p;
    weft_gen_preset(&p, "tiny");
    p.type = WEFT_TYPE_F16;
    p.head_dim = 64;
    p.head_dim_v = 32;
    p.seed = 9;
    CHECK_MSG(weft_gen_model(&p, path) == WEFT_OK, "%s", weft_last_error());
    CHECK(weft_backend_open("cpu", 1, &cpu_be) == WEFT_OK);
    CHECK_MSG(weft_model_load(path, cpu_be, &cpu_m) == WEFT_OK, "%s", weft_last_error());
    if (!cpu_m) {
        unlink(path);
        return check_summary();
    }
    CHECK(weft_model_hparams(cpu_m)->head_dim == 64 && weft_model_hparams(cpu_m)->head_dim_v == 32);
    uint64_t x = 3;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        n_prompt[i] = 20 + (uint32_t)(x >> 33) % 60;
        for (uint32_t k = 0; k < n_prompt[i]; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompts[i][k] = 1 + (int32_t)((x >> 35) % (weft_model_hparams(cpu_m)->n_vocab - 1));
        }
    }
    if (!strcmp(device, "cpu")) RUN(engine_matches_session_and_blocks_travel);
    else RUN(device_matches_cpu);
    weft_model_free(cpu_m);
    weft_backend_close(cpu_be);
    unlink(path);
    return check_summary();
}
