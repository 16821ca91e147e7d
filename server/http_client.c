/* HTTP/1.1 client (http_client.h). */
/* http-parser names an enum http_method too (see http_internal.h) */
#define http_method hp_method
#include <http_parser.h>
#undef http_method

#include "server/http_client.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADERS 64
#define MAX_HEAD_BYTES (64u << 10)
#define DEF_MAX_IDLE 8
#define DEF_IDLE_MS 20000

struct hcl_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t creq;
    struct hcl_pool *pool;
    struct hcl_req *req;           /* the request in progress, NULL when idle */
    struct hcl_conn *next_idle;
    http_parser parser;
    int handles;                   /* open libuv handles; freed at 0 */
    bool connected, closing, reading;
    uint32_t uses;                 /* requests sent on it */
    size_t got;                    /* answer bytes of the current request */
    /* bytes read but not yet parsed: a pause from on_body stops the parser mid-read;
       they are parsed on resume, before reading starts again */
    char *held;
    size_t held_len;
    /* the answer's head */
    char *hb;
    size_t hb_len, hb_cap;
    uint32_t off[2 * MAX_HEADERS]; /* name, value offsets into hb */
    uint32_t nh;
    bool in_value, head_done, msg_done, keep_alive, too_big;
};

struct hcl_req {
    struct hcl_pool *pool;
    struct hcl_conn *c;
    struct hcl_callbacks cb;
    void *user;
    char *wire;
    size_t wire_len;
    uint32_t timeout_ms;
    bool cancelled, paused, retried, in_cb;
    struct hcl_req *prev, *next;   /* the pool's active list */
};

struct hcl_pool {
    uv_loop_t *loop;
    struct sockaddr_storage addr;
    char *host;
    uint32_t max_idle, idle_ms;
    struct hcl_conn *idle;
    uint32_t n_idle, n_conns, n_active;
    struct hcl_req *active;
    bool freed;
    uint64_t connects;
};

struct wr {
    uv_write_t w;
    char data[];
};

static void conn_close(struct hcl_conn *c);
static void conn_attach(struct hcl_conn *c, struct hcl_req *r);
static int conn_open(struct hcl_pool *p, struct hcl_req *r);

static void pool_maybe_free(struct hcl_pool *p)
{
    if (p->freed && p->n_conns == 0) {
        free(p->host);
        free(p);
    }
}

static void on_handle_closed(uv_handle_t *h)
{
    struct hcl_conn *c = h->data;
    if (--c->handles > 0) return;
    struct hcl_pool *p = c->pool;
    free(c->hb);
    free(c->held);
    free(c);
    p->n_conns--;
    pool_maybe_free(p);
}

static void idle_remove(struct hcl_conn *c)
{
    struct hcl_pool *p = c->pool;
    for (struct hcl_conn **q = &p->idle; *q; q = &(*q)->next_idle)
        if (*q == c) {
            *q = c->next_idle;
            c->next_idle = NULL;
            p->n_idle--;
            return;
        }
}

static void conn_close(struct hcl_conn *c)
{
    if (c->closing) return;
    c->closing = true;
    if (!c->req) idle_remove(c);
    c->req = NULL;
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

/* A cancelled request's connection ends with a reset, not a FIN: a server
 * answers a half-closed client (weft serve does), so only a reset tells it
 * the client left and the work can stop at once. */
static void conn_abort(struct hcl_conn *c)
{
    if (c->closing) return;
    if (!c->connected || uv_tcp_close_reset(&c->tcp, on_handle_closed) != 0) {
        conn_close(c);
        return;
    }
    c->closing = true;
    if (!c->req) idle_remove(c);
    c->req = NULL;
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void active_unlink(struct hcl_req *r)
{
    struct hcl_pool *p = r->pool;
    if (r->prev) r->prev->next = r->next;
    else if (p->active == r) p->active = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = NULL;
    p->n_active--;
}

static void req_free(struct hcl_req *r)
{
    active_unlink(r);
    free(r->wire);
    free(r);
}

/* the request ends with err (0: complete); its connection is already detached */
static void req_end(struct hcl_req *r, int err)
{
    if (!r->cancelled && r->cb.on_done) r->cb.on_done(r->user, err);
    req_free(r);
}

static void conn_fail(struct hcl_conn *c, int err)
{
    struct hcl_req *r = c->req;
    c->req = NULL;
    if (r) conn_abort(c);  /* a request given up: the server must see it leave */
    else conn_close(c);
    if (!r) return;
    r->c = NULL;
    /* a reused connection the server had closed: once more on a fresh one */
    if (c->uses > 1 && c->got == 0 && !r->retried && !r->cancelled && err != HCL_E_TIMEOUT &&
        !r->pool->freed) {
        r->retried = true;
        if (conn_open(r->pool, r) == 0) return;
    }
    req_end(r, err);
}

static void timer_arm(struct hcl_conn *c, uint64_t ms);

static void on_timer(uv_timer_t *t)
{
    struct hcl_conn *c = t->data;
    if (c->closing) return;
    if (!c->req) {
        conn_close(c);  /* idle too long */
        return;
    }
    conn_fail(c, HCL_E_TIMEOUT);
}

static void timer_arm(struct hcl_conn *c, uint64_t ms)
{
    if (ms) uv_timer_start(&c->timer, on_timer, ms, 0);
    else uv_timer_stop(&c->timer);
}

/* ---- the answer ---- */

static bool hb_add(struct hcl_conn *c, const char *at, size_t len)
{
    if (c->hb_len + len + 1 > MAX_HEAD_BYTES) {
        c->too_big = true;
        return false;
    }
    if (c->hb_len + len + 1 > c->hb_cap) {
        size_t cap = c->hb_cap ? c->hb_cap : 1024;
        while (cap < c->hb_len + len + 1) cap *= 2;
        char *n = realloc(c->hb, cap);
        if (!n) return false;
        c->hb = n;
        c->hb_cap = cap;
    }
    memcpy(c->hb + c->hb_len, at, len);
    c->hb_len += len;
    return true;
}

static int on_header_field(http_parser *hp, const char *at, size_t len)
{
    struct hcl_conn *c = hp->data;
    if (c->in_value || c->nh == 0) {
        if (c->nh) {
            if (!hb_add(c, "", 1)) return 1;  /* end the value */
            c->hb[c->hb_len - 1] = 0;
        }
        if (c->nh == MAX_HEADERS) {
            c->too_big = true;
            return 1;
        }
        c->off[2 * c->nh] = (uint32_t)c->hb_len;
        c->nh++;
        c->in_value = false;
    }
    size_t from = c->hb_len;
    if (!hb_add(c, at, len)) return 1;
    for (size_t i = from; i < c->hb_len; i++) c->hb[i] = (char)tolower((unsigned char)c->hb[i]);
    return 0;
}

static int on_header_value(http_parser *hp, const char *at, size_t len)
{
    struct hcl_conn *c = hp->data;
    if (!c->in_value) {
        if (!hb_add(c, "", 1)) return 1;  /* end the name */
        c->hb[c->hb_len - 1] = 0;
        c->off[2 * c->nh - 1] = (uint32_t)c->hb_len;
        c->in_value = true;
    }
    return hb_add(c, at, len) ? 0 : 1;
}

static int on_headers_complete(http_parser *hp)
{
    struct hcl_conn *c = hp->data;
    if (c->nh && !c->in_value) {  /* a name without a value */
        if (!hb_add(c, "", 1)) return -1;
        c->hb[c->hb_len - 1] = 0;
        c->off[2 * c->nh - 1] = (uint32_t)c->hb_len;
    }
    if (!hb_add(c, "", 1)) return -1;
    c->hb[c->hb_len - 1] = 0;
    c->head_done = true;
    struct hcl_req *r = c->req;
    if (!r || r->cancelled || !r->cb.on_head) return 0;
    struct http_header h[MAX_HEADERS];
    for (uint32_t i = 0; i < c->nh; i++) h[i] = (struct http_header){c->hb + c->off[2 * i], c->hb + c->off[2 * i + 1]};
    r->in_cb = true;
    r->cb.on_head(r->user, hp->status_code, h, c->nh);
    r->in_cb = false;
    return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    struct hcl_conn *c = hp->data;
    struct hcl_req *r = c->req;
    if (!r || r->cancelled) return 1;
    if (r->cb.on_body) {
        r->in_cb = true;
        r->cb.on_body(r->user, at, len);
        r->in_cb = false;
    }
    if (r->cancelled) return 1;
    /* paused by the callback: nothing more reaches it until resume, even from this read */
    if (r->paused) http_parser_pause(hp, 1);
    return 0;
}

static int on_message_complete(http_parser *hp)
{
    struct hcl_conn *c = hp->data;
    c->msg_done = true;
    c->keep_alive = http_should_keep_alive(hp);
    http_parser_pause(hp, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void parser_reset(struct hcl_conn *c)
{
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    c->hb_len = 0;
    c->nh = 0;
    c->got = 0;
    c->held_len = 0;
    c->in_value = c->head_done = c->msg_done = c->keep_alive = c->too_big = false;
}

/* the answer is complete: the connection goes idle (or closes), then on_done */
static void conn_finish(struct hcl_conn *c)
{
    struct hcl_req *r = c->req;
    struct hcl_pool *p = c->pool;
    c->req = NULL;
    r->c = NULL;
    if (c->keep_alive && !p->freed && p->n_idle < p->max_idle && !r->paused) {
        parser_reset(c);
        c->next_idle = p->idle;
        p->idle = c;
        p->n_idle++;
        timer_arm(c, p->idle_ms);
    } else {
        conn_close(c);
    }
    req_end(r, 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    static char slab[64 << 10];  /* one loop thread; on_read consumes it at once */
    *buf = uv_buf_init(slab, sizeof slab);
}

/* parse len answer bytes of the request in progress; what a pause leaves unparsed is held */
static void conn_feed(struct hcl_conn *c, const char *data, size_t len)
{
    struct hcl_req *r = c->req;
    size_t n = http_parser_execute(&c->parser, &settings, data, len);
    if (r->cancelled) {
        c->req = NULL;
        r->c = NULL;
        conn_abort(c);
        req_free(r);
        return;
    }
    if (c->msg_done) {
        conn_finish(c);
        return;
    }
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_PAUSED && r->paused) {
        if (n > len) n = len;
        size_t rest = len - n;
        if (rest && data + n != c->held) {
            if (data >= c->held && data < c->held + c->held_len) {
                memmove(c->held, data + n, rest);  /* a replay paused again */
            } else {
                char *h = realloc(c->held, rest);
                if (!h) {
                    conn_fail(c, UV_ENOMEM);
                    return;
                }
                c->held = h;
                memcpy(c->held, data + n, rest);
            }
        }
        c->held_len = rest;
        return;
    }
    if (e != HPE_OK) conn_fail(c, HCL_E_PROTOCOL);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct hcl_conn *c = st->data;
    if (c->closing) return;
    struct hcl_req *r = c->req;
    if (!r) {
        conn_close(c);  /* an idle connection: the server closed it, or sent what nobody asked for */
        return;
    }
    if (nread == 0) return;
    if (nread < 0) {
        if (nread == UV_EOF && c->head_done) {
            /* an answer delimited by the close */
            http_parser_execute(&c->parser, &settings, NULL, 0);
            if (c->msg_done) {
                c->keep_alive = false;
                conn_finish(c);
                return;
            }
        }
        conn_fail(c, (int)nread);
        return;
    }
    c->got += (size_t)nread;
    if (r->timeout_ms && !r->paused) timer_arm(c, r->timeout_ms);
    conn_feed(c, buf->base, (size_t)nread);
}

/* ---- sending ---- */

static void on_write(uv_write_t *w, int status)
{
    struct hcl_conn *c = w->data;
    free(w);
    if (status < 0 && !c->closing) conn_fail(c, status);
}

static void conn_send(struct hcl_conn *c)
{
    struct hcl_req *r = c->req;
    struct wr *w = malloc(sizeof *w + r->wire_len);
    if (!w) {
        conn_fail(c, UV_ENOMEM);
        return;
    }
    memcpy(w->data, r->wire, r->wire_len);
    w->w.data = c;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)r->wire_len);
    int rc = uv_write(&w->w, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc < 0) {
        free(w);
        conn_fail(c, rc);
        return;
    }
    c->uses++;
    if (!c->reading && !r->paused) {
        c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
    }
}

static void conn_attach(struct hcl_conn *c, struct hcl_req *r)
{
    c->req = r;
    r->c = c;
    parser_reset(c);
    timer_arm(c, r->paused ? 0 : r->timeout_ms);
    if (c->connected) conn_send(c);
}

static void on_connect(uv_connect_t *cr, int status)
{
    struct hcl_conn *c = cr->data;
    if (c->closing) return;
    if (status < 0) {
        c->uses = 0;  /* never reused: no retry */
        conn_fail(c, status);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->connected = true;
    if (c->req) conn_send(c);
}

static int conn_open(struct hcl_pool *p, struct hcl_req *r)
{
    struct hcl_conn *c = calloc(1, sizeof *c);
    if (!c) return UV_ENOMEM;
    c->pool = p;
    int rc = uv_tcp_init(p->loop, &c->tcp);
    if (rc < 0) {
        free(c);
        return rc;
    }
    uv_timer_init(p->loop, &c->timer);
    c->tcp.data = c->timer.data = c->creq.data = c;
    c->handles = 2;
    p->n_conns++;
    c->req = r;
    r->c = c;
    parser_reset(c);
    rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&p->addr, on_connect);
    if (rc < 0) {
        c->req = NULL;
        r->c = NULL;
        conn_close(c);
        return rc;
    }
    p->connects++;
    timer_arm(c, r->timeout_ms);
    return 0;
}

int weft_hcl_request(struct hcl_pool *p, const struct hcl_opts *o, const struct hcl_callbacks *cb, void *user,
                struct hcl_req **out)
{
    if (out) *out = NULL;
    if (p->freed) return HCL_E_CLOSED;
    struct hcl_req *r = calloc(1, sizeof *r);
    if (!r) return UV_ENOMEM;
    size_t hl = o->headers ? strlen(o->headers) : 0;
    size_t cap = strlen(o->method) + strlen(o->path) + strlen(p->host) + hl + o->body_len + 128;
    r->wire = malloc(cap);
    if (!r->wire) {
        free(r);
        return UV_ENOMEM;
    }
    int k = snprintf(r->wire, cap, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %zu\r\n%s\r\n", o->method, o->path,
                     p->host, o->body_len, o->headers ? o->headers : "");
    if (o->body_len) memcpy(r->wire + k, o->body, o->body_len);
    r->wire_len = (size_t)k + o->body_len;
    r->pool = p;
    r->cb = *cb;
    r->user = user;
    r->timeout_ms = o->timeout_ms;
    r->next = p->active;
    if (p->active) p->active->prev = r;
    p->active = r;
    p->n_active++;
    if (p->idle) {
        struct hcl_conn *c = p->idle;
        p->idle = c->next_idle;
        c->next_idle = NULL;
        p->n_idle--;
        conn_attach(c, r);
    } else {
        int rc = conn_open(p, r);
        if (rc < 0) {
            req_free(r);
            return rc;
        }
    }
    if (out) *out = r;
    return 0;
}

void weft_hcl_cancel(struct hcl_req *r)
{
    if (!r || r->cancelled) return;
    r->cancelled = true;
    if (r->in_cb) return;  /* on_read finishes it */
    struct hcl_conn *c = r->c;
    if (c) {
        c->req = NULL;
        r->c = NULL;
        conn_abort(c);
    }
    req_free(r);
}

void weft_hcl_pause(struct hcl_req *r)
{
    if (!r || r->paused) return;
    r->paused = true;
    struct hcl_conn *c = r->c;
    if (c && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (c && c->connected) timer_arm(c, 0);
}

/* resume's deferred half: parse the bytes a pause held back, then read again */
static void on_replay(uv_timer_t *t)
{
    struct hcl_conn *c = t->data;
    struct hcl_req *r = c->req;
    if (c->closing || !r || r->paused) return;
    timer_arm(c, r->timeout_ms);
    http_parser_pause(&c->parser, 0);
    if (c->held_len) {
        conn_feed(c, c->held, c->held_len);
        if (c->closing || c->req != r || r->paused) return;  /* ended, failed or paused again */
        c->held_len = 0;
    }
    if (c->connected && !c->reading) c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
}

void weft_hcl_resume(struct hcl_req *r)
{
    if (!r || !r->paused) return;
    r->paused = false;
    struct hcl_conn *c = r->c;
    if (!c || c->closing) return;
    if (HTTP_PARSER_ERRNO(&c->parser) == HPE_PAUSED && !c->msg_done) {
        /* the parser stopped mid-read: parse the held bytes from the loop, not inside
           the caller's stack (they may end the request) */
        uv_timer_start(&c->timer, on_replay, 0, 0);
        return;
    }
    timer_arm(c, r->timeout_ms);
    if (c->connected && !c->reading) c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
}

int weft_hcl_pool_create(uv_loop_t *loop, const struct sockaddr *addr, const char *host, uint32_t max_idle,
                    uint32_t idle_ms, struct hcl_pool **out)
{
    *out = NULL;
    struct hcl_pool *p = calloc(1, sizeof *p);
    if (!p) return UV_ENOMEM;
    p->loop = loop;
    memcpy(&p->addr, addr, addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    p->host = strdup(host ? host : "localhost");
    if (!p->host) {
        free(p);
        return UV_ENOMEM;
    }
    p->max_idle = max_idle ? max_idle : DEF_MAX_IDLE;
    p->idle_ms = idle_ms ? idle_ms : DEF_IDLE_MS;
    *out = p;
    return 0;
}

void weft_hcl_pool_free(struct hcl_pool *p)
{
    if (!p || p->freed) return;
    p->freed = true;
    while (p->idle) conn_close(p->idle);
    while (p->active) {
        struct hcl_req *r = p->active;
        struct hcl_conn *c = r->c;
        if (c) {
            c->req = NULL;
            r->c = NULL;
            conn_close(c);
        }
        bool cancelled = r->cancelled;
        r->cancelled = true;  /* no retry, no further callbacks */
        if (!cancelled && r->cb.on_done) r->cb.on_done(r->user, HCL_E_CLOSED);
        req_free(r);
    }
    pool_maybe_free(p);
}

uint32_t weft_hcl_pool_active(const struct hcl_pool *p) { return p->n_active; }
uint32_t weft_hcl_pool_idle(const struct hcl_pool *p) { return p->n_idle; }
uint64_t weft_hcl_pool_connects(const struct hcl_pool *p) { return p->connects; }

bool weft_hcl_parse_url(const char *url, char **host, int *port)
{
    *host = NULL;
    *port = 0;
    if (strncmp(url, "http://", 7) != 0) return false;
    const char *h = url + 7, *end = h + strcspn(h, "/"), *colon;
    const char *hs = h, *he;
    if (*h == '[') {  /* [v6]:port */
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (!rb) return false;
        hs = h + 1;
        he = rb;
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        he = colon ? colon : end;
    }
    if (he == hs) return false;
    long pt = 80;
    if (colon) {
        char *e;
        pt = strtol(colon + 1, &e, 10);
        if (e != end || pt <= 0 || pt > 65535) return false;
    }
    *host = strndup(hs, (size_t)(he - hs));
    if (!*host) return false;
    *port = (int)pt;
    return true;
}
