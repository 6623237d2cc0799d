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
    char name[48];
    struct kvs_latent *latent; /* latent memory handed to every plan (latent.h), or NULL */
};

#endif
