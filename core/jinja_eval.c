/* Running a compiled template (core/jinja.h): scopes as jinja2 keeps them
 * (a for loop's own, a macro's own, set at the top level or in the
 * innermost loop), attribute and item lookup that turn a miss into
 * Undefined, the loop object, macros, and the bounds. Filters, tests,
 * methods and globals: jinja_builtin.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/jinja_eval.h"

/* ---- errors ---- */

bool weft_jx_fail(struct jctx *C, int line, const char *fmt, ...)
{
    if (!C->failed) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (line > 0) snprintf(C->err, sizeof C->err, "chat template line %d: %s", line, msg);
        else snprintf(C->err, sizeof C->err, "chat template: %s", msg);
    }
    C->failed = true;
    return false;
}

static bool step(struct jctx *C, int line)
{
    if (++C->steps > C->max_steps) return weft_jx_fail(C, line, "more than %llu steps", (unsigned long long)C->max_steps);
    if (C->a->oom || C->out->oom)
        return weft_jx_fail(C, line, C->out->oom && !C->a->oom ? "the output passed %zu bytes" : "out of memory",
                       C->out->limit);
    return true;
}

/* ---- scopes ---- */

struct scope *weft_jx_scope(struct jctx *C, struct scope *parent)
{
    struct scope *s = weft_ja_alloc(C->a, sizeof *s);
    if (!s) return NULL;
    s->parent = parent;
    struct jval d = weft_jv_dict(C->a, 0);
    s->vars = d.k == J_DICT ? d.u.d : NULL;
    return s->vars ? s : NULL;
}

static struct jval *lookup(struct scope *s, const char *name)
{
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        struct jval *v = weft_jd_get(s->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

bool weft_jx_assign(struct jctx *C, struct scope *s, const char *name, struct jval v)
{
    struct jstr *k = weft_jv_cstr(C->a, name).u.s;
    return k && weft_jd_set(C->a, s->vars, k, v);
}

/* ---- lookups: a miss is Undefined ---- */

struct jval weft_jx_undef_attr(struct jctx *C, const struct jval *obj, const char *name)
{
    char msg[200];
    if (obj->k == J_DICT) snprintf(msg, sizeof msg, "'dict object' has no attribute '%s'", name);
    else snprintf(msg, sizeof msg, "'%s' has no attribute '%s'", weft_jv_type_name(obj), name);
    char *s = weft_ja_alloc(C->a, strlen(msg) + 1);
    if (s) strcpy(s, msg);
    return weft_jv_undef(s);
}

/* the index i (negative from the end) into n, or -1 */
static int64_t norm_index(int64_t i, size_t n)
{
    if (i < 0) i += (int64_t)n;
    return i >= 0 && (uint64_t)i < n ? i : -1;
}

/* byte offsets of each code point of s, and the end: out[0..n] */
size_t weft_jx_codepoints(struct jctx *C, const struct jstr *s, size_t **out)
{
    size_t n = 0;
    size_t *off = weft_ja_alloc(C->a, (s->n + 1) * sizeof *off);
    static size_t none[1];
    *out = none;  /* out of memory: no code points (the render fails on the arena's flag) */
    if (!off) return 0;
    for (size_t i = 0; i < s->n;) {
        int len;
        weft_jv_utf8_next((const unsigned char *)s->p + i, s->n - i, &len);
        off[n++] = i;
        i += (size_t)len;
    }
    off[n] = s->n;
    *out = off;
    return n;
}

struct jval weft_jx_getattr(struct jctx *C, const struct jval *obj, const char *name)
{
    switch (obj->k) {
    case J_DICT: {
        struct jval m = weft_jx_method(C, obj, name);
        if (m.k == J_FN) return m;
        const struct jval *v = weft_jd_get(obj->u.d, name, strlen(name));
        return v ? *v : weft_jx_undef_attr(C, obj, name);
    }
    case J_NS: {
        const struct jval *v = weft_jd_get(obj->u.d, name, strlen(name));
        return v ? *v : weft_jx_undef_attr(C, obj, name);
    }
    case J_LOOP: return weft_jx_loop_attr(C, obj->u.loop, name);
    case J_STR: case J_LIST: {
        struct jval m = weft_jx_method(C, obj, name);
        return m.k == J_FN ? m : weft_jx_undef_attr(C, obj, name);
    }
    default: return weft_jx_undef_attr(C, obj, name);
    }
}

struct jval weft_jx_getitem(struct jctx *C, const struct jval *obj, const struct jval *key)
{
    if (obj->k == J_LIST && obj->u.l->gen) return weft_jv_undef("'generator' object is not subscriptable");
    if (obj->k == J_LIST && (key->k == J_INT || key->k == J_BOOL)) {
        int64_t i = norm_index(key->k == J_INT ? key->u.i : key->u.b, obj->u.l->n);
        return i >= 0 ? obj->u.l->v[i] : weft_jv_undef("list index out of range");
    }
    if ((obj->k == J_DICT || obj->k == J_NS) && key->k == J_STR) {
        const struct jval *v = weft_jd_get(obj->u.d, key->u.s->p, key->u.s->n);
        if (v) return *v;
        return obj->k == J_DICT ? weft_jx_getattr(C, obj, key->u.s->p) : weft_jx_undef_attr(C, obj, key->u.s->p);
    }
    if (obj->k == J_DICT && key->k != J_STR) {
        /* JSON keys are strings: 1 and "1" differ */
        return weft_jv_undef("no such key");
    }
    if (obj->k == J_STR && (key->k == J_INT || key->k == J_BOOL)) {
        size_t *off = NULL;
        size_t n = weft_jx_codepoints(C, obj->u.s, &off);
        int64_t i = norm_index(key->k == J_INT ? key->u.i : key->u.b, n);
        if (i < 0) return weft_jv_undef("string index out of range");
        return weft_jv_str(C->a, obj->u.s->p + off[i], off[i + 1] - off[i]);
    }
    if (key->k == J_STR) return weft_jx_getattr(C, obj, key->u.s->p);
    return weft_jv_undef("not subscriptable");
}

/* Python's slice indices for a sequence of n */
static void slice_bounds(int64_t n, const struct jval *a, const struct jval *b, int64_t st, int64_t *lo, int64_t *hi)
{
    bool ha = a && a->k != J_NONE && a->k != J_UNDEF, hb = b && b->k != J_NONE && b->k != J_UNDEF;
    int64_t x = ha ? a->u.i : (st > 0 ? 0 : n - 1), y = hb ? b->u.i : (st > 0 ? n : -n - 1);
    if (ha) {
        if (x < 0) x += n;
        if (x < 0) x = st > 0 ? 0 : -1;
        if (x >= n) x = st > 0 ? n : n - 1;
    }
    if (hb) {
        if (y < 0) y += n;
        if (y < 0) y = st > 0 ? 0 : -1;
        if (y >= n) y = st > 0 ? n : n - 1;
    }
    *lo = x;
    *hi = y;
}

static struct jval do_slice(struct jctx *C, const struct jexpr *e, const struct jval *obj, struct scope *S)
{
    struct jval a = e->b ? weft_jx_eval(C, e->b, S) : weft_jv_none(), b = e->c ? weft_jx_eval(C, e->c, S) : weft_jv_none();
    struct jval s = e->args[0] ? weft_jx_eval(C, e->args[0], S) : weft_jv_none();
    if (C->failed) return weft_jv_none();
    int64_t st = s.k == J_INT ? s.u.i : 1;
    if ((a.k != J_INT && a.k != J_NONE) || (b.k != J_INT && b.k != J_NONE) || st == 0) {
        weft_jx_fail(C, e->line, "slice indices must be integers (and a step not 0)");
        return weft_jv_none();
    }
    size_t *off = NULL;
    int64_t n = obj->k == J_LIST ? (int64_t)obj->u.l->n : obj->k == J_STR ? (int64_t)weft_jx_codepoints(C, obj->u.s, &off) : -1;
    if (n < 0) {
        weft_jx_fail(C, e->line, "'%s' object is not subscriptable", weft_jv_type_name(obj));
        return weft_jv_none();
    }
    int64_t lo, hi;
    slice_bounds(n, &a, &b, st, &lo, &hi);
    if (obj->k == J_LIST) {
        struct jval out = weft_jv_list(C->a, 0);
        if (out.k != J_LIST) return out;
        out.u.l->tuple = obj->u.l->tuple;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) weft_jl_push(C->a, out.u.l, obj->u.l->v[i]);
        return out;
    }
    struct jbuf b2 = {0};
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) weft_jb_put(&b2, obj->u.s->p + off[i], off[i + 1] - off[i]);
    struct jval r = weft_jv_str(C->a, b2.p ? b2.p : "", b2.n);
    free(b2.p);
    return r;
}

/* ---- iteration ---- */

/* The items a for loop or a filter walks over v: a list (a dict's keys, a
 * string's characters); NULL and a failure for what is not iterable. */
struct jlist *weft_jx_iter(struct jctx *C, const struct jval *v, int line)
{
    struct jval out = weft_jv_list(C->a, 0);
    if (out.k != J_LIST) return NULL;
    switch (v->k) {
    case J_UNDEF: return out.u.l;
    case J_LIST: return v->u.l;
    case J_DICT:
        for (size_t i = 0; i < v->u.d->n; i++) weft_jl_push(C->a, out.u.l, (struct jval){.k = J_STR, .u.s = v->u.d->key[i]});
        return out.u.l;
    case J_STR: {
        size_t *off = NULL;
        size_t n = weft_jx_codepoints(C, v->u.s, &off);
        for (size_t i = 0; i < n; i++) weft_jl_push(C->a, out.u.l, weft_jv_str(C->a, v->u.s->p + off[i], off[i + 1] - off[i]));
        return out.u.l;
    }
    default:
        weft_jx_fail(C, line, "'%s' object is not iterable", weft_jv_type_name(v));
        return NULL;
    }
}

/* ---- expressions ---- */

static struct jval binop(struct jctx *C, const struct jexpr *e, struct jval x, struct jval y)
{
    if (e->op == B_CONCAT) {
        struct jbuf b = {0};
        weft_jv_str_into(&b, &x, false);
        weft_jv_str_into(&b, &y, false);
        struct jval r = weft_jv_str(C->a, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (x.k == J_UNDEF || y.k == J_UNDEF) {
        weft_jx_fail(C, e->line, "%s is undefined", x.k == J_UNDEF ? (x.u.undef ? x.u.undef : "a value")
                                                              : (y.u.undef ? y.u.undef : "a value"));
        return weft_jv_none();
    }
    bool nx = x.k == J_INT || x.k == J_BOOL || x.k == J_FLOAT, ny = y.k == J_INT || y.k == J_BOOL || y.k == J_FLOAT;
    if (e->op == B_ADD && x.k == J_STR && y.k == J_STR) {
        if (x.markup || y.markup) {
            /* Markup + str, str + Markup: the plain side HTML-escaped (markupsafe) */
            struct jbuf b = {0};
            if (x.markup) weft_jb_put(&b, x.u.s->p, x.u.s->n);
            else weft_jv_html_escape(&b, x.u.s->p, x.u.s->n);
            if (y.markup) weft_jb_put(&b, y.u.s->p, y.u.s->n);
            else weft_jv_html_escape(&b, y.u.s->p, y.u.s->n);
            struct jval r = weft_jv_str(C->a, b.p ? b.p : "", b.n);
            free(b.p);
            r.markup = true;
            return r;
        }
        char *p = weft_ja_alloc(C->a, x.u.s->n + y.u.s->n + 1);
        if (!p) return weft_jv_none();
        memcpy(p, x.u.s->p, x.u.s->n);
        memcpy(p + x.u.s->n, y.u.s->p, y.u.s->n);
        return weft_jv_str(C->a, p, x.u.s->n + y.u.s->n);
    }
    if (e->op == B_ADD && x.k == J_LIST && y.k == J_LIST) {
        struct jval r = weft_jv_list(C->a, x.u.l->n + y.u.l->n);
        if (r.k != J_LIST) return r;
        for (size_t i = 0; i < x.u.l->n; i++) weft_jl_push(C->a, r.u.l, x.u.l->v[i]);
        for (size_t i = 0; i < y.u.l->n; i++) weft_jl_push(C->a, r.u.l, y.u.l->v[i]);
        r.u.l->tuple = x.u.l->tuple;
        return r;
    }
    if (e->op == B_MUL && ((x.k == J_STR && y.k == J_INT) || (x.k == J_INT && y.k == J_STR))) {
        const struct jstr *s = x.k == J_STR ? x.u.s : y.u.s;
        int64_t k = x.k == J_INT ? x.u.i : y.u.i;
        struct jbuf b = {.limit = C->out->limit};
        for (int64_t i = 0; i < k && !b.oom; i++) weft_jb_put(&b, s->p, s->n);
        struct jval r = weft_jv_str(C->a, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (e->op == B_MOD && x.k == J_STR) {
        weft_jx_fail(C, e->line, "%%-formatting of strings is not supported");
        return weft_jv_none();
    }
    if (e->op == B_ADD && (x.k == J_STR || x.k == J_LIST)) {
        const char *t = x.k == J_STR ? "str" : "list";
        weft_jx_fail(C, e->line, "can only concatenate %s (not \"%s\") to %s", t, weft_jv_type_name(&y), t);
        return weft_jv_none();
    }
    if (!nx || !ny) {
        static const char *const ops[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
        weft_jx_fail(C, e->line, "unsupported operand type(s) for %s: '%s' and '%s'", ops[e->op], weft_jv_type_name(&x),
                weft_jv_type_name(&y));
        return weft_jv_none();
    }
    bool fl = x.k == J_FLOAT || y.k == J_FLOAT || e->op == B_DIV;
    double a = x.k == J_FLOAT ? x.u.f : (double)(x.k == J_INT ? x.u.i : x.u.b);
    double b = y.k == J_FLOAT ? y.u.f : (double)(y.k == J_INT ? y.u.i : y.u.b);
    int64_t ia = x.k == J_INT ? x.u.i : x.u.b, ib = y.k == J_INT ? y.u.i : y.u.b;
    if ((e->op == B_DIV || e->op == B_FDIV || e->op == B_MOD) && b == 0) {
        weft_jx_fail(C, e->line, "division by zero");
        return weft_jv_none();
    }
    switch (e->op) {
    case B_ADD: return fl ? weft_jv_float(a + b) : weft_jv_int(ia + ib);
    case B_SUB: return fl ? weft_jv_float(a - b) : weft_jv_int(ia - ib);
    case B_MUL: return fl ? weft_jv_float(a * b) : weft_jv_int(ia * ib);
    case B_DIV: return weft_jv_float(a / b);
    case B_FDIV: {
        if (fl) return weft_jv_float(__builtin_floor(a / b));
        int64_t q = ia / ib;
        if ((ia % ib != 0) && ((ia < 0) != (ib < 0))) q--;
        return weft_jv_int(q);
    }
    case B_MOD: {
        if (fl) {
            double r = __builtin_fmod(a, b);
            if (r != 0 && ((r < 0) != (b < 0))) r += b;
            return weft_jv_float(r);
        }
        int64_t r = ia % ib;
        if (r != 0 && ((r < 0) != (ib < 0))) r += ib;
        return weft_jv_int(r);
    }
    case B_POW: {
        if (!fl && ib >= 0) {
            int64_t r = 1;
            for (int64_t i = 0; i < ib && i < 64; i++) r *= ia;
            return weft_jv_int(r);
        }
        return weft_jv_float(__builtin_pow(a, b));
    }
    default: return weft_jv_none();
    }
}

static bool contains(struct jctx *C, const struct jval *hay, const struct jval *needle, int line, bool *ok)
{
    *ok = true;
    if (hay->k == J_STR) {
        if (needle->k != J_STR) {
            *ok = weft_jx_fail(C, line, "'in <string>' requires string as left operand, not %s", weft_jv_type_name(needle));
            return false;
        }
        if (!needle->u.s->n) return true;
        for (size_t i = 0; i + needle->u.s->n <= hay->u.s->n; i++)
            if (!memcmp(hay->u.s->p + i, needle->u.s->p, needle->u.s->n)) return true;
        return false;
    }
    if (hay->k == J_LIST) {
        for (size_t i = 0; i < hay->u.l->n; i++)
            if (weft_jv_equal(&hay->u.l->v[i], needle)) return true;
        return false;
    }
    if (hay->k == J_DICT || hay->k == J_NS)
        return needle->k == J_STR && weft_jd_get(hay->u.d, needle->u.s->p, needle->u.s->n) != NULL;
    if (hay->k == J_UNDEF) return false;
    *ok = weft_jx_fail(C, line, "argument of type '%s' is not iterable", weft_jv_type_name(hay));
    return false;
}

bool weft_jx_compare(struct jctx *C, int op, const struct jval *x, const struct jval *y, int line)
{
    bool ok;
    switch (op) {
    case C_EQ: return weft_jv_equal(x, y);
    case C_NE: return !weft_jv_equal(x, y);
    case C_IN: return contains(C, y, x, line, &ok);
    case C_NOTIN: {
        bool r = contains(C, y, x, line, &ok);
        return ok && !r;
    }
    default: {
        bool bad = false;
        int c = weft_jv_compare(x, y, &bad);
        if (bad) {
            static const char *const s[] = {"", "", "<", "<=", ">", ">="};
            weft_jx_fail(C, line, "'%s' not supported between instances of '%s' and '%s'", s[op], weft_jv_type_name(x),
                    weft_jv_type_name(y));
            return false;
        }
        return op == C_LT ? c < 0 : op == C_LE ? c <= 0 : op == C_GT ? c > 0 : c >= 0;
    }
    }
}

/* Evaluate e's positional and keyword arguments. */
bool weft_jx_args(struct jctx *C, const struct jexpr *e, struct scope *S, struct jargs *out)
{
    memset(out, 0, sizeof *out);
    out->n = e->n_args;
    out->n_kw = e->n_kw;
    if (e->n_args + e->n_kw > JX_MAX_ARGS) return weft_jx_fail(C, e->line, "more than %d arguments", JX_MAX_ARGS);
    for (uint32_t i = 0; i < e->n_args; i++) out->v[i] = weft_jx_eval(C, e->args[i], S);
    for (uint32_t i = 0; i < e->n_kw; i++) {
        out->kw[i] = e->kw[i];
        out->kv[i] = weft_jx_eval(C, e->vals[i], S);
    }
    out->line = e->line;
    return !C->failed;
}

struct jval weft_jx_eval(struct jctx *C, const struct jexpr *e, struct scope *S)
{
    if (!step(C, e->line) || C->failed) return weft_jv_none();
    switch (e->kind) {
    case X_LIT: return e->lit;
    case X_NAME: {
        struct jval *v = lookup(S, e->name);
        if (v) return *v;
        struct jval g = weft_jx_global(C, e->name);
        if (g.k == J_FN) return g;
        char *msg = weft_ja_alloc(C->a, strlen(e->name) + 20);
        if (msg) sprintf(msg, "'%s' is undefined", e->name);
        return weft_jv_undef(msg);
    }
    case X_ATTR: {
        struct jval o = weft_jx_eval(C, e->a, S);
        if (o.k == J_UNDEF) {
            weft_jx_fail(C, e->line, "%s", o.u.undef ? o.u.undef : "undefined value");
            return weft_jv_none();
        }
        return weft_jx_getattr(C, &o, e->name);
    }
    case X_ITEM: {
        struct jval o = weft_jx_eval(C, e->a, S), k = weft_jx_eval(C, e->b, S);
        if (o.k == J_UNDEF) {
            weft_jx_fail(C, e->line, "%s", o.u.undef ? o.u.undef : "undefined value");
            return weft_jv_none();
        }
        return weft_jx_getitem(C, &o, &k);
    }
    case X_SLICE: {
        struct jval o = weft_jx_eval(C, e->a, S);
        return C->failed ? weft_jv_none() : do_slice(C, e, &o, S);
    }
    case X_CALL: {
        struct jval f = weft_jx_eval(C, e->a, S);
        struct jargs args;
        if (C->failed || !weft_jx_args(C, e, S, &args)) return weft_jv_none();
        if (f.k != J_FN) {
            weft_jx_fail(C, e->line, f.k == J_UNDEF ? "%s" : "'%s' object is not callable",
                    f.k == J_UNDEF ? (f.u.undef ? f.u.undef : "undefined value") : weft_jv_type_name(&f));
            return weft_jv_none();
        }
        return weft_jx_call(C, f.u.fn, &args);
    }
    case X_FILTER: {
        if (e->unknown) {
            weft_jx_fail(C, e->line, "No filter named '%s' found.", e->name);
            return weft_jv_none();
        }
        struct jval v = weft_jx_eval(C, e->a, S);
        struct jargs args;
        if (C->failed || !weft_jx_args(C, e, S, &args)) return weft_jv_none();
        return weft_jx_filter(C, e->name, &v, &args, S);
    }
    case X_TEST: {
        if (e->unknown) {
            weft_jx_fail(C, e->line, "No test named '%s' found.", e->name);
            return weft_jv_none();
        }
        struct jval v = weft_jx_eval(C, e->a, S);
        struct jargs args;
        if (C->failed || !weft_jx_args(C, e, S, &args)) return weft_jv_none();
        bool r = weft_jx_test(C, e->name, &v, &args);
        return weft_jv_bool(e->negate ? !r : r);
    }
    case X_NEG: case X_POS: {
        struct jval v = weft_jx_eval(C, e->a, S);
        if (v.k == J_INT) return weft_jv_int(e->kind == X_NEG ? -v.u.i : v.u.i);
        if (v.k == J_BOOL) return weft_jv_int(e->kind == X_NEG ? -(int64_t)v.u.b : v.u.b);
        if (v.k == J_FLOAT) return weft_jv_float(e->kind == X_NEG ? -v.u.f : v.u.f);
        weft_jx_fail(C, e->line, "bad operand type for unary %s: '%s'", e->kind == X_NEG ? "-" : "+", weft_jv_type_name(&v));
        return weft_jv_none();
    }
    case X_NOT: {
        struct jval v = weft_jx_eval(C, e->a, S);
        return weft_jv_bool(!weft_jv_truthy(&v));
    }
    case X_AND: {
        struct jval v = weft_jx_eval(C, e->a, S);
        return weft_jv_truthy(&v) ? weft_jx_eval(C, e->b, S) : v;
    }
    case X_OR: {
        struct jval v = weft_jx_eval(C, e->a, S);
        return weft_jv_truthy(&v) ? v : weft_jx_eval(C, e->b, S);
    }
    case X_BIN: {
        struct jval x = weft_jx_eval(C, e->a, S), y = weft_jx_eval(C, e->b, S);
        return C->failed ? weft_jv_none() : binop(C, e, x, y);
    }
    case X_CMP: {
        struct jval x = weft_jx_eval(C, e->a, S);
        for (uint32_t i = 0; i < e->n_args; i++) {
            struct jval y = weft_jx_eval(C, e->args[i], S);
            if (C->failed) return weft_jv_none();
            if (!weft_jx_compare(C, e->cmp_ops[i], &x, &y, e->line)) return weft_jv_bool(false);
            x = y;
        }
        return weft_jv_bool(!C->failed);
    }
    case X_COND: {
        struct jval c = weft_jx_eval(C, e->a, S);
        if (weft_jv_truthy(&c)) return weft_jx_eval(C, e->b, S);
        return e->c ? weft_jx_eval(C, e->c, S) : weft_jv_undef("the else branch of a conditional expression");
    }
    case X_LIST: case X_TUPLE: {
        struct jval l = weft_jv_list(C->a, e->n_args);
        if (l.k != J_LIST) return l;
        l.u.l->tuple = e->kind == X_TUPLE;
        for (uint32_t i = 0; i < e->n_args; i++) weft_jl_push(C->a, l.u.l, weft_jx_eval(C, e->args[i], S));
        return l;
    }
    case X_DICT: {
        struct jval d = weft_jv_dict(C->a, e->n_args);
        if (d.k != J_DICT) return d;
        for (uint32_t i = 0; i < e->n_args; i++) {
            struct jval k = weft_jx_eval(C, e->args[i], S), v = weft_jx_eval(C, e->vals[i], S);
            if (k.k != J_STR) {
                weft_jx_fail(C, e->line, "a dict key of type %s (only strings)", weft_jv_type_name(&k));
                return weft_jv_none();
            }
            weft_jd_set(C->a, d.u.d, k.u.s, v);
        }
        return d;
    }
    default:
        weft_jx_fail(C, e->line, "an expression this renderer does not know");
        return weft_jv_none();
    }
}

/* ---- statements ---- */

static bool run(struct jctx *C, const struct jbody *b, struct scope *S);

/* Render b into a string value (a block set, a filter block, a macro). */
struct jval weft_jx_capture(struct jctx *C, const struct jbody *b, struct scope *S)
{
    struct jbuf *saved = C->out;
    struct jbuf tmp = {.limit = saved->limit};
    C->out = &tmp;
    bool ok = run(C, b, S);
    C->out = saved;
    struct jval r = ok && !tmp.oom ? weft_jv_str(C->a, tmp.p ? tmp.p : "", tmp.n) : weft_jv_none();
    if (tmp.oom) weft_jx_fail(C, 0, "the output passed %zu bytes", saved->limit);
    free(tmp.p);
    return r;
}

static bool unpack(struct jctx *C, struct scope *S, const char **names, uint32_t n, struct jval v, int line)
{
    if (n == 1) return weft_jx_assign(C, S, names[0], v);
    if (v.k != J_LIST || v.u.l->n != n) {
        return weft_jx_fail(C, line, "cannot unpack %s into %u names", v.k == J_LIST ? "a sequence of another length"
                                                                               : weft_jv_type_name(&v), n);
    }
    for (uint32_t i = 0; i < n; i++)
        if (!weft_jx_assign(C, S, names[i], v.u.l->v[i])) return false;
    return true;
}

static bool run_for(struct jctx *C, const struct jstmt *s, struct scope *S)
{
    struct jval it = weft_jx_eval(C, s->e, S);
    if (C->failed) return false;
    struct jlist *items = weft_jx_iter(C, &it, s->line);
    if (!items) return false;
    if (s->filter) {
        /* the loop's "if": items filtered before the loop counts them */
        struct jval kept = weft_jv_list(C->a, items->n);
        if (kept.k != J_LIST) return false;
        struct scope *F = weft_jx_scope(C, S);
        if (!F) return false;
        for (size_t i = 0; i < items->n; i++) {
            if (!unpack(C, F, s->targets, s->n_targets, items->v[i], s->line)) return false;
            struct jval c = weft_jx_eval(C, s->filter, F);
            if (C->failed) return false;
            if (weft_jv_truthy(&c)) weft_jl_push(C->a, kept.u.l, items->v[i]);
        }
        items = kept.u.l;
    }
    if (!items->n) return run(C, &s->els, S);
    struct jloop *loop = weft_ja_alloc(C->a, sizeof *loop);
    if (!loop) return false;
    loop->items = items;
    loop->parent = lookup(S, "loop");
    for (size_t i = 0; i < items->n; i++) {
        struct scope *L = weft_jx_scope(C, S);
        if (!L) return false;
        loop->i = i;
        if (!weft_jx_assign(C, L, "loop", (struct jval){.k = J_LOOP, .u.loop = loop}) ||
            !unpack(C, L, s->targets, s->n_targets, items->v[i], s->line))
            return false;
        if (!run(C, &s->body, L)) return false;
        if (C->ctl == CTL_BREAK) {
            C->ctl = CTL_NONE;
            break;
        }
        C->ctl = CTL_NONE;
    }
    return true;
}

static bool run(struct jctx *C, const struct jbody *b, struct scope *S)
{
    if (++C->depth > 200) return weft_jx_fail(C, 0, "nesting deeper than 200");
    bool ok = true;
    for (uint32_t i = 0; i < b->n && ok && C->ctl == CTL_NONE; i++) {
        const struct jstmt *s = b->s[i];
        if (!step(C, s->line)) {
            ok = false;
            break;
        }
        switch (s->kind) {
        case S_TEXT: weft_jb_put(C->out, s->text, s->n_text); break;
        case S_OUT: {
            struct jval v = weft_jx_eval(C, s->e, S);
            if (!C->failed && v.k == J_LIST && v.u.l->gen)
                weft_jx_fail(C, s->line, "printing a generator (its text is an address, not reproducible)");
            if (C->failed) ok = false;
            else weft_jv_str_into(C->out, &v, false);
            break;
        }
        case S_IF: {
            uint32_t k = 0;
            for (; k < s->n_conds; k++) {
                struct jval c = weft_jx_eval(C, s->conds[k], S);
                if (C->failed) return false;
                if (weft_jv_truthy(&c)) break;
            }
            ok = run(C, k < s->n_conds ? &s->bodies[k] : &s->els, S);
            break;
        }
        case S_FOR: ok = run_for(C, s, S); break;
        case S_SET: {
            struct jval v = weft_jx_eval(C, s->e, S);
            if (C->failed) return false;
            if (s->attr) {
                struct jval *ns = lookup(S, s->targets[0]);
                if (!ns || ns->k != J_NS)
                    return weft_jx_fail(C, s->line, "cannot assign attribute on non-namespace object '%s'", s->targets[0]);
                struct jstr *k = weft_jv_cstr(C->a, s->attr).u.s;
                ok = k && weft_jd_set(C->a, ns->u.d, k, v);
            } else {
                ok = unpack(C, S, s->targets, s->n_targets, v, s->line);
            }
            break;
        }
        case S_SET_BLOCK: {
            struct jval v = weft_jx_capture(C, &s->body, S);
            if (!C->failed && s->filter) {
                struct jargs args;
                if (!weft_jx_args(C, s->filter, S, &args)) return false;
                v = weft_jx_filter(C, s->filter->name, &v, &args, S);
            }
            ok = !C->failed && weft_jx_assign(C, S, s->targets[0], v);
            break;
        }
        case S_FILTER: {
            struct jval v = weft_jx_capture(C, &s->body, S);
            struct jargs args;
            if (C->failed || !weft_jx_args(C, s->filter, S, &args)) return false;
            v = weft_jx_filter(C, s->filter->name, &v, &args, S);
            if (!C->failed) weft_jv_str_into(C->out, &v, false);
            ok = !C->failed;
            break;
        }
        case S_MACRO: {
            struct jfn *f = weft_ja_alloc(C->a, sizeof *f);
            if (!f) return false;
            f->kind = FN_MACRO;
            f->macro = s;
            f->closure = S;
            ok = weft_jx_assign(C, S, s->name, (struct jval){.k = J_FN, .u.fn = f});
            break;
        }
        case S_BREAK: C->ctl = CTL_BREAK; break;
        case S_CONTINUE: C->ctl = CTL_CONTINUE; break;
        case S_BODY: ok = run(C, &s->body, S); break;
        default: ok = weft_jx_fail(C, s->line, "a statement this renderer does not know");
        }
        if (C->failed) ok = false;
    }
    C->depth--;
    return ok && !C->failed;
}

struct jval weft_jx_call_macro(struct jctx *C, const struct jfn *f, const struct jargs *a)
{
    const struct jstmt *m = f->macro;
    struct scope *M = weft_jx_scope(C, f->closure);
    if (!M) return weft_jv_none();
    if (a->n > m->n_params) {
        weft_jx_fail(C, a->line, "macro '%s' takes not more than %u argument(s)", m->name, m->n_params);
        return weft_jv_none();
    }
    for (uint32_t i = 0; i < m->n_params; i++) {
        struct jval v = weft_jv_undef(NULL);
        bool have = i < a->n;
        if (have) v = a->v[i];
        for (uint32_t k = 0; k < a->n_kw; k++)
            if (!strcmp(a->kw[k], m->params[i])) {
                v = a->kv[k];
                have = true;
            }
        if (!have && m->defaults[i]) v = weft_jx_eval(C, m->defaults[i], M);
        if (!have && !m->defaults[i]) {
            char *msg = weft_ja_alloc(C->a, strlen(m->params[i]) + 40);
            if (msg) sprintf(msg, "'%s' is undefined", m->params[i]);
            v = weft_jv_undef(msg);
        }
        weft_jx_assign(C, M, m->params[i], v);
    }
    for (uint32_t k = 0; k < a->n_kw; k++) {
        bool known = false;
        for (uint32_t i = 0; i < m->n_params; i++) known |= !strcmp(a->kw[k], m->params[i]);
        if (!known) {
            weft_jx_fail(C, a->line, "macro '%s' takes no keyword argument '%s'", m->name, a->kw[k]);
            return weft_jv_none();
        }
    }
    return weft_jx_capture(C, &m->body, M);
}

/* ---- the API ---- */

weft_status weft_jinja_compile(const char *src, size_t n, struct weft_jinja **out)
{
    *out = NULL;
    struct weft_jinja *t = calloc(1, sizeof *t);
    if (!t) return weft_error(WEFT_ERR_NOMEM, "chat template: out of memory");
    weft_status st = weft_jinja_parse(t, src, n);
    if (st != WEFT_OK) {
        weft_jinja_free(t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

void weft_jinja_free(struct weft_jinja *t)
{
    if (!t) return;
    weft_ja_free(&t->arena);
    free(t);
}

weft_status weft_jinja_render(const struct weft_jinja *t, const char *vars_json, size_t vars_len,
                              const struct weft_jinja_limits *limits, char **out, size_t *n_out)
{
    *out = NULL;
    if (n_out) *n_out = 0;
    struct jarena a = {0};
    struct jbuf buf = {.limit = limits && limits->max_output ? limits->max_output : (size_t)4 << 20};
    struct jctx C = {.a = &a, .out = &buf, .max_steps = limits && limits->max_steps ? limits->max_steps : 10000000,
                     .now = limits && limits->now ? limits->now : (int64_t)time(NULL)};
    struct jval vars;
    weft_status st = weft_jv_from_json(&a, vars_json, vars_len, &vars);
    if (st == WEFT_OK && vars.k != J_DICT)
        st = weft_error(WEFT_ERR_INVALID_ARG, "chat template: the variables are not a JSON object");
    struct scope *G = st == WEFT_OK ? weft_jx_scope(&C, NULL) : NULL;
    if (st == WEFT_OK && !G) st = weft_error(WEFT_ERR_NOMEM, "chat template: out of memory");
    if (st == WEFT_OK) {
        G->vars = vars.u.d;
        struct scope *top = weft_jx_scope(&C, G);
        bool ok = top && run(&C, &t->top, top);
        if (!ok || C.failed) {
            st = C.raised ? weft_error(WEFT_ERR_INVALID_ARG, "%s", C.err)
                          : weft_error(a.oom ? WEFT_ERR_NOMEM : WEFT_ERR_INVALID_ARG, "%s",
                                       C.failed ? C.err : "chat template: out of memory");
        }
    }
    weft_ja_free(&a);
    if (st != WEFT_OK) {
        free(buf.p);
        return st;
    }
    if (!buf.p) buf.p = calloc(1, 1);
    if (!buf.p) return weft_error(WEFT_ERR_NOMEM, "chat template: out of memory");
    *out = buf.p;
    if (n_out) *n_out = buf.n;
    return WEFT_OK;
}
