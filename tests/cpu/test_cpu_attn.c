/* The F16 accumulator updates of every kernel table equal the scalar ones bit
 * for bit (flash attention's V sum depends on their exact rounding). */
#include <stdio.h>
#include <stdlib.h>
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

/* Random paged cache: n_layer 2, n_kv 3 heads, blocks in a shuffled order;
 * K values make scores rise and fall so the running maximum moves often. */
static void attn_rows_match_the_generic_row_bit_for_bit(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    static const uint32_t hds[] = {64, 128, 192, 256};
    static const int64_t npos[] = {1, 2, 15, 16, 17, 31, 64, 100, 257};
    int checked = 0, tables = 0;
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k || !k->attn_row) continue;
        tables++;
        for (size_t hi = 0; hi < 4; hi++)
            for (size_t pi = 0; pi < sizeof npos / sizeof npos[0]; pi++) {
                const uint32_t hd = hds[hi], n_kv = 3, n_layer = 2;
                const int64_t n = npos[pi], nblk = (n + 15) / 16 + 2;
                const size_t tok = (size_t)n_kv * hd * 2, layer = 16 * tok, block = (size_t)n_layer * 2 * layer;
                uint8_t *kv = malloc(block * (size_t)nblk);
                for (size_t i = 0; i < block * (size_t)nblk / 2; i++) {
                    weft_half h = weft_f32_to_half((float)((int)(next() % 2001) - 1000) * 1e-3f *
                                                   (i % 97 == 0 ? 8.0f : 1.0f));
                    memcpy(kv + 2 * i, &h, 2);
                }
                int32_t bt[40];
                for (int64_t b = 0; b < nblk; b++) bt[b] = (int32_t)((b * 7 + 3) % nblk);
                float q[256], o1[256], o2[256];
                for (uint32_t d = 0; d < hd; d++) q[d] = (float)((int)(next() % 2001) - 1000) * 2e-3f;
                for (uint32_t h = 0; h < n_kv; h++) {
                    struct weft_cpu_attn_args a = {.q = q, .out = o1, .k0 = kv + layer * 2 + (size_t)h * hd * 2,
                                                   .v_off = layer, .block_bytes = block, .tok_bytes = tok,
                                                   .bt = bt, .n_pos = n, .hd = hd, .scale = 0.125f};
                    weft_cpu_attn_row_generic(ref, &a);
                    a.out = o2;
                    k->attn_row(&a);
                    CHECK_MSG(memcmp(o1, o2, hd * sizeof(float)) == 0, "%s attn_row hd=%u n_pos=%lld head %u",
                              k->name, hd, (long long)n, h);
                    checked++;
                }
                free(kv);
            }
    }
    printf("  %d tables with attn_row, %d rows compared\n", tables, checked);
}

/* attn_group: 1..7 heads of a GQA group (their own q rows, one KV head)
 * against the generic row of each, bit for bit; K values as above. */
static void attn_groups_match_the_generic_row_bit_for_bit(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    static const uint32_t hds[] = {64, 128, 192, 256};
    static const int64_t npos[] = {1, 15, 16, 17, 33, 100, 257};
    int checked = 0, tables = 0;
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k || !k->attn_group) continue;
        tables++;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (size_t pi = 0; pi < sizeof npos / sizeof npos[0]; pi++)
                for (int gm = 0; gm < 27; gm++) {
                    /* 1..7, and 9 (4 + 2 + 3) and 16 (4 x 4) as a group of 16 heads splits;
                     * mode 0: random K, 1: K rows repeating every 4 tokens (tied scores,
                     * the running maximum met again), 2: random with +-inf in K and a
                     * head of zero q (NaN and +-0 scores) */
                    static const int gs[] = {1, 2, 3, 4, 5, 6, 7, 9, 16};
                    const int g = gs[gm % 9], mode = gm / 9;
                    const uint32_t hd = hds[hi], n_kv = 2, n_layer = 1;
                    const int64_t n = npos[pi], nblk = (n + 15) / 16 + 1;
                    const size_t tok = (size_t)n_kv * hd * 2, layer = 16 * tok, block = (size_t)n_layer * 2 * layer;
                    uint8_t *kv = malloc(block * (size_t)nblk);
                    for (size_t i = 0; i < block * (size_t)nblk / 2; i++) {
                        weft_half h = weft_f32_to_half((float)((int)(next() % 2001) - 1000) * 1e-3f *
                                                       (i % 89 == 0 ? 8.0f : 1.0f));
                        if (mode == 1) h = weft_f32_to_half((float)((i / hd) % 4) * 0.25f - 0.25f);
                        if (mode == 2 && i % 37 == 0) h = i % 74 ? 0x7c00 : 0xfc00; /* +inf, -inf */
                        memcpy(kv + 2 * i, &h, 2);
                    }
                    int32_t bt[40];
                    for (int64_t b = 0; b < nblk; b++) bt[b] = (int32_t)((b * 5 + 1) % nblk);
                    float q[16][256], o1[256], o2[16][256];
                    struct weft_cpu_attn_args a[16];
                    for (int h = 0; h < g; h++) {
                        for (uint32_t d = 0; d < hd; d++)
                            q[h][d] = mode == 2 && h % 4 == 3 ? 0.0f
                                                              : (float)((int)(next() % 2001) - 1000) *
                                                                    (h % 3 == 2 ? 6e-2f : h % 2 ? 4e-3f : 1e-3f);
                    /* wide scores too */
                        a[h] = (struct weft_cpu_attn_args){.q = q[h], .out = o2[h], .k0 = kv + (size_t)hd * 2,
                                                           .v_off = layer, .block_bytes = block, .tok_bytes = tok,
                                                           .bt = bt, .n_pos = n, .hd = hd, .scale = 0.125f};
                    }
                    k->attn_group(a, g);
                    for (int h = 0; h < g; h++) {
                        struct weft_cpu_attn_args r = a[h];
                        r.out = o1;
                        weft_cpu_attn_row_generic(ref, &r);
                        CHECK_MSG(memcmp(o1, o2[h], hd * sizeof(float)) == 0,
                                  "%s attn_group hd=%u n_pos=%lld of %d mode %d: head %d", k->name, hd, (long long)n, g, mode, h);
                        checked++;
                    }
                    free(kv);
                }
    }
    printf("  %d tables with attn_group, %d heads compared\n", tables, checked);
}

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
#include <immintrin.h>

#include "backends/cpu/attn/expf_libm256.h"
#include "backends/cpu/attn/expf_libm512.h"

/* the AVX-512 and AVX2 softmaxes' expf equal libm's here (else the kernels
 * fall back to libm's, correct but slower: this says so) */
static void vector_expf_equals_libm(void)
{
    if (!weft_cpu_isa_supported(WEFT_CPU_ISA_AVX2)) {
        printf("  no AVX2: skipped\n");
        return;
    }
    CHECK(weft_cpu_expf8_matches_libm());
    if (!weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512)) {
        printf("  no AVX-512: skipped\n");
        return;
    }
    CHECK(weft_cpu_expf16_matches_libm());
}
#endif

int main(void)
{
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
    RUN(vector_expf_equals_libm);
#endif
    RUN(f16_updates_match_scalar_on_every_table);
    RUN(attn_rows_match_the_generic_row_bit_for_bit);
    RUN(attn_groups_match_the_generic_row_bit_for_bit);
    return check_summary();
}
