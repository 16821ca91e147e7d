/* Chat templates: the three families weft renders itself, each written to
 * reproduce its reference Jinja template's output exactly (minus the leading
 * BOS, which the tokenizer adds):
 *   ChatML   (Qwen, SmolLM2, ...)  "<|im_start|>{role}\n{content}<|im_end|>\n"
 *   Llama-3  "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>"
 *   Llama-2  "[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST] {asst} </s><s>[INST] ..."
 *            (meta-llama/Llama-2-*-chat-hf; contents .strip()'d) */
#include "core/chat.h"

#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#define SMOLLM_DEFAULT_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

enum weft_chat_style weft_chat_detect(const char *tmpl)
{
    if (!tmpl)
        return WEFT_CHAT_CHATML;
    if (strstr(tmpl, "<|im_start|>"))
        return WEFT_CHAT_CHATML;
    if (strstr(tmpl, "<|start_header_id|>"))
        return WEFT_CHAT_LLAMA3;
    if (strstr(tmpl, "[INST]"))
        return WEFT_CHAT_LLAMA2;
    return WEFT_CHAT_CHATML;
}

const char *weft_chat_style_name(enum weft_chat_style s)
{
    switch (s) {
    case WEFT_CHAT_CHATML: return "chatml";
    case WEFT_CHAT_LLAMA2: return "llama2";
    case WEFT_CHAT_LLAMA3: return "llama3";
    }
    return "unknown";
}

const char *weft_chat_default_system(const char *tmpl)
{
    if (tmpl && strstr(tmpl, SMOLLM_DEFAULT_SYSTEM))
        return SMOLLM_DEFAULT_SYSTEM;
    return NULL;
}

/* Jinja `trim` / Python str.strip(), restricted to ASCII whitespace
 * (Python's isspace also counts \x1c-\x1f). */
static bool is_py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void sb_put_trimmed(struct weft_strbuf *b, const char *s, size_t n)
{
    while (n > 0 && is_py_space((unsigned char)s[0])) {
        s++;
        n--;
    }
    while (n > 0 && is_py_space((unsigned char)s[n - 1]))
        n--;
    weft_sb_put(b, s, n);
}

/* ---- renderers ---- */

/* The ChatML call frame (Qwen2.5 / Hermes) and Llama-3.1's JSON one. */
#define CHATML_CALL_OPEN "<tool_call>\n{\"name\": \""
#define CHATML_CALL_MID "\", \"arguments\": "
#define CHATML_CALL_END "}\n</tool_call>"
#define LLAMA3_CALL_OPEN "{\"name\": \""
#define LLAMA3_CALL_MID "\", \"parameters\": "
#define LLAMA3_CALL_END "}"

void weft_chat_tool_call_frame(enum weft_chat_style style, const char **open_name, const char **name_to_args,
                               const char **after)
{
    bool chatml = style == WEFT_CHAT_CHATML, l3 = style == WEFT_CHAT_LLAMA3;
    *open_name = chatml ? CHATML_CALL_OPEN : l3 ? LLAMA3_CALL_OPEN : NULL;
    *name_to_args = chatml ? CHATML_CALL_MID : l3 ? LLAMA3_CALL_MID : NULL;
    *after = chatml ? CHATML_CALL_END : l3 ? LLAMA3_CALL_END : NULL;
}

static void put_call(struct weft_strbuf *b, const struct weft_chat_tool_call *c, const char *open, const char *mid,
                     const char *end)
{
    weft_sb_puts(b, open);
    weft_sb_puts(b, c->name);
    weft_sb_puts(b, mid);
    weft_sb_puts(b, c->arguments);
    weft_sb_puts(b, end);
}

static bool is_role(const struct weft_chat_msg *m, const char *r) { return strcmp(m->role, r) == 0; }

static void chatml_tools_section(struct weft_strbuf *b, const char *const *defs, size_t n)
{
    weft_sb_puts(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (size_t i = 0; i < n; i++) {
        weft_sb_puts(b, "\n");
        weft_sb_puts(b, defs[i]);
    }
    weft_sb_puts(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
               "\"arguments\": <args-json-object>}\n</tool_call>");
}

static void render_chatml(struct weft_strbuf *b, const struct weft_chat_msg *m, size_t n, const char *const *defs,
                          size_t n_defs, bool add_assistant)
{
    size_t i = 0;
    if (n_defs) {
        weft_sb_puts(b, "<|im_start|>system\n");
        if (n > 0 && is_role(&m[0], "system")) {
            weft_sb_puts(b, m[0].content);
            weft_sb_puts(b, "\n\n");
            i = 1;
        }
        chatml_tools_section(b, defs, n_defs);
        weft_sb_puts(b, "<|im_end|>\n");
    }
    for (; i < n; i++) {
        if (is_role(&m[i], "tool")) {
            /* consecutive results are one user turn */
            if (i == 0 || !is_role(&m[i - 1], "tool"))
                weft_sb_puts(b, "<|im_start|>user");
            weft_sb_puts(b, "\n<tool_response>\n");
            weft_sb_puts(b, m[i].content);
            weft_sb_puts(b, "\n</tool_response>");
            if (i + 1 == n || !is_role(&m[i + 1], "tool"))
                weft_sb_puts(b, "<|im_end|>\n");
            continue;
        }
        weft_sb_puts(b, "<|im_start|>");
        weft_sb_puts(b, m[i].role);
        if (m[i].n_tool_calls) {
            if (m[i].content && m[i].content[0]) {
                weft_sb_puts(b, "\n");
                weft_sb_puts(b, m[i].content);
            }
            for (size_t k = 0; k < m[i].n_tool_calls; k++) {
                weft_sb_puts(b, "\n");
                put_call(b, &m[i].tool_calls[k], CHATML_CALL_OPEN, CHATML_CALL_MID, CHATML_CALL_END);
            }
        } else {
            weft_sb_puts(b, "\n");
            weft_sb_puts(b, m[i].content);
        }
        weft_sb_puts(b, "<|im_end|>\n");
    }
    if (add_assistant)
        weft_sb_puts(b, "<|im_start|>assistant\n");
}

static void render_llama3(struct weft_strbuf *b, const struct weft_chat_msg *m, size_t n, const char *const *defs,
                          size_t n_defs, bool add_assistant)
{
    bool tools_pending = n_defs > 0;
    for (size_t i = 0; i < n; i++) {
        bool tool = is_role(&m[i], "tool");
        weft_sb_puts(b, "<|start_header_id|>");
        weft_sb_puts(b, tool ? "ipython" : m[i].role);
        weft_sb_puts(b, "<|end_header_id|>\n\n");
        if (tools_pending && is_role(&m[i], "user")) {
            /* 3.1's tools_in_user_message: the definitions before the first user text */
            weft_sb_puts(b, "Given the following functions, please respond with a JSON for a function call with its "
                       "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
                       "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
                       "variables.\n\n");
            for (size_t k = 0; k < n_defs; k++) {
                weft_sb_puts(b, defs[k]);
                weft_sb_puts(b, "\n\n");
            }
            tools_pending = false;
        }
        if (m[i].n_tool_calls) {
            for (size_t k = 0; k < m[i].n_tool_calls; k++)
                put_call(b, &m[i].tool_calls[k], LLAMA3_CALL_OPEN, LLAMA3_CALL_MID, LLAMA3_CALL_END);
        } else {
            sb_put_trimmed(b, m[i].content, strlen(m[i].content));
        }
        weft_sb_puts(b, "<|eot_id|>");
    }
    if (add_assistant)
        weft_sb_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* One "[INST] ... [/INST]" turn; `body` is the <<SYS>> blocks + user text,
 * stripped as a whole as the template strips `content`. */
static void llama2_user_turn(struct weft_strbuf *b, bool first, const struct weft_strbuf *body)
{
    if (!first)
        weft_sb_puts(b, "<s>");
    weft_sb_puts(b, "[INST] ");
    sb_put_trimmed(b, body->p ? body->p : "", body->len);
    weft_sb_puts(b, " [/INST]");
}

static void render_llama2(struct weft_strbuf *b, const struct weft_chat_msg *m, size_t n)
{
    struct weft_strbuf turn = { 0 };   /* pending <<SYS>> blocks, then the user text */
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role, *content = m[i].content;
        if (strcmp(role, "system") == 0) {
            weft_sb_puts(&turn, "<<SYS>>\n");
            weft_sb_puts(&turn, content);
            weft_sb_puts(&turn, "\n<</SYS>>\n\n");
        } else if (strcmp(role, "user") == 0) {
            weft_sb_puts(&turn, content);
            llama2_user_turn(b, first, &turn);
            turn.len = 0;
            first = false;
        } else {   /* assistant */
            weft_sb_puts(b, " ");
            sb_put_trimmed(b, content, strlen(content));
            weft_sb_puts(b, " </s>");
            first = false;
        }
    }
    if (turn.len > 0)   /* trailing system message(s) with no user after them */
        llama2_user_turn(b, first, &turn);
    if (turn.oom)
        b->oom = true;
    free(turn.p);
}

weft_status weft_chat_render(enum weft_chat_style style, const struct weft_chat_msg *msgs,
                             size_t n, bool add_assistant, char **out)
{
    return weft_chat_render_tools(style, msgs, n, NULL, 0, add_assistant, out);
}

weft_status weft_chat_render_tools(enum weft_chat_style style, const struct weft_chat_msg *msgs, size_t n,
                                   const char *const *tool_defs, size_t n_tools, bool add_assistant, char **out)
{
    if (!out)
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: out is NULL");
    *out = NULL;
    if (n > 0 && !msgs)
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: msgs is NULL with n = %zu", n);
    if (n_tools > 0 && !tool_defs)
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: tool_defs is NULL with n_tools = %zu", n_tools);
    for (size_t i = 0; i < n_tools; i++)
        if (!tool_defs[i])
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: tool definition %zu is NULL", i);
    bool any_tool = n_tools > 0;
    for (size_t i = 0; i < n; i++) {
        const struct weft_chat_msg *m = &msgs[i];
        const char *r = m->role;
        if (!r)
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu has no role", i);
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 &&
            strcmp(r, "tool") != 0)
            return weft_error(WEFT_ERR_INVALID_ARG,
                              "chat: message %zu has unknown role '%.64s' (system, user, assistant, tool)", i, r);
        if (m->n_tool_calls && strcmp(r, "assistant") != 0)
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu (%s) has tool calls: only assistant "
                              "messages do", i, r);
        if (m->n_tool_calls && !m->tool_calls)
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu has n_tool_calls but no tool_calls", i);
        for (size_t k = 0; k < m->n_tool_calls; k++)
            if (!m->tool_calls[k].name || !m->tool_calls[k].arguments)
                return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu's tool call %zu needs a name and "
                                  "arguments", i, k);
        if (!m->content && !m->n_tool_calls)
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu has no content", i);
        any_tool = any_tool || m->n_tool_calls || strcmp(r, "tool") == 0;
    }
    if (any_tool && style == WEFT_CHAT_LLAMA2)
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: the llama2 template has no tool-call format "
                          "(tools, tool calls and tool results need a chatml or llama3 template)");

    struct weft_strbuf b = { 0 };
    weft_sb_puts(&b, "");   /* an empty conversation still yields "" */
    switch (style) {
    case WEFT_CHAT_CHATML: render_chatml(&b, msgs, n, tool_defs, n_tools, add_assistant); break;
    case WEFT_CHAT_LLAMA3: render_llama3(&b, msgs, n, tool_defs, n_tools, add_assistant); break;
    case WEFT_CHAT_LLAMA2: render_llama2(&b, msgs, n); break;
    default:
        free(b.p);
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: unknown style %d", (int)style);
    }
    if (b.oom) {
        free(b.p);
        return weft_error(WEFT_ERR_NOMEM, "chat: out of memory rendering %zu messages", n);
    }
    *out = b.p;
    return WEFT_OK;
}
