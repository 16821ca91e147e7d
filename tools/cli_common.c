#include "tools/cli_common.h"

#include <errno.h>
#include <stdarg.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/split.h"
#include "tools/cli.h"

void weft_cli_opts_default(struct cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->n_predict = 128;
    o->parse_special = true;
    weft_sampling_params_default(&o->sp);
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "weft: %s expects an integer in [%d, %d], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 1;
}

static int parse_float(const char *opt, const char *s, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (*end || end == s || !isfinite(v)) {
        fprintf(stderr, "weft: %s expects a number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 1;
}

int weft_cli_parse_common(struct cli_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    bool has_val = *i + 1 < argc;
    const char *val = has_val ? argv[*i + 1] : NULL;
#define VAL() do { if (!has_val) { fprintf(stderr, "weft: %s needs a value\n", a); return -1; } (*i)++; } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model = val; return 1; }
    if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { VAL(); o->prompt = val; return 1; }
    if (!strcmp(a, "--device") || !strcmp(a, "-d")) { VAL(); o->device = val; return 1; }
    if (!strcmp(a, "--split")) { VAL(); o->split = val; return 1; }
    if (!strcmp(a, "--experts-on")) { VAL(); o->experts_on = val; return 1; }
    if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { VAL(); return parse_int(a, val, 0, 1 << 24, &o->n_predict); }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { VAL(); return parse_int(a, val, 1, 1024, &o->n_threads); }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { VAL(); return parse_int(a, val, 1, 1 << 24, &o->n_ctx); }
    if (!strcmp(a, "-b") || !strcmp(a, "--batch")) { VAL(); return parse_int(a, val, 1, 1 << 16, &o->batch); }
    if (!strcmp(a, "--temp")) { VAL(); return parse_float(a, val, &o->sp.temperature); }
    if (!strcmp(a, "--top-k")) { VAL(); return parse_int(a, val, 0, 1 << 30, &o->sp.top_k); }
    if (!strcmp(a, "--top-p")) { VAL(); return parse_float(a, val, &o->sp.top_p); }
    if (!strcmp(a, "--min-p")) { VAL(); return parse_float(a, val, &o->sp.min_p); }
    if (!strcmp(a, "--repeat-penalty")) { VAL(); return parse_float(a, val, &o->sp.repeat_penalty); }
    if (!strcmp(a, "--repeat-last-n")) { VAL(); return parse_int(a, val, 0, 1 << 20, &o->sp.repeat_last_n); }
    if (!strcmp(a, "--frequency-penalty")) { VAL(); return parse_float(a, val, &o->sp.frequency_penalty); }
    if (!strcmp(a, "--presence-penalty")) { VAL(); return parse_float(a, val, &o->sp.presence_penalty); }
    if (!strcmp(a, "--logprobs")) { VAL(); return parse_int(a, val, 0, WEFT_MAX_LOGPROBS, &o->sp.n_logprobs); }
    if (!strcmp(a, "--seed")) {
        VAL();
        char *end;
        errno = 0;
        unsigned long long v = strtoull(val, &end, 10);
        if (errno || *end || end == val) { fprintf(stderr, "weft: --seed expects an integer\n"); return -1; }
        o->sp.seed = v;
        return 1;
    }
    if (!strcmp(a, "--stop")) {
        VAL();
        if (!*val) { fprintf(stderr, "weft: --stop expects a non-empty string\n"); return -1; }
        if (o->n_stops >= CLI_MAX_STOPS) { fprintf(stderr, "weft: at most %d --stop strings\n", CLI_MAX_STOPS); return -1; }
        o->stops[o->n_stops++] = val;
        return 1;
    }
    if (!strcmp(a, "--json")) { o->json = true; return 1; }
    if (!strcmp(a, "--no-bos")) { o->no_bos = true; return 1; }
    if (!strcmp(a, "--no-parse-special")) { o->parse_special = false; return 1; }
    if (!strcmp(a, "--parse-special")) { o->parse_special = true; return 1; }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { o->verbose = true; return 1; }
#undef VAL
    return 0;
}

void weft_cli_usage_common(void) { weft_cli_usage_common_to(stderr); }

void weft_cli_usage_common_to(FILE *f)
{
    fprintf(f,
            "  -m, --model FILE        GGUF model (default: SmolLM2-135M-Instruct Q4_1 from the cache)\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  -n, --n-predict N       tokens to generate (default 128)\n"
            "  --device SPEC           cpu (default), vulkan:N, cuda:N, hip:N (see weft devices)\n"
            "  --split DEV=N,...       layers over several devices, in order, e.g. cpu=10,vulkan:0=20;\n"
            "                          a last DEV without =N takes the remaining layers (cpu=10,vulkan:0)\n"
            "  --experts-on DEV        a mixture of experts' FFN (router, experts, shared experts) on DEV,\n"
            "                          the rest where --device / --split put it (llama.cpp's --cpu-moe: cpu)\n"
            "  -t, --threads N         CPU threads (default: all cores)\n"
            "  -c, --ctx N             context length (default: the model's)\n"
            "  --temp T --top-k K --top-p P --min-p P --seed S\n"
            "  --repeat-penalty R --repeat-last-n N --frequency-penalty F --presence-penalty P\n"
            "  --stop TEXT             end the generation where TEXT appears (repeatable)\n"
            "  --logprobs K            report top-K logprobs per generated token (JSON)\n"
            "  --json                  print one JSON object instead of streaming text\n"
            "  --no-bos                do not add BOS; --no-parse-special: treat <|...|> as text\n");
}

void weft_cli_fail(const char *what)
{
    const char *e = weft_last_error();
    fprintf(stderr, "weft: %s%s%s\n", what, *e ? ": " : "", e);
}

/* The split's backends and the experts' one, closed by weft_cli_close (one model per
 * process). */
static struct weft_split split;
static struct weft_backend *experts_be;

int weft_cli_open(const struct cli_opts *o, struct weft_backend **be, struct weft_model **m)
{
    *be = NULL;
    *m = NULL;
    char *def = NULL;
    const char *path = o->model;
    if (!path) {
        def = weft_default_model_path();
        if (!def) return 1;
        path = def;
    }
    weft_status st;
    if (o->experts_on && weft_backend_open(o->experts_on, o->n_threads, &experts_be) != WEFT_OK) {
        weft_cli_fail("cannot open the --experts-on device");
        free(def);
        return 1;
    }
    if (o->split) {
        if (weft_split_open(o->split, o->n_threads, &split) != WEFT_OK) {
            if (!strncmp(weft_last_error(), "--split", 7)) fprintf(stderr, "weft: %s\n", weft_last_error());
            else weft_cli_fail("cannot open device");
            free(def);
            return 1;
        }
        *be = split.parts[0].be;
        st = weft_model_load_placed(path, split.parts, split.n_parts, experts_be, m);
    } else {
        if (weft_backend_open(o->device, o->n_threads, be) != WEFT_OK) {
            weft_cli_fail("cannot open device");
            free(def);
            return 1;
        }
        struct weft_split_part whole = {*be, 0};
        st = weft_model_load_placed(path, &whole, 1, experts_be, m);
    }
    if (st != WEFT_OK) {
        fprintf(stderr, "weft: cannot load model: %s\n", weft_last_error());
        if (o->split) weft_split_close(&split);
        else weft_backend_close(*be);
        weft_backend_close(experts_be);
        experts_be = NULL;
        *be = NULL;
        free(def);
        return 1;
    }
    free(def);
    return 0;
}

void weft_cli_close(struct weft_backend *be, struct weft_model *m)
{
    weft_model_free(m);
    if (split.n_owned) weft_split_close(&split);
    else weft_backend_close(be);
    weft_backend_close(experts_be);
    experts_be = NULL;
}

double weft_cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int weft_cli_parse_u32(const char *cmd, const char *flag, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "weft %s: %s expects an integer in %u..%u\n", cmd, flag, lo, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

void weft_cli_unknown_option(const char *cmd, const char *arg, bool last)
{
    if (arg[0] != '-')
        fprintf(stderr, "weft %s: unexpected argument '%s' (weft %s --help lists the options)\n", cmd, arg, cmd);
    else if (last)
        fprintf(stderr, "weft %s: unknown option '%s', or it needs a value (weft %s --help lists the options)\n", cmd,
                arg, cmd);
    else
        fprintf(stderr, "weft %s: unknown option '%s' (weft %s --help lists the options)\n", cmd, arg, cmd);
}

static int progress_tty = -1;  /* unknown yet */
static bool progress_shown;

void weft_cli_progress(const char *fmt, ...)
{
    if (progress_tty < 0) progress_tty = isatty(STDERR_FILENO);
    if (!progress_tty) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    progress_shown = true;
}

void weft_cli_progress_clear(void)
{
    if (!progress_shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    progress_shown = false;
}
