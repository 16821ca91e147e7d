/* Chat templates: messages -> prompt text.
 *
 * weft does not run Jinja. It recognises the template family from the
 * GGUF's tokenizer.chat_template text (ChatML "<|im_start|>", Llama-3
 * "<|start_header_id|>", Llama-2 "[INST]", ...) and renders that family
 * itself. Unknown or absent template -> ChatML. */
#ifndef WEFT_CHAT_H
#define WEFT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

enum weft_chat_style {
    WEFT_CHAT_CHATML,
    WEFT_CHAT_LLAMA2,
    WEFT_CHAT_LLAMA3,
};

struct weft_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
};

/* Family of a template text (NULL -> ChatML). */
enum weft_chat_style weft_chat_detect(const char *tmpl);
const char *weft_chat_style_name(enum weft_chat_style s);

/* Render msgs[0..n) and, when add_assistant, the opening of the assistant's
 * turn (Llama-2 has none: its user turn already ends in " [/INST]"). The
 * leading BOS is never in the text (the tokenizer adds it); Llama-2 spells the
 * BOS of each later turn as "<s>". Content is trimmed where the real template
 * trims it (Llama-3 `| trim`, Llama-2 `.strip()`, ASCII whitespace only).
 * Llama-2 folds system messages into the next user turn as <<SYS>> blocks.
 * *out is malloc'd (caller frees); NULL on failure. Fails with
 * WEFT_ERR_INVALID_ARG on an unknown role or NULL role/content. */
weft_status weft_chat_render(enum weft_chat_style style, const struct weft_chat_msg *msgs,
                             size_t n, bool add_assistant, char **out);

/* The system prompt the template injects when the first message is not a
 * system message (SmolLM2-Instruct's "You are a helpful AI assistant named
 * SmolLM, trained by Hugging Face"), or NULL when the template text has none.
 * Static string. weft_chat_render does not insert it; the caller prepends it
 * as a system message when msgs[0] is not one (the template injects it only
 * when there is at least one message). */
const char *weft_chat_default_system(const char *tmpl);

#endif
