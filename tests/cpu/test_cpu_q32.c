/* The 32-element block kernels of every CPU kernel table this machine can run
 * (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 dot products, Q8_0/Q8_1 activation quantizers)
 * against the portable reference in backends/cpu/cpu_ref_dot.c, bit for bit: the dot
 * results are compared as float bit patterns, the quantizer outputs byte by
 * byte. Also times the AVX2 dot against the scalar one (printed, not
 * asserted). */
#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"
#define TEST_RNG_SEED 0x0ddba11c0ffee001ull
#include "tests/test_rand.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* a random finite half (normals, subnormals, zeros of both signs) */
static weft_half rng_half(void)
{
    for (;;) {
        weft_half h = (weft_half)rng_u64();
        if (((h >> 10) & 0x1f) != 0x1f) return h;
    }
}

static const enum weft_type q_types[] = {WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1,
                                         WEFT_TYPE_Q8_0};
#define N_QTYPES (int)(sizeof q_types / sizeof q_types[0])
static const int64_t sizes[] = {32, 64, 96, 32 * 7, 32 * 37, 32 * 101, 4096 + 32};
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])
#define MAX_N (4096 + 32)

static long n_dot_checked, n_quant_checked;

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static const struct weft_cpu_kernels *table(int isa) { return weft_cpu_kernels_get((enum weft_cpu_isa)isa); }

/* Quantize x both ways and compare the bytes; leaves the reference in ref. */
static bool quant_matches(const struct weft_cpu_kernels *k, enum weft_type vdt, const float *x, int64_t n,
                          uint8_t *ref, const char *what)
{
    static uint8_t got[MAX_N * 2];
    size_t bytes = weft_row_size(vdt, n);
    weft_quantize_row_act(vdt, x, ref, n);
    memset(got, 0xA5, bytes);
    k->quant[vdt](x, got, n);
    n_quant_checked++;
    bool ok = memcmp(ref, got, bytes) == 0;
    CHECK_MSG(ok, "%s quant %s n=%lld (%s)", k->name, weft_type_name(vdt), (long long)n, what);
    return ok;
}

static bool dot_matches(const struct weft_cpu_kernels *k, enum weft_type t, const void *w, const void *xq,
                        int64_t n, const char *what)
{
    float ref = weft_vec_dot(t, w, xq, n), got = k->dot[t](w, xq, n);
    n_dot_checked++;
    bool ok = same_float(ref, got);
    CHECK_MSG(ok, "%s dot %s n=%lld (%s): %.9g vs ref %.9g", k->name, weft_type_name(t), (long long)n, what,
              (double)got, (double)ref);
    return ok;
}

/* ---- cases ---- */

static void every_table_has_the_q_entries(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = table(isa);
        if (!k) continue;
        for (int t = 0; t < N_QTYPES; t++) CHECK(k->dot[q_types[t]] != NULL);
        CHECK(k->quant[WEFT_TYPE_Q8_0] != NULL && k->quant[WEFT_TYPE_Q8_1] != NULL);
    }
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
    /* the AVX2 table really has its own kernels (not the scalar fallback) */
    const struct weft_cpu_kernels *s = table(WEFT_CPU_ISA_SCALAR), *a = table(WEFT_CPU_ISA_AVX2);
    if (a) {
        for (int t = 0; t < N_QTYPES; t++) CHECK(a->dot[q_types[t]] != s->dot[q_types[t]]);
        CHECK(a->quant[WEFT_TYPE_Q8_0] != s->quant[WEFT_TYPE_Q8_0]);
        CHECK(a->quant[WEFT_TYPE_Q8_1] != s->quant[WEFT_TYPE_Q8_1]);
    }
#endif
}

/* Random weights quantized by weft_quantize_row, random activations with
 * outliers: the table quantizer must match the reference, and the table dot
 * (on the reference activations) must match weft_vec_dot. */
static void dot_and_quant_match_reference_on_random_rows(void)
{
    static float wf[MAX_N], xf[MAX_N];
    static uint8_t wq[MAX_N * 2], xq[MAX_N * 2];
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = table(isa);
        if (!k) continue;
        for (int t = 0; t < N_QTYPES; t++) {
            enum weft_type wt = q_types[t], vdt = weft_vec_dot_type(wt);
            for (int s = 0; s < N_SIZES; s++) {
                int64_t n = sizes[s];
                for (int trial = 0; trial < 6; trial++) {
                    fill_activations(wf, n);
                    fill_activations(xf, n);
                    CHECK(weft_quantize_row(wt, wf, wq, n));
                    if (!quant_matches(k, vdt, xf, n, xq, "random")) continue;
                    dot_matches(k, wt, wq, xq, n, "random");
                }
            }
        }
    }
}

/* Random block bytes, not only what the quantizers write: every nibble and
 * high-bit pattern, Q8_0 weights down to -128, and f16 scales/mins/sums over
 * the whole finite range (subnormals, both zeros). Activation bytes stay in
 * [-127, 127], the quantizers' range. */
/* One weight row and one activation row of random block bytes. mode 0:
 * anything; mode 1: extremes (activations +-127 alternating, Q8_0 weights
 * all -128); mode 2: large block sums with many significant bits and scales
 * of one magnitude, so that every block shows in the total (Q4_0: values -8/-7
 * times activations -100..-127, where the scalar (sum * dw) * dx rounds
 * twice). */
static void random_block_rows(enum weft_type wt, int64_t n, int mode, uint8_t *wq, uint8_t *xq)
{
    enum weft_type vdt = weft_vec_dot_type(wt);
    int64_t nb = n / 32;
    size_t wbytes = weft_row_size(wt, n), wblk = wbytes / (size_t)nb;
    for (size_t b = 0; b < wbytes; b++) wq[b] = (uint8_t)rng_u64();
    /* d (and m) are the first halves of every weight block */
    int nh = (wt == WEFT_TYPE_Q4_1 || wt == WEFT_TYPE_Q5_1) ? 2 : 1;
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < nh; j++) {
            weft_half hv = mode == 2 ? weft_f32_to_half((float)(0.5 + rng_unit())) : rng_half();
            memcpy(wq + (size_t)i * wblk + 2 * j, &hv, 2);
        }
    size_t xblk = weft_row_size(vdt, 32), xh = vdt == WEFT_TYPE_Q8_1 ? 2 : 1;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = xq + (size_t)i * xblk;
        for (size_t j = 0; j < xh; j++) {
            weft_half hv = mode == 2 ? weft_f32_to_half((float)(0.5 + rng_unit())) : rng_half();
            memcpy(blk + 2 * j, &hv, 2);
        }
        int8_t *q = (int8_t *)(blk + 2 * xh);
        for (int j = 0; j < 32; j++) {
            if (mode == 1) q[j] = (j & 1) ? 127 : -127;
            else if (mode == 2) q[j] = (int8_t)(-100 - (int)(rng_u64() % 28));
            else q[j] = (int8_t)((int)(rng_u64() % 255) - 127);
        }
        if (mode == 1 && wt == WEFT_TYPE_Q8_0) memset(wq + (size_t)i * wblk + 2, 0x80, 32);
        if (mode == 2 && wt == WEFT_TYPE_Q4_0)
            for (int j = 0; j < 16; j++) wq[(size_t)i * wblk + 2 + j] = (uint8_t)(rng_u64() & 0x11);
    }
}

/* Random block bytes, not only what the quantizers write: every nibble and
 * high-bit pattern, Q8_0 weights down to -128, and f16 scales/mins/sums over
 * the whole finite range (subnormals, both zeros). Activation bytes stay in
 * [-127, 127], the quantizers' range. */
static void dot_matches_reference_on_random_block_bytes(void)
{
    static uint8_t wq[MAX_N * 2], xq[MAX_N * 2];
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = table(isa);
        if (!k) continue;
        for (int t = 0; t < N_QTYPES; t++)
            for (int s = 0; s < N_SIZES; s++)
                for (int trial = 0; trial < 6; trial++) {
                    random_block_rows(q_types[t], sizes[s], trial < 3 ? trial : 0, wq, xq);
                    dot_matches(k, q_types[t], wq, xq, sizes[s], "random bytes");
                }
    }
}

/* Rows of 1 to 5 blocks, where a last-bit difference in one block's float
 * steps cannot hide in a long sum: covers the Q4_0 four-block and tail
 * paths and the per-block scale order of every kernel. */
static void dot_matches_reference_on_short_rows(void)
{
    uint8_t wq[5 * 36], xq[5 * 36];
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = table(isa);
        if (!k) continue;
        for (int t = 0; t < N_QTYPES; t++)
            for (int r = 0; r < 1500; r++) {
                int64_t n = 32 * (1 + r % 5);
                random_block_rows(q_types[t], n, r % 3 == 0 ? 0 : 2, wq, xq);
                if (!dot_matches(k, q_types[t], wq, xq, n, "short rows")) break;
            }
    }
}

/* Hand-made activation rows: all-zero blocks, negative zeros, ties for the
 * absolute maximum (+a and -a, repeated), values landing exactly on .5 after
 * scaling (amax 127 * 2^e makes 127/amax exact) or within an ulp of it
 * (any amax), tiny values whose f16 scale is zero, and huge values whose f16
 * scale overflows. */
enum { EDGE_ZERO, EDGE_NEGZERO, EDGE_TIES, EDGE_HALVES, EDGE_NEAR_HALVES, EDGE_TINY, EDGE_HUGE, EDGE_ONEHOT,
       EDGE_COUNT };

static void fill_edge(float *x, int64_t n, int kind)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t b = i / 32, j = i % 32;
        float v = 0.0f;
        switch (kind) {
        case EDGE_ZERO: v = (b % 2) ? rng_normal() : 0.0f; break; /* zero blocks among normal ones */
        case EDGE_NEGZERO: v = (b % 2) ? -0.0f : ((j % 3) ? -0.0f : 0.0f); break;
        case EDGE_TIES: {
            float a = 3.0f + (float)b;
            v = (j % 5 == 0) ? ((j & 1) ? -a : a) : (float)(rng_unit() * 2.0 - 1.0) * a;
            break;
        }
        case EDGE_HALVES: {
            float sc = (float)ldexp(1.0, (int)(b % 9) - 4);  /* amax = 127 * sc, id = 1/sc exactly */
            if (j == 0) v = 127.0f * sc;
            else if (j == 1) v = -127.0f * sc;
            else v = ((float)((int)(rng_u64() % 253) - 126) + 0.5f) * sc; /* k + 0.5 after scaling */
            break;
        }
        case EDGE_NEAR_HALVES: {
            /* any amax: x = (k + 0.5) / id, nudged by -1, 0 or +1 ulp, so x * id
             * lands on or next to a tie; catches any other id = 127/amax
             * (e.g. 1/(amax/127)) or another tie rule */
            static float amax, id;
            if (j == 0) {
                amax = (float)(0.01 + 10.0 * rng_unit()) * (float)ldexp(1.0, (int)(b % 7) - 3);
                id = 127.0f / amax;
                v = (b & 1) ? -amax : amax;
            }
            else {
                v = ((float)((int)(rng_u64() % 253) - 126) + 0.5f) / id;
                int nudge = (int)(rng_u64() % 3) - 1;
                if (nudge) v = nextafterf(v, nudge > 0 ? INFINITY : -INFINITY);
            }
            break;
        }
        /* tiny amax (d rounds to a zero f16); kept above 127/FLT_MAX, below
         * which 127/amax is inf and the reference's int8 cast of inf*x is
         * undefined behaviour (clang's UBSan traps on it) */
        case EDGE_TINY: v = (float)ldexp(rng_normal(), -100 - (int)(b % 16)); break;
        case EDGE_HUGE: v = rng_normal() * 1e37f; break;
        case EDGE_ONEHOT: v = (j == (b % 32)) ? ((b & 1) ? -1.5f : 2.25f) : 0.0f; break;
        }
        x[i] = v;
    }
}

static void quant_and_dot_match_reference_on_edge_rows(void)
{
    static float wf[MAX_N], xf[MAX_N];
    static uint8_t wq[MAX_N * 2], xq[MAX_N * 2];
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = table(isa);
        if (!k) continue;
        for (int kind = 0; kind < EDGE_COUNT; kind++) {
            for (int s = 0; s < N_SIZES; s++) {
                int64_t n = sizes[s];
                fill_edge(xf, n, kind);
                for (int t = 0; t < N_QTYPES; t++) {
                    enum weft_type wt = q_types[t], vdt = weft_vec_dot_type(wt);
                    if (!quant_matches(k, vdt, xf, n, xq, "edge")) continue;
                    /* weights: random, and the same edge pattern (zero blocks etc.) */
                    fill_activations(wf, n);
                    CHECK(weft_quantize_row(wt, wf, wq, n));
                    dot_matches(k, wt, wq, xq, n, "edge x");
                    if (kind == EDGE_TINY || kind == EDGE_HUGE) continue; /* file quantizers: finite d only */
                    fill_edge(wf, n, kind);
                    CHECK(weft_quantize_row(wt, wf, wq, n));
                    dot_matches(k, wt, wq, xq, n, "edge w, edge x");
                }
            }
        }
    }
}

/* Exact ties: with amax = 127 the inverse scale is exactly 1, so k + 0.5
 * inputs must round half to even, in both tables. Spot-checks the values. */
static void quant_rounds_exact_halves_to_even(void)
{
    float x[32];
    x[0] = 127.0f;
    for (int j = 1; j < 32; j++) x[j] = (float)(j - 16) + 0.5f; /* -14.5 .. 15.5 */
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = table(isa);
        if (!k) continue;
        struct weft_block_q8_0 b;
        k->quant[WEFT_TYPE_Q8_0](x, &b, 32);
        CHECK_EQ_INT(b.qs[0], 127);
        for (int j = 1; j < 32; j++) {
            int lo = (int)floorf(x[j]), want = (lo % 2 == 0) ? lo : lo + 1;
            CHECK_EQ_INT(b.qs[j], want);
        }
        uint8_t ref[sizeof b];
        quant_matches(k, WEFT_TYPE_Q8_0, x, 32, ref, "halves");
        struct weft_block_q8_1 b1;
        uint8_t ref1[sizeof b1];
        quant_matches(k, WEFT_TYPE_Q8_1, x, 32, ref1, "halves");
    }
}

/* ---- timing (printed, not asserted) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double time_matvec(const struct weft_cpu_kernels *k, enum weft_type wt, const uint8_t *w, const void *xq,
                          int64_t rows, int64_t K, int reps, float *sink)
{
    size_t rs = weft_row_size(wt, K);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        float acc = 0;
        for (int64_t i = 0; i < rows; i++) acc += k->dot[wt](w + (size_t)i * rs, xq, K);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        *sink += acc;
    }
    return best;
}

static void avx2_dot_speed_on_576x1536(void)
{
    const struct weft_cpu_kernels *s = table(WEFT_CPU_ISA_SCALAR), *a = table(WEFT_CPU_ISA_AVX2);
    if (!a) { printf("  (no AVX2 table on this machine: no timing)\n"); return; }
    const int64_t K = 576, rows = 1536;
    static const enum weft_type tt[] = {WEFT_TYPE_Q4_1, WEFT_TYPE_Q8_0};
    float *wf = malloc(sizeof(float) * (size_t)(K * rows)), xf[576];
    float sink = 0;
    for (int t = 0; t < 2; t++) {
        enum weft_type wt = tt[t], vdt = weft_vec_dot_type(wt);
        uint8_t *w = malloc(weft_row_size(wt, K) * (size_t)rows), xq[2 * 576];
        fill_activations(wf, K * rows);
        fill_activations(xf, K);
        weft_quantize_row(wt, wf, w, K * rows);
        weft_quantize_row_act(vdt, xf, xq, K);
        double ts = time_matvec(s, wt, w, xq, rows, K, 5, &sink);
        double ta = time_matvec(a, wt, w, xq, rows, K, 20, &sink);
        printf("  %s dot %lldx%lld: scalar %.3f ms, avx2 %.3f ms, speedup %.1fx\n", weft_type_name(wt),
               (long long)K, (long long)rows, ts * 1e3, ta * 1e3, ts / ta);
        free(w);
    }
    free(wf);
    CHECK(sink == sink || sink != sink); /* keep the sums alive */
}

int main(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++)
        printf("  table %s: %s\n", weft_cpu_isa_name((enum weft_cpu_isa)isa),
               table(isa) ? "checked" : "not supported here");
    RUN(every_table_has_the_q_entries);
    RUN(dot_and_quant_match_reference_on_random_rows);
    RUN(dot_matches_reference_on_random_block_bytes);
    RUN(dot_matches_reference_on_short_rows);
    RUN(quant_and_dot_match_reference_on_edge_rows);
    RUN(quant_rounds_exact_halves_to_even);
    printf("  %ld dot and %ld quantizer comparisons, bit for bit\n", n_dot_checked, n_quant_checked);
    RUN(avx2_dot_speed_on_576x1536);
    return check_summary();
}
