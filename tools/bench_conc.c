/* `weft bench --concurrency 1,8,32 -p 128 -n 64`: the engine in process (no
 * HTTP). For each level C, C requests with distinct random prompts of -p
 * tokens each ask for -n new tokens (ignore_eos, greedy), all submitted at
 * once to a running engine. Reported per level, over -r runs after one
 * warm-up: aggregate generated tokens/s (all generated tokens / wall time
 * from submit to the last token), time to first token (p50, p99), the
 * inter-token latency over every gap of every stream (p50, p90, p99, max;
 * its mean gives the aggregate decode rate, C x 1000 / ITL:
 * what batching buys once the prompts are in; on a CPU the prompts' prefill
 * dominates the wall time), tokens per engine step, and both rates as a
 * multiple of concurrency 1's when 1 is among the levels. The runs are
 * interleaved across levels. weft_bench_conc_measure gives the per-level medians
 * (weft bench --devices uses it too), weft_bench_concurrency prints them. */
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
    double *gaps;                /* [tg]: the time between consecutive tokens */
    bool done, failed;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static uint32_t n_done;

static void on_event(void *user, const struct weft_event *ev)
{
    struct creq *r = user;
    double now = weft_cli_now_ms();
    if (ev->has_token) {
        if (r->n == 0) r->t_first = now;
        else if (r->gaps) r->gaps[r->n - 1] = now - r->t_last;
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

struct level_result {
    double tps, ttft_ms, itl_ms, tok_per_step;
    double ttft_p50, ttft_p99, itl_p50, itl_p90, itl_p99, itl_max;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* p-th percentile of v[0..n) (sorted here), linear between ranks */
static double pct(double *v, size_t n, double p)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    double k = (double)(n - 1) * p / 100;
    size_t lo = (size_t)k, hi = lo + 1 < n ? lo + 1 : n - 1;
    return v[lo] + (v[hi] - v[lo]) * (k - (double)lo);
}

static int run_level(struct weft_engine *e, const struct weft_model *m, uint32_t conc, uint32_t pp, uint32_t tg,
                     uint64_t seed, struct level_result *out)
{
    struct creq *reqs = calloc(conc, sizeof *reqs);
    int32_t *prompt = malloc(sizeof(int32_t) * pp);
    double *gaps = malloc(sizeof(double) * conc * tg), *ttfts = malloc(sizeof(double) * conc);
    if (!reqs || !prompt || !gaps || !ttfts) { free(reqs); free(prompt); free(gaps); free(ttfts); return -1; }
    for (uint32_t i = 0; i < conc; i++) reqs[i].gaps = gaps + (size_t)i * tg;
    struct weft_engine_stats s0, s1;
    weft_engine_stats(e, &s0);
    n_done = 0;
    uint64_t x = seed;
    double t0 = weft_cli_now_ms();
    int rc = 0;
    for (uint32_t i = 0; i < conc; i++) {
        for (uint32_t k = 0; k < pp; k++) {  /* distinct prompts: no prefix-cache hits */
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            prompt[k] = (int32_t)(x % weft_model_hparams(m)->n_vocab);
        }
        struct weft_request rq = {.prompt = prompt, .n_prompt = pp, .max_tokens = tg, .ignore_eos = true,
                                  .cb = on_event, .user = &reqs[i]};
        weft_sampling_params_default(&rq.sampling);
        rq.sampling.temperature = 0;
        reqs[i].t_submit = weft_cli_now_ms();
        uint64_t id;
        if (weft_engine_submit(e, &rq, &id) != WEFT_OK) {
            weft_cli_fail("submit");
            conc = i;  /* wait for those already in */
            rc = -1;
            break;
        }
    }
    pthread_mutex_lock(&mu);
    while (n_done < conc) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    double wall = weft_cli_now_ms() - t0;
    weft_engine_stats(e, &s1);
    uint64_t gen = 0;
    double ttft = 0, itl = 0;
    uint32_t n_itl = 0;
    size_t n_gaps = 0;
    for (uint32_t i = 0; i < conc; i++) {
        if (reqs[i].failed) rc = -1;
        gen += reqs[i].n;
        ttft += reqs[i].t_first - reqs[i].t_submit;
        ttfts[i] = reqs[i].t_first - reqs[i].t_submit;
        for (uint32_t k = 0; k + 1 < reqs[i].n && k < tg; k++) gaps[n_gaps++] = reqs[i].gaps[k];
        if (reqs[i].n > 1) {
            itl += (reqs[i].t_last - reqs[i].t_first) / (reqs[i].n - 1);
            n_itl++;
        }
    }
    out->tps = gen * 1e3 / wall;
    out->ttft_ms = conc ? ttft / conc : 0;
    out->itl_ms = n_itl ? itl / n_itl : 0;
    out->ttft_p50 = pct(ttfts, conc, 50);
    out->ttft_p99 = pct(ttfts, conc, 99);
    out->itl_p50 = pct(gaps, n_gaps, 50);
    out->itl_p90 = pct(gaps, n_gaps, 90);
    out->itl_p99 = pct(gaps, n_gaps, 99);
    out->itl_max = n_gaps ? gaps[n_gaps - 1] : 0;  /* sorted by pct() */
    uint64_t steps = s1.steps - s0.steps;
    out->tok_per_step = steps ? (double)(s1.step_tokens - s0.step_tokens) / (double)steps : 0;
    free(reqs);
    free(prompt);
    free(gaps);
    free(ttfts);
    return rc;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int weft_bench_conc_measure(const struct cli_opts *o, const struct weft_model *m, const int *levels, int n_levels,
                       int pp, int tg, int reps, const char *tag, struct bench_conc_level *out)
{
    int max_c = 1;
    for (int i = 0; i < n_levels; i++) if (levels[i] > max_c) max_c = levels[i];
    if (pp < 1 || tg < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "weft bench: concurrency levels need -p and -n of at least 1, -r in 1..100\n");
        return 2;
    }
    const char *sep = tag ? ": " : "";
    if (!tag) tag = "";
    struct weft_engine_config cfg = {.n_ctx = (uint32_t)(pp + tg + 1), .max_seqs = (uint32_t)max_c,
                                     .max_step_tokens = o->batch ? (uint32_t)o->batch : 512,
                                     .max_waiting = (uint32_t)max_c + 16};
    if (cfg.max_step_tokens < cfg.max_seqs) cfg.max_step_tokens = cfg.max_seqs;
    struct weft_engine *e;
    if (weft_engine_create(m, &cfg, &e) != WEFT_OK) { weft_cli_fail("cannot create the engine"); return 1; }
    if (weft_engine_start(e) != WEFT_OK) { weft_cli_fail("cannot start the engine"); weft_engine_free(e); return 1; }
    int rc = 0;
    /* one warm-up per level, then the runs interleaved across levels (run i
     * of every level before run i + 1 of any), so that a busy spell of a
     * shared machine falls on all levels alike rather than on one */
    struct level_result (*r)[100] = calloc((size_t)n_levels, sizeof *r);
    if (!r) { weft_cli_fail("out of memory"); weft_engine_free(e); return 1; }
    for (int l = 0; l < n_levels && rc == 0; l++) {
        struct level_result warm;
        weft_cli_progress("%s%sconcurrency %d: warm-up", tag, sep, levels[l]);
        if (levels[l] > 0 && run_level(e, m, (uint32_t)levels[l], (uint32_t)pp, (uint32_t)tg, 0x1234 + levels[l], &warm))
            rc = 1;
    }
    for (int i = 0; i < reps && rc == 0; i++)
        for (int l = 0; l < n_levels && rc == 0; l++) {
            if (levels[l] <= 0) continue;
            weft_cli_progress("%s%srun %d/%d, concurrency %d", tag, sep, i + 1, reps, levels[l]);
            if (run_level(e, m, (uint32_t)levels[l], (uint32_t)pp, (uint32_t)tg, 0x9e3779b9ull * (i + 1) + levels[l],
                          &r[l][i]))
                rc = 1;
        }
    weft_cli_progress_clear();
    for (int l = 0; l < n_levels && rc == 0; l++) {
        struct bench_conc_level *q = &out[l];
        memset(q, 0, sizeof *q);
        if (levels[l] <= 0) continue;
        q->concurrency = levels[l];
        double tps[100], ttft[100], itl[100], tps_sum = 0, tps_sd = 0;
        double v[6][100];  /* TTFT p50, p99; ITL p50, p90, p99, max */
        for (int i = 0; i < reps; i++) {
            const struct level_result *x = &r[l][i];
            tps[i] = x->tps;
            ttft[i] = x->ttft_ms;
            itl[i] = x->itl_ms;
            tps_sum += x->tps;
            double w[6] = {x->ttft_p50, x->ttft_p99, x->itl_p50, x->itl_p90, x->itl_p99, x->itl_max};
            for (int k = 0; k < 6; k++) v[k][i] = w[k];
        }
        double mean = tps_sum / reps;
        for (int i = 0; i < reps; i++) tps_sd += (r[l][i].tps - mean) * (r[l][i].tps - mean);
        q->gen_tps = median(tps, reps);
        q->gen_tps_mean = mean;
        q->gen_tps_sd = reps > 1 ? sqrt(tps_sd / (reps - 1)) : 0;
        q->ttft_ms = median(ttft, reps);
        q->itl_ms = median(itl, reps);
        q->decode_tps = q->itl_ms > 0 ? levels[l] * 1e3 / q->itl_ms : 0;  /* C streams, one token per ITL each */
        q->tok_per_step = r[l][reps / 2].tok_per_step;
        double *dst[6] = {&q->ttft_p50, &q->ttft_p99, &q->itl_p50, &q->itl_p90, &q->itl_p99, &q->itl_max};
        for (int k = 0; k < 6; k++) *dst[k] = median(v[k], reps);
    }
    free(r);
    weft_engine_free(e);
    return rc;
}

/* The rows of `weft bench --concurrency` (markdown, or appended to results),
 * with both rates against concurrency 1's when 1 is among the levels. */
static void print_levels(const struct cli_opts *o, const struct bench_conc_level *lv, int n, json_t *results)
{
    double base_tps = 0, base_dec = 0; /* concurrency 1's medians, for the ratios */
    for (int l = 0; l < n; l++)
        if (lv[l].concurrency == 1) { base_tps = lv[l].gen_tps; base_dec = lv[l].decode_tps; }
    for (int l = 0; l < n; l++) {
        const struct bench_conc_level *q = &lv[l];
        uint32_t c = (uint32_t)q->concurrency;
        if (c == 0) continue;
        double x_gen = base_tps > 0 ? q->gen_tps / base_tps : 0, x_dec = base_dec > 0 ? q->decode_tps / base_dec : 0;
        if (o->json) {
            /* the ratios are null without a concurrency-1 level */
            json_array_append_new(
                results, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:o,s:o,s:{s:f,s:f},s:{s:f,s:f,s:f,s:f}}",
                                   "concurrency", (int)c, "gen_tps_median", q->gen_tps, "gen_tps_mean", q->gen_tps_mean,
                                   "gen_tps_sd", q->gen_tps_sd, "ttft_ms_median", q->ttft_ms, "itl_ms_median",
                                   q->itl_ms, "decode_tps", q->decode_tps, "tokens_per_step", q->tok_per_step,
                                   "gen_vs_c1", base_tps > 0 ? json_real(x_gen) : json_null(),
                                   "decode_vs_c1", base_dec > 0 ? json_real(x_dec) : json_null(),
                                   "ttft_ms", "p50", q->ttft_p50, "p99", q->ttft_p99,
                                   "itl_ms", "p50", q->itl_p50, "p90", q->itl_p90, "p99", q->itl_p99, "max", q->itl_max));
        } else {
            char xg[16] = "-", xd[16] = "-";
            if (base_tps > 0) snprintf(xg, sizeof xg, "%.2fx", x_gen);
            if (base_dec > 0) snprintf(xd, sizeof xd, "%.2fx", x_dec);
            char tt[32], il[40];
            snprintf(tt, sizeof tt, "%.0f / %.0f", q->ttft_p50, q->ttft_p99);
            snprintf(il, sizeof il, "%.1f / %.1f / %.1f", q->itl_p50, q->itl_p90, q->itl_p99);
            printf("| %11u | %15.1f | %8.1f ± %7.1f | %15s | %24s | %8.1f | %12.1f | %11.1f | %8s | %8s |\n", c,
                   q->gen_tps, q->gen_tps_mean, q->gen_tps_sd, tt, il, q->itl_max, q->decode_tps, q->tok_per_step, xg,
                   xd);
            fflush(stdout);
        }
    }
}

int weft_bench_concurrency(const struct cli_opts *o, const struct weft_model *m, const int *levels, int n_levels,
                      int pp, int tg, int reps, int threads)
{
    if (pp < 1 || tg < 1) {
        fprintf(stderr, "weft bench: --concurrency needs -p and -n of at least 1\n");
        return 2;
    }
    const char *name = "";
    weft_gguf_get_str(weft_model_gguf(m), "general.name", &name, NULL);
    if (!o->json) {
        printf("model: %s (%s), device %s, %d threads; %d-token prompts, %d new tokens each, %d runs per level\n\n",
               name, weft_type_name(weft_model_ftype(m)), o->device, threads, pp, tg, reps);
        printf("| %11s | %15s | %18s | %15s | %24s | %8s | %12s | %11s | %8s | %8s |\n", "concurrency",
               "gen t/s median", "gen t/s mean ± sd", "TTFT p50/p99 ms", "ITL p50/p90/p99 ms", "ITL max",
               "decode t/s", "tok/step", "gen vs 1", "dec vs 1");
        printf("|-------------|-----------------|--------------------|-----------------|--------------------------|"
               "----------|--------------|-------------|----------|----------|\n");
        fflush(stdout);
    }
    struct bench_conc_level *lv = calloc((size_t)n_levels, sizeof *lv);
    if (!lv) { weft_cli_fail("out of memory"); return 1; }
    int rc = weft_bench_conc_measure(o, m, levels, n_levels, pp, tg, reps, NULL, lv);
    if (rc == 0) {
        json_t *results = json_array();
        print_levels(o, lv, n_levels, results);
        if (o->json) {
            json_t *root = json_pack("{s:s,s:s,s:i,s:i,s:i,s:o}", "model", name, "type", weft_type_name(weft_model_ftype(m)),
                                     "threads", threads, "prompt_tokens", pp, "new_tokens", tg, "results", results);
            char *str = json_dumps(root, JSON_REAL_PRECISION(6));
            if (str) puts(str);
            free(str);
            json_decref(root);
        } else {
            json_decref(results);
        }
    }
    free(lv);
    return rc;
}
