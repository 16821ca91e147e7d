/* GGUF reader: mmap + a bounds-checked cursor, validated in two passes.
 *
 * Pass 1 walks the whole header checking every length against the file and
 * counts the bytes all copied strings need. One arena is then allocated for
 * kv records, tensor records, string-array entries, both hash tables and the
 * string bytes. Pass 2 walks again (same checks) and fills the arena, checking
 * uniqueness through the hash tables and that the tensors' data tile the data
 * section in info order (which also rules out overlap).
 * Numeric values and arrays stay in the mapping and are read with memcpy
 * (they are unaligned). Layout of a GGUF v2/v3 file, all little-endian:
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { str key, u32 type, value },
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to alignment, data section (tensor offsets are relative to it).
 * str = u64 length + bytes (no NUL). ARRAY value = u32 elem type, u64 n, n values. */
#define _POSIX_C_SOURCE 200809L /* O_CLOEXEC, mmap */
#include "core/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weft's GGUF reader assumes a little-endian host"
#endif

/* Raw serialized value of kv i (the bytes after its type field) for the writer's
 * copy_kvs; defined here, declared again in gguf_write.c. Not public API. */
const void *weft_gguf_kv_raw_(const struct weft_gguf *g, int64_t i, size_t *size);

/* Minimum encoded sizes, for count plausibility before allocating anything. */
#define KV_MIN_BYTES (8 + 1 + 4)             /* key length, 1 key byte, type */
#define TENSOR_MIN_BYTES (8 + 4 + 8 + 4 + 8) /* name length, n_dims, 1 dim, type, offset */
#define HEADER_BYTES (4 + 4 + 8 + 8)

struct str_ent {
    const char *s;
    size_t len;
};

struct kv {
    const char *key;
    enum weft_gguf_type type;
    enum weft_gguf_type arr_type; /* ARRAY only */
    uint64_t n;                   /* ARRAY: element count */
    const uint8_t *val;           /* value bytes in the mapping (after the type) */
    size_t val_size;              /* their length */
    const char *str;              /* STRING: owned copy */
    size_t str_len;
    struct str_ent *strs;         /* STRING array: owned copies */
};

struct weft_gguf {
    const uint8_t *data;
    size_t size;
    void *map;                    /* non-NULL when we mmapped the file */
    uint32_t version;
    size_t alignment;
    size_t data_off;              /* start of the data section */
    int64_t n_kv, n_tensors;
    struct kv *kvs;
    struct weft_gguf_tensor *tensors;
    int64_t *kv_hash, *t_hash;    /* open addressing, -1 = empty */
    size_t kv_cap, t_cap;         /* powers of two */
    void *arena;
};

/* ---- cursor ---- */

struct parser {
    const uint8_t *p;
    size_t size, pos;
    char ctx[192];                /* what is being read, for messages */
    bool fill;                    /* pass 2: write into the arena */
    size_t str_bytes;             /* pass 1 totals */
    uint64_t n_arr_strs;
    char *chars;                  /* pass 2 cursors into the arena */
    struct str_ent *ents;
    uint64_t next_off;            /* pass 2: where the next tensor's data must start */
};

static weft_status past_end(const struct parser *ps, const char *what, uint64_t need)
{
    return weft_error(WEFT_ERR_FORMAT,
                      "gguf: %s: %s at offset %zu (%llu bytes) runs past end of file (%zu bytes)",
                      ps->ctx, what, ps->pos, (unsigned long long)need, ps->size);
}

static weft_status rd_bytes(struct parser *ps, uint64_t n, const char *what, const uint8_t **out)
{
    if (n > ps->size - ps->pos) return past_end(ps, what, n);
    *out = ps->p + ps->pos;
    ps->pos += (size_t)n;
    return WEFT_OK;
}

static weft_status rd_u32(struct parser *ps, const char *what, uint32_t *v)
{
    const uint8_t *b = NULL;
    weft_status s = rd_bytes(ps, 4, what, &b);
    if (s == WEFT_OK) memcpy(v, b, 4);
    return s;
}

static weft_status rd_u64(struct parser *ps, const char *what, uint64_t *v)
{
    const uint8_t *b = NULL;
    weft_status s = rd_bytes(ps, 8, what, &b);
    if (s == WEFT_OK) memcpy(v, b, 8);
    return s;
}

/* Reads a GGUF string. In pass 2 copies it NUL-terminated into the arena. */
static weft_status rd_str(struct parser *ps, const char *what, const char **out, size_t *len)
{
    uint64_t n;
    const uint8_t *b = NULL;
    weft_status s = rd_u64(ps, what, &n);
    if (s) return s;
    if (n > ps->size - ps->pos)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: %s length %llu at offset %zu runs past end "
                          "of file (%zu bytes)", ps->ctx, what, (unsigned long long)n, ps->pos - 8,
                          ps->size);
    rd_bytes(ps, n, what, &b);
    *len = (size_t)n;
    if (!ps->fill) {
        ps->str_bytes += (size_t)n + 1;
        *out = (const char *)b; /* not terminated; pass 1 uses it only with len */
        return WEFT_OK;
    }
    memcpy(ps->chars, b, (size_t)n);
    ps->chars[n] = '\0';
    *out = ps->chars;
    ps->chars += n + 1;
    return WEFT_OK;
}

/* ---- helpers ---- */

static size_t elem_size(enum weft_gguf_type t)
{
    switch (t) {
    case WEFT_GGUF_UINT8: case WEFT_GGUF_INT8: case WEFT_GGUF_BOOL: return 1;
    case WEFT_GGUF_UINT16: case WEFT_GGUF_INT16: return 2;
    case WEFT_GGUF_UINT32: case WEFT_GGUF_INT32: case WEFT_GGUF_FLOAT32: return 4;
    case WEFT_GGUF_UINT64: case WEFT_GGUF_INT64: case WEFT_GGUF_FLOAT64: return 8;
    default: return 0; /* STRING, ARRAY: variable */
    }
}

static const char *type_str(uint32_t t)
{
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "invalid";
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static size_t hash_cap(int64_t n)
{
    size_t cap = 2;
    while (cap < (size_t)n * 2) cap <<= 1;
    return cap;
}

/* Looks `name` up in a table whose entries index into names via get(); returns
 * the slot holding it or the empty slot where it would go. */
typedef const char *(*name_of_fn)(const struct weft_gguf *g, int64_t i);
static size_t hash_slot(const struct weft_gguf *g, const int64_t *tab, size_t cap,
                        name_of_fn name_of, const char *name)
{
    size_t mask = cap - 1, h = (size_t)hash_bytes(name, strlen(name)) & mask;
    while (tab[h] >= 0 && strcmp(name_of(g, tab[h]), name) != 0) h = (h + 1) & mask;
    return h;
}

static const char *kv_name(const struct weft_gguf *g, int64_t i) { return g->kvs[i].key; }
static const char *t_name(const struct weft_gguf *g, int64_t i) { return g->tensors[i].name; }

/* Printable, bounded form of a (possibly unterminated, pass-1) name for messages. */
static void set_ctx(struct parser *ps, const char *kind, int64_t idx, const char *name, size_t len)
{
    if (name)
        snprintf(ps->ctx, sizeof ps->ctx, "%s '%.*s'", kind, (int)(len > 120 ? 120 : len), name);
    else
        snprintf(ps->ctx, sizeof ps->ctx, "%s %lld", kind, (long long)idx);
}

/* ---- kv section ---- */

static weft_status parse_bools(struct parser *ps, const uint8_t *b, uint64_t n)
{
    for (uint64_t j = 0; j < n; j++)
        if (b[j] > 1)
            return weft_error(WEFT_ERR_FORMAT, "gguf: %s: bool value %u is not 0 or 1",
                              ps->ctx, b[j]);
    return WEFT_OK;
}

/* Keys whose string values are identifiers that weft compares and prints as C
 * strings (core/model, core/tokenizer): an embedded NUL would let "llama\0evil"
 * pass as "llama", so such a value is rejected. Other strings (tokens, templates,
 * names) may hold any bytes; readers that care use the length. */
static bool is_identifier_key(const char *key, size_t len)
{
    static const char *const ids[] = {"general.architecture", "tokenizer.ggml.model",
                                      "tokenizer.ggml.pre"};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
        if (strlen(ids[k]) == len && memcmp(ids[k], key, len) == 0) return true;
    return false;
}

static weft_status parse_kv(struct parser *ps, struct weft_gguf *g, int64_t i)
{
    const char *key = NULL;
    size_t key_len = 0;
    uint32_t type;
    weft_status s;
    struct kv *kv = ps->fill ? &g->kvs[i] : NULL;

    set_ctx(ps, "kv", i, NULL, 0);
    if ((s = rd_str(ps, "key", &key, &key_len))) return s;
    if (key_len == 0) return weft_error(WEFT_ERR_FORMAT, "gguf: kv %lld has an empty key", (long long)i);
    set_ctx(ps, "key", i, key, key_len);
    /* keys are looked up and printed as C strings; the message shows the part before the NUL */
    const char *nul = memchr(key, '\0', key_len);
    if (nul)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s (kv %lld) contains a NUL byte at byte %zu of %zu",
                          ps->ctx, (long long)i, (size_t)(nul - key), key_len);
    if ((s = rd_u32(ps, "value type", &type))) return s;
    if (type > WEFT_GGUF_FLOAT64)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: invalid value type %u (valid: 0..12)",
                          ps->ctx, type);
    if (kv) {
        size_t slot = hash_slot(g, g->kv_hash, g->kv_cap, kv_name, key);
        if (g->kv_hash[slot] >= 0)
            return weft_error(WEFT_ERR_FORMAT, "gguf: duplicate key '%s' (kv %lld and %lld)",
                              key, (long long)g->kv_hash[slot], (long long)i);
        g->kv_hash[slot] = i;
        kv->key = key;
        kv->type = (enum weft_gguf_type)type;
        kv->val = ps->p + ps->pos;
    }
    size_t val_start = ps->pos;
    const uint8_t *b = NULL;
    if (type == WEFT_GGUF_STRING) {
        const char *v;
        size_t vlen;
        if ((s = rd_str(ps, "string value", &v, &vlen))) return s;
        const char *vnul = memchr(v, '\0', vlen);
        if (vnul && is_identifier_key(key, key_len))
            return weft_error(WEFT_ERR_FORMAT, "gguf: %s: value contains a NUL byte at byte %zu of %zu "
                              "(an identifier must be plain text)", ps->ctx, (size_t)(vnul - v), vlen);
        if (kv) { kv->str = v; kv->str_len = vlen; }
    } else if (type == WEFT_GGUF_ARRAY) {
        uint32_t at;
        uint64_t n;
        if ((s = rd_u32(ps, "array element type", &at))) return s;
        if (at == WEFT_GGUF_ARRAY)
            return weft_error(WEFT_ERR_FORMAT, "gguf: %s: arrays of arrays are not supported", ps->ctx);
        if (at > WEFT_GGUF_FLOAT64)
            return weft_error(WEFT_ERR_FORMAT, "gguf: %s: invalid array element type %u (valid: 0..12)",
                              ps->ctx, at);
        if ((s = rd_u64(ps, "array length", &n))) return s;
        size_t es = elem_size((enum weft_gguf_type)at);
        size_t left = ps->size - ps->pos;
        /* a string element takes at least its 8-byte length */
        if (n > left / (es ? es : 8))
            return weft_error(WEFT_ERR_FORMAT,
                              "gguf: %s: array of %llu %s elements at offset %zu does not fit in the "
                              "file (%zu bytes left)", ps->ctx, (unsigned long long)n, type_str(at),
                              ps->pos, left);
        if (kv) { kv->arr_type = (enum weft_gguf_type)at; kv->n = n; }
        if (at == WEFT_GGUF_STRING) {
            struct str_ent *ents = NULL;
            if (ps->fill) { ents = ps->ents; ps->ents += n; kv->strs = ents; }
            else ps->n_arr_strs += n;
            for (uint64_t j = 0; j < n; j++) {
                const char *e;
                size_t elen;
                if ((s = rd_str(ps, "array string element", &e, &elen))) return s;
                if (ents) { ents[j].s = e; ents[j].len = elen; }
            }
        } else {
            rd_bytes(ps, n * es, "array data", &b); /* fits: checked above */
            if (at == WEFT_GGUF_BOOL && (s = parse_bools(ps, b, n))) return s;
        }
    } else {
        if ((s = rd_bytes(ps, elem_size((enum weft_gguf_type)type), "value", &b))) return s;
        if (type == WEFT_GGUF_BOOL && (s = parse_bools(ps, b, 1))) return s;
    }
    if (kv) kv->val_size = ps->pos - val_start;
    return WEFT_OK;
}

/* Reads general.alignment (pass 2 only: needs the hash). */
static weft_status read_alignment(struct weft_gguf *g)
{
    g->alignment = WEFT_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = weft_gguf_find_key(g, "general.alignment");
    if (i < 0) return WEFT_OK;
    const struct kv *kv = &g->kvs[i];
    if (kv->type != WEFT_GGUF_UINT32)
        return weft_error(WEFT_ERR_FORMAT, "gguf: general.alignment has type %s, must be u32",
                          type_str(kv->type));
    uint32_t a;
    memcpy(&a, kv->val, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return weft_error(WEFT_ERR_FORMAT, "gguf: general.alignment %u is not a nonzero power of two", a);
    g->alignment = a;
    return WEFT_OK;
}

/* ---- tensor infos ---- */

/* Tensor i (pass 2; tensors 0..i-1 filled, alignment checked) has data offset
 * `off` where ps->next_off was due. */
static weft_status layout_error(const struct parser *ps, const struct weft_gguf *g, int64_t i,
                                uint64_t off)
{
    char also[192] = "";
    if (off < ps->next_off) {
        /* tensors 0..i-1 tile [0, next_off) with gaps shorter than the alignment, and
         * off is aligned, so it falls inside the data of the first j that ends after it */
        int64_t j = 0;
        while (j < i - 1 && off >= g->tensors[j].offset + g->tensors[j].size) j++;
        const struct weft_gguf_tensor *t = &g->tensors[j];
        snprintf(also, sizeof also, ": it overlaps tensor '%s' data [%llu, %llu)", t->name,
                 (unsigned long long)t->offset, (unsigned long long)(t->offset + t->size));
    }
    return weft_error(WEFT_ERR_FORMAT, "gguf: %s: data offset %llu, expected %llu (tensor data must "
                      "follow tensor-info order, each padded to the alignment %zu)%s", ps->ctx,
                      (unsigned long long)off, (unsigned long long)ps->next_off, g->alignment, also);
}

static weft_status parse_tensor(struct parser *ps, struct weft_gguf *g, int64_t i)
{
    const char *name = NULL;
    size_t name_len = 0;
    uint32_t n_dims, type;
    uint64_t off;
    int64_t ne[WEFT_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    weft_status s;

    set_ctx(ps, "tensor", i, NULL, 0);
    if ((s = rd_str(ps, "name", &name, &name_len))) return s;
    if (name_len == 0)
        return weft_error(WEFT_ERR_FORMAT, "gguf: tensor %lld has an empty name", (long long)i);
    set_ctx(ps, "tensor", i, name, name_len);
    /* names are looked up and printed as C strings; the message shows the part before the NUL */
    const char *nul = memchr(name, '\0', name_len);
    if (nul)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s (tensor %lld) name contains a NUL byte at byte "
                          "%zu of %zu", ps->ctx, (long long)i, (size_t)(nul - name), name_len);
    if ((s = rd_u32(ps, "n_dims", &n_dims))) return s;
    if (n_dims < 1 || n_dims > WEFT_GGUF_MAX_DIMS)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: n_dims %u out of range 1..%d", ps->ctx, n_dims,
                          WEFT_GGUF_MAX_DIMS);
    int64_t nelem = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        if ((s = rd_u64(ps, "dimension", &v))) return s;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return weft_error(WEFT_ERR_FORMAT, "gguf: %s: dim %u is %lld, must be >= 1", ps->ctx, d,
                              (long long)v);
        ne[d] = (int64_t)v;
        if (ne[d] > INT64_MAX / nelem)
            return weft_error(WEFT_ERR_FORMAT, "gguf: %s: element count overflows int64 at dim %u",
                              ps->ctx, d);
        nelem *= ne[d];
    }
    if ((s = rd_u32(ps, "type", &type))) return s;
    const struct weft_type_info *ti = weft_type_get(type);
    if (!ti)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: unknown type id %u", ps->ctx, type);
    if (!ti->weight_ok)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: type %s is not valid for stored tensors",
                          ps->ctx, ti->name);
    if (ne[0] % ti->block_size != 0)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: ne[0] %lld is not a multiple of the %s block "
                          "size %u", ps->ctx, (long long)ne[0], ti->name, ti->block_size);
    if ((s = rd_u64(ps, "offset", &off))) return s;
    /* nelem < 2^63, but F32 has 4 bytes an element: check the byte count too */
    uint64_t blocks = (uint64_t)(nelem / ti->block_size);
    if (blocks > UINT64_MAX / ti->type_size)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: data size overflows (%llu blocks of %u bytes)", ps->ctx,
                          (unsigned long long)blocks, ti->type_size);
    uint64_t size = blocks * ti->type_size;
    if (!ps->fill) return WEFT_OK;

    size_t slot = hash_slot(g, g->t_hash, g->t_cap, t_name, name);
    if (g->t_hash[slot] >= 0)
        return weft_error(WEFT_ERR_FORMAT, "gguf: duplicate tensor name '%s' (tensors %lld and %lld)",
                          name, (long long)g->t_hash[slot], (long long)i);
    g->t_hash[slot] = i;
    if (off % g->alignment != 0)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: data offset %llu is not a multiple of the "
                          "alignment %zu", ps->ctx, (unsigned long long)off, g->alignment);
    if (size > SIZE_MAX || off > (uint64_t)SIZE_MAX - g->data_off ||
        size > (uint64_t)SIZE_MAX - g->data_off - off)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: data offset %llu + size %llu overflows",
                          ps->ctx, (unsigned long long)off, (unsigned long long)size);
    size_t start = g->data_off + (size_t)off, end = start + (size_t)size;
    if (end > ps->size)
        return weft_error(WEFT_ERR_FORMAT, "gguf: %s: data [%zu, %zu) runs past end of file (%zu bytes)",
                          ps->ctx, start, end, ps->size);
    /* As llama.cpp's reader: tensor i's data starts where tensor i-1's ends, padded
     * to the alignment (tensor 0 at 0), so the data section is the tensors in info
     * order with no gap and no overlap. The size is what type and shape imply (GGUF
     * stores none), so a wrong shape or type shows up as the next tensor's offset. */
    if (off != ps->next_off) return layout_error(ps, g, i, off);
    ps->next_off = off + (size + g->alignment - 1) / g->alignment * g->alignment; /* no wrap: in file */
    struct weft_gguf_tensor *t = &g->tensors[i];
    t->name = name;
    t->type = (enum weft_type)type;
    t->n_dims = n_dims;
    memcpy(t->ne, ne, sizeof ne);
    t->offset = off;
    t->size = (size_t)size;
    t->data = ps->p + start;
    return WEFT_OK;
}

/* ---- the two passes ---- */

static weft_status parse_header(struct parser *ps, struct weft_gguf *g, uint64_t *n_tensors,
                                uint64_t *n_kv)
{
    const uint8_t *magic = NULL;
    uint32_t version = 0;
    snprintf(ps->ctx, sizeof ps->ctx, "header");
    if (ps->size < HEADER_BYTES)
        return weft_error(WEFT_ERR_FORMAT, "gguf: file too small (%zu bytes) for a GGUF header",
                          ps->size);
    rd_bytes(ps, 4, "magic", &magic);
    if (memcmp(magic, "GGUF", 4) != 0)
        return weft_error(WEFT_ERR_FORMAT, "gguf: bad magic %02x %02x %02x %02x (expected \"GGUF\")",
                          magic[0], magic[1], magic[2], magic[3]);
    rd_u32(ps, "version", &version);
    if (version == 1)
        return weft_error(WEFT_ERR_FORMAT, "gguf: version 1 is not supported (only versions 2 and 3)");
    if (version != 2 && version != 3)
        return weft_error(WEFT_ERR_FORMAT, "gguf: unsupported version %u%s (only versions 2 and 3)",
                          version, (version & 0xffff) == 0 ? ", big-endian file?" : "");
    g->version = version;
    rd_u64(ps, "tensor count", n_tensors);
    rd_u64(ps, "kv count", n_kv);
    size_t left = ps->size - ps->pos;
    if (*n_kv > left / KV_MIN_BYTES)
        return weft_error(WEFT_ERR_FORMAT, "gguf: kv count %llu cannot fit in %zu bytes",
                          (unsigned long long)*n_kv, left);
    left -= (size_t)*n_kv * KV_MIN_BYTES;
    if (*n_tensors > left / TENSOR_MIN_BYTES)
        return weft_error(WEFT_ERR_FORMAT, "gguf: tensor count %llu cannot fit in %zu bytes "
                          "(with %llu kvs)", (unsigned long long)*n_tensors, left,
                          (unsigned long long)*n_kv);
    return WEFT_OK;
}

static weft_status parse_all(struct parser *ps, struct weft_gguf *g)
{
    uint64_t n_tensors = 0, n_kv = 0;
    weft_status s;
    ps->pos = 0;
    ps->next_off = 0;
    if ((s = parse_header(ps, g, &n_tensors, &n_kv))) return s;
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    for (int64_t i = 0; i < g->n_kv; i++)
        if ((s = parse_kv(ps, g, i))) return s;
    if (ps->fill && (s = read_alignment(g))) return s;
    size_t a = ps->fill ? g->alignment : 1;
    /* the data section starts after the tensor infos, but the infos' checks need
     * its start: pass 1 records where the infos end, pass 2 aligns that. */
    if (ps->fill) {
        size_t end = g->data_off; /* set by pass 1: end of tensor infos */
        if (end > SIZE_MAX - a) return weft_error(WEFT_ERR_FORMAT, "gguf: data offset overflows");
        g->data_off = (end + a - 1) / a * a;
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((s = parse_tensor(ps, g, i))) return s;
    if (!ps->fill) g->data_off = ps->pos; /* end of infos, aligned in pass 2 */
    return WEFT_OK;
}

static weft_status build(const uint8_t *data, size_t size, struct weft_gguf *g)
{
    struct parser ps = {.p = data, .size = size};
    weft_status s;
    g->data = data;
    g->size = size;
    if ((s = parse_all(&ps, g))) return s;

    /* one arena: kvs | tensors | string-array entries | kv hash | tensor hash | chars */
    size_t nkv = (size_t)g->n_kv, nt = (size_t)g->n_tensors, nents = (size_t)ps.n_arr_strs;
    g->kv_cap = hash_cap(g->n_kv);
    g->t_cap = hash_cap(g->n_tensors);
    size_t o_t = nkv * sizeof(struct kv);
    size_t o_e = o_t + nt * sizeof(struct weft_gguf_tensor);
    size_t o_kh = o_e + nents * sizeof(struct str_ent);
    size_t o_th = o_kh + g->kv_cap * sizeof(int64_t);
    size_t o_c = o_th + g->t_cap * sizeof(int64_t);
    size_t total = o_c + ps.str_bytes; /* all terms are bounded by small multiples of size */
    uint8_t *ar = malloc(total ? total : 1);
    if (!ar) return weft_error(WEFT_ERR_NOMEM, "gguf: out of memory (%zu bytes for metadata)", total);
    g->arena = ar;
    memset(ar, 0, o_kh);
    g->kvs = (struct kv *)ar;
    g->tensors = (struct weft_gguf_tensor *)(ar + o_t);
    g->kv_hash = (int64_t *)(ar + o_kh);
    g->t_hash = (int64_t *)(ar + o_th);
    memset(g->kv_hash, 0xff, g->kv_cap * sizeof(int64_t));
    memset(g->t_hash, 0xff, g->t_cap * sizeof(int64_t));
    ps.fill = true;
    ps.ents = (struct str_ent *)(ar + o_e);
    ps.chars = (char *)(ar + o_c);
    return parse_all(&ps, g);
}

/* ---- open / close ---- */

weft_status weft_gguf_open_memory(const void *data, size_t size, struct weft_gguf **out)
{
    *out = NULL;
    if (!data && size) return weft_error(WEFT_ERR_INVALID_ARG, "gguf: NULL data");
    struct weft_gguf *g = calloc(1, sizeof *g);
    if (!g) return weft_error(WEFT_ERR_NOMEM, "gguf: out of memory");
    static const uint8_t empty[1];
    weft_status s = build(data ? data : empty, size, g);
    if (s) {
        weft_gguf_close(g);
        return s;
    }
    *out = g;
    return WEFT_OK;
}

weft_status weft_gguf_open(const char *path, struct weft_gguf **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return weft_error(WEFT_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return weft_error(WEFT_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return weft_error(WEFT_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return weft_error(WEFT_ERR_IO, "gguf: cannot mmap '%s': %s", path, strerror(e));
        }
    }
    close(fd);
    struct weft_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (map) munmap(map, size);
        return weft_error(WEFT_ERR_NOMEM, "gguf: out of memory");
    }
    g->map = map;
    static const uint8_t empty[1];
    weft_status s = build(map ? map : empty, size, g);
    if (s) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        weft_gguf_close(g);
        return weft_error(s, "%s: %s", path, msg);
    }
    *out = g;
    return WEFT_OK;
}

void weft_gguf_close(struct weft_gguf *g)
{
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    free(g->arena);
    free(g);
}

uint32_t weft_gguf_version(const struct weft_gguf *g) { return g->version; }
size_t weft_gguf_alignment(const struct weft_gguf *g) { return g->alignment; }
size_t weft_gguf_file_size(const struct weft_gguf *g) { return g->size; }

/* ---- kv access ---- */

int64_t weft_gguf_n_kv(const struct weft_gguf *g) { return g->n_kv; }

int64_t weft_gguf_find_key(const struct weft_gguf *g, const char *key)
{
    if (!key || g->n_kv == 0) return -1;
    return g->kv_hash[hash_slot(g, g->kv_hash, g->kv_cap, kv_name, key)];
}

static const struct kv *kv_at(const struct weft_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL;
}

const char *weft_gguf_key(const struct weft_gguf *g, int64_t i)
{
    const struct kv *kv = kv_at(g, i);
    return kv ? kv->key : NULL;
}

enum weft_gguf_type weft_gguf_kv_type(const struct weft_gguf *g, int64_t i)
{
    const struct kv *kv = kv_at(g, i);
    return kv ? kv->type : (enum weft_gguf_type)-1;
}

const void *weft_gguf_kv_raw_(const struct weft_gguf *g, int64_t i, size_t *size)
{
    const struct kv *kv = kv_at(g, i);
    if (!kv) return NULL;
    *size = kv->val_size;
    return kv->val;
}

/* Integer value of an element of integer type t at b: sets *neg and *mag. */
static bool int_at(enum weft_gguf_type t, const uint8_t *b, bool *neg, uint64_t *mag)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; } v;
    int64_t sv;
    size_t es = elem_size(t);
    if (!es || t == WEFT_GGUF_FLOAT32 || t == WEFT_GGUF_FLOAT64 || t == WEFT_GGUF_BOOL) return false;
    memcpy(&v, b, es);
    *neg = false;
    switch (t) {
    case WEFT_GGUF_UINT8: *mag = v.u8; return true;
    case WEFT_GGUF_UINT16: *mag = v.u16; return true;
    case WEFT_GGUF_UINT32: *mag = v.u32; return true;
    case WEFT_GGUF_UINT64: *mag = v.u64; return true;
    case WEFT_GGUF_INT8: sv = v.i8; break;
    case WEFT_GGUF_INT16: sv = v.i16; break;
    case WEFT_GGUF_INT32: sv = v.i32; break;
    default: sv = v.i64; break;
    }
    *neg = sv < 0;
    *mag = sv < 0 ? (uint64_t)0 - (uint64_t)sv : (uint64_t)sv;
    return true;
}

static weft_status find_int(const struct weft_gguf *g, const char *key, bool *neg, uint64_t *mag)
{
    const struct kv *kv = kv_at(g, weft_gguf_find_key(g, key));
    if (!kv) return WEFT_ERR_NOT_FOUND;
    if (!int_at(kv->type, kv->val, neg, mag))
        return weft_error(WEFT_ERR_TYPE, "gguf: key '%s' has type %s, expected an integer", key,
                          type_str(kv->type));
    return WEFT_OK;
}

static weft_status range_err(const char *key, bool neg, uint64_t mag, const char *want)
{
    return weft_error(WEFT_ERR_TYPE, "gguf: key '%s' value %s%llu does not fit in %s", key,
                      neg ? "-" : "", (unsigned long long)mag, want);
}

weft_status weft_gguf_get_u32(const struct weft_gguf *g, const char *key, uint32_t *out)
{
    bool neg = false;
    uint64_t mag = 0;
    weft_status s = find_int(g, key, &neg, &mag);
    if (s) return s;
    if ((neg && mag) || mag > UINT32_MAX) return range_err(key, neg, mag, "u32");
    *out = (uint32_t)mag;
    return WEFT_OK;
}

weft_status weft_gguf_get_i32(const struct weft_gguf *g, const char *key, int32_t *out)
{
    bool neg = false;
    uint64_t mag = 0;
    weft_status s = find_int(g, key, &neg, &mag);
    if (s) return s;
    if (mag > (neg ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX)) return range_err(key, neg, mag, "i32");
    *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return WEFT_OK;
}

weft_status weft_gguf_get_u64(const struct weft_gguf *g, const char *key, uint64_t *out)
{
    bool neg = false;
    uint64_t mag = 0;
    weft_status s = find_int(g, key, &neg, &mag);
    if (s) return s;
    if (neg && mag) return range_err(key, neg, mag, "u64");
    *out = mag;
    return WEFT_OK;
}

weft_status weft_gguf_get_f32(const struct weft_gguf *g, const char *key, float *out)
{
    const struct kv *kv = kv_at(g, weft_gguf_find_key(g, key));
    if (!kv) return WEFT_ERR_NOT_FOUND;
    if (kv->type == WEFT_GGUF_FLOAT32) {
        memcpy(out, kv->val, 4);
        return WEFT_OK;
    }
    if (kv->type == WEFT_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        if (d == d && (d > FLT_MAX || d < -FLT_MAX) && d - d == 0) /* finite but too large */
            return weft_error(WEFT_ERR_TYPE, "gguf: key '%s' value %g does not fit in f32", key, d);
        *out = (float)d;
        return WEFT_OK;
    }
    return weft_error(WEFT_ERR_TYPE, "gguf: key '%s' has type %s, expected f32 or f64", key,
                      type_str(kv->type));
}

weft_status weft_gguf_get_bool(const struct weft_gguf *g, const char *key, bool *out)
{
    const struct kv *kv = kv_at(g, weft_gguf_find_key(g, key));
    if (!kv) return WEFT_ERR_NOT_FOUND;
    if (kv->type != WEFT_GGUF_BOOL)
        return weft_error(WEFT_ERR_TYPE, "gguf: key '%s' has type %s, expected bool", key,
                          type_str(kv->type));
    *out = kv->val[0] != 0;
    return WEFT_OK;
}

weft_status weft_gguf_get_str(const struct weft_gguf *g, const char *key, const char **out, size_t *len)
{
    const struct kv *kv = kv_at(g, weft_gguf_find_key(g, key));
    if (!kv) return WEFT_ERR_NOT_FOUND;
    if (kv->type != WEFT_GGUF_STRING)
        return weft_error(WEFT_ERR_TYPE, "gguf: key '%s' has type %s, expected string", key,
                          type_str(kv->type));
    *out = kv->str;
    if (len) *len = kv->str_len;
    return WEFT_OK;
}

/* ---- arrays ---- */

static const struct kv *arr_at(const struct weft_gguf *g, int64_t i)
{
    const struct kv *kv = kv_at(g, i);
    return kv && kv->type == WEFT_GGUF_ARRAY ? kv : NULL;
}

enum weft_gguf_type weft_gguf_arr_type(const struct weft_gguf *g, int64_t i)
{
    const struct kv *kv = arr_at(g, i);
    return kv ? kv->arr_type : (enum weft_gguf_type)-1;
}

uint64_t weft_gguf_arr_len(const struct weft_gguf *g, int64_t i)
{
    const struct kv *kv = arr_at(g, i);
    return kv ? kv->n : 0;
}

const char *weft_gguf_arr_str(const struct weft_gguf *g, int64_t i, uint64_t j, size_t *len)
{
    const struct kv *kv = arr_at(g, i);
    if (!kv || kv->arr_type != WEFT_GGUF_STRING || j >= kv->n) return NULL;
    if (len) *len = kv->strs[j].len;
    return kv->strs[j].s;
}

/* Pointer to numeric element j (array header is u32 type + u64 length = 12 bytes). */
static const uint8_t *num_elem(const struct weft_gguf *g, int64_t i, uint64_t j)
{
    const struct kv *kv = arr_at(g, i);
    if (!kv || !elem_size(kv->arr_type) || j >= kv->n) return NULL;
    return kv->val + 12 + j * elem_size(kv->arr_type);
}

double weft_gguf_arr_f64(const struct weft_gguf *g, int64_t i, uint64_t j)
{
    const uint8_t *b = num_elem(g, i, j);
    if (!b) return 0.0;
    enum weft_gguf_type t = g->kvs[i].arr_type;
    if (t == WEFT_GGUF_FLOAT32) { float f; memcpy(&f, b, 4); return f; }
    if (t == WEFT_GGUF_FLOAT64) { double d; memcpy(&d, b, 8); return d; }
    if (t == WEFT_GGUF_BOOL) return b[0] ? 1.0 : 0.0;
    bool neg = false;
    uint64_t mag = 0;
    int_at(t, b, &neg, &mag);
    return neg ? -(double)mag : (double)mag;
}

int64_t weft_gguf_arr_i64(const struct weft_gguf *g, int64_t i, uint64_t j)
{
    const uint8_t *b = num_elem(g, i, j);
    if (!b) return 0;
    enum weft_gguf_type t = g->kvs[i].arr_type;
    if (t == WEFT_GGUF_FLOAT32 || t == WEFT_GGUF_FLOAT64) {
        double d = weft_gguf_arr_f64(g, i, j);
        if (!(d == d)) return 0;
        if (d >= 9223372036854775807.0) return INT64_MAX;
        if (d <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)d;
    }
    if (t == WEFT_GGUF_BOOL) return b[0] ? 1 : 0;
    bool neg = false;
    uint64_t mag = 0;
    int_at(t, b, &neg, &mag);
    if (neg) return mag > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)mag;
    return mag > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)mag; /* u64 above INT64_MAX saturates */
}

/* ---- tensors ---- */

int64_t weft_gguf_n_tensors(const struct weft_gguf *g) { return g->n_tensors; }

int64_t weft_gguf_find_tensor(const struct weft_gguf *g, const char *name)
{
    if (!name || g->n_tensors == 0) return -1;
    return g->t_hash[hash_slot(g, g->t_hash, g->t_cap, t_name, name)];
}

const struct weft_gguf_tensor *weft_gguf_tensor(const struct weft_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}
