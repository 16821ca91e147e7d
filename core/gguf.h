/* GGUF reader (v2, v3) and writer.
 *
 * The reader mmaps the file and validates everything before returning:
 * magic, version, counts against the file size, string and array lengths,
 * value types, unique keys and tensor names with no NUL byte in them, no NUL in
 * the identifier values general.architecture, tokenizer.ggml.model and
 * tokenizer.ggml.pre (other strings may hold any bytes), tensor dims (positive,
 * product without overflow, first dim a multiple of the block size), types, and
 * the data layout as llama.cpp enforces it: each tensor's size is what its type
 * and shape imply, its offset is the sum of the sizes of the tensors before it
 * (in info order), each padded to general.alignment, and its data lies inside
 * the file; so no two tensors overlap. Bytes after the last tensor are allowed.
 * On any problem it fails with WEFT_ERR_FORMAT and weft_last_error() names what
 * is wrong, e.g.
 *   "tensor 'blk.0.attn_q.weight': data [1024, 5120) runs past end of file (4096 bytes)".
 * It never reads outside the mapping. Hyperparameter checks live in core/model. */
#ifndef WEFT_GGUF_H
#define WEFT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/types.h"

enum weft_gguf_type {
    WEFT_GGUF_UINT8 = 0, WEFT_GGUF_INT8 = 1, WEFT_GGUF_UINT16 = 2, WEFT_GGUF_INT16 = 3,
    WEFT_GGUF_UINT32 = 4, WEFT_GGUF_INT32 = 5, WEFT_GGUF_FLOAT32 = 6, WEFT_GGUF_BOOL = 7,
    WEFT_GGUF_STRING = 8, WEFT_GGUF_ARRAY = 9, WEFT_GGUF_UINT64 = 10, WEFT_GGUF_INT64 = 11,
    WEFT_GGUF_FLOAT64 = 12,
};

#define WEFT_GGUF_MAX_DIMS 4
#define WEFT_GGUF_DEFAULT_ALIGNMENT 32

struct weft_gguf;

struct weft_gguf_tensor {
    const char *name;        /* NUL-terminated, owned by the weft_gguf */
    enum weft_type type;
    uint32_t n_dims;
    int64_t ne[WEFT_GGUF_MAX_DIMS]; /* ne[0] = elements per row; unused dims = 1 */
    uint64_t offset;         /* from the start of the data section */
    size_t size;             /* bytes */
    const void *data;        /* points into the mapping; aligned to the file's alignment */
};

/* Open and validate `path`. On success *out owns the mapping; free with
 * weft_gguf_close. On failure *out is NULL, nothing is left open. */
weft_status weft_gguf_open(const char *path, struct weft_gguf **out);
/* Same over caller memory (not copied; must outlive the handle). Used by the
 * fuzzer and tests. */
weft_status weft_gguf_open_memory(const void *data, size_t size, struct weft_gguf **out);
void weft_gguf_close(struct weft_gguf *g);

uint32_t weft_gguf_version(const struct weft_gguf *g);
size_t weft_gguf_alignment(const struct weft_gguf *g);
size_t weft_gguf_file_size(const struct weft_gguf *g);

/* ---- key/value metadata. Keys are indexed 0..n_kv-1. ---- */
int64_t weft_gguf_n_kv(const struct weft_gguf *g);
int64_t weft_gguf_find_key(const struct weft_gguf *g, const char *key); /* -1 if absent */
const char *weft_gguf_key(const struct weft_gguf *g, int64_t i);
enum weft_gguf_type weft_gguf_kv_type(const struct weft_gguf *g, int64_t i);

/* Typed getters by key name. Each returns WEFT_OK, WEFT_ERR_NOT_FOUND when the
 * key is absent (and leaves *out untouched, so preset a default), or
 * WEFT_ERR_TYPE (with a message naming the key) when the stored value cannot
 * be represented: integers accept any integer type whose value fits, floats
 * accept FLOAT32/FLOAT64. */
weft_status weft_gguf_get_u32(const struct weft_gguf *g, const char *key, uint32_t *out);
weft_status weft_gguf_get_i32(const struct weft_gguf *g, const char *key, int32_t *out);
weft_status weft_gguf_get_u64(const struct weft_gguf *g, const char *key, uint64_t *out);
weft_status weft_gguf_get_f32(const struct weft_gguf *g, const char *key, float *out);
weft_status weft_gguf_get_bool(const struct weft_gguf *g, const char *key, bool *out);
/* *out is NUL-terminated and owned by g; *len (may be NULL) excludes the NUL.
 * Strings may contain embedded NULs, so use len where that matters. */
weft_status weft_gguf_get_str(const struct weft_gguf *g, const char *key, const char **out, size_t *len);

/* Arrays by key index. arr_type/arr_len are valid only for ARRAY kvs. */
enum weft_gguf_type weft_gguf_arr_type(const struct weft_gguf *g, int64_t i);
uint64_t weft_gguf_arr_len(const struct weft_gguf *g, int64_t i);
/* Element j of a STRING array (NUL-terminated copy owned by g). */
const char *weft_gguf_arr_str(const struct weft_gguf *g, int64_t i, uint64_t j, size_t *len);
/* Element j of a numeric (or BOOL) array converted to double / int64. */
double weft_gguf_arr_f64(const struct weft_gguf *g, int64_t i, uint64_t j);
int64_t weft_gguf_arr_i64(const struct weft_gguf *g, int64_t i, uint64_t j);

/* ---- tensors ---- */
int64_t weft_gguf_n_tensors(const struct weft_gguf *g);
int64_t weft_gguf_find_tensor(const struct weft_gguf *g, const char *name); /* -1 if absent */
const struct weft_gguf_tensor *weft_gguf_tensor(const struct weft_gguf *g, int64_t i);

/* ---- writer (always GGUF v3) ----
 * Values are copied into the writer when set; tensor data is referenced and
 * must stay valid until weft_gguf_writer_write returns. Setting a key twice
 * replaces the value. */
struct weft_gguf_writer;
weft_status weft_gguf_writer_init(struct weft_gguf_writer **out);
void weft_gguf_writer_free(struct weft_gguf_writer *w);
weft_status weft_gguf_writer_set_u32(struct weft_gguf_writer *w, const char *key, uint32_t v);
weft_status weft_gguf_writer_set_i32(struct weft_gguf_writer *w, const char *key, int32_t v);
weft_status weft_gguf_writer_set_f32(struct weft_gguf_writer *w, const char *key, float v);
weft_status weft_gguf_writer_set_bool(struct weft_gguf_writer *w, const char *key, bool v);
weft_status weft_gguf_writer_set_str(struct weft_gguf_writer *w, const char *key, const char *v);
weft_status weft_gguf_writer_set_arr_str(struct weft_gguf_writer *w, const char *key,
                                         const char *const *v, uint64_t n);
weft_status weft_gguf_writer_set_arr_f32(struct weft_gguf_writer *w, const char *key,
                                         const float *v, uint64_t n);
weft_status weft_gguf_writer_set_arr_i32(struct weft_gguf_writer *w, const char *key,
                                         const int32_t *v, uint64_t n);
/* Copy every kv of `src` except keys for which skip(key) returns true (skip may be NULL). */
weft_status weft_gguf_writer_copy_kvs(struct weft_gguf_writer *w, const struct weft_gguf *src,
                                      bool (*skip)(const char *key));
weft_status weft_gguf_writer_add_tensor(struct weft_gguf_writer *w, const char *name,
                                        enum weft_type type, uint32_t n_dims,
                                        const int64_t *ne, const void *data);
/* Serialize to a malloc'd buffer (caller frees) or to a file. */
weft_status weft_gguf_writer_to_memory(struct weft_gguf_writer *w, void **out, size_t *size);
weft_status weft_gguf_writer_write(struct weft_gguf_writer *w, const char *path);

#endif
