/* Vulkan dwt / idwt ops: one dispatch per level over all rows (dwt.comp, idwt.comp). Push constants:
 * vk_params.h. Inputs are validated by core/ops.c. */
#include <string.h>

#include "vk_internal.h"

static void dwt_setup(const kvs_dwt_args *a, kvs_vk_pc_dwt *pc, int64_t *len, int64_t *doff) {
    double lo[8];
    memset(pc, 0, sizeof *pc);
    int T = kvs_wavelet_filter(a->w, lo);
    pc->T = (uint32_t)T;
    for (int t = 0; t < T; t++) {
        pc->lo[t] = (float)lo[t];
        pc->hi[t] = (float)((t & 1) ? -lo[T - 1 - t] : lo[T - 1 - t]);
    }
    pc->rows = (uint32_t)a->rows;
    len[0] = a->n;
    for (int l = 1; l <= a->levels; l++) len[l] = (len[l - 1] + 1) / 2;
    int64_t off = len[a->levels];
    for (int l = a->levels; l >= 1; l--) {
        doff[l] = off;
        off += len[l];
    }
}

/* Per level one dispatch over all rows; intermediate approximations ping-pong in scratch
 * [rows][len_1] x 2. */
static kvs_status dwt_run(kvs_device *dev, const kvs_dwt_args *a, int inverse) {
    const char *op = inverse ? "kvs_idwt" : "kvs_dwt";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_pc_dwt pc;
    int64_t len[KVS_DWT_MAX_LEVELS + 1] = {0}, doff[KVS_DWT_MAX_LEVELS + 1] = {0};
    dwt_setup(a, &pc, len, doff);
    const int J = a->levels;
    VkDeviceSize sbytes = (VkDeviceSize)a->rows * (VkDeviceSize)len[1] * 4;
    if (J > 1) KVS_TRY(kvs_vk_reserve(v, 2 * sbytes, 0));
    kvs_vk_arg src, dst, scr[2];
    uint32_t osrc, odst, oscr[2] = {0, 0};
    KVS_TRY(kvs_vk_bind(v, a->src, 0, 4, &src, &osrc, op));
    KVS_TRY(kvs_vk_bind(v, a->dst, 1, 4, &dst, &odst, op));
    for (int i = 0; i < 2 && J > 1; i++) {
        kvs_vk_alloc *sa;
        VkDeviceSize so;
        KVS_TRY(kvs_vk_scratch(v, sbytes, &sa, &so));
        KVS_TRY(kvs_vk_bind_alloc(v, sa, so, sbytes, 1, 4, &scr[i], &oscr[i], op));
    }
    const uint32_t nc = (uint32_t)a->ncoef, n = (uint32_t)a->n;
    uint32_t wg = kvs_vk_wg(dev, KVS_VK_WG_ELEM);
    kvs_vk_arg args[3];
    if (!inverse) {
        for (int l = 1; l <= J; l++) {
            pc.L = (uint32_t)len[l - 1];
            pc.half_ = (uint32_t)len[l];
            /* input: x, or the previous level's approximation */
            if (l == 1) args[0] = src, pc.o0 = osrc, pc.s0 = n;
            else args[0] = scr[(l - 2) & 1], pc.o0 = oscr[(l - 2) & 1], pc.s0 = (uint32_t)len[1];
            args[0].write = 0;
            if (l == J) args[1] = dst, pc.o1 = odst, pc.s1 = nc;
            else args[1] = scr[(l - 1) & 1], pc.o1 = oscr[(l - 1) & 1], pc.s1 = (uint32_t)len[1];
            args[1].write = 1;
            args[2] = dst, pc.o2 = odst + (uint32_t)doff[l], pc.s2 = nc;
            KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_DWT, &wg, 1, args, 3, &pc, sizeof pc,
                                    kvs_vk_ceil_div((uint64_t)pc.rows * pc.half_, wg), op));
        }
        return KVS_OK;
    }
    for (int l = J; l >= 1; l--) {
        pc.half_ = (uint32_t)len[l];
        pc.L = (uint32_t)len[l - 1];
        if (l == J) args[0] = src, pc.o0 = osrc, pc.s0 = nc;
        else args[0] = scr[(l) & 1], pc.o0 = oscr[(l) & 1], pc.s0 = (uint32_t)len[1];
        args[0].write = 0;
        args[1] = src, pc.o1 = osrc + (uint32_t)doff[l], pc.s1 = nc;
        if (l == 1) args[2] = dst, pc.o2 = odst, pc.s2 = n;
        else args[2] = scr[(l - 1) & 1], pc.o2 = oscr[(l - 1) & 1], pc.s2 = (uint32_t)len[1];
        args[2].write = 1;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_IDWT, &wg, 1, args, 3, &pc, sizeof pc,
                                kvs_vk_ceil_div((uint64_t)pc.rows * pc.L, wg), op));
    }
    return KVS_OK;
}

kvs_status kvs_vk_dwt(kvs_device *dev, const kvs_dwt_args *a) { return dwt_run(dev, a, 0); }
kvs_status kvs_vk_idwt(kvs_device *dev, const kvs_dwt_args *a) { return dwt_run(dev, a, 1); }
