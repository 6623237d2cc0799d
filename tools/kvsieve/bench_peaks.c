/* kvsieve bench ops: the peaks every ratio is measured against, on the chosen device.
 *   compute   one large SGEMM through kvs_matmul (CPU: OpenBLAS; cblas_sgemm directly when the
 *             op is unsupported), GFLOP/s = 2 m n k / s;
 *   bandwidth CPU: memcpy of a large buffer (single- and multi-threaded, the better one);
 *             GPU backends: kvs_copy f32 -> f32 of a large tensor (kvs_gather if copy is
 *             unsupported); GB/s = (bytes read + bytes written) / s. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise */
#endif
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

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

void bench_peak_gemm(bench *b, int64_t n) {
    mm_state s = {0};
    double sec = 0;
    snprintf(b->gemm.what, sizeof b->gemm.what, "SGEMM %lld^3 f32", (long long)n);
    kvs_status st = bench_new_tensor(b, &s.W, KVS_F32, n, n, 0, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.x, KVS_F32, n, n, 0, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.y, KVS_F32, n, n, 0, 0);
    /* an untimed first call: a peak must never be a kernel compile (bench_time_op's own warm-up may be
     * reported as the result when a device is very slow) */
    if (st == KVS_OK) st = bench_run_mm(b, &s);
    if (st == KVS_OK) st = kvs_device_sync(b->dev);
    if (st == KVS_OK) st = bench_time_op(b, bench_run_mm, &s, &sec);
    bench_destroy_all(&s.W, 3);
    if (st == KVS_OK) {
        snprintf(b->gemm.method, sizeof b->gemm.method, "kvs_matmul");
    } else if (st == KVS_ERR_UNSUPPORTED && kvs_device_backend(b->dev) == KVS_BACKEND_CPU) {
        /* The CPU backend's matmul is OpenBLAS; call it directly while the op is missing. */
        sgemm_state g = {.n = (int)n};
        size_t nb = (size_t)(n * n) * sizeof(float);
        g.A = malloc(nb), g.B = malloc(nb), g.C = malloc(nb);
        st = (g.A && g.B && g.C) ? KVS_OK : KVS_ERR_OUT_OF_MEMORY;
        if (st == KVS_OK) {
            for (int64_t i = 0; i < n * n; i++) g.A[i] = bench_rng_uniform(&b->rng), g.B[i] = bench_rng_uniform(&b->rng);
            st = bench_time_op(b, run_cblas, &g, &sec);
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

struct bench_copy {
    copy_state s;
};

bench_copy *bench_copy_new(size_t bytes, int threads) {
    bench_copy *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->s.src = aligned_alloc((size_t)2 << 20, bytes), c->s.dst = aligned_alloc((size_t)2 << 20, bytes);
    c->s.bytes = bytes;
    c->s.threads = threads < 1 ? 1 : threads;
    if (!c->s.src || !c->s.dst) {
        bench_copy_free(c);
        return NULL;
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(c->s.src, bytes, MADV_HUGEPAGE);
    (void)madvise(c->s.dst, bytes, MADV_HUGEPAGE);
#endif
    memset(c->s.src, 1, bytes), memset(c->s.dst, 2, bytes); /* fault the pages in */
    return c;
}

double bench_copy_run(bench *b, bench_copy *c) {
    const double t0 = cli_now();
    run_memcpy(b, &c->s);
    return cli_now() - t0;
}

size_t bench_copy_bytes(const bench_copy *c) { return c->s.bytes; }

void bench_copy_free(bench_copy *c) {
    if (!c) return;
    free(c->s.src), free(c->s.dst);
    free(c);
}

static kvs_status run_devcopy(bench *b, void *p) {
    copy_state *s = p;
    return s->idx ? kvs_gather(b->dev, s->a, s->idx, s->c) : kvs_copy(b->dev, s->a, s->c);
}

void bench_peak_bandwidth(bench *b, size_t bytes) {
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
            if (bench_time_op(b, run_memcpy, &s, &sec) == KVS_OK && sec < best) best = sec, best_t = t;
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
    st = bench_new_tensor(b, &s.a, KVS_F32, n, 0, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&s.c, b->dev, KVS_F32, n, 0, 0, 0);
    if (st == KVS_OK) {
        st = run_devcopy(b, &s); /* untimed first call, as for the GEMM peak */
        if (st == KVS_OK) st = kvs_device_sync(b->dev);
        if (st == KVS_OK) st = bench_time_op(b, run_devcopy, &s, &sec);
        snprintf(b->bw.method, sizeof b->bw.method, "kvs_copy f32, read+write");
    }
    if (st == KVS_ERR_UNSUPPORTED) {
        /* gather of 1 KiB rows with the identity index list moves the same bytes */
        int64_t row = 256, rows = n / row;
        kvs_tensor_destroy(&s.a), kvs_tensor_destroy(&s.c);
        st = kvs_tensor_new(&s.a, b->dev, KVS_F32, row, rows, 0, 0);
        if (st == KVS_OK) st = kvs_tensor_new(&s.c, b->dev, KVS_F32, row, rows, 0, 0);
        if (st == KVS_OK) st = bench_new_index(b, &s.idx, rows, 1, rows);
        if (st == KVS_OK) st = bench_time_op(b, run_devcopy, &s, &sec);
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
