/* OpenCL backend: supports(op, args), the ops table's support query (as ggml's supports_op), and
 * the kernel variants a test or an expert may force (kvs_device_set_variants, KVS_VARIANT).
 *
 * supports() answers from the device limits alone, without compiling a kernel:
 *   - attention: K and V each (separately) F32, F16, BF16, Q8_0, Q4_0, Q4_1 or IQ4_NL; d_k and d_v <=
 *     512; where attn_main will run, the GQA group within the work-group limit and its K/V tiles
 *     within the local memory (ops_attention.c, attn_choose);
 *   - gather / scatter / compact: any row bytes (qh8_lo planes included); a converting scatter into
 *     those K/V types and into both planes of a qh8 cache (kvs_scatter_qh8);
 *   - attention with k_lo / v_lo (a qh8 cache's 8-bit read): K / V then Q4_1 (core/ops.c checks);
 *   - top-k: k's power-of-two candidate buffer within 2^31 entries;
 *   - matmul / embedding: every weight type (F32, F16, BF16 and the 12 block types, qmatmul.cl).
 * The ops keep their own checks as a guard (attn_dec can still fall back to attn_main after its
 * kernel compiles with fewer work-items than planned). */
#include <stdio.h>

#include "ocl.h"

/* Variants: attention's two kernels (automatic choice: attn_dec on GPUs for decoding-sized query
 * counts, head_dim > 64, causal masks and small grids; attn_main otherwise and on CPU devices).
 * "dec" forces attn_dec wherever its plan fits (else attn_main); "main-split4" forces attn_main with
 * 4 key splits merged by attn_combine (split-K on every case).
 * matmul's two paths (automatic choice: GEMV up to 4 rows of x, the matrix-matrix path above):
 * "gemv" forces the GEMV kernels (dense.cl gemv, qmatmul.cl qgemv) for every n, "tiled" forces the
 * matrix-matrix path (CLBlast SGEMM for float weights, qmatmul.cl qgemm for block types). */
const kvs_variant kvs_ocl_variants[KVS_OCL_N_VARIANTS] = {
    {KVS_OP_attention, "dec", KVS_OCL_ATTN_DEC, NULL},
    {KVS_OP_attention, "main-split4", KVS_OCL_ATTN_MAIN_SPLIT4, NULL},
    {KVS_OP_matmul, "gemv", KVS_OCL_MM_GEMV, NULL},
    {KVS_OP_matmul, "tiled", KVS_OCL_MM_TILED, NULL},
};

/* The weight types the dense kernels read: F32, F16, BF16 (dense.cl, CLBlast) and every block type
 * (qmatmul.cl, through qblocks.cl's decoders). */
static int weight_type_ok(kvs_dtype t, char *why, size_t n) {
    if (t == KVS_F32 || t == KVS_F16 || t == KVS_BF16 || kvs_ocl_qt(t) >= 0) return 1;
    snprintf(why, n, "weight type %s is not supported by this backend", kvs_dtype_name(t));
    return 0;
}

/* K/V types the attention kernels read, K and V chosen separately: F32, F16, BF16 and the
 * quantized cache types Q8_0, Q4_0, Q4_1, IQ4_NL (attention.cl through qblocks.cl). */
static int kv_type_ok(kvs_dtype t, char *why, size_t n) {
    if (t == KVS_F32 || t == KVS_F16 || t == KVS_BF16 || t == KVS_Q8_0 || t == KVS_Q4_0 || t == KVS_Q4_1 ||
        t == KVS_IQ4_NL)
        return 1;
    snprintf(why, n, "K/V type %s is not supported by this backend (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl are)",
             kvs_dtype_name(t));
    return 0;
}

/* Rows are copied as bytes (block rows included); a converting scatter (the KV cache's append)
 * writes f32 rows as F16, BF16 or the cache's block types (rows.cl). */
static int rows_type_ok(const kvs_rows_args *a, char *why, size_t n) {
    if (a->convert && !kv_type_ok(a->dst->dtype, why, n)) return 0;
    return 1;
}

int kvs_ocl_supports(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n) {
    switch (op) {
    case KVS_OP_matmul: return weight_type_ok(((const kvs_matmul_args *)args)->W->dtype, why, n);
    case KVS_OP_embedding: return weight_type_ok(((const kvs_embedding_args *)args)->table->dtype, why, n);
    case KVS_OP_attention: {
        const kvs_attention_args *a = args;
        if (!kv_type_ok(a->k->dtype, why, n) || !kv_type_ok(a->v->dtype, why, n)) return 0;
        return kvs_ocl_attention_supported(dev, args, why, n);
    }
    case KVS_OP_gather:
    case KVS_OP_scatter:
    case KVS_OP_compact: return rows_type_ok(args, why, n);
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
