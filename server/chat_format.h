/* What a model's chat template implies beyond its text: how the model
 * writes tool calls and reasoning, and what the template can render itself.
 *
 * Read once from the template at start-up (server/chat_template.c): the
 * call format from the markers the template writes (Hermes <tool_call>,
 * Llama 3.x JSON, Mistral [TOOL_CALLS], gpt-oss harmony channels, DeepSeek
 * tool blocks), the reasoning markers (<think>, [THINK], harmony's analysis
 * channel), and, by rendering probe conversations (as Hugging Face's
 * templates are probed by llama.cpp's minja), whether the template renders
 * tools, assistant tool calls, tool results and system messages. What it
 * does not render weft writes into the messages the template does render
 * (tools in the system message, calls in the assistant's text, results as
 * user turns, Hermes style), so that every template can be offered tools.
 *
 * Then, per request: the messages as the template's variables, and the
 * reply read back into reasoning_content, content and complete tool calls,
 * finished or (streaming) as far as it is known. */
#ifndef WEFT_SERVER_CHAT_FORMAT_H
#define WEFT_SERVER_CHAT_FORMAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/structured.h"

enum chat_calls {
    CHAT_CALLS_HERMES = 0,   /* <tool_call>{"name", "arguments"}</tool_call> (and Qwen3-Coder's <function=...>) */
    CHAT_CALLS_LLAMA3,       /* {"name": ..., "parameters": {...}} as the whole reply (<|python_tag|> allowed) */
    CHAT_CALLS_MISTRAL,      /* [TOOL_CALLS][{"name", "arguments"}, ...] */
    CHAT_CALLS_MISTRAL_ARGS, /* [TOOL_CALLS]name[ARGS]{...} (Mistral Small 3.2, Devstral, Ministral 3) */
    CHAT_CALLS_HARMONY,      /* gpt-oss: <|channel|>commentary to=functions.NAME ... <|message|>{...} */
    CHAT_CALLS_DEEPSEEK,     /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>... */
};

enum chat_think { CHAT_THINK_NONE = 0, CHAT_THINK_TAGS, CHAT_THINK_HARMONY };

struct chat_format {
    enum chat_calls calls;
    bool native_tools;        /* the template renders 'tools' itself */
    bool native_calls;        /* ... an assistant message's tool_calls */
    bool native_results;      /* ... a tool message */
    bool calls_need_content;  /* ... only with content "" (not null) beside tool_calls */
    bool string_args;         /* ... with a call's arguments as JSON text (not an object) */
    bool system_role;         /* ... a system message (false: folded into the first user message) */
    enum chat_think think;
    char think_open[16], think_close[16];   /* CHAT_THINK_TAGS: "<think>" "</think>", "[THINK]" "[/THINK]" */
};

const char *weft_chat_calls_name(enum chat_calls c);

/* The call and reasoning formats the template source names (the
 * capabilities stay false: weft_chat_format_probe sets them). */
void weft_chat_format_detect(struct chat_format *f, const char *src, size_t n);

/* The request's messages as a template's 'messages' (OpenAI's fields, a
 * call's arguments as an object unless f->string_args, reasoning as
 * reasoning_content (and harmony's 'thinking')), with what the template
 * does not render written in Hermes style; tools (tool_defs' JSON texts,
 * n_tools 0: none) into *tools_out when the template renders them itself
 * (NULL otherwise). NULL when out of memory. */
json_t *weft_chat_format_messages(const struct chat_format *f, const struct weft_chat_msg *msgs, size_t n,
                                  char *const *tool_defs, uint32_t n_tools, json_t **tools_out);

/* A reply, read back: reasoning_content and content as ranges of the text,
 * and the complete tool calls (malloc'd: free with weft_tool_calls_free). */
struct chat_reply {
    size_t r_from, r_len;       /* reasoning_content: text[r_from..+r_len) */
    size_t c_from, c_len;       /* content */
    struct tool_call_out *calls;
    uint32_t n_calls;
    bool cut_call;              /* a call began and did not end (dropped) */
    bool short_ids;             /* call ids of 9 letters and digits (Mistral's templates want them) */
};

/* Read text[0..len): in_think, the prompt opened a reasoning block the
 * reply continues (DeepSeek-R1's "<think>\n" generation prompt); s, the
 * request's tools (calls are read only when tools are offered). partial:
 * the text may still grow (a stream): the ranges stop before anything that
 * may still turn out to be a tag or a call, and no calls are read; each
 * range only grows as the text does, so what a stream sent stays a prefix.
 * A finished reply whose text after its calls is not a call (or a call to
 * a tool not offered, or arguments not a JSON object) has no calls: all of
 * it is content. */
void weft_chat_reply_parse(const struct chat_format *f, const struct gen_structured *s, bool in_think,
                           const char *text, size_t len, bool partial, struct chat_reply *out);
void weft_chat_reply_free(struct chat_reply *r);

/* Whether a rendered prompt leaves the model inside a reasoning block
 * (its text, trailing whitespace aside, ends with the opening tag). */
bool weft_chat_format_prompt_thinks(const struct chat_format *f, const char *prompt, size_t n);

/* The frame a forced call is written in (the grammar of tool_choice
 * "required" or a named function): begin, then per call open + NAME + mid +
 * ARGS + after, calls separated by sep, then end. many: the format has a
 * way to write several. All static strings. */
struct chat_call_frame {
    const char *begin, *open, *mid, *after, *sep, *end;
    bool many;
};
void weft_chat_call_frame(enum chat_calls c, struct chat_call_frame *fr);

#endif
