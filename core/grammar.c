/* Grammar states, the vocabulary index and allowed-token masks.
 *
 * A state is a set of parser stacks (llama.cpp's scheme): each stack lists
 * parser positions (indexes into el[], bottom first) whose top is the
 * GE_CHARS element that must match the next code point; an empty stack means
 * the text so far is a complete match. Taking a code point keeps the stacks
 * whose top class holds it, moves their top one element on and expands the
 * result (rule references pushed, finished alternatives popped) until every
 * top is a class again. Stacks are kept distinct, so ambiguity costs at most
 * one copy of each.
 *
 * Bytes come one at a time: a byte that starts or continues a multi-byte
 * UTF-8 character narrows the interval [lo, hi] of code points the complete
 * character can still be (valid UTF-8 only: no overlong forms, surrogates
 * or values past U+10FFFF, so the interval is exact) and keeps the stacks
 * whose class meets it; the last byte takes the code point.
 *
 * Masks: the vocabulary's tokens sorted by their bytes form an implicit
 * trie (each token shares lcp[i] bytes with the one before it), walked with
 * one state per depth, so a prefix is advanced once for all the tokens that
 * share it and a dead prefix skips them all. Masks are cached in the vocab,
 * keyed by the grammar's uid and the state's exact contents (partial
 * character, stacks in a canonical order): a hit is the mask the walk would
 * compute. */
#include "core/grammar_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/tok_internal.h"
#include "base/unicode.h"

const char weft_grammar_json_object[] =
    "# any JSON object; whitespace runs are bounded (a model cannot loop on them): up to\n"
    "# 4 characters before the object, one newline after it, 40 inside\n"
    "root   ::= [ \\t\\n\\r]{0,4} object \"\\n\"?\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"
    "member ::= string ws \":\" ws value ws\n"
    "array  ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char   ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n\\r]{0,40}\n";

uint64_t weft_grammar_next_uid(void)
{
    static uint64_t next;
    return __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

struct weft_grammar *weft_grammar_ref(const struct weft_grammar *g)
{
    struct weft_grammar *m = (struct weft_grammar *)g;   /* the count is the only mutable part */
    if (m) __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    return m;
}

void weft_grammar_unref(struct weft_grammar *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    free(g->el);
    free(g->rule_start);
    free(g->alt);
    free(g->rule_alt);
    free(g->cls);
    free(g);
}

uint32_t weft_grammar_n_rules(const struct weft_grammar *g) { return g->n_rules; }

uint64_t weft_grammar_compile_compares(const struct weft_grammar *g) { return g->compile_compares; }

/* ---- classes ---- */

static bool cls_has(const struct weft_grammar *g, uint32_t off, uint32_t cp)
{
    const uint32_t *c = g->cls + off;
    uint32_t lo = 0, hi = c[0];   /* binary search over the ranges */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (cp < c[1 + 2 * mid]) hi = mid;
        else if (cp > c[2 + 2 * mid]) lo = mid + 1;
        else return true;
    }
    return false;
}

static bool cls_meets(const struct weft_grammar *g, uint32_t off, uint32_t a, uint32_t b)
{
    const uint32_t *c = g->cls + off;
    for (uint32_t i = 0; i < c[0]; i++)
        if (c[1 + 2 * i] <= b && c[2 + 2 * i] >= a) return true;
    return false;
}

/* ---- stack sets ---- */

struct sset {
    uint32_t n;          /* stacks */
    uint32_t *off;       /* [n + 1] stack i is pos[off[i] .. off[i + 1]) */
    uint32_t *pos;
    uint64_t *h;         /* [n] hash of each stack (distinctness) */
    uint32_t cap_n, cap_pos;
};

/* A partial UTF-8 character: rem bytes to come; the character will be a
 * code point in [lo, hi]; val holds the bits so far. rem 0: none. */
struct part {
    uint32_t val, lo, hi, rem;
};

struct scratch {
    uint32_t *w;         /* expansion worklist: items [positions..., length] */
    size_t cap_w;
    uint32_t *t;         /* one stack being copied */
    size_t cap_t;
};

static void sset_free(struct sset *s)
{
    free(s->off);
    free(s->pos);
    free(s->h);
    memset(s, 0, sizeof *s);
}

static bool sset_clear(struct sset *s)
{
    if (!s->cap_n) {
        s->off = malloc(sizeof *s->off * 9);
        s->h = malloc(sizeof *s->h * 8);
        if (!s->off || !s->h) return false;
        s->cap_n = 8;
    }
    s->n = 0;
    s->off[0] = 0;
    return true;
}

static uint64_t stack_hash(const uint32_t *p, uint32_t d)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ d;
    for (uint32_t i = 0; i < d; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* Add stack p[0..d) unless held; false on out of memory. */
static bool sset_add(struct sset *s, const uint32_t *p, uint32_t d)
{
    uint64_t h = stack_hash(p, d);
    for (uint32_t i = 0; i < s->n; i++)
        if (s->h[i] == h && s->off[i + 1] - s->off[i] == d && (!d || !memcmp(s->pos + s->off[i], p, sizeof *p * d)))
            return true;
    if (s->n == s->cap_n) {
        uint32_t cap = s->cap_n * 2;
        uint32_t *o = realloc(s->off, sizeof *o * (cap + 1));
        if (!o) return false;
        s->off = o;
        uint64_t *hh = realloc(s->h, sizeof *hh * cap);
        if (!hh) return false;
        s->h = hh;
        s->cap_n = cap;
    }
    uint32_t end = s->off[s->n];
    if (end + d > s->cap_pos) {
        uint32_t cap = (s->cap_pos ? s->cap_pos * 2 : 64) + d;
        uint32_t *q = realloc(s->pos, sizeof *q * cap);
        if (!q) return false;
        s->pos = q;
        s->cap_pos = cap;
    }
    if (d) memcpy(s->pos + end, p, sizeof *p * d);
    s->h[s->n] = h;
    s->off[++s->n] = end + d;
    return true;
}

static bool sset_copy(struct sset *dst, const struct sset *src)
{
    if (!sset_clear(dst)) return false;
    for (uint32_t i = 0; i < src->n; i++)
        if (!sset_add(dst, src->pos + src->off[i], src->off[i + 1] - src->off[i])) return false;
    return true;
}

static bool grow(uint32_t **p, size_t *cap, size_t need)
{
    if (need <= *cap) return true;
    size_t c = *cap * 2 > need ? *cap * 2 : need + 64;
    uint32_t *q = realloc(*p, sizeof *q * c);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static inline bool ends_alt(const struct weft_grammar *g, uint32_t p)
{
    return g->el[p].type == GE_END || g->el[p].type == GE_ALT;
}

/* Expand the stack stk[0..d-1) + [top] into dst: references are replaced by
 * their alternatives (the rest of the referencing sequence kept below, unless
 * nothing is left of it), finished alternatives popped, until each top is a
 * class or the stack is empty. Terminates because the grammar has no left
 * recursion (grammar_parse.c). */
static bool expand(const struct weft_grammar *g, struct scratch *sc, const uint32_t *stk, uint32_t d,
                   uint32_t top, struct sset *dst)
{
    if (!grow(&sc->w, &sc->cap_w, (size_t)d + 1)) return false;
    if (d > 1) memcpy(sc->w, stk, sizeof *stk * (d - 1));
    sc->w[d - 1] = top;
    sc->w[d] = d;
    size_t wt = (size_t)d + 1;   /* worklist top */
    while (wt) {
        uint32_t len = sc->w[wt - 1], n = len;
        uint32_t *it = sc->w + wt - 1 - len;
        while (n && ends_alt(g, it[n - 1])) n--;
        if (n == 0 || g->el[it[n - 1]].type == GE_CHARS) {
            if (!sset_add(dst, it, n)) return false;
            wt -= (size_t)len + 1;
            continue;
        }
        uint32_t p = it[n - 1], r = g->el[p].v, base = n - 1;
        if (!grow(&sc->t, &sc->cap_t, n)) return false;
        it = sc->w + wt - 1 - len;
        if (base) memcpy(sc->t, it, sizeof *it * base);
        if (!ends_alt(g, p + 1)) sc->t[base++] = p + 1;
        wt -= (size_t)len + 1;
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            if (!grow(&sc->w, &sc->cap_w, wt + base + 2)) return false;
            if (base) memcpy(sc->w + wt, sc->t, sizeof *sc->t * base);
            sc->w[wt + base] = g->alt[a];
            sc->w[wt + base + 1] = base + 1;
            wt += (size_t)base + 2;
        }
    }
    return true;
}

/* dst = src after code point cp (dst cleared first). */
static bool adv_cp(const struct weft_grammar *g, struct scratch *sc, const struct sset *src, uint32_t cp,
                   struct sset *dst)
{
    if (!sset_clear(dst)) return false;
    for (uint32_t i = 0; i < src->n; i++) {
        uint32_t d = src->off[i + 1] - src->off[i];
        const uint32_t *stk = src->pos + src->off[i];
        if (!d || !cls_has(g, g->el[stk[d - 1]].v, cp)) continue;
        if (!expand(g, sc, stk, d, stk[d - 1] + 1, dst)) return false;
    }
    return true;
}

/* dst = the stacks of src whose top class meets [lo, hi]. */
static bool filter(const struct weft_grammar *g, const struct sset *src, uint32_t lo, uint32_t hi, struct sset *dst)
{
    if (!sset_clear(dst)) return false;
    for (uint32_t i = 0; i < src->n; i++) {
        uint32_t d = src->off[i + 1] - src->off[i];
        const uint32_t *stk = src->pos + src->off[i];
        if (d && cls_meets(g, g->el[stk[d - 1]].v, lo, hi) && !sset_add(dst, stk, d)) return false;
    }
    return true;
}

/* One byte: 1 when some stack survives (dst, *po set), 0 when none does,
 * -1 on out of memory. */
static int step_byte(const struct weft_grammar *g, struct scratch *sc, const struct sset *src,
                     const struct part *pi, unsigned char b, struct sset *dst, struct part *po)
{
    uint32_t val, lo, hi, rem;
    if (pi->rem == 0) {
        if (b < 0x80) {
            *po = (struct part){0};
            if (!adv_cp(g, sc, src, b, dst)) return -1;
            return dst->n > 0;
        }
        /* the lead bytes base/unicode.h defines; the second byte's limits follow from
           [lo, hi] (an overlong, a surrogate or a code point past U+10FFFF leaves it empty) */
        static const uint32_t lo_of[5] = {0, 0, 0x80, 0x800, 0x10000}, hi_of[5] = {0, 0, 0x7FF, 0xFFFF, 0x10FFFF};
        int need = weft_utf8_need(b);
        if (need < 2) return 0;
        rem = (uint32_t)need - 1;
        val = b & (0x7Fu >> need);
        lo = lo_of[need];
        hi = b == 0xED ? 0xD7FF : hi_of[need];
    } else {
        if ((b & 0xC0) != 0x80) return 0;
        val = pi->val << 6 | (b & 0x3Fu);
        rem = pi->rem - 1;
        lo = pi->lo;
        hi = pi->hi;
    }
    uint32_t a = val << (6 * rem), z = a | ((1u << (6 * rem)) - 1);
    if (a > lo) lo = a;
    if (z < hi) hi = z;
    if (lo > hi) return 0;
    if (rem == 0) {
        *po = (struct part){0};
        if (!adv_cp(g, sc, src, val, dst)) return -1;
    } else {
        *po = (struct part){val, lo, hi, rem};
        if (!filter(g, src, lo, hi, dst)) return -1;
    }
    return dst->n > 0;
}

/* ---- the vocabulary ---- */

enum { TK_NEVER, TK_TEXT, TK_EOG };

struct centry {
    uint64_t h, uid;     /* uid 0: empty slot */
    uint32_t *key;
    uint32_t klen;
    uint32_t *mask;
};

struct weft_grammar_vocab {
    const struct weft_tokenizer *t;
    int32_t n_vocab;
    size_t words;
    uint8_t *kind;              /* [n_vocab] TK_* */
    int32_t *eog;               /* the end-of-generation ids */
    uint32_t n_eog;
    int32_t *sorted;            /* TK_TEXT ids by their bytes */
    uint32_t *lcp;              /* [n_sorted] bytes shared with the previous one */
    uint32_t n_sorted, max_len;
    pthread_mutex_t mu;         /* the cache and its counters */
    struct centry *tab;
    uint32_t cap, n, max_entries;
    uint64_t lookups, hits;
};

static inline const unsigned char *tok_bytes(const struct weft_grammar_vocab *v, int32_t id, uint32_t *len)
{
    const struct weft_tokenizer *t = v->t;
    *len = (uint32_t)(t->dec_off[id + 1] - t->dec_off[id]);
    return (const unsigned char *)t->dec + t->dec_off[id];
}

static const struct weft_grammar_vocab *sort_vocab;   /* qsort context, under sort_mu */
static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int by_bytes(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la, lb;
    const unsigned char *x = tok_bytes(sort_vocab, a, &la), *y = tok_bytes(sort_vocab, b, &lb);
    int c = memcmp(x, y, la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

weft_status weft_grammar_vocab_create(const struct weft_tokenizer *t, uint32_t mask_cache_mib,
                                      struct weft_grammar_vocab **out)
{
    *out = NULL;
    struct weft_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    v->t = t;
    v->n_vocab = t->n_vocab;
    v->words = ((size_t)t->n_vocab + 31) / 32;
    pthread_mutex_init(&v->mu, NULL);
    v->kind = malloc((size_t)t->n_vocab);
    v->eog = malloc(sizeof *v->eog * (size_t)t->n_vocab);
    v->sorted = malloc(sizeof *v->sorted * (size_t)t->n_vocab);
    v->lcp = malloc(sizeof *v->lcp * (size_t)t->n_vocab);
    if (!v->kind || !v->eog || !v->sorted || !v->lcp) goto nomem;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t len;
        tok_bytes(v, id, &len);
        if (weft_tokenizer_is_eog(t, id)) {
            v->kind[id] = TK_EOG;
            v->eog[v->n_eog++] = id;
        } else if ((t->type[id] == TOK_TYPE_NORMAL || t->type[id] == TOK_TYPE_BYTE) && len > 0) {
            v->kind[id] = TK_TEXT;
            v->sorted[v->n_sorted++] = id;
            if (len > v->max_len) v->max_len = len;
        } else {
            v->kind[id] = TK_NEVER;
        }
    }
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(v->sorted, v->n_sorted, sizeof *v->sorted, by_bytes);
    pthread_mutex_unlock(&sort_mu);
    for (uint32_t i = 0; i < v->n_sorted; i++) {
        uint32_t la = 0, lb, k = 0;
        const unsigned char *a = i ? tok_bytes(v, v->sorted[i - 1], &la) : NULL;
        const unsigned char *b = tok_bytes(v, v->sorted[i], &lb);
        while (k < la && k < lb && a[k] == b[k]) k++;
        v->lcp[i] = k;
    }
    size_t budget = (size_t)(mask_cache_mib ? mask_cache_mib : 16) << 20;
    size_t per = v->words * 4 + 128;
    size_t max = budget / per;
    v->max_entries = max < 4 ? 4 : max > (1u << 20) ? 1u << 20 : (uint32_t)max;
    v->cap = 8;
    while (v->cap < 2 * v->max_entries) v->cap *= 2;
    v->tab = calloc(v->cap, sizeof *v->tab);
    if (!v->tab) goto nomem;
    *out = v;
    return WEFT_OK;
nomem:
    weft_grammar_vocab_free(v);
    return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory (vocabulary index)");
}

static void cache_clear(struct weft_grammar_vocab *v)
{
    for (uint32_t i = 0; i < v->cap; i++) {
        free(v->tab[i].key);
        free(v->tab[i].mask);
        v->tab[i] = (struct centry){0};
    }
    v->n = 0;
}

void weft_grammar_vocab_free(struct weft_grammar_vocab *v)
{
    if (!v) return;
    if (v->tab) cache_clear(v);
    free(v->tab);
    free(v->kind);
    free(v->eog);
    free(v->sorted);
    free(v->lcp);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

int32_t weft_grammar_vocab_n(const struct weft_grammar_vocab *v) { return v->n_vocab; }
size_t weft_grammar_mask_words(const struct weft_grammar_vocab *v) { return v->words; }

void weft_grammar_vocab_stats(struct weft_grammar_vocab *v, struct weft_grammar_cache_stats *out)
{
    pthread_mutex_lock(&v->mu);
    out->lookups = v->lookups;
    out->hits = v->hits;
    out->entries = v->n;
    pthread_mutex_unlock(&v->mu);
}

/* ---- states ---- */

struct weft_grammar_state {
    struct weft_grammar *g;
    const struct weft_grammar_vocab *v;
    struct sset cur;
    struct part part;
    /* scratch (a const query may use it: states are not shared) */
    struct sset tmp[2];
    struct scratch sc;
    uint32_t *key;
    size_t cap_key;
};

weft_status weft_grammar_state_new(const struct weft_grammar *g, const struct weft_grammar_vocab *v,
                                   struct weft_grammar_state **out)
{
    *out = NULL;
    struct weft_grammar_state *s = calloc(1, sizeof *s);
    if (!s) return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    s->g = weft_grammar_ref(g);
    s->v = v;
    /* the start: root's alternatives, through a one-element stack that
     * points at a reference to root (expand replaces that top) */
    uint32_t a = g->rule_alt[g->root];
    bool ok = sset_clear(&s->cur);
    for (; ok && a < g->rule_alt[g->root + 1]; a++) {
        uint32_t p = g->alt[a];
        ok = expand(g, &s->sc, &p, 1, p, &s->cur);
    }
    if (!ok) {
        weft_grammar_state_free(s);
        return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    }
    *out = s;
    return WEFT_OK;
}

weft_status weft_grammar_state_clone(const struct weft_grammar_state *s, struct weft_grammar_state **out)
{
    *out = NULL;
    struct weft_grammar_state *c = calloc(1, sizeof *c);
    if (!c) return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    c->g = weft_grammar_ref(s->g);
    c->v = s->v;
    c->part = s->part;
    if (!sset_copy(&c->cur, &s->cur)) {
        weft_grammar_state_free(c);
        return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    }
    *out = c;
    return WEFT_OK;
}

void weft_grammar_state_free(struct weft_grammar_state *s)
{
    if (!s) return;
    sset_free(&s->cur);
    sset_free(&s->tmp[0]);
    sset_free(&s->tmp[1]);
    free(s->sc.w);
    free(s->sc.t);
    free(s->key);
    weft_grammar_unref(s->g);
    free(s);
}

bool weft_grammar_accepting(const struct weft_grammar_state *s)
{
    if (s->part.rem) return false;
    for (uint32_t i = 0; i < s->cur.n; i++)
        if (s->cur.off[i + 1] == s->cur.off[i]) return true;
    return false;
}

bool weft_grammar_finished(const struct weft_grammar_state *s)
{
    return s->cur.n == 1 && weft_grammar_accepting(s);
}

/* Run bytes from the current state into the scratch sets: 1 alive (*res the
 * set holding the result, *pres its partial character), 0 rejected, -1 out of
 * memory. An empty run is alive with the current state. */
static int run_bytes(struct weft_grammar_state *s, const unsigned char *b, size_t n, struct sset **res,
                     struct part *pres)
{
    const struct sset *src = &s->cur;
    struct part p = s->part;
    int k = 1;
    for (size_t i = 0; i < n && k == 1; i++) {
        struct sset *dst = &s->tmp[i & 1];
        struct part q;
        k = step_byte(s->g, &s->sc, src, &p, b[i], dst, &q);
        src = dst;
        p = q;
    }
    *res = (struct sset *)src;
    *pres = p;
    return k;
}

static weft_status take(struct weft_grammar_state *s, const unsigned char *b, size_t n, int32_t id)
{
    struct sset *res;
    struct part p;
    int k = run_bytes(s, b, n, &res, &p);
    if (k < 0) return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    if (k == 0) {
        if (id >= 0) return weft_error(WEFT_ERR_INVALID_ARG, "grammar: token %d does not fit the grammar here", id);
        return weft_error(WEFT_ERR_INVALID_ARG, "grammar: the text does not fit the grammar");
    }
    if (res != &s->cur) {
        struct sset t = s->cur;
        s->cur = *res;
        *res = t;
    }
    s->part = p;
    return WEFT_OK;
}

bool weft_grammar_allowed(const struct weft_grammar_state *cs, int32_t id)
{
    struct weft_grammar_state *s = (struct weft_grammar_state *)cs;   /* scratch only */
    if (!s->v || id < 0 || id >= s->v->n_vocab) return false;
    if (s->v->kind[id] == TK_EOG) return weft_grammar_accepting(s);
    if (s->v->kind[id] != TK_TEXT) return false;
    uint32_t len;
    const unsigned char *b = tok_bytes(s->v, id, &len);
    struct sset *res;
    struct part p;
    return run_bytes(s, b, len, &res, &p) == 1;
}

weft_status weft_grammar_advance(struct weft_grammar_state *s, int32_t id)
{
    if (!s->v || id < 0 || id >= s->v->n_vocab)
        return weft_error(WEFT_ERR_INVALID_ARG, "grammar: token %d is outside the vocabulary", id);
    if (s->v->kind[id] == TK_EOG) {
        if (weft_grammar_accepting(s)) return WEFT_OK;
        return weft_error(WEFT_ERR_INVALID_ARG, "grammar: end of generation before the text matches the grammar");
    }
    if (s->v->kind[id] != TK_TEXT)
        return weft_error(WEFT_ERR_INVALID_ARG, "grammar: token %d is a special token", id);
    uint32_t len;
    const unsigned char *b = tok_bytes(s->v, id, &len);
    return take(s, b, len, id);
}

weft_status weft_grammar_advance_bytes(struct weft_grammar_state *s, const char *bytes, size_t n)
{
    return take(s, (const unsigned char *)bytes, n, -1);
}

bool weft_grammar_match(const struct weft_grammar *g, const char *text, size_t len)
{
    struct weft_grammar_state *s;
    if (weft_grammar_state_new(g, NULL, &s) != WEFT_OK) return false;
    bool ok = weft_grammar_advance_bytes(s, text, len) == WEFT_OK && weft_grammar_accepting(s);
    weft_grammar_state_free(s);
    return ok;
}

/* ---- masks ---- */

/* The state as a key: grammar-independent words (the uid is kept beside
 * it): partial character, stack count, then each stack (length, positions)
 * in a canonical order. */
static bool make_key(struct weft_grammar_state *s, uint32_t *klen)
{
    const struct sset *c = &s->cur;
    size_t need = 5 + (size_t)c->n + c->off[c->n] + (size_t)c->n;   /* + n for the order */
    if (!grow(&s->key, &s->cap_key, need)) return false;
    uint32_t *k = s->key, *ord = s->key + need - c->n;
    for (uint32_t i = 0; i < c->n; i++) ord[i] = i;
    /* insertion sort by hash then contents: sets are small */
    for (uint32_t i = 1; i < c->n; i++) {
        uint32_t x = ord[i], j = i;
        while (j > 0) {
            uint32_t y = ord[j - 1];
            uint32_t dx = c->off[x + 1] - c->off[x], dy = c->off[y + 1] - c->off[y];
            int cmp = c->h[x] != c->h[y] ? (c->h[x] < c->h[y] ? -1 : 1) : dx != dy ? (dx < dy ? -1 : 1)
                    : dx ? memcmp(c->pos + c->off[x], c->pos + c->off[y], sizeof *c->pos * dx) : 0;
            if (cmp >= 0) break;
            ord[j] = y;
            j--;
        }
        ord[j] = x;
    }
    uint32_t o = 0;
    k[o++] = s->part.val;
    k[o++] = s->part.lo;
    k[o++] = s->part.hi;
    k[o++] = s->part.rem;
    k[o++] = c->n;
    for (uint32_t i = 0; i < c->n; i++) {
        uint32_t x = ord[i], d = c->off[x + 1] - c->off[x];
        k[o++] = d;
        if (d) memcpy(k + o, c->pos + c->off[x], sizeof *k * d);
        o += d;
    }
    *klen = o;
    return true;
}

static uint64_t key_hash(uint64_t uid, const uint32_t *k, uint32_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ uid;
    for (uint32_t i = 0; i < n; i++) h = (h ^ k[i]) * 0x100000001b3ULL;
    h ^= h >> 29;
    return h ? h : 1;
}

static struct centry *cache_find(struct weft_grammar_vocab *v, uint64_t h, uint64_t uid, const uint32_t *k,
                                 uint32_t n)
{
    for (uint32_t i = (uint32_t)h & (v->cap - 1);; i = (i + 1) & (v->cap - 1)) {
        struct centry *e = &v->tab[i];
        if (!e->uid) return e;
        if (e->h == h && e->uid == uid && e->klen == n && !memcmp(e->key, k, sizeof *k * n)) return e;
    }
}

/* Walk the sorted vocabulary (see the top of the file). */
static weft_status compute_mask(struct weft_grammar_state *s, uint32_t *mask)
{
    const struct weft_grammar_vocab *v = s->v;
    memset(mask, 0, v->words * sizeof *mask);
    if (weft_grammar_accepting(s))
        for (uint32_t i = 0; i < v->n_eog; i++) mask[v->eog[i] / 32] |= 1u << (v->eog[i] % 32);
    uint32_t D = v->max_len + 1;
    struct sset *st = calloc(D, sizeof *st);     /* st[d]: after d bytes of the current prefix (d >= 1) */
    struct part *pt = calloc(D, sizeof *pt);
    weft_status rc = WEFT_OK;
    if (!st || !pt) {
        rc = weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    pt[0] = s->part;
    uint32_t valid = 0;   /* st[0..valid] hold the current token's prefix states */
    for (uint32_t k = 0; k < v->n_sorted; k++) {
        int32_t id = v->sorted[k];
        uint32_t len;
        const unsigned char *b = tok_bytes(v, id, &len);
        uint32_t d = v->lcp[k] < valid ? v->lcp[k] : valid;
        int alive = 1;
        while (d < len) {
            const struct sset *src = d ? &st[d] : &s->cur;
            alive = step_byte(s->g, &s->sc, src, &pt[d], b[d], &st[d + 1], &pt[d + 1]);
            if (alive != 1) break;
            d++;
        }
        if (alive < 0) {
            rc = weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
            goto out;
        }
        valid = d;
        if (alive) {
            mask[id / 32] |= 1u << (id % 32);
        } else {
            /* the prefix b[0..d] is dead: so is every following token that shares it */
            while (k + 1 < v->n_sorted && v->lcp[k + 1] > d) k++;
        }
    }
out:
    if (st)
        for (uint32_t d = 0; d < D; d++) sset_free(&st[d]);
    free(st);
    free(pt);
    return rc;
}

weft_status weft_grammar_mask(const struct weft_grammar_state *cs, uint32_t *mask)
{
    struct weft_grammar_state *s = (struct weft_grammar_state *)cs;   /* scratch only */
    struct weft_grammar_vocab *v = (struct weft_grammar_vocab *)s->v; /* the cache is internally locked */
    if (!v) return weft_error(WEFT_ERR_INVALID_ARG, "grammar: a state without a vocabulary has no mask");
    uint32_t klen;
    if (!make_key(s, &klen)) return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory");
    uint64_t uid = s->g->uid, h = key_hash(uid, s->key, klen);
    pthread_mutex_lock(&v->mu);
    v->lookups++;
    struct centry *e = cache_find(v, h, uid, s->key, klen);
    if (e->uid) {
        memcpy(mask, e->mask, v->words * sizeof *mask);
        v->hits++;
        pthread_mutex_unlock(&v->mu);
        return WEFT_OK;
    }
    pthread_mutex_unlock(&v->mu);

    weft_status st = compute_mask(s, mask);
    if (st != WEFT_OK) return st;

    uint32_t *kc = malloc(sizeof *kc * klen), *mc = malloc(v->words * sizeof *mc);
    if (!kc || !mc) {   /* the mask is right; it just is not kept */
        free(kc);
        free(mc);
        return WEFT_OK;
    }
    memcpy(kc, s->key, sizeof *kc * klen);
    memcpy(mc, mask, v->words * sizeof *mc);
    pthread_mutex_lock(&v->mu);
    if (v->n >= v->max_entries) cache_clear(v);
    e = cache_find(v, h, uid, kc, klen);
    if (!e->uid) {
        *e = (struct centry){.h = h, .uid = uid, .key = kc, .klen = klen, .mask = mc};
        v->n++;
        kc = mc = NULL;
    }
    pthread_mutex_unlock(&v->mu);
    free(kc);
    free(mc);
    return WEFT_OK;
}
