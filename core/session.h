/* A single-sequence session: feed tokens, get next-token logits. This is
 * what `weft run` / `weft chat` drive; the continuous-batching engine runs
 * many sequences through the same forward pass. */
#ifndef WEFT_SESSION_H
#define WEFT_SESSION_H

#include "core/forward.h"

struct weft_session;

/* n_ctx: maximum positions (0 = the model's training context). Allocates a
 * KV pool for n_ctx tokens on the model's backend. *out NULL on failure. */
weft_status weft_session_init(const struct weft_model *m, uint32_t n_ctx, uint32_t max_batch,
                              struct weft_session **out);
void weft_session_free(struct weft_session *s);

/* Append tokens (processed in chunks of max_batch rows) and return the
 * logits after the last one ([n_vocab], owned by s, valid until the next
 * call). WEFT_ERR_CONTEXT if the sequence would exceed n_ctx; then nothing
 * is appended. */
weft_status weft_session_eval(struct weft_session *s, const int32_t *tokens, size_t n, const float **logits);

uint32_t weft_session_pos(const struct weft_session *s);
/* The session's cache per sequence: K/V bytes one token takes (every layer that keeps K/V) and a
 * hybrid model's recurrent state (0 for others), the same at any length. */
void weft_session_memory(const struct weft_session *s, uint64_t *kv_bytes_per_token, uint64_t *state_bytes);
uint32_t weft_session_n_ctx(const struct weft_session *s);
/* Forget everything (positions restart at 0; a hybrid model's recurrent state starts from
 * zero again); keeps the memory. */
void weft_session_reset(struct weft_session *s);
/* Keep only the first n positions (no-op if n >= pos); later evals overwrite
 * the rest. Used to reuse a shared prefix between turns. WEFT_ERR_UNSUPPORTED for a hybrid
 * model going back (its recurrent state holds every position so far and cannot be undone). */
weft_status weft_session_truncate(struct weft_session *s, uint32_t n);

#endif
