/* The `weft bench` modes' shared measurements (see bench_common.h). */
#include "tools/bench_common.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

double weft_bench_membw(int n_threads, int reps, double *best)
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
        double t0 = weft_cli_now_ms();
        for (int t = 0; t < n_threads; t++) {
            args[t] = (struct membw_arg){buf + per * t, t == n_threads - 1 ? n - per * t : per, 0};
            pthread_create(&tid[t], NULL, membw_thread, &args[t]);
        }
        for (int t = 0; t < n_threads; t++) { pthread_join(tid[t], NULL); total += args[t].sum; }
        double ms = weft_cli_now_ms() - t0;
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

struct bench_stats weft_bench_summarize(double *v, int n)
{
    struct bench_stats s = {0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return s;
}

double weft_bench_weight_bytes_per_token(const struct weft_model *m)
{
    return (double)weft_model_bytes_per_token(m);
}

int weft_bench_parse_list(const char *s, int *out, int max)
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

int weft_bench_session_open(const struct weft_model *m, int max_n, int batch, struct weft_session **s, int32_t **toks)
{
    *s = NULL;
    *toks = malloc(sizeof(int32_t) * ((size_t)max_n + 1));
    if (!*toks) return weft_error(WEFT_ERR_NOMEM, "out of memory"), -1;
    if (weft_session_init(m, (uint32_t)max_n + 1, batch ? (uint32_t)batch : 512, s) != WEFT_OK) {
        free(*toks);
        *toks = NULL;
        *s = NULL;
        return -1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;  /* fixed pseudo-random ids, as llama-bench */
    for (int i = 0; i <= max_n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        (*toks)[i] = (int32_t)(x % weft_model_hparams(m)->n_vocab);
    }
    return 0;
}

int weft_bench_run_once(struct weft_session *s, const int32_t *toks, int n, bool tg, double *tps)
{
    return weft_bench_run_once_at(s, toks, n, tg, 0, tps);
}

int weft_bench_run_once_at(struct weft_session *s, const int32_t *toks, int n, bool tg, int depth, double *tps)
{
    const float *lg;
    weft_session_reset(s);
    /* the context before the test, untimed */
    if (depth > 0 && weft_session_eval(s, toks, (size_t)depth, &lg) != WEFT_OK) return -1;
    toks += depth;
    double t0 = weft_cli_now_ms();
    if (tg) {
        for (int i = 0; i < n; i++)
            if (weft_session_eval(s, &toks[i], 1, &lg) != WEFT_OK) return -1;
    } else if (weft_session_eval(s, toks, (size_t)n, &lg) != WEFT_OK) {
        return -1;
    }
    *tps = n * 1e3 / (weft_cli_now_ms() - t0);
    return 0;
}

int weft_bench_run_test(struct weft_session *s, const int32_t *toks, int n, bool tg, int reps, const char *tag,
                   struct bench_stats *out)
{
    return weft_bench_run_test_at(s, toks, n, tg, 0, reps, tag, out);
}

int weft_bench_run_test_at(struct weft_session *s, const int32_t *toks, int n, bool tg, int depth, int reps,
                           const char *tag, struct bench_stats *out)
{
    double v[100], warm = 0;
    const char *sep = tag ? ": " : "", *what = tg ? "tg" : "pp";
    if (reps > 100) reps = 100;
    if (!tag) tag = "";
    if (depth > 0) {
        /* the context once (untimed; it warms what a warm-up would), then each run continues
         * from where the last one ended: the depth grows by n a run (a context of 16k tokens
         * takes minutes to prefill on a CPU, and a hybrid's state cannot be rolled back) */
        weft_cli_progress("%s%s%s%d @ d%d: the context", tag, sep, what, n, depth);
        const float *lg;
        weft_session_reset(s);
        if (weft_session_eval(s, toks, (size_t)depth, &lg) != WEFT_OK) { weft_cli_progress_clear(); return -1; }
        const int32_t *t = toks + depth;
        for (int r = 0; r < reps; r++, t += n) {
            weft_cli_progress("%s%s%s%d @ d%d: run %d/%d (last %.1f t/s)", tag, sep, what, n, depth, r + 1, reps,
                              r ? v[r - 1] : 0.0);
            double t0 = weft_cli_now_ms();
            if (tg) {
                for (int i = 0; i < n; i++)
                    if (weft_session_eval(s, &t[i], 1, &lg) != WEFT_OK) { weft_cli_progress_clear(); return -1; }
            } else if (weft_session_eval(s, t, (size_t)n, &lg) != WEFT_OK) {
                weft_cli_progress_clear();
                return -1;
            }
            v[r] = n * 1e3 / (weft_cli_now_ms() - t0);
        }
        weft_cli_progress_clear();
        *out = weft_bench_summarize(v, reps);
        return 0;
    }
    weft_cli_progress("%s%s%s%d: warm-up", tag, sep, what, n);
    if (weft_bench_run_once(s, toks, n, tg, &warm)) { weft_cli_progress_clear(); return -1; }
    for (int r = 0; r < reps; r++) {
        weft_cli_progress("%s%s%s%d: run %d/%d (last %.1f t/s)", tag, sep, what, n, r + 1, reps, r ? v[r - 1] : warm);
        if (weft_bench_run_once(s, toks, n, tg, &v[r])) { weft_cli_progress_clear(); return -1; }
    }
    weft_cli_progress_clear();
    *out = weft_bench_summarize(v, reps);
    return 0;
}
