/* See plot.h. The chart is laid out once in pixels and drawn through a
 * sink (rectangles, lines, text), of which there are two: SVG elements
 * written to a file, and the raster canvas encoded as a PNG. Text metrics
 * are the bitmap font's (6 px a character at scale 1, 7 px high); the SVG
 * uses a monospace font sized to about the same advance. */
#include "tools/plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/png.h"
#include "tools/raster.h"

#define W 1000           /* image width; the height follows the legend */
#define PLOT_LEFT 96
#define PLOT_RIGHT 24
#define PLOT_TOP 78
#define PLOT_H 330
#define MAX_TICKS 24

static const unsigned palette[] = {0x4E79A7, 0xF28E2B, 0xE15759, 0x76B7B2, 0x59A14F,
                                   0xEDC948, 0xB07AA1, 0xFF9DA7, 0x9C755F, 0xBAB0AC};
#define INK 0x222222
#define GREY 0x666666
#define GRID 0xDDDDDD

unsigned weft_plot_series_colour(int i)
{
    return palette[(unsigned)i % (sizeof palette / sizeof palette[0])];
}

/* ---- sinks ---- */

enum anchor { START, MIDDLE, END };
enum { UP = 1, BOLD = 2 };  /* text flags */

struct sink {
    void (*rect)(struct sink *s, int x, int y, int w, int h, unsigned rgb);
    void (*line)(struct sink *s, int x0, int y0, int x1, int y1, unsigned rgb);
    /* text whose glyphs' top is at y (UP: turned, read bottom to top, x its left edge) */
    void (*text)(struct sink *s, int x, int y, const char *t, int scale, unsigned rgb, enum anchor a, int flags);
    FILE *f;              /* svg */
    struct canvas *c;     /* png */
};

static void svg_rect(struct sink *s, int x, int y, int w, int h, unsigned rgb)
{
    fprintf(s->f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#%06X\"/>\n", x, y, w, h, rgb);
}

static void svg_line(struct sink *s, int x0, int y0, int x1, int y1, unsigned rgb)
{
    fprintf(s->f, "<line x1=\"%d.5\" y1=\"%d.5\" x2=\"%d.5\" y2=\"%d.5\" stroke=\"#%06X\" stroke-width=\"1\"/>\n", x0,
            y0, x1, y1, rgb);
}

static void svg_escaped(FILE *f, const char *t)
{
    for (; *t; t++) {
        switch (*t) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*t >= 0x20 || *t == '\t') fputc(*t, f);  /* no control characters in XML */
        }
    }
}

static void svg_text(struct sink *s, int x, int y, const char *t, int scale, unsigned rgb, enum anchor a, int flags)
{
    static const char *const anchors[] = {"start", "middle", "end"};
    int base = RASTER_GLYPH_H * scale;  /* the baseline is at the glyphs' bottom */
    if (flags & UP)
        fprintf(s->f, "<text transform=\"translate(%d,%d) rotate(-90)\"", x + base, y);
    else
        fprintf(s->f, "<text x=\"%d\" y=\"%d\"", x, y + base);
    fprintf(s->f, " font-size=\"%d\" fill=\"#%06X\" text-anchor=\"%s\"%s>", 10 * scale, rgb, anchors[a],
            flags & BOLD ? " font-weight=\"bold\"" : "");
    svg_escaped(s->f, t);
    fputs("</text>\n", s->f);
}

static void png_rect(struct sink *s, int x, int y, int w, int h, unsigned rgb) { weft_canvas_rect(s->c, x, y, w, h, rgb); }

static void png_line(struct sink *s, int x0, int y0, int x1, int y1, unsigned rgb)
{
    weft_canvas_line(s->c, x0, y0, x1, y1, 1, rgb);
}

static void png_text(struct sink *s, int x, int y, const char *t, int scale, unsigned rgb, enum anchor a, int flags)
{
    int w = weft_raster_text_width(t, scale), shift = a == MIDDLE ? w / 2 : a == END ? w : 0;
    for (int k = 0; k <= (flags & BOLD ? 1 : 0); k++) {  /* bold: struck twice, a pixel apart */
        if (flags & UP) weft_canvas_text_up(s->c, x, y + shift - k, t, scale, rgb);
        else weft_canvas_text(s->c, x - shift + k, y, t, scale, rgb);
    }
}

/* ---- layout ---- */

struct axis {
    int log;
    double lo, hi;              /* the axis' range (log: exponents of 10) */
    int n_ticks;
    double ticks[MAX_TICKS];    /* values */
};

static int valid(double v) { return isfinite(v) && v >= 0; }

/* ticks at 1, 2, 5 x 10^k: the step giving at most 6 intervals up to max */
static void linear_axis(struct axis *a, double max)
{
    if (!(max > 0)) max = 1;
    double raw = max / 5, mag = pow(10, floor(log10(raw))), step = mag * 10;
    static const double mult[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (mag * mult[i] >= raw) { step = mag * mult[i]; break; }
    a->log = 0;
    a->lo = 0;
    a->n_ticks = 0;
    for (double t = 0; a->n_ticks < MAX_TICKS; t += step) {
        a->ticks[a->n_ticks++] = t;
        if (t >= max * (1 - 1e-9)) break;
    }
    a->hi = a->ticks[a->n_ticks - 1];
}

/* decades from below the smallest value to above the largest; 2 and 5
 * between them when there are at most 2 decades */
static void log_axis(struct axis *a, double min, double max)
{
    int e0 = (int)floor(log10(min)), e1 = (int)ceil(log10(max));
    if (e1 <= e0) e1 = e0 + 1;
    a->log = 1;
    a->lo = e0;
    a->hi = e1;
    a->n_ticks = 0;
    for (int e = e0; e <= e1 && a->n_ticks < MAX_TICKS - 2; e++) {
        a->ticks[a->n_ticks++] = pow(10, e);
        if (e1 - e0 <= 2 && e < e1) {
            a->ticks[a->n_ticks++] = 2 * pow(10, e);
            a->ticks[a->n_ticks++] = 5 * pow(10, e);
        }
    }
}

/* pixel row of value v on the axis (plot top at y0) */
static int axis_y(const struct axis *a, int y0, double v)
{
    double f = a->log ? (log10(v > 0 ? v : pow(10, a->lo)) - a->lo) / (a->hi - a->lo) : (v - a->lo) / (a->hi - a->lo);
    if (f < 0) f = 0;
    if (f > 1) f = 1;
    return y0 + PLOT_H - (int)lround(f * PLOT_H);
}

/* 1500 -> "1500", 25000 -> "25k", 0.5 -> "0.5" */
static void tick_label(char *b, size_t n, double v)
{
    if (v >= 1e6) snprintf(b, n, "%gM", v / 1e6);
    else if (v >= 1e4) snprintf(b, n, "%gk", v / 1e3);
    else snprintf(b, n, "%g", v);
}

/* a bar's value: 3 significant digits, no exponent */
static void value_label(char *b, size_t n, double v)
{
    if (v >= 100) snprintf(b, n, "%.0f", v);
    else if (v >= 10) snprintf(b, n, "%.1f", v);
    else snprintf(b, n, "%.2f", v);
}

/* s cut to at most max characters (code points), "..." marking a cut */
static void fit(char *b, size_t n, const char *s, int max)
{
    snprintf(b, n, "%s", s);
    if (weft_raster_text_len(b) <= max || max < 4) return;
    int keep = max - 3, k = 0;
    char *p = b;
    while (*p && k < keep) {
        p++;
        while ((*p & 0xC0) == 0x80) p++;
        k++;
    }
    snprintf(p, n - (size_t)(p - b), "...");
}

#define LEGEND_ROW 22

static int height(const struct plot_bars *p) { return PLOT_TOP + PLOT_H + 44 + p->n_series * LEGEND_ROW + 12; }

void weft_plot_bars_size(const struct plot_bars *p, int *w, int *h)
{
    *w = W;
    *h = height(p);
}

static void draw(const struct plot_bars *p, struct sink *s)
{
    int h = height(p), x0 = PLOT_LEFT, y0 = PLOT_TOP, pw = W - PLOT_LEFT - PLOT_RIGHT;
    char buf[256];
    s->rect(s, 0, 0, W, h, 0xFFFFFF);
    fit(buf, sizeof buf, p->title, (W - 32) / (RASTER_ADVANCE * 2));
    s->text(s, 16, 14, buf, 2, INK, START, BOLD);
    if (p->subtitle) {
        fit(buf, sizeof buf, p->subtitle, (W - 32) / (RASTER_ADVANCE * 2));
        s->text(s, 16, 40, buf, 2, GREY, START, 0);
    }
    /* y axis */
    double vmin = INFINITY, vmax = 0;
    for (int i = 0; i < p->n_series * p->n_groups; i++)
        if (valid(p->values[i]) && p->values[i] > 0) {
            if (p->values[i] < vmin) vmin = p->values[i];
            if (p->values[i] > vmax) vmax = p->values[i];
        }
    struct axis ax;
    if (vmax > 0 && vmax / vmin > 50) log_axis(&ax, vmin, vmax);
    else linear_axis(&ax, vmax);
    for (int t = 0; t < ax.n_ticks; t++) {
        int y = axis_y(&ax, y0, ax.ticks[t]);
        if (t > 0) s->line(s, x0 + 1, y, x0 + pw, y, GRID);
        s->line(s, x0 - 5, y, x0, y, INK);
        tick_label(buf, sizeof buf, ax.ticks[t]);
        s->text(s, x0 - 9, y - 7, buf, 2, INK, END, 0);
    }
    snprintf(buf, sizeof buf, "%s%s", p->y_label ? p->y_label : "", ax.log ? " (log scale)" : "");
    s->text(s, 10, y0 + PLOT_H / 2, buf, 2, INK, MIDDLE, UP);
    s->line(s, x0, y0, x0, y0 + PLOT_H, INK);
    s->line(s, x0, y0 + PLOT_H, x0 + pw, y0 + PLOT_H, INK);
    /* bars: each group gets pw / n_groups, 80% of it bars side by side */
    double gw = (double)pw / p->n_groups, bw = gw * 0.8 / p->n_series;
    for (int g = 0; g < p->n_groups; g++) {
        int gx = x0 + (int)lround(g * gw);
        for (int i = 0; i < p->n_series; i++) {
            double v = p->values[i * p->n_groups + g];
            int bx = gx + (int)lround(gw * 0.1 + i * bw), bx1 = gx + (int)lround(gw * 0.1 + (i + 1) * bw);
            int w = bx1 - bx - (bw >= 6 ? 1 : 0), cx = bx + w / 2;
            if (!valid(v)) {
                s->text(s, cx, y0 + PLOT_H - 10, "-", 1, GREY, MIDDLE, 0);
                continue;
            }
            int y = axis_y(&ax, y0, v);
            if (y0 + PLOT_H - y > 0) s->rect(s, bx, y, w, y0 + PLOT_H - y, weft_plot_series_colour(i));
            value_label(buf, sizeof buf, v);
            int sc = weft_raster_text_width(buf, 2) <= bx1 - bx + 2 ? 2 : 1;  /* the larger font where it fits */
            if (weft_raster_text_width(buf, sc) <= bx1 - bx + 2) s->text(s, cx, y - 4 - 8 * sc, buf, sc, INK, MIDDLE, 0);
        }
        s->line(s, gx + (int)lround(gw / 2), y0 + PLOT_H, gx + (int)lround(gw / 2), y0 + PLOT_H + 4, INK);
        fit(buf, sizeof buf, p->groups[g], (int)(gw / (RASTER_ADVANCE * 2)));
        s->text(s, gx + (int)lround(gw / 2), y0 + PLOT_H + 10, buf, 2, INK, MIDDLE, 0);
    }
    /* legend: a swatch and the name, a row per series */
    int ly = y0 + PLOT_H + 44;
    for (int i = 0; i < p->n_series; i++, ly += LEGEND_ROW) {
        s->rect(s, x0, ly, 14, 14, weft_plot_series_colour(i));
        fit(buf, sizeof buf, p->series[i], (W - x0 - 24 - 16) / (RASTER_ADVANCE * 2));
        s->text(s, x0 + 24, ly, buf, 2, INK, START, 0);
    }
}

static int check(const struct plot_bars *p)
{
    if (!p || !p->title || !p->groups || !p->series || !p->values || p->n_groups < 1 || p->n_groups > 64 ||
        p->n_series < 1 || p->n_series > 64) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

int weft_plot_bars_svg(const struct plot_bars *p, const char *path)
{
    if (check(p)) return -1;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int h = height(p);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" xml:space=\"preserve\">\n<title>",
            W, h, W, h);
    svg_escaped(f, p->title);
    fputs("</title>\n", f);
    struct sink s = {svg_rect, svg_line, svg_text, f, NULL};
    draw(p, &s);
    fputs("</svg>\n", f);
    int e = ferror(f) ? EIO : 0;
    if (fclose(f) || e) {
        if (e) errno = e;
        return -1;
    }
    return 0;
}

int weft_plot_bars_png(const struct plot_bars *p, const char *path)
{
    if (check(p)) return -1;
    struct canvas c;
    if (weft_canvas_init(&c, W, height(p), 0xFFFFFF)) { errno = ENOMEM; return -1; }
    struct sink s = {png_rect, png_line, png_text, NULL, &c};
    draw(p, &s);
    int rc = weft_png_write_rgb(path, c.px, c.w, c.h);
    int e = errno;
    weft_canvas_free(&c);
    errno = e;
    return rc;
}
