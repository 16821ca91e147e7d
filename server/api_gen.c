/* POST /v1/completions and /v1/chat/completions: a validated request becomes
 * an engine request; engine events (queued from the engine thread, handled
 * here on the loop thread) become text through a streaming detokenizer, are
 * checked against the stop strings, and go out as one JSON response or as
 * server-sent events ending in `data: [DONE]`.
 *
 * Admission runs cheapest first: the body is parsed and checked on the
 * loop thread, then bounds that need no tokens (a prompt of B bytes has at
 * least B / (longest vocabulary piece) tokens: against the context and the
 * tenant's whole budget), and only then are the prompt rendered and
 * tokenized, on the worker pool (server/workers.h), never on the loop.
 *
 * A gen_ctx is held by up to three sides: the tokenizing job (until its
 * done callback), the engine (until its final event) and the HTTP response
 * (until it ends or the client goes away). A client that disconnects aborts
 * the engine request at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/grammar.h"
#include "base/buf.h"
#include "core/kv.h"
#include "server/kv_fetch.h"
#include "core/stop.h"
#include "core/tokenizer.h"
#include "server/params.h"
#include "server/structured.h"
#include "server/chat_format.h"
#include "server/chat_template.h"
#include "server/shape.h"
#include "server/server.h"
#include "server/kv_remote.h"
#include "server/api_gen_internal.h"


/* The endpoint the request came to (metrics). */
const char *weft_gen_ep_path(const struct gen_ctx *g)
{
    if (g->shape != SHAPE_CHAT) return weft_shape_path(g->shape);
    return g->chat ? "/v1/chat/completions" : "/v1/completions";
}

static void free_extra_prompts(struct gen_ctx *g)
{
    for (uint32_t i = 0; g->xids && i + 1 < g->p.n_prompts; i++) free(g->xids[i]);
    free(g->xids);
    free(g->xn);
    g->xids = NULL;
    g->xn = NULL;
}

static void ctx_unref(struct gen_ctx *g)
{
    if (--g->refs > 0) return;
    struct weft_server *s = g->srv;
    if (g->prev) g->prev->next = g->next;
    else if (s->gens == g) s->gens = g->next;
    if (g->next) g->next->prev = g->prev;
    if (g->pd) weft_server_pd_detach(s, g->pd);
    if (g->push) weft_server_pd_push_request_done(s, g->push, NULL, NULL);
    free(g->pd_auth);
    free(g->ban);
    free(g->ids);
    free_extra_prompts(g);
    weft_grammar_unref(g->grammar);
    for (uint32_t i = 0; i < g->n_ch; i++) {
        struct gen_choice *c = &g->ch[i];
        if (c->st_ready) weft_stop_free(&c->st);
        free(c->chunk_ids);
        json_decref(c->lp);
        weft_chat_reply_free(&c->reply);
    }
    free(g->ch);
    weft_shape_ctx_free(g->sh);
    weft_gen_params_free(&g->p);
    json_decref(g->root);
    free(g->echo);
    free(g);
    if (--s->n_active == 0 && s->on_idle) s->on_idle(s);
}


/* completion tokens of every choice */
static uint32_t total_gen(const struct gen_ctx *g)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->n_ch; i++) n += g->ch[i].n_gen;
    return n;
}

/* End every choice still running in the engine (the request ends). */
static void abort_all(struct gen_ctx *g)
{
    for (uint32_t i = 0; i < g->n_ch; i++) {
        struct gen_choice *c = &g->ch[i];
        if (c->submitted && !c->engine_done) {
            c->aborted_by_us = true;
            weft_engine_abort(g->srv->eng, c->id);
        }
    }
}

/* Give back what the request reserved and did not use (tenant looked up
 * by name: SIGHUP may have reloaded the tenants since). */
static void refund_unused(struct gen_ctx *g, double now)
{
    if (!g->charged) return;
    g->charged = false;
    struct tenant_cfg *t = weft_tenants_find(&g->srv->tenants, g->tenant);
    double all = (double)g->max_tokens * g->n_ch, gen = total_gen(g);
    double unused = g->submitted ? (all > gen ? all - gen : 0) : g->reserved;
    if (t && unused > 0) weft_tenant_refund(t, now, unused);
}

/* ---- JSON helpers ---- */

static json_t *usage_json(const struct gen_ctx *g)
{
    /* the prompt counted once, however many choices shared it */
    uint32_t gen = total_gen(g);
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", (int)g->n_prompt, "completion_tokens", (int)gen,
                     "total_tokens", (int)(g->n_prompt + gen), "prompt_tokens_details", "cached_tokens",
                     (int)g->n_cached);
}

/* Send the rest and end the response. true when it ended here (the caller
 * releases the HTTP side); false when the client was already gone. Writes
 * may find the client gone (g->conn becomes NULL through on_client_gone). */
static bool respond_final(struct gen_ctx *g)
{
    struct weft_server *s = g->srv;
    if (!g->conn) return false;
    if (g->push_failed && !g->streaming) {
        /* a PD prefill whose blocks did not all reach the decode instance: the caller must know */
        weft_metrics_request(&s->metrics, weft_gen_ep_path(g), 502);
        weft_http_respond_error(g->conn, 502, "server_error", NULL,
                           "the prompt was computed but its KV blocks did not all reach %s", g->pd_push_url);
        g->conn = NULL;
        return true;
    }
    if (g->streaming) {
        for (uint32_t i = 0; i < g->n_ch; i++) weft_gen_stream_choice_end(&g->ch[i]);
        if (g->p.include_usage) {
            json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", g->rid, "object",
                                  g->chat ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)g->created, "model", g->model, "choices", "usage", usage_json(g));
            weft_gen_send_sse(g, u);
        }
        if (g->sh) {
            struct weft_strbuf b = {0};
            weft_shape_stream_end(g->sh, &b);
            if (g->conn && b.len) weft_http_stream_write(g->conn, b.p, b.len);
            weft_sb_free(&b);
        } else if (g->conn) {
            weft_http_stream_write(g->conn, "data: [DONE]\n\n", 14);
        }
        if (!g->conn) return false;
        weft_http_stream_end(g->conn);
    } else {
        json_t *choices = json_array();
        for (uint32_t i = 0; i < g->n_ch; i++) json_array_append_new(choices, weft_gen_choice_json(&g->ch[i]));
        json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", g->rid, "object",
                              g->chat ? "chat.completion" : "text_completion", "created", (json_int_t)g->created,
                              "model", g->model, "choices", choices, "usage", usage_json(g));
        char extra[64];
        snprintf(extra, sizeof extra, "x-weft-seed: %lld\r\n", (long long)g->p.sp.seed);
        if (g->sh && j) {
            json_t *shaped = weft_shape_response(g->sh, j);
            json_decref(j);
            j = shaped;
        }
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (body) weft_http_respond(g->conn, 200, "application/json", extra, body, strlen(body));
        else weft_http_respond_error(g->conn, 500, "server_error", NULL, "out of memory");
        free(body);
    }
    weft_metrics_request(&s->metrics, weft_gen_ep_path(g), 200);
    g->conn = NULL;
    return true;
}

static void count_finish(struct gen_ctx *g, enum metric_finish f) { g->srv->metrics.finish[f]++; }

/* Choice c is complete (its sequence ended, or a stop string matched): its
 * end goes out (streamed); once every choice is, the request is answered,
 * unused tokens given back, the HTTP side released. reason: the
 * finish_reason; why: the metric's (an engine abort or error after tokens
 * were sent still reads "stop" to the client). */
static void finish_choice(struct gen_choice *c, const char *reason, enum metric_finish why)
{
    struct gen_ctx *g = c->g;
    if (c->done || g->finished) return;
    c->done = true;
    g->n_done++;
    count_finish(g, why);
    c->finish_reason = reason;
    /* held bytes of an incomplete character come out as U+FFFD, held-back
     * text is released (nothing after a stop string) */
    struct weft_stop_step step;
    weft_stop_end(&c->st, &step);
    if (g->chat) {
        /* reasoning, content and calls; a reply cut short keeps its
         * finished calls (the cut one is dropped) and says "length" */
        weft_chat_reply_parse(&g->srv->tmpl.fmt, &g->p.st, g->in_think, c->st.text, c->st.len, false, &c->reply);
        c->parsed = true;
        if (c->reply.n_calls && strcmp(reason, "length")) c->finish_reason = "tool_calls";
    }
    if (g->streaming && g->conn && !g->push_wait) weft_gen_stream_choice_end(c);
    if (g->n_done < g->n_ch) return;
    g->finished = true;
    double now = weft_server_now();
    weft_metrics_observe(&g->srv->metrics.e2e, now - g->t0);
    refund_unused(g, now);
    if (g->push_wait) {
        g->final_deferred = true;  /* on_push_end answers */
        return;
    }
    if (respond_final(g)) ctx_unref(g);  /* the HTTP side */
}

static void submit_rest(struct gen_ctx *g);

static void on_token(struct gen_choice *c, const struct weft_event *ev)
{
    struct gen_ctx *g = c->g;
    struct weft_server *s = g->srv;
    double now = weft_server_now();
    c->n_gen++;
    s->metrics.generation_tokens++;
    if (++c->n_new == 1) {
        if (g->t_first == 0) {
            g->t_first = now;
            weft_metrics_observe(&s->metrics.ttft, now - g->t0);
        }
        weft_metrics_observe(&s->metrics.queue, ev->queue_seconds);
    } else {
        weft_metrics_observe(&s->metrics.itl, now - c->t_last);
    }
    c->t_last = now;
    struct weft_stop_step step;
    if (weft_stop_push(&c->st, ev->token.id, &step) != WEFT_OK) {
        /* out of memory for the text: end the answer with what it has */
        c->aborted_by_us = true;
        if (!c->engine_done) weft_engine_abort(s->eng, c->id);
        finish_choice(c, "stop", METRIC_FINISH_ERROR);
        return;
    }
    if (g->p.ext_ids) weft_gen_chunk_id_add(c, ev->token.id);
    json_t *lp = NULL;
    if (g->p.logprobs && step.stop != WEFT_STOP_TOKEN) {
        lp = g->streaming ? weft_gen_new_logprobs(g->chat) : json_incref(c->lp);
        weft_gen_add_logprobs(c, &ev->token, lp, step.tok_from, step.tok_len, step.first_piece);
        if (!g->streaming) {
            json_decref(lp);
            lp = NULL;
        }
    }
    if (step.stop != WEFT_STOP_NONE) {
        /* a stop string (or a stop token the engine let through): the rest
         * and the end go out from finish_choice */
        json_decref(lp);
        if (!c->engine_done) {
            c->aborted_by_us = true;
            weft_engine_abort(s->eng, c->id);
        }
        finish_choice(c, "stop", METRIC_FINISH_STOP);
        return;
    }
    if (g->streaming && g->conn && weft_http_conn_unread(g->conn) > s->max_stream_buffer) {
        /* a client that does not read: stop generating for it rather than
         * queue without bound; the stream ends short (no [DONE]) */
        json_decref(lp);
        s->metrics.slow_client_aborts++;
        count_finish(g, METRIC_FINISH_SLOW_CLIENT);
        g->finished = true;
        abort_all(g);
        refund_unused(g, now);
        weft_metrics_request(&s->metrics, weft_gen_ep_path(g), 200);
        /* say why the stream ends short (no [DONE]) before ending it */
        weft_gen_send_sse_error(g, "server_error", "the client did not read its stream: more than the stream buffer "
                                          "(--max-stream-buffer-kib) was waiting unsent");
        if (g->conn) weft_http_stream_end(g->conn);
        g->conn = NULL;
        ctx_unref(g);  /* the HTTP side */
        return;
    }
    if (g->streaming && g->conn) {
        weft_gen_stream_progress(c, lp, false);
    } else {
        json_decref(lp);
    }
    /* the first choice's prompt blocks are in the prefix cache now: the others find them there */
    if (c->index == 0 && c->n_new == 1 && g->n_submitted < g->n_ch && !g->finished) submit_rest(g);
}

/* The PD push of g's blocks is over: the answer it held back goes out. */
static void on_push_end(void *user, bool ok)
{
    struct gen_ctx *g = user;
    g->push_wait = false;
    g->push_failed = !ok;
    if (g->final_deferred) {
        g->final_deferred = false;
        if (respond_final(g)) ctx_unref(g);  /* the HTTP side */
    }
    ctx_unref(g);  /* the push's */
}

static void on_event(struct gen_choice *c, const struct weft_event *ev, const char *message)
{
    struct gen_ctx *g = c->g;
    if (ev->has_token && !c->done && !g->finished) on_token(c, ev);
    if (ev->finish == WEFT_FINISH_NONE) return;
    c->engine_done = true;
    if (c->index == 0 && g->push) {
        /* the rest of its blocks, then the end; the answer waits for it */
        struct pd_push *push = g->push;
        g->push = NULL;
        g->push_wait = true;
        g->refs++;  /* the push's */
        weft_server_pd_push_request_done(g->srv, push, on_push_end, g);
    }
    if (c->index % g->p.n == 0) g->n_cached += ev->n_cached;  /* each prompt counted once */
    if (!c->done && !g->finished) {
        if (ev->finish == WEFT_FINISH_ERROR && g->conn && !g->streaming && total_gen(g) == 0) {
            /* a grammar no token of the vocabulary can continue is the request's
             * schema, not this instance: 400, which a router passes on as it is */
            bool schema = g->grammar && ev->status == WEFT_ERR_INVALID_ARG;
            int status = schema ? 400 : 500;
            refund_unused(g, weft_server_now());
            count_finish(g, METRIC_FINISH_ERROR);
            abort_all(g);
            if (schema)
                weft_http_respond_error(g->conn, 400, "invalid_request_error",
                                        g->p.st.format != GEN_FORMAT_TEXT ? "response_format" : "tools",
                                        "the output's grammar cannot be followed with this model's vocabulary: %s",
                                        message);
            else
                weft_http_respond_error(g->conn, 500, "server_error", NULL, "generation failed: %s", message);
            weft_metrics_request(&g->srv->metrics, weft_gen_ep_path(g), status);
            g->conn = NULL;
            g->finished = true;
            ctx_unref(g);
        } else {
            finish_choice(c, ev->finish == WEFT_FINISH_LENGTH ? "length" : "stop",
                          ev->finish == WEFT_FINISH_LENGTH  ? METRIC_FINISH_LENGTH
                          : ev->finish == WEFT_FINISH_ABORT ? METRIC_FINISH_ABORT
                          : ev->finish == WEFT_FINISH_ERROR ? METRIC_FINISH_ERROR
                                                            : METRIC_FINISH_STOP);
        }
    }
    /* the first choice ended before any token: the others go now */
    if (c->index == 0 && g->n_submitted < g->n_ch && !g->finished) submit_rest(g);
    ctx_unref(g);  /* the engine side */
}

static void on_client_gone(void *user)
{
    struct gen_ctx *g = user;
    if (!g->conn) return;  /* the response already ended */
    g->conn = NULL;
    atomic_store(&g->cancelled, true);
    if (!g->finished) {
        g->finished = true;
        g->srv->metrics.client_disconnects++;
        if (g->submitted) count_finish(g, METRIC_FINISH_CLIENT_GONE);
        abort_all(g);
        refund_unused(g, weft_server_now());
    }
    ctx_unref(g);  /* the HTTP side */
}

/* ---- engine thread -> loop thread ---- */

void weft_server_engine_event(void *ctx, const struct weft_event *ev)
{
    struct gen_choice *c = ctx;
    struct weft_server *s = c->g->srv;
    pthread_mutex_lock(&s->qmu);
    if (s->n_q == s->cap_q) {
        uint32_t cap = s->cap_q ? s->cap_q * 2 : 256;
        struct queued_event *q = realloc(s->q, sizeof *q * cap);
        if (!q) {
            /* cannot queue: the final event must not be lost, so wait and retry */
            pthread_mutex_unlock(&s->qmu);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            weft_server_engine_event(ctx, ev);
            return;
        }
        s->q = q;
        s->cap_q = cap;
    }
    struct queued_event *qe = &s->q[s->n_q++];
    qe->choice = c;
    qe->ev = *ev;
    snprintf(qe->message, sizeof qe->message, "%s", ev->message ? ev->message : "");
    qe->ev.message = NULL;
    bool closing = s->closing;
    pthread_mutex_unlock(&s->qmu);
    if (!closing) uv_async_send(&s->async);
}

void weft_server_drain_events(uv_async_t *a)
{
    struct weft_server *s = a->data;
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
            struct gen_ctx *g = q[i].choice->g;
            g->refs++;
            on_event(q[i].choice, &q[i].ev, q[i].message);
            ctx_unref(g);
        }
    }
}

/* ---- the request ---- */

/* Render (chat) and tokenize g's prompt into g->ids / g->n_ids; the status
 * and message land in g->tok_status / g->tok_msg. Runs on a worker thread
 * (weft_last_error is per thread: its text is copied here). Reads only g->p
 * and the server's immutable model/template fields. */
static void build_grammar(struct gen_ctx *g);

static void tokenize_work(void *arg)
{
    struct gen_ctx *g = arg;
    struct weft_server *s = g->srv;
    if (atomic_load(&g->cancelled)) {
        g->tok_status = WEFT_ERR_INVALID_ARG;
        snprintf(g->tok_msg, sizeof g->tok_msg, "the client left");
        return;
    }
    if (!g->p.prompt_ids || g->p.n_prompts > 1) {  /* one prompt of ids was checked on the loop */
        if (pthread_equal(pthread_self(), s->loop_thread)) atomic_fetch_add(&s->tokenized_on_loop, 1);
        else atomic_fetch_add(&s->tokenized_on_worker, 1);
        g->tok_status = weft_prompt_tokens(&s->rules, &g->p, &g->ids, &g->n_ids, &g->in_think, g->tok_msg,
                                           sizeof g->tok_msg);
    }
    /* a prompt array: the others, each as a request of that one prompt */
    uint32_t k = g->p.n_prompts;
    if (g->tok_status == WEFT_OK && k > 1) {
        g->xids = calloc(k - 1, sizeof *g->xids);
        g->xn = calloc(k - 1, sizeof *g->xn);
        if (!g->xids || !g->xn) {
            g->tok_status = WEFT_ERR_NOMEM;
            return;
        }
        for (uint32_t i = 1; i < k && g->tok_status == WEFT_OK; i++) {
            struct gen_params q = g->p;
            json_t *v = json_array_get(g->p.prompt_list, i);
            int32_t *ids = NULL;
            q.prompt = json_string_value(v);
            q.prompt_ids = NULL;
            q.n_prompt_ids = 0;
            if (json_is_array(v)) {
                size_t n = json_array_size(v);
                if (!(ids = malloc(sizeof(int32_t) * n))) {
                    g->tok_status = WEFT_ERR_NOMEM;
                    break;
                }
                for (size_t t = 0; t < n; t++) ids[t] = (int32_t)json_integer_value(json_array_get(v, t));
                q.prompt_ids = ids;
                q.n_prompt_ids = (uint32_t)n;
            }
            g->tok_status = weft_prompt_tokens(&s->rules, &q, &g->xids[i - 1], &g->xn[i - 1], NULL, g->tok_msg,
                                               sizeof g->tok_msg);
            free(ids);
            if (g->tok_status != WEFT_OK) {
                char m[256];
                snprintf(m, sizeof m, "prompt %u: %.200s", i, g->tok_msg);
                snprintf(g->tok_msg, sizeof g->tok_msg, "%s", m);
            }
        }
    }
}

/* The grammar pool's job: the compile, off the tokenizing workers (a big
 * schema delays other schemas' requests, never plain ones). */
static void grammar_work(void *arg)
{
    struct gen_ctx *g = arg;
    if (atomic_load(&g->cancelled)) return;
    atomic_fetch_add(&g->srv->grammar_compiles, 1);
    build_grammar(g);
}

/* The grammar response_format or tool_choice asks for (server/structured.h),
 * compiled once per request; a schema it cannot enforce is a 400 naming the
 * parameter. */
static void build_grammar(struct gen_ctx *g)
{
    char *text = NULL;
    struct chat_call_frame fr;
    weft_chat_call_frame(g->srv->tmpl.fmt.calls, &fr);
    if (!weft_structured_grammar(&g->p.st, &fr, &text, &g->tok_param, g->tok_msg, sizeof g->tok_msg)) {
        g->tok_status = WEFT_ERR_INVALID_ARG;
        return;
    }
    if (!text) return;
    weft_status st = weft_grammar_parse(text, strlen(text), &g->grammar);
    free(text);
    if (st != WEFT_OK) {
        /* the converters write grammar text that parses: a language refused
         * (a schema that can never end, left recursion) is the schema's
         * fault, 400; a syntax error is weft's bug, 500, but still this
         * request's alone (X-Weft-Fault: request: a router neither retries it
         * nor holds it against the instance) */
        g->tok_status = st;
        /* a grammar the client wrote (grammar, guided_grammar) is the client's to fix */
        bool own = g->p.st.format == GEN_FORMAT_GRAMMAR && g->p.st.tool_choice != GEN_TOOLS_REQUIRED &&
                   g->p.st.tool_choice != GEN_TOOLS_NAMED;
        if (own && st != WEFT_ERR_NOMEM) st = WEFT_ERR_INVALID_ARG;
        g->tok_status = st;
        g->grammar_bug = st != WEFT_ERR_NOMEM && st != WEFT_ERR_INVALID_ARG;
        g->tok_param = g->p.st.format != GEN_FORMAT_TEXT ? g->p.st.format_param : "tools";
        if (st == WEFT_ERR_INVALID_ARG && own)
            snprintf(g->tok_msg, sizeof g->tok_msg, "'%s' is not a grammar weft can use: %s", g->tok_param,
                     weft_last_error());
        else if (st == WEFT_ERR_INVALID_ARG)
            snprintf(g->tok_msg, sizeof g->tok_msg, "the %s schema cannot be enforced: %s", g->tok_param,
                     weft_last_error());
        else
            snprintf(g->tok_msg, sizeof g->tok_msg, "%s", weft_last_error());
    }
}

/* Token ids given in the request: checked against the vocabulary (cheap: on the loop). */
static void copy_prompt_ids(struct gen_ctx *g)
{
    g->tok_status = weft_prompt_tokens(&g->srv->rules, &g->p, &g->ids, &g->n_ids, NULL, g->tok_msg, sizeof g->tok_msg);
}

/* Does the request constrain its output (a grammar to compile)? */
static bool wants_grammar(const struct gen_ctx *g)
{
    const struct gen_structured *st = &g->p.st;
    return st->format != GEN_FORMAT_TEXT || st->tool_choice == GEN_TOOLS_REQUIRED || st->tool_choice == GEN_TOOLS_NAMED;
}

/* Answer an error on g's connection and release the HTTP side. extra:
 * response headers ("Retry-After: N\r\n") or NULL. */
static void reject(struct gen_ctx *g, int status, const char *etype, const char *param, const char *msg,
                   const char *extra)
{
    struct weft_server *s = g->srv;
    struct http_conn *c = g->conn;
    g->conn = NULL;
    g->finished = true;
    atomic_store(&g->cancelled, true);  /* a job still queued for it skips its work */
    refund_unused(g, weft_server_now());
    weft_metrics_request(&s->metrics, weft_gen_ep_path(g), status);
    if (c && g->shape != SHAPE_CHAT) {
        json_t *e = weft_shape_error(g->shape, status, etype, param, msg);
        char *body = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        if (body) weft_http_respond(c, status, "application/json", extra, body, strlen(body));
        else weft_http_respond_error(c, 500, "server_error", NULL, "out of memory");
        free(body);
    } else if (c) {
        char body[1024];
        size_t n = weft_http_error_body(body, sizeof body, etype, param, msg);
        weft_http_respond(c, status, "application/json", extra, body, n);
    }
    ctx_unref(g);  /* the HTTP side */
}

/* Seconds until the queue has drained, predicted from what requests take
 * here (mean end-to-end time) and how many run at once; at least 1. */
static int predicted_drain_s(const struct weft_server *s)
{
    struct weft_engine_stats es;
    weft_engine_stats(s->eng, &es);
    double mean = s->metrics.e2e.n ? s->metrics.e2e.sum / (double)s->metrics.e2e.n : 1.0;
    double par = es.running ? es.running : 1;
    double t = ((double)es.waiting + (double)weft_workers_pending(s->workers) + 1) * mean / par;
    if (!(t >= 1)) return 1;
    return t > 3600 ? 3600 : (int)(t + 0.999);
}

static void admit_and_submit(struct gen_ctx *g);

/* The PD wait is over: go on (the client may have left meanwhile: then the
 * context is gone and this is never called). */
static void pd_ready(void *user, bool complete)
{
    (void)complete;
    struct gen_ctx *g = user;
    if (!g->finished && g->conn) admit_and_submit(g);
}

/* A decode-side request waits for its prompt's blocks from the prefill
 * instance (server/pd.h): false when it waits (admit_and_submit runs again
 * when the wait ends). */
static bool pd_wait(struct gen_ctx *g, size_t n_ids)
{
    g->pd_go = true;
    uint32_t nb = (uint32_t)((n_ids - 1) / WEFT_KV_BLOCK_TOKENS);
    uint64_t *h = malloc(sizeof *h * (nb ? nb : 1));
    if (!h) return true;
    uint64_t x = 0;
    for (uint32_t i = 0; i < nb; i++) h[i] = x = weft_kv_block_hash(x, g->ids + (size_t)i * WEFT_KV_BLOCK_TOKENS);
    bool go = weft_server_pd_attach(g->srv, g->pd_id, h, nb, g->pd_wait_ms, pd_ready, g, &g->pd);
    free(h);
    return go;
}

/* The remote tier's fetch for g ended, or its deadline passed (kv_fetch.h). */
static void fetched(void *user, bool got)
{
    (void)got;
    struct gen_ctx *g = user;
    if (!g->finished && g->conn) admit_and_submit(g);
    ctx_unref(g);  /* the fetch's reference */
}

/* After the grammar (if any): the prefix blocks this instance lacks, from
 * the remote tier, on the fetch thread, the request going on by the time
 * recomputing them would take at the latest (a stalled Redis holds no
 * worker and no request); then admission. Takes over the caller's
 * reference to g. */
static void fetch_then_admit(struct gen_ctx *g)
{
    struct weft_server *s = g->srv;
    if (s->kv_fetch && !g->finished && g->conn && g->tok_status == WEFT_OK && g->n_ids > 1 && g->p.n_prompts == 1) {
        g->refs++;
        if (weft_kv_fetch_start(s->kv_fetch, g->ids, (uint32_t)g->n_ids, fetched, g)) {
            ctx_unref(g);  /* the caller's reference; the fetch holds its own */
            return;
        }
        g->refs--;
    }
    if (!g->finished && g->conn) admit_and_submit(g);
    ctx_unref(g);
}

static void grammar_done(void *arg) { fetch_then_admit(arg); }

static void tokenize_done(void *arg)
{
    struct gen_ctx *g = arg;
    struct weft_server *s = g->srv;
    if (g->tok_status == WEFT_OK && !g->finished && g->conn && wants_grammar(g)) {
        /* the job's reference moves to the grammar pool's job */
        if (weft_workers_submit(s->grammar_workers, grammar_work, grammar_done, g) == WEFT_OK) return;
        g->tok_status = WEFT_ERR_BUSY;
        snprintf(g->tok_msg, sizeof g->tok_msg, "too many schemas are being compiled; retry");
    }
    fetch_then_admit(g);
}

/* The refusal of an engine submission (st, with the engine's message in
 * emsg): its status, error type, message and headers. */
static int submit_refusal(struct gen_ctx *g, weft_status st, const char *emsg, const char **etype, char *msg,
                          size_t msg_size, char *extra, size_t extra_size)
{
    struct weft_server *s = g->srv;
    extra[0] = 0;
    if (st == WEFT_ERR_BUSY) {
        s->metrics.rejected_queue++;
        /* the queue is full; when what it waits for is KV room (sequence
         * slots are free but the waiting cannot start, or no block is
         * free or reusable), say so: a router counts it as such */
        struct weft_engine_stats es;
        weft_engine_stats(s->eng, &es);
        uint32_t slots = s->cfg.engine.max_seqs ? s->cfg.engine.max_seqs : 64;
        bool kv_full = es.kv.free + es.kv.cached == 0 || (es.waiting > 0 && es.running < slots);
        int retry = predicted_drain_s(s);
        snprintf(extra, extra_size, "Retry-After: %d\r\n%s", retry, kv_full ? "x-weft-reject: no_kv_room\r\n" : "");
        /* the client's words, not the scheduler's */
        snprintf(msg, msg_size, "the server is busy: %u requests are already waiting; retry in %d s", es.waiting,
                 retry);
        *etype = "server_busy";
        return 503;
    }
    snprintf(msg, msg_size, "%s", emsg);
    if (st == WEFT_ERR_NO_ROOM) {
        /* this instance's KV cache can never hold it; a larger one may:
         * 503 (a router tries elsewhere), marked as such */
        s->metrics.rejected_no_room++;
        snprintf(extra, extra_size, "x-weft-reject: no_kv_room\r\n");
        *etype = "server_busy";
        return 503;
    }
    *etype = st == WEFT_ERR_NOMEM ? "server_error" : "invalid_request_error";
    return st == WEFT_ERR_NOMEM ? 503 : 400;
}

/* Give choice i to the engine: the prompt (and a continuation's tokens),
 * sampled with seed + i (so choice i draws exactly what a request of one
 * choice with that seed would). On failure nothing is left with it and
 * weft_last_error() says why. */
static weft_status submit_choice(struct gen_ctx *g, uint32_t i)
{
    struct gen_choice *c = &g->ch[i];
    /* a prompt array: choice i is prompt i / n's */
    uint32_t pi = i / g->p.n;
    struct weft_request rq = {.prompt = pi ? g->xids[pi - 1] : g->ids,
                              .n_prompt = pi ? (uint32_t)g->xn[pi - 1] : g->n_submit_prompt,
                              .max_tokens = g->max_tokens - g->submit_k,
                              .sampling = g->p.sp, .ignore_eos = g->p.ignore_eos, .sample_pos = g->submit_k,
                              .priority = g->priority, .tenant = g->end_tenant, .grammar = g->grammar,
                              .cb = weft_server_engine_event, .user = c};
    rq.sampling.seed = g->p.sp.seed + i;
    g->refs++;  /* the engine's */
    weft_status st = weft_engine_submit(g->srv->eng, &rq, &c->id);
    if (st != WEFT_OK) {
        g->refs--;
        return st;
    }
    c->submitted = true;
    g->submitted = true;
    g->n_submitted++;
    return WEFT_OK;
}

/* The choices after the first, once its prompt blocks are cached (or it
 * ended): a refusal now ends the whole request. */
static void submit_rest(struct gen_ctx *g)
{
    while (g->n_submitted < g->n_ch && !g->finished) {
        weft_status st = submit_choice(g, g->n_submitted);
        if (st == WEFT_OK) continue;
        char emsg[256], msg[512], extra[128];
        snprintf(emsg, sizeof emsg, "%s", weft_last_error());
        const char *etype;
        int status = submit_refusal(g, st, emsg, &etype, msg, sizeof msg, extra, sizeof extra);
        abort_all(g);
        if (!g->streaming) {
            reject(g, status, etype, NULL, msg, extra);
        } else {
            /* the stream has begun: an error event, then its end */
            g->finished = true;
            refund_unused(g, weft_server_now());
            count_finish(g, METRIC_FINISH_ERROR);
            weft_metrics_request(&g->srv->metrics, weft_gen_ep_path(g), 200);
            weft_gen_send_sse_error(g, etype, msg);
            struct http_conn *conn = g->conn;
            g->conn = NULL;
            if (conn) {
                weft_http_stream_end(conn);
                ctx_unref(g);  /* the HTTP side */
            }
        }
        break;
    }
    if (g->n_submitted == g->n_ch || g->finished) {
        free(g->ids);
        g->ids = NULL;
    }
}

/* After tokenization (loop thread): exact context checks, the tenant's
 * buckets, the engine. */
static void admit_and_submit(struct gen_ctx *g)
{
    struct weft_server *s = g->srv;
    const char *pname = g->chat ? "messages" : "prompt";
    char msg[512], extra[128];
    if (g->tok_status != WEFT_OK) {
        if (g->tok_status == WEFT_ERR_NOMEM) reject(g, 503, "server_error", NULL, "out of memory", NULL);
        else if (g->tok_status == WEFT_ERR_BUSY) reject(g, 503, "server_busy", NULL, g->tok_msg, "Retry-After: 1\r\n");
        else if (g->grammar_bug) reject(g, 500, "server_error", g->tok_param, g->tok_msg, "X-Weft-Fault: request\r\n");
        else reject(g, 400, "invalid_request_error", g->tok_param ? g->tok_param : pname, g->tok_msg, NULL);
        return;
    }
    size_t n_ids = g->n_ids;
    /* a prompt array: every prompt must fit with max_tokens; the longest decides */
    size_t n_all = n_ids, n_max = n_ids;
    for (uint32_t i = 0; i + 1 < g->p.n_prompts; i++) {
        if (g->xn[i] == 0) n_ids = 0;
        n_all += g->xn[i];
        if (g->xn[i] > n_max) n_max = g->xn[i];
    }
    if (g->p.n_prompts > 1 && g->pd_id[0]) {
        reject(g, 400, "invalid_request_error", "prompt", "a prefill/decode hand-off takes one prompt", NULL);
        return;
    }
    if (n_ids == 0) {
        reject(g, 400, "invalid_request_error", "prompt", "the prompt is empty after tokenization", NULL);
        return;
    }
    n_ids = n_max;
    if (n_ids >= s->n_ctx) {
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %u tokens. However, your prompt has %zu tokens.", s->n_ctx,
                 n_ids);
        reject(g, 400, "invalid_request_error", pname, msg, NULL);
        return;
    }
    if (g->p.max_tokens < 0) g->p.max_tokens = g->chat ? (int64_t)(s->n_ctx - n_ids) : 16;
    if ((uint64_t)n_ids + (uint64_t)g->p.max_tokens > s->n_ctx) {
        if (!g->chat && !json_object_get(g->root, "max_tokens")) {
            g->p.max_tokens = (int64_t)(s->n_ctx - n_ids);
        } else {
            snprintf(msg, sizeof msg,
                     "This model's maximum context length is %u tokens. However, you requested %zu tokens "
                     "(%zu in the prompt, %lld for the completion).",
                     s->n_ctx, n_ids + (size_t)g->p.max_tokens, n_ids, (long long)g->p.max_tokens);
            reject(g, 400, "invalid_request_error", "max_tokens", msg, NULL);
            return;
        }
    }
    if (g->pd_id[0] && !g->pd_go && !pd_wait(g, n_ids)) return;
    struct tenant_cfg *tenant = g->tenant[0] ? weft_tenants_find(&s->tenants, g->tenant) : NULL;
    bool max_given = json_object_get(g->root, "max_tokens") || json_object_get(g->root, "max_completion_tokens");
    double nc = g->n_ch;
    if (tenant && tenant->tpm > 0 && !max_given && (double)n_ids + nc <= tenant->tpm &&
        (double)n_ids + (double)g->p.max_tokens * nc > tenant->tpm)  /* the default fits the budget: never refused for it */
        g->p.max_tokens = (int64_t)((tenant->tpm - (double)n_ids) / nc);
    g->n_prompt = (uint32_t)n_all;
    g->max_tokens = (uint32_t)g->p.max_tokens;
    n_ids = g->n_ids;  /* the first prompt's, from here on */
    if (tenant) {
        /* each prompt once (its choices share it), max_tokens for each choice */
        double retry, need = (double)n_all + (double)g->max_tokens * nc;
        if (!weft_tenant_admit(tenant, weft_server_now(), need, &retry)) {
            s->metrics.rejected_rate++;
            if (isinf(retry)) {
                snprintf(msg, sizeof msg,
                         "this request needs %.0f tokens (%zu in the prompt + max_tokens %u), more than tenant '%s' "
                         "may use in a whole minute (tokens_per_minute %.0f): it can never be admitted; send fewer "
                         "tokens",
                         need, n_ids, g->max_tokens, tenant->name, tenant->tpm);
                reject(g, 429, "rate_limit_error", "max_tokens", msg, NULL);
                return;
            }
            snprintf(extra, sizeof extra, "Retry-After: %d\r\n", (int)(retry + 0.999) > 0 ? (int)(retry + 0.999) : 1);
            snprintf(msg, sizeof msg, "rate limit of tenant '%s' reached; retry in %.1f s", tenant->name, retry);
            reject(g, 429, "rate_limit_error", NULL, msg, extra);
            return;
        }
        g->charged = tenant->tpm > 0;
        g->reserved = need;
    }
    /* the effective seed, reported (x-weft-seed, weft.ids), in int64 range
     * so that it can be sent back as "seed" */
    if (!g->p.seed_given)
        g->p.sp.seed = ((uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull + s->next_rid * 0xbf58476d1ce4e5b9ull) >> 1;
    if (g->p.ext_created > 0) g->created = (uint64_t)g->p.ext_created;  /* a continuation keeps its time */
    if (g->p.ext_rid) snprintf(g->rid, sizeof g->rid, "%s", g->p.ext_rid);
    else snprintf(g->rid, sizeof g->rid, "%s-%llx%06llx", g->chat ? "chatcmpl" : "cmpl",
                  (unsigned long long)s->created, (unsigned long long)s->next_rid);
    s->next_rid++;
    /* a completion continues its prompt: its first piece keeps its space
     * (as `weft run` prints it); a chat answer starts a message */
    struct weft_stop_cfg scfg = {.tok = weft_model_tokenizer(s->m), .ignore_eos = g->p.ignore_eos,
                                 .ids = g->p.stop_ids, .n_ids = g->p.n_stop_ids, .strings = g->p.stop,
                                 .min_tokens = g->p.min_tokens,
                                 .n_strings = g->p.n_stop, .continues_prompt = !g->chat,
                                 /* a chat's format markers that are control tokens are read back */
                                 .render_ids = g->chat ? s->tmpl.markers : NULL,
                                 .n_render_ids = g->chat ? s->tmpl.n_markers : 0};
    g->streaming = g->p.stream;
    for (uint32_t i = 0; i < g->n_ch; i++) {
        struct gen_choice *c = &g->ch[i];
        if (weft_stop_init(&c->st, &scfg) != WEFT_OK) {
            reject(g, 503, "server_error", NULL, "out of memory", NULL);
            return;
        }
        c->st_ready = true;
        if (g->p.logprobs && !g->streaming) c->lp = weft_gen_new_logprobs(g->chat);
    }
    struct gen_choice *c0 = &g->ch[0];  /* a continuation has one choice (params.c) */
    char headers[128];
    snprintf(headers, sizeof headers, "Cache-Control: no-cache\r\nx-weft-seed: %lld\r\n", (long long)g->p.sp.seed);

    uint32_t k = g->p.n_cont;
    if (g->p.cont) {
        /* a continuation: its k tokens go through the stop state as they did
         * on the instance that made them (text, hold-back, what was sent, the
         * role); then either that already ended the answer or the engine goes
         * on from prompt + k at sampler position k */
        if (k > g->max_tokens) {
            snprintf(msg, sizeof msg, "'weft.continue' holds %u tokens, more than max_tokens %u", k, g->max_tokens);
            reject(g, 400, "invalid_request_error", "weft", msg, NULL);
            return;
        }
        for (uint32_t i = 0; i < k; i++)
            if ((uint32_t)g->p.cont_ids[i] >= weft_model_hparams(s->m)->n_vocab) {
                snprintf(msg, sizeof msg, "'weft.continue' token %d is outside the vocabulary (%u)", g->p.cont_ids[i],
                         weft_model_hparams(s->m)->n_vocab);
                reject(g, 400, "invalid_request_error", "weft", msg, NULL);
                return;
            }
        struct weft_stop_step step = {0};
        for (uint32_t i = 0; i < k && step.stop == WEFT_STOP_NONE; i++) {
            if (weft_stop_push(&c0->st, g->p.cont_ids[i], &step) != WEFT_OK) {
                reject(g, 503, "server_error", NULL, "out of memory", NULL);
                return;
            }
            if (step.stop != WEFT_STOP_TOKEN) c0->n_gen++;
            if (step.stop == WEFT_STOP_NONE && (step.emit_len || g->p.logprobs)) c0->role_sent = true;
        }
        /* what the interrupted stream had sent: the same reading of the same text */
        weft_gen_stream_mark_sent(c0);
        if (step.stop != WEFT_STOP_NONE || c0->n_gen >= g->max_tokens) {
            g->n_prompt = (uint32_t)n_ids;
            weft_http_stream_begin(g->conn, 200, "text/event-stream", headers);
            finish_choice(c0, step.stop != WEFT_STOP_NONE ? "stop" : "length",
                          step.stop != WEFT_STOP_NONE ? METRIC_FINISH_STOP : METRIC_FINISH_LENGTH);
            return;
        }
        int32_t *all = realloc(g->ids, sizeof(int32_t) * (n_ids + k));
        if (!all) {
            reject(g, 503, "server_error", NULL, "out of memory", NULL);
            return;
        }
        memcpy(all + n_ids, g->p.cont_ids, sizeof(int32_t) * k);
        g->ids = all;
        s->metrics.continuations++;
    }

    g->n_submit_prompt = (uint32_t)n_ids + k;
    g->submit_k = k;
    /* n > 1: the first choice alone, the others once its prompt blocks are
     * in the prefix cache (its first token, on_token), so that they share
     * them instead of computing the prompt again side by side (sequences
     * admitted in one step find nothing cached: blocks are registered when
     * computed). A prompt without a full block has nothing to share. */
    bool stage = g->n_ch > 1 && g->p.n_prompts == 1 && g->n_submit_prompt > WEFT_KV_BLOCK_TOKENS &&
                 !s->cfg.engine.no_prefix_cache;
    uint32_t first = stage ? 1 : g->n_ch;
    for (uint32_t i = 0; i < first; i++) {
        weft_status st = submit_choice(g, i);
        if (st == WEFT_OK) continue;
        char emsg[256];
        snprintf(emsg, sizeof emsg, "%s", weft_last_error());
        const char *etype;
        int status = submit_refusal(g, st, emsg, &etype, msg, sizeof msg, extra, sizeof extra);
        abort_all(g);  /* choices already given to it */
        reject(g, status, etype, NULL, msg, extra[0] ? extra : NULL);
        return;
    }
    if (g->pd_push_url[0]) g->push = weft_server_pd_push_start(s, g->pd_push_url, g->pd_push_id, g->pd_auth, g->ids, (uint32_t)n_ids);
    if (g->n_submitted == g->n_ch) {
        free(g->ids);
        g->ids = NULL;
        free_extra_prompts(g);
    }
    s->metrics.prompt_tokens += n_all;
    if (g->streaming) weft_http_stream_begin(g->conn, 200, "text/event-stream", headers);
}

/* Bytes of s without the leading and trailing ASCII whitespace chat
 * templates trim from each message (core/chat.c's trim). */
static size_t trimmed_len(const char *s)
{
    size_t n = strlen(s), a = 0;
#define PY_SPACE(c) ((c) == ' ' || ((c) >= '\t' && (c) <= '\r') || ((c) >= 0x1c && (c) <= 0x1f))
    while (a < n && PY_SPACE((unsigned char)s[a])) a++;
    while (n > a && PY_SPACE((unsigned char)s[n - 1])) n--;
#undef PY_SPACE
    return n - a;
}

/* The fewest tokens a prompt can have: every token covers at most
 * max_piece_bytes of text (its vocabulary piece is at least as long as
 * what it matches: SentencePiece spaces and byte tokens are longer). */
static size_t min_prompt_tokens(const struct weft_server *s, const struct gen_params *p)
{
    if (p->prompt_ids) return p->n_prompt_ids;
    size_t bytes = 0;
    if (p->chat) {
        for (uint32_t i = 0; i < p->n_msgs; i++)
            if (p->msgs[i].content) bytes += trimmed_len(p->msgs[i].content);  /* NULL: a tool-calling turn */
    } else {
        bytes = strlen(p->prompt);
    }
    size_t per = s->max_piece_bytes ? s->max_piece_bytes : 1;
    return (bytes + per - 1) / per;
}

static bool parse_priority_header(const char *v, int32_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < -1000000 || x > 1000000) return false;
    *out = (int32_t)x;
    return true;
}

/* --mock's injected failures: true when g was answered (or left hanging). */
static bool mock_inject(struct gen_ctx *g)
{
    struct weft_server *s = g->srv;
    /* xorshift64*: reproducible from --mock-seed */
    uint64_t x = s->mock_rng ? s->mock_rng : (s->cfg.mock_seed ? s->cfg.mock_seed : 1);
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    s->mock_rng = x;
    double u = (double)((x * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0, acc = 0;
    int kind = -1;
    for (int k = 0; k < 5 && kind < 0; k++)
        if (u < (acc += s->cfg.mock_fail[k])) kind = k;
    if (kind < 0) return false;
    s->mock_injected[kind]++;
    switch (kind) {
    case WEFT_MOCK_FAIL_429:
        reject(g, 429, "rate_limit_error", NULL, "mock: injected rate limit", "Retry-After: 1\r\n");
        break;
    case WEFT_MOCK_FAIL_503:
        reject(g, 503, "server_busy", NULL, "mock: injected overload", "Retry-After: 1\r\n");
        break;
    case WEFT_MOCK_FAIL_500: reject(g, 500, "server_error", NULL, "mock: injected failure", NULL); break;
    case WEFT_MOCK_FAIL_NOKV:
        reject(g, 503, "server_busy", NULL, "mock: injected: no KV cache room for this request", "Retry-After: 1\r\n");
        break;
    default:  /* a hang: nothing until the client leaves, or shutdown cuts it */
        weft_http_conn_on_close(g->conn, on_client_gone, g);
        break;
    }
    return true;
}

void weft_server_generate(struct weft_server *s, struct http_conn *c, const struct http_request *req,
                          enum api_shape shape, bool chat, struct tenant_cfg *tenant)
{
    struct gen_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    g->srv = s;
    g->chat = chat || shape != SHAPE_CHAT;
    chat = g->chat;
    g->shape = shape;
    g->t0 = weft_server_now();
    g->created = (uint64_t)time(NULL);  /* when it came: every chunk of the answer says so */
    s->n_active++;
    g->refs = 1;  /* the HTTP side */
    g->conn = c;
    g->next = s->gens;
    if (s->gens) s->gens->prev = g;
    s->gens = g;
    const char *param = NULL;
    char msg[512];
    const char *body = req->body;
    size_t body_len = req->body_len;
    char *translated = NULL;
    if (shape != SHAPE_CHAT) {
        /* another API's request: the chat it asks for (server/shape.h) */
        translated = weft_shape_translate(shape, req->body, req->body_len, s->shapes, &g->sh, &param, msg, sizeof msg);
        if (!translated) {
            reject(g, 400, "invalid_request_error", param, msg, NULL);
            return;
        }
        body = translated;
        body_len = strlen(translated);
    }
    bool parsed = weft_gen_params_parse(body, body_len, chat, &g->p, &g->root, &param, msg, sizeof msg);
    free(translated);
    if (!parsed) {
        reject(g, 400, "invalid_request_error", param, msg, NULL);
        return;
    }
    for (uint32_t i = 0; i < g->p.n_stop_ids; i++)
        if ((uint32_t)g->p.stop_ids[i] >= weft_model_hparams(s->m)->n_vocab) {
            snprintf(msg, sizeof msg, "'stop_token_ids' names token %d, outside the vocabulary of %u", g->p.stop_ids[i],
                     weft_model_hparams(s->m)->n_vocab);
            reject(g, 400, "invalid_request_error", "stop_token_ids", msg, NULL);
            return;
        }
    if (g->p.min_tokens) {
        /* until min_tokens: no end-of-generation token, no stop token (core/sampler.h), no stop string */
        uint32_t nb = (g->p.ignore_eos ? 0 : s->n_eog) + g->p.n_stop_ids;
        g->ban = malloc(sizeof(int32_t) * (nb ? nb : 1));
        if (!g->ban) {
            reject(g, 503, "server_error", NULL, "out of memory", NULL);
            return;
        }
        uint32_t k = 0;
        for (uint32_t i = 0; !g->p.ignore_eos && i < s->n_eog; i++) g->ban[k++] = s->eog_ids[i];
        for (uint32_t i = 0; i < g->p.n_stop_ids; i++) g->ban[k++] = g->p.stop_ids[i];
        g->p.sp.min_tokens = g->p.min_tokens;
        g->p.sp.ban_id = g->ban;
        g->p.sp.n_ban = k;
    }
    if (g->p.suffix && s->rules.fim_pre < 0) {
        reject(g, 400, "invalid_request_error", "suffix",
               "'suffix' needs a model with fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id, "
               "<|fim_prefix|>, ...): this model has none", NULL);
        return;
    }
    g->n_ch = g->p.n * g->p.n_prompts;
    g->ch = calloc(g->n_ch, sizeof *g->ch);
    if (!g->ch) {
        reject(g, 503, "server_error", NULL, "out of memory", NULL);
        return;
    }
    for (uint32_t i = 0; i < g->n_ch; i++) g->ch[i] = (struct gen_choice){.g = g, .index = i};
    if (!(g->model = weft_server_model_name(s, g->p.model))) {
        snprintf(msg, sizeof msg, "the model '%.64s' does not exist; this server serves '%s'", g->p.model, s->model_id);
        reject(g, 404, "not_found_error", "model", msg, NULL);
        return;
    }
    if (s->cfg.engine.mock_prefill_tps > 0 && mock_inject(g)) return;
    /* who: the tenant, or for a trusted upstream (weft router) the end tenant
     * and priority it names; anyone else's x-weft-* headers are ignored */
    const struct tenant_cfg *cap = tenant;
    snprintf(g->tenant, sizeof g->tenant, "%s", tenant ? tenant->name : "");
    snprintf(g->end_tenant, sizeof g->end_tenant, "%s", tenant ? tenant->name : "");
    bool prio_from_header = false;
    if (tenant && tenant->trusted) {
        const char *ht = weft_http_header_get(req, "x-weft-tenant"), *hp = weft_http_header_get(req, "x-weft-priority");
        if (ht) {
            if (!weft_tenant_name_valid(ht)) {
                reject(g, 400, "invalid_request_error", NULL,
                       "the x-weft-tenant header must be a tenant name of 1 to 63 printable characters", NULL);
                return;
            }
            cap = weft_tenants_find(&s->tenants, ht);
            /* engine quotas belong to tenants configured here; others share the default */
            snprintf(g->end_tenant, sizeof g->end_tenant, "%s", cap ? cap->name : "");
        }
        if (hp) {
            if (!parse_priority_header(hp, &g->priority)) {
                reject(g, 400, "invalid_request_error", NULL,
                       "the x-weft-priority header must be an integer in -1000000..1000000", NULL);
                return;
            }
            prio_from_header = true;
        }
    }
    if (!prio_from_header) g->priority = weft_tenant_priority(cap, g->p.priority_given, g->p.priority);
    /* a prefill/decode hand-off (server/pd.h), from a fleet caller (weft
     * router): anyone else's is refused by name, and nothing goes out */
    const char *w = weft_http_header_get(req, "x-weft-pd"), *push = weft_http_header_get(req, "x-weft-pd-push");
    const char *why = NULL;
    if ((w || push) && !weft_server_fleet_caller(s, tenant, &why)) {
        snprintf(msg, sizeof msg, "%s: %s", push ? "x-weft-pd-push" : "x-weft-pd", why);
        s->metrics.rejected_auth++;
        reject(g, 403, "authentication_error", NULL, msg, NULL);
        return;
    }
    if (w || push) {
        if (w && !weft_server_pd_parse_wait(w, g->pd_id, &g->pd_wait_ms)) {
            reject(g, 400, "invalid_request_error", NULL, "the x-weft-pd header must be id=ID[;wait_ms=N]", NULL);
            return;
        }
        if (push && !weft_server_pd_parse_push(push, g->pd_push_url, sizeof g->pd_push_url, g->pd_push_id)) {
            reject(g, 400, "invalid_request_error", NULL, "the x-weft-pd-push header must be http://HOST:PORT;id=ID",
                   NULL);
            return;
        }
        /* the push authenticates as this instance, a fleet member: never with the client's key */
        if (push) {
            size_t n = sizeof s->fleet_cred + 32;
            if ((g->pd_auth = malloc(n))) snprintf(g->pd_auth, n, "Authorization: Bearer %s\r\n", s->fleet_cred);
        }
    }

    /* bounds that need no tokens, before any tokenizing */
    size_t lower = min_prompt_tokens(s, &g->p);
    if (lower >= s->n_ctx) {
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %u tokens. However, your prompt has at least %zu tokens.",
                 s->n_ctx, lower);
        reject(g, 400, "invalid_request_error", chat ? "messages" : "prompt", msg, NULL);
        return;
    }
    if (tenant && tenant->tpm > 0) {
        double need = (double)lower + (double)(g->p.max_tokens > 0 ? g->p.max_tokens : 1) * g->p.n;
        if (need > tenant->tpm) {
            s->metrics.rejected_rate++;
            snprintf(msg, sizeof msg,
                     "this request needs at least %.0f tokens (prompt + max_tokens), more than tenant '%s' may use "
                     "in a whole minute (tokens_per_minute %.0f): it can never be admitted; send fewer tokens",
                     need, tenant->name, tenant->tpm);
            reject(g, 429, "rate_limit_error", g->p.max_tokens > 0 ? "max_tokens" : NULL, msg, NULL);
            return;
        }
    }
    weft_http_conn_on_close(c, on_client_gone, g);
    if (g->p.prompt_ids && g->p.n_prompts == 1) {
        copy_prompt_ids(g);
        g->refs++;         /* as a tokenizing job's */
        tokenize_done(g);  /* the remote tier's fetch, then admission */
        return;
    }
    g->refs++;  /* the job's */
    weft_status st = weft_workers_submit(s->workers, tokenize_work, tokenize_done, g);
    if (st != WEFT_OK) {
        g->refs--;
        s->metrics.rejected_queue++;
        char extra[64];
        snprintf(extra, sizeof extra, "Retry-After: %d\r\n", predicted_drain_s(s));
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        reject(g, 503, st == WEFT_ERR_BUSY ? "server_busy" : "server_error", NULL, msg, extra);
    }
}

/* The drain deadline passed (or a second SIGTERM): every request still
 * open ends now, a stream with an error event, an unanswered request with
 * 503; the engine side is aborted. Loop thread. */
void weft_server_cut_all(struct weft_server *s, const char *why)
{
    for (struct gen_ctx *g = s->gens, *next; g; g = next) {
        next = g->next;
        g->refs++;  /* hold it while ending it */
        if (!g->finished && g->conn) {
            if (g->submitted) count_finish(g, METRIC_FINISH_SHUTDOWN);
            if (g->streaming && g->submitted) {
                weft_gen_send_sse_error(g, "server_error", why);
                g->finished = true;
                refund_unused(g, weft_server_now());
                weft_metrics_request(&s->metrics, weft_gen_ep_path(g), 200);
                struct http_conn *c = g->conn;
                g->conn = NULL;
                if (c) weft_http_stream_end(c);
                ctx_unref(g);  /* the HTTP side */
            } else {
                reject(g, 503, "server_error", NULL, why, "Retry-After: 5\r\n");
            }
        }
        abort_all(g);
        next = g->next;
        ctx_unref(g);
    }
}
