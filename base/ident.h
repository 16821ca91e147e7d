/* The 128-bit model fingerprint as a value: what KV blocks, the router's
 * prefix index and migration carry to say which model a state belongs to.
 * core/fingerprint.h says what it covers and computes it from a model. */
#ifndef WEFT_IDENT_H
#define WEFT_IDENT_H

#include <stdint.h>

#include "base/status.h"

struct weft_fingerprint {
    uint64_t hi, lo;
};

/* 32 lower-case hex digits and a NUL. */
#define WEFT_FINGERPRINT_STR 33
void weft_fingerprint_str(const struct weft_fingerprint *f, char out[WEFT_FINGERPRINT_STR]);
/* Parse 32 hex digits (as written by weft_fingerprint_str); WEFT_ERR_FORMAT otherwise. */
weft_status weft_fingerprint_parse(const char *s, struct weft_fingerprint *out);

#endif
