/* llama2.c checkpoints (karpathy/llama2.c run.c and export.py conventions).
 *
 * Legacy format (run.c, export.py legacy_export): 7 x int32 header
 *   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 * where vocab_size < 0 means the classifier is NOT shared with the embedding (|vocab_size| is the
 * vocabulary), then f32 arrays, each [out][in] row-major:
 *   token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim],
 *   wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim], w1 [L][hidden][dim],
 *   w2 [L][dim][hidden], w3 [L][hidden][dim], rms_final [dim],
 *   freq_cis_real [seq_len][head_size/2], freq_cis_imag [seq_len][head_size/2] (ignored; some
 *   exports omit them: accepted when the file size says so), wcls [vocab][dim] (unshared only).
 * The file must end where these arrays end (trailing bytes are refused).
 * Version 1 format (export.py version1_export): u32 magic 0x616b3432 ("ak42"), i32 version = 1,
 *   7 x int32 as above (vocab_size positive), u8 shared_classifier, zero padding to 256 bytes, then
 *   rms_att [L][dim], rms_ffn [L][dim], rms_final [dim], token_embedding, wq, wk, wv, wo, w1, w2,
 *   w3 (all layers each), wcls when not shared.
 * q/k rows are in Meta's adjacent-pair RoPE layout (llama2.c's model.py). RMS eps is 1e-5 and the
 * RoPE base 10000 (run.c constants). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "format/format.h"

#define LLAMA2C_MAGIC 0x616b3432u

kvs_status kvs_mf_load_llama2c(kvs_model_file *m) {
    KVS_TRY(kvs_map_file(m->path, &m->map, &m->heap, &m->map_size));
    const uint8_t *base = m->map ? m->map : m->heap;
    size_t size = m->map_size;
    int32_t hd[7];
    uint32_t magic = 0;
    int version = 0, shared;
    size_t off;
    if (size >= 4) memcpy(&magic, base, 4);
    if (magic == LLAMA2C_MAGIC) {
        if (size < 256)
            return kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: llama2.c v1 header truncated (256 "
                                             "bytes needed)", m->path, size);
        int32_t v;
        memcpy(&v, base + 4, 4);
        if (v != 1)
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: offset 4: llama2.c export version %d (only "
                                                  "1, float32, is supported)", m->path, v);
        version = 1;
        memcpy(hd, base + 8, sizeof hd);
        shared = base[36] != 0;
        off = 256;
    } else {
        if (size < 28)
            return kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: not a GGUF file and too short for a "
                                             "llama2.c header (28 bytes)", m->path, size);
        memcpy(hd, base, sizeof hd);
        shared = hd[5] > 0;
        if (hd[5] < 0) hd[5] = hd[5] == INT32_MIN ? 0 : -hd[5];
        off = 28;
    }
    kvs_model_hparams *h = &m->hp;
    h->arch = KVS_ARCH_LLAMA;
    h->dim = hd[0];
    h->ffn_dim = hd[1];
    h->n_layers = hd[2];
    h->n_heads = hd[3];
    h->n_kv_heads = hd[4];
    h->vocab = hd[5];
    h->ctx_len = hd[6];
    h->bos_id = 1;   /* llama2.c run.c: BOS = 1, EOS = 2 (sentencepiece llama vocabulary) */
    h->eos_id = 2;
    h->tied_output = shared;
    KVS_TRY(kvs_mf_check_hparams(m));
    if (h->dim % h->n_heads != 0 || h->head_dim * h->n_heads != h->dim)
        return kvs_error(KVS_ERR_FORMAT, "%s: dim %d not divisible by n_heads %d", m->path, h->dim,
                         h->n_heads);

    const uint64_t D = (uint64_t)h->dim, L = (uint64_t)h->n_layers, F = (uint64_t)h->ffn_dim,
                   V = (uint64_t)h->vocab, KV = (uint64_t)h->n_kv_heads * (uint64_t)h->head_dim,
                   HS = (uint64_t)h->head_dim, S = (uint64_t)h->ctx_len;
    /* floats in the file (all < 2^24 each factor, so no 64-bit overflow) */
    uint64_t n_core = V * D + L * D * 2 + L * (D * D * 2 + KV * D * 2) + L * F * D * 3 + D;
    uint64_t n_freq = version == 1 ? 0 : S * HS;   /* real + imag, S * HS/2 each */
    uint64_t n_cls = shared ? 0 : V * D;
    uint64_t avail = (size - off) / 4;
    int has_freq = version == 0;
    if (avail < n_core + n_freq + n_cls) {
        if (version == 0 && avail >= n_core + n_cls && n_freq > 0 && (size - off) % 4 == 0 &&
            avail == n_core + n_cls) {
            has_freq = 0;   /* an export without the freq_cis tables */
        } else {
            return kvs_error(KVS_ERR_FORMAT,
                             "%s: offset %zu: truncated llama2.c checkpoint: %llu bytes of weights "
                             "needed, %zu present (dim %d, hidden %d, layers %d, heads %d/%d, "
                             "vocab %d, seq %d, %s classifier)",
                             m->path, size, (unsigned long long)((n_core + n_freq + n_cls) * 4),
                             size - off, h->dim, h->ffn_dim, h->n_layers, h->n_heads, h->n_kv_heads,
                             h->vocab, h->ctx_len, shared ? "shared" : "separate");
        }
    }
    /* the header must describe the whole file: bytes after the weights mean a header that shrank
     * (fewer layers, a smaller vocabulary) or another file */
    size_t used = off + (size_t)((n_core + (has_freq ? n_freq : 0) + n_cls) * 4);
    if (size != used)
        return kvs_error(KVS_ERR_FORMAT,
                         "%s: offset %zu: %zu trailing bytes after the weights the header describes "
                         "(dim %d, hidden %d, layers %d, heads %d/%d, vocab %d, seq %d, %s classifier)",
                         m->path, used, size - used, h->dim, h->ffn_dim, h->n_layers, h->n_heads,
                         h->n_kv_heads, h->vocab, h->ctx_len, shared ? "shared" : "separate");
    const float *p = (const float *)(const void *)(base + off);
    const float *tok = NULL, *att = NULL, *ffn = NULL, *fin = NULL, *wq, *wk, *wv, *wo, *w1, *w2,
                *w3, *cls;
    if (version == 1) {
        att = p; p += L * D;
        ffn = p; p += L * D;
        fin = p; p += D;
        tok = p; p += V * D;
    } else {
        tok = p; p += V * D;
        att = p; p += L * D;
    }
    wq = p; p += L * D * D;
    wk = p; p += L * KV * D;
    wv = p; p += L * KV * D;
    wo = p; p += L * D * D;
    if (version == 0) { ffn = p; p += L * D; }
    w1 = p; p += L * F * D;
    w2 = p; p += L * D * F;
    w3 = p; p += L * F * D;
    if (version == 0) {
        fin = p; p += D;
        if (has_freq) p += n_freq;
    }
    cls = shared ? tok : p;

    KVS_TRY(kvs_mf_set_weight(m, &m->w.token_embd, KVS_F32, tok, (int64_t)V, (int64_t)D));
    KVS_TRY(kvs_mf_set_weight(m, &m->w.output_norm, KVS_F32, fin, 1, (int64_t)D));
    if (shared) m->w.output = m->w.token_embd;
    else KVS_TRY(kvs_mf_set_weight(m, &m->w.output, KVS_F32, cls, (int64_t)V, (int64_t)D));
    for (uint64_t l = 0; l < L; l++) {
        kvs_layer_weights *Lw = &m->layers[l];
        KVS_TRY(kvs_mf_set_weight(m, &Lw->attn_norm, KVS_F32, att + l * D, 1, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->wq, KVS_F32, wq + l * D * D, (int64_t)D, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->wk, KVS_F32, wk + l * KV * D, (int64_t)KV, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->wv, KVS_F32, wv + l * KV * D, (int64_t)KV, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->wo, KVS_F32, wo + l * D * D, (int64_t)D, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->ffn_norm, KVS_F32, ffn + l * D, 1, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->w_gate, KVS_F32, w1 + l * F * D, (int64_t)F, (int64_t)D));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->w_down, KVS_F32, w2 + l * D * F, (int64_t)D, (int64_t)F));
        KVS_TRY(kvs_mf_set_weight(m, &Lw->w_up, KVS_F32, w3 + l * F * D, (int64_t)F, (int64_t)D));
    }
    return KVS_OK;
}
