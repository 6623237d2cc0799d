/* Fuzz target: the llama2.c tokenizer .bin reader (max_token_length, then per token: f32 score,
 * i32 length, bytes). Input: u16 vocab size (mod 1024; 0 = count the entries to the end of the file),
 * then the file. A tokenizer that loads encodes and decodes a fixed text. Seeds:
 * tests/data/fuzz/corpus/tokenizer_bin (cut from tok512.bin). */
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    int vocab = fuzz_u16(&in) % 1024;
    const char *path = fuzz_write("tok.bin", in.p, in.n);
    kvs_tokenizer *t = NULL;
    if (kvs_tokenizer_from_llama2c(&t, path, vocab) != KVS_OK) return 0;
    if (vocab == 0) vocab = kvs_tokenizer_n_vocab(t);
    else if (kvs_tokenizer_n_vocab(t) != vocab) fuzz_fail("vocab %d loaded as %d", vocab, kvs_tokenizer_n_vocab(t));
    static const char text[] = "Once upon a time \xc3\xa9\xff\x00 end";
    int32_t ids[256];
    int64_t n = 0;
    if (kvs_tokenizer_encode(t, text, sizeof text - 1, KVS_TOKENIZE_ADD_BOS, ids, 256, &n) == KVS_OK) {
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab) fuzz_fail("encode gave id %d, vocab %d", ids[i], vocab);
        char out[2048];
        size_t len;
        kvs_tokenizer_decode(t, ids, n, out, sizeof out, &len);
    }
    for (int32_t id = 0; id < vocab && id < 64; id++) {
        char piece[256];
        size_t len;
        kvs_tokenizer_token_to_piece(t, 1, id, piece, sizeof piece, &len);
    }
    kvs_tokenizer_destroy(&t);
    return 0;
}
