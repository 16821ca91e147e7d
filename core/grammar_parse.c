/* Grammar text -> compiled rules (core/grammar_internal.h).
 *
 * One pass of recursive descent over the text builds each rule's elements;
 * groups and repetitions become generated rules on the way. Then three
 * checks over the rule graph: every referenced rule is defined, every rule
 * reachable from root can end (is productive), and no rule reaches itself
 * before consuming a character (left recursion, which includes `*` over
 * something that matches the empty string): the state expansion in
 * grammar.c relies on both to terminate. */
#include "core/grammar_internal.h"
#include "base/buf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"

#define REP_MAX 65535u      /* largest n or m in {n,m} */
#define REP_INF UINT32_MAX

struct vec {
    struct gelem *v;
    uint32_t n, cap;
};

struct prule {
    char *name;             /* user rule; NULL for a generated one */
    uint32_t parent;        /* generated: the user rule it came from */
    struct vec el;
    bool defined;
    size_t def_at, use_at;  /* byte offsets for messages (use_at: first reference) */
};

struct parser {
    const char *s, *p, *end;
    struct prule *r;
    uint32_t n_r, cap_r;
    /* user rules by name: open addressing, ids + 1 (0 empty), at most half full */
    uint32_t *names;
    uint32_t names_mask, n_names;
    uint64_t compares;      /* name comparisons made (weft_grammar_compile_compares) */
    bool too_big;           /* past WEFT_GRAMMAR_MAX_RULES: the nomem() that follows is not memory */
    uint32_t *cls;
    uint32_t n_cls, cap_cls;
    uint32_t cur;           /* the user rule being parsed */
};

/* ---- errors ---- */

static weft_status perr(const struct parser *P, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static weft_status perr(const struct parser *P, const char *at, const char *fmt, ...)
{
    int line = 1, col = 1;
    for (const char *q = P->s; q < at && q < P->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)*q & 0xc0) != 0x80) {
            col++;   /* columns count characters, not UTF-8 continuation bytes */
        }
    }
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return weft_error(WEFT_ERR_FORMAT, "grammar: %d:%d: %s", line, col, msg);
}

static weft_status nomem(void) { return weft_error(WEFT_ERR_NOMEM, "grammar: out of memory"); }

/* A rule's name for messages. */
static const char *rule_desc(const struct parser *P, uint32_t r, char *buf, size_t n)
{
    if (P->r[r].name)
        snprintf(buf, n, "'%s'", P->r[r].name);
    else
        snprintf(buf, n, "a group or repetition in '%s'", P->r[P->r[r].parent].name);
    return buf;
}

/* ---- building blocks ---- */

static bool vec_push(struct vec *v, uint32_t type, uint32_t val)
{
    if (v->n == v->cap) {
        struct gelem *e = weft_grow32(v->v, &v->cap, (size_t)v->n + 1, sizeof *e);
        if (!e) return false;
        v->v = e;
    }
    v->v[v->n++] = (struct gelem){type, val};
    return true;
}

static bool new_rule(struct parser *P, char *name, uint32_t *id)
{
    if (P->n_r >= WEFT_GRAMMAR_MAX_RULES) {
        P->too_big = true;
        return false;
    }
    if (P->n_r == P->cap_r) {
        struct prule *r = weft_grow32(P->r, &P->cap_r, (size_t)P->n_r + 1, sizeof *r);
        if (!r) return false;
        P->r = r;
    }
    *id = P->n_r++;
    P->r[*id] = (struct prule){.name = name, .parent = P->cur};
    return true;
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Room for one more name in the table (kept at most half full). */
static bool names_room(struct parser *P)
{
    if (2 * (P->n_names + 1) <= P->names_mask + 1 && P->names) return true;
    uint32_t cap = P->names ? 2 * (P->names_mask + 1) : 64;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (uint32_t i = 0; P->names && i <= P->names_mask; i++) {
        if (!P->names[i]) continue;
        const char *nm = P->r[P->names[i] - 1].name;
        uint32_t k = name_hash(nm, strlen(nm)) & (cap - 1);
        while (t[k]) k = (k + 1) & (cap - 1);
        t[k] = P->names[i];
    }
    free(P->names);
    P->names = t;
    P->names_mask = cap - 1;
    return true;
}

/* The rule named s[0..n), created (undefined) on first mention: one hash
 * probe sequence, so compiling is linear in the grammar's size (a schema of
 * thousands of properties makes thousands of names). */
static weft_status sym(struct parser *P, const char *s, size_t n, uint32_t *id)
{
    if (!names_room(P)) return nomem();
    uint32_t k = name_hash(s, n) & P->names_mask;
    for (; P->names[k]; k = (k + 1) & P->names_mask) {
        const char *nm = P->r[P->names[k] - 1].name;
        P->compares++;
        if (strlen(nm) == n && !memcmp(nm, s, n)) {
            *id = P->names[k] - 1;
            return WEFT_OK;
        }
    }
    char *name = malloc(n + 1);
    if (!name) return nomem();
    memcpy(name, s, n);
    name[n] = '\0';
    if (!new_rule(P, name, id)) {
        free(name);
        return nomem();
    }
    P->names[k] = *id + 1;
    P->n_names++;
    P->r[*id].use_at = (size_t)-1;
    return WEFT_OK;
}

/* A generated rule holding v's elements (v is moved in). */
static weft_status gen_rule(struct parser *P, struct vec *v, uint32_t *id)
{
    if (!new_rule(P, NULL, id)) return nomem();
    P->r[*id].el = *v;
    P->r[*id].defined = true;
    *v = (struct vec){0};
    return WEFT_OK;
}

struct range {
    uint32_t lo, hi;
};

static int range_cmp(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Append a class (ranges sorted and merged here; complemented over
 * U+0000..U+10FFFF when neg) and return its offset in *off. */
static bool add_class(struct parser *P, struct range *rg, uint32_t n, bool neg, uint32_t *off)
{
    if (n > 1) qsort(rg, n, sizeof *rg, range_cmp);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m && rg[i].lo <= rg[m - 1].hi + 1) {
            if (rg[i].hi > rg[m - 1].hi) rg[m - 1].hi = rg[i].hi;
        } else {
            rg[m++] = rg[i];
        }
    }
    uint32_t need = 1 + 2 * (m + 1);
    if (P->n_cls + need > P->cap_cls) {
        uint32_t cap = (P->cap_cls ? P->cap_cls * 2 : 256) + need;
        uint32_t *c = realloc(P->cls, sizeof *c * cap);
        if (!c) return false;
        P->cls = c;
        P->cap_cls = cap;
    }
    *off = P->n_cls;
    uint32_t *c = P->cls + P->n_cls, k = 0;
    if (!neg) {
        for (uint32_t i = 0; i < m; i++) {
            c[1 + 2 * k] = rg[i].lo;
            c[2 + 2 * k++] = rg[i].hi;
        }
    } else {
        uint32_t next = 0;   /* first code point not yet covered */
        for (uint32_t i = 0; i < m; i++) {
            if (rg[i].lo > next) {
                c[1 + 2 * k] = next;
                c[2 + 2 * k++] = rg[i].lo - 1;
            }
            next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF) {
            c[1 + 2 * k] = next;
            c[2 + 2 * k++] = 0x10FFFF;
        }
    }
    c[0] = k;
    P->n_cls += 1 + 2 * k;
    return true;
}

/* ---- lexing ---- */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_space(struct parser *P)
{
    while (P->p < P->end) {
        char c = *P->p;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            P->p++;
        } else if (c == '#') {
            while (P->p < P->end && *P->p != '\n') P->p++;
        } else {
            break;
        }
    }
}

/* At `name ::=` (the start of the next rule)? */
static bool at_rule_start(const struct parser *P)
{
    const char *q = P->p;
    while (q < P->end && name_char(*q)) q++;
    if (q == P->p) return false;
    while (q < P->end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
    return P->end - q >= 3 && !memcmp(q, "::=", 3);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class at P->p (an escape or a UTF-8
 * character) into *cp. */
static weft_status read_char(struct parser *P, bool in_class, uint32_t *cp)
{
    const char *at = P->p;
    if (*P->p != '\\') {
        int k = weft_utf8_decode((const unsigned char *)P->p, (size_t)(P->end - P->p), cp);
        if (!k) return perr(P, at, "invalid UTF-8 in the grammar text");
        P->p += k;
        return WEFT_OK;
    }
    P->p++;
    if (P->p == P->end) return perr(P, at, "expected an escape after '\\', got the end of the text");
    char c = *P->p++;
    int nhex = 0;
    switch (c) {
    case '"': *cp = '"'; return WEFT_OK;
    case '\\': *cp = '\\'; return WEFT_OK;
    case '/': *cp = '/'; return WEFT_OK;
    case 'n': *cp = '\n'; return WEFT_OK;
    case 'r': *cp = '\r'; return WEFT_OK;
    case 't': *cp = '\t'; return WEFT_OK;
    case 'x': nhex = 2; break;
    case 'u': nhex = 4; break;
    case 'U': nhex = 8; break;
    case ']': case '-': case '^': case '[':
        if (in_class) {
            *cp = (uint32_t)c;
            return WEFT_OK;
        }
        /* fall through */
    default:
        return perr(P, at, "expected an escape (\\\" \\\\ \\/ \\n \\r \\t \\xHH \\uHHHH \\UHHHHHHHH%s) after '\\'",
                    in_class ? " \\] \\- \\^ \\[" : "");
    }
    uint32_t v = 0;
    for (int i = 0; i < nhex; i++) {
        int h = P->p < P->end ? hexval(*P->p) : -1;
        if (h < 0) return perr(P, P->p, "expected %d hex digits after '\\%c'", nhex, c);
        v = v * 16 + (uint32_t)h;
        P->p++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return perr(P, at, "escape \\%c%.*s is not a Unicode scalar value", c, nhex, P->p - nhex);
    *cp = v;
    return WEFT_OK;
}

/* ---- atoms ---- */

static weft_status parse_literal(struct parser *P, struct vec *out)
{
    const char *at = P->p++;
    for (;;) {
        if (P->p == P->end) return perr(P, at, "unterminated literal: expected '\"'");
        if (*P->p == '"') {
            P->p++;
            return WEFT_OK;
        }
        uint32_t cp, off;
        weft_status st = read_char(P, false, &cp);
        if (st != WEFT_OK) return st;
        struct range r = {cp, cp};
        if (!add_class(P, &r, 1, false, &off) || !vec_push(out, GE_CHARS, off)) return nomem();
    }
}

static weft_status parse_class(struct parser *P, struct vec *out)
{
    const char *at = P->p++;
    bool neg = P->p < P->end && *P->p == '^';
    if (neg) P->p++;
    struct range *rg = NULL;
    uint32_t n = 0, cap = 0;
    weft_status st = WEFT_OK;
    for (;;) {
        if (P->p == P->end) {
            st = perr(P, at, "unterminated character class: expected ']'");
            break;
        }
        if (*P->p == ']') {
            P->p++;
            break;
        }
        uint32_t a, b;
        if ((st = read_char(P, true, &a)) != WEFT_OK) break;
        b = a;
        if (P->end - P->p >= 2 && P->p[0] == '-' && P->p[1] != ']') {
            const char *dash = P->p++;
            if ((st = read_char(P, true, &b)) != WEFT_OK) break;
            if (b < a) {
                st = perr(P, dash, "range end U+%04X is below its start U+%04X", b, a);
                break;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            struct range *t = realloc(rg, sizeof *t * cap);
            if (!t) {
                st = nomem();
                break;
            }
            rg = t;
        }
        rg[n++] = (struct range){a, b};
    }
    uint32_t off;
    if (st == WEFT_OK && (!add_class(P, rg, n, neg, &off) || !vec_push(out, GE_CHARS, off))) st = nomem();
    free(rg);
    return st;
}

static weft_status read_count(struct parser *P, uint32_t *v)
{
    skip_space(P);
    const char *at = P->p;
    uint64_t x = 0;
    while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
        x = x * 10 + (uint64_t)(*P->p - '0');
        if (x > REP_MAX) return perr(P, at, "repetition count above %u", REP_MAX);
        P->p++;
    }
    if (P->p == at) return perr(P, at, "expected a number in {n}, {n,} or {n,m}");
    *v = (uint32_t)x;
    skip_space(P);
    return WEFT_OK;
}

/* Repeat out[last..n) min..max times (max REP_INF: unbounded). */
static weft_status repeat(struct parser *P, struct vec *out, uint32_t last, uint32_t min, uint32_t max)
{
    uint32_t n_atom = out->n - last;
    if (n_atom == 0) return WEFT_OK;   /* "" repeated: still nothing */
    struct gelem atom = out->v[last];
    weft_status st;
    if (n_atom > 1) {   /* a literal of several characters: its own rule */
        struct vec v = {0};
        for (uint32_t i = last; i < out->n; i++)
            if (!vec_push(&v, out->v[i].type, out->v[i].v)) { free(v.v); return nomem(); }
        uint32_t id;
        if (!vec_push(&v, GE_END, 0)) { free(v.v); return nomem(); }
        if ((st = gen_rule(P, &v, &id)) != WEFT_OK) { free(v.v); return st; }
        atom = (struct gelem){GE_REF, id};
    }
    out->n = last;
    for (uint32_t i = 0; i < min; i++)
        if (!vec_push(out, atom.type, atom.v)) return nomem();
    if (max == min) return WEFT_OK;
    uint32_t id, prev = 0;
    uint32_t n_rules = max == REP_INF ? 1 : max - min;
    for (uint32_t k = 0; k < n_rules; k++) {
        /* R ::= atom R | (empty)  for *;  R_k ::= atom R_(k-1) | (empty)  for {n,m} */
        struct vec v = {0};
        id = P->n_r;
        bool ok = vec_push(&v, atom.type, atom.v);
        if (ok && max == REP_INF) ok = vec_push(&v, GE_REF, id);
        else if (ok && k > 0) ok = vec_push(&v, GE_REF, prev);
        ok = ok && vec_push(&v, GE_ALT, 0) && vec_push(&v, GE_END, 0);
        if (!ok) { free(v.v); return nomem(); }
        if ((st = gen_rule(P, &v, &id)) != WEFT_OK) { free(v.v); return st; }
        prev = id;
    }
    return vec_push(out, GE_REF, prev) ? WEFT_OK : nomem();
}

static weft_status parse_alts(struct parser *P, struct vec *out, bool nested);

static weft_status parse_seq(struct parser *P, struct vec *out, bool nested)
{
    uint32_t last = UINT32_MAX;   /* where the last atom's elements start */
    weft_status st = WEFT_OK;
    for (;;) {
        skip_space(P);
        if (P->p == P->end) break;
        char c = *P->p;
        const char *at = P->p;
        if (c == '|') break;
        if (c == ')') {
            if (nested) break;
            return perr(P, at, "unexpected ')' with no group open");
        }
        if (at_rule_start(P)) {
            if (nested) return perr(P, at, "expected ')' before the next rule");
            break;
        }
        if (c == '"') {
            last = out->n;
            st = parse_literal(P, out);
        } else if (c == '[') {
            last = out->n;
            st = parse_class(P, out);
        } else if (name_char(c)) {
            while (P->p < P->end && name_char(*P->p)) P->p++;
            uint32_t id;
            last = out->n;
            if ((st = sym(P, at, (size_t)(P->p - at), &id)) == WEFT_OK) {
                if (P->r[id].use_at == (size_t)-1) P->r[id].use_at = (size_t)(at - P->s);
                if (!vec_push(out, GE_REF, id)) st = nomem();
            }
        } else if (c == '(') {
            P->p++;
            struct vec g = {0};
            uint32_t id;
            last = out->n;
            st = parse_alts(P, &g, true);
            if (st == WEFT_OK && (P->p == P->end || *P->p != ')'))
                st = perr(P, P->p, "expected ')' to close the group");
            if (st == WEFT_OK) {
                P->p++;
                st = gen_rule(P, &g, &id);
            }
            if (st == WEFT_OK && !vec_push(out, GE_REF, id)) st = nomem();
            free(g.v);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == UINT32_MAX) return perr(P, at, "expected something to repeat before '%c'", c);
            uint32_t min = 0, max = REP_INF;
            P->p++;
            if (c == '+') min = 1;
            else if (c == '?') max = 1;
            else if (c == '{') {
                if ((st = read_count(P, &min)) != WEFT_OK) return st;
                max = min;
                if (P->p < P->end && *P->p == ',') {
                    P->p++;
                    skip_space(P);
                    max = REP_INF;
                    if (P->p < P->end && *P->p != '}' && (st = read_count(P, &max)) != WEFT_OK) return st;
                }
                if (P->p == P->end || *P->p != '}') return perr(P, P->p, "expected '}' to close the repetition");
                P->p++;
                if (max < min) return perr(P, at, "repetition {%u,%u}: the maximum is below the minimum", min, max);
            }
            st = repeat(P, out, last, min, max);
        } else {
            return perr(P, at, "expected a literal, a [class], a rule name, '(' or a repetition, got '%c'", c);
        }
        if (st != WEFT_OK) return st;
    }
    return WEFT_OK;
}

static weft_status parse_alts(struct parser *P, struct vec *out, bool nested)
{
    for (;;) {
        weft_status st = parse_seq(P, out, nested);
        if (st != WEFT_OK) return st;
        if (P->p < P->end && *P->p == '|') {
            P->p++;
            if (!vec_push(out, GE_ALT, 0)) return nomem();
            continue;
        }
        return vec_push(out, GE_END, 0) ? WEFT_OK : nomem();
    }
}

/* ---- checks over the rule graph ---- */

/* Fixpoint: nullable (some alternative of only nullable elements) when
 * prod is false, productive (some alternative of only characters and
 * productive rules) when true. */
static void fixpoint(const struct parser *P, bool *flag, bool prod)
{
    memset(flag, 0, P->n_r * sizeof *flag);
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < P->n_r; r++) {
            if (flag[r]) continue;
            const struct vec *v = &P->r[r].el;
            bool alt_ok = true;
            for (uint32_t i = 0; i < v->n; i++) {
                const struct gelem *e = &v->v[i];
                if (e->type == GE_ALT || e->type == GE_END) {
                    if (alt_ok) {
                        flag[r] = changed = true;
                        break;
                    }
                    alt_ok = true;
                } else if (e->type == GE_CHARS) {
                    if (!prod) alt_ok = false;
                } else if (!flag[e->v]) {
                    alt_ok = false;
                }
            }
        }
    }
}

static weft_status check_graph(struct parser *P, uint32_t root)
{
    uint32_t n = P->n_r;
    bool *nullable = malloc(n * sizeof *nullable), *prod = malloc(n * sizeof *prod);
    uint8_t *color = calloc(n, 1);   /* reachability, then DFS colours */
    uint32_t *stk = malloc(2 * (size_t)n * sizeof *stk + 2 * sizeof *stk);
    weft_status st = WEFT_OK;
    char d[160];
    if (!nullable || !prod || !color || !stk) {
        st = nomem();
        goto out;
    }
    fixpoint(P, nullable, false);
    fixpoint(P, prod, true);
    /* reachable from root: every one must be productive */
    uint32_t sp = 0;
    stk[sp++] = root;
    color[root] = 1;
    while (sp) {
        uint32_t r = stk[--sp];
        if (!prod[r]) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "grammar: rule %s can never end: each alternative needs itself (or "
                            "another such rule) again", rule_desc(P, r, d, sizeof d));
            goto out;
        }
        const struct vec *v = &P->r[r].el;
        for (uint32_t i = 0; i < v->n; i++)
            if (v->v[i].type == GE_REF && !color[v->v[i].v]) {
                color[v->v[i].v] = 1;
                stk[sp++] = v->v[i].v;
            }
    }
    /* left recursion: a cycle of "r may start with s" edges (s referenced
     * after only nullable elements). Iterative DFS: colour 2 on the path, 3
     * done; stk holds (rule, next element to look at) pairs. */
    for (uint32_t s0 = 0; s0 < n; s0++) {
        if (color[s0] != 1) continue;
        sp = 0;
        stk[sp++] = s0;
        stk[sp++] = 0;
        color[s0] = 2;
        while (sp) {
            uint32_t r = stk[sp - 2], i = stk[sp - 1];
            const struct vec *v = &P->r[r].el;
            bool pushed = false;
            while (i < v->n && !pushed) {
                /* is element i at the start of its alternative, after nullable ones only? */
                const struct gelem *e = &v->v[i];
                bool lead = true;
                for (uint32_t j = i; j-- > 0;) {
                    const struct gelem *f = &v->v[j];
                    if (f->type == GE_ALT) break;
                    if (f->type == GE_CHARS || (f->type == GE_REF && !nullable[f->v])) { lead = false; break; }
                }
                i++;
                if (e->type != GE_REF || !lead) continue;
                if (color[e->v] == 2) {
                    st = weft_error(WEFT_ERR_INVALID_ARG, "grammar: rule %s is left-recursive (it can reach itself "
                                    "before matching any character)", rule_desc(P, e->v, d, sizeof d));
                    goto out;
                }
                if (color[e->v] == 1) {
                    stk[sp - 1] = i;
                    stk[sp++] = e->v;
                    stk[sp++] = 0;
                    color[e->v] = 2;
                    pushed = true;
                }
            }
            if (!pushed) {
                color[r] = 3;
                sp -= 2;
            }
        }
    }
out:
    free(nullable);
    free(prod);
    free(color);
    free(stk);
    return st;
}

/* ---- the whole text ---- */

static void parser_free(struct parser *P)
{
    for (uint32_t i = 0; i < P->n_r; i++) {
        free(P->r[i].name);
        free(P->r[i].el.v);
    }
    free(P->r);
    free(P->cls);
    free(P->names);
}

static weft_status parse_all(struct parser *P)
{
    weft_status st;
    for (;;) {
        skip_space(P);
        if (P->p == P->end) break;
        const char *at = P->p;
        while (P->p < P->end && name_char(*P->p)) P->p++;
        if (P->p == at) return perr(P, at, "expected a rule name (letters, digits, '_', '-'), got '%c'", *at);
        size_t nlen = (size_t)(P->p - at);
        skip_space(P);
        if (P->end - P->p < 3 || memcmp(P->p, "::=", 3))
            return perr(P, P->p, "expected '::=' after the rule name '%.*s'", (int)nlen, at);
        P->p += 3;
        uint32_t id;
        if ((st = sym(P, at, nlen, &id)) != WEFT_OK) return st;
        if (P->r[id].defined) {
            const char *first = P->s + P->r[id].def_at;
            int line = 1;
            for (const char *q = P->s; q < first; q++) line += *q == '\n';
            return perr(P, at, "rule '%s' is defined twice (first on line %d)", P->r[id].name, line);
        }
        P->r[id].defined = true;
        P->r[id].def_at = (size_t)(at - P->s);
        P->cur = id;
        struct vec v = {0};
        st = parse_alts(P, &v, false);
        if (st != WEFT_OK) {
            free(v.v);
            return st;
        }
        P->r[id].el = v;
    }
    uint32_t root = UINT32_MAX;
    for (uint32_t i = 0; i < P->n_r; i++) {
        if (!P->r[i].name) continue;
        if (!P->r[i].defined) return perr(P, P->s + P->r[i].use_at, "undefined rule '%s'", P->r[i].name);
        if (!strcmp(P->r[i].name, "root")) root = i;
    }
    if (root == UINT32_MAX) return weft_error(WEFT_ERR_FORMAT, "grammar: no rule 'root' (the start rule)");
    P->cur = root;
    return check_graph(P, root);
}

weft_status weft_grammar_parse(const char *text, size_t len, struct weft_grammar **out)
{
    *out = NULL;
    if (!text && len) return weft_error(WEFT_ERR_INVALID_ARG, "grammar: NULL text");
    struct parser P = {.s = text ? text : "", .p = text ? text : "", .end = (text ? text : "") + len};
    weft_status st = parse_all(&P);
    if (P.too_big)
        st = weft_error(WEFT_ERR_INVALID_ARG, "grammar: more than %u rules (the bound on one grammar)",
                        WEFT_GRAMMAR_MAX_RULES);
    struct weft_grammar *g = NULL;
    if (st == WEFT_OK) {
        uint32_t total = 0;
        for (uint32_t i = 0; i < P.n_r; i++) total += P.r[i].el.n;
        g = calloc(1, sizeof *g);
        if (g) {
            g->el = malloc(sizeof *g->el * (total + 1));
            g->rule_start = malloc(sizeof *g->rule_start * P.n_r);
        }
        if (!g || !g->el || !g->rule_start) {
            st = nomem();
        } else {
            uint32_t o = 0;
            for (uint32_t i = 0; i < P.n_r; i++) {
                g->rule_start[i] = o;
                memcpy(g->el + o, P.r[i].el.v, sizeof *g->el * P.r[i].el.n);
                o += P.r[i].el.n;
            }
            g->el[o] = (struct gelem){GE_END, 0};   /* sentinel: el[p + 1] is always readable */
            g->n_el = o;
            g->n_rules = P.n_r;
            for (uint32_t i = 0; i < P.n_r; i++)
                if (P.r[i].name && !strcmp(P.r[i].name, "root")) g->root = i;
            uint32_t n_alt = 0;
            for (uint32_t i = 0; i < o; i++) n_alt += g->el[i].type == GE_ALT || g->el[i].type == GE_END;
            g->alt = malloc(sizeof *g->alt * (n_alt + 1));
            g->rule_alt = malloc(sizeof *g->rule_alt * (P.n_r + 1));
            if (!g->alt || !g->rule_alt) st = nomem();
            for (uint32_t i = 0, k = 0; st == WEFT_OK && i < P.n_r; i++) {
                g->rule_alt[i] = k;
                uint32_t a = g->rule_start[i];
                g->alt[k++] = a;
                for (uint32_t q = a; g->el[q].type != GE_END; q++)
                    if (g->el[q].type == GE_ALT) g->alt[k++] = q + 1;
                g->rule_alt[i + 1] = k;
            }
            g->cls = P.cls;
            g->n_cls = P.n_cls;
            P.cls = NULL;
            g->refs = 1;
            g->uid = weft_grammar_next_uid();
            g->compile_compares = P.compares;
        }
    }
    parser_free(&P);
    if (st != WEFT_OK) {
        if (g) {
            free(g->el);
            free(g->rule_start);
            free(g->alt);
            free(g->rule_alt);
            free(g->cls);
            free(g);
        }
        return st;
    }
    *out = g;
    return WEFT_OK;
}
