/* core/jinja against Python's jinja2 (the oracle: tests/templates/
 * render_ref.py renders every template of ../shared/templates over
 * tests/templates/conversations.json the way Hugging Face's
 * apply_chat_template does, add_generation_prompt both ways, a fixed date):
 * each render byte-identical, each of the reference's refusals a refusal
 * here with its message (a template's raise_exception word for word).
 * Then the sandbox's bounds and the refusals at compile time, by name. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/jinja.h"
#include "tests/check.h"

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)sz + 1);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[sz] = 0;
    *n = (size_t)sz;
    return p;
}

static json_t *ref;
static char tdir[1024];

/* The first byte where two texts differ, with a little context, on stderr. */
static void show_diff(const char *name, size_t ci, const char *want, const char *got, size_t n_got)
{
    size_t i = 0, nw = strlen(want);
    while (i < nw && i < n_got && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s case %zu differs at byte %zu:\n    want: %.*s\n    got:  %.*s\n", name, ci, i,
            (int)(nw - from < 120 ? nw - from : 120), want + from, (int)(n_got - from < 120 ? n_got - from : 120),
            got + from);
}

static void every_template_renders_as_jinja2(void)
{
    json_t *cases = json_object_get(ref, "cases"), *temps = json_object_get(ref, "templates");
    struct weft_jinja_limits lim = {.now = json_integer_value(json_object_get(ref, "now"))};
    const char *name;
    json_t *t;
    size_t n_tmpl = 0, n_ok = 0, n_renders = 0;
    json_object_foreach(temps, name, t) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", tdir, name);
        size_t n;
        char *src = read_file(path, &n);
        CHECK_MSG(src != NULL, "cannot read %s", path);
        if (!src) continue;
        n_tmpl++;
        struct weft_jinja *j = NULL;
        weft_status st = weft_jinja_compile(src, n, &j);
        free(src);
        json_t *ce = json_object_get(t, "compile_error");
        if (ce) {
            CHECK_MSG(st != WEFT_OK, "%s: jinja2 refuses it (%s), weft compiled it", name, json_string_value(ce));
            n_ok += st != WEFT_OK;
            weft_jinja_free(j);
            continue;
        }
        if (st != WEFT_OK) {
            CHECK_MSG(0, "%s: %s", name, weft_last_error());
            continue;
        }
        json_t *results = json_object_get(t, "results");
        size_t bad = 0;
        for (size_t ci = 0; ci < json_array_size(results); ci++) {
            const char *vars = json_string_value(json_array_get(cases, ci));
            json_t *r = json_array_get(results, ci);
            char *out = NULL;
            size_t n_out = 0;
            st = weft_jinja_render(j, vars, strlen(vars), &lim, &out, &n_out);
            n_renders++;
            json_t *ok = json_object_get(r, "ok"), *err = json_object_get(r, "error");
            if (ok) {
                const char *want = json_string_value(ok);
                if (st != WEFT_OK) {
                    if (!bad++) fprintf(stderr, "  %s case %zu: weft failed: %s\n", name, ci, weft_last_error());
                } else if (n_out != json_string_length(ok) || memcmp(out, want, n_out)) {
                    if (!bad++) show_diff(name, ci, want, out, n_out);
                }
            } else {
                /* the reference refused: so must weft, with its message */
                const char *msg = json_string_value(err);
                if (st == WEFT_OK || !strstr(weft_last_error(), msg)) {
                    if (!bad++)
                        fprintf(stderr, "  %s case %zu: jinja2 refused (%s), weft %s%s\n", name, ci, msg,
                                st == WEFT_OK ? "rendered" : "said: ", st == WEFT_OK ? "" : weft_last_error());
                }
            }
            free(out);
        }
        weft_jinja_free(j);
        CHECK_MSG(bad == 0, "%s: %zu of %zu renders differ from jinja2's", name, bad, json_array_size(results));
        n_ok += bad == 0;
    }
    printf("  %zu of %zu templates as jinja2 renders them (%zu renders)\n", n_ok, n_tmpl, n_renders);
    CHECK(n_tmpl >= 50);
}

static weft_status render(const char *tmpl, const char *vars, char **out, const struct weft_jinja_limits *lim)
{
    struct weft_jinja *j = NULL;
    weft_status st = weft_jinja_compile(tmpl, strlen(tmpl), &j);
    if (st == WEFT_OK) st = weft_jinja_render(j, vars, strlen(vars), lim, out, NULL);
    weft_jinja_free(j);
    return st;
}

static void refusals_and_bounds(void)
{
    char *out = NULL;
    /* constructs outside the subset: refused at compile time, named */
    static const struct { const char *src, *word; } bad[] = {
        {"{% include 'x.jinja' %}", "include"}, {"{% extends 'base' %}", "extends"},
        {"{{ x | from_json }}", "from_json"},  {"{% if x is prime %}{% endif %}", "prime"},
        {"{% for x in y recursive %}{% endfor %}", "recursive"}, {"{% if x %}", "endif"},
        {"{{ 'unclosed }}", "string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct weft_jinja *j = NULL;
        weft_status st = weft_jinja_compile(bad[i].src, strlen(bad[i].src), &j);
        CHECK_MSG(st != WEFT_OK && strstr(weft_last_error(), bad[i].word), "%s: %s", bad[i].src,
                  st == WEFT_OK ? "compiled" : weft_last_error());
        weft_jinja_free(j);
    }
    /* bounded: steps, output */
    struct weft_jinja_limits lim = {.max_steps = 10000};
    CHECK(render("{% for i in range(100000) %}{{ i }}{% endfor %}", "{}", &out, &lim) != WEFT_OK &&
          strstr(weft_last_error(), "steps"));
    struct weft_jinja_limits small = {.max_output = 1000};
    CHECK(render("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", "{}", &out, &small) != WEFT_OK &&
          strstr(weft_last_error(), "output"));
    /* the sandbox: no mutation of a list */
    CHECK(render("{% set l = [] %}{{ l.append(1) }}", "{}", &out, NULL) != WEFT_OK &&
          strstr(weft_last_error(), "unsafe"));
    /* raise_exception: the message, word for word */
    CHECK(render("{{ raise_exception('No system role, please.') }}", "{}", &out, NULL) != WEFT_OK &&
          !strcmp(weft_last_error(), "No system role, please."));
    /* bad variables */
    CHECK(render("x", "[1]", &out, NULL) == WEFT_ERR_INVALID_ARG);
    CHECK(render("x", "{\"a\":", &out, NULL) == WEFT_ERR_INVALID_ARG);
    /* a few semantics jinja2 has */
    static const struct { const char *src, *vars, *want; } ok[] = {
        {"{{ 1 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 7 % 3 }}", "{}", "0.5 3 -4 1024 1"},
        {"{{ [1, 'a', none, true] }} {{ {'k': 1.0} }}", "{}", "[1, 'a', None, True] {'k': 1.0}"},
        {"{{ x | tojson }}", "{\"x\": {\"a\": [1, 2.5, \"é\\n\"], \"b\": null}}", "{\"a\": [1, 2.5, \"é\\n\"], \"b\": null}"},
        {"{{ 'a,b,,c'.split(',') }} {{ ' x y '.split() }} {{ 'héllo'[1:3] }}", "{}", "['a', 'b', '', 'c'] ['x', 'y'] él"},
        {"{% for k, v in d.items() %}{{ loop.index }}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}",
         "{\"d\": {\"b\": 1, \"a\": 2}}", "1b=1,2a=2"},
        {"{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "{}", "6"},
        {"{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}", "{}", "[1B][23]"},
        {"  {%- if true %}\n  yes\n  {%- endif %}\n", "{}", "  yes"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        out = NULL;
        weft_status st = render(ok[i].src, ok[i].vars, &out, NULL);
        CHECK_MSG(st == WEFT_OK && !strcmp(out, ok[i].want), "%s: got [%s] want [%s] %s", ok[i].src, out ? out : "",
                  ok[i].want, st == WEFT_OK ? "" : weft_last_error());
        free(out);
    }
}

/* `weft template` (the CLI over the model file and a conversation) prints
 * what jinja2 renders: one template, every case, through temp files. */
static void the_cli_prints_the_reference(void)
{
    const char *name = "Qwen-Qwen3-0.6B.jinja";
    json_t *cases = json_object_get(ref, "cases");
    json_t *results = json_object_get(json_object_get(json_object_get(ref, "templates"), name), "results");
    CHECK(json_array_size(results) == json_array_size(cases) && json_array_size(cases) >= 12);
    char model[1024];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    size_t same = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_error_t je;
        json_t *v = json_loads(json_string_value(json_array_get(cases, ci)), 0, &je);
        bool gen = json_is_true(json_object_get(v, "add_generation_prompt"));
        json_t *msgs = json_incref(json_object_get(v, "messages")), *tools = json_incref(json_object_get(v, "tools"));
        json_object_del(v, "messages");
        json_object_del(v, "tools");
        json_object_del(v, "add_generation_prompt");
        char mpath[64], tpath[64];
        snprintf(mpath, sizeof mpath, "/tmp/weft-tmpl-m-%d.json", (int)getpid());
        snprintf(tpath, sizeof tpath, "/tmp/weft-tmpl-t-%d.json", (int)getpid());
        json_dump_file(msgs, mpath, 0);
        if (tools) json_dump_file(tools, tpath, 0);
        char *kw = json_dumps(v, JSON_COMPACT);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "%s/weft template --raw -m %s --chat-template %s/%s --messages %s %s%s --kwargs '%s' %s",
                 WEFT_BUILD_DIR, model, tdir, name, mpath, tools ? "--tools " : "", tools ? tpath : "", kw,
                 gen ? "" : "--no-generation-prompt");
        FILE *p = popen(cmd, "r");
        char *got = calloc(1, 1 << 16);
        size_t n = p && got ? fread(got, 1, (1 << 16) - 1, p) : 0;
        int rc = p ? pclose(p) : -1;
        const char *want = json_string_value(json_object_get(json_array_get(results, ci), "ok"));
        bool ok = rc == 0 && want && n == strlen(want) && !memcmp(got, want, n);
        CHECK_MSG(ok, "weft template, case %zu: rc %d, %zu bytes vs %zu", ci, rc, n, want ? strlen(want) : 0);
        same += ok;
        free(got);
        free(kw);
        json_decref(v);
        json_decref(msgs);
        json_decref(tools);
        remove(mpath);
        remove(tpath);
    }
    printf("  weft template: %zu of %zu renders as jinja2's\n", same, json_array_size(cases));
}

int main(void)
{
    snprintf(tdir, sizeof tdir, "%s/templates", WEFT_SHARED_DIR);
    RUN(refusals_and_bounds);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/templates/render_ref.py %s %s/tests/templates/conversations.json",
             WEFT_SOURCE_DIR, tdir, WEFT_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    json_error_t je;
    ref = p ? json_loadf(p, 0, &je) : NULL;
    int rc = p ? pclose(p) : -1;
    if (!ref || rc != 0) {
        printf("SKIP: the jinja2 reference did not run (python3 with jinja2: scripts/install-deps.sh)\n");
        json_decref(ref);
        return check_summary();
    }
    RUN(every_template_renders_as_jinja2);
    RUN(the_cli_prints_the_reference);
    json_decref(ref);
    return check_summary();
}
