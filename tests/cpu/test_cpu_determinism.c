/* The CPU backend gives bit-identical results whatever its thread count, run
 * to run, and on the very first op list a fresh backend runs (when its
 * scratch memory grows) as on later ones:
 *  - LOGITS as a fresh backend's first op: its normalised rows sit in the
 *    scratch while the matmul grows it (a pointer into the old scratch read
 *    freed memory: the first step's logits changed from run to run);
 *  - a small op list (EMBED, RMSNORM, Q8_0 and Q4_0 MATMULs with a fused
 *    residual, LOGITS) on fresh backends of 1, 2 and 3 threads: step 0 equals
 *    step 0 of every other backend and a repeat of itself, bit for bit, and
 *    LOGITS matches a double-precision reference.
 * Each case is repeated on several fresh backends. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/quant.h"
#include "tests/check.h"

enum { E = 2048, V = 96, R = 3, NOUT = 2, REPEATS = 4 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static struct weft_buffer *up(struct weft_backend *be, const void *data, size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(be->iface->buffer_alloc(be, n, &b) == WEFT_OK);
    if (b && data) CHECK(be->iface->buffer_write(b, 0, data, n) == WEFT_OK);
    return b;
}

/* host data shared by every backend */
static float emb[V * E], norm[E], out_w[V * E], xin[R * E];
static uint8_t *wa, *wb;  /* Q8_0 and Q4_0 E x E */
static const int32_t ids[R] = {5, 77, 31}, rows[NOUT] = {2, 0};

static void data_init(void)
{
    for (int i = 0; i < V * E; i++) emb[i] = frand();
    for (int i = 0; i < V * E; i++) out_w[i] = frand() * 0.1f;
    for (int i = 0; i < E; i++) norm[i] = 1.0f + 0.1f * frand();
    for (int i = 0; i < R * E; i++) xin[i] = frand();
    float *tmp = malloc(sizeof(float) * E);
    size_t ra = weft_row_size(WEFT_TYPE_Q8_0, E), rb = weft_row_size(WEFT_TYPE_Q4_0, E);
    wa = malloc(ra * E);
    wb = malloc(rb * E);
    for (int r = 0; r < E; r++) {
        for (int i = 0; i < E; i++) tmp[i] = frand() * 0.05f;
        weft_quantize_row(WEFT_TYPE_Q8_0, tmp, wa + r * ra, E);
        for (int i = 0; i < E; i++) tmp[i] = frand() * 0.05f;
        weft_quantize_row(WEFT_TYPE_Q4_0, tmp, wb + r * rb, E);
    }
    free(tmp);
}

static bool run_read(struct weft_backend *be, const struct weft_op *ops, size_t n, struct weft_buffer *res, float *dst,
                     size_t bytes)
{
    for (size_t i = 0; i < n; i++)
        if (!be->iface->supports(be, &ops[i])) { fprintf(stderr, "op %zu unsupported\n", i); return false; }
    if (be->iface->run(be, ops, n) != WEFT_OK) { fprintf(stderr, "run: %s\n", weft_last_error()); return false; }
    return be->iface->sync(be) == WEFT_OK && be->iface->buffer_read(res, 0, dst, bytes) == WEFT_OK;
}

/* LOGITS of xin's rows `rows` in double, as the reference */
static void logits_ref(double *ref)
{
    for (int i = 0; i < NOUT; i++) {
        const float *x = xin + rows[i] * E;
        double ss = 0;
        for (int k = 0; k < E; k++) ss += (double)x[k] * x[k];
        double sc = 1.0 / sqrt(ss / E + 1e-5);
        for (int n = 0; n < V; n++) {
            double s = 0;
            for (int k = 0; k < E; k++) s += x[k] * sc * norm[k] * out_w[n * E + k];
            ref[i * V + n] = s;
        }
    }
}

static void logits_first_op(void)
{
    static double ref[NOUT * V];
    logits_ref(ref);
    static float want[NOUT * V];
    bool have_want = false;
    for (int rep = 0; rep < REPEATS; rep++)
        for (int nt = 1; nt <= 3; nt++) {
            struct weft_backend *be = NULL;
            CHECK(weft_backend_open("cpu", nt, &be) == WEFT_OK);
            if (!be) return;
            struct weft_buffer *bx = up(be, xin, sizeof xin), *bn = up(be, norm, sizeof norm),
                               *bw = up(be, out_w, sizeof out_w), *br = up(be, rows, sizeof rows),
                               *bo = up(be, NULL, sizeof(float) * NOUT * V);
            struct weft_op op = {.kind = WEFT_OP_LOGITS};
            op.u.logits = (struct weft_op_logits){weft_view_2d(bx, 0, WEFT_TYPE_F32, E, R),
                                                  weft_view_2d(br, 0, WEFT_TYPE_I32, NOUT, 1),
                                                  weft_view_2d(bn, 0, WEFT_TYPE_F32, E, 1),
                                                  weft_view_2d(bw, 0, WEFT_TYPE_F32, E, V),
                                                  weft_view_2d(bo, 0, WEFT_TYPE_F32, V, NOUT), 1e-5f, 0.0f};
            static float first[NOUT * V], again[NOUT * V];
            CHECK(run_read(be, &op, 1, bo, first, sizeof first));
            CHECK(run_read(be, &op, 1, bo, again, sizeof again));
            CHECK_MSG(memcmp(first, again, sizeof first) == 0, "%d threads, repeat %d: first LOGITS differs from the second",
                      nt, rep);
            if (!have_want) { memcpy(want, again, sizeof want); have_want = true; }
            CHECK_MSG(memcmp(first, want, sizeof first) == 0, "%d threads, repeat %d: LOGITS differs from 1 thread's", nt,
                      rep);
            double e = 0, s = 0;
            for (int i = 0; i < NOUT * V; i++) { double d = first[i] - ref[i]; e += d * d; s += ref[i] * ref[i]; }
            CHECK_MSG(e / s < 1e-10, "%d threads: first LOGITS vs double reference nmse %.3g", nt, e / s);
            struct weft_buffer *all[] = {bx, bn, bw, br, bo};
            for (int i = 0; i < 5; i++) be->iface->buffer_free(all[i]);
            weft_backend_close(be);
        }
}

/* EMBED, RMSNORM, MATMUL Q8_0 (+residual), MATMUL Q4_0, LOGITS: step 0 of
 * fresh backends with 1, 2 and 3 threads, and a second step on each */
static void op_list_first_step(void)
{
    static float want[NOUT * V];
    bool have_want = false;
    size_t ra = weft_row_size(WEFT_TYPE_Q8_0, E), rb = weft_row_size(WEFT_TYPE_Q4_0, E);
    for (int rep = 0; rep < REPEATS; rep++)
        for (int nt = 1; nt <= 3; nt++) {
            struct weft_backend *be = NULL;
            CHECK(weft_backend_open("cpu", nt, &be) == WEFT_OK);
            if (!be) return;
            struct weft_buffer *be_emb = up(be, emb, sizeof emb), *bn = up(be, norm, sizeof norm),
                               *bw = up(be, out_w, sizeof out_w), *ba = up(be, wa, ra * E), *bb = up(be, wb, rb * E),
                               *bid = up(be, ids, sizeof ids), *brw = up(be, rows, sizeof rows),
                               *act = up(be, NULL, sizeof(float) * R * E * 3),
                               *bo = up(be, NULL, sizeof(float) * NOUT * V);
            if (be->iface->weight_prepare) {
                struct weft_view va = weft_view_2d(ba, 0, WEFT_TYPE_Q8_0, E, E),
                                 vb = weft_view_2d(bb, 0, WEFT_TYPE_Q4_0, E, E);
                CHECK(be->iface->weight_prepare(be, &va) == WEFT_OK);
                CHECK(be->iface->weight_prepare(be, &vb) == WEFT_OK);
            }
            const size_t f = sizeof(float);
#define A(i) weft_view_2d(act, (size_t)(i) * R * E * f, WEFT_TYPE_F32, E, R)
            struct weft_op ops[6] = {{0}};
            ops[0].kind = WEFT_OP_EMBED;
            ops[0].u.embed = (struct weft_op_embed){weft_view_2d(be_emb, 0, WEFT_TYPE_F32, E, V),
                                                    weft_view_2d(bid, 0, WEFT_TYPE_I32, R, 1), A(0), 0.0f};
            ops[1].kind = WEFT_OP_RMSNORM;
            ops[1].u.rmsnorm = (struct weft_op_rmsnorm){.x = A(0), .w = weft_view_2d(bn, 0, WEFT_TYPE_F32, E, 1),
                                                        .out = A(1), .eps = 1e-5f};
            ops[2].kind = WEFT_OP_MATMUL;
            ops[2].u.matmul = (struct weft_op_matmul){.x = A(1), .w = weft_view_2d(ba, 0, WEFT_TYPE_Q8_0, E, E),
                                                      .out = A(0), .add = A(0), .has_add = true};
            ops[3].kind = WEFT_OP_MATMUL;
            ops[3].u.matmul = (struct weft_op_matmul){.x = A(0), .w = weft_view_2d(bb, 0, WEFT_TYPE_Q4_0, E, E),
                                                      .out = A(2)};
            ops[4].kind = WEFT_OP_LOGITS;
            ops[4].u.logits = (struct weft_op_logits){A(2), weft_view_2d(brw, 0, WEFT_TYPE_I32, NOUT, 1),
                                                      weft_view_2d(bn, 0, WEFT_TYPE_F32, E, 1),
                                                      weft_view_2d(bw, 0, WEFT_TYPE_F32, E, V),
                                                      weft_view_2d(bo, 0, WEFT_TYPE_F32, V, NOUT), 1e-5f, 0.0f};
#undef A
            static float first[NOUT * V], again[NOUT * V];
            CHECK(run_read(be, ops, 5, bo, first, sizeof first));
            CHECK(run_read(be, ops, 5, bo, again, sizeof again));
            CHECK_MSG(memcmp(first, again, sizeof first) == 0, "%d threads, repeat %d: step 0 differs from step 1", nt,
                      rep);
            if (!have_want) { memcpy(want, again, sizeof want); have_want = true; }
            CHECK_MSG(memcmp(first, want, sizeof first) == 0, "%d threads, repeat %d: step 0 differs from 1 thread's", nt,
                      rep);
            struct weft_buffer *all[] = {be_emb, bn, bw, ba, bb, bid, brw, act, bo};
            for (int i = 0; i < 9; i++) be->iface->buffer_free(all[i]);
            weft_backend_close(be);
        }
}

int main(void)
{
    data_init();
    RUN(logits_first_op);
    RUN(op_list_first_step);
    free(wa);
    free(wb);
    return check_summary();
}
