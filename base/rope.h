/* RoPE's cos and sin, shared by the CPU backend (which rotates with them) and
 * the Vulkan backend (which hands them to its shader as a table on devices
 * that must match the CPU bit for bit): one definition, so both use the very
 * same libm calls in the very same order. Header only. */
#ifndef WEFT_ROPE_H
#define WEFT_ROPE_H

#include <math.h>
#include <stdint.h>

/* What RoPE scaling adds to the plain rotation (all zero: none). */
struct weft_rope_ext {
    const float *freq_factors; /* n_rot/2 divisors of each pair's angle (Llama 3.1's
                                * rope_freqs, LongRoPE's factors), or NULL */
    float ext_factor;          /* YaRN's extrapolation mix (0: none) */
    float attn_factor;         /* cos and sin magnitude (0: 1) */
    float corr_dims[2];        /* YaRN's ramp over pair indices: pairs below
                                * corr_dims[0] keep their angle, pairs above
                                * corr_dims[1] take the interpolated one */
};

/* ggml's angles (ggml_rope_cache_init and rope_yarn): for pair i < n_rot/2,
 * theta_e = (pos * theta_scale^i) / freq_factor[i] (the powers formed by
 * repeated float multiplication, theta_scale = freq_base^(-2/n_rot)),
 * theta_i = freq_scale * theta_e, and with YaRN (ext_factor != 0) the mix
 * theta_i * (1 - r) + theta_e * r, r = ramp(i) * ext_factor with
 * ramp(i) = 1 - clamp((i - c0) / max(0.001, c1 - c0), 0, 1), and the
 * magnitude m = attn_factor * (1 + 0.1 ln(1 / freq_scale)) (attn_factor
 * alone without YaRN). cs[2i] = cosf(theta_i) * m, cs[2i+1] = sinf(theta_i) * m.
 * With no scaling (ext NULL or zero, freq_scale 1) these are exactly the
 * plain angles. */
static inline void weft_rope_cos_sin_ext(int32_t pos, uint32_t n_rot, float freq_base, float freq_scale,
                                         const struct weft_rope_ext *e, float *cs)
{
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const float *ff = e ? e->freq_factors : NULL;
    const float ext = e ? e->ext_factor : 0.0f;
    float mscale = e && e->attn_factor != 0.0f ? e->attn_factor : 1.0f;
    if (ext != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    float theta = (float)pos;
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        const float t_extrap = ff ? theta / ff[i] : theta;
        const float t_interp = freq_scale * t_extrap;
        float t = t_interp;
        if (ext != 0.0f) {
            const float y = ((float)i - e->corr_dims[0]) / fmaxf(0.001f, e->corr_dims[1] - e->corr_dims[0]);
            const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext;
            t = t_interp * (1.0f - ramp) + t_extrap * ramp;
        }
        cs[2 * i] = cosf(t) * mscale;
        cs[2 * i + 1] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

/* The plain rotation (no scaling but freq_scale). */
static inline void weft_rope_cos_sin(int32_t pos, uint32_t n_rot, float freq_base, float freq_scale, float *cs)
{
    weft_rope_cos_sin_ext(pos, n_rot, freq_base, freq_scale, NULL, cs);
}

/* YaRN's ramp ends (ggml_rope_yarn_corr_dims): the pair index at which a
 * pair turns beta times over n_ctx_orig positions, floored for beta_fast and
 * ceiled for beta_slow, within [0, n_rot - 1]. */
static inline void weft_rope_yarn_corr_dims(uint32_t n_rot, uint32_t n_ctx_orig, float freq_base, float beta_fast,
                                            float beta_slow, float dims[2])
{
    const float pi = 3.14159265358979323846f;
    float start = floorf((float)n_rot * logf((float)n_ctx_orig / (beta_fast * 2 * pi)) / (2 * logf(freq_base)));
    float end = ceilf((float)n_rot * logf((float)n_ctx_orig / (beta_slow * 2 * pi)) / (2 * logf(freq_base)));
    dims[0] = fmaxf(0.0f, start);
    dims[1] = fminf((float)n_rot - 1, end);
}

#endif
