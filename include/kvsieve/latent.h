/* kvsieve — latent memory for evicted tokens (issue 8; IndexMem arXiv 2605.25475 has no public code:
 * this is our design, the common linear-attention pattern of Katharopoulos et al. 2020 with the
 * positive random features of Performer/FAVOR+, Choromanski et al. 2021, arXiv 2009.14794, eq. 7).
 *
 * Per (layer l, kv head h) the memory holds
 *   S[l][h] = sum over evicted tokens of phi(k) v^T   [F][head_dim]
 *   z[l][h] = sum over evicted tokens of phi(k)       [F]
 * with the positive random feature map (F features, omega_f ~ N(0, I_d) drawn from a seed)
 *   phi(x)_f = exp(omega_f . x' - |x'|^2 / 2) / sqrt(F),   x' = x * scale^(1/2),
 * whose expectation phi(q) . phi(k) = exp(scale * q . k) is exactly the softmax kernel of the
 * attention op (scale = 1/sqrt(head_dim)). Positive features (not elu+1) because they are an
 * unbiased estimate of that kernel and never give a negative denominator.
 * Attention then becomes, for a query q of a head in kv head h's group, with the attention op's
 * unnormalised numerator num = sum_kept e^{s_i - m} v_i, row_max m and row_sum l:
 *   out = (num + e^{-m} phi(q)^T S) / (l + e^{-m} phi(q)^T z)
 * evaluated stably with M = max(m, max_f log phi(q)_f) in float64 on the host. A (layer, head)
 * whose memory is empty takes out = num / l: with nothing evicted attention equals the full cache's
 * (to float rounding of one division; bit-exact when the forward keeps the normalised path, which it
 * does for layers whose memory is empty).
 * Keys are folded as cached (after RoPE) and queries are merged after RoPE, so q . k is the logit.
 *
 * Ownership: the caller owns a kvs_latent; a policy or plan only borrows it (a policy is given one
 * with kvs_policy_set_latent, policy.h).
 * Thread-safety: one decode at a time. */
#ifndef KVSIEVE_LATENT_H
#define KVSIEVE_LATENT_H

#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_latent kvs_latent;

/* An empty memory for n_layers x n_kv_heads heads of head_dim, with n_features random features
 * drawn from seed, for logits scaled by `scale` (0: 1/sqrt(head_dim), the attention default).
 * Errors: KVS_ERR_INVALID_ARGUMENT (a size < 1, n_features > 4096, head_dim > 512, scale < 0), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_latent_create(kvs_latent **out, int n_layers, int n_kv_heads, int n_heads, int head_dim,
                                     int n_features, float scale, uint64_t seed);
KVS_API void kvs_latent_destroy(kvs_latent **lm);
/* Empties every head (S = 0, z = 0, count = 0). */
KVS_API void kvs_latent_reset(kvs_latent *lm);
/* Folds n tokens (host rows k[n][head_dim], v[n][head_dim], f32) into (layer, head).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, layer/head out of range, n < 0). */
KVS_API kvs_status kvs_latent_fold(kvs_latent *lm, int layer, int head, const float *k, const float *v, int64_t n);
/* Tokens folded into (layer, head); -1 on bad arguments. */
KVS_API int64_t kvs_latent_count(const kvs_latent *lm, int layer, int head);
/* 1 when some head of `layer` holds folded tokens (the forward then merges). */
KVS_API int kvs_latent_active(const kvs_latent *lm, int layer);
/* Test hook: 1 = the forward merges even for empty memories (exercising the unnormalised
 * attention path on every backend). */
KVS_API void kvs_latent_set_force(kvs_latent *lm, int force);
KVS_API int kvs_latent_forced(const kvs_latent *lm);

/* Merges the memory of `layer` into an unnormalised attention output (kvs_attention with
 * unnormalised = 1, row_max and row_sum), on any device (download, float64 host merge, upload):
 *   q:   [n][n_heads][head_dim] F32 (after RoPE), out: [n][n_heads][head_dim] F32 numerator in,
 *   normalised merged output out; row_max, row_sum: [n][n_heads] F32.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, bad layer), KVS_ERR_SHAPE (shapes above), the
 * device's transfer errors, KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_latent_merge(const kvs_latent *lm, int layer, const kvs_tensor *q, kvs_tensor *out,
                                    const kvs_tensor *row_max, const kvs_tensor *row_sum);

#ifdef __cplusplus
}
#endif
#endif
