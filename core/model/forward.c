/* The step-plan forward of a llama-family transformer (llama2.c run.c / llama.cpp llm_build_llama
 * dataflow; LLaDA uses the same blocks with bidirectional attention). See model.h. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "kvsieve/latent.h"

/* ---- small helpers -------------------------------------------------------------------------- */

/* A dense view with up to three dims over the first rows of a workspace buffer. */
static kvs_status view3(kvs_tensor **out, kvs_tensor *t, int64_t off, int64_t a, int64_t b, int64_t c) {
    int64_t ne[3] = {a, b, c};
    return kvs_tensor_view(out, t, off, c > 1 ? 3 : (b > 1 ? 2 : 1), ne);
}

static kvs_status grow_tensor(kvs_tensor **t, kvs_device *dev, kvs_dtype dt, int64_t a, int64_t b, int64_t c,
                              const char *name) {
    kvs_tensor_destroy(t);
    KVS_TRY(kvs_tensor_new(t, dev, dt, a, b, c, 0));
    kvs_tensor_set_name(*t, name);
    return KVS_OK;
}

void kvs_workspace_free(kvs_workspace *ws) {
    kvs_tensor **all[] = {&ws->x, &ws->xn, &ws->q, &ws->att, &ws->k, &ws->v, &ws->gate, &ws->up, &ws->pos,
                          &ws->slots, &ws->rowsel, &ws->stat_rows, &ws->argmax, &ws->logits, &ws->key_mass,
                          &ws->probs, &ws->probe_rows, &ws->ks, &ws->vs, &ws->ks_pos, &ws->ks_len, &ws->keep_idx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(all[i]);
    memset(ws, 0, sizeof *ws);
}

static kvs_status ws_rows(kvs_model *m, int64_t rows) {
    kvs_workspace *ws = &m->ws;
    if (rows <= ws->rows) return KVS_OK;
    const kvs_model_hparams *hp = &m->hp;
    kvs_device *d = m->dev;
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    KVS_TRY(grow_tensor(&ws->x, d, KVS_F32, hp->dim, rows, 0, "ws.x"));
    KVS_TRY(grow_tensor(&ws->xn, d, KVS_F32, hp->dim, rows, 0, "ws.xn"));
    KVS_TRY(grow_tensor(&ws->q, d, KVS_F32, qd, rows, 0, "ws.q"));
    KVS_TRY(grow_tensor(&ws->att, d, KVS_F32, qd, rows, 0, "ws.att"));
    KVS_TRY(grow_tensor(&ws->k, d, KVS_F32, kd, rows, 0, "ws.k"));
    KVS_TRY(grow_tensor(&ws->v, d, KVS_F32, kd, rows, 0, "ws.v"));
    KVS_TRY(grow_tensor(&ws->gate, d, KVS_F32, hp->ffn_dim, rows, 0, "ws.gate"));
    KVS_TRY(grow_tensor(&ws->up, d, KVS_F32, hp->ffn_dim, rows, 0, "ws.up"));
    KVS_TRY(grow_tensor(&ws->pos, d, KVS_I32, rows, 0, 0, "ws.pos"));
    KVS_TRY(grow_tensor(&ws->slots, d, KVS_I32, rows, hp->n_kv_heads, 0, "ws.slots"));
    KVS_TRY(grow_tensor(&ws->rowsel, d, KVS_I32, rows, 0, 0, "ws.rowsel"));
    KVS_TRY(grow_tensor(&ws->stat_rows, d, KVS_I32, rows, 0, 0, "ws.stat_rows"));
    KVS_TRY(grow_tensor(&ws->argmax, d, KVS_I32, hp->n_heads, rows, 0, "ws.argmax"));
    ws->rows = rows;
    return KVS_OK;
}

static kvs_status ws_kv(kvs_model *m, int64_t kv_cap, int64_t n_probe) {
    kvs_workspace *ws = &m->ws;
    const kvs_model_hparams *hp = &m->hp;
    kvs_device *d = m->dev;
    if (kv_cap > ws->kv_cap) {
        KVS_TRY(grow_tensor(&ws->key_mass, d, KVS_F32, kv_cap, hp->n_kv_heads, 0, "ws.key_mass"));
        kvs_tensor_destroy(&ws->ks);
        kvs_tensor_destroy(&ws->vs);
        kvs_tensor_destroy(&ws->ks_pos);
        kvs_tensor_destroy(&ws->keep_idx);
        kvs_tensor_destroy(&ws->probs);
        ws->probe_cap = 0;
        ws->kv_cap = kv_cap;
    }
    if (n_probe > ws->probe_cap) {
        int64_t pc = n_probe < 8 ? 8 : n_probe;
        KVS_TRY(grow_tensor(&ws->probs, d, KVS_F32, ws->kv_cap, hp->n_heads, pc, "ws.probs"));
        KVS_TRY(grow_tensor(&ws->probe_rows, d, KVS_I32, pc, 0, 0, "ws.probe_rows"));
        ws->probe_cap = pc;
    }
    return KVS_OK;
}

static int rows_valid(const int32_t *rows, int64_t n, int64_t limit) {
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= limit || (i > 0 && rows[i] <= rows[i - 1])) return 0;
    return 1;
}

static int rows_equal(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    return na == nb && (a == b || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static kvs_status host_grow(void **p, int64_t *cap, int64_t n, size_t elem) {
    if (n <= *cap) return KVS_OK;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
    *p = q;
    *cap = n;
    return KVS_OK;
}

/* ---- the forward ---------------------------------------------------------------------------- */

typedef struct fwd_ctx {
    kvs_model *m;
    kvs_kv_cache *c;
    const kvs_step_plan *plan;
    int32_t *pos_host;      /* [n_tokens] positions */
    int32_t *all_rows;      /* [n_tokens] identity */
    int32_t *tmp;           /* [max(n_tokens, H*n)] scratch */
    int64_t n_tok;
} fwd_ctx;

/* Writes this layer's new K/V (ws.k/ws.v rows [0, n), token-major) into the cache. */
static kvs_status write_cache(fwd_ctx *f, int l, const int32_t *rows, int64_t n) {
    kvs_model *m = f->m;
    kvs_kv_cache *c = f->c;
    const kvs_cache_params *cp = kvs_cache_get_params(c);
    int H = cp->n_kv_heads;
    int64_t *len = kvs_cache_host_len_mut(c, l);
    int32_t *slots = f->tmp;
    if (cp->mode == KVS_CACHE_POSITIONAL) {
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++) slots[h * n + i] = f->pos_host[rows[i]];
    } else {
        for (int h = 0; h < H; h++) {
            if (len[h] + n > cp->capacity)
                return kvs_error(KVS_ERR_OUT_OF_RANGE,
                                 "kvs_model_forward: append cache full at layer %d head %d (%lld + %lld > capacity %lld)",
                                 l, h, (long long)len[h], (long long)n, (long long)cp->capacity);
            for (int64_t i = 0; i < n; i++) slots[h * n + i] = (int32_t)(len[h] + i);
        }
    }
    kvs_status s;
    kvs_tensor *idx = NULL, *ksrc = NULL, *vsrc = NULL;
    s = view3(&idx, m->ws.slots, 0, n, H, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(idx, slots, 0, (size_t)H * n * 4);
    if (s == KVS_OK) s = view3(&ksrc, m->ws.k, 0, m->hp.head_dim, H, n);
    if (s == KVS_OK) s = view3(&vsrc, m->ws.v, 0, m->hp.head_dim, H, n);
    if (s == KVS_OK) s = kvs_scatter(m->dev, ksrc, idx, kvs_cache_k(c, l), 1);
    if (s == KVS_OK) s = kvs_scatter(m->dev, vsrc, idx, kvs_cache_v(c, l), 1);
    kvs_tensor_destroy(&idx);
    kvs_tensor_destroy(&ksrc);
    kvs_tensor_destroy(&vsrc);
    KVS_TRY(s);
    /* host mirrors + device pos/len */
    for (int h = 0; h < H; h++) {
        int32_t *pos = kvs_cache_host_pos_mut(c, l, h);
        for (int64_t i = 0; i < n; i++) pos[slots[h * n + i]] = f->pos_host[rows[i]];
        if (cp->mode == KVS_CACHE_APPEND) {
            len[h] += n;
        } else {
            for (int64_t i = 0; i < n; i++)
                if (slots[h * n + i] + 1 > len[h]) len[h] = slots[h * n + i] + 1;
        }
    }
    return kvs_cache_sync_layer(c, l);
}

static kvs_status layer_attention(fwd_ctx *f, int l, const kvs_layer_plan *lp, int64_t n, kvs_layer_stats *st) {
    kvs_model *m = f->m;
    kvs_kv_cache *c = f->c;
    const kvs_model_hparams *hp = &m->hp;
    int H = hp->n_kv_heads;
    int64_t n_kv = kvs_cache_max_len(c, l);
    int64_t cap = kvs_cache_get_params(c)->capacity;
    int64_t n_probe = lp ? lp->n_probe : 0;
    KVS_TRY(ws_kv(m, cap, n_probe));
    kvs_workspace *ws = &m->ws;

    kvs_attention_params ap = kvs_attention_params_default();
    ap.n_kv = n_kv;
    ap.causal = hp->arch == KVS_ARCH_LLAMA;
    kvs_tensor *qpos = NULL, *q = NULL, *out = NULL, *srows = NULL, *prow = NULL, *amax = NULL, *kmass = NULL;
    kvs_status s = view3(&qpos, ws->pos, 0, n, 1, 1);
    if (s == KVS_OK) s = view3(&q, ws->q, 0, hp->head_dim, hp->n_heads, n);
    if (s == KVS_OK) s = view3(&out, ws->att, 0, hp->head_dim, hp->n_heads, n);
    ap.q_pos = qpos;
    ap.k_pos = kvs_cache_pos_tensor(c, l);
    ap.kv_len = kvs_cache_len_tensor(c, l);

    /* latent memory (latent.h): unnormalised attention + row max/sum, merged after the op */
    kvs_tensor *lat_max = NULL, *lat_sum = NULL;
    const struct kvs_latent *lat = lp && lp->latent && kvs_latent_active(lp->latent, l) ? lp->latent : NULL;
    if (s == KVS_OK && lat) {
        s = kvs_tensor_new(&lat_max, m->dev, KVS_F32, hp->n_heads, n, 0, 0);
        if (s == KVS_OK) s = kvs_tensor_new(&lat_sum, m->dev, KVS_F32, hp->n_heads, n, 0, 0);
        ap.unnormalised = 1;
        ap.row_max = lat_max;
        ap.row_sum = lat_sum;
    }
    int want_mass = lp && (lp->stat_all_rows || lp->n_stat_rows > 0);
    if (s == KVS_OK && want_mass) {
        /* the workspace may be larger than this cache: the op wants exactly [H][capacity] */
        s = view3(&kmass, ws->key_mass, 0, cap, H, 1);
        ap.key_mass = kmass;
        if (s == KVS_OK && !lp->stat_all_rows) {
            s = view3(&srows, ws->stat_rows, 0, lp->n_stat_rows, 1, 1);
            if (s == KVS_OK) s = kvs_tensor_upload(srows, lp->stat_rows, 0, (size_t)lp->n_stat_rows * 4);
            ap.stat_rows = srows;
        }
        /* key_mass covers [H][capacity]; rows beyond a head's length are untouched: zero first. */
        if (s == KVS_OK) s = kvs_tensor_fill(ws->key_mass, 0.0);
    }
    if (s == KVS_OK && n_probe > 0) {
        kvs_tensor *pv = NULL;
        s = view3(&prow, ws->probe_rows, 0, n_probe, 1, 1);
        if (s == KVS_OK) s = kvs_tensor_upload(prow, lp->probe_rows, 0, (size_t)n_probe * 4);
        if (s == KVS_OK) s = view3(&pv, ws->probs, 0, cap, hp->n_heads, n_probe);
        ap.probe_rows = prow;
        ap.probs = pv;
        /* keep pv alive until after the op via amax slot trick below */
        if (s == KVS_OK) {
            if (lp->want_argmax) s = view3(&amax, ws->argmax, 0, hp->n_heads, n, 1);
            ap.argmax = amax;
            if (s == KVS_OK) s = kvs_attention(m->dev, q, kvs_cache_k(c, l), kvs_cache_v(c, l), out, &ap);
        }
        kvs_tensor_destroy(&pv);
    } else if (s == KVS_OK) {
        if (lp && lp->want_argmax) s = view3(&amax, ws->argmax, 0, hp->n_heads, n, 1);
        ap.argmax = amax;
        if (s == KVS_OK) s = kvs_attention(m->dev, q, kvs_cache_k(c, l), kvs_cache_v(c, l), out, &ap);
    }

    if (s == KVS_OK && lat) s = kvs_latent_merge(lat, l, q, out, lat_max, lat_sum);
    kvs_tensor_destroy(&lat_max);
    kvs_tensor_destroy(&lat_sum);
    /* statistics to host */
    st->n_kv = n_kv;
    st->key_mass = NULL;
    st->probs = NULL;
    st->argmax = NULL;
    if (s == KVS_OK && want_mass) {
        s = host_grow((void **)&m->key_mass_host[l], &m->key_mass_cap[l], (int64_t)H * cap, sizeof(float));
        if (s == KVS_OK) s = kvs_tensor_download(ws->key_mass, m->key_mass_host[l], 0, (size_t)H * cap * 4);
        if (s == KVS_OK) {
            /* compact [H][cap] -> [H][n_kv] in place */
            float *km = m->key_mass_host[l];
            for (int h = 1; h < H; h++) memmove(km + h * n_kv, km + h * cap, (size_t)n_kv * sizeof *km);
            st->key_mass = km;
        }
    }
    if (s == KVS_OK && n_probe > 0) {
        int64_t tot = n_probe * hp->n_heads * cap;
        s = host_grow((void **)&m->probs_host[l], &m->probs_cap[l], tot, sizeof(float));
        if (s == KVS_OK) s = kvs_tensor_download(ws->probs, m->probs_host[l], 0, (size_t)tot * 4);
        if (s == KVS_OK) {
            float *pr = m->probs_host[l];
            for (int64_t r = 1; r < n_probe * hp->n_heads; r++) memmove(pr + r * n_kv, pr + r * cap, (size_t)n_kv * 4);
            st->probs = pr;
        }
    }
    if (s == KVS_OK && amax) {
        int64_t tot = n * hp->n_heads;
        s = host_grow((void **)&m->argmax_host[l], &m->argmax_cap[l], tot, sizeof(int32_t));
        if (s == KVS_OK) s = kvs_tensor_download(amax, m->argmax_host[l], 0, (size_t)tot * 4);
        if (s == KVS_OK) st->argmax = m->argmax_host[l];
    }
    kvs_tensor_destroy(&qpos);
    kvs_tensor_destroy(&q);
    kvs_tensor_destroy(&out);
    kvs_tensor_destroy(&srows);
    kvs_tensor_destroy(&prow);
    kvs_tensor_destroy(&amax);
    kvs_tensor_destroy(&kmass);
    return s;
}

/* Runs layer l on rows [0, n) of ws.x (their token indices in rows[]). */
static kvs_status run_layer(fwd_ctx *f, int l, const int32_t *rows, int64_t n, kvs_layer_stats *st) {
    kvs_model *m = f->m;
    const kvs_model_hparams *hp = &m->hp;
    const kvs_layer_tensors *w = &m->layers[l];
    kvs_workspace *ws = &m->ws;
    kvs_device *d = m->dev;
    const kvs_layer_plan *lp = f->plan->layers ? &f->plan->layers[l] : NULL;
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    kvs_tensor *x = NULL, *xn = NULL, *q = NULL, *k = NULL, *v = NULL, *att = NULL, *g = NULL, *u = NULL, *pos = NULL;
    kvs_tensor *q3 = NULL, *k3 = NULL;
    kvs_status s = view3(&x, ws->x, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = view3(&xn, ws->xn, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = view3(&q, ws->q, 0, qd, n, 1);
    if (s == KVS_OK) s = view3(&k, ws->k, 0, kd, n, 1);
    if (s == KVS_OK) s = view3(&v, ws->v, 0, kd, n, 1);
    if (s == KVS_OK) s = view3(&att, ws->att, 0, qd, n, 1);
    if (s == KVS_OK) s = view3(&g, ws->gate, 0, hp->ffn_dim, n, 1);
    if (s == KVS_OK) s = view3(&u, ws->up, 0, hp->ffn_dim, n, 1);
    if (s == KVS_OK) s = view3(&pos, ws->pos, 0, n, 1, 1);
    if (s == KVS_OK) s = view3(&q3, ws->q, 0, hp->head_dim, hp->n_heads, n);
    if (s == KVS_OK) s = view3(&k3, ws->k, 0, hp->head_dim, hp->n_kv_heads, n);
    if (s == KVS_OK) {
        for (int64_t i = 0; i < n; i++) f->tmp[i] = f->pos_host[rows[i]];
        s = kvs_tensor_upload(pos, f->tmp, 0, (size_t)n * 4);
    }
    kvs_rope_params rp = kvs_rope_params_default();
    rp.mode = hp->rope_mode;
    rp.theta_base = hp->rope_base;
    rp.n_rot = hp->rope_dim;
    if (s == KVS_OK) s = kvs_rmsnorm(d, x, w->attn_norm, xn, hp->rms_eps);
    st->x = NULL;
    st->n_x_rows = 0;
    if (s == KVS_OK && lp && lp->want_x) { /* learned eviction: the rows' normalised input */
        s = host_grow((void **)&m->x_host[l], &m->x_cap[l], n * hp->dim, sizeof(float));
        if (s == KVS_OK) s = kvs_tensor_download(xn, m->x_host[l], 0, (size_t)(n * hp->dim) * sizeof(float));
        if (s == KVS_OK) {
            st->x = m->x_host[l];
            st->n_x_rows = n;
        }
    }
    if (s == KVS_OK) s = kvs_matmul(d, w->wq, xn, q, 0);
    if (s == KVS_OK) s = kvs_matmul(d, w->wk, xn, k, 0);
    if (s == KVS_OK) s = kvs_matmul(d, w->wv, xn, v, 0);
    if (s == KVS_OK) s = kvs_rope(d, q3, pos, &rp);
    if (s == KVS_OK) s = kvs_rope(d, k3, pos, &rp);
    if (s == KVS_OK) s = write_cache(f, l, rows, n);
    if (s == KVS_OK) s = layer_attention(f, l, lp, n, st);
    if (s == KVS_OK) s = kvs_matmul(d, w->wo, att, x, 1);
    if (s == KVS_OK) s = kvs_rmsnorm(d, x, w->ffn_norm, xn, hp->rms_eps);
    if (s == KVS_OK) s = kvs_matmul(d, w->w_gate, xn, g, 0);
    if (s == KVS_OK) s = kvs_matmul(d, w->w_up, xn, u, 0);
    if (s == KVS_OK) s = kvs_swiglu(d, g, u, g);
    if (s == KVS_OK) s = kvs_matmul(d, w->w_down, g, x, 1);
    kvs_tensor *all[] = {x, xn, q, k, v, att, g, u, pos, q3, k3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(&all[i]);
    return s;
}

/* Moves layer inputs: ws.x rows (token indices prev[0..np)) -> cache x[l] (positional slots), then
 * loads rows cur[0..nc) from cache x[l] into ws.x. Only with KVS_CACHE_KEEP_X. */
static kvs_status exchange_x(fwd_ctx *f, int l, const int32_t *prev, int64_t np, const int32_t *cur, int64_t nc,
                             int load) {
    kvs_model *m = f->m;
    kvs_tensor *xc = kvs_cache_x(f->c, l);
    if (!xc) return KVS_OK;
    int64_t dim = m->hp.dim;
    kvs_tensor *idx = NULL, *src = NULL, *dst3 = NULL;
    kvs_status s = view3(&idx, m->ws.rowsel, 0, np, 1, 1);
    for (int64_t i = 0; i < np && s == KVS_OK; i++) f->tmp[i] = f->pos_host[prev[i]];
    if (s == KVS_OK) s = kvs_tensor_upload(idx, f->tmp, 0, (size_t)np * 4);
    if (s == KVS_OK) s = view3(&src, m->ws.x, 0, dim, np, 1);
    int64_t xne[3] = {dim, kvs_tensor_ne(xc, 1), 1};
    if (s == KVS_OK) s = kvs_tensor_view(&dst3, xc, 0, 3, xne);
    if (s == KVS_OK) s = kvs_scatter(m->dev, src, idx, dst3, 0);
    kvs_tensor_destroy(&idx);
    kvs_tensor_destroy(&src);
    if (s == KVS_OK && load) {
        s = view3(&idx, m->ws.rowsel, 0, nc, 1, 1);
        for (int64_t i = 0; i < nc && s == KVS_OK; i++) f->tmp[i] = f->pos_host[cur[i]];
        if (s == KVS_OK) s = kvs_tensor_upload(idx, f->tmp, 0, (size_t)nc * 4);
        if (s == KVS_OK) s = view3(&src, m->ws.x, 0, dim, nc, 1);
        if (s == KVS_OK) s = kvs_gather(m->dev, dst3, idx, src);
        kvs_tensor_destroy(&idx);
        kvs_tensor_destroy(&src);
    }
    kvs_tensor_destroy(&dst3);
    return s;
}

static kvs_status final_logits(fwd_ctx *f, const int32_t *rows, int64_t n, kvs_step_result *res) {
    kvs_model *m = f->m;
    const kvs_model_hparams *hp = &m->hp;
    const kvs_step_plan *plan = f->plan;
    int64_t nl = plan->n_logit_rows;
    res->logits = NULL;
    res->n_logit_rows = nl;
    res->vocab = hp->vocab;
    if (nl == 0) return KVS_OK;
    /* map token indices to positions within the last layer's rows */
    int32_t *sel = f->tmp;
    for (int64_t i = 0; i < nl; i++) {
        int32_t t = plan->logit_rows[i];
        int64_t lo = 0, hi = n - 1, at = -1;
        while (lo <= hi) {
            int64_t mid = (lo + hi) / 2;
            if (rows[mid] == t) { at = mid; break; }
            if (rows[mid] < t) lo = mid + 1; else hi = mid - 1;
        }
        if (at < 0)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_forward: logit row %d is not computed at the last layer", t);
        sel[i] = (int32_t)at;
    }
    kvs_workspace *ws = &m->ws;
    if (nl > ws->logit_rows) {
        KVS_TRY(grow_tensor(&ws->logits, m->dev, KVS_F32, hp->vocab, nl, 0, "ws.logits"));
        ws->logit_rows = nl;
    }
    kvs_tensor *idx = NULL, *x3 = NULL, *xn3 = NULL, *xn = NULL, *lg = NULL;
    kvs_status s = view3(&idx, ws->rowsel, 0, nl, 1, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(idx, sel, 0, (size_t)nl * 4);
    if (s == KVS_OK) s = view3(&x3, ws->x, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = view3(&xn3, ws->xn, 0, hp->dim, nl, 1);
    if (s == KVS_OK) s = kvs_gather(m->dev, x3, idx, xn3);
    if (s == KVS_OK) s = view3(&xn, ws->xn, 0, hp->dim, nl, 1);
    if (s == KVS_OK) s = kvs_rmsnorm(m->dev, xn3, m->out_norm, xn, hp->rms_eps);
    if (s == KVS_OK) s = view3(&lg, ws->logits, 0, hp->vocab, nl, 1);
    if (s == KVS_OK) s = kvs_matmul(m->dev, m->output, xn, lg, 0);
    if (s == KVS_OK) s = host_grow((void **)&m->logits_host, &m->logits_host_cap, nl * hp->vocab, sizeof(float));
    if (s == KVS_OK) s = kvs_tensor_download(lg, m->logits_host, 0, (size_t)nl * hp->vocab * 4);
    if (s == KVS_OK) res->logits = m->logits_host;
    kvs_tensor *all[] = {idx, x3, xn3, xn, lg};
    for (size_t i = 0; i < 5; i++) kvs_tensor_destroy(&all[i]);
    return s;
}

kvs_status kvs_model_forward(kvs_model *m, kvs_kv_cache *c, const kvs_step_plan *plan, kvs_step_result *res) {
    const char *op = "kvs_model_forward";
    if (!m || !c || !plan || !res) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    memset(res, 0, sizeof *res);
    const kvs_model_hparams *hp = &m->hp;
    const kvs_cache_params *cp = kvs_cache_get_params(c);
    if (cp->n_layers != hp->n_layers || cp->n_kv_heads != hp->n_kv_heads || cp->head_dim != hp->head_dim)
        return kvs_error(KVS_ERR_SHAPE, "%s: cache (%d layers, %d kv heads, head_dim %d) does not fit the model (%d, %d, %d)",
                         op, cp->n_layers, cp->n_kv_heads, cp->head_dim, hp->n_layers, hp->n_kv_heads, hp->head_dim);
    if ((cp->flags & KVS_CACHE_KEEP_X) && cp->dim != hp->dim)
        return kvs_error(KVS_ERR_SHAPE, "%s: cache x width %d != model dim %d", op, cp->dim, hp->dim);
    int64_t n_tok = plan->n_tokens;
    if (!plan->tokens || n_tok < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: plan has no tokens", op);
    if (n_tok > INT32_MAX / 2) return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: too many tokens", op);
    for (int64_t i = 0; i < n_tok; i++)
        if (plan->tokens[i] < 0 || plan->tokens[i] >= hp->vocab)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: token %lld = %d outside vocabulary [0, %d)", op,
                             (long long)i, plan->tokens[i], hp->vocab);
    if (plan->n_logit_rows < 0 || (plan->n_logit_rows > 0 && !plan->logit_rows))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: bad logit rows", op);

    fwd_ctx f = {.m = m, .c = c, .plan = plan, .n_tok = n_tok};
    int64_t tmp_n = n_tok * (cp->n_kv_heads > 2 ? cp->n_kv_heads : 2) + plan->n_logit_rows + 16;
    f.pos_host = malloc((size_t)n_tok * sizeof *f.pos_host);
    f.all_rows = malloc((size_t)n_tok * sizeof *f.all_rows);
    f.tmp = malloc((size_t)tmp_n * sizeof *f.tmp);
    kvs_status s = KVS_OK;
    if (!f.pos_host || !f.all_rows || !f.tmp) {
        s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        goto done;
    }
    for (int64_t i = 0; i < n_tok; i++) {
        f.all_rows[i] = (int32_t)i;
        if (plan->positions) {
            f.pos_host[i] = plan->positions[i];
        } else if (cp->mode == KVS_CACHE_APPEND) {
            f.pos_host[i] = (int32_t)(kvs_cache_max_len(c, 0) + i);
        } else {
            f.pos_host[i] = (int32_t)i;
        }
        if (f.pos_host[i] < 0 || (cp->mode == KVS_CACHE_POSITIONAL && f.pos_host[i] >= cp->capacity)) {
            s = kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: token %lld has position %d outside the cache capacity %lld", op,
                          (long long)i, f.pos_host[i], (long long)cp->capacity);
            goto done;
        }
    }
    s = ws_rows(m, n_tok);
    if (s != KVS_OK) goto done;
    for (int l = 0; l < hp->n_layers; l++) {
        m->stats[l] = (kvs_layer_stats){0};
    }

    const int32_t *prev = NULL;
    int64_t n_prev = 0;
    for (int l = 0; l < hp->n_layers && s == KVS_OK; l++) {
        const kvs_layer_plan *lp = plan->layers ? &plan->layers[l] : NULL;
        const int32_t *rows;
        int64_t n;
        if (lp && lp->rows) {
            rows = lp->rows;
            n = lp->n_rows;
            if (n < 1 || !rows_valid(rows, n, n_tok)) {
                s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d rows must be strictly increasing token indices in [0, %lld)",
                              op, l, (long long)n_tok);
                break;
            }
        } else if (l == 0 || !prev) {
            rows = f.all_rows;
            n = n_tok;
        } else {
            rows = prev;
            n = n_prev;
        }
        if (lp) {
            if ((lp->n_stat_rows > 0 && (!lp->stat_rows)) || (lp->n_probe > 0 && !lp->probe_rows)) {
                s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d statistics rows missing", op, l);
                break;
            }
            for (int64_t i = 0; i < lp->n_stat_rows && s == KVS_OK; i++)
                if (lp->stat_rows[i] < 0 || lp->stat_rows[i] >= n)
                    s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d stat row %d outside its %lld rows", op, l,
                                  lp->stat_rows[i], (long long)n);
            for (int64_t i = 0; i < lp->n_probe && s == KVS_OK; i++)
                if (lp->probe_rows[i] < 0 || lp->probe_rows[i] >= n)
                    s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d probe row %d outside its %lld rows", op, l,
                                  lp->probe_rows[i], (long long)n);
            if (lp->keep)
                s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: sparse keep-set attention is not implemented yet", op);
            if (s != KVS_OK) break;
        }
        int changed = l > 0 && !rows_equal(rows, n, prev, n_prev);
        if (changed && !(cp->flags & KVS_CACHE_KEEP_X)) {
            s = kvs_error(KVS_ERR_INVALID_ARGUMENT,
                          "%s: layer %d computes other rows than layer %d but the cache keeps no layer inputs (KVS_CACHE_KEEP_X)",
                          op, l, l - 1);
            break;
        }
        if (l == 0) {
            kvs_tensor *x = NULL;
            int32_t *ids = f.tmp;
            for (int64_t i = 0; i < n; i++) ids[i] = plan->tokens[rows[i]];
            s = view3(&x, m->ws.x, 0, hp->dim, n, 1);
            if (s == KVS_OK) s = kvs_embedding(m->dev, m->tok_embd, ids, n, x);
            kvs_tensor_destroy(&x);
            if (s == KVS_OK && (cp->flags & KVS_CACHE_KEEP_X)) s = exchange_x(&f, 0, rows, n, NULL, 0, 0);
        } else if (cp->flags & KVS_CACHE_KEEP_X) {
            s = exchange_x(&f, l, prev, n_prev, rows, n, changed);
        }
        if (s == KVS_OK) s = run_layer(&f, l, rows, n, &m->stats[l]);
        res->rows_computed += n;
        prev = rows;
        n_prev = n;
    }
    if (s == KVS_OK && cp->mode == KVS_CACHE_POSITIONAL) {
        /* Every position of the sequence must hold K/V computed at some step. */
        for (int l = 0; l < hp->n_layers && s == KVS_OK; l++) {
            const int32_t *pos = kvs_cache_positions(c, l, 0);
            for (int64_t i = 0; i < n_tok; i++)
                if (pos[f.pos_host[i]] != f.pos_host[i]) {
                    s = kvs_error(KVS_ERR_STATE, "%s: layer %d attended position %d whose K/V were never computed", op, l,
                                  f.pos_host[i]);
                    break;
                }
        }
    }
    if (s == KVS_OK) s = final_logits(&f, prev, n_prev, res);
    res->layers = m->stats;
done:
    free(f.pos_host);
    free(f.all_rows);
    free(f.tmp);
    return s;
}
