/* The worker pool. A job is split into nparts parts (fn(ctx, part, nparts));
 * every thread, the caller included, claims parts one at a time from one
 * atomic word until none is left, and the caller returns once every part has
 * finished. Nobody waits for a thread to show up: a worker the OS has not
 * scheduled yet (a busy machine, more threads than free cores) simply finds
 * the job done and its parts run by the others, instead of stalling every
 * op for a scheduler time slice.
 *
 * The word: generation (32 bits) | nparts (16) | next part (16). A claim is
 * a CAS that only succeeds for the current generation, so a late worker can
 * never take a part of a later job by mistake; after a successful claim the
 * job's fn and ctx are stable (the caller cannot finish the job, let alone
 * publish the next one, before that part is done). */
#include "backends/cpu/cpu_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_PAUSES 4096   /* a waiting worker's pauses before it starts yielding */
#define SPIN_YIELDS 256    /* then its yields before it sleeps (~ms on an idle machine) */
#define WAIT_PAUSES 256    /* the caller's pauses before it yields, waiting for parts in flight */
#define MAX_PARTS 0xFFFF

struct weft_cpu_pool {
    int n;                      /* threads including the caller */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t state;     /* gen << 32 | nparts << 16 | next */
    atomic_int done;            /* parts of the current job finished */
    atomic_int sleepers;        /* workers asleep (or about to be) on cv */
    atomic_bool stop;
    uint32_t gen;               /* the caller's copy of the current generation */
    weft_cpu_job_fn fn;         /* the current job; written before its state is published */
    void *ctx;
};

struct worker_arg { struct weft_cpu_pool *p; int ith; };

static inline uint32_t gen_of(uint64_t s) { return (uint32_t)(s >> 32); }

/* Take the next part of job `gen`; false when it has none left (or is over). */
static bool claim(struct weft_cpu_pool *p, uint32_t gen, int *part, int *nparts)
{
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        int np = (int)((s >> 16) & 0xFFFF), next = (int)(s & 0xFFFF);
        if (gen_of(s) != gen || next >= np) return false;
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *part = next;
            *nparts = np;
            return true;
        }
    }
}

static void run_parts(struct weft_cpu_pool *p, uint32_t gen)
{
    int part, np;
    while (claim(p, gen, &part, &np)) {
        p->fn(p->ctx, part, np);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *worker_main(void *arg)
{
    struct worker_arg wa = *(struct worker_arg *)arg;
    free(arg);
    struct weft_cpu_pool *p = wa.p;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = gen_of(atomic_load_explicit(&p->state, memory_order_acquire))) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            if (++spins < SPIN_PAUSES) { cpu_relax(); continue; }
            if (spins < SPIN_PAUSES + SPIN_YIELDS) { sched_yield(); continue; }
            /* sleepers before the state re-check, the caller publishes the
             * state before reading sleepers (both seq_cst): one of the two
             * sees the other, so no wake-up is lost */
            atomic_fetch_add(&p->sleepers, 1);
            pthread_mutex_lock(&p->mu);
            while (gen_of(atomic_load(&p->state)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_parts(p, g);
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

void weft_cpu_pool_run_parts(struct weft_cpu_pool *p, weft_cpu_job_fn fn, void *ctx, int nparts)
{
    if (nparts > MAX_PARTS) nparts = MAX_PARTS;
    if (p->n == 1 || nparts <= 1) {
        for (int i = 0; i < nparts; i++) fn(ctx, i, nparts);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint32_t gen = ++p->gen;
    atomic_store(&p->state, (uint64_t)gen << 32 | (uint64_t)nparts << 16);  /* seq_cst: see worker_main */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_parts(p, gen);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < nparts; spins++) {
        if (spins < WAIT_PAUSES) cpu_relax();
        else sched_yield();
    }
}

void weft_cpu_pool_run(struct weft_cpu_pool *p, weft_cpu_job_fn fn, void *ctx)
{
    weft_cpu_pool_run_parts(p, fn, ctx, p->n);
}
