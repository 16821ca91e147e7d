/* Grouped bar charts as SVG (text) and PNG (tools/raster + tools/png, no
 * dependencies): categories along the x axis, in each a bar per series (a
 * colour each, named in the legend), the value above a bar where it fits,
 * a y axis with ticks and a grid (logarithmic when the values span more
 * than a factor of 50), a title and a subtitle. The SVG and the PNG have
 * the same layout; the PNG's text is a 5x7 bitmap font (ASCII). */
#ifndef WEFT_PLOT_H
#define WEFT_PLOT_H

struct plot_bars {
    const char *title, *subtitle;    /* subtitle may be NULL */
    const char *y_label;             /* e.g. "tokens/s" */
    int n_groups;                    /* categories along x (1..64) */
    const char *const *groups;       /* their labels */
    int n_series;                    /* bars in each category (1..64) */
    const char *const *series;       /* legend labels */
    const double *values;            /* [n_series][n_groups], row-major; NaN or < 0: no bar */
};

/* Write the chart to path. Return 0, or -1 with errno set (EINVAL for a
 * chart outside the limits above). */
int weft_plot_bars_svg(const struct plot_bars *p, const char *path);
int weft_plot_bars_png(const struct plot_bars *p, const char *path);

/* The image's size in pixels (the same for the SVG and the PNG; the height
 * grows with the legend, a row per series). */
void weft_plot_bars_size(const struct plot_bars *p, int *w, int *h);

/* The colour of series i (0xRRGGBB), as the legend shows it. */
unsigned weft_plot_series_colour(int i);

#endif
