#version 450
// variants: f32:-DTYPE_F32 f16:-DTYPE_F16 bf16:-DTYPE_BF16 q8_0:-DTYPE_Q8_0 q4_0:-DTYPE_Q4_0 q4_1:-DTYPE_Q4_1 q5_0:-DTYPE_Q5_0 q5_1:-DTYPE_Q5_1 q4_k:-DTYPE_Q4_K q5_k:-DTYPE_Q5_K q6_k:-DTYPE_Q6_K q2_k:-DTYPE_Q2_K q3_k:-DTYPE_Q3_K iq4_nl:-DTYPE_IQ4_NL iq4_xs:-DTYPE_IQ4_XS mxfp4:-DTYPE_MXFP4
// EMBED: out[r] = dequant(table[ids[r]]) (* scale when scale != 0: one F32
// multiply after dequantizing, as the CPU). Table offsets in bytes (rows
// 2-byte aligned; MXFP4: any byte), ids and out in elements. An id outside the table gives a
// row of zeros (the CPU refuses the op; a shader cannot).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer T { uint data_t[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint t_off, t_rs, t_rows, id_off, o_off, o_rs, ne0, n; float scale; } p;

#define DQ_WORD(i) data_t[i]
#include "dequant.glsl"

void main()
{
    uint k = gl_GlobalInvocationID.x;
    if (k >= p.ne0) return;
    for (uint r = gl_WorkGroupID.y; r < p.n; r += gl_NumWorkGroups.y) {
        int id = ids[p.id_off + r];
        float v = 0.0;
        if (id >= 0 && uint(id) < p.t_rows) v = dq_get(p.t_off + uint(id) * p.t_rs, k);
        if (p.scale != 0.0) {
            precise float sv = v * p.scale;
            v = sv;
        }
        o[p.o_off + r * p.o_rs + k] = v;
    }
}
