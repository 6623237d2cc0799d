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
void kvs_decode_stats_finish(kvs_gen_stats *st, double t0, const kvs_kv_cache *c);

#endif
