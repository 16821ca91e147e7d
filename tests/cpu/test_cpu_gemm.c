/* The register-blocked prefill tiles (gemm[] of every CPU kernel table this
 * machine can run) against the same table's one-row dot[], bit for bit:
 *   out[j * ldo + i] == dot(w + i * wstride, x + j * xstride, n)
 * over edge shapes (nw 1..16, nx 1..64), several row lengths, contiguous and
 * padded strides, ldo > nw. (bench_cpu_kernels gemm times gemm against
 * per-output dot.)
 * The gemm_mm entries (F16/F32/BF16) likewise against dot_mm[], with row
 * lengths a multiple of mm_k_multiple. Each level's own forms: the avx2 and
 * avx512 tables have the plain AVX2 Q8_0 tiles, the avx512vnni table the zmm
 * VNNI ones. */
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "tests/check.h"
#define TEST_RNG_SEED 0x5eedfacecafe0001ull
#include "tests/test_rand.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void fill_data(float *x, int64_t n)
{
    float scale = (float)(0.05 + 3.0 * rng_unit());
    for (int64_t i = 0; i < n; i++) {
        float v = rng_normal() * scale;
        if ((i / 32) % 5 == 1) v += scale;                  /* shifted block */
        if (rng_u64() % 97 == 0) v *= 20.0f;                /* outlier */
        x[i] = v;
    }
}

static const enum weft_type types[] = {WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_0,
                                       WEFT_TYPE_Q5_1, WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K,
                                       WEFT_TYPE_IQ4_NL, WEFT_TYPE_MXFP4, WEFT_TYPE_IQ4_XS, WEFT_TYPE_Q2_K, WEFT_TYPE_Q3_K,
                                       WEFT_TYPE_F16, WEFT_TYPE_F32, WEFT_TYPE_BF16};

static long n_compared, n_tables_types;

static bool type_fits(enum weft_type t, int64_t n)
{
    bool k = t == WEFT_TYPE_Q4_K || t == WEFT_TYPE_Q5_K || t == WEFT_TYPE_Q6_K || t == WEFT_TYPE_IQ4_XS ||
             t == WEFT_TYPE_Q2_K || t == WEFT_TYPE_Q3_K;
    return n % (k ? 256 : 32) == 0;
}

/* a weight row of type t from f (the K-quants have no quantizer: random
 * qs/scales bytes with small positive d, dmin) */
static bool weight_row(enum weft_type t, const float *f, uint8_t *dst, int64_t n)
{
    if (t != WEFT_TYPE_Q4_K) return weft_quantize_row(t, f, dst, n);
    for (size_t i = 0; i < weft_row_size(t, n); i++) dst[i] = (uint8_t)rng_u64();
    for (int64_t b = 0; b < n / 256; b++) {
        struct weft_block_q4_k *k = (struct weft_block_q4_k *)dst + b;
        k->d = weft_f32_to_half((float)(1e-4 + 0.05 * rng_unit()));
        k->dmin = weft_f32_to_half((float)(1e-4 + 0.05 * rng_unit()));
    }
    return true;
}

/* one (table, type, n, strides) case over all nw x nx shapes */
static void check_shapes(const struct weft_cpu_kernels *k, enum weft_type t, int64_t n, size_t wpad, size_t xpad,
                         bool mm)
{
    const weft_cpu_gemm_fn gemm = mm ? k->gemm_mm[t] : k->gemm[t];
    const weft_cpu_dot_fn dot = mm ? k->dot_mm[t] : k->dot[t];
    enum weft_type vt = weft_vec_dot_type(t);
    const int NW = 16, NX = 64;
    size_t wrow = weft_row_size(t, n), xrow = weft_row_size(vt, n);
    size_t ws = wrow + wpad, xs = xrow + xpad;
    if (vt == WEFT_TYPE_Q8_K) xs = (xs + 3) & ~(size_t)3;  /* its float d needs 4-byte rows (as the backend's scratch gives) */
    uint8_t *w = calloc((size_t)NW, ws), *x = calloc((size_t)NX, xs);
    float *f = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < NW; i++) {
        fill_data(f, n);
        CHECK(weight_row(t, f, w + (size_t)i * ws, n));
    }
    for (int j = 0; j < NX; j++) {
        fill_data(f, n);
        CHECK(weft_quantize_row_act(vt, f, x + (size_t)j * xs, n));
    }
    static const int nws[] = {1, 2, 3, 4, 5, 6, 16}, nxs[] = {1, 2, 3, 7, 8, 64};
    const size_t ldo = 19;
    float *out = malloc(sizeof(float) * ldo * NX);
    for (size_t a = 0; a < sizeof nws / sizeof *nws; a++) {
        for (size_t b = 0; b < sizeof nxs / sizeof *nxs; b++) {
            int nw = nws[a], nx = nxs[b];
            for (size_t q = 0; q < ldo * NX; q++) out[q] = -12345.0f;
            gemm(w, ws, nw, x, xs, nx, n, out, ldo);
            int bad = 0;
            for (int j = 0; j < nx; j++) {
                for (int i = 0; i < (int)ldo; i++) {
                    float got = out[j * ldo + i];
                    if (i >= nw) {
                        if (got != -12345.0f) bad++; /* must not write past nw */
                        continue;
                    }
                    float want = dot(w + (size_t)i * ws, x + (size_t)j * xs, n);
                    n_compared++;
                    if (memcmp(&got, &want, sizeof got) != 0) {
                        if (bad < 3)
                            fprintf(stderr, "%s %s n=%lld nw=%d nx=%d (%d,%d): %.9g vs dot %.9g\n", k->name,
                                    weft_type_name(t), (long long)n, nw, nx, i, j, got, want);
                        bad++;
                    }
                }
            }
            for (size_t q = (size_t)nx * ldo; q < ldo * NX; q++) if (out[q] != -12345.0f) bad++;
            CHECK_MSG(bad == 0, "%s %s n=%lld nw=%d nx=%d: %d mismatches", k->name, weft_type_name(t),
                      (long long)n, nw, nx, bad);
        }
    }
    free(out);
    free(f);
    free(w);
    free(x);
}

static void gemm_matches_dot_bit_for_bit(void)
{
    static const int64_t ns[] = {32, 96, 256, 576, 1536};
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            enum weft_type t = types[ti];
            for (int mm = 0; mm < 2; mm++) {
                if (!(mm ? k->gemm_mm[t] : k->gemm[t])) continue;
                n_tables_types++;
                long before = n_compared;
                for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                    if (!type_fits(t, ns[ni]) || (mm && ns[ni] % k->mm_k_multiple[t])) continue;
                    check_shapes(k, t, ns[ni], 0, 0, mm);
                    check_shapes(k, t, ns[ni], 14, 6, mm);  /* padded, keeping blocks' 2-byte alignment */
                    if (mm) check_shapes(k, t, ns[ni] + k->mm_k_multiple[t], 64, 0, mm); /* odd chunk counts */
                }
                /* long rows: the AVX-512 Q5_0 tiles lay out fewer activation
                 * rows per chunk (4096), or none and fall back (8224); the
                 * AVX2 one rewrites rows of up to 512 blocks as Q8_0 (16384)
                 * and takes its direct tile past that (16416) */
                if (!mm && t == WEFT_TYPE_Q5_0) {
                    check_shapes(k, t, 4096, 0, 0, mm);
                    check_shapes(k, t, 8224, 22, 0, mm);
                    check_shapes(k, t, 32 * 512, 0, 0, mm);
                    check_shapes(k, t, 32 * 513, 0, 0, mm);
                }
                if (!mm && t == WEFT_TYPE_Q4_K) { /* one row pair per chunk; none (fallback) */
                    check_shapes(k, t, 256 * 25, 0, 0, mm);
                    check_shapes(k, t, 256 * 77, 0, 0, mm);
                }
                printf("  %-6s %-5s %s: %ld outputs compared with %s\n", k->name, weft_type_name(t),
                       mm ? "gemm_mm" : "gemm", n_compared - before, mm ? "dot_mm" : "dot");
            }
        }
    }
    printf("  %ld table/type gemm entries, %ld outputs compared\n", n_tables_types, n_compared);
}

int main(void)
{
    RUN(gemm_matches_dot_bit_for_bit);
    return check_summary();
}
