/* Deterministic random data for kernel tests (splitmix64). Define
 * TEST_RNG_SEED before including to give each test file its own stream. */
#ifndef WEFT_TEST_RAND_H
#define WEFT_TEST_RAND_H

#include <math.h>
#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng_state = TEST_RNG_SEED;

static inline uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

static inline float rng_normal(void)
{
    double u1 = rng_unit(), u2 = rng_unit();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Activation-like data: normal with a random per-row power-of-two scale, a
 * shifted mean on every third block of 32, and occasional large outliers. */
static inline void fill_activations(float *x, int64_t n)
{
    float scale = (float)ldexp(1.0, (int)(rng_u64() % 12) - 6);
    float shift = (float)(rng_unit() * 2.0 - 1.0);
    for (int64_t i = 0; i < n; i++) {
        x[i] = scale * (rng_normal() + ((i / 32) % 3 == 1 ? shift : 0.0f));
        if (rng_u64() % 61 == 0) x[i] *= 20.0f + 80.0f * (float)rng_unit();
    }
}

#endif
