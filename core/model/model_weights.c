/* Host copies of a model's attention weights for the eviction policies that read them (CriticalKV's
 * Wo, ExpectedAttention's Wq; see policy.h). Declared in model_internal.h. */
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
