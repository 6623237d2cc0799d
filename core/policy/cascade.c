/* The cascading KV cache (Willette, Lee, Hwang 2024, "Training-Free Exponential Context Extension
 * via Cascading KV Cache", arXiv 2406.17808; reference code jeffwillette/cascading_cache_2,
 * cascade/models/cascading_cache.py) as an eviction policy: the budget per kv head is the
 * n_sink sink tokens plus C sub-caches (cascades) of W = (budget - n_sink) / C tokens each.
 * Every new token enters cascade 0; cascade i takes a token only on every 2^i-th token after the
 * sinks (until all cascades are full, every token: the reference's eager fill). A cascade that
 * takes a token while full passes its oldest token on to cascade i+1; a cascade that does not take
 * it compares the carried token with its newest one by the running average of attention (EMA,
 * beta 0.999, of the group-mean attention each key receives per step) and keeps the better; what
 * falls out of the last cascade is dropped. The evictor evicts in bulk (at budget + buffer), so the
 * tokens that arrived since the last eviction are run through the cascades in order when it
 * scores: members (sinks and cascade contents, <= budget) score 2 + EMA, the rest their EMA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "policy_internal.h"

#define CAS_BETA 0.999 /* the reference's EMA factor */

typedef struct cascade {
    kvs_policy_params p;
    int C;                 /* cascades */
    int L, H;
    int64_t cap;
    float *ema;            /* [L][H][cap] EMA of the attention each row received */
    int64_t *tok;          /* [L][H][cap] token number of each row (0, 1, .. in arrival order) */
    int64_t *next, *seen;  /* [L][H] tokens numbered / run through the cascades */
    int64_t *W;            /* [L] cascade size, set at the layer's first scoring (0: not yet) */
    int64_t **ring;        /* [L] -> [H][C][W] token numbers; start/count [L][H][C] */
    int64_t *start, *count;
} cascade;

static void cas_free_state(cascade *c) {
    if (c->ring)
        for (int l = 0; l < c->L; l++) free(c->ring[l]);
    free(c->ring), free(c->ema), free(c->tok), free(c->next), free(c->seen), free(c->W), free(c->start), free(c->count);
    c->ring = NULL, c->ema = NULL, c->tok = NULL, c->next = c->seen = c->W = c->start = c->count = NULL;
}

static kvs_policy_needs cas_needs(const void *self, int layer, int64_t budget) {
    (void)self, (void)layer, (void)budget;
    kvs_policy_needs n = {.flags = KVS_POLICY_NEED_ACC_MASS | KVS_POLICY_NEED_OBSERVE, .window = 0};
    return n;
}

static kvs_status cas_begin(void *self, const kvs_policy_shape *sh) {
    cascade *c = self;
    cas_free_state(c);
    c->L = sh->n_layers, c->H = sh->n_kv_heads, c->cap = sh->capacity;
    size_t LH = (size_t)c->L * c->H, LHC = LH * (size_t)c->cap;
    c->ema = calloc(LHC, sizeof *c->ema);
    c->tok = calloc(LHC, sizeof *c->tok);
    c->next = calloc(LH, sizeof *c->next);
    c->seen = calloc(LH, sizeof *c->seen);
    c->W = calloc((size_t)c->L, sizeof *c->W);
    c->ring = calloc((size_t)c->L, sizeof *c->ring);
    c->start = calloc(LH * c->C, sizeof *c->start);
    c->count = calloc(LH * c->C, sizeof *c->count);
    if (!c->ema || !c->tok || !c->next || !c->seen || !c->W || !c->ring || !c->start || !c->count)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "cascade: out of host memory");
    return KVS_OK;
}

/* Every step: the EMA of the attention each row received, and token numbers for the new rows. */
static kvs_status cas_observe(void *self, int l, const kvs_layer_stats *st, const int64_t *len, int64_t n_new) {
    cascade *c = self;
    for (int h = 0; h < c->H; h++) {
        size_t base = ((size_t)l * c->H + h) * c->cap;
        float *e = c->ema + base;
        for (int64_t r = 0; r < len[h]; r++) {
            double a = st && st->key_mass && r < st->n_kv ? st->key_mass[(size_t)h * st->n_kv + r] : 0.0;
            if (r >= len[h] - n_new) {
                e[r] = (float)((1.0 - CAS_BETA) * a);
                c->tok[base + r] = c->next[(size_t)l * c->H + h]++;
            } else {
                e[r] = (float)(CAS_BETA * e[r] + (1.0 - CAS_BETA) * a);
            }
        }
    }
    return KVS_OK;
}

static kvs_status cas_compact(void *self, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    cascade *c = self;
    for (int h = 0; h < c->H; h++) {
        size_t base = ((size_t)l * c->H + h) * c->cap;
        for (int64_t i = 0; i < n_keep[h]; i++) {
            c->ema[base + i] = c->ema[base + keep[h * stride + i]];
            c->tok[base + i] = c->tok[base + keep[h * stride + i]];
        }
    }
    return KVS_OK;
}

/* EMA of token t in head (l, h) (rows hold increasing token numbers); 0 when no longer cached. */
static double tok_score(const cascade *c, int l, int h, int64_t len, int64_t t) {
    size_t base = ((size_t)l * c->H + h) * c->cap;
    int64_t lo = 0, hi = len - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (c->tok[base + mid] == t) return c->ema[base + mid];
        if (c->tok[base + mid] < t) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0.0;
}

/* Runs token t (score s) through the cascades of head (l, h). */
static void cas_insert(cascade *c, int l, int h, int64_t len, int64_t t, double s) {
    int64_t n_sink = c->p.n_sink, W = c->W[l];
    if (t < n_sink) return; /* a sink: always kept */
    int64_t u = t - n_sink;
    int eager = u < (int64_t)c->C * W;
    int64_t *ring = c->ring[l] + (size_t)h * c->C * W;
    int64_t *start = c->start + ((size_t)l * c->H + h) * c->C, *count = c->count + ((size_t)l * c->H + h) * c->C;
    int64_t carry = t;
    double cs = s;
    for (int i = 0; i < c->C; i++) {
        int64_t *ri = ring + (size_t)i * W;
        int take = eager || (u % ((int64_t)1 << (i < 62 ? i : 62))) == 0;
        if (take) {
            if (count[i] < W) {
                ri[(start[i] + count[i]) % W] = carry;
                count[i]++;
                return;
            }
            int64_t old = ri[start[i]]; /* the oldest moves on to the next cascade */
            ri[start[i]] = carry;
            start[i] = (start[i] + 1) % W;
            carry = old;
            cs = tok_score(c, l, h, len, old);
        } else {
            if (count[i] == 0) {
                ri[start[i]] = carry;
                count[i] = 1;
                return;
            }
            int64_t newest = (start[i] + count[i] - 1) % W; /* token selection against the newest */
            if (cs >= tok_score(c, l, h, len, ri[newest])) ri[newest] = carry;
            return;
        }
    }
}

static kvs_status cas_score(void *self, const kvs_policy_input *in, float *scores) {
    cascade *c = self;
    int l = in->layer;
    if (!c->W || l < 0 || l >= c->L) return kvs_error(KVS_ERR_STATE, "cascade: scored before begin");
    if (c->W[l] == 0) { /* the cascade size follows the layer's budget */
        int64_t W = (in->budget - c->p.n_sink) / c->C;
        c->W[l] = W < 1 ? 1 : W;
        c->ring[l] = calloc((size_t)c->H * c->C * c->W[l], sizeof *c->ring[l]);
        if (!c->ring[l]) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "cascade: out of host memory");
    }
    int64_t W = c->W[l];
    for (int h = 0; h < in->n_kv_heads; h++) {
        size_t base = ((size_t)l * c->H + h) * c->cap;
        int64_t *seen = &c->seen[(size_t)l * c->H + h];
        for (int64_t r = 0; r < in->len[h]; r++) /* the tokens that arrived since the last eviction */
            if (c->tok[base + r] >= *seen) {
                cas_insert(c, l, h, in->len[h], c->tok[base + r], c->ema[base + r]);
                *seen = c->tok[base + r] + 1;
            }
        const int64_t *ring = c->ring[l] + (size_t)h * c->C * W;
        const int64_t *start = c->start + ((size_t)l * c->H + h) * c->C, *count = c->count + ((size_t)l * c->H + h) * c->C;
        for (int64_t r = 0; r < in->len[h]; r++) {
            int64_t t = c->tok[base + r];
            int member = t < c->p.n_sink;
            for (int i = 0; i < c->C && !member; i++)
                for (int64_t j = 0; j < count[i] && !member; j++) member = ring[(size_t)i * W + (start[i] + j) % W] == t;
            float e = c->ema[base + r];
            scores[h * in->stride + r] = t < c->p.n_sink ? INFINITY : (member ? 2.0f + e : e);
        }
    }
    return KVS_OK;
}

static void cas_destroy(void *self) {
    cascade *c = self;
    cas_free_state(c);
    free(c);
}

static const kvs_policy_ops cas_ops = {.name = "cascade", .needs = cas_needs, .score = cas_score, .begin = cas_begin,
                                       .observe = cas_observe, .compact = cas_compact, .destroy = cas_destroy};

kvs_status kvs_policy_cascade_create(kvs_policy **out, const kvs_policy_params *pp) {
    *out = NULL;
    if (pp->cascades < 0 || pp->cascades > 16)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_policy_create: cascade: cascades %d must be in [0, 16] (0 = 4)", pp->cascades);
    cascade *c = calloc(1, sizeof *c);
    if (!c) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_policy_create: out of host memory");
    c->p = *pp;
    c->C = pp->cascades ? pp->cascades : 4;
    kvs_status s = kvs_policy_custom(out, &cas_ops, c, 0.0f, 0);
    if (s != KVS_OK) free(c);
    return s;
}
