/* core/jinja's filters, tests, the methods of strings, dicts and lists, the
 * loop object and the globals (range, namespace, dict, raise_exception,
 * strftime_now), each as jinja2 and Python have it. Methods that change a
 * list or dict are refused as jinja2's immutable sandbox refuses them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/jinja_eval.h"

/* ---- helpers ---- */

static const struct jval *arg(const struct jargs *a, uint32_t i, const char *name)
{
    if (i < a->n) return &a->v[i];
    for (uint32_t k = 0; name && k < a->n_kw; k++)
        if (!strcmp(a->kw[k], name)) return &a->kv[k];
    return NULL;
}

static struct jstr *to_str(struct jctx *C, const struct jval *v)
{
    if (v->k == J_STR) return v->u.s;
    struct jbuf b = {0};
    weft_jv_str_into(&b, v, false);
    struct jval s = weft_jv_str(C->a, b.p ? b.p : "", b.n);
    free(b.p);
    return s.k == J_STR ? s.u.s : NULL;
}

static struct jval str_of(struct jctx *C, const char *p, size_t n) { return weft_jv_str(C->a, p, n); }

static bool is_space_cp(uint32_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static bool in_chars(uint32_t c, const struct jstr *chars)
{
    for (size_t i = 0; i < chars->n;) {
        int len;
        uint32_t d = weft_jv_utf8_next((const unsigned char *)chars->p + i, chars->n - i, &len);
        if (d == c) return true;
        i += (size_t)len;
    }
    return false;
}

/* str.strip / lstrip / rstrip (chars NULL: whitespace) */
static struct jval strip(struct jctx *C, const struct jstr *s, const struct jstr *chars, bool left, bool right)
{
    size_t *off = NULL;
    size_t n = weft_jx_codepoints(C, s, &off), lo = 0, hi = n;
    const unsigned char *p = (const unsigned char *)s->p;
    int len;
    while (left && lo < hi) {
        uint32_t c = weft_jv_utf8_next(p + off[lo], s->n - off[lo], &len);
        if (chars ? !in_chars(c, chars) : !is_space_cp(c)) break;
        lo++;
    }
    while (right && hi > lo) {
        uint32_t c = weft_jv_utf8_next(p + off[hi - 1], s->n - off[hi - 1], &len);
        if (chars ? !in_chars(c, chars) : !is_space_cp(c)) break;
        hi--;
    }
    return str_of(C, s->p + off[lo], off[hi] - off[lo]);
}

static bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static struct jval case_map(struct jctx *C, const struct jstr *s, int mode)
{
    /* mode 0 lower, 1 upper, 2 capitalize, 3 title (jinja's: after -, space, ( { [ <), 4 str.title */
    char *p = weft_ja_alloc(C->a, s->n + 1);
    if (!p) return weft_jv_none();
    bool start = true;
    for (size_t i = 0; i < s->n; i++) {
        char c = s->p[i];
        bool up = mode == 1 || ((mode == 2) && i == 0) || ((mode == 3 || mode == 4) && start);
        if (ascii_alpha(c)) c = up ? (char)(c & ~0x20) : (char)(c | 0x20);
        p[i] = c;
        if (mode == 3) start = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '(' || c == '{' || c == '[' || c == '<';
        else if (mode == 4) start = !ascii_alpha(c) && !((unsigned char)c & 0x80);
        else start = false;
    }
    return str_of(C, p, s->n);
}

static bool str_starts(const struct jstr *s, const struct jval *x, bool end)
{
    if (x->k == J_LIST) {
        for (size_t i = 0; i < x->u.l->n; i++)
            if (str_starts(s, &x->u.l->v[i], end)) return true;
        return false;
    }
    if (x->k != J_STR || x->u.s->n > s->n) return false;
    return !memcmp(end ? s->p + s->n - x->u.s->n : s->p, x->u.s->p, x->u.s->n);
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn)
{
    if (!nn) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

static struct jval replace(struct jctx *C, const struct jstr *s, const struct jstr *old, const struct jstr *new,
                           int64_t count)
{
    struct jbuf b = {.limit = C->out->limit};
    size_t i = 0;
    int64_t done = 0;
    if (!old->n) {
        /* Python inserts new between every character */
        size_t *off = NULL;
        size_t n = weft_jx_codepoints(C, s, &off);
        for (size_t k = 0; k <= n; k++) {
            if (count < 0 || done < count) {
                weft_jb_put(&b, new->p, new->n);
                done++;
            }
            if (k < n) weft_jb_put(&b, s->p + off[k], off[k + 1] - off[k]);
        }
    } else {
        while (i <= s->n) {
            const char *f = (count < 0 || done < count) ? find_bytes(s->p + i, s->n - i, old->p, old->n) : NULL;
            if (!f) {
                weft_jb_put(&b, s->p + i, s->n - i);
                break;
            }
            weft_jb_put(&b, s->p + i, (size_t)(f - s->p) - i);
            weft_jb_put(&b, new->p, new->n);
            i = (size_t)(f - s->p) + old->n;
            done++;
        }
    }
    struct jval r = str_of(C, b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

/* str.split(sep, maxsplit) / rsplit */
static struct jval split(struct jctx *C, const struct jstr *s, const struct jval *sep, int64_t maxsplit, bool from_right)
{
    struct jval out = weft_jv_list(C->a, 0);
    if (out.k != J_LIST) return out;
    if (!sep || sep->k == J_NONE) {
        /* runs of whitespace; no empty strings */
        size_t *off = NULL;
        size_t n = weft_jx_codepoints(C, s, &off);
        const unsigned char *p = (const unsigned char *)s->p;
        struct jval parts = weft_jv_list(C->a, 0);
        size_t k = 0;
        int len;
        int64_t done = 0;
        if (!from_right) {
            while (k < n) {
                while (k < n && is_space_cp(weft_jv_utf8_next(p + off[k], s->n - off[k], &len))) k++;
                if (k >= n) break;
                if (maxsplit >= 0 && done == maxsplit) {
                    size_t e = n;
                    while (e > k && is_space_cp(weft_jv_utf8_next(p + off[e - 1], s->n - off[e - 1], &len))) e--;
                    weft_jl_push(C->a, out.u.l, str_of(C, s->p + off[k], off[e] - off[k]));
                    break;
                }
                size_t st = k;
                while (k < n && !is_space_cp(weft_jv_utf8_next(p + off[k], s->n - off[k], &len))) k++;
                weft_jl_push(C->a, out.u.l, str_of(C, s->p + off[st], off[k] - off[st]));
                done++;
            }
            return out;
        }
        size_t e = n;
        while (e > 0) {
            while (e > 0 && is_space_cp(weft_jv_utf8_next(p + off[e - 1], s->n - off[e - 1], &len))) e--;
            if (!e) break;
            if (maxsplit >= 0 && done == maxsplit) {
                size_t st = 0;
                while (st < e && is_space_cp(weft_jv_utf8_next(p + off[st], s->n - off[st], &len))) st++;
                weft_jl_push(C->a, parts.u.l, str_of(C, s->p + off[st], off[e] - off[st]));
                break;
            }
            size_t st = e;
            while (st > 0 && !is_space_cp(weft_jv_utf8_next(p + off[st - 1], s->n - off[st - 1], &len))) st--;
            weft_jl_push(C->a, parts.u.l, str_of(C, s->p + off[st], off[e] - off[st]));
            e = st;
            done++;
        }
        for (size_t i = parts.u.l->n; i-- > 0;) weft_jl_push(C->a, out.u.l, parts.u.l->v[i]);
        return out;
    }
    if (sep->k != J_STR || !sep->u.s->n) {
        weft_jx_fail(C, 0, sep->k == J_STR ? "empty separator" : "must be str or None, not %s", weft_jv_type_name(sep));
        return weft_jv_none();
    }
    const struct jstr *d = sep->u.s;
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || done < maxsplit) ? find_bytes(s->p + i, s->n - i, d->p, d->n) : NULL;
            if (!f) {
                weft_jl_push(C->a, out.u.l, str_of(C, s->p + i, s->n - i));
                return out;
            }
            weft_jl_push(C->a, out.u.l, str_of(C, s->p + i, (size_t)(f - s->p) - i));
            i = (size_t)(f - s->p) + d->n;
            done++;
        }
    }
    struct jval parts = weft_jv_list(C->a, 0);
    size_t e = s->n;
    int64_t done = 0;
    for (;;) {
        const char *f = NULL;
        if (maxsplit < 0 || done < maxsplit)
            for (size_t i = e >= d->n ? e - d->n + 1 : 0; i-- > 0;)
                if (!memcmp(s->p + i, d->p, d->n)) {
                    f = s->p + i;
                    break;
                }
        if (!f) {
            weft_jl_push(C->a, parts.u.l, str_of(C, s->p, e));
            break;
        }
        weft_jl_push(C->a, parts.u.l, str_of(C, f + d->n, e - (size_t)(f - s->p) - d->n));
        e = (size_t)(f - s->p);
        done++;
    }
    for (size_t i = parts.u.l->n; i-- > 0;) weft_jl_push(C->a, out.u.l, parts.u.l->v[i]);
    return out;
}

static struct jval bound(struct jctx *C, const struct jval *self, const char *name)
{
    struct jfn *f = weft_ja_alloc(C->a, sizeof *f);
    if (!f) return weft_jv_none();
    f->kind = FN_METHOD;
    f->self = *self;
    f->name = name;
    return (struct jval){.k = J_FN, .u.fn = f};
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                          "replace", "lower", "upper", "title", "capitalize", "find", "rfind",
                                          "count", "join", "splitlines", "isdigit", "isalpha", "isspace", "isalnum",
                                          "islower", "isupper", "index", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", "copy", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const UNSAFE_DICT[] = {"pop", "update", "setdefault", "clear", "popitem", NULL};
static const char *const UNSAFE_LIST[] = {"append", "pop", "extend", "insert", "remove", "reverse", "sort", "clear",
                                          NULL};

static const char *in_list(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return l[i];
    return NULL;
}

struct jval weft_jx_method(struct jctx *C, const struct jval *obj, const char *name)
{
    const char *m = obj->k == J_STR ? in_list(STR_METHODS, name)
                  : obj->k == J_DICT ? in_list(DICT_METHODS, name)
                  : obj->k == J_LIST ? in_list(LIST_METHODS, name) : NULL;
    if (m) return bound(C, obj, m);
    const char *u = obj->k == J_DICT ? in_list(UNSAFE_DICT, name) : obj->k == J_LIST ? in_list(UNSAFE_LIST, name) : NULL;
    if (u) {
        struct jval f = bound(C, obj, u);
        if (f.k == J_FN) f.u.fn->kind = -1;  /* unsafe: refused when called */
        return f;
    }
    return weft_jv_undef(NULL);
}

static int64_t int_arg(const struct jval *v, int64_t dflt)
{
    return !v || v->k == J_NONE ? dflt : v->k == J_INT ? v->u.i : v->k == J_BOOL ? v->u.b : dflt;
}

static struct jval call_method(struct jctx *C, const struct jfn *f, const struct jargs *a)
{
    const struct jval *self = &f->self;
    const char *m = f->name;
    if (self->k == J_STR) {
        const struct jstr *s = self->u.s;
        const struct jval *x = arg(a, 0, NULL);
        if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
            const struct jstr *chars = x && x->k == J_STR ? x->u.s : NULL;
            return strip(C, s, chars, m[0] != 'r', m[0] != 'l');
        }
        if (!strcmp(m, "split") || !strcmp(m, "rsplit"))
            return split(C, s, arg(a, 0, "sep"), int_arg(arg(a, 1, "maxsplit"), -1), m[0] == 'r');
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) return weft_jv_bool(x && str_starts(s, x, m[0] == 'e'));
        if (!strcmp(m, "replace")) {
            const struct jval *y = arg(a, 1, NULL);
            if (!x || !y || x->k != J_STR || y->k != J_STR) {
                weft_jx_fail(C, a->line, "replace() takes two strings");
                return weft_jv_none();
            }
            return replace(C, s, x->u.s, y->u.s, int_arg(arg(a, 2, "count"), -1));
        }
        if (!strcmp(m, "lower")) return case_map(C, s, 0);
        if (!strcmp(m, "upper")) return case_map(C, s, 1);
        if (!strcmp(m, "capitalize")) return case_map(C, s, 2);
        if (!strcmp(m, "title")) return case_map(C, s, 4);
        if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "count")) {
            if (!x || x->k != J_STR) {
                weft_jx_fail(C, a->line, "%s() takes a string", m);
                return weft_jv_none();
            }
            int64_t cnt = 0, found = -1;
            size_t *off = NULL;
            size_t n = weft_jx_codepoints(C, s, &off);
            for (size_t k = 0; k <= n; k++) {
                if (s->n - off[k] < x->u.s->n || memcmp(s->p + off[k], x->u.s->p, x->u.s->n)) continue;
                if (found < 0 || m[0] == 'r') found = (int64_t)k;
                if (m[0] == 'c') {
                    cnt++;
                    if (x->u.s->n) {
                        /* non-overlapping: skip past it */
                        size_t end = off[k] + x->u.s->n;
                        while (k + 1 <= n && off[k + 1] < end) k++;
                    }
                }
            }
            if (m[0] == 'c') return weft_jv_int(cnt);
            if (m[0] == 'i' && found < 0) {
                weft_jx_fail(C, a->line, "substring not found");
                return weft_jv_none();
            }
            return weft_jv_int(found);
        }
        if (!strcmp(m, "join")) {
            struct jlist *items = x ? weft_jx_iter(C, x, a->line) : NULL;
            if (!items) return weft_jv_none();
            struct jbuf b = {.limit = C->out->limit};
            for (size_t i = 0; i < items->n; i++) {
                if (i) weft_jb_put(&b, s->p, s->n);
                weft_jv_str_into(&b, &items->v[i], false);
            }
            struct jval r = str_of(C, b.p ? b.p : "", b.n);
            free(b.p);
            return r;
        }
        if (!strcmp(m, "splitlines")) {
            struct jval out = weft_jv_list(C->a, 0);
            size_t i = 0;
            while (i < s->n) {
                size_t e = i;
                while (e < s->n && s->p[e] != '\n' && s->p[e] != '\r') e++;
                weft_jl_push(C->a, out.u.l, str_of(C, s->p + i, e - i));
                if (e < s->n && s->p[e] == '\r' && e + 1 < s->n && s->p[e + 1] == '\n') e++;
                i = e + 1;
            }
            return out;
        }
        /* is*(): ASCII classes */
        bool ok = s->n > 0, any_cased = false;
        for (size_t i = 0; i < s->n; i++) {
            char c = s->p[i];
            bool lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z', dg = c >= '0' && c <= '9';
            any_cased |= lo || up;
            if (!strcmp(m, "isdigit")) ok &= dg;
            else if (!strcmp(m, "isalpha")) ok &= lo || up;
            else if (!strcmp(m, "isalnum")) ok &= lo || up || dg;
            else if (!strcmp(m, "isspace")) ok &= c == ' ' || (c >= '\t' && c <= '\r');
            else if (!strcmp(m, "islower")) ok &= !up;
            else if (!strcmp(m, "isupper")) ok &= !lo;
        }
        if (!strcmp(m, "islower") || !strcmp(m, "isupper")) ok = ok && any_cased;
        return weft_jv_bool(ok);
    }
    if (self->k == J_DICT) {
        const struct jdict *d = self->u.d;
        if (!strcmp(m, "get")) {
            const struct jval *k = arg(a, 0, NULL), *dflt = arg(a, 1, "default");
            const struct jval *v = k && k->k == J_STR ? weft_jd_get(d, k->u.s->p, k->u.s->n) : NULL;
            return v ? *v : dflt ? *dflt : weft_jv_none();
        }
        if (!strcmp(m, "copy")) {
            struct jval r = weft_jv_dict(C->a, d->n);
            for (size_t i = 0; r.k == J_DICT && i < d->n; i++) weft_jd_set(C->a, r.u.d, d->key[i], d->val[i]);
            return r;
        }
        struct jval out = weft_jv_list(C->a, d->n);
        if (out.k != J_LIST) return out;
        for (size_t i = 0; i < d->n; i++) {
            struct jval key = {.k = J_STR, .u.s = d->key[i]};
            if (!strcmp(m, "keys")) weft_jl_push(C->a, out.u.l, key);
            else if (!strcmp(m, "values")) weft_jl_push(C->a, out.u.l, d->val[i]);
            else {
                struct jval t = weft_jv_list(C->a, 2);
                if (t.k != J_LIST) return t;
                t.u.l->tuple = true;
                weft_jl_push(C->a, t.u.l, key);
                weft_jl_push(C->a, t.u.l, d->val[i]);
                weft_jl_push(C->a, out.u.l, t);
            }
        }
        return out;
    }
    if (self->k == J_LIST) {
        const struct jlist *l = self->u.l;
        const struct jval *x = arg(a, 0, NULL);
        if (!strcmp(m, "copy")) {
            struct jval r = weft_jv_list(C->a, l->n);
            for (size_t i = 0; r.k == J_LIST && i < l->n; i++) weft_jl_push(C->a, r.u.l, l->v[i]);
            return r;
        }
        int64_t cnt = 0;
        for (size_t i = 0; x && i < l->n; i++) {
            if (!weft_jv_equal(&l->v[i], x)) continue;
            if (!strcmp(m, "index")) return weft_jv_int((int64_t)i);
            cnt++;
        }
        if (!strcmp(m, "index")) {
            weft_jx_fail(C, a->line, "the value is not in the list");
            return weft_jv_none();
        }
        return weft_jv_int(cnt);
    }
    weft_jx_fail(C, a->line, "no method %s", m);
    return weft_jv_none();
}

/* ---- the loop object ---- */

struct jval weft_jx_loop_attr(struct jctx *C, struct jloop *L, const char *name)
{
    size_t n = L->items->n, i = L->i;
    if (!strcmp(name, "index")) return weft_jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return weft_jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return weft_jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return weft_jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return weft_jv_bool(i == 0);
    if (!strcmp(name, "last")) return weft_jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return weft_jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return weft_jv_int(1);
    if (!strcmp(name, "depth0")) return weft_jv_int(0);
    if (!strcmp(name, "previtem")) return i ? L->items->v[i - 1] : weft_jv_undef("there is no previous item");
    if (!strcmp(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : weft_jv_undef("there is no next item");
    if (!strcmp(name, "cycle")) {
        struct jfn *f = weft_ja_alloc(C->a, sizeof *f);
        if (!f) return weft_jv_none();
        f->kind = FN_CYCLE;
        f->self = (struct jval){.k = J_LOOP, .u.loop = L};
        return (struct jval){.k = J_FN, .u.fn = f};
    }
    return weft_jv_undef("the loop has no such attribute");
}

/* ---- globals ---- */

static const char *const GLOBALS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

struct jval weft_jx_global(struct jctx *C, const char *name)
{
    const char *g = in_list(GLOBALS, name);
    if (!g) return weft_jv_undef(NULL);
    struct jfn *f = weft_ja_alloc(C->a, sizeof *f);
    if (!f) return weft_jv_none();
    f->kind = FN_GLOBAL;
    f->name = g;
    return (struct jval){.k = J_FN, .u.fn = f};
}

static struct jval call_global(struct jctx *C, const struct jfn *f, const struct jargs *a)
{
    const char *g = f->name;
    if (!strcmp(g, "raise_exception")) {
        const struct jval *m = arg(a, 0, NULL);
        struct jstr *s = m ? to_str(C, m) : NULL;
        snprintf(C->err, sizeof C->err, "%s", s ? s->p : "");
        C->failed = C->raised = true;
        return weft_jv_none();
    }
    if (!strcmp(g, "strftime_now")) {
        const struct jval *fmt = arg(a, 0, NULL);
        if (!fmt || fmt->k != J_STR) {
            weft_jx_fail(C, a->line, "strftime_now takes a format string");
            return weft_jv_none();
        }
        time_t t = (time_t)C->now;
        struct tm tm;
        gmtime_r(&t, &tm);
        char out[256];
        size_t n = strftime(out, sizeof out, fmt->u.s->p, &tm);
        return str_of(C, out, n);
    }
    if (!strcmp(g, "range")) {
        int64_t start = 0, stop, stp = 1;
        if (a->n == 1) stop = int_arg(&a->v[0], 0);
        else if (a->n >= 2) {
            start = int_arg(&a->v[0], 0);
            stop = int_arg(&a->v[1], 0);
            if (a->n >= 3) stp = int_arg(&a->v[2], 1);
        } else {
            weft_jx_fail(C, a->line, "range expected at least 1 argument");
            return weft_jv_none();
        }
        if (!stp) {
            weft_jx_fail(C, a->line, "range() arg 3 must not be zero");
            return weft_jv_none();
        }
        struct jval out = weft_jv_list(C->a, 0);
        for (int64_t i = start, k = 0; stp > 0 ? i < stop : i > stop; i += stp, k++) {
            if (k > 100000) {
                weft_jx_fail(C, a->line, "range too big");
                return weft_jv_none();
            }
            weft_jl_push(C->a, out.u.l, weft_jv_int(i));
        }
        return out;
    }
    /* namespace(...), dict(...): keyword arguments, or a dict to start from */
    struct jval d = weft_jv_dict(C->a, 0);
    if (d.k != J_DICT) return d;
    if (a->n && a->v[0].k == J_DICT)
        for (size_t i = 0; i < a->v[0].u.d->n; i++) weft_jd_set(C->a, d.u.d, a->v[0].u.d->key[i], a->v[0].u.d->val[i]);
    for (uint32_t k = 0; k < a->n_kw; k++) weft_jd_set(C->a, d.u.d, weft_jv_cstr(C->a, a->kw[k]).u.s, a->kv[k]);
    if (!strcmp(g, "namespace")) d.k = J_NS;
    return d;
}

struct jval weft_jx_call(struct jctx *C, const struct jfn *f, const struct jargs *a)
{
    switch (f->kind) {
    case FN_MACRO: return weft_jx_call_macro(C, f, a);
    case FN_METHOD: return call_method(C, f, a);
    case FN_GLOBAL: return call_global(C, f, a);
    case FN_CYCLE: {
        if (!a->n) {
            weft_jx_fail(C, a->line, "no items for cycling given");
            return weft_jv_none();
        }
        return a->v[f->self.u.loop->i % a->n];
    }
    default:
        weft_jx_fail(C, a->line, "access to attribute '%s' of '%s' object is unsafe.", f->name, weft_jv_type_name(&f->self));
        return weft_jv_none();
    }
}

/* ---- tests ---- */

bool weft_jx_test(struct jctx *C, const char *t, const struct jval *v, const struct jargs *a)
{
    const struct jval *x = arg(a, 0, NULL);
    if (!strcmp(t, "defined")) return v->k != J_UNDEF;
    if (!strcmp(t, "undefined")) return v->k == J_UNDEF;
    if (!strcmp(t, "none")) return v->k == J_NONE;
    if (!strcmp(t, "string")) return v->k == J_STR;
    if (!strcmp(t, "number")) return v->k == J_INT || v->k == J_FLOAT || v->k == J_BOOL;
    if (!strcmp(t, "integer")) return v->k == J_INT;
    if (!strcmp(t, "float")) return v->k == J_FLOAT;
    if (!strcmp(t, "boolean")) return v->k == J_BOOL;
    if (!strcmp(t, "true")) return v->k == J_BOOL && v->u.b;
    if (!strcmp(t, "false")) return v->k == J_BOOL && !v->u.b;
    if (!strcmp(t, "mapping")) return v->k == J_DICT;
    if (!strcmp(t, "iterable")) return v->k == J_STR || v->k == J_LIST || v->k == J_DICT || v->k == J_UNDEF;
    if (!strcmp(t, "sequence")) return v->k == J_STR || v->k == J_LIST || v->k == J_DICT || v->k == J_UNDEF;
    if (!strcmp(t, "callable")) return v->k == J_FN;
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v->k != J_STR) return false;
        struct jargs none = {.line = a->line};
        struct jfn f = {.kind = FN_METHOD, .self = *v, .name = t[0] == 'l' ? "islower" : "isupper"};
        struct jval r = call_method(C, &f, &none);
        return r.k == J_BOOL && r.u.b;
    }
    if (!strcmp(t, "escaped")) return false;
    if (!strcmp(t, "odd") || !strcmp(t, "even")) {
        if (v->k != J_INT && v->k != J_BOOL) return weft_jx_fail(C, a->line, "the %s test takes a number", t);
        int64_t i = v->k == J_INT ? v->u.i : v->u.b;
        return (i % 2 != 0) == (t[0] == 'o');
    }
    if (!x) return weft_jx_fail(C, a->line, "the %s test takes an argument", t);
    if (!strcmp(t, "divisibleby")) {
        int64_t d = int_arg(x, 0);
        if (!d) return weft_jx_fail(C, a->line, "integer division or modulo by zero");
        return (v->k == J_INT ? v->u.i : 0) % d == 0;
    }
    if (!strcmp(t, "sameas")) return v->k == x->k && (v->k == J_NONE || v->k == J_UNDEF || (v->k == J_BOOL && v->u.b == x->u.b) ||
                                                      (v->k != J_BOOL && v->u.d == x->u.d));
    int op = !strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==") ? C_EQ
           : !strcmp(t, "ne") || !strcmp(t, "!=") ? C_NE
           : !strcmp(t, "lt") || !strcmp(t, "<") ? C_LT
           : !strcmp(t, "le") || !strcmp(t, "<=") ? C_LE
           : !strcmp(t, "gt") || !strcmp(t, ">") ? C_GT
           : !strcmp(t, "ge") || !strcmp(t, ">=") ? C_GE
           : !strcmp(t, "in") ? C_IN : -1;
    if (op < 0) return weft_jx_fail(C, a->line, "no test named '%s'", t);
    return weft_jx_compare(C, op, v, x, a->line);
}

/* ---- filters ---- */

static struct jval attr_path(struct jctx *C, const struct jval *v, const struct jval *attr)
{
    if (!attr || attr->k == J_NONE) return *v;
    if (attr->k == J_INT) return weft_jx_getitem(C, v, attr);
    struct jstr *s = to_str(C, attr);
    struct jval cur = *v;
    /* "a.b" walks attributes (digits index) */
    const char *p = s ? s->p : "";
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        struct jval key = str_of(C, p, n);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
        if (digits) key = weft_jv_int(strtoll(key.u.s->p, NULL, 10));
        cur = weft_jx_getitem(C, &cur, &key);
        p += n + (dot ? 1 : 0);
    }
    return cur;
}

static int sort_key_cmp(struct jctx *C, const struct jval *x, const struct jval *y, bool case_sensitive)
{
    bool bad = false;
    if (!case_sensitive && x->k == J_STR && y->k == J_STR) {
        struct jval lx = case_map(C, x->u.s, 0), ly = case_map(C, y->u.s, 0);
        return weft_jv_compare(&lx, &ly, &bad);
    }
    int c = weft_jv_compare(x, y, &bad);
    if (bad) weft_jx_fail(C, 0, "'<' not supported between instances of '%s' and '%s'", weft_jv_type_name(x), weft_jv_type_name(y));
    return c;
}

/* a stable insertion sort of items by keys (small lists) */
static void sort_by(struct jctx *C, struct jval *items, struct jval *keys, size_t n, bool case_sensitive, bool reverse)
{
    for (size_t i = 1; i < n && !C->failed; i++) {
        struct jval it = items[i], k = keys[i];
        size_t j = i;
        while (j > 0) {
            int c = sort_key_cmp(C, &keys[j - 1], &k, case_sensitive);
            if (reverse ? c >= 0 : c <= 0) break;
            items[j] = items[j - 1];
            keys[j] = keys[j - 1];
            j--;
        }
        items[j] = it;
        keys[j] = k;
    }
}

static struct jval list_copy(struct jctx *C, const struct jlist *l)
{
    struct jval r = weft_jv_list(C->a, l->n);
    for (size_t i = 0; r.k == J_LIST && i < l->n; i++) weft_jl_push(C->a, r.u.l, l->v[i]);
    return r;
}

/* An empty generator (what map and select give for a false value). */
static struct jval empty_gen(struct jctx *C)
{
    struct jval g = weft_jv_list(C->a, 0);
    if (g.k == J_LIST) g.u.l->gen = true;
    return g;
}

static struct jval select_items(struct jctx *C, const struct jval *v, const struct jargs *a, bool by_attr, bool keep)
{
    if (!weft_jv_truthy(v)) return empty_gen(C);  /* jinja2's "if value:" */
    struct jlist *items = weft_jx_iter(C, v, a->line);
    if (!items) return weft_jv_none();
    struct jval out = empty_gen(C);
    uint32_t at = by_attr ? 1 : 0;
    const struct jval *test = arg(a, at, NULL);
    struct jargs targs = {.line = a->line};
    for (uint32_t i = at + 1; i < a->n && targs.n < JX_MAX_ARGS; i++) targs.v[targs.n++] = a->v[i];
    for (size_t i = 0; i < items->n && !C->failed; i++) {
        struct jval x = by_attr ? attr_path(C, &items->v[i], arg(a, 0, NULL)) : items->v[i];
        bool r;
        if (!test) r = weft_jv_truthy(&x);
        else if (test->k != J_STR) r = weft_jx_fail(C, a->line, "a test name must be a string");
        else r = weft_jx_test(C, test->u.s->p, &x, &targs);
        if (r == keep) weft_jl_push(C->a, out.u.l, items->v[i]);
    }
    return out;
}

struct jval weft_jx_filter(struct jctx *C, const char *f, const struct jval *v, const struct jargs *a, struct scope *S)
{
    (void)S;
    const struct jval *x = arg(a, 0, NULL);
    if (!strcmp(f, "tojson")) {
        const struct jval *ind = arg(a, 1, "indent"), *seps = arg(a, 2, "separators"), *sk = arg(a, 3, "sort_keys");
        const struct jval *asc = arg(a, 0, "ensure_ascii");
        if (asc && weft_jv_truthy(asc)) {
            weft_jx_fail(C, a->line, "tojson with ensure_ascii is not supported");
            return weft_jv_none();
        }
        int indent = ind && ind->k == J_INT ? (int)ind->u.i : -1;
        const char *item_sep = NULL, *key_sep = NULL;
        if (seps && seps->k == J_LIST && seps->u.l->n == 2 && seps->u.l->v[0].k == J_STR && seps->u.l->v[1].k == J_STR) {
            item_sep = seps->u.l->v[0].u.s->p;
            key_sep = seps->u.l->v[1].u.s->p;
        }
        struct jbuf b = {.limit = C->out->limit};
        if (!weft_jv_json_into(&b, v, indent, item_sep, key_sep, sk && weft_jv_truthy(sk), 0)) {
            free(b.p);
            weft_jx_fail(C, a->line, "Object of type %s is not JSON serializable", weft_jv_type_name(v));
            return weft_jv_none();
        }
        struct jval r = str_of(C, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (v->k == J_STR) {
            size_t *off = NULL;
            return weft_jv_int((int64_t)weft_jx_codepoints(C, v->u.s, &off));
        }
        if (v->k == J_LIST && !v->u.l->gen) return weft_jv_int((int64_t)v->u.l->n);
        if (v->k == J_DICT) return weft_jv_int((int64_t)v->u.d->n);
        if (v->k == J_UNDEF) return weft_jv_int(0);
        weft_jx_fail(C, a->line, "object of type '%s' has no len()", weft_jv_type_name(v));
        return weft_jv_none();
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        const struct jval *boolean = arg(a, 1, "boolean");
        bool use = v->k == J_UNDEF || (boolean && weft_jv_truthy(boolean) && !weft_jv_truthy(v));
        if (!use) return *v;
        return x ? *x : str_of(C, "", 0);
    }
    if (!strcmp(f, "safe") || !strcmp(f, "string")) {
        struct jstr *s = to_str(C, v);
        if (!s) return weft_jv_none();
        /* |safe: a Markup; |string keeps one */
        return (struct jval){.k = J_STR, .u.s = s, .markup = f[1] == 'a' || (v->k == J_STR && v->markup)};
    }
    if (!strcmp(f, "trim")) {
        struct jstr *s = to_str(C, v);
        return s ? strip(C, s, x && x->k == J_STR ? x->u.s : NULL, true, true) : weft_jv_none();
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        struct jstr *s = to_str(C, v);
        int mode = f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 3;
        return s ? case_map(C, s, mode) : weft_jv_none();
    }
    if (!strcmp(f, "replace")) {
        struct jstr *s = to_str(C, v);
        const struct jval *y = arg(a, 1, "new");
        if (!s || !x || !y || x->k != J_STR || y->k != J_STR) {
            weft_jx_fail(C, a->line, "replace takes two strings");
            return weft_jv_none();
        }
        return replace(C, s, x->u.s, y->u.s, int_arg(arg(a, 2, "count"), -1));
    }
    if (!strcmp(f, "items")) {
        if (v->k == J_UNDEF) return weft_jv_list(C->a, 0);
        if (v->k != J_DICT) {
            weft_jx_fail(C, a->line, "can only get item pairs from a mapping");
            return weft_jv_none();
        }
        struct jfn m = {.kind = FN_METHOD, .self = *v, .name = "items"};
        return call_method(C, &m, a);
    }
    if (!strcmp(f, "dictsort")) {
        if (v->k != J_DICT) {
            weft_jx_fail(C, a->line, "dictsort takes a mapping");
            return weft_jv_none();
        }
        struct jfn m = {.kind = FN_METHOD, .self = *v, .name = "items"};
        struct jargs none = {.line = a->line};
        struct jval items = call_method(C, &m, &none);
        const struct jval *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rev = arg(a, 2, "reverse");
        bool by_value = by && by->k == J_STR && !strcmp(by->u.s->p, "value");
        size_t n = items.u.l->n;
        struct jval *keys = weft_ja_alloc(C->a, (n + 1) * sizeof *keys);
        if (!keys) return weft_jv_none();
        for (size_t i = 0; i < n; i++) keys[i] = items.u.l->v[i].u.l->v[by_value];
        sort_by(C, items.u.l->v, keys, n, cs && weft_jv_truthy(cs), rev && weft_jv_truthy(rev));
        return items;
    }
    if (!strcmp(f, "join")) {
        struct jlist *items = weft_jx_iter(C, v, a->line);
        if (!items) return weft_jv_none();
        const struct jval *attr = arg(a, 1, "attribute");
        struct jstr *sep = x ? to_str(C, x) : NULL;
        struct jbuf b = {.limit = C->out->limit};
        for (size_t i = 0; i < items->n; i++) {
            if (i && sep) weft_jb_put(&b, sep->p, sep->n);
            struct jval it = attr_path(C, &items->v[i], attr);
            weft_jv_str_into(&b, &it, false);
        }
        struct jval r = str_of(C, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        struct jlist *items = weft_jx_iter(C, v, a->line);
        if (!items) return weft_jv_none();
        if (!items->n) return weft_jv_undef("No first item, sequence was empty.");
        return items->v[f[0] == 'f' ? 0 : items->n - 1];
    }
    if (!strcmp(f, "list")) {
        struct jlist *items = weft_jx_iter(C, v, a->line);
        return items ? list_copy(C, items) : weft_jv_none();
    }
    if (!strcmp(f, "reverse")) {
        if (v->k == J_STR) {
            size_t *off = NULL;
            size_t n = weft_jx_codepoints(C, v->u.s, &off);
            struct jbuf b = {0};
            for (size_t i = n; i-- > 0;) weft_jb_put(&b, v->u.s->p + off[i], off[i + 1] - off[i]);
            struct jval r = str_of(C, b.p ? b.p : "", b.n);
            free(b.p);
            return r;
        }
        struct jlist *items = weft_jx_iter(C, v, a->line);
        if (!items) return weft_jv_none();
        struct jval r = weft_jv_list(C->a, items->n);
        for (size_t i = items->n; r.k == J_LIST && i-- > 0;) weft_jl_push(C->a, r.u.l, items->v[i]);
        return r;
    }
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) return select_items(C, v, a, true, f[0] == 's');
    if (!strcmp(f, "select") || !strcmp(f, "reject")) return select_items(C, v, a, false, f[0] == 's');
    if (!strcmp(f, "map")) {
        if (!weft_jv_truthy(v)) return empty_gen(C);
        struct jlist *items = weft_jx_iter(C, v, a->line);
        if (!items) return weft_jv_none();
        struct jval out = empty_gen(C);
        const struct jval *attr = arg(a, a->n, "attribute"), *dflt = arg(a, a->n, "default");
        for (size_t i = 0; i < items->n && !C->failed; i++) {
            if (attr) {
                struct jval r = attr_path(C, &items->v[i], attr);
                weft_jl_push(C->a, out.u.l, r.k == J_UNDEF && dflt ? *dflt : r);
            } else if (x && x->k == J_STR) {
                struct jargs rest = {.line = a->line};
                for (uint32_t k = 1; k < a->n; k++) rest.v[rest.n++] = a->v[k];
                weft_jl_push(C->a, out.u.l, weft_jx_filter(C, x->u.s->p, &items->v[i], &rest, S));
            } else {
                weft_jx_fail(C, a->line, "map takes a filter name or attribute=");
            }
        }
        return out;
    }
    if (!strcmp(f, "unique") || !strcmp(f, "sort")) {
        struct jlist *items = weft_jx_iter(C, v, a->line);
        if (!items) return weft_jv_none();
        bool uniq = f[0] == 'u';
        const struct jval *rev = uniq ? NULL : arg(a, 0, "reverse"), *cs = arg(a, uniq ? 0 : 1, "case_sensitive");
        const struct jval *attr = arg(a, uniq ? 1 : 2, "attribute");
        struct jval out = list_copy(C, items);
        size_t n = out.u.l->n;
        struct jval *keys = weft_ja_alloc(C->a, (n + 1) * sizeof *keys);
        if (!keys) return weft_jv_none();
        for (size_t i = 0; i < n; i++) {
            keys[i] = attr_path(C, &out.u.l->v[i], attr);
            if (!(cs && weft_jv_truthy(cs)) && keys[i].k == J_STR) keys[i] = case_map(C, keys[i].u.s, 0);
        }
        if (!uniq) {
            sort_by(C, out.u.l->v, keys, n, true, rev && weft_jv_truthy(rev));
            return out;
        }
        struct jval u = empty_gen(C);
        for (size_t i = 0; i < n; i++) {
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++) seen = weft_jv_equal(&keys[j], &keys[i]);
            if (!seen) weft_jl_push(C->a, u.u.l, out.u.l->v[i]);
        }
        return u;
    }
    if (!strcmp(f, "indent")) {
        struct jstr *s = to_str(C, v);
        if (!s) return weft_jv_none();
        const struct jval *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
        struct jbuf ind = {0};
        if (x && x->k == J_STR) weft_jb_put(&ind, x->u.s->p, x->u.s->n);
        else
            for (int64_t i = 0; i < int_arg(x, 4); i++) weft_jb_put(&ind, " ", 1);
        /* jinja2's: s + "\n" split into lines, joined back with the indent */
        struct jbuf b = {.limit = C->out->limit};
        if (first && weft_jv_truthy(first)) weft_jb_put(&b, ind.p, ind.n);
        size_t i = 0, line = 0;
        while (i < s->n) {
            size_t e = i;
            while (e < s->n && s->p[e] != '\n') e++;
            if (line) {
                weft_jb_put(&b, "\n", 1);
                if ((blank && weft_jv_truthy(blank)) || e > i) weft_jb_put(&b, ind.p, ind.n);
            }
            weft_jb_put(&b, s->p + i, e - i);
            line++;
            i = e + 1;
        }
        free(ind.p);
        struct jval r = str_of(C, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs") || !strcmp(f, "round")) {
        double d = v->k == J_FLOAT ? v->u.f : v->k == J_INT ? (double)v->u.i : v->k == J_BOOL ? v->u.b : 0;
        bool ok = v->k == J_FLOAT || v->k == J_INT || v->k == J_BOOL;
        if (v->k == J_STR) {
            char *end;
            d = strtod(v->u.s->p, &end);
            ok = end != v->u.s->p;
        }
        if (!strcmp(f, "int")) return ok ? weft_jv_int((int64_t)d) : (x ? *x : weft_jv_int(0));
        if (!strcmp(f, "float")) return ok ? weft_jv_float(d) : (x ? *x : weft_jv_float(0));
        if (!strcmp(f, "abs")) return v->k == J_INT ? weft_jv_int(v->u.i < 0 ? -v->u.i : v->u.i) : weft_jv_float(fabs(d));
        int64_t prec = int_arg(x, 0);
        double p10 = pow(10, (double)prec);
        return weft_jv_float(round(d * p10) / p10);
    }
    if (!strcmp(f, "sum") || !strcmp(f, "min") || !strcmp(f, "max")) {
        struct jlist *items = weft_jx_iter(C, v, a->line);
        if (!items) return weft_jv_none();
        if (!strcmp(f, "sum")) {
            const struct jval *attr = arg(a, 0, "attribute"), *start = arg(a, 1, "start");
            int64_t si = 0;
            double sf = 0;
            bool fl = start && start->k == J_FLOAT;
            if (start) {
                si = int_arg(start, 0);
                sf = start->k == J_FLOAT ? start->u.f : (double)si;
            }
            for (size_t i = 0; i < items->n; i++) {
                struct jval it = attr_path(C, &items->v[i], attr);
                if (it.k == J_FLOAT) fl = true;
                sf += it.k == J_FLOAT ? it.u.f : (double)int_arg(&it, 0);
                si += int_arg(&it, 0);
            }
            return fl ? weft_jv_float(sf) : weft_jv_int(si);
        }
        if (!items->n) return weft_jv_undef("No aggregated item, sequence was empty.");
        struct jval best = items->v[0];
        for (size_t i = 1; i < items->n; i++) {
            int c = sort_key_cmp(C, &items->v[i], &best, false);
            if (f[1] == 'i' ? c < 0 : c > 0) best = items->v[i];
        }
        return best;
    }
    if (!strcmp(f, "wordcount")) {
        struct jstr *s = to_str(C, v);
        struct jval w = s ? split(C, s, NULL, -1, false) : weft_jv_none();
        return w.k == J_LIST ? weft_jv_int((int64_t)w.u.l->n) : weft_jv_int(0);
    }
    if (!strcmp(f, "e") || !strcmp(f, "escape")) {
        if (v->k == J_STR && v->markup) return *v;
        struct jstr *s = to_str(C, v);
        if (!s) return weft_jv_none();
        struct jbuf b = {0};
        weft_jv_html_escape(&b, s->p, s->n);
        struct jval r = str_of(C, b.p ? b.p : "", b.n);
        free(b.p);
        r.markup = true;
        return r;
    }
    if (!strcmp(f, "attr")) {
        struct jstr *s = x ? to_str(C, x) : NULL;
        return s ? weft_jx_getattr(C, v, s->p) : weft_jv_undef(NULL);
    }
    weft_jx_fail(C, a->line, "the '%s' filter is not supported", f);
    return weft_jv_none();
}
