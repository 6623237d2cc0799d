/* Token-scoring eviction policies: StreamingLLM, H2O, SnapKV, TOVA, K-norm, and the PyramidKV /
 * Ada-KV budget shapes over a base scorer (the issue-18 scorers live in policy_more.c), the
 * DMS-style threshold mode. Pure host logic; see include/kvsieve/policy.h for the
 * semantics and sources (NVIDIA/kvpress kvpress/presses/). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "policy_internal.h"

/* ---- the policy object ------------------------------------------------------------------------ */

kvs_policy_params kvs_policy_params_default(void) {
    kvs_policy_params p = {.n_sink = 4, .window = 0, .kernel = 5, .beta = 20, .alpha = 0.2f, .base = "snapkv",
                           .threshold = 0.0f, .lag = 0, .first_stage = 0.0f, .n_future = 0, .cascades = 0,
                           .keep_mass = 0.0f};
    return p;
}

static const char *const g_names[] = {"streaming", "h2o",     "snapkv", "tova",     "knorm",    "pyramidkv",
                                      "adakv",     "keydiff", "lagkv",  "critical", "expected", "prefixkv", "cascade",
                                      "clusterkv", NULL};

const char *const *kvs_policy_names(void) { return g_names; }

typedef enum scorer_kind { SC_STREAMING, SC_H2O, SC_SNAPKV, SC_TOVA, SC_KNORM } scorer_kind;

typedef struct builtin {
    scorer_kind kind;
    kvs_policy_params p;
    float *tmp;          /* scratch: per-position sums (TOVA) or one pooled row (SnapKV) */
    int64_t tmp_cap;
} builtin;

/* Window of the SnapKV observation / H2O recency for a layer budget. */
static int64_t builtin_window(const builtin *b, int64_t budget) {
    switch (b->kind) {
    case SC_H2O: return b->p.window > 0 ? b->p.window : budget / 2;
    case SC_SNAPKV: {
        if (b->p.window > 0) return b->p.window;
        int64_t w = budget / 2;
        if (w > 64) w = 64;
        return w < 1 ? 1 : w;
    }
    case SC_TOVA: return 1;
    default: return 0;
    }
}

static kvs_policy_needs builtin_needs(const void *self, int layer, int64_t budget) {
    (void)layer;
    const builtin *b = self;
    kvs_policy_needs n = {0, 0};
    switch (b->kind) {
    case SC_STREAMING: break;
    case SC_H2O: n.flags = KVS_POLICY_NEED_ACC_MASS; break;
    case SC_SNAPKV:
    case SC_TOVA:
        n.flags = KVS_POLICY_NEED_WINDOW_MASS;
        n.window = builtin_window(b, budget);
        break;
    case SC_KNORM: n.flags = KVS_POLICY_NEED_KEYS; break;
    }
    return n;
}

static kvs_status grow_tmp(builtin *b, int64_t n) {
    if (n <= b->tmp_cap) return KVS_OK;
    float *t = realloc(b->tmp, (size_t)n * sizeof *t);
    if (!t) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "policy: out of host memory");
    b->tmp = t;
    b->tmp_cap = n;
    return KVS_OK;
}

static kvs_status builtin_score(void *self, const kvs_policy_input *in, float *scores) {
    builtin *b = self;
    int H = in->n_kv_heads;
    int64_t st = in->stride;
    switch (b->kind) {
    case SC_STREAMING:
        /* kvpress StreamingLLMPress: sinks (the first n_sink positions) and the most recent tokens. */
        for (int h = 0; h < H; h++)
            for (int64_t r = 0; r < in->len[h]; r++) {
                int32_t p = in->pos[h * st + r];
                scores[h * st + r] = p < b->p.n_sink ? INFINITY : (float)p;
            }
        break;
    case SC_H2O: {
        /* kvpress ObservedAttentionPress: summed attention / number of queries that saw the key;
         * plus H2O's recent window. */
        int64_t w = builtin_window(b, in->budget);
        for (int h = 0; h < H; h++)
            for (int64_t r = 0; r < in->len[h]; r++) {
                int32_t p = in->pos[h * st + r];
                int64_t seen = (int64_t)in->cur_pos - p + 1;
                if (seen < 1) seen = 1;
                scores[h * st + r] = (int64_t)p > (int64_t)in->cur_pos - w ? INFINITY
                                                                           : (float)((double)in->acc_mass[h * st + r] / (double)seen);
            }
        break;
    }
    case SC_SNAPKV: {
        /* kvpress SnapKVPress: mean over the window's queries, avg_pool1d(kernel, padding k/2,
         * stride 1, zero padding counted) over the keys before the window; window kept. */
        int64_t w = builtin_window(b, in->budget);
        int k = b->p.kernel, half = k / 2;
        double nq = in->win_queries > 0 ? (double)in->win_queries : 1.0;
        int64_t maxlen = 0;
        for (int h = 0; h < H; h++) maxlen = in->len[h] > maxlen ? in->len[h] : maxlen;
        KVS_TRY(grow_tmp(b, maxlen + 1));
        for (int h = 0; h < H; h++) {
            const float *m = in->win_mass + h * st;
            const int32_t *pos = in->pos + h * st;
            int64_t n = in->len[h], nw = 0; /* rows before the window */
            while (nw < n && (int64_t)pos[nw] <= (int64_t)in->cur_pos - w) nw++;
            for (int64_t r = 0; r < nw; r++) {
                double s = 0.0;
                for (int64_t j = r - half; j <= r + half; j++)
                    if (j >= 0 && j < nw) s += (double)m[j];
                b->tmp[r] = (float)(s / nq / (double)k);
            }
            for (int64_t r = 0; r < nw; r++) scores[h * st + r] = b->tmp[r];
            for (int64_t r = nw; r < n; r++) scores[h * st + r] = INFINITY;
        }
        break;
    }
    case SC_TOVA: {
        /* kvpress TOVAPress: the last query's attention averaged over all query heads: per token
         * position, (1/H) sum over kv heads of their group-mean mass (0 where a head evicted the
         * token); the newest token kept. */
        int64_t np = (int64_t)in->cur_pos + 1;
        KVS_TRY(grow_tmp(b, np));
        memset(b->tmp, 0, (size_t)np * sizeof *b->tmp);
        for (int h = 0; h < H; h++)
            for (int64_t r = 0; r < in->len[h]; r++) {
                int32_t p = in->pos[h * st + r];
                if (p >= 0 && p < np) b->tmp[p] += in->win_mass[h * st + r];
            }
        for (int h = 0; h < H; h++)
            for (int64_t r = 0; r < in->len[h]; r++) {
                int32_t p = in->pos[h * st + r];
                scores[h * st + r] = p >= in->cur_pos ? INFINITY : (p >= 0 ? b->tmp[p] / (float)H : 0.0f);
            }
        break;
    }
    case SC_KNORM:
        /* kvpress KnormPress: -||k||_2 (low-norm keys draw attention). */
        for (int h = 0; h < H; h++)
            for (int64_t r = 0; r < in->len[h]; r++) {
                const float *kr = in->keys + (h * st + r) * in->head_dim;
                double s = 0.0;
                for (int d = 0; d < in->head_dim; d++) s += (double)kr[d] * kr[d];
                scores[h * st + r] = (float)-sqrt(s);
            }
        break;
    }
    return KVS_OK;
}

static void builtin_destroy(void *self) {
    builtin *b = self;
    if (!b) return;
    free(b->tmp);
    free(b);
}

static const kvs_policy_ops builtin_ops[] = {
    [SC_STREAMING] = {.name = "streaming", .needs = builtin_needs, .score = builtin_score, .destroy = builtin_destroy},
    [SC_H2O] = {.name = "h2o", .needs = builtin_needs, .score = builtin_score, .destroy = builtin_destroy},
    [SC_SNAPKV] = {.name = "snapkv", .needs = builtin_needs, .score = builtin_score, .destroy = builtin_destroy},
    [SC_TOVA] = {.name = "tova", .needs = builtin_needs, .score = builtin_score, .destroy = builtin_destroy},
    [SC_KNORM] = {.name = "knorm", .needs = builtin_needs, .score = builtin_score, .destroy = builtin_destroy},
};

static int scorer_from_name(const char *name, scorer_kind *k) {
    for (int i = 0; i <= SC_KNORM; i++)
        if (strcmp(name, builtin_ops[i].name) == 0) {
            *k = (scorer_kind)i;
            return 1;
        }
    return 0;
}

/* 1 when a policy's scores are attention masses (>= 0, summing to the attention the rows received):
 * the mass mode's requirement. */
static int mass_scorer(const char *name, const char *base) {
    static const char *const ok[] = {"h2o", "snapkv", "tova", "expected"};
    if (strncmp(name, "critical:", 9) == 0) base = name + 9;
    else if (strcmp(name, "critical") != 0 && strcmp(name, "pyramidkv") != 0 && strcmp(name, "adakv") != 0) base = name;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(base, ok[i]) == 0) return 1;
    return 0;
}

kvs_status kvs_policy_create(kvs_policy **out, const char *name, const kvs_policy_params *pp) {
    const char *op = "kvs_policy_create";
    if (!out || !name) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *out = NULL;
    kvs_policy_params p = pp ? *pp : kvs_policy_params_default();
    if (!p.base) p.base = "snapkv";
    const char *at = strchr(name, '@');
    if (at && strncmp(at + 1, "mass", 4) == 0) { /* "<name>@mass<p>": the mass mode (snapkv@mass0.9) */
        char base[48], *end = NULL;
        double m = strtod(at + 5, &end);
        if ((size_t)(at - name) >= sizeof base || at == name || end == at + 5 || *end || !(m > 0.0 && m <= 1.0))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: '%s': want <policy>@mass<p> with p in (0, 1]", op, name);
        memcpy(base, name, (size_t)(at - name));
        base[at - name] = '\0';
        p.keep_mass = (float)m;
        KVS_TRY(kvs_policy_create(out, base, &p));
        snprintf((*out)->name, sizeof (*out)->name, "%s", name);
        return KVS_OK;
    }
    if (at) { /* "<name>@t": the threshold mode with threshold t (kvsieve eval --policies snapkv@0.3) */
        char base[48], *end = NULL;
        double t = strtod(at + 1, &end);
        if ((size_t)(at - name) >= sizeof base || at == name || end == at + 1 || *end || !(t > 0.0 && t < 1.0))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: '%s': want <policy>@t with a threshold t in (0, 1)", op, name);
        memcpy(base, name, (size_t)(at - name));
        base[at - name] = '\0';
        p.threshold = (float)t;
        KVS_TRY(kvs_policy_create(out, base, &p));
        snprintf((*out)->name, sizeof (*out)->name, "%s", name);
        return KVS_OK;
    }
    if (p.n_sink < 0 || p.window < 0 || p.kernel < 1 || p.kernel % 2 == 0 || p.beta < 1 || !(p.alpha >= 0.0f && p.alpha <= 1.0f) ||
        !(p.threshold >= 0.0f && p.threshold < 1.0f) || p.lag == 1 || p.lag < 0 || !(p.first_stage >= 0.0f && p.first_stage <= 1.0f) ||
        p.n_future < 0 || !(p.keep_mass >= 0.0f && p.keep_mass <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: n_sink %d >= 0, window %lld >= 0, kernel %d odd >= 1, beta %d >= 1, alpha %g in [0, 1], "
                         "threshold %g in [0, 1), lag %lld 0 or >= 2, first_stage %g in [0, 1], n_future %lld >= 0, "
                         "keep_mass %g in [0, 1] required",
                         op, p.n_sink, (long long)p.window, p.kernel, p.beta, (double)p.alpha, (double)p.threshold,
                         (long long)p.lag, (double)p.first_stage, (long long)p.n_future, (double)p.keep_mass);
    if (p.keep_mass > 0.0f && !mass_scorer(name, p.base))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: the mass mode (keep_mass %g, '@mass') needs scores that are attention masses: h2o, snapkv, "
                         "tova, expected, or critical / pyramidkv / adakv over one of them; '%s' (base '%s') scores otherwise",
                         op, (double)p.keep_mass, name, p.base);
    scorer_kind kind = SC_STREAMING;
    float alpha = 0.0f;
    int beta = 0;
    const char *scorer = name; /* the scorer under the budget shape */
    if (strcmp(name, "pyramidkv") == 0 || strcmp(name, "adakv") == 0) {
        scorer = p.base;
        if (!scorer_from_name(p.base, &kind) &&
            (!kvs_policy_more_is(p.base) || strncmp(p.base, "critical", 8) == 0 || strcmp(p.base, "prefixkv") == 0))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                             "%s: %s needs a base scorer (streaming, h2o, snapkv, tova, knorm, keydiff, lagkv, expected), not '%s'",
                             op, name, p.base);
        if (name[0] == 'p') beta = p.beta;
        else alpha = p.alpha;
    } else if (!scorer_from_name(name, &kind) && !kvs_policy_more_is(name) && strcmp(name, "cascade") != 0) {
        return kvs_error(KVS_ERR_NOT_FOUND,
                         "%s: unknown policy '%s' (known: streaming, h2o, snapkv, tova, knorm, pyramidkv, adakv, keydiff, "
                         "lagkv, critical[:base], expected, prefixkv, cascade, clusterkv; learned, from a policy file: retention, indexer, rl)", op, name);
    }
    kvs_status s;
    if (strcmp(scorer, "cascade") == 0) {
        KVS_TRY(kvs_policy_cascade_create(out, &p));
    } else if (kvs_policy_more_is(scorer)) {
        KVS_TRY(kvs_policy_more_create(out, scorer, &p));
        (*out)->alpha = alpha;
        (*out)->beta = beta;
    } else {
        builtin *b = calloc(1, sizeof *b);
        if (!b) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        b->kind = kind;
        b->p = p;
        s = kvs_policy_custom(out, &builtin_ops[kind], b, alpha, beta);
        if (s != KVS_OK) {
            builtin_destroy(b);
            return s;
        }
    }
    snprintf((*out)->name, sizeof (*out)->name, "%s", name);
    (*out)->builtin = 1;
    /* the rows kept whatever the scores (kvs_evictor_create refuses a budget they fill) */
    const char *sc = strncmp(scorer, "critical:", 9) == 0 ? scorer + 9
                     : strcmp(scorer, "critical") == 0 || strcmp(scorer, "prefixkv") == 0 ? p.base : scorer;
    if (strcmp(sc, "streaming") == 0 || strcmp(sc, "lagkv") == 0 || strcmp(sc, "expected") == 0 ||
        strcmp(sc, "clusterkv") == 0 || strcmp(sc, "cascade") == 0)
        (*out)->protect_sink = p.n_sink;
    if (strcmp(sc, "h2o") == 0 || strcmp(sc, "snapkv") == 0) (*out)->protect_window = p.window;
    (*out)->keep_mass = p.keep_mass;
    if (p.threshold > 0.0f) { /* DMS-style threshold mode: kvs_policy_score marks, the evictor evicts */
        (*out)->norm_threshold = p.threshold;
        (*out)->threshold = KVS_POLICY_MARK_EVICT / 2;
    }
    return KVS_OK;
}

kvs_status kvs_policy_custom(kvs_policy **out, const kvs_policy_ops *ops, void *self, float alpha, int beta) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_policy_custom: out is NULL");
    *out = NULL;
    if (!ops || !ops->name || !ops->needs || !ops->score)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_policy_custom: ops with name, needs and score required");
    if (!(alpha >= 0.0f && alpha <= 1.0f) || beta < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_policy_custom: alpha %g outside [0, 1] or beta %d < 0", (double)alpha, beta);
    kvs_policy *p = calloc(1, sizeof *p);
    if (!p) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_policy_custom: out of host memory");
    p->ops = ops;
    p->self = self;
    p->alpha = alpha;
    p->threshold = -INFINITY;
    p->beta = beta;
    snprintf(p->name, sizeof p->name, "%s", ops->name);
    *out = p;
    return KVS_OK;
}

void kvs_policy_destroy(kvs_policy **pp) {
    if (!pp || !*pp) return;
    kvs_policy *p = *pp;
    if (p->ops->destroy) p->ops->destroy(p->self);
    free(p);
    *pp = NULL;
}

const char *kvs_policy_name(const kvs_policy *p) { return p ? p->name : NULL; }

kvs_policy_needs kvs_policy_get_needs(const kvs_policy *p, int layer, int64_t budget) {
    kvs_policy_needs n = {0, 0};
    if (!p) return n;
    n = p->ops->needs(p->self, layer, budget);
    if ((n.flags & KVS_POLICY_NEED_WINDOW_MASS) && n.window < 1) n.window = 1;
    return n;
}

kvs_status kvs_policy_score(kvs_policy *p, const kvs_policy_input *in, float *scores) {
    const char *op = "kvs_policy_score";
    if (!p || !in || !scores || !in->len || !in->pos || in->n_kv_heads < 1 || in->stride < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or empty shape", op);
    kvs_policy_needs n = kvs_policy_get_needs(p, in->layer, in->budget);
    if (((n.flags & KVS_POLICY_NEED_ACC_MASS) && !in->acc_mass) || ((n.flags & KVS_POLICY_NEED_WINDOW_MASS) && !in->win_mass) ||
        ((n.flags & KVS_POLICY_NEED_KEYS) && !in->keys) || ((n.flags & KVS_POLICY_NEED_VALUES) && !in->values))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: policy '%s' declared inputs 0x%x that are missing", op, p->name, n.flags);
    for (int h = 0; h < in->n_kv_heads; h++) {
        if (in->len[h] < 0 || in->len[h] > in->stride)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: head %d length %lld outside [0, %lld]", op, h, (long long)in->len[h],
                             (long long)in->stride);
        for (int64_t r = in->len[h]; r < in->stride; r++) scores[h * in->stride + r] = -INFINITY;
    }
    kvs_policy_input loc = *in;
    if (!loc.model) loc.model = p->model;
    KVS_TRY(p->ops->score(p->self, &loc, scores));
    if (p->norm_threshold > 0.0f) /* threshold mode: per head, min-max over the finite scores */
        for (int h = 0; h < in->n_kv_heads; h++) {
            float *s = scores + h * in->stride, lo = INFINITY, hi = -INFINITY;
            for (int64_t r = 0; r < in->len[h]; r++)
                if (isfinite(s[r])) lo = s[r] < lo ? s[r] : lo, hi = s[r] > hi ? s[r] : hi;
            if (!(hi > lo)) continue; /* all equal (or none finite): nothing is below */
            for (int64_t r = 0; r < in->len[h]; r++)
                if (isfinite(s[r]) && ((double)s[r] - lo) / ((double)hi - lo) < (double)p->norm_threshold) s[r] = KVS_POLICY_MARK_EVICT;
        }
    return KVS_OK;
}

/* ---- budgets ---------------------------------------------------------------------------------- */

kvs_status kvs_pyramid_budgets(int n_layers, int64_t budget, int beta, int64_t seq_len, int64_t *out) {
    if (n_layers < 1 || budget < 1 || beta < 1 || seq_len < budget || !out)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "kvs_pyramid_budgets: n_layers %d >= 1, budget %lld >= 1, beta %d >= 1, seq_len %lld >= budget required",
                         n_layers, (long long)budget, beta, (long long)seq_len);
    if (n_layers == 1) {
        out[0] = budget;
        return KVS_OK;
    }
    double B = (double)budget, S = (double)seq_len;
    double mn = B / beta, mx = 2.0 * B - mn;
    if (mx > S) {
        mx = S;
        mn = 2.0 * B - S;
    }
    double step = (mx - mn) / (double)(n_layers - 1);
    for (int l = 0; l < n_layers; l++) {
        int64_t b = (int64_t)llround(mx - l * step);
        if (b < 1) b = 1;
        if (b > seq_len) b = seq_len;
        out[l] = b;
    }
    return KVS_OK;
}

const char *kvs_budget_scope_name(kvs_budget_scope s) {
    switch (s) {
    case KVS_SCOPE_HEAD: return "head";
    case KVS_SCOPE_LAYER: return "layer";
    case KVS_SCOPE_GLOBAL: return "global";
    }
    return "?";
}

kvs_status kvs_budget_scope_from_name(const char *name, kvs_budget_scope *out) {
    if (!name || !out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_budget_scope_from_name: NULL argument");
    for (int s = 0; s <= KVS_SCOPE_GLOBAL; s++)
        if (strcmp(name, kvs_budget_scope_name((kvs_budget_scope)s)) == 0) {
            *out = (kvs_budget_scope)s;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "unknown budget scope '%s' (head, layer, global)", name);
}

/* The latent memory a policy hands to its plans (policy.h). */
void kvs_policy_set_latent(kvs_policy *p, kvs_latent *lm) {
    if (p) p->latent = lm;
}
kvs_latent *kvs_policy_get_latent(const kvs_policy *p) { return p ? p->latent : NULL; }
kvs_budget_scope kvs_policy_effective_scope(const kvs_policy *p, kvs_budget_scope requested) {
    return p && p->min_scope > (int)requested ? (kvs_budget_scope)p->min_scope : requested;
}

kvs_status kvs_policy_check_model(const kvs_policy *p, const kvs_model *m) {
    if (!p || !m) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_policy_check_model: NULL argument");
    return kvs_policy_more_check(p, m);
}

void kvs_policy_set_model(kvs_policy *p, const kvs_model *m) {
    if (p) p->model = m;
}
