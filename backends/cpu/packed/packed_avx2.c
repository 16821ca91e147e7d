/* Repacked layouts for AVX2 machines (no AVX-512), so an AVX2-only CPU (Zen
 * 2/3 EPYCs, most desktops) streams one contiguous run per group of rows
 * too: Q4_0 decode and prefill on the x16 groups the AVX-512 VNNI kernels
 * stream (packed/layouts.h), Q4_1 decode on their x8 groups, Q8_0 decode on
 * x8 groups of its own (below).
 * out is bit-identical to the one-row dot (tests/cpu/test_cpu_packed.c,
 * tests/cpu/test_cpu_packed_prefill.c check every table that has the form).
 *
 * The reference order (ggml's repacked Q4_0, cpu_ref_dot.c's dot_q4_0) is one
 * float chain per output over exact block totals,
 *     sum += ((float)total * dw) * dx,
 * so a ymm holds eight weight rows' chains, one lane each; a 256-bit half of
 * a chunk holds rows 0..7 (or 8..15) x 4 elements, lane r = row r. The
 * integer total is exact whatever computes it: vpmaddubsw of the unsigned
 * nibbles (0..15) with the activations' 4-byte group broadcast gives int16
 * pair sums of at most 2 * 15 * 128; the eight of a block (4 chunks x low and
 * high nibbles) add in int16 to at most 30720, so nothing saturates; one
 * vpmaddwd by 1 makes the lane's int32, and adding -8 * sum(block of x)
 * (the aux / the unit's correction) gives the total of (q - 8) * x. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "base/types.h"
#include "backends/cpu/packed/layouts.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)

#include <immintrin.h>

#include "backends/cpu/cpu_target.h"
#include "backends/cpu/packed/packed.h"
#include "backends/cpu/q32/q32_avx2.h"

AI WEFT_AVX2 __m256i bc32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* the int16 pair sums of one 8-row half (chunks at q, 64 bytes apart) with
 * one activation block's 32 qs: at most 30720 per int16 */
AI WEFT_AVX2 __m256i half_sums(const uint8_t *q, const uint8_t *xq, __m256i m4)
{
    __m256i s = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 64 * k));
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), bc32(xq + 4 * k)));
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), bc32(xq + 16 + 4 * k)));
    }
    return s;
}

/* ((float)total * dw) * dx added to acc, lane-wise */
AI WEFT_AVX2 __m256 chain_step(__m256 acc, __m256i s16, __m256i corr, __m256 dw, __m256 dx)
{
    const __m256i t = _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), corr);
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(t), dw), dx));
}

/* ---- decode: one x16 group against one activation row ---- */
static WEFT_AVX2 void dotp_q4_0x16_avx2(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    const uint8_t *p = wp, *a = vaux;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t i = 0; i < nb; i++, p += WEFT_Q4P_GROUP, a += 8) {
        PREFETCH_COLUMN(p, WEFT_Q4P_GROUP);
        const __m256i corr = bc32(a);
        const __m256 dx = _mm256_broadcast_ss((const float *)(a + 4));
        const __m256i s0 = half_sums(p + 32, (const uint8_t *)x[i].qs, m4), s1 = half_sums(p + 64, (const uint8_t *)x[i].qs, m4);
        acc0 = chain_step(acc0, s0, corr, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), dx);
        acc1 = chain_step(acc1, s1, corr, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))), dx);
    }
    _mm256_storeu_ps(out, acc0);
    _mm256_storeu_ps(out + 8, acc1);
}

/* ---- prefill: one 8-row half of a group x NR activation units ----
 * A block's eight unpacked nibble vectors and its scales are made once and
 * serve NR activation rows (four: 8 weight + 4 accumulator registers). */
AI WEFT_AVX2 void q4p_half(const uint8_t *w, int h, const uint8_t *x, int64_t nb, float *out, size_t ldo, const int NR)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4];
    for (int j = 0; j < NR; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * WEFT_Q4P_GROUP;
        __m256i lo[4], hi[4];
        for (int k = 0; k < 4; k++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 32 + 32 * h + 64 * k));
            lo[k] = _mm256_and_si256(v, m4);
            hi[k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
        for (int j = 0; j < NR; j++) {
            const uint8_t *xb = x + ((size_t)j * nb + b) * WEFT_Q4P_UNIT;
            __m256i s = _mm256_maddubs_epi16(lo[0], bc32(xb));
            for (int k = 1; k < 4; k++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo[k], bc32(xb + 4 * k)));
            for (int k = 0; k < 4; k++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi[k], bc32(xb + 16 + 4 * k)));
            acc[j] = chain_step(acc[j], s, bc32(xb + 32), dw, _mm256_broadcast_ss((const float *)(xb + 36)));
        }
    }
    for (int j = 0; j < NR; j++) _mm256_storeu_ps(out + (size_t)j * ldo, acc[j]);
}

static WEFT_AVX2 void gemmp_q4_0_avx2(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out,
                                      size_t ldo)
{
    const int64_t nb = n / WEFT_QK4_0;
    const size_t gbytes = (size_t)nb * WEFT_Q4P_GROUP, ubytes = (size_t)nb * WEFT_Q4P_UNIT;
    for (int j = 0; j < nx; j += 4) {
        const int nr = nx - j < 4 ? nx - j : 4;
        const uint8_t *x = (const uint8_t *)xp + (size_t)j * ubytes;
        for (int g = 0; g < groups; g++)
            for (int h = 0; h < 2; h++) {
                /* half h: rows 8h..8h+7 (their scales 16h bytes into a
                 * column, their qs 32h bytes into each chunk) */
                const uint8_t *w = (const uint8_t *)wp + (size_t)g * gbytes;
                float *o = out + (size_t)j * ldo + 16 * g + 8 * h;
                switch (nr) {
                case 1: q4p_half(w, h, x, nb, o, ldo, 1); break;
                case 2: q4p_half(w, h, x, nb, o, ldo, 2); break;
                case 3: q4p_half(w, h, x, nb, o, ldo, 3); break;
                default: q4p_half(w, h, x, nb, o, ldo, 4); break;
                }
            }
    }
}

/* ---- Q4_1 x Q8_1, decode on the x8 groups ----
 * The reference is the one-row AVX2 kernel's (q32/q32_dot_avx2.c dot_q4_1):
 * per output 8 float lanes, lane l the exact int sum over elements
 * 4l..4l+3, acc = fma(dw * dx, float(lanes), acc), a scalar chain
 * summs = fma(m, sx, summs) (ggml_scalar_madd), and hsum_float_8(acc) +
 * summs. Eight outputs, eight accumulators; (d, m) of rows 0..3 widen to
 * d0 m0 .. d3 m3, so dm * dx holds the rows' dw * dx in its even lanes
 * (each broadcast from memory) and fma(dm, sx, sm) their summs chains in
 * its odd lanes. */
AI WEFT_AVX2 __m256 lanes_f(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(lanes_us(u, s)); }

static WEFT_AVX2 void dotp_q4_1x8_avx2(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    const uint8_t *p = wp;
    const float *a = vaux;
    const struct weft_block_q8_1 *x = vx;
    const int64_t nb = n / WEFT_QK4_1;
    __m256 acc[8], sm0 = _mm256_setzero_ps(), sm1 = sm0;
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, p += 160, a += 2) {
        PREFETCH_COLUMN(p, 160);
        const __m256i xq = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256 xd = _mm256_broadcast_ss(a), xs = _mm256_broadcast_ss(a + 1);
        const __m256 dm0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        const __m256 dm1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
#if WEFT_GGML_SCALAR_CONTRACT
        sm0 = _mm256_fmadd_ps(dm0, xs, sm0);
        sm1 = _mm256_fmadd_ps(dm1, xs, sm1);
#else
        sm0 = _mm256_add_ps(sm0, _mm256_mul_ps(dm0, xs));
        sm1 = _mm256_add_ps(sm1, _mm256_mul_ps(dm1, xs));
#endif
        float d[16] __attribute__((aligned(32)));
        _mm256_store_ps(d, _mm256_mul_ps(dm0, xd));
        _mm256_store_ps(d + 8, _mm256_mul_ps(dm1, xd));
        __asm__("" : "+m"(d)); /* broadcast each from memory, not by shuffles */
        for (int r = 0; r < 8; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + 2 * r), lanes_f(bytes_from_nibbles_32(p + 32 + 16 * r), xq),
                                     acc[r]);
    }
    float s[16];
    _mm256_storeu_ps(s, sm0);
    _mm256_storeu_ps(s + 8, sm1);
    for (int r = 0; r < 8; r++) out[r] = hsum_float_8(acc[r]) + s[2 * r + 1];
}

/* ---- Q8_0 x Q8_0, decode on x8 groups of its own ----
 * The AVX-512 VNNI x8 layout stores w + 128 for vpdpbusd; vpmaddubsw would
 * saturate on it, so here the weights stay signed and the lanes come as in
 * the one-row kernel, maddubs(|w|, x with w's sign) (pairs at most
 * 2 * 128 * 127). Block column, 272 bytes: d[8] (f16), then row r's 32 qs
 * at 16 + 32r. Per output the reference's steps (q32/q32_dot_avx2.c
 * dot_q8_0): acc = fma(dw * dx, float(lanes), acc), hsum_float_8(acc). */
static void pack_q8_0x8s(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n)
{
    const int64_t nb = n / WEFT_QK8_0;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_rows; g += 8)
        for (int64_t i = 0; i < nb; i++, o += 8 * sizeof(struct weft_block_q8_0))
            for (int r = 0; r < 8; r++) {
                const struct weft_block_q8_0 *b =
                    (const struct weft_block_q8_0 *)((const uint8_t *)w + (size_t)(g + r) * stride) + i;
                memcpy(o + 2 * r, &b->d, 2);
                memcpy(o + 16 + 32 * r, b->qs, 32);
            }
}

static WEFT_AVX2 void dotp_q8_0x8s_avx2(const void *wp, const void *vx, const void *vaux, int64_t n, float *out)
{
    (void)vaux;
    const uint8_t *p = wp;
    const struct weft_block_q8_0 *x = vx;
    const int64_t nb = n / WEFT_QK8_0;
    __m256 acc[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, p += 272) {
        PREFETCH_COLUMN(p, 272);
        const __m256i xq = _mm256_loadu_si256((const __m256i *)x[i].qs);
        float d[8] __attribute__((aligned(32)));
        _mm256_store_ps(d, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                                         _mm256_set1_ps(weft_half_to_f32(x[i].d))));
        __asm__("" : "+m"(d)); /* broadcast each from memory, not by shuffles */
        for (int r = 0; r < 8; r++) {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * r));
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + r),
                                     lanes_f(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xq, wq)), acc[r]);
        }
    }
    for (int r = 0; r < 8; r++) out[r] = hsum_float_8(acc[r]);
}

void weft_cpu_kernels_fill_avx2_packed(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni; /* the avx512vnni table has its own (packed/packed_q32.c) */
    k->packed[WEFT_TYPE_Q4_0] = (struct weft_cpu_packed){
        .rows = 16, .pack = weft_cpu_pack_q4_0x16, .aux_size = weft_cpu_aux8_size, .aux = weft_cpu_aux_q4_0,
        .dot = dotp_q4_0x16_avx2, .xrows = 1, .xp_size = weft_cpu_xp_size_q4_0, .xpack = weft_cpu_xpack_q4_0,
        .gemmp = gemmp_q4_0_avx2};
    k->packed[WEFT_TYPE_Q4_1] = (struct weft_cpu_packed){.rows = 8, .pack = weft_cpu_pack_q4_1x8,
                                                         .aux_size = weft_cpu_aux8_size, .aux = weft_cpu_aux_q4_1,
                                                         .dot = dotp_q4_1x8_avx2};
    k->packed[WEFT_TYPE_Q8_0] = (struct weft_cpu_packed){.rows = 8, .pack = pack_q8_0x8s, .dot = dotp_q8_0x8s_avx2};
}

#else

void weft_cpu_kernels_fill_avx2_packed(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }

#endif
