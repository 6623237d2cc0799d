/* Helpers shared by the decode loops of core/decode/ (generate.c: AR, dlm.c: masked diffusion). */
#ifndef KVS_DECODE_INTERNAL_H
#define KVS_DECODE_INTERNAL_H

#include <stdint.h>

#include "internal.h"
#include "kvsieve/generate.h"

/* Monotonic clock, seconds. */
double kvs_decode_now_s(void);

/* Index of the largest of x[0..n) (lowest index on ties); n >= 1. */
int32_t kvs_decode_argmax(const float *x, int64_t n);

/* float64 softmax confidence of one logits row l[0..V): *tok = argmax (lowest id on ties), *conf =
 * its probability. */
void kvs_decode_confidence(const float *l, int64_t V, int32_t *tok, double *conf);

/* Fills the derived fields of st at the end of a decode that began at t0 (kvs_decode_now_s):
 * seconds, tokens_per_s = st->tokens / seconds (st->tokens set by the loop), compute_fraction,
 * cache_bytes_allocated of c. */
/* Fills seconds (since t0), seconds_build (the device's kernel builds since b0), tokens_per_s (without
 * the builds), compute_fraction and cache_bytes_allocated. */
void kvs_decode_stats_finish(kvs_gen_stats *st, double t0, double b0, const kvs_model *m, const kvs_kv_cache *c);

/* Uniform float in [0, 1) from the AR sampler's xorshift state (llama2.c run.c). */
float kvs_decode_rng_f32(uint64_t *state);

/* The distribution the AR sampler draws from for temperature t > 0 and nucleus top_p (softmax of
 * logits / t; top_p < 1: the smallest set of most likely tokens whose mass exceeds top_p,
 * renormalised), in float64: prob[0..V). scratch: V * 16 bytes. */
void kvs_decode_dist(const float *logits, int64_t V, float t, float top_p, double *prob, void *scratch);

/* The speculative AR loop (speculative.c), called by kvs_generate_ar for draft > 0 after its
 * checks: the same contract. */
kvs_status kvs_generate_ar_spec(kvs_model *m, kvs_kv_cache *cache, const int32_t *prompt, int64_t n_prompt,
                                const kvs_ar_params *p, kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out,
                                kvs_gen_stats *stats);
/* Its rounds from a cache holding positions [0, L) and the next token tok (kvs_generate_ar_continue
 * for draft > 0, after its checks). */
kvs_status kvs_generate_ar_spec_continue(kvs_model *m, kvs_kv_cache *cache, int64_t L, int32_t tok, const kvs_ar_params *p,
                                         kvs_token_cb cb, void *user, int32_t *out, int64_t *n_out, kvs_gen_stats *stats);

#endif
