/* kvsieve bench ops: the table rows (ms, rate, unit, ratio to the peak) and the JSON report. */
#include <json-c/json.h>
#include <stdio.h>

#include "bench.h"

const char *const bench_row_status_names[] = {"ok", "unsupported", "too large",
                                              "skipped (a smaller size exceeded --max-seconds)", "error"};

void bench_print_row(const bench *b, const row *r) {
    if (b->json) return;
    printf("%-10s %-48s ", r->op, r->shape);
    if (r->status == ROW_OK) {
        double rate = bench_row_rate(r);
        const peak *pk = bench_row_peak(b, r);
        char ratio[16] = "-", side[64] = "";
        if (r->side_bw > 0) {
            snprintf(ratio, sizeof ratio, "%.2f", rate / r->side_bw);
            snprintf(side, sizeof side, "  (/ memcpy %.1f GB/s side by side, best of %d)", r->side_bw, r->samples);
        } else if (pk->valid) {
            snprintf(ratio, sizeof ratio, "%.2f", rate / pk->rate);
        }
        printf("%10.3f %9.1f %-7s %6s%s%s\n", r->sec * 1e3, rate, bench_unit_name(r->unit), ratio, side,
               r->samples ? "" : "  (one call, incl. first use)");
    } else if (r->status == ROW_ERROR) {
        printf("error: %s\n", r->msg);
    } else {
        printf("%s\n", bench_row_status_names[r->status]);
    }
    fflush(stdout);
}

static json_object *peak_json(const peak *p, const char *unit_key) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "what", json_object_new_string(p->what));
    json_object_object_add(o, "method", json_object_new_string(p->method));
    json_object_object_add(o, unit_key, p->valid ? json_object_new_double(p->rate) : NULL);
    return o;
}

void bench_print_json(const bench *b, const char *date, double load) {
    const kvs_device_info *info = kvs_device_get_info(b->dev);
    json_object *root = json_object_new_object();
    json_object_object_add(root, "kvsieve_version", json_object_new_string(kvs_version()));
    json_object_object_add(root, "date", json_object_new_string(date));
    json_object_object_add(root, "quick", json_object_new_boolean(b->quick));
    json_object_object_add(root, "load_average", load >= 0 ? json_object_new_double(load) : NULL);
    json_object *dev = json_object_new_object();
    json_object_object_add(dev, "backend", json_object_new_string(kvs_backend_name(info->backend)));
    json_object_object_add(dev, "index", json_object_new_int(info->index));
    json_object_object_add(dev, "name", json_object_new_string(info->name));
    json_object_object_add(dev, "threads", json_object_new_int(kvs_device_caps(b->dev)->n_threads));
    json_object_object_add(root, "device", dev);
    json_object *peaks = json_object_new_object();
    json_object_object_add(peaks, "gemm", peak_json(&b->gemm, "gflops"));
    json_object_object_add(peaks, "bandwidth", peak_json(&b->bw, "gbs"));
    json_object_object_add(root, "peaks", peaks);
    json_object *arr = json_object_new_array();
    for (int i = 0; i < b->n_rows; i++) {
        const row *r = &b->rows[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "op", json_object_new_string(r->op));
        json_object_object_add(o, "shape", json_object_new_string(r->shape));
        json_object_object_add(o, "unit", json_object_new_string(bench_unit_name(r->unit)));
        json_object_object_add(o, "status", json_object_new_string(bench_row_status_names[r->status]));
        json_object_object_add(o, "work", json_object_new_double(r->work));
        if (r->status == ROW_OK) {
            const peak *pk = bench_row_peak(b, r);
            json_object_object_add(o, "time_ms", json_object_new_double(r->sec * 1e3));
            json_object_object_add(o, "best_ms", json_object_new_double(r->best * 1e3));
            json_object_object_add(o, "samples", json_object_new_int(r->samples));
            json_object_object_add(o, "rate", json_object_new_double(bench_row_rate(r)));
            if (r->side_bw > 0) {
                json_object_object_add(o, "memcpy_side_by_side_gbs", json_object_new_double(r->side_bw));
                json_object_object_add(o, "ratio", json_object_new_double(bench_row_rate(r) / r->side_bw));
            } else {
                json_object_object_add(o, "ratio", pk->valid ? json_object_new_double(bench_row_rate(r) / pk->rate) : NULL);
            }
        } else {
            json_object_object_add(o, "message", json_object_new_string(r->msg));
        }
        json_object_array_add(arr, o);
    }
    json_object_object_add(root, "results", arr);
    printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
}
