/* Host copies of a model's attention weights for the eviction policies that read them (CriticalKV's
 * Wo, ExpectedAttention's Wq; see policy.h; declared in model_internal.h), and QuantSpec's draft
 * copy of the matrices (kvs_model_set_draft_weights, model.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "quant/quant.h"

kvs_status kvs_model_attn_weight_f32(const kvs_model *m, int layer, char which, float *dst) {
    const char *op = "kvs_model_attn_weight_f32";
    if (!m || !dst || layer < 0 || layer >= m->hp.n_layers || !strchr("qokv", which) || !which)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument, layer %d or weight '%c'", op, layer, which);
    const kvs_layer_tensors *w = &m->layers[layer];
    const kvs_tensor *t = which == 'q' ? w->wq : which == 'o' ? w->wo : which == 'k' ? w->wk : w->wv;
    int64_t n = kvs_tensor_nelements(t);
    kvs_dtype dt = kvs_tensor_dtype(t);
    if (dt == KVS_F32) return kvs_tensor_download(t, dst, 0, (size_t)n * 4);
    if (kvs_dtype_info_get(dt) && kvs_dtype_info_get(dt)->block > 1) {
        /* a block type (q4_0 .. iq4_xs): its rows are whole blocks (checked at load), decoded by
         * core/quant's readable decoders */
        size_t nb = kvs_tensor_nbytes(t);
        void *raw = malloc(nb);
        if (!raw) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        kvs_status s = kvs_tensor_download(t, raw, 0, nb);
        if (s == KVS_OK) s = kvs_dequant_row(dt, raw, n, dst);
        free(raw);
        return s;
    }
    if (dt != KVS_F16 && dt != KVS_BF16)
        return kvs_error(KVS_ERR_DTYPE, "%s: layer %d W%c is %s (f32, f16, bf16 and the block types supported)", op, layer, which, kvs_dtype_name(dt));
    uint16_t *h = malloc((size_t)n * 2);
    if (!h) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    kvs_status s = kvs_tensor_download(t, h, 0, (size_t)n * 2);
    for (int64_t i = 0; s == KVS_OK && i < n; i++) dst[i] = dt == KVS_F16 ? kvs_f16_to_f32(h[i]) : kvs_bf16_to_f32(h[i]);
    free(h);
    return s;
}

/* ---- QuantSpec's draft weights (kvs_model_set_draft_weights) ---------------------------------- */

/* *out = a copy of W in type t: rows read to the host in chunks of about 4 MiB, decoded to f32
 * (f32 as is, f16 / bf16 converted exactly, block types by kvs_dequant_row), then coded by
 * kvs_quant_row (quant_encode.c's rules) and uploaded. */
static kvs_status draft_copy(kvs_model *m, const kvs_tensor *W, kvs_dtype t, kvs_tensor **out) {
    const char *op = "kvs_model_set_draft_weights";
    const kvs_dtype dt = kvs_tensor_dtype(W);
    const int64_t k = kvs_tensor_ne(W, 0), rows = kvs_tensor_nelements(W) / k;
    const size_t src_row = kvs_dtype_bytes(dt, k), dst_row = kvs_dtype_bytes(t, k);
    int64_t chunk = (int64_t)((4u << 20) / (k * 4)) + 1;
    if (chunk > rows) chunk = rows;
    const int64_t ne[2] = {k, rows};
    KVS_TRY(kvs_tensor_create(out, m->dev, t, 2, ne));
    char nm[96];
    snprintf(nm, sizeof nm, "%s.draft", kvs_tensor_name(W));
    kvs_tensor_set_name(*out, nm);
    kvs_status s = kvs_model_weight_supported(m, *out, nm);
    uint8_t *raw = malloc(src_row * (size_t)chunk), *enc = malloc(dst_row * (size_t)chunk);
    float *f = malloc(sizeof(float) * (size_t)(k * chunk));
    if (s == KVS_OK && (!raw || !enc || !f)) s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t r0 = 0; r0 < rows && s == KVS_OK; r0 += chunk) {
        const int64_t nr = rows - r0 < chunk ? rows - r0 : chunk, nv = nr * k;
        s = kvs_tensor_download(W, raw, (size_t)r0 * src_row, (size_t)nr * src_row);
        if (s != KVS_OK) break;
        if (dt == KVS_F32) memcpy(f, raw, (size_t)nv * 4);
        else if (dt == KVS_F16 || dt == KVS_BF16) {
            const uint16_t *h = (const uint16_t *)raw;
            for (int64_t i = 0; i < nv; i++) f[i] = dt == KVS_F16 ? kvs_f16_to_f32(h[i]) : kvs_bf16_to_f32(h[i]);
        } else s = kvs_dequant_row(dt, raw, nv, f);
        for (int64_t r = 0; r < nr && s == KVS_OK; r++) s = kvs_quant_row(t, f + r * k, k, enc + (size_t)r * dst_row);
        if (s == KVS_OK) s = kvs_tensor_upload(*out, enc, (size_t)r0 * dst_row, (size_t)nr * dst_row);
    }
    free(raw);
    free(enc);
    free(f);
    if (s != KVS_OK) kvs_tensor_destroy(out);
    return s;
}

/* The draft tensors that are copies (not the model's own, shared where no copy was made). */
static void draft_free(kvs_model *m) {
    if (m->draft_layers) {
        for (int l = 0; l < m->hp.n_layers; l++) {
            kvs_layer_tensors *d = &m->draft_layers[l], *w = &m->layers[l];
            kvs_tensor **dd[] = {&d->wq, &d->wk, &d->wv, &d->wo, &d->w_gate, &d->w_up, &d->w_down};
            const kvs_tensor *ww[] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
            for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++)
                if (*dd[i] != ww[i]) kvs_tensor_destroy(dd[i]);
        }
        free(m->draft_layers);
        m->draft_layers = NULL;
    }
    if (m->draft_output != m->output) kvs_tensor_destroy(&m->draft_output);
    m->draft_output = NULL;
    m->draft_bytes = 0;
    m->draft_type = KVS_F32;
}

void kvs_model_draft_free(kvs_model *m) { draft_free(m); }

kvs_status kvs_model_set_draft_weights(kvs_model *m, kvs_dtype type) {
    const char *op = "kvs_model_set_draft_weights";
    if (!m) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL model", op);
    if (type == KVS_F32) { /* off */
        draft_free(m);
        return KVS_OK;
    }
    if (kvs_arch_is_diffusion(m->hp.arch))
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: a diffusion model (%s) has no speculative draft: the copies would "
                         "never be used", op, kvs_arch_name(m->hp.arch));
    if ((int)type < 0 || type >= KVS_DTYPE_COUNT || !kvs_quant_can_encode(type))
        return kvs_error(KVS_ERR_DTYPE, "%s: draft weight type %s has no encoder (q8_0, q4_0, q4_1, iq4_nl; f32 turns the "
                         "draft weights off)", op, (int)type >= 0 && type < KVS_DTYPE_COUNT ? kvs_dtype_name(type) : "?");
    draft_free(m);
    m->draft_layers = calloc((size_t)m->hp.n_layers, sizeof *m->draft_layers);
    if (!m->draft_layers) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    m->draft_type = type;
    kvs_status s = KVS_OK;
    /* a matrix already of this type, or whose rows are not whole blocks of 32, is shared as it is */
#define DRAFT_(src, dst)                                                                                              \
    do {                                                                                                             \
        if (s != KVS_OK) break;                                                                                      \
        if (kvs_tensor_dtype(src) == type || kvs_tensor_ne(src, 0) % 32) (dst) = (src);                             \
        else if ((s = draft_copy(m, (src), type, &(dst))) == KVS_OK) m->draft_bytes += (int64_t)kvs_tensor_nbytes(dst); \
    } while (0)
    for (int l = 0; l < m->hp.n_layers && s == KVS_OK; l++) {
        const kvs_layer_tensors *w = &m->layers[l];
        kvs_layer_tensors *d = &m->draft_layers[l];
        *d = *w; /* norms and biases: the model's own */
        d->wq = d->wk = d->wv = d->wo = d->w_gate = d->w_up = d->w_down = NULL;
        DRAFT_(w->wq, d->wq);
        DRAFT_(w->wk, d->wk);
        DRAFT_(w->wv, d->wv);
        DRAFT_(w->wo, d->wo);
        DRAFT_(w->w_gate, d->w_gate);
        DRAFT_(w->w_up, d->w_up);
        DRAFT_(w->w_down, d->w_down);
    }
    DRAFT_(m->output, m->draft_output);
#undef DRAFT_
    if (s != KVS_OK) {
        /* the layers not reached hold NULL matrices: share the model's so that draft_free skips them */
        for (int l = 0; l < m->hp.n_layers; l++) {
            kvs_layer_tensors *d = &m->draft_layers[l], *w = &m->layers[l];
            if (!d->wq) d->wq = w->wq;
            if (!d->wk) d->wk = w->wk;
            if (!d->wv) d->wv = w->wv;
            if (!d->wo) d->wo = w->wo;
            if (!d->w_gate) d->w_gate = w->w_gate;
            if (!d->w_up) d->w_up = w->w_up;
            if (!d->w_down) d->w_down = w->w_down;
        }
        if (!m->draft_output) m->draft_output = m->output;
        draft_free(m);
    }
    return s;
}

int64_t kvs_model_draft_weight_bytes(const kvs_model *m) { return m ? m->draft_bytes : 0; }
