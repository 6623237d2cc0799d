/* The float64 host DWT (see dwt_host.h). */
#include <math.h>
#include <string.h>

#include "dwt_host.h"

int kvs_host_wavelet_lo(kvs_wavelet w, double *lo) {
    switch (w) {
    case KVS_WAVELET_HAAR:
        lo[0] = lo[1] = sqrt(0.5);
        return 2;
    case KVS_WAVELET_DB2: {
        double s3 = sqrt(3.0), n = 4.0 * sqrt(2.0);
        lo[0] = (1 + s3) / n;
        lo[1] = (3 + s3) / n;
        lo[2] = (3 - s3) / n;
        lo[3] = (1 - s3) / n;
        return 4;
    }
    case KVS_WAVELET_DB4: {
        static const double t[8] = {0.2303778133088965, 0.7148465705529157, 0.6308807679298589,
                                    -0.0279837694168599, -0.1870348117190931, 0.0308413818355607,
                                    0.0328830116668852, -0.0105974017850690};
        memcpy(lo, t, sizeof t);
        return 8;
    }
    }
    return 0;
}

static int64_t level_len(int64_t n, int level) {
    for (int l = 0; l < level; l++) n = n / 2 + (n % 2);
    return n;
}

static void hi_from_lo(const double *lo, int L, double *hi) {
    for (int t = 0; t < L; t++) hi[t] = ((t % 2) ? -1.0 : 1.0) * lo[L - 1 - t];
}

/* offset of d_l in the coefficient row */
static int64_t detail_offset(int64_t n, int levels, int l) {
    int64_t off = level_len(n, levels);
    for (int m = levels; m > l; m--) off += level_len(n, m);
    return off;
}

void kvs_host_dwt_row(const double *x, int64_t n, kvs_wavelet w, int levels, double *y, double *scratch) {
    double lo[8], hi[8];
    int L = kvs_host_wavelet_lo(w, lo);
    hi_from_lo(lo, L, hi);
    double *cur = scratch, *nxt = scratch + n + 2;
    memcpy(cur, x, sizeof(double) * (size_t)n);
    int64_t len = n;
    for (int l = 1; l <= levels; l++) {
        int64_t Lp = len + (len & 1);
        if (len & 1) cur[len] = cur[len - 1];
        int64_t half = Lp / 2;
        double *d = y + detail_offset(n, levels, l);
        for (int64_t i = 0; i < half; i++) {
            double sa = 0, sd = 0;
            for (int t = 0; t < L; t++) {
                double c = cur[(2 * i + t) % Lp];
                sa += lo[t] * c;
                sd += hi[t] * c;
            }
            nxt[i] = sa;
            d[i] = sd;
        }
        double *tmp = cur;
        cur = nxt;
        nxt = tmp;
        len = half;
    }
    memcpy(y, cur, sizeof(double) * (size_t)len);
}

void kvs_host_idwt_row(const double *y, int64_t n, kvs_wavelet w, int levels, double *x, double *scratch) {
    double lo[8], hi[8];
    int L = kvs_host_wavelet_lo(w, lo);
    hi_from_lo(lo, L, hi);
    double *cur = scratch, *nxt = scratch + n + 2;
    int64_t half = level_len(n, levels);
    memcpy(cur, y, sizeof(double) * (size_t)half);
    for (int l = levels; l >= 1; l--) {
        int64_t len = level_len(n, l - 1);
        int64_t Lp = len + (len & 1);
        const double *d = y + detail_offset(n, levels, l);
        for (int64_t m = 0; m < Lp; m++) nxt[m] = 0;
        for (int64_t i = 0; i < half; i++)
            for (int t = 0; t < L; t++) nxt[(2 * i + t) % Lp] += cur[i] * lo[t] + d[i] * hi[t];
        double *tmp = cur;
        cur = nxt;
        nxt = tmp;
        half = len;
    }
    memcpy(x, cur, sizeof(double) * (size_t)n);
}
