/* Structured output and tool calling for the OpenAI endpoints:
 * response_format (text, json_object, json_schema), tools, tool_choice,
 * parallel_tool_calls, tool calls and tool results in the history — parsed
 * (pure, like server/params.h), turned into a grammar (core/grammar.h's
 * text) that constrains generation, and tool calls read back out of the
 * generated text.
 *
 * What is enforced: json_object / json_schema always (the grammar);
 * tool_choice "required" or a named function: the reply is one call (or,
 * with parallel_tool_calls, one or more) in the chat family's call frame
 * (core/chat.h) whose arguments match the function's parameters schema.
 * tool_choice "auto" leaves the model free and reads back the calls it
 * wrote; "none" offers no tools. Legacy "functions"/"function_call" are
 * refused (400 naming them): nothing is accepted and ignored. */
#ifndef WEFT_SERVER_STRUCTURED_H
#define WEFT_SERVER_STRUCTURED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/chat.h"

#define WEFT_MAX_TOOLS 128
#define WEFT_MAX_PARALLEL_CALLS 8  /* calls in one constrained reply */

enum gen_format { GEN_FORMAT_TEXT = 0, GEN_FORMAT_JSON_OBJECT, GEN_FORMAT_JSON_SCHEMA, GEN_FORMAT_GRAMMAR };
enum gen_tool_choice { GEN_TOOLS_OFF = 0, GEN_TOOLS_AUTO, GEN_TOOLS_REQUIRED, GEN_TOOLS_NAMED };

struct gen_structured {
    enum gen_format format;
    json_t *schema;                 /* json_schema's "schema" (borrowed from the request's JSON) */
    char *grammar;                  /* GEN_FORMAT_GRAMMAR: the grammar text (malloc'd): vLLM's guided_grammar,
                                       llama.cpp's grammar, guided_choice's alternatives */
    const char *format_param;       /* the field that asked for the format ("response_format", "guided_json", ...) */
    /* tools (chat only) */
    enum gen_tool_choice tool_choice;  /* OFF: no tools, or "none" */
    const char *tool_choice_name;   /* NAMED: the function (borrowed) */
    bool parallel;                  /* parallel_tool_calls (default true) */
    uint32_t n_tools;
    char **tool_defs;               /* malloc'd: each tool's JSON text, as the prompt shows it */
    const char **tool_names;        /* borrowed */
    json_t **tool_params;           /* borrowed: each "parameters" schema, NULL when absent */
};

/* Parse response_format, tools, tool_choice, parallel_tool_calls from the
 * request body (chat: tools allowed). false with *param and msg filled on
 * a bad or unsupported value. */
bool weft_structured_parse(json_t *body, bool chat, struct gen_structured *out, const char **param, char *msg,
                      size_t msg_size);
void weft_structured_free(struct gen_structured *s);

/* A history message's tool calls (assistant) and tool_call_id (tool),
 * checked; *calls malloc'd (strings borrowed from m). false with msg on a
 * malformed one. */
bool weft_structured_message_calls(json_t *m, size_t index, struct weft_chat_tool_call **calls, size_t *n_calls,
                              const char **tool_call_id, char *msg, size_t msg_size);

/* The grammar text that constrains a request's output, malloc'd in *text,
 * or NULL when it is unconstrained. false with *param and msg filled when a
 * schema uses what the grammar cannot enforce (the keyword named), or when
 * the model's call frame (server/chat_format.h) is wanted. */
struct chat_call_frame;
bool weft_structured_grammar(const struct gen_structured *s, const struct chat_call_frame *fr, char **text,
                        const char **param, char *msg, size_t msg_size);

/* Tool calls read back out of a reply. */
struct tool_call_out {
    char id[32];                    /* "call_" + 24 characters, fresh */
    char *name, *arguments;         /* malloc'd; arguments is compact JSON text */
};

void weft_tool_calls_free(struct tool_call_out *calls, uint32_t n);

/* A fresh call id: "call_" and 24 random letters and digits. */
void weft_tool_call_fresh_id(char *out, size_t n);
/* A fresh id: prefix and n_chars (at most 64) random letters and digits
 * (unique, not secret: without entropy yet, from the time and an address). */
void weft_random_id(char *out, size_t n, const char *prefix, size_t n_chars);

#endif
