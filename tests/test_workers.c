/* The server's worker pool (server/workers.h): work runs on a worker thread,
 * never the loop's; done callbacks run on the loop thread in submission order
 * for one worker; past max_jobs queued or running, submit refuses at once
 * and calls nothing; free runs what is queued and delivers its callbacks. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "server/workers.h"
#include "tests/check.h"

struct job {
    pthread_t loop;
    atomic_int *gate;       /* work waits while *gate is 0 */
    bool on_loop_work, on_loop_done, done;
    int order;
    int *next_order;
};

static void work(void *arg)
{
    struct job *j = arg;
    j->on_loop_work = pthread_equal(pthread_self(), j->loop);
    while (j->gate && atomic_load(j->gate) == 0) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
}

static void done(void *arg)
{
    struct job *j = arg;
    j->on_loop_done = pthread_equal(pthread_self(), j->loop);
    j->done = true;
    j->order = (*j->next_order)++;
}

static void run_until(uv_loop_t *loop, bool *flag)
{
    for (int i = 0; i < 5000 && !*flag; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
}

static void work_off_the_loop_done_on_it_in_order(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct weft_workers *w;
    CHECK(weft_workers_create(&loop, 1, 8, &w) == WEFT_OK);
    struct job jobs[5];
    int next = 0;
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 5; i++) {
        jobs[i].loop = pthread_self();
        jobs[i].next_order = &next;
        CHECK(weft_workers_submit(w, work, done, &jobs[i]) == WEFT_OK);
    }
    CHECK_EQ_INT(weft_workers_pending(w), 5);
    run_until(&loop, &jobs[4].done);
    for (int i = 0; i < 5; i++) {
        CHECK(jobs[i].done && !jobs[i].on_loop_work && jobs[i].on_loop_done);
        CHECK_EQ_INT(jobs[i].order, i);  /* one worker: first in, first done */
    }
    CHECK_EQ_INT(weft_workers_pending(w), 0);
    weft_workers_free(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

static void bounded_and_free_delivers_what_is_left(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct weft_workers *w;
    CHECK(weft_workers_create(&loop, 2, 3, &w) == WEFT_OK);
    CHECK_EQ_INT(weft_workers_max_jobs(w), 3);
    atomic_int gate = 0;
    struct job jobs[4];
    int next = 0;
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 4; i++) {
        jobs[i].loop = pthread_self();
        jobs[i].gate = &gate;
        jobs[i].next_order = &next;
    }
    for (int i = 0; i < 3; i++) CHECK(weft_workers_submit(w, work, done, &jobs[i]) == WEFT_OK);
    /* full: refused at once, nothing queued, its callback never runs */
    CHECK(weft_workers_submit(w, work, done, &jobs[3]) == WEFT_ERR_BUSY);
    CHECK_EQ_INT(weft_workers_pending(w), 3);
    atomic_store(&gate, 1);
    weft_workers_free(w);  /* joins after running all three, then delivers them here */
    for (int i = 0; i < 3; i++) CHECK(jobs[i].done && jobs[i].on_loop_done && !jobs[i].on_loop_work);
    CHECK(!jobs[3].done);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

int main(void)
{
    RUN(work_off_the_loop_done_on_it_in_order);
    RUN(bounded_and_free_delivers_what_is_left);
    return check_summary();
}
