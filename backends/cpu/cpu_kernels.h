/* CPU kernel tables, one per instruction set, chosen at run time.
 *
 * Every table computes bit-identical results (which NaN comes out of a NaN
 * input aside): each SIMD kernel follows the float order of the portable
 * reference in cpu_ref_dot.c (which follows ggml's x86 kernels, so weft
 * matches llama.cpp's outputs), only faster. tests/cpu/test_cpu_*.c check
 * every entry of every table this machine can run against the reference,
 * bit for bit.
 *
 * The levels, each a superset of the one below (a table lacks nothing its
 * lower level has: merge_lower fills its gaps):
 *   scalar      portable C (backends/cpu/cpu_ref_dot.c and the scalar ops)
 *   avx2        AVX2 + FMA + F16C, 256-bit forms only
 *   avx512      AVX-512 F/BW/DQ/VL: zmm forms, without VNNI's dot products
 *   avx512vnni  avx512 + AVX512_VNNI: the vpdpbusd forms of the quantized dots,
 *               tiles and packed layouts
 * weft_cpu_isa_supported is the one CPU-feature probe; the fill functions
 * below are told the level they fill for and never probe, and run from one
 * table in cpu_kernels.c (fills[], in order).
 *
 * What the tables hold: for each weight type and form, the levels where a
 * kernel of its own starts (s scalar, 2 avx2, 5 avx512, v avx512vnni; a level
 * without one uses the one below; - no such form). dot: one row (ggml's
 * vec_dot order); dotmm: the multi-row order (tinyBLAS); dot4: four rows at
 * once; gemm/gemmm: register-blocked prefill tiles of dot/dotmm; pack: a
 * repacked weight layout for decode; packx: prefill on that layout; quant:
 * the activation quantizer for the type's vec_dot type.
 * tests/cpu/test_cpu_tables.c rebuilds this from the tables and fails if it differs:
 *   type   dot   dotmm dot4  gemm  gemmm pack  packx quant
 *   F32    s25   s25   -     -     5     -     -     s
 *   F16    s2    s2    -     -     5     -     -     s2
 *   BF16   s25   s25   -     -     5     -     -     s2
 *   Q4_0   s2    -     2     2     -     2v    2v    s2
 *   Q4_1   s2    -     25v   2v    -     2v    v     s2
 *   Q5_0   s2    -     2     2v    -     v     -     s2
 *   Q5_1   s2    -     2     2     -     -     -     s2
 *   Q8_0   s2    -     25v   2v    -     2v    v     s2
 *   Q4_K   s2    -     -     v     -     2v    2v    s2
 *   Q5_K   s2    -     -     -     -     2     2     s2
 *   Q6_K   s2    -     -     -     -     2v    2v    s2
 *   Q2_K   s2    -     -     2     -     -     -     s2
 *   Q3_K   s2    -     -     2     -     -     -     s2
 *   IQ4_NL s2    s2    2     2     2     -     -     s2
 *   IQ4_XS s2    -     2     2     -     -     -     s2
 *   MXFP4  s2    -     2     2     -     -     -     s2
 *   other f16_mad f16_scale swiglu attn_row attn_group: s2    s2    s25   25    25
 *
 * On AArch64 the levels are scalar < neon < neon_dotprod < neon_i8mm (backends/cpu/neon/:
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, F16, F32
 * and BF16 dots, the dot_mm of F32, F16, BF16 and IQ4_NL, the Q8_0, Q8_1, Q8_K, F16 and BF16
 * activation quantizers (neon), Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS
 * and MXFP4 dot4 (Q4_1, Q5_0, Q5_1 in neon/q32_gemm_neon.c, Q4_K, Q5_K, Q6_K in
 * neon/kq_gemm_neon.c, IQ4_XS in neon/kq_low_gemm_neon.c; each the 4 x 1 form of its prefill
 * tile), the Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_XS, IQ4_NL and MXFP4 prefill tiles
 * (gemm; Q4_K, Q5_K and Q6_K in neon/kq_gemm_neon.c, Q2_K, Q3_K and IQ4_XS in
 * neon/kq_low_gemm_neon.c; neon_i8mm takes neon_dotprod's, save its own
 * smmla Q4_0 tile), IQ4_NL's gemm_mm (neon/nl_gemm_neon.c), the F16
 * accumulator updates, SwiGLU and the flash-attention row and group forms (attn_row,
 * attn_group: neon/attn_neon.c, head_dim 64-256; the upper levels take neon's) so far,
 * bit-identical to the x86 tables; the matrix above is x86's).
 *
 * The option cpu.isa=scalar|avx2|avx512|avx512vnni|neon|neon_dotprod|neon_i8mm (WEFT_CPU_ISA for the weft binary)
 * forces a table (for tests and comparisons); asking for one the CPU lacks
 * falls back to the best it has, with a warning on stderr. */
#ifndef WEFT_CPU_KERNELS_H
#define WEFT_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/types.h"

enum weft_cpu_isa {
    WEFT_CPU_ISA_SCALAR = 0,   /* portable C (any CPU) */
    WEFT_CPU_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C */
    WEFT_CPU_ISA_AVX512 = 2,   /* AVX-512 F/BW/DQ/VL */
    WEFT_CPU_ISA_AVX512_VNNI = 3, /* AVX-512 F/BW/DQ/VL + VNNI */
    WEFT_CPU_ISA_NEON = 4,     /* AArch64 Advanced SIMD (every AArch64 CPU) */
    WEFT_CPU_ISA_NEON_DOTPROD = 5, /* neon + the dot product instructions (ARMv8.2 dotprod) */
    WEFT_CPU_ISA_NEON_I8MM = 6, /* neon_dotprod + the int8 matrix multiply (smmla, ARMv8.6 i8mm) */
    WEFT_CPU_ISA_COUNT_
};

/* Dot of one weight row (n elements of the weight type) with one activation
 * row already converted to weft_vec_dot_type(weight type). */
typedef float (*weft_cpu_dot_fn)(const void *w, const void *x, int64_t n);
/* Convert n floats of activations to a vec_dot type (Q8_0, Q8_1, Q8_K, F16,
 * BF16, F32), bit-identical to weft_quantize_row_act. */
typedef void (*weft_cpu_quant_fn)(const float *x, void *y, int64_t n);

/* Four weight rows w, w + stride, w + 2 stride, w + 3 stride against one
 * activation row: out[i] bit-identical to dot(w + i * stride, x, n). Lets a
 * kernel share the activation loads and keep four row streams in flight. */
typedef void (*weft_cpu_dot4_fn)(const void *w, size_t stride, const void *x, int64_t n, float out[4]);
/* A block of a matmul for prefill: for i < nw, j < nx,
 *   out[j * ldo + i] = dot(w + i * wstride, x + j * xstride, n)
 * bit-identical to dot[] (so any tiling inside is free to reorder work across
 * outputs but never within one). nw <= 16; nx any. */
typedef void (*weft_cpu_gemm_fn)(const void *w, size_t wstride, int nw, const void *x, size_t xstride, int nx,
                                 int64_t n, float *out, size_t ldo);
/* Flash attention's F16 V accumulator (ggml's ggml_vec_mad_f16 /
 * ggml_vec_scale_f16): acc[i] = f16(fmaf(f32(v[i]), s, f32(acc[i]))) and
 * acc[i] = f16(f32(acc[i]) * s), rounding to nearest even. */
typedef void (*weft_cpu_f16_mad_fn)(weft_half *acc, const weft_half *v, float s, int64_t n);
typedef void (*weft_cpu_f16_scale_fn)(weft_half *acc, float s, int64_t n);
/* SwiGLU out[i] = silu(gate[i]) * up[i] as ggml_vec_swiglu_f32's AVX512F+DQ
 * branch: 16-element chunks use ggml_v_expf's polynomial, the n % 16
 * leftovers libm expf (weft_cpu_swiglu_ref is the reference for both). */
typedef void (*weft_cpu_swiglu_fn)(float *out, const float *gate, const float *up, int64_t n);
/* SSM_CONV's taps for channels [c0, c1) of a row, y[0 .. c1 - c0): recurrent/conv_row.c */
typedef void (*weft_cpu_conv_row_fn)(float *y, float *st, const float *x, const float *w, size_t w_nb1, int64_t C,
                                     int64_t K, int64_t c0, int64_t c1);
/* DELTA_NET for one (row, v head): recurrent/dn_row.c (weft_cpu_dn_row_ref is the reference) */
typedef void (*weft_cpu_dn_row_fn)(float *M, const float *q, const float *k, const float *v, float b, float decay,
                                   float qscale, float *out, int64_t S);

/* A repacked weight layout and its decode kernel. pack() stores rows
 * [0, n_rows) of a matrix (n_rows % rows == 0, row i at w + i * stride, n
 * elements each) as n_rows / rows groups of `rows` rows; group g starts at
 * dst + g * rows * weft_row_size(type, n) (the same bytes as the plain rows,
 * interleaved block by block so a group streams as one contiguous run).
 * dot() takes one group and one activation row in the vec_dot type plus its
 * aux bytes (made once per activation row by aux(), aux_size(n) bytes; NULL
 * aux_size: none) and gives out[i] bit-identical to dot[type](row i of the
 * group, x, n) for i < rows. */
typedef void (*weft_cpu_pack_fn)(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n);
typedef void (*weft_cpu_aux_fn)(const void *x, int64_t n, void *aux);
typedef void (*weft_cpu_dotp_fn)(const void *wp, const void *x, const void *aux, int64_t n, float *out);
/* Prefill over the same packed groups (optional). xpack() rearranges up to
 * xrows activation rows (vec_dot type, row j at x + j * xstride, nx <= xrows;
 * missing rows repeat the last one) into one unit of xp_size(n) bytes, once
 * per op. gemmp() runs `groups` consecutive packed groups (group g at
 * wp + g * rows * weft_row_size(type, n)) against nx activation rows held in
 * consecutive units at xp (unit u: rows u * xrows ..): for i < groups * rows,
 * j < nx, out[j * ldo + i] is bit-identical to dot[type](row i, x_j, n). */
typedef void (*weft_cpu_xpack_fn)(const void *x, size_t xstride, int nx, int64_t n, void *dst);
typedef void (*weft_cpu_gemmp_fn)(const void *wp, int groups, const void *xp, int nx, int64_t n, float *out,
                                  size_t ldo);
struct weft_cpu_packed {
    int rows;                  /* rows per group; 0: no packed form */
    weft_cpu_pack_fn pack;
    size_t (*aux_size)(int64_t n);
    weft_cpu_aux_fn aux;
    weft_cpu_dotp_fn dot;
    int xrows;                 /* activation rows per xpack unit; 0: no packed prefill */
    size_t (*xp_size)(int64_t n);
    weft_cpu_xpack_fn xpack;
    weft_cpu_gemmp_fn gemmp;
};

/* head dims the CPU's attention takes (DeepSeek's latent cache: 64 + 512 = 576) */
#define WEFT_CPU_MAX_HEAD_DIM 1024

/* One (row, head) of the CPU flash attention (ops/ops_attention.c describes the
 * float order it mirrors) over positions 0..n_pos-1 of a paged cache:
 * position p's K row (hd halves) is at k0 + bt[p / 16] * block_bytes +
 * (p % 16) * tok_bytes, its V row v_off bytes further. */
struct weft_cpu_attn_args {
    const float *q;            /* hd floats */
    float *out;                /* hd floats */
    const uint8_t *k0;         /* the head's K row of token 0 of physical block 0 */
    size_t v_off, block_bytes, tok_bytes;
    const int32_t *bt;         /* the sequence's physical blocks */
    int64_t n_pos;
    uint32_t hd;               /* <= WEFT_CPU_MAX_HEAD_DIM */
    float scale;
    int64_t p_first;           /* the first position attended (a sliding window); the
                                * table forms (attn_row, attn_group) take 0 only */
    float softcap;             /* scores soft-capped (backend.h); the table forms take 0 only */
    /* V rows unlike K's (head_dim_v != head_dim; the table forms take none):
     * v0 the head's V row of token 0 of physical block 0, v_tok_bytes a
     * token's V row, hd_v its head dim (<= WEFT_CPU_MAX_HEAD_DIM). v0 NULL: V is v_off after K */
    const uint8_t *v0;
    size_t v_tok_bytes;
    uint32_t hd_v;             /* 0: hd */
    /* an attention sink's logit (backend.h's ATTENTION sinks; the table forms take none) */
    bool has_sink;
    float sink;
};
/* Table form: hd % 64 == 0 and hd <= 256 only; bit-identical to
 * weft_cpu_attn_row_generic. */
typedef void (*weft_cpu_attn_row_fn)(const struct weft_cpu_attn_args *a);
/* n rows a[0..n) of heads sharing one KV head: equal k0, v_off, block_bytes,
 * tok_bytes, bt, n_pos, hd and scale, their own q and out. Each out is
 * bit-identical to weft_cpu_attn_row_generic of its args. */
typedef void (*weft_cpu_attn_group_fn)(const struct weft_cpu_attn_args *a, int n);

struct weft_cpu_kernels {
    enum weft_cpu_isa isa;
    const char *name;
    /* single-row order (ggml's vec_dot kernels), indexed by weight type */
    weft_cpu_dot_fn dot[WEFT_TYPE_COUNT_];
    /* multi-row order (llamafile tinyBLAS) for F32/F16/BF16, used when the
     * matmul has >= 2 activation rows, weight rows % 4 == 0 and k is a
     * multiple of mm_k_multiple[type]; NULL where ggml has no such path */
    weft_cpu_dot_fn dot_mm[WEFT_TYPE_COUNT_];
    int mm_k_multiple[WEFT_TYPE_COUNT_];
    /* activation quantizer, indexed by the vec_dot type */
    weft_cpu_quant_fn quant[WEFT_TYPE_COUNT_];
    /* optional four-row form of dot[] (NULL: the matmul calls dot 4 times) */
    weft_cpu_dot4_fn dot4[WEFT_TYPE_COUNT_];
    /* optional register-blocked form of dot[] for many activation rows */
    weft_cpu_gemm_fn gemm[WEFT_TYPE_COUNT_];
    /* optional register-blocked form of dot_mm[] (used where dot_mm is) */
    weft_cpu_gemm_fn gemm_mm[WEFT_TYPE_COUNT_];
    /* optional repacked layout for decode (rows == 0: none) */
    struct weft_cpu_packed packed[WEFT_TYPE_COUNT_];
    weft_cpu_f16_mad_fn f16_mad;
    weft_cpu_f16_scale_fn f16_scale;
    weft_cpu_swiglu_fn swiglu;
    weft_cpu_dn_row_fn dn_row;
    weft_cpu_conv_row_fn conv_row;
    weft_cpu_attn_row_fn attn_row;  /* optional (NULL: the generic row) */
    weft_cpu_attn_group_fn attn_group; /* optional, where attn_row applies (NULL: attn_row per head) */
};

/* The attention row from the table's dot[F16], f16_scale, f16_mad and libm
 * expf (ops/ops_attention.c): the reference for attn_row. */
void weft_cpu_attn_row_generic(const struct weft_cpu_kernels *k, const struct weft_cpu_attn_args *a);

/* The portable SwiGLU (the scalar table's entry); SIMD kernels call it for
 * the n % 16 leftovers so those stay on the very same libm expf code. */
void weft_cpu_swiglu_ref(float *out, const float *gate, const float *up, int64_t n);
void weft_cpu_conv_row_ref(float *y, float *st, const float *x, const float *w, size_t w_nb1, int64_t C, int64_t K,
                           int64_t c0, int64_t c1);
void weft_cpu_dn_row_ref(float *M, const float *q, const float *k, const float *v, float b, float decay, float qscale,
                         float *out, int64_t S);

/* Whether this CPU (and this build) can run the table. */
bool weft_cpu_isa_supported(enum weft_cpu_isa isa);
const char *weft_cpu_isa_name(enum weft_cpu_isa isa);
/* The best supported table, or the one option cpu.isa (scalar, avx2,
 * avx512, avx512vnni, neon, neon_dotprod, neon_i8mm) in opts (base/options.h) asks for, if supported (else a line on
 * stderr and the best). */
enum weft_cpu_isa weft_cpu_isa_select(const char *opts);
/* The table for isa (entries a SIMD table lacks are filled from the next
 * lower one, ending at the scalar reference); NULL if unsupported. */
const struct weft_cpu_kernels *weft_cpu_kernels_get(enum weft_cpu_isa isa);

/* The packed kernels' software prefetch distance in bytes ahead of the block
 * column being read (-1: none), process wide: weft_cpu_prefetch_default()
 * for this CPU until a CPU backend opens with cpu.prefetch=BYTES (a multiple
 * of 64, at most 65536; "off": none) or without it (the default again). Read
 * with relaxed atomics by the kernels. */
extern int weft_cpu_prefetch;
int weft_cpu_prefetch_default(void);

/* ---- SIMD kernels, one file per family; each fills the entries it has ----
 * vnni: filling the avx512vnni level (the AVX2 gemm file's VNNI tiles go
 * there too, never into the avx2 table); false: the forms without VNNI. */
void weft_cpu_kernels_fill_avx2_q(struct weft_cpu_kernels *k, bool vnni);   /* q32/q32_dot_avx2.c: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0, Q8_0/Q8_1 quant */
void weft_cpu_kernels_fill_avx2_k(struct weft_cpu_kernels *k, bool vnni);   /* kquant/kq_dot_avx2.c: Q4_K Q5_K Q6_K, Q8_K quant */
void weft_cpu_kernels_fill_avx2_low(struct weft_cpu_kernels *k, bool vnni); /* kquant/kq_low_avx2.c: Q2_K Q3_K IQ4_XS IQ4_NL MXFP4 */
void weft_cpu_kernels_fill_avx2_f(struct weft_cpu_kernels *k, bool vnni);   /* float/f_dot_avx2.c: F32 F16 BF16 (dot, dot_mm), F16/BF16 quant */
void weft_cpu_kernels_fill_avx512(struct weft_cpu_kernels *k, bool vnni);   /* float/f_dot_avx512.c: whatever AVX-512 speeds up */
void weft_cpu_kernels_fill_avx512_dot4(struct weft_cpu_kernels *k, bool vnni); /* q32/q32_dot4_avx512.c: four-row dots, zmm */
void weft_cpu_kernels_fill_avx2_attn(struct weft_cpu_kernels *k, bool vnni); /* attn/attn_avx2.c: f16_mad, f16_scale */
void weft_cpu_kernels_fill_avx2_dot4(struct weft_cpu_kernels *k, bool vnni); /* q32/q32_dot4_avx2.c: four-row dots */
void weft_cpu_kernels_fill_avx2_gemm(struct weft_cpu_kernels *k, bool vnni); /* q32/q32_gemm_avx2.c: prefill tiles */
void weft_cpu_kernels_fill_avx2_nl_gemm(struct weft_cpu_kernels *k, bool vnni); /* q32/nl_gemm_avx2.c: IQ4_NL, MXFP4 prefill tiles, dot4 */
void weft_cpu_kernels_fill_avx2_iq4xs_gemm(struct weft_cpu_kernels *k, bool vnni); /* kquant/iq4xs_gemm_avx2.c: IQ4_XS prefill tile, dot4 */
void weft_cpu_kernels_fill_avx2_low_gemm(struct weft_cpu_kernels *k, bool vnni); /* kquant/kq_low_gemm_avx2.c: Q2_K Q3_K prefill tiles */
void weft_cpu_kernels_fill_avx2_packed(struct weft_cpu_kernels *k, bool vnni);   /* packed/packed_avx2.c: repacked Q4_0 decode + prefill */
void weft_cpu_kernels_fill_avx2_packedk(struct weft_cpu_kernels *k, bool vnni);  /* packed/packed_kq_avx2.c: repacked Q4_K decode + prefill */
void weft_cpu_kernels_fill_avx2_packed_q6k(struct weft_cpu_kernels *k, bool vnni); /* packed/packed_q6k_avx2.c: repacked Q6_K decode + prefill */
void weft_cpu_kernels_fill_avx2_packed_q5k(struct weft_cpu_kernels *k, bool vnni); /* packed/packed_q5k_avx2.c: repacked Q5_K decode + prefill */
void weft_cpu_kernels_fill_avx512_packed(struct weft_cpu_kernels *k, bool vnni); /* packed/packed_q32.c: repacked decode */
void weft_cpu_kernels_fill_avx512_packedk(struct weft_cpu_kernels *k, bool vnni); /* packed/packed_kq.c: repacked decode, K-quants */
void weft_cpu_kernels_fill_avx512_gemm(struct weft_cpu_kernels *k, bool vnni);   /* q32/q32_gemm_avx512.c: prefill tiles (Q4_1) */
void weft_cpu_kernels_fill_avx512_gemmq(struct weft_cpu_kernels *k, bool vnni);  /* q32/q32_kq_gemm_avx512.c: Q5_0 prefill tiles */
void weft_cpu_kernels_fill_avx512_gemmf(struct weft_cpu_kernels *k, bool vnni);  /* float/f_gemm_avx512.c: F16/F32/BF16 gemm_mm */
void weft_cpu_kernels_fill_avx512_gemmp(struct weft_cpu_kernels *k, bool vnni);  /* packed/packed_prefill.c: prefill on packed weights */
void weft_cpu_kernels_fill_avx512_attn(struct weft_cpu_kernels *k, bool vnni);   /* attn/attn_avx512.c: attn_row */
void weft_cpu_kernels_fill_avx2_swiglu(struct weft_cpu_kernels *k, bool vnni);   /* swiglu/swiglu.c: swiglu (8-lane halves) */
void weft_cpu_kernels_fill_avx2_dn(struct weft_cpu_kernels *k, bool vnni);       /* recurrent/dn_row.c: dn_row */
void weft_cpu_kernels_fill_avx2_conv(struct weft_cpu_kernels *k, bool vnni);     /* recurrent/conv_row.c: conv_row */
void weft_cpu_kernels_fill_avx512_swiglu(struct weft_cpu_kernels *k, bool vnni); /* swiglu/swiglu.c: swiglu */
/* AArch64: dotprod, filling the neon_dotprod level (false: neon) */
void weft_cpu_kernels_fill_neon_q(struct weft_cpu_kernels *k, bool dotprod);      /* neon/q32_neon.c: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0, Q4_0/Q8_0 dot4 */
void weft_cpu_kernels_fill_neon_k(struct weft_cpu_kernels *k, bool dotprod);      /* neon/kq_neon.c: Q4_K Q5_K Q6_K */
void weft_cpu_kernels_fill_neon_low(struct weft_cpu_kernels *k, bool dotprod);    /* neon/kq_low_neon.c: Q2_K Q3_K IQ4_XS IQ4_NL MXFP4 */
void weft_cpu_kernels_fill_neon_gemm(struct weft_cpu_kernels *k, bool dotprod);   /* neon/q32_gemm_neon.c: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 gemm, Q4_1 Q5_0 Q5_1 dot4 */
void weft_cpu_kernels_fill_neon_nl_gemm(struct weft_cpu_kernels *k, bool dotprod); /* neon/nl_gemm_neon.c: IQ4_NL gemm gemm_mm, MXFP4 gemm, both dot4 */
void weft_cpu_kernels_fill_neon_low_gemm(struct weft_cpu_kernels *k, bool dotprod); /* neon/kq_low_gemm_neon.c: Q2_K Q3_K IQ4_XS gemm, IQ4_XS dot4 */
void weft_cpu_kernels_fill_neon_k_gemm(struct weft_cpu_kernels *k, bool dotprod);   /* neon/kq_gemm_neon.c: Q4_K Q5_K Q6_K gemm and dot4 */
void weft_cpu_kernels_fill_neon_i8mm(struct weft_cpu_kernels *k);                 /* neon/q32_i8mm.c: Q4_0 gemm */
void weft_cpu_kernels_fill_neon_f(struct weft_cpu_kernels *k);                    /* neon/f_neon.c: F16 F32 BF16 dots and dot_mm, F16/BF16 quant, f16_mad/scale, swiglu */
void weft_cpu_kernels_fill_neon_quant(struct weft_cpu_kernels *k);                /* neon/quant_neon.c: Q8_0 Q8_1 Q8_K quant */
void weft_cpu_kernels_fill_neon_attn(struct weft_cpu_kernels *k);                 /* neon/attn_neon.c: attn_row attn_group */

#endif
