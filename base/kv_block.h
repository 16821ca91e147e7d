/* KV block format v1: the one way KV blocks leave a device, whatever
 * backend made them: on the wire between instances, in the host tier's
 * spill files and in Redis.
 *
 * A stream is a header, then blocks. All integers little-endian.
 *
 *   header (80 bytes)
 *     0  magic "WEFTKVB\0"            8  version (1)          12 header bytes (80)
 *     16 fingerprint hi, lo (u64 x2)  32 kv type (weft_type)  36 block tokens (16)
 *     40 n_layer (the model's)        44 n_kv_head            48 head_dim
 *     52 layer0, 56 n_layers (the layer range the payloads hold)
 *     60 n_blocks (that follow; 0 = until the stream ends)
 *     64 payload bytes per block      68 reserved (0) x2      76 CRC-32C of bytes 0..76
 *   block (40 + 64 + payload + 4 bytes)
 *     0  parent hash (u64)            8  block hash (u64)
 *     16 token ids (i32 x 16)         80 payload: for each layer of the range,
 *        K then V, each [16][n_kv_head][head_dim] of the kv type (backend.h's
 *        layout of one block), 80 + payload: CRC-32C of bytes 0 .. 80 + payload
 *
 * Reading checks all of it: magic, version, sizes, the header CRC, the model
 * fingerprint and shape against the reader's, the layer range, each block's
 * CRC, and that its hash is weft_kv_block_hash(parent, tokens) (a block is
 * named by its content; a block under a wrong name is never used). Any
 * mismatch is WEFT_ERR_FORMAT (or WEFT_ERR_MISMATCH for a foreign model or
 * shape) with a message naming it.
 *
 * A block of another KV type (F16 <-> Q8_0) is converted only when the
 * reader asks for it (weft_kvb_convert), never silently. */
#ifndef WEFT_KV_BLOCK_H
#define WEFT_KV_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/ident.h"
#include "base/status.h"
#include "base/types.h"

/* The paged KV cache's unit, on every device and in every tier: a block is
 * WEFT_KV_BLOCK_TOKENS tokens of K and V for every layer (backends/backend.h
 * gives the device layout: each layer's K, then V, each
 * [WEFT_KV_BLOCK_TOKENS][n_kv_head][head_dim] of the KV type). */
#define WEFT_KV_BLOCK_TOKENS 16

/* Bytes of one layer's K (or V) in one block. */
size_t weft_kv_block_layer_bytes(enum weft_type type, uint32_t n_kv_head, uint32_t head_dim);

/* Chained hash of one full block (never 0): a block is named by its content. */
uint64_t weft_kv_block_hash(uint64_t parent, const int32_t *tokens);

#define WEFT_KVB_VERSION 1
#define WEFT_KVB_HEADER_BYTES 80
#define WEFT_KVB_TOKENS WEFT_KV_BLOCK_TOKENS
#define WEFT_KVB_BLOCK_META 80 /* parent, hash, tokens: before the payload */

struct weft_kvb_header {
    struct weft_fingerprint fp;
    enum weft_type type;
    uint32_t n_layer, n_kv_head, head_dim;
    uint32_t layer0, n_layers;
    uint32_t n_blocks;
    uint32_t payload_bytes;    /* set by weft_kvb_header_init / checked on read */
};

struct weft_kvb_block {
    uint64_t parent, hash;
    int32_t tokens[WEFT_KVB_TOKENS];
    const unsigned char *payload;  /* payload_bytes; into the buffer read from */
};

/* CRC-32C (Castagnoli), as iSCSI and ext4 use it; crc 0 to start. */
uint32_t weft_crc32c(uint32_t crc, const void *data, size_t len);

/* Bytes of one block's payload (every layer of the range, K and V). */
size_t weft_kvb_payload_bytes(enum weft_type type, uint32_t n_layers, uint32_t n_kv_head, uint32_t head_dim);
/* Bytes of one block record. */
static inline size_t weft_kvb_record_bytes(const struct weft_kvb_header *h)
{
    return WEFT_KVB_BLOCK_META + h->payload_bytes + 4;
}

/* Fill payload_bytes from the rest; WEFT_ERR_INVALID_ARG on a shape the
 * format cannot hold (a type other than F16/Q8_0, a layer range past
 * n_layer, a Q8_0 head_dim not a multiple of 32, sizes past 1 GiB a block). */
weft_status weft_kvb_header_init(struct weft_kvb_header *h);

/* Write the header's 80 bytes. */
void weft_kvb_write_header(const struct weft_kvb_header *h, unsigned char out[WEFT_KVB_HEADER_BYTES]);
/* Write one block record (weft_kvb_record_bytes(h) bytes). */
void weft_kvb_write_block(const struct weft_kvb_header *h, uint64_t parent, uint64_t hash,
                          const int32_t tokens[WEFT_KVB_TOKENS], const void *payload, unsigned char *out);

/* Parse and check a header from n bytes. */
weft_status weft_kvb_read_header(const unsigned char *buf, size_t n, struct weft_kvb_header *out);
/* What a reader holds: a header must match it (the same fingerprint,
 * n_layer, n_kv_head, head_dim; block tokens are always 16). A header of
 * another KV type is WEFT_ERR_MISMATCH unless allow_convert (then
 * weft_kvb_convert is the caller's next step). */
struct weft_kvb_expect {
    struct weft_fingerprint fp;
    uint32_t n_layer, n_kv_head, head_dim;
    enum weft_type type;
    bool allow_convert;
};
weft_status weft_kvb_check_model(const struct weft_kvb_header *h, const struct weft_kvb_expect *want);
/* Parse and check one block record (weft_kvb_record_bytes(h) bytes from buf,
 * n the bytes available). */
weft_status weft_kvb_read_block(const struct weft_kvb_header *h, const unsigned char *buf, size_t n,
                                struct weft_kvb_block *out);

/* Convert one block's payload from h's type to `to` (F16 <-> Q8_0, or a
 * copy when equal). dst holds weft_kvb_payload_bytes(to, ...). */
weft_status weft_kvb_convert(const struct weft_kvb_header *h, const void *src, enum weft_type to, void *dst);

/* n bytes (header included) are whole block records, as many as the header
 * names (any number when it names 0). */
bool weft_kvb_sizes_ok(const struct weft_kvb_header *h, size_t n);

/* A whole stream in memory (header + blocks): checks the header (against
 * want unless NULL) and every block; calls fn for each good block in order.
 * Stops at the first bad one or the first failure fn returns; the blocks
 * before it were delivered (a hash chain is only usable up to a break
 * anyway). *n_good counts the delivered ones. A header with n_blocks 0
 * takes blocks until the buffer ends; a size that is not whole records, or
 * not the number the header names, is refused before any block is read. */
typedef weft_status (*weft_kvb_block_fn)(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b);
weft_status weft_kvb_read_stream(const unsigned char *buf, size_t n, const struct weft_kvb_expect *want,
                                 struct weft_kvb_header *h, weft_kvb_block_fn fn, void *user, uint32_t *n_good);

#endif
