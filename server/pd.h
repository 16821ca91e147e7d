/* Prefill/decode disaggregation on an instance (FLEET.md, "Shared KV"):
 * a prefill instance computes a prompt for a decode instance and streams
 * its KV blocks there as they are committed; the decode instance starts the
 * request once the last block has landed, or computes what is missing
 * itself (fallback). Both halves are here; the router pairs them
 * (server/router_proxy.c). Everything runs on the server's loop thread;
 * block export and import run on the worker pool.
 *
 * The decode side. A request that names a PD id (x-weft-pd: id=ID;
 * wait_ms=N, from a trusted caller) waits, after tokenization, for its
 * prompt's blocks; blocks pushed under that id (POST /v1/kv/blocks with
 * x-weft-pd-id: ID) are pinned on arrival (core/kv.h weft_kv_pin) so that
 * nothing evicts them before the request takes them. The wait ends when:
 *  - every block its prefix match would use is held (complete);
 *  - the prefill instance says it has sent all it will (x-weft-pd-end:
 *    done or failed) or the router says the prefill died (x-weft-pd-end:
 *    abort): what is missing is computed here;
 *  - no block came for wait_ms before the first one, or for --pd-idle-ms
 *    after one (a prefill lost without word): the same.
 * The request's pins go when it ends. Blocks whose request never comes (a
 * router that died, a request refused before it got here) are unpinned
 * after --pd-lease-ms without a new block: stranded blocks are freed.
 *
 * The prefill side. A request with x-weft-pd-push: URL;id=ID (trusted) is
 * computed as usual; as its prompt's blocks are committed (the engine's KV
 * events) they are exported and POSTed to URL's /v1/kv/blocks under ID,
 * one batch at a time, each batch what was committed since the last one
 * (the transfer overlaps the compute); after the request ends, the rest,
 * then the end marker; the request's answer waits for that (200 when every
 * block went, 502 when the push failed), so that a caller (the router) that
 * sees the answer fail, or the instance die first, knows the transfer did
 * not finish. A push that fails ends the transfer (the decode side falls
 * back). */
#ifndef WEFT_SERVER_PD_H
#define WEFT_SERVER_PD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct weft_server;
struct pd_ticket;
struct pd_push;

#define PD_ID_MAX 64

struct pd_stats {
    /* decode side */
    uint64_t requests;             /* requests that waited for pushed blocks */
    uint64_t complete;             /* ... and got all of them */
    uint64_t fallback_timeout;     /* ... and timed out: the rest computed here */
    uint64_t fallback_ended;       /* ... and the prefill side ended short (failed, aborted) */
    uint64_t blocks_in, bytes_in;  /* pushed blocks taken under a PD id */
    uint64_t leases_expired;       /* tickets whose request never came: unpinned */
    uint64_t pins_refused;         /* pushed blocks left unpinned: past one ticket's or all tickets' bound */
    double wait_s;                 /* seconds requests waited, in all */
    uint32_t tickets;              /* open now */
    /* prefill side */
    uint64_t pushes, pushes_done, pushes_failed;
    uint64_t blocks_out, bytes_out, batches;
    double push_s;                 /* seconds from a push's start to its end, in all */
};

/* Before the engine starts; the server's cfg (pd_idle_ms, pd_lease_ms). */
weft_status weft_server_pd_init(struct weft_server *s);
/* Closes every ticket (unpinning) and push; the loop must run on for the handles. */
void weft_server_pd_close(struct weft_server *s);
/* After the loop has run the last callbacks (workers freed). */
void weft_server_pd_free(struct weft_server *s);
void weft_server_pd_stats(const struct weft_server *s, struct pd_stats *out);

/* "id=ID;wait_ms=N" -> id (1..PD_ID_MAX-1 of [0-9A-Za-z_-]) and wait_ms; false if not that. */
bool weft_server_pd_parse_wait(const char *v, char *id, uint32_t *wait_ms);
/* "URL;id=ID" -> url (http://host:port, into url[cap]) and id. */
bool weft_server_pd_parse_push(const char *v, char *url, size_t cap, char *id);

/* The request of PD id `id` is ready to go (tokenized); hashes[0..n): the
 * prompt blocks its prefix match would use. true: go now (all held, or the
 * prefill side has ended); false: it waits, and ready(user, complete) is
 * called once, later, on the loop. Either way *out is its ticket, to hand
 * to weft_server_pd_detach when the request ends (NULL on out of memory: go). */
bool weft_server_pd_attach(struct weft_server *s, const char *id, const uint64_t *hashes, uint32_t n, uint32_t wait_ms,
                      void (*ready)(void *user, bool complete), void *user, struct pd_ticket **out);
/* The request ended (or left): its pins go; ready is never called after. */
void weft_server_pd_detach(struct weft_server *s, struct pd_ticket *t);

/* POST /v1/kv/blocks with x-weft-pd-id (api_kv.c, loop thread, after the
 * import): the blocks pinned for id (owned by the ticket now) and what the
 * sender says about the end (NULL, "done", "failed", "abort"). */
void weft_server_pd_arrived(struct weft_server *s, const char *id, uint64_t *pinned, uint32_t n_pinned, uint32_t n_blocks,
                       size_t bytes, const char *end);

/* The prefill side: push the blocks of prompt[0..n) to url under id as they
 * are committed; auth: an "Authorization: ...\r\n" line for url, or NULL. */
struct pd_push *weft_server_pd_push_start(struct weft_server *s, const char *url, const char *id, const char *auth,
                                     const int32_t *prompt, uint32_t n);
/* Its request ended: push what is left, then the end marker; then (or at
 * once, when the transfer is already over) on_end(user, ok), once, on the
 * loop (on_end may be NULL). The request answers after it: its answer says
 * the transfer is over, and how it went. */
void weft_server_pd_push_request_done(struct weft_server *s, struct pd_push *p, void (*on_end)(void *user, bool ok),
                                 void *user);
/* Blocks were committed (server/kv_events.c, loop thread): pushes move on. */
void weft_server_pd_kick(struct weft_server *s);

#endif
