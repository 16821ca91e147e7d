/* ROPE_KV and ATTENTION over the paged KV cache (backends/backend.h gives
 * the block layout), step for step as the CPU backend's
 * backends/cpu/ops/ops_attention.c. */

/* Bytes of a token's K or V row: n_kv heads of hd values of the cache type
 * (F16, or Q8_0 blocks of 32). */
inline ulong kv_tok(int n_kv, int hd, int q8)
{
    return q8 ? (ulong)(n_kv * hd / WEFT_QK_Q8_0) * WEFT_B_Q8_0 : (ulong)n_kv * hd * 2;
}

/* The byte offset of token `slot`'s K (which = 0) or V (1) row of `layer`,
 * with k_tok / v_tok the bytes of a token's K / V row: a layer's K then V in
 * a block, KB = KV_BLOCK * k_tok, VB = KV_BLOCK * v_tok. A latent cache
 * (v_in_k, api 7) has no V rows (v_tok 0 here): a position's V is the tail of
 * its K row (kv_v_row). */
inline ulong kv_row(long slot, int which, int n_layer, int layer, ulong k_tok, ulong v_tok)
{
    const long block = slot / KV_BLOCK, off = slot % KV_BLOCK;
    const ulong layer_bytes = (ulong)KV_BLOCK * (k_tok + v_tok);
    return ((ulong)block * n_layer + layer) * layer_bytes + (which ? (ulong)KV_BLOCK * k_tok : 0) +
           (ulong)off * (which ? v_tok : k_tok);
}

/* Token `slot`'s V row: its own, or (v_in_k) the last hdv values of its K
 * row (one KV head of hd) */
inline ulong kv_v_row(long slot, int n_layer, int layer, ulong k_tok, ulong v_tok, int v_in_k, int hd, int hdv, int q8)
{
    return v_in_k ? kv_row(slot, 0, n_layer, layer, k_tok, 0) + kv_tok(1, hd - hdv, q8)
                  : kv_row(slot, 1, n_layer, layer, k_tok, v_tok);
}

/* x[a], x[b] rotated by (c, s): the CPU's fused forms */
inline void rot(global float *v, int a, int b, float c, float s)
{
    const float x0 = v[a], x1 = v[b];
    v[a] = fma(x0, c, -(x1 * s));
    v[b] = fma(x0, s, x1 * c);
}

/* n elements of v into the cache at dst: F16 (round to nearest even) or
 * Q8_0 blocks as base/quant.c's file quantizer (d = amax/127, round half
 * away from zero) */
inline void kv_store(global const float *v, global uchar *dst, int n, int q8)
{
    if (!q8) {
        for (int i = 0; i < n; i++) vstore_half_rte(v[i], i, (global half *)dst);  /* round to nearest even */
        return;
    }
    for (int b = 0; b < n / WEFT_QK_Q8_0; b++) {
        global const float *x = v + b * WEFT_QK_Q8_0;
        global uchar *blk = dst + b * WEFT_B_Q8_0;
        float amax = 0.0f;
        for (int j = 0; j < WEFT_QK_Q8_0; j++) amax = fmax(amax, fabs(x[j]));
        const float d = amax / 127;
        const ushort hd = f2h(d);
        blk[0] = (uchar)hd;
        blk[1] = (uchar)(hd >> 8);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < WEFT_QK_Q8_0; j++) blk[2 + j] = (uchar)(char)round(x[j] * id);
    }
}

/* One work-item per batch row: rotate its q and k heads (hd), then store k
 * and v (heads of hdv) in its slot (a slot outside the cache's n_slots is
 * flagged, not written).
 * Angles: from tab (the host's weft_rope_cos_sin_ext, cos/sin per position:
 * the CPU's own libm bits) when has_tab, else computed here by the same
 * formula (base/rope.h): theta_e = (pos * theta_scale^i) / ff[i] (the
 * powers by repeated multiplication, theta_scale = the host's
 * powf(freq_base, -2/n_rot)), theta = freq_scale * theta_e, with YaRN
 * (ext_factor != 0) mixed with theta_e along the ramp between corr0 and
 * corr1, cos and sin times mscale (formed on the host).
 * q_only (api 10): q rotated, nothing else: k, v, the slot and the cache are
 * neither read nor written (k and v may be stand-ins). */
kernel void rope_kv(global uchar *q, ulong q_off, ulong q_ld, global uchar *k, ulong k_off, ulong k_ld,
                    global const uchar *v, ulong v_off, ulong v_ld, global uchar *kv_b, ulong kv_base, int kv_q8, int n_layer,
                    int layer, int n_kv, int hd, int hdv, int v_in_k, int n_head, int n_rot, int neox, float freq_scale,
                    float theta_scale, global const uchar *ff_b, ulong ff_off, int has_ff, float ext_factor,
                    float mscale, float corr0, float corr1, global const uchar *pos_b, ulong pos_off,
                    global const uchar *slot_b, ulong slot_off, global const float *tab, int has_tab, int tab_rows,
                    int n_rows, long n_slots, global int *err, int q_only)
{
    const int r = get_global_id(0);
    /* after bad input earlier in the step the cache is left as it was */
    if (r >= n_rows || *err) return;
    global uchar *kv = kv_b + kv_base;
    const int pos = I32P(pos_b, pos_off)[r];
    global float *qr = F32P(q, q_off) + (ulong)r * q_ld;
    global float *kr = F32P(k, k_off) + (ulong)r * k_ld;
    global const float *ff = (global const float *)(ff_b + ff_off);
    const bool use_tab = has_tab && pos >= 0 && pos < tab_rows;
    const float corr_w = fmax(0.001f, corr1 - corr0);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        float c, s;
        if (use_tab) {
            c = tab[(ulong)pos * n_rot + 2 * i];
            s = tab[(ulong)pos * n_rot + 2 * i + 1];
        } else {
            const float t_extrap = has_ff ? theta / ff[i] : theta;
            const float t_interp = freq_scale * t_extrap;
            float t = t_interp;
            if (ext_factor != 0.0f) {
                const float y = ((float)i - corr0) / corr_w;
                const float ramp = (1.0f - fmin(1.0f, fmax(0.0f, y))) * ext_factor;
                t = t_interp * (1.0f - ramp) + t_extrap * ramp;
            }
            c = cos(t) * mscale;
            s = sin(t) * mscale;
            theta *= theta_scale;
        }
        const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        for (int h = 0; h < n_head; h++) rot(qr + h * hd, a, b, c, s);
        if (!q_only)
            for (int h = 0; h < n_kv; h++) rot(kr + h * hd, a, b, c, s);
    }
    if (q_only) return;
    const int slot = I32P(slot_b, slot_off)[r];
    if (slot < 0 || slot >= n_slots) {
        FLAG_ERROR(err, 3);
        return;
    }
    const ulong k_tok = kv_tok(n_kv, hd, kv_q8), v_tok = v_in_k ? 0 : kv_tok(n_kv, hdv, kv_q8);
    kv_store(kr, kv + kv_row(slot, 0, n_layer, layer, k_tok, v_tok), n_kv * hd, kv_q8);
    if (!v_in_k)  /* a latent cache's V is inside its K */
        kv_store(F32P(v, v_off) + (ulong)r * v_ld, kv + kv_row(slot, 1, n_layer, layer, k_tok, v_tok), n_kv * hdv, kv_q8);
}

#define ATT_MAX_HD 576  /* DeepSeek's latent cache (64 + 512); ocl_ops.c's kv_ok */

/* ggml_vec_dot_f16's order (backends/cpu/cpu_ref_dot.c dot_f16): 4 x 16
 * lanes of fma over 64-element chunks, (s0+s2)+(s1+s3), the 16 lanes
 * pairwise, the tail in double */
#define PH(a) ((private half *)(a))

inline float dot_f16(global const uchar *k, const ushort *q, int n)
{
    const int np = n & ~63;
    float r[16];
    for (int l = 0; l < 16; l++) {
        float s4[4];
        for (int j = 0; j < 4; j++) {
            float c = 0.0f;
            for (int e = 16 * j + l; e < np; e += 64) c = fma(ldh(k + 2 * e), vload_half(e, PH(q)), c);
            s4[j] = c;
        }
        r[l] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    }
    float t[8], u[4];
    for (int i = 0; i < 8; i++) t[i] = r[i] + r[i + 8];
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
#ifdef WEFT_F64
    double s = (u[0] + u[2]) + (u[1] + u[3]);
    for (int i = np; i < n; i++) s += (double)(ldh(k + 2 * i) * vload_half(i, PH(q)));
    return (float)s;
#else
    float s = (u[0] + u[2]) + (u[1] + u[3]);
    for (int i = np; i < n; i++) s += ldh(k + 2 * i) * vload_half(i, PH(q));
    return s;
#endif
}

/* ggml's Q8_0 x Q8_0 dot (cpu_ref_dot.c dot_q8_0): 8 lanes of 4 products,
 * acc[l] = fma(dk * dq, lane, acc[l]), then ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) */
inline float dot_q8(global const uchar *k, const char *qq, const float *qd, int n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = 0; b < n / WEFT_QK_Q8_0; b++) {
        global const uchar *kb = k + b * WEFT_B_Q8_0;
        const float d = ldh(kb) * qd[b];
        for (int l = 0; l < 8; l++) {
            int s = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s += (int)(char)kb[2 + j] * (int)qq[b * 32 + j];
            acc[l] = fma(d, (float)s, acc[l]);
        }
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* One work-item per (head, row): a single pass with an online softmax over
 * positions p_first..pos[r] of the row's sequence (p_first = 0, or with a
 * sliding window (window > 0) pos[r] - window + 1 when that is above 0:
 * the CPU skips the masked positions in the same pass), as weft_cpu_attn_row_generic
 * (F16 cache: q rounded to F16, an F16 accumulator) and attn_row_q8_0 (Q8_0
 * cache: q quantized to Q8_0, an F32 accumulator); soft-capped scores
 * (softcap != 0) as the CPU's. Scores over K heads of hd, the output from V
 * heads of hdv (head h's at column h * hdv of o). With has_sinks (api 7,
 * gpt-oss) one more position after the last, its score sinks[h] and no
 * value row, on an F32 accumulator (the F16 one widened first) as the
 * CPU's attn_sink: S = S * ms + vs a product, then a sum. global (n_head,
 * rows) */
kernel void attention(global const uchar *q, ulong q_off, ulong q_ld, global uchar *o, ulong o_off, ulong o_ld,
                      global const uchar *kv_b, ulong kv_base, int kv_q8, int n_layer, int layer, int n_kv, int hd,
                      int hdv, int v_in_k, int n_head, float scale, int window, float softcap,
                      global const uchar *pos_b, ulong pos_off, global const uchar *seq_b, ulong seq_off,
                      global const uchar *bto_b, ulong bto_off, global const uchar *bt_b, ulong bt_off, int n_rows,
                      int n_seq, int bt_len, int n_blocks, global int *err, global const uchar *sk_b, ulong sk_off,
                      int has_sinks)
{
    const int h = get_global_id(0), r = get_global_id(1);
    if (h >= n_head || r >= n_rows) return;
    global const uchar *kv = kv_b + kv_base;
    const int group = n_head / n_kv;
    const int pos = I32P(pos_b, pos_off)[r], sq = I32P(seq_b, seq_off)[r];
    global float *out = F32P(o, o_off) + (ulong)r * o_ld + (ulong)h * hdv;
    /* the row's sequence, its block list and every block in it inside their tables */
    const int b0 = sq >= 0 && sq < n_seq ? I32P(bto_b, bto_off)[sq] : -1;
    bool bad = b0 < 0 || pos < 0 || (long)b0 + pos / KV_BLOCK >= bt_len;
    const int p_first = window > 0 && pos >= window ? pos - window + 1 : 0;
    global const int *bt = I32P(bt_b, bt_off) + (bad ? 0 : b0);
    for (int i = p_first / KV_BLOCK; !bad && i <= pos / KV_BLOCK; i++) bad = bt[i] < 0 || bt[i] >= n_blocks;
    if (bad) {
        if (h == 0) FLAG_ERROR(err, 4);
        for (int d = 0; d < hdv; d++) out[d] = 0.0f;
        return;
    }
    global const float *qv = F32P(q, q_off) + (ulong)r * q_ld + (ulong)h * hd;
    const ulong k_tok = kv_tok(n_kv, hd, kv_q8), v_tok = v_in_k ? 0 : kv_tok(n_kv, hdv, kv_q8);
    const ulong head_off = (ulong)(h / group) * kv_tok(1, hd, kv_q8), head_off_v = (ulong)(h / group) * kv_tok(1, hdv, kv_q8);
    ushort q16[ATT_MAX_HD], acc16[ATT_MAX_HD];
    char qq[ATT_MAX_HD];
    float qd[ATT_MAX_HD / 32], acc[ATT_MAX_HD];
    if (kv_q8) {
        /* weft_quantize_row_act Q8_0: d = amax/127, q = round-half-even(x * 127/amax) */
        for (int b = 0; b < hd / 32; b++) {
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(qv[32 * b + j]));
            qd[b] = h2f(f2h(amax / 127));
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            for (int j = 0; j < 32; j++) qq[32 * b + j] = (char)rint(qv[32 * b + j] * id);
        }
        for (int d = 0; d < hdv; d++) acc[d] = 0.0f;
    } else {
        for (int d = 0; d < hd; d++) vstore_half_rte(qv[d], d, PH(q16));
        for (int d = 0; d < hdv; d++) acc16[d] = 0;
    }
    float M = -INFINITY, S = 0.0f;
    for (int p = p_first; p <= pos; p++) {
        const long slot = (long)bt[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK;
        global const uchar *kr = kv + kv_row(slot, 0, n_layer, layer, k_tok, v_tok) + head_off;
        global const uchar *vr = kv + kv_v_row(slot, n_layer, layer, k_tok, v_tok, v_in_k, hd, hdv, kv_q8) + head_off_v;
        float s = (kv_q8 ? dot_q8(kr, qq, qd, hd) : dot_f16(kr, q16, hd)) * scale;
        if (softcap != 0.0f) s = softcap * tanh(s);  /* scale came divided by it (api 6, ggml's form) */
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float Mold = M;
            M = s;
            ms = expf_libm(Mold - M);
            if (kv_q8)
                for (int d = 0; d < hdv; d++) acc[d] *= ms;
            else
                for (int d = 0; d < hdv; d++) vstore_half_rte(vload_half(d, PH(acc16)) * ms, d, PH(acc16));
        } else {
            vs = expf_libm(s - M);
        }
        if (kv_q8)
            for (int d = 0; d < hdv; d++) acc[d] = fma(dq(vr, WEFT_T_Q8_0, d), vs, acc[d]);
        else
            for (int d = 0; d < hdv; d++)
                vstore_half_rte(fma(ldh(vr + 2 * d), vs, vload_half(d, PH(acc16))), d, PH(acc16));
        S = fma(S, ms, vs);
    }
    if (has_sinks) {
        if (!kv_q8)
            for (int d = 0; d < hdv; d++) acc[d] = vload_half(d, PH(acc16));
        const float sk = F32P(sk_b, sk_off)[h];
        float ms = 1.0f, vs = 1.0f;
        if (sk > M) {
            ms = expf_libm(M - sk);
            for (int d = 0; d < hdv; d++) acc[d] *= ms;
        } else {
            vs = expf_libm(sk - M);
        }
        const float t = S * ms;
        S = t + vs;
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (int d = 0; d < hdv; d++) out[d] = acc[d] * inv;
        return;
    }
    const float inv = 1.0f / S;
    for (int d = 0; d < hdv; d++) out[d] = (kv_q8 ? acc[d] : vload_half(d, PH(acc16))) * inv;
}
