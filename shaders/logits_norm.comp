#version 450
// LOGITS, first half: out[i] = x[rows[i]] / rms(x[rows[i]]) * g, the rows
// that need sampling gathered into a dense scratch matrix for the output
// head's matmul. One workgroup per selected row; the sum of squares is a
// shared-memory tree (f32; ggml sums in double: differences ~1e-7 relative).
// A row index outside [0, x_rows) gives a row of zeros.
// EXACT (lavapipe; needs shaderFloat64): the CPU's weft_cpu_rms_scale step
// for step (invocation 0 sums the float squares in double in element order),
// out = (x * scale) * g.
// variants: std:-DSTD exact:-DEXACT
//
// Bindings: 0 x, 1 rows (int32), 2 g (norm weight), 3 out; offsets in elements.
#define WG 128u
layout(local_size_x = 128) in;

layout(binding = 0) readonly buffer XBuf { float data_x[]; };
layout(binding = 1) readonly buffer RBuf { int data_rows[]; };
layout(binding = 2) readonly buffer GBuf { float data_g[]; };
layout(binding = 3) writeonly buffer OBuf { float data_o[]; };

layout(push_constant) uniform Push {
    uint x_off, x_stride, x_rows;
    uint rows_off, g_off;
    uint o_off, o_stride;
    uint K;
    float eps;
} pc;

shared float red[WG];

void main()
{
    const uint i = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const int src = data_rows[pc.rows_off + i];
    const bool valid = src >= 0 && uint(src) < pc.x_rows;
    const uint xb = pc.x_off + (valid ? uint(src) : 0u) * pc.x_stride;
#ifdef EXACT
    if (tid == 0u) {
        double sum = 0.0;
        if (valid)
            for (uint k = 0u; k < pc.K; k++) {
                const float v = data_x[xb + k];
                precise float sq = v * v;
                precise double ns = sum + double(sq);
                sum = ns;
            }
        precise double md = sum / double(pc.K);
        const float mean = float(md);
        precise float me = mean + pc.eps;
        precise float sc = 1.0 / sqrt(me);
        red[0] = sc;
    }
    barrier();
    const float xscale = red[0];
    const uint xob = pc.o_off + i * pc.o_stride;
    for (uint k = tid; k < pc.K; k += WG) {
        precise float y = data_x[xb + k] * xscale;
        precise float yg = y * data_g[pc.g_off + k];
        data_o[xob + k] = valid ? yg : 0.0;
    }
    return;
#endif
    float ss = 0.0;
    if (valid)
        for (uint k = tid; k < pc.K; k += WG) {
            const float v = data_x[xb + k];
            ss += v * v;
        }
    red[tid] = ss;
    barrier();
    for (uint h = WG / 2u; h > 0u; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(red[0] / float(pc.K) + pc.eps);
    const uint ob = pc.o_off + i * pc.o_stride;
    for (uint k = tid; k < pc.K; k += WG)
        data_o[ob + k] = valid ? data_x[xb + k] * scale * data_g[pc.g_off + k] : 0.0;
}
