/* Developer scratch checker for the OpenCL backend (not built by meson; not the test suite):
 * runs each op on `--backend` (default opencl) against float64 references written here.
 * Build: see backends/opencl/dev/README. Usage: ocl_check [op ...] */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvsieve/kvsieve.h"

static kvs_device *dev;
static int failures;
static unsigned long long rng = 88172645463325252ull;

static double urand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float frand(float a) { return (float)((urand() * 2 - 1) * a); }

#define CK(x) do { kvs_status s_ = (x); if (s_ != KVS_OK) { printf("  FAIL %s:%d %s: %s\n", __FILE__, __LINE__, kvs_status_name(s_), kvs_last_error()); failures++; return; } } while (0)

static kvs_tensor *mk(kvs_dtype t, int64_t a, int64_t b, int64_t c, const void *data) {
    kvs_tensor *x = NULL;
    if (kvs_tensor_new(&x, dev, t, a, b, c, 0) != KVS_OK) { printf("alloc: %s\n", kvs_last_error()); exit(1); }
    if (data) kvs_tensor_upload(x, data, 0, kvs_tensor_nbytes(x));
    else {
        size_t nb = kvs_tensor_nbytes(x);
        unsigned char *p = malloc(nb);
        memset(p, 0xff, nb); /* poison: NaN */
        kvs_tensor_upload(x, p, 0, nb);
        free(p);
    }
    return x;
}

static float *dl(kvs_tensor *t) {
    size_t nb = kvs_tensor_nbytes(t);
    float *p = malloc(nb);
    kvs_tensor_download(t, p, 0, nb);
    return p;
}

static void cmp(const char *what, const float *got, const double *ref, int64_t n, double tol) {
    double maxerr = 0, maxref = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if ((double)got[i] == ref[i]) continue;
        double e = fabs((double)got[i] - ref[i]);
        if (isinf(ref[i]) && got[i] == ref[i]) e = 0;
        double lim = tol * (1 + fabs(ref[i]));
        if (isnan(ref[i]) && isnan(got[i])) e = 0, lim = 0;
        if (!(e <= lim) && bad < 0) bad = i;
        if (e > maxerr || isnan(e)) maxerr = e;
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    if (bad >= 0) {
        printf("  FAIL %-40s max err %.3g; first bad [%lld] got %.9g want %.9g\n", what, maxerr, (long long)bad,
               got[bad], ref[bad]);
        failures++;
    } else {
        printf("  ok   %-40s max err %.3g (|ref| <= %.3g)\n", what, maxerr, maxref);
    }
}

static void cmp_i(const char *what, const int32_t *got, const int32_t *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (got[i] != ref[i]) {
            printf("  FAIL %-40s [%lld] got %d want %d\n", what, (long long)i, got[i], ref[i]);
            failures++;
            return;
        }
    printf("  ok   %-40s (%lld exact)\n", what, (long long)n);
}

/* ---- matmul ---- */
static void q8_quant(const float *x, int64_t n, unsigned char *out, float *deq) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        float d = amax / 127.0f;
        uint16_t dh = kvs_f32_to_f16(d);
        float dd = kvs_f16_to_f32(dh);
        unsigned char *blk = out + b * 34;
        memcpy(blk, &dh, 2);
        for (int i = 0; i < 32; i++) {
            int q = dd > 0 ? (int)lrintf(x[b * 32 + i] / dd) : 0;
            if (q > 127) q = 127;
            if (q < -127) q = -127;
            blk[2 + i] = (unsigned char)(signed char)q;
            deq[b * 32 + i] = dd * (float)q;
        }
    }
}

static void test_matmul(kvs_dtype wt, int64_t m, int64_t k, int64_t n, int acc) {
    float *W = malloc(sizeof(float) * m * k), *x = malloc(sizeof(float) * n * k), *y0 = malloc(sizeof(float) * n * m);
    float *Wq = malloc(sizeof(float) * m * k);
    for (int64_t i = 0; i < m * k; i++) W[i] = frand(1);
    for (int64_t i = 0; i < n * k; i++) x[i] = frand(1);
    for (int64_t i = 0; i < n * m; i++) y0[i] = frand(1);
    void *wdata = W;
    uint16_t *h = NULL;
    unsigned char *q = NULL;
    if (wt == KVS_F16 || wt == KVS_BF16) {
        h = malloc(2 * m * k);
        for (int64_t i = 0; i < m * k; i++) {
            h[i] = wt == KVS_F16 ? kvs_f32_to_f16(W[i]) : kvs_f32_to_bf16(W[i]);
            Wq[i] = wt == KVS_F16 ? kvs_f16_to_f32(h[i]) : kvs_bf16_to_f32(h[i]);
        }
        wdata = h;
    } else if (wt == KVS_Q8_0) {
        q = malloc(34 * m * k / 32);
        for (int64_t r = 0; r < m; r++) q8_quant(W + r * k, k, q + r * (k / 32) * 34, Wq + r * k);
        wdata = q;
    } else {
        memcpy(Wq, W, sizeof(float) * m * k);
    }
    kvs_tensor *tW = mk(wt, k, m, 0, wdata), *tx = mk(KVS_F32, k, n, 0, x), *ty = mk(KVS_F32, m, n, 0, acc ? y0 : NULL);
    char what[96];
    snprintf(what, sizeof what, "matmul %s m=%lld k=%lld n=%lld acc=%d", kvs_dtype_name(wt), (long long)m, (long long)k,
             (long long)n, acc);
    double *ref = malloc(sizeof(double) * n * m);
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < m; r++) {
            double s = acc ? y0[i * m + r] : 0;
            for (int64_t c = 0; c < k; c++) s += (double)Wq[r * k + c] * x[i * k + c];
            ref[i * m + r] = s;
        }
    kvs_status s = kvs_matmul(dev, tW, tx, ty, acc);
    if (s != KVS_OK) { printf("  FAIL %s: %s\n", what, kvs_last_error()); failures++; }
    else { float *got = dl(ty); cmp(what, got, ref, n * m, 1e-4); free(got); }
    kvs_tensor_destroy(&tW); kvs_tensor_destroy(&tx); kvs_tensor_destroy(&ty);
    free(W); free(x); free(y0); free(Wq); free(h); free(q); free(ref);
}

static void t_matmul(void) {
    kvs_dtype ts[] = {KVS_F32, KVS_F16, KVS_BF16, KVS_Q8_0};
    for (int t = 0; t < 4; t++) {
        test_matmul(ts[t], 33, 64, 1, 0);
        test_matmul(ts[t], 13, 96, 3, 1);
        test_matmul(ts[t], 70, 128, 37, 0);
        test_matmul(ts[t], 65, 64, 9, 1);
    }
}

/* ---- element-wise ---- */
static void t_elem(void) {
    int64_t n = 1000;
    float *a = malloc(4 * n), *b = malloc(4 * n);
    double *ref = malloc(8 * n);
    for (int64_t i = 0; i < n; i++) { a[i] = frand(10); b[i] = frand(10); }
    a[0] = -200; a[1] = 200;
    kvs_tensor *ta = mk(KVS_F32, n, 0, 0, a), *tb = mk(KVS_F32, n, 0, 0, b), *ty = mk(KVS_F32, 10, n / 10, 0, NULL);
    CK(kvs_add(dev, ta, tb, ty));
    float *got = dl(ty);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
    cmp("add", got, ref, n, 1e-7);
    free(got);
    CK(kvs_swiglu(dev, ta, tb, ty));
    got = dl(ty);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] / (1 + exp(-(double)a[i])) * b[i];
    cmp("swiglu", got, ref, n, 1e-6);
    free(got);
    /* in place */
    CK(kvs_add(dev, ta, tb, ta));
    got = dl(ta);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
    cmp("add in place", got, ref, n, 1e-7);
    free(got);
    kvs_tensor_upload(ta, a, 0, 4 * n);

    /* copy: all pairs */
    kvs_dtype ts[] = {KVS_F32, KVS_F16, KVS_BF16};
    a[2] = NAN; a[3] = INFINITY; a[4] = 1e-6f; a[5] = 70000.0f; a[6] = -0.0f;
    kvs_tensor_upload(ta, a, 0, 4 * n);
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            kvs_tensor *ts_ = mk(ts[s], n, 0, 0, NULL), *td = mk(ts[d], n, 0, 0, NULL), *tf = mk(KVS_F32, n, 0, 0, NULL);
            CK(kvs_copy(dev, ta, ts_));
            CK(kvs_copy(dev, ts_, td));
            CK(kvs_copy(dev, td, tf));
            got = dl(tf);
            for (int64_t i = 0; i < n; i++) {
                float v = a[i];
                if (ts[s] == KVS_F16) v = kvs_f16_to_f32(kvs_f32_to_f16(v));
                if (ts[s] == KVS_BF16) v = kvs_bf16_to_f32(kvs_f32_to_bf16(v));
                if (ts[d] == KVS_F16) v = kvs_f16_to_f32(kvs_f32_to_f16(v));
                if (ts[d] == KVS_BF16) v = kvs_bf16_to_f32(kvs_f32_to_bf16(v));
                ref[i] = v;
            }
            char what[64];
            snprintf(what, sizeof what, "copy f32->%s->%s->f32", kvs_dtype_name(ts[s]), kvs_dtype_name(ts[d]));
            cmp(what, got, ref, n, 0);
            free(got);
            kvs_tensor_destroy(&ts_); kvs_tensor_destroy(&td); kvs_tensor_destroy(&tf);
        }
    kvs_tensor_destroy(&ta); kvs_tensor_destroy(&tb); kvs_tensor_destroy(&ty);
    free(a); free(b); free(ref);
}

static void t_rows(void) {
    int64_t dims[] = {1, 13, 33, 100, 4096};
    for (int di = 0; di < 5; di++) {
        int64_t dim = dims[di], rows = 7;
        float *x = malloc(4 * dim * rows), *w = malloc(4 * dim);
        double *ref = malloc(8 * dim * rows);
        for (int64_t i = 0; i < dim * rows; i++) x[i] = frand(3);
        for (int64_t i = 0; i < dim; i++) w[i] = frand(2);
        if (dim > 5) { x[3] = -INFINITY; x[dim + 1] = 150; }
        kvs_tensor *tx = mk(KVS_F32, dim, rows, 0, x), *tw = mk(KVS_F32, dim, 0, 0, w), *ty = mk(KVS_F32, dim, rows, 0, NULL);
        for (int64_t r = 0; r < rows; r++) {
            double m = -INFINITY, l = 0;
            for (int64_t c = 0; c < dim; c++) m = fmax(m, 0.5 * x[r * dim + c]);
            for (int64_t c = 0; c < dim; c++) l += exp(0.5 * x[r * dim + c] - m);
            for (int64_t c = 0; c < dim; c++) ref[r * dim + c] = exp(0.5 * x[r * dim + c] - m) / l;
        }
        CK(kvs_softmax(dev, tx, ty, 0.5f));
        float *got = dl(ty);
        char what[64];
        snprintf(what, sizeof what, "softmax dim=%lld", (long long)dim);
        cmp(what, got, ref, dim * rows, 1e-6);
        free(got);
        if (dim > 5) { x[3] = 1; kvs_tensor_upload(tx, x, 0, 4 * dim * rows); }
        for (int64_t r = 0; r < rows; r++) {
            double ss = 0;
            for (int64_t c = 0; c < dim; c++) ss += (double)x[r * dim + c] * x[r * dim + c];
            double inv = 1 / sqrt(ss / dim + 1e-5);
            for (int64_t c = 0; c < dim; c++) ref[r * dim + c] = x[r * dim + c] * inv * w[c];
        }
        CK(kvs_rmsnorm(dev, tx, tw, tx, 1e-5f));
        got = dl(tx);
        snprintf(what, sizeof what, "rmsnorm (in place) dim=%lld", (long long)dim);
        cmp(what, got, ref, dim * rows, 1e-5);
        free(got);
        kvs_tensor_destroy(&tx); kvs_tensor_destroy(&tw); kvs_tensor_destroy(&ty);
        free(x); free(w); free(ref);
    }
    /* all -inf row */
    float z[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    double zr[5] = {0};
    kvs_tensor *tx = mk(KVS_F32, 5, 0, 0, z);
    CK(kvs_softmax(dev, tx, tx, 1.0f));
    float *got = dl(tx);
    cmp("softmax all -inf", got, zr, 5, 0);
    free(got);
    kvs_tensor_destroy(&tx);
}

static void t_embedding(void) {
    kvs_dtype ts[] = {KVS_F32, KVS_F16, KVS_BF16, KVS_Q8_0};
    int64_t vocab = 50, dim = 64, n = 9;
    int32_t ids[9] = {0, 49, 3, 3, 17, 25, 1, 2, 48};
    float *tab = malloc(4 * vocab * dim), *deq = malloc(4 * vocab * dim);
    for (int64_t i = 0; i < vocab * dim; i++) tab[i] = frand(2);
    for (int t = 0; t < 4; t++) {
        void *data = tab;
        uint16_t *h = NULL;
        unsigned char *q = NULL;
        if (ts[t] == KVS_F16 || ts[t] == KVS_BF16) {
            h = malloc(2 * vocab * dim);
            for (int64_t i = 0; i < vocab * dim; i++) {
                h[i] = ts[t] == KVS_F16 ? kvs_f32_to_f16(tab[i]) : kvs_f32_to_bf16(tab[i]);
                deq[i] = ts[t] == KVS_F16 ? kvs_f16_to_f32(h[i]) : kvs_bf16_to_f32(h[i]);
            }
            data = h;
        } else if (ts[t] == KVS_Q8_0) {
            q = malloc(34 * vocab * dim / 32);
            q8_quant(tab, vocab * dim, q, deq);
            data = q;
        } else {
            memcpy(deq, tab, 4 * vocab * dim);
        }
        kvs_tensor *tt = mk(ts[t], dim, vocab, 0, data), *to = mk(KVS_F32, dim, n, 0, NULL);
        double *ref = malloc(8 * n * dim);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < dim; c++) ref[i * dim + c] = deq[ids[i] * dim + c];
        CK(kvs_embedding(dev, tt, ids, n, to));
        float *got = dl(to);
        char what[64];
        snprintf(what, sizeof what, "embedding %s", kvs_dtype_name(ts[t]));
        cmp(what, got, ref, n * dim, 0);
        free(got); free(ref); free(h); free(q);
        kvs_tensor_destroy(&tt); kvs_tensor_destroy(&to);
    }
    free(tab); free(deq);
}

static void rope_ref(double *v, int64_t hd, int n_rot, int neox, double pos, double base, double fs) {
    for (int i = 0; i < n_rot / 2; i++) {
        double th = pos * fs * pow(base, -2.0 * i / n_rot);
        int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
        double a = v[i0], b = v[i1];
        v[i0] = a * cos(th) - b * sin(th);
        v[i1] = a * sin(th) + b * cos(th);
    }
    (void)hd;
}

static void t_rope(void) {
    int64_t hd = 64, nh = 3, n = 5;
    for (int neox = 0; neox < 2; neox++) {
        float *x = malloc(4 * hd * nh * n);
        double *ref = malloc(8 * hd * nh * n);
        int32_t pos[5] = {0, 1, 7, 100, 1000};
        for (int64_t i = 0; i < hd * nh * n; i++) { x[i] = frand(1); ref[i] = x[i]; }
        kvs_rope_params p = kvs_rope_params_default();
        p.mode = neox ? KVS_ROPE_NEOX : KVS_ROPE_ADJACENT;
        p.n_rot = 48;
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < nh; h++) rope_ref(ref + (i * nh + h) * hd, hd, 48, neox, pos[i], 10000, 1);
        kvs_tensor *tx = mk(KVS_F32, hd, nh, n, x), *tp = mk(KVS_I32, n, 0, 0, pos);
        CK(kvs_rope(dev, tx, tp, &p));
        float *got = dl(tx);
        cmp(neox ? "rope neox" : "rope adjacent", got, ref, hd * nh * n, 2e-5);
        free(got);
        /* rope_shift on f32 and f16 k: [2 heads][cap 6][hd] */
        int64_t cap = 6, nkv = 2, nrows = 4;
        int32_t delta[12];
        for (int i = 0; i < 12; i++) delta[i] = i * 3 - 5;
        for (int f16 = 0; f16 < 2; f16++) {
            float *k = malloc(4 * hd * cap * nkv);
            uint16_t *kh = malloc(2 * hd * cap * nkv);
            for (int64_t i = 0; i < hd * cap * nkv; i++) {
                k[i] = frand(1);
                if (f16) { kh[i] = kvs_f32_to_f16(k[i]); k[i] = kvs_f16_to_f32(kh[i]); }
            }
            double *kr = malloc(8 * hd * cap * nkv);
            for (int64_t i = 0; i < hd * cap * nkv; i++) kr[i] = k[i];
            for (int64_t h = 0; h < nkv; h++)
                for (int64_t r = 0; r < nrows; r++) rope_ref(kr + (h * cap + r) * hd, hd, 48, neox, delta[h * cap + r], 10000, 1);
            kvs_tensor *tk = mk(f16 ? KVS_F16 : KVS_F32, hd, cap, nkv, f16 ? (void *)kh : (void *)k);
            kvs_tensor *td = mk(KVS_I32, cap, nkv, 0, delta), *tf = mk(KVS_F32, hd, cap, nkv, NULL);
            CK(kvs_rope_shift(dev, tk, td, nrows, &p));
            CK(kvs_copy(dev, tk, tf));
            float *g2 = dl(tf);
            cmp(f16 ? "rope_shift f16" : "rope_shift f32", g2, kr, hd * cap * nkv, f16 ? 2e-3 : 2e-5);
            free(g2); free(k); free(kh); free(kr);
            kvs_tensor_destroy(&tk); kvs_tensor_destroy(&td); kvs_tensor_destroy(&tf);
        }
        kvs_tensor_destroy(&tx); kvs_tensor_destroy(&tp);
        free(x); free(ref);
    }
}

#include "ocl_check_more.h"

int main(int argc, char **argv) {
    kvs_device_params p = kvs_device_params_default();
    const char *be = getenv("KVS_BACKEND") ? getenv("KVS_BACKEND") : "opencl";
    kvs_device_params_parse(be, &p);
    if (kvs_device_open(&dev, &p) != KVS_OK) { printf("open %s: %s\n", be, kvs_last_error()); return 77; }
    printf("device: %s (%s)\n", kvs_device_get_info(dev)->name, kvs_device_get_info(dev)->driver);
    struct { const char *name; void (*fn)(void); } tests[] = {
        {"elem", t_elem}, {"rows", t_rows}, {"embedding", t_embedding}, {"rope", t_rope}, {"matmul", t_matmul},
        MORE_TESTS
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int run = argc < 2;
        for (int a = 1; a < argc; a++) run |= strcmp(argv[a], tests[i].name) == 0;
        if (!run) continue;
        printf("[%s]\n", tests[i].name);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (tests[i].fn) tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("  (%.2f s)\n", (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    }
    kvs_device_destroy(&dev);
    printf(failures ? "%d FAILURES\n" : "all ok\n", failures);
    return failures ? 1 : 0;
}
