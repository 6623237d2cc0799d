/* Scratch timing program for the Vulkan backend (not built by default: ninja -C build
 * backends/vulkan/vk_bench). Times matmul, attention, dwt, top-k and gather/scatter/compact at
 * fixed shapes, on vulkan (default) or cpu (`vk_bench cpu`) for comparison. Each figure is the
 * median of `reps` runs of one op followed by kvs_device_sync, after one warm-up run (pipeline
 * creation excluded). Not a test: no correctness checks here (vk_check does those). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvsieve/kvsieve.h"

static kvs_device *dev;
static int reps = 5;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static kvs_tensor *rnd(kvs_dtype dt, int64_t a, int64_t b, int64_t c) {
    kvs_tensor *t = NULL, *f = NULL;
    if (kvs_tensor_new(&t, dev, dt, a, b, c, 0) != KVS_OK) {
        fprintf(stderr, "alloc: %s\n", kvs_last_error());
        exit(1);
    }
    int64_t n = a * (b ? b : 1) * (c ? c : 1);
    if (dt == KVS_I32) {
        int32_t *v = malloc(n * 4);
        for (int64_t i = 0; i < n; i++) v[i] = (int32_t)(i % (a > 1 ? a : 1));
        kvs_tensor_upload(t, v, 0, n * 4);
        free(v);
        return t;
    }
    float *v = malloc(n * 4);
    unsigned s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        v[i] = ((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    if (dt == KVS_F32) {
        kvs_tensor_upload(t, v, 0, n * 4);
    } else {
        kvs_tensor_new(&f, dev, KVS_F32, a, b, c, 0);
        kvs_tensor_upload(f, v, 0, n * 4);
        kvs_copy(dev, f, t);
        kvs_device_sync(dev);
        kvs_tensor_destroy(&f);
    }
    free(v);
    return t;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef kvs_status (*op_fn)(void *ctx);

static void run(const char *name, op_fn fn, void *ctx, double work, const char *unit) {
    kvs_status s = fn(ctx);
    if (s == KVS_OK) s = kvs_device_sync(dev);
    if (s != KVS_OK) {
        printf("%-44s %s: %s\n", name, kvs_status_name(s), kvs_last_error());
        return;
    }
    double t[32];
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        fn(ctx);
        kvs_device_sync(dev);
        t[r] = now() - t0;
    }
    qsort(t, reps, sizeof t[0], cmpd);
    double med = t[reps / 2];
    printf("%-44s %10.3f ms %9.2f %s\n", name, med * 1e3, work / med * 1e-9, unit);
    fflush(stdout);
}

typedef struct { kvs_tensor *W, *x, *y; } mm_ctx;
static kvs_status mm(void *c) {
    mm_ctx *m = c;
    return kvs_matmul(dev, m->W, m->x, m->y, 0);
}
static void b_matmul(kvs_dtype dt, int64_t m, int64_t k, int64_t n) {
    mm_ctx c = {rnd(dt, k, m, 0), rnd(KVS_F32, k, n, 0), rnd(KVS_F32, m, n, 0)};
    char nm[96];
    snprintf(nm, sizeof nm, "matmul %s m=%lld k=%lld n=%lld", kvs_dtype_name(dt), (long long)m, (long long)k, (long long)n);
    if (n == 1) run(nm, mm, &c, (double)kvs_tensor_nbytes(c.W), "GB/s");
    else run(nm, mm, &c, 2.0 * m * k * n, "GFLOP/s");
    kvs_tensor_destroy(&c.W), kvs_tensor_destroy(&c.x), kvs_tensor_destroy(&c.y);
}

typedef struct { kvs_tensor *q, *k, *v, *o; kvs_attention_params p; } at_ctx;
static kvs_status at(void *c) {
    at_ctx *a = c;
    return kvs_attention(dev, a->q, a->k, a->v, a->o, &a->p);
}
static void b_attn(int64_t nq, int64_t nkv, int64_t d, int64_t h, int64_t hkv, int causal) {
    at_ctx c = {rnd(KVS_F32, d, h, nq), rnd(KVS_F32, d, nkv, hkv), rnd(KVS_F32, d, nkv, hkv), rnd(KVS_F32, d, h, nq),
                kvs_attention_params_default()};
    c.p.causal = causal;
    char nm[96];
    snprintf(nm, sizeof nm, "attention n_q=%lld n_kv=%lld d=%lld h=%lld/%lld%s", (long long)nq, (long long)nkv,
             (long long)d, (long long)h, (long long)hkv, causal ? " causal" : "");
    run(nm, at, &c, 4.0 * nq * nkv * d * h * (causal && nq > 1 ? 0.5 : 1.0), "GFLOP/s");
    kvs_tensor_destroy(&c.q), kvs_tensor_destroy(&c.k), kvs_tensor_destroy(&c.v), kvs_tensor_destroy(&c.o);
}

typedef struct { kvs_tensor *x, *y; int inv; } dw_ctx;
static kvs_status dw(void *c) {
    dw_ctx *d = c;
    return d->inv ? kvs_idwt(dev, d->y, d->x, KVS_WAVELET_DB4, 3) : kvs_dwt(dev, d->x, d->y, KVS_WAVELET_DB4, 3);
}
static void b_dwt(int64_t rows, int64_t n) {
    dw_ctx c = {rnd(KVS_F32, n, rows, 0), rnd(KVS_F32, kvs_dwt_length(n, 3), rows, 0), 0};
    char nm[96];
    double bytes = (double)kvs_tensor_nbytes(c.x) + (double)kvs_tensor_nbytes(c.y);
    snprintf(nm, sizeof nm, "dwt db4 J=3 rows=%lld n=%lld", (long long)rows, (long long)n);
    run(nm, dw, &c, bytes, "GB/s");
    c.inv = 1;
    snprintf(nm, sizeof nm, "idwt db4 J=3 rows=%lld n=%lld", (long long)rows, (long long)n);
    run(nm, dw, &c, bytes, "GB/s");
    kvs_tensor_destroy(&c.x), kvs_tensor_destroy(&c.y);
}

typedef struct { kvs_tensor *x, *i, *v; kvs_topk_params p; int global; } tk_ctx;
static kvs_status tk(void *c) {
    tk_ctx *t = c;
    return t->global ? kvs_topk_global(dev, t->x, t->i, t->v, &t->p) : kvs_topk(dev, t->x, t->i, t->v, &t->p);
}
static void b_topk(int global, int64_t rows, int64_t n, int64_t k) {
    tk_ctx c = {rnd(KVS_F32, n, rows, 0), NULL, NULL, kvs_topk_params_default(), global};
    kvs_tensor_new(&c.i, dev, KVS_I32, k, global ? 1 : rows, 0, 0);
    kvs_tensor_new(&c.v, dev, KVS_F32, k, global ? 1 : rows, 0, 0);
    c.p.k = k;
    char nm[96];
    snprintf(nm, sizeof nm, "topk%s rows=%lld n=%lld k=%lld", global ? "_global" : "", (long long)rows, (long long)n,
             (long long)k);
    run(nm, tk, &c, (double)kvs_tensor_nbytes(c.x), "GB/s");
    kvs_tensor_destroy(&c.x), kvs_tensor_destroy(&c.i), kvs_tensor_destroy(&c.v);
}

typedef struct { kvs_tensor *s, *d, *idx; int which; } rw_ctx;
static kvs_status rw(void *c) {
    rw_ctx *r = c;
    if (r->which == 0) return kvs_gather(dev, r->s, r->idx, r->d);
    if (r->which == 1) return kvs_scatter(dev, r->d, r->idx, r->s, 0);
    return kvs_compact(dev, r->s, r->idx);
}
static void b_rows(int64_t G, int64_t N, int64_t row, int64_t n) {
    rw_ctx c = {rnd(KVS_F32, row, N, G), rnd(KVS_F32, row, n, G), NULL, 0};
    int32_t *idx = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)(i * (N / n)); /* increasing keep-set */
    kvs_tensor_new(&c.idx, dev, KVS_I32, n, 0, 0, 0);
    kvs_tensor_upload(c.idx, idx, 0, n * 4);
    double bytes = 2.0 * G * n * row * 4;
    const char *names[3] = {"gather", "scatter", "compact"};
    for (c.which = 0; c.which < 3; c.which++) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s f32 G=%lld N=%lld row=%lld n=%lld", names[c.which], (long long)G, (long long)N,
                 (long long)row, (long long)n);
        run(nm, rw, &c, bytes, "GB/s");
    }
    free(idx);
    kvs_tensor_destroy(&c.s), kvs_tensor_destroy(&c.d), kvs_tensor_destroy(&c.idx);
}

int main(int argc, char **argv) {
    kvs_device_params p = kvs_device_params_default();
    p.backend = KVS_BACKEND_VULKAN;
    if (argc > 1 && kvs_backend_from_name(argv[1], &p.backend) != KVS_OK) return 2;
    if (argc > 2) reps = atoi(argv[2]) > 0 && atoi(argv[2]) < 32 ? atoi(argv[2]) : 5;
    if (kvs_device_open(&dev, &p) != KVS_OK) {
        fprintf(stderr, "open: %s\n", kvs_last_error());
        return 77;
    }
    printf("%s: %s, median of %d runs\n", kvs_backend_name(p.backend), kvs_device_get_info(dev)->name, reps);
    b_matmul(KVS_F32, 1024, 1024, 1);
    b_matmul(KVS_F16, 1024, 1024, 1);
    b_matmul(KVS_Q8_0, 1024, 1024, 1);
    b_matmul(KVS_F32, 1024, 1024, 64);
    b_matmul(KVS_F32, 1024, 1024, 512);
    b_attn(1, 1024, 64, 8, 4, 0);
    b_attn(1, 4096, 128, 8, 8, 0);
    b_attn(512, 512, 64, 8, 8, 1);
    b_dwt(64, 4096);
    b_topk(0, 32, 10000, 256);
    b_topk(0, 4, 100000, 1024);
    b_topk(1, 1, 1000000, 4096);
    b_rows(8, 4096, 128, 2048);
    kvs_device_destroy(&dev);
    return 0;
}
