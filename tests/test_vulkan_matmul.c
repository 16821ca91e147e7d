/* Vulkan MATMUL and LOGITS against the CPU backend, by normalised mean
 * squared error: every weight type x odd shapes (k = one block and several,
 * 1..257 weight rows, 1..77 activation rows: both the matrix-vector and the
 * tiled path and the switch between them), strided views at nonzero offsets
 * naming the leading rows of a larger weight matrix, the fused residual add
 * (also aliasing out), ops chained in one run, LOGITS on selected rows.
 * The Vulkan validation layer is on (WEFT_VK_VALIDATE=1): an error it reports
 * fails the run. Skips (77) without a Vulkan device. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/quant.h"
#include "tests/check.h"

#define TEST_RNG_SEED 0x5eed0f0a1b2c3d4eull
#include "tests/test_rand.h"

static struct weft_backend *cpu, *vk;

static float frand(void) { return (float)(rng_unit() * 2.0 - 1.0); }

#include "tests/vk_pair.h"

static double nmse(const float *a, const float *ref, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        e += d * d;
        s += (double)ref[i] * ref[i];
    }
    return s > 0 ? e / s : e;
}

/* random weights [rows][k] of type t */
static uint8_t *rand_weights(enum weft_type t, int64_t rows, int64_t k)
{
    const struct weft_type_info *ti = weft_type_get(t);
    size_t rs = weft_row_size(t, k);
    uint8_t *w = malloc(rs * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) tmp[i] = frand();
        if (weft_quantize_row(t, tmp, w + r * rs, k)) continue;
        /* no quantizer (K-quants): random bytes with sane super-block scales */
        for (size_t b = 0; b < rs; b++) w[r * rs + b] = (uint8_t)(rng_u64() >> 56);
        for (size_t b = 0; b < rs / ti->type_size; b++) {
            uint8_t *blk = w + r * rs + b * ti->type_size;
            weft_half d = weft_f32_to_half(0.01f * (1.0f + frand() * 0.5f)), dm = weft_f32_to_half(0.005f);
            if (t == WEFT_TYPE_Q6_K) memcpy(blk + 208, &d, 2);
            else { memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); }
        }
    }
    free(tmp);
    return w;
}

/* same op on both backends (views built from pairs by the caller's macro) */
static bool run_both(const struct weft_op *oc, const struct weft_op *ov, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(cpu->iface->supports(cpu, &oc[i]));
        CHECK_MSG(vk->iface->supports(vk, &ov[i]), "vulkan does not support op %zu (kind %d)", i, (int)ov[i].kind);
        if (!vk->iface->supports(vk, &ov[i])) return false;
    }
    CHECK(cpu->iface->run(cpu, oc, n) == WEFT_OK && cpu->iface->sync(cpu) == WEFT_OK);
    weft_status st = vk->iface->run(vk, ov, n);
    if (st == WEFT_OK) st = vk->iface->sync(vk);
    CHECK_MSG(st == WEFT_OK, "vulkan run: %s", weft_last_error());
    return st == WEFT_OK;
}

/* both backends' bytes [off, off + n) of a pair, as floats */
static void read_both(const struct pair *p, size_t off, size_t n, float *c, float *v)
{
    CHECK(cpu->iface->buffer_read(p->c, off, c, n) == WEFT_OK);
    CHECK(vk->iface->buffer_read(p->v, off, v, n) == WEFT_OK);
}

static const enum weft_type types[] = {
    WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1,
    WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1, WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K,
};
#define N_TYPES (sizeof types / sizeof types[0])
static double worst[N_TYPES], worst_logits[N_TYPES], worst_ref[N_TYPES];

static size_t ti_of(enum weft_type t)
{
    size_t i = 0;
    while (i < N_TYPES - 1 && types[i] != t) i++;
    return i;
}

/* the CPU converts activations to the type's vec_dot type (F16, BF16, Q8_x)
 * first; Vulkan multiplies f32 activations: they differ by that rounding */
static double tol(enum weft_type t)
{
    enum weft_type v = weft_vec_dot_type(t);
    return v == WEFT_TYPE_F32 ? 1e-10 : v == WEFT_TYPE_F16 ? 1e-5 : v == WEFT_TYPE_BF16 ? 1e-4 : 2e-4;
}

/* out[M][N] (+ add) = x[M][K] · W[N][K]ᵀ with padded strides, nonzero
 * offsets, and W the middle N rows of N + 2; add_mode 0 none, 1 separate,
 * 2 aliasing out. Returns the NMSE of Vulkan against the CPU. */
static double one_matmul(enum weft_type t, int64_t K, int64_t N, int64_t M, int add_mode)
{
    const size_t rs = weft_row_size(t, K);
    uint8_t *w = rand_weights(t, N + 2, K);
    const size_t xoff = 16, xnb = (size_t)K * 4 + 12, ooff = 8, onb = (size_t)N * 4 + 4;
    const size_t xbytes = xoff + xnb * (size_t)M, obytes = ooff + onb * (size_t)M;
    float *x = calloc(1, xbytes), *o0 = calloc(1, obytes), *a = calloc(1, obytes);
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < K; k++) x[(xoff + r * xnb) / 4 + k] = frand();
    for (size_t i = 0; i < obytes / 4; i++) { o0[i] = frand(); a[i] = frand(); }
    struct pair pw = pair_new(w, rs * (size_t)(N + 2)), px = pair_new(x, xbytes);
    struct pair po = pair_new(add_mode == 2 ? a : o0, obytes), pa = pair_new(a, obytes);
    struct weft_op oc = {.kind = WEFT_OP_MATMUL}, ov;
    struct weft_op_matmul *m = &oc.u.matmul;
    m->w = (struct weft_view){pw.c, rs, t, K, N, rs};
    m->x = (struct weft_view){px.c, xoff, WEFT_TYPE_F32, K, M, xnb};
    m->out = (struct weft_view){po.c, ooff, WEFT_TYPE_F32, N, M, onb};
    m->has_add = add_mode != 0;
    m->add = add_mode == 2 ? m->out : (struct weft_view){pa.c, ooff, WEFT_TYPE_F32, N, M, onb};
    ov = oc;
    ov.u.matmul.w.buf = pw.v;
    ov.u.matmul.x.buf = px.v;
    ov.u.matmul.out.buf = po.v;
    ov.u.matmul.add.buf = add_mode == 2 ? po.v : pa.v;
    double e = 1e30;
    if (run_both(&oc, &ov, 1)) {
        float *c = malloc(obytes), *v = malloc(obytes), *ref = malloc(obytes), *wd = malloc(sizeof(float) * K);
        read_both(&po, 0, obytes, c, v);
        e = nmse(v, c, obytes / 4); /* includes the padding: untouched, equal */
        /* what both compute up to summation order: the activations rounded
         * to the vec_dot type, times the dequantized weights */
        memcpy(ref, add_mode == 2 ? a : o0, obytes);
        float *xr = malloc(sizeof(float) * (size_t)(M * K));
        uint8_t *xq = malloc(weft_row_size(WEFT_TYPE_Q8_K, 256) * (size_t)(K / 32 + 1) + 64);
        const enum weft_type vdt = weft_vec_dot_type(t);
        /* Q8_1 (Q4_1/Q5_1 weights): the m * x part uses the block's f16 sum s */
        float *sums = calloc((size_t)(M * (K / 32) + 1), sizeof(float));
        for (int64_t r = 0; r < M; r++) {
            const float *xs = x + (xoff + r * xnb) / 4;
            if (vdt == WEFT_TYPE_F32 || !weft_quantize_row_act(vdt, xs, xq, K)) memcpy(xr + r * K, xs, sizeof(float) * K);
            else weft_dequantize_row(vdt, xq, xr + r * K, K);
            if (vdt == WEFT_TYPE_Q8_1)
                for (int64_t b = 0; b < K / 32; b++)
                    sums[r * (K / 32) + b] = weft_half_to_f32(((const struct weft_block_q8_1 *)xq)[b].s);
        }
        for (int64_t n = 0; n < N; n++) {
            weft_dequantize_row(t, w + (n + 1) * rs, wd, K);
            for (int64_t r = 0; r < M; r++) {
                double s = add_mode ? a[(ooff + r * onb) / 4 + n] : 0;
                for (int64_t k = 0; k < K; k++) s += (double)xr[r * K + k] * wd[k];
                if (vdt == WEFT_TYPE_Q8_1) {
                    const uint8_t *wr = w + (n + 1) * rs;
                    const size_t bb = weft_type_get(t)->type_size;
                    for (int64_t b = 0; b < K / 32; b++) {
                        weft_half mh;
                        memcpy(&mh, wr + b * bb + 2, 2);  /* m follows d in both Q4_1 and Q5_1 */
                        double xs = 0;
                        for (int64_t k = 32 * b; k < 32 * b + 32; k++) xs += xr[r * K + k];
                        s += (double)weft_half_to_f32(mh) * (sums[r * (K / 32) + b] - xs);
                    }
                }
                ref[(ooff + r * onb) / 4 + n] = (float)s;
            }
        }
        free(sums);
        free(xr);
        free(xq);
        double er = nmse(v, ref, obytes / 4);
        if (er > worst_ref[ti_of(t)]) worst_ref[ti_of(t)] = er;
        CHECK_MSG(er < 1e-10, "%s K%lld N%lld M%lld add %d: nmse vs rounded-activation reference %.3g", weft_type_name(t),
                  (long long)K, (long long)N, (long long)M, add_mode, er);
        free(c);
        free(v);
        free(ref);
        free(wd);
    }
    pair_free(&pw); pair_free(&px); pair_free(&po); pair_free(&pa);
    free(w); free(x); free(o0); free(a);
    return e;
}

static void matmul_matches_cpu_for_every_type_and_odd_shape(void)
{
    static const int64_t Ns[] = {1, 7, 33, 257}, Ms[] = {1, 2, 5, 8, 9, 64, 77};
    int c = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum weft_type t = types[ti];
        const int64_t qk = weft_type_get(t)->block_size;
        const int64_t Ks[3] = {qk == 1 ? 1 : qk, qk == 1 ? 37 : qk == 32 ? 5 * qk : 3 * qk, qk == 1 ? 160 : 0};
        for (int ki = 0; ki < 3 && Ks[ki]; ki++)
            for (size_t ni = 0; ni < 4; ni++)
                for (size_t mi = 0; mi < 7; mi++, c++) {
                    const int64_t K = Ks[ki], N = Ns[ni], M = Ms[mi];
                    double e = one_matmul(t, K, N, M, c % 3);
                    if (e > worst[ti]) worst[ti] = e;
                    /* over a handful of outputs the NMSE is one dot's activation rounding */
                    CHECK_MSG(e < (M * N < 32 ? 10 : 1) * tol(t), "%s K%lld N%lld M%lld add %d: nmse %.3g", weft_type_name(t), (long long)K,
                              (long long)N, (long long)M, c % 3, e);
                }
    }
}

/* more weight rows than one dimension of workgroups holds (65535 on many
 * devices): the matrix-vector path spreads rows over a second dimension */
static void matvec_with_more_rows_than_one_dispatch_dimension_matches_cpu(void)
{
    double e = one_matmul(WEFT_TYPE_Q8_0, 32, 70001, 2, 1);
    CHECK_MSG(e < tol(WEFT_TYPE_Q8_0), "Q8_0 N70001: nmse %.3g", e);
    e = one_matmul(WEFT_TYPE_F16, 8, 70001, 11, 2);
    CHECK_MSG(e < tol(WEFT_TYPE_F16), "F16 N70001 M11: nmse %.3g", e);
}

/* the matrix-vector path with the shared-memory tree instead of subgroupAdd:
 * a second vulkan:0 opened with vulkan.matvec_tree=1 (a backend reads its
 * options at open) stands in for vk */
static void matvec_tree_reduction_matches_cpu(void)
{
    char opts[512];
    snprintf(opts, sizeof opts, "%s%svulkan.matvec_tree=1", weft_backend_options(),
             *weft_backend_options() ? "," : "");
    struct weft_backend *plain = vk, *tree = NULL;
    CHECK(weft_backend_open_opts("vulkan:0", 0, opts, &tree) == WEFT_OK);
    if (!tree) return;
    vk = tree;
    static const int64_t Ms[] = {1, 3, 8};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum weft_type t = types[ti];
        const int64_t qk = weft_type_get(t)->block_size, K = qk == 1 ? 37 : 3 * qk;
        for (int mi = 0; mi < 3; mi++) {
            double e = one_matmul(t, K, 33, Ms[mi], mi);
            CHECK_MSG(e < tol(t), "tree %s K%lld M%lld: nmse %.3g", weft_type_name(t), (long long)K,
                      (long long)Ms[mi], e);
        }
    }
    vk = plain;
    weft_backend_close(tree);
}

/* LOGITS for rows picked out of 13 (3 rows: matrix-vector path; 12 with
 * repeats: tiled path) */
static void logits_match_cpu_on_selected_rows(void)
{
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum weft_type t = types[ti];
        for (int vi = 0; vi < 2; vi++) {
            const int64_t K = 256, V = vi ? 257 : 33, R = 13;
            const size_t rs = weft_row_size(t, K), xoff = 32, xnb = K * 4 + 16;
            uint8_t *w = rand_weights(t, V + 1, K);
            float *x = calloc(1, xoff + xnb * R), g[256];
            for (int64_t r = 0; r < R; r++)
                for (int64_t k = 0; k < K; k++) x[(xoff + r * xnb) / 4 + k] = 3.0f * frand();
            for (int k = 0; k < K; k++) g[k] = 1.0f + 0.5f * frand();
            static const int32_t sel3[] = {12, 0, 5}, sel12[] = {3, 3, 12, 0, 1, 2, 4, 5, 6, 11, 10, 9};
            for (int si = 0; si < 2; si++) {
                const int32_t *sel = si ? sel12 : sel3;
                const int64_t n_out = si ? 12 : 3;
                int32_t rows[1 + 12];
                rows[0] = -7; /* the view starts one int in */
                memcpy(rows + 1, sel, sizeof(int32_t) * (size_t)n_out);
                const size_t obytes = sizeof(float) * (size_t)(n_out * V);
                struct pair pw = pair_new(w, rs * (size_t)(V + 1)), px = pair_new(x, xoff + xnb * R);
                struct pair pg = pair_new(g, sizeof g), pr = pair_new(rows, sizeof rows), po = pair_new(NULL, obytes);
                struct weft_op oc = {.kind = WEFT_OP_LOGITS}, ov;
                struct weft_op_logits *l = &oc.u.logits;
                l->x = (struct weft_view){px.c, xoff, WEFT_TYPE_F32, K, R, xnb};
                l->rows = weft_view_2d(pr.c, 4, WEFT_TYPE_I32, n_out, 1);
                l->norm_w = weft_view_2d(pg.c, 0, WEFT_TYPE_F32, K, 1);
                l->w = (struct weft_view){pw.c, 0, t, K, V, rs}; /* leading V of V + 1 rows */
                l->out = weft_view_2d(po.c, 0, WEFT_TYPE_F32, V, n_out);
                l->eps = 1e-5f;
                ov = oc;
                ov.u.logits.x.buf = px.v;
                ov.u.logits.rows.buf = pr.v;
                ov.u.logits.norm_w.buf = pg.v;
                ov.u.logits.w.buf = pw.v;
                ov.u.logits.out.buf = po.v;
                if (run_both(&oc, &ov, 1)) {
                    float *c = malloc(obytes), *v = malloc(obytes);
                    read_both(&po, 0, obytes, c, v);
                    double e = nmse(v, c, (size_t)(n_out * V));
                    if (e > worst_logits[ti]) worst_logits[ti] = e;
                    CHECK_MSG(e < tol(t), "logits %s V%lld rows %lld: nmse %.3g", weft_type_name(t), (long long)V,
                              (long long)n_out, e);
                    free(c);
                    free(v);
                }
                pair_free(&pw); pair_free(&px); pair_free(&pg); pair_free(&pr); pair_free(&po);
            }
            free(w);
            free(x);
        }
    }
}

/* h = x·W1ᵀ; out = h·W2ᵀ + out (in place), in one run: the second reads
 * what the first wrote, and the fused add reads what it overwrites */
static void chained_matmuls_in_one_run_match_cpu(void)
{
    static const int64_t Ms[] = {3, 40};
    for (int mi = 0; mi < 2; mi++) {
        const enum weft_type t1 = WEFT_TYPE_Q4_0, t2 = WEFT_TYPE_Q6_K;
        const int64_t M = Ms[mi], K = 256, H = 512, N = 100;
        uint8_t *w1 = rand_weights(t1, H, K), *w2 = rand_weights(t2, N, H);
        float *x = malloc(sizeof(float) * M * K), *o = malloc(sizeof(float) * M * N);
        for (int64_t i = 0; i < M * K; i++) x[i] = frand();
        for (int64_t i = 0; i < M * N; i++) o[i] = frand();
        struct pair p1 = pair_new(w1, weft_row_size(t1, K) * H), p2 = pair_new(w2, weft_row_size(t2, H) * N);
        struct pair px = pair_new(x, sizeof(float) * M * K), ph = pair_new(NULL, sizeof(float) * M * H);
        struct pair po = pair_new(o, sizeof(float) * M * N);
        struct weft_op oc[2] = {{.kind = WEFT_OP_MATMUL}, {.kind = WEFT_OP_MATMUL}}, ov[2];
        for (int b = 0; b < 2; b++) {
            struct weft_op *ops = b ? ov : oc;
            if (b) memcpy(ov, oc, sizeof oc);
#define B(p) (b ? (p).v : (p).c)
            ops[0].u.matmul = (struct weft_op_matmul){.x = weft_view_2d(B(px), 0, WEFT_TYPE_F32, K, M),
                                                      .w = weft_view_2d(B(p1), 0, t1, K, H),
                                                      .out = weft_view_2d(B(ph), 0, WEFT_TYPE_F32, H, M)};
            ops[1].u.matmul = (struct weft_op_matmul){.x = weft_view_2d(B(ph), 0, WEFT_TYPE_F32, H, M),
                                                      .w = weft_view_2d(B(p2), 0, t2, H, N),
                                                      .out = weft_view_2d(B(po), 0, WEFT_TYPE_F32, N, M),
                                                      .has_add = true};
            ops[1].u.matmul.add = ops[1].u.matmul.out;
#undef B
        }
        if (run_both(oc, ov, 2)) {
            float *c = malloc(sizeof(float) * M * N), *v = malloc(sizeof(float) * M * N);
            read_both(&po, 0, sizeof(float) * M * N, c, v);
            double e = nmse(v, c, (size_t)(M * N));
            printf("  chained Q4_0 -> Q6_K, %lld rows: nmse %.3g\n", (long long)M, e);
            CHECK_MSG(e < 2e-4, "chained M%lld: nmse %.3g", (long long)M, e);
            free(c);
            free(v);
        }
        pair_free(&p1); pair_free(&p2); pair_free(&px); pair_free(&ph); pair_free(&po);
        free(w1); free(w2); free(x); free(o);
    }
}

static void supports_refuses_what_the_shaders_cannot_address(void)
{
    struct weft_buffer *b = NULL;
    CHECK(vk->iface->buffer_alloc(vk, 1 << 16, &b) == WEFT_OK);
    struct weft_op op = {.kind = WEFT_OP_MATMUL};
    op.u.matmul = (struct weft_op_matmul){.x = weft_view_2d(b, 0, WEFT_TYPE_F32, 64, 2),
                                          .w = weft_view_2d(b, 1024, WEFT_TYPE_Q8_0, 64, 8),
                                          .out = weft_view_2d(b, 4096, WEFT_TYPE_F32, 8, 2)};
    CHECK(vk->iface->supports(vk, &op));
    struct weft_op bad = op;
    bad.u.matmul.w.type = WEFT_TYPE_Q8_1; /* not a weight type */
    CHECK(!vk->iface->supports(vk, &bad));
    bad = op;
    bad.u.matmul.x.offset = 2; /* f32 rows must be 4-byte aligned */
    CHECK(!vk->iface->supports(vk, &bad));
    bad = op;
    bad.u.matmul.w.offset = 1025; /* weight rows 2-byte aligned */
    CHECK(!vk->iface->supports(vk, &bad));
    bad = op;
    bad.u.matmul.out.ne0 = 9; /* out columns = weight rows */
    CHECK(!vk->iface->supports(vk, &bad));
    bad = op;
    bad.u.matmul.w.ne1 = 4000; /* past the buffer */
    bad.u.matmul.out.ne0 = 4000;
    CHECK(!vk->iface->supports(vk, &bad));
    vk->iface->buffer_free(b);
}

int main(void)
{
    setenv("WEFT_VK_VALIDATE", "1", 1);
    check_env_reapply();
    const struct weft_backend_iface *vi = weft_backend_find("vulkan");
    if (!vi) SKIP_ALL("the vulkan backend is not built or not loadable");
    const char *why = NULL;
    struct weft_device_info info[4];
    if (vi->devices(info, 4, &why) < 1) SKIP_ALL("no Vulkan device: %s", why ? why : "?");
    if (weft_backend_open("vulkan:0", 0, &vk) != WEFT_OK) SKIP_ALL("cannot open vulkan:0: %s", weft_last_error());
    if (weft_backend_open("cpu", 2, &cpu) != WEFT_OK) {
        fprintf(stderr, "cannot open cpu: %s\n", weft_last_error());
        return 1;
    }
    printf("device: %s\n", info[0].name);
    RUN(supports_refuses_what_the_shaders_cannot_address);
    RUN(matmul_matches_cpu_for_every_type_and_odd_shape);
    RUN(matvec_tree_reduction_matches_cpu);
    RUN(matvec_with_more_rows_than_one_dispatch_dimension_matches_cpu);
    RUN(logits_match_cpu_on_selected_rows);
    RUN(chained_matmuls_in_one_run_match_cpu);
    for (size_t ti = 0; ti < N_TYPES; ti++)
        printf("  %-5s worst nmse: matmul vs cpu %.3g, vs rounded-x reference %.3g; logits vs cpu %.3g (tolerance %.0e)\n",
               weft_type_name(types[ti]), worst[ti], worst_ref[ti], worst_logits[ti], tol(types[ti]));
    weft_backend_close(vk);
    weft_backend_close(cpu);
    return check_summary();
}
