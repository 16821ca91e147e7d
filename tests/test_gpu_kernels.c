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
 *    working.
 * Skipped (77) when the module is absent or sees no device. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "base/quant.h"
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
    struct weft_op ops[16];
    size_t n;
};

static void step_init(struct step *s, struct weft_backend *be, uint64_t seed)
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
    struct weft_kv_view kv = {s->cache, WEFT_TYPE_F16, NL, 0, NKV, HD};
    struct weft_batch_view batch = {R, 2, M(1, R), M(2, R), M(3, R), M(4, 2), weft_view_2d(s->meta, 80, WEFT_TYPE_I32, 6, 1)};
    struct weft_op *op = s->ops;
    op->kind = WEFT_OP_EMBED;
    op->u.embed = (struct weft_op_embed){weft_view_2d(s->emb, 0, WEFT_TYPE_F32, E, V), M(0, R), A(ox, E), 0.0f};
    (++op)->kind = WEFT_OP_RMSNORM;
    op->u.rmsnorm = (struct weft_op_rmsnorm){.x = A(ox, E), .w = weft_view_2d(s->norm, 0, WEFT_TYPE_F32, E, 1),
                                             .out = A(oxb, E), .eps = 1e-5f};
#define MM(W, T, K, N, X, OUT, ADD) do { (++op)->kind = WEFT_OP_MATMUL; \
    op->u.matmul = (struct weft_op_matmul){.x = X, .w = weft_view_2d(W, 0, T, K, N), .out = OUT, .add = OUT, .has_add = ADD}; } while (0)
    MM(s->wq, WEFT_TYPE_Q4_0, E, E, A(oxb, E), A(oq, E), false);
    MM(s->wk, WEFT_TYPE_Q8_0, E, NKV * HD, A(oxb, E), A(ok, NKV * HD), false);
    MM(s->wv, WEFT_TYPE_Q4_1, E, NKV * HD, A(oxb, E), A(ov, NKV * HD), false);
    (++op)->kind = WEFT_OP_ROPE_KV;
    op->u.rope_kv = (struct weft_op_rope_kv){.q = A(oq, E), .k = A(ok, NKV * HD), .v = A(ov, NKV * HD), .kv = kv,
                                             .batch = batch, .n_head = NH, .n_rot = HD, .freq_base = 10000.0f,
                                             .freq_scale = 1.0f, .mode = WEFT_ROPE_NORMAL};
    (++op)->kind = WEFT_OP_ATTENTION;
    op->u.attention = (struct weft_op_attention){A(oq, E), A(oatt, E), kv, batch, NH, 0.125f, 0};
    MM(s->wo, WEFT_TYPE_F16, E, E, A(oatt, E), A(ox, E), true);
    (++op)->kind = WEFT_OP_RMSNORM;
    op->u.rmsnorm = (struct weft_op_rmsnorm){.x = A(ox, E), .w = weft_view_2d(s->norm, 0, WEFT_TYPE_F32, E, 1),
                                             .out = A(oxb, E), .eps = 1e-5f};
    MM(s->wg, WEFT_TYPE_Q4_K, E, FF, A(oxb, E), A(og, FF), false);
    MM(s->wu, WEFT_TYPE_Q6_K, E, FF, A(oxb, E), A(ou, FF), false);
    (++op)->kind = WEFT_OP_SILU_MUL;
    op->u.silu_mul = (struct weft_op_silu_mul){A(og, FF), A(ou, FF), A(oh, FF), WEFT_GLU_SILU};
    MM(s->wd, WEFT_TYPE_Q4_0, FF, E, A(oh, FF), A(ox, E), true);
    (++op)->kind = WEFT_OP_LOGITS;
    op->u.logits = (struct weft_op_logits){A(ox, E), M(7, R), weft_view_2d(s->norm, 0, WEFT_TYPE_F32, E, 1),
                                           weft_view_2d(s->out_w, 0, WEFT_TYPE_F32, E, V),
                                           weft_view_2d(s->logits, 0, WEFT_TYPE_F32, V, R), 1e-5f};
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
                                 s->act, s->meta, s->cache, s->logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) s->be->iface->buffer_free(all[i]);
}

static void graph_replay_equals_eager_steps(void)
{
    struct weft_backend *g = open_gpu(true), *e = open_gpu(false), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!g || !e || !cpu) return;
    struct step sg, se, sc;
    step_init(&sg, g, 77);
    step_init(&se, e, 77);
    step_init(&sc, cpu, 77);
    static float lg[R * V], le[R * V], lc[R * V];
    for (int t = 0; t < 24; t++) {   /* crosses a block boundary of sequence 0 at t = 16 */
        CHECK(step_run(&sg, t, lg));
        CHECK(step_run(&se, t, le));
        CHECK(step_run(&sc, t, lc));
        CHECK_MSG(memcmp(lg, le, sizeof lg) == 0, "step %d: graph replay differs from eager run", t);
        double d = nmse_f(lg, lc, R * V);
        CHECK_MSG(d < 1e-3, "step %d: %s vs cpu logits nmse %.3g", t, gpu, d);
        if (t == 0 || t == 23) printf("  step %d: %s vs cpu nmse %.3g\n", t, gpu, d);
    }
    step_free(&sg); step_free(&se); step_free(&sc);
    weft_backend_close(g); weft_backend_close(e); weft_backend_close(cpu);
}

/* ATTENTION alone over a cache filled with random K/V: rows of three
 * sequences (long decodes and a prefill chunk), the GPU against the CPU. */
static void attention_case(struct weft_backend *hb, struct weft_backend *cpu, enum weft_type kvt, int n_head, int n_kv,
                           int hd, const int *seq_len, int n_seq, int prefill_rows, double tol)
{
    const int nl = 2, layer = 1;
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
    size_t tok = weft_row_size(kvt, (int64_t)n_kv * hd), layer_bytes = tok * 16;
    size_t cache_bytes = (size_t)n_blocks_total * nl * 2 * layer_bytes;
    uint8_t *cache = malloc(cache_bytes);
    float *tmp = malloc(sizeof(float) * n_kv * hd);
    for (size_t t = 0; t < cache_bytes / tok; t++) {
        for (int i = 0; i < n_kv * hd; i++) tmp[i] = frand();
        weft_quantize_row(kvt, tmp, cache + t * tok, (int64_t)n_kv * hd);
    }
    free(tmp);
    size_t qn = (size_t)nrows * n_head * hd;
    float *q = malloc(sizeof(float) * qn), *oc = malloc(sizeof(float) * qn), *og = malloc(sizeof(float) * qn);
    for (size_t i = 0; i < qn; i++) q[i] = frand() * 2;
    struct weft_backend *bes[2] = {hb, cpu};
    float *outs[2] = {og, oc};
    for (int k = 0; k < 2; k++) {
        struct weft_backend *be = bes[k];
        struct weft_buffer *bc = up(be, cache, cache_bytes), *bq = up(be, q, sizeof(float) * qn);
        struct weft_buffer *bo = up(be, NULL, sizeof(float) * qn), *bp = up(be, pos, 4 * nrows);
        struct weft_buffer *bs = up(be, seq, 4 * nrows), *bsl = up(be, slot, 4 * nrows);
        struct weft_buffer *bbo = up(be, bt_off, 4 * n_seq), *bbt = up(be, bt, 4 * n_blocks_total);
        struct weft_op op = {.kind = WEFT_OP_ATTENTION};
        op.u.attention = (struct weft_op_attention){
            weft_view_2d(bq, 0, WEFT_TYPE_F32, n_head * hd, nrows), weft_view_2d(bo, 0, WEFT_TYPE_F32, n_head * hd, nrows),
            {bc, kvt, nl, layer, n_kv, hd},
            {nrows, n_seq, weft_view_2d(bp, 0, WEFT_TYPE_I32, nrows, 1), weft_view_2d(bs, 0, WEFT_TYPE_I32, nrows, 1),
             weft_view_2d(bsl, 0, WEFT_TYPE_I32, nrows, 1), weft_view_2d(bbo, 0, WEFT_TYPE_I32, n_seq, 1),
             weft_view_2d(bbt, 0, WEFT_TYPE_I32, n_blocks_total, 1)},
            n_head, 1.0f / sqrtf((float)hd), 0};
        CHECK(be->iface->supports(be, &op));
        CHECK(be->iface->run(be, &op, 1) == WEFT_OK);
        down(be, bo, outs[k], sizeof(float) * qn);
        struct weft_buffer *all[] = {bc, bq, bo, bp, bs, bsl, bbo, bbt};
        for (int i = 0; i < 8; i++) be->iface->buffer_free(all[i]);
    }
    /* double-precision reference over the dequantized cache */
    float *ref = malloc(sizeof(float) * qn), *kr = malloc(sizeof(float) * hd), *vr = malloc(sizeof(float) * hd);
    double *sc = malloc(sizeof(double) * seq_len[0] * 2), *acc = malloc(sizeof(double) * hd);
    const int group = n_head / n_kv;
    const size_t head_bytes = weft_row_size(kvt, hd);
    for (int r = 0; r < nrows; r++)
        for (int h = 0; h < n_head; h++) {
            const float *qh = q + ((size_t)r * n_head + h) * hd;
            double mx = -1e300, sum = 0;
            for (int p = 0; p <= pos[r]; p++) {
                size_t sl = (size_t)bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                size_t off = (((sl / 16) * nl + layer) * 2) * layer_bytes + (sl % 16) * tok + (size_t)(h / group) * head_bytes;
                weft_dequantize_row(kvt, cache + off, kr, hd);
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * kr[i];
                sc[p] = d / sqrt((double)hd);
                if (sc[p] > mx) mx = sc[p];
            }
            for (int i = 0; i < hd; i++) acc[i] = 0;
            for (int p = 0; p <= pos[r]; p++) {
                size_t sl = (size_t)bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                size_t off = (((sl / 16) * nl + layer) * 2 + 1) * layer_bytes + (sl % 16) * tok + (size_t)(h / group) * head_bytes;
                weft_dequantize_row(kvt, cache + off, vr, hd);
                double w = exp(sc[p] - mx);
                sum += w;
                for (int i = 0; i < hd; i++) acc[i] += w * vr[i];
            }
            for (int i = 0; i < hd; i++) ref[((size_t)r * n_head + h) * hd + i] = (float)(acc[i] / sum);
        }
    double e = nmse_f(og, ref, qn), ec = nmse_f(oc, ref, qn);
    printf("  attention %s heads %d/%d hd %d, %d seqs (longest %d), %d prefill rows: nmse %s %.3g, cpu %.3g\n",
           weft_type_name(kvt), n_head, n_kv, hd, n_seq, seq_len[0], prefill_rows, gpu, e, ec);
    if (!strncmp(spec, "cpu", 3)) tol = 1e-3;   /* harness check: the CPU accumulates in F16 */
    CHECK_MSG(e < tol, "%s attention nmse %.3g >= %.3g", gpu, e, tol);
    /* the CPU rounds q (and, for F16 caches, its accumulator) to F16 as
     * ggml does, so it is only close; the two must still agree */
    CHECK_MSG(nmse_f(og, oc, qn) < 1e-3, "%s vs cpu attention nmse %.3g", gpu, nmse_f(og, oc, qn));
    free(ref); free(kr); free(vr); free(sc); free(acc);
    free(bt_off); free(bt); free(pos); free(seq); free(slot); free(cache); free(q); free(oc); free(og);
}

static void split_k_attention_matches_cpu_at_long_contexts(void)
{
    struct weft_backend *hb = open_gpu(true), *cpu = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    if (!hb || !cpu) return;
    const int lens1[] = {4000}, lens3[] = {3001, 700, 17};
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 2, 128, lens1, 1, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 2, 128, lens3, 3, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 32, 8, 64, lens3, 3, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_Q8_0, 8, 2, 128, lens3, 3, 0, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_F16, 8, 4, 8, lens3, 3, 0, 1e-8);   /* stories260K's head_dim */
    /* a prefill chunk big enough for the one-pass (no split) variant */
    const int lensp[] = {600, 40};
    attention_case(hb, cpu, WEFT_TYPE_F16, 16, 4, 128, lensp, 2, 320, 1e-8);
    attention_case(hb, cpu, WEFT_TYPE_Q8_0, 16, 4, 64, lensp, 2, 320, 1e-8);
    weft_backend_close(hb);
    weft_backend_close(cpu);
}

/* out = x · Wᵀ (+ out, when with_add: the fused residual aliasing out) for
 * each row count in Rs, against a double-precision reference over the
 * dequantized weights */
static void matmul_case(struct weft_backend *hb, enum weft_type t, int64_t K, int64_t N, const int64_t *Rs, size_t nR,
                        bool with_add)
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
    struct weft_buffer *bw = up(hb, w, rs * N);
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
                ref[r * N + n] = (float)(s + res[r * N + n]);
            }
        struct weft_buffer *bx = up(hb, x, sizeof(float) * Rr * K), *bo = up(hb, res, sizeof(float) * Rr * N);
        struct weft_op op = {.kind = WEFT_OP_MATMUL};
        op.u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, Rr),
                                              .w = weft_view_2d(bw, 0, t, K, N),
                                              .out = weft_view_2d(bo, 0, WEFT_TYPE_F32, N, Rr),
                                              .add = weft_view_2d(bo, 0, WEFT_TYPE_F32, N, Rr),
                                              .has_add = with_add};
        CHECK(hb->iface->supports(hb, &op));
        CHECK(hb->iface->run(hb, &op, 1) == WEFT_OK);
        down(hb, bo, out, sizeof(float) * Rr * N);
        double e = nmse_f(out, ref, Rr * N);
        double tol = t == WEFT_TYPE_F32 ? 1e-10 : t == WEFT_TYPE_F16 || t == WEFT_TYPE_BF16 ? 1e-5 : 2e-4;
        CHECK_MSG(e < tol, "matmul %s K%lld N%lld R%lld%s: nmse %.3g", weft_type_name(t), (long long)K, (long long)N,
                  (long long)Rr, with_add ? " +add" : "", e);
        hb->iface->buffer_free(bx); hb->iface->buffer_free(bo);
        free(x); free(out); free(ref); free(res);
    }
    hb->iface->buffer_free(bw);
    free(w); free(wd); free(tmp);
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
    RUN(split_k_attention_matches_cpu_at_long_contexts);
    RUN(graph_replay_equals_eager_steps);
    return check_summary();
}
