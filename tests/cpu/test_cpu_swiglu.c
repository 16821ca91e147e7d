/* The swiglu entry of every kernel table equals the scalar reference (the
 * mirror of ggml_vec_swiglu_f32's AVX512F+DQ branch) bit for bit: random
 * inputs over wide ranges, the special values of ggml_v_expf's branches
 * (|n| > 192 blend, overflow to inf, underflow through subnormals to 0),
 * ±0, ±inf, NaNs, subnormals, and every leftover length. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "tests/check.h"

static uint32_t rng = 2463534242u;
static uint32_t next(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }
static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)(next() >> 8) * 0x1p-24f; }

static const float specials[] = {
    0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f,
    88.7f, -88.7f, 88.72283f, -88.72284f, 89.0f, -89.0f, 103.97f, -103.97f, 104.0f, -104.0f,
    87.33f, -87.33f, 87.34f, -87.34f, 95.0f, -95.0f, 120.0f, -120.0f, 133.0f, -133.0f,
    133.08f, -133.08f, 133.1f, -133.1f, 133.5f, -133.5f, 150.0f, -150.0f, 200.0f, -200.0f,
    1e10f, -1e10f, 3e38f, -3e38f, 0x1p22f, -0x1p22f, 0x1.8p22f, -0x1.8p22f, 0x1p23f, -0x1p23f,
    0x1p-149f, -0x1p-149f, 0x1p-127f, -0x1p-127f, 0x1.fffffcp-127f, 0x1p-126f, -0x1p-126f,
    1e-30f, -1e-30f, 0.5f, -0.5f, 16.0f, -16.0f,
};
#define NSPEC ((int)(sizeof specials / sizeof specials[0]))

/* one input value: mostly uniform over a range picked at random, sometimes
 * a special, an arbitrary bit pattern (any NaN payload included) or a value
 * right around the exp overflow/underflow edges */
static float rand_value(void)
{
    switch (next() % 10) {
    case 0: return specials[next() % NSPEC];
    case 1: return bits_f(next());
    case 2: return bits_f(next() & 0x807fffffu);                 /* subnormal */
    case 3: return uniform(-110.0f, -80.0f);                     /* exp(-x) overflows */
    case 4: return uniform(80.0f, 140.0f);                       /* exp(-x) goes subnormal / 0 */
    case 5: return uniform(-250.0f, 250.0f);                     /* the |n| > 192 blend */
    case 6: return uniform(-1e6f, 1e6f);
    default: return uniform(-12.0f, 12.0f);                      /* what activations look like */
    }
}

static int mismatches_of(const float *a, const float *b, int64_t n, int64_t *first)
{
    int c = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        /* NaN in, NaN out; which NaN (sign, payload) depends on how the
         * compiler ordered the reference's operands, so any NaN matches */
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) { if (*first < 0) *first = i; c++; }
    return c;
}

static void compare(const struct weft_cpu_kernels *ref, const struct weft_cpu_kernels *k, const float *g,
                    const float *u, int64_t n, const char *what, int *checked)
{
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    memset(a, 0x5a, (size_t)n * 4);
    memset(b, 0xa5, (size_t)n * 4);
    ref->swiglu(a, g, u, n);
    k->swiglu(b, g, u, n);
    int64_t first;
    int bad = mismatches_of(a, b, n, &first);
    CHECK_MSG(bad == 0, "%s %s n=%lld: %d lanes differ, first [%lld] gate %a up %a: ref %a (0x%08x) vs %a (0x%08x)",
              k->name, what, (long long)n, bad, (long long)first, bad ? g[first] : 0.0, bad ? u[first] : 0.0,
              bad ? a[first] : 0.0, bad ? *(uint32_t *)&a[first] : 0, bad ? b[first] : 0.0,
              bad ? *(uint32_t *)&b[first] : 0);
    *checked += (int)n;
    free(a);
    free(b);
}

static const int64_t sizes[] = {1, 15, 16, 17, 31, 64, 1536, 1537};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static void swiglu_matches_scalar_on_random_wide_inputs(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    float g[1537], u[1537];
    int checked = 0, tables = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        tables++;
        for (int si = 0; si < NSIZES; si++)
            for (int rep = 0; rep < 40; rep++) {
                for (int64_t i = 0; i < sizes[si]; i++) { g[i] = rand_value(); u[i] = rand_value(); }
                compare(ref, k, g, u, sizes[si], "random", &checked);
            }
    }
    printf("  %d tables beside scalar, %d lanes compared\n", tables, checked);
}

/* every special gate value against every special up value, in every lane
 * position of a 16-chunk and of the leftovers */
static void swiglu_matches_scalar_on_special_values(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    enum { N = NSPEC * NSPEC };
    float g[N + 7], u[N + 7];
    int checked = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int shift = 0; shift < 8; shift++) {  /* move each pair across chunk and leftover positions */
            for (int i = 0; i < shift; i++) { g[i] = 1.0f; u[i] = 1.0f; }
            for (int a = 0; a < NSPEC; a++)
                for (int b = 0; b < NSPEC; b++) { g[shift + a * NSPEC + b] = specials[a]; u[shift + a * NSPEC + b] = specials[b]; }
            compare(ref, k, g, u, N + shift, "specials", &checked);
        }
    }
    printf("  %d lanes compared\n", checked);
}

/* NaNs with distinct payloads and signs in gate, up or both */
static void swiglu_matches_scalar_on_nan_payloads(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    float g[1537], u[1537];
    int checked = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int si = 0; si < NSIZES; si++)
            for (int rep = 0; rep < 10; rep++) {
                for (int64_t i = 0; i < sizes[si]; i++) {
                    uint32_t r = next();
                    g[i] = (r & 1) ? bits_f(0x7f800001u | (next() & 0x807fffffu)) : rand_value();
                    u[i] = (r & 2) ? bits_f(0x7f800001u | (next() & 0x807fffffu)) : rand_value();
                }
                compare(ref, k, g, u, sizes[si], "nan", &checked);
            }
    }
    printf("  %d lanes compared\n", checked);
}

/* every gate value in [-128, 128] at a 2^-14 step (where the polynomial,
 * the scaling and the subnormal rounding all act), up = 1 and up = random */
static void swiglu_matches_scalar_on_dense_sweep(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    const int64_t n = (int64_t)256 << 14;
    float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) { g[i] = -128.0f + (float)i * 0x1p-14f; u[i] = (i & 1) ? 1.0f : uniform(-4, 4); }
    int checked = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (k) compare(ref, k, g, u, n, "sweep", &checked);
    }
    printf("  %d lanes compared\n", checked);
    free(g);
    free(u);
}

int main(void)
{
    RUN(swiglu_matches_scalar_on_random_wide_inputs);
    RUN(swiglu_matches_scalar_on_special_values);
    RUN(swiglu_matches_scalar_on_nan_payloads);
    RUN(swiglu_matches_scalar_on_dense_sweep);
    return check_summary();
}
