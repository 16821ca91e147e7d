/* Element-wise and per-row kernels: EMBED (+ scale), RMSNORM (+ residual
 * add), the LOGITS row gather + norm, SILU_MUL (SiLU, GeLU-tanh, the
 * clamped SwiGLU or the sigmoid gate), ADD (api 10: times a scale),
 * and ROPE_KV (rotation, with RoPE scaling: freq factors, YaRN, attn_factor;
 * then the K/V rows written into their paged-cache slots, F16 or Q8_0; api 10:
 * q rotated alone).
 * Float operations follow the CPU backend's order (backends/cpu/ops/ops_elementwise.c,
 * backends/cpu/ops/ops_attention.c); compile without fma contraction. */
#ifndef WEFT_KC_OPS_CUH
#define WEFT_KC_OPS_CUH

#include "kernels-common/kv.cuh"

/* out[r][i] = dequant(table[ids[r]])[i] (* scale, when scale != 0: one F32
 * multiply after dequantizing, as the CPU); grid (ceil(E/blockDim.x), R).
 * An id outside [0, V) writes zeros and records itself in *err (err != 0
 * is reported by the backend's next sync). */
template <int T>
static __global__ void weft_k_embed(const uint8_t *table, size_t t_nb1, int64_t V, int64_t E, const int32_t *ids,
                             float scale, float *out, size_t out_ld, int *err)
{
    const int64_t r = blockIdx.y, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= E) return;
    const int32_t id = ids[r];
    if (id < 0 || id >= V) {
        out[r * out_ld + i] = 0.0f;
        if (i == 0) *err = 1;
        return;
    }
    const float v = weft_dq<T>::at(table + (size_t)id * t_nb1, i);
    out[r * out_ld + i] = scale != 0.0f ? v * scale : v;
}

/* Sum over a whole block (blockDim.x a multiple of 32, <= 1024). All
 * threads get the total. */
WEFT_DEV float weft_block_sum(float v, float *smem /* [32] */)
{
    v = weft_group_sum<32>(v);
    const int g = threadIdx.x / 32, ng = blockDim.x / 32;
    __syncthreads();  /* smem may still be read from a previous call */
    if (threadIdx.x % 32 == 0) smem[g] = v;
    __syncthreads();
    float t = 0.0f;
    for (int j = 0; j < ng; j++) t += smem[j];
    return t;
}

/* One block per row: h = x (+ add, stored to sum); out = h * scale * w with
 * scale = 1/sqrt(mean(h²) + eps). rows[] (may be NULL) picks which x row
 * feeds output row blockIdx.x (LOGITS); a bad index sets *err. */
static __global__ void weft_k_rmsnorm(const float *x, size_t x_ld, const int32_t *rows, int64_t n_x_rows,
                               const float *add, size_t add_ld, float *sum, size_t sum_ld, const float *w,
                               float *out, size_t out_ld, int64_t K, float eps, int *err)
{
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    int64_t xr = r;
    if (rows) {
        xr = rows[r];
        if (xr < 0 || xr >= n_x_rows) {
            if (threadIdx.x == 0) *err = 2;
            xr = 0;
        }
    }
    const float *xp = x + xr * x_ld;
    float ss = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
        float h = xp[k];
        if (add) {
            h = h + add[r * add_ld + k];
            sum[r * sum_ld + k] = h;
        }
        ss += h * h;
    }
    ss = weft_block_sum(ss, red);
    const float mean = ss / (float)K;
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
        /* the thread that wrote sum[k] reads it back */
        float h = add ? sum[r * sum_ld + k] : xp[k];
        out[r * out_ld + k] = h * scale * w[k];
    }
}

/* The GLU activations of SILU_MUL (enum weft_glu_act, backends/backend.h). */

/* SiLU: x / (1 + exp(-x)) */
WEFT_DEV float weft_silu(float x) { return x / (1.0f + expf(-x)); }

/* GeLU, tanh form, as the CPU's F16-table GeGLU
 * (backends/cpu/ops/ops_elementwise.c) for -10 < x < 10: half(gelu(half(x))) with gelu in F32 in the CPU's order
 * of operations (outside, weft_k_glu: out = 0 for x <= -10, x * up for
 * x >= 10). The F32 tanh is the double tanh rounded to float (correctly
 * rounded but for double-rounding rarities): 1 + tanh cancels for x below
 * about -3, where an ulp off in tanh moves the F16 result; over every F16
 * input this rounds as glibc's tanhf does, so the lookups agree with the
 * CPU's table bit for bit. */
WEFT_DEV float weft_gelu_tanh_f16(float x)
{
    const float h = weft_h2f(weft_f2h(x));
    const float a = 0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h);
    const float t = (float)tanh((double)a);
    return weft_h2f(weft_f2h(0.5f * h * (1.0f + t)));
}

/* gpt-oss's clamped SwiGLU (api 7), the CPU's swiglu_oai_row: the gate clamped above (a NaN
 * gate becomes limit, as the CPU's comparison), up clamped both ways, then
 * x / (1 + expf(alpha · -x)) · (up + 1) (the device's expf, the CPU's libm) */
WEFT_DEV float weft_swiglu_oai(float g, float u, float alpha, float limit)
{
    const float x = g < limit ? g : limit;
    const float v = u < -limit ? -limit : u > limit ? limit : u;
    const float glu = x / (1.0f + expf(alpha * -x));
    return glu * (v + 1.0f);
}

/* out = act(gate) * up; grid (ceil(K/bd), R); alpha, limit: SWIGLU_OAI's */
template <int ACT>
static __global__ void weft_k_glu(const float *g, size_t g_ld, const float *u, size_t u_ld, float *out,
                                  size_t out_ld, int64_t K, float alpha, float limit)
{
    const int64_t r = blockIdx.y, k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    const float x = g[r * g_ld + k], up = u[r * u_ld + k];
    float y;
    if (ACT == WEFT_GLU_GELU_TANH)   /* +0 below -10 whatever up is, as the CPU */
        y = x <= -10.0f ? 0.0f : x >= 10.0f ? x * up : weft_gelu_tanh_f16(x) * up;
    else if (ACT == WEFT_GLU_SWIGLU_OAI)
        y = weft_swiglu_oai(x, up, alpha, limit);
    else if (ACT == WEFT_GLU_SIGMOID)   /* api 9's gated attention output, the CPU's order */
        y = up * (1.0f / (1.0f + expf(-x)));
    else
        y = weft_silu(x) * up;
    out[r * out_ld + k] = y;
}

static __global__ void weft_k_softcap(float *x, size_t ld, int64_t K, float cap, float inv)
{
    const int64_t r = blockIdx.y, k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    float *p = x + r * ld + k;
    *p = tanhf(*p * inv) * cap;
}

/* out = a + b; api 10: scale != 0: out = (a + b) * scale, the sum rounded to F32 before the
 * product, as the CPU (two roundings: no fma can join them) */
static __global__ void weft_k_add(const float *a, size_t a_ld, const float *b, size_t b_ld, float *out, size_t out_ld,
                           int64_t K, float scale)
{
    const int64_t r = blockIdx.y, k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    const float t = a[r * a_ld + k] + b[r * b_ld + k];
    out[r * out_ld + k] = scale != 0.0f ? t * scale : t;
}

/* RoPE scaling as the kernel sees it (launch.h's weft_gk_rope_ext; the
 * plain rotation is {NULL, 0, 0, 0, 1}). */
struct weft_kc_rope_ext {
    const float *ff;         /* n_rot/2 divisors or NULL */
    float ext, c0, c1;       /* YaRN's mix and ramp ends */
    float mscale;            /* cos/sin magnitude (from the host) */
};

/* Pair i's cos and sin, base/rope.h's weft_rope_cos_sin_ext in the same
 * float operations and order: theta_e = (pos * theta_scale^i by repeated
 * multiplication) / ff[i], theta = freq_scale * theta_e, YaRN's mix
 * theta (1 - r) + theta_e r, then cos and sin times mscale (the device's
 * cosf/sinf, the only step not the CPU's). */
WEFT_DEV void weft_rope_cs(int32_t p, int i, float theta_scale, float freq_scale, const struct weft_kc_rope_ext &e,
                           float *c, float *s)
{
    float theta = (float)p;
    for (int j = 0; j < i; j++) theta *= theta_scale;
    const float t_extrap = e.ff ? theta / e.ff[i] : theta;
    const float t_interp = freq_scale * t_extrap;
    float t = t_interp;
    if (e.ext != 0.0f) {
        const float y = ((float)i - e.c0) / fmaxf(0.001f, e.c1 - e.c0);
        const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * e.ext;
        t = t_interp * (1.0f - ramp) + t_extrap * ramp;
    }
    *c = cosf(t) * e.mscale;
    *s = sinf(t) * e.mscale;
}

/* Rotate q (n_head heads) and k (n_kv heads) of every row in place. One
 * thread per (row, head, pair i < n_rot/2), the angle from weft_rope_cs
 * (theta_scale = freq_base^(-2/n_rot) computed on the host); the products
 * with x0 fused, as the CPU. n_kv 0: q only, k is not read (api 10's q_only). */
static __global__ void weft_k_rope(float *q, size_t q_ld, float *k, size_t k_ld, const int32_t *pos, int64_t R,
                            int n_head, int n_kv, int hd, int n_rot, float theta_scale, float freq_scale,
                            int neox, struct weft_kc_rope_ext e)
{
    const int half = n_rot / 2, nh = n_head + n_kv;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= R * nh * half) return;
    const int i = (int)(t % half);
    const int h = (int)((t / half) % nh);
    const int64_t r = t / ((int64_t)half * nh);
    float *v = h < n_head ? q + r * q_ld + (size_t)h * hd : k + r * k_ld + (size_t)(h - n_head) * hd;
    float c, s;
    weft_rope_cs(pos[r], i, theta_scale, freq_scale, e, &c, &s);
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = fmaf(x0, c, -(x1 * s));
    v[b] = fmaf(x0, s, x1 * c);
}

/* F16 cache: one thread per (row, element of the wider of the n_kv*hd K
 * row and the n_kv*hd_v V row), writing K and V where the element is in
 * each; a latent cache (v_in_k): K only (v is not read). */
static __global__ void weft_k_kv_write_f16(const float *k, size_t k_ld, const float *v, size_t v_ld, const int32_t *slot,
                                    int64_t R, struct weft_kc_kv kv)
{
    const int64_t EK = (int64_t)kv.n_kv * kv.hd, EV = kv.v_in_k ? 0 : (int64_t)kv.n_kv * kv.hd_v;
    const int64_t E = EK > EV ? EK : EV;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= R * E) return;
    const int64_t r = t / E, e = t % E;
    if (e < EK) ((uint16_t *)weft_kv_row(kv, slot[r], 0))[e] = weft_f2h(k[r * k_ld + e]);
    if (e < EV) ((uint16_t *)weft_kv_row(kv, slot[r], 1))[e] = weft_f2h(v[r * v_ld + e]);
}

/* Q8_0 cache (hd, hd_v % 32 == 0): one 32-lane group per (row, 32-element
 * block of K or of V: the K row's n_kv*hd/32 blocks, then the V row's
 * n_kv*hd_v/32; none of V's for a latent cache), rounding as the reference
 * quantizer: d = amax/127, q = roundf(x * (1/d)) (half away from zero). */
static __global__ void weft_k_kv_write_q8_0(const float *k, size_t k_ld, const float *v, size_t v_ld,
                                     const int32_t *slot, int64_t R, struct weft_kc_kv kv)
{
    const int lane = threadIdx.x % 32;
    const int64_t nbk = (int64_t)kv.n_kv * kv.hd / 32;
    const int64_t nb = nbk + (kv.v_in_k ? 0 : (int64_t)kv.n_kv * kv.hd_v / 32);
    const int64_t g = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (g >= R * nb) return;
    const int64_t r = g / nb, j = g % nb;
    const int which = j >= nbk;
    const int64_t b = which ? j - nbk : j;
    const float x = which ? v[r * v_ld + b * 32 + lane] : k[r * k_ld + b * 32 + lane];
    const float amax = weft_group_max<32>(fabsf(x));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t *blk = weft_kv_row(kv, slot[r], which) + b * WEFT_BSZ(q8_0);
    blk[WEFT_BOFF(q8_0, qs) + lane] = (uint8_t)(int8_t)roundf(x * id);
    if (lane == 0) *(uint16_t *)blk = weft_f2h(d);
}

#endif
