/* RoPE's cos and sin, shared by the CPU backend (which rotates with them) and
 * the Vulkan backend (which hands them to its shader as a table on devices
 * that must match the CPU bit for bit): one definition, so both use the very
 * same libm calls in the very same order. Header only. */
#ifndef WEFT_ROPE_H
#define WEFT_ROPE_H

#include <math.h>
#include <stdint.h>

/* ggml's angles: theta_i = pos * freq_scale * theta_scale^i for i < n_rot/2,
 * theta_scale = freq_base^(-2/n_rot), the powers formed by repeated float
 * multiplication. cs[2i] = cosf(theta_i), cs[2i+1] = sinf(theta_i). */
static inline void weft_rope_cos_sin(int32_t pos, uint32_t n_rot, float freq_base, float freq_scale, float *cs)
{
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos * freq_scale;
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
        theta *= theta_scale;
    }
}

#endif
