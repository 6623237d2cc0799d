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

/* The top r singular triplets of the m x n matrix A (columns a[j*m .. j*m+m), column-major, not
 * modified) by randomized subspace iteration (Halko, Martinsson & Tropp 2011, "Finding structure
 * with randomness", SIAM Review 53(2): Algorithm 4.4 with Algorithm 5.1): k = min(r + oversample,
 * min(m, n)) Gaussian test vectors (fixed by seed; 0: a built-in seed), Y = A Omega, `power` rounds
 * of Z = A^T Y, Y = A Z, each product re-orthonormalised (modified Gram-Schmidt, twice), then the
 * exact one-sided Jacobi SVD (above) of the k-column B^T = A^T Q. On return column j of us (us[j*m ..
 * j*m+m), j < r) holds U_j S_j and s[j] = S_j, descending: what kvs_svd_jacobi_f64 leaves in its
 * first r columns, to the method's accuracy (relative error of S_j about (S_k / S_j)^(2 power + 1)
 * for a decaying spectrum; tests/test_spa.c test_svd_randomized). Cost (2 power + 2) m n k float64
 * multiply-adds + O((m + n) k^2): a 4096 x 4096 layer at rank 128 in seconds where the full Jacobi
 * takes minutes. Errors: KVS_ERR_INVALID_ARGUMENT (NULL, m or n < 1, r outside [1, min(m, n)],
 * oversample or power < 0), KVS_ERR_OUT_OF_MEMORY, KVS_ERR_STATE (a NaN/Inf entry, no Jacobi
 * convergence). */
kvs_status kvs_svd_top_f64(const double *a, int64_t m, int64_t n, int64_t r, int64_t oversample, int power, uint64_t seed,
                           double *us, double *s);

#endif
