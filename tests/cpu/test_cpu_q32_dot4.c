/* The four-row dots (dot4) of every CPU kernel table this machine can run
 * against the same table's one-row dot, bit for bit: out[i] must equal
 * dot(w + i * stride, x, n) as a float bit pattern (the one-row dots are
 * themselves checked against backends/cpu/cpu_ref_dot.c by test_cpu_kernels_q/_k, and here
 * against weft_vec_dot directly too). Weights come from weft_quantize_row
 * (32-element formats) or random valid blocks (K-quants), activations from
 * weft_quantize_row_act; several lengths and row strides. Also times dot4
 * against four one-row dots (printed, not asserted). */
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"
#define TEST_RNG_SEED 0x5eed0d074d07ull
#include "tests/test_rand.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool is_k_quant(enum weft_type t)
{
    return t == WEFT_TYPE_Q4_K || t == WEFT_TYPE_Q5_K || t == WEFT_TYPE_Q6_K;
}

static bool is_block32(enum weft_type t)
{
    return t == WEFT_TYPE_Q4_0 || t == WEFT_TYPE_Q4_1 || t == WEFT_TYPE_Q5_0 || t == WEFT_TYPE_Q5_1 ||
           t == WEFT_TYPE_Q8_0 || t == WEFT_TYPE_IQ4_NL || t == WEFT_TYPE_MXFP4;
}

/* 256-element blocks with a quantizer */
static bool is_block256_q(enum weft_type t)
{
    return t == WEFT_TYPE_IQ4_XS;
}

/* one weight row of type t: quantized random data, or random K-quant
 * blocks with small positive d (and dmin) */
static void fill_weight_row(enum weft_type t, void *w, int64_t n, float *tmp)
{
    if (!is_k_quant(t)) {
        fill_activations(tmp, n);
        CHECK(weft_quantize_row(t, tmp, w, n));
        return;
    }
    size_t bytes = weft_row_size(t, n);
    uint8_t *b = w;
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)rng_u64();
    for (int64_t i = 0; i < n / WEFT_QK_K; i++) {
        weft_half d = weft_f32_to_half((float)(1e-4 + 0.05 * rng_unit()));
        weft_half dmin = weft_f32_to_half((float)(1e-4 + 0.05 * rng_unit()));
        if (t == WEFT_TYPE_Q4_K) {
            struct weft_block_q4_k *q = (struct weft_block_q4_k *)w + i;
            q->d = d, q->dmin = dmin;
        } else if (t == WEFT_TYPE_Q5_K) {
            struct weft_block_q5_k *q = (struct weft_block_q5_k *)w + i;
            q->d = d, q->dmin = dmin;
        } else {
            struct weft_block_q6_k *q = (struct weft_block_q6_k *)w + i;
            q->d = d;
        }
    }
}

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static long n_calls, n_rows_checked, n_tables_with_dot4;

/* Check one table's dot4[t] on n-element rows at the given extra stride. */
static void check_one(const struct weft_cpu_kernels *k, enum weft_type t, int64_t n, size_t extra)
{
    enum weft_type vdt = weft_vec_dot_type(t);
    size_t rb = weft_row_size(t, n), stride = rb + extra;
    uint8_t *w = malloc(4 * stride + 64);
    uint8_t *xq = malloc(weft_row_size(vdt, n) + 64);
    float *tmp = malloc((size_t)n * sizeof(float));
    memset(w, 0xA5, 4 * stride + 64);
    for (int r = 0; r < 4; r++) fill_weight_row(t, w + (size_t)r * stride, n, tmp);
    fill_activations(tmp, n);
    CHECK(weft_quantize_row_act(vdt, tmp, xq, n));
    float out[4];
    memset(out, 0xCD, sizeof out);
    k->dot4[t](w, stride, xq, n, out);
    n_calls++;
    for (int r = 0; r < 4; r++) {
        float one = k->dot[t](w + (size_t)r * stride, xq, n);
        float ref = weft_vec_dot(t, w + (size_t)r * stride, xq, n);
        CHECK_MSG(same_float(out[r], one), "%s %s n=%lld extra=%zu row %d: dot4 %.9g vs dot %.9g", k->name,
                  weft_type_name(t), (long long)n, extra, r, out[r], one);
        CHECK_MSG(same_float(out[r], ref), "%s %s n=%lld extra=%zu row %d: dot4 %.9g vs reference %.9g", k->name,
                  weft_type_name(t), (long long)n, extra, r, out[r], ref);
        n_rows_checked++;
    }
    free(w);
    free(xq);
    free(tmp);
}

static void dot4_rows_match_the_one_row_dot_bit_for_bit(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        bool any = false;
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
            enum weft_type t = (enum weft_type)ti;
            if (!k->dot4[t]) continue;
            CHECK_MSG(is_block32(t) || is_k_quant(t) || is_block256_q(t), "%s: dot4 for %s, which this test does not cover",
                      k->name, weft_type_name(t));
            if (!is_block32(t) && !is_k_quant(t) && !is_block256_q(t)) continue;
            any = true;
            static const int64_t blocks32[] = {1, 2, 3, 5, 7, 18, 37, 48, 101};
            static const int64_t blocks256[] = {1, 2, 3, 6, 7, 17};
            const bool b256 = is_k_quant(t) || is_block256_q(t);
            const int64_t *bl = b256 ? blocks256 : blocks32;
            int nbl = b256 ? 6 : 9;
            int64_t qk = b256 ? WEFT_QK_K : 32;
            size_t blk = weft_row_size(t, qk);
            const size_t extras[] = {0, blk, 3 * blk, 4096};
            for (int b = 0; b < nbl; b++)
                for (int e = 0; e < 4; e++)
                    for (int trial = 0; trial < 3; trial++) check_one(k, t, bl[b] * qk, extras[e]);
        }
        if (any) n_tables_with_dot4++;
        printf("  table %s: dot4 for", k->name);
        for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++)
            if (k->dot4[ti]) printf(" %s", weft_type_name((enum weft_type)ti));
        printf("\n");
    }
    printf("  %ld tables with dot4, %ld dot4 calls, %ld rows compared bit for bit\n", n_tables_with_dot4, n_calls,
           n_rows_checked);
}

/* ---- timing (printed, not asserted) ---- */

#ifndef WEFT_EXEC_PREFIX
#define WEFT_EXEC_PREFIX "" /* a cross build's emulator (CMakeLists.txt sets it for every test) */
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void time_matrix(const struct weft_cpu_kernels *k, enum weft_type t, int64_t K, int64_t N)
{
    enum weft_type vdt = weft_vec_dot_type(t);
    size_t rb = weft_row_size(t, K);
    uint8_t *w = malloc(rb * (size_t)N);
    uint8_t *xq = malloc(weft_row_size(vdt, K));
    float *tmp = malloc((size_t)K * sizeof(float)), *o1 = malloc((size_t)N * sizeof(float)),
          *o4 = malloc((size_t)N * sizeof(float));
    for (int64_t r = 0; r < N; r++) fill_weight_row(t, w + (size_t)r * rb, K, tmp);
    fill_activations(tmp, K);
    weft_quantize_row_act(vdt, tmp, xq, K);
    /* under a cross build's emulator (qemu) the times mean nothing: one pass, still compared */
    const bool emulated = WEFT_EXEC_PREFIX[0] != '\0';
    const int reps = emulated ? 1 : 200, rounds = emulated ? 1 : 5;
    double best1 = 1e9, best4 = 1e9;
    for (int round = 0; round < rounds; round++) {
        double t0 = now_s();
        for (int rep = 0; rep < reps; rep++)
            for (int64_t r = 0; r < N; r++) o1[r] = k->dot[t](w + (size_t)r * rb, xq, K);
        double t1 = now_s();
        for (int rep = 0; rep < reps; rep++)
            for (int64_t r = 0; r < N; r += 4) k->dot4[t](w + (size_t)r * rb, rb, xq, K, o4 + r);
        double t2 = now_s();
        if (t1 - t0 < best1) best1 = t1 - t0;
        if (t2 - t1 < best4) best4 = t2 - t1;
    }
    CHECK(memcmp(o1, o4, (size_t)N * sizeof(float)) == 0);
    double bytes = (double)rb * (double)N * reps;
    printf("  %s %s K=%lld N=%lld: 4x dot %.1f us (%.1f GB/s), dot4 %.1f us (%.1f GB/s), x%.2f\n", k->name,
           weft_type_name(t), (long long)K, (long long)N, best1 / reps * 1e6, bytes / best1 * 1e-9,
           best4 / reps * 1e6, bytes / best4 * 1e-9, best1 / best4);
    free(w), free(xq), free(tmp), free(o1), free(o4);
}

static void timing_dot4_vs_four_dots(void)
{
    enum weft_cpu_isa isa = weft_cpu_isa_select(weft_backend_options());
    const struct weft_cpu_kernels *k = weft_cpu_kernels_get(isa);
    for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
        enum weft_type t = (enum weft_type)ti;
        if (!k || !k->dot4[t] || (!is_block32(t) && !is_k_quant(t) && !is_block256_q(t))) continue;
        if (is_k_quant(t) || is_block256_q(t)) {
            time_matrix(k, t, 1536, 576);
        } else {
            time_matrix(k, t, 576, 1536);
            time_matrix(k, t, 1536, 576);
        }
    }
}

int main(void)
{
    RUN(dot4_rows_match_the_one_row_dot_bit_for_bit);
    RUN(timing_dot4_vs_four_dots);
    return check_summary();
}
