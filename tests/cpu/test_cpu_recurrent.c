/* The recurrent ops' entries of every kernel table equal the scalar reference bit for bit:
 * dn_row (DELTA_NET's work for one row and v head, backends/cpu/recurrent/dn_row.c) over head
 * sizes around the 32-element chunks and the 8-lane steps (1 .. 130, 128), states of several
 * magnitudes, decays from 0 to 1, several rows in a row on the same state (a prefill chunk);
 * conv_row (SSM_CONV's taps, recurrent/conv_row.c) over channel ranges that start and end off
 * the 8-lane steps, 2 to 6 taps, padded tap rows, several rows on one state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "tests/check.h"

static uint32_t rng = 2463534242u;
static uint32_t next(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)(next() >> 8) * 0x1p-24f; }

static void dn_row_matches_scalar(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    static const int64_t sizes[] = {1, 7, 8, 9, 31, 32, 33, 40, 64, 100, 128, 130};
    int checked = 0, tables = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;  /* NULL: this CPU or build has no such table */
        tables++;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t S = sizes[si];
            float *Ma = malloc((size_t)(S * S) * 4), *Mb = malloc((size_t)(S * S) * 4);
            float q[130], kk[130], v[130], oa[130], ob[130];
            const float mag = (float)(1 << (si % 4)) * 0.05f;
            for (int64_t e = 0; e < S * S; e++) Ma[e] = Mb[e] = uniform(-mag, mag);
            for (int row = 0; row < 4; row++) {
                double sq = 0, sk = 0;
                for (int64_t i = 0; i < S; i++) {
                    q[i] = uniform(-1, 1), kk[i] = uniform(-1, 1), v[i] = uniform(-2, 2);
                    sq += (double)q[i] * q[i], sk += (double)kk[i] * kk[i];
                }
                for (int64_t i = 0; i < S; i++) q[i] = (float)(q[i] / sqrt(sq)), kk[i] = (float)(kk[i] / sqrt(sk));
                const float b = uniform(0, 1), decay = row == 3 ? 1.0f : uniform(0, 1), qs = 1.0f / sqrtf((float)S);
                ref->dn_row(Ma, q, kk, v, b, decay, qs, oa, S);
                k->dn_row(Mb, q, kk, v, b, decay, qs, ob, S);
                CHECK_MSG(!memcmp(oa, ob, (size_t)S * 4), "%s S=%lld row %d: outputs differ", k->name, (long long)S,
                          row);
                CHECK_MSG(!memcmp(Ma, Mb, (size_t)(S * S) * 4), "%s S=%lld row %d: states differ", k->name,
                          (long long)S, row);
                checked += (int)S;
            }
            free(Ma);
            free(Mb);
        }
    }
    printf("  %d tables (and the scalar reference): %d outputs bit for bit\n", tables, checked);
}

static void conv_row_matches_scalar(void)
{
    const struct weft_cpu_kernels *ref = weft_cpu_kernels_get(WEFT_CPU_ISA_SCALAR);
    enum { C = 100 };
    int checked = 0;
    for (int isa = 1; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        for (int64_t K = 2; K <= 6; K++)
            for (int pad = 0; pad < 2; pad++) {
                const size_t nb1 = (size_t)(K + pad * 3) * sizeof(float);
                float w[C * 9], sa[5 * C], sb[5 * C], x[C], ya[C], yb[C];
                for (int i = 0; i < C * 9; i++) w[i] = uniform(-1, 1);
                for (int i = 0; i < 5 * C; i++) sa[i] = sb[i] = uniform(-3, 3);
                static const int64_t ranges[][2] = {{0, 100}, {3, 97}, {16, 32}, {5, 12}, {96, 100}};
                for (int row = 0; row < 3; row++)
                    for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
                        const int64_t c0 = ranges[ri][0], c1 = ranges[ri][1];
                        for (int i = 0; i < C; i++) x[i] = uniform(-4, 4);
                        ref->conv_row(ya, sa, x, w, nb1, C, K, c0, c1);
                        k->conv_row(yb, sb, x, w, nb1, C, K, c0, c1);
                        CHECK_MSG(!memcmp(ya, yb, (size_t)(c1 - c0) * 4) && !memcmp(sa, sb, sizeof sa),
                                  "%s K=%lld pad %d [%lld, %lld): differ", k->name, (long long)K, pad, (long long)c0,
                                  (long long)c1);
                        checked += (int)(c1 - c0);
                    }
            }
    }
    printf("  conv_row: %d channels bit for bit\n", checked);
}

int main(void)
{
    RUN(dn_row_matches_scalar);
    RUN(conv_row_matches_scalar);
    return check_summary();
}
