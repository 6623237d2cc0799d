/* Small host helpers shared by the cache schedules (core/schedule/). */
#ifndef KVS_SCHED_UTIL_H
#define KVS_SCHED_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvsieve/schedule.h"

/* A growable int32 list. */
typedef struct kvs_ibuf {
    int32_t *p;
    int64_t n, cap;
} kvs_ibuf;

static inline kvs_status kvs_ibuf_reserve(kvs_ibuf *b, int64_t cap) {
    if (cap <= b->cap) return KVS_OK;
    int64_t c = b->cap ? b->cap : 16;
    while (c < cap) c *= 2;
    int32_t *q = realloc(b->p, (size_t)c * sizeof *q);
    if (!q) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule: out of host memory (%lld indices)", (long long)c);
    b->p = q;
    b->cap = c;
    return KVS_OK;
}

static inline kvs_status kvs_ibuf_push(kvs_ibuf *b, int32_t v) {
    if (b->n == b->cap) KVS_TRY(kvs_ibuf_reserve(b, b->n + 1));
    b->p[b->n++] = v;
    return KVS_OK;
}

static inline void kvs_ibuf_free(kvs_ibuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* A schedule's counters (kvs_dlm_schedule_stats), the per-layer arrays sized by the model. */
typedef struct kvs_sched_counts {
    int64_t steps, full_steps;
    int n_layers;
    int64_t *rows, *refreshes;   /* [n_layers] */
    int64_t kept_rows, context_rows;
} kvs_sched_counts;

/* Zeroes the counters for a decode of n_layers layers (arrays grown as needed).
 * Errors: KVS_ERR_OUT_OF_MEMORY. */
static inline kvs_status kvs_sched_counts_begin(kvs_sched_counts *c, int n_layers) {
    if (n_layers > c->n_layers) {
        int64_t *r = realloc(c->rows, (size_t)n_layers * 2 * sizeof *r);
        if (!r) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule: out of host memory (%d layers)", n_layers);
        c->rows = r;
    }
    int64_t *rows = c->rows;
    memset(c, 0, sizeof *c);
    c->rows = rows;
    c->n_layers = n_layers > 0 ? n_layers : 0;
    c->refreshes = rows ? rows + c->n_layers : NULL;
    if (rows) memset(rows, 0, (size_t)c->n_layers * 2 * sizeof *rows);
    return KVS_OK;
}

static inline void kvs_sched_counts_free(kvs_sched_counts *c) {
    free(c->rows);
    memset(c, 0, sizeof *c);
}

/* The public view of the counters (arrays borrowed from c). */
static inline void kvs_sched_counts_get(const kvs_sched_counts *c, kvs_dlm_schedule_stats *out) {
    *out = (kvs_dlm_schedule_stats){.steps = c->steps, .full_steps = c->full_steps, .n_layers = c->n_layers,
                                    .rows = c->n_layers ? c->rows : NULL, .refreshes = c->n_layers ? c->refreshes : NULL,
                                    .kept_rows = c->kept_rows, .context_rows = c->context_rows};
}

/* Index of v in the increasing list a[0..n), or -1. */
static inline int64_t kvs_ibuf_find(const int32_t *a, int64_t n, int32_t v) {
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] == v) return mid;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* The block's masked positions, in order, into b (cleared first). */
static inline kvs_status kvs_sched_block_masked(const kvs_dlm_view *v, kvs_ibuf *b) {
    b->n = 0;
    KVS_TRY(kvs_ibuf_reserve(b, v->block_end - v->block_start));
    for (int64_t p = v->block_start; p < v->block_end; p++)
        if (v->masked[p]) b->p[b->n++] = (int32_t)p;
    return KVS_OK;
}

#endif
