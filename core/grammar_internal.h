/* The compiled grammar, shared by core/grammar_parse.c (text -> rules) and
 * core/grammar.c (states, masks). Not an API.
 *
 * Every rule is a run of elements in el[]: its alternatives one after the
 * other, each a sequence of GE_CHARS / GE_REF elements closed by GE_ALT (more
 * alternatives follow) or GE_END (the rule's last). Groups and repetitions
 * are compiled into generated rules (llama.cpp's scheme): x* is
 * R ::= x R | (empty), x? is R ::= x | (empty), x{n,m} is n copies of x then
 * m-n nested optionals. A parser position is an index into el[] that points
 * at a GE_CHARS element (or at a GE_ALT/GE_END, meaning "this alternative is
 * done"). */
#ifndef WEFT_GRAMMAR_INTERNAL_H
#define WEFT_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "core/grammar.h"

enum gelem_type { GE_END, GE_ALT, GE_REF, GE_CHARS };

struct gelem {
    uint32_t type;   /* enum gelem_type */
    uint32_t v;      /* GE_REF: rule index; GE_CHARS: offset of the class in cls[] */
};

struct weft_grammar {
    int refs;                /* atomic (__atomic builtins) */
    uint64_t uid;            /* unique per compiled grammar: the mask cache's key */
    struct gelem *el;
    uint32_t n_el;
    uint32_t *rule_start;    /* [n_rules] first element of each rule */
    uint32_t n_rules;
    uint64_t compile_compares;   /* rule-name comparisons compiling it took */
    uint32_t root;
    /* alternatives: rule r's start at alt[rule_alt[r] .. rule_alt[r + 1]) */
    uint32_t *alt;
    uint32_t *rule_alt;      /* [n_rules + 1] */
    /* classes: cls[off] = n, then n (lo, hi) code point ranges, sorted,
     * disjoint and not adjacent; a negated class is stored complemented */
    uint32_t *cls;
    uint32_t n_cls;
};

/* Defined in grammar.c: a new unique uid. */
uint64_t weft_grammar_next_uid(void);

#endif
