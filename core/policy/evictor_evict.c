/* The evictor's eviction step, run when a budget trigger fires (kvs_evictor_update, evictor.c):
 * scores every cached row with the policy, keeps the top budget per kv head (or per pool for the
 * layer and global scopes) by top-k on the device, and compacts the cache and the evictor's host
 * statistics to the keep-set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evictor_internal.h"

/* ---- eviction --------------------------------------------------------------------------------- */

/* Compacts a host array [H][cap] of elem-sized entries with the keep-set of a layer. */
static void compact_rows(void *base, size_t elem, int H, int64_t cap, const int32_t *keep, const int64_t *n_keep) {
    char *b = base;
    for (int h = 0; h < H; h++) {
        char *row = b + (size_t)h * cap * elem;
        for (int64_t i = 0; i < n_keep[h]; i++) {
            int32_t r = keep[h * cap + i];
            if (r != i) memmove(row + (size_t)i * elem, row + (size_t)r * elem, elem);
        }
        /* rows past the kept ones are reused by later tokens: they start from zero */
        memset(row + (size_t)n_keep[h] * elem, 0, (size_t)(cap - n_keep[h]) * elem);
    }
}

static kvs_status score_layer(kvs_evictor *e, int l, int32_t cur_pos, float *scores) {
    layer_state *s = &e->ls[l];
    int64_t len[256];
    int64_t *lenp = e->H <= 256 ? len : malloc((size_t)e->H * sizeof *lenp);
    if (!lenp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_evictor: out of host memory");
    for (int h = 0; h < e->H; h++) lenp[h] = kvs_cache_len(e->c, l, h);
    kvs_policy_input in = {.layer = l, .n_layers = e->L, .n_kv_heads = e->H, .n_heads = e->NH, .head_dim = e->hd,
                           .stride = e->cap, .len = lenp, .pos = kvs_cache_positions(e->c, l, 0), .cur_pos = cur_pos,
                           .budget = s->budget, .acc_mass = s->acc};
    kvs_status st = KVS_OK;
    size_t HC = (size_t)e->H * e->cap;
    if (s->needs.flags & KVS_POLICY_NEED_WINDOW_MASS) {
        memset(e->win, 0, HC * sizeof *e->win);
        int64_t nq = 0;
        for (int64_t i = 0; i < s->needs.window; i++) {
            int32_t q = s->ring_qpos[i];
            if (q < 0 || (int64_t)q <= (int64_t)cur_pos - s->needs.window) continue;
            const float *v = s->ring + (size_t)i * HC;
            for (size_t j = 0; j < HC; j++) e->win[j] += v[j];
            nq++;
        }
        in.win_mass = e->win;
        in.win_queries = nq;
    }
    size_t KV = HC * (size_t)e->hd;
    if (st == KVS_OK && (s->needs.flags & KVS_POLICY_NEED_KEYS)) {
        if (!e->keys) st = xalloc((void **)&e->keys, KV * sizeof(float));
        if (st == KVS_OK) st = kvs_cache_read_f32(e->c, l, 0, e->keys);
        in.keys = e->keys;
    }
    if (st == KVS_OK && (s->needs.flags & KVS_POLICY_NEED_VALUES)) {
        if (!e->vals) st = xalloc((void **)&e->vals, KV * sizeof(float));
        if (st == KVS_OK) st = kvs_cache_read_f32(e->c, l, 1, e->vals);
        in.values = e->vals;
    }
    if (st == KVS_OK) st = kvs_policy_score(e->pol, &in, scores);
    if (lenp != len) free(lenp);
    return st;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Per-row top-k on the device: idx[h][0..k) of scores[H][cap] with row lengths len. */
static kvs_status device_topk_rows(kvs_evictor *e, const float *scores, const int32_t *len, int64_t k, int by_index,
                                   int32_t *idx) {
    kvs_device *dev = kvs_tensor_device(kvs_cache_k(e->c, 0));
    kvs_tensor *x = NULL, *rl = NULL, *ix = NULL;
    kvs_status s = kvs_tensor_new(&x, dev, KVS_F32, e->cap, e->H, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&rl, dev, KVS_I32, e->H, 0, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&ix, dev, KVS_I32, k, e->H, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_upload(x, scores, 0, (size_t)e->H * e->cap * 4);
    if (s == KVS_OK) s = kvs_tensor_upload(rl, len, 0, (size_t)e->H * 4);
    kvs_topk_params tp = kvs_topk_params_default();
    tp.k = k;
    tp.order_by_index = by_index;
    tp.row_len = rl;
    if (s == KVS_OK) s = kvs_topk(dev, x, ix, NULL, &tp);
    if (s == KVS_OK) s = kvs_tensor_download(ix, idx, 0, (size_t)e->H * k * 4);
    kvs_tensor_destroy(&x);
    kvs_tensor_destroy(&rl);
    kvs_tensor_destroy(&ix);
    return s;
}

/* Global top-k on the device over n flat scores: idx[0..k) ordered by score (descending). */
static kvs_status device_topk_global(kvs_evictor *e, const float *scores, int64_t n, int64_t k, int32_t *idx) {
    kvs_device *dev = kvs_tensor_device(kvs_cache_k(e->c, 0));
    kvs_tensor *x = NULL, *ix = NULL;
    kvs_status s = kvs_tensor_new(&x, dev, KVS_F32, n, 0, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&ix, dev, KVS_I32, k, 0, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_upload(x, scores, 0, (size_t)n * 4);
    kvs_topk_params tp = kvs_topk_params_default();
    tp.k = k;
    if (s == KVS_OK) s = kvs_topk_global(dev, x, ix, NULL, &tp);
    if (s == KVS_OK) s = kvs_tensor_download(ix, idx, 0, (size_t)k * 4);
    kvs_tensor_destroy(&x);
    kvs_tensor_destroy(&ix);
    return s;
}

/* Mass mode (kvs_policy.keep_mass): for each of the G rows of scores [G][cap] (row g valid up to
 * len[g]), caps[g] = max(1, #(+inf scores) + kvs_topp count of the scores at share keep_mass), run
 * on the cache's device. */
static kvs_status device_mass_caps(kvs_evictor *e, const float *scores, const int32_t *len, int64_t G, int64_t *caps) {
    kvs_device *dev = kvs_tensor_device(kvs_cache_k(e->c, 0));
    kvs_tensor *x = NULL, *rl = NULL, *ct = NULL;
    int32_t *cnt = malloc((size_t)G * sizeof *cnt);
    kvs_status s = cnt ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_evictor: out of host memory");
    if (s == KVS_OK) s = kvs_tensor_new(&x, dev, KVS_F32, e->cap, G, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&rl, dev, KVS_I32, G, 0, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&ct, dev, KVS_I32, G, 0, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_upload(x, scores, 0, (size_t)G * e->cap * 4);
    if (s == KVS_OK) s = kvs_tensor_upload(rl, len, 0, (size_t)G * 4);
    kvs_topp_params tp = kvs_topp_params_default();
    tp.p = e->pol->keep_mass;
    tp.row_len = rl;
    if (s == KVS_OK) s = kvs_topp(dev, x, ct, NULL, &tp);
    if (s == KVS_OK) s = kvs_tensor_download(ct, cnt, 0, (size_t)G * 4);
    for (int64_t g = 0; s == KVS_OK && g < G; g++) {
        int64_t n_inf = 0;
        for (int64_t r = 0; r < len[g]; r++) n_inf += isinf(scores[g * e->cap + r]) && scores[g * e->cap + r] > 0;
        caps[g] = n_inf + cnt[g] > 1 ? n_inf + cnt[g] : 1;
    }
    free(cnt);
    kvs_tensor_destroy(&x);
    kvs_tensor_destroy(&rl);
    kvs_tensor_destroy(&ct);
    return s;
}

/* Applies keep-sets of layers l0..l1-1 (e->keep / e->n_keep indexed by absolute layer) to the cache
 * and to the host state. */
static kvs_status apply_keep(kvs_evictor *e, int l0, int l1) {
    size_t HC = (size_t)e->H * e->cap;
    for (int l = l0; l < l1; l++) {
        int32_t *keep = e->keep + (size_t)l * HC;
        int64_t *nk = e->n_keep + (size_t)l * e->H;
        int64_t before = 0, after = 0;
        int changed = 0;
        for (int h = 0; h < e->H; h++) {
            int64_t len = kvs_cache_len(e->c, l, h);
            before += len;
            after += nk[h];
            if (nk[h] != len) changed = 1;
        }
        if (!changed) continue;
        KVS_TRY(kvs_cache_keep(e->c, l, keep, nk, e->cap));
        layer_state *s = &e->ls[l];
        if (s->acc) compact_rows(s->acc, sizeof(float), e->H, e->cap, keep, nk);
        if (s->ring)
            for (int64_t i = 0; i < s->needs.window; i++)
                if (s->ring_qpos[i] >= 0) compact_rows(s->ring + (size_t)i * HC, sizeof(float), e->H, e->cap, keep, nk);
        if (e->pol->ops->compact) KVS_TRY(e->pol->ops->compact(e->pol->self, l, keep, nk, e->cap));
        e->st.rows_evicted += before - after;
    }
    return KVS_OK;
}

/* Evicts the pool [l0, l1) (one layer, or all for global) down to its budget. */
kvs_status kvs_evictor_evict_pool(kvs_evictor *e, int l0, int l1, int32_t cur_pos) {
    size_t HC = (size_t)e->H * e->cap;
    int P = l1 - l0;
    float *sc = e->scores; /* [P][H][cap] */
    int32_t lens[256];
    if (e->H > 256) return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_evictor: more than 256 kv heads");
    for (int l = l0; l < l1; l++) KVS_TRY(score_layer(e, l, cur_pos, sc + (size_t)(l - l0) * HC));
    e->st.evictions++;
    if (e->scope == KVS_SCOPE_HEAD) {
        int l = l0;
        int64_t k = e->ls[l].budget;
        for (int h = 0; h < e->H; h++) lens[h] = (int32_t)kvs_cache_len(e->c, l, h);
        const int mass = e->pol->keep_mass > 0.0f;
        int64_t *caps = e->cnt; /* [H] mass mode: rows each head keeps at most */
        if (mass) KVS_TRY(device_mass_caps(e, sc, lens, e->H, caps));
        /* the mass mode takes the best caps[h] by score, so it asks for score order */
        KVS_TRY(device_topk_rows(e, sc, lens, k, !mass, e->idx));
        float thr = e->pol->threshold; /* threshold mode: rows below it go even within the budget */
        for (int h = 0; h < e->H; h++) {
            int64_t n = 0;
            int32_t *kp = e->keep + (size_t)l * HC + h * e->cap;
            for (int64_t i = 0; i < k && (!mass || n < caps[h]); i++) {
                int32_t r = e->idx[h * k + i];
                if (r >= 0 && !(sc[h * e->cap + r] < thr)) kp[n++] = r;
            }
            if (mass) qsort(kp, (size_t)n, sizeof *kp, cmp_i32);
            e->n_keep[(size_t)l * e->H + h] = n;
        }
        return apply_keep(e, l0, l1);
    }
    /* pooled: Ada-KV floors, then one global top-k with per-head caps */
    int64_t K = 0, valid = 0;
    for (int l = l0; l < l1; l++) {
        K += (int64_t)e->H * e->ls[l].budget;
        for (int h = 0; h < e->H; h++) valid += kvs_cache_len(e->c, l, h);
    }
    if (e->pol->alpha > 0.0f) {
        for (int l = l0; l < l1; l++) {
            int64_t fl = (int64_t)floor((double)e->pol->alpha * (double)e->ls[l].budget);
            if (fl < 1) continue;
            for (int h = 0; h < e->H; h++) lens[h] = (int32_t)kvs_cache_len(e->c, l, h);
            float *s = sc + (size_t)(l - l0) * HC;
            KVS_TRY(device_topk_rows(e, s, lens, fl, 0, e->idx));
            for (int h = 0; h < e->H; h++)
                for (int64_t i = 0; i < fl; i++) {
                    int32_t r = e->idx[h * fl + i];
                    if (r >= 0) s[h * e->cap + r] = INFINITY;
                }
        }
    }
    int64_t n = (int64_t)P * HC;
    /* threshold mode: rows scoring below the threshold (after the floors, which stay) leave the
     * pool; the top-k then ranks only the rest, so at most K of them survive */
    int64_t *above = e->cnt; /* [P*H] rows of each head at or above the threshold */
    for (int g = 0; g < P * e->H; g++) above[g] = kvs_cache_len(e->c, l0 + g / e->H, g % e->H);
    if (e->pol->threshold > -INFINITY) {
        float thr = e->pol->threshold;
        valid = 0;
        for (int g = 0; g < P * e->H; g++) {
            float *s = sc + (size_t)g * e->cap;
            for (int64_t r = 0; r < above[g]; r++)
                if (s[r] < thr) s[r] = -INFINITY;
            int64_t a = 0;
            for (int64_t r = 0; r < above[g]; r++) a += s[r] > -INFINITY;
            above[g] = a;
            valid += a;
        }
    }
    int64_t *n_above = e->n_keep + (size_t)l0 * e->H; /* borrowed until the keep counts are written */
    memcpy(n_above, above, (size_t)P * e->H * sizeof *n_above);
    /* mass mode: each head's kvs_topp count caps it within the pool (e->mcap, [P*H]) */
    if (e->pol->keep_mass > 0.0f) {
        int32_t *gl = malloc((size_t)P * e->H * sizeof *gl);
        if (!gl) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_evictor: out of host memory");
        for (int g = 0; g < P * e->H; g++) gl[g] = (int32_t)kvs_cache_len(e->c, l0 + g / e->H, g % e->H);
        kvs_status ms = device_mass_caps(e, sc, gl, (int64_t)P * e->H, e->mcap);
        free(gl);
        KVS_TRY(ms);
    }
#define CAP_H(g) (e->pol->keep_mass > 0.0f && e->mcap[g] < e->ls[l0 + (g) / e->H].head_cap ? e->mcap[g] \
                                                                                            : e->ls[l0 + (g) / e->H].head_cap)
    memset(e->fixed, 0, (size_t)e->L * e->H);
    memset(e->cnt, 0, (size_t)e->L * e->H * sizeof *e->cnt);
    for (int round = 0; round <= P * e->H; round++) {
        int64_t k = K < valid ? K : valid;
        if (k < 1) break;
        KVS_TRY(device_topk_global(e, sc, n, k, e->idx));
        /* count per head in score order; a head over its cap is fixed at its cap best rows */
        int newly = 0;
        for (int g = 0; g < P * e->H; g++)
            if (!e->fixed[g]) e->cnt[g] = 0;
        for (int64_t i = 0; i < k; i++) {
            int64_t f = e->idx[i];
            int g = (int)(f / e->cap);
            if (e->fixed[g]) continue;
            int64_t cap_h = CAP_H(g);
            if (e->cnt[g] < cap_h) {
                e->keep[(size_t)l0 * HC + (size_t)g * e->cap + e->cnt[g]++] = (int32_t)(f % e->cap);
            } else if (e->cnt[g] == cap_h) {
                newly = 1;
                e->fixed[g] = 2; /* mark: over cap */
            }
        }
        if (!newly) break;
        for (int g = 0; g < P * e->H; g++)
            if (e->fixed[g] == 2) {
                e->fixed[g] = 1;
                int64_t cap_h = CAP_H(g);
                K -= cap_h;
                valid -= n_above[g];
                for (int64_t r = 0; r < e->cap; r++) sc[(size_t)g * e->cap + r] = -INFINITY;
            }
    }
#undef CAP_H
    for (int g = 0; g < P * e->H; g++) {
        int32_t *kp = e->keep + (size_t)l0 * HC + (size_t)g * e->cap;
        qsort(kp, (size_t)e->cnt[g], sizeof *kp, cmp_i32);
        e->n_keep[(size_t)l0 * e->H + g] = e->cnt[g];
    }
    return apply_keep(e, l0, l1);
}
