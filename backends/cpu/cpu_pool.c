#include "backends/cpu/cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000

struct weft_cpu_pool {
    int n;                      /* threads including the caller */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;            /* bumped per job */
    atomic_int pending;         /* workers still running the current job */
    atomic_bool stop;
    weft_cpu_job_fn fn;
    void *ctx;
};

struct worker_arg { struct weft_cpu_pool *p; int ith; };

static void *worker_main(void *arg)
{
    struct worker_arg wa = *(struct worker_arg *)arg;
    free(arg);
    struct weft_cpu_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) { cpu_relax(); continue; }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, wa.ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

weft_status weft_cpu_pool_init(int n_threads, struct weft_cpu_pool **out)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    struct weft_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return weft_error(WEFT_ERR_NOMEM, "cpu: out of memory for thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->tids = calloc((size_t)n_threads, sizeof *p->tids);
    if (!p->tids) { weft_cpu_pool_free(p); return weft_error(WEFT_ERR_NOMEM, "cpu: out of memory"); }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->tids[i], NULL, worker_main, wa ? (wa->p = p, wa->ith = i, wa) : NULL) != 0) {
            free(wa);
            p->n = i;  /* only join the ones started */
            weft_cpu_pool_free(p);
            return weft_error(WEFT_ERR_NOMEM, "cpu: cannot start worker thread %d", i);
        }
    }
    *out = p;
    return WEFT_OK;
}

void weft_cpu_pool_free(struct weft_cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->tids[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->tids);
    free(p);
}

int weft_cpu_pool_threads(const struct weft_cpu_pool *p) { return p->n; }

void weft_cpu_pool_run(struct weft_cpu_pool *p, weft_cpu_job_fn fn, void *ctx)
{
    if (p->n == 1) { fn(ctx, 0, 1); return; }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) cpu_relax();
}
