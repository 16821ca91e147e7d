/* A request's prompt as token ids: chat rendering and tokenization, once,
 * for `weft serve` (which computes it) and `weft router` (which must hash
 * exactly the tokens the instance will hold, so it renders the same way).
 * Pure: no engine, no sockets; safe on any thread. */
#ifndef WEFT_SERVER_PROMPT_H
#define WEFT_SERVER_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat.h"
#include "base/status.h"
#include "core/tokenizer.h"
#include "server/params.h"

struct weft_gguf;

/* How a model's requests become tokens: its tokenizer, its chat family and
 * (when the template injects one and the server is asked to) the default
 * system prompt. */
struct prompt_rules {
    const struct weft_tokenizer *tok;
    enum weft_chat_style chat_style;
    const char *default_system;    /* NULL: none */
};

/* The rules a GGUF's metadata implies (template_system: inject the
 * template's default system prompt, as `weft serve` does unless told not to). */
void weft_prompt_rules_from_gguf(struct prompt_rules *r, const struct weft_gguf *g, const struct weft_tokenizer *tok,
                            bool template_system);

/* p's prompt (text, ids or messages) as token ids: *ids malloc'd (caller
 * frees), BOS added as the tokenizer says. Ids outside the vocabulary are
 * WEFT_ERR_INVALID_ARG with msg saying which. msg (may be NULL) gets the
 * reason on failure. */
weft_status weft_prompt_tokens(const struct prompt_rules *r, const struct gen_params *p, int32_t **ids, size_t *n,
                          char *msg, size_t msg_size);

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
