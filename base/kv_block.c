#include "base/kv_block.h"

#include <stdlib.h>
#include <string.h>

#include "base/hmac.h"
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

/* ---- keys ----------------------------------------------------------------- */

static const char MAC_LABEL[] = "weft kv block mac v2";

weft_status weft_kvb_keys_derive(const char *secret, const char *previous, struct weft_kvb_keys *out)
{
    struct weft_kvb_keys k = {.n = 0};
    const char *s[2] = {secret, previous};
    for (int i = 0; i < 2 && s[i]; i++) {
        if (strlen(s[i]) < 16)
            return weft_error(WEFT_ERR_INVALID_ARG, "kv secret: %s secret has %zu characters, at least 16 are needed",
                              i ? "the previous" : "the", strlen(s[i]));
        weft_status st = weft_hmac_sha256(s[i], strlen(s[i]), MAC_LABEL, sizeof MAC_LABEL - 1, NULL, 0, k.key[i]);
        if (st != WEFT_OK) return st;
        k.n = (uint32_t)i + 1;
    }
    *out = k;
    return WEFT_OK;
}

/* ---- header --------------------------------------------------------------- */

#define MAX_PAYLOAD ((size_t)1 << 30)
#define FIXED 72 /* bytes before the layout table */

/* V's head dim of a run */
static uint32_t run_v(const struct weft_kvb_layout *l) { return l->c ? l->c : l->b; }

static size_t run_layer_bytes(const struct weft_kvb_layout *l, enum weft_type type)
{
    /* ATTN and WINDOW alike: K, then V; LATENT: K only; SHARED: nothing */
    if (l->kind == WEFT_KVB_SHARED || l->kind == WEFT_KVB_STATE) return 0;
    if (l->kind == WEFT_KVB_LATENT) return weft_kv_block_layer_bytes(type, l->a, l->b);
    return weft_kv_block_layer_bytes(type, l->a, l->b) + weft_kv_block_layer_bytes(type, l->a, run_v(l));
}

void weft_kvb_layout_attn(struct weft_kvb_header *h, enum weft_type type, uint32_t n_layers, uint32_t n_kv_head,
                          uint32_t head_dim)
{
    h->n_layout = 1;
    h->layout[0] = (struct weft_kvb_layout){.kind = WEFT_KVB_ATTN, .type = (uint8_t)type, .n_layers = n_layers,
                                            .a = n_kv_head, .b = head_dim};
}

void weft_kvb_layout_latent(struct weft_kvb_header *h, enum weft_type type, uint32_t n_layers, uint32_t width,
                            uint32_t v_width)
{
    h->n_layout = 1;
    h->layout[0] = (struct weft_kvb_layout){.kind = WEFT_KVB_LATENT, .type = (uint8_t)type, .n_layers = n_layers,
                                            .a = 1, .b = width, .c = v_width};
}

bool weft_kvb_layout_window(struct weft_kvb_header *h, enum weft_type type, uint32_t n_layers, uint32_t n_kv_head,
                            uint32_t head_dim, uint32_t head_dim_v, const uint8_t *window)
{
    const uint32_t c = head_dim_v && head_dim_v != head_dim ? head_dim_v : 0;
    h->n_layout = 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        uint8_t kind = window && window[l] ? WEFT_KVB_WINDOW : WEFT_KVB_ATTN;
        if (h->n_layout && h->layout[h->n_layout - 1].kind == kind) {
            h->layout[h->n_layout - 1].n_layers++;
            continue;
        }
        if (h->n_layout == WEFT_KVB_MAX_LAYOUT) return false;
        h->layout[h->n_layout++] = (struct weft_kvb_layout){.kind = kind, .type = (uint8_t)type, .n_layers = 1,
                                                           .a = n_kv_head, .b = head_dim, .c = c};
    }
    return true;
}

bool weft_kvb_layout_replace(struct weft_kvb_header *h, const bool *which, const struct weft_kvb_layout *with)
{
    struct weft_kvb_layout out[WEFT_KVB_MAX_LAYOUT];
    uint32_t n = 0;
    for (uint32_t i = 0, l = 0; i < h->n_layout; i++)
        for (uint32_t j = 0; j < h->layout[i].n_layers; j++, l++) {
            struct weft_kvb_layout one = h->layout[i];
            one.n_layers = 1;
            if (which[l]) {
                one = *with;
                one.n_layers = 1;
            }
            if (n && out[n - 1].kind == one.kind && out[n - 1].type == one.type && out[n - 1].a == one.a &&
                out[n - 1].b == one.b && out[n - 1].c == one.c) {
                out[n - 1].n_layers++;
                continue;
            }
            if (n == WEFT_KVB_MAX_LAYOUT) return false;
            out[n++] = one;
        }
    memcpy(h->layout, out, n * sizeof *out);
    h->n_layout = n;
    return true;
}

/* The layout is one the format holds, covering the range; *payload set. */
static weft_status check_shape(const struct weft_kvb_header *h, size_t *payload, size_t *window, size_t *state)
{
    if (!h->n_layer || h->n_layer > 4096)
        return weft_error(WEFT_ERR_FORMAT, "kv block: %u layers is not a model's", h->n_layer);
    if (!h->n_layers || h->layer0 >= h->n_layer || h->n_layers > h->n_layer - h->layer0)
        return weft_error(WEFT_ERR_FORMAT, "kv block: layer range %u+%u is outside the model's %u layers", h->layer0,
                          h->n_layers, h->n_layer);
    if (!h->n_layout || h->n_layout > WEFT_KVB_MAX_LAYOUT)
        return weft_error(WEFT_ERR_FORMAT, "kv block: %u layout runs (1 to %d)", h->n_layout, WEFT_KVB_MAX_LAYOUT);
    uint64_t layers = 0, pb = 0, wb = 0, sb = 0;
    for (uint32_t i = 0; i < h->n_layout; i++) {
        const struct weft_kvb_layout *l = &h->layout[i];
        if (l->kind < WEFT_KVB_ATTN || l->kind > WEFT_KVB_STATE)
            return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u is of kind %u, this reader knows attention "
                              "K/V (1), sliding-window K/V (2), latent (3), shared (4) and recurrent state (5)", i,
                              l->kind);
        if (l->kind == WEFT_KVB_STATE) {
            if (!l->n_layers || !l->a || l->a % 4 || l->b || l->c || l->type != WEFT_TYPE_F32)
                return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: a recurrent state run of %u layers is "
                                  "F32 of a bytes a layer (a multiple of 4), b and c 0 (%u, %u, %u, type %u)", i,
                                  l->n_layers, l->a, l->b, l->c, l->type);
            layers += l->n_layers;
            sb += (uint64_t)l->n_layers * l->a;
            if (sb > WEFT_KVB_MAX_STATE)
                return weft_error(WEFT_ERR_FORMAT, "kv block: more than %zu state bytes a block", WEFT_KVB_MAX_STATE);
            continue;
        }
        if (l->kind == WEFT_KVB_SHARED) {
            if (!l->n_layers || l->a || l->b || l->c || (l->type != WEFT_TYPE_F16 && l->type != WEFT_TYPE_Q8_0))
                return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: a shared run of %u layers has no shape "
                                  "(%u, %u, %u) and the cache's type", i, l->n_layers, l->a, l->b, l->c);
            layers += l->n_layers;
            continue;
        }
        if (l->kind == WEFT_KVB_LATENT && (l->a != 1 || !l->c || l->c >= l->b ||
                                           (l->type == WEFT_TYPE_Q8_0 && (l->b - l->c) % 32)))
            return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: a latent cache of %u heads of %u (V the last "
                              "%u) is not one", i, l->a, l->b, l->c);
        if (l->type != WEFT_TYPE_F16 && l->type != WEFT_TYPE_Q8_0)
            return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: KV type %u is not F16 or Q8_0", i, l->type);
        if (!l->n_layers || !l->a || !l->b || l->a > 4096 || l->b > 4096 || l->c > 4096)
            return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: %u layers x %u KV heads x %u (V %u) is not one "
                              "a model has", i, l->n_layers, l->a, l->b, run_v(l));
        if (l->type == WEFT_TYPE_Q8_0 && (l->b % 32 || run_v(l) % 32))
            return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: Q8_0 needs head dims multiples of 32, not %u "
                              "and %u", i, l->b, run_v(l));
        layers += l->n_layers;
        pb += (uint64_t)l->n_layers * run_layer_bytes(l, (enum weft_type)l->type);
        if (l->kind == WEFT_KVB_WINDOW) wb += (uint64_t)l->n_layers * run_layer_bytes(l, (enum weft_type)l->type);
        if (pb > MAX_PAYLOAD)
            return weft_error(WEFT_ERR_FORMAT, "kv block: more than %zu payload bytes a block", MAX_PAYLOAD);
    }
    if (layers != h->n_layers)
        return weft_error(WEFT_ERR_FORMAT, "kv block: the layout's runs hold %llu layers, the range %u",
                          (unsigned long long)layers, h->n_layers);
    *payload = (size_t)pb;
    *window = (size_t)wb;
    *state = (size_t)sb;
    return WEFT_OK;
}

weft_status weft_kvb_header_init(struct weft_kvb_header *h)
{
    size_t pb, wb, sb;
    weft_status st = check_shape(h, &pb, &wb, &sb);
    if (st != WEFT_OK) return weft_error(WEFT_ERR_INVALID_ARG, "%s", weft_last_error());
    h->payload_bytes = (uint32_t)pb;
    h->window_bytes = (uint32_t)wb;
    h->state_bytes = (uint32_t)sb;
    h->header_bytes = FIXED + 16 * h->n_layout + 4;
    return WEFT_OK;
}

/* The header's bytes before its CRC, n_blocks 0 whatever it is: what a
 * block's MAC covers of it (a block moves between streams of any count). */
static void header_body(const struct weft_kvb_header *h, uint32_t n_blocks, unsigned char *out)
{
    memset(out, 0, FIXED);
    memcpy(out, MAGIC, 8);
    put32(out + 8, WEFT_KVB_VERSION);
    put32(out + 12, h->header_bytes);
    put64(out + 16, h->fp.hi);
    put64(out + 24, h->fp.lo);
    put32(out + 32, WEFT_KVB_TOKENS);
    put32(out + 36, h->n_layer);
    put32(out + 40, h->layer0);
    put32(out + 44, h->n_layers);
    put32(out + 48, n_blocks);
    put32(out + 52, h->payload_bytes);
    put32(out + 56, h->mac ? 1u : 0u);
    put32(out + 60, h->n_layout);
    for (uint32_t i = 0; i < h->n_layout; i++) {
        unsigned char *e = out + FIXED + 16 * i;
        const struct weft_kvb_layout *l = &h->layout[i];
        e[0] = l->kind;
        e[1] = l->type;
        e[2] = (unsigned char)(l->c & 0xff);
        e[3] = (unsigned char)(l->c >> 8);
        put32(e + 4, l->n_layers);
        put32(e + 8, l->a);
        put32(e + 12, l->b);
    }
}

void weft_kvb_write_header(const struct weft_kvb_header *h, unsigned char *out)
{
    size_t body = h->header_bytes - 4;
    header_body(h, h->n_blocks, out);
    put32(out + body, weft_crc32c(0, out, body));
}

weft_status weft_kvb_read_header(const unsigned char *buf, size_t n, struct weft_kvb_header *out)
{
    memset(out, 0, sizeof *out);
    if (n < FIXED + 4)
        return weft_error(WEFT_ERR_FORMAT, "kv block: %zu bytes is shorter than a header", n);
    if (memcmp(buf, MAGIC, 8) != 0) return weft_error(WEFT_ERR_FORMAT, "kv block: not a weft KV block stream (magic)");
    uint32_t version = get32(buf + 8);
    if (version != WEFT_KVB_VERSION)
        return weft_error(WEFT_ERR_FORMAT, "kv block: format version %u, this reader knows %d", version,
                          WEFT_KVB_VERSION);
    uint32_t hb = get32(buf + 12), n_layout = get32(buf + 60);
    if (n_layout == 0 || n_layout > WEFT_KVB_MAX_LAYOUT || hb != FIXED + 16 * n_layout + 4)
        return weft_error(WEFT_ERR_FORMAT, "kv block: a header of %u bytes with %u layout runs", hb, n_layout);
    if (n < hb) return weft_error(WEFT_ERR_FORMAT, "kv block: %zu bytes is shorter than the %u-byte header", n, hb);
    if (get32(buf + hb - 4) != weft_crc32c(0, buf, hb - 4))
        return weft_error(WEFT_ERR_FORMAT, "kv block: header CRC mismatch");
    if (get32(buf + 32) != WEFT_KVB_TOKENS)
        return weft_error(WEFT_ERR_FORMAT, "kv block: %u tokens a block, weft's blocks hold %d", get32(buf + 32),
                          WEFT_KVB_TOKENS);
    uint32_t flags = get32(buf + 56);
    if ((flags & ~1u) || get32(buf + 64) || get32(buf + 68))
        return weft_error(WEFT_ERR_FORMAT, "kv block: unknown flags or reserved header fields set");
    struct weft_kvb_header h = {.fp = {get64(buf + 16), get64(buf + 24)},
                                .n_layer = get32(buf + 36),
                                .layer0 = get32(buf + 40),
                                .n_layers = get32(buf + 44),
                                .n_blocks = get32(buf + 48),
                                .payload_bytes = get32(buf + 52),
                                .mac = flags & 1,
                                .n_layout = n_layout,
                                .header_bytes = hb};
    for (uint32_t i = 0; i < n_layout; i++) {
        const unsigned char *e = buf + FIXED + 16 * i;
        h.layout[i] = (struct weft_kvb_layout){.kind = e[0], .type = e[1], .n_layers = get32(e + 4),
                                               .a = get32(e + 8), .b = get32(e + 12),
                                               .c = (uint32_t)e[2] | (uint32_t)e[3] << 8};
        if (h.layout[i].c == h.layout[i].b && h.layout[i].kind != WEFT_KVB_SHARED && h.layout[i].kind != WEFT_KVB_STATE)
            return weft_error(WEFT_ERR_FORMAT, "kv block: layout run %u: V's head dim %u written as differing", i,
                              h.layout[i].c);
    }
    size_t pb, wb, sb;
    weft_status st = check_shape(&h, &pb, &wb, &sb);
    if (st != WEFT_OK) return st;
    h.window_bytes = (uint32_t)wb;
    h.state_bytes = (uint32_t)sb;
    if (h.payload_bytes != pb)
        return weft_error(WEFT_ERR_FORMAT, "kv block: header says %u payload bytes a block, its layout needs %zu",
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
    if (h->n_layer != want->n_layer)
        return weft_error(WEFT_ERR_MISMATCH, "kv block: a model of %u layers, this one has %u", h->n_layer,
                          want->n_layer);
    /* the importing cache holds every layer: a block that names fewer would
     * leave the rest of its slot to whatever the pool held before */
    if (h->layer0 != 0 || h->n_layers != want->n_layer)
        return weft_error(WEFT_ERR_FORMAT, "kv block: the stream holds layers %u..%u, this cache needs all %u",
                          h->layer0, h->layer0 + h->n_layers - 1, want->n_layer);
    bool other_type = false, same = h->n_layout == want->n_layout;
    for (uint32_t i = 0; same && i < h->n_layout; i++) {
        const struct weft_kvb_layout *a = &h->layout[i], *b = &want->layout[i];
        same = a->kind == b->kind && a->n_layers == b->n_layers && a->a == b->a && a->b == b->b && a->c == b->c;
        other_type |= a->type != b->type;  /* a STATE run's is always F32 */
    }
    if (!same) {
        const struct weft_kvb_layout *a = &h->layout[0], *b = &want->layout[0];
        return weft_error(WEFT_ERR_MISMATCH, "kv block: layout of %u runs (first: %u layers x %u x %u), this cache's "
                          "is %u runs (first: %u layers x %u x %u)", h->n_layout, a->n_layers, a->a, a->b,
                          want->n_layout, b->n_layers, b->a, b->b);
    }
    if (other_type && !want->allow_convert) {
        uint32_t i = 0;
        while (i + 1 < h->n_layout && h->layout[i].type == want->layout[i].type) i++;
        return weft_error(WEFT_ERR_MISMATCH, "kv block: KV type %s, this cache holds %s (conversion not enabled)",
                          weft_type_name((enum weft_type)h->layout[i].type),
                          weft_type_name((enum weft_type)want->layout[i].type));
    }
    if (want->keys && want->keys->n && !h->mac)
        return weft_error(WEFT_ERR_AUTH, "kv block: the blocks carry no MAC and this instance takes only blocks made "
                          "under the fleet secret");
    return WEFT_OK;
}

/* ---- blocks --------------------------------------------------------------- */

/* HMAC-SHA256 of one record's body (meta + payload [+ state]: body bytes) under key, bound
 * to h. */
static weft_status block_mac(const struct weft_kvb_header *h, const unsigned char *key, const unsigned char *rec,
                             size_t body, unsigned char out[WEFT_KVB_MAC_BYTES])
{
    unsigned char hb[WEFT_KVB_HEADER_MAX], hd[32];
    header_body(h, 0, hb);
    weft_status st = weft_sha256(hb, h->header_bytes - 4, hd);
    if (st != WEFT_OK) return st;
    return weft_hmac_sha256(key, 32, hd, sizeof hd, rec, body, out);
}

void weft_kvb_write_block(const struct weft_kvb_header *h, const struct weft_kvb_keys *keys, uint64_t parent,
                          uint64_t hash, const int32_t tokens[WEFT_KVB_TOKENS], uint32_t flags, const void *payload,
                          const void *state, unsigned char *out)
{
    if (!h->window_bytes) flags &= ~WEFT_KVB_BLOCK_WINDOW;
    if (!h->state_bytes || !state) flags &= ~WEFT_KVB_BLOCK_STATE;
    flags &= WEFT_KVB_BLOCK_WINDOW | WEFT_KVB_BLOCK_STATE;
    put64(out, parent);
    put64(out + 8, hash);
    for (int i = 0; i < WEFT_KVB_TOKENS; i++) put32(out + 16 + 4 * i, (uint32_t)tokens[i]);
    put32(out + 80, flags);
    put32(out + 84, 0);
    size_t keep = h->window_bytes && !(flags & WEFT_KVB_BLOCK_WINDOW) ? h->payload_bytes - h->window_bytes
                                                                      : h->payload_bytes;
    memcpy(out + WEFT_KVB_BLOCK_META, payload, keep);
    memset(out + WEFT_KVB_BLOCK_META + keep, 0, h->payload_bytes - keep);
    size_t body = WEFT_KVB_BLOCK_META + (size_t)h->payload_bytes;
    if (flags & WEFT_KVB_BLOCK_STATE) {
        memcpy(out + body, state, h->state_bytes);
        body += h->state_bytes;
    }
    if (h->mac) {
        /* a write without a key (a caller's bug) leaves a MAC no reader takes */
        if (!keys || !keys->n || block_mac(h, keys->key[0], out, body, out + body) != WEFT_OK)
            memset(out + body, 0, WEFT_KVB_MAC_BYTES);
        body += WEFT_KVB_MAC_BYTES;
    }
    put32(out + body, weft_crc32c(0, out, body));
}

weft_status weft_kvb_read_block(const struct weft_kvb_header *h, const struct weft_kvb_keys *keys,
                                const unsigned char *buf, size_t n, struct weft_kvb_block *out)
{
    if (n < weft_kvb_record_bytes(h))
        return weft_error(WEFT_ERR_FORMAT, "kv block: truncated (%zu of %zu bytes)", n, weft_kvb_record_bytes(h));
    const uint32_t flags = get32(buf + 80);
    size_t need = weft_kvb_record_bytes_flags(h, flags), body = need - 4;
    if (n < need) return weft_error(WEFT_ERR_FORMAT, "kv block: truncated (%zu of %zu bytes)", n, need);
    if (get32(buf + body) != weft_crc32c(0, buf, body)) return weft_error(WEFT_ERR_FORMAT, "kv block: CRC mismatch");
    struct weft_kvb_block b = {.parent = get64(buf), .hash = get64(buf + 8), .flags = flags,
                               .payload = buf + WEFT_KVB_BLOCK_META};
    for (int i = 0; i < WEFT_KVB_TOKENS; i++) b.tokens[i] = (int32_t)get32(buf + 16 + 4 * i);
    if (h->mac) body -= WEFT_KVB_MAC_BYTES;
    if (keys && keys->n) {
        if (!h->mac)
            return weft_error(WEFT_ERR_AUTH, "kv block: the block carries no MAC");
        const unsigned char *tag = buf + body;
        bool ok = false;
        for (uint32_t k = 0; k < keys->n && !ok; k++) {
            unsigned char want[WEFT_KVB_MAC_BYTES];
            weft_status st = block_mac(h, keys->key[k], buf, body, want);
            if (st != WEFT_OK) return st;
            ok = weft_digest_eq(want, tag);
        }
        if (!ok)
            return weft_error(WEFT_ERR_AUTH, "kv block: block %016llx's MAC is not one made under the fleet secret",
                              (unsigned long long)b.hash);
    }
    if ((b.flags & ~(WEFT_KVB_BLOCK_WINDOW | WEFT_KVB_BLOCK_STATE)) || get32(buf + 84) ||
        ((b.flags & WEFT_KVB_BLOCK_WINDOW) && !h->window_bytes) || ((b.flags & WEFT_KVB_BLOCK_STATE) && !h->state_bytes))
        return weft_error(WEFT_ERR_FORMAT, "kv block: block flags %#x (reserved %#x) are not ones this layout has",
                          b.flags, get32(buf + 84));
    if (b.hash != weft_kv_block_hash(b.parent, b.tokens))
        return weft_error(WEFT_ERR_FORMAT, "kv block: hash %016llx is not its parent's and tokens' hash",
                          (unsigned long long)b.hash);
    if (b.flags & WEFT_KVB_BLOCK_STATE) b.state = buf + WEFT_KVB_BLOCK_META + h->payload_bytes;
    *out = b;
    return WEFT_OK;
}

size_t weft_kvb_payload_bytes_as(const struct weft_kvb_header *h, enum weft_type to)
{
    size_t pb = 0;
    for (uint32_t i = 0; i < h->n_layout; i++) pb += (size_t)h->layout[i].n_layers * run_layer_bytes(&h->layout[i], to);
    return pb;
}

weft_status weft_kvb_convert(const struct weft_kvb_header *h, const void *src, enum weft_type to, void *dst)
{
    if (to != WEFT_TYPE_F16 && to != WEFT_TYPE_Q8_0)
        return weft_error(WEFT_ERR_UNSUPPORTED, "kv block: no conversion to %s", weft_type_name(to));
    const unsigned char *s = src;
    unsigned char *d = dst;
    /* the payload's order: the ATTN runs' layers, then the WINDOW runs' */
    for (uint32_t k = 0; k < 2 * h->n_layout; k++) {
        const struct weft_kvb_layout *l = &h->layout[k % h->n_layout];
        if ((l->kind == WEFT_KVB_WINDOW) != (k >= h->n_layout) || l->kind == WEFT_KVB_SHARED ||
            l->kind == WEFT_KVB_STATE)
            continue;
        enum weft_type from = (enum weft_type)l->type;
        size_t in_bytes = (size_t)l->n_layers * run_layer_bytes(l, from);
        if (from == to) {
            memcpy(d, s, in_bytes);
            s += in_bytes;
            d += in_bytes;
            continue;
        }
        if (to == WEFT_TYPE_Q8_0 && (l->b % 32 || run_v(l) % 32))
            return weft_error(WEFT_ERR_UNSUPPORTED, "kv block: head dims %u and %u cannot be Q8_0", l->b, run_v(l));
        /* row by row: one token's heads of one layer's K (16 rows), then V's */
        int64_t widest = (int64_t)l->a * (l->b > run_v(l) ? l->b : run_v(l));
        float *tmp = malloc(sizeof(float) * (size_t)widest);
        if (!tmp) return weft_error(WEFT_ERR_NOMEM, "kv block: out of memory");
        for (uint32_t layer = 0; layer < l->n_layers; layer++)
            for (int kv = 0; kv < (l->kind == WEFT_KVB_LATENT ? 1 : 2); kv++) {
                int64_t row = (int64_t)l->a * (kv ? run_v(l) : l->b);
                size_t in_row = weft_row_size(from, row), out_row = weft_row_size(to, row);
                for (int r = 0; r < WEFT_KVB_TOKENS; r++) {
                    weft_dequantize_row(from, s, tmp, row);
                    weft_quantize_row(to, tmp, d, row);  /* as the backends write KV */
                    s += in_row;
                    d += out_row;
                }
            }
        free(tmp);
    }
    return WEFT_OK;
}

/* The records of buf's n bytes after the header, each as long as its flags say (a flag
 * the layout lacks counts nothing: its reader refuses it); false when they are not whole. */
static bool count_records(const struct weft_kvb_header *h, const unsigned char *buf, size_t n, size_t *count)
{
    size_t off = h->header_bytes, k = 0, rec = weft_kvb_record_bytes(h);
    if (n < off) return false;
    while (off < n) {
        if (n - off < rec) return false;
        size_t len = weft_kvb_record_bytes_flags(h, get32(buf + off + 80));
        if (n - off < len) return false;
        off += len;
        k++;
    }
    *count = k;
    return true;
}

bool weft_kvb_sizes_ok(const struct weft_kvb_header *h, const unsigned char *buf, size_t n)
{
    size_t count = 0;
    if (!count_records(h, buf, n, &count)) return false;
    return count <= UINT32_MAX && (!h->n_blocks || count == h->n_blocks);
}

weft_status weft_kvb_read_stream(const unsigned char *buf, size_t n, const struct weft_kvb_expect *want,
                                 struct weft_kvb_header *h, weft_kvb_block_fn fn, void *user, uint32_t *n_good)
{
    *n_good = 0;
    weft_status st = weft_kvb_read_header(buf, n, h);
    if (st == WEFT_OK && want) st = weft_kvb_check_model(h, want);
    if (st != WEFT_OK) return st;
    size_t off = h->header_bytes, count = 0;
    if (!count_records(h, buf, n, &count))
        return weft_error(WEFT_ERR_FORMAT, "kv block: %zu bytes after the header are not whole blocks of %zu bytes "
                          "(%zu more with a state checkpoint)", n - off, weft_kvb_record_bytes(h),
                          (size_t)h->state_bytes);
    if (count > UINT32_MAX || (h->n_blocks && count != h->n_blocks))
        return weft_error(WEFT_ERR_FORMAT, "kv block: the header names %u blocks, the stream has %zu after it",
                          h->n_blocks, count);
    const struct weft_kvb_keys *keys = want ? want->keys : NULL;
    for (size_t i = 0; i < count; i++) {
        struct weft_kvb_block b;
        if ((st = weft_kvb_read_block(h, keys, buf + off, n - off, &b)) != WEFT_OK) return st;
        if (fn && (st = fn(user, h, &b)) != WEFT_OK) return st;
        off += weft_kvb_record_bytes_flags(h, b.flags);
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
