/* d2Cache: dual adaptive caching for diffusion LLMs (Jiang et al. 2025, arXiv 2509.23094; reference
 * code Kamichanw/d2Cache, src/cache/d2cache.py and src/utils/common.py). See schedule.h for the
 * method, its defaults and where we deviate. Pure host logic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_util.h"

kvs_d2cache_params kvs_d2cache_params_default(void) {
    kvs_d2cache_params p = {.rollout_p = 0.1f, .current_k = 32, .sigma = 10.0f, .inflate_w = 0};
    return p;
}

typedef struct sched_d2 {
    kvs_d2cache_params p;
    int L;
    int64_t n;
    int all;                 /* rollout_p 1 and current_k 0: every row every step (the anchor) */
    int full;                /* this step runs every row (the decode's first step) */
    int have_stats;          /* conf and importance exist (after the first step's feedback) */
    double *conf;            /* [n] last confidence of each position (gen region) */
    double *imp;             /* [n] attention-rollout importance of each position */
    double *score;           /* [n] scratch: certainty prior scores */
    double *dens;            /* [n] scratch: certainty density */
    double *vec, *vec2;      /* [n] scratch: rollout column sums */
    double *kern;            /* [6n] scratch: the Gaussian kernel */
    uint8_t *sel;            /* [n] selection marks */
    kvs_ibuf rows, logits, cand, probe;
    kvs_layer_plan *layers;  /* [L] */
    kvs_sched_counts st;
} sched_d2;

static void d2_free_buffers(sched_d2 *s) {
    free(s->conf);
    free(s->imp);
    free(s->score);
    free(s->dens);
    free(s->vec);
    free(s->vec2);
    free(s->kern);
    free(s->sel);
    free(s->layers);
    s->conf = s->imp = s->score = s->dens = s->vec = s->vec2 = s->kern = NULL;
    s->sel = NULL;
    s->layers = NULL;
}

static kvs_status d2_begin(void *self, int64_t n_tokens, int n_layers) {
    sched_d2 *s = self;
    if (n_layers < 1 || n_tokens < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "schedule d2cache: %d layers, %lld tokens", n_layers, (long long)n_tokens);
    d2_free_buffers(s);
    size_t n = (size_t)n_tokens;
    s->conf = calloc(n, sizeof *s->conf);
    s->imp = calloc(n, sizeof *s->imp);
    s->score = calloc(n, sizeof *s->score);
    s->dens = calloc(n, sizeof *s->dens);
    s->vec = calloc(n, sizeof *s->vec);
    s->vec2 = calloc(n, sizeof *s->vec2);
    s->kern = calloc(6 * n, sizeof *s->kern);
    s->sel = calloc(n, 1);
    s->layers = calloc((size_t)n_layers, sizeof *s->layers);
    if (!s->conf || !s->imp || !s->score || !s->dens || !s->vec || !s->vec2 || !s->kern || !s->sel || !s->layers)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule d2cache: out of host memory");
    s->L = n_layers;
    s->n = n_tokens;
    s->have_stats = 0;
    return kvs_sched_counts_begin(&s->st, n_layers);
}

/* Certainty density (reference certainty_density): over the generation region g[0..G) with known[t]
 * = decoded, d[t] = sum_u m(u) k(t - u) / sum_{d=-3G}^{3G-1} k(d), k(d) = exp(-d^2 / (2 sigma^2)),
 * u over [-G, 2G): m = 1 left of the region, known[u] inside, and right of it 1 when the last
 * position is decoded, else 0 (the reference's FFT convolution on a canvas of 3G, evaluated
 * directly). */
static void certainty_density(const uint8_t *known, int64_t G, double sigma, double *kern, double *d) {
    double *k = kern + 3 * G; /* k[q] for q in [-3G, 3G) */
    double ksum = 0.0;
    for (int64_t q = -3 * G; q < 3 * G; q++) {
        k[q] = exp(-(double)(q * q) / (2.0 * sigma * sigma));
        ksum += k[q];
    }
    const double right = known[G - 1] ? 1.0 : 0.0;
    for (int64_t t = 0; t < G; t++) {
        double w = 0.0;
        for (int64_t u = -G; u < 2 * G; u++) {
            double m = u < 0 ? 1.0 : (u >= G ? right : (known[u] ? 1.0 : 0.0));
            if (m != 0.0) w += m * k[t - u];
        }
        d[t] = w / (ksum > 1e-8 ? ksum : 1e-8);
    }
}

static kvs_status d2_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    sched_d2 *s = self;
    if (!s->layers || s->L != v->n_layers || s->n != v->n_tokens) KVS_TRY(d2_begin(s, v->n_tokens, v->n_layers));
    if (v->logit_shift)
        return kvs_error(KVS_ERR_UNSUPPORTED, "schedule d2cache: models with shifted logits (Dream) are not supported");
    memset(out, 0, sizeof *out);
    const int64_t n = v->n_tokens, P = v->prompt_len, G = n - P;
    s->st.steps++;
    if (v->step == 0) s->have_stats = 0;
    s->full = s->all || !s->have_stats;
    if (s->all) { /* the anchor: the no-cache plan */
        KVS_TRY(kvs_sched_block_masked(v, &s->logits));
        out->plan.logit_rows = s->logits.p;
        out->plan.n_logit_rows = s->logits.n;
        return KVS_OK;
    }
    KVS_TRY(kvs_ibuf_reserve(&s->rows, n));
    KVS_TRY(kvs_ibuf_reserve(&s->logits, n));
    KVS_TRY(kvs_ibuf_reserve(&s->cand, n));
    KVS_TRY(kvs_ibuf_reserve(&s->probe, n));
    s->rows.n = s->logits.n = s->cand.n = 0;
    if (s->full) {
        /* every row; logits of every masked position (their confidences start the prior) */
        for (int64_t p = 0; p < n; p++) {
            s->rows.p[s->rows.n++] = (int32_t)p;
            if (v->masked[p]) {
                s->logits.p[s->logits.n++] = (int32_t)p;
                if (p >= v->block_start && p < v->block_end) s->cand.p[s->cand.n++] = (int32_t)p;
            }
        }
    } else {
        memset(s->sel, 0, (size_t)n);
        /* 1. masked positions by certainty prior: conf x density, searched from the block start to
         *    the block boundary that holds current_k masked positions; the block's first */
        int64_t k = s->p.current_k > 0 ? s->p.current_k : G;
        int64_t blk = v->block_end - v->block_start, seen = 0, end = G - 1;
        for (int64_t t = 0; t < G; t++) {
            seen += v->masked[P + t] != 0;
            if (seen >= k) {
                end = t;
                break;
            }
        }
        if (blk > 0) end = ((end / blk) + 1) * blk - 1;
        if (end > G - 1) end = G - 1;
        uint8_t *known = (uint8_t *)s->vec2; /* scratch bytes (vec2 is refilled below) */
        for (int64_t t = 0; t < G; t++) known[t] = !v->masked[P + t];
        certainty_density(known, G, s->p.sigma, s->kern, s->dens);
        double mx = -INFINITY;
        for (int64_t t = 0; t < G; t++) {
            s->score[t] = s->conf[P + t] * s->dens[t];
            if (s->score[t] > mx) mx = s->score[t];
        }
        for (int64_t t = 0; t < G; t++)
            if (P + t >= v->block_start && P + t < v->block_end) s->score[t] += mx; /* the block first */
        for (int64_t c = 0; c < k; c++) {
            int64_t best = -1;
            for (int64_t t = v->block_start - P; t <= end; t++)
                if (t >= 0 && v->masked[P + t] && !s->sel[P + t] && (best < 0 || s->score[t] > s->score[best])) best = t;
            if (best < 0) break;
            s->sel[P + best] = 1;
        }
        /* 2. the tokens the previous step decoded (their K/V change from mask to token) */
        for (int64_t i = 0; i < v->n_decoded_prev; i++) s->sel[v->decoded_prev[i]] = 1;
        /* 3. the other rows by attention-rollout importance: the reference's nucleus_select (rows
         *    ranked by importance; those whose cumulative share stays <= rollout_p, at least one) */
        double tot = 0.0;
        int64_t m = 0;
        for (int64_t p = 0; p < n; p++)
            if (!s->sel[p]) tot += s->imp[p];
        int32_t *ord = s->probe.p; /* scratch */
        for (int64_t p = 0; p < n; p++)
            if (!s->sel[p]) ord[m++] = (int32_t)p;
        /* selection by repeated maxima over the few chosen (rollout_p is small) */
        double cum = 0.0;
        for (int64_t c = 0; c < m; c++) {
            int64_t best = -1;
            for (int64_t i = 0; i < m; i++)
                if (ord[i] >= 0 && (best < 0 || s->imp[ord[i]] > s->imp[ord[best]])) best = i;
            if (best < 0) break;
            double pr = tot > 0.0 ? s->imp[ord[best]] / (tot + 1e-9) : 0.0;
            cum += pr;
            if (c > 0 && cum > (double)s->p.rollout_p) break;
            s->sel[ord[best]] = 2;
            ord[best] = -1;
        }
        /* 4. inflate: gaps of at most inflate_w between selected rows are filled */
        if (s->p.inflate_w > 0) {
            int64_t prev = -1;
            for (int64_t p = 0; p < n; p++)
                if (s->sel[p]) {
                    if (prev >= 0 && p - prev <= s->p.inflate_w)
                        for (int64_t q = prev + 1; q < p; q++) s->sel[q] = s->sel[q] ? s->sel[q] : 3;
                    prev = p;
                }
        }
        for (int64_t p = 0; p < n; p++) {
            if (!s->sel[p]) continue;
            s->rows.p[s->rows.n++] = (int32_t)p;
            if (v->masked[p]) {
                s->logits.p[s->logits.n++] = (int32_t)p;
                if (p >= v->block_start && p < v->block_end) s->cand.p[s->cand.n++] = (int32_t)p;
            }
        }
    }
    /* probes: every computed row's attention at every layer (the rollout) */
    s->probe.n = 0;
    for (int64_t i = 0; i < s->rows.n; i++) s->probe.p[s->probe.n++] = (int32_t)i;
    for (int l = 0; l < s->L; l++)
        s->layers[l] = (kvs_layer_plan){.rows = l == 0 ? s->rows.p : NULL, .n_rows = l == 0 ? s->rows.n : 0,
                                        .probe_rows = s->probe.p, .n_probe = s->probe.n};
    out->plan.layers = s->layers;
    out->plan.logit_rows = s->logits.p;
    out->plan.n_logit_rows = s->logits.n;
    out->candidates = s->cand.p;
    out->n_candidates = s->cand.n;
    return KVS_OK;
}

static kvs_status d2_feedback(void *self, const kvs_dlm_view *v, const kvs_step_result *r) {
    sched_d2 *s = self;
    (void)v;
    const int64_t n = s->n;
    int64_t nr = s->all ? n : s->rows.n;
    for (int l = 0; l < s->L; l++) {
        s->st.rows[l] += nr;
        if (nr == n) s->st.refreshes[l]++;
    }
    if (nr == n) s->st.full_steps++;
    if (s->all) return KVS_OK;
    /* confidences of the logit rows: max softmax probability, in float64 */
    if (s->logits.n > 0 && (!r->logits || r->n_logit_rows != s->logits.n))
        return kvs_error(KVS_ERR_STATE, "schedule d2cache: the step result has no logits for the planned rows");
    for (int64_t i = 0; i < s->logits.n; i++) {
        const float *lg = r->logits + i * r->vocab;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t t = 0; t < r->vocab; t++)
            if (lg[t] > mx) mx = lg[t];
        for (int64_t t = 0; t < r->vocab; t++) sum += exp((double)lg[t] - mx);
        s->conf[s->logits.p[i]] = 1.0 / sum;
    }
    /* attention rollout column sums 1^T R_{L-1} ... R_0, R_l[i][j] = (a_ij + [i = j]) / (sum_j a_ij + 1)
     * for computed rows i (a: the head mean of the row's attention), identity rows elsewhere */
    if (!r->layers) return kvs_error(KVS_ERR_STATE, "schedule d2cache: the step result has no layer statistics");
    for (int64_t j = 0; j < n; j++) s->vec[j] = 1.0;
    uint8_t *comp = s->sel; /* rows computed this step (full: all) */
    if (s->full) memset(comp, 1, (size_t)n);
    else
        for (int64_t j = 0; j < n; j++) comp[j] = 0;
    if (!s->full)
        for (int64_t i = 0; i < s->rows.n; i++) comp[s->rows.p[i]] = 1;
    for (int l = s->L - 1; l >= 0; l--) {
        const kvs_layer_stats *ls = &r->layers[l];
        if (!ls->probs || ls->n_kv != n)
            return kvs_error(KVS_ERR_STATE, "schedule d2cache: layer %d returned no attention rows over %lld keys", l, (long long)n);
        int64_t nh = v->n_heads;
        for (int64_t j = 0; j < n; j++) s->vec2[j] = comp[j] ? 0.0 : s->vec[j];
        for (int64_t i = 0; i < s->rows.n; i++) {
            int64_t row = s->rows.p[i];
            const float *pr = ls->probs + i * nh * n;
            double rs = 0.0;
            for (int64_t h = 0; h < nh; h++)
                for (int64_t j = 0; j < n; j++) rs += pr[h * n + j];
            rs = rs / (double)nh + 1.0;
            double w = s->vec[row] / rs;
            for (int64_t j = 0; j < n; j++) {
                double a = 0.0;
                for (int64_t h = 0; h < nh; h++) a += pr[h * n + j];
                s->vec2[j] += w * (a / (double)nh);
            }
            s->vec2[row] += w;
        }
        memcpy(s->vec, s->vec2, (size_t)n * sizeof *s->vec);
    }
    memcpy(s->imp, s->vec, (size_t)n * sizeof *s->imp);
    s->have_stats = 1;
    return KVS_OK;
}

static void d2_stats(void *self, kvs_dlm_schedule_stats *out) { kvs_sched_counts_get(&((sched_d2 *)self)->st, out); }

static void d2_destroy(void *self) {
    sched_d2 *s = self;
    if (!s) return;
    d2_free_buffers(s);
    kvs_ibuf_free(&s->rows);
    kvs_ibuf_free(&s->logits);
    kvs_ibuf_free(&s->cand);
    kvs_ibuf_free(&s->probe);
    kvs_sched_counts_free(&s->st);
    free(s);
}

static const kvs_dlm_schedule_ops d2_ops = {
    .name = "d2cache", .plan = d2_plan, .feedback = d2_feedback, .begin = d2_begin, .destroy = d2_destroy, .stats = d2_stats};

kvs_status kvs_dlm_schedule_d2cache(kvs_dlm_schedule **out, const kvs_d2cache_params *pp) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_d2cache: out is NULL");
    *out = NULL;
    kvs_d2cache_params p = pp ? *pp : kvs_d2cache_params_default();
    /* one message per field: the first one out of range, named alone */
    const char *op = "kvs_dlm_schedule_d2cache";
    if (!(p.rollout_p >= 0.0f && p.rollout_p <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: rollout_p %g outside [0, 1]", op, (double)p.rollout_p);
    if (p.current_k < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: current_k %d (want >= 0)", op, p.current_k);
    if (!(p.sigma > 0.0f)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: sigma %g (want > 0)", op, (double)p.sigma);
    if (p.inflate_w < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: inflate_w %d (want >= 0)", op, p.inflate_w);
    sched_d2 *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_d2cache: out of host memory");
    s->p = p;
    s->all = p.rollout_p >= 1.0f && p.current_k == 0;
    kvs_status st = kvs_dlm_schedule_custom(out, &d2_ops, s);
    if (st != KVS_OK) d2_destroy(s);
    return st;
}
