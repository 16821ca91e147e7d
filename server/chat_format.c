/* Call and reasoning formats of chat templates (server/chat_format.h). */
#include "server/chat_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

/* DeepSeek's markers (full-width bars, U+2581 for spaces) */
#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

const char *weft_chat_calls_name(enum chat_calls c)
{
    switch (c) {
    case CHAT_CALLS_HERMES: return "hermes";
    case CHAT_CALLS_LLAMA3: return "llama3-json";
    case CHAT_CALLS_MISTRAL: return "mistral";
    case CHAT_CALLS_MISTRAL_ARGS: return "mistral-args";
    case CHAT_CALLS_HARMONY: return "harmony";
    case CHAT_CALLS_DEEPSEEK: return "deepseek";
    }
    return "?";
}

static const char *findn(const char *h, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (k == 0) return h;
    for (size_t i = 0; i + k <= n; i++)
        if (h[i] == needle[0] && !memcmp(h + i, needle, k)) return h + i;
    return NULL;
}

static bool has(const char *src, size_t n, const char *needle) { return findn(src, n, needle) != NULL; }

void weft_chat_format_detect(struct chat_format *f, const char *src, size_t n)
{
    memset(f, 0, sizeof *f);
    f->calls = CHAT_CALLS_HERMES;
    if (!src) return;
    if (has(src, n, "<|channel|>")) f->calls = CHAT_CALLS_HARMONY;
    else if (has(src, n, "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin")) f->calls = CHAT_CALLS_DEEPSEEK;
    else if (has(src, n, "[TOOL_CALLS]") && has(src, n, "[ARGS]")) f->calls = CHAT_CALLS_MISTRAL_ARGS;
    else if (has(src, n, "[TOOL_CALLS]")) f->calls = CHAT_CALLS_MISTRAL;
    else if (has(src, n, "<tool_call>")) f->calls = CHAT_CALLS_HERMES;
    else if (has(src, n, "<|start_header_id|>") && (has(src, n, "ipython") || has(src, n, "\"parameters\"")))
        f->calls = CHAT_CALLS_LLAMA3;
    if (f->calls == CHAT_CALLS_HARMONY) {
        f->think = CHAT_THINK_HARMONY;
    } else if (has(src, n, "<think>") || has(src, n, "</think>")) {
        f->think = CHAT_THINK_TAGS;
        snprintf(f->think_open, sizeof f->think_open, "<think>");
        snprintf(f->think_close, sizeof f->think_close, "</think>");
    } else if (has(src, n, "[THINK]")) {
        f->think = CHAT_THINK_TAGS;
        snprintf(f->think_open, sizeof f->think_open, "[THINK]");
        snprintf(f->think_close, sizeof f->think_close, "[/THINK]");
    }
}

void weft_chat_call_frame(enum chat_calls c, struct chat_call_frame *fr)
{
    static const struct chat_call_frame F[] = {
        [CHAT_CALLS_HERMES] = {"", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "\n", "",
                               true},
        [CHAT_CALLS_LLAMA3] = {"", "{\"name\": \"", "\", \"parameters\": ", "}", "", "", false},
        [CHAT_CALLS_MISTRAL] = {"[TOOL_CALLS][", "{\"name\": \"", "\", \"arguments\": ", "}", ", ", "]", true},
        [CHAT_CALLS_MISTRAL_ARGS] = {"", "[TOOL_CALLS]", "[ARGS]", "", "", "", true},
        [CHAT_CALLS_HARMONY] = {"", "<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "", "", "",
                                false},
        [CHAT_CALLS_DEEPSEEK] = {DS_CALLS_BEGIN, DS_CALL_BEGIN, DS_SEP, DS_CALL_END, "", DS_CALLS_END, true},
    };
    *fr = F[c];
}

/* ---- messages for the template ---- */

static const char TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

/* The tools section's closing for a format other than Hermes': how a call is written in it. */
static void tools_tail(struct weft_strbuf *b, enum chat_calls c)
{
    if (c == CHAT_CALLS_HERMES) {
        weft_sb_puts(b, TOOLS_TAIL);
        return;
    }
    struct chat_call_frame fr;
    weft_chat_call_frame(c, &fr);
    weft_sb_puts(b, "\n</tools>\n\nTo call a function, write exactly:\n");
    weft_sb_puts(b, fr.begin);
    weft_sb_puts(b, fr.open);
    weft_sb_puts(b, "<function-name>");
    weft_sb_puts(b, fr.mid);
    weft_sb_puts(b, "<args-json-object>");
    weft_sb_puts(b, fr.after);
    weft_sb_puts(b, fr.end);
}

/* Mistral's templates take call ids of 9 letters and digits: an id is
 * written as the last 9 of its letters and digits (0s before a shorter
 * one), as weft's own Mistral-format ids are. */
static json_t *call_id(const struct chat_format *f, const char *id)
{
    if (f->calls != CHAT_CALLS_MISTRAL && f->calls != CHAT_CALLS_MISTRAL_ARGS) return json_string(id);
    char out[10] = "000000000";
    size_t k = 9;
    for (size_t i = strlen(id); i > 0 && k > 0; i--) {
        char ch = id[i - 1];
        if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) out[--k] = ch;
    }
    return json_string(out);
}

static json_t *msg_obj(const char *role, const char *content)
{
    return json_pack("{s:s,s:o}", "role", role, "content", content ? json_string(content) : json_null());
}

json_t *weft_chat_format_messages(const struct chat_format *f, const struct weft_chat_msg *msgs, size_t n,
                                  char *const *tool_defs, uint32_t n_tools, json_t **tools_out)
{
    *tools_out = NULL;
    json_t *out = json_array();
    if (!out) return NULL;
    bool oom = false;
    size_t i = 0;
    /* tools the template does not render: a system message of Hermes' "# Tools" section */
    if (n_tools && !f->native_tools) {
        struct weft_strbuf b = {0};
        if (n && !strcmp(msgs[0].role, "system") && msgs[0].content) {
            weft_sb_puts(&b, msgs[0].content);
            weft_sb_puts(&b, "\n\n");
            i = 1;
        }
        weft_sb_puts(&b, TOOLS_HEAD);
        for (uint32_t k = 0; k < n_tools; k++) {
            weft_sb_puts(&b, "\n");
            weft_sb_puts(&b, tool_defs[k]);
        }
        tools_tail(&b, f->calls);
        oom = b.oom || json_array_append_new(out, msg_obj("system", b.p));
        free(b.p);
    } else if (n_tools) {
        json_t *defs = json_array();
        for (uint32_t k = 0; defs && k < n_tools; k++) {
            json_t *d = json_loads(tool_defs[k], 0, NULL);
            if (!d || json_array_append_new(defs, d)) oom = true;
        }
        *tools_out = defs;
        if (!defs) oom = true;
    }
    const char *fold = NULL;  /* a system message waiting for the first user message */
    for (; i < n && !oom; i++) {
        const struct weft_chat_msg *m = &msgs[i];
        if (!strcmp(m->role, "system") && !f->system_role) {
            fold = m->content;
            continue;
        }
        if (!strcmp(m->role, "tool") && !f->native_results) {
            /* consecutive results: one user turn of <tool_response> blocks */
            struct weft_strbuf b = {0};
            for (; i < n && !strcmp(msgs[i].role, "tool"); i++) {
                if (b.len) weft_sb_puts(&b, "\n");
                weft_sb_puts(&b, "<tool_response>\n");
                weft_sb_puts(&b, msgs[i].content ? msgs[i].content : "");
                weft_sb_puts(&b, "\n</tool_response>");
            }
            i--;
            oom = b.oom || json_array_append_new(out, msg_obj("user", b.p));
            free(b.p);
            continue;
        }
        json_t *o;
        if (m->n_tool_calls && !f->native_calls) {
            struct weft_strbuf b = {0};
            if (m->content && m->content[0]) {
                weft_sb_puts(&b, m->content);
                weft_sb_puts(&b, "\n");
            }
            for (size_t k = 0; k < m->n_tool_calls; k++) {
                if (k) weft_sb_puts(&b, "\n");
                weft_sb_puts(&b, "<tool_call>\n{\"name\": \"");
                weft_sb_puts(&b, m->tool_calls[k].name);
                weft_sb_puts(&b, "\", \"arguments\": ");
                weft_sb_puts(&b, m->tool_calls[k].arguments);
                weft_sb_puts(&b, "}\n</tool_call>");
            }
            o = b.oom ? NULL : msg_obj(m->role, b.p);
            free(b.p);
        } else if (fold && !strcmp(m->role, "user")) {
            size_t a = strlen(fold), c = m->content ? strlen(m->content) : 0;
            char *joined = malloc(a + c + 3);
            if (joined) {
                memcpy(joined, fold, a);
                memcpy(joined + a, "\n\n", 2);
                if (c) memcpy(joined + a + 2, m->content, c);
                joined[a + 2 + c] = 0;
            }
            o = joined ? msg_obj(m->role, joined) : NULL;
            free(joined);
            fold = NULL;
        } else {
            const char *content = m->content;
            if (!content && m->n_tool_calls && f->calls_need_content) content = "";
            o = msg_obj(m->role, content);
        }
        if (!o) {
            oom = true;
            break;
        }
        if (m->n_tool_calls && f->native_calls) {
            json_t *calls = json_array();
            for (size_t k = 0; calls && k < m->n_tool_calls; k++) {
                const struct weft_chat_tool_call *c = &m->tool_calls[k];
                json_t *args = f->string_args ? json_string(c->arguments) : json_loads(c->arguments, 0, NULL);
                if (!args) args = json_string(c->arguments);
                json_t *call = json_pack("{s:s,s:{s:s,s:o}}", "type", "function", "function", "name", c->name,
                                         "arguments", args);
                if (call && c->id) json_object_set_new(call, "id", call_id(f, c->id));
                if (!call || json_array_append_new(calls, call)) oom = true;
            }
            if (!calls || json_object_set_new(o, "tool_calls", calls)) oom = true;
        }
        if (m->tool_call_id) json_object_set_new(o, "tool_call_id", call_id(f, m->tool_call_id));
        if (m->reasoning) {
            json_object_set_new(o, "reasoning_content", json_string(m->reasoning));
            if (f->think == CHAT_THINK_HARMONY) json_object_set_new(o, "thinking", json_string(m->reasoning));
        }
        if (json_array_append_new(out, o)) oom = true;
    }
    if (!oom && fold) oom = json_array_append_new(out, msg_obj("user", fold));
    if (oom) {
        json_decref(out);
        json_decref(*tools_out);
        *tools_out = NULL;
        return NULL;
    }
    return out;
}

/* ---- reading a reply ---- */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The length of text[0..len) before a tail that may begin tag (a proper prefix of it). */
static size_t before_partial_tag(const char *text, size_t len, const char *tag)
{
    size_t k = strlen(tag);
    for (size_t j = k - 1; j > 0; j--)
        if (len >= j && !memcmp(text + len - j, tag, j)) return len - j;
    return len;
}

/* text[0..n) is a proper prefix of tag (a tag cut short) */
static bool is_prefix(const char *text, size_t n, const char *tag)
{
    return n < strlen(tag) && !memcmp(text, tag, n);
}

static size_t rtrim(const char *t, size_t from, size_t to)
{
    while (to > from && is_ws(t[to - 1])) to--;
    return to;
}

static size_t ltrim(const char *t, size_t from, size_t to)
{
    while (from < to && is_ws(t[from])) from++;
    return from;
}

static bool offered(const struct gen_structured *s, const char *name, size_t n)
{
    for (uint32_t i = 0; i < s->n_tools; i++)
        if (strlen(s->tool_names[i]) == n && !memcmp(s->tool_names[i], name, n)) return true;
    return false;
}


/* One call: name[0..nn) and arguments (a JSON object, or JSON text of one). */
static bool add_call(const struct gen_structured *s, struct chat_reply *r, const char *name, size_t nn, json_t *args)
{
    if (!offered(s, name, nn)) return false;
    json_t *parsed = NULL;
    if (json_is_string(args)) args = parsed = json_loads(json_string_value(args), 0, NULL);
    if (!json_is_object(args)) {
        json_decref(parsed);
        return false;
    }
    if (r->n_calls == WEFT_MAX_PARALLEL_CALLS * 2) {
        json_decref(parsed);
        return false;
    }
    if (!r->calls && !(r->calls = calloc(WEFT_MAX_PARALLEL_CALLS * 2, sizeof *r->calls))) {
        json_decref(parsed);
        return false;
    }
    struct tool_call_out *c = &r->calls[r->n_calls];
    c->name = strndup(name, nn);
    c->arguments = json_dumps(args, JSON_COMPACT);
    json_decref(parsed);
    weft_tool_call_fresh_id(c->id, sizeof c->id);
    if (r->short_ids) {
        /* Mistral's 9 letters and digits */
        memmove(c->id, c->id + 5, 9);
        c->id[9] = 0;
    }
    r->n_calls++;
    return c->name && c->arguments;
}

/* {"name": ..., "arguments"|"parameters": ...} */
static bool add_call_obj(const struct gen_structured *s, struct chat_reply *r, json_t *o)
{
    json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_string(name)) return false;
    return add_call(s, r, json_string_value(name), json_string_length(name), args);
}

/* Qwen3-Coder's <function=NAME>\n<parameter=P>\nVALUE\n</parameter>...</function> */
static bool add_call_xml(const struct gen_structured *s, struct chat_reply *r, const char *b, const char *e)
{
    b += strlen("<function=");
    const char *ne = memchr(b, '>', (size_t)(e - b));
    if (!ne) return false;
    json_t *args = json_object();
    const char *p = ne + 1;
    for (;;) {
        const char *ps = findn(p, (size_t)(e - p), "<parameter=");
        if (!ps) break;
        const char *pn = ps + strlen("<parameter="), *pe = memchr(pn, '>', (size_t)(e - pn));
        if (!pe) break;
        const char *vs = pe + 1, *ve = findn(vs, (size_t)(e - vs), "</parameter>");
        if (!ve) {
            json_decref(args);
            return false;
        }
        p = ve + strlen("</parameter>");
        if (vs < ve && *vs == '\n') vs++;
        if (ve > vs && ve[-1] == '\n') ve--;
        json_t *v = json_loadb(vs, (size_t)(ve - vs), JSON_DECODE_ANY, NULL);
        if (!v) v = json_stringn(vs, (size_t)(ve - vs));
        char *key = strndup(pn, (size_t)(pe - pn));
        if (key) json_object_set_new(args, key, v);
        else json_decref(v);
        free(key);
    }
    bool ok = add_call(s, r, b, (size_t)(ne - b), args);
    json_decref(args);
    return ok;
}

/* The calls in text[from..len): 0 when none begins there; -1 when what
 * follows the first call is not a call; the count read otherwise (a last
 * call cut short sets cut_call). *start: where the first call begins. */
static int read_calls(const struct chat_format *f, const struct gen_structured *s, const char *text, size_t from,
                      size_t len, bool partial, size_t *start, struct chat_reply *r)
{
    const char *end = text + len;
    *start = len;
    switch (f->calls) {
    case CHAT_CALLS_HERMES: {
        const char *p = findn(text + from, len - from, "<tool_call>");
        if (!p) {
            if (partial) *start = before_partial_tag(text, len, "<tool_call>");
            return 0;
        }
        *start = (size_t)(p - text);
        if (partial) return 0;
        while (p) {
            const char *b = p + strlen("<tool_call>"), *e = findn(b, (size_t)(end - b), "</tool_call>");
            if (!e) {
                /* unclosed: a whole call whose closing tag the model left out, or one cut short */
                json_t *o = json_loadb(b, (size_t)(end - b), 0, NULL);
                bool whole = o && add_call_obj(s, r, o);
                json_decref(o);
                if (!whole) r->cut_call = true;
                break;
            }
            const char *bb = b;
            while (bb < e && is_ws(*bb)) bb++;
            bool ok;
            if ((size_t)(e - bb) > 10 && !memcmp(bb, "<function=", 10)) {
                ok = add_call_xml(s, r, bb, e);
            } else {
                json_t *o = json_loadb(b, (size_t)(e - b), 0, NULL);
                ok = add_call_obj(s, r, o);
                json_decref(o);
            }
            if (!ok) return -1;
            p = e + strlen("</tool_call>");
            while (p < end && is_ws(*p)) p++;
            if (p == end) break;
            if (is_prefix(p, (size_t)(end - p), "<tool_call>")) {
                r->cut_call = true;  /* the next call's tag, cut */
                break;
            }
            if ((size_t)(end - p) < strlen("<tool_call>") || memcmp(p, "<tool_call>", strlen("<tool_call>")))
                return -1;
        }
        return (int)r->n_calls;
    }
    case CHAT_CALLS_LLAMA3: {
        size_t i = ltrim(text, from, len);
        if (len - i >= 14 && !memcmp(text + i, "<|python_tag|>", 14)) i = ltrim(text, i + 14, len);
        if (i == len || text[i] != '{') {
            if (!partial || i < len) *start = len;
            else *start = from;  /* nothing yet: whatever comes may be a call */
            return 0;
        }
        *start = from;
        if (partial) return 0;
        while (i < len) {
            json_error_t je;
            json_t *o = json_loadb(text + i, len - i, JSON_DISABLE_EOF_CHECK, &je);
            if (!o) {
                if (r->n_calls) {
                    r->cut_call = true;
                    break;
                }
                return -1;
            }
            bool ok = add_call_obj(s, r, o);
            json_decref(o);
            if (!ok) return -1;
            i += je.position;
            while (i < len && (is_ws(text[i]) || text[i] == ';')) i++;
        }
        return (int)r->n_calls;
    }
    case CHAT_CALLS_MISTRAL: {
        const char *p = findn(text + from, len - from, "[TOOL_CALLS]");
        if (!p) {
            if (partial) *start = before_partial_tag(text, len, "[TOOL_CALLS]");
            return 0;
        }
        *start = (size_t)(p - text);
        if (partial) return 0;
        size_t i = ltrim(text, *start + strlen("[TOOL_CALLS]"), len);
        if (i == len || text[i] != '[') return i == len ? (r->cut_call = true, 0) : -1;
        /* the array, read element by element so that a cut one drops alone */
        i++;
        for (;;) {
            i = ltrim(text, i, len);
            if (i == len) {
                r->cut_call = true;
                break;
            }
            if (text[i] == ']') break;
            json_error_t je;
            json_t *o = json_loadb(text + i, len - i, JSON_DISABLE_EOF_CHECK, &je);
            if (!o) {
                r->cut_call = true;
                break;
            }
            bool ok = add_call_obj(s, r, o);
            json_decref(o);
            if (!ok) return -1;
            i = ltrim(text, i + je.position, len);
            if (i < len && text[i] == ',') i++;
        }
        return (int)r->n_calls;
    }
    case CHAT_CALLS_MISTRAL_ARGS: {
        const char *p = findn(text + from, len - from, "[TOOL_CALLS]");
        if (!p) {
            if (partial) *start = before_partial_tag(text, len, "[TOOL_CALLS]");
            return 0;
        }
        *start = (size_t)(p - text);
        if (partial) return 0;
        while (p) {
            const char *nb = p + strlen("[TOOL_CALLS]"), *a = findn(nb, (size_t)(end - nb), "[ARGS]");
            if (!a) {
                r->cut_call = true;
                break;
            }
            const char *ab = a + strlen("[ARGS]");
            /* Mistral Small 3.2 writes name[CALL_ID]id[ARGS] */
            const char *cid = findn(nb, (size_t)(a - nb), "[CALL_ID]");
            if (cid) a = cid;
            json_error_t je;
            json_t *o = json_loadb(ab, (size_t)(end - ab), JSON_DISABLE_EOF_CHECK, &je);
            if (!o) {
                r->cut_call = true;
                break;
            }
            bool ok = add_call(s, r, nb, (size_t)(a - nb), o);
            json_decref(o);
            if (!ok) return -1;
            p = ab + je.position;
            while (p < end && is_ws(*p)) p++;
            if (p == end) break;
            if (is_prefix(p, (size_t)(end - p), "[TOOL_CALLS]")) {
                r->cut_call = true;
                break;
            }
            if ((size_t)(end - p) < strlen("[TOOL_CALLS]") || memcmp(p, "[TOOL_CALLS]", strlen("[TOOL_CALLS]")))
                return -1;
        }
        return (int)r->n_calls;
    }
    case CHAT_CALLS_DEEPSEEK: {
        const char *p = findn(text + from, len - from, DS_CALLS_BEGIN);
        const char *q = findn(text + from, len - from, DS_CALL_BEGIN);
        if (!p || (q && q < p)) p = q;
        if (!p) {
            if (partial) {
                size_t a = before_partial_tag(text, len, DS_CALLS_BEGIN), b = before_partial_tag(text, len, DS_CALL_BEGIN);
                *start = a < b ? a : b;
            }
            return 0;
        }
        *start = (size_t)(p - text);
        if (partial) return 0;
        const char *c = p;
        if (!memcmp(c, DS_CALLS_BEGIN, strlen(DS_CALLS_BEGIN))) c += strlen(DS_CALLS_BEGIN);
        for (;;) {
            while (c < end && is_ws(*c)) c++;
            if (c == end) {
                if (!r->n_calls) r->cut_call = true;
                break;
            }
            if ((size_t)(end - c) >= strlen(DS_CALLS_END) && !memcmp(c, DS_CALLS_END, strlen(DS_CALLS_END))) break;
            if (is_prefix(c, (size_t)(end - c), DS_CALL_BEGIN) || is_prefix(c, (size_t)(end - c), DS_CALLS_END)) {
                r->cut_call = true;
                break;
            }
            if ((size_t)(end - c) < strlen(DS_CALL_BEGIN) || memcmp(c, DS_CALL_BEGIN, strlen(DS_CALL_BEGIN)))
                return -1;
            const char *nb = c + strlen(DS_CALL_BEGIN), *sep = findn(nb, (size_t)(end - nb), DS_SEP);
            const char *ce = sep ? findn(sep, (size_t)(end - sep), DS_CALL_END) : NULL;
            if (!ce) {
                r->cut_call = true;
                break;
            }
            const char *ab = sep + strlen(DS_SEP), *ae = ce;
            const char *name = nb;
            size_t nn = (size_t)(sep - nb);
            if (nn == 8 && !memcmp(nb, "function", 8)) {
                /* V3 / R1: function<sep>NAME\n```json\n{...}\n``` */
                const char *nl = memchr(ab, '\n', (size_t)(ae - ab));
                if (!nl) return -1;
                name = ab;
                nn = (size_t)(nl - ab);
                ab = nl + 1;
                if ((size_t)(ae - ab) >= 7 && !memcmp(ab, "```json", 7)) ab += 7;
                ae = rtrim(ab, 0, (size_t)(ae - ab)) + ab;
                if (ae - ab >= 3 && !memcmp(ae - 3, "```", 3)) ae -= 3;
            }
            json_t *o = json_loadb(ab, (size_t)(ae - ab), 0, NULL);
            bool ok = add_call(s, r, name, nn, o);
            json_decref(o);
            if (!ok) return -1;
            c = ce + strlen(DS_CALL_END);
        }
        return (int)r->n_calls;
    }
    case CHAT_CALLS_HARMONY:
        return 0;  /* read with the channels (parse_harmony) */
    }
    return 0;
}

/* gpt-oss's harmony: messages of <|channel|>NAME[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>BODY ended by
 * <|end|>, <|call|> or <|return|> (the last two end generation: the text ends there), the next opened by
 * <|start|>assistant. analysis -> reasoning, final -> content, commentary to=functions.NAME -> a call. */
static void parse_harmony(const struct gen_structured *s, const char *text, size_t len, bool partial,
                          struct chat_reply *r)
{
    bool tools = s && s->tool_choice != GEN_TOOLS_OFF;
    size_t pos = 0;
    bool any = false, have_r = false, have_c = false;
    while (pos < len) {
        const char *hs = text + pos, *end = text + len;
        const char *msg = findn(hs, len - pos, "<|message|>");
        if (!msg) break;
        const char *ch = findn(hs, (size_t)(msg - hs), "<|channel|>");
        if (!ch) break;
        any = true;
        const char *cn = ch + strlen("<|channel|>");
        size_t cl = 0;
        while (cn + cl < msg && !is_ws(cn[cl]) && cn[cl] != '<') cl++;
        const char *to = findn(hs, (size_t)(msg - hs), "to=");
        const char *body = msg + strlen("<|message|>");
        const char *stops[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
        const char *be = NULL;
        for (int k = 0; k < 4; k++) {
            const char *x = findn(body, (size_t)(end - body), stops[k]);
            if (x && (!be || x < be)) be = x;
        }
        bool closed = be != NULL;
        if (!be) be = end;
        if (partial && !closed) {
            /* a tail that may begin any of the markers */
            size_t n = (size_t)(be - body), m = n;
            for (int k = 0; k < 4; k++) {
                size_t b2 = before_partial_tag(body, n, stops[k]);
                if (b2 < m) m = b2;
            }
            be = body + m;
        }
        size_t bf = (size_t)(body - text), bl = (size_t)(be - body);
        if (cl == 8 && !memcmp(cn, "analysis", 8) && !have_r && !have_c) {
            r->r_from = bf;
            r->r_len = bl;
            have_r = true;
        } else if (cl == 5 && !memcmp(cn, "final", 5) && !have_c) {
            r->c_from = bf;
            r->c_len = bl;
            have_c = true;
        } else if (to && !memcmp(to + 3, "functions.", 10) && tools && !partial) {
            const char *nb = to + 13, *ne = nb;
            while (ne < msg && !is_ws(*ne) && *ne != '<') ne++;
            json_t *o = json_loadb(body, (size_t)(be - body), 0, NULL);
            if (!o) r->cut_call = true;
            else add_call(s, r, nb, (size_t)(ne - nb), o);
            json_decref(o);
        } else if (cl == 10 && !memcmp(cn, "commentary", 10) && !to && !have_c) {
            r->c_from = bf;  /* a preamble to calls: content */
            r->c_len = bl;
            have_c = true;
        }
        if (!closed) break;
        pos = (size_t)(be - text);
        const char *next = findn(text + pos, len - pos, "<|start|>");
        if (!next) break;
        pos = (size_t)(next - text) + strlen("<|start|>");
    }
    if (!any && !partial) {
        /* no channels at all: the text is the content */
        r->c_from = 0;
        r->c_len = len;
    } else if (!any) {
        /* nothing known yet unless it plainly is not a harmony message */
        size_t i = ltrim(text, 0, len);
        if (i < len && text[i] != '<') {
            r->c_from = 0;
            r->c_len = len;
        }
    }
}

void weft_chat_reply_parse(const struct chat_format *f, const struct gen_structured *s, bool in_think,
                           const char *text, size_t len, bool partial, struct chat_reply *r)
{
    memset(r, 0, sizeof *r);
    if (!text) return;
    r->short_ids = f->calls == CHAT_CALLS_MISTRAL || f->calls == CHAT_CALLS_MISTRAL_ARGS;
    bool tools = s && s->tool_choice != GEN_TOOLS_OFF;
    if (f->think == CHAT_THINK_HARMONY || f->calls == CHAT_CALLS_HARMONY) {
        parse_harmony(s, text, len, partial, r);
        return;
    }
    size_t content_from = 0;
    if (f->think == CHAT_THINK_TAGS) {
        const char *open = f->think_open, *close = f->think_close;
        size_t i = ltrim(text, 0, len), ko = strlen(open);
        bool opens = len - i >= ko && !memcmp(text + i, open, ko);
        if (!in_think && !opens && partial && len - i < ko && !memcmp(text + i, open, len - i)) {
            /* may still become the opening tag: nothing is known yet */
            r->c_from = 0;
            return;
        }
        if (in_think || opens) {
            size_t rs = opens ? i + ko : 0;
            const char *ce = findn(text + rs, len - rs, close);
            size_t re = ce ? (size_t)(ce - text) : partial ? before_partial_tag(text, len, close) : len;
            r->r_from = ltrim(text, rs, re);
            r->r_len = rtrim(text, r->r_from, re) - r->r_from;
            if (!ce) {
                r->c_from = len;
                return;  /* still reasoning (or cut short: no content) */
            }
            content_from = ltrim(text, (size_t)(ce - text) + strlen(close), len);
        }
    }
    r->c_from = content_from;
    size_t cend = len;
    if (tools) {
        size_t start = len;
        int k = read_calls(f, s, text, content_from, len, partial, &start, r);
        if (k < 0) {
            /* not a call reply: all of it is content */
            weft_tool_calls_free(r->calls, WEFT_MAX_PARALLEL_CALLS * 2);
            r->calls = NULL;
            r->n_calls = 0;
            r->cut_call = false;
            start = len;
        }
        cend = start;
        /* whitespace before calls is not content: a stream holds it until it knows */
        if (partial || k > 0 || r->cut_call) cend = rtrim(text, content_from, start);
        if (cend < content_from) cend = content_from;
    }
    r->c_len = cend - content_from;
}

void weft_chat_reply_free(struct chat_reply *r)
{
    if (r->calls) weft_tool_calls_free(r->calls, WEFT_MAX_PARALLEL_CALLS * 2);
    memset(r, 0, sizeof *r);
}

bool weft_chat_format_prompt_thinks(const struct chat_format *f, const char *prompt, size_t n)
{
    if (f->think != CHAT_THINK_TAGS || !prompt) return false;
    n = rtrim(prompt, 0, n);
    size_t k = strlen(f->think_open);
    return n >= k && !memcmp(prompt + n - k, f->think_open, k);
}
