/* Jinja templates -> the syntax tree of core/jinja_internal.h: the lexer
 * (jinja2's whitespace rules with trim_blocks and lstrip_blocks: "-" strips
 * all whitespace on its side, "+" keeps a block's leading whitespace, a
 * block or comment tag alone on its line takes the line's indentation and
 * its newline with it; one trailing newline of the source is dropped) and a
 * recursive-descent parser with jinja2's precedence. What the subset does
 * not hold is refused here, named. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jinja_internal.h"

enum tok { T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP };

struct token {
    enum tok t;
    const char *p;      /* T_TEXT, T_NAME, T_OP: the source; T_STRING: the unescaped value */
    size_t n;
    int64_t i;
    double f;
    int line;
};

struct parser {
    struct weft_jinja *t;
    const char *src;
    struct jarena *a;
    struct token *tk;
    size_t n_tk, cap_tk, pos;
    char err[256];
    bool failed;
};

static bool fail(struct parser *P, int line, const char *fmt, const char *arg)
{
    if (!P->failed) {
        char msg[200];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        snprintf(P->err, sizeof P->err, "template line %d: %s", line, msg);
    }
    P->failed = true;
    return false;
}

static bool push_tok(struct parser *P, struct token tk)
{
    if (P->n_tk == P->cap_tk) {
        size_t cap = P->cap_tk ? 2 * P->cap_tk : 256;
        struct token *nt = realloc(P->tk, cap * sizeof *nt);
        if (!nt) return fail(P, tk.line, "out of memory%s", NULL);
        P->tk = nt;
        P->cap_tk = cap;
    }
    P->tk[P->n_tk++] = tk;
    return true;
}

/* ---- lexer ---- */

static int line_of(const char *src, const char *p)
{
    int l = 1;
    for (const char *q = src; q < p; q++) l += *q == '\n';
    return l;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* A string literal from q (at its quote): its value into the arena. */
static const char *lex_string(struct parser *P, const char *q, const char *end, struct token *tk)
{
    char quote = *q++;
    char *out = weft_ja_alloc(P->a, (size_t)(end - q) * 4 + 1);
    if (!out) return NULL;
    size_t n = 0;
    while (q < end && *q != quote) {
        if (*q != '\\' || q + 1 >= end) {
            out[n++] = *q++;
            continue;
        }
        q++;
        char c = *q++;
        uint32_t cp = 0;
        int hex = 0;
        switch (c) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'a': out[n++] = '\a'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case '\\': out[n++] = '\\'; break;
        case '\'': out[n++] = '\''; break;
        case '"': out[n++] = '"'; break;
        case '\n': break;  /* a continued line */
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && q < end && *q >= '0' && *q <= '7'; k++) cp = cp * 8 + (uint32_t)(*q++ - '0');
                hex = -1;
            } else {
                out[n++] = '\\';
                out[n++] = c;
            }
        }
        if (hex > 0) {
            for (int k = 0; k < hex; k++, q++) {
                if (q >= end || !isxdigit((unsigned char)*q)) {
                    fail(P, line_of(P->src, q), "a bad \\x/\\u escape in a string%s", NULL);
                    return NULL;
                }
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)*q) ? *q - '0' : (tolower((unsigned char)*q) - 'a' + 10));
            }
        }
        if (hex) weft_jv_utf8_put(out, &n, cp);
    }
    if (q >= end) return NULL;
    out[n] = 0;
    tk->t = T_STRING;
    tk->p = out;
    tk->n = n;
    return q + 1;
}

static const char *const OPS[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~",
                                  "|", ".", ",", ":", "(", ")", "[", "]", "{", "}", "=", NULL};

/* Tokens of one tag's inside, from p up to its end marker (`}}` for a
 * variable, `%}` for a block; a "-" before it strips the whitespace after).
 * Returns past the end marker (and what it strips), NULL on error. */
static const char *lex_tag(struct parser *P, const char *src, const char *p, const char *end, bool block, bool trim)
{
    const char close = block ? '%' : '}';
    int depth = 0;
    for (;;) {
        while (p < end && is_ws(*p)) p++;
        if (p >= end) {
            fail(P, line_of(src, p), "a tag is not closed%s", NULL);
            return NULL;
        }
        int line = line_of(src, p);
        /* the end marker: "-%}", "+%}", "%}" (blocks), "-}}", "}}" (variables) */
        bool strip = false, keep = false;
        const char *q = p;
        if ((*q == '-' || *q == '+') && q + 2 < end + 1 && q[1] == close && q + 2 < end && q[2] == '}') {
            strip = *q == '-';
            keep = *q == '+';
            q++;
        }
        if (depth == 0 && q + 1 < end && q[0] == close && q[1] == '}') {
            q += 2;
            if (!push_tok(P, (struct token){.t = block ? T_BLOCK_END : T_VAR_END, .line = line})) return NULL;
            if (strip) {
                while (q < end && is_ws(*q)) q++;
            } else if (block && trim && !keep && q < end && *q == '\n') {
                q++;
            }
            return q;
        }
        (void)keep;
        struct token tk = {.line = line};
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *s = p;
            while (p < end && (isalnum((unsigned char)*p) || *p == '_')) p++;
            tk.t = T_NAME;
            tk.p = s;
            tk.n = (size_t)(p - s);
        } else if (isdigit((unsigned char)*p)) {
            const char *s = p;
            while (p < end && (isdigit((unsigned char)*p) || *p == '_')) p++;
            bool flt = false;
            if (p + 1 < end && *p == '.' && isdigit((unsigned char)p[1])) {
                flt = true;
                p++;
                while (p < end && isdigit((unsigned char)*p)) p++;
            }
            if (p < end && (*p == 'e' || *p == 'E')) {
                const char *e = p + 1;
                if (e < end && (*e == '+' || *e == '-')) e++;
                if (e < end && isdigit((unsigned char)*e)) {
                    flt = true;
                    p = e;
                    while (p < end && isdigit((unsigned char)*p)) p++;
                }
            }
            char num[64];
            size_t k = 0;
            for (const char *c = s; c < p && k + 1 < sizeof num; c++)
                if (*c != '_') num[k++] = *c;
            num[k] = 0;
            if (flt) {
                tk.t = T_FLOAT;
                tk.f = strtod(num, NULL);
            } else {
                tk.t = T_INT;
                tk.i = strtoll(num, NULL, 10);
            }
        } else if (*p == '\'' || *p == '"') {
            p = lex_string(P, p, end, &tk);
            if (!p) {
                if (!P->failed) fail(P, line, "a string is not closed%s", NULL);
                return NULL;
            }
        } else {
            int k = 0;
            for (; OPS[k]; k++)
                if (strncmp(p, OPS[k], strlen(OPS[k])) == 0) break;
            if (!OPS[k]) {
                char c[2] = {*p, 0};
                fail(P, line, "unexpected character '%s'", c);
                return NULL;
            }
            tk.t = T_OP;
            tk.p = OPS[k];
            tk.n = strlen(OPS[k]);
            p += tk.n;
            if (tk.n == 1 && strchr("([{", *tk.p)) depth++;
            if (tk.n == 1 && strchr(")]}", *tk.p) && depth > 0) depth--;
        }
        if (!push_tok(P, tk)) return NULL;
    }
}

static bool lex(struct parser *P, const char *src, size_t n)
{
    const char *p = src, *end = src + n;
    /* keep_trailing_newline is off: one newline at the end goes */
    if (end > src && end[-1] == '\n') end--;
    bool trim = true, lstrip = true;
    while (p < end) {
        /* the next tag */
        const char *q = p;
        while (q < end && !(q[0] == '{' && q + 1 < end && (q[1] == '{' || q[1] == '%' || q[1] == '#'))) q++;
        const char *text_end = q;
        if (q < end) {
            char kind = q[1];
            char mod = q + 2 < end ? q[2] : 0;
            if (mod == '-') {
                while (text_end > p && is_ws(text_end[-1])) text_end--;
            } else if (lstrip && mod != '+' && kind != '{') {
                /* only spaces and tabs between the line's start and the tag */
                const char *ls = text_end;
                while (ls > p && (ls[-1] == ' ' || ls[-1] == '\t')) ls--;
                bool line_start = ls > p ? ls[-1] == '\n' : (p == src || p[-1] == '\n');
                if (line_start) text_end = ls;
            }
        }
        if (text_end > p && !push_tok(P, (struct token){.t = T_TEXT, .p = p, .n = (size_t)(text_end - p),
                                                        .line = line_of(src, p)}))
            return false;
        if (q >= end) break;
        char kind = q[1];
        const char *in = q + 2;
        if (in < end && (*in == '-' || *in == '+')) in++;
        if (kind == '#') {
            const char *c = in;
            while (c + 1 < end && !(c[0] == '#' && c[1] == '}')) c++;
            if (c + 1 >= end) return fail(P, line_of(src, q), "a comment is not closed%s", NULL);
            bool strip = c > in && c[-1] == '-';
            bool keep = c > in && c[-1] == '+';
            p = c + 2;
            if (strip) {
                while (p < end && is_ws(*p)) p++;
            } else if (trim && !keep && p < end && *p == '\n') {
                p++;
            }
            continue;
        }
        bool block = kind == '%';
        if (!push_tok(P, (struct token){.t = block ? T_BLOCK_BEGIN : T_VAR_BEGIN, .line = line_of(src, q)}))
            return false;
        /* {% raw %}: the text up to {% endraw %} as it is */
        const char *r = in;
        while (r < end && is_ws(*r)) r++;
        if (block && end - r >= 3 && !strncmp(r, "raw", 3) && (r + 3 >= end || !isalnum((unsigned char)r[3]))) {
            P->n_tk--;  /* no block token for it */
            const char *c = r + 3;
            while (c < end && is_ws(*c)) c++;
            if (c < end && *c == '-') c++;
            if (c + 1 >= end || c[0] != '%' || c[1] != '}') return fail(P, line_of(src, q), "a bad raw tag%s", NULL);
            c += 2;
            const char *body = c, *stop = NULL;
            for (const char *s = c; s + 1 < end; s++) {
                if (s[0] != '{' || s[1] != '%') continue;
                const char *k = s + 2;
                if (k < end && (*k == '-' || *k == '+')) k++;
                while (k < end && is_ws(*k)) k++;
                if (end - k >= 6 && !strncmp(k, "endraw", 6)) {
                    stop = s;
                    const char *e2 = k + 6;
                    while (e2 < end && is_ws(*e2)) e2++;
                    if (e2 < end && *e2 == '-') e2++;
                    if (e2 + 1 >= end || e2[0] != '%' || e2[1] != '}') stop = NULL;
                    else p = e2 + 2;
                    break;
                }
            }
            if (!stop) return fail(P, line_of(src, q), "raw is not closed by endraw%s", NULL);
            const char *bend = stop;
            if (stop + 2 < end && stop[2] == '-')
                while (bend > body && is_ws(bend[-1])) bend--;
            if (bend > body &&
                !push_tok(P, (struct token){.t = T_TEXT, .p = body, .n = (size_t)(bend - body), .line = line_of(src, body)}))
                return false;
            if (trim && p < end && *p == '\n') p++;
            continue;
        }
        p = lex_tag(P, src, in, end, block, trim);
        if (!p) return false;
    }
    return push_tok(P, (struct token){.t = T_EOF, .line = line_of(src, end)});
}

/* ---- parser ---- */

static struct token *cur(struct parser *P) { return &P->tk[P->pos]; }
static struct token *next(struct parser *P) { return &P->tk[P->pos < P->n_tk - 1 ? P->pos++ : P->pos]; }

static bool is_op(const struct token *t, const char *op)
{
    return t->t == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}

static bool is_name(const struct token *t, const char *name)
{
    return t->t == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static bool expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op)) return fail(P, cur(P)->line, "expected '%s'", op);
    next(P);
    return true;
}

static const char *dup_name(struct parser *P, const struct token *t)
{
    char *s = weft_ja_alloc(P->a, t->n + 1);
    if (s) memcpy(s, t->p, t->n);
    return s;
}

static struct jexpr *mk(struct parser *P, enum jexpr_kind k, int line)
{
    struct jexpr *e = weft_ja_alloc(P->a, sizeof *e);
    if (!e) {
        fail(P, line, "out of memory%s", NULL);
        return NULL;
    }
    e->kind = (uint8_t)k;
    e->line = line;
    return e;
}

/* a growing array of expression pointers in the arena */
struct xvec { struct jexpr **v; const char **names; uint32_t n, cap; };
static bool xv_push(struct parser *P, struct xvec *x, struct jexpr *e, const char *name)
{
    if (x->n == x->cap) {
        uint32_t cap = x->cap ? 2 * x->cap : 4;
        struct jexpr **v = weft_ja_alloc(P->a, cap * sizeof *v);
        const char **nm = weft_ja_alloc(P->a, cap * sizeof *nm);
        if (!v || !nm) return fail(P, 0, "out of memory%s", NULL);
        if (x->n) {
            memcpy(v, x->v, x->n * sizeof *v);
            memcpy(nm, x->names, x->n * sizeof *nm);
        }
        x->v = v;
        x->names = nm;
        x->cap = cap;
    }
    x->v[x->n] = e;
    x->names[x->n++] = name;
    return true;
}

static struct jexpr *parse_expr(struct parser *P);
static struct jexpr *parse_or(struct parser *P);
static struct jexpr *parse_unary(struct parser *P, bool with_filter);
static struct jexpr *parse_primary(struct parser *P);
static struct jexpr *parse_postfix(struct parser *P, struct jexpr *e);

/* (args) of a call, filter or test: positional, then name=value */
static bool parse_args(struct parser *P, struct jexpr *e)
{
    struct xvec pos = {0}, kw = {0};
    if (!expect_op(P, "(")) return false;
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n && !expect_op(P, ",")) return false;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->t == T_NAME && is_op(&P->tk[P->pos + 1], "=")) {
            const char *nm = dup_name(P, next(P));
            next(P);
            struct jexpr *v = parse_expr(P);
            if (!v || !xv_push(P, &kw, v, nm)) return false;
        } else {
            if (kw.n) return fail(P, cur(P)->line, "a positional argument after a keyword one%s", NULL);
            struct jexpr *v = parse_expr(P);
            if (!v || !xv_push(P, &pos, v, NULL)) return false;
        }
    }
    next(P);
    e->n_args = pos.n;
    e->n_kw = kw.n;
    e->args = weft_ja_alloc(P->a, (pos.n + kw.n + 1) * sizeof *e->args);
    e->vals = kw.v;
    e->kw = kw.names;
    if (!e->args) return fail(P, 0, "out of memory%s", NULL);
    if (pos.n) memcpy(e->args, pos.v, pos.n * sizeof *e->args);
    return true;
}

static const char *const FILTERS[] = {
    "tojson", "trim", "length", "count", "items", "default", "d", "join", "upper", "lower", "title", "capitalize",
    "replace", "first", "last", "list", "string", "safe", "selectattr", "rejectattr", "select", "reject", "map",
    "dictsort", "indent", "unique", "sort", "int", "float", "abs", "round", "reverse", "sum", "min", "max",
    "wordcount", "e", "escape", "attr", NULL};
static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false", "mapping",
    "iterable", "sequence", "callable", "equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge",
    ">=", "in", "odd", "even", "divisibleby", "sameas", "lower", "upper", "escaped", NULL};

static bool known(const char *const *list, const char *name)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name)) return true;
    return false;
}

static struct jexpr *parse_filter(struct parser *P, struct jexpr *obj)
{
    struct token *t = cur(P);
    if (t->t != T_NAME) {
        fail(P, t->line, "expected a filter name%s", NULL);
        return NULL;
    }
    struct jexpr *e = mk(P, X_FILTER, t->line);
    if (!e) return NULL;
    e->name = dup_name(P, next(P));
    while (is_op(cur(P), ".") && P->pos + 1 < P->n_tk && P->tk[P->pos + 1].t == T_NAME) {
        fail(P, t->line, "a dotted filter name '%s...' is not supported", e->name);
        return NULL;
    }
    /* an unknown one fails when it runs inside an if (jinja2's soft
     * frames), else here: check_unknown after the parse */
    e->unknown = !known(FILTERS, e->name);
    e->a = obj;
    if (is_op(cur(P), "(") && !parse_args(P, e)) return NULL;
    return e;
}

static struct jexpr *parse_test(struct parser *P, struct jexpr *obj)
{
    int line = cur(P)->line;
    struct jexpr *e = mk(P, X_TEST, line);
    if (!e) return NULL;
    e->a = obj;
    if (is_name(cur(P), "not")) {
        next(P);
        e->negate = true;
    }
    struct token *t = cur(P);
    if (t->t == T_NAME || (t->t == T_OP && (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, ">") ||
                                            is_op(t, "<=") || is_op(t, ">=")))) {
        e->name = dup_name(P, next(P));
    } else {
        fail(P, t->line, "expected a test name%s", NULL);
        return NULL;
    }
    if (!strcmp(e->name, "none") || !strcmp(e->name, "true") || !strcmp(e->name, "false")) {
        /* also written None, True, False */
    }
    e->unknown = !known(TESTS, e->name);
    if (is_op(cur(P), "(")) {
        if (!parse_args(P, e)) return NULL;
    } else {
        struct token *c = cur(P);
        bool arg = (c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT || is_op(c, "[") ||
                    is_op(c, "{")) &&
                   !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and");
        if (arg) {
            struct jexpr *v = parse_primary(P);
            if (v) v = parse_postfix(P, v);
            if (!v) return NULL;
            e->args = weft_ja_alloc(P->a, sizeof *e->args);
            if (!e->args) return NULL;
            e->args[0] = v;
            e->n_args = 1;
        }
    }
    return e;
}

static struct jexpr *parse_filter_expr(struct parser *P, struct jexpr *e)
{
    for (;;) {
        if (is_op(cur(P), "|")) {
            next(P);
            e = parse_filter(P, e);
        } else if (is_name(cur(P), "is")) {
            next(P);
            e = parse_test(P, e);
        } else if (is_op(cur(P), "(")) {
            struct jexpr *c = mk(P, X_CALL, cur(P)->line);
            if (!c) return NULL;
            c->a = e;
            if (!parse_args(P, c)) return NULL;
            e = c;
        } else {
            return e;
        }
        if (!e) return NULL;
    }
}

static struct jexpr *parse_postfix(struct parser *P, struct jexpr *e)
{
    while (e) {
        struct token *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            struct token *n = cur(P);
            struct jexpr *x = mk(P, X_ATTR, n->line);
            if (!x) return NULL;
            x->a = e;
            if (n->t == T_NAME) {
                x->name = dup_name(P, next(P));
            } else if (n->t == T_INT) {
                x->kind = X_ITEM;
                x->b = mk(P, X_LIT, n->line);
                if (!x->b) return NULL;
                x->b->lit = weft_jv_int(next(P)->i);
            } else {
                fail(P, n->line, "expected a name after '.'%s", NULL);
                return NULL;
            }
            e = x;
        } else if (is_op(t, "[")) {
            next(P);
            struct jexpr *x = mk(P, X_ITEM, t->line);
            if (!x) return NULL;
            x->a = e;
            struct jexpr *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            bool slice = false;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    slice = true;
                    if (++k > 2) {
                        fail(P, t->line, "a slice of more than three parts%s", NULL);
                        return NULL;
                    }
                    next(P);
                    continue;
                }
                if (is_op(cur(P), "]")) break;
                parts[k] = parse_expr(P);
                if (!parts[k]) return NULL;
                if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) {
                    fail(P, cur(P)->line, "expected ']'%s", NULL);
                    return NULL;
                }
            }
            next(P);
            if (slice) {
                x->kind = X_SLICE;
                x->b = parts[0];
                x->c = parts[1];
                x->args = weft_ja_alloc(P->a, sizeof *x->args);
                if (!x->args) return NULL;
                x->args[0] = parts[2];
            } else {
                if (!parts[0]) {
                    fail(P, t->line, "an empty subscript%s", NULL);
                    return NULL;
                }
                x->b = parts[0];
            }
            e = x;
        } else if (is_op(t, "(")) {
            struct jexpr *c = mk(P, X_CALL, t->line);
            if (!c) return NULL;
            c->a = e;
            if (!parse_args(P, c)) return NULL;
            e = c;
        } else {
            break;
        }
    }
    return e;
}

static struct jexpr *parse_primary(struct parser *P)
{
    struct token *t = cur(P);
    struct jexpr *e = NULL;
    if (t->t == T_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            e = mk(P, X_LIT, t->line);
            if (e) e->lit = weft_jv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            e = mk(P, X_LIT, t->line);
            if (e) e->lit = weft_jv_none();
        } else {
            e = mk(P, X_NAME, t->line);
            if (e) e->name = dup_name(P, t);
        }
        next(P);
    } else if (t->t == T_STRING) {
        /* adjacent strings join */
        size_t n = 0;
        for (size_t k = P->pos; P->tk[k].t == T_STRING; k++) n += P->tk[k].n;
        char *s = weft_ja_alloc(P->a, n + 1);
        if (!s) return NULL;
        n = 0;
        while (cur(P)->t == T_STRING) {
            memcpy(s + n, cur(P)->p, cur(P)->n);
            n += cur(P)->n;
            next(P);
        }
        e = mk(P, X_LIT, t->line);
        if (e) e->lit = weft_jv_str(P->a, s, n);
    } else if (t->t == T_INT || t->t == T_FLOAT) {
        e = mk(P, X_LIT, t->line);
        if (e) e->lit = t->t == T_INT ? weft_jv_int(t->i) : weft_jv_float(t->f);
        next(P);
    } else if (is_op(t, "(")) {
        next(P);
        if (is_op(cur(P), ")")) {
            next(P);
            e = mk(P, X_TUPLE, t->line);
            return e;
        }
        struct jexpr *first = parse_expr(P);
        if (!first) return NULL;
        if (is_op(cur(P), ",")) {
            struct xvec v = {0};
            if (!xv_push(P, &v, first, NULL)) return NULL;
            while (is_op(cur(P), ",")) {
                next(P);
                if (is_op(cur(P), ")")) break;
                struct jexpr *x = parse_expr(P);
                if (!x || !xv_push(P, &v, x, NULL)) return NULL;
            }
            e = mk(P, X_TUPLE, t->line);
            if (e) {
                e->args = v.v;
                e->n_args = v.n;
            }
        } else {
            e = first;
        }
        if (!expect_op(P, ")")) return NULL;
    } else if (is_op(t, "[")) {
        next(P);
        struct xvec v = {0};
        while (!is_op(cur(P), "]")) {
            if (v.n && !expect_op(P, ",")) return NULL;
            if (is_op(cur(P), "]")) break;
            struct jexpr *x = parse_expr(P);
            if (!x || !xv_push(P, &v, x, NULL)) return NULL;
        }
        next(P);
        e = mk(P, X_LIST, t->line);
        if (e) {
            e->args = v.v;
            e->n_args = v.n;
        }
    } else if (is_op(t, "{")) {
        next(P);
        struct xvec k = {0}, v = {0};
        while (!is_op(cur(P), "}")) {
            if (k.n && !expect_op(P, ",")) return NULL;
            if (is_op(cur(P), "}")) break;
            struct jexpr *key = parse_expr(P);
            if (!key || !expect_op(P, ":")) return NULL;
            struct jexpr *val = parse_expr(P);
            if (!val || !xv_push(P, &k, key, NULL) || !xv_push(P, &v, val, NULL)) return NULL;
        }
        next(P);
        e = mk(P, X_DICT, t->line);
        if (e) {
            e->args = k.v;
            e->vals = v.v;
            e->n_args = k.n;
        }
    } else {
        fail(P, t->line, "unexpected %s in an expression",
             t->t == T_VAR_END || t->t == T_BLOCK_END ? "end of tag" : t->t == T_EOF ? "end of template" : "token");
        return NULL;
    }
    return e;
}

static struct jexpr *parse_unary(struct parser *P, bool with_filter)
{
    struct token *t = cur(P);
    struct jexpr *e;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        e = mk(P, t->p[0] == '-' ? X_NEG : X_POS, t->line);
        if (!e) return NULL;
        e->a = parse_unary(P, false);
        if (!e->a) return NULL;
    } else {
        e = parse_primary(P);
        if (e) e = parse_postfix(P, e);
    }
    if (e && with_filter) e = parse_filter_expr(P, e);
    return e;
}

static struct jexpr *binary(struct parser *P, struct jexpr *l, enum jbin op, struct jexpr *r, int line)
{
    if (!l || !r) return NULL;
    struct jexpr *e = mk(P, X_BIN, line);
    if (!e) return NULL;
    e->op = (uint8_t)op;
    e->a = l;
    e->b = r;
    return e;
}

static struct jexpr *parse_pow(struct parser *P)
{
    struct jexpr *l = parse_unary(P, true);
    while (l && is_op(cur(P), "**")) {
        int line = next(P)->line;
        l = binary(P, l, B_POW, parse_unary(P, true), line);
    }
    return l;
}

static struct jexpr *parse_math2(struct parser *P)
{
    struct jexpr *l = parse_pow(P);
    while (l) {
        struct token *t = cur(P);
        enum jbin op;
        if (is_op(t, "*")) op = B_MUL;
        else if (is_op(t, "/")) op = B_DIV;
        else if (is_op(t, "//")) op = B_FDIV;
        else if (is_op(t, "%")) op = B_MOD;
        else break;
        next(P);
        l = binary(P, l, op, parse_pow(P), t->line);
    }
    return l;
}

static struct jexpr *parse_concat(struct parser *P)
{
    struct jexpr *l = parse_math2(P);
    while (l && is_op(cur(P), "~")) {
        int line = next(P)->line;
        l = binary(P, l, B_CONCAT, parse_math2(P), line);
    }
    return l;
}

static struct jexpr *parse_math1(struct parser *P)
{
    struct jexpr *l = parse_concat(P);
    while (l && (is_op(cur(P), "+") || is_op(cur(P), "-"))) {
        struct token *t = next(P);
        l = binary(P, l, t->p[0] == '+' ? B_ADD : B_SUB, parse_concat(P), t->line);
    }
    return l;
}

static struct jexpr *parse_compare(struct parser *P)
{
    struct jexpr *l = parse_math1(P);
    if (!l) return NULL;
    struct xvec rhs = {0};
    uint8_t ops[32];
    for (;;) {
        struct token *t = cur(P);
        int op = -1;
        if (is_op(t, "==")) op = C_EQ;
        else if (is_op(t, "!=")) op = C_NE;
        else if (is_op(t, "<")) op = C_LT;
        else if (is_op(t, "<=")) op = C_LE;
        else if (is_op(t, ">")) op = C_GT;
        else if (is_op(t, ">=")) op = C_GE;
        else if (is_name(t, "in")) op = C_IN;
        else if (is_name(t, "not") && is_name(&P->tk[P->pos + 1], "in")) op = C_NOTIN;
        if (op < 0) break;
        next(P);
        if (op == C_NOTIN) next(P);
        if (rhs.n == sizeof ops) {
            fail(P, t->line, "too long a comparison chain%s", NULL);
            return NULL;
        }
        ops[rhs.n] = (uint8_t)op;
        struct jexpr *r = parse_math1(P);
        if (!r || !xv_push(P, &rhs, r, NULL)) return NULL;
    }
    if (!rhs.n) return l;
    struct jexpr *e = mk(P, X_CMP, l->line);
    if (!e) return NULL;
    e->a = l;
    e->args = rhs.v;
    e->n_args = rhs.n;
    e->cmp_ops = weft_ja_alloc(P->a, rhs.n);
    if (!e->cmp_ops) return NULL;
    memcpy(e->cmp_ops, ops, rhs.n);
    return e;
}

static struct jexpr *parse_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        int line = next(P)->line;
        struct jexpr *e = mk(P, X_NOT, line);
        if (!e) return NULL;
        e->a = parse_not(P);
        return e->a ? e : NULL;
    }
    return parse_compare(P);
}

static struct jexpr *parse_and(struct parser *P)
{
    struct jexpr *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        int line = next(P)->line;
        struct jexpr *e = mk(P, X_AND, line);
        if (!e) return NULL;
        e->a = l;
        e->b = parse_not(P);
        l = e->b ? e : NULL;
    }
    return l;
}

static struct jexpr *parse_or(struct parser *P)
{
    struct jexpr *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        int line = next(P)->line;
        struct jexpr *e = mk(P, X_OR, line);
        if (!e) return NULL;
        e->a = l;
        e->b = parse_and(P);
        l = e->b ? e : NULL;
    }
    return l;
}

static struct jexpr *parse_expr(struct parser *P)
{
    struct jexpr *e = parse_or(P);
    while (e && is_name(cur(P), "if")) {
        int line = next(P)->line;
        struct jexpr *c = mk(P, X_COND, line);
        if (!c) return NULL;
        c->b = e;
        c->a = parse_or(P);
        if (!c->a) return NULL;
        if (is_name(cur(P), "else")) {
            next(P);
            c->c = parse_expr(P);
            if (!c->c) return NULL;
        }
        e = c;
    }
    return e;
}

/* ---- statements ---- */

static bool body_push(struct parser *P, struct jbody *b, struct jstmt *s)
{
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? 2 * b->cap : 8;
        struct jstmt **v = weft_ja_alloc(P->a, cap * sizeof *v);
        if (!v) return fail(P, s->line, "out of memory%s", NULL);
        if (b->n) memcpy(v, b->s, b->n * sizeof *v);
        b->s = v;
        b->cap = cap;
    }
    b->s[b->n++] = s;
    return true;
}

static struct jstmt *mks(struct parser *P, enum jstmt_kind k, int line)
{
    struct jstmt *s = weft_ja_alloc(P->a, sizeof *s);
    if (!s) fail(P, line, "out of memory%s", NULL);
    else {
        s->kind = (uint8_t)k;
        s->line = line;
    }
    return s;
}

/* Statements until a block tag whose name is one of `stops` (left current:
 * the name token after its {%), or the end when stops is NULL. */
static bool parse_body(struct parser *P, struct jbody *b, const char *const *stops);

static bool end_tag(struct parser *P)
{
    if (cur(P)->t != T_BLOCK_END) return fail(P, cur(P)->line, "expected the end of the tag%s", NULL);
    next(P);
    return true;
}

static bool parse_names(struct parser *P, const char ***out, uint32_t *n, bool allow_paren)
{
    struct xvec v = {0};
    bool paren = allow_paren && is_op(cur(P), "(");
    if (paren) next(P);
    for (;;) {
        if (cur(P)->t != T_NAME) return fail(P, cur(P)->line, "expected a name%s", NULL);
        if (!xv_push(P, &v, NULL, dup_name(P, next(P)))) return false;
        if (!is_op(cur(P), ",")) break;
        next(P);
    }
    if (paren && !expect_op(P, ")")) return false;
    *out = v.names;
    *n = v.n;
    return true;
}

static bool parse_block(struct parser *P, struct jbody *b, const struct token *name)
{
    int line = name->line;
    char nm[32];
    snprintf(nm, sizeof nm, "%.*s", (int)(name->n < 31 ? name->n : 31), name->p);
    next(P);
    if (!strcmp(nm, "if")) {
        struct jstmt *s = mks(P, S_IF, line);
        if (!s) return false;
        struct xvec conds = {0};
        struct jbody bodies[64];
        for (;;) {
            struct jexpr *c = parse_expr(P);
            if (!c || !end_tag(P)) return false;
            if (conds.n == 64) return fail(P, line, "more than 64 elif branches%s", NULL);
            if (!xv_push(P, &conds, c, NULL)) return false;
            static const char *const stops[] = {"elif", "else", "endif", NULL};
            memset(&bodies[conds.n - 1], 0, sizeof bodies[0]);
            if (!parse_body(P, &bodies[conds.n - 1], stops)) return false;
            struct token *t = next(P);
            if (is_name(t, "elif")) continue;
            if (is_name(t, "else")) {
                if (!end_tag(P)) return false;
                static const char *const stop_end[] = {"endif", NULL};
                if (!parse_body(P, &s->els, stop_end)) return false;
                next(P);
            }
            if (!end_tag(P)) return false;
            break;
        }
        s->conds = conds.v;
        s->n_conds = conds.n;
        s->bodies = weft_ja_alloc(P->a, conds.n * sizeof *s->bodies);
        if (!s->bodies) return false;
        memcpy(s->bodies, bodies, conds.n * sizeof *s->bodies);
        return body_push(P, b, s);
    }
    if (!strcmp(nm, "for")) {
        struct jstmt *s = mks(P, S_FOR, line);
        if (!s || !parse_names(P, &s->targets, &s->n_targets, true)) return false;
        if (!is_name(cur(P), "in")) return fail(P, line, "expected 'in' in a for%s", NULL);
        next(P);
        /* the iterable stops before a trailing "if" (the loop's filter) */
        s->e = parse_or(P);
        if (!s->e) return false;
        if (is_name(cur(P), "if")) {
            next(P);
            s->filter = parse_expr(P);
            if (!s->filter) return false;
        }
        if (is_name(cur(P), "recursive")) return fail(P, line, "a recursive for loop is not supported%s", NULL);
        if (!end_tag(P)) return false;
        static const char *const stops[] = {"else", "endfor", NULL};
        if (!parse_body(P, &s->body, stops)) return false;
        if (is_name(next(P), "else")) {
            if (!end_tag(P)) return false;
            static const char *const stop_end[] = {"endfor", NULL};
            if (!parse_body(P, &s->els, stop_end)) return false;
            next(P);
        }
        return end_tag(P) && body_push(P, b, s);
    }
    if (!strcmp(nm, "set")) {
        struct jstmt *s = mks(P, S_SET, line);
        if (!s) return false;
        if (cur(P)->t == T_NAME && is_op(&P->tk[P->pos + 1], ".")) {
            s->targets = weft_ja_alloc(P->a, sizeof *s->targets);
            if (!s->targets) return false;
            s->targets[0] = dup_name(P, next(P));
            s->n_targets = 1;
            next(P);
            if (cur(P)->t != T_NAME) return fail(P, line, "expected an attribute name in set%s", NULL);
            s->attr = dup_name(P, next(P));
        } else if (!parse_names(P, &s->targets, &s->n_targets, true)) {
            return false;
        }
        if (is_op(cur(P), "=")) {
            next(P);
            s->e = parse_expr(P);
            if (s->e && is_op(cur(P), ",")) {
                /* set a, b = x, y: a tuple */
                struct xvec v = {0};
                if (!xv_push(P, &v, s->e, NULL)) return false;
                while (is_op(cur(P), ",")) {
                    next(P);
                    struct jexpr *x = parse_expr(P);
                    if (!x || !xv_push(P, &v, x, NULL)) return false;
                }
                struct jexpr *t = mk(P, X_TUPLE, line);
                if (!t) return false;
                t->args = v.v;
                t->n_args = v.n;
                s->e = t;
            }
            return s->e && end_tag(P) && body_push(P, b, s);
        }
        /* {% set x %}...{% endset %}, optionally {% set x | filter %} */
        s->kind = S_SET_BLOCK;
        if (s->attr || s->n_targets != 1) return fail(P, line, "a block set takes one name%s", NULL);
        if (is_op(cur(P), "|")) {
            next(P);
            s->filter = parse_filter(P, NULL);
            if (!s->filter) return false;
        }
        if (!end_tag(P)) return false;
        static const char *const stops[] = {"endset", NULL};
        if (!parse_body(P, &s->body, stops)) return false;
        next(P);
        return end_tag(P) && body_push(P, b, s);
    }
    if (!strcmp(nm, "macro")) {
        struct jstmt *s = mks(P, S_MACRO, line);
        if (!s) return false;
        if (cur(P)->t != T_NAME) return fail(P, line, "expected a macro name%s", NULL);
        s->name = dup_name(P, next(P));
        if (!expect_op(P, "(")) return false;
        struct xvec v = {0};
        while (!is_op(cur(P), ")")) {
            if (v.n && !expect_op(P, ",")) return false;
            if (cur(P)->t != T_NAME) return fail(P, line, "expected a parameter name%s", NULL);
            const char *pn = dup_name(P, next(P));
            struct jexpr *d = NULL;
            if (is_op(cur(P), "=")) {
                next(P);
                if (!(d = parse_expr(P))) return false;
            }
            if (!xv_push(P, &v, d, pn)) return false;
        }
        next(P);
        s->params = v.names;
        s->defaults = v.v;
        s->n_params = v.n;
        if (!end_tag(P)) return false;
        static const char *const stops[] = {"endmacro", NULL};
        if (!parse_body(P, &s->body, stops)) return false;
        next(P);
        return end_tag(P) && body_push(P, b, s);
    }
    if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        struct jstmt *s = mks(P, nm[0] == 'b' ? S_BREAK : S_CONTINUE, line);
        return s && end_tag(P) && body_push(P, b, s);
    }
    if (!strcmp(nm, "generation")) {
        /* Hugging Face's assistant-mask block: its body, unchanged */
        struct jstmt *s = mks(P, S_BODY, line);
        if (!s || !end_tag(P)) return false;
        static const char *const stops[] = {"endgeneration", NULL};
        if (!parse_body(P, &s->body, stops)) return false;
        next(P);
        return end_tag(P) && body_push(P, b, s);
    }
    if (!strcmp(nm, "filter")) {
        struct jstmt *s = mks(P, S_FILTER, line);
        if (!s) return false;
        s->filter = parse_filter(P, NULL);
        if (!s->filter || !end_tag(P)) return false;
        static const char *const stops[] = {"endfilter", NULL};
        if (!parse_body(P, &s->body, stops)) return false;
        next(P);
        return end_tag(P) && body_push(P, b, s);
    }
    return fail(P, line, "the '%s' statement is not supported", nm);
}

static bool parse_body(struct parser *P, struct jbody *b, const char *const *stops)
{
    for (;;) {
        struct token *t = cur(P);
        if (P->failed) return false;
        if (t->t == T_EOF) {
            if (stops) {
                int k = 0;
                while (stops[k + 1]) k++;  /* the closing one */
                return fail(P, t->line, "missing {%% %s %%}", stops[k]);
            }
            return true;
        }
        if (t->t == T_TEXT) {
            struct jstmt *s = mks(P, S_TEXT, t->line);
            if (!s) return false;
            s->text = t->p;
            s->n_text = t->n;
            next(P);
            if (!body_push(P, b, s)) return false;
            continue;
        }
        if (t->t == T_VAR_BEGIN) {
            next(P);
            struct jstmt *s = mks(P, S_OUT, t->line);
            if (!s || !(s->e = parse_expr(P))) return false;
            if (cur(P)->t != T_VAR_END) return fail(P, cur(P)->line, "expected '}}'%s", NULL);
            next(P);
            if (!body_push(P, b, s)) return false;
            continue;
        }
        if (t->t != T_BLOCK_BEGIN) return fail(P, t->line, "unexpected token%s", NULL);
        struct token *name = &P->tk[P->pos + 1];
        if (name->t != T_NAME) return fail(P, t->line, "expected a statement name%s", NULL);
        for (int i = 0; stops && stops[i]; i++)
            if (is_name(name, stops[i])) {
                next(P);  /* left at the name */
                return true;
            }
        next(P);
        if (!parse_block(P, b, name)) return false;
    }
}

/* A filter or test by no known name outside an if's branches (where
 * jinja2 fails at compile time; inside them only when it runs). */
static bool check_expr(struct parser *P, const struct jexpr *e, bool soft);

static bool check_body(struct parser *P, const struct jbody *b, bool soft)
{
    for (uint32_t i = 0; i < b->n; i++) {
        const struct jstmt *s = b->s[i];
        bool ok = true;
        if (s->e) ok &= check_expr(P, s->e, soft);
        if (s->filter) ok &= check_expr(P, s->filter, soft);
        for (uint32_t k = 0; k < s->n_conds; k++)
            ok &= check_expr(P, s->conds[k], soft) && check_body(P, &s->bodies[k], true);
        for (uint32_t k = 0; k < s->n_params; k++)
            if (s->defaults[k]) ok &= check_expr(P, s->defaults[k], soft);
        ok &= check_body(P, &s->body, soft) && check_body(P, &s->els, soft || s->kind == S_IF);
        if (!ok) return false;
    }
    return true;
}

static bool check_expr(struct parser *P, const struct jexpr *e, bool soft)
{
    if (!e) return true;
    if (e->unknown && !soft)
        return fail(P, e->line, e->kind == X_FILTER ? "no filter named '%s'" : "no test named '%s'", e->name);
    bool cond = e->kind == X_COND;
    if (!check_expr(P, e->a, soft) || !check_expr(P, e->b, soft || cond) || !check_expr(P, e->c, soft || cond))
        return false;
    for (uint32_t i = 0; i < e->n_args; i++)
        if (!check_expr(P, e->args[i], soft)) return false;
    for (uint32_t i = 0; e->vals && i < (e->kind == X_DICT ? e->n_args : e->n_kw); i++)
        if (!check_expr(P, e->vals[i], soft)) return false;
    return true;
}

weft_status weft_jinja_parse(struct weft_jinja *t, const char *src_in, size_t n)
{
    /* the tree points into the source: the arena keeps a copy */
    char *src = weft_ja_alloc(&t->arena, n + 1);
    if (!src) return weft_error(WEFT_ERR_NOMEM, "chat template: out of memory");
    memcpy(src, src_in, n);
    struct parser P = {.t = t, .a = &t->arena, .src = src};
    bool ok = lex(&P, src, n) && parse_body(&P, &t->top, NULL) && check_body(&P, &t->top, false);
    free(P.tk);
    if (!ok || t->arena.oom)
        return weft_error(t->arena.oom ? WEFT_ERR_NOMEM : WEFT_ERR_FORMAT, "chat template: %s",
                          P.failed ? P.err : "out of memory");
    return WEFT_OK;
}
