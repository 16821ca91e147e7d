/* API shapes over the chat pipeline (shape.h): the dispatch, the
 * previous_response_id store, and OpenAI's Responses API. */
#include "server/shape.h"

#include "server/params.h"
#include "server/structured.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum api_shape weft_shape_of_path(const char *path)
{
    if (!strcmp(path, "/v1/responses")) return SHAPE_RESPONSES;
    if (!strcmp(path, "/v1/messages")) return SHAPE_MESSAGES;
    return SHAPE_CHAT;
}

const char *weft_shape_path(enum api_shape sh)
{
    return sh == SHAPE_RESPONSES ? "/v1/responses" : sh == SHAPE_MESSAGES ? "/v1/messages" : "/v1/chat/completions";
}

static void fresh_id(char *out, size_t n, const char *prefix) { weft_random_id(out, n, prefix, 24); }

/* ---- the store ---- */

struct stored {
    char id[48];
    json_t *messages;   /* the conversation, the response's own turn last */
    size_t bytes;
};

struct shape_store {
    struct stored *e;   /* ring, oldest at head */
    uint32_t cap, head, n;
    size_t bytes, max_bytes;
};

struct shape_store *weft_shape_store_new(uint32_t cap, size_t max_bytes)
{
    struct shape_store *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->cap = cap ? cap : 1;
    st->max_bytes = max_bytes;
    st->e = calloc(st->cap, sizeof *st->e);
    if (!st->e) {
        free(st);
        return NULL;
    }
    return st;
}

static void drop_oldest(struct shape_store *st)
{
    struct stored *o = &st->e[st->head];
    json_decref(o->messages);
    st->bytes -= o->bytes;
    memset(o, 0, sizeof *o);
    st->head = (st->head + 1) % st->cap;
    st->n--;
}

void weft_shape_store_free(struct shape_store *st)
{
    if (!st) return;
    while (st->n) drop_oldest(st);
    free(st->e);
    free(st);
}

uint32_t weft_shape_store_count(const struct shape_store *st) { return st ? st->n : 0; }

static void store_put(struct shape_store *st, const char *id, json_t *messages)
{
    char *text = json_dumps(messages, JSON_COMPACT);
    size_t bytes = text ? strlen(text) : 0;
    free(text);
    if (!text || bytes > st->max_bytes) {
        json_decref(messages);
        return;
    }
    while (st->n && (st->n == st->cap || st->bytes + bytes > st->max_bytes)) drop_oldest(st);
    struct stored *e = &st->e[(st->head + st->n) % st->cap];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->messages = messages;
    e->bytes = bytes;
    st->bytes += bytes;
    st->n++;
}

static const json_t *store_get(const struct shape_store *st, const char *id)
{
    for (uint32_t i = 0; st && i < st->n; i++) {
        const struct stored *e = &st->e[(st->head + i) % st->cap];
        if (!strcmp(e->id, id)) return e->messages;
    }
    return NULL;
}

/* ---- errors ---- */

json_t *weft_shape_error(enum api_shape sh, int status, const char *type, const char *param, const char *message)
{
    (void)status;
    if (sh == SHAPE_MESSAGES)
        return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", message);
    return json_pack("{s:{s:s,s:s,s:o,s:n}}", "error", "message", message, "type", type, "param",
                     param ? json_string(param) : json_null(), "code");
}

/* ---- the Responses API: request ---- */

static bool absent(const json_t *v) { return !v || json_is_null(v); }

static json_t *bad(const char **param, const char *p, char *msg, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static json_t *bad(const char **param, const char *p, char *msg, size_t n, const char *fmt, ...)
{
    *param = p;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
    return NULL;
}

/* A content value (a string, or parts of input_text / output_text / text) as one string; NULL: refused. */
static json_t *content_text(json_t *c, const char **what)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) return NULL;
    size_t i;
    json_t *part;
    char *joined = strdup("");
    json_array_foreach(c, i, part) {
        const char *ty = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text")) ||
            !json_is_string(t)) {
            *what = ty ? ty : "a content part without a type";
            free(joined);
            return NULL;
        }
        size_t a = strlen(joined), b = json_string_length(t);
        char *g = realloc(joined, a + b + 1);
        if (!g) {
            free(joined);
            return NULL;
        }
        joined = g;
        memcpy(joined + a, json_string_value(t), b);
        joined[a + b] = 0;
    }
    json_t *r = json_string(joined);
    free(joined);
    return r;
}

static const char *const RESP_KNOWN[] = {
    "model", "input", "instructions", "previous_response_id", "tools", "tool_choice", "parallel_tool_calls",
    "text", "max_output_tokens", "temperature", "top_p", "stream", "store", "metadata", "user", "reasoning",
    "truncation", "include", "background", "service_tier", "stream_options", "safety_identifier",
    "prompt_cache_key", NULL};

static json_t *responses_request(json_t *body, struct shape_store *store, const char **param, char *msg, size_t n)
{
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        bool known = false;
        for (const char *const *q = RESP_KNOWN; *q; q++) known = known || !strcmp(*q, k);
        if (!known) return bad(param, "input", msg, n, "'%.64s' is not supported on /v1/responses", k);
        (void)v;
    }
    /* fields whose only honoured value is the default */
    json_t *x;
    if (!absent(x = json_object_get(body, "reasoning")) && !(json_is_object(x) && absent(json_object_get(x, "effort"))
                                                             && absent(json_object_get(x, "summary"))))
        return bad(param, "reasoning", msg, n, "'reasoning' options are not supported (the model's template decides "
                                               "its reasoning; chat_template_kwargs on /v1/chat/completions)");
    if (!absent(x = json_object_get(body, "truncation")) && !(json_is_string(x) && !strcmp(json_string_value(x), "disabled")))
        return bad(param, "truncation", msg, n, "'truncation' other than 'disabled' is not supported");
    if (!absent(x = json_object_get(body, "include")) && !(json_is_array(x) && json_array_size(x) == 0))
        return bad(param, "include", msg, n, "'include' is not supported");
    if (!absent(x = json_object_get(body, "background")) && !json_is_false(x))
        return bad(param, "background", msg, n, "'background' responses are not supported");
    if (!absent(x = json_object_get(body, "service_tier")) &&
        !(json_is_string(x) && (!strcmp(json_string_value(x), "auto") || !strcmp(json_string_value(x), "default"))))
        return bad(param, "service_tier", msg, n, "'service_tier' other than 'auto' or 'default' is not supported");
    if (!absent(x = json_object_get(body, "store")) && !json_is_boolean(x))
        return bad(param, "store", msg, n, "'store' must be a boolean");
    if (!absent(x = json_object_get(body, "metadata")) && !json_is_object(x))
        return bad(param, "metadata", msg, n, "'metadata' must be an object");

    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    json_t *r = NULL;
#define FAIL(...) do { json_decref(chat); return bad(param, __VA_ARGS__); } while (0)
    json_t *ins = json_object_get(body, "instructions");
    if (!absent(ins)) {
        if (!json_is_string(ins)) FAIL("instructions", msg, n, "'instructions' must be a string");
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    }
    json_t *prev = json_object_get(body, "previous_response_id");
    if (!absent(prev)) {
        if (!json_is_string(prev)) FAIL("previous_response_id", msg, n, "'previous_response_id' must be a string");
        const json_t *m = store_get(store, json_string_value(prev));
        if (!m)
            FAIL("previous_response_id", msg, n, "no stored response '%.64s' (responses are kept for a while, the "
                 "most recent ones)", json_string_value(prev));
        json_array_extend(msgs, (json_t *)m);
    }
    json_t *in = json_object_get(body, "input");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
    } else if (json_is_array(in)) {
        size_t i;
        json_t *it;
        const char *reasoning = NULL;
        json_array_foreach(in, i, it) {
            const char *ty = json_string_value(json_object_get(it, "type"));
            json_t *role = json_object_get(it, "role");
            if (!json_is_object(it)) FAIL("input", msg, n, "input item %zu must be an object", i);
            if (!ty || !strcmp(ty, "message")) {
                const char *rl = json_string_value(role);
                if (!rl || (strcmp(rl, "user") && strcmp(rl, "assistant") && strcmp(rl, "system") &&
                            strcmp(rl, "developer")))
                    FAIL("input", msg, n, "input item %zu needs a role of user, assistant, system or developer", i);
                const char *what = "content";
                json_t *c = content_text(json_object_get(it, "content"), &what);
                if (!c) FAIL("input", msg, n, "input item %zu: '%.32s' content is not supported (text only)", i, what);
                json_t *m = json_pack("{s:s,s:o}", "role", !strcmp(rl, "developer") ? "system" : rl, "content", c);
                if (reasoning && !strcmp(rl, "assistant")) {
                    json_object_set_new(m, "reasoning_content", json_string(reasoning));
                    reasoning = NULL;
                }
                json_array_append_new(msgs, m);
            } else if (!strcmp(ty, "function_call")) {
                json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
                json_t *args = json_object_get(it, "arguments");
                if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args))
                    FAIL("input", msg, n, "input item %zu (function_call) needs call_id, name and arguments strings", i);
                json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function", "name",
                                         name, "arguments", args);
                /* consecutive calls: one assistant turn */
                json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
                json_t *calls = json_object_get(last, "tool_calls");
                if (last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant") && calls) {
                    json_array_append_new(calls, call);
                } else {
                    json_t *m = json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content", "tool_calls", call);
                    if (reasoning) {
                        json_object_set_new(m, "reasoning_content", json_string(reasoning));
                        reasoning = NULL;
                    }
                    json_array_append_new(msgs, m);
                }
            } else if (!strcmp(ty, "function_call_output")) {
                json_t *cid = json_object_get(it, "call_id");
                const char *what = "output";
                json_t *out = content_text(json_object_get(it, "output"), &what);
                if (!json_is_string(cid) || !out) {
                    json_decref(out);
                    FAIL("input", msg, n, "input item %zu (function_call_output) needs a call_id and a text output", i);
                }
                json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", cid, "content",
                                                      out));
            } else if (!strcmp(ty, "reasoning")) {
                /* an earlier reply's reasoning: the next assistant turn's */
                json_t *parts = json_object_get(it, "content"), *p0 = json_array_get(parts, 0);
                reasoning = json_string_value(json_object_get(p0, "text"));
            } else {
                FAIL("input", msg, n, "input item %zu: type '%.32s' is not supported", i, ty);
            }
        }
    } else {
        FAIL("input", msg, n, "'input' must be a string or an array of input items");
    }
    if (json_array_size(msgs) == 0) FAIL("input", msg, n, "'input' must not be empty");

    /* tools: the Responses API's flat function tools */
    json_t *tools = json_object_get(body, "tools");
    if (!absent(tools)) {
        if (!json_is_array(tools)) FAIL("tools", msg, n, "'tools' must be an array");
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!ty || strcmp(ty, "function"))
                FAIL("tools", msg, n, "tool %zu: type '%.32s' is not supported (function tools only)", i,
                     ty ? ty : "?");
            json_t *fn = json_object();
            const char *keys[] = {"name", "description", "parameters", "strict"};
            for (int q = 0; q < 4; q++)
                if (!absent(json_object_get(t, keys[q]))) json_object_set(fn, keys[q], json_object_get(t, keys[q]));
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
    }
    json_t *tc = json_object_get(body, "tool_choice");
    if (json_is_string(tc)) json_object_set(chat, "tool_choice", tc);
    else if (json_is_object(tc)) {
        const char *ty = json_string_value(json_object_get(tc, "type"));
        json_t *name = json_object_get(tc, "name");
        if (!ty || strcmp(ty, "function") || !json_is_string(name))
            FAIL("tool_choice", msg, n, "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", "
                 "\"name\": ...}");
        json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                                                           name));
    } else if (!absent(tc)) {
        FAIL("tool_choice", msg, n, "'tool_choice' must be a string or an object");
    }
    if (!absent(x = json_object_get(body, "parallel_tool_calls"))) json_object_set(chat, "parallel_tool_calls", x);
    /* text.format: response_format */
    json_t *text = json_object_get(body, "text");
    if (!absent(text)) {
        if (!json_is_object(text)) FAIL("text", msg, n, "'text' must be an object");
        json_object_foreach(text, k, v) {
            if (strcmp(k, "format") && !(!strcmp(k, "verbosity") && (absent(v) || (json_is_string(v) &&
                                                                                   !strcmp(json_string_value(v), "medium")))))
                FAIL("text", msg, n, "'text.%.32s' is not supported", k);
        }
        json_t *f = json_object_get(text, "format");
        const char *ty = json_string_value(json_object_get(f, "type"));
        if (!absent(f) && !ty) FAIL("text", msg, n, "'text.format' needs a 'type'");
        if (ty && !strcmp(ty, "json_schema")) {
            json_t *js = json_object();
            const char *keys[] = {"name", "schema", "strict", "description"};
            for (int q = 0; q < 4; q++)
                if (!absent(json_object_get(f, keys[q]))) json_object_set(js, keys[q], json_object_get(f, keys[q]));
            json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema",
                                                                   js));
        } else if (ty && !strcmp(ty, "json_object")) {
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        } else if (ty && strcmp(ty, "text")) {
            FAIL("text", msg, n, "'text.format.type' must be 'text', 'json_object' or 'json_schema'");
        }
    }
    const char *pass[][2] = {{"model", "model"}, {"max_output_tokens", "max_tokens"}, {"temperature", "temperature"},
                             {"top_p", "top_p"}, {"stream", "stream"}};
    for (int q = 0; q < 5; q++)
        if (!absent(x = json_object_get(body, pass[q][0]))) json_object_set(chat, pass[q][1], x);
    if (json_is_true(json_object_get(body, "stream")))
        json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
#undef FAIL
    r = chat;
    return r;
}

json_t *weft_shape_request(enum api_shape sh, json_t *body, struct shape_store *store, const char **param, char *msg,
                           size_t msg_size)
{
    *param = NULL;
    if (!json_is_object(body)) return bad(param, NULL, msg, msg_size, "the request body must be a JSON object");
    if (sh == SHAPE_RESPONSES) return responses_request(body, store, param, msg, msg_size);
    if (sh == SHAPE_MESSAGES) return weft_shape_messages_request(body, param, msg, msg_size);
    return bad(param, NULL, msg, msg_size, "not a translated API shape");
}

/* ---- the Responses API: answers ---- */

enum item_kind { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

struct shape_ctx {
    enum api_shape sh;
    json_t *body;             /* the original request */
    json_t *conversation;     /* the chat messages to store (instructions left out) */
    struct shape_store *store;
    char id[48];
    int64_t created;
    uint32_t seq;             /* sequence_number of the next event */
    /* the stream's open item */
    enum item_kind open;
    char item_id[48];
    struct weft_strbuf acc;   /* its text so far */
    json_t *output;           /* finished items */
    json_t *usage;            /* the usage chunk's */
    const char *finish;       /* the chat finish_reason */
    bool started;
    struct shape_messages_stream ms;
};

struct shape_ctx *weft_shape_ctx_new(enum api_shape sh, const json_t *body, const json_t *chat_body,
                                     struct shape_store *store)
{
    struct shape_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->sh = sh;
    c->body = json_deep_copy(body);
    c->store = store;
    c->created = (int64_t)time(NULL);
    c->output = json_array();
    json_t *m = json_object_get(chat_body, "messages");
    size_t skip = !absent(json_object_get(body, "instructions")) ? 1 : 0;
    c->conversation = json_array();
    for (size_t i = skip; i < json_array_size(m); i++) json_array_append(c->conversation, json_array_get(m, i));
    fresh_id(c->id, sizeof c->id, sh == SHAPE_MESSAGES ? "msg_" : "resp_");
    if (sh == SHAPE_MESSAGES) {
        snprintf(c->ms.id, sizeof c->ms.id, "%s", c->id);
        const char *model = json_string_value(json_object_get(body, "model"));
        snprintf(c->ms.model, sizeof c->ms.model, "%s", model ? model : "");
        c->ms.block = -1;
    }
    return c;
}

void weft_shape_ctx_free(struct shape_ctx *c)
{
    if (!c) return;
    json_decref(c->body);
    json_decref(c->conversation);
    json_decref(c->output);
    json_decref(c->usage);
    weft_sb_free(&c->acc);
    free(c);
}

static json_t *usage_of(const json_t *u)
{
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t out = json_integer_value(json_object_get(u, "completion_tokens"));
    json_int_t cached = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    return json_pack("{s:I,s:{s:I},s:I,s:{s:i},s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     cached, "output_tokens", out, "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                     in + out);
}

static json_t *opt(const json_t *body, const char *k, json_t *dflt)
{
    json_t *v = json_object_get(body, k);
    if (absent(v)) return dflt;
    json_decref(dflt);
    return json_incref(v);
}

/* The response object: status "in_progress", "completed" or "incomplete". */
static json_t *response_obj(struct shape_ctx *c, const char *status, json_t *output, json_t *usage)
{
    const json_t *b = c->body;
    json_t *fmt = json_object_get(json_object_get(b, "text"), "format");
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:n,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:n,s:n},s:o,s:o,s:{s:o},s:o,s:o,s:o,"
                          "s:s,s:o,s:n,s:o}",
                          "id", c->id, "object", "response", "created_at", (json_int_t)c->created, "status", status,
                          "error", "incomplete_details",
                          !strcmp(status, "incomplete") ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                        : json_null(),
                          "instructions", opt(b, "instructions", json_null()), "max_output_tokens",
                          opt(b, "max_output_tokens", json_null()), "model", opt(b, "model", json_string("default")),
                          "output", output, "parallel_tool_calls", opt(b, "parallel_tool_calls", json_true()),
                          "previous_response_id", opt(b, "previous_response_id", json_null()), "reasoning", "effort",
                          "summary", "store", opt(b, "store", json_true()), "temperature",
                          opt(b, "temperature", json_real(1.0)), "text", "format",
                          fmt ? json_incref(fmt) : json_pack("{s:s}", "type", "text"), "tool_choice",
                          opt(b, "tool_choice", json_string("auto")), "tools", opt(b, "tools", json_array()), "top_p",
                          opt(b, "top_p", json_real(1.0)), "truncation", "disabled", "usage",
                          usage ? usage : json_null(), "user", "metadata", opt(b, "metadata", json_object()));
    return r;
}

static void store_answer(struct shape_ctx *c, json_t *assistant)
{
    if (!c->store || json_is_false(json_object_get(c->body, "store"))) {
        json_decref(assistant);
        return;
    }
    json_t *conv = json_copy(c->conversation);
    json_array_append_new(conv, assistant);
    store_put(c->store, c->id, conv);
}

static json_t *reasoning_item(const char *id, const char *text)
{
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:s}],s:s}", "type", "reasoning", "id", id, "summary", "content", "type",
                     "reasoning_text", "text", text, "status", "completed");
}

static json_t *message_item(const char *id, const char *text, const char *status)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:s,s:[],s:[]}]}", "type", "message", "id", id, "status", status, "role",
                     "assistant", "content", "type", "output_text", "text", text, "annotations", "logprobs");
}

static json_t *call_item(const char *id, const char *call_id, const char *name, const char *args, const char *status)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "function_call", "id", id, "call_id", call_id, "name", name,
                     "arguments", args, "status", status);
}

/* The chat assistant message of an answer (for the store). */
static json_t *assistant_of(const json_t *message)
{
    json_t *m = json_pack("{s:s,s:O}", "role", "assistant", "content",
                          json_object_get(message, "content") ? json_object_get(message, "content") : json_null());
    json_t *tc = json_object_get(message, "tool_calls");
    if (json_array_size(tc)) {
        json_t *calls = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tc, i, t) {
            json_t *fn = json_object_get(t, "function");
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(t, "id"), "type",
                                                   "function", "function", "name", json_object_get(fn, "name"),
                                                   "arguments", json_object_get(fn, "arguments")));
        }
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}

json_t *weft_shape_response(struct shape_ctx *c, const json_t *completion)
{
    json_t *ch = json_array_get(json_object_get(completion, "choices"), 0);
    json_t *m = json_object_get(ch, "message");
    const char *finish = json_string_value(json_object_get(ch, "finish_reason"));
    if (c->sh == SHAPE_MESSAGES) return weft_shape_messages_response(c->body, completion, c->id);
    json_t *out = json_array();
    char id[48];
    const char *reasoning = json_string_value(json_object_get(m, "reasoning_content"));
    if (reasoning) {
        fresh_id(id, sizeof id, "rs_");
        json_array_append_new(out, reasoning_item(id, reasoning));
    }
    const char *text = json_string_value(json_object_get(m, "content"));
    bool cut = finish && !strcmp(finish, "length");
    if (text && text[0]) {
        fresh_id(id, sizeof id, "msg_");
        json_array_append_new(out, message_item(id, text, cut ? "incomplete" : "completed"));
    }
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tool_calls"), i, t) {
        json_t *fn = json_object_get(t, "function");
        fresh_id(id, sizeof id, "fc_");
        json_array_append_new(out, call_item(id, json_string_value(json_object_get(t, "id")),
                                             json_string_value(json_object_get(fn, "name")),
                                             json_string_value(json_object_get(fn, "arguments")), "completed"));
    }
    store_answer(c, assistant_of(m));
    return response_obj(c, cut ? "incomplete" : "completed", out, usage_of(json_object_get(completion, "usage")));
}

/* ---- the Responses API: streamed events ---- */

static void event(struct shape_ctx *c, struct weft_strbuf *out, const char *type, json_t *data)
{
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer(c->seq++));
    char *s = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    if (!s) return;
    weft_sb_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

static size_t out_index(const struct shape_ctx *c) { return json_array_size(c->output); }

/* Close the open item: its done events; the finished item joins the output. */
static void close_item(struct shape_ctx *c, struct weft_strbuf *out)
{
    const char *text = c->acc.p ? c->acc.p : "";
    size_t oi = out_index(c);
    if (c->open == ITEM_REASONING) {
        event(c, out, "response.reasoning_text.done",
              json_pack("{s:s,s:I,s:i,s:s}", "item_id", c->item_id, "output_index", (json_int_t)oi, "content_index", 0,
                        "text", text));
        json_t *item = reasoning_item(c->item_id, text);
        event(c, out, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", (json_int_t)oi, "item", item));
        json_array_append_new(c->output, item);
    } else if (c->open == ITEM_MESSAGE) {
        event(c, out, "response.output_text.done",
              json_pack("{s:s,s:I,s:i,s:s,s:[]}", "item_id", c->item_id, "output_index", (json_int_t)oi,
                        "content_index", 0, "text", text, "logprobs"));
        event(c, out, "response.content_part.done",
              json_pack("{s:s,s:I,s:i,s:{s:s,s:s,s:[]}}", "item_id", c->item_id, "output_index", (json_int_t)oi,
                        "content_index", 0, "part", "type", "output_text", "text", text, "annotations"));
        bool cut = c->finish && !strcmp(c->finish, "length");
        json_t *item = message_item(c->item_id, text, cut ? "incomplete" : "completed");
        event(c, out, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", (json_int_t)oi, "item", item));
        json_array_append_new(c->output, item);
    }
    c->open = ITEM_NONE;
    c->acc.len = 0;
    if (c->acc.p) c->acc.p[0] = 0;
}

static void open_item(struct shape_ctx *c, enum item_kind k, struct weft_strbuf *out)
{
    if (c->open == k) return;
    close_item(c, out);
    c->open = k;
    size_t oi = out_index(c);
    if (k == ITEM_REASONING) {
        fresh_id(c->item_id, sizeof c->item_id, "rs_");
        event(c, out, "response.output_item.added",
              json_pack("{s:I,s:{s:s,s:s,s:[],s:[],s:s}}", "output_index", (json_int_t)oi, "item", "type", "reasoning",
                        "id", c->item_id, "summary", "content", "status", "in_progress"));
    } else {
        fresh_id(c->item_id, sizeof c->item_id, "msg_");
        event(c, out, "response.output_item.added",
              json_pack("{s:I,s:{s:s,s:s,s:s,s:s,s:[]}}", "output_index", (json_int_t)oi, "item", "type", "message", "id",
                        c->item_id, "status", "in_progress", "role", "assistant", "content"));
        event(c, out, "response.content_part.added",
              json_pack("{s:s,s:I,s:i,s:{s:s,s:s,s:[]}}", "item_id", c->item_id, "output_index", (json_int_t)oi,
                        "content_index", 0, "part", "type", "output_text", "text", "", "annotations"));
    }
}

static void responses_chunk(struct shape_ctx *c, const json_t *chunk, struct weft_strbuf *out)
{
    if (!c->started) {
        c->started = true;
        json_t *r = response_obj(c, "in_progress", json_array(), NULL);
        event(c, out, "response.created", json_pack("{s:O}", "response", r));
        event(c, out, "response.in_progress", json_pack("{s:o}", "response", r));
    }
    json_t *u = json_object_get(chunk, "usage");
    if (json_is_object(u)) {
        json_decref(c->usage);
        c->usage = json_incref(u);
    }
    json_t *ch = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!ch) return;
    json_t *d = json_object_get(ch, "delta");
    const char *r = json_string_value(json_object_get(d, "reasoning_content"));
    const char *t = json_string_value(json_object_get(d, "content"));
    if (r && r[0]) {
        open_item(c, ITEM_REASONING, out);
        weft_sb_puts(&c->acc, r);
        event(c, out, "response.reasoning_text.delta",
              json_pack("{s:s,s:I,s:i,s:s}", "item_id", c->item_id, "output_index", (json_int_t)out_index(c),
                        "content_index", 0, "delta", r));
    }
    if (t && t[0]) {
        open_item(c, ITEM_MESSAGE, out);
        weft_sb_puts(&c->acc, t);
        event(c, out, "response.output_text.delta",
              json_pack("{s:s,s:I,s:i,s:s,s:[]}", "item_id", c->item_id, "output_index", (json_int_t)out_index(c),
                        "content_index", 0, "delta", t, "logprobs"));
    }
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    if (fin) c->finish = !strcmp(fin, "length") ? "length" : !strcmp(fin, "tool_calls") ? "tool_calls" : "stop";
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
        close_item(c, out);
        json_t *fn = json_object_get(tc, "function");
        const char *call_id = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (!call_id || !name || !args) continue;
        char id[48];
        fresh_id(id, sizeof id, "fc_");
        size_t oi = out_index(c);
        event(c, out, "response.output_item.added",
              json_pack("{s:I,s:o}", "output_index", (json_int_t)oi, "item", call_item(id, call_id, name, "", "in_progress")));
        event(c, out, "response.function_call_arguments.delta",
              json_pack("{s:s,s:I,s:s}", "item_id", id, "output_index", (json_int_t)oi, "delta", args));
        event(c, out, "response.function_call_arguments.done",
              json_pack("{s:s,s:I,s:s,s:s}", "item_id", id, "output_index", (json_int_t)oi, "name", name, "arguments",
                        args));
        json_t *item = call_item(id, call_id, name, args, "completed");
        event(c, out, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", (json_int_t)oi, "item", item));
        json_array_append_new(c->output, item);
    }
}

static void responses_end(struct shape_ctx *c, struct weft_strbuf *out)
{
    if (!c->started) responses_chunk(c, json_object(), out);  /* (a reference leak-free empty chunk) */
    close_item(c, out);
    bool cut = c->finish && !strcmp(c->finish, "length");
    json_t *r = response_obj(c, cut ? "incomplete" : "completed", json_incref(c->output),
                             c->usage ? usage_of(c->usage) : NULL);
    /* the conversation's new turn, for previous_response_id */
    json_t *assistant = json_pack("{s:s,s:n}", "role", "assistant", "content");
    json_t *calls = json_array();
    size_t i;
    json_t *it;
    struct weft_strbuf text = {0};
    json_array_foreach(c->output, i, it) {
        const char *ty = json_string_value(json_object_get(it, "type"));
        if (!strcmp(ty, "message"))
            weft_sb_puts(&text, json_string_value(json_object_get(json_array_get(json_object_get(it, "content"), 0),
                                                                  "text")));
        else if (!strcmp(ty, "function_call"))
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"),
                                                   "type", "function", "function", "name", json_object_get(it, "name"),
                                                   "arguments", json_object_get(it, "arguments")));
    }
    if (text.p) json_object_set_new(assistant, "content", json_string(text.p));
    if (json_array_size(calls)) json_object_set_new(assistant, "tool_calls", calls);
    else json_decref(calls);
    weft_sb_free(&text);
    store_answer(c, assistant);
    event(c, out, cut ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", r));
}

void weft_shape_stream_chunk(struct shape_ctx *c, const json_t *chunk, struct weft_strbuf *out)
{
    if (c->sh == SHAPE_MESSAGES) weft_shape_messages_chunk(&c->ms, chunk, out);
    else responses_chunk(c, chunk, out);
}

void weft_shape_stream_end(struct shape_ctx *c, struct weft_strbuf *out)
{
    if (c->sh == SHAPE_MESSAGES) weft_shape_messages_end(&c->ms, out);
    else responses_end(c, out);
}

void weft_shape_stream_error(struct shape_ctx *c, const char *type, const char *message, struct weft_strbuf *out)
{
    json_t *e = c->sh == SHAPE_MESSAGES ? json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type,
                                                    "message", message)
                                        : json_pack("{s:s,s:s,s:n}", "code", type, "message", message, "param");
    if (c->sh == SHAPE_MESSAGES) {
        char *s = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        if (s) weft_sb_printf(out, "event: error\ndata: %s\n\n", s);
        free(s);
        return;
    }
    event(c, out, "error", e);
}

char *weft_shape_translate(enum api_shape sh, const char *body, size_t len, struct shape_store *store,
                           struct shape_ctx **ctx, const char **param, char *msg, size_t msg_size)
{
    *ctx = NULL;
    *param = NULL;
    if (weft_json_depth_exceeds(body ? body : "", len, WEFT_MAX_JSON_DEPTH)) {
        snprintf(msg, msg_size, "the JSON body nests deeper than %d", WEFT_MAX_JSON_DEPTH);
        return NULL;
    }
    json_t *orig = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, NULL);
    if (!orig) {
        snprintf(msg, msg_size, "the request body is not valid JSON");
        return NULL;
    }
    json_t *cb = weft_shape_request(sh, orig, store, param, msg, msg_size);
    char *text = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
    if (text && !(*ctx = weft_shape_ctx_new(sh, orig, cb, store))) {
        free(text);
        text = NULL;
    }
    if (cb && !text) snprintf(msg, msg_size, "out of memory");
    json_decref(cb);
    json_decref(orig);
    return text;
}
