/* Fuzz target: Hugging Face safetensors + config.json through kvs_model_file_open on a directory.
 * Input layout: u16 little-endian L, then L bytes of config.json, then the model.safetensors bytes
 * (header length, JSON header, data). Seeds: tests/data/fuzz/corpus/safetensors. */
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t lc = (size_t)data[0] | (size_t)data[1] << 8;
    if (lc > size - 2) return 0;
    fuzz_write("config.json", data + 2, lc);
    fuzz_write("model.safetensors", data + 2 + lc, size - 2 - lc);
    kvs_model_file *m = NULL;
    if (kvs_model_file_open(&m, fuzz_tmpdir(), NULL) != KVS_OK) return 0;
    const kvs_model_hparams *h = kvs_model_file_hparams(m);
    if (h->bos_id >= h->vocab || h->eos_id >= h->vocab) fuzz_fail("special token id beyond vocab %d accepted", h->vocab);
    if (kvs_model_file_weight_bytes(m) > 3 * size + 64) fuzz_fail("weights larger than the input");
    kvs_model_file_close(&m);
    return 0;
}
