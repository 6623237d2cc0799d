/* Vulkan top-p over mass (shaders/vulkan/topp.comp): one 256-invocation workgroup per row, a
 * bisection over the threshold's bits with shared-memory sums. No scratch memory. Inputs are
 * validated by core/ops.c; vk_supports.c checks the workgroup size and the binding ranges. */
#include "vk_internal.h"

kvs_status kvs_vk_topp(kvs_device *dev, const kvs_topp_args *a) {
    const char *op = "kvs_topp";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_pc_topp pc = {0};
    pc.rows = (uint32_t)a->rows;
    pc.n = (uint32_t)a->n;
    pc.has_rl = a->p.row_len != NULL;
    pc.has_thr = a->thr != NULL;
    pc.p_one = a->p.p >= 1.0;
    pc.p = (float)a->p.p;
    kvs_vk_arg args[4];
    KVS_TRY(kvs_vk_bind(v, a->x, 0, 4, &args[0], &pc.ox, op));
    KVS_TRY(kvs_vk_bind_opt(v, a->p.row_len, 0, &args[1], &pc.orl, op));
    KVS_TRY(kvs_vk_bind(v, a->count, 1, 4, &args[2], &pc.oc, op));
    KVS_TRY(kvs_vk_bind_opt(v, a->thr, 1, &args[3], &pc.ot, op));
    const uint32_t wg = 256;
    return kvs_vk_dispatch(v, KVS_VK_SH_TOPP, &wg, 1, args, 4, &pc, sizeof pc, (uint64_t)a->rows, op);
}
