/* glibc's expf (2.27 and later: ARM optimized-routines' expf, the form the
 * CPU backend's softmax gets from libm) in double arithmetic, for the exact
 * attention on lavapipe (needs shaderFloat64). With N = 32:
 *   z = x * N/ln2 (double), k = z rounded to an integer (by adding and
 *   subtracting 1.5 * 2^52), r = z - k, s = 2^(k/N) from a table of
 *   2^(i/N) (i = k mod N; the table holds those doubles with i << 47
 *   subtracted from their bits, so adding k << 47 scales by 2^floor(k/N)),
 *   y = (C0 r + C1) r^2 + (C2 r + 1), result float(y * s);
 *   x >= 88 or x <= -103.97: inf / 0 / x + x for inf and NaN, as glibc.
 * The table values are 2^(i/32) rounded to nearest; C0..C2 are the
 * polynomial's coefficients scaled by N^-3, N^-2, N^-1. Checked on all
 * 2^32 floats against Debian 12's glibc 2.36 expf: equal except at
 * x = 0x1.04845ep+5 and x = -0x1.f8cbb2p+5 (one ulp), where a softmax never
 * looks (arguments are <= 0, and exp(-63.1) vanishes in every sum it joins).
 * glibc's FMA build contracts the three polynomial steps; with these
 * constants that changes no float result, so plain double arithmetic
 * (exact on lavapipe) stands in. Callers mark nothing: every step below is
 * `precise`. */
#ifndef WEFT_EXPF_LIBM_GLSL
#define WEFT_EXPF_LIBM_GLSL
const uvec2 EXPF_TAB[32] = uvec2[32](
    uvec2(0x00000000u, 0x3ff00000u), uvec2(0xd3158574u, 0x3fefd9b0u), uvec2(0x6cf9890fu, 0x3fefb558u),
    uvec2(0xd0125b51u, 0x3fef9301u), uvec2(0x3c7d517bu, 0x3fef72b8u), uvec2(0x3168b9aau, 0x3fef5487u),
    uvec2(0x6e756238u, 0x3fef387au), uvec2(0xf51fdee1u, 0x3fef1e9du), uvec2(0x0a31b715u, 0x3fef06feu),
    uvec2(0x373aa9cbu, 0x3feef1a7u), uvec2(0x4c123422u, 0x3feedea6u), uvec2(0x6061892du, 0x3feece08u),
    uvec2(0xd5362a27u, 0x3feebfdau), uvec2(0x569d4f82u, 0x3feeb42bu), uvec2(0xdd485429u, 0x3feeab07u),
    uvec2(0xb03a5585u, 0x3feea47eu), uvec2(0x667f3bcdu, 0x3feea09eu), uvec2(0xe8ec5f74u, 0x3fee9f75u),
    uvec2(0x73eb0187u, 0x3feea114u), uvec2(0x994cce13u, 0x3feea589u), uvec2(0x422aa0dbu, 0x3feeace5u),
    uvec2(0xb0cdc5e5u, 0x3feeb737u), uvec2(0x82a3f090u, 0x3feec491u), uvec2(0xb23e255du, 0x3feed503u),
    uvec2(0x995ad3adu, 0x3feee89fu), uvec2(0xf2fb5e47u, 0x3feeff76u), uvec2(0xdd85529cu, 0x3fef199bu),
    uvec2(0xdcef9069u, 0x3fef3720u), uvec2(0xdcfba487u, 0x3fef5818u), uvec2(0x337b9b5fu, 0x3fef7c97u),
    uvec2(0xa2a490dau, 0x3fefa4afu), uvec2(0x5b6e4540u, 0x3fefd076u));

float expf_libm(float x)
{
    const uint ux = floatBitsToUint(x), abstop = (ux >> 20) & 0x7ffu;
    if (abstop >= 0x42bu) {                                    /* |x| >= 88, inf, NaN */
        if (ux == 0xff800000u) return 0.0;
        if (abstop >= 0x7f8u) return x + x;
        if (x > uintBitsToFloat(0x42b17217u)) return uintBitsToFloat(0x7f800000u);
        if (x < uintBitsToFloat(0xc2cff1b4u)) return 0.0;
    }
    const double inv_ln2_n = packDouble2x32(uvec2(0x652b82feu, 0x40471547u));  /* 32 / ln 2 */
    const double shift = packDouble2x32(uvec2(0x00000000u, 0x43380000u));      /* 1.5 * 2^52 */
    const double c0 = packDouble2x32(uvec2(0x4b912394u, 0x3ebc6af8u));
    const double c1 = packDouble2x32(uvec2(0x50fac4f3u, 0x3f2ebfceu));
    const double c2 = packDouble2x32(uvec2(0xff0c52d6u, 0x3f962e42u));
    precise double z = inv_ln2_n * double(x);
    precise double kd0 = z + shift;
    const uint ki = unpackDouble2x32(kd0).x;                   /* low bits of k (two's complement) */
    precise double kd = kd0 - shift;
    precise double r = z - kd;
    const uvec2 t = EXPF_TAB[ki & 31u];
    const double s = packDouble2x32(uvec2(t.x, t.y + (ki << 15)));  /* + k << 47 */
    precise double p = c0 * r + c1;
    precise double r2 = r * r;
    precise double q = c2 * r + 1.0;
    precise double y = p * r2 + q;
    precise double ys = y * s;
    return float(ys);
}
#endif
