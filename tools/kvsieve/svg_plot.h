/* kvsieve CLI — a small SVG line-plot writer (our own code; no dependencies).
 * One or more panels side by side, each with axes, ticks, grid, one polyline with markers per
 * series, and a shared legend. The file opens in any browser or image viewer. */
#ifndef KVS_TOOLS_SVG_PLOT_H
#define KVS_TOOLS_SVG_PLOT_H

#include <stdio.h>

typedef struct svg_panel {
    const char *title;
    const char *xlabel, *ylabel;
    int n_series, n_points;
    const double *x;        /* [n_points] shared x values */
    const double *y;        /* [n_series][n_points]; NaN = no point */
    int y_from_zero;        /* 1: the y axis starts at 0 */
    int y_log;              /* 1: logarithmic y axis (values <= 0 are skipped) */
} svg_panel;

/* Writes an SVG document with the panels in a row and a legend naming the series (names
 * [n_series], shared by all panels). Returns 0, or -1 on a write error. */
int svg_write_plot(FILE *f, const char *title, const char *const *names, const svg_panel *panels, int n_panels);

#endif
