/* The recurrent-state kernels of hybrid models (api 9, backends/backend.h): SSM_CONV, the causal
 * depthwise convolution over each sequence's last K - 1 inputs, and DELTA_NET, the gated delta
 * rule over each sequence's S x S matrices per v head. Float operations follow the CPU backend's
 * (backends/cpu/ops/ops_recurrent.c; compile without fma contraction): with the host's libm the
 * results are the CPU's bit for bit (tests/gpu/emu checks it), on a GPU they differ only
 * through the device's expf and logf.
 *
 * Sequences: the launch covers every row as a possible first row of a sequence
 * (kernels-common/recurrent_geom.h); a block finds on the device whether its row is the first
 * of its slot and, if so, runs all of that slot's rows in row order. Rows of one slot need not
 * be adjacent. */
#ifndef WEFT_KC_RECURRENT_CUH
#define WEFT_KC_RECURRENT_CUH

#include <math.h>

#include "kernels-common/launch.h"
#include "kernels-common/recurrent_geom.h"

static_assert(WEFT_GK_DN_GROUPS >= 3, "DELTA_NET's per-row scalars take three 32-lane groups");

/* the error word's code for a slot outside the state (backends/gpu/gpu_common.c names it) */
#define WEFT_KC_ERR_SLOT 4

/* ---- finding a slot's rows (every lane of a 32-lane group calls these with the same
 * arguments and gets the same answer) ---- */

/* The rows among [lo, min(lo + 32, hi)) whose slot is s, as bit r - lo. */
WEFT_DEV unsigned weft_rec_match(const int32_t *slots, int64_t lo, int64_t hi, int32_t s, int lane)
{
    const int64_t r = lo + lane;
    const int m = r < hi && slots[r] == s;
    /* distinct powers of two: the sum is their union (bit 31 as INT_MIN, no overflow) */
    return (unsigned)weft_group_sum_i<32>(m ? (int)(1u << lane) : 0);
}

/* Whether no row before r names slot s (r is its sequence's first row). One read when the
 * row before r names s (a row inside a chunk of one sequence), else a scan of [0, r - 1). */
WEFT_DEV bool weft_rec_first(const int32_t *slots, int64_t r, int32_t s, int lane)
{
    if (r > 0 && slots[r - 1] == s) return false;
    for (int64_t b = 0; b < r - 1; b += 32)
        if (weft_rec_match(slots, b, r - 1, s, lane)) return false;
    return true;
}

/* the lowest set bit of m != 0 */
WEFT_DEV int weft_rec_low_bit(unsigned m)
{
    int l = 0;
    while (!((m >> l) & 1u)) l++;
    return l;
}

/* ---- SSM_CONV ---- */

/* ggml_v_expf's polynomial for one lane: backends/cpu/cpu_expf.h's weft_cpu_expf, step for step
 * (fmaf, an exact scale by 2^n), so the SiLU of a row's whole 16-channel chunks is the CPU's */
WEFT_DEV float weft_rec_poly_expf(float x)
{
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}

/* the output of channel c (of C): y, or its SiLU as the CPU forms it */
WEFT_DEV float weft_rec_conv_out(float y, int64_t c, int64_t C, int silu)
{
    if (!silu) return y;
    const float e = c < (C & ~(int64_t)15) ? weft_rec_poly_expf(0.0f - y) : expf(0.0f - y);
    return y / (1.0f + e);
}

/* A row of the window: the x row it names (>= 0) or the old state's input -(e + 1) */
WEFT_DEV float weft_rec_win(int e, const float *x, size_t x_ld, int64_t c, const float *old)
{
    return e >= 0 ? x[(int64_t)e * x_ld + c] : old[-e - 1];
}

/* Grid (R, ceil(C / blockDim.x)): thread (row r, channel c). y = win[0]·w[0], then fmaf(win[i],
 * w[i], y), the current input last, as the CPU. A row whose K - 1 rows before it are its own
 * sequence's (inside a prefill chunk) reads its window from x alone and runs in parallel with
 * the others. The first row of each slot (the leader) reads the old state once, walks all of
 * the slot's rows keeping the row indices of the last K - 1 inputs, computes the rows the
 * first case left (the sequence's first K - 1, or rows after a gap), and writes the new state
 * (the last K - 1 inputs): the only thread that reads or writes its slot's channel c. */
static __global__ void weft_k_ssm_conv(const struct weft_gk_ssm_conv a)
{
    const int64_t r = blockIdx.x, c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x, C = a.C;
    const int lane = threadIdx.x % 32, K = a.K;
    const bool cok = c < C;
    const int32_t s = a.slots[r];
    if (s < 0 || s >= a.n_slots) {
        if (cok) a.out[r * a.out_ld + c] = 0.0f;
        if (c == 0) *a.err = WEFT_KC_ERR_SLOT;
        return;
    }
    const float *wc = a.w + (cok ? c : 0) * a.w_ld;
    bool fast = r >= K - 1;
    for (int i = 1; fast && i < K; i++) fast = a.slots[r - i] == s;
    if (fast) {
        if (!cok) return;
        const float *x0 = a.x + (r - (K - 1)) * a.x_ld + c;
        float y = x0[0] * wc[0];
        for (int i = 1; i < K - 1; i++) y = fmaf(x0[(int64_t)i * a.x_ld], wc[i], y);
        y = fmaf(a.x[r * a.x_ld + c], wc[K - 1], y);
        a.out[r * a.out_ld + c] = weft_rec_conv_out(y, c, C, a.silu);
        return;
    }
    if (!weft_rec_first(a.slots, r, s, lane)) return;
    /* the leader: ring[(head + i) % (K - 1)] is the window's input i, oldest first */
    float *st = a.state + (int64_t)s * a.state_ld + c;
    float old[WEFT_GK_CONV_MAX_K - 1];
    int ring[WEFT_GK_CONV_MAX_K - 1];
    for (int i = 0; i < K - 1; i++) {
        old[i] = cok ? st[(int64_t)i * C] : 0.0f;
        ring[i] = -(i + 1);
    }
    int head = 0;
    for (int64_t b = r; b < a.R; b += 32) {
        unsigned m = weft_rec_match(a.slots, b, a.R, s, lane);
        while (m) {
            const int l = weft_rec_low_bit(m);
            m &= m - 1;
            const int64_t q = b + l;
            /* q ran in parallel when its K - 1 inputs before are the rows just before it */
            const bool par = ring[head] >= 0 && ring[head] == (int)(q - (K - 1));
            if (!par && cok) {
                float y = weft_rec_win(ring[head], a.x, a.x_ld, c, old) * wc[0];
                for (int i = 1; i < K - 1; i++)
                    y = fmaf(weft_rec_win(ring[(head + i) % (K - 1)], a.x, a.x_ld, c, old), wc[i], y);
                y = fmaf(a.x[q * a.x_ld + c], wc[K - 1], y);
                a.out[q * a.out_ld + c] = weft_rec_conv_out(y, c, C, a.silu);
            }
            ring[head] = (int)q;
            head = (head + 1) % (K - 1);
        }
    }
    if (!cok) return;
    for (int i = 0; i < K - 1; i++) st[(int64_t)i * C] = weft_rec_win(ring[(head + i) % (K - 1)], a.x, a.x_ld, c, old);
}

/* ---- DELTA_NET ---- */

/* ggml's AVX ggml_vec_dot_f32 of two state-row-shaped vectors, lane l holding columns 32c + l
 * (l = 8a + m: lane m of accumulator a): fmaf over the nfull whole 32-column chunks, the
 * reduction (acc0 + acc2) + (acc1 + acc3) per lane, t_m + t_{m+4}, (u0 + u1) + (u2 + u3) as
 * xor exchanges 16, 8, 4, 1, 2 (each lane's sum the same float, the adds commuted), then the
 * tail's products (chunk nfull, lanes < tail) added in double one after another, through the
 * group's 32 floats of shared memory tb (with tail != 0 every thread of the block calls it). */
template <int NC>
WEFT_DEV float weft_dn_dot(const float (&x)[NC], const float (&y)[NC], int nfull, int tail, int lane, float *tb)
{
    float acc = 0.0f, p = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c < nfull) acc = fmaf(x[c], y[c], acc);
        if (c == nfull) p = x[c] * y[c];
    }
    acc += weft_shfl_xor(acc, 16, 32);
    acc += weft_shfl_xor(acc, 8, 32);
    acc += weft_shfl_xor(acc, 4, 32);
    acc += weft_shfl_xor(acc, 1, 32);
    acc += weft_shfl_xor(acc, 2, 32);
    if (!tail) return acc;
    tb[lane] = p;
    __syncthreads();
    double s = (double)acc;
    for (int t = 0; t < tail; t++) s += (double)tb[t];
    __syncthreads();   /* tb is written again by the next call */
    return (float)s;
}

/* ggml's l2_norm scale of one head: Σ x² in double, element after element */
WEFT_DEV float weft_dn_l2_scale(const float *x, int n, float eps)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    return 1.0f / fmaxf(sqrtf((float)sum), eps);
}

/* Grid (ceil(R / per_block), Hv, tiles) of 32 * WEFT_GK_DN_GROUPS threads (recurrent_geom.h):
 * block x looks at its candidate rows r0 in order and runs the sequence of each that is its
 * slot's first row; group g holds state rows j = (z · GROUPS + g) · JW + t of v head h in
 * registers (NC chunks of 32 columns per lane) for the whole sequence. Its rows run 32 at a
 * time: their per-row scalars (the q and k norms' scales, the sigmoid of beta, the decay) are
 * formed first, one row per lane (three groups of the block), then the rows one after another:
 *   M[j] *= decay; d = (v[j] - dot(M[j], k)) · b; M[j] = fmaf(k, d, M[j]);
 *   out[j] = dot(M[j], q) · qscale. */
struct weft_kc_dn {
    struct weft_gk_delta_net a;
    float qscale;               /* 1 / sqrtf(S), formed on the host */
    int64_t per_block;          /* candidate first rows per block column (recurrent_geom.h) */
};

/* the sequence whose first row is r0, if it is one (every thread of the block calls it) */
template <int NC, int JW>
WEFT_DEV void weft_dn_seq(const struct weft_kc_dn &k, int64_t r0)
{
    const struct weft_gk_delta_net &a = k.a;
    __shared__ float s_qs[32], s_ks[32], s_b[32], s_dec[32], s_tail[WEFT_GK_DN_GROUPS][32];
    const int h = blockIdx.y, lane = threadIdx.x % 32, g = threadIdx.x / 32;
    const int S = a.head_dim, Hk = a.n_k_head, Hv = a.n_v_head, nfull = S / 32, tail = S % 32;
    const int32_t s = a.slots[r0];
    if (!weft_rec_first(a.slots, r0, s, lane)) return;
    const bool bad = s < 0 || s >= a.n_slots;
    if (bad && threadIdx.x == 0 && h == 0 && blockIdx.z == 0) *a.err = WEFT_KC_ERR_SLOT;
    const int kh = a.k_grouped ? h / (Hv / Hk) : h % Hk;
    const int j0 = ((int)blockIdx.z * WEFT_GK_DN_GROUPS + g) * JW;
    float *M = bad ? NULL : a.state + (int64_t)s * a.state_ld + (int64_t)h * S * S;
    float m[JW][NC];
#pragma unroll
    for (int t = 0; t < JW; t++)
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int j = j0 + t, i = 32 * c + lane;
            m[t][c] = M && j < S && i < S ? M[(int64_t)j * S + i] : 0.0f;
        }
    for (int64_t b = r0; b < a.R; b += 32) {
        const unsigned mask = weft_rec_match(a.slots, b, a.R, s, lane);
        if (!mask) continue;   /* the same mask in every group */
        __syncthreads();       /* the previous rows' scalars are read */
        if (!bad && ((mask >> lane) & 1u)) {
            const int64_t q = b + lane;
            const float *x = a.in + q * a.in_ld;
            if (g == 0) {
                s_qs[lane] = weft_dn_l2_scale(x + (int64_t)kh * S, S, a.eps);
            } else if (g == 1) {
                s_ks[lane] = weft_dn_l2_scale(x + (int64_t)(Hk + kh) * S, S, a.eps);
            } else if (g == 2) {
                s_b[lane] = 1.0f / (1.0f + expf(-a.beta[q * a.beta_ld + h]));
                const float xa = a.alpha[q * a.alpha_ld + h] + a.dt_bias[h];
                const float gate = (xa > 20.0f ? xa : logf(1.0f + expf(xa))) * a.a[h];
                s_dec[lane] = expf(gate);
            }
        }
        __syncthreads();
        unsigned mm = mask;
        while (mm) {
            const int l = weft_rec_low_bit(mm);
            mm &= mm - 1;
            const int64_t q = b + l;
            float *o = a.out + q * a.out_ld + (int64_t)h * S;
            if (bad) {
                if (lane < JW && j0 + lane < S) o[j0 + lane] = 0.0f;
                continue;
            }
            const float *x = a.in + q * a.in_ld;
            const float qs = s_qs[l], ks = s_ks[l], bb = s_b[l], dec = s_dec[l];
            float kk[NC], qq[NC];
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int i = 32 * c + lane;
                kk[c] = i < S ? x[(int64_t)(Hk + kh) * S + i] * ks : 0.0f;
                qq[c] = i < S ? x[(int64_t)kh * S + i] * qs : 0.0f;
            }
            const float *v = x + (int64_t)(2 * Hk + h) * S;
            float mine = 0.0f;
#pragma unroll
            for (int t = 0; t < JW; t++) {
                /* a row past S: skipped by the group (the same in all its lanes); with a tail,
                 * the whole block takes part in every dot (rows of zeros past S) */
                const int j = j0 + t;
                if (j < S || tail) {
#pragma unroll
                    for (int c = 0; c < NC; c++) m[t][c] *= dec;
                    const float vj = j < S ? v[j] : 0.0f;
                    const float d = (vj - weft_dn_dot<NC>(m[t], kk, nfull, tail, lane, s_tail[g])) * bb;
#pragma unroll
                    for (int c = 0; c < NC; c++) m[t][c] = fmaf(kk[c], d, m[t][c]);
                    const float y = weft_dn_dot<NC>(m[t], qq, nfull, tail, lane, s_tail[g]) * k.qscale;
                    if (lane == t) mine = y;
                }
            }
            if (lane < JW && j0 + lane < S) o[j0 + lane] = mine;
        }
    }
    if (!M) return;
#pragma unroll
    for (int t = 0; t < JW; t++)
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int j = j0 + t, i = 32 * c + lane;
            if (j < S && i < S) M[(int64_t)j * S + i] = m[t][c];
        }
}

template <int NC, int JW>
static __global__ void weft_k_delta_net(const struct weft_kc_dn k)
{
    const struct weft_gk_delta_net &a = k.a;
    const int64_t c0 = (int64_t)blockIdx.x * k.per_block, c1 = c0 + k.per_block < a.R ? c0 + k.per_block : a.R;
    for (int64_t r0 = c0; r0 < c1; r0++) weft_dn_seq<NC, JW>(k, r0);
}

#endif
