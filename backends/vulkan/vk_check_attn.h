/* Attention checks (included by vk_check_more.h). */
typedef struct attn_case {
    int64_t n_q, nh, nkvh, d, cap, n_kv;
    int causal, use_qpos, use_kpos, use_kvlen, use_rowlen, use_mask, stats, unnorm, acc;
    kvs_dtype kvdt;
} attn_case;

static void t_attn(attn_case c) {
    int64_t G = c.nh / c.nkvh, nkv = c.n_kv ? c.n_kv : c.cap;
    float *q = malloc(c.n_q * c.nh * c.d * 4), *k = malloc(c.nkvh * c.cap * c.d * 4), *v = malloc(c.nkvh * c.cap * c.d * 4);
    float *mask = malloc(c.n_q * nkv * 4), *km0 = malloc(c.nkvh * c.cap * 4);
    int32_t *qpos = malloc(c.n_q * 4), *kpos = malloc(c.nkvh * c.cap * 4), *kvlen = malloc(c.nkvh * 4),
            *rowlen = malloc(c.n_q * 4);
    for (int64_t i = 0; i < c.n_q * c.nh * c.d; i++) q[i] = frand(-1, 1);
    for (int64_t i = 0; i < c.nkvh * c.cap * c.d; i++) k[i] = conv_ref(frand(-1, 1), c.kvdt), v[i] = conv_ref(frand(-1, 1), c.kvdt);
    if (c.n_q > 2) for (int64_t i = 0; i < c.nh * c.d; i++) q[2 * c.nh * c.d + i] *= 60; /* extreme logits */
    for (int64_t i = 0; i < c.n_q * nkv; i++) mask[i] = urand() < 0.2 ? -INFINITY : frand(-2, 2);
    for (int64_t i = 0; i < c.n_q; i++) qpos[i] = (int32_t)(urand() * nkv), rowlen[i] = (int32_t)(urand() * (nkv + 1));
    for (int64_t i = 0; i < c.nkvh * c.cap; i++) kpos[i] = (int32_t)(urand() * nkv), km0[i] = frand(0, 1);
    for (int64_t h = 0; h < c.nkvh; h++) kvlen[h] = (int32_t)(urand() * (nkv + 1));
    if (c.n_q > 1) rowlen[1] = 0;
    kvs_tensor *tq = mkf(q, c.d, c.nh, c.n_q), *tkf = mkf(k, c.d, c.cap, c.nkvh), *tvf = mkf(v, c.d, c.cap, c.nkvh);
    kvs_tensor *tk = mk(c.kvdt, c.d, c.cap, c.nkvh), *tv = mk(c.kvdt, c.d, c.cap, c.nkvh);
    CK(kvs_copy(dev, tkf, tk));
    CK(kvs_copy(dev, tvf, tv));
    kvs_tensor *to = mk(KVS_F32, c.d, c.nh, c.n_q);
    kvs_attention_params p = kvs_attention_params_default();
    p.causal = c.causal;
    p.n_kv = c.n_kv;
    kvs_tensor *tqp = NULL, *tkp = NULL, *tkl = NULL, *trl = NULL, *tm = NULL, *tkm = NULL, *tpr = NULL, *tprobs = NULL,
               *tam = NULL, *trm = NULL, *trs = NULL, *tsr = NULL;
    if (c.use_qpos) p.q_pos = tqp = mki(qpos, c.n_q, 0, 0);
    if (c.use_kpos) p.k_pos = tkp = mki(kpos, c.cap, c.nkvh, 0);
    if (c.use_kvlen) p.kv_len = tkl = mki(kvlen, c.nkvh, 0, 0);
    if (c.use_rowlen) p.row_len = trl = mki(rowlen, c.n_q, 0, 0);
    if (c.use_mask) p.mask = tm = mkf(mask, nkv, c.n_q, 0);
    int32_t sel[3] = {0, (int32_t)(c.n_q - 1), (int32_t)(c.n_q / 2)};
    int nsel = c.n_q >= 3 ? 3 : 1;
    if (c.stats) {
        p.key_mass = tkm = mkf(km0, c.cap, c.nkvh, 0);
        p.key_mass_accumulate = c.acc;
        if (c.stats > 1) p.stat_rows = tsr = mki(sel, nsel, 0, 0);
        p.probe_rows = tpr = mki(sel, nsel, 0, 0);
        p.probs = tprobs = mk(KVS_F32, c.cap, c.nh, nsel);
        p.argmax = tam = mk(KVS_I32, c.nh, c.n_q, 0);
        p.row_max = trm = mk(KVS_F32, c.nh, c.n_q, 0);
        p.row_sum = trs = mk(KVS_F32, c.nh, c.n_q, 0);
    }
    p.unnormalised = c.unnorm;
    double t0 = now();
    CK(kvs_attention(dev, tq, tk, tv, to, &p));
    float *out = dl(to);
    double t1 = now();
    /* reference */
    double scale = 1 / sqrt((double)c.d);
    double *ro = calloc(c.n_q * c.nh * c.d, 8), *rm = malloc(c.n_q * c.nh * 8), *rs = malloc(c.n_q * c.nh * 8);
    double *rkm = malloc(c.nkvh * c.cap * 8), *rpr = calloc(nsel * c.nh * c.cap, 8), *ram = malloc(c.n_q * c.nh * 8);
    double *lg = malloc(nkv * 8);
    char *vis = malloc(nkv);
    for (int64_t h = 0; h < c.nkvh; h++)
        for (int64_t j = 0; j < c.cap; j++) {
            int64_t valid = c.use_kvlen ? (kvlen[h] < nkv ? kvlen[h] : nkv) : nkv;
            rkm[h * c.cap + j] = (c.acc || j >= valid) ? km0[h * c.cap + j] : 0;
        }
    for (int64_t i = 0; i < c.n_q; i++)
        for (int64_t g = 0; g < c.nh; g++) {
            int64_t h = g / G, valid = c.use_kvlen ? (kvlen[h] < nkv ? kvlen[h] : nkv) : nkv;
            int64_t qp = c.use_qpos ? qpos[i] : nkv - c.n_q + i;
            double m = -FLT_MAX, l = 0;
            int64_t am = -1;
            for (int64_t j = 0; j < nkv; j++) {
                int64_t kp = c.use_kpos ? kpos[h * c.cap + j] : j;
                vis[j] = j < valid && (!c.use_rowlen || j < rowlen[i]) && (!c.causal || kp <= qp) &&
                         (!c.use_mask || mask[i * nkv + j] != -INFINITY);
                if (!vis[j]) continue;
                double s = 0;
                for (int64_t e = 0; e < c.d; e++) s += (double)q[(i * c.nh + g) * c.d + e] * k[(h * c.cap + j) * c.d + e];
                s = s * scale + (c.use_mask ? mask[i * nkv + j] : 0);
                lg[j] = s;
                if (am < 0 || s > m) m = s, am = j;
            }
            for (int64_t j = 0; j < nkv; j++)
                if (vis[j]) l += exp(lg[j] - m);
            rm[i * c.nh + g] = m, rs[i * c.nh + g] = l, ram[i * c.nh + g] = am;
            for (int64_t j = 0; j < nkv; j++) {
                if (!vis[j]) continue;
                double w = exp(lg[j] - m);
                for (int64_t e = 0; e < c.d; e++) ro[(i * c.nh + g) * c.d + e] += w * v[(h * c.cap + j) * c.d + e];
                double pj = w / l;
                int in_stat = c.stats == 1;
                for (int s = 0; s < nsel && c.stats > 1; s++) in_stat |= sel[s] == i;
                if (c.stats && in_stat) rkm[h * c.cap + j] += pj / G;
                for (int s = 0; s < nsel && c.stats; s++)
                    if (sel[s] == i) rpr[(s * c.nh + g) * c.cap + j] = pj;
            }
            if (!c.unnorm && l > 0)
                for (int64_t e = 0; e < c.d; e++) ro[(i * c.nh + g) * c.d + e] /= l;
        }
    char nm[128];
    snprintf(nm, sizeof nm, "attn %s nq=%lld h=%lld/%lld d=%lld cap=%lld nkv=%lld c%d qp%d kp%d kl%d rl%d m%d s%d u%d a%d",
             kvs_dtype_name(c.kvdt), (long long)c.n_q, (long long)c.nh, (long long)c.nkvh, (long long)c.d,
             (long long)c.cap, (long long)nkv, c.causal, c.use_qpos, c.use_kpos, c.use_kvlen, c.use_rowlen, c.use_mask,
             c.stats, c.unnorm, c.acc);
    cmp(nm, out, ro, c.n_q * c.nh * c.d, 1e-5, 1e-4);
    if (timing) printf("    time %.3f ms\n", (t1 - t0) * 1e3);
    if (c.stats) {
        float *g;
        g = dl(tkm); cmp("  .key_mass", g, rkm, c.nkvh * c.cap, 1e-5, 1e-4); free(g);
        g = dl(tprobs); cmp("  .probs", g, rpr, nsel * c.nh * c.cap, 1e-5, 1e-4); free(g);
        g = dl(trm); cmp("  .row_max", g, rm, c.n_q * c.nh, 1e-5, 1e-5); free(g);
        g = dl(trs); cmp("  .row_sum", g, rs, c.n_q * c.nh, 1e-5, 1e-4); free(g);
        int32_t *ai = (int32_t *)dl(tam);
        float *af = malloc(c.n_q * c.nh * 4);
        for (int64_t i = 0; i < c.n_q * c.nh; i++) af[i] = (float)ai[i];
        cmp("  .argmax", af, ram, c.n_q * c.nh, 0, 0);
        free(ai), free(af);
    }
    kvs_tensor *all[] = {tq, tkf, tvf, tk, tv, to, tqp, tkp, tkl, trl, tm, tkm, tpr, tprobs, tam, trm, trs, tsr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(&all[i]);
    free(q), free(k), free(v), free(mask), free(km0), free(qpos), free(kpos), free(kvlen), free(rowlen);
    free(ro), free(rm), free(rs), free(rkm), free(rpr), free(ram), free(lg), free(vis), free(out);
}

static void attn_tests(void) {
    if (!want("attn")) return;
    t_attn((attn_case){.n_q = 1, .nh = 1, .nkvh = 1, .d = 4, .cap = 1, .kvdt = KVS_F32});
    t_attn((attn_case){.n_q = 13, .nh = 4, .nkvh = 2, .d = 64, .cap = 33, .causal = 1, .kvdt = KVS_F32});
    t_attn((attn_case){.n_q = 13, .nh = 4, .nkvh = 1, .d = 64, .cap = 100, .n_kv = 77, .causal = 1, .use_qpos = 1,
                       .use_kpos = 1, .use_kvlen = 1, .use_rowlen = 1, .use_mask = 1, .stats = 2, .acc = 1, .kvdt = KVS_F32});
    t_attn((attn_case){.n_q = 5, .nh = 2, .nkvh = 2, .d = 128, .cap = 40, .use_mask = 1, .stats = 1, .unnorm = 1,
                       .kvdt = KVS_F16});
    t_attn((attn_case){.n_q = 33, .nh = 8, .nkvh = 2, .d = 32, .cap = 130, .causal = 1, .use_kvlen = 1, .stats = 1,
                       .kvdt = KVS_F16});
    t_attn((attn_case){.n_q = 3, .nh = 6, .nkvh = 3, .d = 13, .cap = 7, .use_rowlen = 1, .stats = 2, .kvdt = KVS_F32});
    /* decode shapes: split-K path */
    t_attn((attn_case){.n_q = 1, .nh = 8, .nkvh = 2, .d = 64, .cap = 1000, .causal = 1, .use_kvlen = 1, .use_mask = 1,
                       .stats = 1, .kvdt = KVS_F32});
    t_attn((attn_case){.n_q = 2, .nh = 4, .nkvh = 4, .d = 128, .cap = 3000, .n_kv = 2900, .causal = 1, .use_qpos = 1,
                       .use_kpos = 1, .use_rowlen = 1, .stats = 2, .unnorm = 1, .acc = 1, .kvdt = KVS_F16});
    t_attn((attn_case){.n_q = 1, .nh = 2, .nkvh = 1, .d = 8, .cap = 4096, .kvdt = KVS_F32});
}
