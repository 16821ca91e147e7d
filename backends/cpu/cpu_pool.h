/* A persistent worker pool: pool_run() splits one parallel loop over the
 * calling thread and n-1 workers that wait between jobs (spinning briefly,
 * then sleeping), so an op costs no thread creation. */
#ifndef WEFT_CPU_POOL_H
#define WEFT_CPU_POOL_H

#include "core/status.h"

struct weft_cpu_pool;

/* fn(ctx, ith, nth): the body of one job for thread ith of nth. */
typedef void (*weft_cpu_job_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (1 = no workers). *out NULL on failure. */
weft_status weft_cpu_pool_init(int n_threads, struct weft_cpu_pool **out);
void weft_cpu_pool_free(struct weft_cpu_pool *p);
int weft_cpu_pool_threads(const struct weft_cpu_pool *p);
/* Run fn on every thread and return when all have finished. */
void weft_cpu_pool_run(struct weft_cpu_pool *p, weft_cpu_job_fn fn, void *ctx);

#endif
