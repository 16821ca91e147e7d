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

/* ---- pre-tokenizer ----
 * llama.cpp runs each pre value's regexes one after another, each over the
 * words the one before cut; a regex's matches and the text between them all
 * become words. Most of them run in std::regex over a "collapsed" text: every
 * code point >= 128 stands for its class (letter, number, punctuation, mark,
 * symbol, whitespace or other) and \p{..} turns into that class plus its ASCII
 * members. So ASCII keeps its case ([^a-z], [^A-Z]) while every other letter
 * is upper and lower case at once, and ASCII '~', missing from that ASCII
 * list of \p{S}, is no symbol. The matchers below reproduce those regexes
 * (ECMAScript: the first alternative that matches wins, greedy with
 * backtracking) and, for llama3, gpt2 and kimi-k2, llama.cpp's hand-written
 * splitters. */

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
static int is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
static int is_ascii_alpha(uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
#define L WEFT_UCP_LETTER
#define N WEFT_UCP_NUMBER
#define P WEFT_UCP_PUNCT
#define S WEFT_UCP_SPACE
#define M WEFT_UCP_MARK
#define SYM WEFT_UCP_SYMBOL

/* A matcher returns the end of the match starting at pos, or pos if none
 * starts there (that character joins the text between matches). */
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

/* \s*[\r\n]+|\s+(?!\S)|\s+ : pos if no whitespace starts at pos. */
static size_t space_run(const struct span *s, size_t pos)
{
    size_t n = 0, last_nl = 0;
    while (fl_at(s, pos + n) & S) {
        if (is_nl(s->cp[pos + n])) last_nl = pos + n + 1;
        n++;
    }
    if (last_nl) return last_nl;
    return n ? trailing_space(s, pos, n) : pos;
}

/*  ?[^\s<word>]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ where <word> are the
 * classes of the word alternatives (slash: [\r\n/]* after the run). */
static size_t other_or_space(const struct span *s, size_t pos, unsigned word, int slash)
{
    size_t p = pos + (s->cp[pos] == ' ');
    if (p < s->hi && !(s->fl[p] & (S | word))) {
        while (p < s->hi && !(s->fl[p] & (S | word))) p++;
        while (p < s->hi && (is_nl(s->cp[p]) || (slash && s->cp[p] == '/'))) p++;
        return p;
    }
    return space_run(s, pos);
}

/* up to max characters of class cls */
static size_t run_max(const struct span *s, size_t pos, unsigned cls, size_t max)
{
    size_t p = pos;
    while (p < pos + max && (fl_at(s, p) & cls)) p++;
    return p;
}

static size_t run_of(const struct span *s, size_t pos, unsigned cls) { return run_max(s, pos, cls, (size_t)-1 - pos); }

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const struct span *s, size_t pos)
{
    size_t e = contraction(s, pos, 0);
    if (e) return e;
    uint32_t c = s->cp[pos];
    size_t p = pos + (c == ' ');
    unsigned f = fl_at(s, p);
    if (p < s->hi) {
        if (f & L) return run_of(s, p, L);
        if (f & N) return run_of(s, p, N);
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
    if (!is_nl(c) && !(f & N) && ((f & L) || (fl_at(s, pos + 1) & L))) return run_of(s, pos + 1, L);
    if (f & N) return run_max(s, pos, N, max_digits);
    return other_or_space(s, pos, L | N, 0);
}

static size_t match_llama3(const struct span *s, size_t pos) { return match_llama3_digits(s, pos, 3); }
static size_t match_qwen2(const struct span *s, size_t pos) { return match_llama3_digits(s, pos, 1); }

/* qwen35: marks join letter runs.
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
 *  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_qwen35(const struct span *s, size_t pos)
{
    size_t e = contraction(s, pos, 1);
    if (e) return e;
    uint32_t c = s->cp[pos];
    unsigned f = s->fl[pos];
    size_t p = pos + (!is_nl(c) && !(f & (L | N)) && (fl_at(s, pos + 1) & (L | M)));
    if (fl_at(s, p) & (L | M)) return run_of(s, p, L | M);
    if (f & N) return pos + 1;
    return other_or_space(s, pos, L | M | N, 0);
}

/* The cased letter run of gpt-4o and tekken at q (a letter), as the collapsed
 * regex sees it: "upper" X = letters but ASCII a-z, "lower" Y = letters but
 * ASCII A-Z (so other letters are both):
 *   X*Y+ : the longest X run that a Y follows, then the Y run; X* backs off
 *          to the last letter that is X and Y at once if no Y follows it;
 *   X+Y* : failing that (an all-ASCII-capital run), the X run. */
static int is_upper_ish(const struct span *s, size_t i)
{
    return (fl_at(s, i) & L) && !(s->cp[i] >= 'a' && s->cp[i] <= 'z');
}
static int is_lower_ish(const struct span *s, size_t i)
{
    return (fl_at(s, i) & L) && !(s->cp[i] >= 'A' && s->cp[i] <= 'Z');
}

static size_t cased_word(const struct span *s, size_t q)
{
    size_t m = 0;
    while (is_upper_ish(s, q + m)) m++;
    size_t k = m;
    while (!is_lower_ish(s, q + k) && k > 0) k--;
    if (!is_lower_ish(s, q + k)) return q + m; /* X+Y*: nothing lower follows */
    while (is_lower_ish(s, q + k)) k++;
    return q + k;
}

/* gpt-4o (contractions, 3 digits) and tekken (neither, 1 digit):
 * [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|
 * [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|...)?|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_cased(const struct span *s, size_t pos, int contractions, size_t max_digits)
{
    uint32_t c = s->cp[pos];
    unsigned f = s->fl[pos];
    size_t q = pos + (!is_nl(c) && !(f & (L | N)));
    if (fl_at(s, q) & L) {
        size_t e = cased_word(s, q), k = contractions ? contraction(s, e, 1) : 0;
        return k ? k : e;
    }
    if (f & N) return run_max(s, pos, N, max_digits);
    return other_or_space(s, pos, L | N, 1);
}

static size_t match_gpt4o(const struct span *s, size_t pos) { return match_cased(s, pos, 1, 3); }
static size_t match_tekken(const struct span *s, size_t pos) { return match_cased(s, pos, 0, 1); }

/* deepseek-v3's \p{P} and \p{S} (without '~', see above) */
static int ds_punct(const struct span *s, size_t i)
{
    return i < s->hi && (s->fl[i] & (P | SYM)) && s->cp[i] != '~';
}

/* deepseek-v3, after \p{N}{1,3} and [一-龥぀-ゟ゠-ヿ]+ :
 * [!-/:-@\[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_deepseek3(const struct span *s, size_t pos)
{
    uint32_t c = s->cp[pos];
    unsigned f = s->fl[pos];
    if (c < 128 && (f & (P | SYM)) && is_ascii_alpha(cp_at(s, pos + 1))) {
        size_t p = pos + 1;
        while (is_ascii_alpha(cp_at(s, p))) p++;
        return p;
    }
    size_t p = pos + (!is_nl(c) && !(f & L) && !ds_punct(s, pos) && (fl_at(s, pos + 1) & (L | M)));
    if (fl_at(s, p) & (L | M)) return run_of(s, p, L | M);
    p = pos + (c == ' ');
    if (ds_punct(s, p)) {
        while (ds_punct(s, p)) p++;
        while (is_nl(cp_at(s, p))) p++;
        return p;
    }
    return space_run(s, pos);
}

/* \p{N}{1,3} */
static size_t match_number3(const struct span *s, size_t pos) { return run_max(s, pos, N, 3); }

/* [一-龥぀-ゟ゠-ヿ]+ : the CJK unified ideographs to U+9FA5, hiragana, katakana */
static int is_cjk_kana(uint32_t c) { return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF); }
static size_t match_cjk_kana(const struct span *s, size_t pos)
{
    size_t p = pos;
    while (p < s->hi && is_cjk_kana(s->cp[p])) p++;
    return p;
}

/* Han as llama.cpp's unicode_cpt_is_han: the CJK unified ideographs, their
 * extensions A-F and the compatibility ideographs. */
static int is_han(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2EBEF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}
static int is_non_han_letter(const struct span *s, size_t i) { return (fl_at(s, i) & L) && !is_han(s->cp[i]); }

/* kimi-k2, llama.cpp's splitter for
 * [\p{Han}]+|[^\r\n\p{L}\p{N}]?<letters but Han>+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (it does not tell upper from lower case, nor marks from other characters) */
static size_t match_kimi_k2(const struct span *s, size_t pos)
{
    uint32_t c = s->cp[pos];
    unsigned f = s->fl[pos];
    size_t p = pos;
    if (is_han(c)) {
        while (p < s->hi && is_han(s->cp[p])) p++;
        return p;
    }
    p += !is_nl(c) && !(f & (L | N)) && is_non_han_letter(s, pos + 1);
    if (is_non_han_letter(s, p)) {
        while (is_non_han_letter(s, p)) p++;
        size_t k = contraction(s, p, 1);
        return k ? k : p;
    }
    if (f & N) return run_max(s, pos, N, 3);
    size_t e = other_or_space(s, pos, L | N, 0);
    return e > pos ? e : pos + 1;
}

/* \p{P} or one of $+<=>^~| */
static int is_default_punct(uint32_t c, unsigned f)
{
    return (f & P) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
           c == '~' || c == '|';
}
/* [\p{P}\$\+<=>\^~\|]+ */
static size_t match_punct_run(const struct span *s, size_t pos)
{
    size_t p = pos;
    while (p < s->hi && is_default_punct(s->cp[p], s->fl[p])) p++;
    return p;
}
/* [\p{P}\$\+<=>\^~\|`]+ */
static size_t match_falcon_punct_run(const struct span *s, size_t pos)
{
    size_t p = pos;
    while (p < s->hi && (is_default_punct(s->cp[p], s->fl[p]) || s->cp[p] == '`')) p++;
    return p;
}
/* \p{N} and \p{N}+ */
static size_t match_number(const struct span *s, size_t pos) { return run_max(s, pos, N, 1); }
static size_t match_number_run(const struct span *s, size_t pos) { return run_of(s, pos, N); }

/* [0-9][0-9][0-9] */
static size_t match_digit3(const struct span *s, size_t pos)
{
    for (size_t k = 0; k < 3; k++)
        if (pos + k >= s->hi || s->cp[pos + k] < '0' || s->cp[pos + k] > '9') return pos;
    return pos + 3;
}

static weft_status split_matcher(const struct span *s, matcher_fn m, struct words *out)
{
    weft_status st = WEFT_OK;
    size_t gap = s->lo;
    for (size_t pos = s->lo; pos < s->hi && !st;) {
        size_t e = m(s, pos);
        if (e == pos) { pos++; continue; }
        if ((st = words_push(out, pos - gap)) == WEFT_OK) st = words_push(out, e - pos);
        gap = pos = e;
    }
    return st ? st : words_push(out, s->hi - gap);
}

/* The regexes of each pre value, in order (NULL-terminated). */
static const matcher_fn *stages_of(enum tok_pre pre)
{
    static const matcher_fn def[] = { match_punct_run, match_gpt2, match_number_run, match_digit3, NULL };
    static const matcher_fn gpt2[] = { match_gpt2, NULL };
    static const matcher_fn llama3[] = { match_llama3, NULL };
    static const matcher_fn smollm[] = { match_number, match_gpt2, NULL };
    static const matcher_fn qwen2[] = { match_qwen2, NULL };
    static const matcher_fn qwen35[] = { match_qwen35, NULL };
    static const matcher_fn gpt4o[] = { match_gpt4o, NULL };
    static const matcher_fn tekken[] = { match_tekken, NULL };
    static const matcher_fn deepseek3[] = { match_number3, match_cjk_kana, match_deepseek3, NULL };
    static const matcher_fn falcon[] = { match_falcon_punct_run, match_gpt2, match_digit3, NULL };
    static const matcher_fn kimi_k2[] = { match_kimi_k2, NULL };
    switch (pre) {
    case TOK_PRE_GPT2: return gpt2;
    case TOK_PRE_LLAMA3: return llama3;
    case TOK_PRE_SMOLLM: return smollm;
    case TOK_PRE_QWEN2: return qwen2;
    case TOK_PRE_QWEN35: return qwen35;
    case TOK_PRE_GPT4O: return gpt4o;
    case TOK_PRE_TEKKEN: return tekken;
    case TOK_PRE_DEEPSEEK3: return deepseek3;
    case TOK_PRE_FALCON: return falcon;
    case TOK_PRE_KIMI_K2: return kimi_k2;
    case TOK_PRE_DEFAULT: break;
    }
    return def;
}

/* Cut cps[0..n) into words; *w gets their lengths in code points. */
static weft_status pretokenize(enum tok_pre pre, const uint32_t *cp, const unsigned *fl, size_t n,
                               struct words *w)
{
    struct words cur = { 0 }, next = { 0 };
    weft_status st = words_push(&cur, n);
    for (const matcher_fn *m = stages_of(pre); *m && !st; m++) {
        next.n = 0;
        size_t lo = 0;
        for (size_t i = 0; i < cur.n && !st; i++) {
            struct span s = { cp, fl, lo, lo + cur.len[i] };
            st = split_matcher(&s, *m, &next);
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

#undef L
#undef N
#undef P
#undef S
#undef M
#undef SYM

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
