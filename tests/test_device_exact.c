/* A device (WEFT_TEST_DEVICE: vulkan:0 by default, or opencl:0) against the
 * CPU backend bit for bit, op by op, on SmolLM2-135M's shapes (n_embd 576,
 * n_ff 1536, 9 heads / 3 KV heads of 64, Q4_1 weights, Q8_0 output head,
 * F16 KV cache): MATMUL (decode and prefill rows, with and without the fused
 * residual), LOGITS, RMSNORM (plain and fused), SILU_MUL, ROPE_KV (q, k and
 * the cache bytes) and ATTENTION over a long context; and on Qwen3.5's
 * (api 9) the recurrent layer's SSM_CONV and DELTA_NET over state slots and
 * the gated attention output's sigmoid SILU_MUL (a device that refuses those
 * ops is noted and skipped on OpenCL, a failure on Vulkan). On OpenCL also the
 * forms its exact kernels cover beyond those: F32 and F16 weights in both of
 * the CPU's orders (stories260K's shapes), Q4_0/Q5_0/Q5_1, a Q8_0 KV cache.
 * Prints one line per op: outputs that differ in any bit, and the largest
 * difference in ulps. On a CPU-type device (lavapipe, PoCL) the backend runs
 * its exact forms and every count must be 0 (a model that rounds activations
 * to 8 bits turns any last-bit difference into a different token sooner or
 * later); on a GPU the counts are printed only. Skips (77) without the
 * device. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/quant.h"
#include "tests/check.h"

#define TEST_RNG_SEED 0x5eedeac7ull
#include "tests/test_rand.h"

static struct weft_backend *cpu, *vk;  /* vk: the device under test (tests/vk_pair.h's name) */
static bool must_be_exact, is_ocl;
static const char *dev_spec;

static float frand(void) { return (float)(rng_unit() * 2.0 - 1.0); }

#include "tests/vk_pair.h"

static struct weft_view vc(const struct pair *p, size_t off, enum weft_type t, int64_t ne0, int64_t ne1)
{
    return weft_view_2d(p->c, off, t, ne0, ne1);
}

/* the Vulkan twin of a CPU op: every buffer pointer swapped for its pair's */
static struct pair *all_pairs[32];
static int n_pairs;

static struct pair reg(struct pair p)
{
    all_pairs[n_pairs++] = malloc(sizeof p);
    *all_pairs[n_pairs - 1] = p;
    return p;
}

static void swap_buf(struct weft_buffer **b)
{
    for (int i = 0; i < n_pairs; i++)
        if (*b == all_pairs[i]->c) { *b = all_pairs[i]->v; return; }
}

static void swap_view(struct weft_view *v) { swap_buf(&v->buf); }

static struct weft_op twin(const struct weft_op *o)
{
    struct weft_op t = *o;
    switch (t.kind) {
    case WEFT_OP_MATMUL: swap_view(&t.u.matmul.x); swap_view(&t.u.matmul.w); swap_view(&t.u.matmul.out); swap_view(&t.u.matmul.add); break;
    case WEFT_OP_LOGITS: swap_view(&t.u.logits.x); swap_view(&t.u.logits.rows); swap_view(&t.u.logits.norm_w); swap_view(&t.u.logits.w); swap_view(&t.u.logits.out); break;
    case WEFT_OP_RMSNORM: swap_view(&t.u.rmsnorm.x); swap_view(&t.u.rmsnorm.add); swap_view(&t.u.rmsnorm.sum); swap_view(&t.u.rmsnorm.w); swap_view(&t.u.rmsnorm.out); break;
    case WEFT_OP_SILU_MUL: swap_view(&t.u.silu_mul.gate); swap_view(&t.u.silu_mul.up); swap_view(&t.u.silu_mul.out); break;
    case WEFT_OP_SSM_CONV: {
        struct weft_op_ssm_conv *c = &t.u.ssm_conv;
        swap_view(&c->x); swap_view(&c->w); swap_view(&c->out); swap_view(&c->state); swap_view(&c->slots);
        break;
    }
    case WEFT_OP_DELTA_NET: {
        struct weft_op_delta_net *d = &t.u.delta_net;
        swap_view(&d->in); swap_view(&d->beta); swap_view(&d->alpha); swap_view(&d->dt_bias); swap_view(&d->a);
        swap_view(&d->out); swap_view(&d->state); swap_view(&d->slots);
        break;
    }
    case WEFT_OP_ROPE_KV: {
        struct weft_op_rope_kv *r = &t.u.rope_kv;
        swap_view(&r->q); swap_view(&r->k); swap_view(&r->v); swap_buf(&r->kv.buf);
        swap_view(&r->batch.pos); swap_view(&r->batch.seq); swap_view(&r->batch.slot); swap_view(&r->batch.bt_off); swap_view(&r->batch.bt);
        break;
    }
    case WEFT_OP_ATTENTION: {
        struct weft_op_attention *a = &t.u.attention;
        swap_view(&a->q); swap_view(&a->out); swap_buf(&a->kv.buf);
        swap_view(&a->batch.pos); swap_view(&a->batch.seq); swap_view(&a->batch.slot); swap_view(&a->batch.bt_off); swap_view(&a->batch.bt);
        break;
    }
    default: break;
    }
    return t;
}

static void free_pairs(void)
{
    for (int i = 0; i < n_pairs; i++) { pair_free(all_pairs[i]); free(all_pairs[i]); }
    n_pairs = 0;
}

static bool run_both(const struct weft_op *oc, size_t n)
{
    struct weft_op ov[4];
    for (size_t i = 0; i < n; i++) {
        ov[i] = twin(&oc[i]);
        CHECK(cpu->iface->supports(cpu, &oc[i]));
        CHECK_MSG(vk->iface->supports(vk, &ov[i]), "%s does not support op kind %d", dev_spec, (int)ov[i].kind);
        if (!vk->iface->supports(vk, &ov[i])) return false;
    }
    CHECK(cpu->iface->run(cpu, oc, n) == WEFT_OK && cpu->iface->sync(cpu) == WEFT_OK);
    weft_status st = vk->iface->run(vk, ov, n);
    if (st == WEFT_OK) st = vk->iface->sync(vk);
    CHECK_MSG(st == WEFT_OK, "%s run: %s", dev_spec, weft_last_error());
    return st == WEFT_OK;
}

/* run_both for the api-9 ops, which a device may not run yet: on OpenCL a
 * refusal skips the case with a note; on Vulkan it fails as in run_both */
static bool run_both_api9(const struct weft_op *oc, size_t n, const char *what)
{
    for (size_t i = 0; i < n && is_ocl; i++) {
        const struct weft_op t = twin(&oc[i]);
        if (!vk->iface->supports(vk, &t)) {
            printf("  %-40s skipped: %s does not support %s\n", what, dev_spec, weft_op_name(t.kind));
            return false;
        }
    }
    return run_both(oc, n);
}

static int64_t ord(float f)
{
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : i;
}

/* Compare n floats at byte off of pair p; print and check. */
static void compare(const char *what, const struct pair *p, size_t off, size_t n)
{
    float *c = malloc(n * 4), *v = malloc(n * 4);
    CHECK(cpu->iface->buffer_read(p->c, off, c, n * 4) == WEFT_OK);
    CHECK(vk->iface->buffer_read(p->v, off, v, n * 4) == WEFT_OK);
    size_t bad = 0;
    int64_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&c[i], &v[i], 4) == 0) continue;
        bad++;
        int64_t d = ord(c[i]) - ord(v[i]);
        if (d < 0) d = -d;
        if (d > worst) worst = d;
    }
    printf("  %-40s %8zu outputs, %6zu differ, max %lld ulp\n", what, n, bad, (long long)worst);
    if (must_be_exact) CHECK_MSG(bad == 0, "%s: %zu of %zu outputs differ from the CPU's", what, bad, n);
    free(c);
    free(v);
}

static uint8_t *rand_weights(enum weft_type t, int64_t rows, int64_t k)
{
    size_t rs = weft_row_size(t, k);
    uint8_t *w = malloc(rs * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) tmp[i] = frand() * 0.1f;
        CHECK(weft_quantize_row(t, tmp, w + r * rs, k));
    }
    free(tmp);
    return w;
}

static float *rand_f32(size_t n, float scale)
{
    float *x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}

static void one_matmul(enum weft_type t, int64_t K, int64_t N, int64_t M, bool add)
{
    const size_t rs = weft_row_size(t, K);
    uint8_t *w = rand_weights(t, N, K);
    float *x = rand_f32((size_t)(K * M), 2.0f), *a = rand_f32((size_t)(N * M), 1.0f);
    struct pair pw = reg(pair_new(w, rs * (size_t)N)), px = reg(pair_new(x, (size_t)(K * M) * 4));
    struct pair po = reg(pair_new(NULL, (size_t)(N * M) * 4)), pa = reg(pair_new(a, (size_t)(N * M) * 4));
    struct weft_op op = {.kind = WEFT_OP_MATMUL};
    op.u.matmul = (struct weft_op_matmul){.x = vc(&px, 0, WEFT_TYPE_F32, K, M), .w = vc(&pw, 0, t, K, N),
                                          .out = vc(&po, 0, WEFT_TYPE_F32, N, M), .add = vc(&pa, 0, WEFT_TYPE_F32, N, M),
                                          .has_add = add};
    char what[64];
    snprintf(what, sizeof what, "MATMUL %s K=%lld N=%lld M=%lld%s", weft_type_name(t), (long long)K, (long long)N,
             (long long)M, add ? " +add" : "");
    if (run_both(&op, 1)) compare(what, &po, 0, (size_t)(N * M));
    free_pairs();
    free(w); free(x); free(a);
}

static void matmuls_are_bit_exact(void)
{
    const int64_t Ms[] = {1, 3, 8, 9, 64};
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
        one_matmul(WEFT_TYPE_Q4_1, 576, 576, Ms[i], false);
        one_matmul(WEFT_TYPE_Q4_1, 576, 1536, Ms[i], false);
        one_matmul(WEFT_TYPE_Q4_1, 1536, 576, Ms[i], true);
        one_matmul(WEFT_TYPE_Q8_0, 576, 1000, Ms[i], false);
    }
    one_matmul(WEFT_TYPE_Q4_1, 576, 192, 2, true);
    if (!is_ocl) return;
    /* OpenCL's other exact forms: F32/F16 in the vec_dot order (one row,
     * K % 64 tails: stories260K's 64 and 172) and the tinyBLAS order (rows
     * >= 2, N % 4 == 0, K % 16 == 0), with the fall-back to vec_dot where
     * those fail (N = 30); Q5_0 and Q5_1 */
    const enum weft_type ft[] = {WEFT_TYPE_F32, WEFT_TYPE_F16};
    for (size_t t = 0; t < 2; t++)
        for (size_t i = 0; i < 3; i++) {
            one_matmul(ft[t], 64, 64, Ms[i], false);
            one_matmul(ft[t], 172, 64, Ms[i], true);
            one_matmul(ft[t], 64, 172, Ms[i], false);
            one_matmul(ft[t], 200, 30, Ms[i], false);
        }
    one_matmul(WEFT_TYPE_Q4_0, 576, 96, 1, false);
    one_matmul(WEFT_TYPE_Q4_0, 576, 96, 9, true);
    one_matmul(WEFT_TYPE_Q5_0, 576, 96, 3, false);
    one_matmul(WEFT_TYPE_Q5_1, 576, 96, 3, true);
}

static void logits_are_bit_exact(void)
{
    enum { K = 576, V = 3000, R = 6 };
    uint8_t *w = rand_weights(WEFT_TYPE_Q8_0, V, K);
    float *x = rand_f32(K * R, 3.0f), *g = rand_f32(K, 1.0f);
    int32_t rows[3] = {5, 0, 3};
    struct pair pw = reg(pair_new(w, weft_row_size(WEFT_TYPE_Q8_0, K) * V)), px = reg(pair_new(x, K * R * 4));
    struct pair pg = reg(pair_new(g, K * 4)), pr = reg(pair_new(rows, sizeof rows)), po = reg(pair_new(NULL, V * 3 * 4));
    struct weft_op op = {.kind = WEFT_OP_LOGITS};
    op.u.logits = (struct weft_op_logits){.x = vc(&px, 0, WEFT_TYPE_F32, K, R), .rows = vc(&pr, 0, WEFT_TYPE_I32, 3, 1),
                                          .norm_w = vc(&pg, 0, WEFT_TYPE_F32, K, 1),
                                          .w = vc(&pw, 0, WEFT_TYPE_Q8_0, K, V), .out = vc(&po, 0, WEFT_TYPE_F32, V, 3),
                                          .eps = 1e-5f};
    if (run_both(&op, 1)) compare("LOGITS Q8_0 K=576 V=3000, 3 rows", &po, 0, V * 3);
    free_pairs();
    free(w); free(x); free(g);
}

static void norms_and_silu_are_bit_exact(void)
{
    enum { K = 576, R = 7, F = 1536 };
    float *x = rand_f32(K * R, 4.0f), *a = rand_f32(K * R, 2.0f), *w = rand_f32(K, 1.5f);
    for (int fused = 0; fused < 2; fused++) {
        struct pair px = reg(pair_new(x, K * R * 4)), pa = reg(pair_new(a, K * R * 4)), pw = reg(pair_new(w, K * 4));
        struct pair po = reg(pair_new(NULL, K * R * 4)), ps = reg(pair_new(NULL, K * R * 4));
        struct weft_op op = {.kind = WEFT_OP_RMSNORM};
        op.u.rmsnorm = (struct weft_op_rmsnorm){.x = vc(&px, 0, WEFT_TYPE_F32, K, R), .add = vc(&pa, 0, WEFT_TYPE_F32, K, R),
                                                .sum = vc(&ps, 0, WEFT_TYPE_F32, K, R), .w = vc(&pw, 0, WEFT_TYPE_F32, K, 1),
                                                .out = vc(&po, 0, WEFT_TYPE_F32, K, R), .eps = 1e-5f, .has_add = fused};
        if (run_both(&op, 1)) {
            compare(fused ? "RMSNORM+add 576 x 7" : "RMSNORM 576 x 7", &po, 0, K * R);
            if (fused) compare("RMSNORM+add: the sum", &ps, 0, K * R);
        }
        free_pairs();
    }
    free(x); free(a); free(w);
    float *g = rand_f32(F * R, 8.0f), *u = rand_f32(F * R, 2.0f);
    struct pair pg = reg(pair_new(g, F * R * 4)), pu = reg(pair_new(u, F * R * 4)), po = reg(pair_new(NULL, F * R * 4));
    struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
    op.u.silu_mul = (struct weft_op_silu_mul){.gate = vc(&pg, 0, WEFT_TYPE_F32, F, R), .up = vc(&pu, 0, WEFT_TYPE_F32, F, R),
                                              .out = vc(&po, 0, WEFT_TYPE_F32, F, R)};
    if (run_both(&op, 1)) compare("SILU_MUL 1536 x 7", &po, 0, F * R);
    free_pairs();
    /* a row length with n % 16 leftovers (stories260K's n_ff 172): the CPU's libm expf there */
    struct pair qg = reg(pair_new(g, 172 * R * 4)), qu = reg(pair_new(u, 172 * R * 4)), qo = reg(pair_new(NULL, 172 * R * 4));
    op.u.silu_mul = (struct weft_op_silu_mul){.gate = vc(&qg, 0, WEFT_TYPE_F32, 172, R), .up = vc(&qu, 0, WEFT_TYPE_F32, 172, R),
                                              .out = vc(&qo, 0, WEFT_TYPE_F32, 172, R)};
    if (run_both(&op, 1)) compare("SILU_MUL 172 x 7", &qo, 0, 172 * R);
    free_pairs();
    free(g); free(u);
}

/* ROPE_KV then ATTENTION: one sequence whose 200 cached positions were
 * written by earlier ROPE_KV steps (so K went through each backend's own
 * rotation), then a prefill chunk of 5 rows and a decode row of another
 * sequence. */
/* big_meta: the positions in a buffer of 2 MiB (the OpenCL backend keeps no
 * host copy of one that large: it reads the positions back for RoPE's table) */
static void rope_attention(enum weft_type kvt, bool big_meta)
{
    enum { NL = 1, NH = 9, NKV = 3, HD = 64, NBLK = 20, CTX = 200 };
    const size_t tok = weft_row_size(kvt, NKV * HD), layer = 16 * tok, blk = layer * 2 * NL;
    struct pair pc = reg(pair_new(NULL, blk * NBLK));
    int32_t bt[NBLK];
    for (int i = 0; i < NBLK; i++) bt[i] = (i * 7 + 3) % NBLK;  /* scattered blocks; seq 1 uses the last 2 */
    int32_t bt_off[2] = {0, NBLK - 2};
    struct pair pbt = reg(pair_new(bt, sizeof bt)), pbo = reg(pair_new(bt_off, sizeof bt_off));
    enum { RMAX = 64 };
    struct pair pq = reg(pair_new(NULL, RMAX * NH * HD * 4)), pk = reg(pair_new(NULL, RMAX * NKV * HD * 4));
    struct pair pv = reg(pair_new(NULL, RMAX * NKV * HD * 4)), po = reg(pair_new(NULL, RMAX * NH * HD * 4));
    struct pair ppos = reg(pair_new(NULL, big_meta ? 2u << 20 : RMAX * 4)), pseq = reg(pair_new(NULL, RMAX * 4)), pslot = reg(pair_new(NULL, RMAX * 4));
    float *q = malloc(RMAX * NH * HD * 4), *k = malloc(RMAX * NKV * HD * 4), *v = malloc(RMAX * NKV * HD * 4);
    /* steps: prefill seq 0 in chunks of 64 up to CTX, then 5 rows of seq 0 and 1 row of seq 1 */
    int32_t start = 0;
    bool ok = true;
    for (int step = 0; ok && start <= CTX; step++) {
        int32_t pos[RMAX], seq[RMAX], slot[RMAX];
        int R = 0;
        if (start < CTX) {
            for (; R < RMAX && start + R < CTX; R++) { pos[R] = start + R; seq[R] = 0; }
        } else {
            for (; R < 5; R++) { pos[R] = CTX + R; seq[R] = 0; }
            pos[R] = 20; seq[R] = 1; R++;
        }
        for (int r = 0; r < R; r++) slot[r] = bt[bt_off[seq[r]] + pos[r] / 16] * 16 + pos[r] % 16;
        for (int i = 0; i < R * NH * HD; i++) q[i] = frand() * 3.0f;
        for (int i = 0; i < R * NKV * HD; i++) { k[i] = frand() * 3.0f; v[i] = frand(); }
        struct pair *up[] = {&pq, &pk, &pv, &ppos, &pseq, &pslot};
        const void *src[] = {q, k, v, pos, seq, slot};
        const size_t n[] = {(size_t)R * NH * HD * 4, (size_t)R * NKV * HD * 4, (size_t)R * NKV * HD * 4, (size_t)R * 4,
                            (size_t)R * 4, (size_t)R * 4};
        for (int i = 0; i < 6; i++) {
            CHECK(cpu->iface->buffer_write(up[i]->c, 0, src[i], n[i]) == WEFT_OK);
            CHECK(vk->iface->buffer_write(up[i]->v, 0, src[i], n[i]) == WEFT_OK);
        }
        struct weft_kv_view kv = {pc.c, kvt, NL, 0, NKV, HD, 0, false};
        struct weft_batch_view batch = {(uint32_t)R, 2, vc(&ppos, 0, WEFT_TYPE_I32, R, 1), vc(&pseq, 0, WEFT_TYPE_I32, R, 1),
                                        vc(&pslot, 0, WEFT_TYPE_I32, R, 1), vc(&pbo, 0, WEFT_TYPE_I32, 2, 1),
                                        vc(&pbt, 0, WEFT_TYPE_I32, NBLK, 1)};
        struct weft_op ops[2] = {{.kind = WEFT_OP_ROPE_KV}, {.kind = WEFT_OP_ATTENTION}};
        ops[0].u.rope_kv = (struct weft_op_rope_kv){
            .q = vc(&pq, 0, WEFT_TYPE_F32, NH * HD, R), .k = vc(&pk, 0, WEFT_TYPE_F32, NKV * HD, R),
            .v = vc(&pv, 0, WEFT_TYPE_F32, NKV * HD, R), .kv = kv, .batch = batch, .n_head = NH, .n_rot = HD,
            .freq_base = 100000.0f, .freq_scale = 1.0f, .mode = WEFT_ROPE_NORMAL};
        ops[1].u.attention = (struct weft_op_attention){.q = vc(&pq, 0, WEFT_TYPE_F32, NH * HD, R),
                                                        .out = vc(&po, 0, WEFT_TYPE_F32, NH * HD, R), .kv = kv,
                                                        .batch = batch, .n_head = NH, .scale = 0.125f};
        ok = run_both(ops, 2);
        if (ok && (step == 0 || start >= CTX)) {
            char what[64];
            snprintf(what, sizeof what, "ROPE_KV q, %d rows%s", R, start >= CTX ? " (decode step)" : "");
            compare(what, &pq, 0, (size_t)R * NH * HD);
            snprintf(what, sizeof what, "ATTENTION, %d rows%s", R, start >= CTX ? " (to pos 204)" : "");
            compare(what, &po, 0, (size_t)R * NH * HD);
        }
        start += start < CTX ? R : 1;
    }
    if (ok) compare(kvt == WEFT_TYPE_F16 ? "ROPE_KV: the F16 cache (as floats)" : "ROPE_KV: the Q8_0 cache (as floats)",
                    &pc, 0, blk * NBLK / 4);
    free(q); free(k); free(v);
    free_pairs();
}

static void rope_and_attention_are_bit_exact(void)
{
    rope_attention(WEFT_TYPE_F16, false);
    if (!is_ocl) return;
    rope_attention(WEFT_TYPE_Q8_0, false);  /* OpenCL's exact forms cover a Q8_0 cache too */
    rope_attention(WEFT_TYPE_F16, true);
}

/* Qwen3.5's recurrent layer: SSM_CONV (K taps over C = (2 Hk + Hv) S
 * channels, SiLU) then DELTA_NET, one run per step, over 4 state slots of
 * one buffer laid as core/kv.h lays them (a slot's conv window, then its
 * delta matrices 256-aligned after it, slots a 256-aligned stride apart;
 * slot 1 never named). Three sequences (slots 2, 0, 3): a prefill chunk of
 * one beside decode rows of the others, a decode step of all three, a chunk
 * of another, then 72 rows of all three (chunks of 40, 30 and 2: more rows
 * than a dispatch has workgroup rows). x and the outputs have padded
 * (strided) rows as the model's activations may; one alpha is large
 * (softplus's x > 20 branch).
 * k_grouped: v heads grouped over the k heads (Qwen3-Next) */
static void recurrent_case(int64_t Hk, int64_t Hv, int64_t S, int64_t K, bool k_grouped)
{
    const int64_t C = (2 * Hk + Hv) * S, xs = C + 16, os = Hv * S + 8, gs = 2 * Hv, NSLOT = 4;
    const size_t conv_b = (size_t)((K - 1) * C) * 4, delta_off = (conv_b + 255) & ~(size_t)255;
    const size_t stride = (delta_off + (size_t)(Hv * S * S) * 4 + 255) & ~(size_t)255, st_off = 256;
    enum { RMAX = 72, NSTEP = 4 };
    int32_t steps[NSTEP][RMAX] = {{2, 2, 2, 2, 2, 0, 3}, {0, 2, 3}, {3, 3, 3, 2}};
    const int step_rows[NSTEP] = {7, 3, 4, RMAX};
    for (int r = 0; r < RMAX; r++) steps[3][r] = r < 40 ? 0 : r < 70 ? 2 : 3;
    float *x = rand_f32((size_t)(RMAX * xs), 2.0f), *w = rand_f32((size_t)(C * K), 0.5f);
    float *st0 = rand_f32((st_off + stride * NSLOT) / 4, 0.1f);
    float *ba = rand_f32((size_t)(RMAX * gs), 3.0f), *dtb = rand_f32((size_t)Hv, 1.0f), *A = malloc(Hv * 4);
    for (int64_t h = 0; h < Hv; h++) A[h] = -(0.05f + (float)rng_unit() * 2.0f);
    ba[3 * gs + Hv + 1] = 25.0f;  /* row 3's alpha of v head 1 */
    struct pair px = reg(pair_new(x, (size_t)(RMAX * xs) * 4)), pw = reg(pair_new(w, (size_t)(C * K) * 4));
    struct pair ps = reg(pair_new(st0, st_off + stride * NSLOT)), pc = reg(pair_new(NULL, (size_t)(RMAX * C) * 4));
    struct pair pb = reg(pair_new(ba, (size_t)(RMAX * gs) * 4)), pd = reg(pair_new(dtb, (size_t)Hv * 4));
    struct pair pa = reg(pair_new(A, (size_t)Hv * 4)), po = reg(pair_new(NULL, (size_t)(RMAX * os) * 4));
    struct pair psl = reg(pair_new(NULL, RMAX * 4));
    bool ok = true;
    for (int step = 0; step < NSTEP && ok; step++) {
        const int R = step_rows[step];
        CHECK(cpu->iface->buffer_write(psl.c, 0, steps[step], (size_t)R * 4) == WEFT_OK);
        CHECK(vk->iface->buffer_write(psl.v, 0, steps[step], (size_t)R * 4) == WEFT_OK);
        if (step) {  /* fresh inputs */
            float *nx = rand_f32((size_t)(RMAX * xs), 2.0f), *nb = rand_f32((size_t)(RMAX * gs), 3.0f);
            CHECK(cpu->iface->buffer_write(px.c, 0, nx, (size_t)(RMAX * xs) * 4) == WEFT_OK);
            CHECK(vk->iface->buffer_write(px.v, 0, nx, (size_t)(RMAX * xs) * 4) == WEFT_OK);
            CHECK(cpu->iface->buffer_write(pb.c, 0, nb, (size_t)(RMAX * gs) * 4) == WEFT_OK);
            CHECK(vk->iface->buffer_write(pb.v, 0, nb, (size_t)(RMAX * gs) * 4) == WEFT_OK);
            free(nx); free(nb);
        }
        struct weft_view xv = vc(&px, 0, WEFT_TYPE_F32, C, R), ov = vc(&po, 0, WEFT_TYPE_F32, Hv * S, R);
        struct weft_view bv = vc(&pb, 0, WEFT_TYPE_F32, Hv, R), av = vc(&pb, (size_t)Hv * 4, WEFT_TYPE_F32, Hv, R);
        struct weft_view cs = vc(&ps, st_off, WEFT_TYPE_F32, (K - 1) * C, NSLOT);
        struct weft_view ds = vc(&ps, st_off + delta_off, WEFT_TYPE_F32, Hv * S * S, NSLOT);
        xv.nb1 = (size_t)xs * 4; ov.nb1 = (size_t)os * 4; bv.nb1 = av.nb1 = (size_t)gs * 4;
        cs.nb1 = ds.nb1 = stride;
        struct weft_op ops[2] = {{.kind = WEFT_OP_SSM_CONV}, {.kind = WEFT_OP_DELTA_NET}};
        ops[0].u.ssm_conv = (struct weft_op_ssm_conv){.x = xv, .w = vc(&pw, 0, WEFT_TYPE_F32, K, C),
                                                      .out = vc(&pc, 0, WEFT_TYPE_F32, C, R), .state = cs,
                                                      .slots = vc(&psl, 0, WEFT_TYPE_I32, R, 1), .silu = true};
        ops[1].u.delta_net = (struct weft_op_delta_net){
            .in = vc(&pc, 0, WEFT_TYPE_F32, C, R), .beta = bv, .alpha = av, .dt_bias = vc(&pd, 0, WEFT_TYPE_F32, Hv, 1),
            .a = vc(&pa, 0, WEFT_TYPE_F32, Hv, 1), .out = ov, .state = ds, .slots = vc(&psl, 0, WEFT_TYPE_I32, R, 1),
            .n_k_head = (uint32_t)Hk, .n_v_head = (uint32_t)Hv, .head_dim = (uint32_t)S, .eps = 1e-6f,
            .k_grouped = k_grouped};
        char what[80];
        snprintf(what, sizeof what, "SSM_CONV+DELTA_NET Hk=%lld Hv=%lld S=%lld", (long long)Hk, (long long)Hv,
                 (long long)S);
        if (!(ok = run_both_api9(ops, 2, what))) break;
        snprintf(what, sizeof what, "SSM_CONV C=%lld K=%lld, step %d (%d rows)", (long long)C, (long long)K, step, R);
        compare(what, &pc, 0, (size_t)(R * C));
        snprintf(what, sizeof what, "DELTA_NET Hv=%lld S=%lld, step %d", (long long)Hv, (long long)S, step);
        compare(what, &po, 0, (size_t)(R * os));
    }
    if (ok) compare("the state slots after 4 steps", &ps, 0, (st_off + stride * NSLOT) / 4);
    free_pairs();
    free(x); free(w); free(st0); free(ba); free(dtb); free(A);
}

/* Qwen3.5's gated attention output: att = att * sigmoid(gate) in place, the
 * gate every other half head of the q projection (strided rows) */
static void sigmoid_gate_case(void)
{
    enum { R = 5, H = 8, D = 256 };
    float *qg = rand_f32(R * H * 2 * D, 8.0f), *att = rand_f32(R * H * D, 2.0f);
    struct pair pq = reg(pair_new(qg, R * H * 2 * D * 4)), pa = reg(pair_new(att, R * H * D * 4));
    struct weft_op op = {.kind = WEFT_OP_SILU_MUL};
    struct weft_view g = vc(&pq, D * 4, WEFT_TYPE_F32, D, R * H);
    g.nb1 = 2 * D * 4;
    op.u.silu_mul = (struct weft_op_silu_mul){.gate = g, .up = vc(&pa, 0, WEFT_TYPE_F32, D, R * H),
                                              .out = vc(&pa, 0, WEFT_TYPE_F32, D, R * H), .act = WEFT_GLU_SIGMOID};
    if (run_both_api9(&op, 1, "SILU_MUL sigmoid")) compare("SILU_MUL sigmoid 256 x 40, strided gate, in place", &pa, 0, R * H * D);
    free_pairs();
    free(qg); free(att);
}

static void recurrent_ops_are_bit_exact(void)
{
    recurrent_case(16, 16, 128, 4, false);  /* Qwen3.5-0.8B's layer: C = 6144 */
    recurrent_case(2, 4, 40, 4, true);      /* S % 32 = 8 (the dot's tail), v heads grouped */
    recurrent_case(1, 2, 21, 3, false);     /* S < 32 (all tail), C = 84 (C % 16: libm's expf) */
    sigmoid_gate_case();
}

int main(void)
{
    setenv("WEFT_VK_VALIDATE", "1", 0);
    check_env_reapply();
    dev_spec = getenv("WEFT_TEST_DEVICE") && *getenv("WEFT_TEST_DEVICE") ? getenv("WEFT_TEST_DEVICE") : "vulkan:0";
    char name[32];
    snprintf(name, sizeof name, "%s", dev_spec);
    if (strchr(name, ':')) *strchr(name, ':') = '\0';
    is_ocl = !strcmp(name, "opencl");
    const struct weft_backend_iface *vi = weft_backend_find(name);
    if (!vi) SKIP_ALL("the %s backend is not built or not loadable", name);
    const char *why = NULL;
    struct weft_device_info info[4];
    const int idx = strchr(dev_spec, ':') ? atoi(strchr(dev_spec, ':') + 1) : 0;
    if (idx < 0 || idx > 3 || vi->devices(info, 4, &why) <= idx) SKIP_ALL("no device %s: %s", dev_spec, why ? why : "?");
    if (weft_backend_open(dev_spec, 0, &vk) != WEFT_OK) SKIP_ALL("cannot open %s: %s", dev_spec, weft_last_error());
    if (weft_backend_open("cpu", 2, &cpu) != WEFT_OK) {
        fprintf(stderr, "cannot open cpu: %s\n", weft_last_error());
        return 1;
    }
    /* lavapipe (Mesa's CPU Vulkan) and CPU-type OpenCL devices (PoCL) run the
     * exact forms; WEFT_VK_EXACT / WEFT_OCL_EXACT=0|1 override */
    const char *e = getenv(is_ocl ? "WEFT_OCL_EXACT" : "WEFT_VK_EXACT");
    must_be_exact = e && *e ? strcmp(e, "0") != 0
                  : is_ocl ? strstr(info[idx].name, ", CPU") != NULL : strstr(info[idx].name, "llvmpipe") != NULL;
    printf("device: %s %s (%s)\n", dev_spec, info[idx].name,
           must_be_exact ? "must equal the CPU bit for bit" : "differences printed only");
    RUN(matmuls_are_bit_exact);
    RUN(logits_are_bit_exact);
    RUN(norms_and_silu_are_bit_exact);
    RUN(rope_and_attention_are_bit_exact);
    RUN(recurrent_ops_are_bit_exact);
    weft_backend_close(vk);
    weft_backend_close(cpu);
    return check_summary();
}
