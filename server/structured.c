#include "server/structured.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/grammar.h"
#include "server/chat_format.h"
#include "server/json_schema.h"

static bool fail(const char **param, char *msg, size_t n, const char *p, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static bool fail(const char **param, char *msg, size_t n, const char *p, const char *fmt, ...)
{
    if (param) *param = p;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
    return false;
}

static bool absent(const json_t *v) { return !v || json_is_null(v); }

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool parse_format(json_t *rf, struct gen_structured *s, const char **param, char *msg, size_t n)
{
    if (absent(rf)) return true;
    json_t *t = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(t))
        return fail(param, msg, n, "response_format", "'response_format' must be an object with a 'type'");
    const char *ty = json_string_value(t);
    if (!strcmp(ty, "text")) return true;
    if (!strcmp(ty, "json_object")) {
        s->format = GEN_FORMAT_JSON_OBJECT;
        return true;
    }
    if (strcmp(ty, "json_schema"))
        return fail(param, msg, n, "response_format",
                    "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '%.32s'", ty);
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return fail(param, msg, n, "response_format", "'response_format.json_schema' must be an object");
    json_t *schema = json_object_get(js, "schema");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return fail(param, msg, n, "response_format", "'response_format.json_schema.schema' must be a JSON Schema");
    json_t *strict = json_object_get(js, "strict");
    if (!absent(strict) && !json_is_boolean(strict))
        return fail(param, msg, n, "response_format", "'response_format.json_schema.strict' must be a boolean");
    s->format = GEN_FORMAT_JSON_SCHEMA;
    s->schema = schema;
    s->format_param = "response_format";
    return true;
}

static bool parse_tools(json_t *body, struct gen_structured *s, const char **param, char *msg, size_t n)
{
    json_t *tools = json_object_get(body, "tools"), *choice = json_object_get(body, "tool_choice");
    json_t *par = json_object_get(body, "parallel_tool_calls");
    s->parallel = true;
    if (!absent(par)) {
        if (!json_is_boolean(par))
            return fail(param, msg, n, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        s->parallel = json_is_true(par);
    }
    if (absent(tools) || (json_is_array(tools) && json_array_size(tools) == 0)) {
        if (!absent(choice) && !(json_is_string(choice) && (!strcmp(json_string_value(choice), "none") ||
                                                             !strcmp(json_string_value(choice), "auto"))))
            return fail(param, msg, n, "tool_choice", "'tool_choice' needs 'tools'");
        return true;
    }
    if (!json_is_array(tools)) return fail(param, msg, n, "tools", "'tools' must be an array");
    size_t k = json_array_size(tools);
    if (k > WEFT_MAX_TOOLS) return fail(param, msg, n, "tools", "at most %d tools", WEFT_MAX_TOOLS);
    s->tool_defs = calloc(k, sizeof *s->tool_defs);
    s->tool_names = calloc(k, sizeof *s->tool_names);
    s->tool_params = calloc(k, sizeof *s->tool_params);
    if (!s->tool_defs || !s->tool_names || !s->tool_params) return fail(param, msg, n, "tools", "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
        json_t *ty = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(ty) || strcmp(json_string_value(ty), "function"))
            return fail(param, msg, n, "tools", "tool %zu must be {\"type\": \"function\", \"function\": {...}}", i);
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        json_t *desc = json_object_get(fn, "description");
        if (!json_is_object(fn) || !json_is_string(name) || !valid_name(json_string_value(name)))
            return fail(param, msg, n, "tools", "tool %zu needs a 'function.name' of 1 to 64 letters, digits, _ or -",
                        i);
        if (!absent(desc) && !json_is_string(desc))
            return fail(param, msg, n, "tools", "tool %zu's 'function.description' must be a string", i);
        if (!absent(params) && !json_is_object(params))
            return fail(param, msg, n, "tools", "tool %zu's 'function.parameters' must be a JSON Schema object", i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->tool_names[j], json_string_value(name)))
                return fail(param, msg, n, "tools", "two tools are named '%s'", json_string_value(name));
        s->tool_names[i] = json_string_value(name);
        s->tool_params[i] = absent(params) ? NULL : params;
        /* as the templates' tojson writes it: ", " and ": " separators, one line */
        s->tool_defs[i] = json_dumps(t, JSON_INDENT(0));
        if (!s->tool_defs[i]) return fail(param, msg, n, "tools", "out of memory");
        s->n_tools++;
    }
    s->tool_choice = GEN_TOOLS_AUTO;
    if (absent(choice)) return true;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "auto")) return true;
        if (!strcmp(c, "required")) s->tool_choice = GEN_TOOLS_REQUIRED;
        else if (!strcmp(c, "none")) s->tool_choice = GEN_TOOLS_OFF;
        else return fail(param, msg, n, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                                                       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        return true;
    }
    json_t *fn = json_object_get(choice, "function"), *name = json_object_get(fn, "name");
    if (!json_is_object(choice) || !json_is_string(name))
        return fail(param, msg, n, "tool_choice",
                    "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                    "{\"name\": ...}}");
    for (uint32_t i = 0; i < s->n_tools; i++)
        if (!strcmp(s->tool_names[i], json_string_value(name))) {
            s->tool_choice = GEN_TOOLS_NAMED;
            s->tool_choice_name = s->tool_names[i];
            return true;
        }
    return fail(param, msg, n, "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
                json_string_value(name));
}

bool weft_structured_parse(json_t *body, bool chat, struct gen_structured *s, const char **param, char *msg,
                      size_t msg_size)
{
    memset(s, 0, sizeof *s);
    json_t *fns = json_object_get(body, "functions");
    if (!absent(fns) && !(json_is_array(fns) && json_array_size(fns) == 0))
        return fail(param, msg, msg_size, "functions", "'functions' is deprecated and not supported: use 'tools'");
    if (!absent(json_object_get(body, "function_call")))
        return fail(param, msg, msg_size, "function_call",
                    "'function_call' is deprecated and not supported: use 'tool_choice'");
    if (!parse_format(json_object_get(body, "response_format"), s, param, msg, msg_size)) return false;
    if (!chat) {
        json_t *t = json_object_get(body, "tools");
        if (!absent(t) && !(json_is_array(t) && json_array_size(t) == 0))
            return fail(param, msg, msg_size, "tools", "'tools' is for /v1/chat/completions");
        if (!absent(json_object_get(body, "tool_choice")))
            return fail(param, msg, msg_size, "tool_choice", "'tool_choice' is for /v1/chat/completions");
        return true;
    }
    if (!parse_tools(body, s, param, msg, msg_size)) return false;
    if (s->format != GEN_FORMAT_TEXT &&
        (s->tool_choice == GEN_TOOLS_REQUIRED || s->tool_choice == GEN_TOOLS_NAMED))
        return fail(param, msg, msg_size, "response_format",
                    "'response_format' other than text cannot be combined with a required tool call");
    return true;
}

void weft_structured_free(struct gen_structured *s)
{
    free(s->grammar);
    for (uint32_t i = 0; i < s->n_tools; i++) free(s->tool_defs[i]);
    free(s->tool_defs);
    free(s->tool_names);
    free(s->tool_params);
    memset(s, 0, sizeof *s);
}

bool weft_structured_message_calls(json_t *m, size_t index, struct weft_chat_tool_call **calls, size_t *n_calls,
                              const char **tool_call_id, char *msg, size_t msg_size)
{
    *calls = NULL;
    *n_calls = 0;
    *tool_call_id = NULL;
    json_t *tc = json_object_get(m, "tool_calls"), *id = json_object_get(m, "tool_call_id");
    if (!absent(id)) {
        if (!json_is_string(id))
            return fail(NULL, msg, msg_size, NULL, "message %zu's 'tool_call_id' must be a string", index);
        *tool_call_id = json_string_value(id);
    }
    if (absent(tc) || (json_is_array(tc) && json_array_size(tc) == 0)) return true;
    if (!json_is_array(tc)) return fail(NULL, msg, msg_size, NULL, "message %zu's 'tool_calls' must be an array", index);
    size_t k = json_array_size(tc);
    struct weft_chat_tool_call *out = calloc(k, sizeof *out);
    if (!out) return fail(NULL, msg, msg_size, NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *c = json_array_get(tc, i), *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        json_t *cid = json_object_get(c, "id");
        if (!json_is_object(c) || !json_is_string(name) || !json_is_string(args) || (!absent(cid) && !json_is_string(cid))) {
            free(out);
            return fail(NULL, msg, msg_size, NULL,
                        "message %zu's tool call %zu must be {\"id\": string, \"type\": \"function\", \"function\": "
                        "{\"name\": string, \"arguments\": string}}",
                        index, i);
        }
        /* the arguments go into the prompt as the JSON they are */
        json_t *parsed = json_loads(json_string_value(args), 0, NULL);
        bool obj = json_is_object(parsed);
        json_decref(parsed);
        if (!obj) {
            free(out);
            return fail(NULL, msg, msg_size, NULL, "message %zu's tool call %zu: 'arguments' is not a JSON object",
                        index, i);
        }
        out[i] = (struct weft_chat_tool_call){
            .id = absent(cid) ? NULL : json_string_value(cid), .name = json_string_value(name),
            .arguments = json_string_value(args)};
    }
    *calls = out;
    *n_calls = k;
    return true;
}

/* ---- the grammar ---- */

/* false when out of memory (t is then incomplete) */
static bool put(struct weft_strbuf *t, const char *s)
{
    weft_sb_puts(t, s);
    return !t->oom;
}

/* A grammar literal of s (grammar escapes for " and \ and control bytes). */
static bool put_lit(struct weft_strbuf *t, const char *s)
{
    if (!put(t, "\"")) return false;
    for (; *s; s++) {
        char e[8];
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') snprintf(e, sizeof e, "\\%c", c);
        else if (c < 0x20) snprintf(e, sizeof e, "\\x%02x", c);
        else snprintf(e, sizeof e, "%c", c);
        if (!put(t, e)) return false;
    }
    return put(t, "\"");
}

static bool tools_grammar(const struct gen_structured *s, const struct chat_call_frame *fr, struct weft_strbuf *t,
                          const char **param, char *msg, size_t n)
{
    if (!put(t, weft_json_schema_common_rules)) return fail(param, msg, n, "tools", "out of memory");
    bool ok = true;
    struct weft_strbuf call = {0};
    ok = put(&call, "call ::= ") && put_lit(&call, fr->open) && put(&call, "(");
    bool first = true;
    for (uint32_t i = 0; ok && i < s->n_tools; i++) {
        if (s->tool_choice == GEN_TOOLS_NAMED && strcmp(s->tool_names[i], s->tool_choice_name)) continue;
        char root[32], prefix[32];
        snprintf(root, sizeof root, "t%u-args", i);
        snprintf(prefix, sizeof prefix, "t%u-", i);
        if (s->tool_params[i]) {
            char err[256];
            if (!weft_json_schema_rules(s->tool_params[i], root, prefix, t, err, sizeof err)) {
                weft_sb_free(&call);
                return fail(param, msg, n, "tools", "tool '%s' parameters: %s", s->tool_names[i], err);
            }
        } else {
            char r[64];
            snprintf(r, sizeof r, "%s ::= j-object\n", root);
            ok = put(t, r);
        }
        char *name_mid = malloc(strlen(s->tool_names[i]) + strlen(fr->mid) + 1);
        if (!name_mid) ok = false;
        else {
            sprintf(name_mid, "%s%s", s->tool_names[i], fr->mid);
            ok = ok && put(&call, first ? " " : " | ") && put_lit(&call, name_mid) && put(&call, " ") &&
                 put(&call, root);
            free(name_mid);
        }
        first = false;
    }
    ok = ok && put(&call, " )");
    if (ok && fr->after[0]) ok = put(&call, " ") && put_lit(&call, fr->after);
    ok = ok && put(&call, "\n") && put(t, call.p);
    weft_sb_free(&call);
    /* a named function is called once; "required" calls one or (parallel_tool_calls, where the format can
     * write several) up to 8 */
    bool many = s->parallel && fr->many && s->tool_choice != GEN_TOOLS_NAMED;
    struct weft_strbuf root = {0};
    ok = ok && put(&root, "root ::= ");
    if (ok && fr->begin[0]) ok = put_lit(&root, fr->begin) && put(&root, " ");
    ok = ok && put(&root, "call");
    if (ok && many) {
        ok = put(&root, " (");
        if (ok && fr->sep[0]) ok = put_lit(&root, fr->sep);
        ok = ok && put(&root, " call){0,7}");
    }
    if (ok && fr->end[0]) ok = put(&root, " ") && put_lit(&root, fr->end);
    ok = ok && put(&root, "\n") && put(t, root.p);
    weft_sb_free(&root);
    if (!ok) return fail(param, msg, n, "tools", "out of memory");
    return true;
}

bool weft_structured_grammar(const struct gen_structured *s, const struct chat_call_frame *fr, char **text,
                        const char **param, char *msg, size_t msg_size)
{
    *text = NULL;
    if (s->tool_choice == GEN_TOOLS_REQUIRED || s->tool_choice == GEN_TOOLS_NAMED) {
        struct weft_strbuf t = {0};
        if (!tools_grammar(s, fr, &t, param, msg, msg_size)) {
            weft_sb_free(&t);
            return false;
        }
        *text = t.p;
        return true;
    }
    if (s->format == GEN_FORMAT_GRAMMAR) {
        *text = strdup(s->grammar);
        return *text ? true : fail(param, msg, msg_size, s->format_param, "out of memory");
    }
    if (s->format == GEN_FORMAT_JSON_OBJECT) {
        *text = strdup(weft_grammar_json_object);
        return *text ? true : fail(param, msg, msg_size, "response_format", "out of memory");
    }
    if (s->format == GEN_FORMAT_JSON_SCHEMA) {
        char err[256];
        if (!weft_json_schema_grammar(s->schema, text, err, sizeof err))
            return fail(param, msg, msg_size, s->format_param,
                        strcmp(s->format_param, "response_format") ? "'%s': %s" : "%s.json_schema.schema: %s",
                        s->format_param, err);
    }
    return true;
}

/* ---- reading calls back ---- */

void weft_tool_call_fresh_id(char *out, size_t n) { weft_random_id(out, n, "call_", 24); }

void weft_random_id(char *out, size_t n, const char *prefix, size_t n_chars)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[64];
    if (n_chars > sizeof r) n_chars = sizeof r;
    if (getrandom(r, n_chars, GRND_NONBLOCK) != (ssize_t)n_chars) {
        /* no entropy yet: time and address bits, an id needs to be unique, not secret */
        unsigned long long x = (unsigned long long)time(NULL) ^ (unsigned long long)(uintptr_t)out;
        for (size_t i = 0; i < n_chars; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            r[i] = (unsigned char)(x >> 56);
        }
    }
    size_t k = (size_t)snprintf(out, n, "%s", prefix);
    if (k >= n) k = n ? n - 1 : 0;
    for (size_t i = 0; i < n_chars && k + 1 < n; i++) out[k++] = A[r[i] % (sizeof A - 1)];
    if (n) out[k] = 0;
}

void weft_tool_calls_free(struct tool_call_out *calls, uint32_t n)
{
    if (!calls) return;
    for (uint32_t i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

