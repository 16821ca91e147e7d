/* The dn_row entry (DELTA_NET's work for one row and v head, backends/cpu/recurrent/dn_row.c)
 * of every kernel table equals the scalar reference bit for bit: head sizes around the
 * 32-element chunks and the 8-lane steps (1 .. 130, 128), states of several magnitudes,
 * decays from 0 to 1, several rows in a row on the same state (a prefill chunk). */
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

int main(void)
{
    RUN(dn_row_matches_scalar);
    return check_summary();
}
