/* `weft bench --concurrency 1,8,32 -p 128 -n 64`: the engine in process (no
 * HTTP). For each level C, C requests with distinct random prompts of -p
 * tokens each ask for -n new tokens (ignore_eos, greedy), all submitted at
 * once to a running engine. Reported per level, over -r runs after one
 * warm-up: aggregate generated tokens/s (all generated tokens / wall time
 * from submit to the last token), mean time to first token, mean
 * inter-token latency, the aggregate decode rate it implies (C x 1000 / ITL:
 * what batching buys once the prompts are in; on a CPU the prompts' prefill
 * dominates the wall time), tokens per engine step, and both rates as a
 * multiple of concurrency 1's when 1 is among the levels. The runs are
 * interleaved across levels. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "tools/bench_conc.h"
#include "tools/cli_common.h"

struct creq {
    double t_submit, t_first, t_last;
    uint32_t n;
    bool done, failed;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static uint32_t n_done;

static void on_event(void *user, const struct weft_event *ev)
{
    struct creq *r = user;
    double now = cli_now_ms();
    if (ev->has_token) {
        if (r->n == 0) r->t_first = now;
        r->t_last = now;
        r->n++;
    }
    if (ev->finish != WEFT_FINISH_NONE) {
        pthread_mutex_lock(&mu);
        r->done = true;
        r->failed = ev->finish == WEFT_FINISH_ERROR;
        n_done++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}

struct level_result { double tps, ttft_ms, itl_ms, tok_per_step; };

static int run_level(struct weft_engine *e, const struct weft_model *m, uint32_t conc, uint32_t pp, uint32_t tg,
                     uint64_t seed, struct level_result *out)
{
    struct creq *reqs = calloc(conc, sizeof *reqs);
    int32_t *prompt = malloc(sizeof(int32_t) * pp);
    if (!reqs || !prompt) { free(reqs); free(prompt); return -1; }
    struct weft_engine_stats s0, s1;
    weft_engine_stats(e, &s0);
    n_done = 0;
    uint64_t x = seed;
    double t0 = cli_now_ms();
    int rc = 0;
    for (uint32_t i = 0; i < conc; i++) {
        for (uint32_t k = 0; k < pp; k++) {  /* distinct prompts: no prefix-cache hits */
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            prompt[k] = (int32_t)(x % m->hp.n_vocab);
        }
        struct weft_request rq = {.prompt = prompt, .n_prompt = pp, .max_tokens = tg, .ignore_eos = true,
                                  .cb = on_event, .user = &reqs[i]};
        weft_sampling_params_default(&rq.sampling);
        rq.sampling.temperature = 0;
        reqs[i].t_submit = cli_now_ms();
        uint64_t id;
        if (weft_engine_submit(e, &rq, &id) != WEFT_OK) {
            cli_fail("submit");
            conc = i;  /* wait for those already in */
            rc = -1;
            break;
        }
    }
    pthread_mutex_lock(&mu);
    while (n_done < conc) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    double wall = cli_now_ms() - t0;
    weft_engine_stats(e, &s1);
    uint64_t gen = 0;
    double ttft = 0, itl = 0;
    uint32_t n_itl = 0;
    for (uint32_t i = 0; i < conc; i++) {
        if (reqs[i].failed) rc = -1;
        gen += reqs[i].n;
        ttft += reqs[i].t_first - reqs[i].t_submit;
        if (reqs[i].n > 1) {
            itl += (reqs[i].t_last - reqs[i].t_first) / (reqs[i].n - 1);
            n_itl++;
        }
    }
    out->tps = gen * 1e3 / wall;
    out->ttft_ms = conc ? ttft / conc : 0;
    out->itl_ms = n_itl ? itl / n_itl : 0;
    uint64_t steps = s1.steps - s0.steps;
    out->tok_per_step = steps ? (double)(s1.step_tokens - s0.step_tokens) / (double)steps : 0;
    free(reqs);
    free(prompt);
    return rc;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_concurrency(const struct cli_opts *o, const struct weft_model *m, const int *levels, int n_levels,
                      int pp, int tg, int reps, int threads)
{
    int max_c = 1;
    for (int i = 0; i < n_levels; i++) if (levels[i] > max_c) max_c = levels[i];
    if (pp < 1 || tg < 1) {
        fprintf(stderr, "weft bench: --concurrency needs -p and -n of at least 1\n");
        return 2;
    }
    struct weft_engine_config cfg = {.n_ctx = (uint32_t)(pp + tg + 1), .max_seqs = (uint32_t)max_c,
                                     .max_step_tokens = o->batch ? (uint32_t)o->batch : 512,
                                     .max_waiting = (uint32_t)max_c + 16};
    if (cfg.max_step_tokens < cfg.max_seqs) cfg.max_step_tokens = cfg.max_seqs;
    struct weft_engine *e;
    if (weft_engine_create(m, &cfg, &e) != WEFT_OK) { cli_fail("cannot create the engine"); return 1; }
    if (weft_engine_start(e) != WEFT_OK) { cli_fail("cannot start the engine"); weft_engine_free(e); return 1; }
    const char *name = "";
    weft_gguf_get_str(m->gguf, "general.name", &name, NULL);
    if (!o->json) {
        printf("model: %s (%s), device %s, %d threads; %d-token prompts, %d new tokens each, %d runs per level\n\n",
               name, weft_type_name(m->ftype), o->device, threads, pp, tg, reps);
        printf("| %11s | %15s | %18s | %12s | %10s | %12s | %11s | %8s | %8s |\n", "concurrency", "gen t/s median",
               "gen t/s mean ± sd", "TTFT ms", "ITL ms", "decode t/s", "tok/step", "gen vs 1", "dec vs 1");
        printf("|-------------|-----------------|--------------------|--------------|------------|--------------|"
               "-------------|----------|----------|\n");
        fflush(stdout);
    }
    json_t *results = json_array();
    int rc = 0;
    /* one warm-up per level, then the runs interleaved across levels (run i
     * of every level before run i + 1 of any), so that a busy spell of a
     * shared machine falls on all levels alike rather than on one */
    struct level_result (*r)[100] = calloc((size_t)n_levels, sizeof *r);
    if (!r) { cli_fail("out of memory"); weft_engine_free(e); json_decref(results); return 1; }
    for (int l = 0; l < n_levels && rc == 0; l++) {
        struct level_result warm;
        cli_progress("concurrency %d: warm-up", levels[l]);
        if (levels[l] > 0 && run_level(e, m, (uint32_t)levels[l], (uint32_t)pp, (uint32_t)tg, 0x1234 + levels[l], &warm))
            rc = 1;
    }
    for (int i = 0; i < reps && rc == 0; i++)
        for (int l = 0; l < n_levels && rc == 0; l++) {
            if (levels[l] <= 0) continue;
            cli_progress("run %d/%d, concurrency %d", i + 1, reps, levels[l]);
            if (run_level(e, m, (uint32_t)levels[l], (uint32_t)pp, (uint32_t)tg, 0x9e3779b9ull * (i + 1) + levels[l],
                          &r[l][i]))
                rc = 1;
        }
    cli_progress_clear();
    double base_tps = 0, base_dec = 0; /* concurrency 1's medians, for the ratios */
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (int l = 0; l < n_levels; l++) {
            uint32_t c = (uint32_t)levels[l];
            if (c == 0 || (pass == 0 && c != 1)) continue;
            double tps[100], ttft[100], itl[100], tps_sum = 0, tps_sd = 0;
            for (int i = 0; i < reps; i++) {
                tps[i] = r[l][i].tps;
                ttft[i] = r[l][i].ttft_ms;
                itl[i] = r[l][i].itl_ms;
                tps_sum += r[l][i].tps;
            }
            double mean = tps_sum / reps;
            for (int i = 0; i < reps; i++) tps_sd += (r[l][i].tps - mean) * (r[l][i].tps - mean);
            tps_sd = reps > 1 ? sqrt(tps_sd / (reps - 1)) : 0;
            double tpsm = median(tps, reps), ttftm = median(ttft, reps), itlm = median(itl, reps);
            double steps = r[l][reps / 2].tok_per_step;
            double dec_tps = itlm > 0 ? c * 1e3 / itlm : 0;  /* C streams, one token per ITL each */
            if (pass == 0) {
                base_tps = tpsm;
                base_dec = dec_tps;
                continue;
            }
            double x_gen = base_tps > 0 ? tpsm / base_tps : 0, x_dec = base_dec > 0 ? dec_tps / base_dec : 0;
            if (o->json) {
                /* the ratios are null without a concurrency-1 level */
                json_array_append_new(
                    results, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:o,s:o}", "concurrency", (int)c,
                                       "gen_tps_median", tpsm, "gen_tps_mean", mean, "gen_tps_sd", tps_sd,
                                       "ttft_ms_median", ttftm, "itl_ms_median", itlm, "decode_tps", dec_tps,
                                       "tokens_per_step", steps, "gen_vs_c1", base_tps > 0 ? json_real(x_gen) : json_null(),
                                       "decode_vs_c1", base_dec > 0 ? json_real(x_dec) : json_null()));
            } else {
                char xg[16] = "-", xd[16] = "-";
                if (base_tps > 0) snprintf(xg, sizeof xg, "%.2fx", x_gen);
                if (base_dec > 0) snprintf(xd, sizeof xd, "%.2fx", x_dec);
                printf("| %11u | %15.1f | %8.1f ± %7.1f | %12.1f | %10.2f | %12.1f | %11.1f | %8s | %8s |\n", c, tpsm,
                       mean, tps_sd, ttftm, itlm, dec_tps, steps, xg, xd);
                fflush(stdout);
            }
        }
    free(r);
    if (o->json && rc == 0) {
        json_t *root = json_pack("{s:s,s:s,s:i,s:i,s:i,s:o}", "model", name, "type", weft_type_name(m->ftype),
                                 "threads", threads, "prompt_tokens", pp, "new_tokens", tg, "results", results);
        results = NULL;
        char *str = json_dumps(root, JSON_REAL_PRECISION(6));
        if (str) puts(str);
        free(str);
        json_decref(root);
    }
    json_decref(results);
    weft_engine_free(e);
    return rc;
}
