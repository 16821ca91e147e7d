/* What the `weft bench` modes share: the memory read bandwidth, the weight
 * bytes a decode step reads, and the batch-1 pp / tg tests (bench.c, the
 * per-device comparison in bench_devices.c). */
#ifndef WEFT_BENCH_COMMON_H
#define WEFT_BENCH_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"
#include "core/session.h"

struct bench_stats { double mean, sd, median; };

/* Median GB/s of `reps` passes over a 1 GiB buffer read by n_threads (*best:
 * the fastest pass). 0 when the buffer cannot be allocated. */
double weft_bench_membw(int n_threads, int reps, double *best);

/* mean, sample sd and median of v[0..n) (n >= 1; v is sorted here) */
struct bench_stats weft_bench_summarize(double *v, int n);

/* Bytes a decode step reads from weights: every matmul weight and the head. */
double weft_bench_weight_bytes_per_token(const struct weft_model *m);

/* "128,512" -> out[]; the count, or -1 on a malformed list or a value
 * outside 0..2^20. */
int weft_bench_parse_list(const char *s, int *out, int max);

/* A session for tests of up to max_n tokens (prompt batches of `batch`, 0:
 * 512) and max_n + 1 fixed pseudo-random token ids (as llama-bench). Returns
 * 0, or -1 with weft_last_error set (nothing to free then). */
int weft_bench_session_open(const struct weft_model *m, int max_n, int batch, struct weft_session **s, int32_t **toks);

/* tokens/s of one test: pp (n tokens at once) or tg (n tokens one by one). */
int weft_bench_run_once(struct weft_session *s, const int32_t *toks, int n, bool tg, double *tps);
/* The same after a context of `depth` tokens (toks[0..depth), computed untimed first; the test's
 * tokens follow them): llama-bench's -d. */
int weft_bench_run_once_at(struct weft_session *s, const int32_t *toks, int n, bool tg, int depth, double *tps);

/* One test, a warm-up then `reps` runs (reps <= 100), with a status line on
 * stderr ("[TAG: ]pp128: run 2/5"; TAG may be NULL). Returns 0, or -1 when a
 * run failed (weft_last_error says why). */
int weft_bench_run_test(struct weft_session *s, const int32_t *toks, int n, bool tg, int reps, const char *tag,
                   struct bench_stats *out);
/* The same at a depth: the context of `depth` tokens computed once (untimed), then the runs one
 * after another continuing it (toks must hold depth + reps · n ids) */
int weft_bench_run_test_at(struct weft_session *s, const int32_t *toks, int n, bool tg, int depth, int reps,
                           const char *tag, struct bench_stats *out);

#endif
