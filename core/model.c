/* GGUF -> validated hyperparameters + weight views on a backend. */
#include "core/model_impl.h"
#include "base/options.h"
#include "base/rope.h"
#include "core/arch/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static weft_status get_u32_req(const struct weft_gguf *g, const char *arch, const char *suffix,
                               uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    weft_status st = weft_gguf_get_u32(g, key, out);
    if (st == WEFT_ERR_NOT_FOUND) return weft_error(WEFT_ERR_FORMAT, "model: missing key '%s'", key);
    if (st != WEFT_OK) return st;
    if (*out == 0) return weft_error(WEFT_ERR_FORMAT, "model: '%s' is 0", key);
    return WEFT_OK;
}

weft_status weft_hp_opt_u32(const struct weft_gguf *g, const char *arch, const char *suffix, uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    weft_status st = weft_gguf_get_u32(g, key, out);
    return st == WEFT_ERR_NOT_FOUND ? WEFT_OK : st;
}

weft_status weft_hp_opt_f32(const struct weft_gguf *g, const char *arch, const char *suffix, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    weft_status st = weft_gguf_get_f32(g, key, out);
    if (st == WEFT_ERR_NOT_FOUND) return WEFT_OK;
    if (st != WEFT_OK) return st;
    if (!isfinite(*out)) return weft_error(WEFT_ERR_FORMAT, "model: '%s' is not finite", key);
    return WEFT_OK;
}

weft_status weft_hp_layer_u32(const struct weft_gguf *g, const char *arch, const char *suffix, uint32_t n,
                              uint32_t *out, bool *present)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    *present = false;
    int64_t i = weft_gguf_find_key(g, key);
    if (i < 0) return WEFT_OK;
    if (weft_gguf_kv_type(g, i) != WEFT_GGUF_ARRAY) {
        uint32_t v = 0;
        weft_status st = weft_gguf_get_u32(g, key, &v);
        if (st != WEFT_OK) return st;
        for (uint32_t l = 0; l < n; l++) out[l] = v;
        *present = true;
        return WEFT_OK;
    }
    const enum weft_gguf_type t = weft_gguf_arr_type(g, i);
    if (t == WEFT_GGUF_STRING || t == WEFT_GGUF_ARRAY || weft_gguf_arr_len(g, i) != n)
        return weft_error(WEFT_ERR_FORMAT, "model: '%s' must be %u numbers, one per layer", key, n);
    for (uint32_t l = 0; l < n; l++) {
        const int64_t v = weft_gguf_arr_i64(g, i, l);
        if (v < 0 || v > UINT32_MAX) return weft_error(WEFT_ERR_FORMAT, "model: '%s'[%u] = %lld is out of range", key, l, (long long)v);
        out[l] = (uint32_t)v;
    }
    *present = true;
    return WEFT_OK;
}

/* A per-layer key the generic code reads as one value: a family that reads per-layer arrays
 * gets the first element of an array (its hparams hook reads the rest) */
static weft_status opt_u32_first(const struct weft_gguf *g, const struct weft_hparams *hp, const char *suffix,
                                 uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch, suffix);
    int64_t i = weft_gguf_find_key(g, key);
    if (i >= 0 && weft_gguf_kv_type(g, i) == WEFT_GGUF_ARRAY) {
        if (!hp->family->layer_arrays)
            return weft_error(WEFT_ERR_UNSUPPORTED, "model: '%s' per layer (an array) is not supported for %s", key,
                              hp->arch);
        if (weft_gguf_arr_len(g, i) == 0 || weft_gguf_arr_type(g, i) == WEFT_GGUF_STRING)
            return weft_error(WEFT_ERR_FORMAT, "model: '%s' is an empty or non-numeric array", key);
        const int64_t v = weft_gguf_arr_i64(g, i, 0);
        if (v < 0 || v > UINT32_MAX) return weft_error(WEFT_ERR_FORMAT, "model: '%s'[0] is out of range", key);
        *out = (uint32_t)v;
        return WEFT_OK;
    }
    return weft_hp_opt_u32(g, hp->arch, suffix, out);
}

static weft_status get_opt_str(const struct weft_gguf *g, const char *arch, const char *suffix, const char **out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    weft_status st = weft_gguf_get_str(g, key, out, NULL);
    return st == WEFT_ERR_NOT_FOUND ? WEFT_OK : st;
}

/* rope.scaling.*: "none", "linear" (positions divided by the factor), "yarn"
 * (YaRN: the factor, original_context_length, the optional yarn_* keys,
 * llama.cpp's defaults ext_factor 1, beta_fast 32, beta_slow 1) and
 * "longrope" (the factors are tensors; attn_factor scales cos/sin); any
 * other type is refused by name. */
static weft_status rope_scaling(const struct weft_gguf *g, const char *arch, struct weft_hparams *hp)
{
    const char *type = NULL;
    float factor = 1.0f;
    weft_status st;
    if ((st = get_opt_str(g, arch, "rope.scaling.type", &type)) ||
        (st = weft_hp_opt_f32(g, arch, "rope.scaling.factor", &factor)) ||
        (st = weft_hp_opt_f32(g, arch, "rope.scaling.attn_factor", &hp->rope_attn_factor)) ||
        (st = weft_hp_opt_u32(g, arch, "rope.scaling.original_context_length", &hp->rope_n_ctx_orig)))
        return st;
    if (!(factor > 0)) return weft_error(WEFT_ERR_FORMAT, "model: rope.scaling.factor %g must be > 0", factor);
    if (type && strcmp(type, "none") && strcmp(type, "linear") && strcmp(type, "yarn") && strcmp(type, "longrope"))
        return weft_error(WEFT_ERR_FORMAT, "model: unknown %s.rope.scaling.type '%s' (known: none, linear, yarn, longrope)",
                          arch, type);
    if (type && (!strcmp(type, "none") || !strcmp(type, "longrope"))) factor = 1.0f;
    hp->rope_freq_scale = 1.0f / factor;
    if (type && !strcmp(type, "yarn")) {
        float ext = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f, attn = 0;
        if (!hp->rope_n_ctx_orig) hp->rope_n_ctx_orig = hp->n_ctx_train;
        if ((st = weft_hp_opt_f32(g, arch, "rope.scaling.yarn_ext_factor", &ext)) ||
            (st = weft_hp_opt_f32(g, arch, "rope.scaling.yarn_attn_factor", &attn)) ||
            (st = weft_hp_opt_f32(g, arch, "rope.scaling.yarn_beta_fast", &beta_fast)) ||
            (st = weft_hp_opt_f32(g, arch, "rope.scaling.yarn_beta_slow", &beta_slow)))
            return st;
        if (attn != 0) hp->rope_attn_factor = attn;
        /* DeepSeek's magnitude correction: the families that use it say so */
        if ((st = weft_hp_opt_f32(g, arch, "rope.scaling.yarn_log_multiplier", &hp->rope_yarn_log_mul))) return st;
        if (hp->rope_yarn_log_mul != 0 && !hp->family->yarn_log_mul)
            return weft_error(WEFT_ERR_UNSUPPORTED, "model: %s.rope.scaling.yarn_log_multiplier %g is not supported "
                              "for %s", arch, hp->rope_yarn_log_mul, arch);
        hp->rope_beta_fast = beta_fast;
        hp->rope_beta_slow = beta_slow;
        if (!(beta_fast > 0 && beta_slow > 0))
            return weft_error(WEFT_ERR_FORMAT, "model: %s.rope.scaling.yarn_beta_fast/slow must be > 0", arch);
        hp->rope_ext_factor = ext;
        /* the ramp's ends are fixed by the file: computed once */
        weft_rope_yarn_corr_dims(hp->n_rot, hp->rope_n_ctx_orig, hp->rope_freq_base, beta_fast, beta_slow,
                                 hp->rope_corr_dims);
    }
    return WEFT_OK;
}

weft_status weft_hparams_load(const struct weft_gguf *g, struct weft_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    const char *arch = NULL;
    weft_status st = weft_gguf_get_str(g, "general.architecture", &arch, NULL);
    if (st == WEFT_ERR_NOT_FOUND) return weft_error(WEFT_ERR_FORMAT, "model: missing key 'general.architecture'");
    if (st != WEFT_OK) return st;
    hp->family = weft_family_find(arch);
    if (!hp->family)
        return weft_error(WEFT_ERR_UNSUPPORTED, "model: architecture '%s' is not supported (weft runs %s)", arch,
                          weft_family_names());
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);

    /* feed_forward_length: a model whose every FFN is a mixture may have none (Qwen3.5-MoE) */
    uint32_t n_exp_key = 0;
    if ((st = weft_hp_opt_u32(g, arch, "expert_count", &n_exp_key))) return st;
    if ((st = get_u32_req(g, arch, "embedding_length", &hp->n_embd)) ||
        (st = get_u32_req(g, arch, "block_count", &hp->n_layer)) ||
        (st = opt_u32_first(g, hp, "feed_forward_length", &hp->n_ff)) ||
        (st = get_u32_req(g, arch, "attention.head_count", &hp->n_head)))
        return st;
    if (!n_exp_key && !hp->n_ff) {
        char key[128];
        snprintf(key, sizeof key, "%s.feed_forward_length", arch);
        return weft_error(WEFT_ERR_FORMAT, weft_gguf_find_key(g, key) < 0 ? "model: missing key '%s'" : "model: '%s' is 0",
                          key);
    }
    hp->n_ctx_train = 2048;
    hp->n_head_kv = hp->n_head;
    hp->rms_eps = 1e-5f;
    hp->rope_freq_base = 10000.0f;
    if ((st = weft_hp_opt_u32(g, arch, "context_length", &hp->n_ctx_train)) ||
        (st = opt_u32_first(g, hp, "attention.head_count_kv", &hp->n_head_kv)) ||
        (st = weft_hp_opt_u32(g, arch, "attention.key_length", &hp->head_dim)) ||
        (st = weft_hp_opt_u32(g, arch, "attention.value_length", &hp->head_dim_v)) ||
        (st = weft_hp_opt_f32(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps)) ||
        (st = weft_hp_opt_f32(g, arch, "rope.freq_base", &hp->rope_freq_base)))
        return st;
    if (hp->n_ctx_train == 0) return weft_error(WEFT_ERR_FORMAT, "model: '%s.context_length' is 0", arch);
    if (hp->n_head_kv == 0) return weft_error(WEFT_ERR_FORMAT, "model: '%s.attention.head_count_kv' is 0", arch);
    if (hp->head_dim == 0) {
        /* no attention.key_length: the heads split the embedding */
        if (hp->n_embd % hp->n_head)
            return weft_error(WEFT_ERR_FORMAT, "model: embedding_length %u is not divisible by head_count %u",
                              hp->n_embd, hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    if (hp->head_dim_v == 0) hp->head_dim_v = hp->head_dim;  /* V heads may differ (the KV view carries both) */
    if (hp->n_head % hp->n_head_kv)
        return weft_error(WEFT_ERR_FORMAT, "model: head_count %u is not divisible by head_count_kv %u",
                          hp->n_head, hp->n_head_kv);
    hp->n_rot = hp->head_dim;
    if ((st = weft_hp_opt_u32(g, arch, "rope.dimension_count", &hp->n_rot))) return st;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return weft_error(WEFT_ERR_FORMAT, "model: rope.dimension_count %u must be even and in [2, head_dim %u]",
                          hp->n_rot, hp->head_dim);
    /* 1024: DeepSeek's latent cache is 64 + 512 wide; a device with a lower limit refuses
     * the model at load (its supports()) */
    if (hp->head_dim > 1024) return weft_error(WEFT_ERR_UNSUPPORTED, "model: head_dim %u > 1024", hp->head_dim);
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return weft_error(WEFT_ERR_FORMAT, "model: rms epsilon %g out of range", hp->rms_eps);
    if (!(hp->rope_freq_base > 0)) return weft_error(WEFT_ERR_FORMAT, "model: rope.freq_base %g must be > 0", hp->rope_freq_base);
    if ((st = rope_scaling(g, arch, hp))) return st;
    hp->rope_mode = WEFT_ROPE_NORMAL;
    /* a mixture of experts: the routed FFN (families that have one say so) */
    if ((st = weft_hp_opt_u32(g, arch, "expert_count", &hp->n_expert)) ||
        (st = weft_hp_opt_u32(g, arch, "expert_used_count", &hp->n_expert_used)))
        return st;
    if (hp->n_expert) {
        hp->n_ff_exp = hp->n_ff;
        if ((st = weft_hp_opt_u32(g, arch, "expert_feed_forward_length", &hp->n_ff_exp)) ||
            (st = weft_hp_opt_u32(g, arch, "expert_shared_feed_forward_length", &hp->n_ff_shexp)))
            return st;
        if (!hp->family->experts)
            return weft_error(WEFT_ERR_UNSUPPORTED, "model: '%s' with experts (%s.expert_count %u) is not supported", arch,
                              arch, hp->n_expert);
        if (hp->n_expert > WEFT_MAX_EXPERTS || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert ||
            hp->n_ff_exp == 0)
            return weft_error(WEFT_ERR_FORMAT, "model: %s.expert_used_count %u of expert_count %u (at most %u), "
                              "expert_feed_forward_length %u", arch, hp->n_expert_used, hp->n_expert, WEFT_MAX_EXPERTS,
                              hp->n_ff_exp);
    } else if (hp->n_expert_used) {
        return weft_error(WEFT_ERR_FORMAT, "model: %s.expert_used_count %u without expert_count", arch, hp->n_expert_used);
    }
    /* group-limited routing: llama.cpp's conditions, and MOE_ROUTE's (backend.h) */
    if ((st = weft_hp_opt_u32(g, arch, "expert_group_count", &hp->expert_groups)) ||
        (st = weft_hp_opt_u32(g, arch, "expert_group_used_count", &hp->expert_group_used)))
        return st;
    if (hp->expert_groups > 1) {
        const uint32_t G = hp->n_expert ? hp->n_expert / hp->expert_groups : 0;
        if (!hp->n_expert || hp->n_expert % hp->expert_groups || G < 2 || hp->expert_groups > WEFT_MOE_MAX_GROUPS ||
            hp->expert_group_used < 1 || hp->expert_group_used >= hp->expert_groups ||
            hp->n_expert_used > hp->expert_group_used * G)
            return weft_error(WEFT_ERR_FORMAT, "model: %s.expert_group_count %u / expert_group_used_count %u do not fit "
                              "expert_count %u, expert_used_count %u (groups of 2 or more experts, at most %d groups, "
                              "fewer used than there are, enough experts in them)", arch, hp->expert_groups,
                              hp->expert_group_used, hp->n_expert, hp->n_expert_used, WEFT_MOE_MAX_GROUPS);
    } else {
        hp->expert_groups = hp->expert_group_used = 0;  /* one group (DeepSeek V2-Lite's 1 / 1): none */
    }
    if (hp->family->hparams && (st = hp->family->hparams(g, hp))) return st;

    int64_t tok = weft_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (tok < 0) return weft_error(WEFT_ERR_FORMAT, "model: missing key 'tokenizer.ggml.tokens'");
    if (weft_gguf_kv_type(g, tok) != WEFT_GGUF_ARRAY || weft_gguf_arr_type(g, tok) != WEFT_GGUF_STRING)
        return weft_error(WEFT_ERR_FORMAT, "model: 'tokenizer.ggml.tokens' is not a string array");
    uint64_t nv = weft_gguf_arr_len(g, tok);
    if (nv == 0 || nv > INT32_MAX) return weft_error(WEFT_ERR_FORMAT, "model: vocabulary size %llu out of range", (unsigned long long)nv);
    hp->n_vocab = (uint32_t)nv;
    uint32_t vs = hp->n_vocab;
    if ((st = weft_hp_opt_u32(g, arch, "vocab_size", &vs))) return st;
    if (vs != hp->n_vocab)
        return weft_error(WEFT_ERR_FORMAT, "model: %s.vocab_size %u != %u tokens in tokenizer.ggml.tokens", arch, vs, hp->n_vocab);
    return WEFT_OK;
}

/* Every tensor in the file is one the family uses (at its layer), and every
 * tensor it requires is there: a file is refused naming the first that is
 * not. Sets hp->tied_output (an optional output head absent). */
static weft_status check_tensors(const struct weft_gguf *g, struct weft_hparams *hp)
{
    const struct weft_family *f = hp->family;
    struct weft_tensor_spec spec[WEFT_T_COUNT_];
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
        const char *name = weft_gguf_tensor(g, i)->name;
        uint32_t l;
        enum weft_tensor_id id = weft_tensor_lookup(name, &l);
        if (id == WEFT_T_COUNT_)
            return weft_error(WEFT_ERR_FORMAT, "model: tensor '%s' is not one the '%s' family reads", name, hp->arch);
        if (l != UINT32_MAX && l >= hp->n_layer)
            return weft_error(WEFT_ERR_FORMAT, "model: tensor '%s' is past the model's %u layers", name, hp->n_layer);
        memset(spec, 0, sizeof spec);
        f->tensors(hp, l, spec);
        if (spec[id].use == WEFT_USE_NONE)
            return weft_error(WEFT_ERR_FORMAT, "model: tensor '%s' is not used by the '%s' family", name, hp->arch);
    }
    for (uint32_t l = 0; l <= hp->n_layer; l++) {
        uint32_t at = l == hp->n_layer ? WEFT_GLOBAL_TENSORS : l;
        memset(spec, 0, sizeof spec);
        f->tensors(hp, at, spec);
        for (int id = 0; id < WEFT_T_COUNT_; id++) {
            if (spec[id].use != WEFT_USE_REQUIRED) continue;
            char name[96];
            weft_tensor_name((enum weft_tensor_id)id, at, name, sizeof name);
            if (weft_gguf_find_tensor(g, name) < 0) return weft_error(WEFT_ERR_FORMAT, "model: missing tensor '%s'", name);
        }
    }
    hp->tied_output = weft_gguf_find_tensor(g, "output.weight") < 0;
    return WEFT_OK;
}

/* Look up a tensor and check its shape ([ne0, ne1]) and type. */
static weft_status find(struct weft_model *m, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, bool f32,
                        const struct weft_gguf_tensor **out)
{
    int64_t i = weft_gguf_find_tensor(m->gguf, name);
    if (i < 0) return weft_error(WEFT_ERR_FORMAT, "model: missing tensor '%s'", name);
    const struct weft_gguf_tensor *t = weft_gguf_tensor(m->gguf, i);
    int64_t n1 = t->n_dims >= 2 ? t->ne[1] : 1, n2 = t->n_dims >= 3 ? t->ne[2] : 1;
    if (ne2 < 1) ne2 = 1;
    if (t->ne[0] != ne0 || n1 != ne1 || n2 != ne2 || t->ne[3] != 1)
        return weft_error(WEFT_ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld%s%.0lld]",
                          name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                          (long long)ne0, (long long)ne1, ne2 > 1 ? ", " : "", ne2 > 1 ? (long long)ne2 : 0LL);
    if (f32 && t->type != WEFT_TYPE_F32)
        return weft_error(WEFT_ERR_UNSUPPORTED, "model: tensor '%s' is %s, expected F32", name, weft_type_name(t->type));
    *out = t;
    return WEFT_OK;
}

/* Where each tensor lives on one part: wrapped host memory spanning the whole
 * data section (offset = file offset), or buffers holding only the tensors
 * the part uses, packed in order into chunks of at most WEFT_WEIGHT_CHUNK
 * bytes (1 GiB, or option model.chunk_mib; so no buffer outgrows what a GPU
 * binds at once, e.g. Vulkan's maxStorageBufferRange) — offsets and chunk
 * sizes come from a first pass. */
static size_t weight_chunk(void)
{
    /* model.chunk_mib (WEFT_WEIGHT_CHUNK_MIB): tests, and devices with small binding limits */
    long v = weft_opt_long(weft_backend_options(), "model.chunk_mib", 1, (1l << 20) - 1, 0);
    return v > 0 ? (size_t)v << 20 : (size_t)1 << 30;
}

struct placer {
    struct weft_model *m;
    struct weft_model_part *part;
    const uint8_t *base;
    bool packed, sizing;
    size_t cursor, chunk_max;
    uint32_t chunk;
    int experts;               /* a mixture layer's tensors: 0 all; 1 its FFN's only (the experts
                                * part); -1 all but its FFN's (a layer part, experts apart) */
};

/* Whether a mixture layer's tensor belongs to its FFN (placed with the experts when they are
 * apart): the ffn_* tensors and exp_probs_b; the norms go to both parts */
static bool ffn_side(int id, bool *both)
{
    const char *nm = weft_tensor_info((enum weft_tensor_id)id)->name;
    *both = weft_tensor_info((enum weft_tensor_id)id)->kind == WEFT_TK_NORM;
    return !strncmp(nm, "ffn_", 4) || !strncmp(nm, "exp_probs_b", 11);
}

static weft_status place(struct placer *pl, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, bool f32,
                         struct weft_view *out)
{
    const struct weft_gguf_tensor *t = NULL;
    weft_status st = find(pl->m, name, ne0, ne1, ne2, f32, &t);
    if (st != WEFT_OK) return st;
    size_t off = (size_t)((const uint8_t *)t->data - pl->base), need = (t->size + 255) & ~(size_t)255;
    struct weft_buffer *buf = pl->part->weights;
    if (pl->packed) {
        struct weft_model_part *mp = pl->part;
        if (pl->cursor > 0 && pl->cursor + need > pl->chunk_max) {  /* the next chunk */
            pl->chunk++;
            pl->cursor = 0;
        }
        if (pl->sizing) {
            if (pl->chunk >= mp->n_bufs) {
                struct weft_buffer **nb = realloc(mp->bufs, (pl->chunk + 1) * sizeof *nb);
                size_t *ns = realloc(mp->buf_sizes, (pl->chunk + 1) * sizeof *ns);
                if (nb) mp->bufs = nb;
                if (ns) mp->buf_sizes = ns;
                if (!nb || !ns) return weft_error(WEFT_ERR_NOMEM, "model: out of memory");
                mp->bufs[pl->chunk] = NULL;
                mp->buf_sizes[pl->chunk] = 0;
                mp->n_bufs = pl->chunk + 1;
            }
            mp->buf_sizes[pl->chunk] = pl->cursor + need;
        }
        off = pl->cursor;
        pl->cursor += need;
        buf = mp->bufs[pl->chunk];
        if (!pl->sizing && (st = mp->be->iface->buffer_write(buf, off, t->data, t->size))) return st;
    }
    /* experts: the n_expert matrices one after another, as one view of their rows */
    *out = weft_view_2d(buf, off, t->type, ne0, ne1 * (ne2 > 1 ? ne2 : 1));
    return WEFT_OK;
}

/* Place the tensors of spec (those present) for layer l into ws, in table
 * order. */
static weft_status place_spec(struct placer *pl, uint32_t l, const struct weft_tensor_spec *spec,
                              struct weft_layer_weights *ws, int skip)
{
    weft_status st;
    const bool moe_layer = l != WEFT_GLOBAL_TENSORS && spec[WEFT_T_FFN_GATE_EXPS].use;
    for (int id = 0; id < WEFT_T_COUNT_; id++) {
        if (spec[id].use == WEFT_USE_NONE || id == skip) continue;
        bool both = false, ffn = moe_layer && ffn_side(id, &both);
        if (pl->experts && moe_layer && !both && ffn != (pl->experts > 0)) continue;
        if (pl->experts > 0 && !moe_layer) continue;
        /* a global vector (RoPE factors) goes to every layer instead */
        if (l == WEFT_GLOBAL_TENSORS && weft_tensor_info((enum weft_tensor_id)id)->kind == WEFT_TK_VECTOR) continue;
        char name[96];
        weft_tensor_name((enum weft_tensor_id)id, l, name, sizeof name);
        if (spec[id].use == WEFT_USE_OPTIONAL && weft_gguf_find_tensor(pl->m->gguf, name) < 0) continue;
        enum weft_tensor_kind kind = weft_tensor_info((enum weft_tensor_id)id)->kind;
        bool f32 = kind != WEFT_TK_MATRIX && kind != WEFT_TK_EXPERTS;
        if ((st = place(pl, name, spec[id].ne0, spec[id].ne1, spec[id].ne2, f32, &ws->t[id]))) return st;
    }
    return WEFT_OK;
}

/* Bind the views of the tensors part p uses (its layers; EMBED on the first
 * part; LOGITS on the last). */
static weft_status place_part(struct placer *pl, uint32_t p)
{
    struct weft_model *m = pl->m;
    const struct weft_hparams *hp = &m->hp;
    struct weft_tensor_spec spec[WEFT_T_COUNT_] = {0};
    hp->family->tensors(hp, WEFT_GLOBAL_TENSORS, spec);
    struct weft_view scratch;
    weft_status st;
    bool first = p == 0, last = p + 1 == m->n_parts;
    struct weft_layer_weights *G = &m->glob;
    const struct weft_tensor_spec *e = &spec[WEFT_T_TOKEN_EMBD];
    if (first || (last && m->hp.tied_output))
        if ((st = place(pl, "token_embd.weight", e->ne0, e->ne1, 0, false, first ? &G->t[WEFT_T_TOKEN_EMBD] : &scratch)))
            return st;
    if (last) {
        /* the rest of the model's own tensors: the final norm, the head */
        if ((st = place_spec(pl, WEFT_GLOBAL_TENSORS, spec, G, WEFT_T_TOKEN_EMBD))) return st;
        if (m->hp.tied_output) G->t[WEFT_T_OUTPUT] = first ? G->t[WEFT_T_TOKEN_EMBD] : scratch;
    }
    struct weft_tensor_spec gspec[WEFT_T_COUNT_] = {0};
    hp->family->tensors(hp, WEFT_GLOBAL_TENSORS, gspec);
    for (uint32_t l = pl->part->layer0; l < pl->part->layer0 + pl->part->n_layer; l++) {
        memset(spec, 0, sizeof spec);
        hp->family->tensors(hp, l, spec);
        if ((st = place_spec(pl, l, spec, &m->layers[l], -1))) return st;
        /* the model's vectors every layer reads (RoPE factors), on this part */
        for (int id = 0; id < WEFT_T_COUNT_; id++) {
            if (!gspec[id].use || weft_tensor_info((enum weft_tensor_id)id)->kind != WEFT_TK_VECTOR) continue;
            char name[96];
            weft_tensor_name((enum weft_tensor_id)id, WEFT_GLOBAL_TENSORS, name, sizeof name);
            if (weft_gguf_find_tensor(m->gguf, name) < 0) continue;
            if ((st = place(pl, name, gspec[id].ne0, gspec[id].ne1, 0, true, &m->layers[l].t[id]))) return st;
        }
    }
    return WEFT_OK;
}

/* The experts' part: every mixture layer's FFN tensors (and norms), into xlayers */
static weft_status place_xpart(struct placer *pl)
{
    struct weft_model *m = pl->m;
    const struct weft_hparams *hp = &m->hp;
    struct weft_tensor_spec spec[WEFT_T_COUNT_];
    weft_status st;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        memset(spec, 0, sizeof spec);
        hp->family->tensors(hp, l, spec);
        if ((st = place_spec(pl, l, spec, &m->xlayers[l], -1))) return st;
    }
    return WEFT_OK;
}

static bool is_matrix(int id) { return weft_tensor_info((enum weft_tensor_id)id)->kind == WEFT_TK_MATRIX; }

static weft_status prepare_part(struct weft_model *m, uint32_t p)
{
    struct weft_backend *be = m->parts[p].be;
    if (be->iface->api_version < 2 || !be->iface->weight_prepare) return WEFT_OK;
    /* the matrices are final: let the backend lay them out for its kernels */
    weft_status st;
    if (p + 1 == m->n_parts && (st = be->iface->weight_prepare(be, &m->glob.t[WEFT_T_OUTPUT]))) return st;
    for (uint32_t l = m->parts[p].layer0; l < m->parts[p].layer0 + m->parts[p].n_layer; l++)
        for (int id = 0; id < WEFT_T_COUNT_; id++) {
            const struct weft_view *v = &m->layers[l].t[id];
            /* the experts too (a CPU keeps their decode layout; the others may) */
            const bool xp = weft_tensor_info((enum weft_tensor_id)id)->kind == WEFT_TK_EXPERTS;
            if (v->buf && (is_matrix(id) || xp) && (st = be->iface->weight_prepare(be, v))) return st;
        }
    return WEFT_OK;
}

weft_status weft_model_load_split(const char *path, const struct weft_split_part *parts, uint32_t n_parts,
                                  struct weft_model **out)
{
    return weft_model_load_placed(path, parts, n_parts, NULL, out);
}

weft_status weft_model_load_placed(const char *path, const struct weft_split_part *parts, uint32_t n_parts,
                                   struct weft_backend *experts_be, struct weft_model **out)
{
    *out = NULL;
    if (n_parts == 0 || n_parts > WEFT_MAX_PARTS)
        return weft_error(WEFT_ERR_INVALID_ARG, "model: a split has 1..%d parts, got %u", WEFT_MAX_PARTS, n_parts);
    for (uint32_t p = 0; p < n_parts; p++)
        if (!parts[p].be) return weft_error(WEFT_ERR_INVALID_ARG, "model: split part %u has no device", p);
    struct weft_model *m = calloc(1, sizeof *m);
    if (!m) return weft_error(WEFT_ERR_NOMEM, "model: out of memory");
    m->be = parts[0].be;
    weft_status st = weft_gguf_open(path, &m->gguf);
    if (st != WEFT_OK) goto err;
    if ((st = weft_hparams_load(m->gguf, &m->hp)) != WEFT_OK) goto err;
    if ((st = weft_tokenizer_load(m->gguf, &m->tok)) != WEFT_OK) goto err;
    if ((st = weft_fingerprint_model(m->gguf, &m->hp, &m->fingerprint)) != WEFT_OK) goto err;
    if ((st = check_tensors(m->gguf, &m->hp)) != WEFT_OK) goto err;
    if (weft_tokenizer_n_vocab(m->tok) != (int32_t)m->hp.n_vocab) {
        st = weft_error(WEFT_ERR_FORMAT, "model: tokenizer has %d tokens, hyperparameters say %u",
                        weft_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
        goto err;
    }
    struct weft_split_part whole = {parts[0].be, m->hp.n_layer};
    if (n_parts == 1 && parts[0].n_layer == 0) parts = &whole;
    /* a last part of 0 layers takes the rest: cpu=2,vulkan:0 */
    struct weft_split_part rest[WEFT_MAX_PARTS];
    if (n_parts > 1 && parts[n_parts - 1].n_layer == 0) {
        uint64_t before = 0;
        for (uint32_t p = 0; p + 1 < n_parts; p++) before += parts[p].n_layer;
        memcpy(rest, parts, n_parts * sizeof *parts);
        rest[n_parts - 1].n_layer = before < m->hp.n_layer ? m->hp.n_layer - (uint32_t)before : 0;
        parts = rest;
    }
    uint64_t total = 0;
    for (uint32_t p = 0; p < n_parts; p++) {
        if (parts[p].n_layer == 0) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "model: split part %u (%s) has no layers", p, parts[p].be->iface->name);
            goto err;
        }
        total += parts[p].n_layer;
    }
    if (total != m->hp.n_layer) {
        st = weft_error(WEFT_ERR_INVALID_ARG, "model: the split places %llu layers, the model has %u",
                        (unsigned long long)total, m->hp.n_layer);
        goto err;
    }

    int64_t nt = weft_gguf_n_tensors(m->gguf);
    if (nt == 0) { st = weft_error(WEFT_ERR_FORMAT, "model: file has no tensors"); goto err; }
    const struct weft_gguf_tensor *t0 = weft_gguf_tensor(m->gguf, 0);
    const uint8_t *base = (const uint8_t *)t0->data - t0->offset;
    size_t span = 0;
    size_t counts[WEFT_TYPE_COUNT_] = {0};
    for (int64_t i = 0; i < nt; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(m->gguf, i);
        if (t->offset + t->size > span) span = t->offset + t->size;
        int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        m->n_params += (uint64_t)ne;
        if (t->n_dims >= 2) counts[t->type] += t->size;
    }
    m->weight_bytes = span;
    m->ftype = WEFT_TYPE_F32;
    for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++)
        if (counts[ti] > counts[m->ftype]) m->ftype = (enum weft_type)ti;

    const struct weft_hparams *hp = &m->hp;
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    m->layer_part = calloc(hp->n_layer, sizeof *m->layer_part);
    m->recurrent = calloc(hp->n_layer, sizeof *m->recurrent);
    m->kv_source = calloc(hp->n_layer, sizeof *m->kv_source);
    if (!m->layers || !m->layer_part || !m->recurrent || !m->kv_source) {
        st = weft_error(WEFT_ERR_NOMEM, "model: out of memory");
        goto err;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        m->recurrent[l] = weft_hp_recurrent(hp, l);
        m->kv_source[l] = weft_hp_kv_source(hp, l);
    }
    m->n_parts = n_parts;
    if (experts_be && (!hp->n_expert || hp->expert_gate_up)) {
        st = weft_error(hp->n_expert ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_INVALID_ARG,
                        hp->n_expert ? "model: experts placed apart are not supported for %s (its dense FFN runs "
                                       "beside the experts in every layer)"
                                     : "model: experts placed apart, but the model has no experts%s",
                        hp->n_expert ? hp->arch : "");
        goto err;
    }
    for (uint32_t p = 0, l0 = 0; p <= n_parts; p++) {
        const bool xp = p == n_parts;  /* the experts' part, after the layers' */
        if (xp && !experts_be) break;
        struct weft_model_part *mp = xp ? &m->xpart : &m->parts[p];
        *mp = (struct weft_model_part){.be = xp ? experts_be : parts[p].be, .layer0 = xp ? 0 : l0,
                                       .n_layer = xp ? hp->n_layer : parts[p].n_layer};
        if (!xp) {
            for (uint32_t l = l0; l < l0 + mp->n_layer; l++) m->layer_part[l] = p;
            l0 += parts[p].n_layer;
        } else if (!(m->xlayers = calloc(hp->n_layer, sizeof *m->xlayers))) {
            st = weft_error(WEFT_ERR_NOMEM, "model: out of memory");
            goto err;
        }
        m->has_xpart = xp;
        struct placer pl = {.m = m, .part = mp, .base = base, .chunk_max = weight_chunk(),
                            .experts = xp ? 1 : experts_be ? -1 : 0};
        if (weft_backend_max_buffer(mp->be) < pl.chunk_max) pl.chunk_max = (size_t)weft_backend_max_buffer(mp->be);
        const struct weft_backend_iface *bi = mp->be->iface;
        if (bi->buffer_wrap_host) {
            if ((st = bi->buffer_wrap_host(mp->be, base, span, &mp->weights))) goto err;
        } else {
            pl.packed = pl.sizing = true;
            if ((st = xp ? place_xpart(&pl) : place_part(&pl, p))) goto err;
            for (uint32_t c = 0; c < mp->n_bufs; c++)
                if ((st = bi->buffer_alloc(mp->be, mp->buf_sizes[c], &mp->bufs[c]))) goto err;
            mp->weights = mp->n_bufs ? mp->bufs[0] : NULL;
            pl.sizing = false;
            pl.cursor = 0;
            pl.chunk = 0;
        }
        if ((st = xp ? place_xpart(&pl) : place_part(&pl, p))) goto err;
    }
    m->weights = m->parts[0].weights;
    for (uint32_t p = 0; p < n_parts; p++)
        if ((st = prepare_part(m, p))) goto err;
    *out = m;
    return WEFT_OK;
err:
    weft_model_free(m);
    return st;
}

weft_status weft_model_load_meta(const char *path, struct weft_backend *be, struct weft_model **out)
{
    *out = NULL;
    struct weft_model *m = calloc(1, sizeof *m);
    if (!m) return weft_error(WEFT_ERR_NOMEM, "model: out of memory");
    m->be = be;
    weft_status st = weft_gguf_open(path, &m->gguf);
    if (st == WEFT_OK) st = weft_hparams_load(m->gguf, &m->hp);
    if (st == WEFT_OK) st = weft_tokenizer_load(m->gguf, &m->tok);
    if (st == WEFT_OK) st = weft_fingerprint_model(m->gguf, &m->hp, &m->fingerprint);
    if (st == WEFT_OK) st = check_tensors(m->gguf, &m->hp);
    if (st == WEFT_OK && weft_tokenizer_n_vocab(m->tok) != (int32_t)m->hp.n_vocab)
        st = weft_error(WEFT_ERR_FORMAT, "model: tokenizer has %d tokens, hyperparameters say %u",
                        weft_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
    if (st != WEFT_OK) {
        weft_model_free(m);
        return st;
    }
    int64_t nt = weft_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < nt; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(m->gguf, i);
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    m->ftype = WEFT_TYPE_F32;
    *out = m;
    return WEFT_OK;
}

weft_status weft_model_load(const char *path, struct weft_backend *be, struct weft_model **out)
{
    *out = NULL;
    if (!be) return weft_error(WEFT_ERR_INVALID_ARG, "model: no device");
    struct weft_split_part part = {be, 0};  /* 0: every layer */
    return weft_model_load_split(path, &part, 1, out);
}

void weft_model_free(struct weft_model *m)
{
    if (!m) return;
    for (uint32_t p = 0; p <= m->n_parts; p++) {
        if (p == m->n_parts && !m->has_xpart) break;
        struct weft_model_part *mp = p == m->n_parts ? &m->xpart : &m->parts[p];
        if (mp->n_bufs) {
            for (uint32_t c = 0; c < mp->n_bufs; c++)
                if (mp->bufs[c]) mp->be->iface->buffer_free(mp->bufs[c]);
        } else if (mp->weights) {
            mp->be->iface->buffer_free(mp->weights);
        }
        free(mp->bufs);
        free(mp->buf_sizes);
    }
    free(m->layers);
    free(m->xlayers);
    free(m->layer_part);
    free(m->recurrent);
    free(m->kv_source);
    weft_tokenizer_free(m->tok);
    weft_gguf_close(m->gguf);
    free(m);
}

/* ---- accessors (core/model.h) ---- */
const struct weft_hparams *weft_model_hparams(const struct weft_model *m) { return &m->hp; }
const struct weft_tokenizer *weft_model_tokenizer(const struct weft_model *m) { return m->tok; }
const struct weft_gguf *weft_model_gguf(const struct weft_model *m) { return m->gguf; }
const struct weft_fingerprint *weft_model_fingerprint(const struct weft_model *m) { return &m->fingerprint; }
struct weft_backend *weft_model_backend(const struct weft_model *m) { return m->be; }
uint32_t weft_model_n_parts(const struct weft_model *m) { return m->n_parts; }
enum weft_type weft_model_ftype(const struct weft_model *m) { return m->ftype; }
uint64_t weft_model_n_params(const struct weft_model *m) { return m->n_params; }
size_t weft_model_weight_bytes(const struct weft_model *m) { return m->weight_bytes; }
uint64_t weft_model_bytes_per_token(const struct weft_model *m)
{
    const struct weft_view *out = &m->glob.t[WEFT_T_OUTPUT];
    uint64_t b = (uint64_t)out->ne1 * out->nb1;
    for (uint32_t l = 0; l < m->hp.n_layer && m->layers; l++)
        for (int id = 0; id < WEFT_T_COUNT_; id++) {
            const struct weft_view *w = &m->layers[l].t[id];
            if (w->buf && is_matrix(id)) b += (uint64_t)w->ne1 * w->nb1;
            /* a token reads n_expert_used of the n_expert matrices */
            if (w->buf && weft_tensor_info((enum weft_tensor_id)id)->kind == WEFT_TK_EXPERTS && m->hp.n_expert)
                b += (uint64_t)w->ne1 / m->hp.n_expert * m->hp.n_expert_used * w->nb1;
        }
    return b;
}
