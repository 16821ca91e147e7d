/* The router's per-instance block index (core/prefix_index.h): a set with
 * LRU eviction at a fixed capacity, checked against a plain model on random
 * operations; chains match up to their first miss; resize keeps the most
 * recent; memory is fixed by the capacity. */
#include <string.h>

#include "core/prefix_index.h"
#include "tests/check.h"

static uint64_t rnd(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* the model: an array in recency order, most recent first */
struct model { uint64_t h[64]; uint32_t n, cap; };

static int m_find(const struct model *m, uint64_t h)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->h[i] == h) return (int)i;
    return -1;
}

static void m_del(struct model *m, int i)
{
    memmove(m->h + i, m->h + i + 1, sizeof(uint64_t) * (m->n - (uint32_t)i - 1));
    m->n--;
}

static void m_insert(struct model *m, uint64_t h)
{
    int i = m_find(m, h);
    if (i >= 0) m_del(m, i);
    else if (m->n == m->cap) m->n--;
    memmove(m->h + 1, m->h, sizeof(uint64_t) * m->n);
    m->h[0] = h;
    m->n++;
}

static void test_against_model(void)
{
    uint64_t seed = 7;
    for (uint32_t cap = 1; cap <= 40; cap += 13) {
        struct weft_prefix_index ix;
        CHECK(weft_prefix_index_init(&ix, cap) == WEFT_OK);
        struct model m = {.cap = cap};
        size_t bytes = weft_prefix_index_bytes(&ix);
        for (int step = 0; step < 20000; step++) {
            /* a small key space (collisions in the table, re-inserts, removals of absent keys);
             * keys sharing low bits exercise probing and backward-shift deletion */
            uint64_t h = (rnd(&seed) % 60) << 40 | 5;
            uint64_t op = rnd(&seed) % 10;
            if (op < 6) {
                weft_prefix_index_insert(&ix, h);
                m_insert(&m, h);
            } else if (op < 9) {
                weft_prefix_index_remove(&ix, h);
                int i = m_find(&m, h);
                if (i >= 0) m_del(&m, i);
            } else if (step % 1000 == 999) {
                weft_prefix_index_clear(&ix);
                m.n = 0;
            }
            CHECK_EQ_INT(ix.n, m.n);
            for (uint64_t k = 0; k < 60; k++)
                if (!!weft_prefix_index_contains(&ix, k << 40 | 5) != (m_find(&m, k << 40 | 5) >= 0)) {
                    CHECK_MSG(0, "cap %u step %d key %llu", cap, step, (unsigned long long)k);
                    step = 1 << 30;
                    break;
                }
        }
        CHECK_EQ_INT(weft_prefix_index_bytes(&ix), bytes);
        weft_prefix_index_free(&ix);
    }
}

static void test_chain_match_and_order(void)
{
    struct weft_prefix_index ix;
    CHECK(weft_prefix_index_init(&ix, 4) == WEFT_OK);
    uint64_t a[6] = {11, 12, 13, 14, 15, 16};
    weft_prefix_index_insert_chain(&ix, a, 3);
    CHECK_EQ_INT(weft_prefix_index_match(&ix, a, 6), 3);
    weft_prefix_index_remove(&ix, 12);
    CHECK_EQ_INT(weft_prefix_index_match(&ix, a, 6), 1);  /* a chain breaks at its first miss */
    weft_prefix_index_insert_chain(&ix, a, 6);            /* 6 into 4: the prefix stays, the tail goes */
    CHECK_EQ_INT(ix.n, 4);
    CHECK_EQ_INT(weft_prefix_index_match(&ix, a, 6), 4);
    CHECK(!weft_prefix_index_contains(&ix, 15) && !weft_prefix_index_contains(&ix, 16));
    /* resize down keeps the most recent: 11 was inserted last */
    CHECK(weft_prefix_index_resize(&ix, 2) == WEFT_OK);
    CHECK_EQ_INT(ix.n, 2);
    CHECK_EQ_INT(weft_prefix_index_match(&ix, a, 6), 2);
    CHECK(weft_prefix_index_resize(&ix, 100) == WEFT_OK);
    CHECK_EQ_INT(ix.n, 2);
    CHECK_EQ_INT(weft_prefix_index_match(&ix, a, 6), 2);
    weft_prefix_index_insert_chain(&ix, a, 6);
    CHECK_EQ_INT(weft_prefix_index_match(&ix, a, 6), 6);
    weft_prefix_index_free(&ix);
}

int main(void)
{
    RUN(test_against_model);
    RUN(test_chain_match_and_order);
    return check_summary();
}
