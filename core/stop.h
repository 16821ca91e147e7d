/* Where a completion stops, decided once for every front end.
 *
 * End-of-generation (unless ignore_eos) and stop token ids end it without
 * the token becoming output; stop strings end it at their first occurrence
 * in the detokenized text, which is cut there. A stream must not show the
 * beginning of a stop string that may still complete, so the text a stop
 * state releases lags behind what it holds by the longest tail that could
 * begin one (the hold-back); at the end everything held is released.
 *
 * The engine asks weft_stop_is_token for each sampled id; `weft run`,
 * `weft chat` and `weft serve` push every generated token through a
 * weft_stop and send what it releases. A continuation (a request carried on
 * from the k tokens an interrupted run already produced) pushes those k
 * tokens through a fresh state first: it then holds exactly the text,
 * hold-back and released count the interrupted run had, and goes on from
 * there. */
#ifndef WEFT_STOP_H
#define WEFT_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer.h"

struct weft_stop_cfg {
    const struct weft_tokenizer *tok;
    bool ignore_eos;                 /* end-of-generation tokens are ordinary output */
    const int32_t *ids;              /* extra stop tokens (copied by init) */
    uint32_t n_ids;
    const char *const *strings;      /* stop strings, non-empty (copied by init) */
    uint32_t n_strings;
    uint32_t min_tokens;             /* vLLM's min_tokens: stop strings end nothing before this many tokens */
    const int32_t *render_ids;       /* control tokens that are output as their text (a chat
                                        format's markers; copied by init) */
    uint32_t n_render_ids;
    bool continues_prompt;           /* the output continues its prompt (a completion, `weft run`):
                                        its first piece keeps its leading space; a chat answer
                                        starts a message and drops it */
};

/* True when id ends the output (and is not part of it). */
bool weft_stop_is_token(const struct weft_tokenizer *tok, bool ignore_eos, const int32_t *ids, uint32_t n_ids,
                        int32_t id);

enum weft_stop_kind {
    WEFT_STOP_NONE = 0,
    WEFT_STOP_TOKEN,                 /* a stop token: nothing of it is output */
    WEFT_STOP_STRING,                /* a stop string: the text is cut where it begins */
};

struct weft_stop_step {
    enum weft_stop_kind stop;
    bool first_piece;                /* the token's text was the output's first piece */
    size_t tok_from, tok_len;        /* the token's text: text[tok_from..+tok_len) (before a
                                        stop string cut it; valid until the next push) */
    size_t emit_from, emit_len;      /* newly released text: text[emit_from..+emit_len) */
};

struct weft_stop {
    struct weft_stop_cfg cfg;        /* ids and strings point at the state's own copies */
    struct weft_detok dt;
    char *text;                      /* output so far: text[0..len) */
    size_t len, cap;
    size_t released;                 /* bytes of text released to the stream */
    size_t max_string;               /* longest stop string */
    enum weft_stop_kind stopped;     /* set once a push stopped; later pushes do nothing */
    uint32_t n_tokens;               /* tokens pushed that became output */
    int32_t *own_ids, *own_render;
    char **own_strings;
};

weft_status weft_stop_init(struct weft_stop *s, const struct weft_stop_cfg *cfg);
void weft_stop_free(struct weft_stop *s);
/* Take one generated token. After a stop it reports the stop kind and
 * releases what it still held before the stop string (a stop token also
 * releases the held-back text, then the output is complete). */
weft_status weft_stop_push(struct weft_stop *s, int32_t id, struct weft_stop_step *out);
/* The output ends for another reason (length, abort, the context filled):
 * the bytes of an incomplete character come out as U+FFFD and everything
 * held back is released. */
weft_status weft_stop_end(struct weft_stop *s, struct weft_stop_step *out);

#endif
