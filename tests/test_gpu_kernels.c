/* What the CUDA and HIP backends do beyond single ops (tests/test_backend_ops.c
 * compares every op with the reference on every backend), for the backend
 * named by WEFT_TEST_GPU=cuda|hip (ctest runs it once for each; the HIP
 * kernels run on NVIDIA GPUs when built by nvcc through kernels-hip/hip_to_cuda.h):
 *  - a decode step replayed from a graph (WEFT_<GPU>_GRAPHS=1) gives
 *    bit-identical results to the same steps run without (=0),
 *    step after step while positions, ids and the KV cache change, and
 *    matches the CPU backend;
 *  - split-K attention at long contexts (thousands of positions, GQA, F16
 *    and Q8_0 caches, several sequences) and the one-pass prefill variant
 *    (hundreds of rows) match the CPU backend;
 *  - matmul at the row counts around the decode/prefill switch and tile
 *    edges matches a double-precision reference for every weight type, and
 *    the prefill GEMMs at K, N and R off their tile sizes (CUDA's wmma tiles,
 *    HIP's LDS tiles), with a fused residual that aliases out;
 *  - an impossible allocation returns WEFT_ERR_NOMEM and the backend keeps
 *    working;
 *  - api 5's op fields against the CPU backend: the decode step with every
 *    field set (EMBED scale, q/k/v biases, RoPE freq factors + YaRN +
 *    attn_factor, an attention window, GeGLU) replayed from a graph; MATMUL
 *    bias at a non-zero offset on every matmul path (matrix-vector, float,
 *    tensor-core / LDS GEMM; with and without the residual); sliding windows
 *    at long contexts (split-K and one pass); GeGLU over every F16 gate (bit
 *    for bit); a scaled EMBED (bit for bit); ROPE_KV with freq factors, YaRN
 *    and attn_factor, linear scaling in the CPU's order, partial rotations,
 *    F16 and Q8_0 caches;
 *  - api 7's against the CPU backend: attention sinks (split-K, where the
 *    sink joins in the merge, and one pass; with a window) and latent caches
 *    (v_in_k: V the tail of each K row; head dims past 256) against a double
 *    reference too; ROPE_KV into a latent cache (K rows only, nothing else
 *    written); the clamped SwiGLU (specials and both clamps, to a few ulps);
 *    MOE_ROUTE's gatings (softmax, sigmoid with a choice bias and scale,
 *    softmax over the chosen k); MATMUL_ID for every weight type at batch 1
 *    and 8 in both forms (the unchosen experts' bytes all 0xFF, so reading
 *    one shows), strided x and out, many slots per expert, DeepSeek's
 *    per-head form; and a MoE FFN (route, gate/up, SwiGLU, weighted down)
 *    replayed from a graph bit for bit as eager runs while the routes
 *    change;
 *  - api 10's: ADD's scale, ROPE_KV's q_only and MOE_ROUTE's expert_scale in
 *    one op list replayed from a graph bit for bit as eager runs; ADD bit for
 *    bit as the CPU, q and the weights close to it, k, v and the cache
 *    untouched.
 * Skipped (77) when the module is absent or sees no device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "base/quant.h"
#include "base/rope.h"
#include "kernels-common/launch.h"   /* the matmul path switches (WEFT_GK_MMVQ_*) */
#include "tests/check.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static double nmse_f(const float *a, const float *ref, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) { double d = (double)a[i] - ref[i]; e += d * d; s += (double)ref[i] * ref[i]; }
    return s > 0 ? e / s : e;
}

static struct weft_buffer *up(struct weft_backend *be, const void *data, size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(be->iface->buffer_alloc(be, n, &b) == WEFT_OK);
    if (b && data) CHECK(be->iface->buffer_write(b, 0, data, n) == WEFT_OK);
    return b;
}

static void down(struct weft_backend *be, struct weft_buffer *b, void *dst, size_t n)
{
    CHECK(be->iface->sync(be) == WEFT_OK);
    CHECK(be->iface->buffer_read(b, 0, dst, n) == WEFT_OK);
}

/* WEFT_TEST_GPU_SPEC=cpu runs this file's harness against the CPU backend
 * (checks the test itself on a machine without a GPU) */
static char gpu[16] = "cuda", spec[32] = "cuda:0", graphs_env[48] = "WEFT_CUDA_GRAPHS";

static struct weft_backend *open_gpu(bool graphs)
{
    setenv(graphs_env, graphs ? "1" : "0", 1);   /* graphs are opt-in on ROCm */
    check_env_reapply();
    struct weft_backend *be = NULL;
    if (weft_backend_open(spec, 0, &be) != WEFT_OK) fprintf(stderr, "open %s: %s\n", spec, weft_last_error());
    unsetenv(graphs_env);
    check_env_reapply();
    return be;
}

/* ---- a tiny decode step: embed, norm, q/k/v, rope+cache, attention, o-proj
 * (+residual), norm, gate/up, silu, down (+residual), logits ---- */
enum { E = 256, NH = 4, NKV = 2, HD = 64, FF = 512, V = 300, NL = 1, NBLK = 8, R = 2 };

struct step {
    struct weft_backend *be;
    struct weft_buffer *wq, *wk, *wv, *wo, *wg, *wu, *wd, *emb, *out_w, *norm;
    struct weft_buffer *act, *meta, *cache, *logits;
    struct weft_buffer *bias, *ff;   /* api5 steps: q/k/v biases, RoPE freq factors */
    struct weft_op ops[16];
    size_t n;
};

/* api5: the same step with every api 5 field set (EMBED scale, q/k/v
 * biases at non-zero offsets, RoPE freq factors + YaRN + attn_factor, an
 * attention window shorter than sequence 1's context, GeGLU; and api 6's
 * attention and logits soft-caps) */
static void step_init(struct step *s, struct weft_backend *be, uint64_t seed, bool api5)
{
    memset(s, 0, sizeof *s);
    s->be = be;
    rng = seed;
    float *tmp = malloc(sizeof(float) * FF * E);
    const enum weft_type types[7] = {WEFT_TYPE_Q4_0, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_1, WEFT_TYPE_F16, WEFT_TYPE_Q4_K,
                                     WEFT_TYPE_Q6_K, WEFT_TYPE_Q4_0};
    const int rows[7] = {E, NKV * HD, NKV * HD, E, FF, FF, E}, cols[7] = {E, E, E, E, E, E, FF};
    struct weft_buffer **dst[7] = {&s->wq, &s->wk, &s->wv, &s->wo, &s->wg, &s->wu, &s->wd};
    for (int i = 0; i < 7; i++) {
        size_t rs = weft_row_size(types[i], cols[i]);
        uint8_t *w = malloc(rs * rows[i]);
        for (int r = 0; r < rows[i]; r++) {
            for (int k = 0; k < cols[i]; k++) tmp[k] = frand() * 0.2f;
            if (!weft_quantize_row(types[i], tmp, w + r * rs, cols[i])) {
                for (size_t b = 0; b < rs; b++) w[r * rs + b] = (uint8_t)(frand() * 127 + 128);
                size_t bs = weft_type_get(types[i])->type_size;
                for (size_t b = 0; b < rs / bs; b++) {
                    weft_half d = weft_f32_to_half(0.002f);
                    memcpy(w + r * rs + b * bs + (types[i] == WEFT_TYPE_Q6_K ? 208 : 0), &d, 2);
                    if (types[i] == WEFT_TYPE_Q4_K) memcpy(w + r * rs + b * bs + 2, &d, 2);
                }
            }
        }
        *dst[i] = up(be, w, rs * rows[i]);
        free(w);
    }
    float *e = malloc(sizeof(float) * V * E);
    for (int i = 0; i < V * E; i++) e[i] = frand();
    s->emb = up(be, e, sizeof(float) * V * E);
    for (int i = 0; i < V * E; i++) e[i] = frand() * 0.1f;
    s->out_w = up(be, e, sizeof(float) * V * E);
    for (int i = 0; i < E; i++) e[i] = 1.0f + 0.1f * frand();
    s->norm = up(be, e, sizeof(float) * E);
    free(e);
    free(tmp);
    s->act = up(be, NULL, sizeof(float) * R * (4 * E + 2 * NKV * HD + 3 * FF));
    s->meta = up(be, NULL, 4 * 64);
    s->cache = up(be, NULL, (size_t)NBLK * NL * 2 * WEFT_KV_BLOCK_TOKENS * NKV * HD * 2);
    s->logits = up(be, NULL, sizeof(float) * R * V);
    if (api5) {
        /* biases of q, k, v at floats 5, 5 + E, 5 + E + NKV*HD */
        float bias[5 + E + 2 * NKV * HD], ff[HD / 2];
        for (int i = 0; i < 5 + E + 2 * NKV * HD; i++) bias[i] = frand() * 0.5f;
        for (int i = 0; i < HD / 2; i++) ff[i] = 1.0f + 8.0f * (0.5f + 0.5f * frand());
        s->bias = up(be, bias, sizeof bias);
        s->ff = up(be, ff, sizeof ff);
    }

    size_t o = 0, f = sizeof(float);
    size_t ox = o; o += R * E * f;
    size_t oxb = o; o += R * E * f;
    size_t oq = o; o += R * E * f;
    size_t oatt = o; o += R * E * f;
    size_t ok = o; o += R * NKV * HD * f;
    size_t ov = o; o += R * NKV * HD * f;
    size_t og = o; o += R * FF * f;
    size_t ou = o; o += R * FF * f;
    size_t oh = o;
#define A(off, cols) weft_view_2d(s->act, off, WEFT_TYPE_F32, cols, R)
#define M(idx, n) weft_view_2d(s->meta, (idx) * 16, WEFT_TYPE_I32, n, 1)
    /* meta (int32): ids@0, pos@16, seq@32, slot@48, bt_off@64, bt@80 (6), rows@112 bytes */
    struct weft_kv_view kv = {s->cache, WEFT_TYPE_F16, NL, 0, NKV, HD, 0, false};
    struct weft_batch_view batch = {R, 2, M(1, R), M(2, R), M(3, R), M(4, 2), weft_view_2d(s->meta, 80, WEFT_TYPE_I32, 6, 1)};
    struct weft_op *op = s->ops;
    op->kind = WEFT_OP_EMBED;
    op->u.embed = (struct weft_op_embed){weft_view_2d(s->emb, 0, WEFT_TYPE_F32, E, V), M(0, R), A(ox, E),
                                         api5 ? 2.5f : 0.0f};
    (++op)->kind = WEFT_OP_RMSNORM;
    op->u.rmsnorm = (struct weft_op_rmsnorm){.x = A(ox, E), .w = weft_view_2d(s->norm, 0, WEFT_TYPE_F32, E, 1),
                                             .out = A(oxb, E), .eps = 1e-5f};
#define MM(W, T, K, N, X, OUT, ADD) do { (++op)->kind = WEFT_OP_MATMUL; \
    op->u.matmul = (struct weft_op_matmul){.x = X, .w = weft_view_2d(W, 0, T, K, N), .out = OUT, .add = OUT, .has_add = ADD}; } while (0)
    MM(s->wq, WEFT_TYPE_Q4_0, E, E, A(oxb, E), A(oq, E), false);
    MM(s->wk, WEFT_TYPE_Q8_0, E, NKV * HD, A(oxb, E), A(ok, NKV * HD), false);
    MM(s->wv, WEFT_TYPE_Q4_1, E, NKV * HD, A(oxb, E), A(ov, NKV * HD), false);
    if (api5) {
        const size_t boff[3] = {5, 5 + E, 5 + E + NKV * HD};
        const int64_t bn[3] = {E, NKV * HD, NKV * HD};
        for (int i = 0; i < 3; i++) {
            op[i - 2].u.matmul.bias = weft_view_2d(s->bias, boff[i] * sizeof(float), WEFT_TYPE_F32, bn[i], 1);
            op[i - 2].u.matmul.has_bias = true;
        }
    }
    (++op)->kind = WEFT_OP_ROPE_KV;
    op->u.rope_kv = (struct weft_op_rope_kv){.q = A(oq, E), .k = A(ok, NKV * HD), .v = A(ov, NKV * HD), .kv = kv,
                                             .batch = batch, .n_head = NH, .n_rot = HD, .freq_base = 10000.0f,
                                             .freq_scale = 1.0f, .mode = WEFT_ROPE_NORMAL};
    if (api5) {
        struct weft_op_rope_kv *o = &op->u.rope_kv;
        o->mode = WEFT_ROPE_NEOX;
        o->freq_scale = 0.3f;
        o->freq_factors = weft_view_2d(s->ff, 0, WEFT_TYPE_F32, HD / 2, 1);
        o->has_freq_factors = true;
        o->ext_factor = 1.0f;
        o->attn_factor = 0.9f;
        weft_rope_yarn_corr_dims(HD, 32, 10000.0f, 32.0f, 1.0f, o->corr_dims);
    }
    (++op)->kind = WEFT_OP_ATTENTION;
    op->u.attention = (struct weft_op_attention){A(oq, E), A(oatt, E), kv, batch, NH, 0.125f, api5 ? 20 : 0,
                                                 api5 ? 0.5f : 0.0f, {0}, false};  /* api 6's soft-cap with api 5's fields */
    MM(s->wo, WEFT_TYPE_F16, E, E, A(oatt, E), A(ox, E), true);
    (++op)->kind = WEFT_OP_RMSNORM;
    op->u.rmsnorm = (struct weft_op_rmsnorm){.x = A(ox, E), .w = weft_view_2d(s->norm, 0, WEFT_TYPE_F32, E, 1),
                                             .out = A(oxb, E), .eps = 1e-5f};
    MM(s->wg, WEFT_TYPE_Q4_K, E, FF, A(oxb, E), A(og, FF), false);
    MM(s->wu, WEFT_TYPE_Q6_K, E, FF, A(oxb, E), A(ou, FF), false);
    (++op)->kind = WEFT_OP_SILU_MUL;
    op->u.silu_mul = (struct weft_op_silu_mul){A(og, FF), A(ou, FF), A(oh, FF),
                                               api5 ? WEFT_GLU_GELU_TANH : WEFT_GLU_SILU, 0, 0};
    MM(s->wd, WEFT_TYPE_Q4_0, FF, E, A(oh, FF), A(ox, E), true);
    (++op)->kind = WEFT_OP_LOGITS;
    op->u.logits = (struct weft_op_logits){A(ox, E), M(7, R), weft_view_2d(s->norm, 0, WEFT_TYPE_F32, E, 1),
                                           weft_view_2d(s->out_w, 0, WEFT_TYPE_F32, E, V),
                                           weft_view_2d(s->logits, 0, WEFT_TYPE_F32, V, R), 1e-5f, api5 ? 2.0f : 0.0f};
    s->n = (size_t)(op - s->ops) + 1;
#undef A
#undef M
#undef MM
}

/* step t: sequence 0 at position t (blocks {3, 5}), sequence 1 at 40 + t (blocks {0, 6, 2, 7}) */
static bool step_run(struct step *s, int t, float *logits)
{
    int32_t meta[64] = {0};
    int32_t bt[6] = {3, 5, 0, 6, 2, 7};
    int32_t pos[2] = {t, 40 + t};
    meta[0] = (t * 7) % V; meta[1] = (t * 13 + 5) % V;
    meta[4] = pos[0]; meta[5] = pos[1];
    meta[8] = 0; meta[9] = 1;
    meta[12] = bt[pos[0] / 16] * 16 + pos[0] % 16;
    meta[13] = bt[2 + pos[1] / 16] * 16 + pos[1] % 16;
    meta[16] = 0; meta[17] = 2;
    memcpy(meta + 20, bt, sizeof bt);
    meta[28] = 0; meta[29] = 1;  /* rows at 112 bytes */
    const struct weft_backend_iface *bi = s->be->iface;
    if (bi->buffer_write(s->meta, 0, meta, sizeof meta) != WEFT_OK) return false;
    for (size_t i = 0; i < s->n; i++)
        if (!bi->supports(s->be, &s->ops[i])) { fprintf(stderr, "op %zu unsupported\n", i); return false; }
    if (bi->run(s->be, s->ops, s->n) != WEFT_OK) { fprintf(stderr, "run: %s\n", weft_last_error()); return false; }
    down(s->be, s->logits, logits, sizeof(float) * R * V);
    return true;
}

static void step_free(struct step *s)
{
    struct weft_buffer *all[] = {s->wq, s->wk, s->wv, s->wo, s->wg, s->wu, s->wd, s->emb, s->out_w, s->norm,
                                 s->act, s->meta, s->cache, s->logits, s->bias, s->ff};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) s->be->iface->buffer_free(all[i]);
}

static void steps_graph_eager_cpu(bool api5)
{
    struct weft_backend *g = open_gpu(true), *e = open_gpu(false), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!g || !e || !cpu) return;
    struct step sg, se, sc;
    step_init(&sg, g, 77, api5);
    step_init(&se, e, 77, api5);
    step_init(&sc, cpu, 77, api5);
    static float lg[R * V], le[R * V], lc[R * V];
    for (int t = 0; t < 24; t++) {   /* crosses a block boundary of sequence 0 at t = 16 */
        CHECK(step_run(&sg, t, lg));
        CHECK(step_run(&se, t, le));
        CHECK(step_run(&sc, t, lc));
        CHECK_MSG(memcmp(lg, le, sizeof lg) == 0, "step %d: graph replay differs from eager run", t);
        double d = nmse_f(lg, lc, R * V);
        CHECK_MSG(d < 1e-3, "step %d: %s vs cpu logits nmse %.3g", t, gpu, d);
        if (t == 0 || t == 23) printf("  %sstep %d: %s vs cpu nmse %.3g\n", api5 ? "api 5 " : "", t, gpu, d);
    }
    step_free(&sg); step_free(&se); step_free(&sc);
    weft_backend_close(g); weft_backend_close(e); weft_backend_close(cpu);
}

static void graph_replay_equals_eager_steps(void) { steps_graph_eager_cpu(false); }

/* the same with api 5's fields: the graph keyed on them, the kernels honouring them */
static void graph_replay_with_api5_fields(void) { steps_graph_eager_cpu(true); }

/* ATTENTION alone over a cache filled with random K/V: rows of three
 * sequences (long decodes and a prefill chunk), the GPU against the CPU.
 * window > 0: a row at position p attends p - window < j <= p only.
 * api 7 (attention_case_x): sinks, a logit per head (one more position with
 * no value row); latent_hdv > 0: a latent cache (v_in_k, one KV head), K
 * rows only, each position's V the last latent_hdv values of its K row. */
static void attention_case_x(struct weft_backend *hb, struct weft_backend *cpu, enum weft_type kvt, int n_head,
                             int n_kv, int hd, int latent_hdv, bool sinks, const int *seq_len, int n_seq,
                             int prefill_rows, uint32_t window, double tol)
{
    const int nl = 2, layer = 1, hdv = latent_hdv ? latent_hdv : hd;
    int n_blocks_total = 0, bt_n = 0;
    int32_t *bt_off = calloc(n_seq, 4);
    for (int s = 0; s < n_seq; s++) n_blocks_total += (seq_len[s] + 15) / 16;
    int32_t *bt = malloc(4 * n_blocks_total);
    /* blocks handed out in a scrambled order */
    for (int i = 0; i < n_blocks_total; i++) bt[i] = (int32_t)((i * 7919) % n_blocks_total);
    for (int s = 0; s < n_seq; s++) { bt_off[s] = bt_n; bt_n += (seq_len[s] + 15) / 16; }
    /* rows: the last position of each sequence, then prefill_rows positions ending at seq 0's last */
    int nrows = n_seq + prefill_rows;
    int32_t *pos = malloc(4 * nrows), *seq = malloc(4 * nrows), *slot = malloc(4 * nrows);
    for (int r = 0; r < nrows; r++) {
        seq[r] = r < n_seq ? r : 0;
        pos[r] = r < n_seq ? seq_len[r] - 1 : seq_len[0] - prefill_rows + (r - n_seq) - 1;
        slot[r] = bt[bt_off[seq[r]] + pos[r] / 16] * 16 + pos[r] % 16;
    }
    /* a block's layer part: 16 K rows, then (not latent) 16 V rows, each tok bytes */
    size_t tok = weft_row_size(kvt, (int64_t)n_kv * hd), layer_bytes = tok * 16 * (latent_hdv ? 1 : 2);
    size_t cache_bytes = (size_t)n_blocks_total * nl * layer_bytes;
    uint8_t *cache = malloc(cache_bytes);
    float *tmp = malloc(sizeof(float) * n_kv * hd);
    for (size_t t = 0; t < cache_bytes / tok; t++) {
        for (int i = 0; i < n_kv * hd; i++) tmp[i] = frand();
        weft_quantize_row(kvt, tmp, cache + t * tok, (int64_t)n_kv * hd);
    }
    free(tmp);
    size_t qn = (size_t)nrows * n_head * hd, on = (size_t)nrows * n_head * hdv;
    float *q = malloc(sizeof(float) * qn), *oc = malloc(sizeof(float) * on), *og = malloc(sizeof(float) * on);
    float *snk = malloc(sizeof(float) * (n_head + 3));
    for (size_t i = 0; i < qn; i++) q[i] = frand() * 2;
    for (int i = 0; i < n_head + 3; i++) snk[i] = i < 3 ? 1e30f : frand() * 8;   /* the sinks at float 3 */
    struct weft_backend *bes[2] = {hb, cpu};
    float *outs[2] = {og, oc};
    for (int k = 0; k < 2; k++) {
        struct weft_backend *be = bes[k];
        struct weft_buffer *bc = up(be, cache, cache_bytes), *bq = up(be, q, sizeof(float) * qn);
        struct weft_buffer *bo = up(be, NULL, sizeof(float) * on), *bp = up(be, pos, 4 * nrows);
        struct weft_buffer *bs = up(be, seq, 4 * nrows), *bsl = up(be, slot, 4 * nrows);
        struct weft_buffer *bbo = up(be, bt_off, 4 * n_seq), *bbt = up(be, bt, 4 * n_blocks_total);
        struct weft_buffer *bsk = up(be, snk, sizeof(float) * (n_head + 3));
        struct weft_op op = {.kind = WEFT_OP_ATTENTION};
        op.u.attention = (struct weft_op_attention){
            weft_view_2d(bq, 0, WEFT_TYPE_F32, n_head * hd, nrows), weft_view_2d(bo, 0, WEFT_TYPE_F32, n_head * hdv, nrows),
            {bc, kvt, nl, layer, n_kv, hd, latent_hdv, latent_hdv > 0},
            {nrows, n_seq, weft_view_2d(bp, 0, WEFT_TYPE_I32, nrows, 1), weft_view_2d(bs, 0, WEFT_TYPE_I32, nrows, 1),
             weft_view_2d(bsl, 0, WEFT_TYPE_I32, nrows, 1), weft_view_2d(bbo, 0, WEFT_TYPE_I32, n_seq, 1),
             weft_view_2d(bbt, 0, WEFT_TYPE_I32, n_blocks_total, 1)},
            n_head, 1.0f / sqrtf((float)hd), window, 0.0f,
            weft_view_2d(bsk, 3 * sizeof(float), WEFT_TYPE_F32, n_head, 1), sinks};
        CHECK(be->iface->supports(be, &op));
        CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
        down(be, bo, outs[k], sizeof(float) * on);
        struct weft_buffer *all[] = {bc, bq, bo, bp, bs, bsl, bbo, bbt, bsk};
        for (int i = 0; i < 9; i++) be->iface->buffer_free(all[i]);
    }
    /* double-precision reference over the dequantized cache */
    float *ref = malloc(sizeof(float) * on), *kr = malloc(sizeof(float) * hd), *vr = malloc(sizeof(float) * hd);
    double *sc = malloc(sizeof(double) * seq_len[0] * 2), *acc = malloc(sizeof(double) * hdv);
    const int group = n_head / n_kv;
    const size_t head_bytes = weft_row_size(kvt, hd), head_bytes_v = weft_row_size(kvt, hdv);
    for (int r = 0; r < nrows; r++)
        for (int h = 0; h < n_head; h++) {
            const float *qh = q + ((size_t)r * n_head + h) * hd;
            const double sink = snk[3 + h];
            double mx = sinks ? sink : -1e300, sum = 0;
            const int p0 = window && (uint32_t)pos[r] >= window ? pos[r] - (int)window + 1 : 0;
            for (int p = p0; p <= pos[r]; p++) {
                size_t sl = (size_t)bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                size_t off = ((sl / 16) * nl + layer) * layer_bytes + (sl % 16) * tok + (size_t)(h / group) * head_bytes;
                weft_dequantize_row(kvt, cache + off, kr, hd);
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * kr[i];
                sc[p] = d / sqrt((double)hd);
                if (sc[p] > mx) mx = sc[p];
            }
            for (int i = 0; i < hdv; i++) acc[i] = 0;
            if (sinks) sum = exp(sink - mx);
            for (int p = p0; p <= pos[r]; p++) {
                size_t sl = (size_t)bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                size_t row = ((sl / 16) * nl + layer) * layer_bytes + (sl % 16) * tok;
                size_t off = latent_hdv ? row + weft_row_size(kvt, hd - hdv)   /* the K row's tail */
                                        : row + 16 * tok + (size_t)(h / group) * head_bytes_v;
                weft_dequantize_row(kvt, cache + off, vr, hdv);
                double w = exp(sc[p] - mx);
                sum += w;
                for (int i = 0; i < hdv; i++) acc[i] += w * vr[i];
            }
            for (int i = 0; i < hdv; i++) ref[((size_t)r * n_head + h) * hdv + i] = (float)(acc[i] / sum);
        }
    double e = nmse_f(og, ref, on), ec = nmse_f(oc, ref, on);
    printf("  attention %s heads %d/%d hd %d", weft_type_name(kvt), n_head, n_kv, hd);
    if (latent_hdv) printf(" (latent: V the K rows' last %d)", hdv);
    if (sinks) printf(" + sinks");
    printf(", %d seqs (longest %d), %d prefill rows, window %u: nmse %s %.3g, cpu %.3g\n", n_seq, seq_len[0],
           prefill_rows, window, gpu, e, ec);
    if (!strncmp(spec, "cpu", 3)) tol = 1e-3;   /* harness check: the CPU accumulates in F16 */
    CHECK_MSG(e < tol, "%s attention nmse %.3g >= %.3g", gpu, e, tol);
    /* the CPU rounds q (and, for F16 caches, its accumulator) to F16 as
     * ggml does, so it is only close; the two must still agree */
    CHECK_MSG(nmse_f(og, oc, on) < 1e-3, "%s vs cpu attention nmse %.3g", gpu, nmse_f(og, oc, on));
    free(ref); free(kr); free(vr); free(sc); free(acc); free(snk);
    free(bt_off); free(bt); free(pos); free(seq); free(slot); free(cache); free(q); free(oc); free(og);
}

static void attention_case(struct weft_backend *hb, struct weft_backend *cpu, enum weft_type kvt, int n_head, int n_kv,
                           int hd, const int *seq_len, int n_seq, int prefill_rows, uint32_t window, double tol)
{
    attention_case_x(hb, cpu, kvt, n_head, n_kv, hd, 0, false, seq_len, n_seq, prefill_rows, window, tol);
}

static void split_k_attention_matches_cpu_at_long_contexts(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    const int lens1[] = {4000}, lens3[] = {3001, 700, 17};
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 2, 128, lens1, 1, 0, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 2, 128, lens3, 3, 0, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 32, 8, 64, lens3, 3, 0, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_Q8_0, 8, 2, 128, lens3, 3, 0, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 4, 8, lens3, 3, 0, 0, 1e-8);   /* stories260K's head_dim */
    /* a prefill chunk big enough for the one-pass (no split) variant */
    const int lensp[] = {600, 40};
    attention_case(hb, cpu, WEFT_TYPE_F16, 16, 4, 128, lensp, 2, 320, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_Q8_0, 16, 4, 64, lensp, 2, 320, 0, 1e-8);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* Sliding windows (gemma's, mistral's) at long contexts: the split-K decode
 * over the attended range only, windows of one position, of a block edge,
 * off block edges, equal to and past the context; the one-pass prefill
 * with windows starting mid-block in each row. */
static void sliding_windows_at_long_contexts(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    const int lens1[] = {4000}, lens3[] = {3001, 700, 17};
    const uint32_t w1[] = {1, 16, 33, 512, 1000, 3999, 4000, 4096, 100000};
    for (size_t i = 0; i < sizeof w1 / sizeof w1[0]; i++)
        attention_case(hb, cpu, WEFT_TYPE_F16, 8, 2, 128, lens1, 1, 0, w1[i], 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 32, 8, 64, lens3, 3, 0, 700, 1e-8);   /* 700: all of seq 1, 17 */
    attention_case(hb, cpu, WEFT_TYPE_Q8_0, 8, 2, 128, lens3, 3, 0, 257, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 4, 8, lens3, 3, 0, 4096, 1e-8);
    const int lensp[] = {600, 40};
    attention_case(hb, cpu, WEFT_TYPE_F16, 16, 4, 128, lensp, 2, 320, 128, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_Q8_0, 16, 4, 64, lensp, 2, 320, 37, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 16, 4, 64, lensp, 2, 320, 1, 1e-8);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* out = x · Wᵀ (+ bias, when cpu: api 5's bias, N floats at a non-zero
 * offset of their buffer) (+ out, when with_add: the fused residual aliasing
 * out) for each row count in Rs, against a double-precision reference over
 * the dequantized weights, and with a bias also against the CPU backend */
static void matmul_case_b(struct weft_backend *hb, struct weft_backend *cpu, enum weft_type t, int64_t K, int64_t N,
                          const int64_t *Rs, size_t nR, bool with_add)
{
    size_t rs = weft_row_size(t, K);
    uint8_t *w = malloc(rs * N);
    float *wd = malloc(sizeof(float) * N * K), *tmp = malloc(sizeof(float) * K);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) tmp[k] = frand();
        if (!weft_quantize_row(t, tmp, w + n * rs, K)) {
            for (size_t b = 0; b < rs; b++) w[n * rs + b] = (uint8_t)(frand() * 127 + 128);
            size_t bs = weft_type_get(t)->type_size;
            for (size_t b = 0; b < rs / bs; b++) {
                weft_half d = weft_f32_to_half(0.01f), dm = weft_f32_to_half(0.005f);
                if (t == WEFT_TYPE_Q6_K) memcpy(w + n * rs + b * bs + 208, &d, 2);
                else { memcpy(w + n * rs + b * bs, &d, 2); memcpy(w + n * rs + b * bs + 2, &dm, 2); }
            }
        }
        weft_dequantize_row(t, w + n * rs, wd + n * K, K);
    }
    struct weft_buffer *bw = up(hb, w, rs * N), *cw = NULL, *bb = NULL, *cb = NULL;
    enum { BIAS_AT = 7 };   /* floats before the bias in its buffer */
    float *bias = NULL;
    if (cpu) {
        bias = malloc(sizeof(float) * (BIAS_AT + N));
        for (int64_t i = 0; i < BIAS_AT + N; i++) bias[i] = i < BIAS_AT ? 1e30f : frand() * 4;
        bb = up(hb, bias, sizeof(float) * (BIAS_AT + N));
        cb = up(cpu, bias, sizeof(float) * (BIAS_AT + N));
        cw = up(cpu, w, rs * N);
    }
    for (size_t ri = 0; ri < nR; ri++) {
        int64_t Rr = Rs[ri];
        float *x = malloc(sizeof(float) * Rr * K), *out = malloc(sizeof(float) * Rr * N), *ref = malloc(sizeof(float) * Rr * N);
        float *res = malloc(sizeof(float) * Rr * N);
        for (int64_t i = 0; i < Rr * K; i++) x[i] = frand();
        for (int64_t i = 0; i < Rr * N; i++) res[i] = with_add ? frand() : 0.0f;
        for (int64_t r = 0; r < Rr; r++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)x[r * K + k] * wd[n * K + k];
                if (bias) s += bias[BIAS_AT + n];
                ref[r * N + n] = (float)(s + res[r * N + n]);
            }
        struct weft_buffer *bx = up(hb, x, sizeof(float) * Rr * K), *bo = up(hb, res, sizeof(float) * Rr * N);
        struct weft_op op = {.kind = WEFT_OP_MATMUL};
        op.u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, Rr),
                                              .w = weft_view_2d(bw, 0, t, K, N),
                                              .out = weft_view_2d(bo, 0, WEFT_TYPE_F32, N, Rr),
                                              .add = weft_view_2d(bo, 0, WEFT_TYPE_F32, N, Rr),
                                              .has_add = with_add};
        if (bias) {
            op.u.matmul.bias = weft_view_2d(bb, BIAS_AT * sizeof(float), WEFT_TYPE_F32, N, 1);
            op.u.matmul.has_bias = true;
        }
        CHECK(hb->iface->supports(hb, &op));
        CHECK(hb->iface->run(hb, &op, 1) == WEFT_OK);
        down(hb, bo, out, sizeof(float) * Rr * N);
        double e = nmse_f(out, ref, Rr * N);
        double tol = t == WEFT_TYPE_F32 ? 1e-10 : t == WEFT_TYPE_F16 || t == WEFT_TYPE_BF16 ? 1e-5 : 2e-4;
        CHECK_MSG(e < tol, "matmul %s K%lld N%lld R%lld%s%s: nmse %.3g", weft_type_name(t), (long long)K,
                  (long long)N, (long long)Rr, bias ? " +bias" : "", with_add ? " +add" : "", e);
        if (cpu) {
            /* the CPU backend over the same op */
            struct weft_buffer *cx = up(cpu, x, sizeof(float) * Rr * K), *co = up(cpu, res, sizeof(float) * Rr * N);
            float *oc = malloc(sizeof(float) * Rr * N);
            struct weft_op c = op;
            c.u.matmul.x.buf = cx;
            c.u.matmul.w.buf = cw;
            c.u.matmul.out.buf = co;
            c.u.matmul.add.buf = co;
            c.u.matmul.bias.buf = cb;
            CHECK(cpu->iface->supports(cpu, &c));
            CHECK(cpu->iface->run(cpu, &c, 1) == WEFT_OK);
            down(cpu, co, oc, sizeof(float) * Rr * N);
            double ecpu = nmse_f(out, oc, Rr * N);
            /* the CPU multiplies quantized weights with Q8 activations (as ggml) */
            CHECK_MSG(ecpu < 4 * tol, "matmul %s K%lld N%lld R%lld +bias%s: %s vs cpu nmse %.3g",
                      weft_type_name(t), (long long)K, (long long)N, (long long)Rr, with_add ? " +add" : "", gpu,
                      ecpu);
            cpu->iface->buffer_free(cx); cpu->iface->buffer_free(co);
            free(oc);
        }
        hb->iface->buffer_free(bx); hb->iface->buffer_free(bo);
        free(x); free(out); free(ref); free(res);
    }
    hb->iface->buffer_free(bw);
    if (cpu) {
        hb->iface->buffer_free(bb);
        cpu->iface->buffer_free(cb); cpu->iface->buffer_free(cw);
    }
    free(w); free(wd); free(tmp); free(bias);
}

static void matmul_case(struct weft_backend *hb, enum weft_type t, int64_t K, int64_t N, const int64_t *Rs, size_t nR,
                        bool with_add)
{
    matmul_case_b(hb, NULL, t, K, N, Rs, nR, with_add);
}

static void matmul_row_counts_around_path_switches(void)
{
    struct weft_backend *hb = open_gpu(true);
    if (!hb) return;
    static const enum weft_type types[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0,
                                           WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1, WEFT_TYPE_Q4_K,
                                           WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K};
    static const int64_t Rs[] = {2, 5, 8, 9, 17, 65, 130};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        matmul_case(hb, types[ti], 512, 200, Rs, sizeof Rs / sizeof Rs[0], false);
    weft_backend_close(hb);
}

/* The prefill GEMMs' tails: K not a multiple of a 32-wide k step (float
 * weights), N and R off a 64 x 64 tile, a fused residual that aliases out. */
static void gemm_tails_and_fused_add(void)
{
    struct weft_backend *hb = open_gpu(true);
    if (!hb) return;
    static const int64_t Rs[] = {9, 64, 77};
    matmul_case(hb, WEFT_TYPE_F16, 40, 65, Rs, 3, false);
    matmul_case(hb, WEFT_TYPE_F16, 1000, 129, Rs, 3, true);
    matmul_case(hb, WEFT_TYPE_Q4_K, 768, 63, Rs, 3, true);
    matmul_case(hb, WEFT_TYPE_Q8_0, 96, 1, Rs, 3, true);
    static const int64_t Rd[] = {1, 3, 8};   /* decode paths with the fused add */
    matmul_case(hb, WEFT_TYPE_Q5_1, 256, 70, Rd, 3, true);
    matmul_case(hb, WEFT_TYPE_BF16, 200, 70, Rd, 3, true);
    weft_backend_close(hb);
}

/* MATMUL's bias on every path (launch_matmul.cuh): quantized weights at
 * R <= WEFT_GK_MMVQ_MAX_ROWS take the Q8_1 matrix-vector kernel (one
 * launch, or several of WEFT_GK_MMVQ_ROWS rows), above it the GEMM; F16
 * the float kernel up to WEFT_GK_MMVQ_ROWS rows, then the GEMM; F32 and
 * BF16 the float kernel at every R. N off the tiles; with and without the
 * residual aliasing out. */
static void matmul_bias_on_every_path(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    static const int64_t Rq[] = {1, 2, 4, WEFT_GK_MMVQ_ROWS, WEFT_GK_MMVQ_ROWS + 1, 65, WEFT_GK_MMVQ_MAX_ROWS,
                                 WEFT_GK_MMVQ_MAX_ROWS + 1, 200};
    static const int64_t Rf[] = {1, 3, WEFT_GK_MMVQ_ROWS, WEFT_GK_MMVQ_ROWS + 1, 64, 77, 130};
    static const enum weft_type tq[] = {WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0, WEFT_TYPE_Q5_1, WEFT_TYPE_Q4_K,
                                        WEFT_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof tq / sizeof tq[0]; i++) {
        matmul_case_b(hb, cpu, tq[i], 256, 70, Rq, sizeof Rq / sizeof Rq[0], false);
        matmul_case_b(hb, cpu, tq[i], 512, 65, Rq, sizeof Rq / sizeof Rq[0], true);
    }
    static const enum weft_type tf[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16};
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++) {
        matmul_case_b(hb, cpu, tf[i], 200, 70, Rf, sizeof Rf / sizeof Rf[0], false);
        matmul_case_b(hb, cpu, tf[i], 96, 129, Rf, sizeof Rf / sizeof Rf[0], true);
    }
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* the same float bits, or both NaN */
static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0 || (a != a && b != b); }

/* SILU_MUL with act GeLU-tanh (ggml's F16-table GeGLU) over every F16 value
 * as the gate (infinities and NaNs included), up = 1 and then random, the
 * GPU against the CPU bit for bit. */
static void geglu_over_every_f16_gate(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    enum { GR = 16, GK = 4096 };   /* GR * GK = 65536 gates */
    const size_t n = (size_t)GR * GK, bytes = sizeof(float) * n;
    float *g = malloc(bytes), *u = malloc(bytes), *og = malloc(bytes), *oc = malloc(bytes);
    for (size_t i = 0; i < n; i++) g[i] = weft_half_to_f32((weft_half)i);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) u[i] = pass ? frand() * 3 : 1.0f;
        struct weft_backend *bes[2] = {hb, cpu};
        float *outs[2] = {og, oc};
        for (int b = 0; b < 2; b++) {
            struct weft_backend *be = bes[b];
            struct weft_buffer *bg = up(be, g, bytes), *bu = up(be, u, bytes), *bo = up(be, NULL, bytes);
            struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
            op.u.silu_mul = (struct weft_op_silu_mul){weft_view_2d(bg, 0, WEFT_TYPE_F32, GK, GR),
                                                      weft_view_2d(bu, 0, WEFT_TYPE_F32, GK, GR),
                                                      weft_view_2d(bo, 0, WEFT_TYPE_F32, GK, GR), WEFT_GLU_GELU_TANH, 0, 0};
            CHECK(be->iface->supports(be, &op));
            CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
            down(be, bo, outs[b], bytes);
            be->iface->buffer_free(bg); be->iface->buffer_free(bu); be->iface->buffer_free(bo);
        }
        size_t diff = 0, first = n;
        for (size_t i = 0; i < n; i++)
            if (!same_bits(og[i], oc[i])) { diff++; if (first == n) first = i; }
        CHECK_MSG(diff == 0, "geglu pass %d: %zu of %zu differ (first: gate %a up %a: %s %a, cpu %a)", pass, diff, n,
                  first < n ? g[first] : 0.0f, first < n ? u[first] : 0.0f, gpu, first < n ? og[first] : 0.0f,
                  first < n ? oc[first] : 0.0f);
        printf("  geglu pass %d: %zu of %zu differ\n", pass, diff, n);
    }
    free(g); free(u); free(og); free(oc);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* EMBED with a scale (gemma's sqrt(n_embd), a negative one): dequant(row) *
 * scale in F32, bit for bit as the CPU and as this file's dequantization */
static void scaled_embed_bit_for_bit(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    enum { EE = 512, EV = 37, ER = 9 };
    static const enum weft_type types[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0,
                                           WEFT_TYPE_Q4_K, WEFT_TYPE_Q6_K};
    static const float scales[] = {45.254834f, -0.37f};
    const int32_t ids[ER] = {0, 36, 5, 5, 17, 1, 35, 0, 20};
    float *tmp = malloc(sizeof(float) * EE), *ref = malloc(sizeof(float) * ER * EE);
    float *og = malloc(sizeof(float) * ER * EE), *oc = malloc(sizeof(float) * ER * EE);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const enum weft_type t = types[ti];
        const size_t rs = weft_row_size(t, EE);
        uint8_t *table = malloc(rs * EV);
        for (int r = 0; r < EV; r++) {
            for (int i = 0; i < EE; i++) tmp[i] = frand() * 2;
            uint8_t *row = table + r * rs;
            if (!weft_quantize_row(t, tmp, row, EE)) {   /* K-quants: random blocks with set scales */
                for (size_t b = 0; b < rs; b++) row[b] = (uint8_t)(frand() * 127 + 128);
                const size_t bs = weft_type_get(t)->type_size;
                for (size_t b = 0; b < rs / bs; b++) {
                    weft_half d = weft_f32_to_half(0.01f), dm = weft_f32_to_half(0.005f);
                    if (t == WEFT_TYPE_Q6_K) memcpy(row + b * bs + 208, &d, 2);
                    else { memcpy(row + b * bs, &d, 2); memcpy(row + b * bs + 2, &dm, 2); }
                }
            }
        }
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            for (int r = 0; r < ER; r++) {
                weft_dequantize_row(t, table + (size_t)ids[r] * rs, tmp, EE);
                for (int i = 0; i < EE; i++) ref[r * EE + i] = tmp[i] * scales[si];
            }
            struct weft_backend *bes[2] = {hb, cpu};
            float *outs[2] = {og, oc};
            for (int b = 0; b < 2; b++) {
                struct weft_backend *be = bes[b];
                struct weft_buffer *bt = up(be, table, rs * EV), *bi = up(be, ids, sizeof ids);
                struct weft_buffer *bo = up(be, NULL, sizeof(float) * ER * EE);
                struct weft_op op = {.kind = WEFT_OP_EMBED};
                op.u.embed = (struct weft_op_embed){weft_view_2d(bt, 0, t, EE, EV),
                                                    weft_view_2d(bi, 0, WEFT_TYPE_I32, ER, 1),
                                                    weft_view_2d(bo, 0, WEFT_TYPE_F32, EE, ER), scales[si]};
                CHECK(be->iface->supports(be, &op));
                CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
                down(be, bo, outs[b], sizeof(float) * ER * EE);
                be->iface->buffer_free(bt); be->iface->buffer_free(bi); be->iface->buffer_free(bo);
            }
            CHECK_MSG(memcmp(og, oc, sizeof(float) * ER * EE) == 0, "embed %s scale %g: %s differs from the cpu",
                      weft_type_name(t), scales[si], gpu);
            CHECK_MSG(memcmp(og, ref, sizeof(float) * ER * EE) == 0,
                      "embed %s scale %g: %s differs from dequant * scale", weft_type_name(t), scales[si], gpu);
        }
        free(table);
    }
    free(tmp); free(ref); free(og); free(oc);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* One ROPE_KV case: q, k, v of RR rows at positions up to 131000 rotated
 * and written into the cache (F16 or Q8_0) by the GPU and by the CPU; q and
 * k compared (the device's cosf/sinf may differ from glibc's by an ulp, the
 * angles are the same float operations), the cache rows dequantized and
 * compared. Also: the case's scaling changes the result (the CPU without
 * the fields differs), so a backend ignoring a field cannot pass. */
struct rope_case {
    const char *name;
    enum weft_type kvt;
    enum weft_rope_mode mode;
    uint32_t n_rot;             /* of HDR */
    float freq_scale;
    bool ff;                    /* freq_factors */
    float ext_factor, attn_factor;
    uint32_t n_ctx_orig;        /* YaRN's corr dims (base/rope.h) */
};

static void rope_run(struct weft_backend *be, const struct rope_case *c, const float *ffv, const float *q,
                     const float *k, const float *v, const int32_t *meta, size_t meta_n, size_t cache_bytes,
                     bool scaled, float *qo, float *ko, uint8_t *cache)
{
    enum { RR = 6, NHR = 8, NKVR = 2, HDR = 128, NLR = 2 };
    struct weft_buffer *bq = up(be, q, sizeof(float) * RR * NHR * HDR);
    struct weft_buffer *bk = up(be, k, sizeof(float) * RR * NKVR * HDR);
    struct weft_buffer *bv = up(be, v, sizeof(float) * RR * NKVR * HDR), *bm = up(be, meta, 4 * meta_n);
    struct weft_buffer *bc = up(be, NULL, cache_bytes);
    /* the factors at a non-zero offset of their buffer */
    struct weft_buffer *bf = up(be, ffv, sizeof(float) * (3 + HDR / 2));
    struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(bq, 0, WEFT_TYPE_F32, NHR * HDR, RR);
    o->k = weft_view_2d(bk, 0, WEFT_TYPE_F32, NKVR * HDR, RR);
    o->v = weft_view_2d(bv, 0, WEFT_TYPE_F32, NKVR * HDR, RR);
    o->kv = (struct weft_kv_view){bc, c->kvt, NLR, 1, NKVR, HDR, 0, false};
    o->batch = (struct weft_batch_view){RR, 1, weft_view_2d(bm, 0, WEFT_TYPE_I32, RR, 1),
                                        weft_view_2d(bm, 4 * RR, WEFT_TYPE_I32, RR, 1),
                                        weft_view_2d(bm, 8 * RR, WEFT_TYPE_I32, RR, 1),
                                        weft_view_2d(bm, 12 * RR, WEFT_TYPE_I32, 1, 1),
                                        weft_view_2d(bm, 12 * RR + 4, WEFT_TYPE_I32, (int64_t)meta_n - 3 * RR - 1, 1)};
    o->n_head = NHR;
    o->n_rot = c->n_rot;
    o->freq_base = 500000.0f;
    o->freq_scale = scaled ? c->freq_scale : 1.0f;
    o->mode = c->mode;
    if (scaled) {
        if (c->ff) {
            o->freq_factors = weft_view_2d(bf, 3 * sizeof(float), WEFT_TYPE_F32, c->n_rot / 2, 1);
            o->has_freq_factors = true;
        }
        o->ext_factor = c->ext_factor;
        o->attn_factor = c->attn_factor;
        if (c->ext_factor != 0.0f)
            weft_rope_yarn_corr_dims(c->n_rot, c->n_ctx_orig, 500000.0f, 32.0f, 1.0f, o->corr_dims);
    }
    CHECK_MSG(be->iface->supports(be, &op), "rope %s: refused", c->name);
    CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
    down(be, bq, qo, sizeof(float) * RR * NHR * HDR);
    down(be, bk, ko, sizeof(float) * RR * NKVR * HDR);
    down(be, bc, cache, cache_bytes);
    struct weft_buffer *all[] = {bq, bk, bv, bm, bc, bf};
    for (int i = 0; i < 6; i++) be->iface->buffer_free(all[i]);
}

static void rope_case_run(struct weft_backend *hb, struct weft_backend *cpu, const struct rope_case *c)
{
    enum { RR = 6, NHR = 8, NKVR = 2, HDR = 128, NLR = 2, NBR = 12 };
    const int32_t pos[RR] = {0, 1, 17, 4099, 70001, 131000};
    int32_t meta[3 * RR + 1 + NBR] = {0};
    for (int r = 0; r < RR; r++) {
        meta[r] = pos[r];
        meta[2 * RR + r] = (2 * r + 1) * 16 + r * 3;   /* slots in distinct blocks */
    }
    for (int b = 0; b < NBR; b++) meta[3 * RR + 1 + b] = b;
    const size_t nq = (size_t)RR * NHR * HDR, nk = (size_t)RR * NKVR * HDR;
    const size_t tok = weft_row_size(c->kvt, (int64_t)NKVR * HDR), cache_bytes = (size_t)NBR * NLR * 2 * 16 * tok;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nk);
    float ffv[3 + HDR / 2];
    for (size_t i = 0; i < nq; i++) q[i] = frand() * 3;
    for (size_t i = 0; i < nk; i++) { k[i] = frand() * 3; v[i] = frand() * 3; }
    for (int i = 0; i < 3 + HDR / 2; i++) ffv[i] = i < 3 ? 0.0f : 1.0f + 40.0f * (0.5f + 0.5f * frand());
    float *qg = malloc(sizeof(float) * nq), *qc = malloc(sizeof(float) * nq), *qp = malloc(sizeof(float) * nq);
    float *kg = malloc(sizeof(float) * nk), *kc = malloc(sizeof(float) * nk), *kp = malloc(sizeof(float) * nk);
    uint8_t *cg = malloc(cache_bytes), *cc = malloc(cache_bytes), *cp = malloc(cache_bytes);
    rope_run(hb, c, ffv, q, k, v, meta, sizeof meta / 4, cache_bytes, true, qg, kg, cg);
    rope_run(cpu, c, ffv, q, k, v, meta, sizeof meta / 4, cache_bytes, true, qc, kc, cc);
    rope_run(cpu, c, ffv, q, k, v, meta, sizeof meta / 4, cache_bytes, false, qp, kp, cp);
    const double eq = nmse_f(qg, qc, nq), ek = nmse_f(kg, kc, nk);
    /* the cache rows the op wrote, K and V, dequantized */
    float *rg = malloc(sizeof(float) * NKVR * HDR), *rc = malloc(sizeof(float) * NKVR * HDR);
    double ecache = 0;
    for (int r = 0; r < RR; r++)
        for (int which = 0; which < 2; which++) {
            const size_t sl = (size_t)meta[2 * RR + r];
            const size_t off = (((sl / 16) * NLR + 1) * 2 + (size_t)which) * 16 * tok + (sl % 16) * tok;
            weft_dequantize_row(c->kvt, cg + off, rg, (int64_t)NKVR * HDR);
            weft_dequantize_row(c->kvt, cc + off, rc, (int64_t)NKVR * HDR);
            const double e = nmse_f(rg, rc, (size_t)NKVR * HDR);
            if (e > ecache) ecache = e;
        }
    const double eplain = nmse_f(qc, qp, nq);
    printf("  rope %-34s nmse vs cpu: q %.3g k %.3g cache %.3g (scaled vs plain %.3g)\n", c->name, eq, ek, ecache,
           eplain);
    CHECK_MSG(eq < 1e-10 && ek < 1e-10, "rope %s: %s vs cpu nmse q %.3g k %.3g", c->name, gpu, eq, ek);
    /* an ulp of cosf can flip a rounding to F16 or to a Q8_0 level */
    CHECK_MSG(ecache < (c->kvt == WEFT_TYPE_Q8_0 ? 1e-4 : 1e-6), "rope %s: %s vs cpu cache nmse %.3g", c->name, gpu,
              ecache);
    CHECK_MSG(eplain > 1e-4, "rope %s: the scaling changes nothing (nmse %.3g)", c->name, eplain);
    /* dims past n_rot are left alone */
    if (c->n_rot < HDR) {
        bool kept = true;
        for (int r = 0; r < RR * NHR; r++)
            kept = kept && memcmp(qg + (size_t)r * HDR + c->n_rot, q + (size_t)r * HDR + c->n_rot,
                                  sizeof(float) * (HDR - c->n_rot)) == 0;
        CHECK_MSG(kept, "rope %s: dims past n_rot changed", c->name);
    }
    free(q); free(k); free(v); free(qg); free(qc); free(qp); free(kg); free(kc); free(kp);
    free(cg); free(cc); free(cp); free(rg); free(rc);
}

/* ROPE_KV's scaling: Llama 3.1's freq factors, YaRN (with and without
 * attn_factor, partial rotations), LongRoPE-style factors with a magnitude,
 * and linear scaling in the CPU's order (freq_scale * (pos * theta_scale^i),
 * a freq_scale that is not a power of two so the order shows) */
static void rope_scaling_matches_cpu(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    static const struct rope_case cases[] = {
        {"llama3.1 freq factors, F16, normal", WEFT_TYPE_F16, WEFT_ROPE_NORMAL, 128, 1.0f, true, 0, 0, 0},
        {"freq factors, Q8_0, neox", WEFT_TYPE_Q8_0, WEFT_ROPE_NEOX, 128, 1.0f, true, 0, 0, 0},
        {"linear 0.3, F16, normal", WEFT_TYPE_F16, WEFT_ROPE_NORMAL, 128, 0.3f, false, 0, 0, 0},
        {"linear 0.3, Q8_0, neox, n_rot 64", WEFT_TYPE_Q8_0, WEFT_ROPE_NEOX, 64, 0.3f, false, 0, 0, 0},
        {"yarn 1/40, F16, neox", WEFT_TYPE_F16, WEFT_ROPE_NEOX, 128, 1.0f / 40, false, 1.0f, 0, 4096},
        {"yarn 0.25 attn 0.8, Q8_0, normal, n_rot 96", WEFT_TYPE_Q8_0, WEFT_ROPE_NORMAL, 96, 0.25f, false, 1.0f,
         0.8f, 8192},
        {"yarn 0.3 ext 0.5 + factors, F16, normal", WEFT_TYPE_F16, WEFT_ROPE_NORMAL, 128, 0.3f, true, 0.5f, 0,
         32768},
        {"factors attn 1.19, F16, neox, n_rot 32", WEFT_TYPE_F16, WEFT_ROPE_NEOX, 32, 1.0f, true, 0, 1.19f, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) rope_case_run(hb, cpu, &cases[i]);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* ---- api 7: sinks, latent caches, mixtures of experts, gpt-oss's GLU ---- */

/* ATTENTION sinks (gpt-oss: a logit per head; with a window, as its even layers) and a latent
 * cache (DeepSeek's MLA: v_in_k, one KV head, V the tail of each K row; 96/64 is the tiny
 * deepseek2's, past 256 the kernels' wide form) on the split-K decode (the sink counts once,
 * in the merge) and the one-pass prefill, F16 and Q8_0 */
static void sinks_and_latent_caches(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    const int lens1[] = {4000}, lens3[] = {3001, 700, 17}, lensp[] = {600, 40};
    attention_case_x(hb, cpu, WEFT_TYPE_F16, 8, 2, 64, 0, true, lens3, 3, 0, 0, 1e-8);
    attention_case_x(hb, cpu, WEFT_TYPE_Q8_0, 8, 2, 64, 0, true, lens1, 1, 0, 128, 1e-8);
    attention_case_x(hb, cpu, WEFT_TYPE_F16, 16, 4, 64, 0, true, lensp, 2, 320, 0, 1e-8);
    attention_case_x(hb, cpu, WEFT_TYPE_F16, 8, 1, 96, 64, false, lens3, 3, 0, 0, 1e-8);
    attention_case_x(hb, cpu, WEFT_TYPE_Q8_0, 8, 1, 96, 64, false, lensp, 2, 320, 0, 1e-8);
    attention_case_x(hb, cpu, WEFT_TYPE_F16, 4, 1, 320, 256, true, lens3, 3, 0, 0, 1e-8);
    attention_case_x(hb, cpu, WEFT_TYPE_Q8_0, 16, 1, 512, 448, false, lensp, 2, 320, 0, 1e-8);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* ROPE_KV into a latent cache (v_in_k): k rotated and written as K rows, no V read or
 * written, the layer's part of a block K rows only: every byte but the rows' K rows stays 0 */
static void rope_into_latent_caches(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    enum { RR = 5, NHR = 4, HDL = 96, HDV = 64, NLR = 3, NBR = 7 };
    const int32_t meta[3 * RR + 1 + NBR] = {0, 5, 17, 40, 95,  0, 0, 0, 0, 0,  3, 21, 33, 70, 111,  0,
                                             0, 1, 2, 3, 4, 5, 6};   /* pos, seq, slot, bt_off, bt */
    const enum weft_type types[2] = {WEFT_TYPE_F16, WEFT_TYPE_Q8_0};
    float *q = malloc(sizeof(float) * RR * NHR * HDL), *k = malloc(sizeof(float) * RR * HDL);
    float *rg = malloc(sizeof(float) * HDL), *rc = malloc(sizeof(float) * HDL);
    for (int ti = 0; ti < 2; ti++) {
        const size_t tok = weft_row_size(types[ti], HDL), bytes = (size_t)NBR * NLR * 16 * tok;
        uint8_t *caches[2] = {malloc(bytes), malloc(bytes)};
        float *qs[2] = {malloc(sizeof(float) * RR * NHR * HDL), malloc(sizeof(float) * RR * NHR * HDL)};
        for (int i = 0; i < RR * NHR * HDL; i++) q[i] = frand() * 3;
        for (int i = 0; i < RR * HDL; i++) k[i] = frand() * 3;
        struct weft_backend *bes[2] = {hb, cpu};
        for (int b = 0; b < 2; b++) {
            struct weft_backend *be = bes[b];
            struct weft_buffer *bq = up(be, q, sizeof(float) * RR * NHR * HDL), *bk = up(be, k, sizeof(float) * RR * HDL);
            struct weft_buffer *bm = up(be, meta, sizeof meta), *bc = up(be, NULL, bytes);
            struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
            struct weft_op_rope_kv *o = &op.u.rope_kv;
            o->q = weft_view_2d(bq, 0, WEFT_TYPE_F32, NHR * HDL, RR);
            o->k = weft_view_2d(bk, 0, WEFT_TYPE_F32, HDL, RR);   /* v: none (not read) */
            o->kv = (struct weft_kv_view){bc, types[ti], NLR, 2, 1, HDL, HDV, true};
            o->batch = (struct weft_batch_view){RR, 1, weft_view_2d(bm, 0, WEFT_TYPE_I32, RR, 1),
                                                weft_view_2d(bm, 4 * RR, WEFT_TYPE_I32, RR, 1),
                                                weft_view_2d(bm, 8 * RR, WEFT_TYPE_I32, RR, 1),
                                                weft_view_2d(bm, 12 * RR, WEFT_TYPE_I32, 1, 1),
                                                weft_view_2d(bm, 12 * RR + 4, WEFT_TYPE_I32, NBR, 1)};
            o->n_head = NHR;
            o->n_rot = 32;   /* DeepSeek rotates the K row's k_pe part */
            o->freq_base = 10000.0f;
            o->freq_scale = 1.0f;
            CHECK_MSG(be->iface->supports(be, &op), "rope latent %s: refused", weft_type_name(types[ti]));
            CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
            down(be, bq, qs[b], sizeof(float) * RR * NHR * HDL);
            down(be, bc, caches[b], bytes);
            struct weft_buffer *all[] = {bq, bk, bm, bc};
            for (int i = 0; i < 4; i++) be->iface->buffer_free(all[i]);
        }
        /* the K rows (layer 2 of the slots' blocks, K only per layer) against the CPU's; the rest 0 */
        double ek = 0;
        for (int r = 0; r < RR; r++) {
            const size_t sl = (size_t)meta[2 * RR + r], off = ((sl / 16) * NLR + 2) * 16 * tok + (sl % 16) * tok;
            weft_dequantize_row(types[ti], caches[0] + off, rg, HDL);
            weft_dequantize_row(types[ti], caches[1] + off, rc, HDL);
            const double e = nmse_f(rg, rc, HDL);
            if (e > ek) ek = e;
            memset(caches[0] + off, 0, tok);
        }
        size_t stray = 0;
        for (size_t i = 0; i < bytes; i++) stray += caches[0][i] != 0;
        const double eq = nmse_f(qs[0], qs[1], (size_t)RR * NHR * HDL);
        printf("  rope latent %s: nmse vs cpu q %.3g K rows %.3g, %zu bytes written elsewhere\n",
               weft_type_name(types[ti]), eq, ek, stray);
        CHECK_MSG(eq < 1e-10 && ek < (ti ? 1e-4 : 1e-6) && stray == 0, "rope latent %s: q %.3g K %.3g stray %zu",
                  weft_type_name(types[ti]), eq, ek, stray);
        for (int b = 0; b < 2; b++) { free(caches[b]); free(qs[b]); }
    }
    free(q); free(k); free(rg); free(rc);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* SILU_MUL's clamped SwiGLU (gpt-oss: alpha 1.702, limit 7): gates and ups across and past the
 * clamps, infinities and NaNs, against the CPU to a few ulps (the device's expf, libm's) */
static void swiglu_oai_matches_cpu(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    enum { SR = 6, SK = 1000 };
    const size_t n = (size_t)SR * SK, bytes = sizeof(float) * n;
    float *g = malloc(bytes), *u = malloc(bytes), *og = malloc(bytes), *oc = malloc(bytes);
    const float specials[] = {NAN, INFINITY, -INFINITY, 7.0f, -7.0f, 7.0001f, -7.0001f, 0.0f, -0.0f, 1e-30f};
    for (size_t i = 0; i < n; i++) {
        g[i] = i % 97 < 10 ? specials[i % 97] : frand() * 20;
        u[i] = i % 89 < 10 ? specials[i % 89] : frand() * 20;
    }
    struct weft_backend *bes[2] = {hb, cpu};
    float *outs[2] = {og, oc};
    for (int b = 0; b < 2; b++) {
        struct weft_backend *be = bes[b];
        struct weft_buffer *bg = up(be, g, bytes), *bu = up(be, u, bytes), *bo = up(be, NULL, bytes);
        struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
        op.u.silu_mul = (struct weft_op_silu_mul){weft_view_2d(bg, 0, WEFT_TYPE_F32, SK, SR),
                                                  weft_view_2d(bu, 0, WEFT_TYPE_F32, SK, SR),
                                                  weft_view_2d(bo, 0, WEFT_TYPE_F32, SK, SR), WEFT_GLU_SWIGLU_OAI,
                                                  1.702f, 7.0f};
        CHECK(be->iface->supports(be, &op));
        CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
        down(be, bo, outs[b], bytes);
        be->iface->buffer_free(bg); be->iface->buffer_free(bu); be->iface->buffer_free(bo);
    }
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (!same_bits(og[i], oc[i]) && !(fabsf(og[i] - oc[i]) <= 1e-6f * fabsf(oc[i]))) {
            bad++;
            if (first == n) first = i;
        }
    CHECK_MSG(bad == 0, "swiglu_oai: %zu of %zu differ (first: gate %a up %a: %s %a, cpu %a)", bad, n,
              first < n ? g[first] : 0.0f, first < n ? u[first] : 0.0f, gpu, first < n ? og[first] : 0.0f,
              first < n ? oc[first] : 0.0f);
    free(g); free(u); free(og); free(oc);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* the softmax or sigmoid probabilities of a row, in double (the test's own, to judge ties) */
static void route_probs(const float *l, int E, enum weft_moe_gating gating, double *p)
{
    double mx = -1e300, sum = 0;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) {
        p[e] = gating == WEFT_MOE_SIGMOID ? 1 / (1 + exp(-(double)l[e])) : exp(l[e] - mx);
        sum += p[e];
    }
    if (gating != WEFT_MOE_SIGMOID)
        for (int e = 0; e < E; e++) p[e] /= sum;
}

/* MOE_ROUTE over RR rows, the GPU against the CPU: the same experts in the same order (but
 * where the choice values are within 1e-5 of a tie), the same weights to 1e-5 */
static void moe_route_case(struct weft_backend *hb, struct weft_backend *cpu, int RR, int E, int K,
                           enum weft_moe_gating gating, bool norm, float scale, bool bias, uint32_t n_group,
                           uint32_t group_used)
{
    float *l = malloc(sizeof(float) * RR * E), *bv = malloc(sizeof(float) * (E + 5));
    int32_t *ids[2] = {malloc(4 * RR * K), malloc(4 * RR * K)};
    float *w[2] = {malloc(sizeof(float) * RR * K), malloc(sizeof(float) * RR * K)};
    double *p = malloc(sizeof(double) * E);
    for (int i = 0; i < RR * E; i++) l[i] = frand() * 4;
    for (int i = 0; i < E + 5; i++) bv[i] = i < 5 ? 1e30f : frand() * 0.3f;   /* the bias at float 5 */
    struct weft_backend *bes[2] = {hb, cpu};
    for (int b = 0; b < 2; b++) {
        struct weft_backend *be = bes[b];
        struct weft_buffer *bl = up(be, l, sizeof(float) * RR * E), *bb = up(be, bv, sizeof(float) * (E + 5));
        struct weft_buffer *bi = up(be, NULL, 4 * RR * K), *bw = up(be, NULL, sizeof(float) * RR * K);
        struct weft_op op = {.kind = WEFT_OP_MOE_ROUTE};
        op.u.moe_route = (struct weft_op_moe_route){weft_view_2d(bl, 0, WEFT_TYPE_F32, E, RR),
                                                    weft_view_2d(bi, 0, WEFT_TYPE_I32, K, RR),
                                                    weft_view_2d(bw, 0, WEFT_TYPE_F32, K, RR), (uint32_t)K, gating, norm,
                                                    scale, weft_view_2d(bb, 5 * sizeof(float), WEFT_TYPE_F32, E, 1),
                                                    bias, n_group, group_used, {0}, false};
        CHECK(be->iface->supports(be, &op));
        CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
        down(be, bi, ids[b], 4 * RR * K);
        down(be, bw, w[b], sizeof(float) * RR * K);
        be->iface->buffer_free(bl); be->iface->buffer_free(bb); be->iface->buffer_free(bi); be->iface->buffer_free(bw);
    }
    int swapped = 0, bad = 0;
    for (int r = 0; r < RR; r++) {
        route_probs(l + (size_t)r * E, E, gating, p);
        for (int j = 0; j < K; j++) {
            const int ig = ids[0][r * K + j], ic = ids[1][r * K + j];
            if (ig != ic) {
                const bool ok = ig >= 0 && ig < E && fabs((p[ig] + (bias ? bv[5 + ig] : 0)) - (p[ic] + (bias ? bv[5 + ic] : 0))) < 1e-5;
                swapped++;
                bad += !ok;
                continue;
            }
            const float a = w[0][r * K + j], c = w[1][r * K + j];
            bad += !(fabsf(a - c) <= 1e-5f * fabsf(c) + 1e-30f);
        }
    }
    printf("  moe_route %s E %d k %d%s%s scale %g groups %u/%u, %d rows: %d near-tie swaps\n",
           gating == WEFT_MOE_SIGMOID ? "sigmoid" : gating == WEFT_MOE_SOFTMAX ? "softmax" : "softmax over the top k",
           E, K, norm ? " norm" : "", bias ? " bias" : "", scale, group_used, n_group, RR, swapped);
    CHECK_MSG(bad == 0, "moe_route gating %d E %d k %d: %d slots differ from the cpu", gating, E, K, bad);
    free(l); free(bv); free(p);
    for (int b = 0; b < 2; b++) { free(ids[b]); free(w[b]); }
}

/* MOE_ROUTE's gatings (Mixtral and qwen3moe: softmax, renormalised; DeepSeek V3: sigmoid with
 * a choice bias, renormalised and scaled, in expert groups; gpt-oss: softmax over the chosen
 * k), experts off the 32-lane and 16-chunk sizes, batch 1 and a prefill chunk */
static void moe_route_matches_cpu(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    moe_route_case(hb, cpu, 1, 8, 2, WEFT_MOE_SOFTMAX, true, 0.0f, false, 0, 0);
    moe_route_case(hb, cpu, 100, 128, 8, WEFT_MOE_SOFTMAX, true, 0.0f, false, 0, 0);
    moe_route_case(hb, cpu, 1, 256, 8, WEFT_MOE_SIGMOID, true, 2.5f, true, 0, 0);
    moe_route_case(hb, cpu, 77, 256, 8, WEFT_MOE_SIGMOID, true, 2.5f, true, 0, 0);
    moe_route_case(hb, cpu, 9, 32, 4, WEFT_MOE_SOFTMAX_TOPK, false, 0.0f, false, 0, 0);
    moe_route_case(hb, cpu, 33, 37, 5, WEFT_MOE_SOFTMAX, false, 0.5f, true, 0, 0);
    moe_route_case(hb, cpu, 5, 500, 20, WEFT_MOE_SOFTMAX_TOPK, true, 0.0f, false, 0, 0);
    /* DeepSeek V3: 8 groups of 32, the best 4 kept; groups of 2 experts, 64 groups */
    moe_route_case(hb, cpu, 77, 256, 8, WEFT_MOE_SIGMOID, true, 2.5f, true, 8, 4);
    moe_route_case(hb, cpu, 9, 128, 6, WEFT_MOE_SOFTMAX, false, 0.0f, true, 64, 3);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* one MATMUL_ID: E experts of N x K (type t, expert e's rows from e * N), RR rows x KS slots,
 * x and out strided views; form 0: gate/up (x per row, one output row per slot, a per-expert
 * bias); 1: down (x per slot, the slots weighted and summed into out += ...); 2: DeepSeek's
 * per-head matrices (x per slot, one output row per slot) */
struct mid_case {
    enum weft_type t;
    int64_t K, N;
    int E, RR, KS, form;
    bool heads;   /* DeepSeek's per-head MATMUL_IDs: row r's slot j chose expert j (KS = E) */
};

static void matmul_id_run(struct weft_backend *be, const struct mid_case *c, const uint8_t *w, const int32_t *ids,
                          const float *x, size_t x_ld, const float *bias, const float *wts, float *out, size_t out_ld)
{
    const int64_t slots = (int64_t)c->RR * c->KS, xr = c->form ? slots : c->RR, orows = c->form == 1 ? c->RR : slots;
    const size_t rs = weft_row_size(c->t, c->K);
    struct weft_buffer *bw = up(be, w, rs * c->N * c->E), *bi = up(be, ids, 4 * slots);
    struct weft_buffer *bx = up(be, x, sizeof(float) * x_ld * xr), *bb = up(be, bias, sizeof(float) * c->E * c->N);
    struct weft_buffer *bt = up(be, wts, sizeof(float) * slots), *bo = up(be, out, sizeof(float) * out_ld * orows);
    struct weft_op op = {.kind = WEFT_OP_MATMUL_ID};
    struct weft_op_matmul_id *o = &op.u.matmul_id;
    o->x = weft_view_2d(bx, 0, WEFT_TYPE_F32, c->K, xr);
    o->x.nb1 = x_ld * sizeof(float);   /* strided rows, as DeepSeek's per-head views */
    o->w = weft_view_2d(bw, 0, c->t, c->K, c->N * c->E);
    o->ids = weft_view_2d(bi, 0, WEFT_TYPE_I32, c->KS, c->RR);
    o->out = weft_view_2d(bo, 0, WEFT_TYPE_F32, c->N, orows);
    o->out.nb1 = out_ld * sizeof(float);
    o->n_expert = (uint32_t)c->E;
    o->x_per_slot = c->form != 0;
    o->has_weights = o->has_add = c->form == 1;
    o->weights = weft_view_2d(bt, 0, WEFT_TYPE_F32, c->KS, c->RR);
    o->add = o->out;
    o->has_bias = c->form == 0;
    o->bias = weft_view_2d(bb, 0, WEFT_TYPE_F32, c->E * c->N, 1);
    CHECK_MSG(be->iface->supports(be, &op), "matmul_id %s form %d refused", weft_type_name(c->t), c->form);
    CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
    down(be, bo, out, sizeof(float) * out_ld * orows);
    struct weft_buffer *all[] = {bw, bi, bx, bb, bt, bo};
    for (int i = 0; i < 6; i++) be->iface->buffer_free(all[i]);
}

/* The GPU against the CPU on the same op; the experts no row chose are bytes 0xFF (NaN
 * scales), so reading one shows as a NaN in the output */
static void matmul_id_case(struct weft_backend *hb, struct weft_backend *cpu, const struct mid_case *c)
{
    const size_t rs = weft_row_size(c->t, c->K);
    const int64_t slots = (int64_t)c->RR * c->KS, xr = c->form ? slots : c->RR, orows = c->form == 1 ? c->RR : slots;
    const size_t x_ld = (size_t)c->K + 3, out_ld = (size_t)c->N + 5;
    uint8_t *w = malloc(rs * c->N * c->E);
    memset(w, 0xFF, rs * c->N * c->E);
    int32_t *ids = malloc(4 * slots);
    float *tmp = malloc(sizeof(float) * c->K), *x = malloc(sizeof(float) * x_ld * xr);
    float *bias = malloc(sizeof(float) * c->E * c->N), *wts = malloc(sizeof(float) * slots);
    float *out[2] = {malloc(sizeof(float) * out_ld * orows), malloc(sizeof(float) * out_ld * orows)};
    /* each row's k distinct experts among those with e % 3 != 2; the others are never chosen */
    bool *chosen = calloc(c->E, 1);
    for (int r = 0; r < c->RR; r++)
        for (int j = 0; j < c->KS; j++) {
            int e = j;
            bool dup = false;
            while (!c->heads) {
                e = (int)((frand() * 0.5f + 0.5f) * c->E) % c->E;
                dup = e % 3 == 2;
                for (int q = 0; q < j; q++) dup = dup || ids[r * c->KS + q] == e;
                if (!dup) break;
            }
            ids[r * c->KS + j] = e;
            chosen[e] = true;
        }
    for (int e = 0; e < c->E; e++)
        for (int64_t n = 0; chosen[e] && n < c->N; n++) {
            for (int64_t k = 0; k < c->K; k++) tmp[k] = frand();
            CHECK(weft_quantize_row(c->t, tmp, w + ((size_t)e * c->N + n) * rs, c->K));
        }
    for (size_t i = 0; i < x_ld * xr; i++) x[i] = frand();
    for (int i = 0; i < c->E * c->N; i++) bias[i] = frand();
    for (int64_t i = 0; i < slots; i++) wts[i] = frand();
    for (size_t i = 0; i < out_ld * orows; i++) out[0][i] = out[1][i] = frand();
    matmul_id_run(hb, c, w, ids, x, x_ld, bias, wts, out[0], out_ld);
    matmul_id_run(cpu, c, w, ids, x, x_ld, bias, wts, out[1], out_ld);
    size_t nan = 0;
    for (size_t i = 0; i < out_ld * orows; i++) nan += out[0][i] != out[0][i];
    const double e = nmse_f(out[0], out[1], out_ld * orows);
    /* the CPU multiplies quantized weights with Q8 activations, F16 ones with F16 (as ggml) */
    const double tol = c->t == WEFT_TYPE_F32 ? 1e-10 : c->t == WEFT_TYPE_F16 || c->t == WEFT_TYPE_BF16 ? 4e-5 : 8e-4;
    CHECK_MSG(nan == 0 && e < tol, "matmul_id %s K%lld N%lld E%d rows %d k %d form %d: %s vs cpu nmse %.3g, %zu NaN",
              weft_type_name(c->t), (long long)c->K, (long long)c->N, c->E, c->RR, c->KS, c->form, gpu, e, nan);
    if (c->form == 1 || c->KS != 3) printf("  matmul_id %-6s rows %d k %d form %d: nmse vs cpu %.3g\n",
                                     weft_type_name(c->t), c->RR, c->KS, c->form, e);
    free(w); free(ids); free(tmp); free(x); free(bias); free(wts); free(out[0]); free(out[1]); free(chosen);
}

/* MATMUL_ID for every weight type at batch 1 and 8, both forms, unchosen experts NaN; then
 * slots past the kernels' 8 per pass over an expert, and DeepSeek's per-head shape (every row
 * chooses every head, x per slot) */
static void matmul_id_matches_cpu(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    static const enum weft_type types[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16, WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1,
                                           WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1, WEFT_TYPE_Q8_0, WEFT_TYPE_Q2_K, WEFT_TYPE_Q3_K,
                                           WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K, WEFT_TYPE_IQ4_NL,
                                           WEFT_TYPE_IQ4_XS, WEFT_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int rr = 1; rr <= 8; rr += 7)
            for (int form = 0; form < 2; form++) {
                const struct mid_case c = {types[i], 256, 37, 9, rr, 3, form, false};
                matmul_id_case(hb, cpu, &c);
            }
    const struct mid_case more[] = {
        {WEFT_TYPE_Q4_0, 512, 70, 4, 40, 2, 0, false},     /* ~27 slots per chosen expert */
        {WEFT_TYPE_MXFP4, 512, 33, 32, 64, 4, 1, false},   /* gpt-oss-like: many experts, a prefill chunk */
        {WEFT_TYPE_F16, 128, 64, 16, 8, 16, 2, true},      /* W_kb's shape: 16 heads of 128 -> 64 */
        {WEFT_TYPE_Q8_0, 64, 96, 16, 3, 16, 2, true},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) matmul_id_case(hb, cpu, &more[i]);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* A gpt-oss-style MoE FFN as one op list: MOE_ROUTE (softmax over the top k) of logits that
 * change every step, MATMUL_IDs gate and up (+ expert biases), the clamped SwiGLU, MATMUL_ID
 * down weighted and summed into x (+ bias). Replayed from a graph it gives the same bits as
 * eager runs while the routes change underneath (the ids never reach the host), and matches
 * the CPU. */
static void moe_ffn_graph_replay_follows_routes(void)
{
    struct weft_backend *bes[3] = {open_gpu(true), open_gpu(false), NULL};
    CHECK(weft_backend_open("cpu", 2, &bes[2]) == WEFT_OK);
    if (!bes[0] || !bes[1] || !bes[2]) return;
    enum { XR = 8, NE = 128, NF = 64, EX = 16, KU = 4 };
    const enum weft_type wt = WEFT_TYPE_MXFP4;
    const size_t rs_e = weft_row_size(wt, NE), rs_f = weft_row_size(wt, NF);
    uint8_t *wg = malloc(rs_e * NF * EX), *wu = malloc(rs_e * NF * EX), *wd = malloc(rs_f * NE * EX);
    float *tmp = malloc(sizeof(float) * NE), *bias = malloc(sizeof(float) * EX * (2 * NF + NE));
    for (int i = 0; i < NF * EX; i++) {
        for (int k = 0; k < NE; k++) tmp[k] = frand() * 0.3f;
        weft_quantize_row(wt, tmp, wg + i * rs_e, NE);
        for (int k = 0; k < NE; k++) tmp[k] = frand() * 0.3f;
        weft_quantize_row(wt, tmp, wu + i * rs_e, NE);
    }
    for (int i = 0; i < NE * EX; i++) {
        for (int k = 0; k < NF; k++) tmp[k] = frand() * 0.3f;
        weft_quantize_row(wt, tmp, wd + i * rs_f, NF);
    }
    for (int i = 0; i < EX * (2 * NF + NE); i++) bias[i] = frand() * 0.1f;
    /* per backend: weights, biases, and act = x [XR][NE] | logits [XR][EX] | ids | wts | g, u, h [XR*KU][NF] */
    const size_t f = sizeof(float), o_l = XR * NE * f, o_i = o_l + XR * EX * f, o_w = o_i + XR * KU * 4;
    const size_t o_g = o_w + XR * KU * f, o_u = o_g + XR * KU * NF * f, o_h = o_u + XR * KU * NF * f;
    const size_t act_bytes = o_h + XR * KU * NF * f;
    struct weft_buffer *bufs[3][5];
    struct weft_op ops[3][5];
    for (int b = 0; b < 3; b++) {
        struct weft_buffer **B = bufs[b];
        B[0] = up(bes[b], wg, rs_e * NF * EX); B[1] = up(bes[b], wu, rs_e * NF * EX); B[2] = up(bes[b], wd, rs_f * NE * EX);
        B[3] = up(bes[b], bias, f * EX * (2 * NF + NE)); B[4] = up(bes[b], NULL, act_bytes);
        const struct weft_view x = weft_view_2d(B[4], 0, WEFT_TYPE_F32, NE, XR);
        const struct weft_view ids = weft_view_2d(B[4], o_i, WEFT_TYPE_I32, KU, XR);
        const struct weft_view wts = weft_view_2d(B[4], o_w, WEFT_TYPE_F32, KU, XR);
        const struct weft_view g = weft_view_2d(B[4], o_g, WEFT_TYPE_F32, NF, XR * KU);
        const struct weft_view u = weft_view_2d(B[4], o_u, WEFT_TYPE_F32, NF, XR * KU);
        const struct weft_view h = weft_view_2d(B[4], o_h, WEFT_TYPE_F32, NF, XR * KU);
        struct weft_op *op = ops[b];
        op[0] = (struct weft_op){.kind = WEFT_OP_MOE_ROUTE};
        op[0].u.moe_route = (struct weft_op_moe_route){weft_view_2d(B[4], o_l, WEFT_TYPE_F32, EX, XR), ids, wts, KU,
                                                       WEFT_MOE_SOFTMAX_TOPK, false, 0.0f, {0}, false, 0, 0,
                                                       {0}, false};
        for (int i = 0; i < 2; i++) {
            op[1 + i] = (struct weft_op){.kind = WEFT_OP_MATMUL_ID};
            op[1 + i].u.matmul_id = (struct weft_op_matmul_id){
                .x = x, .w = weft_view_2d(B[i], 0, wt, NE, NF * EX), .ids = ids, .out = i ? u : g, .n_expert = EX,
                .bias = weft_view_2d(B[3], f * EX * NF * i, WEFT_TYPE_F32, EX * NF, 1), .has_bias = true};
        }
        op[3] = (struct weft_op){.kind = WEFT_OP_SILU_MUL};
        op[3].u.silu_mul = (struct weft_op_silu_mul){g, u, h, WEFT_GLU_SWIGLU_OAI, 1.702f, 7.0f};
        op[4] = (struct weft_op){.kind = WEFT_OP_MATMUL_ID};
        op[4].u.matmul_id = (struct weft_op_matmul_id){
            .x = h, .w = weft_view_2d(B[2], 0, wt, NF, NE * EX), .ids = ids, .out = x, .n_expert = EX,
            .x_per_slot = true, .weights = wts, .has_weights = true, .add = x, .has_add = true,
            .bias = weft_view_2d(B[3], f * EX * NF * 2, WEFT_TYPE_F32, EX * NE, 1), .has_bias = true};
        for (int i = 0; i < 5; i++) CHECK_MSG(bes[b]->iface->supports(bes[b], &ops[b][i]), "moe op %d refused", i);
    }
    float *in = malloc(o_i), *res[3] = {malloc(o_l), malloc(o_l), malloc(o_l)};
    for (int t = 0; t < 5; t++) {   /* step 0 runs eagerly, 1 is captured, 2.. replayed */
        for (size_t i = 0; i < o_i / f; i++) in[i] = frand() * (i < XR * NE ? 1.0f : 3.0f);
        for (int b = 0; b < 3; b++) {
            CHECK(bes[b]->iface->buffer_write(bufs[b][4], 0, in, o_i) == WEFT_OK);
            CHECK(bes[b]->iface->run(bes[b], ops[b], 5) == WEFT_OK);
            down(bes[b], bufs[b][4], res[b], o_l);
        }
        CHECK_MSG(memcmp(res[0], res[1], o_l) == 0, "moe step %d: graph replay differs from eager run", t);
        const double d = nmse_f(res[0], res[2], XR * NE);
        CHECK_MSG(d < 1e-3, "moe step %d: %s vs cpu nmse %.3g", t, gpu, d);
        if (t == 0 || t == 4) printf("  moe ffn step %d: %s vs cpu nmse %.3g\n", t, gpu, d);
    }
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < 5; i++) bes[b]->iface->buffer_free(bufs[b][i]);
        weft_backend_close(bes[b]);
        free(res[b]);
    }
    free(wg); free(wu); free(wd); free(tmp); free(bias); free(in);
}

/* api 10 (Gemma 4) in one op list replayed from a graph while the data change: ADD with a
 * scale (in place on a residual), ROPE_KV q_only over a KV layer it must not touch, MOE_ROUTE
 * with expert_scale; the graph's runs bit for bit as eager ones; ADD bit for bit as the CPU, q
 * and the weights to the device's cosf/sinf/expf; k, v and the whole cache as they were on
 * every backend. */
static void api10_fields_replayed_from_a_graph(void)
{
    struct weft_backend *bes[3] = {open_gpu(true), open_gpu(false), NULL};
    CHECK(weft_backend_open("cpu", 2, &bes[2]) == WEFT_OK);
    if (!bes[0] || !bes[1] || !bes[2]) return;
    enum { AR = 3, AE = 96, ANH = 4, ANKV = 2, AHD = 64, ANL = 2, ANB = 4, AX = 16, AK = 4 };
    const size_t f = sizeof(float);
    /* act: x [AR][AE] | y | q [AR][ANH*AHD] | k [AR][ANKV*AHD] | v | logits [AR][AX] | ids | w | escale [AX] | meta */
    const size_t o_y = AR * AE * f, o_q = o_y + AR * AE * f, o_k = o_q + AR * ANH * AHD * f;
    const size_t o_v = o_k + AR * ANKV * AHD * f, o_l = o_v + AR * ANKV * AHD * f, o_i = o_l + AR * AX * f;
    const size_t o_w = o_i + AR * AK * 4, o_e = o_w + AR * AK * f, o_m = o_e + AX * f, act_bytes = o_m + 64 * 4;
    const size_t cache_bytes = (size_t)ANB * ANL * WEFT_KV_BLOCK_TOKENS * 2 * weft_row_size(WEFT_TYPE_F16, ANKV * AHD);
    uint8_t *act = malloc(act_bytes), *cache0 = malloc(cache_bytes), *cache1 = malloc(cache_bytes);
    for (size_t i = 0; i < o_m / f; i++) ((float *)act)[i] = frand();
    for (int e = 0; e < AX; e++) ((float *)(act + o_e))[e] = 0.5f + (frand() + 1);
    for (size_t i = 0; i < cache_bytes; i++) cache0[i] = (uint8_t)(i * 7 + 3);
    struct weft_buffer *B[3][2];
    struct weft_op ops[3][3];
    for (int b = 0; b < 3; b++) {
        B[b][0] = up(bes[b], act, act_bytes);
        B[b][1] = up(bes[b], cache0, cache_bytes);
        struct weft_buffer *a = B[b][0];
        const struct weft_view x = weft_view_2d(a, 0, WEFT_TYPE_F32, AE, AR);
        struct weft_op *op = ops[b];
        op[0] = (struct weft_op){.kind = WEFT_OP_ADD};
        op[0].u.add = (struct weft_op_add){x, weft_view_2d(a, o_y, WEFT_TYPE_F32, AE, AR), x, 0.8125f};
        op[1] = (struct weft_op){.kind = WEFT_OP_ROPE_KV};
        struct weft_op_rope_kv *r = &op[1].u.rope_kv;
        r->q = weft_view_2d(a, o_q, WEFT_TYPE_F32, ANH * AHD, AR);
        r->k = weft_view_2d(a, o_k, WEFT_TYPE_F32, ANKV * AHD, AR);
        r->v = weft_view_2d(a, o_v, WEFT_TYPE_F32, ANKV * AHD, AR);
        r->kv = (struct weft_kv_view){B[b][1], WEFT_TYPE_F16, ANL, 1, ANKV, AHD, 0, false};
        r->batch = (struct weft_batch_view){AR, 1, weft_view_2d(a, o_m, WEFT_TYPE_I32, AR, 1),
                                            weft_view_2d(a, o_m + 16, WEFT_TYPE_I32, AR, 1),
                                            weft_view_2d(a, o_m + 32, WEFT_TYPE_I32, AR, 1),
                                            weft_view_2d(a, o_m + 48, WEFT_TYPE_I32, 2, 1),
                                            weft_view_2d(a, o_m + 64, WEFT_TYPE_I32, ANB, 1)};
        r->n_head = ANH;
        r->n_rot = AHD;
        r->freq_base = 10000.0f;
        r->freq_scale = 1.0f;
        r->mode = WEFT_ROPE_NEOX;
        r->q_only = true;
        op[2] = (struct weft_op){.kind = WEFT_OP_MOE_ROUTE};
        op[2].u.moe_route = (struct weft_op_moe_route){
            .logits = weft_view_2d(a, o_l, WEFT_TYPE_F32, AX, AR), .ids = weft_view_2d(a, o_i, WEFT_TYPE_I32, AK, AR),
            .weights = weft_view_2d(a, o_w, WEFT_TYPE_F32, AK, AR), .k = AK, .gating = WEFT_MOE_SIGMOID, .norm = true,
            .scale = 2.5f, .expert_scale = weft_view_2d(a, o_e, WEFT_TYPE_F32, AX, 1), .has_expert_scale = true};
        for (int i = 0; i < 3; i++) CHECK_MSG(bes[b]->iface->supports(bes[b], &op[i]), "api 10 op %d refused", i);
    }
    uint8_t *res[3] = {malloc(act_bytes), malloc(act_bytes), malloc(act_bytes)};
    for (int t = 0; t < 5; t++) {   /* step 0 runs eagerly, 1 is captured, 2.. replayed */
        float *in = (float *)act;
        for (size_t i = o_q / f; i < o_k / f; i++) in[i] = frand();   /* fresh q */
        for (size_t i = o_l / f; i < o_i / f; i++) in[i] = 3 * frand();   /* fresh logits */
        int32_t *meta = (int32_t *)(act + o_m);
        for (int r = 0; r < AR; r++) { meta[r] = 100 * t + 37 * r; meta[4 + r] = 0; meta[8 + r] = 5 * r + t; }
        meta[12] = 0; meta[13] = ANB;
        for (int i = 0; i < ANB; i++) meta[16 + i] = i;
        for (int b = 0; b < 3; b++) {
            /* x carries over (the residual scaled in place each step); the rest is rewritten */
            CHECK(bes[b]->iface->buffer_write(B[b][0], o_q, act + o_q, act_bytes - o_q) == WEFT_OK);
            CHECK(bes[b]->iface->run(bes[b], ops[b], 3) == WEFT_OK);
            down(bes[b], B[b][0], res[b], act_bytes);
            down(bes[b], B[b][1], cache1, cache_bytes);
            CHECK_MSG(memcmp(cache1, cache0, cache_bytes) == 0, "api 10 step %d: backend %d wrote the cache", t, b);
            CHECK_MSG(memcmp(res[b] + o_k, act + o_k, o_l - o_k) == 0, "api 10 step %d: backend %d changed k or v", t,
                      b);
        }
        CHECK_MSG(memcmp(res[0], res[1], act_bytes) == 0, "api 10 step %d: graph replay differs from eager run", t);
        CHECK_MSG(memcmp(res[0], res[2], o_q) == 0, "api 10 step %d: %s's ADD scale differs from the cpu", t, gpu);
        const double dq = nmse_f((float *)(res[0] + o_q), (float *)(res[2] + o_q), AR * ANH * AHD);
        CHECK_MSG(dq < 1e-10, "api 10 step %d: q_only q vs cpu nmse %.3g", t, dq);
        CHECK_MSG(memcmp(res[0] + o_i, res[2] + o_i, AR * AK * 4) == 0, "api 10 step %d: route ids differ", t);
        const double dw = nmse_f((float *)(res[0] + o_w), (float *)(res[2] + o_w), AR * AK);
        CHECK_MSG(dw < 1e-10, "api 10 step %d: expert_scale weights vs cpu nmse %.3g", t, dw);
        if (t == 4) printf("  api 10 step %d: q nmse %.3g, weights nmse %.3g\n", t, dq, dw);
    }
    for (int b = 0; b < 3; b++) {
        bes[b]->iface->buffer_free(B[b][0]);
        bes[b]->iface->buffer_free(B[b][1]);
        weft_backend_close(bes[b]);
        free(res[b]);
    }
    free(act); free(cache0); free(cache1);
}

static void out_of_memory_is_reported_not_fatal(void)
{
    struct weft_backend *hb = open_gpu(true);
    if (!hb) return;
    struct weft_buffer *b = NULL;
    CHECK(hb->iface->buffer_alloc(hb, (size_t)1 << 50, &b) == WEFT_ERR_NOMEM);
    CHECK(b == NULL);
    CHECK(strstr(weft_last_error(), "out of device memory") != NULL || !strncmp(spec, "cpu", 3));
    printf("  %s\n", weft_last_error());
    /* still usable */
    int32_t v[4] = {1, 2, 3, 4}, r[4] = {0};
    b = up(hb, v, sizeof v);
    if (b) {
        down(hb, b, r, sizeof r);
        CHECK(memcmp(v, r, sizeof v) == 0);
        hb->iface->buffer_free(b);
    }
    weft_backend_close(hb);
}

int main(void)
{
    const char *g = getenv("WEFT_TEST_GPU");
    if (g && *g) snprintf(gpu, sizeof gpu, "%s", g);
    if (strcmp(gpu, "cuda") && strcmp(gpu, "hip")) SKIP_ALL("WEFT_TEST_GPU must be cuda or hip, not '%s'", gpu);
    snprintf(spec, sizeof spec, "%s:0", gpu);
    snprintf(graphs_env, sizeof graphs_env, "WEFT_%s_GRAPHS", strcmp(gpu, "cuda") ? "HIP" : "CUDA");
    const char *sp = getenv("WEFT_TEST_GPU_SPEC");
    if (sp && *sp) snprintf(spec, sizeof spec, "%s", sp);
    const struct weft_backend_iface *bi = weft_backend_find(strncmp(spec, "cpu", 3) ? gpu : "cpu");
    if (!bi) SKIP_ALL("%s backend not loaded: %s", gpu, weft_backend_unavailable(gpu));
    const char *why = NULL;
    struct weft_device_info info[1];
    if (bi->devices(info, 1, &why) < 1) SKIP_ALL("no %s device: %s", gpu, why ? why : "?");
    printf("device: %s\n", info[0].name);
    RUN(out_of_memory_is_reported_not_fatal);
    RUN(matmul_row_counts_around_path_switches);
    RUN(gemm_tails_and_fused_add);
    RUN(matmul_bias_on_every_path);
    RUN(geglu_over_every_f16_gate);
    RUN(scaled_embed_bit_for_bit);
    RUN(rope_scaling_matches_cpu);
    RUN(split_k_attention_matches_cpu_at_long_contexts);
    RUN(sliding_windows_at_long_contexts);
    RUN(graph_replay_equals_eager_steps);
    RUN(graph_replay_with_api5_fields);
    RUN(sinks_and_latent_caches);
    RUN(rope_into_latent_caches);
    RUN(swiglu_oai_matches_cpu);
    RUN(moe_route_matches_cpu);
    RUN(matmul_id_matches_cpu);
    RUN(moe_ffn_graph_replay_follows_routes);
    RUN(api10_fields_replayed_from_a_graph);
    return check_summary();
}
