/* The router's picture of its fleet, without sockets: per instance its last
 * /load report, the router's own in-flight accounting and a prefix index
 * (core/prefix_index.h) fed by routing history and corrected by KV events;
 * and the decision for one request (hash its prompt, match each index,
 * rank with core/route, count the dispatch). server/router.c does the I/O
 * around it; tests drive it directly (a million prompts, no HTTP).
 *
 * One thread (the router's loop) owns a fleet. Instances are reference
 * counted: a decision keeps its instance alive after DNS discovery drops it. */
#ifndef WEFT_SERVER_FLEET_H
#define WEFT_SERVER_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fingerprint.h"
#include "core/kv.h"
#include "core/prefix_index.h"
#include "core/route.h"
#include "base/status.h"

#define FLEET_MAX_INSTANCES 256

/* What GET /load says (server/api_load.c). */
struct fleet_load {
    char role[16];
    char model[128];
    bool draining;
    uint32_t running, waiting, tokenizing;
    uint64_t queued_prefill_tokens;
    uint32_t block_tokens;
    uint32_t ckpt_tokens;          /* a hybrid's state checkpoint interval (0: not a hybrid): its
                                      prefix hits end at a block with a checkpoint (core/kv.h) */
    uint32_t kv_used, kv_cached, kv_free, kv_total, host_used, host_total;
    double prefill_tps, decode_tps;
    uint32_t decode_rows;          /* rows in the steps decode_tps was measured on */
    double decode_row_tps;         /* one sequence's decode rate */
    uint32_t max_seqs, max_waiting, n_ctx;
    char fingerprint[WEFT_FINGERPRINT_STR];
    char device[96];               /* first device's name */
    char vendor[32];
    char backend[16];
    char device_class[32];         /* what it is counted as for scaling ("" from an older instance:
                                      weft_fleet_instance_class falls back to the device's name) */
};

/* Parse a /load body; false with err set when it is not one. */
bool weft_fleet_parse_load(const char *json, size_t len, struct fleet_load *out, char *err, size_t err_size);

/* The circuit breaker: CLOSED takes traffic; FLEET_CIRCUIT_FAILURES request
 * failures in a row (connect errors, 5xx, broken or hung answers) or a
 * failed health check (the /load poll) OPEN it: no traffic; the next
 * health check that passes makes it HALF_OPEN: one request at a time tries
 * it, and the first to succeed closes it again (one that fails reopens it). */
enum fleet_circuit { FLEET_CIRCUIT_CLOSED = 0, FLEET_CIRCUIT_HALF_OPEN, FLEET_CIRCUIT_OPEN };
#define FLEET_CIRCUIT_FAILURES 3

struct fleet_instance {
    char *url;                     /* as given ("http://127.0.0.1:8081") */
    char *name;                    /* host:port, for headers, metrics and logs */
    uint32_t refs;                 /* the fleet's + decisions in flight */
    bool removed;                  /* dropped from the fleet (DNS), alive while refs */
    /* reported */
    struct fleet_load load;
    bool has_load;
    double load_at;                /* when the last good /load arrived (caller's clock, s) */
    bool healthy;                  /* the last poll answered */
    uint32_t poll_failures;        /* in a row */
    enum fleet_circuit circuit;
    bool probing;                  /* HALF_OPEN: its trial request is in flight */
    uint32_t consecutive_failures;
    uint64_t failures, circuit_opens;
    /* the router's own: dispatched and not yet answered */
    uint32_t own_running, own_waiting;
    uint64_t own_queued;           /* uncached prompt tokens dispatched, not yet at first token */
    double gen_mean;               /* tokens its answers generated (moving average; 0: none seen) */
    /* the prefix index and the KV event stream's position */
    struct weft_prefix_index ix;
    /* a hybrid's state checkpoints, named by the blocks they end (taken with the first one
     * heard of: cap 0 until then) */
    struct weft_prefix_index ckx;
    uint64_t ev_seq;               /* last event applied */
    bool ev_synced;                /* the index follows the instance's events */
    /* counters */
    uint64_t requests, prompt_tokens, uncached_tokens, errors;
    uint64_t ev_applied, ev_gaps, resyncs;
    void *io;                      /* the router's (connections, subscriptions) */
    /* the router's view of its answers, cumulative (the dashboard turns them
     * into rates over its own interval: server/router_dash.c) */
    uint64_t completion_tokens;    /* generated tokens forwarded to clients */
    uint64_t ttft_count;           /* streams whose first token it sent */
    double ttft_sum;               /* their seconds from arrival at the router to that token */
};

struct fleet_config {
    enum weft_route_policy policy;
    double stale_s;                /* 0: 2 s */
    uint32_t index_min_blocks;     /* index capacity before the first report and its floor (0: 4096) */
    uint32_t index_max_blocks;     /* its ceiling per instance (0: 1M, about 24 MiB) */
    uint32_t pd_min_uncached;      /* prefill/decode hand-off past this many uncached tokens
                                      (core/route.h weft_route_pd; 0: never) */
    double pd_slack;               /* weft_route_pd's slack (0: its default) */
};

struct fleet {
    struct fleet_config cfg;
    struct fleet_instance *inst[FLEET_MAX_INSTANCES];
    uint32_t n;
    uint64_t rr_next;
    uint64_t decisions[4];         /* by enum weft_route_reason */
    uint64_t no_instance;          /* requests nothing could take */
    uint64_t cached_predicted, cached_actual;      /* tokens, over answers that reported it */
    uint64_t pred_exact, pred_within_block, pred_off;  /* answers by |predicted - actual| */
    uint64_t pd_handoffs;          /* prompts sent to a prefill instance for their decode instance */
};

struct fleet_decision {
    struct fleet_instance *in;     /* chosen (a reference is held until weft_fleet_finished) */
    struct fleet_instance *runner_up;  /* NULL when none (no reference) */
    struct weft_route_choice best, second;
    uint32_t n_prompt, uncached;
    bool first_token_seen;
    int64_t generated;             /* the answer's completion_tokens, set by the caller before
                                      weft_fleet_finished when it saw them (> 0) */
    /* a prefill/decode hand-off: the prefill instance (a reference, until
     * weft_fleet_pd_finished), its prediction, the prompt tokens it computes */
    struct fleet_instance *pd_in;
    struct weft_route_pd_choice pd;
    uint32_t pd_uncached;
    bool pd_measured;              /* the prediction is from the prefill instance's measured rate */
};

void weft_fleet_init(struct fleet *f, const struct fleet_config *cfg);
/* The class an instance counts in for scale-out signals and metric labels:
 * its reported device_class, else its device's name, else its backend, else "". */
const char *weft_fleet_instance_class(const struct fleet_instance *in);
/* Frees every instance (io must be released by the caller first). */
void weft_fleet_free(struct fleet *f);
/* Add an instance by URL; WEFT_ERR_BUSY when full, WEFT_ERR_INVALID_ARG for
 * a URL that is not http://host:port. *out may be NULL. */
weft_status weft_fleet_add(struct fleet *f, const char *url, struct fleet_instance **out);
struct fleet_instance *weft_fleet_find(const struct fleet *f, const char *url);
/* Drop from the fleet (no new requests); freed once no decision holds it. */
void weft_fleet_remove(struct fleet *f, struct fleet_instance *in);
void weft_fleet_instance_unref(struct fleet_instance *in);

/* A /load report arrived (now: the caller's clock in seconds); the index is
 * resized to the reported capacity. A failed poll: weft_fleet_poll_failed. */
void weft_fleet_apply_load(struct fleet *f, struct fleet_instance *in, const struct fleet_load *l, double now);
/* (An instance that has never reported is only unhealthy: its circuit
 * opens for failures after it was up.) */
void weft_fleet_poll_failed(struct fleet_instance *in);
/* A request to in ended: ok, or failed in a way that counts against its
 * health (connect error, 5xx other than a capacity refusal, broken or hung
 * answer). Drives the circuit breaker. */
void weft_fleet_request_result(struct fleet_instance *in, bool ok);

/* KV events (server/kv_events.c; kinds as core/kv.h's): apply one; false when seq shows a gap
 * (the caller resyncs from a snapshot: weft_fleet_kv_snapshot_begin, inserts,
 * weft_fleet_kv_snapshot_end). */
bool weft_fleet_kv_event(struct fleet_instance *in, uint64_t seq, enum weft_kv_event_kind kind, uint64_t hash);
void weft_fleet_kv_snapshot_begin(struct fleet_instance *in);
void weft_fleet_kv_snapshot_block(struct fleet_instance *in, uint64_t hash);
void weft_fleet_kv_snapshot_ckpt(struct fleet_instance *in, uint64_t hash);
void weft_fleet_kv_snapshot_end(struct fleet_instance *in, uint64_t seq);
void weft_fleet_kv_unsynced(struct fleet_instance *in);

/* Choose an instance for a prompt of ids[0..n) (now: the caller's clock).
 * WEFT_OK with d filled and the dispatch counted (in-flight load, the
 * prompt's blocks into the chosen index); WEFT_ERR_NO_ROOM when no instance
 * can take it (all unhealthy, stale, full or draining). */
weft_status weft_fleet_decide(struct fleet *f, const int32_t *ids, size_t n, uint32_t max_tokens, double now,
                         struct fleet_decision *d);
/* The same, never choosing an instance in except[0..n_except) (those a
 * request already failed on). */
weft_status weft_fleet_decide_except(struct fleet *f, const int32_t *ids, size_t n, uint32_t max_tokens, double now,
                                struct fleet_instance *const *except, uint32_t n_except, struct fleet_decision *d);
/* The same with the block hashes already computed (hashes[0..n_hashes) of a
 * prompt of n_prompt tokens). */
weft_status weft_fleet_decide_hashed(struct fleet *f, const uint64_t *hashes, uint32_t n_hashes, uint32_t n_prompt,
                                uint32_t max_tokens, double now, struct fleet_decision *d);
/* The chosen instance started answering (its prompt is done). */
void weft_fleet_first_token(struct fleet *f, struct fleet_decision *d);
/* The answer ended; actual_cached: the instance's cached_tokens, or -1 when
 * it did not say; failed: it ended in an error. Releases the reference. */
void weft_fleet_finished(struct fleet *f, struct fleet_decision *d, int64_t actual_cached, bool failed);

/* The prefill instance of a hand-off answered (failed: it did not);
 * releases its reference (d->pd_in NULL after). */
void weft_fleet_pd_finished(struct fleet *f, struct fleet_decision *d, bool failed);

/* Bytes held by the fleet's indexes. */
size_t weft_fleet_index_bytes(const struct fleet *f);

#endif
