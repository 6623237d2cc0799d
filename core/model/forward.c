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
                          &ws->rowsel, &ws->stat_rows, &ws->argmax, &ws->logits, &ws->key_mass,
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
    const kvs_layer_plan *lp; /* the current layer's plan (NULL: all rows, no statistics) */
    /* What the small device index buffers hold, so that layers with the same rows skip re-uploads
     * (each upload can cost a queue flush on GPU backends). */
    int32_t *pos_rows;        /* [n_tokens] copy of the rows whose positions ws.pos holds */
    int64_t pos_n;            /* 0: ws.pos holds nothing valid yet */
} fwd_ctx;

/* Writes this layer's new K/V (ws.k/ws.v rows [0, n), token-major) into the cache. */
static kvs_status write_cache(fwd_ctx *f, int l, const int32_t *rows, int64_t n) {
    kvs_model *m = f->m;
    int H = m->hp.n_kv_heads;
    for (int64_t i = 0; i < n; i++) f->tmp[i] = f->pos_host[rows[i]];
    kvs_tensor *ksrc = NULL, *vsrc = NULL;
    kvs_status s = view3(&ksrc, m->ws.k, 0, m->hp.head_dim, H, n);
    if (s == KVS_OK) s = view3(&vsrc, m->ws.v, 0, m->hp.head_dim, H, n);
    if (s == KVS_OK) s = kvs_cache_write_rows(f->c, l, ksrc, vsrc, f->tmp, n);
    kvs_tensor_destroy(&ksrc);
    kvs_tensor_destroy(&vsrc);
    return s;
}

/* Sparse keep-set attention (kvs_layer_plan.keep): gathers, for every kv head h, the cache rows
 * keep[h][0..n_keep[h]) into the workspace K/V (padded to the longest set with the head's last kept
 * row, hidden from the queries by the per-head kv_len) and uploads their positions and lengths.
 * On success *kmax is the longest set. */
static kvs_status gather_keep(fwd_ctx *f, int l, const kvs_layer_plan *lp, int64_t *kmax, kvs_tensor **ks,
                              kvs_tensor **vs, kvs_tensor **kpos, kvs_tensor **klen) {
    kvs_model *m = f->m;
    kvs_kv_cache *c = f->c;
    kvs_workspace *ws = &m->ws;
    const kvs_cache_params *cp = kvs_cache_get_params(c);
    int H = cp->n_kv_heads;
    int64_t S = lp->keep_stride, km = 0;
    if (!lp->n_keep || S < 1 || S > cp->capacity)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_forward: layer %d keep-set needs n_keep and 1 <= keep_stride <= capacity %lld",
                         l, (long long)cp->capacity);
    for (int h = 0; h < H; h++) {
        int64_t nk = lp->n_keep[h], len = kvs_cache_len(c, l, h);
        if (nk < 1 || nk > S)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_forward: layer %d head %d keeps %lld rows (want 1..%lld)", l, h,
                             (long long)nk, (long long)S);
        const int32_t *kr = lp->keep + (int64_t)h * S;
        if (!rows_valid(kr, nk, len))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                             "kvs_model_forward: layer %d head %d keep-set must be strictly increasing cache rows < %lld", l, h,
                             (long long)len);
        if (nk > km) km = nk;
    }
    int32_t *idx = malloc((size_t)H * (size_t)km * 2 * sizeof *idx);
    if (!idx) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
    int32_t *pos = idx + (int64_t)H * km;
    int32_t lens[64], *lenp = H <= 64 ? lens : malloc((size_t)H * sizeof *lenp);
    if (!lenp) {
        free(idx);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
    }
    for (int h = 0; h < H; h++) {
        const int32_t *kr = lp->keep + (int64_t)h * S;
        const int32_t *hp_pos = kvs_cache_positions(c, l, h);
        int64_t nk = lp->n_keep[h];
        for (int64_t i = 0; i < km; i++) {
            int32_t r = kr[i < nk ? i : nk - 1];
            idx[h * km + i] = r;
            pos[h * km + i] = hp_pos[r];
        }
        lenp[h] = (int32_t)nk;
    }
    kvs_status s = KVS_OK;
    kvs_dtype dt = cp->dtype;
    if (!ws->ks || kvs_tensor_dtype(ws->ks) != dt || kvs_tensor_ne(ws->ks, 1) < ws->kv_cap) {
        s = grow_tensor(&ws->ks, m->dev, dt, cp->head_dim, ws->kv_cap, H, "ws.ks");
        if (s == KVS_OK) s = grow_tensor(&ws->vs, m->dev, dt, cp->head_dim, ws->kv_cap, H, "ws.vs");
        if (s == KVS_OK) s = grow_tensor(&ws->ks_pos, m->dev, KVS_I32, ws->kv_cap, H, 0, "ws.ks_pos");
        if (s == KVS_OK) s = grow_tensor(&ws->keep_idx, m->dev, KVS_I32, ws->kv_cap, H, 0, "ws.keep_idx");
    }
    if (s == KVS_OK && !ws->ks_len) s = grow_tensor(&ws->ks_len, m->dev, KVS_I32, H, 0, 0, "ws.ks_len");
    kvs_tensor *iv = NULL;
    if (s == KVS_OK) s = view3(&iv, ws->keep_idx, 0, km, H, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(iv, idx, 0, (size_t)H * km * 4);
    if (s == KVS_OK) s = view3(ks, ws->ks, 0, cp->head_dim, km, H);
    if (s == KVS_OK) s = view3(vs, ws->vs, 0, cp->head_dim, km, H);
    if (s == KVS_OK) s = kvs_gather(m->dev, kvs_cache_k(c, l), iv, *ks);
    if (s == KVS_OK) s = kvs_gather(m->dev, kvs_cache_v(c, l), iv, *vs);
    if (s == KVS_OK) s = view3(kpos, ws->ks_pos, 0, km, H, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(*kpos, pos, 0, (size_t)H * km * 4);
    if (s == KVS_OK) s = view3(klen, ws->ks_len, 0, H, 1, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(*klen, lenp, 0, (size_t)H * 4);
    kvs_tensor_destroy(&iv);
    if (lenp != lens) free(lenp);
    free(idx);
    *kmax = km;
    return s;
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
    int sparse = lp && lp->keep;

    kvs_attention_params ap = kvs_attention_params_default();
    ap.causal = hp->arch == KVS_ARCH_LLAMA;
    kvs_tensor *qpos = NULL, *q = NULL, *out = NULL, *srows = NULL, *prow = NULL, *amax = NULL;
    kvs_tensor *ks = NULL, *vs = NULL, *kpos = NULL, *klen = NULL, *kmv = NULL, *pv = NULL;
    /* keys the attention sees: the cache rows [0, n_kv) (dense) or the gathered keep-set (sparse,
     * akv = the longest set); statistics come back in that key space and are mapped to cache rows */
    int64_t akv = n_kv;
    kvs_status s = view3(&qpos, ws->pos, 0, n, 1, 1);
    if (s == KVS_OK) s = view3(&q, ws->q, 0, hp->head_dim, hp->n_heads, n);
    if (s == KVS_OK) s = view3(&out, ws->att, 0, hp->head_dim, hp->n_heads, n);
    const kvs_tensor *kk = kvs_cache_k(c, l), *vv = kvs_cache_v(c, l);
    int64_t kcap = cap;
    if (s == KVS_OK && sparse) {
        s = gather_keep(f, l, lp, &akv, &ks, &vs, &kpos, &klen);
        kk = ks;
        vv = vs;
        kcap = akv;
        ap.k_pos = kpos;
        ap.kv_len = klen;
    } else {
        ap.k_pos = kvs_cache_pos_tensor(c, l);
        ap.kv_len = kvs_cache_len_tensor(c, l);
    }
    ap.n_kv = akv;
    ap.q_pos = qpos;

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
        /* key_mass covers [H][kcap]; keys beyond a head's length are untouched: zero first. */
        s = view3(&kmv, ws->key_mass, 0, kcap, H, 1);
        if (s == KVS_OK) s = kvs_tensor_fill(kmv, 0.0);
        ap.key_mass = kmv;
        if (s == KVS_OK && !lp->stat_all_rows) {
            s = view3(&srows, ws->stat_rows, 0, lp->n_stat_rows, 1, 1);
            if (s == KVS_OK) s = kvs_tensor_upload(srows, lp->stat_rows, 0, (size_t)lp->n_stat_rows * 4);
            ap.stat_rows = srows;
        }
    }
    if (s == KVS_OK && n_probe > 0) {
        s = view3(&prow, ws->probe_rows, 0, n_probe, 1, 1);
        if (s == KVS_OK) s = kvs_tensor_upload(prow, lp->probe_rows, 0, (size_t)n_probe * 4);
        if (s == KVS_OK) s = view3(&pv, ws->probs, 0, kcap, hp->n_heads, n_probe);
        ap.probe_rows = prow;
        ap.probs = pv;
    }
    if (s == KVS_OK && lp && lp->want_argmax) {
        s = view3(&amax, ws->argmax, 0, hp->n_heads, n, 1);
        ap.argmax = amax;
    }
    if (s == KVS_OK) s = kvs_attention(m->dev, q, kk, vv, out, &ap);

    if (s == KVS_OK && lat) s = kvs_latent_merge(lat, l, q, out, lat_max, lat_sum);
    kvs_tensor_destroy(&lat_max);
    kvs_tensor_destroy(&lat_sum);
    /* statistics to host, as [.][n_kv] over cache rows */
    st->n_kv = n_kv;
    st->key_mass = NULL;
    st->probs = NULL;
    st->argmax = NULL;
    int G = hp->n_heads / H;
    if (s == KVS_OK && want_mass) {
        int64_t need = (int64_t)H * (kcap > n_kv ? kcap : n_kv) * (sparse ? 2 : 1);
        s = host_grow((void **)&m->key_mass_host[l], &m->key_mass_cap[l], need, sizeof(float));
        float *km = m->key_mass_host[l];
        float *raw = sparse ? km + (int64_t)H * n_kv : km;
        if (s == KVS_OK) s = kvs_tensor_download(kmv, raw, 0, (size_t)H * kcap * 4);
        if (s == KVS_OK && sparse) {
            memset(km, 0, (size_t)H * n_kv * sizeof *km);
            for (int h = 0; h < H; h++)
                for (int64_t i = 0; i < lp->n_keep[h]; i++) km[h * n_kv + lp->keep[h * lp->keep_stride + i]] = raw[h * kcap + i];
        } else if (s == KVS_OK) {
            /* compact [H][cap] -> [H][n_kv] in place */
            for (int h = 1; h < H; h++) memmove(km + h * n_kv, km + h * kcap, (size_t)n_kv * sizeof *km);
        }
        if (s == KVS_OK) st->key_mass = km;
    }
    if (s == KVS_OK && n_probe > 0) {
        int64_t rows = n_probe * hp->n_heads;
        int64_t need = rows * (kcap > n_kv ? kcap : n_kv) + (sparse ? rows * kcap : 0);
        s = host_grow((void **)&m->probs_host[l], &m->probs_cap[l], need, sizeof(float));
        float *pr = m->probs_host[l];
        float *raw = sparse ? pr + rows * n_kv : pr;
        if (s == KVS_OK) s = kvs_tensor_download(pv, raw, 0, (size_t)(rows * kcap) * 4);
        if (s == KVS_OK && sparse) {
            memset(pr, 0, (size_t)(rows * n_kv) * sizeof *pr);
            for (int64_t r = 0; r < rows; r++) {
                int h = (int)(r % hp->n_heads) / G;
                const int32_t *kr = lp->keep + h * lp->keep_stride;
                for (int64_t i = 0; i < lp->n_keep[h]; i++) pr[r * n_kv + kr[i]] = raw[r * kcap + i];
            }
        } else if (s == KVS_OK) {
            for (int64_t r = 1; r < rows; r++) memmove(pr + r * n_kv, pr + r * kcap, (size_t)n_kv * 4);
        }
        if (s == KVS_OK) st->probs = pr;
    }
    if (s == KVS_OK && amax) {
        int64_t tot = n * hp->n_heads;
        s = host_grow((void **)&m->argmax_host[l], &m->argmax_cap[l], tot, sizeof(int32_t));
        if (s == KVS_OK) s = kvs_tensor_download(amax, m->argmax_host[l], 0, (size_t)tot * 4);
        if (s == KVS_OK && sparse) {
            int32_t *am = m->argmax_host[l];
            for (int64_t r = 0; r < tot; r++) {
                int h = (int)(r % hp->n_heads) / G;
                if (am[r] >= 0 && am[r] < lp->n_keep[h]) am[r] = lp->keep[h * lp->keep_stride + am[r]];
            }
        }
        if (s == KVS_OK) st->argmax = m->argmax_host[l];
    }
    kvs_tensor *all[] = {qpos, q, out, srows, prow, amax, ks, vs, kpos, klen, kmv, pv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(&all[i]);
    return s;
}

/* Runs layer l on rows [0, n) of ws.x (their token indices in rows[]). */
static kvs_status run_layer(fwd_ctx *f, int l, const int32_t *rows, int64_t n, kvs_layer_stats *st) {
    kvs_model *m = f->m;
    const kvs_model_hparams *hp = &m->hp;
    const kvs_layer_tensors *w = &m->layers[l];
    kvs_workspace *ws = &m->ws;
    kvs_device *d = m->dev;
    const kvs_layer_plan *lp = f->lp;
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
    if (s == KVS_OK && !(f->pos_n > 0 && rows_equal(rows, n, f->pos_rows, f->pos_n))) {
        for (int64_t i = 0; i < n; i++) f->tmp[i] = f->pos_host[rows[i]];
        s = kvs_tensor_upload(pos, f->tmp, 0, (size_t)n * 4);
        memcpy(f->pos_rows, rows, (size_t)n * sizeof *rows);
        f->pos_n = s == KVS_OK ? n : 0;
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
    f.pos_rows = malloc((size_t)n_tok * sizeof *f.pos_rows);
    kvs_status s = KVS_OK;
    if (!f.pos_host || !f.all_rows || !f.tmp || !f.pos_rows) {
        s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        goto done;
    }
    for (int64_t i = 0; i < n_tok; i++) {
        f.all_rows[i] = (int32_t)i;
        if (plan->positions) {
            f.pos_host[i] = plan->positions[i];
        } else if (cp->mode == KVS_CACHE_APPEND) {
            f.pos_host[i] = (int32_t)(kvs_cache_next_pos(c) + i);
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
    /* a plan hook may replace the plans of the layers after its own (Elastic-Cache drift test) */
    const kvs_layer_plan *over = NULL;
    int over_from = 0;
    for (int l = 0; l < hp->n_layers && s == KVS_OK; l++) {
        const kvs_layer_plan *lp = over ? &over[l - over_from] : (plan->layers ? &plan->layers[l] : NULL);
        f.lp = lp;
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
        if (s == KVS_OK && lp && lp->hook) {
            const kvs_layer_plan *rest = lp->hook(lp->hook_user, l, &m->stats[l]);
            if (rest && l + 1 < hp->n_layers) {
                over = rest;
                over_from = l + 1;
            }
        }
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
    free(f.pos_rows);
    return s;
}
