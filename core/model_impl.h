/* struct weft_model's layout: core's own (forward, engine, session, KV
 * transfer read the fields) and tests'; tools/ and server/ see the type as
 * opaque and use core/model.h's accessors. */
#ifndef WEFT_MODEL_IMPL_H
#define WEFT_MODEL_IMPL_H

#include "core/model.h"

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
    bool *recurrent;               /* [n_layer]: weft_hp_recurrent (the KV pool's state_layer) */
    uint32_t *kv_source;           /* [n_layer]: weft_hp_kv_source (the KV pool's kv_source) */
    /* experts placed apart (--experts-on DEV): the mixture layers' FFN (its ffn_* tensors:
     * norm, router, experts, shared experts; and the norms, small, on both) live on this
     * part and run there, the rest of each layer on its own part; xlayers[l] are its views.
     * n_layer of this part is 0 */
    struct weft_model_part xpart;
    bool has_xpart;
    struct weft_layer_weights *xlayers;
    struct weft_layer_weights glob;     /* token_embd, output_norm, output (token_embd's when tied) */
    struct weft_layer_weights *layers;
    struct weft_fingerprint fingerprint; /* core/fingerprint.h: computed at load */
    enum weft_type ftype;          /* type of most weights, for display */
    uint64_t n_params;
    size_t weight_bytes;
};

#endif
