/* Anthropic's Messages API (POST /v1/messages) over weft's chat pipeline
 * (server/shape.h): a Messages request becomes a /v1/chat/completions body,
 * a chat.completion becomes a Message, and a chat stream's chunks become the
 * Messages stream's events.
 *
 * What maps (request):
 *   system (string | text blocks)        -> a first "system" message
 *   messages[].content text blocks       -> the message's text parts
 *   assistant tool_use {id,name,input}    -> tool_calls [{id, function {name, arguments: input as JSON}}]
 *   assistant thinking blocks             -> reasoning_content (the signature is not checked: weft has none)
 *   user tool_result {tool_use_id, content, is_error}
 *                                         -> "tool" messages before the rest of that user turn;
 *                                            is_error puts "Error: " before the result's text
 *   a last assistant message (prefill)    -> continue_final_message: the reply carries it on
 *   tools [{name, description, input_schema}] -> function tools
 *   tool_choice auto/any/tool/none        -> "auto"/"required"/named/"none";
 *                                            disable_parallel_tool_use -> parallel_tool_calls false
 *   max_tokens, temperature, top_p, top_k -> the same; stop_sequences -> stop
 *   stream                                -> stream with stream_options.include_usage
 *   metadata.user_id                      -> user
 *   output_config.format (json_schema)    -> response_format json_schema
 * No-ops accepted: thinking {type: disabled}; service_tier auto/standard_only
 * (weft has one tier); cache_control {type: ephemeral} anywhere (weft's
 * prefix cache keeps every prompt's blocks without being asked); speed
 * "standard"; container, mcp_servers, inference_geo and the rest at null.
 * Refused by name: image/document/other content blocks, redacted_thinking,
 * server tools (a tool with a type such as web_search_...), thinking enabled
 * or adaptive (weft cannot hold reasoning to a budget), output_config.effort,
 * any field it does not know.
 *
 * What maps (response): reasoning_content -> a thinking block (signature
 * ""), content -> a text block, each tool call -> a tool_use block with
 * its arguments parsed; finish_reason stop/length/tool_calls ->
 * end_turn/max_tokens/tool_use. weft's chat says "stop" both for the end
 * of the turn and for a stop string, and does not say which string
 * matched (the text ends before it), so stop_reason is "end_turn" and
 * stop_sequence null for both. Usage: Anthropic's input_tokens excludes the
 * tokens read from cache (its total input is input_tokens +
 * cache_read_input_tokens), so it is prompt_tokens - cached_tokens. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/params.h"
#include "server/shape.h"

struct merr {
    const char **param;
    char *msg;
    size_t size;
};

static bool fail(struct merr *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(struct merr *e, const char *param, const char *fmt, ...)
{
    *e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->size, fmt, ap);
    va_end(ap);
    return false;
}

static bool absent(const json_t *v) { return !v || json_is_null(v); }

static bool is_str(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

static bool in_list(const char *k, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

/* Every key of o is one of `known` or null (what a client that dumps its
 * models whole sends for an optional field: caller, toolset_name, ...);
 * else a 400 under param naming the key and where it was. */
static bool only_keys(const json_t *o, const char *const *known, const char *param, const char *where, struct merr *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        if (!json_is_null(v) && !in_list(k, known)) return fail(e, param, "unknown field '%.64s' in %s", k, where);
    }
    return true;
}

/* cache_control: absent, null or {type: "ephemeral", ttl?}; a no-op here. */
static bool cache_control_ok(const json_t *cc, const char *param, const char *where, struct merr *e)
{
    if (absent(cc)) return true;
    static const char *const keys[] = {"type", "ttl", NULL};
    if (!json_is_object(cc) || !is_str(json_object_get(cc, "type"), "ephemeral"))
        return fail(e, param, "%s: 'cache_control' must be {\"type\": \"ephemeral\"}", where);
    return only_keys(cc, keys, param, where, e);
}

/* A text block {type: "text", text, cache_control?, citations?} -> an OpenAI text part (new reference). */
static json_t *text_part(const json_t *b, const char *param, const char *where, struct merr *e)
{
    static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
    json_t *text = json_object_get(b, "text"), *cit = json_object_get(b, "citations");
    if (!json_is_string(text)) return fail(e, param, "%s: a text block needs a string 'text'", where), NULL;
    if (!only_keys(b, keys, param, where, e)) return NULL;
    if (!cache_control_ok(json_object_get(b, "cache_control"), param, where, e)) return NULL;
    if (!absent(cit) && !(json_is_array(cit) && !json_array_size(cit)))
        return fail(e, param, "%s: 'citations' are not supported", where), NULL;
    return json_pack("{s:s,s:O}", "type", "text", "text", text);
}

/* The content block types Anthropic defines that weft cannot take, refused by name. */
static bool refuse_block(const char *type, const char *param, const char *where, struct merr *e)
{
    if (!strcmp(type, "image") || !strcmp(type, "document"))
        return fail(e, param, "%s: '%s' content blocks are not supported (the model reads text only)", where, type);
    if (!strcmp(type, "redacted_thinking"))
        return fail(e, param, "%s: 'redacted_thinking' blocks are not supported (weft cannot read them back)", where);
    return fail(e, param, "%s: content blocks of type '%.64s' are not supported here", where, type);
}

/* ---- the request ---- */

/* tool_result's content (string, array of text blocks, or absent) -> a tool message's content. */
static json_t *tool_result_content(const json_t *c, bool is_error, const char *where, struct merr *e)
{
    if (json_is_string(c) && !is_error) return json_incref((json_t *)c);
    json_t *parts = json_array();
    if (!parts) return fail(e, NULL, "out of memory"), NULL;
    if (is_error) json_array_append_new(parts, json_pack("{s:s,s:s}", "type", "text", "text", "Error: "));
    if (json_is_string(c)) {
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", c));
    } else if (json_is_array(c)) {
        size_t i;
        json_t *b;
        json_array_foreach(c, i, b) {
            json_t *ty = json_object_get(b, "type");
            if (!json_is_object(b) || !json_is_string(ty)) {
                json_decref(parts);
                return fail(e, "messages", "%s: tool_result content block %zu needs a 'type'", where, i), NULL;
            }
            if (!is_str(ty, "text")) {
                refuse_block(json_string_value(ty), "messages", where, e);
                json_decref(parts);
                return NULL;
            }
            json_t *p = text_part(b, "messages", where, e);
            if (!p) {
                json_decref(parts);
                return NULL;
            }
            json_array_append_new(parts, p);
        }
    } else if (!absent(c)) {
        json_decref(parts);
        return fail(e, "messages", "%s: tool_result 'content' must be a string or an array of text blocks", where), NULL;
    }
    if (!json_array_size(parts)) {
        json_decref(parts);
        return json_string("");
    }
    return parts;
}

/* One user turn: its tool results as tool messages (appended to out first),
 * then its text as one user message. */
static bool user_turn(const json_t *content, size_t i, json_t *out, struct merr *e)
{
    char where[48];
    snprintf(where, sizeof where, "message %zu", i);
    json_t *parts = json_array();
    if (!parts) return fail(e, NULL, "out of memory");
    size_t k;
    json_t *b;
    bool ok = true;
    json_array_foreach(content, k, b) {
        json_t *ty = json_object_get(b, "type");
        if (!json_is_object(b) || !json_is_string(ty)) {
            ok = fail(e, "messages", "%s: content block %zu needs a 'type'", where, k);
            break;
        }
        if (is_str(ty, "text")) {
            json_t *p = text_part(b, "messages", where, e);
            if (!(ok = p != NULL)) break;
            json_array_append_new(parts, p);
        } else if (is_str(ty, "tool_result")) {
            static const char *const keys[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
            json_t *id = json_object_get(b, "tool_use_id"), *err = json_object_get(b, "is_error");
            if (!json_is_string(id)) {
                ok = fail(e, "messages", "%s: a tool_result block needs a string 'tool_use_id'", where);
                break;
            }
            if (!absent(err) && !json_is_boolean(err)) {
                ok = fail(e, "messages", "%s: tool_result 'is_error' must be a boolean", where);
                break;
            }
            if (!(ok = only_keys(b, keys, "messages", where, e) &&
                       cache_control_ok(json_object_get(b, "cache_control"), "messages", where, e)))
                break;
            json_t *c = tool_result_content(json_object_get(b, "content"), json_is_true(err), where, e);
            if (!(ok = c != NULL)) break;
            json_array_append_new(out, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", c));
        } else if (is_str(ty, "tool_use") || is_str(ty, "thinking")) {
            ok = fail(e, "messages", "%s: '%s' blocks belong in assistant messages", where, json_string_value(ty));
            break;
        } else {
            ok = refuse_block(json_string_value(ty), "messages", where, e);
            break;
        }
    }
    if (ok && json_array_size(parts)) json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", parts));
    json_decref(parts);
    return ok;
}

/* One assistant turn: text, thinking and tool_use blocks -> one assistant
 * message. *has_text: it has text and no calls (what a prefill needs). */
static bool assistant_turn(const json_t *content, size_t i, json_t *out, bool *has_text, struct merr *e)
{
    char where[48];
    snprintf(where, sizeof where, "message %zu", i);
    json_t *parts = json_array(), *calls = json_array();
    struct weft_strbuf think = {0};
    bool ok = parts && calls, thinking = false;
    if (!ok) fail(e, NULL, "out of memory");
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b) {
        if (!ok) break;
        json_t *ty = json_object_get(b, "type");
        if (!json_is_object(b) || !json_is_string(ty)) {
            ok = fail(e, "messages", "%s: content block %zu needs a 'type'", where, k);
        } else if (is_str(ty, "text")) {
            json_t *p = text_part(b, "messages", where, e);
            if ((ok = p != NULL)) json_array_append_new(parts, p);
        } else if (is_str(ty, "thinking")) {
            static const char *const keys[] = {"type", "thinking", "signature", NULL};
            json_t *t = json_object_get(b, "thinking");
            if (!json_is_string(t)) ok = fail(e, "messages", "%s: a thinking block needs a string 'thinking'", where);
            else if ((ok = only_keys(b, keys, "messages", where, e))) {
                if (thinking) weft_sb_puts(&think, "\n");
                weft_sb_put(&think, json_string_value(t), json_string_length(t));
                thinking = true;
            }
        } else if (is_str(ty, "tool_use")) {
            static const char *const keys[] = {"type", "id", "name", "input", "cache_control", NULL};
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(in)) {
                ok = fail(e, "messages", "%s: a tool_use block needs a string 'id' and 'name' and an object 'input'",
                          where);
            } else if ((ok = only_keys(b, keys, "messages", where, e) &&
                             cache_control_ok(json_object_get(b, "cache_control"), "messages", where, e))) {
                /* as the templates' tojson writes arguments: ", " and ": ", one line */
                char *args = json_dumps(in, JSON_INDENT(0));
                if (!args) ok = fail(e, NULL, "out of memory");
                else json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function",
                                                            "function", "name", name, "arguments", args));
                free(args);
            }
        } else if (is_str(ty, "tool_result")) {
            ok = fail(e, "messages", "%s: 'tool_result' blocks belong in user messages", where);
        } else {
            ok = refuse_block(json_string_value(ty), "messages", where, e);
        }
    }
    if (ok && think.oom) ok = fail(e, NULL, "out of memory");
    if (ok) {
        size_t n_parts = json_array_size(parts), n_calls = json_array_size(calls);
        json_t *m = json_pack("{s:s}", "role", "assistant");
        if (n_parts) json_object_set(m, "content", parts);
        else json_object_set_new(m, "content", n_calls ? json_null() : json_string(""));
        if (n_calls) json_object_set(m, "tool_calls", calls);
        if (thinking) json_object_set_new(m, "reasoning_content", json_string(think.p ? think.p : ""));
        json_array_append_new(out, m);
        *has_text = n_parts && !n_calls;
    }
    json_decref(parts);
    json_decref(calls);
    weft_sb_free(&think);
    return ok;
}

static bool add_messages(const json_t *msgs, json_t *out, json_t *chat, struct merr *e)
{
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return fail(e, "messages", "'messages' must be a non-empty array of {\"role\", \"content\"}");
    size_t i, n = json_array_size(msgs);
    json_t *m;
    json_array_foreach(msgs, i, m) {
        static const char *const keys[] = {"role", "content", NULL};
        char where[48];
        snprintf(where, sizeof where, "message %zu", i);
        json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        if (!json_is_object(m)) return fail(e, "messages", "%s must be an object", where);
        if (!is_str(role, "user") && !is_str(role, "assistant"))
            return fail(e, "messages", "%s: 'role' must be \"user\" or \"assistant\" (the system prompt is 'system')",
                        where);
        if (!only_keys(m, keys, "messages", where, e)) return false;
        bool user = is_str(role, "user"), has_text = false;
        if (json_is_string(c)) {
            json_array_append_new(out, json_pack("{s:O,s:O}", "role", role, "content", c));
            has_text = json_string_length(c) > 0;
        } else if (json_is_array(c) && json_array_size(c)) {
            if (user ? !user_turn(c, i, out, e) : !assistant_turn(c, i, out, &has_text, e)) return false;
        } else {
            return fail(e, "messages", "%s: 'content' must be a string or a non-empty array of content blocks", where);
        }
        /* a last assistant message is a prefill: the reply carries it on */
        if (!user && i == n - 1) {
            if (!has_text)
                return fail(e, "messages", "the last message is from the assistant (a prefill) but has no text to "
                                           "carry on (tool_use and thinking blocks cannot be continued)");
            json_object_set_new(chat, "continue_final_message", json_true());
        }
    }
    return true;
}

static bool add_system(const json_t *sys, json_t *out, struct merr *e)
{
    if (absent(sys)) return true;
    if (json_is_string(sys)) {
        if (json_string_length(sys))
            json_array_append_new(out, json_pack("{s:s,s:O}", "role", "system", "content", sys));
        return true;
    }
    if (!json_is_array(sys)) return fail(e, "system", "'system' must be a string or an array of text blocks");
    json_t *parts = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(sys, i, b) {
        if (!json_is_object(b) || !is_str(json_object_get(b, "type"), "text")) {
            json_decref(parts);
            return fail(e, "system", "'system' block %zu must be {\"type\": \"text\", \"text\": string}", i);
        }
        json_t *p = text_part(b, "system", "'system'", e);
        if (!p) {
            json_decref(parts);
            return false;
        }
        json_array_append_new(parts, p);
    }
    if (json_array_size(parts)) json_array_append_new(out, json_pack("{s:s,s:o}", "role", "system", "content", parts));
    else json_decref(parts);
    return true;
}

/* tools -> function tools; strict tools only where the call is constrained
 * (tool_choice any or tool: the grammar holds the input to its schema). */
static bool add_tools(const json_t *tools, bool constrained, json_t *chat, struct merr *e)
{
    if (absent(tools)) return true;
    if (!json_is_array(tools)) return fail(e, "tools", "'tools' must be an array");
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        static const char *const keys[] = {"name", "description", "input_schema", "type", "cache_control", "strict",
                                           "eager_input_streaming", "defer_loading", NULL};
        char where[32];
        snprintf(where, sizeof where, "tool %zu", i);
        if (!json_is_object(t)) return fail(e, "tools", "%s must be an object", where);
        json_t *ty = json_object_get(t, "type");
        if (!absent(ty) && !is_str(ty, "custom"))
            return fail(e, "tools", "%s: server tools ('%.64s') are not supported: weft offers only client tools "
                                    "({name, description, input_schema})",
                        where, json_is_string(ty) ? json_string_value(ty) : "?");
        json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
        json_t *schema = json_object_get(t, "input_schema"), *strict = json_object_get(t, "strict");
        json_t *defer = json_object_get(t, "defer_loading"), *eager = json_object_get(t, "eager_input_streaming");
        if (!json_is_string(name)) return fail(e, "tools", "%s needs a string 'name'", where);
        if (!json_is_object(schema)) return fail(e, "tools", "%s needs an object 'input_schema' (a JSON Schema)", where);
        if (!absent(desc) && !json_is_string(desc)) return fail(e, "tools", "%s: 'description' must be a string", where);
        if (!only_keys(t, keys, "tools", where, e) ||
            !cache_control_ok(json_object_get(t, "cache_control"), "tools", where, e))
            return false;
        if (!absent(strict) && !json_is_boolean(strict)) return fail(e, "tools", "%s: 'strict' must be a boolean", where);
        if (json_is_true(strict) && !constrained)
            return fail(e, "tools", "%s: 'strict' is honoured only with tool_choice {\"type\": \"any\"} or "
                                    "{\"type\": \"tool\"} (weft constrains a call to its schema only then)",
                        where);
        if (!absent(defer) && !json_is_false(defer))
            return fail(e, "tools", "%s: 'defer_loading' is not supported", where);
        /* a streaming-granularity hint: weft sends a call's input whole either way */
        if (!absent(eager) && !json_is_boolean(eager))
            return fail(e, "tools", "%s: 'eager_input_streaming' must be a boolean", where);
        json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
        if (json_is_string(desc)) json_object_set(fn, "description", desc);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return true;
}

static bool add_tool_choice(const json_t *tc, json_t *chat, struct merr *e)
{
    if (absent(tc)) return true;
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    json_t *ty = json_object_get(tc, "type"), *name = json_object_get(tc, "name");
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (!json_is_object(tc) || !json_is_string(ty))
        return fail(e, "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (!only_keys(tc, keys, "tool_choice", "'tool_choice'", e)) return false;
    const char *t = json_string_value(ty);
    if (!strcmp(t, "auto")) json_object_set_new(chat, "tool_choice", json_string("auto"));
    else if (!strcmp(t, "any")) json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (!strcmp(t, "none")) json_object_set_new(chat, "tool_choice", json_string("none"));
    else if (!strcmp(t, "tool")) {
        if (!json_is_string(name)) return fail(e, "tool_choice", "'tool_choice' {\"type\": \"tool\"} needs a 'name'");
        json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    } else {
        return fail(e, "tool_choice", "'tool_choice.type' must be auto, any, tool or none, got '%.32s'", t);
    }
    if (!absent(name) && strcmp(t, "tool"))
        return fail(e, "tool_choice", "'tool_choice.name' goes only with {\"type\": \"tool\"}");
    if (!absent(dp)) {
        if (!json_is_boolean(dp)) return fail(e, "tool_choice", "'disable_parallel_tool_use' must be a boolean");
        if (!strcmp(t, "none")) return fail(e, "tool_choice", "'disable_parallel_tool_use' does not go with \"none\"");
        if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    }
    return true;
}

static bool add_sampling(const json_t *body, json_t *chat, struct merr *e)
{
    json_t *v = json_object_get(body, "temperature");
    if (!absent(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
            return fail(e, "temperature", "'temperature' must be a number from 0 to 1");
        json_object_set(chat, "temperature", v);
    }
    v = json_object_get(body, "top_p");
    if (!absent(v)) {
        if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1)
            return fail(e, "top_p", "'top_p' must be a number above 0 and at most 1");
        json_object_set(chat, "top_p", v);
    }
    v = json_object_get(body, "top_k");
    if (!absent(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 20))
            return fail(e, "top_k", "'top_k' must be an integer from 0 to %d (0: off)", 1 << 20);
        json_object_set(chat, "top_k", v);
    }
    v = json_object_get(body, "stop_sequences");
    if (!absent(v)) {
        if (!json_is_array(v) || json_array_size(v) > WEFT_MAX_STOP)
            return fail(e, "stop_sequences", "'stop_sequences' must be an array of at most %d strings", WEFT_MAX_STOP);
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) {
            if (!json_is_string(s) || !json_string_length(s) || json_string_length(s) > WEFT_MAX_STOP_LEN)
                return fail(e, "stop_sequences", "'stop_sequences' entries must be strings of 1 to %d bytes",
                            WEFT_MAX_STOP_LEN);
        }
        if (json_array_size(v)) json_object_set(chat, "stop", v);
    }
    v = json_object_get(body, "stream");
    if (!absent(v)) {
        if (!json_is_boolean(v)) return fail(e, "stream", "'stream' must be a boolean");
        if (json_is_true(v)) {
            json_object_set_new(chat, "stream", json_true());
            json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
        }
    }
    return true;
}

/* metadata, thinking, output_config and the fields that are accepted only at their no-op values. */
static bool add_options(const json_t *body, json_t *chat, struct merr *e)
{
    json_t *v = json_object_get(body, "metadata");
    if (!absent(v)) {
        static const char *const keys[] = {"user_id", NULL};
        json_t *u = json_object_get(v, "user_id");
        if (!json_is_object(v)) return fail(e, "metadata", "'metadata' must be an object");
        if (!only_keys(v, keys, "metadata", "'metadata' (known: user_id)", e)) return false;
        if (!absent(u) && !json_is_string(u)) return fail(e, "metadata", "'metadata.user_id' must be a string");
        if (json_is_string(u)) json_object_set(chat, "user", u);
    }
    v = json_object_get(body, "thinking");
    if (!absent(v)) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(t))
            return fail(e, "thinking", "'thinking' must be {\"type\": \"disabled\"} (the only kind weft takes)");
        if (!is_str(t, "disabled"))
            return fail(e, "thinking", "'thinking' {\"type\": \"%.32s\"} is not supported: weft cannot hold a model's "
                                       "reasoning to a budget (a model that reasons returns thinking blocks anyway)",
                        json_string_value(t));
        static const char *const keys[] = {"type", NULL};
        if (!only_keys(v, keys, "thinking", "'thinking'", e)) return false;
    }
    v = json_object_get(body, "output_config");
    if (!absent(v)) {
        static const char *const keys[] = {"format", "effort", NULL};
        if (!json_is_object(v)) return fail(e, "output_config", "'output_config' must be an object");
        if (!only_keys(v, keys, "output_config", "'output_config'", e)) return false;
        if (!absent(json_object_get(v, "effort")))
            return fail(e, "output_config", "'output_config.effort' is not supported");
        json_t *f = json_object_get(v, "format");
        if (!absent(f)) {
            static const char *const fkeys[] = {"type", "schema", NULL};
            json_t *schema = json_object_get(f, "schema");
            if (!json_is_object(f) || !is_str(json_object_get(f, "type"), "json_schema") || !json_is_object(schema))
                return fail(e, "output_config",
                            "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}");
            if (!only_keys(f, fkeys, "output_config", "'output_config.format'", e)) return false;
            json_object_set_new(chat, "response_format",
                                json_pack("{s:s,s:{s:s,s:O,s:b}}", "type", "json_schema", "json_schema", "name",
                                          "output", "schema", schema, "strict", 1));
        }
    }
    v = json_object_get(body, "service_tier");
    if (!absent(v) && !is_str(v, "auto") && !is_str(v, "standard_only"))
        return fail(e, "service_tier", "'service_tier' must be \"auto\" or \"standard_only\" (weft has one tier)");
    v = json_object_get(body, "speed");
    if (!absent(v) && !is_str(v, "standard")) return fail(e, "speed", "'speed' other than \"standard\" is not supported");
    v = json_object_get(body, "mcp_servers");
    if (!absent(v) && !(json_is_array(v) && !json_array_size(v)))
        return fail(e, "mcp_servers", "'mcp_servers' is not supported (weft runs no tools itself)");
    if (!cache_control_ok(json_object_get(body, "cache_control"), "cache_control", "the request", e)) return false;
    /* Anthropic's fields with no weft counterpart: only null passes */
    static const char *const null_only[] = {"container", "inference_geo", "diagnostics", "context_management",
                                            "user_profile_id", "workspace_id", NULL};
    for (const char *const *k = null_only; *k; k++)
        if (!absent(json_object_get(body, *k))) return fail(e, *k, "'%s' is not supported", *k);
    return true;
}

static const char *const TOP_KEYS[] = {
    "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream", "temperature", "top_p",
    "top_k", "tools", "tool_choice", "thinking", "service_tier", "container", "mcp_servers", "inference_geo",
    "speed", "cache_control", "output_config", "diagnostics", "context_management", "user_profile_id",
    "workspace_id", NULL};

static bool translate(json_t *body, json_t *chat, struct merr *e)
{
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        if (!in_list(k, TOP_KEYS)) return fail(e, NULL, "unknown field '%.64s'", k);
    }
    json_t *model = json_object_get(body, "model"), *mt = json_object_get(body, "max_tokens");
    if (!json_is_string(model)) return fail(e, "model", "'model' is required (a string)");
    json_object_set(chat, "model", model);
    if (absent(mt)) return fail(e, "max_tokens", "'max_tokens' is required");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > (1 << 24))
        return fail(e, "max_tokens", "'max_tokens' must be an integer from 1 to %d", 1 << 24);
    json_object_set(chat, "max_tokens", mt);
    json_t *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    if (!add_system(json_object_get(body, "system"), msgs, e)) return false;
    if (!add_messages(json_object_get(body, "messages"), msgs, chat, e)) return false;
    json_t *tc = json_object_get(body, "tool_choice"), *ty = json_object_get(tc, "type");
    bool constrained = is_str(ty, "any") || is_str(ty, "tool");
    if (!add_tools(json_object_get(body, "tools"), constrained, chat, e)) return false;
    if (!add_tool_choice(tc, chat, e)) return false;
    if (!add_sampling(body, chat, e)) return false;
    return add_options(body, chat, e);
}

json_t *weft_shape_messages_request(json_t *body, const char **param, char *msg, size_t msg_size)
{
    struct merr e = {param, msg, msg_size};
    *param = NULL;
    if (msg_size) msg[0] = '\0';
    if (!json_is_object(body)) return fail(&e, NULL, "the request body must be a JSON object"), NULL;
    json_t *chat = json_object();
    if (!chat) return fail(&e, NULL, "out of memory"), NULL;
    if (!translate(body, chat, &e)) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

/* ---- the answer ---- */

static const char *stop_reason_of(const char *finish)
{
    if (!finish) return "end_turn";
    if (!strcmp(finish, "length")) return "max_tokens";
    if (!strcmp(finish, "tool_calls")) return "tool_use";
    return "end_turn";  /* "stop": the turn's end or a stop string, which weft's chat does not tell apart */
}

/* A call's arguments text as the input object (a new reference); {} when it is not an object. */
static json_t *call_input(const char *args)
{
    json_t *in = args ? json_loads(args, 0, NULL) : NULL;
    if (json_is_object(in)) return in;
    json_decref(in);
    return json_object();
}

static json_int_t int_at(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* usage {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens} -> Anthropic's counts. */
static void usage_counts(const json_t *usage, json_int_t *in, json_int_t *out, json_int_t *cached)
{
    *cached = int_at(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
    *in = int_at(usage, "prompt_tokens") - *cached;
    if (*in < 0) *in = 0;
    *out = int_at(usage, "completion_tokens");
}

json_t *weft_shape_messages_response(const json_t *body, const json_t *completion, const char *id)
{
    json_t *choice = json_array_get(json_object_get(completion, "choices"), 0);
    json_t *m = json_object_get(choice, "message"), *fin = json_object_get(choice, "finish_reason");
    json_t *model = json_object_get(body, "model");
    if (!json_is_string(model)) model = json_object_get(completion, "model");
    json_t *cid = json_object_get(completion, "id");
    json_t *content = json_array();
    json_t *rc = json_object_get(m, "reasoning_content"), *text = json_object_get(m, "content");
    if (json_is_string(rc) && json_string_length(rc))
        json_array_append_new(content, json_pack("{s:s,s:O,s:s}", "type", "thinking", "thinking", rc, "signature", ""));
    if (json_is_string(text) && json_string_length(text))
        json_array_append_new(content, json_pack("{s:s,s:O}", "type", "text", "text", text));
    size_t i;
    json_t *call;
    json_array_foreach(json_object_get(m, "tool_calls"), i, call) {
        json_t *fn = json_object_get(call, "function"), *name = json_object_get(fn, "name");
        json_t *cidv = json_object_get(call, "id"), *args = json_object_get(fn, "arguments");
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                 json_is_string(cidv) ? json_string_value(cidv) : "",
                                                 "name", json_is_string(name) ? json_string_value(name) : "",
                                                 "input", call_input(json_string_value(args))));
    }
    json_int_t in, out, cached;
    json_t *usage = json_object_get(completion, "usage");
    usage_counts(usage, &in, &out, &cached);
    json_t *u = json_pack("{s:I,s:I}", "input_tokens", in, "output_tokens", out);
    if (json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"))
        json_object_set_new(u, "cache_read_input_tokens", json_integer(cached));
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n,s:o}", "id",
                     id ? id : json_is_string(cid) ? json_string_value(cid) : "msg_weft", "type", "message", "role",
                     "assistant", "model", json_is_string(model) ? json_string_value(model) : "", "content", content,
                     "stop_reason", stop_reason_of(json_string_value(fin)), "stop_sequence", "usage", u);
}

/* ---- the stream ----
 * message_start on the first chunk (its usage 0: the prompt's count comes
 * with the last chunk); a content block per run of reasoning (thinking),
 * content (text) and per tool call (tool_use, its input as one
 * input_json_delta); each block stopped when the next starts or the choice
 * finishes; message_delta when the usage chunk comes (else at the end) with
 * the stop reason and the counts; message_stop at the end. */

enum { BLK_NONE = 0, BLK_TEXT, BLK_THINKING, BLK_TOOL };
#define STREAM_ENDED (-2)  /* s->block once message_stop went out: nothing more is written */

/* "event: name\ndata: <data>\n\n"; takes data's reference. */
static void emit(struct weft_strbuf *out, const char *name, json_t *data)
{
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s) {
        out->oom = true;
        return;
    }
    weft_sb_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
}

static void stream_start(struct shape_messages_stream *s, const json_t *chunk, struct weft_strbuf *out)
{
    if (s->started) return;
    s->started = true;
    s->block = -1;
    const char *model = s->model;
    if (!model[0] && json_is_string(json_object_get(chunk, "model"))) model = json_string_value(json_object_get(chunk, "model"));
    emit(out, "message_start",
         json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}", "type", "message_start", "message", "id",
                   s->id, "type", "message", "role", "assistant", "model", model, "content", "stop_reason",
                   "stop_sequence", "usage", "input_tokens", 0, "output_tokens", 0));
}

static void block_stop(struct shape_messages_stream *s, struct weft_strbuf *out)
{
    if (s->block < 0) return;
    emit(out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", s->block));
    s->block = -1;
    s->block_kind = BLK_NONE;
}

/* Stop the open block and start a new one of kind with content_block cb (its reference taken). */
static void block_start(struct shape_messages_stream *s, int kind, json_t *cb, struct weft_strbuf *out)
{
    block_stop(s, out);
    s->block = s->n_blocks++;
    s->block_kind = kind;
    emit(out, "content_block_start",
         json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", s->block, "content_block", cb));
}

static void block_delta(struct shape_messages_stream *s, const char *type, const char *key, const json_t *text,
                        struct weft_strbuf *out)
{
    emit(out, "content_block_delta",
         json_pack("{s:s,s:i,s:{s:s,s:O}}", "type", "content_block_delta", "index", s->block, "delta", "type", type,
                   key, text));
}

static void stream_text(struct shape_messages_stream *s, int kind, const json_t *text, struct weft_strbuf *out)
{
    if (!json_is_string(text) || !json_string_length(text)) return;
    if (s->block_kind != kind) {
        json_t *cb = kind == BLK_TEXT ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                                      : json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
        block_start(s, kind, cb, out);
    }
    if (kind == BLK_TEXT) block_delta(s, "text_delta", "text", text, out);
    else block_delta(s, "thinking_delta", "thinking", text, out);
}

/* Tool calls: weft sends each whole; a piece without an id that continues
 * the open call's index (OpenAI's way of streaming arguments) is appended. */
static void stream_calls(struct shape_messages_stream *s, const json_t *calls, struct weft_strbuf *out)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *idx = json_object_get(c, "index"), *id = json_object_get(c, "id");
        json_t *fn = json_object_get(c, "function"), *args = json_object_get(fn, "arguments");
        uint32_t index = json_is_integer(idx) ? (uint32_t)json_integer_value(idx) : (uint32_t)i;
        if (!(s->block_kind == BLK_TOOL && s->tool_index == index && !json_is_string(id))) {
            json_t *name = json_object_get(fn, "name");
            char fallback[80];
            snprintf(fallback, sizeof fallback, "%s_call_%u", s->id, index);
            block_start(s, BLK_TOOL,
                        json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id",
                                  json_is_string(id) ? json_string_value(id) : fallback, "name",
                                  json_is_string(name) ? json_string_value(name) : "", "input"),
                        out);
            s->tool_index = index;
        }
        if (json_is_string(args) && json_string_length(args)) block_delta(s, "input_json_delta", "partial_json", args, out);
    }
}

static void message_delta(struct shape_messages_stream *s, const json_t *usage, struct weft_strbuf *out)
{
    json_t *u = json_pack("{s:I}", "output_tokens", (json_int_t)s->output_tokens);
    if (usage) {
        json_int_t in, o, cached;
        usage_counts(usage, &in, &o, &cached);
        json_object_set_new(u, "input_tokens", json_integer(in));
        if (json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"))
            json_object_set_new(u, "cache_read_input_tokens", json_integer(cached));
    } else if (s->input_tokens) {
        json_object_set_new(u, "input_tokens", json_integer((json_int_t)s->input_tokens));
    }
    emit(out, "message_delta",
         json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta", "delta", "stop_reason",
                   s->stop_reason[0] ? s->stop_reason : "end_turn", "stop_sequence", "usage", u));
    s->stopped = true;
}

void weft_shape_messages_chunk(struct shape_messages_stream *s, const json_t *chunk, struct weft_strbuf *out)
{
    if (s->block == STREAM_ENDED || s->stopped) return;
    stream_start(s, chunk, out);
    size_t i;
    json_t *ch;
    json_array_foreach(json_object_get(chunk, "choices"), i, ch) {
        json_t *idx = json_object_get(ch, "index");
        if (json_is_integer(idx) && json_integer_value(idx) != 0) continue;  /* a Message has one choice */
        json_t *d = json_object_get(ch, "delta"), *fin = json_object_get(ch, "finish_reason");
        stream_text(s, BLK_THINKING, json_object_get(d, "reasoning_content"), out);
        stream_text(s, BLK_TEXT, json_object_get(d, "content"), out);
        stream_calls(s, json_object_get(d, "tool_calls"), out);
        if (json_is_string(fin)) {
            block_stop(s, out);
            snprintf(s->stop_reason, sizeof s->stop_reason, "%s", stop_reason_of(json_string_value(fin)));
        }
    }
    json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage)) {
        json_int_t in, o, cached;
        usage_counts(usage, &in, &o, &cached);
        s->input_tokens = (uint64_t)in;
        s->output_tokens = (uint64_t)o;
        /* the usage chunk follows the finish: the counts go out with the stop reason now */
        if (s->stop_reason[0]) message_delta(s, usage, out);
    }
}

void weft_shape_messages_end(struct shape_messages_stream *s, struct weft_strbuf *out)
{
    if (s->block == STREAM_ENDED) return;
    stream_start(s, NULL, out);
    block_stop(s, out);
    if (!s->stopped) message_delta(s, NULL, out);
    emit(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    s->block = STREAM_ENDED;
}
