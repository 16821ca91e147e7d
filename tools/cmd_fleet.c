/* weft fleet: a local fleet from one command -- a `weft serve` per device
 * (or per --instance spec), `weft router` in front, optionally a local
 * redis-server for the remote KV tier -- supervised by tools/fleet_sup.c
 * (restarts with backoff, an ordered stop on SIGTERM/Ctrl-C). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "backends/backend.h"
#include "core/route.h"
#include "tools/cli.h"
#include "tools/cli_common.h"
#include "tools/env.h"
#include "tools/fleet_sup.h"

#define MAX_INSTANCES 32
#define MAX_PASS 32

struct inst {
    char device[48];      /* cpu, vulkan:0, cuda:1, hip:0 */
    char role[16];        /* both, prefill, decode */
    char cls[32];         /* --device-class ("" : weft serve's default) */
    char cpus[64];        /* pinning ("" : none) */
    char name[48];
    uint32_t threads;     /* 0: weft serve's default */
    uint32_t port;        /* 0: chosen */
    uint32_t kv_mib;      /* 0: weft serve's default */
};

struct fleet_cli {
    const char *model, *host, *config, *kv_remote, *policy;
    uint32_t port, redis_port, drain_s, restart_max_s;
    bool redis, dry_run;
    struct inst in[MAX_INSTANCES];
    uint32_t n_in;
    const char *serve_args[MAX_PASS], *router_args[MAX_PASS];
    uint32_t n_serve_args, n_router_args;
    char redis_url[64];
    char router_url[96];
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weft fleet [-m MODEL] [--host 127.0.0.1] [--port 8000] [--instance SPEC ...]\n"
            "                  [--redis] [--redis-port N] [--kv-remote URL] [--config FILE] [--policy weft]\n"
            "                  [--drain-timeout 30] [--restart-max-s 30] [--serve-arg ARG ...]\n"
            "                  [--router-arg ARG ...] [--dry-run]\n"
            "  Starts a weft serve per device found (or per --instance), weft router in front on --port,\n"
            "  and with --redis a local redis-server for the remote KV tier; prints where each listens.\n"
            "  A crashed process is restarted with backoff (0.5 s doubling to --restart-max-s) on the same\n"
            "  port; SIGTERM or Ctrl-C stops the router first (it drains), then the instances, then Redis.\n"
            "  --instance SPEC: DEVICE or KEY=VALUE,...: device=cpu|vulkan:N|cuda:N|hip:N, threads=N,\n"
            "                 role=both|prefill|decode, port=N, cpus=LIST (pin, e.g. 0-3), class=NAME\n"
            "                 (--device-class), kv-mib=N, name=NAME. Default: the CPU and every GPU\n"
            "                 (CUDA and HIP devices first; a Vulkan device is skipped when it is the same\n"
            "                 GPU or a software rasterizer such as lavapipe -- ask for it with --instance)\n"
            "  --port: the router's (0: any free port); instances take the ports after it (or free ones)\n"
            "  --redis: start redis-server on 127.0.0.1 (--redis-port, default a free one) and give the\n"
            "                 instances --kv-remote; --kv-remote URL: an existing Redis instead\n"
            "  --serve-arg ARG, --router-arg ARG: one more argument for every instance / the router\n"
            "  The fleet shares KV blocks (and hands prefills to decode instances) under one fleet secret:\n"
            "  $WEFT_KV_SECRET when set, else a fresh random one; the instances and the router get it in\n"
            "  their environment (weft serve --kv-secret)\n"
            "  --dry-run: print the commands and exit\n");
}

static int parse_spec(const char *spec, struct inst *in)
{
    memset(in, 0, sizeof *in);
    snprintf(in->role, sizeof in->role, "both");
    if (!strchr(spec, '=')) {
        snprintf(in->device, sizeof in->device, "%s", spec);
        return 0;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv || !eq[1]) {
            fprintf(stderr, "weft fleet: --instance: '%s' is not KEY=VALUE\n", kv);
            return -1;
        }
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        if (!strcmp(k, "device")) snprintf(in->device, sizeof in->device, "%s", v);
        else if (!strcmp(k, "role")) {
            enum weft_route_role r;
            if (!weft_route_role_parse(v, &r)) {
                fprintf(stderr, "weft fleet: --instance: role=%s (expected both, prefill or decode)\n", v);
                return -1;
            }
            snprintf(in->role, sizeof in->role, "%s", v);
        } else if (!strcmp(k, "class")) snprintf(in->cls, sizeof in->cls, "%s", v);
        else if (!strcmp(k, "cpus")) snprintf(in->cpus, sizeof in->cpus, "%s", v);
        else if (!strcmp(k, "name")) snprintf(in->name, sizeof in->name, "%s", v);
        else if (!strcmp(k, "threads")) {
            if (weft_cli_parse_u32("fleet", "threads", v, 1, 1024, &in->threads)) return -1;
        } else if (!strcmp(k, "port")) {
            if (weft_cli_parse_u32("fleet", "port", v, 1, 65535, &in->port)) return -1;
        } else if (!strcmp(k, "kv-mib")) {
            if (weft_cli_parse_u32("fleet", "kv-mib", v, 1, 1u << 24, &in->kv_mib)) return -1;
        } else {
            fprintf(stderr, "weft fleet: --instance: unknown key '%s' (device, threads, role, port, cpus, class, "
                            "kv-mib, name)\n", k);
            return -1;
        }
    }
    if (!in->device[0]) snprintf(in->device, sizeof in->device, "cpu");
    return 0;
}

static bool software_vulkan(const char *name)
{
    return strcasestr(name, "llvmpipe") || strcasestr(name, "lavapipe") || strcasestr(name, "swiftshader");
}

/* Whether two backends' names are one device: equal up to their " (...)"
 * details, or one contains the other. */
static bool same_device(const char *a, const char *b)
{
    const char *pa = strstr(a, " ("), *pb = strstr(b, " (");
    size_t la = pa ? (size_t)(pa - a) : strlen(a), lb = pb ? (size_t)(pb - b) : strlen(b);
    return (la == lb && strncasecmp(a, b, la) == 0) || strcasestr(a, b) || strcasestr(b, a);
}

/* an OpenCL device that is the CPU (PoCL): the backend names its type */
static bool cpu_opencl(const char *name) { return strstr(name, ", CPU") != NULL; }

/* An instance per device: CUDA and HIP GPUs, Vulkan and then OpenCL devices
 * that are none of those nor software (or CPU) devices, and the CPU with
 * the cores the others leave. */
static int default_instances(struct fleet_cli *f)
{
    char gpu_names[MAX_INSTANCES][128];
    uint32_t n_gpu = 0;
    static const char *const order[] = {"cuda", "hip", "vulkan", "opencl"};
    for (size_t b = 0; b < 4; b++) {
        const struct weft_backend_iface *bi = weft_backend_find(order[b]);
        if (!bi) continue;
        struct weft_device_info info[16];
        const char *why = NULL;
        int n = bi->devices(info, 16, &why);
        for (int i = 0; i < n && i < 16 && f->n_in < MAX_INSTANCES - 1; i++) {
            bool skip = false;
            if (!strcmp(order[b], "vulkan") || !strcmp(order[b], "opencl")) {
                if (software_vulkan(info[i].name) || cpu_opencl(info[i].name)) {
                    fprintf(stderr, "weft fleet: skipping %s (%s: a software device; --instance %s runs it)\n",
                            info[i].id, info[i].name, info[i].id);
                    skip = true;
                }
                for (uint32_t g = 0; g < n_gpu && !skip; g++)
                    if (same_device(info[i].name, gpu_names[g])) {
                        fprintf(stderr, "weft fleet: skipping %s (%s: served through another backend)\n", info[i].id,
                                info[i].name);
                        skip = true;
                    }
            }
            if (skip) continue;
            if (n_gpu < MAX_INSTANCES) snprintf(gpu_names[n_gpu++], sizeof gpu_names[0], "%s", info[i].name);
            parse_spec(info[i].id, &f->in[f->n_in++]);
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    struct inst *cpu = &f->in[f->n_in++];
    parse_spec("cpu", cpu);
    long t = cores - (long)(f->n_in - 1);
    cpu->threads = t >= 1 ? (uint32_t)t : 1;
    return 0;
}

/* A port nobody listens on now (the kernel's pick); 0 on failure. */
static uint32_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    uint32_t port = 0;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void on_ready(struct fleet_sup *s, void *ud)
{
    struct fleet_cli *f = ud;
    fprintf(stderr, "weft fleet: ready: OpenAI API at %s/v1 (dashboard %s/, metrics %s/metrics)\n", f->router_url,
            f->router_url, f->router_url);
    for (uint32_t i = 0; i < f->n_in; i++)
        fprintf(stderr, "weft fleet: instance %s http://127.0.0.1:%u device=%s role=%s pid=%d\n", f->in[i].name,
                f->in[i].port, f->in[i].device, f->in[i].role, weft_fleet_sup_pid(s, i));
    fprintf(stderr, "weft fleet: router %s pid=%d\n", f->router_url, weft_fleet_sup_pid(s, f->n_in));
    if (f->redis) fprintf(stderr, "weft fleet: redis %s pid=%d\n", f->redis_url, weft_fleet_sup_pid(s, f->n_in + 1));
    fflush(stderr);
}

/* argv helpers: a spec's argv points into a pool of strings kept here */
struct argbuf {
    char pool[8192];
    size_t used;
};

static const char *keep(struct argbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *keep(struct argbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->pool + b->used, sizeof b->pool - b->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof b->pool - b->used) return NULL;
    const char *s = b->pool + b->used;
    b->used += (size_t)n + 1;
    return s;
}

static int add_arg(struct fleet_child_spec *c, int *k, const char *a)
{
    if (!a || *k >= FLEET_SUP_MAX_ARGS) {
        fprintf(stderr, "weft fleet: too many arguments for %s\n", c->name);
        return -1;
    }
    c->argv[(*k)++] = (char *)a;
    return 0;
}

#define ARG(c, k, a)                                  \
    do {                                              \
        if (add_arg((c), &(k), (a))) return -1;       \
    } while (0)

static int build_specs(struct fleet_cli *f, const char *exe, struct argbuf *ab, struct fleet_child_spec *specs)
{
    for (uint32_t i = 0; i < f->n_in; i++) {
        struct inst *in = &f->in[i];
        struct fleet_child_spec *c = &specs[i];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", in->name);
        c->stop_rank = 1;
        c->ready_pattern = "listening on http://";
        c->cpus = in->cpus[0] ? in->cpus : NULL;
        c->weft = true;
        int k = 0;
        ARG(c, k, exe);
        ARG(c, k, "serve");
        ARG(c, k, "-m");
        ARG(c, k, f->model);
        ARG(c, k, "--host");
        ARG(c, k, "127.0.0.1");
        ARG(c, k, "--port");
        ARG(c, k, keep(ab, "%u", in->port));
        ARG(c, k, "--device");
        ARG(c, k, in->device);
        ARG(c, k, "--role");
        ARG(c, k, in->role);
        ARG(c, k, "--drain-timeout");
        ARG(c, k, keep(ab, "%u", f->drain_s));
        /* the router's connections all come from one address */
        ARG(c, k, "--max-conns-per-client");
        ARG(c, k, "4096");
        if (in->threads) {
            ARG(c, k, "-t");
            ARG(c, k, keep(ab, "%u", in->threads));
        }
        if (in->cls[0]) {
            ARG(c, k, "--device-class");
            ARG(c, k, in->cls);
        }
        if (in->kv_mib) {
            ARG(c, k, "--kv-mib");
            ARG(c, k, keep(ab, "%u", in->kv_mib));
        }
        if (f->config) {
            ARG(c, k, "--config");
            ARG(c, k, f->config);
        }
        const char *kvr = f->redis ? f->redis_url : f->kv_remote;
        if (kvr) {
            ARG(c, k, "--kv-remote");
            ARG(c, k, kvr);
        }
        for (uint32_t a = 0; a < f->n_serve_args; a++) ARG(c, k, f->serve_args[a]);
    }
    struct fleet_child_spec *r = &specs[f->n_in];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "router");
    r->stop_rank = 0;
    r->ready_pattern = "listening on http://";
    r->weft = true;
    int k = 0;
    ARG(r, k, exe);
    ARG(r, k, "router");
    ARG(r, k, "-m");
    ARG(r, k, f->model);
    ARG(r, k, "--host");
    ARG(r, k, f->host);
    ARG(r, k, "--port");
    ARG(r, k, keep(ab, "%u", f->port));
    for (uint32_t i = 0; i < f->n_in; i++) {
        ARG(r, k, "--instance");
        ARG(r, k, keep(ab, "http://127.0.0.1:%u", f->in[i].port));
    }
    if (f->policy) {
        ARG(r, k, "--policy");
        ARG(r, k, f->policy);
    }
    /* the instances load their model while the router already listens:
     * it holds what comes meanwhile instead of answering 503 (a later
     * --router-arg --hold-startup-s wins) */
    ARG(r, k, "--hold-startup-s");
    ARG(r, k, "600");
    if (f->config) {
        ARG(r, k, "--config");
        ARG(r, k, f->config);
    }
    /* the instances' chat template: the router renders chats as they do (it hashes their prompts) */
    for (uint32_t a = 0; a + 1 < f->n_serve_args; a++)
        if (!strcmp(f->serve_args[a], "--chat-template")) {
            ARG(r, k, "--chat-template");
            ARG(r, k, f->serve_args[a + 1]);
        }
    for (uint32_t a = 0; a < f->n_router_args; a++) ARG(r, k, f->router_args[a]);
    if (f->redis) {
        struct fleet_child_spec *d = &specs[f->n_in + 1];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "redis");
        d->stop_rank = 2;
        d->ready_pattern = "Ready to accept connections";
        k = 0;
        ARG(d, k, "redis-server");
        ARG(d, k, "--bind");
        ARG(d, k, "127.0.0.1");
        ARG(d, k, "--port");
        ARG(d, k, keep(ab, "%u", f->redis_port));
        ARG(d, k, "--save");
        ARG(d, k, "");
        ARG(d, k, "--appendonly");
        ARG(d, k, "no");
        ARG(d, k, "--maxmemory-policy");
        ARG(d, k, "allkeys-lru");
    }
    return 0;
}

static int parse_args(struct fleet_cli *f, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) f->model = argv[++i];
        else if (!strcmp(a, "--host") && v) f->host = argv[++i];
        else if (!strcmp(a, "--config") && v) f->config = argv[++i];
        else if (!strcmp(a, "--kv-remote") && v) f->kv_remote = argv[++i];
        else if (!strcmp(a, "--policy") && v) f->policy = argv[++i];
        else if (!strcmp(a, "--redis")) f->redis = true;
        else if (!strcmp(a, "--dry-run")) f->dry_run = true;
        else if (!strcmp(a, "--instance") && v) {
            if (f->n_in == MAX_INSTANCES - 1) {
                fprintf(stderr, "weft fleet: at most %d instances\n", MAX_INSTANCES - 1);
                return 2;
            }
            if (parse_spec(argv[++i], &f->in[f->n_in])) return 2;
            f->n_in++;
        } else if ((!strcmp(a, "--serve-arg") || !strcmp(a, "--router-arg")) && v) {
            bool serve = a[2] == 's';
            uint32_t *n = serve ? &f->n_serve_args : &f->n_router_args;
            if (*n == MAX_PASS) {
                fprintf(stderr, "weft fleet: at most %d of %s\n", MAX_PASS, a);
                return 2;
            }
            (serve ? f->serve_args : f->router_args)[(*n)++] = argv[++i];
        } else {
            struct { const char *flag; uint32_t lo, hi, *out; } nums[] = {
                {"--port", 0, 65535, &f->port},
                {"--redis-port", 1, 65535, &f->redis_port},
                {"--drain-timeout", 1, 86400, &f->drain_s},
                {"--restart-max-s", 1, 3600, &f->restart_max_s},
            };
            bool matched = false;
            for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !matched; k++)
                if (!strcmp(a, nums[k].flag) && v) {
                    if (weft_cli_parse_u32("fleet", a, argv[++i], nums[k].lo, nums[k].hi, nums[k].out)) return 2;
                    matched = true;
                }
            if (!matched) {
                weft_cli_unknown_option("fleet", a, i + 1 == argc);
                return 2;
            }
        }
    }
    if (f->redis && f->kv_remote) {
        fprintf(stderr, "weft fleet: --redis starts a Redis; --kv-remote names one: not both\n");
        return 2;
    }
    return 0;
}

int weft_cmd_fleet(int argc, char **argv)
{
    static struct fleet_cli f;
    memset(&f, 0, sizeof f);
    f.host = "127.0.0.1";
    f.port = 8000;
    f.drain_s = 30;
    f.restart_max_s = 30;
    int rc = parse_args(&f, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    char *def = NULL;
    if (!f.model && !(f.model = def = weft_default_model_path())) return 1;
    char model_abs[4096];
    if (f.model[0] != '/' && realpath(f.model, model_abs)) f.model = model_abs;
    if (!f.n_in) default_instances(&f);
    /* ports: after the router's, or free ones when it takes any */
    uint32_t next = f.port ? f.port + 1 : 0;
    if (!f.port && !(f.port = free_port())) {
        fprintf(stderr, "weft fleet: no free port\n");
        free(def);
        return 1;
    }
    for (uint32_t i = 0; i < f.n_in; i++) {
        struct inst *in = &f.in[i];
        if (!in->port) {
            for (;;) {
                in->port = next ? next++ : free_port();
                bool taken = in->port == f.port;
                for (uint32_t j = 0; j < f.n_in && !taken; j++) taken = j != i && f.in[j].port == in->port;
                if (!taken || !next) break;
            }
        }
        if (!in->name[0]) {
            char dev[sizeof in->device];  /* a copy: GCC's -Wrestrict takes the two members for one object */
            memcpy(dev, in->device, sizeof dev);
            snprintf(in->name, sizeof in->name, "%.36s@%u", dev, in->port);
        }
    }
    /* one fleet secret for every member (shared KV, hand-offs, Redis): the
     * one given in $WEFT_KV_SECRET, else a fresh one; the children read it
     * from the environment, never from their command line */
    if (!weft_env_kv_secret(false)) {
        unsigned char raw[32];
        char hex[65];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
            fprintf(stderr, "weft fleet: no randomness for the fleet secret\n");
            free(def);
            return 1;
        }
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        setenv("WEFT_KV_SECRET", hex, 1);
    }
    if (f.redis) {
        if (!f.redis_port) f.redis_port = free_port();
        snprintf(f.redis_url, sizeof f.redis_url, "redis://127.0.0.1:%u", f.redis_port);
    }
    snprintf(f.router_url, sizeof f.router_url, "http://%s:%u",
             !strcmp(f.host, "0.0.0.0") || !strcmp(f.host, "::") ? "127.0.0.1" : f.host, f.port);
    char exe[4096];
    size_t exe_len = sizeof exe;
    if (uv_exepath(exe, &exe_len)) {
        fprintf(stderr, "weft fleet: cannot find the weft binary's path\n");
        free(def);
        return 1;
    }
    static struct argbuf ab;
    ab.used = 0;
    static struct fleet_child_spec specs[MAX_INSTANCES + 2];
    uint32_t n = f.n_in + 1 + (f.redis ? 1 : 0);
    if (build_specs(&f, exe, &ab, specs)) {
        free(def);
        return 2;
    }
    if (f.dry_run) {
        for (uint32_t i = 0; i < n; i++) {
            printf("%s:", specs[i].name);
            if (specs[i].cpus) printf(" (cpus %s)", specs[i].cpus);
            for (int k = 0; specs[i].argv[k]; k++) printf(" %s", specs[i].argv[k][0] ? specs[i].argv[k] : "''");
            printf("\n");
        }
        free(def);
        return 0;
    }
    struct fleet_sup *s = weft_fleet_sup_create(specs, n, f.restart_max_s, f.drain_s, on_ready, &f);
    free(def);
    if (!s) return 1;
    rc = weft_fleet_sup_run(s);
    weft_fleet_sup_free(s);
    fprintf(stderr, "weft fleet: stopped\n");
    return rc;
}
