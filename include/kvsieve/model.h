/* kvsieve — transformer models on a device and the step-plan forward.
 *
 * A kvs_model holds one checkpoint's weights on a device (architectures: llama, qwen2, qwen3 = causal
 * autoregressive; llada, dream = bidirectional masked diffusion). kvs_model_forward executes one
 * *step plan*: which token rows run through which layers, which of their K/V are written into the
 * KV cache, which attention statistics are collected, and which rows' logits are returned. Every
 * cache schedule (none, prefix, dual, delayed, elastic, wavefilter) and every eviction policy only
 * changes the plan; the forward is the same.
 *
 * One layer l of a step (rows R_l, indices into the plan's token list; see DESIGN.md):
 *   x = layer input of R_l -> rmsnorm -> q,k,v = x Wq^T (+bq), x Wk^T (+bk), x Wv^T (+bv)
 *   -> (qwen3: per-head rmsnorm of q and k) -> RoPE(positions; adjacent pairs or NEOX, model_file.h)
 *   -> k,v written into the cache rows of their tokens -> attention(q vs the cache's k,v, stats)
 *   -> x += attn Wo^T -> x += W2 (silu(W1 xn) * W3 xn), xn = rmsnorm(x)
 * Layer inputs: layer 0 embeds the tokens; layer l > 0 continues the rows of layer l-1. When R_l
 * differs from R_{l-1}, the inputs of R_l are read from the cache's kept layer inputs
 * (KVS_CACHE_KEEP_X), which every step refreshes for the rows it computes.
 *
 * Ownership: the caller owns models and destroys them before their device. A model's result
 * buffers (kvs_step_result) are owned by the model and valid until its next forward.
 * Thread-safety: as its device.
 */
#ifndef KVSIEVE_MODEL_H
#define KVSIEVE_MODEL_H

#include <stdint.h>

#include "kvsieve/cache.h"
#include "kvsieve/device.h"
#include "kvsieve/export.h"
#include "kvsieve/model_file.h"
#include "kvsieve/ops.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvs_arch and kvs_model_hparams (the architecture and hyperparameters) come from model_file.h. */

typedef struct kvs_model kvs_model;

typedef struct kvs_model_params {
    kvs_dtype weight_dtype; /* dtype of the float matmul weights on the device: KVS_F32 (default),
                             * KVS_F16, KVS_BF16; norms stay F32. Weights stored in a block type
                             * (Q8_0, Q4_K, ...) stay in it: the products read the blocks (every
                             * block type, on CPU, OpenCL and Vulkan) */
    int map_weights;        /* 1: on a CPU device, every weight whose file dtype is used as it is (block
                             * types; F32 with weight_dtype F32; F16/BF16 with the same weight_dtype)
                             * is used in place from the model file's memory (its mmap: no copy, so a
                             * multi-GB file does not need twice its size in RAM); the caller must keep
                             * the kvs_model_file open until the model is destroyed. kvs_model_load
                             * always maps (it keeps the file open itself). 0 (default for
                             * kvs_model_create): copies. Ignored on other backends. */
} kvs_model_params;

KVS_API kvs_model_params kvs_model_params_default(void);

/* Loads a checkpoint (GGUF v1-v3, safetensors directory or file with config.json beside it, or a
 * llama2.c .bin with tok512.bin/tokenizer.bin beside it) onto dev. On a CPU device the weights are
 * used in place from the file's mapping where their dtype allows (kvs_model_params.map_weights; the
 * model keeps the file open until it is destroyed).
 * Errors: KVS_ERR_NOT_FOUND / KVS_ERR_IO (file), KVS_ERR_FORMAT (malformed; message names the
 * offset and key/tensor), KVS_ERR_UNSUPPORTED (architecture or tensor type), KVS_ERR_DTYPE,
 * KVS_ERR_OUT_OF_MEMORY, and the device's errors. */
KVS_API kvs_status kvs_model_load(kvs_model **out, kvs_device *dev, const char *path, const kvs_model_params *p);

/* As kvs_model_load from an already opened model file, which may be closed afterwards (the weights
 * are copied to the device) unless p->map_weights is set on a CPU device (then it must outlive the
 * model). Errors: as kvs_model_load after the file is read. */
KVS_API kvs_status kvs_model_create(kvs_model **out, kvs_device *dev, const kvs_model_file *mf,
                                    const kvs_model_params *p);
KVS_API void kvs_model_destroy(kvs_model **m);

KVS_API const kvs_model_hparams *kvs_model_get_hparams(const kvs_model *m);
KVS_API kvs_device *kvs_model_device(const kvs_model *m);
/* Bytes of weights held on the device (those used in place from the file included). */
KVS_API int64_t kvs_model_weight_bytes(const kvs_model *m);

/* QuantSpec's optional 4-bit weight copy for the draft (Tiwari et al. 2025, "QuantSpec:
 * Self-Speculative Decoding with Hierarchical Quantized KV Cache", whose draft may also read 4-bit
 * weights; issue 17's "optionally a q4 weight copy"): makes a copy of every matrix (attn_q/k/v/output, ffn_gate/up/down of each
 * layer, and the output head; the token embedding is only gathered, not copied) in `type`, quantized
 * at this call from the loaded weights (decoded to f32, then core/quant's row encoder: kvs_quant_row,
 * llama.cpp's reference rules; no second file). Forwards with kvs_step_plan.kv_draft = 1 (the draft
 * passes of speculative decoding, kvs_ar_params.draft) multiply by the copies; every other forward,
 * the verify included, by the model's own weights, so greedy speculative decoding still gives plain
 * greedy decoding's tokens (the verify decides; acceptance may drop). A matrix already of `type`, or
 * whose rows are not whole blocks of 32, is used as it is (no copy). Calling again replaces the
 * copies; type KVS_F32 removes them. Memory: the copies' bytes (kvs_model_draft_weight_bytes) on
 * the model's device, beside the weights. type: KVS_Q4_0 (the paper's 4 bits), KVS_Q4_1,
 * KVS_IQ4_NL or KVS_Q8_0. Errors: KVS_ERR_INVALID_ARGUMENT (NULL), KVS_ERR_DTYPE (a type without a
 * row encoder), KVS_ERR_UNSUPPORTED (the device cannot multiply by that type; a diffusion model, which
 * has no speculative draft), KVS_ERR_OUT_OF_MEMORY,
 * the device's upload / download errors. A refused argument leaves the model's draft weights as they
 * were; an error while copying leaves it without any. */
KVS_API kvs_status kvs_model_set_draft_weights(kvs_model *m, kvs_dtype type);
/* Bytes of the draft copies on the device (0: none). */
KVS_API int64_t kvs_model_draft_weight_bytes(const kvs_model *m);
/* Bytes of those weights used in place from the model file's memory (kvs_model_params.map_weights;
 * 0 when every weight was copied). */
KVS_API int64_t kvs_model_mapped_bytes(const kvs_model *m);

/* A model of the shape hp with random weights, built on dev without a model file (kvsieve bench
 * model; no download needed to measure a real shape). Matrices (token_embd, output unless
 * hp->tied_output, the per-layer projections) are of `type` (F32, F16, BF16 or a block type), except
 * a matrix whose row length k is not a whole number of type's blocks, which takes
 * kvs_quant_fallback(type, k) as llama-quantize does; norms are 1, biases (hp->qkv_bias) 0, q/k norms
 * (hp->qk_norm) 1, all F32. Block types are filled with random code bytes and f16 scales chosen so
 * each matrix's values have an RMS of about 1/sqrt(k) (embeddings 1): valid blocks made directly,
 * not by quantizing floats. The weights are uploaded in chunks of about 4 MiB: the host never holds
 * a second copy. Deterministic for a seed (0: a fixed default). hp->ctx_len sets the default cache
 * capacity (kvs_model_cache_params); a diffusion architecture needs hp->mask_id.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, a size < 1, n_heads % n_kv_heads != 0, rope_dim odd or
 * > head_dim, rope_base <= 1, rms_eps <= 0, unknown arch, a diffusion model without a mask id in the
 * vocabulary), KVS_ERR_DTYPE (type not a weight type), KVS_ERR_UNSUPPORTED (the device cannot use a
 * matrix of that type: message names it), KVS_ERR_OUT_OF_MEMORY and the device's errors. */
KVS_API kvs_status kvs_model_create_random(kvs_model **out, kvs_device *dev, const kvs_model_hparams *hp,
                                           kvs_dtype type, uint64_t seed);

/* The weight type llama.cpp's llama-quantize stores a matrix of row length k in when asked for t
 * (tensor_type_fallback): t itself when k is a whole number of t's blocks (and for F32/F16/BF16);
 * else q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K / iq4_xs -> iq4_nl, and F16 when k is
 * not even a multiple of 32. (Qwen2.5-0.5B's rows of 896 are such a case.) */
KVS_API kvs_dtype kvs_quant_fallback(kvs_dtype t, int64_t k);

/* A weight of the model by its GGUF name ("token_embd", "output", "output_norm",
 * "blk.N.attn_q", "blk.N.attn_k", "blk.N.attn_v", "blk.N.attn_output", "blk.N.ffn_gate",
 * "blk.N.ffn_up", "blk.N.ffn_down", "blk.N.attn_norm", "blk.N.ffn_norm", "blk.N.attn_q.bias", ...,
 * "blk.N.attn_q_norm", "blk.N.attn_k_norm"); borrowed, valid while the model lives. NULL for an
 * unknown name, a layer out of range or a tensor the architecture lacks. */
KVS_API const kvs_tensor *kvs_model_tensor(const kvs_model *m, const char *name);

/* A cache parameter block that fits this model (n_layers, n_kv_heads, head_dim, dim filled; the
 * caller sets capacity, mode, dtype and flags). */
KVS_API kvs_cache_params kvs_model_cache_params(const kvs_model *m);

/* ---- step plans ------------------------------------------------------------------------------ */

struct kvs_layer_plan;
struct kvs_layer_stats;

/* Plan hook (Elastic-Cache's mid-forward drift test): called by kvs_model_forward right after the
 * attention of the layer whose plan carries it, with that layer's statistics (host copies, valid
 * during the call). Returns NULL to go on with the plan, or an array of n_layers - layer - 1 layer
 * plans that replaces the plans of layers layer+1 .. n_layers-1 (owned by the hook's owner, valid
 * until the forward returns; their hooks are honoured too). Rows that differ from the previous
 * layer's need KVS_CACHE_KEEP_X, as for any plan. */
typedef const struct kvs_layer_plan *(*kvs_layer_hook)(void *user, int layer, const struct kvs_layer_stats *stats);

/* Row selection (SPA-Cache, kvs_dlm_schedule_spa): called by kvs_model_forward before layer `layer`
 * runs, with the layer's candidate rows cand[0..n_cand) (token indices, increasing: the layer plan's
 * rows, or the previous layer's) and their proxy scores proxy[n_cand][rank] = xn Wp^T, xn the rows'
 * normalised layer input (rmsnorm(x) * attn_norm, as the attention projections read it), Wp the
 * layer's singular proxy (kvs_model_spa_proxy). Sets *rows / *n_rows to the rows the layer computes
 * (token indices, strictly increasing, >= 1 of them; any rows, not only candidates; with spa_delta:
 * a subset of the candidates, 0 of them allowed; the array owned
 * by the callback's owner, valid until the forward returns). Returns KVS_OK or an error, which ends
 * the forward with it. */
typedef kvs_status (*kvs_layer_select)(void *user, int layer, const int32_t *cand, int64_t n_cand, const float *proxy,
                                       int rank, const int32_t **rows, int64_t *n_rows);

typedef struct kvs_layer_plan {
    /* Rows computed at this layer: indices into the plan's tokens, strictly increasing.
     * NULL with n_rows 0: the same rows as the previous layer (layer 0: all tokens). */
    const int32_t *rows;
    int64_t n_rows;
    /* Attention statistics (indices into this layer's rows; NULL/0 = not collected). */
    const int32_t *stat_rows;   /* -> result key_mass [n_kv_heads][n_kv] (GQA-group mean, summed
                                 * over these query rows) */
    int64_t n_stat_rows;
    int stat_all_rows;          /* 1: key_mass over all rows of the layer (stat_rows ignored) */
    const int32_t *probe_rows;  /* -> result probs [n_probe][n_heads][n_kv] */
    int64_t n_probe;
    int want_argmax;            /* -> result argmax [n_rows][n_heads] */
    /* Sparse attention (WaveFilter, top-k sparse KV): for kv head h the queries see only cache rows
     * keep[h*keep_stride + 0..n_keep[h]) (strictly increasing). NULL = all rows. Statistics are
     * then reported over the kept rows, in cache-row indices (scattered back). */
    const int32_t *keep;
    const int64_t *n_keep;
    int64_t keep_stride;
    /* 1: return this layer's normalised input rows xn = rmsnorm(x) * attn_norm (the hidden state
     * the attention projections read; TRIM-KV's retention gates read the same) in result x.
     * Learned eviction policies (issue 8) score tokens from it once, at creation. */
    int want_x;
    /* Latent memory of evicted tokens (latent.h; borrowed, NULL = none): when some head of this
     * layer holds folded tokens, the attention runs unnormalised and kvs_latent_merge combines
     * the kept tokens' softmax with the memory's readout. */
    const struct kvs_latent *latent;
    /* Optional plan hook called after this layer's attention (see kvs_layer_hook). */
    kvs_layer_hook hook;
    void *hook_user;
    /* 1: return this layer's queries after RoPE, as the attention reads them, in result q
     * (ThinK's channel scores, kvs_evict_params.think_ratio). */
    int want_q;
    /* SPA-Cache row selection (kvs_layer_select; NULL = none): the candidate rows (rows above) are
     * loaded, projected onto the layer's singular proxy of rank proxy_rank (> 0; -1: the automatic
     * rank kvs_model_spa_rank_auto) of the value (proxy_key 0) or key (1) projection on the device,
     * and `select` chooses the rows the layer computes, which are then read from the cache's kept
     * layer inputs (needs KVS_CACHE_KEEP_X). A selection equal to the candidates computes exactly
     * what the plan without select computes (bit-identical). */
    kvs_layer_select select;
    void *select_user;
    int proxy_rank;
    int proxy_key;
    /* 1: SPA-Cache's residual mode (Sun et al. 2026; reference wenhao728/spa-cache spac/llada/hooks.py
     * SpaCachedForwardHooks.block_forward, spac/cache.py get_kv_heads / get_ff_output). Needs
     * KVS_CACHE_KEEP_DELTA. Every row of the layer (its candidates) passes through it: all get
     * rmsnorm and K/V projections (+ RoPE) from their fresh input, written to the cache; the rows
     * `select` chooses (with no select: all) run Q, attention over the whole cache, the output
     * projection and the FFN, x_out = (x_in + attn) + ffn as the plain layer computes it, and their
     * delta x_out - x_in (= attn + ffn) is stored in the cache (kvs_cache_layer_delta, row = position);
     * every other row gets x_out = x_in + its stored delta. The layer's rows (and the next layer's,
     * by default) stay the candidates; select may then return 0 rows, and only candidates.
     * A selection of every candidate computes what the plan without spa_delta computes
     * (bit-identical on the backends tested, tests/test_spa.c). 0 (default): off. */
    int spa_delta;
} kvs_layer_plan;

typedef struct kvs_step_plan {
    const int32_t *tokens;      /* token ids, n_tokens of them: the whole sequence (positional
                                 * cache) or the new tokens (append cache) */
    int64_t n_tokens;
    const int32_t *positions;   /* RoPE/causal position of each token; NULL: index i (positional)
                                 * or, for an append cache, 1 + the largest position it ever held
                                 * (eviction does not change it) + i */
    const kvs_layer_plan *layers; /* [n_layers]; NULL: every layer computes all tokens */
    const int32_t *logit_rows;  /* token indices whose logits are returned (each row's own output:
                                 * for a model with hparams.logit_shift, Dream, row i holds the
                                 * prediction for position i+1; kvs_generate_dlm asks for i-1);
                                 * each must be computed
                                 * at the last layer */
    int64_t n_logit_rows;
    /* 1: RoPE positions within the cache (StreamingLLM, Xiao et al. 2023, sec. 3.2): at layer l,
     * token i of the step is rotated (q and k) at kvs_cache_max_len(cache, l) + i, taken before
     * the step's write, and that RoPE position is recorded with its row (kvs_cache_rope_positions);
     * `positions` still give the causal mask and the positions the cache and policies keep. With
     * kvs_cache_rerotate after each eviction the kept keys sit at 0..len-1 and a decode never
     * rotates past its cache capacity. Without eviction, and with positions 0, 1, .. in order, the
     * RoPE positions equal the token positions (the same result). APPEND caches only.
     * 0 (default): RoPE at the token positions. */
    int rope_in_cache;
    /* 1: attention reads only the upper 4-bit plane of a qh8 (hierarchical) K/V cache, its q4_1
     * view: QuantSpec's draft pass (Tiwari et al. 2025), same weights, half the cache bytes. The
     * step still writes both planes of its new rows. 0 (default): the 8-bit values. No effect on
     * other cache types. */
    int kv_draft;
    /* Block-causal attention (block diffusion: Arriola et al. 2025, BD3-LM, eq. 5's mask; Fast-dLLM
     * v2, Wu et al. 2025, sec. 3): [n_tokens] or NULL. Token i's queries see only the keys whose
     * positions are < key_limit[i] (each > the token's own position, so a query sees itself),
     * replacing the architecture's rule (causal: key_limit[i] = position + 1; bidirectional: every
     * key). kvs_generate_dlm with kvs_dlm_params.block_causal builds it: the prompt causal, each
     * block of the answer bidirectional inside and causal across blocks. NULL (default): the
     * architecture's rule. */
    const int32_t *key_limit;
} kvs_step_plan;

typedef struct kvs_layer_stats {
    int64_t n_kv;               /* keys covered (the cache's max length at this layer) */
    const float *key_mass;      /* [n_kv_heads][n_kv] or NULL */
    const float *probs;         /* [n_probe][n_heads][n_kv] or NULL */
    const int32_t *argmax;      /* [n_rows][n_heads] or NULL */
    const float *x;             /* [n_rows][dim] normalised layer input (want_x) or NULL */
    int64_t n_x_rows;           /* rows of x (this layer's rows) */
    const float *q;             /* [n_x_rows][n_heads][head_dim] queries after RoPE (want_q) or NULL;
                                 * n_x_rows is set with it */
} kvs_layer_stats;

typedef struct kvs_step_result {
    const float *logits;        /* [n_logit_rows][vocab] */
    int64_t n_logit_rows, vocab;
    const kvs_layer_stats *layers; /* [n_layers] */
    int64_t rows_computed;      /* sum over layers of rows run through the layer */
    double seconds_logits;      /* wall time of the logits head (row gather, final norm, output
                                 * projection of the logit rows, download), s */
} kvs_step_result;

/* SPA-Cache singular proxy of `layer` (Sun et al. 2026, arXiv 2602.02544, sec. 3 "singular proxy";
 * reference wenhao728/spa-cache spac/utils/proxy.py, save_projection_svd_from_model and
 * load_proxy_projection_from_dir). W = the layer's value projection Wv [n_kv_heads*head_dim][dim]
 * (key = 1: Wk), decomposed once on the host in float64 (no LAPACK) as W^T = U S V^T: one-sided
 * Jacobi when min(dim, kv dim) <= 256, else the top `rank` triplets by randomized subspace iteration
 * (Halko et al. 2011; oversampling 10, 2 power rounds, a fixed seed per layer, the small SVD by
 * Jacobi; core/model/svd_host.h kvs_svd_top_f64); the proxy is Wp = (U_r S_r)^T [rank][dim] (the reference's nn.Linear weight
 * (V[:, :r] * S[:r]).T, its "V" being our U), so that xn Wp^T = (xn W^T) V_r: a row's value vector
 * in the coordinates of its top-rank singular directions (bias not included). Kept on the model's
 * device after the first call for the forward's row selection (kvs_layer_plan.select); a call with
 * another rank or key rebuilds it. weights: NULL or rank*dim floats (row-major [rank][dim]);
 * sv: NULL or rank doubles, the singular values S_0 >= S_1 >= ...
 * Cost: Jacobi O(sweeps * kv_dim^2 * dim) float64, under a millisecond for the bundled models; the
 * randomized path 6 products of dim x kv_dim x (rank + 10): a 4096 x 4096 layer at rank 128 in 5.4 s
 * of CPU (one Zen 4 core; the full Jacobi of a 1024 x 1024 matrix already takes 29 s, a 4096-wide
 * one hours). The randomized singular values and directions carry its approximation error (relative
 * ~ (S_{rank+10} / S_j)^5; exact when the spectrum has decayed by then).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL model, layer out of range, key not 0/1, rank < 1 or
 * > min(dim, n_kv_heads*head_dim)), KVS_ERR_DTYPE (a weight type the host cannot read),
 * KVS_ERR_OUT_OF_MEMORY, KVS_ERR_STATE (no SVD convergence), the device's. */
KVS_API kvs_status kvs_model_spa_proxy(kvs_model *m, int layer, int rank, int key, float *weights, double *sv);

/* The automatic proxy rank: n_kv_heads*head_dim / 32 (LLaDA-8B: 4096 / 32 = 128, the reference's
 * proxy_rank for LLaDA in scripts/llada/eval_*.sh), at least 8, at most min(dim, kv dim) (the
 * bundled stories260K-llada: 8 of 32). 0 for NULL. */
KVS_API int kvs_model_spa_rank_auto(const kvs_model *m);

/* Runs one step plan against the cache and returns logits and statistics.
 * Errors: KVS_ERR_INVALID_ARGUMENT (ids outside the vocabulary, rope_in_cache on a positional cache, a
 * key_limit not above its token's position, rows not increasing or out of
 * range, logit rows not computed at the last layer, statistics rows out of range, a layer whose
 * rows differ from the previous layer's without KVS_CACHE_KEEP_X, a select without KVS_CACHE_KEEP_X, a
 * selection not strictly increasing or out of range, a proxy rank out of range, a spa_delta layer
 * without KVS_CACHE_KEEP_DELTA, with rope_in_cache, statistics, keep-sets, latent memory, want_x or
 * want_q, or whose selection is not a strictly increasing subset of its candidates), the select
 * callback's error, KVS_ERR_OUT_OF_RANGE (a
 * position beyond the cache capacity, an append cache that is full), KVS_ERR_SHAPE (cache built
 * for another model), and the ops' errors. */
KVS_API kvs_status kvs_model_forward(kvs_model *m, kvs_kv_cache *c, const kvs_step_plan *plan,
                                     kvs_step_result *result);

#ifdef __cplusplus
}
#endif
#endif
