/* Float arithmetic bit for bit as the CPU backend's C, for the shaders'
 * EXACT variants on lavapipe (needs shaderFloat64).
 *
 * lavapipe's NIR options lower every 32-bit ffma to a multiply and an add
 * (two roundings), whatever `precise` says; the C code's fmaf rounds once.
 * fma_x(a, b, c) rounds once: a * b is exact in double (24 + 24 bits), the
 * double sum p + c is rounded to odd (its rounding error, by TwoSum, is
 * folded into the last bit) and the conversion to float then rounds to
 * nearest even as a single rounding would (double has more than 24 + 2
 * bits). Callers mark their own arithmetic `precise`. */
#ifndef WEFT_EXACT_GLSL
#define WEFT_EXACT_GLSL
float fma_x(float a, float b, float c)
{
    precise double p = double(a) * double(b);
    precise double dc = double(c);
    precise double s = p + dc;
    precise double bb = s - p;
    precise double e1 = s - bb;
    precise double e2 = p - e1;
    precise double e3 = dc - bb;
    precise double err = e2 + e3;
    uvec2 u = unpackDouble2x32(s);
    if (((u.y >> 20) & 0x7ffu) != 0x7ffu && err != 0.0) {  /* s finite (else err is NaN) */
        if ((u.x & 1u) == 0u) {
            if ((err > 0.0) == (s > 0.0)) {
                u.x += 1u;                                    /* away from zero: u.x is even, no carry */
            } else {
                if (u.x == 0u) u.y -= 1u;                      /* toward zero: borrow */
                u.x -= 1u;
            }
            s = packDouble2x32(u);
        }
    }
    return float(s);
}
#endif
