/* `weft serve`: state shared by the HTTP handlers (server/api*.c) and the
 * command (server/serve.c). Everything here lives on the libuv loop thread,
 * except the event queue, which the engine thread fills. */
#ifndef WEFT_SERVER_SERVER_H
#define WEFT_SERVER_SERVER_H

#include <pthread.h>
#include <uv.h>

#include "core/chat.h"
#include "core/engine.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/tenants.h"

struct gen_ctx;

struct queued_event {
    struct gen_ctx *ctx;
    struct weft_event ev;
    char message[200];
};

struct server {
    uv_loop_t *loop;
    struct http_server *http;
    struct weft_engine *eng;
    const struct weft_model *m;
    char model_id[128];
    uint64_t created;
    uint32_t n_ctx, max_waiting;
    enum weft_chat_style chat_style;
    const char *default_system;      /* injected like the model's template does, or NULL */
    struct tenants tenants;
    struct metrics metrics;
    uint64_t weight_bytes, kv_bytes;
    size_t max_stream_buffer;        /* bytes queued for a streaming client before it is dropped */
    bool draining, closing;
    uint32_t n_active;               /* generation requests not yet released */
    void (*on_idle)(struct server *);/* called when n_active drops to 0 */
    uint64_t next_rid;
    /* engine thread -> loop */
    uv_async_t async;
    pthread_mutex_t qmu;
    struct queued_event *q, *q2;
    uint32_t n_q, cap_q, cap_q2;
};

/* The HTTP handler (server/api.c). */
void server_handle(void *srv, struct http_conn *c, const struct http_request *req);
/* POST /v1/completions and /v1/chat/completions (server/api_gen.c). */
void server_generate(struct server *s, struct http_conn *c, const struct http_request *req, bool chat,
                     struct tenant_cfg *tenant);
/* Engine callback (engine thread): queue the event for the loop. */
void server_engine_event(void *ctx, const struct weft_event *ev);
/* uv_async callback (loop thread): deliver queued events. */
void server_drain_events(uv_async_t *a);
/* Seconds since an arbitrary start (monotonic). */
double server_now(void);

#endif
