/* Tokenizers built from GGUF metadata.
 *
 * tokenizer.ggml.model = "llama": SentencePiece-style (scores, byte fallback
 * <0xXX>, a space prepended and spaces shown as U+2581).
 * tokenizer.ggml.model = "gpt2": byte-level BPE (merges, GPT-2 byte<->unicode
 * map) with the pre-tokenizer named by tokenizer.ggml.pre.
 * Special/control tokens (token_type CONTROL or USER_DEFINED) are matched in
 * the text only when parse_special is set. */
#ifndef WEFT_TOKENIZER_H
#define WEFT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf.h"
#include "base/status.h"

struct weft_tokenizer;

/* Build from the tokenizer.* keys of an open GGUF (copies what it needs, so g
 * may be closed afterwards). Fails with WEFT_ERR_FORMAT and a message on a
 * missing/inconsistent vocabulary, WEFT_ERR_UNSUPPORTED on an unknown model or
 * pre-tokenizer name. On failure *out is NULL. */
weft_status weft_tokenizer_load(const struct weft_gguf *g, struct weft_tokenizer **out);
void weft_tokenizer_free(struct weft_tokenizer *t);

int32_t weft_tokenizer_n_vocab(const struct weft_tokenizer *t);
int32_t weft_tokenizer_bos(const struct weft_tokenizer *t); /* -1 if none */
int32_t weft_tokenizer_eos(const struct weft_tokenizer *t); /* -1 if none */
bool weft_tokenizer_add_bos(const struct weft_tokenizer *t);
bool weft_tokenizer_add_eos(const struct weft_tokenizer *t);
/* True for tokens that end generation (eos, eot, <|im_end|>, <|eot_id|> ...). */
bool weft_tokenizer_is_eog(const struct weft_tokenizer *t, int32_t id);
bool weft_tokenizer_is_control(const struct weft_tokenizer *t, int32_t id);
/* Id of an exact vocab string, or -1. */
int32_t weft_tokenizer_find(const struct weft_tokenizer *t, const char *piece);
/* Raw vocab string of id (owned by t), or NULL if out of range. */
const char *weft_tokenizer_piece(const struct weft_tokenizer *t, int32_t id);

/* Tokenize text[0..len). add_special: prepend BOS / append EOS as the vocab
 * says. parse_special: recognise control-token strings inside the text.
 * *ids is malloc'd (caller frees) and *n_ids set; on failure *ids is NULL. */
weft_status weft_tokenize(const struct weft_tokenizer *t, const char *text, size_t len,
                          bool add_special, bool parse_special, int32_t **ids, size_t *n_ids);

/* Streaming detokenizer. Emits only whole UTF-8 characters: bytes of a
 * character split across tokens are held until complete; invalid sequences
 * come out as U+FFFD. Control tokens render as nothing unless
 * render_special. For SentencePiece vocabs the space added in front of the
 * first piece is dropped. Never fails on any id (out-of-range ids render as
 * U+FFFD). */
struct weft_detok {
    const struct weft_tokenizer *t;
    bool render_special;
    bool first;              /* nothing emitted yet; set false before decoding a
                                continuation (text after a prompt) to keep its
                                leading space */
    unsigned char pend[8];   /* bytes of an incomplete UTF-8 character */
    int n_pend;
    const int32_t *keep;     /* control tokens written as their text all the same (a chat
                                format's markers: Mistral's [TOOL_CALLS], harmony's
                                <|channel|>); borrowed, n_keep of them */
    uint32_t n_keep;
    char *buf;               /* output of the last push/flush */
    size_t len, cap;
};
void weft_detok_init(struct weft_detok *d, const struct weft_tokenizer *t, bool render_special);
void weft_detok_free(struct weft_detok *d);
/* Append the text of `id`; *out (owned by d, valid until the next call) gets
 * the newly complete text, *out_len its length (may be 0). Only fails with
 * WEFT_ERR_NOMEM. */
weft_status weft_detok_push(struct weft_detok *d, int32_t id, const char **out, size_t *out_len);
/* Emit any held incomplete bytes as U+FFFD and reset. */
weft_status weft_detok_flush(struct weft_detok *d, const char **out, size_t *out_len);

/* Whole-sequence convenience: malloc'd NUL-terminated string (caller frees). */
weft_status weft_detokenize(const struct weft_tokenizer *t, const int32_t *ids, size_t n,
                            bool render_special, char **out, size_t *out_len);

#endif
