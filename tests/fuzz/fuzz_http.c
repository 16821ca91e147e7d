/* libFuzzer target for the HTTP request parser (server/http.h): any bytes
 * must give requests within the limits, with NUL-terminated strings and
 * working header lookups, an error status from the known set, and the same
 * requests and the same refusal (or none) however the bytes are split. The error-body writer must give valid
 * UTF-8 without raw control bytes for any message.
 * Input: byte 0 picks the limits (bits 0-1) and the split (bits 2-4); the rest
 * is the stream. Built by scripts/fuzz-http.sh (cmake -DWEFT_FUZZ=ON, clang). */
#include "server/http.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static void touch(const char *s, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = h * 31 + (unsigned char)s[i];
    sink += h;
}

struct ctx {
    const struct http_limits *lim;
    uint32_t n;
};

static void on_request(void *arg, const struct http_request *r)
{
    struct ctx *c = arg;
    c->n++;
    if (!r->method_name || !r->path || !r->query || !r->body) abort();
    if ((r->method == HTTP_M_GET) != (strcmp(r->method_name, "GET") == 0)) abort();
    if ((r->method == HTTP_M_POST) != (strcmp(r->method_name, "POST") == 0)) abort();
    size_t pl = strlen(r->path), ql = strlen(r->query);
    if (pl == 0) abort();
    if (c->lim && (pl > c->lim->max_url || ql > c->lim->max_url)) abort();
    if (c->lim && r->body_len > c->lim->max_body) abort();
    if (r->body[r->body_len] != 0) abort();
    touch(r->body, r->body_len);
    touch(r->path, pl);
    if (c->lim && r->n_headers > c->lim->max_headers) abort();
    size_t hb = 0;
    for (uint32_t i = 0; i < r->n_headers; i++) {
        const char *n = r->headers[i].name, *v = r->headers[i].value;
        if (!n || !v || !n[0]) abort();
        size_t nl = strlen(n), vl = strlen(v);
        hb += nl + vl;
        for (size_t k = 0; k < nl; k++)
            if (n[k] >= 'A' && n[k] <= 'Z') abort();  /* names are lower-cased */
        if (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) abort();  /* values are trimmed */
        /* lookup finds a header of that name, whatever the case of the query */
        const char *got = weft_http_header_get(r, n);
        if (!got) abort();
        char up[64];
        if (nl < sizeof up) {
            for (size_t k = 0; k <= nl; k++) up[k] = (n[k] >= 'a' && n[k] <= 'z') ? (char)(n[k] - 32) : n[k];
            if (weft_http_header_get(r, up) != got) abort();
        }
    }
    if (c->lim && hb > c->lim->max_header_bytes) abort();
    if (weft_http_header_get(r, "x-not-sent-by-anyone-\x01") != NULL) abort();
}

static bool known_status(int s)
{
    switch (s) {
    case 0: case -1: case 400: case 405: case 413: case 414: case 431: case 505: return true;
    default: return false;
    }
}

static bool valid_utf8_no_ctl(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x20 || c == 0x7f) return false;
        if (c < 0x80) { i++; continue; }
        size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
        if (k == 0 || c > 0xf4 || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const size_t splits[8] = {1, 2, 3, 5, 7, 16, 100, 4096};
    const struct http_limits profiles[4] = {
        {0},  /* defaults */
        {.max_url = 32, .max_header_bytes = 64, .max_headers = 3, .max_body = 16},
        {.max_url = 1, .max_header_bytes = 1, .max_headers = 1, .max_body = 1},
        {.max_url = 200, .max_header_bytes = 300, .max_headers = 20, .max_body = 300},
    };
    struct http_limits resolved[4] = {
        {.max_url = 8 << 10, .max_header_bytes = 32 << 10, .max_headers = 100, .max_body = 1 << 20},
        profiles[1], profiles[2], profiles[3],
    };
    int prof = data[0] & 3;
    size_t split = splits[(data[0] >> 2) & 7];
    const char *s = (const char *)data + 1;
    size_t n = size - 1;

    struct ctx whole = {&resolved[prof], 0}, piece = {&resolved[prof], 0};
    struct http_parse_opts o1 = {.on_request = on_request, .ctx = &whole};
    struct http_parse_result a = weft_http_parse_bytes_ex(&profiles[prof], s, n, &o1);
    struct http_parse_opts o2 = {.on_request = on_request, .ctx = &piece, .feed_size = split};
    struct http_parse_result b = weft_http_parse_bytes_ex(&profiles[prof], s, n, &o2);
    if (a.n_requests != whole.n || b.n_requests != piece.n) abort();
    if (!known_status(a.error_status)) abort();
    /* A request with two faults may be refused for either, depending on which
     * callback saw its bytes first; whether it is refused may not depend on it. */
    if (a.n_requests != b.n_requests || (a.error_status != 0) != (b.error_status != 0)) abort();
    struct http_parse_result c = weft_http_parse_bytes(&profiles[prof], s, n);
    if (c.n_requests != a.n_requests || c.error_status != a.error_status) abort();

    /* the error body over the input as a message */
    char msg[512], out[1024];
    size_t m = n < sizeof msg - 1 ? n : sizeof msg - 1;
    memcpy(msg, s, m);
    msg[m] = 0;
    size_t len = weft_http_error_body(out, sizeof out, "invalid_request_error", prof & 1 ? msg : NULL, msg);
    if (len >= sizeof out || out[len] != 0 || strlen(out) != len) abort();
    if (!valid_utf8_no_ctl((const unsigned char *)out, len)) abort();
    return 0;
}
