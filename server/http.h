/* HTTP/1.1 transport for `weft serve`: libuv TCP, http-parser, limits.
 *
 * One libuv loop thread owns every connection. A connection carries
 * keep-alive and pipelined requests; they are handed to the handler one at
 * a time, in order: the next request on a connection is not parsed until the
 * response to the current one has ended (weft_http_respond() or
 * weft_http_stream_end()). The handler may answer at once or later (from the loop
 * thread, e.g. when engine events arrive through a uv_async).
 *
 * Everything a client can send is bounded (request line, header bytes and
 * count, body size) and timed (idle keep-alive, slow headers/body); a
 * violation is answered with the proper 4xx JSON error and the connection is
 * closed, or the connection is just closed when the bytes are not HTTP.
 * Nothing a client sends can crash or block the loop. */
#ifndef WEFT_SERVER_HTTP_H
#define WEFT_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct http_header;

struct http_limits {
    size_t max_url;            /* request-target bytes (default 8 KiB) */
    size_t max_header_bytes;   /* all header names + values (default 32 KiB) */
    uint32_t max_headers;      /* header count (default 100) */
    size_t max_body;           /* default 1 MiB; larger gets 413 */
    const char *big_body_path; /* requests to this path (exact) may carry up to big_body_max */
    size_t big_body_max;       /* bytes (KV block pushes); 0 = max_body */
    /* when set, a request to big_body_path gets big_body_max only if this
     * says yes on its headers (e.g. a trusted key), before any body byte is
     * read; otherwise max_body holds. Loop thread. */
    bool (*big_body_ok)(void *user, const struct http_header *h, uint32_t n);
    void *big_body_user;
    /* every big body held at once, on every connection of the listener: a
     * request is reserved its Content-Length (big_body_max when chunked)
     * when it is granted, until its answer goes (or its connection does);
     * one that would pass the total gets 503 before any body byte is read.
     * 0: no total bound. */
    size_t big_body_total;
    uint32_t idle_timeout_ms;  /* keep-alive idle, no request in progress (default 60 s) */
    uint32_t read_timeout_ms;  /* a started request must be complete within (default 30 s) */
    uint32_t max_conns;        /* beyond this, new connections are closed at once (default 1024) */
    size_t max_output;         /* per connection: while more than this is queued unsent, the next
                                  pipelined request is not parsed and reading pauses; it resumes
                                  once the queue is down to half (default 1 MiB). A connection
                                  thus holds at most max_output + one response */
    uint32_t max_conns_per_client; /* connections from one peer address (default 64): past it a
                                  connection is accepted flagged (weft_http_conn_over_client_limit)
                                  and closed after its first response unless the handler exempts it */
    /* CORS, the listener's browser policy (not a limit; zero: no CORS at all): the origins
     * allowed ("*" among them allows any). For an allowed Origin every response, normal or
     * streamed, carries Access-Control-Allow-Origin (the origin itself) and Vary: Origin; a
     * preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here,
     * never reaching the handler: 204 with Allow-Origin, Allow-Methods (GET, POST, OPTIONS),
     * Allow-Headers (the requested ones among Authorization, Content-Type, Accept,
     * OpenAI-*, X-Stainless-*) and Max-Age, or 403 for an origin not allowed. The
     * strings must outlive the server. */
    const char *const *cors_origins;
    uint32_t n_cors_origins;
};                             /* a zero field (or a NULL limits pointer) means the default */

struct http_header { const char *name, *value; };  /* NUL-terminated; names lower-cased */

/* The running count behind http_limits.big_body_total (one per listener). */
struct http_big_budget {
    size_t held, total;
    uint64_t refused;          /* requests answered 503 for it */
};

enum http_method { HTTP_M_GET, HTTP_M_POST, HTTP_M_HEAD, HTTP_M_OTHER };

struct http_request {
    enum http_method method;
    const char *method_name;   /* "GET", "DELETE", ... (HTTP_M_OTHER tells which) */
    const char *path;          /* without the query string or fragment; raw (not %-decoded);
                                  "/" for an absolute-form target without a path */
    const char *query;         /* "" when none */
    const struct http_header *headers;
    uint32_t n_headers;
    const char *body;          /* NUL-terminated copy; body_len bytes */
    size_t body_len;
    bool keep_alive;           /* false: the connection closes after this response */
};

struct http_conn;
struct http_server;

/* Called on the loop thread for each complete request. The request and its
 * strings are valid until the response ends. The handler must eventually
 * answer (respond or stream) unless the connection closes first. A handler
 * that answers later (not before it returns) must set weft_http_conn_on_close:
 * that is how it learns the connection pointer died. */
typedef void (*http_handler_fn)(void *ctx, struct http_conn *c, const struct http_request *req);

/* Lookup (case-insensitive); NULL when absent. */
const char *weft_http_header_get(const struct http_request *req, const char *name);

/* The whole response. extra_headers: "Name: value\r\n..." or NULL. The body
 * is copied. Content-Length and Connection are added (no body nor
 * Content-Length for 1xx/204/304; no body for HEAD). Ends the request: the
 * next pipelined one (if any) goes to the handler, maybe before this returns.
 * Ignored when no request is waiting for an answer on c. */
void weft_http_respond(struct http_conn *c, int status, const char *content_type, const char *extra_headers,
                  const char *body, size_t len);
/* An OpenAI-style error body {"error":{"message","type","param","code"}};
 * type NULL: "invalid_request_error" (4xx) or "server_error" (5xx); code is null. */
void weft_http_respond_error(struct http_conn *c, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The same error object as text, for callers that send it themselves (e.g. as
 * an SSE event): {"error":{"message":msg,"type":type,"param":param|null,"code":null}},
 * strings JSON-escaped, invalid UTF-8 replaced by U+FFFD. Writes at most cap
 * bytes including the NUL (cut short if too long); returns the length. */
size_t weft_http_error_body(char *buf, size_t cap, const char *type, const char *param, const char *msg);

/* A streamed response (chunked transfer encoding), e.g. SSE. To an HTTP/1.0
 * client: no chunking, the connection closes at the end. For HEAD: headers only. */
void weft_http_stream_begin(struct http_conn *c, int status, const char *content_type, const char *extra_headers);
/* Queue bytes (copied; len 0 is a no-op); returns false when the connection
 * is gone (then stop: on_close follows from the loop). */
bool weft_http_stream_write(struct http_conn *c, const char *data, size_t len);
void weft_http_stream_end(struct http_conn *c);

/* Called once when the connection closes for any reason while a request
 * is in progress (client disconnect mid-stream): the handler aborts its work.
 * After it the connection pointer must not be used. Set per request (cleared
 * when the response ends). It runs from a libuv close callback, never from
 * inside an http_* call. A client that half-closes (EOF) while its request is
 * in progress counts as gone. */
void weft_http_conn_on_close(struct http_conn *c, void (*fn)(void *user), void *user);
/* Bytes queued for writing not yet sent (backpressure for streams: nothing
 * times out a response in progress, so a handler streaming to a client that
 * does not read should give up when this stays large). */
size_t weft_http_conn_pending(const struct http_conn *c);
/* What the client has not read yet: the queued bytes above plus those in the
 * kernel's send queue for its socket (SIOCOUTQ; up to several MiB once the
 * kernel has grown the buffer). A stream's bound on a slow reader uses this. */
size_t weft_http_conn_unread(const struct http_conn *c);
/* Call fn(user) once, from a write completion, when no more than below
 * bytes are queued unsent on c (a proxy resumes reading its upstream).
 * Replaces an earlier one; cleared when the response ends or c closes. */
void weft_http_conn_on_writable(struct http_conn *c, size_t below, void (*fn)(void *user), void *user);
/* The connection was accepted past max_conns_per_client for its peer
 * address. Unless the handler calls weft_http_conn_exempt() (e.g. for a trusted
 * upstream such as weft router), its first response says "Connection:
 * close" and it closes; until its first request it gets 2 s, not the idle
 * timeout. */
bool weft_http_conn_over_client_limit(const struct http_conn *c);
/* Lift the per-client limit for c: it is no longer flagged nor counted
 * against its peer address. */
void weft_http_conn_exempt(struct http_conn *c);

/* The request's body, handed over (free() it): the request's own view of
 * it is empty from then on. For a handler that keeps a large body past the
 * call (a KV push imported on a worker) without a copy. NULL (len 0) when
 * there is none. Its reservation against big_body_total lasts until the
 * answer, as before. */
char *weft_http_conn_take_body(struct http_conn *c, size_t *len);
/* The listener's big-body budget: held now, the bound, refusals. */
struct http_big_budget weft_http_server_big_budget(const struct http_server *s);
/* The peer address as text ("127.0.0.1", "::1"), "" if unknown. */
const char *weft_http_conn_peer(const struct http_conn *c);

/* Listen on host:port (host: IPv4 or IPv6 literal, NULL = 127.0.0.1; port 0:
 * any free port; see weft_http_server_port). Returns 0, or a negative libuv error
 * (uv_strerror) with *out NULL; then run the loop once to release the handle.
 * Sets SIGPIPE to ignored (a write to a closed socket must be an error). All
 * http_* calls on a server and its connections happen on the loop's thread. */
int weft_http_server_start(uv_loop_t *loop, const char *host, int port, const struct http_limits *lim,
                      http_handler_fn fn, void *ctx, struct http_server **out);
int weft_http_server_port(const struct http_server *s);
/* Stop accepting; idle keep-alive connections are closed; requests in
 * progress (or half received) continue and their responses say
 * "Connection: close". *done is called (from the loop) once no connection is
 * left; it may call weft_http_server_free. */
void weft_http_server_drain(struct http_server *s, void (*done)(void *), void *arg);
uint32_t weft_http_server_n_conns(const struct http_server *s);
/* Like drain, but now: stop accepting; a connection whose last answer is
 * queued gets at most ms to take it (then closes), every other one closes
 * at once (on_close fires for requests in progress). A drain's done
 * callback still follows once no connection is left. */
void weft_http_server_close_soon(struct http_server *s, uint32_t ms);
/* The most bytes ever queued unsent on one connection (the output bound at
 * work: at most max_output + the largest single response), and the bytes
 * queued unsent on all connections now. */
size_t weft_http_server_output_peak(const struct http_server *s);
size_t weft_http_server_output_now(const struct http_server *s);
/* Connections stalled on a client that takes nothing: more than max_output
 * queued unsent (so reading and parsing wait) and the kernel's send buffer
 * full (libuv holds bytes it could not write). They stay so until the client
 * reads, or a timeout or drain closes them. */
uint32_t weft_http_server_n_stalled(const struct http_server *s);
/* Closes the listener and every connection (on_close fires for requests in
 * progress). Memory is released from libuv close callbacks: keep running the
 * loop until it returns. */
void weft_http_server_free(struct http_server *s);

/* The CORS headers a response to a request with this Origin header value
 * gets under lim's policy ("Access-Control-Allow-Origin: ...\r\nVary:
 * Origin\r\n"), or "" when none (no policy, no Origin, not allowed). Writes
 * at most cap bytes including the NUL; returns the length. */
size_t weft_http_cors_headers(const struct http_limits *lim, const char *origin, char *buf, size_t cap);
/* A preflight's answer under lim's policy: the status (204, or 403 for an
 * origin not allowed) and its headers in buf (cap bytes) besides those of
 * weft_http_cors_headers (which every response gets): Allow-Methods, Max-Age and
 * Allow-Headers, from the Origin and Access-Control-Request-Headers values
 * (the latter may be NULL). */
int weft_http_cors_preflight(const struct http_limits *lim, const char *origin, const char *req_headers, char *buf,
                        size_t cap);

/* The request parser without sockets (fuzzing, tests): feed bytes, get the
 * requests it would hand to the handler and the error status it would send
 * (0 = none yet, or -1 for "close without a response"). */
struct http_parse_result { uint32_t n_requests; int error_status; };
struct http_parse_result weft_http_parse_bytes(const struct http_limits *lim, const char *data, size_t len);
/* The same, with a look at each request (valid during the call only) and the
 * bytes fed in pieces of feed_size (0: all at once), as a socket would. */
struct http_parse_opts {
    void (*on_request)(void *ctx, const struct http_request *req);
    void *ctx;
    size_t feed_size;
};
struct http_parse_result weft_http_parse_bytes_ex(const struct http_limits *lim, const char *data, size_t len,
                                             const struct http_parse_opts *opt);

#endif
