/* Scratch checker for the Vulkan backend (not built by default: `ninja -C build vk_check`).
 * Compares every op against plain-C float64 references, with the validation layer on.
 * Usage: vk_check [op-name-filter] [--time]. Prints one line per case; exit 1 on any failure. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvsieve/kvsieve.h"

static kvs_device *dev;
static int failures, cases;
static unsigned long long rng = 0x9e3779b97f4a7c15ull;
static const char *filter;
static int timing;

static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float frand(float lo, float hi) { return (float)(lo + (hi - lo) * urand()); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        kvs_status s_ = (call);                                                                    \
        if (s_ != KVS_OK) {                                                                        \
            printf("  FAIL %s:%d %s -> %s: %s\n", __FILE__, __LINE__, #call, kvs_status_name(s_),   \
                   kvs_last_error());                                                              \
            failures++;                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static kvs_tensor *mk(kvs_dtype dt, int64_t a, int64_t b, int64_t c) {
    kvs_tensor *t = NULL;
    if (kvs_tensor_new(&t, dev, dt, a, b, c, 0) != KVS_OK) {
        printf("tensor create failed: %s\n", kvs_last_error());
        exit(2);
    }
    return t;
}
static kvs_tensor *mkf(const float *data, int64_t a, int64_t b, int64_t c) {
    kvs_tensor *t = mk(KVS_F32, a, b, c);
    kvs_tensor_upload(t, data, 0, kvs_tensor_nbytes(t));
    return t;
}
static inline kvs_tensor *mki(const int32_t *data, int64_t a, int64_t b, int64_t c) {
    kvs_tensor *t = mk(KVS_I32, a, b, c);
    kvs_tensor_upload(t, data, 0, kvs_tensor_nbytes(t));
    return t;
}
static float *dl(const kvs_tensor *t) {
    float *o = malloc(kvs_tensor_nbytes(t) + 4);
    kvs_status s = kvs_tensor_download(t, o, 0, kvs_tensor_nbytes(t));
    if (s != KVS_OK) printf("  download: %s %s\n", kvs_status_name(s), kvs_last_error());
    return o;
}

/* max |got - ref| / (atol + rtol |ref|) <= 1; NaN/inf must match exactly. */
static int cmp(const char *name, const float *got, const double *ref, int64_t n, double atol, double rtol) {
    double worst = 0;
    int64_t wi = -1;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (isnan(r) || isinf(r)) {
            if (!(isnan(r) ? isnan(g) : g == r)) {
                worst = INFINITY;
                wi = i;
                break;
            }
            continue;
        }
        double e = (atol == 0 && rtol == 0) ? (g == r ? 0.0 : INFINITY) : fabs(g - r) / (atol + rtol * fabs(r));
        if (!(e <= worst)) {
            worst = e;
            wi = i;
        }
    }
    cases++;
    int ok = worst <= 1.0;
    if (!ok) failures++;
    printf("  %s %-46s n=%-8lld worst=%.3g%s", ok ? "ok  " : "FAIL", name, (long long)n, worst, ok ? "\n" : "");
    if (!ok) printf(" at %lld got %.9g ref %.9g\n", (long long)wi, got[wi], ref[wi]);
    return ok;
}
static int want(const char *name) { return !filter || strstr(name, filter); }

/* ---- ops ---- */

static void t_elementwise(int64_t n) {
    float *a = malloc(n * 4), *b = malloc(n * 4);
    double *r = malloc(n * 8);
    for (int64_t i = 0; i < n; i++) a[i] = frand(-8, 8), b[i] = frand(-8, 8);
    kvs_tensor *ta = mkf(a, n, 0, 0), *tb = mkf(b, n, 0, 0), *ty = mk(KVS_F32, n, 0, 0);
    char nm[64];
    CK(kvs_add(dev, ta, tb, ty));
    float *y = dl(ty);
    for (int64_t i = 0; i < n; i++) r[i] = (double)a[i] + b[i];
    snprintf(nm, sizeof nm, "add n=%lld", (long long)n);
    cmp(nm, y, r, n, 1e-6, 1e-6);
    free(y);
    CK(kvs_add(dev, ta, tb, ta)); /* aliasing */
    y = dl(ta);
    cmp("add in place", y, r, n, 1e-6, 1e-6);
    free(y);
    kvs_tensor_upload(ta, a, 0, n * 4);
    CK(kvs_swiglu(dev, ta, tb, ty));
    y = dl(ty);
    for (int64_t i = 0; i < n; i++) r[i] = (double)a[i] / (1 + exp(-(double)a[i])) * b[i];
    snprintf(nm, sizeof nm, "swiglu n=%lld", (long long)n);
    cmp(nm, y, r, n, 1e-5, 1e-5);
    free(y);
    kvs_tensor_destroy(&ta);
    kvs_tensor_destroy(&tb);
    kvs_tensor_destroy(&ty);
    free(a), free(b), free(r);
}

static float conv_ref(float f, kvs_dtype d) {
    if (d == KVS_F16) return kvs_f16_to_f32(kvs_f32_to_f16(f));
    if (d == KVS_BF16) return kvs_bf16_to_f32(kvs_f32_to_bf16(f));
    return f;
}

static void t_copy(int64_t n) {
    kvs_dtype dts[3] = {KVS_F32, KVS_F16, KVS_BF16};
    float *a = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) a[i] = frand(-3, 3) * (float)pow(10, frand(-6, 4));
    if (n > 4) a[0] = NAN, a[1] = INFINITY, a[2] = -0.0f, a[3] = 70000.0f;
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            /* views at odd offsets to exercise half-word edges */
            kvs_tensor *ps = mk(dts[s], n + 3, 0, 0), *pd = mk(dts[d], n + 3, 0, 0), *vs, *vd, *tf = mkf(a, n, 0, 0);
            int64_t ne = n;
            kvs_tensor_view(&vs, ps, 1, 1, &ne);
            kvs_tensor_view(&vd, pd, 1, 1, &ne);
            kvs_tensor *tmp = mk(KVS_F32, n + 3, 0, 0);
            CK(kvs_tensor_fill(tmp, 7.0));
            CK(kvs_copy(dev, tmp, pd));      /* guards */
            CK(kvs_copy(dev, tf, vs));      /* f32 -> src dtype */
            CK(kvs_copy(dev, vs, vd));      /* the pair under test */
            CK(kvs_copy(dev, pd, tmp));     /* back to f32 with guards */
            float *y = dl(tmp);
            double *r = malloc((n + 3) * 8);
            r[0] = 7, r[n + 1] = 7, r[n + 2] = 7;
            for (int64_t i = 0; i < n; i++) r[i + 1] = conv_ref(conv_ref(a[i], dts[s]), dts[d]);
            char nm[64];
            snprintf(nm, sizeof nm, "copy %s->%s n=%lld (guards)", kvs_dtype_name(dts[s]), kvs_dtype_name(dts[d]),
                     (long long)n);
            cmp(nm, y, r, n + 3, 0, 0);
            free(y), free(r);
            kvs_tensor_destroy(&vs), kvs_tensor_destroy(&vd), kvs_tensor_destroy(&ps), kvs_tensor_destroy(&pd);
            kvs_tensor_destroy(&tf), kvs_tensor_destroy(&tmp);
        }
    free(a);
}

static void t_rows(int64_t rows, int64_t dim) {
    float *x = malloc(rows * dim * 4), *w = malloc(dim * 4);
    double *r = malloc(rows * dim * 8);
    for (int64_t i = 0; i < rows * dim; i++) x[i] = frand(-4, 4);
    for (int64_t i = 0; i < dim; i++) w[i] = frand(0.5, 1.5);
    kvs_tensor *tx = mkf(x, dim, rows, 0), *tw = mkf(w, dim, 0, 0), *ty = mk(KVS_F32, dim, rows, 0);
    char nm[64];
    CK(kvs_rmsnorm(dev, tx, tw, ty, 1e-5f));
    float *y = dl(ty);
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0;
        for (int64_t c = 0; c < dim; c++) ss += (double)x[i * dim + c] * x[i * dim + c];
        double inv = 1 / sqrt(ss / dim + 1e-5);
        for (int64_t c = 0; c < dim; c++) r[i * dim + c] = x[i * dim + c] * inv * w[c];
    }
    snprintf(nm, sizeof nm, "rmsnorm %lldx%lld", (long long)rows, (long long)dim);
    cmp(nm, y, r, rows * dim, 1e-5, 1e-5);
    free(y);
    if (rows > 2 && dim > 3) x[dim] = 150, x[dim + 1] = -120, x[2 * dim + 1] = -INFINITY;
    if (rows > 3) for (int64_t c = 0; c < dim; c++) x[3 * dim + c] = -INFINITY;
    kvs_tensor_upload(tx, x, 0, rows * dim * 4);
    float scale = 0.7f;
    CK(kvs_softmax(dev, tx, ty, scale));
    y = dl(ty);
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, l = 0;
        for (int64_t c = 0; c < dim; c++) m = fmax(m, (double)scale * x[i * dim + c]);
        for (int64_t c = 0; c < dim; c++) l += exp((double)scale * x[i * dim + c] - m);
        for (int64_t c = 0; c < dim; c++) r[i * dim + c] = l > 0 ? exp((double)scale * x[i * dim + c] - m) / l : 0;
    }
    snprintf(nm, sizeof nm, "softmax %lldx%lld", (long long)rows, (long long)dim);
    cmp(nm, y, r, rows * dim, 1e-6, 1e-5);
    free(y);
    kvs_tensor_destroy(&tx), kvs_tensor_destroy(&tw), kvs_tensor_destroy(&ty);
    free(x), free(w), free(r);
}

/* Weight storage: returns a device tensor of dtype dt holding w (q8_0 quantised), and fills wr with
 * the exact values the device sees. */
static kvs_tensor *mkw(kvs_dtype dt, const float *w, int64_t k, int64_t m, double *wr) {
    kvs_tensor *t = mk(dt, k, m, 0);
    int64_t n = k * m;
    if (dt == KVS_F32) {
        kvs_tensor_upload(t, w, 0, n * 4);
        for (int64_t i = 0; i < n; i++) wr[i] = w[i];
    } else if (dt == KVS_F16 || dt == KVS_BF16) {
        uint16_t *h = malloc(n * 2);
        for (int64_t i = 0; i < n; i++) {
            h[i] = dt == KVS_F16 ? kvs_f32_to_f16(w[i]) : kvs_f32_to_bf16(w[i]);
            wr[i] = dt == KVS_F16 ? kvs_f16_to_f32(h[i]) : kvs_bf16_to_f32(h[i]);
        }
        kvs_tensor_upload(t, h, 0, n * 2);
        free(h);
    } else {
        unsigned char *q = malloc(n / 32 * 34);
        for (int64_t b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(w[b * 32 + j]));
            uint16_t d = kvs_f32_to_f16(amax / 127.0f);
            float df = kvs_f16_to_f32(d);
            memcpy(q + b * 34, &d, 2);
            for (int j = 0; j < 32; j++) {
                int v = df > 0 ? (int)lrintf(w[b * 32 + j] / df) : 0;
                v = v > 127 ? 127 : v < -127 ? -127 : v;
                q[b * 34 + 2 + j] = (unsigned char)(signed char)v;
                wr[b * 32 + j] = (double)df * v;
            }
        }
        kvs_tensor_upload(t, q, 0, n / 32 * 34);
        free(q);
    }
    return t;
}

static void t_matmul(kvs_dtype dt, int64_t m, int64_t k, int64_t n, int acc) {
    float *w = malloc(m * k * 4), *x = malloc(n * k * 4), *y0 = malloc(n * m * 4);
    double *wr = malloc(m * k * 8), *r = malloc(n * m * 8);
    for (int64_t i = 0; i < m * k; i++) w[i] = frand(-1, 1);
    for (int64_t i = 0; i < n * k; i++) x[i] = frand(-1, 1);
    for (int64_t i = 0; i < n * m; i++) y0[i] = frand(-1, 1);
    kvs_tensor *tw = mkw(dt, w, k, m, wr), *tx = mkf(x, k, n, 0), *ty = mkf(y0, m, n, 0);
    double t0 = now();
    CK(kvs_matmul(dev, tw, tx, ty, acc));
    float *y = dl(ty);
    double t1 = now();
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double s = acc ? y0[i * m + j] : 0;
            for (int64_t c = 0; c < k; c++) s += wr[j * k + c] * x[i * k + c];
            r[i * m + j] = s;
        }
    char nm[80];
    snprintf(nm, sizeof nm, "matmul %s m=%lld k=%lld n=%lld%s", kvs_dtype_name(dt), (long long)m, (long long)k,
             (long long)n, acc ? " acc" : "");
    cmp(nm, y, r, n * m, 1e-4, 1e-4);
    if (timing) printf("    time %.3f ms (first call incl. pipeline)\n", (t1 - t0) * 1e3);
    free(y);
    kvs_tensor_destroy(&tw), kvs_tensor_destroy(&tx), kvs_tensor_destroy(&ty);
    free(w), free(x), free(y0), free(wr), free(r);
}

static void t_embedding(kvs_dtype dt, int64_t vocab, int64_t dim, int64_t n) {
    float *w = malloc(vocab * dim * 4);
    double *wr = malloc(vocab * dim * 8), *r = malloc(n * dim * 8);
    int32_t *ids = malloc(n * 4);
    for (int64_t i = 0; i < vocab * dim; i++) w[i] = frand(-2, 2);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(urand() * vocab);
    kvs_tensor *tw = mkw(dt, w, dim, vocab, wr), *to = mk(KVS_F32, dim, n, 0);
    CK(kvs_embedding(dev, tw, ids, n, to));
    float *y = dl(to);
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < dim; c++) r[i * dim + c] = wr[ids[i] * dim + c];
    char nm[64];
    snprintf(nm, sizeof nm, "embedding %s vocab=%lld dim=%lld n=%lld", kvs_dtype_name(dt), (long long)vocab,
             (long long)dim, (long long)n);
    cmp(nm, y, r, n * dim, 0, 0);
    free(y);
    kvs_tensor_destroy(&tw), kvs_tensor_destroy(&to);
    free(w), free(wr), free(r), free(ids);
}

#include "vk_check_more.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--time") == 0) timing = 1;
        else filter = argv[i];
    }
    kvs_device_params p = kvs_device_params_default();
    p.backend = KVS_BACKEND_VULKAN;
    if (p.validation < 0 && !getenv("KVS_VULKAN_VALIDATION")) p.validation = 1;
    kvs_status s = kvs_device_open(&dev, &p);
    if (s != KVS_OK) {
        printf("open: %s: %s\n", kvs_status_name(s), kvs_last_error());
        return s == KVS_ERR_NO_DEVICE ? 77 : 1;
    }
    const kvs_caps *c = kvs_device_caps(dev);
    printf("device: %s (%s); subgroup %d ops %d shared %lld wg %d binding %lld buffer %lld fp16arith %d\n",
           kvs_device_get_info(dev)->name, kvs_device_get_info(dev)->driver, c->subgroup_size, c->subgroup_ops,
           (long long)c->shared_mem_bytes, c->max_workgroup_size, (long long)c->max_binding_bytes,
           (long long)c->max_buffer_bytes, c->fp16_arith);
    if (want("add") || want("swiglu")) {
        t_elementwise(1);
        t_elementwise(13);
        t_elementwise(100003);
    }
    if (want("copy")) {
        t_copy(1);
        t_copy(13);
        t_copy(1000);
    }
    if (want("rmsnorm") || want("softmax")) {
        t_rows(1, 1);
        t_rows(13, 33);
        t_rows(5, 4096);
        t_rows(300, 7);
    }
    if (want("embedding")) {
        kvs_dtype d[4] = {KVS_F32, KVS_F16, KVS_BF16, KVS_Q8_0};
        for (int i = 0; i < 4; i++) t_embedding(d[i], 37, 64, 13);
        t_embedding(KVS_F16, 5, 13, 3);
    }
    if (want("matmul")) {
        kvs_dtype d[4] = {KVS_F32, KVS_F16, KVS_BF16, KVS_Q8_0};
        for (int i = 0; i < 4; i++) {
            t_matmul(d[i], 33, 64, 1, 0);
            t_matmul(d[i], 100, 96, 13, 1);
            t_matmul(d[i], 130, 160, 70, 0);
        }
        t_matmul(KVS_F32, 1, 1, 1, 0);
        t_matmul(KVS_F32, 7, 13, 9, 1);
        t_matmul(KVS_F16, 7, 13, 5, 0);
    }
    more_tests();
    kvs_status ss = kvs_device_sync(dev);
    if (ss != KVS_OK) {
        printf("sync: %s\n", kvs_last_error());
        failures++;
    }
    kvs_device_destroy(&dev);
    printf("%d cases, %d failures\n", cases, failures);
    return failures ? 1 : 0;
}
