/* The request parser core (http_internal.h): http-parser callbacks that copy
 * a request into per-connection buffers and enforce the limits, the mapping
 * of parse failures to HTTP statuses, and weft_http_parse_bytes(). */
#include "server/http_internal.h"

#include "base/unicode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEF_MAX_URL (8u << 10)
#define DEF_MAX_HEADER_BYTES (32u << 10)
#define DEF_MAX_HEADERS 100u
#define DEF_MAX_BODY (1u << 20)
#define DEF_IDLE_MS 60000u
#define DEF_READ_MS 30000u
#define DEF_MAX_CONNS 1024u
/* offsets into sb are 32-bit; keep every bound well inside that */
#define CAP_STRINGS (64u << 20)
/* buffers bigger than this are freed between requests so idle connections stay small */
#define KEEP_BUF (64u << 10)
/* http-parser's own bound on the request line + headers (compiled in: 80 KiB) */
#define PARSER_DEFAULT_MAX_HEADER (80u << 10)
#define NO_VALUE UINT32_MAX
#define DEF_MAX_OUTPUT (1u << 20)
#define DEF_MAX_CONNS_PER_CLIENT 64u

void weft_hpc_limits_resolve(struct http_limits *out, const struct http_limits *lim)
{
    struct http_limits l = {0};
    if (lim) l = *lim;
    if (!l.max_url) l.max_url = DEF_MAX_URL;
    if (!l.max_header_bytes) l.max_header_bytes = DEF_MAX_HEADER_BYTES;
    if (!l.max_headers) l.max_headers = DEF_MAX_HEADERS;
    if (!l.max_body) l.max_body = DEF_MAX_BODY;
    if (!l.idle_timeout_ms) l.idle_timeout_ms = DEF_IDLE_MS;
    if (!l.read_timeout_ms) l.read_timeout_ms = DEF_READ_MS;
    if (!l.max_conns) l.max_conns = DEF_MAX_CONNS;
    if (!l.max_output) l.max_output = DEF_MAX_OUTPUT;
    if (!l.max_conns_per_client) l.max_conns_per_client = DEF_MAX_CONNS_PER_CLIENT;
    if (l.max_url > CAP_STRINGS) l.max_url = CAP_STRINGS;
    if (l.max_header_bytes > CAP_STRINGS) l.max_header_bytes = CAP_STRINGS;
    if (l.max_headers > (1u << 20)) l.max_headers = 1u << 20;
    *out = l;
}

/* ---- errors ---- */

static int fail(struct hpc *h, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct hpc *h, int status, const char *fmt, ...)
{
    if (h->state != HPC_ERROR) {
        h->state = HPC_ERROR;
        h->err_status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->err_msg, sizeof h->err_msg, fmt, ap);
        va_end(ap);
    }
    return -1;  /* makes http-parser stop with HPE_CB_* */
}

static bool is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }

static bool is_method_char(unsigned char c) { return is_upper(c) || c == '-' || c == '_'; }

/* After an unknown method. Bytes that do not start like an HTTP request
 * line (binary, TLS, the HTTP/2 preface) get the connection closed without
 * an answer; "FOO /path ..." (a well-formed token, then a space) is 405;
 * anything else 400. Decided only once the bytes seen settle it, so the
 * answer does not depend on how the bytes were split. */
static void method_decide(struct hpc *h)
{
    static const char h2[] = "PRI * HTTP/2";
    const size_t h2n = sizeof h2 - 1;
    if (h->head_len == 0) return;
    if (!is_upper(h->head[0])) {
        h->method_pending = false;
        fail(h, -1, "not HTTP");
        return;
    }
    size_t m = h->head_len < h2n ? h->head_len : h2n;
    if (memcmp(h->head, h2, m) == 0) {
        if (m < h2n) return;  /* could still be the preface: wait */
        h->method_pending = false;
        fail(h, -1, "HTTP/2 preface");
        return;
    }
    uint32_t i = 0;
    while (i < h->head_len && is_method_char(h->head[i])) i++;
    if (i == h->head_len && i < HPC_HEAD) return;  /* the token goes on: wait */
    h->method_pending = false;
    if (i < h->head_len && h->head[i] == ' ')
        fail(h, 405, "method %.*s is not supported", (int)i, (const char *)h->head);
    else
        fail(h, 400, "invalid HTTP method");
}

/* A parse failure http-parser found itself (not one of our limits). */
static void fail_parser(struct hpc *h, enum http_errno e)
{
    if (e == HPE_INVALID_METHOD) {
        h->method_pending = true;
        h->state = HPC_MSG;
        method_decide(h);
        return;
    }
    if (h->head_len == 0 || !is_upper(h->head[0])) {
        fail(h, -1, "not HTTP");
        return;
    }
    switch (e) {
    case HPE_HEADER_OVERFLOW:  /* http-parser's own bound, found before our callbacks saw the bytes */
        if (h->bstate == HPC_B_URL && !h->headers_done)
            fail(h, 414, "request line too long");
        else
            fail(h, 431, "request header fields too large");
        return;
    case HPE_INVALID_VERSION:
        fail(h, 400, "invalid HTTP version");
        return;
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        if (h->p.flags & F_CHUNKED || h->p.uses_transfer_encoding)
            fail(h, 400, "Content-Length together with Transfer-Encoding");
        else
            fail(h, 400, "more than one Content-Length");
        return;
    default:
        fail(h, 400, "malformed request: %s", http_errno_description(e));
        return;
    }
}

/* ---- buffers ---- */

static bool grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return false;
    *buf = b;
    *cap = c;
    return true;
}

static bool sb_put(struct hpc *h, const char *s, size_t n, bool lower)
{
    if (!grow(&h->sb, &h->sb_cap, h->sb_len + n + 1)) return false;
    char *d = h->sb + h->sb_len;
    if (lower)
        for (size_t i = 0; i < n; i++) d[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] + 32) : s[i];
    else
        memcpy(d, s, n);
    h->sb_len += n;
    return true;
}

static bool sb_nul(struct hpc *h)
{
    if (!grow(&h->sb, &h->sb_cap, h->sb_len + 1)) return false;
    h->sb[h->sb_len++] = 0;
    return true;
}

/* ends whatever string (url, name, value) is open in sb */
static bool close_string(struct hpc *h)
{
    return sb_nul(h);
}

/* ---- http-parser callbacks ---- */

static int on_message_begin(http_parser *p)
{
    struct hpc *h = p->data;
    h->state = HPC_MSG;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct hpc *h = p->data;
    h->url_len += len;
    if (h->url_len > h->lim.max_url) return fail(h, 414, "request URI longer than %zu bytes", h->lim.max_url);
    if (!sb_put(h, at, len, false)) return fail(h, 503, "out of memory");
    return 0;
}

/* RFC 9110 token characters (header names); http-parser as built by Debian
 * (not strict) lets spaces through, a request-smuggling hazard. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int count_header_bytes(struct hpc *h, size_t len)
{
    h->hdr_bytes += len;
    if (h->hdr_bytes > h->lim.max_header_bytes)
        return fail(h, 431, "request headers larger than %zu bytes", h->lim.max_header_bytes);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct hpc *h = p->data;
    if (count_header_bytes(h, len)) return -1;
    if (h->headers_done) return 0;  /* chunked trailers: counted, not kept */
    if (h->bstate != HPC_B_FIELD) {
        if (!close_string(h)) return fail(h, 503, "out of memory");
        if (h->n_hdr >= h->lim.max_headers)
            return fail(h, 431, "more than %u request headers", h->lim.max_headers);
        if (h->n_hdr >= h->hoff_cap) {
            uint32_t c = h->hoff_cap ? h->hoff_cap * 2 : 16;
            uint32_t *o = realloc(h->hoff, sizeof *o * 2 * c);
            if (!o) return fail(h, 503, "out of memory");
            h->hoff = o;
            h->hoff_cap = c;
        }
        h->hoff[2 * h->n_hdr] = (uint32_t)h->sb_len;
        h->hoff[2 * h->n_hdr + 1] = NO_VALUE;  /* until a value arrives */
        h->n_hdr++;
        h->bstate = HPC_B_FIELD;
    }
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)at[i])) return fail(h, 400, "invalid character in a header name");
    if (!sb_put(h, at, len, true)) return fail(h, 503, "out of memory");
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct hpc *h = p->data;
    if (count_header_bytes(h, len)) return -1;
    if (h->headers_done) return 0;
    if (h->bstate != HPC_B_VALUE) {
        if (h->bstate != HPC_B_FIELD || !close_string(h)) return fail(h, 503, "out of memory");
        h->hoff[2 * (h->n_hdr - 1) + 1] = (uint32_t)h->sb_len;
        h->bstate = HPC_B_VALUE;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)at[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(h, 400, "invalid character in a header value");
    }
    if (!sb_put(h, at, len, false)) return fail(h, 503, "out of memory");
    return 0;
}

/* sb offset of a copy of url[a, b) */
static bool sb_copy(struct hpc *h, size_t a, size_t b, size_t *off)
{
    *off = h->sb_len;
    if (!grow(&h->sb, &h->sb_cap, h->sb_len + (b - a) + 1)) return false;
    memmove(h->sb + h->sb_len, h->sb + a, b - a);
    h->sb_len += b - a;
    return sb_nul(h);
}

/* path and query (raw, not percent-decoded) from the request target */
static bool split_url(struct hpc *h, size_t *path_off, size_t *query_off)
{
    const char *u = h->sb;
    size_t n = h->url_len, pa = 0, pb = n, qa = 0, qb = 0;
    if (n > 0 && u[0] != '/' && u[0] != '*' && n <= 0xffff && h->p.method != HTTP_CONNECT) {
        struct http_parser_url pu;
        http_parser_url_init(&pu);
        if (http_parser_parse_url(u, n, 0, &pu) == 0) {
            pa = pb = n;
            if (pu.field_set & (1 << UF_PATH)) {
                pa = pu.field_data[UF_PATH].off;
                pb = pa + pu.field_data[UF_PATH].len;
            }
            if (pu.field_set & (1 << UF_QUERY)) {
                qa = pu.field_data[UF_QUERY].off;
                qb = qa + pu.field_data[UF_QUERY].len;
            }
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            if (u[i] == '#') { pb = i; break; }
            if (u[i] == '?') {
                pb = i;
                qa = qb = i + 1;
                while (qb < n && u[qb] != '#') qb++;
                break;
            }
        }
    }
    if (pa == pb) {  /* absolute-form without a path: "/" */
        *path_off = h->sb_len;
        if (!sb_put(h, "/", 1, false) || !sb_nul(h)) return false;
    } else if (!sb_copy(h, pa, pb, path_off)) {
        return false;
    }
    return sb_copy(h, qa, qb, query_off);
}

static int on_headers_complete(http_parser *p)
{
    struct hpc *h = p->data;
    if (!close_string(h)) return fail(h, 503, "out of memory");
    h->headers_done = true;
    if (p->http_major != 1) return fail(h, 505, "HTTP version %u.%u is not supported", p->http_major, p->http_minor);
    size_t path_off, query_off;
    if (!split_url(h, &path_off, &query_off)) return fail(h, 503, "out of memory");
    if (h->n_hdr > h->hdrs_cap) {
        struct http_header *a = realloc(h->hdrs, sizeof *a * h->n_hdr);
        if (!a) return fail(h, 503, "out of memory");
        h->hdrs = a;
        h->hdrs_cap = h->n_hdr;
    }
    for (uint32_t i = 0; i < h->n_hdr; i++) {
        static char empty[1];
        char *v = h->hoff[2 * i + 1] == NO_VALUE ? empty : h->sb + h->hoff[2 * i + 1];
        size_t vl = strlen(v);
        while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) v[--vl] = 0;
        h->hdrs[i].name = h->sb + h->hoff[2 * i];
        h->hdrs[i].value = v;
    }
    h->body_max = h->lim.max_body;
    if (h->lim.big_body_path && h->lim.big_body_max > h->body_max && !strcmp(h->sb + path_off, h->lim.big_body_path) &&
        (!h->lim.big_body_ok || h->lim.big_body_ok(h->lim.big_body_user, h->hdrs, h->n_hdr)))
        h->body_max = h->lim.big_body_max;
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > h->body_max)
        return fail(h, 413, "request body of %llu bytes is larger than the limit of %zu bytes",
                    (unsigned long long)p->content_length, h->body_max);
    bool big = h->body_max > h->lim.max_body &&
               ((p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > h->lim.max_body));
    if (big && h->big && h->big->total) {
        /* held in total, not per connection: a reservation until the answer goes */
        size_t want = (p->flags & F_CONTENTLENGTH) ? (size_t)p->content_length : h->body_max;
        if (h->big->held + want > h->big->total) {
            h->big->refused++;
            return fail(h, 503, "%zu bytes of KV block pushes are held here already (at most %zu): retry later",
                        h->big->held, h->big->total);
        }
        h->big->held += want;
        h->big_taken = want;
    }
    struct http_request *r = &h->req;
    switch (p->method) {
    case HTTP_GET: r->method = HTTP_M_GET; break;
    case HTTP_POST: r->method = HTTP_M_POST; break;
    case HTTP_HEAD: r->method = HTTP_M_HEAD; break;
    default: r->method = HTTP_M_OTHER; break;
    }
    r->method_name = http_method_str((enum hp_method)p->method);
    r->path = h->sb + path_off;
    r->query = h->sb + query_off;
    r->headers = h->hdrs;
    r->n_headers = h->n_hdr;
    r->body = "";
    r->body_len = 0;
    r->keep_alive = false;

    bool has_body = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
    const char *ex = weft_http_header_get(r, "expect");
    h->expect_continue = has_body && ex && strcasecmp(ex, "100-continue") == 0 && p->http_minor >= 1;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct hpc *h = p->data;
    h->expect_continue = false;
    if (h->body_len + len > h->body_max)
        return fail(h, 413, "request body larger than the limit of %zu bytes", h->body_max);
    if (!grow(&h->body, &h->body_cap, h->body_len + len + 1)) return fail(h, 503, "out of memory");
    memcpy(h->body + h->body_len, at, len);
    h->body_len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct hpc *h = p->data;
    struct http_request *r = &h->req;
    if (h->body_len) {
        h->body[h->body_len] = 0;
        r->body = h->body;
        r->body_len = h->body_len;
    }
    /* an Upgrade or CONNECT request is answered (404/405 upstream) and the connection closed */
    r->keep_alive = http_should_keep_alive(p) && !p->upgrade;
    h->expect_continue = false;
    h->state = HPC_READY;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- the core ---- */

void weft_hpc_init(struct hpc *h, const struct http_limits *lim)
{
    memset(h, 0, sizeof *h);
    weft_hpc_limits_resolve(&h->lim, lim);
    http_parser_init(&h->p, HTTP_REQUEST);
    h->p.data = h;
    /* http-parser's compiled-in bound must not undercut ours (a global; only
     * raised when the limits ask for more than the default). */
    size_t need = h->lim.max_url + h->lim.max_header_bytes + 4 * (size_t)h->lim.max_headers + 1024;
    if (need > PARSER_DEFAULT_MAX_HEADER) http_parser_set_max_header_size(need > 0x7fffffff ? 0x7fffffff : (uint32_t)need);
}

static void big_release(struct hpc *h)
{
    if (h->big && h->big_taken) h->big->held -= h->big_taken;
    h->big_taken = 0;
}

void weft_hpc_free(struct hpc *h)
{
    big_release(h);
    free(h->sb);
    free(h->hoff);
    free(h->body);
    free(h->hdrs);
    memset(h, 0, sizeof *h);
}

void weft_hpc_next(struct hpc *h)
{
    big_release(h);
    if (h->sb_cap > KEEP_BUF) { free(h->sb); h->sb = NULL; h->sb_cap = 0; }
    if (h->body_cap > KEEP_BUF) { free(h->body); h->body = NULL; h->body_cap = 0; }
    if (h->hoff_cap > 256) { free(h->hoff); h->hoff = NULL; h->hoff_cap = 0; }
    if (h->hdrs_cap > 256) { free(h->hdrs); h->hdrs = NULL; h->hdrs_cap = 0; }
    h->sb_len = h->url_len = h->hdr_bytes = h->body_len = 0;
    h->n_hdr = 0;
    h->bstate = HPC_B_URL;
    h->headers_done = h->expect_continue = false;
    h->head_len = 0;
    h->head_skip_done = h->method_pending = false;
    memset(&h->req, 0, sizeof h->req);
    if (h->state == HPC_READY) h->state = HPC_IDLE;
    http_parser_pause(&h->p, 0);
}

size_t weft_hpc_feed(struct hpc *h, const char *data, size_t len)
{
    if (h->state == HPC_READY || h->state == HPC_ERROR || len == 0) return 0;
    /* keep the first bytes of the message (after any CR/LF between requests) */
    for (size_t i = 0; i < len && h->head_len < HPC_HEAD; i++) {
        unsigned char c = (unsigned char)data[i];
        if (!h->head_skip_done && (c == '\r' || c == '\n')) continue;
        h->head_skip_done = true;
        h->head[h->head_len++] = c;
    }
    if (h->method_pending) {
        method_decide(h);
        return len;
    }
    size_t n = http_parser_execute(&h->p, &settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&h->p);
    if (e == HPE_PAUSED) {
        if (h->state != HPC_READY) fail(h, 400, "malformed request");  /* not expected */
        return n;
    }
    if (e != HPE_OK) {
        if (h->state != HPC_ERROR) fail_parser(h, e);
        return h->method_pending ? len : n;  /* (the rest of the token is in head) */
    }
    if (n < len && h->state != HPC_ERROR) fail(h, 400, "malformed request");  /* not expected either */
    return n;
}

/* ---- public helpers ---- */

const char *weft_http_header_get(const struct http_request *req, const char *name)
{
    if (!req || !name) return NULL;
    for (uint32_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
    return NULL;
}

/* Output that is cut short at a whole piece (never inside an escape or a
 * UTF-8 sequence) when the buffer is full. */
struct jw {
    char *buf;
    size_t cap, len;
    bool full;
};

static void jw_put(struct jw *w, const char *s, size_t n)
{
    if (w->full) return;
    if (w->len + n >= w->cap) {
        w->full = true;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void jw_lit(struct jw *w, const char *s) { jw_put(w, s, strlen(s)); }

/* a JSON string literal of s (invalid UTF-8 becomes U+FFFD) */
static void jw_str(struct jw *w, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    jw_put(w, "\"", 1);
    for (size_t i = 0; i < n && !w->full;) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            jw_put(w, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            jw_put(w, e, 6);
            i++;
        } else {
            uint32_t cp;
            size_t k = (size_t)weft_utf8_decode(u + i, n - i, &cp);
            if (k) jw_put(w, s + i, k);
            else jw_put(w, "\xef\xbf\xbd", 3);  /* U+FFFD */
            i += k ? k : 1;
        }
    }
    jw_put(w, "\"", 1);
}

size_t weft_http_error_body(char *buf, size_t cap, const char *type, const char *param, const char *msg)
{
    if (!buf || cap == 0) return 0;
    struct jw w = {buf, cap, 0, false};
    jw_lit(&w, "{\"error\":{\"message\":");
    jw_str(&w, msg ? msg : "");
    jw_lit(&w, ",\"type\":");
    jw_str(&w, type ? type : "invalid_request_error");
    jw_lit(&w, ",\"param\":");
    if (param) jw_str(&w, param);
    else jw_lit(&w, "null");
    jw_lit(&w, ",\"code\":null}}");
    buf[w.len] = 0;
    return w.len;
}

struct http_parse_result weft_http_parse_bytes_ex(const struct http_limits *lim, const char *data, size_t len,
                                             const struct http_parse_opts *opt)
{
    struct http_parse_result res = {0, 0};
    struct hpc *h = malloc(sizeof *h);
    if (!h) { res.error_status = 503; return res; }
    weft_hpc_init(h, lim);
    size_t off = 0, step = opt && opt->feed_size ? opt->feed_size : len;
    while (off < len) {
        size_t n = len - off < step ? len - off : step;
        size_t used = weft_hpc_feed(h, data + off, n);
        off += used;
        if (h->state == HPC_READY) {
            res.n_requests++;
            bool keep = h->req.keep_alive;
            if (opt && opt->on_request) opt->on_request(opt->ctx, &h->req);
            weft_hpc_next(h);
            if (!keep) break;
        } else if (h->state == HPC_ERROR) {
            res.error_status = h->err_status;
            break;
        } else if (used < n) {
            break;  /* not reached: the core consumes everything unless it stops */
        }
    }
    weft_hpc_free(h);
    free(h);
    return res;
}

struct http_parse_result weft_http_parse_bytes(const struct http_limits *lim, const char *data, size_t len)
{
    return weft_http_parse_bytes_ex(lim, data, len, NULL);
}

/* ---- CORS (http.h): pure, so the unit tests drive it directly ---- */

static bool cors_allowed(const struct http_limits *lim, const char *origin)
{
    if (!lim || !lim->n_cors_origins || !origin || !*origin) return false;
    /* an origin is one line of printable ASCII; anything else is never echoed */
    for (const char *q = origin; *q; q++)
        if ((unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e) return false;
    if (strlen(origin) > 256) return false;
    for (uint32_t i = 0; i < lim->n_cors_origins; i++) {
        const char *o = lim->cors_origins[i];
        if (!strcmp(o, "*") || !strcasecmp(o, origin)) return true;
    }
    return false;
}

size_t weft_http_cors_headers(const struct http_limits *lim, const char *origin, char *buf, size_t cap)
{
    if (cap) buf[0] = 0;
    if (!cors_allowed(lim, origin)) return 0;
    int n = snprintf(buf, cap, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", origin);
    if (n < 0 || (size_t)n >= cap) {
        if (cap) buf[0] = 0;
        return 0;
    }
    return (size_t)n;
}

/* A request header a browser may send here: what the OpenAI SDKs send. */
static bool cors_header_ok(const char *h, size_t n)
{
    static const char *const exact[] = {"authorization", "content-type", "accept", "accept-language",
                                        "content-language"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strlen(exact[i]) == n && !strncasecmp(h, exact[i], n)) return true;
    return (n > 11 && !strncasecmp(h, "x-stainless-", 12)) || (n > 7 && !strncasecmp(h, "openai-", 7));
}

int weft_http_cors_preflight(const struct http_limits *lim, const char *origin, const char *req_headers, char *buf,
                        size_t cap)
{
    if (cap) buf[0] = 0;
    if (!cors_allowed(lim, origin)) return 403;
    size_t len = 0;
    int n = snprintf(buf + len, cap - len,
                     "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\nAccess-Control-Max-Age: 600\r\n");
    if (n < 0 || (size_t)n >= cap - len) return 204;
    len += (size_t)n;
    /* echo the requested headers that are allowed, in the order asked */
    bool any = false;
    for (const char *p = req_headers ? req_headers : ""; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ' && *e != '\t') e++;
        size_t hn = (size_t)(e - p);
        if (hn && hn < 64 && cors_header_ok(p, hn) && len + hn + 40 < cap) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%.*s", any ? ", " : "Access-Control-Allow-Headers: ",
                                    (int)hn, p);
            any = true;
        }
        p = e;
    }
    if (any && len + 3 < cap) len += (size_t)snprintf(buf + len, cap - len, "\r\n");
    return 204;
}
