/* Every device present, and layer splits across devices, against the CPU
 * backend (the oracle) on real models, through the engine:
 *  - stories260K and SmolLM2-135M Q4_1 (when fetched): greedy ids of 3
 *    prompts x 64 tokens equal the CPU's, each request alone;
 *  - the same requests 8 at once, with different prompt lengths so steps mix
 *    prefill chunks and decodes, equal the CPU's;
 *  - a split of the layers over two CPU backends, and over the CPU and each
 *    other device, equals the single-device run.
 * stories260K (F32) must match exactly everywhere, and so must every CPU
 * run. SmolLM2 rounds activations to 8 bits before each matmul, which turns
 * a last-bit difference (a GPU's summation order, exp, sqrt) into a visible
 * one within a few dozen tokens: on a GPU a prompt may part ways with the CPU
 * only at a step where the CPU's own top-2 logprob margin is below NEAR_TIE.
 * lavapipe (Mesa's CPU Vulkan) gets no such allowance: there the Vulkan
 * backend runs its exact forms (IEEE float arithmetic step for step as the
 * CPU's), so SmolLM2 must match exactly too; so must PoCL (OpenCL on the
 * CPU), where the OpenCL backend runs its exact forms.
 * Without a GPU backend only the CPU splits run. WEFT_TEST_DEVICES="a b"
 * restricts the devices (e.g. "vulkan:0"). */
#include <pthread.h>
#include <string.h>

#include "core/engine.h"
#include "core/model_impl.h"
#include "tests/check.h"
#include "tools/cli.h"

#define NPROMPT 8
#define NGEN 64

struct out {
    int32_t ids[NGEN];
    float margin[NGEN];   /* top-1 minus top-2 logprob at each step */
    uint32_t n;
    bool done;
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    if (ev->has_token && o->n < NGEN) {
        o->margin[o->n] = ev->token.n_top >= 2 ? ev->token.top_logprob[0] - ev->token.top_logprob[1] : 0;
        o->ids[o->n++] = ev->token.id;
    }
    if (ev->finish == WEFT_FINISH_ERROR) fprintf(stderr, "  request failed: %s\n", ev->message ? ev->message : "?");
    if (ev->finish != WEFT_FINISH_NONE) o->done = true;
}

static const char *const texts[NPROMPT] = {
    "Once upon a time, there was a little dog",
    "The capital of France is",
    "Tom and Lily went to the park. They saw a big tree and",
    "One day",
    "What is the best way to learn to play the piano? Practice every day, and",
    "The sun was shining and the birds were singing. A little girl named Sue",
    "Write a poem about the sea.",
    "Numbers: 1, 2, 3, 4,",
};

/* Greedy outputs of prompts[0..n) through one engine, `conc` at a time. */
static bool generate(const struct weft_model *m, int32_t *const *prompts, const size_t *lens, uint32_t n,
                     uint32_t conc, struct out *outs)
{
    struct weft_engine_config cfg = {.n_ctx = 256, .max_seqs = 8, .max_step_tokens = 64, .no_prefix_cache = true};
    struct weft_engine *e;
    if (weft_engine_create(m, &cfg, &e) != WEFT_OK) {
        fprintf(stderr, "  engine: %s\n", weft_last_error());
        return false;
    }
    memset(outs, 0, sizeof *outs * n);
    bool ok = true;
    for (uint32_t g = 0; g < n && ok; g += conc) {
        for (uint32_t i = g; i < n && i < g + conc; i++) {
            struct weft_request rq = {.prompt = prompts[i], .n_prompt = (uint32_t)lens[i], .max_tokens = NGEN,
                                      .ignore_eos = true, .cb = on_event, .user = &outs[i]};
            weft_sampling_params_default(&rq.sampling);
            rq.sampling.temperature = 0;
            rq.sampling.n_logprobs = 2;
            uint64_t id;
            ok = ok && weft_engine_submit(e, &rq, &id) == WEFT_OK;
        }
        ok = ok && weft_engine_run_all(e) == WEFT_OK;
    }
    for (uint32_t i = 0; i < n; i++) ok = ok && outs[i].done && outs[i].n == NGEN;
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.kv.used, 0);
    weft_engine_free(e);
    return ok;
}

/* Prompts whose greedy ids differ from the reference's. With near_tie > 0
 * (a GPU on a model whose activations are rounded to 8 bits, which turns a
 * last-bit difference into a visible one) a prompt may part ways only at a
 * step where the reference's own top-2 margin is below near_tie. */
static uint32_t n_differ(const struct out *a, const struct out *b, uint32_t n, const char *what, float near_tie)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = 0;
        while (k < NGEN && a[i].ids[k] == b[i].ids[k]) k++;
        if (k == NGEN) continue;
        bool tie = near_tie > 0 && a[i].margin[k] < near_tie;
        if (!tie) bad++;
        if (!tie || near_tie > 0)
            fprintf(stderr, "  %s: prompt %u differs from token %u (%d vs %d; reference margin %.3f)%s\n", what, i, k,
                    a[i].ids[k], b[i].ids[k], a[i].margin[k], tie ? ": a near-tie" : "");
    }
    return bad;
}

/* GPU vs CPU on a model with 8-bit activation rounding: see n_differ */
#define NEAR_TIE 0.5f

static struct weft_backend *cpu, *cpu2;
static char devices[8][32];
static int n_devices;

/* lavapipe: a CPU-type Vulkan device, on which the backend's ops equal the
 * CPU's bit for bit (tests/test_device_exact.c); an OpenCL device of CPU
 * type (PoCL), where the OpenCL backend's exact forms do the same */
static bool bit_exact_device(const char *dev)
{
    char name[32];
    snprintf(name, sizeof name, "%.31s", dev);
    char *colon = strchr(name, ':');
    int idx = colon ? atoi(colon + 1) : 0;
    if (colon) *colon = 0;
    const struct weft_backend_iface *bi = weft_backend_find(name);
    struct weft_device_info info[8];
    int n = bi ? bi->devices(info, 8, NULL) : 0;
    return idx < n && idx >= 0 &&
           (strstr(info[idx].name, "llvmpipe") || strstr(info[idx].name, "lavapipe") ||
            (!strcmp(name, "opencl") && strstr(info[idx].name, ", CPU")));
}

static struct weft_model *load(const char *path, const struct weft_split_part *parts, uint32_t n)
{
    struct weft_model *m = NULL;
    if (weft_model_load_split(path, parts, n, &m) != WEFT_OK) fprintf(stderr, "  load: %s\n", weft_last_error());
    return m;
}

static void model_on_every_device(const char *path, uint32_t n_prompts, float tie)
{
    struct weft_model *ref = load(path, &(struct weft_split_part){cpu, 0}, 1);
    CHECK(ref != NULL);
    if (!ref) return;
    uint32_t L = ref->hp.n_layer, half = L / 2;
    int32_t *prompts[NPROMPT];
    size_t lens[NPROMPT];
    for (uint32_t i = 0; i < n_prompts; i++)
        CHECK(weft_tokenize(ref->tok, texts[i], strlen(texts[i]), true, false, &prompts[i], &lens[i]) == WEFT_OK);
    static struct out want[NPROMPT], got[NPROMPT];
    CHECK(generate(ref, prompts, lens, n_prompts, 1, want));
    /* the CPU itself batched: the reference for the batched runs below */
    CHECK(generate(ref, prompts, lens, n_prompts, 8, got));
    CHECK_MSG(n_differ(want, got, n_prompts, "cpu batched", 0) == 0, "cpu: 8 at once differs from alone");

    /* the split machinery on two CPU backends: bit-identical math */
    struct weft_split_part two_cpu[2] = {{cpu, half}, {cpu2, L - half}};
    struct weft_model *m = load(path, two_cpu, 2);
    CHECK(m != NULL);
    if (m) {
        CHECK(generate(m, prompts, lens, n_prompts, 8, got));
        CHECK_MSG(n_differ(want, got, n_prompts, "split cpu+cpu", 0) == 0, "split over two CPU backends differs");
        printf("  %s: split cpu=%u,cpu=%u, 8 at once == cpu (bit for bit)\n", path, half, L - half);
        weft_model_free(m);
    }
    const float tie_gpu = tie;
    for (int d = 0; d < n_devices; d++) {
        tie = bit_exact_device(devices[d]) ? 0 : tie_gpu;
        struct weft_backend *be;
        if (weft_backend_open(devices[d], 2, &be) != WEFT_OK) {
            CHECK_MSG(0, "%s: %s", devices[d], weft_last_error());
            continue;
        }
        m = load(path, &(struct weft_split_part){be, 0}, 1);
        CHECK(m != NULL);
        if (m) {
            CHECK(generate(m, prompts, lens, 3, 1, got));
            uint32_t bad = n_differ(want, got, 3, devices[d], tie);
            CHECK_MSG(bad == 0, "%s: %u of 3 prompts differ from the CPU", devices[d], bad);
            printf("  %s on %s: 3 prompts x %d greedy tokens %s cpu\n", path, devices[d], NGEN, bad ? "!=" : tie > 0 ? "== (up to near-ties)" : "==");
            CHECK(generate(m, prompts, lens, n_prompts, 8, got));
            bad = n_differ(want, got, n_prompts, devices[d], tie);
            CHECK_MSG(bad == 0, "%s: 8 at once: %u of %u prompts differ from the CPU", devices[d], bad, n_prompts);
            printf("  %s on %s: %u prompts 8 at once %s cpu\n", path, devices[d], n_prompts, bad ? "!=" : tie > 0 ? "== (up to near-ties)" : "==");
            weft_model_free(m);
        }
        struct weft_split_part mixed[2] = {{cpu, half}, {be, L - half}};
        m = load(path, mixed, 2);
        CHECK(m != NULL);
        if (m) {
            CHECK(generate(m, prompts, lens, n_prompts, 8, got));
            uint32_t bad = n_differ(want, got, n_prompts, "split", tie);
            CHECK_MSG(bad == 0, "split cpu=%u,%s=%u: %u of %u prompts differ", half, devices[d], L - half, bad, n_prompts);
            printf("  %s split cpu=%u,%s=%u, 8 at once %s cpu\n", path, half, devices[d], L - half, bad ? "!=" : tie > 0 ? "== (up to near-ties)" : "==");
            weft_model_free(m);
        }
        weft_backend_close(be);
    }
    for (uint32_t i = 0; i < n_prompts; i++) free(prompts[i]);
    weft_model_free(ref);
}

static void stories260k(void)
{
    model_on_every_device(WEFT_SHARED_DIR "/models/stories260K.gguf", NPROMPT, 0);  /* F32: exact */
}

/* WEFT_TEST_SMOLLM2=PATH runs this case on another SmolLM2-shape model (a
 * machine that cannot fetch the real one: tests/gpu/run.sh then hands it a
 * random-weight SmolLM2-shape Q4_1 with the real vocabulary). */
static void smollm2(void)
{
    const char *over = getenv("WEFT_TEST_SMOLLM2");
    char *path = over && *over ? strdup(over) : weft_default_model_path();
    if (over && *over) printf("  (SmolLM2 case on %s)\n", over);
    if (!path) {
        printf("  (SmolLM2-135M not fetched: skipped)\n");
        return;
    }
    model_on_every_device(path, NPROMPT, NEAR_TIE);
    free(path);
}

static void bad_splits_are_refused(void)
{
    struct weft_split_part p[2] = {{cpu, 2}, {cpu2, 2}};  /* stories260K has 5 layers */
    struct weft_model *m = NULL;
    CHECK(weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", p, 2, &m) == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "layers") != NULL);
    p[0].n_layer = 0;  /* only the last part may leave its count to the rest */
    CHECK(weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", p, 2, &m) == WEFT_ERR_INVALID_ARG);
    CHECK(m == NULL);
    p[0].n_layer = 5;  /* and the rest must not be empty */
    p[1].n_layer = 0;
    CHECK(weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", p, 2, &m) == WEFT_ERR_INVALID_ARG);
    p[0].n_layer = 2;  /* 2 + the rest (3) */
    CHECK(weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", p, 2, &m) == WEFT_OK);
    CHECK(m && m->parts[1].n_layer == 3 && m->layer_part[2] == 1);
    weft_model_free(m);
}

int main(void)
{
    setenv("WEFT_VK_VALIDATE", "1", 0);  /* Vulkan: validation errors fail the run */
    setenv("WEFT_WEIGHT_CHUNK_MIB", "8", 0);  /* a GPU's weights in several buffers */
    check_env_reapply();
    if (weft_backend_open("cpu", 2, &cpu) != WEFT_OK || weft_backend_open("cpu", 1, &cpu2) != WEFT_OK)
        SKIP_ALL("no CPU backend");
    const char *only = getenv("WEFT_TEST_DEVICES");
    if (only && *only) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", only);
        for (char *s = NULL, *t = strtok_r(buf, " ,", &s); t && n_devices < 8; t = strtok_r(NULL, " ,", &s))
            snprintf(devices[n_devices++], sizeof devices[0], "%s", t);
    } else {
        for (int i = 0; i < weft_backend_count(); i++) {
            const struct weft_backend_iface *bi = weft_backend_get(i);
            if (!strcmp(bi->name, "cpu")) continue;
            struct weft_device_info info[4];
            int n = bi->devices(info, 4, NULL);
            for (int d = 0; d < n && d < 4 && n_devices < 8; d++)
                snprintf(devices[n_devices++], sizeof devices[0], "%s:%d", bi->name, d);
        }
    }
    printf("devices besides the CPU: %d\n", n_devices);
    RUN(bad_splits_are_refused);
    RUN(stories260k);
    RUN(smollm2);
    weft_backend_close(cpu);
    weft_backend_close(cpu2);
    return check_summary();
}
