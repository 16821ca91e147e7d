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
 * turn. bos_text is the BOS piece for styles that spell it out in the text
 * (Llama-2/3), or NULL. *out is malloc'd (caller frees); NULL on failure.
 * Fails with WEFT_ERR_INVALID_ARG on an unknown role. */
weft_status weft_chat_render(enum weft_chat_style style, const struct weft_chat_msg *msgs,
                             size_t n, bool add_assistant, char **out);

#endif
