/* A small pool of worker threads for request preparation that must not run
 * on the libuv loop thread: tokenization and chat rendering (`weft serve`,
 * and the router after it).
 *
 * Jobs run in submission order on the workers; each job's done callback
 * runs afterwards on the loop thread (through a uv_async). The number of
 * jobs queued or running is bounded: past it, submit refuses at once, so a
 * flood of expensive requests is answered 503 instead of piling up. */
#ifndef WEFT_SERVER_WORKERS_H
#define WEFT_SERVER_WORKERS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/status.h"

struct weft_workers;

typedef void (*weft_work_fn)(void *arg);       /* on a worker thread */
typedef void (*weft_work_done_fn)(void *arg);  /* on the loop thread, after work */

/* n_threads workers (0: 2), at most max_jobs queued or running (0: 64).
 * Call on the loop thread; *out is NULL on failure (WEFT_ERR_NOMEM, also when a thread
 * cannot be started). */
weft_status weft_workers_create(uv_loop_t *loop, uint32_t n_threads, uint32_t max_jobs, struct weft_workers **out);

/* Queue work(arg), then done(arg) on the loop thread. WEFT_ERR_BUSY when
 * max_jobs are queued or running (nothing is queued; done is never called).
 * Loop thread only. */
weft_status weft_workers_submit(struct weft_workers *w, weft_work_fn work, weft_work_done_fn done, void *arg);

/* Jobs queued or running (their done callback not yet run). */
uint32_t weft_workers_pending(const struct weft_workers *w);
uint32_t weft_workers_max_jobs(const struct weft_workers *w);

/* Runs what is queued, joins the threads, runs the done callbacks still
 * due (on this, the loop thread), and closes the async handle: keep running
 * the loop until it returns for the memory to be released. */
void weft_workers_free(struct weft_workers *w);

#endif
