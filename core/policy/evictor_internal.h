/* The evictor's state, shared by its two files (not installed):
 *   evictor.c        parameters, create/begin, the step plan (which statistics a step collects),
 *                    update (accumulating them) and the budget triggers;
 *   evictor_evict.c  eviction when a trigger fires: score, keep-set by top-k on the device,
 *                    compaction of the cache and of the host statistics. */
#ifndef KVS_EVICTOR_INTERNAL_H
#define KVS_EVICTOR_INTERNAL_H

#include <stdlib.h>

#include "internal.h"
#include "policy_internal.h"

typedef struct layer_state {
    kvs_policy_needs needs;
    int64_t budget;        /* per kv head */
    int64_t head_cap;      /* pooled scopes: most rows one head may keep */
    float *acc;            /* [H][cap] accumulated mass (NEED_ACC_MASS) */
    float *ring;           /* [W][H][cap] per-query group-mean attention rows (NEED_WINDOW_MASS) */
    int32_t *ring_qpos;    /* [W] query position of each ring slot, -1 empty */
    /* this step's plan */
    int want_mass;
    int64_t probe_first, n_probe;
    double *q_sq;          /* [H][hd] ThinK: squared rotated window queries, summed (think_ratio > 0) */
    int64_t q_first;       /* this step's first row whose queries count (-1: none asked) */
} layer_state;

struct kvs_evictor {
    kvs_evict_params p;
    kvs_policy *pol;
    int L, H, NH, hd;
    kvs_rope_params rope;  /* the model's RoPE (p.rerotate) */
    int64_t S, B, buffer;
    kvs_budget_scope scope;
    int noop;
    layer_state *ls;       /* [L] */
    kvs_kv_cache *c;
    int64_t cap;
    int64_t n_new;         /* tokens of the planned step; -1 when no plan is pending */
    int32_t *probe_rows;   /* [L][max probe] plan arrays */
    int64_t probe_rows_cap;
    /* host scratch for eviction */
    float *scores;         /* [L][H][cap] */
    float *win, *keys, *vals;
    int32_t *keep;         /* [L][H][cap] */
    int64_t *n_keep;       /* [L][H] */
    int32_t *idx;          /* [L*H*cap] */
    int64_t *cnt;          /* [L*H] */
    int64_t *mcap;         /* [L*H] mass mode: per-head caps from kvs_topp */
    uint8_t *fixed;        /* [L*H] */
    kvs_evict_stats st;
};

/* Frees *p and allocates n zeroed bytes (at least 1); KVS_ERR_OUT_OF_MEMORY naming the size. */
static inline kvs_status xalloc(void **p, size_t n) {
    free(*p);
    *p = calloc(n ? n : 1, 1);
    return *p ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_evictor: out of host memory (%zu bytes)", n);
}

/* Evicts layers [l0, l1) (one pooled set for the global scope) down to their budgets: scores the
 * rows with the policy, keeps the top budget per head (or pool) on the device, compacts the cache
 * and the host statistics. cur_pos: position of the newest token. (evictor_evict.c) */
kvs_status kvs_evictor_evict_pool(kvs_evictor *e, int l0, int l1, int32_t cur_pos);

/* ThinK after an eviction of layer l: prunes the key channels kvs_think_select picks from the
 * accumulated window queries and the kept rows (the cache's pruned segment, or zeroed in place with
 * think_in_place), then clears the accumulator. (think.c) */
kvs_status kvs_evictor_think(kvs_evictor *e, int l);

#endif
