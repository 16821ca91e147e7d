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

/* One item of an options string: key[0..key_len), and its value (NULL for
 * a bare key); len is the whole item's. */
struct weft_opt_item {
    const char *key, *val;
    size_t key_len, val_len, len;
    bool trailing_comma;       /* the item is followed by a ',' that ends the string */
};

/* The item at *cur, and *cur moved past it; false at the end (NULL or ""). */
static inline bool weft_opt_next(const char **cur, struct weft_opt_item *it)
{
    const char *p = *cur;
    if (!p || !*p) return false;
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = (const char *)memchr(p, '=', len);
    it->key = p;
    it->len = len;
    it->key_len = eq ? (size_t)(eq - p) : len;
    it->val = eq ? eq + 1 : NULL;
    it->val_len = eq ? len - it->key_len - 1 : 0;
    it->trailing_comma = end && end[1] == '\0';
    *cur = end ? end + 1 : NULL;
    return true;
}

/* src[0..n) into dst (cap bytes, truncated, terminated; nothing when cap is 0) */
static inline void weft_opt_copy(char *dst, size_t cap, const char *src, size_t n)
{
    if (!cap) return;
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The value of key in opts (NULL/"" opts: none): copied into val (cap bytes,
 * truncated); true if present. A bare key gives "1". The last item wins. */
static inline bool weft_opt_get(const char *opts, const char *key, char *val, size_t cap)
{
    bool found = false;
    const size_t kl = strlen(key);
    struct weft_opt_item it;
    for (const char *p = opts; weft_opt_next(&p, &it);) {
        if (it.key_len != kl || strncmp(it.key, key, kl) != 0) continue;
        if (it.val) weft_opt_copy(val, cap, it.val, it.val_len);
        else weft_opt_copy(val, cap, "1", 1);
        found = true;
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
    struct weft_opt_item it;
    for (const char *p = opts; weft_opt_next(&p, &it);) {
        if (it.key_len < pl || strncmp(it.key, prefix, pl) != 0) continue;
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++) ok = strlen(known[i]) == it.key_len && !strncmp(known[i], it.key, it.key_len);
        if (!ok) {
            weft_opt_copy(bad, cap, it.key, it.key_len);
            return true;
        }
    }
    return false;
}

/* Whether opts is well formed: every item a key (letters, digits, '_', '.',
 * with a '.' after a non-empty prefix) optionally followed by =value; no
 * empty items. On false, the offending item is copied into bad. */
static inline bool weft_opt_syntax_ok(const char *opts, char *bad, size_t cap)
{
    struct weft_opt_item it;
    for (const char *p = opts; weft_opt_next(&p, &it);) {
        const size_t kl = it.key_len;
        const char *dot = kl ? (const char *)memchr(it.key, '.', kl) : NULL;
        bool ok = dot && dot > it.key && dot < it.key + kl - 1;
        for (size_t i = 0; ok && i < kl; i++) {
            const char c = it.key[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        }
        if (!ok) {
            weft_opt_copy(bad, cap, it.key, it.len);
            return false;
        }
        if (it.trailing_comma) {   /* an empty last item */
            weft_opt_copy(bad, cap, "", 0);
            return false;
        }
    }
    return true;
}

#endif
