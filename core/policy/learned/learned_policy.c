/* The learned eviction policies as kvs_policy objects (issue 8): per-row features, the scorers of
 * learned.c over them, RL gradient records, the indexer's latent folds. See include/kvsieve/learned.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../policy_internal.h"
#include "kvsieve/latent.h"
#include "internal.h"
#include "learned_internal.h"

/* Per-policy state: NF floats per (layer, kv head, cache row). */
typedef struct lpol {
    kvs_learned *w;
    int L, H, NF;
    int64_t cap;
    float *rows;        /* [L][H][cap][NF] */
    float *entropy;     /* [L][H] rl: normalised attention entropy of the last step */
    int32_t *cur;       /* [L] newest position seen */
    float *pre, *g;     /* [G] scratch */
    float *feat;        /* [H][cap][F] rl features of the last scoring */
    float *sc;          /* [H][cap] rl unperturbed scores */
    float *pert;        /* [H][cap] rl perturbed scores */
    int scored_layer;   /* rl training: layer of feat/sc/pert */
    int64_t scored_len[256]; /* rl: rows per head at the last scoring (of scored_layer) */
    int64_t *layer_len;      /* [L][H] rows per head at each layer's last scoring (latent folds) */
    lrn_rl_rec *rec;
    kvs_latent *latent;  /* indexer: evicted rows fold into it (owned) */
    float *lk, *lv;      /* [L][H][cap][hd] keys / values at the last scoring (latent) */
} lpol;

static float *rowp(lpol *p, int l, int h, int64_t r) { return p->rows + (((int64_t)l * p->H + h) * p->cap + r) * p->NF; }

static kvs_policy_needs lpol_needs(const void *self, int layer, int64_t budget) {
    const lpol *p = self;
    (void)layer, (void)budget;
    kvs_policy_needs n = {KVS_POLICY_NEED_OBSERVE, 0};
    if (p->w->kind == KVS_LEARNED_RETENTION) n.flags |= KVS_POLICY_NEED_X;
    if (p->w->kind == KVS_LEARNED_INDEXER) n.flags |= KVS_POLICY_NEED_X | KVS_POLICY_NEED_KEYS;
    if (p->latent) n.flags |= KVS_POLICY_NEED_KEYS | KVS_POLICY_NEED_VALUES;
    if (p->w->kind == KVS_LEARNED_RL) n.flags |= KVS_POLICY_NEED_ACC_MASS | KVS_POLICY_NEED_KEYS | KVS_POLICY_NEED_VALUES;
    return n;
}

static kvs_status lpol_begin(void *self, const kvs_policy_shape *sh) {
    lpol *p = self;
    if (sh->n_layers != p->L || sh->n_kv_heads != p->H || sh->head_dim != p->w->hd)
        return kvs_error(KVS_ERR_SHAPE, "learned policy (%d layers, %d kv heads) started on a model with %d layers, %d kv heads", p->L,
                         p->H, sh->n_layers, sh->n_kv_heads);
    if (sh->capacity != p->cap) {
        free(p->rows), free(p->feat), free(p->sc), free(p->pert);
        p->cap = sh->capacity;
        p->rows = malloc((size_t)(p->L * p->H * p->cap * p->NF) * sizeof(float));
        p->feat = malloc((size_t)(p->H * p->cap * LRN_RL_F) * sizeof(float));
        p->sc = malloc((size_t)(p->H * p->cap) * sizeof(float));
        p->pert = malloc((size_t)(p->H * p->cap) * sizeof(float));
        if (p->latent) {
            free(p->lk), free(p->lv);
            p->lk = malloc((size_t)(p->L * p->H * p->cap * p->w->hd) * sizeof(float));
            p->lv = malloc((size_t)(p->L * p->H * p->cap * p->w->hd) * sizeof(float));
            if (!p->lk || !p->lv) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "learned policy: out of host memory");
        }
        if (!p->rows || !p->feat || !p->sc || !p->pert) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "learned policy: out of host memory");
    }
    memset(p->rows, 0, (size_t)(p->L * p->H * p->cap * p->NF) * sizeof(float));
    memset(p->entropy, 0, (size_t)(p->L * p->H) * sizeof(float));
    for (int l = 0; l < p->L; l++) p->cur[l] = 0;
    p->scored_layer = -1;
    for (int i = 0; i < p->L * p->H; i++) p->layer_len[i] = -1; /* not scored yet */
    kvs_latent_reset(p->latent);
    return KVS_OK;
}

static kvs_status lpol_observe(void *self, int l, const kvs_layer_stats *st, const int64_t *len, int64_t n_new) {
    lpol *p = self;
    kvs_learned *w = p->w;
    if (w->kind != KVS_LEARNED_RL) {
        if (!st || !st->x || st->n_x_rows < n_new)
            return kvs_error(KVS_ERR_STATE, "learned policy: layer %d input rows missing (want_x)", l);
        float lb[256];
        for (int64_t j = 0; j < n_new; j++) {
            const float *xn = st->x + (st->n_x_rows - n_new + j) * w->dim;
            if (w->kind == KVS_LEARNED_RETENTION) {
                lrn_ret_gate(w, l, xn, p->pre, p->g, lb);
                for (int h = 0; h < p->H; h++) rowp(p, l, h, len[h] - n_new + j)[0] = lb[h];
            } else {
                lrn_idx_u(w, l, xn, p->g);
                for (int h = 0; h < p->H; h++) {
                    float *r = rowp(p, l, h, len[h] - n_new + j);
                    memcpy(r, p->g, (size_t)w->G * sizeof(float));
                    r[w->G] = NAN; /* m not computed yet: needs the key */
                }
            }
        }
        return KVS_OK;
    }
    /* rl: per-row max attention and EMA of recent mass; per-head entropy */
    if (!st || !st->key_mass) return KVS_OK;
    for (int h = 0; h < p->H; h++) {
        const float *km = st->key_mass + h * st->n_kv;
        double sum = 0.0, ent = 0.0;
        int64_t n = len[h] < st->n_kv ? len[h] : st->n_kv;
        for (int64_t r = 0; r < n; r++) sum += km[r];
        for (int64_t r = 0; r < len[h]; r++) {
            float *x = rowp(p, l, h, r);
            if (r >= len[h] - n_new) x[0] = x[1] = 0.0f;
            float a = r < n ? km[r] / (float)n_new : 0.0f;
            if (a > x[0]) x[0] = a;
            x[1] = 0.8f * x[1] + a;
            if (r < n && sum > 0 && km[r] > 0) {
                double q = km[r] / sum;
                ent -= q * log(q);
            }
        }
        p->entropy[l * p->H + h] = n > 1 ? (float)(ent / log((double)n)) : 0.0f;
    }
    return KVS_OK;
}

static kvs_status lpol_compact(void *self, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride);

static kvs_status lpol_score(void *self, const kvs_policy_input *in, float *scores) {
    lpol *p = self;
    kvs_learned *w = p->w;
    int l = in->layer;
    for (int h = 0; h < in->n_kv_heads; h++) {
        const int32_t *pos = in->pos + h * in->stride;
        for (int64_t r = 0; r < in->len[h]; r++) {
            float *x = rowp(p, l, h, r);
            double age = (double)in->cur_pos - pos[r];
            if (age < 0) age = 0;
            float s;
            if (w->kind == KVS_LEARNED_RETENTION) {
                const float *proj = w->p + w->L * lrn_ret_block(w);
                s = proj[0] * (float)age * x[0] + proj[1];
            } else if (w->kind == KVS_LEARNED_INDEXER) {
                if (isnan(x[w->G])) x[w->G] = lrn_idx_m(w, l, x, in->keys + (h * in->stride + r) * w->hd, p->pre, p->g);
                const float *d = w->p + l * lrn_idx_block(w) + (int64_t)w->G * w->hd + (int64_t)w->G * w->dim + 2 * w->G;
                s = x[w->G] + d[1] * (float)log1p(age) + d[2];
            } else {
                float *f = p->feat + (h * p->cap + r) * LRN_RL_F;
                double seen = age + 1.0;
                const float *k = in->keys + (h * in->stride + r) * w->hd, *v = in->values + (h * in->stride + r) * w->hd;
                double kn = 0, vn = 0;
                for (int i = 0; i < w->hd; i++) kn += (double)k[i] * k[i], vn += (double)v[i] * v[i];
                f[0] = (float)(in->acc_mass[h * in->stride + r] / seen);
                f[1] = x[0];
                f[2] = x[1] / 5.0f;
                f[3] = p->entropy[l * p->H + h];
                f[4] = (float)sqrt(vn) / (float)sqrt((double)w->hd);
                f[5] = (float)sqrt(kn) / (float)sqrt((double)w->hd);
                f[6] = in->cur_pos > 0 ? (float)pos[r] / (float)in->cur_pos : 1.0f;
                f[7] = (float)(log1p(age) / log(512.0));
                f[8] = 2.0 * age < (double)in->budget ? 1.0f : 0.0f; /* in the recent half of the budget */
                s = lrn_rl_score(w, l, f, p->pre, p->g);
                p->sc[h * p->cap + r] = s;
                if (p->rec) { /* Gumbel top-k: perturb, the evictor's top-k then samples */
                    double u = lrn_uniform(&p->rec->rng);
                    s = s - (float)log(-log(u));
                    p->pert[h * p->cap + r] = s;
                }
            }
            if (!isfinite(s)) s = s > 0 ? 3e38f : -3e38f;
            scores[h * in->stride + r] = s;
        }
        p->scored_len[h] = in->len[h];
        p->layer_len[l * p->H + h] = in->len[h];
        if (p->latent) { /* the rows' keys and values, for folding the evicted ones */
            size_t off = ((size_t)l * p->H + h) * p->cap * w->hd, nb = (size_t)(in->len[h] * w->hd) * sizeof(float);
            memcpy(p->lk + off, in->keys + h * in->stride * w->hd, nb);
            memcpy(p->lv + off, in->values + h * in->stride * w->hd, nb);
        }
    }
    p->scored_layer = l;
    return KVS_OK;
}

/* rl training: d log PL(kept in perturbed order) / d theta, accumulated into rec->grad. */
static void rl_grad(lpol *p, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    kvs_learned *w = p->w;
    int64_t cap = p->cap;
    float *ds = malloc((size_t)cap * sizeof *ds);
    int64_t *ord = malloc((size_t)cap * sizeof *ord);
    uint8_t *in_r = malloc((size_t)cap);
    if (!ds || !ord || !in_r) goto out;
    for (int h = 0; h < p->H; h++) {
        int64_t n = p->scored_len[h], k = n_keep[h];
        if (k >= n) continue;
        const float *sc = p->sc + h * cap, *pe = p->pert + h * cap;
        for (int64_t i = 0; i < k; i++) ord[i] = keep[h * stride + i];
        for (int64_t i = 1; i < k; i++) /* insertion sort by perturbed score, descending */
            for (int64_t j = i; j > 0 && pe[ord[j]] > pe[ord[j - 1]]; j--) {
                int64_t t = ord[j];
                ord[j] = ord[j - 1], ord[j - 1] = t;
            }
        memset(ds, 0, (size_t)n * sizeof *ds);
        memset(in_r, 1, (size_t)n);
        for (int64_t i = 0; i < k; i++) {
            double mx = -1e30, z = 0;
            for (int64_t j = 0; j < n; j++)
                if (in_r[j] && sc[j] > mx) mx = sc[j];
            for (int64_t j = 0; j < n; j++)
                if (in_r[j]) z += exp(sc[j] - mx);
            for (int64_t j = 0; j < n; j++)
                if (in_r[j]) ds[j] -= (float)(exp(sc[j] - mx) / z);
            ds[ord[i]] += 1.0f;
            in_r[ord[i]] = 0;
        }
        /* backprop through the MLP */
        float *W1 = w->p, *b1 = W1 + w->G * LRN_RL_F, *w2 = b1 + w->G;
        float *gW1 = p->rec->grad, *gb1 = gW1 + w->G * LRN_RL_F, *gw2 = gb1 + w->G, *gb2 = gw2 + w->G, *glb = gb2 + 1;
        (void)b1;
        for (int64_t j = 0; j < n; j++) {
            if (ds[j] == 0.0f) continue;
            const float *f = p->feat + (h * cap + j) * LRN_RL_F;
            lrn_rl_score(w, l, f, p->pre, p->g);
            gb2[0] += ds[j];
            glb[l] += ds[j];
            for (int q = 0; q < w->G; q++) {
                gw2[q] += ds[j] * p->g[q];
                float dp = ds[j] * w2[q] * lrn_dsilu(p->pre[q]);
                gb1[q] += dp;
                for (int i = 0; i < LRN_RL_F; i++) gW1[q * LRN_RL_F + i] += dp * f[i];
            }
        }
    }
    p->rec->event_pending = 1;
out:
    free(ds), free(ord), free(in_r);
}

static kvs_status lpol_compact(void *self, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    lpol *p = self;
    if (p->rec && p->w->kind == KVS_LEARNED_RL && p->scored_layer == l) rl_grad(p, l, keep, n_keep, stride);
    if (p->latent && p->layer_len[l * p->H] >= 0) /* fold the evicted rows into the latent memory */
        for (int h = 0; h < p->H; h++) {
            int64_t i = 0, hd = p->w->hd;
            size_t off = ((size_t)l * p->H + h) * p->cap * hd;
            for (int64_t r = 0; r < p->layer_len[l * p->H + h]; r++) {
                if (i < n_keep[h] && keep[h * stride + i] == r) {
                    i++;
                    continue;
                }
                KVS_TRY(kvs_latent_fold(p->latent, l, h, p->lk + off + r * hd, p->lv + off + r * hd, 1));
            }
        }
    for (int h = 0; h < p->H; h++) {
        for (int64_t i = 0; i < n_keep[h]; i++) {
            int32_t r = keep[h * stride + i];
            if (r != i) memmove(rowp(p, l, h, i), rowp(p, l, h, r), (size_t)p->NF * sizeof(float));
        }
        memset(rowp(p, l, h, n_keep[h]), 0, (size_t)((p->cap - n_keep[h]) * p->NF) * sizeof(float));
    }
    return KVS_OK;
}

static void lpol_destroy(void *self) {
    lpol *p = self;
    if (!p) return;
    kvs_learned_destroy(&p->w);
    kvs_latent_destroy(&p->latent);
    free(p->lk), free(p->lv);
    free(p->rows), free(p->entropy), free(p->cur), free(p->layer_len), free(p->pre), free(p->g), free(p->feat), free(p->sc), free(p->pert);
    free(p);
}

static const kvs_policy_ops lpol_ops[3] = {
    {"retention", lpol_needs, lpol_score, lpol_begin, lpol_observe, lpol_compact, lpol_destroy},
    {"indexer", lpol_needs, lpol_score, lpol_begin, lpol_observe, lpol_compact, lpol_destroy},
    {"rl", lpol_needs, lpol_score, lpol_begin, lpol_observe, lpol_compact, lpol_destroy},
};

kvs_status kvs_learned_policy(kvs_policy **out, const kvs_learned *src, float threshold, float alpha, int latent_features) {
    const char *op = "kvs_learned_policy";
    if (!out || !src) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *out = NULL;
    if (latent_features < 0 || latent_features > 4096)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: latent_features %d outside [0, 4096]", op, latent_features);
    if (isnan(threshold) || threshold == INFINITY)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: threshold %g: want a finite score or -INFINITY (off)", op, (double)threshold);
    if (!(alpha >= 0.0f && alpha <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: floor alpha %g outside [0, 1]", op, (double)alpha);
    lpol *p = calloc(1, sizeof *p);
    if (!p) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    kvs_status s = lrn_alloc(&p->w, src->kind, src->L, src->H, src->NH, src->hd, src->dim, src->vocab);
    if (s != KVS_OK) {
        free(p);
        return s;
    }
    memcpy(p->w->p, src->p, (size_t)src->n * sizeof(float));
    p->L = src->L, p->H = src->H;
    p->NF = src->kind == KVS_LEARNED_RETENTION ? 1 : src->kind == KVS_LEARNED_INDEXER ? src->G + 1 : 2;
    p->entropy = calloc((size_t)(p->L * p->H), sizeof(float));
    p->cur = calloc((size_t)p->L, sizeof(int32_t));
    p->layer_len = malloc((size_t)(p->L * p->H) * sizeof(int64_t));
    p->pre = calloc((size_t)src->G, sizeof(float));
    p->g = calloc((size_t)src->G, sizeof(float));
    if (!p->entropy || !p->cur || !p->layer_len || !p->pre || !p->g) {
        lpol_destroy(p);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    if (latent_features > 0 && src->kind == KVS_LEARNED_INDEXER) {
        s = kvs_latent_create(&p->latent, src->L, src->H, src->NH, src->hd, latent_features, 0.0f, 0x1D3Eull);
        if (s != KVS_OK) {
            lpol_destroy(p);
            return s;
        }
    }
    s = kvs_policy_custom(out, &lpol_ops[src->kind], p, alpha, 0);
    if (s != KVS_OK) {
        lpol_destroy(p);
        return s;
    }
    kvs_policy_set_latent(*out, p->latent);
    (*out)->threshold = threshold; /* the evictor's threshold mode (policy_internal.h) */
    return s;
}

void lrn_policy_set_rl_rec(kvs_policy *pol, lrn_rl_rec *rec) {
    if (pol && pol->ops && pol->ops->destroy == lpol_destroy) ((lpol *)pol->self)->rec = rec;
}

kvs_learned *lrn_policy_weights(kvs_policy *pol) {
    return pol && pol->ops && pol->ops->destroy == lpol_destroy ? ((lpol *)pol->self)->w : NULL;
}
