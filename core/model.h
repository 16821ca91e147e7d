/* A Llama-family model: hyperparameters from GGUF, weights placed on a
 * backend. Internal to core/ (forward.c reads the fields); the CLI and
 * server use the accessors. */
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include "backends/backend.h"
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

struct weft_model {
    struct weft_hparams hp;
    struct weft_gguf *gguf;        /* owns the mapping the weights may live in */
    struct weft_tokenizer *tok;
    struct weft_backend *be;       /* not owned */
    struct weft_buffer *weights;   /* all tensor data, one buffer */
    struct weft_view tok_embd, output_norm, output;
    struct weft_layer_weights *layers;
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
void weft_model_free(struct weft_model *m);

#endif
