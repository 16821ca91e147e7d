/* GGUF reader/writer: round trips, the shared model files, and one case per
 * class of malformed file (each made by corrupting a valid file in memory). */
#define _POSIX_C_SOURCE 200809L
#include "core/gguf.h"
#include "tests/check.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#ifndef WEFT_SHARED_DIR
#define WEFT_SHARED_DIR "../shared"
#endif

/* ---- a byte builder for hand-made files (every kv type, v2) ---- */

struct bb { uint8_t *p; size_t n, cap; };

static void bb_put(struct bb *b, const void *v, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, v, n);
    b->n += n;
}
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(struct bb *b, const char *s) { bb_u64(b, strlen(s)); bb_put(b, s, strlen(s)); }
static void bb_key(struct bb *b, const char *k, uint32_t type) { bb_str(b, k); bb_u32(b, type); }

/* A v2 file with one kv of every scalar type, arrays of every element type, no tensors. */
static struct bb all_types_file(uint32_t version)
{
    struct bb b = {0};
    bb_put(&b, "GGUF", 4);
    bb_u32(&b, version);
    bb_u64(&b, 0);   /* tensors */
    bb_u64(&b, 24);  /* kvs */
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = 1.5f; uint8_t bo = 1;
    uint64_t u64 = 18000000000000000000ull; int64_t i64 = -9000000000000000000ll; double f64 = -2.25;
    bb_key(&b, "t.u8", WEFT_GGUF_UINT8); bb_put(&b, &u8, 1);
    bb_key(&b, "t.i8", WEFT_GGUF_INT8); bb_put(&b, &i8, 1);
    bb_key(&b, "t.u16", WEFT_GGUF_UINT16); bb_put(&b, &u16, 2);
    bb_key(&b, "t.i16", WEFT_GGUF_INT16); bb_put(&b, &i16, 2);
    bb_key(&b, "t.u32", WEFT_GGUF_UINT32); bb_put(&b, &u32, 4);
    bb_key(&b, "t.i32", WEFT_GGUF_INT32); bb_put(&b, &i32, 4);
    bb_key(&b, "t.f32", WEFT_GGUF_FLOAT32); bb_put(&b, &f32, 4);
    bb_key(&b, "t.bool", WEFT_GGUF_BOOL); bb_put(&b, &bo, 1);
    bb_key(&b, "t.str", WEFT_GGUF_STRING); bb_u64(&b, 5); bb_put(&b, "a\0b c", 5);
    bb_key(&b, "t.u64", WEFT_GGUF_UINT64); bb_put(&b, &u64, 8);
    bb_key(&b, "t.i64", WEFT_GGUF_INT64); bb_put(&b, &i64, 8);
    bb_key(&b, "t.f64", WEFT_GGUF_FLOAT64); bb_put(&b, &f64, 8);
    /* arrays of 3 elements of each type except ARRAY: values 1, 2, 3 (strings "x1".."x3") */
    static const char *names[] = {"a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32", "a.f32",
                                  "a.bool", "a.str", "a.arr", "a.u64", "a.i64", "a.f64"};
    for (uint32_t t = 0; t <= WEFT_GGUF_FLOAT64; t++) {
        if (t == WEFT_GGUF_ARRAY) continue;
        bb_key(&b, names[t], WEFT_GGUF_ARRAY);
        bb_u32(&b, t);
        bb_u64(&b, 3);
        for (int j = 1; j <= 3; j++) {
            union { uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64; float f; double d; } v;
            memset(&v, 0, sizeof v);
            size_t n = 0;
            switch (t) {
            case WEFT_GGUF_UINT8: case WEFT_GGUF_INT8: v.u8 = (uint8_t)j; n = 1; break;
            case WEFT_GGUF_BOOL: v.u8 = (uint8_t)(j & 1); n = 1; break;
            case WEFT_GGUF_UINT16: case WEFT_GGUF_INT16: v.u16 = (uint16_t)j; n = 2; break;
            case WEFT_GGUF_UINT32: case WEFT_GGUF_INT32: v.u32 = (uint32_t)j; n = 4; break;
            case WEFT_GGUF_FLOAT32: v.f = (float)j; n = 4; break;
            case WEFT_GGUF_UINT64: case WEFT_GGUF_INT64: v.u64 = (uint64_t)j; n = 8; break;
            case WEFT_GGUF_FLOAT64: v.d = j; n = 8; break;
            }
            if (t == WEFT_GGUF_STRING) {
                char s[4] = {'x', (char)('0' + j), 0};
                bb_str(&b, s);
            } else {
                bb_put(&b, &v, n);
            }
        }
    }
    return b;
}

static void check_all_types(const struct weft_gguf *g)
{
    uint32_t u32 = 0; int32_t i32 = 0; uint64_t u64 = 0; float f = 0; bool bo = false;
    const char *s = NULL; size_t len = 0;
    CHECK_EQ_INT(weft_gguf_n_kv(g), 24);
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.u8", &u32), WEFT_OK); CHECK_EQ_INT(u32, 200);
    CHECK_EQ_INT(weft_gguf_get_i32(g, "t.i8", &i32), WEFT_OK); CHECK_EQ_INT(i32, -100);
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.u16", &u32), WEFT_OK); CHECK_EQ_INT(u32, 60000);
    CHECK_EQ_INT(weft_gguf_get_i32(g, "t.i16", &i32), WEFT_OK); CHECK_EQ_INT(i32, -30000);
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.u32", &u32), WEFT_OK); CHECK_EQ_INT(u32, 4000000000u);
    CHECK_EQ_INT(weft_gguf_get_i32(g, "t.i32", &i32), WEFT_OK); CHECK_EQ_INT(i32, -2000000000);
    CHECK_EQ_INT(weft_gguf_get_f32(g, "t.f32", &f), WEFT_OK); CHECK(f == 1.5f);
    CHECK_EQ_INT(weft_gguf_get_bool(g, "t.bool", &bo), WEFT_OK); CHECK(bo);
    CHECK_EQ_INT(weft_gguf_get_str(g, "t.str", &s, &len), WEFT_OK);
    CHECK_EQ_INT(len, 5); CHECK(s && memcmp(s, "a\0b c", 6) == 0);
    CHECK_EQ_INT(weft_gguf_get_u64(g, "t.u64", &u64), WEFT_OK);
    CHECK(u64 == 18000000000000000000ull);
    CHECK_EQ_INT(weft_gguf_get_f32(g, "t.f64", &f), WEFT_OK); CHECK(f == -2.25f);
    int64_t k = weft_gguf_find_key(g, "t.i64");
    CHECK(k >= 0 && weft_gguf_kv_type(g, k) == WEFT_GGUF_INT64);
    for (uint32_t t = 0; t <= WEFT_GGUF_FLOAT64; t++) {
        static const char *names[] = {"a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32", "a.f32",
                                      "a.bool", "a.str", "a.arr", "a.u64", "a.i64", "a.f64"};
        if (t == WEFT_GGUF_ARRAY) continue;
        int64_t i = weft_gguf_find_key(g, names[t]);
        CHECK_MSG(i >= 0, "%s", names[t]);
        if (i < 0) continue;
        CHECK_EQ_INT(weft_gguf_kv_type(g, i), WEFT_GGUF_ARRAY);
        CHECK_EQ_INT(weft_gguf_arr_type(g, i), t);
        CHECK_EQ_INT(weft_gguf_arr_len(g, i), 3);
        for (uint64_t j = 0; j < 3; j++) {
            if (t == WEFT_GGUF_STRING) {
                const char *e = weft_gguf_arr_str(g, i, j, &len);
                char want[3] = {'x', (char)('1' + j), 0};
                CHECK(e && len == 2 && strcmp(e, want) == 0);
            } else {
                int64_t want = t == WEFT_GGUF_BOOL ? (int64_t)((j + 1) & 1) : (int64_t)j + 1;
                CHECK_EQ_INT(weft_gguf_arr_i64(g, i, j), want);
                CHECK_NEAR(weft_gguf_arr_f64(g, i, j), (double)want, 0);
            }
        }
        CHECK(weft_gguf_arr_str(g, i, 3, NULL) == NULL); /* out of range */
    }
}

/* Every kv type read from a hand-made v2 file, then copied by the writer (v3) and re-read. */
static void every_kv_type_round_trips_through_copy_kvs(void)
{
    struct bb b = all_types_file(2);
    struct weft_gguf *g = NULL, *g2 = NULL;
    CHECK_EQ_INT(weft_gguf_open_memory(b.p, b.n, &g), WEFT_OK);
    if (!g) { fprintf(stderr, "%s\n", weft_last_error()); free(b.p); return; }
    CHECK_EQ_INT(weft_gguf_version(g), 2);
    check_all_types(g);
    struct weft_gguf_writer *w = NULL;
    CHECK_EQ_INT(weft_gguf_writer_init(&w), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_copy_kvs(w, g, NULL), WEFT_OK);
    void *out = NULL;
    size_t n = 0;
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, &out, &n), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_open_memory(out, n, &g2), WEFT_OK);
    if (g2) {
        CHECK_EQ_INT(weft_gguf_version(g2), 3);
        check_all_types(g2);
        for (int64_t i = 0; i < weft_gguf_n_kv(g); i++) /* order kept */
            CHECK(strcmp(weft_gguf_key(g, i), weft_gguf_key(g2, i)) == 0);
    }
    weft_gguf_close(g2);
    weft_gguf_close(g);
    weft_gguf_writer_free(w);
    free(out);
    free(b.p);
}

static bool skip_t_keys(const char *key) { return strncmp(key, "t.", 2) == 0; }

static void copy_kvs_honours_skip(void)
{
    struct bb b = all_types_file(3);
    struct weft_gguf *g = NULL, *g2 = NULL;
    struct weft_gguf_writer *w = NULL;
    void *out = NULL;
    size_t n = 0;
    CHECK_EQ_INT(weft_gguf_open_memory(b.p, b.n, &g), WEFT_OK);
    weft_gguf_writer_init(&w);
    if (g) CHECK_EQ_INT(weft_gguf_writer_copy_kvs(w, g, skip_t_keys), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, &out, &n), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_open_memory(out, n, &g2), WEFT_OK);
    if (g2) {
        CHECK_EQ_INT(weft_gguf_n_kv(g2), 12);
        CHECK(weft_gguf_find_key(g2, "t.u8") < 0);
        CHECK(weft_gguf_find_key(g2, "a.u8") >= 0);
    }
    weft_gguf_close(g2);
    weft_gguf_close(g);
    weft_gguf_writer_free(w);
    free(out);
    free(b.p);
}

static void typed_getters_convert_in_range_and_reject_otherwise(void)
{
    struct bb b = all_types_file(3);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open_memory(b.p, b.n, &g), WEFT_OK);
    if (!g) { free(b.p); return; }
    uint32_t u32 = 7; int32_t i32 = 7; uint64_t u64 = 7; float f = 0; bool bo; const char *s;
    CHECK_EQ_INT(weft_gguf_get_u32(g, "missing", &u32), WEFT_ERR_NOT_FOUND); CHECK_EQ_INT(u32, 7);
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.i8", &u32), WEFT_ERR_TYPE);
    CHECK(strstr(weft_last_error(), "t.i8") != NULL);
    CHECK_EQ_INT(weft_gguf_get_i32(g, "t.u32", &i32), WEFT_ERR_TYPE);   /* 4e9 > INT32_MAX */
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.u64", &u32), WEFT_ERR_TYPE);
    CHECK_EQ_INT(weft_gguf_get_u64(g, "t.i64", &u64), WEFT_ERR_TYPE);   /* negative */
    CHECK_EQ_INT(weft_gguf_get_u64(g, "t.u16", &u64), WEFT_OK); CHECK_EQ_INT(u64, 60000);
    CHECK_EQ_INT(weft_gguf_get_i32(g, "t.i16", &i32), WEFT_OK); CHECK_EQ_INT(i32, -30000);
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.f32", &u32), WEFT_ERR_TYPE);
    CHECK_EQ_INT(weft_gguf_get_u32(g, "t.bool", &u32), WEFT_ERR_TYPE);
    CHECK_EQ_INT(weft_gguf_get_f32(g, "t.u32", &f), WEFT_ERR_TYPE);
    CHECK_EQ_INT(weft_gguf_get_bool(g, "t.u8", &bo), WEFT_ERR_TYPE);
    CHECK_EQ_INT(weft_gguf_get_str(g, "a.str", &s, NULL), WEFT_ERR_TYPE);
    CHECK(strstr(weft_last_error(), "a.str") != NULL);
    CHECK(weft_gguf_key(g, -1) == NULL && weft_gguf_key(g, 24) == NULL);
    CHECK_EQ_INT(weft_gguf_arr_len(g, weft_gguf_find_key(g, "t.u8")), 0); /* not an array */
    CHECK(weft_gguf_tensor(g, 0) == NULL);
    CHECK_EQ_INT(weft_gguf_find_tensor(g, "x"), -1);
    weft_gguf_close(g);
    free(b.p);
}

/* ---- the small valid file the malformed cases corrupt ---- */

static float t_a[32 * 2];
static uint8_t t_b[2 * 18];   /* Q4_0, 64 elements = 2 blocks */
static uint16_t t_c[16 * 3 * 2 * 1];

/* kvs: general.alignment (u32 32), test.u32, test.arr (i32 x3), test.strs, general.name;
 * tensors: tensor_aaaa F32 [32,2], tensor_bbbb Q4_0 [64], tensor_cccc F16 [16,3,2,1]. */
static void small_file(void **out, size_t *n)
{
    struct weft_gguf_writer *w = NULL;
    for (int i = 0; i < 64; i++) t_a[i] = (float)i * 0.5f;
    for (int i = 0; i < 36; i++) t_b[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 96; i++) t_c[i] = weft_f32_to_half((float)i);
    weft_gguf_writer_init(&w);
    static const int32_t arr[3] = {1, -2, 3};
    static const char *const strs[2] = {"hello", ""};
    weft_gguf_writer_set_u32(w, "general.alignment", 32);
    weft_gguf_writer_set_u32(w, "test.u32", 99);
    weft_gguf_writer_set_arr_i32(w, "test.arr", arr, 3);
    weft_gguf_writer_set_arr_str(w, "test.strs", strs, 2);
    weft_gguf_writer_set_str(w, "general.name", "tiny");
    int64_t ne_a[2] = {32, 2}, ne_b[1] = {64}, ne_c[4] = {16, 3, 2, 1};
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "tensor_aaaa", WEFT_TYPE_F32, 2, ne_a, t_a), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "tensor_bbbb", WEFT_TYPE_Q4_0, 1, ne_b, t_b), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "tensor_cccc", WEFT_TYPE_F16, 4, ne_c, t_c), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, out, n), WEFT_OK);
    weft_gguf_writer_free(w);
}

static size_t find(const uint8_t *p, size_t n, const char *s)
{
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(p + i, s, k) == 0) return i;
    fprintf(stderr, "test bug: '%s' not in file\n", s);
    abort();
}

static void put32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }
static void put64(uint8_t *p, size_t off, uint64_t v) { memcpy(p + off, &v, 8); }

/* Offsets of a kv's type field and a tensor's n_dims field (just after the string). */
static size_t after(const uint8_t *p, size_t n, const char *s) { return find(p, n, s) + strlen(s); }

/* Opens an exact-size copy (so ASan sees any overread) and expects FORMAT with `word`. */
static void expect_format(const uint8_t *p, size_t n, const char *word, int line)
{
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    struct weft_gguf *g = (struct weft_gguf *)1;
    weft_status s = weft_gguf_open_memory(copy, n, &g);
    if (getenv("WEFT_TEST_VERBOSE")) printf("     line %d: %s\n", line, weft_last_error());
    CHECK_MSG(s == WEFT_ERR_FORMAT, "line %d: status %d (%s)", line, s, weft_last_error());
    CHECK_MSG(g == NULL, "line %d: *out not NULL on failure", line);
    CHECK_MSG(strstr(weft_last_error(), word) != NULL, "line %d: '%s' not in \"%s\"", line, word,
              weft_last_error());
    if (s == WEFT_OK) weft_gguf_close(g);
    free(copy);
}
#define EXPECT_FORMAT(p, n, word) expect_format(p, n, word, __LINE__)

/* Each malformed case: copy of the small file, corrupted by `body`. */
#define CORRUPT_CASE(fn, body) \
    static void fn(void) { void *f_; size_t n; small_file(&f_, &n); uint8_t *p = f_; body; free(f_); }

static void writer_tensors_round_trip_with_alignment_and_data(void)
{
    void *f;
    size_t n;
    small_file(&f, &n);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open_memory(f, n, &g), WEFT_OK);
    if (!g) { fprintf(stderr, "%s\n", weft_last_error()); free(f); return; }
    CHECK_EQ_INT(weft_gguf_version(g), 3);
    CHECK_EQ_INT(weft_gguf_alignment(g), 32);
    CHECK_EQ_INT(weft_gguf_file_size(g), n);
    CHECK_EQ_INT(weft_gguf_n_tensors(g), 3);
    static const struct { const char *name; enum weft_type t; uint32_t nd; int64_t ne[4];
                          const void *data; size_t size; } want[3] = {
        {"tensor_aaaa", WEFT_TYPE_F32, 2, {32, 2, 1, 1}, t_a, sizeof t_a},
        {"tensor_bbbb", WEFT_TYPE_Q4_0, 1, {64, 1, 1, 1}, t_b, sizeof t_b},
        {"tensor_cccc", WEFT_TYPE_F16, 4, {16, 3, 2, 1}, t_c, sizeof t_c},
    };
    for (int i = 0; i < 3; i++) {
        int64_t k = weft_gguf_find_tensor(g, want[i].name);
        CHECK_EQ_INT(k, i); /* add order */
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, k);
        if (!t) continue;
        CHECK(strcmp(t->name, want[i].name) == 0);
        CHECK_EQ_INT(t->type, want[i].t);
        CHECK_EQ_INT(t->n_dims, want[i].nd);
        for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], want[i].ne[d]);
        CHECK_EQ_INT(t->size, want[i].size);
        CHECK_EQ_INT(t->offset % 32, 0);
        CHECK_EQ_INT(((const uint8_t *)t->data - (const uint8_t *)f) % 32, 0);
        CHECK(memcmp(t->data, want[i].data, want[i].size) == 0);
    }
    CHECK_EQ_INT(weft_gguf_tensor(g, 1)->offset, 256);
    CHECK_EQ_INT(weft_gguf_tensor(g, 2)->offset, 256 + 64);
    const char *s = NULL;
    CHECK_EQ_INT(weft_gguf_get_str(g, "general.name", &s, NULL), WEFT_OK);
    CHECK(s && strcmp(s, "tiny") == 0);
    int64_t k = weft_gguf_find_key(g, "test.strs");
    size_t len = 9;
    CHECK(strcmp(weft_gguf_arr_str(g, k, 0, NULL), "hello") == 0);
    CHECK(strcmp(weft_gguf_arr_str(g, k, 1, &len), "") == 0 && len == 0);
    k = weft_gguf_find_key(g, "test.arr");
    CHECK_EQ_INT(weft_gguf_arr_i64(g, k, 1), -2);
    weft_gguf_close(g);
    free(f);
}

static void writer_honours_caller_alignment_and_replaces_keys(void)
{
    struct weft_gguf_writer *w = NULL;
    weft_gguf_writer_init(&w);
    int64_t ne[1] = {32};
    float d[32] = {0};
    weft_gguf_writer_set_u32(w, "general.alignment", 3);
    weft_gguf_writer_add_tensor(w, "x", WEFT_TYPE_F32, 1, ne, d);
    weft_gguf_writer_add_tensor(w, "y", WEFT_TYPE_F32, 1, ne, d);
    void *out = NULL;
    size_t n;
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, &out, &n), WEFT_ERR_INVALID_ARG);
    weft_gguf_writer_set_u32(w, "general.alignment", 256);
    weft_gguf_writer_set_str(w, "k", "first");
    weft_gguf_writer_set_str(w, "k", "second");
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "x", WEFT_TYPE_F32, 1, ne, d), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "q", WEFT_TYPE_Q8_1, 1, ne, d), WEFT_ERR_INVALID_ARG);
    int64_t bad[1] = {31};
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "q", WEFT_TYPE_Q4_0, 1, bad, d), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, &out, &n), WEFT_OK);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open_memory(out, n, &g), WEFT_OK);
    if (g) {
        CHECK_EQ_INT(weft_gguf_alignment(g), 256);
        CHECK_EQ_INT(weft_gguf_n_kv(g), 2);
        CHECK_EQ_INT(weft_gguf_tensor(g, 1)->offset, 256);
        CHECK_EQ_INT(((const uint8_t *)weft_gguf_tensor(g, 0)->data - (uint8_t *)out) % 256, 0);
        const char *s = NULL;
        weft_gguf_get_str(g, "k", &s, NULL);
        CHECK(s && strcmp(s, "second") == 0);
    }
    weft_gguf_close(g);
    free(out);
    weft_gguf_writer_free(w);
}

static void writer_writes_file_atomically_and_reports_io_errors(void)
{
    char dir[] = "/tmp/weft_gguf_testXXXXXX";
    if (!mkdtemp(dir)) { CHECK(!"mkdtemp"); return; }
    char path[256], bad[300];
    snprintf(path, sizeof path, "%s/out.gguf", dir);
    snprintf(bad, sizeof bad, "%s/no/such/dir/out.gguf", dir);
    static uint8_t q4k[2 * 144];
    for (size_t i = 0; i < sizeof q4k; i++) q4k[i] = (uint8_t)(i * 13 + 1);
    struct weft_gguf_writer *w = NULL;
    weft_gguf_writer_init(&w);
    weft_gguf_writer_set_f32(w, "f", 0.25f);
    weft_gguf_writer_set_bool(w, "b", false);
    weft_gguf_writer_set_i32(w, "i", -5);
    float af[2] = {1.f, 2.f};
    weft_gguf_writer_set_arr_f32(w, "af", af, 2);
    int64_t ne[2] = {256, 2};
    CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, "k", WEFT_TYPE_Q4_K, 2, ne, q4k), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_write(w, path), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_writer_write(w, bad), WEFT_ERR_IO);
    CHECK(strstr(weft_last_error(), "no/such/dir") != NULL);
    weft_gguf_writer_free(w);

    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (g) {
        float f = 0; bool b = true; int32_t i = 0;
        CHECK_EQ_INT(weft_gguf_get_f32(g, "f", &f), WEFT_OK); CHECK(f == 0.25f);
        CHECK_EQ_INT(weft_gguf_get_bool(g, "b", &b), WEFT_OK); CHECK(!b);
        CHECK_EQ_INT(weft_gguf_get_i32(g, "i", &i), WEFT_OK); CHECK_EQ_INT(i, -5);
        int64_t k = weft_gguf_find_key(g, "af");
        CHECK_EQ_INT(weft_gguf_arr_type(g, k), WEFT_GGUF_FLOAT32);
        CHECK_NEAR(weft_gguf_arr_f64(g, k, 1), 2.0, 0);
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, 0);
        CHECK(t && t->type == WEFT_TYPE_Q4_K && t->size == sizeof q4k &&
              memcmp(t->data, q4k, sizeof q4k) == 0);
        CHECK_EQ_INT(weft_gguf_file_size(g) % 32, 0);
        weft_gguf_close(g);
    }
    /* no temp files left behind */
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK_EQ_INT(entries, 1);
    unlink(path);
    rmdir(dir);
}

static void open_reports_io_error_with_reason(void)
{
    struct weft_gguf *g = (struct weft_gguf *)1;
    CHECK_EQ_INT(weft_gguf_open("/nonexistent/weft/x.gguf", &g), WEFT_ERR_IO);
    CHECK(g == NULL);
    CHECK(strstr(weft_last_error(), "No such file") != NULL);
    CHECK_EQ_INT(weft_gguf_open("/tmp", &g), WEFT_ERR_IO);
}

/* ---- malformed files ---- */

CORRUPT_CASE(rejects_bad_magic, { p[0] = 'X'; EXPECT_FORMAT(p, n, "magic"); })
CORRUPT_CASE(rejects_version_1, { put32(p, 4, 1); EXPECT_FORMAT(p, n, "version 1"); })
CORRUPT_CASE(rejects_unknown_version, { put32(p, 4, 4); EXPECT_FORMAT(p, n, "version 4"); })
CORRUPT_CASE(rejects_big_endian_version, { put32(p, 4, 3u << 24); EXPECT_FORMAT(p, n, "big-endian"); })

static void rejects_every_truncation_cleanly(void)
{
    void *f;
    size_t n;
    small_file(&f, &n);
    int wrong = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t *copy = malloc(k ? k : 1);
        memcpy(copy, f, k);
        struct weft_gguf *g = NULL;
        weft_status s = weft_gguf_open_memory(copy, k, &g);
        if (s != WEFT_ERR_FORMAT || g != NULL || !strstr(weft_last_error(), "gguf:")) {
            if (wrong++ < 5) fprintf(stderr, "truncated at %zu: status %d: %s\n", k, s, weft_last_error());
            weft_gguf_close(g);
        }
        free(copy);
    }
    CHECK_EQ_INT(wrong, 0);
    printf("     (%zu truncations of a %zu-byte file rejected)\n", n, n);
    free(f);
}

CORRUPT_CASE(rejects_kv_count_too_large, { put64(p, 16, 1000000); EXPECT_FORMAT(p, n, "kv count"); })
CORRUPT_CASE(rejects_tensor_count_too_large, { put64(p, 8, 1u << 30); EXPECT_FORMAT(p, n, "tensor count"); })
CORRUPT_CASE(rejects_string_value_past_end, {
    put64(p, after(p, n, "general.name") + 4, n); EXPECT_FORMAT(p, n, "general.name");
    EXPECT_FORMAT(p, n, "past end"); })
CORRUPT_CASE(rejects_key_length_past_end, {
    put64(p, find(p, n, "test.u32") - 8, UINT64_MAX - 3); EXPECT_FORMAT(p, n, "key length"); })
CORRUPT_CASE(rejects_bad_kv_type, {
    put32(p, after(p, n, "test.u32"), 13); EXPECT_FORMAT(p, n, "invalid value type 13");
    EXPECT_FORMAT(p, n, "test.u32"); })
CORRUPT_CASE(rejects_bad_array_elem_type, {
    put32(p, after(p, n, "test.arr") + 4, 13); EXPECT_FORMAT(p, n, "element type 13"); })
CORRUPT_CASE(rejects_array_of_arrays, {
    put32(p, after(p, n, "test.arr") + 4, WEFT_GGUF_ARRAY); EXPECT_FORMAT(p, n, "arrays of arrays"); })
CORRUPT_CASE(rejects_array_length_overflow, {
    put64(p, after(p, n, "test.arr") + 8, (UINT64_MAX / 4) + 2); /* 4*len wraps to 4 */
    EXPECT_FORMAT(p, n, "test.arr"); EXPECT_FORMAT(p, n, "does not fit"); })
CORRUPT_CASE(rejects_string_array_element_past_end, {
    put64(p, find(p, n, "hello") - 8, 1u << 20); EXPECT_FORMAT(p, n, "test.strs"); })
CORRUPT_CASE(rejects_bad_bool, {
    /* the type u32 value 99 -> bool: value byte 99 */
    put32(p, after(p, n, "test.u32"), WEFT_GGUF_BOOL); EXPECT_FORMAT(p, n, "not 0 or 1"); })
CORRUPT_CASE(rejects_duplicate_key, {
    memcpy(p + find(p, n, "test.u32"), "test.arr", 8); EXPECT_FORMAT(p, n, "duplicate key 'test.arr'"); })
CORRUPT_CASE(rejects_empty_key, {
    put64(p, find(p, n, "test.u32") - 8, 0); EXPECT_FORMAT(p, n, "empty key"); })
CORRUPT_CASE(rejects_nul_in_key, {
    p[find(p, n, "test.u32") + 4] = 0;
    EXPECT_FORMAT(p, n, "gguf: key 'test' (kv 1) contains a NUL byte at byte 4 of 8"); })
CORRUPT_CASE(rejects_nul_in_tensor_name, {
    p[find(p, n, "tensor_bbbb") + 6] = 0;
    EXPECT_FORMAT(p, n, "gguf: tensor 'tensor' (tensor 1) name contains a NUL byte at byte 6 of 11"); })
CORRUPT_CASE(rejects_duplicate_tensor_name, {
    memcpy(p + find(p, n, "tensor_bbbb"), "tensor_aaaa", 11);
    EXPECT_FORMAT(p, n, "duplicate tensor name 'tensor_aaaa'"); })
CORRUPT_CASE(rejects_empty_tensor_name, {
    put64(p, find(p, n, "tensor_bbbb") - 8, 0); EXPECT_FORMAT(p, n, "empty name"); })
CORRUPT_CASE(rejects_n_dims_0, {
    put32(p, after(p, n, "tensor_bbbb"), 0); EXPECT_FORMAT(p, n, "n_dims 0");
    EXPECT_FORMAT(p, n, "tensor_bbbb"); })
CORRUPT_CASE(rejects_n_dims_5, { put32(p, after(p, n, "tensor_bbbb"), 5); EXPECT_FORMAT(p, n, "n_dims 5"); })
CORRUPT_CASE(rejects_dim_0, {
    put64(p, after(p, n, "tensor_aaaa") + 4 + 8, 0); EXPECT_FORMAT(p, n, "dim 1 is 0"); })
CORRUPT_CASE(rejects_negative_dim, {
    put64(p, after(p, n, "tensor_aaaa") + 4, (uint64_t)-32); EXPECT_FORMAT(p, n, "dim 0 is -32"); })
CORRUPT_CASE(rejects_element_count_overflow, {
    put64(p, after(p, n, "tensor_aaaa") + 4 + 8, 1ull << 60); /* 32 * 2^60 > INT64_MAX */
    EXPECT_FORMAT(p, n, "overflow"); EXPECT_FORMAT(p, n, "tensor_aaaa"); })
CORRUPT_CASE(rejects_byte_size_overflow, {
    /* 32 * 2^57 elements fit int64, but at 4 bytes each the size is 2^64 (found by the fuzzer) */
    put64(p, after(p, n, "tensor_aaaa") + 4 + 8, 1ull << 57);
    EXPECT_FORMAT(p, n, "data size overflows"); EXPECT_FORMAT(p, n, "tensor_aaaa"); })
CORRUPT_CASE(rejects_unknown_type_id, {
    put32(p, after(p, n, "tensor_aaaa") + 4 + 16, 99); EXPECT_FORMAT(p, n, "unknown type id 99"); })
CORRUPT_CASE(rejects_activation_only_type, {
    put32(p, after(p, n, "tensor_aaaa") + 4 + 16, WEFT_TYPE_Q8_1); EXPECT_FORMAT(p, n, "Q8_1"); })
CORRUPT_CASE(rejects_row_not_multiple_of_block, {
    put64(p, after(p, n, "tensor_bbbb") + 4, 48); EXPECT_FORMAT(p, n, "not a multiple of the Q4_0 block"); })
CORRUPT_CASE(rejects_misaligned_tensor_offset, {
    put64(p, after(p, n, "tensor_bbbb") + 4 + 8 + 4, 256 + 4);
    EXPECT_FORMAT(p, n, "alignment"); EXPECT_FORMAT(p, n, "tensor_bbbb"); })
CORRUPT_CASE(rejects_tensor_data_past_end, {
    put64(p, after(p, n, "tensor_cccc") + 4 + 32 + 4, 1024);
    EXPECT_FORMAT(p, n, "tensor 'tensor_cccc': data ["); EXPECT_FORMAT(p, n, "runs past end of file"); })
CORRUPT_CASE(rejects_tensor_offset_overflow, {
    put64(p, after(p, n, "tensor_cccc") + 4 + 32 + 4, UINT64_MAX - 31); EXPECT_FORMAT(p, n, "overflows"); })
CORRUPT_CASE(rejects_overlapping_tensors, {
    put64(p, after(p, n, "tensor_bbbb") + 4 + 8 + 4, 224);
    EXPECT_FORMAT(p, n, "overlap"); EXPECT_FORMAT(p, n, "tensor_bbbb"); })
/* The data section must be the tensors in info order, each padded to the alignment
 * (as llama.cpp requires): small_file has aaaa [0, 256), bbbb [256, 292), cccc [320, 512). */
#define OFF_A(p, n) (after(p, n, "tensor_aaaa") + 4 + 16 + 4)
#define OFF_B(p, n) (after(p, n, "tensor_bbbb") + 4 + 8 + 4)
#define OFF_C(p, n) (after(p, n, "tensor_cccc") + 4 + 32 + 4)
CORRUPT_CASE(rejects_tensors_out_of_info_order, {
    /* cccc [0, 192), bbbb [192, 228), aaaa [256, 512): inside the file, no overlap */
    put64(p, OFF_A(p, n), 256); put64(p, OFF_B(p, n), 192); put64(p, OFF_C(p, n), 0);
    EXPECT_FORMAT(p, n, "tensor 'tensor_aaaa': data offset 256, expected 0"); })
CORRUPT_CASE(rejects_first_tensor_not_at_data_start, {
    put64(p, OFF_A(p, n), 32);
    EXPECT_FORMAT(p, n, "tensor 'tensor_aaaa': data offset 32, expected 0"); })
CORRUPT_CASE(rejects_gap_between_tensors, {
    /* bbbb shrunk to one Q4_0 block (18 bytes, 32 padded): cccc is due at 288, not 320 */
    put64(p, after(p, n, "tensor_bbbb") + 4, 32);
    EXPECT_FORMAT(p, n, "tensor 'tensor_cccc': data offset 320, expected 288");
    EXPECT_FORMAT(p, n, "alignment 32"); })
CORRUPT_CASE(rejects_tensor_larger_than_its_slot, {
    /* bbbb as Q8_0 is 68 bytes, [256, 324), running into cccc at 320 */
    put32(p, after(p, n, "tensor_bbbb") + 4 + 8, WEFT_TYPE_Q8_0);
    EXPECT_FORMAT(p, n, "tensor 'tensor_cccc': data offset 320, expected 352");
    EXPECT_FORMAT(p, n, "overlaps tensor 'tensor_bbbb' data [256, 324)"); })
CORRUPT_CASE(rejects_huge_dims_without_wrapping, {
    /* 32 x (2^64-1)/128 F32: 2^64 - 128 bytes, fits u64 but offset + size wraps size_t */
    put64(p, after(p, n, "tensor_aaaa") + 4 + 8, UINT64_MAX / 128);
    EXPECT_FORMAT(p, n, "tensor 'tensor_aaaa': data offset 0 + size"); EXPECT_FORMAT(p, n, "overflows"); })
CORRUPT_CASE(rejects_huge_dims_past_end, {
    /* 192 * 2^40 bytes: no wrap, far past the end */
    put64(p, after(p, n, "tensor_cccc") + 4 + 24, 1ull << 40);
    EXPECT_FORMAT(p, n, "tensor 'tensor_cccc': data ["); EXPECT_FORMAT(p, n, "runs past end of file"); })

/* llama.cpp does not require the data section to end the file, so neither do we. */
static void accepts_bytes_after_last_tensor(void)
{
    void *f;
    size_t n;
    small_file(&f, &n);
    uint8_t *p = realloc(f, n + 7);
    memset(p + n, 0xab, 7);
    struct weft_gguf *g = NULL;
    CHECK_MSG(weft_gguf_open_memory(p, n + 7, &g) == WEFT_OK, "%s", weft_last_error());
    if (g) CHECK_EQ_INT(weft_gguf_tensor(g, 2)->offset, 320);
    weft_gguf_close(g);
    free(p);
}

/* ---- NUL bytes in string values ---- */

/* Each '#' is a placeholder a case turns into a NUL (the writer takes C strings). */
static void strings_file(void **out, size_t *n)
{
    struct weft_gguf_writer *w = NULL;
    static const char *const toks[2] = {"to#ken", "b"};
    weft_gguf_writer_init(&w);
    weft_gguf_writer_set_str(w, "general.architecture", "llama#evil");
    weft_gguf_writer_set_str(w, "general.name", "na#me");
    weft_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2#x");
    weft_gguf_writer_set_str(w, "tokenizer.ggml.pre", "smollm#x");
    weft_gguf_writer_set_str(w, "tokenizer.chat_template", "{{ x }}#y");
    weft_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 2);
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, out, n), WEFT_OK);
    weft_gguf_writer_free(w);
}

static void nul_at_hash(uint8_t *p, size_t n, const char *s)
{
    p[find(p, n, s) + (size_t)(strchr(s, '#') - s)] = 0;
}

#define STRINGS_CASE(fn, body) \
    static void fn(void) { void *f_; size_t n; strings_file(&f_, &n); uint8_t *p = f_; body; free(f_); }

/* "llama\0evil" would pass core/model's strcmp(arch, "llama"). */
STRINGS_CASE(rejects_nul_in_architecture, {
    nul_at_hash(p, n, "llama#evil");
    EXPECT_FORMAT(p, n, "gguf: key 'general.architecture': value contains a NUL byte at byte 5 of 10"); })
STRINGS_CASE(rejects_nul_in_tokenizer_model, {
    nul_at_hash(p, n, "gpt2#x");
    EXPECT_FORMAT(p, n, "key 'tokenizer.ggml.model': value contains a NUL byte at byte 4 of 6"); })
STRINGS_CASE(rejects_nul_in_tokenizer_pre, {
    nul_at_hash(p, n, "smollm#x");
    EXPECT_FORMAT(p, n, "key 'tokenizer.ggml.pre': value contains a NUL byte at byte 6 of 8"); })

/* Tokens are arbitrary bytes, and names and templates are text the reader need not police. */
static void keeps_nul_in_other_strings(void)
{
    void *f;
    size_t n;
    strings_file(&f, &n);
    uint8_t *p = f;
    nul_at_hash(p, n, "na#me"); nul_at_hash(p, n, "{{ x }}#y"); nul_at_hash(p, n, "to#ken");
    struct weft_gguf *g = NULL;
    CHECK_MSG(weft_gguf_open_memory(p, n, &g) == WEFT_OK, "%s", weft_last_error());
    if (g) {
        const char *s = NULL;
        size_t len = 0;
        CHECK_EQ_INT(weft_gguf_get_str(g, "general.name", &s, &len), WEFT_OK);
        CHECK(len == 5 && memcmp(s, "na\0me", 6) == 0);
        CHECK_EQ_INT(weft_gguf_get_str(g, "tokenizer.chat_template", &s, &len), WEFT_OK);
        CHECK_EQ_INT(len, 9);
        s = weft_gguf_arr_str(g, weft_gguf_find_key(g, "tokenizer.ggml.tokens"), 0, &len);
        CHECK(s && len == 6 && memcmp(s, "to\0ken", 7) == 0);
        CHECK_EQ_INT(weft_gguf_get_str(g, "general.architecture", &s, NULL), WEFT_OK);
        CHECK(s && strcmp(s, "llama#evil") == 0);
        weft_gguf_close(g);
    }
    free(f);
}

CORRUPT_CASE(rejects_alignment_0, {
    put32(p, after(p, n, "general.alignment") + 4, 0); EXPECT_FORMAT(p, n, "general.alignment 0"); })
CORRUPT_CASE(rejects_alignment_3, {
    put32(p, after(p, n, "general.alignment") + 4, 3); EXPECT_FORMAT(p, n, "general.alignment 3"); })
CORRUPT_CASE(rejects_alignment_wrong_type, {
    put32(p, after(p, n, "general.alignment"), WEFT_GGUF_INT32);
    EXPECT_FORMAT(p, n, "general.alignment has type i32"); })

/* Random byte corruptions of the small file: must never crash (ASan/UBSan build). */
static void survives_random_corruption(void)
{
    void *f;
    size_t n;
    small_file(&f, &n);
    uint32_t rng = 12345;
    int ok = 0;
    uint8_t *copy = malloc(n);
    for (int it = 0; it < 20000; it++) {
        memcpy(copy, f, n);
        for (int m = 0; m < 1 + it % 4; m++) {
            rng = rng * 1664525u + 1013904223u;
            size_t pos = (rng >> 8) % (n < 400 ? n : 400); /* the header part */
            rng = rng * 1664525u + 1013904223u;
            copy[pos] = (uint8_t)(rng >> 24);
        }
        struct weft_gguf *g = NULL;
        weft_status s = weft_gguf_open_memory(copy, n, &g);
        CHECK(s == WEFT_OK || s == WEFT_ERR_FORMAT);
        if (s == WEFT_OK) {
            ok++;
            for (int64_t i = 0; i < weft_gguf_n_kv(g); i++)
                for (uint64_t j = 0; j < weft_gguf_arr_len(g, i); j++) {
                    weft_gguf_arr_str(g, i, j, NULL);
                    weft_gguf_arr_i64(g, i, j);
                }
            weft_gguf_close(g);
        } else {
            CHECK(g == NULL);
        }
    }
    printf("     (20000 corruptions, %d still valid)\n", ok);
    free(copy);
    free(f);
}

/* ---- the shared model files ---- */

static void reads_every_shared_model(void)
{
    const char *dir = WEFT_SHARED_DIR "/models";
    DIR *d = opendir(dir);
    if (!d) {
        printf("     SKIP reads_every_shared_model: %s not found\n", dir);
        return;
    }
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct weft_gguf *g = NULL;
        weft_status s = weft_gguf_open(path, &g);
        CHECK_MSG(s == WEFT_OK, "%s: %s", path, weft_last_error());
        if (!g) continue;
        count++;
        CHECK(weft_gguf_n_tensors(g) > 0);
        const char *arch = NULL;
        CHECK_EQ_INT(weft_gguf_get_str(g, "general.architecture", &arch, NULL), WEFT_OK);
        for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
            const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
            CHECK_EQ_INT(weft_gguf_find_tensor(g, t->name), i);
            CHECK((const uint8_t *)t->data + t->size <=
                  (const uint8_t *)weft_gguf_tensor(g, 0)->data - weft_gguf_tensor(g, 0)->offset +
                  weft_gguf_file_size(g));
        }
        for (int64_t i = 0; i < weft_gguf_n_kv(g); i++)
            CHECK_EQ_INT(weft_gguf_find_key(g, weft_gguf_key(g, i)), i);

        if (strcmp(e->d_name, "stories260K.gguf") == 0) {
            const char *model = NULL;
            uint32_t n_layer = 0;
            CHECK_EQ_INT(weft_gguf_version(g), 3);
            CHECK_EQ_INT(weft_gguf_n_tensors(g), 48);
            CHECK_EQ_INT(weft_gguf_file_size(g), 1185376);
            CHECK_EQ_INT(weft_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL), WEFT_OK);
            CHECK(model && strcmp(model, "llama") == 0);
            CHECK(arch && strcmp(arch, "llama") == 0);
            CHECK_EQ_INT(weft_gguf_get_u32(g, "llama.block_count", &n_layer), WEFT_OK);
            CHECK_EQ_INT(n_layer, 5);
            int64_t k = weft_gguf_find_key(g, "tokenizer.ggml.tokens");
            CHECK_EQ_INT(weft_gguf_arr_len(g, k), 512);
            CHECK(strcmp(weft_gguf_arr_str(g, k, 0, NULL), "<unk>") == 0);
            int64_t te = weft_gguf_find_tensor(g, "token_embd.weight");
            int64_t out = weft_gguf_find_tensor(g, "output.weight");
            CHECK(te >= 0 && out >= 0);
            if (te >= 0 && out >= 0) {
                const struct weft_gguf_tensor *a = weft_gguf_tensor(g, te), *b = weft_gguf_tensor(g, out);
                CHECK(a->type == WEFT_TYPE_F32 && a->ne[0] == 64 && a->ne[1] == 512);
                CHECK(a->size == b->size && memcmp(a->data, b->data, a->size) == 0);
            }
        }
        if (strcmp(e->d_name, "synth-smollm2-vocab.gguf") == 0) {
            int64_t k = weft_gguf_find_key(g, "tokenizer.ggml.tokens");
            CHECK_EQ_INT(weft_gguf_arr_len(g, k), 49152);
            CHECK_EQ_INT(weft_gguf_arr_len(g, weft_gguf_find_key(g, "tokenizer.ggml.merges")), 48900);
        }
        weft_gguf_close(g);
    }
    closedir(d);
    printf("     (%d model files read)\n", count);
    CHECK(count > 0);
}

/* A real model copied through the writer (all kvs + tensors) reads back identical. */
static void model_copy_through_writer_is_identical(void)
{
    const char *path = WEFT_SHARED_DIR "/models/stories260K.gguf";
    struct weft_gguf *g = NULL, *g2 = NULL;
    if (access(path, R_OK) != 0) {
        printf("     SKIP model_copy_through_writer_is_identical: %s not found\n", path);
        return;
    }
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (!g) return;
    struct weft_gguf_writer *w = NULL;
    weft_gguf_writer_init(&w);
    CHECK_EQ_INT(weft_gguf_writer_copy_kvs(w, g, NULL), WEFT_OK);
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        CHECK_EQ_INT(weft_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data), WEFT_OK);
    }
    void *out = NULL;
    size_t n = 0;
    CHECK_EQ_INT(weft_gguf_writer_to_memory(w, &out, &n), WEFT_OK);
    /* written by llama.cpp with the same layout rules, so byte-identical */
    CHECK_EQ_INT(n, weft_gguf_file_size(g));
    CHECK_EQ_INT(weft_gguf_open_memory(out, n, &g2), WEFT_OK);
    if (g2) {
        CHECK_EQ_INT(weft_gguf_n_kv(g2), weft_gguf_n_kv(g));
        CHECK_EQ_INT(weft_gguf_n_tensors(g2), weft_gguf_n_tensors(g));
        for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
            const struct weft_gguf_tensor *a = weft_gguf_tensor(g, i), *b = weft_gguf_tensor(g2, i);
            CHECK(strcmp(a->name, b->name) == 0 && a->size == b->size && a->offset == b->offset);
            CHECK(memcmp(a->data, b->data, a->size) == 0);
        }
        weft_gguf_close(g2);
    }
    weft_gguf_close(g);
    weft_gguf_writer_free(w);
    free(out);
}

int main(void)
{
    RUN(every_kv_type_round_trips_through_copy_kvs);
    RUN(copy_kvs_honours_skip);
    RUN(typed_getters_convert_in_range_and_reject_otherwise);
    RUN(writer_tensors_round_trip_with_alignment_and_data);
    RUN(writer_honours_caller_alignment_and_replaces_keys);
    RUN(writer_writes_file_atomically_and_reports_io_errors);
    RUN(open_reports_io_error_with_reason);
    RUN(rejects_bad_magic);
    RUN(rejects_version_1);
    RUN(rejects_unknown_version);
    RUN(rejects_big_endian_version);
    RUN(rejects_every_truncation_cleanly);
    RUN(rejects_kv_count_too_large);
    RUN(rejects_tensor_count_too_large);
    RUN(rejects_string_value_past_end);
    RUN(rejects_key_length_past_end);
    RUN(rejects_bad_kv_type);
    RUN(rejects_bad_array_elem_type);
    RUN(rejects_array_of_arrays);
    RUN(rejects_array_length_overflow);
    RUN(rejects_string_array_element_past_end);
    RUN(rejects_bad_bool);
    RUN(rejects_duplicate_key);
    RUN(rejects_empty_key);
    RUN(rejects_nul_in_key);
    RUN(rejects_nul_in_tensor_name);
    RUN(rejects_duplicate_tensor_name);
    RUN(rejects_empty_tensor_name);
    RUN(rejects_n_dims_0);
    RUN(rejects_n_dims_5);
    RUN(rejects_dim_0);
    RUN(rejects_negative_dim);
    RUN(rejects_element_count_overflow);
    RUN(rejects_byte_size_overflow);
    RUN(rejects_unknown_type_id);
    RUN(rejects_activation_only_type);
    RUN(rejects_row_not_multiple_of_block);
    RUN(rejects_misaligned_tensor_offset);
    RUN(rejects_tensor_data_past_end);
    RUN(rejects_tensor_offset_overflow);
    RUN(rejects_overlapping_tensors);
    RUN(rejects_tensors_out_of_info_order);
    RUN(rejects_first_tensor_not_at_data_start);
    RUN(rejects_gap_between_tensors);
    RUN(rejects_tensor_larger_than_its_slot);
    RUN(rejects_huge_dims_without_wrapping);
    RUN(rejects_huge_dims_past_end);
    RUN(accepts_bytes_after_last_tensor);
    RUN(rejects_nul_in_architecture);
    RUN(rejects_nul_in_tokenizer_model);
    RUN(rejects_nul_in_tokenizer_pre);
    RUN(keeps_nul_in_other_strings);
    RUN(rejects_alignment_0);
    RUN(rejects_alignment_3);
    RUN(rejects_alignment_wrong_type);
    RUN(survives_random_corruption);
    RUN(reads_every_shared_model);
    RUN(model_copy_through_writer_is_identical);
    return check_summary();
}
