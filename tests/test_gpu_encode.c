/* The GPU backends' shared op encoder (backends/gpu/gpu_encode.c) over fake
 * launchers that record their arguments: pins, without a GPU, what every op
 * hands the kernels of kernels-common/launch.h (device addresses from views,
 * strides in elements, the stream, scratch, LOGITS' split of scratch between
 * the normalised rows and the matmul, ROPE's theta scale as the CPU's powf,
 * the KV cache description, attention splits from the hooks) and that COPY
 * goes through the runtime's copy hook and an unknown op is the runtime's
 * invalid-value code. api 5's fields: MATMUL's bias address (NULL without
 * has_bias and for LOGITS), ATTENTION's window, ROPE_KV's scaling (the
 * freq_factors address only with has_freq_factors, YaRN's mix and ramp, the
 * magnitude as base/rope.h forms it), and SILU_MUL's act / EMBED's scale
 * through the glu / embed_scaled hooks (the plain launchers at zero; the
 * invalid-value code when a runtime has no such hook). api 10's: ADD's scale
 * through add_scaled, ROPE_KV's q_only through rope_q (q, the head dim and the
 * full op's angles; k and v not looked at), MOE_ROUTE's expert_scale address
 * (NULL without has_expert_scale); the invalid-value code without the hooks. */
#include <math.h>
#include <string.h>

#include "backends/gpu/gpu_common.c"
#include "backends/gpu/gpu_encode.c"
#include "base/rope.h"
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
static float last_theta, last_freq_scale;
static int last_neox;
static struct weft_gk_rope_ext last_ext;
static bool last_ext_null;
static int last_act;
static float last_scale;
static const float *last_g, *last_u;
static size_t last_g_ld, last_u_ld;
static const int32_t *last_ids;
static const uint8_t *last_table;
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
    last_table = table;
    last_ids = ids;
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
static void record_glu(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld, int64_t R,
                       int64_t K)
{
    last_g = g;
    last_g_ld = g_ld;
    last_u = u;
    last_u_ld = u_ld;
    last_out = out;
    last_out_ld = out_ld;
    last_R = R;
    last_K = K;
}
int weft_gk_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld, int64_t R,
                     int64_t K, void *stream)
{
    record_glu(g, g_ld, u, u_ld, out, out_ld, R, K);
    return called("silu_mul", stream);
}
int weft_gk_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld, int64_t R,
                int64_t K, void *stream)
{
    return called("add", stream);
}
static float last_softcap;
int weft_gk_softcap(float *x, size_t ld, int64_t R, int64_t K, float cap, void *stream)
{
    last_softcap = cap;
    return called("softcap", stream);
}
int weft_gk_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld, const int32_t *pos,
                    const int32_t *slot, int64_t R, int n_head, int n_rot, float theta_scale, float freq_scale,
                    int neox, const struct weft_gk_rope_ext *ext, const struct weft_gk_kv *kv, void *stream)
{
    last_theta = theta_scale;
    last_freq_scale = freq_scale;
    last_ext_null = ext == NULL;
    if (ext) last_ext = *ext;
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

/* the hooks of api 5's launchers (gpu_common.h: glu, embed_scaled) */
static int f_glu(int act, const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                 int64_t R, int64_t K, void *stream)
{
    last_act = act;
    record_glu(g, g_ld, u, u_ld, out, out_ld, R, K);
    return called("glu", stream);
}
static int f_embed_scaled(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                          int64_t R, float scale, float *out, size_t out_ld, int *err, void *stream)
{
    last_scale = scale;
    last_table = table;
    last_ids = ids;
    last_R = R;
    last_K = E;
    last_out = out;
    last_out_ld = out_ld;
    return called("embed_scaled", stream);
}

/* the hooks of api 10's launchers (gpu_common.h: add_scaled, rope_q; MOE_ROUTE through moe_route) */
static const float *last_a, *last_b;
static size_t last_a_ld, last_b_ld;
static int f_add_scaled(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                        int64_t R, int64_t K, float scale, void *stream)
{
    last_a = a;
    last_a_ld = a_ld;
    last_b = b;
    last_b_ld = b_ld;
    last_out = out;
    last_out_ld = out_ld;
    last_R = R;
    last_K = K;
    last_scale = scale;
    return called("add_scaled", stream);
}
static float *last_q;
static size_t last_q_ld;
static const int32_t *last_pos;
static int last_n_head, last_hd, last_n_rot;
static int f_rope_q(float *q, size_t q_ld, const int32_t *pos, int64_t R, int n_head, int hd, int n_rot,
                    float theta_scale, float freq_scale, int neox, const struct weft_gk_rope_ext *ext, void *stream)
{
    last_q = q;
    last_q_ld = q_ld;
    last_pos = pos;
    last_R = R;
    last_n_head = n_head;
    last_hd = hd;
    last_n_rot = n_rot;
    last_theta = theta_scale;
    last_freq_scale = freq_scale;
    last_neox = neox;
    last_ext_null = ext == NULL;
    if (ext) last_ext = *ext;
    return called("rope_q", stream);
}
static struct weft_gk_moe_route last_route;
static int f_moe_route(const struct weft_gk_moe_route *a, void *stream)
{
    last_route = *a;
    return called("moe_route", stream);
}

static const struct weft_gpu_hooks hooks = {
    .name = "fake", .err_invalid = 11, .attn_splits = weft_gk_attn_splits, .copy = f_copy,
    .glu = f_glu, .embed_scaled = f_embed_scaled, .moe_route = f_moe_route,
    .add_scaled = f_add_scaled, .rope_q = f_rope_q,
};
/* a runtime without api 5's (and 7's, 10's) optional launchers */
static const struct weft_gpu_hooks bare_hooks = {
    .name = "bare", .err_invalid = 12, .attn_splits = weft_gk_attn_splits, .copy = f_copy,
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
    last_act = -1;
    last_scale = -1.0f;
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
    CHECK(last_mm.bias == NULL);
}

static void matmul_bias_address_only_with_has_bias(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_MATMUL};
    op.u.matmul.x = weft_view_2d(&buf, 64, WEFT_TYPE_F32, 32, 3);
    op.u.matmul.w = weft_view_2d(&buf, 1024, WEFT_TYPE_Q8_0, 32, 5);
    op.u.matmul.out = weft_view_2d(&buf, 4096, WEFT_TYPE_F32, 5, 3);
    op.u.matmul.bias = weft_view_2d(&buf, 8196, WEFT_TYPE_F32, 5, 1);   /* a set view, has_bias false */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "matmul"));
    CHECK(last_mm.bias == NULL);
    op.u.matmul.has_bias = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_mm.bias == (const float *)(mem + 8196));
    CHECK(last_mm.add == NULL);   /* the bias is not the residual */
    op.u.matmul.add = op.u.matmul.out;
    op.u.matmul.has_add = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_mm.bias == (const float *)(mem + 8196) && last_mm.add == (const float *)(mem + 4096));
    CHECK_EQ_INT(last_mm.N, 5);
    /* the plain launchers, whatever other fields hold */
    CHECK_EQ_INT(n_calls, 3);
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
    CHECK(last_mm.bias == NULL);   /* LOGITS has no bias */
    /* the matmul's own scratch after the normalised rows, 256-aligned */
    CHECK(last_scratch == gpu.scratch + weft_gpu_align256(3 * 64 * sizeof(float)));
    /* api 6: soft-capped, one more launch after the matmul, as given */
    reset();
    o->softcap = 30.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK_EQ_INT(n_calls, 3);
    CHECK(!strcmp(last, "softcap") && last_softcap == 30.0f);
}

static void rope_theta_as_the_cpu_and_kv_description(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 2);
    o->k = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 32, 2);
    o->v = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 32, 2);
    o->kv = (struct weft_kv_view){&kvbuf, WEFT_TYPE_Q8_0, 6, 4, 1, 32, 0, false};
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
    CHECK_EQ_INT(last_kv.hd_v, 32);   /* head_dim_v 0: V's head dim is head_dim's */
    CHECK_EQ_INT(last_R, 2);
    /* api 5's fields at zero: the plain rotation */
    CHECK(!last_ext_null);
    CHECK(last_ext.freq_factors == NULL && last_ext.ext_factor == 0.0f && last_ext.mscale == 1.0f);
    CHECK(last_freq_scale == 1.0f);
    /* api 6: V heads of another width (v rows n_kv * head_dim_v) */
    reset();
    o->kv.head_dim_v = 64;
    o->v = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 64, 2);
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "rope_kv"));
    CHECK_EQ_INT(last_kv.hd, 32);
    CHECK_EQ_INT(last_kv.hd_v, 64);
}

/* base/rope.h's magnitude: at position 0 every angle is 0, so cs[0] =
 * cosf(0) * m = m */
static float rope_h_mscale(uint32_t n_rot, float freq_scale, float ext_factor, float attn_factor)
{
    float cs[64];
    const struct weft_rope_ext e = {NULL, ext_factor, attn_factor, {2.0f, 9.0f}};
    weft_rope_cos_sin_ext(0, n_rot, 10000.0f, freq_scale, &e, cs);
    return cs[0];
}

static void rope_scaling_fields_reach_the_launcher(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 2);
    o->k = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 32, 2);
    o->v = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 32, 2);
    o->kv = (struct weft_kv_view){&kvbuf, WEFT_TYPE_F16, 2, 1, 1, 32, 0, false};
    o->batch = batch(2);
    o->n_head = 2;
    o->n_rot = 16;   /* a partial rotation: 8 pairs */
    o->freq_base = 500000.0f;
    o->freq_scale = 0.125f;
    o->mode = WEFT_ROPE_NORMAL;
    /* freq_factors set but has_freq_factors false: not handed on */
    o->freq_factors = weft_view_2d(&buf, 6144, WEFT_TYPE_F32, 8, 1);
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "rope_kv"));
    CHECK(last_ext.freq_factors == NULL);
    CHECK(last_freq_scale == 0.125f);
    CHECK(last_theta == powf(500000.0f, -2.0f / 16.0f));
    CHECK_EQ_INT(last_neox, 0);
    o->has_freq_factors = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_ext.freq_factors == (const float *)(mem + 6144));
    CHECK(last_ext.ext_factor == 0.0f && last_ext.mscale == 1.0f);
    /* attn_factor alone: the magnitude, no YaRN term */
    o->attn_factor = 0.75f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_ext.mscale == 0.75f);
    CHECK(last_ext.mscale == rope_h_mscale(16, 0.125f, 0.0f, 0.75f));
    /* YaRN: the mix, the ramp ends, and 1 + 0.1 ln(1/freq_scale) as the CPU's logf */
    o->ext_factor = 1.0f;
    o->corr_dims[0] = 2.0f;
    o->corr_dims[1] = 9.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_ext.ext_factor == 1.0f);
    CHECK(last_ext.corr_dims[0] == 2.0f && last_ext.corr_dims[1] == 9.0f);
    CHECK_MSG(last_ext.mscale == rope_h_mscale(16, 0.125f, 1.0f, 0.75f), "mscale %.9g, base/rope.h %.9g",
              last_ext.mscale, rope_h_mscale(16, 0.125f, 1.0f, 0.75f));
    CHECK(last_ext.mscale != 0.75f);
    o->attn_factor = 0.0f;   /* 0: 1 */
    o->ext_factor = 0.5f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_ext.ext_factor == 0.5f);
    CHECK(last_ext.mscale == rope_h_mscale(16, 0.125f, 0.5f, 0.0f));
    CHECK(last_ext.mscale == 1.0f + 0.1f * logf(8.0f));
    CHECK(last_freq_scale == 0.125f);
    CHECK(last_ext.freq_factors == (const float *)(mem + 6144));
    CHECK_EQ_INT(n_calls, 5);
}

static void attention_splits_from_the_hooks(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ATTENTION};
    struct weft_op_attention *o = &op.u.attention;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 3);
    o->out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 64, 3);
    o->kv = (struct weft_kv_view){&kvbuf, WEFT_TYPE_F16, 2, 1, 1, 32, 0, false};
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
    CHECK_EQ_INT(last_attn.window, 0);
    /* the sliding window, as given (also past INT32_MAX) */
    o->window = 4096;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK_EQ_INT(last_attn.window, 4096);
    o->window = 1;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK_EQ_INT(last_attn.window, 1);
    o->softcap = 50.0f;  /* api 6: passed as given (the launcher divides the scale) */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_attn.softcap == 50.0f && last_attn.scale == o->scale);
    o->softcap = 0.0f;
    o->window = 0xfffffff0u;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_attn.window == 0xfffffff0u);
    CHECK(last_attn.scale == 0.25f && last_splits == 6);
    CHECK_EQ_INT(last_attn.kv.hd, 32);
    CHECK_EQ_INT(last_attn.kv.hd_v, 32);
    /* api 6: V heads of 16 beside K's 32 reach the kernel's description */
    o->window = 0;
    o->kv.head_dim_v = 16;
    o->out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 32, 3);
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "attention"));
    CHECK_EQ_INT(last_attn.kv.hd, 32);
    CHECK_EQ_INT(last_attn.kv.hd_v, 16);
    CHECK(last_attn.out == (float *)(mem + 1024) && last_attn.out_ld == 32);
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

static void glu_act_through_the_hook(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
    struct weft_op_silu_mul *o = &op.u.silu_mul;
    o->gate = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 48, 3);
    o->gate.nb1 = 256;   /* rows 64 floats apart */
    o->up = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 48, 3);
    o->out = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 48, 3);
    /* SiLU (0): the plain launcher */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "silu_mul"));
    CHECK_EQ_INT(last_act, -1);
    CHECK(last_g == (const float *)mem && last_g_ld == 64);
    /* GeLU-tanh: the glu hook, with the act and the same arguments */
    o->act = WEFT_GLU_GELU_TANH;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "glu"));
    CHECK(last_stream == STREAM);
    CHECK_EQ_INT(last_act, WEFT_GLU_GELU_TANH);
    CHECK(last_g == (const float *)mem && last_g_ld == 64);
    CHECK(last_u == (const float *)(mem + 1024) && last_u_ld == 48);
    CHECK(last_out == (float *)(mem + 2048) && last_out_ld == 48);
    CHECK_EQ_INT(last_R, 3);
    CHECK_EQ_INT(last_K, 48);
    /* an act the encoder does not know goes to the hook as well (the
     * launcher refuses it); supports() keeps it from getting here */
    o->act = (enum weft_glu_act)7;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK_EQ_INT(last_act, 7);
    /* a runtime without the hook: the invalid-value code, nothing launched */
    gpu.hooks = &bare_hooks;
    n_calls = 0;
    o->act = WEFT_GLU_GELU_TANH;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 12);
    CHECK_EQ_INT(n_calls, 0);
    o->act = WEFT_GLU_SILU;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "silu_mul"));
}

static void embed_scale_through_the_hook(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_EMBED};
    struct weft_op_embed *o = &op.u.embed;
    o->table = weft_view_2d(&buf, 0, WEFT_TYPE_Q8_0, 64, 10);
    o->ids = weft_view_2d(&buf, 4096, WEFT_TYPE_I32, 3, 1);
    o->out = weft_view_2d(&buf, 8192, WEFT_TYPE_F32, 64, 3);
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "embed"));
    CHECK(last_scale == -1.0f);
    o->scale = 45.254834f;   /* sqrt(2048), gemma's */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "embed_scaled"));
    CHECK(last_stream == STREAM);
    CHECK(last_scale == 45.254834f);
    CHECK(last_table == mem && last_ids == (const int32_t *)(mem + 4096));
    CHECK_EQ_INT(last_R, 3);
    CHECK_EQ_INT(last_K, 64);
    CHECK(last_out == (float *)(mem + 8192) && last_out_ld == 64);
    o->scale = -0.5f;   /* any non-zero scale, negative ones too */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "embed_scaled") && last_scale == -0.5f);
    gpu.hooks = &bare_hooks;
    n_calls = 0;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 12);
    CHECK_EQ_INT(n_calls, 0);
    o->scale = 0.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "embed"));
}

/* ---- api 10 ---- */

static void add_scale_through_the_hook(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ADD};
    struct weft_op_add *o = &op.u.add;
    o->a = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 48, 3);
    o->a.nb1 = 256;   /* rows 64 floats apart */
    o->b = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 48, 3);
    o->out = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 48, 3);
    /* scale 0 (and -0): the plain launcher */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "add"));
    o->scale = -0.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "add"));
    CHECK(last_scale == -1.0f);
    /* a scale: the add_scaled hook, with it and the same arguments */
    o->scale = 0.8125f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "add_scaled"));
    CHECK(last_stream == STREAM);
    CHECK(last_scale == 0.8125f);
    CHECK(last_a == (const float *)mem && last_a_ld == 64);
    CHECK(last_b == (const float *)(mem + 1024) && last_b_ld == 48);
    CHECK(last_out == (float *)(mem + 2048) && last_out_ld == 48);
    CHECK_EQ_INT(last_R, 3);
    CHECK_EQ_INT(last_K, 48);
    o->scale = -3.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "add_scaled") && last_scale == -3.0f);
    /* a runtime without the hook: the invalid-value code, nothing launched (never a plain add) */
    gpu.hooks = &bare_hooks;
    n_calls = 0;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 12);
    CHECK_EQ_INT(n_calls, 0);
    o->scale = 0.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "add"));
}

static void rope_q_only_through_the_hook(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 128, 2);
    o->q.nb1 = 640;   /* rows 160 floats apart */
    o->k = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 32, 2);
    o->v = weft_view_2d(&buf, 3072, WEFT_TYPE_F32, 32, 2);
    o->kv = (struct weft_kv_view){&kvbuf, WEFT_TYPE_F16, 2, 1, 1, 32, 0, false};
    o->batch = batch(2);
    o->n_head = 4;
    o->n_rot = 16;
    o->freq_base = 500000.0f;
    o->freq_scale = 0.25f;
    o->mode = WEFT_ROPE_NEOX;
    o->freq_factors = weft_view_2d(&buf, 6144, WEFT_TYPE_F32, 8, 1);
    o->has_freq_factors = true;
    o->ext_factor = 1.0f;
    o->attn_factor = 0.5f;
    o->corr_dims[0] = 1.0f;
    o->corr_dims[1] = 6.0f;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "rope_kv"));
    const struct weft_gk_rope_ext full = last_ext;
    const float full_theta = last_theta;
    /* q only: the rope_q hook, q's address and stride, the head dim from the kv view, the
     * same angles (theta scale, freq_scale, the scaling) as the full op's */
    o->q_only = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "rope_q"));
    CHECK_EQ_INT(n_calls, 2);
    CHECK(last_stream == STREAM);
    CHECK(last_q == (float *)mem && last_q_ld == 160);
    CHECK(last_pos == (const int32_t *)(mem + 20000));
    CHECK_EQ_INT(last_R, 2);
    CHECK_EQ_INT(last_n_head, 4);
    CHECK_EQ_INT(last_hd, 32);
    CHECK_EQ_INT(last_n_rot, 16);
    CHECK(last_theta == full_theta && last_theta == powf(500000.0f, -2.0f / 16.0f));
    CHECK(last_freq_scale == 0.25f);
    CHECK_EQ_INT(last_neox, 1);
    CHECK(!last_ext_null);
    CHECK(!memcmp(&last_ext, &full, sizeof full));
    CHECK(last_ext.freq_factors == (const float *)(mem + 6144));
    /* k and v are not looked at */
    o->k = (struct weft_view){0};
    o->v = (struct weft_view){0};
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "rope_q"));
    /* a runtime without the hook: the invalid-value code, nothing launched (never the full op) */
    gpu.hooks = &bare_hooks;
    n_calls = 0;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 12);
    CHECK_EQ_INT(n_calls, 0);
}

static void moe_route_expert_scale_address(void)
{
    reset();
    struct weft_op op = {.kind = WEFT_OP_MOE_ROUTE};
    struct weft_op_moe_route *o = &op.u.moe_route;
    o->logits = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 16, 3);
    o->ids = weft_view_2d(&buf, 1024, WEFT_TYPE_I32, 4, 3);
    o->weights = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 4, 3);
    o->k = 4;
    o->gating = WEFT_MOE_SIGMOID;
    o->norm = true;
    o->scale = 2.5f;
    o->expert_scale = weft_view_2d(&buf, 4096, WEFT_TYPE_F32, 16, 1);   /* set, has_expert_scale false */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(!strcmp(last, "moe_route"));
    CHECK(last_route.expert_scale == NULL);
    CHECK(last_route.bias == NULL && last_route.scale == 2.5f && last_route.E == 16 && last_route.k == 4);
    o->has_expert_scale = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &op), 0);
    CHECK(last_route.expert_scale == (const float *)(mem + 4096));
    CHECK(last_route.w == (float *)(mem + 2048) && last_route.ids == (int32_t *)(mem + 1024));
    CHECK_EQ_INT(last_route.R, 3);
}

int main(void)
{
    RUN(matmul_views_become_addresses_and_element_strides);
    RUN(matmul_bias_address_only_with_has_bias);
    RUN(rope_scaling_fields_reach_the_launcher);
    RUN(glu_act_through_the_hook);
    RUN(embed_scale_through_the_hook);
    RUN(logits_norm_into_scratch_then_matmul_after_it);
    RUN(rope_theta_as_the_cpu_and_kv_description);
    RUN(attention_splits_from_the_hooks);
    RUN(copy_through_the_hook_and_unknown_ops);
    RUN(embed_and_rmsnorm_fused_add);
    RUN(add_scale_through_the_hook);
    RUN(rope_q_only_through_the_hook);
    RUN(moe_route_expert_scale_address);
    return check_summary();
}
