/* Suite "dwt": kvs_dwt / kvs_idwt for Haar, db2 and db4 at several levels (including more levels
 * than log2(n)) and odd lengths (1, 13, 33, 100+); perfect reconstruction; hand-computed Haar
 * values; the Haar multi-resolution approximation (zeroed details -> block means).
 *
 * Reading of ops.h: the inverse at each level is the exact transpose of the periodized analysis,
 * c[m] = sum over (i, t) with (2i + t) mod L' == m of a[i] lo[t] + d[i] hi[t], which is what
 * "lo[(m - 2i) mod L']" means when the filter is no longer than L'; for db4 at levels where
 * L' < 8 the taps wrap more than once and every wrap is summed (this is what makes kvs_idwt the
 * inverse there). See the report.
 *
 * Tolerances: dwt and idwt vs reference nmse <= 1e-7 (test-backend-ops default; f32 filtering
 * gives ~1e-14). Reconstruction idwt(dwt(x)) vs x nmse <= 1e-10 (perfect reconstruction is the
 * point). Hand-computed Haar values: |err| <= 1e-6 absolute.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

typedef struct dwt_case {
    int rows, n;
    kvs_wavelet w;
    int levels;
} dwt_case;

static const dwt_case cases[] = {
    {1, 1, KVS_WAVELET_HAAR, 1},  {1, 1, KVS_WAVELET_DB4, 3},    {2, 2, KVS_WAVELET_HAAR, 1},
    {3, 13, KVS_WAVELET_HAAR, 3}, {3, 13, KVS_WAVELET_DB2, 2},   {2, 13, KVS_WAVELET_DB4, 4},
    {4, 33, KVS_WAVELET_DB2, 3},  {2, 33, KVS_WAVELET_DB4, 5},   {3, 100, KVS_WAVELET_HAAR, 5},
    {2, 100, KVS_WAVELET_DB4, 3}, {2, 129, KVS_WAVELET_DB2, 7},  {1, 1000, KVS_WAVELET_DB4, 6},
    {2, 13, KVS_WAVELET_HAAR, 12}, {8, 256, KVS_WAVELET_HAAR, 8}, {5, 64, KVS_WAVELET_DB4, 2},
    {16, 517, KVS_WAVELET_DB2, 4}, {1, 100003, KVS_WAVELET_DB4, 10}, {64, 1, KVS_WAVELET_DB2, 2},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void case_name(const dwt_case *c, const char *what) {
    t_case("%s rows=%d n=%d wavelet=%s levels=%d", what, c->rows, c->n, kvs_wavelet_name(c->w), c->levels);
}

static void dwt_forward_run(int _i) {
    (void)_i;
    const dwt_case *c = &cases[_i];
    case_name(c, "dwt");
    int64_t nc = ref_dwt_len(c->n, c->levels), rows = c->rows, n = c->n;
    ck_assert_int_eq(kvs_dwt_length(n, c->levels), nc);
    float *x = t_alloc(4 * (size_t)(rows * n)), *y = t_alloc(4 * (size_t)(rows * nc));
    t_fill_normal(x, rows * n, 1.0);
    if (rows > 1)
        for (int64_t j = 0; j < n; j++) x[n + j] = 100.0f + 0.5f * (float)j; /* large offset + ramp */
    double *xd = t_alloc(sizeof(double) * (size_t)n), *ref = t_alloc(sizeof(double) * (size_t)(rows * nc));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < n; j++) xd[j] = x[r * n + j];
        ref_dwt_row(xd, n, c->w, c->levels, ref + r * nc);
    }
    tt *xt = t_new2(KVS_F32, n, rows), *yt = t_new2(KVS_F32, nc, rows);
    t_upload_f32(xt, x);
    if (!t_op(kvs_dwt(t_dev(), xt->t, yt->t, c->w, c->levels))) {
        t_download(yt, y);
        t_check_nmse("y", y, ref, rows * nc, 1e-7);
        for (int64_t r = 0; r < rows; r++) {
            char what[32];
            snprintf(what, sizeof what, "y row %lld", (long long)r);
            t_check_nmse(what, y + r * nc, ref + r * nc, nc, 1e-7);
        }
        t_assert_unchanged(xt, "x");
    }
}

START_TEST(test_dwt_forward) {
    char tname[40];
    snprintf(tname, sizeof tname, "dwt#%d", _i);
    t_begin(tname);
    dwt_forward_run(_i);
    t_end();
}
END_TEST

static void idwt_run(int _i) {
    (void)_i;
    const dwt_case *c = &cases[_i];
    case_name(c, "idwt (random coefficients)");
    int64_t nc = ref_dwt_len(c->n, c->levels), rows = c->rows, n = c->n;
    float *y = t_alloc(4 * (size_t)(rows * nc)), *x = t_alloc(4 * (size_t)(rows * n));
    t_fill_normal(y, rows * nc, 1.0);
    double *yd = t_alloc(sizeof(double) * (size_t)nc), *ref = t_alloc(sizeof(double) * (size_t)(rows * n));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < nc; j++) yd[j] = y[r * nc + j];
        ref_idwt_row(yd, n, c->w, c->levels, ref + r * n);
    }
    tt *yt = t_new2(KVS_F32, nc, rows), *xt = t_new2(KVS_F32, n, rows);
    t_upload_f32(yt, y);
    if (!t_op(kvs_idwt(t_dev(), yt->t, xt->t, c->w, c->levels))) {
        t_download(xt, x);
        t_check_nmse("x", x, ref, rows * n, 1e-7);
        t_assert_unchanged(yt, "y");
    }
}

START_TEST(test_idwt) {
    char tname[40];
    snprintf(tname, sizeof tname, "idwt#%d", _i);
    t_begin(tname);
    idwt_run(_i);
    t_end();
}
END_TEST

static void dwt_roundtrip_run(int _i) {
    (void)_i;
    const dwt_case *c = &cases[_i];
    case_name(c, "idwt(dwt(x)) == x");
    int64_t nc = ref_dwt_len(c->n, c->levels), rows = c->rows, n = c->n;
    float *x = t_alloc(4 * (size_t)(rows * n)), *x2 = t_alloc(4 * (size_t)(rows * n));
    t_fill_normal(x, rows * n, 3.0);
    tt *xt = t_new2(KVS_F32, n, rows), *yt = t_new2(KVS_F32, nc, rows), *x2t = t_new2(KVS_F32, n, rows);
    t_upload_f32(xt, x);
    if (t_op(kvs_dwt(t_dev(), xt->t, yt->t, c->w, c->levels))) return;
    if (t_op(kvs_idwt(t_dev(), yt->t, x2t->t, c->w, c->levels))) return;
    t_download(x2t, x2);
    double *xd = t_alloc(sizeof(double) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) xd[i] = x[i];
    t_check_nmse("reconstruction", x2, xd, rows * n, 1e-10);
}

START_TEST(test_dwt_roundtrip) {
    char tname[40];
    snprintf(tname, sizeof tname, "dwt_roundtrip#%d", _i);
    t_begin(tname);
    dwt_roundtrip_run(_i);
    t_end();
}
END_TEST

/* Hand-computed Haar (lo = hi-reversed = 1/sqrt2 (1, 1), hi = 1/sqrt2 (1, -1)):
 *  x = [1 2 3 4 5], 2 levels. Level 1 extends to [1 2 3 4 5 5]:
 *    a1 = [3, 7, 10]/sqrt2, d1 = [-1, -1, 0]/sqrt2.
 *  Level 2 extends a1 to [3 7 10 10]/sqrt2: a2 = [10, 20]/2 = [5, 10], d2 = [-4, 0]/2 = [-2, 0].
 *  y = [a2 | d2 | d1] = [5, 10, -2, 0, -1/sqrt2, -1/sqrt2, 0]. */
static void dwt_haar_hand_run(int _i) {
    (void)_i;
    t_case("dwt haar hand-computed x=[1 2 3 4 5] levels=2");
    const float x[5] = {1, 2, 3, 4, 5};
    const double s = sqrt(0.5);
    const double want[7] = {5, 10, -2, 0, -s, -s, 0};
    tt *xt = t_new2(KVS_F32, 5, 1), *yt = t_new2(KVS_F32, 7, 1), *x2t = t_new2(KVS_F32, 5, 1);
    t_upload_f32(xt, x);
    float y[7], x2[5];
    double xd[5] = {1, 2, 3, 4, 5};
    if (t_op(kvs_dwt(t_dev(), xt->t, yt->t, KVS_WAVELET_HAAR, 2))) return;
    t_download(yt, y);
    t_check_close("y", y, want, 7, 1e-6, 0);
    if (t_op(kvs_idwt(t_dev(), yt->t, x2t->t, KVS_WAVELET_HAAR, 2))) return;
    t_download(x2t, x2);
    t_check_close("idwt(y)", x2, xd, 5, 1e-6, 0);
}

START_TEST(test_dwt_haar_hand) {
    t_begin("dwt_haar_hand");
    dwt_haar_hand_run(_i);
    t_end();
}
END_TEST

/* Haar with zeroed details reconstructs the block means over blocks of 2^J (n a multiple of 2^J):
 * the multi-resolution approximation WaveFilter skims with. n = 24, J = 3: means of 8 samples. */
static void dwt_haar_approximation_run(int _i) {
    (void)_i;
    t_case("idwt haar zeroed details n=24 levels=3 rows=2 -> block means of 8");
    const int n = 24, J = 3, rows = 2;
    int64_t nc = ref_dwt_len(n, J);
    float *x = t_alloc(4 * n * rows), *y = t_alloc(4 * (size_t)(nc * rows)), *xa = t_alloc(4 * n * rows);
    t_fill_uniform(x, n * rows, -5, 5);
    tt *xt = t_new2(KVS_F32, n, rows), *yt = t_new2(KVS_F32, nc, rows), *at = t_new2(KVS_F32, n, rows);
    t_upload_f32(xt, x);
    double *want = t_alloc(sizeof(double) * n * rows);
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < n / 8; b++) {
            double m = 0;
            for (int j = 0; j < 8; j++) m += x[r * n + b * 8 + j];
            for (int j = 0; j < 8; j++) want[r * n + b * 8 + j] = m / 8;
        }
    if (t_op(kvs_dwt(t_dev(), xt->t, yt->t, KVS_WAVELET_HAAR, J))) return;
    t_download(yt, y);
    int64_t na = ref_dwt_level_len(n, J);
    for (int r = 0; r < rows; r++)
        for (int64_t j = na; j < nc; j++) y[r * nc + j] = 0.0f;
    t_upload_f32(yt, y);
    if (t_op(kvs_idwt(t_dev(), yt->t, at->t, KVS_WAVELET_HAAR, J))) return;
    t_download(at, xa);
    t_check_close("approximation", xa, want, n * rows, 1e-5, 1e-6);
}

START_TEST(test_dwt_haar_approximation) {
    t_begin("dwt_haar_approximation");
    dwt_haar_approximation_run(_i);
    t_end();
}
END_TEST

static const t_seq test_dwt_sequence_seq[] = {{dwt_forward_run, N_CASES}, {idwt_run, N_CASES}, {dwt_roundtrip_run, N_CASES},
    {dwt_haar_hand_run, 1}, {dwt_haar_approximation_run, 1}};
T_SEQUENCE_TEST(test_dwt_sequence, test_dwt_sequence_seq)

Suite *suite_dwt(void) {
    Suite *s = suite_create("dwt");
    TCase *tc = tcase_create("dwt");
    tcase_add_loop_test(tc, test_dwt_forward, 0, N_CASES);
    tcase_add_test(tc, test_dwt_haar_hand);
    suite_add_tcase(s, tc);
    tc = tcase_create("idwt");
    tcase_add_loop_test(tc, test_idwt, 0, N_CASES);
    tcase_add_loop_test(tc, test_dwt_roundtrip, 0, N_CASES);
    tcase_add_test(tc, test_dwt_haar_approximation);
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_dwt_sequence);
    suite_add_tcase(s, tc);
    return s;
}
