/* K-quant CPU kernels (backends/cpu/kquant/kq_dot_avx2.c, kq_low_avx2.c and whatever a
 * table takes from them): every table this machine supports must give bit-identical
 * results to the portable reference in backends/cpu/cpu_ref_dot.c for the Q2_K .. Q6_K and
 * IQ4_XS dot products (table->dot vs weft_vec_dot), IQ4_NL and MXFP4 against Q8_0 (and
 * IQ4_NL's multi-row dot_mm vs weft_vec_dot_mm), and the Q8_K activation
 * quantizer (table->quant vs weft_quantize_row_act). Also times the AVX2 and
 * scalar dots on a 576 x 1536 matrix (printed, not asserted). */
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- deterministic random numbers (splitmix64) ---- */

static uint64_t rng_state = 0x6b7175616e74ull;

static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)rng_unit(); }

static float rng_normal(void)
{
    double u1 = rng_unit(), u2 = rng_unit();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void fill_bytes(void *p, size_t n)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rng_u64();
}

/* activations: normal with a random scale per row, an occasional outlier of
 * either sign, and sometimes a block of exact zeros */
static void fill_act(float *x, int64_t n)
{
    float scale = expf(rng_uniform(-6.0f, 6.0f));
    for (int64_t i = 0; i < n; i++) {
        x[i] = scale * rng_normal();
        if (rng_u64() % 61 == 0) x[i] *= 20.0f;
    }
    if (n > WEFT_QK_K && rng_u64() % 4 == 0) {
        int64_t b = (int64_t)(rng_u64() % (uint64_t)(n / WEFT_QK_K));
        memset(x + b * WEFT_QK_K, 0, WEFT_QK_K * sizeof(float));
    }
}

/* a block's scale fields: small positive half d (and dmin); MXFP4 an exponent near 2^-6 */
static void set_scales(enum weft_type t, uint8_t *blk, weft_half d, weft_half dmin)
{
    switch (t) {
    case WEFT_TYPE_Q4_K: ((struct weft_block_q4_k *)blk)->d = d, ((struct weft_block_q4_k *)blk)->dmin = dmin; break;
    case WEFT_TYPE_Q5_K: ((struct weft_block_q5_k *)blk)->d = d, ((struct weft_block_q5_k *)blk)->dmin = dmin; break;
    case WEFT_TYPE_Q6_K: ((struct weft_block_q6_k *)blk)->d = d; break;
    case WEFT_TYPE_Q2_K: ((struct weft_block_q2_k *)blk)->d = d, ((struct weft_block_q2_k *)blk)->dmin = dmin; break;
    case WEFT_TYPE_Q3_K: ((struct weft_block_q3_k *)blk)->d = d; break;
    case WEFT_TYPE_IQ4_XS: ((struct weft_block_iq4_xs *)blk)->d = d; break;
    case WEFT_TYPE_IQ4_NL: ((struct weft_block_iq4_nl *)blk)->d = d; break;
    case WEFT_TYPE_MXFP4: blk[0] = (uint8_t)(118 + rng_u64() % 8); break;
    default: break;
    }
}

/* random bytes for qs/qh/scales, then set_scales */
static void fill_weights(enum weft_type t, void *w, int64_t n)
{
    const struct weft_type_info *ti = weft_type_get(t);
    int64_t nb = n / ti->block_size;
    fill_bytes(w, weft_row_size(t, n));
    for (int64_t i = 0; i < nb; i++) {
        weft_half d = weft_f32_to_half(rng_uniform(1e-4f, 0.05f));
        weft_half dmin = weft_f32_to_half(rng_uniform(1e-4f, 0.05f));
        set_scales(t, (uint8_t *)w + i * ti->type_size, d, dmin);
    }
}

static const enum weft_type k_types[] = {WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K,
                                         WEFT_TYPE_Q2_K, WEFT_TYPE_Q3_K, WEFT_TYPE_IQ4_XS};
static const int64_t sizes[] = {256, 512, 256 * 3, 256 * 7, 256 * 17};
#define MAX_N (256 * 17)
#define TRIALS 40

static int tables_checked;
static long dot_combos, quant_combos;

static void check_quant_row(const struct weft_cpu_kernels *t, const float *x, int64_t n, const char *what)
{
    static struct weft_block_q8_k ref[MAX_N / WEFT_QK_K], got[MAX_N / WEFT_QK_K];
    size_t bytes = weft_row_size(WEFT_TYPE_Q8_K, n);
    memset(ref, 0xA5, bytes);
    memset(got, 0x5A, bytes);
    weft_quantize_row_act(WEFT_TYPE_Q8_K, x, ref, n);
    t->quant[WEFT_TYPE_Q8_K](x, got, n);
    CHECK_MSG(memcmp(ref, got, bytes) == 0, "%s: Q8_K quant differs (%s, n=%lld)", t->name, what, (long long)n);
    quant_combos++;
}

static void for_each_table(void (*fn)(const struct weft_cpu_kernels *))
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *t = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (t) fn(t);
    }
}

/* ---- dot products ---- */

static void dots_of_table(const struct weft_cpu_kernels *t)
{
    static uint8_t w[MAX_N / WEFT_QK_K * 210];
    static struct weft_block_q8_k xq[MAX_N / WEFT_QK_K];
    static float x[MAX_N];
    tables_checked++;
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        enum weft_type type = k_types[ti];
        int bad = 0;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int64_t n = sizes[si];
            for (int trial = 0; trial < TRIALS; trial++) {
                fill_weights(type, w, n);
                fill_act(x, n);
                weft_quantize_row_act(WEFT_TYPE_Q8_K, x, xq, n);
                float ref = weft_vec_dot(type, w, xq, n);
                float got = t->dot[type](w, xq, n);
                dot_combos++;
                if (memcmp(&ref, &got, sizeof ref) != 0 && bad++ < 5)
                    fprintf(stderr, "%s %s n=%lld trial %d: %.9g (ref) vs %.9g\n", t->name,
                            weft_type_get(type)->name, (long long)n, trial, ref, got);
            }
        }
        CHECK_MSG(bad == 0, "%s: %d %s dots differ from the reference", t->name, bad, weft_type_get(type)->name);
    }
}

static void k_quant_dots_match_the_reference_bit_for_bit(void) { for_each_table(dots_of_table); }

/* extreme weights: all-max nibbles/bits, Q6_K scales -128 and 127, zero d,
 * against activations with +-127 everywhere */
static void extreme_dots_of_table(const struct weft_cpu_kernels *t)
{
    static uint8_t w[4 * 210];
    static struct weft_block_q8_k xq[4];
    float x[4 * WEFT_QK_K];
    const int64_t n = 4 * WEFT_QK_K;
    for (int pat = 0; pat < 6; pat++) {
        for (int64_t i = 0; i < n; i++) {
            switch (pat % 3) {
            case 0: x[i] = (i & 1) ? -1.0f : 1.0f; break;
            case 1: x[i] = -1.0f; break;
            default: x[i] = 1.0f; break;
            }
        }
        memset(x + 2 * WEFT_QK_K, 0, WEFT_QK_K * sizeof(float)); /* one zero block */
        weft_quantize_row_act(WEFT_TYPE_Q8_K, x, xq, n);
        for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
            enum weft_type type = k_types[ti];
            memset(w, pat < 3 ? 0xFF : 0x80, weft_row_size(type, n));
            for (int64_t b = 0; b < 4; b++) {
                weft_half d = weft_f32_to_half(b == 1 ? 0.0f : 0.03125f);
                set_scales(type, w + b * weft_type_get(type)->type_size, d, d);
            }
            float ref = weft_vec_dot(type, w, xq, n), got = t->dot[type](w, xq, n);
            dot_combos++;
            CHECK_MSG(memcmp(&ref, &got, sizeof ref) == 0, "%s %s pattern %d: %.9g (ref) vs %.9g", t->name,
                      weft_type_get(type)->name, pat, ref, got);
        }
    }
}

static void extreme_k_quant_dots_match_the_reference(void) { for_each_table(extreme_dots_of_table); }

/* ---- IQ4_NL and MXFP4 against Q8_0 (odd block counts take the scalar tail); IQ4_NL's
 * multi-row form (dot_mm) too ---- */

static void nl_dots_of_table(const struct weft_cpu_kernels *t)
{
    static const enum weft_type types[] = {WEFT_TYPE_IQ4_NL, WEFT_TYPE_MXFP4};
    static const int64_t ns[] = {32, 64, 96, 256, 32 * 9, 32 * 37};
    static uint8_t w[32 * 37 / 32 * 18];
    static struct weft_block_q8_0 xq[37];
    static float x[32 * 37];
    for (size_t ti = 0; ti < 2; ti++) {
        enum weft_type type = types[ti];
        int bad = 0;
        for (size_t si = 0; si < sizeof ns / sizeof ns[0]; si++)
            for (int trial = 0; trial < TRIALS; trial++) {
                int64_t n = ns[si];
                fill_weights(type, w, n);
                fill_act(x, n);
                weft_quantize_row_act(WEFT_TYPE_Q8_0, x, xq, n);
                float ref = weft_vec_dot(type, w, xq, n), got = t->dot[type](w, xq, n);
                bad += memcmp(&ref, &got, sizeof ref) != 0;
                if (t->dot_mm[type]) {
                    ref = weft_vec_dot_mm(type, w, xq, n, 4, 2);
                    got = t->dot_mm[type](w, xq, n);
                    bad += memcmp(&ref, &got, sizeof ref) != 0;
                }
                dot_combos++;
            }
        CHECK_MSG(bad == 0, "%s: %d %s dots differ from the reference", t->name, bad, weft_type_get(type)->name);
    }
}

static void nl_dots_match_the_reference_bit_for_bit(void) { for_each_table(nl_dots_of_table); }

/* ---- Q8_K quantizer ---- */

static void random_quant_of_table(const struct weft_cpu_kernels *t)
{
    static float x[MAX_N];
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int trial = 0; trial < TRIALS; trial++) {
            fill_act(x, sizes[si]);
            check_quant_row(t, x, sizes[si], "random");
        }
}

static void q8_k_quant_of_random_rows_matches_the_reference(void) { for_each_table(random_quant_of_table); }

static void edge_quant_of_table(const struct weft_cpu_kernels *t)
{
    float x[WEFT_QK_K];
    /* all zero, and all negative zero */
    memset(x, 0, sizeof x);
    check_quant_row(t, x, WEFT_QK_K, "all zero");
    for (int j = 0; j < WEFT_QK_K; j++) x[j] = -0.0f;
    check_quant_row(t, x, WEFT_QK_K, "all -0");
    /* ties at .5: max -127 gives iscale 1 exactly, max 127 gives -1 */
    for (int sign = -1; sign <= 1; sign += 2) {
        for (int j = 0; j < WEFT_QK_K; j++) x[j] = (float)((j % 254) - 127) + 0.5f;
        x[0] = (float)(127 * -sign);
        x[77] = 0.0f;
        for (int j = 1; j < WEFT_QK_K; j++)
            if (x[j] >= 127.0f || x[j] <= -127.0f) x[j] = 126.5f * (float)sign;
        check_quant_row(t, x, WEFT_QK_K, sign < 0 ? "ties, max +127" : "ties, max -127");
    }
    /* largest magnitude both positive and negative: the first one wins */
    for (int order = 0; order < 2; order++) {
        for (int j = 0; j < WEFT_QK_K; j++) x[j] = rng_uniform(-2.9f, 2.9f);
        x[40] = order ? -3.0f : 3.0f;
        x[200] = order ? 3.0f : -3.0f;
        check_quant_row(t, x, WEFT_QK_K, order ? "-max first" : "+max first");
        x[40] = order ? -3.0f : 3.0f;
        x[41] = -x[40];
        x[200] = x[40];
        check_quant_row(t, x, WEFT_QK_K, "adjacent +-max");
    }
    /* the max in the last element; a single nonzero value; tiny values */
    for (int j = 0; j < WEFT_QK_K; j++) x[j] = rng_uniform(-1.0f, 1.0f);
    x[WEFT_QK_K - 1] = -1.5f;
    check_quant_row(t, x, WEFT_QK_K, "max last");
    memset(x, 0, sizeof x);
    x[123] = 0.25f;
    check_quant_row(t, x, WEFT_QK_K, "one nonzero");
    for (int j = 0; j < WEFT_QK_K; j++) x[j] = rng_uniform(-1e-30f, 1e-30f);
    check_quant_row(t, x, WEFT_QK_K, "tiny");
    /* every value rounding near a .5 boundary for a non-trivial iscale */
    for (int j = 0; j < WEFT_QK_K; j++) x[j] = ((float)(j - 128) + 0.5f) / 127.0f * 3.0f;
    x[5] = 3.0f;
    check_quant_row(t, x, WEFT_QK_K, "near ties");
    /* rows of several blocks with zero blocks in between */
    static float y[4 * WEFT_QK_K];
    for (int j = 0; j < 4 * WEFT_QK_K; j++) y[j] = rng_normal();
    memset(y + WEFT_QK_K, 0, WEFT_QK_K * sizeof(float));
    check_quant_row(t, y, 4 * WEFT_QK_K, "zero second block");
}

static void q8_k_quant_edge_cases_match_the_reference(void) { for_each_table(edge_quant_of_table); }

/* ---- timing (printed only) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double time_matvec(weft_cpu_dot_fn dot, const uint8_t *w, size_t row_bytes, int rows, const void *xq,
                          int64_t k, float *out)
{
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_s();
        for (int r = 0; r < rows; r++) out[r] = dot(w + (size_t)r * row_bytes, xq, k);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static void timing_avx2_vs_scalar(void)
{
    const struct weft_cpu_kernels *sc = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    const struct weft_cpu_kernels *av = weft_cpu_kernels_get(WEFT_CPU_ISA_AVX2);
    if (!av) { printf("timing: no AVX2 table on this machine\n"); return; }
    enum { ROWS = 576, K = 1536 };
    static float x[K], o1[ROWS], o2[ROWS];
    static struct weft_block_q8_k xq[K / WEFT_QK_K];
    fill_act(x, K);
    weft_quantize_row_act(WEFT_TYPE_Q8_K, x, xq, K);
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        enum weft_type type = k_types[ti];
        size_t rb = weft_row_size(type, K);
        uint8_t *w = malloc(rb * ROWS);
        CHECK(w != NULL);
        if (!w) return;
        for (int r = 0; r < ROWS; r++) fill_weights(type, w + r * rb, K);
        double ts = time_matvec(sc->dot[type], w, rb, ROWS, xq, K, o1);
        double ta = time_matvec(av->dot[type], w, rb, ROWS, xq, K, o2);
        CHECK(memcmp(o1, o2, sizeof o1) == 0);
        printf("timing %s dot %dx%d: scalar %.3f ms, avx2 %.3f ms, speedup %.1fx\n", weft_type_get(type)->name,
               ROWS, K, ts * 1e3, ta * 1e3, ts / ta);
        free(w);
    }
    static float big[ROWS * K];
    static struct weft_block_q8_k q1[ROWS * K / WEFT_QK_K];
    for (int i = 0; i < ROWS * K; i++) big[i] = rng_normal();
    double t0 = now_s();
    for (int r = 0; r < ROWS; r++) sc->quant[WEFT_TYPE_Q8_K](big + (size_t)r * K, q1 + r * (K / WEFT_QK_K), K);
    double ts = now_s() - t0;
    t0 = now_s();
    for (int r = 0; r < ROWS; r++) av->quant[WEFT_TYPE_Q8_K](big + (size_t)r * K, q1 + r * (K / WEFT_QK_K), K);
    double ta = now_s() - t0;
    printf("timing Q8_K quant %dx%d: scalar %.3f ms, avx2 %.3f ms, speedup %.1fx\n", ROWS, K, ts * 1e3, ta * 1e3,
           ts / ta);
}

int main(void)
{
    RUN(k_quant_dots_match_the_reference_bit_for_bit);
    RUN(nl_dots_match_the_reference_bit_for_bit);
    RUN(extreme_k_quant_dots_match_the_reference);
    RUN(q8_k_quant_of_random_rows_matches_the_reference);
    RUN(q8_k_quant_edge_cases_match_the_reference);
    RUN(timing_avx2_vs_scalar);
    printf("checked %d tables: %ld dot combinations, %ld Q8_K quant rows\n", tables_checked, dot_combos,
           quant_combos);
    return check_summary();
}
