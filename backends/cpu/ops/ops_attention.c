/* ROPE_KV and ATTENTION on the CPU over the paged KV cache (backend.h
 * describes the block layout). */
#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/cpu_target.h"
#include "base/quant.h"
#include "base/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of one token's K (which = 0) or V (which = 1) row: n_kv_head heads
 * of head_dim (head_dim_v) in the cache type (F16, or Q8_0 blocks of 32). */
static inline size_t kv_tok_bytes(const struct weft_kv_view *kv, int which)
{
    /* a latent cache's V rows are inside the K rows: K's stride */
    if (which && kv->v_in_k) which = 0;
    return weft_row_size(kv->type, (int64_t)kv->n_kv_head * (which ? weft_kv_head_dim_v(kv) : kv->head_dim));
}

/* Bytes of one layer's K and V in a block (backend.h's layout; a latent cache: K only). */
static inline size_t kv_layer_bytes(const struct weft_kv_view *kv)
{
    return (size_t)WEFT_KV_BLOCK_TOKENS * (kv_tok_bytes(kv, 0) + (kv->v_in_k ? 0 : kv_tok_bytes(kv, 1)));
}

/* Address of token `slot`'s K (which = 0) or V (which = 1) row of kv->layer (a latent
 * cache's V: the tail of the K row). */
static inline uint8_t *kv_row(const struct weft_kv_view *kv, int64_t slot, int which)
{
    int64_t block = slot / WEFT_KV_BLOCK_TOKENS, off = slot % WEFT_KV_BLOCK_TOKENS;
    size_t base = ((size_t)block * kv->n_layer + kv->layer) * kv_layer_bytes(kv);
    if (which && kv->v_in_k)
        return kv->buf->data + base + (size_t)off * kv_tok_bytes(kv, 0) +
               weft_row_size(kv->type, (int64_t)(kv->head_dim - weft_kv_head_dim_v(kv)));
    if (which) base += (size_t)WEFT_KV_BLOCK_TOKENS * kv_tok_bytes(kv, 0);
    return kv->buf->data + base + (size_t)off * kv_tok_bytes(kv, which);
}

static inline const int32_t *i32(const struct weft_view *v) { return (const int32_t *)cpu_ptr(v); }

/* Rotate n_heads heads of x (head_dim apart) by the angles' cos/sin cs
 * (weft_rope_cos_sin: ggml's convention theta_i = pos * base^(-2i/n_rot)).
 * NORMAL rotates (2i, 2i+1), NEOX (i, i + n_rot/2); dims past n_rot are left
 * alone. */
#define ROPE_HEADS_BODY                                                                          \
    for (uint32_t h = 0; h < n_heads; h++) {                                                     \
        float *v = x + (size_t)h * hd;                                                           \
        for (uint32_t i = 0; i < n_rot / 2; i++) {                                               \
            const float c = cs[2 * i], s = cs[2 * i + 1];                                        \
            uint32_t a = mode == WEFT_ROPE_NEOX ? i : 2 * i;                                     \
            uint32_t b = mode == WEFT_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;                     \
            float x0 = v[a], x1 = v[b];                                                          \
            v[a] = fmaf(x0, c, -(x1 * s));                                                       \
            v[b] = fmaf(x0, s, x1 * c);                                                          \
        }                                                                                        \
    }
/* ggml's rotate_pairs (ops.cpp, gnu++17 -O3 -march=native) is contracted by
 * GCC: x0*c - x1*s and x0*s + x1*c each fuse the x0 product. Unfused,
 * stories260K drifts late in the decode. fmaf is exact either way; on a CPU
 * with FMA the second copy has it inlined instead of a libm call each. */
static void rope_heads(float *x, uint32_t n_heads, uint32_t hd, uint32_t n_rot, const float *cs,
                       enum weft_rope_mode mode)
{
    ROPE_HEADS_BODY
}

#if defined(__x86_64__) && defined(WEFT_HAVE_X86_SIMD)
WEFT_AVX2 static void rope_heads_fma(float *x, uint32_t n_heads, uint32_t hd, uint32_t n_rot, const float *cs,
                                     enum weft_rope_mode mode)
{
    ROPE_HEADS_BODY
}
#define HAVE_ROPE_FMA 1
#endif
#undef ROPE_HEADS_BODY

/* The head's K row of position p of the sequence (its V row is v_off on
 * when K and V rows are alike, else attn_v_row's). */
static inline const uint8_t *attn_k_row(const struct weft_cpu_attn_args *a, int64_t p)
{
    return a->k0 + (size_t)a->bt[p / WEFT_KV_BLOCK_TOKENS] * a->block_bytes +
           (size_t)(p % WEFT_KV_BLOCK_TOKENS) * a->tok_bytes;
}

static inline const uint8_t *attn_v_row(const struct weft_cpu_attn_args *a, int64_t p)
{
    if (!a->v0) return attn_k_row(a, p) + a->v_off;
    return a->v0 + (size_t)a->bt[p / WEFT_KV_BLOCK_TOKENS] * a->block_bytes +
           (size_t)(p % WEFT_KV_BLOCK_TOKENS) * a->v_tok_bytes;
}

struct attn_job { const struct weft_op *op; const struct weft_cpu_kernels *kern; const float *cs; };

/* the cos/sin table of every row of a ROPE_KV batch (be->rope_cs) */
static void rope_table_job(void *ctx, int ith, int nth)
{
    struct weft_cpu_backend *be = ctx;
    int64_t lo, hi;
    cpu_split(be->rope_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++)
        weft_rope_cos_sin_ext(be->rope_pos[r], be->rope_n_rot, be->rope_base, be->rope_scale, &be->rope_ext,
                              be->rope_cs + (size_t)r * be->rope_n_rot);
}

static void rope_kv_job(void *ctx, int ith, int nth)
{
    const struct attn_job *j = ctx;
    const struct weft_op_rope_kv *o = &j->op->u.rope_kv;
    const struct weft_kv_view *kv = &o->kv;
    uint32_t hd = kv->head_dim, hdv = weft_kv_head_dim_v(kv), nkv = kv->n_kv_head;
    int64_t lo, hi;
    cpu_split(o->batch.n_rows, ith, nth, &lo, &hi);
    const int32_t *slot = i32(&o->batch.slot);
#ifdef HAVE_ROPE_FMA
    void (*const rope)(float *, uint32_t, uint32_t, uint32_t, const float *, enum weft_rope_mode) =
        j->kern->isa >= WEFT_CPU_ISA_AVX2 ? rope_heads_fma : rope_heads;
#else
    void (*const rope)(float *, uint32_t, uint32_t, uint32_t, const float *, enum weft_rope_mode) = rope_heads;
#endif
    const weft_cpu_quant_fn to_f16 = j->kern->quant[WEFT_TYPE_F16];
    for (int64_t r = lo; r < hi; r++) {
        float *q = cpu_row_f32(&o->q, r);
        const float *cs = j->cs + (size_t)r * o->n_rot;
        rope(q, o->n_head, hd, o->n_rot, cs, o->mode);
        if (o->q_only) continue; /* k, v and the cache untouched (api 10) */
        float *k = cpu_row_f32(&o->k, r);
        const float *v = kv->v_in_k ? NULL : cpu_row_f32(&o->v, r);
        rope(k, nkv, hd, o->n_rot, cs, o->mode);
        if (kv->type == WEFT_TYPE_Q8_0) {
            /* head_dim % 32 == 0, so each head is whole Q8_0 blocks */
            weft_quantize_row(WEFT_TYPE_Q8_0, k, kv_row(kv, slot[r], 0), (int64_t)nkv * hd);
            if (!kv->v_in_k) weft_quantize_row(WEFT_TYPE_Q8_0, v, kv_row(kv, slot[r], 1), (int64_t)nkv * hdv);
            continue;
        }
        /* the table's F16 conversion: round to nearest even, as weft_f32_to_half */
        to_f16(k, kv_row(kv, slot[r], 0), (int64_t)nkv * hd);
        if (!kv->v_in_k) to_f16(v, kv_row(kv, slot[r], 1), (int64_t)nkv * hdv);
    }
}

/* be->rope_cs for this op's rows: made again only when the positions or the
 * rope parameters differ from the last ROPE_KV's (the other layers of a
 * step reuse it) */
static weft_status rope_table(struct weft_cpu_backend *be, const struct weft_op_rope_kv *o)
{
    const int64_t n = o->batch.n_rows;
    const int32_t *pos = i32(&o->batch.pos);
    const struct weft_rope_ext ext = {
        .freq_factors = o->has_freq_factors ? (const float *)cpu_ptr(&o->freq_factors) : NULL,
        .ext_factor = o->ext_factor, .attn_factor = o->attn_factor,
        .corr_dims = {o->corr_dims[0], o->corr_dims[1]}};
    /* factors by value: another model's may sit at the same address */
    const size_t ff_bytes = (size_t)(o->n_rot / 2) * sizeof(float);
    const bool same_ff = !ext.freq_factors == !be->rope_ext.freq_factors &&
                         (!ext.freq_factors || memcmp(ext.freq_factors, be->rope_ff, ff_bytes) == 0);
    if (n == be->rope_rows && o->n_rot == be->rope_n_rot && o->freq_base == be->rope_base &&
        o->freq_scale == be->rope_scale && same_ff &&
        ext.ext_factor == be->rope_ext.ext_factor && ext.attn_factor == be->rope_ext.attn_factor &&
        ext.corr_dims[0] == be->rope_ext.corr_dims[0] && ext.corr_dims[1] == be->rope_ext.corr_dims[1] &&
        (n == 0 || memcmp(pos, be->rope_pos, (size_t)n * sizeof *pos) == 0))
        return WEFT_OK;
    const size_t need_cs = (size_t)n * o->n_rot, need_pos = (size_t)n;
    if (need_cs > be->rope_cs_cap || need_pos > be->rope_pos_cap) {
        const size_t cap_cs = need_cs + need_cs / 2 + 1024, cap_pos = need_pos + need_pos / 2 + 16;
        float *cs = malloc(cap_cs * sizeof *cs);
        int32_t *p = malloc(cap_pos * sizeof *p);
        if (!cs || !p) {
            free(cs);
            free(p);
            return weft_error(WEFT_ERR_NOMEM, "cpu: out of memory for the rope table of %lld rows", (long long)n);
        }
        free(be->rope_cs);
        free(be->rope_pos);
        be->rope_cs = cs;
        be->rope_pos = p;
        be->rope_cs_cap = cap_cs;
        be->rope_pos_cap = cap_pos;
    }
    be->rope_rows = -1; /* not valid until made */
    memcpy(be->rope_pos, pos, (size_t)n * sizeof *pos);
    be->rope_n_rot = o->n_rot;
    be->rope_base = o->freq_base;
    be->rope_scale = o->freq_scale;
    be->rope_ext = ext;
    if (ext.freq_factors) {  /* n_rot <= 512 (supports) */
        memcpy(be->rope_ff, ext.freq_factors, ff_bytes);
        be->rope_ext.freq_factors = be->rope_ff;
    }
    be->rope_rows = n;
    weft_cpu_pool_run_parts(be->pool, rope_table_job, be, cpu_parts(be, n));
    return WEFT_OK;
}

weft_status weft_cpu_rope_kv(struct weft_cpu_backend *be, const struct weft_op *op)
{
    if (op->u.rope_kv.n_rot > 512 || op->u.rope_kv.n_rot > op->u.rope_kv.kv.head_dim)
        return weft_error(WEFT_ERR_UNSUPPORTED, "cpu: n_rot %u (more than head_dim %u or 512)", op->u.rope_kv.n_rot,
                          op->u.rope_kv.kv.head_dim);
    weft_status st = rope_table(be, &op->u.rope_kv);
    if (st != WEFT_OK) return st;
    struct attn_job j = {op, be->kern, be->rope_cs};
    weft_cpu_pool_run_parts(be->pool, rope_kv_job, &j, cpu_parts(be, op->u.rope_kv.batch.n_rows));
    return WEFT_OK;
}

/* One (row, head) pair (struct weft_cpu_attn_args): a single pass with an online softmax over positions
 * 0..pos[r] of the row's sequence, mirroring ggml's CPU flash attention
 * (ggml_compute_forward_flash_attn_ext_f16_one_chunk, used by llama.cpp for
 * decode and for prefills of < 64 rows or head_dim % 16 != 0; longer
 * prefills with head_dim % 16 == 0 take ggml's tiled F32-GEMM path, which is
 * not mirrored here):
 *  - q is rounded to F16 and K·q is ggml_vec_dot_f16 (weft_vec_dot F16: four
 *    16-lane fma accumulators for 64-element chunks, the tail in double);
 *  - s = dot * scale; a new maximum rescales the F16 accumulator by
 *    expf(Mold - M) (ggml_vec_scale_f16: multiply, round to F16), else the
 *    value gets the weight expf(s - M): libm's expf, as ggml (the Vulkan
 *    backend's exact attention reproduces glibc's, shaders/expf_libm.glsl);
 *  - V is added as ggml_vec_mad_f16: fma(v, vs, acc) rounded to F16 (the
 *    AVX-512 body uses _mm512_fmadd_ps; the scalar tail, all of it for
 *    head_dim < 64, is contracted by GCC the same way);
 *  - S = S*ms + vs is contracted by GCC into fma(S, ms, vs);
 *  - the output is float(acc) * (1/S);
 *  - with a soft-cap c, scale is divided by c first and s = c * tanhf(s)
 *    (ggml's logit_softcap, libm's tanhf).
 * Each of the three fusions was needed for stories260K / synth256 greedy
 * logprobs to match llama.cpp: F16 rounding turns a last-bit difference
 * into a visible one. kern->attn_row (where the table has one) computes
 * the very same thing faster. */
/* The sink: one more position with logit s and no value row, after the last one, on the F32
 * accumulator (ggml: S = S*ms + vs is a product then a sum here, not contracted) */
static float attn_sink(float s, float M, float S, float *acc, uint32_t hdv)
{
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
        ms = expf(M - s);
        for (uint32_t d = 0; d < hdv; d++) acc[d] *= ms;
    } else {
        vs = expf(s - M);
    }
    const float t = S * ms;
    return t + vs;
}

void weft_cpu_attn_row_generic(const struct weft_cpu_kernels *kern, const struct weft_cpu_attn_args *a)
{
    const weft_cpu_dot_fn dot_f16 = kern->dot[WEFT_TYPE_F16];
    const uint32_t hd = a->hd;
    const uint32_t hdv = a->hd_v ? a->hd_v : hd;
    const float cap = a->softcap, scale = cap != 0.0f ? a->scale / cap : a->scale;
    weft_half qh16[WEFT_CPU_MAX_HEAD_DIM], acc16[WEFT_CPU_MAX_HEAD_DIM];
    for (uint32_t d = 0; d < hd; d++) qh16[d] = weft_f32_to_half(a->q[d]);
    float M = -INFINITY, S = 0.0f;
    for (uint32_t d = 0; d < hdv; d++) acc16[d] = 0;
    for (int64_t p = a->p_first; p < a->n_pos; p++) {
        const weft_half *k = (const weft_half *)attn_k_row(a, p), *v = (const weft_half *)attn_v_row(a, p);
        float s = dot_f16(k, qh16, hd) * scale;
        if (cap != 0.0f) s = cap * tanhf(s);
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            float Mold = M;
            M = s;
            ms = expf(Mold - M);
            kern->f16_scale(acc16, ms, hdv);
        } else {
            vs = expf(s - M);
        }
        kern->f16_mad(acc16, v, vs, hdv);
        S = fmaf(S, ms, vs);
    }
    if (a->has_sink) {
        float acc[WEFT_CPU_MAX_HEAD_DIM];
        for (uint32_t d = 0; d < hdv; d++) acc[d] = weft_half_to_f32(acc16[d]);
        S = attn_sink(a->sink, M, S, acc, hdv);
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (uint32_t d = 0; d < hdv; d++) a->out[d] = acc[d] * inv;
        return;
    }
    float inv = 1.0f / S;
    for (uint32_t d = 0; d < hdv; d++) a->out[d] = weft_half_to_f32(acc16[d]) * inv;
}

/* The same single pass over a Q8_0 cache, as ggml's flash attention does
 * for quantized K/V: q is quantized to Q8_0 and K·q is the Q8_0 integer
 * dot; V rows are dequantized and accumulated in F32
 * (ggml_vec_scale_f32 / ggml_vec_mad_f32, fused multiply-adds). */
static void attn_row_q8_0(const struct weft_cpu_kernels *kern, const struct weft_cpu_attn_args *a)
{
    const weft_cpu_dot_fn dot = kern->dot[WEFT_TYPE_Q8_0];
    const uint32_t hd = a->hd;
    const uint32_t hdv = a->hd_v ? a->hd_v : hd;
    const float cap = a->softcap, scale = cap != 0.0f ? a->scale / cap : a->scale;
    struct weft_block_q8_0 qq[WEFT_CPU_MAX_HEAD_DIM / 32];
    float acc[WEFT_CPU_MAX_HEAD_DIM], vr[WEFT_CPU_MAX_HEAD_DIM];
    weft_quantize_row_act(WEFT_TYPE_Q8_0, a->q, qq, hd);
    float M = -INFINITY, S = 0.0f;
    for (uint32_t d = 0; d < hdv; d++) acc[d] = 0;
    for (int64_t p = a->p_first; p < a->n_pos; p++) {
        const uint8_t *k = attn_k_row(a, p);
        float s = dot(k, qq, hd) * scale;
        if (cap != 0.0f) s = cap * tanhf(s);
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            float Mold = M;
            M = s;
            ms = expf(Mold - M);
            for (uint32_t d = 0; d < hdv; d++) acc[d] *= ms;
        } else {
            vs = expf(s - M);
        }
        weft_dequantize_row(WEFT_TYPE_Q8_0, attn_v_row(a, p), vr, hdv);
        for (uint32_t d = 0; d < hdv; d++) acc[d] = fmaf(vr[d], vs, acc[d]);
        S = fmaf(S, ms, vs);
    }
    if (a->has_sink) S = attn_sink(a->sink, M, S, acc, hdv);
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (uint32_t d = 0; d < hdv; d++) a->out[d] = acc[d] * inv;
}

static void attention_job(void *ctx, int ith, int nth)
{
    const struct weft_op_attention *o = &((struct attn_job *)ctx)->op->u.attention;
    const struct weft_cpu_kernels *kern = ((struct attn_job *)ctx)->kern;
    const struct weft_kv_view *kv = &o->kv;
    const uint32_t hd = kv->head_dim, hdv = weft_kv_head_dim_v(kv), group = o->n_head / kv->n_kv_head;
    const int32_t *pos = i32(&o->batch.pos), *seq = i32(&o->batch.seq), *bt_off = i32(&o->batch.bt_off);
    const bool q8 = kv->type == WEFT_TYPE_Q8_0;
    /* the table forms: K and V rows alike */
    const bool fast = !q8 && kern->attn_row && hd % 64 == 0 && hd <= 256 && hdv == hd;
    const size_t head_bytes = weft_row_size(kv->type, hd), head_bytes_v = weft_row_size(kv->type, hdv);
    int64_t n = (int64_t)o->batch.n_rows * o->n_head;
    /* grouped where there are enough (row, KV head) units to share out
     * (a decode step of one row keeps one head per part) */
    const float *sinks = o->has_sinks ? (const float *)cpu_ptr(&o->sinks) : NULL;
    const bool grouped = fast && !o->window && o->softcap == 0.0f && !sinks && kern->attn_group && group > 1 && group <= 16 &&
                         (int64_t)o->batch.n_rows * kv->n_kv_head >= 2 * (int64_t)nth;
    if (grouped) n = (int64_t)o->batch.n_rows * kv->n_kv_head; /* (row, KV head): its `group` heads at once */
    /* (row, head) pairs dealt round-robin: causal rows cost in proportion to
     * their position, so contiguous chunks would leave early threads idle */
    for (int64_t i = ith; i < n; i += nth) {
        const int64_t r = grouped ? i / kv->n_kv_head : i / o->n_head;
        const uint32_t h = grouped ? (uint32_t)(i % kv->n_kv_head) * group : (uint32_t)(i % o->n_head);
        const uint8_t *k0 = kv_row(kv, 0, 0) + (size_t)(h / group) * head_bytes;
        const uint8_t *v0 = hdv != hd || kv->v_in_k ? kv_row(kv, 0, 1) + (size_t)(h / group) * head_bytes_v : NULL;
        /* a sliding window: positions pos - window + 1 .. pos (ggml skips
         * the masked ones, -inf, in the same single pass) */
        const int64_t p_first = o->window && (int64_t)pos[r] >= (int64_t)o->window ? (int64_t)pos[r] - o->window + 1 : 0;
        struct weft_cpu_attn_args a[16];
        for (uint32_t g = 0; g < (grouped ? group : 1); g++)
            a[g] = (struct weft_cpu_attn_args){
                .q = cpu_row_f32(&o->q, r) + (size_t)(h + g) * hd,
                .out = cpu_row_f32(&o->out, r) + (size_t)(h + g) * hdv,
                .k0 = k0,
                .v_off = (size_t)WEFT_KV_BLOCK_TOKENS * kv_tok_bytes(kv, 0),
                .block_bytes = (size_t)kv->n_layer * kv_layer_bytes(kv),
                .tok_bytes = kv_tok_bytes(kv, 0),
                .v0 = v0,
                .v_tok_bytes = kv_tok_bytes(kv, 1),
                .hd_v = hdv,
                .bt = i32(&o->batch.bt) + bt_off[seq[r]],
                .n_pos = (int64_t)pos[r] + 1,
                .hd = hd,
                .scale = o->scale,
                .p_first = p_first,
                .softcap = o->softcap,
                .has_sink = sinks != NULL,
                .sink = sinks ? sinks[h + g] : 0.0f,
            };
        if (grouped) kern->attn_group(a, (int)group);
        else if (q8) attn_row_q8_0(kern, &a[0]);
        else if (fast && p_first == 0 && o->softcap == 0.0f && !sinks) kern->attn_row(&a[0]);
        else weft_cpu_attn_row_generic(kern, &a[0]);
    }
}

weft_status weft_cpu_attention(struct weft_cpu_backend *be, const struct weft_op *op)
{
    if (op->u.attention.kv.head_dim > WEFT_CPU_MAX_HEAD_DIM || weft_kv_head_dim_v(&op->u.attention.kv) > WEFT_CPU_MAX_HEAD_DIM)
        return weft_error(WEFT_ERR_UNSUPPORTED, "cpu: head_dim %u (V %u) > %d", op->u.attention.kv.head_dim,
                          weft_kv_head_dim_v(&op->u.attention.kv), WEFT_CPU_MAX_HEAD_DIM);
    struct attn_job j = {op, be->kern, NULL};
    /* parts: as many as there are (row, head) pairs or threads; a part with
     * no grouped unit left simply returns */
    weft_cpu_pool_run_parts(be->pool, attention_job, &j,
                            cpu_parts(be, (int64_t)op->u.attention.batch.n_rows * op->u.attention.n_head));
    return WEFT_OK;
}
