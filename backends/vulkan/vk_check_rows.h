/* gather / scatter / compact checks (included by vk_check_more.h); bit-exact, guard rows. */
static void t_rows_op(int which, kvs_dtype dt, int64_t G, int64_t Ns, int64_t Nd, int64_t row, int64_t n, int shared,
                      int tokmaj) {
    size_t es = kvs_dtype_bytes(dt, 1);
    int64_t srows = which == 1 ? n : Ns; /* scatter src has n rows */
    size_t sb = (size_t)(G * srows * row) * es, db = (size_t)(G * Nd * row) * es;
    unsigned char *src = malloc(sb), *dst = malloc(db), *ref = malloc(db);
    for (size_t i = 0; i < sb; i++) src[i] = (unsigned char)(urand() * 256);
    for (size_t i = 0; i < db; i++) dst[i] = (unsigned char)(urand() * 256);
    int64_t nidx = shared ? n : G * n;
    int32_t *idx = malloc(nidx * 4);
    int64_t lim = which == 0 ? Ns : Nd;
    for (int64_t g = 0; g < (shared ? 1 : G); g++) {
        if (which == 2) { /* strictly increasing keep-set */
            int64_t c = 0;
            for (int64_t j = 0; j < Nd && c < n; j++)
                if (urand() < (double)(n - c) / (Nd - j)) idx[g * n + c++] = (int32_t)j;
        } else {
            for (int64_t i = 0; i < n; i++) idx[g * n + i] = (int32_t)(urand() * (lim + 2)) - 1; /* some invalid */
        }
    }
    memcpy(ref, dst, db);
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++) {
            int32_t s = idx[shared ? i : g * n + i];
            if (which == 0 && s >= 0 && s < Ns)
                memcpy(ref + ((g * Nd + i) * row) * es, src + ((g * Ns + s) * row) * es, row * es);
            if (which == 1 && s >= 0 && s < Nd) {
                int64_t sr = tokmaj ? i * G + g : g * n + i;
                memcpy(ref + ((g * Nd + s) * row) * es, src + (sr * row) * es, row * es);
            }
            if (which == 2) memcpy(ref + ((g * Nd + i) * row) * es, dst + ((g * Nd + s) * row) * es, row * es);
        }
    /* tensors as views at an odd element offset inside padded parents (guards) */
    int64_t sne = G * srows * row + 3, dne = G * Nd * row + 3;
    kvs_tensor *ps = mk(dt, sne, 0, 0), *pd = mk(dt, dne, 0, 0), *vs, *vd;
    int64_t vsn[3] = {row, tokmaj ? G : srows, tokmaj ? n : G}, vdn[3] = {row, Nd, G};
    kvs_tensor_view(&vs, ps, 1, 3, vsn);
    kvs_tensor_view(&vd, pd, 1, 3, vdn);
    unsigned char *guard = calloc(dne, es);
    kvs_tensor_upload(pd, guard, 0, dne * es);
    kvs_tensor_upload(vs, src, 0, sb);
    kvs_tensor_upload(vd, dst, 0, db);
    kvs_tensor *ti = shared ? mki(idx, n, 0, 0) : mki(idx, n, G, 0);
    double t0 = now();
    if (which == 0) CK(kvs_gather(dev, vs, ti, vd));
    if (which == 1) CK(kvs_scatter(dev, vs, ti, vd, tokmaj));
    if (which == 2) CK(kvs_compact(dev, vd, ti));
    unsigned char *got = malloc(dne * es);
    kvs_tensor_download(pd, got, 0, dne * es);
    double t1 = now();
    int bad = -1;
    for (size_t i = 0; i < es && bad < 0; i++) if (got[i]) bad = 0;
    for (size_t i = (size_t)(G * Nd * row + 1) * es; i < (size_t)dne * es && bad < 0; i++) if (got[i]) bad = 1;
    for (int64_t g = 0; g < G && bad < 0; g++)
        for (int64_t i = 0; i < (which == 2 ? n : Nd) && bad < 0; i++)
            if (memcmp(got + es + ((g * Nd + i) * row) * es, ref + ((g * Nd + i) * row) * es, row * es)) bad = 2;
    char nm[128];
    const char *names[3] = {"gather", "scatter", "compact"};
    snprintf(nm, sizeof nm, "%s %s G=%lld Ns=%lld Nd=%lld row=%lld n=%lld%s%s", names[which], kvs_dtype_name(dt),
             (long long)G, (long long)Ns, (long long)Nd, (long long)row, (long long)n, shared ? " shared" : "",
             tokmaj ? " tokmaj" : "");
    cases++;
    if (bad >= 0) failures++;
    printf("  %s %s%s\n", bad < 0 ? "ok  " : "FAIL", nm, bad < 0 ? "" : (bad == 2 ? " (rows differ)" : " (guard)"));
    if (timing) printf("    time %.3f ms\n", (t1 - t0) * 1e3);
    free(src), free(dst), free(ref), free(idx), free(guard), free(got);
    kvs_tensor_destroy(&vs), kvs_tensor_destroy(&vd), kvs_tensor_destroy(&ps), kvs_tensor_destroy(&pd), kvs_tensor_destroy(&ti);
}

static void rows_tests(void) {
    kvs_dtype dts[4] = {KVS_F32, KVS_F16, KVS_BF16, KVS_I32};
    for (int which = 0; which < 3; which++) {
        const char *names[3] = {"gather", "scatter", "compact"};
        if (!want(names[which])) continue;
        for (int d = 0; d < 4; d++) {
            t_rows_op(which, dts[d], 2, 33, 20, 64, 13, 0, 0);
            t_rows_op(which, dts[d], 3, 13, 13, 13, 5, 1, 0);
            t_rows_op(which, dts[d], 1, 7, 9, 1, 7, 0, 0);
        }
        if (which == 1) {
            t_rows_op(1, KVS_F16, 4, 0, 50, 64, 9, 0, 1);
            t_rows_op(1, KVS_F16, 4, 0, 50, 7, 9, 0, 1);
            t_rows_op(1, KVS_F32, 2, 0, 5, 8, 30, 1, 0); /* many duplicates */
        }
    }
}
