/* Training of the learned eviction policies (issue 8). Objectives in include/kvsieve/learned.h:
 * retention and indexer regress the measured future attention utility of full-cache runs (our
 * objective); rl is REINFORCE with a baseline on -KL(full || evicted) per decode step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvsieve/policy.h"
#include "internal.h"
#include "learned_internal.h"

kvs_train_params kvs_train_params_default(void) {
    kvs_train_params p = {.steps = 60, .seed = 1, .budget = 0.25, .ctx = 128, .horizon = 16, .lr = 0.0f, .progress = NULL, .user = NULL,
                          .rl_samples = 4};
    return p;
}

typedef struct adam {
    float *m, *v;
    float *scale; /* per-parameter learning-rate multiplier, or NULL */
    int64_t n, t;
    float lr;
} adam;

static void adam_step(adam *a, float *p, const float *g) {
    a->t++;
    double c1 = 1.0 - pow(0.9, (double)a->t), c2 = 1.0 - pow(0.999, (double)a->t);
    for (int64_t i = 0; i < a->n; i++) {
        a->m[i] = 0.9f * a->m[i] + 0.1f * g[i];
        a->v[i] = 0.999f * a->v[i] + 0.001f * g[i] * g[i];
        double mh = a->m[i] / c1, vh = a->v[i] / c2;
        p[i] -= (float)((a->scale ? a->scale[i] : 1.0f) * a->lr * mh / (sqrt(vh) + 1e-8));
    }
}

/* One full-cache prefill of tok[0..N): the layers' normalised inputs x [L][N][dim], GQA-group mean
 * attention A [L][H][N(query)][N(key)], keys K [L][H][N][hd] (K may be NULL). */
static kvs_status collect(kvs_model *m, kvs_kv_cache *c, const int32_t *tok, int64_t N, float *x, float *A, float *K,
                          kvs_layer_plan *lp, int32_t *rows) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    int L = hp->n_layers, H = hp->n_kv_heads, NH = hp->n_heads, G = NH / H, dim = hp->dim, hd = hp->head_dim;
    KVS_TRY(kvs_cache_reset(c));
    for (int64_t i = 0; i < N; i++) rows[i] = (int32_t)i;
    memset(lp, 0, (size_t)L * sizeof *lp);
    for (int l = 0; l < L; l++) {
        lp[l].probe_rows = rows;
        lp[l].n_probe = N;
        lp[l].want_x = 1;
    }
    int32_t last = (int32_t)(N - 1);
    kvs_step_plan plan = {.tokens = tok, .n_tokens = N, .layers = lp, .logit_rows = &last, .n_logit_rows = 1};
    kvs_step_result r;
    KVS_TRY(kvs_model_forward(m, c, &plan, &r));
    for (int l = 0; l < L; l++) {
        const kvs_layer_stats *st = &r.layers[l];
        if (!st->x || !st->probs || st->n_kv != N)
            return kvs_error(KVS_ERR_STATE, "kvs_learned_train: layer %d statistics missing", l);
        memcpy(x + (int64_t)l * N * dim, st->x, (size_t)(N * dim) * sizeof(float));
        float *a = A + (int64_t)l * H * N * N;
        for (int h = 0; h < H; h++)
            for (int64_t j = 0; j < N; j++)
                for (int64_t i = 0; i < N; i++) {
                    float s = 0;
                    for (int g = 0; g < G; g++) s += st->probs[(j * NH + h * G + g) * N + i];
                    a[((int64_t)h * N + j) * N + i] = s / (float)G;
                }
        if (K) {
            int64_t cap = kvs_cache_get_params(c)->capacity;
            float *kb = malloc((size_t)(H * cap * hd) * sizeof(float));
            if (!kb) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_learned_train: out of host memory");
            kvs_status s = kvs_cache_read_f32(c, l, 0, kb);
            for (int h = 0; h < H && s == KVS_OK; h++)
                memcpy(K + ((int64_t)l * H + h) * N * hd, kb + (int64_t)h * cap * hd, (size_t)(N * hd) * sizeof(float));
            free(kb);
            KVS_TRY(s);
        }
    }
    return KVS_OK;
}

/* Regression loss of retention/indexer on one window; adds d loss / d theta into grad. */
static double supervised_loss(kvs_learned *w, int64_t N, int64_t W, const float *x, const float *A, const float *K, float *grad) {
    int L = w->L, H = w->H, G = w->G, dim = w->dim, hd = w->hd;
    double loss = 0.0;
    int64_t cnt = 0;
    for (int64_t i = 0; i + W < N; i++) cnt += N - W - i;
    cnt *= (int64_t)L * H;
    double inv = 1.0 / (double)cnt;
    float *pre = malloc((size_t)G * sizeof(float)), *g = malloc((size_t)G * sizeof(float)), *u = malloc((size_t)G * sizeof(float));
    double *cum = malloc((size_t)(N + 1) * sizeof(double));
    float lb[256], dlb[256];
    if (!pre || !g || !u || !cum) {
        free(pre), free(g), free(u), free(cum);
        return NAN;
    }
    for (int l = 0; l < L; l++) {
        for (int64_t i = 0; i + W < N; i++) {
            const float *xn = x + ((int64_t)l * N + i) * dim;
            if (w->kind == KVS_LEARNED_RETENTION) lrn_ret_gate(w, l, xn, pre, g, lb);
            else lrn_idx_u(w, l, xn, u);
            for (int h = 0; h < H; h++) {
                const float *a = A + ((int64_t)l * H + h) * N * N;
                cum[0] = 0;
                for (int64_t j = 0; j < N; j++) cum[j + 1] = cum[j] + a[j * N + i];
                float m = 0.0f;
                float ipre[64], ig[64];
                if (w->kind == KVS_LEARNED_INDEXER) m = lrn_idx_m(w, l, u, K + (((int64_t)l * H + h) * N + i) * hd, ipre, ig);
                double dsum = 0.0;
                for (int64_t t = i; t + W < N; t++) {
                    double uu = (cum[t + W + 1] - cum[t + 1]) / (double)W;
                    double y = log(uu + 1e-4), yh, age = (double)(t - i);
                    if (w->kind == KVS_LEARNED_RETENTION) {
                        float *proj = w->p + L * lrn_ret_block(w);
                        yh = proj[0] * age * lb[h] + proj[1];
                        double e = yh - y;
                        loss += e * e * inv;
                        dsum += 2 * e * proj[0] * age * inv;
                        grad[L * lrn_ret_block(w)] += (float)(2 * e * age * lb[h] * inv);
                        grad[L * lrn_ret_block(w) + 1] += (float)(2 * e * inv);
                    } else {
                        float *d = w->p + l * lrn_idx_block(w) + (int64_t)G * hd + (int64_t)G * dim + 2 * G;
                        float *gd = grad + (d - w->p);
                        double la = log1p(age);
                        yh = m + d[1] * la + d[2];
                        double e = yh - y;
                        loss += e * e * inv;
                        dsum += 2 * e * inv;
                        gd[1] += (float)(2 * e * la * inv);
                        gd[2] += (float)(2 * e * inv);
                    }
                }
                if (w->kind == KVS_LEARNED_RETENTION) {
                    dlb[h] = (float)dsum;
                } else { /* backprop m */
                    int64_t o = l * lrn_idx_block(w);
                    const float *w2 = w->p + o + (int64_t)G * hd + (int64_t)G * dim + G;
                    float *gWk = grad + o, *gWx = gWk + (int64_t)G * hd, *gb1 = gWx + (int64_t)G * dim, *gw2 = gb1 + G;
                    const float *k = K + (((int64_t)l * H + h) * N + i) * hd;
                    gw2[G] += (float)dsum;
                    for (int q = 0; q < G; q++) {
                        gw2[q] += (float)dsum * ig[q];
                        float dp = (float)dsum * w2[q] * lrn_dsilu(ipre[q]);
                        gb1[q] += dp;
                        for (int z = 0; z < hd; z++) gWk[q * hd + z] += dp * k[z];
                        for (int z = 0; z < dim; z++) gWx[(int64_t)q * dim + z] += dp * xn[z];
                    }
                }
            }
            if (w->kind == KVS_LEARNED_RETENTION) { /* backprop the gate */
                int64_t o = l * lrn_ret_block(w);
                const float *W2 = w->p + o + (int64_t)G * dim + G;
                float *gW1 = grad + o, *gb1 = gW1 + (int64_t)G * dim, *gW2 = gb1 + G, *gb2 = gW2 + (int64_t)H * G;
                float dg[64] = {0};
                for (int h = 0; h < H; h++) {
                    float dz = dlb[h] * (1.0f - expf(lb[h])); /* d logsigmoid(z)/dz = sigmoid(-z) */
                    gb2[h] += dz;
                    for (int q = 0; q < G; q++) {
                        gW2[h * G + q] += dz * g[q];
                        dg[q] += dz * W2[h * G + q];
                    }
                }
                for (int q = 0; q < G; q++) {
                    float dp = dg[q] * lrn_dsilu(pre[q]);
                    gb1[q] += dp;
                    for (int z = 0; z < dim; z++) gW1[(int64_t)q * dim + z] += dp * xn[z];
                }
            }
        }
    }
    free(pre), free(g), free(u), free(cum);
    return loss;
}

/* Data-dependent start: the regression's constant (retention proj c, indexer b2) = the mean target of
 * the first window. */
static void init_offsets(kvs_learned *w, int64_t N, int64_t W, const float *A) {
    int L = w->L, H = w->H, G = w->G;
    double sum = 0;
    int64_t cnt = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            const float *a = A + ((int64_t)l * H + h) * N * N;
            for (int64_t i = 0; i + W < N; i++)
                for (int64_t t = i; t + W < N; t++) {
                    double u = 0;
                    for (int64_t j = t + 1; j <= t + W; j++) u += a[j * N + i];
                    sum += log(u / (double)W + 1e-4);
                    cnt++;
                }
        }
    float c = cnt ? (float)(sum / (double)cnt) : 0.0f;
    if (w->kind == KVS_LEARNED_RETENTION) w->p[L * lrn_ret_block(w) + 1] = c;
    else
        for (int l = 0; l < L; l++) w->p[l * lrn_idx_block(w) + (int64_t)G * w->hd + (int64_t)G * w->dim + 2 * G] = c;
}

static void log_softmax(const float *l, int64_t V, double *out) {
    double mx = l[0], s = 0.0;
    for (int64_t i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int64_t i = 0; i < V; i++) s += exp((double)l[i] - mx);
    double lse = mx + log(s);
    for (int64_t i = 0; i < V; i++) out[i] = (double)l[i] - lse;
}

typedef struct rl_ctx {
    kvs_model *m;
    kvs_kv_cache *full, *ev_cache;
    kvs_evictor *ev;        /* the evictor of the current step's budget (one of evs) */
    kvs_evictor *evs[KVS_TRAIN_MAX_BUDGETS];
    int n_evs;
    kvs_policy *pol;
    lrn_rl_rec rec;
    double *full_lp, *lp;   /* [N][V], [V] */
    int64_t K;              /* sampled episodes per window */
    double *kl;             /* [K][N] */
    float *ev_grad;         /* [K][max events][n] */
    int64_t *ev_t;          /* [K][max events] */
    int64_t *n_ev;          /* [K] */
    int64_t max_ev;
    kvs_layer_plan *lp_plan;
} rl_ctx;

/* One sampled episode (sample i) on a window whose full-cache log-probabilities are in r->full_lp:
 * the per-step KL into kl[i], each eviction event's d log p / d theta and step into ev_grad / ev_t. */
static kvs_status rl_episode(rl_ctx *r, kvs_learned *w, const int32_t *tok, int64_t N, int64_t i, double *loss) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(r->m);
    int64_t V = hp->vocab;
    kvs_step_result res;
    KVS_TRY(kvs_cache_reset(r->ev_cache));
    KVS_TRY(kvs_evictor_begin(r->ev, r->ev_cache));
    int64_t n_ev = 0;
    float *evg = r->ev_grad + i * r->max_ev * w->n;
    int64_t *evt = r->ev_t + i * r->max_ev;
    double *kls = r->kl + i * N;
    memset(r->rec.grad, 0, (size_t)w->n * sizeof(float));
    r->rec.event_pending = 0;
    double klsum = 0;
    for (int64_t t = 0; t + 1 < N; t++) {
        int32_t zero = 0, pos = (int32_t)t;
        kvs_step_plan plan = {.tokens = tok + t, .n_tokens = 1, .positions = &pos, .logit_rows = &zero, .n_logit_rows = 1};
        int any = 0;
        KVS_TRY(kvs_evictor_plan(r->ev, 1, r->lp_plan, &any));
        plan.layers = any ? r->lp_plan : NULL;
        KVS_TRY(kvs_model_forward(r->m, r->ev_cache, &plan, &res));
        KVS_TRY(kvs_evictor_update(r->ev, r->ev_cache, &res));
        if (r->rec.event_pending) {
            if (n_ev < r->max_ev) {
                memcpy(evg + n_ev * w->n, r->rec.grad, (size_t)w->n * sizeof(float));
                evt[n_ev++] = t;
            }
            memset(r->rec.grad, 0, (size_t)w->n * sizeof(float));
            r->rec.event_pending = 0;
        }
        log_softmax(res.logits, V, r->lp);
        const double *fl = r->full_lp + t * V;
        double kl = 0;
        for (int64_t v = 0; v < V; v++) kl += exp(fl[v]) * (fl[v] - r->lp[v]);
        kls[t] = kl > 0 ? kl : 0;
        klsum += kls[t];
    }
    r->n_ev[i] = n_ev;
    *loss = klsum / (double)(N - 1);
    return KVS_OK;
}

/* The full-cache reference of a window: one prefill with every row's logits into r->full_lp. */
static kvs_status rl_reference(rl_ctx *r, const int32_t *tok, int64_t N) {
    int64_t V = kvs_model_get_hparams(r->m)->vocab;
    KVS_TRY(kvs_cache_reset(r->full));
    int32_t *rows = malloc((size_t)N * sizeof *rows);
    if (!rows) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_learned_train: out of host memory");
    for (int64_t i = 0; i < N; i++) rows[i] = (int32_t)i;
    kvs_step_plan fp = {.tokens = tok, .n_tokens = N, .logit_rows = rows, .n_logit_rows = N};
    kvs_step_result res;
    kvs_status s = kvs_model_forward(r->m, r->full, &fp, &res);
    for (int64_t t = 0; t < N && s == KVS_OK; t++) log_softmax(res.logits + t * V, V, r->full_lp + t * V);
    free(rows);
    return s;
}

/* One REINFORCE step on a window: the full-cache reference, K sampled episodes, and the gradient of
 * the policy-gradient loss into grad. Each eviction event's return is the reward-to-go (mean -KL
 * from the step after it to the end of the window); its baseline is the mean return of the same event in
 * the other K - 1 episodes of the window (leave-one-out, "RLOO", Kool et al. 2019): the scope-head
 * trigger schedule does not depend on the sampled keep-sets, so event e happens at the same step
 * in every episode. Returns the mean KL over the K episodes in *loss. */
static kvs_status rl_step(rl_ctx *r, kvs_learned *w, const int32_t *tok, int64_t N, float *grad, double *loss) {
    int64_t K = r->K;
    KVS_TRY(rl_reference(r, tok, N));
    double sum_loss = 0;
    for (int64_t i = 0; i < K; i++) {
        double l = 0;
        KVS_TRY(rl_episode(r, w, tok, N, i, &l));
        sum_loss += l;
    }
    *loss = sum_loss / (double)K;
    int64_t n_ev = r->max_ev;
    for (int64_t i = 0; i < K; i++) n_ev = r->n_ev[i] < n_ev ? r->n_ev[i] : n_ev;
    if (K < 2 || n_ev < 1) return KVS_OK;
    double G[64];
    for (int64_t e = 0; e < n_ev; e++) {
        double mean = 0;
        for (int64_t i = 0; i < K; i++) {
            /* the eviction after step t0 first shows in the logits of step t0 + 1 */
            int64_t t0 = r->ev_t[i * r->max_ev + e];
            double sum = 0;
            for (int64_t t = t0 + 1; t + 1 < N; t++) sum -= r->kl[i * N + t];
            G[i] = t0 + 2 < N ? sum / (double)(N - 2 - t0) : 0.0;
            mean += G[i];
        }
        for (int64_t i = 0; i < K; i++) {
            double adv = (G[i] - (mean - G[i]) / (double)(K - 1));
            const float *ge = r->ev_grad + (i * r->max_ev + e) * w->n;
            for (int64_t j = 0; j < w->n; j++) grad[j] -= (float)(adv * ge[j] / (double)(n_ev * K));
        }
    }
    return KVS_OK;
}

/* rl model selection: the mean KL of greedy (unsampled) episodes over the validation windows
 * vw[0..n_val) of the train split, at every training budget. */
static kvs_status rl_validate(rl_ctx *r, kvs_learned *w, const int32_t *tokens, const int64_t *vw, int64_t n_val, int64_t N,
                              int32_t bos, int32_t *tok, double *out) {
    lrn_policy_set_rl_rec(r->pol, NULL);
    double sum = 0;
    int64_t cnt = 0;
    kvs_status s = KVS_OK;
    for (int64_t v = 0; v < n_val && s == KVS_OK; v++) {
        tok[0] = bos;
        memcpy(tok + 1, tokens + vw[v] * (N - 1), (size_t)(N - 1) * sizeof *tok);
        s = rl_reference(r, tok, N);
        for (int b = 0; b < r->n_evs && s == KVS_OK; b++) {
            double l = 0;
            r->ev = r->evs[b];
            s = rl_episode(r, w, tok, N, 0, &l);
            sum += l, cnt++;
        }
    }
    lrn_policy_set_rl_rec(r->pol, &r->rec);
    *out = cnt ? sum / (double)cnt : 0.0;
    return s;
}

kvs_status kvs_learned_train(kvs_learned *w, kvs_model *m, const int32_t *tokens, int64_t n, const kvs_train_params *pp,
                             double *final_loss) {
    const char *op = "kvs_learned_train";
    if (!w || !m || !tokens) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    kvs_train_params p = pp ? *pp : kvs_train_params_default();
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    if (hp->n_layers != w->L || hp->n_kv_heads != w->H || hp->head_dim != w->hd || hp->dim != w->dim || hp->n_heads != w->NH)
        return kvs_error(KVS_ERR_SHAPE, "%s: weights for another model shape", op);
    if (p.ctx < 16 || (hp->ctx_len > 0 && p.ctx > hp->ctx_len) || p.steps < 1 || p.horizon < 1 || p.horizon >= p.ctx / 2 ||
        !(p.budget > 0.0 && p.budget < 1.0) || p.val_windows < 0 || p.rl_samples < 0 || p.rl_samples == 1 || p.rl_samples > 64 || p.n_budgets < 0 ||
        p.n_budgets > KVS_TRAIN_MAX_BUDGETS)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: ctx %lld (16..%d), steps %lld >= 1, horizon %lld (1..ctx/2), budget %g in (0, 1), rl_samples %lld (0 or 2..64)",
                         op, (long long)p.ctx, hp->ctx_len, (long long)p.steps, (long long)p.horizon, p.budget, (long long)p.rl_samples);
    for (int i = 0; i < p.n_budgets; i++)
        if (!(p.budgets[i] > 0.0 && p.budgets[i] < 1.0))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: budgets[%d] = %g: want a fraction in (0, 1)", op, i, p.budgets[i]);
    int64_t N = p.ctx, nw = n / (N - 1);
    if (nw < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %lld tokens, not one window of %lld", op, (long long)n, (long long)N);
    int L = w->L, H = w->H;
    kvs_device *dev = kvs_model_device(m);
    lrn_rng rng = {p.seed ^ 0xA0761D6478BD642Full};
    int64_t *order = malloc((size_t)nw * sizeof *order);
    int32_t *tok = malloc((size_t)N * sizeof *tok), *rows = malloc((size_t)N * sizeof *rows);
    float *grad = calloc((size_t)w->n, sizeof *grad);
    adam ad = {calloc((size_t)w->n, sizeof(float)), calloc((size_t)w->n, sizeof(float)), calloc((size_t)w->n, sizeof(float)), w->n, 0, 0};
    for (int64_t i = 0; ad.scale && i < w->n; i++) ad.scale[i] = 1.0f;
    /* retention: the gate biases (init 10) and the shared projection learn 10x faster, so that
     * beta can leave ~1 within a few hundred steps (ours; TRIM-KV trains far longer) */
    if (ad.scale && w->kind == KVS_LEARNED_RETENTION) {
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) ad.scale[l * lrn_ret_block(w) + lrn_ret_block(w) - H + h] = 10.0f;
        ad.scale[L * lrn_ret_block(w)] = ad.scale[L * lrn_ret_block(w) + 1] = 10.0f;
    }
    kvs_layer_plan *lp = calloc((size_t)L, sizeof *lp);
    float *x = NULL, *A = NULL, *K = NULL;
    kvs_kv_cache *c = NULL;
    rl_ctx r;
    memset(&r, 0, sizeof r);
    kvs_status s = KVS_OK;
    if (!order || !tok || !rows || !grad || !ad.m || !ad.v || !ad.scale || !lp) s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t i = 0; i < nw && s == KVS_OK; i++) order[i] = i;
    for (int64_t i = nw - 1; i > 0 && s == KVS_OK; i--) {
        int64_t j = (int64_t)(lrn_next(&rng) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = N;
    if (s == KVS_OK) s = kvs_cache_create(&c, dev, &cp);
    kvs_learned *tw = w; /* the weights trained in place */
    if (w->kind == KVS_LEARNED_RL) {
        ad.lr = p.lr > 0 ? p.lr : 1e-3f;
        r.m = m;
        r.full = c;
        r.max_ev = N * L;
        r.K = p.rl_samples > 0 ? p.rl_samples : 4;
        r.full_lp = malloc((size_t)(N * hp->vocab) * sizeof(double));
        r.lp = malloc((size_t)hp->vocab * sizeof(double));
        r.kl = malloc((size_t)(r.K * N) * sizeof(double));
        r.ev_grad = malloc((size_t)(r.K * r.max_ev * w->n) * sizeof(float));
        r.ev_t = malloc((size_t)(r.K * r.max_ev) * sizeof(int64_t));
        r.n_ev = calloc((size_t)r.K, sizeof(int64_t));
        r.rec.grad = calloc((size_t)w->n, sizeof(float));
        r.rec.rng.s = p.seed * 0x9E3779B97F4A7C15ull + 3;
        r.lp_plan = lp;
        if (s == KVS_OK && (!r.full_lp || !r.lp || !r.kl || !r.ev_grad || !r.ev_t || !r.n_ev || !r.rec.grad))
            s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        if (s == KVS_OK) s = kvs_learned_policy(&r.pol, w, -INFINITY, 0.0f, 0);
        if (s == KVS_OK) {
            tw = lrn_policy_weights(r.pol);
            lrn_policy_set_rl_rec(r.pol, &r.rec);
            kvs_evict_params ep = kvs_evict_params_default();
            ep.policy = r.pol;
            ep.scope = KVS_SCOPE_HEAD;
            r.n_evs = p.n_budgets > 0 ? p.n_budgets : 1;
            for (int i = 0; i < r.n_evs && s == KVS_OK; i++) {
                ep.budget = p.n_budgets > 0 ? p.budgets[i] : p.budget;
                s = kvs_evictor_create(&r.evs[i], &ep, hp, N);
            }
        }
        kvs_cache_params ecp = cp;
        ecp.capacity = 1;
        for (int i = 0; i < r.n_evs && s == KVS_OK; i++) {
            int64_t c1 = kvs_evictor_capacity(r.evs[i], 1);
            if (c1 > ecp.capacity) ecp.capacity = c1;
        }
        if (s == KVS_OK) s = kvs_cache_create(&r.ev_cache, dev, &ecp);
    } else {
        ad.lr = p.lr > 0 ? p.lr : 2e-2f;
        x = malloc((size_t)(L * N * w->dim) * sizeof(float));
        A = malloc((size_t)(L * H * N * N) * sizeof(float));
        if (w->kind == KVS_LEARNED_INDEXER) K = malloc((size_t)(L * H * N * w->hd) * sizeof(float));
        if (s == KVS_OK && (!x || !A || (w->kind == KVS_LEARNED_INDEXER && !K)))
            s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    double tail = 0.0;
    int64_t ntail = 0;
    /* rl model selection: the last n_val windows of the shuffled order are never trained on; the
     * weights with the lowest greedy KL on them (the start included) are the result */
    int32_t bos = hp->bos_id >= 0 ? hp->bos_id : 1;
    int64_t n_val = w->kind == KVS_LEARNED_RL && p.val_windows > 0 ? p.val_windows : 0, n_trainw = nw;
    if (n_val > nw / 4) n_val = nw / 4;
    n_trainw = nw - n_val;
    int64_t val_every = p.steps / 10 > 0 ? p.steps / 10 : 1;
    double best_kl = INFINITY;
    float *best = n_val > 0 ? malloc((size_t)w->n * sizeof *best) : NULL;
    if (n_val > 0 && !best && s == KVS_OK) s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t step = 0; step <= p.steps && s == KVS_OK; step++) {
        if (n_val > 0 && (step % val_every == 0 || step == p.steps)) {
            double vk = 0;
            s = rl_validate(&r, tw, tokens, order + n_trainw, n_val, N, bos, tok, &vk);
            if (s != KVS_OK) break;
            int better = vk < best_kl;
            if (better) best_kl = vk, memcpy(best, tw->p, (size_t)w->n * sizeof *best);
            if (p.validated) p.validated(step, vk, better, p.user);
        }
        if (step == p.steps) break;
        int64_t wi = order[step % n_trainw];
        tok[0] = bos;
        memcpy(tok + 1, tokens + wi * (N - 1), (size_t)(N - 1) * sizeof *tok);
        memset(grad, 0, (size_t)w->n * sizeof *grad);
        double loss = 0.0;
        if (w->kind == KVS_LEARNED_RL) {
            r.ev = r.evs[step % r.n_evs];
            s = rl_step(&r, tw, tok, N, grad, &loss);
            /* clip the gradient's norm to 1 (REINFORCE variance) */
            double nn = 0;
            for (int64_t i = 0; i < w->n; i++) nn += (double)grad[i] * grad[i];
            nn = sqrt(nn);
            if (s == KVS_OK && !(isfinite(nn) && isfinite(loss)))
                s = kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: training diverged: a non-finite loss or gradient at step "
                              "%lld (lower the learning rate)", op, (long long)step);
            if (nn > 1.0)
                for (int64_t i = 0; i < w->n; i++) grad[i] = (float)(grad[i] / nn);
        } else {
            s = collect(m, c, tok, N, x, A, K, lp, rows);
            if (s == KVS_OK && step == 0) init_offsets(w, N, p.horizon, A);
            if (s == KVS_OK) loss = supervised_loss(w, N, p.horizon, x, A, K, grad);
            if (s == KVS_OK && !isfinite(loss))
                s = kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: training diverged: the loss is not finite at step %lld (lower the "
                              "learning rate)", op, (long long)step);
        }
        if (s != KVS_OK) break;
        adam_step(&ad, tw->p, grad);
        if (step >= p.steps - 10) tail += loss, ntail++;
        if (p.progress) p.progress(step, p.steps, loss, p.user);
    }
    if (s == KVS_OK && best) memcpy(tw->p, best, (size_t)w->n * sizeof(float));
    free(best);
    if (s == KVS_OK && tw != w) memcpy(w->p, tw->p, (size_t)w->n * sizeof(float));
    if (s == KVS_OK) {
        w->train_steps = p.steps;
        w->train_seed = p.seed;
        w->train_budget = p.budget;
        if (final_loss) *final_loss = ntail ? tail / (double)ntail : 0.0;
    }
    for (int i = 0; i < KVS_TRAIN_MAX_BUDGETS; i++) kvs_evictor_destroy(&r.evs[i]);
    kvs_policy_destroy(&r.pol);
    kvs_cache_destroy(&r.ev_cache);
    free(r.full_lp), free(r.lp), free(r.kl), free(r.ev_grad), free(r.ev_t), free(r.n_ev), free(r.rec.grad);
    kvs_cache_destroy(&c);
    free(order), free(tok), free(rows), free(grad), free(ad.m), free(ad.v), free(ad.scale), free(lp), free(x), free(A), free(K);
    return s;
}
