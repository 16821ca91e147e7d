/* weft fleet's supervisor (contract in fleet_sup.h): children spawned with
 * libuv, their output relayed line by line, restarts with backoff, an
 * ordered stop. */
#define _GNU_SOURCE  /* sched_setaffinity, environ */
#include "tools/fleet_sup.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;

#define LINE_MAX_BYTES 4096
#define BACKOFF_START_S 0.5
#define STABLE_S 30.0

struct child;

struct stream {
    struct child *c;
    uv_pipe_t pipe;
    char buf[LINE_MAX_BYTES];
    size_t len;
    bool open;
};

struct child {
    struct fleet_sup *s;
    uint32_t idx;
    struct fleet_child_spec spec;
    uv_process_t proc;
    bool proc_open;                 /* the handle is live (closed once it exits) */
    bool running;
    int pid;
    struct stream out, err;
    uv_timer_t timer;               /* the restart */
    double backoff_s, started_at;
    bool up, was_up;
    uint32_t restarts;
};

struct fleet_sup {
    uv_loop_t loop;
    struct child ch[FLEET_SUP_MAX_CHILDREN];
    uint32_t n;
    double max_backoff_s, drain_s;
    fleet_sup_ready_cb on_ready;
    void *ud;
    bool ready_told, stopping, cut, failed;
    uv_signal_t sig_term, sig_int;
    uv_timer_t kill_timer;
};

static double now_s(struct fleet_sup *s) { return (double)uv_now(&s->loop) / 1000.0; }

struct fleet_sup *weft_fleet_sup_create(const struct fleet_child_spec *specs, uint32_t n, double max_backoff_s,
                                   double drain_s, fleet_sup_ready_cb on_ready, void *ud)
{
    if (n == 0 || n > FLEET_SUP_MAX_CHILDREN) {
        fprintf(stderr, "weft fleet: %u processes (1 to %d)\n", n, FLEET_SUP_MAX_CHILDREN);
        return NULL;
    }
    struct fleet_sup *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->n = n;
    s->max_backoff_s = max_backoff_s > BACKOFF_START_S ? max_backoff_s : BACKOFF_START_S;
    s->drain_s = drain_s;
    s->on_ready = on_ready;
    s->ud = ud;
    for (uint32_t i = 0; i < n; i++) {
        struct child *c = &s->ch[i];
        c->s = s;
        c->idx = i;
        c->spec = specs[i];
        memset(c->spec.argv, 0, sizeof c->spec.argv);
        for (int k = 0; k < FLEET_SUP_MAX_ARGS && specs[i].argv[k]; k++)
            if (!(c->spec.argv[k] = strdup(specs[i].argv[k]))) goto oom;
        if (!c->spec.argv[0]) {
            fprintf(stderr, "weft fleet: %s has no program\n", c->spec.name);
            weft_fleet_sup_free(s);
            return NULL;
        }
        c->spec.cpus = specs[i].cpus ? strdup(specs[i].cpus) : NULL;
        if (specs[i].cpus && !c->spec.cpus) goto oom;
        c->backoff_s = BACKOFF_START_S;
        c->out.c = c->err.c = c;
    }
    return s;
oom:
    fprintf(stderr, "weft fleet: out of memory\n");
    weft_fleet_sup_free(s);
    return NULL;
}

void weft_fleet_sup_free(struct fleet_sup *s)
{
    if (!s) return;
    for (uint32_t i = 0; i < s->n; i++) {
        for (int k = 0; k < FLEET_SUP_MAX_ARGS; k++) free(s->ch[i].spec.argv[k]);
        free((char *)s->ch[i].spec.cpus);
    }
    free(s);
}

int weft_fleet_sup_pid(const struct fleet_sup *s, uint32_t i) { return i < s->n && s->ch[i].running ? s->ch[i].pid : 0; }
uint32_t weft_fleet_sup_restarts(const struct fleet_sup *s, uint32_t i) { return i < s->n ? s->ch[i].restarts : 0; }

/* ---- output ---- */

static void line_out(struct child *c, const char *line, size_t len)
{
    fprintf(stderr, "[%s] %.*s\n", c->spec.name, (int)len, line);
    if (!c->spec.ready_pattern || c->up) return;
    char tmp[LINE_MAX_BYTES + 1];
    memcpy(tmp, line, len);
    tmp[len] = 0;
    if (!strstr(tmp, c->spec.ready_pattern)) return;
    c->up = true;
    struct fleet_sup *s = c->s;
    if (c->was_up) fprintf(stderr, "weft fleet: %s is back (pid %d, restart %u)\n", c->spec.name, c->pid, c->restarts);
    c->was_up = true;
    if (s->ready_told || s->stopping) return;
    for (uint32_t i = 0; i < s->n; i++)
        if (!s->ch[i].was_up) return;
    s->ready_told = true;
    if (s->on_ready) s->on_ready(s, s->ud);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    struct stream *st = h->data;
    if (st->len == sizeof st->buf) {  /* a line longer than the buffer: out it goes as it is */
        line_out(st->c, st->buf, st->len);
        st->len = 0;
    }
    *b = uv_buf_init(st->buf + st->len, (unsigned)(sizeof st->buf - st->len));
}

static void maybe_respawn_later(struct child *c);

static void on_stream_closed(uv_handle_t *h)
{
    struct stream *st = h->data;
    st->open = false;
}

static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *b)
{
    (void)b;
    struct stream *st = h->data;
    if (nread < 0) {  /* EOF or error: the rest, then close */
        if (st->len) line_out(st->c, st->buf, st->len);
        st->len = 0;
        uv_close((uv_handle_t *)&st->pipe, on_stream_closed);
        return;
    }
    st->len += (size_t)nread;
    char *p = st->buf, *end = st->buf + st->len, *nl;
    while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
        line_out(st->c, p, (size_t)(nl - p));
        p = nl + 1;
    }
    st->len = (size_t)(end - p);
    memmove(st->buf, p, st->len);
}

/* ---- processes ---- */

static void on_exit_cb(uv_process_t *p, int64_t status, int sig);
static void stop_next_rank(struct fleet_sup *s);
static void finish_if_done(struct fleet_sup *s);

static void on_proc_closed(uv_handle_t *h)
{
    struct child *c = h->data;
    c->proc_open = false;
}

/* environ without WEFT_FLEET_*, plus ours; freed by the caller */
static char **child_env(const struct child *c)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "WEFT_FLEET_", 11) != 0) env[k++] = environ[i];
    if (c->spec.weft) {
        static char parent[40], cpus[160];
        snprintf(parent, sizeof parent, "WEFT_FLEET_PARENT=%d", (int)getpid());
        env[k++] = parent;
        if (c->spec.cpus) {
            /* one child is spawned at a time: the static copy is consumed by uv_spawn */
            snprintf(cpus, sizeof cpus, "WEFT_FLEET_CPUS=%s", c->spec.cpus);
            env[k++] = cpus;
        }
    }
    env[k] = NULL;
    return env;
}

/* 0, or a libuv error (nothing is left open) */
static int spawn(struct child *c)
{
    struct fleet_sup *s = c->s;
    if (uv_pipe_init(&s->loop, &c->out.pipe, 0) || uv_pipe_init(&s->loop, &c->err.pipe, 0)) return UV_ENOMEM;
    c->out.pipe.data = &c->out;
    c->err.pipe.data = &c->err;
    c->out.open = c->err.open = true;
    c->out.len = c->err.len = 0;
    uv_stdio_container_t io[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&c->out.pipe},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&c->err.pipe},
    };
    char **env = child_env(c);
    if (!env) {
        uv_close((uv_handle_t *)&c->out.pipe, on_stream_closed);
        uv_close((uv_handle_t *)&c->err.pipe, on_stream_closed);
        return UV_ENOMEM;
    }
    uv_process_options_t o = {.exit_cb = on_exit_cb, .file = c->spec.argv[0], .args = c->spec.argv, .env = env,
                              .flags = UV_PROCESS_DETACHED, .stdio_count = 3, .stdio = io};
    c->proc.data = c;
    int rc = uv_spawn(&s->loop, &c->proc, &o);
    free(env);
    c->proc_open = true;  /* uv_spawn's handle needs closing even when it failed */
    if (rc) {
        uv_close((uv_handle_t *)&c->proc, on_proc_closed);
        uv_close((uv_handle_t *)&c->out.pipe, on_stream_closed);
        uv_close((uv_handle_t *)&c->err.pipe, on_stream_closed);
        return rc;
    }
    c->running = true;
    c->up = false;
    c->pid = c->proc.pid;
    c->started_at = now_s(s);
    uv_read_start((uv_stream_t *)&c->out.pipe, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&c->err.pipe, on_alloc, on_read);
    return 0;
}

static void on_restart_timer(uv_timer_t *t)
{
    struct child *c = t->data;
    if (c->s->stopping) return;
    if (c->proc_open || c->out.open || c->err.open) {  /* the last run's handles are still closing */
        uv_timer_start(&c->timer, on_restart_timer, 50, 0);
        return;
    }
    c->restarts++;
    int rc = spawn(c);
    if (rc) {
        fprintf(stderr, "weft fleet: cannot restart %s: %s\n", c->spec.name, uv_strerror(rc));
        maybe_respawn_later(c);
        return;
    }
    fprintf(stderr, "weft fleet: restarted %s (pid %d)\n", c->spec.name, c->pid);
}

static void maybe_respawn_later(struct child *c)
{
    struct fleet_sup *s = c->s;
    double delay = c->backoff_s;
    c->backoff_s = c->backoff_s * 2 > s->max_backoff_s ? s->max_backoff_s : c->backoff_s * 2;
    fprintf(stderr, "weft fleet: restarting %s in %.1f s\n", c->spec.name, delay);
    uv_timer_start(&c->timer, on_restart_timer, (uint64_t)(delay * 1000), 0);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct child *c = p->data;
    struct fleet_sup *s = c->s;
    c->running = false;
    c->up = false;
    uv_close((uv_handle_t *)&c->proc, on_proc_closed);
    if (sig) fprintf(stderr, "weft fleet: %s (pid %d) ended by signal %d\n", c->spec.name, c->pid, sig);
    else fprintf(stderr, "weft fleet: %s (pid %d) exited with status %lld\n", c->spec.name, c->pid, (long long)status);
    c->pid = 0;
    if (s->stopping) {
        stop_next_rank(s);
        finish_if_done(s);
        return;
    }
    if (now_s(s) - c->started_at >= STABLE_S) c->backoff_s = BACKOFF_START_S;
    maybe_respawn_later(c);
}

static void term(struct child *c)
{
    if (c->running && c->pid > 0) uv_kill(c->pid, SIGTERM);
}

/* SIGTERM to every running child of the lowest rank still running. */
static void stop_next_rank(struct fleet_sup *s)
{
    int rank = 0;
    bool any = false;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->ch[i].running && (!any || s->ch[i].spec.stop_rank < rank)) rank = s->ch[i].spec.stop_rank, any = true;
    if (!any) return;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->ch[i].running && s->ch[i].spec.stop_rank == rank && !s->cut) term(&s->ch[i]);
}

static void close_if(uv_handle_t *h)
{
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void finish_if_done(struct fleet_sup *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->ch[i].running) return;
    for (uint32_t i = 0; i < s->n; i++) {
        uv_timer_stop(&s->ch[i].timer);
        close_if((uv_handle_t *)&s->ch[i].timer);
    }
    close_if((uv_handle_t *)&s->sig_term);
    close_if((uv_handle_t *)&s->sig_int);
    close_if((uv_handle_t *)&s->kill_timer);
}

static void on_kill_timer(uv_timer_t *t)
{
    struct fleet_sup *s = t->data;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->ch[i].running && s->ch[i].pid > 0) {
            fprintf(stderr, "weft fleet: %s did not stop in time: SIGKILL\n", s->ch[i].spec.name);
            uv_kill(s->ch[i].pid, SIGKILL);
        }
}

void weft_fleet_sup_stop(struct fleet_sup *s)
{
    if (!s->stopping) {
        s->stopping = true;
        fprintf(stderr, "weft fleet: stopping (router first, then the instances; again to cut)\n");
        for (uint32_t i = 0; i < s->n; i++) uv_timer_stop(&s->ch[i].timer);
        uv_timer_start(&s->kill_timer, on_kill_timer, (uint64_t)((s->drain_s + 10) * 1000), 0);
        stop_next_rank(s);
        finish_if_done(s);
        return;
    }
    if (s->cut) return;
    s->cut = true;
    fprintf(stderr, "weft fleet: cutting: SIGTERM to every process\n");
    for (uint32_t i = 0; i < s->n; i++) {
        term(&s->ch[i]);
        term(&s->ch[i]);  /* a weft process that was draining cuts at its second */
    }
}

static void on_signal(uv_signal_t *h, int sig)
{
    (void)sig;
    weft_fleet_sup_stop(h->data);
}

int weft_fleet_sup_run(struct fleet_sup *s)
{
    if (uv_loop_init(&s->loop)) {
        fprintf(stderr, "weft fleet: cannot start an event loop\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    uv_signal_init(&s->loop, &s->sig_term);
    uv_signal_init(&s->loop, &s->sig_int);
    s->sig_term.data = s->sig_int.data = s;
    uv_signal_start(&s->sig_term, on_signal, SIGTERM);
    uv_signal_start(&s->sig_int, on_signal, SIGINT);
    uv_timer_init(&s->loop, &s->kill_timer);
    s->kill_timer.data = s;
    for (uint32_t i = 0; i < s->n; i++) {
        uv_timer_init(&s->loop, &s->ch[i].timer);
        s->ch[i].timer.data = &s->ch[i];
    }
    /* highest stop rank first (Redis, then the instances, the router last) */
    uint32_t order[FLEET_SUP_MAX_CHILDREN];
    for (uint32_t i = 0; i < s->n; i++) order[i] = i;
    for (uint32_t i = 1; i < s->n; i++)
        for (uint32_t j = i; j > 0 && s->ch[order[j]].spec.stop_rank > s->ch[order[j - 1]].spec.stop_rank; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (uint32_t k = 0; k < s->n; k++) {
        struct child *c = &s->ch[order[k]];
        int rc = spawn(c);
        if (rc) {
            fprintf(stderr, "weft fleet: cannot start %s (%s): %s\n", c->spec.name, c->spec.argv[0], uv_strerror(rc));
            s->failed = true;
            weft_fleet_sup_stop(s);
            break;
        }
        fprintf(stderr, "weft fleet: started %s (pid %d)\n", c->spec.name, c->pid);
    }
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    return s->failed ? 1 : 0;
}

/* ---- the child's side ---- */

static int parse_cpus(const char *list, cpu_set_t *set)
{
    CPU_ZERO(set);
    const char *p = list;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a >= CPU_SETSIZE) return -1;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a || b >= CPU_SETSIZE) return -1;
            p = end;
        }
        for (long k = a; k <= b; k++) CPU_SET((int)k, set);
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return CPU_COUNT(set) ? 0 : -1;
}

int weft_fleet_child_setup(void)
{
    const char *parent = getenv("WEFT_FLEET_PARENT");
    if (!parent) return 0;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if ((long)getppid() != strtol(parent, NULL, 10)) {
        fprintf(stderr, "weft: the fleet that started this process is gone\n");
        return 1;
    }
    const char *cpus = getenv("WEFT_FLEET_CPUS");
    if (cpus && *cpus) {
        cpu_set_t set;
        if (parse_cpus(cpus, &set)) {
            fprintf(stderr, "weft: bad CPU list '%s' (expected e.g. 0-3,6)\n", cpus);
            return 1;
        }
        if (sched_setaffinity(0, sizeof set, &set)) {
            fprintf(stderr, "weft: cannot pin to CPUs %s: %s\n", cpus, strerror(errno));
            return 1;
        }
    }
    return 0;
}
