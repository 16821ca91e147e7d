#include "server/json_schema.h"

#include "core/grammar.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whitespace is bounded (a model that keeps emitting it still ends); a
 * newline may be followed by an indentation that deep JSON needs. */
const char weft_json_schema_common_rules[] =
    "j-ws ::= [ \\t]{0,4} (\"\\n\" [ \\t]{0,48}){0,2}\n"
    "j-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "j-string ::= \"\\\"\" j-char* \"\\\"\"\n"
    "j-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "j-number ::= j-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "j-bool ::= \"true\" | \"false\"\n"
    "j-null ::= \"null\"\n"
    "j-value ::= j-object | j-array | j-string | j-number | j-bool | j-null\n"
    "j-object ::= \"{\" j-ws (j-string j-ws \":\" j-ws j-value j-ws (\",\" j-ws j-string j-ws \":\" j-ws j-value j-ws)*)? "
    "\"}\"\n"
    "j-array ::= \"[\" j-ws (j-value j-ws (\",\" j-ws j-value j-ws)*)? \"]\"\n"
    "j-2d ::= [0-9]{2}\n"
    "j-date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
    "j-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "j-hex ::= [0-9a-fA-F]\n"
    "j-uuid ::= j-hex{8} \"-\" j-hex{4} \"-\" j-hex{4} \"-\" j-hex{4} \"-\" j-hex{12}\n";

/* ---- growable text ---- */

/* A grammar literal for text: "..." with the grammar's escapes. */
static void sb_literal(struct weft_strbuf *b, const char *s, size_t n)
{
    weft_sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            weft_sb_put(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            weft_sb_printf(b, "\\x%02x", c);
        } else {
            weft_sb_put(b, (const char *)&c, 1);
        }
    }
    weft_sb_put(b, "\"", 1);
}

/* ---- the converter ---- */

#define MAX_REFS 256
#define MAX_DEPTH 64

struct conv {
    json_t *root;
    const char *prefix;
    struct weft_strbuf *out;  /* complete rules */
    char *err;
    size_t err_size;
    bool failed;
    unsigned next_rule;
    unsigned depth;
    struct {
        char *ref;
        char name[48];
    } refs[MAX_REFS];
    unsigned n_refs;
    char fmt_rule[8][48];   /* the rule of each generated format (enum fmt), once made */
};

static bool fail(struct conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(struct conv *c, const char *path, const char *fmt, ...)
{
    if (c->failed) return false;
    c->failed = true;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_size, "%s at %s", what, path);
    return false;
}

static void fresh_name(struct conv *c, char *name, size_t n) { snprintf(name, n, "%sr%u", c->prefix, c->next_rule++); }

/* A local buffer for a rule body. */
struct body {
    struct weft_strbuf b;
};

static void body_init(struct body *bd) { bd->b = (struct weft_strbuf){0}; }

/* Emit "name ::= body" into the output; frees the body. */
static bool emit_rule(struct conv *c, const char *name, struct body *bd)
{
    if (c->next_rule > WEFT_GRAMMAR_MAX_RULES) {
        weft_sb_free(&bd->b);
        /* the first failure is the one reported: the callers' "out of memory" after it is not */
        return fail(c, "#", "the schema makes more than %u grammar rules (the bound on one request's grammar)",
                    WEFT_GRAMMAR_MAX_RULES);
    }
    if (bd->b.oom) c->out->oom = true;
    weft_sb_printf(c->out, "%s ::= %s\n", name, bd->b.p ? bd->b.p : "\"\"");
    weft_sb_free(&bd->b);
    return !c->out->oom;
}

static bool rule_for(struct conv *c, json_t *s, const char *path, char *name, size_t name_size);

/* discriminator: OpenAPI's hint beside oneOf (Pydantic writes it); the
 * alternatives' own "const" already tells them apart */
static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict", "name", "discriminator", NULL};

/* the keywords that constrain a string's or a number's value */
static const char *const VALUE_KEYWORDS[] = {"minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                             "exclusiveMinimum", "exclusiveMaximum", NULL};
static const char *const NUMBER_KEYWORDS[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static bool in_list(const char *k, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

/* Refuse any keyword the generated grammar would not enforce. */
static bool check_keywords(struct conv *c, json_t *s, const char *path)
{
    static const char *const STRUCT[] = {"type", "properties", "required", "additionalProperties", "items",
                                         "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf",
                                         "oneOf", "allOf", "$ref", "minLength", "maxLength", "format", "pattern",
                                         "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        (void)v;
        if (!in_list(k, STRUCT) && !in_list(k, ANNOTATIONS))
            return fail(c, path, "unsupported JSON Schema keyword '%s'", k);
    }
    return true;
}

static void child_path(char *out, size_t n, const char *path, const char *a, const char *b)
{
    snprintf(out, n, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* The rule a "$ref" names (generated once; recursion reuses the name). */
static bool ref_rule(struct conv *c, const char *ref, const char *path, char *name, size_t name_size)
{
    for (unsigned i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) {
            snprintf(name, name_size, "%s", c->refs[i].name);
            return true;
        }
    json_t *target = NULL;
    if (!strcmp(ref, "#")) target = c->root;
    else if (!strncmp(ref, "#/$defs/", 8)) target = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14))
        target = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
    else return fail(c, path, "unsupported '$ref' '%.100s' (only #, #/$defs/NAME, #/definitions/NAME)", ref);
    if (!target) return fail(c, path, "'$ref' '%.100s' names nothing in the schema", ref);
    if (c->n_refs == MAX_REFS) return fail(c, path, "more than %d '$ref' targets", MAX_REFS);
    unsigned i = c->n_refs++;
    c->refs[i].ref = strdup(ref);
    if (!c->refs[i].ref) return fail(c, path, "out of memory");
    fresh_name(c, c->refs[i].name, sizeof c->refs[i].name);
    snprintf(name, name_size, "%s", c->refs[i].name);
    /* the target's own rule, and the named one pointing at it */
    char inner[48];
    if (!rule_for(c, target, ref, inner, sizeof inner)) return false;
    struct body bd;
    body_init(&bd);
    weft_sb_puts(&bd.b, inner);
    return emit_rule(c, c->refs[i].name, &bd);
}

/* A JSON text as a grammar literal. */
static bool literal_value(struct conv *c, json_t *v, struct weft_strbuf *b, const char *path)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return fail(c, path, "out of memory");
    sb_literal(b, t, strlen(t));
    free(t);
    return true;
}

static bool get_count(struct conv *c, json_t *s, const char *key, const char *path, long long *out)
{
    json_t *v = json_object_get(s, key);
    *out = -1;
    if (!v) return true;
    /* the grammar's repetition bound (core/grammar.h) is the largest count a schema may give */
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535)
        return fail(c, path, "'%s' must be an integer from 0 to 65535", key);
    *out = json_integer_value(v);
    return true;
}

/* "{m,n}" (n < 0: unbounded) */
static void sb_bounds(struct weft_strbuf *b, long long m, long long n)
{
    if (n < 0) weft_sb_printf(b, "{%lld,}", m);
    else weft_sb_printf(b, "{%lld,%lld}", m, n);
}

/* ---- integer and decimal ranges ---- */

static bool all_digit(const char *s, int n, char d)
{
    for (int i = 0; i < n; i++)
        if (s[i] != d) return false;
    return true;
}

/* [0-9]{lo,hi} ("" when hi is 0) */
static void any_digits(struct weft_strbuf *b, int lo, int hi)
{
    if (hi <= 0) weft_sb_puts(b, "\"\"");
    else if (lo == hi && lo == 1) weft_sb_puts(b, "[0-9]");
    else if (lo == hi) weft_sb_printf(b, "[0-9]{%d}", lo);
    else weft_sb_printf(b, "[0-9]{%d,%d}", lo, hi);
}

static void digit_range(struct weft_strbuf *b, char a, char z)
{
    if (a == z) weft_sb_printf(b, "\"%c\"", a);
    else weft_sb_printf(b, "[%c-%c]", a, z);
}

/* The n-digit strings from x to y (x <= y, both n digits). Where the
 * leading digits differ: x's leading digit then x's rest..99..9, the digits
 * strictly between then any n-1 digits, y's leading digit then 00..0..y's
 * rest (the first and last merge into the middle when x's rest is all zeros
 * or y's all nines). O(n^2) text. */
static void digits_between(struct weft_strbuf *b, const char *x, const char *y, int n)
{
    if (all_digit(x, n, '0') && all_digit(y, n, '9')) {
        any_digits(b, n, n);
        return;
    }
    if (n == 1) {
        digit_range(b, x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        weft_sb_printf(b, "\"%c\" ", x[0]);
        digits_between(b, x + 1, y + 1, n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    bool x_low = all_digit(x + 1, n - 1, '0'), y_high = all_digit(y + 1, n - 1, '9');
    char lo = x_low ? x[0] : (char)(x[0] + 1), hi = y_high ? y[0] : (char)(y[0] - 1);
    const char *sep = "";
    weft_sb_putc(b, '(');
    if (!x_low) {
        weft_sb_printf(b, "\"%c\" ", x[0]);
        digits_between(b, x + 1, nines, n - 1);
        sep = " | ";
    }
    if (lo <= hi) {
        weft_sb_puts(b, sep);
        digit_range(b, lo, hi);
        weft_sb_putc(b, ' ');
        any_digits(b, n - 1, n - 1);
        sep = " | ";
    }
    if (!y_high) {
        weft_sb_printf(b, "%s\"%c\" ", sep, y[0]);
        digits_between(b, zeros, y + 1, n - 1);
    }
    weft_sb_putc(b, ')');
}

static int n_digits(uint64_t v)
{
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

/* The decimal texts (no leading zeros) of lo..hi, one group. */
static void uint_range(struct weft_strbuf *b, uint64_t lo, uint64_t hi)
{
    int nlo = n_digits(lo), nhi = n_digits(hi);
    uint64_t p = 1;   /* 10^(d-1) */
    for (int i = 1; i < nlo; i++) p *= 10;
    weft_sb_putc(b, '(');
    for (int d = nlo; d <= nhi; d++) {
        char x[24], y[24];
        snprintf(x, sizeof x, "%0*llu", d, (unsigned long long)(d == nlo ? lo : p));
        snprintf(y, sizeof y, "%0*llu", d, (unsigned long long)(d == nhi ? hi : p * 10 - 1));
        if (d > nlo) weft_sb_puts(b, " | ");
        digits_between(b, x, y, d);
        if (d < nhi) p *= 10;
    }
    weft_sb_putc(b, ')');
}

static uint64_t magnitude(long long v) { return v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v; }

/* JSON integers lo..hi ("-0" never). */
static void int_range(struct weft_strbuf *b, long long lo, long long hi)
{
    if (hi < 0) {
        weft_sb_puts(b, "(\"-\" ");
        uint_range(b, magnitude(hi), magnitude(lo));
        weft_sb_putc(b, ')');
    } else if (lo >= 0) {
        uint_range(b, (uint64_t)lo, (uint64_t)hi);
    } else {
        weft_sb_puts(b, "(\"-\" ");
        uint_range(b, 1, magnitude(lo));
        weft_sb_puts(b, " | ");
        uint_range(b, 0, (uint64_t)hi);
        weft_sb_putc(b, ')');
    }
}

/* The largest magnitude j-int writes (16 digits): the bound an integer or
 * number gets on a side the schema leaves open. */
#define J_INT_MAX 9999999999999999LL

/* A number's bounds as the schema gives them: each side from the inclusive
 * keyword, the exclusive one (a number; or, draft 4, a boolean that makes
 * minimum/maximum exclusive), or both (the tighter wins). */
struct num_bound {
    json_t *v;
    bool excl;
    const char *key;
};

static bool number_bounds(struct conv *c, json_t *s, const char *path, struct num_bound lower[2], int *nl,
                          struct num_bound upper[2], int *nu)
{
    *nl = *nu = 0;
    for (int side = 0; side < 2; side++) {
        const char *inc = side ? "maximum" : "minimum", *exc = side ? "exclusiveMaximum" : "exclusiveMinimum";
        json_t *vi = json_object_get(s, inc), *ve = json_object_get(s, exc);
        struct num_bound *out = side ? upper : lower;
        int *n = side ? nu : nl;
        if (vi && !json_is_number(vi)) return fail(c, path, "'%s' must be a number", inc);
        if (ve && !json_is_number(ve) && !json_is_boolean(ve))
            return fail(c, path, "'%s' must be a number", exc);
        if (vi) out[(*n)++] = (struct num_bound){vi, json_is_true(ve), inc};
        if (ve && json_is_number(ve)) out[(*n)++] = (struct num_bound){ve, true, exc};
    }
    return true;
}

/* One bound as an integer: ceil (lower) or floor (upper), an exclusive one
 * moved one inward. 1: beyond int64 on the open side (no constraint); -1:
 * beyond it on the other (no integer fits). */
static int int_bound(const struct num_bound *nb, bool lower, long long *out)
{
    if (json_is_integer(nb->v)) {
        long long i = json_integer_value(nb->v);
        if (nb->excl && lower && i == LLONG_MAX) return -1;
        if (nb->excl && !lower && i == LLONG_MIN) return -1;
        *out = nb->excl ? (lower ? i + 1 : i - 1) : i;
        return 0;
    }
    double d = json_real_value(nb->v);
    double r = lower ? (nb->excl ? floor(d) + 1 : ceil(d)) : (nb->excl ? ceil(d) - 1 : floor(d));
    if (r >= 9223372036854775808.0) return lower ? -1 : 1;
    if (r < -9223372036854775808.0) return lower ? 1 : -1;
    *out = (long long)r;
    return 0;
}

static bool integer_body(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    struct num_bound lower[2], upper[2];
    int nl, nu;
    if (!number_bounds(c, s, path, lower, &nl, upper, &nu)) return false;
    if (!nl && !nu) {
        weft_sb_puts(b, "j-int");
        return true;
    }
    long long lo = LLONG_MIN, hi = LLONG_MAX;
    bool has_lo = false, has_hi = false;
    for (int k = 0; k < nl + nu; k++) {
        bool is_lo = k < nl;
        const struct num_bound *nb = is_lo ? &lower[k] : &upper[k - nl];
        long long v;
        int r = int_bound(nb, is_lo, &v);
        if (r < 0) return fail(c, path, "no integer satisfies '%s' (beyond the int64 range)", nb->key);
        if (r > 0) continue;
        if (is_lo && (!has_lo || v > lo)) lo = v, has_lo = true;
        if (!is_lo && (!has_hi || v < hi)) hi = v, has_hi = true;
    }
    if (!has_lo) lo = has_hi && hi < -J_INT_MAX ? LLONG_MIN : -J_INT_MAX;
    if (!has_hi) hi = has_lo && lo > J_INT_MAX ? LLONG_MAX : J_INT_MAX;
    if (lo > hi) return fail(c, path, "no integer lies within the schema's minimum/maximum bounds");
    int_range(b, lo, hi);
    return true;
}

/* A decimal (neg ? -1 : 1) * (ip + fp / 10^16): what a bounded number is
 * written as, 16 fraction digits at most, no exponent. Zero is never neg. */
#define FRAC_DIGITS 16
#define FRAC_ONE 10000000000000000ULL
struct dec {
    bool neg;
    uint64_t ip, fp;
};

static int dec_cmp(struct dec a, struct dec b)
{
    int m = a.ip != b.ip ? (a.ip < b.ip ? -1 : 1) : a.fp != b.fp ? (a.fp < b.fp ? -1 : 1) : 0;
    if (a.neg != b.neg) return a.neg ? -1 : 1;
    return a.neg ? -m : m;
}

/* d as a dec rounded up (up) or down to 16 fraction digits, starting from
 * its shortest round-trip decimal text S: every text t >= S reads back as a
 * double >= d (correct rounding is monotonic), so a bound kept this way holds
 * for a validator comparing doubles (Pydantic) and one comparing the
 * decimals. false when |d| >= 1e18. */
static bool dec_from_double(double d, bool up, struct dec *out)
{
    if (!(fabs(d) < 1e18)) return false;
    char t[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, d);
        if (strtod(t, NULL) == d) break;
    }
    /* t = [-]D[.DDD]e[+-]X: value = 0.DDDD * 10^(X+1) */
    const char *q = t;
    bool neg = *q == '-';
    char dig[24];
    int nd = 0;
    for (q += neg; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 20) dig[nd++] = *q;
    int point = (*q == 'e' ? atoi(q + 1) : 0) + 1;
    uint64_t ip = 0, fp = 0;
    for (int i = 0; i < point; i++) ip = ip * 10 + (uint64_t)(i < nd ? dig[i] - '0' : 0);
    for (int k = 0; k < FRAC_DIGITS; k++) {
        int i = point + k;
        fp = fp * 10 + (uint64_t)(i >= 0 && i < nd ? dig[i] - '0' : 0);
    }
    bool rest = false;
    for (int i = point + FRAC_DIGITS < 0 ? 0 : point + FRAC_DIGITS; i < nd; i++) rest |= dig[i] != '0';
    /* a lower bound's ceil and an upper bound's floor: the magnitude goes up
     * for a positive lower bound and a negative upper one */
    if (rest && up != neg && ++fp == FRAC_ONE) fp = 0, ip++;
    *out = (struct dec){neg && (ip || fp), ip, fp};
    return true;
}

/* The fraction digits from position i on (1..16-i of them when nonempty,
 * else 0..16-i) whose value, padded with zeros to 16 digits, is >= t[i..]
 * (frac_ge), <= u[i..] (frac_le) or between the two (t[i..] <= u[i..]). */
static void frac_ge(struct weft_strbuf *b, const char *t, int i, bool nonempty)
{
    int left = FRAC_DIGITS - i;
    if (all_digit(t + i, left, '0')) {
        any_digits(b, nonempty ? 1 : 0, left);
        return;
    }
    weft_sb_putc(b, '(');
    if (t[i] < '9') {
        digit_range(b, (char)(t[i] + 1), '9');
        if (left > 1) weft_sb_putc(b, ' '), any_digits(b, 0, left - 1);
        weft_sb_puts(b, " | ");
    }
    weft_sb_printf(b, "\"%c\"", t[i]);
    if (left > 1) weft_sb_putc(b, ' '), frac_ge(b, t, i + 1, false);
    weft_sb_putc(b, ')');
}

static void frac_le(struct weft_strbuf *b, const char *u, int i, bool nonempty)
{
    int left = FRAC_DIGITS - i;
    if (all_digit(u + i, left, '9')) {
        any_digits(b, nonempty ? 1 : 0, left);
        return;
    }
    weft_sb_putc(b, '(');
    if (u[i] > '0') {
        digit_range(b, '0', (char)(u[i] - 1));
        if (left > 1) weft_sb_putc(b, ' '), any_digits(b, 0, left - 1);
        weft_sb_puts(b, " | ");
    }
    weft_sb_printf(b, "\"%c\"", u[i]);
    if (left > 1) weft_sb_putc(b, ' '), frac_le(b, u, i + 1, false);
    weft_sb_puts(b, nonempty ? ")" : ")?");
}

static void frac_between(struct weft_strbuf *b, const char *t, const char *u, int i, bool nonempty)
{
    int left = FRAC_DIGITS - i;
    if (all_digit(t + i, left, '0')) {
        frac_le(b, u, i, nonempty);
        return;
    }
    if (all_digit(u + i, left, '9')) {
        frac_ge(b, t, i, nonempty);
        return;
    }
    weft_sb_printf(b, "(\"%c\"", t[i]);
    if (t[i] == u[i]) {
        weft_sb_putc(b, ' ');
        frac_between(b, t, u, i + 1, false);
        weft_sb_putc(b, ')');
        return;
    }
    if (left > 1) weft_sb_putc(b, ' '), frac_ge(b, t, i + 1, false);
    if (t[i] + 1 <= u[i] - 1) {
        weft_sb_puts(b, " | ");
        digit_range(b, (char)(t[i] + 1), (char)(u[i] - 1));
        if (left > 1) weft_sb_putc(b, ' '), any_digits(b, 0, left - 1);
    }
    weft_sb_printf(b, " | \"%c\"", u[i]);
    if (left > 1) weft_sb_putc(b, ' '), frac_le(b, u, i + 1, false);
    weft_sb_putc(b, ')');
}

/* Decimal texts of the values a..b (0 <= a <= b): the integer part, then
 * "." and 1..16 fraction digits (left out where the value allows). */
static void nonneg_range(struct weft_strbuf *b, struct dec a, struct dec z)
{
    char t[24], u[24];
    snprintf(t, sizeof t, "%016llu", (unsigned long long)a.fp);
    snprintf(u, sizeof u, "%016llu", (unsigned long long)z.fp);
    if (a.ip == z.ip) {
        weft_sb_printf(b, "(\"%llu\" (\".\" ", (unsigned long long)a.ip);
        frac_between(b, t, u, 0, true);
        weft_sb_puts(b, a.fp ? "))" : ")?)");
        return;
    }
    const char *sep = "";
    uint64_t mid_lo = a.ip, mid_hi = z.fp == FRAC_ONE - 1 ? z.ip : z.ip - 1;
    weft_sb_putc(b, '(');
    if (a.fp) {
        weft_sb_printf(b, "\"%llu\" \".\" ", (unsigned long long)a.ip);
        frac_ge(b, t, 0, true);
        mid_lo++;
        sep = " | ";
    }
    if (mid_lo <= mid_hi) {
        weft_sb_puts(b, sep);
        uint_range(b, mid_lo, mid_hi);
        weft_sb_puts(b, " (\".\" [0-9]{1,16})?");
        sep = " | ";
    }
    if (z.fp != FRAC_ONE - 1) {
        weft_sb_printf(b, "%s\"%llu\" (\".\" ", sep, (unsigned long long)z.ip);
        frac_le(b, u, 0, true);
        weft_sb_puts(b, ")?");
    }
    weft_sb_putc(b, ')');
}

/* A number with bounds: plain decimals (no exponent, 16 fraction digits at
 * most) inside them; bounds are taken as doubles, exclusive ones as the next
 * double inward (see dec_from_double). */
static bool number_body(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    struct num_bound lower[2], upper[2];
    int nl, nu;
    if (!number_bounds(c, s, path, lower, &nl, upper, &nu)) return false;
    if (!nl && !nu) {
        weft_sb_puts(b, "j-number");
        return true;
    }
    struct dec lo = {0}, hi = {0};
    bool has_lo = false, has_hi = false;
    for (int k = 0; k < nl + nu; k++) {
        bool is_lo = k < nl;
        const struct num_bound *nb = is_lo ? &lower[k] : &upper[k - nl];
        if (json_is_integer(nb->v) && magnitude(json_integer_value(nb->v)) > (1ULL << 53))
            return fail(c, path, "'%s' beyond +-2^53 on a number is not supported", nb->key);
        double d = json_number_value(nb->v);
        if (nb->excl) d = nextafter(d, is_lo ? INFINITY : -INFINITY);
        struct dec v;
        if (!dec_from_double(d, is_lo, &v)) {
            if ((d > 0) == is_lo) return fail(c, path, "'%s' is beyond the numbers a grammar writes (1e18)", nb->key);
            continue;   /* beyond them on the open side */
        }
        if (is_lo && (!has_lo || dec_cmp(v, lo) > 0)) lo = v, has_lo = true;
        if (!is_lo && (!has_hi || dec_cmp(v, hi) < 0)) hi = v, has_hi = true;
    }
    const struct dec wide = {false, 999999999999999999ULL, FRAC_ONE - 1}, open = {false, J_INT_MAX, FRAC_ONE - 1};
    if (!has_lo) {
        lo = has_hi && hi.neg && hi.ip >= (uint64_t)J_INT_MAX ? wide : open;
        lo.neg = true;
    }
    if (!has_hi) hi = has_lo && !lo.neg && lo.ip >= (uint64_t)J_INT_MAX ? wide : open;
    if (dec_cmp(lo, hi) > 0) return fail(c, path, "no number lies within the schema's minimum/maximum bounds");
    weft_sb_putc(b, '(');
    if (lo.neg) {   /* magnitudes from |hi| (or the smallest above 0) to |lo| */
        struct dec m_lo = hi.neg ? (struct dec){false, hi.ip, hi.fp} : (struct dec){false, 0, 1};
        weft_sb_puts(b, "\"-\" ");
        nonneg_range(b, m_lo, (struct dec){false, lo.ip, lo.fp});
    }
    if (!hi.neg) {
        if (lo.neg) weft_sb_puts(b, " | ");
        nonneg_range(b, lo.neg ? (struct dec){0} : lo, hi);
    }
    weft_sb_putc(b, ')');
    return true;
}

/* ---- string formats ---- */

enum fmt { FMT_DATE, FMT_TIME, FMT_DATE_TIME, FMT_UUID, FMT_EMAIL, FMT_URI, FMT_IPV4, N_FMT };
_Static_assert(N_FMT <= sizeof ((struct conv *)0)->fmt_rule / sizeof ((struct conv *)0)->fmt_rule[0],
               "struct conv's fmt_rule holds every format");

/* Each format's lengths in characters (max 0: unbounded). */
static const struct {
    const char *name;
    unsigned min, max;
} FORMATS[N_FMT] = {{"date", 10, 10},  {"time", 9, 21}, {"date-time", 20, 32}, {"uuid", 36, 36},
                    {"email", 6, 171}, {"uri", 5, 0},   {"ipv4", 7, 15}};

/* Letters, min..max of them, that are none of words (lowercase; compared
 * ignoring case): a walk down the words' trie, where at each prefix a letter
 * that leaves every word may be followed by any letters. */
static void letters_except(struct weft_strbuf *b, const char *const *words, char *prefix, int d, int min, int max)
{
    bool next[26] = {false}, is_word = false;
    for (const char *const *w = words; *w; w++) {
        if (strncmp(*w, prefix, (size_t)d)) continue;
        if ((*w)[d]) next[(*w)[d] - 'a'] = true;
        else is_word = true;
    }
    weft_sb_putc(b, '(');
    if (d + 1 <= max) {
        /* the letters that leave every word, as a class of both cases */
        weft_sb_putc(b, '[');
        for (int cs = 0; cs < 2; cs++)
            for (int a = 0; a < 26; a++) {
                if (next[a] || (a && !next[a - 1])) continue;
                int z = a;
                while (z + 1 < 26 && !next[z + 1]) z++;
                char base = cs ? 'A' : 'a';
                if (z > a) weft_sb_printf(b, "%c-%c", base + a, base + z);
                else weft_sb_putc(b, (char)(base + a));
            }
        weft_sb_putc(b, ']');
        int lo = min - d - 1 > 0 ? min - d - 1 : 0, hi = max - d - 1;
        if (hi > 0 && lo == hi) weft_sb_printf(b, " [a-zA-Z]{%d}", lo);
        else if (hi > 0) weft_sb_printf(b, " [a-zA-Z]{%d,%d}", lo, hi);
        for (int a = 0; a < 26; a++) {
            if (!next[a]) continue;
            weft_sb_printf(b, " | [%c%c] ", 'a' + a, 'A' + a);
            prefix[d] = (char)('a' + a);
            letters_except(b, words, prefix, d + 1, min, max);
        }
    } else {
        weft_sb_puts(b, "\"\"");
    }
    weft_sb_puts(b, d >= min && !is_word ? ")?" : ")");
}

/* A hostname label: 1..31 letters, digits and single inner hyphens (what
 * RFC 1123 and email-validator accept: no "--", so no IDNA "xn--" label). */
#define HOST_LABEL "[a-zA-Z0-9] ([a-zA-Z0-9] | \"-\" [a-zA-Z0-9]){0,15}"
/* RFC 3986 pchar, and "/" (a path) or "/" "?" (query, fragment) */
#define URI_PATH_CHAR "([a-zA-Z0-9._~!$&'()*+,;=:@/\\-] | \"%\" j-hex j-hex)"
#define URI_QUERY_CHAR "([a-zA-Z0-9._~!$&'()*+,;=:@/?\\-] | \"%\" j-hex j-hex)"
/* scheme (16) "://" (3) host (127: three labels and a last one, or an IPv4
 * address): what a bounded uri's path, query and fragment share the rest of
 * maxLength after */
#define URI_FIXED 146

static void format_text(struct conv *c, enum fmt f, long long max_len, struct weft_strbuf *b)
{
    switch (f) {
    case FMT_EMAIL: {
        /* local part: a dot-atom of up to 3 atoms (62 characters, under
         * RFC 5321's 64); domain: 2..4 labels, the last (the TLD) 2..12
         * letters and not a special-use name email-validator refuses */
        static const char *const SPECIAL_USE[] = {"arpa", "invalid", "local", "localhost", "onion", "test", NULL};
        char prefix[16] = "";
        weft_sb_puts(b, "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]{1,20} (\".\" [a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]{1,20}){0,2} "
                        "\"@\" (" HOST_LABEL " \".\"){1,3} ");
        letters_except(b, SPECIAL_USE, prefix, 0, 2, 12);
        return;
    }
    case FMT_IPV4:
        /* four octets 0..255 without leading zeros */
        uint_range(b, 0, 255);
        weft_sb_puts(b, " (\".\" ");
        uint_range(b, 0, 255);
        weft_sb_puts(b, "){3}");
        return;
    default: {
        /* FMT_URI: scheme://host[/path][?query][#fragment], valid for RFC 3986 and
         * WHATWG (Pydantic's AnyUrl) alike: the last host label starts with a
         * letter (WHATWG reads a numeric one as IPv4), no port (a file: URL
         * may not have one), no userinfo */
        char n[24] = "*";
        if (max_len >= 0) snprintf(n, sizeof n, "{0,%lld}", ((max_len - URI_FIXED) / 3 - 1) / 3);
        weft_sb_printf(b, "[a-zA-Z] [a-zA-Z0-9+.\\-]{0,15} \"://\" ((" HOST_LABEL " \".\"){0,3} [a-zA-Z] "
                          "([a-zA-Z0-9] | \"-\" [a-zA-Z0-9]){0,15} | %s)",
                       c->fmt_rule[FMT_IPV4]);
        /* (the chars hold a '%': put, not printf) */
        weft_sb_puts(b, " (\"/\" " URI_PATH_CHAR);
        weft_sb_puts(b, n);
        weft_sb_puts(b, ")? (\"?\" " URI_QUERY_CHAR);
        weft_sb_puts(b, n);
        weft_sb_puts(b, ")? (\"#\" " URI_QUERY_CHAR);
        weft_sb_puts(b, n);
        weft_sb_puts(b, ")?");
        return;
    }
    }
}

/* The rule for format f (max_len: a uri's maxLength, else -1): the common
 * rules' for date, time, date-time and uuid; the others made once per
 * conversion (a bounded uri each time). false (failed) on out of memory. */
static bool format_rule(struct conv *c, enum fmt f, long long max_len, char *name, size_t name_size)
{
    static const char *const COMMON[] = {"j-date", "j-time", "j-date \"T\" j-time", "j-uuid"};
    if (f <= FMT_UUID) {
        snprintf(name, name_size, "%s", COMMON[f]);
        return true;
    }
    if (max_len < 0 && c->fmt_rule[f][0]) {
        snprintf(name, name_size, "%s", c->fmt_rule[f]);
        return true;
    }
    if (f == FMT_URI && !format_rule(c, FMT_IPV4, -1, name, name_size)) return false;
    struct body bd;
    body_init(&bd);
    format_text(c, f, max_len, &bd.b);
    fresh_name(c, name, name_size);
    if (max_len < 0) snprintf(c->fmt_rule[f], sizeof c->fmt_rule[f], "%s", name);
    return emit_rule(c, name, &bd) || fail(c, "#", "out of memory");
}

static bool string_body(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    long long mn, mx;
    if (!get_count(c, s, "minLength", path, &mn) || !get_count(c, s, "maxLength", path, &mx)) return false;
    if (mx >= 0 && mn > mx) return fail(c, path, "'minLength' is above 'maxLength'");
    if (pat) {
        if (!json_is_string(pat)) return fail(c, path, "'pattern' must be a string");
        if (fmt) return fail(c, path, "'pattern' with 'format' is not supported");
        char err[224];
        weft_sb_puts(b, "\"\\\"\" ");
        if (!weft_json_schema_regex(json_string_value(pat), json_string_length(pat), mn, mx, b, err, sizeof err))
            return fail(c, path, "%s", err);
        weft_sb_puts(b, " \"\\\"\"");
        return true;
    }
    if (fmt) {
        const char *f = json_string_value(fmt);
        int k = 0;
        while (k < N_FMT && (!f || strcmp(f, FORMATS[k].name))) k++;
        if (k == N_FMT)
            return fail(c, path, "unsupported string format '%.64s' (date, time, date-time, uuid, email, uri, ipv4)",
                        f ? f : "?");
        /* lengths the format's own values already keep are fine; a uri is
         * cut to a maxLength; other bounds are refused */
        if (mn > (long long)FORMATS[k].min)
            return fail(c, path, "'minLength' above %u with format '%s' is not supported", FORMATS[k].min, f);
        long long bound = -1;
        if (mx >= 0 && (FORMATS[k].max == 0 || mx < FORMATS[k].max)) {
            if (k != FMT_URI)
                return fail(c, path, "'maxLength' below %u with format '%s' is not supported", FORMATS[k].max, f);
            if (mx < URI_FIXED + 3)
                return fail(c, path, "'maxLength' below %u with format 'uri' is not supported", URI_FIXED + 3);
            bound = mx;
        }
        char rule[48];
        if (!format_rule(c, (enum fmt)k, bound, rule, sizeof rule)) return false;
        weft_sb_printf(b, "\"\\\"\" %s \"\\\"\"", rule);
        return true;
    }
    if (mn < 0 && mx < 0) {
        weft_sb_puts(b, "j-string");
        return true;
    }
    weft_sb_puts(b, "\"\\\"\" j-char");
    sb_bounds(b, mn < 0 ? 0 : mn, mx);
    weft_sb_puts(b, " \"\\\"\"");
    return true;
}

static bool array_body(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    long long mn, mx;
    if (!get_count(c, s, "minItems", path, &mn) || !get_count(c, s, "maxItems", path, &mx)) return false;
    if (mn < 0) mn = 0;
    if (mx >= 0 && mn > mx) return fail(c, path, "'minItems' is above 'maxItems'");
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    char p2[512];
    if (prefix) {
        if (!json_is_array(prefix)) return fail(c, path, "'prefixItems' must be an array of schemas");
        if (items && !json_is_false(items))
            return fail(c, path, "'prefixItems' with 'items' other than false is not supported");
        if (json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
            return fail(c, path, "'prefixItems' with 'minItems'/'maxItems' is not supported");
        weft_sb_puts(b, "\"[\" j-ws");
        size_t i;
        json_t *it;
        json_array_foreach(prefix, i, it) {
            char nm[48], idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            child_path(p2, sizeof p2, path, "prefixItems", idx);
            if (!rule_for(c, it, p2, nm, sizeof nm)) return false;
            weft_sb_printf(b, "%s %s j-ws", i ? " \",\" j-ws" : "", nm);
        }
        weft_sb_puts(b, " \"]\"");
        return true;
    }
    char item[48] = "j-value";
    if (items && !json_is_true(items)) {
        if (json_is_false(items)) {
            if (mn > 0) return fail(c, path, "'items': false with 'minItems' above 0 matches nothing");
            weft_sb_puts(b, "\"[\" j-ws \"]\"");
            return true;
        }
        child_path(p2, sizeof p2, path, "items", NULL);
        if (!rule_for(c, items, p2, item, sizeof item)) return false;
    }
    if (mx == 0) {
        weft_sb_puts(b, "\"[\" j-ws \"]\"");
        return true;
    }
    if (mn == 0) {
        weft_sb_printf(b, "\"[\" j-ws (%s j-ws (\",\" j-ws %s j-ws)", item, item);
        if (mx < 0) weft_sb_puts(b, "*");
        else sb_bounds(b, 0, mx - 1);
        weft_sb_puts(b, ")? \"]\"");
    } else {
        weft_sb_printf(b, "\"[\" j-ws %s j-ws (\",\" j-ws %s j-ws)", item, item);
        sb_bounds(b, mn - 1, mx < 0 ? -1 : mx - 1);
        weft_sb_puts(b, " \"]\"");
    }
    return true;
}

/* Properties in the schema's order; optional ones may be left out. With
 * kv_i the i-th "key": value, P(i) = what may follow once something was
 * written, N(i) = what may come when nothing was yet:
 *   P(i) = ("," kv_i) P(i+1)  [the group optional when kv_i is]
 *   N(i) = kv_i P(i+1)        [required]
 *        | (kv_i P(i+1) | N(i+1)) [optional; N(n) empty] */
static bool object_props(struct conv *c, json_t *props, json_t *required, json_t *addl, const char *path,
                         struct weft_strbuf *b);

static bool object_body(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, path, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, path, "'required' must be an array of names");
    /* the required names as a set (a lookup per property, not a scan: linear in the schema) */
    json_t *required = json_object();
    if (!required) return fail(c, path, "out of memory");
    if (req) {
        size_t i;
        json_t *v;
        json_array_foreach(req, i, v) {
            if (!json_is_string(v)) {
                json_decref(required);
                return fail(c, path, "'required' must be an array of names");
            }
            if (!json_object_get(props, json_string_value(v))) {
                json_decref(required);
                return fail(c, path, "required property '%.64s' is not in 'properties'", json_string_value(v));
            }
            json_object_set_new(required, json_string_value(v), json_true());
        }
    }
    bool done = object_props(c, props, required, addl, path, b);
    json_decref(required);
    return done;
}

static bool object_props(struct conv *c, json_t *props, json_t *required, json_t *addl, const char *path,
                         struct weft_strbuf *b)
{
    char p2[512];
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0) {
        if (addl && json_is_object(addl)) {
            char val[48];
            child_path(p2, sizeof p2, path, "additionalProperties", NULL);
            if (!rule_for(c, addl, p2, val, sizeof val)) return false;
            weft_sb_printf(b,
                      "\"{\" j-ws (j-string j-ws \":\" j-ws %s j-ws (\",\" j-ws j-string j-ws \":\" j-ws %s j-ws)*)? "
                      "\"}\"",
                      val, val);
        } else if (addl && json_is_false(addl)) {
            weft_sb_puts(b, "\"{\" j-ws \"}\"");
        } else {
            weft_sb_puts(b, "j-object");
        }
        return true;
    }
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return fail(c, path, "'additionalProperties' must be a boolean or a schema");
    char (*kv)[48] = calloc(n, sizeof *kv);
    bool *opt = calloc(n, sizeof *opt);
    if (!kv || !opt) {
        free(kv);
        free(opt);
        return fail(c, path, "out of memory");
    }
    size_t i = 0;
    const char *key;
    json_t *ps;
    bool ok = true;
    json_object_foreach(props, key, ps) {
        child_path(p2, sizeof p2, path, "properties", key);
        char val[48];
        if (!rule_for(c, ps, p2, val, sizeof val)) {
            ok = false;
            break;
        }
        struct body bd;
        body_init(&bd);
        json_t *ks = json_string(key);
        char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kt) {
            weft_sb_free(&bd.b);
            ok = fail(c, path, "out of memory");
            break;
        }
        sb_literal(&bd.b, kt, strlen(kt));
        free(kt);
        weft_sb_printf(&bd.b, " j-ws \":\" j-ws %s j-ws", val);
        fresh_name(c, kv[i], sizeof kv[i]);
        if (!emit_rule(c, kv[i], &bd)) {
            ok = fail(c, path, "out of memory");
            break;
        }
        opt[i] = !json_object_get(required, key);
        i++;
    }
    /* P(i) rules from the end, then N(i) */
    char (*pn)[48] = ok ? calloc(n + 1, sizeof *pn) : NULL;
    char (*nn)[48] = ok ? calloc(n + 1, sizeof *nn) : NULL;
    if (ok && (!pn || !nn)) ok = fail(c, path, "out of memory");
    for (size_t k = n; ok && k-- > 0;) {
        struct body bd;
        body_init(&bd);
        weft_sb_printf(&bd.b, "(\",\" j-ws %s)%s%s%s", kv[k], opt[k] ? "?" : "", pn[k + 1][0] ? " " : "", pn[k + 1]);
        fresh_name(c, pn[k], sizeof pn[k]);
        if (!emit_rule(c, pn[k], &bd)) ok = fail(c, path, "out of memory");
    }
    for (size_t k = n; ok && k-- > 0;) {
        struct body bd;
        body_init(&bd);
        const char *rest = pn[k + 1];
        if (!opt[k]) {
            weft_sb_printf(&bd.b, "%s%s%s", kv[k], rest[0] ? " " : "", rest);
        } else if (nn[k + 1][0]) {
            weft_sb_printf(&bd.b, "%s%s%s | %s", kv[k], rest[0] ? " " : "", rest, nn[k + 1]);
        } else {
            weft_sb_printf(&bd.b, "(%s%s%s)?", kv[k], rest[0] ? " " : "", rest);
        }
        fresh_name(c, nn[k], sizeof nn[k]);
        if (!emit_rule(c, nn[k], &bd)) ok = fail(c, path, "out of memory");
    }
    /* N(0) matches nothing only when every property is optional: "{}" */
    if (ok) weft_sb_printf(b, "\"{\" j-ws %s \"}\"", nn[0]);
    free(kv);
    free(opt);
    free(pn);
    free(nn);
    return ok;
}

/* The body for one JSON type (t) of schema s. */
static bool type_body(struct conv *c, json_t *s, const char *t, const char *path, struct weft_strbuf *b)
{
    if (!strcmp(t, "string")) return string_body(c, s, path, b);
    if (!strcmp(t, "integer")) return integer_body(c, s, path, b);
    if (!strcmp(t, "number")) return number_body(c, s, path, b);
    if (!strcmp(t, "boolean")) weft_sb_puts(b, "j-bool");
    else if (!strcmp(t, "null")) weft_sb_puts(b, "j-null");
    else if (!strcmp(t, "array")) return array_body(c, s, path, b);
    else if (!strcmp(t, "object")) return object_body(c, s, path, b);
    else return fail(c, path, "unknown type '%.32s'", t);
    return true;
}

static bool body_for(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    if (json_is_true(s)) {
        weft_sb_puts(b, "j-value");
        return true;
    }
    if (json_is_false(s)) return fail(c, path, "the schema false matches nothing");
    if (!json_is_object(s)) return fail(c, path, "a schema must be an object or a boolean");
    if (!check_keywords(c, s, path)) return false;
    char p2[512];
    json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        if (json_object_size(s) > 1) {
            const char *k;
            json_t *x;
            json_object_foreach(s, k, x) {
                (void)x;
                if (strcmp(k, "$ref") && !in_list(k, ANNOTATIONS))
                    return fail(c, path, "'$ref' beside '%s' is not supported", k);
            }
        }
        if (!json_is_string(v)) return fail(c, path, "'$ref' must be a string");
        char nm[48];
        if (!ref_rule(c, json_string_value(v), path, nm, sizeof nm)) return false;
        weft_sb_puts(b, nm);
        return true;
    }
    if (json_object_get(s, "const") || json_object_get(s, "enum")) {
        /* the listed values are written as they are: a bound beside them would go unchecked */
        const char *k;
        json_t *x;
        json_object_foreach(s, k, x) {
            (void)x;
            if (in_list(k, VALUE_KEYWORDS))
                return fail(c, path, "'%s' beside '%s' is not supported", k,
                            json_object_get(s, "const") ? "const" : "enum");
        }
    }
    if ((v = json_object_get(s, "const"))) return literal_value(c, v, b, path);
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || json_array_size(v) == 0) return fail(c, path, "'enum' must be a non-empty array");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (i) weft_sb_puts(b, " | ");
            if (!literal_value(c, e, b, path)) return false;
        }
        return true;
    }
    /* oneOf is written as anyOf, as llama.cpp's and vLLM's converters do: the
     * grammar lets the text match any alternative and does not check that it
     * matches only one. Real schemas' alternatives rarely overlap (Pydantic's
     * discriminated unions differ in a "const"), but a value that matches
     * two of them passes the grammar and fails a strict oneOf validator. */
    const char *comb = json_object_get(s, "anyOf")   ? "anyOf"
                       : json_object_get(s, "oneOf") ? "oneOf"
                       : json_object_get(s, "allOf") ? "allOf"
                                                     : NULL;
    if (comb) {
        json_t *alts = json_object_get(s, comb);
        if (!json_is_array(alts) || json_array_size(alts) == 0)
            return fail(c, path, "'%s' must be a non-empty array of schemas", comb);
        if (!strcmp(comb, "allOf") && json_array_size(alts) != 1)
            return fail(c, path, "'allOf' with more than one schema is not supported");
        const char *k;
        json_t *x;
        json_object_foreach(s, k, x) {
            (void)x;
            if (strcmp(k, comb) && !in_list(k, ANNOTATIONS))
                return fail(c, path, "'%s' beside '%s' is not supported", comb, k);
        }
        size_t i;
        json_t *a;
        json_array_foreach(alts, i, a) {
            char nm[48], idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            child_path(p2, sizeof p2, path, comb, idx);
            if (!rule_for(c, a, p2, nm, sizeof nm)) return false;
            weft_sb_printf(b, "%s%s", i ? " | " : "", nm);
        }
        return true;
    }
    json_t *ty = json_object_get(s, "type");
    if (!ty) {
        /* the type the other keywords imply, else any value */
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties"))
            return object_body(c, s, path, b);
        if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) return array_body(c, s, path, b);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "format") ||
            json_object_get(s, "pattern"))
            return string_body(c, s, path, b);
        for (const char *const *k = NUMBER_KEYWORDS; *k; k++)
            if (json_object_get(s, *k)) return number_body(c, s, path, b);
        weft_sb_puts(b, "j-value");
        return true;
    }
    if (json_is_string(ty)) return type_body(c, s, json_string_value(ty), path, b);
    if (!json_is_array(ty) || json_array_size(ty) == 0) return fail(c, path, "'type' must be a string or an array");
    size_t i;
    json_t *t;
    json_array_foreach(ty, i, t) {
        if (!json_is_string(t)) return fail(c, path, "'type' must be a string or an array of strings");
        if (i) weft_sb_puts(b, " | ");
        weft_sb_puts(b, "(");
        if (!type_body(c, s, json_string_value(t), path, b)) return false;
        weft_sb_puts(b, ")");
    }
    return true;
}

static bool rule_for(struct conv *c, json_t *s, const char *path, char *name, size_t name_size)
{
    if (c->failed) return false;
    if (++c->depth > MAX_DEPTH) return fail(c, path, "schema nested deeper than %d", MAX_DEPTH);
    struct body bd;
    body_init(&bd);
    bool ok = body_for(c, s, path, &bd.b);
    c->depth--;
    if (!ok) {
        weft_sb_free(&bd.b);
        return false;
    }
    fresh_name(c, name, name_size);
    if (!emit_rule(c, name, &bd)) return fail(c, path, "out of memory");
    return true;
}

bool weft_json_schema_rules(json_t *schema, const char *root_name, const char *prefix, struct weft_strbuf *out,
                            char *err, size_t err_size)
{
    struct conv *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return false;
    }
    c->root = schema;
    c->prefix = prefix;
    c->out = out;
    c->err = err;
    c->err_size = err_size;
    char top[48];
    bool ok = rule_for(c, schema, "#", top, sizeof top);
    if (ok) weft_sb_printf(c->out, "%s ::= %s\n", root_name, top);
    if (ok && c->out->oom) ok = fail(c, "#", "out of memory");
    for (unsigned i = 0; i < c->n_refs; i++) free(c->refs[i].ref);
    free(c);
    return ok;
}

bool weft_json_schema_grammar(json_t *schema, char **out, char *err, size_t err_size)
{
    struct weft_strbuf b = {0};
    weft_sb_puts(&b, weft_json_schema_common_rules);
    if (b.oom || !weft_json_schema_rules(schema, "root", "s-", &b, err, err_size)) {
        if (b.oom) snprintf(err, err_size, "out of memory");
        weft_sb_free(&b);
        *out = NULL;
        return false;
    }
    *out = b.p;
    return true;
}
