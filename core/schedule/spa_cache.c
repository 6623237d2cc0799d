/* SPA-Cache: singular proxies for adaptive caching (Sun et al. 2026, arXiv 2602.02544; reference code
 * wenhao728/spa-cache, spac/cache.py SpaCache.check_update and get_update_ratio, spac/llada/hooks.py,
 * spac/sequence.py). See schedule.h for the method, its defaults and where we deviate. Host logic:
 * the proxies are computed by the forward on the device (kvs_layer_plan.select); this file decides. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_util.h"

kvs_spa_params kvs_spa_params_default(void) {
    kvs_spa_params p = {.rank = 0,
                        .key = 0,
                        .budget = 0.25f,
                        .uniform = 0,
                        .min_ratio = 0.0625f,
                        .peak_pos = 0.75f,
                        .start = 0.12f,
                        .end = 0.52f,
                        .refresh = 50,
                        .refresh_gen = 7};
    return p;
}

kvs_status kvs_spa_layer_ratios(const kvs_spa_params *p, int n_layers, double *ratio) {
    if (!p || !ratio || n_layers < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_spa_layer_ratios: NULL argument or %d layers", n_layers);
    /* reference cache.py _split_gaussian_frequency with scale = max_update_ratio / freq_peak:
     * t = l / L, a Gaussian of height `budget` centred at peak_pos whose left width puts it at
     * start * budget at t = 0 and whose right width puts it at end * budget at t = 1; the left side
     * clipped from below at min_ratio (freq_min), the right side not */
    double mu = p->peak_pos, B = p->budget;
    double sl = sqrt(-(mu * mu) / (2.0 * log(p->start)));
    double sr = sqrt(-((1.0 - mu) * (1.0 - mu)) / (2.0 * log(p->end)));
    ratio[0] = 1.0; /* check_update: "always update at the first layer" */
    for (int l = 1; l < n_layers; l++) {
        double r;
        if (p->uniform) {
            r = B;
        } else {
            double t = (double)l / (double)n_layers;
            if (t < mu) {
                r = B * exp(-(t - mu) * (t - mu) / (2.0 * sl * sl));
                if (r < p->min_ratio) r = p->min_ratio;
            } else {
                r = B * exp(-(t - mu) * (t - mu) / (2.0 * sr * sr));
            }
        }
        ratio[l] = r > 1.0 ? 1.0 : r;
    }
    return KVS_OK;
}

typedef struct spa_key {
    double cos;
    int32_t t;
} spa_key;

typedef struct sched_spa {
    kvs_spa_params p;
    int L;
    int64_t n;
    int rank;                /* of the stored proxies (0: none yet) */
    int all;                 /* every layer's ratio is 1: every step runs every row (the anchor) */
    double *ratio;           /* [L] */
    float *ref;              /* [L][n][rank] each candidate's proxy at the previous step */
    uint8_t *has;            /* [L][n] 1: the layer stored the row's residual delta */
    uint8_t *force;          /* [n] scratch marks */
    spa_key *ord;            /* [n] scratch: candidates by cosine */
    int mode;                /* this step: 0 partial, 1 full (every row), 2 generation rows refresh */
    kvs_ibuf cand, every, logits; /* every: all n rows (layer 0) */
    kvs_ibuf *sel;           /* [L] the rows each layer computes this step */
    kvs_layer_plan *layers;  /* [L] */
    kvs_sched_counts st;
} sched_spa;

static void spa_free_buffers(sched_spa *s) {
    free(s->ratio);
    free(s->ref);
    free(s->has);
    free(s->force);
    free(s->ord);
    if (s->sel)
        for (int l = 0; l < s->L; l++) kvs_ibuf_free(&s->sel[l]);
    free(s->sel);
    free(s->layers);
    s->ratio = NULL;
    s->ref = NULL;
    s->has = s->force = NULL;
    s->ord = NULL;
    s->sel = NULL;
    s->layers = NULL;
    s->rank = 0;
}

static kvs_status spa_begin(void *self, int64_t n_tokens, int n_layers) {
    sched_spa *s = self;
    if (n_layers < 1 || n_tokens < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "schedule spa: %d layers, %lld tokens", n_layers, (long long)n_tokens);
    spa_free_buffers(s);
    size_t n = (size_t)n_tokens, L = (size_t)n_layers;
    s->L = n_layers;
    s->n = n_tokens;
    s->ratio = calloc(L, sizeof *s->ratio);
    s->has = calloc(L * n, 1);
    s->force = calloc(n, 1);
    s->ord = calloc(n, sizeof *s->ord);
    s->sel = calloc(L, sizeof *s->sel);
    s->layers = calloc(L, sizeof *s->layers);
    if (!s->ratio || !s->has || !s->force || !s->ord || !s->sel || !s->layers)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule spa: out of host memory");
    KVS_TRY(kvs_spa_layer_ratios(&s->p, n_layers, s->ratio));
    s->all = 1;
    for (int l = 0; l < n_layers; l++) s->all &= s->ratio[l] >= 1.0;
    return kvs_sched_counts_begin(&s->st, n_layers);
}

/* cosine similarity in float64; two zero vectors are alike, a zero and a non-zero one are not */
static double cos_sim(const float *a, const float *b, int r) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int j = 0; j < r; j++) {
        ab += (double)a[j] * b[j];
        aa += (double)a[j] * a[j];
        bb += (double)b[j] * b[j];
    }
    if (aa == 0.0 && bb == 0.0) return 1.0;
    if (aa == 0.0 || bb == 0.0) return 0.0;
    return ab / sqrt(aa * bb);
}

/* lowest cosine first, ties: lower position first */
static int by_cos(const void *a, const void *b) {
    const spa_key *x = a, *y = b;
    if (x->cos != y->cos) return x->cos < y->cos ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

/* The forward's row-selection callback (kvs_layer_select) of a spa_delta layer. */
static kvs_status spa_select(void *user, int layer, const int32_t *cand, int64_t nc, const float *proxy, int rank,
                             const int32_t **rows, int64_t *n_rows) {
    sched_spa *s = user;
    const int64_t n = s->n;
    if (s->rank != rank) { /* first proxies (or another rank): none stored */
        free(s->ref);
        s->ref = malloc((size_t)s->L * (size_t)n * (size_t)rank * sizeof *s->ref);
        if (!s->ref) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule spa: out of host memory");
        memset(s->has, 0, (size_t)s->L * (size_t)n);
        s->rank = rank;
    }
    float *ref = s->ref + (size_t)layer * (size_t)n * (size_t)rank;
    uint8_t *has = s->has + (size_t)layer * (size_t)n;
    kvs_ibuf *out = &s->sel[layer];
    out->n = 0;
    KVS_TRY(kvs_ibuf_reserve(out, nc));
    if (s->mode != 0) { /* a refresh: every candidate computed (check_update returns None) */
        for (int64_t i = 0; i < nc; i++) out->p[out->n++] = cand[i];
    } else {
        /* check_update: the int(G * ratio) candidates whose proxy moved most since the previous
         * step (lowest cosine similarity, torch.topk(largest=False)); ours also: a row whose delta
         * this layer never stored (none after the first, full step) */
        int64_t k = (int64_t)((double)nc * s->ratio[layer]), m = 0;
        memset(s->force, 0, (size_t)n);
        for (int64_t i = 0; i < nc; i++) {
            int32_t t = cand[i];
            if (!has[t]) {
                s->force[t] = 1;
                continue;
            }
            s->ord[m++] = (spa_key){.cos = cos_sim(proxy + i * rank, ref + (size_t)t * rank, rank), .t = t};
        }
        qsort(s->ord, (size_t)m, sizeof *s->ord, by_cos);
        for (int64_t i = 0; i < m && i < k; i++) s->force[s->ord[i].t] = 1;
        for (int64_t i = 0; i < nc; i++)
            if (s->force[cand[i]]) out->p[out->n++] = cand[i];
    }
    /* every candidate's indicator becomes this step's (cache "update_indicator" = new_indicator);
     * every computed row now has a stored delta */
    for (int64_t i = 0; i < nc; i++) memcpy(ref + (size_t)cand[i] * rank, proxy + i * rank, (size_t)rank * sizeof *ref);
    for (int64_t i = 0; i < out->n; i++) has[out->p[i]] = 1;
    s->st.rows[layer] += out->n;
    if (out->n == n) s->st.refreshes[layer]++;
    *rows = out->p;
    *n_rows = out->n;
    return KVS_OK;
}

static kvs_status spa_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    sched_spa *s = self;
    int reset = !s->layers || s->L != v->n_layers || s->n != v->n_tokens;
    if (reset) KVS_TRY(spa_begin(s, v->n_tokens, v->n_layers));
    memset(out, 0, sizeof *out);
    const int64_t n = v->n_tokens, P = v->prompt_len;
    s->st.steps++;
    /* refresh (refresh_steps): every row incl. the prompt; refresh_gen (refresh_gen_steps): the
     * generation rows (SequenceMgmt.refresh / refresh_gen; step 0 is both). A new canvas length
     * (block-causal decoding grows it) starts over with a full step. */
    if (v->step == 0 || reset || s->all || v->step % s->p.refresh == 0) s->mode = 1;
    else if (v->step % s->p.refresh_gen == 0) s->mode = 2;
    else s->mode = 0;
    /* candidates: the generation rows (shifted logits: from the row that predicts the first one) */
    int64_t from = s->mode == 1 || P >= n ? 0 : (v->logit_shift && P > 0 ? P - 1 : P);
    KVS_TRY(kvs_ibuf_reserve(&s->cand, n));
    s->cand.n = 0;
    for (int64_t t = from; t < n; t++) s->cand.p[s->cand.n++] = (int32_t)t;
    if (s->mode == 1) s->st.full_steps++;
    /* layer 0 computes every row, the prompt's too ("always update at the first layer": the
     * reference feeds the whole sequence to block 0 at every step and keeps its generation rows,
     * hooks.py get_ff_output layer 0); layers >= 1 the candidates, loaded from the cache's kept
     * layer inputs (KVS_CACHE_KEEP_X) when they differ */
    KVS_TRY(kvs_ibuf_reserve(&s->every, n));
    s->every.n = 0;
    for (int64_t t = 0; t < n; t++) s->every.p[s->every.n++] = (int32_t)t;
    s->st.rows[0] += n;
    s->st.refreshes[0]++;
    int rank = s->p.rank > 0 ? s->p.rank : -1;
    /* layer 0 plain (always updates every candidate); layers >= 1 in the residual mode: every
     * candidate's K/V, the selected rows' attention + FFN, the others' stored delta */
    for (int l = 0; l < s->L; l++)
        s->layers[l] = (kvs_layer_plan){.rows = l ? s->cand.p : s->every.p, .n_rows = l ? s->cand.n : n,
                                        .select = l > 0 ? spa_select : NULL,
                                        .select_user = s, .proxy_rank = rank, .proxy_key = s->p.key,
                                        .spa_delta = l > 0};
    KVS_TRY(kvs_sched_block_masked(v, &s->logits));
    out->plan.layers = s->layers;
    out->plan.logit_rows = s->logits.p;
    out->plan.n_logit_rows = s->logits.n;
    return KVS_OK;
}

static void spa_stats(void *self, kvs_dlm_schedule_stats *out) { kvs_sched_counts_get(&((sched_spa *)self)->st, out); }

static void spa_destroy(void *self) {
    sched_spa *s = self;
    if (!s) return;
    spa_free_buffers(s);
    kvs_ibuf_free(&s->cand);
    kvs_ibuf_free(&s->every);
    kvs_ibuf_free(&s->logits);
    kvs_sched_counts_free(&s->st);
    free(s);
}

static const kvs_dlm_schedule_ops spa_ops = {.name = "spa",
                                             .cache_flags = KVS_CACHE_KEEP_DELTA | KVS_CACHE_KEEP_X,
                                             .plan = spa_plan,
                                             .begin = spa_begin,
                                             .destroy = spa_destroy,
                                             .stats = spa_stats};

kvs_status kvs_dlm_schedule_spa(kvs_dlm_schedule **out, const kvs_spa_params *pp) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_spa: out is NULL");
    *out = NULL;
    kvs_spa_params p = pp ? *pp : kvs_spa_params_default();
    const char *op = "kvs_dlm_schedule_spa";
    if (p.rank < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: rank %d (want >= 1, or 0 = automatic)", op, p.rank);
    if (p.key != 0 && p.key != 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: key %d (0 = value, 1 = key projection)", op, p.key);
    if (!(p.budget > 0.0f && p.budget <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: budget %g outside (0, 1] (the peak share of rows a layer recomputes)", op,
                         (double)p.budget);
    if (p.uniform != 0 && p.uniform != 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: uniform %d (want 0 or 1)", op, p.uniform);
    if (!(p.min_ratio >= 0.0f && p.min_ratio <= p.budget))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: min_ratio %g outside [0, budget %g]", op, (double)p.min_ratio, (double)p.budget);
    if (!(p.peak_pos > 0.0f && p.peak_pos < 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: peak_pos %g outside (0, 1)", op, (double)p.peak_pos);
    if (!(p.start > 0.0f && p.start < 1.0f) || !(p.end > 0.0f && p.end < 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: start %g and end %g must lie in (0, 1) (fractions of the peak)", op,
                         (double)p.start, (double)p.end);
    if (p.refresh < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: refresh %d (want >= 1)", op, p.refresh);
    if (p.refresh_gen < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: refresh_gen %d (want >= 1)", op, p.refresh_gen);
    sched_spa *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    s->p = p;
    kvs_status st = kvs_dlm_schedule_custom(out, &spa_ops, s);
    if (st != KVS_OK) spa_destroy(s);
    return st;
}
