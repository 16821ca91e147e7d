/* Byte-level BPE ("gpt2"), as llama.cpp's llm_tokenizer_bpe: the text is cut
 * into words by the pre-tokenizer the vocab names (hand-written matchers over
 * code points, equivalent to llama.cpp's regexes), every byte of a word starts
 * as its GPT-2 mapped token, and the adjacent pair with the lowest merge rank
 * is merged (ties: leftmost) until no pair has a merge. */
#include <stdlib.h>
#include <string.h>

#include "core/tok_internal.h"
#include "base/buf.h"
#include "base/unicode.h"

/* ---- GPT-2 bytes_to_unicode ---- */

static int printable_byte(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t weft_tok_byte_to_cp(unsigned char b)
{
    if (printable_byte(b)) return b;
    uint32_t k = 0; /* rank of b among the non-printable bytes */
    for (unsigned c = 0; c < b; c++) k += !printable_byte(c);
    return 256 + k;
}

int weft_tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return printable_byte(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1; /* 68 non-printable bytes */
    uint32_t k = cp - 256;
    for (unsigned c = 0; c < 256; c++)
        if (!printable_byte(c) && k-- == 0) return (int)c;
    return -1;
}

/* ---- pre-tokenizer ---- */

struct words {          /* word boundaries as code point counts */
    size_t *len;
    size_t n, cap;
};

static weft_status words_push(struct words *w, size_t len)
{
    if (len == 0) return WEFT_OK;
    if (w->n == w->cap) {
        size_t *v = weft_grow(w->len, &w->cap, w->n + 1, sizeof *v);
        if (!v) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (pre-tokenizer)");
        w->len = v;
    }
    w->len[w->n++] = len;
    return WEFT_OK;
}

struct span {           /* one word being split: cps[lo, hi) */
    const uint32_t *cp;
    const unsigned *fl;
    size_t lo, hi;
};

/* Flags of position i, 0 outside the word (llama.cpp's OUT_OF_RANGE). */
static unsigned fl_at(const struct span *s, size_t i) { return i < s->hi ? s->fl[i] : 0; }
static uint32_t cp_at(const struct span *s, size_t i) { return i < s->hi ? s->cp[i] : 0xFFFFFFFFu; }
#define L WEFT_UCP_LETTER
#define N WEFT_UCP_NUMBER
#define S WEFT_UCP_SPACE

/* The cut points of one word go to `out` as lengths. Each matcher returns the
 * end of the match starting at pos (always > pos). */
typedef size_t (*matcher_fn)(const struct span *s, size_t pos);

/* 's|'t|'re|'ve|'m|'ll|'d, case-sensitive (gpt2) or not (llama3): returns 0 if none. */
static size_t contraction(const struct span *s, size_t pos, int fold)
{
    if (cp_at(s, pos) != '\'' || pos + 1 >= s->hi) return 0;
    uint32_t a = cp_at(s, pos + 1), b = pos + 2 < s->hi ? cp_at(s, pos + 2) : 0;
    if (fold) {
        if (a >= 'A' && a <= 'Z') a += 32;
        if (b >= 'A' && b <= 'Z') b += 32;
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
    return 0;
}

/* \s+(?!\S)|\s+ given n whitespace at pos: leave the last one to the next
 * word when something follows. */
static size_t trailing_space(const struct span *s, size_t pos, size_t n)
{
    if (n > 1 && pos + n < s->hi) return pos + n - 1;
    return pos + (n ? n : 1);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const struct span *s, size_t pos)
{
    size_t e = contraction(s, pos, 0);
    if (e) return e;
    uint32_t c = s->cp[pos];
    size_t p = pos + (c == ' ');
    unsigned f = fl_at(s, p);
    if (p < s->hi) {
        if (f & L) { while (fl_at(s, p) & L) p++; return p; }
        if (f & N) { while (fl_at(s, p) & N) p++; return p; }
        if (!(f & S)) { while (p < s->hi && !(s->fl[p] & (S | L | N))) p++; return p; }
    }
    size_t n = 0;
    while (fl_at(s, pos + n) & S) n++;
    return trailing_space(s, pos, n);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (llama3: 3 digits a number; qwen2: 1) */
static size_t match_llama3_digits(const struct span *s, size_t pos, size_t max_digits)
{
    size_t e = contraction(s, pos, 1);
    if (e) return e;
    uint32_t c = s->cp[pos];
    unsigned f = s->fl[pos];
    if (c != '\r' && c != '\n' && !(f & N) && ((f & L) || (fl_at(s, pos + 1) & L))) {
        size_t p = pos + 1;
        while (fl_at(s, p) & L) p++;
        return p;
    }
    if (f & N) {
        size_t p = pos;
        while (p < pos + max_digits && (fl_at(s, p) & N)) p++;
        return p;
    }
    size_t p = pos + (c == ' ');
    if (p < s->hi && !(s->fl[p] & (S | L | N))) {
        while (p < s->hi && !(s->fl[p] & (S | L | N))) p++;
        while (p < s->hi && (s->cp[p] == '\r' || s->cp[p] == '\n')) p++;
        return p;
    }
    size_t n = 0, last_nl = 0;
    while (fl_at(s, pos + n) & S) {
        if (s->cp[pos + n] == '\r' || s->cp[pos + n] == '\n') last_nl = pos + n + 1;
        n++;
    }
    if (last_nl) return last_nl;
    return trailing_space(s, pos, n);
}

static size_t match_llama3(const struct span *s, size_t pos) { return match_llama3_digits(s, pos, 3); }
static size_t match_qwen2(const struct span *s, size_t pos) { return match_llama3_digits(s, pos, 1); }

static weft_status split_matcher(const struct span *s, matcher_fn m, struct words *out)
{
    for (size_t pos = s->lo; pos < s->hi;) {
        size_t e = m(s, pos);
        weft_status st = words_push(out, e - pos);
        if (st) return st;
        pos = e;
    }
    return WEFT_OK;
}

/* Regex-split of a character class, std::regex style: matches and the gaps
 * between them all become words. run: class+ as one match; else one char. */
static int is_default_punct(const struct span *s, size_t i)
{
    uint32_t c = s->cp[i];
    return (s->fl[i] & WEFT_UCP_PUNCT) || c == '$' || c == '+' || c == '<' || c == '=' ||
           c == '>' || c == '^' || c == '~' || c == '|';
}
static int is_number(const struct span *s, size_t i) { return (s->fl[i] & N) != 0; }

static weft_status split_class(const struct span *s, int (*in)(const struct span *, size_t), int run,
                               struct words *out)
{
    weft_status st = WEFT_OK;
    size_t gap = s->lo;
    for (size_t pos = s->lo; pos < s->hi && !st;) {
        if (!in(s, pos)) { pos++; continue; }
        size_t e = pos + 1;
        if (run) while (e < s->hi && in(s, e)) e++;
        if ((st = words_push(out, pos - gap)) == WEFT_OK) st = words_push(out, e - pos);
        gap = pos = e;
    }
    return st ? st : words_push(out, s->hi - gap);
}

/* [0-9][0-9][0-9] */
static weft_status split_digit3(const struct span *s, struct words *out)
{
    weft_status st = WEFT_OK;
    size_t gap = s->lo;
    for (size_t pos = s->lo; pos < s->hi && !st;) {
        int ok = pos + 3 <= s->hi;
        for (size_t k = 0; ok && k < 3; k++) ok = s->cp[pos + k] >= '0' && s->cp[pos + k] <= '9';
        if (!ok) { pos++; continue; }
        if ((st = words_push(out, pos - gap)) == WEFT_OK) st = words_push(out, 3);
        gap = pos = pos + 3;
    }
    return st ? st : words_push(out, s->hi - gap);
}

enum stage { ST_DIGIT_EACH, ST_NUMBER_RUN, ST_PUNCT_RUN, ST_DIGIT3, ST_GPT2, ST_LLAMA3, ST_QWEN2, ST_END };

static const enum stage *stages_of(enum tok_pre pre)
{
    static const enum stage def[] = { ST_PUNCT_RUN, ST_GPT2, ST_NUMBER_RUN, ST_DIGIT3, ST_END };
    static const enum stage gpt2[] = { ST_GPT2, ST_END };
    static const enum stage llama3[] = { ST_LLAMA3, ST_END };
    static const enum stage smollm[] = { ST_DIGIT_EACH, ST_GPT2, ST_END };
    static const enum stage qwen2[] = { ST_QWEN2, ST_END };
    switch (pre) {
    case TOK_PRE_GPT2: return gpt2;
    case TOK_PRE_LLAMA3: return llama3;
    case TOK_PRE_SMOLLM: return smollm;
    case TOK_PRE_QWEN2: return qwen2;
    default: return def;
    }
}

/* Cut cps[0..n) into words; *w gets their lengths in code points. */
static weft_status pretokenize(enum tok_pre pre, const uint32_t *cp, const unsigned *fl, size_t n,
                               struct words *w)
{
    struct words cur = { 0 }, next = { 0 };
    weft_status st = words_push(&cur, n);
    for (const enum stage *sg = stages_of(pre); *sg != ST_END && !st; sg++) {
        next.n = 0;
        size_t lo = 0;
        for (size_t i = 0; i < cur.n && !st; i++) {
            struct span s = { cp, fl, lo, lo + cur.len[i] };
            switch (*sg) {
            case ST_DIGIT_EACH: st = split_class(&s, is_number, 0, &next); break;
            case ST_NUMBER_RUN: st = split_class(&s, is_number, 1, &next); break;
            case ST_PUNCT_RUN: st = split_class(&s, is_default_punct, 1, &next); break;
            case ST_DIGIT3: st = split_digit3(&s, &next); break;
            case ST_GPT2: st = split_matcher(&s, match_gpt2, &next); break;
            case ST_LLAMA3: st = split_matcher(&s, match_llama3, &next); break;
            case ST_QWEN2: st = split_matcher(&s, match_qwen2, &next); break;
            case ST_END: break;
            }
            lo = s.hi;
        }
        struct words tmp = cur;
        cur = next;
        next = tmp;
    }
    free(next.len);
    if (st) { free(cur.len); return st; }
    *w = cur;
    return WEFT_OK;
}

/* ---- merges ---- */

struct sym {
    uint32_t start, n;  /* bytes of the word; n == 0: merged away */
    int32_t prev, next, id;
};


static weft_status try_bigram(const struct weft_tokenizer *t, const struct sym *s, int32_t l,
                              int32_t r, struct tok_heap *h)
{
    if (l < 0 || r < 0 || s[l].id < 0 || s[r].id < 0) return WEFT_OK;
    const struct tok_merge *m = weft_tok_merge_find(t, s[l].id, s[r].id);
    if (!m) return WEFT_OK;
    struct tok_bigram b = { -(float)m->rank, l, r, s[l].n + s[r].n };
    return weft_tok_heap_push(h, b);
}

/* Encode one word (raw bytes w[0..n)). s and h are scratch space. */
static weft_status encode_word(const struct weft_tokenizer *t, const unsigned char *w, size_t n,
                               struct sym *s, struct tok_heap *h, char *mapped, struct tok_ids *out)
{
    if (t->ignore_merges) { /* a word that is a token is taken whole */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += (size_t)weft_utf8_encode(weft_tok_byte_to_cp(w[i]), mapped + m);
        int32_t id = weft_tok_lookup(t, mapped, m);
        if (id >= 0) return weft_tok_ids_push(out, id);
    }
    for (size_t i = 0; i < n; i++)
        s[i] = (struct sym){ (uint32_t)i, 1, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1,
                             t->byte_tok[w[i]] };
    weft_status st = WEFT_OK;
    h->n = 0;
    for (size_t i = 1; i < n && !st; i++) st = try_bigram(t, s, (int32_t)i - 1, (int32_t)i, h);
    while (h->n && !st) {
        struct tok_bigram b = weft_tok_heap_pop(h);
        struct sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->next != b.right || l->n + r->n != b.size) continue;
        l->id = weft_tok_merge_find(t, l->id, r->id)->result;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        if ((st = try_bigram(t, s, l->prev, b.left, h)) == WEFT_OK)
            st = try_bigram(t, s, b.left, l->next, h);
    }
    for (int32_t i = 0; i != -1 && !st; i = s[i].next) {
        if (s[i].id >= 0) { st = weft_tok_ids_push(out, s[i].id); continue; }
        /* not a token (broken vocab): one token per byte where there is one */
        for (uint32_t k = 0; k < s[i].n && !st; k++) {
            int32_t id = t->byte_tok[w[s[i].start + k]];
            if (id >= 0) st = weft_tok_ids_push(out, id);
        }
    }
    return st;
}

weft_status weft_tok_bpe_encode(const struct weft_tokenizer *t, const char *text, size_t len,
                           struct tok_ids *out)
{
    weft_status st = WEFT_OK;
    /* Invalid UTF-8 bytes become U+FFFD, as llama.cpp's decoder does; clean
     * holds the re-encoded text, bo[i] the byte offset of code point i. */
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    unsigned *fl = malloc((len + 1) * sizeof *fl);
    size_t *bo = malloc((len + 1) * sizeof *bo);
    unsigned char *clean = malloc(3 * len + 1);
    struct words w = { 0 };
    struct sym *s = NULL;
    char *mapped = NULL;
    struct tok_heap h = { 0 };
    if (!cp || !fl || !bo || !clean) { st = weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    size_t n = 0, nb = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        int k = weft_utf8_decode((const unsigned char *)text + i, len - i, &c);
        if (k == 0) { c = 0xFFFD; k = 1; }
        i += (size_t)k;
        cp[n] = c;
        fl[n] = weft_unicode_flags(c);
        bo[n++] = nb;
        nb += (size_t)weft_utf8_encode(c, (char *)clean + nb);
    }
    bo[n] = nb;
    if ((st = pretokenize(t->pre, cp, fl, n, &w))) goto done;

    size_t longest = 0;
    for (size_t i = 0, c = 0; i < w.n; c += w.len[i], i++)
        if (bo[c + w.len[i]] - bo[c] > longest) longest = bo[c + w.len[i]] - bo[c];
    s = malloc((longest + 1) * sizeof *s);
    mapped = malloc(2 * longest + 1);
    if (!s || !mapped) { st = weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    for (size_t i = 0, c = 0; i < w.n && !st; c += w.len[i], i++)
        st = encode_word(t, clean + bo[c], bo[c + w.len[i]] - bo[c], s, &h, mapped, out);
done:
    free(h.v);
    free(mapped);
    free(s);
    free(w.len);
    free(clean);
    free(bo);
    free(fl);
    free(cp);
    return st;
}
