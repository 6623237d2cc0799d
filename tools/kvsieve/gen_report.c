/* kvsieve generate — the --stats step breakdown and the --profile tables; see gen_report.h. */
#include "gen_report.h"

#include <stdlib.h>
#include <string.h>

void gen_profile_capture(kvs_device *dev, gen_profile *p) {
    p->e = NULL;
    p->n = 0;
    int64_t n = kvs_device_profile_read(dev, NULL, 0);
    if (n <= 0) return;
    p->e = calloc((size_t)n, sizeof *p->e);
    if (!p->e) return;
    p->n = kvs_device_profile_read(dev, p->e, n);
}

void gen_profile_free(gen_profile *p) {
    free(p->e);
    p->e = NULL;
    p->n = 0;
}

typedef struct parts {
    double v[7]; /* plan, forward, logits, confidence, commit, other, total: ms per step */
} parts;

static const char *const part_names[7] = {"plan", "forward", "logits", "confidence", "commit", "other", "total"};

static parts breakdown(const kvs_gen_stats *st) {
    parts p;
    double k = st->steps > 0 ? 1e3 / (double)st->steps : 0.0;
    double known = st->seconds_plan + st->seconds_forward + st->seconds_logits + st->seconds_confidence + st->seconds_commit;
    p.v[0] = st->seconds_plan * k;
    p.v[1] = st->seconds_forward * k;
    p.v[2] = st->seconds_logits * k;
    p.v[3] = st->seconds_confidence * k;
    p.v[4] = st->seconds_commit * k;
    p.v[5] = (st->seconds - known) * k;
    p.v[6] = st->seconds * k;
    return p;
}

void gen_print_breakdown(FILE *f, const char *label, const kvs_gen_stats *st) {
    parts p = breakdown(st);
    fprintf(f, "%s per step (ms, %lld steps):", label, (long long)st->steps);
    for (int i = 0; i < 6; i++) fprintf(f, " %s %.3f%s", part_names[i], p.v[i], i < 5 ? "," : "");
    fprintf(f, "; total %.3f\n", p.v[6]);
}

json_object *gen_breakdown_json(const kvs_gen_stats *st) {
    parts p = breakdown(st);
    json_object *j = json_object_new_object();
    for (int i = 0; i < 7; i++) json_object_object_add(j, part_names[i], json_object_new_double(p.v[i]));
    return j;
}

/* Distinct kinds in the order they first appear (the profile is ordered by kind). */
static int kinds_of(const gen_profile *p, const char **kinds, int max) {
    int nk = 0;
    for (int64_t i = 0; i < p->n; i++)
        if (nk == 0 || strcmp(kinds[nk - 1], p->e[i].kind) != 0) {
            if (nk == max) break;
            kinds[nk++] = p->e[i].kind;
        }
    return nk;
}

void gen_print_profile(FILE *f, const char *label, const gen_profile *p, int64_t steps, int n_layers) {
    if (!p->n) {
        fprintf(f, "%s profile: nothing recorded\n", label);
        return;
    }
    double k = steps > 0 ? 1.0 / (double)steps : 1.0, total = 0;
    for (int64_t i = 0; i < p->n; i++) total += p->e[i].seconds;
    const char *kinds[64];
    int nk = kinds_of(p, kinds, 64);
    fprintf(f, "%s profile, per step over %lld steps: %.3f ms of device work\n", label, (long long)steps, total * k * 1e3);
    fprintf(f, "  %-12s %10s %10s %7s %10s\n", "kind", "calls", "ms", "share", "MB moved");
    for (int c = 0; c < nk; c++) {
        int64_t calls = 0, bytes = 0;
        double s = 0;
        for (int64_t i = 0; i < p->n; i++)
            if (strcmp(p->e[i].kind, kinds[c]) == 0) calls += p->e[i].calls, bytes += p->e[i].bytes, s += p->e[i].seconds;
        fprintf(f, "  %-12s %10.1f %10.4f %6.1f%% %10.4f\n", kinds[c], (double)calls * k, s * k * 1e3,
                total > 0 ? 100.0 * s / total : 0.0, (double)bytes * k / 1e6);
    }
    /* ms per step per kind and place, in the order the forward runs: the embedding, layers 0 ..
     * n_layers-1, then the head (the logits head and work outside the forward); each row sums to
     * its kind's ms above, the last row ("all") to the device work */
    int nl = n_layers < KVS_PROFILE_MAX_LAYERS ? n_layers : KVS_PROFILE_MAX_LAYERS;
    if (nl < 0) nl = 0;
    fprintf(f, "  ms per layer %7s", "embed");
    for (int l = 0; l < nl; l++) fprintf(f, " %7d", l);
    fprintf(f, " %7s\n", "head");
    const int ncol = nl + 2;
    double *col = calloc((size_t)ncol, sizeof *col);
    for (int c = 0; c < nk; c++) {
        fprintf(f, "  %-12s", kinds[c]);
        for (int j = 0; j < ncol; j++) {
            const int l = j == 0 ? KVS_PROFILE_EMBED : (j <= nl ? j - 1 : -1);
            double s = 0;
            for (int64_t i = 0; i < p->n; i++) {
                /* layers beyond the table's (n_layers wrong) count in the last layer's column */
                const int el = p->e[i].layer >= nl && nl > 0 ? nl - 1 : p->e[i].layer;
                if (el == l && strcmp(p->e[i].kind, kinds[c]) == 0) s += p->e[i].seconds;
            }
            if (col) col[j] += s;
            fprintf(f, " %7.4f", s * k * 1e3);
        }
        fprintf(f, "\n");
    }
    if (col) {
        fprintf(f, "  %-12s", "all");
        for (int j = 0; j < ncol; j++) fprintf(f, " %7.4f", col[j] * k * 1e3);
        fprintf(f, "\n");
    }
    free(col);
}

json_object *gen_profile_json(const gen_profile *p) {
    json_object *a = json_object_new_array();
    for (int64_t i = 0; i < p->n; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "kind", json_object_new_string(p->e[i].kind));
        const int l = p->e[i].layer;
        json_object_object_add(o, "part", json_object_new_string(l == KVS_PROFILE_EMBED ? "embed" : l < 0 ? "head" : "layer"));
        json_object_object_add(o, "layer", l >= 0 ? json_object_new_int(l) : NULL);
        json_object_object_add(o, "calls", json_object_new_int64(p->e[i].calls));
        json_object_object_add(o, "ms", json_object_new_double(p->e[i].seconds * 1e3));
        json_object_object_add(o, "bytes", json_object_new_int64(p->e[i].bytes));
        json_object_array_add(a, o);
    }
    return a;
}

const char *gen_bytes_str(char *buf, size_t cap, int64_t bytes) {
    if (bytes >= 104858) snprintf(buf, cap, "%.2f MiB", (double)bytes / 1048576.0);
    else if (bytes >= 1024) snprintf(buf, cap, "%.2f KiB", (double)bytes / 1024.0);
    else snprintf(buf, cap, "%lld bytes", (long long)bytes);
    return buf;
}

/* Length of the well-formed UTF-8 sequence at p (Unicode 15, table 3-7), 0 if there is none. */
static int utf8_len(const unsigned char *p) {
    const unsigned c = p[0];
    if (c < 0x80) return 1;
    int n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

json_object *gen_json_text(const char *s) {
    if (!s) return json_object_new_string("");
    const size_t len = strlen(s);
    char *o = malloc(3 * len + 1); /* each byte at most U+FFFD's 3 bytes */
    if (!o) return json_object_new_string("");
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int n = utf8_len(p);
        if (n) {
            memcpy(o + k, p, (size_t)n);
            k += (size_t)n, p += n;
        } else {
            memcpy(o + k, "\xef\xbf\xbd", 3);
            k += 3, p++;
        }
    }
    json_object *j = json_object_new_string_len(o, (int)k);
    free(o);
    return j;
}
