/* A chat's messages as weft's front ends hand them around: the roles and
 * contents a request gives, an assistant's tool calls and reasoning, a tool
 * result's call id. They are rendered by the model's own Jinja chat
 * template (server/chat_template.h, core/jinja.h); weft has no built-in
 * chat formats of its own. */
#ifndef WEFT_CHAT_H
#define WEFT_CHAT_H

#include <stddef.h>

/* One function call an assistant message made (OpenAI's tool_calls[i]). */
struct weft_chat_tool_call {
    const char *id;         /* may be NULL */
    const char *name;
    const char *arguments;  /* the arguments object as JSON text */
};

struct weft_chat_msg {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content; /* NULL only for an assistant message that has tool calls */
    const struct weft_chat_tool_call *tool_calls;  /* assistant only */
    size_t n_tool_calls;
    const char *tool_call_id;  /* role "tool": the call it answers */
    const char *reasoning;     /* assistant: its reasoning_content (templates that render it), or NULL */
};

#endif
