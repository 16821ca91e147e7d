/* The Vulkan backend's runtime: devices, buffers (zero-filled, write/read/
 * copy at odd sizes and offsets, through a mapping and through staging),
 * one run() of dependent ops (barriers), range errors, out of memory, and
 * WEFT_PROFILE. Runs with the validation layer on (WEFT_VK_VALIDATE=1): a
 * validation error fails the run/sync that follows it. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "base/quant.h"
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
                                    weft_view_2d(b, 0, WEFT_TYPE_F32, 25, 1), 0};
    CHECK(!bi->supports(be, &op));
    CHECK(bi->run(be, &op, 1) == WEFT_ERR_UNSUPPORTED);
    bi->buffer_free(b);
    bi->buffer_free(c);
}

static struct weft_op add_op(struct weft_buffer *a, struct weft_buffer *b, struct weft_buffer *o, int n)
{
    struct weft_op op = {.kind = WEFT_OP_ADD};
    op.u.add = (struct weft_op_add){weft_view_2d(a, 0, WEFT_TYPE_F32, n, 1), weft_view_2d(b, 0, WEFT_TYPE_F32, n, 1),
                                    weft_view_2d(o, 0, WEFT_TYPE_F32, n, 1), 0};
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

/* ---- ROPE_KV + ATTENTION: Vulkan against the CPU backend ---- */

enum { KV_NL = 2, KV_LAYER = 1, KV_NH = 8, KV_NKV = 2, KV_HD = 64, KV_NBLK = 24, KV_SEQ = 3 };
#define KV_ROWS (75 + 1 + 1)

struct kv_case {
    enum weft_type type;
    size_t cache_bytes;
    uint8_t *cache;                          /* initial cache image */
    float q[KV_ROWS * KV_NH * KV_HD], k[KV_ROWS * KV_NKV * KV_HD], v[KV_ROWS * KV_NKV * KV_HD];
    int32_t pos[KV_ROWS], seq[KV_ROWS], slot[KV_ROWS], bt_off[KV_SEQ], bt[KV_NBLK];
};

static float kv_rand(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return (float)((*s >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }

/* seq 0: 70 cached positions and a 75-row prefill chunk (tiles of 64 and
 * blocks of 16 crossed); seq 1: 5 cached + one decode row; seq 2: its first
 * token. Blocks are scattered through the cache. */
static void kv_case_init(struct kv_case *c, enum weft_type t)
{
    uint64_t s = 0x1234567ull;
    c->type = t;
    const size_t tok = weft_row_size(t, KV_NKV * KV_HD);
    c->cache_bytes = tok * WEFT_KV_BLOCK_TOKENS * 2 * KV_NL * KV_NBLK;
    c->cache = malloc(c->cache_bytes);
    float row[KV_NKV * KV_HD];
    for (size_t r = 0; r < c->cache_bytes / tok; r++) {
        for (int i = 0; i < KV_NKV * KV_HD; i++) row[i] = kv_rand(&s);
        weft_quantize_row(t, row, c->cache + r * tok, KV_NKV * KV_HD);
    }
    static const int32_t perm[KV_NBLK] = {17, 3, 9, 22, 0, 14, 6, 11, 20, 1, 8, 15, 5, 23, 2, 19, 12, 7, 21, 4, 16, 10, 18, 13};
    memcpy(c->bt, perm, sizeof perm);
    c->bt_off[0] = 0;   /* 145 positions: 10 blocks */
    c->bt_off[1] = 10;  /* 6 positions: 1 block */
    c->bt_off[2] = 11;
    int r = 0;
    for (int p = 70; p < 145; p++, r++) { c->pos[r] = p; c->seq[r] = 0; }
    c->pos[r] = 5; c->seq[r++] = 1;
    c->pos[r] = 0; c->seq[r++] = 2;
    for (r = 0; r < KV_ROWS; r++)
        c->slot[r] = c->bt[c->bt_off[c->seq[r]] + c->pos[r] / 16] * 16 + c->pos[r] % 16;
    for (int i = 0; i < KV_ROWS * KV_NH * KV_HD; i++) c->q[i] = kv_rand(&s);
    for (int i = 0; i < KV_ROWS * KV_NKV * KV_HD; i++) { c->k[i] = kv_rand(&s); c->v[i] = kv_rand(&s); }
}

/* Runs ROPE_KV then ATTENTION on `spec`; returns out and the cache after. */
static bool kv_run(const char *spec, const struct kv_case *c, int mode, float *out, uint8_t *cache_after)
{
    struct weft_backend *b = NULL;
    if (weft_backend_open(spec, 2, &b) != WEFT_OK) return false;
    const struct weft_backend_iface *f = b->iface;
    struct weft_buffer *bufs[10];
    const void *src[10] = {c->cache, c->q, c->k, c->v, NULL, c->pos, c->seq, c->slot, c->bt_off, c->bt};
    const size_t n[10] = {c->cache_bytes, sizeof c->q, sizeof c->k, sizeof c->v, sizeof c->q, sizeof c->pos,
                          sizeof c->seq, sizeof c->slot, sizeof c->bt_off, sizeof c->bt};
    bool ok = true;
    for (int i = 0; i < 10; i++) {
        ok &= f->buffer_alloc(b, n[i], &bufs[i]) == WEFT_OK;
        if (ok && src[i]) ok &= f->buffer_write(bufs[i], 0, src[i], n[i]) == WEFT_OK;
    }
    CHECK(ok);
    struct weft_kv_view kv = {bufs[0], c->type, KV_NL, KV_LAYER, KV_NKV, KV_HD, 0, false};
    struct weft_batch_view batch = {KV_ROWS, KV_SEQ, weft_view_2d(bufs[5], 0, WEFT_TYPE_I32, KV_ROWS, 1),
                                    weft_view_2d(bufs[6], 0, WEFT_TYPE_I32, KV_ROWS, 1),
                                    weft_view_2d(bufs[7], 0, WEFT_TYPE_I32, KV_ROWS, 1),
                                    weft_view_2d(bufs[8], 0, WEFT_TYPE_I32, KV_SEQ, 1),
                                    weft_view_2d(bufs[9], 0, WEFT_TYPE_I32, KV_NBLK, 1)};
    struct weft_op ops[2] = {{.kind = WEFT_OP_ROPE_KV}, {.kind = WEFT_OP_ATTENTION}};
    ops[0].u.rope_kv = (struct weft_op_rope_kv){
        .q = weft_view_2d(bufs[1], 0, WEFT_TYPE_F32, KV_NH * KV_HD, KV_ROWS),
        .k = weft_view_2d(bufs[2], 0, WEFT_TYPE_F32, KV_NKV * KV_HD, KV_ROWS),
        .v = weft_view_2d(bufs[3], 0, WEFT_TYPE_F32, KV_NKV * KV_HD, KV_ROWS), .kv = kv, .batch = batch,
        .n_head = KV_NH, .n_rot = 48, .freq_base = 10000.0f, .freq_scale = 0.5f, .mode = (enum weft_rope_mode)mode};
    ops[1].u.attention = (struct weft_op_attention){
        .q = weft_view_2d(bufs[1], 0, WEFT_TYPE_F32, KV_NH * KV_HD, KV_ROWS),
        .out = weft_view_2d(bufs[4], 0, WEFT_TYPE_F32, KV_NH * KV_HD, KV_ROWS), .kv = kv, .batch = batch,
        .n_head = KV_NH, .scale = 0.125f};
    CHECK_MSG(f->supports(b, &ops[0]) && f->supports(b, &ops[1]), "%s: kv %s", spec, weft_type_name(c->type));
    CHECK(f->run(b, ops, 2) == WEFT_OK && f->sync(b) == WEFT_OK);
    CHECK(f->buffer_read(bufs[4], 0, out, sizeof c->q) == WEFT_OK);
    CHECK(f->buffer_read(bufs[0], 0, cache_after, c->cache_bytes) == WEFT_OK);
    for (int i = 0; i < 10; i++) f->buffer_free(bufs[i]);
    weft_backend_close(b);
    return true;
}

static void rope_and_attention_match_the_cpu_for_f16_and_q8_0_caches(void)
{
    static struct kv_case c;
    static float o_cpu[KV_ROWS * KV_NH * KV_HD], o_vk[KV_ROWS * KV_NH * KV_HD];
    const enum weft_type types[2] = {WEFT_TYPE_F16, WEFT_TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++)
        for (int mode = 0; mode < 2; mode++) {
            kv_case_init(&c, types[ti]);
            uint8_t *c_cpu = malloc(c.cache_bytes), *c_vk = malloc(c.cache_bytes);
            CHECK(kv_run("cpu", &c, mode, o_cpu, c_cpu));
            CHECK(kv_run("vulkan:0", &c, mode, o_vk, c_vk));
            double e = 0, s2 = 0;
            for (size_t i = 0; i < sizeof o_cpu / sizeof o_cpu[0]; i++) {
                e += (o_vk[i] - o_cpu[i]) * (double)(o_vk[i] - o_cpu[i]);
                s2 += (double)o_cpu[i] * o_cpu[i];
            }
            printf("  kv %s %s rope: attention nmse vs cpu %.3g\n", weft_type_name(c.type), mode ? "neox" : "normal",
                   e / s2);
            CHECK_MSG(e / s2 < (c.type == WEFT_TYPE_F16 ? 1e-5 : 1e-6), "kv %s mode %d: nmse %.3g", weft_type_name(c.type), mode, e / s2);
            /* caches: every token row dequantized, within one quantum of the CPU's */
            const int64_t nrow = KV_NKV * KV_HD;
            const size_t tok = weft_row_size(c.type, nrow);
            float ra[KV_NKV * KV_HD], rb[KV_NKV * KV_HD];
            size_t bad = 0;
            for (size_t r = 0; r < c.cache_bytes / tok; r++) {
                weft_dequantize_row(c.type, c_cpu + r * tok, ra, nrow);
                weft_dequantize_row(c.type, c_vk + r * tok, rb, nrow);
                for (int64_t i = 0; i < nrow; i++) bad += fabsf(ra[i] - rb[i]) > (c.type == WEFT_TYPE_F16 ? 2e-3f : 2e-2f);
            }
            CHECK_MSG(bad == 0, "kv %s: %zu cache values differ from the cpu's", weft_type_name(c.type), bad);
            free(c_cpu);
            free(c_vk);
            free(c.cache);
        }
}

/* WEFT_VK_VALIDATE without the layer: open fails and says why. */
static void validation_requested_without_the_layer_fails_open(void)
{
    const char *old = getenv("VK_LAYER_PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("VK_LAYER_PATH", "/nonexistent-weft-layers", 1);
    struct weft_backend *b = NULL;
    CHECK(weft_backend_open("vulkan:0", 0, &b) == WEFT_ERR_DEVICE && b == NULL);
    CHECK(strstr(weft_last_error(), "VK_LAYER_KHRONOS_validation") != NULL);
    if (saved) setenv("VK_LAYER_PATH", saved, 1);
    else unsetenv("VK_LAYER_PATH");
    free(saved);
    weft_backend_close(b);
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
    check_env_reapply();
    CHECK(weft_backend_open("vulkan:0", 0, &be) == WEFT_OK);
    unsetenv("WEFT_PROFILE");
    check_env_reapply();
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
    check_env_reapply();
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
    check_env_reapply();
    CHECK(weft_backend_open("vulkan:0", 0, &be) == WEFT_OK);
    unsetenv("WEFT_VK_NO_UNIFIED");
    check_env_reapply();
    if (be) {
        printf("vulkan:0 with staging\n");
        each_case();
        weft_backend_close(be);
    }
    RUN(rope_and_attention_match_the_cpu_for_f16_and_q8_0_caches);
    setenv("WEFT_VK_NO_SUBGROUP", "1", 1);  /* the shared-memory reductions */
    check_env_reapply();
    RUN(rope_and_attention_match_the_cpu_for_f16_and_q8_0_caches);
    unsetenv("WEFT_VK_NO_SUBGROUP");
    check_env_reapply();
    RUN(profile_table_does_not_crash);
    if (strcmp(getenv("WEFT_VK_VALIDATE"), "0") != 0) RUN(validation_requested_without_the_layer_fails_open);
    return check_summary();
}
