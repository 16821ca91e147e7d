/* The generation path of `weft run` and `weft chat`: the engine (core/
 * engine.h) in its synchronous mode, one request at a time, as the server
 * drives it for many; stop strings by core/stop.h, as the server does. */
#ifndef WEFT_GENERATE_H
#define WEFT_GENERATE_H

#include <signal.h>
#include <stdio.h>

#include "core/engine.h"
#include "core/grammar.h"
#include "core/sampler.h"

struct gen_result {
    int32_t *ids;              /* generated ids (malloc'd) */
    struct weft_sample *samples; /* per generated id (malloc'd) */
    size_t n;
    char *text;                /* detokenized generation (malloc'd) */
    size_t text_len;
    double prompt_ms, gen_ms;  /* submit to the first token (the prompt's steps and that
                                  draw); the rest (the n - 1 later decode steps) */
    size_t n_prompt;           /* prompt tokens computed (the prefix cache had the others) */
    bool stopped_eog;
    bool stopped_ctx;          /* the context filled up */
    bool stopped_string;       /* a stop string matched (text cut before it) */
    bool stopped_grammar;      /* the grammar was finished: nothing more could follow */
    bool cancelled;            /* *cancel was set */
    /* with a grammar: masks asked, of them answered by the cache, draws the
     * grammar refused (drawn again over the allowed tokens), and the time
     * the engine spent in the grammar */
    uint64_t grammar_masks, grammar_mask_hits, grammar_resampled;
    double grammar_ms;
};

struct gen_opts {
    const struct weft_sampling_params *sp;
    int n_predict;                     /* most new tokens */
    const char *const *stops;          /* stop strings (the text is cut before one) */
    uint32_t n_stops;
    const struct weft_grammar *grammar;  /* NULL: unconstrained (core/engine.h's rules) */
    FILE *stream;                      /* non-NULL: the text written there as it completes */
    volatile sig_atomic_t *cancel;     /* non-NULL: stop before the next token once set */
    uint32_t sample_pos;               /* the sampler's draws before this request (a chat's
                                          earlier turns), so a seeded stream continues */
};

/* generated tokens per second over gen_ms (n - 1 decode steps) */
double weft_gen_tps(const struct gen_result *r);

/* An engine for one conversation: contexts of n_ctx tokens, prompts in steps
 * of at most batch tokens, one sequence at a time, a prefix cache (a chat's
 * next turn reuses the KV of the last). */
weft_status weft_gen_engine(const struct weft_model *m, uint32_t n_ctx, uint32_t batch, struct weft_engine **out);

/* Generate after prompt[0..n_prompt) until end of generation (not included),
 * n_predict tokens, a stop string, the grammar's end, the context's end
 * (r->stopped_ctx: at most n_ctx - n_prompt new tokens; none when the prompt
 * fills the context) or *cancel. The request has ended in the engine when
 * this returns, whatever it returns. */
weft_status weft_gen_run(struct weft_engine *e, const struct weft_model *m, const int32_t *prompt, size_t n_prompt,
                         const struct gen_opts *go, struct gen_result *r);
void weft_gen_result_free(struct gen_result *r);

#endif
