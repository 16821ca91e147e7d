/* Remote KV fetches off every path a request waits on (server/kv_remote.h
 * does the Redis I/O). A prompt's missing prefix blocks are fetched on a
 * thread of their own; the request goes on when they have come or when its
 * deadline passes, whichever is first. The deadline is what recomputing
 * those blocks would take (the engine's measured prefill rate; the tier's
 * per-call timeout before any is measured), so a fetch never costs a
 * request more than not fetching would have, and a Redis that stalls or
 * trickles holds that thread, never a worker or another request. A fetch
 * running past its deadline marks the tier stalled (/health, metrics); the
 * fetches queued behind it are dropped when their deadlines pass, unbegun.
 *
 * Loop-side calls (start, close) run on the server's loop thread. */
#ifndef WEFT_SERVER_KV_FETCH_H
#define WEFT_SERVER_KV_FETCH_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/status.h"
#include "core/engine.h"
#include "server/kv_remote.h"

struct kv_fetch;

struct kv_fetch_stats {
    uint64_t started;      /* fetches queued */
    uint64_t in_time;      /* ended before their deadline: the request took what came */
    uint64_t late;         /* their request went on at the deadline without them (or at shutdown) */
    uint64_t dropped;      /* never begun: the deadline passed in the queue (counted when the thread
                              gets to them) */
    uint64_t queue_full;   /* not queued: too many waiting (the request went on at once) */
    bool stalled;          /* a fetch is running now past its deadline, or the last read was cut at its
                              bound: the tier stalls or trickles */
};

/* The fetch thread and the loop handles; r and eng outlive it. */
weft_status weft_kv_fetch_create(uv_loop_t *loop, struct kv_remote *r, struct weft_engine *eng, struct kv_fetch **out);

/* Fetch the blocks of prompt[0..n) (copied) the engine lacks. go(user,
 * fetched) then runs once, on the loop: when the fetch has ended (fetched
 * true) or its deadline passed first (false). false: nothing to fetch (a
 * prompt under two blocks, every block held) or no room in the queue; go is
 * never called and the caller goes on at once. */
bool weft_kv_fetch_start(struct kv_fetch *f, const int32_t *prompt, uint32_t n, void (*go)(void *user, bool fetched),
                         void *user);

void weft_kv_fetch_stats(struct kv_fetch *f, struct kv_fetch_stats *out);

/* Close the loop handles (the server's close_all): the requests still
 * waiting are told now (fetched false), and no go() runs after. The loop
 * must run for the close callbacks. */
void weft_kv_fetch_close(struct kv_fetch *f);
/* Stop the thread (a read in flight is cut); before the remote tier and
 * the engine are freed. NULL is a no-op. */
void weft_kv_fetch_stop(struct kv_fetch *f);
/* Stop (if not yet) and free; after the loop ran the closes. NULL is a no-op. */
void weft_kv_fetch_free(struct kv_fetch *f);

#endif
