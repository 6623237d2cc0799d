/* The model-file object: what the per-format readers fill (owned arrays, weights, hparams checks),
 * its accessors, the tokenizer next to it, model lookup. Opening (format detection and the
 * dispatch to a reader) is open.c, so the readers only call down into this file.
 * See include/kvsieve/model_file.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "kvs_config.h"
#include "format/format.h"

const char *kvs_arch_name(kvs_arch a) {
    switch (a) {
    case KVS_ARCH_LLAMA: return "llama";
    case KVS_ARCH_LLADA: return "llada";
    case KVS_ARCH_QWEN2: return "qwen2";
    case KVS_ARCH_QWEN3: return "qwen3";
    case KVS_ARCH_DREAM: return "dream";
    }
    return "unknown";
}

int kvs_arch_is_diffusion(kvs_arch a) { return a == KVS_ARCH_LLADA || a == KVS_ARCH_DREAM; }

const char *kvs_model_format_name(kvs_model_format f) {
    switch (f) {
    case KVS_MODEL_GGUF: return "gguf";
    case KVS_MODEL_SAFETENSORS: return "safetensors";
    case KVS_MODEL_LLAMA2C: return "llama2c";
    }
    return "unknown";
}

kvs_model_file_params kvs_model_file_params_default(void) {
    kvs_model_file_params p;
    memset(&p, 0, sizeof p);
    return p;
}

void *kvs_mf_alloc(kvs_model_file *m, size_t nbytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            kvs_error(KVS_ERR_OUT_OF_MEMORY, "model file: out of memory");
            return NULL;
        }
        m->owned = o;
        m->cap_owned = cap;
    }
    void *p = malloc(nbytes ? nbytes : 1);
    if (!p) {
        kvs_error(KVS_ERR_OUT_OF_MEMORY, "model file: cannot allocate %zu bytes", nbytes);
        return NULL;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

static size_t dtype_align(kvs_dtype dt) {
    switch (dt) {
    case KVS_F32: case KVS_I32: return 4;
    default: return 2;
    }
}

kvs_status kvs_mf_set_weight(kvs_model_file *m, kvs_weight *w, kvs_dtype dt, const void *data,
                             int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    w->ne[0] = cols;
    w->ne[1] = rows;
    if (m->force_f32 && dt != KVS_F32) {
        float *f = kvs_mf_alloc(m, (size_t)n * sizeof(float));
        if (!f) return KVS_ERR_OUT_OF_MEMORY;
        KVS_TRY(kvs_convert_to_f32(dt, data, n, f));
        w->dtype = KVS_F32;
        w->data = f;
        w->nbytes = (size_t)n * sizeof(float);
        return KVS_OK;
    }
    w->dtype = dt;
    w->nbytes = kvs_dtype_bytes(dt, n);
    if ((uintptr_t)data % dtype_align(dt) != 0) {
        void *c = kvs_mf_alloc(m, w->nbytes);
        if (!c) return KVS_ERR_OUT_OF_MEMORY;
        memcpy(c, data, w->nbytes);
        data = c;
    }
    w->data = data;
    return KVS_OK;
}

kvs_status kvs_mf_check_hparams(kvs_model_file *m) {
    kvs_model_hparams *h = &m->hp;
    struct { const char *name; int v; } pos[] = {
        {"n_layers", h->n_layers}, {"dim", h->dim}, {"n_heads", h->n_heads},
        {"n_kv_heads", h->n_kv_heads}, {"ffn_dim", h->ffn_dim}, {"vocab", h->vocab},
        {"ctx_len", h->ctx_len}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0 || pos[i].v > (1 << 24))
            return kvs_error(KVS_ERR_FORMAT, "%s: hyperparameter %s = %d (1..2^24 allowed)", m->path,
                             pos[i].name, pos[i].v);
    if (h->n_layers > 4096)
        return kvs_error(KVS_ERR_FORMAT, "%s: n_layers = %d (at most 4096)", m->path, h->n_layers);
    if (h->n_heads % h->n_kv_heads != 0)
        return kvs_error(KVS_ERR_FORMAT, "%s: n_heads = %d is not a multiple of n_kv_heads = %d",
                         m->path, h->n_heads, h->n_kv_heads);
    if (h->head_dim <= 0) {
        if (h->dim % h->n_heads != 0)
            return kvs_error(KVS_ERR_FORMAT, "%s: dim = %d is not a multiple of n_heads = %d",
                             m->path, h->dim, h->n_heads);
        h->head_dim = h->dim / h->n_heads;
    }
    if (h->head_dim % 2 != 0 || h->head_dim > 4096)
        return kvs_error(KVS_ERR_FORMAT, "%s: head_dim = %d (even, <= 4096 required)", m->path,
                         h->head_dim);
    if (h->rope_dim <= 0) h->rope_dim = h->head_dim;
    if (h->rope_dim % 2 != 0 || h->rope_dim > h->head_dim)
        return kvs_error(KVS_ERR_FORMAT, "%s: rope dimension %d (even, <= head_dim %d required)",
                         m->path, h->rope_dim, h->head_dim);
    if (!(h->rms_eps > 0.0f) || h->rms_eps > 1.0f)
        return kvs_error(KVS_ERR_FORMAT, "%s: rms eps %g out of (0, 1]", m->path, (double)h->rms_eps);
    /* the rule kvs_rope applies (ops.c), checked once here with the file's name */
    if (!(h->rope_base > 1.0f) || !isfinite(h->rope_base))
        return kvs_error(KVS_ERR_FORMAT, "%s: rope base (theta) %g: must be finite and > 1", m->path,
                         (double)h->rope_base);
    /* special tokens must name a token of the vocabulary (-1: none) */
    struct { const char *name; int v; } ids[] = {{"bos", h->bos_id}, {"eos", h->eos_id}, {"mask", h->mask_id}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].v < -1 || ids[i].v >= h->vocab)
            return kvs_error(KVS_ERR_FORMAT, "%s: %s token id %d is outside the vocabulary (%d tokens)",
                             m->path, ids[i].name, ids[i].v, h->vocab);
    /* llama.cpp's rope type per architecture: NEOX (rotate-half) for the Qwen family and Dream */
    h->rope_mode = (h->arch == KVS_ARCH_QWEN2 || h->arch == KVS_ARCH_QWEN3 || h->arch == KVS_ARCH_DREAM)
                       ? KVS_ROPE_NEOX : KVS_ROPE_ADJACENT;
    m->layers = calloc((size_t)h->n_layers, sizeof *m->layers);
    if (!m->layers) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "model file: out of memory");
    m->w.layers = m->layers;
    m->w.n_layers = h->n_layers;
    return KVS_OK;
}

void kvs_model_file_close(kvs_model_file **pm) {
    if (!pm || !*pm) return;
    kvs_model_file *m = *pm;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    kvs_gguf_close(&m->gguf);
    kvs_unmap_file(m->map, m->heap, m->map_size);
    free(m);
    *pm = NULL;
}

kvs_model_format kvs_model_file_format(const kvs_model_file *m) { return m->format; }
const kvs_model_hparams *kvs_model_file_hparams(const kvs_model_file *m) { return m ? &m->hp : NULL; }
const kvs_model_weights *kvs_model_file_weights(const kvs_model_file *m) { return m ? &m->w : NULL; }
const kvs_gguf *kvs_model_file_gguf(const kvs_model_file *m) { return m ? m->gguf : NULL; }
const char *kvs_model_file_path(const kvs_model_file *m) { return m ? m->path : NULL; }

size_t kvs_model_file_weight_bytes(const kvs_model_file *m) {
    if (!m) return 0;
    size_t n = m->w.token_embd.nbytes + m->w.output_norm.nbytes;
    if (!m->hp.tied_output) n += m->w.output.nbytes;
    for (int l = 0; l < m->w.n_layers; l++) {
        const kvs_layer_weights *L = &m->layers[l];
        n += L->attn_norm.nbytes + L->wq.nbytes + L->wk.nbytes + L->wv.nbytes + L->wo.nbytes +
             L->ffn_norm.nbytes + L->w_gate.nbytes + L->w_down.nbytes + L->w_up.nbytes + L->bq.nbytes + L->bk.nbytes +
             L->bv.nbytes + L->q_norm.nbytes + L->k_norm.nbytes;
    }
    return n;
}

kvs_status kvs_weight_to_f32(const kvs_weight *w, float *dst) {
    if (!w || !dst || !w->data) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_weight_to_f32: NULL");
    return kvs_convert_to_f32(w->dtype, w->data, w->ne[0] * w->ne[1], dst);
}

kvs_status kvs_model_file_tokenizer_path(const kvs_model_file *m, char *buf, size_t cap) {
    if (!m || !buf || cap == 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_file_tokenizer_path: NULL");
    if (m->format == KVS_MODEL_GGUF)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: a GGUF model carries its tokenizer (use kvs_tokenizer_from_gguf)",
                         m->path);
    char cand[4][KVS_PATH_MAX + 64];
    int n = 0;
    if (m->tok_path[0]) {
        snprintf(cand[n++], sizeof cand[0], "%s", m->tok_path);
    } else {
        snprintf(cand[n++], sizeof cand[0], "%s/tokenizer.bin", m->dir);
        snprintf(cand[n++], sizeof cand[0], "%s/tok%d.bin", m->dir, m->hp.vocab);
        snprintf(cand[n++], sizeof cand[0], "%s/../tok%d.bin", m->dir, m->hp.vocab);
    }
    for (int i = 0; i < n; i++) {
        if (kvs_path_is_file(cand[i])) {
            if (strlen(cand[i]) >= cap)
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "tokenizer path '%s' longer than %zu",
                                 cand[i], cap);
            snprintf(buf, cap, "%s", cand[i]);
            return KVS_OK;
        }
    }
    if (n == 1) return kvs_error(KVS_ERR_NOT_FOUND, "tokenizer '%s' not found", cand[0]);
    return kvs_error(KVS_ERR_NOT_FOUND, "no tokenizer for '%s': tried %s, %s, %s", m->path,
                     cand[0], cand[1], cand[2]);
}

kvs_status kvs_model_locate(const char *name, char *buf, size_t cap) {
    if (!buf || cap == 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_locate: NULL buffer");
    buf[0] = '\0';
    if (!name) name = "";
    /* the order documented in model_file.h: the name itself, $KVSIEVE_MODELS, the repository's
     * models/, then ../shared/models next to the source tree */
    char tried[4][KVS_PATH_MAX + 64];
    int n = 0;
    if (name[0]) snprintf(tried[n++], sizeof tried[0], "%s", name);
    const char *env = getenv("KVSIEVE_MODELS");
    if (name[0] != '/') {
        const char *sep = name[0] ? "/" : "";
        if (env && env[0]) snprintf(tried[n++], sizeof tried[0], "%s%s%s", env, sep, name);
        snprintf(tried[n++], sizeof tried[0], "%s/models%s%s", KVS_SOURCE_ROOT, sep, name);
        snprintf(tried[n++], sizeof tried[0], "%s/../shared/models%s%s", KVS_SOURCE_ROOT, sep, name);
    }
    for (int i = 0; i < n; i++) {
        if (access(tried[i], F_OK) == 0) {
            if (strlen(tried[i]) >= cap)
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "model path '%s' longer than %zu", tried[i],
                                 cap);
            snprintf(buf, cap, "%s", tried[i]);
            return KVS_OK;
        }
    }
    char msg[4 * (KVS_PATH_MAX + 70)];
    size_t k = 0;
    msg[0] = '\0';
    for (int i = 0; i < n && k < sizeof msg; i++)
        k += (size_t)snprintf(msg + k, sizeof msg - k, "%s'%s'", i ? ", " : "", tried[i]);
    return kvs_error(KVS_ERR_NOT_FOUND, "model '%s' not found (tried %s; set KVSIEVE_MODELS)", name,
                     msg);
}
