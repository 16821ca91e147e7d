/* What the CPU kernel tables hold, as cpu_kernels.h's matrix shows it: for each
 * weight type and form, the levels where a kernel of its own starts (s: the
 * scalar reference, 2: avx2, 5: avx512, v: avx512vnni; -: no such form). The
 * matrix is rebuilt from the tables this machine builds and must equal the
 * header's, so the comment cannot drift from the code (compared only where
 * the CPU runs every level; printed everywhere). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"
#include "tests/check.h"

static const char lv[WEFT_CPU_ISA_COUNT_] = {'s', '2', '5', 'v', 'n', 'd', 'i'};

/* the levels at which the entry got by get(table) differs from the level below's */
#define CELL(expr)                                                                          \
    do {                                                                                    \
        char c[8] = {0};                                                                    \
        int n = 0;                                                                          \
        const void *prev = NULL;                                                            \
        for (int l = 0; l < WEFT_CPU_ISA_COUNT_; l++) {                                     \
            const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)l);  \
            if (!k) break;                                                                  \
            const void *e = (const void *)(expr);                                           \
            if (e && e != prev) c[n++] = lv[l];                                             \
            prev = e;                                                                       \
        }                                                                                   \
        p += snprintf(p, (size_t)(end - p), " %-5s", n ? c : "-");                          \
    } while (0)

static void matrix(char *buf, size_t cap)
{
    static const enum weft_type types[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16, WEFT_TYPE_Q4_0,
                                           WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1, WEFT_TYPE_Q8_0,
                                           WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K, WEFT_TYPE_Q2_K,
                                           WEFT_TYPE_Q3_K, WEFT_TYPE_IQ4_NL, WEFT_TYPE_IQ4_XS, WEFT_TYPE_MXFP4};
    char *p = buf, *end = buf + cap;
    p += snprintf(p, (size_t)(end - p), " *   type   dot   dotmm dot4  gemm  gemmm pack  packx quant\n");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        enum weft_type t = types[i];
        enum weft_type a = weft_vec_dot_type(t);
        p += snprintf(p, (size_t)(end - p), " *   %-6s", weft_type_get((uint32_t)t)->name);
        CELL(k->dot[t]);
        CELL(k->dot_mm[t]);
        CELL(k->dot4[t]);
        CELL(k->gemm[t]);
        CELL(k->gemm_mm[t]);
        CELL(k->packed[t].dot);
        CELL(k->packed[t].gemmp);
        CELL(k->quant[a]);
        while (p > buf && p[-1] == ' ') p--;
        p += snprintf(p, (size_t)(end - p), "\n");
    }
    p += snprintf(p, (size_t)(end - p), " *   other f16_mad f16_scale swiglu attn_row attn_group:");
    CELL(k->f16_mad);
    CELL(k->f16_scale);
    CELL(k->swiglu);
    CELL(k->attn_row);
    CELL(k->attn_group);
    while (p > buf && p[-1] == ' ') p--;
    snprintf(p, (size_t)(end - p), "\n");
}

static void header_matrix_is_the_tables(void)
{
    char built[4096];
    matrix(built, sizeof built);
    printf("%s", built);
    if (!weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512_VNNI)) {
        printf("  this CPU lacks a level: the header's matrix is not compared\n");
        return;
    }
    FILE *f = fopen(WEFT_SOURCE_DIR "/backends/cpu/cpu_kernels.h", "r");
    CHECK(f != NULL);
    if (!f) return;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *a = strstr(text, " *   type   dot"), *b = a ? strstr(a, ":") : NULL;
    b = b ? strchr(b, '\n') : NULL;
    CHECK_MSG(a && b, "no matrix in cpu_kernels.h");
    if (!a || !b) return;
    CHECK_MSG((size_t)(b + 1 - a) == strlen(built) && !memcmp(a, built, strlen(built)),
              "cpu_kernels.h's matrix is not what the tables hold; the tables say:\n%s", built);
}

int main(void)
{
    RUN(header_matrix_is_the_tables);
    return check_summary();
}
