/* The GPU kernels' launchers, callable from C: one interface for the CUDA
 * and HIP backends. kernels-cuda/ and kernels-hip/ each define every
 * function below (each into its own module, libweft-cuda.so or
 * libweft-hip.so, with hidden visibility, so the names never meet); the
 * shared host code calls them (backends/gpu/gpu_encode.c; api 5's and 7's
 * launchers through the runtime hooks of backends/gpu/gpu_common.h).
 *
 * Most launcher bodies are themselves shared (kernels-common/launch_*.cuh,
 * compiled once per backend with its primitives); a backend writes its own
 * only where its hardware wants another shape: weft_gk_gemm.
 *
 * Every pointer is a device address already resolved from a (buffer,
 * offset) view; strides named *_ld are in elements, *_nb1 in bytes. A
 * launcher only enqueues work on `stream` (a cudaStream_t or hipStream_t)
 * and returns the runtime's error code as an int: 0 (cudaSuccess,
 * hipSuccess), or e.g. the invalid-value or invalid-configuration code. It
 * never synchronizes, allocates or aborts, so it may be captured into a
 * graph. Device-side input errors (a token id outside the table, a LOGITS
 * row outside x, a MATMUL_ID expert id outside [0, E), a recurrent state slot
 * outside the state) write zeros and set *err to nonzero. */
#ifndef WEFT_KC_LAUNCH_H
#define WEFT_KC_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the rows one matrix-vector (dp4a) launch computes */
#define WEFT_GK_MMVQ_ROWS 8
/* up to this many rows, a quantized MATMUL takes the matrix-vector path, in
 * launches of WEFT_GK_MMVQ_ROWS rows (each reads W once); above it, the GEMM.
 * Measured on an H200 (Llama-3-8B shape, Q4_0, prompt tokens/s): the
 * 8-row launches give ~650 at every R; the wmma GEMM 70 at R = 16, 470 at
 * 128, 866 at 256, 1269 at 512, its time per call about flat up to R = 128
 * (one 64-row tile per block: too few blocks to fill the GPU). */
#ifndef WEFT_GK_MMVQ_MAX_ROWS
#define WEFT_GK_MMVQ_MAX_ROWS 128
#endif

/* out[R][N] = x[R][K] · W[N][K]ᵀ (+ bias[N]) (+ add, which may alias out):
 * the bias is added to each dot product before the residual, as the CPU.
 * wt: any weight type of base/types.h (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1
 * Q8_0 Q4_K Q5_K Q6_K Q2_K Q3_K IQ4_NL IQ4_XS MXFP4; MXFP4's rows may start
 * at any byte, every other type's at an even one). Paths (kernels-common/launch_matmul.cuh):
 * R <= WEFT_GK_MMVQ_MAX_ROWS and a quantized type: x quantized to Q8_1 blocks
 * in scratch, integer-dot (dp4a) matrix-vector kernel; more rows and a
 * quantized type or F16: the backend's weft_gk_gemm; F32/BF16 and few-row
 * F16: the float kernel. */
struct weft_gk_mm {
    int wt;                       /* enum weft_type */
    const uint8_t *w;
    size_t w_nb1;
    int64_t K, N, R;
    const float *x;
    size_t x_ld;
    float *out;
    size_t out_ld;
    const float *add;             /* NULL: none */
    size_t add_ld;
    const float *bias;            /* api 5: N floats, contiguous; NULL: none */
};
/* scratch bytes weft_gk_matmul needs for this shape (0 if none) */
size_t weft_gk_matmul_scratch(int wt, int64_t K, int64_t R);
/* whether weft_gk_matmul handles weight type wt */
int weft_gk_matmul_type_ok(int wt);
int weft_gk_matmul(const struct weft_gk_mm *m, void *scratch, void *stream);
/* The backend's own prefill GEMM, for R > WEFT_GK_MMVQ_MAX_ROWS and a quantized
 * or F16 W (kernels-cuda: tensor cores; kernels-hip: LDS-tiled float). */
int weft_gk_gemm(const struct weft_gk_mm *m, void *stream);

int weft_gk_embed(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids, int64_t R,
                  float *out, size_t out_ld, int *err, void *stream);
/* api 5: weft_gk_embed with out = dequant(row) * scale (one F32 multiply
 * per element after dequantizing); scale 0: no multiply, as weft_gk_embed */
int weft_gk_embed_scaled(int wt, const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                         int64_t R, float scale, float *out, size_t out_ld, int *err, void *stream);

/* rows == NULL: output row r normalises x row r; else x row rows[r]
 * (LOGITS' gather). add/sum: the fused residual (add == NULL: none). */
int weft_gk_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows, const float *add,
                    size_t add_ld, float *sum, size_t sum_ld, const float *w, float *out, size_t out_ld, int64_t R,
                    int64_t K, float eps, int *err, void *stream);

int weft_gk_silu_mul(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld, int64_t R,
                     int64_t K, void *stream);
/* api 5: out = act(g) * u, act an enum weft_glu_act (backends/backend.h):
 * WEFT_GLU_SILU (as weft_gk_silu_mul), WEFT_GLU_GELU_TANH (ggml's F16-table
 * GeGLU, bit for bit) or api 9's WEFT_GLU_SIGMOID (u * (1 / (1 + expf(-g))),
 * the CPU's order, the device's expf); another act is the invalid-value code */
int weft_gk_glu(int act, const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                int64_t R, int64_t K, void *stream);
/* api 7: gpt-oss's clamped SwiGLU (WEFT_GLU_SWIGLU_OAI, backends/backend.h): x = min(g, limit),
 * y = clamp(u, -limit, limit), out = x / (1 + expf(alpha * -x)) * (y + 1), in the CPU's order
 * (the device's expf, the one step not the CPU's libm) */
int weft_gk_swiglu_oai(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out, size_t out_ld,
                       int64_t R, int64_t K, float alpha, float limit, void *stream);
int weft_gk_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld, int64_t R,
                int64_t K, void *stream);
/* api 10: weft_gk_add with out = (a + b) * scale, the sum rounded to F32 before the product
 * (the CPU's two roundings, never an fma); scale 0: no multiply, as weft_gk_add */
int weft_gk_add_scaled(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                       int64_t R, int64_t K, float scale, void *stream);
/* api 6: LOGITS' soft-cap, in place: x = tanh(x · (1 / cap)) · cap over R
 * rows of K (ld apart) */
int weft_gk_softcap(float *x, size_t ld, int64_t R, int64_t K, float cap, void *stream);

/* One layer of the paged KV cache (backends/backend.h): K heads of hd, V
 * heads of hd_v (ROPE_KV's v rows are n_kv * hd_v wide, ATTENTION's out rows
 * n_head * hd_v). */
struct weft_gk_kv {
    uint8_t *base;                /* the cache buffer */
    int type;                     /* WEFT_TYPE_F16 or WEFT_TYPE_Q8_0 (hd, hd_v % 32 == 0) */
    int n_layer, layer, n_kv, hd;
    int hd_v;                     /* api 6: V's head dim; 0: hd */
    int v_in_k;                   /* api 7: a latent cache: no V stored (a layer's block part is
                                   * K only), a position's V row is the last hd_v values of its
                                   * K row (n_kv 1; Q8_0: (hd - hd_v) % 32 == 0); ROPE_KV
                                   * writes k only */
};

/* the widest K and V heads the attention kernels take (DeepSeek's latent K rows: 576) */
#define WEFT_GK_ATTN_MAX_HD 576

/* api 5: RoPE scaling (ROPE_KV's fields, base/rope.h's weft_rope_cos_sin_ext).
 * Pair i's angle: theta_e = (pos * theta_scale^i, the powers by repeated
 * float multiplication) / freq_factors[i] (when given), theta = freq_scale *
 * theta_e, with YaRN (ext_factor != 0) theta (1 - r) + theta_e r,
 * r = (1 - clamp((i - corr_dims[0]) / max(0.001, corr_dims[1] -
 * corr_dims[0]), 0, 1)) ext_factor; cos and sin times mscale. A NULL ext is
 * {NULL, 0, {0, 0}, 1}: the plain rotation. */
struct weft_gk_rope_ext {
    const float *freq_factors;    /* n_rot/2 F32 divisors, contiguous; NULL: none */
    float ext_factor;             /* YaRN's mix; 0: none */
    float corr_dims[2];           /* YaRN's ramp over pair indices */
    float mscale;                 /* the cos/sin magnitude, formed on the host as the CPU
                                   * (attn_factor or 1, times 1 + 0.1 ln(1/freq_scale) with YaRN) */
};

/* Rotate q and k (theta_scale = freq_base^(-2/n_rot) from the host's powf,
 * as the CPU), then write k (n_kv heads of hd) and v (n_kv heads of hd_v) into
 * the rows' KV slots. */
int weft_gk_rope_kv(float *q, size_t q_ld, float *k, size_t k_ld, const float *v, size_t v_ld, const int32_t *pos,
                    const int32_t *slot, int64_t R, int n_head, int n_rot, float theta_scale, float freq_scale,
                    int neox, const struct weft_gk_rope_ext *ext, const struct weft_gk_kv *kv, void *stream);
/* api 10: ROPE_KV's q_only: rotate q's n_head heads (hd apart) as weft_gk_rope_kv does, and
 * nothing else (no k, v or cache to touch); n_rot even and <= hd, else the invalid-value code */
int weft_gk_rope_q(float *q, size_t q_ld, const int32_t *pos, int64_t R, int n_head, int hd, int n_rot,
                   float theta_scale, float freq_scale, int neox, const struct weft_gk_rope_ext *ext, void *stream);

struct weft_gk_attn_args {
    const float *q;
    size_t q_ld;
    float *out;
    size_t out_ld;
    struct weft_gk_kv kv;
    const int32_t *pos, *seq, *bt_off, *bt;
    int64_t n_rows;
    int n_head;
    float scale;
    uint32_t window;              /* api 5: a row at position p attends p - window < j <= p; 0: 0..p */
    float softcap;                /* api 6: s = softcap · tanh(q·k · scale / softcap); 0: none */
    const float *sinks;           /* api 7: n_head logits, contiguous: each head's sink, counted
                                   * once after the last position (in the split merge when
                                   * split); NULL: none */
};
/* How many splits of the context for n_rows x n_head units on n_mp
 * multiprocessors (SMs, compute units); shapes only, so a graph of the
 * step stays valid. */
int weft_gk_attn_splits(int64_t n_rows, int n_head, int n_mp);
/* hd: V's head dim (the split partials are V-wide) */
size_t weft_gk_attention_scratch(int64_t n_rows, int n_head, int hd, int n_split);
/* head_dim and V's <= WEFT_GK_ATTN_MAX_HD; n_head a multiple of kv.n_kv */
int weft_gk_attention(const struct weft_gk_attn_args *a, int n_split, void *scratch, void *stream);

/* ---- api 7: mixtures of experts (backends/backend.h: MOE_ROUTE, MATMUL_ID) ---- */

/* the most experts MOE_ROUTE and MATMUL_ID take */
#define WEFT_GK_MOE_MAX_EXPERTS 1024

/* MOE_ROUTE over R rows of E logits (one 32-lane group per row): ids[r][0..k) best first,
 * weights[r][0..k), as the CPU's (backends/cpu/ops/ops_moe.c) float order; the device's expf. */
struct weft_gk_moe_route {
    const float *logits;
    size_t l_ld;
    int32_t *ids;
    size_t ids_ld;
    float *w;
    size_t w_ld;
    int64_t R;
    int E, k;                     /* 1 <= k <= E <= WEFT_GK_MOE_MAX_EXPERTS */
    int gating;                   /* enum weft_moe_gating */
    int norm;
    float scale;                  /* 0: 1 */
    const float *bias;            /* E floats, contiguous, for the choice only; NULL: none */
    int n_group, group_used;      /* api 8, expert groups (backend.h): n_group <= 1 none; else
                                   * E % n_group == 0, E / n_group >= 2, n_group <= 64,
                                   * 1 <= group_used < n_group, k <= group_used * E / n_group */
    const float *expert_scale;    /* api 10: E floats, contiguous: after norm and scale, each
                                   * chosen weight w[j] = w[j] * expert_scale[ids[j]] (one F32
                                   * product); NULL: none */
};
int weft_gk_moe_route(const struct weft_gk_moe_route *a, void *stream);

/* MATMUL_ID: W holds E experts of N rows of K (expert e's from row e * N); slot (r, j), j < k,
 * chose expert ids[r * ids_ld + j]; its activation is x row r * k + j (x_per_slot) or r.
 * Without wts: out row r * k + j = x_rj · W_eᵀ (+ bias[e * N ..]); with wts (R rows of k):
 * out row r = ((wts[r][0] · y_r0 + wts[r][1] · y_r1) + ...) (+ add row r, which may alias out).
 * The slots are grouped by expert on the device (no host synchronisation): each chosen
 * expert's rows are read once per op for all its slots, an unchosen expert's never; the dots
 * are MATMUL's matrix-vector ones (Q8_1 activations and dp4a for quantized weights, float
 * for F32/F16/BF16). An id outside [0, E) zeroes its slot's row and sets *err to 3. */
struct weft_gk_mmid {
    int wt;                       /* enum weft_type: any of weft_gk_matmul_type_ok's */
    const uint8_t *w;
    size_t w_nb1;
    int64_t K, N;                 /* each expert's matrix: N rows of K */
    int E;                        /* experts, <= WEFT_GK_MOE_MAX_EXPERTS */
    const int32_t *ids;
    size_t ids_ld;
    int64_t R;
    int k;
    int x_per_slot;
    const float *x;
    size_t x_ld;
    float *out;
    size_t out_ld;
    const float *wts;             /* NULL: one output row per slot */
    size_t wts_ld;
    const float *add;             /* with wts only; NULL: none */
    size_t add_ld;
    const float *bias;            /* E * N floats, contiguous; NULL: none */
    int *err;
};
size_t weft_gk_matmul_id_scratch(int wt, int64_t K, int64_t N, int E, int64_t R, int k, int x_per_slot,
                                 int weighted);
int weft_gk_matmul_id(const struct weft_gk_mmid *m, void *scratch, void *stream);

/* ---- api 9: the recurrent state of hybrid models (backends/backend.h: SSM_CONV, DELTA_NET) ----
 * Both read and update a per-sequence state in place: slot s's values start at
 * state + s * state_ld (floats), row r's slot is slots[r] (R of them, I32). A sequence's rows
 * run in row order, each seeing the state the previous one left; the sequences are found on
 * the device, with no host read (kernels-common/recurrent_geom.h says how), so a launch never
 * depends on the slots' values. A slot outside [0, n_slots) zeroes its rows' outputs, touches
 * no state and sets *err to 4. Float order as the CPU's (backends/cpu/ops/ops_recurrent.c);
 * the device's expf and logf where the CPU calls libm's. */

/* SSM_CONV: C channels, K taps (2 <= K <= WEFT_GK_CONV_MAX_K); w: C rows of K floats (w_ld
 * apart), state: (K - 1) * C floats per slot, the oldest input first; out = the fmaf chain of
 * the window and the taps, SiLU'd when silu (ggml's polynomial expf on the rows' whole
 * 16-channel chunks, bit for bit the CPU's; the device's expf on the rest). out must not
 * overlap x or the state (a row reads the x rows before it). */
struct weft_gk_ssm_conv {
    const float *x;
    size_t x_ld;
    const float *w;
    size_t w_ld;
    float *out;
    size_t out_ld;
    float *state;
    size_t state_ld;
    const int32_t *slots;
    int64_t n_slots, R, C;
    int K, silu;
    int *err;
};
int weft_gk_ssm_conv(const struct weft_gk_ssm_conv *a, void *stream);

/* DELTA_NET: in rows hold Hk q heads, Hk k heads, Hv v heads of S (S <= WEFT_GK_DN_MAX_HEAD);
 * v head h reads q/k head h % Hk (k_grouped: h / (Hv / Hk)); beta, alpha: R rows of Hv;
 * dt_bias, a: Hv floats; out: R rows of Hv * S; the state: Hv * S * S floats per slot (v head
 * h's matrix row j at (h * S + j) * S). The dots in ggml's AVX order (4 x 8 lanes of fmaf, its
 * reduction, the tail in double), the l2 norms' sums in double one element after another, as
 * the CPU. n_mp (the device's multiprocessors) picks the geometry, from shapes only. */
struct weft_gk_delta_net {
    const float *in;
    size_t in_ld;
    const float *beta;
    size_t beta_ld;
    const float *alpha;
    size_t alpha_ld;
    const float *dt_bias, *a;
    float *out;
    size_t out_ld;
    float *state;
    size_t state_ld;
    const int32_t *slots;
    int64_t n_slots, R;
    int n_k_head, n_v_head, head_dim, k_grouped;
    float eps;
    int n_mp;
    int *err;
};
int weft_gk_delta_net(const struct weft_gk_delta_net *a, void *stream);

#ifdef __cplusplus
}
#endif

#endif
