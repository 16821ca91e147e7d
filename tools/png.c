/* PNG without zlib: see png.h. Layout: signature, IHDR, [PLTE], one IDAT
 * holding a zlib stream (header 78 01, stored deflate blocks of at most
 * 65535 bytes, the Adler-32 of the raw scanlines), IEND. Each scanline is
 * filter byte 0 (none) and the row's pixels. */
#include "tools/png.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t weft_png_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t table[256];  /* built per call: 2K steps, and no shared state */
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t weft_png_adler32(uint32_t adler, const uint8_t *p, size_t n)
{
    uint32_t a = adler & 0xffff, b = adler >> 16;
    while (n) {
        size_t k = n < 5552 ? n : 5552;  /* the most bytes before b can pass 2^32 */
        n -= k;
        while (k--) { a += *p++; b += a; }
        a %= 65521;
        b %= 65521;
    }
    return b << 16 | a;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
    return p + 4;
}

/* length, type, data (already at p + 8), CRC over type and data */
static uint8_t *chunk(uint8_t *p, const char *type, size_t n)
{
    put32(p, (uint32_t)n);
    memcpy(p + 4, type, 4);
    put32(p + 8 + n, weft_png_crc32(0, p + 4, n + 4));
    return p + 12 + n;
}

/* The image's colours when there are at most 256 (n_pal, palette RGB), and
 * each pixel's index; false when there are more. */
static bool palettize(const uint8_t *rgb, size_t n_px, uint8_t *pal, int *n_pal, uint8_t *idx)
{
    uint32_t cols[256];
    int n = 0, last = -1;
    uint32_t last_c = 0;
    for (size_t i = 0; i < n_px; i++) {
        uint32_t c = (uint32_t)rgb[3 * i] << 16 | (uint32_t)rgb[3 * i + 1] << 8 | rgb[3 * i + 2];
        if (last < 0 || c != last_c) {
            int k = 0;
            while (k < n && cols[k] != c) k++;
            if (k == n) {
                if (n == 256) return false;
                cols[n++] = c;
            }
            last = k;
            last_c = c;
        }
        idx[i] = (uint8_t)last;
    }
    for (int k = 0; k < n; k++) {
        pal[3 * k] = (uint8_t)(cols[k] >> 16);
        pal[3 * k + 1] = (uint8_t)(cols[k] >> 8);
        pal[3 * k + 2] = (uint8_t)cols[k];
    }
    *n_pal = n;
    return true;
}

int weft_png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (w < 1 || h < 1 || w > 1 << 14 || h > 1 << 14) return -1;
    size_t n_px = (size_t)w * h;
    uint8_t *idx = malloc(n_px), pal[768];
    int n_pal = 0;
    if (!idx) return -1;
    bool indexed = palettize(rgb, n_px, pal, &n_pal, idx);
    int bpp = indexed ? 1 : 3;
    size_t row = 1 + (size_t)w * bpp, raw = row * h;
    size_t n_blocks = (raw + 65534) / 65535;  /* the last one has BFINAL set */
    size_t zlen = 2 + raw + 5 * n_blocks + 4;
    size_t total = 8 + (12 + 13) + (indexed ? 12 + 3 * (size_t)n_pal : 0) + (12 + zlen) + 12;
    uint8_t *buf = malloc(total);
    if (!buf) { free(idx); return -1; }
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t *p = buf;
    memcpy(p, sig, 8);
    p += 8;
    uint8_t *d = p + 8;  /* IHDR */
    put32(d, (uint32_t)w);
    put32(d + 4, (uint32_t)h);
    d[8] = 8;                   /* bit depth */
    d[9] = indexed ? 3 : 2;     /* colour type */
    d[10] = d[11] = d[12] = 0;  /* deflate, adaptive filters, no interlace */
    p = chunk(p, "IHDR", 13);
    if (indexed) {
        memcpy(p + 8, pal, 3 * (size_t)n_pal);
        p = chunk(p, "PLTE", 3 * (size_t)n_pal);
    }
    d = p + 8;  /* IDAT: the zlib stream */
    *d++ = 0x78;
    *d++ = 0x01;  /* deflate, 32K window, no dictionary, (0x7801 % 31 == 0) */
    uint32_t adler = 1;
    size_t left = raw, in_block = 0;
    for (int y = 0; y < h; y++) {
        const uint8_t *src = indexed ? idx + (size_t)y * w : rgb + (size_t)y * w * 3;
        for (size_t k = 0; k < row; k++) {
            if (in_block == 0) {  /* a new stored block: BFINAL, BTYPE 00, LEN, NLEN */
                size_t n = left < 65535 ? left : 65535;
                uint8_t *blk = d;
                blk[0] = n == left ? 1 : 0;
                blk[1] = (uint8_t)n; blk[2] = (uint8_t)(n >> 8);
                blk[3] = (uint8_t)~n; blk[4] = (uint8_t)(~n >> 8);
                d += 5;
                in_block = n;
            }
            uint8_t b = k == 0 ? 0 : src[k - 1];
            *d++ = b;
            in_block--;
            left--;
        }
        static const uint8_t filter_none = 0;
        adler = weft_png_adler32(weft_png_adler32(adler, &filter_none, 1), src, row - 1);
    }
    d = put32(d, adler);
    size_t zsize = (size_t)(d - (p + 8));
    p = chunk(p, "IDAT", zsize);
    p = chunk(p, "IEND", 0);
    free(idx);
    *out = buf;
    *len = (size_t)(p - buf);
    return 0;
}

int weft_png_write_rgb(const char *path, const uint8_t *rgb, int w, int h)
{
    uint8_t *png;
    size_t n;
    if (weft_png_encode_rgb(rgb, w, h, &png, &n)) { errno = ENOMEM; return -1; }
    FILE *f = fopen(path, "wb");
    if (!f) { int e = errno; free(png); errno = e; return -1; }
    size_t wr = fwrite(png, 1, n, f);
    int e = errno;
    int rc = fclose(f);
    free(png);
    if (wr != n || rc) { errno = wr != n ? e : errno; return -1; }
    return 0;
}
