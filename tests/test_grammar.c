/* Constrained decoding (core/grammar.h): parse errors with line:column,
 * whole-text accept/reject (the built-in JSON grammar, classes, repetition
 * bounds, UTF-8 split across pieces), masks equal to a per-token check on
 * real vocabularies, and the engine: greedy JSON on SmolLM2 is a JSON
 * object, the same batched, preempted and continued. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/engine.h"
#include "core/gguf.h"
#include "core/grammar.h"
#include "core/tokenizer.h"
#include "backends/backend.h"
#include "tests/check.h"
#include "tools/cli.h"

static struct weft_grammar *parse(const char *text)
{
    struct weft_grammar *g = NULL;
    weft_status st = weft_grammar_parse(text, strlen(text), &g);
    CHECK_MSG(st == WEFT_OK, "%s: %s", text, weft_last_error());
    return g;
}

static bool matches(const struct weft_grammar *g, const char *text)
{
    return weft_grammar_match(g, text, strlen(text));
}

/* ---- parsing ---- */

static void parse_errors_name_line_column_and_what_was_expected(void)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"root ::= \"a\"\nfoo ::= [a-", "grammar: 2:9: unterminated character class: expected ']'"},
        {"root ::= bar", "grammar: 1:10: undefined rule 'bar'"},
        {"foo ::= \"x\"", "grammar: no rule 'root' (the start rule)"},
        {"root ::= \"a\"\n\nroot ::= \"b\"", "grammar: 3:1: rule 'root' is defined twice (first on line 1)"},
        {"root ::= x\nx ::= x \"a\" | \"b\"", "grammar: rule 'x' is left-recursive"},
        {"root ::= (\"a\"?)* \"b\"", "grammar: rule a group or repetition in 'root' is left-recursive"},
        {"root ::= \"a\" root", "grammar: rule 'root' can never end"},
        {"root ::= \"a\" )", "grammar: 1:14: unexpected ')' with no group open"},
        {"root ::= \"\\q\"", "grammar: 1:11: expected an escape"},
        {"root ::= [a]{3,2}", "grammar: 1:13: repetition {3,2}: the maximum is below the minimum"},
        {"root = \"a\"", "grammar: 1:6: expected '::=' after the rule name 'root'"},
        {"root ::= \"a\" | *", "grammar: 1:16: expected something to repeat before '*'"},
        {"root ::= \"a\n", "grammar: 1:10: unterminated literal"},
        {"root ::= ( \"a\" \nx ::= \"b\"", "grammar: 2:1: expected ')' before the next rule"},
        {"root ::= \"\\uD800\"", "grammar: 1:11: escape \\uD800 is not a Unicode scalar value"},
        {"root ::= \"é\" ?? $", "grammar: 1:17: expected a literal, a [class], a rule name, '(' or a repetition, got '$'"},
        {"root ::= [a-z]{2,x}", "grammar: 1:18: expected a number"},
        {"  # only a comment\n", "grammar: no rule 'root'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct weft_grammar *g = NULL;
        weft_status st = weft_grammar_parse(cases[i].text, strlen(cases[i].text), &g);
        /* a refused language (left recursion, no end) is the grammar's meaning, not its syntax */
        weft_status want = strstr(cases[i].msg, "recursive") || strstr(cases[i].msg, "never end") ? WEFT_ERR_INVALID_ARG
                                                                                                   : WEFT_ERR_FORMAT;
        CHECK_MSG(st == want && g == NULL, "case %zu parsed", i);
        const char *e = weft_last_error();
        CHECK_MSG(!strncmp(e, cases[i].msg, strlen(cases[i].msg)), "case %zu: got \"%s\", want \"%s...\"", i, e,
                  cases[i].msg);
        weft_grammar_unref(g);
    }
}

static void rules_span_lines_comments_and_references(void)
{
    struct weft_grammar *g = parse("# a comment\n"
                                   "root ::= greeting\n"
                                   "   \" \" name # trailing comment\n"
                                   "   | \"bye\"\n"
                                   "greeting ::= \"hi\" | \"hello\"\n"
                                   "name::=[A-Z][a-z]*\n");
    if (!g) return;
    CHECK(matches(g, "hi Bob"));
    CHECK(matches(g, "hello X"));
    CHECK(matches(g, "bye"));
    CHECK(!matches(g, "hi bob"));
    CHECK(!matches(g, "hi"));
    CHECK(!matches(g, "byebye"));
    CHECK(!matches(g, ""));
    weft_grammar_unref(g);
}

/* ---- whole-text matches ---- */

static void json_object_grammar_accepts_objects_and_rejects_the_rest(void)
{
    struct weft_grammar *g = parse(weft_grammar_json_object);
    if (!g) return;
    static const char *good[] = {
        "{}", " {\"a\": 1}\n", "{\"a\":[1,2.5e-3,-0,true,false,null,{\"b\":\"x\\n\\u00e9\\\"\"}],\"c\":\"é漢😀\"}",
        "{\n  \"k\": {\"n\": [ ], \"o\": { }},\n  \"e\": 1E+9\n}", "{\"\":\"\\/\\\\\\b\\f\\r\\t\"}",
        "{\"a\": \"\x7f\"}",
    };
    static const char *bad[] = {
        "[]", "{\"a\":}", "{\"a\":1,}", "{'a':1}", "{\"a\":\"\x01\"}", "{\"a\":01}", "{\"a\":\"\\x\"}",
        "{\"a\": 1} x", "{\"a\" 1}", "{\"a\":1.}", "{\"a\":-}", "{\"a\":\"\\u12G4\"}", "{\"a\":tru}", "{",
        "{\"a\":\"\xc3\x28\"}",                       /* invalid UTF-8 */
        "{\"a\":\"\xed\xa0\x80\"}",                   /* a surrogate */
        "{\"a\":\"\xc1\xbf\"}",                       /* overlong */
        "{\"a\":\"\xf4\x90\x80\x80\"}",               /* past U+10FFFF */
        "",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECK_MSG(matches(g, good[i]), "good %zu", i);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(!matches(g, bad[i]), "bad %zu", i);
    /* whitespace runs are bounded: a model cannot loop on them */
    char ws[64];
    for (int n = 40; n <= 41; n++) {   /* {"a": + n newlines + 1} */
        memcpy(ws, "{\"a\":", 5);
        memset(ws + 5, '\n', (size_t)n);
        memcpy(ws + 5 + n, "1}", 3);
        CHECK(matches(g, ws) == (n == 40));
    }
    CHECK(matches(g, " \t\r\n{}"));
    CHECK(!matches(g, "     {}"));
    CHECK(matches(g, "{}\n"));
    CHECK(!matches(g, "{} "));
    CHECK(!matches(g, "{}\n\n"));
    weft_grammar_unref(g);
}

static void char_classes_ranges_negation_and_escapes(void)
{
    struct weft_grammar *g = parse("root ::= [a-c0-9_]+ [^a-z\\n] [\\]\\-\\^\\[] [\\x41-\\u0043] [^]");
    if (!g) return;
    CHECK(matches(g, "a0_bX]Az"));
    CHECK(matches(g, "c9é-Bé"));
    CHECK(matches(g, "_😀^C\x01"));
    CHECK(!matches(g, "dX]Az"));          /* d is outside [a-c0-9_] */
    CHECK(!matches(g, "aq]Az"));          /* q is in the negated class */
    CHECK(!matches(g, "a\n]Az"));
    CHECK(!matches(g, "aX]Dz"));          /* D past \u0043 */
    CHECK(!matches(g, "aXaAz"));
    CHECK(!matches(g, "aX]A"));           /* [^] needs one character */
    weft_grammar_unref(g);
}

static void repetition_bounds(void)
{
    struct weft_grammar *g = parse("root ::= \"a\"{2,4} \"b\"{3} (\"cd\"){2,} \"e\"? \"f\"{0,2}");
    if (!g) return;
    CHECK(matches(g, "aabbbcdcd"));
    CHECK(matches(g, "aaaabbbcdcdcdcdeff"));
    CHECK(matches(g, "aaabbbcdcdf"));
    CHECK(!matches(g, "abbbcdcd"));       /* one a */
    CHECK(!matches(g, "aaaaabbbcdcd"));   /* five */
    CHECK(!matches(g, "aabbcdcd"));       /* two b */
    CHECK(!matches(g, "aabbbbcdcd"));
    CHECK(!matches(g, "aabbbcd"));        /* cd once */
    CHECK(!matches(g, "aabbbcdcdfff"));
    CHECK(!matches(g, "aabbbcdcdee"));
    weft_grammar_unref(g);
    g = parse("root ::= \"x\"{0} \"y\"+ | \"\"");
    if (!g) return;
    CHECK(matches(g, ""));
    CHECK(matches(g, "yyy"));
    CHECK(!matches(g, "xy"));
    weft_grammar_unref(g);
}

/* Bytes of a character in separate pieces: the state carries the partial
 * character, narrows it byte by byte and refuses invalid UTF-8 at once. */
static void utf8_split_across_pieces(void)
{
    struct weft_grammar *g = parse("root ::= \"é\" [α-ω]+ \"!\"?");
    if (!g) return;
    struct weft_grammar_state *s;
    CHECK(weft_grammar_state_new(g, NULL, &s) == WEFT_OK);
    if (!s) return;
    CHECK(weft_grammar_advance_bytes(s, "\xc3", 1) == WEFT_OK);
    CHECK(!weft_grammar_accepting(s));
    struct weft_grammar_state *c;
    CHECK(weft_grammar_state_clone(s, &c) == WEFT_OK);
    CHECK(weft_grammar_advance_bytes(c, "\xa8", 1) == WEFT_ERR_INVALID_ARG);   /* è, not é */
    CHECK(weft_grammar_advance_bytes(c, "\x28", 1) == WEFT_ERR_INVALID_ARG);   /* not a continuation */
    CHECK(weft_grammar_advance_bytes(s, "\xa9\xce", 2) == WEFT_OK);             /* é and half of α..ω */
    CHECK(weft_grammar_advance_bytes(s, "\xb1", 1) == WEFT_OK);                 /* α */
    CHECK(weft_grammar_accepting(s));
    CHECK(!weft_grammar_finished(s));
    CHECK(weft_grammar_advance_bytes(s, "\xcf", 1) == WEFT_OK);                 /* ω's first byte */
    CHECK(!weft_grammar_accepting(s));
    CHECK(weft_grammar_advance_bytes(s, "\x8a", 1) == WEFT_ERR_INVALID_ARG);   /* U+03CA is past ω */
    CHECK(weft_grammar_advance_bytes(s, "\x89!", 2) == WEFT_OK);
    CHECK(weft_grammar_finished(s));
    CHECK(weft_grammar_advance_bytes(s, "!", 1) == WEFT_ERR_INVALID_ARG);
    weft_grammar_state_free(c);
    weft_grammar_state_free(s);
    weft_grammar_unref(g);
    /* a first byte no completion of which can match is refused at once */
    g = parse("root ::= \"é\" | [\\u4e00-\\u4e01]");
    if (!g) return;
    CHECK(weft_grammar_state_new(g, NULL, &s) == WEFT_OK);
    CHECK(weft_grammar_advance_bytes(s, "\xc4", 1) == WEFT_ERR_INVALID_ARG);   /* U+0100..U+013F */
    CHECK(weft_grammar_advance_bytes(s, "\xe4\xb9", 2) == WEFT_ERR_INVALID_ARG); /* U+4E40.. */
    CHECK(weft_grammar_advance_bytes(s, "\xe4\xb8", 2) == WEFT_OK);
    CHECK(weft_grammar_advance_bytes(s, "\x82", 1) == WEFT_ERR_INVALID_ARG);   /* U+4E02 */
    CHECK(weft_grammar_advance_bytes(s, "\x81", 1) == WEFT_OK);
    CHECK(weft_grammar_finished(s));
    weft_grammar_state_free(s);
    weft_grammar_unref(g);
}

static void references_are_counted(void)
{
    struct weft_grammar *g = parse("root ::= \"a\"");
    if (!g) return;
    CHECK(weft_grammar_ref(g) == g);
    struct weft_grammar_state *s;
    CHECK(weft_grammar_state_new(g, NULL, &s) == WEFT_OK);
    weft_grammar_unref(g);
    weft_grammar_unref(g);   /* the state still holds one */
    CHECK(weft_grammar_advance_bytes(s, "a", 1) == WEFT_OK);
    CHECK(weft_grammar_finished(s));
    weft_grammar_state_free(s);
}

/* ---- masks on real vocabularies ---- */

static struct weft_tokenizer *load_tok(const char *path)
{
    struct weft_gguf *gg;
    struct weft_tokenizer *t = NULL;
    if (weft_gguf_open(path, &gg) != WEFT_OK) return NULL;
    if (weft_tokenizer_load(gg, &t) != WEFT_OK) t = NULL;
    weft_gguf_close(gg);
    return t;
}

/* The mask at s equals weft_grammar_allowed token by token; returns how many
 * tokens are allowed. */
static uint32_t check_mask(const struct weft_grammar_state *s, const struct weft_grammar_vocab *v, uint32_t *mask,
                           const char *what)
{
    CHECK(weft_grammar_mask(s, mask) == WEFT_OK);
    uint32_t n = 0, bad = 0;
    for (int32_t id = 0; id < weft_grammar_vocab_n(v); id++) {
        bool m = mask[id / 32] >> (id % 32) & 1, a = weft_grammar_allowed(s, id);
        n += m;
        if (m != a && bad++ < 3) fprintf(stderr, "  %s: token %d mask %d allowed %d\n", what, id, m, a);
    }
    CHECK_MSG(bad == 0, "%s: %u tokens differ", what, bad);
    return n;
}

static void masks_equal_per_token_checks(const char *path, const char *text)
{
    struct weft_tokenizer *t = load_tok(path);
    if (!t) {
        printf("  %s: no tokenizer (%s), case skipped\n", path, weft_last_error());
        return;
    }
    struct weft_grammar *g = parse(weft_grammar_json_object);
    struct weft_grammar_vocab *v;
    CHECK(weft_grammar_vocab_create(t, 0, &v) == WEFT_OK);
    struct weft_grammar_state *s;
    CHECK(weft_grammar_state_new(g, v, &s) == WEFT_OK);
    uint32_t *mask = malloc(weft_grammar_mask_words(v) * 4);
    int32_t *ids;
    size_t n;
    CHECK(weft_tokenize(t, text, strlen(text), false, false, &ids, &n) == WEFT_OK);
    int32_t eog = weft_tokenizer_eos(t);
    uint32_t states = 0, min_allowed = UINT32_MAX, max_allowed = 0;
    for (size_t i = 0; i <= n; i++) {
        char what[64];
        snprintf(what, sizeof what, "after %zu tokens", i);
        uint32_t k = check_mask(s, v, mask, what);
        min_allowed = k < min_allowed ? k : min_allowed;
        max_allowed = k > max_allowed ? k : max_allowed;
        states++;
        if (eog >= 0) CHECK(weft_grammar_allowed(s, eog) == weft_grammar_accepting(s));
        if (i == n) break;
        CHECK_MSG(weft_grammar_allowed(s, ids[i]), "token %zu (%d) of the text refused", i, ids[i]);
        CHECK(weft_grammar_advance(s, ids[i]) == WEFT_OK);
    }
    CHECK(weft_grammar_accepting(s));
    if (eog >= 0) CHECK(mask[eog / 32] >> (eog % 32) & 1);
    /* a partial character: half of 漢 inside a string */
    struct weft_grammar_state *p;
    CHECK(weft_grammar_state_new(g, v, &p) == WEFT_OK);
    CHECK(weft_grammar_advance_bytes(p, "{\"k\": \"\xe6", 8) == WEFT_OK);
    uint32_t k = check_mask(p, v, mask, "inside a character");
    CHECK(k > 0);
    struct weft_grammar_cache_stats cs0, cs1;
    weft_grammar_vocab_stats(v, &cs0);
    check_mask(p, v, mask, "again (cached)");
    weft_grammar_vocab_stats(v, &cs1);
    CHECK_EQ_INT(cs1.hits, cs0.hits + 1);
    printf("  %s: %u states, %u..%u tokens allowed, %llu of %llu masks from the cache\n", path, states, min_allowed,
           max_allowed, (unsigned long long)cs1.hits, (unsigned long long)cs1.lookups);
    weft_grammar_state_free(p);
    free(ids);
    free(mask);
    weft_grammar_state_free(s);
    weft_grammar_vocab_free(v);
    weft_grammar_unref(g);
    weft_tokenizer_free(t);
}

static void smollm2_vocab_masks(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/synth-smollm2-vocab.gguf", WEFT_SHARED_DIR);
    masks_equal_per_token_checks(path, " {\"name\": \"Tom\", \"tags\": [\"漢字\", \"é\"], \"age\": 3.5e1,\n  "
                                       "\"ok\": true, \"x\": {\"y\": null}}");
}

static void stories_vocab_masks(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    masks_equal_per_token_checks(path, "{\"a\": [1, 22], \"b\": \"once upon a time é\"}");
}

/* ---- the sampler's masked draw ---- */

static void masked_draws_pick_only_allowed_tokens(void)
{
    enum { V = 70 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % 23) * 0.25f;
    l[5] = 9.0f;                       /* the argmax, disallowed below */
    uint32_t mask[3] = {0};
    for (int i = 0; i < V; i++)
        if (i % 3 == 1) mask[i / 32] |= 1u << (i % 32);
    struct weft_sampling_params p;
    weft_sampling_params_default(&p);
    p.temperature = 0;
    struct weft_sampler *s;
    CHECK(weft_sampler_init(&p, V, &s) == WEFT_OK);
    struct weft_sample o;
    CHECK(weft_sampler_sample(s, l, &o) == WEFT_OK);
    CHECK_EQ_INT(o.id, 5);
    int best = -1;
    for (int i = 0; i < V; i++)
        if (i % 3 == 1 && (best < 0 || l[i] > l[best])) best = i;
    CHECK(weft_sampler_sample_masked(s, l, mask, 1, &o) == WEFT_OK);
    CHECK_EQ_INT(o.id, best);
    CHECK_EQ_INT(weft_sampler_position(s), 2);
    uint32_t none[3] = {0};
    CHECK_EQ_INT(weft_sampler_sample_masked(s, l, none, 1, &o), WEFT_ERR_INVALID_ARG);
    weft_sampler_free(s);
    /* sampled with the default top-k/top-p/min-p: always allowed */
    p.temperature = 1.0f;
    CHECK(weft_sampler_init(&p, V, &s) == WEFT_OK);
    for (int k = 0; k < 200; k++) {
        CHECK(weft_sampler_sample_masked(s, l, mask, 1 + (uint32_t)k % 3, &o) == WEFT_OK);
        CHECK(o.id % 3 == 1);
    }
    weft_sampler_free(s);
}

/* Draw then mask (the engine's rule) samples the masked distribution: the
 * frequencies over many positions match p(t) / Z for plain sampling. */
static void draw_then_mask_is_the_masked_distribution(void)
{
    enum { V = 8, N = 40000 };
    const float l[V] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, 1.2f, 0.3f};
    const uint32_t mask[1] = {0x1u | 0x4u | 0x10u | 0x40u};   /* ids 0, 2, 4, 6 */
    struct weft_sampling_params p;
    weft_sampling_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 99;
    struct weft_sampler *s;
    CHECK(weft_sampler_init(&p, V, &s) == WEFT_OK);
    uint32_t count[V] = {0};
    for (int k = 0; k < N; k++) {
        struct weft_sample o;
        uint64_t pos = weft_sampler_position(s);
        CHECK(weft_sampler_sample(s, l, &o) == WEFT_OK);
        if (!(mask[0] >> o.id & 1)) {
            weft_sampler_set_position(s, pos);
            CHECK(weft_sampler_sample_masked(s, l, mask, 1, &o) == WEFT_OK);
        }
        count[o.id]++;
    }
    double z = 0;
    for (int i = 0; i < V; i++)
        if (mask[0] >> i & 1) z += exp(l[i]);
    for (int i = 0; i < V; i++) {
        double want = mask[0] >> i & 1 ? exp(l[i]) / z : 0.0;
        CHECK_NEAR((double)count[i] / N, want, 0.01);
    }
    weft_sampler_free(s);
}

/* ---- the engine ---- */

/* An independent JSON check (RFC 8259, no depth limit worth mentioning):
 * the value at *p, p advanced past it. */
static bool js_ws(const char **p) { while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') (*p)++; return true; }
static bool js_value(const char **p);
static bool js_string(const char **p)
{
    if (*(*p)++ != '"') return false;
    for (;;) {
        unsigned char c = (unsigned char)*(*p)++;
        if (c == '"') return true;
        if (c < 0x20) return false;
        if (c == '\\') {
            char e = *(*p)++;
            if (e == 'u') {
                for (int i = 0; i < 4; i++, (*p)++)
                    if (!strchr("0123456789abcdefABCDEF", **p) || !**p) return false;
            } else if (!e || !strchr("\"\\/bfnrt", e)) {
                return false;
            }
        }
    }
}
static bool js_digits(const char **p) { const char *q = *p; while (**p >= '0' && **p <= '9') (*p)++; return *p > q; }
static bool js_number(const char **p)
{
    if (**p == '-') (*p)++;
    if (**p == '0') (*p)++;
    else if (!(**p >= '1' && **p <= '9') || !js_digits(p)) return false;
    if (**p == '.') { (*p)++; if (!js_digits(p)) return false; }
    if (**p == 'e' || **p == 'E') {
        (*p)++;
        if (**p == '+' || **p == '-') (*p)++;
        if (!js_digits(p)) return false;
    }
    return true;
}
static bool js_object(const char **p)
{
    (*p)++;
    js_ws(p);
    if (**p == '}') { (*p)++; return true; }
    for (;;) {
        if (!js_string(p) || !js_ws(p) || *(*p)++ != ':' || !js_ws(p) || !js_value(p)) return false;
        js_ws(p);
        char c = *(*p)++;
        if (c == '}') return true;
        if (c != ',') return false;
        js_ws(p);
    }
}
static bool js_array(const char **p)
{
    (*p)++;
    js_ws(p);
    if (**p == ']') { (*p)++; return true; }
    for (;;) {
        if (!js_value(p)) return false;
        js_ws(p);
        char c = *(*p)++;
        if (c == ']') return true;
        if (c != ',') return false;
        js_ws(p);
    }
}
static bool js_value(const char **p)
{
    switch (**p) {
    case '{': return js_object(p);
    case '[': return js_array(p);
    case '"': return js_string(p);
    case 't': return !strncmp(*p, "true", 4) && (*p += 4);
    case 'f': return !strncmp(*p, "false", 5) && (*p += 5);
    case 'n': return !strncmp(*p, "null", 4) && (*p += 4);
    default: return js_number(p);
    }
}
static bool json_object_text(const char *s)
{
    js_ws(&s);
    if (*s != '{' || !js_object(&s)) return false;
    js_ws(&s);
    return *s == '\0';
}

static void json_check_checks(void)
{
    CHECK(json_object_text(" {\"a\": [1, -2.5e+3, \"x\\u00e9\", {}, true, null]} "));
    CHECK(!json_object_text("{\"a\": 1,}"));
    CHECK(!json_object_text("[1]"));
    CHECK(!json_object_text("{\"a\": 01}"));
}

#define GMAX 512

struct gout {
    int32_t ids[GMAX];
    uint32_t n;
    enum weft_finish finish;
    bool done;
};

static void on_gev(void *user, const struct weft_event *ev)
{
    struct gout *o = user;
    CHECK(!o->done);
    if (ev->has_token && o->n < GMAX) o->ids[o->n++] = ev->token.id;
    if (ev->finish != WEFT_FINISH_NONE) {
        o->finish = ev->finish;
        o->done = true;
    }
}

static const char CHAT_PROMPT[] = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                                  "Hugging Face<|im_end|>\n<|im_start|>user\nWrite a JSON object for a cat named Tom "
                                  "who is 3 years old, with the keys name and age.<|im_end|>\n"
                                  "<|im_start|>assistant\n";

struct gjob {
    int32_t prompt[GMAX];
    uint32_t n_prompt, max_tokens, sample_pos;
    float temperature;
    const struct weft_grammar *grammar;
};

static weft_status gsubmit(struct weft_engine *e, const struct gjob *j, struct gout *o)
{
    memset(o, 0, sizeof *o);
    struct weft_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
                              .sample_pos = j->sample_pos, .grammar = j->grammar, .ignore_eos = !j->grammar,
                              .cb = on_gev, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = j->temperature;
    rq.sampling.seed = 42;
    uint64_t id;
    return weft_engine_submit(e, &rq, &id);
}

/* Run jobs[0..n) together in one engine of cfg. */
static void grun(const struct weft_model *m, const struct weft_engine_config *cfg, const struct gjob *jobs,
                 uint32_t n, struct gout *outs, struct weft_engine_stats *stats)
{
    struct weft_engine *e;
    CHECK(weft_engine_create(m, cfg, &e) == WEFT_OK);
    if (!e) return;
    for (uint32_t i = 0; i < n; i++) {
        weft_status st = gsubmit(e, &jobs[i], &outs[i]);
        CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
    }
    CHECK(weft_engine_run_all(e) == WEFT_OK);
    for (uint32_t i = 0; i < n; i++) CHECK(outs[i].done);
    if (stats) weft_engine_stats(e, stats);
    weft_engine_free(e);
}

static bool same(const struct gout *a, const struct gout *b)
{
    return a->n == b->n && a->finish == b->finish && !memcmp(a->ids, b->ids, sizeof *a->ids * a->n);
}

static char *text_of(const struct weft_model *m, const struct gout *o)
{
    char *s = NULL;
    size_t n;
    CHECK(weft_detokenize(weft_model_tokenizer(m), o->ids, o->n, false, &s, &n) == WEFT_OK);
    return s;
}

static struct gjob gjobs[10];
static struct gout gref[10], gout_[10];

/* Greedy JSON on SmolLM2: a JSON object, ended by the grammar (STOP); the
 * same among 4 unconstrained requests, under preemption, and continued from
 * its middle; a sampled one the same alone and batched. */
static void engine_json_object_on_smollm2(void)
{
    char *path = weft_default_model_path();
    if (!path) {
        printf("  skipped: the default model is not fetched (bash scripts/fetch-model.sh)\n");
        return;
    }
    struct weft_backend *be = NULL;
    struct weft_model *m = NULL;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK);
    if (be && weft_model_load(path, be, &m) != WEFT_OK) fprintf(stderr, "%s\n", weft_last_error());
    free(path);
    if (!m) {
        CHECK(m != NULL);
        weft_backend_close(be);
        return;
    }
    struct weft_grammar *g = parse(weft_grammar_json_object);
    int32_t *ids;
    size_t n;
    CHECK(weft_tokenize(weft_model_tokenizer(m), CHAT_PROMPT, strlen(CHAT_PROMPT), false, true, &ids, &n) == WEFT_OK);
    memset(gjobs, 0, sizeof gjobs);
    memcpy(gjobs[0].prompt, ids, n * sizeof *ids);
    gjobs[0].n_prompt = (uint32_t)n;
    gjobs[0].max_tokens = 96;
    gjobs[0].grammar = g;
    free(ids);
    /* four unconstrained ones beside it, longer prompts */
    for (uint32_t i = 1; i < 5; i++) {
        gjobs[i].n_prompt = 20 + 10 * i;
        for (uint32_t k = 0; k < gjobs[i].n_prompt; k++) gjobs[i].prompt[k] = (int32_t)(300 + (k * 7919u + i * 104729u) % 40000u);
        gjobs[i].max_tokens = 24;
        gjobs[i].temperature = i % 2 ? 0.0f : 0.8f;
    }
    /* a sampled grammar request, and a long greedy one that max_tokens cuts */
    gjobs[5] = gjobs[0];
    gjobs[5].temperature = 0.8f;
    static const char LONG_PROMPT[] = "<|im_start|>user\nDescribe three cats as a JSON object, with each cat's "
                                      "name, age, colour and favourite foods.<|im_end|>\n<|im_start|>assistant\n";
    CHECK(weft_tokenize(weft_model_tokenizer(m), LONG_PROMPT, strlen(LONG_PROMPT), false, true, &ids, &n) == WEFT_OK);
    memcpy(gjobs[6].prompt, ids, n * sizeof *ids);
    gjobs[6].n_prompt = (uint32_t)n;
    gjobs[6].max_tokens = 64;
    gjobs[6].grammar = g;
    free(ids);

    struct weft_engine_config cfg = {.n_ctx = 512};
    grun(m, &cfg, gjobs, 1, gref, NULL);
    char *text = text_of(m, &gref[0]);
    printf("  greedy: %u tokens, finish %d: %s\n", gref[0].n, gref[0].finish, text ? text : "");
    CHECK_EQ_INT(gref[0].finish, WEFT_FINISH_STOP);
    CHECK_MSG(text && json_object_text(text), "not a JSON object: %s", text ? text : "");
    CHECK(text && weft_grammar_match(g, text, strlen(text)));
    free(text);
    grun(m, &cfg, gjobs + 5, 1, gref + 5, NULL);
    text = text_of(m, &gref[5]);
    printf("  sampled: %u tokens, finish %d: %s\n", gref[5].n, gref[5].finish, text ? text : "");
    CHECK(gref[5].finish == WEFT_FINISH_STOP || gref[5].finish == WEFT_FINISH_LENGTH);
    if (gref[5].finish == WEFT_FINISH_STOP) CHECK(text && json_object_text(text));
    free(text);
    grun(m, &cfg, gjobs + 6, 1, gref + 6, NULL);
    text = text_of(m, &gref[6]);
    printf("  long: %u tokens, finish %d\n", gref[6].n, gref[6].finish);
    CHECK_EQ_INT(gref[6].finish, WEFT_FINISH_LENGTH);
    struct weft_grammar_state *gs;
    CHECK(weft_grammar_state_new(g, NULL, &gs) == WEFT_OK);
    CHECK_MSG(text && weft_grammar_advance_bytes(gs, text, strlen(text)) == WEFT_OK, "not a JSON prefix: %s", text);
    weft_grammar_state_free(gs);
    free(text);

    /* batched with 4 others (and the other two) */
    struct weft_engine_stats st;
    grun(m, &cfg, gjobs, 7, gout_, &st);
    CHECK_MSG(same(&gout_[0], &gref[0]), "greedy batched: %u tokens vs %u", gout_[0].n, gref[0].n);
    CHECK_MSG(same(&gout_[5], &gref[5]), "sampled batched: %u tokens vs %u", gout_[5].n, gref[5].n);
    CHECK_MSG(same(&gout_[6], &gref[6]), "long batched: %u tokens vs %u", gout_[6].n, gref[6].n);
    printf("  batched: %llu masks, %llu from the cache, %llu draws resampled\n",
           (unsigned long long)st.grammar_masks, (unsigned long long)st.grammar_mask_hits,
           (unsigned long long)st.grammar_resampled);
    CHECK(st.grammar_resampled > 0);   /* the chat model opens with text, not '{', unconstrained */

    /* preempted: room for about two of the seven */
    struct weft_engine_config small = {.n_ctx = 512, .kv_blocks = 12, .max_seqs = 7};
    for (int mode = 0; mode < 2; mode++) {
        small.no_swap = mode == 1;
        grun(m, &small, gjobs, 7, gout_, &st);
        printf("  preempted (%s): %llu swapped, %llu recomputed\n", mode ? "recompute" : "swap",
               (unsigned long long)st.preempt_swap, (unsigned long long)st.preempt_recompute);
        CHECK(st.preempt_swap + st.preempt_recompute > 0);
        CHECK(same(&gout_[0], &gref[0]));
        CHECK(same(&gout_[5], &gref[5]));
        CHECK(same(&gout_[6], &gref[6]));
    }

    /* continued from the middle: the rest is the same */
    uint32_t k = gref[0].n / 2;
    struct gjob *c = &gjobs[8];
    *c = gjobs[0];
    memcpy(c->prompt + c->n_prompt, gref[0].ids, k * sizeof *c->prompt);
    c->n_prompt += k;
    c->sample_pos = k;
    c->max_tokens -= k;
    grun(m, &cfg, c, 1, gout_ + 8, NULL);
    CHECK(gout_[8].n == gref[0].n - k && gout_[8].finish == gref[0].finish &&
          !memcmp(gout_[8].ids, gref[0].ids + k, sizeof *gout_[8].ids * gout_[8].n));
    /* the long one continued: the grammar state is the replayed one */
    k = gref[6].n / 2;
    *c = gjobs[6];
    memcpy(c->prompt + c->n_prompt, gref[6].ids, k * sizeof *c->prompt);
    c->n_prompt += k;
    c->sample_pos = k;
    c->max_tokens -= k;
    grun(m, &cfg, c, 1, gout_ + 8, NULL);
    CHECK(gout_[8].n == gref[6].n - k && gout_[8].finish == gref[6].finish &&
          !memcmp(gout_[8].ids, gref[6].ids + k, sizeof *gout_[8].ids * gout_[8].n));
    /* a continuation the grammar refuses is refused at submit */
    struct weft_engine *e;
    CHECK(weft_engine_create(m, &cfg, &e) == WEFT_OK);
    if (e) {
        *c = gjobs[0];
        int32_t *w;
        CHECK(weft_tokenize(weft_model_tokenizer(m), "Sure", 4, false, false, &w, &n) == WEFT_OK);
        c->prompt[c->n_prompt++] = w[0];
        c->sample_pos = 1;
        free(w);
        CHECK_EQ_INT(gsubmit(e, c, &gout_[9]), WEFT_ERR_INVALID_ARG);
        CHECK(strstr(weft_last_error(), "does not fit the grammar") != NULL);
        struct weft_engine_stats s2;
        weft_engine_stats(e, &s2);
        CHECK_EQ_INT(s2.submitted, 0);
        weft_engine_free(e);
    }
    weft_grammar_unref(g);
    weft_model_free(m);
    weft_backend_close(be);
}

int main(void)
{
    RUN(parse_errors_name_line_column_and_what_was_expected);
    RUN(rules_span_lines_comments_and_references);
    RUN(json_object_grammar_accepts_objects_and_rejects_the_rest);
    RUN(char_classes_ranges_negation_and_escapes);
    RUN(repetition_bounds);
    RUN(utf8_split_across_pieces);
    RUN(references_are_counted);
    RUN(smollm2_vocab_masks);
    RUN(stories_vocab_masks);
    RUN(masked_draws_pick_only_allowed_tokens);
    RUN(draw_then_mask_is_the_masked_distribution);
    RUN(json_check_checks);
    RUN(engine_json_object_on_smollm2);
    return check_summary();
}
