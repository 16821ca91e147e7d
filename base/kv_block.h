/* KV block format v5: the one way KV blocks leave a device, whatever
 * backend made them: on the wire between instances, in pushes of a
 * prefill/decode hand-off and in Redis.
 *
 * A stream is a header, then blocks. All integers little-endian.
 *
 *   header (76 + 16 x n_layout bytes)
 *     0  magic "WEFTKVB\0"            8  version (4)          12 header bytes
 *     16 fingerprint hi, lo (u64 x2)  32 block tokens (16)    36 n_layer (the model's)
 *     40 layer0, 44 n_layers (the layer range the payloads hold)
 *     48 n_blocks (that follow; 0 = until the stream ends)
 *     52 payload bytes per block      56 flags (bit 0: each block carries a MAC)
 *     60 n_layout                     64 reserved (0) x2
 *     72 the layout: n_layout runs of 16 bytes, in layer order, covering the
 *        range: 0 kind (u8), 1 KV type (u8, weft_type), 2 c (u16),
 *        4 layers in the run (u32), 8 a (u32), 12 b (u32)
 *     72 + 16 n_layout: CRC-32C of every byte before it
 *   block (88 + payload [+ state] [+ 32] + 4 bytes)
 *     0  parent hash (u64)            8  block hash (u64)
 *     16 token ids (i32 x 16)         80 block flags (u32; bit 0: its window
 *        layers' K/V are in the payload; bit 1 (v5): a state checkpoint
 *        follows the payload)                   84 reserved (0)
 *     88 payload: the layers of the ATTN runs, in layer order, each as its
 *        run says; then those of the WINDOW runs, in layer order (all zero,
 *        and not to be used, when flag bit 0 is clear: a block whose window
 *        part its writer had dropped); with flag bit 1, then the STATE runs'
 *        recurrent state after the block's last token, their layers in layer
 *        order (state bytes: the runs' a each); then, with the MAC flag,
 *        HMAC-SHA256 (32 bytes, below); last: CRC-32C of every byte before it
 *   A record's size is the header's fixed one, plus the state bytes when its
 *   flag bit 1 is set: a reader reads the flags to find the next record.
 *
 * A layout run says what one layer's slot of a block holds, so a family
 * whose layers cache differently (a sliding window, a latent cache, a
 * recurrent state) adds a kind, not a format:
 *   WEFT_KVB_ATTN (1): K [16][a = KV heads][b = head dim] then V
 *     [16][a][c = V's head dim, 0: b] of the KV type (backends/backend.h's
 *     layout of one block).
 *   WEFT_KVB_WINDOW (2): the same K/V of a sliding-window layer. A writer
 *     that keeps only the blocks a window overlaps (core/kv.h) may hold a
 *     block without them: its flag bit 0 says whether they came. A reader
 *     takes the rest of such a block, and a prefix hit needs the window
 *     part only for the blocks a window before its boundary overlaps.
 *   WEFT_KVB_LATENT (3, v4): a latent cache (DeepSeek's MLA): K only,
 *     [16][a = 1][b = its width], whose last c values are the V (c < b).
 *   WEFT_KVB_SHARED (4): layers that keep no K/V: each attends to an
 *     earlier layer's (Gemma 4's shared KV; which one is the model's, fixed
 *     by its fingerprint); nothing in the payload (a, b, c 0).
 *   WEFT_KVB_STATE (5, v5): recurrent layers (Qwen3.5's Gated DeltaNet): no
 *     K/V but a fixed-size state per sequence, of type F32, a = its bytes per
 *     layer (the short convolution's window, then the delta rule's matrix,
 *     each at a 256-byte boundary: the state layout of backends/backend.h);
 *     nothing in the payload. A block that ends where its writer had a state
 *     checkpoint (core/kv.h) carries it (flag bit 1): a reader resumes a
 *     sequence from it, and a block without one only after a later block
 *     that has one (a, b, c 0 but a).
 * A reader refuses a kind it does not know (v4 and older streams: by
 * version).
 *
 * The MAC binds a block's bytes to its model and layout: HMAC-SHA256 under
 * a key derived from the fleet secret (weft_kvb_keys_derive) over
 * SHA-256(the header with n_blocks 0 and without its CRC) then the block's
 * bytes up to the MAC. Whoever can write where blocks travel (Redis, a
 * push) without the secret cannot make a block a reader takes.
 *
 * Reading checks all of it: magic, version, sizes, the header CRC, the model
 * fingerprint and layout against the reader's, the layer range (all of the
 * model's layers), each block's CRC and MAC, and that its hash is
 * weft_kv_block_hash(parent, tokens) (a block is named by its content; a
 * block under a wrong name is never used). Any mismatch is WEFT_ERR_FORMAT
 * (WEFT_ERR_MISMATCH for a foreign model or layout, WEFT_ERR_AUTH for a
 * missing or wrong MAC) with a message naming it.
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

#define WEFT_KVB_VERSION 5
#define WEFT_KVB_TOKENS WEFT_KV_BLOCK_TOKENS
#define WEFT_KVB_BLOCK_META 88 /* parent, hash, tokens, flags: before the payload */
#define WEFT_KVB_BLOCK_WINDOW 1u /* block flag: the WINDOW runs' K/V are in the payload */
#define WEFT_KVB_BLOCK_STATE 2u  /* block flag: the STATE runs' state checkpoint follows the payload */
#define WEFT_KVB_MAX_STATE ((size_t)1 << 30) /* state bytes of one record, at most */
#define WEFT_KVB_MAC_BYTES 32
#define WEFT_KVB_MAX_LAYOUT 64 /* runs in one header */
#define WEFT_KVB_HEADER_MAX (76 + 16 * WEFT_KVB_MAX_LAYOUT)

enum weft_kvb_kind {
    WEFT_KVB_ATTN = 1,   /* K then V, each [16][a KV heads][b head dim] */
    WEFT_KVB_WINDOW = 2, /* the same, of a sliding-window layer: may be absent from a block */
    WEFT_KVB_LATENT = 3, /* K only [16][1][b], V = its last c values (MLA) */
    WEFT_KVB_SHARED = 4, /* no K/V: the layer reads an earlier layer's (nothing in the payload) */
    WEFT_KVB_STATE = 5,  /* no K/V: recurrent state, a bytes per layer, in records that carry one */
};

/* n_layers consecutive layers whose slot of a block holds the same thing. */
struct weft_kvb_layout {
    uint8_t kind;          /* enum weft_kvb_kind */
    uint8_t type;          /* enum weft_type of the cache */
    uint32_t n_layers;
    uint32_t a, b;         /* WEFT_KVB_ATTN, _WINDOW: KV heads, head dim; _STATE: a = bytes a layer */
    uint32_t c;            /* their V's head dim when it differs from b (0: b; < 65536) */
};

struct weft_kvb_header {
    struct weft_fingerprint fp;
    uint32_t n_layer;          /* the model's */
    uint32_t layer0, n_layers; /* the range the payloads hold */
    uint32_t n_blocks;
    bool mac;                  /* each block carries an HMAC-SHA256 */
    uint32_t n_layout;
    struct weft_kvb_layout layout[WEFT_KVB_MAX_LAYOUT];
    uint32_t payload_bytes;    /* set by weft_kvb_header_init / checked on read */
    uint32_t window_bytes;     /* likewise: the WINDOW runs' part of it (at its end) */
    uint32_t state_bytes;      /* likewise: a state checkpoint's bytes (the STATE runs'; 0: none) */
    uint32_t header_bytes;     /* likewise */
};

struct weft_kvb_block {
    uint64_t parent, hash;
    int32_t tokens[WEFT_KVB_TOKENS];
    uint32_t flags;                /* WEFT_KVB_BLOCK_WINDOW, _STATE */
    const unsigned char *payload;  /* payload_bytes; into the buffer read from */
    const unsigned char *state;    /* state_bytes when flags has WEFT_KVB_BLOCK_STATE, else NULL */
};

/* MAC keys derived from the fleet secret (--kv-secret) and the one it
 * replaces (--kv-secret-previous, during a rotation): blocks are written
 * under key[0], read under either. n 0: no secret. */
struct weft_kvb_keys {
    unsigned char key[2][32];
    uint32_t n;
};
/* Derive keys from secret (and previous, or NULL): HMAC-SHA256(secret,
 * "weft kv block mac v2"). A secret shorter than 16 bytes is
 * WEFT_ERR_INVALID_ARG (out untouched). */
weft_status weft_kvb_keys_derive(const char *secret, const char *previous, struct weft_kvb_keys *out);

/* CRC-32C (Castagnoli), as iSCSI and ext4 use it; crc 0 to start. */
uint32_t weft_crc32c(uint32_t crc, const void *data, size_t len);

/* A layout of n_layers layers that all cache attention K/V of one shape:
 * one run. */
void weft_kvb_layout_attn(struct weft_kvb_header *h, enum weft_type type, uint32_t n_layers, uint32_t n_kv_head,
                          uint32_t head_dim);
/* The same with V heads of head_dim_v (0: head_dim) and the layers
 * window[l] marks as WINDOW runs (window NULL: none); false when it takes
 * more runs than a header holds. */
bool weft_kvb_layout_window(struct weft_kvb_header *h, enum weft_type type, uint32_t n_layers, uint32_t n_kv_head,
                            uint32_t head_dim, uint32_t head_dim_v, const uint8_t *window);
/* A latent cache's layout: every layer one K row of `width` per token, whose last v_width
 * values are the V (one LATENT run). */
void weft_kvb_layout_latent(struct weft_kvb_header *h, enum weft_type type, uint32_t n_layers, uint32_t width,
                            uint32_t v_width);
/* The layers which[l] marks (n_layers flags) become runs like `with` (its n_layers
 * aside: a SHARED run, a STATE run), the other runs split around them and equal
 * neighbours merged; false when it takes more runs than a header holds. */
bool weft_kvb_layout_replace(struct weft_kvb_header *h, const bool *which, const struct weft_kvb_layout *with);
/* Bytes of one block record without a state checkpoint. */
static inline size_t weft_kvb_record_bytes(const struct weft_kvb_header *h)
{
    return WEFT_KVB_BLOCK_META + h->payload_bytes + (h->mac ? WEFT_KVB_MAC_BYTES : 0) + 4;
}
/* ... of one with these block flags (WEFT_KVB_BLOCK_STATE: with the checkpoint). */
static inline size_t weft_kvb_record_bytes_flags(const struct weft_kvb_header *h, uint32_t flags)
{
    return weft_kvb_record_bytes(h) + (flags & WEFT_KVB_BLOCK_STATE ? h->state_bytes : 0);
}

/* Fill payload_bytes and header_bytes from the rest; WEFT_ERR_INVALID_ARG
 * on a header the format cannot hold (a layout whose runs do not cover the
 * range, an unknown kind, a type other than F16/Q8_0, a Q8_0 head_dim not a
 * multiple of 32, a layer range past n_layer, sizes past 1 GiB a block). */
weft_status weft_kvb_header_init(struct weft_kvb_header *h);

/* Write the header's h->header_bytes bytes. */
void weft_kvb_write_header(const struct weft_kvb_header *h, unsigned char *out);
/* Write one block record (weft_kvb_record_bytes_flags(h, flags) bytes), with its MAC
 * under keys->key[0] when h->mac (keys must then hold a key). flags:
 * WEFT_KVB_BLOCK_WINDOW when payload holds the window part (the header has
 * WINDOW runs); without it only payload_bytes - window_bytes are read from
 * payload and the rest is written as zeros. WEFT_KVB_BLOCK_STATE (the header
 * has STATE runs): state's state_bytes follow the payload. */
void weft_kvb_write_block(const struct weft_kvb_header *h, const struct weft_kvb_keys *keys, uint64_t parent,
                          uint64_t hash, const int32_t tokens[WEFT_KVB_TOKENS], uint32_t flags, const void *payload,
                          const void *state, unsigned char *out);

/* Parse and check a header from n bytes. */
weft_status weft_kvb_read_header(const unsigned char *buf, size_t n, struct weft_kvb_header *out);
/* What a reader holds: a header must match it (the same fingerprint,
 * n_layer and layout; block tokens are always 16) and cover every layer (a
 * partial range is WEFT_ERR_FORMAT). A layout of another KV type is
 * WEFT_ERR_MISMATCH unless allow_convert (then weft_kvb_convert is the
 * caller's next step). keys: with a key, every block must carry a MAC made
 * under one of them (WEFT_ERR_AUTH); NULL or none: MACs are not checked. */
struct weft_kvb_expect {
    struct weft_fingerprint fp;
    uint32_t n_layer;
    uint32_t n_layout;
    struct weft_kvb_layout layout[WEFT_KVB_MAX_LAYOUT];
    bool allow_convert;
    const struct weft_kvb_keys *keys;
};
weft_status weft_kvb_check_model(const struct weft_kvb_header *h, const struct weft_kvb_expect *want);
/* Parse and check one block record (weft_kvb_record_bytes_flags(h, its flags) bytes from
 * buf, n the bytes available); its MAC against keys (NULL or none: not checked). */
weft_status weft_kvb_read_block(const struct weft_kvb_header *h, const struct weft_kvb_keys *keys,
                                const unsigned char *buf, size_t n, struct weft_kvb_block *out);

/* Convert one block's payload from h's types to `to` (F16 <-> Q8_0 for
 * every attention run, or a copy when equal). dst holds the payload of h's
 * layout in type `to`. */
weft_status weft_kvb_convert(const struct weft_kvb_header *h, const void *src, enum weft_type to, void *dst);
/* Bytes of one block's payload with every run's type replaced by to. */
size_t weft_kvb_payload_bytes_as(const struct weft_kvb_header *h, enum weft_type to);

/* buf's n bytes (header included) are whole block records, as many as the header names
 * (any number when it names 0), each of the size its flags say. */
bool weft_kvb_sizes_ok(const struct weft_kvb_header *h, const unsigned char *buf, size_t n);

/* A whole stream in memory (header + blocks): checks the header (against
 * want unless NULL) and every block (its MAC under want->keys); calls fn for
 * each good block in order. Stops at the first bad one or the first failure
 * fn returns; the blocks before it were delivered (a hash chain is only
 * usable up to a break anyway). *n_good counts the delivered ones. A header
 * with n_blocks 0 takes blocks until the buffer ends; a size that is not
 * whole records, or not the number the header names, is refused before any
 * block is read. */
typedef weft_status (*weft_kvb_block_fn)(void *user, const struct weft_kvb_header *h, const struct weft_kvb_block *b);
weft_status weft_kvb_read_stream(const unsigned char *buf, size_t n, const struct weft_kvb_expect *want,
                                 struct weft_kvb_header *h, weft_kvb_block_fn fn, void *user, uint32_t *n_good);

#endif
