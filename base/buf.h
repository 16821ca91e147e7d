/* Growable arrays and string buffers: the one growth rule weft's layers share.
 *
 * weft_grow: an array of elements of `size` bytes at p, with room for *cap of
 * them, made to hold at least `need`. Capacity doubles (from 16, or `need` if
 * larger), so n appends cost O(n). Returns the array, moved or not, and
 * updates *cap; NULL on overflow or out of memory, when p and *cap are as they
 * were (the caller still owns p). Typical use:
 *     if (n == cap) { T *t = weft_grow(v, &cap, n + 1, sizeof *v); if (!t) return WEFT_ERR_NOMEM; v = t; }
 *
 * struct weft_strbuf: a byte string that grows as it is written, always
 * NUL-terminated once anything was written. A failed allocation makes it
 * sticky-failed (oom): later writes do nothing, so a writer checks once at the
 * end. Zero-initialised is empty and valid; weft_sb_free releases it. */
#ifndef WEFT_BUF_H
#define WEFT_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *weft_grow(void *p, size_t *cap, size_t need, size_t size);
/* weft_grow for a uint32_t capacity (NULL, p and *cap kept, past UINT32_MAX elements) */
void *weft_grow32(void *p, uint32_t *cap, size_t need, size_t size);

struct weft_strbuf {
    char *p;     /* NULL until the first write; NUL-terminated after it */
    size_t len;  /* bytes written, the NUL not counted */
    size_t cap;  /* bytes allocated at p */
    bool oom;    /* an allocation failed: the contents are incomplete */
};

/* Room for `extra` more bytes and the NUL; false (and oom set) if there is none. */
bool weft_sb_reserve(struct weft_strbuf *b, size_t extra);
void weft_sb_put(struct weft_strbuf *b, const void *s, size_t n);
void weft_sb_puts(struct weft_strbuf *b, const char *s);
void weft_sb_putc(struct weft_strbuf *b, char c);
void weft_sb_printf(struct weft_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void weft_sb_vprintf(struct weft_strbuf *b, const char *fmt, va_list ap);
/* The string ("" when nothing was written), owned by the caller, and b emptied;
 * NULL (and b freed) when b is oom or the "" cannot be allocated. */
char *weft_sb_take(struct weft_strbuf *b);
void weft_sb_free(struct weft_strbuf *b);

#endif
