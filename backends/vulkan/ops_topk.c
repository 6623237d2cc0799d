/* Vulkan top-k ops (per row and global): radix select + bitonic sort over the topk_* shaders,
 * deterministic. Push constants and modes: vk_params.h. Inputs are validated by core/ops.c. */
#include <string.h>

#include "vk_internal.h"


/* Radix select (4 passes of 8-bit digits over an order-preserving key: per-chunk histograms, then
 * a per-row digit choice) finds the k-th key T; entries with key > T and the lowest-index entries
 * with key == T are collected in index order; a bitonic sort puts them in output order. All
 * counts are integers, so the result is deterministic. Scratch: see shaders/vulkan/topk.glsl. */
static kvs_status topk_run(kvs_device *dev, const kvs_topk_args *a, const char *op) {
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    if (dev->caps.max_workgroup_size < 256)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: needs 256-invocation workgroups (device max %d)", op,
                         dev->caps.max_workgroup_size);
    const uint64_t rows = (uint64_t)a->rows, n = (uint64_t)a->n, k = (uint64_t)a->k;
    uint64_t P = 1;
    while (P < k) P <<= 1;
    uint64_t chunk = 4096, nchunks = kvs_vk_ceil_div(n, chunk);
    while (rows * nchunks * 1024 > ((uint64_t)64 << 20) && chunk < ((uint64_t)1 << 30)) {
        chunk <<= 1;
        nchunks = kvs_vk_ceil_div(n, chunk);
    }
    VkDeviceSize b_st = rows * 16, b_h = rows * nchunks * 1024, b_c = rows * nchunks * 8, b_s = rows * P * 4;
    if (rows * P > UINT32_MAX || rows * nchunks * 256 > UINT32_MAX)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %llu rows x k=%llu too large", op, (unsigned long long)rows,
                         (unsigned long long)k);
    KVS_TRY(kvs_vk_reserve(v, b_st + b_h + b_c + 2 * b_s, 0));
    kvs_vk_alloc *al[5];
    VkDeviceSize off[5], sz[5] = {b_st, b_h, b_c, b_s, b_s};
    kvs_vk_arg sarg[5];
    uint32_t soff[5];
    for (int i = 0; i < 5; i++) {
        KVS_TRY(kvs_vk_scratch(v, sz[i], &al[i], &off[i]));
        KVS_TRY(kvs_vk_bind_alloc(v, al[i], off[i], sz[i], 1, 4, &sarg[i], &soff[i], op));
    }
    KVS_TRY(kvs_vk_fill(v, al[3]->block->buf, off[3], b_s, 0u));
    KVS_TRY(kvs_vk_fill(v, al[4]->block->buf, off[4], b_s, KVS_VK_TOPK_EMPTY));
    kvs_vk_arg xa, rla;
    uint32_t ox = 0, orl = 0;
    KVS_TRY(kvs_vk_bind(v, a->x, 0, 4, &xa, &ox, op));
    KVS_TRY(kvs_vk_bind_opt(v, a->p.row_len, 0, &rla, &orl, op));
    const uint32_t has_rl = a->p.row_len != NULL;
    const uint32_t wg = 256;

    /* state init */
    kvs_vk_pc_topk_select sp = {
        (uint32_t)rows, (uint32_t)nchunks, 0, soff[0], soff[1], (uint32_t)n, (uint32_t)k, orl, has_rl};
    kvs_vk_arg args[6];
    uint32_t spec[2] = {wg, KVS_VK_SELECT_INIT};
    args[0] = sarg[0], args[1] = sarg[1], args[2] = rla;
    KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_SELECT, spec, 2, args, 3, &sp, sizeof sp, rows, op));
    /* 4 radix passes */
    kvs_vk_pc_topk_hist hp = {
        (uint32_t)rows, (uint32_t)n, ox, orl, has_rl, (uint32_t)chunk, (uint32_t)nchunks, 0, soff[0], soff[1]};
    for (int pass = 0; pass < 4; pass++) {
        hp.shift = sp.shift = (uint32_t)(24 - 8 * pass);
        args[0] = xa, args[1] = rla, args[2] = sarg[0], args[3] = sarg[1];
        args[2].write = 0;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_HIST, &wg, 1, args, 4, &hp, sizeof hp, rows * nchunks, op));
        spec[1] = KVS_VK_SELECT_DIGIT;
        args[0] = sarg[0], args[1] = sarg[1], args[2] = rla;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_SELECT, spec, 2, args, 3, &sp, sizeof sp, rows, op));
    }
    /* count, scan, collect */
    kvs_vk_pc_topk_collect cp = {
        (uint32_t)rows, (uint32_t)n, ox, orl, has_rl, (uint32_t)chunk, (uint32_t)nchunks, soff[0], soff[2], soff[3],
        soff[4], (uint32_t)P};
    args[0] = xa, args[1] = rla, args[2] = sarg[0], args[3] = sarg[2], args[4] = sarg[3], args[5] = sarg[4];
    args[2].write = 0;
    args[4].write = args[5].write = 0;
    spec[1] = KVS_VK_COLLECT_COUNT;
    KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_COLLECT, spec, 2, args, 6, &cp, sizeof cp, rows * nchunks, op));
    sp.oh = soff[2];
    spec[1] = KVS_VK_SELECT_SCAN;
    kvs_vk_arg sa3[3] = {sarg[0], sarg[2], rla};
    sa3[0].write = 0;
    KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_SELECT, spec, 2, sa3, 3, &sp, sizeof sp, rows, op));
    args[4].write = args[5].write = 1;
    args[3].write = 0;
    spec[1] = KVS_VK_COLLECT_WRITE;
    KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_COLLECT, spec, 2, args, 6, &cp, sizeof cp, rows * nchunks, op));
    /* bitonic sort of [rows][P] */
    if (P > 1) {
        const uint64_t B = P < 2 * wg ? P : 2 * wg;
        kvs_vk_pc_topk_sort bp = {
            (uint32_t)rows, (uint32_t)P, (uint32_t)B, 0, 0, soff[3], soff[4], (uint32_t)(a->p.order_by_index != 0)};
        kvs_vk_arg ba[2] = {sarg[3], sarg[4]};
        spec[1] = KVS_VK_SORT_BLOCKS;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_SORT, spec, 2, ba, 2, &bp, sizeof bp, rows * (P / B), op));
        for (uint64_t s = 2 * B; s <= P; s <<= 1) {
            bp.s = (uint32_t)s;
            for (uint64_t j = s / 2; j >= B; j >>= 1) {
                bp.j = (uint32_t)j;
                spec[1] = KVS_VK_SORT_GLOBAL;
                KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_SORT, spec, 2, ba, 2, &bp, sizeof bp,
                                        kvs_vk_ceil_div(rows * P / 2, wg), op));
            }
            spec[1] = KVS_VK_SORT_MERGE;
            KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_TOPK_SORT, spec, 2, ba, 2, &bp, sizeof bp, rows * (P / B), op));
        }
    }
    /* outputs */
    kvs_vk_pc_topk_write wp = {
        (uint32_t)rows, (uint32_t)n, (uint32_t)k, (uint32_t)P, ox, soff[4], 0, 0, a->val != NULL};
    args[0] = xa;
    args[1] = sarg[4];
    args[1].write = 0;
    KVS_TRY(kvs_vk_bind(v, a->idx, 1, 4, &args[2], &wp.oi, op));
    KVS_TRY(kvs_vk_bind_opt(v, a->val, 1, &args[3], &wp.ov, op));
    return kvs_vk_dispatch(v, KVS_VK_SH_TOPK_WRITE, &wg, 1, args, 4, &wp, sizeof wp, kvs_vk_ceil_div(rows * k, wg), op);
}

kvs_status kvs_vk_topk(kvs_device *dev, const kvs_topk_args *a) { return topk_run(dev, a, "kvs_topk"); }
kvs_status kvs_vk_topk_global(kvs_device *dev, const kvs_topk_args *a) { return topk_run(dev, a, "kvs_topk_global"); }
