/* kvs_model: a model file's weights uploaded to a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

kvs_model_params kvs_model_params_default(void) {
    kvs_model_params p = {.weight_dtype = KVS_F32, .map_weights = 0};
    return p;
}

/* Asks the backend, before the weight's bytes are uploaded, whether it can multiply a weight of this
 * type and shape (and, for the token table, look rows up in it): a device that cannot (the GPU
 * backends and most block types) is refused at model creation with its reason, not at the first op
 * of a decode. W: the weight's (allocated, not yet filled) tensor [rows][k]. */
kvs_status kvs_model_weight_supported(kvs_model *m, kvs_tensor *W, const char *name) {
    kvs_device *dev = m->dev;
    if (!dev->ops->supports) return KVS_OK;
    const int64_t k = W->ne[0], rows = W->ndim > 1 ? W->ne[1] : 1;
    kvs_tensor *x = NULL, *y = NULL;
    kvs_status s = kvs_tensor_create(&x, dev, KVS_F32, 1, &k);
    if (s == KVS_OK) s = kvs_tensor_create(&y, dev, KVS_F32, 1, &rows);
    char why[256] = "";
    int ok = 1;
    if (s == KVS_OK) {
        kvs_matmul_args a = {.W = W, .x = x, .y = y, .m = rows, .k = k, .n = 1};
        ok = dev->ops->supports(dev, KVS_OP_matmul, &a, why, sizeof why);
        if (ok && strcmp(name, "token_embd") == 0) {
            int32_t id = 0;
            kvs_embedding_args e = {.table = W, .out = x, .ids = &id, .n = 1, .dim = k};
            ok = dev->ops->supports(dev, KVS_OP_embedding, &e, why, sizeof why);
        }
    }
    kvs_tensor_destroy(&x);
    kvs_tensor_destroy(&y);
    if (s != KVS_OK || ok) return s;
    return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_model_create: weight %s is %s, which the %s backend ('%s') cannot use: %s", name,
                     kvs_dtype_name(W->dtype), dev->ops->name, dev->info.name, why);
}

/* The device tensor of one weight, named; a matrix is first checked against the backend. */
static kvs_status create_weight(kvs_model *m, kvs_dtype dt, int nd, const int64_t *ne, int matrix, const char *name,
                                kvs_tensor **out) {
    KVS_TRY(kvs_tensor_create(out, m->dev, dt, nd, ne));
    kvs_tensor_set_name(*out, name);
    return matrix ? kvs_model_weight_supported(m, *out, name) : KVS_OK;
}

/* Uploads one host weight as dtype `want` (norms and F32-only uses pass KVS_F32). A matrix (`matrix`
 * = 1: the matmul / embedding weights) in a block type stays in it: the products read the blocks. */
static kvs_status upload_weight(kvs_model *m, const kvs_weight *w, kvs_dtype want, int matrix, const char *name,
                                kvs_tensor **out) {
    int64_t n = w->ne[0] * w->ne[1];
    if (matrix && kvs_dtype_is_quant(w->dtype)) want = w->dtype;
    int64_t ne[2] = {w->ne[0], w->ne[1]};
    int nd = w->ne[1] > 1 ? 2 : 1;
    if (w->dtype == want && m->map_weights) {
        /* used in place from the file's memory (CPU): no copy */
        KVS_TRY(kvs_tensor_wrap_host(out, m->dev, want, nd, ne, w->data));
        kvs_tensor_set_name(*out, name);
        m->weight_bytes += (int64_t)w->nbytes;
        m->mapped_bytes += (int64_t)w->nbytes;
        return matrix ? kvs_model_weight_supported(m, *out, name) : KVS_OK;
    }
    if (w->dtype == want) {
        KVS_TRY(create_weight(m, want, nd, ne, matrix, name, out));
        m->weight_bytes += (int64_t)w->nbytes;
        return kvs_tensor_upload(*out, w->data, 0, w->nbytes);
    }
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_load: out of host memory for %s", name);
    kvs_status s = kvs_weight_to_f32(w, f);
    void *buf = f;
    uint16_t *h = NULL;
    if (s == KVS_OK && want != KVS_F32) {
        h = malloc((size_t)n * sizeof *h);
        if (!h) s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_load: out of host memory for %s", name);
        for (int64_t i = 0; s == KVS_OK && i < n; i++) h[i] = want == KVS_F16 ? kvs_f32_to_f16(f[i]) : kvs_f32_to_bf16(f[i]);
        buf = h;
    }
    if (s == KVS_OK) s = create_weight(m, want, nd, ne, matrix, name, out);
    if (s == KVS_OK) {
        m->weight_bytes += (int64_t)kvs_tensor_nbytes(*out);
        s = kvs_tensor_upload(*out, buf, 0, kvs_tensor_nbytes(*out));
    }
    free(f);
    free(h);
    return s;
}

void kvs_model_destroy(kvs_model **mp) {
    if (!mp || !*mp) return;
    kvs_model *m = *mp;
    kvs_workspace_free(&m->ws);
    kvs_model_proxy_free(m);
    kvs_model_draft_free(m); /* before the model's tensors, which some draft entries share */
    if (m->layers) {
        for (int l = 0; l < m->hp.n_layers; l++) {
            kvs_layer_tensors *w = &m->layers[l];
            kvs_tensor **all[] = {&w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo, &w->ffn_norm, &w->w_gate,
                                  &w->w_down, &w->w_up, &w->bq, &w->bk, &w->bv, &w->q_norm, &w->k_norm};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(all[i]);
        }
    }
    if (!m->output_tied) kvs_tensor_destroy(&m->output);
    kvs_tensor_destroy(&m->tok_embd);
    kvs_tensor_destroy(&m->out_norm);
    for (int l = 0; l < m->hp.n_layers; l++) {
        if (m->key_mass_host) free(m->key_mass_host[l]);
        if (m->probs_host) free(m->probs_host[l]);
        if (m->argmax_host) free(m->argmax_host[l]);
        if (m->x_host) free(m->x_host[l]);
        if (m->q_host) free(m->q_host[l]);
    }
    free(m->x_host); free(m->x_cap);
    free(m->q_host); free(m->q_cap);
    free(m->key_mass_host); free(m->probs_host); free(m->argmax_host);
    free(m->key_mass_cap); free(m->probs_cap); free(m->argmax_cap);
    free(m->stats);
    free(m->logits_host);
    free(m->layers);
    kvs_model_file_close(&m->own_mf); /* after the tensors that point into it */
    free(m);
    *mp = NULL;
}

kvs_status kvs_model_alloc(kvs_model **out, kvs_device *dev, const kvs_model_hparams *hp) {
    *out = NULL;
    kvs_model *m = calloc(1, sizeof *m);
    if (!m) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_load: out of host memory");
    m->dev = dev;
    m->hp = *hp;
    int L = m->hp.n_layers;
    m->layers = calloc((size_t)L, sizeof *m->layers);
    m->stats = calloc((size_t)L, sizeof *m->stats);
    m->key_mass_host = calloc((size_t)L, sizeof *m->key_mass_host);
    m->probs_host = calloc((size_t)L, sizeof *m->probs_host);
    m->argmax_host = calloc((size_t)L, sizeof *m->argmax_host);
    m->key_mass_cap = calloc((size_t)L, sizeof *m->key_mass_cap);
    m->probs_cap = calloc((size_t)L, sizeof *m->probs_cap);
    m->argmax_cap = calloc((size_t)L, sizeof *m->argmax_cap);
    m->x_host = calloc((size_t)L, sizeof *m->x_host);
    m->x_cap = calloc((size_t)L, sizeof *m->x_cap);
    m->q_host = calloc((size_t)L, sizeof *m->q_host);
    m->q_cap = calloc((size_t)L, sizeof *m->q_cap);
    m->spa = calloc((size_t)L, sizeof *m->spa);
    if (!m->spa || !m->x_host || !m->x_cap || !m->q_host || !m->q_cap || !m->layers || !m->stats || !m->key_mass_host || !m->probs_host || !m->argmax_host || !m->key_mass_cap ||
        !m->probs_cap || !m->argmax_cap) {
        kvs_model_destroy(&m);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_load: out of host memory");
    }
    *out = m;
    return KVS_OK;
}

kvs_status kvs_model_create(kvs_model **out, kvs_device *dev, const kvs_model_file *mf, const kvs_model_params *p) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_create: out is NULL");
    *out = NULL;
    if (!dev || !mf) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_create: NULL device or model file");
    kvs_model_params mp = p ? *p : kvs_model_params_default();
    if (mp.weight_dtype != KVS_F32 && mp.weight_dtype != KVS_F16 && mp.weight_dtype != KVS_BF16)
        return kvs_error(KVS_ERR_DTYPE, "kvs_model_load: weight dtype %s (want f32, f16 or bf16)", kvs_dtype_name(mp.weight_dtype));
    kvs_model *m = NULL;
    KVS_TRY(kvs_model_alloc(&m, dev, kvs_model_file_hparams(mf)));
    m->map_weights = mp.map_weights && kvs_device_backend(dev) == KVS_BACKEND_CPU;
    const kvs_model_weights *w = kvs_model_file_weights(mf);
    int L = m->hp.n_layers;
    kvs_status s = KVS_OK;
    kvs_dtype wd = mp.weight_dtype;
    char name[64];
    if (s == KVS_OK) s = upload_weight(m, &w->token_embd, wd, 1, "token_embd", &m->tok_embd);
    if (s == KVS_OK) s = upload_weight(m, &w->output_norm, KVS_F32, 0, "output_norm", &m->out_norm);
    if (s == KVS_OK) {
        if (m->hp.tied_output) {
            m->output = m->tok_embd;
            m->output_tied = 1;
        } else {
            s = upload_weight(m, &w->output, wd, 1, "output", &m->output);
        }
    }
    for (int l = 0; l < L && s == KVS_OK; l++) {
        const kvs_layer_weights *lw = &w->layers[l];
        kvs_layer_tensors *t = &m->layers[l];
        /* matrix = 1: a matmul weight (kept in its block type, or converted to wd); 0: an F32 vector */
        struct { const kvs_weight *src; kvs_tensor **dst; const char *nm; int matrix; } items[] = {
            {&lw->attn_norm, &t->attn_norm, "attn_norm", 0}, {&lw->wq, &t->wq, "attn_q", 1},
            {&lw->wk, &t->wk, "attn_k", 1}, {&lw->wv, &t->wv, "attn_v", 1}, {&lw->wo, &t->wo, "attn_output", 1},
            {&lw->ffn_norm, &t->ffn_norm, "ffn_norm", 0}, {&lw->w_gate, &t->w_gate, "ffn_gate", 1},
            {&lw->w_down, &t->w_down, "ffn_down", 1}, {&lw->w_up, &t->w_up, "ffn_up", 1},
            /* present only in some architectures (data NULL otherwise) */
            {&lw->bq, &t->bq, "attn_q.bias", 0}, {&lw->bk, &t->bk, "attn_k.bias", 0},
            {&lw->bv, &t->bv, "attn_v.bias", 0}, {&lw->q_norm, &t->q_norm, "attn_q_norm", 0},
            {&lw->k_norm, &t->k_norm, "attn_k_norm", 0},
        };
        for (size_t i = 0; i < sizeof items / sizeof items[0] && s == KVS_OK; i++) {
            if (!items[i].src->data) continue;
            snprintf(name, sizeof name, "blk.%d.%s", l, items[i].nm);
            s = upload_weight(m, items[i].src, items[i].matrix ? wd : KVS_F32, items[i].matrix, name, items[i].dst);
        }
    }
    if (s != KVS_OK) {
        kvs_model_destroy(&m);
        return s;
    }
    *out = m;
    return KVS_OK;
}

kvs_status kvs_model_load(kvs_model **out, kvs_device *dev, const char *path, const kvs_model_params *p) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_load: out is NULL");
    *out = NULL;
    if (!dev || !path) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_load: NULL device or path");
    kvs_model_file *mf = NULL;
    KVS_TRY(kvs_model_file_open(&mf, path, NULL));
    kvs_model_params mp = p ? *p : kvs_model_params_default();
    mp.map_weights = kvs_device_backend(dev) == KVS_BACKEND_CPU;
    kvs_status s = kvs_model_create(out, dev, mf, &mp);
    if (s == KVS_OK && (*out)->mapped_bytes > 0) (*out)->own_mf = mf; /* the model keeps the mapping */
    else kvs_model_file_close(&mf);
    return s;
}

const kvs_model_hparams *kvs_model_get_hparams(const kvs_model *m) { return m ? &m->hp : NULL; }
kvs_device *kvs_model_device(const kvs_model *m) { return m ? m->dev : NULL; }
int64_t kvs_model_weight_bytes(const kvs_model *m) { return m ? m->weight_bytes : 0; }
int64_t kvs_model_mapped_bytes(const kvs_model *m) { return m ? m->mapped_bytes : 0; }

kvs_cache_params kvs_model_cache_params(const kvs_model *m) {
    kvs_cache_params p = kvs_cache_params_default();
    if (!m) return p;
    p.n_layers = m->hp.n_layers;
    p.n_kv_heads = m->hp.n_kv_heads;
    p.head_dim = m->hp.head_dim;
    p.dim = m->hp.dim;
    p.capacity = m->hp.ctx_len;
    return p;
}
