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
