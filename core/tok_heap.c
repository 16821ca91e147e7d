/* Binary max-heap of candidate merges shared by both tokenizers. */
#include <stdlib.h>

#include "core/tok_internal.h"
#include "base/buf.h"

static int before(const struct tok_bigram *a, const struct tok_bigram *b)
{
    if (a->key != b->key) return a->key > b->key;
    return a->left < b->left;
}

weft_status weft_tok_heap_push(struct tok_heap *h, struct tok_bigram b)
{
    if (h->n == h->cap) {
        struct tok_bigram *v = weft_grow(h->v, &h->cap, h->n + 1, sizeof *v);
        if (!v) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (merge heap)");
        h->v = v;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return WEFT_OK;
}

struct tok_bigram weft_tok_heap_pop(struct tok_heap *h)
{
    struct tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}
