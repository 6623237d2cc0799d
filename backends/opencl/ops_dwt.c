/* OpenCL backend: multi-level periodized DWT / IDWT along rows (shaders/opencl/dwt.cl), one
 * kernel launch per level; intermediate approximations ping-pong between two scratch buffers.
 * Output layout as pywt.wavedec: [a_J | d_J | d_{J-1} | ... | d_1]. */
#include <stdio.h>
#include <string.h>

#include "ocl.h"

static kvs_status dwt_kernel(kvs_device *dev, kvs_wavelet w, const char *name, cl_kernel *k) {
    double lo[8];
    int taps = kvs_wavelet_filter(w, lo);
    if (taps == 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "opencl dwt: unknown wavelet %d", (int)w);
    char defs[512];
    int n = snprintf(defs, sizeof defs, "#define TAPS %d\n#define DWT_LO ", taps);
    for (int t = 0; t < taps; t++)
        n += snprintf(defs + n, sizeof defs - (size_t)n, "%s%.17gf", t ? ", " : "", lo[t]);
    snprintf(defs + n, sizeof defs - (size_t)n, "\n");
    return kvs_ocl_kernel(dev, "dwt.cl", defs, name, k);
}

/* Offset of d_l within a coefficient row: len_J + sum_{m=l+1..J} len_m. */
static int64_t detail_off(const kvs_dwt_args *a, int l) {
    int64_t off = kvs_dwt_level_length(a->n, a->levels);
    for (int m = l + 1; m <= a->levels; m++) off += kvs_dwt_level_length(a->n, m);
    return off;
}

static size_t lws_for(size_t n) { return kvs_ocl_pow2_floor(n < 64 ? n : 64); }

/* What dwt and idwt share: the level kernel `name` of a->w, and (for more than one level) two
 * ping-pong buffers of rows x (first level's length) floats in the device's scratch. */
static kvs_status dwt_setup(kvs_device *dev, const kvs_dwt_args *a, const char *name, cl_kernel *k, cl_mem buf[2]) {
    KVS_TRY(dwt_kernel(dev, a->w, name, k));
    buf[0] = buf[1] = NULL;
    if (a->levels > 1) {
        size_t bytes = (size_t)(a->rows * kvs_dwt_level_length(a->n, 1)) * 4;
        KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_A, bytes, &buf[0]));
        KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_B, bytes, &buf[1]));
    }
    return KVS_OK;
}

kvs_status kvs_ocl_dwt(kvs_device *dev, const kvs_dwt_args *a) {
    cl_kernel k;
    cl_mem buf[2];
    KVS_TRY(dwt_setup(dev, a, "dwt_level", &k, buf));
    cl_mem y = kvs_ocl_mem(a->dst);
    int64_t yoff = (int64_t)(a->dst->offset / 4);
    cl_mem src = kvs_ocl_mem(a->src);
    int64_t src_off = (int64_t)(a->src->offset / 4), src_stride = a->n, L = a->n;
    for (int l = 1; l <= a->levels; l++) {
        int64_t half = kvs_dwt_level_length(a->n, l);
        cl_mem am = l == a->levels ? y : buf[l & 1];
        int64_t a_off = l == a->levels ? yoff : 0, a_stride = l == a->levels ? a->ncoef : half;
        kvs_ocl_arg args[] = {ARG_MEM(src), ARG_L(src_off), ARG_L(src_stride), ARG_I(L), ARG_MEM(am), ARG_L(a_off),
                              ARG_L(a_stride), ARG_MEM(y), ARG_L(yoff + detail_off(a, l)), ARG_L(a->ncoef)};
        size_t lws[2] = {lws_for((size_t)half), 1};
        size_t gws[2] = {(size_t)half, (size_t)a->rows};
        KVS_TRY(kvs_ocl_launch(dev, k, "dwt_level", 2, gws, lws, 10, args));
        src = am;
        src_off = a_off;
        src_stride = a_stride;
        L = half;
    }
    return KVS_OK;
}

kvs_status kvs_ocl_idwt(kvs_device *dev, const kvs_dwt_args *a) {
    cl_kernel k;
    cl_mem buf[2];
    KVS_TRY(dwt_setup(dev, a, "idwt_level", &k, buf));
    cl_mem y = kvs_ocl_mem(a->src), x = kvs_ocl_mem(a->dst);
    int64_t yoff = (int64_t)(a->src->offset / 4), xoff = (int64_t)(a->dst->offset / 4);
    /* Current approximation a_l: starts as a_J inside y. */
    cl_mem am = y;
    int64_t a_off = yoff, a_stride = a->ncoef;
    for (int l = a->levels; l >= 1; l--) {
        int64_t half = kvs_dwt_level_length(a->n, l), L = kvs_dwt_level_length(a->n, l - 1);
        cl_mem dst = l == 1 ? x : buf[l & 1];
        int64_t dst_off = l == 1 ? xoff : 0, dst_stride = l == 1 ? a->n : L;
        kvs_ocl_arg args[] = {ARG_MEM(am), ARG_L(a_off), ARG_L(a_stride), ARG_MEM(y), ARG_L(yoff + detail_off(a, l)),
                              ARG_L(a->ncoef), ARG_I(half), ARG_MEM(dst), ARG_L(dst_off), ARG_L(dst_stride), ARG_I(L)};
        size_t lws[2] = {lws_for((size_t)L), 1};
        size_t gws[2] = {(size_t)L, (size_t)a->rows};
        KVS_TRY(kvs_ocl_launch(dev, k, "idwt_level", 2, gws, lws, 11, args));
        am = dst;
        a_off = dst_off;
        a_stride = dst_stride;
    }
    return KVS_OK;
}
