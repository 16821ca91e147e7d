/* api 9's recurrent-state ops on the CUDA and HIP backends (SSM_CONV, DELTA_NET; SILU_MUL's
 * SIGMOID), in three parts:
 *  - the launch geometry (kernels-common/recurrent_geom.h, plain C): every state row of every
 *    head in exactly one (block, group, lane row), no block wholly past the head, rows split
 *    finer when few sequences could fill the device, the shapes the kernels refuse;
 *  - the shared host code (backends/gpu/gpu_common.c, gpu_encode.c) over a fake runtime:
 *    supports (shapes as the CPU's, the kernels' bounds, outputs apart from inputs and state,
 *    the hooks present), what each op hands its launcher (device addresses, strides in
 *    elements, the slot count, the multiprocessors, the error word), the graph key of every
 *    field, the error word's message;
 *  - on each GPU backend with a device (cuda, hip; skipped otherwise): a Qwen3.5-shaped
 *    layer (SSM_CONV into DELTA_NET, both states in one strided slot buffer as the KV pool
 *    lays them out) over a prefill chunk beside decode rows in scattered slots, several steps,
 *    against the CPU backend (SSM_CONV bit for bit: ggml's polynomial expf on every 16-channel
 *    chunk; DELTA_NET within the device's expf/logf), the same steps replayed from a step
 *    graph bit for bit as eager runs, a slot outside the state reported at sync (zeros
 *    written), and the sigmoid GLU against the CPU to a few ulps. */
#include <math.h>
#include <string.h>

#include "backends/gpu/gpu_common.c"
#include "backends/gpu/gpu_encode.c"
#include "backends/module.h"
#include "tests/check.h"

/* ---- the launch geometry ---- */

static void dn_geometry_covers_every_state_row_once(void)
{
    static const int hvs[] = {1, 3, 16, 32}, mps[] = {0, 1, 132};
    static const int64_t rs[] = {1, 7, 300}, slots[] = {1, 8, 300};
    int bad = 0;
    for (int S = 1; S <= WEFT_GK_DN_MAX_HEAD; S++)
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 3; b++)
                for (size_t c = 0; c < 3; c++)
                    for (size_t d = 0; d < 3; d++) {
                        struct weft_gk_dn_geom g;
                        if (weft_gk_dn_geom(rs[b], slots[c], hvs[a], S, mps[d], &g)) { bad++; continue; }
                        const int J = WEFT_GK_DN_GROUPS * g.jw, chunks = (S + 31) / 32;
                        bool ok = (g.jw == 1 || g.jw == 2 || g.jw == 4 || g.jw == 8) && (g.jw == 1 || J <= S) &&
                                  g.nc >= chunks && (g.nc == 1 || g.nc / 2 < chunks) &&
                                  (g.nc == 1 || g.nc == 2 || g.nc == 4 || g.nc == 8) && g.tiles * J >= S &&
                                  (g.tiles - 1) * J < S && g.grid_y == (unsigned)hvs[a] &&
                                  g.grid_z == (unsigned)g.tiles && g.threads == 32 * WEFT_GK_DN_GROUPS;
                        /* candidate rows: every row in one block column's range, none empty, as
                         * many columns as sequences can be (min(R, n_slots)) */
                        const int64_t seqs = rs[b] < slots[c] ? rs[b] : slots[c];
                        ok = ok && g.per_block == (rs[b] + seqs - 1) / seqs &&
                             (int64_t)g.grid_x * g.per_block >= rs[b] &&
                             (int64_t)(g.grid_x - 1) * g.per_block < rs[b] && g.grid_x <= seqs;
                        /* j = (z * GROUPS + group) * jw + t: each of 0..S-1 once */
                        int seen[WEFT_GK_DN_MAX_HEAD] = {0};
                        for (int z = 0; z < g.tiles; z++)
                            for (int gr = 0; gr < WEFT_GK_DN_GROUPS; gr++)
                                for (int t = 0; t < g.jw; t++) {
                                    const int j = (z * WEFT_GK_DN_GROUPS + gr) * g.jw + t;
                                    if (j < S) seen[j]++;
                                }
                        for (int j = 0; j < S; j++) ok = ok && seen[j] == 1;
                        if (!ok && bad++ < 3)
                            fprintf(stderr, "S %d Hv %d R %lld slots %lld n_mp %d: nc %d jw %d tiles %d\n", S, hvs[a],
                                    (long long)rs[b], (long long)slots[c], mps[d], g.nc, g.jw, g.tiles);
                    }
    CHECK_EQ_INT(bad, 0);
}

static void dn_geometry_splits_rows_finer_when_few_sequences(void)
{
    struct weft_gk_dn_geom g;
    /* Qwen3.5-0.8B's 16 v heads of 128 on a 132-multiprocessor GPU: one decode sequence */
    CHECK(weft_gk_dn_geom(1, 64, 16, 128, 132, &g) == 0);
    CHECK_EQ_INT(g.jw, 1);
    CHECK_EQ_INT(g.tiles, 32);
    CHECK_EQ_INT(g.nc, 4);
    /* 64 decode rows fill it with the whole head in 4 blocks of 32 rows */
    CHECK(weft_gk_dn_geom(64, 64, 16, 128, 132, &g) == 0);
    CHECK_EQ_INT(g.jw, 8);
    CHECK_EQ_INT(g.tiles, 4);
    /* a 512-row prefill with one slot in the buffer is one sequence at most: one block column
     * looks at every row */
    CHECK(weft_gk_dn_geom(512, 1, 16, 128, 132, &g) == 0);
    CHECK_EQ_INT(g.jw, 1);
    CHECK_EQ_INT(g.grid_x, 1);
    CHECK_EQ_INT(g.per_block, 512);
    /* with 64 slots: 64 columns of 8 candidates (64 sequences of 8 rows would run at once) */
    CHECK(weft_gk_dn_geom(512, 64, 16, 128, 132, &g) == 0);
    CHECK(g.grid_x == 64 && g.per_block == 8);
    /* 100 rows, 64 slots: 2 candidates a column, 50 columns */
    CHECK(weft_gk_dn_geom(100, 64, 16, 128, 132, &g) == 0);
    CHECK(g.grid_x == 50 && g.per_block == 2);
    /* a smaller device: fewer, fuller blocks; no device count: one multiprocessor */
    CHECK(weft_gk_dn_geom(1, 64, 16, 128, 20, &g) == 0);
    CHECK_EQ_INT(g.jw, 4);
    CHECK(weft_gk_dn_geom(1, 64, 16, 128, 16, &g) == 0);
    CHECK_EQ_INT(g.jw, 8);
    CHECK(weft_gk_dn_geom(1, 64, 16, 128, 0, &g) == 0);
    CHECK_EQ_INT(g.jw, 8);
    /* heads narrower than a block: no group wholly past the head */
    CHECK(weft_gk_dn_geom(64, 64, 4, 8, 1, &g) == 0);
    CHECK_EQ_INT(g.jw, 2);
    CHECK_EQ_INT(g.tiles, 1);
    CHECK(weft_gk_dn_geom(64, 64, 4, 3, 1, &g) == 0);
    CHECK_EQ_INT(g.jw, 1);
    /* Qwen3-Next's 32 v heads of 128 on 8 sequences: 8 * 32 * 4 >= 4 * 132 */
    CHECK(weft_gk_dn_geom(8, 16, 32, 128, 132, &g) == 0);
    CHECK_EQ_INT(g.jw, 8);
}

static void recurrent_geometry_refuses_what_the_kernels_cannot_take(void)
{
    struct weft_gk_dn_geom g = {.nc = -7};
    CHECK(weft_gk_dn_geom(1, 1, 1, 0, 1, &g) == -1);
    CHECK(weft_gk_dn_geom(1, 1, 1, WEFT_GK_DN_MAX_HEAD + 1, 1, &g) == -1);
    CHECK(weft_gk_dn_geom(1, 1, 0, 32, 1, &g) == -1);
    CHECK(weft_gk_dn_geom(1, 1, 65536, 32, 1, &g) == -1);
    CHECK(weft_gk_dn_geom(0, 1, 1, 32, 1, &g) == -1);
    CHECK(weft_gk_dn_geom((int64_t)INT32_MAX + 1, 1, 1, 32, 1, &g) == -1);
    CHECK(weft_gk_dn_geom(1, 0, 1, 32, 1, &g) == -1);
    CHECK_EQ_INT(g.nc, -7);   /* nothing written */
    struct weft_gk_conv_geom c = {.threads = -7};
    CHECK(weft_gk_conv_geom(1, 64, 1, &c) == -1);
    CHECK(weft_gk_conv_geom(1, 64, WEFT_GK_CONV_MAX_K + 1, &c) == -1);
    CHECK(weft_gk_conv_geom(1, 0, 4, &c) == -1);
    CHECK(weft_gk_conv_geom(0, 64, 4, &c) == -1);
    CHECK(weft_gk_conv_geom(1, (int64_t)65536 * WEFT_GK_CONV_THREADS, 4, &c) == -1);
    CHECK_EQ_INT(c.threads, -7);
    CHECK(weft_gk_conv_geom(300, 6144, 4, &c) == 0);   /* Qwen3.5-0.8B's 6144 channels */
    CHECK(c.grid_x == 300 && c.grid_y == 6144 / WEFT_GK_CONV_THREADS && c.threads == WEFT_GK_CONV_THREADS);
    CHECK(weft_gk_conv_geom(1, 40, WEFT_GK_CONV_MAX_K, &c) == 0 && c.grid_y == 1);
}

/* ---- the shared host code over a fake runtime ---- */

static uint8_t mem[1 << 16];
static struct weft_gpu gpu;
static struct weft_buffer buf, sbuf;
static int n_launch;
static struct weft_gk_ssm_conv last_conv;
static struct weft_gk_delta_net last_dn;
static int last_act;

/* gpu_encode.c's direct launchers, unused here */
int weft_gk_matmul(const struct weft_gk_mm *m, void *scratch, void *stream) { return 0; }
int weft_gk_embed(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids, int64_t R,
                  float *out, size_t out_ld, int *err, void *stream) { return 0; }
int weft_gk_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows, const float *add,
                    size_t add_ld, float *sum, size_t sum_ld, const float *w, float *out, size_t out_ld, int64_t R,
                    int64_t K, float eps, int *err, void *stream) { return 0; }
int weft_gk_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld, int64_t R,
                     int64_t K, void *stream) { return 0; }
int weft_gk_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld, int64_t R,
                int64_t K, void *stream) { return 0; }
int weft_gk_softcap(float *x, size_t ld, int64_t R, int64_t K, float cap, void *stream) { return 0; }
int weft_gk_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld, const int32_t *pos,
                    const int32_t *slot, int64_t R, int n_head, int n_rot, float theta_scale, float freq_scale,
                    int neox, const struct weft_gk_rope_ext *ext, const struct weft_gk_kv *kv, void *stream)
{
    return 0;
}
int weft_gk_attention(const struct weft_gk_attn_args *a, int n_split, void *scratch, void *stream) { return 0; }

static int f_ssm_conv(const struct weft_gk_ssm_conv *a, void *stream)
{
    last_conv = *a;
    n_launch++;
    return stream == gpu.stream ? 0 : 99;
}
static int f_delta_net(const struct weft_gk_delta_net *a, void *stream)
{
    last_dn = *a;
    n_launch++;
    return stream == gpu.stream ? 0 : 99;
}
static int f_glu(int act, const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                 int64_t R, int64_t K, void *stream)
{
    last_act = act;
    n_launch++;
    return 0;
}
static int f_type_ok(int wt) { return wt == WEFT_TYPE_F32; }

static const struct weft_gpu_hooks bare = {.name = "bare", .err_invalid = 12, .type_ok = f_type_ok};
static const struct weft_gpu_hooks hooks = {.name = "fake", .err_invalid = 11, .type_ok = f_type_ok, .glu = f_glu,
                                            .ssm_conv = f_ssm_conv, .delta_net = f_delta_net};

static void reset(const struct weft_gpu_hooks *h)
{
    memset(&gpu, 0, sizeof gpu);
    gpu.hooks = h;
    gpu.stream = (void *)0x5eed;
    gpu.n_mp = 7;
    gpu.err_dev = (int *)0xe77;
    buf = (struct weft_buffer){&gpu, mem, sizeof mem / 2, weft_gpu_next_buffer_id()};
    sbuf = (struct weft_buffer){&gpu, mem + sizeof mem / 2, sizeof mem / 2, weft_gpu_next_buffer_id()};
    n_launch = 0;
}

/* SSM_CONV over 5 rows of 24 channels, K 4; 3 slots 320 bytes apart in sbuf */
static struct weft_op conv_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_SSM_CONV};
    op.u.ssm_conv = (struct weft_op_ssm_conv){.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 24, 5),
                                              .w = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 24),
                                              .out = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 24, 5),
                                              .state = weft_view_2d(&sbuf, 64, WEFT_TYPE_F32, 3 * 24, 3),
                                              .slots = weft_view_2d(&buf, 4096, WEFT_TYPE_I32, 5, 1),
                                              .silu = true};
    op.u.ssm_conv.state.nb1 = 320;
    return op;
}

/* DELTA_NET: 5 rows, 1 k head and 2 v heads of 8; 3 slots of 128 values 640 bytes apart */
static struct weft_op dn_op(void)
{
    struct weft_op op = {.kind = WEFT_OP_DELTA_NET};
    op.u.delta_net = (struct weft_op_delta_net){
        .in = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 32, 5), .beta = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 2, 5),
        .alpha = weft_view_2d(&buf, 1280, WEFT_TYPE_F32, 2, 5),
        .dt_bias = weft_view_2d(&buf, 1536, WEFT_TYPE_F32, 2, 1),
        .a = weft_view_2d(&buf, 1600, WEFT_TYPE_F32, 2, 1), .out = weft_view_2d(&buf, 2048, WEFT_TYPE_F32, 16, 5),
        .state = weft_view_2d(&sbuf, 0, WEFT_TYPE_F32, 128, 3), .slots = weft_view_2d(&buf, 4096, WEFT_TYPE_I32, 5, 1),
        .n_k_head = 1, .n_v_head = 2, .head_dim = 8, .eps = 1e-6f};
    op.u.delta_net.beta.nb1 = 48;   /* strided gates, as Qwen3-Next's ssm_ba views */
    op.u.delta_net.state.nb1 = 640;
    return op;
}

static void supports_recurrent_ops_as_the_cpu_and_the_kernels(void)
{
    reset(&hooks);
    struct weft_op c = conv_op(), d = dn_op(), o;
    CHECK(weft_gpu_supports(&gpu.base, &c));
    CHECK(weft_gpu_supports(&gpu.base, &d));
    /* SSM_CONV */
    o = c; o.u.ssm_conv.w.ne0 = 1; o.u.ssm_conv.state.ne0 = 0;                 /* K 1 */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.state.ne0 = 2 * 24;                                     /* not (K - 1) * C */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.slots.ne0 = 4;                                          /* fewer slots than rows */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.slots.type = WEFT_TYPE_F32;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.out.offset = 64;                                        /* out over x */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.out = weft_view_2d(&sbuf, 640, WEFT_TYPE_F32, 24, 5);     /* out over the state */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.w = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, WEFT_GK_CONV_MAX_K + 1, 24);
    o.u.ssm_conv.state.ne0 = WEFT_GK_CONV_MAX_K * 24;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = c; o.u.ssm_conv.state.offset = 62;                                      /* unaligned */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    /* DELTA_NET */
    o = d; o.u.delta_net.head_dim = WEFT_GK_DN_MAX_HEAD + 1;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.n_v_head = 3;                                          /* in not (2 Hk + Hv) S wide */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.n_k_head = 2; o.u.delta_net.n_v_head = 1;              /* Hv < Hk */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.eps = 0.0f;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.state.ne0 = 127;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.dt_bias.ne0 = 1;                                       /* fewer than Hv */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.a = weft_view_2d(&buf, 1600, WEFT_TYPE_F32, 1, 2);   /* not end to end */
    o.u.delta_net.a.nb1 = 8;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.out = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 16, 5);     /* out over in */
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.alpha.ne1 = 4;
    CHECK(!weft_gpu_supports(&gpu.base, &o));
    o = d; o.u.delta_net.k_grouped = true;
    CHECK(weft_gpu_supports(&gpu.base, &o));
    /* SIGMOID with the glu hook; none of them without the hooks */
    struct weft_op s = {.kind = WEFT_OP_SILU_MUL};
    s.u.silu_mul = (struct weft_op_silu_mul){.gate = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 16, 2),
                                             .up = weft_view_2d(&buf, 256, WEFT_TYPE_F32, 16, 2),
                                             .out = weft_view_2d(&buf, 256, WEFT_TYPE_F32, 16, 2),
                                             .act = WEFT_GLU_SIGMOID};
    CHECK(weft_gpu_supports(&gpu.base, &s));   /* out may be up (in place) */
    reset(&bare);
    CHECK(!weft_gpu_supports(&gpu.base, &s));
    CHECK(!weft_gpu_supports(&gpu.base, &c));
    CHECK(!weft_gpu_supports(&gpu.base, &d));
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &c), 12);   /* the runtime's invalid-value code */
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &d), 12);
}

static void encode_hands_the_launchers_addresses_and_strides(void)
{
    reset(&hooks);
    struct weft_op c = conv_op(), d = dn_op();
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &c), 0);
    CHECK(last_conv.x == (const float *)mem && last_conv.x_ld == 24 && last_conv.w == (const float *)(mem + 1024) &&
          last_conv.w_ld == 4 && last_conv.out == (float *)(mem + 2048) && last_conv.out_ld == 24);
    CHECK(last_conv.state == (float *)(mem + sizeof mem / 2 + 64) && last_conv.state_ld == 80);
    CHECK(last_conv.slots == (const int32_t *)(mem + 4096) && last_conv.n_slots == 3 && last_conv.R == 5 &&
          last_conv.C == 24 && last_conv.K == 4 && last_conv.silu == 1 && last_conv.err == gpu.err_dev);
    d.u.delta_net.k_grouped = true;
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &d), 0);
    CHECK(last_dn.in == (const float *)mem && last_dn.in_ld == 32 && last_dn.beta == (const float *)(mem + 1024) &&
          last_dn.beta_ld == 12 && last_dn.alpha_ld == 2 && last_dn.dt_bias == (const float *)(mem + 1536) &&
          last_dn.a == (const float *)(mem + 1600) && last_dn.out_ld == 16);
    CHECK(last_dn.state == (float *)(mem + sizeof mem / 2) && last_dn.state_ld == 160 && last_dn.n_slots == 3 &&
          last_dn.R == 5 && last_dn.n_k_head == 1 && last_dn.n_v_head == 2 && last_dn.head_dim == 8 &&
          last_dn.k_grouped == 1 && last_dn.eps == 1e-6f && last_dn.n_mp == 7 && last_dn.err == gpu.err_dev);
    struct weft_op s = {.kind = WEFT_OP_SILU_MUL};
    s.u.silu_mul = (struct weft_op_silu_mul){.gate = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 16, 2),
                                             .up = weft_view_2d(&buf, 256, WEFT_TYPE_F32, 16, 2),
                                             .out = weft_view_2d(&buf, 512, WEFT_TYPE_F32, 16, 2),
                                             .act = WEFT_GLU_SIGMOID};
    CHECK_EQ_INT(weft_gpu_encode(&gpu, &s), 0);
    CHECK_EQ_INT(last_act, WEFT_GLU_SIGMOID);
    CHECK_EQ_INT(n_launch, 3);   /* one launch an op */
}

static bool same_key(const struct weft_op *a, const struct weft_op *b)
{
    struct keyb ka = {0}, kb = {0};
    put_op(&ka, a);
    put_op(&kb, b);
    const bool same = ka.n == kb.n && !memcmp(ka.p, kb.p, ka.n * sizeof *ka.p);
    free(ka.p);
    free(kb.p);
    return same;
}

static void every_recurrent_field_is_in_the_graph_key(void)
{
    reset(&hooks);
    struct weft_op c = conv_op(), d = dn_op(), o;
    CHECK(same_key(&c, &c) && same_key(&d, &d));
    o = c; o.u.ssm_conv.silu = false; CHECK(!same_key(&c, &o));
    o = c; o.u.ssm_conv.state.nb1 = 384; CHECK(!same_key(&c, &o));
    o = c; o.u.ssm_conv.state.ne1 = 2; CHECK(!same_key(&c, &o));
    o = c; o.u.ssm_conv.slots.offset = 4100; CHECK(!same_key(&c, &o));
    o = c; o.u.ssm_conv.w.offset = 1028; CHECK(!same_key(&c, &o));
    o = d; o.u.delta_net.k_grouped = true; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.eps = 1e-5f; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.head_dim = 4; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.n_k_head = 2; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.dt_bias.offset = 1540; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.a.offset = 1604; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.beta.nb1 = 52; CHECK(!same_key(&d, &o));
    o = d; o.u.delta_net.state.offset = 4; CHECK(!same_key(&d, &o));
}

static void a_bad_state_slot_is_named_at_sync(void)
{
    reset(&hooks);
    int word = 4;
    gpu.err_host = &word;
    CHECK(weft_gpu_take_input_error(&gpu) == WEFT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(weft_last_error(), "recurrent state slot") != NULL, "%s", weft_last_error());
    CHECK_EQ_INT(word, 0);
    CHECK(weft_gpu_take_input_error(&gpu) == WEFT_OK);
}

/* ---- on a device: the GPU backend against the CPU backend ---- */

enum { DK = 4, DHK = 2, DHV = 4, DS = 128, DC = (2 * DHK + DHV) * DS, DNS = 32, DSTEPS = 3 };
/* one slot: the conv window, then the delta rule's matrices, then a gap (the KV pool's layout) */
enum { DCONV = (DK - 1) * DC, DDN = DHV * DS * DS, DSLOT = DCONV + DDN + 16 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

struct rec_data {
    int R;
    int32_t slots[64];
    float *x, *w, *beta, *alpha, *dtb, *A, *state0;
};

struct rec_result {
    float *conv, *dn, *state;   /* the last step's outputs, the state after every step */
    weft_status sync;
    char why[256];              /* sync's message when it failed */
};

static struct weft_buffer *up(struct weft_backend *be, const void *data, size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(be->iface->buffer_alloc(be, n, &b) == WEFT_OK);
    if (b && data) CHECK(be->iface->buffer_write(b, 0, data, n) == WEFT_OK);
    return b;
}

/* DSTEPS steps of [SSM_CONV, DELTA_NET] (DELTA_NET reading SSM_CONV's output), as qwen35.c
 * lays them out */
static void rec_run(struct weft_backend *be, const struct rec_data *d, bool grouped, struct rec_result *res)
{
    const struct weft_backend_iface *bi = be->iface;
    const int R = d->R;
    struct weft_buffer *bx = up(be, d->x, sizeof(float) * R * DC), *bw = up(be, d->w, sizeof(float) * DC * DK),
                       *bb = up(be, d->beta, sizeof(float) * R * DHV), *ba = up(be, d->alpha, sizeof(float) * R * DHV),
                       *bd = up(be, d->dtb, sizeof(float) * DHV), *bA = up(be, d->A, sizeof(float) * DHV),
                       *bst = up(be, d->state0, sizeof(float) * DNS * DSLOT),
                       *bsl = up(be, d->slots, sizeof(int32_t) * R),
                       *bc = up(be, NULL, sizeof(float) * R * DC), *bo = up(be, NULL, sizeof(float) * R * DHV * DS);
    if (!bx || !bw || !bb || !ba || !bd || !bA || !bst || !bsl || !bc || !bo) return;
    struct weft_op ops[2] = {{.kind = WEFT_OP_SSM_CONV}, {.kind = WEFT_OP_DELTA_NET}};
    struct weft_view cst = weft_view_2d(bst, 0, WEFT_TYPE_F32, DCONV, DNS), dst = cst;
    cst.nb1 = dst.nb1 = sizeof(float) * DSLOT;
    dst.offset = sizeof(float) * DCONV;
    dst.ne0 = DDN;
    ops[0].u.ssm_conv = (struct weft_op_ssm_conv){weft_view_2d(bx, 0, WEFT_TYPE_F32, DC, R),
                                                  weft_view_2d(bw, 0, WEFT_TYPE_F32, DK, DC),
                                                  weft_view_2d(bc, 0, WEFT_TYPE_F32, DC, R), cst,
                                                  weft_view_2d(bsl, 0, WEFT_TYPE_I32, R, 1), true};
    ops[1].u.delta_net = (struct weft_op_delta_net){
        weft_view_2d(bc, 0, WEFT_TYPE_F32, DC, R), weft_view_2d(bb, 0, WEFT_TYPE_F32, DHV, R),
        weft_view_2d(ba, 0, WEFT_TYPE_F32, DHV, R), weft_view_2d(bd, 0, WEFT_TYPE_F32, DHV, 1),
        weft_view_2d(bA, 0, WEFT_TYPE_F32, DHV, 1), weft_view_2d(bo, 0, WEFT_TYPE_F32, DHV * DS, R), dst,
        weft_view_2d(bsl, 0, WEFT_TYPE_I32, R, 1), DHK, DHV, DS, 1e-6f, grouped};
    CHECK(bi->supports(be, &ops[0]) && bi->supports(be, &ops[1]));
    for (int s = 0; s < DSTEPS; s++) CHECK(bi->run(be, ops, 2) == WEFT_OK);
    res->sync = bi->sync(be);
    if (res->sync) snprintf(res->why, sizeof res->why, "%s", weft_last_error());
    CHECK(bi->buffer_read(bc, 0, res->conv, sizeof(float) * R * DC) == WEFT_OK);
    CHECK(bi->buffer_read(bo, 0, res->dn, sizeof(float) * R * DHV * DS) == WEFT_OK);
    CHECK(bi->buffer_read(bst, 0, res->state, sizeof(float) * DNS * DSLOT) == WEFT_OK);
    struct weft_buffer *all[] = {bx, bw, bb, ba, bd, bA, bst, bsl, bc, bo};
    for (int i = 0; i < 10; i++) bi->buffer_free(all[i]);
}

static double nmse(const float *a, const float *ref, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) { double t = (double)a[i] - ref[i]; e += t * t; s += (double)ref[i] * ref[i]; }
    return s > 0 ? e / s : e;
}

static void rec_result_init(struct rec_result *r, int R)
{
    r->conv = calloc((size_t)R * DC, sizeof(float));
    r->dn = calloc((size_t)R * DHV * DS, sizeof(float));
    r->state = calloc((size_t)DNS * DSLOT, sizeof(float));
    r->sync = WEFT_OK;
    r->why[0] = 0;
}

static void rec_result_free(struct rec_result *r) { free(r->conv); free(r->dn); free(r->state); }

/* a prefill chunk of 40 rows in slot 5 beside 20 decode rows in scattered slots, then a
 * decode-only batch of 24 */
static void recurrent_layer_on(const char *name)
{
    char spec[32], opts[64];
    snprintf(spec, sizeof spec, "%s:0", name);
    struct weft_backend *eager = NULL, *graph = NULL, *cpu = NULL;
    snprintf(opts, sizeof opts, "%s.graphs=0", name);
    CHECK(weft_backend_open_opts(spec, 0, opts, &eager) == WEFT_OK);
    snprintf(opts, sizeof opts, "%s.graphs=1", name);
    CHECK(weft_backend_open_opts(spec, 0, opts, &graph) == WEFT_OK);
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    struct rec_data d = {0};
    d.x = malloc(sizeof(float) * 64 * DC);
    d.w = malloc(sizeof(float) * DC * DK);
    d.beta = malloc(sizeof(float) * 64 * DHV);
    d.alpha = malloc(sizeof(float) * 64 * DHV);
    d.dtb = malloc(sizeof(float) * DHV);
    d.A = malloc(sizeof(float) * DHV);
    d.state0 = malloc(sizeof(float) * DNS * DSLOT);
    for (int i = 0; i < 64 * DC; i++) d.x[i] = 2 * frand();
    for (int i = 0; i < DC * DK; i++) d.w[i] = frand();
    for (int i = 0; i < 64 * DHV; i++) d.beta[i] = 3 * frand(), d.alpha[i] = 3 * frand();
    for (int h = 0; h < DHV; h++) d.dtb[h] = frand(), d.A[h] = -0.5f + 0.4f * frand();
    for (int i = 0; i < DNS * DSLOT; i++) d.state0[i] = 0.1f * frand();
    for (int batch = 0; batch < 2 && eager && graph && cpu; batch++) {
        d.R = batch ? 24 : 60;
        for (int r = 0; r < d.R; r++) {   /* the decode rows' slots distinct but 6 twice (5 is the chunk's) */
            const int dec = (r * 11 + 1) % DNS;
            d.slots[r] = batch ? (r * 7 + 3) % DNS : r < 40 ? 5 : dec == 5 ? 6 : dec;
        }
        for (int grouped = 0; grouped < 2; grouped++) {
            struct rec_result re, rg, rc;
            rec_result_init(&re, d.R);
            rec_result_init(&rg, d.R);
            rec_result_init(&rc, d.R);
            rec_run(eager, &d, grouped, &re);
            rec_run(graph, &d, grouped, &rg);
            rec_run(cpu, &d, grouped, &rc);
            CHECK(re.sync == WEFT_OK && rg.sync == WEFT_OK && rc.sync == WEFT_OK);
            const size_t nc = (size_t)d.R * DC, nd = (size_t)d.R * DHV * DS, ns = (size_t)DNS * DSLOT;
            /* SSM_CONV's SiLU is the polynomial on every channel (DC % 16 == 0): the CPU's bits */
            size_t conv_bad = 0;
            for (int s = 0; s < DNS; s++)
                conv_bad +=
                    memcmp(re.state + (size_t)s * DSLOT, rc.state + (size_t)s * DSLOT, sizeof(float) * DCONV) != 0;
            CHECK_MSG(!memcmp(re.conv, rc.conv, sizeof(float) * nc) && conv_bad == 0,
                      "%s ssm_conv batch %d: not the CPU's bits (%zu conv states differ)", name, batch, conv_bad);
            const double eo = nmse(re.dn, rc.dn, nd), es = nmse(re.state, rc.state, ns);
            printf("  %s batch %d (%d rows) k_grouped %d: delta_net vs cpu nmse out %.3g state %.3g\n", name, batch,
                   d.R, grouped, eo, es);
            CHECK_MSG(eo < 1e-10 && es < 1e-10, "%s delta_net vs cpu: nmse out %.3g state %.3g", name, eo, es);
            CHECK_MSG(!memcmp(re.conv, rg.conv, sizeof(float) * nc) && !memcmp(re.dn, rg.dn, sizeof(float) * nd) &&
                          !memcmp(re.state, rg.state, sizeof(float) * ns),
                      "%s: steps replayed from a graph differ from eager steps", name);
            rec_result_free(&re);
            rec_result_free(&rg);
            rec_result_free(&rc);
        }
    }
    /* a slot past the state: the run is queued, sync names it, the row's outputs are zeros */
    if (eager) {
        d.R = 3;
        d.slots[0] = 1; d.slots[1] = DNS; d.slots[2] = 2;
        struct rec_result rb;
        rec_result_init(&rb, d.R);
        rec_run(eager, &d, false, &rb);
        CHECK_MSG(rb.sync == WEFT_ERR_INVALID_ARG && strstr(rb.why, "recurrent state slot"), "%s: %d %s", name,
                  (int)rb.sync, rb.why);
        bool zero = true;
        for (int i = 0; i < DC; i++) zero = zero && rb.conv[DC + i] == 0.0f;
        for (int i = 0; i < DHV * DS; i++) zero = zero && rb.dn[DHV * DS + i] == 0.0f;
        CHECK(zero);
        CHECK(eager->iface->sync(eager) == WEFT_OK);   /* reported once */
        rec_result_free(&rb);
    }
    free(d.x); free(d.w); free(d.beta); free(d.alpha); free(d.dtb); free(d.A); free(d.state0);
    weft_backend_close(eager);
    weft_backend_close(graph);
    weft_backend_close(cpu);
}

static void sigmoid_glu_on(const char *name)
{
    char spec[32];
    snprintf(spec, sizeof spec, "%s:0", name);
    struct weft_backend *hb = NULL, *cpu = NULL;
    CHECK(weft_backend_open(spec, 0, &hb) == WEFT_OK);
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    enum { SR = 5, SK = 700 };
    const size_t n = (size_t)SR * SK, bytes = sizeof(float) * n;
    float *g = malloc(bytes), *u = malloc(bytes), *o[2] = {malloc(bytes), malloc(bytes)};
    const float specials[] = {NAN, INFINITY, -INFINITY, 100.0f, -100.0f, 0.0f, -0.0f, 1e-30f, 88.0f, -88.0f};
    for (size_t i = 0; i < n; i++) g[i] = i % 97 < 10 ? specials[i % 97] : 20 * frand(), u[i] = 4 * frand();
    struct weft_backend *bes[2] = {hb, cpu};
    for (int b = 0; b < 2 && hb && cpu; b++) {
        struct weft_backend *be = bes[b];
        struct weft_buffer *bg = up(be, g, bytes), *bu = up(be, u, bytes);
        struct weft_op op = {.kind = WEFT_OP_SILU_MUL};   /* in place, as qwen35's gated attention */
        op.u.silu_mul = (struct weft_op_silu_mul){.gate = weft_view_2d(bg, 0, WEFT_TYPE_F32, SK, SR),
                                                  .up = weft_view_2d(bu, 0, WEFT_TYPE_F32, SK, SR),
                                                  .out = weft_view_2d(bu, 0, WEFT_TYPE_F32, SK, SR),
                                                  .act = WEFT_GLU_SIGMOID};
        CHECK(be->iface->supports(be, &op));
        CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
        CHECK(be->iface->sync(be) == WEFT_OK);
        CHECK(be->iface->buffer_read(bu, 0, o[b], bytes) == WEFT_OK);
        be->iface->buffer_free(bg);
        be->iface->buffer_free(bu);
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&o[0][i], &o[1][i], 4) && !(fabsf(o[0][i] - o[1][i]) <= 4e-7f * fabsf(o[1][i]))) bad++;
    CHECK_MSG(bad == 0, "%s sigmoid glu: %zu of %zu beyond a few ulps of the CPU", name, bad, n);
    free(g); free(u); free(o[0]); free(o[1]);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* the GPU backends with a device here */
static int n_devices;
static char devs[2][8];

static void recurrent_layer_matches_cpu_and_replays_on_devices(void)
{
    for (int i = 0; i < n_devices; i++) recurrent_layer_on(devs[i]);
}

static void sigmoid_glu_matches_cpu_on_devices(void)
{
    for (int i = 0; i < n_devices; i++) sigmoid_glu_on(devs[i]);
}

int main(void)
{
    RUN(dn_geometry_covers_every_state_row_once);
    RUN(dn_geometry_splits_rows_finer_when_few_sequences);
    RUN(recurrent_geometry_refuses_what_the_kernels_cannot_take);
    RUN(supports_recurrent_ops_as_the_cpu_and_the_kernels);
    RUN(encode_hands_the_launchers_addresses_and_strides);
    RUN(every_recurrent_field_is_in_the_graph_key);
    RUN(a_bad_state_slot_is_named_at_sync);
    static const char *const names[2] = {"cuda", "hip"};
    for (int i = 0; i < 2; i++) {
        const struct weft_backend_iface *bi = weft_backend_find(names[i]);
        const char *why = NULL;
        struct weft_device_info info[1];
        if (!bi) {
            printf("  %s: not loaded (%s): its device cases skipped\n", names[i], weft_backend_unavailable(names[i]));
        } else if (bi->devices(info, 1, &why) < 1) {
            printf("  %s: no device (%s): its device cases skipped\n", names[i], why ? why : "?");
        } else {
            printf("  %s: %s\n", names[i], info[0].name);
            snprintf(devs[n_devices++], sizeof devs[0], "%s", names[i]);
        }
    }
    if (n_devices) {
        RUN(recurrent_layer_matches_cpu_and_replays_on_devices);
        RUN(sigmoid_glu_matches_cpu_on_devices);
    }
    return check_summary();
}
