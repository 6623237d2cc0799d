/* ThinK (Xu et al. 2024, "ThinK: Thinner Key Cache by Query-Driven Pruning", arXiv 2407.21018;
 * kvpress ThinKPress): query-driven pruning of key channels per kv head. The host channel choice
 * (kvs_think_select, policy.h) and the evictor's pruning step (kvs_evictor_think, evictor_internal.h):
 * the kept rows move into the cache's pruned key segment, which stores only the kept channels, and
 * the full-width keys are freed (kvs_cache_prune_keys, cache.h; the forward attends over it and the
 * full-width tail of the rows appended since, core/model/forward_attention.c), or, with kvs_evict_params.think_in_place, the pruned channels are
 * zeroed in place (kvpress's way: the usual layout, no memory saved; the results are the same). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evictor_internal.h"

kvs_status kvs_think_select(const double *q_sq, const float *keys, const int64_t *len, int n_kv_heads, int64_t stride,
                            int head_dim, double ratio, uint8_t *pruned, double *scores) {
    const char *op = "kvs_think_select";
    if (!q_sq || !keys || !len || !pruned) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (n_kv_heads < 1 || head_dim < 1 || stride < 1 || !(ratio >= 0.0 && ratio < 1.0))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: n_kv_heads %d, head_dim %d, stride %lld >= 1 and ratio %g in [0, 1) required",
                         op, n_kv_heads, head_dim, (long long)stride, ratio);
    int n_prune = (int)floor((double)head_dim * ratio);
    double *sc = malloc(sizeof(double) * (size_t)head_dim);
    if (!sc) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int h = 0; h < n_kv_heads; h++) {
        if (len[h] < 0 || len[h] > stride) {
            free(sc);
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: head %d len %lld outside [0, stride %lld]", op, h, (long long)len[h],
                             (long long)stride);
        }
        /* score_c = ||Q[:, c]||^2 ||K[:, c]||^2 = ||Q[:, c] K[:, c]^T||_F^2 (the paper's channel score squared) */
        for (int c = 0; c < head_dim; c++) {
            double ks = 0.0;
            for (int64_t r = 0; r < len[h]; r++) {
                double k = keys[((size_t)h * stride + r) * head_dim + c];
                ks += k * k;
            }
            sc[c] = q_sq[(size_t)h * head_dim + c] * ks;
            if (scores) scores[(size_t)h * head_dim + c] = sc[c];
        }
        uint8_t *pr = pruned + (size_t)h * head_dim;
        memset(pr, 0, (size_t)head_dim);
        /* the n_prune lowest scores (ties: the lower channel first): selection by repeated minimum */
        for (int i = 0; i < n_prune; i++) {
            int best = -1;
            for (int c = 0; c < head_dim; c++)
                if (!pr[c] && (best < 0 || sc[c] < sc[best])) best = c;
            pr[best] = 1;
        }
    }
    free(sc);
    return KVS_OK;
}

kvs_status kvs_think_check_cache(const kvs_cache_params *p) {
    const char *op = "ThinK (think_ratio > 0)";
    if (!p) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_think_check_cache: p is NULL");
    if (p->type_k != KVS_F32 && p->type_k != KVS_F16)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: keys of type %s cannot have channels pruned (f32 or f16 keys "
                         "only: the scoring pass reads those, and a block type's 32 channels share one scale)", op,
                         kvs_dtype_name(p->type_k));
    if (p->flags & KVS_CACHE_ROTATE)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: a KVS_CACHE_ROTATE cache stores Hadamard-rotated keys, whose channels "
                         "are mixtures of the RoPE channels ThinK scores and prunes", op);
    return KVS_OK;
}

/* Prunes, in layer l of the evictor's cache, the key channels ThinK selects from the window queries
 * accumulated in s->q_sq and the kept rows: the rows move into the cache's pruned segment holding the
 * other channels (kvs_cache_prune_keys), or, with think_in_place, the channels are zeroed in place in
 * the full-width rows; then clears the accumulator. */
kvs_status kvs_evictor_think(kvs_evictor *e, int l) {
    layer_state *s = &e->ls[l];
    int H = e->H, hd = e->hd;
    size_t KV = (size_t)H * e->cap * hd;
    int64_t len[256];
    if (H > 256) return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_evictor: ThinK supports at most 256 kv heads");
    for (int h = 0; h < H; h++) len[h] = kvs_cache_len(e->c, l, h);
    kvs_tensor *kt = kvs_cache_k(e->c, l);
    int f16 = kvs_tensor_dtype(kt) == KVS_F16;
    if (!e->keys) KVS_TRY(xalloc((void **)&e->keys, KV * sizeof(float)));
    if (!e->p.think_in_place) {
        /* the pruned layout: the kept rows (pruned ones expanded, 0 outside their channels) score the
         * channels, then move into the cache's pruned segment holding the kept channels alone */
        uint8_t *prs = malloc((size_t)H * hd);
        kvs_status st = prs ? kvs_cache_read_f32(e->c, l, 0, e->keys) : kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_evictor: out of host memory");
        if (st == KVS_OK) st = kvs_think_select(s->q_sq, e->keys, len, H, e->cap, hd, e->p.think_ratio, prs, NULL);
        if (st == KVS_OK) st = kvs_cache_prune_keys(e->c, l, prs);
        for (int h = 0; st == KVS_OK && h < H; h++)
            for (int c = 0; c < hd; c++) e->st.channels_pruned += prs[(size_t)h * hd + c];
        memset(s->q_sq, 0, sizeof(double) * (size_t)H * hd);
        free(prs);
        return st;
    }
    uint16_t *h16 = f16 ? malloc(KV * 2) : NULL;
    uint8_t *pr = malloc((size_t)H * hd);
    kvs_status st = (f16 && !h16) || !pr ? kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_evictor: out of host memory") : KVS_OK;
    if (st == KVS_OK && f16) {
        st = kvs_tensor_download(kt, h16, 0, KV * 2);
        for (size_t i = 0; st == KVS_OK && i < KV; i++) e->keys[i] = kvs_f16_to_f32(h16[i]);
    } else if (st == KVS_OK) {
        st = kvs_tensor_download(kt, e->keys, 0, KV * 4);
    }
    if (st == KVS_OK) st = kvs_think_select(s->q_sq, e->keys, len, H, e->cap, hd, e->p.think_ratio, pr, NULL);
    if (st == KVS_OK) {
        for (int h = 0; h < H; h++)
            for (int64_t r = 0; r < len[h]; r++)
                for (int c = 0; c < hd; c++)
                    if (pr[(size_t)h * hd + c]) {
                        size_t at = ((size_t)h * e->cap + r) * hd + c;
                        e->keys[at] = 0.0f;
                        if (f16) h16[at] = 0;
                    }
        st = f16 ? kvs_tensor_upload(kt, h16, 0, KV * 2) : kvs_tensor_upload(kt, e->keys, 0, KV * 4);
        for (int h = 0; h < H; h++)
            for (int c = 0; c < hd; c++) e->st.channels_pruned += pr[(size_t)h * hd + c];
    }
    memset(s->q_sq, 0, sizeof(double) * (size_t)H * hd);
    free(h16);
    free(pr);
    return st;
}
