/* The worker pool (workers.h): a mutex-protected FIFO of jobs, n threads
 * waiting on a condition variable, and a second list of finished jobs that
 * a uv_async hands back to the loop thread. */
#include "server/workers.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WORKER_NICE 5

struct job {
    weft_work_fn work;
    weft_work_done_fn done;
    void *arg;
    struct job *next;
};

struct weft_workers {
    uv_async_t async;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, *tail;      /* to run */
    struct job *done_head, *done_tail;
    pthread_t *threads;
    uint32_t n_threads, max_jobs;
    uint32_t pending;             /* submitted, done callback not yet run (loop thread) */
    bool stop;
};

static void *worker_main(void *arg)
{
    struct weft_workers *w = arg;
#ifdef SYS_gettid
    /* below the loop thread: where they share a core, the loop's short
     * answers (health checks, streams) go before a long tokenization. Linux
     * nice values are per thread; failing to lower one's own is harmless */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE);
#endif
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        struct job *j = w->head;
        if (!j) break;  /* stopping and nothing left to run */
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        j->work(j->arg);
        pthread_mutex_lock(&w->mu);
        j->next = NULL;
        if (w->done_tail) w->done_tail->next = j;
        else w->done_head = j;
        w->done_tail = j;
        if (!w->stop) uv_async_send(&w->async);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Loop thread: the done callbacks of finished jobs, in order. */
static void deliver(struct weft_workers *w)
{
    pthread_mutex_lock(&w->mu);
    struct job *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    while (j) {
        struct job *next = j->next;
        w->pending--;
        j->done(j->arg);
        free(j);
        j = next;
    }
}

static void on_async(uv_async_t *a) { deliver(a->data); }

weft_status weft_workers_create(uv_loop_t *loop, uint32_t n_threads, uint32_t max_jobs, struct weft_workers **out)
{
    *out = NULL;
    struct weft_workers *w = calloc(1, sizeof *w);
    if (!w) return weft_error(WEFT_ERR_NOMEM, "workers: out of memory");
    w->n_threads = n_threads ? n_threads : 2;
    w->max_jobs = max_jobs ? max_jobs : 64;
    w->threads = calloc(w->n_threads, sizeof *w->threads);
    if (!w->threads) {
        free(w);
        return weft_error(WEFT_ERR_NOMEM, "workers: out of memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    uv_async_init(loop, &w->async, on_async);
    w->async.data = w;
    for (uint32_t i = 0; i < w->n_threads; i++)
        if (pthread_create(&w->threads[i], NULL, worker_main, w) != 0) {
            w->n_threads = i;
            weft_workers_free(w);
            return weft_error(WEFT_ERR_NOMEM, "workers: cannot start a thread");
        }
    *out = w;
    return WEFT_OK;
}

weft_status weft_workers_submit(struct weft_workers *w, weft_work_fn work, weft_work_done_fn done, void *arg)
{
    if (w->pending >= w->max_jobs)
        return weft_error(WEFT_ERR_BUSY, "%u requests are already being prepared (tokenized); try again shortly",
                          w->pending);
    struct job *j = calloc(1, sizeof *j);
    if (!j) return weft_error(WEFT_ERR_NOMEM, "workers: out of memory");
    j->work = work;
    j->done = done;
    j->arg = arg;
    w->pending++;
    pthread_mutex_lock(&w->mu);
    if (w->tail) w->tail->next = j;
    else w->head = j;
    w->tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return WEFT_OK;
}

uint32_t weft_workers_pending(const struct weft_workers *w) { return w ? w->pending : 0; }
uint32_t weft_workers_max_jobs(const struct weft_workers *w) { return w ? w->max_jobs : 0; }

static void on_closed(uv_handle_t *h)
{
    struct weft_workers *w = h->data;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->threads);
    free(w);
}

void weft_workers_free(struct weft_workers *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (uint32_t i = 0; i < w->n_threads; i++) pthread_join(w->threads[i], NULL);
    deliver(w);
    uv_close((uv_handle_t *)&w->async, on_closed);
}
