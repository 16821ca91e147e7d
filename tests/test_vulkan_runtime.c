/* The Vulkan backend's runtime: devices, buffers (zero-filled, write/read/
 * copy at odd sizes and offsets, through a mapping and through staging),
 * one run() of dependent ops (barriers), range errors, out of memory, and
 * WEFT_PROFILE. Runs with the validation layer on (WEFT_VK_VALIDATE=1): a
 * validation error fails the run/sync that follows it. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "tests/check.h"

static const struct weft_backend_iface *bi;
static struct weft_backend *be;

static struct weft_buffer *alloc(size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(bi->buffer_alloc(be, n, &b) == WEFT_OK);
    return b;
}

static void devices_are_listed(void)
{
    struct weft_device_info info[8];
    const char *why = NULL;
    int n = bi->devices(info, 8, &why);
    CHECK(n >= 1);
    for (int i = 0; i < n && i < 8; i++) {
        printf("  %s: %s, %.1f GiB\n", info[i].id, info[i].name, info[i].mem_total / 1073741824.0);
        CHECK(info[i].name[0] != 0);
        CHECK(strncmp(info[i].id, "vulkan:", 7) == 0);
        CHECK(info[i].mem_total > 0);
    }
    struct weft_backend *none = NULL;
    CHECK(weft_backend_open("vulkan:99", 0, &none) == WEFT_ERR_NO_DEVICE && none == NULL);
}

static void buffers_round_trip_at_odd_sizes_and_offsets(void)
{
    static const size_t sizes[] = {1, 3, 17, 4097, (1u << 20) + 5, (20u << 20) + 3};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        struct weft_buffer *a = alloc(n), *b = alloc(n + 7);
        if (!a || !b) return;
        unsigned char *src = malloc(n + 7), *dst = malloc(n + 7);
        /* zero-filled */
        memset(dst, 0xab, n + 7);
        CHECK(bi->buffer_read(b, 0, dst, n + 7) == WEFT_OK);
        size_t nz = 0;
        for (size_t i = 0; i < n + 7; i++) nz += dst[i] != 0;
        CHECK_MSG(nz == 0, "%zu of %zu bytes not zero", nz, n + 7);
        for (size_t i = 0; i < n + 7; i++) src[i] = (unsigned char)(i * 131 + 7);
        CHECK(bi->buffer_write(a, 0, src, n) == WEFT_OK);
        CHECK(bi->buffer_read(a, 0, dst, n) == WEFT_OK);
        CHECK(memcmp(src, dst, n) == 0);
        /* odd offset write, then read pieces */
        size_t off = n / 3, len = n - off;
        CHECK(bi->buffer_write(b, off + 3, src + 1, len) == WEFT_OK);
        memset(dst, 0, n + 7);
        CHECK(bi->buffer_read(b, off + 3, dst, len) == WEFT_OK);
        CHECK(memcmp(dst, src + 1, len) == 0);
        /* copy a's tail into b at an odd offset; bytes around it unchanged */
        size_t cl = n > 2 ? n - 2 : 1;
        CHECK(bi->buffer_copy(b, 5, a, n - cl, cl) == WEFT_OK);
        unsigned char *all = malloc(n + 7);
        CHECK(bi->buffer_read(b, 0, all, n + 7) == WEFT_OK);
        CHECK(memcmp(all + 5, src + (n - cl), cl) == 0);
        CHECK(all[0] == 0 && all[2] == 0); /* before both writes */
        /* overlapping copy inside one buffer behaves as memmove */
        if (n >= 17) {
            CHECK(bi->buffer_write(a, 0, src, n) == WEFT_OK);
            CHECK(bi->buffer_copy(a, 3, a, 0, n - 3) == WEFT_OK);
            CHECK(bi->buffer_read(a, 0, dst, n) == WEFT_OK);
            CHECK(memcmp(dst, src, 3) == 0 && memcmp(dst + 3, src, n - 3) == 0);
        }
        free(all);
        free(src);
        free(dst);
        bi->buffer_free(a);
        bi->buffer_free(b);
    }
}

static void out_of_range_access_is_refused(void)
{
    struct weft_buffer *b = alloc(100), *c = alloc(50);
    char tmp[256] = {0};
    CHECK(bi->buffer_write(b, 90, tmp, 11) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_write(b, 101, tmp, 0) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_read(b, 0, tmp, 101) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_read(b, (size_t)-1, tmp, 2) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_copy(c, 0, b, 0, 51) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_copy(c, 10, b, 60, 41) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_read(b, 0, tmp, 100) == WEFT_OK);
    CHECK(bi->buffer_read(b, 100, tmp, 0) == WEFT_OK);
    /* an op whose view reaches past its buffer is not supported, and run refuses it */
    struct weft_op op = {.kind = WEFT_OP_ADD};
    op.u.add = (struct weft_op_add){weft_view_2d(b, 0, WEFT_TYPE_F32, 25, 1), weft_view_2d(c, 0, WEFT_TYPE_F32, 25, 1),
                                    weft_view_2d(b, 0, WEFT_TYPE_F32, 25, 1)};
    CHECK(!bi->supports(be, &op));
    CHECK(bi->run(be, &op, 1) == WEFT_ERR_UNSUPPORTED);
    bi->buffer_free(b);
    bi->buffer_free(c);
}

static struct weft_op add_op(struct weft_buffer *a, struct weft_buffer *b, struct weft_buffer *o, int n)
{
    struct weft_op op = {.kind = WEFT_OP_ADD};
    op.u.add = (struct weft_op_add){weft_view_2d(a, 0, WEFT_TYPE_F32, n, 1), weft_view_2d(b, 0, WEFT_TYPE_F32, n, 1),
                                    weft_view_2d(o, 0, WEFT_TYPE_F32, n, 1)};
    return op;
}

/* Each op reads what the one before wrote (RAW), overwrites what an
 * earlier op read (WAR) or wrote (WAW), with COPY (a transfer) between
 * dispatches: wrong barriers give wrong sums on a parallel device. */
static void dependent_ops_in_one_run_see_each_others_results(void)
{
    enum { N = 3000 };
    static float x[N], y[N], got[N], want[N];
    for (int i = 0; i < N; i++) { x[i] = (float)(i % 97); y[i] = 1.0f; }
    struct weft_buffer *bx = alloc(sizeof x), *by = alloc(sizeof y), *bz = alloc(sizeof x), *bw = alloc(sizeof x);
    CHECK(bi->buffer_write(bx, 0, x, sizeof x) == WEFT_OK);
    CHECK(bi->buffer_write(by, 0, y, sizeof y) == WEFT_OK);
    struct weft_op ops[16];
    int n = 0;
    ops[n++] = add_op(bx, by, bz, N);              /* z = x + 1         RAW source for next */
    for (int k = 0; k < 6; k++) ops[n++] = add_op(bz, bz, bz, N);  /* z *= 2, in place, 6 times */
    ops[n++] = add_op(bz, bx, by, N);              /* y = z + x         (WAR on y vs op 0) */
    ops[n++] = (struct weft_op){.kind = WEFT_OP_COPY,
                                .u.copy = {.src = by, .dst = bw, .src_off = 0, .dst_off = 0, .bytes = sizeof x}};
    ops[n++] = add_op(bw, by, bx, N);              /* x = w + y = 2y    (after a transfer) */
    ops[n++] = (struct weft_op){.kind = WEFT_OP_COPY,  /* shift x by one float, in place */
                                .u.copy = {.src = bx, .dst = bx, .src_off = 0, .dst_off = 4, .bytes = sizeof x - 4}};
    CHECK(bi->run(be, ops, (size_t)n) == WEFT_OK);
    CHECK(bi->sync(be) == WEFT_OK);
    CHECK(bi->buffer_read(bx, 0, got, sizeof got) == WEFT_OK);
    for (int i = 0; i < N; i++) {
        float z = (x[i] + 1.0f) * 64.0f, yy = z + x[i];
        want[i] = 2.0f * yy;
    }
    int bad = 0;
    if (got[0] != want[0]) bad++;
    for (int i = 1; i < N; i++) bad += got[i] != want[i - 1];
    CHECK_MSG(bad == 0, "%d of %d values wrong (got[5] %g want %g)", bad, N, got[5], want[4]);
    /* two runs back to back without sync, then read */
    ops[0] = add_op(bx, bx, by, N);
    CHECK(bi->run(be, ops, 1) == WEFT_OK);
    ops[0] = add_op(by, by, bz, N);
    CHECK(bi->run(be, ops, 1) == WEFT_OK);
    CHECK(bi->buffer_read(bz, 0, got, sizeof got) == WEFT_OK);
    CHECK(got[1] == 4.0f * want[0]);
    CHECK(bi->sync(be) == WEFT_OK);
    bi->buffer_free(bx); bi->buffer_free(by); bi->buffer_free(bz); bi->buffer_free(bw);
}

static void impossible_allocation_is_nomem_and_device_still_works(void)
{
    struct weft_buffer *huge = NULL;
    CHECK(bi->buffer_alloc(be, (size_t)1 << 40, &huge) == WEFT_ERR_NOMEM);
    CHECK(huge == NULL);
    CHECK(bi->buffer_alloc(be, (size_t)-1 / 2, &huge) == WEFT_ERR_NOMEM);
    struct weft_buffer *a = alloc(64);
    float v[16], got[16];
    for (int i = 0; i < 16; i++) v[i] = (float)i;
    CHECK(bi->buffer_write(a, 0, v, sizeof v) == WEFT_OK);
    struct weft_op op = add_op(a, a, a, 16);
    CHECK(bi->run(be, &op, 1) == WEFT_OK && bi->sync(be) == WEFT_OK);
    CHECK(bi->buffer_read(a, 0, got, sizeof got) == WEFT_OK);
    CHECK(got[15] == 30.0f);
    bi->buffer_free(a);
}

static void each_case(void)
{
    RUN(buffers_round_trip_at_odd_sizes_and_offsets);
    RUN(out_of_range_access_is_refused);
    RUN(dependent_ops_in_one_run_see_each_others_results);
    RUN(impossible_allocation_is_nomem_and_device_still_works);
}

static void profile_table_does_not_crash(void)
{
    setenv("WEFT_PROFILE", "1", 1);
    CHECK(weft_backend_open("vulkan:0", 0, &be) == WEFT_OK);
    unsetenv("WEFT_PROFILE");
    if (!be) return;
    struct weft_buffer *a = alloc(4096);
    struct weft_op ops[3] = {add_op(a, a, a, 1024), add_op(a, a, a, 1024),
                             {.kind = WEFT_OP_COPY, .u.copy = {.src = a, .dst = a, .dst_off = 2048, .bytes = 2048}}};
    for (int i = 0; i < 3; i++) CHECK(bi->run(be, ops, 3) == WEFT_OK);
    CHECK(bi->sync(be) == WEFT_OK);
    bi->buffer_free(a);
    weft_backend_close(be);
    be = NULL;
}

int main(void)
{
    const char *v = getenv("WEFT_VK_VALIDATE");
    if (!v || !*v) setenv("WEFT_VK_VALIDATE", "1", 1);
    bi = weft_backend_find("vulkan");
    if (!bi) SKIP_ALL("no Vulkan backend: %s", weft_backend_unavailable("vulkan"));
    struct weft_device_info info[8];
    const char *why = NULL;
    if (bi->devices(info, 8, &why) < 1) SKIP_ALL("no Vulkan device: %s", why ? why : "?");
    RUN(devices_are_listed);
    if (weft_backend_open("vulkan:0", 0, &be) != WEFT_OK) {
        printf("cannot open vulkan:0: %s\n", weft_last_error());
        return 1;
    }
    printf("vulkan:0 (%s)\n", info[0].name);
    each_case();
    weft_backend_close(be);
    /* again with device memory reached through staging buffers */
    setenv("WEFT_VK_NO_UNIFIED", "1", 1);
    CHECK(weft_backend_open("vulkan:0", 0, &be) == WEFT_OK);
    unsetenv("WEFT_VK_NO_UNIFIED");
    if (be) {
        printf("vulkan:0 with staging\n");
        each_case();
        weft_backend_close(be);
    }
    RUN(profile_table_does_not_crash);
    return check_summary();
}
