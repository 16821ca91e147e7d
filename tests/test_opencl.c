/* The OpenCL backend's own behaviour (its numbers against the CPU are
 * test_backend_ops', test_device_exact's and test_devices'): what a machine
 * without an OpenCL platform prints; options it refuses; the device it
 * describes; the kernels' program kept in the cache folder and a damaged
 * cache file replaced; bad input the kernels meet reported at sync (and
 * then cleared); small buffers sub-allocated from shared arenas without
 * overlapping, zero-filled when reused; a buffer past the device's limit
 * refused. Skips (77) without an OpenCL device (PoCL in CI). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "tests/check.h"
#include "tests/weft_exec.h"

static const struct weft_backend_iface *oi;
static struct weft_device_info info0;

static void no_platform_is_one_clear_line(void)
{
    char dir[] = "/tmp/weft-ocl-empty-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char args[256], *out = NULL;
    /* the ICD loader looks for drivers in OCL_ICD_VENDORS: an empty folder is a machine without one */
    snprintf(args, sizeof args, "devices 2>&1");
    setenv("OCL_ICD_VENDORS", dir, 1);
    int rc = weft_exec(args, &out);
    unsetenv("OCL_ICD_VENDORS");
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(out && strstr(out, "opencl   no devices: no OpenCL platform"), "got: %s", out ? out : "");
    CHECK_MSG(out && strstr(out, "cpu:0"), "the CPU is still listed: %s", out ? out : "");
    free(out);
    rmdir(dir);
}

static void device_is_described_and_options_checked(void)
{
    CHECK(!strcmp(info0.id, "opencl:0"));
    CHECK_MSG(strstr(info0.name, "OpenCL ") && (strstr(info0.name, ", CPU") || strstr(info0.name, ", GPU") ||
                                                strstr(info0.name, ", accelerator") || strstr(info0.name, ", other")),
              "name: %s", info0.name);
    CHECK(info0.mem_total > 0);
    struct weft_backend *b = NULL;
    CHECK(weft_backend_open_opts("opencl:0", 0, "opencl.bogus=1", &b) == WEFT_ERR_INVALID_ARG && b == NULL);
    CHECK_MSG(strstr(weft_last_error(), "unknown option 'opencl.bogus'"), "%s", weft_last_error());
    CHECK(weft_backend_open_opts("opencl:99", 0, NULL, &b) == WEFT_ERR_NO_DEVICE && b == NULL);
    CHECK(weft_backend_open_opts("opencl:0", 0, "opencl.exact=0", &b) == WEFT_OK && b);
    weft_backend_close(b);
}

/* the one opencl-*.bin in dir: its inode (0 if none) */
static ino_t cache_file(const char *dir, char *path, size_t cap)
{
    DIR *d = opendir(dir);
    ino_t ino = 0;
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, "opencl-", 7) || !strstr(e->d_name, ".bin") || strstr(e->d_name, ".tmp")) continue;
        snprintf(path, cap, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size > 0) ino = st.st_ino;
        n++;
    }
    if (d) closedir(d);
    CHECK_EQ_INT(n, ino ? 1 : 0);
    return ino;
}

/* EMBED of an F32 table through b: row 3 of a 4 x 8 table */
static bool embed_works(struct weft_backend *b)
{
    const struct weft_backend_iface *bi = b->iface;
    float tab[32];
    for (int i = 0; i < 32; i++) tab[i] = (float)i;
    int32_t id = 3;
    struct weft_buffer *bt = NULL, *bid = NULL, *bo = NULL;
    bool ok = bi->buffer_alloc(b, sizeof tab, &bt) == WEFT_OK && bi->buffer_alloc(b, 4, &bid) == WEFT_OK &&
              bi->buffer_alloc(b, 32, &bo) == WEFT_OK && bi->buffer_write(bt, 0, tab, sizeof tab) == WEFT_OK &&
              bi->buffer_write(bid, 0, &id, 4) == WEFT_OK;
    struct weft_op op = {.kind = WEFT_OP_EMBED};
    op.u.embed = (struct weft_op_embed){weft_view_2d(bt, 0, WEFT_TYPE_F32, 8, 4), weft_view_2d(bid, 0, WEFT_TYPE_I32, 1, 1),
                                        weft_view_2d(bo, 0, WEFT_TYPE_F32, 8, 1), 0.0f};
    float out[8] = {0};
    ok = ok && bi->run(b, &op, 1) == WEFT_OK && bi->sync(b) == WEFT_OK && bi->buffer_read(bo, 0, out, 32) == WEFT_OK;
    for (int i = 0; i < 8; i++) ok = ok && out[i] == tab[24 + i];
    bi->buffer_free(bt);
    bi->buffer_free(bid);
    bi->buffer_free(bo);
    return ok;
}

static void program_is_cached_and_a_bad_cache_file_replaced(void)
{
    char dir[] = "/tmp/weft-ocl-cache-XXXXXX", path[600] = "";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(weft_backend_set_cache_dir(dir) == WEFT_OK);
    struct weft_backend *b = NULL;
    CHECK(weft_backend_open("opencl:0", 0, &b) == WEFT_OK);  /* built from source, then saved */
    weft_backend_close(b);
    const ino_t first = cache_file(dir, path, sizeof path);
    CHECK_MSG(first != 0, "no opencl-*.bin in %s after the first open", dir);
    /* a later open loads it: the file is left as it is */
    CHECK(weft_backend_open("opencl:0", 0, &b) == WEFT_OK && embed_works(b));
    weft_backend_close(b);
    CHECK(cache_file(dir, path, sizeof path) == first);
    /* a damaged file: ignored, the program built again and the file replaced */
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite("not a program", 1, 13, f) == 13);
    if (f) fclose(f);
    struct stat st;
    const ino_t bad = stat(path, &st) == 0 ? st.st_ino : 0;
    CHECK(weft_backend_open("opencl:0", 0, &b) == WEFT_OK && embed_works(b));
    weft_backend_close(b);
    const ino_t again = cache_file(dir, path, sizeof path);
    CHECK(again != 0 && again != bad && stat(path, &st) == 0 && st.st_size > 13);
    CHECK(weft_backend_set_cache_dir(NULL) == WEFT_OK);
    unlink(path);
    rmdir(dir);
}

static void bad_input_is_reported_at_sync_then_cleared(void)
{
    struct weft_backend *b = NULL;
    CHECK(weft_backend_open("opencl:0", 0, &b) == WEFT_OK);
    if (!b) return;
    float tab[40] = {0};
    int32_t ids[2] = {1, 999};
    struct weft_buffer *bt = NULL, *bid = NULL, *bo = NULL;
    CHECK(oi->buffer_alloc(b, sizeof tab, &bt) == WEFT_OK && oi->buffer_alloc(b, 8, &bid) == WEFT_OK &&
          oi->buffer_alloc(b, 2 * 8 * 4, &bo) == WEFT_OK);
    CHECK(oi->buffer_write(bt, 0, tab, sizeof tab) == WEFT_OK && oi->buffer_write(bid, 0, ids, 8) == WEFT_OK);
    struct weft_op op = {.kind = WEFT_OP_EMBED};
    op.u.embed = (struct weft_op_embed){weft_view_2d(bt, 0, WEFT_TYPE_F32, 8, 5), weft_view_2d(bid, 0, WEFT_TYPE_I32, 2, 1),
                                        weft_view_2d(bo, 0, WEFT_TYPE_F32, 8, 2), 0.0f};
    CHECK(oi->supports(b, &op));
    /* ids the backend knows on the host (written by buffer_write): refused before anything runs */
    CHECK(oi->run(b, &op, 1) == WEFT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(weft_last_error(), "token id 999 outside the embedding table"), "%s", weft_last_error());
    CHECK(oi->sync(b) == WEFT_OK);
    /* ids only the device knows (a buffer too large for a host copy, filled by a COPY op): the
     * kernel flags them, sync reports it once, and the ROPE_KV after it leaves the cache alone */
    struct weft_buffer *big = NULL, *kvb = NULL, *qkv = NULL, *meta = NULL;
    CHECK(oi->buffer_alloc(b, 2u << 20, &big) == WEFT_OK);
    const size_t kv_bytes = 2 * 16 * 32 * 2;  /* one block: 16 tokens of 1 head of 32, K and V, F16 */
    CHECK(oi->buffer_alloc(b, kv_bytes, &kvb) == WEFT_OK && oi->buffer_alloc(b, 3 * 32 * 4, &qkv) == WEFT_OK &&
          oi->buffer_alloc(b, 16, &meta) == WEFT_OK);
    const int32_t md[4] = {0, 0, 0, 0}; /* pos, seq, slot, bt_off */
    CHECK(oi->buffer_write(meta, 0, md, sizeof md) == WEFT_OK);
    struct weft_op ops[3] = {{.kind = WEFT_OP_COPY}, {.kind = WEFT_OP_EMBED}, {.kind = WEFT_OP_ROPE_KV}};
    ops[0].u.copy = (struct weft_op_copy){bid, big, 0, 0, 8};
    ops[1].u.embed = op.u.embed;
    ops[1].u.embed.ids = weft_view_2d(big, 0, WEFT_TYPE_I32, 2, 1);
    float one[3 * 32];
    for (int i = 0; i < 3 * 32; i++) one[i] = 1.0f;
    CHECK(oi->buffer_write(qkv, 0, one, sizeof one) == WEFT_OK);
    struct weft_batch_view bv = {1, 1, weft_view_2d(meta, 0, WEFT_TYPE_I32, 1, 1), weft_view_2d(meta, 4, WEFT_TYPE_I32, 1, 1),
                                 weft_view_2d(meta, 8, WEFT_TYPE_I32, 1, 1), weft_view_2d(meta, 12, WEFT_TYPE_I32, 1, 1),
                                 weft_view_2d(meta, 0, WEFT_TYPE_I32, 1, 1)};
    ops[2].u.rope_kv = (struct weft_op_rope_kv){.q = weft_view_2d(qkv, 0, WEFT_TYPE_F32, 32, 1),
                                                .k = weft_view_2d(qkv, 128, WEFT_TYPE_F32, 32, 1),
                                                .v = weft_view_2d(qkv, 256, WEFT_TYPE_F32, 32, 1),
                                                .kv = {kvb, WEFT_TYPE_F16, 1, 0, 1, 32}, .batch = bv, .n_head = 1,
                                                .n_rot = 32, .freq_base = 10000.0f, .freq_scale = 1.0f};
    CHECK(oi->run(b, ops, 3) == WEFT_OK);
    CHECK(oi->sync(b) == WEFT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(weft_last_error(), "a token id outside the embedding table"), "%s", weft_last_error());
    CHECK(oi->sync(b) == WEFT_OK);  /* reported once */
    uint16_t cache[2 * 16 * 32];
    CHECK(oi->buffer_read(kvb, 0, cache, sizeof cache) == WEFT_OK);
    bool untouched = true;
    for (size_t i = 0; i < sizeof cache / 2; i++) untouched = untouched && cache[i] == 0;
    CHECK_MSG(untouched, "the ROPE_KV after the bad EMBED wrote the cache");
    CHECK(oi->run(b, ops + 2, 1) == WEFT_OK && oi->sync(b) == WEFT_OK);  /* alone it does */
    CHECK(oi->buffer_read(kvb, 0, cache, sizeof cache) == WEFT_OK && cache[0] != 0);
    /* a slot outside the cache: flagged, nothing written */
    const int32_t far = 16;
    CHECK(oi->buffer_write(meta, 8, &far, 4) == WEFT_OK);
    CHECK(oi->run(b, ops + 2, 1) == WEFT_OK && oi->sync(b) == WEFT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(weft_last_error(), "a KV slot outside the cache"), "%s", weft_last_error());
    oi->buffer_free(big);
    oi->buffer_free(kvb);
    oi->buffer_free(qkv);
    oi->buffer_free(meta);
    ids[1] = 4;
    CHECK(oi->buffer_write(bid, 0, ids, 8) == WEFT_OK);
    CHECK(oi->run(b, &op, 1) == WEFT_OK && oi->sync(b) == WEFT_OK);
    /* an op whose views run past their buffer is not taken */
    op.u.embed.out = weft_view_2d(bo, 4, WEFT_TYPE_F32, 8, 2);
    CHECK(!oi->supports(b, &op));
    CHECK(oi->run(b, &op, 1) == WEFT_ERR_UNSUPPORTED);
    oi->buffer_free(bt);
    oi->buffer_free(bid);
    oi->buffer_free(bo);
    weft_backend_close(b);
}

static void small_buffers_share_arenas_without_overlap(void)
{
    struct weft_backend *b = NULL;
    CHECK(weft_backend_open("opencl:0", 0, &b) == WEFT_OK);
    if (!b) return;
    enum { N = 300 };
    struct weft_buffer *buf[N] = {0};
    size_t size[N];
    uint8_t *tmp = malloc(8192);
    for (int i = 0; i < N; i++) {
        size[i] = 1 + (size_t)(i * 37) % 5000;
        CHECK(oi->buffer_alloc(b, size[i], &buf[i]) == WEFT_OK);
        memset(tmp, i & 0xff, size[i]);
        CHECK(buf[i] && oi->buffer_write(buf[i], 0, tmp, size[i]) == WEFT_OK);
    }
    for (int i = 0; i < N; i += 2) oi->buffer_free(buf[i]);
    for (int i = 0; i < N; i += 2) {  /* new ones: zero-filled */
        CHECK(oi->buffer_alloc(b, size[i], &buf[i]) == WEFT_OK);
        memset(tmp, 0xee, size[i]);
        CHECK(oi->buffer_read(buf[i], 0, tmp, size[i]) == WEFT_OK);
        bool zero = true;
        for (size_t k = 0; k < size[i]; k++) zero = zero && tmp[k] == 0;
        CHECK_MSG(zero, "buffer %d (%zu bytes) not zero-filled", i, size[i]);
    }
    for (int i = 1; i < N; i += 2) {  /* the old ones kept their bytes */
        CHECK(oi->buffer_read(buf[i], 0, tmp, size[i]) == WEFT_OK);
        bool same = true;
        for (size_t k = 0; k < size[i]; k++) same = same && tmp[k] == (uint8_t)(i & 0xff);
        CHECK_MSG(same, "buffer %d overwritten", i);
    }
    /* a copy between two sub-allocated buffers, and one within a buffer */
    CHECK(oi->buffer_copy(buf[2], 0, buf[1], 0, size[1] < size[2] ? size[1] : size[2]) == WEFT_OK);
    CHECK(oi->buffer_read(buf[2], 0, tmp, 1) == WEFT_OK && tmp[0] == 1);
    CHECK(oi->buffer_copy(buf[3], 0, buf[3], 1, 2) == WEFT_OK);
    CHECK(oi->buffer_copy(buf[3], 0, buf[3], 1, size[3]) == WEFT_ERR_INVALID_ARG);  /* past the end */
    for (int i = 0; i < N; i++) oi->buffer_free(buf[i]);
    /* a large buffer has its own memory; one past the device's limit is refused */
    struct weft_buffer *big = NULL;
    CHECK(oi->buffer_alloc(b, 3u << 20, &big) == WEFT_OK && big);
    CHECK(oi->buffer_write(big, (3u << 20) - 4, tmp, 4) == WEFT_OK);
    CHECK(oi->buffer_write(big, (3u << 20) - 3, tmp, 4) == WEFT_ERR_INVALID_ARG);
    oi->buffer_free(big);
    const uint64_t lim = weft_backend_max_buffer(b);
    CHECK(lim > 0 && lim < UINT64_MAX);
    CHECK(oi->buffer_alloc(b, (size_t)lim + 1, &big) == WEFT_ERR_NOMEM && big == NULL);
    free(tmp);
    weft_backend_close(b);
}

int main(void)
{
    check_env_reapply();
    oi = weft_backend_find("opencl");
    if (!oi) SKIP_ALL("the opencl backend is not built or not loadable: %s", weft_backend_unavailable("opencl"));
    const char *why = NULL;
    if (oi->devices(&info0, 1, &why) < 1) SKIP_ALL("no OpenCL device: %s", why ? why : "?");
    printf("opencl:0: %s\n", info0.name);
    RUN(no_platform_is_one_clear_line);
    RUN(device_is_described_and_options_checked);
    RUN(program_is_cached_and_a_bad_cache_file_replaced);
    RUN(bad_input_is_reported_at_sync_then_cleared);
    RUN(small_buffers_share_arenas_without_overlap);
    return check_summary();
}
