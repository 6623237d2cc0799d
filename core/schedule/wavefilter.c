/* WaveFilter: a wavelet-guided sparse KV keep-set over any DLM cache schedule (our design of
 * arXiv 2606.00724, whose code and body are not public; see METHODS.md and schedule.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_util.h"
#include "schedule/dwt_host.h"

kvs_wavefilter_params kvs_wavefilter_params_default(void) {
    kvs_wavefilter_params p = {.family = KVS_WAVELET_HAAR, .levels = 3, .rho = 0.5f, .budget = 0.5f, .n_sink = 4,
                               .n_recent = 16, .keep_mass = 0.0f, .dev = NULL};
    return p;
}

typedef struct sched_wf {
    kvs_wavefilter_params p;
    kvs_dlm_schedule *base;
    int L, nkvh;
    int64_t n;
    kvs_layer_plan *layers;     /* [L] the base plan with our additions */
    kvs_layer_plan *over;       /* [L] copies of plans a base hook substitutes */
    kvs_layer_hook *bhook;      /* [L] the base plans' hooks */
    void **buser;               /* [L] */
    kvs_ibuf *stat;             /* [L] stat rows we add (the block's rows within the layer's rows) */
    int32_t *keep;              /* [L][nkvh][n] keep-sets of the current block */
    int64_t *n_keep;            /* [L][nkvh] */
    int have_keep, collect, sparse;
    int64_t block_start, block_end;
    kvs_dlm_schedule_ops ops;   /* wf_ops with the base's name and cache flags */
    char name[64];
    kvs_dlm_schedule_stats st;
    kvs_device *own_dev;        /* keep_mass without p.dev: a CPU device of our own */
} sched_wf;

static void wf_free_buffers(sched_wf *s) {
    if (s->stat)
        for (int l = 0; l < s->L; l++) kvs_ibuf_free(&s->stat[l]);
    free(s->stat);
    free(s->layers);
    free(s->over);
    free(s->bhook);
    free(s->buser);
    free(s->keep);
    free(s->n_keep);
    s->stat = NULL;
    s->layers = s->over = NULL;
    s->bhook = NULL;
    s->buser = NULL;
    s->keep = NULL;
    s->n_keep = NULL;
}

static kvs_status wf_alloc(sched_wf *s, int64_t n, int L, int nkvh) {
    wf_free_buffers(s);
    s->L = L;
    s->n = n;
    s->nkvh = nkvh;
    s->stat = calloc((size_t)L, sizeof *s->stat);
    s->layers = calloc((size_t)L, sizeof *s->layers);
    s->over = calloc((size_t)L, sizeof *s->over);
    s->bhook = calloc((size_t)L, sizeof *s->bhook);
    s->buser = calloc((size_t)L, sizeof *s->buser);
    s->keep = malloc((size_t)L * (size_t)nkvh * (size_t)n * sizeof *s->keep);
    s->n_keep = calloc((size_t)L * (size_t)nkvh, sizeof *s->n_keep);
    if (!s->stat || !s->layers || !s->over || !s->bhook || !s->buser || !s->keep || !s->n_keep)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule wavefilter: out of host memory");
    s->have_keep = 0;
    return KVS_OK;
}

static kvs_status wf_begin(void *self, int64_t n_tokens, int n_layers) {
    sched_wf *s = self;
    s->have_keep = 0;
    memset(&s->st, 0, sizeof s->st);
    if (s->base->ops->begin) KVS_TRY(s->base->ops->begin(s->base->self, n_tokens, n_layers));
    return KVS_OK;
}

/* Adds our fields to a layer plan that the forward runs as layer l. */
static void wf_decorate(sched_wf *s, kvs_layer_plan *lp, int l) {
    if (lp->hook) {
        s->bhook[l] = lp->hook;
        s->buser[l] = lp->hook_user;
    }
    if (s->sparse) {
        lp->keep = s->keep + (int64_t)l * s->nkvh * s->n;
        lp->n_keep = s->n_keep + (int64_t)l * s->nkvh;
        lp->keep_stride = s->n;
    }
}

static const kvs_layer_plan *wf_hook(void *user, int l, const kvs_layer_stats *st);

static void wf_set_hook(sched_wf *s, kvs_layer_plan *lp, int l) {
    s->bhook[l] = NULL;
    s->buser[l] = NULL;
    wf_decorate(s, lp, l);
    if (s->bhook[l]) {
        lp->hook = wf_hook;
        lp->hook_user = s;
    }
}

static const kvs_layer_plan *wf_hook(void *user, int l, const kvs_layer_stats *st) {
    sched_wf *s = user;
    if (!s->bhook[l]) return NULL;
    const kvs_layer_plan *rest = s->bhook[l](s->buser[l], l, st);
    if (!rest) return NULL;
    for (int j = l + 1; j < s->L; j++) {
        s->over[j] = rest[j - l - 1];
        wf_set_hook(s, &s->over[j], j);
    }
    return &s->over[l + 1];
}

static kvs_status wf_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    sched_wf *s = self;
    if (!s->layers || s->L != v->n_layers || s->n != v->n_tokens || s->nkvh != v->n_kv_heads)
        KVS_TRY(wf_alloc(s, v->n_tokens, v->n_layers, v->n_kv_heads));
    KVS_TRY(s->base->ops->plan(s->base->self, v, out));
    s->st.steps++;
    if (v->step_in_block == 0 || v->block_start != s->block_start) s->have_keep = 0;
    s->block_start = v->block_start;
    s->block_end = v->block_end;
    s->collect = !s->have_keep;
    s->sparse = s->have_keep;
    const kvs_layer_plan *bl = out->plan.layers;
    const int32_t *rows = NULL;
    int64_t nr = v->n_tokens;
    for (int l = 0; l < s->L; l++) {
        kvs_layer_plan lp = bl ? bl[l] : (kvs_layer_plan){0};
        if (lp.rows) {
            rows = lp.rows;
            nr = lp.n_rows;
        }
        if (s->collect && !lp.stat_all_rows && lp.n_stat_rows == 0) {
            /* the signal: attention mass from the layer's rows inside the block */
            kvs_ibuf *b = &s->stat[l];
            b->n = 0;
            KVS_TRY(kvs_ibuf_reserve(b, nr));
            for (int64_t i = 0; i < nr; i++) {
                int64_t pos = rows ? rows[i] : i;
                if (pos >= v->block_start && pos < v->block_end) b->p[b->n++] = (int32_t)i;
            }
            if (b->n == 0) lp.stat_all_rows = 1;
            lp.stat_rows = b->p;
            lp.n_stat_rows = b->n;
        }
        s->layers[l] = lp;
        wf_set_hook(s, &s->layers[l], l);
    }
    out->plan.layers = s->layers;
    return KVS_OK;
}

typedef struct scored {
    double v;
    int32_t i;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Builds every (layer, kv head) keep-set of the block from the signals sig[L*H][n]:
 *  1. always: sinks, the block, the n_recent rows before it;
 *  2. skim: regions of 2^J rows ranked by their level-J approximation coefficient; the best whole
 *     regions are kept while they fit in rho of the free budget;
 *  3. focus: the m = max(1, left/2) largest detail coefficients (all levels) are transformed back
 *     alone (approximation zeroed); rows where that reconstruction is positive are the sharp local
 *     peaks, taken by signal height;
 *  4. fill: the highest remaining signal up to B = ceil(budget * n) rows. */
/* The PSA-style keep-set (keep_mass > 0; Zhou et al. 2025, arXiv 2503.00392): per (layer, kv head)
 * row r of sig [R][n], the always-kept rows (sinks, block, recent) plus the fewest other rows, by
 * signal height, whose mass reaches keep_mass of the other rows' mass (kvs_topp over sig with the
 * always-kept rows zeroed, on p.dev or a CPU device of our own), at most ceil(budget * n) rows in
 * all unless the always-kept rows alone pass that. Skim and focus are not used. */
static kvs_status wf_build_mass(sched_wf *s, const float *sig, int64_t n, int64_t B) {
    const int64_t R = (int64_t)s->L * s->nkvh;
    kvs_device *dev = s->p.dev;
    if (!dev) {
        if (!s->own_dev) {
            kvs_device_params dp = kvs_device_params_default();
            dp.backend = KVS_BACKEND_CPU;
            KVS_TRY(kvs_device_open(&s->own_dev, &dp));
        }
        dev = s->own_dev;
    }
    float *opt = malloc((size_t)(R * n) * sizeof *opt);
    int32_t *cnt = malloc((size_t)R * sizeof *cnt);
    scored *sc = malloc((size_t)n * sizeof *sc);
    uint8_t *must = malloc((size_t)n), *mask = malloc((size_t)n);
    kvs_tensor *x = NULL, *ct = NULL;
    kvs_status st = (opt && cnt && sc && must && mask) ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule wavefilter: out of host memory");
    int64_t n_must = 0;
    if (st == KVS_OK) {
        memset(must, 0, (size_t)n);
        for (int64_t j = 0; j < s->p.n_sink && j < n; j++) must[j] = 1;
        for (int64_t j = s->block_start; j < s->block_end && j < n; j++) must[j] = 1;
        for (int64_t j = s->block_start - s->p.n_recent; j < s->block_start; j++)
            if (j >= 0 && j < n) must[j] = 1;
        for (int64_t j = 0; j < n; j++) n_must += must[j];
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < n; j++) opt[r * n + j] = must[j] ? 0.0f : sig[r * n + j];
    }
    if (st == KVS_OK) st = kvs_tensor_new(&x, dev, KVS_F32, n, R, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&ct, dev, KVS_I32, R, 0, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_upload(x, opt, 0, (size_t)(R * n) * sizeof *opt);
    kvs_topp_params tp = kvs_topp_params_default();
    tp.p = s->p.keep_mass;
    if (st == KVS_OK) st = kvs_topp(dev, x, ct, NULL, &tp);
    if (st == KVS_OK) st = kvs_tensor_download(ct, cnt, 0, (size_t)R * sizeof *cnt);
    for (int64_t r = 0; st == KVS_OK && r < R; r++) {
        int64_t extra = cnt[r], room = B - n_must > 0 ? B - n_must : 0;
        if (extra > room) extra = room;
        int64_t m = 0;
        for (int64_t j = 0; j < n; j++)
            if (!must[j] && opt[r * n + j] > 0.0f && isfinite(opt[r * n + j])) sc[m++] = (scored){opt[r * n + j], (int32_t)j};
        qsort(sc, (size_t)m, sizeof *sc, cmp_scored); /* the order kvs_topp ranks by */
        memcpy(mask, must, (size_t)n);
        for (int64_t i = 0; i < extra && i < m; i++) mask[sc[i].i] = 1;
        int32_t *keep = s->keep + r * n;
        s->n_keep[r] = 0;
        for (int64_t j = 0; j < n; j++)
            if (mask[j]) keep[s->n_keep[r]++] = (int32_t)j;
    }
    free(opt);
    free(cnt);
    free(sc);
    free(must);
    free(mask);
    kvs_tensor_destroy(&x);
    kvs_tensor_destroy(&ct);
    return st;
}

static kvs_status wf_build(sched_wf *s, const float *sig, int64_t n) {
    int64_t R = (int64_t)s->L * s->nkvh;
    int J = s->p.levels;
    while (J > 1 && ((int64_t)1 << J) > n) J--;
    int64_t nc = kvs_dwt_length(n, J);
    if (nc < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "schedule wavefilter: %lld rows, %d levels", (long long)n, J);
    int64_t B = (int64_t)ceil((double)s->p.budget * (double)n - 1e-3); /* f32 budgets: 0.8f * 40 = 32 */
    if (B < 1) B = 1;
    if (B > n) B = n;
    /* budget 1 keeps every row; so does keep_mass 1 under budget 1 (the anchor: rows that got no key
     * mass at all, which some backends' statistics round to 0, stay as well) */
    if (s->p.keep_mass > 0.0f && !(s->p.keep_mass >= 1.0f && s->p.budget >= 1.0f)) return wf_build_mass(s, sig, n, B);
    if (s->p.budget >= 1.0f) {
        for (int64_t r = 0; r < R; r++) {
            for (int64_t j = 0; j < n; j++) s->keep[r * n + j] = (int32_t)j;
            s->n_keep[r] = n;
        }
        return KVS_OK;
    }
    float *coef = malloc((size_t)(R * nc) * sizeof *coef);
    float *focus = malloc((size_t)(R * n) * sizeof *focus);
    uint8_t *kept = malloc((size_t)(R * n));
    int64_t *count = calloc((size_t)R, sizeof *count);
    scored *sc = malloc((size_t)(n > nc ? n : nc) * sizeof *sc);
    double *dx = malloc((size_t)(n + nc + 2 * (n + 2)) * sizeof *dx), *dy = dx ? dx + n : NULL, *dscr = dx ? dy + nc : NULL;
    kvs_status st = (!coef || !focus || !kept || !count || !sc || !dx)
                        ? kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule wavefilter: out of host memory")
                        : KVS_OK;
    /* the host DWT (float64) of every (layer, kv head) signal row */
    for (int64_t r = 0; r < R && st == KVS_OK; r++) {
        for (int64_t j = 0; j < n; j++) dx[j] = sig[r * n + j];
        kvs_host_dwt_row(dx, n, s->p.family, J, dy, dscr);
        for (int64_t i = 0; i < nc; i++) coef[r * nc + i] = (float)dy[i];
    }
    int64_t lenJ = kvs_dwt_level_length(n, J), nd = nc - lenJ, region = (int64_t)1 << J;
#define KEEP(j)                                                                                                        \
    do {                                                                                                               \
        if (!kp[(j)]) {                                                                                                \
            kp[(j)] = 1;                                                                                               \
            (*cnt)++;                                                                                                  \
        }                                                                                                              \
    } while (0)
    for (int64_t r = 0; r < R && st == KVS_OK; r++) {
        uint8_t *kp = kept + r * n;
        int64_t *cnt = &count[r];
        float *c = coef + r * nc;
        memset(kp, 0, (size_t)n);
        for (int64_t j = 0; j < s->p.n_sink && j < n; j++) KEEP(j);
        for (int64_t j = s->block_start; j < s->block_end && j < n; j++) KEEP(j);
        for (int64_t j = s->block_start - s->p.n_recent; j < s->block_start; j++)
            if (j >= 0 && j < n) KEEP(j);
        int64_t free_budget = B - *cnt;
        if (free_budget > 0) {
            int64_t skim = (int64_t)floor((double)s->p.rho * (double)free_budget), taken = 0;
            for (int64_t i = 0; i < lenJ; i++) sc[i] = (scored){c[i], (int32_t)i};
            qsort(sc, (size_t)lenJ, sizeof *sc, cmp_scored);
            for (int64_t i = 0; i < lenJ && taken < skim; i++) {
                int64_t lo = (int64_t)sc[i].i * region, hi = lo + region < n ? lo + region : n, add = 0;
                for (int64_t j = lo; j < hi; j++) add += !kp[j];
                if (add == 0 || taken + add > skim) continue;
                for (int64_t j = lo; j < hi; j++) KEEP(j);
                taken += add;
            }
        }
        /* focus coefficients: the largest |detail|, the rest and the approximation zeroed */
        int64_t left = B - *cnt, m = left / 2 > 1 ? left / 2 : 1;
        for (int64_t i = 0; i < nd; i++) sc[i] = (scored){fabs((double)c[lenJ + i]), (int32_t)i};
        qsort(sc, (size_t)nd, sizeof *sc, cmp_scored);
        for (int64_t i = m; i < nd; i++) c[lenJ + sc[i].i] = 0.0f;
        memset(c, 0, (size_t)lenJ * sizeof *c);
    }
    for (int64_t r = 0; r < R && st == KVS_OK; r++) {
        for (int64_t i = 0; i < nc; i++) dy[i] = coef[r * nc + i];
        kvs_host_idwt_row(dy, n, s->p.family, J, dx, dscr);
        for (int64_t j = 0; j < n; j++) focus[r * n + j] = (float)dx[j];
    }
    for (int64_t r = 0; r < R && st == KVS_OK; r++) {
        uint8_t *kp = kept + r * n;
        int64_t *cnt = &count[r];
        const float *f = focus + r * n, *sg = sig + r * n;
        /* focus: the peaks, by signal height; then fill by signal */
        for (int pass = 0; pass < 2 && *cnt < B; pass++) {
            int64_t m = 0;
            for (int64_t j = 0; j < n; j++)
                if (!kp[j] && (pass == 1 || f[j] > 0.0f)) sc[m++] = (scored){sg[j], (int32_t)j};
            qsort(sc, (size_t)m, sizeof *sc, cmp_scored);
            for (int64_t i = 0; i < m && *cnt < B; i++) KEEP(sc[i].i);
        }
        int32_t *keep = s->keep + r * n;
        s->n_keep[r] = 0;
        for (int64_t j = 0; j < n; j++)
            if (kp[j]) keep[s->n_keep[r]++] = (int32_t)j;
    }
#undef KEEP
    free(dx);
    free(coef);
    free(focus);
    free(kept);
    free(count);
    free(sc);
    return st;
}

static kvs_status wf_feedback(void *self, const kvs_dlm_view *v, const kvs_step_result *r) {
    sched_wf *s = self;
    if (s->base->ops->feedback) KVS_TRY(s->base->ops->feedback(s->base->self, v, r));
    int64_t n = s->n;
    if (s->sparse) {
        for (int64_t i = 0; i < (int64_t)s->L * s->nkvh; i++) {
            s->st.kept_rows += s->n_keep[i];
            s->st.context_rows += n;
        }
    }
    if (!s->collect) return KVS_OK;
    if (!r->layers) return kvs_error(KVS_ERR_STATE, "schedule wavefilter: the step result has no layer statistics");
    float *sig = malloc((size_t)s->L * (size_t)s->nkvh * (size_t)n * sizeof *sig);
    if (!sig) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule wavefilter: out of host memory");
    for (int l = 0; l < s->L; l++) {
        const kvs_layer_stats *ls = &r->layers[l];
        if (!ls->key_mass || ls->n_kv != n) {
            free(sig);
            return kvs_error(KVS_ERR_STATE, "schedule wavefilter: layer %d returned no key mass over %lld rows", l, (long long)n);
        }
        memcpy(sig + (int64_t)l * s->nkvh * n, ls->key_mass, (size_t)s->nkvh * (size_t)n * sizeof *sig);
    }
    kvs_status st = wf_build(s, sig, n);
    free(sig);
    if (st == KVS_OK) s->have_keep = 1;
    return st;
}

static void wf_stats(void *self, kvs_dlm_schedule_stats *out) {
    sched_wf *s = self;
    kvs_dlm_schedule_stats b;
    memset(&b, 0, sizeof b);
    if (s->base->ops->stats) s->base->ops->stats(s->base->self, &b);
    b.kept_rows = s->st.kept_rows;
    b.context_rows = s->st.context_rows;
    *out = b;
}

static void wf_destroy(void *self) {
    sched_wf *s = self;
    if (!s) return;
    wf_free_buffers(s);
    kvs_dlm_schedule_destroy(&s->base);
    kvs_device_destroy(&s->own_dev);
    free(s);
}

static const kvs_dlm_schedule_ops wf_ops = {
    .name = "wavefilter", .plan = wf_plan, .feedback = wf_feedback, .begin = wf_begin, .destroy = wf_destroy,
    .stats = wf_stats};

kvs_status kvs_dlm_schedule_wavefilter(kvs_dlm_schedule **out, kvs_dlm_schedule *base, const kvs_wavefilter_params *pp) {
    if (!out || !base) {
        kvs_dlm_schedule_destroy(&base);
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_wavefilter: NULL argument");
    }
    *out = NULL;
    /* SPA-Cache's steps compute their rows from singular-proxy deltas (the forward's spa_delta path),
     * which takes no keep-set: the sparse steps could only fail mid-decode */
    if (strcmp(kvs_dlm_schedule_name(base), "spa") == 0) {
        kvs_dlm_schedule_destroy(&base);
        return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_dlm_schedule_wavefilter: WaveFilter does not run over spa (its "
                         "proxy-delta steps take no sparse keep-set); bases: none, prefix, dual, delayed, elastic, d2cache");
    }
    kvs_wavefilter_params p = pp ? *pp : kvs_wavefilter_params_default();
    /* one message per field: the first one out of range, named alone */
    const char *op = "kvs_dlm_schedule_wavefilter";
    char why[96] = "";
    double lo[8];
    if (kvs_wavelet_filter(p.family, lo) == 0) snprintf(why, sizeof why, "family %d (want haar, db2 or db4)", (int)p.family);
    else if (p.levels < 1 || p.levels > 8) snprintf(why, sizeof why, "levels %d outside 1..8", p.levels);
    else if (!(p.rho >= 0.0f && p.rho <= 1.0f)) snprintf(why, sizeof why, "rho %g outside [0, 1]", (double)p.rho);
    else if (!(p.budget > 0.0f && p.budget <= 1.0f)) snprintf(why, sizeof why, "budget %g outside (0, 1]", (double)p.budget);
    else if (p.n_sink < 0) snprintf(why, sizeof why, "n_sink %d (want >= 0)", p.n_sink);
    else if (p.n_recent < 0) snprintf(why, sizeof why, "n_recent %d (want >= 0)", p.n_recent);
    else if (!(p.keep_mass >= 0.0f && p.keep_mass <= 1.0f)) snprintf(why, sizeof why, "keep_mass %g outside [0, 1]", (double)p.keep_mass);
    if (why[0]) {
        kvs_dlm_schedule_destroy(&base);
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %s", op, why);
    }
    sched_wf *s = calloc(1, sizeof *s);
    if (!s) {
        kvs_dlm_schedule_destroy(&base);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_wavefilter: out of host memory");
    }
    s->p = p;
    s->base = base;
    s->block_start = -1;
    s->ops = wf_ops;
    snprintf(s->name, sizeof s->name, "%s+wavefilter", kvs_dlm_schedule_name(base));
    s->ops.name = s->name;
    s->ops.cache_flags = kvs_dlm_schedule_cache_flags(base);
    kvs_status st = kvs_dlm_schedule_custom(out, &s->ops, s);
    if (st != KVS_OK) wf_destroy(s);
    return st;
}
