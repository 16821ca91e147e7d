/* The recurrent layers of hybrid models (api 9, backends/backend.h): SSM_CONV and DELTA_NET over
 * a per-sequence state, in the CPU's float order (backends/cpu/ops/ops_recurrent.c), so the
 * exact forms give its bits.
 *
 * A sequence's rows run one after another (each sees the state the previous left); sequences,
 * channels (SSM_CONV) and v heads and state rows (DELTA_NET) are independent. The device finds
 * the sequences itself (the slots are written by the core, nothing is read back): rec_index
 * lists them once per slots vector, then a work-item (SSM_CONV: one channel) or work-group
 * (DELTA_NET: one v head, a work-item per state row) per sequence keeps its part of the state
 * in private memory and walks the sequence's rows.
 *
 * rec_index's list (ints): [0]: the sequences (distinct valid slots); [1, 1 + rows): their
 * first rows, in order of first use; [1 + rows, 1 + 2 rows): for each row, the next row of its
 * slot (-1: none); [1 + 2 rows, 1 + 3 rows): scratch (the leading rows). A row whose slot is
 * outside [0, n_slots) is in no sequence (its outputs are not written) and flags error 6.
 *
 * Without doubles (no cl_khr_fp64) the sums in double are float sums and expf/logf the device's
 * own: close to the CPU's, not its bits. */

#define REC_MAX_K 64      /* SSM_CONV's taps at most (the host's OCL_REC_MAX_K) */
#define DN_MAX_S 256      /* DELTA_NET's head_dim at most (the host's OCL_DN_MAX_S) */

#ifdef WEFT_F64
#define REC_SUM double
#else
#define REC_SUM float
#endif

/* one work-group (any size): the sequences of `rows` rows' slots */
kernel void rec_index(global const uchar *slots, ulong slots_off, int rows, int n_slots, global int *idx,
                      global int *err)
{
    const int lid = get_local_id(0), nl = get_local_size(0);
    global const int *sl = I32P(slots, slots_off);
    global int *first = idx + 1, *next = idx + 1 + rows, *lead = idx + 1 + 2 * rows;
    local int n_seq;
    if (lid == 0) n_seq = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = lid; r < rows; r += nl) {
        const int s = sl[r];
        const bool ok = s >= 0 && s < n_slots;
        if (!ok) FLAG_ERROR(err, 6);
        int nx = -1;
        for (int q = r + 1; ok && q < rows && nx < 0; q++)
            if (sl[q] == s) nx = q;
        bool leads = ok;
        for (int q = r - 1; leads && q >= 0; q--) leads = sl[q] != s;
        next[r] = nx;
        lead[r] = leads;
        if (leads) atomic_inc(&n_seq);
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    for (int r = lid; r < rows; r += nl) {
        if (!lead[r]) continue;
        int rank = 0;
        for (int q = 0; q < r; q++) rank += lead[q];
        first[rank] = r;
    }
    if (lid == 0) idx[0] = n_seq;
}

/* SSM_CONV: global (C, sequences), a work-item per (channel c, sequence u). The K - 1 kept
 * inputs of the channel (win, oldest first) in private memory while the rows run:
 * y = win[0] * w[0], fma(win[i], w[i], y) for i < K - 1, fma(x, w[K - 1], y); SiLU as
 * y / (1 + e(0 - y)), e ggml's polynomial on the first C & ~15 channels, libm's expf on the
 * rest. */
kernel void ssm_conv(global const uchar *x, ulong x_off, ulong x_ld, global const uchar *w, ulong w_off, ulong w_ld,
                     global uchar *o, ulong o_off, ulong o_ld, global uchar *st, ulong st_off, ulong st_ld,
                     global const uchar *slots, ulong slots_off, global const int *idx, int rows, int C, int K,
                     int silu)
{
    const int c = get_global_id(0), u = get_global_id(1);
    if (c >= C || u >= idx[0]) return;
    global const int *next = idx + 1 + rows;
    int r = idx[1 + u];
    global float *s = F32P(st, st_off) + (ulong)I32P(slots, slots_off)[r] * st_ld + c;
    global const float *wc = F32P(w, w_off) + (ulong)c * w_ld;
    float win[REC_MAX_K - 1];
    for (int i = 0; i < K - 1; i++) win[i] = s[(ulong)i * C];
    const bool poly = c < (C & ~15);
    for (; r >= 0; r = next[r]) {
        const float xv = (F32P(x, x_off) + (ulong)r * x_ld)[c];
        float y = win[0] * wc[0];
        for (int i = 1; i < K - 1; i++) y = fma(win[i], wc[i], y);
        y = fma(xv, wc[K - 1], y);
        for (int i = 0; i + 1 < K - 1; i++) win[i] = win[i + 1];
        win[K - 2] = xv;
        if (silu) y = y / (1.0f + (poly ? expf_poly(0.0f - y) : expf_libm(0.0f - y)));
        (F32P(o, o_off) + (ulong)r * o_ld)[c] = y;
    }
    for (int i = 0; i < K - 1; i++) s[(ulong)i * C] = win[i];
}

/* ggml's AVX ggml_vec_dot_f32 of a private and a local vector: 4 accumulators of 8 lanes of
 * fma over 32-element chunks, (acc0 + acc2) + (acc1 + acc3) per lane, lanes m + (m + 4), then
 * (t0 + t1) + (t2 + t3); the n % 32 tail's products added in double */
inline float dot_ggml(const float *x, local const float *y, int n)
{
    const int n32 = n & ~31;
    float acc[4][8];
    for (int a = 0; a < 4; a++)
        for (int l = 0; l < 8; l++) acc[a][l] = 0.0f;
    for (int c = 0; c < n32; c += 32)
        for (int a = 0; a < 4; a++)
            for (int l = 0; l < 8; l++) acc[a][l] = fma(x[c + 8 * a + l], y[c + 8 * a + l], acc[a][l]);
    float t[8];
    for (int l = 0; l < 8; l++) t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    REC_SUM s = (REC_SUM)(((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7])));
    for (int i = n32; i < n; i++) s += (REC_SUM)(x[i] * y[i]);
    return (float)s;
}

/* ggml's l2_norm scale of one head: 1 / fmaxf(sqrtf((float)sum), eps), the squares rounded
 * to float and summed in double in element order */
inline float l2_scale(global const float *x, int n, float eps)
{
    REC_SUM sum = 0;
    for (int i = 0; i < n; i++) sum += (REC_SUM)(x[i] * x[i]);
    return 1.0f / fmax(sqrt((float)sum), eps);
}

/* DELTA_NET: global (S, Hv, sequences), a work-group of S per (v head h, sequence u), item j
 * holding state row M[j][:] in private memory. Per row: the first items form q's and k's
 * scales and the gates b = 1 / (1 + expf(-beta)), decay = expf(softplus(alpha + dt_bias) * a)
 * (softplus(x) = x > 20 ? x : logf(1 + expf(x)), libm's expf and logf); the group normalises
 * q and k into local memory; then M[j] *= decay, d = (v[j] - dot(M[j], k)) * b,
 * M[j][i] = fma(k[i], d, M[j][i]), out = dot(M[j], q) * qscale (qscale = 1 / sqrtf(S), the
 * host's). */
kernel void delta_net(global const uchar *in, ulong in_off, ulong in_ld, global const uchar *beta, ulong beta_off,
                      ulong beta_ld, global const uchar *alpha, ulong alpha_off, ulong alpha_ld,
                      global const uchar *dtb, ulong dtb_off, global const uchar *av, ulong av_off, global uchar *o,
                      ulong o_off, ulong o_ld, global uchar *st, ulong st_off, ulong st_ld, global const uchar *slots,
                      ulong slots_off, global const int *idx, int rows, int S, int Hk, int Hv, int k_grouped,
                      float eps, float qscale)
{
    const int j = get_local_id(0), h = get_group_id(1), u = get_group_id(2);
    local float qn[DN_MAX_S], kn[DN_MAX_S], par[4];   /* q, k normalised; q scale, k scale, b, decay */
    if (u >= idx[0]) return;   /* the whole group */
    global const int *next = idx + 1 + rows;
    const int kh = k_grouped ? h / (Hv / Hk) : h % Hk;
    int r = idx[1 + u];
    global float *mrow = F32P(st, st_off) + (ulong)I32P(slots, slots_off)[r] * st_ld + ((ulong)h * S + j) * S;
    float m[DN_MAX_S];
    for (int i = 0; i < S; i++) m[i] = mrow[i];
    const int j1 = S > 1 ? 1 : 0, j2 = S > 2 ? 2 : 0;
    while (r >= 0) {
        global const float *xr = F32P(in, in_off) + (ulong)r * in_ld;
        if (j == 0) par[0] = l2_scale(xr + kh * S, S, eps);
        if (j == j1) par[1] = l2_scale(xr + (Hk + kh) * S, S, eps);
        if (j == j2) {
            par[2] = 1.0f / (1.0f + expf_libm(-(F32P(beta, beta_off) + (ulong)r * beta_ld)[h]));
            const float ax = (F32P(alpha, alpha_off) + (ulong)r * alpha_ld)[h] + F32P(dtb, dtb_off)[h];
            const float g = (ax > 20.0f ? ax : logf_libm(1.0f + expf_libm(ax))) * F32P(av, av_off)[h];
            par[3] = expf_libm(g);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        qn[j] = xr[kh * S + j] * par[0];
        kn[j] = xr[(Hk + kh) * S + j] * par[1];
        barrier(CLK_LOCAL_MEM_FENCE);
        const float decay = par[3], b = par[2];
        for (int i = 0; i < S; i++) m[i] *= decay;
        const float d = (xr[(2 * Hk + h) * S + j] - dot_ggml(m, kn, S)) * b;
        for (int i = 0; i < S; i++) m[i] = fma(kn[i], d, m[i]);
        (F32P(o, o_off) + (ulong)r * o_ld)[h * S + j] = dot_ggml(m, qn, S) * qscale;
        r = next[r];
        barrier(CLK_LOCAL_MEM_FENCE);   /* qn, kn and par are read before the next row writes them */
    }
    for (int i = 0; i < S; i++) mrow[i] = m[i];
}
