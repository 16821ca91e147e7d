/* Kernel tables and run-time instruction-set selection. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_expf.h"
#include "base/options.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "base/quant.h"
#include "backends/cpu/cpu_ref.h"

#if defined(__x86_64__)
#include <cpuid.h>
/* F16C via cpuid: clang 14's __builtin_cpu_supports does not know "f16c". */
static bool have_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* AVX512_VNNI: cpuid leaf 7, ECX bit 11 (GCC 12's __builtin_cpu_supports knows it, clang 14's does not) */
static bool have_avx512_vnni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 11) & 1);
}
#endif
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

/* ---- the portable reference, as table entries ---- */
#define REF_DOT(T)                                                                \
    static float ref_dot_##T(const void *w, const void *x, int64_t n)             \
    {                                                                             \
        return weft_vec_dot(WEFT_TYPE_##T, w, x, n);                              \
    }
REF_DOT(F32) REF_DOT(F16) REF_DOT(BF16) REF_DOT(Q4_0) REF_DOT(Q4_1) REF_DOT(Q5_0) REF_DOT(Q5_1)
REF_DOT(Q8_0) REF_DOT(Q4_K) REF_DOT(Q5_K) REF_DOT(Q6_K) REF_DOT(Q2_K) REF_DOT(Q3_K) REF_DOT(IQ4_NL)
REF_DOT(IQ4_XS) REF_DOT(MXFP4)

/* weft_vec_dot_mm with a shape that selects the multi-row order */
#define REF_DOT_MM(T)                                                             \
    static float ref_dot_mm_##T(const void *w, const void *x, int64_t n)          \
    {                                                                             \
        return weft_vec_dot_mm(WEFT_TYPE_##T, w, x, n, 4, 2);                     \
    }
REF_DOT_MM(F32) REF_DOT_MM(F16) REF_DOT_MM(BF16) REF_DOT_MM(IQ4_NL)

#define REF_QUANT(T)                                                              \
    static void ref_quant_##T(const float *x, void *y, int64_t n)                 \
    {                                                                             \
        weft_quantize_row_act(WEFT_TYPE_##T, x, y, n);                            \
    }
REF_QUANT(F32) REF_QUANT(F16) REF_QUANT(BF16) REF_QUANT(Q8_0) REF_QUANT(Q8_1) REF_QUANT(Q8_K)

static void ref_f16_mad(weft_half *acc, const weft_half *v, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] = weft_f32_to_half(fmaf(weft_half_to_f32(v[i]), s, weft_half_to_f32(acc[i])));
}

static void ref_f16_scale(weft_half *acc, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] = weft_f32_to_half(weft_half_to_f32(acc[i]) * s);
}

/* SwiGLU as ggml_vec_swiglu_f32 (AVX512F+DQ): 16-element chunks use
 * ggml_v_silu (x / (1 + ggml_v_expf(0 - x))) times g; the n % 16 leftovers
 * use ggml_silu_f32 (libm expf) times g. E.g. stories260K's n_ff 172 = 160
 * polynomial + 12 expf elements. Kept bit-exact for the F16 KV cache's sake
 * (see weft_cpu_rms_scale). */
void weft_cpu_swiglu_ref(float *y, const float *x, const float *g, int64_t n)
{
    const int64_t nv = n & ~(int64_t)15;
    for (int64_t i = 0; i < nv; i++) y[i] = x[i] / (1.0f + weft_cpu_expf(0.0f - x[i])) * g[i];
    for (int64_t i = nv; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i])) * g[i];
}

static void fill_scalar(struct weft_cpu_kernels *k)
{
    k->swiglu = weft_cpu_swiglu_ref;
    k->dn_row = weft_cpu_dn_row_ref;
    k->conv_row = weft_cpu_conv_row_ref;
    k->f16_mad = ref_f16_mad;
    k->f16_scale = ref_f16_scale;
#define D(T) k->dot[WEFT_TYPE_##T] = ref_dot_##T;
    D(F32) D(F16) D(BF16) D(Q4_0) D(Q4_1) D(Q5_0) D(Q5_1) D(Q8_0) D(Q4_K) D(Q5_K) D(Q6_K)
    D(Q2_K) D(Q3_K) D(IQ4_NL) D(IQ4_XS) D(MXFP4)
#undef D
    k->dot_mm[WEFT_TYPE_F32] = ref_dot_mm_F32;
    k->dot_mm[WEFT_TYPE_F16] = ref_dot_mm_F16;
    k->dot_mm[WEFT_TYPE_BF16] = ref_dot_mm_BF16;
    k->mm_k_multiple[WEFT_TYPE_F32] = 16;
    k->mm_k_multiple[WEFT_TYPE_F16] = 16;
    k->mm_k_multiple[WEFT_TYPE_BF16] = 32;
    k->dot_mm[WEFT_TYPE_IQ4_NL] = ref_dot_mm_IQ4_NL;  /* tinyBLAS_Q0_AVX: one accumulator */
    k->mm_k_multiple[WEFT_TYPE_IQ4_NL] = 32;
#define Q(T) k->quant[WEFT_TYPE_##T] = ref_quant_##T;
    Q(F32) Q(F16) Q(BF16) Q(Q8_0) Q(Q8_1) Q(Q8_K)
#undef Q
}

static const char *const isa_names[WEFT_CPU_ISA_COUNT_] = {"scalar", "avx2", "avx512", "avx512vnni", "neon",
                                                            "neon_dotprod", "neon_i8mm"};

const char *weft_cpu_isa_name(enum weft_cpu_isa isa)
{
    return isa < WEFT_CPU_ISA_COUNT_ ? isa_names[isa] : "?";
}

bool weft_cpu_isa_supported(enum weft_cpu_isa isa)
{
    switch (isa) {
    case WEFT_CPU_ISA_SCALAR: return true;
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
    case WEFT_CPU_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
    case WEFT_CPU_ISA_AVX512:
        return weft_cpu_isa_supported(WEFT_CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
    case WEFT_CPU_ISA_AVX512_VNNI:
        return weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512) && have_avx512_vnni();
#endif
#if defined(__aarch64__)
    case WEFT_CPU_ISA_NEON: return true;
    case WEFT_CPU_ISA_NEON_DOTPROD:
#ifdef HWCAP_ASIMDDP
        return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
        return false; /* kernel headers older than the dotprod hwcap */
#endif
    case WEFT_CPU_ISA_NEON_I8MM:
#ifdef HWCAP2_I8MM
        return weft_cpu_isa_supported(WEFT_CPU_ISA_NEON_DOTPROD) && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
        return false;
#endif
#endif
    default: return false;
    }
}

enum weft_cpu_isa weft_cpu_isa_select(const char *opts)
{
    enum weft_cpu_isa best = WEFT_CPU_ISA_SCALAR;
    for (int i = WEFT_CPU_ISA_COUNT_ - 1; i > 0; i--)
        if (weft_cpu_isa_supported((enum weft_cpu_isa)i)) { best = (enum weft_cpu_isa)i; break; }
    char env[32];
    if (weft_opt_get(opts, "cpu.isa", env, sizeof env) && *env) {
        for (int i = 0; i < WEFT_CPU_ISA_COUNT_; i++) {
            if (strcmp(env, isa_names[i]) == 0) {
                if (weft_cpu_isa_supported((enum weft_cpu_isa)i)) return (enum weft_cpu_isa)i;
                fprintf(stderr, "weft: cpu.isa=%s (WEFT_CPU_ISA) is not supported here; using %s\n", env,
                        isa_names[best]);
                return best;
            }
        }
        fprintf(stderr, "weft: unknown cpu.isa=%s (WEFT_CPU_ISA; scalar, avx2, avx512, avx512vnni, neon, neon_dotprod, neon_i8mm); using %s\n", env,
                isa_names[best]);
    }
    return best;
}

static struct weft_cpu_kernels tables[WEFT_CPU_ISA_COUNT_];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void merge_lower(struct weft_cpu_kernels *k, const struct weft_cpu_kernels *lower)
{
    for (int t = 0; t < WEFT_TYPE_COUNT_; t++) {
        if (!k->dot[t]) k->dot[t] = lower->dot[t];
        if (!k->dot_mm[t]) { k->dot_mm[t] = lower->dot_mm[t]; k->mm_k_multiple[t] = lower->mm_k_multiple[t]; }
        if (!k->quant[t]) k->quant[t] = lower->quant[t];
        if (!k->dot4[t] && k->dot[t] == lower->dot[t]) k->dot4[t] = lower->dot4[t];
        if (!k->gemm[t] && k->dot[t] == lower->dot[t]) k->gemm[t] = lower->gemm[t];
        if (!k->gemm_mm[t] && k->dot_mm[t] == lower->dot_mm[t]) k->gemm_mm[t] = lower->gemm_mm[t];
        if (!k->packed[t].rows && k->dot[t] == lower->dot[t]) k->packed[t] = lower->packed[t];
    }
    if (!k->f16_mad) k->f16_mad = lower->f16_mad;
    if (!k->f16_scale) k->f16_scale = lower->f16_scale;
    if (!k->swiglu) k->swiglu = lower->swiglu;
    if (!k->dn_row) k->dn_row = lower->dn_row;
    if (!k->conv_row) k->conv_row = lower->conv_row;
    if (!k->attn_row) { /* the pair together: attn_group goes with its attn_row */
        k->attn_row = lower->attn_row;
        k->attn_group = lower->attn_group;
    }
}

/* Every SIMD fill, in the order it runs, with the layer it fills: the avx2
 * layer of a table, or its avx512 layer (on top, merge_lower filling the
 * gaps from the layer beneath). The avx512vnni table is built as avx512 with
 * vnni = true in both layers (the AVX2 gemm file's zmm VNNI tiles sit in its
 * avx2 layer). cpu_kernels.h shows what the tables hold (type x form x level). */
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
static const struct {
    enum weft_cpu_isa layer;
    void (*fill)(struct weft_cpu_kernels *k, bool vnni);
} fills[] = {
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_q},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_k},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_low},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_f},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_attn},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_dot4},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_gemm},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_nl_gemm},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_iq4xs_gemm},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_low_gemm},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_swiglu},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_dn},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_conv},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_packed},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_packedk},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_packed_q6k},
    {WEFT_CPU_ISA_AVX2, weft_cpu_kernels_fill_avx2_packed_q5k},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_dot4},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_swiglu},
    /* the packed layouts first: gemmp attaches the packed prefill to them */
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_packed},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_packedk},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_attn},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_gemm},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_gemmp},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_gemmf},
    {WEFT_CPU_ISA_AVX512, weft_cpu_kernels_fill_avx512_gemmq},
};

static void fill_layer(struct weft_cpu_kernels *k, enum weft_cpu_isa layer, bool vnni)
{
    for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++)
        if (fills[i].layer == layer) fills[i].fill(k, vnni);
}
#endif

int weft_cpu_prefetch = 2560;

/* AMD (measured on Zen 4): 0, the column being read, all its lines asked
 * for at once; farther ahead costs there (2 threads, 0 against 2560:
 * SmolLM2 Q4_0 tg64 378-415 against 325-334 t/s, a Qwen3-30B-A3B-shape
 * Q4_K_M tg32 50-68 against 43-45). Elsewhere 2560 bytes, as measured on the
 * December 1 machine. */
int weft_cpu_prefetch_default(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_is("amd")) return 0;
#endif
    return 2560;
}

static void build_tables(void)
{
    __atomic_store_n(&weft_cpu_prefetch, weft_cpu_prefetch_default(), __ATOMIC_RELAXED);
    for (int i = 0; i < WEFT_CPU_ISA_COUNT_; i++) {
        tables[i].isa = (enum weft_cpu_isa)i;
        tables[i].name = isa_names[i];
    }
    fill_scalar(&tables[WEFT_CPU_ISA_SCALAR]);
#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
    fill_layer(&tables[WEFT_CPU_ISA_AVX2], WEFT_CPU_ISA_AVX2, false);
    merge_lower(&tables[WEFT_CPU_ISA_AVX2], &tables[WEFT_CPU_ISA_SCALAR]);
    fill_layer(&tables[WEFT_CPU_ISA_AVX512], WEFT_CPU_ISA_AVX512, false);
    merge_lower(&tables[WEFT_CPU_ISA_AVX512], &tables[WEFT_CPU_ISA_AVX2]);
    static struct weft_cpu_kernels avx2v;  /* avx512vnni's avx2 layer */
    fill_layer(&avx2v, WEFT_CPU_ISA_AVX2, true);
    merge_lower(&avx2v, &tables[WEFT_CPU_ISA_SCALAR]);
    fill_layer(&tables[WEFT_CPU_ISA_AVX512_VNNI], WEFT_CPU_ISA_AVX512, true);
    merge_lower(&tables[WEFT_CPU_ISA_AVX512_VNNI], &avx2v);
#endif
#if defined(__aarch64__)
    weft_cpu_kernels_fill_neon_q(&tables[WEFT_CPU_ISA_NEON], false);
    weft_cpu_kernels_fill_neon_k(&tables[WEFT_CPU_ISA_NEON], false);
    weft_cpu_kernels_fill_neon_low(&tables[WEFT_CPU_ISA_NEON], false);
    weft_cpu_kernels_fill_neon_f(&tables[WEFT_CPU_ISA_NEON]);
    weft_cpu_kernels_fill_neon_quant(&tables[WEFT_CPU_ISA_NEON]);
    weft_cpu_kernels_fill_neon_gemm(&tables[WEFT_CPU_ISA_NEON], false);
    weft_cpu_kernels_fill_neon_nl_gemm(&tables[WEFT_CPU_ISA_NEON], false);
    weft_cpu_kernels_fill_neon_attn(&tables[WEFT_CPU_ISA_NEON]);
    weft_cpu_kernels_fill_neon_low_gemm(&tables[WEFT_CPU_ISA_NEON], false);
    weft_cpu_kernels_fill_neon_k_gemm(&tables[WEFT_CPU_ISA_NEON], false);
    merge_lower(&tables[WEFT_CPU_ISA_NEON], &tables[WEFT_CPU_ISA_SCALAR]);
    weft_cpu_kernels_fill_neon_q(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    weft_cpu_kernels_fill_neon_k(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    weft_cpu_kernels_fill_neon_low(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    weft_cpu_kernels_fill_neon_gemm(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    weft_cpu_kernels_fill_neon_nl_gemm(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    weft_cpu_kernels_fill_neon_low_gemm(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    weft_cpu_kernels_fill_neon_k_gemm(&tables[WEFT_CPU_ISA_NEON_DOTPROD], true);
    merge_lower(&tables[WEFT_CPU_ISA_NEON_DOTPROD], &tables[WEFT_CPU_ISA_NEON]);
    weft_cpu_kernels_fill_neon_i8mm(&tables[WEFT_CPU_ISA_NEON_I8MM]);
    merge_lower(&tables[WEFT_CPU_ISA_NEON_I8MM], &tables[WEFT_CPU_ISA_NEON_DOTPROD]);
#endif
}

const struct weft_cpu_kernels *weft_cpu_kernels_get(enum weft_cpu_isa isa)
{
    if (isa >= WEFT_CPU_ISA_COUNT_ || !weft_cpu_isa_supported(isa)) return NULL;
    pthread_once(&tables_once, build_tables);
    return &tables[isa];
}
