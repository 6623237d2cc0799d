/* One layer's attention in the forward: dense over the cache rows or over a keep-set gathered
 * from them (kvs_layer_plan.keep), or over ThinK's two key segments (pruned_attention), the
 * statistics the plan asks for (key mass, probe rows, argmax), and the latent-memory merge. See
 * model.h and forward.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"

static kvs_status ws_kv(kvs_model *m, int64_t kv_cap, int64_t n_probe) {
    kvs_workspace *ws = &m->ws;
    const kvs_model_hparams *hp = &m->hp;
    kvs_device *d = m->dev;
    if (kv_cap > ws->kv_cap) {
        KVS_TRY(fwd_grow_tensor(&ws->key_mass, d, KVS_F32, kv_cap, hp->n_kv_heads, 0, "ws.key_mass"));
        kvs_tensor_destroy(&ws->ks);
        kvs_tensor_destroy(&ws->vs);
        kvs_tensor_destroy(&ws->ks_lo);
        kvs_tensor_destroy(&ws->vs_lo);
        kvs_tensor_destroy(&ws->ks_pos);
        kvs_tensor_destroy(&ws->keep_idx);
        kvs_tensor_destroy(&ws->probs);
        ws->probe_cap = 0;
        ws->kv_cap = kv_cap;
    }
    if (n_probe > ws->probe_cap) {
        int64_t pc = n_probe < 8 ? 8 : n_probe;
        KVS_TRY(fwd_grow_tensor(&ws->probs, d, KVS_F32, ws->kv_cap, hp->n_heads, pc, "ws.probs"));
        KVS_TRY(fwd_grow_tensor(&ws->probe_rows, d, KVS_I32, pc, 0, 0, "ws.probe_rows"));
        ws->probe_cap = pc;
    }
    return KVS_OK;
}

/* Sparse keep-set attention (kvs_layer_plan.keep): gathers, for every kv head h, the cache rows
 * keep[h][0..n_keep[h]) into the workspace K/V (padded to the longest set with the head's last kept
 * row, hidden from the queries by the per-head kv_len) and uploads their positions and lengths; a
 * qh8 side's lower plane too (*kslo / *vslo, else NULL). On success *kmax is the longest set. */
static kvs_status gather_keep(fwd_ctx *f, int l, const kvs_layer_plan *lp, int64_t *kmax, kvs_tensor **ks,
                              kvs_tensor **vs, kvs_tensor **kslo, kvs_tensor **vslo, kvs_tensor **kpos, kvs_tensor **klen) {
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
        if (!fwd_rows_valid(kr, nk, len))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                             "kvs_model_forward: layer %d head %d keep-set must be strictly increasing cache rows < %lld", l, h,
                             (long long)len);
        if (nk > km) km = nk;
    }
    KVS_TRY(fwd_host_grow((void **)&ws->h_keep, &ws->h_keep_cap, (int64_t)H * km * 2 + H, sizeof *ws->h_keep));
    int32_t *idx = ws->h_keep, *pos = idx + (int64_t)H * km, *lenp = pos + (int64_t)H * km;
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
    /* the gathered rows keep the cache's types (block rows move with their scales; a qh8 side as its
     * q4_1 upper plane plus its lower plane) */
    kvs_dtype kt = kvs_tensor_dtype(kvs_cache_k(c, l)), vt = kvs_tensor_dtype(kvs_cache_v(c, l));
    kvs_tensor *klo = kvs_cache_k_lo(c, l), *vlo = kvs_cache_v_lo(c, l);
    if (!ws->ks || kvs_tensor_dtype(ws->ks) != kt || kvs_tensor_dtype(ws->vs) != vt || kvs_tensor_ne(ws->ks, 1) < ws->kv_cap) {
        s = fwd_grow_tensor(&ws->ks, m->dev, kt, cp->head_dim, ws->kv_cap, H, "ws.ks");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->vs, m->dev, vt, cp->head_dim, ws->kv_cap, H, "ws.vs");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->ks_pos, m->dev, KVS_I32, ws->kv_cap, H, 0, "ws.ks_pos");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->keep_idx, m->dev, KVS_I32, ws->kv_cap, H, 0, "ws.keep_idx");
    }
    if (s == KVS_OK && klo && !ws->ks_lo) s = fwd_grow_tensor(&ws->ks_lo, m->dev, KVS_QH8_LO, cp->head_dim, ws->kv_cap, H, "ws.ks_lo");
    if (s == KVS_OK && vlo && !ws->vs_lo) s = fwd_grow_tensor(&ws->vs_lo, m->dev, KVS_QH8_LO, cp->head_dim, ws->kv_cap, H, "ws.vs_lo");
    if (s == KVS_OK && !ws->ks_len) s = fwd_grow_tensor(&ws->ks_len, m->dev, KVS_I32, H, 0, 0, "ws.ks_len");
    kvs_tensor *iv = NULL;
    if (s == KVS_OK) s = fwd_view3(m, &iv, ws->keep_idx, 0, km, H, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(iv, idx, 0, (size_t)H * km * 4);
    if (s == KVS_OK) s = fwd_view3(m, ks, ws->ks, 0, cp->head_dim, km, H);
    if (s == KVS_OK) s = fwd_view3(m, vs, ws->vs, 0, cp->head_dim, km, H);
    if (s == KVS_OK) s = kvs_gather(m->dev, kvs_cache_k(c, l), iv, *ks);
    if (s == KVS_OK) s = kvs_gather(m->dev, kvs_cache_v(c, l), iv, *vs);
    if (s == KVS_OK && klo) s = fwd_view3(m, kslo, ws->ks_lo, 0, cp->head_dim, km, H);
    if (s == KVS_OK && klo) s = kvs_gather(m->dev, klo, iv, *kslo);
    if (s == KVS_OK && vlo) s = fwd_view3(m, vslo, ws->vs_lo, 0, cp->head_dim, km, H);
    if (s == KVS_OK && vlo) s = kvs_gather(m->dev, vlo, iv, *vslo);
    if (s == KVS_OK) s = fwd_view3(m, kpos, ws->ks_pos, 0, km, H, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(*kpos, pos, 0, (size_t)H * km * 4);
    if (s == KVS_OK) s = fwd_view3(m, klen, ws->ks_len, 0, H, 1, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(*klen, lenp, 0, (size_t)H * 4);
    fwd_view_done(&iv);
    *kmax = km;
    return s;
}

/* Whether layer l holds ThinK's pruned keys (kvs_cache_prune_keys): some kv head has pruned rows. */
static int pruned_on(kvs_kv_cache *c, int l) {
    if (kvs_cache_pruned_dim(c, l) < 1) return 0;
    for (int h = 0; h < kvs_cache_get_params(c)->n_kv_heads; h++)
        if (kvs_cache_pruned_rows(c, l, h) > 0) return 1;
    return 0;
}

/* Attention over ThinK's two key segments (cache.h, kvs_cache_prune_keys): the pruned rows [0, P[h])
 * (keys of d_k' channels, kvs_attention_params.q_channels, values kvs_cache_v's rows) and the tail,
 * the full-width rows appended since (kvs_cache_k [H][T][head_dim], its row j being cache row
 * P[h] + j; their values gathered from kvs_cache_v into ws.tk_v, causal only). Merged exactly through
 * lse_extra (ops.h): (1) the tail alone gives its log-normaliser lse_t; (2) the pruned rows with
 * lse_extra = lse_t give their exact share of out, key mass and probe rows (and lse_p), in the cache's
 * row space (the tail's rows there are 0: untouched after the zero fill, or written 0 as invalid);
 * (3) the tail again with lse_extra = lse_p, its key mass, probe rows and argmax in tail rows, moved
 * into cache rows P[h] + j on the device (kvs_scatter); out is the sum, argmax the one of the larger
 * row maximum (the pruned rows on ties: they are the lower rows). The pruned call reads q's kept
 * channels gathered into ws.tk_qg by an index kept per layer (ws.tk_qi). Per (step, layer) the host
 * sees nothing but the argmax merge when one is asked for (the log-normalisers come from the row max
 * and sum by kvs_log_mass on the device); index uploads happen when an eviction changed them. ap: the dense call's
 * parameters (cache positions, lengths, statistics, over the cache's capacity); out:
 * [n][n_heads][head_dim]. */
static kvs_status pruned_attention(fwd_ctx *f, int l, int64_t n, const kvs_tensor *q, kvs_tensor *out,
                                   const kvs_attention_params *ap) {
    kvs_model *m = f->m;
    kvs_kv_cache *c = f->c;
    kvs_workspace *ws = &m->ws;
    const kvs_model_hparams *hp = &m->hp;
    const int H = hp->n_kv_heads, NH = hp->n_heads, G = NH / H;
    const int64_t cap = kvs_cache_get_params(c)->capacity, nr = n * NH;
    const kvs_tensor *kt = kvs_cache_k(c, l), *vv = kvs_cache_v(c, l);
    const int64_t T = kvs_tensor_ne(kt, 1);
    int64_t n_probe = ap->probs ? kvs_tensor_nelements(ap->probe_rows) : 0, pmax = 0, P[256], A[256];
    if (H > 256) return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_model_forward: ThinK's pruned keys support at most 256 kv heads");
    for (int h = 0; h < H; h++) {
        P[h] = kvs_cache_pruned_rows(c, l, h);
        A[h] = kvs_cache_len(c, l, h) - P[h]; /* the tail's rows */
        if (P[h] > pmax) pmax = P[h];
    }
    kvs_status s = KVS_OK;
    if (ws->tk_rows < ws->rows) { /* grown with the per-token buffers, made on first use */
        ws->tk_rows = 0;
        s = fwd_grow_tensor(&ws->tk_stat, m->dev, KVS_F32, NH, ws->rows, 6, "ws.tk_stat");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->tk_out, m->dev, KVS_F32, (int64_t)NH * hp->head_dim, ws->rows, 0, "ws.tk_out");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->tk_am, m->dev, KVS_I32, NH, ws->rows, 0, "ws.tk_am");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->tk_qg, m->dev, KVS_F32, (int64_t)NH * hp->head_dim, ws->rows, 0, "ws.tk_qg");
        float *hf = s == KVS_OK ? realloc(ws->h_tk, sizeof(float) * 6 * (size_t)(ws->rows * NH)) : NULL;
        if (hf) ws->h_tk = hf;
        int32_t *hi = hf ? realloc(ws->h_tk_am, sizeof(int32_t) * 2 * (size_t)(ws->rows * NH)) : NULL;
        if (hi) ws->h_tk_am = hi;
        if (s == KVS_OK && (!hf || !hi)) s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
        if (s == KVS_OK) ws->tk_rows = ws->rows;
    }
    /* the tail's values (gathered), its key mass and probe rows: [H][T] shaped, grown with T */
    kvs_dtype vt = kvs_tensor_dtype(vv);
    if (s == KVS_OK && (ws->tk_cap < T || !ws->tk_v || kvs_tensor_dtype(ws->tk_v) != vt)) {
        ws->tk_cap = 0;
        s = fwd_grow_tensor(&ws->tk_v, m->dev, vt, hp->head_dim, T, H, "ws.tk_v");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->tk_idx, m->dev, KVS_I32, T, H, 0, "ws.tk_idx");
        if (s == KVS_OK) s = fwd_grow_tensor(&ws->tk_km, m->dev, KVS_F32, T, H, 0, "ws.tk_km");
        if (s == KVS_OK) ws->tk_cap = T;
        ws->tk_probs_n = 0;
    }
    if (s == KVS_OK && n_probe * NH * T > ws->tk_probs_n) {
        ws->tk_probs_n = 0;
        s = fwd_grow_tensor(&ws->tk_probs, m->dev, KVS_F32, T, NH, n_probe, "ws.tk_probs");
        if (s == KVS_OK) ws->tk_probs_n = n_probe * NH * T;
    }
    /* the per-layer index buffers (made on first use; the scatter rows with tk_cap) */
    const int64_t D = hp->head_dim, L = hp->n_layers;
    if (s == KVS_OK && !ws->tk_qi) {
        s = fwd_grow_tensor(&ws->tk_qi, m->dev, KVS_I32, NH * D, L, 0, "ws.tk_qi");
        int32_t *hq = s == KVS_OK ? malloc(sizeof(int32_t) * (size_t)(L * NH * D)) : NULL;
        if (hq) {
            memset(hq, 0xff, sizeof(int32_t) * (size_t)(L * NH * D)); /* -1: nothing uploaded yet */
            free(ws->h_tk_qi);
            ws->h_tk_qi = hq;
        } else if (s == KVS_OK) {
            kvs_tensor_destroy(&ws->tk_qi);
            s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
        }
    }
    if (s == KVS_OK && ws->tk_si_cap != ws->tk_cap) {
        const int64_t ne = L * (H + NH) * ws->tk_cap;
        ws->tk_si_cap = 0;
        s = fwd_grow_tensor(&ws->tk_si, m->dev, KVS_I32, (H + NH) * ws->tk_cap, L, 0, "ws.tk_si");
        int32_t *hs = s == KVS_OK ? realloc(ws->h_tk_si, sizeof(int32_t) * (size_t)ne) : NULL;
        if (hs) {
            memset(hs, 0xff, sizeof(int32_t) * (size_t)ne); /* -1: nothing uploaded yet */
            ws->h_tk_si = hs;
            ws->tk_si_cap = ws->tk_cap;
        } else if (s == KVS_OK) {
            s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_forward: out of host memory");
        }
    }
    KVS_TRY(s);
    kvs_tensor *st[6] = {NULL}, *out2 = NULL, *am2 = NULL, *pv2 = NULL, *vtail = NULL, *iv = NULL, *km2 = NULL;
    kvs_tensor *qsrc = NULL, *qdst = NULL, *qg = NULL, *qiv = NULL;
    for (int i = 0; i < 6 && s == KVS_OK; i++) s = fwd_view3(m, &st[i], ws->tk_stat, (int64_t)i * nr, NH, n, 1);
    if (s == KVS_OK) s = fwd_view3(m, &out2, ws->tk_out, 0, hp->head_dim, NH, n);
    if (s == KVS_OK && ap->argmax) s = fwd_view3(m, &am2, ws->tk_am, 0, NH, n, 1);
    if (s == KVS_OK && n_probe) s = fwd_view3(m, &pv2, ws->tk_probs, 0, T, NH, n_probe);
    if (s == KVS_OK) s = fwd_view3(m, &vtail, ws->tk_v, 0, hp->head_dim, T, H);
    if (s == KVS_OK) s = fwd_view3(m, &iv, ws->tk_idx, 0, T, H, 1);
    if (s == KVS_OK && ap->key_mass) s = fwd_view3(m, &km2, ws->tk_km, 0, T, H, 1);
    /* the tail's values: cache rows P[h] + j (rows past the tail repeat a valid row, never read) */
    int32_t *idx = NULL;
    if (s == KVS_OK) s = fwd_host_grow((void **)&ws->h_keep, &ws->h_keep_cap, (int64_t)H * T, sizeof *ws->h_keep);
    if (s == KVS_OK) {
        idx = ws->h_keep;
        for (int h = 0; h < H; h++)
            for (int64_t j = 0; j < T; j++) {
                int64_t r = P[h] + (j < A[h] ? j : (A[h] > 0 ? A[h] - 1 : 0));
                idx[h * T + j] = (int32_t)(r < cap ? r : cap - 1);
            }
        s = kvs_tensor_upload(iv, idx, 0, (size_t)(H * T) * 4);
    }
    if (s == KVS_OK) s = kvs_gather(m->dev, vv, iv, vtail);
    /* the queries' kept channels for the pruned rows: qg[i][g][t] = q[i][g][ch[g / G][t]], a gather of
     * 4-byte rows with one index list [n_heads][d_k'] shared by the n query rows, uploaded when it
     * changed (kvs_attention's q_channels does the same with temporaries made at every call) */
    const int dk = kvs_cache_pruned_dim(c, l);
    const int32_t *ch = kvs_cache_pruned_channels(c, l);
    if (s == KVS_OK && (!ch || dk < 1 || dk > D))
        s = kvs_error(KVS_ERR_STATE, "kvs_model_forward: layer %d's pruned keys have no channel list", l);
    if (s == KVS_OK) {
        int32_t *hq = ws->h_tk_qi + l * NH * D;
        int changed = 0;
        for (int g = 0; g < NH; g++)
            for (int t = 0; t < dk; t++) {
                const int32_t e = (int32_t)(g * D) + ch[(g / G) * dk + t];
                if (hq[g * dk + t] != e) hq[g * dk + t] = e, changed = 1;
            }
        s = fwd_view3(m, &qiv, ws->tk_qi, l * NH * D, NH * dk, 1, 1);
        if (s == KVS_OK && changed) s = kvs_tensor_upload(qiv, hq, 0, sizeof(int32_t) * (size_t)(NH * dk));
        if (s != KVS_OK) hq[0] = -1; /* uploaded or not, send it again next time */
    }
    if (s == KVS_OK) s = fwd_view3(m, &qsrc, ws->q, 0, 1, NH * D, n);
    if (s == KVS_OK) s = fwd_view3(m, &qdst, ws->tk_qg, 0, 1, NH * dk, n);
    if (s == KVS_OK) s = kvs_gather(m->dev, qsrc, qiv, qdst);
    if (s == KVS_OK) s = fwd_view3(m, &qg, ws->tk_qg, 0, dk, NH, n);
    float *h = ws->h_tk; /* host [rm_t, rs_t, rm_p, ...]: the argmax merge reads the row maxima */

    /* (1) the tail: its normaliser */
    kvs_attention_params a1 = kvs_attention_params_default();
    a1.scale = ap->scale;
    a1.causal = 1;
    a1.n_kv = T;
    a1.q_pos = ap->q_pos;
    a1.k_pos = kvs_cache_tail_pos_tensor(c, l);
    a1.kv_len = kvs_cache_tail_len_tensor(c, l);
    a1.row_max = st[0];
    a1.row_sum = st[1];
    if (s == KVS_OK) s = kvs_attention(m->dev, q, kt, vtail, out2, &a1);
    if (s == KVS_OK) s = kvs_log_mass(m->dev, st[0], st[1], st[4]); /* lse_t, on the device */
    /* (2) the pruned rows, normalised with the tail's mass, statistics in cache rows */
    kvs_attention_params a2 = *ap;
    a2.n_kv = pmax;
    a2.kv_len = kvs_cache_pruned_len_tensor(c, l);
    a2.scale = ap->scale > 0.0f ? ap->scale : (float)(1.0 / sqrt((double)D)); /* q's full width, as q_channels */
    a2.lse_extra = st[4];
    a2.row_max = st[2];
    a2.row_sum = st[3];
    a2.argmax = am2;
    if (s == KVS_OK) s = kvs_attention(m->dev, qg, kvs_cache_k_pruned(c, l), vv, out, &a2);
    if (s == KVS_OK) s = kvs_log_mass(m->dev, st[2], st[3], st[5]); /* lse_p */
    /* (3) the tail, normalised with the pruned rows' mass; statistics in tail rows */
    kvs_attention_params a3 = a1;
    a3.lse_extra = st[5];
    a3.row_max = a3.row_sum = NULL;
    a3.stat_rows = ap->stat_rows;
    a3.key_mass = km2;
    a3.probe_rows = pv2 ? ap->probe_rows : NULL;
    a3.probs = pv2;
    a3.argmax = ap->argmax;
    if (s == KVS_OK && km2) s = kvs_tensor_fill(km2, 0.0);
    if (s == KVS_OK) s = kvs_attention(m->dev, q, kt, vtail, out2, &a3);
    if (s == KVS_OK) s = kvs_add(m->dev, out, out2, out);
    /* the tail's statistics into cache rows P[h] + j (the pruned call left 0 there, so adding is
     * writing): on the device by kvs_scatter of 4-byte rows, key mass [1][H * cap] <- [1][H * T] at
     * h * cap + P[h] + j, probe rows [n_probe][n_heads * cap] <- [n_probe][n_heads * T] at g * cap +
     * P[g / G] + j (one index list shared by the probes; both uploaded when they changed). A tail row
     * j >= A[h] moves a 0 onto a 0 (the fill, or an invalid key's probability); all of them land in the
     * head's rows when P[h] + T <= cap; otherwise on the host. kv_cache.c does not rule that out: after a
     * kvs_cache_keep that left the heads different splits of pruned and tail rows, a write grows the
     * tail to the largest need (tail_grow), past what a head with more pruned rows has left (test_think.c,
     * test_think_tail_past_capacity, checks this merge against the dense full-width path). */
    int on_dev = 1;
    for (int hh = 0; hh < H; hh++)
        if (P[hh] + T > cap) on_dev = 0;
    if (s == KVS_OK && (km2 || n_probe) && on_dev) {
        int32_t *hs = ws->h_tk_si + l * (H + NH) * ws->tk_cap;
        int changed = 0;
        for (int r = 0; r < H + NH; r++) { /* r < H: key mass of head r; else query head r - H */
            const int32_t base = (int32_t)(r < H ? r * cap + P[r] : (r - H) * cap + P[(r - H) / G]);
            int32_t *hr = hs + r * T;
            for (int32_t j = 0; j < (int32_t)T; j++)
                if (hr[j] != base + j) hr[j] = base + j, changed = 1;
        }
        kvs_tensor *si = NULL, *a = NULL, *b = NULL;
        s = fwd_view3(m, &si, ws->tk_si, l * (H + NH) * ws->tk_cap, (H + NH) * T, 1, 1);
        if (s == KVS_OK && changed) s = kvs_tensor_upload(si, hs, 0, sizeof(int32_t) * (size_t)((H + NH) * T));
        if (s != KVS_OK) hs[0] = -1;
        if (s == KVS_OK && km2) {
            s = fwd_view3(m, &si, ws->tk_si, l * (H + NH) * ws->tk_cap, H * T, 1, 1);
            if (s == KVS_OK) s = fwd_view3(m, &a, ws->tk_km, 0, 1, H * T, 1);
            if (s == KVS_OK) s = fwd_view3(m, &b, ws->key_mass, 0, 1, H * cap, 1);
            if (s == KVS_OK) s = kvs_scatter(m->dev, a, si, b, 0);
        }
        if (s == KVS_OK && n_probe) {
            s = fwd_view3(m, &si, ws->tk_si, l * (H + NH) * ws->tk_cap + H * T, NH * T, 1, 1);
            if (s == KVS_OK) s = fwd_view3(m, &a, ws->tk_probs, 0, 1, NH * T, n_probe);
            if (s == KVS_OK) s = fwd_view3(m, &b, ws->probs, 0, 1, NH * cap, n_probe);
            if (s == KVS_OK) s = kvs_scatter(m->dev, a, si, b, 0);
        }
        fwd_view_done(&si), fwd_view_done(&a), fwd_view_done(&b);
    } else if (s == KVS_OK && (km2 || n_probe)) {
        const int64_t nk = km2 ? (int64_t)H * (cap + T) : 0, np = n_probe * NH * (cap + T);
        s = fwd_host_grow((void **)&ws->h_tk_merge, &ws->h_tk_merge_cap, nk > np ? nk : np, sizeof(float));
        float *buf = ws->h_tk_merge;
        if (s == KVS_OK && km2) {
            float *km = buf, *kt2 = buf + (int64_t)H * cap;
            s = kvs_tensor_download(ap->key_mass, km, 0, sizeof(float) * (size_t)(H * cap));
            if (s == KVS_OK) s = kvs_tensor_download(km2, kt2, 0, sizeof(float) * (size_t)(H * T));
            for (int hh = 0; s == KVS_OK && hh < H; hh++)
                for (int64_t j = 0; j < A[hh]; j++) km[hh * cap + P[hh] + j] += kt2[hh * T + j];
            if (s == KVS_OK) s = kvs_tensor_upload(ap->key_mass, km, 0, sizeof(float) * (size_t)(H * cap));
        }
        if (s == KVS_OK && n_probe) {
            const int64_t rows = n_probe * NH;
            float *pc = buf, *pt = buf + rows * cap;
            s = kvs_tensor_download(ap->probs, pc, 0, sizeof(float) * (size_t)(rows * cap));
            if (s == KVS_OK) s = kvs_tensor_download(pv2, pt, 0, sizeof(float) * (size_t)(rows * T));
            for (int64_t r = 0; s == KVS_OK && r < rows; r++) {
                const int hh = (int)(r % NH) / G;
                for (int64_t j = 0; j < A[hh]; j++) pc[r * cap + P[hh] + j] += pt[r * T + j];
            }
            if (s == KVS_OK) s = kvs_tensor_upload(ap->probs, pc, 0, sizeof(float) * (size_t)(rows * cap));
        }
    }
    if (s == KVS_OK && ap->argmax) { /* the two calls' row maxima decide (the pruned rows on ties) */
        int32_t *at = ws->h_tk_am, *apr = at + nr;
        s = kvs_tensor_download(ws->tk_stat, h, 0, sizeof(float) * 3 * (size_t)nr); /* st[0..2] */
        if (s == KVS_OK) s = kvs_tensor_download(ap->argmax, at, 0, sizeof(int32_t) * (size_t)nr);
        if (s == KVS_OK) s = kvs_tensor_download(am2, apr, 0, sizeof(int32_t) * (size_t)nr);
        for (int64_t i = 0; s == KVS_OK && i < nr; i++) {
            if (at[i] >= 0) at[i] += (int32_t)P[(i % NH) / G]; /* tail row -> cache row */
            if (apr[i] >= 0 && (at[i] < 0 || h[2 * nr + i] >= h[i])) at[i] = apr[i];
        }
        if (s == KVS_OK) s = kvs_tensor_upload(ap->argmax, at, 0, sizeof(int32_t) * (size_t)nr);
    }
    kvs_tensor *all[] = {st[0], st[1], st[2], st[3], st[4], st[5], out2, am2, pv2, vtail, iv, km2, qsrc, qdst, qg, qiv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fwd_view_done(&all[i]);
    return s;
}

kvs_status fwd_layer_attention(fwd_ctx *f, int l, const kvs_layer_plan *lp, int64_t n, kvs_layer_stats *st) {
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
    ap.causal = !kvs_arch_is_diffusion(hp->arch);
    kvs_tensor *qpos = NULL, *q = NULL, *out = NULL, *srows = NULL, *prow = NULL, *amax = NULL;
    kvs_tensor *ks = NULL, *vs = NULL, *kpos = NULL, *klen = NULL, *kmv = NULL, *pv = NULL, *kslo = NULL, *vslo = NULL;
    /* keys the attention sees: the cache rows [0, n_kv) (dense) or the gathered keep-set (sparse,
     * akv = the longest set); statistics come back in that key space and are mapped to cache rows */
    int64_t akv = n_kv;
    kvs_status s = fwd_view3(m, &qpos, ws->pos, 0, n, 1, 1);
    if (s == KVS_OK) s = fwd_view3(m, &q, ws->q, 0, hp->head_dim, hp->n_heads, n);
    if (s == KVS_OK) s = fwd_view3(m, &out, ws->att, 0, hp->head_dim, hp->n_heads, n);
    const kvs_tensor *kk = kvs_cache_k(c, l), *vv = kvs_cache_v(c, l);
    int64_t kcap = cap;
    const int draft = f->plan->kv_draft;
    if (s == KVS_OK && !draft) { /* qh8: the lower planes make the 8-bit values */
        ap.k_lo = kvs_cache_k_lo(c, l);
        ap.v_lo = kvs_cache_v_lo(c, l);
    }
    if (s == KVS_OK && sparse) {
        s = gather_keep(f, l, lp, &akv, &ks, &vs, &kslo, &vslo, &kpos, &klen);
        kk = ks;
        vv = vs;
        if (!draft) { /* the gathered lower planes (the draft reads the gathered upper ones alone) */
            ap.k_lo = kslo;
            ap.v_lo = vslo;
        }
        kcap = akv;
        ap.k_pos = kpos;
        ap.kv_len = klen;
    } else {
        ap.k_pos = kvs_cache_pos_tensor(c, l);
        ap.kv_len = kvs_cache_len_tensor(c, l);
    }
    ap.n_kv = akv;
    ap.q_pos = qpos;
    /* block-causal (kvs_step_plan.key_limit): key j visible to row i iff kpos(j) < key_limit[i], i.e.
     * the causal rule with key_limit[i] - 1 as the query's position */
    kvs_tensor *mpos = NULL;
    if (s == KVS_OK && f->plan->key_limit) {
        for (int64_t i = 0; i < n; i++) f->tmp[i] = f->plan->key_limit[f->rows[i]] - 1;
        s = fwd_view3(m, &mpos, ws->mpos, 0, n, 1, 1);
        if (s == KVS_OK) s = kvs_tensor_upload(mpos, f->tmp, 0, (size_t)n * 4);
        ap.causal = 1;
        ap.q_pos = mpos;
    }

    /* latent memory (latent.h): unnormalised attention + row max/sum, merged after the op */
    kvs_tensor *lat_max = NULL, *lat_sum = NULL;
    const struct kvs_latent *lat = lp && lp->latent && kvs_latent_active(lp->latent, l) ? lp->latent : NULL;
    if (s == KVS_OK && lat) {
        if (ws->lat_rows < ws->rows) { /* grown with the per-token buffers, made on first use */
            s = fwd_grow_tensor(&ws->lat_max, m->dev, KVS_F32, hp->n_heads, ws->rows, 0, "ws.lat_max");
            if (s == KVS_OK) s = fwd_grow_tensor(&ws->lat_sum, m->dev, KVS_F32, hp->n_heads, ws->rows, 0, "ws.lat_sum");
            ws->lat_rows = s == KVS_OK ? ws->rows : 0;
        }
        if (s == KVS_OK) s = fwd_view3(m, &lat_max, ws->lat_max, 0, hp->n_heads, n, 1);
        if (s == KVS_OK) s = fwd_view3(m, &lat_sum, ws->lat_sum, 0, hp->n_heads, n, 1);
        ap.unnormalised = 1;
        ap.row_max = lat_max;
        ap.row_sum = lat_sum;
    }
    int want_mass = lp && (lp->stat_all_rows || lp->n_stat_rows > 0);
    if (s == KVS_OK && want_mass) {
        /* key_mass covers [H][kcap]; keys beyond a head's length are untouched: zero first. */
        s = fwd_view3(m, &kmv, ws->key_mass, 0, kcap, H, 1);
        if (s == KVS_OK) s = kvs_tensor_fill(kmv, 0.0);
        ap.key_mass = kmv;
        if (s == KVS_OK && !lp->stat_all_rows) {
            s = fwd_view3(m, &srows, ws->stat_rows, 0, lp->n_stat_rows, 1, 1);
            if (s == KVS_OK) s = kvs_tensor_upload(srows, lp->stat_rows, 0, (size_t)lp->n_stat_rows * 4);
            ap.stat_rows = srows;
        }
    }
    if (s == KVS_OK && n_probe > 0) {
        s = fwd_view3(m, &prow, ws->probe_rows, 0, n_probe, 1, 1);
        if (s == KVS_OK) s = kvs_tensor_upload(prow, lp->probe_rows, 0, (size_t)n_probe * 4);
        if (s == KVS_OK) s = fwd_view3(m, &pv, ws->probs, 0, kcap, hp->n_heads, n_probe);
        ap.probe_rows = prow;
        ap.probs = pv;
    }
    if (s == KVS_OK && lp && lp->want_argmax) {
        s = fwd_view3(m, &amax, ws->argmax, 0, hp->n_heads, n, 1);
        ap.argmax = amax;
    }
    /* a KVS_CACHE_ROTATE cache holds R k: attention takes R q (a copy; q stays for the latent merge) */
    const kvs_tensor *qa = q;
    kvs_tensor *qr = NULL;
    if (s == KVS_OK && (kvs_cache_get_params(c)->flags & KVS_CACHE_ROTATE)) {
        const int64_t nel = n * hp->n_heads * hp->head_dim;
        if (ws->qr_rows < ws->rows) {
            s = fwd_grow_tensor(&ws->qr, m->dev, KVS_F32, (int64_t)hp->n_heads * hp->head_dim, ws->rows, 0, "ws.qr");
            ws->qr_rows = s == KVS_OK ? ws->rows : 0;
        }
        if (s == KVS_OK) s = fwd_host_grow((void **)&ws->h_q, &ws->h_q_cap, nel, sizeof *ws->h_q);
        if (s == KVS_OK) s = kvs_tensor_download(q, ws->h_q, 0, (size_t)nel * sizeof(float));
        if (s == KVS_OK) {
            kvs_cache_rotate_rows(ws->h_q, n * hp->n_heads, hp->head_dim);
            s = fwd_view3(m, &qr, ws->qr, 0, hp->head_dim, hp->n_heads, n);
        }
        if (s == KVS_OK) s = kvs_tensor_upload(qr, ws->h_q, 0, (size_t)nel * sizeof(float));
        qa = qr;
    }
    if (s == KVS_OK && pruned_on(c, l)) { /* ThinK's pruned keys: two segments, merged exactly */
        if (sparse || lat || qa != q || !ap.causal)
            s = kvs_error(KVS_ERR_UNSUPPORTED, "kvs_model_forward: layer %d holds pruned keys (ThinK, kvs_cache_prune_keys), "
                          "which a sparse keep-set, latent memory, a KVS_CACHE_ROTATE cache or non-causal attention "
                          "does not read", l);
        if (s == KVS_OK) s = pruned_attention(f, l, n, q, out, &ap);
    } else if (s == KVS_OK) {
        s = kvs_attention(m->dev, qa, kk, vv, out, &ap);
    }

    if (s == KVS_OK && lat) s = kvs_latent_merge(lat, l, q, out, lat_max, lat_sum);
        /* statistics to host, as [.][n_kv] over cache rows */
    st->n_kv = n_kv;
    st->key_mass = NULL;
    st->probs = NULL;
    st->argmax = NULL;
    int G = hp->n_heads / H;
    if (s == KVS_OK && want_mass) {
        int64_t need = (int64_t)H * (kcap > n_kv ? kcap : n_kv) * (sparse ? 2 : 1);
        s = fwd_host_grow((void **)&m->key_mass_host[l], &m->key_mass_cap[l], need, sizeof(float));
        float *km = m->key_mass_host[l];
        float *raw = sparse ? km + (int64_t)H * n_kv : km;
        if (s == KVS_OK) s = kvs_tensor_download(kmv, raw, 0, (size_t)H * kcap * 4);
        if (s == KVS_OK && sparse) {
            memset(km, 0, (size_t)H * n_kv * sizeof *km);
            for (int h = 0; h < H; h++)
                for (int64_t i = 0; i < lp->n_keep[h]; i++) km[h * n_kv + lp->keep[h * lp->keep_stride + i]] = raw[h * kcap + i];
        } else if (s == KVS_OK && kcap != n_kv) {
            /* compact [H][cap] -> [H][n_kv] in place */
            for (int h = 1; h < H; h++) memmove(km + h * n_kv, km + h * kcap, (size_t)n_kv * sizeof *km);
        }
        if (s == KVS_OK) st->key_mass = km;
    }
    if (s == KVS_OK && n_probe > 0) {
        int64_t rows = n_probe * hp->n_heads;
        int64_t need = rows * (kcap > n_kv ? kcap : n_kv) + (sparse ? rows * kcap : 0);
        s = fwd_host_grow((void **)&m->probs_host[l], &m->probs_cap[l], need, sizeof(float));
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
        } else if (s == KVS_OK && kcap != n_kv) {
            for (int64_t r = 1; r < rows; r++) memmove(pr + r * n_kv, pr + r * kcap, (size_t)n_kv * 4);
        }
        if (s == KVS_OK) st->probs = pr;
    }
    if (s == KVS_OK && amax) {
        int64_t tot = n * hp->n_heads;
        s = fwd_host_grow((void **)&m->argmax_host[l], &m->argmax_cap[l], tot, sizeof(int32_t));
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
    kvs_tensor *all[] = {qpos, mpos, q, out, srows, prow, amax, ks, vs, kpos, klen, kmv, pv, kslo, vslo};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fwd_view_done(&all[i]);
    return s;
}
