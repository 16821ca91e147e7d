/* The GPU backends' shared host code (backends/gpu/gpu_common.c) over a
 * fake runtime: hooks that log what they are asked to do. Pins what the
 * CUDA and HIP backends rely on without needing a GPU:
 *  - supports: views inside their buffer, aligned, weight types from type_ok;
 *    api 5's fields: a MATMUL bias of W.ne1 contiguous aligned F32 values,
 *    a known GLU act (GeLU-tanh only with the glu hook), an EMBED scale only
 *    with the embed_scaled hook, ROPE_KV freq_factors of n_rot/2 contiguous
 *    aligned F32 values; every attention window;
 *  - step graphs: eager on the first sighting of a key, captured and launched
 *    on the second, replayed from then on; a different key runs eagerly;
 *    op lists differing only in an api 5 field (window, act, scale, bias,
 *    each ROPE_KV scaling field) are different keys;
 *  - a failed capture turns graphs off and runs the ops eagerly; an
 *    out-of-memory capture is an error;
 *  - scratch grows to 1.5x what an op needs (256-aligned) and drops graphs;
 *  - api 10's fields: ADD's scale only with the add_scaled hook, ROPE_KV's
 *    q_only only with rope_q (k and v not looked at), MOE_ROUTE's expert_scale
 *    of n_expert contiguous aligned F32 values; each field keys the graphs;
 *  - the LRU table keeps WEFT_GPU_GRAPHS keys;
 *  - a failing launch names the op. */
#include <math.h>
#include <string.h>

#include "backends/gpu/gpu_common.c"
#include "tests/check.h"

static char log_[4096];
static int fail_capture_begin, fail_encode_at = -1, n_encoded;
static size_t mm_scratch;

static void logf_(const char *s)
{
    if (strlen(log_) + strlen(s) + 2 < sizeof log_) { strcat(log_, s); strcat(log_, " "); }
}

static int f_type_ok(int wt) { return wt == WEFT_TYPE_F32 || wt == WEFT_TYPE_Q8_0; }
static size_t f_mm_scratch(int wt, int64_t K, int64_t R) { return mm_scratch; }
static int f_attn_splits(int64_t n_rows, int n_head, int n_mp) { return 1; }
static size_t f_attn_scratch(int64_t n_rows, int n_head, int hd, int n_split) { return 0; }
static weft_status f_error(int e, const char *what)
{
    return weft_error(e == 2 ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE, "fake: %s: error %d", what, e);
}
static const char *f_error_str(int e) { return "fake error"; }
static void f_clear_error(void) { logf_("clear"); }
static int f_stream_sync(struct weft_gpu *g) { logf_("sync"); return 0; }
static int f_dev_alloc(struct weft_gpu *g, size_t n, void **out)
{
    char s[64];
    snprintf(s, sizeof s, "alloc%zu", n);
    logf_(s);
    *out = malloc(n);
    return *out ? 0 : 2;
}
static void f_dev_free(struct weft_gpu *g, void *p) { logf_("free"); free(p); }
static int f_encode(struct weft_gpu *g, const struct weft_op *op)
{
    logf_(op->kind == WEFT_OP_ADD ? "add" : "op");
    return n_encoded++ == fail_encode_at ? 9 : 0;
}
static int f_capture_begin(struct weft_gpu *g) { logf_("begin"); return fail_capture_begin; }
static int f_capture_end(struct weft_gpu *g, bool launched_ok, void **exec)
{
    logf_("end");
    *exec = launched_ok ? malloc(1) : NULL;
    return launched_ok ? 0 : 5;
}
static int f_graph_launch(struct weft_gpu *g, void *exec) { logf_("launch"); return 0; }
static void f_graph_destroy(void *exec) { logf_("destroy"); free(exec); }

static const struct weft_gpu_hooks fake = {
    .name = "fake", .err_oom = 2,
    .type_ok = f_type_ok, .matmul_scratch = f_mm_scratch, .attn_splits = f_attn_splits,
    .attention_scratch = f_attn_scratch, .error = f_error, .error_str = f_error_str,
    .clear_error = f_clear_error, .stream_sync = f_stream_sync, .dev_alloc = f_dev_alloc,
    .dev_free = f_dev_free, .encode = f_encode, .capture_begin = f_capture_begin,
    .capture_end = f_capture_end, .graph_launch = f_graph_launch, .graph_destroy = f_graph_destroy,
};

static int f_glu(int act, const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                 int64_t R, int64_t K, void *stream)
{
    return 0;
}
static int f_embed_scaled(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                          int64_t R, float scale, float *out, size_t out_ld, int *err, void *stream)
{
    return 0;
}
static int f_moe_route(const struct weft_gk_moe_route *a, void *stream) { return 0; }
static int f_add_scaled(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                        int64_t R, int64_t K, float scale, void *stream)
{
    return 0;
}
static int f_rope_q(float *q, size_t q_ld, const int32_t *pos, int64_t R, int n_head, int hd, int n_rot,
                    float theta_scale, float freq_scale, int neox, const struct weft_gk_rope_ext *ext, void *stream)
{
    return 0;
}
/* fake with api 5's optional launchers (made from fake in reset), and api 7's moe_route and
 * api 10's add_scaled and rope_q */
static struct weft_gpu_hooks fake5;

static struct weft_gpu gpu;
static struct weft_buffer buf, buf2;
static uint8_t mem[4096];

static void reset(bool graphs)
{
    weft_gpu_release(&gpu);
    memset(&gpu, 0, sizeof gpu);
    fake5 = fake;
    fake5.glu = f_glu;
    fake5.embed_scaled = f_embed_scaled;
    fake5.moe_route = f_moe_route;
    fake5.add_scaled = f_add_scaled;
    fake5.rope_q = f_rope_q;
    gpu.hooks = &fake;
    gpu.graphs = graphs;
    buf = (struct weft_buffer){&gpu, mem, sizeof mem, weft_gpu_next_buffer_id()};
    buf2 = (struct weft_buffer){&gpu, mem, sizeof mem, weft_gpu_next_buffer_id()};
    log_[0] = 0;
    fail_capture_begin = 0;
    fail_encode_at = -1;
    n_encoded = 0;
    mm_scratch = 0;
}

static struct weft_op add_op(size_t off)
{
    struct weft_op op = {.kind = WEFT_OP_ADD};
    op.u.add.a = weft_view_2d(&buf, off, WEFT_TYPE_F32, 16, 2);
    op.u.add.b = weft_view_2d(&buf, 256, WEFT_TYPE_F32, 16, 2);
    op.u.add.out = weft_view_2d(&buf, 512, WEFT_TYPE_F32, 16, 2);
    return op;
}

static bool run_expect(const struct weft_op *ops, size_t n, const char *want)
{
    log_[0] = 0;
    weft_status st = weft_gpu_run(&gpu, ops, n);
    CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
    CHECK_MSG(!strcmp(log_, want), "log \"%s\", want \"%s\"", log_, want);
    return st == WEFT_OK && !strcmp(log_, want);
}

static void supports_checks_views_and_types(void)
{
    reset(false);
    struct weft_op op = add_op(0);
    CHECK(weft_gpu_supports(&gpu.base, &op));
    op = add_op(2);   /* F32 rows must be 4-byte aligned */
    CHECK(!weft_gpu_supports(&gpu.base, &op));
    op = add_op(sizeof mem - 64);   /* runs past the buffer */
    CHECK(!weft_gpu_supports(&gpu.base, &op));
    struct weft_op mm = {.kind = WEFT_OP_MATMUL};
    mm.u.matmul.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 32, 1);
    mm.u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q8_0, 32, 4);
    mm.u.matmul.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 1);
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q4_0, 32, 4);   /* type_ok says no */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    struct weft_op cp = {.kind = WEFT_OP_COPY, .u.copy = {&buf, &buf, 0, 100, sizeof mem - 100}};
    CHECK(weft_gpu_supports(&gpu.base, &cp));
    cp.u.copy.bytes++;
    CHECK(!weft_gpu_supports(&gpu.base, &cp));
    CHECK(weft_gpu_range(&buf, 10, sizeof mem, "write") == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "fake: write [10, +4096) outside buffer of 4096") != NULL);
}

/* ---- api 5's fields ---- */

static struct weft_op matmul_op(void)
{
    struct weft_op mm = {.kind = WEFT_OP_MATMUL};
    mm.u.matmul.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 32, 2);
    mm.u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q8_0, 32, 4);
    mm.u.matmul.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 2);
    mm.u.matmul.bias = weft_view_2d(&buf, 1536, WEFT_TYPE_F32, 4, 1);
    return mm;
}

static struct weft_batch_view batch2(void)
{
    struct weft_batch_view b = {.n_rows = 2, .n_seq = 1};
    b.pos = weft_view_2d(&buf, 3072, WEFT_TYPE_I32, 2, 1);
    b.seq = weft_view_2d(&buf, 3080, WEFT_TYPE_I32, 2, 1);
    b.slot = weft_view_2d(&buf, 3088, WEFT_TYPE_I32, 2, 1);
    b.bt_off = weft_view_2d(&buf, 3096, WEFT_TYPE_I32, 1, 1);
    b.bt = weft_view_2d(&buf, 3100, WEFT_TYPE_I32, 4, 1);
    return b;
}

static struct weft_op rope_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 128, 2);
    o->k = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 64, 2);
    o->v = weft_view_2d(&buf, 1536, WEFT_TYPE_F32, 64, 2);
    o->kv = (struct weft_kv_view){&buf, WEFT_TYPE_F16, 2, 1, 2, 32, 0, false};
    o->batch = batch2();
    o->n_head = 4;
    o->n_rot = 32;
    o->freq_base = 10000.0f;
    o->freq_scale = 1.0f;
    o->freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 16, 1);
    return op;
}

static struct weft_op attention_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_ATTENTION};
    op.u.attention.q = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 128, 2);
    op.u.attention.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 128, 2);
    op.u.attention.kv = (struct weft_kv_view){&buf, WEFT_TYPE_F16, 2, 1, 2, 32, 0, false};
    op.u.attention.batch = batch2();
    op.u.attention.n_head = 4;
    op.u.attention.scale = 0.125f;
    return op;
}

static struct weft_op glu_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
    op.u.silu_mul.gate = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 64, 2);
    op.u.silu_mul.up = weft_view_2d(&buf, 512, WEFT_TYPE_F32, 64, 2);
    op.u.silu_mul.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 64, 2);
    return op;
}

static struct weft_op embed_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_EMBED};
    op.u.embed.table = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 16, 8);
    op.u.embed.ids = weft_view_2d(&buf, 512, WEFT_TYPE_I32, 2, 1);
    op.u.embed.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 16, 2);
    return op;
}

static void supports_matmul_bias(void)
{
    reset(false);
    struct weft_op mm = matmul_op();
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = (struct weft_view){0};   /* has_bias false: the view is not looked at */
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm = matmul_op();
    mm.u.matmul.has_bias = true;
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, 1536, WEFT_TYPE_F32, 2, 2);   /* 2 x 2, packed: 4 values */
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias.nb1 = 16;   /* 2 x 2 with a gap after each row */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, 1536, WEFT_TYPE_F32, 3, 1);   /* too short */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, 1536, WEFT_TYPE_F32, 5, 1);   /* too long */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, 1538, WEFT_TYPE_F32, 4, 1);   /* misaligned */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, 1540, WEFT_TYPE_F32, 4, 1);   /* any aligned offset */
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, 1536, WEFT_TYPE_F16, 4, 1);   /* not F32 */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(&buf, sizeof mem - 12, WEFT_TYPE_F32, 4, 1);   /* past the buffer */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.bias = weft_view_2d(NULL, 0, WEFT_TYPE_F32, 4, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
}

static void supports_glu_act_and_embed_scale(void)
{
    reset(false);
    struct weft_op g = glu_op();
    CHECK(weft_gpu_supports(&gpu.base, &g));
    g.u.silu_mul.act = WEFT_GLU_GELU_TANH;   /* the fake runtime has no glu hook */
    CHECK(!weft_gpu_supports(&gpu.base, &g));
    gpu.hooks = &fake5;
    CHECK(weft_gpu_supports(&gpu.base, &g));
    g.u.silu_mul.act = (enum weft_glu_act)2;   /* an act no launcher knows */
    CHECK(!weft_gpu_supports(&gpu.base, &g));
    g.u.silu_mul.act = (enum weft_glu_act)-1;
    CHECK(!weft_gpu_supports(&gpu.base, &g));
    g.u.silu_mul.act = WEFT_GLU_SILU;
    CHECK(weft_gpu_supports(&gpu.base, &g));

    gpu.hooks = &fake;
    struct weft_op e = embed_op();
    CHECK(weft_gpu_supports(&gpu.base, &e));
    e.u.embed.scale = 4.0f;   /* no embed_scaled hook */
    CHECK(!weft_gpu_supports(&gpu.base, &e));
    gpu.hooks = &fake5;
    CHECK(weft_gpu_supports(&gpu.base, &e));
    e.u.embed.scale = -0.25f;
    CHECK(weft_gpu_supports(&gpu.base, &e));

    /* every window is honoured */
    struct weft_op a = attention_op();
    CHECK(weft_gpu_supports(&gpu.base, &a));
    a.u.attention.window = 1;
    CHECK(weft_gpu_supports(&gpu.base, &a));
    a.u.attention.window = 0xffffffffu;
    CHECK(weft_gpu_supports(&gpu.base, &a));
}

static void supports_rope_freq_factors(void)
{
    reset(false);
    struct weft_op r = rope_op();
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = (struct weft_view){0};   /* not looked at without has_freq_factors */
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r = rope_op();
    r.u.rope_kv.has_freq_factors = true;
    CHECK(weft_gpu_supports(&gpu.base, &r));
    /* YaRN and the magnitude need nothing more */
    r.u.rope_kv.ext_factor = 1.0f;
    r.u.rope_kv.attn_factor = 0.5f;
    r.u.rope_kv.corr_dims[0] = 3.0f;
    r.u.rope_kv.corr_dims[1] = 11.0f;
    r.u.rope_kv.freq_scale = 0.25f;
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 4, 4);   /* 4 x 4 packed: 16 values */
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors.nb1 = 20;   /* with gaps */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 15, 1);   /* n_rot/2 - 1 */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 32, 1);   /* n_rot, not n_rot/2 */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2050, WEFT_TYPE_F32, 16, 1);   /* misaligned */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2052, WEFT_TYPE_F32, 16, 1);
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F16, 16, 1);   /* not F32 */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_I32, 16, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, sizeof mem - 60, WEFT_TYPE_F32, 16, 1);   /* past the end */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(NULL, 0, WEFT_TYPE_F32, 16, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    /* the length follows n_rot */
    r = rope_op();
    r.u.rope_kv.has_freq_factors = true;
    r.u.rope_kv.n_rot = 16;
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 8, 1);
    CHECK(weft_gpu_supports(&gpu.base, &r));
}

/* b, differing from a in one field, is another step graph: with a's graph
 * captured, b runs eagerly (a first sighting) and a still replays */
static void another_graph(struct weft_op a, struct weft_op b, const char *what)
{
    reset(true);
    gpu.hooks = &fake5;
    struct weft_op oa[2] = {a, add_op(0)}, ob[2] = {b, add_op(0)};
    bool ok = run_expect(oa, 2, "op add ") && run_expect(oa, 2, "begin op add end launch ") &&
              run_expect(ob, 2, "op add ") && run_expect(oa, 2, "launch ") &&
              run_expect(ob, 2, "begin op add end launch ");
    CHECK_MSG(ok, "%s", what);
}

/* b the same key as a (a field the kernels do not read) */
static void same_graph(struct weft_op a, struct weft_op b, const char *what)
{
    reset(true);
    gpu.hooks = &fake5;
    struct weft_op oa[2] = {a, add_op(0)}, ob[2] = {b, add_op(0)};
    bool ok = run_expect(oa, 2, "op add ") && run_expect(ob, 2, "begin op add end launch ") &&
              run_expect(oa, 2, "launch ");
    CHECK_MSG(ok, "%s", what);
}

static void api5_fields_key_the_step_graphs(void)
{
    struct weft_op a, b;
    a = attention_op(); b = a; b.u.attention.window = 512;
    another_graph(a, b, "attention window 0 / 512");
    a.u.attention.window = 4096; b.u.attention.window = 4097;
    another_graph(a, b, "attention window 4096 / 4097");

    a = glu_op(); b = a; b.u.silu_mul.act = WEFT_GLU_GELU_TANH;
    another_graph(a, b, "glu act");

    a = embed_op(); b = a; b.u.embed.scale = 2.0f;
    another_graph(a, b, "embed scale 0 / 2");
    a.u.embed.scale = 2.0f; b.u.embed.scale = nextafterf(2.0f, 3.0f);
    another_graph(a, b, "embed scale 2 / 2 + ulp");

    a = matmul_op(); b = a; b.u.matmul.has_bias = true;
    another_graph(a, b, "matmul without / with bias");
    a.u.matmul.has_bias = true; b.u.matmul.bias.offset += 4;
    another_graph(a, b, "matmul bias offset");
    b = a; b.u.matmul.bias.buf = &buf2;
    another_graph(a, b, "matmul bias buffer");
    a.u.matmul.has_bias = false; b = a; b.u.matmul.bias.offset += 4;
    same_graph(a, b, "matmul bias view without has_bias");

    a = rope_op(); b = a; b.u.rope_kv.has_freq_factors = true;
    another_graph(a, b, "rope without / with freq_factors");
    a.u.rope_kv.has_freq_factors = true; b = a; b.u.rope_kv.freq_factors.offset += 4;
    another_graph(a, b, "rope freq_factors offset");
    b = a; b.u.rope_kv.freq_factors.buf = &buf2;
    another_graph(a, b, "rope freq_factors buffer");
    b = a; b.u.rope_kv.ext_factor = 1.0f;
    another_graph(a, b, "rope ext_factor");
    b = a; b.u.rope_kv.attn_factor = 0.5f;
    another_graph(a, b, "rope attn_factor");
    b = a; b.u.rope_kv.corr_dims[0] = 1.0f;
    another_graph(a, b, "rope corr_dims[0]");
    b = a; b.u.rope_kv.corr_dims[1] = 1.0f;
    another_graph(a, b, "rope corr_dims[1]");
    b = a; b.u.rope_kv.freq_scale = 0.5f;
    another_graph(a, b, "rope freq_scale");
    a.u.rope_kv.has_freq_factors = false; b = a; b.u.rope_kv.freq_factors.offset += 4;
    same_graph(a, b, "rope freq_factors view without has_freq_factors");
}

/* ---- api 10's fields ---- */

static struct weft_op route_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_MOE_ROUTE};
    struct weft_op_moe_route *o = &op.u.moe_route;
    o->logits = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 16, 2);
    o->ids = weft_view_2d(&buf, 256, WEFT_TYPE_I32, 4, 2);
    o->weights = weft_view_2d(&buf, 512, WEFT_TYPE_F32, 4, 2);
    o->k = 4;
    o->gating = WEFT_MOE_SIGMOID;
    o->norm = true;
    o->expert_scale = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 16, 1);
    return op;
}

static void supports_api10_fields(void)
{
    reset(false);
    /* ADD's scale: only with the add_scaled hook (never run as a plain add) */
    struct weft_op a = add_op(0);
    a.u.add.scale = 0.5f;
    CHECK(!weft_gpu_supports(&gpu.base, &a));
    a.u.add.scale = -0.0f;   /* zero: the plain add */
    CHECK(weft_gpu_supports(&gpu.base, &a));
    gpu.hooks = &fake5;
    a.u.add.scale = 0.5f;
    CHECK(weft_gpu_supports(&gpu.base, &a));
    a.u.add.scale = -1e-30f;
    CHECK(weft_gpu_supports(&gpu.base, &a));
    a = add_op(2);   /* the views' checks as before */
    a.u.add.scale = 0.5f;
    CHECK(!weft_gpu_supports(&gpu.base, &a));

    /* ROPE_KV's q_only: only with the rope_q hook; k and v not looked at, q, kv and the batch are */
    gpu.hooks = &fake;
    struct weft_op r = rope_op();
    r.u.rope_kv.q_only = true;
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    gpu.hooks = &fake5;
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.k = (struct weft_view){0};
    r.u.rope_kv.v = (struct weft_view){0};
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.q_only = false;
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r = rope_op();
    r.u.rope_kv.q_only = true;
    r.u.rope_kv.q = weft_view_2d(&buf, 2, WEFT_TYPE_F32, 128, 2);   /* misaligned q */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r = rope_op();
    r.u.rope_kv.q_only = true;
    r.u.rope_kv.kv.buf = NULL;   /* the kv view still gives the head dim */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r = rope_op();
    r.u.rope_kv.q_only = true;
    r.u.rope_kv.n_rot = 48;   /* past the head dim */
    CHECK(!weft_gpu_supports(&gpu.base, &r));
    r = rope_op();
    r.u.rope_kv.q_only = true;
    r.u.rope_kv.has_freq_factors = true;
    CHECK(weft_gpu_supports(&gpu.base, &r));
    r.u.rope_kv.freq_factors = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 15, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &r));

    /* MOE_ROUTE's expert_scale: n_expert contiguous aligned F32 values in the buffer */
    struct weft_op m = route_op();
    CHECK(weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = (struct weft_view){0};   /* not looked at without has_expert_scale */
    CHECK(weft_gpu_supports(&gpu.base, &m));
    m = route_op();
    m.u.moe_route.has_expert_scale = true;
    CHECK(weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 4);   /* 4 x 4 packed */
    CHECK(weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale.nb1 = 20;   /* with gaps */
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 15, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 17, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(&buf, 1026, WEFT_TYPE_F32, 16, 1);   /* misaligned */
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(&buf, 1024, WEFT_TYPE_F16, 16, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(&buf, sizeof mem - 60, WEFT_TYPE_F32, 16, 1);   /* past the end */
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    m.u.moe_route.expert_scale = weft_view_2d(NULL, 0, WEFT_TYPE_F32, 16, 1);
    CHECK(!weft_gpu_supports(&gpu.base, &m));
    gpu.hooks = &fake;   /* no moe_route hook: no MOE_ROUTE at all */
    m = route_op();
    CHECK(!weft_gpu_supports(&gpu.base, &m));
}

static void api10_fields_key_the_step_graphs(void)
{
    /* ADD scale: the second op of the list (another_graph's first op is not an ADD) */
    struct weft_op a = glu_op(), b;
    struct weft_op s0[2] = {a, add_op(0)}, s1[2] = {a, add_op(0)}, s2[2] = {a, add_op(0)};
    s1[1].u.add.scale = 0.5f;
    s2[1].u.add.scale = nextafterf(0.5f, 1.0f);
    reset(true);
    gpu.hooks = &fake5;
    bool ok = run_expect(s0, 2, "op add ") && run_expect(s0, 2, "begin op add end launch ") &&
              run_expect(s1, 2, "op add ") && run_expect(s0, 2, "launch ") &&
              run_expect(s1, 2, "begin op add end launch ") && run_expect(s2, 2, "op add ");
    CHECK_MSG(ok, "add scale 0 / 0.5 / 0.5 + ulp");

    a = rope_op(); b = a; b.u.rope_kv.q_only = true;
    another_graph(a, b, "rope q_only");

    a = route_op(); b = a; b.u.moe_route.has_expert_scale = true;
    another_graph(a, b, "route without / with expert_scale");
    a.u.moe_route.has_expert_scale = true; b = a; b.u.moe_route.expert_scale.offset += 4;
    another_graph(a, b, "route expert_scale offset");
    b = a; b.u.moe_route.expert_scale.buf = &buf2;
    another_graph(a, b, "route expert_scale buffer");
    a.u.moe_route.has_expert_scale = false; b = a; b.u.moe_route.expert_scale.offset += 4;
    same_graph(a, b, "route expert_scale view without has_expert_scale");
}

static void graphs_eager_then_captured_then_replayed(void)
{
    reset(true);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    run_expect(ops, 2, "add add ");
    run_expect(ops, 2, "begin add add end launch ");
    run_expect(ops, 2, "launch ");
    run_expect(ops, 2, "launch ");
    CHECK_EQ_INT(gpu.n_captures, 1);
    CHECK_EQ_INT(gpu.n_graph_launches, 3);
    struct weft_op other[2] = {add_op(0), add_op(64)};   /* a different key */
    run_expect(other, 2, "add add ");
    run_expect(ops, 1, "add ");   /* one op: never a graph */
    reset(false);
    run_expect(ops, 2, "add add ");
    run_expect(ops, 2, "add add ");
}

static void failed_capture_runs_eagerly_without_graphs(void)
{
    reset(true);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    run_expect(ops, 2, "add add ");
    fail_capture_begin = 7;
    run_expect(ops, 2, "begin clear add add ");
    CHECK(!gpu.graphs);
    run_expect(ops, 2, "add add ");
    /* a launch failing inside the capture invalidates it the same way */
    reset(true);
    run_expect(ops, 2, "add add ");
    fail_encode_at = n_encoded;
    run_expect(ops, 2, "begin add end clear add add ");
    CHECK(!gpu.graphs);
    /* out of memory while capturing is an error, not a fallback */
    reset(true);
    run_expect(ops, 2, "add add ");
    fail_capture_begin = 2;
    CHECK(weft_gpu_run(&gpu, ops, 2) == WEFT_ERR_NOMEM);
    CHECK(strstr(weft_last_error(), "capturing a step graph") != NULL);
}

static void scratch_grows_and_drops_graphs(void)
{
    reset(true);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    run_expect(ops, 2, "add add ");
    run_expect(ops, 2, "begin add add end launch ");
    struct weft_op mm[2] = {{.kind = WEFT_OP_MATMUL}, add_op(0)};
    mm[0].u.matmul.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 32, 1);
    mm[0].u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q8_0, 32, 4);
    mm[0].u.matmul.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 1);
    mm_scratch = 1000;   /* 1.5x = 1500 -> 1536 */
    run_expect(mm, 2, "sync destroy alloc1536 op add ");
    CHECK_EQ_INT(gpu.scratch_size, 1536);
    mm_scratch = 1536;   /* fits: no regrowth */
    run_expect(mm, 2, "begin op add end launch ");
    mm_scratch = 1537;   /* grows: the old scratch freed, graphs dropped */
    run_expect(mm, 2, "sync destroy free alloc2560 op add ");
    run_expect(ops, 2, "add add ");   /* its graph was dropped too */
}

static void lru_keeps_the_recent_keys(void)
{
    reset(true);
    struct weft_op ops[WEFT_GPU_GRAPHS + 1][2];
    for (int i = 0; i <= WEFT_GPU_GRAPHS; i++) {
        ops[i][0] = add_op(0);
        ops[i][1] = add_op(4 * (size_t)i);
        run_expect(ops[i], 2, "add add ");
    }
    /* key 0 was the least recently used: replaced by key 8; key 1 is still known */
    run_expect(ops[1], 2, "begin add add end launch ");
    run_expect(ops[0], 2, "add add ");
}

static void a_failing_launch_names_the_op(void)
{
    reset(false);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    fail_encode_at = 1;
    CHECK(weft_gpu_run(&gpu, ops, 2) == WEFT_ERR_DEVICE);
    CHECK_MSG(strstr(weft_last_error(), "op 1 (add)") != NULL, "%s", weft_last_error());
}

static void input_error_word_is_reported_once(void)
{
    reset(false);
    int word = 2;
    gpu.err_host = &word;
    CHECK(weft_gpu_take_input_error(&gpu) == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "fake: a LOGITS row index outside its table") != NULL);
    CHECK(weft_gpu_take_input_error(&gpu) == WEFT_OK);
    gpu.err_host = NULL;
}

int main(void)
{
    RUN(supports_checks_views_and_types);
    RUN(supports_matmul_bias);
    RUN(supports_glu_act_and_embed_scale);
    RUN(supports_rope_freq_factors);
    RUN(api5_fields_key_the_step_graphs);
    RUN(supports_api10_fields);
    RUN(api10_fields_key_the_step_graphs);
    RUN(graphs_eager_then_captured_then_replayed);
    RUN(failed_capture_runs_eagerly_without_graphs);
    RUN(scratch_grows_and_drops_graphs);
    RUN(lru_keeps_the_recent_keys);
    RUN(a_failing_launch_names_the_op);
    RUN(input_error_word_is_reported_once);
    weft_gpu_release(&gpu);
    return check_summary();
}
