/* kvsieve — generation loops: autoregressive sampling and masked-diffusion decoding.
 *
 * Both loops drive kvs_model_forward with step plans. Diffusion decoding asks a *schedule*
 * (schedule.h) for each step's plan, so every DLM cache (none, prefix, dual, delayed, elastic,
 * wavefilter) runs through the same loop and the same unmasking rules.
 * Thread-safety: as the model's device.
 */
#ifndef KVSIEVE_GENERATE_H
#define KVSIEVE_GENERATE_H

#include <stdint.h>

#include "kvsieve/cache.h"
#include "kvsieve/export.h"
#include "kvsieve/model.h"
#include "kvsieve/policy.h"
#include "kvsieve/schedule.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Statistics every generation reports. */
typedef struct kvs_gen_stats {
    double seconds;            /* wall time of the generation (prompt + decode), s */
    double tokens_per_s;       /* tokens / (seconds - seconds_build) */
    int64_t steps;             /* forward steps (AR: tokens; DLM: denoising steps) */
    int64_t rows_computed;     /* sum over steps and layers of rows run through a layer */
    int64_t rows_baseline;     /* the same for the no-cache baseline (DLM: n_tokens * n_layers
                                * per step; AR: what a cache-less recompute would run) */
    double compute_fraction;   /* rows_computed / rows_baseline */
    int64_t cache_bytes_peak;  /* peak of kvs_cache_bytes_used over the run, bytes */
    int64_t cache_bytes_allocated; /* cache allocated at the end of the run, bytes (kvs_cache_bytes_allocated) */
    int64_t evictions;         /* AR eviction events (kvs_evict_stats.evictions) */
    int64_t rows_evicted;      /* K/V rows evicted, summed over layers and kv heads */
    int64_t tokens;            /* tokens produced by decoding: AR: *n_out; DLM: generated positions
                                * committed by a denoising step (gen_len unless the decode stopped
                                * early: callback or stop_eos) */
    int64_t tokens_eos_filled; /* DLM with stop_eos: masked positions after the first EOS set to EOS
                                * without decoding (0 otherwise) */
    /* Where the decode's wall time went, s, summed over its steps (the rest of `seconds` is the
     * loop's own bookkeeping): */
    double seconds_plan;       /* host planning: DLM: the schedule's plan and feedback; AR: the
                                * evictor's plan and update (eviction) */
    double seconds_forward;    /* kvs_model_forward without its logits head: the layers */
    double seconds_logits;     /* the logits head of the forward (kvs_step_result.seconds_logits) */
    double seconds_confidence; /* DLM: the softmax confidences of the candidates and their ranking;
                                * AR: sampling from the logits */
    double seconds_commit;     /* DLM: the commit rule, the commit, the EOS stop and the emission
                                * with the token callback; AR: the token callback */
    /* AR with kvs_ar_params.draft > 0 (speculative decoding): */
    int64_t spec_verify_steps; /* verify forwards (each N + 1 rows) */
    int64_t spec_drafted;      /* tokens drafted */
    int64_t spec_accepted;     /* drafted tokens accepted (acceptance rate = accepted / drafted) */
    double seconds_draft;      /* wall time of the draft forwards, s (part of seconds_forward) */
    double seconds_build;      /* kernels built on their first use during the generation (OpenCL
                                * programs, Vulkan pipelines; kvs_device_build_seconds), s: part of
                                * seconds and of the phase that met them, not of tokens_per_s */
} kvs_gen_stats;

/* Called with each token as it is finalised (AR: every token; DLM: every token of a finished block,
 * in order). Return non-zero to stop early. */
typedef int (*kvs_token_cb)(void *user, int32_t token);

/* ---- autoregressive ------------------------------------------------------------------------- */

typedef struct kvs_ar_params {
    int64_t max_new;      /* tokens to generate; default 256 */
    float temperature;    /* 0 (default): greedy argmax (lowest id on ties) */
    float top_p;          /* nucleus sampling mass in (0, 1]; default 1 (off) */
    uint64_t seed;        /* sampler seed; default 42 */
    int stop_at_bos;      /* 1 (default): stop when BOS is produced (llama2.c run.c) */
    int stop_at_eos;      /* 1 (default): stop when EOS is produced */
    /* KV eviction (policy.h). The evictor plans each step's attention statistics, accumulates them
     * and evicts when the cache reaches budget + buffer; see kvs_evict_params for the fields. */
    kvs_policy *policy;   /* NULL (default): no eviction */
    double budget;        /* (0, 1]: fraction of n_prompt + max_new; > 1: tokens per kv head;
                           * default 1.0 (never evicts) */
    kvs_budget_scope scope; /* default KVS_SCOPE_HEAD */
    int64_t evict_buffer; /* tokens above the budget before eviction; 0 (default): automatic */
    int64_t budget_tokens; /* > 0: tokens per kv head instead of budget (1 token can only be asked
                            * this way); 0 (default): budget applies */
    /* 1: key re-rotation (StreamingLLM, Xiao et al. 2023, sec. 3.2; kvpress KeyRerotationPress):
     * RoPE positions are assigned within the cache (kvs_step_plan.rope_in_cache) and, after each
     * eviction, the kept rows are renumbered 0..n-1 and their keys re-rotated in place
     * (kvs_cache_rerotate); a new token takes the cache length as its RoPE position. With a policy
     * whose budget + buffer fits the model's context, the decode may then run past the context.
     * Without eviction it gives the same tokens as 0. 0 (default): kept tokens keep their positions. */
    int rerotate;
    double think_ratio;   /* ThinK key-channel pruning at each eviction (kvs_evict_params.think_ratio,
                           * window 32), [0, 1); 0 (default): off */
    /* > 0: QuantSpec self-speculative decoding (Tiwari et al. 2025): the same weights draft `draft`
     * tokens reading only the 4-bit view of a qh8 cache (kvs_step_plan.kv_draft), then one forward
     * of draft + 1 rows over the full 8-bit cache verifies them. Greedy (temperature
     * 0): the longest prefix of drafts equal to the target's argmax is kept, plus the target's next
     * token; sampling: speculative sampling (Leviathan et al. 2023, alg. 1; kvs_spec_accept), so the
     * output distribution is the target's. Rows the rejected drafts wrote are rolled back
     * (kvs_cache_truncate). 1..KVS_SPEC_MAX_DRAFT; needs a qh8 K or V type, no policy, no rerotate.
     * The cap keeps a verify step (draft + 1 <= 16 rows) on the products a one-row decode step uses
     * on x86, 8-bit activations for the block types up to 16 rows (ops.h kvs_matmul): 17 rows would
     * switch to f32 activations and give other logits than plain decoding, not only at near-ties.
     * 0 (default): plain decoding. */
    int draft;
} kvs_ar_params;

#define KVS_SPEC_MAX_DRAFT 15 /* backends/cpu/ops_dense.c asserts it against its 8-bit row limit */

/* Speculative sampling's acceptance of one drafted token (Leviathan et al. 2023, "Fast Inference
 * from Transformers via Speculative Decoding", alg. 1 / Chen et al. 2023, alg. 2): x was drawn from
 * the draft distribution q[0..V); p[0..V) is the target's. With u, u2 uniform in [0, 1):
 * accepted (returns 1, *out = x) when u < p(x) / q(x) (i.e. with probability min(1, p(x)/q(x)));
 * else returns 0 and *out is drawn by inverse CDF with u2 from norm(max(0, p - q)) (from p when
 * that residual has no mass). The token then follows p exactly. p and q need not be normalised
 * beyond float64 rounding; q(x) must be > 0. Returns -1 (and *out = -1) for NULL, V < 1, x
 * outside [0, V) or q(x) <= 0. */
KVS_API int kvs_spec_accept(const double *p, const double *q, int64_t V, int32_t x, double u, double u2, int32_t *out);

KVS_API kvs_ar_params kvs_ar_params_default(void);

/* Cache rows per kv head that kvs_generate_ar needs for this prompt length and parameters: with a
 * policy the evictor's kvs_evictor_capacity (the budget + buffer, the prompt when longer), else
 * n_prompt + max_new - 1 (the last sampled token is never forwarded, so it needs no row; n_prompt when
 * max_new is 0). -1 on bad arguments (message via kvs_last_error). */
KVS_API int64_t kvs_ar_capacity(const kvs_model *m, int64_t n_prompt, const kvs_ar_params *p);

/* Autoregressive decoding (llama2.c run.c generate(); top-p as Holtzman et al. 2019): prefill the
 * prompt (prompt[0..n_prompt), typically BOS first) into an APPEND cache, then sample up to
 * max_new tokens. out: caller array of max_new ids, *n_out set to the count produced.
 * cache: an APPEND cache with capacity >= kvs_ar_capacity(m, n_prompt, p) (n_prompt + max_new - 1 without a
 * policy), reset by this call; with a policy,
 * capacity >= kvs_ar_capacity(m, n_prompt, p) suffices (budget + buffer rows per kv head).
 * Errors: KVS_ERR_INVALID_ARGUMENT (empty prompt, bad params, positional cache, a masked-diffusion
 * model: llada, dream),
 * KVS_ERR_OUT_OF_RANGE (capacity; a model with a known context (hparams ctx_len > 0): without
 * rerotate and a policy, a last forwarded position n_prompt + max_new - 2 >= ctx_len; with both,
 * a budget + buffer (kvs_ar_capacity) > ctx_len), KVS_ERR_UNSUPPORTED (rerotate on a cache whose keys
 * are not plain f32/f16; draft > 0 with a policy or rerotate; a policy that cannot score this model, kvs_policy_check_model), the forward's errors, and with a policy the evictor's (kvs_evictor_create:
 * bad budget or scope, sinks or a window filling the budget; eviction: the top-k and compaction ops' and the policy's own). */
KVS_API kvs_status kvs_generate_ar(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                                   const kvs_ar_params *p, kvs_token_cb cb, void *user, int32_t *out,
                                   int64_t *n_out, kvs_gen_stats *stats);

/* Autoregressive decoding that continues on a cache already holding a context (kvs_generate_ar
 * without its reset and prefill; for benchmarks at long context, where a prefill would cost more than
 * the decode measured, and for callers that filled the cache themselves). cache: an APPEND cache
 * whose every (layer, kv head) holds exactly the rows of positions 0 .. L-1, L = kvs_cache_next_pos
 * (cache) >= 1 (no eviction, no gaps), with capacity >= L + max_new. tok: the next token, at position
 * L, not yet forwarded (not written to out). Then as kvs_generate_ar's loop: forward tok, sample the
 * next token, ... until max_new tokens are in out (*n_out the count; fewer at a stop token or when cb
 * returns nonzero); the cache then holds L + *n_out rows (the last token is not forwarded), plain or
 * speculative (p->draft > 0: the rows of rejected drafts are rolled back). Greedy (temperature 0),
 * the tokens of plain and speculative continuation are those kvs_generate_ar gives after a prompt
 * whose prefill left this cache (the same one-row forwards), within speculative decoding's exactness
 * (kvs_ar_params.draft). Stats as kvs_generate_ar (seconds: the decode only).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, bad params as kvs_generate_ar, tok outside [0, vocab), a
 * positional cache, an empty cache, a (layer, head) whose length is not L, a masked-diffusion model,
 * draft > 0 without a qh8 K or V), KVS_ERR_UNSUPPORTED (a policy or rerotate), KVS_ERR_OUT_OF_RANGE
 * (capacity < L + max_new; position L + max_new - 1 >= the model's ctx_len when known), the forward's
 * errors. */
KVS_API kvs_status kvs_generate_ar_continue(kvs_model *m, kvs_kv_cache *cache, int32_t tok, const kvs_ar_params *p,
                                            kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out,
                                            kvs_gen_stats *stats);

/* ---- masked diffusion ------------------------------------------------------------------------ */

typedef struct kvs_dlm_params {
    int64_t gen_len;      /* masked tokens appended to the prompt; default 64 */
    int64_t block_len;    /* block length, divides gen_len; default 32 */
    int64_t steps;        /* denoising steps over all blocks, a multiple of gen_len/block_len;
                           * default = gen_len (one token per step) */
    float threshold;      /* > 0: Fast-dLLM threshold parallel decoding (commit every candidate
                           * with confidence >= threshold, at least the most confident one; steps
                           * ignored); 0 (default): low-confidence remasking with a fixed count */
    kvs_dlm_schedule *schedule; /* NULL: no cache (every step recomputes every row) */
    int stop_eos;         /* 1: LLaDA's early stop at EOS: once every generated position before the
                           * first committed EOS is decoded, the positions after it are EOS and are
                           * not decoded (counted in kvs_gen_stats.tokens_eos_filled); needs the
                           * model's eos_id. 0 (default): decode every block. */
    int block_causal;     /* 1: block diffusion (BD3-LM, Arriola et al. 2025; Fast-dLLM v2, Wu et al.
                           * 2025; SDAR): the prompt attends causally, each block of block_len
                           * bidirectionally inside and causally across blocks (kvs_step_plan.key_limit),
                           * and a step runs only the sequence up to the current block's end, so
                           * later blocks cost nothing and finished blocks never change. Schedules:
                           * none (recomputes [0, block end) every step) and prefix (exact here:
                           * the previous block's rows are recomputed once, with their final tokens,
                           * at the next block's first step, then only the block's rows); any other
                           * schedule is refused. block_len 1 over a shifted-logit model (dream) is causal
                           * AR decoding; one block without a prompt is the bidirectional decode.
                           * 0 (default): every row attends to every row (LLaDA, Dream). */
} kvs_dlm_params;

KVS_API kvs_dlm_params kvs_dlm_params_default(void);

/* LLaDA-style masked-diffusion decoding (Nie et al. 2025, "Large Language Diffusion Models",
 * alg. 4 low-confidence remasking; reference: NVlabs/Fast-dLLM llada/generate.py):
 * x = prompt + [mask] * gen_len, blocks decoded left to right; with m masked positions at a block's
 * start and s = steps / (gen_len / block_len) steps per block, step i commits m / s tokens plus one
 * for the first m % s steps (LLaDA's get_num_transfer_tokens). Each step runs the schedule's plan,
 * takes p = softmax(logits) in float64 at the candidate positions (default: the block's masked
 * positions), token = argmax p (lowest id on ties), confidence = max p, and commits the most
 * confident candidates (lowest position on ties). A block ends when it has no mask left.
 * Models: llada and dream (kvs_arch_is_diffusion). Dream's logits are shifted (hparams.logit_shift):
 * the prediction for position p is the output of row p-1 (as Dream's own generation code reads
 * cat(logits[:, :1], logits[:, :-1])), so n_prompt >= 1 and every schedule's plan computes the row
 * before each logit position (kvs_dlm_view.logit_shift).
 * out: caller array of gen_len ids (the decoded suffix), all set: when the callback stops the decode
 * after a block, the positions never decoded hold mask_id (stats->tokens counts those decoded); with
 * stop_eos the positions after the first EOS hold EOS. stats->tokens_per_s = stats->tokens / seconds.
 * cb: called with every token of out[] as its block finishes (with stop_eos, the EOS tail too),
 * until it returns non-zero. cache: a POSITIONAL cache with capacity
 * >= n_prompt + gen_len (flags as the schedule requires), reset by this call.
 * Errors: KVS_ERR_INVALID_ARGUMENT (bad lengths, model is not a masked-diffusion model or has no
 * mask id, stop_eos without an EOS id, cache mode, an empty prompt with shifted logits, block_causal
 * with a schedule other than none/prefix), KVS_ERR_OUT_OF_RANGE (capacity), the schedule's and the forward's errors. */
KVS_API kvs_status kvs_generate_dlm(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                                    const kvs_dlm_params *p, kvs_token_cb cb, void *user, int32_t *out,
                                    kvs_gen_stats *stats);

/* ---- step fidelity of a cache schedule (kvsieve eval --dlm --fidelity) ------------------------ */

/* What kvs_dlm_schedule_fidelity measured since its creation. */
typedef struct kvs_dlm_fidelity {
    int64_t match;        /* logit rows whose argmax equals the no-cache forward's */
    int64_t total;        /* logit rows compared, summed over steps */
    double seconds;       /* wall time of the shadow forwards, s (subtract from kvs_gen_stats.seconds
                           * for the schedule's own time) */
} kvs_dlm_fidelity;

/* A measuring wrapper around a cache schedule: it plans as `inner` and, after each step of
 * kvs_generate_dlm, runs the no-cache forward of the same decoding state on `shadow` (a second
 * device model with the weights of the decoding one, never the decoding model itself) into
 * shadow_cache (POSITIONAL, capacity >= the decode's n_prompt + gen_len; reset at every decode),
 * and compares the argmax at the schedule's logit rows. Unlike positional agreement with a
 * no-cache decode, this does not cascade after a first differing token. The wrapper has inner's
 * name and cache flags and reports inner's kvs_dlm_schedule_get_stats. Borrowed: inner, shadow,
 * shadow_cache (destroy the wrapper first; destroying it leaves inner alone). Read the counts with
 * kvs_dlm_fidelity_get.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, shadow cache not POSITIONAL), KVS_ERR_OUT_OF_MEMORY; during
 * the decode, the shadow forward's errors (kvs_model_forward). */
KVS_API kvs_status kvs_dlm_schedule_fidelity(kvs_dlm_schedule **out, kvs_dlm_schedule *inner, kvs_model *shadow,
                                             kvs_kv_cache *shadow_cache);

/* The counts of a kvs_dlm_schedule_fidelity wrapper.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, s is not a fidelity wrapper). */
KVS_API kvs_status kvs_dlm_fidelity_get(const kvs_dlm_schedule *s, kvs_dlm_fidelity *out);

#ifdef __cplusplus
}
#endif
#endif
