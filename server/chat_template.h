/* An instance's chat template: the model's own (its GGUF's
 * tokenizer.chat_template, and .tool_use for requests with tools), or
 * --chat-template FILE, or, for a model with neither whose vocabulary has
 * ChatML's tokens, Hugging Face's default ChatML template; compiled once at
 * start-up with core/jinja (a template weft cannot run is refused there, the
 * construct named) and rendered for POST /apply-template. */
#ifndef WEFT_SERVER_CHAT_TEMPLATE_H
#define WEFT_SERVER_CHAT_TEMPLATE_H

#include <jansson.h>

#include "core/jinja.h"
#include "server/chat_format.h"
#include "server/params.h"

struct weft_gguf;
struct weft_tokenizer;

struct chat_template {
    struct weft_jinja *t, *tools;  /* t NULL: none (source "none") */
    char source[16];               /* "gguf", "file", "chatml" (built in), "none" */
    char bos[64], eos[64];         /* the vocabulary's, as the template's bos_token / eos_token */
    struct chat_format fmt;        /* its call and reasoning formats, what it renders itself */
    int32_t markers[16];           /* the format's markers that are control tokens of the vocabulary:
                                      replies show them (as llama-server's preserved tokens) */
    uint32_t n_markers;
};

weft_status weft_chat_template_load(struct chat_template *ct, const struct weft_gguf *g,
                                    const struct weft_tokenizer *tok, const char *path);
void weft_chat_template_free(struct chat_template *ct);

/* What template t renders itself (f's native_*, system_role, ...): found
 * by rendering probe conversations (server/chat_format.h). */
void weft_chat_format_probe(struct chat_format *f, const struct weft_jinja *t);

/* One line for logs and /v1/models: the source, the call format and
 * whether the template writes calls itself, the reasoning markers. */
void weft_chat_template_describe(const struct chat_template *ct, char *out, size_t n);

/* The prompt text of chat request p: its messages (with what the template
 * does not render written in, server/chat_format.h), the tools it offers,
 * chat_template_kwargs, add_generation_prompt; continue_final_message cuts
 * the text after the last message's content. *in_think (may be NULL): the
 * prompt leaves the model inside a reasoning block. *out malloc'd. A model
 * without a template: WEFT_ERR_INVALID_ARG naming --chat-template. */
weft_status weft_chat_template_render(const struct chat_template *ct, const struct gen_params *p, char **out,
                                      size_t *n, bool *in_think, char *msg, size_t msg_cap);

/* Render for a request body (llama-server's /apply-template and the chat
 * request's fields, read as /v1/chat/completions reads them): the text
 * weft_chat_template_render gives for them. *out malloc'd. On failure msg
 * says why (a bad body, the template's raise_exception text, ...). */
weft_status weft_chat_template_apply(const struct chat_template *ct, const json_t *body, char **out, size_t *n,
                                     char *msg, size_t msg_cap);

/* The template rendered with the body's variables as given, as Hugging
 * Face's apply_chat_template renders them (`weft template`: messages,
 * tools and chat_template_kwargs passed through, arguments as the client
 * wrote them, nothing written in by weft; add_generation_prompt default
 * true). */
weft_status weft_chat_template_apply_raw(const struct chat_template *ct, const json_t *body, char **out, size_t *n,
                                         char *msg, size_t msg_cap);

#endif
