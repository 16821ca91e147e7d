/* The transformer as one op list per step, over a batch that can mix
 * sequences (prefill chunks and single-token decodes). */
#ifndef WEFT_FORWARD_H
#define WEFT_FORWARD_H

#include "core/kv.h"
#include "core/model.h"

/* One sequence's slice of a step. */
struct weft_fwd_seq {
    const int32_t *tokens;         /* n_tokens ids; these become rows of the batch */
    uint32_t n_tokens;
    uint32_t pos0;                 /* position of tokens[0] in the sequence */
    const struct weft_kv_seq *kv;  /* must already cover pos0 + n_tokens positions */
    bool want_logits;              /* logits for the last row of this slice */
    /* The last n_hidden rows of this slice (0..n_tokens) come back as hidden
     * states (weft_forward_hidden): the final residual stream after the
     * output norm, rmsnorm(x) * output_norm, i.e. the output head's input.
     * A row is what it would be in any other batch as far as the backend's
     * per-row results are batch-independent: bit for bit on the CPU with
     * quantized weights; with F32/F16/BF16 weights the CPU sums a matmul of
     * one row in another order than of several (as ggml does), so a row
     * alone in its matmul may differ in the last bits. */
    uint32_t n_hidden;
};

struct weft_forward;

/* Fill kc's layer count and device parts from the model's placement, so the
 * KV pool keeps each layer's blocks on the device that runs the layer. */
void weft_forward_kv_parts(const struct weft_model *m, struct weft_kv_config *kc);

/* Activation and metadata buffers on the model's backend for up to max_rows
 * rows, max_seqs sequences and max_blocks blocks per sequence. */
weft_status weft_forward_init(const struct weft_model *m, struct weft_kv_pool *kv, uint32_t max_rows,
                              uint32_t max_seqs, uint32_t max_blocks, struct weft_forward **out);
void weft_forward_free(struct weft_forward *fw);

/* Run one step. *logits ([*n_logits][n_vocab], in order of the seqs that
 * asked) is owned by fw and valid until the next step. Fails with
 * WEFT_ERR_INVALID_ARG if the batch exceeds the limits given at init (or a
 * seq's n_hidden exceeds its n_tokens), or with the backend's status. */
weft_status weft_forward_step(struct weft_forward *fw, const struct weft_fwd_seq *seqs, uint32_t n_seq,
                              const float **logits, uint32_t *n_logits);

/* Sequence s's hidden states from the last step (seqs[s].n_hidden rows of
 * n_embd floats, in row order), or NULL when it asked for none or the step
 * failed. Owned by fw, valid until the next step. */
const float *weft_forward_hidden(const struct weft_forward *fw, uint32_t s);

/* Ops of the last step (for tests and tracing). */
const struct weft_op *weft_forward_ops(const struct weft_forward *fw, size_t *n);

#endif
