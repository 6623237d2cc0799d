/* CPU backend: multi-level DWT / IDWT with periodization (contract: kvs_dwt, kvs_idwt in
 * include/kvsieve/ops.h; Mallat 1989). One row per task, rows spread over OpenMP threads.
 *
 * Analysis of a level, signal c of length L, L' = L + (L odd) (the odd sample repeated), half = L'/2:
 *   a[i] = sum_t lo[t] c[(2i+t) mod L'],  d[i] = sum_t hi[t] c[(2i+t) mod L'],  hi[t] = (-1)^t lo[T-1-t].
 * computed straight from c (stride-2 loads the compiler turns into vector permutes); only the last
 * outputs, whose taps wrap around, read through the modulo index.
 * Synthesis is the exact transpose (adjoint) of that orthogonal map:
 *   c[2p]   = sum_u lo[2u]   a[(p-u) mod half] + hi[2u]   d[(p-u) mod half]
 *   c[2p+1] = sum_u lo[2u+1] a[(p-u) mod half] + hi[2u+1] d[(p-u) mod half],
 * truncated to L. This equals ops.h's c[m] = sum_i a[i] lo[(m-2i) mod L'] + d[i] hi[(m-2i) mod L']
 * whenever T <= L'; for shorter signals (L' < T) every wrapped tap is summed, which keeps the
 * reconstruction perfect. */
#include <stdlib.h>

#include "cpu_kernels.h"
#include "wavelet.h"

#define DWT_MAX_TAPS KVS_DWT_MAX_TAPS

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

/* One analysis level: c[0..L) -> a[0..half), d[0..half) (no aliasing). The body (outputs whose taps
 * lie inside c) reads c directly with stride-2 loads; the few outputs near the end whose taps wrap
 * around (periodization, odd-length extension) read a small extended copy. */
KVS_CLONES
static void dwt_level(const float *KVS_RESTRICT c, int64_t L, float *KVS_RESTRICT a, float *KVS_RESTRICT d,
                      const dwt_filt *f, int isa) {
    const int64_t Lp = L + (L & 1), half = Lp / 2;
    const int T = f->T;
    float lo[DWT_MAX_TAPS], hi[DWT_MAX_TAPS];
    for (int t = 0; t < T; t++) {
        lo[t] = f->lo[t];
        hi[t] = f->hi[t];
    }
    /* body: 2i + T - 1 <= L - 1 */
    int64_t body = L >= T ? (L - T) / 2 + 1 : 0;
    if (body > half) body = half;
    int64_t i0 = 0; /* outputs [0, i0) done by the AVX2 or NEON body */
    (void)isa;
#if KVS_CPU_HAVE_AVX2
    if (isa == KVS_ISA_AVX2) i0 = kvs_cpu_dwt_body_avx2(c, body, a, d, lo, hi, T);
#endif
#if KVS_CPU_HAVE_NEON
    if (isa == KVS_ISA_NEON) i0 = kvs_cpu_dwt_body_neon(c, body, a, d, lo, hi, T);
#endif
    if (T == 2) {
        for (int64_t i = i0; i < body; i++) {
            float c0 = c[2 * i], c1 = c[2 * i + 1];
            a[i] = lo[0] * c0 + lo[1] * c1;
            d[i] = hi[0] * c0 + hi[1] * c1;
        }
    } else if (T == 4) {
        for (int64_t i = i0; i < body; i++) {
            const float *ci = c + 2 * i;
            a[i] = lo[0] * ci[0] + lo[1] * ci[1] + lo[2] * ci[2] + lo[3] * ci[3];
            d[i] = hi[0] * ci[0] + hi[1] * ci[1] + hi[2] * ci[2] + hi[3] * ci[3];
        }
    } else {
        for (int64_t i = i0; i < body; i++) {
            const float *ci = c + 2 * i;
            a[i] = lo[0] * ci[0] + lo[1] * ci[1] + lo[2] * ci[2] + lo[3] * ci[3] + lo[4] * ci[4] + lo[5] * ci[5] +
                   lo[6] * ci[6] + lo[7] * ci[7];
            d[i] = hi[0] * ci[0] + hi[1] * ci[1] + hi[2] * ci[2] + hi[3] * ci[3] + hi[4] * ci[4] + hi[5] * ci[5] +
                   hi[6] * ci[6] + hi[7] * ci[7];
        }
    }
    /* tail: taps wrap; same summation order as the body */
    for (int64_t i = body; i < half; i++) {
        float sa = 0.0f, sd = 0.0f;
        for (int t = 0; t < T; t++) {
            int64_t m = (2 * i + t) % Lp;
            float v = c[m < L ? m : L - 1];
            if (t == 0) {
                sa = lo[0] * v;
                sd = hi[0] * v;
            } else {
                sa = sa + lo[t] * v;
                sd = sd + hi[t] * v;
            }
        }
        a[i] = sa;
        d[i] = sd;
    }
}

/* One synthesis level: a, d [half] -> c[0..L), L' = 2 half (c does not alias a or d). Body
 * (p >= T/2 - 1) reads a and d directly; the first outputs wrap around. */
KVS_CLONES
static void idwt_level(const float *KVS_RESTRICT a, const float *KVS_RESTRICT d, int64_t half, int64_t L,
                       float *KVS_RESTRICT c, const dwt_filt *f, int isa) {
    const int U = f->T / 2;
    float lo[DWT_MAX_TAPS], hi[DWT_MAX_TAPS];
    for (int t = 0; t < f->T; t++) {
        lo[t] = f->lo[t];
        hi[t] = f->hi[t];
    }
    const int64_t full = L / 2; /* complete (even, odd) output pairs */
    int64_t head = U - 1 < full ? U - 1 : full;
    /* head (and every p when half is small): indices wrap */
    for (int64_t p = 0; p < head; p++) {
        float se = 0.0f, so = 0.0f;
        for (int u = 0; u < U; u++) {
            int64_t q = ((p - u) % half + half) % half;
            se += lo[2 * u] * a[q] + hi[2 * u] * d[q];
            so += lo[2 * u + 1] * a[q] + hi[2 * u + 1] * d[q];
        }
        c[2 * p] = se;
        c[2 * p + 1] = so;
    }
    int64_t p0 = head; /* pairs [head, p0) done by the AVX2 or NEON body */
    (void)isa;
#if KVS_CPU_HAVE_AVX2
    if (isa == KVS_ISA_AVX2 && head == U - 1) p0 = kvs_cpu_idwt_body_avx2(a, d, head, full, c, lo, hi, f->T);
#endif
#if KVS_CPU_HAVE_NEON
    if (isa == KVS_ISA_NEON && head == U - 1) p0 = kvs_cpu_idwt_body_neon(a, d, head, full, c, lo, hi, f->T);
#endif
    if (U == 1) {
        for (int64_t p = p0; p < full; p++) {
            c[2 * p] = lo[0] * a[p] + hi[0] * d[p];
            c[2 * p + 1] = lo[1] * a[p] + hi[1] * d[p];
        }
    } else if (U == 2) {
        for (int64_t p = p0; p < full; p++) {
            c[2 * p] = lo[0] * a[p] + hi[0] * d[p] + (lo[2] * a[p - 1] + hi[2] * d[p - 1]);
            c[2 * p + 1] = lo[1] * a[p] + hi[1] * d[p] + (lo[3] * a[p - 1] + hi[3] * d[p - 1]);
        }
    } else {
        for (int64_t p = p0; p < full; p++) {
            c[2 * p] = lo[0] * a[p] + hi[0] * d[p] + (lo[2] * a[p - 1] + hi[2] * d[p - 1]) +
                       (lo[4] * a[p - 2] + hi[4] * d[p - 2]) + (lo[6] * a[p - 3] + hi[6] * d[p - 3]);
            c[2 * p + 1] = lo[1] * a[p] + hi[1] * d[p] + (lo[3] * a[p - 1] + hi[3] * d[p - 1]) +
                           (lo[5] * a[p - 2] + hi[5] * d[p - 2]) + (lo[7] * a[p - 3] + hi[7] * d[p - 3]);
        }
    }
    if (L & 1) { /* odd length: the last (even) sample only */
        int64_t p = full;
        float se = 0.0f;
        for (int u = 0; u < U; u++) {
            int64_t q = ((p - u) % half + half) % half;
            se += lo[2 * u] * a[q] + hi[2 * u] * d[q];
        }
        c[2 * p] = se;
    }
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

/* What kvs_cpu_dwt and kvs_cpu_idwt share: the filter, the level lengths and coefficient offsets,
 * the thread count, and two ping-pong buffers of hb floats per thread in the device's scratch
 * (grow-only: a fresh allocation per call would fault its pages in again). */
typedef struct dwt_plan {
    dwt_filt f;
    int64_t len[KVS_DWT_MAX_LEVELS + 1], doff[KVS_DWT_MAX_LEVELS + 1];
    int nt;
    int isa; /* KVS_ISA_AVX2 / KVS_ISA_NEON: that ISA's level bodies; else the portable loops */
    int64_t hb;
    float *scr;
} dwt_plan;

static kvs_status dwt_plan_make(kvs_device *dev, const kvs_dwt_args *a, int64_t hb, const char *op, kvs_op_id id,
                                dwt_plan *p) {
    dwt_filter(a->w, &p->f);
    p->isa = kvs_cpu_isa(dev, id);
    dwt_offsets(a->n, a->levels, p->len, p->doff);
    p->nt = kvs_cpu_nt(dev, (double)a->rows * (double)a->n * (double)p->f.T);
    p->hb = hb;
    p->scr = kvs_cpu_scratch(dev, (size_t)p->nt * 2 * (size_t)hb * sizeof(float));
    if (!p->scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s (cpu): cannot allocate scratch", op);
    return KVS_OK;
}

typedef struct dwt_ctx {
    const kvs_dwt_args *a;
    const dwt_plan *pl;
} dwt_ctx;

/* DWT of row r, the levels ping-ponging in thread tid's two buffers */
static void dwt_one(void *cv, int tid, int64_t r) {
    const dwt_ctx *c = cv;
    const kvs_dwt_args *a = c->a;
    const dwt_plan *pl = c->pl;
    float *bufs[2];
    bufs[0] = pl->scr + (size_t)tid * 2 * (size_t)pl->hb;
    bufs[1] = bufs[0] + pl->hb;
    const float *cur = (const float *)kvs_tensor_host_ptr(a->src) + r * a->n;
    float *yr = (float *)kvs_tensor_host_ptr(a->dst) + r * a->ncoef;
    for (int l = 1; l <= a->levels; l++) {
        /* the last level writes a_J straight into the output row */
        float *dst = l == a->levels ? yr : bufs[l & 1];
        dwt_level(cur, pl->len[l - 1], dst, yr + pl->doff[l], &pl->f, pl->isa);
        cur = dst;
    }
}

/* IDWT of row r, the levels ping-ponging in thread tid's two buffers */
static void idwt_one(void *cv, int tid, int64_t r) {
    const dwt_ctx *c = cv;
    const kvs_dwt_args *a = c->a;
    const dwt_plan *pl = c->pl;
    float *bufs[2];
    bufs[0] = pl->scr + (size_t)tid * 2 * (size_t)pl->hb;
    bufs[1] = bufs[0] + pl->hb;
    const float *yr = (const float *)kvs_tensor_host_ptr(a->src) + r * a->ncoef;
    const float *cur = yr; /* a_J */
    for (int l = a->levels; l >= 1; l--) {
        float *dst = l == 1 ? (float *)kvs_tensor_host_ptr(a->dst) + r * a->n : bufs[l & 1];
        idwt_level(cur, yr + pl->doff[l], pl->len[l], pl->len[l - 1], dst, &pl->f, pl->isa);
        cur = dst;
    }
}

kvs_status kvs_cpu_dwt(kvs_device *dev, const kvs_dwt_args *a) {
    dwt_plan pl;
    kvs_status st = dwt_plan_make(dev, a, a->n / 2 + 16, "kvs_dwt", KVS_OP_dwt, &pl);
    if (st != KVS_OK) return st;
    dwt_ctx c = {.a = a, .pl = &pl};
    kvs_par_for(pl.nt, a->rows, 0, dwt_one, &c);
    return KVS_OK;
}

kvs_status kvs_cpu_idwt(kvs_device *dev, const kvs_dwt_args *a) {
    dwt_plan pl;
    kvs_status st = dwt_plan_make(dev, a, a->n + 2, "kvs_idwt", KVS_OP_idwt, &pl);
    if (st != KVS_OK) return st;
    dwt_ctx c = {.a = a, .pl = &pl};
    kvs_par_for(pl.nt, a->rows, 0, idwt_one, &c);
    return KVS_OK;
}
