/* Vulkan ops: element-wise (add, swiglu, copy), row ops (rmsnorm, softmax), embedding, matmul and
 * rope; bindings, push constants (vk_params.h) and dispatch shapes for their shaders. Every op only
 * records commands (commands.c batches them); inputs are validated by core/ops.c. */
#include <math.h>
#include <string.h>

#include "vk_internal.h"

/* ---- element-wise ------------------------------------------------------------------------- */

/* y = f(a, b) element-wise over n floats, by `shader` (add, swiglu). */
static kvs_status vk_binary(kvs_device *dev, const char *op, kvs_vk_shader_id shader, const kvs_tensor *a,
                            const kvs_tensor *b, kvs_tensor *y, int64_t n) {
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[3];
    kvs_vk_pc_binary pc = {(uint32_t)n, 0, 0, 0};
    KVS_VK_BIND(a, 0, 0, pc.oa);
    KVS_VK_BIND(b, 0, 1, pc.ob);
    KVS_VK_BIND(y, 1, 2, pc.oy);
    uint32_t wg = kvs_vk_wg(dev, KVS_VK_WG_ELEM);
    return kvs_vk_dispatch(v, shader, &wg, 1, args, 3, &pc, sizeof pc, kvs_vk_ceil_div((uint64_t)n, wg), op);
}

kvs_status kvs_vk_add(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *a = oa->a, *b = oa->b;
    kvs_tensor *y = oa->y;
    const int64_t n = oa->n;
    return vk_binary(dev, "kvs_add", KVS_VK_SH_ADD, a, b, y, n);
}

kvs_status kvs_vk_log_mass(kvs_device *dev, const kvs_binary_args *oa) {
    return vk_binary(dev, "kvs_log_mass", KVS_VK_SH_LOG_MASS, oa->a, oa->b, oa->y, oa->n);
}

kvs_status kvs_vk_swiglu(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *gate = oa->a, *up = oa->b;
    kvs_tensor *out = oa->y;
    const int64_t n = oa->n;
    return vk_binary(dev, "kvs_swiglu", KVS_VK_SH_SWIGLU, gate, up, out, n);
}

kvs_status kvs_vk_copy(kvs_device *dev, const kvs_copy_args *oa) {
    const kvs_tensor *src = oa->src;
    kvs_tensor *dst = oa->dst;
    const int64_t n = oa->n;
    const char *op = "kvs_copy";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    if (src->dtype == dst->dtype) {
        const kvs_vk_alloc *sa = kvs_vk_alloc_of(src), *da = kvs_vk_alloc_of(dst);
        return kvs_vk_copy_buffer(v, sa->block->buf, sa->offset + src->offset, da->block->buf, da->offset + dst->offset,
                           src->nbytes);
    }
    kvs_vk_arg args[2];
    kvs_vk_pc_copy pc = {(uint32_t)n, 0, 0};
    KVS_VK_BIND(src, 0, 0, pc.os);
    KVS_VK_BIND(dst, 1, 1, pc.od);
    uint32_t spec[3] = {kvs_vk_wg(dev, KVS_VK_WG_ELEM), (uint32_t)src->dtype, (uint32_t)dst->dtype};
    uint64_t items = dst->dtype == KVS_F32 ? (uint64_t)n : ((uint64_t)pc.od + (uint64_t)n + 1) / 2 - pc.od / 2;
    return kvs_vk_dispatch(v, KVS_VK_SH_COPY, spec, 3, args, 2, &pc, sizeof pc, kvs_vk_ceil_div(items, spec[0]), op);
}

static uint32_t row_wg(kvs_device *dev, int64_t n) {
    uint32_t w = n <= 32 ? 32u : n <= 64 ? 64u : n <= 128 ? 128u : 256u;
    return kvs_vk_wg(dev, w);
}

kvs_status kvs_vk_rmsnorm(kvs_device *dev, const kvs_rmsnorm_args *oa) {
    const kvs_tensor *x = oa->x, *w = oa->w;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, dim = oa->dim;
    const float eps = oa->eps;
    const char *op = "kvs_rmsnorm";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[3];
    kvs_vk_pc_rmsnorm pc = {(uint32_t)rows, (uint32_t)dim, 0, 0, 0, eps};
    KVS_VK_BIND(x, 0, 0, pc.ox);
    KVS_VK_BIND(w, 0, 1, pc.ow);
    KVS_VK_BIND(y, 1, 2, pc.oy);
    uint32_t wg = row_wg(dev, dim);
    return kvs_vk_dispatch(v, KVS_VK_SH_RMSNORM, &wg, 1, args, 3, &pc, sizeof pc, (uint64_t)rows, op);
}

kvs_status kvs_vk_softmax(kvs_device *dev, const kvs_softmax_args *oa) {
    const kvs_tensor *x = oa->x;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, n = oa->n;
    const float scale = oa->scale;
    const char *op = "kvs_softmax";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[2];
    kvs_vk_pc_softmax pc = {(uint32_t)rows, (uint32_t)n, 0, 0, scale};
    KVS_VK_BIND(x, 0, 0, pc.ox);
    KVS_VK_BIND(y, 1, 1, pc.oy);
    uint32_t wg = row_wg(dev, n);
    return kvs_vk_dispatch(v, KVS_VK_SH_SOFTMAX, &wg, 1, args, 2, &pc, sizeof pc, (uint64_t)rows, op);
}

kvs_status kvs_vk_embedding(kvs_device *dev, const kvs_embedding_args *oa) {
    const kvs_tensor *table = oa->table;
    kvs_tensor *out = oa->out;
    const int32_t *ids = oa->ids;
    const int64_t n = oa->n, dim = oa->dim;
    const char *op = "kvs_embedding";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_alloc *st;
    VkDeviceSize so;
    void *host;
    KVS_TRY(kvs_vk_reserve(v, 0, (VkDeviceSize)n * 4));
    KVS_TRY(kvs_vk_stage(v, (VkDeviceSize)n * 4, &st, &so, &host));
    memcpy(host, ids, (size_t)n * 4);
    kvs_vk_arg args[3];
    kvs_vk_pc_embedding pc = {(uint32_t)n, (uint32_t)dim, (uint32_t)kvs_tensor_rows(table),
                                                          0, 0, 0};
    KVS_VK_BIND(table, 0, 0, pc.ot);
    KVS_TRY(kvs_vk_bind_alloc(v, st, so, (VkDeviceSize)n * 4, 0, 4, &args[1], &pc.oi, op));
    KVS_VK_BIND(out, 1, 2, pc.oo);
    uint32_t spec[2] = {kvs_vk_wg(dev, KVS_VK_WG_ELEM), (uint32_t)table->dtype};
    return kvs_vk_dispatch(v, KVS_VK_SH_EMBEDDING, spec, 2, args, 3, &pc, sizeof pc,
                           kvs_vk_ceil_div((uint64_t)n * (uint64_t)dim, spec[0]), op);
}

/* ---- matmul ------------------------------------------------------------------------------- */

kvs_status kvs_vk_matmul(kvs_device *dev, const kvs_matmul_args *a) {
    const char *op = "kvs_matmul";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[3];
    kvs_vk_pc_matmul pc = {
        (uint32_t)a->m, (uint32_t)a->k, (uint32_t)a->n, 0, 0, 0, (uint32_t)a->accumulate, 0};
    KVS_VK_BIND(a->W, 0, 0, pc.ow);
    KVS_VK_BIND(a->x, 0, 1, pc.ox);
    KVS_VK_BIND(a->y, 1, 2, pc.oy);
    /* tiled for more than 8 rows of x where 256-wide workgroups exist, else GEMV; a forced variant
     * (vk_supports.c) picks one shader for every n */
    const int variant = kvs_device_variant(dev, KVS_OP_matmul);
    int tiled = variant ? variant == KVS_VK_MATMUL_TILED : a->n > 8 && dev->caps.max_workgroup_size >= 256;
    if (tiled) {
        uint32_t spec[2] = {256, (uint32_t)a->W->dtype};
        pc.groups_m = (uint32_t)kvs_vk_ceil_div((uint64_t)a->m, 64);
        return kvs_vk_dispatch(v, KVS_VK_SH_MATMUL, spec, 2, args, 3, &pc, sizeof pc,
                               (uint64_t)pc.groups_m * kvs_vk_ceil_div((uint64_t)a->n, 64), op);
    }
    /* GEMV path, up to 8 rows of x per dispatch (NV = rows, a specialization constant) */
    uint32_t spec[3] = {kvs_vk_wg(dev, a->k >= 128 ? 128 : 64), (uint32_t)a->W->dtype, 8};
    uint32_t ox = pc.ox, oy = pc.oy;
    for (int64_t i0 = 0; i0 < a->n; i0 += 8) {
        pc.n = (uint32_t)(a->n - i0 < 8 ? a->n - i0 : 8);
        pc.ox = ox + (uint32_t)(i0 * a->k);
        pc.oy = oy + (uint32_t)(i0 * a->m);
        spec[2] = pc.n;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_MATMUL_VEC, spec, 3, args, 3, &pc, sizeof pc, (uint64_t)a->m, op));
    }
    return KVS_OK;
}

/* ---- rope ---------------------------------------------------------------------------------- */

kvs_status kvs_vk_rope(kvs_device *dev, const kvs_rope_args *a) {
    const char *op = a->vec_stride_rows ? "kvs_rope_shift" : "kvs_rope";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    const int half = a->p.n_rot / 2;
    const int64_t stride = a->vec_stride_rows ? a->vec_stride_rows : a->n_vec;
    const int64_t nrow = a->vec_stride_rows ? a->n_rows : a->n_vec;
    const int64_t visited = (a->n_vec / stride) * nrow;
    /* freq_i / (2 pi) as a 64-bit fixed-point fraction, from the f64 frequency */
    VkDeviceSize sbytes = a->x->dtype == KVS_F32 ? 0 : (VkDeviceSize)visited * (VkDeviceSize)a->p.n_rot * 4;
    KVS_TRY(kvs_vk_reserve(v, sbytes, (VkDeviceSize)half * 8));
    kvs_vk_alloc *fa;
    VkDeviceSize fo;
    void *host;
    KVS_TRY(kvs_vk_stage(v, (VkDeviceSize)half * 8, &fa, &fo, &host));
    uint32_t *fq = host;
    for (int i = 0; i < half; i++) {
        double f = (double)a->p.freq_scale * pow((double)a->p.theta_base, -2.0 * i / (double)a->p.n_rot) /
                   (2.0 * 3.14159265358979323846);
        f -= floor(f);
        double t = f * 4294967296.0;
        double hi = floor(t);
        double lo = floor((t - hi) * 4294967296.0);
        fq[2 * i] = (uint32_t)hi;
        fq[2 * i + 1] = (uint32_t)(lo < 4294967296.0 ? lo : 4294967295.0);
    }
    kvs_vk_arg args[4];
    kvs_vk_pc_rope pc = {
        (uint32_t)(visited * half), (uint32_t)a->head_dim, (uint32_t)a->p.n_rot, (uint32_t)a->pos_div,
        (uint32_t)stride, (uint32_t)nrow, 0, 0, 0, 0, (uint32_t)kvs_tensor_nelements(a->x)};
    KVS_VK_BIND(a->x, 1, 0, pc.ox);
    KVS_VK_BIND(a->pos, 0, 1, pc.op);
    KVS_TRY(kvs_vk_bind_alloc(v, fa, fo, (VkDeviceSize)half * 8, 0, 4, &args[2], &pc.of, op));
    uint32_t wg = kvs_vk_wg(dev, KVS_VK_WG_ELEM);
    uint32_t spec[3] = {wg, KVS_VK_ROPE_F32, a->p.mode == KVS_ROPE_NEOX};
    if (a->x->dtype == KVS_F32) {
        args[3] = args[2];
        return kvs_vk_dispatch(v, KVS_VK_SH_ROPE, spec, 3, args, 4, &pc, sizeof pc, kvs_vk_ceil_div(pc.total, wg), op);
    }
    kvs_vk_alloc *sa;
    VkDeviceSize so;
    KVS_TRY(kvs_vk_scratch(v, sbytes, &sa, &so));
    KVS_TRY(kvs_vk_bind_alloc(v, sa, so, sbytes, 1, 4, &args[3], &pc.os, op));
    spec[1] = KVS_VK_ROPE_F16_ROTATE;
    args[0].write = 0;
    KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ROPE, spec, 3, args, 4, &pc, sizeof pc, kvs_vk_ceil_div(pc.total, wg), op));
    spec[1] = KVS_VK_ROPE_F16_STORE;
    args[0].write = 1;
    args[3].write = 0;
    pc.total = (uint32_t)(((uint64_t)pc.ox + pc.nx + 1) / 2 - pc.ox / 2);
    return kvs_vk_dispatch(v, KVS_VK_SH_ROPE, spec, 3, args, 4, &pc, sizeof pc, kvs_vk_ceil_div(pc.total, wg), op);
}

