/* Remote KV fetches on a thread of their own, with deadlines (kv_fetch.h).
 *
 * A job is shared by the loop and the fetch thread: the thread owns it
 * while queued or running and hands it back through `finished` (an async
 * wakes the loop); the loop tells the request (go) once, at the job's end
 * or at its deadline (a timer), and frees the job once the thread is done
 * with it. */
#include "server/kv_fetch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_QUEUED 64
#define MIN_DEADLINE_S 0.02   /* a fetch is worth at least one round trip's wait */
#define MAX_DEADLINE_S 10.0

struct job {
    int32_t *prompt;
    uint32_t n;
    double deadline;
    void (*go)(void *user, bool fetched);
    void *user;
    bool told;            /* go has run (loop thread) */
    bool finished;        /* the thread is done with it (under mu) */
    struct job *next;     /* queue, then finished list (under mu) */
    struct job *lnext;    /* the loop's list of jobs not told yet */
};

struct kv_fetch {
    struct kv_remote *r;
    struct weft_engine *eng;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *q_head, *q_tail;    /* queued (under mu) */
    uint32_t q_len;
    struct job *running;            /* under mu */
    struct job *done;               /* finished, for the loop (under mu) */
    bool stop;
    struct job *waiting;            /* not told yet (loop thread) */
    uv_async_t async;
    uv_timer_t timer;
    int open_handles;
    bool closed;
    struct kv_fetch_stats st;       /* under mu */
};

static void *fetch_main(void *arg)
{
    struct kv_fetch *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->q_head && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop) break;
        struct job *j = f->q_head;
        f->q_head = j->next;
        if (!f->q_head) f->q_tail = NULL;
        f->q_len--;
        j->next = NULL;
        bool begin = weft_kv_remote_now() < j->deadline;
        if (begin) {
            f->running = j;
            pthread_mutex_unlock(&f->mu);
            weft_kv_remote_fetch(f->r, j->prompt, j->n, j->deadline);
            pthread_mutex_lock(&f->mu);
            f->running = NULL;
        } else {
            f->st.dropped++;  /* queued behind a stalled fetch until its request went on */
        }
        j->finished = true;
        j->next = f->done;
        f->done = j;
        if (!f->closed) uv_async_send(&f->async);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void job_free(struct job *j)
{
    free(j->prompt);
    free(j);
}

/* Take j off the loop's waiting list. */
static void unwait(struct kv_fetch *f, struct job *j)
{
    for (struct job **p = &f->waiting; *p; p = &(*p)->lnext)
        if (*p == j) {
            *p = j->lnext;
            j->lnext = NULL;
            return;
        }
}

static void arm(struct kv_fetch *f);

static void tell(struct kv_fetch *f, struct job *j, bool fetched)
{
    if (j->told) return;
    j->told = true;
    unwait(f, j);
    pthread_mutex_lock(&f->mu);
    if (fetched) f->st.in_time++;
    else f->st.late++;
    pthread_mutex_unlock(&f->mu);
    j->go(j->user, fetched);
}

static void on_async(uv_async_t *h)
{
    struct kv_fetch *f = h->data;
    pthread_mutex_lock(&f->mu);
    struct job *d = f->done;
    f->done = NULL;
    pthread_mutex_unlock(&f->mu);
    while (d) {
        struct job *next = d->next;
        tell(f, d, true);
        job_free(d);
        d = next;
    }
    arm(f);
}

/* Deadlines passed: those requests go on; their jobs stay the thread's. */
static void on_timer(uv_timer_t *h)
{
    struct kv_fetch *f = h->data;
    double now = weft_kv_remote_now();
    for (struct job *j = f->waiting, *next; j; j = next) {
        next = j->lnext;
        if (now >= j->deadline) tell(f, j, false);
    }
    arm(f);
}

/* The timer at the nearest deadline of a request still waiting. */
static void arm(struct kv_fetch *f)
{
    if (f->closed) return;
    double next = 0;
    for (struct job *j = f->waiting; j; j = j->lnext)
        if (!next || j->deadline < next) next = j->deadline;
    if (!next) {
        uv_timer_stop(&f->timer);
        return;
    }
    double ms = (next - weft_kv_remote_now()) * 1000.0;
    uv_timer_start(&f->timer, on_timer, ms > 0 ? (uint64_t)ms + 1 : 0, 0);
}

weft_status weft_kv_fetch_create(uv_loop_t *loop, struct kv_remote *r, struct weft_engine *eng, struct kv_fetch **out)
{
    *out = NULL;
    struct kv_fetch *f = calloc(1, sizeof *f);
    if (!f) return weft_error(WEFT_ERR_NOMEM, "kv fetch: out of memory");
    f->r = r;
    f->eng = eng;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    uv_async_init(loop, &f->async, on_async);
    f->async.data = f;
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    f->open_handles = 2;
    if (pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
        f->closed = true;  /* the handles are closed by weft_kv_fetch_close as usual; no thread to join */
        f->stop = true;
        *out = f;
        return weft_error(WEFT_ERR_NOMEM, "kv fetch: cannot start the fetch thread");
    }
    *out = f;
    return WEFT_OK;
}

bool weft_kv_fetch_start(struct kv_fetch *f, const int32_t *prompt, uint32_t n, void (*go)(void *user, bool fetched),
                         void *user)
{
    if (!f || f->closed) return false;
    uint32_t lacking = weft_kv_remote_lacking(f->r, prompt, n);
    if (!lacking) return false;
    /* the wait a fetch may cost: what computing those blocks would */
    struct weft_engine_stats es;
    weft_engine_stats(f->eng, &es);
    double wait = es.prefill_tps > 0 ? lacking * (double)WEFT_KV_BLOCK_TOKENS / es.prefill_tps
                                     : weft_kv_remote_timeout_s(f->r);
    if (wait < MIN_DEADLINE_S) wait = MIN_DEADLINE_S;
    if (wait > MAX_DEADLINE_S) wait = MAX_DEADLINE_S;
    struct job *j = calloc(1, sizeof *j);
    if (!j || !(j->prompt = malloc(sizeof *prompt * n))) {
        free(j);
        return false;
    }
    memcpy(j->prompt, prompt, sizeof *prompt * n);
    j->n = n;
    j->deadline = weft_kv_remote_now() + wait;
    j->go = go;
    j->user = user;
    pthread_mutex_lock(&f->mu);
    if (f->q_len >= MAX_QUEUED || f->stop) {
        f->st.queue_full++;
        pthread_mutex_unlock(&f->mu);
        job_free(j);
        return false;
    }
    if (f->q_tail) f->q_tail->next = j;
    else f->q_head = j;
    f->q_tail = j;
    f->q_len++;
    f->st.started++;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    j->lnext = f->waiting;
    f->waiting = j;
    arm(f);
    return true;
}

void weft_kv_fetch_stats(struct kv_fetch *f, struct kv_fetch_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    *out = f->st;
    out->stalled = f->running && weft_kv_remote_now() > f->running->deadline;
    pthread_mutex_unlock(&f->mu);
    struct weft_kv_remote_stats rs;
    weft_kv_remote_stats(f->r, &rs);
    out->stalled |= rs.stalled;
}

static void on_closed(uv_handle_t *h)
{
    struct kv_fetch *f = h->data;
    f->open_handles--;
}

void weft_kv_fetch_close(struct kv_fetch *f)
{
    if (!f || f->open_handles == 0 || uv_is_closing((uv_handle_t *)&f->async)) return;
    pthread_mutex_lock(&f->mu);
    f->closed = true;
    pthread_mutex_unlock(&f->mu);
    /* the requests still waiting go on now (they are being ended): each go() runs once */
    while (f->waiting) tell(f, f->waiting, false);
    uv_close((uv_handle_t *)&f->async, on_closed);
    uv_close((uv_handle_t *)&f->timer, on_closed);
}

void weft_kv_fetch_stop(struct kv_fetch *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    bool joinable = !f->stop;
    f->stop = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (!joinable) return;
    weft_kv_remote_cut_reads(f->r);
    pthread_join(f->thread, NULL);
}

void weft_kv_fetch_free(struct kv_fetch *f)
{
    if (!f) return;
    weft_kv_fetch_stop(f);
    for (struct job *j = f->q_head, *n; j; j = n) {
        n = j->next;
        job_free(j);
    }
    for (struct job *j = f->done, *n; j; j = n) {
        n = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}
