/* CPU backend: per-row top-p over mass (contract: kvs_topp in include/kvsieve/ops.h).
 * Per row: the positive finite masses are copied, sorted in decreasing order and their prefix sums
 * taken in float64 until they reach p * T (T: their float64 sum); the reference of the op. Rows
 * run in parallel (OpenMP), each thread with its own part of the device scratch. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "cpu_kernels.h"

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* One row: x[0..len) -> *count, *thr; w: scratch of len floats. */
static void topp_row(const float *x, int64_t len, double p, float *w, int32_t *count, float *thr) {
    int64_t m = 0;
    double total = 0.0;
    for (int64_t j = 0; j < len; j++)
        if (isfinite(x[j]) && x[j] > 0.0f) {
            w[m++] = x[j];
            total += x[j];
        }
    if (m == 0) {
        *count = 0;
        *thr = INFINITY;
        return;
    }
    qsort(w, (size_t)m, sizeof *w, cmp_desc);
    int64_t k = m; /* p = 1: every entry with mass, whatever the rounding of the sums */
    if (p < 1.0) {
        double target = p * total, s = 0.0;
        for (int64_t i = 0; i < m; i++) {
            s += w[i];
            if (s >= target) {
                k = i + 1;
                break;
            }
        }
    }
    *count = (int32_t)k;
    *thr = w[k - 1];
}

typedef struct topp_ctx {
    const kvs_topp_args *a;
    const float *x;
    int32_t *oc;
    float *ot;
    const int32_t *row_len;
    float *scr; /* per thread: n floats */
} topp_ctx;

/* row r, in thread tid's work area */
static void topp_one(void *cv, int tid, int64_t r) {
    const topp_ctx *c = cv;
    const int64_t n = c->a->n;
    int64_t len = n;
    if (c->row_len) {
        len = c->row_len[r];
        if (len < 0) len = 0;
        if (len > n) len = n;
    }
    float t;
    topp_row(c->x + r * n, len, c->a->p.p, c->scr + (size_t)tid * (size_t)n, &c->oc[r], &t);
    if (c->ot) c->ot[r] = t;
}

kvs_status kvs_cpu_topp(kvs_device *dev, const kvs_topp_args *a) {
    const float *x = kvs_tensor_host_ptr(a->x);
    int32_t *oc = kvs_tensor_host_ptr(a->count);
    float *ot = a->thr ? kvs_tensor_host_ptr(a->thr) : NULL;
    const int32_t *row_len = kvs_i32(a->p.row_len);
    const int64_t n = a->n;
    int nt = kvs_cpu_nt(dev, (double)a->rows * (double)n * 16.0);
    if (nt > a->rows) nt = (int)a->rows;
    if (nt < 1) nt = 1;
    topp_ctx c = {.a = a, .x = x, .oc = oc, .ot = ot, .row_len = row_len,
                  .scr = kvs_cpu_scratch(dev, (size_t)nt * (size_t)n * sizeof(float))};
    if (!c.scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topp (cpu): cannot allocate scratch");
    kvs_par_for(nt, a->rows, 4, topp_one, &c);
    return KVS_OK;
}
