/* The eviction scorers of issue 18: KeyDiff, LagKV, the CriticalKV wrapper, ExpectedAttention and
 * PrefixKV.
 * Pure host logic over the inputs the evictor hands a policy (keys, values, the step's layer input
 * rows) plus, for critical and expected, the attention weights of the bound model. Semantics,
 * sources and defaults: include/kvsieve/policy.h (reference: NVIDIA/kvpress kvpress/presses/
 * keydiff_press.py, lagkv_press.py, criticalkv_press.py, expected_attention_press.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/model_internal.h"
#include "policy_internal.h"

typedef enum more_kind { MK_KEYDIFF, MK_LAGKV, MK_CRITICAL, MK_EXPECTED, MK_PREFIX, MK_CLUSTER, MK_COUNT } more_kind;

typedef struct more {
    more_kind kind;
    kvs_policy_params p;
    kvs_policy *base;          /* critical, prefixkv: the wrapped scorer */
    const kvs_policy *owner;   /* the kvs_policy around this (its bound model) */
    int L;                     /* layers the weight slots were made for */
    const kvs_model *w_model;  /* the model they were read from (another model: read again) */
    float **w;                 /* [L] host Wo (critical) or Wq (expected), read on first use */
    /* expected: per layer a ring of the last W pre-RoPE queries [W][n_heads * head_dim] */
    int64_t W;
    int qdim;
    float *qring;              /* [L][W][qdim] */
    int64_t *qcount, *seen;    /* [L] queries written, tokens observed since begin */
    double *tmp;               /* scratch */
    int64_t tmp_cap;
} more;

#define KEYDIFF_EPS 1e-8   /* torch cosine_similarity's norm clamp */
#define CRITICAL_EPS 1e-4  /* kvpress CriticalKVPress epsilon */

static int64_t lag_of(const more *m, int64_t budget) {
    if (m->p.lag > 0) return m->p.lag;
    int64_t g = budget / 4;
    if (g < 4) g = 4;
    return g > 128 ? 128 : g;
}

static int64_t qwindow(const kvs_policy_params *p) { return p->window > 0 ? p->window : 64; }

static kvs_status grow(more *m, int64_t n) {
    if (n <= m->tmp_cap) return KVS_OK;
    double *t = realloc(m->tmp, (size_t)n * sizeof *t);
    if (!t) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
    m->tmp = t;
    m->tmp_cap = n;
    return KVS_OK;
}

static kvs_policy_needs more_needs(const void *self, int layer, int64_t budget) {
    const more *m = self;
    kvs_policy_needs n = {0, 0};
    switch (m->kind) {
    case MK_KEYDIFF: n.flags = KVS_POLICY_NEED_KEYS; break;
    case MK_LAGKV: n.flags = KVS_POLICY_NEED_KEYS | KVS_POLICY_NEED_VALUES; break;
    case MK_CRITICAL:
        n = kvs_policy_get_needs(m->base, layer, budget);
        n.flags |= KVS_POLICY_NEED_VALUES;
        break;
    case MK_EXPECTED:
        n.flags = KVS_POLICY_NEED_OBSERVE | KVS_POLICY_NEED_X | KVS_POLICY_NEED_KEYS | KVS_POLICY_NEED_VALUES;
        break;
    case MK_CLUSTER: n.flags = KVS_POLICY_NEED_OBSERVE | KVS_POLICY_NEED_X | KVS_POLICY_NEED_KEYS; break;
    case MK_COUNT: break;
    case MK_PREFIX: n = kvs_policy_get_needs(m->base, layer, budget); break;
    }
    return n;
}

/* The bound model's weight of `layer` ('o' or 'q'), read once. */
static kvs_status weight(more *m, const kvs_model *model, int layer, int n_layers, char which, const float **out) {
    if (!model)
        return kvs_error(KVS_ERR_STATE, "policy '%s' reads the model's weights: bind it with kvs_policy_set_model",
                         kvs_policy_name(m->owner));
    const kvs_model_hparams *hp = kvs_model_get_hparams(model);
    if (hp->n_layers != n_layers || layer < 0 || layer >= n_layers)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "policy '%s': layer %d of %d does not fit the bound model (%d layers)",
                         kvs_policy_name(m->owner), layer, n_layers, hp->n_layers);
    /* the future queries are predicted as Wq x (then RoPE): a q bias or q norm (qwen2, qwen3, dream)
     * is not modelled, so such a model is refused rather than scored wrongly */
    if (which == 'q' && (hp->qkv_bias || hp->qk_norm))
        return kvs_error(KVS_ERR_UNSUPPORTED, "policy '%s' predicts queries as Wq x; the %s model's q %s is not modelled",
                         kvs_policy_name(m->owner), kvs_arch_name(hp->arch), hp->qk_norm ? "norm" : "bias");
    if (m->w && m->w_model != model) { /* bound to another model since: drop its weights */
        for (int l = 0; l < m->L; l++) free(m->w[l]);
        free(m->w);
        m->w = NULL;
    }
    if (!m->w) {
        m->w_model = model;
        m->w = calloc((size_t)n_layers, sizeof *m->w);
        if (!m->w) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
        m->L = n_layers;
    }
    if (!m->w[layer]) {
        float *w = malloc((size_t)hp->n_heads * hp->head_dim * hp->dim * sizeof *w);
        if (!w) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
        kvs_status s = kvs_model_attn_weight_f32(model, layer, which, w);
        if (s != KVS_OK) {
            free(w);
            return s;
        }
        m->w[layer] = w;
    }
    *out = m->w[layer];
    return KVS_OK;
}

/* ---- KeyDiff ---------------------------------------------------------------------------------- */

static void score_keydiff(const kvs_policy_input *in, float *scores, double *anchor) {
    int d = in->head_dim;
    int64_t st = in->stride;
    for (int h = 0; h < in->n_kv_heads; h++) {
        int64_t n = in->len[h];
        memset(anchor, 0, (size_t)d * sizeof *anchor);
        for (int64_t r = 0; r < n; r++) {
            const float *k = in->keys + (h * st + r) * d;
            double nk = 0.0;
            for (int i = 0; i < d; i++) nk += (double)k[i] * k[i];
            nk = sqrt(nk);
            if (nk < 1e-12) nk = 1e-12; /* F.normalize's eps */
            for (int i = 0; i < d; i++) anchor[i] += k[i] / nk;
        }
        double na = 0.0;
        for (int i = 0; i < d; i++) {
            anchor[i] /= (double)(n > 0 ? n : 1);
            na += anchor[i] * anchor[i];
        }
        na = sqrt(na);
        for (int64_t r = 0; r < n; r++) {
            const float *k = in->keys + (h * st + r) * d;
            double dot = 0.0, nk = 0.0;
            for (int i = 0; i < d; i++) {
                dot += k[i] * anchor[i];
                nk += (double)k[i] * k[i];
            }
            nk = sqrt(nk);
            double den = (nk > KEYDIFF_EPS ? nk : KEYDIFF_EPS) * (na > KEYDIFF_EPS ? na : KEYDIFF_EPS);
            scores[h * st + r] = (float)(-dot / den);
        }
    }
}

/* ---- LagKV ------------------------------------------------------------------------------------ */

/* s[0..lag) = softmax over the partition rows x[0..lag) of std_d of their values normalised by
 * the per-channel min/max of ref[0..lag) (rows of `d` floats, row stride d). */
static void lag_states(const float *x, const float *ref, int64_t lag, int d, double *s) {
    double mx = -INFINITY;
    for (int64_t r = 0; r < lag; r++) {
        double sum = 0.0, sq = 0.0;
        for (int i = 0; i < d; i++) {
            float lo = ref[i], hi = ref[i];
            for (int64_t j = 1; j < lag; j++) {
                float v = ref[j * d + i];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            double u = hi > lo ? ((double)x[r * d + i] - lo) / ((double)hi - lo) : 0.0;
            sum += u;
            sq += u * u;
        }
        /* unbiased standard deviation over the channels (torch.std) */
        double var = d > 1 ? (sq - sum * sum / d) / (d - 1) : 0.0;
        s[r] = sqrt(var > 0.0 ? var : 0.0);
        if (s[r] > mx) mx = s[r];
    }
    double z = 0.0;
    for (int64_t r = 0; r < lag; r++) z += (s[r] = exp(s[r] - mx));
    for (int64_t r = 0; r < lag; r++) s[r] /= z;
}

static kvs_status score_lagkv(more *m, const kvs_policy_input *in, float *scores) {
    int d = in->head_dim, ns = m->p.n_sink;
    int64_t st = in->stride, lag = lag_of(m, in->budget);
    KVS_TRY(grow(m, 3 * lag));
    double *ks = m->tmp, *vs = m->tmp + lag, *sc = m->tmp + 2 * lag;
    for (int h = 0; h < in->n_kv_heads; h++) {
        int64_t n = in->len[h];
        float *out = scores + h * st;
        for (int64_t r = 0; r < n && r < ns; r++) out[r] = 1.0f;
        if (n < ns + 2 * lag) { /* too short to partition: the rest by recency */
            for (int64_t r = ns; r < n; r++) out[r] = (float)((double)(r - ns) / (double)(n - ns));
            continue;
        }
        int64_t P = (n - ns) / lag, end = ns + P * lag;
        for (int64_t r = end - lag; r < n; r++) out[r] = 1.0f; /* the last partition and the remainder */
        for (int64_t p = 0; p + 1 < P; p++) {
            int64_t r0 = ns + p * lag;
            const float *kb = in->keys + (h * st + r0) * d, *vb = in->values + (h * st + r0) * d;
            lag_states(kb, kb + lag * d, lag, d, ks);
            lag_states(vb, vb + lag * d, lag, d, vs);
            for (int64_t r = 0; r < lag; r++) sc[r] = (ks[r] + vs[r]) / 2.0;
            /* rank within the partition (ties: the earlier row ranks lower), / lag */
            for (int64_t r = 0; r < lag; r++) {
                int64_t rank = 0;
                for (int64_t j = 0; j < lag; j++) rank += sc[j] < sc[r] || (sc[j] == sc[r] && j < r);
                out[r0 + r] = (float)((double)rank / (double)lag);
            }
        }
    }
    return KVS_OK;
}

/* ---- CriticalKV ------------------------------------------------------------------------------- */

typedef struct rowscore {
    float s;
    int64_t r;
} rowscore;

static int cmp_desc(const void *a, const void *b) {
    const rowscore *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

static kvs_status score_critical(more *m, const kvs_policy_input *in, float *scores) {
    KVS_TRY(m->base->ops->score(m->base->self, in, scores));
    const float *wo = NULL;
    KVS_TRY(weight(m, in->model, in->layer, in->n_layers, 'o', &wo));
    const kvs_model_hparams *hp = kvs_model_get_hparams(in->model);
    int d = in->head_dim, G = in->n_heads / in->n_kv_heads, D = hp->dim, QD = in->n_heads * d;
    if (hp->head_dim != d || hp->n_heads != in->n_heads || hp->n_kv_heads != in->n_kv_heads)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "policy '%s': the input's heads do not fit the bound model", kvs_policy_name(m->owner));
    int64_t st = in->stride, k1 = (int64_t)floor((double)m->p.first_stage * (double)in->budget);
    int64_t maxlen = 0;
    for (int h = 0; h < in->n_kv_heads; h++) maxlen = in->len[h] > maxlen ? in->len[h] : maxlen;
    rowscore *rs = malloc((size_t)(maxlen > 0 ? maxlen : 1) * sizeof *rs);
    if (!rs) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
    for (int h = 0; h < in->n_kv_heads; h++) {
        int64_t n = in->len[h];
        float *out = scores + h * st;
        /* stage 1: the k1 best rows of the base score stay */
        for (int64_t r = 0; r < n; r++) rs[r] = (rowscore){out[r], r};
        qsort(rs, (size_t)n, sizeof *rs, cmp_desc);
        for (int64_t i = 0; i < k1 && i < n; i++) out[rs[i].r] = INFINITY;
        /* stage 2: (s + eps) * mean over the group of ||v Wo_j||_1 */
        for (int64_t r = 0; r < n; r++) {
            if (isinf(out[r])) continue;
            const float *v = in->values + (h * st + r) * d;
            double norm = 0.0;
            for (int g = 0; g < G; g++) {
                int j = h * G + g;
                for (int o = 0; o < D; o++) {
                    const float *w = wo + (size_t)o * QD + (size_t)j * d;
                    double y = 0.0;
                    for (int i = 0; i < d; i++) y += (double)v[i] * w[i];
                    norm += fabs(y);
                }
            }
            out[r] = (float)(((double)out[r] + CRITICAL_EPS) * norm / G);
        }
    }
    free(rs);
    return KVS_OK;
}

/* ---- ExpectedAttention ------------------------------------------------------------------------ */

static kvs_status expected_begin(void *self, const kvs_policy_shape *sh) {
    more *m = self;
    m->W = qwindow(&m->p);
    m->qdim = sh->n_heads * sh->head_dim;
    free(m->qring);
    free(m->qcount);
    free(m->seen);
    m->qring = calloc((size_t)sh->n_layers * m->W * m->qdim, sizeof *m->qring);
    m->qcount = calloc((size_t)sh->n_layers, sizeof *m->qcount);
    m->seen = calloc((size_t)sh->n_layers, sizeof *m->seen);
    if (!m->qring || !m->qcount || !m->seen) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
    return KVS_OK;
}

static kvs_status expected_observe(void *self, int layer, const kvs_layer_stats *st, const int64_t *len, int64_t n_new) {
    (void)len;
    more *m = self;
    if (!m->qring) return kvs_error(KVS_ERR_STATE, "policy 'expected': observe before begin");
    if (!st || !st->x) return kvs_error(KVS_ERR_STATE, "policy 'expected': layer %d input rows missing (want_x)", layer);
    const kvs_model *model = m->owner->model;
    const float *wq = NULL;
    int L = model ? kvs_model_get_hparams(model)->n_layers : 0;
    KVS_TRY(weight(m, model, layer, L, 'q', &wq));
    int D = kvs_model_get_hparams(model)->dim;
    if (kvs_model_get_hparams(model)->n_heads * kvs_model_get_hparams(model)->head_dim != m->qdim)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "policy 'expected': the bound model does not fit the decode's shape");
    int64_t nx = st->n_x_rows, first = nx > m->W ? nx - m->W : 0;
    int64_t t0 = m->seen[layer] + (n_new - nx); /* token index of x row 0 */
    for (int64_t i = first; i < nx; i++) {
        if (t0 + i < m->p.n_sink) continue; /* kvpress drops the sink tokens' queries */
        const float *x = st->x + i * D;
        float *q = m->qring + ((size_t)layer * m->W + (size_t)(m->qcount[layer] % m->W)) * m->qdim;
        for (int j = 0; j < m->qdim; j++) {
            const float *w = wq + (size_t)j * D;
            double s = 0.0;
            for (int c = 0; c < D; c++) s += (double)w[c] * x[c];
            q[j] = (float)s;
        }
        m->qcount[layer]++;
    }
    m->seen[layer] += n_new;
    return KVS_OK;
}

/* R [d][d]: the RoPE rotation averaged over positions cur_pos+1 .. cur_pos+F (kvpress apply_avg_rope). */
static void avg_rope(const kvs_model_hparams *hp, int d, int64_t cur_pos, int64_t F, double *R) {
    int nrot = hp->rope_dim > 0 && hp->rope_dim <= d ? hp->rope_dim : d, half = nrot / 2;
    memset(R, 0, (size_t)d * d * sizeof *R);
    for (int i = 0; i < d; i++) R[i * d + i] = 1.0;
    for (int i = 0; i < half; i++) {
        double th = pow((double)hp->rope_base, -2.0 * i / (double)nrot), c = 0.0, s = 0.0;
        for (int64_t t = 1; t <= F; t++) {
            double a = (double)(cur_pos + t) * th;
            c += cos(a);
            s += sin(a);
        }
        c /= (double)F;
        s /= (double)F;
        int a = hp->rope_mode == KVS_ROPE_NEOX ? i : 2 * i, b = hp->rope_mode == KVS_ROPE_NEOX ? i + half : 2 * i + 1;
        R[a * d + a] = c, R[a * d + b] = -s, R[b * d + a] = s, R[b * d + b] = c;
    }
}

static kvs_status score_expected(more *m, const kvs_policy_input *in, float *scores) {
    const kvs_model *model = in->model;
    if (!model)
        return kvs_error(KVS_ERR_STATE, "policy 'expected' reads the model's weights: bind it with kvs_policy_set_model");
    if (!m->qring) return kvs_error(KVS_ERR_STATE, "policy 'expected': no decode begun (kvs_evictor_begin)");
    const kvs_model_hparams *hp = kvs_model_get_hparams(model);
    int d = in->head_dim, G = in->n_heads / in->n_kv_heads, l = in->layer;
    if (in->n_heads * d != m->qdim || l < 0 || l >= hp->n_layers)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "policy 'expected': the input does not fit the decode's shape");
    int64_t st = in->stride, nq = m->qcount[l] < m->W ? m->qcount[l] : m->W;
    int64_t maxlen = 0;
    for (int h = 0; h < in->n_kv_heads; h++) maxlen = in->len[h] > maxlen ? in->len[h] : maxlen;
    /* scratch: R [d][d], mu, mu' [d], C, RC, C' [d][d], z [maxlen], acc [maxlen] */
    KVS_TRY(grow(m, 4 * (int64_t)d * d + 2 * d + 2 * maxlen));
    double *R = m->tmp, *C = R + d * d, *RC = C + d * d, *C2 = RC + d * d, *mu = C2 + d * d, *mu2 = mu + d,
           *z = mu2 + d, *acc = z + maxlen;
    avg_rope(hp, d, in->cur_pos, m->p.n_future > 0 ? m->p.n_future : 512, R);
    for (int h = 0; h < in->n_kv_heads; h++) {
        int64_t n = in->len[h];
        const int32_t *pos = in->pos + h * st;
        for (int64_t r = 0; r < n; r++) acc[r] = 0.0;
        for (int g = 0; g < G; g++) {
            int j = h * G + g;
            memset(mu, 0, (size_t)d * sizeof *mu);
            memset(C, 0, (size_t)d * d * sizeof *C);
            for (int64_t t = 0; t < nq; t++) {
                const float *q = m->qring + ((size_t)l * m->W + (size_t)t) * m->qdim + (size_t)j * d;
                for (int a = 0; a < d; a++) mu[a] += q[a] / (double)nq;
            }
            for (int64_t t = 0; t < nq; t++) {
                const float *q = m->qring + ((size_t)l * m->W + (size_t)t) * m->qdim + (size_t)j * d;
                for (int a = 0; a < d; a++)
                    for (int b = 0; b < d; b++) C[a * d + b] += (q[a] - mu[a]) * (q[b] - mu[b]) / (double)nq;
            }
            for (int a = 0; a < d; a++) {
                mu2[a] = 0.0;
                for (int b = 0; b < d; b++) mu2[a] += R[a * d + b] * mu[b];
            }
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) {
                    double s = 0.0;
                    for (int c = 0; c < d; c++) s += R[a * d + c] * C[c * d + b];
                    RC[a * d + b] = s;
                }
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) {
                    double s = 0.0;
                    for (int c = 0; c < d; c++) s += RC[a * d + c] * R[b * d + c];
                    C2[a * d + b] = s;
                }
            double mx = -INFINITY;
            for (int64_t r = 0; r < n; r++) {
                if (pos[r] < m->p.n_sink) continue;
                const float *k = in->keys + (h * st + r) * d;
                double lin = 0.0, quad = 0.0;
                for (int a = 0; a < d; a++) {
                    lin += mu2[a] * k[a];
                    double ck = 0.0;
                    for (int b = 0; b < d; b++) ck += C2[a * d + b] * k[b];
                    quad += k[a] * ck;
                }
                z[r] = lin / sqrt((double)d) + quad / (double)d / 2.0;
                if (z[r] > mx) mx = z[r];
            }
            double sum = 0.0;
            for (int64_t r = 0; r < n; r++)
                if (pos[r] >= m->p.n_sink) sum += (z[r] = exp(z[r] - mx));
            for (int64_t r = 0; r < n; r++)
                if (pos[r] >= m->p.n_sink) acc[r] += z[r] / sum / G;
        }
        for (int64_t r = 0; r < n; r++) {
            if (pos[r] < m->p.n_sink) {
                scores[h * st + r] = INFINITY;
                continue;
            }
            const float *v = in->values + (h * st + r) * d;
            double vn = 0.0;
            for (int a = 0; a < d; a++) vn += (double)v[a] * v[a];
            scores[h * st + r] = (float)(acc[r] * sqrt(vn));
        }
    }
    return KVS_OK;
}

/* ---- ClusterKV --------------------------------------------------------------------------------- */

#define CLUSTER_SIZE 16 /* rows per cluster on average (ours; the paper clusters ~32k keys into hundreds) */
#define CLUSTER_ITERS 8 /* k-means (Lloyd) iterations at most */

/* The k-means assignment step on the device: for keys k [n][d] and centroids c [C][d], the nearest
 * centroid of every key, argmax_c (c.k - |c|^2 / 2), as one kvs_matmul of the augmented rows
 * [c, -|c|^2/2] x [k, 1] -> [n][C] and one per-row kvs_topk (k = 1; ties: the lower centroid). */
static kvs_status cluster_assign(kvs_device *dev, const double *cent, int64_t C, const float *keys, const int64_t *rows,
                                 int64_t n, int d, float *scratch, int32_t *asg) {
    kvs_tensor *W = NULL, *x = NULL, *y = NULL, *ix = NULL;
    int64_t D = d + 1;
    kvs_status s = kvs_tensor_new(&W, dev, KVS_F32, D, C, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&x, dev, KVS_F32, D, n, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&y, dev, KVS_F32, C, n, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&ix, dev, KVS_I32, 1, n, 0, 0);
    for (int64_t c = 0; s == KVS_OK && c < C; c++) {
        double nn = 0.0;
        for (int a = 0; a < d; a++) {
            scratch[c * D + a] = (float)cent[c * d + a];
            nn += cent[c * d + a] * cent[c * d + a];
        }
        scratch[c * D + d] = (float)(-0.5 * nn);
    }
    if (s == KVS_OK) s = kvs_tensor_upload(W, scratch, 0, (size_t)(C * D) * sizeof *scratch);
    for (int64_t i = 0; s == KVS_OK && i < n; i++) {
        memcpy(scratch + i * D, keys + rows[i] * d, (size_t)d * sizeof *scratch);
        scratch[i * D + d] = 1.0f;
    }
    if (s == KVS_OK) s = kvs_tensor_upload(x, scratch, 0, (size_t)(n * D) * sizeof *scratch);
    if (s == KVS_OK) s = kvs_matmul(dev, W, x, y, 0);
    kvs_topk_params tp = kvs_topk_params_default();
    tp.k = 1;
    if (s == KVS_OK) s = kvs_topk(dev, y, ix, NULL, &tp);
    if (s == KVS_OK) s = kvs_tensor_download(ix, asg, 0, (size_t)n * sizeof *asg);
    kvs_tensor_destroy(&W);
    kvs_tensor_destroy(&x);
    kvs_tensor_destroy(&y);
    kvs_tensor_destroy(&ix);
    return s;
}

/* Per kv head: k-means of the non-sink keys into C = ceil(n / 16) clusters (initial centroids:
 * farthest-point, deterministic; at most 8 Lloyd iterations, assignment on the model's device), then every
 * row scores q . c of its cluster's centroid c, q the group's mean window query rotated by the
 * averaged future RoPE (as ExpectedAttention's mu), summed over the group: the top-k keeps whole
 * clusters in order of query-centroid similarity. Sinks +inf. */
static kvs_status score_cluster(more *m, const kvs_policy_input *in, float *scores) {
    const kvs_model *model = in->model;
    if (!model)
        return kvs_error(KVS_ERR_STATE, "policy 'clusterkv' reads the model's Wq: bind it with kvs_policy_set_model");
    if (!m->qring) return kvs_error(KVS_ERR_STATE, "policy 'clusterkv': no decode begun (kvs_evictor_begin)");
    const kvs_model_hparams *hp = kvs_model_get_hparams(model);
    int d = in->head_dim, G = in->n_heads / in->n_kv_heads, l = in->layer;
    if (in->n_heads * d != m->qdim || l < 0 || l >= hp->n_layers)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "policy 'clusterkv': the input does not fit the decode's shape");
    int64_t st = in->stride, nq = m->qcount[l] < m->W ? m->qcount[l] : m->W, maxlen = 0;
    for (int h = 0; h < in->n_kv_heads; h++) maxlen = in->len[h] > maxlen ? in->len[h] : maxlen;
    int64_t Cmax = (maxlen + CLUSTER_SIZE - 1) / CLUSTER_SIZE + 1;
    /* scratch: R [d][d], mu, mu2, qbar [d], centroids + sums [Cmax][d] x 2, cs [Cmax], counts [Cmax] */
    KVS_TRY(grow(m, (int64_t)d * d + 3 * d + 2 * Cmax * d + 2 * Cmax));
    double *R = m->tmp, *mu = R + d * d, *mu2 = mu + d, *qbar = mu2 + d, *cent = qbar + d, *sum = cent + Cmax * d,
           *cs = sum + Cmax * d, *cnt = cs + Cmax;
    int64_t *rows = malloc((size_t)(maxlen > 0 ? maxlen : 1) * sizeof *rows);
    int32_t *asg = malloc((size_t)(maxlen > 0 ? maxlen : 1) * 2 * sizeof *asg);
    float *fs = malloc((size_t)((maxlen > Cmax ? maxlen : Cmax) + 1) * (size_t)(d + 1) * sizeof *fs);
    kvs_status s = rows && asg && fs ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy 'clusterkv': out of host memory");
    avg_rope(hp, d, in->cur_pos, m->p.n_future > 0 ? m->p.n_future : 512, R);
    kvs_device *dev = kvs_model_device(model);
    for (int h = 0; s == KVS_OK && h < in->n_kv_heads; h++) {
        const int32_t *pos = in->pos + h * st;
        int64_t n = 0;
        for (int64_t r = 0; r < in->len[h]; r++) {
            if (pos[r] < m->p.n_sink) scores[h * st + r] = INFINITY;
            else rows[n++] = r;
        }
        if (n == 0) continue;
        /* the group's rotated mean query */
        memset(qbar, 0, (size_t)d * sizeof *qbar);
        for (int g = 0; g < G && nq > 0; g++) {
            int j = h * G + g;
            memset(mu, 0, (size_t)d * sizeof *mu);
            for (int64_t t = 0; t < nq; t++) {
                const float *q = m->qring + ((size_t)l * m->W + (size_t)t) * m->qdim + (size_t)j * d;
                for (int a = 0; a < d; a++) mu[a] += q[a] / (double)nq;
            }
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) qbar[a] += R[a * d + b] * mu[b];
        }
        const float *keys = in->keys + h * st * d;
        int64_t C = (n + CLUSTER_SIZE - 1) / CLUSTER_SIZE;
        /* deterministic farthest-point initialisation (k-means++ without the sampling): the first
         * row, then each time the row farthest from the chosen centroids (ties: the lower row) */
        for (int a = 0; a < d; a++) cent[a] = keys[rows[0] * d + a];
        for (int64_t c = 1; c < C; c++) {
            int64_t best = 0;
            double bd = -1.0;
            for (int64_t i = 0; i < n; i++) {
                double md = INFINITY;
                for (int64_t e = 0; e < c; e++) {
                    double dd = 0.0;
                    for (int a = 0; a < d; a++) {
                        double t = keys[rows[i] * d + a] - cent[e * d + a];
                        dd += t * t;
                    }
                    if (dd < md) md = dd;
                }
                if (md > bd) bd = md, best = i;
            }
            for (int a = 0; a < d; a++) cent[c * d + a] = keys[rows[best] * d + a];
        }
        int32_t *cur = asg, *prev = asg + maxlen;
        for (int it = 0; s == KVS_OK && it < CLUSTER_ITERS; it++) {
            s = cluster_assign(dev, cent, C, keys, rows, n, d, fs, cur);
            if (s != KVS_OK) break;
            if (it > 0 && memcmp(cur, prev, (size_t)n * sizeof *cur) == 0) break;
            memset(sum, 0, (size_t)(C * d) * sizeof *sum);
            memset(cnt, 0, (size_t)C * sizeof *cnt);
            for (int64_t i = 0; i < n; i++) {
                cnt[cur[i]] += 1.0;
                for (int a = 0; a < d; a++) sum[cur[i] * d + a] += keys[rows[i] * d + a];
            }
            for (int64_t c = 0; c < C; c++)
                if (cnt[c] > 0)
                    for (int a = 0; a < d; a++) cent[c * d + a] = sum[c * d + a] / cnt[c];
            memcpy(prev, cur, (size_t)n * sizeof *cur);
        }
        if (s != KVS_OK) break;
        for (int64_t c = 0; c < C; c++) {
            cs[c] = 0.0;
            for (int a = 0; a < d; a++) cs[c] += qbar[a] * cent[c * d + a];
        }
        for (int64_t i = 0; i < n; i++) scores[h * st + rows[i]] = (float)cs[cur[i]];
    }
    free(rows);
    free(asg);
    free(fs);
    return s;
}

/* ---- PrefixKV --------------------------------------------------------------------------------- */

/* Each (layer, kv head)'s base scores become an importance distribution (mass = score, shifted by
 * the minimum when some score is negative; rows at +inf stay); a row scores 1 - the normalised mass
 * of the rows ranked before it. Under the global scope one top-k over these scores keeps, in every
 * layer and head, the shortest prefix of its ranking whose coverage reaches one common threshold
 * p: PrefixKV's binary search over p, done by the top-k. */
static kvs_status score_prefix(more *m, const kvs_policy_input *in, float *scores) {
    KVS_TRY(m->base->ops->score(m->base->self, in, scores));
    int64_t st = in->stride, maxlen = 0;
    for (int h = 0; h < in->n_kv_heads; h++) maxlen = in->len[h] > maxlen ? in->len[h] : maxlen;
    rowscore *rs = malloc((size_t)(maxlen > 0 ? maxlen : 1) * sizeof *rs);
    if (!rs) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
    for (int h = 0; h < in->n_kv_heads; h++) {
        float *out = scores + h * st;
        int64_t n = 0;
        double lo = INFINITY, total = 0.0;
        for (int64_t r = 0; r < in->len[h]; r++)
            if (isfinite(out[r])) {
                rs[n++] = (rowscore){out[r], r};
                lo = out[r] < lo ? out[r] : lo;
            }
        double shift = lo < 0.0 ? -lo : 0.0;
        for (int64_t i = 0; i < n; i++) total += (double)rs[i].s + shift;
        qsort(rs, (size_t)n, sizeof *rs, cmp_desc);
        double before = 0.0;
        for (int64_t i = 0; i < n; i++) {
            out[rs[i].r] = (float)(total > 0.0 ? 1.0 - before / total : 1.0 - (double)i / (double)n);
            before += (double)rs[i].s + shift;
        }
    }
    free(rs);
    return KVS_OK;
}

/* ---- the ops ---------------------------------------------------------------------------------- */

static kvs_status more_score(void *self, const kvs_policy_input *in, float *scores) {
    more *m = self;
    switch (m->kind) {
    case MK_KEYDIFF:
        KVS_TRY(grow(m, in->head_dim));
        score_keydiff(in, scores, m->tmp);
        return KVS_OK;
    case MK_LAGKV: return score_lagkv(m, in, scores);
    case MK_CRITICAL: return score_critical(m, in, scores);
    case MK_EXPECTED: return score_expected(m, in, scores);
    case MK_PREFIX: return score_prefix(m, in, scores);
    case MK_CLUSTER: return score_cluster(m, in, scores);
    case MK_COUNT: break;
    }
    return KVS_OK;
}

static kvs_status critical_begin(void *self, const kvs_policy_shape *sh) {
    more *m = self;
    return m->base->ops->begin ? m->base->ops->begin(m->base->self, sh) : KVS_OK;
}
static kvs_status critical_observe(void *self, int layer, const kvs_layer_stats *st, const int64_t *len, int64_t n_new) {
    more *m = self;
    m->base->model = m->owner->model; /* an expected base reads Wq through its own binding */
    return m->base->ops->observe ? m->base->ops->observe(m->base->self, layer, st, len, n_new) : KVS_OK;
}
static kvs_status critical_compact(void *self, int layer, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    more *m = self;
    return m->base->ops->compact ? m->base->ops->compact(m->base->self, layer, keep, n_keep, stride) : KVS_OK;
}

static void more_destroy(void *self) {
    more *m = self;
    if (!m) return;
    if (m->w)
        for (int l = 0; l < m->L; l++) free(m->w[l]);
    free(m->w);
    free(m->qring);
    free(m->qcount);
    free(m->seen);
    free(m->tmp);
    kvs_policy_destroy(&m->base);
    free(m);
}

static const kvs_policy_ops more_ops[] = {
    [MK_KEYDIFF] = {.name = "keydiff", .needs = more_needs, .score = more_score, .destroy = more_destroy},
    [MK_LAGKV] = {.name = "lagkv", .needs = more_needs, .score = more_score, .destroy = more_destroy},
    [MK_CRITICAL] = {.name = "critical", .needs = more_needs, .score = more_score, .begin = critical_begin,
                     .observe = critical_observe, .compact = critical_compact, .destroy = more_destroy},
    [MK_EXPECTED] = {.name = "expected", .needs = more_needs, .score = more_score, .begin = expected_begin,
                     .observe = expected_observe, .destroy = more_destroy},
    [MK_PREFIX] = {.name = "prefixkv", .needs = more_needs, .score = more_score, .begin = critical_begin,
                   .observe = critical_observe, .compact = critical_compact, .destroy = more_destroy},
    [MK_CLUSTER] = {.name = "clusterkv", .needs = more_needs, .score = more_score, .begin = expected_begin,
                    .observe = expected_observe, .destroy = more_destroy},
};

kvs_status kvs_policy_more_check(const kvs_policy *p, const kvs_model *model) {
    if (!p || p->ops < more_ops || p->ops >= more_ops + sizeof more_ops / sizeof more_ops[0] || !model) return KVS_OK;
    const more *m = p->self;
    const kvs_model_hparams *hp = kvs_model_get_hparams(model);
    /* the future queries are predicted as Wq x (then RoPE): a q bias or q norm is not modelled */
    if ((p->ops == &more_ops[MK_EXPECTED] || p->ops == &more_ops[MK_CLUSTER]) && (hp->qkv_bias || hp->qk_norm))
        return kvs_error(KVS_ERR_UNSUPPORTED, "policy '%s' predicts queries as Wq x; the %s model's q %s is not modelled",
                         kvs_policy_name(p), kvs_arch_name(hp->arch), hp->qk_norm ? "norm" : "bias");
    return m->base ? kvs_policy_more_check(m->base, model) : KVS_OK;
}

int kvs_policy_more_is(const char *name) {
    for (int i = 0; i < MK_COUNT; i++)
        if (strcmp(name, more_ops[i].name) == 0) return 1;
    return strncmp(name, "critical:", 9) == 0;
}

kvs_status kvs_policy_more_create(kvs_policy **out, const char *name, const kvs_policy_params *pp) {
    const char *op = "kvs_policy_create";
    *out = NULL;
    more_kind kind = MK_KEYDIFF;
    const char *base = NULL;
    if (strncmp(name, "critical:", 9) == 0) {
        kind = MK_CRITICAL;
        base = name + 9;
    } else {
        int i = 0;
        while (i < MK_COUNT && strcmp(name, more_ops[i].name)) i++;
        if (i >= MK_COUNT) return kvs_error(KVS_ERR_NOT_FOUND, "%s: unknown policy '%s'", op, name);
        kind = (more_kind)i;
        if (kind == MK_CRITICAL || kind == MK_PREFIX) base = pp->base ? pp->base : "snapkv";
    }
    more *m = calloc(1, sizeof *m);
    if (!m) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    m->kind = kind;
    m->p = *pp;
    if (m->p.first_stage == 0.0f) m->p.first_stage = 0.5f;
    if (base) {
        if (strcmp(base, "pyramidkv") == 0 || strcmp(base, "adakv") == 0 || strcmp(base, "prefixkv") == 0 ||
            (kind == MK_CRITICAL && (strcmp(base, "critical") == 0 || strncmp(base, "critical:", 9) == 0))) {
            free(m);
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %s needs a scorer as its base (streaming, h2o, snapkv, tova, "
                                                       "knorm, keydiff, lagkv, expected%s), not '%s'",
                             op, more_ops[kind].name, kind == MK_PREFIX ? ", critical[:base]" : "", base);
        }
        kvs_policy_params bp = *pp;
        bp.threshold = 0.0f; /* the threshold and mass modes apply to the wrapper's scores */
        bp.keep_mass = 0.0f;
        if (bp.base && strcmp(bp.base, base) == 0) bp.base = "snapkv"; /* prefixkv over critical: critical's own base */
        kvs_status s = kvs_policy_create(&m->base, base, &bp);
        if (s != KVS_OK) {
            free(m);
            return s == KVS_ERR_NOT_FOUND ? kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %s: unknown base scorer '%s'", op,
                                                      more_ops[kind].name, base) : s;
        }
    }
    kvs_status s = kvs_policy_custom(out, &more_ops[kind], m, 0.0f, 0);
    if (s != KVS_OK) {
        more_destroy(m);
        return s;
    }
    m->owner = *out;
    if (kind == MK_PREFIX) (*out)->min_scope = KVS_SCOPE_GLOBAL; /* one threshold over all layers */
    snprintf((*out)->name, sizeof (*out)->name, "%s", name);
    (*out)->builtin = 1;
    return KVS_OK;
}
