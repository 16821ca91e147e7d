/* `weft bench --concurrency`: aggregate throughput of the engine. */
#ifndef WEFT_BENCH_CONC_H
#define WEFT_BENCH_CONC_H

#include "core/model.h"
#include "tools/cli_common.h"

int bench_concurrency(const struct cli_opts *o, const struct weft_model *m, const int *levels, int n_levels,
                      int pp, int tg, int reps, int threads);

#endif
