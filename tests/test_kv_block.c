/* KV block format v5 (base/kv_block.h) without a model: a stream written
 * and read back; every single-bit flip, every truncation, a foreign model,
 * layout or KV type, a partial layer range and a block under a wrong name
 * are refused; MACs: made under the fleet secret, checked under it or the
 * previous one, and a block without one, under another secret, or moved
 * under another header is refused; a layout of several runs (the families
 * to come) round-trips and an unknown kind is refused; F16 <-> Q8_0
 * conversion only when asked; a hybrid's state checkpoints ride in the
 * records of the blocks they end, under the CRC and the MAC; and the pool's import: a block put in is
 * byte-identical when read back and serves a prefix hit, counted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "base/kv_block.h"
#include "base/quant.h"
#include "tests/check.h"

static const struct weft_fingerprint FP = {0x0123456789abcdefull, 0xfedcba9876543210ull};

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* F16 payloads of small random values */
static void fill_f16(weft_half *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = weft_f32_to_half(((float)(rnd() % 2001) - 1000.0f) / 500.0f);
}

struct stream {
    unsigned char *buf;
    size_t n;
    struct weft_kvb_header h;
    int32_t toks[8][WEFT_KVB_TOKENS];
    uint64_t hash[8], parent[8];
    unsigned char *payload[8];
    struct weft_kvb_keys keys;
};

static void make_stream_keyed(struct stream *s, const struct weft_kvb_keys *keys, uint32_t n_blocks, uint32_t n_layer,
                              uint32_t n_kv_head, uint32_t head_dim, bool count_in_header)
{
    memset(s, 0, sizeof *s);
    if (keys) s->keys = *keys;
    s->h = (struct weft_kvb_header){.fp = FP, .n_layer = n_layer, .layer0 = 0, .n_layers = n_layer,
                                    .n_blocks = count_in_header ? n_blocks : 0, .mac = s->keys.n > 0};
    weft_kvb_layout_attn(&s->h, WEFT_TYPE_F16, n_layer, n_kv_head, head_dim);
    CHECK(weft_kvb_header_init(&s->h) == WEFT_OK);
    size_t rec = weft_kvb_record_bytes(&s->h);
    s->n = s->h.header_bytes + n_blocks * rec;
    s->buf = malloc(s->n);
    weft_kvb_write_header(&s->h, s->buf);
    uint64_t parent = 0;
    for (uint32_t b = 0; b < n_blocks; b++) {
        for (int i = 0; i < WEFT_KVB_TOKENS; i++) s->toks[b][i] = (int32_t)(rnd() % 50000);
        s->parent[b] = parent;
        s->hash[b] = parent = weft_kv_block_hash(parent, s->toks[b]);
        s->payload[b] = malloc(s->h.payload_bytes);
        fill_f16((weft_half *)s->payload[b], s->h.payload_bytes / 2);
        weft_kvb_write_block(&s->h, &s->keys, s->parent[b], s->hash[b], s->toks[b], 0, s->payload[b], NULL,
                             s->buf + s->h.header_bytes + b * rec);
    }
}

static void make_stream(struct stream *s, uint32_t n_blocks, uint32_t n_layer, uint32_t n_kv_head, uint32_t head_dim,
                        bool count_in_header)
{
    make_stream_keyed(s, NULL, n_blocks, n_layer, n_kv_head, head_dim, count_in_header);
}

static void free_stream(struct stream *s)
{
    free(s->buf);
    for (int b = 0; b < 8; b++) free(s->payload[b]);
}

struct seen {
    const struct stream *s;
    uint32_t n;
    bool same;
};

static weft_status on_block(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b)
{
    struct seen *v = user;
    const struct stream *s = v->s;
    uint32_t i = v->n++;
    v->same = v->same && i < 8 && b->parent == s->parent[i] && b->hash == s->hash[i] &&
              !memcmp(b->tokens, s->toks[i], sizeof b->tokens) && !memcmp(b->payload, s->payload[i], h->payload_bytes);
    return WEFT_OK;
}

static const struct weft_kvb_expect *expect_for(const struct stream *s, struct weft_kvb_expect *w)
{
    *w = (struct weft_kvb_expect){.fp = FP, .n_layer = s->h.n_layer, .n_layout = s->h.n_layout};
    memcpy(w->layout, s->h.layout, sizeof w->layout[0] * s->h.n_layout);
    return w;
}

static void round_trip(void)
{
    CHECK_EQ_INT(weft_crc32c(0, "123456789", 9), 0xE3069283u);  /* the CRC-32C check value */
    for (int counted = 0; counted < 2; counted++) {
        struct stream s;
        make_stream(&s, 3, 2, 2, 32, counted);
        struct weft_kvb_expect w;
        struct weft_kvb_header h;
        struct seen v = {&s, 0, true};
        uint32_t good;
        CHECK(weft_kvb_read_stream(s.buf, s.n, expect_for(&s, &w), &h, on_block, &v, &good) == WEFT_OK);
        CHECK(good == 3 && v.n == 3 && v.same);
        CHECK(h.payload_bytes == 2 * 2 * 16 * 2 * 32 * 2 && h.fp.hi == FP.hi && h.fp.lo == FP.lo);
        free_stream(&s);
    }
}

/* Every bit of every byte, flipped alone, and every shorter length: refused
 * (a bad block stops the stream; the blocks before it may be delivered, but
 * never the bad one or any after it). */
static void every_flip_and_truncation_is_refused(void)
{
    struct stream s;
    make_stream(&s, 2, 1, 1, 32, true);
    struct weft_kvb_expect w;
    expect_for(&s, &w);
    size_t rec = weft_kvb_record_bytes(&s.h);
    uint32_t accepted = 0, delivered_bad = 0, tried = 0;
    for (size_t i = 0; i < s.n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            s.buf[i] ^= (unsigned char)(1u << bit);
            struct weft_kvb_header h;
            struct seen v = {&s, 0, true};
            uint32_t good;
            weft_status st = weft_kvb_read_stream(s.buf, s.n, &w, &h, on_block, &v, &good);
            tried++;
            accepted += st == WEFT_OK;
            /* the flipped byte's block (or the header) must not be delivered */
            uint32_t bad_block = i < s.h.header_bytes ? 0 : (uint32_t)((i - s.h.header_bytes) / rec);
            delivered_bad += !v.same || good > bad_block;
            CHECK_MSG(st == WEFT_OK || weft_last_error()[0], "byte %zu bit %d: refused without a message", i, bit);
            s.buf[i] ^= (unsigned char)(1u << bit);
        }
    }
    CHECK_EQ_INT(accepted, 0);
    CHECK_EQ_INT(delivered_bad, 0);
    uint32_t short_ok = 0;
    for (size_t n = 0; n < s.n; n++) {
        struct weft_kvb_header h;
        uint32_t good;
        short_ok += weft_kvb_read_stream(s.buf, n, &w, &h, NULL, NULL, &good) == WEFT_OK || good;
    }
    CHECK_EQ_INT(short_ok, 0);
    printf("  %u single-bit flips and %zu truncations of a %zu-byte stream: all refused\n", tried, s.n, s.n);
    free_stream(&s);
}

static void foreign_model_shape_and_type_are_mismatches(void)
{
    struct stream s;
    make_stream(&s, 1, 2, 2, 32, true);
    struct weft_kvb_expect w;
    struct weft_kvb_header h;
    uint32_t good;
    expect_for(&s, &w);
    w.fp.lo ^= 1;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_ERR_MISMATCH && good == 0);
    CHECK(strstr(weft_last_error(), "made by model") != NULL);
    expect_for(&s, &w);
    w.layout[0].a = 3;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_ERR_MISMATCH);
    expect_for(&s, &w);
    w.layout[0].type = WEFT_TYPE_Q8_0;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_ERR_MISMATCH);
    CHECK(strstr(weft_last_error(), "conversion") != NULL);
    w.allow_convert = true;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_OK && good == 1);
    /* a shape the format cannot hold is refused at write time */
    struct weft_kvb_header bad = s.h;
    bad.layer0 = 1;  /* 1 + 2 layers past 2 */
    CHECK(weft_kvb_header_init(&bad) == WEFT_ERR_INVALID_ARG);
    bad = s.h;
    bad.layout[0].type = WEFT_TYPE_Q4_0;
    CHECK(weft_kvb_header_init(&bad) == WEFT_ERR_INVALID_ARG);
    bad = s.h;
    bad.layout[0].n_layers = 1;  /* runs that do not cover the range */
    CHECK(weft_kvb_header_init(&bad) == WEFT_ERR_INVALID_ARG);
    free_stream(&s);
}

/* A stream whose header names fewer layers than the model has (its CRCs
 * good, its records whole for that range) is refused before any block:
 * imported, its one-layer payloads would stand for a whole block's bytes. */
static void a_partial_layer_range_is_refused(void)
{
    struct stream full;
    make_stream(&full, 2, 3, 1, 32, true);
    struct weft_kvb_expect w;
    expect_for(&full, &w);
    const uint32_t ranges[][2] = {{0, 1}, {1, 2}, {2, 1}, {0, 2}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        struct weft_kvb_header p = full.h;
        p.layer0 = ranges[r][0];
        p.n_layers = ranges[r][1];
        p.layout[0].n_layers = ranges[r][1];
        CHECK(weft_kvb_header_init(&p) == WEFT_OK && p.payload_bytes < full.h.payload_bytes);
        size_t rec = weft_kvb_record_bytes(&p), n = p.header_bytes + 2 * rec;
        unsigned char *buf = malloc(n);
        weft_kvb_write_header(&p, buf);
        for (int b = 0; b < 2; b++)
            weft_kvb_write_block(&p, NULL, full.parent[b], full.hash[b], full.toks[b], 0, full.payload[b], NULL,
                                 buf + p.header_bytes + b * rec);
        struct weft_kvb_header h;
        uint32_t good = 9;
        CHECK(weft_kvb_read_stream(buf, n, &w, &h, NULL, NULL, &good) == WEFT_ERR_FORMAT && good == 0);
        CHECK(strstr(weft_last_error(), "this cache needs all 3") != NULL);
        /* the reader without a model to hold it to still reads it (a range is a valid stream) */
        CHECK(weft_kvb_read_stream(buf, n, NULL, &h, NULL, NULL, &good) == WEFT_OK && good == 2);
        free(buf);
    }
    free_stream(&full);
}

/* MACs under the fleet secret: a signed stream reads under its key and
 * under a rotation's (the new secret with this one as previous); an
 * unsigned stream, a stream signed under another secret, a flipped tag
 * (its CRC recomputed) and a block moved under another model's header
 * (CRCs good) are refused with WEFT_ERR_AUTH; a one-block stream cut from a
 * longer one (n_blocks rewritten, as the Redis tier stores them) keeps its
 * MAC. Without keys the reader does not look at MACs. */
static void macs_bind_blocks_to_the_fleet_secret(void)
{
    struct weft_kvb_keys k1, k2, rot, none = {.n = 0};
    CHECK(weft_kvb_keys_derive("fleet-secret-one-0001", NULL, &k1) == WEFT_OK && k1.n == 1);
    CHECK(weft_kvb_keys_derive("fleet-secret-two-0002", NULL, &k2) == WEFT_OK);
    CHECK(weft_kvb_keys_derive("fleet-secret-two-0002", "fleet-secret-one-0001", &rot) == WEFT_OK && rot.n == 2);
    CHECK(weft_kvb_keys_derive("short", NULL, &k2) == WEFT_ERR_INVALID_ARG);
    struct stream s, plain;
    make_stream_keyed(&s, &k1, 3, 2, 2, 32, true);
    make_stream(&plain, 3, 2, 2, 32, true);
    struct weft_kvb_expect w;
    struct weft_kvb_header h;
    uint32_t good;
    expect_for(&s, &w);
    CHECK(s.h.mac && weft_kvb_record_bytes(&s.h) == weft_kvb_record_bytes(&plain.h) + WEFT_KVB_MAC_BYTES);
    w.keys = &k1;
    struct seen v = {&s, 0, true};
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, on_block, &v, &good) == WEFT_OK && good == 3 && v.same);
    w.keys = &rot;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_OK && good == 3);
    w.keys = &k2;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_ERR_AUTH && good == 0);
    CHECK(strstr(weft_last_error(), "fleet secret") != NULL);
    w.keys = &k1;
    CHECK(weft_kvb_read_stream(plain.buf, plain.n, &w, &h, NULL, NULL, &good) == WEFT_ERR_AUTH && good == 0);
    w.keys = &none;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_OK && good == 3);
    /* a flipped tag byte, the record's CRC made good again */
    size_t rec = weft_kvb_record_bytes(&s.h);
    unsigned char *b1 = s.buf + s.h.header_bytes + rec, *tag = b1 + WEFT_KVB_BLOCK_META + s.h.payload_bytes;
    tag[5] ^= 0x20;
    uint32_t crc = weft_crc32c(0, b1, rec - 4);
    for (int i = 0; i < 4; i++) b1[rec - 4 + i] = (unsigned char)(crc >> (8 * i));
    w.keys = &k1;
    CHECK(weft_kvb_read_stream(s.buf, s.n, &w, &h, NULL, NULL, &good) == WEFT_ERR_AUTH && good == 1);
    tag[5] ^= 0x20;
    crc = weft_crc32c(0, b1, rec - 4);
    for (int i = 0; i < 4; i++) b1[rec - 4 + i] = (unsigned char)(crc >> (8 * i));
    /* the same blocks under another model's header (its CRC good): the MAC binds the header */
    struct weft_kvb_header other = s.h;
    other.fp.lo ^= 1;
    unsigned char *moved = malloc(s.n);
    memcpy(moved, s.buf, s.n);
    weft_kvb_write_header(&other, moved);
    struct weft_kvb_expect wo = w;
    wo.fp = other.fp;
    CHECK(weft_kvb_read_stream(moved, s.n, &wo, &h, NULL, NULL, &good) == WEFT_ERR_AUTH && good == 0);
    free(moved);
    /* block 2 alone, as a one-block stream */
    struct weft_kvb_header one = s.h;
    one.n_blocks = 1;
    unsigned char *val = malloc(one.header_bytes + rec);
    weft_kvb_write_header(&one, val);
    memcpy(val + one.header_bytes, s.buf + s.h.header_bytes + 2 * rec, rec);
    CHECK(weft_kvb_read_stream(val, one.header_bytes + rec, &w, &h, NULL, NULL, &good) == WEFT_OK && good == 1);
    free(val);
    free_stream(&s);
    free_stream(&plain);
}

/* A layout of several runs (a family whose layers cache differently: here
 * two attention shapes, as per-layer head dims would be) is written and
 * read back, its payload the runs' bytes in layer order; a reader whose
 * layout differs refuses it; an unknown kind is refused. */
static void a_layout_of_several_runs_round_trips(void)
{
    struct weft_kvb_header h = {.fp = FP, .n_layer = 5, .layer0 = 0, .n_layers = 5, .n_blocks = 1, .n_layout = 2};
    h.layout[0] = (struct weft_kvb_layout){.kind = WEFT_KVB_ATTN, .type = WEFT_TYPE_F16, .n_layers = 3, .a = 2, .b = 32};
    h.layout[1] = (struct weft_kvb_layout){.kind = WEFT_KVB_ATTN, .type = WEFT_TYPE_F16, .n_layers = 2, .a = 1, .b = 64};
    CHECK(weft_kvb_header_init(&h) == WEFT_OK);
    CHECK_EQ_INT(h.payload_bytes, 3 * 2 * weft_kv_block_layer_bytes(WEFT_TYPE_F16, 2, 32) +
                                      2 * 2 * weft_kv_block_layer_bytes(WEFT_TYPE_F16, 1, 64));
    CHECK_EQ_INT(h.header_bytes, 72 + 2 * 16 + 4);
    size_t rec = weft_kvb_record_bytes(&h), n = h.header_bytes + rec;
    unsigned char *buf = malloc(n), *payload = malloc(h.payload_bytes);
    fill_f16((weft_half *)payload, h.payload_bytes / 2);
    int32_t toks[WEFT_KVB_TOKENS];
    for (int i = 0; i < WEFT_KVB_TOKENS; i++) toks[i] = 100 + i;
    uint64_t hash = weft_kv_block_hash(0, toks);
    weft_kvb_write_header(&h, buf);
    weft_kvb_write_block(&h, NULL, 0, hash, toks, 0, payload, NULL, buf + h.header_bytes);
    struct weft_kvb_expect w = {.fp = FP, .n_layer = 5, .n_layout = 2};
    memcpy(w.layout, h.layout, sizeof h.layout[0] * 2);
    struct weft_kvb_header got;
    uint32_t good;
    CHECK(weft_kvb_read_stream(buf, n, &w, &got, NULL, NULL, &good) == WEFT_OK && good == 1);
    CHECK(got.n_layout == 2 && got.layout[1].b == 64 && got.payload_bytes == h.payload_bytes);
    /* a reader whose layers are all of the first shape */
    w.n_layout = 1;
    w.layout[0] = (struct weft_kvb_layout){.kind = WEFT_KVB_ATTN, .type = WEFT_TYPE_F16, .n_layers = 5, .a = 2, .b = 32};
    CHECK(weft_kvb_read_stream(buf, n, &w, &got, NULL, NULL, &good) == WEFT_ERR_MISMATCH);
    /* a kind this reader does not know, its CRC good */
    h.layout[1].kind = 9;
    unsigned char hb[WEFT_KVB_HEADER_MAX];
    h.header_bytes = 72 + 2 * 16 + 4;
    weft_kvb_write_header(&h, hb);
    CHECK(weft_kvb_read_header(hb, h.header_bytes, &got) == WEFT_ERR_FORMAT);
    CHECK(strstr(weft_last_error(), "kind 9") != NULL);
    /* SHARED runs (layers reading another's K/V, Gemma 4): no payload, no shape */
    h.layout[1] = (struct weft_kvb_layout){.kind = WEFT_KVB_SHARED, .type = WEFT_TYPE_F16, .n_layers = 2};
    CHECK(weft_kvb_header_init(&h) == WEFT_OK);
    CHECK_EQ_INT(h.payload_bytes, 3 * 2 * weft_kv_block_layer_bytes(WEFT_TYPE_F16, 2, 32));
    weft_kvb_write_header(&h, hb);
    CHECK(weft_kvb_read_header(hb, h.header_bytes, &got) == WEFT_OK && got.layout[1].kind == WEFT_KVB_SHARED);
    h.layout[1].a = 1;  /* a shape: not a SHARED run */
    CHECK(weft_kvb_header_init(&h) == WEFT_ERR_INVALID_ARG);
    free(buf);
    free(payload);
}

static void recrc(unsigned char *rec, size_t len)
{
    uint32_t crc = weft_crc32c(0, rec, len - 4);
    for (int i = 0; i < 4; i++) rec[len - 4 + i] = (unsigned char)(crc >> (8 * i));
}

struct seen_st {
    const unsigned char *state;  /* block 1's checkpoint */
    uint32_t n, with_state;
    bool right;
};

static weft_status saw(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b)
{
    struct seen_st *v = user;
    v->with_state += b->state != NULL;
    v->right &= (b->state != NULL) == (v->n == 1) && (!b->state || !memcmp(b->state, v->state, h->state_bytes));
    v->n++;
    return WEFT_OK;
}

/* STATE runs (a hybrid's recurrent layers): no payload; a record that ends at a state
 * checkpoint carries it after the payload (flag bit 1), under the CRC and the MAC; a
 * reader walks records of both sizes. A checkpoint flag where the layout has no STATE
 * run, a malformed STATE run and a v4 stream are refused. */
static void state_checkpoints_ride_with_their_blocks(void)
{
    struct weft_kvb_keys keys;
    CHECK(weft_kvb_keys_derive("a fleet secret of some length", NULL, &keys) == WEFT_OK);
    struct weft_kvb_header h = {.fp = FP, .n_layer = 4, .layer0 = 0, .n_layers = 4, .n_blocks = 3, .mac = true};
    weft_kvb_layout_attn(&h, WEFT_TYPE_F16, 4, 2, 32);
    const bool rec_layers[4] = {true, true, false, true};
    const struct weft_kvb_layout st = {.kind = WEFT_KVB_STATE, .type = WEFT_TYPE_F32, .a = 1024};
    CHECK(weft_kvb_layout_replace(&h, rec_layers, &st));
    CHECK(h.n_layout == 3 && h.layout[0].kind == WEFT_KVB_STATE && h.layout[0].n_layers == 2 &&
          h.layout[1].kind == WEFT_KVB_ATTN && h.layout[2].kind == WEFT_KVB_STATE);
    CHECK(weft_kvb_header_init(&h) == WEFT_OK);
    CHECK_EQ_INT(h.payload_bytes, 2 * weft_kv_block_layer_bytes(WEFT_TYPE_F16, 2, 32));
    CHECK_EQ_INT(h.state_bytes, 3 * 1024);
    size_t rec = weft_kvb_record_bytes(&h), n = h.header_bytes + 3 * rec + h.state_bytes;
    CHECK_EQ_INT(weft_kvb_record_bytes_flags(&h, WEFT_KVB_BLOCK_STATE), rec + 3 * 1024);
    unsigned char *buf = malloc(n), *payload = malloc(h.payload_bytes), *state = malloc(h.state_bytes);
    fill_f16((weft_half *)payload, h.payload_bytes / 2);
    for (uint32_t i = 0; i < h.state_bytes; i++) state[i] = (unsigned char)rnd();
    weft_kvb_write_header(&h, buf);
    unsigned char *at = buf + h.header_bytes, *rec1 = NULL;
    uint64_t parent = 0;
    for (int b = 0; b < 3; b++) {
        int32_t toks[WEFT_KVB_TOKENS];
        for (int i = 0; i < WEFT_KVB_TOKENS; i++) toks[i] = 7 * b + i;
        uint64_t hash = weft_kv_block_hash(parent, toks);
        uint32_t fl = b == 1 ? WEFT_KVB_BLOCK_STATE : 0;
        if (b == 1) rec1 = at;
        weft_kvb_write_block(&h, &keys, parent, hash, toks, fl, payload, b == 1 ? state : NULL, at);
        at += weft_kvb_record_bytes_flags(&h, fl);
        parent = hash;
    }
    CHECK(at == buf + n && weft_kvb_sizes_ok(&h, buf, n) && !weft_kvb_sizes_ok(&h, buf, n - 1));
    struct weft_kvb_expect w = {.fp = FP, .n_layer = 4, .n_layout = 3, .keys = &keys};
    memcpy(w.layout, h.layout, sizeof h.layout[0] * 3);
    struct weft_kvb_header got;
    uint32_t good = 0;
    struct seen_st v = {.state = state, .right = true};
    CHECK(weft_kvb_read_stream(buf, n, &w, &got, saw, &v, &good) == WEFT_OK && good == 3);
    CHECK(v.n == 3 && v.with_state == 1 && v.right && got.state_bytes == 3 * 1024);
    /* the checkpoint's bytes are under the CRC ... */
    size_t len1 = rec + h.state_bytes, flips = 0, refused = 0;
    for (size_t i = WEFT_KVB_BLOCK_META + h.payload_bytes; i < len1 - 4; i += 61, flips++) {
        rec1[i] ^= 0x08;
        refused += weft_kvb_read_stream(buf, n, &w, &got, NULL, NULL, &good) == WEFT_ERR_FORMAT && good == 1;
        rec1[i] ^= 0x08;
    }
    CHECK(flips > 50 && refused == flips);
    /* ... and the MAC: one changed, the CRC made good again, is not the fleet's */
    rec1[WEFT_KVB_BLOCK_META + h.payload_bytes + 17] ^= 1;
    recrc(rec1, len1);
    CHECK(weft_kvb_read_stream(buf, n, &w, &got, NULL, NULL, &good) == WEFT_ERR_AUTH && good == 1);
    rec1[WEFT_KVB_BLOCK_META + h.payload_bytes + 17] ^= 1;
    recrc(rec1, len1);
    /* the checkpoint cut short: the records are not whole, none is read */
    CHECK(weft_kvb_read_stream(buf, n - 100, &w, &got, NULL, NULL, &good) == WEFT_ERR_FORMAT && good == 0);
    CHECK(!weft_kvb_sizes_ok(&h, buf, n - 100));
    /* a checkpoint flag in a layout without STATE runs */
    struct stream p;
    make_stream(&p, 2, 2, 2, 32, true);
    unsigned char *b0 = p.buf + p.h.header_bytes;
    b0[80] |= WEFT_KVB_BLOCK_STATE;
    recrc(b0, weft_kvb_record_bytes(&p.h));
    struct weft_kvb_expect wp;
    CHECK(weft_kvb_read_stream(p.buf, p.n, expect_for(&p, &wp), &got, NULL, NULL, &good) == WEFT_ERR_FORMAT);
    CHECK(good == 0 && strstr(weft_last_error(), "flags") != NULL);
    free_stream(&p);
    /* STATE runs are F32 of a multiple of 4 bytes a layer, nothing else */
    struct weft_kvb_header bad = h;
    bad.layout[0].a = 1022;
    CHECK(weft_kvb_header_init(&bad) == WEFT_ERR_INVALID_ARG);
    bad = h;
    bad.layout[2].type = WEFT_TYPE_F16;
    CHECK(weft_kvb_header_init(&bad) == WEFT_ERR_INVALID_ARG);
    bad = h;
    bad.layout[0].b = 32;
    CHECK(weft_kvb_header_init(&bad) == WEFT_ERR_INVALID_ARG);
    /* a v4 stream (its header's CRC good): refused by version */
    buf[8] = 4;
    recrc(buf, h.header_bytes);
    CHECK(weft_kvb_read_header(buf, n, &got) == WEFT_ERR_FORMAT && strstr(weft_last_error(), "version 4") != NULL);
    free(buf);
    free(payload);
    free(state);
}

/* A block whose bytes are intact (its CRC recomputed) but whose name is not
 * its parent's and tokens' hash: refused. */
static void a_misnamed_block_is_refused(void)
{
    struct stream s;
    make_stream(&s, 2, 1, 1, 32, true);
    size_t rec = weft_kvb_record_bytes(&s.h);
    unsigned char *b1 = s.buf + s.h.header_bytes + rec;
    s.toks[1][3] ^= 1;  /* other tokens under the old hash */
    weft_kvb_write_block(&s.h, NULL, s.parent[1], s.hash[1], s.toks[1], 0, s.payload[1], NULL, b1);
    struct weft_kvb_expect w;
    struct weft_kvb_header h;
    uint32_t good;
    CHECK(weft_kvb_read_stream(s.buf, s.n, expect_for(&s, &w), &h, NULL, NULL, &good) == WEFT_ERR_FORMAT);
    CHECK(good == 1 && strstr(weft_last_error(), "hash") != NULL);
    free_stream(&s);
}

static void conversion_is_what_the_backends_would_write(void)
{
    struct stream s;
    make_stream(&s, 1, 1, 2, 32, true);
    struct weft_kvb_header hq = s.h;
    hq.layout[0].type = WEFT_TYPE_Q8_0;
    CHECK(weft_kvb_header_init(&hq) == WEFT_OK);
    unsigned char *q = malloc(hq.payload_bytes), *back = malloc(s.h.payload_bytes);
    CHECK(weft_kvb_convert(&s.h, s.payload[0], WEFT_TYPE_Q8_0, q) == WEFT_OK);
    /* row by row, as ROPE_KV quantizes one token's heads */
    int64_t row = 2 * 32;
    float f[64];
    unsigned char want[2 * 34];
    int same = 1;
    for (int r = 0; r < 2 * 16; r++) {
        weft_dequantize_row(WEFT_TYPE_F16, s.payload[0] + (size_t)r * row * 2, f, row);
        weft_quantize_row(WEFT_TYPE_Q8_0, f, want, row);
        same &= !memcmp(want, q + (size_t)r * sizeof want, sizeof want);
    }
    CHECK(same);
    CHECK(weft_kvb_convert(&hq, q, WEFT_TYPE_F16, back) == WEFT_OK);
    double err = 0, ref = 0;
    for (size_t i = 0; i < s.h.payload_bytes / 2; i++) {
        float a = weft_half_to_f32(((weft_half *)s.payload[0])[i]), b = weft_half_to_f32(((weft_half *)back)[i]);
        err += (a - b) * (a - b);
        ref += a * a;
    }
    printf("  F16 -> Q8_0 -> F16: normalised error %.2e\n", sqrt(err / ref));
    CHECK(sqrt(err / ref) < 0.01);
    free(q);
    free(back);
    free_stream(&s);
}

/* The pool: import puts a block in as cached, reads back byte-identical,
 * serves a prefix match (counted as an imported hit), refuses a wrong name,
 * leaves a registered hash alone, and evicts like any cached block. */
static void pool_import_serves_a_prefix(void)
{
    struct weft_backend *be;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK);
    struct weft_kv_config c = {.n_layer = 2, .n_kv_head = 2, .head_dim = 32, .n_blocks = 4, .type = WEFT_TYPE_F16,
                               .prefix_cache = true};
    struct weft_kv_pool kv;
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_OK);
    struct stream s;
    make_stream(&s, 3, 2, 2, 32, true);
    CHECK_EQ_INT(s.h.payload_bytes, kv.block_bytes);
    bool added;
    for (int b = 0; b < 3; b++) CHECK(weft_kv_import(&kv, s.parent[b], s.hash[b], s.toks[b], s.payload[b], s.h.payload_bytes, &added) == WEFT_OK && added);
    CHECK(weft_kv_import(&kv, s.parent[0], s.hash[0], s.toks[0], s.payload[0], s.h.payload_bytes, &added) == WEFT_OK && !added);
    CHECK(weft_kv_import(&kv, s.parent[1], s.hash[0], s.toks[1], s.payload[1], s.h.payload_bytes, &added) == WEFT_ERR_INVALID_ARG);
    /* a payload of another size than the pool's blocks: refused, nothing copied */
    CHECK(weft_kv_import(&kv, s.parent[1], s.hash[1], s.toks[1], s.payload[1], s.h.payload_bytes / 2, &added) ==
              WEFT_ERR_INVALID_ARG && !added);
    unsigned char *back = malloc(kv.block_bytes);
    for (int b = 0; b < 3; b++) {
        int32_t id = weft_kv_lookup(&kv, s.hash[b]);
        CHECK(id >= 0 && weft_kv_block_read(&kv, id, back) == WEFT_OK && !memcmp(back, s.payload[b], kv.block_bytes));
    }
    struct weft_kv_stats st;
    weft_kv_stats(&kv, &st);
    CHECK(st.imported_blocks == 3 && st.cached == 3 && st.used == 0);
    /* a prompt of the three blocks and one token more takes all three */
    int32_t prompt[49];
    memcpy(prompt, s.toks, sizeof(int32_t) * 48);
    prompt[48] = 7;
    struct weft_kv_seq seq = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &seq, prompt, 49), 48);
    weft_kv_stats(&kv, &st);
    CHECK(st.hit_imported_blocks == 3 && st.used == 3);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_seq_release(&kv, &seq);
    /* the pool has 4 blocks: a fourth import fits, a fifth evicts the oldest cached */
    struct stream t;
    make_stream(&t, 2, 2, 2, 32, true);
    CHECK(weft_kv_import(&kv, t.parent[0], t.hash[0], t.toks[0], t.payload[0], t.h.payload_bytes, &added) == WEFT_OK && added);
    CHECK(weft_kv_import(&kv, t.parent[1], t.hash[1], t.toks[1], t.payload[1], t.h.payload_bytes, &added) == WEFT_OK && added);
    weft_kv_stats(&kv, &st);
    CHECK(st.evictions == 1 && st.cached == 4);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    free(back);
    free_stream(&s);
    free_stream(&t);
    weft_kv_pool_free(&kv);
    /* without a prefix cache there is nowhere to put a block */
    c.prefix_cache = false;
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_OK);
    make_stream(&s, 1, 2, 2, 32, true);
    CHECK(weft_kv_import(&kv, s.parent[0], s.hash[0], s.toks[0], s.payload[0], s.h.payload_bytes, &added) == WEFT_ERR_INVALID_ARG);
    free_stream(&s);
    weft_kv_pool_free(&kv);
    weft_backend_close(be);
}

struct events {
    uint32_t stored, removed;
};

static void count_event(void *user, enum weft_kv_event_kind kind, uint64_t hash, uint64_t parent)
{
    (void)hash;
    (void)parent;
    struct events *ev = user;
    if (kind == WEFT_KV_EVENT_STORED) ev->stored++;
    else ev->removed++;
}

/* The host prefix tier: blocks the device evicts are copied there (no
 * "removed" event: the instance still has them), a prefix match that misses
 * the device promotes them back byte-identical (counted), and a block leaves
 * the instance (event) only when the tier evicts it too. */
static void host_tier_demotes_and_promotes(void)
{
    struct weft_backend *be;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK);
    struct weft_kv_config c = {.n_layer = 2, .n_kv_head = 2, .head_dim = 32, .n_blocks = 4, .type = WEFT_TYPE_F16,
                               .prefix_cache = true, .n_host_cache_blocks = 3};
    struct weft_kv_pool kv;
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_OK);
    struct events ev = {0};
    kv.on_event = count_event;
    kv.on_event_user = &ev;
    struct stream a, b;
    make_stream(&a, 3, 2, 2, 32, true);
    make_stream(&b, 4, 2, 2, 32, true);
    bool added;
    for (int i = 0; i < 3; i++) CHECK(weft_kv_import(&kv, a.parent[i], a.hash[i], a.toks[i], a.payload[i], a.h.payload_bytes, &added) == WEFT_OK);
    /* b's four take the device: a's three go to the host tier */
    for (int i = 0; i < 4; i++) CHECK(weft_kv_import(&kv, b.parent[i], b.hash[i], b.toks[i], b.payload[i], b.h.payload_bytes, &added) == WEFT_OK);
    struct weft_kv_stats st;
    weft_kv_stats(&kv, &st);
    CHECK(st.host_demotions == 3 && st.host_cache_used == 3 && st.evictions == 3);
    CHECK_EQ_INT(ev.removed, 0);
    CHECK(weft_kv_lookup(&kv, a.hash[0]) < 0);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    /* a's prompt: its three blocks come back from the host tier (b's oldest demote in turn) */
    int32_t prompt[49];
    memcpy(prompt, a.toks, sizeof(int32_t) * 48);
    prompt[48] = 1;
    struct weft_kv_seq seq = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &seq, prompt, 49), 48);
    weft_kv_stats(&kv, &st);
    CHECK_EQ_INT(st.host_hit_blocks, 3);
    unsigned char *back = malloc(kv.block_bytes);
    for (int i = 0; i < 3; i++) {
        CHECK(weft_kv_block_read(&kv, seq.blocks[i], back) == WEFT_OK);
        CHECK(!memcmp(back, a.payload[i], kv.block_bytes));
    }
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_seq_release(&kv, &seq);
    /* b's first three went to the host tier to make room; b[3] is still on the device */
    CHECK_EQ_INT(st.host_demotions, 6);
    CHECK_EQ_INT(ev.removed, 0);
    /* a fourth chain: the device's oldest cached blocks demote and the tier's oldest (b's) leave */
    struct stream c2;
    make_stream(&c2, 4, 2, 2, 32, true);
    for (int i = 0; i < 4; i++)
        CHECK(weft_kv_import(&kv, c2.parent[i], c2.hash[i], c2.toks[i], c2.payload[i], c2.h.payload_bytes, &added) == WEFT_OK);
    weft_kv_stats(&kv, &st);
    CHECK(st.host_evictions >= 3 && ev.removed == st.host_evictions);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    free(back);
    free_stream(&a);
    free_stream(&b);
    free_stream(&c2);
    weft_kv_pool_free(&kv);
    weft_backend_close(be);
}

int main(void)
{
    RUN(round_trip);
    RUN(every_flip_and_truncation_is_refused);
    RUN(foreign_model_shape_and_type_are_mismatches);
    RUN(a_partial_layer_range_is_refused);
    RUN(a_misnamed_block_is_refused);
    RUN(macs_bind_blocks_to_the_fleet_secret);
    RUN(a_layout_of_several_runs_round_trips);
    RUN(state_checkpoints_ride_with_their_blocks);
    RUN(conversion_is_what_the_backends_would_write);
    RUN(pool_import_serves_a_prefix);
    RUN(host_tier_demotes_and_promotes);
    return check_summary();
}
