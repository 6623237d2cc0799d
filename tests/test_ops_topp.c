/* Suite "topp": kvs_topp (per-row top-p over mass, the sorted prefix-sum threshold) against a
 * float64 reference: hand-checked rows (ties, negative / NaN / infinite entries, row_len, p = 1,
 * rows without mass), random odd sizes and mass shapes (flat, softmax-peaked, tied levels, with
 * junk), and the refusals.
 *
 * The reference sorts the positive finite masses in float64 and takes the shortest prefix whose
 * sum reaches p * T. The contract lets OpenCL and Vulkan (f32 sums) differ by one where the
 * float64 prefix sum lies within 1e-5 * T of p * T: a count c passes when S(c) >= pT - tol and
 * S(c - 1) < pT + tol; every other case (and thr, the value of the count-th ranked entry, bit for
 * bit) is exact. The CPU backend must match the reference exactly everywhere. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

static int cmp_desc_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Reference of one row: sorted masses into w (returns how many), their total, and the count. */
static int64_t ref_topp_row(const float *x, int64_t len, double p, double *w, double *total, int64_t *count) {
    int64_t m = 0;
    double T = 0.0;
    for (int64_t j = 0; j < len; j++)
        if (isfinite(x[j]) && x[j] > 0.0f) {
            w[m++] = x[j];
            T += x[j];
        }
    qsort(w, (size_t)m, sizeof *w, cmp_desc_d);
    int64_t k = m;
    if (p < 1.0) {
        double s = 0.0;
        for (int64_t i = 0; i < m; i++) {
            s += w[i];
            if (s >= p * T) {
                k = i + 1;
                break;
            }
        }
    }
    *total = T;
    *count = k;
    return m;
}

/* Checks one row's device result against the reference. exact: the count must equal it. */
static void check_row(int64_t r, const float *x, int64_t len, double p, int32_t c, const float *thr, int exact) {
    double *w = t_alloc(sizeof(double) * (size_t)(len > 0 ? len : 1)), T = 0.0;
    int64_t k = 0, m = ref_topp_row(x, len, p, w, &T, &k);
    if (m == 0) {
        T_ASSERT(c == 0, "row %lld without mass: count %d, want 0", (long long)r, c);
        if (thr) T_ASSERT(isinf(*thr) && *thr > 0, "row %lld without mass: thr %g, want +inf", (long long)r, (double)*thr);
        return;
    }
    if (exact || p >= 1.0) {
        T_ASSERT(c == k, "row %lld (len %lld, p %g): count %d, want %lld", (long long)r, (long long)len, p, c, (long long)k);
    } else if (c != k) {
        T_ASSERT(c >= 1 && c <= m, "row %lld: count %d outside [1, %lld]", (long long)r, c, (long long)m);
        double s = 0.0, tol = 1e-5 * T;
        for (int64_t i = 0; i < c - 1; i++) s += w[i];
        T_ASSERT(s + w[c - 1] >= p * T - tol && s < p * T + tol,
                 "row %lld (len %lld, p %g): count %d, want %lld (S(c-1) %.9g, S(c) %.9g, pT %.9g)", (long long)r,
                 (long long)len, p, c, (long long)k, s, s + w[c - 1], p * T);
    }
    if (thr) T_ASSERT((double)*thr == w[c - 1], "row %lld: thr %.9g, want the count-th mass %.9g", (long long)r,
                      (double)*thr, w[c - 1]);
}

/* ---- hand-checked rows ---- */

typedef struct hand_case {
    int n;
    float x[8];
    int row_len; /* -1: n */
    double p;
    int count;
    float thr;
} hand_case;

static const hand_case hand_cases[] = {
    {4, {0.1f, 0.5f, 0.2f, 0.2f}, -1, 0.45, 1, 0.5f},        /* the top entry alone */
    {4, {0.125f, 0.5f, 0.25f, 0.125f}, -1, 0.5, 1, 0.5f},    /* exact sums: reaching p T is enough */
    {4, {0.125f, 0.5f, 0.25f, 0.125f}, -1, 0.75, 2, 0.25f},
    {4, {0.1f, 0.5f, 0.2f, 0.2f}, -1, 0.6, 2, 0.2f},         /* 0.5 + 0.2 */
    {4, {0.1f, 0.5f, 0.2f, 0.2f}, -1, 1.0, 4, 0.1f},         /* p = 1: every entry with mass */
    {6, {-1.0f, NAN, INFINITY, 0.3f, 0.0f, 0.7f}, -1, 0.5, 1, 0.7f}, /* junk carries no mass */
    {6, {-1.0f, NAN, INFINITY, 0.3f, 0.0f, 0.7f}, -1, 1.0, 2, 0.3f},
    {3, {-1.0f, 0.0f, -INFINITY}, -1, 0.9, 0, INFINITY},     /* no mass: nothing */
    {3, {0.1f, 0.5f, 0.9f}, 2, 0.9, 2, 0.1f},                /* row_len 2: T = 0.6, 0.5 < 0.54 */
    {3, {0.1f, 0.5f, 0.9f}, 0, 0.9, 0, INFINITY},            /* row_len 0 */
    {4, {0.25f, 0.25f, 0.25f, 0.25f}, -1, 0.6, 3, 0.25f},    /* ties: 3 of 4 equal masses */
    {5, {1.0f, 4.0f, 1.0f, 2.0f, 2.0f}, -1, 0.75, 3, 2.0f},  /* T 10: 4 + 2 + 2 = 8 >= 7.5 */
    {5, {1.0f, 4.0f, 1.0f, 2.0f, 2.0f}, -1, 0.81, 4, 1.0f},  /* 8 < 8.1: one tie at 1 */
    {1, {3.0f}, -1, 0.01, 1, 3.0f},
};

static void topp_hand_run(int i) {
    const hand_case *c = &hand_cases[i];
    t_case("topp hand#%d n=%d row_len=%d p=%g", i, c->n, c->row_len, c->p);
    tt *xt = t_new2(KVS_F32, c->n, 1), *ct = t_new1(KVS_I32, 1), *th = t_new1(KVS_F32, 1), *rl = NULL;
    t_upload_f32(xt, c->x);
    kvs_topp_params p = kvs_topp_params_default();
    p.p = c->p;
    if (c->row_len >= 0) {
        int32_t v = c->row_len;
        rl = t_new1(KVS_I32, 1);
        t_upload_i32(rl, &v);
        p.row_len = rl->t;
    }
    if (t_op(kvs_topp(t_dev(), xt->t, ct->t, th->t, &p))) return;
    int32_t cnt;
    float thr;
    t_download(ct, &cnt);
    t_download(th, &thr);
    T_ASSERT(cnt == c->count, "count %d, want %d", cnt, c->count);
    T_ASSERT(thr == c->thr, "thr %g, want %g", (double)thr, (double)c->thr);
    t_assert_unchanged(xt, "x");
}

/* ---- random rows ---- */

enum {
    P_PEAK = 1 << 0,   /* softmax-like: exp(3 * normal), a few entries hold most of the mass */
    P_TIES = 1 << 1,   /* masses from 5 levels */
    P_JUNK = 1 << 2,   /* some negative, zero, NaN, +-inf entries */
    P_ROWLEN = 1 << 3, /* per-row valid lengths */
    P_NOTHR = 1 << 4,  /* thr = NULL */
};

typedef struct rand_case {
    int rows, n;
    double p;
    unsigned flags;
} rand_case;

static const rand_case rand_cases[] = {
    {1, 1, 0.9, 0},
    {3, 13, 0.5, P_JUNK},
    {5, 33, 0.9, P_PEAK},
    {7, 257, 0.95, P_ROWLEN | P_JUNK},
    {2, 1000, 0.99, P_PEAK},
    {4, 999, 0.3, P_TIES},
    {3, 4099, 0.9, P_PEAK | P_ROWLEN},
    {2, 30001, 0.9, P_PEAK | P_JUNK},
    {6, 513, 1.0, P_JUNK | P_TIES},
    {9, 77, 0.01, P_NOTHR},
    {2, 2049, 0.7, P_TIES | P_JUNK | P_NOTHR},
};

static void topp_rand_run(int i) {
    const rand_case *c = &rand_cases[i];
    t_case("topp rand#%d rows=%d n=%d p=%g flags=0x%x", i, c->rows, c->n, c->p, c->flags);
    int64_t rows = c->rows, n = c->n;
    float *x = t_alloc(4 * (size_t)(rows * n));
    for (int64_t j = 0; j < rows * n; j++) {
        if (c->flags & P_PEAK) x[j] = (float)exp(3.0 * t_rand_normal());
        else if (c->flags & P_TIES) x[j] = 0.125f * (float)t_rand_int(0, 4);
        else x[j] = (float)t_rand_uniform(0.0, 1.0);
        if (c->flags & P_JUNK) {
            int64_t u = t_rand_int(0, 39);
            if (u == 0) x[j] = -x[j] - 1.0f;
            else if (u == 1) x[j] = NAN;
            else if (u == 2) x[j] = INFINITY;
            else if (u == 3) x[j] = -INFINITY;
            else if (u == 4) x[j] = -0.0f;
        }
    }
    int32_t *rl = NULL;
    tt *xt = t_new2(KVS_F32, n, rows), *ct = t_new1(KVS_I32, rows);
    tt *th = (c->flags & P_NOTHR) ? NULL : t_new1(KVS_F32, rows), *rlt = NULL;
    t_upload_f32(xt, x);
    kvs_topp_params p = kvs_topp_params_default();
    p.p = c->p;
    if (c->flags & P_ROWLEN) {
        rl = t_alloc(4 * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) rl[r] = (int32_t)t_rand_int(0, n);
        rl[0] = 0;
        if (rows > 1) rl[1] = (int32_t)n;
        rlt = t_new1(KVS_I32, rows);
        t_upload_i32(rlt, rl);
        p.row_len = rlt->t;
    }
    if (t_op(kvs_topp(t_dev(), xt->t, ct->t, th ? th->t : NULL, &p))) return;
    int32_t *cnt = t_alloc(4 * (size_t)rows);
    float *thr = t_alloc(4 * (size_t)rows);
    t_download(ct, cnt);
    if (th) t_download(th, thr);
    for (int64_t r = 0; r < rows; r++)
        check_row(r, x + r * n, rl ? rl[r] : n, c->p, cnt[r], th ? &thr[r] : NULL, t_backend() == KVS_BACKEND_CPU);
    t_assert_unchanged(xt, "x");
}

START_TEST(test_topp_rand) {
    t_begin("topp_rand");
    topp_rand_run(_i);
    t_end();
}
END_TEST

/* ---- refusals ---- */

START_TEST(test_topp_refusals) {
    kvs_device *dev = t_begin("topp_refusals");
    t_case("topp refusals");
    tt *x = t_new2(KVS_F32, 9, 3), *c = t_new1(KVS_I32, 3), *cbad = t_new1(KVS_I32, 2), *cf = t_new1(KVS_F32, 3);
    tt *thr = t_new1(KVS_F32, 3), *rl = t_new1(KVS_I32, 2), *xi = t_new2(KVS_I32, 9, 3);
    kvs_topp_params p = kvs_topp_params_default();
    T_ASSERT(p.p == 0.9 && p.row_len == NULL, "defaults");
    p.p = 0.0;
    t_expect(kvs_topp(dev, x->t, c->t, NULL, &p), KVS_ERR_OUT_OF_RANGE, "p = 0");
    p.p = 1.5;
    t_expect(kvs_topp(dev, x->t, c->t, NULL, &p), KVS_ERR_OUT_OF_RANGE, "p = 1.5");
    p.p = NAN;
    t_expect(kvs_topp(dev, x->t, c->t, NULL, &p), KVS_ERR_OUT_OF_RANGE, "p = NaN");
    p = kvs_topp_params_default();
    t_expect(kvs_topp(dev, NULL, c->t, NULL, &p), KVS_ERR_INVALID_ARGUMENT, "x NULL");
    t_expect(kvs_topp(dev, x->t, NULL, NULL, &p), KVS_ERR_INVALID_ARGUMENT, "count NULL");
    t_expect(kvs_topp(dev, x->t, c->t, NULL, NULL), KVS_ERR_INVALID_ARGUMENT, "params NULL");
    t_expect(kvs_topp(dev, xi->t, c->t, NULL, &p), KVS_ERR_DTYPE, "x I32");
    t_expect(kvs_topp(dev, x->t, cf->t, NULL, &p), KVS_ERR_DTYPE, "count F32");
    t_expect(kvs_topp(dev, x->t, cbad->t, NULL, &p), KVS_ERR_SHAPE, "count of 2 rows");
    t_expect(kvs_topp(dev, x->t, c->t, c->t, &p), KVS_ERR_DTYPE, "thr I32");
    t_expect(kvs_topp(dev, x->t, c->t, cf->t, &p), KVS_OK, "thr F32 (valid call)");
    p.row_len = rl->t;
    t_expect(kvs_topp(dev, x->t, c->t, thr->t, &p), KVS_ERR_SHAPE, "row_len of 2 rows");
    p.row_len = NULL;
    /* aliasing: count inside x's buffer */
    kvs_tensor *xv = NULL;
    int64_t ne1[1] = {3};
    ck_assert_int_eq(kvs_tensor_view(&xv, x->t, 0, 1, ne1), KVS_OK);
    kvs_tensor *thv = NULL;
    ck_assert_int_eq(kvs_tensor_view(&thv, x->t, 3, 1, ne1), KVS_OK);
    t_expect(kvs_topp(dev, x->t, c->t, thv, &p), KVS_ERR_INVALID_ARGUMENT, "thr aliases x");
    kvs_tensor_destroy(&xv);
    kvs_tensor_destroy(&thv);
    t_end();
}
END_TEST

static const t_seq test_topp_sequence_seq[] = {{topp_hand_run, (int)(sizeof hand_cases / sizeof hand_cases[0])},
                                               {topp_rand_run, (int)(sizeof rand_cases / sizeof rand_cases[0])}};
T_SEQUENCE_TEST(test_topp_sequence, test_topp_sequence_seq)

Suite *suite_topp(void) {
    Suite *s = suite_create("topp");
    TCase *tc = tcase_create("topp");
    /* the hand-checked rows run in the sequence test only (one device open instead of 14) */
    tcase_add_loop_test(tc, test_topp_rand, 0, (int)(sizeof rand_cases / sizeof rand_cases[0]));
    tcase_add_test(tc, test_topp_refusals);
    tcase_add_test(tc, test_topp_sequence);
    suite_add_tcase(s, tc);
    return s;
}
