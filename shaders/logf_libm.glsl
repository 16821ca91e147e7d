/* glibc's logf (2.28 and later: ARM optimized-routines' logf, the one the
 * CPU backend's DELTA_NET softplus calls) in double arithmetic, for the
 * exact variants on lavapipe (needs shaderFloat64). For x = 2^k z, z in
 * [OFF, 2 OFF) with OFF = 0x3f330000's value (about 0.7) and exact:
 *   i = bits 19..22 of x's bits less OFF's (z's one of 16 subintervals),
 *   r = z * invc[i] - 1, y0 = logc[i] + k ln2,
 *   log(x) = y0 + r + r^2 (A0 r^2 + (A1 r + A2)), rounded to float once;
 * invc[i] is near 1/c for c the centre of interval i and logc[i] = log(c)
 * (the table and coefficients of glibc's e_logf_data.c, given here by their
 * bits: GLSL has no hex floats). x = 1 gives +0; 0 gives -inf; inf gives
 * inf; a negative x or a NaN gives NaN; a subnormal x is normalized in
 * integer arithmetic (glibc multiplies by 2^23, exact too, but a device may
 * flush subnormal floats). glibc's FMA build contracts r and the three
 * polynomial steps; checked on all 2^32 floats against Debian 12's glibc
 * 2.36 logf (a host program doing these steps in C doubles, with and
 * without those contractions): equal bit for bit (NaN for NaN) either way,
 * so plain double arithmetic stands in. Softplus's arguments are
 * 1 + expf(x) for x <= 20, in [1, 2^29). Every step is `precise`: callers
 * mark nothing. */
#ifndef WEFT_LOGF_LIBM_GLSL
#define WEFT_LOGF_LIBM_GLSL
/* (invc, logc) pairs, each double as (low word, high word) */
const uvec2 LOGF_TAB[32] = uvec2[32](
    uvec2(0x79f8f3beu, 0x3ff661ecu), uvec2(0x808caadeu, 0xbfd57bf7u),
    uvec2(0x4aaf883du, 0x3ff571edu), uvec2(0xa7c06ddbu, 0xbfd2bef0u),
    uvec2(0xf0f010b0u, 0x3ff49539u), uvec2(0x7f513a67u, 0xbfd01eaeu),
    uvec2(0xb0b80385u, 0x3ff3c995u), uvec2(0xa68224e9u, 0xbfcb31d8u),
    uvec2(0x0c8864a5u, 0x3ff30d19u), uvec2(0x0ac07758u, 0xbfc6574fu),
    uvec2(0x7b0b8ea0u, 0x3ff25e22u), uvec2(0xc79c8100u, 0xbfc1aa2bu),
    uvec2(0x4a1a343fu, 0x3ff1bb4au), uvec2(0xce8c0e5eu, 0xbfba4e76u),
    uvec2(0xf08ae5bau, 0x3ff12358u), uvec2(0x5a611cccu, 0xbfb1973cu),
    uvec2(0x419900a7u, 0x3ff0953fu), uvec2(0x38e10c1eu, 0xbfa252f4u),
    uvec2(0x00000000u, 0x3ff00000u), uvec2(0x00000000u, 0x00000000u),
    uvec2(0xfd9a47acu, 0x3fee608cu), uvec2(0x5df25984u, 0x3faaa5aau),
    uvec2(0x1f026aa0u, 0x3feca4b3u), uvec2(0xaa362eb4u, 0x3fbc5e53u),
    uvec2(0x576afce6u, 0x3feb2036u), uvec2(0x7720db08u, 0x3fc526e5u),
    uvec2(0x63a1aa2du, 0x3fe9c2d1u), uvec2(0x0d224770u, 0x3fcbc286u),
    uvec2(0x037841edu, 0x3fe886e6u), uvec2(0xc8a07ee1u, 0x3fd1058bu),
    uvec2(0xf5534862u, 0x3fe767dcu), uvec2(0x57b6ee09u, 0x3fd40430u));

float logf_libm(float x)
{
    uint ix = floatBitsToUint(x);
    if (ix == 0x3f800000u) return 0.0;
    if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u) {      /* below 2^-126, inf, NaN, negative */
        if (ix * 2u == 0u) return uintBitsToFloat(0xff800000u);
        if (ix == 0x7f800000u) return x;
        if ((ix & 0x80000000u) != 0u || ix * 2u >= 0xff000000u) return uintBitsToFloat(0x7fc00000u);
        const int p = findMSB(ix);                             /* subnormal: x * 2^23's bits, less 23 << 23 */
        ix = (uint(p + 1) << 23) + ((ix << uint(23 - p)) & 0x7fffffu) - (23u << 23);
    }
    const double ln2 = packDouble2x32(uvec2(0xfefa39efu, 0x3fe62e42u));
    const double a0 = packDouble2x32(uvec2(0x48b88334u, 0xbfd00ea3u));
    const double a1 = packDouble2x32(uvec2(0x0be00b6au, 0x3fd5575bu));
    const double a2 = packDouble2x32(uvec2(0xf20a4123u, 0xbfdffffeu));
    const uint tmp = ix - 0x3f330000u;
    const uint i = (tmp >> 19) & 15u;
    const int k = int(tmp) >> 23;                              /* arithmetic shift */
    const uint iz = ix - (tmp & 0xff800000u);
    const double invc = packDouble2x32(LOGF_TAB[2u * i]), logc = packDouble2x32(LOGF_TAB[2u * i + 1u]);
    precise double z = double(uintBitsToFloat(iz));
    precise double r = z * invc - 1.0;
    precise double y0 = logc + double(k) * ln2;
    precise double r2 = r * r;
    precise double y1 = a1 * r + a2;
    precise double y2 = a0 * r2 + y1;
    precise double y = y2 * r2 + (y0 + r);
    return float(y);
}
#endif
