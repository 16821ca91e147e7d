/* POST /v1/embeddings: OpenAI's embeddings endpoint on the engine.
 *
 *   {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...],
 *    "model": ..., "encoding_format": "float" | "base64", "user": ...,
 *    "pooling": "mean" | "last"}                      (pooling: weft's own)
 *   -> {"object": "list", "data": [{"object": "embedding", "index": i,
 *       "embedding": [floats] | "base64 of little-endian float32"}],
 *       "model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}
 *
 * Each input is one engine embedding request (weft_request.embed): they
 * run in the engine's ordinary steps, batched with each other and with
 * generation, and each vector is the same as that input's alone. Texts are
 * tokenized on the worker pool (BOS as for a completion's prompt), never on
 * the loop. `dimensions` is refused unless it is the model's own size: the
 * model has no shortened embeddings (truncating would not be what it was
 * trained for). A request holds one place in the engine's waiting queue per
 * input: more inputs than the queue's bound are refused (400), and a queue
 * too full for all of them answers 503 with Retry-After, none computed.
 *
 * A job is held by up to three sides, counted in refs on the loop thread:
 * the HTTP response (until it is answered or the client leaves), the
 * tokenizing job (until its done callback) and the engine (from the first
 * submit until every submitted input's final event has come and the async
 * handle that carried the news is closed). The engine thread writes only
 * its own input's slot and vector, then counts `pending` down; whoever
 * takes it to zero hands the job back to the loop. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdatomic.h>

#include "core/tokenizer.h"
#include "server/api_embed.h"
#include "server/params.h"

#define EP "/v1/embeddings"
#define MAX_INPUTS 2048

struct emb_job;

struct emb_input {
    struct emb_job *job;
    const char *text;            /* a text input (in job->root), or NULL */
    size_t len;
    int32_t *ids;                /* its tokens (malloc'd) */
    size_t n;
    uint64_t id;                 /* the engine request, when submitted */
    bool submitted;
    enum weft_finish fin;        /* written by the engine thread */
    char *msg;                   /* ERROR: the engine's message (engine thread, malloc'd) */
};

struct emb_job {
    struct weft_server *s;
    struct http_conn *c;         /* NULL once answered or the client left */
    int refs;
    json_t *root;
    struct emb_input *in;
    uint32_t n_in, n_text;
    enum weft_embed_pooling pool;
    bool base64;
    const char *model;           /* the name the answer reports */
    char tenant[WEFT_TENANT_NAME_MAX];      /* whose buckets were charged */
    char end_tenant[WEFT_TENANT_NAME_MAX];  /* engine quotas */
    int32_t priority;
    double charged;              /* tokens taken from the tenant's bucket */
    atomic_bool gone;            /* the client left: a queued tokenizing job skips its work */
    weft_status tok_st;
    char tok_msg[256];
    uint32_t tok_bad;            /* the input that failed to tokenize */
    float *vecs;                 /* n_in x n_embd, written by the engine thread */
    uint32_t n_embd;
    uint64_t n_tokens;
    uv_async_t async;            /* engine thread -> loop: every input has ended */
    bool engine_side;            /* async initialised, the engine's reference held */
    atomic_uint pending;         /* submitted inputs not ended, + 1 while submitting */
};

static void job_unref(struct emb_job *j)
{
    if (--j->refs > 0) return;
    struct weft_server *s = j->s;
    for (uint32_t i = 0; i < j->n_in; i++) {
        free(j->in[i].ids);
        free(j->in[i].msg);
    }
    free(j->in);
    free(j->vecs);
    json_decref(j->root);
    free(j);
    if (--s->n_active == 0 && s->on_idle) s->on_idle(s);
}

/* Give back the tokens charged to the tenant (an answer that is not a success). */
static void refund(struct emb_job *j)
{
    if (j->charged <= 0) return;
    struct tenant_cfg *t = weft_tenants_find(&j->s->tenants, j->tenant);
    if (t) weft_tenant_refund(t, weft_server_now(), j->charged);
    j->charged = 0;
}

/* Answer an error and release the HTTP side. */
static void fail(struct emb_job *j, int status, const char *type, const char *param, const char *extra,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void fail(struct emb_job *j, int status, const char *type, const char *param, const char *extra,
                 const char *fmt, ...)
{
    refund(j);
    if (!j->c) return;
    char msg[512], body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = weft_http_error_body(body, sizeof body, type, param, msg);
    weft_metrics_request(&j->s->metrics, EP, status);
    weft_http_respond(j->c, status, "application/json", extra, body, n);
    j->c = NULL;
    atomic_store(&j->gone, true);
    job_unref(j);  /* the HTTP side */
}

static void on_client_gone(void *user)
{
    struct emb_job *j = user;
    if (!j->c) return;
    j->c = NULL;
    atomic_store(&j->gone, true);
    j->s->metrics.client_disconnects++;
    refund(j);
    if (j->engine_side)
        for (uint32_t i = 0; i < j->n_in; i++)
            if (j->in[i].submitted) weft_engine_abort(j->s->eng, j->in[i].id);  /* NOT_FOUND once ended */
    job_unref(j);  /* the HTTP side */
}

/* ---- the answer ---- */

static char *base64_floats(const float *v, uint32_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *out = malloc((nb + 2) / 3 * 4 + 1);
    if (!b || !out) {
        free(b);
        free(out);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {  /* little-endian float32, whatever the host */
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + k] = (unsigned char)(u >> (8 * k));
    }
    size_t o = 0;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
        out[o++] = tab[x >> 18 & 63];
        out[o++] = tab[x >> 12 & 63];
        out[o++] = i + 1 < nb ? tab[x >> 6 & 63] : '=';
        out[o++] = i + 2 < nb ? tab[x & 63] : '=';
    }
    out[o] = 0;
    free(b);
    return out;
}

static void respond_ok(struct emb_job *j)
{
    struct weft_server *s = j->s;
    json_t *data = json_array();
    bool ok = data != NULL;
    for (uint32_t i = 0; ok && i < j->n_in; i++) {
        const float *v = j->vecs + (size_t)i * j->n_embd;
        json_t *emb;
        if (j->base64) {
            char *b = base64_floats(v, j->n_embd);
            emb = b ? json_string(b) : NULL;
            free(b);
        } else {
            emb = json_array();
            for (uint32_t d = 0; emb && d < j->n_embd; d++)
                if (json_array_append_new(emb, json_real(v[d])) != 0) {
                    json_decref(emb);
                    emb = NULL;
                }
        }
        json_t *item = emb ? json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", (int)i, "embedding", emb)
                           : NULL;
        ok = item && json_array_append_new(data, item) == 0;
    }
    json_t *root = ok ? json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", j->model,
                                  "usage", "prompt_tokens", (json_int_t)j->n_tokens, "total_tokens",
                                  (json_int_t)j->n_tokens)
                      : NULL;
    if (!ok) json_decref(data);
    /* 17 significant digits: the float32's exact value as a double, so the
     * float answer equals the base64 one decoded (9 would round-trip the
     * float32 only after rounding to float32) */
    char *body = root ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    if (!body) {
        fail(j, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    s->metrics.prompt_tokens += j->n_tokens;
    weft_metrics_request(&s->metrics, EP, 200);
    weft_http_respond(j->c, 200, "application/json", NULL, body, strlen(body));
    free(body);
    j->c = NULL;
    job_unref(j);  /* the HTTP side */
}

static void on_async_closed(uv_handle_t *h) { job_unref(h->data); }  /* the engine's */

/* Every submitted input has ended (loop thread): answer, then let the
 * engine's reference go with the async handle. */
static void all_done(struct emb_job *j)
{
    (void)atomic_load(&j->pending);  /* pairs with the engine thread's count-down */
    if (j->c) {
        const struct emb_input *err = NULL, *abort = NULL;
        for (uint32_t i = 0; i < j->n_in; i++) {
            if (j->in[i].fin == WEFT_FINISH_ERROR && !err) err = &j->in[i];
            if (j->in[i].fin == WEFT_FINISH_ABORT && !abort) abort = &j->in[i];
        }
        if (err) fail(j, 500, "server_error", NULL, NULL, "embedding failed: %s", err->msg ? err->msg : "");
        else if (abort)
            fail(j, 503, "server_error", NULL, "Retry-After: 5\r\n",
                 "the request was aborted (the server is shutting down)");
        else respond_ok(j);
    }
    uv_close((uv_handle_t *)&j->async, on_async_closed);
}

static void on_async(uv_async_t *a) { all_done(a->data); }

/* Engine thread: one input's only event (the final one). */
static void on_event(void *user, const struct weft_event *ev)
{
    struct emb_input *in = user;
    struct emb_job *j = in->job;
    if (ev->finish == WEFT_FINISH_NONE) return;
    in->fin = ev->finish;
    if (ev->finish == WEFT_FINISH_STOP && ev->embedding && ev->n_embedding == j->n_embd)
        memcpy(j->vecs + (size_t)(in - j->in) * j->n_embd, ev->embedding, sizeof(float) * j->n_embd);
    else if (ev->finish == WEFT_FINISH_STOP)
        in->fin = WEFT_FINISH_ERROR;  /* cannot happen: the engine sends the vector with STOP */
    if (ev->finish == WEFT_FINISH_ERROR && ev->message) in->msg = strdup(ev->message);
    if (atomic_fetch_sub(&j->pending, 1) != 1) return;
    pthread_mutex_lock(&j->s->qmu);
    bool closing = j->s->closing;  /* the loop is gone (server freed with requests in flight) */
    pthread_mutex_unlock(&j->s->qmu);
    if (!closing) uv_async_send(&j->async);
}

/* ---- submitting ---- */

static void submit_all(struct emb_job *j)
{
    struct weft_server *s = j->s;
    uint32_t n_ctx = weft_engine_n_ctx(s->eng);
    if (j->tok_st != WEFT_OK) {
        if (j->tok_st == WEFT_ERR_NOMEM) fail(j, 503, "server_error", NULL, NULL, "out of memory");
        else fail(j, 400, "invalid_request_error", "input", NULL, "input %u: %s", j->tok_bad, j->tok_msg);
        return;
    }
    j->n_tokens = 0;
    for (uint32_t i = 0; i < j->n_in; i++) {
        size_t n = j->in[i].n;
        if (n == 0) {
            fail(j, 400, "invalid_request_error", "input", NULL, "input %u is empty after tokenization", i);
            return;
        }
        if (n > n_ctx) {
            fail(j, 400, "invalid_request_error", "input", NULL,
                 "This model's maximum context length is %u tokens. However, input %u has %zu tokens.", n_ctx, i, n);
            return;
        }
        j->n_tokens += n;
    }
    struct tenant_cfg *tenant = j->tenant[0] ? weft_tenants_find(&s->tenants, j->tenant) : NULL;
    if (tenant) {
        double retry;
        if (!weft_tenant_admit(tenant, weft_server_now(), (double)j->n_tokens, &retry)) {
            s->metrics.rejected_rate++;
            char extra[64];
            if (isinf(retry)) {
                fail(j, 429, "rate_limit_error", "input", NULL,
                     "this request has %llu tokens, more than tenant '%s' may use in a whole minute "
                     "(tokens_per_minute %.0f): it can never be admitted; send fewer inputs",
                     (unsigned long long)j->n_tokens, tenant->name, tenant->tpm);
                return;
            }
            int r = (int)(retry + 0.999);
            snprintf(extra, sizeof extra, "Retry-After: %d\r\n", r > 0 ? r : 1);
            fail(j, 429, "rate_limit_error", NULL, extra, "rate limit of tenant '%s' reached; retry in %.1f s",
                 tenant->name, retry);
            return;
        }
        if (tenant->tpm > 0) j->charged = (double)j->n_tokens;
    }
    j->vecs = malloc(sizeof(float) * j->n_embd * j->n_in);
    if (!j->vecs || uv_async_init(s->loop, &j->async, on_async) != 0) {
        fail(j, 503, "server_error", NULL, NULL, "out of memory");
        return;
    }
    j->async.data = j;
    j->engine_side = true;
    j->refs++;  /* the engine's, released when the async handle has closed */
    atomic_store(&j->pending, j->n_in + 1);
    uint32_t k = 0;
    weft_status st = WEFT_OK;
    char msg[256] = "";
    for (; k < j->n_in; k++) {
        struct emb_input *in = &j->in[k];
        struct weft_request rq = {.prompt = in->ids, .n_prompt = (uint32_t)in->n, .priority = j->priority,
                                  .tenant = j->end_tenant, .cb = on_event, .user = in, .embed = j->pool};
        if ((st = weft_engine_submit(s->eng, &rq, &in->id)) != WEFT_OK) {
            snprintf(msg, sizeof msg, "%s", weft_last_error());
            break;
        }
        in->submitted = true;
    }
    if (k < j->n_in) {
        /* refused: the ones before it go too; the answer says why now */
        for (uint32_t i = 0; i < k; i++) weft_engine_abort(s->eng, j->in[i].id);
        atomic_fetch_sub(&j->pending, j->n_in - k);
        if (st == WEFT_ERR_BUSY) {
            s->metrics.rejected_queue++;
            fail(j, 503, "server_busy", NULL, "Retry-After: 1\r\n", "%s", msg);
        } else if (st == WEFT_ERR_NO_ROOM) {
            s->metrics.rejected_no_room++;
            fail(j, 503, "server_busy", NULL, "x-weft-reject: no_kv_room\r\n", "input %u: %s", k, msg);
        } else {
            fail(j, st == WEFT_ERR_NOMEM ? 503 : 400, st == WEFT_ERR_NOMEM ? "server_error" : "invalid_request_error",
                 "input", NULL, "input %u: %s", k, msg);
        }
    }
    if (atomic_fetch_sub(&j->pending, 1) == 1) all_done(j);  /* every input ended already (or none went) */
}

/* Worker thread: tokenize the text inputs (reads only the job's inputs). */
static void tokenize_work(void *arg)
{
    struct emb_job *j = arg;
    const struct weft_tokenizer *tok = weft_model_tokenizer(j->s->m);
    for (uint32_t i = 0; i < j->n_in && j->tok_st == WEFT_OK; i++) {
        if (atomic_load(&j->gone)) return;
        struct emb_input *in = &j->in[i];
        if (!in->text) continue;
        atomic_fetch_add(&j->s->tokenized_on_worker, 1);
        j->tok_st = weft_tokenize(tok, in->text, in->len, true, true, &in->ids, &in->n);
        if (j->tok_st != WEFT_OK) {
            j->tok_bad = i;
            snprintf(j->tok_msg, sizeof j->tok_msg, "%s", weft_last_error());
        }
    }
}

static void tokenize_done(void *arg)
{
    struct emb_job *j = arg;
    if (j->c) submit_all(j);
    job_unref(j);  /* the tokenizing job's */
}

/* ---- parsing ---- */

/* One token-id input from a JSON array (ids checked against the vocabulary). */
static bool ids_from(struct emb_job *j, uint32_t i, const json_t *arr, int32_t n_vocab, char *msg, size_t cap)
{
    size_t n = json_array_size(arr);
    struct emb_input *in = &j->in[i];
    if (n == 0) {
        snprintf(msg, cap, "input %u is empty", i);
        return false;
    }
    if (!(in->ids = malloc(sizeof(int32_t) * n))) {
        snprintf(msg, cap, "out of memory");
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        const json_t *v = json_array_get(arr, k);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || x < 0 || x >= n_vocab) {
            snprintf(msg, cap, "input %u: token %zu must be a token id in 0..%d", i, k, n_vocab - 1);
            return false;
        }
        in->ids[k] = (int32_t)x;
    }
    in->n = n;
    return true;
}

/* `input` in any of its four forms into j->in; false with msg. */
static bool parse_input(struct emb_job *j, const json_t *input, char *msg, size_t cap)
{
    int32_t nv = weft_tokenizer_n_vocab(weft_model_tokenizer(j->s->m));
    bool one_text = json_is_string(input);
    size_t n = one_text ? 1 : json_array_size(input);
    if (!one_text && !json_is_array(input)) {
        snprintf(msg, cap, "'input' must be a string, an array of strings, an array of token ids or an array of "
                           "arrays of token ids");
        return false;
    }
    if (n == 0) {
        snprintf(msg, cap, "'input' is empty");
        return false;
    }
    const json_t *first = one_text ? input : json_array_get(input, 0);
    bool ids_one = !one_text && json_is_integer(first);  /* [id, ...]: one input */
    if (ids_one) n = 1;
    /* each input takes a place in the engine's waiting queue */
    size_t most = j->s->max_waiting && j->s->max_waiting < MAX_INPUTS ? j->s->max_waiting : MAX_INPUTS;
    if (n > most) {
        snprintf(msg, cap, "'input' has %zu items, at most %zu are allowed here (one per place in the queue)", n,
                 most);
        return false;
    }
    if (!(j->in = calloc(n, sizeof *j->in))) {
        snprintf(msg, cap, "out of memory");
        return false;
    }
    j->n_in = (uint32_t)n;
    for (uint32_t i = 0; i < n; i++) j->in[i].job = j;
    if (ids_one) return ids_from(j, 0, input, nv, msg, cap);
    for (uint32_t i = 0; i < n; i++) {
        const json_t *v = one_text ? input : json_array_get(input, i);
        if (json_is_string(v) && (one_text || json_is_string(first))) {
            if (json_string_length(v) == 0) {
                snprintf(msg, cap, "input %u is an empty string", i);
                return false;
            }
            j->in[i].text = json_string_value(v);
            j->in[i].len = json_string_length(v);
            j->n_text++;
        } else if (json_is_array(v) && json_is_array(first)) {
            if (!ids_from(j, i, v, nv, msg, cap)) return false;
        } else {
            snprintf(msg, cap, "input %u: the items of 'input' must all be strings, all token ids or all arrays of "
                               "token ids", i);
            return false;
        }
    }
    return true;
}

static bool parse_priority(const char *v, int32_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < -1000000 || x > 1000000) return false;
    *out = (int32_t)x;
    return true;
}

void weft_server_embeddings(struct weft_server *s, struct http_conn *c, const struct http_request *req,
                       struct tenant_cfg *tenant)
{
    struct emb_job *j = calloc(1, sizeof *j);
    if (!j) {
        weft_metrics_request(&s->metrics, EP, 503);
        weft_http_respond_error(c, 503, "server_error", NULL, "out of memory");
        return;
    }
    j->s = s;
    j->c = c;
    j->refs = 1;  /* the HTTP side */
    j->n_embd = weft_model_hparams(s->m)->n_embd;
    j->pool = WEFT_EMBED_MEAN;
    s->n_active++;
    if (s->draining) {
        fail(j, 503, "server_busy", NULL, "Retry-After: 5\r\n", "the server is shutting down");
        return;
    }
    json_error_t jerr;
    if (weft_json_depth_exceeds(req->body, req->body_len, WEFT_MAX_JSON_DEPTH)) {
        fail(j, 400, "invalid_request_error", NULL, NULL, "JSON nested too deeply");
        return;
    }
    j->root = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(j->root)) {
        fail(j, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object%s%s",
             j->root ? "" : ": ", j->root ? "" : jerr.text);
        return;
    }
    const json_t *model = json_object_get(j->root, "model"), *fmt = json_object_get(j->root, "encoding_format");
    const json_t *dims = json_object_get(j->root, "dimensions"), *user = json_object_get(j->root, "user");
    const json_t *pool = json_object_get(j->root, "pooling"), *input = json_object_get(j->root, "input");
    if (model && !json_is_null(model) && !json_is_string(model)) {
        fail(j, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
        return;
    }
    const char *asked = json_is_string(model) ? json_string_value(model) : NULL;
    if (!(j->model = weft_server_model_name(s, asked))) {
        fail(j, 404, "not_found_error", "model", NULL, "the model '%.64s' does not exist; this server serves '%s'",
             asked, s->model_id);
        return;
    }
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        if (strcmp(f, "float") && strcmp(f, "base64")) {
            fail(j, 400, "invalid_request_error", "encoding_format", NULL,
                 "'encoding_format' must be \"float\" or \"base64\"");
            return;
        }
        j->base64 = !strcmp(f, "base64");
    }
    if (dims && !json_is_null(dims) && !(json_is_integer(dims) && json_integer_value(dims) == (json_int_t)j->n_embd)) {
        fail(j, 400, "invalid_request_error", "dimensions", NULL,
             "'dimensions' is not supported: this model's embeddings have %u dimensions and cannot be shortened",
             j->n_embd);
        return;
    }
    if (user && !json_is_null(user) && !json_is_string(user)) {
        fail(j, 400, "invalid_request_error", "user", NULL, "'user' must be a string");
        return;
    }
    if (pool && !json_is_null(pool)) {
        const char *p = json_is_string(pool) ? json_string_value(pool) : "";
        if (!strcmp(p, "last")) j->pool = WEFT_EMBED_LAST;
        else if (strcmp(p, "mean")) {
            fail(j, 400, "invalid_request_error", "pooling", NULL, "'pooling' must be \"mean\" or \"last\"");
            return;
        }
    }
    if (!input) {
        fail(j, 400, "invalid_request_error", "input", NULL, "'input' is required");
        return;
    }
    char msg[256];
    if (!parse_input(j, input, msg, sizeof msg)) {
        fail(j, 400, "invalid_request_error", "input", NULL, "%s", msg);
        return;
    }
    /* who: the tenant, or for a trusted upstream (weft router) the end
     * tenant and priority it names */
    const struct tenant_cfg *cap = tenant;
    snprintf(j->tenant, sizeof j->tenant, "%s", tenant ? tenant->name : "");
    snprintf(j->end_tenant, sizeof j->end_tenant, "%s", tenant ? tenant->name : "");
    bool prio_given = false;
    if (tenant && tenant->trusted) {
        const char *ht = weft_http_header_get(req, "x-weft-tenant"), *hp = weft_http_header_get(req, "x-weft-priority");
        if (ht && !weft_tenant_name_valid(ht)) {
            fail(j, 400, "invalid_request_error", NULL, NULL,
                 "the x-weft-tenant header must be a tenant name of 1 to 63 printable characters");
            return;
        }
        if (ht) {
            cap = weft_tenants_find(&s->tenants, ht);
            snprintf(j->end_tenant, sizeof j->end_tenant, "%s", cap ? cap->name : "");
        }
        if (hp && !parse_priority(hp, &j->priority)) {
            fail(j, 400, "invalid_request_error", NULL, NULL,
                 "the x-weft-priority header must be an integer in -1000000..1000000");
            return;
        }
        prio_given = hp != NULL;
    }
    if (!prio_given) j->priority = weft_tenant_priority(cap, false, 0);
    weft_http_conn_on_close(c, on_client_gone, j);
    if (!j->n_text) {  /* token ids only: checked already, nothing to tokenize */
        submit_all(j);
        return;
    }
    j->refs++;  /* the tokenizing job's */
    weft_status st = weft_workers_submit(s->workers, tokenize_work, tokenize_done, j);
    if (st != WEFT_OK) {
        j->refs--;
        s->metrics.rejected_queue++;
        fail(j, 503, st == WEFT_ERR_BUSY ? "server_busy" : "server_error", NULL, "Retry-After: 1\r\n", "%s",
             weft_last_error());
    }
}
