/* kvsieve — KV eviction for autoregressive decoding: token-scoring policies, budgets and the
 * evictor that drives them from the decode loop.
 *
 * Two objects:
 *   kvs_policy   scores the cached tokens of one layer: scores[h][r] for kv head h and cache row
 *                r, higher = keep. A policy *declares* the inputs it needs (kvs_policy_needs); the
 *                decode loop collects exactly those from the attention op and nothing else.
 *                Built-in policies (semantics as NVIDIA/kvpress kvpress/presses/, see METHODS.md):
 *                  streaming  StreamingLLM (Xiao et al. 2023, arXiv 2309.17453): the first n_sink
 *                             tokens + the most recent ones. Score = position, sinks +inf.
 *                  h2o        H2O / observed attention (Zhang et al. 2023, arXiv 2306.14048;
 *                             kvpress ObservedAttentionPress): attention each key received, summed
 *                             over every query since it entered the cache, divided by the number of
 *                             those queries (cur_pos - pos + 1); the `window` most recent tokens
 *                             are kept (+inf) so new tokens survive their birth.
 *                  snapkv     SnapKV (Li et al. 2024, arXiv 2404.14469; kvpress SnapKVPress): mean
 *                             attention of the last `window` queries, 1-D average pooling (kernel
 *                             `kernel`, zero padding counted, as torch avg_pool1d), the window's own
 *                             tokens kept (+inf).
 *                  tova       TOVA (Oren et al. 2024, arXiv 2401.06104; kvpress TOVAPress): the last
 *                             query's attention averaged over all query heads (one score per token,
 *                             shared by the kv heads); the newest token kept.
 *                  knorm      K-norm (Devoto et al. 2024, arXiv 2406.11430): -||k||_2.
 *                  pyramidkv  PyramidKV (Cai et al. 2024, arXiv 2406.02069; kvpress PyramidKVPress):
 *                             the base scorer (snapkv) under per-layer budgets decreasing linearly
 *                             with depth (beta, kvs_pyramid_budgets).
 *                  adakv      Ada-KV (Feng et al. 2024, arXiv 2407.11550; kvpress AdaKVPress): the
 *                             base scorer (snapkv); each kv head keeps at least alpha * its even
 *                             share, the rest goes by top-k across the heads of the pool (scope
 *                             layer or global; scope head is promoted to layer).
 *                  keydiff    KeyDiff (Park et al. 2025, arXiv 2504.15364; kvpress KeyDiffPress):
 *                             -cos(k, a), a = mean over the head's cached rows of k / ||k||: keys
 *                             unlike the head's average key are kept. Needs the keys only.
 *                  lagkv      LagKV (Liang et al. 2025, arXiv 2504.04704; kvpress LagKVPress): the
 *                             rows after the first n_sink are cut into partitions of `lag` rows;
 *                             each partition is scored against the next one's per-channel min/max:
 *                             s = softmax over the partition of std_d((x_d - min_d) / (max_d -
 *                             min_d)), for keys and values, averaged, then ranked within the
 *                             partition (rank / lag). Sinks and the last partition (with the
 *                             remainder) score 1 (kept first); fewer than n_sink + 2 lag rows: the
 *                             non-sink rows score their recency (r - n_sink) / (n - n_sink).
 *                  critical   CriticalKV (Feng et al. 2025, arXiv 2502.03805; kvpress
 *                             CriticalKVPress) over a base scorer (params base, default snapkv;
 *                             also by name, "critical:<base>"): stage 1 keeps the
 *                             floor(first_stage * budget) best rows of the base score (+inf);
 *                             stage 2 scores the rest (s + 1e-4) * ||v Wo_j||_1 averaged over the
 *                             kv head's query heads j (the value's norm after the output
 *                             projection). Needs the model (kvs_policy_set_model).
 *                  expected   ExpectedAttention (Devoto et al. 2025, arXiv 2510.00636; kvpress
 *                             ExpectedAttentionPress): mean
 *                             mu and covariance C of the last `window` pre-RoPE queries (tokens at
 *                             positions >= n_sink; q = Wq xn from the layer input), rotated by the
 *                             RoPE rotation averaged over the next n_future positions (R mu,
 *                             R C R^T); z = mu.k / sqrt(d) + k^T C k / (2d), softmax over the head's
 *                             non-sink rows, mean over the query-head group, times ||v||_2; the
 *                             first n_sink positions +inf. Needs the model (kvs_policy_set_model);
 *                             a model with a q bias or q norm (qwen2, qwen3, dream) is refused at
 *                             the first scoring (KVS_ERR_UNSUPPORTED: not modelled).
 *                  prefixkv   PrefixKV (Wang et al. 2024, arXiv 2412.03409; code THU-MIG/PrefixKV)
 *                             over a base scorer (params base, default snapkv): per layer and kv
 *                             head the base scores become an importance distribution (shifted by
 *                             the minimum when negative), and a row scores 1 - the normalised mass
 *                             of the rows ranked before it; the scope is raised to global, where
 *                             one top-k keeps in every layer and head the shortest prefix of its
 *                             ranking that reaches one common coverage threshold (the paper's
 *                             binary search over that threshold). Ours: per kv head, where the
 *                             paper sizes whole layers.
 *                  clusterkv  ClusterKV (Liu et al. 2024, arXiv 2412.03213), as an eviction policy
 *                             (ours; the paper recalls clusters from an offloaded full cache): per kv
 *                             head k-means of the non-sink keys into ceil(n / 16) clusters
 *                             (farthest-point start, at most 8 Lloyd iterations, the assignment
 *                             step on the model's device: kvs_matmul of [c, -|c|^2/2] x [k, 1],
 *                             then kvs_topk k = 1 per row); a row scores qbar . c of its cluster's
 *                             centroid c, qbar the group's window queries (Wq x, `window` 64)
 *                             averaged and rotated as expected's mu: whole clusters are kept in
 *                             order of query-centroid similarity; the first n_sink +inf. Needs the
 *                             model (kvs_policy_set_model).
 *                Threshold mode (DMS-style, Lancucki et al. 2025, arXiv 2506.05345; kvpress
 *                DMSPress): params threshold t in (0, 1) evicts, whenever eviction runs, every row
 *                whose score min-max normalised over its head's finite scores is below t; the
 *                budget still caps the rest (rows scoring +inf are never evicted by it). By name:
 *                "<policy>@t". Rows regrow up to budget + buffer between triggers, so the mode
 *                lowers the mean occupancy, not the peak.
 *                GQA: attention statistics arrive as the mean over each kv head's query-head group
 *                (the attention op's key_mass); the cache keeps n_kv_heads rows and never expands.
 *                Learned policies (issue 8) plug in through kvs_policy_custom with their own
 *                score function and optional observe/compact hooks for per-token state.
 *   kvs_evictor  holds a policy, a budget and a scope, plans the statistics of each decode step
 *                (stat_rows / probe_rows of the layer plans), accumulates them on the host per cache
 *                row, and when a trigger fires evicts on the device: scores -> kvs_topk (per head,
 *                order_by_index) or kvs_topk_global (pooled scopes) -> kvs_cache_keep (kvs_compact
 *                of K and V). Kept tokens keep their original positions; keys are stored after RoPE
 *                and are not re-rotated unless kvs_evict_params.rerotate asks for it.
 *
 * Budgets: B tokens per kv head per layer (a count), or a fraction f of the planned sequence
 * length S (generate: prompt + max_new; eval: the window length): B = max(1, round(f * S)).
 * Scopes: head (each kv head keeps its own B), layer (one pool of n_kv_heads * B per layer; a head
 * keeps at most head_cap rows), global (one pool of n_layers * n_kv_heads * B over the whole cache,
 * one kvs_topk_global over the concatenated scores). Trigger: when the pool's rows reach
 * (budget + buffer) per head, the pool is evicted down to the budget.
 *
 * Ownership: the caller owns policies and evictors; an evictor borrows its policy (destroy the
 * evictor first). Thread-safety: one decode at a time per evictor; policies are read-only during
 * scoring except through their own hooks.
 */
#ifndef KVSIEVE_POLICY_H
#define KVSIEVE_POLICY_H

#include <stdint.h>

#include "kvsieve/cache.h"
#include "kvsieve/export.h"
#include "kvsieve/latent.h"
#include "kvsieve/model.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- inputs a policy can declare ------------------------------------------------------------ */

#define KVS_POLICY_NEED_ACC_MASS 1u    /* acc_mass: attention each key received from every query
                                        * since it entered the cache (GQA-group mean), H2O */
#define KVS_POLICY_NEED_WINDOW_MASS 2u /* win_mass: attention from the last `window` queries */
#define KVS_POLICY_NEED_KEYS 4u        /* keys: the cached K rows (f32 copy) at eviction time */
#define KVS_POLICY_NEED_VALUES 8u      /* values: the cached V rows (f32 copy) at eviction time */
#define KVS_POLICY_NEED_OBSERVE 16u    /* the observe hook sees every step's statistics */
#define KVS_POLICY_NEED_X 32u          /* with NEED_OBSERVE: st->x holds the step's normalised layer
                                        * input rows (kvs_layer_plan.want_x), for learned policies
                                        * that score a token once at creation (issue 8) */

typedef struct kvs_policy_needs {
    unsigned flags;   /* KVS_POLICY_NEED_* */
    int64_t window;   /* queries in the observation window (with NEED_WINDOW_MASS), >= 1 */
} kvs_policy_needs;

/* What a policy sees when it scores one layer. Every [H][stride] array holds kv head h's cache
 * rows r < len[h] at [h * stride + r]; entries at r >= len[h] are undefined. */
typedef struct kvs_policy_input {
    int layer, n_layers;
    int n_kv_heads, n_heads, head_dim;
    int64_t stride;           /* row stride of the arrays below (the cache capacity) */
    const int64_t *len;       /* [n_kv_heads] rows in use per kv head */
    const int32_t *pos;       /* [n_kv_heads][stride] original token position of each row */
    int32_t cur_pos;          /* position of the newest query (the last token appended) */
    int64_t budget;           /* this layer's budget per kv head (tokens) */
    const float *acc_mass;    /* [n_kv_heads][stride] or NULL (NEED_ACC_MASS) */
    const float *win_mass;    /* [n_kv_heads][stride] summed over the window's queries, or NULL */
    int64_t win_queries;      /* queries summed into win_mass (<= window) */
    const float *keys;        /* [n_kv_heads][stride][head_dim] f32, or NULL (NEED_KEYS) */
    const float *values;      /* [n_kv_heads][stride][head_dim] f32, or NULL (NEED_VALUES) */
    const kvs_model *model;   /* the model bound with kvs_policy_set_model, or NULL; set by
                               * kvs_policy_score (critical and expected read Wo / Wq from it) */
} kvs_policy_input;

/* The shape a policy is started with (begin hook). */
typedef struct kvs_policy_shape {
    int n_layers, n_kv_heads, n_heads, head_dim;
    int64_t capacity;         /* cache rows per kv head */
} kvs_policy_shape;

/* A policy's function table. Only name, needs and score are required. */
typedef struct kvs_policy_ops {
    const char *name;
    /* The inputs needed to score `layer` under a budget of `budget` tokens per kv head. Must be the
     * same for every call with the same arguments. */
    kvs_policy_needs (*needs)(const void *self, int layer, int64_t budget);
    /* Writes scores[h * in->stride + r] for r < in->len[h] (higher = keep; +INFINITY = always
     * keep; never NaN and never -INFINITY, which marks empty rows). */
    kvs_status (*score)(void *self, const kvs_policy_input *in, float *scores);
    /* Optional: a new decode starts. */
    kvs_status (*begin)(void *self, const kvs_policy_shape *shape);
    /* Optional (with NEED_OBSERVE): the statistics of every step, after the forward. st->key_mass is
     * the mass of this step's queries (NULL if no other need asked for it); n_new rows were
     * appended at rows len[h]-n_new .. len[h]-1 of each head. */
    kvs_status (*observe)(void *self, int layer, const kvs_layer_stats *st, const int64_t *len, int64_t n_new);
    /* Optional: the cache of `layer` kept rows keep[h*stride + 0..n_keep[h]) (increasing); per-row
     * state must be compacted the same way. */
    kvs_status (*compact)(void *self, int layer, const int32_t *keep, const int64_t *n_keep, int64_t stride);
    void (*destroy)(void *self);
} kvs_policy_ops;

typedef struct kvs_policy kvs_policy;

typedef struct kvs_policy_params {
    int n_sink;         /* streaming: sink tokens always kept; default 4; must stay below the budget
                         * in rows (kvs_evictor_create refuses n_sink >= B) */
    int64_t window;     /* h2o: recent tokens kept (default budget/2, H2O's half recent);
                         * snapkv/pyramidkv/adakv: observation window, also kept (default
                         * min(64, budget/2)); 0 = the default; a given window must stay below
                         * the budget in rows (kvs_evictor_create refuses window >= B) */
    int kernel;         /* snapkv: average-pooling kernel, odd, >= 1; default 5 */
    int beta;           /* pyramidkv: pyramid steepness, >= 1; default 20 */
    float alpha;        /* adakv: per-head floor as a fraction of the even share, [0, 1]; 0.2 */
    const char *base;   /* pyramidkv/adakv/critical/prefixkv: base scorer name; default "snapkv" */
    float threshold;    /* threshold mode (DMS-style) for the built-in scorers: in [0, 1), 0 = off
                         * (default); see the header comment */
    int64_t lag;        /* lagkv: partition size in rows, >= 2; 0 = min(128, max(4, budget / 4))
                         * (kvpress: 128; ours scales with small budgets) */
    float first_stage;  /* critical: share of the budget picked by the base score alone, [0, 1];
                         * 0 = the default 0.5 (kvpress first_stage_ratio) */
    int64_t n_future;   /* expected: future positions the RoPE rotation is averaged over, >= 1;
                         * 0 = 512 (kvpress n_future_positions); its query window is `window`
                         * (0 = 64) */
    int cascades;       /* cascade: sub-caches C, each of (budget - n_sink) / C tokens, in [0, 16];
                         * 0 = 4 */
    float keep_mass;    /* mass mode (PSA-style top-p, Zhou et al. 2025, arXiv 2503.00392), in
                         * [0, 1], 0 = off (default): whenever eviction runs, each kv head keeps
                         * only the fewest rows whose scores sum to keep_mass of its total score
                         * (kvs_topp on the cache's device; rows scoring +inf are kept besides,
                         * at least one row is kept), the budget still caps the rest (pooled
                         * scopes: the count caps the head within the pool). Only for scorers whose
                         * scores are attention masses: h2o, snapkv, tova, expected, critical over
                         * one of them, and pyramidkv / adakv over one of them. By name:
                         * "<policy>@mass<p>", e.g. "snapkv@mass0.9". Like the threshold mode it
                         * lowers the mean occupancy, not the peak. */
} kvs_policy_params;

KVS_API kvs_policy_params kvs_policy_params_default(void);

/* Names of the built-in policies, NULL-terminated: streaming, h2o, snapkv, tova, knorm, pyramidkv,
 * adakv, keydiff, lagkv, critical, expected, prefixkv, cascade, clusterkv ("critical:<base>" is accepted by
 * kvs_policy_create too).
 * cascade: the cascading KV cache (Willette et al. 2024, arXiv 2406.17808, sec. 3; reference code
 * jeffwillette/cascading_cache_2): n_sink sinks plus `cascades` sub-caches; cascade i takes every
 * 2^i-th token after the sinks (every token until they are full), passing its oldest to cascade
 * i+1 when full, and otherwise keeps the better of the carried token and its newest by an EMA
 * (beta 0.999) of the attention each key receives; members score 2 + EMA, the others their EMA
 * (core/policy/cascade.c). */
KVS_API const char *const *kvs_policy_names(void);

/* Creates a built-in policy by name (p NULL = defaults). "<name>@t" (e.g. "snapkv@0.3") is <name>
 * in the threshold mode with threshold t in (0, 1), overriding p->threshold; "<name>@mass<p>" (e.g.
 * "snapkv@mass0.9") is <name> in the mass mode with keep_mass p in (0, 1].
 * Errors: KVS_ERR_NOT_FOUND (unknown name; the message lists the names), KVS_ERR_INVALID_ARGUMENT
 * (n_sink < 0, window < 0, kernel even or < 1, beta < 1, alpha outside [0, 1], a base that is
 * not a scorer (pyramidkv, adakv, prefixkv; critical except under prefixkv), threshold outside
 * [0, 1), lag 1 or < 0, first_stage outside [0, 1], n_future < 0, cascades outside [0, 16],
 * keep_mass outside [0, 1] or set for a scorer whose scores are not attention masses),
 * KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_policy_create(kvs_policy **out, const char *name, const kvs_policy_params *p);

/* Wraps a user scorer (learned policies). ops must outlive the policy; self is passed to every op
 * and released through ops->destroy (if any) when the policy is destroyed. alpha > 0 adds an
 * Ada-KV floor, beta > 0 pyramid layer budgets (0 for neither).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL ops, name, needs or score). */
KVS_API kvs_status kvs_policy_custom(kvs_policy **out, const kvs_policy_ops *ops, void *self, float alpha, int beta);

KVS_API void kvs_policy_destroy(kvs_policy **p);
KVS_API const char *kvs_policy_name(const kvs_policy *p);
KVS_API kvs_policy_needs kvs_policy_get_needs(const kvs_policy *p, int layer, int64_t budget);

/* Scores one layer (see kvs_policy_ops.score). Checks that the declared inputs are present.
 * scores: [n_kv_heads][in->stride]; rows r >= len[h] are set to -INFINITY.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, a declared input missing), the policy's own. */
KVS_API kvs_status kvs_policy_score(kvs_policy *p, const kvs_policy_input *in, float *scores);

/* Per-layer budgets of PyramidKV (kvpress PyramidKVPress.get_layer_budget, after KVCache-Factory
 * pyramidkv_utils.py, window term dropped because our window lies inside the budget):
 *   min = B / beta, max = 2B - min; if max > S: max = S, min = 2B - S;
 *   out[l] = round(max - l * (max - min) / (L - 1)), clamped to [1, S] (L = 1: out[0] = B).
 * The mean over layers is B (up to rounding). B = budget per kv head, S = planned length.
 * Errors: KVS_ERR_INVALID_ARGUMENT (n_layers < 1, budget < 1, beta < 1, seq_len < budget). */
KVS_API kvs_status kvs_pyramid_budgets(int n_layers, int64_t budget, int beta, int64_t seq_len, int64_t *out);

/* ---- budgets, scopes, the evictor ------------------------------------------------------------ */

typedef enum kvs_budget_scope {
    KVS_SCOPE_HEAD = 0,    /* each kv head of each layer keeps its own budget */
    KVS_SCOPE_LAYER = 1,   /* one pool per layer, pooled over its kv heads */
    KVS_SCOPE_GLOBAL = 2   /* one pool over all layers and kv heads */
} kvs_budget_scope;

/* "head", "layer", "global"; from_name accepts the same (KVS_ERR_INVALID_ARGUMENT otherwise). */
KVS_API const char *kvs_budget_scope_name(kvs_budget_scope s);
KVS_API kvs_status kvs_budget_scope_from_name(const char *name, kvs_budget_scope *out);

typedef struct kvs_evict_params {
    kvs_policy *policy;    /* borrowed; NULL: no eviction */
    double budget;         /* (0, 1]: fraction of the planned length; > 1: tokens per kv head
                            * (an integer); default 1.0 (everything fits: never evicts) */
    kvs_budget_scope scope;/* default KVS_SCOPE_HEAD */
    int64_t buffer;        /* tokens per head above the budget before eviction triggers, >= 1;
                            * 0 (default) = max(1, min(128, budget / 8)) */
    double head_cap;       /* pooled scopes: a head keeps at most max(its layer's budget,
                            * head_cap * budget) rows (this bounds the cache capacity); default
                            * 2.0, >= 1 */
    int64_t budget_tokens; /* > 0: tokens per kv head, used instead of budget (the only way to ask
                            * for one token: budget 1 means 100%); 0 (default): budget applies */
    int rerotate;          /* 1: after each eviction of a layer, kvs_cache_rerotate renumbers its kept
                            * rows' RoPE positions to 0..len-1 and re-rotates their keys (StreamingLLM
                            * sec. 3.2; the steps must then run with kvs_step_plan.rope_in_cache, as
                            * kvs_generate_ar does with kvs_ar_params.rerotate); 0 (default): kept keys
                            * keep their RoPE positions. RoPE parameters: the model's (hparams). */
    /* ThinK (Xu et al. 2024, arXiv 2407.21018, sec. 3; kvpress ThinKPress): after each eviction of a
     * layer (after the re-rotation, with rerotate), each kv head prunes the floor(head_dim *
     * think_ratio) key channels with the lowest ||Q[:, c]||^2 ||K[:, c]||^2 (kvs_think_select) in all
     * its kept rows; Q: the rotated queries of the last think_window steps before the eviction
     * (group heads pooled), K: the kept rows. The kept rows then move into the cache's pruned key
     * segment, which stores only the other channels, and the layer's full-width keys are freed
     * (kvs_cache_prune_keys, cache.h: the cache's bytes in use and allocated drop); the forward's
     * attention reads that layout; rows appended later keep every channel, in a full-width key tail
     * of `buffer` rows (grown when a step needs more), until the next eviction (kvpress prunes only
     * the keys it compresses). */
    double think_ratio;    /* [0, 1); 0 (default): off (the paper prunes 0.4; kvpress's default is 0) */
    int64_t think_window;  /* queries observed, >= 1; default 32 (kvpress window_size) */
    int think_in_place;    /* 1: zero the pruned channels in place in the full-width rows instead
                            * (kvpress's layout: nothing saved; equal results to float rounding);
                            * 0 (default): the pruned segment */
} kvs_evict_params;

KVS_API kvs_evict_params kvs_evict_params_default(void);

/* Counters of an evictor's run. */
typedef struct kvs_evict_stats {
    int64_t evictions;     /* eviction events (per pool) */
    int64_t rows_evicted;  /* K/V rows removed, summed over layers and heads */
    int64_t stat_steps;    /* (layer, step) pairs whose attention statistics were collected */
    int64_t rows_rerotated;/* kept K rows re-rotated to new RoPE positions (rerotate), summed over
                            * layers and heads */
    int64_t channels_pruned; /* ThinK: key channels zeroed, summed over evictions, layers and kv heads */
} kvs_evict_stats;

typedef struct kvs_evictor kvs_evictor;

/* Creates an evictor for a model of this shape, for a decode of seq_len planned tokens.
 * Errors: KVS_ERR_INVALID_ARGUMENT (bad shape, budget <= 0, a fractional count > 1, budget_tokens < 0, buffer < 0,
 * head_cap < 1, unknown scope; a policy whose always-kept rows fill a layer's budget when the budget
 * evicts (B < seq_len): n_sink >= B rows for streaming, lagkv, expected, clusterkv, cascade (also as
 * a base), a given window >= B for h2o and snapkv (also as a base); the message names sink, window
 * and the budget in rows), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_evictor_create(kvs_evictor **out, const kvs_evict_params *p, const kvs_model_hparams *hp,
                                      int64_t seq_len);
KVS_API void kvs_evictor_destroy(kvs_evictor **e);

/* Budget (tokens per kv head) of `layer` after pyramid shaping; -1 for a bad layer. */
KVS_API int64_t kvs_evictor_budget(const kvs_evictor *e, int layer);
/* Buffer (tokens per kv head) in force. */
KVS_API int64_t kvs_evictor_buffer(const kvs_evictor *e);
/* Cache rows per kv head the evictor needs when the longest single step appends max_step tokens
 * (the prompt, for a one-shot prefill): max(max_step, largest per-head budget + buffer), with
 * pooled scopes using head_cap * budget + buffer; never more than seq_len. */
KVS_API int64_t kvs_evictor_capacity(const kvs_evictor *e, int64_t max_step);
/* 1 when the budget covers the planned length: the evictor never evicts and collects nothing. */
KVS_API int kvs_evictor_is_noop(const kvs_evictor *e);

/* Starts a decode on cache c (an APPEND cache with capacity >= kvs_evictor_capacity; emptied by
 * the caller). Errors: KVS_ERR_INVALID_ARGUMENT (cache shape or mode), the policy's begin. */
KVS_API kvs_status kvs_evictor_begin(kvs_evictor *e, kvs_kv_cache *c);

/* Fills layers[0..n_layers) for the next step, which appends n_new tokens (rows computed at every
 * layer): stat_rows / probe_rows that collect exactly what the policy declares for the queries
 * that will matter at the next eviction; everything else zero. The arrays pointed to are owned by
 * the evictor and valid until its next call. Sets *any to 1 when some layer collects statistics
 * (pass layers to the plan then; otherwise the plan may use NULL layers).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL argument, n_new < 1), KVS_ERR_STATE (no kvs_evictor_begin),
 * KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_evictor_plan(kvs_evictor *e, int64_t n_new, kvs_layer_plan *layers, int *any);

/* After the forward of the planned step: accumulates its statistics, then evicts every pool whose
 * trigger fired (scores on the host, top-k and compaction on the device) and, with p.rerotate,
 * re-rotates the evicted layers' kept keys (kvs_cache_rerotate).
 * Errors: KVS_ERR_STATE (no begin, or statistics missing that the plan asked for), the ops' and
 * the policy's errors, and kvs_cache_rerotate's. */
KVS_API kvs_status kvs_evictor_update(kvs_evictor *e, kvs_kv_cache *c, const kvs_step_result *r);

KVS_API kvs_evict_stats kvs_evictor_get_stats(const kvs_evictor *e);

/* ThinK's channel choice (Xu et al. 2024, arXiv 2407.21018, sec. 3, the channel score
 * ||Q_i K_i^T||_F = ||Q[:, i]|| ||K[:, i]|| of the observation window's queries Q and the keys K;
 * kvpress ThinKPress ranks mean(q^2) mean(k^2), the same order): for each kv head h, score[c] =
 * q_sq[h][c] * sum_{r < len[h]} keys[h][r][c]^2, and the floor(head_dim * ratio) channels of
 * lowest score are marked pruned (ties: the lower channel first).
 * q_sq: host [n_kv_heads][head_dim], the window's squared rotated queries summed over the queries and
 * the head's query-head group; keys: host [n_kv_heads][stride][head_dim] f32 (rows >= len[h] not
 * read); len: [n_kv_heads], 0 <= len[h] <= stride; pruned: out [n_kv_heads][head_dim], 1 = prune;
 * scores: optional out [n_kv_heads][head_dim].
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, n_kv_heads, head_dim or stride < 1, ratio outside [0, 1)),
 * KVS_ERR_OUT_OF_RANGE (a len outside [0, stride]), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_think_select(const double *q_sq, const float *keys, const int64_t *len, int n_kv_heads, int64_t stride,
                                    int head_dim, double ratio, uint8_t *pruned, double *scores);

/* Whether ThinK (kvs_evict_params.think_ratio > 0) can run on a cache of these parameters; the
 * evictor checks it in kvs_evictor_begin, so the refusal comes before decoding starts. The key
 * channels are scored in the RoPE basis and a subset stored per row (or zeroed in place), so the keys must be f32 or f16
 * (a block type's 32 channels share a scale) and not Hadamard-rotated (KVS_CACHE_ROTATE mixes the
 * channels). Errors: KVS_ERR_INVALID_ARGUMENT (p NULL), KVS_ERR_UNSUPPORTED (either case; the
 * message says which). */
KVS_API kvs_status kvs_think_check_cache(const kvs_cache_params *p);

/* Attaches a latent memory (latent.h) to a policy (borrowed; NULL detaches): the evictor then hands
 * it to every step plan (kvs_layer_plan.latent) and the policy's evicted rows are folded into it by
 * the policy itself (the learned indexer does; see learned.h). NULL p: no effect / NULL. */
KVS_API void kvs_policy_set_latent(kvs_policy *p, kvs_latent *lm);
/* Binds the model a policy reads weights from (borrowed; NULL unbinds): critical (Wo) and expected
 * (Wq, RoPE) need it; kvs_generate_ar binds its model itself. Without it their scoring fails with
 * KVS_ERR_STATE. Weights are read to the host once per layer, on first use (f32, f16 or bf16). */
KVS_API void kvs_policy_set_model(kvs_policy *p, const kvs_model *m);
/* Whether the policy can score the caches of model m, asked before a decode so that a policy that
 * cannot is refused up front, not at its first eviction: KVS_OK, or KVS_ERR_UNSUPPORTED with the
 * reason (expected or clusterkv, alone or as the base of critical/prefixkv, on a model with a q bias
 * or q norm: qwen2, qwen3, dream, whose future queries they predict as W_q x without them). kvs_generate_ar checks it.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL), KVS_ERR_UNSUPPORTED. */
KVS_API kvs_status kvs_policy_check_model(const kvs_policy *p, const kvs_model *m);
/* The budget scope an evictor uses with this policy when `requested` is asked for: requested, or
 * the wider scope the policy needs (prefixkv: KVS_SCOPE_GLOBAL, one threshold over all layers).
 * NULL p: requested. */
KVS_API kvs_budget_scope kvs_policy_effective_scope(const kvs_policy *p, kvs_budget_scope requested);
KVS_API kvs_latent *kvs_policy_get_latent(const kvs_policy *p);

#ifdef __cplusplus
}
#endif
#endif
