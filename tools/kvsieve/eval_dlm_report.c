/* kvsieve eval --dlm and eval --dlm --tasks: table rows, JSON rows and SVG plots (eval_dlm.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "eval_dlm.h"

/* ---- SVG: three small line charts (speedup, compute fraction, agreement) against gen ---------- */

static void svg_panel(FILE *f, double x0, double y0, double w, double h, const char *title, const agg *a, int na,
                      const int64_t *gens, int ng, int metric, double ymax) {
    static const char *colors[] = {"#444444", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
    fprintf(f, "<g font-family=\"sans-serif\" font-size=\"11\">\n");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", x0, y0, w, h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">%s</text>\n", x0 + w / 2, y0 - 8, title);
    for (int t = 0; t <= 4; t++) {
        double v = ymax * t / 4, y = y0 + h - h * t / 4;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x0, y, x0 + w, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.2g</text>\n", x0 - 4, y + 4, v);
    }
    for (int g = 0; g < ng; g++) {
        double x = ng > 1 ? x0 + 20 + (w - 40) * g / (ng - 1) : x0 + w / 2;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld</text>\n", x, y0 + h + 14, (long long)gens[g]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">generated tokens</text>\n", x0 + w / 2, y0 + h + 30);
    /* one polyline per schedule name, in first-seen order */
    int series = 0;
    for (int i = 0; i < na; i++) {
        int first = 1;
        for (int j = 0; j < i; j++)
            if (!strcmp(a[j].name, a[i].name)) first = 0;
        if (!first) continue;
        const char *col = colors[series % 8];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int g = 0; g < ng; g++)
            for (int j = 0; j < na; j++) {
                if (strcmp(a[j].name, a[i].name) || a[j].gen != gens[g] || a[j].prompts == 0) continue;
                double v = metric == 0   ? (a[j].sec > 0 ? a[j].sec_base / a[j].sec : 0)
                           : metric == 1 ? (double)a[j].rows / (double)(a[j].rows_base ? a[j].rows_base : 1)
                                         : (double)a[j].agree / (double)(a[j].total ? a[j].total : 1);
                if (v > ymax) v = ymax;
                double x = ng > 1 ? x0 + 20 + (w - 40) * g / (ng - 1) : x0 + w / 2, y = y0 + h - h * v / ymax;
                fprintf(f, "%.1f,%.1f ", x, y);
            }
        fprintf(f, "\"/>\n");
        if (metric == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n", x0 + 6, y0 + 14 + 13 * series, col, a[i].name);
        series++;
    }
    fprintf(f, "</g>\n");
}

int eval_dlm_write_svg(const char *path, const agg *a, int na, const int64_t *gens, int ng, const char *model) {
    cli_out o;
    int e = cli_out_open(&o);
    if (e) return e;
    FILE *f = o.f;
    double maxsp = 1.0;
    for (int i = 0; i < na; i++)
        if (a[i].sec > 0 && a[i].sec_base / a[i].sec > maxsp) maxsp = a[i].sec_base / a[i].sec;
    maxsp = (double)(int)(maxsp + 1.0);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"960\" height=\"330\" viewBox=\"0 0 960 330\">\n");
    fprintf(f, "<rect width=\"960\" height=\"330\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"480\" y=\"20\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"14\">"
               "kvsieve eval --dlm: %s</text>\n", model);
    svg_panel(f, 50, 60, 260, 220, "speedup vs no cache", a, na, gens, ng, 0, maxsp);
    svg_panel(f, 370, 60, 260, 220, "compute fraction", a, na, gens, ng, 1, 1.0);
    svg_panel(f, 690, 60, 260, 220, "token agreement", a, na, gens, ng, 2, 1.0);
    fprintf(f, "</svg>\n");
    return cli_out_close(&o, path);
}

json_object *eval_dlm_agg_json(const agg *a) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "schedule", json_object_new_string(a->name));
    json_object_object_add(j, "gen", json_object_new_int64(a->gen));
    json_object_object_add(j, "wf_budget", json_object_new_double(a->budget));
    json_object_object_add(j, "prompts", json_object_new_int(a->prompts));
    json_object_object_add(j, "seconds", json_object_new_double(a->sec));
    json_object_object_add(j, "seconds_baseline", json_object_new_double(a->sec_base));
    json_object_object_add(j, "speedup", json_object_new_double(a->sec > 0 ? a->sec_base / a->sec : 0));
    json_object_object_add(j, "compute_fraction", json_object_new_double((double)a->rows / (double)(a->rows_base ? a->rows_base : 1)));
    json_object_object_add(j, "agreement", json_object_new_double((double)a->agree / (double)(a->total ? a->total : 1)));
    json_object_object_add(j, "first_divergence",
                           json_object_new_double((double)a->first_div / (double)(a->prompts ? a->prompts : 1)));
    if (a->fid_total > 0)
        json_object_object_add(j, "step_fidelity", json_object_new_double((double)a->fid_match / (double)a->fid_total));
    json_object_object_add(j, "kept_fraction",
                           json_object_new_double(a->context ? (double)a->kept / (double)a->context : 1.0));
    return j;
}

void eval_dlm_agg_print(const agg *a, int with_budget, int fid_col) {
    double sp = a->sec > 0 ? a->sec_base / a->sec : 0;
    printf("%-22s %5lld %7d %8.2fx %9.3f %10.3f %9.1f", a->name, (long long)a->gen, a->prompts, sp,
           (double)a->rows / (double)(a->rows_base ? a->rows_base : 1), (double)a->agree / (double)(a->total ? a->total : 1),
           (double)a->first_div / (double)(a->prompts ? a->prompts : 1));
    if (with_budget) printf(" %7.3f", a->context ? (double)a->kept / (double)a->context : 1.0);
    if (a->fid_total > 0) printf(" %9.3f", (double)a->fid_match / (double)a->fid_total);
    else if (fid_col) printf(" %9.3f", 1.0); /* the no-cache row is its own reference */
    printf("\n");
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

json_object *eval_tasks_cell_json(const char *task, const variant *v, const cell *c) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "task", json_object_new_string(task));
    json_object_object_add(j, "schedule", json_object_new_string(v->name));
    json_object_object_add(j, "wf_budget", json_object_new_double(v->budget));
    json_object_object_add(j, "threshold", json_object_new_double(v->threshold));
    json_object_object_add(j, "cases", json_object_new_int64(c->cases));
    json_object_object_add(j, "correct", json_object_new_int64(c->correct));
    json_object_object_add(j, "accuracy", json_object_new_double(ratio((double)c->correct, (double)c->cases)));
    json_object_object_add(j, "steps_mean", json_object_new_double(ratio((double)c->steps, (double)c->cases)));
    json_object_object_add(j, "tokens_per_step", json_object_new_double(ratio((double)c->gen, (double)c->steps)));
    json_object_object_add(j, "compute_fraction", json_object_new_double(ratio((double)c->rows, (double)c->rows_none)));
    json_object_object_add(j, "compute_fraction_llada",
                           json_object_new_double(ratio((double)c->rows, (double)c->rows_llada)));
    json_object_object_add(j, "seconds", json_object_new_double(c->sec));
    json_object_object_add(j, "speedup_llada", json_object_new_double(ratio(c->sec_llada, c->sec)));
    json_object_object_add(j, "speedup_none", json_object_new_double(ratio(c->sec_none, c->sec)));
    return j;
}

void eval_tasks_cell_print(const char *task, const variant *v, const cell *c) {
    printf("%-12s %-26s %5lld %8.3f %8.1f %7.2f %8.3f %8.3f %8.2fx %8.2fx\n", task, v->name, (long long)c->cases,
           ratio((double)c->correct, (double)c->cases), ratio((double)c->steps, (double)c->cases),
           ratio((double)c->gen, (double)c->steps), ratio((double)c->rows, (double)c->rows_none),
           ratio((double)c->rows, (double)c->rows_llada), ratio(c->sec_llada, c->sec), ratio(c->sec_none, c->sec));
}

/* SVG: two panels of grouped bars (accuracy, speedup vs the LLaDA baseline), one group per
 * variant, one bar per task. */
int eval_tasks_write_svg(const char *path, const char *model, const variant *v, int nv, char **tasks, int nt) {
    static const char *colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
    cli_out o;
    int e = cli_out_open(&o);
    if (e) return e;
    FILE *f = o.f;
    const double pw = 560, ph = 260, top = 60, left = 60, gap = 90;
    double maxsp = 1.0;
    for (int i = 0; i < nv; i++)
        for (int t = 0; t < nt; t++) {
            double s = ratio(v[i].cells[t].sec_llada, v[i].cells[t].sec);
            if (s > maxsp) maxsp = s;
        }
    maxsp = (double)(int)(maxsp + 1.0);
    const double W = left + 2 * pw + gap + 20, H = top + ph + 150;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", W, H, W,
            H);
    fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<g font-family=\"sans-serif\" font-size=\"11\">\n");
    fprintf(f, "<text x=\"%.0f\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">kvsieve eval --dlm --tasks: %s</text>\n",
            W / 2, model);
    for (int t = 0; t < nt; t++)
        fprintf(f, "<rect x=\"%.0f\" y=\"30\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"39\">%s</text>\n",
                left + 120.0 * t, colors[t % 8], left + 120.0 * t + 14, tasks[t]);
    for (int p = 0; p < 2; p++) {
        double x0 = left + p * (pw + gap), ymax = p == 0 ? 1.0 : maxsp;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">%s</text>\n", x0 + pw / 2, top - 6,
                p == 0 ? "accuracy" : "speedup vs LLaDA baseline (no cache, 1 token/step)");
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", x0, top, pw, ph);
        for (int k = 0; k <= 4; k++) {
            double y = top + ph - ph * k / 4;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x0, y, x0 + pw, y);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", x0 - 4, y + 4, ymax * k / 4);
        }
        double gw = pw / (nv > 0 ? nv : 1), bw = (gw - 6) / (nt > 0 ? nt : 1);
        for (int i = 0; i < nv; i++) {
            for (int t = 0; t < nt; t++) {
                const cell *c = &v[i].cells[t];
                double val = p == 0 ? ratio((double)c->correct, (double)c->cases) : ratio(c->sec_llada, c->sec);
                if (val > ymax) val = ymax;
                double h = ph * val / ymax;
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x0 + gw * i + 3 + bw * t,
                        top + ph - h, bw, h, colors[t % 8]);
            }
            double cx = x0 + gw * i + gw / 2, cy = top + ph + 8;
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(50 %.1f %.1f)\">%s</text>\n", cx, cy, cx, cy, v[i].name);
        }
    }
    fprintf(f, "</g>\n</svg>\n");
    return cli_out_close(&o, path);
}
