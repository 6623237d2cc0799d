/* Internals of kvs_policy shared by the policy and evictor sources. */
#ifndef KVS_POLICY_INTERNAL_H
#define KVS_POLICY_INTERNAL_H

#include <stdio.h>

#include "kvsieve/policy.h"

struct kvs_policy {
    const kvs_policy_ops *ops;
    void *self;
    float alpha;     /* Ada-KV per-head floor (fraction of the even share); 0 = none */
    int beta;        /* PyramidKV steepness; 0 = uniform layer budgets */
    float threshold; /* threshold mode (learned policies): whenever eviction runs, every row scoring
                      * below it is evicted, the budget still caps the rest; -INFINITY = off */
    int builtin;
    int min_scope;   /* kvs_budget_scope the evictor raises a narrower scope to (prefixkv: global) */
    char name[48];
    struct kvs_latent *latent; /* latent memory handed to every plan (latent.h), or NULL */
    const kvs_model *model;    /* bound with kvs_policy_set_model (critical, expected), or NULL */
    float norm_threshold;      /* DMS-style threshold mode of the built-ins (params threshold):
                                * rows whose per-head min-max normalised score is below it are
                                * marked KVS_POLICY_MARK_EVICT and `threshold` is set to catch them;
                                * 0 = off */
    float keep_mass;           /* mass mode (params keep_mass): per head, the kvs_topp count of
                                * the scores caps the kept rows; 0 = off */
    int64_t protect_sink;      /* rows the scorer always keeps from the start (its n_sink: streaming,
                                * lagkv, expected, clusterkv, cascade), else 0 */
    int64_t protect_window;    /* rows the scorer always keeps at the end when the window was given
                                * (h2o, snapkv, also as a base), else 0 (the defaults fit the budget) */
};

/* Score a threshold-mode row gets so that the evictor's threshold (KVS_POLICY_MARK_EVICT / 2)
 * evicts it; every real score lies far above. */
#define KVS_POLICY_MARK_EVICT (-3.0e38f)

/* policy_more.c: the scorers of issue 18 (keydiff, lagkv, critical, expected, prefixkv). is_more: 1 when
 * name is one of them (or "critical:<base>"). more_create: builds it from validated params
 * (KVS_ERR_INVALID_ARGUMENT for a bad base or lag, KVS_ERR_OUT_OF_MEMORY). */
int kvs_policy_more_is(const char *name);
kvs_status kvs_policy_more_create(kvs_policy **out, const char *name, const kvs_policy_params *p);
/* The check of kvs_policy_check_model for these scorers (KVS_OK for any other policy). */
kvs_status kvs_policy_more_check(const kvs_policy *p, const kvs_model *model);

/* cascade.c: the cascading KV cache (arXiv 2406.17808). KVS_ERR_INVALID_ARGUMENT for cascades
 * outside [0, 16], KVS_ERR_OUT_OF_MEMORY. */
kvs_status kvs_policy_cascade_create(kvs_policy **out, const kvs_policy_params *p);


#endif
