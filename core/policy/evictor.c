/* The evictor: plans the attention statistics each decode step collects for a policy, keeps them
 * per cache row on the host, and evicts on the device when a budget trigger fires (the eviction
 * itself: evictor_evict.c; the shared state: evictor_internal.h). See policy.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evictor_internal.h"

kvs_evict_params kvs_evict_params_default(void) {
    kvs_evict_params p = {.policy = NULL, .budget = 1.0, .scope = KVS_SCOPE_HEAD, .buffer = 0, .head_cap = 2.0,
                          .budget_tokens = 0, .rerotate = 0,
                          .think_ratio = 0.0, .think_window = 32};
    return p;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void kvs_evictor_destroy(kvs_evictor **ep) {
    if (!ep || !*ep) return;
    kvs_evictor *e = *ep;
    if (e->ls)
        for (int l = 0; l < e->L; l++) {
            free(e->ls[l].acc);
            free(e->ls[l].ring);
            free(e->ls[l].ring_qpos);
            free(e->ls[l].q_sq);
        }
    free(e->ls);
    free(e->probe_rows);
    free(e->scores); free(e->win); free(e->keys); free(e->vals);
    free(e->keep); free(e->n_keep); free(e->idx); free(e->cnt); free(e->mcap); free(e->fixed);
    free(e);
    *ep = NULL;
}

kvs_status kvs_evictor_create(kvs_evictor **out, const kvs_evict_params *pp, const kvs_model_hparams *hp, int64_t seq_len) {
    const char *op = "kvs_evictor_create";
    if (!out || !hp) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *out = NULL;
    kvs_evict_params p = pp ? *pp : kvs_evict_params_default();
    if (hp->n_layers < 1 || hp->n_kv_heads < 1 || hp->n_heads < 1 || hp->n_heads % hp->n_kv_heads || hp->head_dim < 1 || seq_len < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: bad model shape (%d layers, %d heads, %d kv heads) or seq_len %lld", op,
                         hp->n_layers, hp->n_heads, hp->n_kv_heads, (long long)seq_len);
    if (!(p.think_ratio >= 0.0 && p.think_ratio < 1.0) || p.think_window < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: think_ratio %g must be in [0, 1) and think_window %lld >= 1", op,
                         p.think_ratio, (long long)p.think_window);
    if (p.budget_tokens < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: budget_tokens %lld must be >= 0 (0: use budget)", op,
                         (long long)p.budget_tokens);
    if (!(p.budget > 0.0) || (p.budget > 1.0 && p.budget != floor(p.budget)) || p.buffer < 0 || !(p.head_cap >= 1.0) ||
        (int)p.scope < 0 || p.scope > KVS_SCOPE_GLOBAL)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: budget %g must be a fraction in (0, 1] or a whole token count; buffer %lld >= 0; head_cap %g >= 1; scope %d",
                         op, p.budget, (long long)p.buffer, p.head_cap, (int)p.scope);
    kvs_evictor *e = calloc(1, sizeof *e);
    if (!e) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    e->p = p;
    e->pol = p.policy;
    e->L = hp->n_layers;
    e->H = hp->n_kv_heads;
    e->NH = hp->n_heads;
    e->hd = hp->head_dim;
    e->rope = kvs_rope_params_default();
    e->rope.mode = hp->rope_mode;
    if (hp->rope_base > 0.0f) e->rope.theta_base = hp->rope_base;
    e->rope.n_rot = hp->rope_dim;
    e->S = seq_len;
    e->B = p.budget_tokens > 0 ? p.budget_tokens
           : p.budget <= 1.0   ? (int64_t)llround(p.budget * (double)seq_len)
                               : (int64_t)p.budget;
    if (e->B < 1) e->B = 1;
    e->buffer = p.buffer > 0 ? p.buffer : (e->B / 8 < 1 ? 1 : (e->B / 8 > 128 ? 128 : e->B / 8));
    e->scope = p.scope;
    if (e->pol && e->pol->alpha > 0.0f && e->scope == KVS_SCOPE_HEAD) e->scope = KVS_SCOPE_LAYER; /* Ada-KV pools heads */
    e->scope = kvs_policy_effective_scope(e->pol, e->scope); /* PrefixKV: global */
    e->noop = !e->pol || e->B >= seq_len;
    e->n_new = -1;
    e->ls = calloc((size_t)e->L, sizeof *e->ls);
    if (!e->ls) {
        kvs_evictor_destroy(&e);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    int64_t *bl = malloc((size_t)e->L * sizeof *bl);
    if (!bl) {
        kvs_evictor_destroy(&e);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    kvs_status s = KVS_OK;
    if (e->pol && e->pol->beta > 0 && e->B < seq_len) {
        s = kvs_pyramid_budgets(e->L, e->B, e->pol->beta, seq_len, bl);
    } else {
        for (int l = 0; l < e->L; l++) bl[l] = e->B;
    }
    for (int l = 0; l < e->L && s == KVS_OK; l++) {
        e->ls[l].budget = bl[l];
        int64_t hc = (int64_t)floor(p.head_cap * (double)e->B);
        e->ls[l].head_cap = hc < bl[l] ? bl[l] : (hc > seq_len ? seq_len : hc);
        e->ls[l].needs = kvs_policy_get_needs(e->pol, l, bl[l]);
        /* rows the policy always keeps (sinks, a given recent window) must leave room below the
         * budget, or every eviction drops the newest tokens */
        int64_t prot = e->pol ? e->pol->protect_sink + e->pol->protect_window : 0;
        if (s == KVS_OK && !e->noop && prot >= bl[l])
            s = kvs_error(KVS_ERR_INVALID_ARGUMENT,
                          "%s: policy '%s' always keeps sink %lld + window %lld rows, at least the budget of %lld rows per kv "
                          "head (layer %d): every eviction would drop the newest tokens; keep sink + window below the budget",
                          op, e->pol->name, (long long)e->pol->protect_sink, (long long)e->pol->protect_window,
                          (long long)bl[l], l);
    }
    free(bl);
    if (s != KVS_OK) {
        kvs_evictor_destroy(&e);
        return s;
    }
    *out = e;
    return KVS_OK;
}

int64_t kvs_evictor_budget(const kvs_evictor *e, int layer) {
    return e && layer >= 0 && layer < e->L ? e->ls[layer].budget : -1;
}

int64_t kvs_evictor_buffer(const kvs_evictor *e) { return e ? e->buffer : -1; }

int kvs_evictor_is_noop(const kvs_evictor *e) { return !e || e->noop; }

kvs_evict_stats kvs_evictor_get_stats(const kvs_evictor *e) {
    kvs_evict_stats z = {0, 0, 0, 0, 0};
    return e ? e->st : z;
}

int64_t kvs_evictor_capacity(const kvs_evictor *e, int64_t max_step) {
    if (!e) return -1;
    if (e->noop) return e->S > max_step ? e->S : max_step;
    int64_t need = 0;
    for (int l = 0; l < e->L; l++) {
        int64_t keep = e->scope == KVS_SCOPE_HEAD ? e->ls[l].budget : e->ls[l].head_cap;
        if (keep + e->buffer > need) need = keep + e->buffer;
    }
    if (need > e->S) need = e->S;
    return need > max_step ? need : max_step;
}

kvs_status kvs_evictor_begin(kvs_evictor *e, kvs_kv_cache *c) {
    const char *op = "kvs_evictor_begin";
    if (!e || !c) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    const kvs_cache_params *cp = kvs_cache_get_params(c);
    if (cp->n_layers != e->L || cp->n_kv_heads != e->H || cp->head_dim != e->hd)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: cache (%d layers, %d kv heads, head_dim %d) does not fit the model", op,
                         cp->n_layers, cp->n_kv_heads, cp->head_dim);
    if (!e->noop && cp->mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: eviction needs an APPEND cache", op);
    if (!e->noop && e->p.think_ratio > 0.0) KVS_TRY(kvs_think_check_cache(cp));
    if (!e->noop && e->p.think_ratio > 0.0 && !e->p.think_in_place && e->pol->latent)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: ThinK's pruned keys (think_ratio > 0) are not merged with the %s policy's "
                         "latent memory (its unnormalised attention reads one key segment); think_in_place = 1 zeroes "
                         "the channels in place instead", op, kvs_policy_name(e->pol));
    /* ThinK's pruned layout: the full-width key tail holds the rows appended between two evictions,
     * the buffer (a longer step grows it, kvs_cache_prune_keys) */
    if (!e->noop && e->p.think_ratio > 0.0 && !e->p.think_in_place) KVS_TRY(kvs_cache_set_tail_rows(c, e->buffer));
    e->c = c;
    e->cap = cp->capacity;
    e->n_new = -1;
    memset(&e->st, 0, sizeof e->st);
    if (e->noop) return KVS_OK;
    size_t LHC = (size_t)e->L * e->H * e->cap, HC = (size_t)e->H * e->cap;
    for (int l = 0; l < e->L; l++) {
        layer_state *s = &e->ls[l];
        unsigned f = s->needs.flags;
        if (f & KVS_POLICY_NEED_ACC_MASS) KVS_TRY(xalloc((void **)&s->acc, HC * sizeof(float)));
        if (e->p.think_ratio > 0.0) KVS_TRY(xalloc((void **)&s->q_sq, (size_t)e->H * e->hd * sizeof(double)));
        if (f & KVS_POLICY_NEED_WINDOW_MASS) {
            KVS_TRY(xalloc((void **)&s->ring, (size_t)s->needs.window * HC * sizeof(float)));
            KVS_TRY(xalloc((void **)&s->ring_qpos, (size_t)s->needs.window * sizeof(int32_t)));
            for (int64_t i = 0; i < s->needs.window; i++) s->ring_qpos[i] = -1;
        }
    }
    KVS_TRY(xalloc((void **)&e->scores, LHC * sizeof(float)));
    KVS_TRY(xalloc((void **)&e->win, HC * sizeof(float)));
    KVS_TRY(xalloc((void **)&e->keep, LHC * sizeof(int32_t)));
    KVS_TRY(xalloc((void **)&e->idx, LHC * sizeof(int32_t)));
    KVS_TRY(xalloc((void **)&e->n_keep, (size_t)e->L * e->H * sizeof(int64_t)));
    KVS_TRY(xalloc((void **)&e->cnt, (size_t)e->L * e->H * sizeof(int64_t)));
    KVS_TRY(xalloc((void **)&e->mcap, (size_t)e->L * e->H * sizeof(int64_t)));
    KVS_TRY(xalloc((void **)&e->fixed, (size_t)e->L * e->H));
    if (e->pol->ops->begin) {
        kvs_policy_shape sh = {e->L, e->H, e->NH, e->hd, e->cap};
        KVS_TRY(e->pol->ops->begin(e->pol->self, &sh));
    }
    return KVS_OK;
}

/* ---- triggers --------------------------------------------------------------------------------- */

/* Rows of the pool that contains `layer` (all heads; all layers for global), plus `extra` per head. */
static void pool_measure(const kvs_evictor *e, int layer, int64_t extra, int64_t *rows, int64_t *threshold, int64_t *per_step) {
    int64_t m = 0, t = 0;
    if (e->scope == KVS_SCOPE_HEAD) {
        for (int h = 0; h < e->H; h++) {
            int64_t n = kvs_cache_len(e->c, layer, h) + extra;
            if (n > m) m = n;
        }
        t = e->ls[layer].budget + e->buffer;
        *per_step = 1;
    } else if (e->scope == KVS_SCOPE_LAYER) {
        for (int h = 0; h < e->H; h++) m += kvs_cache_len(e->c, layer, h) + extra;
        t = (int64_t)e->H * (e->ls[layer].budget + e->buffer);
        *per_step = e->H;
    } else {
        for (int l = 0; l < e->L; l++) {
            for (int h = 0; h < e->H; h++) m += kvs_cache_len(e->c, l, h) + extra;
            t += (int64_t)e->H * (e->ls[l].budget + e->buffer);
        }
        *per_step = (int64_t)e->L * e->H;
    }
    *rows = m;
    *threshold = t;
}

/* Single-token steps after a step that appends n_new tokens until the pool of `layer` triggers
 * (0: that step triggers). */
static int64_t steps_to_trigger(const kvs_evictor *e, int layer, int64_t n_new) {
    int64_t m, t, ps;
    pool_measure(e, layer, n_new, &m, &t, &ps);
    int64_t d = m >= t ? 0 : ceil_div(t - m, ps);
    /* a pooled scope also evicts before any head of the pool outgrows the cache (heads are
     * ragged there, and a head held at its cap may reach the capacity before the pool's total
     * reaches the trigger) */
    int l0 = e->scope == KVS_SCOPE_GLOBAL ? 0 : layer, l1 = e->scope == KVS_SCOPE_GLOBAL ? e->L : layer + 1;
    for (int l = l0; l < l1 && d > 0; l++)
        for (int h = 0; h < e->H; h++) {
            int64_t room = e->cap - (kvs_cache_len(e->c, l, h) + n_new);
            if (room < d) d = room < 0 ? 0 : room;
        }
    return d;
}

kvs_status kvs_evictor_plan(kvs_evictor *e, int64_t n_new, kvs_layer_plan *layers, int *any) {
    const char *op = "kvs_evictor_plan";
    if (!e || !layers || !any || n_new < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or n_new < 1", op);
    if (!e->c) return kvs_error(KVS_ERR_STATE, "%s: kvs_evictor_begin was not called", op);
    *any = 0;
    memset(layers, 0, (size_t)e->L * sizeof *layers);
    e->n_new = n_new;
    for (int l = 0; l < e->L; l++) {
        e->ls[l].want_mass = 0;
        e->ls[l].n_probe = 0;
        e->ls[l].q_first = -1;
    }
    if (e->noop) return KVS_OK;
    int64_t maxw = 0;
    for (int l = 0; l < e->L; l++) maxw = e->ls[l].needs.window > maxw ? e->ls[l].needs.window : maxw;
    int64_t need = (int64_t)e->L * (maxw < n_new ? maxw : n_new);
    if (need > e->probe_rows_cap) {
        int32_t *q = realloc(e->probe_rows, (size_t)(need > 0 ? need : 1) * sizeof *q);
        if (!q) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        e->probe_rows = q;
        e->probe_rows_cap = need;
    }
    int64_t off = 0;
    for (int l = 0; l < e->L; l++) {
        layer_state *s = &e->ls[l];
        unsigned f = s->needs.flags;
        if (f & (KVS_POLICY_NEED_ACC_MASS | KVS_POLICY_NEED_OBSERVE)) {
            layers[l].stat_all_rows = 1;
            s->want_mass = 1;
            *any = 1;
        }
        if (f & KVS_POLICY_NEED_X) {
            layers[l].want_x = 1;
            *any = 1;
        }
        if (e->pol->latent) { /* learned indexer: evicted tokens live on in a latent memory */
            layers[l].latent = e->pol->latent;
            *any = 1;
        }
        if (f & KVS_POLICY_NEED_WINDOW_MASS) {
            int64_t W = s->needs.window, d = steps_to_trigger(e, l, n_new);
            /* query i of this step is d + (n_new - 1 - i) queries before the trigger's last */
            if (d < W) {
                int64_t first = n_new - (W - d);
                if (first < 0) first = 0;
                s->probe_first = first;
                s->n_probe = n_new - first;
                for (int64_t i = first; i < n_new; i++) e->probe_rows[off + i - first] = (int32_t)i;
                layers[l].probe_rows = e->probe_rows + off;
                layers[l].n_probe = s->n_probe;
                off += s->n_probe;
                *any = 1;
            }
        }
        if (e->p.think_ratio > 0.0) { /* ThinK: the rotated queries of the window before a trigger */
            int64_t W = e->p.think_window, d = steps_to_trigger(e, l, n_new);
            if (d < W) {
                s->q_first = n_new - (W - d) > 0 ? n_new - (W - d) : 0;
                layers[l].want_q = 1;
                *any = 1;
            }
        }
        if (s->want_mass || s->n_probe) e->st.stat_steps++;
    }
    return KVS_OK;
}

/* StreamingLLM's positions within the cache after an eviction of layer l (kvs_cache_rerotate). */
static kvs_status rerotate(kvs_evictor *e, int l) {
    int64_t n = 0;
    KVS_TRY(kvs_cache_rerotate(e->c, l, &e->rope, &n));
    e->st.rows_rerotated += n;
    return KVS_OK;
}

kvs_status kvs_evictor_update(kvs_evictor *e, kvs_kv_cache *c, const kvs_step_result *r) {
    const char *op = "kvs_evictor_update";
    if (!e || !c || !r) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (c != e->c || e->n_new < 1) return kvs_error(KVS_ERR_STATE, "%s: no planned step on this cache (begin/plan first)", op);
    int64_t n_new = e->n_new;
    e->n_new = -1;
    if (e->noop) return KVS_OK;
    size_t HC = (size_t)e->H * e->cap;
    int G = e->NH / e->H;
    int64_t len0 = kvs_cache_len(c, 0, 0);
    const int32_t *pos00 = kvs_cache_positions(c, 0, 0);
    int32_t cur_pos = len0 > 0 ? pos00[len0 - 1] : 0;
    for (int l = 0; l < e->L; l++) {
        layer_state *s = &e->ls[l];
        const kvs_layer_stats *ls = r->layers ? &r->layers[l] : NULL;
        if ((s->want_mass && (!ls || !ls->key_mass)) || (s->n_probe && (!ls || !ls->probs)))
            return kvs_error(KVS_ERR_STATE, "%s: layer %d statistics the plan asked for are missing", op, l);
        if (s->acc) {
            for (int h = 0; h < e->H; h++) {
                int64_t len = kvs_cache_len(c, l, h);
                float *a = s->acc + h * e->cap;
                for (int64_t j = len - n_new; j < len; j++)
                    if (j >= 0) a[j] = 0.0f;
                const float *km = ls->key_mass + h * ls->n_kv;
                for (int64_t j = 0; j < len && j < ls->n_kv; j++) a[j] += km[j];
            }
        }
        if (s->n_probe) {
            int64_t W = s->needs.window;
            for (int64_t i = 0; i < s->n_probe; i++) {
                int64_t row = s->probe_first + i;
                int32_t qpos = cur_pos - (int32_t)(n_new - 1 - row);
                int64_t slot = qpos % W;
                float *v = s->ring + (size_t)slot * HC;
                memset(v, 0, HC * sizeof *v);
                const float *pr = ls->probs + (size_t)i * e->NH * ls->n_kv;
                for (int h = 0; h < e->H; h++)
                    for (int g = 0; g < G; g++) {
                        const float *p = pr + (size_t)(h * G + g) * ls->n_kv;
                        for (int64_t j = 0; j < ls->n_kv; j++) v[h * e->cap + j] += p[j] / (float)G;
                    }
                s->ring_qpos[slot] = qpos;
            }
        }
        if (s->q_first >= 0) {
            if (!ls || !ls->q) return kvs_error(KVS_ERR_STATE, "%s: layer %d queries the plan asked for are missing", op, l);
            int hd = e->hd;
            for (int64_t i = s->q_first; i < ls->n_x_rows; i++)
                for (int h = 0; h < e->H; h++)
                    for (int g = 0; g < G; g++) {
                        const float *q = ls->q + ((size_t)i * e->NH + (size_t)h * G + g) * hd;
                        for (int ch = 0; ch < hd; ch++) s->q_sq[h * hd + ch] += (double)q[ch] * q[ch];
                    }
        }
        if ((s->needs.flags & KVS_POLICY_NEED_OBSERVE) && e->pol->ops->observe) {
            int64_t lens[256];
            for (int h = 0; h < e->H && h < 256; h++) lens[h] = kvs_cache_len(c, l, h);
            KVS_TRY(e->pol->ops->observe(e->pol->self, l, ls, lens, n_new));
        }
    }
    /* triggers */
    if (e->scope == KVS_SCOPE_GLOBAL) {
        if (steps_to_trigger(e, 0, 0) == 0) {
            KVS_TRY(kvs_evictor_evict_pool(e, 0, e->L, cur_pos));
            for (int l = 0; l < e->L && e->p.rerotate; l++) KVS_TRY(rerotate(e, l));
            for (int l = 0; l < e->L && e->p.think_ratio > 0.0; l++) KVS_TRY(kvs_evictor_think(e, l));
        }
    } else {
        for (int l = 0; l < e->L; l++)
            if (steps_to_trigger(e, l, 0) == 0) {
                KVS_TRY(kvs_evictor_evict_pool(e, l, l + 1, cur_pos));
                if (e->p.rerotate) KVS_TRY(rerotate(e, l));
                if (e->p.think_ratio > 0.0) KVS_TRY(kvs_evictor_think(e, l));
            }
    }
    return KVS_OK;
}
