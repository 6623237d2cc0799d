/* kvsieve bench ops: deterministic inputs, the timing rule (one warm-up, calibration, median of
 * samples within the per-case budget; cmd_bench.c's header) and the case rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"

float bench_rng_uniform(uint64_t *s) {
    /* xorshift64*: deterministic inputs for every run */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 2685821657736338717ull;
    return (float)((double)(r >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* Creates a tensor and fills it with uniform [-1, 1) values (F32/F16) or zeros (others). */
kvs_status bench_new_tensor(bench *b, kvs_tensor **t, kvs_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2,
                             int64_t ne3) {
    kvs_status s = kvs_tensor_new(t, b->dev, dt, ne0, ne1, ne2, ne3);
    if (s != KVS_OK) return s;
    int64_t n = kvs_tensor_nelements(*t);
    size_t nb = kvs_tensor_nbytes(*t);
    void *h = malloc(nb);
    if (!h) return KVS_ERR_OUT_OF_MEMORY;
    if (dt == KVS_F32) {
        float *f = h;
        for (int64_t i = 0; i < n; i++) f[i] = bench_rng_uniform(&b->rng);
    } else if (dt == KVS_F16) {
        uint16_t *f = h;
        for (int64_t i = 0; i < n; i++) f[i] = kvs_f32_to_f16(bench_rng_uniform(&b->rng));
    } else { /* bf16, q8_0: zeros (valid values; the timing does not depend on them) */
        memset(h, 0, nb);
    }
    s = kvs_tensor_upload(*t, h, 0, nb);
    free(h);
    return s;
}

/* I32 tensor [groups][n] with idx[g][i] = floor(i * range / n): strictly increasing when
 * range >= n (a keep-set in index order, as eviction produces). */
kvs_status bench_new_index(bench *b, kvs_tensor **t, int64_t n, int64_t groups, int64_t range) {
    kvs_status s = kvs_tensor_new(t, b->dev, KVS_I32, n, groups, 0, 0);
    if (s != KVS_OK) return s;
    int32_t *h = malloc((size_t)(n * groups) * sizeof *h);
    if (!h) return KVS_ERR_OUT_OF_MEMORY;
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < n; i++) h[g * n + i] = (int32_t)(i * range / n);
    s = kvs_tensor_upload(*t, h, 0, (size_t)(n * groups) * sizeof *h);
    free(h);
    return s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}


/* Fastest sample and sample count of the last bench_time_op call (the median is its result). */
static double last_best;
static int last_samples;

/* Warm-up, calibrate, `reps` samples, median seconds per call. */
kvs_status bench_time_op(bench *b, run_fn fn, void *st, double *sec) {
    double t0 = cli_now();
    kvs_status s = fn(b, st);
    if (s == KVS_OK) s = kvs_device_sync(b->dev);
    if (s != KVS_OK) return s;
    double tw = cli_now() - t0;
    /* the warm-up includes first-use work (kernel compiles, page faults): only a very slow one
     * is reported as it is; otherwise one steady call decides */
    if (tw > 3.0 * b->budget_s) {
        *sec = last_best = tw;
        last_samples = 0;
        return KVS_OK;
    }
    t0 = cli_now();
    s = fn(b, st);
    if (s == KVS_OK) s = kvs_device_sync(b->dev);
    if (s != KVS_OK) return s;
    double t1 = cli_now() - t0;
    if (t1 > b->budget_s) { /* too slow for more samples: report this steady call */
        *sec = last_best = t1;
        last_samples = 1;
        return KVS_OK;
    }
    int inner = 1;
    if (t1 < b->min_sample_s) inner = (int)fmin(1000.0, ceil(b->min_sample_s / fmax(t1, 1e-7)));
    int reps = b->reps;
    if (t1 > 0.5 && reps > 3) reps = 3; /* long calls: three samples are enough */
    while (reps > 1 && reps * inner * t1 > b->budget_s) reps--;
    double samples[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        t0 = cli_now();
        for (int i = 0; i < inner && s == KVS_OK; i++) s = fn(b, st);
        if (s == KVS_OK) s = kvs_device_sync(b->dev);
        if (s != KVS_OK) return s;
        samples[r] = (cli_now() - t0) / inner;
    }
    qsort(samples, (size_t)reps, sizeof samples[0], cmp_double);
    last_best = samples[0];
    last_samples = reps;
    *sec = reps % 2 ? samples[reps / 2] : 0.5 * (samples[reps / 2 - 1] + samples[reps / 2]);
    return KVS_OK;
}

static int selected(const bench *b, const char *op, const char *shape) {
    if (!b->filter || !*b->filter) return 1;
    char full[128];
    snprintf(full, sizeof full, "%s %s", op, shape);
    size_t n = strlen(b->filter);
    for (const char *p = full; *p; p++)
        if (strncasecmp(p, b->filter, n) == 0) return 1;
    return 0;
}

const char *bench_unit_name(unit u) { return u == UNIT_FLOPS ? "GFLOP/s" : "GB/s"; }

double bench_row_rate(const row *r) { return r->work / r->sec * 1e-9; }

const peak *bench_row_peak(const bench *b, const row *r) { return r->unit == UNIT_FLOPS ? &b->gemm : &b->bw; }


/* Records the outcome of one case; s is the status of setup or timing. */
void bench_finish_row(bench *b, row *r, kvs_status s, double sec) {
    if (s == KVS_OK) {
        r->status = ROW_OK;
        r->sec = sec;
        r->best = last_best;
        r->samples = last_samples;
    } else if (s == KVS_ERR_UNSUPPORTED) {
        r->status = ROW_UNSUPPORTED;
        snprintf(r->msg, sizeof r->msg, "%s", kvs_last_error());
    } else if (s == KVS_ERR_OUT_OF_MEMORY) {
        r->status = ROW_TOO_LARGE;
        snprintf(r->msg, sizeof r->msg, "%s", kvs_last_error());
    } else {
        r->status = ROW_ERROR;
        snprintf(r->msg, sizeof r->msg, "%s: %s", kvs_status_name(s), kvs_last_error());
        b->n_errors++;
    }
    bench_print_row(b, r);
}

row *bench_new_row(bench *b, const char *op, const char *shape, unit u, double work) {
    if (b->list_only) {
        int known = 0;
        for (int i = 0; i < b->n_ops; i++) known |= strcmp(b->ops[i], op) == 0;
        if (!known && b->n_ops < (int)(sizeof b->ops / sizeof b->ops[0]))
            snprintf(b->ops[b->n_ops++], sizeof b->ops[0], "%s", op);
        b->n_rows += selected(b, op, shape);
        return NULL;
    }
    if (!selected(b, op, shape) || b->n_rows >= MAX_ROWS) return NULL;
    row *r = &b->rows[b->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->unit = u;
    r->work = work;
    kvs_clear_error();
    return r;
}

void bench_destroy_all(kvs_tensor **ts, int n) {
    for (int i = 0; i < n; i++) kvs_tensor_destroy(&ts[i]);
}
