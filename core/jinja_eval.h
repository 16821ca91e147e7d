/* The render state shared by core/jinja_eval.c (statements, expressions)
 * and core/jinja_builtin.c (filters, tests, methods, globals). Not an API. */
#ifndef WEFT_JINJA_EVAL_H
#define WEFT_JINJA_EVAL_H

#include <stdarg.h>

#include "core/jinja_internal.h"

struct scope {
    struct scope *parent;
    struct jdict *vars;
};

enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

struct jctx {
    struct jarena *a;
    struct jbuf *out;
    uint64_t steps, max_steps;
    int depth, ctl;
    int64_t now;
    bool failed, raised;       /* raised: by raise_exception (err is its message alone) */
    char err[512];
};

struct jloop {
    struct jlist *items;
    size_t i;
    struct jval *parent;
};

enum jfn_kind { FN_MACRO, FN_METHOD, FN_GLOBAL, FN_CYCLE };

struct jfn {
    int kind;                  /* enum jfn_kind */
    const struct jstmt *macro; /* FN_MACRO */
    struct scope *closure;
    struct jval self;          /* FN_METHOD: the bound object; FN_CYCLE: the loop */
    const char *name;          /* FN_METHOD / FN_GLOBAL */
};

#define JX_MAX_ARGS 16
struct jargs {
    struct jval v[JX_MAX_ARGS];
    const char *kw[JX_MAX_ARGS];
    struct jval kv[JX_MAX_ARGS];
    uint32_t n, n_kw;
    int line;
};

bool weft_jx_fail(struct jctx *C, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct scope *weft_jx_scope(struct jctx *C, struct scope *parent);
bool weft_jx_assign(struct jctx *C, struct scope *s, const char *name, struct jval v);
struct jval weft_jx_eval(struct jctx *C, const struct jexpr *e, struct scope *S);
bool weft_jx_args(struct jctx *C, const struct jexpr *e, struct scope *S, struct jargs *out);
struct jval weft_jx_getattr(struct jctx *C, const struct jval *obj, const char *name);
struct jval weft_jx_getitem(struct jctx *C, const struct jval *obj, const struct jval *key);
struct jval weft_jx_undef_attr(struct jctx *C, const struct jval *obj, const char *name);
struct jlist *weft_jx_iter(struct jctx *C, const struct jval *v, int line);
size_t weft_jx_codepoints(struct jctx *C, const struct jstr *s, size_t **out);
bool weft_jx_compare(struct jctx *C, int op, const struct jval *x, const struct jval *y, int line);
struct jval weft_jx_capture(struct jctx *C, const struct jbody *b, struct scope *S);
struct jval weft_jx_call_macro(struct jctx *C, const struct jfn *f, const struct jargs *a);

/* jinja_builtin.c */
struct jval weft_jx_method(struct jctx *C, const struct jval *obj, const char *name);  /* J_FN, or J_UNDEF */
struct jval weft_jx_global(struct jctx *C, const char *name);                          /* J_FN, or J_UNDEF */
struct jval weft_jx_loop_attr(struct jctx *C, struct jloop *loop, const char *name);
struct jval weft_jx_call(struct jctx *C, const struct jfn *f, const struct jargs *a);
struct jval weft_jx_filter(struct jctx *C, const char *name, const struct jval *v, const struct jargs *a, struct scope *S);
bool weft_jx_test(struct jctx *C, const char *name, const struct jval *v, const struct jargs *a);

#endif
