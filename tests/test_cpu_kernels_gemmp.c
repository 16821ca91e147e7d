/* Prefill on packed weights (struct weft_cpu_packed's xpack + gemmp) of every
 * CPU kernel table this machine can run, bit for bit against the same
 * table's one-row dot and against weft_vec_dot: a matrix of whole groups
 * (with a padded row stride) is packed, activation rows (padded stride) are
 * packed unit by unit (a short last unit repeats its last row), and
 * out[j * ldo + i] must equal dot(row i, x_j) as a float bit pattern, with
 * nothing written outside the nx x (groups * rows) window. Odd block counts,
 * one block, 1..3 groups, nx 1..9 and 64. Also times gemmp against the
 * table's plain gemm on a 1536 x 576 block times 64 rows (printed). */
#include "backends/cpu/cpu_kernels.h"
#include "core/quant.h"
#include "tests/check.h"
#define TEST_RNG_SEED 0x7a11ab1e5eed0003ull
#include "tests/test_rand.h"

#include <stdint.h>
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
            static const int nxs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 64};
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
                for (int groups = 1; groups <= 3; groups++)
                    for (size_t q = 0; q < sizeof nxs / sizeof nxs[0]; q++)
                        check_one(k, t, blocks[b] * bs, groups, nxs[q]);
        }
        tables += any;
    }
    printf("  %d tables with packed prefill, %ld outputs compared bit for bit\n", tables, n_checked);
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
    const int64_t K = 576, N = 1536;
    const int NX = 64;
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
            const enum weft_type t = (enum weft_type)ti;
            const struct weft_cpu_packed *pk = &k->packed[t];
            if (!pk->gemmp || !k->gemm[t]) continue;
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
                for (int64_t i = 0; i < N; i += 16) k->gemm[t](w + (size_t)i * rb, rb, 16, x, xs, NX, K, o1 + i, N);
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
            printf("  %s %s %lldx%lld x %d rows: gemm %.2f ms, gemmp %.2f ms\n", k->name, weft_type_name(t),
                   (long long)N, (long long)K, NX, b1 * 1e3, b2 * 1e3);
            free(w), free(wp), free(x), free(tmp), free(o1), free(o2);
        }
    }
}

int main(void)
{
    RUN(gemmp_matches_the_one_row_dot_bit_for_bit);
    RUN(timing_gemmp_vs_gemm);
    return check_summary();
}
