/* POST /v1/completions and /v1/chat/completions: a validated request becomes
 * an engine request; engine events (queued from the engine thread, handled
 * here on the loop thread) become text through a streaming detokenizer, are
 * checked against the stop strings, and go out as one JSON response or as
 * server-sent events ending in `data: [DONE]`.
 *
 * A gen_ctx is held by two sides: the engine (until its final event) and
 * the HTTP response (until it ends or the client goes away). A client that
 * disconnects aborts the engine request at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tokenizer.h"
#include "server/params.h"
#include "server/server.h"

struct gen_ctx {
    struct server *srv;
    struct http_conn *conn;          /* NULL once the response ended or the client left */
    int refs;
    uint64_t id;
    bool engine_done, finished, streaming, chat, aborted_by_us;
    struct gen_params p;
    json_t *root;
    struct tenant_cfg *tenant;
    double reserved;                 /* tokens taken from the tenant's bucket */
    char rid[48];
    uint32_t n_prompt, n_cached, n_gen;
    uint32_t max_tokens;
    struct weft_detok dt;
    char *text;                      /* visible generated text so far */
    size_t len, cap, sent;           /* sent: bytes of text already streamed */
    size_t max_stop;
    json_t *lp;                      /* logprobs: chat "content" array or completions object */
    const char *finish_reason;
    double t0, t_first, t_last;
};

static void ctx_unref(struct gen_ctx *g)
{
    if (--g->refs > 0) return;
    struct server *s = g->srv;
    weft_detok_free(&g->dt);
    gen_params_free(&g->p);
    json_decref(g->root);
    json_decref(g->lp);
    free(g->text);
    free(g);
    if (--s->n_active == 0 && s->on_idle) s->on_idle(s);
}

static bool text_append(struct gen_ctx *g, const char *s, size_t n)
{
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap * 2 + n + 64;
        char *t = realloc(g->text, cap);
        if (!t) return false;
        g->text = t;
        g->cap = cap;
    }
    memcpy(g->text + g->len, s, n);
    g->len += n;
    g->text[g->len] = '\0';
    return true;
}

/* ---- JSON helpers ---- */

static json_t *usage_json(const struct gen_ctx *g)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", (int)g->n_prompt, "completion_tokens", (int)g->n_gen,
                     "total_tokens", (int)(g->n_prompt + g->n_gen), "prompt_tokens_details", "cached_tokens",
                     (int)g->n_cached);
}

static void send_json(struct http_conn *c, int status, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) {
        http_respond_error(c, 500, "server_error", NULL, "out of memory");
        return;
    }
    http_respond(c, status, "application/json", NULL, s, strlen(s));
    free(s);
}

static bool send_sse(struct gen_ctx *g, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s || !g->conn) {
        free(s);
        return false;
    }
    size_t n = strlen(s);
    char *buf = malloc(n + 9);
    bool ok = false;
    if (buf) {
        memcpy(buf, "data: ", 6);
        memcpy(buf + 6, s, n);
        memcpy(buf + 6 + n, "\n\n", 2);
        ok = http_stream_write(g->conn, buf, n + 8);
    }
    free(buf);
    free(s);
    return ok;
}

/* The text of one token on its own (for logprobs). */
static json_t *token_str(const struct weft_tokenizer *t, int32_t id)
{
    char *s = NULL;
    size_t n = 0;
    if (weft_detokenize(t, &id, 1, false, &s, &n) != WEFT_OK || !s) return json_string("");
    json_t *j = json_stringn(s, n);
    free(s);
    return j ? j : json_string("");
}

static json_t *token_bytes(const struct weft_tokenizer *t, int32_t id)
{
    char *s = NULL;
    size_t n = 0;
    json_t *a = json_array();
    if (weft_detokenize(t, &id, 1, false, &s, &n) == WEFT_OK && s)
        for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    free(s);
    return a;
}

/* Logprob entries of one sampled token, in the endpoint's format; appended
 * to `into` (chat: array of entries; completions: object of arrays). */
static void add_logprobs(struct gen_ctx *g, const struct weft_sample *sm, json_t *into, size_t text_offset)
{
    const struct weft_tokenizer *t = g->srv->m->tok;
    int ntop = g->p.top_logprobs < sm->n_top ? g->p.top_logprobs : sm->n_top;
    if (g->chat) {
        json_t *top = json_array();
        for (int i = 0; i < ntop; i++)
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", token_str(t, sm->top_id[i]), "logprob",
                                                 (double)sm->top_logprob[i], "bytes", token_bytes(t, sm->top_id[i])));
        json_array_append_new(into, json_pack("{s:o,s:f,s:o,s:o}", "token", token_str(t, sm->id), "logprob",
                                              (double)sm->logprob, "bytes", token_bytes(t, sm->id), "top_logprobs",
                                              top));
    } else {
        json_t *top = json_object();
        for (int i = 0; i < ntop; i++) {
            json_t *k = token_str(t, sm->top_id[i]);
            json_object_set_new(top, json_string_value(k), json_real(sm->top_logprob[i]));
            json_decref(k);
        }
        json_array_append_new(json_object_get(into, "tokens"), token_str(t, sm->id));
        json_array_append_new(json_object_get(into, "token_logprobs"), json_real(sm->logprob));
        json_array_append_new(json_object_get(into, "top_logprobs"), top);
        json_array_append_new(json_object_get(into, "text_offset"), json_integer((json_int_t)text_offset));
    }
}

static json_t *new_logprobs(bool chat)
{
    if (chat) return json_array();
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static json_t *chunk(struct gen_ctx *g, const char *text, size_t n, json_t *lp, const char *finish, bool role)
{
    json_t *choice;
    json_t *fin = finish ? json_string(finish) : json_null();
    if (g->chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (text) json_object_set_new(delta, "content", json_stringn(text, n));
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
                           lp ? json_pack("{s:o}", "content", lp) : json_null(), "finish_reason", fin);
    } else {
        choice = json_pack("{s:i,s:s%,s:o,s:o}", "index", 0, "text", text ? text : "", text ? n : 0, "logprobs",
                           lp ? lp : json_null(), "finish_reason", fin);
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", g->rid, "object",
                     g->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)g->srv->created,
                     "model", g->srv->model_id, "choices", choice);
}

/* ---- stop strings ---- */

/* Earliest occurrence of any stop string in text[from..len); -1 if none. */
static long find_stop(const struct gen_ctx *g, size_t from)
{
    long best = -1;
    for (uint32_t i = 0; i < g->p.n_stop; i++) {
        const char *s = g->p.stop[i];
        size_t n = strlen(s);
        for (size_t at = from; at + n <= g->len; at++)
            if (!memcmp(g->text + at, s, n)) {
                if (best < 0 || (long)at < best) best = (long)at;
                break;
            }
    }
    return best;
}

/* Bytes at the end of text that could still begin a stop string. */
static size_t stop_holdback(const struct gen_ctx *g)
{
    size_t hold = 0;
    for (uint32_t i = 0; i < g->p.n_stop; i++) {
        const char *s = g->p.stop[i];
        size_t n = strlen(s);
        for (size_t k = n - 1; k > hold; k--)
            if (k <= g->len && !memcmp(g->text + g->len - k, s, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* ---- finishing ---- */

/* Send the rest and end the response. true when it ended here (the caller
 * releases the HTTP side); false when the client was already gone. Writes
 * may find the client gone (g->conn becomes NULL through on_client_gone). */
static bool respond_final(struct gen_ctx *g)
{
    struct server *s = g->srv;
    if (!g->conn) return false;
    if (g->streaming) {
        if (g->sent < g->len) {
            send_sse(g, chunk(g, g->text + g->sent, g->len - g->sent, NULL, NULL, false));
            g->sent = g->len;
        }
        send_sse(g, chunk(g, g->chat ? NULL : "", 0, NULL, g->finish_reason, false));
        if (g->p.include_usage) {
            json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", g->rid, "object",
                                  g->chat ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)s->created, "model", s->model_id, "choices", "usage", usage_json(g));
            send_sse(g, u);
        }
        if (g->conn) http_stream_write(g->conn, "data: [DONE]\n\n", 14);
        if (!g->conn) return false;
        http_stream_end(g->conn);
    } else {
        json_t *choice;
        json_t *lp = g->lp ? json_incref(g->lp) : json_null();
        if (g->chat)
            choice = json_pack("{s:i,s:{s:s,s:s%},s:o,s:s}", "index", 0, "message", "role", "assistant", "content",
                               g->text ? g->text : "", g->len, "logprobs",
                               g->lp ? json_pack("{s:o}", "content", lp) : lp, "finish_reason", g->finish_reason);
        else
            choice = json_pack("{s:i,s:s%,s:o,s:s}", "index", 0, "text", g->text ? g->text : "", g->len, "logprobs", lp,
                               "finish_reason", g->finish_reason);
        json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", g->rid, "object",
                              g->chat ? "chat.completion" : "text_completion", "created", (json_int_t)s->created,
                              "model", s->model_id, "choices", choice, "usage", usage_json(g));
        send_json(g->conn, 200, j);
    }
    metrics_request(&s->metrics, g->chat ? "/v1/chat/completions" : "/v1/completions", 200);
    g->conn = NULL;
    return true;
}

/* The request is complete (engine finished, or a stop string matched):
 * answer, give back unused tokens, release the HTTP side. */
static void finish_gen(struct gen_ctx *g, const char *reason)
{
    if (g->finished) return;
    g->finished = true;
    g->finish_reason = reason;
    const char *piece;
    size_t plen;
    /* held bytes of an incomplete character come out as U+FFFD (not after a stop string) */
    if (weft_detok_flush(&g->dt, &piece, &plen) == WEFT_OK && plen && !g->aborted_by_us) text_append(g, piece, plen);
    double now = server_now();
    metrics_observe(&g->srv->metrics.e2e, now - g->t0);
    if (g->tenant && g->max_tokens > g->n_gen) tenant_refund(g->tenant, now, (double)(g->max_tokens - g->n_gen));
    if (respond_final(g)) ctx_unref(g);  /* the HTTP side */
}

static void on_token(struct gen_ctx *g, const struct weft_event *ev)
{
    struct server *s = g->srv;
    double now = server_now();
    g->n_gen++;
    s->metrics.generation_tokens++;
    if (g->n_gen == 1) {
        g->t_first = now;
        metrics_observe(&s->metrics.ttft, now - g->t0);
    } else {
        metrics_observe(&s->metrics.itl, now - g->t_last);
    }
    g->t_last = now;
    const char *piece;
    size_t plen;
    size_t before = g->len;
    if (weft_detok_push(&g->dt, ev->token.id, &piece, &plen) == WEFT_OK && plen) text_append(g, piece, plen);
    json_t *lp = NULL;
    if (g->p.logprobs) {
        lp = g->streaming ? new_logprobs(g->chat) : json_incref(g->lp);
        add_logprobs(g, &ev->token, lp, before);
        if (!g->streaming) {
            json_decref(lp);
            lp = NULL;
        }
    }
    if (g->p.n_stop) {
        size_t from = before >= g->max_stop ? before - g->max_stop + 1 : 0;
        long at = find_stop(g, from);
        if (at >= 0) {
            g->len = (size_t)at;
            g->text[g->len] = '\0';
            if (g->sent > g->len) g->sent = g->len;
            json_decref(lp);
            if (!g->engine_done) {
                g->aborted_by_us = true;
                weft_engine_abort(s->eng, g->id);
            }
            finish_gen(g, "stop");
            return;
        }
    }
    if (g->streaming && g->conn && http_conn_pending(g->conn) > s->max_stream_buffer) {
        /* a client that does not read: stop generating for it rather than
         * queue without bound; the stream ends short (no [DONE]) */
        json_decref(lp);
        s->metrics.slow_client_aborts++;
        g->finished = true;
        g->aborted_by_us = true;
        if (!g->engine_done) weft_engine_abort(s->eng, g->id);
        if (g->tenant && g->max_tokens > g->n_gen) tenant_refund(g->tenant, now, (double)(g->max_tokens - g->n_gen));
        metrics_request(&s->metrics, g->chat ? "/v1/chat/completions" : "/v1/completions", 200);
        http_stream_end(g->conn);
        g->conn = NULL;
        ctx_unref(g);  /* the HTTP side */
        return;
    }
    if (g->streaming && g->conn) {
        size_t upto = g->len - stop_holdback(g);
        bool first = g->sent == 0 && g->n_gen == 1;
        if (upto > g->sent || lp) {
            send_sse(g, chunk(g, g->text + g->sent, upto > g->sent ? upto - g->sent : 0, lp, NULL, first && g->chat));
            g->sent = upto > g->sent ? upto : g->sent;
        } else {
            json_decref(lp);
        }
    } else {
        json_decref(lp);
    }
}

static void on_event(struct gen_ctx *g, const struct weft_event *ev, const char *message)
{
    if (ev->has_token && !g->finished) on_token(g, ev);
    if (ev->finish == WEFT_FINISH_NONE) return;
    g->engine_done = true;
    g->n_cached = ev->n_cached;
    if (!g->finished) {
        if (ev->finish == WEFT_FINISH_ERROR && g->conn && !g->streaming && g->n_gen == 0) {
            http_respond_error(g->conn, 500, "server_error", NULL, "generation failed: %s", message);
            metrics_request(&g->srv->metrics, g->chat ? "/v1/chat/completions" : "/v1/completions", 500);
            g->conn = NULL;
            g->finished = true;
            ctx_unref(g);
        } else {
            finish_gen(g, ev->finish == WEFT_FINISH_LENGTH ? "length" : "stop");
        }
    }
    ctx_unref(g);  /* the engine side */
}

static void on_client_gone(void *user)
{
    struct gen_ctx *g = user;
    if (!g->conn) return;  /* the response already ended */
    g->conn = NULL;
    if (!g->finished) {
        g->finished = true;
        g->srv->metrics.client_disconnects++;
        if (!g->engine_done) weft_engine_abort(g->srv->eng, g->id);
        if (g->tenant && g->max_tokens > g->n_gen)
            tenant_refund(g->tenant, server_now(), (double)(g->max_tokens - g->n_gen));
    }
    ctx_unref(g);  /* the HTTP side */
}

/* ---- engine thread -> loop thread ---- */

void server_engine_event(void *ctx, const struct weft_event *ev)
{
    struct gen_ctx *g = ctx;
    struct server *s = g->srv;
    pthread_mutex_lock(&s->qmu);
    if (s->n_q == s->cap_q) {
        uint32_t cap = s->cap_q ? s->cap_q * 2 : 256;
        struct queued_event *q = realloc(s->q, sizeof *q * cap);
        if (!q) {
            /* cannot queue: the final event must not be lost, so wait and retry */
            pthread_mutex_unlock(&s->qmu);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            server_engine_event(ctx, ev);
            return;
        }
        s->q = q;
        s->cap_q = cap;
    }
    struct queued_event *qe = &s->q[s->n_q++];
    qe->ctx = g;
    qe->ev = *ev;
    snprintf(qe->message, sizeof qe->message, "%s", ev->message ? ev->message : "");
    qe->ev.message = NULL;
    bool closing = s->closing;
    pthread_mutex_unlock(&s->qmu);
    if (!closing) uv_async_send(&s->async);
}

void server_drain_events(uv_async_t *a)
{
    struct server *s = a->data;
    for (;;) {
        pthread_mutex_lock(&s->qmu);
        /* swap buffers so the engine can keep queueing while we deliver */
        struct queued_event *q = s->q;
        uint32_t n = s->n_q, cap = s->cap_q;
        s->q = s->q2;
        s->cap_q = s->cap_q2;
        s->n_q = 0;
        s->q2 = q;
        s->cap_q2 = cap;
        pthread_mutex_unlock(&s->qmu);
        if (n == 0) return;
        for (uint32_t i = 0; i < n; i++) {
            /* hold the context while handling: a write may find the client
             * gone and release the HTTP side underneath */
            q[i].ctx->refs++;
            on_event(q[i].ctx, &q[i].ev, q[i].message);
            ctx_unref(q[i].ctx);
        }
    }
}

/* ---- the request ---- */

static bool model_matches(const struct server *s, const char *name)
{
    return !name || !strcmp(name, s->model_id) || !strcmp(name, "default");
}

static weft_status tokenize_request(struct server *s, struct gen_params *p, int32_t **ids, size_t *n, char *msg,
                                    size_t msg_size)
{
    const struct weft_tokenizer *tok = s->m->tok;
    if (p->chat) {
        struct weft_chat_msg *msgs = p->msgs;
        size_t nm = p->n_msgs;
        struct weft_chat_msg *with = NULL;
        if (s->default_system && strcmp(p->msgs[0].role, "system") != 0) {
            with = malloc(sizeof *with * (nm + 1));
            if (!with) return weft_error(WEFT_ERR_NOMEM, "out of memory");
            with[0] = (struct weft_chat_msg){"system", s->default_system};
            memcpy(with + 1, msgs, sizeof *with * nm);
            msgs = with;
            nm++;
        }
        char *text = NULL;
        weft_status st = weft_chat_render(s->chat_style, msgs, nm, true, &text);
        free(with);
        if (st != WEFT_OK) {
            snprintf(msg, msg_size, "%s", weft_last_error());
            return st;
        }
        st = weft_tokenize(tok, text, strlen(text), true, true, ids, n);
        free(text);
        return st;
    }
    if (p->prompt_ids) {
        for (uint32_t i = 0; i < p->n_prompt_ids; i++)
            if (p->prompt_ids[i] >= weft_tokenizer_n_vocab(tok)) {
                snprintf(msg, msg_size, "prompt token %u (%d) is outside the vocabulary of %d", i, p->prompt_ids[i],
                         weft_tokenizer_n_vocab(tok));
                return WEFT_ERR_INVALID_ARG;
            }
        *ids = malloc(sizeof(int32_t) * p->n_prompt_ids);
        if (!*ids) return WEFT_ERR_NOMEM;
        memcpy(*ids, p->prompt_ids, sizeof(int32_t) * p->n_prompt_ids);
        *n = p->n_prompt_ids;
        return WEFT_OK;
    }
    return weft_tokenize(tok, p->prompt, strlen(p->prompt), true, true, ids, n);
}

void server_generate(struct server *s, struct http_conn *c, const struct http_request *req, bool chat,
                     struct tenant_cfg *tenant)
{
    const char *ep = chat ? "/v1/chat/completions" : "/v1/completions";
    struct gen_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    g->srv = s;
    g->chat = chat;
    g->t0 = server_now();
    s->n_active++;
    g->refs = 1;
    const char *param = NULL;
    char msg[256];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int status = 400;
    const char *etype = "invalid_request_error";
    char extra[64] = "";
    if (!gen_params_parse(req->body, req->body_len, chat, &g->p, &g->root, &param, msg, sizeof msg)) goto fail;
    if (!model_matches(s, g->p.model)) {
        status = 404;
        etype = "not_found_error";
        param = "model";
        snprintf(msg, sizeof msg, "the model '%.64s' does not exist; this server serves '%s'", g->p.model, s->model_id);
        goto fail;
    }
    weft_status st = tokenize_request(s, &g->p, &ids, &n_ids, msg, sizeof msg);
    if (st != WEFT_OK) {
        if (st == WEFT_ERR_NOMEM) { status = 503; etype = "server_error"; snprintf(msg, sizeof msg, "out of memory"); }
        param = chat ? "messages" : "prompt";
        goto fail;
    }
    if (n_ids == 0) {
        param = "prompt";
        snprintf(msg, sizeof msg, "the prompt is empty after tokenization");
        goto fail;
    }
    if (n_ids >= s->n_ctx) {
        param = chat ? "messages" : "prompt";
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %u tokens. However, your prompt has %zu tokens.", s->n_ctx,
                 n_ids);
        goto fail;
    }
    if (g->p.max_tokens < 0) g->p.max_tokens = chat ? (int64_t)(s->n_ctx - n_ids) : 16;
    if ((uint64_t)n_ids + (uint64_t)g->p.max_tokens > s->n_ctx) {
        if (!chat && !json_object_get(g->root, "max_tokens")) {
            g->p.max_tokens = (int64_t)(s->n_ctx - n_ids);
        } else {
            param = "max_tokens";
            snprintf(msg, sizeof msg,
                     "This model's maximum context length is %u tokens. However, you requested %zu tokens "
                     "(%zu in the prompt, %lld for the completion).",
                     s->n_ctx, n_ids + (size_t)g->p.max_tokens, n_ids, (long long)g->p.max_tokens);
            goto fail;
        }
    }
    g->n_prompt = (uint32_t)n_ids;
    g->max_tokens = (uint32_t)g->p.max_tokens;
    if (tenant) {
        double retry;
        if (!tenant_admit(tenant, server_now(), (double)n_ids + (double)g->max_tokens, &retry)) {
            s->metrics.rejected_rate++;
            status = 429;
            etype = "rate_limit_error";
            snprintf(extra, sizeof extra, "Retry-After: %d\r\n", (int)(retry + 0.999) > 0 ? (int)(retry + 0.999) : 1);
            snprintf(msg, sizeof msg, "rate limit of tenant '%s' reached; retry in %.1f s", tenant->name, retry);
            goto fail;
        }
        g->tenant = tenant;
        g->reserved = (double)n_ids + (double)g->max_tokens;
    }
    if (!g->p.seed_given) g->p.sp.seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull + s->next_rid;
    snprintf(g->rid, sizeof g->rid, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)s->created,
             (unsigned long long)(s->next_rid++));
    for (uint32_t i = 0; i < g->p.n_stop; i++)
        if (strlen(g->p.stop[i]) > g->max_stop) g->max_stop = strlen(g->p.stop[i]);
    weft_detok_init(&g->dt, s->m->tok, false);
    g->streaming = g->p.stream;
    if (g->p.logprobs && !g->streaming) g->lp = new_logprobs(chat);

    struct weft_request rq = {.prompt = ids, .n_prompt = (uint32_t)n_ids, .max_tokens = g->max_tokens,
                              .sampling = g->p.sp, .ignore_eos = g->p.ignore_eos,
                              .priority = g->p.priority + (tenant ? tenant->priority : 0),
                              .tenant = tenant ? tenant->name : NULL, .cb = server_engine_event, .user = g};
    g->refs = 2;  /* engine + HTTP */
    g->conn = c;
    st = weft_engine_submit(s->eng, &rq, &g->id);
    if (st != WEFT_OK) {
        g->refs = 1;
        g->conn = NULL;
        if (tenant) tenant_refund(tenant, server_now(), g->reserved);
        if (st == WEFT_ERR_BUSY) {
            s->metrics.rejected_queue++;
            status = 503;
            etype = "server_busy";
            snprintf(extra, sizeof extra, "Retry-After: 1\r\n");
        } else if (st == WEFT_ERR_NOMEM) {
            status = 503;
            etype = "server_error";
        }
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        goto fail;
    }
    free(ids);
    s->metrics.prompt_tokens += n_ids;
    http_conn_on_close(c, on_client_gone, g);
    if (g->streaming)
        http_stream_begin(c, 200, "text/event-stream", "Cache-Control: no-cache\r\n");
    return;
fail:
    free(ids);
    metrics_request(&s->metrics, ep, status);
    if (extra[0]) {
        char body[512];
        json_t *j = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", etype, "param",
                              param ? json_string(param) : json_null(), "code", json_null());
        char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        snprintf(body, sizeof body, "%s", b ? b : "{}");
        free(b);
        http_respond(c, status, "application/json", extra, body, strlen(body));
    } else {
        http_respond_error(c, status, etype, param, "%s", msg);
    }
    ctx_unref(g);
}
