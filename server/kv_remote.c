#include "server/kv_remote.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/kv.h"

#define BACKOFF_S 1.0      /* after a failure, no connect attempt for this long */
#define RATE_ALPHA 0.3
#define PROBE_S 30.0       /* a link judged too slow is tried again after this long */
#define BATCH_BYTES (2.0 * 1024 * 1024)  /* one MGET's worth of blocks: what a slow link costs to learn */

struct link {
    redisContext *c;
    double down_until;      /* monotonic seconds: no connect attempt before */
};

struct kv_remote {
    struct weft_engine *eng;
    char fp[WEFT_FINGERPRINT_STR];
    char host[256], path[512];
    int port;
    uint32_t ttl_ms, timeout_ms;
    /* write-behind */
    pthread_mutex_t mu;     /* queue, stats */
    pthread_cond_t cv;
    uint64_t *q;
    uint32_t q_cap, q_head, q_len;
    bool stop;
    pthread_t writer;
    struct link wlink;      /* the writer thread's */
    /* reads */
    pthread_mutex_t rmu;    /* one reader at a time on rlink */
    struct link rlink;
    int read_fd;            /* rlink's socket while a read is in flight, else -1 (under mu) */
    bool cut;               /* weft_kv_remote_cut_reads: no more reads */
    double last_probe;
    struct weft_kv_remote_stats st;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void count(struct kv_remote *r, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&r->mu);
    *field += n;
    pthread_mutex_unlock(&r->mu);
}

static void link_fail(struct kv_remote *r, struct link *l)
{
    if (l->c) redisFree(l->c);
    l->c = NULL;
    l->down_until = now_s() + BACKOFF_S;
    pthread_mutex_lock(&r->mu);
    r->st.errors++;
    r->st.up = false;
    pthread_mutex_unlock(&r->mu);
}

/* A live context, or NULL (down, or backing off). */
static redisContext *link_get(struct kv_remote *r, struct link *l)
{
    if (l->c) return l->c;
    if (now_s() < l->down_until) return NULL;
    struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    redisContext *c = r->path[0] ? redisConnectUnixWithTimeout(r->path, tv) : redisConnectWithTimeout(r->host, r->port, tv);
    if (!c || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        if (c) redisFree(c);
        link_fail(r, l);
        return NULL;
    }
    l->c = c;
    pthread_mutex_lock(&r->mu);
    r->st.up = true;
    pthread_mutex_unlock(&r->mu);
    return c;
}

static void key_for(const struct kv_remote *r, uint64_t hash, char out[96])
{
    snprintf(out, 96, "weft:kv:%s:%016llx", r->fp, (unsigned long long)hash);
}

/* ---- write-behind ---- */

#define WRITE_BATCH 64

/* Write hashes[0..n) that the engine still holds (and made itself): one
 * export under the engine's lock, then pipelined SET NX PX, one
 * self-describing value (a one-block stream) per key. */
static void write_batch(struct kv_remote *r, const uint64_t *hashes, uint32_t n)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    uint32_t nb = 0;
    if (weft_engine_kv_export_held(r->eng, hashes, n, &buf, &len, &nb) != WEFT_OK || nb == 0) {
        free(buf);  /* evicted before their turn, or imported: nothing to write */
        return;
    }
    redisContext *c = link_get(r, &r->wlink);
    if (!c) {
        free(buf);
        count(r, &r->st.write_dropped, nb);
        return;
    }
    struct weft_kvb_header h;
    if (weft_kvb_read_header(buf, len, &h) != WEFT_OK) {
        free(buf);
        return;
    }
    size_t most = weft_kvb_record_bytes_flags(&h, WEFT_KVB_BLOCK_STATE);
    unsigned char *val = malloc(h.header_bytes + most);
    if (!val) {
        free(buf);
        count(r, &r->st.write_dropped, nb);
        return;
    }
    struct weft_kvb_header one = h;
    one.n_blocks = 1;
    weft_kvb_write_header(&one, val);
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%u", r->ttl_ms);
    uint32_t sent = 0;
    const unsigned char *b = buf + h.header_bytes;
    for (uint32_t i = 0; i < nb; i++) {
        uint32_t flags = 0;
        for (int k = 0; k < 4; k++) flags |= (uint32_t)b[80 + k] << (8 * k);
        const size_t rec = weft_kvb_record_bytes_flags(&h, flags);
        memcpy(val + h.header_bytes, b, rec);
        uint64_t hash = 0;
        for (int k = 0; k < 8; k++) hash |= (uint64_t)b[8 + k] << (8 * k);
        b += rec;
        char key[96];
        key_for(r, hash, key);
        /* a block with a hybrid's state checkpoint replaces one written without it (the same
         * K/V: blocks are named by their content); others go only where none is yet */
        const bool ck = flags & WEFT_KVB_BLOCK_STATE;
        const char *argv[6] = {"SET", key, (const char *)val, "PX", ttl, "NX"};
        size_t argl[6] = {3, strlen(key), h.header_bytes + rec, 2, strlen(ttl), 2};
        if (redisAppendCommandArgv(c, ck ? 5 : 6, argv, argl) != REDIS_OK) break;
        sent++;
    }
    free(val);
    free(buf);
    uint64_t ok = 0, errs = nb - sent;
    for (uint32_t i = 0; i < sent; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) {
            link_fail(r, &r->wlink);
            errs += sent - i;
            break;
        }
        /* OK: written; nil: another instance wrote it first; an error (OOM past maxmemory): counted */
        if (rep->type == REDIS_REPLY_STATUS) ok++;
        else if (rep->type == REDIS_REPLY_ERROR) errs++;
        freeReplyObject(rep);
    }
    pthread_mutex_lock(&r->mu);
    r->st.written += ok;
    r->st.write_errors += errs;
    pthread_mutex_unlock(&r->mu);
}

static void *writer_main(void *arg)
{
    struct kv_remote *r = arg;
    uint64_t batch[WRITE_BATCH];
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->q_len && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop) break;
        uint32_t n = 0;
        while (r->q_len && n < WRITE_BATCH) {
            batch[n++] = r->q[r->q_head];
            r->q_head = (r->q_head + 1) % r->q_cap;
            r->q_len--;
        }
        pthread_mutex_unlock(&r->mu);
        write_batch(r, batch, n);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void weft_kv_remote_stored(struct kv_remote *r, uint64_t hash)
{
    pthread_mutex_lock(&r->mu);
    if (r->q_len == r->q_cap) {
        r->st.write_dropped++;
    } else {
        r->q[(r->q_head + r->q_len) % r->q_cap] = hash;
        r->q_len++;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- reads ---- */

static void ewma(double *avg, double x) { *avg = *avg > 0 ? *avg + RATE_ALPHA * (x - *avg) : x; }

/* One command and its whole reply by deadline (monotonic seconds): the
 * bound is on the reply, not on each read, so a link that trickles a byte at
 * a time cannot stretch it. NULL on a failure or the deadline (the
 * connection is then mid-reply: the caller drops it). */
static redisReply *command_by(redisContext *c, int argc, const char **argv, const size_t *argl, double deadline,
                              size_t *received)
{
    *received = 0;
    if (redisAppendCommandArgv(c, argc, argv, argl) != REDIS_OK) return NULL;
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) return NULL;
    void *reply = NULL;
    for (;;) {
        if (redisGetReplyFromReader(c, &reply) != REDIS_OK) return NULL;
        if (reply) return reply;
        double left = deadline - now_s();
        if (left <= 0) return NULL;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int k = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return NULL;
        size_t before = c->reader->len;  /* the reader compacts only in GetReply: the growth is what came */
        if (redisBufferRead(c) != REDIS_OK) return NULL;
        *received += c->reader->len - before;
    }
}

/* One MGET of keys for hashes[0..k), its whole reply within limit_s,
 * imported in order up to the first miss; rmu held. *hits, *bytes: what
 * came; false when the link failed (or was cut at the limit: then the rate
 * is what came in that time). */
static bool mget_batch(struct kv_remote *r, redisContext *c, const uint64_t *hashes, uint32_t k, double limit_s,
                       uint32_t *hits, uint64_t *bytes, uint32_t *imported, bool *gap)
{
    *hits = 0;
    *bytes = 0;
    *gap = false;
    const char **argv = malloc(sizeof *argv * (k + 1));
    size_t *argl = malloc(sizeof *argl * (k + 1));
    char (*keys)[96] = malloc(sizeof *keys * k);
    if (!argv || !argl || !keys) {
        free(argv);
        free(argl);
        free(keys);
        return false;
    }
    argv[0] = "MGET";
    argl[0] = 4;
    for (uint32_t i = 0; i < k; i++) {
        key_for(r, hashes[i], keys[i]);
        argv[i + 1] = keys[i];
        argl[i + 1] = strlen(keys[i]);
    }
    double t0 = now_s();
    pthread_mutex_lock(&r->mu);
    bool cut = r->cut;
    r->read_fd = cut ? -1 : c->fd;
    pthread_mutex_unlock(&r->mu);
    size_t received = 0;
    redisReply *rep = cut ? NULL : command_by(c, (int)k + 1, argv, argl, t0 + limit_s, &received);
    pthread_mutex_lock(&r->mu);
    r->read_fd = -1;
    pthread_mutex_unlock(&r->mu);
    double dt = now_s() - t0;
    free(argv);
    free(argl);
    free(keys);
    if (!rep) {
        link_fail(r, &r->rlink);
        pthread_mutex_lock(&r->mu);
        r->st.stalled = dt >= 0.9 * limit_s;  /* cut at its bound: a link that stalls or trickles */
        pthread_mutex_unlock(&r->mu);
        if (dt >= 0.9 * limit_s) {
            /* cut at its bound: the link gave what came in that time */
            pthread_mutex_lock(&r->mu);
            r->st.bytes_per_s = (double)(received > 1 ? received : 1) / dt;
            pthread_mutex_unlock(&r->mu);
        }
        return false;
    }
    uint64_t rejected = 0;
    if (rep->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < rep->elements; i++) {
            redisReply *e = rep->element[i];
            if (e->type != REDIS_REPLY_STRING) {
                *gap = true;  /* the chain is usable up to its first gap */
                break;
            }
            *bytes += e->len;
            uint32_t added = 0;
            if (weft_engine_kv_import(r->eng, (const unsigned char *)e->str, e->len, &added) != WEFT_OK) {
                rejected++;
                *gap = true;
                break;
            }
            (*hits)++;
            *imported += added;
        }
    } else {
        *gap = true;
        count(r, &r->st.errors, 1);
    }
    freeReplyObject(rep);
    pthread_mutex_lock(&r->mu);
    r->st.stalled = false;
    r->st.rejected += rejected;
    /* the round trip from small answers, the rate from large ones */
    if (*bytes < 65536) ewma(&r->st.rtt_s, dt);
    else ewma(&r->st.bytes_per_s, (double)*bytes / (dt > 1e-6 ? dt : 1e-6));
    pthread_mutex_unlock(&r->mu);
    return true;
}

double weft_kv_remote_now(void) { return now_s(); }

double weft_kv_remote_timeout_s(const struct kv_remote *r) { return r->timeout_ms / 1000.0; }

uint32_t weft_kv_remote_lacking(struct kv_remote *r, const int32_t *prompt, uint32_t n)
{
    if (n < 2) return 0;
    uint32_t nb = (n - 1) / WEFT_KV_BLOCK_TOKENS;
    if (nb == 0) return 0;
    uint64_t *hashes = malloc(sizeof *hashes * nb);
    if (!hashes) return 0;
    uint64_t h = 0;
    for (uint32_t i = 0; i < nb; i++) hashes[i] = h = weft_kv_block_hash(h, prompt + (size_t)i * WEFT_KV_BLOCK_TOKENS);
    uint32_t held = weft_engine_kv_held(r->eng, hashes, nb);
    free(hashes);
    return nb - held;
}

void weft_kv_remote_cut_reads(struct kv_remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->cut = true;
    if (r->read_fd >= 0) shutdown(r->read_fd, SHUT_RDWR);  /* the blocked read returns */
    pthread_mutex_unlock(&r->mu);
}

uint32_t weft_kv_remote_fetch(struct kv_remote *r, const int32_t *prompt, uint32_t n, double deadline)
{
    if (n < 2) return 0;
    uint32_t nb = (n - 1) / WEFT_KV_BLOCK_TOKENS;  /* the blocks a prompt can take: one token is left to compute */
    if (nb == 0) return 0;
    uint64_t *hashes = malloc(sizeof *hashes * nb);
    if (!hashes) return 0;
    uint64_t h = 0;
    for (uint32_t i = 0; i < nb; i++) hashes[i] = h = weft_kv_block_hash(h, prompt + (size_t)i * WEFT_KV_BLOCK_TOKENS);
    uint32_t held = weft_engine_kv_held(r->eng, hashes, nb), imported = 0;
    if (held == nb) {
        free(hashes);
        return 0;
    }
    struct weft_engine_stats es;
    weft_engine_stats(r->eng, &es);
    /* a one-block value: a one-run header, the block's meta, payload, MAC and CRC */
    double block_bytes = (double)(weft_engine_kv_block_bytes(r->eng) + 92 + WEFT_KVB_BLOCK_META + WEFT_KVB_MAC_BYTES + 4);
    double block_s = es.prefill_tps > 0 ? WEFT_KV_BLOCK_TOKENS / es.prefill_tps : 0;  /* computing one block */
    /* batches of about BATCH_BYTES: each one measures the link, and the
     * rest is fetched only while that still beats computing it */
    uint32_t per = block_bytes >= BATCH_BYTES ? 1 : (uint32_t)(BATCH_BYTES / block_bytes);
    double t_now = now_s();
    pthread_mutex_lock(&r->mu);
    /* a link judged too slow is measured again when it has not been for PROBE_S */
    bool probe = r->st.bytes_per_s > 0 && t_now - r->last_probe > PROBE_S;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&r->rmu);
    uint32_t off = held, batches = 0;
    uint64_t hits = 0, got = 0;
    while (off < nb) {
        double left_s = deadline > 0 ? deadline - now_s() : 0;
        if (deadline > 0 && left_s <= 0) break;  /* recomputing the rest is due now */
        uint32_t left = nb - off, k = left < per ? left : per;
        pthread_mutex_lock(&r->mu);
        double bw = r->st.bytes_per_s, rtt = r->st.rtt_s;
        pthread_mutex_unlock(&r->mu);
        if (!(probe && batches == 0) && bw > 0 && block_s > 0 && rtt + k * block_bytes / bw >= k * block_s) break;
        redisContext *c = link_get(r, &r->rlink);
        if (!c) break;
        /* a batch that takes longer than computing its blocks would is
         * given up (the bound is on its whole reply, within the fetch's
         * deadline: a link that trickles is cut and measured, and the next
         * batch is judged by that) */
        double limit_s = r->timeout_ms / 1000.0 > k * block_s ? r->timeout_ms / 1000.0 : k * block_s;
        if (deadline > 0 && limit_s > left_s) limit_s = left_s > 0.001 ? left_s : 0.001;
        uint32_t bh = 0;
        uint64_t bb = 0;
        bool gap = false;
        bool ok = mget_batch(r, c, hashes + off, k, limit_s, &bh, &bb, &imported, &gap);
        batches++;
        hits += bh;
        got += bb;
        off += bh;
        if (!ok || gap) break;
    }
    pthread_mutex_unlock(&r->rmu);
    pthread_mutex_lock(&r->mu);
    if (batches) r->last_probe = now_s();  /* the link was just measured */
    if (batches) r->st.chose_fetch++;
    else r->st.chose_recompute++;
    r->st.lookups += batches;
    r->st.hit_blocks += hits;
    r->st.miss_blocks += nb - held - hits;
    r->st.fetched_bytes += got;
    pthread_mutex_unlock(&r->mu);
    free(hashes);
    return imported;
}

/* ---- life ---- */

static weft_status parse_url(struct kv_remote *r, const char *url)
{
    if (!strncmp(url, "unix://", 7)) {
        if (strlen(url + 7) == 0 || strlen(url + 7) >= sizeof r->path)
            return weft_error(WEFT_ERR_INVALID_ARG, "--kv-remote: bad unix socket path in '%s'", url);
        snprintf(r->path, sizeof r->path, "%s", url + 7);
        return WEFT_OK;
    }
    if (strncmp(url, "redis://", 8) != 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "--kv-remote: '%s' is not redis://HOST:PORT or unix:///PATH", url);
    const char *hp = url + 8, *colon = strrchr(hp, ':');
    size_t hl = colon ? (size_t)(colon - hp) : strlen(hp);
    if (hl == 0 || hl >= sizeof r->host)
        return weft_error(WEFT_ERR_INVALID_ARG, "--kv-remote: no host in '%s'", url);
    memcpy(r->host, hp, hl);
    r->host[hl] = 0;
    r->port = 6379;
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end && *end != '/') return weft_error(WEFT_ERR_INVALID_ARG, "--kv-remote: bad port in '%s'", url);
        if (p < 1 || p > 65535) return weft_error(WEFT_ERR_INVALID_ARG, "--kv-remote: bad port in '%s'", url);
        r->port = (int)p;
    }
    return WEFT_OK;
}

weft_status weft_kv_remote_create(const struct kv_remote_config *cfg, struct weft_engine *eng,
                             const struct weft_fingerprint *fp, struct kv_remote **out)
{
    *out = NULL;
    struct kv_remote *r = calloc(1, sizeof *r);
    if (!r) return weft_error(WEFT_ERR_NOMEM, "kv remote: out of memory");
    weft_status st = parse_url(r, cfg->url ? cfg->url : "");
    if (st != WEFT_OK) {
        free(r);
        return st;
    }
    r->eng = eng;
    weft_fingerprint_str(fp, r->fp);
    r->ttl_ms = cfg->ttl_ms ? cfg->ttl_ms : 3600 * 1000;
    r->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 250;
    r->q_cap = cfg->queue ? cfg->queue : 4096;
    r->q = malloc(sizeof *r->q * r->q_cap);
    r->last_probe = now_s();
    r->read_fd = -1;
    if (!r->q) {
        free(r);
        return weft_error(WEFT_ERR_NOMEM, "kv remote: out of memory");
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->rmu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->writer, NULL, writer_main, r) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->rmu);
        pthread_cond_destroy(&r->cv);
        free(r->q);
        free(r);
        return weft_error(WEFT_ERR_NOMEM, "kv remote: cannot start the writer thread");
    }
    *out = r;
    return WEFT_OK;
}

void weft_kv_remote_free(struct kv_remote *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->writer, NULL);
    if (r->wlink.c) redisFree(r->wlink.c);
    if (r->rlink.c) redisFree(r->rlink.c);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->rmu);
    pthread_cond_destroy(&r->cv);
    free(r->q);
    free(r);
}

void weft_kv_remote_stats(struct kv_remote *r, struct weft_kv_remote_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}
