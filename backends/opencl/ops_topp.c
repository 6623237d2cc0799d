/* OpenCL backend: per-row top-p over mass (shaders/opencl/topp.cl, kernel tp_row): one work-group
 * per row, a bisection over the threshold's bits with work-group sums. No scratch memory. */
#include <math.h>
#include <stdio.h>

#include "ocl.h"

kvs_status kvs_ocl_topp(kvs_device *dev, const kvs_topp_args *a) {
    kvs_ocl *o = dev->impl;
    size_t wg = kvs_ocl_wg(dev, o->is_cpu ? 64 : 256);
    char defs[64];
    snprintf(defs, sizeof defs, "#define TP_WG %zu\n", wg);
    cl_kernel kn;
    KVS_TRY(kvs_ocl_kernel(dev, "topp.cl", defs, "tp_row", &kn));
    const kvs_tensor *rl = a->p.row_len;
    const int p_one = a->p.p >= 1.0;
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->x)), ARG_L(kvs_ocl_off(a->x, 4)), ARG_L(a->n),
                          ARG_MEM(rl ? kvs_ocl_mem(rl) : o->zero), ARG_L(rl ? kvs_ocl_off(rl, 4) : 0), ARG_I(rl != NULL),
                          ARG_F((float)a->p.p), ARG_I(p_one), ARG_MEM(kvs_ocl_mem(a->count)),
                          ARG_L(kvs_ocl_off(a->count, 4)), ARG_MEM(a->thr ? kvs_ocl_mem(a->thr) : o->zero),
                          ARG_L(a->thr ? kvs_ocl_off(a->thr, 4) : 0), ARG_I(a->thr != NULL)};
    size_t gws[2] = {wg, (size_t)a->rows}, lws[2] = {wg, 1};
    return kvs_ocl_launch(dev, kn, "tp_row", 2, gws, lws, (int)(sizeof args / sizeof args[0]), args);
}
