/* Fuzz target: the GGUF reader from memory (header, every metadata value and array element through
 * the typed getters, tensor infos with every ggml type's block size, conversion of the readable
 * tensor types to f32), the tokenizer built from its metadata, and, for files the reader accepts,
 * the model loader (kvs_model_file_open: architecture, hyperparameters, special-token ids, tensor
 * shapes and counts). Seeds: tests/data/fuzz/corpus/gguf (tiny models cut from the fixtures). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"

static void walk_value(const kvs_gguf_value *v) {
    if (v->type != KVS_GGUF_ARRAY) return;
    uint64_t n = v->arr.n < 64 ? v->arr.n : 64;
    for (uint64_t j = 0; j < n; j++) {
        int64_t i;
        double d;
        kvs_gguf_str s;
        kvs_gguf_arr_int(v, j, &i);
        kvs_gguf_arr_float(v, j, &d);
        if (kvs_gguf_arr_str(v, j, &s) == KVS_OK && s.len > 0 && ((const volatile char *)s.data)[s.len - 1] == 1)
            i = 0;
        if (v->arr.items) walk_value(&v->arr.items[j]);
    }
    kvs_gguf_arr_int(v, v->arr.n, NULL);   /* out of range */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvs_gguf *g = NULL;
    if (kvs_gguf_open_memory(&g, data, size) != KVS_OK) return 0;
    int64_t nkv = kvs_gguf_n_kv(g), nt = kvs_gguf_n_tensors(g);
    for (int64_t i = 0; i < nkv; i++) {
        const char *key = kvs_gguf_key(g, i);
        const kvs_gguf_value *v = kvs_gguf_value_at(g, i);
        if (!key || !v || kvs_gguf_find_key(g, key) != i) fuzz_fail("key %lld lookup", (long long)i);
        int64_t iv;
        double dv;
        int bv;
        kvs_gguf_str sv;
        char buf[16];
        kvs_gguf_get_int(g, key, &iv);
        kvs_gguf_get_float(g, key, &dv);
        kvs_gguf_get_bool(g, key, &bv);
        kvs_gguf_get_str(g, key, &sv);
        kvs_gguf_get_string(g, key, buf, sizeof buf);
        walk_value(v);
    }
    for (int64_t i = 0; i < nt; i++) {
        const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, i);
        if (!t || kvs_gguf_find_tensor(g, t->name) != i) fuzz_fail("tensor %lld lookup", (long long)i);
        if ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->nbytes > data + size)
            fuzz_fail("tensor '%s' data outside the input", t->name);
        kvs_dtype dt;
        int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        if (kvs_gguf_tensor_dtype(t, &dt) == KVS_OK && nel <= (1 << 16)) {
            float *f = malloc((size_t)nel * sizeof *f + 1);
            if (f) kvs_gguf_tensor_to_f32(t, f);
            free(f);
        }
    }
    kvs_tokenizer *tk = NULL;
    if (kvs_tokenizer_from_gguf(&tk, g) == KVS_OK) {
        int32_t ids[64];
        int64_t n = 0;
        static const char text[] = "Once upon a time, \xe2\x96\x81 <s> caf\xc3\xa9 \xff!";
        if (kvs_tokenizer_encode(tk, text, sizeof text - 1, KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PARSE_SPECIAL, ids, 64,
                                 &n) == KVS_OK) {
            char out[1024];
            size_t len;
            kvs_tokenizer_decode(tk, ids, n, out, sizeof out, &len);
        }
        kvs_tokenizer_destroy(&tk);
    }
    int full = nt > 0;
    kvs_gguf_close(&g);
    if (full) {
        /* the model loader reads paths: the same bytes as a file */
        const char *path = fuzz_write("model.gguf", data, size);
        kvs_model_file *m = NULL;
        if (kvs_model_file_open(&m, path, NULL) == KVS_OK) {
            const kvs_model_hparams *h = kvs_model_file_hparams(m);
            if (h->bos_id >= h->vocab || h->eos_id >= h->vocab || h->mask_id >= h->vocab)
                fuzz_fail("special token id beyond vocab %d accepted", h->vocab);
            if (kvs_tokenizer_from_model_file(&tk, m) == KVS_OK) kvs_tokenizer_destroy(&tk);
            kvs_model_file_close(&m);
        }
    }
    return 0;
}
