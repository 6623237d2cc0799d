/* Model description from a GGUF file: llama.cpp key names ({arch}.block_count, ...) and tensor
 * names (token_embd, blk.N.attn_q, ...). llama/llada q/k rows are already in the adjacent-pair RoPE
 * layout (llama.cpp's converters permute Hugging Face weights back into Meta order); qwen2/qwen3/dream
 * rows are not permuted and run with NEOX RoPE (model_file.c sets rope_mode per architecture). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "format/format.h"

static kvs_status get_i(kvs_model_file *m, const char *arch, const char *suffix, int required,
                        int *dst) {
    char key[256];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    kvs_status s = kvs_gguf_get_int(m->gguf, key, &v);
    if (s == KVS_ERR_NOT_FOUND && !required) return KVS_OK;
    if (s == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: required key '%s' missing", m->path, key);
    if (s != KVS_OK) return s;
    if (v < 0 || v > (1 << 30))
        return kvs_error(KVS_ERR_FORMAT, "%s: key '%s' = %lld out of range", m->path, key, (long long)v);
    *dst = (int)v;
    return KVS_OK;
}

static kvs_status get_f(kvs_model_file *m, const char *key, float *dst) {
    double v;
    kvs_status s = kvs_gguf_get_float(m->gguf, key, &v);
    if (s == KVS_ERR_NOT_FOUND) return KVS_OK;
    if (s != KVS_OK) return s;
    *dst = (float)v;
    return KVS_OK;
}

/* {arch}.suffix as a bool (0/1 in *dst; *present = 0 when missing). */
static kvs_status get_b(kvs_model_file *m, const char *key, int *dst, int *present) {
    kvs_status s = kvs_gguf_get_bool(m->gguf, key, dst);
    *present = s == KVS_OK;
    return s == KVS_ERR_NOT_FOUND ? KVS_OK : s;
}

/* The hparams beyond the llama set that llama.cpp reads for these files: value_length (must equal
 * key_length), RoPE scaling (only unscaled RoPE is implemented), attention.causal (must agree with
 * the architecture), diffusion.shift_logits. */
static kvs_status extra_hparams(kvs_model_file *m, const char *arch) {
    kvs_model_hparams *h = &m->hp;
    char key[160];
    int vlen = -1;
    KVS_TRY(get_i(m, arch, "attention.value_length", 0, &vlen));
    if (vlen >= 0 && vlen != h->head_dim)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s.attention.value_length = %d differs from the key length %d (head_dim): "
                         "separate K and V head widths are not supported", m->path, arch, vlen, h->head_dim);
    char type[64];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    kvs_status s = kvs_gguf_get_string(m->gguf, key, type, sizeof type);
    if (s == KVS_ERR_NOT_FOUND) snprintf(type, sizeof type, "none");
    else if (s != KVS_OK) return s;
    if (strcmp(type, "none") != 0 && strcmp(type, "linear") != 0)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s = '%s': RoPE scaling type '%s' is not implemented (kvsieve runs "
                         "unscaled RoPE only: type none, or linear with factor 1)", m->path, key, type, type);
    const char *fkeys[2] = {"rope.scaling.factor", "rope.scale_linear"};
    for (int i = 0; i < 2; i++) {
        float f = 0.0f;
        snprintf(key, sizeof key, "%s.%s", arch, fkeys[i]);
        KVS_TRY(get_f(m, key, &f));
        /* llama.cpp: freq_scale = 1 / factor, a factor of 0 meaning none */
        if (f != 0.0f && f != 1.0f)
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s = %g: RoPE scaling (type %s, factor %g) is not implemented "
                             "(kvsieve runs unscaled RoPE only)", m->path, key, (double)f, type, (double)f);
    }
    int causal = 0, present = 0;
    snprintf(key, sizeof key, "%s.attention.causal", arch);
    KVS_TRY(get_b(m, key, &causal, &present));
    if (present && causal != !kvs_arch_is_diffusion(h->arch))
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s = %s, but architecture '%s' is %s", m->path, key,
                         causal ? "true" : "false", arch, causal ? "bidirectional" : "causal");
    h->logit_shift = h->arch == KVS_ARCH_DREAM;
    int shift = 0;
    KVS_TRY(get_b(m, "diffusion.shift_logits", &shift, &present));
    if (present && kvs_arch_is_diffusion(h->arch)) h->logit_shift = shift;
    return KVS_OK;
}

static kvs_status get_id(kvs_model_file *m, const char *key, int *dst) {
    int64_t v;
    kvs_status s = kvs_gguf_get_int(m->gguf, key, &v);
    if (s == KVS_ERR_NOT_FOUND) return KVS_OK;
    if (s != KVS_OK) return s;
    if (v < 0 || v >= m->hp.vocab)
        return kvs_error(KVS_ERR_FORMAT, "%s: %s = %lld is outside the vocabulary (%d tokens)", m->path,
                         key, (long long)v, m->hp.vocab);
    *dst = (int)v;
    return KVS_OK;
}

/* Looks up a tensor, checks its shape [rows][cols] (rows = 1: a vector) and dtype. */
static kvs_status tensor(kvs_model_file *m, const char *name, int64_t rows, int64_t cols,
                         int optional, kvs_weight *w, int *found) {
    int64_t i = kvs_gguf_find_tensor(m->gguf, name);
    if (found) *found = i >= 0;
    if (i < 0) {
        if (optional) return KVS_OK;
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor '%s' missing", m->path, name);
    }
    const kvs_gguf_tensor_info *t = kvs_gguf_tensor(m->gguf, i);
    m->gguf_used[i] = 1;
    int ok = t->ne[0] == cols && t->ne[1] == rows && t->ne[2] == 1 && t->ne[3] == 1;
    if (!ok)
        return kvs_error(KVS_ERR_SHAPE,
                         "%s: tensor '%s' has ne = [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         m->path, name, (long long)t->ne[0], (long long)t->ne[1],
                         (long long)t->ne[2], (long long)t->ne[3], (long long)cols, (long long)rows);
    kvs_dtype dt;
    if (kvs_gguf_tensor_dtype(t, &dt) != KVS_OK)
        return kvs_error(KVS_ERR_DTYPE, "%s: tensor '%s' has ggml type %u (%s): not supported (%s are)", m->path,
                         name, t->ggml_type, kvs_ggml_type_name(t->ggml_type), KVS_GGUF_TYPES_SUPPORTED);
    return kvs_mf_set_weight(m, w, dt, t->data, rows, cols);
}

kvs_status kvs_mf_load_gguf(kvs_model_file *m) {
    KVS_TRY(kvs_gguf_open(&m->gguf, m->path));
    kvs_model_hparams *h = &m->hp;
    char arch[64];
    kvs_status s = kvs_gguf_get_string(m->gguf, "general.architecture", arch, sizeof arch);
    if (s == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_FORMAT, "%s: no general.architecture", m->path);
    if (s != KVS_OK) return s;
    static const kvs_arch archs[] = {KVS_ARCH_LLAMA, KVS_ARCH_LLADA, KVS_ARCH_QWEN2, KVS_ARCH_QWEN3, KVS_ARCH_DREAM};
    size_t ai = 0;
    while (ai < sizeof archs / sizeof archs[0] && strcmp(arch, kvs_arch_name(archs[ai])) != 0) ai++;
    if (ai == sizeof archs / sizeof archs[0])
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (llama, llada, qwen2, qwen3, dream)",
                         m->path, arch);
    h->arch = archs[ai];
    if (kvs_gguf_n_tensors(m->gguf) == 0)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: a vocab-only GGUF (no tensors) is not a model",
                         m->path);
    KVS_TRY(get_i(m, arch, "block_count", 1, &h->n_layers));
    KVS_TRY(get_i(m, arch, "embedding_length", 1, &h->dim));
    KVS_TRY(get_i(m, arch, "feed_forward_length", 1, &h->ffn_dim));
    KVS_TRY(get_i(m, arch, "attention.head_count", 1, &h->n_heads));
    h->n_kv_heads = h->n_heads;
    KVS_TRY(get_i(m, arch, "attention.head_count_kv", 0, &h->n_kv_heads));
    KVS_TRY(get_i(m, arch, "context_length", 1, &h->ctx_len));
    h->head_dim = -1; /* -1: key absent (head_dim = dim / n_heads); a key of 0 is malformed */
    KVS_TRY(get_i(m, arch, "attention.key_length", 0, &h->head_dim));
    if (h->head_dim == 0)
        return kvs_error(KVS_ERR_FORMAT, "%s: %s.attention.key_length = 0 (a head width must be positive)", m->path, arch);
    if (h->head_dim < 0) h->head_dim = 0;
    KVS_TRY(get_i(m, arch, "rope.dimension_count", 0, &h->rope_dim));
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    KVS_TRY(get_f(m, key, &h->rms_eps));
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    KVS_TRY(get_f(m, key, &h->rope_base));
    /* vocab: {arch}.vocab_size, else the tokenizer's token count, else token_embd rows */
    h->vocab = 0;
    KVS_TRY(get_i(m, arch, "vocab_size", 0, &h->vocab));
    int64_t te = kvs_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (h->vocab == 0 && te >= 0) h->vocab = (int)kvs_gguf_tensor(m->gguf, te)->ne[1];
    /* an embedding_length the tensors do not have is a shape mismatch, named before the checks of
     * what is derived from it (head_dim, the rope dimension) */
    if (te >= 0 && h->dim > 0 && kvs_gguf_tensor(m->gguf, te)->ne[0] != h->dim) {
        const kvs_gguf_tensor_info *t = kvs_gguf_tensor(m->gguf, te);
        return kvs_error(KVS_ERR_SHAPE, "%s: %s.embedding_length = %d does not match tensor 'token_embd.weight' (ne = [%lld, "
                         "%lld]: %lld columns)", m->path, arch, h->dim, (long long)t->ne[0], (long long)t->ne[1],
                         (long long)t->ne[0]);
    }
    KVS_TRY(kvs_mf_check_hparams(m));
    /* none of the five architectures rotates part of a head: llama.cpp's graphs for them assert
     * n_embd_head == n_rot, and running the partial RoPE the key asks for would be another model */
    if (h->rope_dim < h->head_dim)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count %d < head_dim %d: partial RoPE is not part of "
                         "the %s architecture (llama.cpp refuses it too)", m->path, arch, h->rope_dim, h->head_dim, arch);
    KVS_TRY(extra_hparams(m, arch));
    /* SentencePiece llama vocabularies: BOS 1, EOS 2 unless the file says otherwise */
    kvs_gguf_str tm;
    if (kvs_gguf_get_str(m->gguf, "tokenizer.ggml.model", &tm) == KVS_OK && tm.len == 5 &&
        memcmp(tm.data, "llama", 5) == 0 && h->vocab > 2) {
        h->bos_id = 1;
        h->eos_id = 2;
    }
    kvs_clear_error();
    KVS_TRY(get_id(m, "tokenizer.ggml.bos_token_id", &h->bos_id));
    KVS_TRY(get_id(m, "tokenizer.ggml.eos_token_id", &h->eos_id));
    KVS_TRY(get_id(m, "tokenizer.ggml.mask_token_id", &h->mask_id));
    int unk_id = -1; /* checked only: the tokenizer reads it (README: special-token ids outside the vocabulary are refused) */
    KVS_TRY(get_id(m, "tokenizer.ggml.unknown_token_id", &unk_id));
    /* a masked-diffusion model decodes by filling its mask token (LLaDA, Dream; llama-diffusion-cli
     * refuses a file without one too): refused here with the key's name rather than at the first decode */
    if (kvs_arch_is_diffusion(h->arch) && h->mask_id < 0)
        return kvs_error(KVS_ERR_FORMAT, "%s: architecture '%s' is a masked-diffusion model, but the file has no "
                         "tokenizer.ggml.mask_token_id", m->path, kvs_arch_name(h->arch));

    /* block_count must describe the layers present: a blk.N tensor with N >= block_count means the
     * key shrank (running fewer layers than the file holds) */
    for (int64_t i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
        const char *tn = kvs_gguf_tensor(m->gguf, i)->name;
        long blk;
        char *end;
        if (strncmp(tn, "blk.", 4) != 0) continue;
        blk = strtol(tn + 4, &end, 10);
        if (end != tn + 4 && *end == '.' && (blk < 0 || blk >= h->n_layers))
            return kvs_error(KVS_ERR_FORMAT, "%s: tensor '%s' belongs to layer %ld but %s.block_count = %d",
                             m->path, tn, blk, arch, h->n_layers);
    }
    m->gguf_used = kvs_mf_alloc(m, (size_t)kvs_gguf_n_tensors(m->gguf));
    if (!m->gguf_used) return KVS_ERR_OUT_OF_MEMORY;
    memset(m->gguf_used, 0, (size_t)kvs_gguf_n_tensors(m->gguf));
    const int64_t D = h->dim, Q = (int64_t)h->n_heads * h->head_dim,
                  KV = (int64_t)h->n_kv_heads * h->head_dim, F = h->ffn_dim, V = h->vocab;
    KVS_TRY(tensor(m, "token_embd.weight", V, D, 0, &m->w.token_embd, NULL));
    KVS_TRY(tensor(m, "output_norm.weight", 1, D, 0, &m->w.output_norm, NULL));
    int has_out = 0;
    KVS_TRY(tensor(m, "output.weight", V, D, 1, &m->w.output, &has_out));
    if (!has_out) {
        m->w.output = m->w.token_embd;
        h->tied_output = 1;
    }
    for (int l = 0; l < h->n_layers; l++) {
        kvs_layer_weights *L = &m->layers[l];
        char nm[96];
#define T_(field, suffix, rows, cols)                                                              \
    snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", l);                                        \
    KVS_TRY(tensor(m, nm, rows, cols, 0, &L->field, NULL))
        T_(attn_norm, "attn_norm", 1, D);
        T_(wq, "attn_q", Q, D);
        T_(wk, "attn_k", KV, D);
        T_(wv, "attn_v", KV, D);
        T_(wo, "attn_output", D, Q);
        T_(ffn_norm, "ffn_norm", 1, D);
        T_(w_gate, "ffn_gate", F, D);
        T_(w_down, "ffn_down", D, F);
        T_(w_up, "ffn_up", F, D);
#undef T_
        /* q/k/v biases (qwen2, dream; optional elsewhere as in llama.cpp): all three or none */
        const char *bn[3] = {"attn_q", "attn_k", "attn_v"};
        kvs_weight *bw[3] = {&L->bq, &L->bk, &L->bv};
        const int64_t bl[3] = {Q, KV, KV};
        int nb = 0, got[3];
        for (int i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.bias", l, bn[i]);
            KVS_TRY(tensor(m, nm, 1, bl[i], 1, bw[i], &got[i]));
            nb += got[i];
        }
        if (nb != 0 && nb != 3)
            for (int i = 0; i < 3; i++)
                if (!got[i])
                    return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor 'blk.%d.%s.bias' missing (the layer has the other "
                                     "q/k/v biases)", m->path, l, bn[i]);
        if (l == 0) h->qkv_bias = nb == 3;
        else if (h->qkv_bias != (nb == 3))
            return kvs_error(KVS_ERR_FORMAT, "%s: layer %d %s q/k/v biases but layer 0 %s", m->path, l,
                             nb ? "has" : "lacks", h->qkv_bias ? "has them" : "does not");
        if (h->arch == KVS_ARCH_QWEN3) {
            snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", l);
            KVS_TRY(tensor(m, nm, 1, h->head_dim, 0, &L->q_norm, NULL));
            snprintf(nm, sizeof nm, "blk.%d.attn_k_norm.weight", l);
            KVS_TRY(tensor(m, nm, 1, h->head_dim, 0, &L->k_norm, NULL));
            h->qk_norm = 1;
        }
    }
    /* a tensor the architecture does not read (an output bias, llama3's rope_freqs, ...) would change
     * what the model computes: refused rather than ignored */
    for (int64_t i = 0; i < kvs_gguf_n_tensors(m->gguf); i++)
        if (!m->gguf_used[i])
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: tensor '%s' is not used by kvsieve's %s model (refused rather "
                             "than ignored)", m->path, kvs_gguf_tensor(m->gguf, i)->name, arch);
    return KVS_OK;
}
