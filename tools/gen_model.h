/* Random-weight Llama GGUF generator (`weft gen`).
 *
 * Writes a model llama.cpp's "llama" architecture would load: the same tensor
 * names, shapes and hyperparameter keys, weights drawn deterministically from
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
    enum weft_type type;     /* every 2-D tensor; norms are always F32 */
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
                                     sliding_window_pattern (0: 6) */
};

/* Fill *p with a preset: "tiny" (n_embd 256, 2 layers, vocab 512: small enough
 * for tests, valid for every type incl. K-quants), "smollm2-135m" (the
 * SmolLM2-135M shape: 576/30/9/3/1536/49152, tied), "llama3-8b", "qwen2.5-7b",
 * "qwen3-0.6b", "qwen3-8b", "phi4-mini", "gemma3-4b" (those models' shapes,
 * family and rope bases). Type F16, seed 1, scale 1.
 * Returns WEFT_ERR_INVALID_ARG for an unknown name (p is then untouched). */
weft_status weft_gen_preset(struct weft_gen_params *p, const char *preset);

/* Check params without writing anything: positive sizes, n_head | n_embd,
 * n_head_kv | n_head, even head dim, a weight type we can generate, n_embd and
 * n_ff multiples of its block size, room for the generated vocab, sane floats.
 * WEFT_ERR_INVALID_ARG with a message naming the problem. vocab_from is not
 * opened here. */
weft_status weft_gen_validate(const struct weft_gen_params *p);

/* The type a row of `row` elements gets when the model type is t: t itself
 * if the row fits t's blocks, else llama-quantize's fallback (Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0), so e.g. SmolLM2's 576-wide rows work in a
 * "Q4_K" model with only n_ff-wide rows in Q4_K, as llama.cpp would. */
enum weft_type weft_gen_row_type(enum weft_type t, uint32_t row);

/* Generate and write the model to out_path. On failure returns the error
 * (message in weft_last_error()); out_path may then be missing or partial.
 * Tensor data lives in memory until written; above 1 GiB it is backed by an
 * unlinked scratch file next to out_path (needs that much free disk there),
 * so its pages are file-backed and the kernel can evict them under pressure. */
weft_status weft_gen_model(const struct weft_gen_params *p, const char *out_path);

/* llama.cpp's LLAMA_FTYPE for a model whose weights are all `t`
 * (F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q4_K 14 (_S),
 * Q5_K 16 (_S), Q6_K 18, BF16 32); -1 for types that are not weight types. */
int weft_gen_ftype(enum weft_type t);

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
