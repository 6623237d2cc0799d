/* Vulkan row ops: gather, scatter (scatter_win picks each destination row's last writer, then
 * rows_copy, or scatter_cvt for a converting scatter: f32 rows into an f16/bf16/quantized KV
 * cache) and compact (gather into scratch, copy back). Rows of any dtype, block rows included,
 * are copied bit-exactly (block rows are a whole number of even-sized blocks: 16-bit units). Push constants: vk_params.h. Inputs are
 * validated by core/ops.c. */
#include <string.h>

#include "vk_internal.h"

/* A byte range of device memory (a tensor or scratch). */
typedef struct { const kvs_vk_alloc *a; VkDeviceSize off, size; } vk_range;

static vk_range range_of(const kvs_tensor *t) {
    const kvs_vk_alloc *a = kvs_vk_alloc_of(t);
    vk_range r = {a, a->offset + t->offset, t->nbytes};
    return r;
}

/* gather (KVS_VK_ROWS_GATHER) or the copy step of scatter (KVS_VK_ROWS_SCATTER) between ranges;
 * win: scatter winners. */
static kvs_status rows_dispatch(kvs_device *dev, const kvs_rows_args *a, uint32_t mode, vk_range src, vk_range dst,
                                const vk_range *win, int64_t Nd, const char *op) {
    kvs_vk *v = kvs_vk_of(dev);
    int u16 = (a->row_bytes % 4) || (src.off % 4) || (dst.off % 4);
    uint32_t unit = u16 ? 2 : 4;
    kvs_vk_pc_rows pc;
    memset(&pc, 0, sizeof pc);
    kvs_vk_arg args[4];
    KVS_TRY(kvs_vk_bind_alloc(v, src.a, src.off, src.size, 0, unit, &args[0], &pc.os, op));
    KVS_TRY(kvs_vk_bind(v, a->idx, 0, 4, &args[1], &pc.oi, op));
    KVS_TRY(kvs_vk_bind_alloc(v, dst.a, dst.off, dst.size, 1, unit, &args[2], &pc.od, op));
    if (win) KVS_TRY(kvs_vk_bind_alloc(v, win->a, win->off, win->size, 0, 4, &args[3], &pc.ow, op));
    else args[3] = kvs_vk_dummy_arg(v);
    pc.G = (uint32_t)a->groups;
    pc.n = (uint32_t)a->n;
    pc.Ns = (uint32_t)a->src_rows;
    pc.Nd = (uint32_t)Nd;
    pc.RU = (uint32_t)(a->row_bytes / unit);
    pc.shared_ = (uint32_t)a->idx_shared;
    uint64_t total = u16 ? ((uint64_t)pc.od + (uint64_t)pc.G * pc.Nd * pc.RU + 1) / 2 - pc.od / 2
                         : (uint64_t)pc.G * pc.n * pc.RU;
    if (total > UINT32_MAX) return kvs_error(KVS_ERR_UNSUPPORTED, "%s: too many elements for one dispatch", op);
    pc.total = (uint32_t)total;
    uint32_t spec[4] = {kvs_vk_wg(dev, KVS_VK_WG_ELEM), (uint32_t)mode, (uint32_t)u16, (uint32_t)a->src_token_major};
    return kvs_vk_dispatch(v, KVS_VK_SH_ROWS_COPY, spec, 4, args, 4, &pc, sizeof pc, kvs_vk_ceil_div(total, spec[0]), op);
}

kvs_status kvs_vk_gather(kvs_device *dev, const kvs_rows_args *a) {
    const char *op = "kvs_gather";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    return rows_dispatch(dev, a, KVS_VK_ROWS_GATHER, range_of(a->src), range_of(a->dst), NULL, a->dst_rows, op);
}

kvs_status kvs_vk_scatter(kvs_device *dev, const kvs_rows_args *a) {
    const char *op = "kvs_scatter";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    VkDeviceSize wbytes = (VkDeviceSize)a->groups * (VkDeviceSize)a->dst_rows * 4;
    KVS_TRY(kvs_vk_reserve(v, wbytes, 0));
    kvs_vk_alloc *wa;
    VkDeviceSize wo;
    KVS_TRY(kvs_vk_scratch(v, wbytes, &wa, &wo));
    KVS_TRY(kvs_vk_fill(v, wa->block->buf, wo, wbytes, 0xffffffffu));
    kvs_vk_pc_scatter_win pc = {(uint32_t)a->groups, (uint32_t)a->n, (uint32_t)a->dst_rows, 0, 0,
                                                          (uint32_t)a->idx_shared};
    kvs_vk_arg args[2];
    KVS_TRY(kvs_vk_bind(v, a->idx, 0, 4, &args[0], &pc.oi, op));
    KVS_TRY(kvs_vk_bind_alloc(v, wa, wo, wbytes, 1, 4, &args[1], &pc.ow, op));
    uint32_t wg = kvs_vk_wg(dev, KVS_VK_WG_ELEM);
    KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_SCATTER_WIN, &wg, 1, args, 2, &pc, sizeof pc,
                            kvs_vk_ceil_div((uint64_t)a->groups * (uint64_t)a->n, wg), op));
    vk_range win = {wa, wo, wbytes};
    if (!a->convert)
        return rows_dispatch(dev, a, KVS_VK_ROWS_SCATTER, range_of(a->src), range_of(a->dst), &win, a->dst_rows, op);
    /* converting scatter (f32 -> f16 / bf16 / q8_0 / q4_0 / q4_1 / iq4_nl, or both planes of a qh8
     * cache: dst_lo, kvs_scatter_qh8): scatter_cvt.comp, one invocation per value (f16/bf16) or
     * block of 32 of the source rows */
    const uint32_t D = (uint32_t)a->dst->ne[0];
    const uint64_t units = kvs_dtype_is_quant(a->dst->dtype) ? D / 32 : D;
    kvs_vk_pc_scatter_cvt cp;
    memset(&cp, 0, sizeof cp);
    kvs_vk_arg cargs[5];
    KVS_TRY(kvs_vk_bind(v, a->src, 0, 4, &cargs[0], &cp.os, op));
    KVS_TRY(kvs_vk_bind(v, a->idx, 0, 4, &cargs[1], &cp.oi, op));
    KVS_TRY(kvs_vk_bind(v, a->dst, 1, 1, &cargs[2], &cp.od, op));
    KVS_TRY(kvs_vk_bind_alloc(v, wa, wo, wbytes, 0, 4, &cargs[3], &cp.ow, op));
    if (a->dst_lo) KVS_TRY(kvs_vk_bind(v, a->dst_lo, 1, 1, &cargs[4], &cp.odl, op));
    cp.G = (uint32_t)a->groups;
    cp.n = (uint32_t)a->n;
    cp.Nd = (uint32_t)a->dst_rows;
    cp.D = D;
    cp.RB = (uint32_t)a->row_bytes;
    cp.shared_ = (uint32_t)a->idx_shared;
    cp.total = (uint32_t)((uint64_t)a->groups * (uint64_t)a->n * units);
    uint32_t spec[3] = {kvs_vk_wg(dev, 64), a->dst_lo ? KVS_VK_DT_QH8 : (uint32_t)a->dst->dtype, (uint32_t)a->src_token_major};
    return kvs_vk_dispatch(v, KVS_VK_SH_SCATTER_CVT, spec, 3, cargs, a->dst_lo ? 5 : 4, &cp, sizeof cp,
                           kvs_vk_ceil_div(cp.total, spec[0]), op);
}

kvs_status kvs_vk_compact(kvs_device *dev, const kvs_rows_args *a) {
    const char *op = "kvs_compact";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    VkDeviceSize rb = (VkDeviceSize)a->row_bytes, per = (VkDeviceSize)a->n * rb;
    VkDeviceSize bytes = (VkDeviceSize)a->groups * per;
    KVS_TRY(kvs_vk_reserve(v, bytes, 0));
    kvs_vk_alloc *sa;
    VkDeviceSize so;
    KVS_TRY(kvs_vk_scratch(v, bytes, &sa, &so));
    vk_range t = range_of(a->dst), s = {sa, so, bytes};
    /* gather the kept rows into scratch [G][n][row], then copy each group back to rows [0, n) */
    KVS_TRY(rows_dispatch(dev, a, KVS_VK_ROWS_GATHER, t, s, NULL, a->n, op));
    for (int64_t g = 0; g < a->groups; g++)
        KVS_TRY(kvs_vk_copy_buffer(v, sa->block->buf, so + (VkDeviceSize)g * per, t.a->block->buf,
                            t.off + (VkDeviceSize)g * (VkDeviceSize)a->dst_rows * rb, per));
    return KVS_OK;
}

