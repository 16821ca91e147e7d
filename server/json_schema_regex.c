/* JSON Schema "pattern" -> weft grammar (weft_json_schema_regex in
 * server/json_schema.h).
 *
 * The pattern is parsed into a small tree (characters as sets of code-point
 * ranges, sequences, alternations, repetitions, the two anchors), then
 * written as one grammar expression over the JSON text of the string: every
 * character as its JSON encoding ('"' as \", '\' as \\, control characters
 * as \n, \t, ... or \u00XX), so the decoded string is what the pattern saw.
 *
 * Dialects: JSON Schema says ECMA-262; Pydantic checks with Rust's regex
 * crate (or Python's re), where \d, \w and \s are Unicode-aware and '.'
 * stops only at "\n". The grammar writes what every one of them accepts:
 * \d, \w, \s are their ASCII sets, '.' leaves out all four line
 * terminators, \D is non-digits below U+0600 (no Unicode digit there), \W
 * ASCII non-word characters, \S anything no dialect calls a space; a negated
 * class holding \d or \w is kept to that same range. Where the dialects read
 * a construct differently ("[]", "{,n}", "\a", "[[:alpha:]]", "&&" in a
 * class, possessive quantifiers) or a grammar cannot say it (lookaround,
 * backreferences, word boundaries, inline flags, anchors inside the
 * pattern), the pattern is refused naming the construct. */
#include "server/json_schema.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"

#define RX_INF UINT32_MAX
#define RX_NONE UINT32_MAX
#define RX_MAX_COUNT 10000u    /* the largest n or m in {n,m} */
#define RX_MAX_WEIGHT 50000u   /* all repetition counts together: the grammar expands them */
#define RX_MAX_NODES 20000u
#define RX_MAX_DEPTH 64u       /* nested groups */
#define CP_MAX 0x10FFFFu

struct range {
    uint32_t lo, hi;
};

/* A set of code points: ranges, sorted and disjoint once normalised. */
struct cset {
    struct range *r;
    uint32_t n, cap;
};

enum rx_kind { RX_CHARS, RX_SEQ, RX_ALT, RX_REP, RX_BOL, RX_EOL };

struct rx_node {
    enum rx_kind kind;
    struct cset set;              /* RX_CHARS: what the one character may be */
    uint32_t *kid, n_kid, cap_kid; /* RX_SEQ, RX_ALT: the parts; RX_REP: kid[0] repeated */
    uint32_t min, max;            /* RX_REP: {min,max}, max RX_INF when unbounded */
    uint32_t lo, hi;              /* characters in what it matches (hi RX_INF: no bound) */
};

struct rx {
    const unsigned char *s, *p, *end;
    struct rx_node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint64_t weight;
    unsigned depth;
    char *err;
    size_t err_size;
    bool failed;
};

static uint32_t rx_fail(struct rx *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static uint32_t rx_fail(struct rx *r, const char *fmt, ...)
{
    if (r->failed) return RX_NONE;
    r->failed = true;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int n = (int)(r->end - r->s);
    snprintf(r->err, r->err_size, "'pattern' '%.*s%s': %s", n > 48 ? 48 : n, (const char *)r->s, n > 48 ? "..." : "",
             what);
    return RX_NONE;
}

/* ---- code-point sets ---- */

static bool cset_add(struct cset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        struct range *t = weft_grow32(s->r, &s->cap, (size_t)s->n + 1, sizeof *t);
        if (!t) return false;
        s->r = t;
    }
    s->r[s->n++] = (struct range){lo, hi};
    return true;
}

static int range_cmp(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* sort, then merge overlapping and adjacent ranges */
static void cset_norm(struct cset *s)
{
    if (s->n < 2) return;
    qsort(s->r, s->n, sizeof *s->r, range_cmp);
    uint32_t k = 0;
    for (uint32_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) {
            if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi;
        } else {
            s->r[++k] = s->r[i];
        }
    }
    s->n = k + 1;
}

/* s := [0, CP_MAX] minus s */
static bool cset_invert(struct cset *s)
{
    cset_norm(s);
    struct cset o = {0};
    uint32_t next = 0;
    bool ok = true;
    for (uint32_t i = 0; i < s->n && ok; i++) {
        if (s->r[i].lo > next) ok = cset_add(&o, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (ok && next <= CP_MAX) ok = cset_add(&o, next, CP_MAX);
    free(s->r);
    *s = o;
    return ok;
}

/* s := s minus [lo, hi] */
static bool cset_remove(struct cset *s, uint32_t lo, uint32_t hi)
{
    cset_norm(s);
    uint32_t n = s->n;
    for (uint32_t i = 0; i < n; i++) {
        struct range x = s->r[i];
        if (x.hi < lo || x.lo > hi) continue;
        s->r[i].lo = 1, s->r[i].hi = 0;   /* emptied; dropped below */
        if (x.lo < lo && !cset_add(s, x.lo, lo - 1)) return false;
        if (x.hi > hi && !cset_add(s, hi + 1, x.hi)) return false;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->r[i].lo <= s->r[i].hi) s->r[k++] = s->r[i];
    s->n = k;
    cset_norm(s);
    return true;
}

static bool cset_has(const struct cset *s, uint32_t cp)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi) return true;
    return false;
}

/* What every dialect calls a space (the union): ECMA-262's \s, Python's
 * str.isspace(), Unicode White_Space. \S is the rest. */
static const struct range WIDE_SPACE[] = {{0x09, 0x0d}, {0x1c, 0x20}, {0x85, 0x85}, {0xa0, 0xa0},
                                          {0x1680, 0x1680}, {0x2000, 0x200a}, {0x2028, 0x2029},
                                          {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000},
                                          {0xfeff, 0xfeff}};

static bool cset_add_list(struct cset *s, const struct range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!cset_add(s, r[i].lo, r[i].hi)) return false;
    return true;
}

/* The set of shorthand c (d w s D W S), as every dialect accepts it. */
static bool cset_shorthand(struct cset *s, char c)
{
    static const struct range D[] = {{'0', '9'}}, W[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
                              S[] = {{0x09, 0x0d}, {' ', ' '}}, ND[] = {{0, '0' - 1}, {'9' + 1, 0x5ff}},
                              NW[] = {{0, '0' - 1}, {'9' + 1, 'A' - 1}, {'Z' + 1, '_' - 1}, {'`', '`'}, {'z' + 1, 0x7f}};
    switch (c) {
    case 'd': return cset_add_list(s, D, 1);
    case 'w': return cset_add_list(s, W, 4);
    case 's': return cset_add_list(s, S, 2);
    case 'D': return cset_add_list(s, ND, 2);
    case 'W': return cset_add_list(s, NW, 5);
    default: {  /* 'S' */
        struct cset t = {0};
        bool ok = cset_add_list(&t, WIDE_SPACE, sizeof WIDE_SPACE / sizeof *WIDE_SPACE) && cset_invert(&t);
        for (uint32_t i = 0; ok && i < t.n; i++) ok = cset_add(s, t.r[i].lo, t.r[i].hi);
        free(t.r);
        return ok;
    }
    }
}

/* ---- the tree ---- */

static uint32_t new_node(struct rx *r, enum rx_kind k)
{
    if (r->n_nodes >= RX_MAX_NODES) return rx_fail(r, "more than %u parts", RX_MAX_NODES);
    if (r->n_nodes == r->cap_nodes) {
        struct rx_node *t = weft_grow32(r->nodes, &r->cap_nodes, (size_t)r->n_nodes + 1, sizeof *t);
        if (!t) return rx_fail(r, "out of memory");
        r->nodes = t;
    }
    r->nodes[r->n_nodes] = (struct rx_node){.kind = k};
    return r->n_nodes++;
}

static bool add_kid(struct rx *r, uint32_t parent, uint32_t kid)
{
    struct rx_node *n = &r->nodes[parent];
    if (n->n_kid == n->cap_kid) {
        uint32_t *t = weft_grow32(n->kid, &n->cap_kid, (size_t)n->n_kid + 1, sizeof *t);
        if (!t) return rx_fail(r, "out of memory"), false;
        n->kid = t;
    }
    n->kid[n->n_kid++] = kid;
    return true;
}

/* A node for one character of set s (taken over). */
static uint32_t chars_node(struct rx *r, struct cset *s)
{
    if (!cset_remove(s, 0xD800, 0xDFFF)) {
        free(s->r);
        return rx_fail(r, "out of memory");
    }
    if (s->n == 0) {
        free(s->r);
        return rx_fail(r, "a character class that matches no character");
    }
    uint32_t i = new_node(r, RX_CHARS);
    if (i == RX_NONE) {
        free(s->r);
        return RX_NONE;
    }
    r->nodes[i].set = *s;
    return i;
}

static uint32_t char_node(struct rx *r, uint32_t cp)
{
    struct cset s = {0};
    if (!cset_add(&s, cp, cp)) return rx_fail(r, "out of memory");
    return chars_node(r, &s);
}

/* ---- parsing ---- */

static int hexval(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool is_alnum(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* p at '{': a quantifier {n}, {n,} or {n,m}? ({,m} is one in Python but text
 * in ECMA-262: refused by the caller.) */
static bool is_quantifier(const unsigned char *p, const unsigned char *end)
{
    const unsigned char *q = p + 1;
    if (q == end || !is_digit(*q)) return false;
    while (q < end && is_digit(*q)) q++;
    if (q < end && *q == ',') {
        q++;
        while (q < end && is_digit(*q)) q++;
    }
    return q < end && *q == '}';
}

static bool read_cp(struct rx *r, uint32_t *cp)
{
    int k = weft_utf8_decode(r->p, (size_t)(r->end - r->p), cp);
    if (!k) return rx_fail(r, "invalid UTF-8"), false;
    r->p += k;
    return true;
}

enum esc { ESC_FAIL, ESC_CHAR, ESC_SET, ESC_BOL, ESC_EOL };

/* The escape at r->p ('\'): one character (*cp), a set (added to *set),
 * or an anchor. neg_class: inside [^...], where \d and \w also narrow the
 * class's universe (*universe_hi) and \s takes every dialect's spaces. */
static enum esc parse_escape(struct rx *r, bool in_class, bool neg_class, struct cset *set, uint32_t *cp,
                             uint32_t *universe_hi)
{
    r->p++;
    if (r->p == r->end) return rx_fail(r, "a '\\' at the end"), ESC_FAIL;
    unsigned char c = *r->p++;
    int nhex = 0;
    switch (c) {
    case 'd': case 'w': case 's':
        if (neg_class && c == 's') {
            if (!cset_add_list(set, WIDE_SPACE, sizeof WIDE_SPACE / sizeof *WIDE_SPACE))
                return rx_fail(r, "out of memory"), ESC_FAIL;
            return ESC_SET;
        }
        if (neg_class && *universe_hi > (c == 'd' ? 0x5ffu : 0x7fu)) *universe_hi = c == 'd' ? 0x5ff : 0x7f;
        return cset_shorthand(set, (char)c) ? ESC_SET : (rx_fail(r, "out of memory"), ESC_FAIL);
    case 'D': case 'W': case 'S':
        if (neg_class) return rx_fail(r, "'\\%c' inside a negated class is not supported", c), ESC_FAIL;
        return cset_shorthand(set, (char)c) ? ESC_SET : (rx_fail(r, "out of memory"), ESC_FAIL);
    case 'b':
        if (in_class) {
            *cp = 0x08;
            return ESC_CHAR;
        }
        return rx_fail(r, "word boundary '\\b' is not supported"), ESC_FAIL;
    case 'B': return rx_fail(r, "word boundary '\\B' is not supported"), ESC_FAIL;
    case 'A': case 'z': case 'Z':
        if (in_class) return rx_fail(r, "anchor '\\%c' inside a class", c), ESC_FAIL;
        return c == 'A' ? ESC_BOL : ESC_EOL;
    case 't': *cp = '\t'; return ESC_CHAR;
    case 'n': *cp = '\n'; return ESC_CHAR;
    case 'r': *cp = '\r'; return ESC_CHAR;
    case 'f': *cp = '\f'; return ESC_CHAR;
    case 'v': *cp = '\v'; return ESC_CHAR;
    case '0':
        if (r->p < r->end && is_digit(*r->p)) return rx_fail(r, "octal escape '\\0%c' is not supported", *r->p), ESC_FAIL;
        *cp = 0;
        return ESC_CHAR;
    case 'k': return rx_fail(r, "backreference '\\k' is not supported"), ESC_FAIL;
    case 'p': case 'P': return rx_fail(r, "Unicode property escape '\\%c' is not supported", c), ESC_FAIL;
    case 'x': nhex = 2; break;
    case 'u': nhex = 4; break;
    case 'U': nhex = 8; break;
    default:
        if (is_digit(c)) return rx_fail(r, "backreference '\\%c' is not supported", c), ESC_FAIL;
        if (is_alnum(c)) return rx_fail(r, "escape '\\%c' is not supported", c), ESC_FAIL;
        r->p--;   /* an escaped punctuation or non-ASCII character: itself */
        return read_cp(r, cp) ? ESC_CHAR : ESC_FAIL;
    }
    uint32_t v = 0;
    for (int i = 0; i < nhex; i++) {
        int h = r->p < r->end ? hexval(*r->p) : -1;
        if (h < 0) return rx_fail(r, "escape '\\%c' needs %d hex digits", c, nhex), ESC_FAIL;
        v = v * 16 + (uint32_t)h;
        r->p++;
    }
    if (v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF))
        return rx_fail(r, "escape '\\%c%.*s' is not a Unicode scalar value (surrogate pairs are not supported)", c,
                       nhex, (const char *)r->p - nhex),
               ESC_FAIL;
    *cp = v;
    return ESC_CHAR;
}

static uint32_t parse_class(struct rx *r)
{
    r->p++;   /* '[' */
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    if (r->p < r->end && *r->p == ']')
        return rx_fail(r, "'[]' or a ']' first in a class is not supported (the dialects differ: write '\\]')");
    struct cset set = {0};
    uint32_t universe_hi = CP_MAX;
    for (;;) {
        if (r->p == r->end) goto bad_end;
        unsigned char c = *r->p;
        if (c == ']') {
            r->p++;
            break;
        }
        if (c == '[') {
            rx_fail(r, "'[' inside a class is not supported (a nested or POSIX class in some dialects: write '\\[')");
            goto fail;
        }
        if ((c == '&' || c == '~' || c == '-') && r->p + 1 < r->end && r->p[1] == c) {
            rx_fail(r, "'%c%c' inside a class is not supported (a set operation in some dialects)", c, c);
            goto fail;
        }
        uint32_t a, b;
        if (c == '\\') {
            enum esc e = parse_escape(r, true, neg, &set, &a, &universe_hi);
            if (e == ESC_FAIL) goto fail;
            if (e == ESC_SET) {
                if (r->p + 1 < r->end && r->p[0] == '-' && r->p[1] != ']') {
                    rx_fail(r, "a range from a class escape such as '\\d-' is not supported");
                    goto fail;
                }
                continue;
            }
        } else if (!read_cp(r, &a)) {
            goto fail;
        }
        b = a;
        if (r->p + 1 < r->end && r->p[0] == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '[') {
                rx_fail(r, "'[' inside a class is not supported (write '\\[')");
                goto fail;
            }
            if (*r->p == '\\') {
                enum esc e = parse_escape(r, true, neg, &set, &b, &universe_hi);
                if (e == ESC_FAIL) goto fail;
                if (e != ESC_CHAR) {
                    rx_fail(r, "a range to a class escape such as '-\\d' is not supported");
                    goto fail;
                }
            } else if (!read_cp(r, &b)) {
                goto fail;
            }
            if (b < a) {
                rx_fail(r, "a class range out of order (U+%04X-U+%04X)", a, b);
                goto fail;
            }
        }
        if (!cset_add(&set, a, b)) {
            rx_fail(r, "out of memory");
            goto fail;
        }
    }
    if (neg && (!cset_invert(&set) || (universe_hi < CP_MAX && !cset_remove(&set, universe_hi + 1, CP_MAX)))) {
        rx_fail(r, "out of memory");
        goto fail;
    }
    cset_norm(&set);
    return chars_node(r, &set);
bad_end:
    rx_fail(r, "a '[' with no ']'");
fail:
    free(set.r);
    return RX_NONE;
}

static uint32_t parse_alt(struct rx *r);

static uint32_t parse_group(struct rx *r)
{
    r->p++;   /* '(' */
    const unsigned char *q = r->p;
    size_t left = (size_t)(r->end - q);
    if (left >= 1 && q[0] == '?') {
        if (left >= 2 && q[1] == ':') r->p += 2;
        else if (left >= 2 && (q[1] == '=' || q[1] == '!'))
            return rx_fail(r, "lookahead '(?%c' is not supported", q[1]);
        else if (left >= 3 && q[1] == '<' && (q[2] == '=' || q[2] == '!'))
            return rx_fail(r, "lookbehind '(?<%c' is not supported", q[2]);
        else if (left >= 3 && q[1] == 'P' && q[2] == '=')
            return rx_fail(r, "backreference '(?P=' is not supported");
        else if ((left >= 3 && q[1] == 'P' && q[2] == '<') || (left >= 2 && q[1] == '<')) {
            /* a named group: (?P<name>...) or (?<name>...) */
            const unsigned char *e = q + (q[1] == 'P' ? 3 : 2);
            while (e < r->end && (is_alnum(*e) || *e == '_')) e++;
            if (e == r->end || *e != '>') return rx_fail(r, "a group name with no '>'");
            r->p = e + 1;
        } else if (left >= 2 && q[1] == '#') return rx_fail(r, "comment group '(?#' is not supported");
        else if (left >= 2 && q[1] == '>') return rx_fail(r, "atomic group '(?>' is not supported");
        else return rx_fail(r, "inline flags or group '(?%c' are not supported", left >= 2 ? q[1] : '?');
    }
    if (++r->depth > RX_MAX_DEPTH) return rx_fail(r, "groups nested deeper than %u", RX_MAX_DEPTH);
    uint32_t inner = parse_alt(r);
    r->depth--;
    if (inner == RX_NONE) return RX_NONE;
    if (r->p == r->end || *r->p != ')') return rx_fail(r, "a '(' with no ')'");
    r->p++;
    return inner;
}

static uint32_t parse_atom(struct rx *r)
{
    unsigned char c = *r->p;
    uint32_t cp;
    switch (c) {
    case '(': return parse_group(r);
    case '[': return parse_class(r);
    case '^': r->p++; return new_node(r, RX_BOL);
    case '$': r->p++; return new_node(r, RX_EOL);
    case '*': case '+': case '?': return rx_fail(r, "'%c' with nothing to repeat", c);
    case '.': {
        r->p++;
        struct cset s = {0};
        if (!cset_add(&s, '\n', '\n') || !cset_add(&s, '\r', '\r') || !cset_add(&s, 0x2028, 0x2029) ||
            !cset_invert(&s)) {
            free(s.r);
            return rx_fail(r, "out of memory");
        }
        return chars_node(r, &s);
    }
    case '{':
        if (is_quantifier(r->p, r->end)) return rx_fail(r, "a '{' quantifier with nothing to repeat");
        if (r->p + 2 < r->end && r->p[1] == ',' && is_digit(r->p[2]))
            return rx_fail(r, "quantifier '{,n}' is not supported (the dialects differ)");
        r->p++;
        return char_node(r, '{');
    case '\\': {
        struct cset s = {0};
        uint32_t uhi = CP_MAX;
        switch (parse_escape(r, false, false, &s, &cp, &uhi)) {
        case ESC_CHAR: return char_node(r, cp);
        case ESC_SET: cset_norm(&s); return chars_node(r, &s);
        case ESC_BOL: return new_node(r, RX_BOL);
        case ESC_EOL: return new_node(r, RX_EOL);
        default: free(s.r); return RX_NONE;
        }
    }
    default:
        if (!read_cp(r, &cp)) return RX_NONE;
        return char_node(r, cp);
    }
}

static bool read_count(struct rx *r, uint32_t *v)
{
    uint64_t x = 0;
    while (r->p < r->end && is_digit(*r->p)) {
        x = x * 10 + (uint64_t)(*r->p++ - '0');
        if (x > RX_MAX_COUNT) return rx_fail(r, "a repetition count above %u", RX_MAX_COUNT), false;
    }
    *v = (uint32_t)x;
    return true;
}

/* The quantifier after atom, if any (a lazy '?' after it changes nothing a
 * grammar can see). */
static uint32_t parse_quantifier(struct rx *r, uint32_t atom)
{
    if (r->p == r->end) return atom;
    unsigned char c = *r->p;
    uint32_t min, max;
    if (c == '*') min = 0, max = RX_INF;
    else if (c == '+') min = 1, max = RX_INF;
    else if (c == '?') min = 0, max = 1;
    else if (c == '{' && is_quantifier(r->p, r->end)) {
        r->p++;
        if (!read_count(r, &min)) return RX_NONE;
        max = min;
        if (*r->p == ',') {
            r->p++;
            max = RX_INF;
            if (*r->p != '}' && !read_count(r, &max)) return RX_NONE;
        }
        if (max < min) return rx_fail(r, "repetition {%u,%u}: the maximum is below the minimum", min, max);
    } else return atom;
    r->p++;   /* the quantifier's last character */
    if (r->nodes[atom].kind == RX_BOL || r->nodes[atom].kind == RX_EOL)
        return rx_fail(r, "a quantifier on an anchor is not supported");
    if (r->p < r->end && *r->p == '?') r->p++;
    else if (r->p < r->end && *r->p == '+') return rx_fail(r, "possessive quantifier '%c+' is not supported", c);
    if (r->p < r->end &&
        (*r->p == '*' || *r->p == '+' || *r->p == '?' || (*r->p == '{' && is_quantifier(r->p, r->end))))
        return rx_fail(r, "a quantifier after a quantifier ('%c%c') is not supported", c, *r->p);
    r->weight += max == RX_INF ? (uint64_t)min + 1 : max;
    if (r->weight > RX_MAX_WEIGHT) return rx_fail(r, "repetition counts add up to more than %u", RX_MAX_WEIGHT);
    uint32_t rep = new_node(r, RX_REP);
    if (rep == RX_NONE || !add_kid(r, rep, atom)) return RX_NONE;
    r->nodes[rep].min = min;
    r->nodes[rep].max = max;
    return rep;
}

static uint32_t parse_seq(struct rx *r)
{
    uint32_t seq = new_node(r, RX_SEQ);
    if (seq == RX_NONE) return RX_NONE;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        uint32_t a = parse_atom(r);
        if (a != RX_NONE) a = parse_quantifier(r, a);
        if (a == RX_NONE || !add_kid(r, seq, a)) return RX_NONE;
    }
    return seq;
}

static uint32_t parse_alt(struct rx *r)
{
    uint32_t first = parse_seq(r);
    if (first == RX_NONE || r->p == r->end || *r->p != '|') return first;
    uint32_t alt = new_node(r, RX_ALT);
    if (alt == RX_NONE || !add_kid(r, alt, first)) return RX_NONE;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        uint32_t k = parse_seq(r);
        if (k == RX_NONE || !add_kid(r, alt, k)) return RX_NONE;
    }
    return alt;
}

/* ---- lengths and checks ---- */

static uint32_t sat_add(uint32_t a, uint32_t b) { return a == RX_INF || b == RX_INF || a + b < a ? RX_INF : a + b; }

static uint32_t sat_mul(uint32_t a, uint32_t b)
{
    if (a == 0 || b == 0) return 0;
    if (a == RX_INF || b == RX_INF || (uint64_t)a * b >= RX_INF) return RX_INF;
    return a * b;
}

/* Sets lo/hi of node i and its parts; refuses an anchor inside the pattern
 * and an unbounded repetition of what can be empty (the grammar cannot say
 * it: (a*)* is a*, written so). */
static bool measure(struct rx *r, uint32_t i)
{
    struct rx_node *n = &r->nodes[i];
    switch (n->kind) {
    case RX_CHARS: n->lo = n->hi = 1; return true;
    case RX_BOL: case RX_EOL:
        return rx_fail(r, "an anchor ('^', '$', '\\A', '\\z') inside the pattern is not supported, only at its ends"),
               false;
    case RX_SEQ: case RX_ALT: {
        uint32_t lo = n->kind == RX_SEQ ? 0 : RX_INF, hi = 0;
        for (uint32_t k = 0; k < r->nodes[i].n_kid; k++) {
            uint32_t c = r->nodes[i].kid[k];
            if (!measure(r, c)) return false;
            const struct rx_node *m = &r->nodes[c];
            if (r->nodes[i].kind == RX_SEQ) lo = sat_add(lo, m->lo), hi = sat_add(hi, m->hi);
            else lo = m->lo < lo ? m->lo : lo, hi = m->hi > hi ? m->hi : hi;
        }
        n = &r->nodes[i];
        n->lo = lo;
        n->hi = hi;
        return true;
    }
    case RX_REP: {
        uint32_t c = n->kid[0];
        if (!measure(r, c)) return false;
        n = &r->nodes[i];
        const struct rx_node *m = &r->nodes[c];
        if (n->max == RX_INF && m->lo == 0)
            return rx_fail(r, "an unbounded repetition ('*', '+', '{n,}') of a part that can match nothing is not "
                              "supported"),
                   false;
        n->lo = sat_mul(m->lo, n->min);
        n->hi = n->max == RX_INF ? (m->hi ? RX_INF : 0) : sat_mul(m->hi, n->max);
        return true;
    }
    }
    return false;
}

/* ---- writing the grammar ---- */

/* Code point cp as JSON text inside a grammar literal. */
static void put_json_cp(struct weft_strbuf *b, uint32_t cp)
{
    static const char SHORT[] = "\bb\ff\nn\rr\tt";
    const char *s = cp && cp < 0x20 ? strchr(SHORT, (int)cp) : NULL;
    if (cp == '"') weft_sb_puts(b, "\\\\\\\"");           /* JSON \" */
    else if (cp == '\\') weft_sb_puts(b, "\\\\\\\\");     /* JSON \\ */
    else if (s) weft_sb_printf(b, "\\\\%c", s[1]);        /* JSON \n */
    else if (cp < 0x20) weft_sb_printf(b, "\\\\u%04x", cp); /* JSON \u001f */
    else if (cp == 0x7f) weft_sb_puts(b, "\\x7f");
    else if (cp < 0x80) weft_sb_putc(b, (char)cp);
    else if (cp <= 0xffff) weft_sb_printf(b, "\\u%04X", cp);
    else weft_sb_printf(b, "\\U%08X", cp);
}

/* Code point cp (never a control character, '"' or '\') inside a grammar class. */
static void put_class_cp(struct weft_strbuf *b, uint32_t cp)
{
    if (cp == ']' || cp == '-' || cp == '^' || cp == '[') weft_sb_printf(b, "\\%c", (char)cp);
    else if (cp == 0x7f) weft_sb_puts(b, "\\x7f");
    else if (cp < 0x80) weft_sb_putc(b, (char)cp);
    else if (cp <= 0xffff) weft_sb_printf(b, "\\u%04X", cp);
    else weft_sb_printf(b, "\\U%08X", cp);
}

/* One character of set s as JSON text: the characters that stand for
 * themselves as a class, the others as their escapes. */
static bool put_set(struct rx *r, struct weft_strbuf *b, const struct cset *s)
{
    struct cset raw = {0};
    for (uint32_t i = 0; i < s->n; i++)
        if (!cset_add(&raw, s->r[i].lo, s->r[i].hi)) goto oom;
    if (!cset_remove(&raw, 0, 0x1f) || !cset_remove(&raw, '"', '"') || !cset_remove(&raw, '\\', '\\')) goto oom;
    /* the control characters with no short escape, by their \u00X_ digit */
    unsigned long_ctl[2] = {0, 0};
    for (uint32_t cp = 0; cp < 0x20; cp++)
        if (cset_has(s, cp) && (cp == 0 || !strchr("\b\f\n\r\t", (int)cp))) long_ctl[cp >> 4] |= 1u << (cp & 15);
    struct weft_strbuf alts = {0};
    unsigned n_alts = 0;
    if (raw.n == 1 && raw.r[0].lo == raw.r[0].hi) {
        weft_sb_putc(&alts, '"');
        put_json_cp(&alts, raw.r[0].lo);
        weft_sb_putc(&alts, '"');
        n_alts++;
    } else if (raw.n) {
        weft_sb_putc(&alts, '[');
        for (uint32_t i = 0; i < raw.n; i++) {
            put_class_cp(&alts, raw.r[i].lo);
            if (raw.r[i].hi == raw.r[i].lo) continue;
            if (raw.r[i].hi > raw.r[i].lo + 1) weft_sb_putc(&alts, '-');
            put_class_cp(&alts, raw.r[i].hi);
        }
        weft_sb_putc(&alts, ']');
        n_alts++;
    }
    static const char ESCAPED[] = "\"\\\b\f\n\r\t";   /* JSON's two-character escapes */
    for (const char *e = ESCAPED; *e; e++) {
        if (!cset_has(s, (uint32_t)*e)) continue;
        weft_sb_printf(&alts, "%s\"", n_alts++ ? " | " : "");
        put_json_cp(&alts, (uint32_t)*e);
        weft_sb_putc(&alts, '"');
    }
    for (int h = 0; h < 2; h++) {
        if (!long_ctl[h]) continue;
        weft_sb_printf(&alts, "%s\"\\\\u00%d\" [", n_alts++ ? " | " : "", h);
        for (unsigned d = 0; d < 16; d++)
            if (long_ctl[h] >> d & 1) {
                if (d < 10) weft_sb_putc(&alts, (char)('0' + d));
                else weft_sb_printf(&alts, "%c%c", 'a' + d - 10, 'A' + d - 10);
            }
        weft_sb_putc(&alts, ']');
    }
    free(raw.r);
    if (alts.oom) {
        weft_sb_free(&alts);
        return rx_fail(r, "out of memory"), false;
    }
    weft_sb_printf(b, n_alts > 1 ? "(%s)" : "%s", alts.p ? alts.p : "\"\"");
    weft_sb_free(&alts);
    return true;
oom:
    free(raw.r);
    return rx_fail(r, "out of memory"), false;
}

static bool put_node(struct rx *r, struct weft_strbuf *b, uint32_t i);

/* Parts from..to of a sequence, runs of single characters as one literal. */
static bool put_items(struct rx *r, struct weft_strbuf *b, const uint32_t *kid, uint32_t from, uint32_t to)
{
    bool in_lit = false, any = false;
    for (uint32_t k = from; k < to; k++) {
        const struct rx_node *n = &r->nodes[kid[k]];
        bool single = n->kind == RX_CHARS && n->set.n == 1 && n->set.r[0].lo == n->set.r[0].hi;
        if (single) {
            if (!in_lit) weft_sb_puts(b, any ? " \"" : "\"");
            put_json_cp(b, n->set.r[0].lo);
            in_lit = any = true;
            continue;
        }
        if (in_lit) weft_sb_putc(b, '"');
        in_lit = false;
        if (any) weft_sb_putc(b, ' ');
        any = true;
        if (!put_node(r, b, kid[k])) return false;
    }
    if (in_lit) weft_sb_putc(b, '"');
    if (!any) weft_sb_puts(b, "\"\"");
    return true;
}

static bool put_node(struct rx *r, struct weft_strbuf *b, uint32_t i)
{
    const struct rx_node *n = &r->nodes[i];
    switch (n->kind) {
    case RX_CHARS: return put_set(r, b, &n->set);
    case RX_SEQ:
        if (n->n_kid > 1) weft_sb_putc(b, '(');
        if (!put_items(r, b, n->kid, 0, n->n_kid)) return false;
        if (n->n_kid > 1) weft_sb_putc(b, ')');
        return true;
    case RX_ALT:
        weft_sb_putc(b, '(');
        for (uint32_t k = 0; k < n->n_kid; k++) {
            if (k) weft_sb_puts(b, " | ");
            if (!put_node(r, b, r->nodes[i].kid[k])) return false;
        }
        weft_sb_putc(b, ')');
        return true;
    case RX_REP: {
        uint32_t min = n->min, max = n->max;
        if (max == 0) {
            weft_sb_puts(b, "\"\"");
            return true;
        }
        weft_sb_putc(b, '(');
        if (!put_node(r, b, n->kid[0])) return false;
        weft_sb_putc(b, ')');
        if (min == 0 && max == RX_INF) weft_sb_putc(b, '*');
        else if (min == 1 && max == RX_INF) weft_sb_putc(b, '+');
        else if (min == 0 && max == 1) weft_sb_putc(b, '?');
        else if (min == max) weft_sb_printf(b, "{%u}", min);
        else if (max == RX_INF) weft_sb_printf(b, "{%u,}", min);
        else weft_sb_printf(b, "{%u,%u}", min, max);
        return true;
    }
    default: return rx_fail(r, "an anchor inside the pattern"), false;
    }
}

/* One top-level alternative: its parts kid[from..to), whether '^' / '$'
 * held it at each end. */
struct branch {
    const uint32_t *kid;
    uint32_t from, to;
    bool bol, eol;
    uint32_t lo, hi;   /* characters, the free text at unanchored ends counted */
};

/* minLength/maxLength on a pattern: kept when the pattern's own lengths
 * already lie in [mn, mx]; else, for one anchored alternative whose length
 * varies in one repetition of a fixed-length part (^[A-Z][a-z]+$,
 * ^\d{3,}$), that repetition's counts are narrowed to fit; else refused. */
static bool fit_lengths(struct rx *r, struct branch *br, uint32_t n_br, long long mn, long long mx)
{
    uint32_t lo = RX_INF, hi = 0;
    for (uint32_t k = 0; k < n_br; k++) {
        lo = br[k].lo < lo ? br[k].lo : lo;
        hi = br[k].hi > hi ? br[k].hi : hi;
    }
    if ((mn < 0 || lo >= mn) && (mx < 0 || (hi != RX_INF && hi <= mx))) return true;
    const struct branch *b = &br[0];
    bool shaped = n_br == 1 && b->bol && b->eol;
    uint32_t var = RX_NONE, fixed = 0;
    for (uint32_t k = b->from; shaped && k < b->to; k++) {
        const struct rx_node *n = &r->nodes[b->kid[k]];
        if (n->lo == n->hi) fixed += n->lo;
        else if (var == RX_NONE && n->kind == RX_REP && r->nodes[n->kid[0]].lo == r->nodes[n->kid[0]].hi)
            var = b->kid[k];
        else shaped = false;   /* two varying parts, or one of another shape */
    }
    if (!shaped)
        return rx_fail(r, "'minLength'/'maxLength' beside this pattern are not supported (only with one anchored "
                          "alternative whose length varies in one repetition, e.g. ^[a-z]{2,}$)"),
               false;
    if (var == RX_NONE)
        return rx_fail(r, "no text matching the pattern has a length within 'minLength'..'maxLength'"), false;
    struct rx_node *v = &r->nodes[var];
    long long unit = r->nodes[v->kid[0]].lo, cmin = v->min, cmax = v->max;
    bool unbounded = v->max == RX_INF;
    if (mn > (long long)fixed) {
        long long need = (mn - (long long)fixed + unit - 1) / unit;
        if (need > cmin) cmin = need;
    }
    if (mx >= 0) {
        long long room = mx < (long long)fixed ? -1 : (mx - (long long)fixed) / unit;
        if (unbounded || room < cmax) cmax = room;
        unbounded = false;
    }
    if (!unbounded && cmax < cmin)
        return rx_fail(r, "no text matching the pattern has a length within 'minLength'..'maxLength'"), false;
    if (cmin > RX_MAX_COUNT || (!unbounded && cmax > RX_MAX_COUNT))
        return rx_fail(r, "'minLength'/'maxLength' make a repetition count above %u", RX_MAX_COUNT), false;
    v->min = (uint32_t)cmin;
    v->max = unbounded ? RX_INF : (uint32_t)cmax;
    return true;
}

bool weft_json_schema_regex(const char *pattern, size_t len, long long min_len, long long max_len,
                            struct weft_strbuf *out, char *err, size_t err_size)
{
    struct rx r = {.s = (const unsigned char *)pattern, .p = (const unsigned char *)pattern,
                   .end = (const unsigned char *)pattern + len, .err = err, .err_size = err_size};
    struct branch *br = NULL;
    bool ok = false;
    uint32_t root = parse_alt(&r);
    if (root == RX_NONE) goto done;
    if (r.p != r.end) {
        rx_fail(&r, "a ')' with no '('");
        goto done;
    }
    /* the top-level alternatives, each a sequence, anchors stripped from its ends */
    const struct rx_node *top = &r.nodes[root];
    uint32_t n_br = top->kind == RX_ALT ? top->n_kid : 1;
    br = calloc(n_br, sizeof *br);
    if (!br) {
        rx_fail(&r, "out of memory");
        goto done;
    }
    for (uint32_t k = 0; k < n_br; k++) {
        const struct rx_node *s = &r.nodes[top->kind == RX_ALT ? top->kid[k] : root];
        struct branch *b = &br[k];
        b->kid = s->kid;
        b->to = s->n_kid;
        while (b->from < b->to && r.nodes[b->kid[b->from]].kind == RX_BOL) b->from++, b->bol = true;
        while (b->to > b->from && r.nodes[b->kid[b->to - 1]].kind == RX_EOL) b->to--, b->eol = true;
        for (uint32_t j = b->from; j < b->to; j++) {
            if (!measure(&r, b->kid[j])) goto done;
            b->lo = sat_add(b->lo, r.nodes[b->kid[j]].lo);
            b->hi = sat_add(b->hi, r.nodes[b->kid[j]].hi);
        }
        if (!b->bol || !b->eol) b->hi = RX_INF;
    }
    if ((min_len >= 0 || max_len >= 0) && !fit_lengths(&r, br, n_br, min_len, max_len)) goto done;
    /* unanchored ends take any text: JSON Schema patterns match anywhere */
    if (n_br > 1) weft_sb_putc(out, '(');
    for (uint32_t k = 0; k < n_br; k++) {
        const struct branch *b = &br[k];
        if (k) weft_sb_puts(out, " | ");
        if (b->from == b->to && (!b->bol || !b->eol)) {
            weft_sb_puts(out, "j-char*");
            continue;
        }
        if (!b->bol) weft_sb_puts(out, "j-char* ");
        if (!put_items(&r, out, b->kid, b->from, b->to)) goto done;
        if (!b->eol) weft_sb_puts(out, " j-char*");
    }
    if (n_br > 1) weft_sb_putc(out, ')');
    ok = !r.failed;
done:
    for (uint32_t i = 0; i < r.n_nodes; i++) {
        free(r.nodes[i].set.r);
        free(r.nodes[i].kid);
    }
    free(r.nodes);
    free(br);
    return ok;
}
