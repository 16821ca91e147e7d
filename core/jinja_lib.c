/* core/jinja's values: the arena they live in, Python's truth, equality and
 * order, str() and repr(), json.dumps (Hugging Face's tojson: non-ASCII
 * kept) and the JSON the variables arrive in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jinja_internal.h"

/* ---- arena ---- */

struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *weft_ja_alloc(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 60000 ? n : 60000;
        c = malloc(sizeof *c + cap);
        if (!c) {
            a->oom = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void weft_ja_free(struct jarena *a)
{
    for (struct jchunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ---- constructors ---- */

struct jval weft_jv_none(void) { return (struct jval){.k = J_NONE}; }
struct jval weft_jv_undef(const char *what) { return (struct jval){.k = J_UNDEF, .u.undef = what}; }
struct jval weft_jv_bool(bool b) { return (struct jval){.k = J_BOOL, .u.b = b}; }
struct jval weft_jv_int(int64_t i) { return (struct jval){.k = J_INT, .u.i = i}; }
struct jval weft_jv_float(double f) { return (struct jval){.k = J_FLOAT, .u.f = f}; }

struct jval weft_jv_str(struct jarena *a, const char *p, size_t n)
{
    struct jstr *s = weft_ja_alloc(a, sizeof *s + n + 1);
    if (!s) return weft_jv_none();
    s->n = n;
    if (n) memcpy(s->p, p, n);
    s->p[n] = 0;
    return (struct jval){.k = J_STR, .u.s = s};
}

struct jval weft_jv_cstr(struct jarena *a, const char *p) { return weft_jv_str(a, p, strlen(p)); }

struct jval weft_jv_list(struct jarena *a, size_t cap)
{
    struct jlist *l = weft_ja_alloc(a, sizeof *l);
    if (!l) return weft_jv_none();
    if (cap && !(l->v = weft_ja_alloc(a, cap * sizeof *l->v))) return weft_jv_none();
    l->cap = cap;
    return (struct jval){.k = J_LIST, .u.l = l};
}

struct jval weft_jv_dict(struct jarena *a, size_t cap)
{
    struct jdict *d = weft_ja_alloc(a, sizeof *d);
    if (!d) return weft_jv_none();
    if (cap && (!(d->key = weft_ja_alloc(a, cap * sizeof *d->key)) || !(d->val = weft_ja_alloc(a, cap * sizeof *d->val))))
        return weft_jv_none();
    d->cap = cap;
    return (struct jval){.k = J_DICT, .u.d = d};
}

bool weft_jl_push(struct jarena *a, struct jlist *l, struct jval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4;
        struct jval *nv = weft_ja_alloc(a, cap * sizeof *nv);
        if (!nv) return false;
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return true;
}

struct jval *weft_jd_get(const struct jdict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->key[i]->n == n && !memcmp(d->key[i]->p, key, n)) return &d->val[i];
    return NULL;
}

bool weft_jd_set(struct jarena *a, struct jdict *d, struct jstr *key, struct jval v)
{
    struct jval *have = weft_jd_get(d, key->p, key->n);
    if (have) {
        *have = v;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        struct jstr **nk = weft_ja_alloc(a, cap * sizeof *nk);
        struct jval *nv = weft_ja_alloc(a, cap * sizeof *nv);
        if (!nk || !nv) return false;
        if (d->n) {
            memcpy(nk, d->key, d->n * sizeof *nk);
            memcpy(nv, d->val, d->n * sizeof *nv);
        }
        d->key = nk;
        d->val = nv;
        d->cap = cap;
    }
    d->key[d->n] = key;
    d->val[d->n++] = v;
    return true;
}

/* ---- Python's semantics ---- */

bool weft_jv_truthy(const struct jval *v)
{
    switch (v->k) {
    case J_UNDEF: case J_NONE: return false;
    case J_BOOL: return v->u.b;
    case J_INT: return v->u.i != 0;
    case J_FLOAT: return v->u.f != 0;
    case J_STR: return v->u.s->n > 0;
    case J_LIST: return v->u.l->gen || v->u.l->n > 0;  /* a generator is true */
    case J_DICT: return v->u.d->n > 0;
    default: return true;
    }
}

static bool numeric(const struct jval *v) { return v->k == J_BOOL || v->k == J_INT || v->k == J_FLOAT; }
static double num(const struct jval *v) { return v->k == J_FLOAT ? v->u.f : v->k == J_INT ? (double)v->u.i : v->u.b; }

bool weft_jv_equal(const struct jval *a, const struct jval *b)
{
    if (numeric(a) && numeric(b)) {
        if (a->k != J_FLOAT && b->k != J_FLOAT) {
            int64_t x = a->k == J_INT ? a->u.i : a->u.b, y = b->k == J_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num(a) == num(b);
    }
    if (a->k != b->k) return false;
    switch (a->k) {
    case J_UNDEF: case J_NONE: return true;
    case J_STR: return a->u.s->n == b->u.s->n && !memcmp(a->u.s->p, b->u.s->p, a->u.s->n);
    case J_LIST:
        if (a->u.l->n != b->u.l->n || a->u.l->tuple != b->u.l->tuple) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!weft_jv_equal(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    case J_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const struct jval *o = weft_jd_get(b->u.d, a->u.d->key[i]->p, a->u.d->key[i]->n);
            if (!o || !weft_jv_equal(&a->u.d->val[i], o)) return false;
        }
        return true;
    default: return a->u.d == b->u.d;
    }
}

int weft_jv_compare(const struct jval *a, const struct jval *b, bool *bad)
{
    if (numeric(a) && numeric(b)) {
        double x = num(a), y = num(b);
        return x < y ? -1 : x > y;
    }
    if (a->k == J_STR && b->k == J_STR) {
        size_t n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
        int c = memcmp(a->u.s->p, b->u.s->p, n);  /* UTF-8 bytes order as code points */
        if (c) return c < 0 ? -1 : 1;
        return a->u.s->n < b->u.s->n ? -1 : a->u.s->n > b->u.s->n;
    }
    if (a->k == J_LIST && b->k == J_LIST) {
        for (size_t i = 0; i < a->u.l->n && i < b->u.l->n; i++) {
            if (weft_jv_equal(&a->u.l->v[i], &b->u.l->v[i])) continue;
            return weft_jv_compare(&a->u.l->v[i], &b->u.l->v[i], bad);
        }
        return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
    }
    *bad = true;
    return 0;
}

const char *weft_jv_type_name(const struct jval *v)
{
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                        "Namespace", "LoopContext", "function"};
    if (v->k == J_LIST && v->u.l->tuple) return "tuple";
    if (v->k == J_LIST && v->u.l->gen) return "generator";
    return v->k <= J_FN ? names[v->k] : "object";
}

/* ---- text ---- */

void weft_jb_put(struct jbuf *b, const char *s, size_t n)
{
    if (b->oom || !n) return;
    if (b->limit && b->n + n > b->limit) {
        b->oom = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void weft_jb_puts(struct jbuf *b, const char *s) { weft_jb_put(b, s, strlen(s)); }

/* Python's repr of a float: the shortest digits that read back, in
 * exponent form below 1e-4 or from 1e16 on, else with a ".0" at least. */
static void float_repr(struct jbuf *b, double f, bool json)
{
    if (isnan(f)) { weft_jb_puts(b, json ? "NaN" : "nan"); return; }
    if (isinf(f)) { weft_jb_puts(b, f < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf")); return; }
    char buf[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* digits and exponent from the %e form */
    char digits[32];
    int nd = 0, exp10 = 0;
    bool neg = buf[0] == '-';
    for (const char *p = buf + neg; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    const char *e = strchr(buf, 'e');
    exp10 = e ? atoi(e + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = -1; i > exp10; i--) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
        for (int i = 0; i <= exp10; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd > exp10 + 1)
            for (int i = exp10 + 1; i < nd; i++) out[k++] = digits[i];
        else
            out[k++] = '0';
    }
    weft_jb_put(b, out, (size_t)k);
}

/* The next UTF-8 code point of s (at most n bytes); *len its bytes (1 for a
 * bad byte, taken as that byte's value). */
uint32_t weft_jv_utf8_next(const unsigned char *s, size_t n, int *len)
{
    uint32_t c = s[0];
    int need = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (need <= 0 || (size_t)need + 1 > n) {
        *len = 1;
        return c;
    }
    uint32_t cp = c & (0x3f >> need);
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    *len = need + 1;
    return cp;
}

/* repr() of a string: Python's quote choice and escapes (printable
 * non-ASCII kept as it is) */
static void str_repr(struct jbuf *b, const struct jstr *s)
{
    bool sq = memchr(s->p, '\'', s->n) != NULL, dq = memchr(s->p, '"', s->n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    weft_jb_put(b, &q, 1);
    const unsigned char *p = (const unsigned char *)s->p;
    for (size_t i = 0; i < s->n;) {
        int len;
        uint32_t c = weft_jv_utf8_next(p + i, s->n - i, &len);
        char esc[16];
        if (c == '\\') weft_jb_puts(b, "\\\\");
        else if (c == (uint32_t)q) { esc[0] = '\\'; esc[1] = q; weft_jb_put(b, esc, 2); }
        else if (c == '\n') weft_jb_puts(b, "\\n");
        else if (c == '\r') weft_jb_puts(b, "\\r");
        else if (c == '\t') weft_jb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0)) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            weft_jb_puts(b, esc);
        } else {
            weft_jb_put(b, (const char *)p + i, (size_t)len);
        }
        i += (size_t)len;
    }
    weft_jb_put(b, &q, 1);
}

void weft_jv_str_into(struct jbuf *b, const struct jval *v, bool repr)
{
    char tmp[32];
    switch (v->k) {
    case J_UNDEF: break;
    case J_NONE: weft_jb_puts(b, "None"); break;
    case J_BOOL: weft_jb_puts(b, v->u.b ? "True" : "False"); break;
    case J_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i); weft_jb_puts(b, tmp); break;
    case J_FLOAT: float_repr(b, v->u.f, false); break;
    case J_STR:
        if (repr) str_repr(b, v->u.s);
        else weft_jb_put(b, v->u.s->p, v->u.s->n);
        break;
    case J_LIST: {
        const struct jlist *l = v->u.l;
        weft_jb_puts(b, l->tuple ? "(" : "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) weft_jb_puts(b, ", ");
            weft_jv_str_into(b, &l->v[i], true);
        }
        if (l->tuple && l->n == 1) weft_jb_puts(b, ",");
        weft_jb_puts(b, l->tuple ? ")" : "]");
        break;
    }
    case J_DICT: {
        const struct jdict *d = v->u.d;
        weft_jb_puts(b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) weft_jb_puts(b, ", ");
            str_repr(b, d->key[i]);
            weft_jb_puts(b, ": ");
            weft_jv_str_into(b, &d->val[i], true);
        }
        weft_jb_puts(b, "}");
        break;
    }
    case J_NS: weft_jb_puts(b, "<Namespace>"); break;
    case J_LOOP: weft_jb_puts(b, "<LoopContext>"); break;
    default: weft_jb_puts(b, "<function>"); break;
    }
}

void weft_jv_html_escape(struct jbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *r = s[i] == '&' ? "&amp;" : s[i] == '<' ? "&lt;" : s[i] == '>' ? "&gt;"
                      : s[i] == '"' ? "&#34;" : s[i] == '\'' ? "&#39;" : NULL;
        if (r) weft_jb_puts(b, r);
        else weft_jb_put(b, s + i, 1);
    }
}

/* ---- JSON out: json.dumps ---- */

static void json_str(struct jbuf *b, const char *s, size_t n)
{
    weft_jb_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (!esc) continue;
        weft_jb_put(b, s + run, i - run);
        weft_jb_puts(b, esc);
        run = i + 1;
    }
    weft_jb_put(b, s + run, n - run);
    weft_jb_put(b, "\"", 1);
}

static void newline_indent(struct jbuf *b, int indent, int level)
{
    weft_jb_put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++) weft_jb_put(b, " ", 1);
}

static int key_cmp(const void *x, const void *y)
{
    const struct jstr *a = *(struct jstr *const *)x, *b = *(struct jstr *const *)y;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->p, b->p, n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

bool weft_jv_json_into(struct jbuf *b, const struct jval *v, int indent, const char *item_sep, const char *key_sep,
                  bool sort_keys, int depth)
{
    if (depth > 64) return false;
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    char tmp[32];
    switch (v->k) {
    case J_NONE: weft_jb_puts(b, "null"); return true;
    case J_BOOL: weft_jb_puts(b, v->u.b ? "true" : "false"); return true;
    case J_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i); weft_jb_puts(b, tmp); return true;
    case J_FLOAT: float_repr(b, v->u.f, true); return true;
    case J_STR: json_str(b, v->u.s->p, v->u.s->n); return true;
    case J_LIST: {
        const struct jlist *l = v->u.l;
        if (l->gen) return false;  /* "Object of type generator is not JSON serializable" */
        if (!l->n) { weft_jb_puts(b, "[]"); return true; }
        weft_jb_puts(b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) weft_jb_puts(b, item_sep);
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            if (!weft_jv_json_into(b, &l->v[i], indent, item_sep, key_sep, sort_keys, depth + 1)) return false;
        }
        if (indent >= 0) newline_indent(b, indent, depth);
        weft_jb_puts(b, "]");
        return true;
    }
    case J_DICT: case J_NS: {
        const struct jdict *d = v->u.d;
        if (!d->n) { weft_jb_puts(b, "{}"); return true; }
        size_t *order = malloc(d->n * sizeof *order);
        struct jstr **keys = malloc(d->n * sizeof *keys);
        if (!order || !keys) {
            free(order);
            free(keys);
            b->oom = true;
            return false;
        }
        memcpy(keys, d->key, d->n * sizeof *keys);
        if (sort_keys) qsort(keys, d->n, sizeof *keys, key_cmp);
        weft_jb_puts(b, "{");
        bool ok = true;
        for (size_t i = 0; i < d->n && ok; i++) {
            if (i) weft_jb_puts(b, item_sep);
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            json_str(b, keys[i]->p, keys[i]->n);
            weft_jb_puts(b, key_sep);
            ok = weft_jv_json_into(b, weft_jd_get(d, keys[i]->p, keys[i]->n), indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        free(order);
        free(keys);
        if (!ok) return false;
        if (indent >= 0) newline_indent(b, indent, depth);
        weft_jb_puts(b, "}");
        return true;
    }
    default:
        return false;  /* Undefined, functions: not JSON */
    }
}

/* ---- JSON in ---- */

struct jin { struct jarena *a; const char *s, *end; int depth; };

static void skip_ws(struct jin *J)
{
    while (J->s < J->end && (*J->s == ' ' || *J->s == '\t' || *J->s == '\n' || *J->s == '\r')) J->s++;
}

void weft_jv_utf8_put(char *out, size_t *n, uint32_t cp)
{
    if (cp < 0x80) out[(*n)++] = (char)cp;
    else if (cp < 0x800) { out[(*n)++] = (char)(0xc0 | cp >> 6); out[(*n)++] = (char)(0x80 | (cp & 0x3f)); }
    else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xe0 | cp >> 12); out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xf0 | cp >> 18); out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static bool hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v * 16 + (uint32_t)d;
    }
    return true;
}

static struct jstr *json_string(struct jin *J)
{
    const char *p = ++J->s;
    char *out = weft_ja_alloc(J->a, (size_t)(J->end - p) + 1);
    if (!out) return NULL;
    size_t n = 0;
    while (J->s < J->end && *J->s != '"') {
        char c = *J->s++;
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        if (J->s >= J->end) return NULL;
        c = *J->s++;
        uint32_t cp;
        switch (c) {
        case '"': case '\\': case '/': out[n++] = c; break;
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'u':
            if (J->end - J->s < 4 || !hex4(J->s, &cp)) return NULL;
            J->s += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && J->end - J->s >= 6 && J->s[0] == '\\' && J->s[1] == 'u') {
                uint32_t lo;
                if (hex4(J->s + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    J->s += 6;
                }
            }
            weft_jv_utf8_put(out, &n, cp);
            break;
        default: return NULL;
        }
    }
    if (J->s >= J->end) return NULL;
    J->s++;
    struct jstr *s = weft_ja_alloc(J->a, sizeof *s + n + 1);
    if (!s) return NULL;
    s->n = n;
    memcpy(s->p, out, n);
    return s;
}

static bool json_value(struct jin *J, struct jval *out)
{
    skip_ws(J);
    if (J->s >= J->end || ++J->depth > 200) return false;
    char c = *J->s;
    bool ok = true;
    if (c == '{') {
        J->s++;
        *out = weft_jv_dict(J->a, 0);
        skip_ws(J);
        if (J->s < J->end && *J->s == '}') J->s++;
        else
            for (;;) {
                skip_ws(J);
                if (J->s >= J->end || *J->s != '"') return false;
                struct jstr *k = json_string(J);
                skip_ws(J);
                if (!k || J->s >= J->end || *J->s++ != ':') return false;
                struct jval v;
                if (!json_value(J, &v) || !weft_jd_set(J->a, out->u.d, k, v)) return false;
                skip_ws(J);
                if (J->s < J->end && *J->s == ',') { J->s++; continue; }
                if (J->s < J->end && *J->s == '}') { J->s++; break; }
                return false;
            }
    } else if (c == '[') {
        J->s++;
        *out = weft_jv_list(J->a, 0);
        skip_ws(J);
        if (J->s < J->end && *J->s == ']') J->s++;
        else
            for (;;) {
                struct jval v;
                if (!json_value(J, &v) || !weft_jl_push(J->a, out->u.l, v)) return false;
                skip_ws(J);
                if (J->s < J->end && *J->s == ',') { J->s++; continue; }
                if (J->s < J->end && *J->s == ']') { J->s++; break; }
                return false;
            }
    } else if (c == '"') {
        struct jstr *s = json_string(J);
        if (!s) return false;
        *out = (struct jval){.k = J_STR, .u.s = s};
    } else if (J->end - J->s >= 4 && !strncmp(J->s, "true", 4)) {
        J->s += 4;
        *out = weft_jv_bool(true);
    } else if (J->end - J->s >= 5 && !strncmp(J->s, "false", 5)) {
        J->s += 5;
        *out = weft_jv_bool(false);
    } else if (J->end - J->s >= 4 && !strncmp(J->s, "null", 4)) {
        J->s += 4;
        *out = weft_jv_none();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const char *s = J->s;
        bool flt = false;
        if (*J->s == '-') J->s++;
        while (J->s < J->end && ((*J->s >= '0' && *J->s <= '9') || *J->s == '.' || *J->s == 'e' || *J->s == 'E' ||
                                 *J->s == '+' || *J->s == '-')) {
            flt |= *J->s == '.' || *J->s == 'e' || *J->s == 'E';
            J->s++;
        }
        char num[64];
        size_t n = (size_t)(J->s - s);
        if (n >= sizeof num) return false;
        memcpy(num, s, n);
        num[n] = 0;
        *out = flt ? weft_jv_float(strtod(num, NULL)) : weft_jv_int(strtoll(num, NULL, 10));
    } else {
        ok = false;
    }
    J->depth--;
    return ok && !J->a->oom;
}

weft_status weft_jv_from_json(struct jarena *a, const char *s, size_t n, struct jval *out)
{
    struct jin J = {a, s, s + n, 0};
    if (!json_value(&J, out)) return weft_error(WEFT_ERR_INVALID_ARG, "chat template: the variables are not valid JSON");
    skip_ws(&J);
    if (J.s != J.end) return weft_error(WEFT_ERR_INVALID_ARG, "chat template: text after the variables' JSON");
    return WEFT_OK;
}
