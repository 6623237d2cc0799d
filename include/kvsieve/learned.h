/* kvsieve — learned KV eviction policies (issue 8): weights, training, GGUF side files.
 *
 * Three kinds, each a kvs_policy (through kvs_policy_custom) driven by the kvs_evictor:
 *
 *   retention  Retention gates (TRIM-KV, Bui et al., arXiv 2512.03324, code ngocbh/trimkv
 *              RetentionGate; "Make Each Token Count", arXiv 2605.09649). Per layer l a gate MLP on
 *              the token's normalised layer input xn (dim) at creation:
 *                log beta = logsigmoid(W2 silu(W1 xn + b1) + b2),   one value per kv head,
 *              W1 [G][dim], b1 [G], W2 [n_kv_heads][G], b2 [n_kv_heads] (init 10, W ~ N(0, 0.02)
 *              as trimkv's reset_parameters). Computed once per token (observe hook, NEED_X).
 *              Score at time t (the newest query position) of a token at position pos:
 *                score = a * (t - pos) * log beta + c
 *              with (a, c) one *shared* final projection for every layer and head, so one top-k can
 *              compare entries of all layers and heads (use scope global: one kvs_topk_global over
 *              L * n_kv_heads * N entries under one budget; scopes head/layer and the Ada-KV floor
 *              (alpha) give the per-head, per-layer and floor modes; threshold mode: every entry
 *              scoring below `threshold` is evicted whenever eviction runs, the budget capping the
 *              rest — see kvs_learned_policy).
 *              Training (ours, not the papers' distillation loss): regress log(eps + u) where u is
 *              the token's measured future attention utility — the mean GQA-group attention the
 *              token receives from the W queries after time t in full-cache runs on the train
 *              split — by the score above, least squares over all (token, t) pairs, Adam.
 *   indexer    Learned indexer (after IndexMem, arXiv 2605.25475; no public code): per layer a
 *              scorer on the token's key k (post-RoPE, as cached) and xn:
 *                m = w2 . silu(Wk k + Wx xn + b1) + b2,  score(t) = m + d1 log(1 + t - pos) + d2
 *              (d1, d2 per layer). m is computed once per row. Trained like retention (same target).
 *              With a latent memory (kvs_learned_policy latent_features > 0; latent.h) the evicted
 *              rows are folded into S += phi(k) v^T, z += phi(k) and attention reads them back.
 *   rl         DistillCache-style policy (no public code): per-token features
 *                [acc mass / queries seen, max attention received, recent mass (EMA 0.8),
 *                 attention entropy of the head (last step, / log n), ||v||, ||k||, pos / t,
 *                 log(1 + age) / log(512), 1 if age < budget / 2 else 0]
 *              -> MLP F=9 -> G -> 1 shared by all layers and heads (plus a per-layer bias).
 *              Start (ours): hidden unit 0 holds H2O's score, 3 + f0 + 10 f8 (mean attention
 *              received, H2O's recent window of half the budget on top) read out with weight 20,
 *              the other units random with zero read-out: training starts from exactly H2O's
 *              ranking and REINFORCE fine-tunes it.
 *              Training: keep-sets sampled by Gumbel top-k (scores + Gumbel noise, scope head);
 *              reward per step r_t = -KL(full-cache || evicted-cache next-token distribution);
 *              REINFORCE on the Plackett-Luce log-probability of the kept rows in sampled order,
 *              return = reward-to-go (mean of r over the rest of the window); per window K
 *              (rl_samples, default 4) episodes share the full-cache reference and each eviction
 *              event's baseline is the mean return of that event in the other K - 1 episodes
 *              (leave-one-out, Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for
 *              free"); the budget may cycle over several fractions (n_budgets) step by step.
 *
 * Side files: GGUF v3 with keys kvsieve.policy.kind ("retention"|"indexer"|"rl"),
 * kvsieve.policy.n_layers / n_kv_heads / n_heads / head_dim / dim / vocab (the model it was
 * trained for), kvsieve.policy.hidden, kvsieve.policy.train_* (steps, seed, budget), and f32
 * tensors (names in learned.c). Saved atomically (PATH.tmp then rename).
 *
 * Ownership: the caller owns kvs_learned objects; a policy made from one copies the weights.
 * Thread-safety: none needed beyond one decode per policy.
 */
#ifndef KVSIEVE_LEARNED_H
#define KVSIEVE_LEARNED_H

#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/model.h"
#include "kvsieve/policy.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_learned_kind {
    KVS_LEARNED_RETENTION = 0,
    KVS_LEARNED_INDEXER = 1,
    KVS_LEARNED_RL = 2
} kvs_learned_kind;

/* "retention", "indexer", "rl"; from_name: KVS_ERR_INVALID_ARGUMENT for anything else. */
KVS_API const char *kvs_learned_kind_name(kvs_learned_kind k);
KVS_API kvs_status kvs_learned_kind_from_name(const char *name, kvs_learned_kind *out);

typedef struct kvs_learned kvs_learned;

/* The train/held-out split used by `kvsieve train` and `kvsieve eval --split`: the first 90% of a
 * text's tokens train, the last 10% are held out. */
#define KVS_LEARNED_TRAIN_FRACTION 0.9

/* Fresh weights for a model of shape hp, initialised from seed (deterministic).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, bad kind or shape), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_learned_create(kvs_learned **out, kvs_learned_kind kind, const kvs_model_hparams *hp,
                                      uint64_t seed);
KVS_API void kvs_learned_destroy(kvs_learned **lw);
KVS_API kvs_learned_kind kvs_learned_get_kind(const kvs_learned *lw);

/* All trainable parameters as one flat f32 array (for tests and checksums); n via *n. */
KVS_API float *kvs_learned_params(kvs_learned *lw, int64_t *n);

/* Writes the side file atomically (path.tmp, then rename); an existing path that is not a regular
 * file (directory, device, FIFO, symbolic link) is refused with KVS_ERR_INVALID_ARGUMENT.
 * Errors: KVS_ERR_INVALID_ARGUMENT, KVS_ERR_IO, KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_learned_save(const kvs_learned *lw, const char *path);

/* Loads a side file and checks it against the model shape hp (NULL: no check) and the kind wanted
 * (-1: any). Errors: KVS_ERR_NOT_FOUND / KVS_ERR_IO (file), KVS_ERR_FORMAT (not a kvsieve policy
 * file: missing key or tensor, wrong tensor shape or type, NaN weights), KVS_ERR_SHAPE (trained for
 * another model: the message names both shapes), KVS_ERR_INVALID_ARGUMENT (another kind than
 * wanted), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_learned_load(kvs_learned **out, const char *path, const kvs_model_hparams *hp, int want_kind);

/* A policy scoring with these weights (copied), for a kvs_evictor (policy.h) under any scope.
 *
 * threshold (threshold mode; -INFINITY = off): a score in the policy's own units, i.e. the value
 *   compared by the top-k. retention: a * (t - pos) * log beta + c, the scale *after* the shared
 *   projection (a, c), the same for every layer and kv head; trained as described above it
 *   predicts log(1e-4 + u), u the mean attention a token receives from the next `horizon`
 *   queries, so T = log(0.01) = -4.6 evicts tokens predicted to get less than ~1% attention.
 *   indexer: m + d1 log(1 + t - pos) + d2, trained on the same target scale (per-layer d, so a
 *   threshold compares across layers only as far as the regression calibrated them). rl: the
 *   network's raw score (uncalibrated; usable, but only relative to its own scores).
 *   Semantics: whenever the evictor's trigger fires for a pool (its rows reach budget + buffer
 *   per kv head), every row of the pool whose score is below the threshold is evicted; of the rows
 *   at or above it, the budget still caps what stays exactly as without a threshold (scope head:
 *   the top `budget` per kv head; pooled scopes: one top-k of the pool's budget, a head holding at
 *   most head_cap). So the cache holds at most the budget and often less. Rows guaranteed by the
 *   floor (alpha) are kept whatever their score. A kv head may end with no rows (attention then
 *   sees only the tokens appended after). The trigger itself is unchanged: between evictions rows
 *   below the threshold stay until the next trigger.
 * alpha (floor mode; 0 = none): each kv head keeps at least floor(alpha * budget) of its
 *   best-scoring rows (Ada-KV's floor, Feng et al. arXiv 2407.11550; the evictor pools the heads
 *   of a layer when the scope is head), in [0, 1].
 * latent_features: indexer only: > 0 attaches a latent memory (latent.h) of that many random
 *   features, owned by the policy, into which evicted rows are folded (0 = plain eviction; the CLI
 *   uses 64); other kinds ignore it.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, threshold NaN or +INFINITY, alpha outside [0, 1],
 * latent_features outside [0, 4096]), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_learned_policy(kvs_policy **out, const kvs_learned *lw, float threshold, float alpha,
                                      int latent_features);

/* Training (see the header comment for each kind's objective). */
#define KVS_TRAIN_MAX_BUDGETS 8
typedef struct kvs_train_params {
    int64_t steps;        /* optimiser steps (one window each); default 60 */
    uint64_t seed;        /* default 1 */
    double budget;        /* rl: fraction of ctx kept during episodes; default 0.25 */
    int64_t ctx;          /* window length in tokens, BOS included; default 128 */
    int64_t horizon;      /* retention/indexer: future queries in the utility u; default 16 */
    float lr;             /* Adam learning rate; default 2e-2 (rl: 1e-3) when 0 */
    /* Called after every step with the step, the loss and user data (may be NULL). */
    void (*progress)(int64_t step, int64_t steps, double loss, void *user);
    void *user;
    int64_t rl_samples;   /* rl: sampled episodes per window (leave-one-out baseline), 2..64;
                           * default 4 (0 = the default) */
    int n_budgets;        /* rl: 0 (default): every episode keeps `budget`; 1..KVS_TRAIN_MAX_BUDGETS:
                           * the episodes of step s keep budgets[s % n_budgets] instead */
    double budgets[KVS_TRAIN_MAX_BUDGETS]; /* fractions in (0, 1) */
    int64_t val_windows;  /* rl: windows of the train split held back for model selection (at most a
                           * quarter of them): every steps/10 steps (and before the first and after
                           * the last) the mean KL of unsampled episodes on them at every budget is
                           * measured, and the best weights seen, the starting ones included, are
                           * the result; default 0 = none (the last weights) */
    /* Called after every validation with the step, its mean KL, whether it is the best so far and
     * user (may be NULL). */
    void (*validated)(int64_t step, double kl, int best, void *user);
} kvs_train_params;

KVS_API kvs_train_params kvs_train_params_default(void);

/* Trains lw on the token stream tokens[0..n) (train split only: the caller holds out the rest),
 * cut into windows of ctx-1 tokens (BOS prepended), visited in an order drawn from seed. The
 * model runs on its device (full-cache forwards for the targets; rl decodes with the evictor).
 * Deterministic for a seed on one backend. *final_loss: mean loss of the last 10 steps (may be NULL).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, fewer tokens than one window, ctx beyond the model's
 * context, steps < 1, horizon outside [1, ctx/2), a budget outside (0, 1), rl_samples not 0 or
 * 2..64, n_budgets outside [0, KVS_TRAIN_MAX_BUDGETS], val_windows < 0), KVS_ERR_SHAPE (weights of another model),
 * KVS_ERR_OUT_OF_RANGE (training diverged: a non-finite loss, e.g. from too high a learning rate),
 * the model's and ops' errors, KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_learned_train(kvs_learned *lw, kvs_model *m, const int32_t *tokens, int64_t n,
                                     const kvs_train_params *p, double *final_loss);

#ifdef __cplusplus
}
#endif
#endif
