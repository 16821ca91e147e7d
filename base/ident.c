/* The model fingerprint as a value (see base/ident.h). */
#include "base/ident.h"

#include <stdio.h>

void weft_fingerprint_str(const struct weft_fingerprint *f, char out[WEFT_FINGERPRINT_STR])
{
    snprintf(out, WEFT_FINGERPRINT_STR, "%016llx%016llx", (unsigned long long)f->hi, (unsigned long long)f->lo);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

weft_status weft_fingerprint_parse(const char *s, struct weft_fingerprint *out)
{
    uint64_t v[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        int x = s ? hexval(s[i]) : -1;
        if (x < 0) return weft_error(WEFT_ERR_FORMAT, "fingerprint: expected 32 hex digits");
        v[i / 16] = v[i / 16] << 4 | (uint64_t)x;
    }
    if (s[32] != '\0') return weft_error(WEFT_ERR_FORMAT, "fingerprint: expected 32 hex digits");
    out->hi = v[0];
    out->lo = v[1];
    return WEFT_OK;
}
