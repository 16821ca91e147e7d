/* The float-type kernels (F32, F16, BF16) of every CPU kernel table this
 * machine can run, bit for bit against the portable reference in backends/cpu/cpu_ref_dot.c:
 *   - dot vs weft_vec_dot, dot_mm vs weft_vec_dot_mm(type, w, x, n, 4, 2);
 *   - quant (F32, F16, BF16) vs weft_quantize_row_act, incl. NaN payloads,
 *     infinities, subnormals, overflow edges and rounding ties.
 * Buffers are malloc'd to their exact size so ASan sees any over-read.
 * (bench_cpu_kernels float times the tables against scalar.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"
#include "tests/check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static float unif(void) { return (float)((rnd() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; } /* [-1, 1) */

static const enum weft_type ftypes[3] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16};
static const int64_t lens[] = {1, 7, 16, 31, 32, 64, 96, 172, 576, 1536, 4099};
#define N_LENS ((int)(sizeof lens / sizeof lens[0]))

static long n_dot_checked, n_mm_checked, n_quant_checked;

/* Value distributions for the dot inputs (finite only: with NaN/inf inputs
 * only the NaN payload could differ, which nothing downstream reads). */
enum dist { DIST_UNIT, DIST_WIDE, DIST_TINY, DIST_CANCEL, DIST_COUNT_ };
static const char *const dist_names[DIST_COUNT_] = {"unit", "wide", "tiny", "cancel"};

static float sample(enum dist d, enum weft_type t, int64_t i)
{
    switch (d) {
    case DIST_UNIT: return unif();
    case DIST_WIDE: {
        /* random sign and mantissa, exponent 2^-30 .. 2^30 (F16: its own range) */
        int lo = t == WEFT_TYPE_F16 ? -24 : -30, hi = t == WEFT_TYPE_F16 ? 15 : 30;
        float m = 1.0f + (unif() + 1.0f) * 0.5f;
        float v = ldexpf(m, lo + (int)(rnd() % (uint64_t)(hi - lo + 1)));
        if (rnd() % 16 == 0) v = 0.0f;
        return (rnd() & 1) ? -v : v;
    }
    case DIST_TINY: {
        /* products and sums near/below FLT_MIN (F16: its subnormals) */
        float v = t == WEFT_TYPE_F16 ? unif() * ldexpf(1.0f, -14) : unif() * ldexpf(1.0f, -63);
        return v;
    }
    case DIST_CANCEL: {
        /* large values that cancel pairwise, plus small ones */
        float big = (i & 1) ? 1000.0f : -1000.0f;
        return (i % 5 == 0) ? unif() * 1e-3f : big * (1.0f + unif() * 1e-3f);
    }
    default: return 0.0f;
    }
}

/* n elements of type t (exact-size allocation) from the distribution */
static void *make_row(enum weft_type t, int64_t n, enum dist d)
{
    size_t sz = weft_row_size(t, n);
    void *p = malloc(sz ? sz : 1);
    float *f = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = sample(d, t, i);
    weft_quantize_row(t, f, p, n);
    free(f);
    return p;
}

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void every_table_lists_float_kernels(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int ti = 0; ti < 3; ti++) {
            enum weft_type t = ftypes[ti];
            CHECK_MSG(k->dot[t] != NULL, "%s: no dot for %s", k->name, weft_type_name(t));
            CHECK_MSG(k->dot_mm[t] != NULL, "%s: no dot_mm for %s", k->name, weft_type_name(t));
            CHECK_MSG(k->quant[t] != NULL, "%s: no quant for %s", k->name, weft_type_name(t));
            CHECK_EQ_INT(k->mm_k_multiple[t], t == WEFT_TYPE_BF16 ? 32 : 16);
        }
    }
}

static void dot_and_dot_mm_match_reference_bit_for_bit(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) { printf("  (%s not supported here)\n", weft_cpu_isa_name((enum weft_cpu_isa)isa)); continue; }
        for (int ti = 0; ti < 3; ti++) {
            enum weft_type t = ftypes[ti];
            for (int li = 0; li < N_LENS; li++) {
                int64_t n = lens[li];
                for (int d = 0; d < DIST_COUNT_; d++) {
                    for (int rep = 0; rep < 3; rep++) {
                        void *w = make_row(t, n, (enum dist)d);
                        void *x = make_row(t, n, rep == 2 ? DIST_UNIT : (enum dist)d);
                        float want = weft_vec_dot(t, w, x, n), got = k->dot[t](w, x, n);
                        CHECK_MSG(same_float(got, want), "%s dot %s n=%lld %s rep %d: %.9g (%08x) vs %.9g (%08x)",
                                  k->name, weft_type_name(t), (long long)n, dist_names[d], rep, got,
                                  weft_f32_bits(got), want, weft_f32_bits(want));
                        n_dot_checked++;
                        if (n % k->mm_k_multiple[t] == 0) {
                            float wmm = weft_vec_dot_mm(t, w, x, n, 4, 2), gmm = k->dot_mm[t](w, x, n);
                            CHECK_MSG(same_float(gmm, wmm),
                                      "%s dot_mm %s n=%lld %s rep %d: %.9g (%08x) vs %.9g (%08x)", k->name,
                                      weft_type_name(t), (long long)n, dist_names[d], rep, gmm,
                                      weft_f32_bits(gmm), wmm, weft_f32_bits(wmm));
                            n_mm_checked++;
                        }
                        free(w);
                        free(x);
                    }
                }
            }
        }
    }
    printf("  %ld dot and %ld dot_mm combinations checked bit for bit\n", n_dot_checked, n_mm_checked);
}

/* Special values for the converters. */
static float special(int64_t i)
{
    static const uint32_t bits[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,             /* zeros, infinities */
        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,             /* quiet/signalling NaNs */
        0x7fffffffu, 0xffffffffu, 0x7fa5a5a5u, 0xffd00001u, 0x7f802000u, /* NaN payloads */
        0x00000001u, 0x807fffffu, 0x00400000u,                          /* f32 subnormals */
        0x33000000u, 0x33000001u, 0xb3000000u, 0x33800000u, 0x33c00000u, /* f16 0 / subnormal ties */
        0x387fc000u, 0x387fe000u, 0x38800000u, 0x387ff000u,             /* f16 subnormal/normal edge */
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u, 0x47800000u, /* f16 max and overflow */
        0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu,             /* f32 max (bf16 overflow) */
        0x3f801000u, 0x3f803000u, 0x3f801001u, 0x3f802fffu,             /* f16 ties: even / odd */
        0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu, 0xbf818000u, /* bf16 ties */
        0x00008000u, 0x00018000u, 0x80008000u,                          /* bf16 ties on subnormals */
    };
    const int nb = (int)(sizeof bits / sizeof bits[0]);
    uint64_t r = rnd();
    uint32_t u;
    switch (i % 4) {
    case 0: u = bits[r % (uint64_t)nb]; break;
    case 1: u = (uint32_t)(r >> 32); break;                       /* any bit pattern */
    case 2: {                                                      /* near f16 / bf16 rounding ties */
        uint32_t base = (uint32_t)(r >> 32) & 0xffffe000u;
        u = base | ((r & 1) ? 0x1000u : 0x8000u) | (uint32_t)((r >> 1) & 1);
        break;
    }
    default: {                                                     /* in or near the f16 range */
        float v = ldexpf(1.0f + (float)((r >> 40) & 0xffffff) / 16777216.0f, (int)((r >> 8) % 60) - 30);
        u = weft_f32_bits(v) | ((r & 0x80) ? 0x80000000u : 0);
        break;
    }
    }
    return weft_bits_f32(u);
}

static void quant_matches_reference_bytes_incl_nan_inf_subnormals_ties(void)
{
    static const int64_t qlens[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 64, 96, 172, 576, 1536, 4099};
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int ti = 0; ti < 3; ti++) {
            enum weft_type t = ftypes[ti];
            for (size_t li = 0; li < sizeof qlens / sizeof qlens[0]; li++) {
                int64_t n = qlens[li];
                for (int rep = 0; rep < 8; rep++) {
                    float *x = malloc((size_t)n * sizeof(float));
                    for (int64_t i = 0; i < n; i++) x[i] = rep < 6 ? special(i + rep) : sample((enum dist)(rep % 4), t, i);
                    size_t sz = weft_row_size(t, n);
                    uint8_t *want = malloc(sz), *got = malloc(sz);
                    memset(want, 0xAA, sz);
                    memset(got, 0x55, sz);
                    weft_quantize_row_act(t, x, want, n);
                    k->quant[t](x, got, n);
                    bool eq = memcmp(want, got, sz) == 0;
                    if (!eq) {
                        for (int64_t i = 0; i < n; i++) {
                            size_t es = sz / (size_t)n;
                            if (memcmp(want + i * es, got + i * es, es)) {
                                fprintf(stderr, "  %s quant %s n=%lld: element %lld (x bits %08x) differs\n", k->name,
                                        weft_type_name(t), (long long)n, (long long)i, weft_f32_bits(x[i]));
                                break;
                            }
                        }
                    }
                    CHECK_MSG(eq, "%s quant %s n=%lld rep %d", k->name, weft_type_name(t), (long long)n, rep);
                    n_quant_checked++;
                    free(x);
                    free(want);
                    free(got);
                }
            }
        }
    }
    printf("  %ld quant combinations checked byte for byte\n", n_quant_checked);
}

/* Every f32 bit pattern whose top 16 bits are given, in bulk: all 2^16 low
 * parts for 2^10 chosen high parts covers every NaN, tie and subnormal edge. */
static void quant_matches_reference_on_dense_bit_patterns(void)
{
    const int64_t n = 65536 + 5; /* + a scalar tail */
    float *x = malloc((size_t)n * sizeof(float));
    uint16_t *want = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    long checked = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (uint32_t hi = 0; hi < 0x10000u; hi += 64) {
            uint32_t h = hi | (uint32_t)(rnd() % 64);
            for (int64_t i = 0; i < n; i++) x[i] = weft_bits_f32(h << 16 | (uint32_t)(i & 0xffff));
            for (int ti = 1; ti < 3; ti++) {
                enum weft_type t = ftypes[ti];
                weft_quantize_row_act(t, x, want, n);
                k->quant[t](x, got, n);
                CHECK_MSG(memcmp(want, got, (size_t)n * 2) == 0, "%s quant %s: top bits %04x", k->name,
                          weft_type_name(t), h);
                checked += n;
            }
        }
    }
    printf("  %ld values converted by the SIMD tables and compared\n", checked);
    free(x);
    free(want);
    free(got);
}

int main(void)
{
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++)
        printf("table %s: %s\n", weft_cpu_isa_name((enum weft_cpu_isa)isa),
               weft_cpu_isa_supported((enum weft_cpu_isa)isa) ? "supported" : "not supported here");
    RUN(every_table_lists_float_kernels);
    RUN(dot_and_dot_mm_match_reference_bit_for_bit);
    RUN(quant_matches_reference_bytes_incl_nan_inf_subnormals_ties);
    RUN(quant_matches_reference_on_dense_bit_patterns);
    printf("%ld combinations checked in all (%ld dot, %ld dot_mm, %ld quant)\n",
           n_dot_checked + n_mm_checked + n_quant_checked, n_dot_checked, n_mm_checked, n_quant_checked);
    return check_summary();
}
