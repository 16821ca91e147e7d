#version 450
// MATMUL_ID's weighted form (backend.h): out[r][n] = ((w[r][0] * y[r*k][n] +
// w[r][1] * y[r*k+1][n]) + ...) (+ add[r][n]), each product rounded, summed in
// slot order (`precise`: no fused multiply-add), y the slots' products
// (mul_mat_vec_id / mul_mm_id, in scratch, N floats a slot). `add` may alias
// `out`: each element is read, then written, by one invocation.
// Bindings: 0 y, 1 weights, 2 add (bound, unread, without has_add), 3 out.
// Offsets and row strides in floats. Grid: x covers N in 256s, y walks rows.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer W { float wt[]; };
layout(std430, binding = 2) readonly buffer A { float a[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint y_off, w_off, w_rs, a_off, a_rs, o_off, o_rs, N, rows, k, has_add; } p;

void main()
{
    const uint n = gl_GlobalInvocationID.x;
    if (n >= p.N) return;
    for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y) {
        const uint wb = p.w_off + r * p.w_rs, yb = p.y_off + r * p.k * p.N + n;
        precise float s = wt[wb] * y[yb];
        for (uint q = 1u; q < p.k; q++) {
            precise float t = wt[wb + q] * y[yb + q * p.N];
            precise float u = s + t;
            s = u;
        }
        if (p.has_add != 0u) {
            precise float u = s + a[p.a_off + r * p.a_rs + n];
            s = u;
        }
        o[p.o_off + r * p.o_rs + n] = s;
    }
}
