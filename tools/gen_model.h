/* Random-weight GGUF generator (`weft gen`).
 *
 * Writes a model of a family weft runs (core/arch/: llama, with or without
 * experts, qwen2, qwen3, qwen3moe, qwen35, gpt-oss, deepseek2, phi3, gemma3) as
 * llama.cpp's converter would: the same tensor names, shapes (experts and
 * MLA's per-head matrices 3-D) and hyperparameter keys, weights drawn deterministically from
 * `seed`, and either a generated SentencePiece-style vocabulary or the
 * tokenizer.* keys copied from another GGUF. Used by tests to make models of
 * any shape and type without shipping files. */
#ifndef WEFT_GEN_MODEL_H
#define WEFT_GEN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "base/types.h"

struct weft_gen_params {
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_freq_base, rms_eps;
    enum weft_type type;     /* every matrix and expert tensor; norms, biases, sinks and
                                routers are always F32 */
    bool tied_output;        /* no output.weight: token_embd doubles as lm_head */
    uint64_t seed;
    const char *vocab_from;  /* GGUF to copy tokenizer.* keys from (n_vocab then
                                comes from its token list), or NULL */
    float scale;             /* weight std = scale / sqrt(row length); 1 keeps
                                activations and logits O(1) */
    const char *name;        /* general.name; NULL -> "weft-gen" */
    const char *arch;        /* a family of core/arch/ ("llama", "qwen3"); NULL: llama */
    uint32_t head_dim;       /* 0: n_embd / n_head; else written as attention.key_length
                                and value_length (qwen3's q width H·D need not be E) */
    uint32_t head_dim_v;     /* 0: head_dim; else V's head dim (attention.value_length),
                                K's written too */
    uint32_t n_swa, swa_pattern;  /* gemma3: attention.sliding_window (0: 1024) and
                                     sliding_window_pattern (0: 6); gpt-oss: its
                                     sliding_window (0: 128; the pattern is fixed, 2) */
    bool mixed;              /* type is the default of llama.cpp's mix (Q4_K: Q4_K_M,
                                Q5_K: Q5_K_M, MXFP4: MXFP4_MOE): per-tensor types as
                                llama-quantize chooses them (weft_qtarget_choose) */
    /* A mixture of experts in place of the dense FFN: the router ffn_gate_inp
     * (F32, as llama.cpp writes it) and ffn_{gate,up,down}_exps, 3-D tensors
     * [row, rows, n_expert] quantized like the matrices (MXFP4_MOE: MXFP4). */
    uint32_t n_expert;       /* expert_count; 0: dense (llama), 8 (qwen3moe, gpt-oss, deepseek2) */
    uint32_t n_expert_used;  /* expert_used_count; 0: min(2, n_expert) */
    uint32_t n_ff_exp;       /* an expert's rows (expert_feed_forward_length); 0: n_ff. llama
                                (Mixtral) has no such key: its feed_forward_length is written */
    uint32_t n_expert_shared;   /* deepseek2: expert_shared_count (ffn_*_shexp, n_ff_exp each) */
    uint32_t n_dense_lead;      /* deepseek2: leading_dense_block_count (their FFN: n_ff) */
    uint32_t expert_gating;     /* deepseek2: expert_gating_func, 1 softmax (0 too), 2 sigmoid
                                   (then with exp_probs_b, as DeepSeek V3) */
    float expert_weights_scale; /* deepseek2: expert_weights_scale; 0: 1 */
    bool expert_weights_norm;   /* deepseek2: expert_weights_norm */
    /* deepseek2's multi-head latent attention, per head b = n_embd / n_head
     * (0s: the default in brackets): q_lora_rank (0: a plain attn_q),
     * kv_lora_rank [4b], n_rot (rope.dimension_count) [b/2, even], mla_qk
     * (key_length_mla) [b + n_rot], mla_v (value_length_mla) [b]. The file's
     * key_length is then n_rot + kv_lora_rank, value_length kv_lora_rank and
     * head_count_kv 1 (the latent cache; n_head_kv is not used, head_dim and
     * head_dim_v must be 0 or those). Other families: n_rot is rope.dimension_count (0: the
     * head dim). */
    uint32_t q_lora_rank, kv_lora_rank, n_rot, mla_qk, mla_v;
    /* group-limited routing (any family with experts; DeepSeek V3: 8 groups, 4 used):
     * expert_group_count / expert_group_used_count; 0: none */
    uint32_t expert_groups, expert_group_used;
    /* YaRN (any family but gpt-oss, which has its own): rope.scaling.type yarn, factor
     * yarn_factor (0: none), original_context_length yarn_orig_ctx (0: 4096), and deepseek2's
     * rope.scaling.yarn_log_multiplier yarn_log_mul (0: none; DeepSeek V3 writes 0.1) */
    float yarn_factor, yarn_log_mul;
    uint32_t yarn_orig_ctx;
    /* qwen35's Gated DeltaNet layers (0s: the default in brackets): every full_attn_interval-th
     * layer [4] has attention, the others the delta rule over ssm_v_heads [n_head] v heads and
     * ssm_groups [n_head_kv] q/k heads of ssm_state [128, 32 under n_embd 1024] with a causal
     * conv of ssm_conv [4] taps; attn_q carries each head's output gate; n_rot [head dim / 4] */
    uint32_t full_attn_interval, ssm_conv, ssm_state, ssm_groups, ssm_v_heads;
};

/* Fill *p with a preset: "tiny" (n_embd 256, 2 layers, vocab 512: small enough
 * for tests, valid for every type incl. K-quants; with arch set to any family,
 * and n_expert for llama, a tiny model of it), "smollm2-135m" (the
 * SmolLM2-135M shape: 576/30/9/3/1536/49152, tied), "llama3-8b", "qwen2.5-7b",
 * "qwen3-0.6b", "qwen3-8b", "phi4-mini", "gemma3-4b" (those models' shapes,
 * family and rope bases), and mixtures of experts:
 *   "tiny-moe"          qwen3moe, tiny's shape, 8 experts top 2 of 256 rows
 *   "mixtral-8x7b"      llama with experts: 4096/32/32/8, 8 experts top 2 of 14336, vocab 32000
 *   "olmoe-1b-7b"       OLMoE's shape as a qwen3moe: 2048/16/16/16, head_dim 128,
 *                       64 experts top 8 of 1024, vocab 50304
 *   "qwen3-30b-a3b"     qwen3moe: 2048/48/32/4, head_dim 128, 128 experts top 8 of 768,
 *                       vocab 151936; "qwen3-30b-a3b-l8" the same with 8 layers
 *                       (Q4_K_M: 3.2 GiB, for benchmarks)
 *   "gpt-oss-20b"       gpt-oss: 2880/24/64/8, head_dim 64, 32 experts top 4 of 2880,
 *                       sliding window 128, YaRN x32, vocab 201088
 *   "deepseek-v2-lite"  deepseek2: 2048/27/16 heads, MLA (q_lora 0, kv_lora 512, rope 64,
 *                       qk_nope 128, v 128), 1 dense layer of 10944, then 64 experts top 6
 *                       of 1408 + 2 shared, softmax gating, vocab 102400
 * and the hybrid "qwen35-0.8b" (Qwen3.5-0.8B's published shape: 1024/24 layers, one in four
 * with attention of 8 heads / 2 KV of 256, rope 64; Gated DeltaNet 16 q/k and 16 v heads of
 * 128, conv 4; ff 3584, vocab 248320, tied).
 * Type F16, seed 1, scale 1.
 * Returns WEFT_ERR_INVALID_ARG for an unknown name (p is then untouched). */
weft_status weft_gen_preset(struct weft_gen_params *p, const char *preset);

/* Check params without writing anything: positive sizes, n_head | n_embd,
 * n_head_kv | n_head, even head dim, a weight type we can generate, every
 * quantized tensor's rows a multiple of its type's block size (after the
 * fallback), room for the generated vocab, sane floats, the experts (at most
 * 512, 1 <= used <= count) and MLA's sizes.
 * WEFT_ERR_INVALID_ARG with a message naming the problem. vocab_from is not
 * opened here. */
weft_status weft_gen_validate(const struct weft_gen_params *p);

/* The type a row of `row` elements gets when the model type is t: t itself
 * if the row fits t's blocks, else llama-quantize's fallback (Q2_K, Q3_K ->
 * Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL), so e.g.
 * SmolLM2's 576-wide rows work in a "Q4_K" model with only n_ff-wide rows in
 * Q4_K, as llama.cpp would. Types without a fallback give t (which the row
 * then does not fit); the fallback itself may not fit either. */
enum weft_type weft_gen_row_type(enum weft_type t, uint32_t row);

/* Generate and write the model to out_path. On failure returns the error
 * (message in weft_last_error()); out_path may then be missing or partial.
 * Tensor data lives in memory until written; above 1 GiB it is backed by an
 * unlinked scratch file next to out_path (needs that much free disk there),
 * so its pages are file-backed and the kernel can evict them under pressure. */
weft_status weft_gen_model(const struct weft_gen_params *p, const char *out_path);

/* llama.cpp's LLAMA_FTYPE for a model whose weights are all `t`, the number
 * llama-quantize --pure writes for that type name (F32 0, F16 1, Q4_0 2,
 * Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q2_K 10, Q3_K 12 and Q4_K 15 and Q5_K 17
 * (llama-quantize's "Q3_K"/"Q4_K"/"Q5_K" are aliases of the _M mixes),
 * Q6_K 18, IQ4_NL 25, IQ4_XS 30, BF16 32, MXFP4 38 (MXFP4_MOE)); -1 for types
 * that are not weight types. */
int weft_gen_ftype(enum weft_type t);

/* ---- quantization targets (tools/quantize.c): `weft quantize` and `weft gen --type` ---- */

/* A TYPE argument: one weight type for every matrix, as llama-quantize --pure
 * writes it, or one of llama.cpp's mixes (mixed: Q4_K_M, Q5_K_M, MXFP4_MOE,
 * `type` then being the mix's default type), whose per-tensor types follow
 * llama-quantize's llama_tensor_get_type. */
struct weft_qtarget {
    enum weft_type type;
    bool mixed;
};

/* Parse a type name ("Q4_K", "q8_0", ...) or a mix ("Q4_K_M", "Q5_K_M",
 * "MXFP4_MOE"), case-insensitive. Only the name is checked: whether `type`
 * has a quantizer is weft_qtarget_writable's. Returns false if unknown. */
bool weft_qtarget_parse(const char *name, struct weft_qtarget *out);
/* "Q4_K_M", "Q4_K", ...: static storage. */
const char *weft_qtarget_name(struct weft_qtarget q);
/* A weight type weft can write (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K
 * Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4, or a mix). */
bool weft_qtarget_writable(struct weft_qtarget q);
/* general.file_type: the mix's LLAMA_FTYPE (15, 17, 38) or weft_gen_ftype(type). */
int weft_qtarget_ftype(struct weft_qtarget q);

/* Why a tensor got the type it got. */
enum weft_qwhy {
    WEFT_QWHY_TARGET,    /* the target type (or the mix's default) */
    WEFT_QWHY_MIX,       /* the mix chose another type for this tensor */
    WEFT_QWHY_FALLBACK,  /* its rows do not fit the chosen type: llama-quantize's
                            fallback (weft_gen_row_type), F16 if that does not fit either */
    WEFT_QWHY_KEPT,      /* its rows fit neither, and the type has no fallback: keeps its type */
    WEFT_QWHY_VECTOR,    /* 1-D (norms, biases): F32 */
    WEFT_QWHY_NOT_QUANTIZED, /* a tensor llama-quantize never quantizes (routers,
                                conv1d, position embeddings, ...): keeps its type */
};

/* A tensor as the choice sees it; `out` and `why` are the answer. */
struct weft_qtensor {
    const char *name;
    enum weft_type type;    /* its type now (weft gen: F16, as llama-quantize would see it) */
    uint32_t n_dims;
    int64_t ne[4];          /* ne[0] = row length; ne[2] > 1 for expert tensors */
    enum weft_type out;     /* the answer */
    enum weft_type wanted;  /* the type before the row-size fallback (== out unless FALLBACK/KEPT) */
    enum weft_qwhy why;
};

/* The model facts the mixes look at ({arch}.block_count, expert_count, head
 * counts; 0 where absent). */
struct weft_qmodel {
    const char *arch;
    uint32_t n_layer, n_expert, n_head, n_head_kv;
};

/* Choose every tensor's type under q, as llama-quantize does: its tensor
 * filter, then (mixes) llama_tensor_get_type's rules for the mix, counting
 * attn_v / ffn_down in llama.cpp's tensor order (layer number, then name;
 * the input order does not matter), then the row-size fallback. Sets t[i].out
 * and t[i].why for all n. Returns WEFT_ERR_NOMEM, or WEFT_ERR_FORMAT for an
 * expert model's ffn tensor with no layer number in its name (llama.cpp's
 * error too); t is then partly filled. */
weft_status weft_qtarget_choose(struct weft_qtarget q, const struct weft_qmodel *m, struct weft_qtensor *t, size_t n);

/* A bump allocator for tensor data that must outlive a GGUF write: malloc'd
 * when small, an unlinked file mapping in `dir` when over 1 GiB. */
struct weft_scratch {
    unsigned char *base;
    size_t size, used;
    bool mapped;
};
/* Reserve `size` bytes (every weft_scratch_take is rounded up to 64). On
 * failure s is zeroed and nothing is left behind. */
weft_status weft_scratch_init(struct weft_scratch *s, size_t size, const char *dir);
/* Next `n` bytes (64-byte aligned), or NULL if the reservation is exhausted. */
void *weft_scratch_take(struct weft_scratch *s, size_t n);
void weft_scratch_free(struct weft_scratch *s);

#endif
