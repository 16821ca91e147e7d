/* Growable arrays and string buffers (see base/buf.h). */
#include "base/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *weft_grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap && p) return p;
    if (size == 0) return NULL;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / size) return NULL;
    void *q = realloc(p, c * size);
    if (!q) return NULL;
    *cap = c;
    return q;
}

void *weft_grow32(void *p, uint32_t *cap, size_t need, size_t size)
{
    if (need > UINT32_MAX) return NULL;
    size_t c = *cap;
    void *q = weft_grow(p, &c, need, size);
    if (!q) return NULL;
    *cap = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;  /* the allocation holds at least this many */
    return q;
}

bool weft_sb_reserve(struct weft_strbuf *b, size_t extra)
{
    if (b->oom) return false;
    if (extra > SIZE_MAX - b->len - 1) {
        b->oom = true;
        return false;
    }
    size_t cap = b->cap < 64 && !b->p ? 64 : b->cap;
    char *q = weft_grow(b->p, &cap, b->len + extra + 1, 1);
    if (!q) {
        b->oom = true;
        return false;
    }
    if (!b->p) q[0] = 0;
    b->p = q;
    b->cap = cap;
    return true;
}

void weft_sb_put(struct weft_strbuf *b, const void *s, size_t n)
{
    if (!weft_sb_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void weft_sb_puts(struct weft_strbuf *b, const char *s) { weft_sb_put(b, s, strlen(s)); }

void weft_sb_putc(struct weft_strbuf *b, char c) { weft_sb_put(b, &c, 1); }

void weft_sb_vprintf(struct weft_strbuf *b, const char *fmt, va_list ap)
{
    if (b->oom) return;
    va_list again;
    va_copy(again, ap);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (n < 0) {
        b->oom = true;  /* an encoding error: the output would be incomplete */
    } else if ((size_t)n < sizeof tmp) {
        weft_sb_put(b, tmp, (size_t)n);
    } else if (weft_sb_reserve(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void weft_sb_printf(struct weft_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    weft_sb_vprintf(b, fmt, ap);
    va_end(ap);
}

char *weft_sb_take(struct weft_strbuf *b)
{
    char *s = b->oom ? NULL : b->p ? b->p : calloc(1, 1);
    if (!s) free(b->p);
    *b = (struct weft_strbuf){0};
    return s;
}

void weft_sb_free(struct weft_strbuf *b)
{
    free(b->p);
    *b = (struct weft_strbuf){0};
}
