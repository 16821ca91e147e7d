#include "base/kv_block.h"

#include <stdlib.h>
#include <string.h>

#include "base/quant.h"

static const unsigned char MAGIC[8] = {'W', 'E', 'F', 'T', 'K', 'V', 'B', 0};

/* ---- CRC-32C, reflected, polynomial 0x82F63B78, table per byte ---------- */

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
}

uint32_t weft_crc32c(uint32_t crc, const void *data, size_t len)
{
    /* the table is the same whichever thread builds it first */
    if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE)) crc_init();
    const unsigned char *p = data;
    crc = ~crc;
    while (len--) crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- little-endian fields ------------------------------------------------ */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ---- header --------------------------------------------------------------- */

#define MAX_PAYLOAD ((size_t)1 << 30)

size_t weft_kvb_payload_bytes(enum weft_type type, uint32_t n_layers, uint32_t n_kv_head, uint32_t head_dim)
{
    return (size_t)n_layers * 2 * weft_kv_block_layer_bytes(type, n_kv_head, head_dim);
}

static weft_status check_shape(const struct weft_kvb_header *h)
{
    if (h->type != WEFT_TYPE_F16 && h->type != WEFT_TYPE_Q8_0)
        return weft_error(WEFT_ERR_FORMAT, "kv block: KV type %u is not F16 or Q8_0", (unsigned)h->type);
    if (!h->n_layer || !h->n_kv_head || !h->head_dim || h->n_layer > 4096 || h->n_kv_head > 4096 ||
        h->head_dim > 4096)
        return weft_error(WEFT_ERR_FORMAT, "kv block: shape %u layers x %u KV heads x %u is not one a model has",
                          h->n_layer, h->n_kv_head, h->head_dim);
    if (h->type == WEFT_TYPE_Q8_0 && h->head_dim % 32)
        return weft_error(WEFT_ERR_FORMAT, "kv block: Q8_0 needs head_dim a multiple of 32, not %u", h->head_dim);
    if (!h->n_layers || h->layer0 >= h->n_layer || h->n_layers > h->n_layer - h->layer0)
        return weft_error(WEFT_ERR_FORMAT, "kv block: layer range %u+%u is outside the model's %u layers", h->layer0,
                          h->n_layers, h->n_layer);
    size_t pb = weft_kvb_payload_bytes(h->type, h->n_layers, h->n_kv_head, h->head_dim);
    if (pb > MAX_PAYLOAD) return weft_error(WEFT_ERR_FORMAT, "kv block: %zu payload bytes a block is too many", pb);
    return WEFT_OK;
}

weft_status weft_kvb_header_init(struct weft_kvb_header *h)
{
    weft_status st = check_shape(h);
    if (st != WEFT_OK) return weft_error(WEFT_ERR_INVALID_ARG, "%s", weft_last_error());
    h->payload_bytes = (uint32_t)weft_kvb_payload_bytes(h->type, h->n_layers, h->n_kv_head, h->head_dim);
    return WEFT_OK;
}

void weft_kvb_write_header(const struct weft_kvb_header *h, unsigned char out[WEFT_KVB_HEADER_BYTES])
{
    memset(out, 0, WEFT_KVB_HEADER_BYTES);
    memcpy(out, MAGIC, 8);
    put32(out + 8, WEFT_KVB_VERSION);
    put32(out + 12, WEFT_KVB_HEADER_BYTES);
    put64(out + 16, h->fp.hi);
    put64(out + 24, h->fp.lo);
    put32(out + 32, (uint32_t)h->type);
    put32(out + 36, WEFT_KVB_TOKENS);
    put32(out + 40, h->n_layer);
    put32(out + 44, h->n_kv_head);
    put32(out + 48, h->head_dim);
    put32(out + 52, h->layer0);
    put32(out + 56, h->n_layers);
    put32(out + 60, h->n_blocks);
    put32(out + 64, h->payload_bytes);
    put32(out + 76, weft_crc32c(0, out, 76));
}

weft_status weft_kvb_read_header(const unsigned char *buf, size_t n, struct weft_kvb_header *out)
{
    memset(out, 0, sizeof *out);
    if (n < WEFT_KVB_HEADER_BYTES)
        return weft_error(WEFT_ERR_FORMAT, "kv block: %zu bytes is shorter than the %d-byte header", n,
                          WEFT_KVB_HEADER_BYTES);
    if (memcmp(buf, MAGIC, 8) != 0) return weft_error(WEFT_ERR_FORMAT, "kv block: not a weft KV block stream (magic)");
    uint32_t version = get32(buf + 8);
    if (version != WEFT_KVB_VERSION)
        return weft_error(WEFT_ERR_FORMAT, "kv block: format version %u, this reader knows %d", version,
                          WEFT_KVB_VERSION);
    if (get32(buf + 12) != WEFT_KVB_HEADER_BYTES)
        return weft_error(WEFT_ERR_FORMAT, "kv block: header of %u bytes, version 1 has %d", get32(buf + 12),
                          WEFT_KVB_HEADER_BYTES);
    if (get32(buf + 76) != weft_crc32c(0, buf, 76)) return weft_error(WEFT_ERR_FORMAT, "kv block: header CRC mismatch");
    if (get32(buf + 36) != WEFT_KVB_TOKENS)
        return weft_error(WEFT_ERR_FORMAT, "kv block: %u tokens a block, weft's blocks hold %d", get32(buf + 36),
                          WEFT_KVB_TOKENS);
    if (get32(buf + 68) || get32(buf + 72)) return weft_error(WEFT_ERR_FORMAT, "kv block: reserved header fields set");
    struct weft_kvb_header h = {.fp = {get64(buf + 16), get64(buf + 24)},
                                .type = (enum weft_type)get32(buf + 32),
                                .n_layer = get32(buf + 40),
                                .n_kv_head = get32(buf + 44),
                                .head_dim = get32(buf + 48),
                                .layer0 = get32(buf + 52),
                                .n_layers = get32(buf + 56),
                                .n_blocks = get32(buf + 60),
                                .payload_bytes = get32(buf + 64)};
    weft_status st = check_shape(&h);
    if (st != WEFT_OK) return st;
    size_t pb = weft_kvb_payload_bytes(h.type, h.n_layers, h.n_kv_head, h.head_dim);
    if (h.payload_bytes != pb)
        return weft_error(WEFT_ERR_FORMAT, "kv block: header says %u payload bytes a block, its shape needs %zu",
                          h.payload_bytes, pb);
    *out = h;
    return WEFT_OK;
}

weft_status weft_kvb_check_model(const struct weft_kvb_header *h, const struct weft_kvb_expect *want)
{
    if (h->fp.hi != want->fp.hi || h->fp.lo != want->fp.lo) {
        char a[WEFT_FINGERPRINT_STR], b[WEFT_FINGERPRINT_STR];
        weft_fingerprint_str(&h->fp, a);
        weft_fingerprint_str(&want->fp, b);
        return weft_error(WEFT_ERR_MISMATCH, "kv block: made by model %s, this is %s", a, b);
    }
    if (h->n_layer != want->n_layer || h->n_kv_head != want->n_kv_head || h->head_dim != want->head_dim)
        return weft_error(WEFT_ERR_MISMATCH, "kv block: shape %u x %u x %u, this model's is %u x %u x %u", h->n_layer,
                          h->n_kv_head, h->head_dim, want->n_layer, want->n_kv_head, want->head_dim);
    if (h->type != want->type && !want->allow_convert)
        return weft_error(WEFT_ERR_MISMATCH, "kv block: KV type %s, this cache holds %s (conversion not enabled)",
                          weft_type_name(h->type), weft_type_name(want->type));
    return WEFT_OK;
}

/* ---- blocks --------------------------------------------------------------- */

void weft_kvb_write_block(const struct weft_kvb_header *h, uint64_t parent, uint64_t hash,
                          const int32_t tokens[WEFT_KVB_TOKENS], const void *payload, unsigned char *out)
{
    put64(out, parent);
    put64(out + 8, hash);
    for (int i = 0; i < WEFT_KVB_TOKENS; i++) put32(out + 16 + 4 * i, (uint32_t)tokens[i]);
    memcpy(out + WEFT_KVB_BLOCK_META, payload, h->payload_bytes);
    size_t body = WEFT_KVB_BLOCK_META + (size_t)h->payload_bytes;
    put32(out + body, weft_crc32c(0, out, body));
}

weft_status weft_kvb_read_block(const struct weft_kvb_header *h, const unsigned char *buf, size_t n,
                                struct weft_kvb_block *out)
{
    size_t need = weft_kvb_record_bytes(h), body = need - 4;
    if (n < need) return weft_error(WEFT_ERR_FORMAT, "kv block: truncated (%zu of %zu bytes)", n, need);
    if (get32(buf + body) != weft_crc32c(0, buf, body)) return weft_error(WEFT_ERR_FORMAT, "kv block: CRC mismatch");
    struct weft_kvb_block b = {.parent = get64(buf), .hash = get64(buf + 8), .payload = buf + WEFT_KVB_BLOCK_META};
    for (int i = 0; i < WEFT_KVB_TOKENS; i++) b.tokens[i] = (int32_t)get32(buf + 16 + 4 * i);
    if (b.hash != weft_kv_block_hash(b.parent, b.tokens))
        return weft_error(WEFT_ERR_FORMAT, "kv block: hash %016llx is not its parent's and tokens' hash",
                          (unsigned long long)b.hash);
    *out = b;
    return WEFT_OK;
}

weft_status weft_kvb_convert(const struct weft_kvb_header *h, const void *src, enum weft_type to, void *dst)
{
    if (to == h->type) {
        memcpy(dst, src, h->payload_bytes);
        return WEFT_OK;
    }
    if (to != WEFT_TYPE_F16 && to != WEFT_TYPE_Q8_0)
        return weft_error(WEFT_ERR_UNSUPPORTED, "kv block: no conversion to %s", weft_type_name(to));
    if (to == WEFT_TYPE_Q8_0 && h->head_dim % 32)
        return weft_error(WEFT_ERR_UNSUPPORTED, "kv block: head_dim %u cannot be Q8_0", h->head_dim);
    /* row by row: one token's heads of one layer's K or V */
    int64_t row = (int64_t)h->n_kv_head * h->head_dim;
    size_t in_row = weft_row_size(h->type, row), out_row = weft_row_size(to, row);
    size_t rows = (size_t)h->n_layers * 2 * WEFT_KVB_TOKENS;
    float *tmp = malloc(sizeof(float) * (size_t)row);
    if (!tmp) return weft_error(WEFT_ERR_NOMEM, "kv block: out of memory");
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (size_t r = 0; r < rows; r++) {
        weft_dequantize_row(h->type, s + r * in_row, tmp, row);
        weft_quantize_row(to, tmp, d + r * out_row, row);  /* as the backends write KV */
    }
    free(tmp);
    return WEFT_OK;
}

bool weft_kvb_sizes_ok(const struct weft_kvb_header *h, size_t n)
{
    size_t rec = weft_kvb_record_bytes(h);
    if (n < WEFT_KVB_HEADER_BYTES || (n - WEFT_KVB_HEADER_BYTES) % rec) return false;
    size_t count = (n - WEFT_KVB_HEADER_BYTES) / rec;
    return count <= UINT32_MAX && (!h->n_blocks || count == h->n_blocks);
}

weft_status weft_kvb_read_stream(const unsigned char *buf, size_t n, const struct weft_kvb_expect *want,
                                 struct weft_kvb_header *h, weft_kvb_block_fn fn, void *user, uint32_t *n_good)
{
    *n_good = 0;
    weft_status st = weft_kvb_read_header(buf, n, h);
    if (st == WEFT_OK && want) st = weft_kvb_check_model(h, want);
    if (st != WEFT_OK) return st;
    size_t rec = weft_kvb_record_bytes(h), off = WEFT_KVB_HEADER_BYTES;
    if (!weft_kvb_sizes_ok(h, n)) {
        if (h->n_blocks)
            return weft_error(WEFT_ERR_FORMAT, "kv block: the header names %u blocks of %zu bytes, the stream has %zu "
                              "bytes after it", h->n_blocks, rec, n - off);
        return weft_error(WEFT_ERR_FORMAT, "kv block: %zu bytes after the header are not whole %zu-byte blocks",
                          n - off, rec);
    }
    uint32_t count = (uint32_t)((n - off) / rec);
    for (uint32_t i = 0; i < count; i++, off += rec) {
        struct weft_kvb_block b;
        if ((st = weft_kvb_read_block(h, buf + off, n - off, &b)) != WEFT_OK) return st;
        if (fn && (st = fn(user, h, &b)) != WEFT_OK) return st;
        (*n_good)++;
    }
    return WEFT_OK;
}

size_t weft_kv_block_layer_bytes(enum weft_type type, uint32_t n_kv_head, uint32_t head_dim)
{
    size_t row = weft_row_size(type, head_dim);
    return (size_t)WEFT_KV_BLOCK_TOKENS * n_kv_head * row;
}

uint64_t weft_kv_block_hash(uint64_t parent, const int32_t *tokens)
{
    /* 64-bit multiply-xorshift mixing of the parent and each id */
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < WEFT_KV_BLOCK_TOKENS; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return h ? h : 1;
}
