/* MATMUL: out[r][n] = (x[r] . W[n] (+ bias[n])) (+ add[r][n]), W of any weight type,
 * read element by element through dq(). Two forms:
 *  - mm_vec (decode): one work-group of MM_WG items per weight row n, for
 *    up to MM_VEC_ROWS activation rows at once (each weight element is read
 *    once for all of them); each item sums a strided slice, then a tree in
 *    local memory;
 *  - mm_tile (prefill): MM_T x MM_T outputs per work-group, W and x staged
 *    through local memory MM_TK elements at a time.
 * `add` may alias `out` (each output reads its add before writing). Every
 * form (these and the exact ones below) ends the same way: the bias (F32,
 * one per weight row, has_bias) is added to the finished dot product, then
 * the residual, each a separate float add as the CPU. */
#define MM_WG 64
#define MM_VEC_ROWS 8
#define MM_T 16
#define MM_TK 32

kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1)))
void mm_vec(global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *x, ulong x_off,
            ulong x_ld, global uchar *o, ulong o_off, ulong o_ld, global const uchar *a, ulong a_off, ulong a_ld,
            int has_add, global const uchar *bias_b, ulong bias_off, int has_bias, int K, int N, int M)
{
    const int n = get_group_id(0), lid = get_local_id(0);
    const int r0 = get_group_id(1) * MM_VEC_ROWS, nr = min(MM_VEC_ROWS, M - r0);
    global const uchar *row = w + w_off + (ulong)n * w_nb1;
    global const float *xr = F32P(x, x_off) + (ulong)r0 * x_ld;
    float acc[MM_VEC_ROWS];
    for (int r = 0; r < MM_VEC_ROWS; r++) acc[r] = 0.0f;
    for (int k = lid; k < K; k += MM_WG) {
        const float wv = dq(row, type, k);
        for (int r = 0; r < nr; r++) acc[r] = fma(wv, xr[(ulong)r * x_ld + k], acc[r]);
    }
    local float red[MM_VEC_ROWS][MM_WG];
    for (int r = 0; r < MM_VEC_ROWS; r++) red[r][lid] = acc[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = MM_WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            for (int r = 0; r < nr; r++) red[r][lid] += red[r][lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < nr) {
        const int r = r0 + lid;
        float v = red[lid][0];
        if (has_bias) v += F32P(bias_b, bias_off)[n];
        if (has_add) v += (F32P(a, a_off) + (ulong)r * a_ld)[n];
        (F32P(o, o_off) + (ulong)r * o_ld)[n] = v;
    }
}

kernel __attribute__((reqd_work_group_size(MM_T, MM_T, 1)))
void mm_tile(global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *x, ulong x_off,
             ulong x_ld, global uchar *o, ulong o_off, ulong o_ld, global const uchar *a, ulong a_off, ulong a_ld,
             int has_add, global const uchar *bias_b, ulong bias_off, int has_bias, int K, int N, int M)
{
    const int tn = get_local_id(0), tr = get_local_id(1);
    const int n0 = get_group_id(0) * MM_T, r0 = get_group_id(1) * MM_T;
    local float ws[MM_T][MM_TK + 1], xs[MM_T][MM_TK + 1];
    const int lin = tr * MM_T + tn;  /* 0..255: loads MM_T*MM_TK/256 = 2 elements of each */
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += MM_TK) {
        for (int i = lin; i < MM_T * MM_TK; i += MM_T * MM_T) {
            const int rr = i / MM_TK, kk = i % MM_TK, k = k0 + kk;
            const int n = n0 + rr, r = r0 + rr;
            ws[rr][kk] = n < N && k < K ? dq(w + w_off + (ulong)n * w_nb1, type, k) : 0.0f;
            xs[rr][kk] = r < M && k < K ? (F32P(x, x_off) + (ulong)r * x_ld)[k] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < MM_TK; kk++) acc = fma(ws[tn][kk], xs[tr][kk], acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int n = n0 + tn, r = r0 + tr;
    if (n < N && r < M) {
        float v = acc;
        if (has_bias) v += F32P(bias_b, bias_off)[n];
        if (has_add) v += (F32P(a, a_off) + (ulong)r * a_ld)[n];
        (F32P(o, o_off) + (ulong)r * o_ld)[n] = v;
    }
}

/* ---- exact forms (CPU-type devices): the CPU backend's bits ---- */

/* _mm512_reduce_add_ps's order (cpu_ref_dot.c reduce_add_16) */
inline float reduce16(const float *x)
{
    float t[8], u[4];
    for (int i = 0; i < 8; i++) t[i] = x[i] + x[i + 8];
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

/* activation element e as the CPU's matmul sees it: F16 weights take the
 * activations rounded to F16 (their vec_dot type) */
#define XV(e) (f16 ? h2f(f2h(xr[e])) : xr[e])
#define WV(e) (f16 ? ldh(row + 2 * (e)) : ((global const float *)row)[e])

/* F32 and F16 weights, one work-item per output (n, r), in the order of
 * backends/cpu/cpu_ref_dot.c: mm = 1 the tinyBLAS order of prefill
 * (weft_vec_dot_mm: 16 lanes over 16-element chunks), else the vec_dot
 * order (4 x 16 lanes over 64-element chunks, then the tail: for F32 in
 * float, 4 products at a time rounded and added in order and the last
 * K % 4 fused; for F16 in double). global (N, M) */
inline float dot_exact_f(global const uchar *row, const bool f16, global const float *xr, int K, int mm)
{
    float v;
    if (mm) {
        float acc[16];
        for (int l = 0; l < 16; l++) {
            float c = 0.0f;
            for (int i = l; i < K; i += 16) c = fma(WV(i), XV(i), c);
            acc[l] = c;
        }
        v = reduce16(acc);
    } else {
        const int np = K & ~63;
        float rr[16];
        for (int l = 0; l < 16; l++) {
            float s4[4];
            for (int j = 0; j < 4; j++) {
                float c = 0.0f;
                for (int e = 16 * j + l; e < np; e += 64) c = fma(WV(e), XV(e), c);
                s4[j] = c;
            }
            rr[l] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
        }
        if (f16) {
#ifdef WEFT_F64
            double s = reduce16(rr);
            for (int i = np; i < K; i++) s += (double)(WV(i) * XV(i));
            v = (float)s;
#else
            v = reduce16(rr);
            for (int i = np; i < K; i++) v += WV(i) * XV(i);
#endif
        } else {
            float s = reduce16(rr);
            const int vec_end = np + ((K - np) & ~3);
            for (int i = np; i < vec_end; i++) s += WV(i) * XV(i);
            for (int i = vec_end; i < K; i++) s = fma(WV(i), XV(i), s);
            v = s;
        }
    }
    return v;
}

kernel void mm_exact_f(global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *x, ulong x_off,
                       ulong x_ld, global uchar *o, ulong o_off, ulong o_ld, global const uchar *a, ulong a_off,
                       ulong a_ld, int has_add, global const uchar *bias_b, ulong bias_off, int has_bias, int K, int N,
                       int M, int mm)
{
    const int n = get_global_id(0), r = get_global_id(1);
    if (n >= N || r >= M) return;
    global const uchar *row = w + w_off + (ulong)n * w_nb1;
    global const float *xr = F32P(x, x_off) + (ulong)r * x_ld;
    float v = dot_exact_f(row, type == WEFT_T_F16, xr, K, mm);
    if (has_bias) v += F32P(bias_b, bias_off)[n];
    if (has_add) v += (F32P(a, a_off) + (ulong)r * a_ld)[n];
    (F32P(o, o_off) + (ulong)r * o_ld)[n] = v;
}
#undef XV
#undef WV

/* The activations of the 32-element quants' exact forms, as the CPU's
 * weft_quantize_row_act: per block of 32, d = amax/127 (stored as F16),
 * q = round-half-even(x * 127/amax); Q8_1 (with_sum) also s = F16(sum(q) * d).
 * Blocks of row r at q + (r * K/32 + b) * bytes. global (K/32, M) */
kernel void quant_act(global const uchar *x, ulong x_off, ulong x_ld, global uchar *q, int K, int M, int with_sum)
{
    const int b = get_global_id(0), r = get_global_id(1);
    if (b >= K / 32 || r >= M) return;
    global const float *xs = F32P(x, x_off) + (ulong)r * x_ld + 32 * b;
    global uchar *blk = q + ((ulong)r * (K / 32) + b) * (with_sum ? WEFT_B_Q8_0 + 2 : WEFT_B_Q8_0);
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(xs[j]));
    const float d = amax / 127;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const ushort hd = f2h(d);
    blk[0] = (uchar)hd;
    blk[1] = (uchar)(hd >> 8);
    global uchar *qs = blk + (with_sum ? 4 : 2);
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        const int v = (int)rint(xs[j] * id);
        qs[j] = (uchar)(char)v;
        sum += v;
    }
    if (with_sum) {
        const ushort hs = f2h((float)sum * d);
        blk[2] = (uchar)hs;
        blk[3] = (uchar)(hs >> 8);
    }
}

/* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and MXFP4 weights against
 * quant_act's blocks, one work-item per output (n, r), in the order of
 * backends/cpu/cpu_ref_dot.c: Q4_0 one float sum, sum += float(block's
 * integer dot) * dw * dx; the others ggml's AVX2 vec_dot
 * (block32_fma_lanes): per block the lane l of 8 is the integer sum of
 * elements 4l..4l+3, acc[l] = fma(dw * dx, lane, acc[l]); Q4_1/Q5_1 add
 * summs = fma(m, s, summs) per block; the result is
 * ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) (+ summs). IQ4_NL and MXFP4
 * (dot_nl_pairs; dw: d, or MXFP4's 2^(e-128)) take the blocks in pairs, the
 * even one into acc, the odd one into acc2, and sum acc + acc2 lane by lane
 * as above; an odd last block comes after that sum as fma(dx * dw, its
 * integer dot, sum). mm = 1 (IQ4_NL's prefill, tinyBLAS): every block into
 * acc, no tail. global (N, M) */
#define MMQ_ROWS 4  /* at most this many activation rows per work-item */

/* The dots of one weight row with nr <= ROWS activation rows (ROWS a
 * constant once inlined: each weight block is unpacked once for them), the
 * i-th quant_act's row xrow[i], into res[i] */
inline void q_dots(global const uchar *row, int type, global const uchar *q, const int *xrow, int nr, int K, int mm,
                   float *res, const int ROWS)
{
    const bool with_min = type == WEFT_T_Q4_1 || type == WEFT_T_Q5_1;
    const bool mx = type == WEFT_T_MXFP4, nl = mx || type == WEFT_T_IQ4_NL;
    const int bs = type == WEFT_T_Q4_1 ? WEFT_B_Q4_1 : type == WEFT_T_Q5_0 ? WEFT_B_Q5_0
                 : type == WEFT_T_Q5_1 ? WEFT_B_Q5_1 : type == WEFT_T_Q4_0 ? WEFT_B_Q4_0
                 : type == WEFT_T_IQ4_NL ? WEFT_B_IQ4_NL : mx ? WEFT_B_MXFP4 : WEFT_B_Q8_0;
    const int xbs = with_min ? WEFT_B_Q8_0 + 2 : WEFT_B_Q8_0, nb = K / 32;
    /* integer products as 16-wide vectors (exact in any order); the float
     * steps one lane each, in the CPU's order */
    float8 acc[MMQ_ROWS], acc2[MMQ_ROWS];
    float summs[MMQ_ROWS], sumf[MMQ_ROWS];
    int tail[MMQ_ROWS];  /* IQ4_NL/MXFP4: the odd last block's integer dot (its scale in summs) */
    for (int i = 0; i < ROWS; i++) {
        acc[i] = acc2[i] = (float8)(0.0f);
        summs[i] = sumf[i] = 0.0f;
        tail[i] = 0;
    }
    mm = mm && type == WEFT_T_IQ4_NL;  /* the one type with a tinyBLAS form here */
    const bool odd_tail = nl && !mm && (nb & 1);
    const uint16 sh = (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int b = 0; b < nb; b++) {
        global const uchar *wb = row + (ulong)b * bs;
        int16 lo, hi;  /* weight elements 0..15 and 16..31 */
        if (type == WEFT_T_Q8_0) {
            lo = convert_int16(vload16(0, (global const char *)(wb + 2)));
            hi = convert_int16(vload16(1, (global const char *)(wb + 2)));
        } else if (nl) {  /* code-book values (byte loads: MXFP4's blocks have any alignment) */
            const uchar16 qv = vload16(0, wb + (mx ? WEFT_O_MXFP4_QS : WEFT_O_IQ4_NL_QS));
            const char16 book = mx ? (char16)(WEFT_KV_MXFP4) : (char16)(WEFT_KV_IQ4NL);
            lo = convert_int16(shuffle(book, qv & (uchar)0xF));
            hi = convert_int16(shuffle(book, qv >> (uchar)4));
        } else if (type == WEFT_T_Q4_0 || type == WEFT_T_Q4_1) {
            const uchar16 qv = vload16(0, wb + (type == WEFT_T_Q4_0 ? 2 : 4));
            lo = convert_int16(qv & (uchar)0xF);
            hi = convert_int16(qv >> (uchar)4);
            if (type == WEFT_T_Q4_0) {
                lo -= 8;
                hi -= 8;
            }
        } else {
            const int ho = type == WEFT_T_Q5_1 ? 4 : 2;
            const uint qh = (uint)wb[ho] | (uint)wb[ho + 1] << 8 | (uint)wb[ho + 2] << 16 | (uint)wb[ho + 3] << 24;
            const uchar16 qv = vload16(0, wb + ho + 4);
            const int off = type == WEFT_T_Q5_0 ? 16 : 0;
            lo = (convert_int16(qv & (uchar)0xF) | (convert_int16(((uint16)qh >> sh) & 1u) << 4)) - off;
            hi = (convert_int16(qv >> (uchar)4) | (convert_int16(((uint16)qh >> (sh + 16u)) & 1u) << 4)) - off;
        }
        const float dw = mx ? e8m0_half(wb[WEFT_O_MXFP4_E]) : nl ? ldh(wb + WEFT_O_IQ4_NL_D) : ldh(wb);
        const float mw = with_min ? ldh(wb + 2) : 0.0f;
        for (int i = 0; i < ROWS; i++) {  /* a constant trip count: the arrays stay in registers */
            if (i >= nr) break;
            global const uchar *xb = q + ((ulong)xrow[i] * nb + b) * xbs;
            global const char *xq = (global const char *)(xb + (with_min ? 4 : 2));
            const int16 p0 = lo * convert_int16(vload16(0, xq)), p1 = hi * convert_int16(vload16(1, xq));
            /* lane l: elements 4l..4l+3 */
            const int4 l0 = p0.s048c + p0.s159d + p0.s26ae + p0.s37bf, l1 = p1.s048c + p1.s159d + p1.s26ae + p1.s37bf;
            if (type == WEFT_T_Q4_0) {
                const int4 t = l0 + l1;
                sumf[i] += (float)(t.s0 + t.s1 + t.s2 + t.s3) * dw * ldh(xb);
                continue;
            }
            if (nl) {
                const float sc = ldh(xb) * dw;
                if (odd_tail && b == nb - 1) {
                    const int4 t = l0 + l1;
                    tail[i] = t.s0 + t.s1 + t.s2 + t.s3;
                    summs[i] = sc;
                } else if (mm || !(b & 1)) {
                    acc[i] = fma((float8)(sc), convert_float8((int8)(l0, l1)), acc[i]);
                } else {
                    acc2[i] = fma((float8)(sc), convert_float8((int8)(l0, l1)), acc2[i]);
                }
                continue;
            }
            if (with_min) summs[i] = fma(mw, ldh(xb + 2), summs[i]);
            acc[i] = fma((float8)(dw * ldh(xb)), convert_float8((int8)(l0, l1)), acc[i]);
        }
    }
    for (int i = 0; i < ROWS; i++) {
        if (i >= nr) break;
        if (nl && !mm) acc[i] += acc2[i];
        float v = ((acc[i].s0 + acc[i].s4) + (acc[i].s2 + acc[i].s6)) + ((acc[i].s1 + acc[i].s5) + (acc[i].s3 + acc[i].s7));
        if (with_min) v = v + summs[i];
        if (type == WEFT_T_Q4_0) v = sumf[i];
        if (odd_tail) v = fma(summs[i], (float)tail[i], v);
        res[i] = v;
    }
}

/* ROWS activation rows per work-item: q_dots, then the bias and the residual */
inline void mm_q_rows(global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *q,
                      global uchar *o, ulong o_off, ulong o_ld, global const uchar *a, ulong a_off, ulong a_ld,
                      int has_add, global const uchar *bias_b, ulong bias_off, int has_bias, int K, int N, int M,
                      int mm, const int ROWS)
{
    const int n = get_global_id(0), r0 = get_global_id(1) * ROWS;
    if (n >= N || r0 >= M) return;
    const int nr = min(ROWS, M - r0);
    int xrow[MMQ_ROWS];
    float res[MMQ_ROWS];
    for (int i = 0; i < ROWS; i++) xrow[i] = r0 + i;
    q_dots(w + w_off + (ulong)n * w_nb1, type, q, xrow, nr, K, mm, res, ROWS);
    for (int i = 0; i < ROWS; i++) {
        if (i >= nr) break;
        const int r = r0 + i;
        float v = res[i];
        if (has_bias) v += F32P(bias_b, bias_off)[n];
        if (has_add) v += (F32P(a, a_off) + (ulong)r * a_ld)[n];
        (F32P(o, o_off) + (ulong)r * o_ld)[n] = v;
    }
}

kernel void mm_exact_q(global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *q, ulong q_unused,
                       ulong q_unused2, global uchar *o, ulong o_off, ulong o_ld, global const uchar *a, ulong a_off,
                       ulong a_ld, int has_add, global const uchar *bias_b, ulong bias_off, int has_bias, int K, int N,
                       int M, int mm)
{
    mm_q_rows(w, w_off, w_nb1, type, q, o, o_off, o_ld, a, a_off, a_ld, has_add, bias_b, bias_off, has_bias, K, N, M,
              mm, 1);
}

kernel void mm_exact_q4(global const uchar *w, ulong w_off, ulong w_nb1, int type, global const uchar *q, ulong q_unused,
                        ulong q_unused2, global uchar *o, ulong o_off, ulong o_ld, global const uchar *a, ulong a_off,
                        ulong a_ld, int has_add, global const uchar *bias_b, ulong bias_off, int has_bias, int K, int N,
                        int M, int mm)
{
    mm_q_rows(w, w_off, w_nb1, type, q, o, o_off, o_ld, a, a_off, a_ld, has_add, bias_b, bias_off, has_bias, K, N, M,
              mm, MMQ_ROWS);
}
