/* OpenCL backend: per-row and global top-k (shaders/opencl/topk.cl): 4-pass radix select of the
 * k-th largest key, survivors written in index order, bitonic sort of the k survivors.
 * Scratch: state [rows][4] (A), histograms [rows][256] (B), chunk counts [rows][C][2] (C),
 * candidates [rows][NP] u64 (D), NP = next power of two >= k. */
#include <stdio.h>

#include "ocl.h"

static size_t pow2_ceil(size_t v) {
    size_t p = 1;
    while (p < v) p *= 2;
    return p;
}

static kvs_status topk_run(kvs_device *dev, const kvs_topk_args *a, const char *op) {
    kvs_ocl *o = dev->impl;
    size_t wg = kvs_ocl_wg(dev, o->is_cpu ? 64 : 256);
    size_t lb = kvs_ocl_pow2_floor(o->local_mem / 16 < 2048 ? o->local_mem / 16 : 2048);
    if (lb < 2) lb = 2;
    size_t swg = kvs_ocl_wg(dev, lb / 2 < 256 ? lb / 2 : 256);
    char defs[128];
    snprintf(defs, sizeof defs, "#define TK_WG %zu\n#define LB %zu\n#define SORT_WG %zu\n", wg, lb, swg);

    int64_t rows = a->rows, n = a->n, k = a->k;
    /* Chunks per row: enough work-groups over all rows to fill the device (about 4 per compute
     * unit), each chunk a multiple of the work-group with at least 16 entries per item, at most
     * 1024 chunks per row. Fewer, longer chunks mean fewer histograms to merge. */
    int64_t ch = (int64_t)wg * 16;
    int64_t cmax = (4 * (int64_t)(dev->caps.compute_units > 0 ? dev->caps.compute_units : 16) + rows - 1) / rows;
    if (cmax > 1024) cmax = 1024;
    if (cmax < 1) cmax = 1;
    int64_t C = (n + ch - 1) / ch;
    if (C > cmax) {
        C = cmax;
        ch = (n + C - 1) / C;
        ch = (ch + (int64_t)wg - 1) / (int64_t)wg * (int64_t)wg;
        C = (n + ch - 1) / ch;
    }
    size_t NP = pow2_ceil((size_t)k);
    if (NP > (size_t)INT32_MAX)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s (opencl): k = %lld too large", op, (long long)k);
    cl_mem st, H, CNT, cand;
    KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_A, (size_t)rows * 16, &st));
    KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_B, (size_t)rows * 256 * 4, &H));
    KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_C, (size_t)(rows * C) * 8, &CNT));
    KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_D, (size_t)rows * NP * 8, &cand));
    cl_mem x = kvs_ocl_mem(a->x);
    int64_t xoff = (int64_t)(a->x->offset / 4);
    const kvs_tensor *rl = a->p.row_len;
    cl_kernel kn;

    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_init", &kn));
    {
        kvs_ocl_arg args[] = {ARG_MEM(rl ? kvs_ocl_mem(rl) : o->zero), ARG_L(rl ? rl->offset / 4 : 0), ARG_I(rl != NULL),
                              ARG_I(n), ARG_I(k), ARG_MEM(st), ARG_I(rows), ARG_MEM(H)};
        size_t gws = (size_t)rows, lws = 1;
        KVS_TRY(kvs_ocl_launch(dev, kn, "tk_init", 1, &gws, &lws, 8, args)); /* tk_select re-zeroes H */
    }
    size_t lws2[2] = {wg, 1};
    size_t gchunks[2] = {(size_t)C * wg, (size_t)rows};
    size_t growsel[2] = {wg, (size_t)rows};
    cl_kernel kh, ks;
    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_hist", &kh));
    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_select", &ks));
    for (int pass = 0; pass < 4; pass++) {
        int shift = 24 - 8 * pass;
        kvs_ocl_arg ha[] = {ARG_MEM(x), ARG_L(xoff), ARG_L(n), ARG_I(ch), ARG_I(C), ARG_MEM(st), ARG_MEM(H), ARG_I(shift)};
        KVS_TRY(kvs_ocl_launch(dev, kh, "tk_hist", 2, gchunks, lws2, 8, ha));
        kvs_ocl_arg sa[] = {ARG_MEM(H), ARG_MEM(st), ARG_I(shift)};
        KVS_TRY(kvs_ocl_launch(dev, ks, "tk_select", 2, growsel, lws2, 3, sa));
    }
    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_count", &kn));
    {
        kvs_ocl_arg args[] = {ARG_MEM(x), ARG_L(xoff), ARG_L(n), ARG_I(ch), ARG_I(C), ARG_MEM(st), ARG_MEM(CNT)};
        KVS_TRY(kvs_ocl_launch(dev, kn, "tk_count", 2, gchunks, lws2, 7, args));
    }
    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_scan", &kn));
    {
        kvs_ocl_arg args[] = {ARG_MEM(CNT), ARG_I(C), ARG_I(rows)};
        KVS_TRY(kvs_ocl_launch(dev, kn, "tk_scan", 2, growsel, lws2, 3, args));
    }
    KVS_TRY(kvs_ocl_fill32(dev, cand, 0, 0xffffffffu, (size_t)rows * NP * 2));
    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_write", &kn));
    {
        kvs_ocl_arg args[] = {ARG_MEM(x), ARG_L(xoff), ARG_L(n), ARG_I(ch), ARG_I(C), ARG_MEM(st), ARG_MEM(CNT),
                              ARG_MEM(cand), ARG_I((int64_t)NP), ARG_I(a->p.order_by_index != 0)};
        KVS_TRY(kvs_ocl_launch(dev, kn, "tk_write", 2, gchunks, lws2, 10, args));
    }
    /* Bitonic sort of each row's NP candidates, ascending. */
    if (NP > 1) {
        size_t blk = NP < lb ? NP : lb;
        size_t nblocks = NP / blk;
        cl_kernel kl, kst;
        KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_sort_local", &kl));
        KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_sort_step", &kst));
        size_t lgws[2] = {nblocks * swg, (size_t)rows}, llws[2] = {swg, 1};
        {
            kvs_ocl_arg args[] = {ARG_MEM(cand), ARG_I((int64_t)NP), ARG_I(2), ARG_I((int64_t)blk), ARG_I(1)};
            KVS_TRY(kvs_ocl_launch(dev, kl, "tk_sort_local", 2, lgws, llws, 5, args));
        }
        for (size_t size = 2 * blk; size <= NP; size *= 2) {
            for (size_t stride = size / 2; stride >= blk; stride /= 2) {
                kvs_ocl_arg args[] = {ARG_MEM(cand), ARG_I((int64_t)NP), ARG_I((int64_t)size), ARG_I((int64_t)stride)};
                size_t sg[2] = {NP / 2, (size_t)rows}, sl[2] = {kvs_ocl_wg(dev, 256), 1};
                if (sl[0] > NP / 2) sl[0] = NP / 2;
                KVS_TRY(kvs_ocl_launch(dev, kst, "tk_sort_step", 2, sg, sl, 4, args));
            }
            kvs_ocl_arg args[] = {ARG_MEM(cand), ARG_I((int64_t)NP), ARG_I((int64_t)size), ARG_I((int64_t)size),
                                  ARG_I((int64_t)(blk / 2))};
            KVS_TRY(kvs_ocl_launch(dev, kl, "tk_sort_local", 2, lgws, llws, 5, args));
        }
    }
    KVS_TRY(kvs_ocl_kernel(dev, "topk.cl", defs, "tk_out", &kn));
    kvs_ocl_arg args[] = {ARG_MEM(x), ARG_L(xoff), ARG_L(n), ARG_MEM(st), ARG_MEM(cand), ARG_I((int64_t)NP),
                          ARG_MEM(kvs_ocl_mem(a->idx)), ARG_L(a->idx->offset / 4),
                          ARG_MEM(a->val ? kvs_ocl_mem(a->val) : o->zero), ARG_L(a->val ? a->val->offset / 4 : 0),
                          ARG_I(a->val != NULL), ARG_I(k)};
    size_t ol[2] = {kvs_ocl_wg(dev, 64), 1}, og[2] = {(size_t)k, (size_t)rows};
    return kvs_ocl_launch(dev, kn, "tk_out", 2, og, ol, 12, args);
}

kvs_status kvs_ocl_topk(kvs_device *dev, const kvs_topk_args *a) { return topk_run(dev, a, "kvs_topk"); }

kvs_status kvs_ocl_topk_global(kvs_device *dev, const kvs_topk_args *a) {
    return topk_run(dev, a, "kvs_topk_global");
}
