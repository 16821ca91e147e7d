/* AVX2 + F16C forms of flash attention's F16 accumulator updates, bit-identical
 * to the scalar ones in cpu_kernels.c: F16C converts with round-to-nearest-
 * even exactly as weft_f32_to_half does for every non-NaN value, and the
 * accumulator never holds NaN unless its inputs do. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_target.h"

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
#include <immintrin.h>
#include <math.h>

WEFT_AVX2 static void f16_mad_avx2(weft_half *acc, const weft_half *v, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        a = _mm256_fmadd_ps(b, vs, a);
        _mm_storeu_si128((__m128i *)(acc + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) acc[i] = weft_f32_to_half(fmaf(weft_half_to_f32(v[i]), s, weft_half_to_f32(acc[i])));
}

WEFT_AVX2 static void f16_scale_avx2(weft_half *acc, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + i)));
        _mm_storeu_si128((__m128i *)(acc + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(a, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) acc[i] = weft_f32_to_half(weft_half_to_f32(acc[i]) * s);
}

void weft_cpu_kernels_fill_avx2_attn(struct weft_cpu_kernels *k, bool vnni)
{
    (void)vnni;
    k->f16_mad = f16_mad_avx2;
    k->f16_scale = f16_scale_avx2;
}
#else
void weft_cpu_kernels_fill_avx2_attn(struct weft_cpu_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
