/* The repacked decode kernels (struct weft_cpu_packed) of every CPU kernel
 * table this machine can run, bit for bit against the same table's one-row
 * dot and against weft_vec_dot: a matrix of whole groups (plus a row stride
 * with padding) is packed, every group runs against an activation row, and
 * out[i] must equal dot(row i) as a float bit pattern. Odd block counts,
 * one block, several groups; K-quants (Q4_K, Q6_K) on K = 256..25856. Also times
 * the packed kernel against the plain-layout dot4 (the one-row dot where a
 * type has no dot4) on an L2-sized and a DRAM-sized matrix (printed). */
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"
#include "tests/cpu/q_extremes.h"
#define TEST_RNG_SEED 0x9ac4ed0d0c0ffeeull
#include "tests/test_rand.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static long n_groups_run, n_rows_checked;

/* quantized random rows of type t; some rows get extreme blocks (all
 * nibbles 15 / the K-quants' largest values) so the integer paths see their
 * limits (check_one pairs every other group with saturated activations) */
static void fill_rows(enum weft_type t, uint8_t *w, size_t stride, int64_t rows, int64_t n, float *tmp)
{
    if (t == WEFT_TYPE_Q4_K || t == WEFT_TYPE_Q5_K || t == WEFT_TYPE_Q6_K) {
        /* random bytes (every fifth row all 0xFF: the largest nibbles, 5- and
         * 6-bit values and Q4_K/Q5_K scales/mins, Q6_K scales -1),
         * small positive d (and dmin) */
        const size_t bb = weft_row_size(t, WEFT_QK_K);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n / WEFT_QK_K; i++) {
                uint8_t *by = w + (size_t)r * stride + (size_t)i * bb;
                for (size_t j = 0; j < bb; j++) by[j] = r % 5 == 3 ? 0xFF : (uint8_t)rng_u64();
                const weft_half d = weft_f32_to_half((float)(1e-4 + 0.05 * rng_unit()));
                const weft_half dmin = weft_f32_to_half((float)(1e-4 + 0.05 * rng_unit()));
                if (t == WEFT_TYPE_Q4_K) {
                    struct weft_block_q4_k *b = (struct weft_block_q4_k *)by;
                    b->d = d, b->dmin = dmin;
                } else if (t == WEFT_TYPE_Q5_K) {
                    struct weft_block_q5_k *b = (struct weft_block_q5_k *)by;
                    b->d = d, b->dmin = dmin;
                } else {
                    ((struct weft_block_q6_k *)by)->d = d;
                }
            }
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        fill_activations(tmp, n);
        if (r % 5 == 3)
            for (int64_t i = 0; i < n; i++) tmp[i] = (i / 32) % 2 ? -1.0f : 1.0f + (float)(i % 7) * 1e-3f;
        CHECK(weft_quantize_row(t, tmp, w + (size_t)r * stride, n));
        if (r % 5 == 4) max_nibble_row(t, w + (size_t)r * stride, n);
    }
}

static void check_one(const struct weft_cpu_kernels *k, enum weft_type t, int64_t n, int groups, size_t extra)
{
    const struct weft_cpu_packed *pk = &k->packed[t];
    const enum weft_type vdt = weft_vec_dot_type(t);
    const int64_t rows = (int64_t)groups * pk->rows;
    const size_t rb = weft_row_size(t, n), stride = rb + extra;
    uint8_t *w = malloc(stride * (size_t)rows + 64), *wp = malloc(rb * (size_t)rows + 64);
    size_t qrow = weft_row_size(vdt, n), aux_bytes = pk->aux_size ? pk->aux_size(n) : 0;
    uint8_t *xq = malloc(qrow + 64), *aux = malloc(aux_bytes + 64);
    float *tmp = malloc((size_t)n * sizeof(float)), *out = malloc((size_t)pk->rows * sizeof(float));
    memset(w, 0x5A, stride * (size_t)rows + 64);
    fill_rows(t, w, stride, rows, n, tmp);
    fill_activations(tmp, n);
    static unsigned calls;
    if (calls++ % 2) /* every other call: activations at +-127 in runs of four */
        for (int64_t i = 0; i < n; i++) tmp[i] = (i / 4) % 2 ? -3.0f : 3.0f;
    CHECK(weft_quantize_row_act(vdt, tmp, xq, n));
    if (pk->aux) pk->aux(xq, n, aux);
    pk->pack(wp, w, stride, rows, n);
    for (int g = 0; g < groups; g++) {
        memset(out, 0xCD, (size_t)pk->rows * sizeof(float));
        pk->dot(wp + (size_t)g * pk->rows * rb, xq, aux, n, out);
        n_groups_run++;
        for (int i = 0; i < pk->rows; i++) {
            const uint8_t *row = w + (size_t)(g * pk->rows + i) * stride;
            float one = k->dot[t](row, xq, n), ref = weft_vec_dot(t, row, xq, n);
            CHECK_MSG(same_float(out[i], one), "%s %s n=%lld group %d row %d: packed %.9g vs dot %.9g", k->name,
                      weft_type_name(t), (long long)n, g, i, out[i], one);
            CHECK_MSG(same_float(out[i], ref), "%s %s n=%lld group %d row %d: packed %.9g vs reference %.9g",
                      k->name, weft_type_name(t), (long long)n, g, i, out[i], ref);
            n_rows_checked++;
        }
    }
    free(w), free(wp), free(xq), free(aux), free(tmp), free(out);
}

static void packed_groups_match_the_one_row_dot_bit_for_bit(void)
{
    int tables = 0;
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        printf("  table %s: packed", k->name);
        bool any = false;
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
            enum weft_type t = (enum weft_type)ti;
            if (!k->packed[t].rows) continue;
            printf(" %s(x%d)", weft_type_name(t), k->packed[t].rows);
            any = true;
            static const int64_t blocks[] = {1, 2, 3, 5, 7, 18, 37, 48, 101};
            const size_t blk = weft_row_size(t, weft_type_get(t)->block_size);
            const size_t extras[] = {0, blk, 4096 + 2};
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
                for (int e = 0; e < 3; e++)
                    for (int groups = 1; groups <= 3; groups += 2)
                        check_one(k, t, blocks[b] * weft_type_get(t)->block_size, groups, extras[e]);
        }
        printf("\n");
        tables += any;
    }
    printf("  %d tables with packed kernels, %ld groups, %ld rows compared bit for bit\n", tables, n_groups_run,
           n_rows_checked);
}

/* ---- the backend's decode dispatch on K-quant packed copies: odd row
 * counts (leftover rows past the groups take the one-row dot), 1..5
 * activation rows ---- */

static struct weft_buffer *upload(struct weft_backend *be, const void *data, size_t n)
{
    struct weft_buffer *b = NULL;
    CHECK(be->iface->buffer_alloc(be, n, &b) == WEFT_OK);
    if (b && data) CHECK(be->iface->buffer_write(b, 0, data, n) == WEFT_OK);
    return b;
}

static void matmul_on_packed_k_weights_matches_the_one_row_dot(void)
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
    static const enum weft_type types[] = {WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K};
    static const int64_t Ks[] = {256, 1536}, Ns[] = {37, 16, 53}, Rs[] = {1, 2, 3, 5};
    const int64_t RMAX = 5;
    long checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
                const enum weft_type t = types[ti], vdt = weft_vec_dot_type(t);
                const int64_t K = Ks[ki], N = Ns[ni];
                const size_t rb = weft_row_size(t, K), xb = weft_row_size(vdt, K);
                uint8_t *w = malloc(rb * N), *xq = malloc(xb * RMAX);
                float *x = malloc(sizeof(float) * K * RMAX), *o = malloc(sizeof(float) * RMAX * N);
                fill_rows(t, w, rb, N, K, x);
                for (int64_t r = 0; r < RMAX; r++) {
                    fill_activations(x + r * K, K);
                    CHECK(weft_quantize_row_act(vdt, x + r * K, xq + (size_t)r * xb, K));
                }
                struct weft_buffer *bw = upload(be, w, rb * N), *bx = upload(be, x, sizeof(float) * K * RMAX),
                                   *bo = upload(be, NULL, sizeof(float) * RMAX * N);
                CHECK(bi->weight_prepare(be, &(struct weft_view){bw, 0, t, K, N, rb}) == WEFT_OK);
                for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++) {
                    const int64_t R = Rs[ri];
                    struct weft_op op = {.kind = WEFT_OP_MATMUL};
                    op.u.matmul = (struct weft_op_matmul){.x = weft_view_2d(bx, 0, WEFT_TYPE_F32, K, R),
                                                          .w = weft_view_2d(bw, 0, t, K, N),
                                                          .out = weft_view_2d(bo, 0, WEFT_TYPE_F32, N, R)};
                    if (!bi->supports(be, &op)) continue;
                    CHECK(bi->run(be, &op, 1) == WEFT_OK && bi->sync(be) == WEFT_OK);
                    CHECK(bi->buffer_read(bo, 0, o, sizeof(float) * R * N) == WEFT_OK);
                    long bad = 0;
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t n = 0; n < N; n++, checked++) {
                            const float want = weft_vec_dot(t, w + (size_t)n * rb, xq + (size_t)r * xb, K);
                            if (!same_float(o[r * N + n], want) && bad++ < 3)
                                CHECK_MSG(false, "MATMUL %s K%lld N%lld R%lld: out (%lld, %lld) %.9g, one-row dot %.9g",
                                          weft_type_name(t), (long long)K, (long long)N, (long long)R, (long long)r,
                                          (long long)n, o[r * N + n], want);
                        }
                }
                struct weft_buffer *all[] = {bw, bx, bo};
                for (int i = 0; i < 3; i++) bi->buffer_free(all[i]);
                free(w), free(xq), free(x), free(o);
            }
    printf("  backend %s: %ld Q4_K/Q5_K/Q6_K MATMUL outputs compared bit for bit\n", bi->name, checked);
    weft_backend_close(be);
}

/* ---- timing (printed, not asserted) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void time_matrix(const struct weft_cpu_kernels *k, enum weft_type t, int64_t K, int64_t N, int reps)
{
    const struct weft_cpu_packed *pk = &k->packed[t];
    const enum weft_type vdt = weft_vec_dot_type(t);
    const size_t rb = weft_row_size(t, K);
    uint8_t *w = malloc(rb * (size_t)N), *wp = malloc(rb * (size_t)N);
    uint8_t *xq = malloc(weft_row_size(vdt, K)), *aux = malloc(pk->aux_size ? pk->aux_size(K) : 1);
    float *tmp = malloc((size_t)K * sizeof(float)), *o1 = malloc((size_t)N * sizeof(float)),
          *o2 = malloc((size_t)N * sizeof(float));
    fill_rows(t, w, rb, 64, K, tmp);
    for (int64_t r = 64; r < N; r += 64) memcpy(w + (size_t)r * rb, w, rb * (size_t)(N - r < 64 ? N - r : 64));
    fill_activations(tmp, K);
    weft_quantize_row_act(vdt, tmp, xq, K);
    pk->pack(wp, w, rb, N, K);
    double b1 = 1e9, b2 = 1e9;
    for (int round = 0; round < 5; round++) {
        double t0 = now_s();
        for (int rep = 0; rep < reps; rep++)
            if (k->dot4[t])
                for (int64_t r = 0; r < N; r += 4) k->dot4[t](w + (size_t)r * rb, rb, xq, K, o1 + r);
            else
                for (int64_t r = 0; r < N; r++) o1[r] = k->dot[t](w + (size_t)r * rb, xq, K);
        double t1 = now_s();
        for (int rep = 0; rep < reps; rep++) {
            if (pk->aux) pk->aux(xq, K, aux);
            for (int64_t r = 0; r < N; r += pk->rows) pk->dot(wp + (size_t)r * rb, xq, aux, K, o2 + r);
        }
        double t2 = now_s();
        if (t1 - t0 < b1) b1 = t1 - t0;
        if (t2 - t1 < b2) b2 = t2 - t1;
    }
    CHECK(memcmp(o1, o2, (size_t)N * sizeof(float)) == 0);
    double bytes = (double)rb * (double)N * reps;
    printf("  %s %s K=%lld N=%lld (%.1f MB): %s %.1f GB/s, packed x%d %.1f GB/s\n", k->name, weft_type_name(t),
           (long long)K, (long long)N, rb * (double)N * 1e-6, k->dot4[t] ? "dot4" : "dot", bytes / b1 * 1e-9, pk->rows,
           bytes / b2 * 1e-9);
    free(w), free(wp), free(xq), free(aux), free(tmp), free(o1), free(o2);
}

static void timing_packed_vs_dot4(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
            enum weft_type t = (enum weft_type)ti;
            if (!k->packed[t].rows) continue;
            if (weft_type_get(t)->block_size == 256) { /* SmolLM2's ffn_down, K = 1536 */
                time_matrix(k, t, 1536, 576, 200);
                time_matrix(k, t, 1536, 18432, 3);
                continue;
            }
            time_matrix(k, t, 576, 1536, 200);
            time_matrix(k, t, 576, 49152, 3);
        }
    }
}

int main(void)
{
    RUN(packed_groups_match_the_one_row_dot_bit_for_bit);
    RUN(matmul_on_packed_k_weights_matches_the_one_row_dot);
    RUN(timing_packed_vs_dot4);
    return check_summary();
}
