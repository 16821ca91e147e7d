#include "server/params.h"
#include "base/buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int weft_json_depth_exceeds(const char *text, size_t len, int limit)
{
    int depth = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > limit) return 1;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 0;
}

struct perr {
    const char **param;
    char *msg;
    size_t size;
};

static bool fail(struct perr *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(struct perr *e, const char *param, const char *fmt, ...)
{
    *e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->size, fmt, ap);
    va_end(ap);
    return false;
}

static bool is_null_or_absent(const json_t *v) { return !v || json_is_null(v); }

static bool get_bool(json_t *o, const char *key, bool *out, struct perr *e)
{
    json_t *v = json_object_get(o, key);
    if (is_null_or_absent(v)) return true;
    if (!json_is_boolean(v)) return fail(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

static bool get_num(json_t *o, const char *key, double lo, double hi, bool *given, double *out, struct perr *e)
{
    json_t *v = json_object_get(o, key);
    if (is_null_or_absent(v)) return true;
    if (!json_is_number(v)) return fail(e, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) return fail(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = d;
    if (given) *given = true;
    return true;
}

static bool get_int(json_t *o, const char *key, int64_t lo, int64_t hi, bool *given, int64_t *out, struct perr *e)
{
    json_t *v = json_object_get(o, key);
    if (is_null_or_absent(v)) return true;
    if (!json_is_integer(v)) return fail(e, key, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return fail(e, key, "'%s' must be between %lld and %lld, got %lld", key, (long long)lo, (long long)hi,
                    (long long)x);
    *out = x;
    if (given) *given = true;
    return true;
}

/* "content": string, or an array of {"type":"text","text":...} parts. */
static bool content_text(json_t *c, char **out, struct perr *e)
{
    if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
        return *out ? true : fail(e, "messages", "out of memory");
    }
    if (!json_is_array(c)) return fail(e, "messages", "message 'content' must be a string or an array of text parts");
    size_t len = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text))
            return fail(e, "messages", "content part %zu must be {\"type\": \"text\", \"text\": string}", i);
        len += json_string_length(text);
    }
    char *s = malloc(len + 1);
    if (!s) return fail(e, "messages", "out of memory");
    size_t at = 0;
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = '\0';
    *out = s;
    return true;
}

static bool parse_messages(json_t *msgs, struct gen_params *p, struct perr *e)
{
    if (!json_is_array(msgs)) return fail(e, "messages", "'messages' must be an array of messages");
    size_t n = json_array_size(msgs);
    if (n == 0) return fail(e, "messages", "'messages' must not be empty");
    if (n > WEFT_MAX_MESSAGES) return fail(e, "messages", "at most %d messages", WEFT_MAX_MESSAGES);
    p->msgs = calloc(n, sizeof *p->msgs);
    p->msg_text = calloc(n, sizeof *p->msg_text);
    if (!p->msgs || !p->msg_text) return fail(e, "messages", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) return fail(e, "messages", "message %zu must be an object", i);
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role)) return fail(e, "messages", "message %zu needs a string 'role'", i);
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "developer") &&
            strcmp(r, "tool"))
            return fail(e, "messages",
                        "message %zu has unsupported role '%.32s' (system, developer, user, assistant, tool)", i, r);
        p->msgs[i].role = strcmp(r, "developer") ? r : "system";
        p->n_msgs++;
        struct weft_chat_tool_call *calls = NULL;
        size_t n_calls = 0;
        if (!weft_structured_message_calls(m, i, &calls, &n_calls, &p->msgs[i].tool_call_id, e->msg, e->size)) {
            *e->param = "messages";
            return false;
        }
        p->msgs[i].tool_calls = calls;
        p->msgs[i].n_tool_calls = n_calls;
        /* an earlier reply's reasoning (vLLM's reasoning_content; 'reasoning' as newer clients send it) */
        json_t *rc = json_object_get(m, "reasoning_content");
        if (is_null_or_absent(rc)) rc = json_object_get(m, "reasoning");
        if (!is_null_or_absent(rc)) {
            if (!json_is_string(rc))
                return fail(e, "messages", "message %zu's 'reasoning_content' must be a string", i);
            if (strcmp(r, "assistant"))
                return fail(e, "messages", "message %zu (%s) has 'reasoning_content': only assistant messages do", i, r);
            p->msgs[i].reasoning = json_string_value(rc);
        }
        if (n_calls && strcmp(r, "assistant"))
            return fail(e, "messages", "message %zu (%s) has 'tool_calls': only assistant messages do", i, r);
        /* an assistant message that calls tools may have no content */
        if (n_calls && (!content || json_is_null(content))) continue;
        if (!content) return fail(e, "messages", "message %zu needs 'content'", i);
        if (!content_text(content, &p->msg_text[i], e)) return false;
        p->msgs[i].content = p->msg_text[i];
    }
    return true;
}

static bool parse_prompt(json_t *pr, struct gen_params *p, struct perr *e)
{
    if (!pr) return fail(e, "prompt", "'prompt' is required");
    if (json_is_string(pr)) {
        p->prompt = json_string_value(pr);
        if (json_string_length(pr) == 0) return fail(e, "prompt", "'prompt' must not be empty");
        return true;
    }
    if (!json_is_array(pr)) return fail(e, "prompt", "'prompt' must be a string or an array of token ids");
    size_t n = json_array_size(pr);
    if (n == 0) return fail(e, "prompt", "'prompt' must not be empty");
    json_t *first = json_array_get(pr, 0);
    if (json_is_string(first) || json_is_array(first)) {
        /* an array of prompts (strings or arrays of ids): each gets its n choices, indexed prompt * n + j */
        if (n > WEFT_MAX_PROMPTS) return fail(e, "prompt", "at most %d prompts in one request", WEFT_MAX_PROMPTS);
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(pr, i);
            if (json_is_string(v) ? json_string_length(v) == 0 : !json_is_array(v) || !json_array_size(v))
                return fail(e, "prompt", "prompt %zu must be a non-empty string or array of token ids (all prompts of "
                            "one kind)", i);
            if (json_typeof(v) != json_typeof(first))
                return fail(e, "prompt", "the prompts must be all strings or all arrays of token ids");
            for (size_t k = 0; json_is_array(v) && k < json_array_size(v); k++) {
                json_t *t = json_array_get(v, k);
                if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
                    return fail(e, "prompt", "prompt %zu, token %zu must be a non-negative integer id", i, k);
            }
        }
        if (n > 1) {
            p->n_prompts = (uint32_t)n;
            p->prompt_list = pr;
        }
        return parse_prompt(first, p, e);
    }
    p->prompt_ids = malloc(sizeof(int32_t) * n);
    if (!p->prompt_ids) return fail(e, "prompt", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return fail(e, "prompt", "prompt token %zu must be a non-negative integer id", i);
        p->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    p->n_prompt_ids = (uint32_t)n;
    return true;
}

static bool parse_stop(json_t *st, struct gen_params *p, struct perr *e)
{
    if (is_null_or_absent(st)) return true;
    if (json_is_string(st)) {
        if (json_string_length(st) == 0) return fail(e, "stop", "'stop' strings must not be empty");
        if (json_string_length(st) > WEFT_MAX_STOP_LEN) return fail(e, "stop", "stop strings are limited to %d bytes", WEFT_MAX_STOP_LEN);
        p->stop[p->n_stop++] = json_string_value(st);
        return true;
    }
    if (!json_is_array(st)) return fail(e, "stop", "'stop' must be a string or an array of strings");
    if (json_array_size(st) > WEFT_MAX_STOP) return fail(e, "stop", "at most %d stop strings", WEFT_MAX_STOP);
    size_t i;
    json_t *v;
    json_array_foreach(st, i, v) {
        if (!json_is_string(v) || json_string_length(v) == 0)
            return fail(e, "stop", "'stop' entries must be non-empty strings");
        if (json_string_length(v) > WEFT_MAX_STOP_LEN)
            return fail(e, "stop", "stop strings are limited to %d bytes", WEFT_MAX_STOP_LEN);
        p->stop[p->n_stop++] = json_string_value(v);
    }
    return true;
}

/* The "weft" extension object: {"ids": true} asks for each chunk's token
 * ids and the effective seed; {"continue": [ids], "id": "...", "created": N}
 * carries a stream on from the tokens already generated. */
static bool parse_ext(json_t *w, struct gen_params *p, struct perr *e)
{
    if (is_null_or_absent(w)) return true;
    if (!json_is_object(w)) return fail(e, "weft", "'weft' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(w, key, v) {
        if (strcmp(key, "ids") && strcmp(key, "continue") && strcmp(key, "id") && strcmp(key, "created"))
            return fail(e, "weft", "unknown field 'weft.%.64s' (known: ids, continue, id, created)", key);
    }
    if (!get_bool(w, "ids", &p->ext_ids, e)) return false;
    json_t *c = json_object_get(w, "continue");
    if (!is_null_or_absent(c)) {
        if (!json_is_array(c)) return fail(e, "weft", "'weft.continue' must be an array of token ids");
        size_t n = json_array_size(c);
        if (n > (1u << 24)) return fail(e, "weft", "'weft.continue' is too long");
        p->cont_ids = malloc(sizeof(int32_t) * (n ? n : 1));
        if (!p->cont_ids) return fail(e, "weft", "out of memory");
        size_t i;
        json_array_foreach(c, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                return fail(e, "weft", "'weft.continue' entries must be token ids (non-negative integers)");
            p->cont_ids[i] = (int32_t)json_integer_value(v);
        }
        p->n_cont = (uint32_t)n;
        p->cont = true;
        if (!p->stream) return fail(e, "weft", "'weft.continue' needs 'stream': true");
    }
    json_t *id = json_object_get(w, "id");
    if (!is_null_or_absent(id)) {
        if (!json_is_string(id) || json_string_length(id) == 0 || json_string_length(id) >= 48)
            return fail(e, "weft", "'weft.id' must be a string of 1 to 47 bytes");
        for (const char *q = json_string_value(id); *q; q++)
            if ((unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e || *q == '"' || *q == '\\')
                return fail(e, "weft", "'weft.id' must be printable ASCII without quotes or backslashes");
        p->ext_rid = json_string_value(id);
    }
    bool given = false;
    int64_t cr = 0;
    if (!get_int(w, "created", 0, INT64_MAX, &given, &cr, e)) return false;
    if (given) p->ext_created = cr;
    return true;
}

/* vLLM's, SGLang's and llama-server's request extensions weft does not
 * honour: a request that sets one to anything but its no-op value gets a
 * 400 naming it, never a 200 that ignored it. */
enum ext_noop { NOOP_NULL, NOOP_FALSE, NOOP_TRUE, NOOP_ZERO, NOOP_ONE };
static const struct { const char *name; enum ext_noop noop; } EXTENSIONS[] = {
    {"guided_regex", NOOP_NULL},         {"guided_decoding_backend", NOOP_NULL},
    {"guided_whitespace_pattern", NOOP_NULL}, {"structured_outputs", NOOP_NULL},
    {"regex", NOOP_NULL},                {"ebnf", NOOP_NULL},
    {"chat_template", NOOP_NULL},        {"documents", NOOP_NULL},
    {"mm_processor_kwargs", NOOP_NULL},  {"bad_words", NOOP_NULL},           {"allowed_token_ids", NOOP_NULL},
    {"logits_processors", NOOP_NULL},   {"samplers", NOOP_NULL},
    {"lora", NOOP_NULL},                 {"truncate_prompt_tokens", NOOP_NULL}, {"prompt_logprobs", NOOP_NULL},
    {"vllm_xargs", NOOP_NULL},           {"use_beam_search", NOOP_FALSE},
    {"include_stop_str_in_output", NOOP_FALSE}, {"return_tokens_as_token_ids", NOOP_FALSE},
    {"skip_special_tokens", NOOP_TRUE},  {"spaces_between_special_tokens", NOOP_TRUE},
    {"cache_prompt", NOOP_TRUE},
    {"mirostat", NOOP_ZERO},             {"n_probs", NOOP_ZERO},             {"dry_multiplier", NOOP_ZERO},
    {"xtc_probability", NOOP_ZERO},      {"length_penalty", NOOP_ONE},       {"typical_p", NOOP_ONE},
    {"tfs_z", NOOP_ONE},
};

/* vLLM's guided_json / guided_choice / guided_grammar, llama.cpp's
 * json_schema / grammar: the constraint held as response_format's is (one
 * of them, not with response_format or a required call); and
 * stop_token_ids. */
static bool parse_guided(json_t *j, struct gen_params *p, struct perr *e)
{
    static const char *const KEYS[] = {"guided_json", "json_schema", "guided_choice", "guided_grammar", "grammar"};
    const char *key = NULL;
    json_t *v = NULL;
    for (size_t i = 0; i < sizeof KEYS / sizeof *KEYS; i++) {
        json_t *x = json_object_get(j, KEYS[i]);
        if (is_null_or_absent(x)) continue;
        if ((json_is_object(x) && !json_object_size(x)) || (json_is_array(x) && !json_array_size(x))) continue;
        if (key) return fail(e, KEYS[i], "'%s' and '%s' cannot both be given", key, KEYS[i]);
        key = KEYS[i];
        v = x;
    }
    struct gen_structured *s = &p->st;
    if (key && (s->format != GEN_FORMAT_TEXT || s->tool_choice == GEN_TOOLS_REQUIRED || s->tool_choice == GEN_TOOLS_NAMED))
        return fail(e, key, "'%s' cannot be combined with 'response_format' or a required tool call", key);
    if (key && (!strcmp(key, "guided_json") || !strcmp(key, "json_schema"))) {
        if (!json_is_object(v) && !json_is_boolean(v)) return fail(e, key, "'%s' must be a JSON Schema", key);
        s->format = GEN_FORMAT_JSON_SCHEMA;
        s->schema = v;
        s->format_param = key;
    } else if (key && !strcmp(key, "guided_choice")) {
        /* root ::= "a" | "b" | ... */
        if (!json_is_array(v) || json_array_size(v) > 256)
            return fail(e, key, "'guided_choice' must be an array of at most 256 strings");
        struct weft_strbuf b = {0};
        weft_sb_puts(&b, "root ::=");
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c) {
            if (!json_is_string(c) || !json_string_length(c) || json_string_length(c) > 4096) {
                weft_sb_free(&b);
                return fail(e, key, "'guided_choice' entries must be non-empty strings of at most 4096 bytes");
            }
            weft_sb_puts(&b, i ? " | \"" : " \"");
            const unsigned char *t = (const unsigned char *)json_string_value(c);
            for (size_t k = 0; k < json_string_length(c); k++) {
                if (t[k] == '"' || t[k] == '\\') weft_sb_printf(&b, "\\%c", t[k]);
                else if (t[k] < 0x20 || t[k] == 0x7f) weft_sb_printf(&b, "\\x%02x", t[k]);
                else weft_sb_putc(&b, (char)t[k]);
            }
            weft_sb_puts(&b, "\"");
        }
        weft_sb_puts(&b, "\n");
        if (b.oom) {
            weft_sb_free(&b);
            return fail(e, key, "out of memory");
        }
        s->format = GEN_FORMAT_GRAMMAR;
        s->grammar = b.p;
        s->format_param = key;
    } else if (key) {
        /* a grammar in weft's GBNF-like form (core/grammar.h) */
        if (!json_is_string(v)) return fail(e, key, "'%s' must be a grammar (a string)", key);
        if (!(s->grammar = strdup(json_string_value(v)))) return fail(e, key, "out of memory");
        s->format = GEN_FORMAT_GRAMMAR;
        s->format_param = key;
    }
    /* vLLM's min_tokens: no end-of-generation, stop token or stop string before that many tokens */
    int64_t mt = 0;
    if (!get_int(j, "min_tokens", 0, 1 << 24, NULL, &mt, e)) return false;
    if (mt > 0 && p->max_tokens >= 0 && mt > p->max_tokens)
        return fail(e, "min_tokens", "'min_tokens' (%lld) is above 'max_tokens' (%lld)", (long long)mt,
                    (long long)p->max_tokens);
    if (mt > 0 && (s->format != GEN_FORMAT_TEXT || s->tool_choice == GEN_TOOLS_REQUIRED ||
                   s->tool_choice == GEN_TOOLS_NAMED))
        return fail(e, "min_tokens", "'min_tokens' cannot be combined with a constrained output (a grammar decides "
                                     "where it ends)");
    p->min_tokens = (uint32_t)mt;
    json_t *st = json_object_get(j, "stop_token_ids");
    if (!is_null_or_absent(st)) {
        if (!json_is_array(st) || json_array_size(st) > WEFT_MAX_STOP)
            return fail(e, "stop_token_ids", "'stop_token_ids' must be an array of at most %d token ids", WEFT_MAX_STOP);
        size_t i;
        json_t *t;
        json_array_foreach(st, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
                return fail(e, "stop_token_ids", "'stop_token_ids' entries must be token ids");
            p->stop_ids[p->n_stop_ids++] = (int32_t)json_integer_value(t);
        }
    }
    return true;
}

static bool refuse_extensions(json_t *j, struct perr *e)
{
    for (size_t i = 0; i < sizeof EXTENSIONS / sizeof EXTENSIONS[0]; i++) {
        const char *k = EXTENSIONS[i].name;
        json_t *v = json_object_get(j, k);
        if (!v || json_is_null(v)) continue;
        bool noop;
        switch (EXTENSIONS[i].noop) {
        case NOOP_NULL: noop = (json_is_object(v) && !json_object_size(v)) || (json_is_array(v) && !json_array_size(v)); break;
        case NOOP_FALSE: noop = json_is_false(v); break;
        case NOOP_TRUE: noop = json_is_true(v); break;
        case NOOP_ZERO: noop = json_is_number(v) && json_number_value(v) == 0; break;
        default: noop = json_is_number(v) && json_number_value(v) == 1; break;
        }
        if (noop) continue;
        static const char *const what[] = {"", " other than false", " other than true", " other than 0", " other than 1"};
        return fail(e, k, "'%s'%s is not supported", k, what[EXTENSIONS[i].noop]);
    }
    return true;
}

bool weft_gen_params_parse(const char *body, size_t len, bool chat, struct gen_params *p, json_t **root,
                      const char **param, char *msg, size_t msg_size)
{
    struct perr e = {param, msg, msg_size};
    memset(p, 0, sizeof *p);
    *root = NULL;
    *param = NULL;
    p->chat = chat;
    p->n_prompts = 1;
    p->max_tokens = -1;
    /* OpenAI's defaults: plain sampling at temperature 1 */
    weft_sampling_params_default(&p->sp);
    p->sp.temperature = 1.0f;
    p->sp.top_p = 1.0f;
    p->sp.top_k = 0;
    p->sp.min_p = 0.0f;
    if (weft_json_depth_exceeds(body, len, WEFT_MAX_JSON_DEPTH))
        return fail(&e, NULL, "JSON nested deeper than %d levels", WEFT_MAX_JSON_DEPTH);
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) return fail(&e, NULL, "invalid JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    *root = j;
    if (!json_is_object(j)) return fail(&e, NULL, "the request body must be a JSON object");

    json_t *model = json_object_get(j, "model");
    if (!is_null_or_absent(model)) {
        if (!json_is_string(model)) return fail(&e, "model", "'model' must be a string");
        p->model = json_string_value(model);
    }
    if (chat) {
        if (!parse_messages(json_object_get(j, "messages"), p, &e)) return false;
    } else if (!parse_prompt(json_object_get(j, "prompt"), p, &e)) {
        return false;
    }
    bool given = false;
    int64_t iv;
    double dv;
    if (!get_int(j, "max_tokens", 1, 1 << 24, NULL, &p->max_tokens, &e)) return false;
    if (chat && !get_int(j, "max_completion_tokens", 1, 1 << 24, NULL, &p->max_tokens, &e)) return false;
    dv = p->sp.temperature;
    if (!get_num(j, "temperature", 0, 2, NULL, &dv, &e)) return false;
    p->sp.temperature = (float)dv;
    dv = p->sp.top_p;
    if (!get_num(j, "top_p", 0, 1, NULL, &dv, &e)) return false;
    if (dv <= 0) return fail(&e, "top_p", "'top_p' must be greater than 0");
    p->sp.top_p = (float)dv;
    iv = 0;
    if (!get_int(j, "top_k", -1, 1 << 20, NULL, &iv, &e)) return false;
    p->sp.top_k = (int32_t)(iv < 0 ? 0 : iv);
    dv = 0;
    if (!get_num(j, "min_p", 0, 1, NULL, &dv, &e)) return false;
    p->sp.min_p = (float)dv;
    dv = 0;
    if (!get_num(j, "presence_penalty", -2, 2, NULL, &dv, &e)) return false;
    p->sp.presence_penalty = (float)dv;
    dv = 0;
    if (!get_num(j, "frequency_penalty", -2, 2, NULL, &dv, &e)) return false;
    p->sp.frequency_penalty = (float)dv;
    dv = 1;
    if (!get_num(j, "repetition_penalty", 0.01, 10, NULL, &dv, &e)) return false;
    p->sp.repeat_penalty = (float)dv;
    iv = 0;
    if (!get_int(j, "seed", INT64_MIN, INT64_MAX, &p->seed_given, &iv, &e)) return false;
    if (p->seed_given) p->sp.seed = (uint64_t)iv;
    iv = 1;
    if (!get_int(j, "n", 1, WEFT_MAX_CHOICES, NULL, &iv, &e)) return false;
    p->n = (uint32_t)iv;
    iv = 1;
    if (!get_int(j, "best_of", 1, 1, NULL, &iv, &e)) return false;
    if (!parse_stop(json_object_get(j, "stop"), p, &e)) return false;
    if (!get_bool(j, "stream", &p->stream, &e)) return false;
    json_t *so = json_object_get(j, "stream_options");
    if (!is_null_or_absent(so)) {
        if (!json_is_object(so)) return fail(&e, "stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &p->include_usage, &e)) return false;
        if (!p->stream) return fail(&e, "stream_options", "'stream_options' is only allowed with 'stream': true");
    }
    if (chat) {
        if (!get_bool(j, "logprobs", &p->logprobs, &e)) return false;
        iv = 0;
        if (!get_int(j, "top_logprobs", 0, WEFT_MAX_LOGPROBS, &given, &iv, &e)) return false;
        if (given && !p->logprobs) return fail(&e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        p->top_logprobs = (int32_t)iv;
    } else {
        iv = 0;
        if (!get_int(j, "logprobs", 0, WEFT_MAX_LOGPROBS, &given, &iv, &e)) return false;
        p->logprobs = given;
        p->top_logprobs = (int32_t)iv;
    }
    if (!get_bool(j, "ignore_eos", &p->ignore_eos, &e)) return false;
    iv = 0;
    if (!get_int(j, "priority", -1000000, 1000000, &p->priority_given, &iv, &e)) return false;
    p->priority = (int32_t)iv;
    if (!get_bool(j, "echo", &p->echo, &e)) return false;
    if (p->echo && chat) return fail(&e, "echo", "'echo' is for /v1/completions");
    /* what the chat template gets (vLLM's extensions) */
    p->add_generation_prompt = true;
    json_t *kw = json_object_get(j, "chat_template_kwargs");
    if (!chat && json_is_object(kw) && !json_object_size(kw)) kw = NULL;  /* {}: nothing asked */
    if (!is_null_or_absent(kw)) {
        if (!chat) return fail(&e, "chat_template_kwargs", "'chat_template_kwargs' is for /v1/chat/completions");
        if (!json_is_object(kw)) return fail(&e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        static const char *const reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
        for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
            if (json_object_get(kw, reserved[r]))
                return fail(&e, "chat_template_kwargs", "'chat_template_kwargs' may not set '%s' (the request's own)",
                            reserved[r]);
        p->tmpl_kwargs = kw;
    }
    json_t *agp = json_object_get(j, "add_generation_prompt"), *cfm = json_object_get(j, "continue_final_message");
    /* on completions only the values that ask for nothing (true, false) pass */
    if (!chat && !is_null_or_absent(agp) && !json_is_true(agp))
        return fail(&e, "add_generation_prompt", "'add_generation_prompt' is for /v1/chat/completions");
    if (!chat && !is_null_or_absent(cfm) && !json_is_false(cfm))
        return fail(&e, "continue_final_message", "'continue_final_message' is for /v1/chat/completions");
    if (!get_bool(j, "add_generation_prompt", &p->add_generation_prompt, &e)) return false;
    if (!get_bool(j, "continue_final_message", &p->continue_final, &e)) return false;
    if (p->continue_final) {
        if (p->add_generation_prompt && !is_null_or_absent(agp))
            return fail(&e, "continue_final_message",
                        "'continue_final_message' and 'add_generation_prompt' cannot both be true");
        p->add_generation_prompt = false;
        const struct weft_chat_msg *last = &p->msgs[p->n_msgs - 1];
        if (strcmp(last->role, "assistant") || !last->content || !last->content[0] || last->n_tool_calls)
            return fail(&e, "continue_final_message",
                        "'continue_final_message' needs a last message from the assistant with text content");
    }
    if (p->echo && p->logprobs)
        return fail(&e, "echo", "'echo' with 'logprobs' (the prompt's logprobs) is not supported");
    json_t *sfx = json_object_get(j, "suffix");
    if (!is_null_or_absent(sfx)) {
        /* fill-in-the-middle: the text between prompt and suffix (server/prompt.c) */
        if (chat) return fail(&e, "suffix", "'suffix' is for /v1/completions");
        if (!json_is_string(sfx)) return fail(&e, "suffix", "'suffix' must be a string");
        if (!p->prompt) return fail(&e, "suffix", "'suffix' needs a text 'prompt'");
        if (p->echo) return fail(&e, "suffix", "'suffix' cannot be combined with 'echo'");
        if (json_string_length(sfx)) p->suffix = json_string_value(sfx);
    }
    json_t *lb = json_object_get(j, "logit_bias");
    if (!is_null_or_absent(lb)) {
        /* OpenAI's: {"token id": bias in -100..100}, added to the logits */
        if (!json_is_object(lb) || json_object_size(lb) > 300)
            return fail(&e, "logit_bias", "'logit_bias' must be an object of at most 300 token ids");
        size_t n = json_object_size(lb);
        p->bias_id = malloc(sizeof *p->bias_id * (n ? n : 1));
        p->bias_val = malloc(sizeof *p->bias_val * (n ? n : 1));
        if (!p->bias_id || !p->bias_val) return fail(&e, NULL, "out of memory");
        const char *key;
        json_t *v;
        uint32_t k = 0;
        json_object_foreach(lb, key, v) {
            char *end = NULL;
            long long id = strtoll(key, &end, 10);
            if (!*key || *end || id < 0 || id > INT32_MAX)
                return fail(&e, "logit_bias", "'logit_bias' keys must be token ids, not '%.40s'", key);
            if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
                return fail(&e, "logit_bias", "'logit_bias' values must be numbers in -100..100 (token %lld)", id);
            p->bias_id[k] = (int32_t)id;
            p->bias_val[k++] = (float)json_number_value(v);
        }
        p->sp.bias_id = p->bias_id;
        p->sp.bias_val = p->bias_val;
        p->sp.n_bias = k;
    }
    if (!weft_structured_parse(j, chat, &p->st, param, msg, msg_size)) return false;
    if (!parse_guided(j, p, &e)) return false;
    if (!refuse_extensions(j, &e)) return false;
    json_t *user = json_object_get(j, "user");
    if (!is_null_or_absent(user) && !json_is_string(user)) return fail(&e, "user", "'user' must be a string");
    p->sp.n_logprobs = p->logprobs ? (p->top_logprobs > 0 ? p->top_logprobs : 1) : 0;
    if (!parse_ext(json_object_get(j, "weft"), p, &e)) return false;
    /* a stream the router moves here carries on: its client has the prompt's echo already */
    if (p->cont) p->echo = false;
    /* a router's moving stream follows one sequence's tokens */
    if (p->n > 1 && (p->ext_ids || p->cont))
        return fail(&e, "n", "'n' > 1 cannot be combined with 'weft.ids' or 'weft.continue'");
    if (chat) p->n_prompts = 1;
    if (p->n_prompts > 1) {
        if (p->n * p->n_prompts > WEFT_MAX_PROMPTS)
            return fail(&e, "n", "%u prompts x n = %u choices: at most %d in one request", p->n_prompts,
                        p->n * p->n_prompts, WEFT_MAX_PROMPTS);
        if (p->echo) return fail(&e, "echo", "'echo' takes one prompt, not an array of them");
        if (p->suffix) return fail(&e, "suffix", "'suffix' takes one prompt, not an array of them");
        if (p->ext_ids || p->cont) return fail(&e, "weft", "'weft' takes one prompt, not an array of them");
    }
    return true;
}

void weft_gen_params_free(struct gen_params *p)
{
    for (uint32_t i = 0; i < p->n_msgs; i++) {
        free(p->msg_text[i]);
        free((void *)p->msgs[i].tool_calls);
    }
    weft_structured_free(&p->st);
    free(p->msg_text);
    free(p->msgs);
    free(p->prompt_ids);
    free(p->cont_ids);
    free(p->bias_id);
    free(p->bias_val);
    memset(p, 0, sizeof *p);
}
