/* The neon_i8mm level's Q4_0 prefill tile (weft_cpu_gemm_fn): the smmla
 * instruction (vmmlaq_s32) gives the 2 x 2 int32 dot products of two weight
 * rows' and two activation rows' 8-byte pieces, so four of them make the
 * exact block totals of a 2 x 2 output tile. Q4_0's reference keeps one
 * float chain per output over exact block totals, sum += ((float)total *
 * dw) * dx (cpu_ref_dot.c), which is lane-wise the same float steps here,
 * four outputs per float32x4: bit-identical to the one-row dot
 * (tests/cpu/test_cpu_gemm.c checks every table's tiles). The other 32-element
 * types keep a float step per four-element lane, which 8-byte dot products
 * cannot give, so they have no smmla form: this level takes neon_dotprod's
 * sdot tiles for Q8_0, Q4_1, Q5_0 and Q5_1 (neon/q32_gemm_neon.c). */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "base/types.h"

#define I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))

/* row r's 32 weights as signed values in element order: lo = elements
 * 0..15, hi = 16..31 */
static inline I8MM void q4_0_signed(const struct weft_block_q4_0 *b, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t q = vld1q_u8(b->qs);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
}

/* the 2 x 2 block totals of weight rows (a, b) and activation rows (c, d):
 * lanes (a c, a d, b c, b d) */
static inline I8MM int32x4_t totals2x2(const struct weft_block_q4_0 *wa, const struct weft_block_q4_0 *wb,
                                       const struct weft_block_q8_0 *xc, const struct weft_block_q8_0 *xd)
{
    int8x16_t al, ah, bl, bh;
    q4_0_signed(wa, &al, &ah);
    q4_0_signed(wb, &bl, &bh);
    const int8x16_t c0 = vld1q_s8(xc->qs), c1 = vld1q_s8(xc->qs + 16);
    const int8x16_t d0 = vld1q_s8(xd->qs), d1 = vld1q_s8(xd->qs + 16);
#define ZIP1(x, y) vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)))
#define ZIP2(x, y) vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)))
    int32x4_t t = vmmlaq_s32(vdupq_n_s32(0), ZIP1(al, bl), ZIP1(c0, d0));
    t = vmmlaq_s32(t, ZIP2(al, bl), ZIP2(c0, d0));
    t = vmmlaq_s32(t, ZIP1(ah, bh), ZIP1(c1, d1));
    t = vmmlaq_s32(t, ZIP2(ah, bh), ZIP2(c1, d1));
#undef ZIP1
#undef ZIP2
    return t;
}

static I8MM void gemm_q4_0_i8mm(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,
                                float *out, size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_0;
    for (int j = 0; j < nx; j += 2) {
        const int j1 = j + 1 < nx ? j + 1 : j; /* an odd last row pairs with itself */
        const struct weft_block_q8_0 *xc = (const struct weft_block_q8_0 *)((const uint8_t *)x + (size_t)j * xs);
        const struct weft_block_q8_0 *xd = (const struct weft_block_q8_0 *)((const uint8_t *)x + (size_t)j1 * xs);
        for (int i = 0; i < nw; i += 2) {
            const int i1 = i + 1 < nw ? i + 1 : i;
            const struct weft_block_q4_0 *wa = (const struct weft_block_q4_0 *)((const uint8_t *)w + (size_t)i * ws);
            const struct weft_block_q4_0 *wb = (const struct weft_block_q4_0 *)((const uint8_t *)w + (size_t)i1 * ws);
            float32x4_t sum = vdupq_n_f32(0);
            for (int64_t b = 0; b < nb; b++) {
                const int32x4_t t = totals2x2(&wa[b], &wb[b], &xc[b], &xd[b]);
                const float da = weft_half_to_f32(wa[b].d), db = weft_half_to_f32(wb[b].d);
                const float dc = weft_half_to_f32(xc[b].d), dd = weft_half_to_f32(xd[b].d);
                const float dwv[4] = {da, da, db, db}, dxv[4] = {dc, dd, dc, dd};
                sum = vaddq_f32(sum, vmulq_f32(vmulq_f32(vcvtq_f32_s32(t), vld1q_f32(dwv)), vld1q_f32(dxv)));
            }
            float s[4];
            vst1q_f32(s, sum);
            out[(size_t)j * ldo + i] = s[0];
            if (i1 != i) out[(size_t)j * ldo + i1] = s[2];
            if (j1 != j) {
                out[(size_t)j1 * ldo + i] = s[1];
                if (i1 != i) out[(size_t)j1 * ldo + i1] = s[3];
            }
        }
    }
}

void weft_cpu_kernels_fill_neon_i8mm(struct weft_cpu_kernels *k) { k->gemm[WEFT_TYPE_Q4_0] = gemm_q4_0_i8mm; }

#else

void weft_cpu_kernels_fill_neon_i8mm(struct weft_cpu_kernels *k) { (void)k; }

#endif
