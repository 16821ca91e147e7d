/* Random-weight GGUF generator of weft's families. See tools/gen_model.h.
 *
 * Every tensor gets its own RNG stream seeded from (seed, tensor name), so a
 * tensor's values do not depend on the order or number of the others. Values
 * are sums of four uniforms (Irwin-Hall, rescaled to unit variance): integer
 * arithmetic and one multiply, so the bytes are the same on every platform. */
#define _GNU_SOURCE
#include "tools/gen_model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/arch/family.h"
#include "core/gguf.h"
#include "base/quant.h"
#include "tools/cli.h"

#define GEN_MAX_VOCAB (1u << 22)          /* 4M tokens; real vocabs stop at ~256k */
#define GEN_MAX_DIM (1u << 20)
#define GEN_SCRATCH_MMAP_ABOVE ((size_t)1 << 30)
#define GEN_N_SPECIAL 3                   /* <unk> <s> </s> */
#define GEN_N_BYTE 256

/* SentencePiece token types (llama.cpp's llama_token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

/* ---- deterministic randomness ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t stream_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name */
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) h = (h ^ *c) * 0x100000001b3ull;
    uint64_t s = seed ^ h;
    splitmix64(&s);
    return s;
}

/* Approximately N(0,1): four 16-bit uniforms summed, centred, scaled to unit
 * variance (var of one U(0,1) is 1/12). Exact in float: the sum is an integer. */
static float rand_normal(uint64_t *s)
{
    uint64_t x = splitmix64(s);
    int32_t sum = (int32_t)(x & 0xffff) + (int32_t)((x >> 16) & 0xffff) +
                  (int32_t)((x >> 32) & 0xffff) + (int32_t)(x >> 48) - 2 * 65535;
    return (float)sum * (1.7320508f / 65536.0f);
}

static uint32_t rand_below(uint64_t *s, uint32_t n) { return (uint32_t)((splitmix64(s) >> 32) % n); }

static void rand_bytes(uint64_t *s, uint8_t *dst, size_t n)
{
    while (n) {
        uint64_t x = splitmix64(s);
        size_t k = n < 8 ? n : 8;
        memcpy(dst, &x, k); /* byte order differs across hosts; all targets are little-endian */
        dst += k;
        n -= k;
    }
}

/* ---- K-quant blocks drawn directly (there is no K-quant quantizer) ----
 * Sub-block scales are uniform in [40,63], so their RMS is sqrt(51.5^2 + 575/12);
 * q is uniform, so x = d*sc*(q - mean_q) has std d * K_SC_RMS * std_q. For
 * Q4_K/Q5_K the min is set to sc * mean_q * d, making every sub-block zero-mean. */
#define K_SC_LO 40
#define K_SC_N 24
static const float K_SC_RMS = 51.9634f;

static void pack_scales_k4(uint8_t q[12], const uint8_t sc[8], const uint8_t m[8])
{
    /* inverse of ggml's get_scale_min_k4 */
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

static void gen_k_blocks(enum weft_type type, void *dst, int64_t nb, float std, uint64_t *rng)
{
    if (type == WEFT_TYPE_Q4_K || type == WEFT_TYPE_Q5_K) {
        bool q5 = type == WEFT_TYPE_Q5_K;
        float std_q = q5 ? 9.2331f : 4.6098f;  /* sqrt((2^bits^2 - 1) / 12) */
        float mean_q = q5 ? 15.5f : 7.5f;
        float d = std / (K_SC_RMS * std_q);
        weft_half hd = weft_f32_to_half(d), hmin = weft_f32_to_half(d * mean_q);
        for (int64_t i = 0; i < nb; i++) {
            uint8_t sc[8];
            for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(K_SC_LO + rand_below(rng, K_SC_N));
            if (q5) {
                struct weft_block_q5_k *b = (struct weft_block_q5_k *)dst + i;
                b->d = hd;
                b->dmin = hmin;
                pack_scales_k4(b->scales, sc, sc);
                rand_bytes(rng, b->qh, sizeof b->qh);
                rand_bytes(rng, b->qs, sizeof b->qs);
            } else {
                struct weft_block_q4_k *b = (struct weft_block_q4_k *)dst + i;
                b->d = hd;
                b->dmin = hmin;
                pack_scales_k4(b->scales, sc, sc);
                rand_bytes(rng, b->qs, sizeof b->qs);
            }
        }
    } else { /* Q6_K: x = d * sc * (q - 32), q uniform in [0,63] */
        weft_half hd = weft_f32_to_half(std / (K_SC_RMS * 18.4730f));
        for (int64_t i = 0; i < nb; i++) {
            struct weft_block_q6_k *b = (struct weft_block_q6_k *)dst + i;
            rand_bytes(rng, b->ql, sizeof b->ql);
            rand_bytes(rng, b->qh, sizeof b->qh);
            for (int j = 0; j < WEFT_QK_K / 16; j++) b->scales[j] = (int8_t)(K_SC_LO + rand_below(rng, K_SC_N));
            b->d = hd;
        }
    }
}

static bool is_k_quant(enum weft_type t)
{
    return t == WEFT_TYPE_Q4_K || t == WEFT_TYPE_Q5_K || t == WEFT_TYPE_Q6_K;
}

int weft_gen_ftype(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_F32: return 0;
    case WEFT_TYPE_F16: return 1;
    case WEFT_TYPE_Q4_0: return 2;
    case WEFT_TYPE_Q4_1: return 3;
    case WEFT_TYPE_Q8_0: return 7;
    case WEFT_TYPE_Q5_0: return 8;
    case WEFT_TYPE_Q5_1: return 9;
    case WEFT_TYPE_Q2_K: return 10;
    case WEFT_TYPE_Q3_K: return 12;
    case WEFT_TYPE_Q4_K: return 15;
    case WEFT_TYPE_Q5_K: return 17;
    case WEFT_TYPE_Q6_K: return 18;
    case WEFT_TYPE_IQ4_NL: return 25;
    case WEFT_TYPE_IQ4_XS: return 30;
    case WEFT_TYPE_BF16: return 32;
    case WEFT_TYPE_MXFP4: return 38;
    default: return -1;
    }
}

/* ---- scratch memory ---- */

weft_status weft_scratch_init(struct weft_scratch *s, size_t size, const char *dir)
{
    memset(s, 0, sizeof *s);
    if (size == 0) size = 64;
    if (size <= GEN_SCRATCH_MMAP_ABOVE) {
        s->base = malloc(size);
        if (!s->base) return weft_error(WEFT_ERR_NOMEM, "out of memory allocating %zu bytes of tensor data", size);
        s->size = size;
        return WEFT_OK;
    }
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/.weft-scratch-XXXXXX", dir && *dir ? dir : ".");
    if (n < 0 || (size_t)n >= sizeof path) return weft_error(WEFT_ERR_INVALID_ARG, "scratch directory path too long");
    int fd = mkstemp(path);
    if (fd < 0) return weft_error(WEFT_ERR_IO, "cannot create scratch file in %s: %s", dir, strerror(errno));
    unlink(path);
    int err = posix_fallocate(fd, 0, (off_t)size);
    if (err) {
        close(fd);
        return weft_error(WEFT_ERR_IO, "cannot reserve %zu bytes of scratch space in %s: %s", size, dir, strerror(err));
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return weft_error(WEFT_ERR_IO, "cannot map %zu bytes of scratch: %s", size, strerror(errno));
    s->base = m;
    s->size = size;
    s->mapped = true;
    return WEFT_OK;
}

void *weft_scratch_take(struct weft_scratch *s, size_t n)
{
    size_t r = (n + 63) & ~(size_t)63;
    if (r < n || r > s->size - s->used) return NULL;
    void *p = s->base + s->used;
    s->used += r;
    return p;
}

void weft_scratch_free(struct weft_scratch *s)
{
    if (!s->base) return;
    if (s->mapped) munmap(s->base, s->size);
    else free(s->base);
    memset(s, 0, sizeof *s);
}

/* ---- params ---- */

#define GEN_PRESETS "tiny, tiny-moe, smollm2-135m, llama3-8b, qwen2.5-7b, qwen3-0.6b, qwen3-8b, phi4-mini, " \
                    "gemma3-4b, mixtral-8x7b, olmoe-1b-7b, qwen3-30b-a3b, qwen3-30b-a3b-l8, gpt-oss-20b, "     \
                    "deepseek-v2-lite, qwen35-0.8b"

weft_status weft_gen_preset(struct weft_gen_params *p, const char *preset)
{
    struct weft_gen_params q = {
        .rope_freq_base = 10000.0f, .rms_eps = 1e-5f, .type = WEFT_TYPE_F16,
        .seed = 1, .scale = 1.0f,
    };
    if (strcmp(preset, "tiny") == 0 || strcmp(preset, "tiny-moe") == 0) {
        q.n_embd = 256; q.n_layer = 2; q.n_head = 4; q.n_head_kv = 2; q.n_ff = 512;
        q.n_vocab = 512; q.n_ctx = 512;
        if (preset[4]) {
            q.arch = "qwen3moe"; q.n_expert = 8; q.n_expert_used = 2; q.n_ff_exp = 256;
        }
    } else if (strcmp(preset, "smollm2-135m") == 0) {
        q.n_embd = 576; q.n_layer = 30; q.n_head = 9; q.n_head_kv = 3; q.n_ff = 1536;
        q.n_vocab = 49152; q.n_ctx = 2048; q.rope_freq_base = 100000.0f; q.tied_output = true;
    } else if (strcmp(preset, "llama3-8b") == 0) {
        q.n_embd = 4096; q.n_layer = 32; q.n_head = 32; q.n_head_kv = 8; q.n_ff = 14336;
        q.n_vocab = 128256; q.n_ctx = 8192; q.rope_freq_base = 500000.0f;
    } else if (strcmp(preset, "qwen2.5-7b") == 0) {
        q.arch = "qwen2"; q.n_embd = 3584; q.n_layer = 28; q.n_head = 28; q.n_head_kv = 4; q.n_ff = 18944;
        q.n_vocab = 152064; q.n_ctx = 32768; q.rope_freq_base = 1000000.0f; q.rms_eps = 1e-6f;
    } else if (strcmp(preset, "phi4-mini") == 0) {
        q.arch = "phi3"; q.n_embd = 3072; q.n_layer = 32; q.n_head = 24; q.n_head_kv = 8; q.n_ff = 8192;
        q.n_vocab = 200064; q.n_ctx = 4096; q.tied_output = true;
    } else if (strcmp(preset, "gemma3-4b") == 0) {
        q.arch = "gemma3"; q.n_embd = 2560; q.n_layer = 34; q.n_head = 8; q.n_head_kv = 4; q.head_dim = 256;
        q.n_ff = 10240; q.n_vocab = 262144; q.n_ctx = 131072; q.rope_freq_base = 1000000.0f; q.rms_eps = 1e-6f;
        q.n_swa = 1024; q.swa_pattern = 6; q.tied_output = true;
    } else if (strcmp(preset, "qwen3-0.6b") == 0 || strcmp(preset, "qwen3-8b") == 0) {
        bool big = preset[6] == '8';
        q.arch = "qwen3"; q.head_dim = 128; q.n_vocab = 151936; q.n_ctx = 40960;
        q.rope_freq_base = 1000000.0f; q.rms_eps = 1e-6f;
        q.n_embd = big ? 4096 : 1024; q.n_layer = big ? 36 : 28; q.n_head = big ? 32 : 16; q.n_head_kv = 8;
        q.n_ff = big ? 12288 : 3072; q.tied_output = !big;
    } else if (strcmp(preset, "mixtral-8x7b") == 0) {
        /* llama with experts: feed_forward_length is an expert's */
        q.n_embd = 4096; q.n_layer = 32; q.n_head = 32; q.n_head_kv = 8; q.n_ff = 14336;
        q.n_expert = 8; q.n_expert_used = 2; q.n_ff_exp = 14336;
        q.n_vocab = 32000; q.n_ctx = 32768; q.rope_freq_base = 1000000.0f;
    } else if (strcmp(preset, "olmoe-1b-7b") == 0) {
        /* OLMoE-1B-7B's sizes in qwen3moe's layout (QK-norm per head, softmax top-k) */
        q.arch = "qwen3moe"; q.n_embd = 2048; q.n_layer = 16; q.n_head = 16; q.n_head_kv = 16; q.head_dim = 128;
        q.n_ff = 1024; q.n_expert = 64; q.n_expert_used = 8; q.n_ff_exp = 1024;
        q.n_vocab = 50304; q.n_ctx = 4096;
    } else if (strcmp(preset, "qwen3-30b-a3b") == 0 || strcmp(preset, "qwen3-30b-a3b-l8") == 0) {
        q.arch = "qwen3moe"; q.n_embd = 2048; q.n_layer = preset[13] ? 8 : 48; q.n_head = 32; q.n_head_kv = 4;
        q.head_dim = 128; q.n_ff = 6144; q.n_expert = 128; q.n_expert_used = 8; q.n_ff_exp = 768;
        q.n_vocab = 151936; q.n_ctx = 40960; q.rope_freq_base = 1000000.0f; q.rms_eps = 1e-6f;
    } else if (strcmp(preset, "gpt-oss-20b") == 0) {
        q.arch = "gpt-oss"; q.n_embd = 2880; q.n_layer = 24; q.n_head = 64; q.n_head_kv = 8; q.head_dim = 64;
        q.n_ff = 2880; q.n_expert = 32; q.n_expert_used = 4; q.n_ff_exp = 2880; q.n_swa = 128;
        q.n_vocab = 201088; q.n_ctx = 131072; q.rope_freq_base = 150000.0f;
    } else if (strcmp(preset, "deepseek-v2-lite") == 0) {
        q.arch = "deepseek2"; q.n_embd = 2048; q.n_layer = 27; q.n_head = 16; q.n_head_kv = 1; q.n_ff = 10944;
        q.kv_lora_rank = 512; q.n_rot = 64; q.mla_qk = 192; q.mla_v = 128;
        q.n_expert = 64; q.n_expert_used = 6; q.n_ff_exp = 1408; q.n_expert_shared = 2; q.n_dense_lead = 1;
        q.expert_gating = 1; q.expert_weights_scale = 1.0f;
        q.n_vocab = 102400; q.n_ctx = 163840; q.rms_eps = 1e-6f;
    } else if (strcmp(preset, "qwen35-0.8b") == 0) {
        q.arch = "qwen35"; q.n_embd = 1024; q.n_layer = 24; q.n_head = 8; q.n_head_kv = 2; q.head_dim = 256;
        q.n_rot = 64; q.n_ff = 3584; q.n_vocab = 248320; q.n_ctx = 262144; q.rope_freq_base = 10000000.0f;
        q.rms_eps = 1e-6f; q.tied_output = true;
        q.full_attn_interval = 4; q.ssm_conv = 4; q.ssm_state = 128; q.ssm_groups = 16; q.ssm_v_heads = 16;
    } else {
        return weft_error(WEFT_ERR_INVALID_ARG, "unknown preset '%s' (known: " GEN_PRESETS ")", preset);
    }
    *p = q;
    return WEFT_OK;
}

static weft_status check_n_vocab(uint32_t n_vocab, bool generated)
{
    uint32_t min = generated ? GEN_N_SPECIAL + GEN_N_BYTE + 1 : 1;
    if (n_vocab < min || n_vocab > GEN_MAX_VOCAB)
        return weft_error(WEFT_ERR_INVALID_ARG, "n_vocab %" PRIu32 " out of range [%" PRIu32 ", %u]%s",
                          n_vocab, min, GEN_MAX_VOCAB,
                          generated ? " (the generated vocab has 3 specials + 256 byte tokens)" : "");
    return WEFT_OK;
}

enum weft_type weft_gen_row_type(enum weft_type t, uint32_t row)
{
    if (row % weft_type_get(t)->block_size == 0) return t;
    switch (t) {  /* llama.cpp's llama-quantize fallbacks */
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: return WEFT_TYPE_Q4_0;
    case WEFT_TYPE_IQ4_XS: return WEFT_TYPE_IQ4_NL;
    case WEFT_TYPE_Q4_K: return WEFT_TYPE_Q5_0;
    case WEFT_TYPE_Q5_K: return WEFT_TYPE_Q5_1;
    case WEFT_TYPE_Q6_K: return WEFT_TYPE_Q8_0;
    default: return t;
    }
}

static uint32_t gen_head_dim(const struct weft_gen_params *p) { return p->head_dim ? p->head_dim : p->n_embd / p->n_head; }
static uint32_t gen_head_dim_v(const struct weft_gen_params *p) { return p->head_dim_v ? p->head_dim_v : gen_head_dim(p); }
static const char *gen_arch(const struct weft_gen_params *p) { return p->arch ? p->arch : "llama"; }
static bool gen_arch_is(const struct weft_gen_params *p, const char *a) { return strcmp(gen_arch(p), a) == 0; }
/* the families that are mixtures of experts whatever their params say */
static bool gen_moe_family(const struct weft_gen_params *p)
{
    return gen_arch_is(p, "qwen3moe") || gen_arch_is(p, "gpt-oss") || gen_arch_is(p, "deepseek2");
}
/* Mixtral's layout: llama's feed_forward_length is an expert's, there is no expert key */
static uint32_t gen_ff_key(const struct weft_gen_params *r)
{
    return gen_arch_is(r, "llama") && r->n_expert ? r->n_ff_exp : r->n_ff;
}

/* p with the family's defaults filled in (weft_gen_params' comments): what
 * gets written. The caller's params stay as given. */
static void gen_resolve(const struct weft_gen_params *p, struct weft_gen_params *r)
{
    *r = *p;
    if (!r->n_expert && gen_moe_family(r)) r->n_expert = 8;
    if (r->n_expert) {
        if (!r->n_expert_used) r->n_expert_used = r->n_expert < 2 ? r->n_expert : 2;
        if (!r->n_ff_exp) r->n_ff_exp = r->n_ff;
    }
    if (gen_arch_is(r, "gpt-oss") && !r->n_swa) r->n_swa = 128;
    if (gen_arch_is(r, "deepseek2")) {
        /* the latent cache: one KV head of [roped part | latent], the latent as V */
        uint32_t b = r->n_head ? r->n_embd / r->n_head : 0;
        if (!r->n_rot) r->n_rot = (b / 2) & ~1u;
        if (!r->kv_lora_rank) r->kv_lora_rank = 4 * b;
        if (!r->mla_qk) r->mla_qk = b + r->n_rot;
        if (!r->mla_v) r->mla_v = b;
        if (!r->head_dim) r->head_dim = r->n_rot + r->kv_lora_rank;
        if (!r->head_dim_v) r->head_dim_v = r->kv_lora_rank;
        r->n_head_kv = 1;
        if (!r->expert_gating) r->expert_gating = 1;
        if (r->n_dense_lead > r->n_layer) r->n_dense_lead = r->n_layer;
    }
    if (gen_arch_is(r, "qwen35")) {
        if (!r->full_attn_interval) r->full_attn_interval = r->n_layer < 4 ? r->n_layer : 4;
        if (!r->ssm_conv) r->ssm_conv = 4;
        if (!r->ssm_state) r->ssm_state = r->n_embd >= 1024 ? 128 : 32;
        if (!r->ssm_groups) r->ssm_groups = r->n_head_kv;
        if (!r->ssm_v_heads) r->ssm_v_heads = r->n_head;
        if (!r->n_rot && r->n_head) r->n_rot = (gen_head_dim(r) / 4) & ~1u;
    }
    if (!r->n_rot && r->n_head) r->n_rot = gen_head_dim(r);
}

/* What the family reads of resolved params (core/model.c's weft_hparams_load would
 * give the same from the file), for its tensors(). */
static void gen_hparams(const struct weft_gen_params *r, uint32_t n_vocab, struct weft_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    snprintf(hp->arch, sizeof hp->arch, "%s", gen_arch(r));
    hp->family = weft_family_find(gen_arch(r));
    hp->n_vocab = n_vocab;
    hp->n_ctx_train = r->n_ctx;
    hp->n_embd = r->n_embd;
    hp->n_layer = r->n_layer;
    hp->n_head = r->n_head;
    hp->n_head_kv = r->n_head_kv;
    hp->n_ff = gen_ff_key(r);
    hp->head_dim = gen_head_dim(r);
    hp->head_dim_v = gen_head_dim_v(r);
    hp->n_rot = r->n_rot;
    hp->n_swa = r->n_swa;
    hp->n_expert = r->n_expert;
    hp->n_expert_used = r->n_expert_used;
    hp->n_ff_exp = r->n_ff_exp;
    if (gen_arch_is(r, "qwen35")) {
        hp->full_attn_interval = r->full_attn_interval;
        hp->ssm_conv_kernel = r->ssm_conv;
        hp->ssm_state = r->ssm_state;
        hp->ssm_groups = r->ssm_groups;
        hp->ssm_dt_rank = r->ssm_v_heads;
        hp->ssm_inner = r->ssm_v_heads * r->ssm_state;
    }
    if (gen_arch_is(r, "deepseek2")) {
        hp->n_expert_shared = r->n_expert_shared;
        hp->n_dense_lead = r->n_dense_lead;
        hp->q_lora_rank = r->q_lora_rank;
        hp->kv_lora_rank = r->kv_lora_rank;
        hp->mla_qk = r->mla_qk;
        hp->mla_v = r->mla_v;
    }
}

/* A tensor to write. */
enum gen_kind { GEN_WEIGHT, GEN_NORM, GEN_BIAS };
struct gen_tensor {
    char name[96];
    enum weft_type type;   /* before choose_types: F16 for a quantizable weight, else F32 */
    uint32_t n_dims;
    int64_t ne[3];         /* ne[2]: experts (EXPERTS) or heads (MLA's attn_k_b / attn_v_b); 1 if 2-D */
    enum gen_kind kind;    /* how it is drawn: weights N(0, scale^2/ne0), norms ~1, biases ~0 */
    size_t size;
    void *data;
};

static size_t gen_size(const struct gen_tensor *t)
{
    return weft_row_size(t->type, t->ne[0]) * (size_t)t->ne[1] * (size_t)t->ne[2];
}

/* The model's tensors in llama.cpp's order (token_embd first, the layers, then
 * the rest of the model's own), names and shapes from the family's tensor
 * table (core/arch/): matrices and experts F16 (the router F32, as llama.cpp
 * writes it), norms, biases and other vectors F32. Of the optional tensors
 * only the output head (untied) and exp_probs_b (deepseek2's sigmoid gating)
 * are written. *out is malloc'd. */
static weft_status gen_list(const struct weft_gen_params *r, uint32_t n_vocab, struct gen_tensor **out, size_t *n_out)
{
    struct weft_hparams hp;
    gen_hparams(r, n_vocab, &hp);
    size_t n_max = 3 + WEFT_T_COUNT_ * (size_t)(r->n_layer + 1), n = 0;
    struct gen_tensor *t = calloc(n_max, sizeof *t);
    if (!t) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    struct weft_tensor_spec spec[WEFT_T_COUNT_];
    for (uint32_t l = 0; l <= r->n_layer + 1; l++) {
        uint32_t at = l == 0 || l == r->n_layer + 1 ? WEFT_GLOBAL_TENSORS : l - 1;
        memset(spec, 0, sizeof spec);
        hp.family->tensors(&hp, at, spec);
        for (int id = 0; id < WEFT_T_COUNT_; id++) {
            const struct weft_tensor_spec *s = &spec[id];
            if (s->use == WEFT_USE_NONE || (at == WEFT_GLOBAL_TENSORS && (id == WEFT_T_TOKEN_EMBD) != (l == 0)))
                continue;
            if (id == WEFT_T_OUTPUT && r->tied_output) continue;
            /* the optional extras (RoPE factors, ...) are not generated */
            if (s->use == WEFT_USE_OPTIONAL && id != WEFT_T_OUTPUT &&
                !(id == WEFT_T_EXP_PROBS_B && r->expert_gating == 2))
                continue;
            struct gen_tensor *d = &t[n++];
            weft_tensor_name((enum weft_tensor_id)id, at, d->name, sizeof d->name);
            enum weft_tensor_kind k = weft_tensor_info((enum weft_tensor_id)id)->kind;
            bool matrix = k == WEFT_TK_MATRIX || k == WEFT_TK_EXPERTS;
            d->kind = matrix ? GEN_WEIGHT : k == WEFT_TK_NORM ? GEN_NORM : GEN_BIAS;
            d->type = matrix && id != WEFT_T_FFN_GATE_INP ? WEFT_TYPE_F16 : WEFT_TYPE_F32;
            d->ne[0] = s->ne0;
            d->ne[1] = s->ne1 > 0 ? s->ne1 : 1;
            d->ne[2] = s->ne2 > 0 ? s->ne2 : 1;
            d->n_dims = s->ne2 > 0 ? 3 : matrix || d->ne[1] > 1 ? 2 : 1;
            d->size = gen_size(d);
        }
    }
    *out = t;
    *n_out = n;
    return WEFT_OK;
}

weft_status weft_gen_validate(const struct weft_gen_params *given)
{
    struct weft_gen_params rp;
    const struct weft_gen_params *p = &rp;
    gen_resolve(given, &rp);
    const bool mla = gen_arch_is(p, "deepseek2");
    const struct { const char *name; uint32_t v; } dims[] = {
        {"n_embd", p->n_embd}, {"n_layer", p->n_layer}, {"n_head", p->n_head},
        {"n_head_kv", p->n_head_kv}, {"n_ff", p->n_ff}, {"n_ctx", p->n_ctx},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v == 0 || dims[i].v > GEN_MAX_DIM)
            return weft_error(WEFT_ERR_INVALID_ARG, "%s %" PRIu32 " out of range [1, %u]", dims[i].name,
                              dims[i].v, GEN_MAX_DIM);
    if (p->n_layer > 1024) return weft_error(WEFT_ERR_INVALID_ARG, "n_layer %" PRIu32 " > 1024", p->n_layer);
    if (p->arch && !weft_family_find(p->arch))
        return weft_error(WEFT_ERR_INVALID_ARG, "unknown family '%s' (known: %s)", p->arch, weft_family_names());
    if (!p->head_dim && p->n_embd % p->n_head)
        return weft_error(WEFT_ERR_INVALID_ARG, "n_head %" PRIu32 " does not divide n_embd %" PRIu32,
                          p->n_head, p->n_embd);
    /* deepseek2's key_length is the latent cache's row, not a head's */
    if (p->head_dim > 512 && !mla) return weft_error(WEFT_ERR_INVALID_ARG, "head_dim %" PRIu32 " > 512", p->head_dim);
    if (p->head_dim_v > 512 || p->head_dim_v % 2)
        return weft_error(WEFT_ERR_INVALID_ARG, "head_dim_v %" PRIu32 " is not an even number up to 512", p->head_dim_v);
    if (p->n_head % p->n_head_kv)
        return weft_error(WEFT_ERR_INVALID_ARG, "n_head_kv %" PRIu32 " does not divide n_head %" PRIu32,
                          p->n_head_kv, p->n_head);
    uint32_t hd = gen_head_dim(p);
    if (hd % 2) return weft_error(WEFT_ERR_INVALID_ARG, "head dim %" PRIu32 " is odd (RoPE rotates pairs)", hd);
    if (p->n_rot == 0 || p->n_rot % 2 || p->n_rot > hd)
        return weft_error(WEFT_ERR_INVALID_ARG, "rope dims %" PRIu32 " must be even and in [2, head dim %" PRIu32 "]",
                          p->n_rot, hd);
    /* experts */
    if (p->n_expert) {
        if (!weft_family_find(gen_arch(p))->experts)
            return weft_error(WEFT_ERR_INVALID_ARG, "family '%s' has no experts (llama, qwen3moe, gpt-oss and "
                              "deepseek2 do)", gen_arch(p));
        if (p->n_expert > WEFT_MAX_EXPERTS || p->n_expert_used < 1 || p->n_expert_used > p->n_expert)
            return weft_error(WEFT_ERR_INVALID_ARG, "%" PRIu32 " experts, %" PRIu32 " used: need 1 <= used <= "
                              "experts <= %d", p->n_expert, p->n_expert_used, WEFT_MAX_EXPERTS);
        if (p->n_ff_exp > GEN_MAX_DIM)
            return weft_error(WEFT_ERR_INVALID_ARG, "expert ff %" PRIu32 " > %u", p->n_ff_exp, GEN_MAX_DIM);
    } else if (p->n_expert_used || p->n_ff_exp || p->n_expert_shared) {
        return weft_error(WEFT_ERR_INVALID_ARG, "experts used / expert ff / shared experts without experts");
    }
    if (!mla && (p->n_expert_shared || p->n_dense_lead || p->expert_gating || p->expert_weights_scale != 0.0f ||
                 p->expert_weights_norm || p->q_lora_rank || p->kv_lora_rank || p->mla_qk || p->mla_v))
        return weft_error(WEFT_ERR_INVALID_ARG, "shared experts, dense leading layers, gating, expert weights "
                          "and MLA ranks are deepseek2's (arch %s)", gen_arch(p));
    if (mla) {
        if (p->kv_lora_rank == 0 || p->kv_lora_rank > GEN_MAX_DIM || p->q_lora_rank > GEN_MAX_DIM ||
            p->mla_v == 0 || p->mla_v > GEN_MAX_DIM || p->mla_qk <= p->n_rot || p->mla_qk > GEN_MAX_DIM)
            return weft_error(WEFT_ERR_INVALID_ARG, "MLA: kv_lora_rank %" PRIu32 ", q_lora_rank %" PRIu32
                              ", key_length_mla %" PRIu32 " (> rope dims %" PRIu32 "), value_length_mla %" PRIu32
                              " out of range", p->kv_lora_rank, p->q_lora_rank, p->mla_qk, p->n_rot, p->mla_v);
        if (p->head_dim != p->n_rot + p->kv_lora_rank || p->head_dim_v != p->kv_lora_rank)
            return weft_error(WEFT_ERR_INVALID_ARG, "deepseek2: head dims %" PRIu32 "/%" PRIu32 " must be rope dims + "
                              "kv_lora_rank (%" PRIu32 ") / kv_lora_rank (%" PRIu32 ")", p->head_dim, p->head_dim_v,
                              p->n_rot + p->kv_lora_rank, p->kv_lora_rank);
        if (p->expert_gating > 2)
            return weft_error(WEFT_ERR_INVALID_ARG, "expert gating %" PRIu32 " (1 softmax, 2 sigmoid)", p->expert_gating);
        if (!(p->expert_weights_scale >= 0.0f && p->expert_weights_scale < 1e4f))
            return weft_error(WEFT_ERR_INVALID_ARG, "expert weights scale %g must be in [0, 1e4)",
                              (double)p->expert_weights_scale);
    }
    if (p->expert_groups || p->expert_group_used) {
        const uint32_t E = p->n_expert, G = p->expert_groups ? E / p->expert_groups : 0;
        const uint32_t k = p->n_expert_used ? p->n_expert_used : (E < 2 ? E : 2);
        if (p->expert_groups < 2 || p->expert_groups > 64 || !E || E % p->expert_groups || G < 2 ||
            p->expert_group_used < 1 || p->expert_group_used >= p->expert_groups || k > p->expert_group_used * G)
            return weft_error(WEFT_ERR_INVALID_ARG, "expert groups %" PRIu32 " (used %" PRIu32 ") must split %" PRIu32
                              " experts into groups of 2 or more (at most 64 groups), fewer used than there are, "
                              "holding the %" PRIu32 " chosen", p->expert_groups, p->expert_group_used, E, k);
    }
    if (p->yarn_factor != 0.0f || p->yarn_log_mul != 0.0f || p->yarn_orig_ctx) {
        if (gen_arch_is(p, "gpt-oss"))
            return weft_error(WEFT_ERR_INVALID_ARG, "gpt-oss has its own YaRN (x32 over 4096)");
        if (!(p->yarn_factor > 1.0f && p->yarn_factor <= 1024.0f) || p->yarn_orig_ctx > (1u << 24))
            return weft_error(WEFT_ERR_INVALID_ARG, "YaRN factor %g must be in (1, 1024] (original context %" PRIu32
                              ")", (double)p->yarn_factor, p->yarn_orig_ctx);
        if (p->yarn_log_mul != 0.0f && (!mla || !(p->yarn_log_mul > 0.0f && p->yarn_log_mul < 10.0f)))
            return weft_error(WEFT_ERR_INVALID_ARG, "a YaRN log multiplier (%g) is deepseek2's, in (0, 10)",
                              (double)p->yarn_log_mul);
    }
    if (gen_arch_is(p, "qwen35")) {
        if (p->full_attn_interval < 1 || p->full_attn_interval > p->n_layer || p->ssm_conv < 2 || p->ssm_conv > 64 ||
            p->ssm_state < 2 || p->ssm_state > 256 || p->ssm_state % 2 || p->ssm_groups < 1 ||
            p->ssm_v_heads > 1024 || p->ssm_v_heads % p->ssm_groups)
            return weft_error(WEFT_ERR_INVALID_ARG, "qwen35: full-attention interval %" PRIu32 " (1..layers), conv %"
                              PRIu32 " (2..64), state %" PRIu32 " (even, 2..256), %" PRIu32 " v heads (a multiple of "
                              "the %" PRIu32 " q/k heads)", p->full_attn_interval, p->ssm_conv, p->ssm_state,
                              p->ssm_v_heads, p->ssm_groups);
    } else if (p->full_attn_interval || p->ssm_conv || p->ssm_state || p->ssm_groups || p->ssm_v_heads) {
        return weft_error(WEFT_ERR_INVALID_ARG, "the Gated DeltaNet sizes are qwen35's (arch %s)", gen_arch(p));
    }
    if (gen_arch_is(p, "gpt-oss") && p->n_swa > GEN_MAX_DIM)
        return weft_error(WEFT_ERR_INVALID_ARG, "sliding window %" PRIu32 " > %u", p->n_swa, GEN_MAX_DIM);
    if (!p->vocab_from) {
        weft_status st = check_n_vocab(p->n_vocab, true);
        if (st) return st;
    }
    struct weft_qtarget q = {p->type, p->mixed};
    if (!weft_type_get(p->type) || !weft_qtarget_writable(q))
        return weft_error(WEFT_ERR_INVALID_ARG, "cannot generate weights of type %s%s "
                          "(use F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                          "IQ4_NL, IQ4_XS, MXFP4, Q4_K_M, Q5_K_M or MXFP4_MOE)",
                          weft_type_name(p->type), p->mixed ? " (mixed)" : "");
    if (!(p->rope_freq_base > 0.0f) || !isfinite(p->rope_freq_base))
        return weft_error(WEFT_ERR_INVALID_ARG, "rope freq base %g must be positive", (double)p->rope_freq_base);
    if (!(p->rms_eps > 0.0f) || !(p->rms_eps < 1.0f))
        return weft_error(WEFT_ERR_INVALID_ARG, "rms eps %g must be in (0, 1)", (double)p->rms_eps);
    if (!(p->scale > 0.0f) || !(p->scale < 1e4f))
        return weft_error(WEFT_ERR_INVALID_ARG, "scale %g must be in (0, 1e4)", (double)p->scale);
    /* rows that do not fit a K-quant's 256-block fall back (weft_gen_row_type),
     * but every quantized tensor's rows must fit the fallback (a mix's other
     * types, Q5_K/Q6_K/Q8_0/MXFP4, then fit as well: they need rows of 32) */
    struct gen_tensor *t = NULL;
    size_t n = 0;
    weft_status st = gen_list(p, p->n_vocab ? p->n_vocab : 1, &t, &n);
    for (size_t i = 0; i < n && !st; i++) {
        if (t[i].type != WEFT_TYPE_F16) continue; /* F32: not quantized */
        enum weft_type ty = weft_gen_row_type(p->type, (uint32_t)t[i].ne[0]);
        uint32_t bs = weft_type_get(ty)->block_size;
        if (t[i].ne[0] % bs)
            st = weft_error(WEFT_ERR_INVALID_ARG, "%s: rows of %" PRId64 " are not a multiple of %s's block size %"
                            PRIu32, t[i].name, t[i].ne[0], weft_type_name(ty), bs);
    }
    free(t);
    return st;
}

/* ---- vocabulary ---- */

/* SentencePiece-style pieces, all distinct: "▁", the printable ASCII chars,
 * "▁"+each of them, then lowercase strings of length 2, 3, ... each followed
 * by its "▁" form. Scores fall with the index so shorter pieces rank higher. */
struct gen_vocab {
    char (*text)[24];
    const char **ptrs;
    float *scores;
    int32_t *types;
};

static void gen_vocab_free(struct gen_vocab *v)
{
    free(v->text);
    free(v->ptrs);
    free(v->scores);
    free(v->types);
}

static weft_status gen_vocab_build(struct gen_vocab *v, uint32_t n)
{
    static const char spm_space[] = "\xe2\x96\x81";
    v->text = calloc(n, sizeof *v->text);
    v->ptrs = calloc(n, sizeof *v->ptrs);
    v->scores = calloc(n, sizeof *v->scores);
    v->types = calloc(n, sizeof *v->types);
    if (!v->text || !v->ptrs || !v->scores || !v->types) {
        gen_vocab_free(v);
        return weft_error(WEFT_ERR_NOMEM, "out of memory building a %" PRIu32 "-token vocab", n);
    }
    uint32_t i = 0;
    const char *specials[GEN_N_SPECIAL] = {"<unk>", "<s>", "</s>"};
    const int32_t special_types[GEN_N_SPECIAL] = {TT_UNKNOWN, TT_CONTROL, TT_CONTROL};
    for (int k = 0; k < GEN_N_SPECIAL; k++, i++) {
        strcpy(v->text[i], specials[k]);
        v->types[i] = special_types[k];
    }
    for (int b = 0; b < GEN_N_BYTE; b++, i++) {
        snprintf(v->text[i], sizeof v->text[i], "<0x%02X>", b);
        v->types[i] = TT_BYTE;
    }
    uint32_t first_piece = i;
    if (i < n) strcpy(v->text[i++], spm_space);
    for (int pass = 0; pass < 2; pass++)
        for (int c = 33; c < 127 && i < n; c++, i++)
            snprintf(v->text[i], sizeof v->text[i], "%s%c", pass ? spm_space : "", c);
    for (int len = 2; i < n; len++) {
        /* odometer over [a-z]^len */
        char s[16];
        memset(s, 'a', (size_t)len);
        s[len] = '\0';
        for (;;) {
            if (i < n) snprintf(v->text[i++], sizeof v->text[0], "%s", s);
            if (i < n) snprintf(v->text[i++], sizeof v->text[0], "%s%s", spm_space, s);
            if (i >= n) break;
            int k = len - 1;
            while (k >= 0 && s[k] == 'z') s[k--] = 'a';
            if (k < 0) break;
            s[k]++;
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        v->ptrs[j] = v->text[j];
        if (j >= first_piece) {
            v->types[j] = TT_NORMAL;
            v->scores[j] = -(float)(j - first_piece);
        }
    }
    return WEFT_OK;
}

/* ---- the model ---- */

/* Every matrix's type as `weft quantize` would choose it for an F16 model of
 * this shape (the target type, the row-size fallback, a mix's choices). */
static weft_status choose_types(const struct weft_gen_params *r, struct gen_tensor *t, size_t n)
{
    struct weft_qtensor *q = calloc(n ? n : 1, sizeof *q);
    if (!q) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        q[i] = (struct weft_qtensor){.name = t[i].name, .type = t[i].type, .n_dims = t[i].n_dims,
                                     .ne = {t[i].ne[0], t[i].ne[1], t[i].ne[2], 1}};
    struct weft_qmodel m = {.arch = gen_arch(r), .n_layer = r->n_layer, .n_expert = r->n_expert,
                            .n_head = r->n_head, .n_head_kv = r->n_head_kv};
    weft_status st = weft_qtarget_choose((struct weft_qtarget){r->type, r->mixed}, &m, q, n);
    for (size_t i = 0; i < n && !st; i++) {
        t[i].type = q[i].out;
        t[i].size = gen_size(&t[i]);
    }
    free(q);
    return st;
}

/* Fill t->data. Weights: std = scale/sqrt(row length) (the matmul fan-in);
 * norms: 1 + 0.02 N(0,1); biases, sinks and the other vectors: 0.1 N(0,1). */
static weft_status gen_fill(struct gen_tensor *t, uint64_t seed, float scale, float *row)
{
    uint64_t rng = stream_seed(seed, t->name);
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2];
    if (t->kind != GEN_WEIGHT) {
        bool norm = t->kind == GEN_NORM;
        float *dst = t->data;
        const size_t nl = strlen(t->name);
        if (nl >= 6 && !strcmp(t->name + nl - 6, ".ssm_a")) {
            /* a DeltaNet decay rate: -exp(A_log), negative (a positive one grows the state without bound) */
            for (int64_t i = 0; i < n * rows; i++) dst[i] = -expf(0.5f * rand_normal(&rng));
            return WEFT_OK;
        }
        for (int64_t i = 0; i < n * rows; i++) dst[i] = (norm ? 1.0f : 0.0f) + (norm ? 0.02f : 0.1f) * rand_normal(&rng);
        return WEFT_OK;
    }
    float std = scale / sqrtf((float)n);
    if (is_k_quant(t->type)) {
        gen_k_blocks(t->type, t->data, n / WEFT_QK_K * rows, std, &rng);
        return WEFT_OK;
    }
    size_t rs = weft_row_size(t->type, n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) row[i] = std * rand_normal(&rng);
        if (!weft_quantize_row(t->type, row, (unsigned char *)t->data + (size_t)r * rs, n))
            return weft_error(WEFT_ERR_UNSUPPORTED, "no quantizer for %s", weft_type_name(t->type));
    }
    return WEFT_OK;
}

/* Every tensor draws from its own stream (seeded by its name), so tensors
 * fill in parallel with the same bytes as one after another. */
struct fill_job {
    struct gen_tensor *t;
    size_t n, next;
    const struct weft_gen_params *p;
    uint32_t row_len;
    pthread_mutex_t mu;
    weft_status st;
    char err[256];
};

static void *fill_worker(void *arg)
{
    struct fill_job *j = arg;
    float *row = malloc(sizeof *row * j->row_len);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->st == WEFT_OK && row ? j->next++ : j->n;
        if (!row && j->st == WEFT_OK) j->st = weft_error(WEFT_ERR_NOMEM, "out of memory");
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n) break;
        weft_status st = gen_fill(&j->t[i], j->p->seed, j->p->scale, row);
        if (st != WEFT_OK) {
            pthread_mutex_lock(&j->mu);
            if (j->st == WEFT_OK) {
                j->st = st;
                snprintf(j->err, sizeof j->err, "%s", weft_last_error());
            }
            pthread_mutex_unlock(&j->mu);
        }
    }
    free(row);
    return NULL;
}

static weft_status fill_parallel(struct gen_tensor *t, size_t n, const struct weft_gen_params *p, uint32_t row_len)
{
    struct fill_job j = {.t = t, .n = n, .p = p, .row_len = row_len, .st = WEFT_OK};
    pthread_mutex_init(&j.mu, NULL);
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nc < 1 ? 1 : nc > 64 ? 64 : (int)nc;
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < nt; i++)
        if (pthread_create(&tid[started], NULL, fill_worker, &j) == 0) started++;
    fill_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.st != WEFT_OK) return weft_error(j.st, "%s", j.err);
    return WEFT_OK;
}

static bool skip_non_tokenizer(const char *key) { return strncmp(key, "tokenizer.", 10) != 0; }

/* Copy tokenizer.* from p->vocab_from into w; *n_vocab = its token count. */
static weft_status copy_vocab(struct weft_gguf_writer *w, const char *path, uint32_t *n_vocab)
{
    struct weft_gguf *src = NULL;
    weft_status st = weft_gguf_open(path, &src);
    if (st) return st;
    int64_t k = weft_gguf_find_key(src, "tokenizer.ggml.tokens");
    if (k < 0 || weft_gguf_kv_type(src, k) != WEFT_GGUF_ARRAY || weft_gguf_arr_type(src, k) != WEFT_GGUF_STRING) {
        st = weft_error(WEFT_ERR_FORMAT, "%s: no tokenizer.ggml.tokens string array to copy the vocab from", path);
    } else if (weft_gguf_arr_len(src, k) > GEN_MAX_VOCAB || weft_gguf_arr_len(src, k) == 0) {
        st = weft_error(WEFT_ERR_FORMAT, "%s: vocab of %" PRIu64 " tokens out of range", path,
                        weft_gguf_arr_len(src, k));
    } else {
        *n_vocab = (uint32_t)weft_gguf_arr_len(src, k);
        st = weft_gguf_writer_copy_kvs(w, src, skip_non_tokenizer);
    }
    weft_gguf_close(src);
    return st;
}

static weft_status set_hparams(struct weft_gguf_writer *w, const struct weft_gen_params *p, uint32_t n_vocab)
{
    weft_status st = WEFT_OK;
#define SET(call) do { if (!st) st = (call); } while (0)
    const char *a = gen_arch(p);
    char k[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, a), k)
    SET(weft_gguf_writer_set_str(w, "general.architecture", a));
    SET(weft_gguf_writer_set_str(w, "general.name", p->name ? p->name : "weft-gen"));
    struct weft_qtarget q = {p->type, p->mixed};
    SET(weft_gguf_writer_set_u32(w, "general.file_type", (uint32_t)weft_qtarget_ftype(q)));
    if (weft_type_get(p->type)->is_quantized)
        SET(weft_gguf_writer_set_u32(w, "general.quantization_version", 2));
    SET(weft_gguf_writer_set_u32(w, KEY("context_length"), p->n_ctx));
    SET(weft_gguf_writer_set_u32(w, KEY("embedding_length"), p->n_embd));
    SET(weft_gguf_writer_set_u32(w, KEY("block_count"), p->n_layer));
    SET(weft_gguf_writer_set_u32(w, KEY("feed_forward_length"), gen_ff_key(p)));
    SET(weft_gguf_writer_set_u32(w, KEY("attention.head_count"), p->n_head));
    SET(weft_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), p->n_head_kv));
    SET(weft_gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_freq_base));
    SET(weft_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps));
    /* the MoE families' converters write the head sizes whatever they are */
    if (p->head_dim || p->head_dim_v || gen_moe_family(p) || !strcmp(a, "qwen35")) {
        SET(weft_gguf_writer_set_u32(w, KEY("attention.key_length"), gen_head_dim(p)));
        SET(weft_gguf_writer_set_u32(w, KEY("attention.value_length"), gen_head_dim_v(p)));
    }
    SET(weft_gguf_writer_set_u32(w, KEY("rope.dimension_count"), p->n_rot));
    if (!strcmp(a, "gemma3")) {
        SET(weft_gguf_writer_set_u32(w, KEY("attention.sliding_window"), p->n_swa ? p->n_swa : 1024));
        SET(weft_gguf_writer_set_u32(w, KEY("attention.sliding_window_pattern"), p->swa_pattern ? p->swa_pattern : 6));
        SET(weft_gguf_writer_set_f32(w, KEY("rope.freq_base_swa"), 10000.0f));
    }
    if (!strcmp(a, "gpt-oss")) {
        /* gpt-oss's window (even layers) and its YaRN: x32 over 4096 positions */
        SET(weft_gguf_writer_set_u32(w, KEY("attention.sliding_window"), p->n_swa));
        SET(weft_gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn"));
        SET(weft_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 32.0f));
        SET(weft_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), 4096));
    }
    if (p->yarn_factor != 0.0f) {
        SET(weft_gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn"));
        SET(weft_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), p->yarn_factor));
        SET(weft_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                     p->yarn_orig_ctx ? p->yarn_orig_ctx : 4096));
        if (p->yarn_log_mul != 0.0f)
            SET(weft_gguf_writer_set_f32(w, KEY("rope.scaling.yarn_log_multiplier"), p->yarn_log_mul));
    }
    if (!strcmp(a, "deepseek2")) {
        SET(weft_gguf_writer_set_u32(w, KEY("leading_dense_block_count"), p->n_dense_lead));
        if (p->q_lora_rank) SET(weft_gguf_writer_set_u32(w, KEY("attention.q_lora_rank"), p->q_lora_rank));
        SET(weft_gguf_writer_set_u32(w, KEY("attention.kv_lora_rank"), p->kv_lora_rank));
        SET(weft_gguf_writer_set_u32(w, KEY("attention.key_length_mla"), p->mla_qk));
        SET(weft_gguf_writer_set_u32(w, KEY("attention.value_length_mla"), p->mla_v));
    }
    if (!strcmp(a, "qwen35")) {
        /* the text positions of Qwen3.5's multi-section rope: every section one stream (pairs
         * split 11:11:10 as the real files do) */
        const int32_t pairs = (int32_t)p->n_rot / 2, sec = (pairs * 11 + 16) / 32;
        const int32_t sections[4] = {sec, sec, pairs - 2 * sec, 0};
        SET(weft_gguf_writer_set_u32(w, KEY("full_attention_interval"), p->full_attn_interval));
        SET(weft_gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), p->ssm_conv));
        SET(weft_gguf_writer_set_u32(w, KEY("ssm.state_size"), p->ssm_state));
        SET(weft_gguf_writer_set_u32(w, KEY("ssm.group_count"), p->ssm_groups));
        SET(weft_gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), p->ssm_v_heads));
        SET(weft_gguf_writer_set_u32(w, KEY("ssm.inner_size"), p->ssm_v_heads * p->ssm_state));
        SET(weft_gguf_writer_set_arr_i32(w, KEY("rope.dimension_sections"), sections, 4));
    }
    if (p->n_expert) {
        if (strcmp(a, "llama") != 0)  /* Mixtral: feed_forward_length is the expert's */
            SET(weft_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), p->n_ff_exp));
        SET(weft_gguf_writer_set_u32(w, KEY("expert_count"), p->n_expert));
        SET(weft_gguf_writer_set_u32(w, KEY("expert_used_count"), p->n_expert_used));
        if (p->expert_groups) {
            SET(weft_gguf_writer_set_u32(w, KEY("expert_group_count"), p->expert_groups));
            SET(weft_gguf_writer_set_u32(w, KEY("expert_group_used_count"), p->expert_group_used));
        }
        if (!strcmp(a, "deepseek2")) {
            SET(weft_gguf_writer_set_u32(w, KEY("expert_shared_count"), p->n_expert_shared));
            SET(weft_gguf_writer_set_f32(w, KEY("expert_weights_scale"),
                                         p->expert_weights_scale > 0.0f ? p->expert_weights_scale : 1.0f));
            SET(weft_gguf_writer_set_bool(w, KEY("expert_weights_norm"), p->expert_weights_norm));
            SET(weft_gguf_writer_set_u32(w, KEY("expert_gating_func"), p->expert_gating));
        }
    }
    SET(weft_gguf_writer_set_u32(w, KEY("vocab_size"), n_vocab));
#undef KEY
#undef SET
    return st;
}

static weft_status set_vocab(struct weft_gguf_writer *w, uint32_t n_vocab)
{
    struct gen_vocab v = {0};
    weft_status st = gen_vocab_build(&v, n_vocab);
    if (st) return st;
#define SET(call) do { if (!st) st = (call); } while (0)
    SET(weft_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
    SET(weft_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.ptrs, n_vocab));
    SET(weft_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", v.scores, n_vocab));
    SET(weft_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v.types, n_vocab));
    SET(weft_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
    SET(weft_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2));
    SET(weft_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    SET(weft_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    SET(weft_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));
#undef SET
    gen_vocab_free(&v);
    return st;
}

static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

weft_status weft_gen_model(const struct weft_gen_params *given, const char *out_path)
{
    weft_status st = weft_gen_validate(given);
    if (st) return st;
    struct weft_gen_params rp;
    const struct weft_gen_params *p = &rp;
    gen_resolve(given, &rp);

    struct weft_gguf_writer *w = NULL;
    struct gen_tensor *tensors = NULL;
    struct weft_scratch scratch = {0};
    uint32_t n_vocab = p->n_vocab;
    size_t n = 0;

    if ((st = weft_gguf_writer_init(&w))) goto out;
    /* general.* and llama.* first (llama.cpp's order), then the vocab */
    if ((st = set_hparams(w, p, n_vocab))) goto out;
    if (p->vocab_from) {
        if ((st = copy_vocab(w, p->vocab_from, &n_vocab))) goto out;
        if ((st = check_n_vocab(n_vocab, false))) goto out;
        char vk[96];
        snprintf(vk, sizeof vk, "%s.vocab_size", gen_arch(p));
        if ((st = weft_gguf_writer_set_u32(w, vk, n_vocab))) goto out;
    } else if ((st = set_vocab(w, n_vocab))) {
        goto out;
    }

    /* shapes: ne[0] is the row (input) length, as in llama.cpp */
    if ((st = gen_list(p, n_vocab, &tensors, &n))) goto out;
    if ((st = choose_types(p, tensors, n))) goto out;

    size_t total = 0;
    uint32_t widest = 1;
    for (size_t i = 0; i < n; i++) {
        total += (tensors[i].size + 63) & ~(size_t)63;
        if (tensors[i].ne[0] > widest) widest = (uint32_t)tensors[i].ne[0];
    }
    char dir[4096];
    dir_of(out_path, dir, sizeof dir);
    if ((st = weft_scratch_init(&scratch, total, dir))) goto out;
    for (size_t i = 0; i < n; i++) tensors[i].data = weft_scratch_take(&scratch, tensors[i].size);
    if ((st = fill_parallel(tensors, n, p, widest))) goto out;
    for (size_t i = 0; i < n; i++) {
        struct gen_tensor *t = &tensors[i];
        if ((st = weft_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data))) goto out;
    }
    st = weft_gguf_writer_write(w, out_path);

out:
    if (w) weft_gguf_writer_free(w);
    weft_scratch_free(&scratch);
    free(tensors);
    return st;
}

/* ---- CLI ---- */

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: weft gen -o OUT [--preset NAME] [--arch FAMILY] [--type F16]\n"
            "                [--embd N] [--layers N] [--heads N] [--kv-heads N] [--ff N]\n"
            "                [--vocab N] [--ctx N] [--rope-base F] [--rms-eps F] [--tied|--untied]\n"
            "                [--head-dim N] [--head-dim-v N] [--rope-dims N] [--swa N] [--swa-pattern N]\n"
            "                [--experts N] [--experts-used K] [--expert-ff F] [--shared-experts N]\n"
            "                [--dense-lead N] [--gating softmax|sigmoid] [--weights-scale F] [--weights-norm]\n"
            "                [--q-lora N] [--kv-lora N] [--mla-qk N] [--mla-v N]\n"
            "                [--expert-groups N --groups-used M] [--yarn F [--yarn-orig-ctx N] [--yarn-log-mul M]]\n"
            "                [--full-attn-interval N] [--ssm-conv N] [--ssm-state N] [--ssm-groups N]\n"
            "                [--ssm-v-heads N] [--seed N] [--scale F] [--name S] [--vocab-from FILE]\n"
            "Writes a random-weight GGUF of a family weft runs (default preset: tiny, a llama).\n"
            "--arch: llama qwen2 qwen3 qwen3moe qwen35 gpt-oss deepseek2 phi3 gemma3.\n"
            "--preset: tiny (n_embd 256, 2 layers, vocab 512; with --arch any family: a tiny one of it),\n"
            "  smollm2-135m llama3-8b qwen2.5-7b qwen3-0.6b qwen3-8b phi4-mini gemma3-4b (those shapes), and\n"
            "  mixtures of experts:\n"
            "  tiny-moe          qwen3moe, tiny's shape, 8 experts top 2 of 256 rows\n"
            "  mixtral-8x7b      llama with experts: 4096/32 layers/32 heads/8 kv, 8 experts top 2 of 14336\n"
            "  olmoe-1b-7b       (as qwen3moe) 2048/16/16/16, head_dim 128, 64 experts top 8 of 1024, vocab 50304\n"
            "  qwen3-30b-a3b     qwen3moe 2048/48/32/4, head_dim 128, 128 experts top 8 of 768, vocab 151936\n"
            "  qwen3-30b-a3b-l8  the same with 8 layers (Q4_K_M: 3.2 GiB, for benchmarks)\n"
            "  gpt-oss-20b       gpt-oss 2880/24/64/8, head_dim 64, 32 experts top 4 of 2880, window 128\n"
            "  deepseek-v2-lite  deepseek2 2048/27/16 heads, MLA kv_lora 512, rope 64, qk_nope 128, v 128,\n"
            "                    1 dense layer (ff 10944), 64 experts top 6 of 1408 + 2 shared, vocab 102400\n"
            "  and the hybrid qwen35-0.8b (Qwen3.5-0.8B: 1024/24 layers, attention on 1 in 4: 8 heads/2 kv of\n"
            "  256, rope 64; Gated DeltaNet 16 q/k and 16 v heads of 128, conv 4; ff 3584, vocab 248320).\n"
            "qwen35: --full-attn-interval (4, or the layers when fewer: layers 3, 7, ... attend), --ssm-conv (4), --ssm-state (128;\n"
            "32 under 1024 wide), --ssm-groups (q/k heads: --kv-heads), --ssm-v-heads (--heads).\n"
            "Experts: --experts N (qwen3moe, gpt-oss, deepseek2: 8 unless given; llama: Mixtral's layout),\n"
            "--experts-used K (default 2), --expert-ff F (an expert's rows; default --ff). deepseek2 also:\n"
            "--shared-experts, --dense-lead (leading dense layers, --ff wide), --gating (sigmoid adds\n"
            "exp_probs_b), --weights-scale, --weights-norm, and MLA's --q-lora (0: plain attn_q), --kv-lora,\n"
            "--rope-dims, --mla-qk (key_length_mla), --mla-v (value_length_mla); by default, per head\n"
            "b = embd/heads: kv-lora 4b, rope b/2, mla-qk b + rope, mla-v b. gpt-oss: --swa (default 128).\n"
            "--expert-groups N --groups-used M: group-limited routing (DeepSeek V3: 8 and 4), any family\n"
            "with experts. --yarn F: YaRN rope scaling by F over --yarn-orig-ctx positions (4096), any\n"
            "family but gpt-oss (its own x32); deepseek2 also --yarn-log-mul (DeepSeek V3's 0.1).\n"
            "Every matrix is in --type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K\n"
            "IQ4_NL IQ4_XS MXFP4), or llama.cpp's mix Q4_K_M, Q5_K_M or MXFP4_MOE (per-tensor types as weft\n"
            "quantize chooses them; MXFP4_MOE: experts MXFP4, the rest Q8_0); norms, biases, sinks and\n"
            "routers are F32. --vocab-from copies the tokenizer.* keys (and vocab size) of another GGUF.\n");
}

static bool parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') return false;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool parse_f32(const char *s, float *out)
{
    char *end;
    errno = 0;
    if (!s || !*s) return false;
    float v = strtof(s, &end);
    if (errno || *end) return false;
    *out = v;
    return true;
}

int weft_cmd_gen(int argc, char **argv)
{
    struct weft_gen_params p;
    const char *out = NULL;
    /* the preset first, so that other flags override it wherever they appear */
    const char *preset = "tiny";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { gen_usage(stdout); return 0; }
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) preset = argv[++i];
    }
    if (weft_gen_preset(&p, preset)) {
        fprintf(stderr, "weft: gen: %s\n", weft_last_error());
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) { out = v; ok = v != NULL; }
        else if (strcmp(a, "--preset") == 0) ok = v != NULL;
        else if (strcmp(a, "--type") == 0) {
            struct weft_qtarget q;
            ok = v && weft_qtarget_parse(v, &q);
            if (ok) { p.type = q.type; p.mixed = q.mixed; }
        }
        else if (strcmp(a, "--embd") == 0) ok = parse_u32(v, &p.n_embd);
        else if (strcmp(a, "--layers") == 0) ok = parse_u32(v, &p.n_layer);
        else if (strcmp(a, "--heads") == 0) ok = parse_u32(v, &p.n_head);
        else if (strcmp(a, "--kv-heads") == 0) ok = parse_u32(v, &p.n_head_kv);
        else if (strcmp(a, "--ff") == 0) ok = parse_u32(v, &p.n_ff);
        else if (strcmp(a, "--vocab") == 0) ok = parse_u32(v, &p.n_vocab);
        else if (strcmp(a, "--ctx") == 0) ok = parse_u32(v, &p.n_ctx);
        else if (strcmp(a, "--rope-base") == 0) ok = parse_f32(v, &p.rope_freq_base);
        else if (strcmp(a, "--rms-eps") == 0) ok = parse_f32(v, &p.rms_eps);
        else if (strcmp(a, "--scale") == 0) ok = parse_f32(v, &p.scale);
        else if (strcmp(a, "--seed") == 0) ok = parse_u64(v, &p.seed);
        else if (strcmp(a, "--name") == 0) { p.name = v; ok = v != NULL; }
        else if (strcmp(a, "--arch") == 0) { p.arch = v; ok = v != NULL; }
        else if (strcmp(a, "--head-dim") == 0) ok = parse_u32(v, &p.head_dim);
        else if (strcmp(a, "--head-dim-v") == 0) ok = parse_u32(v, &p.head_dim_v);
        else if (strcmp(a, "--swa") == 0) ok = parse_u32(v, &p.n_swa);
        else if (strcmp(a, "--swa-pattern") == 0) ok = parse_u32(v, &p.swa_pattern);
        else if (strcmp(a, "--rope-dims") == 0) ok = parse_u32(v, &p.n_rot);
        else if (strcmp(a, "--experts") == 0) ok = parse_u32(v, &p.n_expert);
        else if (strcmp(a, "--experts-used") == 0) ok = parse_u32(v, &p.n_expert_used);
        else if (strcmp(a, "--expert-ff") == 0) ok = parse_u32(v, &p.n_ff_exp);
        else if (strcmp(a, "--shared-experts") == 0) ok = parse_u32(v, &p.n_expert_shared);
        else if (strcmp(a, "--dense-lead") == 0) ok = parse_u32(v, &p.n_dense_lead);
        else if (strcmp(a, "--gating") == 0) {
            ok = v && (!strcmp(v, "softmax") || !strcmp(v, "sigmoid"));
            if (ok) p.expert_gating = !strcmp(v, "softmax") ? 1 : 2;
        }
        else if (strcmp(a, "--weights-scale") == 0) ok = parse_f32(v, &p.expert_weights_scale);
        else if (strcmp(a, "--weights-norm") == 0) { p.expert_weights_norm = true; takes = false; }
        else if (strcmp(a, "--q-lora") == 0) ok = parse_u32(v, &p.q_lora_rank);
        else if (strcmp(a, "--kv-lora") == 0) ok = parse_u32(v, &p.kv_lora_rank);
        else if (strcmp(a, "--mla-qk") == 0) ok = parse_u32(v, &p.mla_qk);
        else if (strcmp(a, "--mla-v") == 0) ok = parse_u32(v, &p.mla_v);
        else if (strcmp(a, "--expert-groups") == 0) ok = parse_u32(v, &p.expert_groups);
        else if (strcmp(a, "--groups-used") == 0) ok = parse_u32(v, &p.expert_group_used);
        else if (strcmp(a, "--yarn") == 0) ok = parse_f32(v, &p.yarn_factor);
        else if (strcmp(a, "--yarn-orig-ctx") == 0) ok = parse_u32(v, &p.yarn_orig_ctx);
        else if (strcmp(a, "--yarn-log-mul") == 0) ok = parse_f32(v, &p.yarn_log_mul);
        else if (strcmp(a, "--full-attn-interval") == 0) ok = parse_u32(v, &p.full_attn_interval);
        else if (strcmp(a, "--ssm-conv") == 0) ok = parse_u32(v, &p.ssm_conv);
        else if (strcmp(a, "--ssm-state") == 0) ok = parse_u32(v, &p.ssm_state);
        else if (strcmp(a, "--ssm-groups") == 0) ok = parse_u32(v, &p.ssm_groups);
        else if (strcmp(a, "--ssm-v-heads") == 0) ok = parse_u32(v, &p.ssm_v_heads);
        else if (strcmp(a, "--vocab-from") == 0) { p.vocab_from = v; ok = v != NULL; }
        else if (strcmp(a, "--tied") == 0) { p.tied_output = true; takes = false; }
        else if (strcmp(a, "--untied") == 0) { p.tied_output = false; takes = false; }
        else {
            fprintf(stderr, "weft: gen: unknown argument '%s'\n", a);
            gen_usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "weft: gen: %s needs a valid value%s%s%s\n", a, v ? " (got '" : "", v ? v : "",
                    v ? "')" : "");
            return 2;
        }
        if (takes) i++;
    }
    if (!out) {
        fprintf(stderr, "weft: gen: -o OUT is required\n");
        gen_usage(stderr);
        return 2;
    }
    if (weft_gen_validate(&p)) {
        fprintf(stderr, "weft: gen: %s\n", weft_last_error());
        return 2;
    }
    weft_status st = weft_gen_model(&p, out);
    if (st) {
        fprintf(stderr, "weft: gen: %s\n", *weft_last_error() ? weft_last_error() : weft_status_str(st));
        return 1;
    }
    struct weft_gen_params r; /* with the family's defaults, as written */
    gen_resolve(&p, &r);
    printf("wrote %s: %s, n_embd %" PRIu32 ", %" PRIu32 " layers, %" PRIu32 "/%" PRIu32 " heads, n_ff %" PRIu32
           ", %s, seed %" PRIu64 "%s\n",
           out, gen_arch(&r), r.n_embd, r.n_layer, r.n_head, r.n_head_kv, gen_ff_key(&r),
           weft_qtarget_name((struct weft_qtarget){r.type, r.mixed}), r.seed,
           r.tied_output ? ", tied output" : "");
    if (r.n_expert)
        printf("  experts: %" PRIu32 " of %" PRIu32 " per token, %" PRIu32 " rows each, %" PRIu32 " shared\n",
               r.n_expert_used, r.n_expert, r.n_ff_exp, r.n_expert_shared);
    return 0;
}
