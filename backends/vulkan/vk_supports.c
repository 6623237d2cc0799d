/* Vulkan backend: supports(op, args), the ops table's support query (as ggml's supports_op), and
 * the kernel variants a test or an expert may force (kvs_device_set_variants, KVS_VARIANT).
 *
 * Asked by core/ops.c before every op call, and by kvs_device_set_query for the tests: answers,
 * from the device limits alone (no Vulkan call, no allocation), whether the op's kernels can run the
 * validated arguments. The ops keep their own checks of the same limits as a guard; a call this
 * function accepts is never refused by them for these reasons:
 *   - every tensor an op binds must fit maxStorageBufferRange (kvs_vk_bind);
 *   - attention: the shared-memory tiles of the smallest tiling (1 row, 4 keys) must fit;
 *   - top-k: 256-invocation workgroups, and rows x k and the chunk histograms in 32-bit counts;
 *   - gather/scatter/compact: the copied elements of one dispatch in 32 bits; a converting scatter
 *     from f32 to the KV-cache types only (qh8: both planes, kvs_scatter_qh8);
 *   - attention with k_lo / v_lo (a qh8 cache's 8-bit read): the lower planes bound too. */
#include <stdio.h>

#include "vk_internal.h"

#define NO(...) (snprintf(why, n, __VA_ARGS__), 0)

static int tiled_usable(const kvs_device *dev, char *why, size_t n) {
    if (dev->caps.max_workgroup_size >= 256) return 1;
    return NO("matmul's tiled shader needs 256-invocation workgroups (device max %d)", dev->caps.max_workgroup_size);
}

/* Variants. matmul: the tiled shader (automatic for n > 8 rows of x on devices with 256-wide
 * workgroups) or the GEMV shader (automatic otherwise; 8 rows per dispatch); both read every weight
 * type, the block types through quant.glsl. attention: one pass
 * (automatic when the grid has >= 64 workgroups) or split-K with attn_combine (automatic for fewer:
 * decode; ops_attention.c); "split4" forces 4 key ranges on every call with more than one key tile. */
const kvs_variant kvs_vk_variants[KVS_VK_N_VARIANTS] = {
    {KVS_OP_matmul, "tiled", KVS_VK_MATMUL_TILED, tiled_usable},
    {KVS_OP_matmul, "vec", KVS_VK_MATMUL_VEC, NULL},
    {KVS_OP_attention, "single", KVS_VK_ATTN_SINGLE, NULL},
    {KVS_OP_attention, "split4", KVS_VK_ATTN_SPLIT4, NULL},
};

/* Every non-NULL tensor fits one storage-buffer binding: the range kvs_vk_bind binds, from the
 * tensor's first byte rounded down to the binding alignment to its end. */
static int fits_binding(const kvs_vk *v, const kvs_tensor *const *t, int count, char *why, size_t n) {
    for (int i = 0; i < count; i++) {
        if (!t[i]) continue;
        const kvs_vk_alloc *al = kvs_vk_alloc_of(t[i]);
        VkDeviceSize abs = al->offset + t[i]->offset;
        VkDeviceSize range = abs + (VkDeviceSize)t[i]->nbytes - abs / v->align * v->align;
        if (range > v->props.limits.maxStorageBufferRange)
            return NO("a tensor of %llu bytes ('%s') exceeds this device's maxStorageBufferRange (%u bytes); "
                      "split it into smaller tensors",
                      (unsigned long long)t[i]->nbytes, t[i]->name, v->props.limits.maxStorageBufferRange);
    }
    return 1;
}

static int attention_ok(kvs_device *dev, const kvs_attention_args *a, char *why, size_t n) {
    /* the tiling and splitting the op will use (ops_attention.c): shared memory, loop limits */
    kvs_vk_attn_plan pl;
    if (!kvs_vk_attention_plan(dev, a, &pl, why, n)) return 0;
    const kvs_attention_params *p = &a->p;
    const kvs_tensor *t[] = {a->q, a->k, a->v, a->out, p->q_pos, p->k_pos, p->kv_len, p->row_len, p->mask,
                             p->stat_rows, p->key_mass, p->probe_rows, p->probs, p->argmax, p->row_max, p->row_sum,
                             p->k_lo, p->v_lo};
    return fits_binding(kvs_vk_of(dev), t, (int)(sizeof t / sizeof t[0]), why, n);
}

static int topk_ok(kvs_device *dev, const kvs_topk_args *a, char *why, size_t n) {
    if (dev->caps.max_workgroup_size < 256)
        return NO("top-k needs 256-invocation workgroups (device max %d)", dev->caps.max_workgroup_size);
    const uint64_t rows = (uint64_t)a->rows, len = (uint64_t)a->n, k = (uint64_t)a->k;
    uint64_t P = 1, chunk = 4096;
    while (P < k) P <<= 1;
    uint64_t nchunks = (len + chunk - 1) / chunk;
    while (rows * nchunks * 1024 > ((uint64_t)64 << 20) && chunk < ((uint64_t)1 << 30)) {
        chunk <<= 1;
        nchunks = (len + chunk - 1) / chunk;
    }
    if (rows * P > UINT32_MAX || rows * nchunks * 256 > UINT32_MAX)
        return NO("%llu rows x k=%llu too large", (unsigned long long)rows, (unsigned long long)k);
    const kvs_tensor *t[] = {a->x, a->idx, a->val, a->p.row_len};
    return fits_binding(kvs_vk_of(dev), t, 4, why, n);
}

static int rows_ok(kvs_device *dev, const kvs_rows_args *a, char *why, size_t n) {
    /* rows are copied as 4- or 2-byte units (block rows: a whole number of even-sized blocks), or
     * converted from f32 by scatter_cvt (the KV cache's append: f16, bf16, q8_0, q4_0, q4_1, iq4_nl) */
    const kvs_dtype dt = a->dst->dtype;
    if (a->convert && !(a->src->dtype == KVS_F32 && (dt == KVS_F16 || dt == KVS_BF16 || dt == KVS_Q8_0 ||
                                                     dt == KVS_Q4_0 || dt == KVS_Q4_1 || dt == KVS_IQ4_NL)))
        return NO("converting %s rows to %s is not supported (f32 to f16, bf16, q8_0, q4_0, q4_1, iq4_nl is)",
                  kvs_dtype_name(a->src->dtype), kvs_dtype_name(dt));
    if (a->row_bytes % 2) return NO("rows of an odd number of bytes");
    /* invocations of one dispatch: one per 4 bytes of the rows it copies (2-byte rows run in
     * pairs), over the larger of the index count and the destination rows: an upper bound; a
     * converting scatter runs one per value (f16/bf16) or block of the source rows */
    uint64_t rows = (uint64_t)(a->dst_rows > a->n ? a->dst_rows : a->n);
    uint64_t total = ((uint64_t)a->groups * rows * (uint64_t)a->row_bytes + 3) / 4;
    if (a->convert) total = (uint64_t)a->groups * (uint64_t)a->n * (uint64_t)a->dst->ne[0];
    if (total > UINT32_MAX) return NO("too many elements for one dispatch");
    const kvs_tensor *t[] = {a->src, a->dst, a->idx, a->dst_lo};
    return fits_binding(kvs_vk_of(dev), t, 4, why, n);
}

/* Weight types the matmul / embedding shaders read: F32, F16, BF16 and every block type (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS: decoded in the shaders by
 * quant.glsl); I32 is no weight type. */
static int weight_type_ok(kvs_dtype t, char *why, size_t n) {
    if (t == KVS_F32 || t == KVS_F16 || t == KVS_BF16 || kvs_dtype_is_quant(t)) return 1;
    snprintf(why, n, "weight type %s is not supported by this backend (f32, f16, bf16 and the block types are)",
             kvs_dtype_name(t));
    return 0;
}

int kvs_vk_supports(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n) {
    kvs_vk *v = kvs_vk_of(dev);
    switch (op) {
    case KVS_OP_attention: {
        const kvs_attention_args *a = args;
        /* K and V: f32, f16, bf16 or a block type each (the types core/ops.c lets through: the
         * KV-cache types), read by attn.comp / attn_stats.comp through quant.glsl */
        const kvs_dtype kt = a->k->dtype, vt = a->v->dtype;
        if (kt == KVS_I32 || vt == KVS_I32) return NO("i32 K/V tensors are not attention inputs");
        return attention_ok(dev, args, why, n);
    }
    case KVS_OP_topk:
    case KVS_OP_topk_global: return topk_ok(dev, args, why, n);
    case KVS_OP_topp: {
        const kvs_topp_args *a = args;
        const kvs_tensor *t[] = {a->x, a->count, a->thr, a->p.row_len};
        if (dev->caps.max_workgroup_size < 256) return NO("needs 256-invocation workgroups");
        if ((uint64_t)a->rows * (uint64_t)a->n > UINT32_MAX) return NO("more than 2^32-1 elements");
        return fits_binding(v, t, 4, why, n);
    }
    case KVS_OP_gather:
    case KVS_OP_scatter:
    case KVS_OP_compact: return rows_ok(dev, args, why, n);
    case KVS_OP_matmul: {
        const kvs_matmul_args *a = args;
        const kvs_tensor *t[] = {a->W, a->x, a->y};
        if (!weight_type_ok(a->W->dtype, why, n)) return 0;
        return fits_binding(v, t, 3, why, n);
    }
    case KVS_OP_rope: {
        const kvs_rope_args *a = args;
        const kvs_tensor *t[] = {a->x, a->pos};
        return fits_binding(v, t, 2, why, n);
    }
    case KVS_OP_dwt:
    case KVS_OP_idwt: {
        const kvs_dwt_args *a = args;
        const kvs_tensor *t[] = {a->src, a->dst};
        return fits_binding(v, t, 2, why, n);
    }
    case KVS_OP_add:
    case KVS_OP_log_mass:
    case KVS_OP_swiglu: {
        const kvs_binary_args *a = args;
        const kvs_tensor *t[] = {a->a, a->b, a->y};
        return fits_binding(v, t, 3, why, n);
    }
    case KVS_OP_copy: {
        const kvs_copy_args *a = args;
        const kvs_tensor *t[] = {a->src, a->dst};
        return fits_binding(v, t, 2, why, n);
    }
    case KVS_OP_rmsnorm: {
        const kvs_rmsnorm_args *a = args;
        const kvs_tensor *t[] = {a->x, a->w, a->y};
        return fits_binding(v, t, 3, why, n);
    }
    case KVS_OP_softmax: {
        const kvs_softmax_args *a = args;
        const kvs_tensor *t[] = {a->x, a->y};
        return fits_binding(v, t, 2, why, n);
    }
    case KVS_OP_embedding: {
        const kvs_embedding_args *a = args;
        const kvs_tensor *t[] = {a->table, a->out};
        if (!weight_type_ok(a->table->dtype, why, n)) return 0;
        return fits_binding(v, t, 2, why, n);
    }
    default: return 1;
    }
}
