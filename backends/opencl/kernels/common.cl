/* What every kernel of the OpenCL backend shares: float rules, the numeric
 * helpers written bit for bit as the CPU backend's C (half conversion,
 * glibc's expf and logf, ggml's SiLU polynomial), and the element reader
 * of every weight type.
 *
 * The first of the .cl files here (the others follow in file-name order) and built
 * once per device (backends/opencl/ocl_program.c). The host passes the block
 * layouts of base/types.h as -D options (WEFT_T_<TYPE> the type ids,
 * WEFT_B_<TYPE> the block bytes, WEFT_QK_<TYPE> the elements per block,
 * WEFT_O_<TYPE>_<FIELD> a field's byte offset in its block, WEFT_KV_<BOOK>
 * a code book's 16 values), so this file has no layout numbers of its own.
 * Buffers arrive as (global uchar *, byte offset) pairs: a weft view is a
 * buffer and an offset, and sub-allocated buffers are offsets inside one
 * cl_mem.
 *
 * No contraction: the CPU backend is compiled with -ffp-contract=off and
 * spells out each fused multiply-add; OpenCL C contracts by default. */
#pragma OPENCL FP_CONTRACT OFF
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define WEFT_F64 1
#endif

#define KV_BLOCK WEFT_KV_BLOCK_TOKENS

/* set when a kernel meets input it cannot use (an id outside a table);
 * the host reports it at sync */
#define FLAG_ERROR(err, code) atomic_cmpxchg((volatile global int *)(err), 0, (code))

#define F32P(b, off) ((global float *)((b) + (off)))
#define I32P(b, off) ((global const int *)((b) + (off)))

/* IEEE half <-> float as base/types.h (round to nearest even) */
inline float h2f(ushort h)
{
    uint sign = (uint)(h & 0x8000) << 16;
    uint ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (ex == 0) {
        if (man == 0) return as_float(sign);
        float f = (float)man * 0x1p-24f;  /* exact */
        return sign ? -f : f;
    }
    if (ex == 31) return as_float(sign | 0x7f800000u | (man << 13));
    return as_float(sign | ((ex + 112) << 23) | (man << 13));
}

inline ushort f2h(float f)
{
    uint x = as_uint(f);
    uint sign = (x >> 16) & 0x8000;
    uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (ushort)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (ushort)(sign | 0x7c00);
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return (ushort)sign;
        uint e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint shift = 126 - e;
        uint hm = m >> shift, rem = m & ((1u << shift) - 1), half_ = 1u << (shift - 1);
        if (rem > half_ || (rem == half_ && (hm & 1))) hm++;
        return (ushort)(sign | hm);
    }
    uint h = ((ax - 0x38000000u) >> 13);
    uint rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (ushort)(sign | h);
}

inline ushort ld16(global const uchar *p) { return (ushort)(p[0] | (p[1] << 8)); }
/* an F16 value at p (2-byte aligned: every block layout and row is, but
 * MXFP4's, which has none): the built-in conversion, exact like h2f */
inline float ldh(global const uchar *p) { return vload_half(0, (global const half *)p); }

/* ggml_v_expf's polynomial for one lane (backends/cpu/cpu_expf.h) */
inline float expf_poly(float x)
{
    const float r = 0x1.8p23f;
    const float z = fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fma(-n, 0x1.7f7d1cp-20f, fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fma(fma(fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                        fma(0x1.ffffecp-1f, b, 1.0f));
    if (fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return ldexp(j, (int)n);
}

#ifdef WEFT_F64
/* glibc's expf (shaders/expf_libm.glsl says how): what the CPU's softmax
 * and SiLU tail get from libm. As glibc's FMA build (x86-64 with FMA, and
 * every AArch64 build) contracts it: k = x·N/ln2 + shift and r = x·N/ln2 - k
 * from the unrounded product, the polynomial's three steps fused; equal to
 * Debian 12's glibc 2.36 expf on all 2^32 floats (the plain-double form
 * differs at x = 0x1.04845ep+5 and -0x1.f8cbb2p+5). WEFT_EXPF_PLAIN (the
 * host passes it when its libm gives the plain form's value there): that
 * form. */
constant ulong EXPF_TAB[32] = {
    0x3ff0000000000000ul, 0x3fefd9b0d3158574ul, 0x3fefb5586cf9890ful, 0x3fef9301d0125b51ul,
    0x3fef72b83c7d517bul, 0x3fef54873168b9aaul, 0x3fef387a6e756238ul, 0x3fef1e9df51fdee1ul,
    0x3fef06fe0a31b715ul, 0x3feef1a7373aa9cbul, 0x3feedea64c123422ul, 0x3feece086061892dul,
    0x3feebfdad5362a27ul, 0x3feeb42b569d4f82ul, 0x3feeab07dd485429ul, 0x3feea47eb03a5585ul,
    0x3feea09e667f3bcdul, 0x3fee9f75e8ec5f74ul, 0x3feea11473eb0187ul, 0x3feea589994cce13ul,
    0x3feeace5422aa0dbul, 0x3feeb737b0cdc5e5ul, 0x3feec49182a3f090ul, 0x3feed503b23e255dul,
    0x3feee89f995ad3adul, 0x3feeff76f2fb5e47ul, 0x3fef199bdd85529cul, 0x3fef3720dcef9069ul,
    0x3fef5818dcfba487ul, 0x3fef7c97337b9b5ful, 0x3fefa4afa2a490daul, 0x3fefd0765b6e4540ul};

inline float expf_libm(float x)
{
    const uint ux = as_uint(x), abstop = (ux >> 20) & 0x7ffu;
    if (abstop >= 0x42bu) {
        if (ux == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8u) return x + x;
        if (x > as_float(0x42b17217u)) return INFINITY;
        if (x < as_float(0xc2cff1b4u)) return 0.0f;
    }
    const double inv_ln2_n = as_double(0x40471547652b82feul);
    const double shift = as_double(0x4338000000000000ul);
    const double c0 = as_double(0x3ebc6af84b912394ul);
    const double c1 = as_double(0x3f2ebfce50fac4f3ul);
    const double c2 = as_double(0x3f962e42ff0c52d6ul);
    const double xd = (double)x;
#ifdef WEFT_EXPF_PLAIN
    const double z = inv_ln2_n * xd;
    const double kd0 = z + shift;
    const double kd = kd0 - shift;
    const double r = z - kd;
    const double y = (c0 * r + c1) * (r * r) + (c2 * r + 1.0);
#else
    const double kd0 = fma(inv_ln2_n, xd, shift);
    const double kd = kd0 - shift;
    const double r = fma(inv_ln2_n, xd, -kd);
    const double y = fma(fma(c0, r, c1), r * r, fma(c2, r, 1.0));
#endif
    const ulong ki = as_ulong(kd0);
    const double s = as_double(EXPF_TAB[ki & 31] + (ki << 47));
    return (float)(y * s);
}

/* glibc's logf (2.28 and later: ARM optimized-routines' logf; DELTA_NET's
 * softplus). x = 2^k z with z in [OFF, 2 OFF) (OFF = 0x3f330000's value),
 * i = z's subinterval of 16, invc ~ 1/c and logc = log(c) for c its centre
 * (glibc's e_logf_data.c); r = z invc - 1, y0 = logc + k ln2, log(x) =
 * (A0 r^2 + (A1 r + A2)) r^2 + (y0 + r) in double, rounded once. Equal to
 * Debian 12's glibc 2.36 logf on every non-negative float, fused or not (the
 * FMA build's contraction changes no result: the plain form stands in). */
constant double LOGF_TAB[16][2] = {
    {0x1.661ec79f8f3bep+0, -0x1.57bf7808caadep-2}, {0x1.571ed4aaf883dp+0, -0x1.2bef0a7c06ddbp-2},
    {0x1.49539f0f010bp+0, -0x1.01eae7f513a67p-2},  {0x1.3c995b0b80385p+0, -0x1.b31d8a68224e9p-3},
    {0x1.30d190c8864a5p+0, -0x1.6574f0ac07758p-3}, {0x1.25e227b0b8eap+0, -0x1.1aa2bc79c81p-3},
    {0x1.1bb4a4a1a343fp+0, -0x1.a4e76ce8c0e5ep-4}, {0x1.12358f08ae5bap+0, -0x1.1973c5a611cccp-4},
    {0x1.0953f419900a7p+0, -0x1.252f438e10c1ep-5}, {0x1p+0, 0x0p+0},
    {0x1.e608cfd9a47acp-1, 0x1.aa5aa5df25984p-5},  {0x1.ca4b31f026aap-1, 0x1.c5e53aa362eb4p-4},
    {0x1.b2036576afce6p-1, 0x1.526e57720db08p-3},  {0x1.9c2d163a1aa2dp-1, 0x1.bc2860d224770p-3},
    {0x1.886e6037841edp-1, 0x1.1058bc8a07ee1p-2},  {0x1.767dcf5534862p-1, 0x1.4043057b6ee09p-2}};

inline float logf_libm(float x)
{
    uint ix = as_uint(x);
    if (ix == 0x3f800000u) return 0.0f;
    if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u) {  /* below 2^-126, negative, inf, NaN */
        if (ix * 2 == 0) return -INFINITY;
        if (ix == 0x7f800000u) return x;
        if ((ix & 0x80000000u) || ix * 2 >= 0xff000000u) return NAN;
        /* subnormal: x * 2^23's bits in integers (a device may flush the product), less 23 << 23 */
        const uint p = 31 - clz(ix);
        ix = ((p + 1) << 23) + ((ix << (23 - p)) & 0x7fffffu) - (23u << 23);
    }
    const uint tmp = ix - 0x3f330000u;
    const int i = (tmp >> 19) & 15, k = (int)tmp >> 23;
    const double z = (double)as_float(ix - (tmp & 0xff800000u));
    const double r = z * LOGF_TAB[i][0] - 1.0, y0 = LOGF_TAB[i][1] + (double)k * 0x1.62e42fefa39efp-1;
    const double r2 = r * r;
    const double y = (-0x1.00ea348b88334p-2 * r2 + (0x1.5575b0be00b6ap-2 * r + -0x1.ffffef20a4123p-2)) * r2 + (y0 + r);
    return (float)y;
}
#else
inline float expf_libm(float x) { return exp(x); }
inline float logf_libm(float x) { return log(x); }
#endif

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min (base/quant_blocks.h) */
inline void k4_scale_min(int j, global const uchar *q, uint *sc, uint *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The code books of IQ4_NL/IQ4_XS and MXFP4 (base/types.h's, passed as
 * WEFT_KV_<BOOK>) */
constant char KV_IQ4NL[16] = {WEFT_KV_IQ4NL};
constant char KV_MXFP4[16] = {WEFT_KV_MXFP4};

/* MXFP4's E8M0 scale halved, 2^(e - 128), exact (weft_e8m0_to_f32_half) */
inline float e8m0_half(uint e) { return as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23); }

/* code-book index j of 32 (IQ4_NL's and MXFP4's blocks, IQ4_XS's
 * sub-blocks), in Q4_0's order: low nibbles 0..15, high 16..31 */
inline int nl_nibble(global const uchar *qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

/* Q2_K/Q3_K: the low 2 bits of element i (weft_q2_bits) */
inline int q2_bits(global const uchar *qs, int i)
{
    return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

/* Q3_K: sub-block s's six-bit scale minus 32 (weft_q3_k_scales) */
inline int q3_scale(global const uchar *sc, int s)
{
    return (((sc[s % 8] >> (4 * (s / 8))) & 0xF) | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
}

/* IQ4_XS: sub-block s's six-bit scale minus 32 (weft_iq4_xs_scale) */
inline int iq4xs_scale(global const uchar *b, int s)
{
    const uint sh = ld16(b + WEFT_O_IQ4_XS_SCALES_H);
    return (((b[WEFT_O_IQ4_XS_SCALES_L + s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4)) - 32;
}

/* Element e of a row of weight type t, as base/quant.c dequantizes it (the
 * same operations in the same order, so the same bits). */
inline float dq(global const uchar *row, int t, int e)
{
    if (t == WEFT_T_F32) return ((global const float *)row)[e];
    if (t == WEFT_T_F16) return ldh(row + 2 * e);
    if (t == WEFT_T_BF16) return as_float((uint)ld16(row + 2 * e) << 16);
    if (t == WEFT_T_Q4_0) {
        global const uchar *b = row + (e / WEFT_QK_Q4_0) * WEFT_B_Q4_0;
        const int j = e % WEFT_QK_Q4_0, h = WEFT_QK_Q4_0 / 2;
        const int q = j < h ? (b[2 + j] & 0xF) : (b[2 + j - h] >> 4);
        return (float)(q - 8) * ldh(b);
    }
    if (t == WEFT_T_Q4_1) {
        global const uchar *b = row + (e / WEFT_QK_Q4_1) * WEFT_B_Q4_1;
        const int j = e % WEFT_QK_Q4_1, h = WEFT_QK_Q4_1 / 2;
        const int q = j < h ? (b[4 + j] & 0xF) : (b[4 + j - h] >> 4);
        return (float)q * ldh(b) + ldh(b + 2);
    }
    if (t == WEFT_T_Q5_0 || t == WEFT_T_Q5_1) {
        const bool one = t == WEFT_T_Q5_1;
        const int bs = one ? WEFT_B_Q5_1 : WEFT_B_Q5_0, qk = one ? WEFT_QK_Q5_1 : WEFT_QK_Q5_0;
        global const uchar *b = row + (e / qk) * bs;
        const int j = e % qk, h = qk / 2, o = one ? 4 : 2;
        const uint qh = (uint)b[o] | (uint)b[o + 1] << 8 | (uint)b[o + 2] << 16 | (uint)b[o + 3] << 24;
        global const uchar *qs = b + o + 4;
        const int lo = j < h ? (qs[j] & 0xF) : (qs[j - h] >> 4);
        const int q = lo | (int)(((qh >> j) & 1) << 4);
        return one ? (float)q * ldh(b) + ldh(b + 2) : (float)(q - 16) * ldh(b);
    }
    if (t == WEFT_T_Q8_0) {
        global const uchar *b = row + (e / WEFT_QK_Q8_0) * WEFT_B_Q8_0;
        return (float)(char)b[2 + e % WEFT_QK_Q8_0] * ldh(b);
    }
    if (t == WEFT_T_Q4_K || t == WEFT_T_Q5_K) {
        const bool five = t == WEFT_T_Q5_K;
        global const uchar *b = row + (e / WEFT_QK_K) * (five ? WEFT_B_Q5_K : WEFT_B_Q4_K);
        const int i = e % WEFT_QK_K, c = i / 64, w = i % 64, l = w % 32, is = 2 * c + (w >= 32);
        global const uchar *qs = b + 4 + 12 + (five ? WEFT_QK_K / 8 : 0) + 32 * c;
        uint sc, m;
        k4_scale_min(is, b + 4, &sc, &m);
        const float d1 = ldh(b) * (float)sc, m1 = ldh(b + 2) * (float)m;
        int q = w < 32 ? (qs[l] & 0xF) : (qs[l] >> 4);
        if (five && (b[16 + l] & (1u << is))) q += 16;
        return d1 * (float)q - m1;
    }
    if (t == WEFT_T_Q6_K) {
        global const uchar *b = row + (e / WEFT_QK_K) * WEFT_B_Q6_K;
        const int i = e % WEFT_QK_K, hh = i / 128, k = (i % 128) / 32, l = i % 32;
        global const uchar *ql = b + 64 * hh, *qh = b + WEFT_QK_K / 2 + 32 * hh;
        const int lo = (k & 1) ? ql[l + 32] : ql[l];
        const int q = (((k < 2) ? (lo & 0xF) : (lo >> 4)) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        const float d = ldh(b + WEFT_QK_K / 2 + WEFT_QK_K / 4 + WEFT_QK_K / 16);
        return d * (float)(char)b[WEFT_QK_K / 2 + WEFT_QK_K / 4 + i / 16] * (float)q;
    }
    if (t == WEFT_T_Q2_K) {
        global const uchar *b = row + (e / WEFT_QK_K) * WEFT_B_Q2_K;
        const int i = e % WEFT_QK_K;
        const uint sc = b[WEFT_O_Q2_K_SCALES + i / 16];
        const float dl = ldh(b + WEFT_O_Q2_K_D) * (float)(sc & 0xF), ml = ldh(b + WEFT_O_Q2_K_DMIN) * (float)(sc >> 4);
        return dl * (float)q2_bits(b + WEFT_O_Q2_K_QS, i) - ml;
    }
    if (t == WEFT_T_Q3_K) {
        global const uchar *b = row + (e / WEFT_QK_K) * WEFT_B_Q3_K;
        const int i = e % WEFT_QK_K;
        const float dl = ldh(b + WEFT_O_Q3_K_D) * (float)q3_scale(b + WEFT_O_Q3_K_SCALES, i / 16);
        const int hbit = (b[WEFT_O_Q3_K_HMASK + i % 32] >> (4 * (i / 128) + (i % 128) / 32)) & 1;
        return dl * (float)(q2_bits(b + WEFT_O_Q3_K_QS, i) - (hbit ? 0 : 4));
    }
    if (t == WEFT_T_IQ4_NL) {
        global const uchar *b = row + (e / WEFT_QK_IQ4_NL) * WEFT_B_IQ4_NL;
        return ldh(b + WEFT_O_IQ4_NL_D) * (float)KV_IQ4NL[nl_nibble(b + WEFT_O_IQ4_NL_QS, e % WEFT_QK_IQ4_NL)];
    }
    if (t == WEFT_T_IQ4_XS) {
        global const uchar *b = row + (e / WEFT_QK_K) * WEFT_B_IQ4_XS;
        const int i = e % WEFT_QK_K, s = i / 32;
        const float dl = ldh(b + WEFT_O_IQ4_XS_D) * (float)iq4xs_scale(b, s);
        return dl * (float)KV_IQ4NL[nl_nibble(b + WEFT_O_IQ4_XS_QS + 16 * s, i % 32)];
    }
    if (t == WEFT_T_MXFP4) {  /* 17-byte blocks: byte reads only */
        global const uchar *b = row + (e / WEFT_QK_MXFP4) * WEFT_B_MXFP4;
        return (float)KV_MXFP4[nl_nibble(b + WEFT_O_MXFP4_QS, e % WEFT_QK_MXFP4)] * e8m0_half(b[WEFT_O_MXFP4_E]);
    }
    return 0.0f;
}

/* bytes of n elements of type t (whole blocks) */
inline ulong row_bytes(int t, long n)
{
    if (t == WEFT_T_F32) return 4 * n;
    if (t == WEFT_T_F16 || t == WEFT_T_BF16) return 2 * n;
    if (t == WEFT_T_Q4_0) return n / WEFT_QK_Q4_0 * WEFT_B_Q4_0;
    if (t == WEFT_T_Q4_1) return n / WEFT_QK_Q4_1 * WEFT_B_Q4_1;
    if (t == WEFT_T_Q5_0) return n / WEFT_QK_Q5_0 * WEFT_B_Q5_0;
    if (t == WEFT_T_Q5_1) return n / WEFT_QK_Q5_1 * WEFT_B_Q5_1;
    if (t == WEFT_T_Q8_0) return n / WEFT_QK_Q8_0 * WEFT_B_Q8_0;
    if (t == WEFT_T_Q4_K) return n / WEFT_QK_K * WEFT_B_Q4_K;
    if (t == WEFT_T_Q5_K) return n / WEFT_QK_K * WEFT_B_Q5_K;
    if (t == WEFT_T_Q6_K) return n / WEFT_QK_K * WEFT_B_Q6_K;
    if (t == WEFT_T_Q2_K) return n / WEFT_QK_K * WEFT_B_Q2_K;
    if (t == WEFT_T_Q3_K) return n / WEFT_QK_K * WEFT_B_Q3_K;
    if (t == WEFT_T_IQ4_NL) return n / WEFT_QK_IQ4_NL * WEFT_B_IQ4_NL;
    if (t == WEFT_T_IQ4_XS) return n / WEFT_QK_K * WEFT_B_IQ4_XS;
    if (t == WEFT_T_MXFP4) return n / WEFT_QK_MXFP4 * WEFT_B_MXFP4;
    return 0;
}
