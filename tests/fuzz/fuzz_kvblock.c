/* libFuzzer target: the KV block reader (base/kv_block.c, format v5), the
 * door every block from another instance, a prefill/decode push or Redis
 * comes in by, and the import behind it (core/engine_kv.c into a real
 * engine's pool, stories260K on the CPU): every stream, whatever it
 * claims, is read or refused with a message, and imported under ASan with
 * no report. A delivered block always has a good CRC, a good MAC under the
 * fleet key and a hash that is its parent's and tokens' (checked again here,
 * independently of the reader); a header is delivered only for the expected
 * model and layout, covering every layer. Three ways in, by the first byte:
 *   0: the input as a stream;
 *   1: a valid signed two-block stream with (offset, xor) edits and a cut;
 *   2: header fields mutated: a valid stream, then up to four (field,
 *      value) pokes into its header, the header's CRC made good again and
 *      the blocks re-framed to the size the poked header claims, with good
 *      CRCs and MACs, so that only the checks on the fields themselves can
 *      refuse it (the partial layer range of the issue lived here). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hmac.h"
#include "base/kv_block.h"
#include "core/engine.h"
#include "core/kv.h"
#include "core/model.h"

static struct weft_kvb_keys KEYS;
static struct weft_backend *BE;
static struct weft_model *M;
static struct weft_engine *E;
static struct weft_kvb_expect WANT;

static void setup(void)
{
    if (E) return;
    if (weft_kvb_keys_derive("fuzz-fleet-secret-000", NULL, &KEYS) != WEFT_OK) __builtin_trap();
    if (weft_backend_open("cpu", 1, &BE) != WEFT_OK) __builtin_trap();
    const struct weft_split_part part = {BE, 0};
    if (weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", &part, 1, &M) != WEFT_OK) {
        fprintf(stderr, "fuzz_kvblock: %s\n", weft_last_error());
        __builtin_trap();
    }
    struct weft_engine_config cfg = {.n_ctx = 256, .max_seqs = 2, .kv_blocks = 24};
    if (weft_engine_create(M, &cfg, &E) != WEFT_OK) __builtin_trap();
    weft_engine_kv_set_keys(E, &KEYS);
    weft_engine_kv_expect(E, &WANT);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The MAC as the format describes it, computed here apart from the reader:
 * SHA-256 of the header (n_blocks 0, no CRC), then HMAC over it and the
 * record's body. */
static void mac_of(const unsigned char *hdr, size_t hb, const unsigned char *rec, size_t body, unsigned char out[32])
{
    unsigned char copy[WEFT_KVB_HEADER_MAX], d[32];
    memcpy(copy, hdr, hb - 4);
    put32(copy + 48, 0);
    if (weft_sha256(copy, hb - 4, d) != WEFT_OK || weft_hmac_sha256(KEYS.key[0], 32, d, 32, rec, body, out) != WEFT_OK)
        __builtin_trap();
}

static weft_status check_block(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b)
{
    const unsigned char *hdr = user;
    if (b->hash != weft_kv_block_hash(b->parent, b->tokens)) __builtin_trap();
    const unsigned char *rec = b->payload - WEFT_KVB_BLOCK_META;
    size_t body = WEFT_KVB_BLOCK_META + h->payload_bytes + (b->state ? h->state_bytes : 0);
    if (!h->mac) __builtin_trap();  /* the reader holds a key: only MAC'd blocks pass */
    unsigned char want[32];
    mac_of(hdr, h->header_bytes, rec, body, want);
    if (memcmp(want, rec + body, 32) != 0) __builtin_trap();
    if (get32(rec + body + 32) != weft_crc32c(0, rec, body + 32)) __builtin_trap();
    if (h->fp.hi != WANT.fp.hi || h->fp.lo != WANT.fp.lo || h->n_layer != WANT.n_layer || h->layer0 != 0 ||
        h->n_layers != WANT.n_layer || h->n_layout != WANT.n_layout)
        __builtin_trap();
    return WEFT_OK;
}

/* Read (checking every delivered block here too), then import into the engine. */
static void read_it(const unsigned char *buf, size_t n)
{
    struct weft_kvb_header h;
    uint32_t good = 0;
    weft_clear_error();
    weft_status st = weft_kvb_read_stream(buf, n, &WANT, &h, check_block, (void *)buf, &good);
    if (st != WEFT_OK && !weft_last_error()[0]) __builtin_trap();  /* every refusal says why */
    if (st == WEFT_OK && !weft_kvb_sizes_ok(&h, buf, n)) __builtin_trap();
    uint32_t added = 0;
    weft_clear_error();
    weft_status is = weft_engine_kv_import(E, buf, n, &added);
    if (is != WEFT_OK && is != WEFT_ERR_NO_ROOM && !weft_last_error()[0]) __builtin_trap();
    if (st != WEFT_OK && is == WEFT_OK) __builtin_trap();  /* the import takes nothing the reader refuses */
    if (weft_kv_check(weft_engine_kv(E)) != WEFT_OK) __builtin_trap();
}

/* A valid signed stream of n_blocks blocks of the engine's layout; the
 * blocks' tokens from seed (a fresh chain per input). */
static unsigned char *valid_stream(uint32_t n_blocks, uint32_t seed, size_t *n_out, struct weft_kvb_header *h)
{
    memset(h, 0, sizeof *h);
    h->fp = WANT.fp;
    h->n_layer = WANT.n_layer;
    h->n_layers = WANT.n_layer;
    h->n_blocks = n_blocks;
    h->mac = true;
    h->n_layout = WANT.n_layout;
    memcpy(h->layout, WANT.layout, sizeof h->layout[0] * WANT.n_layout);
    if (weft_kvb_header_init(h) != WEFT_OK) __builtin_trap();
    size_t rec = weft_kvb_record_bytes(h), n = h->header_bytes + n_blocks * rec;
    unsigned char *buf = malloc(n), *payload = malloc(h->payload_bytes);
    weft_kvb_write_header(h, buf);
    int32_t toks[WEFT_KVB_TOKENS];
    uint64_t parent = 0;
    for (uint32_t b = 0; b < n_blocks; b++) {
        for (int i = 0; i < WEFT_KVB_TOKENS; i++) toks[i] = (int32_t)((seed * 31u + b * 17u + (uint32_t)i) % 500u);
        for (uint32_t i = 0; i < h->payload_bytes; i++) payload[i] = (unsigned char)(i * 7 + b);
        uint64_t hash = weft_kv_block_hash(parent, toks);
        weft_kvb_write_block(h, &KEYS, parent, hash, toks, 0, payload, NULL, buf + h->header_bytes + b * rec);
        parent = hash;
    }
    free(payload);
    *n_out = n;
    return buf;
}

/* The header's fields a poke may land on (offset, width): every one. */
static const struct { uint8_t off, width; } FIELDS[] = {
    {8, 4},  {12, 4}, {16, 4}, {20, 4}, {24, 4}, {28, 4}, {32, 4}, {36, 4}, {40, 4}, {44, 4}, {48, 4},
    {52, 4}, {56, 4}, {60, 4}, {64, 4}, {68, 4}, {72, 1}, {73, 1}, {74, 2}, {76, 4}, {80, 4}, {84, 4},
};

static void mutate_fields(const uint8_t *data, size_t size)
{
    struct weft_kvb_header h;
    size_t n;
    uint32_t seed = size > 1 ? data[1] : 0;
    unsigned char *buf = valid_stream(2, seed, &n, &h);
    size_t hb = h.header_bytes, rec0 = weft_kvb_record_bytes(&h);
    for (size_t i = 2; i + 5 <= size && i < 2 + 5 * 4; i += 5) {
        size_t f = data[i] % (sizeof FIELDS / sizeof FIELDS[0]);
        uint32_t v = get32(data + i + 1);
        unsigned char *at = buf + FIELDS[f].off;
        if (FIELDS[f].width == 1) at[0] = (unsigned char)v;
        else if (FIELDS[f].width == 2) at[0] = (unsigned char)v, at[1] = (unsigned char)(v >> 8);
        else put32(at, v);
    }
    put32(buf + hb - 4, weft_crc32c(0, buf, hb - 4));  /* the header's CRC made good again */
    /* the blocks re-framed to what the poked header claims (bounded) */
    uint32_t pb = get32(buf + 52), count = get32(buf + 48);
    bool mac = get32(buf + 56) & 1;
    if (pb > (1u << 20) || count > 4) count = 2, pb = h.payload_bytes;
    if (!count) count = 2;
    size_t rec = WEFT_KVB_BLOCK_META + pb + (mac ? 32 : 0) + 4, m = hb + count * rec;
    unsigned char *out = calloc(1, m);
    memcpy(out, buf, hb);
    for (uint32_t b = 0; b < count; b++) {
        const unsigned char *src = buf + hb + (b % 2) * rec0;
        unsigned char *dst = out + hb + b * rec;
        memcpy(dst, src, WEFT_KVB_BLOCK_META);
        memcpy(dst + WEFT_KVB_BLOCK_META, src + WEFT_KVB_BLOCK_META, pb < h.payload_bytes ? pb : h.payload_bytes);
        size_t body = WEFT_KVB_BLOCK_META + pb;
        if (mac) {
            mac_of(out, hb, dst, body, dst + body);
            body += 32;
        }
        put32(dst + body, weft_crc32c(0, dst, body));
    }
    read_it(out, m);
    free(out);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    setup();
    switch (data[0] % 3) {
    case 0: read_it(data + 1, size - 1); return 0;
    case 2: mutate_fields(data, size); return 0;
    default: break;
    }
    struct weft_kvb_header h;
    size_t n;
    unsigned char *buf = valid_stream(2, size > 1 ? data[1] : 0, &n, &h);
    size_t i = 2;
    for (; i + 3 <= size; i += 3) {
        size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % n;
        buf[off] ^= data[i + 2];
    }
    size_t cut = n;
    if ((data[0] & 4) && i < size) cut = n - 1 - data[i] % 64;
    read_it(buf, cut);
    free(buf);
    return 0;
}
