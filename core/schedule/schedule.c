/* Schedule objects: the generic wrapper and the no-cache baseline. */
#include <stdlib.h>
#include <string.h>

#include "schedule/sched_util.h"

kvs_status kvs_dlm_schedule_custom(kvs_dlm_schedule **out, const kvs_dlm_schedule_ops *ops, void *self) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_custom: out is NULL");
    *out = NULL;
    if (!ops || !ops->plan || !ops->name)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_custom: ops needs name and plan");
    kvs_dlm_schedule *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_custom: out of host memory");
    s->ops = ops;
    s->self = self;
    *out = s;
    return KVS_OK;
}

void kvs_dlm_schedule_destroy(kvs_dlm_schedule **s) {
    if (!s || !*s) return;
    if ((*s)->ops->destroy) (*s)->ops->destroy((*s)->self);
    free(*s);
    *s = NULL;
}

const char *kvs_dlm_schedule_name(const kvs_dlm_schedule *s) { return s ? s->ops->name : "none"; }
unsigned kvs_dlm_schedule_cache_flags(const kvs_dlm_schedule *s) { return s ? s->ops->cache_flags : 0; }

kvs_status kvs_dlm_schedule_get_stats(const kvs_dlm_schedule *s, kvs_dlm_schedule_stats *out) {
    if (!s || !out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_get_stats: NULL argument");
    memset(out, 0, sizeof *out);
    if (s->ops->stats) s->ops->stats(s->self, out);
    return KVS_OK;
}

/* ---- none: recompute everything, logits at the block's masked positions ---------------------- */

typedef struct sched_none {
    int32_t *rows;
    int64_t cap;
    kvs_sched_counts st; /* every step is a full step */
} sched_none;

static kvs_status none_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    sched_none *s = self;
    int64_t need = v->block_end - v->block_start;
    if (need > s->cap) {
        int32_t *r = realloc(s->rows, (size_t)need * sizeof *r);
        if (!r) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule none: out of host memory");
        s->rows = r;
        s->cap = need;
    }
    int64_t n = 0;
    for (int64_t p = v->block_start; p < v->block_end; p++)
        if (v->masked[p]) s->rows[n++] = (int32_t)p;
    memset(out, 0, sizeof *out);
    out->plan.logit_rows = s->rows;
    out->plan.n_logit_rows = n;
    s->st.steps++;
    s->st.full_steps++;
    for (int l = 0; l < v->n_layers && l < s->st.n_layers; l++) {
        s->st.rows[l] += v->n_tokens;
        s->st.refreshes[l]++;
    }
    return KVS_OK;
}

static void none_stats(void *self, kvs_dlm_schedule_stats *out) { kvs_sched_counts_get(&((sched_none *)self)->st, out); }

static kvs_status none_begin(void *self, int64_t n_tokens, int n_layers) {
    (void)n_tokens;
    return kvs_sched_counts_begin(&((sched_none *)self)->st, n_layers);
}

static void none_destroy(void *self) {
    sched_none *s = self;
    if (s) {
        free(s->rows);
        kvs_sched_counts_free(&s->st);
    }
    free(s);
}

static const kvs_dlm_schedule_ops none_ops = {
    .name = "none", .cache_flags = 0, .plan = none_plan, .begin = none_begin, .stats = none_stats,
    .destroy = none_destroy,
};

kvs_status kvs_dlm_schedule_none(kvs_dlm_schedule **out) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_none: out is NULL");
    sched_none *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_none: out of host memory");
    kvs_status st = kvs_dlm_schedule_custom(out, &none_ops, s);
    if (st != KVS_OK) free(s);
    return st;
}
