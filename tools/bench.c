/* `weft bench`: prompt-processing and generation throughput, like
 * llama-bench, plus the memory bandwidth those numbers imply.
 *
 *   weft bench [-m MODEL] [-p 128,512] [-n 64] [-r 5] [-t THREADS] [--json]
 *   weft bench --membw [-t THREADS]
 *   weft bench --concurrency 1,8,32 [-p 128] [-n 64] [-r 5]   (see bench_conc.c)
 *
 * pp N: evaluate N prompt tokens from an empty context (in batches of -b).
 * tg N: evaluate N tokens one at a time from an empty context.
 * Each test runs once to warm up, then -r times; mean ± stdev and median of
 * tokens/s are reported. Bandwidth: bytes of weights one decode step reads
 * (every matmul weight and the output head) × tg tokens/s, and its ratio to
 * the read bandwidth --membw measures (a multi-threaded streaming read of a
 * buffer much larger than the caches). */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session.h"
#include "tools/bench_conc.h"
#include "tools/cli.h"
#include "tools/cli_common.h"

/* ---- memory read bandwidth ---- */

struct membw_arg { const uint64_t *p; size_t n; uint64_t sum; };

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a0);
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += p[i];
    return s;
}
#endif

static uint64_t sum_plain(const uint64_t *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) { s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3]; }
    for (; i < n; i++) s0 += p[i];
    return s0 + s1 + s2 + s3;
}

static void *membw_thread(void *v)
{
    struct membw_arg *a = v;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) { a->sum = sum_avx2(a->p, a->n); return NULL; }
#endif
    a->sum = sum_plain(a->p, a->n);
    return NULL;
}

/* Median GB/s of `reps` passes over a 1 GiB buffer read by n_threads. */
static double measure_membw(int n_threads, int reps, double *best)
{
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;  /* touch every page */
    double v[32];
    if (reps > 32) reps = 32;
    struct membw_arg args[256];
    pthread_t tid[256];
    if (n_threads > 256) n_threads = 256;
    uint64_t total = 0;
    *best = 0;
    for (int r = 0; r < reps; r++) {
        size_t per = (n / n_threads) & ~(size_t)15;
        double t0 = cli_now_ms();
        for (int t = 0; t < n_threads; t++) {
            args[t] = (struct membw_arg){buf + per * t, t == n_threads - 1 ? n - per * t : per, 0};
            pthread_create(&tid[t], NULL, membw_thread, &args[t]);
        }
        for (int t = 0; t < n_threads; t++) { pthread_join(tid[t], NULL); total += args[t].sum; }
        double ms = cli_now_ms() - t0;
        v[r] = bytes / (ms * 1e6);
        if (v[r] > *best) *best = v[r];
    }
    free(buf);
    for (int i = 1; i < reps; i++)  /* insertion sort for the median */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    if (total == 42) fprintf(stderr, " ");  /* keep the sums observable */
    return reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
}

/* ---- model throughput ---- */

struct stats { double mean, sd, median; };

static struct stats summarize(double *v, int n)
{
    struct stats s = {0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return s;
}

/* Bytes a decode step reads from weights: every matmul weight and the head. */
static double weight_bytes_per_token(const struct weft_model *m)
{
    double b = (double)m->output.ne1 * m->output.nb1;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const struct weft_layer_weights *L = &m->layers[l];
        const struct weft_view *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) b += (double)w[i]->ne1 * w[i]->nb1;
    }
    return b;
}

/* tokens/s of one test: pp (n tokens at once) or tg (n tokens one by one). */
static int run_test(struct weft_session *s, const int32_t *toks, int n, bool tg, double *tps)
{
    const float *lg;
    weft_session_reset(s);
    double t0 = cli_now_ms();
    if (tg) {
        for (int i = 0; i < n; i++)
            if (weft_session_eval(s, &toks[i], 1, &lg) != WEFT_OK) return -1;
    } else if (weft_session_eval(s, toks, (size_t)n, &lg) != WEFT_OK) {
        return -1;
    }
    *tps = n * 1e3 / (cli_now_ms() - t0);
    return 0;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 20) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int weft_cmd_bench(int argc, char **argv)
{
    struct cli_opts o;
    cli_opts_default(&o);
    int pp[16] = {128, 512}, n_pp = 2, tg[16] = {64}, n_tg = 1, reps = 5;
    int conc[16], n_conc = 0;
    bool membw_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--membw")) { membw_only = true; continue; }
        if (!strcmp(a, "--concurrency") && i + 1 < argc) {
            if ((n_conc = parse_list(argv[++i], conc, 16)) <= 0) {
                fprintf(stderr, "weft bench: bad value for --concurrency: '%s'\n", argv[i]);
                return 2;
            }
            continue;
        }
        if ((!strcmp(a, "-p") || !strcmp(a, "-n") || !strcmp(a, "-r")) && i + 1 < argc) {
            const char *v = argv[++i];
            int r = !strcmp(a, "-p") ? (n_pp = parse_list(v, pp, 16)) : !strcmp(a, "-n") ? (n_tg = parse_list(v, tg, 16))
                                                                        : (reps = atoi(v));
            if (r < 0 || reps < 1 || reps > 100) { fprintf(stderr, "weft bench: bad value for %s: '%s'\n", a, v); return 2; }
            continue;
        }
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            bool help = !strcmp(a, "-h") || !strcmp(a, "--help");
            if (!help) {
                cli_unknown_option("bench", a, i + 1 == argc);
                return 2;
            }
            printf("usage: weft bench [-m MODEL] [-p 128,512] [-n 64] [-r 5] [-t THREADS] [-b BATCH] [--json]\n"
                   "       weft bench --membw [-t THREADS]\n"
                   "       weft bench --concurrency 1,8,32 [-m MODEL] [-p 128] [-n 64] [-r 5] [-t THREADS] [--json]\n"
                   "  result lines are printed (and flushed) as each test ends; on a terminal a status line\n"
                   "  on stderr shows the test and run in progress\n");
            return 0;
        }
    }
    int threads = o.n_threads;
    if (threads <= 0) {
        struct weft_device_info info;
        const struct weft_backend_iface *cpu = weft_backend_find("cpu");
        threads = cpu && cpu->devices(&info, 1, NULL) == 1 ? (int)info.n_threads : 1;
    }
    if (n_conc) {
        struct weft_backend *be;
        struct weft_model *m;
        if (cli_open(&o, &be, &m)) return 1;
        int rc = bench_concurrency(&o, m, conc, n_conc, pp[0], tg[0], reps, threads);
        cli_close(be, m);
        return rc;
    }
    cli_progress("measuring the memory read bandwidth (%d threads)...", threads);
    double bw_best = 0, bw = measure_membw(threads, membw_only ? 7 : 3, &bw_best);
    cli_progress_clear();
    if (membw_only) {
        if (o.json) printf("{\"membw_gbs\": %.2f, \"membw_best_gbs\": %.2f, \"threads\": %d}\n", bw, bw_best, threads);
        else printf("memory read bandwidth: %.1f GB/s median, %.1f GB/s best (%d threads, 1 GiB buffer)\n", bw, bw_best, threads);
        return 0;
    }
    struct weft_backend *be;
    struct weft_model *m;
    cli_progress("loading the model...");
    if (cli_open(&o, &be, &m)) return 1;
    cli_progress_clear();
    int max_n = 0;
    for (int i = 0; i < n_pp; i++) if (pp[i] > max_n) max_n = pp[i];
    for (int i = 0; i < n_tg; i++) if (tg[i] > max_n) max_n = tg[i];
    int rc = 1;
    json_t *results = NULL;
    struct weft_session *s = NULL;
    int32_t *toks = malloc(sizeof(int32_t) * (max_n + 1));
    if (!toks || weft_session_init(m, (uint32_t)max_n + 1, o.batch ? (uint32_t)o.batch : 512, &s) != WEFT_OK) {
        cli_fail("cannot create session");
        goto out;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;  /* fixed pseudo-random ids, as llama-bench */
    for (int i = 0; i <= max_n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        toks[i] = (int32_t)(x % m->hp.n_vocab);
    }
    const char *name = "";
    weft_gguf_get_str(m->gguf, "general.name", &name, NULL);
    double wbytes = weight_bytes_per_token(m);
    results = json_array();
    if (!o.json) {
        printf("model: %s (%s, %.1f MiB of weights read per token), device %s, %d threads\n", name,
               weft_type_name(m->ftype), wbytes / 1048576.0, o.device, threads);
        printf("memory read bandwidth: %.1f GB/s (median of 3)\n\n", bw);
        printf("| %-6s | %12s | %15s | %9s | %14s |\n", "test", "t/s median", "t/s mean ± sd", "GB/s", "of membw");
        printf("|--------|--------------|-----------------|-----------|----------------|\n");
        fflush(stdout);
    }
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass ? n_tg : n_pp;
        for (int i = 0; i < cnt; i++) {
            int n = pass ? tg[i] : pp[i];
            if (n == 0) continue;
            double v[100], warm;
            cli_progress("%s%d: warm-up", pass ? "tg" : "pp", n);
            if (run_test(s, toks, n, pass, &warm)) { cli_progress_clear(); cli_fail("benchmark run failed"); goto out; }
            for (int r = 0; r < reps; r++) {
                cli_progress("%s%d: run %d/%d (last %.1f t/s)", pass ? "tg" : "pp", n, r + 1, reps, r ? v[r - 1] : warm);
                if (run_test(s, toks, n, pass, &v[r])) { cli_progress_clear(); cli_fail("benchmark run failed"); goto out; }
            }
            cli_progress_clear();
            struct stats st = summarize(v, reps);
            char test[32];
            snprintf(test, sizeof test, "%s%d", pass ? "tg" : "pp", n);
            double gbs = pass ? wbytes * st.median / 1e9 : 0;
            if (o.json) {
                json_t *e = json_pack("{s:s,s:i,s:f,s:f,s:f}", "test", test, "n", n, "tps_median", st.median,
                                      "tps_mean", st.mean, "tps_sd", st.sd);
                if (pass) {
                    json_object_set_new(e, "weight_gbs", json_real(gbs));
                    json_object_set_new(e, "membw_ratio", json_real(bw > 0 ? gbs / bw : 0));
                }
                json_array_append_new(results, e);
            } else if (pass) {
                printf("| %-6s | %12.1f | %7.1f ± %5.1f | %9.1f | %13.0f%% |\n", test, st.median, st.mean, st.sd, gbs,
                       bw > 0 ? 100 * gbs / bw : 0);
            } else {
                printf("| %-6s | %12.1f | %7.1f ± %5.1f | %9s | %14s |\n", test, st.median, st.mean, st.sd, "", "");
            }
            fflush(stdout);
        }
    }
    if (o.json) {
        json_t *root = json_pack("{s:s,s:s,s:f,s:i,s:f,s:o}", "model", name, "type", weft_type_name(m->ftype),
                                 "weight_bytes_per_token", wbytes, "threads", threads, "membw_gbs", bw,
                                 "results", results);
        results = NULL;
        char *str = json_dumps(root, JSON_REAL_PRECISION(6));
        if (str) puts(str);
        free(str);
        json_decref(root);
    }
    rc = 0;
out:
    json_decref(results);
    free(toks);
    weft_session_free(s);
    cli_close(be, m);
    return rc;
}
