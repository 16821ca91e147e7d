/* libFuzzer target for the GGUF reader: any input must either fail cleanly
 * (WEFT_ERR_FORMAT, *out NULL) or give a handle whose every accessor stays
 * inside the input. Built by scripts/fuzz-gguf.sh (cmake -DWEFT_FUZZ=ON, clang). */
#include "core/gguf.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static void touch(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = h * 31 + b[i];
    sink += h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct weft_gguf *g = NULL;
    weft_status s = weft_gguf_open_memory(data, size, &g);
    if (s != WEFT_OK) {
        if (g != NULL || s != WEFT_ERR_FORMAT || weft_last_error()[0] == '\0') abort();
        return 0;
    }
    sink += weft_gguf_version(g) + weft_gguf_alignment(g) + weft_gguf_file_size(g);
    for (int64_t i = 0; i < weft_gguf_n_kv(g); i++) {
        const char *key = weft_gguf_key(g, i);
        if (!key || !key[0] || weft_gguf_find_key(g, key) != i) abort();
        enum weft_gguf_type t = weft_gguf_kv_type(g, i);
        uint32_t u32; int32_t i32; uint64_t u64; float f; bool b; const char *str; size_t len;
        weft_gguf_get_u32(g, key, &u32);
        weft_gguf_get_i32(g, key, &i32);
        weft_gguf_get_u64(g, key, &u64);
        weft_gguf_get_f32(g, key, &f);
        weft_gguf_get_bool(g, key, &b);
        if (weft_gguf_get_str(g, key, &str, &len) == WEFT_OK) {
            touch(str, len + 1);
            if (str[len] != '\0') abort();
        }
        if (t != WEFT_GGUF_ARRAY) continue;
        enum weft_gguf_type at = weft_gguf_arr_type(g, i);
        uint64_t n = weft_gguf_arr_len(g, i);
        for (uint64_t j = 0; j < n; j++) {
            if (at == WEFT_GGUF_STRING) {
                const char *e = weft_gguf_arr_str(g, i, j, &len);
                if (!e || e[len] != '\0') abort();
                touch(e, len);
            } else {
                double d = weft_gguf_arr_f64(g, i, j);
                touch(&d, sizeof d);
                sink += (uint64_t)weft_gguf_arr_i64(g, i, j);
            }
        }
        /* out of range stays harmless */
        weft_gguf_arr_str(g, i, n, &len);
        weft_gguf_arr_i64(g, i, n);
    }
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        if (!t || weft_gguf_find_tensor(g, t->name) != i) abort();
        const uint8_t *p = t->data;
        if (p < data || p + t->size > data + size || t->size == 0) abort();
        touch(t->name, strlen(t->name));
        touch(p, 1);
        touch(p + t->size - 1, 1);
        sink += t->type + t->n_dims + (uint64_t)t->ne[0] + t->offset;
    }
    weft_gguf_find_key(g, "general.architecture");
    weft_gguf_find_tensor(g, "token_embd.weight");
    weft_gguf_close(g);
    return 0;
}
