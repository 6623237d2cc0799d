/* Further checks for ocl_check.c: attention, dwt, topk, rows. Included once by ocl_check.c. */

typedef struct att_case {
    int n_q, nh, nkv, hd, cap, n_kv, causal, f16, use_qpos, use_kpos, use_kvlen, use_rowlen, use_mask;
    int stats, unnorm, accum;
    float qscale; /* input magnitude */
} att_case;

static void att_run(const att_case *c) {
    int G = c->nh / c->nkv, n_kv = c->n_kv ? c->n_kv : c->cap;
    int64_t nq = c->n_q, hd = c->hd, cap = c->cap;
    float *q = malloc(4 * nq * c->nh * hd), *k = malloc(4 * c->nkv * cap * hd), *v = malloc(4 * c->nkv * cap * hd);
    uint16_t *kh = malloc(2 * c->nkv * cap * hd), *vh = malloc(2 * c->nkv * cap * hd);
    for (int64_t i = 0; i < nq * c->nh * hd; i++) q[i] = frand(c->qscale);
    for (int64_t i = 0; i < c->nkv * cap * hd; i++) {
        k[i] = frand(1); v[i] = frand(1);
        if (c->f16) {
            kh[i] = kvs_f32_to_f16(k[i]); k[i] = kvs_f16_to_f32(kh[i]);
            vh[i] = kvs_f32_to_f16(v[i]); v[i] = kvs_f16_to_f32(vh[i]);
        }
    }
    int32_t *qpos = malloc(4 * nq), *kpos = malloc(4 * c->nkv * cap), kvlen[16], *rowlen = malloc(4 * nq);
    float *mask = malloc(4 * nq * n_kv);
    for (int i = 0; i < nq; i++) { qpos[i] = n_kv - (int)nq + i + (c->use_qpos ? (i % 3) - 1 : 0); rowlen[i] = n_kv - (i * 7) % (n_kv / 2 + 1); }
    for (int h = 0; h < c->nkv; h++) {
        kvlen[h] = c->use_kvlen ? n_kv - h * 3 : n_kv;
        if (kvlen[h] < 1) kvlen[h] = 1;
        for (int j = 0; j < cap; j++) kpos[h * cap + j] = c->use_kpos ? j + (j % 5 == 0 ? 2 : 0) : j;
    }
    for (int64_t i = 0; i < nq * n_kv; i++) mask[i] = (i % 11 == 3) ? -INFINITY : frand(2);
    if (c->use_mask) for (int j = 0; j < n_kv; j++) mask[0 * n_kv + j] = -INFINITY; /* row 0 fully masked */
    int32_t stat_rows[3] = {0, (int32_t)nq - 1, (int32_t)nq / 2}, probe_rows[2] = {(int32_t)nq - 1, 0};
    int n_sel = nq >= 3 ? 3 : 1, n_probe = nq >= 2 ? 2 : 1;
    if (nq < 3) { stat_rows[0] = 0; probe_rows[0] = 0; }

    /* reference */
    double *ro = calloc(nq * c->nh * hd, 8), *rm = malloc(8 * nq * c->nh), *rl = malloc(8 * nq * c->nh);
    double *rkm = calloc(c->nkv * cap, 8), *rpr = calloc(n_probe * c->nh * cap, 8);
    int32_t *ram = malloc(4 * nq * c->nh);
    double *P = malloc(8 * nq * c->nh * cap);
    double scale = 1.0 / sqrt((double)hd);
    for (int i = 0; i < nq; i++)
        for (int g = 0; g < c->nh; g++) {
            int h = g / G;
            double *pr = P + ((int64_t)i * c->nh + g) * cap;
            double m = -INFINITY;
            int am = -1;
            for (int j = 0; j < cap; j++) {
                pr[j] = -INFINITY;
                int lim = c->use_kvlen ? kvlen[h] : n_kv;
                if (c->use_rowlen && rowlen[i] < lim) lim = rowlen[i];
                if (j >= lim) continue;
                int qp = c->use_qpos ? qpos[i] : n_kv - (int)nq + i;
                int kp = c->use_kpos ? kpos[h * cap + j] : j;
                if (c->causal && kp > qp) continue;
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)q[((int64_t)i * c->nh + g) * hd + e] * k[((int64_t)h * cap + j) * hd + e];
                double s = scale * d + (c->use_mask ? mask[(int64_t)i * n_kv + j] : 0);
                pr[j] = s;
                if (s > -INFINITY && (am < 0 || s > m)) { m = s; am = j; }
            }
            double l = 0;
            for (int j = 0; j < cap; j++) if (pr[j] > -INFINITY) l += exp(pr[j] - m);
            for (int j = 0; j < cap; j++) pr[j] = (pr[j] > -INFINITY) ? exp(pr[j] - m) / l : 0;
            rm[i * c->nh + g] = am < 0 ? -FLT_MAX : m;
            rl[i * c->nh + g] = l;
            ram[i * c->nh + g] = am;
            for (int j = 0; j < cap; j++)
                for (int e = 0; e < hd; e++)
                    ro[((int64_t)i * c->nh + g) * hd + e] += pr[j] * (c->unnorm ? l : 1) * v[((int64_t)h * cap + j) * hd + e];
        }
    float *km0 = malloc(4 * c->nkv * cap);
    for (int64_t i = 0; i < c->nkv * cap; i++) km0[i] = frand(1);
    for (int h = 0; h < c->nkv; h++) {
        int lim = c->use_kvlen ? kvlen[h] : n_kv;
        for (int j = 0; j < cap; j++) {
            if (j >= lim) { rkm[h * cap + j] = km0[h * cap + j]; continue; }
            double s = 0;
            for (int t = 0; t < n_sel; t++)
                for (int gi = 0; gi < G; gi++) s += P[((int64_t)stat_rows[t] * c->nh + h * G + gi) * cap + j];
            rkm[h * cap + j] = s / G + (c->accum ? km0[h * cap + j] : 0);
        }
    }
    for (int r = 0; r < n_probe; r++)
        for (int g = 0; g < c->nh; g++)
            for (int j = 0; j < cap; j++) rpr[((int64_t)r * c->nh + g) * cap + j] = P[((int64_t)probe_rows[r] * c->nh + g) * cap + j];

    kvs_tensor *tq = mk(KVS_F32, hd, c->nh, nq, q);
    kvs_tensor *tk = mk(c->f16 ? KVS_F16 : KVS_F32, hd, cap, c->nkv, c->f16 ? (void *)kh : (void *)k);
    kvs_tensor *tv = mk(c->f16 ? KVS_F16 : KVS_F32, hd, cap, c->nkv, c->f16 ? (void *)vh : (void *)v);
    kvs_tensor *to = mk(KVS_F32, hd, c->nh, nq, NULL);
    kvs_tensor *tqp = mk(KVS_I32, nq, 0, 0, qpos), *tkp = mk(KVS_I32, cap, c->nkv, 0, kpos);
    kvs_tensor *tkl = mk(KVS_I32, c->nkv, 0, 0, kvlen), *trl = mk(KVS_I32, nq, 0, 0, rowlen), *tm = mk(KVS_F32, n_kv, nq, 0, mask);
    kvs_tensor *tsr = mk(KVS_I32, n_sel, 0, 0, stat_rows), *tpr = mk(KVS_I32, n_probe, 0, 0, probe_rows);
    kvs_tensor *tkm = mk(KVS_F32, cap, c->nkv, 0, km0), *tps = mk(KVS_F32, cap, c->nh, n_probe, NULL);
    kvs_tensor *tam = mk(KVS_I32, c->nh, nq, 0, NULL), *trm = mk(KVS_F32, c->nh, nq, 0, NULL), *trs = mk(KVS_F32, c->nh, nq, 0, NULL);
    kvs_attention_params p = kvs_attention_params_default();
    p.causal = c->causal;
    p.n_kv = c->n_kv;
    if (c->use_qpos) p.q_pos = tqp;
    if (c->use_kpos) p.k_pos = tkp;
    if (c->use_kvlen) p.kv_len = tkl;
    if (c->use_rowlen) p.row_len = trl;
    if (c->use_mask) p.mask = tm;
    p.unnormalised = c->unnorm;
    if (c->stats) {
        p.stat_rows = tsr; p.key_mass = tkm; p.key_mass_accumulate = c->accum;
        p.probe_rows = tpr; p.probs = tps; p.argmax = tam; p.row_max = trm; p.row_sum = trs;
    }
    char what[160];
    snprintf(what, sizeof what, "attn nq=%d h=%d/%d d=%d cap=%d nkv=%d c=%d f16=%d qp%d kp%d kl%d rl%d m%d un%d",
             c->n_q, c->nh, c->nkv, c->hd, c->cap, n_kv, c->causal, c->f16, c->use_qpos, c->use_kpos, c->use_kvlen,
             c->use_rowlen, c->use_mask, c->unnorm);
    kvs_status s = kvs_attention(dev, tq, tk, tv, to, &p);
    if (s != KVS_OK) { printf("  FAIL %s: %s\n", what, kvs_last_error()); failures++; }
    else {
        float *got = dl(to);
        cmp(what, got, ro, nq * c->nh * hd, c->f16 ? 2e-4 : 2e-5);
        free(got);
        if (c->stats) {
            got = dl(tkm); cmp("  key_mass", got, rkm, c->nkv * cap, 2e-5); free(got);
            got = dl(tps); cmp("  probs", got, rpr, n_probe * c->nh * cap, 2e-5); free(got);
            got = dl(trm); cmp("  row_max", got, rm, nq * c->nh, 2e-5); free(got);
            got = dl(trs); cmp("  row_sum", got, rl, nq * c->nh, 2e-5); free(got);
            int32_t *gi = (int32_t *)dl(tam); cmp_i("  argmax", gi, ram, nq * c->nh); free(gi);
        }
    }
    kvs_tensor *ts[] = {tq, tk, tv, to, tqp, tkp, tkl, trl, tm, tsr, tpr, tkm, tps, tam, trm, trs};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) kvs_tensor_destroy(&ts[i]);
    free(q); free(k); free(v); free(kh); free(vh); free(qpos); free(kpos); free(rowlen); free(mask);
    free(ro); free(rm); free(rl); free(rkm); free(rpr); free(ram); free(P); free(km0);
}

static void t_attention(void) {
    att_case cs[] = {
        {.n_q = 13, .nh = 4, .nkv = 2, .hd = 64, .cap = 40, .n_kv = 37, .causal = 1, .qscale = 1},
        {.n_q = 1, .nh = 8, .nkv = 2, .hd = 64, .cap = 100, .causal = 1, .qscale = 1, .stats = 1},
        {.n_q = 33, .nh = 4, .nkv = 4, .hd = 32, .cap = 70, .n_kv = 70, .qscale = 30, .stats = 1, .use_mask = 1},
        {.n_q = 13, .nh = 8, .nkv = 2, .hd = 128, .cap = 50, .n_kv = 45, .causal = 1, .f16 = 1, .use_qpos = 1,
         .use_kpos = 1, .use_kvlen = 1, .use_rowlen = 1, .use_mask = 1, .stats = 1, .accum = 1, .qscale = 2},
        {.n_q = 7, .nh = 6, .nkv = 3, .hd = 16, .cap = 129, .n_kv = 100, .causal = 1, .use_kvlen = 1, .stats = 1,
         .unnorm = 1, .qscale = 100},
        {.n_q = 100, .nh = 2, .nkv = 1, .hd = 64, .cap = 300, .causal = 0, .f16 = 1, .stats = 1, .qscale = 1},
        /* split-K decode cases (few work-groups) */
        {.n_q = 1, .nh = 4, .nkv = 1, .hd = 64, .cap = 1000, .causal = 1, .stats = 1, .qscale = 3},
        {.n_q = 3, .nh = 4, .nkv = 2, .hd = 32, .cap = 700, .n_kv = 690, .causal = 1, .f16 = 1, .use_qpos = 1,
         .use_kpos = 1, .use_kvlen = 1, .use_rowlen = 1, .use_mask = 1, .stats = 1, .accum = 1, .qscale = 2},
        {.n_q = 2, .nh = 2, .nkv = 1, .hd = 16, .cap = 2000, .use_mask = 1, .stats = 1, .unnorm = 1, .qscale = 50},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) att_run(&cs[i]);
}

static void rows_case(kvs_dtype dt, int64_t row, int64_t G, int64_t Ns, int64_t n, int shared) {
    size_t es = kvs_dtype_bytes(dt, 1);
    int64_t rb = row * es;
    unsigned char *src = malloc(G * Ns * rb), *dst0 = malloc(G * Ns * rb), *ref = malloc(G * Ns * rb), *got = malloc(G * Ns * rb);
    for (int64_t i = 0; i < G * Ns * rb; i++) { src[i] = (unsigned char)(urand() * 256); dst0[i] = (unsigned char)(urand() * 256); }
    int64_t ni = shared ? n : G * n;
    int32_t *idx = malloc(4 * ni);
    char what[128];
    /* gather: random indices, some out of range */
    for (int64_t i = 0; i < ni; i++) idx[i] = (int32_t)(urand() * Ns);
    idx[0] = -1; if (ni > 2) idx[2] = (int32_t)Ns;
    kvs_tensor *ts = mk(dt, row, Ns, G, src), *td = mk(dt, row, Ns, G, dst0);
    kvs_tensor *ti = shared ? mk(KVS_I32, n, 0, 0, idx) : mk(KVS_I32, n, G, 0, idx);
    memcpy(ref, dst0, G * Ns * rb);
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++) {
            int32_t s = idx[(shared ? 0 : g * n) + i];
            if (s >= 0 && s < Ns) memcpy(ref + (g * Ns + i) * rb, src + (g * Ns + s) * rb, rb);
        }
    snprintf(what, sizeof what, "gather %s row=%lld G=%lld n=%lld shared=%d", kvs_dtype_name(dt), (long long)row, (long long)G, (long long)n, shared);
    CK(kvs_gather(dev, ts, ti, td));
    kvs_tensor_download(td, got, 0, G * Ns * rb);
    if (memcmp(got, ref, G * Ns * rb)) { printf("  FAIL %s\n", what); failures++; } else printf("  ok   %s\n", what);
    /* scatter with duplicates, both layouts */
    for (int tm = 0; tm < 2; tm++) {
        kvs_tensor_upload(td, dst0, 0, G * Ns * rb);
        for (int64_t i = 0; i < ni; i++) idx[i] = (int32_t)(urand() * Ns * 0.5);
        idx[1] = -3;
        kvs_tensor_upload(ti, idx, 0, 4 * ni);
        kvs_tensor *tsrc = tm ? mk(dt, row, G, n, src) : mk(dt, row, n, G, src);
        memcpy(ref, dst0, G * Ns * rb);
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < n; i++) {
                int32_t d = idx[(shared ? 0 : g * n) + i];
                int64_t sr = tm ? i * G + g : g * n + i;
                if (d >= 0 && d < Ns) memcpy(ref + (g * Ns + d) * rb, src + sr * rb, rb);
            }
        snprintf(what, sizeof what, "scatter %s row=%lld G=%lld n=%lld shared=%d tm=%d", kvs_dtype_name(dt), (long long)row, (long long)G, (long long)n, shared, tm);
        CK(kvs_scatter(dev, tsrc, ti, td, tm));
        kvs_tensor_download(td, got, 0, G * Ns * rb);
        if (memcmp(got, ref, G * Ns * rb)) { printf("  FAIL %s\n", what); failures++; } else printf("  ok   %s\n", what);
        kvs_tensor_destroy(&tsrc);
    }
    /* compact: strictly increasing */
    kvs_tensor_upload(td, src, 0, G * Ns * rb);
    for (int64_t g = 0; g < (shared ? 1 : G); g++) {
        int64_t c = 0;
        for (int64_t j = 0; j < Ns && c < n; j++) if (urand() < (double)n / Ns || Ns - j <= n - c) idx[g * n + c++] = (int32_t)j;
    }
    kvs_tensor_upload(ti, idx, 0, 4 * ni);
    memcpy(ref, src, G * Ns * rb);
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++) memcpy(ref + (g * Ns + i) * rb, src + (g * Ns + idx[(shared ? 0 : g * n) + i]) * rb, rb);
    snprintf(what, sizeof what, "compact %s row=%lld G=%lld n=%lld shared=%d", kvs_dtype_name(dt), (long long)row, (long long)G, (long long)n, shared);
    CK(kvs_compact(dev, td, ti));
    kvs_tensor_download(td, got, 0, G * Ns * rb);
    int bad = 0;
    for (int64_t g = 0; g < G; g++) bad |= memcmp(got + g * Ns * rb, ref + g * Ns * rb, n * rb) != 0;
    if (bad) { printf("  FAIL %s\n", what); failures++; } else printf("  ok   %s\n", what);
    kvs_tensor_destroy(&ts); kvs_tensor_destroy(&td); kvs_tensor_destroy(&ti);
    free(src); free(dst0); free(ref); free(got); free(idx);
}

static void t_gather(void) {
    rows_case(KVS_F32, 64, 3, 40, 17, 0);
    rows_case(KVS_F16, 13, 2, 33, 13, 0);
    rows_case(KVS_BF16, 64, 4, 100, 50, 1);
    rows_case(KVS_I32, 1, 1, 10, 7, 0);
    rows_case(KVS_F16, 128, 8, 1000, 333, 0);
}

static void dwt_ref(const double *x, int64_t n, int J, kvs_wavelet w, double *y) {
    double lo[8], hi[8];
    int T = kvs_wavelet_filter(w, lo);
    for (int t = 0; t < T; t++) hi[t] = (t & 1 ? -1 : 1) * lo[T - 1 - t];
    double *c = malloc(8 * (n + 1)), *a = malloc(8 * (n + 1));
    memcpy(c, x, 8 * n);
    int64_t L = n;
    for (int l = 1; l <= J; l++) {
        int64_t Lp = L + (L & 1), half = Lp / 2;
        if (L & 1) c[L] = c[L - 1];
        int64_t doff = kvs_dwt_level_length(n, J);
        for (int m = l + 1; m <= J; m++) doff += kvs_dwt_level_length(n, m);
        for (int64_t i = 0; i < half; i++) {
            double sa = 0, sd = 0;
            for (int t = 0; t < T; t++) { sa += lo[t] * c[(2 * i + t) % Lp]; sd += hi[t] * c[(2 * i + t) % Lp]; }
            a[i] = sa;
            y[doff + i] = sd;
        }
        memcpy(c, a, 8 * (size_t)half);
        L = half;
    }
    memcpy(y, c, 8 * L);
    free(c); free(a);
}

static void t_dwt(void) {
    kvs_wavelet ws[] = {KVS_WAVELET_HAAR, KVS_WAVELET_DB2, KVS_WAVELET_DB4};
    int64_t ns[] = {1, 13, 33, 64, 1000};
    int Js[] = {1, 2, 3, 5};
    for (int wi = 0; wi < 3; wi++)
        for (int ni = 0; ni < 5; ni++)
            for (int ji = 0; ji < 4; ji++) {
                int64_t n = ns[ni], rows = 3;
                int J = Js[ji];
                int64_t nc = kvs_dwt_length(n, J);
                float *x = malloc(4 * n * rows);
                double *xd = malloc(8 * n), *ref = malloc(8 * nc * rows), *xr = malloc(8 * n * rows);
                for (int64_t i = 0; i < n * rows; i++) { x[i] = frand(2); xr[i] = x[i]; }
                for (int64_t r = 0; r < rows; r++) {
                    for (int64_t i = 0; i < n; i++) xd[i] = x[r * n + i];
                    dwt_ref(xd, n, J, ws[wi], ref + r * nc);
                }
                kvs_tensor *tx = mk(KVS_F32, n, rows, 0, x), *ty = mk(KVS_F32, nc, rows, 0, NULL), *tx2 = mk(KVS_F32, n, rows, 0, NULL);
                char what[96];
                snprintf(what, sizeof what, "dwt %s n=%lld J=%d", kvs_wavelet_name(ws[wi]), (long long)n, J);
                CK(kvs_dwt(dev, tx, ty, ws[wi], J));
                float *got = dl(ty);
                cmp(what, got, ref, nc * rows, 1e-5);
                free(got);
                CK(kvs_idwt(dev, ty, tx2, ws[wi], J));
                got = dl(tx2);
                snprintf(what, sizeof what, "idwt(dwt) %s n=%lld J=%d", kvs_wavelet_name(ws[wi]), (long long)n, J);
                cmp(what, got, xr, n * rows, 1e-5);
                free(got);
                kvs_tensor_destroy(&tx); kvs_tensor_destroy(&ty); kvs_tensor_destroy(&tx2);
                free(x); free(xd); free(ref); free(xr);
            }
}

static const float *tk_vals;
static int tk_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float x = tk_vals[a], y = tk_vals[b];
    int xn = isnan(x), yn = isnan(y);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x != y) return x > y ? -1 : 1;
    return a < b ? -1 : (a > b);
}
static int i32_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return a < b ? -1 : (a > b);
}

static void topk_case(int64_t rows, int64_t n, int64_t k, int by_index, int use_rl, int global, int ties) {
    int64_t N = rows * n;
    float *x = malloc(4 * N);
    for (int64_t i = 0; i < N; i++) {
        x[i] = ties ? (float)(int)(urand() * 7) - 3 : frand(100);
        double u = urand();
        if (u < 0.01) x[i] = NAN; else if (u < 0.02) x[i] = -INFINITY; else if (u < 0.03) x[i] = INFINITY;
        else if (u < 0.04) x[i] = -0.0f; else if (u < 0.05) x[i] = 0.0f;
    }
    int32_t *rl = malloc(4 * rows);
    for (int64_t r = 0; r < rows; r++) rl[r] = use_rl ? (int32_t)((r * 37) % (n + 1)) : (int32_t)n;
    int64_t orows = global ? 1 : rows;
    int32_t *ref = malloc(4 * orows * k), *perm = malloc(4 * (global ? N : n));
    double *rv = malloc(8 * orows * k);
    for (int64_t r = 0; r < orows; r++) {
        int64_t len = global ? N : rl[r];
        const float *xr = global ? x : x + r * n;
        for (int64_t j = 0; j < len; j++) perm[j] = (int32_t)j;
        tk_vals = xr;
        qsort(perm, len, 4, tk_cmp);
        int64_t kk = k < len ? k : len;
        if (by_index) qsort(perm, kk, 4, i32_cmp);
        for (int64_t t = 0; t < k; t++) {
            ref[r * k + t] = t < kk ? perm[t] : -1;
            rv[r * k + t] = t < kk ? xr[perm[t]] : -INFINITY;
        }
    }
    kvs_tensor *tx = global ? mk(KVS_F32, n, rows, 0, x) : mk(KVS_F32, n, rows, 0, x);
    kvs_tensor *ti = mk(KVS_I32, k, orows, 0, NULL), *tv = mk(KVS_F32, k, orows, 0, NULL), *trl = mk(KVS_I32, rows, 0, 0, rl);
    kvs_topk_params p = kvs_topk_params_default();
    p.k = k;
    p.order_by_index = by_index;
    if (use_rl) p.row_len = trl;
    char what[128];
    snprintf(what, sizeof what, "topk%s rows=%lld n=%lld k=%lld byidx=%d rl=%d ties=%d", global ? "_global" : "",
             (long long)rows, (long long)n, (long long)k, by_index, use_rl, ties);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kvs_status s = global ? kvs_topk_global(dev, tx, ti, tv, &p) : kvs_topk(dev, tx, ti, tv, &p);
    if (s == KVS_OK) s = kvs_device_sync(dev);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (s != KVS_OK) { printf("  FAIL %s: %s\n", what, kvs_last_error()); failures++; }
    else {
        int32_t *gi = (int32_t *)dl(ti);
        float *gv = dl(tv);
        printf("       (%.1f ms)\n", 1e3 * ((t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec)));
        cmp_i(what, gi, ref, orows * k);
        cmp("  values", gv, rv, orows * k, 0);
        free(gi); free(gv);
    }
    kvs_tensor_destroy(&tx); kvs_tensor_destroy(&ti); kvs_tensor_destroy(&tv); kvs_tensor_destroy(&trl);
    free(x); free(rl); free(ref); free(perm); free(rv);
}

static void t_topk(void) {
    topk_case(5, 1000, 10, 0, 0, 0, 0);
    topk_case(5, 1000, 10, 1, 0, 0, 1);
    topk_case(7, 13, 13, 0, 1, 0, 1);
    topk_case(3, 1, 1, 0, 0, 0, 0);
    topk_case(33, 100, 7, 0, 1, 0, 1);
    topk_case(4, 100000, 5000, 0, 0, 0, 1);
    topk_case(2, 30000, 3000, 1, 1, 0, 0);
    topk_case(1, 1000000, 1000, 0, 0, 1, 0);
    topk_case(8, 125000, 100000, 1, 0, 1, 1);
    topk_case(1, 5000, 5000, 0, 0, 1, 1);
}

#undef MORE_TESTS
#define MORE_TESTS {"attention", t_attention}, {"gather", t_gather}, {"dwt", t_dwt}, {"topk", t_topk}
