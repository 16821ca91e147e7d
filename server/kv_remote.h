/* The remote KV tier on Redis (weft serve --kv-remote redis://HOST:PORT or
 * unix:///PATH): full prefix blocks shared between instances of one model.
 *
 *  - Write-behind: every block this instance registers is queued (from the
 *    engine's KV events) and a writer thread exports it (format v3, one
 *    self-describing value per key) and stores it with SET NX PX (TTL).
 *    The queue is bounded; past it, or while Redis is unreachable, blocks
 *    are dropped and counted, never waited for.
 *  - Read: before a prompt is submitted (on the fetch thread of
 *    server/kv_fetch.h, after its tokenization, the request waiting at most
 *    what recomputing would take) the blocks of its prefix this instance does not hold are
 *    looked up along the hash chain with MGETs of about 2 MiB each, imported
 *    in order up to the first miss, and the prompt then hits them. Each batch
 *    is fetched only while the transfer is predicted to beat recomputing its
 *    blocks (the link's measured round trip and throughput, updated by every
 *    batch, against the engine's measured prefill rate): a throttled link
 *    costs one batch to learn, then the instance recomputes (and measures
 *    the link again after 30 s). A read that stalls longer than computing
 *    the batch would take gives the batch up.
 *  - Redis down, slow (timeouts), flushed or full means recompute and a
 *    counter; the next attempt reconnects after a back-off. Keys are
 *    "weft:kv:<fingerprint>:<hash>", so models never meet.
 *
 * Redis I/O never runs on the engine or the loop thread. */
#ifndef WEFT_SERVER_KV_REMOTE_H
#define WEFT_SERVER_KV_REMOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/engine.h"
#include "base/status.h"

struct kv_remote_config {
    const char *url;             /* redis://host:port, or unix:///path */
    uint32_t ttl_ms;             /* 0: one hour */
    uint32_t timeout_ms;         /* per Redis call (0: 250) */
    uint32_t queue;              /* blocks waiting to be written (0: 4096) */
};

struct weft_kv_remote_stats {
    uint64_t written, write_dropped, write_errors;   /* blocks SET (new), dropped (queue full / down), failed */
    uint64_t lookups, hit_blocks, miss_blocks;       /* MGETs, blocks found / not found */
    uint64_t fetched_bytes, rejected;                /* bytes read; values refused by the block reader */
    uint64_t chose_fetch, chose_recompute;           /* decisions for prompts missing blocks */
    uint64_t errors;                                 /* connect / command failures and timeouts */
    bool up;
    bool stalled;                                    /* the last read was cut at its bound (a link that
                                                        stalls or trickles); cleared by a whole reply */
    double bytes_per_s, rtt_s;                       /* measured (0 until measured) */
};

struct kv_remote;

/* Parses the URL and starts the writer; connecting happens on first use (a
 * Redis that is not up yet is not an error). */
weft_status weft_kv_remote_create(const struct kv_remote_config *cfg, struct weft_engine *eng,
                             const struct weft_fingerprint *fp, struct kv_remote **out);
void weft_kv_remote_free(struct kv_remote *r);

/* Queue a block for write-behind (from the engine's KV event callback:
 * never blocks). */
void weft_kv_remote_stored(struct kv_remote *r, uint64_t hash);

/* Bring the blocks of prompt[0..n) this engine lacks in from Redis, when
 * worth it (see above), giving up between batches once deadline (monotonic
 * seconds, weft_kv_remote_now; 0: none) has passed, each batch's reads
 * bounded by what is left of it (a link that trickles can still hold one:
 * server/kv_fetch.h runs this where that costs no request). One thread at
 * a time, never the engine's or the loop's; returns the blocks imported. */
uint32_t weft_kv_remote_fetch(struct kv_remote *r, const int32_t *prompt, uint32_t n, double deadline);
/* Full blocks of prompt[0..n) a prompt can take (one token is left to
 * compute) that this engine does not hold. */
uint32_t weft_kv_remote_lacking(struct kv_remote *r, const int32_t *prompt, uint32_t n);
double weft_kv_remote_now(void);
double weft_kv_remote_timeout_s(const struct kv_remote *r);
/* From now on no read is made, and one in flight is cut (its socket shut):
 * before the thread that reads is joined. Any thread. */
void weft_kv_remote_cut_reads(struct kv_remote *r);

void weft_kv_remote_stats(struct kv_remote *r, struct weft_kv_remote_stats *out);

#endif
