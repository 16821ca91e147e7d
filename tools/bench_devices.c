/* `weft bench --devices all|DEV,...`: the vendor comparison. The same model
 * and workload on every device asked for, one after another (one model in
 * memory at a time): pp and tg tokens/s at batch 1 (bench_common), the
 * weight bandwidth tg implies and its share of the device's memory
 * bandwidth, and generated tokens/s, ITL p50/p99 and TTFT p50 at each
 * concurrency level (weft_bench_conc_measure). --split SPEC adds a row with that
 * layer split. A markdown row per device as it ends (or one JSON object),
 * and PREFIX.json, PREFIX.svg and PREFIX.png (tools/plot). */
#include "tools/bench_devices.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/module.h"
#include "core/session.h"
#include "tools/bench_common.h"
#include "tools/bench_conc.h"
#include "tools/plot.h"

#define MAX_DEVS 32
#define MAX_LEVELS 16

static const char *const backends[] = {"cpu", "vulkan", "cuda", "hip", "opencl"};
#define N_BACKENDS (int)(sizeof backends / sizeof backends[0])

struct dev {
    char id[64], name[160], backend[16];
    const char *split;                   /* the split row's spec, else NULL */
    /* results */
    int ok;
    char error[256];
    struct bench_stats pp, tg;
    double bw;                           /* GB/s, 0: unknown */
    const char *bw_source;
    struct bench_conc_level lv[MAX_LEVELS];
};

struct skipped { char what[64], why[192]; };

struct plan {
    struct dev devs[MAX_DEVS];
    int n;
    struct skipped skip[MAX_DEVS];
    int n_skip;
};

/* ---- bandwidth ---- */

/* Peak DRAM/HBM bandwidth from the vendors' datasheets, GB/s. A key matches
 * as whole words in the device's name ("A10" is not "A100"). */
static const struct { const char *key; double gbs; } known_bw[] = {
    {"B200", 8000},           {"GH200", 4000},          {"H200", 4800},          {"H100 NVL", 3900},
    {"H100 PCIe", 2000},      {"H100", 3350},           {"A100-SXM4-80GB", 2039}, {"A100 80GB PCIe", 1935},
    {"A100", 1555},           {"A10G", 600},            {"A10", 600},            {"L40S", 864},
    {"L40", 864},             {"L4", 300},              {"V100", 900},           {"T4", 320},
    {"RTX 5090", 1792},       {"RTX 4090", 1008},       {"RTX 4080 SUPER", 736}, {"RTX 4080", 717},
    {"RTX 3090 Ti", 1008},    {"RTX 3090", 936},        {"RTX 3080 Ti", 912},    {"RTX 3080", 760},
    {"RTX 6000 Ada", 960},    {"RTX A6000", 768},       {"MI325X", 6000},        {"MI300X", 5300},
    {"MI300A", 5300},         {"MI250X", 3277},         {"MI250", 3277},         {"MI210", 1638},
    {"MI100", 1229},          {"RX 7900 XTX", 960},     {"RX 7900 XT", 800},     {"RX 6900 XT", 512},
};

static int word_at(const char *name, const char *p, size_t n)
{
    return (p == name || !isalnum((unsigned char)p[-1])) && !isalnum((unsigned char)p[n]);
}

double weft_bench_known_bandwidth(const char *device_name)
{
    for (size_t i = 0; i < sizeof known_bw / sizeof known_bw[0]; i++) {
        size_t n = strlen(known_bw[i].key);
        for (const char *p = strstr(device_name, known_bw[i].key); p; p = strstr(p + 1, known_bw[i].key))
            if (word_at(device_name, p, n)) return known_bw[i].gbs;
    }
    return 0;
}

static bool reads_system_memory(const char *backend, const char *device_name)
{
    return !strcmp(backend, "cpu") || (!strcmp(backend, "vulkan") && strstr(device_name, "(CPU,")) ||
           (!strcmp(backend, "opencl") && strstr(device_name, ", CPU"));
}

static int runs_on_cpu(const struct dev *d) { return reads_system_memory(d->backend, d->name); }

double weft_bench_device_bandwidth(const char *backend, const char *device_name, double cpu_bw, const char **source)
{
    char var[48];
    snprintf(var, sizeof var, "WEFT_%s_BW_GBS", backend);
    for (char *c = var; *c; c++) *c = (char)toupper((unsigned char)*c);
    const char *env = getenv(var);
    double v = env ? strtod(env, NULL) : 0;
    const bool on_cpu = reads_system_memory(backend, device_name);
    const char *src = NULL;
    if (v > 0) src = "env";
    else if (on_cpu && cpu_bw > 0) { v = cpu_bw; src = "measured"; }
    else if ((v = weft_bench_known_bandwidth(device_name)) > 0) src = "table";
    else v = 0;
    if (source) *source = src;
    return v;
}

/* WEFT_<BACKEND>_BW_GBS, the CPU's measured read bandwidth (for lavapipe
 * too: it reads system memory), or the table; none for a split row */
static void device_bandwidth(struct dev *d, double cpu_bw)
{
    d->bw = 0;
    d->bw_source = NULL;
    if (d->split) return;
    d->bw = weft_bench_device_bandwidth(d->backend, d->name, cpu_bw, &d->bw_source);
}

/* ---- which devices ---- */

static void add_skip(struct plan *pl, const char *what, const char *why)
{
    if (pl->n_skip == MAX_DEVS) return;
    snprintf(pl->skip[pl->n_skip].what, sizeof pl->skip[0].what, "%s", what);
    snprintf(pl->skip[pl->n_skip].why, sizeof pl->skip[0].why, "%s", why ? why : "no devices");
    pl->n_skip++;
}

static void add_dev(struct plan *pl, const char *backend, const struct weft_device_info *info)
{
    for (int i = 0; i < pl->n; i++)
        if (!strcmp(pl->devs[i].id, info->id)) return;  /* named twice */
    if (pl->n == MAX_DEVS) return;
    struct dev *d = &pl->devs[pl->n++];
    memset(d, 0, sizeof *d);
    snprintf(d->id, sizeof d->id, "%s", info->id);
    snprintf(d->name, sizeof d->name, "%s", info->name);
    snprintf(d->backend, sizeof d->backend, "%s", backend);
}

/* backend b's devices: all (index < 0) or one; absent ones are skipped with the reason */
static void add_backend(struct plan *pl, const char *b, int index, const char *spec)
{
    const struct weft_backend_iface *bi = weft_backend_find(b);
    if (!bi) { add_skip(pl, spec, weft_backend_unavailable(b)); return; }
    struct weft_device_info info[16];
    const char *why = NULL;
    int n = bi->devices(info, 16, &why);
    if (n > 16) n = 16;
    if (n <= 0) { add_skip(pl, spec, why ? why : "no devices"); return; }
    if (index >= n) {
        char msg[96];
        snprintf(msg, sizeof msg, "no such device (%d found)", n);
        add_skip(pl, spec, msg);
        return;
    }
    for (int i = 0; i < n; i++)
        if (index < 0 || i == index) add_dev(pl, b, &info[i]);
}

/* "all" or "cpu,vulkan:0,cuda": 0, or 2 after a usage message */
static int plan_devices(struct plan *pl, const char *list)
{
    char buf[512], *save = NULL;
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf) {
        fprintf(stderr, "weft bench: --devices value too long\n");
        return 2;
    }
    int n_tok = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n_tok++) {
        if (!strcmp(t, "all")) {
            for (int b = 0; b < N_BACKENDS; b++) add_backend(pl, backends[b], -1, backends[b]);
            continue;
        }
        char *colon = strchr(t, ':'), *end = NULL;
        long index = -1;
        if (colon) {
            *colon = '\0';
            index = strtol(colon + 1, &end, 10);
            if (colon[1] == '\0' || *end || index < 0 || index > 1024) {
                *colon = ':';
                fprintf(stderr, "weft bench: --devices: bad device '%s' (expected all, or a list such as "
                                "cpu,vulkan:0,cuda:0)\n", t);
                return 2;
            }
        }
        int known = 0;
        for (int b = 0; b < N_BACKENDS; b++) known |= !strcmp(t, backends[b]);
        if (!known) {
            if (colon) *colon = ':';
            fprintf(stderr, "weft bench: --devices: unknown device '%s' (backends: cpu, vulkan, cuda, hip; "
                            "e.g. all, or cpu,vulkan:0,cuda:0)\n", t);
            return 2;
        }
        char spec[64];
        snprintf(spec, sizeof spec, colon ? "%s:%ld" : "%s", t, index);
        add_backend(pl, t, (int)index, spec);
    }
    if (n_tok == 0) {
        fprintf(stderr, "weft bench: --devices expects all, or a list such as cpu,vulkan:0,cuda:0\n");
        return 2;
    }
    return 0;
}

/* ---- one device ---- */

static void fail(struct dev *d, const char *what)
{
    const char *e = weft_last_error();
    snprintf(d->error, sizeof d->error, "%s%s%s", what, *e ? ": " : "", e);
}

/* the model's name and type (once loaded), for the header, JSON and plot */
struct model_desc { char name[160]; const char *type; double wbytes; };

static void measure(const struct cli_opts *o, const struct bench_devices_args *a, struct dev *d, struct model_desc *md)
{
    struct cli_opts od = *o;
    od.device = d->split ? o->device : d->id;
    od.split = d->split;
    struct weft_backend *be;
    struct weft_model *m;
    weft_cli_progress("%s: loading the model...", d->id);
    if (weft_cli_open(&od, &be, &m)) { weft_cli_progress_clear(); fail(d, "cannot load the model"); return; }
    weft_cli_progress_clear();
    const char *name = "";
    weft_gguf_get_str(weft_model_gguf(m), "general.name", &name, NULL);
    snprintf(md->name, sizeof md->name, "%s", *name ? name : "model");
    md->type = weft_type_name(weft_model_ftype(m));
    md->wbytes = weft_bench_weight_bytes_per_token(m);
    struct weft_session *s = NULL;
    int32_t *toks = NULL;
    if (weft_bench_session_open(m, a->pp > a->tg ? a->pp : a->tg, o->batch, &s, &toks)) {
        fail(d, "cannot create a session");
    } else if (weft_bench_run_test(s, toks, a->pp, false, a->reps, d->id, &d->pp) ||
               weft_bench_run_test(s, toks, a->tg, true, a->reps, d->id, &d->tg)) {
        fail(d, "benchmark run failed");
    }
    weft_session_free(s);  /* before the engine: one context's memory at a time */
    free(toks);
    if (!d->error[0]) {
        int rc = weft_bench_conc_measure(&od, m, a->levels, a->n_levels, a->pp, a->tg, a->reps, d->id, d->lv);
        if (rc) fail(d, "concurrency run failed");
        else d->ok = 1;
    }
    weft_cli_close(be, m);
}

/* ---- output ---- */

static void row_cells(const struct dev *d, const struct bench_devices_args *a, double wbytes, int w_name)
{
    printf("| %-10s | %-*s |", d->id, w_name, d->name);
    if (!d->ok) {
        printf(" %9s | %8s | %11s | %22s |", "failed", "-", "-", "-");
        for (int l = 0; l < a->n_levels; l++)
            if (a->levels[l] > 0) printf(" %11s | %18s | %15s |", "-", "-", "-");
        printf("\n");
        return;
    }
    double gbs = wbytes * d->tg.median / 1e9;
    char share[48] = "-";
    if (d->bw > 0) snprintf(share, sizeof share, "%.1f%% of %.0f GB/s", 100 * gbs / d->bw, d->bw);
    printf(" %9.1f | %8.1f | %11.2f | %22s |", d->pp.median, d->tg.median, gbs, share);
    for (int l = 0; l < a->n_levels; l++) {
        const struct bench_conc_level *q = &d->lv[l];
        if (q->concurrency <= 0) continue;
        char itl[40];
        snprintf(itl, sizeof itl, "%.1f / %.1f", q->itl_p50, q->itl_p99);
        printf(" %11.1f | %18s | %15.1f |", q->gen_tps, itl, q->ttft_p50);
    }
    printf("\n");
}

static void table_header(const struct bench_devices_args *a, int w_name)
{
    char pp[24], tg[24];
    snprintf(pp, sizeof pp, "pp%d t/s", a->pp);
    snprintf(tg, sizeof tg, "tg%d t/s", a->tg);
    printf("| %-10s | %-*s | %9s | %8s | %11s | %22s |", "device", w_name, "name", pp, tg, "weight GB/s",
           "share of bandwidth");
    for (int l = 0; l < a->n_levels; l++) {
        if (a->levels[l] <= 0) continue;
        char g[32], i[32], t[32];
        snprintf(g, sizeof g, "c=%d gen t/s", a->levels[l]);
        snprintf(i, sizeof i, "c=%d ITL p50/p99 ms", a->levels[l]);
        snprintf(t, sizeof t, "c=%d TTFT p50 ms", a->levels[l]);
        printf(" %11s | %18s | %15s |", g, i, t);
    }
    printf("\n|------------|-%.*s-|-----------|----------|-------------|------------------------|", w_name,
           "----------------------------------------------------------------------------------------------------"
           "------------------------------------------------------------");
    for (int l = 0; l < a->n_levels; l++)
        if (a->levels[l] > 0) printf("-------------|--------------------|-----------------|");
    printf("\n");
}

static json_t *dev_json(const struct dev *d, const struct bench_devices_args *a, double wbytes)
{
    json_t *j = json_pack("{s:s,s:s,s:s}", "id", d->id, "name", d->name, "backend", d->backend);
    json_object_set_new(j, "split", d->split ? json_string(d->split) : json_null());
    if (!d->ok) {
        json_object_set_new(j, "error", json_string(d->error));
        return j;
    }
    double gbs = wbytes * d->tg.median / 1e9;
    json_object_set_new(j, "pp_tps", json_pack("{s:f,s:f,s:f}", "median", d->pp.median, "mean", d->pp.mean,
                                               "sd", d->pp.sd));
    json_object_set_new(j, "tg_tps", json_pack("{s:f,s:f,s:f}", "median", d->tg.median, "mean", d->tg.mean,
                                               "sd", d->tg.sd));
    json_object_set_new(j, "weight_gbs", json_real(gbs));
    json_object_set_new(j, "bandwidth_gbs", d->bw > 0 ? json_real(d->bw) : json_null());
    json_object_set_new(j, "bandwidth_source", d->bw_source ? json_string(d->bw_source) : json_null());
    json_object_set_new(j, "bandwidth_share", d->bw > 0 ? json_real(gbs / d->bw) : json_null());
    json_t *lv = json_array();
    for (int l = 0; l < a->n_levels; l++) {
        const struct bench_conc_level *q = &d->lv[l];
        if (q->concurrency <= 0) continue;
        json_array_append_new(lv, json_pack("{s:i,s:f,s:f,s:f,s:{s:f,s:f,s:f},s:{s:f,s:f}}", "concurrency",
                                            q->concurrency, "gen_tps", q->gen_tps, "decode_tps", q->decode_tps,
                                            "tokens_per_step", q->tok_per_step, "itl_ms", "p50", q->itl_p50,
                                            "p90", q->itl_p90, "p99", q->itl_p99, "ttft_ms", "p50", q->ttft_p50,
                                            "p99", q->ttft_p99));
    }
    json_object_set_new(j, "concurrency", lv);
    return j;
}

/* the chart: a group per measure, a bar per device that ran */
static int write_plot(const struct plan *pl, const struct bench_devices_args *a, const struct model_desc *md,
                      const char *svg, const char *png)
{
    const char *groups[2 + MAX_LEVELS], *series[MAX_DEVS];
    char glab[2 + MAX_LEVELS][32], slab[MAX_DEVS][240], levels[96] = "";
    double values[MAX_DEVS * (2 + MAX_LEVELS)];
    int ng = 0, ns = 0;
    snprintf(glab[ng++], sizeof glab[0], "pp%d", a->pp);
    snprintf(glab[ng++], sizeof glab[0], "tg%d", a->tg);
    for (int l = 0; l < a->n_levels; l++) {
        if (a->levels[l] <= 0) continue;
        snprintf(glab[ng++], sizeof glab[0], "gen c=%d", a->levels[l]);
        size_t k = strlen(levels);
        snprintf(levels + k, sizeof levels - k, "%s%d", k ? ", " : "", a->levels[l]);
    }
    for (int g = 0; g < ng; g++) groups[g] = glab[g];
    for (int i = 0; i < pl->n; i++) {
        const struct dev *d = &pl->devs[i];
        if (!d->ok) continue;
        if (d->split) snprintf(slab[ns], sizeof slab[0], "%s", d->name);
        else snprintf(slab[ns], sizeof slab[0], "%s  %s", d->id, d->name);
        series[ns] = slab[ns];
        double *v = values + ns * ng;
        int g = 0;
        v[g++] = d->pp.median;
        v[g++] = d->tg.median;
        for (int l = 0; l < a->n_levels; l++)
            if (d->lv[l].concurrency > 0) v[g++] = d->lv[l].gen_tps;
        ns++;
    }
    char title[256], sub[256];
    snprintf(title, sizeof title, "weft bench --devices: %s (%s)", md->name, md->type);
    snprintf(sub, sizeof sub, "tokens/s: pp%d, tg%d at batch 1; generated t/s at concurrency %s", a->pp, a->tg,
             levels);
    struct plot_bars p = {.title = title, .subtitle = sub, .y_label = "tokens/s", .n_groups = ng, .groups = groups,
                          .n_series = ns, .series = series, .values = values};
    const char *bad = weft_plot_bars_svg(&p, svg) ? svg : weft_plot_bars_png(&p, png) ? png : NULL;
    if (bad) {
        fprintf(stderr, "weft bench: cannot write %s: %s\n", bad, strerror(errno));
        return 1;
    }
    return 0;
}

/* the folders above path, as mkdir -p (errors surface when the file is written) */
static void make_parents(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0777);
            *p = '/';
        }
}

int weft_bench_devices(const struct cli_opts *o, const struct bench_devices_args *a)
{
    if (a->pp < 1 || a->tg < 1) {
        fprintf(stderr, "weft bench: --devices needs -p and -n of at least 1\n");
        return 2;
    }
    if (a->n_levels > MAX_LEVELS) {
        fprintf(stderr, "weft bench: at most %d --levels\n", MAX_LEVELS);
        return 2;
    }
    if (strlen(a->out_prefix) > 900) {
        fprintf(stderr, "weft bench: --out prefix too long\n");
        return 2;
    }
    struct plan *pl = calloc(1, sizeof *pl);
    if (!pl) { weft_cli_fail("out of memory"); return 1; }
    int rc = plan_devices(pl, a->devices);
    if (rc) { free(pl); return rc; }
    if (a->split && pl->n < MAX_DEVS) {
        struct dev *d = &pl->devs[pl->n++];
        memset(d, 0, sizeof *d);
        d->split = a->split;
        snprintf(d->id, sizeof d->id, "split");
        snprintf(d->name, sizeof d->name, "layer split %s", a->split);
        snprintf(d->backend, sizeof d->backend, "split");
    }
    int w_name = 4;
    for (int i = 0; i < pl->n; i++) {
        int n = (int)strlen(pl->devs[i].name);  /* bytes: an odd UTF-8 name only shifts its own row */
        if (n > w_name) w_name = n;
    }
    if (!o->json) {
        printf("weft bench --devices: pp%d and tg%d at batch 1; concurrency", a->pp, a->tg);
        for (int l = 0, k = 0; l < a->n_levels; l++)
            if (a->levels[l] > 0) printf("%s %d", k++ ? "," : "", a->levels[l]);
        printf(" (%d-token prompts, %d new tokens each); %d run%s each after a warm-up\n", a->pp, a->tg, a->reps,
               a->reps > 1 ? "s" : "");
        for (int i = 0; i < pl->n_skip; i++) printf("skipped %s: %s\n", pl->skip[i].what, pl->skip[i].why);
        fflush(stdout);
    }
    if (pl->n == 0) {
        fprintf(stderr, "weft bench: no device to run on (--devices %s)\n", a->devices);
        free(pl);
        return 1;
    }
    double cpu_bw = 0, best;
    for (int i = 0; i < pl->n && cpu_bw == 0; i++)
        if (runs_on_cpu(&pl->devs[i])) {
            weft_cli_progress("measuring the memory read bandwidth (%d threads)...", a->threads);
            cpu_bw = weft_bench_membw(a->threads, 3, &best);
            weft_cli_progress_clear();
            if (cpu_bw == 0) cpu_bw = -1;  /* tried */
        }
    struct model_desc md = {"", "", 0};
    char header_model[300];
    int n_ok = 0, n_failed = 0, shown = 0;
    for (int i = 0; i < pl->n; i++) {
        struct dev *d = &pl->devs[i];
        measure(o, a, d, &md);
        device_bandwidth(d, cpu_bw);
        n_ok += d->ok;
        n_failed += !d->ok;
        if (o->json) continue;
        if (!shown) {  /* the model is known once one device has loaded it */
            if (*md.name) snprintf(header_model, sizeof header_model, "%s (%s, %.1f MiB of weights read per token)",
                                   md.name, md.type, md.wbytes / 1048576.0);
            else snprintf(header_model, sizeof header_model, "%s", o->model ? o->model : "the default model");
            printf("model: %s\n\n", header_model);
            table_header(a, w_name);
            shown = 1;
        }
        row_cells(d, a, md.wbytes, w_name);
        fflush(stdout);
    }
    /* the JSON, on stdout with --json, and in PREFIX.json; the plot */
    json_t *devs = json_array(), *skip = json_array(), *lv = json_array();
    for (int i = 0; i < pl->n; i++) json_array_append_new(devs, dev_json(&pl->devs[i], a, md.wbytes));
    for (int i = 0; i < pl->n_skip; i++)
        json_array_append_new(skip, json_pack("{s:s,s:s}", "device", pl->skip[i].what, "reason", pl->skip[i].why));
    for (int l = 0; l < a->n_levels; l++)
        if (a->levels[l] > 0) json_array_append_new(lv, json_integer(a->levels[l]));
    char fj[1024], fs[1024], fp[1024];
    snprintf(fj, sizeof fj, "%s.json", a->out_prefix);
    snprintf(fs, sizeof fs, "%s.svg", a->out_prefix);
    snprintf(fp, sizeof fp, "%s.png", a->out_prefix);
    json_t *root = json_pack("{s:s,s:s,s:f,s:i,s:i,s:o,s:i,s:i,s:o,s:o,s:{s:s,s:s,s:s}}", "model", md.name,
                             "type", md.type, "weight_bytes_per_token", md.wbytes, "prompt_tokens", a->pp,
                             "new_tokens", a->tg,
                             "levels", lv, "runs", a->reps, "threads", a->threads, "devices", devs, "skipped", skip,
                             "files", "json", fj, "svg", fs, "png", fp);
    json_object_set_new(root, "cpu_membw_gbs", cpu_bw > 0 ? json_real(cpu_bw) : json_null());
    char *str = root ? json_dumps(root, JSON_REAL_PRECISION(6) | JSON_INDENT(1)) : NULL;
    rc = n_failed || !n_ok ? 1 : 0;
    make_parents(a->out_prefix);
    FILE *f = str ? fopen(fj, "w") : NULL;
    int json_ok = f != NULL;
    if (f) json_ok = fputs(str, f) >= 0 && fputc('\n', f) >= 0;
    if (f && fclose(f)) json_ok = 0;
    if (!json_ok) {
        fprintf(stderr, "weft bench: cannot write %s: %s\n", fj, str ? strerror(errno) : "out of memory");
        rc = 1;
    }
    int plot_ok = n_ok > 0 && write_plot(pl, a, &md, fs, fp) == 0;
    if (n_ok > 0 && !plot_ok) rc = 1;
    if (o->json && str) puts(str);
    else if (!o->json) {
        printf("\n");
        for (int i = 0; i < pl->n; i++)
            if (!pl->devs[i].ok) printf("%s failed: %s\n", pl->devs[i].id, pl->devs[i].error);
        for (int i = 0; i < pl->n; i++) {
            const struct dev *d = &pl->devs[i];
            if (d->ok && d->bw_source)
                printf("bandwidth of %s: %.1f GB/s (%s)\n", d->id, d->bw,
                       !strcmp(d->bw_source, "env") ? "from WEFT_<BACKEND>_BW_GBS"
                       : !strcmp(d->bw_source, "measured") ? "the CPU's measured read bandwidth"
                                                           : "datasheet peak");
        }
        if (json_ok) printf("wrote %s%s%s%s%s\n", fj, plot_ok ? ", " : "", plot_ok ? fs : "", plot_ok ? ", " : "",
                            plot_ok ? fp : "");
    }
    free(str);
    json_decref(root);
    free(pl);
    return rc;
}
