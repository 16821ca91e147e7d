#version 450
#include "weft_blocks.glsl"  /* base/types.h's block layouts (generated) */
// variants: f16:-DKV_F16 f16_sg:-DKV_F16,-DUSE_SUBGROUP q8_0:-DKV_Q8_0 q8_0_sg:-DKV_Q8_0,-DUSE_SUBGROUP f16x:-DKV_F16,-DEXACT
// ATTENTION over the paged F16 KV cache: one workgroup per (head, row),
// causal over positions 0..pos[row] (a sliding window: only the last
// `window` of them, the pass simply starting later) of the row's sequence through its block
// table, GQA (kv head = head / (n_head / n_kv)), online softmax in tiles of
// 64 positions: each invocation scores one position of the tile (K·q, q
// rounded to F16 as the CPU does), the tile's max and sum are reduced
// (subgroup ops when the device has them, else shared memory), and each
// invocation accumulates its own pairs of output dims over the tile's V rows.
// K heads are hd wide, V heads (and the output's) hdv (backend.h's layout: a
// block's layer is 16 K rows of n_kv*hd then 16 V rows of n_kv*hdv; a latent
// cache, v_in_k, has only the K rows, each position's V the tail of its K row).
// Q8_0 cache (as the CPU, after ggml): q quantized to Q8_0 (round half to
// even), K·q as per-block integer dots times both scales, V dequantized.
// EXACT (F16 cache, lavapipe: bit for bit as the CPU's
// weft_cpu_attn_row_generic): q rounded to F16 in integer arithmetic, K·q in
// ggml_vec_dot_f16's order (element e in accumulator (e/16)%4, lane e%16,
// fma over 64-element chunks; (s0+s2)+(s1+s3); the 16 lanes halved
// 16 -> 8 -> 4 -> 2 -> 1; a tail past a multiple of 64 added in double),
// exp as glibc's expf, which the CPU calls (expf_libm.glsl), every fma by
// fma_x (exact.glsl).
// Sinks (api 7, gpt-oss; has_sinks): one more position after the last, with
// logit sinks[h] (binding 7) and no value row, on the accumulator in F32 (the
// F16 cache's F16-rounded values, no rounding from there): s > M: acc *= ms =
// exp(M - s), M = s; else vs = exp(s - M); S = S*ms + vs (a product, then a
// sum) and 1/S taken as 0 where S is 0, as the CPU's attn_sink; EXACT with
// glibc's expf, so the CPU's bits there too.
#extension GL_GOOGLE_include_directive : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#define WG 64u
#define MAX_PAIRS 4u  // head_dim_v <= 2 * WG * MAX_PAIRS = 512 (and head_dim <= 512: qs)
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer C { uint cache[]; };
layout(std430, binding = 3) readonly buffer POS { int pos[]; };
layout(std430, binding = 4) readonly buffer SEQ { int seq[]; };
layout(std430, binding = 5) readonly buffer BTO { int bt_off[]; };
layout(std430, binding = 6) readonly buffer BT { int bt[]; };
layout(std430, binding = 7) readonly buffer SK { float sinks[]; };  /* bound, unread, without has_sinks */
layout(push_constant) uniform P {
    uint q_off, q_rs, o_off, o_rs;
    uint pos_off, seq_off, bto_off, bt_off0, n_rows;
    uint n_head, n_kv, hd, n_layer, layer;
    float scale;
    uint window;   /* sliding window: positions pos - window + 1 .. pos; 0: all of 0..pos */
    float softcap; /* soft-capped scores: s = softcap * tanh(dot * scale), scale already
                    * divided by it (ggml's flash attention form); 0: none */
    uint hdv;      /* V's head dim: out is [rows, n_head*hdv] */
    uint sinks_off, has_sinks;  /* a sink logit per head (floats), or none */
    uint v_in_k;   /* a latent cache (DeepSeek's MLA): no V rows, a position's V is the last hdv
                    * values of its K row (n_kv 1) */
} p;

shared float qs[512];
#ifdef KV_Q8_0
shared int qi[512];
shared float qd[16];
uint rd_u16(uint byte) { return (cache[byte >> 2] >> ((byte & 2u) * 8u)) & 0xffffu; }
vec2 rd_i8x2(uint byte)
{
    const int u = int(rd_u16(byte));
    return vec2(bitfieldExtract(u, 0, 8), bitfieldExtract(u, 8, 8));
}
#endif
shared float es[WG];
shared float red[WG];
#ifdef EXACT
#include "exact.glsl"
#include "expf_libm.glsl"
#define FMA2(a, b, c) vec2(fma_x((a).x, (b).x, (c).x), fma_x((a).y, (b).y, (c).y))
#endif

#ifndef KV_Q8_0
/* round to the nearest F16 (ties to even), as the CPU's weft_f32_to_half;
 * GLSL's packHalf2x16 leaves the rounding mode to the implementation */
float round_f16_1(float f)
{
    const uint x = floatBitsToUint(f), sign = x & 0x80000000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return f;
    if (ax >= 0x477ff000u) return uintBitsToFloat(sign | 0x7f800000u);   /* overflow: inf */
    if (ax < 0x38800000u) {                                               /* F16 subnormal: multiples of 2^-24 */
        precise float q = roundEven(uintBitsToFloat(ax) * 16777216.0) * (1.0 / 16777216.0);
        return uintBitsToFloat(sign | floatBitsToUint(q));
    }
    uint r = ax + 0xfffu + ((ax >> 13) & 1u);                              /* ties to even at bit 13 */
    return uintBitsToFloat(sign | (r & 0xffffe000u));
}
vec2 round_f16(vec2 v) { return vec2(round_f16_1(v.x), round_f16_1(v.y)); }
#endif

float reduce_max(float x)
{
#ifdef USE_SUBGROUP
    x = subgroupMax(x);
    if (gl_NumSubgroups == 1u) return x;
    if (subgroupElect()) red[gl_SubgroupID] = x;
    barrier();
    float m = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) m = max(m, red[i]);
    barrier();
    return m;
#else
    const uint t = gl_LocalInvocationID.x;
    red[t] = x;
    barrier();
    for (uint n = WG / 2u; n > 0u; n >>= 1) {
        if (t < n) red[t] = max(red[t], red[t + n]);
        barrier();
    }
    const float m = red[0];
    barrier();
    return m;
#endif
}

float reduce_sum(float x)
{
#ifdef USE_SUBGROUP
    x = subgroupAdd(x);
    if (gl_NumSubgroups == 1u) return x;
    if (subgroupElect()) red[gl_SubgroupID] = x;
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) s += red[i];
    barrier();
    return s;
#else
    const uint t = gl_LocalInvocationID.x;
    red[t] = x;
    barrier();
    for (uint n = WG / 2u; n > 0u; n >>= 1) {
        if (t < n) red[t] += red[t + n];
        barrier();
    }
    const float s = red[0];
    barrier();
    return s;
#endif
}

// units of a head of d values: F16 words, Q8_0 bytes
uint head_units(uint d)
{
#ifdef KV_Q8_0
    return d / WEFT_QK32 * WEFT_BSZ_Q8_0;
#else
    return d / 2u;
#endif
}

// where position pp's K row for kv head kvh starts (tok_words: a token's K
// row, layer_words: a block's layer, K and V): F16 in words, Q8_0 in bytes
uint k_word(uint blocks, uint pp, uint kvh, uint tok_words, uint layer_words)
{
    const uint blk = uint(bt[blocks + pp / 16u]);
    return (blk * p.n_layer + p.layer) * layer_words + (pp % 16u) * tok_words + kvh * head_units(p.hd);
}

// and its V row (tok_words_v: a token's V row), past the layer's 16 K rows;
// in a latent cache (v_in_k) the tail of its K row
uint v_word(uint blocks, uint pp, uint kvh, uint tok_words, uint tok_words_v, uint layer_words)
{
    if (p.v_in_k != 0u) return k_word(blocks, pp, kvh, tok_words, layer_words) + head_units(p.hd - p.hdv);
    const uint blk = uint(bt[blocks + pp / 16u]);
    return (blk * p.n_layer + p.layer) * layer_words + 16u * tok_words + (pp % 16u) * tok_words_v +
           kvh * head_units(p.hdv);
}

void main()
{
    const uint t = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x;
    const uint kvh = h / (p.n_head / p.n_kv);
    const uint hw = p.hd / 2u, hwv = p.hdv / 2u;  // K's and V's pairs
    // F16 words, Q8_0 bytes
    const uint tok_words = p.n_kv * head_units(p.hd), tok_words_v = p.v_in_k != 0u ? 0u : p.n_kv * head_units(p.hdv);
    const uint layer_words = 16u * (tok_words + tok_words_v);
    for (uint r = gl_WorkGroupID.y; r < p.n_rows; r += gl_NumWorkGroups.y) {
        const uint qb = p.q_off + r * p.q_rs + h * p.hd;
#ifdef KV_Q8_0
        if (t < p.hd / 32u) {
            float amax = 0.0;
            for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(q[qb + 32u * t + j]));
            const float id = amax != 0.0 ? 127.0 / amax : 0.0;
            for (uint j = 0u; j < 32u; j++) {
                precise float x = q[qb + 32u * t + j] * id;
                qi[32u * t + j] = int(roundEven(x));
            }
            qd[t] = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
        }
#elif defined(EXACT)
        for (uint d = t; d < p.hd; d += WG) qs[d] = round_f16_1(q[qb + d]);
#else
        for (uint d = t; d < p.hd; d += WG) qs[d] = unpackHalf2x16(packHalf2x16(vec2(q[qb + d], 0.0))).x;
#endif
        barrier();
        const uint n_pos = uint(pos[p.pos_off + r]) + 1u;
        const uint p_first = p.window != 0u && n_pos > p.window ? n_pos - p.window : 0u;
        const uint blocks = p.bt_off0 + uint(bt_off[p.bto_off + uint(seq[p.seq_off + r])]);
#ifdef EXACT
        float M = uintBitsToFloat(0xff800000u), S = 0.0;  /* -inf, as the CPU */
#else
        float M = -3.0e38, S = 0.0;
#endif
        vec2 acc[MAX_PAIRS];
        for (uint j = 0u; j < MAX_PAIRS; j++) acc[j] = vec2(0.0);
        for (uint tile = p_first; tile < n_pos; tile += WG) {
            const uint pp = tile + t;
            float s = -3.0e38;
            if (pp < n_pos) {
                const uint kw = k_word(blocks, pp, kvh, tok_words, layer_words);
                float dot = 0.0;
#ifdef KV_Q8_0
                for (uint b = 0u; b < p.hd / 32u; b++) {
                    const uint base = kw + WEFT_BSZ_Q8_0 * b;
                    int isum = 0;
                    for (uint j = 0u; j < 32u; j += 2u) {
                        const ivec2 kk = ivec2(rd_i8x2(base + WEFT_BOFF_Q8_0_QS + j));
                        isum += kk.x * qi[32u * b + j] + kk.y * qi[32u * b + j + 1u];
                    }
                    dot += float(isum) * (unpackHalf2x16(rd_u16(base)).x * qd[b]);
                }
#elif defined(EXACT)
                const uint np = p.hd & ~63u;
                float rl[16];
                for (uint l = 0u; l < 16u; l++) {
                    float c[4];
                    for (uint j = 0u; j < 4u; j++) {
                        float cc = 0.0;
                        for (uint e = 16u * j + l; e < np; e += 64u) {
                            const vec2 kk = unpackHalf2x16(cache[kw + e / 2u]);
                            cc = fma_x((e & 1u) != 0u ? kk.y : kk.x, qs[e], cc);
                        }
                        c[j] = cc;
                    }
                    precise float r4 = (c[0] + c[2]) + (c[1] + c[3]);
                    rl[l] = r4;
                }
                for (uint l = 0u; l < 8u; l++) { precise float h8 = rl[l] + rl[l + 8u]; rl[l] = h8; }
                for (uint l = 0u; l < 4u; l++) { precise float h4 = rl[l] + rl[l + 4u]; rl[l] = h4; }
                precise float red1 = (rl[0] + rl[2]) + (rl[1] + rl[3]);
                double ds = double(red1);
                for (uint e = np; e < p.hd; e++) {
                    const vec2 kk = unpackHalf2x16(cache[kw + e / 2u]);
                    precise float pr = ((e & 1u) != 0u ? kk.y : kk.x) * qs[e];
                    precise double dn = ds + double(pr);
                    ds = dn;
                }
                dot = float(ds);
#else
                for (uint i = 0u; i < hw; i++) {
                    const vec2 kk = unpackHalf2x16(cache[kw + i]);
                    dot += kk.x * qs[2u * i] + kk.y * qs[2u * i + 1u];
                }
#endif
                precise float sd = dot * p.scale;
                s = p.softcap != 0.0 ? p.softcap * tanh(sd) : sd;
            }
#ifdef KV_Q8_0
            const float m_new = max(M, reduce_max(s));
            const float corr = exp(M - m_new);
            const float e = pp < n_pos ? exp(s - m_new) : 0.0;
            es[t] = e;
            barrier();
            S = S * corr + reduce_sum(e);
            M = m_new;
            const uint n_tile = min(WG, n_pos - tile);
            for (uint j = 0u; j < MAX_PAIRS; j++) {
                const uint pi = t + j * WG;
                if (pi >= hwv) break;
                vec2 a = acc[j] * corr;
                for (uint u = 0u; u < n_tile; u++) {
                    const uint vw = v_word(blocks, tile + u, kvh, tok_words, tok_words_v, layer_words);
                    const uint vbase = vw + (2u * pi / WEFT_QK32) * WEFT_BSZ_Q8_0;
                    a += es[u] * (unpackHalf2x16(rd_u16(vbase)).x * rd_i8x2(vbase + WEFT_BOFF_Q8_0_QS + (2u * pi) % WEFT_QK32));
                }
                acc[j] = a;
            }
#else
            /* the CPU's (ggml's) single pass, position by position: a new
             * maximum rescales the accumulator, which is rounded to F16 after
             * every update. Every thread keeps the same M and S. */
            es[t] = s;
            barrier();
            const uint n_tile = min(WG, n_pos - tile);
            for (uint u = 0u; u < n_tile; u++) {
                const float su = es[u];
                float ms = 1.0, vs = 1.0;
                const bool new_max = su > M;
#ifdef EXACT
                if (new_max) {
                    precise float dm = M - su;
                    ms = expf_libm(dm);
                    M = su;
                } else {
                    precise float dm = su - M;
                    vs = expf_libm(dm);
                }
#else
                if (new_max) {
                    ms = S == 0.0 && M <= -3.0e38 ? 0.0 : exp(M - su);
                    M = su;
                } else {
                    vs = exp(su - M);
                }
#endif
                const uint vw = v_word(blocks, tile + u, kvh, tok_words, tok_words_v, layer_words);
                for (uint j = 0u; j < MAX_PAIRS; j++) {
                    const uint pi = t + j * WG;
                    if (pi >= hwv) break;
                    vec2 a = acc[j];
                    precise vec2 am = a * ms;
                    if (new_max) a = round_f16(am);
                    const vec2 v = unpackHalf2x16(cache[vw + pi]);
#ifdef EXACT
                    precise vec2 f = FMA2(v, vec2(vs), a);
#else
                    precise vec2 f = fma(v, vec2(vs), a);
#endif
                    acc[j] = round_f16(f);
                }
#ifdef EXACT
                precise float sn = fma_x(S, ms, vs);
#else
                precise float sn = fma(S, ms, vs);
#endif
                S = sn;
            }
#endif
            barrier();  // es is rewritten by the next tile
        }
        if (p.has_sinks != 0u) {
            const float sk = sinks[p.sinks_off + h];
            float ms = 1.0, vs = 1.0;
            if (sk > M) {
                precise float dm = M - sk;
#ifdef EXACT
                ms = expf_libm(dm);
#else
                ms = exp(dm);
#endif
                for (uint j = 0u; j < MAX_PAIRS; j++) {
                    if (t + j * WG >= hwv) break;
                    precise vec2 am = acc[j] * ms;
                    acc[j] = am;
                }
                M = sk;
            } else {
                precise float dm = sk - M;
#ifdef EXACT
                vs = expf_libm(dm);
#else
                vs = exp(dm);
#endif
            }
            precise float sm = S * ms;
            precise float sn = sm + vs;
            S = sn;
        }
        precise float inv = p.has_sinks != 0u && S == 0.0 ? 0.0 : 1.0 / S;
        const uint ob = p.o_off + r * p.o_rs + h * p.hdv;
        for (uint j = 0u; j < MAX_PAIRS; j++) {
            const uint pi = t + j * WG;
            if (pi >= hwv) break;
            precise vec2 ov = acc[j] * inv;
            o[ob + 2u * pi] = ov.x;
            o[ob + 2u * pi + 1u] = ov.y;
        }
        barrier();  // qs is rewritten for the next row
    }
}
