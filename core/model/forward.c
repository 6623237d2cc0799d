/* The step-plan forward of a llama-family transformer (llama2.c run.c / llama.cpp llm_build_llama
 * dataflow; LLaDA uses the same blocks with bidirectional attention; qwen2/dream add q/k/v biases,
 * qwen3 a per-head q/k RMSNorm before RoPE, both with NEOX RoPE). See model.h.
 * The attention of a layer (dense or over a keep-set, with statistics and latent memory) is
 * forward_attention.c; the workspace helpers both use are declared in forward_internal.h. */
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "model/forward_internal.h"

/* ---- small helpers -------------------------------------------------------------------------- */

/* Views in the workspace's arena, tensor growth, host growth: see forward_internal.h. */
kvs_status fwd_view_nd(kvs_model *m, kvs_tensor **out, kvs_tensor *t, int64_t off, int ndim, const int64_t *ne) {
    kvs_workspace *ws = &m->ws;
    *out = NULL;
    if (ws->n_views >= KVS_WS_VIEWS)
        return kvs_error(KVS_ERR_STATE, "kvs_model_forward: internal error: more than %d views in one layer", KVS_WS_VIEWS);
    kvs_tensor *v = &ws->views[ws->n_views];
    KVS_TRY(kvs_tensor_view_into(v, t, off, ndim, ne));
    ws->n_views++;
    *out = v;
    return KVS_OK;
}

kvs_status fwd_view3(kvs_model *m, kvs_tensor **out, kvs_tensor *t, int64_t off, int64_t a, int64_t b, int64_t c) {
    int64_t ne[3] = {a, b, c};
    return fwd_view_nd(m, out, t, off, c > 1 ? 3 : (b > 1 ? 2 : 1), ne);
}

void fwd_view_done(kvs_tensor **v) { *v = NULL; }

kvs_status fwd_grow_tensor(kvs_tensor **t, kvs_device *dev, kvs_dtype dt, int64_t a, int64_t b, int64_t c,
                           const char *name) {
    kvs_tensor_destroy(t);
    KVS_TRY(kvs_tensor_new(t, dev, dt, a, b, c, 0));
    kvs_tensor_set_name(*t, name);
    return KVS_OK;
}

void kvs_workspace_free(kvs_workspace *ws) {
    kvs_tensor **all[] = {&ws->x, &ws->xn, &ws->q, &ws->att, &ws->k, &ws->v, &ws->gate, &ws->up, &ws->pos, &ws->rpos, &ws->mpos,
                          &ws->rowsel, &ws->zeros, &ws->stat_rows, &ws->lat_max, &ws->lat_sum, &ws->argmax, &ws->logits,
                          &ws->key_mass, &ws->probs, &ws->probe_rows, &ws->ks, &ws->vs, &ws->ks_pos, &ws->ks_len,
                          &ws->keep_idx, &ws->qr, &ws->ks_lo, &ws->vs_lo, &ws->spa_a, &ws->spa_b, &ws->spa_idx,
                          &ws->tk_stat, &ws->tk_out, &ws->tk_am, &ws->tk_probs, &ws->tk_v, &ws->tk_idx, &ws->tk_km,
                          &ws->tk_qg, &ws->tk_qi, &ws->tk_si};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(all[i]);
    free(ws->h_q);
    free(ws->h_tk), free(ws->h_tk_am), free(ws->h_tk_merge), free(ws->h_tk_qi), free(ws->h_tk_si);
    free(ws->h_pos), free(ws->h_rows), free(ws->h_pos_rows), free(ws->h_tmp), free(ws->h_keep), free(ws->h_spa);
    memset(ws, 0, sizeof *ws);
}

static kvs_status ws_rows(kvs_model *m, int64_t rows) {
    kvs_workspace *ws = &m->ws;
    if (rows <= ws->rows) return KVS_OK;
    const kvs_model_hparams *hp = &m->hp;
    kvs_device *d = m->dev;
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    KVS_TRY(fwd_grow_tensor(&ws->x, d, KVS_F32, hp->dim, rows, 0, "ws.x"));
    KVS_TRY(fwd_grow_tensor(&ws->xn, d, KVS_F32, hp->dim, rows, 0, "ws.xn"));
    KVS_TRY(fwd_grow_tensor(&ws->q, d, KVS_F32, qd, rows, 0, "ws.q"));
    KVS_TRY(fwd_grow_tensor(&ws->att, d, KVS_F32, qd, rows, 0, "ws.att"));
    KVS_TRY(fwd_grow_tensor(&ws->k, d, KVS_F32, kd, rows, 0, "ws.k"));
    KVS_TRY(fwd_grow_tensor(&ws->v, d, KVS_F32, kd, rows, 0, "ws.v"));
    KVS_TRY(fwd_grow_tensor(&ws->gate, d, KVS_F32, hp->ffn_dim, rows, 0, "ws.gate"));
    KVS_TRY(fwd_grow_tensor(&ws->up, d, KVS_F32, hp->ffn_dim, rows, 0, "ws.up"));
    KVS_TRY(fwd_grow_tensor(&ws->pos, d, KVS_I32, rows, 0, 0, "ws.pos"));
    KVS_TRY(fwd_grow_tensor(&ws->rpos, d, KVS_I32, rows, 0, 0, "ws.rpos"));
    KVS_TRY(fwd_grow_tensor(&ws->mpos, d, KVS_I32, rows, 0, 0, "ws.mpos"));
    KVS_TRY(fwd_grow_tensor(&ws->rowsel, d, KVS_I32, rows, 0, 0, "ws.rowsel"));
    KVS_TRY(fwd_grow_tensor(&ws->zeros, d, KVS_I32, rows, 0, 0, "ws.zeros"));
    int32_t *z = calloc((size_t)rows, sizeof *z);
    if (!z) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
    kvs_status zs = kvs_tensor_upload(ws->zeros, z, 0, (size_t)rows * sizeof *z);
    free(z);
    KVS_TRY(zs);
    KVS_TRY(fwd_grow_tensor(&ws->stat_rows, d, KVS_I32, rows, 0, 0, "ws.stat_rows"));
    KVS_TRY(fwd_grow_tensor(&ws->argmax, d, KVS_I32, hp->n_heads, rows, 0, "ws.argmax"));
    ws->rows = rows;
    return KVS_OK;
}

int fwd_rows_valid(const int32_t *rows, int64_t n, int64_t limit) {
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= limit || (i > 0 && rows[i] <= rows[i - 1])) return 0;
    return 1;
}

static int rows_equal(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    return na == nb && (a == b || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

kvs_status fwd_host_grow(void **p, int64_t *cap, int64_t n, size_t elem) {
    if (n <= *cap) return KVS_OK;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
    *p = q;
    *cap = n;
    return KVS_OK;
}

/* ---- the forward ---------------------------------------------------------------------------- */


/* Writes this layer's new K/V (ws.k/ws.v rows [0, n), token-major) into the cache; rpos: the rows'
 * RoPE positions (host [n]) when they are assigned within the cache, else NULL. */
static kvs_status write_cache(fwd_ctx *f, int l, const int32_t *rows, int64_t n, const int32_t *rpos) {
    kvs_model *m = f->m;
    int H = m->hp.n_kv_heads;
    for (int64_t i = 0; i < n; i++) f->tmp[i] = f->pos_host[rows[i]];
    kvs_tensor *ksrc = NULL, *vsrc = NULL;
    kvs_status s = fwd_view3(m, &ksrc, m->ws.k, 0, m->hp.head_dim, H, n);
    if (s == KVS_OK) s = fwd_view3(m, &vsrc, m->ws.v, 0, m->hp.head_dim, H, n);
    if (s == KVS_OK) s = kvs_cache_write_rows_rope(f->c, l, ksrc, vsrc, f->tmp, rpos, n);
    fwd_view_done(&ksrc);
    fwd_view_done(&vsrc);
    return s;
}

/* y = x W^T (+ b broadcast to every row when b is not NULL: the bias row is gathered into y's n rows,
 * then the product accumulates onto it). */
static kvs_status linear(kvs_model *m, const kvs_tensor *W, const kvs_tensor *b, const kvs_tensor *x, kvs_tensor *y,
                         int64_t n) {
    if (!b) return kvs_matmul(m->dev, W, x, y, 0);
    kvs_tensor *idx = NULL;
    kvs_status s = fwd_view3(m, &idx, m->ws.zeros, 0, n, 1, 1);
    if (s == KVS_OK) s = kvs_gather(m->dev, b, idx, y);
    if (s == KVS_OK) s = kvs_matmul(m->dev, W, x, y, 1);
    fwd_view_done(&idx);
    return s;
}

/* Runs layer l on rows [0, n) of ws.x (their token indices in rows[]). */
static kvs_status run_layer(fwd_ctx *f, int l, const int32_t *rows, int64_t n, kvs_layer_stats *st) {
    kvs_model *m = f->m;
    const kvs_model_hparams *hp = &m->hp;
    const kvs_layer_tensors *w = f->plan->kv_draft && m->draft_layers ? &m->draft_layers[l] : &m->layers[l];
    kvs_workspace *ws = &m->ws;
    kvs_device *d = m->dev;
    const kvs_layer_plan *lp = f->lp;
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    kvs_tensor *x = NULL, *xn = NULL, *q = NULL, *k = NULL, *v = NULL, *att = NULL, *g = NULL, *u = NULL, *pos = NULL;
    kvs_tensor *q3 = NULL, *k3 = NULL, *rpos = NULL;
    /* RoPE positions within the cache (StreamingLLM): token t of the step at max_len + t of this
     * layer; rpos_host lies after the n entries write_cache fills in f->tmp */
    int32_t *rpos_host = f->plan->rope_in_cache ? f->tmp + n : NULL;
    kvs_status s = fwd_view3(m, &x, ws->x, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &xn, ws->xn, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &q, ws->q, 0, qd, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &k, ws->k, 0, kd, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &v, ws->v, 0, kd, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &att, ws->att, 0, qd, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &g, ws->gate, 0, hp->ffn_dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &u, ws->up, 0, hp->ffn_dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &pos, ws->pos, 0, n, 1, 1);
    if (s == KVS_OK) s = fwd_view3(m, &q3, ws->q, 0, hp->head_dim, hp->n_heads, n);
    if (s == KVS_OK) s = fwd_view3(m, &k3, ws->k, 0, hp->head_dim, hp->n_kv_heads, n);
    if (s == KVS_OK && !(f->pos_n > 0 && rows_equal(rows, n, f->pos_rows, f->pos_n))) {
        for (int64_t i = 0; i < n; i++) f->tmp[i] = f->pos_host[rows[i]];
        s = kvs_tensor_upload(pos, f->tmp, 0, (size_t)n * 4);
        memcpy(f->pos_rows, rows, (size_t)n * sizeof *rows);
        f->pos_n = s == KVS_OK ? n : 0;
    }
    if (s == KVS_OK && rpos_host) {
        int64_t base = kvs_cache_max_len(f->c, l);
        for (int64_t i = 0; i < n; i++) rpos_host[i] = (int32_t)(base + rows[i]);
        s = fwd_view3(m, &rpos, ws->rpos, 0, n, 1, 1);
        if (s == KVS_OK) s = kvs_tensor_upload(rpos, rpos_host, 0, (size_t)n * 4);
    }
    kvs_rope_params rp = kvs_rope_params_default();
    rp.mode = hp->rope_mode;
    rp.theta_base = hp->rope_base;
    rp.n_rot = hp->rope_dim;
    if (s == KVS_OK) s = kvs_rmsnorm(d, x, w->attn_norm, xn, hp->rms_eps);
    st->x = NULL;
    st->n_x_rows = 0;
    if (s == KVS_OK && lp && lp->want_x) { /* learned eviction: the rows' normalised input */
        s = fwd_host_grow((void **)&m->x_host[l], &m->x_cap[l], n * hp->dim, sizeof(float));
        if (s == KVS_OK) s = kvs_tensor_download(xn, m->x_host[l], 0, (size_t)(n * hp->dim) * sizeof(float));
        if (s == KVS_OK) {
            st->x = m->x_host[l];
            st->n_x_rows = n;
        }
    }
    if (s == KVS_OK) s = linear(m, w->wq, w->bq, xn, q, n);
    if (s == KVS_OK) s = linear(m, w->wk, w->bk, xn, k, n);
    if (s == KVS_OK) s = linear(m, w->wv, w->bv, xn, v, n);
    /* qwen3: each head's q and k RMS-normalised (weights [head_dim]) before RoPE */
    if (s == KVS_OK && w->q_norm) s = kvs_rmsnorm(d, q3, w->q_norm, q3, hp->rms_eps);
    if (s == KVS_OK && w->k_norm) s = kvs_rmsnorm(d, k3, w->k_norm, k3, hp->rms_eps);
    if (s == KVS_OK) s = kvs_rope(d, q3, rpos ? rpos : pos, &rp);
    if (s == KVS_OK) s = kvs_rope(d, k3, rpos ? rpos : pos, &rp);
    st->q = NULL;
    if (s == KVS_OK && lp && lp->want_q) { /* ThinK: the rotated queries */
        int64_t nq = n * hp->n_heads * hp->head_dim;
        s = fwd_host_grow((void **)&m->q_host[l], &m->q_cap[l], nq, sizeof(float));
        if (s == KVS_OK) s = kvs_tensor_download(q3, m->q_host[l], 0, (size_t)nq * sizeof(float));
        if (s == KVS_OK) {
            st->q = m->q_host[l];
            st->n_x_rows = n;
        }
    }
    if (s == KVS_OK) s = write_cache(f, l, rows, n, rpos_host);
    f->rows = rows;
    if (s == KVS_OK) s = fwd_layer_attention(f, l, lp, n, st);
    if (s == KVS_OK) s = kvs_matmul(d, w->wo, att, x, 1);
    if (s == KVS_OK) s = kvs_rmsnorm(d, x, w->ffn_norm, xn, hp->rms_eps);
    if (s == KVS_OK) s = kvs_matmul(d, w->w_gate, xn, g, 0);
    if (s == KVS_OK) s = kvs_matmul(d, w->w_up, xn, u, 0);
    if (s == KVS_OK) s = kvs_swiglu(d, g, u, g);
    if (s == KVS_OK) s = kvs_matmul(d, w->w_down, g, x, 1);
    kvs_tensor *all[] = {x, xn, q, k, v, att, g, u, pos, q3, k3, rpos};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fwd_view_done(&all[i]);
    return s;
}

/* Loads rows cur[0..nc) of the cache's kept layer inputs x[l] into ws.x (KVS_CACHE_KEEP_X). */
static kvs_status load_x(fwd_ctx *f, int l, const int32_t *cur, int64_t nc) {
    kvs_model *m = f->m;
    kvs_tensor *xc = kvs_cache_x(f->c, l);
    int64_t dim = m->hp.dim;
    kvs_tensor *idx = NULL, *dst = NULL, *src3 = NULL;
    kvs_status s = fwd_view3(m, &idx, m->ws.rowsel, 0, nc, 1, 1);
    for (int64_t i = 0; i < nc && s == KVS_OK; i++) f->tmp[i] = f->pos_host[cur[i]];
    if (s == KVS_OK) s = kvs_tensor_upload(idx, f->tmp, 0, (size_t)nc * 4);
    if (s == KVS_OK) s = fwd_view3(m, &dst, m->ws.x, 0, dim, nc, 1);
    int64_t xne[3] = {dim, kvs_tensor_ne(xc, 1), 1};
    if (s == KVS_OK) s = fwd_view_nd(m, &src3, xc, 0, 3, xne);
    if (s == KVS_OK) s = kvs_gather(m->dev, src3, idx, dst);
    fwd_view_done(&idx);
    fwd_view_done(&dst);
    fwd_view_done(&src3);
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
    kvs_status s = fwd_view3(m, &idx, m->ws.rowsel, 0, np, 1, 1);
    for (int64_t i = 0; i < np && s == KVS_OK; i++) f->tmp[i] = f->pos_host[prev[i]];
    if (s == KVS_OK) s = kvs_tensor_upload(idx, f->tmp, 0, (size_t)np * 4);
    if (s == KVS_OK) s = fwd_view3(m, &src, m->ws.x, 0, dim, np, 1);
    int64_t xne[3] = {dim, kvs_tensor_ne(xc, 1), 1};
    if (s == KVS_OK) s = fwd_view_nd(m, &dst3, xc, 0, 3, xne);
    if (s == KVS_OK) s = kvs_scatter(m->dev, src, idx, dst3, 0);
    fwd_view_done(&idx);
    fwd_view_done(&src);
    fwd_view_done(&dst3);
    if (s == KVS_OK && load) s = load_x(f, l, cur, nc);
    return s;
}

/* Logits that are NaN or infinite mean the weights or the activations are (the loader does not scan
 * a multi-GB file's weights): an error, never a token chosen from them. One pass over the bits, a
 * vanishing cost next to the output product that made them. */
/* rows: the plan's logit rows (indices into its tokens); positions: the plan's token positions (NULL:
 * the row index is the position), so the message names the token's position in the sequence. */
static kvs_status check_finite(const float *lg, int64_t nl, int64_t V, const int32_t *rows, const int32_t *positions) {
    const uint32_t *u = (const uint32_t *)(const void *)lg;
    const int64_t n = nl * V;
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (uint32_t)((u[i] & 0x7f800000u) == 0x7f800000u);
    if (!bad) return KVS_OK;
    int64_t i = 0;
    while ((u[i] & 0x7f800000u) != 0x7f800000u) i++;
    return kvs_error(KVS_ERR_NUMERIC,
                     "kvs_model_forward: the logits of position %d hold %s at token id %lld: the model's weights or its "
                     "activations are not finite (a damaged file, or values beyond the activation type's range)",
                     positions ? positions[rows[i / V]] : rows[i / V], isnan(lg[i]) ? "NaN" : "infinity", (long long)(i % V));
}

/* SPA-Cache proxy scores of the rows[0..n) in ws.x at layer l, into m->proxy_host [n][*rank]:
 * (rmsnorm(x) * attn_norm) Wp^T with the layer's proxy (kvs_model_spa_proxy) of lp's rank and key;
 * the scores pass through ws.att (rank <= n_kv_heads*head_dim <= its row width). */
static kvs_status proxy_scores(fwd_ctx *f, int l, const kvs_layer_plan *lp, int64_t n, int *rank_out) {
    kvs_model *m = f->m;
    const kvs_model_hparams *hp = &m->hp;
    const int rank = lp->proxy_rank < 0 ? kvs_model_spa_rank_auto(m) : lp->proxy_rank;
    const kvs_spa_proxy *px = NULL;
    KVS_TRY(kvs_model_proxy_get(m, l, rank, lp->proxy_key, &px));
    kvs_tensor *x = NULL, *xn = NULL, *pr = NULL;
    kvs_status s = fwd_view3(m, &x, m->ws.x, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &xn, m->ws.xn, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &pr, m->ws.att, 0, rank, n, 1);
    if (s == KVS_OK) s = kvs_rmsnorm(m->dev, x, m->layers[l].attn_norm, xn, hp->rms_eps);
    if (s == KVS_OK) s = kvs_matmul(m->dev, px->w, xn, pr, 0);
    if (s == KVS_OK) s = fwd_host_grow((void **)&m->proxy_host, &m->proxy_host_cap, n * rank, sizeof(float));
    if (s == KVS_OK) s = kvs_tensor_download(pr, m->proxy_host, 0, (size_t)(n * rank) * sizeof(float));
    fwd_view_done(&x);
    fwd_view_done(&xn);
    fwd_view_done(&pr);
    *rank_out = rank;
    return s;
}

/* SPA-Cache row selection (kvs_layer_plan.select): the candidate rows *rows[0..*n) sit in ws.x and in
 * the cache's kept inputs x[l]; their proxy scores xn Wp^T go to the callback, and the rows it
 * chooses are loaded into ws.x (nothing moves when it keeps the candidates). */
static kvs_status select_rows(fwd_ctx *f, int l, const kvs_layer_plan *lp, const int32_t **rows, int64_t *n) {
    const char *op = "kvs_model_forward";
    kvs_model *m = f->m;
    if (!kvs_cache_x(f->c, l))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d selects its rows (select) but the cache keeps no layer inputs "
                         "(KVS_CACHE_KEEP_X)", op, l);
    int64_t nc = *n;
    int rank = 0;
    KVS_TRY(proxy_scores(f, l, lp, nc, &rank));
    const int32_t *sel = NULL;
    int64_t ns = 0;
    KVS_TRY(lp->select(lp->select_user, l, *rows, nc, m->proxy_host, rank, &sel, &ns));
    if (!sel || ns < 1 || !fwd_rows_valid(sel, ns, f->n_tok))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d: the selected rows must be >= 1 strictly increasing token "
                         "indices in [0, %lld)", op, l, (long long)f->n_tok);
    for (int64_t i = 0; i < lp->n_stat_rows; i++)
        if (lp->stat_rows[i] >= ns)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d stat row %d outside its %lld selected rows", op, l,
                             lp->stat_rows[i], (long long)ns);
    for (int64_t i = 0; i < lp->n_probe; i++)
        if (lp->probe_rows[i] >= ns)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d probe row %d outside its %lld selected rows", op, l,
                             lp->probe_rows[i], (long long)ns);
    if (!rows_equal(sel, ns, *rows, nc)) KVS_TRY(load_x(f, l, sel, ns));
    *rows = sel;
    *n = ns;
    return KVS_OK;
}

/* ---- SPA-Cache residual mode (kvs_layer_plan.spa_delta) --------------------------------------- */

/* Uploads host ints v[0..n) into a view of the device index buffer t; *out: that view. */
static kvs_status spa_upload_idx(fwd_ctx *f, kvs_tensor *t, const int32_t *v, int64_t n, kvs_tensor **out) {
    kvs_status s = fwd_view3(f->m, out, t, 0, n, 1, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(*out, v, 0, (size_t)n * 4);
    return s;
}

/* The selection of a spa_delta layer: the candidates rows[0..n) sit in ws.x; their proxy scores
 * (rmsnorm(x) * attn_norm) Wp^T (reference spac/llada/hooks.py block_forward: check_update on
 * x_normed, s_proj = the proxy) go to lp->select, whose rows must be a subset of the candidates
 * (0 rows allowed). *sel / *ns: the chosen rows (token indices); sp[0..ns): their indices among the
 * candidates. Without select: every candidate. */
static kvs_status spa_delta_select(fwd_ctx *f, int l, const kvs_layer_plan *lp, const int32_t *rows, int64_t n,
                                   const int32_t **sel, int64_t *ns, int32_t *sp) {
    const char *op = "kvs_model_forward";
    kvs_model *m = f->m;
    *sel = rows;
    *ns = n;
    if (!lp->select) {
        for (int64_t i = 0; i < n; i++) sp[i] = (int32_t)i;
        return KVS_OK;
    }
    int rank = 0;
    KVS_TRY(proxy_scores(f, l, lp, n, &rank));
    const int32_t *r = NULL;
    int64_t nr = 0;
    KVS_TRY(lp->select(lp->select_user, l, rows, n, m->proxy_host, rank, &r, &nr));
    if (nr < 0 || nr > n || (nr > 0 && !r))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d (spa_delta): the selection must be 0..%lld of the candidate rows",
                         op, l, (long long)n);
    int64_t j = 0;
    for (int64_t i = 0; i < nr; i++) {
        while (j < n && rows[j] < r[i]) j++;
        if (j == n || rows[j] != r[i] || (i > 0 && r[i] <= r[i - 1]))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d (spa_delta): the selected rows must be strictly "
                             "increasing candidate rows (row %d is not)", op, l, r[i]);
        sp[i] = (int32_t)j++;
    }
    if (lp->n_stat_rows > 0 || lp->n_probe > 0 || lp->stat_all_rows || lp->want_argmax || lp->keep || lp->want_x ||
        lp->want_q || lp->latent)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d: spa_delta takes no statistics, keep-sets, latent memory, "
                         "want_x or want_q", op, l);
    *sel = r;
    *ns = nr;
    return KVS_OK;
}

/* Layer l in SPA-Cache's residual mode on the candidates rows[0..n) of ws.x (see kvs_layer_plan.
 * spa_delta; reference spac/llada/hooks.py block_forward + spac/cache.py get_kv_heads,
 * get_ff_output). The selected rows' x_out = (x_in + attn) + ffn (the plain layer's arithmetic;
 * the reference adds attn + ffn, then x_in); their delta attn + ffn goes to the store; every other
 * candidate gets x_in + its stored delta. *n_sel: the rows that ran attention and FFN. */
static kvs_status run_layer_delta(fwd_ctx *f, int l, const kvs_layer_plan *lp, const int32_t *rows, int64_t n,
                                  int64_t *n_sel, kvs_layer_stats *st) {
    kvs_model *m = f->m;
    const kvs_model_hparams *hp = &m->hp;
    const kvs_layer_tensors *w = f->plan->kv_draft && m->draft_layers ? &m->draft_layers[l] : &m->layers[l];
    kvs_workspace *ws = &m->ws;
    kvs_device *d = m->dev;
    const int64_t dim = hp->dim, qd = (int64_t)hp->n_heads * hp->head_dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim;
    kvs_tensor *store = kvs_cache_layer_delta(f->c, l);
    *n_sel = 0;
    if (!store)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_forward: layer %d runs in SPA residual mode (spa_delta) but the "
                         "cache keeps no residual deltas (KVS_CACHE_KEEP_DELTA)", l);
    if (f->plan->rope_in_cache)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_forward: spa_delta with rope_in_cache is not supported");
    if (ws->spa_rows < ws->rows) {
        KVS_TRY(fwd_grow_tensor(&ws->spa_a, d, KVS_F32, dim, ws->rows, 0, "ws.spa_a"));
        KVS_TRY(fwd_grow_tensor(&ws->spa_b, d, KVS_F32, dim, ws->rows, 0, "ws.spa_b"));
        KVS_TRY(fwd_grow_tensor(&ws->spa_idx, d, KVS_I32, ws->rows, 0, 0, "ws.spa_idx"));
        ws->spa_rows = ws->rows;
    }
    /* sp: the selected rows' indices among the candidates, after f->tmp's 2n entries */
    KVS_TRY(fwd_host_grow((void **)&ws->h_spa, &ws->h_spa_cap, n, sizeof *ws->h_spa));
    int32_t *sp = ws->h_spa;
    const int32_t *sel = NULL;
    int64_t ns = 0;
    KVS_TRY(spa_delta_select(f, l, lp, rows, n, &sel, &ns, sp));
    const int all = ns == n;
    kvs_tensor *x = NULL, *xn = NULL, *k = NULL, *v = NULL, *k3 = NULL, *pos = NULL;
    kvs_status s = fwd_view3(m, &x, ws->x, 0, dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &xn, ws->xn, 0, dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &k, ws->k, 0, kd, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &v, ws->v, 0, kd, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &k3, ws->k, 0, hp->head_dim, hp->n_kv_heads, n);
    if (s == KVS_OK) s = fwd_view3(m, &pos, ws->pos, 0, n, 1, 1);
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
    /* every candidate: K/V from its fresh input (get_kv_heads writes the whole generation's K/V) */
    if (s == KVS_OK) s = kvs_rmsnorm(d, x, w->attn_norm, xn, hp->rms_eps);
    if (s == KVS_OK) s = linear(m, w->wk, w->bk, xn, k, n);
    if (s == KVS_OK) s = linear(m, w->wv, w->bv, xn, v, n);
    if (s == KVS_OK && w->k_norm) s = kvs_rmsnorm(d, k3, w->k_norm, k3, hp->rms_eps);
    if (s == KVS_OK) s = kvs_rope(d, k3, pos, &rp);
    if (s == KVS_OK) s = write_cache(f, l, rows, n, NULL);
    st->x = NULL;
    st->q = NULL;
    st->n_x_rows = 0;
    kvs_tensor *idx = NULL, *xs = NULL, *xns = NULL, *q = NULL, *q3 = NULL, *att = NULL, *a = NULL, *g = NULL, *u = NULL,
               *ff = NULL, *dst = NULL, *pidx = NULL, *spos = NULL;
    if (s == KVS_OK && ns > 0) {
        /* the selected rows: their input (xs) and normalised input (xns), gathered unless all */
        if (all) {
            xs = x;
            xns = xn;
        } else {
            s = spa_upload_idx(f, ws->rowsel, sp, ns, &idx);
            if (s == KVS_OK) s = fwd_view3(m, &xs, ws->spa_b, 0, dim, ns, 1);
            if (s == KVS_OK) s = fwd_view3(m, &xns, ws->spa_a, 0, dim, ns, 1);
            if (s == KVS_OK) s = kvs_gather(d, x, idx, xs);
            if (s == KVS_OK) s = kvs_gather(d, xn, idx, xns);
        }
        if (s == KVS_OK) s = fwd_view3(m, &q, ws->q, 0, qd, ns, 1);
        if (s == KVS_OK) s = fwd_view3(m, &q3, ws->q, 0, hp->head_dim, hp->n_heads, ns);
        if (s == KVS_OK) s = linear(m, w->wq, w->bq, xns, q, ns);
        if (s == KVS_OK && w->q_norm) s = kvs_rmsnorm(d, q3, w->q_norm, q3, hp->rms_eps);
        if (s == KVS_OK && !all) { /* ws.pos: the selected rows' positions, for the queries */
            for (int64_t i = 0; i < ns; i++) f->tmp[i] = f->pos_host[sel[i]];
            s = spa_upload_idx(f, ws->pos, f->tmp, ns, &spos);
            memcpy(f->pos_rows, sel, (size_t)ns * sizeof *sel);
            f->pos_n = s == KVS_OK ? ns : 0;
        }
        if (s == KVS_OK) s = kvs_rope(d, q3, all ? pos : spos, &rp);
        f->rows = sel;
        if (s == KVS_OK) s = fwd_layer_attention(f, l, lp, ns, st);
        /* attn delta a, x1 = xs + a, ffn delta ff, x2 = x1 + ff, stored delta a + ff */
        if (s == KVS_OK) s = fwd_view3(m, &att, ws->att, 0, qd, ns, 1);
        if (s == KVS_OK) s = fwd_view3(m, &a, ws->spa_a, 0, dim, ns, 1);
        if (s == KVS_OK) s = kvs_matmul(d, w->wo, att, a, 0);
        if (s == KVS_OK) s = kvs_add(d, xs, a, xs);
        if (s == KVS_OK) s = fwd_view3(m, &ff, ws->xn, 0, dim, ns, 1);
        if (s == KVS_OK) s = kvs_rmsnorm(d, xs, w->ffn_norm, ff, hp->rms_eps);
        if (s == KVS_OK) s = fwd_view3(m, &g, ws->gate, 0, hp->ffn_dim, ns, 1);
        if (s == KVS_OK) s = fwd_view3(m, &u, ws->up, 0, hp->ffn_dim, ns, 1);
        if (s == KVS_OK) s = kvs_matmul(d, w->w_gate, ff, g, 0);
        if (s == KVS_OK) s = kvs_matmul(d, w->w_up, ff, u, 0);
        if (s == KVS_OK) s = kvs_swiglu(d, g, u, g);
        if (s == KVS_OK) s = kvs_matmul(d, w->w_down, g, ff, 0);
        if (s == KVS_OK) s = kvs_add(d, xs, ff, xs);
        if (s == KVS_OK) s = kvs_add(d, a, ff, a);
        /* the store: rows at the selected positions */
        for (int64_t i = 0; i < ns; i++) f->tmp[i] = f->pos_host[sel[i]];
        int64_t sne[3] = {dim, kvs_tensor_ne(store, 1), 1};
        if (s == KVS_OK) s = spa_upload_idx(f, ws->spa_idx, f->tmp, ns, &pidx);
        if (s == KVS_OK) s = fwd_view_nd(m, &dst, store, 0, 3, sne);
        if (s == KVS_OK) s = kvs_scatter(d, a, pidx, dst, 0);
        fwd_view_done(&pidx);
    }
    if (s == KVS_OK && !all) {
        /* every candidate: x += its stored delta (get_ff_output: cached ff_output + attn_input);
         * then the selected rows take their own x2 */
        kvs_tensor *dl = NULL;
        int64_t sne[3] = {dim, kvs_tensor_ne(store, 1), 1};
        for (int64_t i = 0; i < n; i++) f->tmp[i] = f->pos_host[rows[i]];
        s = spa_upload_idx(f, ws->spa_idx, f->tmp, n, &pidx);
        if (s == KVS_OK && !dst) s = fwd_view_nd(m, &dst, store, 0, 3, sne);
        if (s == KVS_OK) s = fwd_view3(m, &dl, ws->spa_a, 0, dim, n, 1);
        if (s == KVS_OK) s = kvs_gather(d, dst, pidx, dl);
        if (s == KVS_OK) s = kvs_add(d, x, dl, x);
        if (s == KVS_OK && ns > 0) s = kvs_scatter(d, xs, idx, x, 0);
        fwd_view_done(&dl);
    }
    *n_sel = ns;
    kvs_tensor *vw[] = {x, xn, k, v, k3, pos, idx, q, q3, att, a, g, u, ff, dst, pidx, spos};
    for (size_t i = 0; i < sizeof vw / sizeof vw[0]; i++) fwd_view_done(&vw[i]);
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
    double t0 = kvs_now_s();
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
        KVS_TRY(fwd_grow_tensor(&ws->logits, m->dev, KVS_F32, hp->vocab, nl, 0, "ws.logits"));
        ws->logit_rows = nl;
    }
    kvs_tensor *idx = NULL, *x3 = NULL, *xn3 = NULL, *xn = NULL, *lg = NULL;
    kvs_status s = fwd_view3(m, &idx, ws->rowsel, 0, nl, 1, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(idx, sel, 0, (size_t)nl * 4);
    if (s == KVS_OK) s = fwd_view3(m, &x3, ws->x, 0, hp->dim, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &xn3, ws->xn, 0, hp->dim, nl, 1);
    if (s == KVS_OK) s = kvs_gather(m->dev, x3, idx, xn3);
    if (s == KVS_OK) s = fwd_view3(m, &xn, ws->xn, 0, hp->dim, nl, 1);
    if (s == KVS_OK) s = kvs_rmsnorm(m->dev, xn3, m->out_norm, xn, hp->rms_eps);
    if (s == KVS_OK) s = fwd_view3(m, &lg, ws->logits, 0, hp->vocab, nl, 1);
    const kvs_tensor *head = plan->kv_draft && m->draft_output ? m->draft_output : m->output; /* draft weights */
    if (s == KVS_OK) s = kvs_matmul(m->dev, head, xn, lg, 0);
    if (s == KVS_OK) s = fwd_host_grow((void **)&m->logits_host, &m->logits_host_cap, nl * hp->vocab, sizeof(float));
    if (s == KVS_OK) s = kvs_tensor_download(lg, m->logits_host, 0, (size_t)nl * hp->vocab * 4);
    if (s == KVS_OK) s = check_finite(m->logits_host, nl, hp->vocab, plan->logit_rows, plan->positions);
    if (s == KVS_OK) res->logits = m->logits_host;
    kvs_tensor *all[] = {idx, x3, xn3, xn, lg};
    for (size_t i = 0; i < 5; i++) fwd_view_done(&all[i]);
    res->seconds_logits = kvs_now_s() - t0;
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
    if (plan->rope_in_cache && cp->mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: RoPE positions within the cache (rope_in_cache) need an APPEND cache", op);

    fwd_ctx f = {.m = m, .c = c, .plan = plan, .n_tok = n_tok};
    int64_t tmp_n = n_tok * (cp->n_kv_heads > 2 ? cp->n_kv_heads : 2) + plan->n_logit_rows + 16;
    kvs_workspace *ws = &m->ws;
    kvs_status s = fwd_host_grow((void **)&ws->h_pos, &ws->h_pos_cap, n_tok, sizeof *ws->h_pos);
    if (s == KVS_OK) s = fwd_host_grow((void **)&ws->h_rows, &ws->h_rows_cap, n_tok, sizeof *ws->h_rows);
    if (s == KVS_OK) s = fwd_host_grow((void **)&ws->h_pos_rows, &ws->h_pos_rows_cap, n_tok, sizeof *ws->h_pos_rows);
    if (s == KVS_OK) s = fwd_host_grow((void **)&ws->h_tmp, &ws->h_tmp_cap, tmp_n, sizeof *ws->h_tmp);
    if (s != KVS_OK) goto done;
    f.pos_host = ws->h_pos;
    f.all_rows = ws->h_rows;
    f.tmp = ws->h_tmp;
    f.pos_rows = ws->h_pos_rows;
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
        if (plan->key_limit && plan->key_limit[i] <= f.pos_host[i]) {
            s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: token %lld at position %d has key_limit %d: a query must see its own "
                          "key (key_limit > position)", op, (long long)i, f.pos_host[i], plan->key_limit[i]);
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
        m->ws.n_views = 0;
        kvs_device_profile_layer(m->dev, l);
        const kvs_layer_plan *lp = over ? &over[l - over_from] : (plan->layers ? &plan->layers[l] : NULL);
        f.lp = lp;
        const int32_t *rows;
        int64_t n;
        if (lp && lp->rows) {
            rows = lp->rows;
            n = lp->n_rows;
            if (n < 1 || !fwd_rows_valid(rows, n, n_tok)) {
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
            s = fwd_view3(m, &x, m->ws.x, 0, hp->dim, n, 1);
            kvs_device_profile_layer(m->dev, KVS_PROFILE_EMBED);
            if (s == KVS_OK) s = kvs_embedding(m->dev, m->tok_embd, ids, n, x);
            kvs_device_profile_layer(m->dev, 0);
            fwd_view_done(&x);
            if (s == KVS_OK && (cp->flags & KVS_CACHE_KEEP_X)) s = exchange_x(&f, 0, rows, n, NULL, 0, 0);
        } else if (cp->flags & KVS_CACHE_KEEP_X) {
            s = exchange_x(&f, l, prev, n_prev, rows, n, changed);
        }
        if (lp && lp->spa_delta) { /* SPA-Cache residual mode: the rows stay the candidates */
            int64_t ns = 0;
            if (s == KVS_OK) s = run_layer_delta(&f, l, lp, rows, n, &ns, &m->stats[l]);
            res->rows_computed += ns;
        } else {
            if (s == KVS_OK && lp && lp->select) s = select_rows(&f, l, lp, &rows, &n);
            if (s == KVS_OK) s = run_layer(&f, l, rows, n, &m->stats[l]);
            res->rows_computed += n;
        }
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
    m->ws.n_views = 0;
    kvs_device_profile_layer(m->dev, -1);
    if (s == KVS_OK) s = final_logits(&f, prev, n_prev, res);
    res->layers = m->stats;
done:
    return s;
}
