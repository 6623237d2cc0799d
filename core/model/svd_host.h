/* Host float64 SVD (one-sided Jacobi) for the SPA-Cache singular proxies (core/model/proxy.c).
 * Ours; no LAPACK. */
#ifndef KVS_SVD_HOST_H
#define KVS_SVD_HOST_H

#include <stdint.h>

#include "kvsieve/status.h"

/* Thin SVD of the m x n matrix whose n COLUMNS are a[j*m .. j*m+m) (column-major, overwritten):
 * A = U S V^T. One-sided Jacobi (Hestenes 1958; the rotation formulas of Demmel & Veselic 1992,
 * sec. 4): pairs of columns are rotated until every pair is orthogonal to 1e-15 relative, then
 * sorted by norm, descending (columns below 1e-15 of A's Frobenius norm count as zero). On return column j of `a` holds U_j * S_j (= A V_j), s[j] = S_j
 * (n values, descending, >= 0; zero columns last) and, when v is not NULL, column j of v
 * (v[j*n .. j*n+n)) holds V_j. Works for any m, n >= 1 (with n > m the trailing S are 0).
 * Cost O(sweeps * n^2 * m), sweeps typically 6-10. Errors: KVS_ERR_INVALID_ARGUMENT (NULL, m or n
 * < 1), KVS_ERR_OUT_OF_MEMORY, KVS_ERR_STATE (no convergence in 60 sweeps, or a NaN/Inf entry). */
kvs_status kvs_svd_jacobi_f64(double *a, int64_t m, int64_t n, double *s, double *v);

#endif
