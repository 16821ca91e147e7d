/* Private to server/: the state shared by the HTTP handlers (server/api*.c)
 * and the lifecycle (server/serve.c; public API in server/serve.h).
 * Everything here lives on the libuv loop thread, except the event queue,
 * which the engine thread fills, and the tokenize counters (atomics). */
#ifndef WEFT_SERVER_SERVER_H
#define WEFT_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "core/chat.h"
#include "core/engine.h"
#include "core/fingerprint.h"
#include "server/chat_template.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/pd.h"
#include "server/prompt.h"
#include "server/serve.h"
#include "server/shape.h"
#include "server/tenants.h"
#include "server/workers.h"

struct gen_ctx;
struct gen_choice;
struct kv_events;
struct kv_remote;
struct kv_fetch;

#define SERVER_MAX_DEVICES 8
struct server_device {
    char id[40], backend[16], name[128], vendor[16];
    uint64_t mem_total;
};

struct queued_event {
    struct gen_choice *choice;       /* server/api_gen.c: one choice of a request */
    struct weft_event ev;
    char message[200];
};

struct weft_server {
    uv_loop_t loop_storage;
    uv_loop_t *loop;
    pthread_t loop_thread;
    struct http_server *http;
    struct http_server *http_metrics; /* own listener for /metrics, or NULL */
    const char *metrics_key;
    struct weft_workers *workers;
    struct weft_workers *grammar_workers; /* one thread: request grammars compiled off the tokenizing workers */
    struct weft_server_config cfg;
    char tenants_path[1024];
    struct gen_ctx *gens;            /* live generation requests */
    size_t max_piece_bytes;          /* longest vocabulary piece: tokens >= bytes / this */
    atomic_uint_fast64_t tokenized_on_loop, tokenized_on_worker;
    atomic_uint_fast64_t grammar_compiles;  /* on grammar_workers */
    uint64_t reloads, reload_failures;
    uv_signal_t sig_term, sig_int, sig_hup, sig_usr1, sig_usr2;
    uv_timer_t drain_timer;
    uv_async_t stop_async;           /* weft_server_stop from any thread */
    atomic_int stop_requests;
    int stops_handled;
    bool signals, drained, cut;
    struct server_device devices[SERVER_MAX_DEVICES];
    uint32_t n_devices;
    uint64_t mock_rng;                /* --mock failure draws (loop thread) */
    uint64_t mock_injected[5];
    struct kv_events *kv_events;     /* server/kv_events.c */
    struct kv_remote *kv_remote;     /* server/kv_remote.c, or NULL */
    struct kv_fetch *kv_fetch;       /* server/kv_fetch.c: its reads, off the request path (with kv_remote) */
    struct weft_kvb_keys kv_keys;    /* the fleet secret's MAC keys (n 0: shared KV is off) */
    char fleet_cred[65];             /* what this instance presents to its peers (PD pushes) */
    size_t kv_push_held;             /* bytes of POST /v1/kv/blocks bodies held now (http.c's budget) */
    struct pd *pd;                   /* server/pd.c: prefill/decode hand-offs */
    struct weft_engine *eng;
    const struct weft_model *m;
    char model_id[128];
    uint64_t created;
    uint32_t n_ctx, max_waiting;
    struct prompt_rules rules;       /* tokenizer, chat family, injected default system prompt */
    struct chat_template tmpl;       /* the model's Jinja chat template (server/chat_template.h) */
    struct shape_store *shapes;      /* /v1/responses' stored responses (previous_response_id) */
    int32_t *eog_ids;                /* the vocabulary's end-of-generation tokens (min_tokens bans them) */
    uint32_t n_eog;
    struct tenants tenants;
    struct metrics metrics;
    uint64_t weight_bytes, kv_bytes;
    size_t max_stream_buffer;        /* bytes queued for a streaming client before it is dropped */
    bool draining, closing;
    uint32_t n_active;               /* generation requests not yet released */
    void (*on_idle)(struct weft_server *);/* called when n_active drops to 0 */
    uint64_t next_rid;
    /* engine thread -> loop */
    uv_async_t async;
    pthread_mutex_t qmu;
    struct queued_event *q, *q2;
    uint32_t n_q, cap_q, cap_q2;
};

/* Shared KV is on (a fleet secret): /v1/kv/... and PD hand-offs for trusted callers. */
static inline bool weft_server_kv_on(const struct weft_server *s) { return s->kv_keys.n > 0; }
/* May this caller use the fleet surfaces (/v1/kv/..., x-weft-pd headers)?
 * false with why (a fixed sentence) when not. */
bool weft_server_fleet_caller(const struct weft_server *s, const struct tenant_cfg *t, const char **why);

/* The HTTP handler (server/api.c). */
void weft_server_handle(void *srv, struct http_conn *c, const struct http_request *req);
/* The same for the metrics listener: /metrics, /health, /ready only. */
void weft_server_handle_metrics(void *srv, struct http_conn *c, const struct http_request *req);
/* POST /v1/completions and /v1/chat/completions, and the APIs translated
 * into chats (/v1/responses, /v1/messages: server/shape.h) (server/api_gen.c). */
void weft_server_generate(struct weft_server *s, struct http_conn *c, const struct http_request *req,
                          enum api_shape shape, bool chat, struct tenant_cfg *tenant);
/* GET /load (server/api_load.c); the device list it reports, from the
 * --device or --split spec. */
void weft_server_do_load(struct weft_server *s, struct http_conn *c);
/* The watchdog: es says the engine has had work and no progress for longer
 * than cfg.watchdog_ms. */
bool weft_server_stalled(const struct weft_server *s, const struct weft_engine_stats *es);
void weft_server_describe_devices(struct weft_server *s, const char *spec);
/* GET /v1/kv/events and /v1/kv/index (server/kv_events.c). init hooks
 * the engine's KV events (before calibration); end_all ends every
 * subscription (drain); close releases it all after the engine stopped. */
weft_status weft_server_kv_events_init(struct weft_server *s, uint32_t n_blocks, uint32_t n_ckpts);
void weft_server_kv_events_end_all(struct weft_server *s, const char *why);
void weft_server_kv_events_close(struct weft_server *s);
void weft_server_do_kv_events(struct weft_server *s, struct http_conn *c);
void weft_server_do_kv_index(struct weft_server *s, struct http_conn *c);
/* Stop handing stored blocks to the remote tier (before it is freed). */
void weft_server_kv_events_drop_remote(struct weft_server *s);
/* GET / POST /v1/kv/blocks (server/api_kv.c); t: the caller's tenant (NULL: anonymous) */
void weft_server_do_kv_blocks(struct weft_server *s, struct http_conn *c, const struct http_request *req,
                         const struct tenant_cfg *t);
uint32_t weft_server_kv_subscribers(const struct weft_server *s);
/* End every open generation request now (drain deadline): streams get an
 * error event saying why, unanswered requests 503; engine sides aborted. */
void weft_server_cut_all(struct weft_server *s, const char *why);
/* Engine callback (engine thread): queue the event for the loop. */
void weft_server_engine_event(void *ctx, const struct weft_event *ev);
/* uv_async callback (loop thread): deliver queued events. */
void weft_server_drain_events(uv_async_t *a);
/* The name an answer reports for a request that asked for model `asked`
 * (NULL or "default": the model's id; the id or an alias: itself, as
 * stored in the server's configuration), or NULL when this server does not
 * serve it. */
const char *weft_server_model_name(const struct weft_server *s, const char *asked);
/* Seconds since an arbitrary start (monotonic). */
double weft_server_now(void);

#endif
