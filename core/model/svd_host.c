/* One-sided Jacobi SVD in float64 on the host (see svd_host.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/svd_host.h"

static double dot(const double *x, const double *y, int64_t m) {
    double acc = 0.0;
    for (int64_t i = 0; i < m; i++) acc += x[i] * y[i];
    return acc;
}

kvs_status kvs_svd_jacobi_f64(double *a, int64_t m, int64_t n, double *s, double *v) {
    const char *op = "kvs_svd_jacobi_f64";
    if (!a || !s || m < 1 || n < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or an empty matrix (%lld x %lld)", op, (long long)m, (long long)n);
    for (int64_t i = 0; i < m * n; i++)
        if (!isfinite(a[i])) return kvs_error(KVS_ERR_STATE, "%s: entry %lld is not finite", op, (long long)i);
    double *vv = v ? v : malloc((size_t)(n * n) * sizeof *vv);
    double *tmp = malloc((size_t)(m > n ? m : n) * sizeof *tmp);
    if (!vv || !tmp) {
        if (!v) free(vv);
        free(tmp);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    memset(vv, 0, (size_t)(n * n) * sizeof *vv);
    for (int64_t j = 0; j < n; j++) vv[j * n + j] = 1.0;
    const double eps = 1e-15;
    /* columns whose squared norm falls below 1e-30 of A's (rank-deficient A, n > m) count as zero:
     * rounding would otherwise keep rotating them forever */
    double frob2 = 0.0;
    for (int64_t i = 0; i < m * n; i++) frob2 += a[i] * a[i];
    const double tiny = frob2 * 1e-30;
    int converged = 0;
    for (int sweep = 0; sweep < 60 && !converged; sweep++) {
        converged = 1;
        for (int64_t p = 0; p < n - 1; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double *ap = a + p * m, *aq = a + q * m;
                double alpha = dot(ap, ap, m), beta = dot(aq, aq, m), gamma = dot(ap, aq, m);
                if (alpha <= tiny || beta <= tiny || fabs(gamma) <= eps * sqrt(alpha * beta)) continue;
                converged = 0;
                /* the rotation that zeroes the (p, q) entry of A^T A */
                double zeta = (beta - alpha) / (2.0 * gamma);
                double t = (zeta >= 0.0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
                double c = 1.0 / sqrt(1.0 + t * t), sn = c * t;
                for (int64_t i = 0; i < m; i++) {
                    double x = ap[i], y = aq[i];
                    ap[i] = c * x - sn * y;
                    aq[i] = sn * x + c * y;
                }
                double *vp = vv + p * n, *vq = vv + q * n;
                for (int64_t i = 0; i < n; i++) {
                    double x = vp[i], y = vq[i];
                    vp[i] = c * x - sn * y;
                    vq[i] = sn * x + c * y;
                }
            }
    }
    kvs_status st = KVS_OK;
    if (!converged) st = kvs_error(KVS_ERR_STATE, "%s: no convergence in 60 sweeps (%lld x %lld)", op, (long long)m, (long long)n);
    for (int64_t j = 0; j < n; j++) s[j] = sqrt(dot(a + j * m, a + j * m, m));
    /* selection sort by singular value, descending (n is small; columns of a and v move along) */
    for (int64_t j = 0; j < n && st == KVS_OK; j++) {
        int64_t b = j;
        for (int64_t k = j + 1; k < n; k++)
            if (s[k] > s[b]) b = k;
        if (b == j) continue;
        double t = s[j];
        s[j] = s[b];
        s[b] = t;
        memcpy(tmp, a + j * m, (size_t)m * sizeof *tmp);
        memcpy(a + j * m, a + b * m, (size_t)m * sizeof *tmp);
        memcpy(a + b * m, tmp, (size_t)m * sizeof *tmp);
        memcpy(tmp, vv + j * n, (size_t)n * sizeof *tmp);
        memcpy(vv + j * n, vv + b * n, (size_t)n * sizeof *tmp);
        memcpy(vv + b * n, tmp, (size_t)n * sizeof *tmp);
    }
    if (!v) free(vv);
    free(tmp);
    return st;
}

/* ---- randomized top-r SVD (Halko, Martinsson & Tropp 2011) ------------------------------------ */

/* y[m x k] = A x, A m x n (columns a[j*m..]), x n x k, all column-major; A streamed once. */
static void mul_a(const double *a, int64_t m, int64_t n, const double *x, int64_t k, double *y) {
    memset(y, 0, (size_t)(m * k) * sizeof *y);
    for (int64_t j = 0; j < n; j++) {
        const double *aj = a + j * m;
        for (int64_t c = 0; c < k; c++) {
            const double t = x[c * n + j];
            double *yc = y + c * m;
            for (int64_t i = 0; i < m; i++) yc[i] += t * aj[i];
        }
    }
}

/* z[n x k] = A^T y, four columns of A per pass over y. */
static void mul_at(const double *a, int64_t m, int64_t n, const double *y, int64_t k, double *z) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const double *a0 = a + j * m, *a1 = a0 + m, *a2 = a1 + m, *a3 = a2 + m;
        for (int64_t c = 0; c < k; c++) {
            const double *yc = y + c * m;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t i = 0; i < m; i++) {
                s0 += a0[i] * yc[i];
                s1 += a1[i] * yc[i];
                s2 += a2[i] * yc[i];
                s3 += a3[i] * yc[i];
            }
            z[c * n + j] = s0, z[c * n + j + 1] = s1, z[c * n + j + 2] = s2, z[c * n + j + 3] = s3;
        }
    }
    for (; j < n; j++)
        for (int64_t c = 0; c < k; c++) z[c * n + j] = dot(a + j * m, y + c * m, m);
}

/* Orthonormalises the k columns of y (m x k) in place: modified Gram-Schmidt, each column twice
 * ("twice is enough", Giraud et al. 2005); a column that vanishes (rank < k) becomes 0. */
static void orth(double *y, int64_t m, int64_t k) {
    for (int64_t c = 0; c < k; c++) {
        double *yc = y + c * m;
        double n0 = sqrt(dot(yc, yc, m));
        for (int pass = 0; pass < 2; pass++)
            for (int64_t p = 0; p < c; p++) {
                const double *yp = y + p * m;
                double t = dot(yp, yc, m);
                for (int64_t i = 0; i < m; i++) yc[i] -= t * yp[i];
            }
        double nn = sqrt(dot(yc, yc, m));
        if (!(nn > 1e-13 * n0) || nn == 0.0) {
            memset(yc, 0, (size_t)m * sizeof *yc);
            continue;
        }
        for (int64_t i = 0; i < m; i++) yc[i] /= nn;
    }
}

kvs_status kvs_svd_top_f64(const double *a, int64_t m, int64_t n, int64_t r, int64_t oversample, int power, uint64_t seed,
                           double *us, double *s) {
    const char *op = "kvs_svd_top_f64";
    int64_t kmax = m < n ? m : n;
    if (!a || !us || !s || m < 1 || n < 1 || r < 1 || r > kmax || oversample < 0 || power < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument, an empty matrix (%lld x %lld), rank %lld outside [1, %lld], "
                         "oversampling %lld or power %d < 0", op, (long long)m, (long long)n, (long long)r, (long long)kmax,
                         (long long)oversample, power);
    for (int64_t i = 0; i < m * n; i++)
        if (!isfinite(a[i])) return kvs_error(KVS_ERR_STATE, "%s: entry %lld is not finite", op, (long long)i);
    int64_t k = r + oversample > kmax ? kmax : r + oversample;
    double *om = malloc((size_t)(n * k) * sizeof *om), *y = malloc((size_t)(m * k) * sizeof *y);
    double *sk = malloc((size_t)k * sizeof *sk), *vk = malloc((size_t)(k * k) * sizeof *vk);
    if (!om || !y || !sk || !vk) {
        free(om), free(y), free(sk), free(vk);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    /* Omega: standard normal (xorshift64* + Box-Muller), fixed by the seed */
    uint64_t x = seed ? seed : 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < n * k; i += 2) {
        double u[2];
        for (int t = 0; t < 2; t++) {
            x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
            u[t] = ((double)((x * 2685821657736338717ull) >> 11) + 0.5) / 9007199254740992.0;
        }
        double rad = sqrt(-2.0 * log(u[0]));
        om[i] = rad * cos(6.283185307179586 * u[1]);
        if (i + 1 < n * k) om[i + 1] = rad * sin(6.283185307179586 * u[1]);
    }
    /* range finder with power iterations (Halko et al. Algorithm 4.4): Y = A Omega, then
     * Z = A^T Y, Y = A Z, orthonormalised after every product */
    mul_a(a, m, n, om, k, y);
    orth(y, m, k);
    for (int q = 0; q < power; q++) {
        mul_at(a, m, n, y, k, om);
        orth(om, n, k);
        mul_a(a, m, n, om, k, y);
        orth(y, m, k);
    }
    /* B^T = A^T Q (n x k) = V S Ub^T; Jacobi on it gives V_j S_j and Ub (k x k); U_j S_j = Q Ub_j S_j */
    mul_at(a, m, n, y, k, om);
    kvs_status st = kvs_svd_jacobi_f64(om, n, k, sk, vk);
    if (st == KVS_OK) {
        for (int64_t j = 0; j < r; j++) {
            double *out = us + j * m;
            memset(out, 0, (size_t)m * sizeof *out);
            for (int64_t c = 0; c < k; c++) {
                const double t = vk[j * k + c] * sk[j];
                const double *qc = y + c * m;
                for (int64_t i = 0; i < m; i++) out[i] += t * qc[i];
            }
            s[j] = sk[j];
        }
    }
    free(om), free(y), free(sk), free(vk);
    return st;
}
