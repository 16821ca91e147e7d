/* Host check of api 7's CUDA/HIP device code (tests/gpu/emu/run.sh: kernels-common and its
 * launchers over emu.h): MOE_ROUTE vs the CPU's algorithm (backends/cpu/ops/ops_moe.c with the
 * same expf: ids and weights bit for bit, ties and NaNs included), MATMUL_ID vs MATMUL (R = 1)
 * on each slot's expert (bit for bit; unchosen experts all 0xFF bytes; a bad id), attention
 * sinks and latent caches (split and not, the wide kernel) vs a double reference, ROPE_KV's
 * latent writes vs the CPU's layout, SWIGLU_OAI vs the CPU's formula; api 9's recurrent ops;
 * api 10's ADD scale, ROPE_KV q_only and MOE_ROUTE expert_scale through the shared host code
 * (backends/gpu/gpu_common.c's supports, gpu_encode.c) vs the CPU's algorithm, bit for bit. */
#include "emu.h"
#include "kernels-common/launch_ops.cuh"
#include "kernels-common/launch_attention.cuh"
#include "kernels-common/launch_matmul.cuh"
#include "kernels-common/launch_moe.cuh"
#include "kernels-common/launch_recurrent.cuh"
#include "backends/cpu/cpu_expf.h"
#include "base/rope.h"
extern "C" {
#include "base/quant.h"
#include "backends/gpu/gpu_common.h"   /* api 10's checks: supports and encode, over host memory */
}
#include <stdio.h>
#include <stdlib.h>

extern "C" int weft_gk_gemm(const struct weft_gk_mm *, void *) { abort(); }

static int fails;
#define EXPECT(c, ...) do { if (!(c)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static float frand() { return (rnd() >> 8) / 16777216.0f * 2 - 1; }
static bool same(float a, float b) { return !memcmp(&a, &b, 4) || (a != a && b != b); }

/* ---- MOE_ROUTE: the CPU's weft_cpu_moe_route with libm expf everywhere ---- */
static float ref_reduce16(const float *x)
{
    float t[8], u[4];
    for (int i = 0; i < 8; i++) t[i] = x[i] + x[i + 8];
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}
static void ref_softmax(float *y, const float *x, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    double sum = 0.0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; l++) y[i + l] = expf(x[i + l] - max);
        sum += (double)ref_reduce16(y + i);
    }
    for (; i < n; i++) { y[i] = expf(x[i] - max); sum += (double)y[i]; }
    const float s = (float)(1.0 / sum);
    for (i = 0; i < n; i++) y[i] *= s;
}
static void ref_route(const float *l, int E, int K, int gating, bool norm, float scale, const float *bias, int n_group,
                      int group_used, int32_t *ids, float *w, const float *escale = NULL)
{
    std::vector<float> p(E), sel(E), chosen(K);
    if (gating == WEFT_MOE_SIGMOID) for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-l[e]));
    else ref_softmax(p.data(), l, E);
    for (int e = 0; e < E; e++) sel[e] = bias ? p[e] + bias[e] : p[e];
    std::vector<uint8_t> taken(E, 0);
    if (n_group > 1) {   /* expert groups: ops_moe.c's moe_mask_groups */
        const int G = E / n_group;
        std::vector<float> score(n_group);
        std::vector<uint8_t> kept(n_group, 0);
        for (int g = 0; g < n_group; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * G; e < (g + 1) * G; e++) {
                if (sel[e] > a) { b = a; a = sel[e]; }
                else if (sel[e] > b) b = sel[e];
            }
            score[g] = a + b;
        }
        for (int j = 0; j < group_used; j++) {
            int best = -1;
            for (int g = 0; g < n_group; g++)
                if (!kept[g] && (best < 0 || score[g] > score[best])) best = g;
            kept[best] = 1;
        }
        for (int e = 0; e < E; e++) taken[e] = !kept[e / G];
    }
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || sel[e] > sel[best])) best = e;
        taken[best] = 1;
        ids[j] = best;
    }
    if (gating == WEFT_MOE_SOFTMAX_TOPK) {
        for (int j = 0; j < K; j++) chosen[j] = l[ids[j]];
        ref_softmax(w, chosen.data(), K);
    } else {
        for (int j = 0; j < K; j++) w[j] = p[ids[j]];
    }
    if (norm) {
        double s = 0.0;
        for (int j = 0; j < K; j++) s += (double)w[j];
        float sum = (float)s;
        if (!(sum >= 6.103515625e-5f)) sum = 6.103515625e-5f;
        for (int j = 0; j < K; j++) w[j] = w[j] / sum;
    }
    if (scale != 0.0f) for (int j = 0; j < K; j++) w[j] = w[j] * scale;
    if (escale) for (int j = 0; j < K; j++) w[j] = w[j] * escale[ids[j]];   /* api 10 */
}

static void route_case(int R, int E, int K, int gating, bool norm, float scale, bool with_bias, int special,
                       int n_group = 0, int group_used = 0, bool with_escale = false)
{
    const int lld = E + 3, ild = K + 1, wld = K + 2;
    std::vector<float> l((size_t)R * lld), bias(E), w((size_t)R * wld, -7), wr(K), escale(E);
    std::vector<int32_t> ids((size_t)R * ild, -9), ir(K);
    for (auto &v : l) v = frand() * 4;
    for (auto &v : bias) v = frand() * 0.2f;
    if (with_escale) {   /* api 10: Gemma 4's per-expert scales (drawn only here: the other cases' data stay) */
        for (auto &v : escale) v = 0.25f + (frand() + 1);
        if (E > 3) { escale[1] = -1.5f; escale[2] = 0.0f; escale[3] = NAN; }
    }
    if (special == 1)   /* ties: every logit one of 4 values */
        for (auto &v : l) v = (float)(rnd() % 4) * 0.5f;
    if (special == 2)   /* a NaN logit in each row (sigmoid: a NaN probability) */
        for (int r = 0; r < R; r++) l[(size_t)r * lld + (r * 7) % E] = NAN;
    struct weft_gk_moe_route a = {l.data(), (size_t)lld, ids.data(), (size_t)ild, w.data(), (size_t)wld, R, E, K,
                                  gating, norm, scale, with_bias ? bias.data() : NULL, n_group, group_used,
                                  with_escale ? escale.data() : NULL};
    EXPECT(weft_gk_moe_route(&a, NULL) == 0, "route launch");
    int bad = 0;
    for (int r = 0; r < R; r++) {
        ref_route(&l[(size_t)r * lld], E, K, gating, norm, scale, with_bias ? bias.data() : NULL, n_group, group_used,
                  ir.data(), wr.data(), with_escale ? escale.data() : NULL);
        for (int j = 0; j < K; j++)
            if (ids[(size_t)r * ild + j] != ir[j] || !same(w[(size_t)r * wld + j], wr[j])) {
                if (bad++ < 3)
                    printf("  route E%d k%d g%d row %d slot %d: id %d w %a, ref %d %a\n", E, K, gating, r, j,
                           ids[(size_t)r * ild + j], w[(size_t)r * wld + j], ir[j], wr[j]);
            }
        EXPECT(ids[(size_t)r * ild + K] == -9 && same(w[(size_t)r * wld + K], -7), "route wrote past k");
    }
    EXPECT(bad == 0,
           "route R%d E%d k%d gating %d norm %d scale %g bias %d special %d groups %d/%d escale %d: %d differ", R, E, K,
           gating, norm, scale, with_bias, special, group_used, n_group, with_escale, bad);
}

/* ---- MATMUL_ID vs MATMUL on each slot's expert ---- */
static void fill_rows(int t, uint8_t *w, int64_t rows, int64_t K)
{
    const size_t rs = weft_row_size((weft_type)t, K);
    std::vector<float> tmp(K);
    for (int64_t n = 0; n < rows; n++) {
        for (auto &v : tmp) v = frand();
        if (!weft_quantize_row((weft_type)t, tmp.data(), w + n * rs, K)) {
            for (size_t b = 0; b < rs; b++) w[n * rs + b] = (uint8_t)rnd();
            const size_t bs = weft_type_get((weft_type)t)->type_size;
            for (size_t b = 0; b < rs / bs; b++) {
                uint8_t *blk = w + n * rs + b * bs;
                weft_half d = weft_f32_to_half(0.01f), dm = weft_f32_to_half(0.005f);
                switch (t) {
                case WEFT_TYPE_Q6_K: memcpy(blk + offsetof(weft_block_q6_k, d), &d, 2); break;
                case WEFT_TYPE_Q2_K: memcpy(blk + offsetof(weft_block_q2_k, d), &d, 2);
                    memcpy(blk + offsetof(weft_block_q2_k, dmin), &dm, 2); break;
                case WEFT_TYPE_Q3_K: memcpy(blk + offsetof(weft_block_q3_k, d), &d, 2); break;
                case WEFT_TYPE_MXFP4: blk[0] = (uint8_t)(120 + rnd() % 10); break;
                case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_IQ4_XS: memcpy(blk, &d, 2); break;
                default: memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); break;
                }
            }
        }
    }
}

static void mmid_case(int t, int64_t K, int64_t N, int E, int64_t R, int k, bool x_per_slot, bool weighted,
                      bool with_add, bool with_bias, bool bad_id)
{
    const size_t rs = weft_row_size((weft_type)t, K);
    std::vector<uint8_t> w(rs * N * E, 0xFF);   /* unchosen experts: NaN everywhere */
    const int64_t S = R * k, nx = x_per_slot ? S : R;
    const size_t ild = k + 2;
    std::vector<int32_t> ids(R * ild, 12345);
    std::vector<bool> chosen(E, false);
    for (int64_t r = 0; r < R; r++)
        for (int j = 0; j < k; j++) {
            /* experts 1 .. E-2 only (0 and E-1 stay NaN), distinct within a row */
            int e;
            bool dup;
            do {
                e = 1 + (int)(rnd() % (E - 2));
                dup = false;
                for (int q = 0; q < j; q++) dup = dup || ids[r * ild + q] == e;
            } while (dup);
            ids[r * ild + j] = e;
            chosen[e] = true;
        }
    if (bad_id) ids[0 * ild + (k - 1)] = E;   /* slot k-1: out of range */
    for (int e = 0; e < E; e++)
        if (chosen[e]) fill_rows(t, w.data() + (size_t)e * N * rs, N, K);
    const size_t xld = K + 5, old_ = N + 3, wld = k + 1;
    std::vector<float> x(nx * xld), bias(E * N), wts(R * wld), add;
    for (auto &v : x) v = frand();
    for (auto &v : bias) v = frand();
    for (auto &v : wts) v = frand();
    const int64_t orows = weighted ? R : S;
    std::vector<float> out(orows * old_, 0.25f), ref(orows * old_, 0.25f);
    if (with_add) for (auto &v : out) v = frand();
    ref = out;
    std::vector<uint8_t> scratch(weft_gk_matmul_id_scratch(t, K, N, E, R, k, x_per_slot, weighted) + 64);
    int err = 0;
    struct weft_gk_mmid m = {t, w.data(), rs, K, N, E, ids.data(), ild, R, k, x_per_slot, x.data(), xld, out.data(),
                             old_, weighted ? wts.data() : NULL, wld, with_add ? out.data() : NULL, old_,
                             with_bias ? bias.data() : NULL, &err};
    EXPECT(weft_gk_matmul_id(&m, scratch.data(), NULL) == 0, "launch");
    /* the reference: MATMUL (R = 1) of each slot's x row with its expert */
    std::vector<float> y(S * N);
    std::vector<uint8_t> mscratch(weft_gk_matmul_scratch(t, K, 1) + 64);
    for (int64_t s = 0; s < S; s++) {
        const int e = ids[(s / k) * ild + s % k];
        if (e < 0 || e >= E) { for (int64_t n = 0; n < N; n++) y[s * N + n] = 0.0f; continue; }
        struct weft_gk_mm mm = {t, w.data() + (size_t)e * N * rs, rs, K, N, 1, x.data() + (x_per_slot ? s : s / k) * xld,
                                xld, &y[s * N], (size_t)N, NULL, 0, with_bias ? bias.data() + (size_t)e * N : NULL};
        EXPECT(weft_gk_matmul(&mm, mscratch.data(), NULL) == 0, "matmul");
    }
    if (!weighted) {
        for (int64_t s = 0; s < S; s++) for (int64_t n = 0; n < N; n++) ref[s * old_ + n] = y[s * N + n];
    } else {
        for (int64_t r = 0; r < R; r++)
            for (int64_t n = 0; n < N; n++) {
                float a = wts[r * wld] * y[(r * k) * N + n];
                for (int q = 1; q < k; q++) a = a + wts[r * wld + q] * y[(r * k + q) * N + n];
                ref[r * old_ + n] = with_add ? a + ref[r * old_ + n] : a;
            }
    }
    int bad = 0, nan = 0;
    for (int64_t i = 0; i < orows; i++)
        for (int64_t n = 0; n < (int64_t)old_; n++) {
            if (!same(out[i * old_ + n], ref[i * old_ + n]) && bad++ < 3)
                printf("  mmid %s row %lld col %lld: %a vs %a\n", weft_type_name((weft_type)t), (long long)i,
                       (long long)n, out[i * old_ + n], ref[i * old_ + n]);
            nan += n < N && out[i * old_ + n] != out[i * old_ + n];
        }
    EXPECT(bad == 0 && nan == 0, "mmid %s K%lld N%lld E%d R%lld k%d per_slot %d weighted %d add %d bias %d bad %d: %d differ, %d NaN",
           weft_type_name((weft_type)t), (long long)K, (long long)N, E, (long long)R, k, x_per_slot, weighted,
           with_add, with_bias, bad_id, bad, nan);
    EXPECT(err == (bad_id ? 3 : 0), "err %d", err);
}

/* ---- attention: sinks, latent caches, vs double ---- */
static void attn_case(int kvt, int n_head, int n_kv, int hd, int hdv, bool latent, bool sinks, int n_split,
                      const std::vector<int> &lens, uint32_t window)
{
    const int nl = 3, layer = 1, n_seq = (int)lens.size();
    int nblk = 0;
    std::vector<int32_t> bt_off(n_seq), bt, pos, seq;
    for (int s = 0; s < n_seq; s++) { bt_off[s] = nblk; nblk += (lens[s] + 15) / 16; }
    for (int i = 0; i < nblk; i++) bt.push_back((i * 5 + 3) % nblk);
    for (int s = 0; s < n_seq; s++) { pos.push_back(lens[s] - 1); seq.push_back(s); }
    pos.push_back(lens[0] / 2); seq.push_back(0);   /* a row mid-sequence */
    const int R = (int)pos.size();
    const size_t ktok = weft_row_size((weft_type)kvt, (int64_t)n_kv * hd), vtok = latent ? 0 : weft_row_size((weft_type)kvt, (int64_t)n_kv * hdv);
    const size_t layer_bytes = 16 * (ktok + vtok), cache_bytes = (size_t)nblk * nl * layer_bytes;
    std::vector<uint8_t> cache(cache_bytes);
    std::vector<float> tmp(std::max(n_kv * hd, n_kv * hdv));
    for (size_t o = 0; o + ktok <= cache_bytes;) {   /* rows of K then V per layer block */
        for (auto &v : tmp) v = frand();
        const size_t in_layer = o % layer_bytes;
        const bool is_k = in_layer < 16 * ktok;
        weft_quantize_row((weft_type)kvt, tmp.data(), &cache[o], is_k ? (int64_t)n_kv * hd : (int64_t)n_kv * hdv);
        o += is_k ? ktok : vtok;
    }
    std::vector<float> q((size_t)R * n_head * hd), out((size_t)R * n_head * hdv + 7, -3), snk(n_head);
    for (auto &v : q) v = frand() * 2;
    for (auto &v : snk) v = frand() * 6;
    std::vector<uint8_t> scratch(weft_gk_attention_scratch(R, n_head, hdv, n_split) + 64);
    struct weft_gk_attn_args a = {q.data(), (size_t)n_head * hd, out.data(), (size_t)n_head * hdv,
                                  {cache.data(), kvt, nl, layer, n_kv, hd, hdv, latent}, pos.data(), seq.data(),
                                  bt_off.data(), bt.data(), R, n_head, 1.0f / sqrtf((float)hd), window, 0.0f,
                                  sinks ? snk.data() : NULL};
    EXPECT(weft_gk_attention(&a, n_split, scratch.data(), NULL) == 0, "attention launch");
    /* reference */
    const size_t kh_bytes = weft_row_size((weft_type)kvt, hd), vh_bytes = weft_row_size((weft_type)kvt, hdv);
    std::vector<float> kr(hd), vr(hd);
    double e2 = 0, s2 = 0;
    const int group = n_head / n_kv;
    for (int r = 0; r < R; r++)
        for (int h = 0; h < n_head; h++) {
            const int p0 = window && (uint32_t)pos[r] >= window ? pos[r] - (int)window + 1 : 0;
            std::vector<double> sc, acc(hdv, 0.0);
            double mx = sinks ? snk[h] : -1e300;
            for (int p = p0; p <= pos[r]; p++) {
                const size_t sl = (size_t)bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                const size_t base = ((sl / 16) * nl + layer) * layer_bytes;
                weft_dequantize_row((weft_type)kvt, &cache[base + (sl % 16) * ktok + (h / group) * kh_bytes], kr.data(), hd);
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[((size_t)r * n_head + h) * hd + i] * kr[i];
                sc.push_back(d / sqrt((double)hd));
                mx = std::max(mx, sc.back());
            }
            double sum = sinks ? exp(snk[h] - mx) : 0;
            for (int p = p0; p <= pos[r]; p++) {
                const size_t sl = (size_t)bt[bt_off[seq[r]] + p / 16] * 16 + p % 16;
                const size_t base = ((sl / 16) * nl + layer) * layer_bytes;
                const uint8_t *vrow = latent ? &cache[base + (sl % 16) * ktok] + weft_row_size((weft_type)kvt, hd - hdv)
                                             : &cache[base + 16 * ktok + (sl % 16) * vtok + (h / group) * vh_bytes];
                weft_dequantize_row((weft_type)kvt, vrow, vr.data(), hdv);
                const double wgt = exp(sc[p - p0] - mx);
                sum += wgt;
                for (int i = 0; i < hdv; i++) acc[i] += wgt * vr[i];
            }
            for (int i = 0; i < hdv; i++) {
                const double want = acc[i] / sum, got = out[((size_t)r * n_head + h) * hdv + i];
                e2 += (got - want) * (got - want);
                s2 += want * want;
            }
        }
    const double nmse = e2 / s2;
    printf("  attention %s heads %d/%d hd %d/%d latent %d sinks %d split %d window %u: nmse %.3g\n",
           kvt == WEFT_TYPE_F16 ? "F16" : "Q8_0", n_head, n_kv, hd, hdv, latent, sinks, n_split, window, nmse);
    EXPECT(nmse < 1e-10, "attention nmse %.3g", nmse);
    EXPECT(same(out[(size_t)R * n_head * hdv], -3), "attention wrote past out");
}

/* ---- ROPE_KV into a latent cache: K rows only, at the CPU's addresses ---- */
static void rope_latent_case(int kvt, int hd, int hdv)
{
    const int R = 5, n_head = 4, nl = 3, layer = 2, n_rot = 32, nblk = 6;
    const size_t ktok = weft_row_size((weft_type)kvt, hd), layer_bytes = 16 * ktok;
    std::vector<uint8_t> cache((size_t)nblk * nl * layer_bytes, 0xCD), want = cache;
    std::vector<float> q((size_t)R * n_head * hd), k((size_t)R * hd);
    for (auto &v : q) v = frand();
    for (auto &v : k) v = frand();
    std::vector<int32_t> pos = {0, 5, 17, 40, 95}, slot = {3, 21, 33, 70, 95};
    struct weft_gk_kv kv = {cache.data(), kvt, nl, layer, 1, hd, hdv, 1};
    EXPECT(weft_gk_rope_kv(q.data(), (size_t)n_head * hd, k.data(), (size_t)hd, NULL, 0, pos.data(), slot.data(), R,
                           n_head, n_rot, powf(10000.0f, -2.0f / n_rot), 1.0f, 0, NULL, &kv, NULL) == 0, "rope launch");
    for (int r = 0; r < R; r++) {
        const size_t sl = slot[r], off = ((sl / 16) * nl + layer) * layer_bytes + (sl % 16) * ktok;
        weft_quantize_row((weft_type)kvt, &k[(size_t)r * hd], &want[off], hd);   /* k rotated in place by the op */
    }
    EXPECT(cache == want, "rope latent %s hd %d/%d: the cache differs from K rows at the CPU's addresses",
           kvt == WEFT_TYPE_F16 ? "F16" : "Q8_0", hd, hdv);
}

/* ---- SWIGLU_OAI vs the CPU's swiglu_oai_row ---- */
static void swiglu_case()
{
    const int R = 3, K = 700;
    std::vector<float> g(R * K), u(R * K), o(R * K), ref(R * K);
    for (int i = 0; i < R * K; i++) { g[i] = frand() * 12; u[i] = frand() * 12; }
    g[0] = NAN; u[1] = NAN; g[2] = INFINITY; g[3] = -INFINITY; u[4] = INFINITY; u[5] = -INFINITY; g[6] = 7.0f; u[7] = -7.0f;
    const float alpha = 1.702f, limit = 7.0f;
    EXPECT(weft_gk_swiglu_oai(g.data(), K, u.data(), K, o.data(), K, R, K, alpha, limit, NULL) == 0, "swiglu launch");
    int bad = 0;
    for (int i = 0; i < R * K; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float v = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        const float glu = x / (1.0f + expf(alpha * -x));
        ref[i] = glu * (v + 1.0f);
        bad += !same(o[i], ref[i]);
    }
    EXPECT(bad == 0, "swiglu_oai: %d differ", bad);
}

/* ---- api 9: SSM_CONV, DELTA_NET (backends/cpu/ops/ops_recurrent.c's algorithm with the
 * host's libm: bit for bit) and SILU_MUL's SIGMOID ---- */
static int rec_runs;   /* op runs (one op, or two cut) whose outputs and states matched bit for bit */

static int cmp_bits(const float *a, const float *b, size_t n, const char *what)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!same(a[i], b[i]) && bad++ < 3) printf("  %s [%zu]: %a vs %a\n", what, i, a[i], b[i]);
    return bad;
}

/* the CPU's conv_part, one thread; rows whose slot is outside [0, n_slots) skipped */
static void ref_ssm_conv(const float *x, const float *w, float *out, float *state, size_t st_ld,
                         const int32_t *slots, int64_t n_slots, int64_t R, int64_t C, int K, bool silu)
{
    const int64_t C16 = C & ~(int64_t)15;
    for (int64_t r = 0; r < R; r++) {
        if (slots[r] < 0 || slots[r] >= n_slots) continue;
        float *st = state + slots[r] * st_ld;
        for (int64_t c = 0; c < C; c++) {
            const float *wc = w + c * K, xv = x[r * C + c];
            float y = st[c] * wc[0];
            for (int64_t i = 1; i < K - 1; i++) y = fmaf(st[i * C + c], wc[i], y);
            y = fmaf(xv, wc[K - 1], y);
            for (int64_t i = 0; i + 1 < K - 1; i++) st[i * C + c] = st[(i + 1) * C + c];
            st[(K - 2) * C + c] = xv;
            if (silu) y = y / (1.0f + (c < C16 ? weft_cpu_expf(0.0f - y) : expf(0.0f - y)));
            out[r * C + c] = y;
        }
    }
}

/* SSM_CONV over R rows (slots[r]) of C channels, K taps, n_slots slots of (K - 1)·C values pad
 * floats apart: one op, and the same rows as two ops split at `split` (0: not), vs the CPU's
 * algorithm; a bad slot zeroes its rows and sets err 4 */
static void conv_case(int64_t C, int K, int64_t n_slots, const std::vector<int32_t> &slots, bool silu, int64_t split,
                      int pad)
{
    const int64_t R = (int64_t)slots.size(), sld = (K - 1) * C + pad;
    bool bad_slot = false;
    for (int32_t v : slots) bad_slot = bad_slot || v < 0 || v >= n_slots;
    std::vector<float> x(R * C), w(C * K), st0(n_slots * sld), ref(R * C, -5), sref;
    for (auto &v : x) v = frand() * 4;
    for (auto &v : w) v = frand();
    for (auto &v : st0) v = frand() * 2;
    x[3] = 0.0f;   /* a zero input, whose SiLU is +0 */
    sref = st0;
    ref_ssm_conv(x.data(), w.data(), ref.data(), sref.data(), sld, slots.data(), n_slots, R, C, K, silu);
    for (int64_t r = 0; r < R; r++)
        if (slots[r] < 0 || slots[r] >= n_slots) for (int64_t c = 0; c < C; c++) ref[r * C + c] = 0.0f;
    for (int pass = 0; pass < (split ? 2 : 1); pass++) {
        std::vector<float> out(R * C, -5), st = st0;
        int err = 0;
        const int64_t cuts[3] = {0, pass ? split : R, R};
        for (int part = 0; part < 2 && cuts[part] < R; part++) {
            const int64_t r0 = cuts[part], n = cuts[part + 1] - r0;
            struct weft_gk_ssm_conv a = {x.data() + r0 * C, (size_t)C, w.data(), (size_t)K, out.data() + r0 * C,
                                         (size_t)C, st.data(), (size_t)sld, slots.data() + r0, n_slots, n, C, K, silu,
                                         &err};
            EXPECT(weft_gk_ssm_conv(&a, NULL) == 0, "ssm_conv launch");
        }
        const int bo = cmp_bits(out.data(), ref.data(), R * C, "ssm_conv out"),
                  bs = cmp_bits(st.data(), sref.data(), n_slots * sld, "ssm_conv state");
        rec_runs += bo == 0 && bs == 0;
        EXPECT(bo == 0 && bs == 0 && err == (bad_slot ? 4 : 0),
               "ssm_conv R%lld C%lld K%d slots %lld silu %d pad %d split %lld: %d outputs, %d state values differ, "
               "err %d",
               (long long)R, (long long)C, K, (long long)n_slots, silu, pad, (long long)(pass ? split : 0), bo, bs,
               err);
    }
}

/* ggml's AVX ggml_vec_dot_f32, the CPU's (backends/cpu/recurrent/dn_row.c's dot_ref) */
static float ref_dot(const float *x, const float *y, int64_t n)
{
    const int64_t n32 = n & ~(int64_t)31;
    float acc[4][8] = {{0}};
    for (int64_t c = 0; c < n32; c += 32)
        for (int a = 0; a < 4; a++)
            for (int l = 0; l < 8; l++) acc[a][l] = fmaf(x[c + 8 * a + l], y[c + 8 * a + l], acc[a][l]);
    float t[8], u[4];
    for (int l = 0; l < 8; l++) t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    for (int m = 0; m < 4; m++) u[m] = t[m] + t[m + 4];
    double s = (double)((u[0] + u[1]) + (u[2] + u[3]));
    for (int64_t i = n32; i < n; i++) s += (double)(x[i] * y[i]);
    return (float)s;
}

static void ref_l2(const float *x, float *y, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

/* the CPU's dn_part and weft_cpu_dn_row_ref, one thread, row after row (slots are independent);
 * bad slots skipped */
static void ref_delta_net(const float *in, const float *beta, const float *alpha, const float *dtb, const float *A,
                          float *out, float *state, size_t st_ld, const int32_t *slots, int64_t n_slots, int64_t R,
                          int Hk, int Hv, int S, bool grouped, float eps)
{
    const int64_t W = (2 * Hk + Hv) * S;
    const float qscale = 1.0f / sqrtf((float)S);
    std::vector<float> q(S), k(S);
    for (int64_t r = 0; r < R; r++) {
        if (slots[r] < 0 || slots[r] >= n_slots) continue;
        for (int h = 0; h < Hv; h++) {
            const int kh = grouped ? h / (Hv / Hk) : h % Hk;
            float *M = state + slots[r] * st_ld + (int64_t)h * S * S;
            ref_l2(in + r * W + kh * S, q.data(), S, eps);
            ref_l2(in + r * W + (Hk + kh) * S, k.data(), S, eps);
            const float *v = in + r * W + (2 * Hk + h) * S;
            const float b = 1.0f / (1.0f + expf(-beta[r * Hv + h]));
            const float xa = alpha[r * Hv + h] + dtb[h];
            const float g = (xa > 20.0f ? xa : logf(1.0f + expf(xa))) * A[h];
            const float decay = expf(g);
            for (int64_t e = 0; e < (int64_t)S * S; e++) M[e] *= decay;
            for (int j = 0; j < S; j++) {
                float *m = M + (int64_t)j * S;
                const float d = (v[j] - ref_dot(m, k.data(), S)) * b;
                for (int i = 0; i < S; i++) m[i] = fmaf(k[i], d, m[i]);
                out[r * Hv * S + (int64_t)h * S + j] = ref_dot(m, q.data(), S) * qscale;
            }
        }
    }
}

/* DELTA_NET over R rows (slots[r]): one op, and two ops split at `split` (0: not), vs the CPU's
 * algorithm, on a device of n_mp multiprocessors (which picks the rows per group) */
static void dn_case(int Hk, int Hv, int S, int64_t n_slots, const std::vector<int32_t> &slots, bool grouped,
                    int64_t split, int n_mp, int pad)
{
    const int64_t R = (int64_t)slots.size(), W = (2 * Hk + Hv) * S, sld = (int64_t)Hv * S * S + pad;
    bool bad_slot = false;
    for (int32_t v : slots) bad_slot = bad_slot || v < 0 || v >= n_slots;
    std::vector<float> in(R * W), beta(R * Hv), alpha(R * Hv), dtb(Hv), A(Hv), st0(n_slots * sld);
    for (auto &v : in) v = frand();
    for (auto &v : beta) v = 3 * frand();
    for (auto &v : alpha) v = 3 * frand();
    for (auto &v : dtb) v = frand();
    for (auto &v : A) v = -0.5f + 0.4f * frand();
    for (auto &v : st0) v = 0.1f * frand();
    alpha[0] = 25.0f;                                  /* softplus past 20: x itself */
    for (int i = 0; i < S; i++) in[Hk * S + i] = 0.0f; /* row 0's k head 0 all zero: the eps clamp */
    std::vector<float> ref(R * Hv * S, -5), sref = st0;
    ref_delta_net(in.data(), beta.data(), alpha.data(), dtb.data(), A.data(), ref.data(), sref.data(), sld,
                  slots.data(), n_slots, R, Hk, Hv, S, grouped, 1e-6f);
    for (int64_t r = 0; r < R; r++)
        if (slots[r] < 0 || slots[r] >= n_slots) for (int64_t i = 0; i < Hv * S; i++) ref[r * Hv * S + i] = 0.0f;
    struct weft_gk_dn_geom geo = {};
    weft_gk_dn_geom(split ? split : R, n_slots, Hv, S, n_mp, &geo);
    for (int pass = 0; pass < (split ? 2 : 1); pass++) {
        std::vector<float> out(R * Hv * S, -5), st = st0;
        int err = 0;
        const int64_t cuts[3] = {0, pass ? split : R, R};
        for (int part = 0; part < 2 && cuts[part] < R; part++) {
            const int64_t r0 = cuts[part], n = cuts[part + 1] - r0;
            struct weft_gk_delta_net a = {in.data() + r0 * W, (size_t)W, beta.data() + r0 * Hv, (size_t)Hv,
                                          alpha.data() + r0 * Hv, (size_t)Hv, dtb.data(), A.data(),
                                          out.data() + r0 * Hv * S, (size_t)Hv * S, st.data(), (size_t)sld,
                                          slots.data() + r0, n_slots, n, Hk, Hv, S, grouped, 1e-6f, n_mp, &err};
            EXPECT(weft_gk_delta_net(&a, NULL) == 0, "delta_net launch");
        }
        const int bo = cmp_bits(out.data(), ref.data(), R * Hv * S, "delta_net out"),
                  bs = cmp_bits(st.data(), sref.data(), n_slots * sld, "delta_net state");
        rec_runs += bo == 0 && bs == 0;
        EXPECT(bo == 0 && bs == 0 && err == (bad_slot ? 4 : 0),
               "delta_net R%lld heads %d/%d S%d grouped %d slots %lld n_mp %d (jw %d nc %d) pad %d split %lld: %d "
               "outputs, %d state values differ, err %d",
               (long long)R, Hk, Hv, S, grouped, (long long)n_slots, n_mp, geo.jw, geo.nc, pad,
               (long long)(pass ? split : 0), bo, bs, err);
    }
}

/* SILU_MUL's SIGMOID vs the CPU's formula, specials included */
static void sigmoid_case()
{
    const int R = 3, K = 300;
    std::vector<float> g(R * K), u(R * K), o(R * K), ref(R * K);
    for (int i = 0; i < R * K; i++) { g[i] = frand() * 30; u[i] = frand() * 4; }
    g[0] = NAN; u[1] = NAN; g[2] = INFINITY; g[3] = -INFINITY; g[4] = 100.0f; g[5] = -100.0f; g[6] = 0.0f; g[7] = -0.0f;
    EXPECT(weft_gk_glu(WEFT_GLU_SIGMOID, g.data(), K, u.data(), K, o.data(), K, R, K, NULL) == 0, "sigmoid launch");
    for (int i = 0; i < R * K; i++) ref[i] = u[i] * (1.0f / (1.0f + expf(-g[i])));
    EXPECT(cmp_bits(o.data(), ref.data(), R * K, "sigmoid") == 0, "glu sigmoid differs from the CPU's");
}

static void recurrent_checks()
{
    /* SSM_CONV: interleaved sequences (slots 1..3 of 5: test_backend_ops' pattern), C 40 (a
     * 16-channel tail: libm's expf), then a prefill run beside decode rows (the parallel rows),
     * a run cut at every point, K 2 and 5, no SiLU, a padded state stride, bad slots */
    const std::vector<int32_t> inter = {1, 2, 1, 3, 1, 2, 2, 3, 1, 3, 2, 1};
    conv_case(40, 4, 5, inter, true, 7, 0);
    const std::vector<int32_t> mixed = {2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 4, 3, 1, 1, 1, 1, 1, 3, 3};
    conv_case(40, 4, 5, mixed, true, 0, 3);
    for (int64_t cut = 1; cut < 9; cut += 3) conv_case(33, 4, 5, mixed, true, cut, 0);
    conv_case(150, 2, 5, mixed, true, 10, 0);
    conv_case(64, 5, 5, inter, false, 4, 1);
    conv_case(20, 5, 6, {5, 5, 5, 5, 5, 5, 5, 5}, true, 2, 0);   /* fewer rows than taps in the first part */
    conv_case(40, 4, 5, {1, 5, 2, 2, 2, 2, -1, 2, 0}, true, 0, 0);   /* slots 5 and -1: outside */
    printf("ssm_conv done (%d fails; %d runs bit for bit with the CPU's algorithm)\n", fails, rec_runs);
    rec_runs = 0;
    /* DELTA_NET: S 40 (a 32-column tail) interleaved and cut; tiled then grouped k heads; S 128 (Qwen3.5)
     * in a prefill chunk beside decode rows, cut; S 8 (tail only); S 256 (8 chunks a lane);
     * every rows-per-group choice (n_mp); many decode rows in permuted slots; bad slots */
    const std::vector<int32_t> two = {0, 2, 0, 0, 2, 2, 2, 0, 0, 2, 2, 0};
    dn_case(1, 2, 40, 3, two, false, 5, 1, 0);
    dn_case(2, 4, 32, 3, two, false, 0, 1, 0);
    dn_case(2, 4, 32, 3, two, true, 0, 1, 7);
    dn_case(1, 2, 128, 4, {3, 3, 3, 3, 3, 3, 3, 0, 1}, false, 4, 1, 0);
    dn_case(2, 2, 8, 3, {1, 0, 1, 1, 2}, true, 2, 1, 0);
    dn_case(1, 1, 256, 2, {1, 1, 0}, false, 0, 1, 0);
    for (int n_mp : {1, 4, 8, 64}) dn_case(1, 2, 64, 3, {2, 2, 0, 2, 1}, false, 0, n_mp, 0);   /* jw 8, 4, 2, 1 */
    dn_case(1, 1, 32, 40, {7, 3, 39, 0, 12, 25, 1, 30, 19, 8, 33, 2, 5, 36, 21, 14, 28, 10, 4, 17, 38, 23, 31, 6, 11,
                          26, 35, 9, 16, 37, 13, 29, 20, 34, 15, 24, 27, 18, 22, 32},
            false, 0, 1, 0);
    dn_case(1, 2, 32, 3, {1, 3, 1, -2, 0, 0}, false, 0, 1, 0);
    printf("delta_net done (%d fails; %d runs bit for bit with the CPU's algorithm)\n", fails, rec_runs);
    sigmoid_case();
    printf("sigmoid done (%d fails)\n", fails);
}

/* ---- api 10 (Gemma 4): ADD's scale, ROPE_KV's q_only, MOE_ROUTE's expert_scale, through the
 * shared host code (backends/gpu/gpu_common.c's supports and graph-free dispatch,
 * gpu_encode.c) onto the launchers above, over host memory as the device's: vs the CPU's
 * algorithm (backends/cpu/ops/ops_elementwise.c add_job, ops_attention.c rope_kv_job with
 * base/rope.h's angles, ops_moe.c weft_cpu_moe_route) bit for bit; a field whose hook a
 * runtime lacks is refused, never run as the plain op ---- */
enum { EMU_NO_HOOK = 77 };   /* the hooks' invalid-value code: a missing launcher */
static struct weft_gpu emu_gpu;
static const struct weft_gpu_hooks emu_hooks10 = {
    .name = "emu", .err_oom = 2, .err_invalid = EMU_NO_HOOK, .encode = weft_gpu_encode,
    .moe_route = weft_gk_moe_route, .add_scaled = weft_gk_add_scaled, .rope_q = weft_gk_rope_q,
};
/* a runtime of api 9: no add_scaled, no rope_q */
static const struct weft_gpu_hooks emu_hooks9 = {
    .name = "emu9", .err_oom = 2, .err_invalid = EMU_NO_HOOK, .encode = weft_gpu_encode,
    .moe_route = weft_gk_moe_route,
};
static uint64_t emu_buf_id = 100;

/* a "device" buffer in host memory */
struct hbuf {
    std::vector<uint8_t> mem;
    struct weft_buffer b;
    explicit hbuf(size_t n, uint8_t fill = 0) : mem(n, fill) { b = {&emu_gpu, mem.data(), n, emu_buf_id++}; }
    float *f(size_t off) { return (float *)(mem.data() + off); }
    int32_t *i(size_t off) { return (int32_t *)(mem.data() + off); }
};

static void emu_gpu_use(const struct weft_gpu_hooks *h)
{
    emu_gpu.hooks = h;
    emu_gpu.n_mp = 4;
    emu_gpu.graphs = false;
}

/* ADD (+ scale) over strided rows, and in place (out = a, the residual's form) */
static void api10_add_case(float scale, bool in_place)
{
    const int R = 5, K = 300;
    const size_t a_ld = K + 4, b_ld = K, o_ld = K + 8, A = 0, B = 8192, O = in_place ? A : 20000;
    hbuf m(1 << 16);
    for (size_t i = 0; i < m.mem.size() / 4; i++) *m.f(4 * i) = -9.0f;   /* gaps: a sentinel */
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) { m.f(A)[r * a_ld + k] = 4 * frand(); m.f(B)[r * b_ld + k] = 4 * frand(); }
    /* specials: inf, NaN, a sum that overflows (inf · 0.5 is inf; a·0.5 + b·0.5 would be finite),
     * a sum that cancels to +0, and one whose rounding the product keeps */
    m.f(A)[0] = INFINITY; m.f(B)[1] = NAN; m.f(A)[2] = 3e38f; m.f(B)[2] = 3e38f;
    m.f(A)[3] = 1.5f; m.f(B)[3] = -1.5f; m.f(A)[4] = 1.0f; m.f(B)[4] = 0x1p-24f * 3;
    struct weft_op op = {};
    op.kind = WEFT_OP_ADD;
    op.u.add.a = weft_view_2d(&m.b, A, WEFT_TYPE_F32, K, R);
    op.u.add.a.nb1 = a_ld * 4;
    op.u.add.b = weft_view_2d(&m.b, B, WEFT_TYPE_F32, K, R);
    op.u.add.out = weft_view_2d(&m.b, O, WEFT_TYPE_F32, K, R);
    op.u.add.out.nb1 = (in_place ? a_ld : o_ld) * 4;
    op.u.add.scale = scale;
    std::vector<uint8_t> want = m.mem;
    const size_t ol = in_place ? a_ld : o_ld;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) {
            const float t = m.f(A)[r * a_ld + k] + m.f(B)[r * b_ld + k];   /* the CPU's add_job */
            ((float *)(want.data() + O))[r * ol + k] = scale != 0.0f ? t * scale : t;
        }
    const std::vector<uint8_t> before = m.mem;
    emu_gpu_use(&emu_hooks9);   /* no add_scaled: a scale is refused, not dropped */
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op) == (scale == 0.0f), "add scale %g: api 9 hooks' supports", scale);
    if (scale != 0.0f)
        EXPECT(weft_gpu_encode(&emu_gpu, &op) == EMU_NO_HOOK && m.mem == before, "add scale %g without the hook ran",
               scale);
    emu_gpu_use(&emu_hooks10);
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "add scale %g: supports", scale);
    EXPECT(weft_gpu_encode(&emu_gpu, &op) == 0, "add scale %g: encode", scale);
    int bad = 0;
    for (size_t i = 0; i < m.mem.size() / 4; i++)
        if (!same(*m.f(4 * i), *(const float *)(want.data() + 4 * i)) && bad++ < 3)
            printf("  add scale %g float %zu: %a, want %a\n", scale, i, *m.f(4 * i),
                   *(const float *)(want.data() + 4 * i));
    EXPECT(bad == 0, "add scale %g in place %d: %d floats differ from the CPU's (a + b) * scale", scale, in_place, bad);
    if (scale == 0.5f) EXPECT(isinf(((float *)(m.mem.data() + O))[2]), "add: the sum was not rounded before the scale");
}

/* ROPE_KV q_only: q as the CPU rotates it (base/rope.h's angles, its fmaf), the same bits as
 * the full op's q; k, v and the cache (every other byte) untouched, k and v not even looked
 * at; without the rope_q hook refused */
static void api10_rope_q_case(int kvt, int n_rot, bool neox, bool scaled)
{
    const int R = 4, NH = 4, NKV = 2, HD = 64, NL = 2, LAYER = 1, NBLK = 4;
    const size_t q_ld = NH * HD + 8, Q = 0, KO = 8192, VO = 12288, POS = 16384, SEQ = 16448, SLOT = 16512,
                 BTO = 16576, BT = 16640, FF = 16768;
    const size_t tok = weft_row_size((weft_type)kvt, NKV * HD), layer_bytes = 16 * 2 * tok;
    hbuf m(1 << 15), cache((size_t)NBLK * NL * layer_bytes);
    for (size_t i = 0; i < cache.mem.size(); i++) cache.mem[i] = (uint8_t)(i * 7 + 3);
    for (int i = 0; i < R * (int)q_ld; i++) m.f(Q)[i] = frand();
    for (int i = 0; i < R * NKV * HD; i++) { m.f(KO)[i] = frand(); m.f(VO)[i] = frand(); }
    const int32_t pos[R] = {0, 7, 300, 4095}, slot[R] = {3, 17, 40, 63};
    for (int r = 0; r < R; r++) { m.i(POS)[r] = pos[r]; m.i(SEQ)[r] = r % 2; m.i(SLOT)[r] = slot[r]; }
    m.i(BTO)[0] = 0;
    for (int b = 0; b < NBLK; b++) m.i(BT)[b] = b;
    for (int i = 0; i < n_rot / 2; i++) m.f(FF)[i] = 1.0f + 0.25f * i;
    struct weft_op op = {};
    op.kind = WEFT_OP_ROPE_KV;
    struct weft_op_rope_kv *o = &op.u.rope_kv;
    o->q = weft_view_2d(&m.b, Q, WEFT_TYPE_F32, NH * HD, R);
    o->q.nb1 = q_ld * 4;
    o->k = weft_view_2d(&m.b, KO, WEFT_TYPE_F32, NKV * HD, R);
    o->v = weft_view_2d(&m.b, VO, WEFT_TYPE_F32, NKV * HD, R);
    o->kv = {&cache.b, (weft_type)kvt, NL, LAYER, NKV, HD, 0, false};
    o->batch.n_rows = R;
    o->batch.n_seq = 2;
    o->batch.pos = weft_view_2d(&m.b, POS, WEFT_TYPE_I32, R, 1);
    o->batch.seq = weft_view_2d(&m.b, SEQ, WEFT_TYPE_I32, R, 1);
    o->batch.slot = weft_view_2d(&m.b, SLOT, WEFT_TYPE_I32, R, 1);
    o->batch.bt_off = weft_view_2d(&m.b, BTO, WEFT_TYPE_I32, 3, 1);
    o->batch.bt = weft_view_2d(&m.b, BT, WEFT_TYPE_I32, NBLK, 1);
    o->n_head = NH;
    o->n_rot = n_rot;
    o->freq_base = 10000.0f;
    o->freq_scale = scaled ? 0.25f : 1.0f;
    o->mode = neox ? WEFT_ROPE_NEOX : WEFT_ROPE_NORMAL;
    if (scaled) {   /* every scaling field: freq factors, YaRN, attn_factor */
        o->freq_factors = weft_view_2d(&m.b, FF, WEFT_TYPE_F32, n_rot / 2, 1);
        o->has_freq_factors = true;
        o->ext_factor = 1.0f;
        o->attn_factor = 0.75f;
        o->corr_dims[0] = 2.0f;
        o->corr_dims[1] = 11.0f;
    }
    o->q_only = true;
    /* the CPU: cos/sin from base/rope.h, then each of q's heads as rope_heads */
    std::vector<uint8_t> want = m.mem;
    const struct weft_rope_ext ext = {scaled ? m.f(FF) : NULL, o->ext_factor, o->attn_factor,
                                      {o->corr_dims[0], o->corr_dims[1]}};
    std::vector<float> cs(n_rot);
    for (int r = 0; r < R; r++) {
        weft_rope_cos_sin_ext(pos[r], n_rot, o->freq_base, o->freq_scale, &ext, cs.data());
        for (int h = 0; h < NH; h++) {
            float *v = (float *)(want.data() + Q) + r * q_ld + h * HD;
            for (int i = 0; i < n_rot / 2; i++) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = fmaf(x0, c, -(x1 * s));
                v[b] = fmaf(x0, s, x1 * c);
            }
        }
    }
    const std::vector<uint8_t> m0 = m.mem, c0 = cache.mem;
    emu_gpu_use(&emu_hooks9);
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "rope q_only: supported without the rope_q hook");
    EXPECT(weft_gpu_encode(&emu_gpu, &op) == EMU_NO_HOOK && m.mem == m0 && cache.mem == c0,
           "rope q_only without the hook ran");
    emu_gpu_use(&emu_hooks10);
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "rope q_only: supports");
    EXPECT(weft_gpu_encode(&emu_gpu, &op) == 0, "rope q_only: encode");
    int bad = 0;
    for (size_t i = 0; i < m.mem.size() / 4; i++)
        if (!same(*m.f(4 * i), *(const float *)(want.data() + 4 * i)) && bad++ < 3)
            printf("  rope q_only float %zu: %a, want %a\n", i, *m.f(4 * i), *(const float *)(want.data() + 4 * i));
    EXPECT(bad == 0 && m.mem == want, "rope q_only %s n_rot %d neox %d scaled %d: %d floats differ from the CPU's",
           kvt == WEFT_TYPE_F16 ? "F16" : "Q8_0", n_rot, neox, scaled, bad);
    EXPECT(cache.mem == c0, "rope q_only: the cache was written");
    /* k and v are not looked at: no views at all, the same result */
    const std::vector<uint8_t> q1 = m.mem;
    m.mem = m0;
    o->k = {};
    o->v = {};
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "rope q_only without k, v views: supports");
    EXPECT(weft_gpu_encode(&emu_gpu, &op) == 0 && m.mem == q1 && cache.mem == c0, "rope q_only without k, v views");
    o->q_only = false;   /* the full op refuses missing views */
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "rope without k, v views supported");
    /* the full op rotates q to the same bits, and writes the cache */
    o->k = weft_view_2d(&m.b, KO, WEFT_TYPE_F32, NKV * HD, R);
    o->v = weft_view_2d(&m.b, VO, WEFT_TYPE_F32, NKV * HD, R);
    m.mem = m0;
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op) && weft_gpu_encode(&emu_gpu, &op) == 0, "rope full: encode");
    EXPECT(!memcmp(m.mem.data() + Q, q1.data() + Q, (size_t)R * q_ld * 4),
           "rope: q_only's q differs from the full op's");
    EXPECT(cache.mem != c0 && memcmp(m.mem.data() + KO, m0.data() + KO, (size_t)R * NKV * HD * 4),
           "rope full: k and the cache not written");
}

/* MOE_ROUTE's expert_scale: the view's checks, then the weights as the CPU's */
static void api10_route_case(int E, int K, int gating, bool norm, float scale, bool with_bias)
{
    const int R = 6;
    const size_t l_ld = E + 2, L = 0, IDS = 16384, W = 20480, BIAS = 24576, ES = 28672;
    hbuf m(1 << 15);
    for (int i = 0; i < R * (int)l_ld; i++) m.f(L)[i] = 4 * frand();
    for (int e = 0; e < E; e++) { m.f(BIAS)[e] = 0.2f * frand(); m.f(ES)[e] = 0.5f + (frand() + 1); }
    m.f(ES)[E - 1] = -0.75f;
    struct weft_op op = {};
    op.kind = WEFT_OP_MOE_ROUTE;
    struct weft_op_moe_route *o = &op.u.moe_route;
    o->logits = weft_view_2d(&m.b, L, WEFT_TYPE_F32, E, R);
    o->logits.nb1 = l_ld * 4;
    o->ids = weft_view_2d(&m.b, IDS, WEFT_TYPE_I32, K, R);
    o->weights = weft_view_2d(&m.b, W, WEFT_TYPE_F32, K, R);
    o->k = K;
    o->gating = (enum weft_moe_gating)gating;
    o->norm = norm;
    o->scale = scale;
    o->bias = weft_view_2d(&m.b, BIAS, WEFT_TYPE_F32, E, 1);
    o->has_bias = with_bias;
    o->expert_scale = weft_view_2d(&m.b, ES + 4, WEFT_TYPE_F32, E, 1);   /* set, has_expert_scale false */
    emu_gpu_use(&emu_hooks10);
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "route: supports without expert_scale");
    o->has_expert_scale = true;
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "route: expert_scale at an aligned offset");
    o->expert_scale = weft_view_2d(&m.b, ES, WEFT_TYPE_F32, E - 1, 1);
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "route: expert_scale of E - 1 values supported");
    o->expert_scale = weft_view_2d(&m.b, ES, WEFT_TYPE_F32, E + 1, 1);
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "route: expert_scale of E + 1 values supported");
    o->expert_scale = weft_view_2d(&m.b, ES, WEFT_TYPE_F16, E, 1);
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "route: an F16 expert_scale supported");
    o->expert_scale = weft_view_2d(&m.b, ES + 2, WEFT_TYPE_F32, E, 1);
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "route: a misaligned expert_scale supported");
    o->expert_scale = weft_view_2d(&m.b, ES, WEFT_TYPE_F32, E / 2, 2);
    o->expert_scale.nb1 = E * 4;   /* two rows with a gap */
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "route: an expert_scale with gaps supported");
    o->expert_scale = weft_view_2d(&m.b, ES, WEFT_TYPE_F32, E / 2, 2);   /* packed: fine */
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "route: a packed 2-row expert_scale");
    o->expert_scale = weft_view_2d(NULL, 0, WEFT_TYPE_F32, E, 1);
    EXPECT(!weft_gpu_supports(&emu_gpu.base, &op), "route: an expert_scale without a buffer supported");
    o->expert_scale = weft_view_2d(&m.b, ES, WEFT_TYPE_F32, E, 1);
    EXPECT(weft_gpu_supports(&emu_gpu.base, &op), "route: supports");
    EXPECT(weft_gpu_encode(&emu_gpu, &op) == 0, "route: encode");
    std::vector<int32_t> ir(K);
    std::vector<float> wr(K);
    int bad = 0, scaled = 0;
    for (int r = 0; r < R; r++) {
        ref_route(m.f(L) + r * l_ld, E, K, gating, norm, scale, with_bias ? m.f(BIAS) : NULL, 0, 0, ir.data(),
                  wr.data(), m.f(ES));
        for (int j = 0; j < K; j++) {
            bad += m.i(IDS)[r * K + j] != ir[j] || !same(m.f(W)[r * K + j], wr[j]);
            scaled += m.f(ES)[ir[j]] != 1.0f;
        }
    }
    EXPECT(bad == 0 && scaled > 0, "route expert_scale E%d k%d gating %d norm %d scale %g bias %d: %d differ", E, K,
           gating, norm, scale, with_bias, bad);
}

static void api10_checks()
{
    for (float s : {0.8125f, 1.0f / 3.0f, -2.5f, 0.5f, 1e-30f, NAN, 0.0f, -0.0f}) api10_add_case(s, false);
    api10_add_case(0.8125f, true);
    printf("add scale done (%d fails)\n", fails);
    for (int kvt : {WEFT_TYPE_F16, WEFT_TYPE_Q8_0})
        for (int scaled = 0; scaled < 2; scaled++) {
            api10_rope_q_case(kvt, 64, true, scaled);
            api10_rope_q_case(kvt, 32, false, scaled);   /* a partial rotation, pairs (2i, 2i+1) */
        }
    printf("rope q_only done (%d fails)\n", fails);
    api10_route_case(8, 2, WEFT_MOE_SOFTMAX, true, 0.0f, false);
    api10_route_case(16, 4, WEFT_MOE_SIGMOID, true, 2.5f, true);
    api10_route_case(32, 4, WEFT_MOE_SOFTMAX_TOPK, false, 0.0f, false);
    api10_route_case(128, 8, WEFT_MOE_SOFTMAX, false, 1.5f, false);
    printf("route expert_scale done (%d fails)\n", fails);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || strstr(only, "route")) {
    /* MOE_ROUTE */
    const int gatings[3] = {WEFT_MOE_SOFTMAX, WEFT_MOE_SIGMOID, WEFT_MOE_SOFTMAX_TOPK};
    for (int gi = 0; gi < 3; gi++) {
        route_case(5, 8, 2, gatings[gi], false, 0.0f, false, 0);
        route_case(3, 128, 8, gatings[gi], true, 0.0f, false, 0);
        route_case(2, 37, 4, gatings[gi], gi != 2, 2.5f, gi == 1, 0);
        route_case(2, 256, 8, gatings[gi], gi == 1, 2.5f, true, 0);
        route_case(2, 60, 20, gatings[gi], true, 0.0f, false, 1);    /* ties */
        route_case(2, 33, 3, gatings[gi], false, 0.0f, gi == 1, 2);  /* NaN */
    }
    route_case(1, 1024, 16, WEFT_MOE_SOFTMAX, true, 0.0f, false, 0);
    route_case(9, 32, 32, WEFT_MOE_SOFTMAX_TOPK, true, 0.0f, false, 0);   /* k = E, a chunk in the chosen softmax */
    /* expert groups (api 8): DeepSeek V3's 8 of 32 (4 kept), groups of 2, ties, a NaN */
    route_case(3, 256, 8, WEFT_MOE_SIGMOID, true, 2.5f, true, 0, 8, 4);
    route_case(2, 128, 6, WEFT_MOE_SOFTMAX, false, 0.0f, true, 0, 64, 3);
    route_case(2, 96, 4, WEFT_MOE_SIGMOID, true, 0.0f, false, 1, 6, 2);
    route_case(2, 64, 4, WEFT_MOE_SIGMOID, true, 0.0f, true, 2, 8, 2);
    /* api 10's expert_scale (a negative, a zero and a NaN scale among them): every gating, with
     * norm and scale, groups, ties, a NaN logit */
    for (int gi = 0; gi < 3; gi++) {
        route_case(5, 8, 2, gatings[gi], true, 0.0f, false, 0, 0, 0, true);
        route_case(3, 128, 8, gatings[gi], gi != 2, 2.5f, gi == 1, 0, 0, 0, true);
        route_case(2, 60, 20, gatings[gi], true, 0.0f, false, 1, 0, 0, true);
        route_case(2, 33, 3, gatings[gi], false, 0.0f, gi == 1, 2, 0, 0, true);
    }
    route_case(3, 256, 8, WEFT_MOE_SIGMOID, true, 2.5f, true, 0, 8, 4, true);
    printf("route done (%d fails)\n", fails);
    }
    if (!*only || strstr(only, "mmid")) {
    /* MATMUL_ID */
    const int types[] = {WEFT_TYPE_Q4_0, WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_K, WEFT_TYPE_Q6_K, WEFT_TYPE_Q2_K, WEFT_TYPE_Q3_K,
                         WEFT_TYPE_IQ4_XS, WEFT_TYPE_MXFP4, WEFT_TYPE_Q5_1, WEFT_TYPE_F16, WEFT_TYPE_F32, WEFT_TYPE_BF16};
    for (int t : types) {
        mmid_case(t, 256, 10, 6, 1, 2, false, false, false, false, false);
        mmid_case(t, 256, 10, 6, 3, 3, true, true, true, true, false);
    }
    mmid_case(WEFT_TYPE_Q4_0, 512, 13, 5, 9, 2, false, false, false, true, false);   /* > 8 slots per expert */
    mmid_case(WEFT_TYPE_Q8_0, 256, 7, 7, 8, 4, true, true, false, false, false);
    mmid_case(WEFT_TYPE_F16, 96, 9, 5, 8, 3, true, true, true, true, false);
    mmid_case(WEFT_TYPE_Q4_K, 256, 6, 6, 2, 2, false, false, false, false, true);    /* a bad id */
    mmid_case(WEFT_TYPE_MXFP4, 256, 6, 6, 2, 2, true, true, true, false, true);
    printf("matmul_id done (%d fails)\n", fails);
    }
    if (!*only || strstr(only, "attn")) {
    /* attention */
    attn_case(WEFT_TYPE_F16, 4, 2, 64, 64, false, true, 1, {300, 40}, 0);
    attn_case(WEFT_TYPE_F16, 4, 2, 64, 64, false, true, 5, {300, 40}, 0);
    attn_case(WEFT_TYPE_Q8_0, 4, 2, 64, 64, false, true, 3, {300, 40}, 100);
    attn_case(WEFT_TYPE_F16, 4, 1, 96, 64, true, false, 1, {200, 17}, 0);
    attn_case(WEFT_TYPE_F16, 4, 1, 96, 64, true, false, 4, {200, 17}, 0);
    attn_case(WEFT_TYPE_Q8_0, 4, 1, 96, 64, true, true, 4, {200, 17}, 0);
    attn_case(WEFT_TYPE_F16, 2, 1, 320, 256, true, true, 3, {150}, 0);    /* the wide kernel */
    attn_case(WEFT_TYPE_Q8_0, 2, 1, 576, 512, true, false, 2, {70}, 0);
    printf("attention done (%d fails)\n", fails);
    }
    if (!*only || strstr(only, "rope")) {
    rope_latent_case(WEFT_TYPE_F16, 96, 64);
    rope_latent_case(WEFT_TYPE_Q8_0, 96, 64);
    rope_latent_case(WEFT_TYPE_F16, 576, 512);
    swiglu_case();
    }
    if (!*only || strstr(only, "rec")) recurrent_checks();
    if (!*only || strstr(only, "api10")) api10_checks();
    printf("%s: %d fails, %ld launches\n", fails ? "FAILED" : "ok", fails, emu_launches);
    return fails != 0;
}
