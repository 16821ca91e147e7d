/* Constrained decoding: a grammar masks the sampler's candidates so that the
 * generated text matches it.
 *
 * Grammar text (GBNF-like, weft's own):
 *
 *   # comment to end of line
 *   root    ::= "{" ws members? "}"
 *   members ::= pair ("," ws pair)*
 *   ws      ::= [ \t\n]{0,20}
 *
 * A rule is `name ::= alternatives` and ends where the next `name ::=`
 * begins (rules may span lines); names are [a-zA-Z0-9_-]+ and the start rule
 * is `root`. Atoms: "literal", char class [...] / negated [^...] with ranges
 * a-z, a rule name, a group ( ... ). Escapes in literals and classes: \" \\
 * \n \r \t \/ \xHH \uHHHH \UHHHHHHHH, and in classes also \] \- \^ \[.
 * Juxtaposition is sequence, | separates alternatives, postfix * + ? {n}
 * {n,} {n,m} repeat. Semantics are over Unicode code points; the generated
 * text is UTF-8, a token may end inside a multi-byte character (the state
 * carries the partial character), and invalid UTF-8 (overlong forms,
 * surrogates, past U+10FFFF) never matches. Left recursion (including a
 * `*`/`+` over something that can match the empty string) is refused.
 *
 * Objects:
 *   weft_grammar        compiled grammar: immutable, reference counted
 *                       (atomic), shareable across threads and requests.
 *   weft_grammar_vocab  one per tokenizer: every token's bytes sorted into an
 *                       implicit trie, which tokens are special, and the mask
 *                       cache (masks keyed by grammar and exact parser state,
 *                       shared by every sequence; internally locked, so one
 *                       vocab may serve several threads).
 *   weft_grammar_state  one per sequence: the parser's stack set plus any
 *                       partial UTF-8 character. Not thread-safe; clone it to
 *                       fork a sequence.
 *
 * Tokens: a token's text is its decoded bytes (SentencePiece "▁" as a space,
 * <0xXX> as the byte, GPT-2 byte map undone), the space a SentencePiece
 * encoder puts in front of a text included. Control, unknown, unused and
 * user-defined tokens are never allowed, except the tokenizer's
 * end-of-generation tokens (weft_tokenizer_is_eog), which are allowed exactly
 * when the state is accepting. A token with no bytes is never allowed. */
#ifndef WEFT_GRAMMAR_H
#define WEFT_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/tokenizer.h"

struct weft_grammar;
struct weft_grammar_vocab;
struct weft_grammar_state;

/* Any JSON object at the root (RFC 8259 values inside), with whitespace runs
 * bounded so a model cannot loop forever on whitespace: up to 4 characters
 * of [ \t\n\r] before the object, one optional "\n" after it (so the text
 * is finished at the closing brace or the newline after it), up to 40 between
 * tokens inside; strings accept the JSON escapes and any valid UTF-8 except
 * control characters. For response_format json_object. */
extern const char weft_grammar_json_object[];

/* The most rules one grammar may have, generated ones included (a schema
 * of 30,000 properties makes about 150,000): past it parsing fails with
 * WEFT_ERR_INVALID_ARG naming the bound. */
#define WEFT_GRAMMAR_MAX_RULES 65536u

/* Compile text[0..len). On success *out holds one reference (release with
 * weft_grammar_unref). Fails with WEFT_ERR_FORMAT and a message
 * "grammar: LINE:COL: expected ..." on a syntax error, or naming the rule for
 * an undefined or duplicate rule or a missing `root` (text that is not a
 * grammar); with WEFT_ERR_INVALID_ARG naming the rule for a grammar whose
 * language is refused: a rule that can never end (each alternative needs
 * itself again), a left-recursive one, more than WEFT_GRAMMAR_MAX_RULES
 * rules. WEFT_ERR_NOMEM. *out is NULL on
 * failure. A grammar written by a converter (server/json_schema.c) is
 * always text of the first kind: its INVALID_ARG is the schema's fault. */
weft_status weft_grammar_parse(const char *text, size_t len, struct weft_grammar **out);
/* Take another reference; returns g (NULL stays NULL). */
struct weft_grammar *weft_grammar_ref(const struct weft_grammar *g);
/* Drop a reference; the last one frees the grammar. NULL is a no-op. */
void weft_grammar_unref(struct weft_grammar *g);
/* Number of rules after compilation (generated ones for groups and
 * repetitions included): for tests and diagnostics. */
uint32_t weft_grammar_n_rules(const struct weft_grammar *g);
/* Rule-name comparisons compiling g took: compiling is linear in the
 * grammar's size (names are looked up by hash), which a test pins. */
uint64_t weft_grammar_compile_compares(const struct weft_grammar *g);

/* Whole-text check, no tokenizer involved: text[0..len) is a complete match
 * of g. */
bool weft_grammar_match(const struct weft_grammar *g, const char *text, size_t len);

/* Build the index of t's vocabulary (t must outlive it). mask_cache_mib
 * bounds the mask cache (0 = 16 MiB); when full the cache is emptied and
 * starts again. *out is NULL on failure (WEFT_ERR_NOMEM). */
weft_status weft_grammar_vocab_create(const struct weft_tokenizer *t, uint32_t mask_cache_mib,
                                      struct weft_grammar_vocab **out);
void weft_grammar_vocab_free(struct weft_grammar_vocab *v);
int32_t weft_grammar_vocab_n(const struct weft_grammar_vocab *v);

struct weft_grammar_cache_stats {
    uint64_t lookups;   /* weft_grammar_mask calls */
    uint64_t hits;      /* answered from the cache */
    uint64_t entries;   /* masks held now */
};
void weft_grammar_vocab_stats(struct weft_grammar_vocab *v, struct weft_grammar_cache_stats *out);

/* A sequence at the start of g (takes its own reference to g; v must
 * outlive the state). v may be NULL for byte-level use only
 * (weft_grammar_advance_bytes, accepting, finished; no token is then
 * allowed). *out is NULL on failure (WEFT_ERR_NOMEM). */
weft_status weft_grammar_state_new(const struct weft_grammar *g, const struct weft_grammar_vocab *v,
                                   struct weft_grammar_state **out);
/* An independent copy of s. *out is NULL on failure. */
weft_status weft_grammar_state_clone(const struct weft_grammar_state *s, struct weft_grammar_state **out);
void weft_grammar_state_free(struct weft_grammar_state *s);

/* Token `id` may come next. */
bool weft_grammar_allowed(const struct weft_grammar_state *s, int32_t id);
/* Take token `id`. WEFT_ERR_INVALID_ARG (state unchanged) when it is not
 * allowed; WEFT_ERR_NOMEM (state unchanged). Taking an end-of-generation
 * token leaves the state as it was (it adds no text). */
weft_status weft_grammar_advance(struct weft_grammar_state *s, int32_t id);
/* Take raw bytes (tests, replay of text): WEFT_ERR_INVALID_ARG (state
 * unchanged) when the grammar rejects them. */
weft_status weft_grammar_advance_bytes(struct weft_grammar_state *s, const char *bytes, size_t n);

/* Every token allowed now, as a bit set: bit (id % 32) of mask[id / 32] is
 * set exactly when weft_grammar_allowed(s, id). mask has
 * weft_grammar_mask_words(v) words, all written. Answered from the vocab's
 * cache when this state (grammar + stack set + partial character) was seen
 * before. Fails with WEFT_ERR_NOMEM (mask contents then unspecified), or
 * WEFT_ERR_INVALID_ARG for a state made without a vocabulary. A miss walks
 * the vocabulary: about 0.1 ms where few tokens fit, about 12 ms inside a
 * JSON string (nearly all of SmolLM2's 49,152 fit) on one core. */
weft_status weft_grammar_mask(const struct weft_grammar_state *s, uint32_t *mask);
size_t weft_grammar_mask_words(const struct weft_grammar_vocab *v);

/* The text so far is a complete match (end of generation may come now). */
bool weft_grammar_accepting(const struct weft_grammar_state *s);
/* Accepting, and no further text can follow: generation is over. */
bool weft_grammar_finished(const struct weft_grammar_state *s);

#endif
