/* Chat templates: the three families weft renders itself, each written to
 * reproduce its reference Jinja template's output exactly (minus the leading
 * BOS, which the tokenizer adds):
 *   ChatML   (Qwen, SmolLM2, ...)  "<|im_start|>{role}\n{content}<|im_end|>\n"
 *   Llama-3  "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>"
 *   Llama-2  "[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST] {asst} </s><s>[INST] ..."
 *            (meta-llama/Llama-2-*-chat-hf; contents .strip()'d) */
#include "core/chat.h"

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

/* ---- growable output string ---- */

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

/* Jinja `trim` / Python str.strip(), restricted to ASCII whitespace
 * (Python's isspace also counts \x1c-\x1f). */
static bool is_py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void sb_put_trimmed(struct sbuf *b, const char *s, size_t n)
{
    while (n > 0 && is_py_space((unsigned char)s[0])) {
        s++;
        n--;
    }
    while (n > 0 && is_py_space((unsigned char)s[n - 1]))
        n--;
    sb_putn(b, s, n);
}

/* ---- renderers ---- */

static void render_chatml(struct sbuf *b, const struct weft_chat_msg *m, size_t n, bool add_assistant)
{
    for (size_t i = 0; i < n; i++) {
        sb_puts(b, "<|im_start|>");
        sb_puts(b, m[i].role);
        sb_puts(b, "\n");
        sb_puts(b, m[i].content);
        sb_puts(b, "<|im_end|>\n");
    }
    if (add_assistant)
        sb_puts(b, "<|im_start|>assistant\n");
}

static void render_llama3(struct sbuf *b, const struct weft_chat_msg *m, size_t n, bool add_assistant)
{
    for (size_t i = 0; i < n; i++) {
        sb_puts(b, "<|start_header_id|>");
        sb_puts(b, m[i].role);
        sb_puts(b, "<|end_header_id|>\n\n");
        sb_put_trimmed(b, m[i].content, strlen(m[i].content));
        sb_puts(b, "<|eot_id|>");
    }
    if (add_assistant)
        sb_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* One "[INST] ... [/INST]" turn; `body` is the <<SYS>> blocks + user text,
 * stripped as a whole as the template strips `content`. */
static void llama2_user_turn(struct sbuf *b, bool first, const struct sbuf *body)
{
    if (!first)
        sb_puts(b, "<s>");
    sb_puts(b, "[INST] ");
    sb_put_trimmed(b, body->p ? body->p : "", body->len);
    sb_puts(b, " [/INST]");
}

static void render_llama2(struct sbuf *b, const struct weft_chat_msg *m, size_t n)
{
    struct sbuf turn = { 0 };   /* pending <<SYS>> blocks, then the user text */
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role, *content = m[i].content;
        if (strcmp(role, "system") == 0) {
            sb_puts(&turn, "<<SYS>>\n");
            sb_puts(&turn, content);
            sb_puts(&turn, "\n<</SYS>>\n\n");
        } else if (strcmp(role, "user") == 0) {
            sb_puts(&turn, content);
            llama2_user_turn(b, first, &turn);
            turn.len = 0;
            first = false;
        } else {   /* assistant */
            sb_puts(b, " ");
            sb_put_trimmed(b, content, strlen(content));
            sb_puts(b, " </s>");
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
    if (!out)
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: out is NULL");
    *out = NULL;
    if (n > 0 && !msgs)
        return weft_error(WEFT_ERR_INVALID_ARG, "chat: msgs is NULL with n = %zu", n);
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r)
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu has no role", i);
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0)
            return weft_error(WEFT_ERR_INVALID_ARG,
                              "chat: message %zu has unknown role '%.64s' (system, user, assistant)", i, r);
        if (!msgs[i].content)
            return weft_error(WEFT_ERR_INVALID_ARG, "chat: message %zu has no content", i);
    }

    struct sbuf b = { 0 };
    sb_puts(&b, "");   /* an empty conversation still yields "" */
    switch (style) {
    case WEFT_CHAT_CHATML: render_chatml(&b, msgs, n, add_assistant); break;
    case WEFT_CHAT_LLAMA3: render_llama3(&b, msgs, n, add_assistant); break;
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
