#version 450
// ADD: out[r][k] = a[r][k] + b[r][k]; api 10's scale (!= 0): out = (a + b) * scale,
// the sum rounded to F32 before the product (`precise`: the CPU's two roundings).
// Offsets and row strides in floats.
// Grid: x covers ne0 in 256s, y walks rows (strided by the y group count).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint a_off, a_rs, b_off, b_rs, o_off, o_rs, ne0, ne1; float scale; } p;

void main()
{
    uint k = gl_GlobalInvocationID.x;
    if (k >= p.ne0) return;
    for (uint r = gl_WorkGroupID.y; r < p.ne1; r += gl_NumWorkGroups.y) {
        precise float s = a[p.a_off + r * p.a_rs + k] + b[p.b_off + r * p.b_rs + k];
        if (p.scale != 0.0) {
            precise float y = s * p.scale;
            s = y;
        }
        o[p.o_off + r * p.o_rs + k] = s;
    }
}
