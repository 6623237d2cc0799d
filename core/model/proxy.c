/* SPA-Cache singular proxies (Sun et al. 2026, "SPA-Cache: Singular Proxies for Adaptive Caching in
 * Diffusion Language Models", arXiv 2602.02544; reference code wenhao728/spa-cache,
 * spac/utils/proxy.py: save_projection_svd_from_model takes torch.linalg.svd of v_proj.weight^T,
 * load_proxy_projection_from_dir keeps (V[:, :r] * S[:r])^T as an nn.Linear). Computed once per layer
 * on the host in float64 (svd_host.c), kept on the model's device. See model.h. */
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "model/svd_host.h"

/* Above this min(dim, kv dim) the proxy's SVD is the randomized one (svd_host.h kvs_svd_top_f64). */
#define KVS_SPA_SVD_EXACT_MAX 256

void kvs_model_proxy_free(kvs_model *m) {
    if (!m->spa) return;
    for (int l = 0; l < m->hp.n_layers; l++) {
        kvs_tensor_destroy(&m->spa[l].w);
        free(m->spa[l].w_host);
        free(m->spa[l].sv);
    }
    free(m->spa);
    m->spa = NULL;
    free(m->proxy_host);
    m->proxy_host = NULL;
    m->proxy_host_cap = 0;
}

kvs_status kvs_model_proxy_get(kvs_model *m, int layer, int rank, int key, const kvs_spa_proxy **out) {
    const char *op = "kvs_model_spa_proxy";
    if (!m || !out || !m->spa) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    const kvs_model_hparams *hp = &m->hp;
    int64_t dim = hp->dim, kd = (int64_t)hp->n_kv_heads * hp->head_dim, kmax = dim < kd ? dim : kd;
    if (layer < 0 || layer >= hp->n_layers)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: layer %d outside [0, %d)", op, layer, hp->n_layers);
    if (key != 0 && key != 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: key %d (0 = value, 1 = key projection)", op, key);
    if (rank < 1 || rank > kmax)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: proxy rank %d outside [1, %lld]: the %s projection [%lld][%lld] has at most %lld singular values",
                         op, rank, (long long)kmax, key ? "key" : "value", (long long)kd, (long long)dim, (long long)kmax);
    kvs_spa_proxy *p = &m->spa[layer];
    if (p->rank == rank && p->key == key && p->w) {
        *out = p;
        return KVS_OK;
    }
    kvs_tensor_destroy(&p->w);
    free(p->w_host);
    free(p->sv);
    memset(p, 0, sizeof *p);
    float *wf = malloc((size_t)(kd * dim) * sizeof *wf);
    double *a = malloc((size_t)(kd * dim) * sizeof *a), *s = malloc((size_t)kd * sizeof *s);
    p->w_host = malloc((size_t)(rank * dim) * sizeof *p->w_host);
    p->sv = malloc((size_t)kmax * sizeof *p->sv);
    kvs_status st = (!wf || !a || !s || !p->w_host || !p->sv) ? kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op) : KVS_OK;
    /* W [kd][dim] row-major: its rows are the columns of W^T [dim][kd], the matrix the reference
     * decomposes; one-sided Jacobi leaves column j = U_j S_j, the proxy's row j */
    if (st == KVS_OK) st = kvs_model_attn_weight_f32(m, layer, key ? 'k' : 'v', wf);
    /* a large layer (min(dim, kv dim) > KVS_SPA_SVD_EXACT_MAX, e.g. LLaDA-8B's 4096 x 4096): the top
     * rank triplets by randomized subspace iteration (oversampling 10, 2 power rounds), as the full
     * Jacobi costs O(sweeps kd^2 dim); the bundled models: the exact SVD */
    double *us = NULL;
    if (st == KVS_OK) {
        for (int64_t i = 0; i < kd * dim; i++) a[i] = (double)wf[i];
        if (kmax > KVS_SPA_SVD_EXACT_MAX) {
            us = malloc((size_t)(rank * dim) * sizeof *us);
            st = us ? kvs_svd_top_f64(a, dim, kd, rank, 10, 2, 0x5EED + (uint64_t)layer, us, s)
                    : kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        } else {
            st = kvs_svd_jacobi_f64(a, dim, kd, s, NULL);
            us = a;
        }
    }
    if (st == KVS_OK) {
        for (int64_t j = 0; j < rank; j++)
            for (int64_t i = 0; i < dim; i++) p->w_host[j * dim + i] = (float)us[j * dim + i];
        memcpy(p->sv, s, (size_t)rank * sizeof *s);
        int64_t ne[2] = {dim, rank};
        st = kvs_tensor_create(&p->w, m->dev, KVS_F32, 2, ne);
        if (st == KVS_OK) st = kvs_tensor_upload(p->w, p->w_host, 0, (size_t)(rank * dim) * sizeof(float));
    }
    if (us != a) free(us);
    free(wf);
    free(a);
    free(s);
    if (st != KVS_OK) {
        kvs_tensor_destroy(&p->w);
        free(p->w_host);
        free(p->sv);
        memset(p, 0, sizeof *p);
        return st;
    }
    p->rank = rank;
    p->key = key;
    *out = p;
    return KVS_OK;
}

kvs_status kvs_model_spa_proxy(kvs_model *m, int layer, int rank, int key, float *weights, double *sv) {
    const kvs_spa_proxy *p = NULL;
    KVS_TRY(kvs_model_proxy_get(m, layer, rank, key, &p));
    int64_t dim = m->hp.dim;
    if (weights) memcpy(weights, p->w_host, (size_t)(rank * dim) * sizeof *weights);
    if (sv) memcpy(sv, p->sv, (size_t)rank * sizeof *sv);
    return KVS_OK;
}

int kvs_model_spa_rank_auto(const kvs_model *m) {
    if (!m) return 0;
    int64_t dim = m->hp.dim, kd = (int64_t)m->hp.n_kv_heads * m->hp.head_dim, kmax = dim < kd ? dim : kd;
    int64_t r = kd / 32; /* LLaDA-8B: 4096 / 32 = 128, the reference's rank for LLaDA */
    if (r < 8) r = 8;
    if (r > kmax) r = kmax;
    return (int)r;
}
