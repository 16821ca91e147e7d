#version 450
// variants: plain:-DPLAIN add:-DHAS_ADD plain_x:-DPLAIN,-DEXACT add_x:-DHAS_ADD,-DEXACT
// RMSNORM: h = x (+ add, stored to sum); out = h * (1/sqrt(mean(h²) + eps)) * w.
// One workgroup per row (rows strided by the group count); the sum of squares
// is reduced in shared memory. Every element is read and written by the same
// invocation in both passes, so sum/out may alias x in place.
// EXACT (devices with IEEE float and double arithmetic: lavapipe): the CPU's
// weft_cpu_rms_scale step for step: invocation 0 adds the float squares in
// double in element order, mean = float(sum / n), scale = 1 / sqrt(mean +
// eps) in float, out = (h * scale) * w; needs shaderFloat64.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
#ifdef HAS_ADD
layout(std430, binding = 3) readonly buffer A { float a[]; };
layout(std430, binding = 4) buffer S { float s[]; };
#endif
layout(push_constant) uniform P {
    uint x_off, x_rs, w_off, o_off, o_rs, a_off, a_rs, s_off, s_rs, ne0, ne1;
    float eps;
} p;

shared float red[256];

void main()
{
    const uint t = gl_LocalInvocationID.x;
#ifdef EXACT
    for (uint r = gl_WorkGroupID.x; r < p.ne1; r += gl_NumWorkGroups.x) {
        if (t == 0u) {
            double sum = 0.0;
            for (uint k = 0u; k < p.ne0; k++) {
#ifdef HAS_ADD
                precise float h = x[p.x_off + r * p.x_rs + k] + a[p.a_off + r * p.a_rs + k];
#else
                const float h = x[p.x_off + r * p.x_rs + k];
#endif
                precise float sq = h * h;
                precise double ns = sum + double(sq);
                sum = ns;
            }
            precise double md = sum / double(p.ne0);
            const float mean = float(md);
            precise float me = mean + p.eps;
            precise float sc = 1.0 / sqrt(me);
            red[0] = sc;
        }
        barrier();
        const float scale = red[0];
        for (uint k = t; k < p.ne0; k += 256u) {
#ifdef HAS_ADD
            precise float h = x[p.x_off + r * p.x_rs + k] + a[p.a_off + r * p.a_rs + k];
            s[p.s_off + r * p.s_rs + k] = h;
#else
            const float h = x[p.x_off + r * p.x_rs + k];
#endif
            precise float y = h * scale;
            precise float yw = y * w[p.w_off + k];
            o[p.o_off + r * p.o_rs + k] = yw;
        }
        barrier();  // red[0] read by all before the next row reuses it
    }
    return;
#endif
    for (uint r = gl_WorkGroupID.x; r < p.ne1; r += gl_NumWorkGroups.x) {
        float ss = 0.0;
        for (uint k = t; k < p.ne0; k += 256u) {
#ifdef HAS_ADD
            precise float h = x[p.x_off + r * p.x_rs + k] + a[p.a_off + r * p.a_rs + k];
            s[p.s_off + r * p.s_rs + k] = h;
#else
            float h = x[p.x_off + r * p.x_rs + k];
#endif
            precise float sq = h * h;
            ss += sq;
        }
        red[t] = ss;
        barrier();
        for (uint n = 128u; n > 0u; n >>= 1) {
            if (t < n) red[t] += red[t + n];
            barrier();
        }
        const float scale = 1.0 / sqrt(red[0] / float(p.ne0) + p.eps);
        barrier();  // red[0] read by all before the next row reuses red
        for (uint k = t; k < p.ne0; k += 256u) {
#ifdef HAS_ADD
            float h = s[p.s_off + r * p.s_rs + k];
#else
            float h = x[p.x_off + r * p.x_rs + k];
#endif
            precise float y = h * scale;
            o[p.o_off + r * p.o_rs + k] = y * w[p.w_off + k];
        }
    }
}
