/* CPU backend: attention with GQA and statistics (contract: kvs_attention in include/kvsieve/ops.h):
 * the driver (argument checks of device-side values, scratch, the transposed K of the AVX-512 path,
 * tasks over OpenMP threads, split-key merges, key_mass reduction). Design: attention.h; the tile
 * pass and its kernels: attention_tiles.c, x86/attention_avx512.c, x86/attention_avx2.c,
 * arm/attention_neon.c. */
#include <stdlib.h>

#include "attention.h"

/* Whether query tile qt needs the statistics pass. */
static int att_wants_stats(const att_ctx *c, int64_t qt) {
    if (!c->stat_w && !c->probs) return 0;
    const int64_t i0 = qt * c->BQ, i1 = i0 + c->BQ < c->a->n_q ? i0 + c->BQ : c->a->n_q;
    for (int64_t i = i0; i < i1; i++)
        if ((c->stat_w && c->stat_w[i] > 0) || (c->probs && c->probe_start[i + 1] > c->probe_start[i])) return 1;
    return 0;
}

/* Split-key decoding state of one (query tile, kv head, split) in the part buffer, for its M rows:
 * running max, denominator, best logit and its key, unnormalised O [M][dv]. */
typedef struct att_part {
    float *m, *l, *bestv, *O;
    int32_t *best;
} att_part;

static att_part att_part_at(const att_ctx *c, int64_t h, int64_t qt, int64_t sp, int64_t M) {
    float *p = c->part + (size_t)(((qt * c->a->n_kv_heads + h) * c->splits + sp) * c->part_words);
    att_part v = {.m = p, .l = p + M, .bestv = p + 2 * M, .best = (int32_t *)(p + 3 * M), .O = p + 4 * M};
    return v;
}

/* Keys [*ja, *jb) of split sp, clipped to the jend keys any row sees. */
static void att_split_keys(const att_ctx *c, int64_t sp, int64_t jend, int64_t *ja, int64_t *jb) {
    *ja = sp * c->split_keys;
    *jb = *ja + c->split_keys < jend ? *ja + c->split_keys : jend;
}

/* One task: query tile qt against kv head h, keys of split sp (all keys when there is one split).
 * Unsplit it writes the outputs and runs the statistics pass; split it leaves its partial state. */
static void att_task(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t sp) {
    int64_t jend, max_qpos;
    const int64_t M = kvs_cpu_att_rows(c, w, h, qt, &jend, &max_qpos), i0 = qt * c->BQ, d = c->dv;
    if (c->splits == 1) {
        float *keep_e = w->E;
        uint8_t *keep_ok = w->tile_ok;
        const int stats = att_wants_stats(c, qt);
        if (!stats) w->E = NULL, w->tile_ok = NULL; /* keep exponentials only for tiles with statistics */
        kvs_cpu_att_pass(c, w, h, i0, M, 0, jend, max_qpos);
        kvs_cpu_att_write(c, w, h, i0, M);
        if (stats) {
            if (c->probs) kvs_cpu_att_zero_probes(c, h, i0, M);
            kvs_cpu_att_stats(c, w, h, i0, M, 0, jend, max_qpos);
        }
        w->E = keep_e;
        w->tile_ok = keep_ok;
        return;
    }
    int64_t ja, jb;
    att_split_keys(c, sp, jend, &ja, &jb);
    kvs_cpu_att_pass(c, w, h, i0, M, ja, jb, max_qpos);
    const att_part pt = att_part_at(c, h, qt, sp, M);
    memcpy(pt.m, w->m, (size_t)M * sizeof(float));
    memcpy(pt.l, w->l, (size_t)M * sizeof(float));
    memcpy(pt.bestv, w->bestv, (size_t)M * sizeof(float));
    memcpy(pt.best, w->best, (size_t)M * sizeof(int32_t));
    memcpy(pt.O, w->O, (size_t)(M * d) * sizeof(float));
}

/* Split-key decoding: merges the splits' partial softmax states of (qt, h) (flash-decoding: m = max
 * m_s, l = sum l_s e^(m_s - m), O = sum O_s e^(m_s - m); argmax from the first split holding the
 * best logit, as one pass in key order would find it), writes the outputs and leaves the final
 * (m, l) in split 0's slot for the statistics pass. */
static void att_merge(const att_ctx *c, att_work *w, int64_t h, int64_t qt) {
    int64_t jend, max_qpos;
    const int64_t M = kvs_cpu_att_rows(c, w, h, qt, &jend, &max_qpos), i0 = qt * c->BQ, d = c->dv;
    for (int64_t r = 0; r < M; r++) {
        float m = -FLT_MAX;
        for (int64_t sp = 0; sp < c->splits; sp++) {
            const float ms = att_part_at(c, h, qt, sp, M).m[r];
            m = ms > m ? ms : m;
        }
        float l = 0.0f, *o = w->O + r * d;
        for (int64_t sp = 0; sp < c->splits; sp++) {
            const att_part pt = att_part_at(c, h, qt, sp, M);
            if (pt.l[r] == 0.0f) continue; /* a split with no visible key adds nothing (a NaN one propagates) */
            const float f = kvs_expf(pt.m[r] - m);
            l += pt.l[r] * f;
            const float *os = pt.O + r * d;
            for (int64_t t = 0; t < d; t++) o[t] += os[t] * f;
            if (pt.best[r] >= 0 && (w->best[r] < 0 || pt.bestv[r] > w->bestv[r])) {
                w->bestv[r] = pt.bestv[r];
                w->best[r] = pt.best[r];
            }
        }
        w->m[r] = m;
        w->l[r] = l;
    }
    kvs_cpu_att_write(c, w, h, i0, M);
    const att_part p0 = att_part_at(c, h, qt, 0, M);
    memcpy(p0.m, w->m, (size_t)M * sizeof(float));
    memcpy(p0.l, w->l, (size_t)M * sizeof(float));
    if (c->probs && att_wants_stats(c, qt)) kvs_cpu_att_zero_probes(c, h, i0, M);
}

/* Split-key decoding: the statistics pass of split sp with the merged (m, l). */
static void att_task_stats(const att_ctx *c, att_work *w, int64_t h, int64_t qt, int64_t sp) {
    if (!att_wants_stats(c, qt)) return;
    int64_t jend, max_qpos;
    const int64_t M = kvs_cpu_att_rows(c, w, h, qt, &jend, &max_qpos), i0 = qt * c->BQ;
    const att_part p0 = att_part_at(c, h, qt, 0, M);
    memcpy(w->m, p0.m, (size_t)M * sizeof(float));
    memcpy(w->l, p0.l, (size_t)M * sizeof(float));
    int64_t ja, jb;
    att_split_keys(c, sp, jend, &ja, &jb);
    kvs_cpu_att_stats(c, w, h, i0, M, ja, jb, max_qpos);
}

/* The f32 panels of the SIMD path, keys [64 j0, +64) of kv head h (block hb = h * nb + j0): K
 * transposed into kt [n_kv_heads][ldk/32][d][32] (zero beyond n_kv), f16 V converted into v32. */
typedef struct att_kt_ctx {
    const att_ctx *c;
    float *kt, *v32;
    int64_t nb;
} att_kt_ctx;

static void att_kt_block(void *cv, int tid, int64_t hb) {
    const att_kt_ctx *kc = cv;
    const att_ctx *c = kc->c;
    const kvs_attention_args *a = c->a;
    const int64_t nkv = a->n_kv, ldk = c->ldk, cap_ = a->capacity, nb = kc->nb, d = c->d, dv = c->dv;
    (void)tid;
    int64_t h = hb / nb, j0 = (hb % nb) * 64, j1 = j0 + 64 < nkv ? j0 + 64 : nkv;
    /* panel p = j / 32 holds keys [32p, 32p+32): dst[p][t][j % 32] */
    float *dst = kc->kt + h * d * ldk;
#if KVS_CPU_HAVE_AVX512
    /* f32 K (the panel path runs on x86 only): the small GEMM's x packing (AVX2 8x8 register
     * transposes), a panel of 32 keys at a time, zero beyond n_kv */
    const int f32k = c->k_dt == KVS_F32;
    if (f32k) {
        const float *kh = (const float *)c->k + h * cap_ * d;
        for (int64_t p = j0 / 32; p < (j0 + 64) / 32 && p * 32 < ldk; p++)
            kvs_cpu_mm_pack_x32_avx2(kh, nkv, d, p * 32, dst + p * d * 32);
    }
#else
    const int f32k = 0;
#endif
    for (int64_t j = j0; j < j1 && !f32k; j++) {
        float *pj = dst + (j / 32) * d * 32 + (j % 32);
        if (c->k_dt == KVS_F16) {
            const uint16_t *src = (const uint16_t *)c->k + (h * cap_ + j) * d;
            float row[64]; /* F16C conversion (the SIMD kernels' CPUs have it), 64 at a time */
            for (int64_t t0 = 0; t0 < d; t0 += 64) {
                const int64_t nt0 = d - t0 < 64 ? d - t0 : 64;
                kvs_cpu_h2f_row_f16c(src + t0, row, nt0);
                for (int64_t t = 0; t < nt0; t++) pj[(t0 + t) * 32] = row[t];
            }
        } else {
            const float *src = (const float *)c->k + (h * cap_ + j) * d;
            for (int64_t t = 0; t < d; t++) pj[t * 32] = src[t];
        }
    }
    if (j1 == nkv && !f32k)
        for (int64_t j = nkv; j < ldk; j++)
            for (int64_t t = 0; t < d; t++) dst[(j / 32) * d * 32 + t * 32 + (j % 32)] = 0.0f;
    if (c->v_dt == KVS_F16) {
        const uint16_t *src = (const uint16_t *)c->v + (h * cap_ + j0) * dv;
        float *vd = kc->v32 + (h * cap_ + j0) * dv;
        kvs_cpu_h2f_row_f16c(src, vd, (j1 - j0) * dv);
    }
}

/* The attention's threads: the context, each thread's work areas in scr (per floats apart: the
 * tile buffers, then from off_km its key_mass partial, off_q8 its query codes, off_e its kept
 * exponentials), the task counts; team: the threads the region got. */
typedef struct att_region {
    const att_ctx *c;
    float *scr;
    size_t per, off_km, off_q8, off_e;
    int64_t M, ldl, n_tiles, n_qt, n_tasks, cap;
    int want_km, keep_exp, team;
} att_region;

/* One thread's view: the region and its work areas. */
typedef struct att_thread_ctx {
    const att_region *r;
    att_work w;
} att_thread_ctx;

/* run t = (kv head, query tile, split): the tile pass */
static void att_run_task(void *cv, int tid, int64_t t) {
    att_thread_ctx *tc = cv;
    const att_ctx *c = tc->r->c;
    const int64_t n_qt = tc->r->n_qt;
    (void)tid;
    att_task(c, &tc->w, t / (n_qt * c->splits), (t / c->splits) % n_qt, t % c->splits);
}

/* task t = (kv head, query tile): merge its splits */
static void att_run_merge(void *cv, int tid, int64_t t) {
    att_thread_ctx *tc = cv;
    (void)tid;
    att_merge(tc->r->c, &tc->w, t / tc->r->n_qt, t % tc->r->n_qt);
}

/* run t: the statistics pass of a split task */
static void att_run_stats(void *cv, int tid, int64_t t) {
    att_thread_ctx *tc = cv;
    const att_ctx *c = tc->r->c;
    const int64_t n_qt = tc->r->n_qt;
    (void)tid;
    att_task_stats(c, &tc->w, t / (n_qt * c->splits), (t / c->splits) % n_qt, t % c->splits);
}

static void att_thread(void *rv, int tid, int team) {
    att_region *r = rv;
    const att_ctx *c = r->c;
    const kvs_attention_args *a = c->a;
    const int64_t M = r->M, d = c->d, dv = c->dv;
    if (tid == 0) r->team = team;
    float *base = r->scr + (size_t)tid * r->per;
    att_thread_ctx tc = {.r = r};
    att_work *w = &tc.w;
    w->Qp = base;
    w->O = w->Qp + M * d;
    w->S = w->O + M * dv;
    w->Kc = w->S + M * ATT_BK;
    w->Vc = w->Kc + ATT_BK * d;
    w->m = w->Vc + ATT_BK * dv;
    w->l = w->m + M;
    w->bestv = w->l + M;
    w->best = (int32_t *)(w->bestv + M);
    w->qpos = w->best + M;
    w->lim = w->qpos + M;
    w->km = r->want_km ? base + r->off_km : NULL;
    const int q8q = c->qqk8 || c->qqk8h; /* the query rows take 8-bit codes */
    w->q8 = q8q ? (int8_t *)(base + r->off_q8) : NULL;
    w->q8d = q8q ? base + r->off_q8 + M * d / 4 : NULL;
    w->q8c = q8q ? (int32_t *)(base + r->off_q8 + M * d / 4 + M * d / 32) : NULL;
    /* every path: both passes call the same exp_row (c->kern's, or the portable one) */
    w->E = r->keep_exp ? base + r->off_e : NULL;
    w->ldl = M * ATT_BK; /* E tile-major: [n_tiles][M][ATT_BK] */
    w->mu = r->keep_exp ? base + r->off_e + M * r->ldl : NULL;
    w->n_tiles = r->n_tiles;
    w->tile_ok = r->keep_exp ? (uint8_t *)(base + r->off_e + M * r->ldl + M * r->n_tiles) : NULL;
    if (w->km) memset(w->km, 0, (size_t)(a->n_kv_heads * r->cap) * sizeof(float));
    const int64_t n_run = r->n_tasks * c->splits;
    kvs_team_for(tid, team, n_run, 1, att_run_task, &tc);
    if (c->splits > 1) { /* (each shared loop ends with a barrier: partials, then merges, then statistics) */
        kvs_team_for(tid, team, r->n_tasks, 0, att_run_merge, &tc);
        if (c->stat_w || c->probs) kvs_team_for(tid, team, n_run, 1, att_run_stats, &tc);
    }
}

kvs_status kvs_cpu_attention(kvs_device *dev, const kvs_attention_args *a) {
    const char *op = "kvs_attention (cpu)";
    att_ctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.G = a->n_heads / a->n_kv_heads;
    c.d = a->head_dim;
    c.dv = a->head_dim_v;
    c.BQ = ATT_M_TARGET / c.G > 0 ? ATT_M_TARGET / c.G : 1;
    c.q = kvs_tensor_host_ptr(a->q);
    c.k = kvs_tensor_host_ptr(a->k);
    c.v = kvs_tensor_host_ptr(a->v);
    c.k_dt = a->k->dtype;
    c.v_dt = a->v->dtype;
    c.k_lo = a->p.k_lo ? kvs_tensor_host_ptr(a->p.k_lo) : NULL;
    c.v_lo = a->p.v_lo ? kvs_tensor_host_ptr(a->p.v_lo) : NULL;
    c.k_rb = (int64_t)kvs_dtype_bytes(c.k_dt, a->head_dim);
    c.v_rb = (int64_t)kvs_dtype_bytes(c.v_dt, a->head_dim_v);
    kvs_cpu_quant_kernels(dev, KVS_OP_attention, &c.qdot, &c.qdec);
    c.qh8dec = kvs_cpu_qh8_decoder(dev, KVS_OP_attention);
    const int k_f16 = c.k_dt == KVS_F16, v_f16 = c.v_dt == KVS_F16;
    c.out = kvs_tensor_host_ptr(a->out);
    c.q_pos = kvs_i32(a->p.q_pos);
    c.k_pos = kvs_i32(a->p.k_pos);
    c.kv_len = kvs_i32(a->p.kv_len);
    c.row_len = kvs_i32(a->p.row_len);
    c.mask = a->p.mask ? kvs_tensor_host_ptr(a->p.mask) : NULL;
    c.row_max = a->p.row_max ? kvs_tensor_host_ptr(a->p.row_max) : NULL;
    c.row_sum = a->p.row_sum ? kvs_tensor_host_ptr(a->p.row_sum) : NULL;
    c.lse_extra = a->p.lse_extra ? kvs_tensor_host_ptr(a->p.lse_extra) : NULL;
    c.argmax = a->p.argmax ? kvs_tensor_host_ptr(a->p.argmax) : NULL;
    c.probs = a->p.probs ? kvs_tensor_host_ptr(a->p.probs) : NULL;

    /* ---- device-side values the front-end could not check ---- */
    if (c.kv_len)
        for (int64_t h = 0; h < a->n_kv_heads; h++)
            if (c.kv_len[h] < 0 || c.kv_len[h] > a->n_kv)
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: kv_len[%lld] = %d outside [0, n_kv=%lld]", op,
                                 (long long)h, c.kv_len[h], (long long)a->n_kv);
    const int32_t *stat_rows = kvs_i32(a->p.stat_rows), *probe_rows = kvs_i32(a->p.probe_rows);
    for (int64_t e = 0; stat_rows && e < a->n_stat_rows; e++)
        if (stat_rows[e] < 0 || stat_rows[e] >= a->n_q)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: stat_rows[%lld] = %d outside [0, n_q=%lld)", op,
                             (long long)e, stat_rows[e], (long long)a->n_q);
    for (int64_t e = 0; probe_rows && e < a->n_probe; e++)
        if (probe_rows[e] < 0 || probe_rows[e] >= a->n_q)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: probe_rows[%lld] = %d outside [0, n_q=%lld)", op,
                             (long long)e, probe_rows[e], (long long)a->n_q);

    const int64_t n_qt = (a->n_q + c.BQ - 1) / c.BQ;
    const int64_t n_tasks = n_qt * a->n_kv_heads;
    const int64_t M = ((c.BQ * c.G + 7) & ~(int64_t)7), d = c.d, dv = c.dv; /* rows per task, padded to 8 */
    double flops = 2.0 * (double)a->n_q * (double)a->n_kv * (double)(d + dv) * (double)a->n_heads;
    int nt = kvs_cpu_nt(dev, flops / 8.0);
    (void)nt; /* unused without OpenMP */
    /* split-key decoding (flash-decoding) when the (query tile, kv head) tasks cannot keep the
     * threads busy: about two tasks a thread */
    const int64_t key_tiles = (a->n_kv + ATT_BK - 1) / ATT_BK;
    int64_t splits = n_tasks < nt ? (2 * nt + n_tasks - 1) / n_tasks : 1;
    const int variant = kvs_device_variant(dev, KVS_OP_attention);
    if (variant & KVS_CPU_V_SPLIT) splits = 3; /* variants *-split: split-key decoding on every call */
    if (splits > key_tiles) splits = key_tiles;
    if (splits < 1) splits = 1;
    c.splits = splits;
    c.split_keys = (key_tiles + splits - 1) / splits * ATT_BK;
    if (nt > n_tasks * splits) nt = (int)(n_tasks * splits);
    const int want_km = a->p.key_mass != NULL;
    const int64_t cap = a->capacity;

    /* ---- scratch: host metadata + per-thread work areas ---- */
    const size_t off_km = (size_t)(M * d + M * dv + M * ATT_BK + ATT_BK * d + ATT_BK * dv + 6 * M + 16);
    size_t per = off_km;
    if (want_km) per += (size_t)(a->n_kv_heads * cap);
    /* the 8-bit query codes of the -vnni / -q8 variants: [M][d] i8, [M][d/32] f32, [M][d/4] +
     * [M][d/32] i32 */
    const size_t off_q8 = per;
    const int q8 = kvs_cpu_att_q8(dev); /* forced -vnni / -q8, or automatic on x86 (cpu_kernels.h) */
    if (q8 && kvs_dtype_is_quant(c.k_dt)) per += (size_t)(M * d / 4 + M * d / 32 + M * d / 4 + M * d / 32 + 16);
    /* the exponentials kept for the statistics pass (att_work.E): [n_tiles][M][ATT_BK] (M * ldl
     * floats, ldl: n_kv rounded up to ATT_BK) + the tiles' maxima
     * + tile flags, without split keys and up to ATT_KEEP_WORDS a thread; beyond that the
     * statistics pass recomputes them */
    const int64_t ldl = (a->n_kv + ATT_BK - 1) / ATT_BK * ATT_BK, n_tiles = ldl / ATT_BK;
    const int keep_exp = splits == 1 && (want_km || a->n_probe) && M * ldl <= ATT_KEEP_WORDS;
    const size_t off_e = per;
    /* E [n_tiles][M][ATT_BK], mu [M][n_tiles], tile flags */
    if (keep_exp) per += (size_t)(M * ldl + M * n_tiles + n_tiles / 4 + 16);
    size_t meta = (size_t)(want_km ? a->n_q : 0) + (size_t)(a->n_probe ? 2 * a->n_q + 2 + a->n_probe : 0);
    c.part_words = M * (dv + 4);
    const size_t part = splits > 1 ? (size_t)(n_tasks * splits * c.part_words) : 0;
    /* the device's grow-only scratch: no allocation (and no page faults) per call */
    float *scr = kvs_cpu_scratch(dev, ((size_t)nt * per + part + meta) * sizeof(float) + 64);
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: cannot allocate scratch", op);
    c.part = splits > 1 ? scr + (size_t)nt * per : NULL;
    int32_t *metap = (int32_t *)(scr + (size_t)nt * per + part);
    if (want_km) {
        int32_t *sw = metap;
        metap += a->n_q;
        if (stat_rows) {
            memset(sw, 0, (size_t)a->n_q * sizeof *sw);
            for (int64_t e = 0; e < a->n_stat_rows; e++) sw[stat_rows[e]]++;
        } else {
            for (int64_t i = 0; i < a->n_q; i++) sw[i] = 1;
        }
        c.stat_w = sw;
    }
    if (a->n_probe) {
        int32_t *start = metap, *list = metap + a->n_q + 1, *fill = list + a->n_probe;
        memset(start, 0, (size_t)(a->n_q + 1) * sizeof *start);
        for (int64_t e = 0; e < a->n_probe; e++) start[probe_rows[e] + 1]++;
        for (int64_t i = 0; i < a->n_q; i++) start[i + 1] += start[i];
        memcpy(fill, start, (size_t)a->n_q * sizeof *fill);
        for (int64_t e = 0; e < a->n_probe; e++) list[fill[probe_rows[e]]++] = (int32_t)e;
        c.probe_start = start;
        c.probe_list = list;
    }

    /* SIMD kernels: c.kern is the ISA's table (AVX-512, AVX2, NEON) for every head size; the portable
     * variants keep c.kern NULL (the reference kernels). Which tile products run is decided apart
     * (c.fast, c.dec below): the x86 panel and decoding kernels take any d_k / d_v (masked tails;
     * the decoding ones run from 16 up, narrower heads take cblas products); NEON's decoding kernels
     * need d_k, d_v % 4 == 0 (other sizes: cblas products with NEON's row kernels). The panel path (AVX-512, AVX2) runs when there are enough query rows per kv head to
     * amortise a transposed f32 copy of K. The fused block kernels (qqk, qpv, qqk8, ...) only meet
     * block-quantized K / V, whose widths are multiples of 32. */
    float *kt_buf = NULL, *v_buf = NULL;
    const int isa = kvs_cpu_isa(dev, KVS_OP_attention);
#if KVS_CPU_HAVE_AVX512
    c.kern = isa == KVS_ISA_AVX512 ? &kvs_cpu_att_avx512 : isa == KVS_ISA_AVX2 ? &kvs_cpu_att_avx2 : NULL;
    if (c.kern) {
        c.qpv = isa == KVS_ISA_AVX512 ? kvs_cpu_att_pv_q_avx512 : kvs_cpu_att_pv_q_avx2;
        c.qqk = isa == KVS_ISA_AVX512 ? kvs_cpu_att_qk_q_avx512 : kvs_cpu_att_qk_q_avx2;
        /* variants avx512-vnni / avx2-q8, and the automatic choice on x86 (kvs_cpu_att_q8: VNNI on an
         * AVX-512 ISA, else the AVX2 ISA): Q.K^T on 8-bit query codes for q8_0 / q4_0 K
         * (attention_q8.h; the other K types keep the f32 query) */
        const int vnni = isa == KVS_ISA_AVX512;
        c.q8off = kvs_cpu_att_q8_offset(c.k_dt, vnni);
        if (q8 && c.q8off >= 0 && !c.k_lo)
            c.qqk8 = vnni ? kvs_cpu_att_qk_q8_vnni : kvs_cpu_att_qk_q8_avx2;
        if (q8 && (c.v_dt == KVS_Q8_0 || c.v_dt == KVS_Q4_0) && !c.v_lo)
            c.qpv8 = vnni ? kvs_cpu_att_pv_q8_vnni : kvs_cpu_att_pv_q8_avx2;
        /* qh8 (k_lo / v_lo) and q4_1 (the draft's 4-bit view): the same 8-bit schemes, read in place
         * or repacked per tile into the q8_0 / q4_0 kernels' blocks (attention_q8.h, "qh8 and q4_1");
         * head_dim <= 256 */
        if (q8 && c.k_dt == KVS_Q4_1 && d <= 256) {
            c.qqk8h = vnni ? kvs_cpu_att_qk_qh8_vnni : kvs_cpu_att_qk_qh8_avx2;
            c.q8off = kvs_cpu_att_q8_offset(c.k_lo ? KVS_Q8_0 : KVS_Q4_0, vnni);
        }
        if (q8 && c.v_dt == KVS_Q4_1 && d <= 256)
            c.qpv8h = vnni ? kvs_cpu_att_pv_qh8_vnni : kvs_cpu_att_pv_qh8_avx2;
    }
#endif
#if KVS_CPU_HAVE_NEON
    if (isa == KVS_ISA_NEON) c.kern = &kvs_cpu_att_neon;
#endif
    (void)isa;
    /* the f32 panel path: F32/F16 K and V only (a block or bf16 cache takes the decoding kernels);
     * NEON has no panel kernels (kern->qk NULL) */
    const int panel_types = (c.k_dt == KVS_F32 || k_f16) && (c.v_dt == KVS_F32 || v_f16);
    c.fast = c.kern && c.kern->qk && panel_types && a->n_q * c.G >= 8 && a->n_q >= 4;
    if (c.fast) {
        c.ldk = (a->n_kv + 31) & ~(int64_t)31;
        kt_buf = malloc((size_t)(a->n_kv_heads * d * c.ldk) * sizeof(float));
        if (v_f16) v_buf = malloc((size_t)(a->n_kv_heads * a->capacity * dv) * sizeof(float));
        if (!kt_buf || (v_f16 && !v_buf)) {
            free(kt_buf);
            free(v_buf);
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the transposed K", op);
        }
        c.KT = kt_buf;
        att_kt_ctx kc = {.c = &c, .kt = kt_buf, .v32 = v_buf, .nb = (a->n_kv + 63) / 64};
        kvs_par_for(nt, a->n_kv_heads * kc.nb, 0, att_kt_block, &kc);
        c.V32 = v_f16 ? v_buf : (const float *)c.v;
    }
    /* the decoding kernels over row-major tiles (x86: d_k, d_v >= 16; NEON: multiples of 4), else cblas */
    c.dec = c.kern && !c.fast && d % c.kern->dec_align == 0 && dv % c.kern->dec_align == 0 &&
            d >= c.kern->dec_min && dv >= c.kern->dec_min;

    kvs_cpu_blas_threads(1);
    att_region r = {.c = &c, .scr = scr, .per = per, .off_km = off_km, .off_q8 = off_q8, .off_e = off_e, .M = M,
                    .ldl = ldl, .n_tiles = n_tiles, .n_qt = n_qt, .n_tasks = n_tasks, .cap = cap,
                    .want_km = want_km, .keep_exp = keep_exp, .team = 1};
    kvs_par_team(nt, att_thread, &r);
    const int team = r.team; /* threads the region got (key_mass partials to reduce) */

    if (want_km) {
        float *km = kvs_tensor_host_ptr(a->p.key_mass);
        const float invG = 1.0f / (float)c.G;
        for (int64_t h = 0; h < a->n_kv_heads; h++) {
            int64_t len = c.kv_len ? c.kv_len[h] : a->n_kv;
            for (int64_t j = 0; j < len; j++) {
                float s = 0.0f;
                for (int th = 0; th < team; th++) s += scr[(size_t)th * per + off_km + (size_t)(h * cap + j)];
                s *= invG;
                km[h * cap + j] = a->p.key_mass_accumulate ? km[h * cap + j] + s : s;
            }
        }
    }
    free(kt_buf);
    free(v_buf);
    return KVS_OK;
}
