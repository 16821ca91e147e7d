/* The router's HTTP client (server/http_client.h) against weft's own HTTP
 * server on the same loop: plain and chunked answers, keep-alive reuse,
 * refused connections, the inactivity timeout, cancellation (the server
 * sees the client leave), pause/resume, freeing a pool with requests in
 * progress, URL parsing. */
#include <arpa/inet.h>
#include <string.h>

#include "server/http.h"
#include "server/http_client.h"
#include "tests/check.h"

static uv_loop_t loop;
static struct http_server *srv;
static int srv_gone;              /* on_close calls seen by the server */

struct streamer {
    struct http_conn *c;
    uv_timer_t t;
    int left;
    bool gone;
};

static void streamer_closed(uv_handle_t *h) { free(h->data); }

static void on_srv_gone(void *u)
{
    struct streamer *s = u;
    srv_gone++;
    s->gone = true;
}

static void streamer_tick(uv_timer_t *t)
{
    struct streamer *s = t->data;
    if (s->gone) {
        uv_close((uv_handle_t *)&s->t, streamer_closed);
        return;
    }
    char line[64];
    int n = snprintf(line, sizeof line, "data: chunk %d\n\n", s->left);
    weft_http_stream_write(s->c, line, (size_t)n);
    if (--s->left == 0) {
        weft_http_stream_end(s->c);
        uv_close((uv_handle_t *)&s->t, streamer_closed);
    }
}

static void handler(void *ctx, struct http_conn *c, const struct http_request *r)
{
    (void)ctx;
    if (!strcmp(r->path, "/plain")) {
        char body[256];
        int n = snprintf(body, sizeof body, "{\"method\":\"%s\",\"len\":%zu,\"x\":\"%s\"}", r->method_name, r->body_len,
                         weft_http_header_get(r, "x-test") ? weft_http_header_get(r, "x-test") : "");
        weft_http_respond(c, 200, "application/json", "X-Answer: 42\r\n", body, (size_t)n);
    } else if (!strcmp(r->path, "/stream")) {
        struct streamer *s = calloc(1, sizeof *s);
        s->c = c;
        s->left = atoi(r->query[0] ? r->query : "5");
        uv_timer_init(&loop, &s->t);
        s->t.data = s;
        weft_http_conn_on_close(c, on_srv_gone, s);
        weft_http_stream_begin(c, 200, "text/event-stream", NULL);
        uv_timer_start(&s->t, streamer_tick, 1, 1);
    } else if (!strcmp(r->path, "/burst")) {
        /* five chunks written at once: they reach the client in one read (or few) */
        weft_http_stream_begin(c, 200, "text/event-stream", NULL);
        for (int i = 5; i > 0; i--) {
            char line[64];
            int n = snprintf(line, sizeof line, "data: chunk %d\n\n", i);
            weft_http_stream_write(c, line, (size_t)n);
        }
        weft_http_stream_end(c);
    } else if (!strcmp(r->path, "/never")) {
        static struct streamer never;  /* only to learn when the client leaves */
        weft_http_conn_on_close(c, on_srv_gone, &never);
    } else {
        weft_http_respond_error(c, 404, NULL, NULL, "no %s", r->path);
    }
}

struct result {
    int status, done, err;
    char body[8192];
    size_t len;
    char answer_hdr[32];
    int bodies;                  /* on_body calls */
    struct hcl_req *req;
    bool cancel_after_first, pause_after_first, pause_every;
};

static void r_head(void *u, int status, const struct http_header *h, uint32_t n)
{
    struct result *r = u;
    r->status = status;
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(h[i].name, "x-answer")) snprintf(r->answer_hdr, sizeof r->answer_hdr, "%s", h[i].value);
}

static void r_body(void *u, const char *d, size_t n)
{
    struct result *r = u;
    r->bodies++;
    if (r->len + n < sizeof r->body) {
        memcpy(r->body + r->len, d, n);
        r->len += n;
        r->body[r->len] = 0;
    }
    if (r->cancel_after_first) weft_hcl_cancel(r->req);
    if ((r->pause_after_first && r->bodies == 1) || r->pause_every) weft_hcl_pause(r->req);
}

static void r_done(void *u, int err)
{
    struct result *r = u;
    r->done++;
    r->err = err;
}

static const struct hcl_callbacks cbs = {r_head, r_body, r_done};

static void on_guard(uv_timer_t *t) { *(int *)t->data = 1; }
static void on_tick(uv_timer_t *t) { (void)t; }

/* run the loop until *v >= n or 5 s (a guard against a hang, not a timing assertion) */
static void run_until_n(const int *v, int n)
{
    int expired = 0;
    uv_timer_t g;
    uv_timer_init(&loop, &g);
    g.data = &expired;
    uv_timer_start(&g, on_guard, 5000, 0);
    /* a wake-up every ms: libuv 1.44's UV_RUN_ONCE runs timers before it blocks in poll,
       so an event a timer delivers (a resumed request's held bytes) would otherwise
       wait there for the next I/O */
    uv_timer_t tick;
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, on_tick, 1, 1);
    while (*v < n && !expired) uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_close((uv_handle_t *)&g, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_MSG(*v >= n, "the loop ran 5 s without the expected event");
}

static void run_until(const int *flag) { run_until_n(flag, 1); }

static struct hcl_pool *pool_to(int port)
{
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    struct hcl_pool *p = NULL;
    CHECK(weft_hcl_pool_create(&loop, (const struct sockaddr *)&a, "127.0.0.1", 0, 0, &p) == 0);
    return p;
}

static void plain_and_keep_alive(void)
{
    struct hcl_pool *p = pool_to(weft_http_server_port(srv));
    for (int i = 0; i < 3; i++) {
        struct result r = {0};
        struct hcl_opts o = {.method = "POST", .path = "/plain", .headers = "X-Test: yes\r\n", .body = "hello",
                             .body_len = 5, .timeout_ms = 5000};
        CHECK(weft_hcl_request(p, &o, &cbs, &r, NULL) == 0);
        run_until(&r.done);
        CHECK_EQ_INT(r.err, 0);
        CHECK_EQ_INT(r.status, 200);
        CHECK(!strcmp(r.body, "{\"method\":\"POST\",\"len\":5,\"x\":\"yes\"}"));
        CHECK(!strcmp(r.answer_hdr, "42"));
    }
    CHECK_EQ_INT(weft_hcl_pool_connects(p), 1);  /* one keep-alive connection for all three */
    CHECK_EQ_INT(weft_hcl_pool_idle(p), 1);
    struct result r = {0};
    struct hcl_opts o = {.method = "GET", .path = "/nope", .timeout_ms = 5000};
    CHECK(weft_hcl_request(p, &o, &cbs, &r, NULL) == 0);
    run_until(&r.done);
    CHECK_EQ_INT(r.err, 0);
    CHECK_EQ_INT(r.status, 404);
    CHECK(strstr(r.body, "no /nope") != NULL);
    weft_hcl_pool_free(p);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void chunked_stream(void)
{
    struct hcl_pool *p = pool_to(weft_http_server_port(srv));
    struct result r = {0};
    struct hcl_opts o = {.method = "GET", .path = "/stream", .timeout_ms = 5000};
    CHECK(weft_hcl_request(p, &o, &cbs, &r, NULL) == 0);
    run_until(&r.done);
    CHECK_EQ_INT(r.err, 0);
    CHECK(!strcmp(r.body, "data: chunk 5\n\ndata: chunk 4\n\ndata: chunk 3\n\ndata: chunk 2\n\ndata: chunk 1\n\n"));
    CHECK(r.bodies >= 5);  /* streamed as it came, not at the end */
    weft_hcl_pool_free(p);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void refused_and_timeout(void)
{
    /* a port nobody listens on: bind one, learn it, close it */
    uv_tcp_t t;
    uv_tcp_init(&loop, &t);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_bind(&t, (const struct sockaddr *)&a, 0);
    int len = sizeof a;
    uv_tcp_getsockname(&t, (struct sockaddr *)&a, &len);
    int port = ntohs(a.sin_port);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    struct hcl_pool *p = pool_to(port);
    struct result r = {0};
    struct hcl_opts o = {.method = "GET", .path = "/", .timeout_ms = 5000};
    CHECK(weft_hcl_request(p, &o, &cbs, &r, NULL) == 0);
    run_until(&r.done);
    CHECK_EQ_INT(r.err, UV_ECONNREFUSED);
    weft_hcl_pool_free(p);

    p = pool_to(weft_http_server_port(srv));
    struct result r2 = {0};
    int gone0 = srv_gone;
    struct hcl_opts o2 = {.method = "GET", .path = "/never", .timeout_ms = 100};
    CHECK(weft_hcl_request(p, &o2, &cbs, &r2, NULL) == 0);
    run_until(&r2.done);
    CHECK_EQ_INT(r2.err, HCL_E_TIMEOUT);
    int want = gone0 + 1;
    while (srv_gone < want) uv_run(&loop, UV_RUN_ONCE);  /* the server saw the client leave */
    CHECK_EQ_INT(srv_gone, want);
    weft_hcl_pool_free(p);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void cancel_mid_stream(void)
{
    struct hcl_pool *p = pool_to(weft_http_server_port(srv));
    struct result r = {.cancel_after_first = true};
    int gone0 = srv_gone;
    struct hcl_opts o = {.method = "GET", .path = "/stream", .timeout_ms = 5000};
    CHECK(weft_hcl_request(p, &o, &cbs, &r, &r.req) == 0);
    run_until(&r.bodies);
    while (srv_gone == gone0) uv_run(&loop, UV_RUN_ONCE);
    CHECK_EQ_INT(srv_gone, gone0 + 1);
    CHECK_EQ_INT(r.done, 0);   /* no callback after a cancel */
    CHECK_EQ_INT(r.bodies, 1);
    CHECK_EQ_INT(weft_hcl_pool_active(p), 0);
    weft_hcl_pool_free(p);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void pause_resume(void)
{
    struct hcl_pool *p = pool_to(weft_http_server_port(srv));
    struct result r = {.pause_after_first = true};
    struct hcl_opts o = {.method = "GET", .path = "/stream", .timeout_ms = 5000};
    CHECK(weft_hcl_request(p, &o, &cbs, &r, &r.req) == 0);
    run_until(&r.bodies);
    /* let the server write the rest: nothing reaches us while paused */
    int flag = 0;
    uv_timer_t g;
    uv_timer_init(&loop, &g);
    g.data = &flag;
    uv_timer_start(&g, on_guard, 60, 0);
    run_until(&flag);
    uv_close((uv_handle_t *)&g, NULL);
    CHECK_EQ_INT(r.bodies, 1);
    CHECK_EQ_INT(r.done, 0);
    weft_hcl_resume(r.req);
    run_until(&r.done);
    CHECK_EQ_INT(r.err, 0);
    CHECK(strstr(r.body, "chunk 1\n\n") != NULL);
    weft_hcl_pool_free(p);
    uv_run(&loop, UV_RUN_NOWAIT);
}

/* a pause inside on_body holds back the rest of the same read: each resume releases
   exactly one more chunk, and the end comes only after the last resume */
static void pause_within_one_read(void)
{
    struct hcl_pool *p = pool_to(weft_http_server_port(srv));
    struct result r = {.pause_every = true};
    struct hcl_opts o = {.method = "GET", .path = "/burst", .timeout_ms = 5000};
    CHECK(weft_hcl_request(p, &o, &cbs, &r, &r.req) == 0);
    run_until(&r.bodies);
    for (int want = 2; want <= 5; want++) {
        for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT);  /* paused: nothing comes */
        CHECK_EQ_INT(r.bodies, want - 1);
        CHECK_EQ_INT(r.done, 0);
        weft_hcl_resume(r.req);
        CHECK_EQ_INT(r.bodies, want - 1);  /* never from inside resume */
        run_until_n(&r.bodies, want);
        CHECK_EQ_INT(r.bodies, want);
    }
    r.pause_every = false;
    CHECK_EQ_INT(r.done, 0);
    weft_hcl_resume(r.req);
    run_until(&r.done);
    CHECK_EQ_INT(r.done, 1);
    CHECK_EQ_INT(r.err, 0);
    CHECK_EQ_INT(r.bodies, 5);
    CHECK(!strcmp(r.body, "data: chunk 5\n\ndata: chunk 4\n\ndata: chunk 3\n\ndata: chunk 2\n\ndata: chunk 1\n\n"));
    weft_hcl_pool_free(p);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void free_with_requests_in_progress(void)
{
    struct hcl_pool *p = pool_to(weft_http_server_port(srv));
    struct result r[3] = {{0}};
    struct hcl_opts o = {.method = "GET", .path = "/never", .timeout_ms = 0};
    for (int i = 0; i < 3; i++) CHECK(weft_hcl_request(p, &o, &cbs, &r[i], NULL) == 0);
    CHECK_EQ_INT(weft_hcl_pool_active(p), 3);
    int gone0 = srv_gone;
    while (srv_gone == gone0 && weft_http_server_n_conns(srv) < 3) uv_run(&loop, UV_RUN_ONCE);
    weft_hcl_pool_free(p);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(r[i].done, 1);
        CHECK_EQ_INT(r[i].err, HCL_E_CLOSED);
    }
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void parse_urls(void)
{
    char *h;
    int port;
    CHECK(weft_hcl_parse_url("http://127.0.0.1:8081", &h, &port) && !strcmp(h, "127.0.0.1") && port == 8081);
    free(h);
    CHECK(weft_hcl_parse_url("http://weft-0.weft:9000/", &h, &port) && !strcmp(h, "weft-0.weft") && port == 9000);
    free(h);
    CHECK(weft_hcl_parse_url("http://[::1]:7000", &h, &port) && !strcmp(h, "::1") && port == 7000);
    free(h);
    CHECK(weft_hcl_parse_url("http://example", &h, &port) && port == 80);
    free(h);
    CHECK(!weft_hcl_parse_url("https://x:1", &h, &port));
    CHECK(!weft_hcl_parse_url("http://:80", &h, &port));
    CHECK(!weft_hcl_parse_url("http://x:0", &h, &port));
    CHECK(!weft_hcl_parse_url("http://x:99999", &h, &port));
    CHECK(!weft_hcl_parse_url("http://x:12ab", &h, &port));
}

int main(void)
{
    uv_loop_init(&loop);
    CHECK(weft_http_server_start(&loop, NULL, 0, NULL, handler, NULL, &srv) == 0);
    RUN(plain_and_keep_alive);
    RUN(chunked_stream);
    RUN(refused_and_timeout);
    RUN(cancel_mid_stream);
    RUN(pause_resume);
    RUN(pause_within_one_read);
    RUN(free_with_requests_in_progress);
    RUN(parse_urls);
    weft_http_server_free(srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    return check_summary();
}
