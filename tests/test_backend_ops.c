/* Every op x type x shape on every backend present, compared by normalised
 * mean squared error against a double-precision reference written here, and
 * every backend but the CPU also against the CPU backend (the oracle). Outputs
 * sit between guard bytes (and at a non-zero view offset) to catch overruns.
 * Prints a support/pass matrix (ops x devices); a GPU backend must pass the
 * `required` rows. Vulkan runs with the validation layer (WEFT_VK_VALIDATE). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_impl.h"  /* weft_cpu_expert_passes */
#include "base/quant.h"
#include "base/rope.h"
#include "tests/check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform [-1, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static double nmse(const float *a, const double *ref, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) { e += (a[i] - ref[i]) * (a[i] - ref[i]); s += ref[i] * ref[i]; }
    return s > 0 ? e / s : e;
}

/* ---- a backend under test ---- */
static struct weft_backend *be;
static const struct weft_backend_iface *bi;
static bool is_cpu;          /* the oracle: its outputs are kept for the others */

static struct weft_buffer *upload(const void *data, size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(bi->buffer_alloc(be, n, &b) == WEFT_OK);
    if (b && data) CHECK(bi->buffer_write(b, 0, data, n) == WEFT_OK);
    return b;
}

static void download(struct weft_buffer *b, void *dst, size_t n) { CHECK(bi->buffer_read(b, 0, dst, n) == WEFT_OK); }

/* ---- the support/pass matrix: one row per op (and type), one column per device ---- */
enum { NOT_RUN = 0, PASS, FAIL, UNSUP };
#define MAX_ROWS 192
#define MAX_DEVS 8
static char row_names[MAX_ROWS][40];
static unsigned char cells[MAX_ROWS][MAX_DEVS];
static char dev_names[MAX_DEVS][48];
static int n_rows, n_devs, cur_dev;

static int row_id(const char *name)
{
    for (int i = 0; i < n_rows; i++)
        if (!strcmp(row_names[i], name)) return i;
    if (n_rows == MAX_ROWS) return MAX_ROWS - 1;
    snprintf(row_names[n_rows], sizeof row_names[0], "%s", name);
    return n_rows++;
}

/* A failure anywhere in a row's cases makes the cell FAIL. */
static void mark(const char *row, int st)
{
    unsigned char *c = &cells[row_id(row)][cur_dev];
    if (*c == NOT_RUN || st == FAIL) *c = (unsigned char)st;
}

static bool supported(const struct weft_op *op, const char *row)
{
    if (bi->supports(be, op)) return true;
    mark(row, UNSUP);
    return false;
}

static bool run_ops(const struct weft_op *ops, size_t n)
{
    weft_status st = bi->run(be, ops, n);
    if (st == WEFT_OK) st = bi->sync(be);
    CHECK_MSG(st == WEFT_OK, "%s: run: %s", bi->name, weft_last_error());
    return st == WEFT_OK;
}

/* ---- outputs with guard bytes on both sides (and a non-zero view offset) ---- */
#define GUARD 256
struct gbuf { struct weft_buffer *b; size_t n; };

static struct gbuf gnew(const void *init, size_t n)
{
    unsigned char *tmp = malloc(n + 2 * GUARD);
    memset(tmp, 0xA5, n + 2 * GUARD);
    if (init) memcpy(tmp + GUARD, init, n);
    else memset(tmp + GUARD, 0, n);
    struct gbuf g = {upload(tmp, n + 2 * GUARD), n};
    free(tmp);
    return g;
}

static struct weft_view gview(struct gbuf g, enum weft_type t, int64_t ne0, int64_t ne1)
{
    return weft_view_2d(g.b, GUARD, t, ne0, ne1);
}

/* Read the payload; false (and a failed check) if a guard byte changed. */
static bool gread(struct gbuf g, void *dst, const char *what)
{
    unsigned char *tmp = malloc(g.n + 2 * GUARD);
    download(g.b, tmp, g.n + 2 * GUARD);
    size_t bad = 0;
    for (size_t i = 0; i < GUARD; i++) bad += (tmp[i] != 0xA5) + (tmp[GUARD + g.n + i] != 0xA5);
    memcpy(dst, tmp + GUARD, g.n);
    free(tmp);
    CHECK_MSG(bad == 0, "%s %s: %zu guard bytes around the output were overwritten", bi->name, what, bad);
    return bad == 0;
}

static void gfree(struct gbuf g) { bi->buffer_free(g.b); }

/* ---- the CPU's outputs, to hold every other backend to ---- */
#define MAX_SAVED 512
static struct { char key[96]; float *v; size_t n; } saved[MAX_SAVED];
static int n_saved;

/* CPU: keep out[0..n) under key. Others: nmse against the CPU's < tol. */
static bool vs_cpu(const char *key, const float *out, size_t n, double tol)
{
    if (is_cpu) {
        if (n_saved < MAX_SAVED) {
            snprintf(saved[n_saved].key, sizeof saved[0].key, "%s", key);
            saved[n_saved].v = malloc(n * sizeof(float));
            memcpy(saved[n_saved].v, out, n * sizeof(float));
            saved[n_saved++].n = n;
        }
        return true;
    }
    for (int i = 0; i < n_saved; i++) {
        if (strcmp(saved[i].key, key) || saved[i].n != n) continue;
        double e = 0, s = 0;
        for (size_t j = 0; j < n; j++) {
            double d = (double)out[j] - saved[i].v[j];
            e += d * d;
            s += (double)saved[i].v[j] * saved[i].v[j];
        }
        e = s > 0 ? e / s : e;
        CHECK_MSG(e < tol, "%s %s: nmse vs the CPU backend %.3g (tolerance %.1g)", bi->name, key, e, tol);
        return e < tol;
    }
    return true;  /* the CPU did not run this case */
}

/* random weights of `type`, [rows][k]; also returns their dequantized values */
static void *rand_weights(enum weft_type t, int64_t rows, int64_t k, float *deq)
{
    size_t rs = weft_row_size(t, k);
    uint8_t *w = malloc(rs * rows);
    float *tmp = malloc(sizeof(float) * k);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) tmp[i] = frand();
        if (!weft_quantize_row(t, tmp, w + r * rs, k)) {
            /* types without a quantizer: random bytes, sane scales */
            for (size_t b = 0; b < rs; b++) w[r * rs + b] = (uint8_t)(frand() * 127 + 128);
            size_t nb = rs / weft_type_get(t)->type_size;
            for (size_t b = 0; b < nb; b++) {
                uint8_t *blk = w + r * rs + b * weft_type_get(t)->type_size;
                weft_half d = weft_f32_to_half(0.01f), dm = weft_f32_to_half(0.005f);
                if (t == WEFT_TYPE_Q6_K) memcpy(blk + offsetof(struct weft_block_q6_k, d), &d, 2);
                else if (t == WEFT_TYPE_Q3_K) memcpy(blk + offsetof(struct weft_block_q3_k, d), &d, 2);
                else if (t == WEFT_TYPE_Q2_K) {
                    memcpy(blk + offsetof(struct weft_block_q2_k, d), &d, 2);
                    memcpy(blk + offsetof(struct weft_block_q2_k, dmin), &dm, 2);
                } else if (t == WEFT_TYPE_IQ4_NL) {
                    memcpy(blk, &d, 2);
                } else if (t == WEFT_TYPE_IQ4_XS) { /* |x| up to d * 32 * 127 */
                    weft_half dx = weft_f32_to_half(0.0005f);
                    memcpy(blk, &dx, 2);
                } else if (t == WEFT_TYPE_MXFP4) {
                    blk[0] = (uint8_t)(121 + (int)(frand() * 3)); /* 2^-7 .. 2^-5 times e2m1 */
                } else { memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); }
            }
        }
        weft_dequantize_row(t, w + r * rs, deq + r * k, k);
    }
    free(tmp);
    return w;
}

static const enum weft_type weight_types[] = {
    WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1,
    WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1, WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K,
    WEFT_TYPE_Q2_K, WEFT_TYPE_Q3_K, WEFT_TYPE_IQ4_NL, WEFT_TYPE_IQ4_XS, WEFT_TYPE_MXFP4,
};
#define N_TYPES (sizeof weight_types / sizeof weight_types[0])

/* tolerance by the activation type the backend multiplies with */
static double mm_tol(enum weft_type t)
{
    enum weft_type v = weft_vec_dot_type(t);
    return v == WEFT_TYPE_F32 ? 1e-10 : v == WEFT_TYPE_F16 ? 1e-5 : v == WEFT_TYPE_BF16 ? 1e-4 : 2e-4;
}

static void matmul_matches_reference_for_every_type_and_shape(void)
{
    rng = 0x1234567ull;
    /* rows x K x N: decode (1 row), small batches, prefill-sized; odd N and block counts */
    static const int64_t shapes[][3] = {{1, 256, 40}, {3, 512, 33}, {17, 768, 70}, {64, 256, 16}, {2, 288, 7}, {77, 544, 129}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum weft_type t = weight_types[ti];
        char row[40];
        snprintf(row, sizeof row, "MATMUL %s", weft_type_name(t));
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t R = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
            if (K % weft_type_get(t)->block_size) K = 768;
            float *wd = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * R * K);
            float *add = malloc(sizeof(float) * R * N), *out = malloc(sizeof(float) * R * N);
            double *ref = malloc(sizeof(double) * R * N);
            void *w = rand_weights(t, N, K, wd);
            for (int64_t i = 0; i < R * K; i++) x[i] = frand();
            for (int64_t i = 0; i < R * N; i++) add[i] = frand();
            bool fused = si % 2 == 0;  /* the residual add fused in place, or a plain product */
            for (int64_t r = 0; r < R; r++)
                for (int64_t n = 0; n < N; n++) {
                    double s = fused ? add[r * N + n] : 0;
                    for (int64_t k = 0; k < K; k++) s += (double)x[r * K + k] * wd[n * K + k];
                    ref[r * N + n] = s;
                }
            struct weft_buffer *bw = upload(w, weft_row_size(t, K) * N), *bx = upload(x, sizeof(float) * R * K);
            struct gbuf bo = gnew(fused ? add : NULL, sizeof(float) * R * N);
            struct weft_op op = {.kind = WEFT_OP_MATMUL};
            op.u.matmul = (struct weft_op_matmul){
                .x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R), .w = weft_view_2d(bw, 0, t, K, N),
                .out = gview(bo, WEFT_TYPE_F32, N, R), .has_add = fused};
            op.u.matmul.add = op.u.matmul.out;  /* fused residual, in place */
            if (supported(&op, row)) {
                bool ok = run_ops(&op, 1) && gread(bo, out, row);
                double e = nmse(out, ref, R * N);
                char key[96];
                snprintf(key, sizeof key, "%s R%lld K%lld N%lld", row, (long long)R, (long long)K, (long long)N);
                CHECK_MSG(e < mm_tol(t), "%s %s: nmse %.3g", bi->name, key, e);
                ok = ok && e < mm_tol(t);
                ok = vs_cpu(key, out, R * N, 4 * mm_tol(t)) && ok;
                mark(row, ok ? PASS : FAIL);
            }
            bi->buffer_free(bw); bi->buffer_free(bx); gfree(bo);
            free(w); free(wd); free(x); free(add); free(out); free(ref);
        }
    }
}

static void embed_and_logits_match_reference(void)
{
    rng = 0x2345678ull;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum weft_type t = weight_types[ti];
        int64_t V = 50, E = 256, R = 5;
        float *td = malloc(sizeof(float) * V * E), *out = malloc(sizeof(float) * R * E);
        double *ref = malloc(sizeof(double) * R * E);
        void *tab = rand_weights(t, V, E, td);
        int32_t ids[5] = {0, 49, 7, 7, 23};
        for (int64_t r = 0; r < R; r++) for (int64_t k = 0; k < E; k++) ref[r * E + k] = td[ids[r] * E + k];
        char row[40];
        snprintf(row, sizeof row, "EMBED %s", weft_type_name(t));
        struct weft_buffer *bt = upload(tab, weft_row_size(t, E) * V), *bi_ = upload(ids, sizeof ids);
        struct gbuf bo = gnew(NULL, sizeof(float) * R * E);
        struct weft_op op = {.kind = WEFT_OP_EMBED};
        op.u.embed = (struct weft_op_embed){.table = weft_view_2d(bt, 0, t, E, V),
                                            .ids = weft_view_2d(bi_, 0, WEFT_TYPE_I32, R, 1),
                                            .out = gview(bo, WEFT_TYPE_F32, E, R)};
        bool have_x = false;
        if (supported(&op, row)) {
            bool ok = run_ops(&op, 1) && gread(bo, out, row);
            CHECK_MSG(nmse(out, ref, R * E) == 0, "%s embed %s", bi->name, weft_type_name(t));
            mark(row, ok && nmse(out, ref, R * E) == 0 ? PASS : FAIL);
            have_x = true;
        }
        /* logits of rows {4, 1}: rmsnorm(x) * g · tableᵀ (x: the exact rows, written here) */
        if (!have_x) {
            for (int64_t i = 0; i < R * E; i++) out[i] = (float)ref[i];
            CHECK(bi->buffer_write(bo.b, GUARD, out, sizeof(float) * R * E) == WEFT_OK);
        }
        float g[256], lg[2 * 50];
        double lref[2 * 50];
        for (int k = 0; k < E; k++) g[k] = 1.0f + 0.5f * frand();
        int32_t rows[2] = {4, 1};
        for (int i = 0; i < 2; i++) {
            const float *x = out + rows[i] * E;
            double ss = 0;
            for (int k = 0; k < E; k++) ss += (double)x[k] * x[k];
            double sc = 1.0 / sqrt(ss / E + 1e-5);
            for (int64_t v = 0; v < V; v++) {
                double s = 0;
                for (int k = 0; k < E; k++) s += x[k] * sc * g[k] * td[v * E + k];
                lref[i * V + v] = s;
            }
        }
        snprintf(row, sizeof row, "LOGITS %s", weft_type_name(t));
        struct weft_buffer *bg = upload(g, sizeof g), *br = upload(rows, sizeof rows);
        struct gbuf bl = gnew(NULL, sizeof lg);
        struct weft_op lo = {.kind = WEFT_OP_LOGITS};
        lo.u.logits = (struct weft_op_logits){
            .x = gview(bo, WEFT_TYPE_F32, E, R), .rows = weft_view_2d(br, 0, WEFT_TYPE_I32, 2, 1),
            .norm_w = weft_view_2d(bg, 0, WEFT_TYPE_F32, E, 1), .w = weft_view_2d(bt, 0, t, E, V),
            .out = gview(bl, WEFT_TYPE_F32, V, 2), .eps = 1e-5f};
        if (supported(&lo, row)) {
            bool ok = run_ops(&lo, 1) && gread(bl, lg, row);
            double e = nmse(lg, lref, 2 * V);
            CHECK_MSG(e < mm_tol(t), "%s logits %s: nmse %.3g", bi->name, weft_type_name(t), e);
            ok = ok && e < mm_tol(t);
            ok = vs_cpu(row, lg, 2 * V, 4 * mm_tol(t)) && ok;
            mark(row, ok ? PASS : FAIL);
        }
        /* the same logits soft-capped at 2 (api 6): tanh(l / 2) · 2 */
        snprintf(row, sizeof row, "LOGITS softcap %s", weft_type_name(t));
        lo.u.logits.softcap = 2.0f;
        if (supported(&lo, row)) {
            bool ok = run_ops(&lo, 1) && gread(bl, lg, row);
            for (int i = 0; i < 2 * V; i++) lref[i] = 2.0 * tanh(lref[i] / 2.0);
            double e = nmse(lg, lref, 2 * V);
            CHECK_MSG(e < mm_tol(t), "%s logits softcap %s: nmse %.3g", bi->name, weft_type_name(t), e);
            ok = ok && e < mm_tol(t);
            ok = vs_cpu(row, lg, 2 * V, 4 * mm_tol(t)) && ok;
            mark(row, ok ? PASS : FAIL);
        }
        bi->buffer_free(bt); bi->buffer_free(bi_); gfree(bo);
        bi->buffer_free(bg); bi->buffer_free(br); gfree(bl);
        free(tab); free(td); free(out); free(ref);
    }
}

static void elementwise_ops_match_reference(void)
{
    rng = 0x3456789ull;
    enum { R = 7, K = 96 };
    static float x[R * K], a[R * K], w[K], out[R * K], sum[R * K];
    static double ref[R * K], rsum[R * K];
    for (int i = 0; i < R * K; i++) { x[i] = 3 * frand(); a[i] = frand(); }
    for (int k = 0; k < K; k++) w[k] = frand();
    struct weft_buffer *bx = upload(x, sizeof x), *ba = upload(a, sizeof a), *bw = upload(w, sizeof w);
    struct gbuf bo = gnew(NULL, sizeof out), bs = gnew(NULL, sizeof sum);
    struct weft_view vx = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R), va = weft_view_2d(ba, 0, WEFT_TYPE_F32, K, R);
    struct weft_view vo = gview(bo, WEFT_TYPE_F32, K, R), vs = gview(bs, WEFT_TYPE_F32, K, R);
    /* RMSNORM fused with the residual add, and plain */
    for (int fused = 1; fused >= 0; fused--) {
        const char *row = fused ? "RMSNORM+add" : "RMSNORM";
        for (int r = 0; r < R; r++) {
            double ss = 0;
            for (int k = 0; k < K; k++) {
                rsum[r * K + k] = (double)x[r * K + k] + (fused ? a[r * K + k] : 0);
                ss += rsum[r * K + k] * rsum[r * K + k];
            }
            for (int k = 0; k < K; k++) ref[r * K + k] = rsum[r * K + k] / sqrt(ss / K + 1e-6) * w[k];
        }
        struct weft_op op = {.kind = WEFT_OP_RMSNORM};
        op.u.rmsnorm = (struct weft_op_rmsnorm){.x = vx, .add = va, .sum = vs, .w = weft_view_2d(bw, 0, WEFT_TYPE_F32, K, 1),
                                                .out = vo, .eps = 1e-6f, .has_add = fused};
        if (!supported(&op, row)) continue;
        bool ok = run_ops(&op, 1) && gread(bo, out, row) && gread(bs, sum, row);
        CHECK_MSG(nmse(out, ref, R * K) < 1e-12, "%s %s: nmse %.3g", bi->name, row, nmse(out, ref, R * K));
        ok = ok && nmse(out, ref, R * K) < 1e-12;
        if (fused) {
            CHECK_MSG(nmse(sum, rsum, R * K) < 1e-14, "%s rmsnorm sum", bi->name);
            ok = ok && nmse(sum, rsum, R * K) < 1e-14;
        }
        mark(row, ok ? PASS : FAIL);
    }
    /* SILU_MUL */
    for (int i = 0; i < R * K; i++) ref[i] = x[i] / (1 + exp(-(double)x[i])) * a[i];
    struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
    op.u.silu_mul = (struct weft_op_silu_mul){.gate = vx, .up = va, .out = vo};
    if (supported(&op, "SILU_MUL")) {
        bool ok = run_ops(&op, 1) && gread(bo, out, "SILU_MUL");
        CHECK_MSG(nmse(out, ref, R * K) < 1e-12, "%s silu_mul", bi->name);
        mark("SILU_MUL", ok && nmse(out, ref, R * K) < 1e-12 ? PASS : FAIL);
    }
    /* ADD */
    for (int i = 0; i < R * K; i++) ref[i] = (double)x[i] + a[i];
    op = (struct weft_op){.kind = WEFT_OP_ADD};
    op.u.add = (struct weft_op_add){.a = vx, .b = va, .out = vo};
    if (supported(&op, "ADD")) {
        bool ok = run_ops(&op, 1) && gread(bo, out, "ADD");
        CHECK_MSG(nmse(out, ref, R * K) < 1e-14, "%s add", bi->name);
        mark("ADD", ok && nmse(out, ref, R * K) < 1e-14 ? PASS : FAIL);
    }
    /* ADD scale (api 10): the F32 sum, then the product; bit for bit the CPU */
    for (int i = 0; i < R * K; i++) ref[i] = (double)(x[i] + a[i]) * 0.8125;
    op.u.add.scale = 0.8125f;
    if (supported(&op, "ADD scale")) {
        bool ok = run_ops(&op, 1) && gread(bo, out, "ADD scale");
        CHECK_MSG(nmse(out, ref, R * K) < 1e-14, "%s add scale", bi->name);
        ok = ok && nmse(out, ref, R * K) < 1e-14 && vs_cpu("ADD scale", out, R * K, 1e-30);
        mark("ADD scale", ok ? PASS : FAIL);
    }
    /* COPY: an odd-sized slice of x into the middle of out */
    op = (struct weft_op){.kind = WEFT_OP_COPY};
    op.u.copy = (struct weft_op_copy){.src = bx, .dst = bo.b, .src_off = 40, .dst_off = GUARD + 400, .bytes = 1001};
    if (supported(&op, "COPY")) {
        memset(out, 0, sizeof out);
        CHECK(bi->buffer_write(bo.b, GUARD, out, sizeof out) == WEFT_OK);
        bool ok = run_ops(&op, 1) && gread(bo, out, "COPY");
        bool same = memcmp((char *)out + 400, (char *)x + 40, 1001) == 0;
        size_t outside = 0;
        for (size_t i = 0; i < sizeof out; i++) outside += (i < 400 || i >= 1401) && ((char *)out)[i] != 0;
        CHECK(same);
        CHECK_MSG(outside == 0, "%s copy wrote %zu bytes outside its range", bi->name, outside);
        mark("COPY", ok && same && outside == 0 ? PASS : FAIL);
    }
    bi->buffer_free(bx); bi->buffer_free(ba); bi->buffer_free(bw); gfree(bo); gfree(bs);
}

/* The op fields of api 5, each against a double reference and the CPU:
 * MATMUL bias (with and without the fused residual), SILU_MUL's GeLU-tanh
 * (ggml's F16-table GeGLU), EMBED scale. ATTENTION window is in
 * rope_and_paged_attention_match_reference. */
/* one SILU_MUL of act over R rows of K (gate g, up u) against ref: nmse under tol, and the
 * other backends within cpu_tol of the CPU */
static void glu_case(const char *row, enum weft_glu_act act, float alpha, float limit, const float *g, const float *u,
                     const double *ref, int R, int K, double tol, double cpu_tol)
{
    const size_t n = (size_t)R * K;
    float *out = malloc(sizeof(float) * n);
    struct weft_buffer *bg = upload(g, sizeof(float) * n), *bu = upload(u, sizeof(float) * n);
    struct gbuf bo = gnew(NULL, sizeof(float) * n);
    struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
    op.u.silu_mul = (struct weft_op_silu_mul){.gate = weft_view_2d(bg, 0, WEFT_TYPE_F32, K, R),
                                              .up = weft_view_2d(bu, 0, WEFT_TYPE_F32, K, R),
                                              .out = gview(bo, WEFT_TYPE_F32, K, R), .act = act, .alpha = alpha,
                                              .limit = limit};
    if (supported(&op, row)) {
        bool ok = run_ops(&op, 1) && gread(bo, out, row);
        double e = nmse(out, ref, n);
        CHECK_MSG(e < tol, "%s %s: nmse %.3g", bi->name, row, e);
        ok = ok && e < tol && vs_cpu(row, out, n, cpu_tol);
        mark(row, ok ? PASS : FAIL);
    }
    bi->buffer_free(bg); bi->buffer_free(bu); gfree(bo);
    free(out);
}

static void op_fields_match_reference(void)
{
    rng = 0x56789abull;
    static const enum weft_type bias_types[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_K};
    static const int64_t shapes[][3] = {{1, 256, 40}, {17, 768, 70}, {5, 512, 16}};
    for (size_t ti = 0; ti < sizeof bias_types / sizeof bias_types[0]; ti++) {
        enum weft_type t = bias_types[ti];
        char row[40];
        snprintf(row, sizeof row, "MATMUL bias %s", weft_type_name(t));
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t R = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
            float *wd = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * R * K), *bias = malloc(sizeof(float) * N);
            float *add = malloc(sizeof(float) * R * N), *out = malloc(sizeof(float) * R * N);
            double *ref = malloc(sizeof(double) * R * N);
            void *w = rand_weights(t, N, K, wd);
            for (int64_t i = 0; i < R * K; i++) x[i] = frand();
            for (int64_t i = 0; i < R * N; i++) add[i] = frand();
            for (int64_t i = 0; i < N; i++) bias[i] = 4 * frand();
            bool fused = si != 1;
            for (int64_t r = 0; r < R; r++)
                for (int64_t n = 0; n < N; n++) {
                    double sdot = 0;
                    for (int64_t k = 0; k < K; k++) sdot += (double)x[r * K + k] * wd[n * K + k];
                    ref[r * N + n] = sdot + bias[n] + (fused ? add[r * N + n] : 0);
                }
            struct weft_buffer *bw = upload(w, weft_row_size(t, K) * N), *bx = upload(x, sizeof(float) * R * K);
            /* the bias at a non-zero offset, as a family's views of a file are */
            float *bpad = calloc((size_t)N + 8, sizeof(float));
            memcpy(bpad + 8, bias, sizeof(float) * N);
            struct weft_buffer *bb = upload(bpad, sizeof(float) * (N + 8));
            struct gbuf bo = gnew(fused ? add : NULL, sizeof(float) * R * N);
            struct weft_op op = {.kind = WEFT_OP_MATMUL};
            op.u.matmul = (struct weft_op_matmul){
                .x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R), .w = weft_view_2d(bw, 0, t, K, N),
                .out = gview(bo, WEFT_TYPE_F32, N, R), .has_add = fused,
                .bias = weft_view_2d(bb, 8 * sizeof(float), WEFT_TYPE_F32, N, 1), .has_bias = true};
            op.u.matmul.add = op.u.matmul.out;
            if (supported(&op, row)) {
                bool ok = run_ops(&op, 1) && gread(bo, out, row);
                double e = nmse(out, ref, R * N);
                char key[96];
                snprintf(key, sizeof key, "%s R%lld K%lld N%lld", row, (long long)R, (long long)K, (long long)N);
                CHECK_MSG(e < mm_tol(t), "%s %s: nmse %.3g", bi->name, key, e);
                ok = ok && e < mm_tol(t);
                ok = vs_cpu(key, out, R * N, 4 * mm_tol(t)) && ok;
                mark(row, ok ? PASS : FAIL);
            }
            bi->buffer_free(bw); bi->buffer_free(bx); bi->buffer_free(bb); gfree(bo);
            free(w); free(wd); free(x); free(add); free(out); free(ref); free(bias); free(bpad);
        }
    }

    /* SILU_MUL's activations against double references (glu_case) */
    enum { R = 5, K = 200 };
    static float g[R * K], u[R * K];
    static double ref[R * K];
    /* GELU_TANH, gate values over [-12, 12) (both clamps); the F16 rounding of x and of
     * gelu(x): about 2^-11 relative */
    for (int i = 0; i < R * K; i++) { g[i] = 12 * frand(); u[i] = frand(); }
    for (int i = 0; i < R * K; i++) {
        double xg = g[i], gl = xg <= -10 ? 0 : xg >= 10 ? xg : 0.5 * xg * (1 + tanh(sqrt(2 / M_PI) * xg * (1 + 0.044715 * xg * xg)));
        ref[i] = gl * u[i];
    }
    glu_case("GLU gelu_tanh", WEFT_GLU_GELU_TANH, 0, 0, g, u, ref, R, K, 1e-6, 1e-9);
    /* SWIGLU_OAI (gpt-oss: alpha 1.702, limit 7), gate and up over [-10, 10) (both clamps) */
    for (int i = 0; i < R * K; i++) { g[i] = 10 * frand(); u[i] = 10 * frand(); }
    for (int i = 0; i < R * K; i++) {
        double x = g[i] < 7 ? g[i] : 7, y = u[i] < -7 ? -7 : u[i] > 7 ? 7 : u[i];
        ref[i] = x / (1 + exp(-1.702 * x)) * (y + 1);
    }
    glu_case("GLU swiglu_oai", WEFT_GLU_SWIGLU_OAI, 1.702f, 7.0f, g, u, ref, R, K, 1e-10, 1e-10);
    /* SIGMOID (api 9: Qwen3.5's gated attention output): up · sigmoid(gate) */
    for (int i = 0; i < R * K; i++) { g[i] = 8 * frand(); u[i] = 3 * frand(); }
    for (int i = 0; i < R * K; i++) ref[i] = u[i] / (1 + exp(-(double)g[i]));
    glu_case("GLU sigmoid", WEFT_GLU_SIGMOID, 0, 0, g, u, ref, R, K, 1e-12, 1e-12);

    /* EMBED scale, on an F16 and a Q8_0 table */
    static const enum weft_type et[] = {WEFT_TYPE_F16, WEFT_TYPE_Q8_0};
    for (size_t ti = 0; ti < 2; ti++) {
        enum { V = 30, E = 256, NR = 4 };
        float *deq = malloc(sizeof(float) * V * E), eo[NR * E];
        double eref[NR * E];
        void *tab = rand_weights(et[ti], V, E, deq);
        int32_t ids[NR] = {3, 29, 0, 3};
        const float scale = 16.0f * 1.0001f;
        for (int r = 0; r < NR; r++)
            for (int k = 0; k < E; k++) eref[r * E + k] = (double)(deq[ids[r] * E + k] * scale);
        struct weft_buffer *bt = upload(tab, weft_row_size(et[ti], E) * V), *bi_ = upload(ids, sizeof ids);
        struct gbuf beo = gnew(NULL, sizeof eo);
        struct weft_op eop = {.kind = WEFT_OP_EMBED};
        eop.u.embed = (struct weft_op_embed){.table = weft_view_2d(bt, 0, et[ti], E, V),
                                             .ids = weft_view_2d(bi_, 0, WEFT_TYPE_I32, NR, 1),
                                             .out = gview(beo, WEFT_TYPE_F32, E, NR), .scale = scale};
        if (supported(&eop, "EMBED scale")) {
            bool ok = run_ops(&eop, 1) && gread(beo, eo, "EMBED scale");
            double e = nmse(eo, eref, NR * E);
            CHECK_MSG(e < 1e-14, "%s embed scale %s: nmse %.3g", bi->name, weft_type_name(et[ti]), e);
            char key[64];
            snprintf(key, sizeof key, "EMBED scale %s", weft_type_name(et[ti]));
            ok = ok && e < 1e-14 && vs_cpu(key, eo, NR * E, 1e-14);
            mark("EMBED scale", ok ? PASS : FAIL);
        }
        bi->buffer_free(bt); bi->buffer_free(bi_); gfree(beo);
        free(tab); free(deq);
    }
}

/* ROPE_KV's scaling fields against the published formulas, in double:
 *  - linear (position interpolation, Chen et al. 2023): theta_i = (pos / s) b^(-2i/d);
 *  - LongRoPE (Phi-3's, as transformers' Phi3LongRoPEScaledRotaryEmbedding):
 *    theta_i = pos / (f_i b^(2i/d)), cos and sin times
 *    sqrt(1 + ln(s) / ln(n_orig)) (passed as attn_factor); Llama 3.1's
 *    rope_freqs divide the same way, without the magnitude;
 *  - YaRN (Peng et al. 2023, as ggml's rope_yarn): gamma_i = ramp over the
 *    pair index between the corr dims (base/rope.h), theta_i =
 *    (1 - gamma_i) theta_i / s + gamma_i theta_i, magnitude 1 + 0.1 ln s.
 * The rotated q is compared (and every backend with the CPU). */
static void rope_scaling_matches_formulas(void)
{
    rng = 0x6789abcull;
    enum { R = 5, NH = 2, HD = 64, NL = 1 };
    const float base = 10000.0f;
    int32_t pos[R] = {0, 1, 17, 130, 511}, seq[R] = {0, 0, 0, 0, 0}, bt[1] = {0}, bt_off[1] = {0}, slot[R];
    for (int r = 0; r < R; r++) slot[r] = r;  /* block 0 */
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++) ff[i] = 1.0f + (float)i * 0.37f;
    static float q[R * NH * HD], kq[R * HD], v[R * HD], out[R * NH * HD];
    static double ref[R * NH * HD];
    for (int i = 0; i < R * NH * HD; i++) q[i] = frand();
    for (int i = 0; i < R * HD; i++) { kq[i] = frand(); v[i] = frand(); }
    size_t layer_bytes = (size_t)WEFT_KV_BLOCK_TOKENS * HD * 2;
    for (int c = 0; c < 4; c++) {
        /* c 3 (api 10): q only, as c 1 (freq factors); k, v and the cache left as they were */
        const char *row = c == 0 ? "ROPE_KV linear" : c == 1 ? "ROPE_KV freq_factors (LongRoPE)" : c == 2 ? "ROPE_KV yarn"
                          : "ROPE_KV q_only";
        const bool q_only = c == 3;
        if (q_only) c = 1;
        const float s = c == 0 ? 4.0f : c == 1 ? 16.0f : 8.0f;
        const uint32_t n_orig = 512;
        float dims[2] = {0, 0};
        weft_rope_yarn_corr_dims(HD, n_orig, base, 32.0f, 1.0f, dims);
        const double mag = c == 1 ? sqrt(1 + log(s) / log((double)n_orig)) : c == 2 ? 1 + 0.1 * log(s) : 1;
        for (int r = 0; r < R; r++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HD / 2; i++) {
                    double th = pos[r] * pow(base, -2.0 * i / HD);
                    if (c == 0) th /= s;
                    if (c == 1) th /= ff[i];
                    if (c == 2) {
                        double y = (i - dims[0]) / fmax(0.001, dims[1] - dims[0]);
                        double gamma = 1 - fmin(1, fmax(0, y));
                        th = (1 - gamma) * th / s + gamma * th;
                    }
                    const float *src = q + (r * NH + h) * HD;
                    double x0 = src[i], x1 = src[i + HD / 2], cs = cos(th) * mag, sn = sin(th) * mag;
                    ref[(r * NH + h) * HD + i] = x0 * cs - x1 * sn;
                    ref[(r * NH + h) * HD + i + HD / 2] = x0 * sn + x1 * cs;
                }
        static unsigned char cache0[WEFT_KV_BLOCK_TOKENS * HD * 2 * 2 * NL], cache1[sizeof cache0];
        static float k1[R * HD];
        for (size_t i = 0; i < sizeof cache0; i++) cache0[i] = (unsigned char)(i * 7 + 3);
        struct weft_buffer *bc = upload(q_only ? cache0 : NULL, layer_bytes * 2 * NL), *bq = upload(q, sizeof q),
                           *bk = upload(kq, sizeof kq);
        struct weft_buffer *bv = upload(v, sizeof v), *bff = upload(ff, sizeof ff);
        struct weft_buffer *bpos = upload(pos, sizeof pos), *bseq = upload(seq, sizeof seq), *bslot = upload(slot, sizeof slot);
        struct weft_buffer *bbo = upload(bt_off, sizeof bt_off), *bbt = upload(bt, sizeof bt);
        struct weft_kv_view kv = {bc, WEFT_TYPE_F16, NL, 0, 1, HD, 0, false};
        struct weft_batch_view batch = {R, 1, weft_view_2d(bpos, 0, WEFT_TYPE_I32, R, 1), weft_view_2d(bseq, 0, WEFT_TYPE_I32, R, 1),
                                        weft_view_2d(bslot, 0, WEFT_TYPE_I32, R, 1), weft_view_2d(bbo, 0, WEFT_TYPE_I32, 1, 1),
                                        weft_view_2d(bbt, 0, WEFT_TYPE_I32, 1, 1)};
        struct weft_op op = {.kind = WEFT_OP_ROPE_KV};
        op.u.rope_kv = (struct weft_op_rope_kv){
            .q = weft_view_2d(bq, 0, WEFT_TYPE_F32, NH * HD, R), .k = weft_view_2d(bk, 0, WEFT_TYPE_F32, HD, R),
            .v = weft_view_2d(bv, 0, WEFT_TYPE_F32, HD, R), .kv = kv, .batch = batch, .n_head = NH, .n_rot = HD,
            .freq_base = base, .freq_scale = c == 1 ? 1.0f : 1.0f / s, .mode = WEFT_ROPE_NEOX, .q_only = q_only};
        if (c == 1) {
            op.u.rope_kv.freq_factors = weft_view_2d(bff, 0, WEFT_TYPE_F32, HD / 2, 1);
            op.u.rope_kv.has_freq_factors = true;
            op.u.rope_kv.attn_factor = (float)mag;
        }
        if (c == 2) {
            op.u.rope_kv.ext_factor = 1.0f;
            op.u.rope_kv.corr_dims[0] = dims[0];
            op.u.rope_kv.corr_dims[1] = dims[1];
        }
        if (supported(&op, row)) {
            bool ok = run_ops(&op, 1);
            download(bq, out, sizeof out);
            double e = nmse(out, ref, R * NH * HD);
            printf("  %s %s: nmse %.3g\n", bi->name, row, e);
            CHECK_MSG(e < 1e-9, "%s %s: nmse %.3g", bi->name, row, e);
            ok = ok && e < 1e-9 && vs_cpu(row, out, R * NH * HD, 1e-12);
            if (q_only) {
                download(bc, cache1, sizeof cache1);
                download(bk, k1, sizeof k1);
                bool kept = !memcmp(cache0, cache1, sizeof cache0) && !memcmp(kq, k1, sizeof k1);
                CHECK_MSG(kept, "%s %s: k or the cache changed", bi->name, row);
                ok = ok && kept;
            }
            mark(row, ok ? PASS : FAIL);
        }
        struct weft_buffer *all[] = {bc, bq, bk, bv, bff, bpos, bseq, bslot, bbo, bbt};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bi->buffer_free(all[i]);
        if (q_only) break;
    }
}

/* ROPE_KV then ATTENTION for a batch of two sequences — one a prefill chunk
 * continuing cached context, one a single decode row — with scattered
 * blocks and GQA, against a direct computation over the same cached K/V. */
static void rope_and_paged_attention_match_reference(void)
{
    rng = 0x456789aull;
    for (int c = 0; c < 6; c++) {
        /* normal rope; neox rope; neox rope and a sliding window of 7 (api 5);
         * neox rope and scores soft-capped at 0.5 (api 6); neox rope with V
         * heads of 32 beside K's 64 (api 6: head_dim_v); neox rope with a sink
         * logit per head and a window (api 7, gpt-oss) */
        const int mode = c >= 1;
        const uint32_t window = c == 2 || c == 5 ? 7 : 0;
        float sinks[6];  /* one per head (NH): above, near and below the scores */
        for (int h = 0; h < 6; h++) sinks[h] = 2.5f * frand();
        const float softcap = c == 3 ? 0.5f : 0.0f;
        const char *row = c == 5   ? "ATTENTION sinks"
                          : c == 4 ? "ROPE_KV + ATTENTION head_dim_v"
                          : c == 3 ? "ATTENTION softcap"
                          : c == 2 ? "ATTENTION window"
                          : mode   ? "ROPE_KV neox + ATTENTION"
                                   : "ROPE_KV normal + ATTENTION";
        enum { NL = 2, LAYER = 1, NH = 6, NKV = 2, HD = 64, NBLK = 8 };
        const int HDV = c == 4 ? 32 : HD;
        const int n_rot = HD;
        const float base = 10000.0f;
        /* a layer's K then V in a block (backend.h), in halves */
        const size_t kb = (size_t)WEFT_KV_BLOCK_TOKENS * NKV * HD, vb = (size_t)WEFT_KV_BLOCK_TOKENS * NKV * HDV;
        size_t blk_bytes = (kb + vb) * 2 * NL;
#define KV_AT(sl, which) ((((size_t)((sl) / 16) * NL + LAYER) * (kb + vb)) + ((which) ? kb : 0) + \
                          (size_t)((sl) % 16) * NKV * ((which) ? HDV : HD))
        /* seq 0 holds positions 0..19 in blocks {5, 2}; its new rows are 20..24 (block 7 added)
         * seq 1 holds positions 0..8 in block {0}; its new row is 9 */
        int32_t bt[] = {5, 2, 7, 0}, bt_off[] = {0, 3};
        int32_t pos[] = {20, 21, 22, 23, 24, 9}, seq[] = {0, 0, 0, 0, 0, 1};
        enum { R = 6 };
        int32_t slot[R];
        for (int r = 0; r < R; r++) slot[r] = bt[bt_off[seq[r]] + pos[r] / 16] * 16 + pos[r] % 16;
        uint16_t *cache = calloc(1, blk_bytes * NBLK);
        /* fill old positions with random (F16) K/V */
        for (int s = 0; s < 2; s++)
            for (int p = 0; p < (s ? 9 : 20); p++) {
                int sl = bt[bt_off[s] + p / 16] * 16 + p % 16;
                for (int which = 0; which < 2; which++) {
                    size_t off = KV_AT(sl, which);
                    for (int i = 0; i < NKV * (which ? HDV : HD); i++) cache[off + i] = weft_f32_to_half(frand());
                }
            }
        static float q[R * NH * HD], k[R * NKV * HD], v[R * NKV * HD], out[R * NH * HD];
        static double ref[R * NH * HD];
        for (int i = 0; i < R * NH * HD; i++) q[i] = frand();
        for (int i = 0; i < R * NKV * HD; i++) k[i] = frand();
        for (int i = 0; i < R * NKV * HDV; i++) v[i] = frand();
        struct weft_buffer *bc = upload(cache, blk_bytes * NBLK), *bq = upload(q, sizeof q), *bk = upload(k, sizeof k);
        struct weft_buffer *bv = upload(v, sizeof v);
        struct gbuf bo = gnew(NULL, sizeof out);
        struct weft_buffer *bpos = upload(pos, sizeof pos), *bseq = upload(seq, sizeof seq), *bslot = upload(slot, sizeof slot);
        struct weft_buffer *bbo = upload(bt_off, sizeof bt_off), *bbt = upload(bt, sizeof bt);
        struct weft_kv_view kv = {bc, WEFT_TYPE_F16, NL, LAYER, NKV, HD, c == 4 ? (uint32_t)HDV : 0, false};
        struct weft_batch_view batch = {R, 2, weft_view_2d(bpos, 0, WEFT_TYPE_I32, R, 1), weft_view_2d(bseq, 0, WEFT_TYPE_I32, R, 1),
                                        weft_view_2d(bslot, 0, WEFT_TYPE_I32, R, 1), weft_view_2d(bbo, 0, WEFT_TYPE_I32, 2, 1),
                                        weft_view_2d(bbt, 0, WEFT_TYPE_I32, 4, 1)};
        struct weft_op ops[2] = {{.kind = WEFT_OP_ROPE_KV}, {.kind = WEFT_OP_ATTENTION}};
        ops[0].u.rope_kv = (struct weft_op_rope_kv){
            .q = weft_view_2d(bq, 0, WEFT_TYPE_F32, NH * HD, R), .k = weft_view_2d(bk, 0, WEFT_TYPE_F32, NKV * HD, R),
            .v = weft_view_2d(bv, 0, WEFT_TYPE_F32, NKV * HDV, R), .kv = kv, .batch = batch, .n_head = NH,
            .n_rot = n_rot, .freq_base = base, .freq_scale = 1.0f, .mode = (enum weft_rope_mode)mode};
        ops[1].u.attention = (struct weft_op_attention){
            .q = weft_view_2d(bq, 0, WEFT_TYPE_F32, NH * HD, R), .out = gview(bo, WEFT_TYPE_F32, NH * HDV, R),
            .kv = kv, .batch = batch, .n_head = NH, .scale = 0.125f, .window = window, .softcap = softcap};
        struct weft_buffer *bsk = upload(sinks, sizeof sinks);
        if (c == 5) {
            ops[1].u.attention.sinks = weft_view_2d(bsk, 0, WEFT_TYPE_F32, NH, 1);
            ops[1].u.attention.has_sinks = true;
        }
        bool ok = false;
        if (supported(&ops[0], row) && supported(&ops[1], row)) ok = run_ops(ops, 2) && gread(bo, out, row);
        else memset(out, 0, sizeof out);
        bool ran = cells[row_id(row)][cur_dev] != UNSUP;
        /* reference: rotate in double, write new K/V into a host copy of the cache, attend */
        double qr[R][NH][HD];
        for (int r = 0; r < R; r++) {
            double kr[NKV][HD];
            for (int h = 0; h < NH + NKV; h++) {
                const float *src = h < NH ? q + (r * NH + h) * HD : k + (r * NKV + h - NH) * HD;
                double *dst = h < NH ? qr[r][h] : kr[h - NH];
                for (int d = 0; d < HD; d++) dst[d] = src[d];
                for (int i = 0; i < n_rot / 2; i++) {
                    double th = pos[r] * pow(base, -2.0 * i / n_rot), c = cos(th), s = sin(th);
                    int a = mode ? i : 2 * i, b = mode ? i + n_rot / 2 : 2 * i + 1;
                    double x0 = src[a], x1 = src[b];
                    dst[a] = x0 * c - x1 * s;
                    dst[b] = x0 * s + x1 * c;
                }
            }
            size_t koff = KV_AT(slot[r], 0), voff = KV_AT(slot[r], 1);
            for (int i = 0; i < NKV * HD; i++) cache[koff + i] = weft_f32_to_half((float)kr[i / HD][i % HD]);
            for (int i = 0; i < NKV * HDV; i++) cache[voff + i] = weft_f32_to_half(v[r * NKV * HDV + i]);
        }
        for (int r = 0; r < R; r++)
            for (int h = 0; h < NH; h++) {
                int kvh = h / (NH / NKV);
                double sc[32], mx = -1e300, sum = 0;
                const int p_first = window && pos[r] >= (int)window ? pos[r] - (int)window + 1 : 0;
                for (int p = p_first; p <= pos[r]; p++) {
                    int sl = bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                    size_t off = KV_AT(sl, 0) + kvh * HD;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += qr[r][h][i] * weft_half_to_f32(cache[off + i]);
                    sc[p] = softcap ? softcap * tanh(d * 0.125 / softcap) : d * 0.125;
                    if (sc[p] > mx) mx = sc[p];
                }
                if (c == 5 && sinks[h] > mx) mx = sinks[h];
                for (int p = p_first; p <= pos[r]; p++) { sc[p] = exp(sc[p] - mx); sum += sc[p]; }
                if (c == 5) sum += exp(sinks[h] - mx);  /* a position with no value */
                for (int i = 0; i < HDV; i++) {
                    double o = 0;
                    for (int p = p_first; p <= pos[r]; p++) {
                        int sl = bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                        size_t off = KV_AT(sl, 1) + kvh * HDV;
                        o += sc[p] / sum * weft_half_to_f32(cache[off + i]);
                    }
                    ref[(r * NH + h) * HDV + i] = o;
                }
            }
        if (ran) {
            double e = nmse(out, ref, R * NH * HDV);
            printf("  %s attention (%s rope%s): nmse %.3g\n", bi->name, mode ? "neox" : "normal",
                   c == 5 ? ", sinks, window 7" : window ? ", window 7" : softcap ? ", soft-cap 0.5"
                   : c == 4 ? ", V heads of 32" : "", e);
            CHECK_MSG(e < 1e-5, "%s rope+attention mode %d: nmse %.3g", bi->name, mode, e);
            ok = ok && e < 1e-5;
            ok = vs_cpu(row, out, R * NH * HDV, 1e-5) && ok;
            /* the cache the backend wrote equals the reference's up to F16 rounding, and
             * nothing else in it changed (every block of the buffer is compared) */
            uint16_t *got = malloc(blk_bytes * NBLK);
            download(bc, got, blk_bytes * NBLK);
            size_t diff = 0;
            for (size_t i = 0; i < blk_bytes * NBLK / 2; i++)
                if (fabsf(weft_half_to_f32(got[i]) - weft_half_to_f32(cache[i])) > 2e-3f) diff++;
            CHECK_MSG(diff == 0, "%s: %zu cache values differ", bi->name, diff);
            mark(row, ok && diff == 0 ? PASS : FAIL);
            free(got);
        }
        free(cache);
        gfree(bo);
        struct weft_buffer *all[] = {bc, bq, bk, bv, bsk, bpos, bseq, bslot, bbo, bbt};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bi->buffer_free(all[i]);
#undef KV_AT
    }
}

/* weight_prepare (a backend's own layout of a final weight matrix) changes
 * no result bit: MATMUL before and after, for 1..9 activation rows, row
 * counts with and without a partial last group, and a view of the leading
 * rows only; LOGITS too. An invalid view is refused. */
static void prepared_weights_give_bit_identical_results(void)
{
    if (!bi->weight_prepare) return;
    rng = 0x56789abull;
    static const int64_t Ns[] = {16, 40, 70, 200}, Rs[] = {1, 2, 3, 4, 5, 9};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum weft_type t = weight_types[ti];
        const int64_t K = weft_type_get(t)->block_size == 256 ? 768 : 544; /* odd block counts */
        for (size_t ni = 0; ni < 4; ni++) {
            const int64_t N = Ns[ni], Rmax = 9;
            float *wd = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * Rmax * K);
            float *o1 = malloc(sizeof(float) * Rmax * N), *o2 = malloc(sizeof(float) * Rmax * N);
            void *w = rand_weights(t, N, K, wd);
            for (int64_t i = 0; i < Rmax * K; i++) x[i] = frand();
            struct weft_buffer *bw = upload(w, weft_row_size(t, K) * N), *bx = upload(x, sizeof(float) * Rmax * K);
            struct weft_buffer *bo = upload(NULL, sizeof(float) * Rmax * N);
            const int64_t views[2] = {N, N > 16 ? N - 9 : N}; /* whole, leading rows */
            float *before[6][2];
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1) CHECK(bi->weight_prepare(be, &(struct weft_view){bw, 0, t, K, N, weft_row_size(t, K)}) == WEFT_OK);
                for (int ri = 0; ri < 6; ri++)
                    for (int v = 0; v < 2; v++) {
                        const int64_t R = Rs[ri], NV = views[v];
                        struct weft_op op = {.kind = WEFT_OP_MATMUL};
                        op.u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R),
                                                              .w = weft_view_2d(bw, 0, t, K, NV),
                                                              .out = weft_view_2d(bo, 0, WEFT_TYPE_F32, NV, R)};
                        if (!bi->supports(be, &op)) continue;
                        run_ops(&op, 1);
                        float *o = pass ? o2 : malloc(sizeof(float) * R * NV);
                        download(bo, o, sizeof(float) * R * NV);
                        if (!pass) before[ri][v] = o;
                        else {
                            bool same = memcmp(before[ri][v], o, sizeof(float) * R * NV) == 0;
                            mark("weight_prepare bit-identical", same ? PASS : FAIL);
                            CHECK_MSG(same,
                                      "%s %s R%lld N%lld of %lld: prepared weights changed the result", bi->name,
                                      weft_type_name(t), (long long)R, (long long)NV, (long long)N);
                            free(before[ri][v]);
                        }
                    }
            }
            bi->buffer_free(bw); bi->buffer_free(bx); bi->buffer_free(bo);
            free(w); free(wd); free(x); free(o1); free(o2);
        }
    }
    struct weft_buffer *b = upload(NULL, 1000);
    CHECK(bi->weight_prepare(be, &(struct weft_view){b, 0, WEFT_TYPE_Q8_0, 64, 20, 68}) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->weight_prepare(be, &(struct weft_view){b, 0, WEFT_TYPE_Q8_0, 33, 1, 68}) == WEFT_ERR_INVALID_ARG);
    bi->buffer_free(b);
}

static void buffers_reject_out_of_range_access(void)
{
    struct weft_buffer *b = upload(NULL, 100);
    char tmp[200] = {0};
    CHECK(bi->buffer_write(b, 90, tmp, 20) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_read(b, 101, tmp, 1) == WEFT_ERR_INVALID_ARG);
    CHECK(bi->buffer_read(b, 0, tmp, 100) == WEFT_OK);
    bi->buffer_free(b);
}

/* ---- the recurrent layers' ops (api 9) ----
 * Rows of 3 (SSM_CONV) or 2 (DELTA_NET) sequences interleaved in one batch, each sequence's
 * state in its own slot of a state buffer (slots past them untouched), against a double
 * reference run sequence by sequence; the same rows as two ops, the second after the first,
 * must give the same outputs and states bit for bit (a prefill in chunks, then decode); a row
 * naming a slot outside the buffer is refused. */
static const int rec_seq[12] = {0, 1, 0, 2, 0, 1, 1, 2, 0, 2, 1, 0};

static double dsilu(double y) { return y / (1 + exp(-y)); }

/* *op over rows [r0, r1) only: its per-row views (and slots) narrowed to them */
static bool rec_run(struct weft_op *op, struct weft_view *rows_views[], int n_views, struct weft_view *slots, int r0,
                    int r1)
{
    for (int i = 0; i < n_views; i++) {
        rows_views[i]->offset += (size_t)r0 * rows_views[i]->nb1;
        rows_views[i]->ne1 = r1 - r0;
    }
    slots->offset += (size_t)r0 * sizeof(int32_t);
    slots->ne0 = r1 - r0;
    return run_ops(op, 1);
}

static void recurrent_ops_match_reference(void)
{
    rng = 0x5eed0009ull;
    /* SSM_CONV: C 40 (a 16-chunk tail), K 4, 3 sequences over 12 rows, slots 1..3 of 5 */
    {
        enum { R = 12, C = 40, K = 4, NS = 5 };
        float x[R * C], w[C * K], st0[NS * (K - 1) * C], out[2][R * C], stout[2][NS * (K - 1) * C];
        double ref[R * C], win[3][K][C];
        int32_t slots[R], bad[R];
        for (int i = 0; i < R * C; i++) x[i] = 2 * frand();
        for (int i = 0; i < C * K; i++) w[i] = frand();
        for (int i = 0; i < NS * (K - 1) * C; i++) st0[i] = frand();
        for (int r = 0; r < R; r++) slots[r] = 1 + rec_seq[r], bad[r] = r == 5 ? NS : slots[r];
        for (int q = 0; q < 3; q++)
            for (int j = 0; j < K - 1; j++)
                for (int c = 0; c < C; c++) win[q][j][c] = st0[(1 + q) * (K - 1) * C + j * C + c];
        for (int r = 0; r < R; r++) {
            const int q = rec_seq[r];
            for (int c = 0; c < C; c++) {
                win[q][K - 1][c] = x[r * C + c];
                double y = 0;
                for (int i = 0; i < K; i++) y += win[q][i][c] * w[c * K + i];
                ref[r * C + c] = dsilu(y);
                for (int i = 0; i < K - 1; i++) win[q][i][c] = win[q][i + 1][c];
            }
        }
        bool ok = true;
        for (int pass = 0; pass < 2; pass++) {   /* 0: one op; 1: rows 0..6, then 7..11 */
            struct weft_buffer *bx = upload(x, sizeof x), *bw = upload(w, sizeof w), *bs = upload(st0, sizeof st0),
                               *bsl = upload(slots, sizeof slots), *bo = upload(NULL, sizeof out[0]);
            struct weft_op op = {.kind = WEFT_OP_SSM_CONV};
            op.u.ssm_conv = (struct weft_op_ssm_conv){
                .x = weft_view_2d(bx, 0, WEFT_TYPE_F32, C, R), .w = weft_view_2d(bw, 0, WEFT_TYPE_F32, K, C),
                .out = weft_view_2d(bo, 0, WEFT_TYPE_F32, C, R),
                .state = weft_view_2d(bs, 0, WEFT_TYPE_F32, (K - 1) * C, NS),
                .slots = weft_view_2d(bsl, 0, WEFT_TYPE_I32, R, 1), .silu = true};
            if (!supported(&op, "SSM_CONV")) { ok = false; pass = 2; }
            else if (pass == 0) {
                ok = run_ops(&op, 1) && ok;
            } else {
                struct weft_op a = op, b2 = op;
                struct weft_view *va[2] = {&a.u.ssm_conv.x, &a.u.ssm_conv.out}, *vb[2] = {&b2.u.ssm_conv.x, &b2.u.ssm_conv.out};
                ok = rec_run(&a, va, 2, &a.u.ssm_conv.slots, 0, 7) && rec_run(&b2, vb, 2, &b2.u.ssm_conv.slots, 7, R) &&
                     ok;
            }
            if (pass < 2) {
                download(bo, out[pass], sizeof out[0]);
                download(bs, stout[pass], sizeof stout[0]);
            }
            if (pass == 1) {   /* a slot past the buffer: an error from run() or the sync after it (a GPU
                                * reads the slots on the device), not a write */
                struct weft_buffer *bb = upload(bad, sizeof bad);
                op.u.ssm_conv.slots = weft_view_2d(bb, 0, WEFT_TYPE_I32, R, 1);
                const weft_status rs = bi->run(be, &op, 1), ss = bi->sync(be);
                CHECK_MSG(rs != WEFT_OK || ss != WEFT_OK, "%s SSM_CONV: slot %d of %d accepted", bi->name, NS, NS);
                bi->buffer_free(bb);
            }
            struct weft_buffer *all[] = {bx, bw, bs, bsl, bo};
            for (int i = 0; i < 5; i++) bi->buffer_free(all[i]);
        }
        if (ok) {
            const double e = nmse(out[0], ref, R * C);
            CHECK_MSG(e < 1e-12, "%s SSM_CONV: nmse %.3g", bi->name, e);
            CHECK_MSG(!memcmp(out[0], out[1], sizeof out[0]) && !memcmp(stout[0], stout[1], sizeof stout[0]),
                      "%s SSM_CONV: two ops in a row differ from one", bi->name);
            CHECK_MSG(!memcmp(stout[0], st0, (K - 1) * C * sizeof(float)) &&
                      !memcmp(stout[0] + 4 * (K - 1) * C, st0 + 4 * (K - 1) * C, (K - 1) * C * sizeof(float)),
                      "%s SSM_CONV: a slot no row named was written", bi->name);
            ok = e < 1e-12 && vs_cpu("SSM_CONV out", out[0], R * C, 1e-12) &&
                 vs_cpu("SSM_CONV state", stout[0], NS * (K - 1) * C, 1e-12);
            mark("SSM_CONV", ok ? PASS : FAIL);
        }
    }
    /* DELTA_NET: 2 k heads, 4 v heads of 40 (a 32-chunk tail), 2 sequences over 12 rows; the v
     * heads tiled over the k heads (Qwen3.5), then grouped (Qwen3-Next) */
    for (int grouped = 0; grouped < 2; grouped++) {
        const char *row = grouped ? "DELTA_NET k grouped" : "DELTA_NET";
        enum { R = 12, HK = 2, HV = 4, S = 40, NS = 3, W = (2 * HK + HV) * S };
        static float in[R * W], st0[NS * HV * S * S], out[2][R * HV * S], stout[2][NS * HV * S * S];
        static double ref[R * HV * S], M[2][HV][S][S];
        float beta[R * HV], alpha[R * HV], dtb[HV], A[HV];
        int32_t slots[R];
        for (int i = 0; i < R * W; i++) in[i] = frand();
        for (int i = 0; i < NS * HV * S * S; i++) st0[i] = 0.1f * frand();
        for (int i = 0; i < R * HV; i++) beta[i] = 3 * frand(), alpha[i] = 3 * frand();
        for (int h = 0; h < HV; h++) dtb[h] = frand(), A[h] = -0.5f + 0.4f * frand();
        for (int r = 0; r < R; r++) slots[r] = 2 * (rec_seq[r] & 1);   /* slots 0 and 2 */
        for (int q = 0; q < 2; q++)
            for (int h = 0; h < HV; h++)
                for (int j = 0; j < S; j++)
                    for (int i = 0; i < S; i++) M[q][h][j][i] = st0[((2 * q) * HV + h) * S * S + j * S + i];
        for (int r = 0; r < R; r++) {
            const int q = rec_seq[r] & 1;
            for (int h = 0; h < HV; h++) {
                const int kh = grouped ? h / (HV / HK) : h % HK;
                double qn[S], kn[S], sq = 0, sk = 0;
                for (int i = 0; i < S; i++) sq += (double)in[r * W + kh * S + i] * in[r * W + kh * S + i],
                                            sk += (double)in[r * W + (HK + kh) * S + i] * in[r * W + (HK + kh) * S + i];
                for (int i = 0; i < S; i++) qn[i] = in[r * W + kh * S + i] / sqrt(sq),
                                            kn[i] = in[r * W + (HK + kh) * S + i] / sqrt(sk);
                const double b = 1 / (1 + exp(-(double)beta[r * HV + h]));
                const double x = (double)alpha[r * HV + h] + dtb[h], g = (x > 20 ? x : log1p(exp(x))) * A[h];
                for (int j = 0; j < S; j++) {
                    double sdot = 0;
                    for (int i = 0; i < S; i++) M[q][h][j][i] *= exp(g), sdot += M[q][h][j][i] * kn[i];
                    const double d = (in[r * W + (2 * HK + h) * S + j] - sdot) * b, odot = 0;
                    double o = odot;
                    for (int i = 0; i < S; i++) M[q][h][j][i] += kn[i] * d, o += M[q][h][j][i] * qn[i];
                    ref[(r * HV + h) * S + j] = o / sqrt((double)S);
                }
            }
        }
        bool ok = true;
        for (int pass = 0; pass < 2; pass++) {
            struct weft_buffer *bin = upload(in, sizeof in), *bb = upload(beta, sizeof beta),
                               *ba = upload(alpha, sizeof alpha), *bd = upload(dtb, sizeof dtb), *bA = upload(A, sizeof A),
                               *bs = upload(st0, sizeof st0), *bsl = upload(slots, sizeof slots),
                               *bo = upload(NULL, sizeof out[0]);
            struct weft_op op = {.kind = WEFT_OP_DELTA_NET};
            op.u.delta_net = (struct weft_op_delta_net){
                .in = weft_view_2d(bin, 0, WEFT_TYPE_F32, W, R), .beta = weft_view_2d(bb, 0, WEFT_TYPE_F32, HV, R),
                .alpha = weft_view_2d(ba, 0, WEFT_TYPE_F32, HV, R), .dt_bias = weft_view_2d(bd, 0, WEFT_TYPE_F32, HV, 1),
                .a = weft_view_2d(bA, 0, WEFT_TYPE_F32, HV, 1), .out = weft_view_2d(bo, 0, WEFT_TYPE_F32, HV * S, R),
                .state = weft_view_2d(bs, 0, WEFT_TYPE_F32, HV * S * S, NS),
                .slots = weft_view_2d(bsl, 0, WEFT_TYPE_I32, R, 1), .n_k_head = HK, .n_v_head = HV, .head_dim = S,
                .eps = 1e-6f, .k_grouped = grouped};
            if (!supported(&op, row)) { ok = false; pass = 2; }
            else if (pass == 0) {
                ok = run_ops(&op, 1) && ok;
            } else {
                struct weft_op a = op, b2 = op;
                struct weft_view *va[4] = {&a.u.delta_net.in, &a.u.delta_net.beta, &a.u.delta_net.alpha, &a.u.delta_net.out},
                                 *vb[4] = {&b2.u.delta_net.in, &b2.u.delta_net.beta, &b2.u.delta_net.alpha,
                                           &b2.u.delta_net.out};
                ok = rec_run(&a, va, 4, &a.u.delta_net.slots, 0, 5) && rec_run(&b2, vb, 4, &b2.u.delta_net.slots, 5, R) &&
                     ok;
            }
            if (pass < 2) {
                download(bo, out[pass], sizeof out[0]);
                download(bs, stout[pass], sizeof stout[0]);
            }
            struct weft_buffer *all[] = {bin, bb, ba, bd, bA, bs, bsl, bo};
            for (int i = 0; i < 8; i++) bi->buffer_free(all[i]);
        }
        if (ok) {
            const double e = nmse(out[0], ref, R * HV * S);
            CHECK_MSG(e < 1e-10, "%s %s: nmse %.3g", bi->name, row, e);
            CHECK_MSG(!memcmp(out[0], out[1], sizeof out[0]) && !memcmp(stout[0], stout[1], sizeof stout[0]),
                      "%s DELTA_NET: two ops in a row differ from one", bi->name);
            CHECK_MSG(!memcmp(stout[0] + HV * S * S, st0 + HV * S * S, HV * S * S * sizeof(float)),
                      "%s DELTA_NET: a slot no row named was written", bi->name);
            char ko[64], ks[64];
            snprintf(ko, sizeof ko, "%s out", row);
            snprintf(ks, sizeof ks, "%s state", row);
            ok = e < 1e-10 && vs_cpu(ko, out[0], R * HV * S, 1e-12) && vs_cpu(ks, stout[0], NS * HV * S * S, 1e-12);
            mark(row, ok ? PASS : FAIL);
        }
    }
}

/* ---- mixtures of experts (api 7) ---- */

/* MOE_ROUTE in double: p = softmax or sigmoid; the k largest p + bias (ties: lower expert);
 * weights p (or softmax of the chosen logits), renormalised, scaled. The margin between the
 * k-th and the next choice comes back (a near-tie may go either way in float). */
static double route_ref(const float *l, const float *bias, int E, int k, enum weft_moe_gating g, bool norm, float scale,
                        int n_group, int group_used, const float *escale, int32_t *ids, double *w)
{
    double p[64], sel[64], mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) {
        p[e] = g == WEFT_MOE_SIGMOID ? 1.0 / (1.0 + exp(-(double)l[e])) : exp((double)l[e] - mx);
        sum += p[e];
    }
    if (g != WEFT_MOE_SIGMOID)
        for (int e = 0; e < E; e++) p[e] /= sum;
    bool taken[64] = {0};
    for (int e = 0; e < E; e++) sel[e] = p[e] + (bias ? bias[e] : 0);
    double gmargin = INFINITY;
    if (n_group > 1) {  /* expert groups: the sum of a group's two best, the best group_used kept */
        const int G = E / n_group;
        double score[64];
        bool kept[64] = {0};
        for (int q = 0; q < n_group; q++) {
            double a = -INFINITY, b = -INFINITY;
            for (int e = q * G; e < (q + 1) * G; e++) {
                if (sel[e] > a) { b = a; a = sel[e]; }
                else if (sel[e] > b) b = sel[e];
            }
            score[q] = a + b;
        }
        double last = 0;
        for (int j = 0; j < group_used; j++) {
            int best = -1;
            for (int q = 0; q < n_group; q++)
                if (!kept[q] && (best < 0 || score[q] > score[best])) best = q;
            kept[best] = true;
            last = score[best];
        }
        for (int q = 0; q < n_group; q++)
            if (!kept[q] && last - score[q] < gmargin) gmargin = last - score[q];
        for (int e = 0; e < E; e++) taken[e] = !kept[e / G];
    }
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || sel[e] > sel[best])) best = e;
        taken[best] = true;
        ids[j] = best;
    }
    double next = -INFINITY;
    for (int e = 0; e < E; e++)
        if (!taken[e] && sel[e] > next) next = sel[e];
    double tot = 0;
    if (g == WEFT_MOE_SOFTMAX_TOPK) {
        double m2 = l[ids[0]], s2 = 0;
        for (int j = 0; j < k; j++) s2 += exp((double)l[ids[j]] - m2);
        for (int j = 0; j < k; j++) w[j] = exp((double)l[ids[j]] - m2) / s2;
    } else {
        for (int j = 0; j < k; j++) w[j] = p[ids[j]];
    }
    for (int j = 0; j < k; j++) tot += w[j];
    for (int j = 0; j < k; j++) w[j] = (norm ? w[j] / tot : w[j]) * (scale != 0 ? scale : 1) * (escale ? escale[ids[j]] : 1);
    return sel[ids[k - 1]] - next < gmargin ? sel[ids[k - 1]] - next : gmargin;
}

static void moe_route_matches_reference(void)
{
    rng = 0x3456789ull;
    static const struct {
        const char *row;
        int E, k;
        enum weft_moe_gating g;
        bool norm, bias;
        float scale;
        int n_group, group_used;
        bool escale;
    } cases[] = {{"MOE_ROUTE softmax", 8, 2, WEFT_MOE_SOFTMAX, true, false, 0, 0, 0, false},
                 {"MOE_ROUTE softmax", 40, 6, WEFT_MOE_SOFTMAX, false, false, 0, 0, 0, false},
                 {"MOE_ROUTE sigmoid bias", 16, 4, WEFT_MOE_SIGMOID, true, true, 2.5f, 0, 0, false},
                 {"MOE_ROUTE softmax_topk", 32, 4, WEFT_MOE_SOFTMAX_TOPK, false, false, 0, 0, 0, false},
                 /* DeepSeek V3's expert groups (api 8): 8 groups of 8, the best 3 kept; 32 of 2 */
                 {"MOE_ROUTE groups", 64, 6, WEFT_MOE_SIGMOID, true, true, 2.5f, 8, 3, false},
                 {"MOE_ROUTE groups", 64, 4, WEFT_MOE_SOFTMAX, false, false, 0, 32, 5, false},
                 /* api 10: a scale per expert after the weights (Gemma 4's ffn_down_exps.scale) */
                 {"MOE_ROUTE expert_scale", 8, 2, WEFT_MOE_SOFTMAX, true, false, 0, 0, 0, true},
                 {"MOE_ROUTE expert_scale", 16, 4, WEFT_MOE_SIGMOID, true, true, 2.5f, 0, 0, true}};
    const int R = 9;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int E = cases[c].E, k = cases[c].k;
        float *l = malloc(sizeof(float) * R * E), bias[64], esc[64], *w = malloc(sizeof(float) * R * k);
        int32_t *ids = malloc(sizeof(int32_t) * R * k), rid[64];
        double rw[64];
        for (int i = 0; i < R * E; i++) l[i] = 3 * frand();
        for (int e = 0; e < E; e++) bias[e] = 0.3f * frand();
        for (int e = 0; e < E; e++) esc[e] = 0.5f + 1.5f * (frand() + 1);
        struct weft_buffer *bl = upload(l, sizeof(float) * R * E), *bb = upload(bias, sizeof bias);
        struct weft_buffer *bes = upload(esc, sizeof esc);
        struct gbuf bi_ = gnew(NULL, sizeof(int32_t) * R * k), bw = gnew(NULL, sizeof(float) * R * k);
        struct weft_op op = {.kind = WEFT_OP_MOE_ROUTE};
        op.u.moe_route = (struct weft_op_moe_route){
            .logits = weft_view_2d(bl, 0, WEFT_TYPE_F32, E, R), .ids = gview(bi_, WEFT_TYPE_I32, k, R),
            .weights = gview(bw, WEFT_TYPE_F32, k, R), .k = (uint32_t)k, .gating = cases[c].g, .norm = cases[c].norm,
            .scale = cases[c].scale, .bias = weft_view_2d(bb, 0, WEFT_TYPE_F32, E, 1), .has_bias = cases[c].bias,
            .n_group = (uint32_t)cases[c].n_group, .group_used = (uint32_t)cases[c].group_used,
            .expert_scale = weft_view_2d(bes, 0, WEFT_TYPE_F32, E, 1), .has_expert_scale = cases[c].escale};
        if (supported(&op, cases[c].row)) {
            bool ok = run_ops(&op, 1) && gread(bi_, ids, cases[c].row) && gread(bw, w, cases[c].row);
            float idf[64 * 9];
            for (int r = 0; r < R; r++) {
                double margin = route_ref(l + r * E, cases[c].bias ? bias : NULL, E, k, cases[c].g, cases[c].norm,
                                          cases[c].scale, cases[c].n_group, cases[c].group_used,
                                          cases[c].escale ? esc : NULL, rid, rw);
                for (int j = 0; j < k; j++) {
                    idf[r * k + j] = (float)ids[r * k + j];
                    if (margin < 1e-5) continue;  /* a near-tie: float order picks */
                    bool same = ids[r * k + j] == rid[j] && fabs(w[r * k + j] - rw[j]) <= 1e-5 * (1 + fabs(rw[j]));
                    CHECK_MSG(same, "%s %s E%d row %d slot %d: expert %d weight %.7f, reference %d %.7f", bi->name,
                              cases[c].row, E, r, j, ids[r * k + j], w[r * k + j], rid[j], rw[j]);
                    ok = ok && same;
                }
            }
            char key[96];
            snprintf(key, sizeof key, "%s E%d ids", cases[c].row, E);
            ok = vs_cpu(key, idf, (size_t)R * k, 1e-30) && ok;
            snprintf(key, sizeof key, "%s E%d weights", cases[c].row, E);
            ok = vs_cpu(key, w, (size_t)R * k, 1e-10) && ok;
            mark(cases[c].row, ok ? PASS : FAIL);
        }
        bi->buffer_free(bl); bi->buffer_free(bb); bi->buffer_free(bes); gfree(bi_); gfree(bw);
        free(l); free(w); free(ids);
    }
}

/* MATMUL_ID for every weight type, at batch 1, 8 and 40, both forms: a row's x times each chosen
 * expert (gate/up), and a slot's x times its expert, weighted, summed and added to the
 * residual in place (down). The experts no row chose (6 and 7) are all 0xFF bytes (NaN
 * scales): a backend that reads them gives NaN or inf. On the CPU each op reads each chosen
 * expert once (weft_cpu_expert_passes). */
static void matmul_id_matches_reference_and_reads_only_chosen_experts(void)
{
    rng = 0x456789aull;
    const int E = 8, k = 2, N = 48, K = 256;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum weft_type t = weight_types[ti];
        char row[40];
        snprintf(row, sizeof row, "MATMUL_ID %s", weft_type_name(t));
        const size_t rs = weft_row_size(t, K), eb = rs * N;
        float *wd = malloc(sizeof(float) * E * N * K);
        uint8_t *w = rand_weights(t, (int64_t)E * N, K, wd);
        memset(w + 6 * eb, 0xFF, 2 * eb);  /* experts 6, 7: never chosen */
        float *bias = malloc(sizeof(float) * E * N);
        for (int i = 0; i < E * N; i++) bias[i] = frand();
        struct weft_buffer *bw = upload(w, eb * E), *bbias = upload(bias, sizeof(float) * E * N);
        static const int Rs[] = {1, 8, 40};  /* decode, a small batch, a prefill chunk (the tiled forms) */
        for (size_t ri = 0; ri < 3; ri++)
            for (int form = 0, R = Rs[ri]; form < 3; form++) {  /* 0 gate/up, 1 down (weights, add), 2 gate/up with bias */
                /* after batch 1 on the plain layout, the backend's own (weight_prepare), as a
                 * model's experts get it */
                if (ri == 1 && form == 0 && bi->weight_prepare) {
                    struct weft_view wv = weft_view_2d(bw, 0, t, K, (int64_t)E * N);
                    CHECK(bi->weight_prepare(be, &wv) == WEFT_OK);
                }
                if (form == 2 && t != WEFT_TYPE_F16 && t != WEFT_TYPE_MXFP4) continue;
                const int xr = form == 1 ? R * k : R, orows = form == 1 ? R : R * k;
                float *x = malloc(sizeof(float) * xr * K), *wt = malloc(sizeof(float) * R * k);
                float *add = malloc(sizeof(float) * orows * N), *out = malloc(sizeof(float) * orows * N);
                double *ref = malloc(sizeof(double) * orows * N);
                int32_t ids[80];
                int used[8] = {0}, n_used = 0;
                for (int r = 0; r < R; r++) {
                    frand();  /* a fresh rng state */
                    ids[r * k] = (int32_t)(rng % 6);
                    ids[r * k + 1] = (ids[r * k] + 1 + (int32_t)((rng >> 20) % 5)) % 6;
                    for (int j = 0; j < k; j++) wt[r * k + j] = 0.5f + 0.5f * frand();
                }
                for (int i = 0; i < R * k; i++)
                    if (!used[ids[i]]++) n_used++;
                for (int i = 0; i < xr * K; i++) x[i] = frand();
                for (int i = 0; i < orows * N; i++) add[i] = frand();
                for (int i = 0; i < orows * N; i++) ref[i] = form == 1 ? add[i] : 0;
                for (int r = 0; r < R; r++)
                    for (int j = 0; j < k; j++) {
                        const int e = ids[r * k + j];
                        const float *xv = x + (size_t)(form == 1 ? r * k + j : r) * K;
                        for (int n = 0; n < N; n++) {
                            double s = form == 2 ? bias[e * N + n] : 0;
                            for (int q = 0; q < K; q++) s += (double)xv[q] * wd[((size_t)e * N + n) * K + q];
                            if (form == 1) ref[r * N + n] += wt[r * k + j] * s;
                            else ref[(size_t)(r * k + j) * N + n] = s;
                        }
                    }
                struct weft_buffer *bx = upload(x, sizeof(float) * xr * K), *bids = upload(ids, sizeof(int32_t) * R * k);
                struct weft_buffer *bwt = upload(wt, sizeof(float) * R * k);
                struct gbuf bo = gnew(form == 1 ? add : NULL, sizeof(float) * orows * N);
                struct weft_op op = {.kind = WEFT_OP_MATMUL_ID};
                op.u.matmul_id = (struct weft_op_matmul_id){
                    .x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, xr), .w = weft_view_2d(bw, 0, t, K, (int64_t)E * N),
                    .ids = weft_view_2d(bids, 0, WEFT_TYPE_I32, k, R), .out = gview(bo, WEFT_TYPE_F32, N, orows),
                    .n_expert = (uint32_t)E, .x_per_slot = form == 1, .weights = weft_view_2d(bwt, 0, WEFT_TYPE_F32, k, R),
                    .has_weights = form == 1, .has_add = form == 1, .bias = weft_view_2d(bbias, 0, WEFT_TYPE_F32, E * N, 1),
                    .has_bias = form == 2};
                op.u.matmul_id.add = op.u.matmul_id.out;
                const char *rname = form == 2 ? "MATMUL_ID bias" : row;
                if (supported(&op, rname)) {
                    const uint64_t passes0 = weft_cpu_expert_passes(be);
                    bool ok = run_ops(&op, 1) && gread(bo, out, rname);
                    double e = nmse(out, ref, (size_t)orows * N);
                    bool finite = true;
                    for (int i = 0; i < orows * N; i++) finite &= isfinite(out[i]) != 0;
                    char key[96];
                    snprintf(key, sizeof key, "%s R%d form %d", row, R, form);
                    CHECK_MSG(finite && e < mm_tol(t), "%s %s: nmse %.3g%s", bi->name, key, e,
                              finite ? "" : " (not finite: an unchosen expert was read)");
                    ok = ok && finite && e < mm_tol(t);
                    if (is_cpu) {
                        uint64_t passes = weft_cpu_expert_passes(be) - passes0;
                        CHECK_MSG(passes == (uint64_t)n_used, "%s: %llu expert passes for %d chosen experts", key,
                                  (unsigned long long)passes, n_used);
                        ok = ok && passes == (uint64_t)n_used;
                    }
                    ok = vs_cpu(key, out, (size_t)orows * N, 4 * mm_tol(t)) && ok;
                    mark(rname, ok ? PASS : FAIL);
                }
                bi->buffer_free(bx); bi->buffer_free(bids); bi->buffer_free(bwt); gfree(bo);
                free(x); free(wt); free(add); free(out); free(ref);
            }
        bi->buffer_free(bw); bi->buffer_free(bbias);
        free(w); free(wd); free(bias);
    }
}

/* What a GPU backend must run for the models weft serves (the CPU runs all). */
static const char *const required[] = {
    "EMBED F32", "EMBED F16", "EMBED Q8_0", "EMBED Q4_0", "EMBED Q4_1", "EMBED Q4_K", "EMBED Q6_K",
    "MATMUL F32", "MATMUL F16", "MATMUL Q8_0", "MATMUL Q4_0", "MATMUL Q4_1", "MATMUL Q4_K", "MATMUL Q6_K",
    "LOGITS F32", "LOGITS F16", "LOGITS Q8_0", "LOGITS Q4_0", "LOGITS Q4_1", "LOGITS Q4_K", "LOGITS Q6_K",
    "RMSNORM", "RMSNORM+add", "SILU_MUL", "ADD", "COPY", "ROPE_KV normal + ATTENTION", "ROPE_KV neox + ATTENTION",
    /* api 5's fields (the qwen2 and gemma3 families) */
    "MATMUL bias F32", "MATMUL bias F16", "MATMUL bias Q8_0", "MATMUL bias Q4_K", "GLU gelu_tanh", "EMBED scale",
    "ATTENTION window", "ROPE_KV linear", "ROPE_KV freq_factors (LongRoPE)", "ROPE_KV yarn",
    /* api 6's (Gemma 2 and 4's soft-capping) */
    "ATTENTION softcap", "LOGITS softcap F16", "LOGITS softcap Q8_0", "LOGITS softcap Q4_K",
    "ROPE_KV + ATTENTION head_dim_v",
    /* the types of published GGUFs (Q2_K .. IQ4_XS; MXFP4: gpt-oss's experts) */
    "MATMUL Q2_K", "MATMUL Q3_K", "MATMUL IQ4_NL", "MATMUL IQ4_XS", "MATMUL MXFP4",
    "EMBED Q2_K", "EMBED Q3_K", "EMBED IQ4_NL", "EMBED IQ4_XS", "EMBED MXFP4",
    "LOGITS Q2_K", "LOGITS Q3_K", "LOGITS IQ4_NL", "LOGITS IQ4_XS", "LOGITS MXFP4",
    /* api 7: mixtures of experts */
    "MOE_ROUTE softmax", "MOE_ROUTE sigmoid bias", "MOE_ROUTE softmax_topk", "MATMUL_ID F16", "MATMUL_ID Q8_0",
    "MATMUL_ID Q4_0", "MATMUL_ID Q4_K", "MATMUL_ID Q6_K", "MATMUL_ID MXFP4", "MATMUL_ID bias",
    "ATTENTION sinks", "GLU swiglu_oai",
    /* api 8: DeepSeek V3's expert groups */
    "MOE_ROUTE groups",
    /* api 9: hybrid models' recurrent layers and gated attention */
    "SSM_CONV", "DELTA_NET", "DELTA_NET k grouped", "GLU sigmoid",
    /* api 10: Gemma 4 */
    "ADD scale", "ROPE_KV q_only", "MOE_ROUTE expert_scale",
};

static void print_matrix(void)
{
    static const char *const sym[] = {"", "pass", "FAIL", "-"};
    printf("\nsupport/pass matrix (pass = matches the reference%s; - = not supported)\n",
           n_devs > 1 ? " and the CPU backend" : "");
    printf("%-30s", "op");
    for (int d = 0; d < n_devs; d++) printf(" %-10s", dev_names[d]);
    printf("\n");
    for (int r = 0; r < n_rows; r++) {
        printf("%-30s", row_names[r]);
        for (int d = 0; d < n_devs; d++) printf(" %-10s", sym[cells[r][d]]);
        printf("\n");
    }
}

int main(void)
{
    /* Vulkan: the Khronos validation layer on, any error fails the run */
    setenv("WEFT_VK_VALIDATE", "1", 0);
    check_env_reapply();
    /* the CPU first: its outputs are what every other backend is held to.
     * WEFT_TEST_BACKENDS=cuda,vulkan (say) limits the others to those. */
    const char *only = getenv("WEFT_TEST_BACKENDS");
    int order[16], n_order = 0;
    for (int i = 0; i < weft_backend_count() && n_order < 16; i++)
        if (!strcmp(weft_backend_get(i)->name, "cpu")) order[n_order++] = i;
    for (int i = 0; i < weft_backend_count() && n_order < 16; i++) {
        const char *name = weft_backend_get(i)->name;
        if (!strcmp(name, "cpu")) continue;
        if (only && *only) {
            char list[128];
            snprintf(list, sizeof list, ",%s,", only);
            char key[40];
            snprintf(key, sizeof key, ",%s,", name);
            if (!strstr(list, key)) continue;
        }
        order[n_order++] = i;
    }
    for (int oi = 0; oi < n_order; oi++) {
        bi = weft_backend_get(order[oi]);
        struct weft_device_info info[8];
        int n = bi->devices(info, 8, NULL);
        for (int d = 0; d < n && d < 8 && n_devs < MAX_DEVS; d++) {
            char spec[48];
            snprintf(spec, sizeof spec, "%s:%d", bi->name, d);
            if (weft_backend_open(spec, 2, &be) != WEFT_OK) {
                CHECK_MSG(0, "%s: cannot open: %s", spec, weft_last_error());
                continue;
            }
            cur_dev = n_devs++;
            snprintf(dev_names[cur_dev], sizeof dev_names[0], "%s", spec);
            is_cpu = !strcmp(bi->name, "cpu") && d == 0;
            printf("backend %s (%s)\n", spec, info[d].name);
            RUN(matmul_matches_reference_for_every_type_and_shape);
            RUN(embed_and_logits_match_reference);
            RUN(prepared_weights_give_bit_identical_results);
            RUN(elementwise_ops_match_reference);
            RUN(op_fields_match_reference);
            RUN(recurrent_ops_match_reference);
            RUN(moe_route_matches_reference);
            RUN(matmul_id_matches_reference_and_reads_only_chosen_experts);
            RUN(rope_scaling_matches_formulas);
            RUN(rope_and_paged_attention_match_reference);
            RUN(buffers_reject_out_of_range_access);
            if (strcmp(bi->name, "cpu") != 0)
                for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
                    CHECK_MSG(cells[row_id(required[i])][cur_dev] == PASS, "%s: required op '%s' is %s", spec,
                              required[i], cells[row_id(required[i])][cur_dev] == UNSUP ? "not supported" : "failing");
            else
                for (int r = 0; r < n_rows; r++)
                    CHECK_MSG(cells[r][cur_dev] != UNSUP, "cpu does not support '%s'", row_names[r]);
            weft_backend_close(be);
        }
    }
    CHECK(n_devs >= 1);
    print_matrix();
    for (int i = 0; i < n_saved; i++) free(saved[i].v);
    return check_summary();
}
