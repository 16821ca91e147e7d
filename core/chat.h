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

#include "base/status.h"

enum weft_chat_style {
    WEFT_CHAT_CHATML,
    WEFT_CHAT_LLAMA2,
    WEFT_CHAT_LLAMA3,
};

/* One function call an assistant message made (OpenAI's tool_calls[i]). */
struct weft_chat_tool_call {
    const char *id;         /* may be NULL (no template here renders it) */
    const char *name;
    const char *arguments;  /* the arguments object as JSON text */
};

struct weft_chat_msg {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content; /* NULL only for an assistant message that has tool calls */
    const struct weft_chat_tool_call *tool_calls;  /* assistant only */
    size_t n_tool_calls;
    const char *tool_call_id;  /* role "tool": the call it answers (not rendered) */
    const char *reasoning;     /* assistant: its reasoning_content (templates that render it), or NULL */
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

/* The same with function tools offered to the model, each tool_defs[i] the
 * JSON text of one {"type":"function","function":{...}} object, rendered
 * the way the family's own template does:
 *   ChatML (Qwen2.5 / Hermes): a "# Tools" section with the definitions in
 *     <tools></tools> appended to the system message (or as the system
 *     message when there is none); calls in the assistant's turn as
 *     "<tool_call>\n{"name": N, "arguments": A}\n</tool_call>"; consecutive
 *     tool results as one user turn of <tool_response></tool_response>.
 *   Llama-3 (3.1's JSON tool calling, tools in the first user message):
 *     the instructions and definitions before that message's text; a call
 *     is the turn {"name": N, "parameters": A}; results are "ipython" turns.
 *   Llama-2 has no tool format: WEFT_ERR_INVALID_ARG, naming it, when
 *     tools, tool calls or tool results are given.
 * n_tools 0 with no tool messages renders what weft_chat_render does. */
weft_status weft_chat_render_tools(enum weft_chat_style style, const struct weft_chat_msg *msgs, size_t n,
                                   const char *const *tool_defs, size_t n_tools, bool add_assistant, char **out);

/* How a call is written in the assistant's turn (rendered in history, and
 * generated under tool_choice "required"): open_name, the function's name,
 * name_to_args, the arguments' JSON, after. ChatML: `<tool_call>\n{"name": "`,
 * `", "arguments": `, `}\n</tool_call>`; Llama-3: `{"name": "`,
 * `", "parameters": `, `}`. Static strings; all NULL for Llama-2. */
void weft_chat_tool_call_frame(enum weft_chat_style style, const char **open_name, const char **name_to_args,
                               const char **after);

/* The system prompt the template injects when the first message is not a
 * system message (SmolLM2-Instruct's "You are a helpful AI assistant named
 * SmolLM, trained by Hugging Face"), or NULL when the template text has none.
 * Static string. weft_chat_render does not insert it; the caller prepends it
 * as a system message when msgs[0] is not one (the template injects it only
 * when there is at least one message). */
const char *weft_chat_default_system(const char *tmpl);

#endif
