/* Options: the knobs of backends and of model loading, as one string
 * "key=value,key=value" (keys "<backend>.<name>" such as "vulkan.validate",
 * "cpu.nopack", "cuda.graphs", "model.chunk_mib"). The library never reads
 * the environment: tools/ turns WEFT_* variables (and WEFT_OPTIONS) into this
 * string (tools/env.c lists every knob, README's "Knobs" section documents
 * them) and hands it to backends/backend.h's weft_backend_set_options; a
 * backend gets it at open (weft_backend_params.options) and refuses a key of
 * its own prefix that it does not know.
 *
 * Syntax: items separated by ','; an item is key=value (key: letters,
 * digits, '_' and '.'; value: anything but ','), or a bare key meaning
 * key=1. Spaces are not trimmed. A later item overrides an earlier one.
 * Header-only (modules use it without linking core/). */
#ifndef WEFT_OPTIONS_H
#define WEFT_OPTIONS_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The value of key in opts (NULL/"" opts: none): copied into val (cap bytes,
 * truncated); true if present. A bare key gives "1". The last item wins. */
static inline bool weft_opt_get(const char *opts, const char *key, char *val, size_t cap)
{
    bool found = false;
    const size_t kl = strlen(key);
    for (const char *p = opts; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n >= kl && strncmp(p, key, kl) == 0 && (n == kl || p[kl] == '=')) {
            const char *v = n == kl ? "1" : p + kl + 1;
            size_t vl = n == kl ? 1 : n - kl - 1;
            if (cap) {
                if (vl >= cap) vl = cap - 1;
                memcpy(val, v, vl);
                val[vl] = '\0';
            }
            found = true;
        }
        p = end ? end + 1 : NULL;
    }
    return found;
}

/* key as a flag: absent -> dflt; "0", "", "false", "off", "no" -> false;
 * anything else -> true */
static inline bool weft_opt_flag(const char *opts, const char *key, bool dflt)
{
    char v[16];
    if (!weft_opt_get(opts, key, v, sizeof v)) return dflt;
    return !(v[0] == '\0' || strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || strcmp(v, "off") == 0 ||
             strcmp(v, "no") == 0);
}

/* key as an integer in [lo, hi]; absent, empty or not such an integer (a
 * value too long to be one included) -> dflt */
static inline long weft_opt_long(const char *opts, const char *key, long lo, long hi, long dflt)
{
    char v[32], *end;
    if (!weft_opt_get(opts, key, v, sizeof v) || !v[0] || strlen(v) == sizeof v - 1) return dflt;
    long x = strtol(v, &end, 10);
    return *end == '\0' && x >= lo && x <= hi ? x : dflt;
}

/* The first item of opts whose key starts with prefix (e.g. "vulkan.") but
 * is none of known[0..n); its key is copied into bad (cap bytes). False if
 * every such key is known. */
static inline bool weft_opt_unknown(const char *opts, const char *prefix, const char *const *known, size_t n,
                                    char *bad, size_t cap)
{
    const size_t pl = strlen(prefix);
    for (const char *p = opts; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        const size_t kl = eq ? (size_t)(eq - p) : len;
        if (kl >= pl && strncmp(p, prefix, pl) == 0) {
            bool ok = false;
            for (size_t i = 0; i < n && !ok; i++) ok = strlen(known[i]) == kl && strncmp(known[i], p, kl) == 0;
            if (!ok) {
                if (cap) {
                    size_t c = kl < cap ? kl : cap - 1;
                    memcpy(bad, p, c);
                    bad[c] = '\0';
                }
                return true;
            }
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* Whether opts is well formed: every item a key (letters, digits, '_', '.',
 * with a '.' after a non-empty prefix) optionally followed by =value; no
 * empty items. On false, the offending item is copied into bad. */
static inline bool weft_opt_syntax_ok(const char *opts, char *bad, size_t cap)
{
    for (const char *p = opts; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        const size_t kl = eq ? (size_t)(eq - p) : len;
        bool ok = kl > 0;
        const char *dot = kl ? memchr(p, '.', kl) : NULL;
        ok = ok && dot && dot > p && dot < p + kl - 1;
        for (size_t i = 0; ok && i < kl; i++) {
            const char c = p[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        }
        if (!ok) {
            if (cap) {
                size_t c = len < cap ? len : cap - 1;
                memcpy(bad, p, c);
                bad[c] = '\0';
            }
            return false;
        }
        if (end && end[1] == '\0') {  /* a trailing ',' is an empty item */
            if (cap) bad[0] = '\0';
            return false;
        }
        p = end ? end + 1 : NULL;
    }
    return true;
}

#endif
