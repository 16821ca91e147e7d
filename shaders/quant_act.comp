#version 450
// Activations rounded as the CPU backend (and ggml) rounds them before a
// matmul: x' = dequant(quant(x)) in the weight type's vec_dot type, written
// as f32 so the matmul shaders multiply the same values the CPU multiplies
// (random-weight models amplify even this rounding into visible logprob
// drift). Per variant, one thread per unit:
//   q8_0   block of 32: amax, d = f16(amax / 127), q = roundEven(x * 127 / amax),
//          x' = d * q
//   q8_1   as q8_0, and the block's s = f16(d * sum(q)) with the unrounded
//          d = amax / 127 at s_off (for Q4_1/Q5_1 weights: ggml's Q8_1)
//   q8_k   block of 256: max = the first element of largest |x|,
//          iscale = -127 / max, q = min(127, roundEven(iscale * x)), x' = q / iscale
//   f16    one element, round to nearest even half (as weft_f32_to_half)
//   bf16   one element, round to nearest even bfloat16 (as weft_f32_to_bf16)
//   q8_0x, q8_1x (ACT_EXACT, for shaders/mul_mat_exact.comp): the same
//          blocks as integers: q packed four int8 to a word at o_off (row
//          stride o_stride words), and per block (d, s) as float bits at
//          s_off + (r * s_stride + block) * 2 (s = 0 for q8_0x)
// Bindings: 0 x, 1 x' (f32); offsets and strides in floats.
// Every division and product is `precise`: bit for bit the CPU's on a device
// with IEEE float arithmetic.
// variants: q8_0:-DACT_Q8_0 q8_1:-DACT_Q8_0,-DACT_Q8_1 q8_k:-DACT_Q8_K f16:-DACT_F16 bf16:-DACT_BF16 q8_0x:-DACT_Q8_0,-DACT_EXACT q8_1x:-DACT_Q8_0,-DACT_Q8_1,-DACT_EXACT
#define WG 64u
layout(local_size_x = 64) in;

layout(binding = 0) readonly buffer XBuf { float data_x[]; };
#ifdef ACT_EXACT
layout(binding = 1) writeonly buffer OBuf { uint data_o[]; };
#else
layout(binding = 1) writeonly buffer OBuf { float data_o[]; };
#endif

layout(push_constant) uniform Push {
    uint x_off, x_stride;
    uint o_off, o_stride;
    uint K, M;
    uint s_off, s_stride;
} pc;

#if defined(ACT_Q8_0)
#define QA 32u
#elif defined(ACT_Q8_K)
#define QA 256u
#else
#define QA 1u
#endif

uint f32_to_half(float f)
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
/* exact, subnormals included */
float half_to_f32(uint h)
{
    const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0u) {
        const float f = float(man) * (1.0 / 16777216.0);
        return sign != 0u ? -f : f;
    }
    if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (man << 13));
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (man << 13));
}

void main()
{
    const uint units = pc.K / QA;
    const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
    if (idx >= units * pc.M) return;
    const uint r = idx / units, u = idx % units;
    const uint xb = pc.x_off + r * pc.x_stride + u * QA, ob = pc.o_off + r * pc.o_stride + u * QA;
#if defined(ACT_EXACT)
    float amax = 0.0;
    for (uint j = 0u; j < QA; j++) amax = max(amax, abs(data_x[xb + j]));
    precise float d0 = amax / 127.0;
    precise float id = amax != 0.0 ? 127.0 / amax : 0.0;
    int qsum = 0;
    const uint wo = pc.o_off + r * pc.o_stride + u * 8u;
    for (uint j = 0u; j < QA; j += 4u) {
        uint word = 0u;
        for (uint e = 0u; e < 4u; e++) {
            precise float xs = data_x[xb + j + e] * id;
            const int q = int(roundEven(xs));
            qsum += q;
            word |= (uint(q) & 0xffu) << (8u * e);
        }
        data_o[wo + j / 4u] = word;
    }
    const uint so = pc.s_off + (r * pc.s_stride + u) * 2u;
    data_o[so] = floatBitsToUint(half_to_f32(f32_to_half(d0)));
#ifdef ACT_Q8_1
    precise float sd = float(qsum) * d0;
    data_o[so + 1u] = floatBitsToUint(half_to_f32(f32_to_half(sd)));
#else
    data_o[so + 1u] = 0u;
#endif
#elif defined(ACT_Q8_0)
    float amax = 0.0;
    for (uint j = 0u; j < QA; j++) amax = max(amax, abs(data_x[xb + j]));
    const float d = half_to_f32(f32_to_half(amax / 127.0));
    const float id = amax != 0.0 ? 127.0 / amax : 0.0;
#ifdef ACT_Q8_1
    float qsum = 0.0;  /* exact: at most 32 * 127 */
    for (uint j = 0u; j < QA; j++) {
        const float q = roundEven(data_x[xb + j] * id);
        data_o[ob + j] = d * q;
        qsum += q;
    }
    precise float sd = qsum * (amax / 127.0);
    data_o[pc.s_off + r * pc.s_stride + u] = half_to_f32(f32_to_half(sd));
#else
    for (uint j = 0u; j < QA; j++) data_o[ob + j] = d * roundEven(data_x[xb + j] * id);
#endif
#elif defined(ACT_Q8_K)
    float amax = 0.0, mx = 0.0;
    for (uint j = 0u; j < QA; j++) {
        const float v = data_x[xb + j];
        if (amax < abs(v)) { amax = abs(v); mx = v; }
    }
    if (mx == 0.0) {
        for (uint j = 0u; j < QA; j++) data_o[ob + j] = 0.0;
        return;
    }
    const float iscale = -127.0 / mx, d = 1.0 / iscale;
    for (uint j = 0u; j < QA; j++) data_o[ob + j] = d * min(127.0, roundEven(iscale * data_x[xb + j]));
#elif defined(ACT_F16)
    data_o[ob] = half_to_f32(f32_to_half(data_x[xb]));
#elif defined(ACT_BF16)
    const uint b = floatBitsToUint(data_x[xb]);
    data_o[ob] = (b & 0x7fffffffu) > 0x7f800000u ? uintBitsToFloat(b | 0x400000u)
                                                  : uintBitsToFloat((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
#endif
}
