/* Fuzz target: the tokenizers on arbitrary bytes. Loads once (LLVMFuzzerInitialize) the fixtures'
 * vocabularies found through kvs_model_locate ($KVSIEVE_MODELS or ../shared/models): tok512.bin
 * (llama2.c SentencePiece), vocab/ggml-vocab-llama-spm.gguf (SPM), vocab/ggml-vocab-gpt-2.gguf
 * (byte-level BPE), vocab/ggml-vocab-bert-bge.gguf (WordPiece); a missing one is skipped (the
 * replay test then only checks the rest). Input: byte 0 picks the vocabulary (mod 4) and the encode
 * flags (bits 2-5), the rest is the text. Checks: every id in range; the count query agrees with the
 * encode; decode succeeds; decode(encode(text)) == text for the SPM and byte-level BPE vocabularies
 * (byte fallback makes them lossless) when special tokens are not parsed, BOS/EOS aside, and, for
 * SentencePiece, when the text holds no U+2581 (the space symbol itself decodes to a space).
 * Seeds: tests/data/fuzz/corpus/tokenizer (lines of the fixture texts, the vocab test inputs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"

static kvs_tokenizer *g_tok[4];
static int g_lossless[4] = {1, 1, 1, 0};

static kvs_tokenizer *load_gguf(const char *rel) {
    char path[4096];
    kvs_gguf *g = NULL;
    kvs_tokenizer *t = NULL;
    if (kvs_model_locate(rel, path, sizeof path) != KVS_OK || kvs_gguf_open(&g, path) != KVS_OK) return NULL;
    if (kvs_tokenizer_from_gguf(&t, g) != KVS_OK) t = NULL;
    kvs_gguf_close(&g);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[4096];
    if (kvs_model_locate("tok512.bin", path, sizeof path) == KVS_OK &&
        kvs_tokenizer_from_llama2c(&g_tok[0], path, 512) != KVS_OK)
        g_tok[0] = NULL;
    g_tok[1] = load_gguf("vocab/ggml-vocab-llama-spm.gguf");
    g_tok[2] = load_gguf("vocab/ggml-vocab-gpt-2.gguf");
    g_tok[3] = load_gguf("vocab/ggml-vocab-bert-bge.gguf");
    int n = 0;
    for (int i = 0; i < 4; i++) n += g_tok[i] != NULL;
    if (n < 4) fprintf(stderr, "fuzz_tokenizer: %d of 4 vocabularies found (set KVSIEVE_MODELS)\n", n);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    int which = data[0] & 3;
    unsigned flags = (data[0] >> 2) & 15u;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    const kvs_tokenizer *t = g_tok[which];
    if (!t) return 0;
    int64_t count = -1;
    kvs_status s = kvs_tokenizer_encode(t, text, n, flags, NULL, 0, &count);
    if (s != KVS_OK && s != KVS_ERR_OUT_OF_RANGE) {
        if (s == KVS_ERR_NOT_FOUND && which == 3) return 0;   /* WordPiece: no unknown for some byte */
        fuzz_fail("vocab %d: count query failed: %s", which, kvs_last_error());
    }
    if (count < 0 || count > (int64_t)n * 4 + 8) fuzz_fail("vocab %d: %lld ids for %zu bytes", which, (long long)count, n);
    int32_t *ids = malloc((size_t)(count + 1) * sizeof *ids);
    if (!ids) return 0;
    int64_t got = -1;
    s = kvs_tokenizer_encode(t, text, n, flags, ids, count, &got);
    if (s != KVS_OK || got != count) fuzz_fail("vocab %d: encode gave %lld ids after a count of %lld: %s", which, (long long)got,
                                              (long long)count, kvs_last_error());
    int32_t nv = kvs_tokenizer_n_vocab(t);
    for (int64_t i = 0; i < got; i++)
        if (ids[i] < 0 || ids[i] >= nv) fuzz_fail("vocab %d: id %d out of range", which, ids[i]);
    size_t need = 0;
    char one;
    s = kvs_tokenizer_decode(t, ids, got, &one, 1, &need);
    if (s != KVS_OK && s != KVS_ERR_OUT_OF_RANGE) fuzz_fail("vocab %d: decode size query: %s", which, kvs_last_error());
    char *out = malloc(need + 1);
    size_t len = 0;
    if (!out) {
        free(ids);
        return 0;
    }
    s = kvs_tokenizer_decode(t, ids, got, out, need + 1, &len);
    if (s != KVS_OK || len != need) fuzz_fail("vocab %d: decode: %s", which, kvs_last_error());
    if (g_lossless[which] && !(flags & (KVS_TOKENIZE_PARSE_SPECIAL | KVS_TOKENIZE_ADD_EOS))) {
        /* BOS is dropped by decode; the empty-text prefix yields one space */
        int empty_prefix = n == 0 && (flags & KVS_TOKENIZE_PREFIX_EMPTY);
        int spm_space = which < 2 && memmem(text, n, "\xe2\x96\x81", 3) != NULL;
        if (!empty_prefix && !spm_space && (len != n || memcmp(out, text, n) != 0))
            fuzz_fail("vocab %d flags %u: round trip of %zu bytes gave %zu bytes", which, flags, n, len);
    }
    free(out);
    free(ids);
    return 0;
}
