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
