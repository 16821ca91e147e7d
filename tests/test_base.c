/* base/: the one UTF-8 definition (whole and a byte at a time, checked against
 * the encoder over every code point and every sequence of up to 3 bytes) and
 * the growable buffers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/unicode.h"
#include "tests/check.h"

static bool valid_cp(uint32_t cp) { return cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF); }

/* accepted a byte at a time, as a detokenizer's assembler does */
static int assemble(const unsigned char *s, int n)
{
    int need = weft_utf8_need(s[0]);
    if (need == 0 || need > n) return 0;
    for (int i = 1; i < need; i++)
        if (!weft_utf8_cont_ok(s[0], i, s[i])) return 0;
    return need;
}

static void every_code_point_round_trips(void)
{
    int bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (!valid_cp(cp)) continue;
        char e[4];
        int k = weft_utf8_encode(cp, e);
        uint32_t back = 0xFFFFFFFF;
        int d = weft_utf8_decode((const unsigned char *)e, (size_t)k, &back);
        if (d != k || back != cp || assemble((const unsigned char *)e, k) != k || weft_utf8_need((unsigned char)e[0]) != k) {
            if (bad++ < 5) fprintf(stderr, "U+%04X: encoded in %d, decoded %d as U+%04X\n", cp, k, d, back);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* every byte sequence of 1..3 bytes: decoded iff it is the encoding of a valid code
   point (no overlong, no surrogate), and the byte-at-a-time check agrees */
static void decoder_accepts_exactly_the_encodings(void)
{
    long bad = 0, accepted = 0;
    unsigned char s[4];
    for (uint32_t v = 0; v < (1u << 24); v++) {
        s[0] = (unsigned char)(v >> 16), s[1] = (unsigned char)(v >> 8), s[2] = (unsigned char)v;
        uint32_t cp = 0;
        int d = weft_utf8_decode(s, 3, &cp);
        bool ok = true;
        if (d) {
            char e[4];
            int k = weft_utf8_encode(cp, e);
            ok = valid_cp(cp) && k == d && !memcmp(e, s, (size_t)d);
            accepted += d == 3;
        }
        if (assemble(s, 3) != d) ok = false;
        if (!ok && bad++ < 5) fprintf(stderr, "%02x %02x %02x: decode %d, assemble %d\n", s[0], s[1], s[2], d, assemble(s, 3));
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(accepted, 0x10000 - 0x800 - 0x800);  /* the 3-byte code points, less the surrogates */
    /* 4-byte leads: every second byte, a few third and fourth */
    static const unsigned char tail[] = {0x00, 0x7F, 0x80, 0x8F, 0x90, 0xBF, 0xC0, 0xFF};
    for (int lead = 0xF0; lead <= 0xFF; lead++)
        for (int b1 = 0; b1 < 256; b1++)
            for (unsigned i = 0; i < sizeof tail; i++)
                for (unsigned j = 0; j < sizeof tail; j++) {
                    s[0] = (unsigned char)lead, s[1] = (unsigned char)b1, s[2] = tail[i], s[3] = tail[j];
                    uint32_t cp = 0;
                    int d = weft_utf8_decode(s, 4, &cp);
                    bool want = lead <= 0xF4 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80;
                    uint32_t v = (uint32_t)(lead & 7) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
                    want = want && v >= 0x10000 && v <= 0x10FFFF;
                    CHECK(d == (want ? 4 : 0));
                    CHECK(assemble(s, 4) == d);
                    if (d) CHECK(cp == v);
                }
    /* truncated: never read past n */
    s[0] = 0xE2, s[1] = 0x82, s[2] = 0xAC;
    uint32_t cp;
    CHECK_EQ_INT(weft_utf8_decode(s, 2, &cp), 0);
    CHECK_EQ_INT(weft_utf8_decode(s, 3, &cp), 3);
    CHECK_EQ_INT(cp, 0x20AC);
}

static void grow_doubles_and_keeps_on_failure(void)
{
    int *v = NULL;
    size_t cap = 0, grows = 0;
    for (size_t n = 0; n < 100000; n++) {
        if (n == cap) {
            size_t before = cap;
            int *t = weft_grow(v, &cap, n + 1, sizeof *v);
            CHECK(t != NULL);
            if (!t) break;
            CHECK(cap >= n + 1 && (before == 0 || cap == 2 * before));
            v = t;
            grows++;
        }
        v[n] = (int)n;
    }
    CHECK(grows <= 14);  /* 16 << 13 > 100000: doubling, not a step at a time */
    long bad = 0;
    for (size_t n = 0; n < 100000; n++) bad += v[n] != (int)n;
    CHECK_EQ_INT(bad, 0);
    /* an impossible size: NULL, and the array and its capacity as they were */
    size_t before = cap;
    CHECK(weft_grow(v, &cap, SIZE_MAX / 2, sizeof *v) == NULL);
    CHECK_EQ_INT(cap, before);
    CHECK_EQ_INT(v[99999], 99999);
    free(v);
}

static void grow32_keeps_its_type_bound(void)
{
    uint64_t *v = NULL;
    uint32_t cap = 0;
    for (uint32_t n = 0; n < 1000; n++) {
        if (n == cap) {
            uint64_t *t = weft_grow32(v, &cap, (size_t)n + 1, sizeof *v);
            CHECK(t != NULL);
            if (!t) break;
            v = t;
        }
        v[n] = n;
    }
    CHECK_EQ_INT(cap, 1024);
    CHECK_EQ_INT(v[999], 999);
    /* more elements than a uint32_t counts: refused, the array and its capacity kept */
    CHECK(weft_grow32(v, &cap, (size_t)UINT32_MAX + 1, sizeof *v) == NULL);
    CHECK_EQ_INT(cap, 1024);
    free(v);
}

static void strbuf_writes_and_fails_sticky(void)
{
    struct weft_strbuf b = {0};
    char *e = weft_sb_take(&b);
    CHECK(e && !strcmp(e, ""));  /* nothing written is "", not NULL */
    free(e);
    weft_sb_puts(&b, "ab");
    weft_sb_putc(&b, 'c');
    weft_sb_put(&b, "dxx", 1);
    weft_sb_printf(&b, "-%d-%s", 42, "z");
    CHECK(b.p && !strcmp(b.p, "abcd-42-z"));
    CHECK_EQ_INT(b.len, 9);
    /* longer than printf's stack buffer */
    char big[1000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = 0;
    weft_sb_printf(&b, "[%s]", big);
    CHECK_EQ_INT(b.len, 9 + 2 + 999);
    CHECK(b.p[b.len] == 0 && b.p[b.len - 1] == ']' && b.p[10] == 'q');
    CHECK(!b.oom);
    /* an impossible reservation fails, and the buffer stays failed */
    CHECK(!weft_sb_reserve(&b, SIZE_MAX - 4));
    CHECK(b.oom);
    weft_sb_puts(&b, "more");
    CHECK_EQ_INT(b.len, 1010);
    CHECK(weft_sb_take(&b) == NULL);
    CHECK(b.p == NULL && b.len == 0 && !b.oom);
    weft_sb_free(&b);
}

int main(void)
{
    RUN(every_code_point_round_trips);
    RUN(decoder_accepts_exactly_the_encodings);
    RUN(grow_doubles_and_keeps_on_failure);
    RUN(grow32_keeps_its_type_bound);
    RUN(strbuf_writes_and_fails_sticky);
    return check_summary();
}
