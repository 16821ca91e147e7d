/* Prefill on packed weights (struct weft_cpu_packed's xpack + gemmp) of every
 * CPU kernel table this machine can run, bit for bit against the same
 * table's one-row dot and against weft_vec_dot: a matrix of whole groups
 * (with a padded row stride) is packed, activation rows (padded stride) are
 * packed unit by unit (a short last unit repeats its last row), and
 * out[j * ldo + i] must equal dot(row i, x_j) as a float bit pattern, with
 * nothing written outside the nx x (groups * rows) window. Odd block counts,
 * one block, 1..3 groups, nx 1..9 and 64. Then the CPU backend's MATMUL on
 * prepared (packed) weights, bit for bit against weft_vec_dot: row counts
 * with a partial last group or tile (those rows fall back to the plain
 * kernels), a view of the leading rows, 2..70 activation rows (past one
 * 64-row chunk), two matmuls sharing x as one group, a fused residual. Also
 * times gemmp against the table's plain gemm (or its dot, where it has no
 * gemm) on a 1536 x 576 block (x 2048 for the K-quants) times 64 rows
 * (printed). */
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"
#include "tests/cpu/q_extremes.h"
#define TEST_RNG_SEED 0x7a11ab1e5eed0003ull
#include "tests/test_rand.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static long n_checked;

static void fill_rows(enum weft_type t, uint8_t *w, size_t stride, int64_t rows, int64_t n, float *tmp)
{
    for (int64_t r = 0; r < rows; r++) {
        fill_activations(tmp, n);
        if (r % 5 == 3)
            for (int64_t i = 0; i < n; i++) tmp[i] = (i / 32) % 2 ? -1.0f : 1.0f + (float)(i % 7) * 1e-3f;
        CHECK(weft_quantize_row(t, tmp, w + (size_t)r * stride, n));
        if (r % 5 == 4) max_nibble_row(t, w + (size_t)r * stride, n);
    }
}

/* activation rows in the vec_dot type; row 0 of every 7 saturates (all
 * -128 / 127) so the unsigned-offset paths see their limits */
static void fill_acts(enum weft_type vdt, uint8_t *x, size_t stride, int nx, int64_t n, float *tmp)
{
    for (int j = 0; j < nx; j++) {
        fill_activations(tmp, n);
        if (j % 7 == 0)
            for (int64_t i = 0; i < n; i++) tmp[i] = (i / 4) % 2 ? -3.0f : 3.0f;
        CHECK(weft_quantize_row_act(vdt, tmp, x + (size_t)j * stride, n));
    }
}

/* xp for nx rows: units of pk->xrows rows */
static uint8_t *pack_acts(const struct weft_cpu_packed *pk, const uint8_t *x, size_t xs, int nx, int64_t n)
{
    const int units = (nx + pk->xrows - 1) / pk->xrows;
    const size_t ub = pk->xp_size(n);
    uint8_t *xp = aligned_alloc(64, (ub * (size_t)units + 64 + 63) & ~(size_t)63);
    for (int u = 0; u < units; u++) {
        int r = nx - u * pk->xrows < pk->xrows ? nx - u * pk->xrows : pk->xrows;
        pk->xpack(x + (size_t)u * pk->xrows * xs, xs, r, n, xp + (size_t)u * ub);
    }
    return xp;
}

static void check_one(const struct weft_cpu_kernels *k, enum weft_type t, int64_t n, int groups, int nx)
{
    const struct weft_cpu_packed *pk = &k->packed[t];
    const enum weft_type vdt = weft_vec_dot_type(t);
    const int64_t rows = (int64_t)groups * pk->rows;
    const size_t rb = weft_row_size(t, n), ws = rb + 34, xs = weft_row_size(vdt, n) + 36;
    uint8_t *w = malloc(ws * (size_t)rows), *wp = aligned_alloc(64, (rb * (size_t)rows + 64 + 63) & ~(size_t)63);
    uint8_t *x = malloc(xs * (size_t)nx);
    float *tmp = malloc((size_t)n * sizeof(float));
    fill_rows(t, w, ws, rows, n, tmp);
    fill_acts(vdt, x, xs, nx, n, tmp);
    pk->pack(wp, w, ws, rows, n);
    uint8_t *xp = pack_acts(pk, x, xs, nx, n);
    const size_t ldo = (size_t)rows + 3;
    float *out = malloc(sizeof(float) * ldo * (size_t)(nx + 1));
    memset(out, 0xCD, sizeof(float) * ldo * (size_t)(nx + 1));
    pk->gemmp(wp, groups, xp, nx, n, out, ldo);
    for (int j = 0; j <= nx; j++)
        for (size_t i = 0; i < ldo; i++) {
            const float v = out[(size_t)j * ldo + i];
            if (j == nx || i >= (size_t)rows) {
                uint32_t bits;
                memcpy(&bits, &v, 4);
                CHECK_MSG(bits == 0xCDCDCDCDu, "%s %s n=%lld: gemmp wrote outside its window (%d, %zu)", k->name,
                          weft_type_name(t), (long long)n, j, i);
                continue;
            }
            const uint8_t *row = w + i * ws, *xr = x + (size_t)j * xs;
            const float one = k->dot[t](row, xr, n), ref = weft_vec_dot(t, row, xr, n);
            CHECK_MSG(same_float(v, one) && same_float(v, ref),
                      "%s %s n=%lld groups %d nx %d out (%d, %zu): gemmp %.9g vs dot %.9g, reference %.9g", k->name,
                      weft_type_name(t), (long long)n, groups, nx, j, i, v, one, ref);
            n_checked++;
        }
    free(w), free(wp), free(x), free(xp), free(tmp), free(out);
}

static void gemmp_matches_the_one_row_dot_bit_for_bit(void)
{
    int tables = 0;
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        bool any = false;
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
            const enum weft_type t = (enum weft_type)ti;
            if (!k->packed[t].rows || !k->packed[t].gemmp) continue;
            printf("  table %s: gemmp %s (x%d, units of %d)\n", k->name, weft_type_name(t), k->packed[t].rows,
                   k->packed[t].xrows);
            any = true;
            const int64_t bs = weft_type_get(t)->block_size;
            static const int64_t blocks[] = {1, 2, 3, 7, 18, 37};
            static const int nxs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 67}; /* 67: a second pass of the 64-row forms */
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
                for (int groups = 1; groups <= 3; groups++)
                    for (size_t q = 0; q < sizeof nxs / sizeof nxs[0]; q++)
                        check_one(k, t, blocks[b] * bs, groups, nxs[q]);
        }
        tables += any;
    }
    printf("  %d tables with packed prefill, %ld outputs compared bit for bit\n", tables, n_checked);
}

/* ---- the backend's dispatch: packed prefill, and its fallbacks ---- */

static struct weft_buffer *upload(struct weft_backend *be, const void *data, size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(be->iface->buffer_alloc(be, n, &b) == WEFT_OK);
    if (b && data) CHECK(be->iface->buffer_write(b, 0, data, n) == WEFT_OK);
    return b;
}

/* out[r][n] (+ add[r][n]) of a prepared matrix against weft_vec_dot */
static long check_matmul_rows(enum weft_type t, const uint8_t *w, int64_t nv, const uint8_t *xq, int64_t R,
                              int64_t K, const float *out, const float *add, const char *what)
{
    const size_t rb = weft_row_size(t, K), xb = weft_row_size(weft_vec_dot_type(t), K);
    long bad = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t n = 0; n < nv; n++) {
            float want = weft_vec_dot(t, w + (size_t)n * rb, xq + (size_t)r * xb, K);
            if (add) want += add[r * nv + n];
            const float got = out[r * nv + n];
            if (!same_float(got, want) && bad++ < 3)
                CHECK_MSG(false, "MATMUL %s %s K%lld R%lld: out (%lld, %lld) %.9g, one-row dot %.9g", weft_type_name(t),
                          what, (long long)K, (long long)R, (long long)r, (long long)n, got, want);
            n_checked++;
        }
    return bad;
}

static void matmul_on_packed_weights_matches_the_one_row_dot(void)
{
    struct weft_backend *be = NULL;
    /* WEFT_CPU_ISA picks the backend's table, as it does for the weft binary
     * (CMakeLists.txt runs these once more on the AVX2 table) */
    char isa_opt[48];
    snprintf(isa_opt, sizeof isa_opt, "cpu.isa=%s", getenv("WEFT_CPU_ISA") ? getenv("WEFT_CPU_ISA") : "");
    CHECK(weft_backend_set_options(isa_opt) == WEFT_OK);
    if (weft_backend_open("cpu", 2, &be) != WEFT_OK || !be) {
        printf("SKIP: no cpu backend: %s\n", weft_last_error());
        return;
    }
    const struct weft_backend_iface *bi = be->iface;
    if (!bi->weight_prepare) {
        weft_backend_close(be);
        return;
    }
    static const enum weft_type types[] = {WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1, WEFT_TYPE_Q8_0, WEFT_TYPE_Q5_0,
                                           WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K};
    /* N1, N2: the two matrices (tails of 3 rows past a group, a tile of 8
     * rows, 13 past a tile); R: activation rows */
    static const int64_t Ks[] = {224, 576}, Ns[][2] = {{27, 40}, {77, 16}}, Rs[] = {2, 3, 4, 5, 8, 9, 13, 64, 70};
    const int64_t RMAX = 70;
    long checked0 = n_checked;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
                const enum weft_type t = types[ti], vdt = weft_vec_dot_type(t);
                /* the K-quants' 256-element blocks: K 256 and 768 */
                const int64_t K = weft_type_get(t)->block_size == 256 ? 256 * (1 + 2 * (int64_t)ki) : Ks[ki],
                              N1 = Ns[ni][0], N2 = Ns[ni][1];
                const size_t rb = weft_row_size(t, K), xb = weft_row_size(vdt, K);
                uint8_t *w1 = malloc(rb * N1), *w2 = malloc(rb * N2), *xq = malloc(xb * RMAX);
                float *x = malloc(sizeof(float) * K * RMAX), *add = malloc(sizeof(float) * RMAX * N1),
                      *o1 = malloc(sizeof(float) * RMAX * N1), *o2 = malloc(sizeof(float) * RMAX * N2);
                fill_rows(t, w1, rb, N1, K, x);
                fill_rows(t, w2, rb, N2, K, x);
                for (int64_t r = 0; r < RMAX; r++) {
                    fill_activations(x + r * K, K);
                    CHECK(weft_quantize_row_act(vdt, x + r * K, xq + (size_t)r * xb, K));
                }
                fill_activations(add, RMAX * N1);
                struct weft_buffer *bw1 = upload(be, w1, rb * N1), *bw2 = upload(be, w2, rb * N2),
                                   *bx = upload(be, x, sizeof(float) * K * RMAX),
                                   *bo1 = upload(be, NULL, sizeof(float) * RMAX * N1),
                                   *bo2 = upload(be, NULL, sizeof(float) * RMAX * N2);
                CHECK(bi->weight_prepare(be, &(struct weft_view){bw1, 0, t, K, N1, rb}) == WEFT_OK);
                CHECK(bi->weight_prepare(be, &(struct weft_view){bw2, 0, t, K, N2, rb}) == WEFT_OK);
                for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++) {
                    const int64_t R = Rs[ri];
                    /* the two matrices as one group (same x), then the leading N1 - 5 rows of the first
                     * with a fused residual (in place) */
                    struct weft_op ops[2] = {{.kind = WEFT_OP_MATMUL}, {.kind = WEFT_OP_MATMUL}};
                    ops[0].u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R),
                                                              .w = weft_view_2d(bw1, 0, t, K, N1),
                                                              .out = weft_view_2d(bo1, 0, WEFT_TYPE_F32, N1, R)};
                    ops[1].u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R),
                                                              .w = weft_view_2d(bw2, 0, t, K, N2),
                                                              .out = weft_view_2d(bo2, 0, WEFT_TYPE_F32, N2, R)};
                    if (!bi->supports(be, &ops[0])) continue;
                    CHECK(bi->run(be, ops, 2) == WEFT_OK && bi->sync(be) == WEFT_OK);
                    CHECK(bi->buffer_read(bo1, 0, o1, sizeof(float) * R * N1) == WEFT_OK);
                    CHECK(bi->buffer_read(bo2, 0, o2, sizeof(float) * R * N2) == WEFT_OK);
                    check_matmul_rows(t, w1, N1, xq, R, K, o1, NULL, "first of a group");
                    check_matmul_rows(t, w2, N2, xq, R, K, o2, NULL, "second of a group");
                    const int64_t NV = N1 - 5;
                    CHECK(bi->buffer_write(bo1, 0, add, sizeof(float) * R * NV) == WEFT_OK);
                    struct weft_op op = {.kind = WEFT_OP_MATMUL};
                    op.u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R),
                                                          .w = weft_view_2d(bw1, 0, t, K, NV),
                                                          .out = weft_view_2d(bo1, 0, WEFT_TYPE_F32, NV, R),
                                                          .has_add = true};
                    op.u.matmul.add = op.u.matmul.out;
                    CHECK(bi->run(be, &op, 1) == WEFT_OK && bi->sync(be) == WEFT_OK);
                    CHECK(bi->buffer_read(bo1, 0, o1, sizeof(float) * R * NV) == WEFT_OK);
                    check_matmul_rows(t, w1, NV, xq, R, K, o1, add, "leading rows + residual");
                }
                struct weft_buffer *all[] = {bw1, bw2, bx, bo1, bo2};
                for (int i = 0; i < 5; i++) bi->buffer_free(all[i]);
                free(w1), free(w2), free(xq), free(x), free(add), free(o1), free(o2);
            }
    printf("  backend %s: %ld MATMUL outputs compared bit for bit\n", bi->name, n_checked - checked0);
    weft_backend_close(be);
}

/* ---- timing (printed, not asserted) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void timing_gemmp_vs_gemm(void)
{
    const int64_t N = 1536;
    const int NX = 64;
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
            const enum weft_type t = (enum weft_type)ti;
            const struct weft_cpu_packed *pk = &k->packed[t];
            if (!pk->gemmp) continue;
            const int64_t K = weft_type_get(t)->block_size == 256 ? 2048 : 576;
            const enum weft_type vdt = weft_vec_dot_type(t);
            const size_t rb = weft_row_size(t, K), xs = weft_row_size(vdt, K);
            uint8_t *w = malloc(rb * N), *wp = aligned_alloc(64, (rb * N + 63) & ~(size_t)63), *x = malloc(xs * NX);
            float *tmp = malloc(K * sizeof(float)), *o1 = malloc(sizeof(float) * N * NX),
                  *o2 = malloc(sizeof(float) * N * NX);
            fill_rows(t, w, rb, N, K, tmp);
            fill_acts(vdt, x, xs, NX, K, tmp);
            pk->pack(wp, w, rb, N, K);
            double b1 = 1e9, b2 = 1e9;
            for (int round = 0; round < 5; round++) {
                double t0 = now_s();
                for (int64_t i = 0; i < N; i += 16)
                    if (k->gemm[t])
                        k->gemm[t](w + (size_t)i * rb, rb, 16, x, xs, NX, K, o1 + i, N);
                    else  /* no plain tile: one dot per output */
                        for (int jx = 0; jx < NX; jx++)
                            for (int64_t r = i; r < i + 16; r++)
                                o1[(size_t)jx * N + r] = k->dot[t](w + (size_t)r * rb, x + (size_t)jx * xs, K);
                double t1 = now_s();
                uint8_t *xp = pack_acts(pk, x, xs, NX, K);  /* the xpack cost counts */
                for (int64_t i = 0; i < N; i += 16)
                    pk->gemmp(wp + (size_t)i * rb, 16 / pk->rows, xp, NX, K, o2 + i, N);
                double t2 = now_s();
                free(xp);
                if (t1 - t0 < b1) b1 = t1 - t0;
                if (t2 - t1 < b2) b2 = t2 - t1;
            }
            CHECK(memcmp(o1, o2, sizeof(float) * N * NX) == 0);
            printf("  %s %s %lldx%lld x %d rows: %s %.2f ms, gemmp %.2f ms\n", k->name, weft_type_name(t),
                   (long long)N, (long long)K, NX, k->gemm[t] ? "gemm" : "dot", b1 * 1e3, b2 * 1e3);
            free(w), free(wp), free(x), free(tmp), free(o1), free(o2);
        }
    }
}

int main(void)
{
    RUN(gemmp_matches_the_one_row_dot_bit_for_bit);
    RUN(matmul_on_packed_weights_matches_the_one_row_dot);
    RUN(timing_gemmp_vs_gemm);
    return check_summary();
}
