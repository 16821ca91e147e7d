/* Options shared by the model-running subcommands and the helpers that open
 * a backend + model from them. */
#ifndef WEFT_CLI_COMMON_H
#define WEFT_CLI_COMMON_H

#include <stdbool.h>
#include <stdio.h>

#include "core/model.h"
#include "core/sampler.h"

#define CLI_MAX_STOPS 16

struct cli_opts {
    const char *model, *prompt, *device;
    const char *split;             /* --split cpu=2,vulkan:0=3, or NULL */
    const char *experts_on;        /* --experts-on cpu: a mixture's FFN (router, experts) on that device */
    int n_predict, n_threads, n_ctx, batch;
    bool json, no_bos, parse_special, verbose;
    struct weft_sampling_params sp;
    const char *stops[CLI_MAX_STOPS];  /* --stop, in order */
    uint32_t n_stops;
};

void weft_cli_opts_default(struct cli_opts *o);
/* Parse one option at argv[*i] (advancing *i past its value). Returns 1 if
 * consumed, 0 if not a shared option, -1 on a usage error (printed). */
int weft_cli_parse_common(struct cli_opts *o, int argc, char **argv, int *i);
/* Print the shared options' usage lines (on stderr; _to: on f). */
void weft_cli_usage_common(void);
void weft_cli_usage_common_to(FILE *f);

/* Open the backend(s) and model named by o (default model when -m is absent;
 * with --split, one backend per distinct device and *be is the first).
 * Prints a one-line error and returns non-zero on failure. */
int weft_cli_open(const struct cli_opts *o, struct weft_backend **be, struct weft_model **m);
void weft_cli_close(struct weft_backend *be, struct weft_model *m);

double weft_cli_now_ms(void);
/* A status line on stderr, rewritten in place, when stderr is a terminal
 * (nothing otherwise): weft_cli_progress("pp512: run 2/5"); weft_cli_progress_clear()
 * erases it before a result line is printed. */
void weft_cli_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void weft_cli_progress_clear(void);
void weft_cli_fail(const char *what); /* "weft: <what>: <last error>" */
/* "weft CMD: unknown option 'ARG' (...)" on stderr; last: ARG ends argv
 * (it may be a known flag missing its value: the message says so too). */
void weft_cli_unknown_option(const char *cmd, const char *arg, bool last);
/* An integer flag value in lo..hi; otherwise prints "weft CMD: FLAG expects ..." and returns -1. */
int weft_cli_parse_u32(const char *cmd, const char *flag, const char *v, uint32_t lo, uint32_t hi, uint32_t *out);

#endif
