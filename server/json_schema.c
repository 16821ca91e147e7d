#include "server/json_schema.h"

#include "core/grammar.h"

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

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict", "name", NULL};

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
                                         "allOf", "$ref", "minLength", "maxLength", "format", NULL};
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
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000)
        return fail(c, path, "'%s' must be a non-negative integer", key);
    *out = json_integer_value(v);
    return true;
}

/* "{m,n}" (n < 0: unbounded) */
static void sb_bounds(struct weft_strbuf *b, long long m, long long n)
{
    if (n < 0) weft_sb_printf(b, "{%lld,}", m);
    else weft_sb_printf(b, "{%lld,%lld}", m, n);
}

static bool string_body(struct conv *c, json_t *s, const char *path, struct weft_strbuf *b)
{
    json_t *fmt = json_object_get(s, "format");
    long long mn, mx;
    if (!get_count(c, s, "minLength", path, &mn) || !get_count(c, s, "maxLength", path, &mx)) return false;
    if (fmt) {
        const char *f = json_string_value(fmt);
        const char *rule = !f ? NULL
                           : !strcmp(f, "date")      ? "j-date"
                           : !strcmp(f, "time")      ? "j-time"
                           : !strcmp(f, "date-time") ? "j-date \"T\" j-time"
                           : !strcmp(f, "uuid")      ? "j-uuid"
                                                     : NULL;
        if (!rule) return fail(c, path, "unsupported string format '%.64s' (date, time, date-time, uuid)", f ? f : "?");
        if (mn >= 0 || mx >= 0) return fail(c, path, "'minLength'/'maxLength' with 'format' is not supported");
        weft_sb_printf(b, "\"\\\"\" %s \"\\\"\"", rule);
        return true;
    }
    if (mn < 0 && mx < 0) {
        weft_sb_puts(b, "j-string");
        return true;
    }
    if (mx >= 0 && mn > mx) return fail(c, path, "'minLength' is above 'maxLength'");
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
    if (!strcmp(t, "integer")) weft_sb_puts(b, "j-int");
    else if (!strcmp(t, "number")) weft_sb_puts(b, "j-number");
    else if (!strcmp(t, "boolean")) weft_sb_puts(b, "j-bool");
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
    const char *comb = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "allOf") ? "allOf" : NULL;
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
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "format"))
            return string_body(c, s, path, b);
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
