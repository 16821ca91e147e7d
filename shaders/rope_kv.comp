#version 450
#include "weft_blocks.glsl"  /* base/types.h's block layouts (generated) */
// variants: f16:-DKV_F16 q8_0:-DKV_Q8_0 f16x:-DKV_F16,-DROPE_TABLE q8_0x:-DKV_Q8_0,-DROPE_TABLE
// ROPE_KV, one workgroup per batch row (rows strided by the group count):
//  1. rotate q and k in place, ggml's convention as the CPU backend
//     (base/rope.h): theta_e = pos * theta_scale^i (repeated multiplication,
//     theta_scale from the host's powf) / freq_factors[i] (when has_ff),
//     theta = freq_scale * theta_e, with YaRN (ext_factor != 0) mixed as
//     theta (1 - r) + theta_e r, r = (1 - clamp((i - c0) / max(0.001,
//     c1 - c0), 0, 1)) ext_factor; cos and sin times mscale (the host's
//     attn_factor magnitude); NORMAL pairs (2i, 2i+1),
//     NEOX (i, i + n_rot/2); x0*c - x1*s and x0*s + x1*c with the x0 product
//     fused, as the CPU does;
//  2. write k and v into the row's KV slot (backend.h's paged layout: a
//     block's layer is 16 K rows of n_kv*hd values then 16 V rows of
//     n_kv*hdv, hdv V's head dim; a latent cache, v_in_k: K rows only, v not
//     read): F16, two halves per uint word; or Q8_0, 34-byte
//     blocks quantized as the CPU's weft_quantize_row (d = amax/127, q =
//     round-half-away(x/d)), stored 16 bits at a time with atomics since
//     blocks share words with neighbouring blocks and token rows.
// q_only (api 10): step 1 for q alone; k, v, the slots and the cache are
// neither read nor written (their bindings may be stand-ins).
// Binding 6: the freq_factors (f32, n_rot/2 at ff_off) without ROPE_TABLE.
// ROPE_TABLE (lavapipe, bit for bit as the CPU): cos/sin from binding 6,
// [pos][n_rot/2][2] floats made on the host by the CPU's own
// weft_rope_cos_sin_ext (base/rope.h, scaling included); the fused products by fma_x (exact.glsl,
// one rounding as the CPU's fmaf); F16 cache values rounded to nearest even
// in integer arithmetic.
// q/k/v offsets and row strides in floats; the cache addressed in words.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) coherent buffer Q { float q[]; };
layout(std430, binding = 1) coherent buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
#ifdef KV_Q8_0
layout(std430, binding = 3) coherent buffer C { uint cache[]; };
#else
layout(std430, binding = 3) writeonly buffer C { uint cache[]; };
#endif
layout(std430, binding = 4) readonly buffer POS { int pos[]; };
layout(std430, binding = 5) readonly buffer SLOT { int slot[]; };
#ifdef ROPE_TABLE
layout(std430, binding = 6) readonly buffer TAB { float tab[]; };
#include "exact.glsl"
#define FMA fma_x
/* f32 -> f16 bits, round to nearest even (as weft_f32_to_half) */
uint half_bits(float f)
{
    const uint x = floatBitsToUint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return sign;
        const uint e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
        uint hm = m >> shift;
        const uint rem = m & ((1u << shift) - 1u), hb = 1u << (shift - 1u);
        if (rem > hb || (rem == hb && (hm & 1u) != 0u)) hm++;
        return sign | hm;
    }
    uint h = (ax - 0x38000000u) >> 13;
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}
uint pack_f16x2(float a, float b) { return half_bits(a) | (half_bits(b) << 16); }
#else
#define FMA fma
uint pack_f16x2(float a, float b) { return packHalf2x16(vec2(a, b)); }
layout(std430, binding = 6) readonly buffer FF { float ff[]; };
#endif
layout(push_constant) uniform P {
    uint q_off, q_rs, k_off, k_rs, v_off, v_rs;
    uint pos_off, slot_off, n_rows;
    uint n_head, n_kv, hd, n_rot, neox;
    uint n_layer, layer;
    float freq_scale, theta_scale;
    float ext_factor, corr0, corr1, mscale;   /* YaRN's mix and ramp; the cos/sin magnitude */
    uint ff_off, has_ff;
    uint hdv;   /* V's head dim (v rows are n_kv*hdv); hd for K */
    uint v_in_k;   /* a latent cache: K rows only (v is not read; a position's V is its K row's tail) */
    uint q_only;   /* api 10: rotate q only (k, v and the cache untouched) */
} p;

#ifdef KV_Q8_0
// 16 bits at an even byte offset, leaving the word's other half alone
void put_u16(uint byte, uint val)
{
    const uint sh = (byte & 2u) * 8u;
    atomicAnd(cache[byte >> 2], ~(0xffffu << sh));
    atomicOr(cache[byte >> 2], (val & 0xffffu) << sh);
}
#endif

#ifdef KV_Q8_0
// C's roundf: half away from zero (a - floor(a) is exact)
int round_away(float x)
{
    const float a = abs(x), f = floor(a);
    return int(sign(x) * (a - f >= 0.5 ? f + 1.0 : f));
}
#endif

// 2*pi in three parts (Cody-Waite): C1 has 8 significant bits and C2 9, so
// n * C1 and n * C2 are exact for n < 2^15 (angles to about 2e5) without
// relying on a fused multiply-add (lavapipe splits fma; GPUs may too)
const float RED_C1 = 6.28125;
const float RED_C2 = 0.001934051513671875;
const float RED_C3 = 1.2556658930407139e-6;
const float INV_TWO_PI = 0.15915494309189535;

void main()
{
    const uint t = gl_LocalInvocationID.x;
    const uint half_rot = p.n_rot / 2u;
    for (uint r = gl_WorkGroupID.x; r < p.n_rows; r += gl_NumWorkGroups.x) {
        const float fpos = float(pos[p.pos_off + r]);
        const uint n_rot_heads = p.q_only != 0u ? p.n_head : p.n_head + p.n_kv;
        for (uint idx = t; idx < n_rot_heads * half_rot; idx += 64u) {
            const uint h = idx / half_rot, i = idx % half_rot;
#ifdef ROPE_TABLE
            const uint tb = uint(pos[p.pos_off + r]) * p.n_rot + 2u * i;
            const float c = tab[tb], s = tab[tb + 1u];
#else
            /* every step rounded as the CPU's C (no contraction) */
            precise float te = fpos;
            for (uint j = 0u; j < i; j++) te *= p.theta_scale;
            if (p.has_ff != 0u) te = te / ff[p.ff_off + i];
            precise float theta = p.freq_scale * te;
            if (p.ext_factor != 0.0) {
                precise float y = (float(i) - p.corr0) / max(0.001, p.corr1 - p.corr0);
                precise float ramp = (1.0 - min(1.0, max(0.0, y))) * p.ext_factor;
                theta = theta * (1.0 - ramp) + te * ramp;
            }
            // reduce to [-pi, pi] first: GPU sin/cos are only accurate there
            const float n = round(theta * INV_TWO_PI);
            precise float red = theta - n * RED_C1;
            red = red - n * RED_C2;
            red = red - n * RED_C3;
            const float c = cos(red) * p.mscale, s = sin(red) * p.mscale;
#endif
            const uint a = p.neox != 0u ? i : 2u * i;
            const uint b = p.neox != 0u ? i + half_rot : 2u * i + 1u;
            if (h < p.n_head) {
                const uint base = p.q_off + r * p.q_rs + h * p.hd;
                const float x0 = q[base + a], x1 = q[base + b];
                precise float x1s = x1 * s, x1c = x1 * c;
                precise float y0 = FMA(x0, c, -x1s);
                precise float y1 = FMA(x0, s, x1c);
                q[base + a] = y0;
                q[base + b] = y1;
            } else {
                const uint base = p.k_off + r * p.k_rs + (h - p.n_head) * p.hd;
                const float x0 = k[base + a], x1 = k[base + b];
                precise float x1s = x1 * s, x1c = x1 * c;
                precise float y0 = FMA(x0, c, -x1s);
                precise float y1 = FMA(x0, s, x1c);
                k[base + a] = y0;
                k[base + b] = y1;
            }
        }
        if (p.q_only != 0u) continue;  /* uniform: no k, no cache */
        memoryBarrierBuffer();
        barrier();
        const uint sl = uint(slot[p.slot_off + r]);
        const uint kb = p.k_off + r * p.k_rs, vb = p.v_off + r * p.v_rs;
#ifdef KV_Q8_0
        const uint nb = p.n_kv * p.hd / WEFT_QK32, nbv = p.v_in_k != 0u ? 0u : p.n_kv * p.hdv / WEFT_QK32;
        const uint tok_bytes = nb * WEFT_BSZ_Q8_0, tok_bytes_v = nbv * WEFT_BSZ_Q8_0;
        const uint lbase = (sl / 16u * p.n_layer + p.layer) * (16u * (tok_bytes + tok_bytes_v));
        const uint kbyte = lbase + (sl % 16u) * tok_bytes;
        const uint vbyte = lbase + 16u * tok_bytes + (sl % 16u) * tok_bytes_v;
        for (uint w = t; w < nb + nbv; w += 64u) {
            const bool is_v = w >= nb;
            const uint b = is_v ? w - nb : w;
            const uint src = (is_v ? vb : kb) + 32u * b;
            float amax = 0.0;
            for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(is_v ? v[src + j] : k[src + j]));
            const float d = amax / 127.0;
            const float id = d != 0.0 ? 1.0 / d : 0.0;
            const uint dst = (is_v ? vbyte : kbyte) + WEFT_BSZ_Q8_0 * b;
            put_u16(dst, packHalf2x16(vec2(d, 0.0)));
            for (uint j = 0u; j < 32u; j += 2u) {
                precise float x0 = (is_v ? v[src + j] : k[src + j]) * id;
                precise float x1 = (is_v ? v[src + j + 1u] : k[src + j + 1u]) * id;
                const int q0 = round_away(x0), q1 = round_away(x1);
                put_u16(dst + WEFT_BOFF_Q8_0_QS + j, (uint(q0) & 0xffu) | ((uint(q1) & 0xffu) << 8));
            }
        }
#else
        const uint tok_words = p.n_kv * p.hd / 2u, tok_words_v = p.v_in_k != 0u ? 0u : p.n_kv * p.hdv / 2u;
        const uint lbase = (sl / 16u * p.n_layer + p.layer) * (16u * (tok_words + tok_words_v));
        const uint kw = lbase + (sl % 16u) * tok_words, vw = lbase + 16u * tok_words + (sl % 16u) * tok_words_v;
        for (uint w = t; w < max(tok_words, tok_words_v); w += 64u) {
            if (w < tok_words) cache[kw + w] = pack_f16x2(k[kb + 2u * w], k[kb + 2u * w + 1u]);
            if (w < tok_words_v) cache[vw + w] = pack_f16x2(v[vb + 2u * w], v[vb + 2u * w + 1u]);
        }
#endif
        barrier();  // the next row's rotation does not overtake this row's reads
    }
}
