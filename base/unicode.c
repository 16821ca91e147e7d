/* UTF-8 coding and Unicode class lookups (binary search over range tables). */
#include "base/unicode.h"

#include "base/unicode_tables.h"

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The general categories are disjoint, and no White_Space character is a
 * letter, number, punctuation, mark or symbol: the first hit is the answer. */
static unsigned lookup(uint32_t cp)
{
    static const struct { const uint32_t (*r)[2]; size_t n; unsigned bit; } cls[] = {
        { weft_ucd_letter, N_OF(weft_ucd_letter), WEFT_UCP_LETTER },
        { weft_ucd_number, N_OF(weft_ucd_number), WEFT_UCP_NUMBER },
        { weft_ucd_punct, N_OF(weft_ucd_punct), WEFT_UCP_PUNCT },
        { weft_ucd_mark, N_OF(weft_ucd_mark), WEFT_UCP_MARK },
        { weft_ucd_symbol, N_OF(weft_ucd_symbol), WEFT_UCP_SYMBOL },
        { weft_ucd_space, N_OF(weft_ucd_space), WEFT_UCP_SPACE },
    };
    for (size_t i = 0; i < N_OF(cls); i++)
        if (in_ranges(cls[i].r, cls[i].n, cp)) return cls[i].bit;
    return 0;
}

unsigned weft_unicode_flags(uint32_t cp)
{
    return cp < 128 ? weft_ucd_ascii[cp] : lookup(cp);
}

int weft_utf8_need(unsigned char lead)
{
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

bool weft_utf8_cont_ok(unsigned char lead, int i, unsigned char c)
{
    if ((c & 0xC0) != 0x80) return false;
    if (i != 1) return true;
    switch (lead) {
    case 0xE0: return c >= 0xA0;  /* overlong below U+0800 */
    case 0xED: return c <= 0x9F;  /* surrogates */
    case 0xF0: return c >= 0x90;  /* overlong below U+10000 */
    case 0xF4: return c <= 0x8F;  /* past U+10FFFF */
    default: return true;
    }
}

int weft_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    int len = weft_utf8_need(c);
    if (len == 0 || (size_t)len > n) return 0;
    uint32_t v = c & (0x7Fu >> (len == 1 ? 0 : len));
    for (int i = 1; i < len; i++) {
        if (!weft_utf8_cont_ok(c, i, s[i])) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

int weft_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
