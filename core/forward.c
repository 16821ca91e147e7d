/* The forward pass as one fused op list per step, for any family
 * (core/arch/family.h): batch staging, the embedding, each layer's ops as
 * its family builds them (core/arch/<family>.c), over the devices of a
 * split, then for the rows sampled
 *   logits = rmsnorm(x[rows]) · output_norm · Woutᵀ
 * and for the rows asked for (n_hidden: embeddings)
 *   hidden = rmsnorm(x[rows]) · output_norm
 * read back to the host. */
#include "core/forward.h"
#include "core/model_impl.h"
#include "core/arch/build.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One device's buffers. A step's op list is a sequence of segments, each run
 * on one part's device after the segment before handed it the residual stream
 * x: with a split model the parts' layers one after another; with experts
 * placed apart (the model's xpart, the last fw part) each mixture layer's FFN
 * a segment of its own. */
struct fw_part {
    struct weft_backend *be;
    struct weft_buffer *act, *meta;
};
struct fw_seg {
    uint32_t part;
    size_t op_begin, op_end;
};

struct weft_forward {
    const struct weft_model *m;
    struct weft_kv_pool *kv;
    struct weft_backend *be;       /* the last part's: it computes the logits */
    uint32_t max_rows, max_seqs, max_blocks;
    struct fw_part parts[WEFT_MAX_PARTS + 1];
    uint32_t n_parts, cur;         /* cur: the part ops are being added for */
    uint32_t xpart;                /* the experts' part (n_parts - 1) when placed apart, else UINT32_MAX */
    struct fw_seg *segs;
    uint32_t n_segs, cap_segs, cur_layer;
    uint32_t cur_nseq, cur_btn;    /* the step's batch shape, for begin_seg */
    struct weft_buffer *act, *logits_buf;   /* act: the current part's */
    float *x_host;                 /* the residual stream crossing devices */
    size_t off_x, off_xb, off_q, off_k, off_v, off_att, off_gate, off_up, off_hb;
    size_t off_moe_logits, off_moe_ids, off_moe_w;  /* a mixture's router (0 size without experts) */
    size_t off_mla_iota, off_mla_eye;  /* MLA's constants (written once): ids 0..H-1 per row, I(n_rot) */
    size_t off_ssm_qkv, off_ssm_conv, off_ssm_z, off_ssm_o, off_ssm_beta, off_ssm_alpha, off_qgate;  /* hybrids */
    size_t off_sslot;              /* meta: each row's recurrent state slot */
    size_t off_ple, off_ple_tmp, off_ones, off_route_w;  /* Gemma 4 (0 size elsewhere) */
    uint32_t n_ones;
    size_t n_ple_tmp;              /* its width */
    float *layer_scale;            /* each layer's output scale (NULL: none) */
    size_t off_ids, off_pos, off_seq, off_slot, off_btoff, off_bt, off_rows;
    size_t off_wslot, off_wbt;     /* the window group's slots and block tables (same bt_off) */
    int32_t *meta_host;            /* staging copy of the meta buffer */
    size_t meta_bytes;
    float *logits_host;
    /* the rows that go through the last layer's FFN (kept; ascending), and
     * hidden states: n_keep rows after the final norm, each seq's from
     * hid_at[s] (UINT32_MAX: none) */
    uint32_t *keep, *hid_at;
    float *hidden_host;
    bool hidden_ok;                /* hidden_host holds the last step's, of n_seq_last seqs */
    uint32_t n_seq_last;
    struct weft_build b;           /* the op list, built by the model's family */
    bool plan_only;                /* build the op list and check it is supported; run nothing */
};

_Static_assert(WEFT_MAX_PARTS <= WEFT_KV_MAX_PARTS, "a KV pool holds as many parts as a model");

void weft_forward_kv_parts(const struct weft_model *m, struct weft_kv_config *kc)
{
    kc->n_layer = m->hp.n_layer;
    if (m->hp.n_kv_shared) kc->kv_source = m->kv_source;
    if (m->hp.head_dim_swa || m->hp.n_head_kv_swa) {  /* the sliding layers' own shape */
        kc->window_n_kv_head = m->hp.n_head_kv_swa;
        kc->window_head_dim = m->hp.head_dim_swa;
        kc->window_head_dim_v = m->hp.head_dim_v_swa;
    }
    if (m->hp.full_attn_interval) {
        kc->state_layer = m->recurrent;
        kc->state_layer_bytes = weft_hp_state_layer_bytes(&m->hp);
        if (!kc->n_state_slots) kc->n_state_slots = 1;
    }
    kc->n_parts = m->n_parts > 1 ? m->n_parts : 0;
    for (uint32_t p = 0; p < m->n_parts && m->n_parts > 1; p++) {
        kc->part_be[p] = m->parts[p].be;
        kc->part_layers[p] = m->parts[p].n_layer;
    }
}

static size_t take(size_t *cursor, size_t bytes)
{
    size_t off = *cursor;
    *cursor += (bytes + 255) & ~(size_t)255;
    return off;
}

/* MLA's constants in an activation buffer, written once (no op writes there): the head
 * index of every (row, head) slot, MATMUL_ID's ids for the per-head matrices, and the
 * n_rot x n_rot identity whose MATMUL moves the roped parts of Q and K into place */
static weft_status mla_constants(struct weft_forward *fw, struct weft_buffer *act)
{
    const struct weft_hparams *hp = &fw->m->hp;
    const size_t n_ids = (size_t)fw->max_rows * hp->n_head, n_eye = (size_t)hp->n_rot * hp->n_rot;
    int32_t *ids = malloc(n_ids * sizeof *ids);
    float *eye = calloc(n_eye, sizeof *eye);
    weft_status st = WEFT_OK;
    if (!ids || !eye) st = weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
    for (size_t i = 0; st == WEFT_OK && i < n_ids; i++) ids[i] = (int32_t)(i % hp->n_head);
    for (uint32_t i = 0; st == WEFT_OK && i < hp->n_rot; i++) eye[(size_t)i * hp->n_rot + i] = 1.0f;
    const struct weft_backend_iface *ai = NULL;
    for (uint32_t p = 0; p < fw->n_parts; p++)
        if (fw->parts[p].act == act) ai = fw->parts[p].be->iface;
    if (st == WEFT_OK && ai) st = ai->buffer_write(act, fw->off_mla_iota, ids, n_ids * sizeof *ids);
    if (st == WEFT_OK && ai) st = ai->buffer_write(act, fw->off_mla_eye, eye, n_eye * sizeof *eye);
    free(ids);
    free(eye);
    return st;
}

/* An F32 vector of the model's file on the host (a layer's, l < n_layer), NULL if absent. */
static const float *file_f32(const struct weft_model *m, enum weft_tensor_id id, uint32_t l, int64_t n)
{
    char name[96];
    weft_tensor_name(id, l, name, sizeof name);
    int64_t i = weft_gguf_find_tensor(m->gguf, name);
    if (i < 0) return NULL;
    const struct weft_gguf_tensor *t = weft_gguf_tensor(m->gguf, i);
    return t->type == WEFT_TYPE_F32 && t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] == n ? (const float *)t->data : NULL;
}

/* Gemma 4's constants in an activation buffer (written once): ones (a weightless RMS norm's
 * weight) and each layer's router input scale over sqrt(n_embd); and the layers' output
 * scales on the host */
static weft_status gemma4_constants(struct weft_forward *fw, struct weft_buffer *act, const struct weft_backend_iface *ai)
{
    const struct weft_model *m = fw->m;
    const struct weft_hparams *hp = &m->hp;
    const size_t n_ones = (size_t)fw->n_ones, E = hp->n_embd, L = hp->n_layer;
    float *ones = malloc(n_ones * sizeof *ones), *rw = fw->off_route_w ? calloc(E * L, sizeof *rw) : NULL;
    weft_status st = WEFT_OK;
    if (!ones || (fw->off_route_w && !rw)) st = weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
    for (size_t i = 0; st == WEFT_OK && i < n_ones; i++) ones[i] = 1.0f;
    for (uint32_t l = 0; st == WEFT_OK && rw && l < L; l++) {
        const float *sc = file_f32(m, WEFT_T_FFN_GATE_INP_S, l, (int64_t)E);
        for (size_t k = 0; k < E; k++) rw[l * E + k] = sc ? sc[k] / sqrtf((float)E) : 1.0f / sqrtf((float)E);
    }
    if (st == WEFT_OK) st = ai->buffer_write(act, fw->off_ones, ones, n_ones * sizeof *ones);
    if (st == WEFT_OK && rw) st = ai->buffer_write(act, fw->off_route_w, rw, E * L * sizeof *rw);
    free(ones);
    free(rw);
    return st;
}

weft_status weft_forward_init(const struct weft_model *m, struct weft_kv_pool *kv, uint32_t max_rows,
                              uint32_t max_seqs, uint32_t max_blocks, struct weft_forward **out)
{
    *out = NULL;
    if (!max_rows || !max_seqs || !max_blocks || max_seqs > max_rows)
        return weft_error(WEFT_ERR_INVALID_ARG, "forward: bad limits rows %u seqs %u blocks %u", max_rows, max_seqs, max_blocks);
    struct weft_forward *fw = calloc(1, sizeof *fw);
    if (!fw) return weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
    const struct weft_hparams *hp = &m->hp;
    fw->m = m; fw->kv = kv;
    fw->n_parts = m->n_parts + (m->has_xpart ? 1 : 0);
    fw->xpart = m->has_xpart ? m->n_parts : UINT32_MAX;
    fw->be = m->parts[m->n_parts - 1].be;
    fw->cap_segs = 2 * hp->n_layer + 4;
    fw->segs = calloc(fw->cap_segs, sizeof *fw->segs);
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        if ((m->recurrent[l] ? weft_kv_state_view(kv, l).buf : weft_kv_layer_view(kv, l).buf) == NULL ||
            kv->n_layer != m->hp.n_layer) {
            free(fw);
            return weft_error(WEFT_ERR_INVALID_ARG, "forward: the KV pool does not hold the model's %u layers%s",
                              m->hp.n_layer, m->hp.full_attn_interval ? " and their recurrent state" : "");
        }
    fw->max_rows = max_rows; fw->max_seqs = max_seqs; fw->max_blocks = max_blocks;
    /* LongRoPE: the long factors for a model whose context passes the
     * original one (llama.cpp's choice at its default context, the model's
     * own). A property of the model, not of this instance's -c: instances
     * that share KV (Redis, prefill/decode) must rotate alike, and they
     * compare only the model's fingerprint. */
    fw->b.rope_long = hp->rope_n_ctx_orig && hp->n_ctx_train > hp->rope_n_ctx_orig;
    size_t R = max_rows, f = sizeof(float);
    /* the widest layer's (Gemma 4's sliding and global layers differ) */
    size_t hd = hp->head_dim, hdv = hp->head_dim_v, ek = (size_t)hp->head_dim * hp->n_head_kv,
           ev = (size_t)hp->head_dim_v * hp->n_head_kv;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const size_t lk = (size_t)weft_hp_head_dim(hp, l), lv = weft_hp_head_dim_v(hp, l), nk = weft_hp_n_head_kv(hp, l);
        hd = lk > hd ? lk : hd;
        hdv = lv > hdv ? lv : hdv;
        ek = lk * nk > ek ? lk * nk : ek;
        ev = lv * nk > ev ? lv * nk : ev;
    }
    size_t c = 0;
    fw->off_x = take(&c, R * hp->n_embd * f);
    fw->off_xb = take(&c, R * hp->n_embd * f);
    fw->off_q = take(&c, R * hp->n_head * hd * f);
    fw->off_k = take(&c, R * ek * f);
    fw->off_v = take(&c, R * ev * f);
    fw->off_att = take(&c, R * hp->n_head * hdv * f);
    /* gate, up, hb: a row per (row, chosen expert) in a mixture; MLA's full-width Q and its
     * heads' V up-projections, its latent kv_a and q_a */
    size_t ff = hp->n_ff > (size_t)hp->n_expert_used * hp->n_ff_exp ? hp->n_ff : (size_t)hp->n_expert_used * hp->n_ff_exp;
    const size_t mla[] = {(size_t)hp->n_head * hp->mla_qk, (size_t)hp->n_head * hp->mla_v,
                          (size_t)hp->kv_lora_rank + hp->n_rot, hp->q_lora_rank,
                          (size_t)hp->n_expert_shared * hp->n_ff_exp};
    for (size_t i = 0; hp->kv_latent && i < sizeof mla / sizeof mla[0]; i++) ff = mla[i] > ff ? mla[i] : ff;
    if (hp->n_ff_shexp > ff) ff = hp->n_ff_shexp;  /* a gated shared expert's rows */
    if (hp->n_ff_kv_shared > ff) ff = hp->n_ff_kv_shared;
    if (hp->expert_gate_up && 2 * (size_t)hp->n_expert_used * hp->n_ff_exp > ff)
        ff = 2 * (size_t)hp->n_expert_used * hp->n_ff_exp;  /* fused gate|up rows */
    fw->off_gate = take(&c, R * ff * f);
    fw->off_up = take(&c, R * ff * f);
    fw->off_hb = take(&c, R * ff * f);
    fw->off_moe_logits = take(&c, R * hp->n_expert * f);
    fw->off_moe_ids = take(&c, R * hp->n_expert_used * sizeof(int32_t));
    fw->off_moe_w = take(&c, R * hp->n_expert_used * f);
    fw->off_mla_iota = take(&c, hp->kv_latent ? R * hp->n_head * sizeof(int32_t) : 0);
    fw->off_mla_eye = take(&c, hp->kv_latent ? (size_t)hp->n_rot * hp->n_rot * f : 0);
    {
        /* a hybrid's recurrent layers: qkv and its conv, z and o, beta and alpha; the attention
         * layers' q with its gates */
        const bool hy = hp->full_attn_interval != 0;
        const size_t C = hy ? weft_hp_ssm_channels(hp) : 0, V = hy ? hp->ssm_inner : 0, Hv = hy ? hp->ssm_dt_rank : 0;
        fw->off_ssm_qkv = take(&c, R * C * f);
        fw->off_ssm_conv = take(&c, R * C * f);
        fw->off_ssm_z = take(&c, R * V * f);
        fw->off_ssm_o = take(&c, R * V * f);
        fw->off_ssm_beta = take(&c, R * Hv * f);
        fw->off_ssm_alpha = take(&c, R * Hv * f);
        fw->off_qgate = take(&c, hy ? R * 2 * hp->n_head * hp->head_dim * f : 0);
    }
    {
        /* Gemma 4: per-layer inputs, a scratch as wide; ones; the routers' input scales */
        const size_t PL = (size_t)hp->n_layer * hp->n_embd_per_layer;
        const bool g4 = hp->n_embd_per_layer || hp->head_dim_swa || hp->expert_gate_up;
        fw->off_ple = take(&c, R * PL * f);
        /* also the mixture layers' three (R, E) scratch rows */
        const size_t tmpw = hp->expert_gate_up && 3 * (size_t)hp->n_embd > PL ? 3 * (size_t)hp->n_embd : PL;
        fw->n_ple_tmp = tmpw;
        fw->off_ple_tmp = take(&c, R * tmpw * f);
        fw->n_ones = g4 ? (uint32_t)(hd > hdv ? hd : hdv) : 0;
        if (fw->n_ones < hp->n_embd && g4) fw->n_ones = hp->n_embd;
        fw->off_ones = take(&c, (size_t)fw->n_ones * f);
        fw->off_route_w = hp->expert_gate_up ? take(&c, (size_t)hp->n_layer * hp->n_embd * f) : 0;
        if (g4 && !(fw->layer_scale = malloc(hp->n_layer * sizeof *fw->layer_scale))) {
            free(fw->segs);
            free(fw);
            return weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
        }
        for (uint32_t l = 0; g4 && l < hp->n_layer; l++) {
            const float *sc = file_f32(m, WEFT_T_LAYER_OUT_SCALE, l, 1);
            fw->layer_scale[l] = sc ? sc[0] : 0.0f;
            if (sc && !(sc[0] != 0.0f && isfinite(sc[0]))) {  /* 0 is ADD's "no scale" */
                free(fw->layer_scale);
                free(fw->segs);
                free(fw);
                return weft_error(WEFT_ERR_FORMAT, "forward: blk.%u.layer_output_scale %g is not a scale", l, sc[0]);
            }
        }
        if (hp->n_embd_per_layer && fw->n_parts > 1) {
            free(fw->layer_scale);
            free(fw->segs);
            free(fw);
            return weft_error(WEFT_ERR_UNSUPPORTED, "forward: %s's per-layer embeddings run on one device: layers "
                              "split over devices (or experts placed apart) are not supported for it", hp->arch);
        }
    }
    size_t act_bytes = c;
    weft_status st;
    /* meta: int32 arrays, laid out back to back (offsets in bytes) */
    size_t mc = 0, i4 = sizeof(int32_t);
    fw->off_ids = take(&mc, R * i4);
    fw->off_pos = take(&mc, R * i4);
    fw->off_seq = take(&mc, R * i4);
    fw->off_slot = take(&mc, R * i4);
    fw->off_btoff = take(&mc, max_seqs * i4);
    fw->off_bt = take(&mc, (size_t)max_seqs * max_blocks * i4);
    fw->off_rows = take(&mc, max_seqs * i4);
    fw->off_sslot = take(&mc, hp->full_attn_interval ? R * i4 : 0);
    if (weft_kv_has_window(kv)) {
        fw->off_wslot = take(&mc, R * i4);
        fw->off_wbt = take(&mc, (size_t)max_seqs * max_blocks * i4);
    }
    fw->meta_bytes = mc;
    fw->meta_host = calloc(1, mc);
    fw->logits_host = malloc((size_t)max_seqs * hp->n_vocab * f);
    fw->keep = malloc(R * sizeof *fw->keep);
    fw->hid_at = malloc(max_seqs * sizeof *fw->hid_at);
    fw->hidden_host = malloc(R * hp->n_embd * f);
    /* a first guess of the ops a step takes (the list grows if a family
     * needs more): per layer 16; the packing copies (two per run piece, at
     * most one piece per kept row); the final norm and LOGITS */
    fw->b.cap_ops = 16 * (size_t)hp->n_layer + 8 + 2 * R;
    fw->b.ops = calloc(fw->b.cap_ops, sizeof *fw->b.ops);
    if (!fw->meta_host || !fw->logits_host || !fw->keep || !fw->hid_at || !fw->hidden_host || !fw->b.ops) {
        st = weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
        goto err;
    }
    if (!fw->segs || (fw->n_parts > 1 && !(fw->x_host = malloc(R * hp->n_embd * f)))) {
        st = weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
        goto err;
    }
    for (uint32_t p = 0; p < fw->n_parts; p++) {
        struct fw_part *fp = &fw->parts[p];
        fp->be = p == fw->xpart ? m->xpart.be : m->parts[p].be;
        const struct weft_backend_iface *bi = fp->be->iface;
        if ((st = bi->buffer_alloc(fp->be, act_bytes, &fp->act)) != WEFT_OK) goto err;
        if ((st = bi->buffer_alloc(fp->be, mc, &fp->meta)) != WEFT_OK) goto err;
        if (hp->kv_latent && (st = mla_constants(fw, fp->act)) != WEFT_OK) goto err;
        if (fw->n_ones && (st = gemma4_constants(fw, fp->act, bi)) != WEFT_OK) goto err;
    }
    st = fw->be->iface->buffer_alloc(fw->be, (size_t)max_seqs * hp->n_vocab * f, &fw->logits_buf);
    if (st != WEFT_OK) goto err;
    /* Every op the family builds must run on its device: refused here,
     * naming the op and field, never on the first step. The largest step
     * (one sampled row, the others hidden: every kind of op a step can
     * hold), planned and checked, not run. */
    {
        uint64_t most = (uint64_t)max_blocks * WEFT_KV_BLOCK_TOKENS;
        uint32_t n = max_rows < most ? max_rows : (uint32_t)most;
        uint32_t nb = (n + WEFT_KV_BLOCK_TOKENS - 1) / WEFT_KV_BLOCK_TOKENS;
        int32_t *toks = calloc(n, sizeof *toks), *blocks = calloc(nb, sizeof *blocks);
        if (!toks || !blocks) {
            free(toks);
            free(blocks);
            st = weft_error(WEFT_ERR_NOMEM, "forward: out of memory");
            goto err;
        }
        /* the largest step: every row, the last sampled, the rest hidden */
        struct weft_kv_seq ks = {.blocks = blocks, .n_blocks = nb, .cap = nb};
        struct weft_fwd_seq probe = {toks, n, 0, &ks, true, n > 1 ? n - 1 : 0};
        const float *lg;
        uint32_t n_lg;
        fw->plan_only = true;
        st = weft_forward_step(fw, &probe, 1, &lg, &n_lg);
        fw->plan_only = false;
        fw->b.n_ops = 0;
        free(toks);
        free(blocks);
        if (st != WEFT_OK) goto err;
    }
    *out = fw;
    return WEFT_OK;
err:
    weft_forward_free(fw);
    return st;
}

void weft_forward_free(struct weft_forward *fw)
{
    if (!fw) return;
    for (uint32_t p = 0; p < fw->n_parts; p++) {
        const struct weft_backend_iface *bi = fw->parts[p].be ? fw->parts[p].be->iface : NULL;
        if (fw->parts[p].act) bi->buffer_free(fw->parts[p].act);
        if (fw->parts[p].meta) bi->buffer_free(fw->parts[p].meta);
    }
    if (fw->logits_buf) fw->be->iface->buffer_free(fw->logits_buf);
    free(fw->x_host);
    free(fw->segs);
    free(fw->meta_host);
    free(fw->logits_host);
    free(fw->keep);
    free(fw->hid_at);
    free(fw->hidden_host);
    free(fw->layer_scale);
    free(fw->b.ops);
    free(fw);
}

static struct weft_view act(struct weft_forward *fw, size_t off, int64_t cols, uint32_t rows)
{
    return weft_view_2d(fw->act, off, WEFT_TYPE_F32, cols, rows);
}

static struct weft_view meta(struct weft_forward *fw, size_t off, uint32_t n)
{
    return weft_view_2d(fw->parts[fw->cur].meta, off, WEFT_TYPE_I32, n, 1);
}

/* The step's activation views on part p's buffers, R rows each. */
static void set_views(struct weft_forward *fw, uint32_t R)
{
    const struct weft_hparams *hp = &fw->m->hp;
    struct weft_build *b = &fw->b;
    uint32_t E = hp->n_embd, F = hp->n_ff;
    uint32_t Q = hp->n_head * hp->head_dim, K = hp->n_head_kv * hp->head_dim, V = hp->n_head_kv * hp->head_dim_v;
    b->x = act(fw, fw->off_x, E, R); b->xb = act(fw, fw->off_xb, E, R);
    b->q = act(fw, fw->off_q, Q, R); b->k = act(fw, fw->off_k, K, R); b->v = act(fw, fw->off_v, V, R);
    b->att = act(fw, fw->off_att, hp->n_head * hp->head_dim_v, R);
    b->gate = act(fw, fw->off_gate, F, R); b->up = act(fw, fw->off_up, F, R); b->hb = act(fw, fw->off_hb, F, R);
    if (hp->kv_latent) {
        b->mla_ids = weft_view_2d(fw->act, fw->off_mla_iota, WEFT_TYPE_I32, hp->n_head, R);
        b->mla_eye = act(fw, fw->off_mla_eye, hp->n_rot, hp->n_rot);
    }
    if (hp->full_attn_interval) {
        const uint32_t C = (uint32_t)weft_hp_ssm_channels(hp), V = hp->ssm_inner, Hv = hp->ssm_dt_rank;
        b->ssm_qkv = act(fw, fw->off_ssm_qkv, C, R);
        b->ssm_conv = act(fw, fw->off_ssm_conv, C, R);
        b->ssm_z = act(fw, fw->off_ssm_z, V, R);
        b->ssm_o = act(fw, fw->off_ssm_o, V, R);
        b->ssm_beta = act(fw, fw->off_ssm_beta, Hv, R);
        b->ssm_alpha = act(fw, fw->off_ssm_alpha, Hv, R);
        b->qgate = act(fw, fw->off_qgate, 2 * hp->n_head * hp->head_dim, R);
        b->state_slots = meta(fw, fw->off_sslot, R);
    }
    b->ids = meta(fw, fw->off_ids, R);
    b->glob = &fw->m->glob;
    b->layer_scale = fw->layer_scale;
    if (hp->n_embd_per_layer) {
        b->ple = act(fw, fw->off_ple, (int64_t)hp->n_layer * hp->n_embd_per_layer, R);
    }
    if (fw->n_ple_tmp) b->ple_tmp = act(fw, fw->off_ple_tmp, (int64_t)fw->n_ple_tmp, R);
    if (fw->n_ones) b->ones = act(fw, fw->off_ones, fw->n_ones, 1);
    if (fw->off_route_w) b->route_w = act(fw, fw->off_route_w, hp->n_embd, hp->n_layer);
    if (hp->n_expert) {
        b->moe_logits = act(fw, fw->off_moe_logits, hp->n_expert, R);
        b->moe_ids = weft_view_2d(fw->act, fw->off_moe_ids, WEFT_TYPE_I32, hp->n_expert_used, R);
        b->moe_w = act(fw, fw->off_moe_w, hp->n_expert_used, R);
    }
    b->n_rows = R;
}

/* Start a segment of ops on part p (closing the one before): the same views, on its
 * buffers, of the step's current rows (fewer after the last layer kept some) */
static void begin_seg(struct weft_forward *fw, uint32_t p)
{
    struct weft_build *b = &fw->b;
    if (fw->n_segs) fw->segs[fw->n_segs - 1].op_end = b->n_ops;
    if (fw->n_segs == fw->cap_segs) {
        /* cannot happen: at most two segments a layer and one a part; the last one grows */
        fw->n_segs--;
    }
    fw->segs[fw->n_segs++] = (struct fw_seg){p, b->n_ops, b->n_ops};
    fw->cur = p;
    fw->act = fw->parts[p].act;
    const uint32_t R = b->n_rows, n_seq = fw->cur_nseq, bt_n = fw->cur_btn;
    set_views(fw, R);
    struct weft_batch_view *bv = &fw->b.batch;
    bv->pos = meta(fw, fw->off_pos, R); bv->seq = meta(fw, fw->off_seq, R);
    bv->slot = meta(fw, fw->off_slot, R); bv->bt_off = meta(fw, fw->off_btoff, n_seq);
    bv->bt = meta(fw, fw->off_bt, bt_n);
    fw->b.batch_w = *bv;
    if (weft_kv_has_window(fw->kv)) {
        fw->b.batch_w.slot = meta(fw, fw->off_wslot, R);
        fw->b.batch_w.bt = meta(fw, fw->off_wbt, bt_n);
    }
}

/* The build's hooks around a mixture layer's FFN when the experts are placed apart: its
 * ops go to the experts' part with that part's views of the layer's tensors */
static void experts_begin(struct weft_build *b)
{
    struct weft_forward *fw = b->owner;
    begin_seg(fw, fw->xpart);
    b->w = &fw->m->xlayers[fw->cur_layer];
}

static void experts_end(struct weft_build *b)
{
    struct weft_forward *fw = b->owner;
    begin_seg(fw, fw->m->layer_part[fw->cur_layer]);
    b->w = &fw->m->layers[fw->cur_layer];
}

/* Sequence sq's window-group block table at wbt and its rows' slots at
 * wslot: the window blocks of the blocks it holds them for; the entries
 * before wfirst (fallen out of every row's window, never read) repeat the
 * first held one. */
static weft_status stage_window(struct weft_forward *fw, const struct weft_fwd_seq *sq, uint32_t s, int32_t *wbt,
                                int32_t *wslot)
{
    const struct weft_kv_pool *kv = fw->kv;
    const struct weft_kv_seq *ks = sq->kv;
    uint32_t need = sq->pos0 + 1 > kv->window ? (sq->pos0 + 1 - kv->window) / WEFT_KV_BLOCK_TOKENS : 0;
    if (ks->wfirst > need && !fw->plan_only)
        return weft_error(WEFT_ERR_INVALID_ARG, "forward: sequence %u dropped the window blocks position %u needs", s,
                          sq->pos0);
    int32_t fill = 0;
    for (uint32_t i = ks->wfirst; i < ks->n_blocks; i++) {
        int32_t w = weft_kv_window_block(kv, ks->blocks[i]);
        if (w < 0 && !fw->plan_only)
            return weft_error(WEFT_ERR_INVALID_ARG, "forward: sequence %u holds no window block for block %u", s, i);
        wbt[i] = w < 0 ? 0 : w;
        if (i == ks->wfirst) fill = wbt[i];
    }
    for (uint32_t i = 0; i < ks->wfirst && i < ks->n_blocks; i++) wbt[i] = fill;
    for (uint32_t i = 0; i < sq->n_tokens; i++) {
        uint32_t p = sq->pos0 + i;
        wslot[i] = wbt[p / WEFT_KV_BLOCK_TOKENS] * WEFT_KV_BLOCK_TOKENS + (int32_t)(p % WEFT_KV_BLOCK_TOKENS);
    }
    return WEFT_OK;
}

/* The fields of op beyond its plain form, for a refusal: " with bias". */
static void op_fields(const struct weft_op *op, char *out, size_t cap)
{
    out[0] = 0;
    switch (op->kind) {
    case WEFT_OP_MATMUL:
        if (op->u.matmul.has_bias) snprintf(out, cap, " with bias");
        break;
    case WEFT_OP_SILU_MUL:
        if (op->u.silu_mul.act == WEFT_GLU_GELU_TANH) snprintf(out, cap, " with activation gelu_tanh");
        break;
    case WEFT_OP_EMBED:
        if (op->u.embed.scale != 0) snprintf(out, cap, " with scale %g", op->u.embed.scale);
        break;
    case WEFT_OP_ATTENTION:
        if (op->u.attention.softcap != 0) snprintf(out, cap, " with a soft-cap of %g", op->u.attention.softcap);
        else if (op->u.attention.window) snprintf(out, cap, " with a sliding window of %u", op->u.attention.window);
        break;
    case WEFT_OP_SSM_CONV:
    case WEFT_OP_DELTA_NET:
        snprintf(out, cap, " (a recurrent layer's op, over its state slots)");
        break;
    case WEFT_OP_LOGITS:
        if (op->u.logits.softcap != 0) snprintf(out, cap, " with a soft-cap of %g", op->u.logits.softcap);
        break;
    default:
        break;
    }
    if (!out[0]) snprintf(out, cap, " (%s)", "its types or shapes");
}

weft_status weft_forward_step(struct weft_forward *fw, const struct weft_fwd_seq *seqs, uint32_t n_seq,
                              const float **logits, uint32_t *n_logits)
{
    const struct weft_model *m = fw->m;
    const struct weft_hparams *hp = &m->hp;
    *logits = NULL;
    *n_logits = 0;
    fw->hidden_ok = false;
    if (n_seq == 0 || n_seq > fw->max_seqs)
        return weft_error(WEFT_ERR_INVALID_ARG, "forward: %u sequences (1..%u allowed)", n_seq, fw->max_seqs);

    /* Stage the batch metadata: ids, pos, seq, slot per row; block tables. */
    int32_t *mh = fw->meta_host;
    int32_t *ids = mh + fw->off_ids / 4, *pos = mh + fw->off_pos / 4, *seq = mh + fw->off_seq / 4;
    int32_t *slot = mh + fw->off_slot / 4, *btoff = mh + fw->off_btoff / 4, *bt = mh + fw->off_bt / 4;
    int32_t *rows = mh + fw->off_rows / 4, *sslot = mh + fw->off_sslot / 4;
    const bool state = weft_kv_has_state(fw->kv);
    bool win = weft_kv_has_window(fw->kv);
    int32_t *wslot = mh + fw->off_wslot / 4, *wbt = mh + fw->off_wbt / 4;
    uint32_t R = 0, n_out = 0, bt_n = 0, n_keep = 0, n_hid = 0;
    for (uint32_t s = 0; s < n_seq; s++) {
        const struct weft_fwd_seq *sq = &seqs[s];
        uint32_t end = sq->pos0 + sq->n_tokens;
        if (sq->n_tokens == 0 || R + sq->n_tokens > fw->max_rows)
            return weft_error(WEFT_ERR_INVALID_ARG, "forward: batch needs %u rows, limit %u", R + sq->n_tokens, fw->max_rows);
        if (sq->n_hidden > sq->n_tokens)
            return weft_error(WEFT_ERR_INVALID_ARG, "forward: sequence %u asks for %u hidden rows of %u", s,
                              sq->n_hidden, sq->n_tokens);
        if ((uint64_t)sq->kv->n_blocks * WEFT_KV_BLOCK_TOKENS < end || sq->kv->n_blocks > fw->max_blocks)
            return weft_error(WEFT_ERR_INVALID_ARG, "forward: sequence %u's block table does not cover position %u", s, end - 1);
        btoff[s] = (int32_t)bt_n;
        memcpy(bt + bt_n, sq->kv->blocks, sizeof(int32_t) * sq->kv->n_blocks);
        weft_status wst = win ? stage_window(fw, sq, s, wbt + bt_n, wslot + R) : WEFT_OK;
        if (wst != WEFT_OK) return wst;
        if (state && !sq->kv->state && !fw->plan_only)
            return weft_error(WEFT_ERR_INVALID_ARG, "forward: sequence %u holds no recurrent state slot", s);
        for (uint32_t i = 0; state && i < sq->n_tokens; i++) sslot[R + i] = sq->kv->state ? sq->kv->state - 1 : 0;
        bt_n += sq->kv->n_blocks;
        for (uint32_t i = 0; i < sq->n_tokens; i++, R++) {
            int32_t id = sq->tokens[i];
            if (id < 0 || (uint32_t)id >= hp->n_vocab)
                return weft_error(WEFT_ERR_INVALID_ARG, "forward: token id %d outside vocabulary of %u", id, hp->n_vocab);
            uint32_t p = sq->pos0 + i;
            ids[R] = id;
            pos[R] = (int32_t)p;
            seq[R] = (int32_t)s;
            slot[R] = sq->kv->blocks[p / WEFT_KV_BLOCK_TOKENS] * WEFT_KV_BLOCK_TOKENS + (int32_t)(p % WEFT_KV_BLOCK_TOKENS);
        }
        /* the rows the last layer finishes: the hidden ones, else the sampled
         * one; rows[] (LOGITS) indexes them in that packed order */
        uint32_t first = sq->n_hidden ? R - sq->n_hidden : sq->want_logits ? R - 1 : R;
        fw->hid_at[s] = sq->n_hidden ? n_keep : UINT32_MAX;
        n_hid += sq->n_hidden;
        for (uint32_t r = first; r < R; r++) fw->keep[n_keep++] = r;
        if (sq->want_logits) rows[n_out++] = (int32_t)(n_keep - 1);
    }

    uint32_t E = hp->n_embd;
    struct weft_build *b = &fw->b;
    b->hp = hp;
    b->kv = fw->kv;
    b->n_ops = 0;
    b->nomem = false;
    b->keep = fw->keep;
    b->n_keep = n_keep;
    b->last_layer = hp->n_layer - 1;
    b->batch = (struct weft_batch_view){.n_rows = R, .n_seq = n_seq};
    b->n_rows = R;
    b->owner = fw;
    b->experts_begin = fw->xpart != UINT32_MAX ? experts_begin : NULL;
    b->experts_end = fw->xpart != UINT32_MAX ? experts_end : NULL;
    fw->n_segs = 0;
    fw->cur_nseq = n_seq;
    fw->cur_btn = bt_n;
    begin_seg(fw, 0);

    struct weft_op *op = weft_b_push(b, WEFT_OP_EMBED);
    op->u.embed = (struct weft_op_embed){.table = m->glob.t[WEFT_T_TOKEN_EMBD], .ids = meta(fw, fw->off_ids, R),
                                         .out = b->x, .scale = hp->embd_scale};
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (m->layer_part[l] != fw->cur) begin_seg(fw, m->layer_part[l]);  /* a new device */
        fw->cur_layer = l;
        b->w = &m->layers[l];
        hp->family->layer(b, l);
        if (l == b->last_layer && n_keep == 0) break;  /* a prefill chunk that samples nothing */
    }
    if (n_hid) {
        /* the final norm alone, over the kept rows, for the hidden states */
        weft_b_rmsnorm(b, b->x, m->glob.t[WEFT_T_OUTPUT_NORM], b->xb);
    }
    if (n_out) {
        op = weft_b_push(b, WEFT_OP_LOGITS);
        op->u.logits = (struct weft_op_logits){
            .x = b->x, .rows = meta(fw, fw->off_rows, n_out), .norm_w = m->glob.t[WEFT_T_OUTPUT_NORM],
            .w = m->glob.t[WEFT_T_OUTPUT],
            .out = weft_view_2d(fw->logits_buf, 0, WEFT_TYPE_F32, hp->n_vocab, n_out), .eps = hp->rms_eps,
            .softcap = hp->final_softcap};
    }
    if (b->nomem) return weft_error(WEFT_ERR_NOMEM, "forward: out of memory for the op list");
    fw->segs[fw->n_segs - 1].op_end = b->n_ops;
    const uint32_t last = fw->cur;   /* the part of the last segment: the final norm's */
    weft_status st;
    uint64_t meta_done = 0;          /* parts whose meta buffer holds this step's */
    for (uint32_t si = 0; si < fw->n_segs; si++) {
        const struct fw_seg *sg = &fw->segs[si];
        struct fw_part *fp = &fw->parts[sg->part];
        const struct weft_backend_iface *bi = fp->be->iface;
        if (si > 0 && fw->segs[si - 1].part != sg->part && !fw->plan_only) {
            /* hand the residual stream over: previous device -> host -> this one */
            struct fw_part *prev = &fw->parts[fw->segs[si - 1].part];
            size_t xb_bytes = (size_t)R * E * sizeof(float);
            if ((st = prev->be->iface->sync(prev->be)) != WEFT_OK) return st;
            if ((st = prev->be->iface->buffer_read(prev->act, fw->off_x, fw->x_host, xb_bytes)) != WEFT_OK) return st;
            if ((st = bi->buffer_write(fp->act, fw->off_x, fw->x_host, xb_bytes)) != WEFT_OK) return st;
        }
        if (!fw->plan_only && !((meta_done >> sg->part) & 1)) {
            if ((st = bi->buffer_write(fp->meta, 0, fw->meta_host, fw->meta_bytes)) != WEFT_OK) return st;
            meta_done |= (uint64_t)1 << sg->part;
        }
        for (size_t i = sg->op_begin; i < sg->op_end; i++)
            if (!bi->supports(fp->be, &b->ops[i])) {
                char fields[128];
                op_fields(&b->ops[i], fields, sizeof fields);
                return weft_error(WEFT_ERR_UNSUPPORTED,
                                  "forward: device '%s' cannot run the '%s' family: it does not support op %zu, %s%s",
                                  bi->name, hp->arch, i, weft_op_name(b->ops[i].kind), fields);
            }
        if (fw->plan_only) continue;
        if (sg->op_end > sg->op_begin && (st = bi->run(fp->be, b->ops + sg->op_begin, sg->op_end - sg->op_begin)) != WEFT_OK)
            return st;
    }
    if (fw->plan_only) return WEFT_OK;
    if (n_out || n_hid) {
        if ((st = fw->be->iface->sync(fw->be)) != WEFT_OK) return st;
    }
    if (n_out) {
        st = fw->be->iface->buffer_read(fw->logits_buf, 0, fw->logits_host, (size_t)n_out * hp->n_vocab * sizeof(float));
        if (st != WEFT_OK) return st;
    }
    if (n_hid) {
        /* the kept rows (the sampled ones too: few, and one read) */
        st = fw->be->iface->buffer_read(fw->parts[last].act, fw->off_xb, fw->hidden_host,
                                        (size_t)n_keep * E * sizeof(float));
        if (st != WEFT_OK) return st;
        fw->hidden_ok = true;
        fw->n_seq_last = n_seq;
    }
    *logits = fw->logits_host;
    *n_logits = n_out;
    return WEFT_OK;
}

const float *weft_forward_hidden(const struct weft_forward *fw, uint32_t s)
{
    if (!fw->hidden_ok || s >= fw->n_seq_last || fw->hid_at[s] == UINT32_MAX) return NULL;
    return fw->hidden_host + (size_t)fw->hid_at[s] * fw->m->hp.n_embd;
}

const struct weft_op *weft_forward_ops(const struct weft_forward *fw, size_t *n)
{
    *n = fw->b.n_ops;
    return fw->b.ops;
}
