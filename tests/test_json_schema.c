/* JSON Schema -> grammar (server/json_schema.c): every generated grammar
 * compiles, accepts JSON texts the schema accepts and refuses ones it does
 * not; unsupported keywords are refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/buf.h"
#include "core/grammar.h"
#include "server/json_schema.h"

static struct weft_grammar *compile(const char *schema_text)
{
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    CHECK_MSG(s != NULL, "bad test schema %s: %s", schema_text, je.text);
    if (!s) return NULL;
    char *text = NULL, err[256] = "";
    bool ok = weft_json_schema_grammar(s, &text, err, sizeof err);
    json_decref(s);
    CHECK_MSG(ok, "%s: %s", schema_text, err);
    if (!ok) return NULL;
    struct weft_grammar *g = NULL;
    weft_status st = weft_grammar_parse(text, strlen(text), &g);
    CHECK_MSG(st == WEFT_OK, "grammar of %s does not compile: %s\n%s", schema_text, weft_last_error(), text);
    free(text);
    return g;
}

static void expect(const struct weft_grammar *g, const char *json, bool ok)
{
    if (!g) return;
    CHECK_MSG(weft_grammar_match(g, json, strlen(json)) == ok, "%s should %s", json, ok ? "match" : "not match");
}

static void refused(const char *schema_text, const char *word)
{
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    char *text = NULL, err[256] = "";
    bool ok = weft_json_schema_grammar(s, &text, err, sizeof err);
    json_decref(s);
    CHECK_MSG(!ok, "%s was accepted", schema_text);
    CHECK_MSG(!ok && strstr(err, word), "error for %s does not name '%s': %s", schema_text, word, err);
    free(text);
}

static void an_object_with_required_and_optional_properties(void)
{
    struct weft_grammar *g = compile("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                                     "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\","
                                     "\"items\":{\"type\":\"string\"}}},\"required\":[\"name\"]}");
    expect(g, "{\"name\":\"Ann\"}", true);
    expect(g, "{\"name\": \"Ann\", \"age\": 31}", true);
    expect(g, "{\"name\":\"Ann\",\"tags\":[\"a\",\"b\"]}", true);
    expect(g, "{\n  \"name\": \"Ann\",\n  \"age\": -4,\n  \"tags\": []\n}", true);
    expect(g, "{\"age\":31}", false);                      /* required missing */
    expect(g, "{\"name\":\"Ann\",\"age\":3.5}", false);     /* not an integer */
    expect(g, "{\"name\":\"Ann\",\"zip\":1}", false);       /* undeclared */
    expect(g, "{\"name\":\"Ann\",}", false);
    expect(g, "{\"name\":\"A\\u00e9\\n\"}", true);          /* escapes */
    expect(g, "{\"name\":\"A\x01\"}", false);               /* control char */
    expect(g, "{\"name\":\"caf\xc3\xa9\"}", true);          /* UTF-8 */
    weft_grammar_unref(g);
}

static void all_optional_properties_allow_the_empty_object(void)
{
    struct weft_grammar *g = compile("{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},"
                                     "\"c\":{\"type\":\"number\"}}}");
    expect(g, "{}", true);
    expect(g, "{\"b\":null}", true);
    expect(g, "{\"a\":true,\"c\":1e5}", true);
    expect(g, "{\"c\":-0.25,\"a\":true}", false);  /* the schema's order */
    expect(g, "{,\"a\":true}", false);
    weft_grammar_unref(g);
}

static void enums_consts_any_of_and_type_lists(void)
{
    struct weft_grammar *g = compile("{\"type\":\"object\",\"properties\":{\"c\":{\"enum\":[\"red\",\"green\",7,null]},"
                                     "\"k\":{\"const\":\"x\\\"y\"},\"v\":{\"anyOf\":[{\"type\":\"integer\"},"
                                     "{\"type\":\"string\",\"maxLength\":3}]},\"n\":{\"type\":[\"string\",\"null\"]}},"
                                     "\"required\":[\"c\",\"k\",\"v\",\"n\"],\"additionalProperties\":false}");
    expect(g, "{\"c\":\"red\",\"k\":\"x\\\"y\",\"v\":12,\"n\":null}", true);
    expect(g, "{\"c\":7,\"k\":\"x\\\"y\",\"v\":\"abc\",\"n\":\"q\"}", true);
    expect(g, "{\"c\":\"blue\",\"k\":\"x\\\"y\",\"v\":1,\"n\":null}", false);
    expect(g, "{\"c\":null,\"k\":\"x\\\"y\",\"v\":\"abcd\",\"n\":null}", false);
    weft_grammar_unref(g);
}

static void arrays_with_bounds_and_tuples(void)
{
    struct weft_grammar *g = compile("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}");
    expect(g, "[1,2]", true);
    expect(g, "[1, 2, 3]", true);
    expect(g, "[1]", false);
    expect(g, "[1,2,3,4]", false);
    expect(g, "[]", false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],\"items\":false}");
    expect(g, "[\"a\",false]", true);
    expect(g, "[\"a\"]", false);
    weft_grammar_unref(g);
}

static void pydantic_defs_refs_and_recursion(void)
{
    /* what Pydantic writes for a model with a nested model and a list of itself */
    struct weft_grammar *g = compile(
        "{\"$defs\":{\"Step\":{\"properties\":{\"explanation\":{\"title\":\"Explanation\",\"type\":\"string\"},"
        "\"output\":{\"title\":\"Output\",\"type\":\"string\"}},\"required\":[\"explanation\",\"output\"],"
        "\"title\":\"Step\",\"type\":\"object\",\"additionalProperties\":false}},"
        "\"properties\":{\"steps\":{\"items\":{\"$ref\":\"#/$defs/Step\"},\"title\":\"Steps\",\"type\":\"array\"},"
        "\"final_answer\":{\"title\":\"Final Answer\",\"type\":\"string\"}},"
        "\"required\":[\"steps\",\"final_answer\"],\"title\":\"MathReasoning\",\"type\":\"object\","
        "\"additionalProperties\":false}");
    expect(g, "{\"steps\":[{\"explanation\":\"e\",\"output\":\"o\"}],\"final_answer\":\"x\"}", true);
    expect(g, "{\"steps\":[{\"explanation\":\"e\"}],\"final_answer\":\"x\"}", false);
    weft_grammar_unref(g);
    g = compile("{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/N\"}}},\"required\":[\"v\"]}},"
                "\"$ref\":\"#/$defs/N\"}");
    expect(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}", true);
    expect(g, "{\"v\":1,\"kids\":[{\"kids\":[]}]}", false);
    weft_grammar_unref(g);
}

static void string_formats_and_lengths(void)
{
    struct weft_grammar *g = compile("{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},"
                                     "\"t\":{\"type\":\"string\",\"format\":\"date-time\"},"
                                     "\"u\":{\"type\":\"string\",\"format\":\"uuid\"},"
                                     "\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}},"
                                     "\"required\":[\"d\",\"t\",\"u\",\"s\"]}");
    expect(g, "{\"d\":\"2026-12-03\",\"t\":\"2026-12-03T21:19:32Z\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\","
              "\"s\":\"abc\"}", true);
    expect(g, "{\"d\":\"2026-13-03\",\"t\":\"2026-12-03T21:19:32Z\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\","
              "\"s\":\"abc\"}", false);
    expect(g, "{\"d\":\"2026-12-03\",\"t\":\"2026-12-03T21:19:32Z\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\","
              "\"s\":\"a\"}", false);
    weft_grammar_unref(g);
}

static void maps_and_free_values(void)
{
    struct weft_grammar *g = compile("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}");
    expect(g, "{\"a\":1,\"b\":2}", true);
    expect(g, "{\"a\":\"1\"}", false);
    weft_grammar_unref(g);
    g = compile("{}");
    expect(g, "[1,{\"a\":[true,null]},\"x\"]", true);
    expect(g, "[1,]", false);
    weft_grammar_unref(g);
}

static void unsupported_keywords_are_named(void)
{
    refused("{\"type\":\"string\",\"pattern\":\"^a+$\"}", "pattern");
    refused("{\"type\":\"integer\",\"minimum\":0}", "minimum");
    refused("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", "oneOf");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"multipleOf\":2}}}", "multipleOf");
    refused("{\"type\":\"string\",\"format\":\"email\"}", "email");
    refused("{\"$ref\":\"#/$defs/Missing\"}", "Missing");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    refused("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}},\"required\":[\"y\"]}", "'y'");
    refused("false", "false");
    refused("{\"type\":\"tuple\"}", "tuple");
}

/* A schema of n properties, every one required, as text (malloc'd). */
static char *wide_schema(unsigned n)
{
    struct weft_strbuf b = {0};
    weft_sb_puts(&b, "{\"type\":\"object\",\"properties\":{");
    for (unsigned i = 0; i < n; i++) weft_sb_printf(&b, "%s\"field_%u\":{\"type\":\"integer\"}", i ? "," : "", i);
    weft_sb_puts(&b, "},\"required\":[");
    for (unsigned i = 0; i < n; i++) weft_sb_printf(&b, "%s\"field_%u\"", i ? "," : "", i);
    weft_sb_puts(&b, "]}");
    return weft_sb_take(&b);
}

/* Compiling is linear in the schema: the rule-name comparisons of an
 * 8,000-property schema are about 8x a 1,000-property one's (they were
 * about 64x: every name scanned every rule before it, 7.9 s for 8k); a
 * schema past the grammar's rule bound is refused naming it, before a
 * grammar that size is built. */
static void compiling_is_linear_and_bounded(void)
{
    uint64_t cmp[2] = {0, 0};
    const unsigned sizes[2] = {1000, 8000};
    for (int k = 0; k < 2; k++) {
        char *text = wide_schema(sizes[k]);
        struct weft_grammar *g = compile(text);
        free(text);
        if (!g) return;
        cmp[k] = weft_grammar_compile_compares(g);
        CHECK(weft_grammar_n_rules(g) > 3 * sizes[k]);
        weft_grammar_unref(g);
    }
    printf("  rule-name comparisons: %llu for 1000 properties, %llu for 8000 (x%.1f)\n", (unsigned long long)cmp[0],
           (unsigned long long)cmp[1], (double)cmp[1] / (double)cmp[0]);
    CHECK(cmp[0] > 0 && cmp[1] <= 10 * cmp[0]);
    char *big = wide_schema(30000);
    refused(big, "grammar rules");
    free(big);
}

int main(void)
{
    RUN(an_object_with_required_and_optional_properties);
    RUN(all_optional_properties_allow_the_empty_object);
    RUN(enums_consts_any_of_and_type_lists);
    RUN(arrays_with_bounds_and_tuples);
    RUN(pydantic_defs_refs_and_recursion);
    RUN(string_formats_and_lengths);
    RUN(maps_and_free_values);
    RUN(unsupported_keywords_are_named);
    RUN(compiling_is_linear_and_bounded);
    return check_summary();
}
