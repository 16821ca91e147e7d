/* The engine's insides, shared by core/engine.c (requests and steps) and
 * core/engine_kv.c (KV blocks in and out). Not an API. */
#ifndef WEFT_ENGINE_INTERNAL_H
#define WEFT_ENGINE_INTERNAL_H

#include <pthread.h>

#include "core/engine.h"
#include "core/forward.h"
#include "core/grammar.h"

struct engine_embed;

/* Engine-side state of one request (sched_req.user). */
struct ereq {
    uint64_t id;
    struct weft_sched_req *r;
    struct weft_sampler *smp;
    weft_event_cb cb;
    void *user;
    uint32_t max_tokens, n_generated;
    int32_t *stop_ids;
    uint32_t n_stop_ids;
    bool ignore_eos, aborted;
    double t_submit, queue_seconds;  /* queue_seconds < 0: not run yet */
    struct weft_grammar_state *gst;  /* NULL: unconstrained */
    uint32_t *gmask;                 /* (mask words) scratch for the allowed set */
    struct engine_embed *emb;        /* an embedding request's pooling (engine_embed.c); NULL otherwise */
};

struct pending_event {
    struct weft_event ev;
    weft_event_cb cb;
    void *user;
    float *owned;               /* ev.embedding, freed once delivered */
};

struct weft_engine {
    const struct weft_model *m;
    struct weft_engine_config cfg;
    struct weft_kv_pool kv;
    struct weft_sched *sched;
    struct weft_forward *fw;
    struct weft_fwd_seq *fseqs;
    struct pending_event *events;
    uint32_t n_events, cap_events;
    char message[256];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t fwd_cv;      /* in_forward went false */
    bool in_forward;            /* a step computes with the lock released */
    uint32_t kv_waiters;        /* threads waiting for the lock to do block I/O (engine_kv.c) */
    pthread_t thread;
    bool started, stop;
    uint64_t wake;              /* bumped by submit/abort/stop */
    uint64_t next_id;
    uint32_t n_aborted_pending;
    uint64_t generated, submitted, finished, aborted, rejected;
    double prefill_tps, decode_tps;  /* moving averages over live steps */
    uint32_t decode_rows;
    double decode_row_tps;           /* each sequence advances one token per decode step */
    double itl_target_s;             /* the last step with decode rows' (stats) */
    struct weft_step_fit decode_fit; /* decode steps' time by rows (the ITL cost model) */
    struct weft_engine_kv_stats kvio;  /* engine_kv.c, under mu */
    struct weft_kvb_keys kv_keys;      /* weft_engine_kv_set_keys: set before the engine starts */
    struct weft_grammar_vocab *gvocab; /* the tokenizer's index, built at the first grammar request */
    uint64_t grammar_resampled;        /* grammar draws that needed the mask */
    double grammar_seconds;            /* time in grammar checks, masks, masked draws and advances */
    uint64_t embed_requests, embed_tokens;
    /* the watchdog's clock: when the engine last made progress (a step that
     * did work), or work arrived at an idle engine (monotonic seconds) */
    double last_progress;
    bool test_paused;                  /* weft_engine_test_pause: no step while set */
};

/* ---- embedding requests (engine_embed.c): made at submit, then used by
 * the step with the engine's lock held ---- */

/* Pooling state for a request of `pooling` over vectors of n_embd floats.
 * NULL when out of memory. */
struct engine_embed *weft_engine_embed_new(enum weft_embed_pooling pooling, uint32_t n_embd);
void weft_engine_embed_free(struct engine_embed *em);
/* The hidden rows the step's item needs (weft_fwd_seq.n_hidden). */
uint32_t weft_engine_embed_rows(const struct engine_embed *em, const struct weft_sched_item *it);
/* Pool the item's rows: hidden holds weft_engine_embed_rows(it) rows of n_embd
 * (weft_forward_hidden), or is NULL on a mock engine (each token then
 * stands for a fixed pseudo-random vector). Rows already pooled (recomputed
 * after a preemption) are skipped. */
void weft_engine_embed_take(struct engine_embed *em, const struct weft_sched_item *it, const float *hidden);
/* The pooled, L2-normalised vector (malloc'd, n_embd floats; the caller
 * frees it), or NULL when out of memory. */
float *weft_engine_embed_vector(const struct engine_embed *em);

#endif
