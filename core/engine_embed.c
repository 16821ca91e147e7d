/* Embedding requests inside the engine: each step's hidden rows of an
 * embedding request (weft_forward_hidden) are pooled on the host as they
 * come, chunk after chunk, and the last chunk's step turns the pool into
 * the request's vector.
 *
 * The numerics do not depend on how the prompt was cut into chunks or
 * batched: every row is what it would be in any batch (forward.h), and the
 * mean's sum is taken in double, one row after another in position order,
 * whatever steps the rows arrived in. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine_internal.h"

struct engine_embed {
    enum weft_embed_pooling pooling;
    uint32_t n_embd;
    uint32_t n_pooled;           /* MEAN: positions [0, n_pooled) are in sum */
    bool have_last;              /* LAST: sum holds the last token's row */
    double sum[];                /* n_embd */
};

struct engine_embed *weft_engine_embed_new(enum weft_embed_pooling pooling, uint32_t n_embd)
{
    struct engine_embed *em = calloc(1, sizeof *em + sizeof(double) * n_embd);
    if (!em) return NULL;
    em->pooling = pooling;
    em->n_embd = n_embd;
    return em;
}

void weft_engine_embed_free(struct engine_embed *em) { free(em); }

uint32_t weft_engine_embed_rows(const struct engine_embed *em, const struct weft_sched_item *it)
{
    if (em->pooling == WEFT_EMBED_LAST) return it->sample ? 1 : 0;
    return it->n;
}

/* A mock engine's stand-in for a token's hidden state: fixed per token id,
 * uniform in [-1, 1) per dimension (splitmix64). */
static double mock_value(int32_t id, uint32_t d)
{
    uint64_t z = ((uint64_t)(uint32_t)id << 32 | d) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

static void add_row(struct engine_embed *em, const float *row, int32_t id, bool replace)
{
    for (uint32_t d = 0; d < em->n_embd; d++) {
        double v = row ? (double)row[d] : mock_value(id, d);
        em->sum[d] = replace ? v : em->sum[d] + v;
    }
}

void weft_engine_embed_take(struct engine_embed *em, const struct weft_sched_item *it, const float *hidden)
{
    uint32_t nh = weft_engine_embed_rows(em, it);
    uint32_t p0 = it->pos0 + it->n - nh;  /* the position of the first hidden row */
    const int32_t *toks = it->req->tokens;
    for (uint32_t i = 0; i < nh; i++) {
        const float *row = hidden ? hidden + (size_t)i * em->n_embd : NULL;
        uint32_t p = p0 + i;
        assert(em->pooling == WEFT_EMBED_LAST || p <= em->n_pooled);  /* MEAN takes no prefix hits */
        if (em->pooling == WEFT_EMBED_LAST) {
            add_row(em, row, toks[p], true);
            em->have_last = true;
        } else if (p == em->n_pooled) {
            /* positions below n_pooled were recomputed after a preemption
             * that dropped them: pooled once already */
            add_row(em, row, toks[p], false);
            em->n_pooled++;
        }
    }
}

float *weft_engine_embed_vector(const struct engine_embed *em)
{
    float *v = malloc(sizeof(float) * (em->n_embd ? em->n_embd : 1));
    if (!v) return NULL;
    double n = em->pooling == WEFT_EMBED_LAST ? 1.0 : (em->n_pooled ? (double)em->n_pooled : 1.0), ss = 0;
    for (uint32_t d = 0; d < em->n_embd; d++) ss += (em->sum[d] / n) * (em->sum[d] / n);
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (uint32_t d = 0; d < em->n_embd; d++) v[d] = (float)(em->sum[d] / n * inv);
    return v;
}
