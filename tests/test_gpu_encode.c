/* The GPU backends' shared op encoder (backends/gpu/gpu_encode.c) over fake
 * launchers that record their arguments: pins, without a GPU, what every op
 * hands the kernels of kernels-common/launch.h (device addresses from views,
 * strides in elements, the stream, scratch, LOGITS' split of scratch between
 * the normalised rows and the matmul, ROPE's theta scale as the CPU's powf,
 * the KV cache description, attention splits from the hooks) and that COPY
 * goes through the runtime's copy hook and an unknown op is the runtime's
 * invalid-value code. */
#include <math.h>
#include <string.h>

#include "backends/gpu/gpu_common.c"
#include "backends/gpu/gpu_encode.c"
#include "tests/check.h"

static uint8_t mem[1 << 16];
static struct weft_gpu gpu;
static struct weft_buffer buf, kvbuf;
static uint8_t kvmem[4096];
static void *const STREAM = (void *)0x5eed;

/* ---- fake launchers: the last call's arguments ---- */
static char last[32];
static struct weft_gk_mm last_mm;
static void *last_scratch, *last_stream;
static struct weft_gk_kv last_kv;
static struct weft_gk_attn_args last_attn;
static int last_splits, n_calls;
static float last_theta;
static int last_neox;
static const int32_t *last_rows;
static const float *last_x, *last_add;
static float *last_out;
static int64_t last_R, last_K;
static size_t last_x_ld, last_out_ld;

static int called(const char *what, void *stream)
{
    snprintf(last, sizeof last, "%s", what);
    last_stream = stream;
    n_calls++;
    return 0;
}

size_t weft_gk_matmul_scratch(int wt, int64_t K, int64_t R) { return 0; }
int weft_gk_matmul_type_ok(int wt) { return 1; }
int weft_gk_matmul(const struct weft_gk_mm *m, void *scratch, void *stream)
{
    last_mm = *m;
    last_scratch = scratch;
    return called("matmul", stream);
}
int weft_gk_gemm(const struct weft_gk_mm *m, void *stream) { return called("gemm", stream); }
int weft_gk_embed(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids, int64_t R,
                  float *out, size_t out_ld, int *err, void *stream)
{
    last_R = R;
    last_K = E;
    last_out = out;
    last_out_ld = out_ld;
    return called("embed", stream);
}
int weft_gk_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows, const float *add,
                    size_t add_ld, float *sum, size_t sum_ld, const float *w, float *out, size_t out_ld, int64_t R,
                    int64_t K, float eps, int *err, void *stream)
{
    last_x = x;
    last_x_ld = x_ld;
    last_rows = rows;
    last_add = add;
    last_out = out;
    last_out_ld = out_ld;
    last_R = R;
    last_K = K;
    return called("rmsnorm", stream);
}
int weft_gk_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld, int64_t R,
                     int64_t K, void *stream)
{
    return called("silu_mul", stream);
}
int weft_gk_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld, int64_t R,
                int64_t K, void *stream)
{
    return called("add", stream);
}
int weft_gk_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld, const int32_t *pos,
                    const int32_t *slot, int64_t R, int n_head, int n_rot, float theta_scale, float freq_scale,
                    int neox, const struct weft_gk_kv *kv, void *stream)
{
    last_theta = theta_scale;
    last_neox = neox;
    last_kv = *kv;
    last_R = R;
    return called("rope_kv", stream);
}
int weft_gk_attn_splits(int64_t n_rows, int n_head, int n_mp) { return n_mp / 2; }
size_t weft_gk_attention_scratch(int64_t n_rows, int n_head, int hd, int n_split) { return 0; }
int weft_gk_attention(const struct weft_gk_attn_args *a, int n_split, void *scratch, void *stream)
{
    last_attn = *a;
    last_splits = n_split;
    last_scratch = scratch;
    return called("attention", stream);
}

/* ---- the runtime's side ---- */
static void *copy_dst;
static const void *copy_src;
static size_t copy_n;
static int f_copy(struct weft_gpu *g, void *dst, const void *src, size_t n)
{
    copy_dst = dst;
    copy_src = src;
    copy_n = n;
    return called("copy", g->stream);
}

static const struct weft_gpu_hooks hooks = {
    .name = "fake", .err_invalid = 11, .attn_splits = weft_gk_attn_splits, .copy = f_copy,
};

/* batch metadata views, all in buf (pos at 20000, seq 20100, slot 20200, bt_off 20300, bt 20400) */
static struct weft_batch_view batch(uint32_t n_rows)
{
    struct weft_batch_view b = {.n_rows = n_rows, .n_seq = 1};
    b.pos = weft_view_2d(&buf, 20000, WEFT_TYPE_I32, n_rows, 1);
    b.seq = weft_view_2d(&buf, 20100, WEFT_TYPE_I32, n_rows, 1);
    b.slot = weft_view_2d(&buf, 20200, WEFT_TYPE_I32, n_rows, 1);
    b.bt_off = weft_view_2d(&buf, 20300, WEFT_TYPE_I32, 1, 1);
    b.bt = weft_view_2d(&buf, 20400, WEFT_TYPE_I32, 4, 1);
    return b;
}

static void reset(void)
{
    memset(&gpu, 0, sizeof gpu);
    gpu.hooks = &hooks;
    gpu.stream = STREAM;
    gpu.n_mp = 12;
    gpu.scratch = mem + 32768;
    gpu.err_dev = (int *)(mem + 60000);
    buf = (struct weft_buffer){&gpu, mem, 32768, 1};
    kvbuf = (struct weft_buffer){&gpu, kvmem, sizeof kvmem, 2};
    last[0] = 0;
    n_calls = 0;
}

static void matmul_views_become_addresses_and_element_strides(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_MATMUL};
    op.u.matmul.x = weft_view_2d(&buf, 64, WEFT_TYPE_F32, 32, 3);
    op.u.matmul.w = weft_view_2d(&buf, 1024, WEFT_TYPE_Q8_0, 32, 5);
    op.u.matmul.out = weft_view_2d(&buf, 4096, WEFT_TYPE_F32, 5, 3);
    op.u.matmul.out.nb1 = 64;   /* rows 16 floats apart */
    op.u.matmul.add = op.u.matmul.out;
    op.u.matmul.has_add = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "matmul"));
    CHECK(last_stream == STREAM);
    CHECK(last_scratch == gpu.scratch);
    CHECK_EQ_INT(last_mm.wt, WEFT_TYPE_Q8_0);
    CHECK(last_mm.w == mem + 1024 && last_mm.x == (const float *)(mem + 64) && last_mm.out == (float *)(mem + 4096));
    CHECK_EQ_INT(last_mm.w_nb1, 34);
    CHECK_EQ_INT(last_mm.K, 32);
    CHECK_EQ_INT(last_mm.N, 5);
    CHECK_EQ_INT(last_mm.R, 3);
    CHECK_EQ_INT(last_mm.x_ld, 32);
    CHECK_EQ_INT(last_mm.out_ld, 16);
    CHECK(last_mm.add == (const float *)(mem + 4096) && last_mm.add_ld == 16);
    op.u.matmul.has_add = false;
    weft_gpu_encode(&gpu, &op);
    CHECK(last_mm.add == NULL && last_mm.add_ld == 0);
}

static void logits_norm_into_scratch_then_matmul_after_it(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_LOGITS};
    struct weft_op_logits *o = &op.u.logits;
    o->x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 4);
    o->rows = weft_view_2d(&buf, 2048, WEFT_TYPE_I32, 3, 1);
    o->norm_w = weft_view_2d(&buf, 4096, WEFT_TYPE_F32, 64, 1);
    o->w = weft_view_2d(&buf, 8192, WEFT_TYPE_F16, 64, 10);
    o->out = weft_view_2d(&buf, 16384, WEFT_TYPE_F32, 10, 3);
    o->eps = 1e-5f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK_EQ_INT(n_calls, 2);
    CHECK(!strcmp(last, "matmul"));
    /* the rmsnorm gathered rows into scratch, K floats apart */
    CHECK(last_rows == (const int32_t *)(mem + 2048));
    CHECK(last_mm.x == (const float *)gpu.scratch && last_mm.x_ld == 64);
    CHECK_EQ_INT(last_mm.R, 3);
    CHECK_EQ_INT(last_mm.N, 10);
    CHECK(last_mm.add == NULL);
    /* the matmul's own scratch after the normalised rows, 256-aligned */
    CHECK(last_scratch == gpu.scratch + weft_gpu_align256(3 * 64 * sizeof(float)));
}

static void rope_theta_as_the_cpu_and_kv_description(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 2);
    o->k = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 32, 2);
    o->v = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 32, 2);
    o->kv = (struct weft_kv_view){&kvbuf, WEFT_TYPE_Q8_0, 6, 4, 1, 32};
    o->batch = batch(2);
    o->n_head = 2;
    o->n_rot = 32;
    o->freq_base = 10000.0f;
    o->freq_scale = 1.0f;
    o->mode = WEFT_ROPE_NEOX;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "rope_kv"));
    CHECK(last_theta == powf(10000.0f, -2.0f / 32.0f));
    CHECK_EQ_INT(last_neox, 1);
    CHECK(last_kv.base == kvmem);
    CHECK_EQ_INT(last_kv.type, WEFT_TYPE_Q8_0);
    CHECK_EQ_INT(last_kv.n_layer, 6);
    CHECK_EQ_INT(last_kv.layer, 4);
    CHECK_EQ_INT(last_kv.n_kv, 1);
    CHECK_EQ_INT(last_kv.hd, 32);
    CHECK_EQ_INT(last_R, 2);
}

static void attention_splits_from_the_hooks(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ATTENTION};
    struct weft_op_attention *o = &op.u.attention;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 3);
    o->out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 64, 3);
    o->kv = (struct weft_kv_view){&kvbuf, WEFT_TYPE_F16, 2, 1, 1, 32};
    o->batch = batch(3);
    o->n_head = 2;
    o->scale = 0.25f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "attention"));
    CHECK_EQ_INT(last_splits, 6);   /* the fake's n_mp / 2 */
    CHECK(last_scratch == gpu.scratch);
    CHECK_EQ_INT(last_attn.n_rows, 3);
    CHECK_EQ_INT(last_attn.n_head, 2);
    CHECK(last_attn.scale == 0.25f);
    CHECK(last_attn.q_ld == 64 && last_attn.out == (float *)(mem + 1024));
    CHECK(last_attn.kv.base == kvmem && last_attn.kv.type == WEFT_TYPE_F16);
    CHECK(last_attn.pos == (const int32_t *)(mem + 20000) && last_attn.seq == (const int32_t *)(mem + 20100));
    CHECK(last_attn.bt_off == (const int32_t *)(mem + 20300) && last_attn.bt == (const int32_t *)(mem + 20400));
}

static void copy_through_the_hook_and_unknown_ops(void)
{
    reset();
    struct weft_op cp = {.kind = WEFT_OP_COPY, .u.copy = {&buf, &kvbuf, 100, 200, 300}};
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &cp), 0);
    CHECK(!strcmp(last, "copy"));
    CHECK(copy_dst == kvmem + 200 && copy_src == mem + 100 && copy_n == 300);
    CHECK(last_stream == STREAM);
    cp.u.copy.bytes = 0;   /* nothing to enqueue */
    n_calls = 0;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &cp), 0);
    CHECK_EQ_INT(n_calls, 0);
    struct weft_op bad = {.kind = (enum weft_op_kind)99};
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &bad), 11);
}

static void embed_and_rmsnorm_fused_add(void)
{
    reset();
    struct weft_op e = {.kind = WEFT_OP_EMBED};
    e.u.embed.table = weft_view_2d(&buf, 0, WEFT_TYPE_Q4_0, 64, 10);
    e.u.embed.ids = weft_view_2d(&buf, 4096, WEFT_TYPE_I32, 3, 1);
    e.u.embed.out = weft_view_2d(&buf, 8192, WEFT_TYPE_F32, 64, 3);
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &e), 0);
    CHECK(!strcmp(last, "embed"));
    CHECK_EQ_INT(last_R, 3);
    CHECK_EQ_INT(last_K, 64);
    CHECK(last_out == (float *)(mem + 8192) && last_out_ld == 64);
    struct weft_op r = {.kind = WEFT_OP_RMSNORM};
    r.u.rmsnorm.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 2);
    r.u.rmsnorm.add = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 64, 2);
    r.u.rmsnorm.sum = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 64, 2);
    r.u.rmsnorm.w = weft_view_2d(&buf, 3072, WEFT_TYPE_F32, 64, 1);
    r.u.rmsnorm.out = weft_view_2d(&buf, 4096, WEFT_TYPE_F32, 64, 2);
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &r), 0);
    CHECK(last_add == NULL && last_rows == NULL);
    r.u.rmsnorm.has_add = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &r), 0);
    CHECK(last_add == (const float *)(mem + 1024));
    CHECK_EQ_INT(last_R, 2);
    CHECK_EQ_INT(last_K, 64);
}

int main(void)
{
    RUN(matmul_views_become_addresses_and_element_strides);
    RUN(logits_norm_into_scratch_then_matmul_after_it);
    RUN(rope_theta_as_the_cpu_and_kv_description);
    RUN(attention_splits_from_the_hooks);
    RUN(copy_through_the_hook_and_unknown_ops);
    RUN(embed_and_rmsnorm_fused_add);
    return check_summary();
}
