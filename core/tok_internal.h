/* Private state shared by core/tokenizer.c (loading, vocab, special tokens,
 * detokenizer), core/tok_spm.c and core/tok_bpe.c. Not a public header. */
#ifndef WEFT_TOK_INTERNAL_H
#define WEFT_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

enum tok_kind { TOK_SPM, TOK_BPE };

/* tokenizer.ggml.token_type values */
enum tok_type {
    TOK_TYPE_NORMAL = 1, TOK_TYPE_UNKNOWN = 2, TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4, TOK_TYPE_UNUSED = 5, TOK_TYPE_BYTE = 6,
};

/* BPE pre-tokenizers: each is a fixed sequence of split stages. */
enum tok_pre {
    TOK_PRE_DEFAULT, TOK_PRE_GPT2, TOK_PRE_LLAMA3, TOK_PRE_SMOLLM, TOK_PRE_QWEN2, TOK_PRE_QWEN35,
    TOK_PRE_GPT4O, TOK_PRE_TEKKEN, TOK_PRE_DEEPSEEK3, TOK_PRE_FALCON, TOK_PRE_KIMI_K2,
};

struct tok_merge {      /* one slot of the merge hash: (left, right) -> rank, result */
    int32_t left, right; /* token ids; left == -1 marks an empty slot */
    int32_t rank, result; /* result: id of left+right, -1 if not a token */
};

struct weft_tokenizer {
    enum tok_kind kind;
    enum tok_pre pre;
    int32_t n_vocab;

    char *text;          /* all pieces, each NUL-terminated */
    size_t *off;         /* [n_vocab] offset of piece i in text */
    uint32_t *len;       /* [n_vocab] byte length of piece i */
    char *dec;           /* decoded bytes of every piece ("▁" -> ' ', <0xXX>, byte map) */
    size_t *dec_off;     /* [n_vocab + 1] */
    float *scores;       /* [n_vocab] */
    uint8_t *type;       /* [n_vocab] enum tok_type */
    uint8_t *eog;        /* [n_vocab] 1 if the token ends generation */

    int32_t *hash;       /* open addressing piece -> id, -1 empty */
    uint32_t hash_mask;

    struct tok_merge *merges; /* open addressing on (left, right) */
    uint32_t merge_mask;

    int32_t byte_tok[256]; /* token for a raw byte (<0xXX> or the GPT-2 mapped char), -1 if none */

    int32_t *special;    /* ids matched in text (control/user-defined/unknown), longest first */
    int32_t n_special;

    int32_t bos, eos, unk, eot, eom, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
};

struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
weft_status weft_tok_ids_push(struct tok_ids *o, int32_t id);

int32_t weft_tok_lookup(const struct weft_tokenizer *t, const char *s, size_t len);
const struct tok_merge *weft_tok_merge_find(const struct weft_tokenizer *t, int32_t left, int32_t right);

/* GPT-2 byte <-> code point map (bytes_to_unicode). */
uint32_t weft_tok_byte_to_cp(unsigned char b);
int weft_tok_cp_to_byte(uint32_t cp); /* -1 if cp is not in the map */

/* Candidate merge of adjacent symbols `left`,`right` (size = their bytes when
 * queued, to spot stale entries). Popped highest key first, then leftmost:
 * SentencePiece uses the merged piece's score, BPE the negated merge rank. */
struct tok_bigram {
    float key;
    int32_t left, right;
    uint32_t size;
};
struct tok_heap {
    struct tok_bigram *v;
    size_t n, cap;
};
/* WEFT_ERR_NOMEM when growing fails (h unchanged). */
weft_status weft_tok_heap_push(struct tok_heap *h, struct tok_bigram b);
/* Requires h->n > 0. */
struct tok_bigram weft_tok_heap_pop(struct tok_heap *h);

/* Tokenize one raw-text fragment (no special tokens inside) and append ids. */
weft_status weft_tok_spm_encode(const struct weft_tokenizer *t, const char *text, size_t len,
                           bool add_prefix, struct tok_ids *out);
weft_status weft_tok_bpe_encode(const struct weft_tokenizer *t, const char *text, size_t len,
                           struct tok_ids *out);

#endif
