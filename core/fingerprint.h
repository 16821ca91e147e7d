/* The model fingerprint: one 128-bit value that names "these weights, read
 * with this tokenizer and these attention/rope settings". Two instances
 * whose fingerprints are equal compute the same KV for the same tokens, so
 * everything that moves state between instances (KV blocks on the wire and
 * in shared tiers, routing on cached prefixes, migrating a stream) checks
 * it first; a mismatch means "different model", never "try anyway".
 *
 * Covered: every tensor's name, type, shape and data, in file order; every
 * tokenizer.ggml.* key (vocabulary, scores, types, merges, special ids,
 * flags); the hyperparameters that shape KV (architecture, layers, heads,
 * head dim, rope dims, base, scale and mode, norm epsilon, context length).
 * Not covered, on purpose: general.* (names, licences), the chat template.
 *
 * The hash is weft's own (4 x 64-bit lanes, one multiply per 8 bytes, then
 * a splitmix-style finalizer): for naming, not for security; it runs near
 * memory bandwidth, so computing it at load costs about what reading the
 * file does. The value is stable across machines, compilers and backends
 * (little-endian byte order is assumed, as GGUF is). */
#ifndef WEFT_FINGERPRINT_H
#define WEFT_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/gguf.h"
#include "base/ident.h"
#include "base/status.h"

struct weft_hparams;

/* Fingerprint of the model in g with hyperparameters hp (weft_hparams_load
 * of the same g). Reads every tensor's data. Fails only on a tensor whose
 * data pointer is missing (WEFT_ERR_FORMAT). */
weft_status weft_fingerprint_model(const struct weft_gguf *g, const struct weft_hparams *hp,
                                   struct weft_fingerprint *out);

/* The streaming hash underneath, for callers that fingerprint other data
 * the same way (tests, the KV block format). */
struct weft_fphash {
    uint64_t lane[4];
    uint64_t total;
    unsigned char tail[32];
    size_t n_tail;
};
void weft_fphash_init(struct weft_fphash *h, uint64_t seed);
void weft_fphash_update(struct weft_fphash *h, const void *data, size_t len);
struct weft_fingerprint weft_fphash_final(const struct weft_fphash *h);

#endif
