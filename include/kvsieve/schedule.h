/* kvsieve — diffusion-LM cache schedules: plan producers and feedback consumers.
 *
 * A schedule turns the decoding state into a step plan (model.h) — which rows run through which
 * layers, which statistics to collect, which positions are candidates for unmasking — and reads
 * back the step's result. Schedules are pure host logic: testable without a device.
 * Ownership: the caller owns a schedule and destroys it; one schedule drives one decode at a time.
 */
#ifndef KVSIEVE_SCHEDULE_H
#define KVSIEVE_SCHEDULE_H

#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/model.h"
#include "kvsieve/ops.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A diffusion-LM cache schedule (the handle kvs_dlm_params.schedule of generate.h takes). */
typedef struct kvs_dlm_schedule kvs_dlm_schedule;

/* The decoding state a schedule sees at each step (read-only; valid during the call). */
typedef struct kvs_dlm_view {
    const int32_t *tokens;      /* [n_tokens] current sequence (masks = mask_id) */
    int64_t n_tokens;
    int64_t prompt_len;
    int32_t mask_id;
    const uint8_t *masked;      /* [n_tokens] 1 = still masked */
    int64_t block_start, block_end; /* the current block [start, end) */
    int block;                  /* block index */
    int step_in_block;          /* 0 at the block's first step */
    int64_t step;               /* global step index */
    const int32_t *decoded_prev;/* positions committed by the previous step */
    int64_t n_decoded_prev;
    int n_layers;
    int n_heads, n_kv_heads;    /* the model's attention heads (statistics layouts) */
    int logit_shift;            /* 1: the model predicts position p from row p-1 (Dream; hparams
                                 * logit_shift). The plan still names positions p in logit_rows and
                                 * candidates; the loop asks the forward for rows p-1, so the plan's
                                 * last layer must compute row p-1 of every logit row p (the
                                 * built-in schedules do; a plan that does not is refused by the
                                 * forward: "logit row p-1 is not computed at the last layer") */
    int block_causal;           /* 1: block-causal decoding (kvs_dlm_params.block_causal): n_tokens is
                                 * the current block's end, rows before block_start no longer change
                                 * once the previous block's final tokens were computed */
} kvs_dlm_view;

/* What a schedule returns for one step. Arrays are owned by the schedule and stay valid until its
 * next call. */
typedef struct kvs_dlm_step {
    kvs_step_plan plan;         /* tokens/n_tokens are filled in by the loop */
    const int32_t *candidates;  /* positions eligible for unmasking this step; NULL: the block's
                                 * masked positions. Must be masked and have logits (logit_rows). */
    int64_t n_candidates;
} kvs_dlm_step;

/* What a cache schedule did over the decodes since its creation (or the last begin). The per-layer
 * arrays are sized by the model (n_layers entries), owned by the schedule and valid until its next
 * begin (a new decode) or its destroy; NULL with n_layers = 0 before the first decode. */
typedef struct kvs_dlm_schedule_stats {
    int64_t steps;                                /* plans produced */
    int64_t full_steps;                           /* steps that recomputed every row at every layer */
    int n_layers;                                 /* entries of rows[] and refreshes[] */
    const int64_t *rows;                          /* [n_layers] rows computed per layer, summed over steps */
    const int64_t *refreshes;                     /* [n_layers] steps in which the layer recomputed all rows */
    int64_t kept_rows, context_rows;              /* WaveFilter: kept K/V rows vs rows available,
                                                   * summed over sparse (layer, kv head, step) */
} kvs_dlm_schedule_stats;

typedef struct kvs_dlm_schedule_ops {
    const char *name;
    unsigned cache_flags;       /* KVS_CACHE_* flags the cache must have */
    /* Produces the plan of the step described by v. */
    kvs_status (*plan)(void *self, const kvs_dlm_view *v, kvs_dlm_step *out);
    /* Reads the step's result (statistics); optional. */
    kvs_status (*feedback)(void *self, const kvs_dlm_view *v, const kvs_step_result *r);
    /* Starts a new decode of n_tokens tokens; optional. */
    kvs_status (*begin)(void *self, int64_t n_tokens, int n_layers);
    void (*destroy)(void *self);
    /* Counters of the decode so far (kvs_dlm_schedule_get_stats); optional. */
    void (*stats)(void *self, struct kvs_dlm_schedule_stats *out);
} kvs_dlm_schedule_ops;

struct kvs_dlm_schedule {
    const kvs_dlm_schedule_ops *ops;
    void *self;
};

/* Wraps user callbacks as a schedule (for engines with their own policies).
 * Errors: KVS_ERR_INVALID_ARGUMENT (out NULL, ops without name or plan), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_custom(kvs_dlm_schedule **out, const kvs_dlm_schedule_ops *ops, void *self);
KVS_API void kvs_dlm_schedule_destroy(kvs_dlm_schedule **s);
KVS_API const char *kvs_dlm_schedule_name(const kvs_dlm_schedule *s);
KVS_API unsigned kvs_dlm_schedule_cache_flags(const kvs_dlm_schedule *s);

/* The no-cache baseline: every step computes every row at every layer; logits at the block's
 * masked positions. Errors: KVS_ERR_INVALID_ARGUMENT (out NULL), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_none(kvs_dlm_schedule **out);

/* Counters of the decode (zero for schedules without counters). Errors: KVS_ERR_INVALID_ARGUMENT. */
KVS_API kvs_status kvs_dlm_schedule_get_stats(const kvs_dlm_schedule *s, kvs_dlm_schedule_stats *out);

/* ---- cache schedules (core/schedule/dlm_caches.c) ------------------------------------------- */

/* Fast-dLLM prefix cache (Wu et al. 2025, "Fast-dLLM", arXiv 2505.22618; reference NVlabs/Fast-dLLM
 * llada/generate.py generate_with_prefix_cache): the first step of every block runs every row; the
 * other steps of the block run rows [block_start, n_tokens) at every layer and reuse the cached
 * K/V of the rows before the block. Logits and candidates: the block's masked positions.
 * Shifted logits (view.logit_shift, Dream): those steps start at block_start - 1, the row that
 * predicts the block's first position (its K/V are recomputed too).
 * Errors: KVS_ERR_INVALID_ARGUMENT (out NULL), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_prefix(kvs_dlm_schedule **out);

/* Fast-dLLM dual cache (generate_with_dual_cache): as prefix, but later steps run only the block's
 * rows [block_start, block_end) (shifted logits: [block_start - 1, block_end)); prefix and suffix
 * K/V come from the block's first step.
 * Errors: KVS_ERR_INVALID_ARGUMENT (out NULL), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_dual(kvs_dlm_schedule **out);

/* dKV-Cache, decode variant (Ma et al. 2025, "dKV-Cache", arXiv 2505.15781; reference
 * horseee/dKV-Cache generation_utils/llada_dkv_cache_decode.py): delayed caching. Step i of a
 * block runs every row when i == 0, i == 1 or i % reload == 0 (cache_reloading_step); otherwise it
 * runs the still-masked rows plus the rows decoded by the previous step (a token decoded at step t
 * is recomputed once more at t+1 with its new identity and is read from the cache from t+2 on);
 * shifted logits: also the row before each masked position of the block.
 * reload >= 1 (1: every step is a full refresh = no cache; the reference example uses 4, the
 * default KVS_DLM_DELAYED_RELOAD_DEFAULT).
 * Errors: KVS_ERR_INVALID_ARGUMENT (out NULL, reload < 1), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_delayed(kvs_dlm_schedule **out, int reload);

/* The delayed cache's default reload interval (the dKV-Cache reference example's). */
#define KVS_DLM_DELAYED_RELOAD_DEFAULT 4

/* How Elastic-Cache compares a tracked token's attention between steps. */
typedef enum kvs_elastic_sim {
    /* the reference code's literal formula (F.cosine_similarity(past, now, dim=1) over
     * [1][heads][tracked][keys], then the mean): per (tracked token, key) the cosine of the vectors
     * over heads, averaged over keys and tracked tokens. With few heads it is dominated by the many
     * near-zero probabilities (on stories260K-llada, 8 heads, layer 3 reads ~0.63 at every step). */
    KVS_ELASTIC_SIM_HEADS = 0,
    /* the paper's description (METHODS.md): per (tracked token, head) the cosine of the attention
     * rows over keys, averaged over heads and tracked tokens */
    KVS_ELASTIC_SIM_ROWS = 1
} kvs_elastic_sim;

typedef struct kvs_elastic_params {
    float gamma;        /* drift threshold on the cosine similarity; default 0.9. gamma >= 1: the test
                         * can never pass, every step runs every row (no reuse; the anchor) */
    int window;         /* beta: the first `window` masked positions of the block are queried and
                         * are the unmasking candidates; default 16 */
    int track;          /* most-attended tokens tracked per layer; default 1 */
    kvs_elastic_sim sim;/* default KVS_ELASTIC_SIM_ROWS */
    int block_refresh;  /* 1 (default): the first step of every block of the decode loop runs every
                         * row at every layer, as the decode's first step does; 0: only the decode's
                         * first step does (the reference, which has no blocks; with block_len =
                         * gen_len both are the same). Ours: a drift at layer l recomputes layers
                         * l+1.. from the cached inputs, so without a full step the layers up to the
                         * first drift never recompute the rows that are not queried (their outputs
                         * stay from the step they were last queried). On stories260K-llada, gen 256,
                         * block 32: compute 0.093 -> 0.119, steps whose unmasking decision differs
                         * from a no-cache forward of the same state 3.6% -> 1.5% (README). */
} kvs_elastic_params;

KVS_API kvs_elastic_params kvs_elastic_params_default(void);

/* Elastic-Cache (Nguyen-Tri et al. 2025, "Attention Is All You Need for KV Cache in Diffusion
 * LLMs", arXiv 2510.14973; reference VILA-Lab/Elastic-Cache llada/generate.py and
 * model/modeling_llada.py). The decode's first step runs every row. Then each step queries
 * Q = tracked tokens U tokens decoded by the previous step U window (the first `window` masked
 * positions of the block; shifted logits: U the row before each window position); every layer
 * starts in reuse mode (rows Q against all cached K/V). After
 * layer l's attention (plan hook) the tracked tokens' attention rows are compared with their rows of
 * the previous step; a similarity below gamma makes layers l+1..L-1 recompute every row, from the
 * cached layer inputs (KVS_CACHE_KEEP_X). Tracked tokens for the next step: per layer the top
 * `track` keys by attention mass of the window's queries, masked positions excluded; their union is
 * tracked. Masked positions outside the window are never queried (their K/V stay from the last
 * refresh). With block_refresh (default) the first step of every block is a full step too.
 * Candidates: the window; use the loop's threshold mode (eps 0.9) for the reference rule
 * p >= min(eps, max p).
 * Deviation (documented): the previous row of a tracked token is the row measured at the previous
 * step; the reference recomputes it from the token's cached query, which differs only when the
 * token was not queried at the previous step; such tokens are left out of that layer's test (a
 * layer with no comparable token is not tested). The reference decodes one window over the whole
 * generation; block_len = gen_len reproduces that.
 * (About 8% of the tracked tokens' tests; counting them as drifted instead, the other extreme,
 * gave the same agreement and first divergences on the six eval prompts at gen 256, compute 0.119
 * -> 0.131: this deviation does not explain the agreement.)
 * Needs a cache with KVS_CACHE_KEEP_X. Errors: KVS_ERR_INVALID_ARGUMENT (out NULL, gamma outside
 * [0, 1], window < 1, track < 1, block_refresh not 0 or 1), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_elastic(kvs_dlm_schedule **out, const kvs_elastic_params *p);

/* ---- WaveFilter: wavelet-guided sparse KV over any schedule (core/schedule/wavefilter.c) ----- */

typedef struct kvs_wavefilter_params {
    kvs_wavelet family; /* default KVS_WAVELET_HAAR */
    int levels;         /* J, DWT levels, 1..8; default 3 */
    float rho;          /* skim share of the free budget (whole regions); default 0.5 */
    float budget;       /* kept fraction of the context rows per (layer, kv head), (0, 1]; default 0.5.
                         * 1: every row is kept (reproduces the base schedule) */
    int n_sink;         /* first rows always kept; default 4 */
    int n_recent;       /* rows just before the block always kept; default 16 */
    float keep_mass;    /* PSA-style progressive selection (Zhou et al. 2025, arXiv 2503.00392), in
                         * [0, 1], 0 = off (default): instead of skim, focus and fill, each (layer,
                         * kv head) keeps the always-kept rows (sinks, block, recent) plus the fewest
                         * other rows, by signal height, whose attention mass reaches keep_mass of the
                         * other rows' mass (kvs_topp), at most ceil(budget * n_kv) rows in all
                         * (budget 1: no cap) unless the always-kept rows alone pass that; keep_mass 1
                         * with budget 1 keeps every row, as budget 1 alone does (the anchor) */
    kvs_device *dev;    /* keep_mass: the device kvs_topp runs on (borrowed, outlives the schedule);
                         * NULL (default): the schedule opens a CPU device of its own */
} kvs_wavefilter_params;

KVS_API kvs_wavefilter_params kvs_wavefilter_params_default(void);

/* WaveFilter (arXiv 2606.00724; no public code: OUR design, see METHODS.md). Wraps `base` (taken
 * over: destroyed with the wrapper, also on error). At the first step of every block the base plan
 * runs with dense attention and collects, per (layer, kv head), the attention mass s[j] that the
 * block's computed rows give each cache row (GQA-group mean). The keep-set of the block is built
 * from s by a J-level DWT (kvs_dwt on a CPU device): sinks, the block and the n_recent rows before
 * it are kept; skim: level-J approximation coefficients rank regions of 2^J rows, the best whole
 * regions take up to rho of the free budget; focus: the inverse transform of the m = max(1, left/2)
 * largest detail coefficients alone marks sharp local peaks (where it is positive), taken by
 * signal height; then the highest s fill the budget (ceil(budget * n_kv) rows). The other steps of the block attend only the kept rows (sparse
 * gather, kvs_layer_plan.keep). With keep_mass the rows beyond the always-kept ones are the top-p
 * set of s (kvs_topp), no wavelet involved.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, parameters out of range), KVS_ERR_UNSUPPORTED for an spa
 * base (its proxy-delta steps take no keep-set), KVS_ERR_OUT_OF_MEMORY; with
 * keep_mass, at the block's first feedback, kvs_device_open's and kvs_topp's. base is taken (destroyed
 * on error). */
KVS_API kvs_status kvs_dlm_schedule_wavefilter(kvs_dlm_schedule **out, kvs_dlm_schedule *base,
                                               const kvs_wavefilter_params *p);

/* ---- d2Cache: dual adaptive caching (core/schedule/d2cache.c) --------------------------------- */

typedef struct kvs_d2cache_params {
    float rollout_p;    /* nucleus share of attention-rollout importance for the other rows, [0, 1];
                         * default 0.1 (reference rollout_p) */
    int current_k;      /* masked positions refreshed per step, >= 0; default 32 (reference
                         * current_k); 0 = every masked position */
    float sigma;        /* certainty-density Gaussian width, > 0; default 10 (reference sigma) */
    int inflate_w;      /* gaps of at most this many rows between selected rows are filled, >= 0;
                         * default 0 (the reference's config; its constructor says 4) */
} kvs_d2cache_params;

KVS_API kvs_d2cache_params kvs_d2cache_params_default(void);

/* d2Cache (Jiang et al. 2025, "d²Cache: Accelerating Diffusion-Based LLMs via Dual Adaptive
 * caching", arXiv 2509.23094; reference code Kamichanw/d2Cache, src/cache/d2cache.py). The decode's
 * first step runs every row and keeps every row's K/V. Each later step computes, at every layer, only
 * (1) the current_k masked positions with the highest certainty prior, conf x density, searched from
 * the block start up to the block boundary holding current_k masked positions, the block's own
 * first (conf: the last max-probability the position got; density: a Gaussian (sigma) average of the
 * decoded marks around it, the canvas's left counted decoded, its right decoded iff the last
 * position is); (2) the tokens decoded by the previous step; (3) among the other rows, the nucleus
 * (top-p, rollout_p, at least one) of their attention-rollout importance: the column sums of
 * prod_l normalise(mean_heads(A_l) + I) over the previous step's computed rows (Abnar & Zuidema
 * 2020), identity rows for the rows not computed; (4) with inflate_w, the gaps between them. Their
 * K/V overwrite the cache; every other row's K/V is reused. Logits: the selected masked positions;
 * unmasking candidates: those inside the block. Ours: the reference's single window becomes our
 * block loop (positions outside the block are never committed); the bias that puts the block first
 * uses the maximum of conf x density over the generation region, as the reference does.
 * Anchor: rollout_p 1 with current_k 0 selects every row at every step and is planned as the
 * no-cache decode (bit-identical tokens). Models with shifted logits (Dream) are refused at the first
 * plan (KVS_ERR_UNSUPPORTED). Errors: KVS_ERR_INVALID_ARGUMENT (out NULL, a parameter out of range),
 * KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_dlm_schedule_d2cache(kvs_dlm_schedule **out, const kvs_d2cache_params *p);

/* ---- SPA-Cache: singular proxies for adaptive caching (core/schedule/spa_cache.c) ------------- */

typedef struct kvs_spa_params {
    int rank;           /* proxy rank r, >= 0; 0 (default): automatic, kvs_model_spa_rank_auto (kv dim /
                         * 32, at least 8: the reference's 128 for LLaDA-8B's 4096-wide value
                         * projection, scripts/llada/eval_*.sh proxy_rank=128; 8 on stories260K-llada).
                         * A rank above min(dim, kv dim) is refused by the first step's forward */
    int key;            /* 0 (default): the value projection's proxy (the reference); 1: the key's */
    float budget;       /* the profile's peak share of the candidate rows a layer recomputes per step,
                         * (0, 1]; default 0.25 (reference max_update_ratio=0.25, every eval script) */
    int uniform;        /* 1: every layer >= 1 gets `budget` (update_ratio_dist 'uniform'); 0 (default):
                         * the reference's split Gaussian over depth ('gaussian', cache.py
                         * _split_gaussian_frequency). Anchor: uniform 1 with budget 1 = no cache */
    float min_ratio;    /* floor of the Gaussian's rising side, [0, budget]; default 1/16 (reference
                         * scripts/llada/eval.py min_update_ratio = 2**-4) */
    float peak_pos;     /* depth l / n_layers of the peak, (0, 1); default 0.75 */
    float start, end;   /* the Gaussian at depth 0 and 1 as fractions of the peak, (0, 1); defaults 0.12
                         * and 0.52 (cache.py get_update_ratio for LLaDA-8B-Instruct: peak_pos 0.75,
                         * freq_start 0.03, freq_end 0.13 over freq_peak 0.25) */
    int refresh;        /* every `refresh` steps (and at step 0) all rows at all layers, >= 1; default 50
                         * (refresh_steps=50, scripts/llada/eval_gsm8k.sh) */
    int refresh_gen;    /* every `refresh_gen` steps the generation rows at all layers, the prompt's K/V
                         * reused, >= 1; default 7 (refresh_gen_steps=7, eval_gsm8k.sh) */
} kvs_spa_params;

KVS_API kvs_spa_params kvs_spa_params_default(void);

/* The per-layer ratios of p for a model of n_layers layers into ratio[n_layers]: ratio[0] = 1 (the
 * first layer always updates, reference SpaCache.check_update); layer l >= 1 at depth t = l /
 * n_layers: uniform: budget; else budget * exp(-(t - peak_pos)^2 / (2 s^2)), s chosen so that the
 * curve reaches start * budget at t = 0 (left of the peak, then clipped from below at min_ratio) and
 * end * budget at t = 1 (right); every ratio capped at 1. (Reference cache.py _split_gaussian_frequency
 * with scale = max_update_ratio / freq_peak.) Stories260K-llada (5 layers), defaults: 1, 0.080, 0.158,
 * 0.230, 0.243. Errors: KVS_ERR_INVALID_ARGUMENT (NULL, n_layers < 1). */
KVS_API kvs_status kvs_spa_layer_ratios(const kvs_spa_params *p, int n_layers, double *ratio);

/* SPA-Cache (Sun et al. 2026, "SPA-Cache: Singular Proxies for Adaptive Caching in Diffusion Language
 * Models", arXiv 2602.02544; reference code wenhao728/spa-cache: spac/cache.py SpaCache.check_update,
 * get_update_ratio; spac/llada/hooks.py; spac/sequence.py; spac/utils/proxy.py). Steps: step 0 and
 * every `refresh` steps run every row at every layer; every `refresh_gen` steps the generation rows
 * [prompt_len, n) at every layer (shifted logits, Dream: from prompt_len - 1, the row that predicts
 * the first generated position; likewise below) (SequenceMgmt.refresh / refresh_gen). Other steps
 * (check_update / get_ff_output, spac/llada/hooks.py block_forward): every generation row passes
 * through every layer; layer 0 computes all of them ("always update at the first layer"); at each
 * layer l >= 1 (kvs_layer_plan.spa_delta) every generation row gets rmsnorm and fresh K/V from its
 * current input; its singular proxy (the normalised layer input x_normed projected on the layer's
 * value-projection proxy, kvs_model_spa_proxy: rank r, on the device) is compared with the row's
 * proxy from the previous step (cosine similarity, float64); the floor(G * ratio_l) rows with the
 * lowest similarity (G generation rows, ratios kvs_spa_layer_ratios; ties: lower position first;
 * 0 rows when G * ratio_l < 1, as torch.topk with k = 0) run Q, attention over the whole cache,
 * the output projection and the FFN, and store their residual delta (attention + FFN output,
 * KVS_CACHE_KEEP_DELTA); every other row leaves the layer as x_in + its stored delta. Every row's
 * proxy is then stored for the next step. Logits: the block's masked positions, read from the
 * propagated states; candidates: those (the loop's rule).
 * Ours (documented deviations): (1) a selected row's output is (x_in + attn) + ffn (the plain
 * layer's order; the reference adds x_in + (attn + ffn)): equal to rounding, and a selection of
 * every row is then the plain forward bit for bit. (2) A row whose delta a layer never stored is
 * selected (none after the first, full step). (3) The proxy scores (G x dim x r multiply-adds) and
 * the skipped rows' K/V projections (G x 2 x dim x kv dim) per layer and step are not counted in
 * the compute fraction, which counts the rows that run attention and FFN (rows x layers).
 * Anchor: uniform 1 with budget 1 gives every layer ratio 1: every step runs every row (a full step,
 * through the residual mode selecting all) = the no-cache decode, bit-identical.
 * Needs a cache with KVS_CACHE_KEEP_DELTA (kvs_dlm_schedule_cache_flags). Errors: KVS_ERR_INVALID_ARGUMENT
 * (out NULL, rank < 0, key not 0/1, budget outside (0, 1], uniform not 0/1, min_ratio outside
 * [0, budget], peak_pos, start or end outside (0, 1), refresh or refresh_gen < 1),
 * KVS_ERR_OUT_OF_MEMORY; at the first step, the forward's (a rank above min(dim, kv dim)). */
KVS_API kvs_status kvs_dlm_schedule_spa(kvs_dlm_schedule **out, const kvs_spa_params *p);

/* By name: "none", "prefix", "dual", "delayed", "elastic", "d2cache", "spa" with the given parameters
 * (NULL: defaults; d2cache, spa: their defaults); reload for delayed. Errors: KVS_ERR_INVALID_ARGUMENT
 * (unknown name). */
KVS_API kvs_status kvs_dlm_schedule_from_name(kvs_dlm_schedule **out, const char *name, int reload,
                                              const kvs_elastic_params *ep);

#ifdef __cplusplus
}
#endif
#endif
