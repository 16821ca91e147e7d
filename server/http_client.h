/* HTTP/1.1 client on libuv and http-parser, for `weft router` talking to
 * its instances: a pool of keep-alive connections per upstream address,
 * streamed (de-chunked) response bodies, pause/resume for backpressure,
 * cancellation, and an inactivity timeout. One loop thread owns a pool and
 * its requests; every call and callback happens there.
 *
 * A request on a reused keep-alive connection that fails before any byte
 * of the answer (the server had just closed it) is sent once more on a new
 * connection; no other retry happens here (failover is the router's). */
#ifndef WEFT_SERVER_HTTP_CLIENT_H
#define WEFT_SERVER_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "server/http.h"

/* errors (besides negative libuv ones: UV_ECONNREFUSED, UV_ECONNRESET, ...) */
#define HCL_E_TIMEOUT (-100001)   /* nothing arrived for timeout_ms */
#define HCL_E_PROTOCOL (-100002)  /* the answer is not HTTP/1.x, or too large a head */
#define HCL_E_CLOSED (-100003)    /* the pool was freed */

struct hcl_pool;
struct hcl_req;

struct hcl_callbacks {
    /* The status line and headers (names lower-cased; valid during the call). Optional. */
    void (*on_head)(void *user, int status, const struct http_header *h, uint32_t n);
    /* Body bytes, de-chunked, as they arrive. Optional. */
    void (*on_body)(void *user, const char *data, size_t len);
    /* The end: err 0 (the whole answer arrived) or an error. Always called
     * exactly once unless the request was cancelled; the request is gone after it. */
    void (*on_done)(void *user, int err);
};

struct hcl_opts {
    const char *method;            /* "GET", "POST" */
    const char *path;              /* with the query, if any */
    const char *headers;           /* extra "Name: value\r\n" lines, or NULL */
    const char *body;              /* copied; NULL for none */
    size_t body_len;
    uint32_t timeout_ms;           /* connect, and then no byte for this long: HCL_E_TIMEOUT; 0: none */
};

/* An upstream at addr (copied); host is sent as the Host header. At most
 * max_idle connections are kept open between requests (0: 8); an idle one
 * closes after idle_ms (0: 20 s, below weft serve's 60 s). */
int weft_hcl_pool_create(uv_loop_t *loop, const struct sockaddr *addr, const char *host, uint32_t max_idle,
                    uint32_t idle_ms, struct hcl_pool **out);
/* Closes every connection; requests still in progress get on_done(HCL_E_CLOSED)
 * (from this call). Memory goes in libuv close callbacks: keep running the loop. */
void weft_hcl_pool_free(struct hcl_pool *p);
uint32_t weft_hcl_pool_active(const struct hcl_pool *p);  /* requests in progress */
uint32_t weft_hcl_pool_idle(const struct hcl_pool *p);    /* idle keep-alive connections */
uint64_t weft_hcl_pool_connects(const struct hcl_pool *p); /* connections opened so far */

/* Start a request. Returns 0 with *out set (may be NULL when not wanted),
 * or a negative error (nothing is called back then). Never calls back
 * before it returns. */
int weft_hcl_request(struct hcl_pool *p, const struct hcl_opts *o, const struct hcl_callbacks *cb, void *user,
                struct hcl_req **out);
/* No more callbacks for r; its connection is closed (the server sees the
 * client leave). Safe from inside r's own callbacks. */
void weft_hcl_cancel(struct hcl_req *r);
/* Stop / start reading r's answer (backpressure); the timeout does not run while paused. */
void weft_hcl_pause(struct hcl_req *r);
void weft_hcl_resume(struct hcl_req *r);

/* "http://host:port[/...]" -> host (malloc'd) and port; false if not that. */
bool weft_hcl_parse_url(const char *url, char **host, int *port);

#endif
