/* The F16 accumulator updates of every kernel table equal the scalar ones bit
 * for bit (flash attention's V sum depends on their exact rounding). */
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "tests/check.h"

static uint32_t rng = 12345;
static uint32_t next(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }

static weft_half rand_half(void)
{
    for (;;) {  /* any finite half, subnormals included */
        weft_half h = (weft_half)next();
        if (((h >> 10) & 0x1f) != 0x1f) return h;
    }
}

static void f16_updates_match_scalar_on_every_table(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    static const int64_t sizes[] = {1, 7, 8, 9, 63, 64, 65, 128, 517};
    static const float scales[] = {1.0f, 0.5f, 0.999f, 1e-3f, 3.7f, 1e-8f, 0.0f};
    int checked = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t ci = 0; ci < sizeof scales / sizeof scales[0]; ci++)
                for (int rep = 0; rep < 20; rep++) {
                    int64_t n = sizes[si];
                    weft_half a[517], b[517], v[517];
                    for (int64_t i = 0; i < n; i++) { a[i] = b[i] = rand_half(); v[i] = rand_half(); }
                    ref->f16_mad(a, v, scales[ci], n);
                    k->f16_mad(b, v, scales[ci], n);
                    CHECK_MSG(memcmp(a, b, n * 2) == 0, "%s f16_mad n=%lld s=%g", k->name, (long long)n, scales[ci]);
                    ref->f16_scale(a, scales[ci], n);
                    k->f16_scale(b, scales[ci], n);
                    CHECK_MSG(memcmp(a, b, n * 2) == 0, "%s f16_scale n=%lld s=%g", k->name, (long long)n, scales[ci]);
                    checked += 2;
                }
    }
    printf("  %d comparisons\n", checked);
}

int main(void)
{
    RUN(f16_updates_match_scalar_on_every_table);
    return check_summary();
}
