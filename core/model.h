/* A Llama-family model: hyperparameters from GGUF, weights placed on a
 * backend. Internal to core/ (forward.c reads the fields); the CLI and
 * server use the accessors. */
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include "backends/backend.h"
#include "core/fingerprint.h"
#include "core/gguf.h"
#include "core/tokenizer.h"

struct weft_hparams {
    char arch[32];             /* "llama" */
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
    uint32_t head_dim, n_rot;
    float rms_eps, rope_freq_base, rope_freq_scale;
    enum weft_rope_mode rope_mode;
    bool tied_output;          /* output.weight absent: lm_head = token_embd */
};

struct weft_layer_weights {
    struct weft_view attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

/* Layers placed on several devices (--split cpu=2,vulkan:0=3): part i runs
 * n_layer consecutive layers on be. The first part also runs EMBED, the last
 * one LOGITS; activations cross between parts at layer boundaries. */
#define WEFT_MAX_PARTS 8
struct weft_split_part {
    struct weft_backend *be;       /* not owned */
    uint32_t n_layer;
};

struct weft_model_part {
    struct weft_backend *be;       /* not owned */
    struct weft_buffer *weights;   /* wrapped host memory, or bufs[0] */
    struct weft_buffer **bufs;     /* when not wrapped: the part's tensors in <= 1 GiB chunks */
    size_t *buf_sizes;
    uint32_t n_bufs;
    uint32_t layer0, n_layer;
};

struct weft_model {
    struct weft_hparams hp;
    struct weft_gguf *gguf;        /* owns the mapping the weights may live in */
    struct weft_tokenizer *tok;
    struct weft_backend *be;       /* = parts[0].be; not owned */
    struct weft_buffer *weights;   /* = parts[0].weights */
    struct weft_model_part parts[WEFT_MAX_PARTS];
    uint32_t n_parts;
    uint32_t *layer_part;          /* [n_layer]: which part runs layer l */
    struct weft_view tok_embd, output_norm, output;
    struct weft_layer_weights *layers;
    struct weft_fingerprint fingerprint; /* core/fingerprint.h: computed at load */
    enum weft_type ftype;          /* type of most weights, for display */
    uint64_t n_params;
    size_t weight_bytes;
};

/* Read and validate the hyperparameters of an open GGUF (no weights).
 * WEFT_ERR_FORMAT with a one-line message naming the key on failure. */
weft_status weft_hparams_load(const struct weft_gguf *g, struct weft_hparams *hp);

/* Open `path`, validate it (GGUF structure, hyperparameters, every tensor the
 * forward pass needs with the right shape and a supported type, tokenizer),
 * and place the weights on `be` (zero-copy where the backend can wrap host
 * memory). *out is NULL on failure and nothing is left open. */
weft_status weft_model_load(const char *path, struct weft_backend *be, struct weft_model **out);
/* The same with layers split over devices; the parts' n_layer must sum to
 * the model's layer count (a last part of 0 takes the rest). A device that cannot wrap host memory gets only
 * the tensors its layers use. */
weft_status weft_model_load_split(const char *path, const struct weft_split_part *parts, uint32_t n_parts,
                                  struct weft_model **out);
/* The hyperparameters, tokenizer and fingerprint of `path`, without placing
 * any weight (n_parts 0, no layers): for a mock engine
 * (weft_engine_config.mock_prefill_tps). be is kept for the KV pool. */
weft_status weft_model_load_meta(const char *path, struct weft_backend *be, struct weft_model **out);
void weft_model_free(struct weft_model *m);

#endif
