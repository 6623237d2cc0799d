/* Diffusion-LM cache schedules: Fast-dLLM prefix/dual, dKV-Cache delayed, Elastic-Cache.
 * Each is a plan producer (which rows run at which layers, which statistics) and a feedback
 * consumer; see schedule.h for the methods and their sources. Pure host logic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_util.h"

/* ---- prefix / dual / delayed: one row set for every layer of a step -------------------------- */

enum { BLK_PREFIX, BLK_DUAL, BLK_DELAYED };

typedef struct sched_block {
    int kind;
    int reload;
    int L;
    kvs_ibuf rows, logits;
    kvs_layer_plan *layers; /* [L] */
    uint8_t *mark;          /* [n] scratch */
    int64_t n;
    kvs_sched_counts st;
} sched_block;

static kvs_status block_begin(void *self, int64_t n_tokens, int n_layers) {
    sched_block *s = self;
    if (n_layers < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "schedule: %d layers (want >= 1)", n_layers);
    free(s->layers);
    free(s->mark);
    s->layers = calloc((size_t)n_layers, sizeof *s->layers);
    s->mark = calloc((size_t)n_tokens, 1);
    if (!s->layers || !s->mark) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule: out of host memory");
    s->L = n_layers;
    s->n = n_tokens;
    KVS_TRY(kvs_sched_counts_begin(&s->st, n_layers));
    return KVS_OK;
}

static int block_full_step(const sched_block *s, int i) {
    if (s->kind == BLK_DELAYED) return i == 0 || i == 1 || i % s->reload == 0;
    return i == 0;
}

static kvs_status block_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    sched_block *s = self;
    if (!s->layers || s->L != v->n_layers) KVS_TRY(block_begin(s, v->n_tokens, v->n_layers));
    if (s->n != v->n_tokens) { /* block-causal decoding: the sequence grows by a block; counts go on */
        uint8_t *mark = realloc(s->mark, (size_t)v->n_tokens);
        if (!mark) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule: out of host memory");
        s->mark = mark;
        s->n = v->n_tokens;
    }
    memset(out, 0, sizeof *out);
    KVS_TRY(kvs_sched_block_masked(v, &s->logits));
    out->plan.logit_rows = s->logits.p;
    out->plan.n_logit_rows = s->logits.n;
    s->st.steps++;
    /* block-causal (kvs_dlm_view.block_causal): rows before the previous block never change again,
     * so prefix's refresh at a block's first step recomputes only the previous block (its last
     * commit is not in its K/V yet) and the block; exact, as the rows it skips see no later row */
    int64_t bc_from = v->block_causal && s->kind == BLK_PREFIX && v->step_in_block == 0 && v->block > 0
                          ? v->block_start - (v->block_end - v->block_start)
                          : -1;
    if (bc_from < 0 && block_full_step(s, v->step_in_block)) {
        s->st.full_steps++;
        for (int l = 0; l < s->L; l++) {
            s->st.rows[l] += v->n_tokens;
            s->st.refreshes[l]++;
        }
        return KVS_OK; /* layers NULL: every row at every layer */
    }
    s->rows.n = 0;
    KVS_TRY(kvs_ibuf_reserve(&s->rows, v->n_tokens));
    if (bc_from >= 0) {
        for (int64_t p = bc_from; p < v->block_end; p++) s->rows.p[s->rows.n++] = (int32_t)p;
    } else if (s->kind == BLK_PREFIX || s->kind == BLK_DUAL) {
        int64_t end = s->kind == BLK_PREFIX ? v->n_tokens : v->block_end;
        /* shifted logits (Dream): the block's first position is predicted from the row before it */
        int64_t start = v->logit_shift && v->block_start > 0 ? v->block_start - 1 : v->block_start;
        for (int64_t p = start; p < end; p++) s->rows.p[s->rows.n++] = (int32_t)p;
    } else {
        /* masked rows + rows decoded by the previous step (their K/V move once more); shifted
         * logits: also the row before each masked position of the block */
        memset(s->mark, 0, (size_t)v->n_tokens);
        for (int64_t i = 0; i < v->n_decoded_prev; i++) s->mark[v->decoded_prev[i]] = 1;
        for (int64_t p = v->block_start; v->logit_shift && p < v->block_end; p++)
            if (v->masked[p] && p > 0) s->mark[p - 1] = 1;
        for (int64_t p = 0; p < v->n_tokens; p++)
            if (v->masked[p] || s->mark[p]) s->rows.p[s->rows.n++] = (int32_t)p;
    }
    memset(s->layers, 0, (size_t)s->L * sizeof *s->layers);
    s->layers[0].rows = s->rows.p;
    s->layers[0].n_rows = s->rows.n;
    out->plan.layers = s->layers;
    for (int l = 0; l < s->L; l++) s->st.rows[l] += s->rows.n;
    return KVS_OK;
}

static void block_stats(void *self, kvs_dlm_schedule_stats *out) { kvs_sched_counts_get(&((sched_block *)self)->st, out); }

static void block_destroy(void *self) {
    sched_block *s = self;
    if (!s) return;
    kvs_ibuf_free(&s->rows);
    kvs_ibuf_free(&s->logits);
    free(s->layers);
    free(s->mark);
    kvs_sched_counts_free(&s->st);
    free(s);
}

static const kvs_dlm_schedule_ops prefix_ops = {
    .name = "prefix", .plan = block_plan, .begin = block_begin, .destroy = block_destroy, .stats = block_stats};
static const kvs_dlm_schedule_ops dual_ops = {
    .name = "dual", .plan = block_plan, .begin = block_begin, .destroy = block_destroy, .stats = block_stats};
static const kvs_dlm_schedule_ops delayed_ops = {
    .name = "delayed", .plan = block_plan, .begin = block_begin, .destroy = block_destroy, .stats = block_stats};

static kvs_status block_new(kvs_dlm_schedule **out, int kind, int reload, const kvs_dlm_schedule_ops *ops) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_%s: out is NULL", ops->name);
    *out = NULL;
    if (reload < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_delayed: reload %d < 1", reload);
    sched_block *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_%s: out of host memory", ops->name);
    s->kind = kind;
    s->reload = reload;
    kvs_status st = kvs_dlm_schedule_custom(out, ops, s);
    if (st != KVS_OK) block_destroy(s);
    return st;
}

kvs_status kvs_dlm_schedule_prefix(kvs_dlm_schedule **out) { return block_new(out, BLK_PREFIX, 1, &prefix_ops); }
kvs_status kvs_dlm_schedule_dual(kvs_dlm_schedule **out) { return block_new(out, BLK_DUAL, 1, &dual_ops); }
kvs_status kvs_dlm_schedule_delayed(kvs_dlm_schedule **out, int reload) {
    return block_new(out, BLK_DELAYED, reload, &delayed_ops);
}

/* ---- Elastic-Cache ---------------------------------------------------------------------------- */

kvs_elastic_params kvs_elastic_params_default(void) {
    kvs_elastic_params p = {.gamma = 0.9f, .window = 16, .track = 1, .sim = KVS_ELASTIC_SIM_ROWS, .block_refresh = 1};
    return p;
}

typedef struct sched_elastic {
    kvs_elastic_params p;
    int L, nh, nkvh;
    int64_t n;
    /* this step */
    int full;               /* every row at every layer */
    int refresh_from;       /* first layer that recomputed every row (L: none) */
    kvs_ibuf Q;             /* queried positions (sorted) */
    kvs_ibuf W;             /* window positions */
    kvs_ibuf wq;            /* W's indices within Q */
    kvs_ibuf pq;            /* probe indices within Q (queried, not masked) */
    kvs_ibuf ppos;          /* their positions */
    kvs_ibuf all;           /* identity [n] */
    kvs_ibuf *rprobe;       /* [L] probe positions of the all-rows plans */
    kvs_layer_plan *reuse;  /* [L] */
    kvs_layer_plan *refresh;/* [L] */
    uint8_t *mark;          /* [n] */
    double *sim;            /* [L] last similarity per layer (NAN: not tested) */
    /* tracking: T (sorted), previous rows prev[(l*|T| + k)][nh][n] with ok flags */
    kvs_ibuf T;
    float *prev;
    uint8_t *prev_ok;
    int64_t prev_cap;
    float *mass;            /* [L][n] window attention mass of the last step (refresh probes) */
    int have_mass;
    kvs_sched_counts st;
} sched_elastic;

static void elastic_free_buffers(sched_elastic *s) {
    kvs_ibuf *bufs[] = {&s->Q, &s->W, &s->wq, &s->pq, &s->ppos, &s->all, &s->T};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) kvs_ibuf_free(bufs[i]);
    if (s->rprobe)
        for (int l = 0; l < s->L; l++) kvs_ibuf_free(&s->rprobe[l]);
    free(s->rprobe);
    free(s->reuse);
    free(s->refresh);
    free(s->mark);
    free(s->sim);
    free(s->prev);
    free(s->prev_ok);
    free(s->mass);
    s->rprobe = NULL;
    s->reuse = s->refresh = NULL;
    s->mark = NULL;
    s->sim = NULL;
    s->prev = NULL;
    s->prev_ok = NULL;
    s->mass = NULL;
    s->prev_cap = 0;
}

static kvs_status elastic_begin(void *self, int64_t n_tokens, int n_layers) {
    sched_elastic *s = self;
    if (n_layers < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "schedule elastic: %d layers (want >= 1)", n_layers);
    elastic_free_buffers(s);
    s->L = n_layers;
    s->n = n_tokens;
    s->rprobe = calloc((size_t)n_layers, sizeof *s->rprobe);
    s->reuse = calloc((size_t)n_layers, sizeof *s->reuse);
    s->refresh = calloc((size_t)n_layers, sizeof *s->refresh);
    s->mark = calloc((size_t)n_tokens, 1);
    s->sim = calloc((size_t)n_layers, sizeof *s->sim);
    s->mass = calloc((size_t)n_layers * (size_t)n_tokens, sizeof *s->mass);
    if (!s->rprobe || !s->reuse || !s->refresh || !s->mark || !s->sim || !s->mass)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule elastic: out of host memory");
    KVS_TRY(kvs_ibuf_reserve(&s->all, n_tokens));
    for (int64_t i = 0; i < n_tokens; i++) s->all.p[i] = (int32_t)i;
    s->all.n = n_tokens;
    s->have_mass = 0;
    s->T.n = 0;
    KVS_TRY(kvs_sched_counts_begin(&s->st, n_layers));
    return KVS_OK;
}

/* Cosine similarity of a tracked token's attention now vs its previous row, both [nh][n]. */
static void elastic_similarity(const sched_elastic *s, const float *now, const float *prev, int64_t n, double *sum,
                               int64_t *count) {
    const double eps = 1e-8;
    if (s->p.sim == KVS_ELASTIC_SIM_ROWS) {
        /* each head's three sums run over j in order; up to 8 heads side by side (independent
         * chains: the loop was bound by the latency of one head's additions) */
        for (int g0 = 0; g0 < s->nh; g0 += 8) {
            const int G = s->nh - g0 < 8 ? s->nh - g0 : 8;
            double dot[8] = {0}, na[8] = {0}, nb[8] = {0};
            for (int64_t j = 0; j < n; j++)
                for (int g = 0; g < G; g++) {
                    const double a = now[(int64_t)(g0 + g) * n + j], b = prev[(int64_t)(g0 + g) * n + j];
                    dot[g] += a * b;
                    na[g] += a * a;
                    nb[g] += b * b;
                }
            for (int g = 0; g < G; g++) {
                *sum += dot[g] / (fmax(sqrt(na[g]), eps) * fmax(sqrt(nb[g]), eps));
                (*count)++;
            }
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            double dot = 0, na = 0, nb = 0;
            for (int g = 0; g < s->nh; g++) {
                double a = now[(int64_t)g * n + j], b = prev[(int64_t)g * n + j];
                dot += a * b;
                na += a * a;
                nb += b * b;
            }
            *sum += dot / (fmax(sqrt(na), eps) * fmax(sqrt(nb), eps));
            (*count)++;
        }
    }
}

/* The drift test after layer l's attention (reuse mode): NULL = keep reusing. */
static const kvs_layer_plan *elastic_hook(void *user, int l, const kvs_layer_stats *st) {
    sched_elastic *s = user;
    s->sim[l] = NAN;
    if (!st || !st->probs || st->n_kv != s->n || !s->prev) return NULL;
    double sum = 0;
    int64_t count = 0;
    for (int64_t k = 0; k < s->T.n; k++) {
        if (!s->prev_ok[(int64_t)l * s->T.n + k]) continue;
        int64_t at = kvs_ibuf_find(s->ppos.p, s->ppos.n, s->T.p[k]);
        if (at < 0) continue;
        const float *now = st->probs + at * s->nh * s->n;
        const float *prev = s->prev + ((int64_t)l * s->T.n + k) * s->nh * s->n;
        elastic_similarity(s, now, prev, s->n, &sum, &count);
    }
    if (count == 0) return NULL;
    s->sim[l] = sum / (double)count;
    if (s->sim[l] < (double)s->p.gamma && l + 1 < s->L) {
        s->refresh_from = l + 1;
        return &s->refresh[l + 1];
    }
    return NULL;
}

static kvs_status elastic_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    sched_elastic *s = self;
    if (!s->reuse || s->L != v->n_layers || s->n != v->n_tokens) KVS_TRY(elastic_begin(s, v->n_tokens, v->n_layers));
    s->nh = v->n_heads;
    s->nkvh = v->n_kv_heads;
    if (s->nh < 1 || s->nkvh < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "schedule elastic: the view needs n_heads and n_kv_heads");
    memset(out, 0, sizeof *out);
    int64_t n = v->n_tokens;
    /* window: the first `window` masked positions of the block */
    s->W.n = 0;
    KVS_TRY(kvs_ibuf_reserve(&s->W, s->p.window));
    for (int64_t p = v->block_start; p < v->block_end && s->W.n < s->p.window; p++)
        if (v->masked[p]) s->W.p[s->W.n++] = (int32_t)p;
    out->plan.logit_rows = s->W.p;
    out->plan.n_logit_rows = s->W.n;
    out->candidates = s->W.p;
    out->n_candidates = s->W.n;
    s->st.steps++;
    s->refresh_from = s->L;
    for (int l = 0; l < s->L; l++) s->sim[l] = NAN;
    /* a full step: the decode's first step (the reference's only one), every step at gamma 1, and
     * with block_refresh the first step of every block (the layers below the first drift never
     * recompute the unqueried rows otherwise; see schedule.h) */
    s->full = v->step == 0 || s->p.gamma >= 1.0f || (s->p.block_refresh && v->step_in_block == 0);
    if (s->p.gamma >= 1.0f) return KVS_OK; /* every row, every step; no statistics needed */

    /* the all-rows plans: every row, key mass of the window, probes of the unmasked rows whose
     * attention rows the next drift test can need. Only before any key mass exists (the decode's
     * first step) is that every unmasked row; afterwards full steps probe the same likely set as a
     * refresh (probing all n rows there cost an [n][n_heads][n] probability matrix per layer:
     * 21 MB per layer at n = 1180, the largest item of a block-refresh step) */
    for (int l = 0; l < s->L; l++) {
        kvs_ibuf *pr = &s->rprobe[l];
        pr->n = 0;
        KVS_TRY(kvs_ibuf_reserve(pr, n));
        if (!s->have_mass) {
            for (int64_t p = 0; p < n; p++)
                if (!v->masked[p]) pr->p[pr->n++] = (int32_t)p;
        } else {
            /* tracked, just decoded, and the 4*track unmasked rows the window attended most at
             * the last step: the likely tracked tokens of the next step */
            memset(s->mark, 0, (size_t)n);
            for (int64_t k = 0; k < s->T.n; k++) s->mark[s->T.p[k]] = 1;
            for (int64_t i = 0; i < v->n_decoded_prev; i++) s->mark[v->decoded_prev[i]] = 1;
            const float *ms = s->mass + (int64_t)l * n;
            for (int c = 0; c < 4 * s->p.track; c++) {
                int64_t best = -1;
                for (int64_t p = 0; p < n; p++)
                    if (!v->masked[p] && !s->mark[p] && (best < 0 || ms[p] > ms[best])) best = p;
                if (best < 0) break;
                s->mark[best] = 1;
            }
            for (int64_t p = 0; p < n; p++)
                if (s->mark[p] && !v->masked[p]) pr->p[pr->n++] = (int32_t)p;
        }
        s->refresh[l] = (kvs_layer_plan){.rows = s->all.p, .n_rows = n, .stat_rows = s->W.p, .n_stat_rows = s->W.n,
                                         .probe_rows = pr->p, .n_probe = pr->n};
    }
    if (s->full) {
        out->plan.layers = s->refresh;
        return KVS_OK;
    }
    /* reuse: Q = tracked U decoded by the previous step U window */
    memset(s->mark, 0, (size_t)n);
    for (int64_t k = 0; k < s->T.n; k++) s->mark[s->T.p[k]] = 1;
    for (int64_t i = 0; i < v->n_decoded_prev; i++) s->mark[v->decoded_prev[i]] = 1;
    for (int64_t i = 0; i < s->W.n; i++) s->mark[s->W.p[i]] = 1;
    /* shifted logits (Dream): the window's positions are predicted from the rows before them */
    for (int64_t i = 0; v->logit_shift && i < s->W.n; i++)
        if (s->W.p[i] > 0) s->mark[s->W.p[i] - 1] = 1;
    s->Q.n = s->wq.n = s->pq.n = s->ppos.n = 0;
    KVS_TRY(kvs_ibuf_reserve(&s->Q, n));
    KVS_TRY(kvs_ibuf_reserve(&s->wq, n));
    KVS_TRY(kvs_ibuf_reserve(&s->pq, n));
    KVS_TRY(kvs_ibuf_reserve(&s->ppos, n));
    for (int64_t p = 0; p < n; p++) {
        if (!s->mark[p]) continue;
        int32_t qi = (int32_t)s->Q.n;
        s->Q.p[s->Q.n++] = (int32_t)p;
        if (v->masked[p]) {
            if (kvs_ibuf_find(s->W.p, s->W.n, (int32_t)p) >= 0) s->wq.p[s->wq.n++] = qi;
        } else {
            s->pq.p[s->pq.n++] = qi;
            s->ppos.p[s->ppos.n++] = (int32_t)p;
        }
    }
    for (int l = 0; l < s->L; l++)
        s->reuse[l] = (kvs_layer_plan){.rows = s->Q.p, .n_rows = s->Q.n, .stat_rows = s->wq.p, .n_stat_rows = s->wq.n,
                                       .probe_rows = s->pq.p, .n_probe = s->pq.n, .hook = elastic_hook, .hook_user = s};
    out->plan.layers = s->reuse;
    return KVS_OK;
}

static kvs_status elastic_feedback(void *self, const kvs_dlm_view *v, const kvs_step_result *r) {
    sched_elastic *s = self;
    int64_t n = s->n;
    int full = s->full;
    for (int l = 0; l < s->L; l++) {
        int all = full || l >= s->refresh_from;
        s->st.rows[l] += all ? n : s->Q.n;
        if (all) s->st.refreshes[l]++;
    }
    if (full) s->st.full_steps++;
    if (s->p.gamma >= 1.0f) return KVS_OK;
    if (!r->layers) return kvs_error(KVS_ERR_STATE, "schedule elastic: the step result has no layer statistics");
    /* the next tracked set: per layer the top `track` unmasked keys by window attention mass */
    memset(s->mark, 0, (size_t)n);
    for (int l = 0; l < s->L; l++) {
        const kvs_layer_stats *ls = &r->layers[l];
        if (!ls->key_mass || ls->n_kv != n)
            return kvs_error(KVS_ERR_STATE, "schedule elastic: layer %d returned no key mass over %lld keys", l, (long long)n);
        float *ms = s->mass + (int64_t)l * n;
        for (int64_t j = 0; j < n; j++) {
            double a = 0;
            for (int h = 0; h < s->nkvh; h++) a += ls->key_mass[(int64_t)h * n + j];
            ms[j] = v->masked[j] ? 0.0f : (float)a;
        }
        /* top `track` of this layer (mark bit 1: taken by this layer, 2: tracked by any layer) */
        for (int c = 0; c < s->p.track; c++) {
            int64_t best = -1;
            for (int64_t j = 0; j < n; j++)
                if (!v->masked[j] && !(s->mark[j] & 1) && (best < 0 || ms[j] > ms[best])) best = j;
            if (best < 0) break;
            s->mark[best] |= 3;
        }
        for (int64_t j = 0; j < n; j++) s->mark[j] &= 2;
    }
    s->have_mass = 1;
    kvs_ibuf T2 = {0};
    for (int64_t j = 0; j < n; j++)
        if (s->mark[j] == 2) {
            kvs_status st = kvs_ibuf_push(&T2, (int32_t)j);
            if (st != KVS_OK) {
                kvs_ibuf_free(&T2);
                return st;
            }
        }
    /* keep the new tracked tokens' rows of this step for the next step's drift test */
    int64_t row = (int64_t)s->nh * n, need = (int64_t)s->L * (T2.n > 0 ? T2.n : 1);
    if (need > s->prev_cap) {
        float *pv = realloc(s->prev, (size_t)(need * row) * sizeof *pv);
        uint8_t *ok = realloc(s->prev_ok, (size_t)need);
        if (pv) s->prev = pv;
        if (ok) s->prev_ok = ok;
        if (!pv || !ok) {
            kvs_ibuf_free(&T2);
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "schedule elastic: out of host memory");
        }
        s->prev_cap = need;
    }
    for (int l = 0; l < s->L; l++) {
        int all = full || l >= s->refresh_from;
        const kvs_ibuf *pp = all ? &s->rprobe[l] : &s->ppos;
        const float *probs = r->layers[l].probs;
        for (int64_t k = 0; k < T2.n; k++) {
            int64_t at = probs ? kvs_ibuf_find(pp->p, pp->n, T2.p[k]) : -1;
            s->prev_ok[(int64_t)l * T2.n + k] = at >= 0;
            if (at >= 0)
                memcpy(s->prev + ((int64_t)l * T2.n + k) * row, probs + at * row, (size_t)row * sizeof(float));
        }
    }
    kvs_ibuf_free(&s->T);
    s->T = T2;
    return KVS_OK;
}

static void elastic_stats(void *self, kvs_dlm_schedule_stats *out) { kvs_sched_counts_get(&((sched_elastic *)self)->st, out); }

static void elastic_destroy(void *self) {
    sched_elastic *s = self;
    if (!s) return;
    elastic_free_buffers(s);
    kvs_sched_counts_free(&s->st);
    free(s);
}

static const kvs_dlm_schedule_ops elastic_ops = {
    .name = "elastic",
    .cache_flags = KVS_CACHE_KEEP_X,
    .plan = elastic_plan,
    .feedback = elastic_feedback,
    .begin = elastic_begin,
    .destroy = elastic_destroy,
    .stats = elastic_stats,
};

kvs_status kvs_dlm_schedule_elastic(kvs_dlm_schedule **out, const kvs_elastic_params *pp) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_elastic: out is NULL");
    *out = NULL;
    kvs_elastic_params p = pp ? *pp : kvs_elastic_params_default();
    /* one message per field: the first one out of range, named alone */
    const char *op = "kvs_dlm_schedule_elastic";
    if (!(p.gamma >= 0.0f && p.gamma <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: gamma %g outside [0, 1]", op, (double)p.gamma);
    if (p.window < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: window %d (want >= 1)", op, p.window);
    if (p.track < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: track %d (want >= 1)", op, p.track);
    if (p.sim != KVS_ELASTIC_SIM_HEADS && p.sim != KVS_ELASTIC_SIM_ROWS)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: sim %d (want KVS_ELASTIC_SIM_ROWS or KVS_ELASTIC_SIM_HEADS)", op, (int)p.sim);
    if (p.block_refresh != 0 && p.block_refresh != 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: block_refresh %d (want 0 or 1)", op, p.block_refresh);
    sched_elastic *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_dlm_schedule_elastic: out of host memory");
    s->p = p;
    kvs_status st = kvs_dlm_schedule_custom(out, &elastic_ops, s);
    if (st != KVS_OK) elastic_destroy(s);
    return st;
}

/* ---- by name ---------------------------------------------------------------------------------- */

kvs_status kvs_dlm_schedule_from_name(kvs_dlm_schedule **out, const char *name, int reload, const kvs_elastic_params *ep) {
    if (!out || !name) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_dlm_schedule_from_name: NULL argument");
    *out = NULL;
    if (!strcmp(name, "none")) return kvs_dlm_schedule_none(out);
    if (!strcmp(name, "prefix")) return kvs_dlm_schedule_prefix(out);
    if (!strcmp(name, "dual")) return kvs_dlm_schedule_dual(out);
    if (!strcmp(name, "delayed")) return kvs_dlm_schedule_delayed(out, reload);
    if (!strcmp(name, "elastic")) return kvs_dlm_schedule_elastic(out, ep);
    if (!strcmp(name, "d2cache")) return kvs_dlm_schedule_d2cache(out, NULL);
    if (!strcmp(name, "spa")) return kvs_dlm_schedule_spa(out, NULL);
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "unknown cache schedule '%s' (none, prefix, dual, delayed, elastic, d2cache, spa)", name);
}
