/* SPA-Cache (kvs_dlm_schedule_spa, arXiv 2602.02544): the host float64 SVD against a float64
 * reference (a matrix of known SVD, random odd shapes against the two-sided Jacobi eigenvalues of
 * A^T A), the per-layer budget profile by hand, the selection of a constructed case by hand, the
 * refusals; per backend: the model's singular proxies against the float64 reference, the forward's
 * proxy scores against xn Wp^T in float64, the select path bit-identical to the plain plan (all rows
 * and a subset), the anchor (uniform budget 1 = the no-cache decode, token for token) and the
 * defaults' decode. Usage: test_spa [--backend B]. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/kvsieve.h"
#include "kvsieve/schedule.h"
#include "model/model_internal.h"
#include "model/svd_host.h"
#include "probe.h"

static kvs_device_params g_params;
static uint64_t g_rng;

static double urand(void) { /* xorshift64*, uniform in [-1, 1) */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Reference: cyclic two-sided Jacobi eigen-decomposition of the symmetric n x n matrix B (row-major,
 * destroyed): w[n] eigenvalues descending, Q[n][n] (column j = eigenvector j). A different algorithm
 * from the library's one-sided SVD. */
static void ref_eig_sym(double *B, int n, double *w, double *Q) {
    for (int i = 0; i < n * n; i++) Q[i] = 0.0;
    for (int i = 0; i < n; i++) Q[i * n + i] = 1.0;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0.0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += B[p * n + q] * B[p * n + q];
        if (off < 1e-30) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = B[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double theta = (B[q * n + q] - B[p * n + p]) / (2.0 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < n; k++) { /* B = J^T B J */
                    double bkp = B[k * n + p], bkq = B[k * n + q];
                    B[k * n + p] = c * bkp - s * bkq;
                    B[k * n + q] = s * bkp + c * bkq;
                }
                for (int k = 0; k < n; k++) {
                    double bpk = B[p * n + k], bqk = B[q * n + k];
                    B[p * n + k] = c * bpk - s * bqk;
                    B[q * n + k] = s * bpk + c * bqk;
                }
                for (int k = 0; k < n; k++) {
                    double qkp = Q[k * n + p], qkq = Q[k * n + q];
                    Q[k * n + p] = c * qkp - s * qkq;
                    Q[k * n + q] = s * qkp + c * qkq;
                }
            }
    }
    for (int i = 0; i < n; i++) w[i] = B[i * n + i];
    for (int i = 0; i < n; i++) { /* sort descending */
        int b = i;
        for (int j = i + 1; j < n; j++)
            if (w[j] > w[b]) b = j;
        double t = w[i];
        w[i] = w[b];
        w[b] = t;
        for (int k = 0; k < n; k++) {
            t = Q[k * n + i];
            Q[k * n + i] = Q[k * n + b];
            Q[k * n + b] = t;
        }
    }
}

/* A = Q1 diag(s) Q2^T, Q1 = the first n columns of the Householder reflector of u (m x m), Q2 that
 * of v (n x n): singular values s (descending, one 0), right singular vectors the columns of Q2. */
START_TEST(test_svd_known) {
    enum { M = 13, N = 7 };
    const double sv[N] = {9.0, 5.0, 3.0, 2.0, 1.5, 0.25, 0.0};
    double u[M], v[N], uu = 0, vv = 0, Q1[M][N], Q2[N][N], a[N * M], s[N], V[N * N];
    for (int i = 0; i < M; i++) uu += (u[i] = 1.0 + i % 3 - 0.5 * i / M);
    for (int i = 0; i < N; i++) vv += (v[i] = 0.3 * i - 1.0);
    uu = 0;
    vv = 0;
    for (int i = 0; i < M; i++) uu += u[i] * u[i];
    for (int i = 0; i < N; i++) vv += v[i] * v[i];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) Q1[i][j] = (i == j) - 2.0 * u[i] * u[j] / uu;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) Q2[i][j] = (i == j) - 2.0 * v[i] * v[j] / vv;
    for (int j = 0; j < N; j++) /* column j of A */
        for (int i = 0; i < M; i++) {
            double acc = 0;
            for (int k = 0; k < N; k++) acc += Q1[i][k] * sv[k] * Q2[j][k];
            a[j * M + i] = acc;
        }
    ck_assert_int_eq(kvs_svd_jacobi_f64(a, M, N, s, V), KVS_OK);
    for (int j = 0; j < N; j++) {
        ck_assert_msg(fabs(s[j] - sv[j]) < 1e-12 * sv[0], "S_%d = %.17g, want %g", j, s[j], sv[j]);
        double d = 0; /* V_j = +-Q2 column j (distinct singular values) */
        for (int k = 0; k < N; k++) d += V[j * N + k] * Q2[k][j];
        ck_assert_msg(fabs(fabs(d) - 1.0) < 1e-10, "V_%d . Q2_%d = %.17g", j, j, d);
        for (int i = 0; j < N - 1 && i < M; i++) /* U_j S_j = +-Q1_j S_j */
            ck_assert(fabs(a[j * M + i] - (d > 0 ? 1 : -1) * Q1[i][j] * sv[j]) < 1e-11 * sv[0]);
    }
}
END_TEST

/* Random odd shapes (also more columns than rows and a single row/column): singular values equal
 * the square roots of the reference eigenvalues of A^T A, V orthonormal, A V = the returned columns,
 * and the top-r right singular subspace equals the reference's (projector difference). */
START_TEST(test_svd_random) {
    const int shapes[][2] = {{13, 7}, {5, 9}, {33, 17}, {1, 4}, {6, 1}, {64, 32}};
    g_rng = 0x5eed5a0ULL ^ 0x9e3779b97f4a7c15ULL;
    printf("svd random: seed 0x%llx\n", (unsigned long long)g_rng);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int m = shapes[c][0], n = shapes[c][1];
        double *a = malloc(sizeof(double) * (size_t)(m * n)), *a0 = malloc(sizeof(double) * (size_t)(m * n));
        double *s = malloc(sizeof(double) * (size_t)n), *V = malloc(sizeof(double) * (size_t)(n * n));
        double *B = malloc(sizeof(double) * (size_t)(n * n)), *w = malloc(sizeof(double) * (size_t)n);
        double *Q = malloc(sizeof(double) * (size_t)(n * n));
        for (int i = 0; i < m * n; i++) a0[i] = a[i] = urand();
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0;
                for (int k = 0; k < m; k++) acc += a0[i * m + k] * a0[j * m + k];
                B[i * n + j] = acc;
            }
        ref_eig_sym(B, n, w, Q);
        ck_assert_int_eq(kvs_svd_jacobi_f64(a, m, n, s, V), KVS_OK);
        for (int j = 0; j < n; j++) {
            /* compared as squares: the reference's zero eigenvalues carry ~1e-16 of rounding, whose
             * square roots would be ~1e-8 */
            ck_assert_msg(fabs(s[j] * s[j] - w[j]) < 1e-12 * s[0] * s[0], "%dx%d: S_%d^2 = %.17g, reference %.17g", m, n, j,
                          s[j] * s[j], w[j]);
            if (w[j] > 1e-6 * s[0] * s[0]) ck_assert(fabs(s[j] - sqrt(w[j])) < 1e-10 * s[0]);
            for (int k = 0; k < n; k++) {
                double d = 0;
                for (int i = 0; i < n; i++) d += V[j * n + i] * V[k * n + i];
                ck_assert_msg(fabs(d - (j == k)) < 1e-12, "%dx%d: V not orthonormal (%d, %d): %g", m, n, j, k, d);
            }
            for (int i = 0; i < m; i++) {
                double av = 0;
                for (int k = 0; k < n; k++) av += a0[k * m + i] * V[j * n + k];
                ck_assert_msg(fabs(av - a[j * m + i]) < 1e-12 * (s[0] + 1), "%dx%d: (A V)_%d row %d", m, n, j, i);
            }
        }
        int kmax = m < n ? m : n;
        for (int r = 1; r <= 3 && r < kmax; r++) {
            if (s[r - 1] - s[r] < 1e-3 * s[0]) continue; /* no gap: the subspace is not determined */
            double diff = 0;
            for (int i = 0; i < n; i++)
                for (int k = 0; k < n; k++) {
                    double p1 = 0, p2 = 0;
                    for (int j = 0; j < r; j++) {
                        p1 += V[j * n + i] * V[j * n + k];
                        p2 += Q[i * n + j] * Q[k * n + j];
                    }
                    diff += (p1 - p2) * (p1 - p2);
                }
            ck_assert_msg(sqrt(diff) < 1e-8, "%dx%d: top-%d subspace differs by %g", m, n, r, sqrt(diff));
        }
        free(a);
        free(a0);
        free(s);
        free(V);
        free(B);
        free(w);
        free(Q);
    }
    double x = 1.0, sv1 = 0;
    ck_assert_int_eq(kvs_svd_jacobi_f64(NULL, 1, 1, &sv1, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_svd_jacobi_f64(&x, 0, 1, &sv1, NULL), KVS_ERR_INVALID_ARGUMENT);
    x = NAN;
    ck_assert_int_eq(kvs_svd_jacobi_f64(&x, 1, 1, &sv1, NULL), KVS_ERR_STATE);
    ck_assert(strstr(kvs_last_error(), "not finite") != NULL);
}
END_TEST

/* The randomized top-r SVD (kvs_svd_top_f64, Halko et al. 2011) against the exact one-sided Jacobi
 * on a 301 x 263 matrix U diag(S) V^T with random orthonormal U, V and S_i = 10 * 0.7^i: the top 9
 * singular values to 1e-9 relative, each U_j to a residual outside the exact top-9 left singular
 * subspace below 1e-7 (sine of the principal angle); with power 0 and no oversampling the error is
 * visibly larger (the tolerances are not vacuous); refusals. */
static void rand_orthonormal(double *q, int m, int k) { /* k columns of length m, column-major */
    for (int i = 0; i < m * k; i++) q[i] = urand();
    for (int c = 0; c < k; c++)
        for (int pass = 0; pass < 2; pass++) {
            for (int p = 0; p < c; p++) {
                double t = 0;
                for (int i = 0; i < m; i++) t += q[p * m + i] * q[c * m + i];
                for (int i = 0; i < m; i++) q[c * m + i] -= t * q[p * m + i];
            }
            double nn = 0;
            for (int i = 0; i < m; i++) nn += q[c * m + i] * q[c * m + i];
            for (int i = 0; i < m; i++) q[c * m + i] /= sqrt(nn);
        }
}

START_TEST(test_svd_randomized) {
    enum { M = 301, N = 263, R = 9 };
    g_rng = 0x7a11c0ffeeULL;
    double *U = malloc(sizeof(double) * M * N), *V = malloc(sizeof(double) * N * N), *a = malloc(sizeof(double) * M * N);
    double *ex = malloc(sizeof(double) * M * N), *se = malloc(sizeof(double) * N), *us = malloc(sizeof(double) * M * R), sr[R];
    rand_orthonormal(U, M, N);
    rand_orthonormal(V, N, N);
    for (int j = 0; j < N; j++) /* column j of A = sum_c U_c S_c V[j][c] */
        for (int i = 0; i < M; i++) {
            double acc = 0;
            for (int c = 0; c < N; c++) acc += U[c * M + i] * 10.0 * pow(0.7, c) * V[c * N + j];
            a[j * M + i] = acc;
        }
    memcpy(ex, a, sizeof(double) * M * N);
    ck_assert_int_eq(kvs_svd_jacobi_f64(ex, M, N, se, NULL), KVS_OK);
    double err_s[2] = {0, 0}, err_u[2] = {0, 0};
    for (int variant = 0; variant < 2; variant++) {
        ck_assert_msg(kvs_svd_top_f64(a, M, N, R, variant ? 0 : 10, variant ? 0 : 2, 0, us, sr) == KVS_OK, "%s", kvs_last_error());
        for (int j = 0; j < R; j++) {
            double e = fabs(sr[j] - se[j]) / se[j];
            if (e > err_s[variant]) err_s[variant] = e;
            /* u = U_j (normalised); residual of u outside the exact top-R left subspace */
            double u[M], res[M];
            for (int i = 0; i < M; i++) res[i] = u[i] = us[j * M + i] / sr[j];
            for (int c = 0; c < R; c++) {
                double t = 0;
                for (int i = 0; i < M; i++) t += ex[c * M + i] / se[c] * u[i];
                for (int i = 0; i < M; i++) res[i] -= t * ex[c * M + i] / se[c];
            }
            double rn = 0;
            for (int i = 0; i < M; i++) rn += res[i] * res[i];
            if (sqrt(rn) > err_u[variant]) err_u[variant] = sqrt(rn);
        }
    }
    printf("svd randomized 301x263 top 9 (10 oversampling, 2 power rounds): max rel. S error %.2e, max sin angle %.2e; "
           "without power/oversampling %.2e, %.2e\n", err_s[0], err_u[0], err_s[1], err_u[1]);
    ck_assert_msg(err_s[0] < 1e-9 && err_u[0] < 1e-7, "S error %g, angle %g", err_s[0], err_u[0]);
    ck_assert(err_s[1] > 10 * err_s[0] && err_u[1] > 10 * err_u[0]);
    /* exact S of the construction too */
    for (int j = 0; j < R; j++) ck_assert(fabs(se[j] - 10.0 * pow(0.7, j)) < 1e-12 * 10.0);
    ck_assert_int_eq(kvs_svd_top_f64(a, M, N, 0, 10, 2, 0, us, sr), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_svd_top_f64(a, M, N, N + 1, 10, 2, 0, us, sr), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_svd_top_f64(a, M, N, R, -1, 2, 0, us, sr), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_svd_top_f64(NULL, M, N, R, 10, 2, 0, us, sr), KVS_ERR_INVALID_ARGUMENT);
    a[5] = NAN;
    ck_assert_int_eq(kvs_svd_top_f64(a, M, N, R, 10, 2, 0, us, sr), KVS_ERR_STATE);
    free(U), free(V), free(a), free(ex), free(se), free(us);
}
END_TEST


/* The budget profile: defaults over 5 layers by hand (t = l / 5, mu 0.75; left width from start
 * 0.12: s_L^2 = 0.5625 / (2 ln(1 / 0.12)); right from end 0.52: s_R^2 = 0.0625 / (2 ln(1 / 0.52))). */
START_TEST(test_ratios) {
    kvs_spa_params p = kvs_spa_params_default();
    ck_assert(p.rank == 0 && p.key == 0 && p.budget == 0.25f && p.uniform == 0 && p.min_ratio == 0.0625f &&
              p.peak_pos == 0.75f && p.start == 0.12f && p.end == 0.52f && p.refresh == 50 && p.refresh_gen == 7);
    double r[5], sl2 = 0.5625 / (2.0 * log(1.0 / 0.12)), sr2 = 0.0625 / (2.0 * log(1.0 / 0.52));
    ck_assert_int_eq(kvs_spa_layer_ratios(&p, 5, r), KVS_OK);
    const double want[5] = {1.0, 0.25 * exp(-0.3025 / (2 * sl2)), 0.25 * exp(-0.1225 / (2 * sl2)),
                            0.25 * exp(-0.0225 / (2 * sl2)), 0.25 * exp(-0.0025 / (2 * sr2))};
    const double approx[5] = {1.0, 0.0799, 0.1575, 0.2297, 0.2435};
    for (int l = 0; l < 5; l++) {
        ck_assert_msg(fabs(r[l] - want[l]) < 1e-6, "layer %d: %.9f, want %.9f", l, r[l], want[l]);
        ck_assert(fabs(r[l] - approx[l]) < 1e-4);
    }
    /* the floor: with 32 layers the left tail (0.03 at t = 0) is lifted to min_ratio */
    double r32[32];
    ck_assert_int_eq(kvs_spa_layer_ratios(&p, 32, r32), KVS_OK);
    ck_assert(r32[1] == (double)p.min_ratio && r32[24] == (double)p.budget);
    for (int l = 1; l < 32; l++) ck_assert(r32[l] >= p.min_ratio - 1e-12 || l > 24);
    p.uniform = 1;
    p.budget = 1.0f;
    ck_assert_int_eq(kvs_spa_layer_ratios(&p, 5, r), KVS_OK);
    for (int l = 0; l < 5; l++) ck_assert(r[l] == 1.0);
    ck_assert_int_eq(kvs_spa_layer_ratios(NULL, 5, r), KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* The schedule's decisions on a constructed state, driven without a model: 12 tokens, prompt 4,
 * block [4, 8) with 6, 7 masked (and 8..11), 3 layers, proxies of rank 2 at angle 0.1 i; uniform
 * budget 0.25: 8 generation rows -> 2 per layer. */
START_TEST(test_select_constructed) {
    kvs_spa_params p = kvs_spa_params_default();
    p.uniform = 1;
    p.refresh = 100;
    p.refresh_gen = 3;
    kvs_dlm_schedule *sc = NULL;
    ck_assert_int_eq(kvs_dlm_schedule_spa(&sc, &p), KVS_OK);
    ck_assert_str_eq(kvs_dlm_schedule_name(sc), "spa");
    ck_assert(kvs_dlm_schedule_cache_flags(sc) == (KVS_CACHE_KEEP_DELTA | KVS_CACHE_KEEP_X));
    enum { N = 12, PR = 4, L = 3, R = 2 };
    int32_t tok[N];
    uint8_t masked[N];
    for (int i = 0; i < N; i++) {
        masked[i] = i >= 6;
        tok[i] = masked[i] ? 0 : 10 + i;
    }
    kvs_dlm_view v = {.tokens = tok, .n_tokens = N, .prompt_len = PR, .mask_id = 0, .masked = masked, .block_start = 4,
                      .block_end = 8, .n_layers = L, .n_heads = 8, .n_kv_heads = 4};
    float P0[N][R], P1[N][R], P2[N][R];
    for (int i = 0; i < N; i++) {
        P0[i][0] = (float)cos(0.1 * i);
        P0[i][1] = (float)sin(0.1 * i);
    }
    memcpy(P1, P0, sizeof P0);
    const double rot[N] = {[5] = 60.0, [9] = 90.0, [10] = 30.0}; /* degrees: cos 0.5, 0, 0.866 */
    for (int i = 0; i < N; i++) {
        double a = 0.1 * i + rot[i] * M_PI / 180.0;
        P1[i][0] = (float)cos(a);
        P1[i][1] = (float)sin(a);
    }
    P1[11][0] *= 2.0f; /* a longer vector in the same direction: cosine 1, not selected */
    P1[11][1] *= 2.0f;
    /* step 2 against step 1 (the reference compares with the previous step's proxies of every
     * row): 4 turned 45 degrees (cos 0.707), 8 turned 20 (0.940); 10 unchanged since step 1 (it
     * would be 0.866 against the proxy of its last computation, step 0) */
    memcpy(P2, P1, sizeof P1);
    P2[4][0] = (float)cos(0.4 + M_PI / 4);
    P2[4][1] = (float)sin(0.4 + M_PI / 4);
    P2[8][0] = (float)cos(0.8 + 20.0 * M_PI / 180.0);
    P2[8][1] = (float)sin(0.8 + 20.0 * M_PI / 180.0);
    kvs_dlm_step st;
    const int32_t *rows;
    int64_t nr;
    /* step 0: a full step, every row at every layer, each select returns its candidates */
    v.step = 0;
    ck_assert_int_eq(sc->ops->plan(sc->self, &v, &st), KVS_OK);
    ck_assert(st.plan.layers && st.plan.layers[0].select == NULL && st.plan.layers[0].n_rows == N &&
              !st.plan.layers[0].spa_delta);
    ck_assert(st.plan.n_logit_rows == 2 && st.plan.logit_rows[0] == 6 && st.plan.logit_rows[1] == 7);
    for (int l = 1; l < L; l++) {
        const kvs_layer_plan *lp = &st.plan.layers[l];
        ck_assert(lp->select && lp->spa_delta && lp->proxy_rank == -1 && lp->proxy_key == 0 && lp->n_rows == N);
        ck_assert_int_eq(lp->select(lp->select_user, l, lp->rows, lp->n_rows, &P0[0][0], R, &rows, &nr), KVS_OK);
        ck_assert_int_eq(nr, N);
    }
    /* step 1: layer 0 every row (the prompt's too); layers 1, 2 the 8 generation rows as candidates
     * and the 2 most turned selected (9: cos 0, 5: cos 0.5), nothing forced at the last layer (every
     * row's state is propagated) */
    v.step = 1;
    ck_assert_int_eq(sc->ops->plan(sc->self, &v, &st), KVS_OK);
    ck_assert(st.plan.layers[0].n_rows == N && st.plan.layers[0].rows[0] == 0 && st.plan.layers[1].rows[0] == 4);
    for (int l = 1; l < L; l++) {
        const kvs_layer_plan *lp = &st.plan.layers[l];
        ck_assert(lp->n_rows == 8);
        ck_assert_int_eq(lp->select(lp->select_user, l, lp->rows, lp->n_rows, &P1[PR][0], R, &rows, &nr), KVS_OK);
        ck_assert_int_eq(nr, 2);
        ck_assert_msg(rows[0] == 5 && rows[1] == 9, "step 1 layer %d: %d %d", l, rows[0], rows[1]);
    }
    v.step = 2;
    ck_assert_int_eq(sc->ops->plan(sc->self, &v, &st), KVS_OK);
    for (int l = 1; l < L; l++) {
        const kvs_layer_plan *lp = &st.plan.layers[l];
        ck_assert_int_eq(lp->select(lp->select_user, l, lp->rows, lp->n_rows, &P2[PR][0], R, &rows, &nr), KVS_OK);
        ck_assert_int_eq(nr, 2);
        ck_assert_msg(rows[0] == 4 && rows[1] == 8, "step 2 layer %d: %d %d", l, rows[0], rows[1]);
    }
    /* step 3 = refresh_gen: the 8 generation rows at every layer, all returned */
    v.step = 3;
    ck_assert_int_eq(sc->ops->plan(sc->self, &v, &st), KVS_OK);
    for (int l = 1; l < L; l++) {
        const kvs_layer_plan *lp = &st.plan.layers[l];
        ck_assert_int_eq(lp->select(lp->select_user, l, lp->rows, lp->n_rows, &P2[PR][0], R, &rows, &nr), KVS_OK);
        ck_assert(nr == 8 && rows[0] == 4 && rows[7] == 11);
    }
    kvs_dlm_schedule_stats ss;
    ck_assert_int_eq(kvs_dlm_schedule_get_stats(sc, &ss), KVS_OK);
    ck_assert(ss.steps == 4 && ss.full_steps == 1 && ss.n_layers == L);
    ck_assert(ss.rows[0] == 12 * 4 && ss.rows[1] == 12 + 2 + 2 + 8 && ss.rows[2] == 12 + 2 + 2 + 8);
    kvs_dlm_schedule_destroy(&sc);
    /* a budget below one row per layer selects none (torch.topk with k = 0): 8 rows * 0.1 */
    p.budget = 0.1f;
    p.min_ratio = 0.05f;
    ck_assert_int_eq(kvs_dlm_schedule_spa(&sc, &p), KVS_OK);
    for (int step = 0; step < 2; step++) {
        v.step = step;
        ck_assert_int_eq(sc->ops->plan(sc->self, &v, &st), KVS_OK);
        const kvs_layer_plan *lp = &st.plan.layers[1];
        ck_assert_int_eq(lp->select(lp->select_user, 1, lp->rows, lp->n_rows, step ? &P1[PR][0] : &P0[0][0], R, &rows, &nr),
                         KVS_OK);
        ck_assert_int_eq(nr, step ? 0 : N);
    }
    kvs_dlm_schedule_destroy(&sc);
}
END_TEST

START_TEST(test_param_refusals) {
    kvs_dlm_schedule *sc = NULL;
    struct {
        const char *what, *msg;
        kvs_spa_params p;
    } bad[10];
    int nb = 0;
    kvs_spa_params d = kvs_spa_params_default();
#define BAD(field, val, m)                                                                                             \
    bad[nb].p = d;                                                                                                     \
    bad[nb].p.field = val;                                                                                             \
    bad[nb].what = #field "=" #val;                                                                                    \
    bad[nb++].msg = m
    BAD(rank, -1, "rank");
    BAD(key, 2, "key");
    BAD(budget, 0.0f, "budget");
    BAD(budget, 1.5f, "budget");
    BAD(uniform, 2, "uniform");
    BAD(min_ratio, 0.5f, "min_ratio");
    BAD(peak_pos, 1.0f, "peak_pos");
    BAD(start, 1.0f, "start");
    BAD(refresh, 0, "refresh");
    BAD(refresh_gen, 0, "refresh_gen");
#undef BAD
    for (int i = 0; i < nb; i++) {
        ck_assert_msg(kvs_dlm_schedule_spa(&sc, &bad[i].p) == KVS_ERR_INVALID_ARGUMENT && sc == NULL, "%s accepted", bad[i].what);
        ck_assert_msg(strstr(kvs_last_error(), bad[i].msg) != NULL, "%s: message '%s'", bad[i].what, kvs_last_error());
    }
    ck_assert_int_eq(kvs_dlm_schedule_spa(NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_dlm_schedule_from_name(&sc, "spa", 4, NULL), KVS_OK);
    kvs_dlm_schedule_destroy(&sc);
}
END_TEST

/* ---- through a model on the device ------------------------------------------------------------ */

typedef struct env {
    kvs_device *dev;
    kvs_model *m;
} env;

static void env_open(env *e) {
    char path[4096];
    ck_assert(kvs_device_open(&e->dev, &g_params) == KVS_OK);
    ck_assert(kvs_model_locate("stories260K-llada-f32.gguf", path, sizeof path) == KVS_OK);
    ck_assert_msg(kvs_model_load(&e->m, e->dev, path, NULL) == KVS_OK, "%s", kvs_last_error());
}

static void env_close(env *e) {
    kvs_model_destroy(&e->m);
    kvs_device_destroy(&e->dev);
}

/* The proxy of every layer: singular values = sqrt of the reference eigenvalues of Wv Wv^T, rows
 * w_j eigenvectors of Wv^T Wv with eigenvalue S_j^2 (sign-free), for value and key. */
START_TEST(test_proxy_model) {
    env e = {0};
    env_open(&e);
    const kvs_model_hparams *hp = kvs_model_get_hparams(e.m);
    int dim = hp->dim, kd = hp->n_kv_heads * hp->head_dim, r = kvs_model_spa_rank_auto(e.m);
    ck_assert_int_eq(r, 8); /* 32 / 32 = 1, raised to 8 */
    float *W = malloc(sizeof(float) * (size_t)(kd * dim)), *Pw = malloc(sizeof(float) * (size_t)(r * dim));
    double *B = malloc(sizeof(double) * (size_t)(kd * kd)), *w = malloc(sizeof(double) * (size_t)kd);
    double *Q = malloc(sizeof(double) * (size_t)(kd * kd)), sv[32];
    for (int key = 0; key < 2; key++)
        for (int l = 0; l < hp->n_layers; l++) {
            ck_assert_int_eq(kvs_model_attn_weight_f32(e.m, l, key ? 'k' : 'v', W), KVS_OK);
            ck_assert_msg(kvs_model_spa_proxy(e.m, l, r, key, Pw, sv) == KVS_OK, "%s", kvs_last_error());
            for (int i = 0; i < kd; i++) /* W W^T [kd][kd] */
                for (int j = 0; j < kd; j++) {
                    double acc = 0;
                    for (int k = 0; k < dim; k++) acc += (double)W[i * dim + k] * W[j * dim + k];
                    B[i * kd + j] = acc;
                }
            ref_eig_sym(B, kd, w, Q);
            for (int j = 0; j < r; j++) {
                ck_assert_msg(fabs(sv[j] - sqrt(w[j])) < 1e-9 * sv[0], "layer %d %s S_%d = %.12g, reference %.12g", l,
                              key ? "key" : "value", j, sv[j], sqrt(w[j]));
                /* (W^T W) w_j = S_j^2 w_j, in float64 from the f32 proxy row */
                double err = 0, nrm = 0;
                for (int i = 0; i < dim; i++) {
                    double acc = 0;
                    for (int o = 0; o < kd; o++) {
                        double wo = 0;
                        for (int k = 0; k < dim; k++) wo += (double)W[o * dim + k] * Pw[j * dim + k];
                        acc += (double)W[o * dim + i] * wo;
                    }
                    double d = acc - sv[j] * sv[j] * Pw[j * dim + i];
                    err += d * d;
                    nrm += (double)Pw[j * dim + i] * Pw[j * dim + i];
                }
                ck_assert_msg(fabs(sqrt(nrm) - sv[j]) < 1e-5 * sv[0], "layer %d row %d norm %g, S %g", l, j, sqrt(nrm), sv[j]);
                ck_assert_msg(sqrt(err) < 1e-5 * sv[0] * sv[0] * sv[0], "layer %d %s proxy row %d: residual %g", l,
                              key ? "key" : "value", j, sqrt(err));
            }
        }
    /* refusals: rank 0, rank above min(dim, kv dim) = 32, layer, key */
    ck_assert_int_eq(kvs_model_spa_proxy(e.m, 0, 0, 0, NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_model_spa_proxy(e.m, 0, kd + 1, 0, NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "proxy rank 33") != NULL, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_model_spa_proxy(e.m, hp->n_layers, r, 0, NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_model_spa_proxy(e.m, 0, r, 2, NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_model_spa_proxy(e.m, 0, kd, 0, NULL, sv), KVS_OK); /* full rank is fine */
    free(W);
    free(Pw);
    free(B);
    free(w);
    free(Q);
    env_close(&e);
}
END_TEST

/* select callbacks for the forward tests */
typedef struct rec {
    float P[64 * 32];
    int64_t n;
    int rank, calls;
    const int32_t *sub;
    int64_t n_sub;
    int bad;
} rec;

static kvs_status rec_select(void *user, int layer, const int32_t *cand, int64_t nc, const float *proxy, int rank,
                             const int32_t **rows, int64_t *n_rows) {
    rec *r = user;
    (void)layer;
    r->calls++;
    r->n = nc;
    r->rank = rank;
    memcpy(r->P, proxy, sizeof(float) * (size_t)(nc * rank));
    static const int32_t dec[2] = {3, 1};
    if (r->bad) {
        *rows = dec;
        *n_rows = 2;
    } else if (r->sub) {
        *rows = r->sub;
        *n_rows = r->n_sub;
    } else {
        *rows = cand;
        *n_rows = nc;
    }
    return KVS_OK;
}

/* The forward's proxy scores equal xn Wp^T in float64 (xn from want_x of the same rows); selecting
 * every candidate gives the plain forward's logits bit for bit; selecting a subset gives the logits
 * of the plan that names that subset as the layer's rows; refusals. */
START_TEST(test_select_forward) {
    env e = {0};
    env_open(&e);
    const kvs_model_hparams *hp = kvs_model_get_hparams(e.m);
    const int dim = hp->dim, V = hp->vocab, L = hp->n_layers;
    enum { T = 13 };
    int32_t toks[T] = {1, 45, 67, 89, 101, 0, 0, 0, 0, 0, 0, 0, 0}, toks2[T], lr[3] = {5, 6, 12};
    memcpy(toks2, toks, sizeof toks);
    toks2[5] = 77;
    kvs_cache_params cp = kvs_model_cache_params(e.m);
    cp.capacity = 16;
    cp.flags = KVS_CACHE_KEEP_X;
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, e.dev, &cp) == KVS_OK);
    kvs_step_plan plan = {.tokens = toks, .n_tokens = T, .logit_rows = lr, .n_logit_rows = 3};
    kvs_step_result res;
    ck_assert_msg(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
    float *want = malloc(sizeof(float) * (size_t)(3 * V)), *got = malloc(sizeof(float) * (size_t)(3 * V));
    memcpy(want, res.logits, sizeof(float) * (size_t)(3 * V));
    kvs_layer_plan lp[16];
    ck_assert_int_le(L, 16);
    rec rc = {0};
    float Wp[8 * 64];
    ck_assert_int_le(dim, 64);
    for (int rank = 3; rank <= 8; rank += 5) { /* an explicit odd rank and the automatic one (8) */
        memset(lp, 0, sizeof lp);
        for (int l = 1; l < L; l++) lp[l] = (kvs_layer_plan){.select = rec_select, .select_user = &rc, .proxy_rank = rank == 8 ? -1 : rank};
        lp[2].want_x = 1;
        plan.layers = lp;
        memset(&rc, 0, sizeof rc);
        ck_assert_msg(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(rc.calls, L - 1);
        for (int i = 0; i < 3 * V; i++)
            ck_assert_msg(res.logits[i] == want[i], "rank %d: logit %d %g vs %g", rank, i, res.logits[i], want[i]);
        /* the last call was layer L-1; redo layer 2 alone to compare its scores with xn */
        memset(lp, 0, sizeof lp);
        lp[2] = (kvs_layer_plan){.select = rec_select, .select_user = &rc, .proxy_rank = rank == 8 ? -1 : rank, .want_x = 1};
        memset(&rc, 0, sizeof rc);
        ck_assert_msg(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
        ck_assert(rc.calls == 1 && rc.n == T && rc.rank == rank && res.layers[2].x && res.layers[2].n_x_rows == T);
        ck_assert_int_eq(kvs_model_spa_proxy(e.m, 2, rank, 0, Wp, NULL), KVS_OK);
        for (int i = 0; i < T; i++)
            for (int j = 0; j < rank; j++) {
                double ref = 0, mag = 0;
                for (int k = 0; k < dim; k++) {
                    ref += (double)res.layers[2].x[i * dim + k] * Wp[j * dim + k];
                    mag += fabs((double)res.layers[2].x[i * dim + k] * Wp[j * dim + k]);
                }
                ck_assert_msg(fabs(rc.P[i * rank + j] - ref) <= 1e-5 * mag + 1e-6, "rank %d row %d col %d: %g vs %g", rank, i,
                              j, rc.P[i * rank + j], ref);
            }
    }
    /* a subset at layer 2 (after a full step on each cache, one token changed) = the same rows named
     * by the plan */
    static const int32_t sub[6] = {0, 2, 5, 6, 9, 12};
    for (int way = 0; way < 2; way++) {
        kvs_cache_reset(c);
        plan.layers = NULL;
        plan.tokens = toks;
        ck_assert(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK);
        memset(lp, 0, sizeof lp);
        if (way == 0) {
            lp[2] = (kvs_layer_plan){.rows = sub, .n_rows = 6};
        } else {
            memset(&rc, 0, sizeof rc);
            rc.sub = sub;
            rc.n_sub = 6;
            lp[2] = (kvs_layer_plan){.select = rec_select, .select_user = &rc, .proxy_rank = 5};
        }
        plan.layers = lp;
        plan.tokens = toks2;
        ck_assert_msg(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(res.rows_computed, 2 * T + 6 * (L - 2));
        if (way == 0) memcpy(got, res.logits, sizeof(float) * (size_t)(3 * V));
        else
            for (int i = 0; i < 3 * V; i++) ck_assert_msg(res.logits[i] == got[i], "subset: logit %d %g vs %g", i, res.logits[i], got[i]);
    }
    int differ = 0;
    for (int i = 0; i < 3 * V; i++) differ += got[i] != want[i];
    ck_assert_int_gt(differ, 0);
    /* refusals: rows not increasing, rank above 32, no KEEP_X */
    plan.tokens = toks;
    memset(&rc, 0, sizeof rc);
    rc.bad = 1;
    lp[2] = (kvs_layer_plan){.select = rec_select, .select_user = &rc, .proxy_rank = 5};
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &res), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "strictly increasing") != NULL, "%s", kvs_last_error());
    rc.bad = 0;
    lp[2].proxy_rank = 33;
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &res), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "proxy rank 33") != NULL, "%s", kvs_last_error());
    kvs_cache_destroy(&c);
    cp.flags = 0;
    ck_assert(kvs_cache_create(&c, e.dev, &cp) == KVS_OK);
    lp[2].proxy_rank = 5;
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &res), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "KEEP_X") != NULL, "%s", kvs_last_error());
    kvs_cache_destroy(&c);
    free(want);
    free(got);
    env_close(&e);
}
END_TEST

/* The residual mode (kvs_layer_plan.spa_delta) through the model: (a) every layer >= 1 in the mode,
 * selecting every row (and with no select), gives the plain forward's logits bit for bit and
 * stores delta = layer output - layer input; (b) after that step, one token changed and layer L-2
 * selecting a subset: every row's K/V there equal the plain forward's of the new tokens (all rows
 * get fresh K/V), the selected rows' outputs equal the plain forward's (to rounding), and a skipped row's output
 * is its fresh input + the stored delta (float64 reference), the store keeping its old delta;
 * refusals. Layer inputs/outputs are read from a KVS_CACHE_KEEP_X store. */
START_TEST(test_delta_forward) {
    env e = {0};
    env_open(&e);
    const kvs_model_hparams *hp = kvs_model_get_hparams(e.m);
    const int dim = hp->dim, V = hp->vocab, L = hp->n_layers, kd = hp->n_kv_heads * hp->head_dim;
    enum { T = 13, CAP = 16 };
    ck_assert_int_ge(L, 3);
    int32_t toks[T] = {1, 45, 67, 89, 101, 0, 0, 0, 0, 0, 0, 0, 0}, toks2[T], lr[3] = {5, 6, 12};
    memcpy(toks2, toks, sizeof toks);
    toks2[5] = 77;
    kvs_cache_params cp = kvs_model_cache_params(e.m);
    cp.capacity = CAP;
    cp.flags = KVS_CACHE_KEEP_X | KVS_CACHE_KEEP_DELTA;
    kvs_kv_cache *c = NULL, *c2 = NULL;
    ck_assert(kvs_cache_create(&c, e.dev, &cp) == KVS_OK);
    ck_assert(kvs_cache_create(&c2, e.dev, &cp) == KVS_OK);
    size_t xs = (size_t)CAP * dim, ks = (size_t)hp->n_kv_heads * CAP * hp->head_dim;
    float *want = malloc(sizeof(float) * (size_t)(3 * V)), *xin = malloc(sizeof(float) * xs), *xout = malloc(sizeof(float) * xs);
    float *d0 = malloc(sizeof(float) * xs), *d1 = malloc(sizeof(float) * xs), *pout = malloc(sizeof(float) * xs);
    float *k1 = malloc(sizeof(float) * ks), *k2 = malloc(sizeof(float) * ks);
    kvs_step_plan plan = {.tokens = toks, .n_tokens = T, .logit_rows = lr, .n_logit_rows = 3};
    kvs_step_result res;
    ck_assert_msg(kvs_model_forward(e.m, c2, &plan, &res) == KVS_OK, "%s", kvs_last_error());
    memcpy(want, res.logits, sizeof(float) * (size_t)(3 * V));
    kvs_layer_plan lp[16];
    ck_assert_int_le(L, 16);
    rec rc = {0};
    for (int way = 0; way < 2; way++) { /* (a) with select returning all, and without select */
        memset(lp, 0, sizeof lp);
        for (int l = 1; l < L; l++)
            lp[l] = (kvs_layer_plan){.spa_delta = 1, .select = way ? NULL : rec_select, .select_user = &rc, .proxy_rank = 3};
        plan.layers = lp;
        kvs_cache_reset(c);
        ck_assert_msg(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(res.rows_computed, (int64_t)T * L);
        for (int i = 0; i < 3 * V; i++)
            ck_assert_msg(res.logits[i] == want[i], "select all [%s] way %d: logit %d %.9g vs %.9g",
                          kvs_backend_name(g_params.backend), way, i, res.logits[i], want[i]);
    }
    const int lt = L - 2; /* the layer tested */
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_x(c, lt), xin, 0, xs * 4), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_x(c, lt + 1), xout, 0, xs * 4), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_layer_delta(c, lt), d0, 0, xs * 4), KVS_OK);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < dim; j++) {
            double dd = (double)xout[t * dim + j] - xin[t * dim + j];
            ck_assert_msg(fabs(d0[t * dim + j] - dd) <= 1e-6 * (fabs(xout[t * dim + j]) + fabs(xin[t * dim + j])) + 1e-7,
                          "stored delta row %d col %d: %g, out - in %g", t, j, d0[t * dim + j], dd);
        }
    /* (b) the plain forward of toks2 on c2, then toks2 on c with layer lt selecting sub */
    static const int32_t sub[5] = {1, 5, 6, 9, 12};
    plan.layers = NULL;
    plan.tokens = toks2;
    kvs_cache_reset(c2);
    ck_assert_msg(kvs_model_forward(e.m, c2, &plan, &res) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_x(c2, lt + 1), pout, 0, xs * 4), KVS_OK);
    ck_assert_int_eq(kvs_cache_read_f32(c2, lt, 0, k2), KVS_OK);
    memset(lp, 0, sizeof lp);
    memset(&rc, 0, sizeof rc);
    rc.sub = sub;
    rc.n_sub = 5;
    lp[lt] = (kvs_layer_plan){.spa_delta = 1, .select = rec_select, .select_user = &rc, .proxy_rank = 3};
    plan.layers = lp;
    ck_assert_msg(kvs_model_forward(e.m, c, &plan, &res) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(res.rows_computed, (int64_t)T * (L - 1) + 5);
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_x(c, lt), xin, 0, xs * 4), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_x(c, lt + 1), xout, 0, xs * 4), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(kvs_cache_layer_delta(c, lt), d1, 0, xs * 4), KVS_OK);
    ck_assert_int_eq(kvs_cache_read_f32(c, lt, 0, k1), KVS_OK);
    for (size_t i = 0; i < (size_t)hp->n_kv_heads * CAP * hp->head_dim; i++)
        if ((int64_t)(i / hp->head_dim % CAP) < T) ck_assert_msg(k1[i] == k2[i], "K at %zu: %g vs %g", i, k1[i], k2[i]);
    int changed = 0;
    for (int t = 0, si = 0; t < T; t++) {
        int is_sel = si < 5 && sub[si] == t;
        si += is_sel;
        for (int j = 0; j < dim; j++) {
            size_t at = (size_t)t * dim + j;
            if (is_sel) {
                /* 5 rows through the products instead of 13: equal to rounding */
                ck_assert_msg(fabs(xout[at] - pout[at]) <= 2e-5 * fabs(pout[at]) + 2e-6, "selected row %d col %d: %.9g, plain %.9g",
                              t, j, xout[at], pout[at]);
            } else {
                double ref = (double)xin[at] + d0[at];
                ck_assert_msg(fabs(xout[at] - ref) <= 1e-6 * fabs(ref) + 1e-7, "skipped row %d col %d: %.9g, in + delta %.9g", t,
                              j, xout[at], ref);
                ck_assert(d1[at] == d0[at]);
                changed += fabs(xout[at] - pout[at]) > 1e-6;
            }
        }
    }
    ck_assert_int_gt(changed, 0); /* the stale deltas do differ from the fresh computation */
    (void)kd;
    /* refusals: a row outside the candidates, no KVS_CACHE_KEEP_DELTA */
    static const int32_t bad[2] = {2, 20};
    rc.sub = bad;
    rc.n_sub = 2;
    ck_assert_int_eq(kvs_model_forward(e.m, c, &plan, &res), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "candidate rows") != NULL, "%s", kvs_last_error());
    kvs_cache_destroy(&c2);
    cp.flags = KVS_CACHE_KEEP_X;
    ck_assert(kvs_cache_create(&c2, e.dev, &cp) == KVS_OK);
    rc.sub = sub;
    rc.n_sub = 5;
    ck_assert_int_eq(kvs_model_forward(e.m, c2, &plan, &res), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "KEEP_DELTA") != NULL, "%s", kvs_last_error());
    kvs_cache_destroy(&c);
    kvs_cache_destroy(&c2);
    free(want), free(xin), free(xout), free(d0), free(d1), free(pout), free(k1), free(k2);
    env_close(&e);
}
END_TEST

static kvs_status decode(env *e, const int32_t *prompt, int64_t np, kvs_dlm_params p, kvs_dlm_schedule *sc, int32_t *out,
                         kvs_gen_stats *st) {
    kvs_cache_params cp = kvs_model_cache_params(e->m);
    cp.capacity = np + p.gen_len;
    cp.flags = kvs_dlm_schedule_cache_flags(sc);
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, e->dev, &cp) == KVS_OK, "%s", kvs_last_error());
    p.schedule = sc;
    kvs_status s = kvs_generate_dlm(e->m, c, prompt, np, &p, NULL, NULL, out, st);
    kvs_cache_destroy(&c);
    return s;
}

/* The anchor: uniform with budget 1 runs every row at every step through the select path and
 * reproduces the no-cache decode token for token (one token per step and threshold decoding); the
 * defaults decode every position with fewer rows; a rank the model cannot give is refused at the
 * first step. */
START_TEST(test_anchor_decode) {
    env e = {0};
    env_open(&e);
    const int32_t prompts[2][6] = {{1, 403, 261, 378, 0, 0}, {1, 72, 300, 282, 410, 265}};
    const int64_t np[2] = {4, 6};
    int32_t base[128], got[128];
    kvs_gen_stats st0, st;
    for (int ci = 0; ci < 2; ci++) {
        kvs_dlm_params p = kvs_dlm_params_default();
        p.gen_len = 32; /* short: lavapipe runs a 64-step decode in ~7 s of CPU */
        p.block_len = 16;
        p.threshold = ci ? 0.9f : 0.0f;
        ck_assert_msg(decode(&e, prompts[ci], np[ci], p, NULL, base, &st0) == KVS_OK, "%s", kvs_last_error());
        kvs_spa_params sp = kvs_spa_params_default();
        sp.uniform = 1;
        sp.budget = 1.0f;
        kvs_dlm_schedule *sc = NULL;
        ck_assert_int_eq(kvs_dlm_schedule_spa(&sc, &sp), KVS_OK);
        ck_assert_msg(decode(&e, prompts[ci], np[ci], p, sc, got, &st) == KVS_OK, "%s", kvs_last_error());
        for (int64_t i = 0; i < p.gen_len; i++)
            ck_assert_msg(got[i] == base[i], "anchor case %d [%s]: token %lld is %d, want %d", ci,
                          kvs_backend_name(g_params.backend), (long long)i, got[i], base[i]);
        kvs_dlm_schedule_stats ss;
        ck_assert_int_eq(kvs_dlm_schedule_get_stats(sc, &ss), KVS_OK);
        ck_assert(st.compute_fraction == 1.0 && ss.full_steps == ss.steps && ss.steps == st0.steps);
        kvs_dlm_schedule_destroy(&sc);
        if (ci == 1) continue;
        /* defaults */
        ck_assert_int_eq(kvs_dlm_schedule_spa(&sc, NULL), KVS_OK);
        ck_assert_msg(decode(&e, prompts[ci], np[ci], p, sc, got, &st) == KVS_OK, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_dlm_schedule_get_stats(sc, &ss), KVS_OK);
        int agree = 0;
        for (int64_t i = 0; i < p.gen_len; i++) agree += got[i] == base[i];
        printf("spa defaults [%s] case %d: compute %.3f, %lld full of %lld steps, agreement %d/%lld\n",
               kvs_backend_name(g_params.backend), ci, st.compute_fraction, (long long)ss.full_steps, (long long)ss.steps,
               agree, (long long)p.gen_len);
        ck_assert(st.compute_fraction < 0.7 && st.tokens == p.gen_len && ss.full_steps >= 1 && ss.full_steps < ss.steps);
        kvs_dlm_schedule_destroy(&sc);
    }
    kvs_spa_params sp = kvs_spa_params_default();
    sp.rank = 1000;
    kvs_dlm_schedule *sc = NULL;
    ck_assert_int_eq(kvs_dlm_schedule_spa(&sc, &sp), KVS_OK);
    kvs_dlm_params p = kvs_dlm_params_default();
    ck_assert_int_eq(decode(&e, prompts[0], np[0], p, sc, got, &st), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "proxy rank 1000") != NULL, "%s", kvs_last_error());
    kvs_dlm_schedule_destroy(&sc);
    env_close(&e);
}
END_TEST

int main(int argc, char **argv) {
    int setup = kvs_test_setup(argc, argv, "test_spa", &g_params, "stories260K-llada-f32.gguf", NULL, 0);
    if (setup >= 0) return setup;
    Suite *s = suite_create("spa");
    TCase *tc = tcase_create("spa");
    tcase_set_timeout(tc, 300);
    /* --only NAME runs one test (names as below) */
    const char *only = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
#define ADD(t)                                                                                                         \
    if (!only || strcmp(only, #t) == 0) tcase_add_test(tc, t)
    if (g_params.backend == KVS_BACKEND_CPU) { /* host logic: once */
        ADD(test_svd_known);
        ADD(test_svd_random);
        ADD(test_svd_randomized);
        ADD(test_ratios);
        ADD(test_select_constructed);
        ADD(test_param_refusals);
    }
    ADD(test_proxy_model);
    ADD(test_select_forward);
    ADD(test_delta_forward);
    ADD(test_anchor_decode);
#undef ADD
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
