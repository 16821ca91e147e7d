/* `weft bench --concurrency`: aggregate throughput of the engine. */
#ifndef WEFT_BENCH_CONC_H
#define WEFT_BENCH_CONC_H

#include "core/model.h"
#include "tools/cli_common.h"

/* One concurrency level over the runs: medians (gen t/s also mean ± sd). */
struct bench_conc_level {
    int concurrency;                  /* 0: a 0 in the list, not run */
    double gen_tps, gen_tps_mean, gen_tps_sd;  /* all generated tokens / wall time */
    double ttft_ms, itl_ms;           /* the runs' mean TTFT and ITL */
    double decode_tps, tok_per_step;  /* C x 1000 / ITL; engine tokens per step */
    double ttft_p50, ttft_p99, itl_p50, itl_p90, itl_p99, itl_max;
};

/* Run the levels on an engine over m (one warm-up each, then `reps` runs
 * interleaved across levels), with a status line on stderr ("[TAG: ]run 2/5,
 * concurrency 8"; TAG may be NULL). Fills out[0..n_levels). Returns 0, 1 on
 * a runtime failure, 2 when pp, tg or reps are out of range (printed). */
int weft_bench_conc_measure(const struct cli_opts *o, const struct weft_model *m, const int *levels, int n_levels,
                       int pp, int tg, int reps, const char *tag, struct bench_conc_level *out);

/* The whole mode: a markdown table, or one JSON object with --json. */
int weft_bench_concurrency(const struct cli_opts *o, const struct weft_model *m, const int *levels, int n_levels,
                      int pp, int tg, int reps, int threads);

#endif
