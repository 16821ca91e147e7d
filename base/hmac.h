/* HMAC-SHA256 and SHA-256 over OpenSSL's libcrypto: the KV block format's
 * MACs (base/kv_block.h) and the fleet's derived credentials. */
#ifndef WEFT_HMAC_H
#define WEFT_HMAC_H

#include <stddef.h>

#include "base/status.h"

/* out = SHA-256(data[0..n)). */
weft_status weft_sha256(const void *data, size_t n, unsigned char out[32]);

/* out = HMAC-SHA256(key, a[0..an) then b[0..bn)) (b may be NULL with bn 0). */
weft_status weft_hmac_sha256(const void *key, size_t key_len, const void *a, size_t an, const void *b, size_t bn,
                             unsigned char out[32]);

/* Constant-time equality of two 32-byte digests. */
int weft_digest_eq(const unsigned char a[32], const unsigned char b[32]);

#endif
