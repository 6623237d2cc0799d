/* kvsieve bench ops: times the ops on one device and prints each rate next to the machine's own
 * measured peak on that device, as a ratio.
 *
 * Peaks (measured first, on the chosen device):
 *   compute   one large SGEMM through kvs_matmul (CPU: OpenBLAS), GFLOP/s = 2 m n k / s;
 *   bandwidth CPU: memcpy of a large buffer (single- and multi-threaded, the better one);
 *             GPU backends: kvs_copy f32 -> f32 of a large tensor (kvs_gather if copy is
 *             unsupported); GB/s = (bytes read + bytes written) / s.
 * Rates: compute-bound ops in GFLOP/s (attention: 4 n_q n_kv d n_heads, halved when causal);
 * memory-bound ops in GB/s counting each input read once and each output written once.
 * Timing: one warm-up call (first-use kernel compiles), then `reps` samples of `inner` calls each
 * (inner chosen so a sample lasts at least a few ms), kvs_device_sync before each stop; the median
 * sample is reported. A per-case time budget (--max-seconds) bounds slow devices: fewer samples
 * when calls are long, the warm-up call alone when it exceeds three budgets (marked), and the
 * larger attention sizes of a series are skipped once a smaller one exceeded it. Ops a device does not implement show "unsupported"; the bench still succeeds.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise */
#endif
#include <cblas.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "cmds.h"

#define MAX_ROWS 64
#define MAX_REPS 101

typedef enum unit { UNIT_FLOPS, UNIT_BYTES } unit;

typedef enum row_status { ROW_OK, ROW_UNSUPPORTED, ROW_TOO_LARGE, ROW_SKIPPED, ROW_ERROR } row_status;

static const char *const row_status_names[] = {"ok", "unsupported", "too large",
                                               "skipped (a smaller size exceeded --max-seconds)", "error"};

typedef struct row {
    char op[24];
    char shape[64];
    unit unit;
    double work;     /* flops or bytes per call */
    double sec;      /* median seconds per call (ROW_OK) */
    double best;     /* fastest sample, seconds per call (ROW_OK) */
    int samples;     /* timed samples behind sec; 0: only the warm-up call (includes first use) */
    row_status status;
    char msg[200];
} row;

typedef struct peak {
    int valid;
    double rate;     /* GFLOP/s or GB/s */
    char what[64];   /* shape / size */
    char method[64];
} peak;

typedef struct bench {
    kvs_device *dev;
    const char *spec;
    int quick, json, reps, threads;
    double min_sample_s;
    double budget_s; /* per-case time budget, seconds */
    const char *filter;
    uint64_t rng;
    peak gemm, bw;
    row rows[MAX_ROWS];
    int n_rows, n_errors;
} bench;

/* ---- helpers ---------------------------------------------------------------------------------- */

static float rng_uniform(uint64_t *s) {
    /* xorshift64*: deterministic inputs for every run */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 2685821657736338717ull;
    return (float)((double)(r >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* Creates a tensor and fills it with uniform [-1, 1) values (F32/F16) or zeros (others). */
static kvs_status new_tensor(bench *b, kvs_tensor **t, kvs_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2,
                             int64_t ne3) {
    kvs_status s = kvs_tensor_new(t, b->dev, dt, ne0, ne1, ne2, ne3);
    if (s != KVS_OK) return s;
    int64_t n = kvs_tensor_nelements(*t);
    size_t nb = kvs_tensor_nbytes(*t);
    void *h = malloc(nb);
    if (!h) return KVS_ERR_OUT_OF_MEMORY;
    if (dt == KVS_F32) {
        float *f = h;
        for (int64_t i = 0; i < n; i++) f[i] = rng_uniform(&b->rng);
    } else if (dt == KVS_F16) {
        uint16_t *f = h;
        for (int64_t i = 0; i < n; i++) f[i] = kvs_f32_to_f16(rng_uniform(&b->rng));
    } else {
        memset(h, 0, nb);
    }
    s = kvs_tensor_upload(*t, h, 0, nb);
    free(h);
    return s;
}

/* I32 tensor [groups][n] with idx[g][i] = floor(i * range / n): strictly increasing when
 * range >= n (a keep-set in index order, as eviction produces). */
static kvs_status new_index(bench *b, kvs_tensor **t, int64_t n, int64_t groups, int64_t range) {
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

typedef kvs_status (*run_fn)(bench *b, void *state);

/* Fastest sample and sample count of the last time_op call (the median is its result). */
static double last_best;
static int last_samples;

/* Warm-up, calibrate, `reps` samples, median seconds per call. */
static kvs_status time_op(bench *b, run_fn fn, void *st, double *sec) {
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

static const char *unit_name(unit u) { return u == UNIT_FLOPS ? "GFLOP/s" : "GB/s"; }

static double row_rate(const row *r) { return r->work / r->sec * 1e-9; }

static const peak *row_peak(const bench *b, const row *r) { return r->unit == UNIT_FLOPS ? &b->gemm : &b->bw; }

static void print_row(const bench *b, const row *r) {
    if (b->json) return;
    printf("%-10s %-36s ", r->op, r->shape);
    if (r->status == ROW_OK) {
        double rate = row_rate(r);
        const peak *pk = row_peak(b, r);
        char ratio[16] = "-";
        if (pk->valid) snprintf(ratio, sizeof ratio, "%.2f", rate / pk->rate);
        printf("%10.3f %9.1f %-7s %6s%s\n", r->sec * 1e3, rate, unit_name(r->unit), ratio,
               r->samples ? "" : "  (one call, incl. first use)");
    } else if (r->status == ROW_ERROR) {
        printf("error: %s\n", r->msg);
    } else {
        printf("%s\n", row_status_names[r->status]);
    }
    fflush(stdout);
}

/* Records the outcome of one case; s is the status of setup or timing. */
static void finish_row(bench *b, row *r, kvs_status s, double sec) {
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
    print_row(b, r);
}

static row *new_row(bench *b, const char *op, const char *shape, unit u, double work) {
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

static void destroy_all(kvs_tensor **ts, int n) {
    for (int i = 0; i < n; i++) kvs_tensor_destroy(&ts[i]);
}

/* ---- cases ------------------------------------------------------------------------------------ */

typedef struct mm_state {
    kvs_tensor *W, *x, *y;
} mm_state;

static kvs_status run_mm(bench *b, void *p) {
    mm_state *s = p;
    return kvs_matmul(b->dev, s->W, s->x, s->y, 0);
}

/* y [n][m] = W [m][k] x [n][k]; GFLOP/s when n > 8, else GB/s (decode GEMV is memory-bound). */
static void case_matmul(bench *b, kvs_dtype wt, int64_t m, int64_t k, int64_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "m=%lld k=%lld n=%lld W %s", (long long)m, (long long)k, (long long)n,
             kvs_dtype_name(wt));
    int gemv = n <= 8;
    double work = gemv ? (double)kvs_dtype_bytes(wt, m * k) + 4.0 * (double)(n * k + n * m)
                       : 2.0 * (double)m * (double)k * (double)n;
    row *r = new_row(b, gemv ? "gemv" : "matmul", shape, gemv ? UNIT_BYTES : UNIT_FLOPS, work);
    if (!r) return;
    mm_state s = {0};
    double sec = 0;
    kvs_status st = new_tensor(b, &s.W, wt, k, m, 0, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.x, KVS_F32, k, n, 0, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.y, KVS_F32, m, n, 0, 0);
    if (st == KVS_OK) st = time_op(b, run_mm, &s, &sec);
    finish_row(b, r, st, sec);
    destroy_all(&s.W, 3);
}

typedef struct att_state {
    kvs_tensor *q, *k, *v, *o;
    kvs_attention_params p;
} att_state;

static kvs_status run_att(bench *b, void *p) {
    att_state *s = p;
    return kvs_attention(b->dev, s->q, s->k, s->v, s->o, &s->p);
}

/* q [n_q][h][d] against k, v [hkv][n_kv][d]. n_q == 1: decode row, reported as GB/s. */
/* Returns the seconds per call measured (0 when not run, INFINITY when skipped); skip = 1 records
 * the case as skipped. */
static double case_attention(bench *b, int64_t n_q, int64_t n_kv, int64_t d, int64_t h, int64_t hkv, int causal,
                             int skip) {
    char shape[64];
    snprintf(shape, sizeof shape, "n_q=%lld n_kv=%lld d=%lld h=%lld/%lld%s", (long long)n_q, (long long)n_kv,
             (long long)d, (long long)h, (long long)hkv, causal ? " causal" : "");
    int decode = n_q == 1;
    double work = decode ? 4.0 * (double)(2 * n_q * h * d + 2 * hkv * n_kv * d)
                         : 4.0 * (double)n_q * (double)n_kv * (double)d * (double)h * (causal ? 0.5 : 1.0);
    row *r = new_row(b, decode ? "attn-dec" : "attention", shape, decode ? UNIT_BYTES : UNIT_FLOPS, work);
    if (!r) return 0;
    if (skip) {
        r->status = ROW_SKIPPED;
        print_row(b, r);
        return INFINITY; /* the larger sizes after it are skipped too */
    }
    att_state s = {0};
    s.p = kvs_attention_params_default();
    s.p.causal = causal;
    double sec = 0;
    kvs_status st = new_tensor(b, &s.q, KVS_F32, d, h, n_q, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.k, KVS_F32, d, n_kv, hkv, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.v, KVS_F32, d, n_kv, hkv, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.o, KVS_F32, d, h, n_q, 0);
    if (st == KVS_OK) st = time_op(b, run_att, &s, &sec);
    finish_row(b, r, st, sec);
    destroy_all(&s.q, 4);
    return st == KVS_OK ? sec : 0;
}

typedef struct dwt_state {
    kvs_tensor *x, *y;
    kvs_wavelet w;
    int levels, inverse;
} dwt_state;

static kvs_status run_dwt(bench *b, void *p) {
    dwt_state *s = p;
    return s->inverse ? kvs_idwt(b->dev, s->y, s->x, s->w, s->levels) : kvs_dwt(b->dev, s->x, s->y, s->w, s->levels);
}

static void case_dwt(bench *b, kvs_wavelet w, int levels, int64_t rows, int64_t n, int inverse) {
    char shape[64];
    snprintf(shape, sizeof shape, "%s J=%d %lldx%lld", kvs_wavelet_name(w), levels, (long long)rows, (long long)n);
    int64_t nc = kvs_dwt_length(n, levels);
    row *r = new_row(b, inverse ? "idwt" : "dwt", shape, UNIT_BYTES, 4.0 * (double)rows * (double)(n + nc));
    if (!r) return;
    dwt_state s = {.w = w, .levels = levels, .inverse = inverse};
    double sec = 0;
    kvs_status st = new_tensor(b, &s.x, KVS_F32, n, rows, 0, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.y, KVS_F32, nc, rows, 0, 0);
    if (st == KVS_OK) st = time_op(b, run_dwt, &s, &sec);
    finish_row(b, r, st, sec);
    destroy_all(&s.x, 2);
}

typedef struct topk_state {
    kvs_tensor *x, *idx, *val;
    kvs_topk_params p;
    int global;
} topk_state;

static kvs_status run_topk(bench *b, void *p) {
    topk_state *s = p;
    return s->global ? kvs_topk_global(b->dev, s->x, s->idx, s->val, &s->p)
                     : kvs_topk(b->dev, s->x, s->idx, s->val, &s->p);
}

/* rows == 0: global top-k over n elements. */
static void case_topk(bench *b, int64_t rows, int64_t n, int64_t k) {
    char shape[64];
    int global = rows == 0;
    if (global) snprintf(shape, sizeof shape, "global n=2^%d k=%lld", (int)lround(log2((double)n)), (long long)k);
    else snprintf(shape, sizeof shape, "rows %lldx%lld k=%lld", (long long)rows, (long long)n, (long long)k);
    int64_t nr = global ? 1 : rows;
    row *r = new_row(b, global ? "topk-glob" : "topk", shape, UNIT_BYTES,
                     4.0 * (double)nr * (double)n + 8.0 * (double)nr * (double)k);
    if (!r) return;
    topk_state s = {.global = global};
    s.p = kvs_topk_params_default();
    s.p.k = k;
    double sec = 0;
    kvs_status st = global ? new_tensor(b, &s.x, KVS_F32, n, 0, 0, 0) : new_tensor(b, &s.x, KVS_F32, n, rows, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&s.idx, b->dev, KVS_I32, k, global ? 0 : rows, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&s.val, b->dev, KVS_F32, k, global ? 0 : rows, 0, 0);
    if (st == KVS_OK) st = time_op(b, run_topk, &s, &sec);
    finish_row(b, r, st, sec);
    destroy_all(&s.x, 3);
}

typedef enum rows_op { OP_GATHER, OP_SCATTER, OP_COMPACT } rows_op;

typedef struct rows_state {
    kvs_tensor *src, *idx, *dst;
    rows_op op;
} rows_state;

static kvs_status run_rows(bench *b, void *p) {
    rows_state *s = p;
    switch (s->op) {
    case OP_GATHER: return kvs_gather(b->dev, s->src, s->idx, s->dst);
    case OP_SCATTER: return kvs_scatter(b->dev, s->src, s->idx, s->dst, 1);
    case OP_COMPACT: return kvs_compact(b->dev, s->dst, s->idx);
    }
    return KVS_ERR_INTERNAL;
}

/* One KV-cache layer [G][cap][d] f32; n rows per group moved by per-group index lists.
 * gather: cache -> [G][n][d]; scatter: token-major [n][G][d] -> cache; compact: in place. */
static void case_rows(bench *b, rows_op op, int64_t G, int64_t cap, int64_t d, int64_t n) {
    static const char *const names[] = {"gather", "scatter", "compact"};
    char shape[64];
    snprintf(shape, sizeof shape, "G=%lld cap=%lld d=%lld n=%lld f32", (long long)G, (long long)cap, (long long)d,
             (long long)n);
    double moved = 4.0 * (double)(G * n * d);
    row *r = new_row(b, names[op], shape, UNIT_BYTES, 2.0 * moved + 4.0 * (double)(G * n));
    if (!r) return;
    rows_state s = {.op = op};
    double sec = 0;
    kvs_status st = new_index(b, &s.idx, n, G, op == OP_SCATTER ? n : cap);
    if (op == OP_SCATTER) {
        /* token-major new rows written to slots [0, n) of every head */
        if (st == KVS_OK) st = new_tensor(b, &s.src, KVS_F32, d, G, n, 0);
        if (st == KVS_OK) st = new_tensor(b, &s.dst, KVS_F32, d, cap, G, 0);
    } else if (op == OP_GATHER) {
        if (st == KVS_OK) st = new_tensor(b, &s.src, KVS_F32, d, cap, G, 0);
        if (st == KVS_OK) st = new_tensor(b, &s.dst, KVS_F32, d, n, G, 0);
    } else {
        if (st == KVS_OK) st = new_tensor(b, &s.dst, KVS_F32, d, cap, G, 0);
    }
    if (st == KVS_OK) st = time_op(b, run_rows, &s, &sec);
    finish_row(b, r, st, sec);
    destroy_all(&s.src, 3);
}

/* ---- peaks ------------------------------------------------------------------------------------ */

typedef struct sgemm_state {
    float *A, *B, *C;
    int n;
} sgemm_state;

static kvs_status run_cblas(bench *b, void *p) {
    (void)b;
    sgemm_state *s = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->n, s->n, s->n, 1.0f, s->B, s->n, s->A, s->n, 0.0f, s->C,
                s->n);
    return KVS_OK;
}

static void peak_gemm(bench *b, int64_t n) {
    mm_state s = {0};
    double sec = 0;
    snprintf(b->gemm.what, sizeof b->gemm.what, "SGEMM %lld^3 f32", (long long)n);
    kvs_status st = new_tensor(b, &s.W, KVS_F32, n, n, 0, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.x, KVS_F32, n, n, 0, 0);
    if (st == KVS_OK) st = new_tensor(b, &s.y, KVS_F32, n, n, 0, 0);
    /* an untimed first call: a peak must never be a kernel compile (time_op's own warm-up may be
     * reported as the result when a device is very slow) */
    if (st == KVS_OK) st = run_mm(b, &s);
    if (st == KVS_OK) st = kvs_device_sync(b->dev);
    if (st == KVS_OK) st = time_op(b, run_mm, &s, &sec);
    destroy_all(&s.W, 3);
    if (st == KVS_OK) {
        snprintf(b->gemm.method, sizeof b->gemm.method, "kvs_matmul");
    } else if (st == KVS_ERR_UNSUPPORTED && kvs_device_backend(b->dev) == KVS_BACKEND_CPU) {
        /* The CPU backend's matmul is OpenBLAS; call it directly while the op is missing. */
        sgemm_state g = {.n = (int)n};
        size_t nb = (size_t)(n * n) * sizeof(float);
        g.A = malloc(nb), g.B = malloc(nb), g.C = malloc(nb);
        st = (g.A && g.B && g.C) ? KVS_OK : KVS_ERR_OUT_OF_MEMORY;
        if (st == KVS_OK) {
            for (int64_t i = 0; i < n * n; i++) g.A[i] = rng_uniform(&b->rng), g.B[i] = rng_uniform(&b->rng);
            st = time_op(b, run_cblas, &g, &sec);
        }
        free(g.A), free(g.B), free(g.C);
        snprintf(b->gemm.method, sizeof b->gemm.method, "cblas_sgemm (kvs_matmul unsupported)");
    }
    if (st != KVS_OK) {
        snprintf(b->gemm.method, sizeof b->gemm.method, "unavailable: %s", kvs_status_name(st));
        return;
    }
    b->gemm.valid = 1;
    b->gemm.rate = 2.0 * (double)n * (double)n * (double)n / sec * 1e-9;
}

typedef struct copy_state {
    char *src, *dst;
    size_t bytes;
    int threads;
    kvs_tensor *a, *c, *idx;
} copy_state;

typedef struct copy_part {
    char *src, *dst;
    size_t bytes;
} copy_part;

static void *copy_worker(void *p) {
    copy_part *c = p;
    memcpy(c->dst, c->src, c->bytes);
    return NULL;
}

static kvs_status run_memcpy(bench *b, void *p) {
    (void)b;
    copy_state *s = p;
    enum { MAX_T = 256 };
    int nt = s->threads < MAX_T ? s->threads : MAX_T;
    if (nt <= 1) {
        memcpy(s->dst, s->src, s->bytes);
        return KVS_OK;
    }
    pthread_t th[MAX_T];
    copy_part parts[MAX_T];
    int spawned[MAX_T] = {0};
    size_t chunk = (s->bytes / (size_t)nt + 4095) & ~(size_t)4095;
    int np = 0;
    for (int t = 0; t < nt; t++) {
        size_t off = (size_t)t * chunk;
        if (off >= s->bytes) break;
        parts[np++] = (copy_part){s->src + off, s->dst + off, off + chunk > s->bytes ? s->bytes - off : chunk};
    }
    for (int t = 1; t < np; t++) {
        spawned[t] = pthread_create(&th[t], NULL, copy_worker, &parts[t]) == 0;
        if (!spawned[t]) copy_worker(&parts[t]);
    }
    copy_worker(&parts[0]);
    for (int t = 1; t < np; t++)
        if (spawned[t]) pthread_join(th[t], NULL);
    return KVS_OK;
}

static kvs_status run_devcopy(bench *b, void *p) {
    copy_state *s = p;
    return s->idx ? kvs_gather(b->dev, s->a, s->idx, s->c) : kvs_copy(b->dev, s->a, s->c);
}

static void peak_bandwidth(bench *b, size_t bytes) {
    copy_state s = {0};
    double sec = 0;
    kvs_status st;
    if (kvs_device_backend(b->dev) == KVS_BACKEND_CPU) {
        /* allocated like the CPU backend's large tensors (2 MiB aligned, transparent huge pages
         * where Linux offers them), so ops and peak see the same paging */
        s.src = aligned_alloc((size_t)2 << 20, bytes), s.dst = aligned_alloc((size_t)2 << 20, bytes), s.bytes = bytes;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (s.src) (void)madvise(s.src, bytes, MADV_HUGEPAGE);
        if (s.dst) (void)madvise(s.dst, bytes, MADV_HUGEPAGE);
#endif
        if (!s.src || !s.dst) {
            free(s.src), free(s.dst);
            snprintf(b->bw.method, sizeof b->bw.method, "unavailable: out of memory");
            return;
        }
        memset(s.src, 1, bytes), memset(s.dst, 2, bytes); /* fault the pages in */
        int cores = kvs_device_caps(b->dev)->n_threads;
        if (cores < 1) cores = 1;
        double best = INFINITY;
        int best_t = 1;
        for (int t = 1; t <= cores; t = (t == 1 && cores > 1) ? cores : cores + 1) {
            s.threads = t;
            if (time_op(b, run_memcpy, &s, &sec) == KVS_OK && sec < best) best = sec, best_t = t;
        }
        free(s.src), free(s.dst);
        snprintf(b->bw.what, sizeof b->bw.what, "%zu MiB", bytes >> 20);
        snprintf(b->bw.method, sizeof b->bw.method, "memcpy, %d thread%s, read+write", best_t, best_t > 1 ? "s" : "");
        b->bw.valid = 1;
        b->bw.rate = 2.0 * (double)bytes / best * 1e-9;
        return;
    }
    /* GPU backends: a device-side f32 copy of the largest tensor that fits. */
    const kvs_caps *caps = kvs_device_caps(b->dev);
    int64_t lim = caps->max_binding_bytes > 0 ? caps->max_binding_bytes : caps->max_buffer_bytes;
    if (lim > 0 && (int64_t)bytes > lim) bytes = (size_t)lim & ~(size_t)4095;
    int64_t n = (int64_t)(bytes / 4);
    st = new_tensor(b, &s.a, KVS_F32, n, 0, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&s.c, b->dev, KVS_F32, n, 0, 0, 0);
    if (st == KVS_OK) {
        st = run_devcopy(b, &s); /* untimed first call, as for the GEMM peak */
        if (st == KVS_OK) st = kvs_device_sync(b->dev);
        if (st == KVS_OK) st = time_op(b, run_devcopy, &s, &sec);
        snprintf(b->bw.method, sizeof b->bw.method, "kvs_copy f32, read+write");
    }
    if (st == KVS_ERR_UNSUPPORTED) {
        /* gather of 1 KiB rows with the identity index list moves the same bytes */
        int64_t row = 256, rows = n / row;
        kvs_tensor_destroy(&s.a), kvs_tensor_destroy(&s.c);
        st = kvs_tensor_new(&s.a, b->dev, KVS_F32, row, rows, 0, 0);
        if (st == KVS_OK) st = kvs_tensor_new(&s.c, b->dev, KVS_F32, row, rows, 0, 0);
        if (st == KVS_OK) st = new_index(b, &s.idx, rows, 1, rows);
        if (st == KVS_OK) st = time_op(b, run_devcopy, &s, &sec);
        snprintf(b->bw.method, sizeof b->bw.method, "kvs_gather f32 rows, read+write");
    }
    kvs_tensor_destroy(&s.a), kvs_tensor_destroy(&s.c), kvs_tensor_destroy(&s.idx);
    if (st != KVS_OK) {
        snprintf(b->bw.method, sizeof b->bw.method, "unavailable: %s", kvs_status_name(st));
        return;
    }
    snprintf(b->bw.what, sizeof b->bw.what, "%lld MiB", (long long)(n * 4) >> 20);
    b->bw.valid = 1;
    b->bw.rate = 2.0 * (double)n * 4.0 / sec * 1e-9;
}

/* ---- the suite -------------------------------------------------------------------------------- */

static void run_suite(bench *b) {
    const int q = b->quick;
    if (!b->json) {
        printf("\n%-10s %-36s %10s %9s %-7s %6s\n", "op", "shape", "ms", "rate", "unit", "/peak");
        printf("%-10s %-36s %10s %9s %-7s %6s\n", "----------", "------------------------------------", "----------",
               "---------", "-------", "------");
    }
    /* dense matmul and decode-shape GEMV */
    case_matmul(b, KVS_F32, q ? 256 : 1024, q ? 256 : 1024, q ? 256 : 1024);
    case_matmul(b, KVS_F32, q ? 1024 : 4096, q ? 1024 : 4096, 1);
    case_matmul(b, KVS_F16, q ? 1024 : 4096, q ? 1024 : 4096, 1);
    /* decode GEMV of common block-quantized weights (GB/s of weight bytes; README's weight types) */
    static const kvs_dtype gemv_quant[] = {KVS_Q4_0, KVS_Q4_K, KVS_Q6_K, KVS_Q8_0};
    for (size_t i = 0; i < sizeof gemv_quant / sizeof gemv_quant[0]; i++)
        case_matmul(b, gemv_quant[i], q ? 1024 : 4096, q ? 1024 : 4096, 1);

    /* attention: prefill / diffusion block (n_q = n_kv), bidirectional; one causal row; decode */
    if (q) {
        case_attention(b, 512, 512, 64, 8, 4, 0, 0);
        case_attention(b, 512, 512, 128, 8, 8, 0, 0);
        case_attention(b, 512, 512, 64, 8, 8, 1, 0);
        case_attention(b, 1, 1024, 64, 8, 4, 0, 0);
    } else {
        static const int64_t ns[] = {512, 1024, 2048, 4096};
        double last[2][2] = {{0}}; /* seconds of the previous size per (d, gqa) series */
        for (int di = 0; di < 2; di++)
            for (int ni = 0; ni < 4; ni++)
                for (int g = 0; g < 2; g++)
                    last[di][g] = case_attention(b, ns[ni], ns[ni], di ? 128 : 64, 8, g ? 4 : 8, 0,
                                                 last[di][g] > b->budget_s);
        case_attention(b, 2048, 2048, 64, 8, 8, 1, 0);
        case_attention(b, 1, 4096, 64, 8, 4, 0, 0);
        case_attention(b, 1, 4096, 128, 8, 8, 0, 0);
    }

    /* wavelets along the token axis */
    const int64_t dr = q ? 16 : 64, dn = q ? 16384 : 65536;
    case_dwt(b, KVS_WAVELET_HAAR, 3, dr, dn, 0);
    case_dwt(b, KVS_WAVELET_DB4, 3, dr, dn, 0);
    case_dwt(b, KVS_WAVELET_DB4, 3, dr, dn, 1);

    /* top-k per row and global */
    case_topk(b, q ? 16 : 64, q ? 16384 : 65536, q ? 256 : 1024);
    if (q) {
        case_topk(b, 0, (int64_t)1 << 18, 1024);
    } else {
        case_topk(b, 0, (int64_t)1 << 20, 4096);
        case_topk(b, 0, (int64_t)1 << 22, 4096);
    }

    /* cache rows: one layer [8 kv heads][capacity][head_dim] */
    const int64_t cap = q ? 1024 : 4096, hd = q ? 64 : 128;
    case_rows(b, OP_GATHER, 8, cap, hd, cap / 2);
    case_rows(b, OP_COMPACT, 8, cap, hd, cap / 2);
    case_rows(b, OP_SCATTER, 8, cap, hd, q ? 128 : 512);
}

static json_object *peak_json(const peak *p, const char *unit_key) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "what", json_object_new_string(p->what));
    json_object_object_add(o, "method", json_object_new_string(p->method));
    json_object_object_add(o, unit_key, p->valid ? json_object_new_double(p->rate) : NULL);
    return o;
}

static void print_json(const bench *b, const char *date, double load) {
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
        json_object_object_add(o, "unit", json_object_new_string(unit_name(r->unit)));
        json_object_object_add(o, "status", json_object_new_string(row_status_names[r->status]));
        json_object_object_add(o, "work", json_object_new_double(r->work));
        if (r->status == ROW_OK) {
            const peak *pk = row_peak(b, r);
            json_object_object_add(o, "time_ms", json_object_new_double(r->sec * 1e3));
            json_object_object_add(o, "best_ms", json_object_new_double(r->best * 1e3));
            json_object_object_add(o, "samples", json_object_new_int(r->samples));
            json_object_object_add(o, "rate", json_object_new_double(row_rate(r)));
            json_object_object_add(o, "ratio", pk->valid ? json_object_new_double(row_rate(r) / pk->rate) : NULL);
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

static int bench_ops(int argc, char **argv) {
    bench b = {.rng = 0x9e3779b97f4a7c15ull, .budget_s = CLI_UNSET_DBL};
    int reps = CLI_UNSET_INT;
    const cli_opt opts[] = {
        {"backend", 'b', CLI_STRING, &b.spec, "B[:I]", "device to run on: cpu, opencl, vulkan, with index (default cpu)"},
        {"json", 0, CLI_FLAG, &b.json, NULL, "print one JSON object on stdout instead of the table"},
        {"quick", 'q', CLI_FLAG, &b.quick, NULL, "small sizes: finishes in seconds"},
        {"filter", 'f', CLI_STRING, &b.filter, "TEXT", "only cases whose \"op shape\" contains TEXT (peaks still run)"},
        {"reps", 'r', CLI_INT, &reps, "N", "timed samples per case, median reported (default 5)"},
        {"threads", 't', CLI_INT, &b.threads, "N", "CPU worker threads (default: all online cores)"},
        {"max-seconds", 0, CLI_DOUBLE, &b.budget_s, "S", "time budget per case, bounds slow devices (default 10; quick 2)"},
    };
    const cli_spec spec = {
        .prog = "kvsieve bench ops",
        .usage = "[--backend B[:I]] [--json] [--quick] [--filter TEXT]",
        .summary = "Measures this device's peaks (a large SGEMM through kvs_matmul; a large memcpy on the\n"
                   "CPU or a device copy on a GPU), then times matmul, attention, dwt, top-k and\n"
                   "gather/scatter/compact and prints each as GFLOP/s or GB/s with its ratio to the peak.",
        .opts = opts,
        .n_opts = (int)(sizeof opts / sizeof opts[0]),
        .epilog = "Attention counts 4*n_q*n_kv*d*heads flops (half when causal); memory-bound ops count\n"
                  "each input read once and each output written once. Ops the device does not implement\n"
                  "are listed as \"unsupported\".",
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (reps != CLI_UNSET_INT && (reps < 1 || reps > MAX_REPS))
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--reps must be in 1..%d", MAX_REPS);
    if (b.threads < 0) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--threads must be >= 1");
    if (!isnan(b.budget_s) && !(b.budget_s > 0)) return cli_fail(CLI_EXIT_USAGE, spec.prog, "--max-seconds must be > 0");
    if (isnan(b.budget_s)) b.budget_s = b.quick ? 2.0 : 10.0;
    b.reps = reps != CLI_UNSET_INT ? reps : 5;
    b.min_sample_s = b.quick ? 2e-3 : 5e-3;
    rc = cli_open_device(spec.prog, b.spec, b.threads, &b.dev);
    if (rc != CLI_EXIT_OK) return rc;

    double load = -1;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1) load = -1;
        fclose(lf);
    }
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const kvs_device_info *info = kvs_device_get_info(b.dev);
    const kvs_caps *caps = kvs_device_caps(b.dev);
    if (!b.json) {
        printf("kvsieve %s bench ops on %s:%d  %s", kvs_version(), kvs_backend_name(info->backend), info->index,
               info->name);
        if (caps->n_threads) printf("  (%d thread%s)", caps->n_threads, caps->n_threads == 1 ? "" : "s");
        printf("\n%s%s", date, b.quick ? "  --quick" : "");
        if (load >= 0) printf("  load average %.2f%s", load, load > 0.5 ? " (other work running: figures may be low)" : "");
        printf("\n");
        fflush(stdout);
    }
    /* peaks: more samples than the cases, since every ratio depends on them */
    int case_reps = b.reps;
    b.reps = b.reps > 9 ? b.reps : 9;
    peak_gemm(&b, b.quick ? 512 : 2048);
    peak_bandwidth(&b, (size_t)(b.quick ? 64 : 256) << 20);
    b.reps = case_reps;
    if (!b.json) {
        if (b.gemm.valid) printf("peak compute   %8.1f GFLOP/s  %s (%s)\n", b.gemm.rate, b.gemm.what, b.gemm.method);
        else printf("peak compute        -            %s\n", b.gemm.method);
        if (b.bw.valid) printf("peak bandwidth %8.1f GB/s     copy %s (%s)\n", b.bw.rate, b.bw.what, b.bw.method);
        else printf("peak bandwidth      -            %s\n", b.bw.method);
        fflush(stdout);
    }
    run_suite(&b);
    if (b.json) print_json(&b, date, load);
    kvs_device_destroy(&b.dev);
    if (b.n_errors) {
        fprintf(stderr, "kvsieve bench ops: %d case%s failed\n", b.n_errors, b.n_errors == 1 ? "" : "s");
        return CLI_EXIT_FAIL;
    }
    if (b.filter && *b.filter && b.n_rows == 0)
        return cli_fail(CLI_EXIT_USAGE, spec.prog, "--filter '%s' matches no case", b.filter);
    return CLI_EXIT_OK;
}

int cmd_bench(int argc, char **argv) {
    static const char *const usage = "usage: kvsieve bench ops [options]   (kvsieve bench ops --help)\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        printf("\nsuites:\n  ops   time the kvsieve ops against this device's measured peaks\n");
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "ops") == 0) return bench_ops(argc - 1, argv + 1);
    return cli_fail(CLI_EXIT_USAGE, "kvsieve bench", "unknown suite '%s' (expected: ops)", argv[1]);
}
