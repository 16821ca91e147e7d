/* NEON prefill tiles (weft_cpu_gemm_fn) and four-row decode dots (weft_cpu_dot4_fn, the
 * tiles' 4 x 1 form) for the code-book types against Q8_0 activations, on the neon and
 * neon_dotprod levels (neon_i8mm takes the dotprod ones through merge_lower): IQ4_NL
 * (gemm: the one-row dot's order; gemm_mm: tinyBLAS's one-chain order, which the dense
 * prefill takes) and MXFP4 (gemm), bit-identical to the same table's dot / dot_mm
 * (neon/kq_low_neon.c, which follows cpu_ref_dot.c's dot_nl_pairs; tests/cpu/test_cpu_gemm.c
 * and tests/cpu/test_cpu_q32_dot4.c check every table against them):
 *   - int32 lane l of a half block (elements 0..15, then 16..31) = the exact sum over its
 *     elements 4l..4l+3 of code-book value * x (vqtbl1q_s8 values, vdotq_s32 on
 *     neon_dotprod, vmull_s8 + pairwise adds on neon: any order gives the same ints);
 *   - the dot: blocks 0, 2, 4, .. into one pair of float32x4 accumulators and 1, 3, 5, ..
 *     into a second, acc = fma(float(lanes), dx * dw, acc); hsum8 of the two pairs added
 *     lane by lane; an odd last block adds its int total as sumf = fma(dx * dw, total, sumf)
 *     (the reference's scalar madd, q32_neon.c's WEFT_GGML_SCALAR_CONTRACT);
 *   - dot_mm (IQ4_NL): one pair of accumulators over every block, hsum8.
 * dx * dw is the same float as the dots' x.d * w.d or w.d * x.d (a product of two floats).
 * A tile of MR weight rows x NR activation rows unpacks each weight block once for its NR
 * activations and loads each activation block once for its MR weight rows; edge tiles are
 * their own (smaller) instances, so nothing is computed twice or stored past the edge.
 * The two-chain forms keep 4 accumulators per output, so they take 2 x 2 tiles (16 of the
 * 32 vector registers), the one-chain form 4 x 2. */
#include "backends/cpu/cpu_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/quant_blocks.h"
#include "base/types.h"
#include "backends/cpu/neon/neon_common.h"





/* by the FCVT instruction: the exact widening weft_half_to_f32 gives (a NaN's quiet bit aside) */
AI float h2f_at(const void *p)
{
    __fp16 f;
    memcpy(&f, p, sizeof f);
    return (float)f;
}

/* a weight block's scale as the dots read it (MXFP4: e8m0 halved; IQ4_NL: its f16 d) */
AI float nl_dw(const uint8_t *b, const int MX) { return MX ? weft_e8m0_to_f32_half(b[0]) : h2f_at(b); }

/* the code-book values of a block's nibbles: lo = elements 0..15 (low nibbles), hi = 16..31 */
AI void nl_values(const uint8_t *qs, int8x16_t kv, int8x16_t *lo, int8x16_t *hi)
{
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vqtbl1q_s8(kv, vandq_u8(q, vdupq_n_u8(0x0F)));
    *hi = vqtbl1q_s8(kv, vshrq_n_u8(q, 4));
}

static const int8_t kv_nl[16] = WEFT_KVALUES_IQ4NL;
static const int8_t kv_mx[16] = WEFT_KVALUES_MXFP4;

#define NL_MAXR 4
#define NL_MAXC 2

/* block b of the tile's MR x NR outputs into the accumulators A (inside NL_TILE) */
#define NL_STEP(DOT4, A, b)                                                                                        \
    do {                                                                                                           \
        int8x16_t x0[NL_MAXC], x1[NL_MAXC];                                                                        \
        float dx[NL_MAXC];                                                                                         \
        for (int c = 0; c < NR; c++) {                                                                             \
            const struct weft_block_q8_0 *xb = (const struct weft_block_q8_0 *)(x + c * xs) + (b);                 \
            x0[c] = vld1q_s8(xb->qs);                                                                              \
            x1[c] = vld1q_s8(xb->qs + 16);                                                                         \
            dx[c] = h2f_at(&xb->d);                                                                                \
        }                                                                                                          \
        for (int r = 0; r < MR; r++) {                                                                             \
            const uint8_t *wb = w + r * ws + (size_t)(b) * bs;                                                     \
            const float dw = nl_dw(wb, MX);                                                                        \
            int8x16_t lo, hi;                                                                                      \
            nl_values(wb + qoff, kv, &lo, &hi);                                                                    \
            for (int c = 0; c < NR; c++) {                                                                         \
                const float s = dx[c] * dw;                                                                        \
                A[r][c][0] = vfmaq_n_f32(A[r][c][0], vcvtq_f32_s32(DOT4(lo, x0[c])), s);                           \
                A[r][c][1] = vfmaq_n_f32(A[r][c][1], vcvtq_f32_s32(DOT4(hi, x1[c])), s);                           \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

/* MR weight rows at w (rows ws apart) x NR activation rows at x (xs apart), nb blocks;
 * ONE: the one-chain order (IQ4_NL's dot_mm), else the dot's two chains */
#define NL_TILE(SFX, ATTR, DOT4)                                                                                   \
    AI ATTR void nl_tile_##SFX(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nb, float *out,   \
                               size_t ldo, const int MR, const int NR, const int MX, const int ONE)                \
    {                                                                                                              \
        const int8x16_t kv = vld1q_s8(MX ? kv_mx : kv_nl);                                                         \
        const size_t bs = MX ? sizeof(struct weft_block_mxfp4) : sizeof(struct weft_block_iq4_nl);                 \
        const size_t qoff = MX ? 1 : 2; /* the nibbles' offset in a block */                                       \
        /* the even blocks' (and dot_mm's every block's) accumulators, the odd blocks' */                          \
        float32x4_t acc[NL_MAXR][NL_MAXC][2], acd[NL_MAXR][NL_MAXC][2];                                            \
        for (int r = 0; r < MR; r++)                                                                               \
            for (int c = 0; c < NR; c++)                                                                           \
                acc[r][c][0] = acc[r][c][1] = acd[r][c][0] = acd[r][c][1] = vdupq_n_f32(0);                        \
        const int64_t paired = ONE ? nb : nb & ~(int64_t)1;                                                        \
        for (int64_t b = 0; b < paired; b += ONE ? 1 : 2) {                                                        \
            NL_STEP(DOT4, acc, b);                                                                                 \
            if (!ONE) NL_STEP(DOT4, acd, b + 1);                                                                   \
        }                                                                                                          \
        for (int r = 0; r < MR; r++)                                                                               \
            for (int c = 0; c < NR; c++) {                                                                         \
                if (ONE) {                                                                                         \
                    out[c * ldo + r] = hsum8(acc[r][c][0], acc[r][c][1]);                                          \
                    continue;                                                                                      \
                }                                                                                                  \
                float sumf = hsum8(vaddq_f32(acc[r][c][0], acd[r][c][0]), vaddq_f32(acc[r][c][1], acd[r][c][1]));  \
                if (paired < nb) { /* the odd last block: its int total, one scalar madd */                        \
                    const uint8_t *wb = w + r * ws + (size_t)paired * bs;                                          \
                    const struct weft_block_q8_0 *xb = (const struct weft_block_q8_0 *)(x + c * xs) + paired;      \
                    int8x16_t lo, hi;                                                                              \
                    nl_values(wb + qoff, kv, &lo, &hi);                                                            \
                    const int32x4_t l = vaddq_s32(DOT4(lo, vld1q_s8(xb->qs)), DOT4(hi, vld1q_s8(xb->qs + 16)));    \
                    sumf = scalar_madd(h2f_at(&xb->d) * nl_dw(wb, MX), (float)vaddvq_s32(l), sumf);                \
                }                                                                                                  \
                out[c * ldo + r] = sumf;                                                                           \
            }                                                                                                      \
    }

#define NL_CASE(SFX, m, r, MX, ONE)                                                                                \
    case (m) * 8 + (r): nl_tile_##SFX(wp, ws, xp, xs, nb, o, ldo, m, r, MX, ONE); break;
/* the weight-row tiles outermost (a tile's rows stay in cache while the activations stream
 * by); MR x NR tiles, the edges as smaller ones */
#define NL_DRIVER(SFX, ATTR, NAME, MX, ONE, MR, NR)                                                                \
    static ATTR void NAME##_##SFX(const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, int64_t n,   \
                                  float *out, size_t ldo)                                                          \
    {                                                                                                              \
        const int64_t nb = n / 32;                                                                                 \
        for (int i = 0; i < nw; i += (MR)) {                                                                       \
            const int mr = nw - i < (MR) ? nw - i : (MR);                                                          \
            for (int j = 0; j < nx; j += (NR)) {                                                                   \
                const int nr = nx - j < (NR) ? nx - j : (NR);                                                      \
                const uint8_t *wp = (const uint8_t *)w + (size_t)i * ws, *xp = (const uint8_t *)x + (size_t)j * xs; \
                float *o = out + (size_t)j * ldo + i;                                                              \
                switch (mr * 8 + nr) {                                                                             \
                    NL_CASE(SFX, 1, 1, MX, ONE)                                                                    \
                    NL_CASE(SFX, 1, 2, MX, ONE)                                                                    \
                    NL_CASE(SFX, 2, 1, MX, ONE)                                                                    \
                    NL_CASE(SFX, 2, 2, MX, ONE)                                                                    \
                    NL_CASE(SFX, 3, 1, MX, ONE)                                                                    \
                    NL_CASE(SFX, 3, 2, MX, ONE)                                                                    \
                    NL_CASE(SFX, 4, 1, MX, ONE)                                                                    \
                    NL_CASE(SFX, 4, 2, MX, ONE)                                                                    \
                default: break;                                                                                    \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }

/* every form on one level: SFX base (neon) or dp (neon_dotprod) */
#define NL_FORMS(SFX, ATTR, DOT4)                                                                                  \
    NL_TILE(SFX, ATTR, DOT4)                                                                                       \
    NL_DRIVER(SFX, ATTR, gemm_iq4_nl, 0, 0, 2, 2)                                                                  \
    NL_DRIVER(SFX, ATTR, gemm_mm_iq4_nl, 0, 1, 4, 2)                                                               \
    NL_DRIVER(SFX, ATTR, gemm_mxfp4, 1, 0, 2, 2)                                                                   \
    /* decode: four rows against one activation row, the tile's 4 x 1 form */                                      \
    static ATTR void dot4_iq4_nl_##SFX(const void *w, size_t stride, const void *x, int64_t n, float out[4])       \
    {                                                                                                              \
        nl_tile_##SFX(w, stride, x, 0, n / WEFT_QK4_NL, out, 1, 4, 1, 0, 0);                                       \
    }                                                                                                              \
    static ATTR void dot4_mxfp4_##SFX(const void *w, size_t stride, const void *x, int64_t n, float out[4])        \
    {                                                                                                              \
        nl_tile_##SFX(w, stride, x, 0, n / WEFT_QK_MXFP4, out, 1, 4, 1, 1, 0);                                     \
    }

NL_FORMS(base, , dot4_base)
NL_FORMS(dp, DOTPROD, dot4_dp)

void weft_cpu_kernels_fill_neon_nl_gemm(struct weft_cpu_kernels *k, bool dotprod)
{
    k->gemm[WEFT_TYPE_IQ4_NL] = dotprod ? gemm_iq4_nl_dp : gemm_iq4_nl_base;
    k->gemm_mm[WEFT_TYPE_IQ4_NL] = dotprod ? gemm_mm_iq4_nl_dp : gemm_mm_iq4_nl_base;
    k->gemm[WEFT_TYPE_MXFP4] = dotprod ? gemm_mxfp4_dp : gemm_mxfp4_base;
    k->dot4[WEFT_TYPE_IQ4_NL] = dotprod ? dot4_iq4_nl_dp : dot4_iq4_nl_base;
    k->dot4[WEFT_TYPE_MXFP4] = dotprod ? dot4_mxfp4_dp : dot4_mxfp4_base;
}

#else

void weft_cpu_kernels_fill_neon_nl_gemm(struct weft_cpu_kernels *k, bool dotprod) { (void)k, (void)dotprod; }

#endif
