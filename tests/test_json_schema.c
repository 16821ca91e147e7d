/* JSON Schema -> grammar (server/json_schema.c, json_schema_regex.c): every
 * generated grammar compiles, accepts JSON texts the schema accepts and
 * refuses ones it does not (patterns, integer and number bounds at their
 * edges, the email/uri/ipv4 formats, oneOf, Pydantic's nested models);
 * unsupported keywords and regex constructs are refused by name. */
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
    /* the grammar's largest repetition is the largest length a schema may give: the rest is refused, named
     * (a count that large still makes more rules than one grammar holds: a 400 from the grammar, tested in
     * test_grammar) */
    g = compile("{\"type\":\"string\",\"maxLength\":2000}");
    expect(g, "\"abc\"", true);
    weft_grammar_unref(g);
    refused("{\"type\":\"string\",\"maxLength\":65536}", "maxLength");
    refused("{\"type\":\"array\",\"maxItems\":100000}", "maxItems");
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

/* One string schema s, each text (a JSON string's contents, quotes added) matching or not. */
static void strings(const char *schema, const char *const *yes, const char *const *no)
{
    struct weft_grammar *g = compile(schema);
    char buf[512];
    for (; yes && *yes; yes++) {
        snprintf(buf, sizeof buf, "\"%s\"", *yes);
        expect(g, buf, true);
    }
    for (; no && *no; no++) {
        snprintf(buf, sizeof buf, "\"%s\"", *no);
        expect(g, buf, false);
    }
    weft_grammar_unref(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void patterns_match_exactly(void)
{
    strings("{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-\\\\d{4}$\"}", L("ABC-1234", "XYZ-0000"),
            L("AB-1234", "ABC-12345", "abc-1234", "ABC-1234x", "xABC-1234", "ABC 1234", ""));
    /* unanchored: anything may come before and after */
    strings("{\"type\":\"string\",\"pattern\":\"\\\\d{3}\"}", L("123", "x123y", "ab 9876"), L("12", "1x23", ""));
    strings("{\"type\":\"string\",\"pattern\":\"^a|b$\"}", L("a", "ax", "xb", "b"), L("xa", "bx", ""));
    strings("{\"type\":\"string\",\"pattern\":\"^(?:foo|bar)+$\"}", L("foo", "foobar", "barbarfoo"), L("", "foob", "fo"));
    strings("{\"type\":\"string\",\"pattern\":\"^(?P<a>x)(?<b>y)?$\"}", L("x", "xy"), L("y", "xyy"));
    /* classes, negation and the JSON escapes of what they hold */
    strings("{\"type\":\"string\",\"pattern\":\"^[^a-c]*$\"}", L("", "xyz", "x\\\"y", "\\\\", "\\n", "\\u0001", "d\xc3\xa9" "f"),
            L("xaz", "c", "\x01", "\\u0061"));
    strings("{\"type\":\"string\",\"pattern\":\"^[\\\"\\\\\\\\]+$\"}", L("\\\"", "\\\\\\\"\\\\"), L("a", "", "\\/"));
    strings("{\"type\":\"string\",\"pattern\":\"^[a-]+[\\\\]\\\\[]$\"}", L("a-a]", "-["), L("a", "b]"));
    strings("{\"type\":\"string\",\"pattern\":\"^\\\\x41\\\\u00e9.\\\\t$\"}", L("A\xc3\xa9!\\t", "A\xc3\xa9\\\"\\t"),
            L("Ae!\\t", "A\xc3\xa9\\n\\t", "A\xc3\xa9!\t"));
    strings("{\"type\":\"string\",\"pattern\":\"^\\\\w+\\\\s\\\\S\\\\D\\\\W$\"}", L("a_1 xy!", "Z\\tb-+"),
            L("a xy", "a  y!", "a x1!", "a xyz"));
    strings("{\"type\":\"string\",\"pattern\":\"^\\\\$\\\\d+(\\\\.\\\\d{2})?$\"}", L("$12", "$12.50"), L("$12.5", "12.50", "$"));
    /* lazy quantifiers match what greedy ones do; {n,m}, ? and {0} */
    strings("{\"type\":\"string\",\"pattern\":\"^a+?b{1,2}?c??x{0}$\"}", L("ab", "aabb", "abbc"), L("abbb", "b", "abx"));
    strings("{\"type\":\"string\",\"pattern\":\"^(ab|a)(bc|c)$\"}", L("abc", "abbc", "ac"), L("abcc", "bc"));
}

static void patterns_with_lengths(void)
{
    /* the repetition takes the bounds */
    strings("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":4}", L("ab", "abcd"),
            L("a", "abcde", ""));
    strings("{\"type\":\"string\",\"pattern\":\"^[A-Z][a-z]*!$\",\"maxLength\":5}", L("A!", "Abcd!"), L("Abcde!"));
    /* implied by the pattern: kept as it is */
    strings("{\"type\":\"string\",\"pattern\":\"^\\\\d{5}$\",\"maxLength\":5,\"minLength\":5}", L("12345"), L("1234"));
    strings("{\"type\":\"string\",\"pattern\":\"abc\",\"minLength\":2}", L("abc", "xabcx"), L("ab"));
    refused("{\"type\":\"string\",\"pattern\":\"^[a-z]+x[0-9]+$\",\"maxLength\":8}", "maxLength");
    refused("{\"type\":\"string\",\"pattern\":\"abc\",\"maxLength\":8}", "maxLength");
    refused("{\"type\":\"string\",\"pattern\":\"^\\\\d{5}$\",\"maxLength\":4}", "no text");
}

static void regex_constructs_refused_by_name(void)
{
    refused("{\"type\":\"string\",\"pattern\":\"^(?=a)\\\\w+$\"}", "lookahead");
    refused("{\"type\":\"string\",\"pattern\":\"^(?!a)\\\\w+$\"}", "lookahead");
    refused("{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}", "lookbehind");
    refused("{\"type\":\"string\",\"pattern\":\"^(a)\\\\1$\"}", "backreference");
    refused("{\"type\":\"string\",\"pattern\":\"^(?P<x>a)(?P=x)$\"}", "backreference");
    refused("{\"type\":\"string\",\"pattern\":\"\\\\bword\\\\b\"}", "word boundary");
    refused("{\"type\":\"string\",\"pattern\":\"(?i)abc\"}", "inline flags");
    refused("{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchor");
    refused("{\"type\":\"string\",\"pattern\":\"^(a*)*$\"}", "unbounded repetition");
    refused("{\"type\":\"string\",\"pattern\":\"^[[:alpha:]]+$\"}", "'['");
    refused("{\"type\":\"string\",\"pattern\":\"^a{,3}$\"}", "{,n}");
    refused("{\"type\":\"string\",\"pattern\":\"^a++$\"}", "possessive");
    refused("{\"type\":\"string\",\"pattern\":\"^\\\\p{L}+$\"}", "Unicode property");
    refused("{\"type\":\"string\",\"pattern\":\"^(ab$\"}", "no ')'");
    refused("{\"type\":\"string\",\"pattern\":\"^[^\\\\D]$\"}", "negated class");
    refused("{\"type\":\"string\",\"pattern\":\"^a$\",\"format\":\"uuid\"}", "'pattern' with 'format'");
    refused("{\"type\":\"string\",\"pattern\":7}", "pattern");
}

static void integer_bounds_are_exact(void)
{
    struct weft_grammar *g = compile("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":100}");
    const char *yes[] = {"-5", "-1", "0", "9", "10", "99", "100"}, *no[] = {"-6", "-10", "101", "1000", "-0", "007", "1.0",
                                                                            "1e2"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) expect(g, yes[i], true);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) expect(g, no[i], false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"minimum\":99,\"maximum\":1001}");   /* digit-count boundaries */
    expect(g, "98", false), expect(g, "99", true), expect(g, "100", true), expect(g, "999", true);
    expect(g, "1000", true), expect(g, "1001", true), expect(g, "1002", false), expect(g, "9", false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"exclusiveMinimum\":99,\"exclusiveMaximum\":1000}");
    expect(g, "99", false), expect(g, "100", true), expect(g, "999", true), expect(g, "1000", false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"minimum\":1}");   /* Pydantic ge=1: up to j-int's 16 digits */
    expect(g, "0", false), expect(g, "-1", false), expect(g, "1", true), expect(g, "9999999999999999", true);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"maximum\":-10}");
    expect(g, "-9", false), expect(g, "-10", true), expect(g, "-11", true), expect(g, "0", false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"minimum\":-9223372036854775808,\"maximum\":9223372036854775807}");
    expect(g, "-9223372036854775808", true), expect(g, "-9223372036854775809", false);
    expect(g, "9223372036854775807", true), expect(g, "9223372036854775808", false), expect(g, "0", true);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":2.5}");   /* real bounds: ceil and floor */
    expect(g, "0", false), expect(g, "1", true), expect(g, "2", true), expect(g, "3", false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}");   /* draft 4 */
    expect(g, "0", false), expect(g, "1", true);
    weft_grammar_unref(g);
    g = compile("{\"type\":[\"integer\",\"null\"],\"minimum\":0}");
    expect(g, "null", true), expect(g, "-1", false), expect(g, "5", true);
    weft_grammar_unref(g);
    refused("{\"type\":\"integer\",\"exclusiveMinimum\":5,\"exclusiveMaximum\":6}", "no integer");
    refused("{\"type\":\"integer\",\"minimum\":1e30}", "minimum");
    refused("{\"type\":\"integer\",\"maximum\":\"7\"}", "maximum");
    refused("{\"enum\":[1,5],\"minimum\":3}", "minimum");
}

static void number_bounds_are_exact(void)
{
    /* Pydantic gt=0, le=1.5: plain decimals, 16 fraction digits at most */
    struct weft_grammar *g = compile("{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1.5}");
    const char *yes[] = {"0.0000000000000001", "0.5", "1", "1.0", "1.5", "1.50", "1.4999999999999999"},
               *no[] = {"0", "0.0", "-0.5", "-1", "1.5000000000000001", "1.51", "1.6", "2", "1e0", "0.00000000000000001"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) expect(g, yes[i], true);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) expect(g, no[i], false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"number\",\"minimum\":-2.5,\"exclusiveMaximum\":10}");
    expect(g, "-2.5", true), expect(g, "-2.51", false), expect(g, "-3", false), expect(g, "-0.25", true);
    expect(g, "9.999", true), expect(g, "9.999999999999998", true), expect(g, "10", false), expect(g, "10.0", false);
    expect(g, "0", true);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.3}");
    expect(g, "0.1", true), expect(g, "0.3", true), expect(g, "0.2", true), expect(g, "0.10", true);
    expect(g, "0.09", false), expect(g, "0.31", false), expect(g, "0.3000000000000001", false), expect(g, "0", false);
    weft_grammar_unref(g);
    g = compile("{\"type\":\"number\",\"minimum\":-100,\"maximum\":-99.5}");
    expect(g, "-100", true), expect(g, "-99.5", true), expect(g, "-99.75", true), expect(g, "-99", false);
    expect(g, "-100.01", false), expect(g, "99.6", false);
    weft_grammar_unref(g);
    g = compile("{\"minimum\":5}");   /* the bound implies a number */
    expect(g, "5", true), expect(g, "123.25", true), expect(g, "4.99", false), expect(g, "\"x\"", false);
    weft_grammar_unref(g);
    refused("{\"type\":\"number\",\"minimum\":2,\"maximum\":1}", "no number");
    refused("{\"type\":\"number\",\"minimum\":1e300}", "minimum");
}

static void one_of_is_written_as_any_of(void)
{
    struct weft_grammar *g = compile("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}");
    expect(g, "5", true), expect(g, "\"ab\"", true), expect(g, "\"abc\"", false), expect(g, "true", false);
    weft_grammar_unref(g);
    /* Pydantic's discriminated union: oneOf beside a discriminator */
    g = compile("{\"$defs\":{\"Cat\":{\"properties\":{\"kind\":{\"const\":\"cat\",\"title\":\"Kind\",\"type\":\"string\"},"
                "\"lives\":{\"maximum\":9,\"minimum\":0,\"title\":\"Lives\",\"type\":\"integer\"}},\"required\":[\"kind\","
                "\"lives\"],\"title\":\"Cat\",\"type\":\"object\"},\"Dog\":{\"properties\":{\"kind\":{\"const\":\"dog\","
                "\"title\":\"Kind\",\"type\":\"string\"},\"good\":{\"title\":\"Good\",\"type\":\"boolean\"}},\"required\":"
                "[\"kind\",\"good\"],\"title\":\"Dog\",\"type\":\"object\"}},\"properties\":{\"pet\":{\"discriminator\":"
                "{\"mapping\":{\"cat\":\"#/$defs/Cat\",\"dog\":\"#/$defs/Dog\"},\"propertyName\":\"kind\"},\"oneOf\":"
                "[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":\"#/$defs/Dog\"}],\"title\":\"Pet\"}},\"required\":[\"pet\"],"
                "\"title\":\"Pet\",\"type\":\"object\"}");
    expect(g, "{\"pet\":{\"kind\":\"cat\",\"lives\":9}}", true);
    expect(g, "{\"pet\":{\"kind\":\"dog\",\"good\":true}}", true);
    expect(g, "{\"pet\":{\"kind\":\"cat\",\"lives\":10}}", false);
    expect(g, "{\"pet\":{\"kind\":\"dog\",\"lives\":1}}", false);
    weft_grammar_unref(g);
    refused("{\"oneOf\":[{\"type\":\"integer\"}],\"minimum\":1}", "minimum");
}

static void email_uri_and_ipv4_formats(void)
{
    /* email: what email-validator (Pydantic's EmailStr) accepts, a subset */
    strings("{\"type\":\"string\",\"format\":\"email\"}",
            L("john.doe@example.com", "a+b@mail.co.uk", "x_y@foo-bar.io", "A@B.CD", "o'n.e!#$%&*/=?^`{|}~@x.org",
              "a@b.testing", "a@b.locals"),
            L("a@b", "a..b@c.de", ".a@b.cd", "a.@b.cd", "a@-b.cd", "a@b-.cd", "a@b--c.de", "a@b.test", "a@b.LOCAL",
              "a@b.localhost", "a@x.onion", "a b@c.de", "a@b.c0m", "a@1.2.3.4", "a\\\"b@c.de", "@b.cd", "a@b.cd."));
    /* uri: scheme://host[/path][?query][#fragment] */
    strings("{\"type\":\"string\",\"format\":\"uri\"}",
            L("https://example.com", "http://a.b/x?y=1&z=%20#frag", "ftp://10.0.0.1/pub/", "svn+ssh://host/a/b",
              "https://www.x-y.io/p/a.b;c=d?q=a/b?c#/x"),
            L("example.com", "http://", "http://a b.com", "http://a.com/%zz", "http://1.2.3.999/", "http://a.b/ x",
              "http://a.b#x#y", "://a.b", "1http://a.b"));
    /* Pydantic's HttpUrl: a uri cut to maxLength 2083 */
    strings("{\"type\":\"string\",\"format\":\"uri\",\"minLength\":1,\"maxLength\":2083}",
            L("https://example.com/a?b#c"), L("https://"));
    strings("{\"type\":\"string\",\"format\":\"ipv4\"}", L("0.0.0.0", "255.255.255.255", "192.168.1.10", "9.99.199.249"),
            L("256.0.0.1", "1.2.3", "01.2.3.4", "1.2.3.4.5", "1.2.3.-1", "1.2.3.260", " 1.2.3.4"));
    strings("{\"type\":\"string\",\"format\":\"ipv4\",\"maxLength\":15,\"minLength\":7}", L("1.2.3.4"), L("1.2.3"));
    refused("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":40}", "maxLength");
    refused("{\"type\":\"string\",\"format\":\"uri\",\"maxLength\":40}", "maxLength");
    refused("{\"type\":\"string\",\"format\":\"ipv4\",\"minLength\":8}", "minLength");
    refused("{\"type\":\"string\",\"format\":\"hostname\"}", "hostname");
}

/* What Pydantic v2 writes for nested models: $defs, a $ref in an anyOf with
 * null (Optional), a list of models, bounds and a pattern inside them. */
static void pydantic_nested_models_with_constraints(void)
{
    static const char ORDER[] =
        "{\"$defs\":{\"Address\":{\"properties\":{\"street\":{\"maxLength\":40,\"title\":\"Street\",\"type\":\"string\"},"
        "\"zip\":{\"pattern\":\"^\\\\d{5}$\",\"title\":\"Zip\",\"type\":\"string\"}},\"required\":[\"street\",\"zip\"],"
        "\"title\":\"Address\",\"type\":\"object\"},\"Item\":{\"properties\":{\"name\":{\"title\":\"Name\",\"type\":"
        "\"string\"},\"qty\":{\"maximum\":99,\"minimum\":1,\"title\":\"Qty\",\"type\":\"integer\"},\"price\":"
        "{\"exclusiveMinimum\":0,\"title\":\"Price\",\"type\":\"number\"}},\"required\":[\"name\",\"qty\",\"price\"],"
        "\"title\":\"Item\",\"type\":\"object\"}},\"properties\":{\"customer\":{\"format\":\"email\",\"title\":"
        "\"Customer\",\"type\":\"string\"},\"address\":{\"anyOf\":[{\"$ref\":\"#/$defs/Address\"},{\"type\":\"null\"}],"
        "\"default\":null},\"items\":{\"items\":{\"$ref\":\"#/$defs/Item\"},\"maxItems\":3,\"minItems\":1,\"title\":"
        "\"Items\",\"type\":\"array\"}},\"required\":[\"customer\",\"items\"],\"title\":\"Order\",\"type\":\"object\"}";
    struct weft_grammar *g = compile(ORDER);
    expect(g, "{\"customer\":\"ann@example.com\",\"address\":{\"street\":\"1 Main St\",\"zip\":\"12345\"},"
              "\"items\":[{\"name\":\"pen\",\"qty\":2,\"price\":1.5},{\"name\":\"ink\",\"qty\":99,\"price\":0.25}]}", true);
    expect(g, "{\"customer\":\"ann@example.com\",\"address\":null,\"items\":[{\"name\":\"pen\",\"qty\":1,\"price\":3}]}",
           true);
    expect(g, "{\"customer\":\"ann@example.com\",\"items\":[{\"name\":\"pen\",\"qty\":1,\"price\":3}]}", true);
    expect(g, "{\"customer\":\"ann@example.com\",\"items\":[]}", false);   /* minItems */
    expect(g, "{\"customer\":\"ann\",\"items\":[{\"name\":\"pen\",\"qty\":1,\"price\":3}]}", false);
    expect(g, "{\"customer\":\"ann@example.com\",\"items\":[{\"name\":\"pen\",\"qty\":0,\"price\":3}]}", false);
    expect(g, "{\"customer\":\"ann@example.com\",\"items\":[{\"name\":\"pen\",\"qty\":1,\"price\":0}]}", false);
    expect(g, "{\"customer\":\"ann@example.com\",\"address\":{\"street\":\"x\",\"zip\":\"1234\"},"
              "\"items\":[{\"name\":\"pen\",\"qty\":1,\"price\":3}]}", false);
    weft_grammar_unref(g);
}

static void unsupported_keywords_are_named(void)
{
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"multipleOf\":2}}}", "multipleOf");
    refused("{\"not\":{\"type\":\"string\"}}", "not");
    refused("{\"$ref\":\"#/$defs/Missing\"}", "Missing");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    refused("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}},\"required\":[\"y\"]}", "'y'");
    refused("{\"anyOf\":[{\"type\":\"integer\"}],\"oneOf\":[{\"type\":\"string\"}]}", "oneOf");
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
    RUN(patterns_match_exactly);
    RUN(patterns_with_lengths);
    RUN(regex_constructs_refused_by_name);
    RUN(integer_bounds_are_exact);
    RUN(number_bounds_are_exact);
    RUN(one_of_is_written_as_any_of);
    RUN(email_uri_and_ipv4_formats);
    RUN(pydantic_nested_models_with_constraints);
    RUN(unsupported_keywords_are_named);
    RUN(compiling_is_linear_and_bounded);
    return check_summary();
}
