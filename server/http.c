/* HTTP/1.1 server on libuv (http.h): connections, timeouts, the write queue,
 * responses and streams, drain. Parsing is in http_parse.c.
 *
 * A connection's life: bytes are appended to c->pend and fed to the parser
 * core until it yields a complete request; the request goes to the handler
 * and parsing stops (c->req_active) until the response ends, so pipelined
 * requests are answered strictly in order. Reading goes on meanwhile (a
 * disconnect is noticed at once) unless too many unparsed bytes pile up.
 * Between requests, while more than max_output of answers is queued unsent
 * (a client pipelining without reading), neither parsing nor reading goes
 * on until the client has taken half of it.
 * One timer per connection: idle (between requests), read (a request has
 * begun: it must be complete within read_timeout_ms, counted from its first
 * byte), linger (after an error answer: discard input until the client
 * closes, so the answer is not lost to a TCP reset). */
#include "server/http_internal.h"

#include <linux/sockios.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_BUF (64u << 10)
#define PEND_MAX (256u << 10)  /* unparsed pipelined bytes held before reading pauses */
#define PEND_KEEP (64u << 10)  /* bigger pend buffers are freed once empty */
#define LINGER_MS 1000u
#define OVER_LIMIT_FIRST_MS 2000u  /* a connection past the per-client limit must ask at once */

enum { T_NONE, T_IDLE, T_READ, T_LINGER };
enum { L_CLOSED, L_OPEN, L_CLOSING };

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    struct http_server *srv;
    struct http_conn *prev, *next;
    struct hpc pc;
    char *pend;                 /* received, not yet parsed: [pend_off, pend_len) */
    size_t pend_off, pend_len, pend_cap;
    size_t pending;             /* bytes handed to uv_write and not yet written */
    int handles;                /* libuv handles still open (tcp, timer) */
    int timer_mode;
    bool closing;               /* uv_close called; freed from the close callbacks */
    bool finishing;             /* last answer queued: shut down once written, then linger */
    bool lingering, peer_eof, reading, in_process, continue_sent;
    bool req_active;            /* a request is with the handler; its response has not ended */
    bool streaming, chunked, head, keep;
    bool out_paused;            /* more than max_output queued: parsing and reading wait */
    bool over_limit;            /* accepted past max_conns_per_client, not exempted */
    bool exempt;                /* not counted against its peer address */
    bool peer_known;
    struct sockaddr_storage peer;
    char peer_text[48];
    void (*on_close)(void *);
    void *on_close_user;
    void (*on_writable)(void *user);  /* once pending <= writable_below */
    void *on_writable_user;
    size_t writable_below;
};

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listener_state;
    struct http_limits lim;
    http_handler_fn fn;
    void *ctx;
    struct http_conn *conns;
    uint32_t n_conns;
    bool draining, freeing, in_check;
    size_t out_now, out_peak;   /* bytes queued unsent: all connections now, one connection at most */
    struct http_big_budget big; /* big bodies held (lim.big_body_total) */
    void (*drain_done)(void *);
    void *drain_arg;
    char rbuf[READ_BUF];        /* one loop thread: reads are copied out at once */
};

struct wreq {
    uv_write_t req;
    struct http_conn *c;
    size_t len;
    char data[];
};

static void process(struct http_conn *c);
static void read_start(struct http_conn *c);

/* ---- server bookkeeping ---- */

/* The server is released (or the drain reported) once the listener and the
 * last connection are closed. */
static void server_check(struct http_server *s)
{
    if (s->listener_state != L_CLOSED || s->n_conns || s->in_check) return;
    if (s->drain_done) {
        void (*done)(void *) = s->drain_done;
        s->drain_done = NULL;
        s->in_check = true;
        done(s->drain_arg);
        s->in_check = false;
    }
    if (s->freeing) free(s);
}

static void on_listener_closed(uv_handle_t *h)
{
    struct http_server *s = h->data;
    s->listener_state = L_CLOSED;
    server_check(s);
}

/* ---- closing ---- */

static void on_conn_handle_closed(uv_handle_t *h)
{
    struct http_conn *c = h->data;
    if (--c->handles > 0) return;
    if (c->req_active && c->on_close) {
        void (*fn)(void *) = c->on_close;
        c->on_close = NULL;
        fn(c->on_close_user);
    }
    struct http_server *s = c->srv;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    weft_hpc_free(&c->pc);
    free(c->pend);
    free(c);
    server_check(s);
}

/* Closes at once; queued writes are dropped. on_close (if a request is in
 * progress) runs from the close callback, never inside a caller's call. */
static void conn_close(struct http_conn *c)
{
    if (c->closing) return;
    c->closing = true;
    c->timer_mode = T_NONE;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void timer_set(struct http_conn *c, int mode, uint64_t ms);

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct http_conn *c = req->data;
    if (c->closing) return;
    if (status < 0 || c->peer_eof) {
        conn_close(c);
        return;
    }
    /* the answer is out; read (and drop) what the client still sends until it
     * closes, so its unread bytes do not turn our close into a reset */
    c->lingering = true;
    read_start(c);
    uint64_t ms = c->srv->lim.read_timeout_ms < LINGER_MS ? c->srv->lim.read_timeout_ms : LINGER_MS;
    timer_set(c, T_LINGER, ms);
}

static void start_shutdown(struct http_conn *c)
{
    c->shut.data = c;
    if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0) conn_close(c);
}

/* Closes once everything queued is written. */
static void conn_finish(struct http_conn *c)
{
    if (c->closing || c->finishing) return;
    c->finishing = true;
    /* a client that does not read gets as long as an idle one */
    timer_set(c, T_LINGER, c->srv->lim.idle_timeout_ms);
    if (c->pending == 0) start_shutdown(c);
}

/* ---- timers ---- */

static void send_error(struct http_conn *c, int status, const char *msg);

static void on_timer(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    int mode = c->timer_mode;
    c->timer_mode = T_NONE;
    if (c->closing) return;
    if (mode == T_READ && !c->req_active && c->pc.state == HPC_MSG && !c->finishing) {
        char msg[96];
        snprintf(msg, sizeof msg, "request not received within %u ms", c->srv->lim.read_timeout_ms);
        send_error(c, 408, msg);
        return;
    }
    conn_close(c);  /* idle keep-alive, or the linger after an error */
}

static void timer_set(struct http_conn *c, int mode, uint64_t ms)
{
    if (c->closing) return;
    c->timer_mode = mode;
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

static void timer_stop(struct http_conn *c)
{
    c->timer_mode = T_NONE;
    uv_timer_stop(&c->timer);
}

/* ---- writing ---- */

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct http_conn *c = w->c;
    c->pending -= w->len;
    c->srv->out_now -= w->len;
    free(w);
    if (c->closing) return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->finishing && c->pending == 0 && !c->lingering) start_shutdown(c);
    if (c->on_writable && c->pending <= c->writable_below) {
        void (*fn)(void *) = c->on_writable;
        c->on_writable = NULL;
        fn(c->on_writable_user);
        if (c->closing) return;
    }
    if (c->out_paused && c->pending <= c->srv->lim.max_output / 2) {
        c->out_paused = false;
        process(c);  /* the next pipelined request, and reading again */
    } else if (c->out_paused && c->timer_mode == T_IDLE) {
        /* a client reading slowly is not idle: the idle timeout counts from its last progress */
        timer_set(c, T_IDLE, c->srv->lim.idle_timeout_ms);
    }
}

static struct wreq *wreq_new(size_t cap)
{
    struct wreq *w = malloc(sizeof *w + cap);
    if (w) w->len = 0;
    return w;
}

/* Queues w (owned from here on); false when the connection is gone. */
static bool wreq_send(struct http_conn *c, struct wreq *w)
{
    if (!w) {
        conn_close(c);
        return false;
    }
    if (c->closing) {
        free(w);
        return false;
    }
    w->c = c;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
        free(w);
        conn_close(c);
        return false;
    }
    c->pending += w->len;
    c->srv->out_now += w->len;
    if (c->pending > c->srv->out_peak) c->srv->out_peak = c->pending;
    return true;
}

static bool conn_send(struct http_conn *c, const char *data, size_t len)
{
    struct wreq *w = wreq_new(len);
    if (w) {
        memcpy(w->data, data, len);
        w->len = len;
    }
    return wreq_send(c, w);
}

static const char *status_text(int status)
{
    const char *t = http_status_str((enum http_status)status);
    return t && t[0] != '<' ? t : "Unknown";
}

/* Status line and headers into a new write request with room for body_cap
 * more bytes. framing: "Content-Length: N\r\n", "Transfer-Encoding: chunked\r\n" or "". */
static struct wreq *head_new(int status, const char *ctype, const char *extra, const char *framing, bool keep,
                             size_t body_cap)
{
    size_t cap = 160 + (ctype ? strlen(ctype) : 0) + (extra ? strlen(extra) : 0) + strlen(framing) + body_cap;
    struct wreq *w = wreq_new(cap);
    if (!w) return NULL;
    int n = snprintf(w->data, cap, "HTTP/1.1 %d %s\r\n%s%s%s%sConnection: %s\r\n%s\r\n", status, status_text(status),
                     ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "", framing,
                     keep ? "keep-alive" : "close", extra ? extra : "");
    if (n < 0 || (size_t)n >= cap - body_cap) {
        free(w);
        return NULL;
    }
    w->len = (size_t)n;
    return w;
}

/* A transport-level error answer (the parser's, 408), then close. */
static void send_error(struct http_conn *c, int status, const char *msg)
{
    if (status < 0) {
        conn_close(c);
        return;
    }
    char body[512];
    size_t n = weft_http_error_body(body, sizeof body, status >= 500 ? "server_error" : "invalid_request_error", NULL, msg);
    char framing[48];
    snprintf(framing, sizeof framing, "Content-Length: %zu\r\n", n);
    struct wreq *w = head_new(status, "application/json", NULL, framing, false, n);
    if (w) {
        memcpy(w->data + w->len, body, n);
        w->len += n;
    }
    if (wreq_send(c, w)) conn_finish(c);
}

/* ---- responses ---- */

/* extra + the CORS headers for c's request into buf (or extra itself when
 * there are none). */
static const char *with_cors(struct http_conn *c, const char *extra, char *buf, size_t cap)
{
    if (!c->srv->lim.n_cors_origins) return extra;
    char cors[400];
    if (!weft_http_cors_headers(&c->srv->lim, weft_http_header_get(&c->pc.req, "origin"), cors, sizeof cors)) return extra;
    int n = snprintf(buf, cap, "%s%s", extra ? extra : "", cors);
    return n > 0 && (size_t)n < cap ? buf : extra;
}

static void end_request(struct http_conn *c)
{
    c->req_active = false;
    c->streaming = false;
    c->on_close = NULL;
    c->on_close_user = NULL;
    c->on_writable = NULL;
    weft_hpc_next(&c->pc);
    if (c->closing) return;
    if (!c->keep || c->srv->draining) {
        conn_finish(c);
        return;
    }
    process(c);  /* the next pipelined request, or wait for one */
}

void weft_http_respond(struct http_conn *c, int status, const char *content_type, const char *extra_headers,
                  const char *body, size_t len)
{
    if (!c || !c->req_active || c->streaming) return;
    if (!c->closing) {
        c->keep = c->keep && !c->srv->draining && !c->over_limit;
        /* 1xx, 204 and 304 have no body and no Content-Length */
        bool bodyless = status < 200 || status == 204 || status == 304;
        char framing[48] = "";
        if (!bodyless) snprintf(framing, sizeof framing, "Content-Length: %zu\r\n", len);
        size_t blen = c->head || bodyless || !body ? 0 : len;
        char xb[2048];
        extra_headers = with_cors(c, extra_headers, xb, sizeof xb);
        struct wreq *w = head_new(status, content_type, extra_headers, framing, c->keep, blen);
        if (w && blen) {
            memcpy(w->data + w->len, body, blen);
            w->len += blen;
        }
        wreq_send(c, w);
    }
    end_request(c);
}

void weft_http_respond_error(struct http_conn *c, int status, const char *type, const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!type) type = status >= 500 ? "server_error" : "invalid_request_error";
    char *body = malloc(8192);
    if (!body) {
        weft_http_respond(c, status, "application/json", NULL, "{}", 2);
        return;
    }
    size_t n = weft_http_error_body(body, 8192, type, param, msg);
    weft_http_respond(c, status, "application/json", NULL, body, n);
    free(body);
}

void weft_http_stream_begin(struct http_conn *c, int status, const char *content_type, const char *extra_headers)
{
    if (!c || !c->req_active || c->streaming) return;
    c->streaming = true;
    if (c->closing) return;
    /* HTTP/1.0 has no chunked encoding: the body runs until the close */
    c->chunked = c->pc.p.http_minor >= 1;
    c->keep = c->keep && c->chunked && !c->srv->draining && !c->over_limit;
    char xb[2048];
    extra_headers = with_cors(c, extra_headers, xb, sizeof xb);
    struct wreq *w = head_new(status, content_type, extra_headers, c->chunked ? "Transfer-Encoding: chunked\r\n" : "",
                              c->keep, 0);
    wreq_send(c, w);
}

bool weft_http_stream_write(struct http_conn *c, const char *data, size_t len)
{
    if (!c || !c->req_active || !c->streaming || c->closing) return false;
    if (len == 0 || c->head) return true;  /* an empty chunk would end the stream */
    struct wreq *w = wreq_new(len + 24);
    if (w) {
        int n = c->chunked ? snprintf(w->data, 24, "%zx\r\n", len) : 0;
        memcpy(w->data + n, data, len);
        w->len = (size_t)n + len;
        if (c->chunked) {
            memcpy(w->data + w->len, "\r\n", 2);
            w->len += 2;
        }
    }
    return wreq_send(c, w);
}

void weft_http_stream_end(struct http_conn *c)
{
    if (!c || !c->req_active || !c->streaming) return;
    if (!c->closing && !c->head && c->chunked) conn_send(c, "0\r\n\r\n", 5);
    end_request(c);
}

void weft_http_conn_on_close(struct http_conn *c, void (*fn)(void *user), void *user)
{
    if (!c || !c->req_active) return;
    c->on_close = fn;
    c->on_close_user = user;
}

void weft_http_conn_on_writable(struct http_conn *c, size_t below, void (*fn)(void *user), void *user)
{
    if (!c || !c->req_active) return;
    c->on_writable = fn;
    c->on_writable_user = user;
    c->writable_below = below;
}

size_t weft_http_conn_pending(const struct http_conn *c)
{
    return c ? c->pending : 0;
}

size_t weft_http_conn_unread(const struct http_conn *c)
{
    if (!c) return 0;
    size_t n = c->pending;
    uv_os_fd_t fd;
    int outq = 0;
    if (!c->closing && uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, SIOCOUTQ, &outq) == 0 && outq > 0)
        n += (size_t)outq;
    return n;
}

bool weft_http_conn_over_client_limit(const struct http_conn *c)
{
    return c && c->over_limit;
}

void weft_http_conn_exempt(struct http_conn *c)
{
    if (!c) return;
    c->over_limit = false;
    c->exempt = true;
}

const char *weft_http_conn_peer(const struct http_conn *c)
{
    return c ? c->peer_text : "";
}

static bool same_peer(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
    return false;
}

/* Connections from c's peer address that count against its limit (c excluded). */
static uint32_t peer_conns(const struct http_server *s, const struct http_conn *c)
{
    uint32_t n = 0;
    for (const struct http_conn *o = s->conns; o; o = o->next)
        if (o != c && o->peer_known && !o->exempt && !o->closing && same_peer(&o->peer, &c->peer)) n++;
    return n;
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = h->data;
    buf->base = c->srv->rbuf;
    buf->len = READ_BUF;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void read_start(struct http_conn *c)
{
    if (c->reading || c->closing) return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
        conn_close(c);
        return;
    }
    c->reading = true;
}

static void read_stop(struct http_conn *c)
{
    if (!c->reading) return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

static bool pend_append(struct http_conn *c, const char *data, size_t n)
{
    if (c->pend_off == c->pend_len) c->pend_off = c->pend_len = 0;
    if (c->pend_len + n > c->pend_cap && c->pend_off > 0) {
        memmove(c->pend, c->pend + c->pend_off, c->pend_len - c->pend_off);
        c->pend_len -= c->pend_off;
        c->pend_off = 0;
    }
    if (c->pend_len + n > c->pend_cap) {
        size_t cap = c->pend_cap ? c->pend_cap : 4096;
        while (cap < c->pend_len + n) cap *= 2;
        char *p = realloc(c->pend, cap);
        if (!p) return false;
        c->pend = p;
        c->pend_cap = cap;
    }
    memcpy(c->pend + c->pend_len, data, n);
    c->pend_len += n;
    return true;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = st->data;
    if (c->closing || nread == 0) return;
    if (nread < 0) {
        if (nread == UV_EOF && c->finishing && !c->lingering) {
            /* half-closed client waiting for our last answer */
            c->peer_eof = true;
            read_stop(c);
            return;
        }
        if (nread == UV_EOF && !c->lingering && !c->finishing) {
            /* the client sent its requests and shut its side (a half-close):
             * the ones received whole are answered, then the connection
             * ends; a request cut off by the EOF can never complete. A
             * client that left altogether shows when an answer is written
             * (a reset), as one that resets does at once. */
            c->peer_eof = true;
            read_stop(c);
            if (!c->req_active) process(c);
            return;
        }
        /* the client went away (a request in progress is aborted via on_close) */
        conn_close(c);
        return;
    }
    if (c->finishing || c->lingering) return;  /* after the last answer: dropped */
    if (!pend_append(c, buf->base, (size_t)nread)) {
        conn_close(c);
        return;
    }
    process(c);
}

/* Feeds unparsed bytes to the parser and hands complete requests to the
 * handler, until a response is pending, the bytes run out, or an error. */
static void process(struct http_conn *c)
{
    if (c->in_process) return;  /* a response ended inside the handler: the loop below goes on */
    c->in_process = true;
    struct http_server *s = c->srv;
    /* a client that does not read its answers gets no more of them
     * computed: past max_output the next request waits (on_write resumes) */
    while (!c->closing && !c->finishing && !c->req_active && c->pend_off < c->pend_len &&
           c->pending <= s->lim.max_output) {
        size_t avail = c->pend_len - c->pend_off;
        size_t used = weft_hpc_feed(&c->pc, c->pend + c->pend_off, avail);
        c->pend_off += used;
        if (c->pc.state == HPC_ERROR) {
            send_error(c, c->pc.err_status, c->pc.err_msg);
            break;
        }
        if (c->pc.state == HPC_READY) {
            timer_stop(c);
            c->req_active = true;
            c->streaming = false;
            c->continue_sent = false;
            c->keep = c->pc.req.keep_alive;
            c->head = c->pc.req.method == HTTP_M_HEAD;
            const char *origin = weft_http_header_get(&c->pc.req, "origin");
            if (s->lim.n_cors_origins && origin && c->pc.req.method == HTTP_M_OTHER &&
                !strcmp(c->pc.req.method_name, "OPTIONS") &&
                weft_http_header_get(&c->pc.req, "access-control-request-method")) {
                /* a CORS preflight: the listener's policy answers it (http.h) */
                char hdr[1024];
                int st = weft_http_cors_preflight(&s->lim, origin,
                                             weft_http_header_get(&c->pc.req, "access-control-request-headers"), hdr,
                                             sizeof hdr);
                if (st == 204) {
                    weft_http_respond(c, 204, NULL, hdr, NULL, 0);
                } else {
                    char body[400];
                    char msg[340];
                    snprintf(msg, sizeof msg, "the origin %.256s is not allowed (--cors-origin)", origin);
                    size_t bn = weft_http_error_body(body, sizeof body, "invalid_request_error", NULL, msg);
                    weft_http_respond(c, 403, "application/json", NULL, body, bn);
                }
                continue;
            }
            s->fn(s->ctx, c, &c->pc.req);
            continue;
        }
        if (used < avail) break;
    }
    c->in_process = false;
    if (c->pend_off == c->pend_len) {
        c->pend_off = c->pend_len = 0;
        if (c->pend_cap > PEND_KEEP) {
            free(c->pend);
            c->pend = NULL;
            c->pend_cap = 0;
        }
    }
    if (c->closing || c->finishing) return;
    if (c->peer_eof) {
        /* nothing more will come: once every whole request is answered, end
         * (requests still buffered behind unread answers wait for on_write) */
        c->out_paused = c->pending > s->lim.max_output;
        if (!c->req_active && !(c->out_paused && c->pend_off < c->pend_len)) {
            if (c->pending) conn_finish(c);
            else conn_close(c);
        }
        return;
    }
    if (!c->req_active) {
        if (hpc_wants_continue(&c->pc) && !c->continue_sent) {
            c->continue_sent = true;
            if (!conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25)) return;
        }
        if (c->pc.state == HPC_MSG) {
            if (c->timer_mode != T_READ) timer_set(c, T_READ, s->lim.read_timeout_ms);
        } else if (s->draining) {
            conn_close(c);  /* idle while draining */
            return;
        } else if (c->timer_mode != T_IDLE) {
            timer_set(c, T_IDLE, s->lim.idle_timeout_ms);
        }
    }
    c->out_paused = c->pending > s->lim.max_output;
    /* paused between requests: stop reading too (the client pipelines without
     * reading). During a request keep reading, so a disconnect is seen at
     * once; what it sends meanwhile is bounded by PEND_MAX. */
    if ((c->out_paused && !c->req_active) || c->pend_len - c->pend_off > PEND_MAX) read_stop(c);
    else read_start(c);
}

/* ---- accepting ---- */

static void on_rejected_closed(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *ls, int status)
{
    struct http_server *s = ls->data;
    if (status < 0) return;
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c || s->n_conns >= s->lim.max_conns || s->draining) {
        /* accept and close at once: the client sees a closed connection, not a hang */
        free(c);
        uv_tcp_t *t = malloc(sizeof *t);
        if (!t) return;
        uv_tcp_init(s->loop, t);
        uv_accept(ls, (uv_stream_t *)t);
        uv_close((uv_handle_t *)t, on_rejected_closed);
        return;
    }
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_rejected_closed);
        return;
    }
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    c->handles = 2;
    c->srv = s;
    weft_hpc_init(&c->pc, &s->lim);
    c->pc.big = &s->big;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    uv_tcp_nodelay(&c->tcp, 1);
    int alen = sizeof c->peer;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer, &alen) == 0) {
        c->peer_known = true;
        if (c->peer.ss_family == AF_INET)
            uv_ip4_name((const struct sockaddr_in *)&c->peer, c->peer_text, sizeof c->peer_text);
        else if (c->peer.ss_family == AF_INET6)
            uv_ip6_name((const struct sockaddr_in6 *)&c->peer, c->peer_text, sizeof c->peer_text);
        c->over_limit = peer_conns(s, c) >= s->lim.max_conns_per_client;
    }
    timer_set(c, T_IDLE, c->over_limit && s->lim.idle_timeout_ms > OVER_LIMIT_FIRST_MS ? OVER_LIMIT_FIRST_MS
                                                                                      : s->lim.idle_timeout_ms);
    read_start(c);
}

/* ---- the server ---- */

static void on_failed_listener_closed(uv_handle_t *h) { free(h->data); }

int weft_http_server_start(uv_loop_t *loop, const char *host, int port, const struct http_limits *lim,
                      http_handler_fn fn, void *ctx, struct http_server **out)
{
    *out = NULL;
    if (!loop || !fn || port < 0 || port > 65535) return UV_EINVAL;
    /* a write to a socket the peer closed must be an error, not a signal */
    signal(SIGPIPE, SIG_IGN);
    struct http_server *s = calloc(1, sizeof *s);
    if (!s) return UV_ENOMEM;
    s->loop = loop;
    s->fn = fn;
    s->ctx = ctx;
    weft_hpc_limits_resolve(&s->lim, lim);
    s->big.total = s->lim.big_body_total;
    struct sockaddr_storage addr;
    if (!host) host = "127.0.0.1";
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc != 0) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    if (rc != 0) {
        free(s);
        return rc;
    }
    rc = uv_tcp_init(loop, &s->listener);
    if (rc != 0) {
        free(s);
        return rc;
    }
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc != 0) {
        uv_close((uv_handle_t *)&s->listener, on_failed_listener_closed);
        return rc;
    }
    s->listener_state = L_OPEN;
    *out = s;
    return 0;
}

int weft_http_server_port(const struct http_server *s)
{
    struct sockaddr_storage a;
    int len = sizeof a;
    if (!s || uv_tcp_getsockname(&s->listener, (struct sockaddr *)&a, &len) != 0) return -1;
    if (a.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&a)->sin_port);
    if (a.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    return -1;
}

uint32_t weft_http_server_n_conns(const struct http_server *s)
{
    return s ? s->n_conns : 0;
}

size_t weft_http_server_output_peak(const struct http_server *s)
{
    return s ? s->out_peak : 0;
}

size_t weft_http_server_output_now(const struct http_server *s)
{
    return s ? s->out_now : 0;
}

struct http_big_budget weft_http_server_big_budget(const struct http_server *s)
{
    return s ? s->big : (struct http_big_budget){0};
}

char *weft_http_conn_take_body(struct http_conn *c, size_t *len)
{
    *len = 0;
    if (!c || !c->req_active || !c->pc.body || c->pc.state != HPC_READY) return NULL;
    char *b = c->pc.body;
    *len = c->pc.req.body_len;
    c->pc.body = NULL;
    c->pc.body_cap = 0;
    c->pc.body_len = 0;
    c->pc.req.body = "";
    c->pc.req.body_len = 0;
    return b;
}

uint32_t weft_http_server_n_stalled(const struct http_server *s)
{
    uint32_t n = 0;
    for (const struct http_conn *c = s ? s->conns : NULL; c; c = c->next)
        if (c->out_paused && !c->closing && uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp) > 0) n++;
    return n;
}

static void close_listener(struct http_server *s)
{
    if (s->listener_state != L_OPEN) return;
    s->listener_state = L_CLOSING;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

void weft_http_server_drain(struct http_server *s, void (*done)(void *), void *arg)
{
    if (!s || s->freeing) return;
    s->draining = true;
    s->drain_done = done;
    s->drain_arg = arg;
    close_listener(s);
    for (struct http_conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (c->req_active || c->finishing || c->closing) continue;
        if (c->pc.state == HPC_MSG) {
            /* a request begun and not received whole is not in flight: it does
             * not hold the drain (a client trickling a header would hold it
             * to the deadline); it is told why, as a read timeout would be */
            send_error(c, 503, "the server is shutting down; the request was not received whole before it began");
            continue;
        }
        if (c->pc.state != HPC_IDLE) continue;
        /* idle: closed; answers still queued for it (paused by the output bound) go out first */
        if (c->pending) conn_finish(c);
        else conn_close(c);
    }
    server_check(s);
}

void weft_http_server_close_soon(struct http_server *s, uint32_t ms)
{
    if (!s || s->freeing) return;
    s->draining = true;
    close_listener(s);
    for (struct http_conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (c->closing) continue;
        if (c->finishing && !c->req_active) {
            /* its last answer is queued: it gets ms to take it, no more */
            if (c->lingering || c->pending) timer_set(c, T_LINGER, ms);
            continue;
        }
        conn_close(c);  /* a request still in progress or half received */
    }
    server_check(s);
}

void weft_http_server_free(struct http_server *s)
{
    if (!s || s->freeing) return;
    s->freeing = true;
    s->drain_done = NULL;
    close_listener(s);
    for (struct http_conn *c = s->conns; c; c = c->next) conn_close(c);
    server_check(s);
}
