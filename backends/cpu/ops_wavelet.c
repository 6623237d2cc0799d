/* CPU backend: multi-level DWT / IDWT with periodization (contract: kvs_dwt, kvs_idwt in
 * include/kvsieve/ops.h; Mallat 1989). One row per task, rows spread over OpenMP threads.
 *
 * Analysis of a level, signal c of length L, L' = L + (L odd) (the odd sample repeated), half = L'/2:
 *   a[i] = sum_t lo[t] c[(2i+t) mod L'],  d[i] = sum_t hi[t] c[(2i+t) mod L'],  hi[t] = (-1)^t lo[T-1-t].
 * Computed on the even/odd split e[i] = c[2i], o[i] = c[2i+1] of the periodically extended signal:
 *   a[i] = sum_u lo[2u] e[i+u] + lo[2u+1] o[i+u]   (unit-stride loops that vectorise).
 * Synthesis is the exact transpose (adjoint) of that orthogonal map:
 *   c[2p]   = sum_u lo[2u]   a[(p-u) mod half] + hi[2u]   d[(p-u) mod half]
 *   c[2p+1] = sum_u lo[2u+1] a[(p-u) mod half] + hi[2u+1] d[(p-u) mod half],
 * truncated to L. This equals ops.h's c[m] = sum_i a[i] lo[(m-2i) mod L'] + d[i] hi[(m-2i) mod L']
 * whenever T <= L'; for shorter signals (L' < T) every wrapped tap is summed, which keeps the
 * reconstruction perfect. */
#include <stdlib.h>

#include "cpu_kernels.h"

#define DWT_MAX_TAPS 8

typedef struct dwt_filt {
    int T;
    float lo[DWT_MAX_TAPS], hi[DWT_MAX_TAPS];
} dwt_filt;

static void dwt_filter(kvs_wavelet w, dwt_filt *f) {
    double lo[DWT_MAX_TAPS];
    f->T = kvs_wavelet_filter(w, lo);
    for (int t = 0; t < f->T; t++) {
        f->lo[t] = (float)lo[t];
        f->hi[t] = (float)((t & 1) ? -lo[f->T - 1 - t] : lo[f->T - 1 - t]);
    }
}

/* One analysis level: c[0..L) -> a[0..half), d[0..half). e, o: scratch of half + T/2 floats.
 * a may alias c. */
KVS_CLONES
static void dwt_level(const float *c, int64_t L, float *a, float *d, float *KVS_RESTRICT e, float *KVS_RESTRICT o,
                      const dwt_filt *f) {
    const int64_t Lp = L + (L & 1), half = Lp / 2;
    const int U = f->T / 2;
    const int64_t full = L / 2; /* pairs fully inside c */
    for (int64_t i = 0; i < full; i++) {
        e[i] = c[2 * i];
        o[i] = c[2 * i + 1];
    }
    for (int64_t i = full; i < half + U; i++) {
        int64_t m0 = (2 * i) % Lp, m1 = (2 * i + 1) % Lp;
        e[i] = c[m0 < L ? m0 : L - 1];
        o[i] = c[m1 < L ? m1 : L - 1];
    }
    float lo[DWT_MAX_TAPS], hi[DWT_MAX_TAPS];
    for (int t = 0; t < f->T; t++) {
        lo[t] = f->lo[t];
        hi[t] = f->hi[t];
    }
    if (U == 1) {
        for (int64_t i = 0; i < half; i++) {
            a[i] = lo[0] * e[i] + lo[1] * o[i];
            d[i] = hi[0] * e[i] + hi[1] * o[i];
        }
    } else if (U == 2) {
        for (int64_t i = 0; i < half; i++) {
            a[i] = lo[0] * e[i] + lo[1] * o[i] + lo[2] * e[i + 1] + lo[3] * o[i + 1];
            d[i] = hi[0] * e[i] + hi[1] * o[i] + hi[2] * e[i + 1] + hi[3] * o[i + 1];
        }
    } else {
        for (int64_t i = 0; i < half; i++) {
            a[i] = lo[0] * e[i] + lo[1] * o[i] + lo[2] * e[i + 1] + lo[3] * o[i + 1] + lo[4] * e[i + 2] +
                   lo[5] * o[i + 2] + lo[6] * e[i + 3] + lo[7] * o[i + 3];
            d[i] = hi[0] * e[i] + hi[1] * o[i] + hi[2] * e[i + 1] + hi[3] * o[i + 1] + hi[4] * e[i + 2] +
                   hi[5] * o[i + 2] + hi[6] * e[i + 3] + hi[7] * o[i + 3];
        }
    }
}

/* One synthesis level: a, d [half] -> c[0..L), L' = 2 half. ae, de: scratch of half + T/2 - 1;
 * ev, od: scratch of half. c may not alias a or d. */
KVS_CLONES
static void idwt_level(const float *a, const float *d, int64_t half, int64_t L, float *c, float *KVS_RESTRICT ae,
                       float *KVS_RESTRICT de, float *KVS_RESTRICT ev, float *KVS_RESTRICT od, const dwt_filt *f) {
    const int U = f->T / 2;
    const int64_t pre = U - 1; /* ae[pre + k] = a[k mod half], k >= -pre */
    for (int64_t k = -pre; k < 0; k++) {
        int64_t s = ((k % half) + half) % half;
        ae[pre + k] = a[s];
        de[pre + k] = d[s];
    }
    memcpy(ae + pre, a, (size_t)half * sizeof(float));
    memcpy(de + pre, d, (size_t)half * sizeof(float));
    float lo[DWT_MAX_TAPS], hi[DWT_MAX_TAPS];
    for (int t = 0; t < f->T; t++) {
        lo[t] = f->lo[t];
        hi[t] = f->hi[t];
    }
    const float *A = ae + pre, *D = de + pre;
    if (U == 1) {
        for (int64_t p = 0; p < half; p++) {
            ev[p] = lo[0] * A[p] + hi[0] * D[p];
            od[p] = lo[1] * A[p] + hi[1] * D[p];
        }
    } else if (U == 2) {
        for (int64_t p = 0; p < half; p++) {
            ev[p] = lo[0] * A[p] + hi[0] * D[p] + lo[2] * A[p - 1] + hi[2] * D[p - 1];
            od[p] = lo[1] * A[p] + hi[1] * D[p] + lo[3] * A[p - 1] + hi[3] * D[p - 1];
        }
    } else {
        for (int64_t p = 0; p < half; p++) {
            ev[p] = lo[0] * A[p] + hi[0] * D[p] + lo[2] * A[p - 1] + hi[2] * D[p - 1] + lo[4] * A[p - 2] +
                    hi[4] * D[p - 2] + lo[6] * A[p - 3] + hi[6] * D[p - 3];
            od[p] = lo[1] * A[p] + hi[1] * D[p] + lo[3] * A[p - 1] + hi[3] * D[p - 1] + lo[5] * A[p - 2] +
                    hi[5] * D[p - 2] + lo[7] * A[p - 3] + hi[7] * D[p - 3];
        }
    }
    const int64_t full = L / 2;
    for (int64_t p = 0; p < full; p++) {
        c[2 * p] = ev[p];
        c[2 * p + 1] = od[p];
    }
    if (L & 1) c[L - 1] = ev[full];
}

/* Offsets of the coefficient blocks in an output row: a_J at 0, d_l at doff[l] (l = 1..J). */
static void dwt_offsets(int64_t n, int J, int64_t *len, int64_t *doff) {
    len[0] = n;
    for (int l = 1; l <= J; l++) len[l] = (len[l - 1] + 1) / 2;
    int64_t off = len[J];
    for (int l = J; l >= 1; l--) {
        doff[l] = off;
        off += len[l];
    }
}

kvs_status kvs_cpu_dwt(kvs_device *dev, const kvs_dwt_args *a) {
    dwt_filt f;
    dwt_filter(a->w, &f);
    int64_t len[KVS_DWT_MAX_LEVELS + 1], doff[KVS_DWT_MAX_LEVELS + 1];
    dwt_offsets(a->n, a->levels, len, doff);
    const int64_t n = a->n, nc = a->ncoef;
    int nt = kvs_cpu_nt(dev, (double)a->rows * (double)n * (double)f.T);
    (void)nt; /* unused without OpenMP */
    const size_t per = (size_t)(3 * (n / 2 + 1 + DWT_MAX_TAPS) + 16);
    float *scr = malloc((size_t)nt * per * sizeof(float));
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dwt (cpu): cannot allocate scratch");
    const float *x = kvs_tensor_host_ptr(a->src);
    float *y = kvs_tensor_host_ptr(a->dst);
    KVS_OMP(parallel num_threads(nt))
    {
        float *A = scr + (size_t)kvs_omp_tid() * per;
        float *E = A + (n / 2 + 1 + DWT_MAX_TAPS), *O = E + (n / 2 + 1 + DWT_MAX_TAPS);
        KVS_OMP(for schedule(static))
        for (int64_t r = 0; r < a->rows; r++) {
            const float *cur = x + r * n;
            float *yr = y + r * nc;
            for (int l = 1; l <= a->levels; l++) {
                dwt_level(cur, len[l - 1], A, yr + doff[l], E, O, &f);
                cur = A;
            }
            memcpy(yr, A, (size_t)len[a->levels] * sizeof(float));
        }
    }
    free(scr);
    return KVS_OK;
}

kvs_status kvs_cpu_idwt(kvs_device *dev, const kvs_dwt_args *a) {
    dwt_filt f;
    dwt_filter(a->w, &f);
    int64_t len[KVS_DWT_MAX_LEVELS + 1], doff[KVS_DWT_MAX_LEVELS + 1];
    dwt_offsets(a->n, a->levels, len, doff);
    const int64_t n = a->n, nc = a->ncoef;
    int nt = kvs_cpu_nt(dev, (double)a->rows * (double)n * (double)f.T);
    (void)nt; /* unused without OpenMP */
    const int64_t h = n / 2 + 1 + DWT_MAX_TAPS;
    const size_t per = (size_t)(2 * (n + 2) + 4 * h + 16);
    float *scr = malloc((size_t)nt * per * sizeof(float));
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_idwt (cpu): cannot allocate scratch");
    const float *y = kvs_tensor_host_ptr(a->src);
    float *x = kvs_tensor_host_ptr(a->dst);
    KVS_OMP(parallel num_threads(nt))
    {
        float *B0 = scr + (size_t)kvs_omp_tid() * per, *B1 = B0 + (n + 2);
        float *ae = B1 + (n + 2), *de = ae + h, *ev = de + h, *od = ev + h;
        KVS_OMP(for schedule(static))
        for (int64_t r = 0; r < a->rows; r++) {
            const float *yr = y + r * nc;
            const float *cur = yr; /* a_J */
            float *bufs[2] = {B0, B1};
            for (int l = a->levels; l >= 1; l--) {
                float *dst = l == 1 ? x + r * n : bufs[l & 1];
                idwt_level(cur, yr + doff[l], len[l], len[l - 1], dst, ae, de, ev, od, &f);
                cur = dst;
            }
        }
    }
    free(scr);
    return KVS_OK;
}
