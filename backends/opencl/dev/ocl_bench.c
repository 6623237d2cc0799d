/* Developer timing program for a backend's ops (not built by meson; not a test): prints GFLOP/s or
 * GB/s per op. KVS_BACKEND=opencl|cpu (default opencl). Build: see build.sh (ocl_bench target). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvsieve/kvsieve.h"

static kvs_device *dev;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static kvs_tensor *rnd(kvs_dtype t, int64_t a, int64_t b, int64_t c) {
    kvs_tensor *x = NULL;
    if (kvs_tensor_new(&x, dev, t, a, b, c, 0) != KVS_OK) { printf("alloc: %s\n", kvs_last_error()); exit(1); }
    size_t nb = kvs_tensor_nbytes(x);
    unsigned char *p = malloc(nb);
    unsigned s = 12345;
    if (t == KVS_F32) for (size_t i = 0; i < nb / 4; i++) { s = s * 1103515245u + 12345u; ((float *)p)[i] = (float)((s >> 8) % 20001) / 10000.0f - 1.0f; }
    else if (t == KVS_F16) for (size_t i = 0; i < nb / 2; i++) { s = s * 1103515245u + 12345u; ((uint16_t *)p)[i] = kvs_f32_to_f16((float)((s >> 8) % 20001) / 10000.0f - 1.0f); }
    else for (size_t i = 0; i < nb; i++) p[i] = (unsigned char)(i * 7);
    kvs_tensor_upload(x, p, 0, nb);
    free(p);
    return x;
}

#define TIME(label, units, amount, call)                                                            \
    do {                                                                                           \
        kvs_status s_ = (call);                                                                    \
        kvs_device_sync(dev);                                                                      \
        if (s_ != KVS_OK) { printf("%-44s FAILED: %s\n", label, kvs_last_error()); break; }        \
        int it_ = 0;                                                                               \
        double t0_ = now(), t1_;                                                                   \
        do { (void)(call); it_++; kvs_device_sync(dev); t1_ = now(); } while (t1_ - t0_ < 1.0 && it_ < 50); \
        double per_ = (t1_ - t0_) / it_;                                                           \
        printf("%-44s %9.3f ms  %8.2f %s\n", label, per_ * 1e3, (amount) / per_ * 1e-9, units);   \
    } while (0)

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    kvs_device_params p = kvs_device_params_default();
    const char *be = getenv("KVS_BACKEND") ? getenv("KVS_BACKEND") : "opencl";
    kvs_device_params_parse(be, &p);
    if (kvs_device_open(&dev, &p) != KVS_OK) { printf("open: %s\n", kvs_last_error()); return 77; }
    printf("backend %s, device %s\n", be, kvs_device_get_info(dev)->name);
    char label[128];

    /* matmul */
    {
        int64_t m = 1024, k = 1024, n = 1024;
        kvs_tensor *W = rnd(KVS_F32, k, m, 0), *x = rnd(KVS_F32, k, n, 0), *y = rnd(KVS_F32, m, n, 0);
        TIME("matmul f32 1024x1024x1024", "GFLOP/s", 2.0 * m * k * n, kvs_matmul(dev, W, x, y, 0));
        kvs_tensor *Wh = rnd(KVS_F16, k, m, 0);
        TIME("matmul f16 W 1024x1024x1024", "GFLOP/s", 2.0 * m * k * n, kvs_matmul(dev, Wh, x, y, 0));
        kvs_tensor *W4 = rnd(KVS_F32, 4096, 4096, 0), *x1 = rnd(KVS_F32, 4096, 1, 0), *y1 = rnd(KVS_F32, 4096, 1, 0);
        TIME("matmul gemv f32 4096x4096 n=1", "GB/s", 4096.0 * 4096 * 4, kvs_matmul(dev, W4, x1, y1, 0));
        kvs_tensor_destroy(&W); kvs_tensor_destroy(&x); kvs_tensor_destroy(&y); kvs_tensor_destroy(&Wh);
        kvs_tensor_destroy(&W4); kvs_tensor_destroy(&x1); kvs_tensor_destroy(&y1);
    }
    /* attention: prefill n x n, 8 heads, causal */
    int ns[] = {512, 1024, 2048, 4096};
    int ds[] = {64, 128};
    for (int di = 0; di < 2; di++)
        for (int ni = 0; ni < 4; ni++) {
            int64_t n = ns[ni], d = ds[di], H = 8;
            if (n == 4096 && getenv("QUICK")) continue;
            kvs_tensor *q = rnd(KVS_F32, d, H, n), *kk = rnd(KVS_F32, d, n, H), *v = rnd(KVS_F32, d, n, H), *o = rnd(KVS_F32, d, H, n);
            kvs_attention_params ap = kvs_attention_params_default();
            ap.causal = 1;
            snprintf(label, sizeof label, "attention causal n=%lld d=%lld h=8", (long long)n, (long long)d);
            /* causal: half the n^2 logits; 4 flops per (q, k, dim) (QK^T and PV) */
            TIME(label, "GFLOP/s", 2.0 * H * n * n * d, kvs_attention(dev, q, kk, v, o, &ap));
            ap.causal = 0;
            snprintf(label, sizeof label, "attention full   n=%lld d=%lld h=8", (long long)n, (long long)d);
            TIME(label, "GFLOP/s", 4.0 * H * n * n * d, kvs_attention(dev, q, kk, v, o, &ap));
            kvs_tensor_destroy(&q); kvs_tensor_destroy(&kk); kvs_tensor_destroy(&v); kvs_tensor_destroy(&o);
        }
    /* attention decode: 1 query, 8 heads / 2 kv heads, 4096 keys, with key mass */
    {
        int64_t n = 4096, d = 128;
        kvs_tensor *q = rnd(KVS_F32, d, 8, 1), *kk = rnd(KVS_F32, d, n, 2), *v = rnd(KVS_F32, d, n, 2), *o = rnd(KVS_F32, d, 8, 1);
        kvs_tensor *km = rnd(KVS_F32, n, 2, 0);
        kvs_attention_params ap = kvs_attention_params_default();
        TIME("attention decode n_kv=4096 d=128 8/2 heads", "GB/s", 2.0 * 2 * n * d * 4, kvs_attention(dev, q, kk, v, o, &ap));
        ap.key_mass = km;
        TIME("  + key_mass", "GB/s", 2.0 * 2 * n * d * 4, kvs_attention(dev, q, kk, v, o, &ap));
        kvs_tensor_destroy(&q); kvs_tensor_destroy(&kk); kvs_tensor_destroy(&v); kvs_tensor_destroy(&o); kvs_tensor_destroy(&km);
    }
    /* dwt: 1024 rows x 4096, db4, 3 levels */
    {
        int64_t n = 4096, rows = 1024;
        kvs_tensor *x = rnd(KVS_F32, n, rows, 0), *y = rnd(KVS_F32, kvs_dwt_length(n, 3), rows, 0);
        double bytes = 4.0 * rows * (n + kvs_dwt_length(n, 3));
        TIME("dwt db4 J=3 1024x4096", "GB/s", bytes, kvs_dwt(dev, x, y, KVS_WAVELET_DB4, 3));
        TIME("idwt db4 J=3 1024x4096", "GB/s", bytes, kvs_idwt(dev, y, x, KVS_WAVELET_DB4, 3));
        kvs_tensor_destroy(&x); kvs_tensor_destroy(&y);
    }
    /* top-k */
    {
        kvs_tensor *x = rnd(KVS_F32, 1000000, 0, 0), *idx = rnd(KVS_I32, 1000, 0, 0), *val = rnd(KVS_F32, 1000, 0, 0);
        kvs_topk_params tp = kvs_topk_params_default();
        tp.k = 1000;
        TIME("topk_global n=1e6 k=1000", "GB/s", 4e6, kvs_topk_global(dev, x, idx, val, &tp));
        kvs_tensor *x2 = rnd(KVS_F32, 65536, 32, 0), *i2 = rnd(KVS_I32, 2048, 32, 0);
        tp.k = 2048;
        TIME("topk rows=32 n=65536 k=2048", "GB/s", 4.0 * 32 * 65536, kvs_topk(dev, x2, i2, NULL, &tp));
        kvs_tensor_destroy(&x); kvs_tensor_destroy(&idx); kvs_tensor_destroy(&val); kvs_tensor_destroy(&x2); kvs_tensor_destroy(&i2);
    }
    /* gather: 8 kv heads x 8192 rows x 128 f32 -> 4096 rows */
    {
        int64_t G = 8, N = 8192, n = 4096, row = 128;
        kvs_tensor *src = rnd(KVS_F32, row, N, G), *dst = rnd(KVS_F32, row, n, G);
        int32_t *ix = malloc(4 * n * G);
        for (int64_t i = 0; i < n * G; i++) ix[i] = (int32_t)((i * 2 + (i % 3 == 0)) % N);
        kvs_tensor *ti = NULL;
        kvs_tensor_new(&ti, dev, KVS_I32, n, G, 0, 0);
        kvs_tensor_upload(ti, ix, 0, 4 * n * G);
        TIME("gather 8x4096 rows of 128 f32", "GB/s", 2.0 * 4 * G * n * row, kvs_gather(dev, src, ti, dst));
        TIME("scatter 8x4096 rows of 128 f32", "GB/s", 2.0 * 4 * G * n * row, kvs_scatter(dev, dst, ti, src, 0));
        free(ix);
        kvs_tensor_destroy(&src); kvs_tensor_destroy(&dst); kvs_tensor_destroy(&ti);
    }
    kvs_device_destroy(&dev);
    return 0;
}
