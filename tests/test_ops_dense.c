/* Suites "matmul", "elementwise" (add, copy, rmsnorm, swiglu, softmax) and "embedding".
 *
 * Tolerances (normalised MSE unless stated; see harness.h for the metric):
 *   matmul, F32 weights: 1e-7 (test-backend-ops default; f32 accumulation over k <= 4096 gives
 *     ~1e-12, a single wrong column of k gives >= 1/k).
 *   matmul, F16/BF16/Q8_0 weights: 5e-6. The reference uses the exactly decoded weights, so
 *     storage adds nothing; the budget admits a backend that rounds x to f16 before the product
 *     (relative error 2^-11 per term, nmse ~1e-7) and nothing coarser; Q8_0 on the CPU's 8-bit
 *     activation path (matmul.h; <= 64 x rows): 1e-4 (x rounded to 8 bits per block: ~1.6e-5).
 *   add: 1e-7. rmsnorm, swiglu, softmax: 1e-7; where the reference is exactly 0 (softmax of -inf
 *     entries, all -inf rows) the output must be exactly 0.
 *   copy and embedding: bit-exact. Conversions are exact or correctly rounded (RNE) by contract, and
 *     Q8_0 dequantisation d*q is exact in f32 (11-bit x 8-bit mantissas).
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

#define BEGIN_LOOP(name)                                                                            \
    char tname_[64];                                                                                \
    snprintf(tname_, sizeof tname_, "%s#%d", name, _i);                                             \
    t_begin(tname_)

static double *f64_of(const float *x, int64_t n) {
    double *d = t_alloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* ---------------------------------------------------------------------------------------------- */
/* matmul                                                                                         */

typedef struct mm_case {
    int m, k, n;
    kvs_dtype wdt;
    int accumulate;
    int x3d;        /* x as [n/nb][nb][k] (3-D, flattened by the op) */
    double scale;   /* value magnitude of W and x */
} mm_case;

static const mm_case mm_cases[] = {
    {1, 1, 1, KVS_F32, 0, 0, 1},        {13, 33, 1, KVS_F32, 0, 0, 1},     {33, 13, 100, KVS_F32, 1, 0, 1},
    {100, 128, 33, KVS_F32, 0, 1, 1},   {300, 256, 64, KVS_F32, 1, 0, 1},  {64, 4096, 2, KVS_F32, 0, 0, 1},
    {17, 64, 13, KVS_F32, 0, 0, 3e3},   /* large magnitudes */
    {13, 33, 7, KVS_F16, 0, 0, 1},      {100, 128, 33, KVS_F16, 1, 1, 1},  {257, 64, 1, KVS_F16, 0, 0, 1},
    {13, 33, 7, KVS_BF16, 0, 0, 1},     {100, 96, 33, KVS_BF16, 1, 0, 1},
    {13, 32, 7, KVS_Q8_0, 0, 0, 1},     {100, 128, 33, KVS_Q8_0, 1, 1, 1}, {33, 256, 1, KVS_Q8_0, 0, 0, 1},
    /* tile edges: nothing a multiple of a power of two */
    {129, 333, 67, KVS_F32, 1, 0, 1},   {65, 200, 17, KVS_F16, 0, 0, 1},   {67, 352, 19, KVS_Q8_0, 1, 0, 1},
    {1, 4097, 1, KVS_F32, 0, 0, 1},     {513, 64, 1, KVS_BF16, 1, 0, 1},
    /* the small f32 GEMM (k <= 256): x rows 32 + 21 (the last ones in a 16- and an 8-row tile),
     * W rows 8 * 4 + 5 */
    {37, 96, 53, KVS_F32, 1, 0, 1},     {37, 96, 53, KVS_F32, 0, 0, 1},
    /* GEMV (n <= 4) per x-row count and weight type: k = 1007 = 15 * 64 + 5 * 8 + 7 runs every loop
     * of the kernels (the 64-wide main loop of the one-row kernel, its 8-wide and scalar tails; the
     * 16-wide loop and scalar tail of the 2-4 row kernels) */
    {29, 1007, 1, KVS_F16, 0, 0, 1},    {31, 1007, 1, KVS_BF16, 1, 0, 1},  {23, 203, 2, KVS_F16, 1, 0, 1},
    {19, 77, 3, KVS_BF16, 0, 0, 1},     {21, 1007, 4, KVS_F16, 0, 0, 1},   {11, 130, 4, KVS_BF16, 1, 0, 1},
    {9, 1007, 3, KVS_F32, 0, 0, 1},     {7, 1007, 2, KVS_BF16, 0, 0, 3e3},
};

static void matmul_run(int _i) {
    (void)_i;
    const mm_case *c = &mm_cases[_i];
    t_case("matmul m=%d k=%d n=%d W=%s accumulate=%d x3d=%d scale=%g", c->m, c->k, c->n, kvs_dtype_name(c->wdt),
           c->accumulate, c->x3d, c->scale);
    int64_t m = c->m, k = c->k, n = c->n;
    float *W = t_alloc(sizeof(float) * (size_t)(m * k));
    float *x = t_alloc(sizeof(float) * (size_t)(n * k));
    float *y0 = t_alloc(sizeof(float) * (size_t)(n * m));
    float *y = t_alloc(sizeof(float) * (size_t)(n * m));
    t_fill_uniform(W, m * k, -c->scale, c->scale);
    t_fill_uniform(x, n * k, -c->scale, c->scale);
    t_fill_uniform(y0, n * m, -c->scale * c->scale, c->scale * c->scale);
    double *Wd = t_alloc(sizeof(double) * (size_t)(m * k));

    kvs_tensor *Wt;
    tt *Wg = NULL;
    if (c->wdt == KVS_Q8_0) {
        uint8_t *blocks = t_alloc((size_t)(m * k / 32) * 34);
        ref_q8_0_quantize(W, m * k, blocks);
        ref_q8_0_dequant(blocks, m * k, Wd);
        int64_t ne[2] = {k, m};
        Wt = t_plain(KVS_Q8_0, 2, ne);
        ck_assert(kvs_tensor_upload(Wt, blocks, 0, kvs_tensor_nbytes(Wt)) == KVS_OK);
    } else {
        Wg = t_new2(c->wdt, k, m);
        t_upload_as(Wg, W);
        for (int64_t i = 0; i < m * k; i++) Wd[i] = ref_round_to(c->wdt, W[i]);
        Wt = Wg->t;
    }
    int nb = (c->x3d && n % 3 == 0) ? 3 : (c->x3d && n % 11 == 0) ? 11 : 1;
    tt *xt = c->x3d && nb > 1 ? t_new3(KVS_F32, k, nb, n / nb) : t_new2(KVS_F32, k, n);
    tt *yt = t_new2(KVS_F32, m, n);
    t_upload_f32(xt, x);
    if (c->accumulate) t_upload_f32(yt, y0);

    double *ref = f64_of(y0, n * m);
    ref_matmul(Wd, f64_of(x, n * k), ref, m, k, n, c->accumulate);
    if (t_op(kvs_matmul(t_dev(), Wt, xt->t, yt->t, c->accumulate))) return;
    t_download(yt, y);
    /* Q8_0 on the CPU's 8-bit activation path (<= 64 x rows under a -q8 / -vnni variant or the automatic
     * choice): x rounded to 8 bits per block of 32, nmse ~ d^2 / 4 / E[x^2] ~ 1.6e-5 (d = amax / 127;
     * test_ops_quant.c derives it) */
    const int q8 = c->wdt == KVS_Q8_0 && t_params.backend == KVS_BACKEND_CPU && n <= 64 &&
                   (t_variant[0] == 0 || strstr(t_variant, "-q8") || strstr(t_variant, "vnni"));
    t_check_nmse("y", y, ref, n * m, c->wdt == KVS_F32 ? 1e-7 : q8 ? 1e-4 : 5e-6);
    t_assert_unchanged(xt, "x");
    if (Wg) t_assert_unchanged(Wg, "W");
}

START_TEST(test_matmul) {
    BEGIN_LOOP("matmul");
    matmul_run(_i);
    t_end();
}
END_TEST

static const t_seq test_matmul_sequence_seq[] = {{matmul_run, (int)(sizeof mm_cases / sizeof mm_cases[0])}};
T_SEQUENCE_TEST(test_matmul_sequence, test_matmul_sequence_seq)

Suite *suite_matmul(void) {
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("matmul");
    tcase_add_loop_test(tc, test_matmul, 0, (int)(sizeof mm_cases / sizeof mm_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_matmul_sequence);
    suite_add_tcase(s, tc);
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* add                                                                                            */

static const int64_t ew_sizes[] = {1, 13, 1000, 4097};

static void add_run(int _i) {
    (void)_i;
    int64_t n = ew_sizes[_i % 4];
    int mode = _i / 4; /* 0: y separate, 1: y aliases a, 2: y aliases b, 3: different shapes */
    t_case("add n=%lld mode=%s", (long long)n, (const char *[]){"separate", "y=a", "y=b", "reshaped"}[mode]);
    float *a = t_alloc(4 * (size_t)n), *b = t_alloc(4 * (size_t)n), *y = t_alloc(4 * (size_t)n);
    t_fill_normal(a, n, 10.0);
    t_fill_normal(b, n, 0.1);
    if (n > 2) {
        a[0] = 1e30f;
        b[0] = 1e30f;
        a[1] = -3e38f;
        b[1] = -3e38f; /* overflows to -inf in f32 */
    }
    tt *at = t_new1(KVS_F32, n);
    int64_t dv = 1;
    for (int64_t f = 2; f < n && dv == 1; f++)
        if (n % f == 0) dv = f;
    tt *bt = (mode == 3 && dv > 1) ? t_new2(KVS_F32, dv, n / dv) : t_new1(KVS_F32, n);
    tt *yt = mode == 1 ? at : mode == 2 ? bt : t_new1(KVS_F32, n);
    t_upload_f32(at, a);
    t_upload_f32(bt, b);
    double *ref = t_alloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)(float)((double)a[i] + (double)b[i]);
    if (!t_op(kvs_add(t_dev(), at->t, bt->t, yt->t))) {
        t_download(yt, y);
        t_check_nmse("y", y, ref, n, 1e-7);
        if (mode != 1) t_assert_unchanged(at, "a");
        if (mode != 2) t_assert_unchanged(bt, "b");
    }
}

START_TEST(test_add) {
    BEGIN_LOOP("add");
    add_run(_i);
    t_end();
}
END_TEST

/* ---------------------------------------------------------------------------------------------- */
/* copy (conversion)                                                                              */

/* Values that exercise rounding: ties, subnormals of both formats, overflow, signed zeros, specials. */
static const float copy_specials[] = {
    0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e9f, -1e9f,
    1.0f + 0x1p-11f,          /* f16 tie -> 1.0 (even) */
    1.0f + 3 * 0x1p-11f,      /* f16 tie -> 1 + 2^-9 (even) */
    1.0f + 0x1p-11f + 0x1p-20f, /* just above tie -> rounds up */
    0x1p-24f, 0x1p-25f,       /* smallest f16 subnormal; half of it ties to 0 */
    3 * 0x1p-26f,             /* 0.75 ulp of the subnormal -> 2^-24 */
    0x1p-14f, 0x1p-14f - 0x1p-25f, 6.0e-8f, 1e-10f, -1e-10f,
    1.0f + 0x1p-8f,           /* bf16 tie -> 1.0 */
    1.0f + 3 * 0x1p-8f,       /* bf16 tie -> 1 + 2^-6 */
    0x1p-130f, 0x1p-149f, -0x1p-140f, /* f32 subnormals (bf16 keeps them) */
    0x1.ffp127f,              /* exactly halfway between the bf16 max and 2^128: ties to even = +inf */
    0x1.fep127f,              /* the bf16 max itself */
    FLT_MAX, -FLT_MAX, 0.1f, 1.0f / 3.0f, 2.71828f, 3.14159265f, 1234.5678f, -0.00012345f,
};

static void copy_run(int _i) {
    static const kvs_dtype dts[3] = {KVS_F32, KVS_F16, KVS_BF16};
    kvs_dtype sdt = dts[_i % 3], ddt = dts[(_i / 3) % 3];
    int64_t n = (int64_t[]){1, 13, 1000}[_i / 9];
    int64_t ns = (int64_t)(sizeof copy_specials / sizeof copy_specials[0]);
    t_case("copy %s -> %s n=%lld", kvs_dtype_name(sdt), kvs_dtype_name(ddt), (long long)n);
    float *x = t_alloc(4 * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t kind = t_rand_int(0, 3);
        double mag = kind == 0 ? 1.0 : kind == 1 ? 1e-6 : kind == 2 ? 3e4 : 1e-3;
        x[i] = (float)(mag * t_rand_normal());
    }
    if (n >= ns)
        for (int64_t i = 0; i < ns; i++) x[(i * 7) % n] = copy_specials[i];
    /* src holds x rounded to sdt; expected dst = that value rounded to ddt (a single rounding). */
    tt *st = t_new1(sdt, n), *dt = t_new1(ddt, n);
    t_upload_as(st, x);
    if (!t_op(kvs_copy(t_dev(), st->t, dt->t))) {
        size_t esz = kvs_dtype_bytes(ddt, 1);
        unsigned char *got = t_alloc(esz * (size_t)n);
        t_download(dt, got);
        for (int64_t i = 0; i < n; i++) {
            double sv = ref_round_to(sdt, x[i]);
            if (isnan(sv)) {
                double gv = ddt == KVS_F32 ? ((float *)got)[i]
                            : ddt == KVS_F16 ? ref_f16_to_f64(((uint16_t *)got)[i])
                                             : ref_bf16_to_f64(((uint16_t *)got)[i]);
                T_ASSERT(isnan(gv), "dst[%lld]: NaN must stay NaN, got %g", (long long)i, gv);
                continue;
            }
            if (ddt == KVS_F32) {
                float want = (float)sv;
                T_ASSERT(memcmp(&want, (float *)got + i, 4) == 0, "dst[%lld]: src %.9g got %.9g want %.9g",
                         (long long)i, sv, (double)((float *)got)[i], (double)want);
            } else {
                uint16_t want = ddt == KVS_F16 ? ref_f16_bits(sv) : ref_bf16_bits(sv);
                uint16_t g = ((uint16_t *)got)[i];
                T_ASSERT(g == want, "dst[%lld]: src %.9g (%s) -> %s got 0x%04x want 0x%04x (RNE)", (long long)i, sv,
                         kvs_dtype_name(sdt), kvs_dtype_name(ddt), g, want);
            }
        }
        t_assert_unchanged(st, "src");
    }
}

START_TEST(test_copy) {
    BEGIN_LOOP("copy");
    copy_run(_i);
    t_end();
}
END_TEST

/* ---------------------------------------------------------------------------------------------- */
/* rmsnorm                                                                                        */

typedef struct rn_case {
    int rows, dim;
    float eps;
    int inplace;
} rn_case;
static const rn_case rn_cases[] = {
    {1, 1, 1e-5f, 0}, {13, 33, 1e-5f, 0}, {4, 4096, 1e-6f, 0}, {33, 100, 1e-5f, 1}, {3, 64, 1e-5f, 0},
    {3, 5003, 1e-5f, 1},
};

static void rmsnorm_run(int _i) {
    (void)_i;
    const rn_case *c = &rn_cases[_i];
    t_case("rmsnorm rows=%d dim=%d eps=%g inplace=%d", c->rows, c->dim, (double)c->eps, c->inplace);
    int64_t n = (int64_t)c->rows * c->dim;
    float *x = t_alloc(4 * (size_t)n), *w = t_alloc(4 * (size_t)c->dim), *y = t_alloc(4 * (size_t)n);
    t_fill_normal(x, n, 1.0);
    t_fill_uniform(w, c->dim, -2, 2);
    /* row 0 all zeros (y = 0), row 1 large (1e3), row 2 tiny (1e-4, comparable to eps) */
    if (c->rows >= 3) {
        for (int j = 0; j < c->dim; j++) {
            x[j] = 0.0f;
            x[c->dim + j] *= 1e3f;
            x[2 * c->dim + j] *= 1e-4f;
        }
    }
    tt *xt = t_new2(KVS_F32, c->dim, c->rows), *wt = t_new1(KVS_F32, c->dim);
    tt *yt = c->inplace ? xt : t_new2(KVS_F32, c->dim, c->rows);
    t_upload_f32(xt, x);
    t_upload_f32(wt, w);
    double *ref = t_alloc(sizeof(double) * (size_t)n);
    ref_rmsnorm(f64_of(x, n), f64_of(w, c->dim), ref, c->rows, c->dim, (double)c->eps);
    if (!t_op(kvs_rmsnorm(t_dev(), xt->t, wt->t, yt->t, c->eps))) {
        t_download(yt, y);
        t_check_nmse("y", y, ref, n, 1e-7);
        /* per-row check so the tiny rows cannot hide behind the large one */
        for (int r = 0; r < c->rows; r++) {
            char what[32];
            snprintf(what, sizeof what, "y row %d", r);
            t_check_nmse(what, y + (int64_t)r * c->dim, ref + (int64_t)r * c->dim, c->dim, 1e-7);
        }
        if (!c->inplace) t_assert_unchanged(xt, "x");
        t_assert_unchanged(wt, "w");
    }
}

START_TEST(test_rmsnorm) {
    BEGIN_LOOP("rmsnorm");
    rmsnorm_run(_i);
    t_end();
}
END_TEST

/* ---------------------------------------------------------------------------------------------- */
/* swiglu                                                                                         */

static void swiglu_run(int _i) {
    (void)_i;
    int64_t n = ew_sizes[_i % 4];
    int mode = _i / 4; /* 0 separate, 1 out=gate, 2 out=up */
    t_case("swiglu n=%lld mode=%s", (long long)n, (const char *[]){"separate", "out=gate", "out=up"}[mode]);
    float *g = t_alloc(4 * (size_t)n), *u = t_alloc(4 * (size_t)n), *o = t_alloc(4 * (size_t)n);
    t_fill_normal(g, n, 3.0);
    t_fill_normal(u, n, 1.0);
    static const float extremes[] = {100.0f, -100.0f, 1000.0f, -1000.0f, 88.8f, -88.8f, 0.0f, -0.0f, 1e-30f};
    for (int64_t i = 0; i < n && i < 9; i++) g[(i * 5) % n] = extremes[i];
    tt *gt = t_new1(KVS_F32, n), *ut = t_new1(KVS_F32, n);
    tt *ot = mode == 1 ? gt : mode == 2 ? ut : t_new1(KVS_F32, n);
    t_upload_f32(gt, g);
    t_upload_f32(ut, u);
    double *ref = t_alloc(sizeof(double) * (size_t)n);
    ref_swiglu(f64_of(g, n), f64_of(u, n), ref, n);
    if (!t_op(kvs_swiglu(t_dev(), gt->t, ut->t, ot->t))) {
        t_download(ot, o);
        t_check_nmse("out", o, ref, n, 1e-7);
        t_check_close("out", o, ref, n, 1e-30, 1e-5); /* element-wise too: silu is well conditioned */
        if (mode != 1) t_assert_unchanged(gt, "gate");
        if (mode != 2) t_assert_unchanged(ut, "up");
    }
}

START_TEST(test_swiglu) {
    BEGIN_LOOP("swiglu");
    swiglu_run(_i);
    t_end();
}
END_TEST

/* ---------------------------------------------------------------------------------------------- */
/* log_mass: lse = m + log(l), -inf where l == 0 (ThinK's pruned attention feeds it to lse_extra)  */

static void log_mass_run(int _i) {
    int64_t n = ew_sizes[_i % 4];
    int mode = _i / 4; /* 0: separate, 1: lse aliases row_max, 2: lse aliases row_sum */
    t_case("log_mass n=%lld mode=%s", (long long)n, (const char *[]){"separate", "lse=row_max", "lse=row_sum"}[mode]);
    float *m = t_alloc(4 * (size_t)n), *l = t_alloc(4 * (size_t)n), *y = t_alloc(4 * (size_t)n);
    t_fill_normal(m, n, 10.0);
    t_fill_uniform(l, n, 1.0, 300.0); /* a row sum is >= 1 (its max term is 1) when a key is visible */
    for (int64_t i = 0; i < n; i += 7) l[i] = 0.0f; /* no visible key: -inf */
    if (n > 3) {
        m[1] = -FLT_MAX, l[1] = 0.0f; /* the op's "no key" row max */
        l[2] = 1.0f;                  /* log 1 = 0 exactly: lse = m */
        l[3] = 3e38f;                 /* a large sum */
    }
    tt *mt = t_new1(KVS_F32, n), *lt = t_new1(KVS_F32, n);
    tt *yt = mode == 1 ? mt : mode == 2 ? lt : t_new1(KVS_F32, n);
    t_upload_f32(mt, m);
    t_upload_f32(lt, l);
    if (!t_op(kvs_log_mass(t_dev(), mt->t, lt->t, yt->t))) {
        t_download(yt, y);
        for (int64_t i = 0; i < n; i++) {
            if (l[i] == 0.0f) {
                T_ASSERT(y[i] == -INFINITY, "lse[%lld] = %g, want -inf (row_sum 0)", (long long)i, (double)y[i]);
                continue;
            }
            const double ref = (double)m[i] + log((double)l[i]), tol = 4e-7 * (fabs((double)m[i]) + fabs(log((double)l[i])) + 1.0);
            T_ASSERT(fabs((double)y[i] - ref) <= tol, "lse[%lld] = %.9g, float64 reference %.9g (m %g, l %g)", (long long)i,
                     (double)y[i], ref, (double)m[i], (double)l[i]);
        }
        if (mode != 1) t_assert_unchanged(mt, "row_max");
        if (mode != 2) t_assert_unchanged(lt, "row_sum");
    }
}

START_TEST(test_log_mass) {
    BEGIN_LOOP("log_mass");
    log_mass_run(_i);
    t_end();
}
END_TEST

/* ---------------------------------------------------------------------------------------------- */
/* softmax                                                                                        */

typedef struct sm_case {
    int rows, n;
    float scale;
    double mag;   /* logit magnitude */
    int special;  /* -inf entries, one all -inf row, one single-finite row */
    int inplace;
} sm_case;
static const sm_case sm_cases[] = {
    {1, 1, 1.0f, 1, 0, 0},       {13, 33, 1.0f, 3, 0, 0},   {3, 1000, 0.125f, 10, 0, 0}, {2, 5000, 1.0f, 1, 0, 1},
    {5, 13, 3.0f, 300, 1, 0},    {7, 100, 1.0f, 500, 1, 1}, {4, 257, 0.5f, 2, 1, 0},
};

static void softmax_run(int _i) {
    (void)_i;
    const sm_case *c = &sm_cases[_i];
    t_case("softmax rows=%d n=%d scale=%g magnitude=%g special=%d inplace=%d", c->rows, c->n, (double)c->scale,
           c->mag, c->special, c->inplace);
    int64_t n = (int64_t)c->rows * c->n;
    float *x = t_alloc(4 * (size_t)n), *y = t_alloc(4 * (size_t)n);
    t_fill_uniform(x, n, -c->mag, c->mag);
    if (c->special) {
        for (int64_t i = 0; i < n; i++)
            if (t_rand_int(0, 4) == 0) x[i] = -INFINITY;
        if (c->rows >= 2) {
            for (int j = 0; j < c->n; j++) x[j] = -INFINITY;           /* row 0: all -inf -> all 0 */
            for (int j = 0; j < c->n; j++) x[c->n + j] = -INFINITY;    /* row 1: one finite -> one-hot */
            x[c->n + c->n / 2] = (float)c->mag;
        }
    }
    tt *xt = t_new2(KVS_F32, c->n, c->rows);
    tt *yt = c->inplace ? xt : t_new2(KVS_F32, c->n, c->rows);
    t_upload_f32(xt, x);
    double *ref = t_alloc(sizeof(double) * (size_t)n);
    ref_softmax(f64_of(x, n), ref, c->rows, c->n, (double)c->scale);
    if (!t_op(kvs_softmax(t_dev(), xt->t, yt->t, c->scale))) {
        t_download(yt, y);
        t_check_nmse("y", y, ref, n, 1e-7);
        for (int64_t i = 0; i < n; i++)
            if (ref[i] == 0.0) T_ASSERT(y[i] == 0.0f, "y[%lld] = %g, want exactly 0 (-inf logit / all -inf row)",
                                        (long long)i, (double)y[i]);
        for (int r = 0; r < c->rows; r++) {
            char what[32];
            snprintf(what, sizeof what, "y row %d", r);
            t_check_nmse(what, y + (int64_t)r * c->n, ref + (int64_t)r * c->n, c->n, 1e-7);
        }
        if (!c->inplace) t_assert_unchanged(xt, "x");
    }
}

START_TEST(test_softmax) {
    BEGIN_LOOP("softmax");
    softmax_run(_i);
    t_end();
}
END_TEST

static const t_seq test_elementwise_sequence_seq[] = {
    {add_run, 16}, {copy_run, 27}, {rmsnorm_run, (int)(sizeof rn_cases / sizeof rn_cases[0])}, {swiglu_run, 12}, {log_mass_run, 12},
    {softmax_run, (int)(sizeof sm_cases / sizeof sm_cases[0])}};
T_SEQUENCE_TEST(test_elementwise_sequence, test_elementwise_sequence_seq)

Suite *suite_elementwise(void) {
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("add");
    tcase_add_loop_test(tc, test_add, 0, 16);
    suite_add_tcase(s, tc);
    tc = tcase_create("copy");
    tcase_add_loop_test(tc, test_copy, 0, 27);
    suite_add_tcase(s, tc);
    tc = tcase_create("rmsnorm");
    tcase_add_loop_test(tc, test_rmsnorm, 0, (int)(sizeof rn_cases / sizeof rn_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("swiglu");
    tcase_add_loop_test(tc, test_swiglu, 0, 12);
    suite_add_tcase(s, tc);
    tc = tcase_create("log_mass");
    tcase_add_loop_test(tc, test_log_mass, 0, 12);
    suite_add_tcase(s, tc);
    tc = tcase_create("softmax");
    tcase_add_loop_test(tc, test_softmax, 0, (int)(sizeof sm_cases / sizeof sm_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_elementwise_sequence);
    suite_add_tcase(s, tc);
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* embedding                                                                                      */

typedef struct emb_case {
    kvs_dtype dt;
    int vocab, dim, n;
} emb_case;
static const emb_case emb_cases[] = {
    {KVS_F32, 100, 13, 13}, {KVS_F32, 1, 64, 1},    {KVS_F16, 100, 13, 13}, {KVS_F16, 512, 64, 33},
    {KVS_BF16, 100, 13, 13}, {KVS_BF16, 50, 128, 7}, {KVS_Q8_0, 50, 64, 13}, {KVS_Q8_0, 512, 32, 100},
};

static void embedding_run(int _i) {
    (void)_i;
    const emb_case *c = &emb_cases[_i];
    t_case("embedding table=%s vocab=%d dim=%d n=%d", kvs_dtype_name(c->dt), c->vocab, c->dim, c->n);
    int64_t tn = (int64_t)c->vocab * c->dim;
    float *tab = t_alloc(4 * (size_t)tn);
    t_fill_normal(tab, tn, 2.0);
    double *tabd = t_alloc(sizeof(double) * (size_t)tn);
    kvs_tensor *tabt;
    if (c->dt == KVS_Q8_0) {
        uint8_t *blocks = t_alloc((size_t)(tn / 32) * 34);
        ref_q8_0_quantize(tab, tn, blocks);
        ref_q8_0_dequant(blocks, tn, tabd);
        int64_t ne[2] = {c->dim, c->vocab};
        tabt = t_plain(KVS_Q8_0, 2, ne);
        ck_assert(kvs_tensor_upload(tabt, blocks, 0, kvs_tensor_nbytes(tabt)) == KVS_OK);
    } else {
        tt *tg = t_new2(c->dt, c->dim, c->vocab);
        t_upload_as(tg, tab);
        for (int64_t i = 0; i < tn; i++) tabd[i] = ref_round_to(c->dt, tab[i]);
        tabt = tg->t;
    }
    int32_t *ids = t_alloc(4 * (size_t)c->n);
    for (int i = 0; i < c->n; i++) ids[i] = (int32_t)t_rand_int(0, c->vocab - 1);
    ids[0] = c->vocab - 1;
    if (c->n > 2) {
        ids[1] = 0;
        ids[2] = ids[0]; /* repeated id */
    }
    tt *ot = t_new2(KVS_F32, c->dim, c->n);
    if (!t_op(kvs_embedding(t_dev(), tabt, ids, c->n, ot->t))) {
        float *o = t_alloc(4 * (size_t)c->n * (size_t)c->dim), *want = t_alloc(4 * (size_t)c->n * (size_t)c->dim);
        for (int i = 0; i < c->n; i++)
            for (int j = 0; j < c->dim; j++) want[i * c->dim + j] = (float)tabd[(int64_t)ids[i] * c->dim + j];
        t_download(ot, o);
        t_check_exact_f32("out", o, want, (int64_t)c->n * c->dim);
    }
}

START_TEST(test_embedding) {
    BEGIN_LOOP("embedding");
    embedding_run(_i);
    t_end();
}
END_TEST

static const t_seq test_embedding_sequence_seq[] = {{embedding_run, (int)(sizeof emb_cases / sizeof emb_cases[0])}};
T_SEQUENCE_TEST(test_embedding_sequence, test_embedding_sequence_seq)

Suite *suite_embedding(void) {
    Suite *s = suite_create("embedding");
    TCase *tc = tcase_create("embedding");
    tcase_add_loop_test(tc, test_embedding, 0, (int)(sizeof emb_cases / sizeof emb_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_embedding_sequence);
    suite_add_tcase(s, tc);
    return s;
}
