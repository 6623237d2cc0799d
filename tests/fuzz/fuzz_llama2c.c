/* Fuzz target: the llama2.c checkpoint reader (legacy 7 x int32 header and the v1 "ak42" header)
 * through kvs_model_file_open: hyperparameters, declared sizes against the bytes present. Inputs that
 * start with "GGUF" are left to fuzz_gguf. Seeds: tests/data/fuzz/corpus/llama2c. */
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0) return 0;
    const char *path = fuzz_write("model.bin", data, size);
    kvs_model_file *m = NULL;
    if (kvs_model_file_open(&m, path, NULL) != KVS_OK) return 0;
    const kvs_model_weights *w = kvs_model_file_weights(m);
    const kvs_model_hparams *h = kvs_model_file_hparams(m);
    if (w->n_layers != h->n_layers) fuzz_fail("n_layers %d vs %d weights", h->n_layers, w->n_layers);
    /* every weight lies inside the input: the sum of their sizes cannot exceed it */
    if (kvs_model_file_weight_bytes(m) > size) fuzz_fail("weights %zu bytes > file %zu", kvs_model_file_weight_bytes(m), size);
    /* touch the first and last float of every array */
    volatile float acc = 0;
    for (int l = 0; l < w->n_layers; l++) {
        const kvs_weight *ws[] = {&w->layers[l].wq, &w->layers[l].w_down, &w->layers[l].ffn_norm};
        for (int i = 0; i < 3; i++) {
            const float *f = ws[i]->data;
            acc += f[0] + f[ws[i]->ne[0] * ws[i]->ne[1] - 1];
        }
    }
    (void)acc;
    kvs_model_file_close(&m);
    return 0;
}
