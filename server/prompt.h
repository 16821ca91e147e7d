/* A request's prompt as token ids: chat rendering and tokenization, once,
 * for `weft serve` (which computes it) and `weft router` (which must hash
 * exactly the tokens the instance will hold, so it renders the same way).
 * Pure: no engine, no sockets; safe on any thread. */
#ifndef WEFT_SERVER_PROMPT_H
#define WEFT_SERVER_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/tokenizer.h"
#include "server/params.h"

struct weft_gguf;

struct chat_template;

/* How a model's requests become tokens: its tokenizer and its chat
 * template (server/chat_template.h; chats are refused without one). */
struct prompt_rules {
    const struct weft_tokenizer *tok;
    const struct chat_template *tmpl;
    /* fill-in-the-middle tokens (prefix, suffix, middle), -1 when the
     * vocabulary has none (weft_prompt_rules_fim) */
    int32_t fim_pre, fim_suf, fim_mid;
};

/* Find the vocabulary's fill-in-the-middle tokens: the GGUF's
 * tokenizer.ggml.fim_{pre,suf,mid}_token_id, else the usual spellings
 * (<|fim_prefix|>, <fim_prefix>, DeepSeek's <｜fim▁begin｜>, CodeLlama's <PRE>). */
void weft_prompt_rules_fim(struct prompt_rules *r, const struct weft_gguf *g);

/* p's prompt (text, ids or messages) as token ids: *ids malloc'd (caller
 * frees), BOS added as the tokenizer says (a chat's rendered text that
 * begins with the BOS already has it). Ids outside the vocabulary are
 * WEFT_ERR_INVALID_ARG with msg saying which. msg (may be NULL) gets the
 * reason on failure. *in_think (may be NULL): a chat prompt that leaves the
 * model inside a reasoning block. */
weft_status weft_prompt_tokens(const struct prompt_rules *r, const struct gen_params *p, int32_t **ids, size_t *n,
                               bool *in_think, char *msg, size_t msg_size);

/* The tokens an embeddings request's 'input' costs, counted as weft serve
 * counts them (each string tokenized with BOS as the tokenizer says, token
 * ids counted as given): for a router charging a tenant before it forwards.
 * false with msg for an 'input' of a shape /v1/embeddings refuses (not a
 * string, an array of strings, of ids or of arrays of ids; empty). */
bool weft_prompt_embed_tokens(const struct prompt_rules *r, const json_t *input, uint64_t *n, char *msg,
                              size_t msg_size);

/* The chained 16-token block hashes of ids[0..n) (core/kv's, for the full
 * blocks only): out[0..n/16). Returns the count written (at most cap). */
uint32_t weft_prompt_block_hashes(const int32_t *ids, size_t n, uint64_t *out, uint32_t cap);

#endif
