/* Internals of the learned policies shared by learned.c (weights, files, scoring) and train.c. */
#ifndef KVS_LEARNED_INTERNAL_H
#define KVS_LEARNED_INTERNAL_H

#include <stdint.h>

#include "kvsieve/learned.h"

#define LRN_RL_F 9 /* rl features per token */

struct kvs_learned {
    kvs_learned_kind kind;
    int L, H, NH, hd, dim, vocab, G;
    int64_t n;       /* parameters */
    float *p;        /* [n] */
    int64_t train_steps;
    uint64_t train_seed;
    double train_budget;
};

/* Parameter offsets (floats into p). */
/* retention, per layer l at l * ret_block: W1 [G][dim], b1 [G], W2 [H][G], b2 [H]; shared proj (a, c)
 * at L * ret_block */
int64_t lrn_ret_block(const kvs_learned *w);
/* Zeroed weights of a kind and shape (learned.c). Errors: KVS_ERR_OUT_OF_MEMORY. */
kvs_status lrn_alloc(kvs_learned **out, kvs_learned_kind kind, int L, int H, int NH, int hd, int dim, int vocab);
/* indexer, per layer l at l * idx_block: Wk [G][hd], Wx [G][dim], b1 [G], w2 [G], b2 [1], d [2] */
int64_t lrn_idx_block(const kvs_learned *w);
/* rl: W1 [G][F], b1 [G], w2 [G], b2 [1], layer bias [L] */

/* Deterministic RNG (splitmix64). */
typedef struct lrn_rng { uint64_t s; } lrn_rng;
uint64_t lrn_next(lrn_rng *r);
double lrn_uniform(lrn_rng *r);  /* (0, 1) */
double lrn_normal(lrn_rng *r);

static inline float lrn_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float lrn_dsilu(float x) {
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
}
static inline float lrn_logsigmoid(float z) { return z >= 0 ? -log1pf(expf(-z)) : z - log1pf(expf(z)); }

/* Gate / scorer forwards (exposed for training, which shares them). */
/* retention: log beta[H] of one token (xn [dim]) at layer l; pre[G], g[G] scratch outputs */
void lrn_ret_gate(const kvs_learned *w, int l, const float *xn, float *pre, float *g, float *logbeta);
/* indexer: the xn part u = Wx xn + b1 [G]; then m from u and k */
void lrn_idx_u(const kvs_learned *w, int l, const float *xn, float *u);
float lrn_idx_m(const kvs_learned *w, int l, const float *u, const float *k, float *pre, float *g);
/* rl: the heuristic starting weights (learned.c comment); w2[0] scale */
#define LRN_RL_INIT_SCALE 20.0f
void lrn_rl_heuristic_init(kvs_learned *w, lrn_rng *r);
/* rl: score of features f[F] at layer l */
float lrn_rl_score(const kvs_learned *w, int l, const float *f, float *pre, float *g);

/* Training hooks of an rl policy (NULL rec: inference). */
typedef struct lrn_rl_rec {
    lrn_rng rng;
    float *grad;         /* [n] d log p / d theta of the current event, accumulated */
    int event_pending;   /* an eviction happened since the last take */
} lrn_rl_rec;
void lrn_policy_set_rl_rec(kvs_policy *p, lrn_rl_rec *rec);
/* The weights a learned policy scores with (its own copy), or NULL for another policy. */
kvs_learned *lrn_policy_weights(kvs_policy *p);

#endif
