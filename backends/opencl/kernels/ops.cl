/* The element-wise ops: EMBED, RMSNORM (and LOGITS' row normalisation),
 * SILU_MUL (SwiGLU, GeGLU, SWIGLU_OAI, SIGMOID), ADD. Row strides (ld) are
 * in floats, offsets in bytes. */

/* out[r] = dequant(table[ids[r]]) (* scale, one float multiply, when
 * scale is not 0): global (ne0, n_ids) */
kernel void embed(global const uchar *tab, ulong tab_off, ulong tab_nb1, int type, int ne0, int n_tab,
                  global const uchar *ids, ulong ids_off, global uchar *out, ulong out_off, ulong out_ld,
                  float scale, global int *err)
{
    const int k = get_global_id(0), r = get_global_id(1);
    if (k >= ne0) return;
    const int id = I32P(ids, ids_off)[r];
    global float *y = F32P(out, out_off) + r * out_ld;
    if (id < 0 || id >= n_tab) {
        if (k == 0) FLAG_ERROR(err, 1);
        y[k] = 0.0f;
        return;
    }
    const float v = dq(tab + tab_off + (ulong)id * tab_nb1, type, k);
    y[k] = scale != 0.0f ? v * scale : v;
}

/* 1/sqrt(mean(h^2) + eps) as weft_cpu_rms_scale: squares rounded to float,
 * summed in double in element order (float without fp64) */
inline float rms_scale(global const float *h, int n, float eps)
{
#ifdef WEFT_F64
    double sum = 0.0;
    for (int k = 0; k < n; k++) sum += (double)(h[k] * h[k]);
    const float mean = (float)(sum / (double)n);
#else
    float sum = 0.0f;
    for (int k = 0; k < n; k++) sum += h[k] * h[k];
    const float mean = sum / (float)n;
#endif
    return 1.0f / sqrt(mean + eps);
}

/* y = h * scale * w, h = x (+ add, stored to sum): one work-group per row;
 * the first work-item forms the scale (the CPU's summation order) */
kernel void rmsnorm(global const uchar *x, ulong x_off, ulong x_ld, global const uchar *a, ulong a_off, ulong a_ld,
                    global uchar *s, ulong s_off, ulong s_ld, global const uchar *w, ulong w_off, global uchar *o,
                    ulong o_off, ulong o_ld, int K, float eps, int has_add)
{
    const int r = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0);
    global const float *xr = F32P(x, x_off) + r * x_ld;
    global const float *h = xr;
    if (has_add) {
        global const float *ar = F32P(a, a_off) + r * a_ld;
        global float *sr = F32P(s, s_off) + r * s_ld;
        for (int k = lid; k < K; k += nl) sr[k] = xr[k] + ar[k];
        barrier(CLK_GLOBAL_MEM_FENCE);
        h = sr;
    }
    local float scale;
    if (lid == 0) scale = rms_scale(h, K, eps);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float sc = scale;
    global const float *wr = F32P(w, w_off);
    global float *y = F32P(o, o_off) + r * o_ld;
    for (int k = lid; k < K; k += nl) y[k] = h[k] * sc * wr[k];
}

/* LOGITS' first half: row i of out = rmsnorm(x[rows[i]]) (one work-group
 * per row) */
kernel void logits_norm(global const uchar *x, ulong x_off, ulong x_ld, int n_x, global const uchar *rows,
                        ulong rows_off, global const uchar *w, ulong w_off, global uchar *o, ulong o_off, int K,
                        float eps, global int *err)
{
    const int i = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0);
    const int idx = I32P(rows, rows_off)[i];
    global float *y = F32P(o, o_off) + (ulong)i * K;
    if (idx < 0 || idx >= n_x) {
        if (lid == 0) FLAG_ERROR(err, 2);
        for (int k = lid; k < K; k += nl) y[k] = 0.0f;
        return;
    }
    global const float *h = F32P(x, x_off) + (ulong)idx * x_ld;
    local float scale;
    if (lid == 0) scale = rms_scale(h, K, eps);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float sc = scale;
    global const float *wr = F32P(w, w_off);
    for (int k = lid; k < K; k += nl) y[k] = h[k] * sc * wr[k];
}

/* The GLUs, out = act(gate) * up. act 0, SwiGLU as weft_cpu_swiglu_ref:
 * the row's first K & ~15 elements with ggml's polynomial expf, the rest
 * with libm's. act 1, GeLU-tanh as the CPU's geglu_row: 0 at or below -10,
 * x at or above 10, else gtab[F16(x)] (the host's table of every F16
 * value's GeLU, rounded to F16: the CPU's own libm tanhf bits). act 2
 * (api 7, gpt-oss), SWIGLU_OAI as the CPU's swiglu_oai_row: x = min(gate,
 * limit), y = clamp(up, -limit, limit) (NaN as the CPU's comparisons take
 * it), x / (1 + expf(alpha * -x)) * (y + 1) with libm's expf. act 3 (api 9,
 * Qwen3.5's gated attention output), SIGMOID as the CPU's: up * (1 / (1 +
 * expf(-gate))), libm's expf. global (K, rows) */
kernel void silu_mul(global const uchar *g, ulong g_off, ulong g_ld, global const uchar *u, ulong u_off, ulong u_ld,
                     global uchar *o, ulong o_off, ulong o_ld, int K, int act, global const ushort *gtab, float alpha,
                     float limit)
{
    const int k = get_global_id(0), r = get_global_id(1);
    if (k >= K) return;
    const float x = (F32P(g, g_off) + r * g_ld)[k], m = (F32P(u, u_off) + r * u_ld)[k];
    global float *y = F32P(o, o_off) + r * o_ld + k;
    if (act == 2) {
        const float xc = x < limit ? x : limit;
        const float v = m < -limit ? -limit : m > limit ? limit : m;
        const float glu = xc / (1.0f + expf_libm(alpha * -xc));
        *y = glu * (v + 1.0f);
        return;
    }
    if (act == 3) {
        *y = m * (1.0f / (1.0f + expf_libm(-x)));
        return;
    }
    if (act) {
        *y = x <= -10.0f ? 0.0f : x >= 10.0f ? x * m : h2f(gtab[f2h(x)]) * m;
        return;
    }
    const float e = k < (K & ~15) ? expf_poly(0.0f - x) : expf_libm(-x);
    *y = x / (1.0f + e) * m;
}

/* LOGITS' soft-cap (api 6), in place: o = tanh(o * inv) * cap, inv = 1 / cap
 * (llama.cpp's scale, tanh, scale). global (K, rows) */
kernel void softcap(global uchar *o, ulong o_off, ulong o_ld, int K, float cap, float inv)
{
    const int k = get_global_id(0), r = get_global_id(1);
    if (k >= K) return;
    global float *x = F32P(o, o_off) + r * o_ld + k;
    *x = tanh(*x * inv) * cap;
}

/* out = a + b; api 10's scale (not 0): out = (a + b) * scale, the sum
 * rounded to float first (two roundings, as the CPU). global (K, rows) */
kernel void add(global const uchar *a, ulong a_off, ulong a_ld, global const uchar *b, ulong b_off, ulong b_ld,
                global uchar *o, ulong o_off, ulong o_ld, int K, float scale)
{
    const int k = get_global_id(0), r = get_global_id(1);
    if (k >= K) return;
    const float s = (F32P(a, a_off) + r * a_ld)[k] + (F32P(b, b_off) + r * b_ld)[k];
    (F32P(o, o_off) + r * o_ld)[k] = scale != 0.0f ? s * scale : s;
}
