/* core/jinja*.c's shared pieces: the arena, values, the syntax tree. Not an
 * API (core/jinja.h is). */
#ifndef WEFT_JINJA_INTERNAL_H
#define WEFT_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/jinja.h"

/* ---- arena: everything of a compile or a render, freed at once ---- */
struct jarena {
    struct jchunk *head;
    bool oom;
};
void *weft_ja_alloc(struct jarena *a, size_t n);   /* zeroed; NULL (and a->oom) when out of memory */
void weft_ja_free(struct jarena *a);

/* ---- values ---- */
enum jkind {
    J_UNDEF, J_NONE, J_BOOL, J_INT, J_FLOAT, J_STR, J_LIST, J_DICT, J_NS, J_LOOP, J_FN,
};

struct jstr { size_t n; char p[]; };  /* NUL-ended too */
struct jval;
struct jlist { size_t n, cap; struct jval *v; bool tuple, gen; };  /* gen: a generator (map, select, ...) */
struct jdict { size_t n, cap; struct jstr **key; struct jval *val; };  /* insertion order */
struct jloop;
struct jfn;

struct jval {
    uint8_t k;                 /* enum jkind */
    bool markup;               /* J_STR: markupsafe's Markup (from |safe): what + adds to it is HTML-escaped */
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr *s;
        struct jlist *l;
        struct jdict *d;       /* J_DICT, J_NS */
        struct jloop *loop;
        struct jfn *fn;
        const char *undef;     /* J_UNDEF: what was missing (for messages), may be NULL */
    } u;
};

/* ---- the syntax tree ---- */
enum jexpr_kind {
    X_LIT, X_NAME, X_ATTR, X_ITEM, X_SLICE, X_CALL, X_FILTER, X_TEST, X_NEG, X_POS, X_NOT, X_AND, X_OR,
    X_BIN, X_CMP, X_COND, X_LIST, X_TUPLE, X_DICT,
};
enum jbin { B_ADD, B_SUB, B_MUL, B_DIV, B_FDIV, B_MOD, B_POW, B_CONCAT };
enum jcmp { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

struct jexpr {
    uint8_t kind;              /* enum jexpr_kind */
    uint8_t op;                /* X_BIN: enum jbin */
    bool negate;               /* X_TEST: "is not" */
    bool unknown;              /* X_FILTER / X_TEST: none by that name (an error if it runs) */
    int line;
    struct jval lit;           /* X_LIT */
    const char *name;          /* X_NAME, X_ATTR, X_FILTER, X_TEST */
    struct jexpr *a, *b, *c;   /* operands: X_ATTR/X_ITEM/X_FILTER/X_TEST/X_CALL a = the object or callee;
                                * X_SLICE a[b:c:d] with d in args[0]; X_COND b if a else c */
    struct jexpr **args;       /* X_CALL/X_FILTER/X_TEST args, X_LIST/X_TUPLE items, X_DICT keys */
    struct jexpr **vals;       /* X_DICT values; keyword args' values */
    const char **kw;           /* keyword args' names (n_kw of them, after n_args positional) */
    uint32_t n_args, n_kw;
    uint8_t *cmp_ops;          /* X_CMP: a op0 args[0] op1 args[1] ... */
};

enum jstmt_kind { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SET_BLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_FILTER, S_BODY };

struct jbody { struct jstmt **s; uint32_t n, cap; };

struct jstmt {
    uint8_t kind;              /* enum jstmt_kind */
    int line;
    const char *text;          /* S_TEXT */
    size_t n_text;
    struct jexpr *e;           /* S_OUT, S_SET value, S_FOR iterable, S_IF conditions (e = first) */
    struct jexpr **conds;      /* S_IF: n_conds conditions, bodies[i] for each, els after */
    struct jbody *bodies;
    uint32_t n_conds;
    struct jbody body, els;    /* S_FOR body / else; S_MACRO, S_SET_BLOCK, S_FILTER, S_BODY body */
    const char **targets;      /* S_FOR / S_SET names (n_targets); S_SET with attr: targets[0].attr */
    uint32_t n_targets;
    const char *attr;          /* S_SET ns.attr */
    struct jexpr *filter;      /* S_FOR's "if" condition; S_FILTER / S_SET_BLOCK's filter (X_FILTER over a NULL a) */
    const char *name;          /* S_MACRO */
    const char **params;       /* S_MACRO */
    struct jexpr **defaults;   /* S_MACRO: per param, NULL when none */
    uint32_t n_params;
    bool recursive;            /* S_FOR */
};

struct weft_jinja {
    struct jarena arena;
    struct jbody top;
};

/* jinja_parse.c */
weft_status weft_jinja_parse(struct weft_jinja *t, const char *src, size_t n);

/* jinja_lib.c: values */
struct jval weft_jv_none(void);
struct jval weft_jv_undef(const char *what);
struct jval weft_jv_bool(bool b);
struct jval weft_jv_int(int64_t i);
struct jval weft_jv_float(double f);
struct jval weft_jv_str(struct jarena *a, const char *p, size_t n);
struct jval weft_jv_cstr(struct jarena *a, const char *p);
struct jval weft_jv_list(struct jarena *a, size_t cap);
struct jval weft_jv_dict(struct jarena *a, size_t cap);
bool weft_jl_push(struct jarena *a, struct jlist *l, struct jval v);
bool weft_jd_set(struct jarena *a, struct jdict *d, struct jstr *key, struct jval v);
struct jval *weft_jd_get(const struct jdict *d, const char *key, size_t n);
bool weft_jv_truthy(const struct jval *v);
bool weft_jv_equal(const struct jval *a, const struct jval *b);
/* Python's ordering of two values; false (and *bad) when they do not compare */
int weft_jv_compare(const struct jval *a, const struct jval *b, bool *bad);
const char *weft_jv_type_name(const struct jval *v);

/* Text being built (the output, a string value). */
struct jbuf { char *p; size_t n, cap; bool oom; size_t limit; };
void weft_jb_put(struct jbuf *b, const char *s, size_t n);
void weft_jb_puts(struct jbuf *b, const char *s);
/* Python's str() of v into b (repr for the items of a list or dict). */
void weft_jv_str_into(struct jbuf *b, const struct jval *v, bool repr);
/* json.dumps(v, ensure_ascii=False, indent=indent (< 0: none), sort_keys) with
 * separators (NULL: ", " and ": ", or "," and ": " with an indent) */
bool weft_jv_json_into(struct jbuf *b, const struct jval *v, int indent, const char *item_sep, const char *key_sep,
                  bool sort_keys, int depth);
/* The next UTF-8 code point of s (n bytes left); *len its bytes (1 for a bad byte). */
uint32_t weft_jv_utf8_next(const unsigned char *s, size_t n, int *len);
/* Append code point cp to out[*n] in UTF-8 (up to 4 bytes). */
void weft_jv_utf8_put(char *out, size_t *n, uint32_t cp);
/* markupsafe's escape of s into b: & < > " ' as entities */
void weft_jv_html_escape(struct jbuf *b, const char *s, size_t n);
/* Parse JSON text into values (objects -> J_DICT, arrays -> J_LIST). */
weft_status weft_jv_from_json(struct jarena *a, const char *s, size_t n, struct jval *out);

#endif
