/* The engine: many requests on one model, one step at a time.
 *
 *   loop { schedule -> build the batch -> forward -> sample -> emit events }
 *
 * Requests come in through submit() (any thread) and leave as events through
 * their callback: one event per generated token, then exactly one final
 * event (finish != WEFT_FINISH_NONE). Callbacks run on the engine thread (or
 * inside weft_engine_step()); they must be quick and must not call back into
 * the engine. abort() (any thread) ends a request; its blocks are freed at
 * the next step boundary, before anything else runs.
 *
 * Outputs do not depend on batching: a request's tokens are the same alone
 * or among any number of others, with or without the prefix cache, and
 * across preemption (the backend's per-row results are batch-independent). */
#ifndef WEFT_ENGINE_H
#define WEFT_ENGINE_H

#include "core/model.h"
#include "core/sampler.h"
#include "base/kv_block.h"
#include "core/sched.h"

struct weft_grammar;

/* What an embedding request pools (weft_request.embed). */
enum weft_embed_pooling {
    WEFT_EMBED_NONE = 0,         /* not an embedding request */
    WEFT_EMBED_MEAN,             /* the mean over every prompt token */
    WEFT_EMBED_LAST,             /* the last prompt token */
};

struct weft_engine_config {
    uint32_t n_ctx;              /* per sequence; 0 = the model's training context */
    uint32_t max_step_tokens;    /* token budget per step (default 512) */
    uint32_t max_seqs;           /* sequences per step (default 64) */
    uint32_t max_waiting;        /* waiting-queue bound (default 1024) */
    uint32_t max_prefill_chunk;  /* 0 = the step budget */
    /* A step carries at most this many milliseconds (at the measured prefill
     * rate; at least LOW_PREFILL_MIN tokens) of prompts below the top priority
     * (sched.h, low_prefill_tokens): the step a higher-priority arrival finds
     * running is short. 0 = no limit. */
    uint32_t low_prefill_ms;
    /* Stall-free batching (sched.h): a step that carries decode rows plans at
     * most this many milliseconds by the measured rates; 0 = auto (twice its
     * decode rows' cost alone, by the cost fitted to the measured decode
     * steps, and at least the prompt backlog spread over 16 steps: sched.h's
     * spread_steps), < 0 = no limit. */
    double itl_target_ms;
    uint32_t kv_blocks;          /* device KV blocks; 0 = kv_mib's worth, at most what
                                    max_seqs full-context sequences need, at least one's */
    uint32_t kv_mib;             /* 0 = 1024; a hybrid model's recurrent state slots (one a
                                    running sequence) take up to half of it, and max_seqs
                                    becomes the slots that fit when fewer than it */
    uint32_t host_blocks;        /* host swap tier; 0 = as many as device blocks, see no_swap */
    uint32_t host_cache_mib;     /* host prefix tier (core/kv.h), in MiB of the model's blocks; 0 = none */
    bool no_swap;                /* preempt by recompute only */
    bool no_prefix_cache;
    /* Keep every KV block of sliding-window layers (llama.cpp's --swa-full)
     * instead of dropping those that fall out of each sequence's window
     * (core/kv.h's window group, sized to max_seqs windows and a step's
     * tokens, twice over for the prefix cache, within kv_mib). */
    bool swa_full;
    /* A hybrid model's prefix cache (core/kv.h's state checkpoints): its recurrent state
     * copied to the host every state_ckpt_tokens computed tokens (0 = 256; a multiple of 16),
     * in at most state_ckpt_mib MiB of checkpoints (0 = 256), prompt chunks ending at those
     * boundaries; without a prefix cache, none */
    uint32_t state_ckpt_tokens, state_ckpt_mib;
    bool kv_import_convert;      /* imported KV blocks of the other KV type are converted (counted) */
    enum weft_type kv_type;      /* 0 (F32) means F16 */
    /* A mock engine (weft serve --mock) when mock_prefill_tps > 0: no model
     * compute (the model may be loaded without weights, weft_model_load_meta).
     * A step takes prefill tokens / mock_prefill_tps seconds, plus
     * 1 / mock_decode_tps when it has decode rows (each sequence decodes at
     * that rate, as on a memory-bound GPU), spent waiting; it then samples a
     * deterministic ordinary token (never end-of-generation). The scheduler,
     * the KV pool's blocks, hashes, prefix cache and events are the real ones;
     * KV capacity is what kv_mib would hold for the real model, with a
     * minimal payload per block. */
    double mock_prefill_tps, mock_decode_tps;
};

enum weft_finish {
    WEFT_FINISH_NONE = 0,        /* more to come */
    WEFT_FINISH_STOP,            /* end-of-generation or a stop token (not emitted) */
    WEFT_FINISH_LENGTH,          /* max_tokens reached */
    WEFT_FINISH_ABORT,           /* abort() or engine shutdown */
    WEFT_FINISH_ERROR,           /* see status / message */
};

struct weft_event {
    uint64_t id;
    bool has_token;
    struct weft_sample token;    /* when has_token */
    enum weft_finish finish;
    weft_status status;          /* WEFT_OK unless finish == ERROR */
    uint32_t n_prompt, n_cached, n_generated, n_preempt;
    double queue_seconds;        /* from submit to the first step that ran it (0 until then) */
    const char *message;         /* ERROR: what went wrong (valid during the callback) */
    /* An embedding request's final event (WEFT_FINISH_STOP): the pooled,
     * L2-normalised vector of n_embedding (= n_embd) floats, valid during
     * the callback; NULL / 0 on every other event. */
    const float *embedding;
    uint32_t n_embedding;
};

typedef void (*weft_event_cb)(void *user, const struct weft_event *ev);

struct weft_request {
    const int32_t *prompt;       /* copied */
    uint32_t n_prompt;
    uint32_t max_tokens;         /* most new tokens (>= 1) */
    struct weft_sampling_params sampling;
    bool ignore_eos;             /* do not stop at end-of-generation tokens */
    const int32_t *stop_ids;     /* extra stop tokens (copied) */
    uint32_t n_stop_ids;
    uint32_t sample_pos;         /* the sampler's position for the first new token: 0, or for a
                                    continuation the tokens already generated (they end the
                                    prompt), so a seeded stream draws what it would have */
    int32_t priority;            /* higher runs first */
    const char *tenant;          /* NULL/"" = default; limits via weft_engine_tenant() */
    weft_event_cb cb;
    void *user;
    /* NULL = unconstrained. Otherwise every generated token keeps the text
     * a prefix of a match of the grammar (core/grammar.h); the engine takes
     * its own reference. The sampler's draw comes first; a token the grammar
     * refuses is replaced by a second draw (at the same position, retry 1,
     * weft_sampler_sample_masked) over the allowed tokens only: exactly the
     * masked distribution for plain sampling; with top-k/top-p/min-p the
     * first draw is from the truncated full distribution and the second
     * truncates the masked one (logprobs stay the raw distribution's).
     * Special tokens are never allowed; end of generation is allowed
     * exactly when the text is a complete match, also
     * with ignore_eos (the grammar decides); once nothing more can follow the
     * request ends (WEFT_FINISH_STOP) with that token's event, without
     * another step. On a continuation (sample_pos > 0) the last sample_pos
     * prompt tokens are replayed into the grammar at submit; a replay the
     * grammar rejects is refused (WEFT_ERR_INVALID_ARG). */
    const struct weft_grammar *grammar;
    /* WEFT_EMBED_NONE (0): generate. Otherwise an embedding request: the
     * prompt is computed in ordinary steps beside generation (chunked like
     * any prompt), pooled over the final hidden states (after the output
     * norm: mean over every prompt token, or the last one) and
     * L2-normalised; nothing is sampled (max_tokens, sampling, ignore_eos,
     * stop_ids, sample_pos and grammar are ignored). Its one event is the
     * final one: WEFT_FINISH_STOP with .embedding (or ABORT / ERROR without).
     * MEAN needs every row's hidden state, so the prefix cache supplies none
     * of its prompt (its blocks are still registered for others); LAST may
     * take hits (the last token is always computed). The vector does not
     * depend on batching, chunking or preemption (to the last bit where the
     * backend's rows are batch-independent, forward.h). Refused with
     * WEFT_ERR_CONTEXT when the prompt alone exceeds n_ctx. */
    enum weft_embed_pooling embed;
};

struct weft_engine_stats {
    uint32_t running, waiting, swapped;
    /* seconds since the engine last made progress while it has work (0
     * without work): what a watchdog reads; a step in progress counts as
     * none until it ends */
    double stalled_s;
    struct weft_kv_stats kv;
    uint64_t steps, step_tokens, generated_tokens;
    uint64_t prefill_tokens, prefix_hit_tokens;
    uint64_t preempt_swap, preempt_recompute;
    uint64_t submitted, finished, aborted, rejected;
    uint64_t queued_prefill_tokens;  /* prompt tokens not yet computed: waiting + running */
    uint64_t low_prefill_limited;    /* steps that held lower-priority prompts to low_prefill_tokens */
    uint32_t low_prefill_tokens;     /* low_prefill_ms in tokens now (0 = no limit) */
    /* Stall-free batching: the target of the last step with decode rows (0 =
     * none yet / off), steps the target held prompts back in, steps with
     * decode rows planned over it (a one-token floor), and the last step's
     * plan (sched.h). */
    double itl_target_s;
    uint64_t itl_limited, itl_over, itl_spread, share_deferred;
    struct weft_sched_plan last_plan;
    /* Measured on live steps (moving averages, seeded by weft_engine_calibrate;
     * 0 until measured): prompt tokens per second in steps that are mostly
     * prefill, generated tokens per second (all rows of a decode step). */
    double prefill_tps, decode_tps;
    uint32_t decode_rows;            /* rows of the last decode step the rate was measured on */
    double decode_row_tps;           /* one sequence's decode rate: 1 / decode-step time (moving average) */
    /* the decode step's cost model, fitted to decode-only steps (sched.h,
     * weft_step_fit): seconds = fixed + per row * rows (0: not measured) */
    double decode_fixed_s, decode_row_s;
    /* Constrained decoding: masks asked of the grammar index and those its
     * cache answered, and draws the grammar refused (resampled masked). */
    uint64_t grammar_masks, grammar_mask_hits, grammar_resampled;
    double grammar_seconds;          /* spent in the grammar: allowed checks, masks, masked draws, advances */
    uint64_t embed_requests, embed_tokens;  /* embedding requests finished with a vector, their prompt tokens */
};

struct weft_engine;

weft_status weft_engine_create(const struct weft_model *m, const struct weft_engine_config *cfg,
                               struct weft_engine **out);
/* Stops the thread if started, aborting what is left (final events sent). */
void weft_engine_free(struct weft_engine *e);

/* Tell fn about every block the prefix cache registers or evicts (core/kv.h;
 * fn runs on the engine thread with the engine locked). Call before
 * weft_engine_calibrate / weft_engine_start; fn NULL turns it off. */
void weft_engine_on_kv_event(struct weft_engine *e, weft_kv_event_fn fn, void *user);

/* Seed the measured rates (stats' prefill_tps, decode_tps) with a short
 * run before the engine serves: a warm-up prompt, then one synthetic prompt
 * of n_prompt tokens and a few decode steps, through the ordinary path.
 * n_prompt 0: sized from the warm-up (64 tokens) to take about a quarter
 * second, 64..1024 tokens, so that a fast device's rate is not its per-step
 * overhead (64 tokens on a 16000 tokens/s device measured about half of it)
 * and a slow one starts in about the same time as before. Call before
 * weft_engine_start, with nothing submitted; leaves no request behind (its
 * prompt blocks may stay as reusable cache). */
weft_status weft_engine_calibrate(struct weft_engine *e, uint32_t n_prompt);

/* Run the step loop on its own thread. Without it, drive the engine with
 * weft_engine_step(). */
weft_status weft_engine_start(struct weft_engine *e);
/* For tests of what watches the engine (weft serve --test-hooks): while
 * paused the engine thread takes no step; work waits and stalled_s grows. */
void weft_engine_test_pause(struct weft_engine *e, bool paused);

/* Queue a request; *id names it for abort(). Refusals are immediate and send
 * no events: WEFT_ERR_BUSY (queue full), WEFT_ERR_CONTEXT (prompt +
 * max_tokens > n_ctx; an embedding's prompt > n_ctx), WEFT_ERR_NO_ROOM / WEFT_ERR_QUOTA (could never fit),
 * WEFT_ERR_INVALID_ARG (bad parameters). */
weft_status weft_engine_submit(struct weft_engine *e, const struct weft_request *req, uint64_t *id);
/* End a request (final event WEFT_FINISH_ABORT). WEFT_ERR_NOT_FOUND if it
 * already finished. */
weft_status weft_engine_abort(struct weft_engine *e, uint64_t id);

/* Tenant limits (scheduler KV and running quotas, time-slice share), by name. */
weft_status weft_engine_tenant(struct weft_engine *e, const char *name, const struct weft_tenant_limits *lim);
/* Tenant i (0 is ""): its name (copied) and the prompt tokens computed for it;
 * false past the last one. */
bool weft_engine_tenant_prefill(struct weft_engine *e, uint32_t i, char name[WEFT_TENANT_NAME_MAX], uint64_t *tokens);

/* One step (when the thread is not started): *did_work false when nothing
 * was runnable. */
weft_status weft_engine_step(struct weft_engine *e, bool *did_work);
/* Step until no request is left (synchronous mode). */
weft_status weft_engine_run_all(struct weft_engine *e);

void weft_engine_stats(struct weft_engine *e, struct weft_engine_stats *out);
uint32_t weft_engine_n_ctx(const struct weft_engine *e);

/* ---- KV blocks in and out, in format v3 (base/kv_block.h) ----
 * Safe from any thread (they take the engine's lock for the pool). */
struct weft_engine_kv_stats {
    uint64_t exported;           /* blocks written out */
    uint64_t imported;           /* blocks put into the prefix cache */
    uint64_t already;            /* offered blocks the cache held already */
    uint64_t converted;          /* imported after a KV type conversion */
    uint64_t rejected;           /* blocks refused: corrupt, truncated, misnamed, foreign */
    uint64_t rejected_streams;   /* streams refused at the header (foreign model or shape, bad header) */
    uint64_t rejected_mac;       /* blocks refused for a missing or wrong MAC (not made under the fleet secret) */
    uint64_t no_room;            /* blocks dropped: no free or evictable block */
    uint64_t hit_imported;       /* prompt blocks served from imported blocks */
    uint64_t bytes_in, bytes_out;
    uint64_t ckpts_out, ckpts_in; /* a hybrid's state checkpoints written with their blocks, taken */
};
void weft_engine_kv_stats(struct weft_engine *e, struct weft_engine_kv_stats *out);

/* The header an export of this engine writes and an import expects. */
void weft_engine_kv_expect(const struct weft_engine *e, struct weft_kvb_expect *out);

/* The fleet secret's MAC keys (before the engine starts, or while no KV
 * block moves): from then on every block written carries a MAC under
 * keys->key[0], and an import takes only blocks with a MAC under one of
 * them (others: WEFT_ERR_AUTH, counted in rejected_mac). keys->n 0: none. */
void weft_engine_kv_set_keys(struct weft_engine *e, const struct weft_kvb_keys *keys);

/* The cached blocks of tokens' full-block prefix (chained hashes from
 * position 0), as one stream: *out (free() it) of *n_out bytes, *n_blocks of
 * them; stops at the first block the cache does not hold (0 blocks is a
 * header alone). */
weft_status weft_engine_kv_export_prefix(struct weft_engine *e, const int32_t *tokens, uint32_t n_tokens,
                                         unsigned char **out, size_t *n_out, uint32_t *n_blocks);
/* The same for blocks named by hash, in the order given (each with its
 * parent and tokens); stops at the first one not held. */
weft_status weft_engine_kv_export_hashes(struct weft_engine *e, const uint64_t *hashes, uint32_t n,
                                         unsigned char **out, size_t *n_out, uint32_t *n_blocks);
/* The same with a hybrid's state checkpoint only on the block named ckpt: a hand-off resumes
 * from the prompt's last one, and the others (megabytes each) would travel unused. */
weft_status weft_engine_kv_export_hashes_ckpt(struct weft_engine *e, const uint64_t *hashes, uint32_t n, uint64_t ckpt,
                                              unsigned char **out, size_t *n_out, uint32_t *n_blocks);
/* How many of hashes[0..n) (a chain), from the first, this engine holds
 * (device or host tier). */
uint32_t weft_engine_kv_held(struct weft_engine *e, const uint64_t *hashes, uint32_t n);
/* The device block named hash came from an import (another instance made it). */
bool weft_engine_kv_imported(struct weft_engine *e, uint64_t hash);
/* Payload bytes of one block of this engine's cache. */
size_t weft_engine_kv_block_bytes(const struct weft_engine *e);
/* Every block among hashes[0..n) the device holds and did not import (any
 * order, gaps skipped), as one stream, in one hold of the engine's lock:
 * what a write-behind sends on. */
weft_status weft_engine_kv_export_held(struct weft_engine *e, const uint64_t *hashes, uint32_t n, unsigned char **out,
                                       size_t *n_out, uint32_t *n_blocks);
/* Read a stream and put its blocks into the prefix cache. A header for
 * another model or layout is refused whole (WEFT_ERR_MISMATCH); another KV
 * type is converted when the engine was created with kv_import_convert,
 * refused otherwise. A bad block stops the import there (WEFT_ERR_FORMAT,
 * WEFT_ERR_AUTH for a MAC), keeping the good ones before it. *n_imported (may be NULL): blocks added. */
weft_status weft_engine_kv_import(struct weft_engine *e, const unsigned char *buf, size_t n, uint32_t *n_imported);

/* The same, and each block taken (or held already on the device) is pinned
 * (weft_kv_pin): not evicted until weft_engine_kv_unpin. *pinned (free()
 * it; NULL when none) lists the *n_pinned hashes pinned, for the caller to
 * unpin exactly those: when the request they were sent ahead of ends, or
 * when its lease runs out. A pinned block is held by no sequence: pins left
 * behind are KV lost to every other request. */
weft_status weft_engine_kv_import_pinned(struct weft_engine *e, const unsigned char *buf, size_t n,
                                         uint32_t *n_imported, uint64_t **pinned, uint32_t *n_pinned);
void weft_engine_kv_unpin(struct weft_engine *e, const uint64_t *hashes, uint32_t n);

/* For tests: the pool and scheduler (engine thread not started). */
struct weft_kv_pool *weft_engine_kv(struct weft_engine *e);

#endif
