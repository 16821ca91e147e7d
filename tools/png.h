/* A PNG writer with no dependencies: the image data goes in stored
 * (uncompressed) deflate blocks inside the zlib stream, so the file is about
 * the size of the pixels (a third of that when the image has at most 256
 * colours: it is then written with a palette). */
#ifndef WEFT_PNG_H
#define WEFT_PNG_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32 (ISO 3309, as PNG and zlib use it) of p[0..n), continuing from crc
 * (0 to start): weft_png_crc32(weft_png_crc32(0, a, na), b, nb) == weft_png_crc32(0, ab, na + nb). */
uint32_t weft_png_crc32(uint32_t crc, const uint8_t *p, size_t n);
/* Adler-32 (RFC 1950) of p[0..n), continuing from adler (1 to start). */
uint32_t weft_png_adler32(uint32_t adler, const uint8_t *p, size_t n);

/* Encode w x h 8-bit RGB pixels (rows top to bottom, 3 bytes a pixel) as a
 * PNG file in memory: *out (malloc'd, *len bytes). Colour type 3 (palette)
 * when there are at most 256 colours, else 2 (RGB). Returns 0, or -1 on bad
 * sizes or out of memory. */
int weft_png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len);
/* The same, written to path. Returns 0, or -1 with errno set. */
int weft_png_write_rgb(const char *path, const uint8_t *rgb, int w, int h);

#endif
