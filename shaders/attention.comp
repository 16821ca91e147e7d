#version 450
// variants: f16:-DKV_F16 f16_sg:-DKV_F16,-DUSE_SUBGROUP
// ATTENTION over the paged F16 KV cache: one workgroup per (head, row),
// causal over positions 0..pos[row] of the row's sequence through its block
// table, GQA (kv head = head / (n_head / n_kv)), online softmax in tiles of
// 64 positions: each invocation scores one position of the tile (K·q, q
// rounded to F16 as the CPU does), the tile's max and sum are reduced
// (subgroup ops when the device has them, else shared memory), and each
// invocation accumulates its own pairs of output dims over the tile's V rows.
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#define WG 64u
#define MAX_PAIRS 4u  // head_dim <= 2 * WG * MAX_PAIRS = 512
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer C { uint cache[]; };
layout(std430, binding = 3) readonly buffer POS { int pos[]; };
layout(std430, binding = 4) readonly buffer SEQ { int seq[]; };
layout(std430, binding = 5) readonly buffer BTO { int bt_off[]; };
layout(std430, binding = 6) readonly buffer BT { int bt[]; };
layout(push_constant) uniform P {
    uint q_off, q_rs, o_off, o_rs;
    uint pos_off, seq_off, bto_off, bt_off0, n_rows;
    uint n_head, n_kv, hd, n_layer, layer;
    float scale;
} p;

shared float qs[512];
shared float es[WG];
shared float red[WG];

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

// word index of position pp's K row for kv head kvh (V is layer_words on)
uint k_word(uint blocks, uint pp, uint kvh, uint tok_words, uint layer_words)
{
    const uint blk = uint(bt[blocks + pp / 16u]);
    return ((blk * p.n_layer + p.layer) * 2u) * layer_words + (pp % 16u) * tok_words + kvh * (p.hd / 2u);
}

void main()
{
    const uint t = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x;
    const uint kvh = h / (p.n_head / p.n_kv);
    const uint hw = p.hd / 2u;
    const uint tok_words = p.n_kv * hw, layer_words = 16u * tok_words;
    for (uint r = gl_WorkGroupID.y; r < p.n_rows; r += gl_NumWorkGroups.y) {
        const uint qb = p.q_off + r * p.q_rs + h * p.hd;
        for (uint d = t; d < p.hd; d += WG) qs[d] = unpackHalf2x16(packHalf2x16(vec2(q[qb + d], 0.0))).x;
        barrier();
        const uint n_pos = uint(pos[p.pos_off + r]) + 1u;
        const uint blocks = p.bt_off0 + uint(bt_off[p.bto_off + uint(seq[p.seq_off + r])]);
        float M = -3.0e38, S = 0.0;
        vec2 acc[MAX_PAIRS];
        for (uint j = 0u; j < MAX_PAIRS; j++) acc[j] = vec2(0.0);
        for (uint tile = 0u; tile < n_pos; tile += WG) {
            const uint pp = tile + t;
            float s = -3.0e38;
            if (pp < n_pos) {
                const uint kw = k_word(blocks, pp, kvh, tok_words, layer_words);
                float dot = 0.0;
                for (uint i = 0u; i < hw; i++) {
                    const vec2 kk = unpackHalf2x16(cache[kw + i]);
                    dot += kk.x * qs[2u * i] + kk.y * qs[2u * i + 1u];
                }
                s = dot * p.scale;
            }
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
                if (pi >= hw) break;
                vec2 a = acc[j] * corr;
                for (uint u = 0u; u < n_tile; u++) {
                    const uint vw = k_word(blocks, tile + u, kvh, tok_words, layer_words) + layer_words;
                    a += es[u] * unpackHalf2x16(cache[vw + pi]);
                }
                acc[j] = a;
            }
            barrier();  // es is rewritten by the next tile
        }
        const float inv = 1.0 / S;
        const uint ob = p.o_off + r * p.o_rs + h * p.hd;
        for (uint j = 0u; j < MAX_PAIRS; j++) {
            const uint pi = t + j * WG;
            if (pi >= hw) break;
            o[ob + 2u * pi] = acc[j].x * inv;
            o[ob + 2u * pi + 1u] = acc[j].y * inv;
        }
        barrier();  // qs is rewritten for the next row
    }
}
