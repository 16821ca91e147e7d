/* weft_fingerprint (fingerprint.h). */
#include "core/fingerprint.h"

#include <stdio.h>
#include <string.h>

#include "core/model.h"

#define M1 0x9fb21c651e98df25ull
#define M2 0xd6e8feb86659fd93ull
#define M3 0xbf58476d1ce4e5b9ull
#define M4 0x94d049bb133111ebull

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t fmix(uint64_t x)
{
    x ^= x >> 30;
    x *= M3;
    x ^= x >> 27;
    x *= M4;
    x ^= x >> 31;
    return x;
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);  /* little-endian, as GGUF */
    return v;
}

/* One 32-byte stripe: lane i takes word i. */
static void stripe(uint64_t lane[4], const unsigned char *p)
{
    for (int i = 0; i < 4; i++) {
        uint64_t w = rd64(p + 8 * i);
        lane[i] = rotl((lane[i] ^ w) * M1, 29 + 2 * i) + w * M2;
    }
}

void weft_fphash_init(struct weft_fphash *h, uint64_t seed)
{
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 4; i++) h->lane[i] = fmix(seed + (uint64_t)(i + 1) * M2);
}

void weft_fphash_update(struct weft_fphash *h, const void *data, size_t len)
{
    const unsigned char *p = data;
    h->total += len;
    if (h->n_tail) {
        size_t take = 32 - h->n_tail < len ? 32 - h->n_tail : len;
        memcpy(h->tail + h->n_tail, p, take);
        h->n_tail += take;
        p += take;
        len -= take;
        if (h->n_tail < 32) return;
        stripe(h->lane, h->tail);
        h->n_tail = 0;
    }
    while (len >= 32) {
        stripe(h->lane, p);
        p += 32;
        len -= 32;
    }
    memcpy(h->tail, p, len);
    h->n_tail = len;
}

struct weft_fingerprint weft_fphash_final(const struct weft_fphash *h)
{
    uint64_t lane[4];
    memcpy(lane, h->lane, sizeof lane);
    unsigned char last[32] = {0};
    memcpy(last, h->tail, h->n_tail);
    last[31] ^= (unsigned char)(0x80 | h->n_tail);  /* the tail's length, so "a" != "a\0" */
    stripe(lane, last);
    uint64_t a = fmix(lane[0] ^ rotl(lane[2], 17) ^ h->total);
    uint64_t b = fmix(lane[1] ^ rotl(lane[3], 41) ^ (h->total * M1));
    return (struct weft_fingerprint){.hi = fmix(a ^ rotl(b, 23)), .lo = fmix(b + a * M2)};
}

static void put_u64(struct weft_fphash *h, uint64_t v) { weft_fphash_update(h, &v, 8); }
static void put_str(struct weft_fphash *h, const char *s, size_t n)
{
    put_u64(h, n);
    weft_fphash_update(h, s, n);
}

/* A tokenizer.ggml.* value, by type: what it holds, not how it is stored
 * (an id written as u32 or as i32 hashes the same). */
static void put_kv(struct weft_fphash *h, const struct weft_gguf *g, int64_t i)
{
    const char *key = weft_gguf_key(g, i);
    put_str(h, key, strlen(key));
    enum weft_gguf_type t = weft_gguf_kv_type(g, i);
    if (t == WEFT_GGUF_STRING) {
        const char *s;
        size_t n;
        put_u64(h, 1);
        if (weft_gguf_get_str(g, key, &s, &n) == WEFT_OK) put_str(h, s, n);
    } else if (t == WEFT_GGUF_ARRAY) {
        enum weft_gguf_type at = weft_gguf_arr_type(g, i);
        uint64_t n = weft_gguf_arr_len(g, i);
        put_u64(h, 2);
        put_u64(h, n);
        for (uint64_t j = 0; j < n; j++) {
            if (at == WEFT_GGUF_STRING) {
                size_t len;
                const char *s = weft_gguf_arr_str(g, i, j, &len);
                put_str(h, s ? s : "", s ? len : 0);
            } else if (at == WEFT_GGUF_FLOAT32 || at == WEFT_GGUF_FLOAT64) {
                double d = weft_gguf_arr_f64(g, i, j);
                put_u64(h, 3);
                weft_fphash_update(h, &d, 8);
            } else {
                put_u64(h, 4);
                put_u64(h, (uint64_t)weft_gguf_arr_i64(g, i, j));
            }
        }
    } else if (t == WEFT_GGUF_FLOAT32 || t == WEFT_GGUF_FLOAT64) {
        float f = 0;
        weft_gguf_get_f32(g, key, &f);
        double d = f;
        put_u64(h, 3);
        weft_fphash_update(h, &d, 8);
    } else if (t == WEFT_GGUF_BOOL) {
        bool b = false;
        weft_gguf_get_bool(g, key, &b);
        put_u64(h, 5);
        put_u64(h, b);
    } else {
        uint64_t u = 0;
        int32_t s = 0;
        put_u64(h, 4);
        if (weft_gguf_get_u64(g, key, &u) == WEFT_OK) put_u64(h, u);
        else if (weft_gguf_get_i32(g, key, &s) == WEFT_OK) put_u64(h, (uint64_t)(int64_t)s);
        else put_u64(h, 0);
    }
}

weft_status weft_fingerprint_model(const struct weft_gguf *g, const struct weft_hparams *hp,
                                   struct weft_fingerprint *out)
{
    struct weft_fphash h;
    weft_fphash_init(&h, 0x77656674u /* "weft" */);
    /* the hyperparameters that shape KV */
    put_str(&h, hp->arch, strnlen(hp->arch, sizeof hp->arch));
    const uint64_t ints[] = {hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
                             hp->n_ff, hp->head_dim, hp->n_rot, (uint64_t)hp->rope_mode, hp->tied_output};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) put_u64(&h, ints[i]);
    const double floats[] = {hp->rms_eps, hp->rope_freq_base, hp->rope_freq_scale};
    weft_fphash_update(&h, floats, sizeof floats);
    /* what later families add to the KV's shape (absent, a Llama file hashes as before) */
    if (hp->rope_ext_factor != 0 || hp->rope_attn_factor != 0 || hp->n_swa || hp->rope_n_ctx_orig) {
        const double more[] = {hp->rope_ext_factor, hp->rope_attn_factor, hp->rope_corr_dims[0],
                               hp->rope_corr_dims[1], hp->rope_n_ctx_orig, hp->n_swa, hp->swa_pattern,
                               hp->rope_freq_base_swa};
        weft_fphash_update(&h, more, sizeof more);
    }
    /* the tokenizer */
    for (int64_t i = 0; i < weft_gguf_n_kv(g); i++)
        if (!strncmp(weft_gguf_key(g, i), "tokenizer.ggml.", 15)) put_kv(&h, g, i);
    /* the tensors, in file order */
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        if (!t->data && t->size)
            return weft_error(WEFT_ERR_FORMAT, "fingerprint: tensor '%s' has no data", t->name);
        put_str(&h, t->name, strlen(t->name));
        put_u64(&h, (uint64_t)t->type);
        put_u64(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u64(&h, t->size);
        weft_fphash_update(&h, t->data, t->size);
    }
    *out = weft_fphash_final(&h);
    return WEFT_OK;
}

