#version 450
// LOGITS' soft-cap (api 6), in place: o[r][k] = tanh(o[r][k] * inv) * cap with
// inv = 1 / cap (llama.cpp's scale, tanh, scale). Offsets and row strides in
// floats. Grid: x covers ne0 in 256s, y walks rows (strided by the y group count).
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer O { float o[]; };
layout(push_constant) uniform P { uint o_off, o_rs, ne0, ne1; float cap, inv; } p;

void main()
{
    uint k = gl_GlobalInvocationID.x;
    if (k >= p.ne0) return;
    for (uint r = gl_WorkGroupID.y; r < p.ne1; r += gl_NumWorkGroups.y) {
        const uint i = p.o_off + r * p.o_rs + k;
        precise float t = o[i] * p.inv;
        o[i] = tanh(t) * p.cap;
    }
}
