/* Constrained decoding (core/grammar.h): parse errors with line:column,
 * whole-text accept/reject (the built-in JSON grammar, classes, repetition
 * bounds, UTF-8 split across pieces), masks equal to a per-token check on
 * real vocabularies, and the engine: greedy JSON on SmolLM2 is a JSON
 * object, the same batched, preempted and continued. */
#include <pthread.h>
#include <string.h>

#include "core/engine.h"
#include "core/gguf.h"
#include "core/grammar.h"
#include "core/tokenizer.h"
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
        CHECK_MSG(st == WEFT_ERR_FORMAT && g == NULL, "case %zu parsed", i);
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
    /* whitespace runs are bounded (40): a model cannot loop on them */
    char ws[64];
    memset(ws, ' ', 40);
    strcpy(ws + 40, "{}");
    CHECK(matches(g, ws));
    memset(ws, ' ', 41);
    strcpy(ws + 41, "{}");
    CHECK(!matches(g, ws));
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
    return check_summary();
}
