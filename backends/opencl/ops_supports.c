/* OpenCL backend: supports(op, args), the ops table's support query (as ggml's supports_op), and
 * the kernel variants a test or an expert may force (kvs_device_set_variants, KVS_VARIANT).
 *
 * supports() answers from the device limits alone, without compiling a kernel:
 *   - attention: head_dim <= 512; where attn_main will run, the GQA group within the work-group
 *     limit and its K/V tiles within the local memory (ops_attention.c, attn_choose);
 *   - top-k: k's power-of-two candidate buffer within 2^31 entries.
 * The ops keep their own checks as a guard (attn_dec can still fall back to attn_main after its
 * kernel compiles with fewer work-items than planned). */
#include <stdio.h>

#include "ocl.h"

/* Variants: attention's two kernels (automatic choice: attn_dec on GPUs for decoding-sized query
 * counts, head_dim > 64, causal masks and small grids; attn_main otherwise and on CPU devices).
 * "dec" forces attn_dec wherever its plan fits (else attn_main); "main-split4" forces attn_main with
 * 4 key splits merged by attn_combine (split-K on every case). */
const kvs_variant kvs_ocl_variants[KVS_OCL_N_VARIANTS] = {
    {KVS_OP_attention, "dec", KVS_OCL_ATTN_DEC, NULL},
    {KVS_OP_attention, "main-split4", KVS_OCL_ATTN_MAIN_SPLIT4, NULL},
};

int kvs_ocl_supports(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n) {
    switch (op) {
    case KVS_OP_attention: return kvs_ocl_attention_supported(dev, args, why, n);
    case KVS_OP_topk:
    case KVS_OP_topk_global: {
        const kvs_topk_args *a = args;
        size_t np = 1;
        while (np < (size_t)a->k) np *= 2;
        if (np > (size_t)INT32_MAX) {
            snprintf(why, n, "k = %lld too large", (long long)a->k);
            return 0;
        }
        return 1;
    }
    default: return 1;
    }
}
