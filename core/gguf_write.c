/* GGUF v3 writer.
 *
 * Each kv keeps its value already serialized (the bytes after the type field),
 * so writing is concatenation and copy_kvs copies a reader's raw value bytes.
 * Layout written: header, kvs in set order, tensor infos in add order, zero
 * padding to the alignment, then each tensor's data padded to the alignment.
 * The alignment is general.alignment when the caller set it (u32, power of
 * two), else 32, which readers assume when the key is absent. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen, fsync */
#include "core/gguf.h"
#include "base/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weft's GGUF writer assumes a little-endian host"
#endif

/* defined in gguf.c: the serialized value bytes of kv i, inside the reader's data */
const void *weft_gguf_kv_raw_(const struct weft_gguf *g, int64_t i, size_t *size);

struct wkv {
    char *key;
    uint32_t type;
    uint8_t *val;      /* serialized value */
    size_t val_size;
};

struct wtensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[WEFT_GGUF_MAX_DIMS];
    size_t size;
    const void *data;  /* caller's */
};

struct weft_gguf_writer {
    struct wkv *kvs;
    size_t n_kv, cap_kv;
    struct wtensor *ts;
    size_t n_t, cap_t;
};

weft_status weft_gguf_writer_init(struct weft_gguf_writer **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? WEFT_OK : weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory");
}

void weft_gguf_writer_free(struct weft_gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->ts[i].name);
    free(w->kvs);
    free(w->ts);
    free(w);
}

/* Takes ownership of val (freed on failure too). Replaces an existing key in place. */
static weft_status set_raw(struct weft_gguf_writer *w, const char *key, uint32_t type,
                           uint8_t *val, size_t val_size)
{
    if (!key || !key[0]) {
        free(val);
        return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: empty key");
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            free(w->kvs[i].val);
            w->kvs[i].type = type;
            w->kvs[i].val = val;
            w->kvs[i].val_size = val_size;
            return WEFT_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        struct wkv *k = weft_grow(w->kvs, &w->cap_kv, w->n_kv + 1, sizeof *k);
        if (!k) goto nomem;
        w->kvs = k;
    }
    char *kc = strdup(key);
    if (!kc) goto nomem;
    w->kvs[w->n_kv++] = (struct wkv){kc, type, val, val_size};
    return WEFT_OK;
nomem:
    free(val);
    return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory setting '%s'", key);
}

static weft_status set_scalar(struct weft_gguf_writer *w, const char *key, uint32_t type,
                              const void *v, size_t n)
{
    uint8_t *val = malloc(n);
    if (!val) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory setting '%s'", key);
    memcpy(val, v, n);
    return set_raw(w, key, type, val, n);
}

weft_status weft_gguf_writer_set_u32(struct weft_gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, WEFT_GGUF_UINT32, &v, 4);
}

weft_status weft_gguf_writer_set_i32(struct weft_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, WEFT_GGUF_INT32, &v, 4);
}

weft_status weft_gguf_writer_set_f32(struct weft_gguf_writer *w, const char *key, float v)
{
    return set_scalar(w, key, WEFT_GGUF_FLOAT32, &v, 4);
}

weft_status weft_gguf_writer_set_bool(struct weft_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, WEFT_GGUF_BOOL, &b, 1);
}

weft_status weft_gguf_writer_set_str(struct weft_gguf_writer *w, const char *key, const char *v)
{
    if (!v) return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: NULL string for '%s'", key ? key : "");
    uint64_t n = strlen(v);
    uint8_t *val = malloc(8 + n);
    if (!val) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory setting '%s'", key);
    memcpy(val, &n, 8);
    memcpy(val + 8, v, n);
    return set_raw(w, key, WEFT_GGUF_STRING, val, 8 + n);
}

/* Array value: u32 element type, u64 count, then `bytes` of elements. */
static uint8_t *arr_alloc(uint32_t elem_type, uint64_t n, size_t bytes)
{
    if (bytes > SIZE_MAX - 12) return NULL;
    uint8_t *val = malloc(12 + bytes);
    if (!val) return NULL;
    memcpy(val, &elem_type, 4);
    memcpy(val + 4, &n, 8);
    return val;
}

weft_status weft_gguf_writer_set_arr_str(struct weft_gguf_writer *w, const char *key,
                                         const char *const *v, uint64_t n)
{
    size_t bytes = 0;
    for (uint64_t j = 0; j < n; j++) {
        if (!v[j])
            return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: '%s' element %llu is NULL",
                              key ? key : "", (unsigned long long)j);
        bytes += 8 + strlen(v[j]);
    }
    uint8_t *val = arr_alloc(WEFT_GGUF_STRING, n, bytes);
    if (!val) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory setting '%s'", key);
    uint8_t *p = val + 12;
    for (uint64_t j = 0; j < n; j++) {
        uint64_t len = strlen(v[j]);
        memcpy(p, &len, 8);
        memcpy(p + 8, v[j], len);
        p += 8 + len;
    }
    return set_raw(w, key, WEFT_GGUF_ARRAY, val, 12 + bytes);
}

static weft_status set_arr_num(struct weft_gguf_writer *w, const char *key, uint32_t elem_type,
                               const void *v, uint64_t n, size_t es)
{
    if (n > (SIZE_MAX - 12) / es)
        return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: '%s': array too long", key ? key : "");
    uint8_t *val = arr_alloc(elem_type, n, n * es);
    if (!val) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory setting '%s'", key);
    if (n) memcpy(val + 12, v, n * es);
    return set_raw(w, key, WEFT_GGUF_ARRAY, val, 12 + n * es);
}

weft_status weft_gguf_writer_set_arr_f32(struct weft_gguf_writer *w, const char *key,
                                         const float *v, uint64_t n)
{
    return set_arr_num(w, key, WEFT_GGUF_FLOAT32, v, n, 4);
}

weft_status weft_gguf_writer_set_arr_i32(struct weft_gguf_writer *w, const char *key,
                                         const int32_t *v, uint64_t n)
{
    return set_arr_num(w, key, WEFT_GGUF_INT32, v, n, 4);
}

weft_status weft_gguf_writer_copy_kvs(struct weft_gguf_writer *w, const struct weft_gguf *src,
                                      bool (*skip)(const char *key))
{
    for (int64_t i = 0; i < weft_gguf_n_kv(src); i++) {
        const char *key = weft_gguf_key(src, i);
        if (skip && skip(key)) continue;
        size_t n;
        const void *raw = weft_gguf_kv_raw_(src, i, &n);
        weft_status s = set_scalar(w, key, weft_gguf_kv_type(src, i), raw, n);
        if (s) return s;
    }
    return WEFT_OK;
}

weft_status weft_gguf_writer_add_tensor(struct weft_gguf_writer *w, const char *name,
                                        enum weft_type type, uint32_t n_dims,
                                        const int64_t *ne, const void *data)
{
    if (!name || !name[0]) return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: empty tensor name");
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->ts[i].name, name) == 0)
            return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: duplicate tensor '%s'", name);
    const struct weft_type_info *ti = weft_type_get((uint32_t)type);
    if (!ti || !ti->weight_ok)
        return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: tensor '%s': type %d cannot be stored",
                          name, (int)type);
    if (n_dims < 1 || n_dims > WEFT_GGUF_MAX_DIMS)
        return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %u out of range 1..4",
                          name, n_dims);
    struct wtensor t = {.type = (uint32_t)type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    int64_t nelem = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || ne[d] > INT64_MAX / nelem)
            return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad dim %u (%lld)",
                              name, d, (long long)ne[d]);
        t.ne[d] = ne[d];
        nelem *= ne[d];
    }
    if (ne[0] % ti->block_size)
        return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] %lld is not a "
                          "multiple of the %s block size %u", name, (long long)ne[0], ti->name,
                          ti->block_size);
    uint64_t size = (uint64_t)(nelem / ti->block_size) * ti->type_size;
    if (size > SIZE_MAX / 2)
        return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: tensor '%s' too large", name);
    t.size = (size_t)size;
    if (!data) return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL data", name);
    if (w->n_t == w->cap_t) {
        struct wtensor *ts = weft_grow(w->ts, &w->cap_t, w->n_t + 1, sizeof *ts);
        if (!ts) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory adding '%s'", name);
        w->ts = ts;
    }
    if (!(t.name = strdup(name)))
        return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory adding '%s'", name);
    w->ts[w->n_t++] = t;
    return WEFT_OK;
}

/* ---- serialization ---- */

static weft_status get_alignment(const struct weft_gguf_writer *w, size_t *align)
{
    *align = WEFT_GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, "general.alignment") != 0) continue;
        uint32_t a;
        if (w->kvs[i].type != WEFT_GGUF_UINT32)
            return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: general.alignment must be a u32");
        memcpy(&a, w->kvs[i].val, 4);
        if (a == 0 || (a & (a - 1)))
            return weft_error(WEFT_ERR_INVALID_ARG, "gguf writer: general.alignment %u is not a "
                              "nonzero power of two", a);
        *align = a;
    }
    return WEFT_OK;
}

static size_t pad_to(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Size of everything before the data section (unpadded), and of the data section. */
static void layout(const struct weft_gguf_writer *w, size_t align, size_t *hdr, size_t *data)
{
    size_t n = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++) n += 8 + strlen(w->kvs[i].key) + 4 + w->kvs[i].val_size;
    for (size_t i = 0; i < w->n_t; i++) n += 8 + strlen(w->ts[i].name) + 4 + 8 * w->ts[i].n_dims + 4 + 8;
    *hdr = n;
    size_t d = 0;
    for (size_t i = 0; i < w->n_t; i++) d += pad_to(w->ts[i].size, align);
    *data = d;
}

/* Writes the header and tensor infos into buf (hdr bytes) and zero padding up to `padded`. */
static void put_header(const struct weft_gguf_writer *w, size_t align, uint8_t *buf, size_t padded)
{
    uint8_t *p = buf;
#define PUT(v, n) do { memcpy(p, (v), (n)); p += (n); } while (0)
    uint32_t version = 3;
    uint64_t nt = w->n_t, nkv = w->n_kv, off = 0;
    PUT("GGUF", 4);
    PUT(&version, 4);
    PUT(&nt, 8);
    PUT(&nkv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t len = strlen(w->kvs[i].key);
        PUT(&len, 8);
        PUT(w->kvs[i].key, len);
        PUT(&w->kvs[i].type, 4);
        PUT(w->kvs[i].val, w->kvs[i].val_size);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->ts[i];
        uint64_t len = strlen(t->name);
        PUT(&len, 8);
        PUT(t->name, len);
        PUT(&t->n_dims, 4);
        PUT(t->ne, 8 * t->n_dims);
        PUT(&t->type, 4);
        PUT(&off, 8);
        off += pad_to(t->size, align);
    }
#undef PUT
    memset(p, 0, padded - (size_t)(p - buf));
}

weft_status weft_gguf_writer_to_memory(struct weft_gguf_writer *w, void **out, size_t *size)
{
    size_t align, hdr, data;
    *out = NULL;
    weft_status s = get_alignment(w, &align);
    if (s) return s;
    layout(w, align, &hdr, &data);
    size_t padded = pad_to(hdr, align), total = padded + data;
    uint8_t *buf = malloc(total);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory (%zu bytes)", total);
    put_header(w, align, buf, padded);
    uint8_t *p = buf + padded;
    for (size_t i = 0; i < w->n_t; i++) {
        size_t sz = w->ts[i].size, psz = pad_to(sz, align);
        memcpy(p, w->ts[i].data, sz);
        memset(p + sz, 0, psz - sz);
        p += psz;
    }
    *out = buf;
    *size = total;
    return WEFT_OK;
}

weft_status weft_gguf_writer_write(struct weft_gguf_writer *w, const char *path)
{
    static const uint8_t zeros[4096];
    size_t align, hdr, data;
    weft_status s = get_alignment(w, &align);
    if (s) return s;
    if (align > sizeof zeros)
        return weft_error(WEFT_ERR_UNSUPPORTED, "gguf writer: alignment %zu above %zu", align,
                          sizeof zeros);
    layout(w, align, &hdr, &data);
    size_t padded = pad_to(hdr, align);
    uint8_t *buf = malloc(padded);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory (%zu bytes)", padded);
    put_header(w, align, buf, padded);

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(buf);
        return weft_error(WEFT_ERR_NOMEM, "gguf writer: out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        s = weft_error(WEFT_ERR_IO, "gguf writer: cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        free(buf);
        return s;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a model file is normally world-readable */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        s = weft_error(WEFT_ERR_IO, "gguf writer: cannot open '%s': %s", tmp, strerror(errno));
        close(fd);
        goto fail;
    }
    bool ok = fwrite(buf, 1, padded, f) == padded;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        size_t sz = w->ts[i].size, pad = pad_to(sz, align) - sz;
        ok = fwrite(w->ts[i].data, 1, sz, f) == sz && fwrite(zeros, 1, pad, f) == pad;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        s = weft_error(WEFT_ERR_IO, "gguf writer: writing '%s': %s", tmp, strerror(err));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        s = weft_error(WEFT_ERR_IO, "gguf writer: cannot rename '%s' to '%s': %s", tmp, path,
                       strerror(errno));
        goto fail;
    }
    free(tmp);
    free(buf);
    return WEFT_OK;
fail:
    unlink(tmp);
    free(tmp);
    free(buf);
    return s;
}
