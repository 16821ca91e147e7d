/* SentencePiece-style ("llama") encoding, as llama.cpp's llm_tokenizer_spm:
 * spaces become U+2581, the text is split into UTF-8 characters, and the
 * adjacent pair whose concatenation is the vocab token with the highest score
 * is merged (ties: leftmost) until no pair is a token. Symbols that are not
 * tokens come out as <0xXX> byte tokens. A heap of candidate bigrams over a
 * linked list of symbols keeps it O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "core/tok_internal.h"
#include "base/unicode.h"

struct sym {
    uint32_t start, n; /* bytes of the symbol in the escaped text; n == 0: merged away */
    int32_t prev, next;
};


static weft_status try_bigram(const struct weft_tokenizer *t, const char *buf, const struct sym *s,
                              int32_t left, int32_t right, struct tok_heap *h)
{
    if (left < 0 || right < 0) return WEFT_OK;
    uint32_t size = s[left].n + s[right].n;
    int32_t id = weft_tok_lookup(t, buf + s[left].start, size);
    if (id < 0) return WEFT_OK;
    struct tok_bigram b = { t->scores[id], left, right, size };
    return weft_tok_heap_push(h, b);
}

static weft_status emit_bytes(const struct weft_tokenizer *t, const unsigned char *p, uint32_t n,
                              struct tok_ids *out)
{
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[p[i]] >= 0 ? t->byte_tok[p[i]] : t->unk;
        if (id < 0) continue; /* no byte token and no <unk>: nothing can stand for it */
        weft_status st = weft_tok_ids_push(out, id);
        if (st) return st;
    }
    return WEFT_OK;
}

weft_status weft_tok_spm_encode(const struct weft_tokenizer *t, const char *text, size_t len,
                           bool add_prefix, struct tok_ids *out)
{
    static const char space[3] = { '\xe2', '\x96', '\x81' }; /* U+2581 */
    if (len > (UINT32_MAX - 3) / 3)
        return weft_error(WEFT_ERR_INVALID_ARG, "tokenizer: text too long (%zu bytes)", len);
    weft_status st = WEFT_OK;
    /* escaped text: [U+2581] + text with every ' ' replaced by U+2581 */
    char *buf = malloc(3 * len + 3 + 1);
    struct sym *s = NULL;
    struct tok_heap h = { 0 };
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory");
    size_t n = 0;
    if (add_prefix) { memcpy(buf, space, 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(buf + n, space, 3); n += 3; }
        else buf[n++] = text[i];
    }
    if (n == 0) goto done;

    s = malloc(n * sizeof *s);
    if (!s) { st = weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    int32_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        /* a bad byte is a one-byte character of its own (byte fallback) */
        int k = weft_utf8_char_len((const unsigned char *)buf + i, n - i);
        s[n_sym] = (struct sym){ (uint32_t)i, (uint32_t)k, n_sym - 1, -1 };
        if (n_sym > 0) s[n_sym - 1].next = n_sym;
        n_sym++;
        i += (size_t)k;
    }
    for (int32_t i = 1; i < n_sym; i++)
        if ((st = try_bigram(t, buf, s, i - 1, i, &h))) goto done;

    while (h.n) {
        struct tok_bigram b = weft_tok_heap_pop(&h);
        struct sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->next != b.right || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        if ((st = try_bigram(t, buf, s, l->prev, b.left, &h))) goto done;
        if ((st = try_bigram(t, buf, s, b.left, l->next, &h))) goto done;
    }

    /* Every merged symbol is a token (merges only form tokens); single
     * characters that are not tokens fall back to bytes. */
    for (int32_t i = 0; i != -1; i = s[i].next) {
        int32_t id = weft_tok_lookup(t, buf + s[i].start, s[i].n);
        st = id >= 0 ? weft_tok_ids_push(out, id)
                     : emit_bytes(t, (const unsigned char *)buf + s[i].start, s[i].n, out);
        if (st) goto done;
    }
done:
    free(h.v);
    free(s);
    free(buf);
    return st;
}
