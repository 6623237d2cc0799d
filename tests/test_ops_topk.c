/* Suite "topk": kvs_topk per row (ties, NaN, -inf, signed zeros, order_by_index, row_len, k = n,
 * rows far longer than a work-group) and kvs_topk_global (k up to 10^4 over 10^5..10^6 entries
 * with many ties).
 *
 * Everything is compared exactly: idx as integers, val bit for bit (any NaN matches NaN). The order
 * is the contract's: larger first, equal scores lower index first, NaN below every number.
 * Reading of ops.h: -0.0 and +0.0 are equal scores (ordered by index); with order_by_index and
 * row_len < k, the valid selections come first in ascending index order, then the -1 tail.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

enum {
    K_TIES = 1 << 0,   /* values from a few levels: many equal scores */
    K_NAN = 1 << 1,    /* some NaN entries */
    K_NINF = 1 << 2,   /* some -inf entries */
    K_ORDER = 1 << 3,  /* order_by_index */
    K_ROWLEN = 1 << 4, /* per-row valid lengths (0, < k, = n, random) */
    K_NOVAL = 1 << 5,  /* val = NULL */
    K_ZEROS = 1 << 6,  /* +0.0 and -0.0 mixed (equal scores) */
    K_PINF = 1 << 7,   /* some +inf entries */
    K_NEG = 1 << 8,    /* every score negative (log-probabilities): the threshold is negative */
    K_FINE = 1 << 9,   /* values on a fine grid of a narrow range: crowded buckets, many ties */
    K_OUTLIER = 1 << 10, /* a few huge values: a wide key range, distinct keys crowd one bucket */
    K_HOLES = 1 << 11,   /* NaN but every 97th entry of a row and its last 10: a sample of NaN */
};

static void fill_scores(float *x, int64_t n, unsigned f, int levels) {
    for (int64_t i = 0; i < n; i++) {
        if (f & K_TIES) x[i] = (float)t_rand_int(0, levels - 1) * 0.25f - 3.0f;
        else if (f & K_FINE) x[i] = 1.0f + (float)t_rand_int(0, 511) * 0x1p-20f;
        else x[i] = (float)t_rand_normal();
        if (f & K_NEG) x[i] = -fabsf(x[i]) - 5.0f;
        if ((f & K_OUTLIER) && t_rand_int(0, 4999) == 0) x[i] = 1e30f * (float)t_rand_int(1, 9);
        if ((f & K_NAN) && t_rand_int(0, 9) == 0) x[i] = NAN;
        if ((f & K_NINF) && t_rand_int(0, 9) == 0) x[i] = -INFINITY;
        if ((f & K_PINF) && t_rand_int(0, 49) == 0) x[i] = INFINITY;
        if (f & K_ZEROS) x[i] = t_rand_int(0, 1) ? 0.0f : -0.0f;
    }
}

/* K_HOLES on rows of n: numbers sit both in a vector scan's body and in its scalar tail (the last
 * 10, all below the body's: a scan that drops its body returns only them), while a sampled
 * threshold sees almost only NaN. */
static void punch_holes(float *x, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            float *v = x + r * n + j;
            if (j >= n - 10) *v = -1000.0f - (float)(j % 7);
            else if (j % 97 != 5) *v = NAN;
        }
}

static void flag_str(unsigned f, char *buf, size_t n) {
    static const char *names[] = {"ties", "nan", "-inf", "order_by_index", "row_len", "no_val", "signed_zeros", "+inf", "negative", "fine", "outliers", "nan_holes"};
    buf[0] = '\0';
    for (int i = 0; i < 12; i++)
        if (f & (1u << i)) {
            strncat(buf, buf[0] ? "," : "", n - strlen(buf) - 1);
            strncat(buf, names[i], n - strlen(buf) - 1);
        }
    if (!buf[0]) snprintf(buf, n, "none");
}

typedef struct topk_case {
    int rows, n, k;
    unsigned flags;
} topk_case;

static const topk_case row_cases[] = {
    {1, 1, 1, 0},
    {13, 33, 5, K_TIES | K_NAN | K_NINF},
    {4, 1000, 100, K_TIES},
    {3, 100, 100, K_NAN | K_NINF | K_PINF},
    {2, 20000, 64, K_TIES},
    {5, 33, 7, K_ORDER | K_ROWLEN | K_NAN},
    {6, 50, 10, K_ROWLEN},
    {2, 5000, 1000, K_ORDER | K_TIES},
    {1, 64, 10, K_ZEROS},
    {3, 13, 13, K_NOVAL | K_NAN},
    {7, 257, 1, K_NINF | K_TIES},
    {2, 100000, 10, 0},
    /* the sampled-threshold path at the benchmark's shape, both orders, negative and NaN data */
    {3, 65536, 1024, 0},
    {3, 65536, 1024, K_ORDER},
    {2, 30001, 500, K_NEG | K_NAN | K_NINF},
    {2, 30001, 500, K_NEG | K_ORDER},
    {2, 40000, 3000, K_FINE},
    {2, 40000, 3000, K_FINE | K_ORDER},
    {3, 65536, 1024, K_OUTLIER},
    /* mostly NaN (a NaN threshold once made the AVX-512 scan drop every number before its tail);
     * n = 20000: a sample size that is not a whole number of blocks */
    {3, 1000, 1, K_HOLES},
    {2, 20000, 7, K_HOLES},
    {2, 20000, 7, K_HOLES | K_ORDER},
    {1, 65537, 50, K_HOLES | K_NEG},
};

static void topk_rows_run(int _i) {
    (void)_i;
    const topk_case *c = &row_cases[_i];
    char fl[128];
    flag_str(c->flags, fl, sizeof fl);
    t_case("topk rows=%d n=%d k=%d flags=%s", c->rows, c->n, c->k, fl);
    int64_t rows = c->rows, n = c->n, k = c->k;
    float *x = t_alloc(4 * (size_t)(rows * n));
    fill_scores(x, rows * n, c->flags, 9);
    if (c->flags & K_HOLES) punch_holes(x, rows, n);
    if ((c->flags & K_NAN) && n >= 2) x[1] = NAN;
    int32_t *rl = NULL;
    if (c->flags & K_ROWLEN) {
        rl = t_alloc(4 * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) rl[r] = (int32_t)t_rand_int(0, n);
        rl[0] = 0;
        if (rows > 1) rl[1] = (int32_t)(k - 1 > 0 ? k - 1 : 0); /* fewer valid entries than k */
        if (rows > 2) rl[2] = (int32_t)n;
        if (rows > 3) rl[3] = (int32_t)k;
    }
    tt *xt = t_new2(KVS_F32, n, rows), *it = t_new2(KVS_I32, k, rows);
    tt *vt = (c->flags & K_NOVAL) ? NULL : t_new2(KVS_F32, k, rows);
    tt *rlt = NULL;
    t_upload_f32(xt, x);
    kvs_topk_params p = kvs_topk_params_default();
    p.k = k;
    p.order_by_index = (c->flags & K_ORDER) != 0;
    if (rl) {
        rlt = t_new1(KVS_I32, rows);
        t_upload_i32(rlt, rl);
        p.row_len = rlt->t;
    }
    if (!t_op(kvs_topk(t_dev(), xt->t, it->t, vt ? vt->t : NULL, &p))) {
        int32_t *idx = t_alloc(4 * (size_t)(rows * k)), *ridx = t_alloc(4 * (size_t)(rows * k));
        float *val = t_alloc(4 * (size_t)(rows * k)), *rval = t_alloc(4 * (size_t)(rows * k));
        for (int64_t r = 0; r < rows; r++)
            ref_topk(x + r * n, n, rl ? rl[r] : n, k, p.order_by_index, ridx + r * k, rval + r * k);
        t_download(it, idx);
        for (int64_t r = 0; r < rows; r++) {
            char what[48];
            snprintf(what, sizeof what, "idx row %lld (row_len %d)", (long long)r, rl ? rl[r] : c->n);
            t_check_exact_i32(what, idx + r * k, ridx + r * k, k);
        }
        if (vt) {
            t_download(vt, val);
            t_check_exact_f32("val", val, rval, rows * k);
        }
        t_assert_unchanged(xt, "x");
    }
}

START_TEST(test_topk_rows) {
    char tname[40];
    snprintf(tname, sizeof tname, "topk#%d", _i);
    t_begin(tname);
    topk_rows_run(_i);
    t_end();
}
END_TEST

typedef struct global_case {
    int64_t ne0, ne1, ne2;
    int k;
    unsigned flags;
    int levels; /* tie levels */
} global_case;

static const global_case global_cases[] = {
    {100000, 0, 0, 1, 0, 0},
    {100, 1000, 0, 10000, K_TIES, 64},
    {1000, 1000, 0, 10000, K_TIES, 256},
    {33, 13, 7, 3003, K_NAN | K_NINF | K_TIES, 9},
    {1000, 100, 0, 5000, K_ORDER | K_TIES, 32},
    {13, 0, 0, 13, K_NOVAL | K_ZEROS, 0},
    {4096, 64, 0, 777, K_NAN | K_PINF, 0},
    {1, 0, 0, 1, 0, 0},
    {300, 1000, 0, 4096, K_NEG | K_NAN, 0},
    {200, 1000, 0, 5000, K_FINE, 0},
    {200, 1000, 0, 5000, K_FINE | K_ORDER, 0},
    {1000, 0, 0, 1, K_HOLES, 0},
    {100003, 0, 0, 5, K_HOLES, 0},
};

static void topk_global_run(int _i) {
    (void)_i;
    const global_case *c = &global_cases[_i];
    char fl[128];
    flag_str(c->flags, fl, sizeof fl);
    int64_t ne[3] = {c->ne0, c->ne1 ? c->ne1 : 1, c->ne2 ? c->ne2 : 1};
    int ndim = c->ne2 ? 3 : c->ne1 ? 2 : 1;
    int64_t n = ne[0] * ne[1] * ne[2], k = c->k;
    t_case("topk_global ne={%lld,%lld,%lld} n=%lld k=%d levels=%d flags=%s", (long long)ne[0], (long long)ne[1],
           (long long)ne[2], (long long)n, c->k, c->levels, fl);
    float *x = t_alloc(4 * (size_t)n);
    fill_scores(x, n, c->flags, c->levels);
    if (c->flags & K_HOLES) punch_holes(x, 1, n);
    tt *xt = t_new(KVS_F32, ndim, ne), *it = t_new1(KVS_I32, k);
    tt *vt = (c->flags & K_NOVAL) ? NULL : t_new1(KVS_F32, k);
    t_upload_f32(xt, x);
    kvs_topk_params p = kvs_topk_params_default();
    p.k = k;
    p.order_by_index = (c->flags & K_ORDER) != 0;
    if (!t_op(kvs_topk_global(t_dev(), xt->t, it->t, vt ? vt->t : NULL, &p))) {
        int32_t *idx = t_alloc(4 * (size_t)k), *ridx = t_alloc(4 * (size_t)k);
        float *val = t_alloc(4 * (size_t)k), *rval = t_alloc(4 * (size_t)k);
        ref_topk(x, n, n, k, p.order_by_index, ridx, rval);
        t_download(it, idx);
        t_check_exact_i32("idx", idx, ridx, k);
        if (vt) {
            t_download(vt, val);
            t_check_exact_f32("val", val, rval, k);
        }
        t_assert_unchanged(xt, "x");
    }
}

START_TEST(test_topk_global) {
    char tname[40];
    snprintf(tname, sizeof tname, "topk_global#%d", _i);
    t_begin(tname);
    topk_global_run(_i);
    t_end();
}
END_TEST

static const t_seq test_topk_sequence_seq[] = {{topk_rows_run, (int)(sizeof row_cases / sizeof row_cases[0])},
    {topk_global_run, (int)(sizeof global_cases / sizeof global_cases[0])}};
T_SEQUENCE_TEST(test_topk_sequence, test_topk_sequence_seq)

Suite *suite_topk(void) {
    Suite *s = suite_create("topk");
    TCase *tc = tcase_create("topk");
    tcase_add_loop_test(tc, test_topk_rows, 0, (int)(sizeof row_cases / sizeof row_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("topk_global");
    tcase_add_loop_test(tc, test_topk_global, 0, (int)(sizeof global_cases / sizeof global_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_topk_sequence);
    suite_add_tcase(s, tc);
    return s;
}
