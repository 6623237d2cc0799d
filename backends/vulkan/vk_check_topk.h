/* top-k checks (included by vk_check_more.h): exact idx and val against a sorted reference. */
static const float *tk_x;
static int tk_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float fa = tk_x[a], fb = tk_x[b];
    int na = isnan(fa), nb = isnan(fb);
    if (na != nb) return na ? 1 : -1;
    if (!na && fa != fb) return fa > fb ? -1 : 1;
    return a < b ? -1 : 1;
}
static int tk_cmp_idx(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

static void t_topk(int global, int64_t rows, int64_t n, int64_t k, int by_index, int use_rl, int ties) {
    int64_t tot = rows * n;
    float *x = malloc(tot * 4);
    for (int64_t i = 0; i < tot; i++) {
        x[i] = ties ? (float)(int)(urand() * 20) - 10 : frand(-100, 100);
        double u = urand();
        if (u < 0.01) x[i] = NAN;
        else if (u < 0.02) x[i] = -INFINITY;
        else if (u < 0.03) x[i] = (urand() < 0.5) ? -0.0f : 0.0f;
    }
    int32_t *rl = malloc(rows * 4);
    for (int64_t r = 0; r < rows; r++) rl[r] = (int32_t)(urand() * (n + 1));
    if (rows > 1) rl[0] = (int32_t)(k > 1 ? k - 1 : 0);
    int64_t orows = global ? 1 : rows, on = global ? tot : n;
    kvs_tensor *tx = mkf(x, n, rows, 0), *ti = mk(KVS_I32, k, orows, 0), *tv = mk(KVS_F32, k, orows, 0), *trl = NULL;
    kvs_topk_params p = kvs_topk_params_default();
    p.k = k;
    p.order_by_index = by_index;
    if (use_rl) p.row_len = trl = mki(rl, rows, 0, 0);
    double t0 = now();
    if (global) CK(kvs_topk_global(dev, tx, ti, tv, &p));
    else CK(kvs_topk(dev, tx, ti, tv, &p));
    int32_t *gi = malloc(orows * k * 4);
    kvs_tensor_download(ti, gi, 0, orows * k * 4);
    double t1 = now();
    float *gv = dl(tv);
    int32_t *perm = malloc(on * 4);
    int bad = 0;
    for (int64_t r = 0; r < orows && !bad; r++) {
        int64_t len = use_rl ? rl[r] : on;
        for (int64_t j = 0; j < len; j++) perm[j] = (int32_t)j;
        tk_x = x + r * on;
        qsort(perm, len, 4, tk_cmp);
        int64_t take = len < k ? len : k;
        if (by_index) qsort(perm, take, 4, tk_cmp_idx);
        for (int64_t q = 0; q < k && !bad; q++) {
            int32_t wi = q < take ? perm[q] : -1;
            float wv = q < take ? tk_x[wi] : -INFINITY;
            float g = gv[r * k + q];
            if (gi[r * k + q] != wi || !(isnan(wv) ? isnan(g) : memcmp(&g, &wv, 4) == 0)) {
                printf("    row %lld pos %lld: got idx %d val %g, want idx %d val %g\n", (long long)r, (long long)q,
                       gi[r * k + q], g, wi, wv);
                bad = 1;
            }
        }
    }
    char nm[128];
    snprintf(nm, sizeof nm, "topk%s rows=%lld n=%lld k=%lld%s%s%s", global ? "_global" : "", (long long)rows,
             (long long)n, (long long)k, by_index ? " by_index" : "", use_rl ? " row_len" : "", ties ? " ties" : "");
    cases++;
    if (bad) failures++;
    printf("  %s %s\n", bad ? "FAIL" : "ok  ", nm);
    if (timing) printf("    time %.3f ms\n", (t1 - t0) * 1e3);
    free(x), free(rl), free(gi), free(gv), free(perm);
    kvs_tensor_destroy(&tx), kvs_tensor_destroy(&ti), kvs_tensor_destroy(&tv), kvs_tensor_destroy(&trl);
}

static void topk_tests(void) {
    if (!want("topk")) return;
    t_topk(0, 1, 1, 1, 0, 0, 0);
    t_topk(0, 3, 13, 5, 0, 0, 1);
    t_topk(0, 3, 13, 13, 1, 0, 1);
    t_topk(0, 7, 100, 10, 0, 1, 1);
    t_topk(0, 7, 100, 33, 1, 1, 0);
    t_topk(0, 4, 10000, 100, 0, 0, 1);
    t_topk(0, 2, 10000, 1000, 0, 1, 0);
    t_topk(0, 2, 100000, 513, 1, 0, 1);
    t_topk(0, 1, 1000000, 2000, 0, 0, 0);
    t_topk(1, 1, 1, 1, 0, 0, 0);
    t_topk(1, 5, 33, 17, 0, 0, 1);
    t_topk(1, 32, 4096, 4096, 1, 0, 0);
    t_topk(1, 8, 100000, 50000, 0, 0, 1);
}
