/* A small RGB rasterizer for charts: filled rectangles, lines, and text in a
 * built-in 5x7 bitmap font (ASCII; any other character is drawn as '?'),
 * scaled by whole numbers. Everything is clipped to the canvas. */
#ifndef WEFT_RASTER_H
#define WEFT_RASTER_H

#include <stdint.h>

#define RASTER_GLYPH_W 5   /* a glyph's pixels at scale 1 (descenders: one row more) ... */
#define RASTER_GLYPH_H 7
#define RASTER_ADVANCE 6   /* ... and the step to the next one */

struct canvas {
    int w, h;
    uint8_t *px;  /* w x h x RGB, rows top to bottom */
};

/* colours are 0xRRGGBB */
int weft_canvas_init(struct canvas *c, int w, int h, uint32_t bg); /* 0, or -1 out of memory */
void weft_canvas_free(struct canvas *c);
void weft_canvas_rect(struct canvas *c, int x, int y, int w, int h, uint32_t rgb);
/* a line width pixels thick (square pen) from (x0,y0) to (x1,y1) */
void weft_canvas_line(struct canvas *c, int x0, int y0, int x1, int y1, int width, uint32_t rgb);
/* text with its first glyph's top-left corner at (x, y) */
void weft_canvas_text(struct canvas *c, int x, int y, const char *s, int scale, uint32_t rgb);
/* text turned a quarter anticlockwise (read bottom to top), its first
 * glyph's bottom-left corner at (x, y): a vertical axis label */
void weft_canvas_text_up(struct canvas *c, int x, int y, const char *s, int scale, uint32_t rgb);
/* characters (UTF-8 code points) in s, and the text's width in pixels */
int weft_raster_text_len(const char *s);
int weft_raster_text_width(const char *s, int scale);

#endif
