/* A persistent worker pool: pool_run() splits one parallel loop into parts
 * that the calling thread and n-1 workers claim (workers wait between jobs
 * spinning briefly, then sleeping), so an op costs no thread creation and
 * never waits for a thread that has not been scheduled. */
#ifndef WEFT_CPU_POOL_H
#define WEFT_CPU_POOL_H

#include "base/status.h"

struct weft_cpu_pool;

/* fn(ctx, part, nparts): the body of one part of a job. Each part runs once,
 * on whichever thread claims it (parts may run concurrently); `part` is not a
 * thread id, but per-part scratch indexed by it is private to that call. */
typedef void (*weft_cpu_job_fn)(void *ctx, int part, int nparts);

/* n_threads >= 1 (1 = no workers). *out NULL on failure. */
weft_status weft_cpu_pool_init(int n_threads, struct weft_cpu_pool **out);
void weft_cpu_pool_free(struct weft_cpu_pool *p);
int weft_cpu_pool_threads(const struct weft_cpu_pool *p);
/* Run fn as nparts parts (at most 65535; 1: inline on the caller, no
 * synchronisation) and return when all have finished. */
void weft_cpu_pool_run_parts(struct weft_cpu_pool *p, weft_cpu_job_fn fn, void *ctx, int nparts);
/* The same with one part per thread. */
void weft_cpu_pool_run(struct weft_cpu_pool *p, weft_cpu_job_fn fn, void *ctx);

#endif
