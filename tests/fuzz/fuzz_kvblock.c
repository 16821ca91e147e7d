/* libFuzzer target: the KV block reader (base/kv_block.c), the door every
 * block from another instance, the host tier's files or Redis comes in by.
 * Any input is read or refused with a message; a delivered block always has
 * a good CRC and a hash that is its parent's and tokens' (checked again
 * here, independently of the reader); a header is delivered only for the
 * expected model and shape. Two ways in, chosen by the first byte: the
 * input as a stream, or a valid two-block stream with the input's
 * (offset, xor) edits and an optional cut applied (deep coverage without a
 * corpus). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "base/kv_block.h"

static const struct weft_kvb_expect WANT = {.fp = {0x1111222233334444ull, 0x5555666677778888ull}, .n_layer = 2,
                                            .n_kv_head = 1, .head_dim = 32, .type = WEFT_TYPE_F16};

static weft_status check_block(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b)
{
    (void)user;
    if (b->hash != weft_kv_block_hash(b->parent, b->tokens)) __builtin_trap();
    const unsigned char *rec = b->payload - WEFT_KVB_BLOCK_META;
    size_t body = WEFT_KVB_BLOCK_META + h->payload_bytes;
    uint32_t crc = (uint32_t)rec[body] | (uint32_t)rec[body + 1] << 8 | (uint32_t)rec[body + 2] << 16 |
                   (uint32_t)rec[body + 3] << 24;
    if (crc != weft_crc32c(0, rec, body)) __builtin_trap();
    if (h->fp.hi != WANT.fp.hi || h->fp.lo != WANT.fp.lo || h->n_layer != WANT.n_layer || h->type != WANT.type)
        __builtin_trap();
    return WEFT_OK;
}

static void read_it(const unsigned char *buf, size_t n)
{
    struct weft_kvb_header h;
    uint32_t good = 0;
    weft_clear_error();
    weft_status st = weft_kvb_read_stream(buf, n, &WANT, &h, check_block, NULL, &good);
    if (st != WEFT_OK && !weft_last_error()[0]) __builtin_trap();  /* every refusal says why */
    if (st == WEFT_OK && !weft_kvb_sizes_ok(&h, n)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    if (!(data[0] & 1)) {
        read_it(data + 1, size - 1);
        return 0;
    }
    struct weft_kvb_header h = {.fp = WANT.fp, .type = WEFT_TYPE_F16, .n_layer = 2, .n_kv_head = 1, .head_dim = 32,
                                .layer0 = 0, .n_layers = 2, .n_blocks = (data[0] & 2) ? 2 : 0};
    if (weft_kvb_header_init(&h) != WEFT_OK) __builtin_trap();
    size_t rec = weft_kvb_record_bytes(&h), n = WEFT_KVB_HEADER_BYTES + 2 * rec;
    unsigned char *buf = malloc(n), *payload = calloc(1, h.payload_bytes);
    weft_kvb_write_header(&h, buf);
    int32_t toks[WEFT_KVB_TOKENS];
    uint64_t parent = 0;
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < WEFT_KVB_TOKENS; i++) toks[i] = b * 100 + i;
        for (uint32_t i = 0; i < h.payload_bytes; i++) payload[i] = (unsigned char)(i * 7 + b);
        uint64_t hash = weft_kv_block_hash(parent, toks);
        weft_kvb_write_block(&h, parent, hash, toks, payload, buf + WEFT_KVB_HEADER_BYTES + b * rec);
        parent = hash;
    }
    size_t i = 1;
    for (; i + 3 <= size; i += 3) {
        size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % n;
        buf[off] ^= data[i + 2];
    }
    size_t cut = n;
    if ((data[0] & 4) && i < size) cut = n - 1 - data[i] % 64;
    read_it(buf, cut);
    free(buf);
    free(payload);
    return 0;
}
