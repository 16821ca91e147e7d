/* The AVX-512 four-row dots (backends/cpu/q32/q32_dot4_avx512.c) against the
 * scalar table's dot and weft_vec_dot, bit for bit: out[i] of the AVX-512
 * table's dot4 must equal the reference dot of row i as a float bit pattern.
 * Weights from weft_quantize_row, activations from weft_quantize_row_act;
 * n from one block to 4096 (odd block counts, 576, 1536), contiguous and
 * padded row strides. Both forms are checked where the CPU has them: the
 * avx512 table's (AVX512BW) and the avx512vnni table's (VNNI). Also times the AVX2 table's
 * dot4 against the AVX-512 one on 576x1536, one thread (printed only).
 * Skipped where the CPU has no AVX-512 table. */
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"
#define TEST_RNG_SEED 0xa5125eed0d04ull
#include "tests/test_rand.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const enum weft_type types[] = {WEFT_TYPE_Q4_1, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0};

static long n_calls, n_rows;

static void check_one(const struct weft_cpu_kernels *k, const struct weft_cpu_kernels *ref, enum weft_type t,
                      int64_t n, size_t extra)
{
    enum weft_type vdt = weft_vec_dot_type(t);
    size_t stride = weft_row_size(t, n) + extra;
    uint8_t *w = malloc(4 * stride + 64), *xq = malloc(weft_row_size(vdt, n) + 64);
    float *tmp = malloc((size_t)n * sizeof(float));
    memset(w, 0x5A, 4 * stride + 64);
    for (int r = 0; r < 4; r++) {
        fill_activations(tmp, n);
        CHECK(weft_quantize_row(t, tmp, w + (size_t)r * stride, n));
    }
    fill_activations(tmp, n);
    CHECK(weft_quantize_row_act(vdt, tmp, xq, n));
    float out[4];
    memset(out, 0xCD, sizeof out);
    k->dot4[t](w, stride, xq, n, out);
    n_calls++;
    for (int r = 0; r < 4; r++) {
        float s = ref->dot[t](w + (size_t)r * stride, xq, n);
        float v = weft_vec_dot(t, w + (size_t)r * stride, xq, n);
        CHECK_MSG(memcmp(&out[r], &s, sizeof s) == 0, "%s n=%lld extra=%zu row %d: dot4 %.9g vs scalar dot %.9g",
                  weft_type_name(t), (long long)n, extra, r, out[r], s);
        CHECK_MSG(memcmp(&out[r], &v, sizeof v) == 0, "%s n=%lld extra=%zu row %d: dot4 %.9g vs weft_vec_dot %.9g",
                  weft_type_name(t), (long long)n, extra, r, out[r], v);
        n_rows++;
    }
    free(w), free(xq), free(tmp);
}

/* every length and stride for the types the table has dot4 for */
static void check_table(enum weft_cpu_isa isa, const char *label)
{
    const struct weft_cpu_kernels *k = weft_cpu_kernels_get(isa);
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    static const int64_t ns[] = {32, 64, 96, 160, 224, 352, 576, 800, 1536, 2080, 4064, 4096};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum weft_type t = types[ti];
        if (!k->dot4[t]) continue;
        size_t blk = weft_row_size(t, 32);
        const size_t extras[] = {0, blk, 3 * blk + 2, 4096 + 6};  /* blocks stay 2-byte aligned */
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (int e = 0; e < 4; e++)
                for (int trial = 0; trial < 3; trial++) check_one(k, ref, t, ns[a], extras[e]);
    }
    printf("  %s: %ld dot4 calls, %ld rows compared bit for bit\n", label, n_calls, n_rows);
}

static void avx512bw_dot4_matches_scalar_dot_bit_for_bit(void) { check_table(WEFT_CPU_ISA_AVX512, "avx512 table (AVX512BW)"); }

static void avx512vnni_dot4_matches_too(void)
{
    if (!weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512_VNNI)) {
        printf("  no AVX512_VNNI on this CPU: skipped\n");
        return;
    }
    const struct weft_cpu_kernels *bw = weft_cpu_kernels_get(WEFT_CPU_ISA_AVX512);
    const struct weft_cpu_kernels *v = weft_cpu_kernels_get(WEFT_CPU_ISA_AVX512_VNNI);
    CHECK(bw->dot4[WEFT_TYPE_Q4_1] != v->dot4[WEFT_TYPE_Q4_1]);  /* two forms, so both are checked */
    n_calls = n_rows = 0;
    check_table(WEFT_CPU_ISA_AVX512_VNNI, "avx512vnni table (VNNI)");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void timing_avx2_vs_avx512_dot4(void)
{
    const struct weft_cpu_kernels *k2 = weft_cpu_kernels_get(WEFT_CPU_ISA_AVX2);
    const struct weft_cpu_kernels *k5 = weft_cpu_kernels_get(WEFT_CPU_ISA_AVX512);
    const int64_t K = 576, N = 1536;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum weft_type t = types[ti];
        if (!k2->dot4[t] || !k5->dot4[t]) continue;
        enum weft_type vdt = weft_vec_dot_type(t);
        size_t rb = weft_row_size(t, K);
        uint8_t *w = malloc(rb * (size_t)N), *xq = malloc(weft_row_size(vdt, K));
        float *tmp = malloc((size_t)K * sizeof(float)), *o2 = malloc(N * sizeof(float)), *o5 = malloc(N * sizeof(float));
        for (int64_t r = 0; r < N; r++) {
            fill_activations(tmp, K);
            weft_quantize_row(t, tmp, w + (size_t)r * rb, K);
        }
        fill_activations(tmp, K);
        weft_quantize_row_act(vdt, tmp, xq, K);
        const int reps = 200;
        double b2 = 1e9, b5 = 1e9;
        for (int round = 0; round < 7; round++) {
            double t0 = now_s();
            for (int rep = 0; rep < reps; rep++)
                for (int64_t r = 0; r < N; r += 4) k2->dot4[t](w + (size_t)r * rb, rb, xq, K, o2 + r);
            double t1 = now_s();
            for (int rep = 0; rep < reps; rep++)
                for (int64_t r = 0; r < N; r += 4) k5->dot4[t](w + (size_t)r * rb, rb, xq, K, o5 + r);
            double t2 = now_s();
            if (t1 - t0 < b2) b2 = t1 - t0;
            if (t2 - t1 < b5) b5 = t2 - t1;
        }
        CHECK(memcmp(o2, o5, N * sizeof(float)) == 0);
        double bytes = (double)rb * (double)N * reps;
        printf("  %s K=%lld N=%lld: avx2 dot4 %.1f us (%.1f GB/s), avx512 dot4 %.1f us (%.1f GB/s), x%.2f\n",
               weft_type_name(t), (long long)K, (long long)N, b2 / reps * 1e6, bytes / b2 * 1e-9, b5 / reps * 1e6,
               bytes / b5 * 1e-9, b2 / b5);
        free(w), free(xq), free(tmp), free(o2), free(o5);
    }
}

int main(void)
{
    if (!weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512)) SKIP_ALL("no AVX-512 table on this CPU");
    RUN(avx512bw_dot4_matches_scalar_dot_bit_for_bit);
    RUN(avx512vnni_dot4_matches_too);
    RUN(timing_avx2_vs_avx512_dot4);
    return check_summary();
}
