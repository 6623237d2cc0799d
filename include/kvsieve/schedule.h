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
#include "kvsieve/generate.h"
#include "kvsieve/model.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

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
} kvs_dlm_view;

/* What a schedule returns for one step. Arrays are owned by the schedule and stay valid until its
 * next call. */
typedef struct kvs_dlm_step {
    kvs_step_plan plan;         /* tokens/n_tokens are filled in by the loop */
    const int32_t *candidates;  /* positions eligible for unmasking this step; NULL: the block's
                                 * masked positions. Must be masked and have logits (logit_rows). */
    int64_t n_candidates;
} kvs_dlm_step;

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
} kvs_dlm_schedule_ops;

struct kvs_dlm_schedule {
    const kvs_dlm_schedule_ops *ops;
    void *self;
};

/* Wraps user callbacks as a schedule (for engines with their own policies). */
KVS_API kvs_status kvs_dlm_schedule_custom(kvs_dlm_schedule **out, const kvs_dlm_schedule_ops *ops, void *self);
KVS_API void kvs_dlm_schedule_destroy(kvs_dlm_schedule **s);
KVS_API const char *kvs_dlm_schedule_name(const kvs_dlm_schedule *s);
KVS_API unsigned kvs_dlm_schedule_cache_flags(const kvs_dlm_schedule *s);

/* The no-cache baseline: every step computes every row at every layer; logits at the block's
 * masked positions. */
KVS_API kvs_status kvs_dlm_schedule_none(kvs_dlm_schedule **out);

#ifdef __cplusplus
}
#endif
#endif
