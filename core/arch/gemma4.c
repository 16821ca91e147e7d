/* gemma4: Gemma 4 (text), dense (E2B/E4B-like, 31B) and with experts (26B-A4B). As Gemma 3
 * (embeddings scaled by √E, QK-norm, norms after attention and the FFN, GeLU-gated FFN,
 * interleaved sliding and global layers, NEOX RoPE), and:
 *  - the layers have two shapes: a sliding layer's head dim, KV heads and rotated dims
 *    (key_length_swa, the head_count_kv array, rope.dimension_count_swa) differ from a global
 *    one's; the KV pool keeps them in its window group (core/kv.h);
 *  - V is RMS-normed without a weight; the attention's scale is 1;
 *  - global layers rotate "proportionally": rope_freqs holds 1 for the pairs that turn and
 *    1e30 (no rotation) for the rest; sliding layers use no factors and their own base;
 *  - the last shared_kv_layers layers have no K/V: each attends to the cache of the last
 *    earlier layer of its kind (ROPE_KV q_only), and its FFN may be wider (the
 *    feed_forward_length array);
 *  - per-layer embeddings (n_embd_per_layer = P wide, for each of the L layers):
 *      ple = (rmsnorm(x0 · Wmpᵀ / √E per P-chunk) · proj_norm + tok_ple[ids] · √P) / √2
 *    with x0 the scaled embedding; after its FFN each layer adds
 *      rmsnorm((gelu(x · Wgᵀ) * ple[l]) · Wpᵀ) · post_norm;
 *  - each layer's output times layer_output_scale;
 *  - the output's logits soft-capped (final_logit_softcapping);
 *  - with experts: beside the dense FFN (post_ffw_norm_1) a routed one (pre_ffw_norm_2 ...
 *    post_ffw_norm_2), summed before post_ffw_norm; the router reads rmsnorm(x) · scale / √E,
 *    softmax, the top k renormalised; experts are one fused gate|up tensor with GeLU, and
 *    ffn_down_exps.scale multiplies each expert's output (MOE_ROUTE expert_scale); global
 *    layers may lack attn_v (V is K's projection, before the norms).
 * The scalar factors are ADD scale (api 10), as ggml's separate scale after the ops. */
#include "core/arch/build.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The period of a sliding/global pattern whose period's last layer is the global one. */
static uint32_t pattern_period(const uint32_t *pat, uint32_t n)
{
    for (uint32_t p = 2; p <= n; p++) {
        bool ok = true;
        for (uint32_t l = 0; ok && l < n; l++) ok = (pat[l] != 0) == (l % p < p - 1);
        if (ok) return p;
    }
    return 0;
}

/* One value per layer kind from a per-layer array: every sliding layer's equal, every global
 * one's equal (skip: layers not to check, e.g. KV-shared ones). */
static weft_status per_kind(const struct weft_hparams *hp, const uint32_t *v, const char *what, uint32_t *glob,
                            uint32_t *swa)
{
    *glob = *swa = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        uint32_t *to = weft_hp_window(hp, l) ? swa : glob;
        if (!*to) *to = v[l];
        else if (*to != v[l])
            return weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.%s differs between layers of one kind (layer %u: %u, "
                              "not %u)", hp->arch, what, l, v[l], *to);
    }
    return WEFT_OK;
}

static weft_status gemma4_hparams(const struct weft_gguf *g, struct weft_hparams *hp)
{
    const uint32_t L = hp->n_layer;
    hp->rope_mode = WEFT_ROPE_NEOX;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->attn_scale = 1.0f;
    hp->rope_freq_base_swa = 10000.0f;
    uint32_t *v = calloc(L, sizeof *v);
    if (!v) return weft_error(WEFT_ERR_NOMEM, "model: out of memory");
    bool present = false;
    uint32_t hkv_g = 0, hkv_s = 0, hd_s = 0, hdv_s = 0, rot_s = 0;
    float attn_cap = 0;
    weft_status st;
    if ((st = weft_hp_opt_u32(g, hp->arch, "attention.sliding_window", &hp->n_swa)) ||
        (st = weft_hp_layer_u32(g, hp->arch, "attention.sliding_window_pattern", L, v, &present)))
        goto out;
    if (!hp->n_swa || !present) {
        st = weft_error(WEFT_ERR_FORMAT, "model: missing key '%s.attention.%s'", hp->arch,
                        hp->n_swa ? "sliding_window_pattern" : "sliding_window");
        goto out;
    }
    if (!(hp->swa_pattern = pattern_period(v, L))) {
        st = weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.attention.sliding_window_pattern is not a repeating run of "
                        "sliding layers ending in a global one", hp->arch);
        goto out;
    }
    /* the two shapes */
    if ((st = weft_hp_layer_u32(g, hp->arch, "attention.head_count_kv", L, v, &present))) goto out;
    if (present && (st = per_kind(hp, v, "attention.head_count_kv", &hkv_g, &hkv_s))) goto out;
    if (present) hp->n_head_kv = hkv_g;
    hd_s = hp->head_dim;
    if ((st = weft_hp_opt_u32(g, hp->arch, "attention.key_length_swa", &hd_s))) goto out;
    hdv_s = hd_s;
    rot_s = hd_s;
    if ((st = weft_hp_opt_u32(g, hp->arch, "attention.value_length_swa", &hdv_s)) ||
        (st = weft_hp_opt_u32(g, hp->arch, "rope.dimension_count_swa", &rot_s)) ||
        (st = weft_hp_opt_f32(g, hp->arch, "rope.freq_base_swa", &hp->rope_freq_base_swa)) ||
        (st = weft_hp_opt_u32(g, hp->arch, "attention.shared_kv_layers", &hp->n_kv_shared)) ||
        (st = weft_hp_opt_u32(g, hp->arch, "embedding_length_per_layer_input", &hp->n_embd_per_layer)) ||
        (st = weft_hp_opt_f32(g, hp->arch, "final_logit_softcapping", &hp->final_softcap)) ||
        (st = weft_hp_opt_f32(g, hp->arch, "attn_logit_softcapping", &attn_cap)))
        goto out;
    if (attn_cap != 0) {
        st = weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.attn_logit_softcapping %g is not supported", hp->arch, attn_cap);
        goto out;
    }
    if (!hkv_s) hkv_s = hp->n_head_kv;
    if (!hkv_g || !hkv_s || hp->n_head % hkv_g || hp->n_head % hkv_s || !hd_s || hd_s > 1024 || !hdv_s ||
        hdv_s > 1024 || !rot_s || rot_s > hd_s || rot_s % 2 || !(hp->rope_freq_base_swa > 0)) {
        st = weft_error(WEFT_ERR_FORMAT, "model: %s's sliding layers: %u KV heads of %u (V %u), %u rotated, base %g; "
                        "global: %u KV heads of %u (head_count %u)", hp->arch, hkv_s, hd_s, hdv_s, rot_s,
                        hp->rope_freq_base_swa, hkv_g, hp->head_dim, hp->n_head);
        goto out;
    }
    if (hkv_s != hp->n_head_kv || hd_s != hp->head_dim || hdv_s != hp->head_dim_v) {
        hp->n_head_kv_swa = hkv_s;
        hp->head_dim_swa = hd_s;
        hp->head_dim_v_swa = hdv_s;
    }
    hp->n_rot_swa = rot_s != hp->n_rot ? rot_s : 0;
    if (hp->n_kv_shared >= L) {
        st = weft_error(WEFT_ERR_FORMAT, "model: %s.attention.shared_kv_layers %u of %u layers", hp->arch,
                        hp->n_kv_shared, L);
        goto out;
    }
    for (uint32_t l = L - hp->n_kv_shared; l < L; l++)
        if (weft_hp_kv_source(hp, l) == l) {
            st = weft_error(WEFT_ERR_FORMAT, "model: %s's layer %u shares KV, but no earlier layer of its kind keeps "
                            "any", hp->arch, l);
            goto out;
        }
    /* the FFN's width: one value, or one for the KV-shared layers */
    if ((st = weft_hp_layer_u32(g, hp->arch, "feed_forward_length", L, v, &present))) goto out;
    for (uint32_t l = 0; present && l < L; l++) {
        const bool shared = weft_hp_kv_source(hp, l) != l;
        uint32_t *to = shared ? &hp->n_ff_kv_shared : &hp->n_ff;
        if (l == 0 || (shared && l == L - hp->n_kv_shared)) *to = v[l];
        if (v[l] != *to || !v[l]) {
            st = weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.feed_forward_length[%u] = %u: one width for the layers "
                            "that keep KV and one for those that share it are supported", hp->arch, l, v[l]);
            goto out;
        }
    }
    if (hp->n_ff_kv_shared == hp->n_ff) hp->n_ff_kv_shared = 0;
    if (hp->n_expert) {
        hp->expert_gate_up = true;
        hp->expert_gating = WEFT_MOE_SOFTMAX;
        hp->expert_weights_norm = true;
    }
out:
    free(v);
    return st;
}

static void gemma4_tensors(const struct weft_hparams *hp, uint32_t l, struct weft_tensor_spec *s)
{
    const uint32_t E = hp->n_embd, P = hp->n_embd_per_layer, L = hp->n_layer;
    if (l == WEFT_GLOBAL_TENSORS) {
        weft_family_global_tensors(hp, s);
        s[WEFT_T_ROPE_FREQS] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, hp->n_rot / 2, 1, 0};
        if (P) {
            s[WEFT_T_PLE_TOKEN_EMBD] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, L * P, hp->n_vocab, 0};
            s[WEFT_T_PLE_MODEL_PROJ] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, L * P, 0};
            s[WEFT_T_PLE_PROJ_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, P, 1, 0};
        }
        return;
    }
    const uint32_t H = hp->n_head, D = weft_hp_head_dim(hp, l), Dv = weft_hp_head_dim_v(hp, l);
    const uint32_t Hkv = weft_hp_n_head_kv(hp, l), F = weft_hp_n_ff(hp, l);
    s[WEFT_T_ATTN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_ATTN_Q] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, H * D, 0};
    s[WEFT_T_ATTN_Q_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, D, 1, 0};
    s[WEFT_T_ATTN_OUT] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, H * Dv, E, 0};
    s[WEFT_T_ATTN_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    if (weft_hp_kv_source(hp, l) == l) {
        s[WEFT_T_ATTN_K] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, Hkv * D, 0};
        s[WEFT_T_ATTN_K_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, D, 1, 0};
        /* absent: V is K's projection (a global layer of the 26B), same width */
        s[WEFT_T_ATTN_V] = (struct weft_tensor_spec){D == Dv ? WEFT_USE_OPTIONAL : WEFT_USE_REQUIRED, E, Hkv * Dv, 0};
    }
    s[WEFT_T_FFN_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_FFN_GATE] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, 0};
    s[WEFT_T_FFN_UP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, F, 0};
    s[WEFT_T_FFN_DOWN] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, F, E, 0};
    s[WEFT_T_FFN_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    s[WEFT_T_LAYER_OUT_SCALE] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, 1, 1, 0};
    if (P) {
        s[WEFT_T_PLE_INP_GATE] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, P, 0};
        s[WEFT_T_PLE_PROJ] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, P, E, 0};
        s[WEFT_T_PLE_POST_NORM] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
    }
    if (hp->n_expert) {
        const uint32_t X = hp->n_expert, FE = hp->n_ff_exp;
        s[WEFT_T_FFN_GATE_INP] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, X, 0};
        s[WEFT_T_FFN_GATE_INP_S] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, E, 1, 0};
        s[WEFT_T_FFN_PRE_NORM_2] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
        s[WEFT_T_FFN_POST_NORM_1] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
        s[WEFT_T_FFN_POST_NORM_2] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 1, 0};
        s[WEFT_T_FFN_GATE_UP_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, E, 2 * FE, X};
        s[WEFT_T_FFN_DOWN_EXPS] = (struct weft_tensor_spec){WEFT_USE_REQUIRED, FE, E, X};
        s[WEFT_T_FFN_DOWN_EXPS_S] = (struct weft_tensor_spec){WEFT_USE_OPTIONAL, X, 1, 0};
    }
}

/* A dense view of n rows of `cols` floats at v's start. */
static struct weft_view cols_of(struct weft_view v, int64_t cols, int64_t rows)
{
    return weft_view_2d(v.buf, v.offset, WEFT_TYPE_F32, cols, rows);
}

static void add_scaled(struct weft_build *b, struct weft_view a, struct weft_view c, struct weft_view out, float s)
{
    struct weft_op *op = weft_b_push(b, WEFT_OP_ADD);
    op->u.add = (struct weft_op_add){.a = a, .b = c, .out = out, .scale = s};
}

/* The per-layer inputs of the step's rows, before layer 0 (x: the scaled embeddings):
 * ple = (rmsnorm(x · Wmpᵀ / √E per P-chunk) · proj_norm + tok_ple[ids] · √P) / √2 */
static void ple_inputs(struct weft_build *b)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *G = b->glob->t;
    const uint32_t P = hp->n_embd_per_layer, L = hp->n_layer, R = b->n_rows;
    struct weft_op *op = weft_b_push(b, WEFT_OP_EMBED);
    op->u.embed = (struct weft_op_embed){.table = G[WEFT_T_PLE_TOKEN_EMBD], .ids = b->ids, .out = b->ple,
                                         .scale = sqrtf((float)P)};
    weft_b_matmul(b, b->x, G[WEFT_T_PLE_MODEL_PROJ], b->ple_tmp);
    /* y · (1/√E) as ggml's scale: (y + y) · (1/√E)/2 is the same product, rounded once */
    add_scaled(b, b->ple_tmp, b->ple_tmp, b->ple_tmp, 0.5f * (1.0f / sqrtf((float)hp->n_embd)));
    const struct weft_view chunks = cols_of(b->ple_tmp, P, (int64_t)R * L);
    weft_b_rmsnorm(b, chunks, G[WEFT_T_PLE_PROJ_NORM], chunks);
    add_scaled(b, b->ple_tmp, b->ple, b->ple, 1.0f / sqrtf(2.0f));
}

/* q, k, v rotated (k and v into the cache unless the layer reads another's) */
static void gemma4_rope(struct weft_build *b, uint32_t l, bool own)
{
    const struct weft_hparams *hp = b->hp;
    const bool swa = weft_hp_window(hp, l) > 0;
    if (swa) weft_b_rope_kv_at(b, l, hp->rope_freq_base_swa, 1.0f);
    else weft_b_rope_kv(b, l);
    if (b->nomem) return;
    struct weft_op_rope_kv *r = &b->ops[b->n_ops - 1].u.rope_kv;
    if (swa) r->has_freq_factors = false;  /* proportional RoPE is the global layers' */
    r->q_only = !own;
}

/* The dense FFN of layer l from x into out: gelu(xb · Wgᵀ) * (xb · Wuᵀ) · Wdᵀ, xb the FFN norm */
static void dense_ffn(struct weft_build *b, uint32_t l, struct weft_view out)
{
    const struct weft_view *w = b->w->t;
    const uint32_t F = weft_hp_n_ff(b->hp, l), R = b->n_rows;
    const struct weft_view g = cols_of(b->gate, F, R), u = cols_of(b->up, F, R), h = cols_of(b->hb, F, R);
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_NORM], b->xb);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_GATE], g);
    weft_b_matmul(b, b->xb, w[WEFT_T_FFN_UP], u);
    weft_b_glu(b, WEFT_GLU_GELU_TANH, g, u, h);
    weft_b_matmul(b, h, w[WEFT_T_FFN_DOWN], out);
}

/* The mixture layer's FFN into b->xb: rmsnorm(dense) · post_ffw_norm_1 + rmsnorm(routed) ·
 * post_ffw_norm_2 (three (R, E) scratch rows in b->ple_tmp) */
static void moe_ffn(struct weft_build *b, uint32_t l)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *w = b->w->t;
    const uint32_t E = hp->n_embd, R = b->n_rows, K = hp->n_expert_used, FE = hp->n_ff_exp;
    const size_t rowb = (size_t)R * E * sizeof(float);
    struct weft_view t1 = cols_of(b->ple_tmp, E, R), t2 = t1, xr = t1;
    t2.offset += rowb;
    xr.offset += 2 * rowb;
    dense_ffn(b, l, t1);
    weft_b_rmsnorm(b, t1, w[WEFT_T_FFN_POST_NORM_1], t1);
    /* the router: rmsnorm(x) · scale / √E (route_w), its logits, the top k */
    weft_b_rmsnorm(b, b->x, weft_b_rows(b->route_w, l, 1), xr);
    weft_b_matmul(b, xr, w[WEFT_T_FFN_GATE_INP], b->moe_logits);
    struct weft_op *op = weft_b_push(b, WEFT_OP_MOE_ROUTE);
    op->u.moe_route = (struct weft_op_moe_route){.logits = b->moe_logits, .ids = b->moe_ids, .weights = b->moe_w,
                                                 .k = K, .gating = WEFT_MOE_SOFTMAX, .norm = true,
                                                 .expert_scale = w[WEFT_T_FFN_DOWN_EXPS_S],
                                                 .has_expert_scale = w[WEFT_T_FFN_DOWN_EXPS_S].buf != NULL};
    /* the experts: rmsnorm(x) · pre_ffw_norm_2, [gate | up] per (row, slot), GeLU, down, weighted */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_FFN_PRE_NORM_2], xr);
    const struct weft_view gu = cols_of(b->gate, 2 * FE, (int64_t)R * K);
    struct weft_view g = cols_of(b->gate, FE, (int64_t)R * K), u = g;
    g.nb1 = u.nb1 = gu.nb1;
    u.offset += (size_t)FE * sizeof(float);
    const struct weft_view h = cols_of(b->hb, FE, (int64_t)R * K);
    op = weft_b_push(b, WEFT_OP_MATMUL_ID);
    op->u.matmul_id = (struct weft_op_matmul_id){.x = xr, .w = w[WEFT_T_FFN_GATE_UP_EXPS], .ids = b->moe_ids, .out = gu,
                                                 .n_expert = hp->n_expert};
    weft_b_glu(b, WEFT_GLU_GELU_TANH, g, u, h);
    op = weft_b_push(b, WEFT_OP_MATMUL_ID);
    op->u.matmul_id = (struct weft_op_matmul_id){.x = h, .w = w[WEFT_T_FFN_DOWN_EXPS], .ids = b->moe_ids, .out = t2,
                                                 .n_expert = hp->n_expert, .x_per_slot = true, .weights = b->moe_w,
                                                 .has_weights = true};
    weft_b_rmsnorm(b, t2, w[WEFT_T_FFN_POST_NORM_2], t2);
    weft_b_add(b, t1, t2, b->xb);
}

static void gemma4_layer(struct weft_build *b, uint32_t l)
{
    const struct weft_hparams *hp = b->hp;
    const struct weft_view *w = b->w->t;
    if (l == 0 && hp->n_embd_per_layer) ple_inputs(b);
    const uint32_t H = hp->n_head, D = weft_hp_head_dim(hp, l), Dv = weft_hp_head_dim_v(hp, l);
    const uint32_t Hkv = weft_hp_n_head_kv(hp, l), R = b->n_rows, P = hp->n_embd_per_layer;
    const bool own = weft_hp_kv_source(hp, l) == l;
    const float scale = b->layer_scale ? b->layer_scale[l] : 0.0f;
    /* this layer's widths */
    b->q = cols_of(b->q, (int64_t)H * D, R);
    b->k = cols_of(b->k, (int64_t)Hkv * D, R);
    b->v = cols_of(b->v, (int64_t)Hkv * Dv, R);
    b->att = cols_of(b->att, (int64_t)H * Dv, R);
    /* q = rmsnorm per head · q_norm; k likewise; v (K's projection without attn_v) normed alone */
    weft_b_rmsnorm(b, b->x, w[WEFT_T_ATTN_NORM], b->xb);
    weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_Q], b->q);
    weft_b_head_rmsnorm(b, b->q, w[WEFT_T_ATTN_Q_NORM]);
    if (own) {
        weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_K], b->k);
        if (w[WEFT_T_ATTN_V].buf) {
            weft_b_matmul(b, b->xb, w[WEFT_T_ATTN_V], b->v);
        } else {
            struct weft_op *op = weft_b_push(b, WEFT_OP_COPY);
            op->u.copy = (struct weft_op_copy){b->k.buf, b->v.buf, b->k.offset, b->v.offset,
                                               (size_t)R * Hkv * D * sizeof(float)};
        }
        weft_b_head_rmsnorm(b, b->k, w[WEFT_T_ATTN_K_NORM]);
        weft_b_head_rmsnorm(b, b->v, cols_of(b->ones, Dv, 1));
    }
    gemma4_rope(b, l, own);
    weft_b_attention_window(b, l, hp->attn_scale, weft_hp_window(hp, l));
    if (!weft_b_keep_rows(b, l)) return;
    /* x += rmsnorm(att · Woᵀ) · post_attention_norm */
    weft_b_matmul(b, b->att, w[WEFT_T_ATTN_OUT], b->xb);
    weft_b_rmsnorm(b, b->xb, w[WEFT_T_ATTN_POST_NORM], b->xb);
    weft_b_add(b, b->x, b->xb, b->x);
    /* x += rmsnorm(ffn) · post_ffw_norm */
    if (hp->n_expert) moe_ffn(b, l);
    else dense_ffn(b, l, b->xb);
    weft_b_rmsnorm(b, b->xb, w[WEFT_T_FFN_POST_NORM], b->xb);
    if (!P) {
        add_scaled(b, b->x, b->xb, b->x, scale);
        return;
    }
    weft_b_add(b, b->x, b->xb, b->x);
    /* x += rmsnorm((gelu(x · Wgᵀ) * ple[l]) · Wpᵀ) · post_norm, then the layer's scale */
    const uint32_t Rk = b->n_rows;  /* the kept rows after the last layer's attention */
    const struct weft_view g = cols_of(b->gate, P, Rk), h = cols_of(b->hb, P, Rk);
    struct weft_view in = cols_of(b->ple, P, Rk);
    in.offset += (size_t)l * P * sizeof(float);
    in.nb1 = b->ple.nb1;
    weft_b_matmul(b, b->x, w[WEFT_T_PLE_INP_GATE], g);
    weft_b_glu(b, WEFT_GLU_GELU_TANH, g, in, h);
    weft_b_matmul(b, h, w[WEFT_T_PLE_PROJ], b->xb);
    weft_b_rmsnorm(b, b->xb, w[WEFT_T_PLE_POST_NORM], b->xb);
    add_scaled(b, b->x, b->xb, b->x, scale);
}

const struct weft_family weft_family_gemma4 = {
    .arch = "gemma4",
    .hparams = gemma4_hparams,
    .tensors = gemma4_tensors,
    .layer = gemma4_layer,
    .experts = true,
    .layer_arrays = true,
};
