/* Fuzz target: learned-policy side files (a GGUF with kvsieve.policy.* keys and f32 blocks) through
 * kvs_learned_load, checked against the shape of the tiny seed model (as `kvsieve eval` does) and
 * without a shape (hp = NULL); a file that loads gives a policy. Seeds: tests/data/fuzz/corpus/policy
 * (side files of each kind written by kvs_learned_save for the seed model's shape). */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("policy.gguf", data, size);
    /* the shape of tests/data/fuzz/corpus/gguf/tiny-*.gguf (make_seeds.c) */
    kvs_model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 2;
    hp.dim = 8;
    hp.n_heads = 2;
    hp.n_kv_heads = 1;
    hp.head_dim = 4;
    hp.ffn_dim = 16;
    hp.vocab = 16;
    hp.ctx_len = 32;
    for (int pass = 0; pass < 2; pass++) {
        kvs_learned *lw = NULL;
        if (kvs_learned_load(&lw, path, pass == 0 ? &hp : NULL, -1) != KVS_OK) continue;
        kvs_policy *p = NULL;
        if (kvs_learned_policy(&p, lw, -INFINITY, 0.0f, 0) == KVS_OK) kvs_policy_destroy(&p);
        kvs_learned_destroy(&lw);
    }
    return 0;
}
