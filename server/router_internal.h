/* weft router's internals, shared by router.c (lifecycle, polling, KV
 * events, DNS), router_proxy.c (requests) and router_metrics.c. */
#ifndef WEFT_SERVER_ROUTER_INTERNAL_H
#define WEFT_SERVER_ROUTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "server/fleet.h"
#include "server/params.h"
#include "server/shape.h"
#include "server/http_client.h"
#include "server/router.h"
#include "server/tenants.h"
#include "server/workers.h"

#define ROUTER_LAT_BUCKETS 18
#define ROUTER_TTFT_BUCKETS 21

/* An answer collected whole (status, body up to max bytes; past it status -1). */
struct body_buf {
    struct inst_io *io;
    char *b;
    size_t len, cap, max;
    int status;
};

struct pxy;

/* Capacity refusals by device class, for the scale-out signal. */
enum { SO_NO_KV_ROOM = 0, SO_BUSY, SO_NO_INSTANCE, SO_N };
#define ROUTER_MAX_CLASSES 32
struct scale_class {
    char name[96];                 /* the instances' device ("" for none known) */
    uint64_t signals[SO_N];
    double win_start;              /* refusals in this minute and the one before */
    uint64_t win_now, win_prev;
    double dur_mean;               /* seconds a request took on this class (moving average) */
    uint32_t max_seqs;             /* the largest instance's */
};

enum { RETRY_CONNECT = 0, RETRY_5XX, RETRY_BUSY, RETRY_NO_KV_ROOM, RETRY_HANG, RETRY_INVALID, RETRY_N };
enum { MIG_DIED = 0, MIG_HANG, MIG_ERROR_EVENT, MIG_STALL, MIG_INVALID, MIG_N };
enum { THROTTLE_RATE = 0, THROTTLE_TOO_LARGE, THROTTLE_N };
enum { SHED_QUEUE_FULL = 0, SHED_TENANT_FULL, SHED_DISPLACED, SHED_NO_INSTANCE, SHED_N };

/* A tenant in the router's queue (router_queue.c). */
#define ROUTER_MAX_QTENANTS 256
struct qtenant {
    char name[WEFT_TENANT_NAME_MAX];
    uint32_t queued;
    uint64_t served;               /* the queue's tick when one of its requests last left it */
};

/* per instance: its connections and subscriptions */
struct inst_io {
    struct weft_router *r;
    struct fleet_instance *in;
    struct hcl_pool *pool;
    struct hcl_req *poll, *events, *snapshot;
    struct body_buf load, index;   /* the /load and /v1/kv/index answers being received */
    char *ebuf;                    /* the event stream's unparsed tail */
    size_t elen, ecap;
    struct { uint64_t seq, hash; uint8_t kind; } *held;  /* events during a snapshot (core/kv.h's kinds) */
    uint32_t n_held, cap_held;
    bool held_overflow;
    bool fp_warned;
    struct inst_io *next_dead;     /* removed, waiting for its requests to end */
    struct pxy *inflight;          /* requests it is answering (failed over when it stops answering) */
};

struct weft_router {
    struct weft_router_config cfg;
    uv_loop_t *loop;
    uv_loop_t own_loop;
    struct http_server *http;
    struct weft_workers *workers;
    struct tenants tenants;
    bool has_tenants;
    char *upstream_auth;           /* "Authorization: Bearer KEY\r\n" or NULL */
    struct shape_store *shapes;    /* /v1/responses' stored responses (previous_response_id) */
    struct fleet fleet;
    uv_timer_t poll_timer, dns_timer;
    uv_getaddrinfo_t gai;
    bool gai_busy;
    char *dns_host;
    int dns_port;
    struct inst_io *dead;
    uv_async_t stop_async;
    atomic_int stop_requests;
    uv_signal_t sig_term, sig_int;
    bool draining, stopped;
    double t0;
    char fingerprint[40];          /* the fleet's model (first reported) */
    /* metrics */
    uint64_t requests, rejected, upstream_errors, client_gone;
    uint64_t identity_dropped;     /* identity headers from clients without a trusted key, dropped */
    uint64_t invalid_answers;      /* answers from instances that were not what they claimed (not forwarded) */
    uint64_t lat_count, lat_hist[ROUTER_LAT_BUCKETS + 1];
    double lat_sum;
    uint64_t by_status[6];         /* 1xx..5xx, other */
    uint64_t tokenized;
    /* failover */
    uint64_t retries[RETRY_N], migrations[MIG_N], migration_limit, failover_exhausted;
    uint64_t admitted, throttled[THROTTLE_N];
    /* the queue (router_queue.c) */
    struct pxy *q_head, *q_tail;   /* priority descending, arrival within */
    uint32_t q_len;
    struct qtenant qt[ROUTER_MAX_QTENANTS];
    uint32_t n_qt;
    uint64_t q_tick, queued_total, shed[SHED_N], q_wait_n;
    double q_wait_sum;
    uv_timer_t pump_timer;
    bool pump_armed;
    double dur_mean;               /* seconds a request takes, fleet-wide (moving average) */
    double empty_since;            /* when the fleet last became empty of usable instances (0: it is not) */
    bool ever_up;                  /* an instance has been usable (hold_startup_s is over) */
    struct scale_class classes[ROUTER_MAX_CLASSES];
    uint32_t n_classes;
    uint64_t ttft_count, ttft_hist[ROUTER_TTFT_BUCKETS + 1];
    double ttft_sum;
    /* prefill/decode hand-offs (router_pd.c) */
    uint64_t pd_epoch, pd_next;    /* PD ids: unique across restarts and requests */
    uint64_t pd_started, pd_prefill_ok, pd_prefill_failed, pd_aborts_sent;
};

/* One proxied request (router_proxy.c; queued in router_queue.c). */
#define MAX_TRIED 16
#define TAIL 48                    /* bytes kept across chunks to find "cached_tokens" and "completion_tokens" */

/* The client's credential: its Authorization header, or "Bearer " + its
 * x-api-key (Anthropic's SDK) in buf; NULL when it sent neither. */
const char *weft_router_client_auth(const struct http_request *req, char *buf, size_t n);

struct pxy {
    struct weft_router *r;
    struct http_conn *c;
    const struct http_request *req;   /* valid until the response ends */
    bool chat, routed;
    /* /v1/responses, /v1/messages: forwarded as the chat they translate to,
     * its answer translated back (server/shape.h) */
    enum api_shape shape;
    struct shape_ctx *sh;
    struct gen_params p;
    json_t *root;
    int32_t *ids;
    size_t n_ids;
    size_t n_more;                    /* a prompt array's other prompts' tokens (routed by the first) */
    weft_status tok_status;
    char tok_msg[200];
    atomic_bool cancelled;
    int refs;                         /* the connection's, the job's */
    bool gone;                        /* the client left */
    struct fleet_decision d;
    bool decided;
    struct fleet_instance *target;    /* forwarded (not routed) requests */
    struct hcl_req *up;
    bool head_sent, sse;
    double t_arrival, t_dispatch;
    char extra[640];
    char upstream_hdrs[1024];
    char tail[TAIL * 2 + 1];
    size_t tail_len;
    int64_t cached;                   /* last "cached_tokens" seen in the answer, -1 none */
    /* failover: the instances tried, the stream so far (to continue it elsewhere) */
    bool ext;                         /* the router asked for weft.ids: the stream can move */
    bool refused;                     /* this attempt's answer is a refusal to retry elsewhere (not forwarded) */
    int refusal;                      /* its RETRY_* reason */
    bool stream_error;                /* the instance sent an error event mid-stream */
    bool done_seen, first_content;
    struct fleet_instance *tried[MAX_TRIED];
    uint32_t n_tried, retries, migrations;
    int32_t *gen;                     /* token ids of every chunk forwarded */
    uint32_t n_gen, cap_gen;
    long long seed;
    bool seed_known, rid_known;
    char rid[48];
    long long created;
    char *ev;                         /* an SSE event not complete yet */
    size_t ev_len, ev_cap, ev_scan;   /* ev_scan: where the search for its end goes on */
    bool invalid;                     /* the instance sent what no weft serve sends: not forwarded */
    double t_last;                    /* when the instance last sent a byte of this answer */
    /* a non-stream answer, held whole until it is known to be what it says (JSON) */
    bool buffered;
    int up_status;
    char up_ctype[96];
    char *body;
    size_t body_len, body_cap;
    struct inst_io *on_io;            /* the instance answering it (its inflight list) */
    struct pxy *io_prev, *io_next;
    /* the tenant's buckets at the router (fleet-wide): tenant is the one
     * charged, end_tenant the name sent upstream (client_tenant) */
    char tenant[WEFT_TENANT_NAME_MAX];
    char end_tenant[WEFT_TENANT_NAME_MAX];
    bool has_tenant;                  /* the client's key named a tenant (not anonymous) */
    bool charged, delivered;
    double reserved;                  /* tokens taken: prompt + max_tokens */
    uint32_t reserved_max;            /* the max_tokens in it */
    int64_t clamp_max;                /* > 0: max_tokens sent upstream (the default cut to the budget) */
    int64_t generated;                /* completion tokens seen (-1 unknown) */
    char rl_hdrs[400];                /* x-ratelimit-* for the client */
    /* the router's queue (router_queue.c) */
    int32_t prio;                     /* the request's priority (its tenant's cap applied) */
    bool queued, from_queue;
    double t_queued;
    struct pxy *q_prev, *q_next;
    char qname[WEFT_TENANT_NAME_MAX]; /* its tenant for fairness (key, fairness id, or "") */
};


extern const double weft_router_lat_bounds[ROUTER_LAT_BUCKETS];
/* TTFT buckets: fine below a second, and 7.5/10/15/20/30 s so an overloaded
 * fleet's p99 (what an autoscaler reads) is not all one bucket wide */
extern const double weft_router_ttft_bounds[ROUTER_TTFT_BUCKETS];

double weft_router_now(const struct weft_router *r);
void weft_router_handle(void *ctx, struct http_conn *c, const struct http_request *req);
void weft_router_observe_overhead(struct weft_router *r, double seconds);
/* Streams silent past their instance's measured step time: moved (router_proxy.c; from the poll timer). */
void weft_router_check_stalls(struct weft_router *r);
char *weft_router_metrics_render(struct weft_router *r, size_t *len);
/* The dashboard (router_dash.c): its page (page) or GET /fleet's JSON;
 * returns the status sent. */
int weft_router_dash_respond(struct weft_router *r, struct http_conn *c, bool page);
struct inst_io *weft_router_io(const struct fleet_instance *in);
/* The instance stopped answering its health check: every request it holds
 * moves (retried before its first byte, migrated after). */
void weft_router_instance_failed(struct weft_router *r, struct inst_io *io);
/* The scale-out signal's class table entry for an instance's device. */
struct scale_class *weft_router_class(struct weft_router *r, const struct fleet_instance *in);
void weft_router_scale_signal(struct weft_router *r, const struct fleet_instance *in, int reason);

/* A hand-off decided for x (x->d.pd_in): send the prompt to the prefill
 * instance and write the decode instance's x-weft-pd header into hdr
 * ("" when the hand-off could not start: the decoder computes it all). */
void weft_router_pd_start(struct pxy *x, char *hdr, size_t cap);

/* The queue (router_queue.c). */
bool weft_router_saturated_for(struct weft_router *r, int32_t prio);
/* How long a request waits for an instance when none is usable: hold_empty_s,
 * or hold_startup_s before the first has come up, the longer (0: 503 at once). */
uint32_t weft_router_hold_s(const struct weft_router *r);
bool weft_router_queue_wants(struct weft_router *r, const struct pxy *x);
void weft_router_queue_add(struct pxy *x);          /* queued, or shed (answered 503) */
void weft_router_queue_remove(struct pxy *x);
void weft_router_queue_kick(struct weft_router *r); /* try to bind queued requests (soon, on the loop) */
/* --hold-empty-s: requests held while no instance was usable for that long
 * are answered 503 (called on every poll tick). */
void weft_router_queue_expire(struct weft_router *r);
int weft_router_queue_drain_s(const struct weft_router *r, uint32_t ahead);
/* router_proxy.c: decide and forward now; answer 503 with these headers. */
void weft_router_dispatch(struct pxy *x);
void weft_router_reply_busy(struct pxy *x, const char *headers, const char *msg);

#endif
