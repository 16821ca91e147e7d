/* The generation loop shared by `weft run` and `weft chat`. */
#ifndef WEFT_GENERATE_H
#define WEFT_GENERATE_H

#include <stdio.h>

#include "core/grammar.h"
#include "core/sampler.h"
#include "core/session.h"

struct gen_result {
    int32_t *ids;              /* generated ids (malloc'd) */
    struct weft_sample *samples; /* per generated id (malloc'd) */
    size_t n;
    char *text;                /* detokenized generation (malloc'd) */
    size_t text_len;
    double prompt_ms, gen_ms;
    size_t n_prompt;           /* tokens evaluated as prompt */
    bool stopped_eog;
    bool stopped_ctx;          /* the context filled up */
    bool stopped_string;       /* a stop string matched (text cut before it) */
    bool stopped_grammar;      /* the grammar was finished: nothing more could follow */
};

/* Constrained generation (core/grammar.h): the state advances with every
 * generated token. resampled counts draws the grammar refused (then drawn
 * again over the allowed tokens, as the engine does); grammar_ms is the time
 * spent in grammar checks, masks and advances. */
struct gen_grammar {
    struct weft_grammar_state *st;
    uint32_t *mask;            /* weft_grammar_mask_words() words, caller's */
    uint64_t resampled;
    double grammar_ms;
};

/* Evaluate prompt[0..n_prompt) in s (after what s already holds) and generate
 * up to n_predict tokens, stopping at an end-of-generation token (which is
 * not included) or at the first of stops[0..n_stops) in the text (cut
 * there; core/stop.h, as the server does). If `stream` is non-NULL the text is written there as it
 * completes. The last generated token is evaluated too, so s ends holding
 * the prompt and every generated token. */
weft_status weft_gen_run(struct weft_session *s, const struct weft_model *m, struct weft_sampler *smp,
                    const int32_t *prompt, size_t n_prompt, int n_predict, const char *const *stops,
                    uint32_t n_stops, FILE *stream, struct gen_result *r);
/* weft_gen_run under a grammar (gr NULL: weft_gen_run). End of generation comes only
 * when the grammar accepts; generation stops after the token that finishes
 * the grammar. */
weft_status weft_gen_run_grammar(struct weft_session *s, const struct weft_model *m, struct weft_sampler *smp,
                            const int32_t *prompt, size_t n_prompt, int n_predict, const char *const *stops,
                            uint32_t n_stops, FILE *stream, struct gen_grammar *gr, struct gen_result *r);
void weft_gen_result_free(struct gen_result *r);

#endif
