/* DWT checks (included by vk_check_more.h). */
static void dwt_ref(const double *x, int64_t n, int J, kvs_wavelet w, double *y) {
    double lo[8], hi[8];
    int T = kvs_wavelet_filter(w, lo);
    for (int t = 0; t < T; t++) hi[t] = (t & 1) ? -lo[T - 1 - t] : lo[T - 1 - t];
    double *c = malloc((n + 1) * 8), *a = malloc((n + 1) * 8);
    memcpy(c, x, n * 8);
    int64_t L = n, off = kvs_dwt_length(n, J);
    for (int l = 1; l <= J; l++) {
        int64_t Lp = L + (L & 1), half = Lp / 2;
        if (L & 1) c[L] = c[L - 1];
        off -= half;
        for (int64_t i = 0; i < half; i++) {
            double sa = 0, sd = 0;
            for (int t = 0; t < T; t++) sa += lo[t] * c[(2 * i + t) % Lp], sd += hi[t] * c[(2 * i + t) % Lp];
            a[i] = sa;
            y[off + i] = sd;
        }
        memcpy(c, a, half * 8);
        L = half;
    }
    memcpy(y, c, L * 8);
    free(c), free(a);
}

static void idwt_ref(const double *y, int64_t n, int J, kvs_wavelet w, double *x) {
    double lo[8], hi[8];
    int T = kvs_wavelet_filter(w, lo);
    for (int t = 0; t < T; t++) hi[t] = (t & 1) ? -lo[T - 1 - t] : lo[T - 1 - t];
    int64_t len[KVS_DWT_MAX_LEVELS + 1];
    len[0] = n;
    for (int l = 1; l <= J; l++) len[l] = (len[l - 1] + 1) / 2;
    double *a = malloc((n + 2) * 8), *c = malloc((n + 2) * 8);
    memcpy(a, y, len[J] * 8);
    int64_t doff = len[J];
    for (int l = J; l >= 1; l--) {
        int64_t half = len[l], Lp = 2 * half;
        const double *d = y + doff;
        for (int64_t m = 0; m < Lp; m++) c[m] = 0;
        for (int64_t i = 0; i < half; i++)
            for (int t = 0; t < T; t++) {
                int64_t m = (2 * i + t) % Lp;
                c[m] += lo[t] * a[i] + hi[t] * d[i];
            }
        memcpy(a, c, len[l - 1] * 8);
        doff += half;
    }
    memcpy(x, a, n * 8);
    free(a), free(c);
}

static void t_dwt(int64_t rows, int64_t n, int J, kvs_wavelet w) {
    int64_t nc = kvs_dwt_length(n, J);
    float *x = malloc(rows * n * 4), *yc = malloc(rows * nc * 4);
    double *xd = malloc(n * 8), *r = malloc(rows * nc * 8), *rx = malloc(rows * n * 8), *yd = malloc(nc * 8);
    for (int64_t i = 0; i < rows * n; i++) x[i] = frand(-2, 2);
    for (int64_t i = 0; i < rows * nc; i++) yc[i] = frand(-2, 2);
    kvs_tensor *tx = mkf(x, n, rows, 0), *ty = mk(KVS_F32, nc, rows, 0), *tx2 = mk(KVS_F32, n, rows, 0),
               *tyc = mkf(yc, nc, rows, 0);
    double t0 = now();
    CK(kvs_dwt(dev, tx, ty, w, J));
    float *y = dl(ty);
    double t1 = now();
    for (int64_t ro = 0; ro < rows; ro++) {
        for (int64_t i = 0; i < n; i++) xd[i] = x[ro * n + i];
        dwt_ref(xd, n, J, w, r + ro * nc);
    }
    char nm[96];
    snprintf(nm, sizeof nm, "dwt %s rows=%lld n=%lld J=%d", kvs_wavelet_name(w), (long long)rows, (long long)n, J);
    cmp(nm, y, r, rows * nc, 1e-5, 1e-5);
    if (timing) printf("    time %.3f ms\n", (t1 - t0) * 1e3);
    CK(kvs_idwt(dev, ty, tx2, w, J));
    float *x2 = dl(tx2);
    for (int64_t i = 0; i < rows * n; i++) rx[i] = x[i];
    snprintf(nm, sizeof nm, "idwt(dwt) %s rows=%lld n=%lld J=%d", kvs_wavelet_name(w), (long long)rows, (long long)n, J);
    if (n % (1 << J) == 0) cmp(nm, x2, rx, rows * n, 1e-5, 1e-5);
    free(x2);
    CK(kvs_idwt(dev, tyc, tx2, w, J));
    x2 = dl(tx2);
    for (int64_t ro = 0; ro < rows; ro++) {
        for (int64_t i = 0; i < nc; i++) yd[i] = yc[ro * nc + i];
        idwt_ref(yd, n, J, w, rx + ro * n);
    }
    snprintf(nm, sizeof nm, "idwt %s rows=%lld n=%lld J=%d", kvs_wavelet_name(w), (long long)rows, (long long)n, J);
    cmp(nm, x2, rx, rows * n, 1e-5, 1e-5);
    free(x2), free(y), free(x), free(yc), free(xd), free(r), free(rx), free(yd);
    kvs_tensor_destroy(&tx), kvs_tensor_destroy(&ty), kvs_tensor_destroy(&tx2), kvs_tensor_destroy(&tyc);
}

static void dwt_tests(void) {
    if (!want("dwt")) return;
    for (int w = 0; w < 3; w++) {
        t_dwt(1, 1, 1, (kvs_wavelet)w);
        t_dwt(3, 13, 3, (kvs_wavelet)w);
        t_dwt(5, 64, 4, (kvs_wavelet)w);
        t_dwt(2, 100, 6, (kvs_wavelet)w);
        t_dwt(7, 1000, 2, (kvs_wavelet)w);
    }
}
