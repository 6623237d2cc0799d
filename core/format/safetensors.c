/* Hugging Face safetensors + config.json (llama, qwen2, qwen3 naming).
 *
 * safetensors (huggingface/safetensors docs): u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {...}}, then the data; offsets are relative to byte 8 + N.
 * config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta,
 * tie_word_embeddings (default false, as transformers: then lm_head is required), bos/eos_token_id
 * (inside the vocabulary), head_dim (optional); model_type llama/qwen2/qwen3 and architectures
 * LlamaForCausalLM/Qwen2ForCausalLM/Qwen3ForCausalLM (if given, agreeing), hidden_act (if given)
 * silu, rope_scaling / rope_parameters absent or of rope_type default (rope_theta may sit inside
 * rope_parameters, transformers 5), use_sliding_window not true: anything else is refused rather
 * than run wrongly. Qwen2: self_attn.{q,k,v}_proj.bias; Qwen3: self_attn.{q,k}_norm.weight
 * [head_dim] (and the biases when attention_bias is true).
 * Tensor names: model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
 * post_attention_layernorm, mlp.{gate,down,up}_proj}, model.norm, lm_head (absent when tied; when
 * tied and present, it must equal the embedding, which is used, as transformers ties it).
 * llama q/k rows are in rotate-half order (transformers' convert_llama_weights_to_hf.py permute):
 * HF row h*hd + p*hd/2 + i holds Meta row h*hd + 2i + p; we un-permute into Meta order. Qwen rows
 * are used as stored, with NEOX RoPE (model_file.c). */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "format/format.h"

#define ST_MAX_HEADER (100u << 20)

typedef struct {
    kvs_model_file *m;
    const uint8_t *data;   /* data section */
    uint64_t data_size;
    size_t data_off;       /* file offset of the data section */
    json_object *hdr;
} st_file;

static kvs_status cfg_int(kvs_model_file *m, json_object *cfg, const char *key, int required,
                          int *dst) {
    json_object *v;
    if (!json_object_object_get_ex(cfg, key, &v) || json_object_is_type(v, json_type_null)) {
        if (!required) return KVS_OK;
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: config.json has no '%s'", m->path, key);
    }
    if (!json_object_is_type(v, json_type_int))
        return kvs_error(KVS_ERR_FORMAT, "%s: config.json '%s' is not an integer", m->path, key);
    int64_t x = json_object_get_int64(v);
    if (x < -1 || x > (1 << 30))
        return kvs_error(KVS_ERR_FORMAT, "%s: config.json '%s' = %lld out of range", m->path, key,
                         (long long)x);
    *dst = (int)x;
    return KVS_OK;
}

static kvs_status cfg_float(kvs_model_file *m, json_object *cfg, const char *key, float *dst) {
    json_object *v;
    if (!json_object_object_get_ex(cfg, key, &v) || json_object_is_type(v, json_type_null))
        return KVS_OK;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return kvs_error(KVS_ERR_FORMAT, "%s: config.json '%s' is not a number", m->path, key);
    *dst = (float)json_object_get_double(v);
    return KVS_OK;
}

/* Reads and parses config.json (a regular file: kvs_map_file refuses directories). */
static kvs_status parse_config(const char *cfg_path, json_object **out) {
    void *map = NULL, *heap = NULL;
    size_t size = 0;
    *out = NULL;
    KVS_TRY(kvs_map_file(cfg_path, &map, &heap, &size));
    const char *text = map ? map : heap;
    kvs_status s = KVS_OK;
    if (size == 0 || size > ST_MAX_HEADER) {
        s = kvs_error(KVS_ERR_FORMAT, "%s: %s (a JSON object expected)", cfg_path,
                      size == 0 ? "empty file" : "larger than 100 MiB");
    } else {
        json_tokener *tk = json_tokener_new();
        if (!tk) {
            s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "json tokener");
        } else {
            json_object *cfg = json_tokener_parse_ex(tk, text, (int)size);
            enum json_tokener_error je = json_tokener_get_error(tk);
            size_t end = json_tokener_get_parse_end(tk);
            json_tokener_free(tk);
            if (!cfg || je != json_tokener_success) {
                if (cfg) json_object_put(cfg);
                /* json-c reports an unfinished text as "continue": say what it means */
                s = kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: invalid JSON: %s", cfg_path, end,
                              je == json_tokener_continue ? "the text ends before the JSON value does"
                                                          : json_tokener_error_desc(je));
            } else {
                *out = cfg;
            }
        }
    }
    kvs_unmap_file(map, heap, size);
    return s;
}

static kvs_status load_config(kvs_model_file *m, const char *cfg_path) {
    json_object *cfg = NULL;
    KVS_TRY(parse_config(cfg_path, &cfg));
    kvs_status s = KVS_OK;
    kvs_model_hparams *h = &m->hp;
    json_object *v;
    if (!json_object_is_type(cfg, json_type_object)) {
        s = kvs_error(KVS_ERR_FORMAT, "%s: not a JSON object", cfg_path);
        goto done;
    }
    /* the architecture: model_type and/or architectures, which must agree (transformers' class per
     * model type); what the weights compute must be what kvsieve implements */
    static const struct { const char *type, *cls; kvs_arch arch; } kinds[] = {
        {"llama", "LlamaForCausalLM", KVS_ARCH_LLAMA}, {"qwen2", "Qwen2ForCausalLM", KVS_ARCH_QWEN2},
        {"qwen3", "Qwen3ForCausalLM", KVS_ARCH_QWEN3}};
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    int kind = -1;
    if (json_object_object_get_ex(cfg, "model_type", &v)) {
        const char *mt = json_object_get_string(v);
        for (int i = 0; mt && i < nk; i++)
            if (strcmp(mt, kinds[i].type) == 0) kind = i;
        if (kind < 0) {
            s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported (llama, qwen2, qwen3)",
                          cfg_path, mt ? mt : "?");
            goto done;
        }
    }
    if (json_object_object_get_ex(cfg, "architectures", &v) && !json_object_is_type(v, json_type_null)) {
        int ok = json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0, clash = -1;
        for (size_t i = 0; ok && i < json_object_array_length(v); i++) {
            const char *a = json_object_get_string(json_object_array_get_idx(v, i));
            int k = -1;
            for (int j = 0; a && j < nk; j++)
                if (strcmp(a, kinds[j].cls) == 0) k = j;
            if (k >= 0 && kind >= 0 && k != kind) clash = kind;
            ok = k >= 0 && clash < 0;
            if (ok) kind = k;
        }
        if (clash >= 0) {
            s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: architectures %s does not match model_type '%s'", cfg_path,
                          json_object_to_json_string(v), kinds[clash].type);
            goto done;
        }
        if (!ok) {
            s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: architectures %s is not supported (LlamaForCausalLM, "
                          "Qwen2ForCausalLM, Qwen3ForCausalLM)", cfg_path, json_object_to_json_string(v));
            goto done;
        }
    }
    if (json_object_object_get_ex(cfg, "hidden_act", &v) && !json_object_is_type(v, json_type_null)) {
        const char *act = json_object_get_string(v);
        if (!act || strcmp(act, "silu") != 0) {
            s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)", cfg_path,
                          act ? act : "?");
            goto done;
        }
    }
    /* RoPE: rope_theta (transformers 4) or rope_parameters {rope_type, rope_theta} (transformers 5);
     * only unscaled RoPE (rope_type default) is implemented */
    const char *rkeys[2] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        if (!json_object_object_get_ex(cfg, rkeys[i], &v) || json_object_is_type(v, json_type_null)) continue;
        json_object *t = NULL;
        const char *type = NULL;
        if (json_object_is_type(v, json_type_object) &&
            (json_object_object_get_ex(v, "rope_type", &t) || json_object_object_get_ex(v, "type", &t)))
            type = json_object_get_string(t);
        if (!type || strcmp(type, "default") != 0) {
            s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s %s: RoPE scaling type '%s' is not implemented (unscaled RoPE "
                          "only: rope_type default)", cfg_path, rkeys[i], json_object_to_json_string(v), type ? type : "?");
            goto done;
        }
        if (i == 1 && (s = cfg_float(m, v, "rope_theta", &h->rope_base))) goto done;
    }
    if (json_object_object_get_ex(cfg, "use_sliding_window", &v) && json_object_get_boolean(v)) {
        s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: use_sliding_window true: sliding-window attention is not implemented", cfg_path);
        goto done;
    }
    h->arch = kind < 0 ? KVS_ARCH_LLAMA : kinds[kind].arch;
    if (h->arch != KVS_ARCH_LLAMA) h->rms_eps = 1e-6f; /* transformers' Qwen2Config/Qwen3Config default */
    /* q/k/v biases: always in Qwen2; Qwen3 and llama when attention_bias is true */
    h->qkv_bias = h->arch == KVS_ARCH_QWEN2;
    if (h->arch != KVS_ARCH_QWEN2 && json_object_object_get_ex(cfg, "attention_bias", &v)) h->qkv_bias = json_object_get_boolean(v);
    h->qk_norm = h->arch == KVS_ARCH_QWEN3;
    if ((s = cfg_int(m, cfg, "hidden_size", 1, &h->dim)) ||
        (s = cfg_int(m, cfg, "intermediate_size", 1, &h->ffn_dim)) ||
        (s = cfg_int(m, cfg, "num_hidden_layers", 1, &h->n_layers)) ||
        (s = cfg_int(m, cfg, "num_attention_heads", 1, &h->n_heads)) ||
        (s = cfg_int(m, cfg, "vocab_size", 1, &h->vocab)) ||
        (s = cfg_int(m, cfg, "max_position_embeddings", 1, &h->ctx_len)))
        goto done;
    h->n_kv_heads = h->n_heads;
    h->bos_id = 1;
    h->eos_id = 2;
    int tie = 0;
    if ((s = cfg_int(m, cfg, "num_key_value_heads", 0, &h->n_kv_heads)) ||
        (s = cfg_int(m, cfg, "head_dim", 0, &h->head_dim)) ||
        (s = cfg_int(m, cfg, "bos_token_id", 0, &h->bos_id)) ||
        (s = cfg_int(m, cfg, "eos_token_id", 0, &h->eos_id)) ||
        (s = cfg_float(m, cfg, "rms_norm_eps", &h->rms_eps)) ||
        (s = cfg_float(m, cfg, "rope_theta", &h->rope_base)))
        goto done;
    /* transformers' LlamaConfig default: tie_word_embeddings = false */
    if (json_object_object_get_ex(cfg, "tie_word_embeddings", &v)) tie = json_object_get_boolean(v);
    h->tied_output = tie;
    struct { const char *key; int v; } ids[] = {{"bos_token_id", h->bos_id}, {"eos_token_id", h->eos_id}};
    for (size_t i = 0; i < 2; i++)
        if (ids[i].v < -1 || ids[i].v >= h->vocab) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: config.json '%s' = %d is outside the vocabulary (vocab_size %d)",
                          cfg_path, ids[i].key, ids[i].v, h->vocab);
            goto done;
        }
done:
    json_object_put(cfg);
    return s;
}

/* Finds tensor `name`, checks dtype/shape/offsets; *data = its bytes. */
static kvs_status st_tensor(st_file *f, const char *name, int64_t rows, int64_t cols, int optional,
                            kvs_dtype *dt, const void **data, int *found) {
    kvs_model_file *m = f->m;
    json_object *t, *v;
    if (found) *found = 0;
    if (!json_object_object_get_ex(f->hdr, name, &t)) {
        if (optional) return KVS_OK;
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor '%s' missing", m->path, name);
    }
    if (found) *found = 1;
    if (!json_object_is_type(t, json_type_object) || !json_object_object_get_ex(t, "dtype", &v))
        return kvs_error(KVS_ERR_FORMAT, "%s: header: tensor '%s' has no dtype", m->path, name);
    const char *ds = json_object_get_string(v);
    size_t esz;
    if (strcmp(ds, "F32") == 0) { *dt = KVS_F32; esz = 4; }
    else if (strcmp(ds, "F16") == 0) { *dt = KVS_F16; esz = 2; }
    else if (strcmp(ds, "BF16") == 0) { *dt = KVS_BF16; esz = 2; }
    else
        return kvs_error(KVS_ERR_DTYPE, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)",
                         m->path, name, ds);
    json_object *shape, *offs;
    if (!json_object_object_get_ex(t, "shape", &shape) || !json_object_is_type(shape, json_type_array) ||
        !json_object_object_get_ex(t, "data_offsets", &offs) ||
        !json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2)
        return kvs_error(KVS_ERR_FORMAT, "%s: header: tensor '%s' lacks shape or data_offsets",
                         m->path, name);
    size_t nd = json_object_array_length(shape);
    int64_t got[2] = {1, 1};
    int ok = (rows == 1) ? (nd == 1) : (nd == 2);
    for (size_t i = 0; ok && i < nd; i++) {
        int64_t x = json_object_get_int64(json_object_array_get_idx(shape, i));
        if (nd == 1) got[1] = x;
        else got[i] = x;
    }
    /* got = [rows, cols] for 2-D; a vector is [cols] */
    int64_t g_rows = nd == 2 ? got[0] : 1, g_cols = nd == 2 ? got[1] : got[1];
    if (!ok || g_rows != rows || g_cols != cols)
        return kvs_error(KVS_ERR_SHAPE, "%s: tensor '%s' has shape %s, expected [%lld, %lld]", m->path,
                         name, json_object_to_json_string(shape), (long long)rows, (long long)cols);
    int64_t b = json_object_get_int64(json_object_array_get_idx(offs, 0));
    int64_t e = json_object_get_int64(json_object_array_get_idx(offs, 1));
    uint64_t need = (uint64_t)(rows * cols) * esz;
    if (b < 0 || e < b || (uint64_t)(e - b) != need || (uint64_t)e > f->data_size)
        return kvs_error(KVS_ERR_FORMAT,
                         "%s: offset %zu: tensor '%s' data_offsets [%lld, %lld] invalid (needs %llu "
                         "bytes, data section %llu bytes)",
                         m->path, f->data_off + (size_t)(b > 0 ? b : 0), name, (long long)b,
                         (long long)e, (unsigned long long)need, (unsigned long long)f->data_size);
    *data = f->data + b;
    return KVS_OK;
}

/* Weight from tensor `name`; permute_heads > 0: un-permute rotate-half q/k rows of that many heads. */
static kvs_status st_weight(st_file *f, const char *name, int64_t rows, int64_t cols,
                            int permute_heads, kvs_weight *w) {
    kvs_model_file *m = f->m;
    kvs_dtype dt;
    const void *data;
    KVS_TRY(st_tensor(f, name, rows, cols, 0, &dt, &data, NULL));
    if (permute_heads <= 0) return kvs_mf_set_weight(m, w, dt, data, rows, cols);
    size_t esz = dt == KVS_F32 ? 4 : 2;
    size_t row_bytes = (size_t)cols * esz;
    uint8_t *dst = kvs_mf_alloc(m, (size_t)rows * row_bytes);
    if (!dst) return KVS_ERR_OUT_OF_MEMORY;
    int64_t hd = rows / permute_heads, half = hd / 2;
    for (int64_t h = 0; h < permute_heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t p = 0; p < 2; p++)
                memcpy(dst + (size_t)(h * hd + 2 * i + p) * row_bytes,
                       (const uint8_t *)data + (size_t)(h * hd + p * half + i) * row_bytes, row_bytes);
    return kvs_mf_set_weight(m, w, dt, dst, rows, cols);
}

kvs_status kvs_mf_load_safetensors(kvs_model_file *m, const char *st_path, const char *cfg_path) {
    KVS_TRY(load_config(m, cfg_path));
    KVS_TRY(kvs_mf_check_hparams(m));
    kvs_model_hparams *h = &m->hp;
    KVS_TRY(kvs_map_file(st_path, &m->map, &m->heap, &m->map_size));
    const uint8_t *base = m->map ? m->map : m->heap;
    size_t size = m->map_size;
    uint64_t n;
    if (size < 8) return kvs_error(KVS_ERR_FORMAT, "%s: offset 0: file shorter than 8 bytes", st_path);
    memcpy(&n, base, 8);
    if (n > size - 8 || n > ST_MAX_HEADER)
        return kvs_error(KVS_ERR_FORMAT, "%s: offset 0: header length %llu exceeds the file (%zu "
                                         "bytes) or %u", st_path, (unsigned long long)n, size,
                         ST_MAX_HEADER);
    json_tokener *tk = json_tokener_new();
    if (!tk) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "json tokener");
    json_object *hdr = json_tokener_parse_ex(tk, (const char *)base + 8, (int)n);
    enum json_tokener_error je = json_tokener_get_error(tk);
    size_t parsed = json_tokener_get_parse_end(tk);
    json_tokener_free(tk);
    if (!hdr || je != json_tokener_success) {
        if (hdr) json_object_put(hdr);
        return kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: header JSON: %s", st_path, 8 + parsed,
                         json_tokener_error_desc(je));
    }
    if (!json_object_is_type(hdr, json_type_object)) {
        json_object_put(hdr);
        return kvs_error(KVS_ERR_FORMAT, "%s: offset 8: header is not a JSON object", st_path);
    }
    st_file f = {m, base + 8 + n, size - 8 - n, (size_t)(8 + n), hdr};
    kvs_status s;
    const int64_t D = h->dim, Q = (int64_t)h->n_heads * h->head_dim,
                  KV = (int64_t)h->n_kv_heads * h->head_dim, F = h->ffn_dim, V = h->vocab;
    if ((s = st_weight(&f, "model.embed_tokens.weight", V, D, 0, &m->w.token_embd))) goto done;
    if ((s = st_weight(&f, "model.norm.weight", 1, D, 0, &m->w.output_norm))) goto done;
    int found = 0;
    {
        kvs_dtype dt, edt;
        const void *d, *e;
        if ((s = st_tensor(&f, "lm_head.weight", V, D, 1, &dt, &d, &found))) goto done;
        /* tie_word_embeddings: transformers' tie_weights() makes the output weight the embedding, so
         * a lm_head.weight beside it is a saved copy (kept only when it is one, else refused: which
         * of the two was meant is not in the file) */
        if (found && h->tied_output) {
            if ((s = st_tensor(&f, "model.embed_tokens.weight", V, D, 0, &edt, &e, NULL))) goto done;
            if (dt != edt || memcmp(d, e, (size_t)(V * D) * (dt == KVS_F32 ? 4 : 2)) != 0) {
                s = kvs_error(KVS_ERR_FORMAT, "%s: config.json says tie_word_embeddings: true but tensor 'lm_head.weight' "
                              "differs from 'model.embed_tokens.weight' (tied: the output weight is the embedding)",
                              m->path);
                goto done;
            }
            found = 0;
        }
    }
    if (found) {
        if ((s = st_weight(&f, "lm_head.weight", V, D, 0, &m->w.output))) goto done;
        h->tied_output = 0;
    } else if (!h->tied_output) {
        s = kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor 'lm_head.weight' missing and config.json does not say "
                      "tie_word_embeddings: true", m->path);
        goto done;
    } else {
        m->w.output = m->w.token_embd;
        h->tied_output = 1;
    }
    for (int l = 0; l < h->n_layers && s == KVS_OK; l++) {
        kvs_layer_weights *L = &m->layers[l];
        char nm[128];
#define W_(field, suffix, rows, cols, perm)                                                        \
    snprintf(nm, sizeof nm, "model.layers.%d." suffix ".weight", l);                               \
    if ((s = st_weight(&f, nm, rows, cols, perm, &L->field))) break
        /* llama rows are rotate-half: un-permuted to the adjacent layout; Qwen rows stay (NEOX RoPE) */
        const int perm = h->arch == KVS_ARCH_LLAMA;
        W_(attn_norm, "input_layernorm", 1, D, 0);
        W_(wq, "self_attn.q_proj", Q, D, perm ? h->n_heads : 0);
        W_(wk, "self_attn.k_proj", KV, D, perm ? h->n_kv_heads : 0);
        W_(wv, "self_attn.v_proj", KV, D, 0);
        W_(wo, "self_attn.o_proj", D, Q, 0);
        W_(ffn_norm, "post_attention_layernorm", 1, D, 0);
        W_(w_gate, "mlp.gate_proj", F, D, 0);
        W_(w_down, "mlp.down_proj", D, F, 0);
        W_(w_up, "mlp.up_proj", F, D, 0);
#undef W_
        if (h->qkv_bias) {
            if (perm) { /* a llama with biases would need them un-permuted too: not done */
                s = kvs_error(KVS_ERR_UNSUPPORTED, "%s: a llama with attention_bias is not supported", m->path);
                break;
            }
            const char *bn[3] = {"q_proj", "k_proj", "v_proj"};
            kvs_weight *bw[3] = {&L->bq, &L->bk, &L->bv};
            const int64_t bl[3] = {Q, KV, KV};
            for (int i = 0; i < 3 && s == KVS_OK; i++) {
                snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s.bias", l, bn[i]);
                s = st_weight(&f, nm, 1, bl[i], 0, bw[i]);
            }
        }
        if (s == KVS_OK && h->qk_norm) {
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
            if ((s = st_weight(&f, nm, 1, h->head_dim, 0, &L->q_norm))) break;
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
            if ((s = st_weight(&f, nm, 1, h->head_dim, 0, &L->k_norm))) break;
        }
    }
done:
    json_object_put(hdr);
    return s;
}
