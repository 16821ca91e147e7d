/* `weft run` and `weft tokenize`. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/cli_common.h"
#include "tools/generate.h"

static void usage_run(FILE *f)
{
    fprintf(f, "usage: weft run [-m MODEL] -p TEXT [-n N] [--grammar FILE | --grammar-json] [options]\n"
                    "  --grammar FILE  constrain the output to the grammar in FILE (core/grammar.h's format)\n"
                    "  --grammar-json  constrain the output to a JSON object\n");
    weft_cli_usage_common_to(f);
}

static bool is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

/* The whole of path, malloc'd (NUL-terminated, *len bytes), or NULL. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap * 2 + 4096 + 1;
            char *b = realloc(buf, cap);
            if (!b) { free(buf); fclose(f); return NULL; }
            buf = b;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) { free(buf); return NULL; }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static json_t *json_grammar(const struct gen_result *r)
{
    return json_pack("{s:I,s:I,s:I,s:f}", "masks", (json_int_t)r->grammar_masks, "mask_hits",
                     (json_int_t)r->grammar_mask_hits, "resampled", (json_int_t)r->grammar_resampled, "grammar_ms",
                     r->grammar_ms);
}

static json_t *json_ids(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static void print_json(const struct cli_opts *o, const int32_t *prompt, size_t n_prompt, const struct gen_result *r,
                       json_t *grammar)
{
    json_t *root = json_object();
    json_object_set_new(root, "prompt_ids", json_ids(prompt, n_prompt));
    json_object_set_new(root, "ids", json_ids(r->ids, r->n));
    json_object_set_new(root, "text", json_stringn(r->text, r->text_len));
    if (o->sp.n_logprobs > 0) {
        json_t *lp = json_array();
        for (size_t i = 0; i < r->n; i++) {
            const struct weft_sample *s = &r->samples[i];
            json_t *e = json_object(), *top = json_array();
            json_object_set_new(e, "id", json_integer(s->id));
            json_object_set_new(e, "logprob", json_real(s->logprob));
            for (int k = 0; k < s->n_top; k++)
                json_array_append_new(top, json_pack("[if]", (int)s->top_id[k], (double)s->top_logprob[k]));
            json_object_set_new(e, "top", top);
            json_array_append_new(lp, e);
        }
        json_object_set_new(root, "logprobs", lp);
    }
    json_t *t = json_object();
    json_object_set_new(t, "prompt_tokens", json_integer((json_int_t)r->n_prompt));
    json_object_set_new(t, "prompt_ms", json_real(r->prompt_ms));
    json_object_set_new(t, "prompt_tokens_per_s", json_real(r->prompt_ms > 0 ? r->n_prompt * 1e3 / r->prompt_ms : 0));
    json_object_set_new(t, "gen_tokens", json_integer((json_int_t)r->n));
    json_object_set_new(t, "gen_ms", json_real(r->gen_ms));
    json_object_set_new(t, "gen_tokens_per_s", json_real(weft_gen_tps(r)));   /* n - 1 decode steps in gen_ms */
    json_object_set_new(root, "timings", t);
    if (grammar) json_object_set_new(root, "grammar", grammar);
    json_object_set_new(root, "stop", json_string(r->stopped_eog ? "eog" : r->stopped_string ? "stop" : r->stopped_ctx ? "context"
                                                  : r->stopped_grammar ? "grammar" : "length"));
    char *s = json_dumps(root, JSON_ENSURE_ASCII | JSON_REAL_PRECISION(7));
    if (s) puts(s);
    free(s);
    json_decref(root);
}

int weft_cmd_run(int argc, char **argv)
{
    struct cli_opts o;
    weft_cli_opts_default(&o);
    const char *grammar_file = NULL;
    bool grammar_json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--grammar")) {
            if (i + 1 >= argc) { fprintf(stderr, "weft run: --grammar needs a FILE\n"); return 2; }
            grammar_file = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--grammar-json")) { grammar_json = true; continue; }
        int r = weft_cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            if (is_help(argv[i])) {
                usage_run(stdout);
                return 0;
            }
            fprintf(stderr, "weft run: unknown option '%s'\n", argv[i]);
            usage_run(stderr);
            return 2;
        }
    }
    if (!o.prompt) { fprintf(stderr, "weft run: -p TEXT is required\n"); usage_run(stderr); return 2; }
    if (grammar_file && grammar_json) {
        fprintf(stderr, "weft run: --grammar and --grammar-json exclude each other\n");
        return 2;
    }
    struct weft_grammar *g = NULL;
    if (grammar_file || grammar_json) {
        size_t len = 0;
        char *text = grammar_json ? (char *)weft_grammar_json_object : read_file(grammar_file, &len);
        if (!text) { fprintf(stderr, "weft: cannot read %s\n", grammar_file); return 1; }
        if (grammar_json) len = strlen(text);
        weft_status gst = weft_grammar_parse(text, len, &g);
        if (!grammar_json) free(text);
        if (gst != WEFT_OK) {
            fprintf(stderr, "weft: %s: %s\n", grammar_json ? "built-in JSON grammar" : grammar_file, weft_last_error());
            return 1;
        }
    }

    struct weft_backend *be;
    struct weft_model *m;
    if (weft_cli_open(&o, &be, &m)) { weft_grammar_unref(g); return 1; }
    int rc = 1;
    struct weft_engine *e = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    struct gen_result r = {0};
    if (weft_tokenize(weft_model_tokenizer(m), o.prompt, strlen(o.prompt), !o.no_bos, o.parse_special, &prompt, &n_prompt) != WEFT_OK) {
        weft_cli_fail("cannot tokenize the prompt");
        goto out;
    }
    if (n_prompt == 0) { fprintf(stderr, "weft: the prompt has no tokens (and no BOS)\n"); goto out; }
    uint32_t n_ctx = o.n_ctx ? (uint32_t)o.n_ctx : weft_model_hparams(m)->n_ctx_train;
    if (n_prompt > n_ctx) {
        fprintf(stderr, "weft: prompt is %zu tokens, longer than the context of %u (-c to change)\n", n_prompt, n_ctx);
        goto out;
    }
    struct weft_sampler *probe = NULL;   /* the options checked before any work */
    if (weft_sampler_init(&o.sp, (int32_t)weft_model_hparams(m)->n_vocab, &probe) != WEFT_OK) { weft_cli_fail("bad sampling options"); goto out; }
    weft_sampler_free(probe);
    if (weft_gen_engine(m, n_ctx, (uint32_t)o.batch, &e) != WEFT_OK) { weft_cli_fail("cannot create the engine"); goto out; }
    if (!o.json) { fputs(o.prompt, stdout); fflush(stdout); }
    struct gen_opts go = {.sp = &o.sp, .n_predict = o.n_predict, .stops = o.stops, .n_stops = o.n_stops,
                          .grammar = g, .stream = o.json ? NULL : stdout};
    weft_status st = weft_gen_run(e, m, prompt, n_prompt, &go, &r);
    if (st != WEFT_OK) { fputc('\n', stdout); weft_cli_fail("generation failed"); goto out; }
    if (o.json) {
        print_json(&o, prompt, n_prompt, &r, g ? json_grammar(&r) : NULL);
    } else {
        fprintf(stdout, "\n");
        if (r.stopped_ctx) fprintf(stderr, "weft: stopped: the context of %u tokens is full (-c to change)\n", n_ctx);
        fprintf(stderr, "\nprompt: %zu tokens in %.1f ms (%.1f tokens/s); generation: %zu tokens in %.1f ms (%.1f tokens/s)\n",
                r.n_prompt, r.prompt_ms, r.prompt_ms > 0 ? r.n_prompt * 1e3 / r.prompt_ms : 0.0,
                r.n, r.gen_ms, weft_gen_tps(&r));
        if (g) {
            fprintf(stderr, "grammar: %.2f ms in all (%.3f ms/token), %llu draws resampled, %llu masks (%llu from the "
                    "cache)%s\n", r.grammar_ms, r.n ? r.grammar_ms / (double)r.n : 0.0,
                    (unsigned long long)r.grammar_resampled, (unsigned long long)r.grammar_masks,
                    (unsigned long long)r.grammar_mask_hits, r.stopped_grammar ? "; the grammar ended the text" : "");
        }
    }
    rc = 0;
out:
    weft_grammar_unref(g);
    weft_gen_result_free(&r);
    free(prompt);
    weft_engine_free(e);
    weft_cli_close(be, m);
    return rc;
}

int weft_cmd_tokenize(int argc, char **argv)
{
    struct cli_opts o;
    weft_cli_opts_default(&o);
    o.parse_special = false;
    bool no_special = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-special")) { no_special = true; continue; }
        int r = weft_cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            bool help = is_help(argv[i]);
            if (!help) fprintf(stderr, "weft tokenize: unknown option '%s'\n", argv[i]);
            fprintf(help ? stdout : stderr,
                    "usage: weft tokenize [-m MODEL] -p TEXT [--json] [--parse-special] [--no-special]\n"
                    "  --no-special: do not add BOS/EOS\n");
            return help ? 0 : 2;
        }
    }
    if (!o.prompt) { fprintf(stderr, "weft tokenize: -p TEXT is required\n"); return 2; }
    struct weft_gguf *g = NULL;
    struct weft_tokenizer *t = NULL;
    char *def = NULL;
    const char *path = o.model ? o.model : (def = weft_default_model_path());
    if (!path) return 1;
    int rc = 1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (weft_gguf_open(path, &g) != WEFT_OK || weft_tokenizer_load(g, &t) != WEFT_OK) {
        fprintf(stderr, "weft: cannot load tokenizer from %s: %s\n", path, weft_last_error());
        goto out;
    }
    if (weft_tokenize(t, o.prompt, strlen(o.prompt), !no_special && !o.no_bos, o.parse_special, &ids, &n) != WEFT_OK) {
        weft_cli_fail("cannot tokenize");
        goto out;
    }
    if (o.json) {
        json_t *root = json_object(), *pieces = json_array();
        json_object_set_new(root, "ids", json_ids(ids, n));
        for (size_t i = 0; i < n; i++) json_array_append_new(pieces, json_string(weft_tokenizer_piece(t, ids[i])));
        json_object_set_new(root, "pieces", pieces);
        char *s = json_dumps(root, JSON_ENSURE_ASCII);
        if (s) puts(s);
        free(s);
        json_decref(root);
    } else {
        for (size_t i = 0; i < n; i++) printf("%6d '%s'\n", ids[i], weft_tokenizer_piece(t, ids[i]));
        printf("%zu tokens\n", n);
    }
    rc = 0;
out:
    free(ids);
    weft_tokenizer_free(t);
    weft_gguf_close(g);
    free(def);
    return rc;
}
