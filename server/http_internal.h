/* Private to server/http*.c: the request parser core shared by the socket
 * server (http.c) and weft_http_parse_bytes (http_parse.c). No sockets here.
 *
 * A core turns a byte stream into requests one at a time: weft_hpc_feed() stops
 * (pauses http-parser) right after a complete request, so bytes of the next
 * pipelined request stay with the caller until weft_hpc_next(). */
#ifndef WEFT_SERVER_HTTP_INTERNAL_H
#define WEFT_SERVER_HTTP_INTERNAL_H

/* http-parser also names an enum http_method (its method codes); seen from
 * here it is enum hp_method, so http.h's enum http_method stays the API's. */
#define http_method hp_method
#include <http_parser.h>
#undef http_method

#include "server/http.h"

enum hpc_state {
    HPC_IDLE,   /* between requests: nothing of the next one seen yet */
    HPC_MSG,    /* a request has begun and is not complete */
    HPC_READY,  /* a complete request is in hpc.req; call weft_hpc_next() when done with it */
    HPC_ERROR,  /* the stream is broken: answer err_status (or close if -1) and close */
};

enum { HPC_B_URL, HPC_B_FIELD, HPC_B_VALUE };

#define HPC_HEAD 24  /* first bytes of each message, kept to classify errors */

struct hpc {
    http_parser p;
    struct http_limits lim;     /* resolved: no zero fields */
    enum hpc_state state;
    int err_status;             /* HPC_ERROR: 4xx/5xx to send, or -1 for "just close" */
    char err_msg[160];

    /* the request being built */
    char *sb;                   /* url, then lower-cased header names and values, NUL-separated */
    size_t sb_len, sb_cap;
    size_t url_len, hdr_bytes;
    uint32_t *hoff;             /* 2 per header: name and value offsets into sb */
    uint32_t n_hdr, hoff_cap;
    uint8_t bstate;             /* what the parser is handing us: HPC_B_URL/FIELD/VALUE */
    bool headers_done;
    char *body;
    size_t body_len, body_cap;
    size_t body_max;            /* this request's limit: max_body, or big_body_max for its path */
    struct http_header *hdrs;
    uint32_t hdrs_cap;
    bool expect_continue;       /* headers complete, "Expect: 100-continue", body not read yet */
    unsigned char head[HPC_HEAD];
    uint32_t head_len;
    bool head_skip_done;        /* leading CR/LF before the message skipped */
    bool method_pending;        /* http-parser rejected the method: wait for the whole token */
    struct http_request req;    /* valid in HPC_READY (pointers into sb/body) */
    struct http_big_budget *big; /* the listener's (NULL: none); big_taken of it is this request's */
    size_t big_taken;
};

/* Fills every zero field of *lim (or all, if lim is NULL) with its default. */
void weft_hpc_limits_resolve(struct http_limits *out, const struct http_limits *lim);
void weft_hpc_init(struct hpc *h, const struct http_limits *lim);
void weft_hpc_free(struct hpc *h);
/* Parses up to len bytes; returns how many were consumed. Stops early on a
 * complete request (HPC_READY) or an error (HPC_ERROR). */
size_t weft_hpc_feed(struct hpc *h, const char *data, size_t len);
/* After HPC_READY: forget the request, get ready for the next one. */
void weft_hpc_next(struct hpc *h);

/* "HTTP/1.1 100 Continue\r\n\r\n" is due: headers complete and body not yet received */
static inline bool hpc_wants_continue(const struct hpc *h)
{
    return h->state == HPC_MSG && h->expect_continue;
}

#endif
