/* kvsieve CLI — SVG line plots (see svg_plot.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "svg_plot.h"

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_PALETTE (int)(sizeof palette / sizeof palette[0])

enum { PW = 420, PH = 300, ML = 62, MR = 18, MT = 36, MB = 48 };

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* A "nice" tick step for the range [lo, hi] with about n ticks. */
static double nice_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n;
    if (!(raw > 0)) return 1.0;
    double p = pow(10.0, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * p;
}

static void panel(FILE *f, const svg_panel *p, double ox, double oy) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < p->n_points; i++) {
        xmin = fmin(xmin, p->x[i]);
        xmax = fmax(xmax, p->x[i]);
    }
    for (int s = 0; s < p->n_series; s++)
        for (int i = 0; i < p->n_points; i++) {
            double v = p->y[s * p->n_points + i];
            if (isnan(v) || (p->y_log && v <= 0)) continue;
            if (p->y_log) v = log10(v);
            ymin = fmin(ymin, v);
            ymax = fmax(ymax, v);
        }
    if (!isfinite(xmin)) xmin = 0, xmax = 1;
    if (!isfinite(ymin)) ymin = 0, ymax = 1;
    if (p->y_from_zero && !p->y_log && ymin > 0) ymin = 0;
    if (xmax - xmin < 1e-12) xmin -= 0.5, xmax += 0.5;
    if (ymax - ymin < 1e-12) ymin -= 0.5, ymax += 0.5;
    double xpad = 0.05 * (xmax - xmin), ypad = 0.06 * (ymax - ymin);
    xmin -= xpad, xmax += xpad;
    if (!(p->y_from_zero && ymin == 0)) ymin -= ypad;
    ymax += ypad;
    double w = PW - ML - MR, h = PH - MT - MB;
#define SX(v) (ox + ML + ((v) - xmin) / (xmax - xmin) * w)
#define SY(v) (oy + MT + h - ((v) - ymin) / (ymax - ymin) * h)
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" stroke=\"#444\"/>\n", ox + ML,
            oy + MT, w, h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\">", ox + ML + w / 2, oy + 22.0);
    esc(f, p->title);
    fputs("</text>\n", f);
    /* ticks */
    double xs = nice_step(xmin, xmax, 6);
    for (double v = ceil(xmin / xs) * xs; v <= xmax + 1e-12; v += xs) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", SX(v), oy + MT, SX(v), oy + MT + h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", SX(v), oy + MT + h + 15,
                fabs(v) < 1e-12 ? 0.0 : v);
    }
    double ys = p->y_log ? 1.0 : nice_step(ymin, ymax, 6);
    for (double v = ceil(ymin / ys) * ys; v <= ymax + 1e-12; v += ys) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ox + ML, SY(v), ox + ML + w, SY(v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", ox + ML - 5, SY(v) + 4,
                p->y_log ? pow(10.0, v) : (fabs(v) < 1e-12 ? 0.0 : v));
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">", ox + ML + w / 2, oy + PH - 10.0);
    esc(f, p->xlabel);
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">",
            ox + 16, oy + MT + h / 2, ox + 16, oy + MT + h / 2);
    esc(f, p->ylabel);
    fputs("</text>\n", f);
    for (int s = 0; s < p->n_series; s++) {
        const char *col = palette[s % N_PALETTE];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int i = 0; i < p->n_points; i++) {
            double v = p->y[s * p->n_points + i];
            if (isnan(v) || (p->y_log && v <= 0)) continue;
            if (p->y_log) v = log10(v);
            fprintf(f, "%.1f,%.1f ", SX(p->x[i]), SY(v));
        }
        fputs("\"/>\n", f);
        for (int i = 0; i < p->n_points; i++) {
            double v = p->y[s * p->n_points + i];
            if (isnan(v) || (p->y_log && v <= 0)) continue;
            if (p->y_log) v = log10(v);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", SX(p->x[i]), SY(v), col);
        }
    }
#undef SX
#undef SY
}

int svg_write_plot(FILE *f, const char *title, const char *const *names, const svg_panel *panels, int n_panels) {
    int n_series = n_panels > 0 ? panels[0].n_series : 0;
    int legend_h = 22 * ((n_series + 3) / 4) + 10;
    int W = PW * (n_panels > 0 ? n_panels : 1), H = 34 + PH + legend_h;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\" text-anchor=\"middle\">", W / 2);
    esc(f, title);
    fputs("</text>\n", f);
    for (int i = 0; i < n_panels; i++) panel(f, &panels[i], (double)i * PW, 34.0);
    for (int s = 0; s < n_series; s++) {
        double x = 20 + (s % 4) * ((W - 40) / 4.0), y = 34 + PH + 16 + 22 * (s / 4);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", x, y - 4, x + 24,
                y - 4, palette[s % N_PALETTE]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">", x + 30, y);
        esc(f, names[s]);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}
