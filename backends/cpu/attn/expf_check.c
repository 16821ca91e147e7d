/* The sweep that decides whether a SIMD expf equals this process's libm
 * expf (attn/expf_libm.h). Plain C: the lanes are computed by the callback. */
#include "backends/cpu/attn/expf_libm.h"

#include <math.h>
#include <string.h>

bool weft_cpu_vexpf_matches_libm(void (*exp16)(const float *in, float *out))
{
    float in[16] __attribute__((aligned(64))), out[16] __attribute__((aligned(64)));
    int n = 0;
    bool ok = true;
    const float specials[] = {0.0f, -0.0f, -INFINITY, INFINITY, NAN, -NAN, 88.0f, 88.72f, 89.0f, -87.9f,
                              -88.0f, -103.0f, -103.28f, -103.97f, -104.0f, -150.0f, 1.0f, 1e-30f, -1e-30f};
    uint32_t start = 0, stop = 0, step = 1;
    for (int phase = 0; phase < 5 && ok; phase++) {
        switch (phase) {
        case 0: start = 0x80000000u; stop = 0xc2d00000u; step = 40009; break; /* -0 .. -104, strided */
        case 1: start = 0x80000000u; stop = 0x80001000u; step = 1; break;     /* tiny negatives */
        case 2: start = 0xbf7ff800u; stop = 0xbf800800u; step = 1; break;     /* around -1 */
        case 3: start = 0xc2affc00u; stop = 0xc2b00400u; step = 1; break;     /* around -88 */
        default: start = 0; stop = sizeof specials / sizeof specials[0]; step = 1; break;
        }
        for (uint32_t u = start; u < stop && ok; u += step) {
            float f;
            if (phase == 4) f = specials[u];
            else memcpy(&f, &u, 4);
            in[n++] = f;
            if (n < 16 && !(u + step >= stop)) continue;
            for (int i = n; i < 16; i++) in[i] = in[0];
            exp16(in, out);
            for (int i = 0; i < n; i++) {
                const float e = expf(in[i]);
                if (memcmp(&e, &out[i], 4) != 0 && !(isnan(e) && isnan(out[i]))) ok = false;
            }
            n = 0;
        }
    }
    return ok;
}
