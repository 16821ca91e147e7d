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

struct weft_gguf;
struct weft_tokenizer;

struct chat_template {
    struct weft_jinja *t, *tools;  /* t NULL: none (source "none") */
    char source[16];               /* "gguf", "file", "chatml" (built in), "none" */
    char bos[64], eos[64];         /* the vocabulary's, as the template's bos_token / eos_token */
};

weft_status weft_chat_template_load(struct chat_template *ct, const struct weft_gguf *g,
                                    const struct weft_tokenizer *tok, const char *path);
void weft_chat_template_free(struct chat_template *ct);

/* Render for a request body (llama-server's /apply-template and the chat
 * request's fields): messages, tools, chat_template_kwargs,
 * add_generation_prompt (default true). *out malloc'd. On failure msg says
 * why (a bad body, the template's raise_exception text, ...). */
weft_status weft_chat_template_apply(const struct chat_template *ct, const json_t *body, char **out, size_t *n,
                                     char *msg, size_t msg_cap);

#endif
