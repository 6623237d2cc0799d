/* OpenCL backend: gather / scatter / compact of cache rows (shaders/opencl/rows.cl).
 * Rows move as 128-bit words when every row and offset is 16-byte aligned, else as 32-bit words
 * when 4-byte aligned, else as 16-bit words.
 * Scatter resolves duplicate indices deterministically (highest i wins) with an integer
 * atomic_max pass into a scratch "winner" table; compact gathers into scratch then copies back.
 * A converting scatter (the KV cache's append: f32 rows -> f16, bf16, q8_0, q4_0, q4_1, iq4_nl, and
 * both planes of QuantSpec's qh8 through kvs_scatter_qh8) encodes each row on the device (rows.cl
 * scatter_convert, one item per value or per block). */
#include <stdio.h>

#include "ocl.h"

static size_t word_size(const kvs_rows_args *a) {
    for (size_t w = 16; w >= 4; w /= 4)
        if (a->row_bytes % (int64_t)w == 0 && a->src->offset % w == 0 && a->dst->offset % w == 0) return w;
    return 2;
}

static kvs_status rows_kernel(kvs_device *dev, size_t ws, const char *name, cl_kernel *k) {
    const char *defs = ws == 16 ? "#define WORD_T uint4\n" : ws == 4 ? "#define WORD_T uint\n" : "#define WORD_T ushort\n";
    return kvs_ocl_kernel(dev, "rows.cl", defs, name, k);
}

/* Grid (row_words, n, G); work-groups of up to 256 items: a row's words (up to 64) times as many
 * rows as fill the rest, so that short rows do not make one tiny work-group per row. */
static void rows_range(kvs_device *dev, const kvs_rows_args *a, size_t ws, size_t gws[3], size_t lws[3]) {
    size_t rw = (size_t)a->row_bytes / ws;
    size_t cap = kvs_ocl_wg(dev, 256);
    lws[0] = kvs_ocl_pow2_floor(rw < 64 ? rw : 64);
    if (lws[0] > cap) lws[0] = cap;
    size_t rows = cap / lws[0];
    lws[1] = kvs_ocl_pow2_floor(rows < (size_t)a->n ? rows : (size_t)a->n);
    lws[2] = 1;
    gws[0] = rw;
    gws[1] = (size_t)a->n;
    gws[2] = (size_t)a->groups;
}

kvs_status kvs_ocl_gather(kvs_device *dev, const kvs_rows_args *a) {
    size_t ws = word_size(a);
    cl_kernel k;
    KVS_TRY(rows_kernel(dev, ws, "gather_rows", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->src)), ARG_L(a->src->offset / ws), ARG_MEM(kvs_ocl_mem(a->idx)),
                          ARG_L(a->idx->offset / 4), ARG_MEM(kvs_ocl_mem(a->dst)), ARG_L(a->dst->offset / ws),
                          ARG_I(a->row_bytes / (int64_t)ws), ARG_I(a->n), ARG_I(a->src_rows), ARG_I(a->dst_rows),
                          ARG_I(a->idx_shared)};
    size_t gws[3], lws[3];
    rows_range(dev, a, ws, gws, lws);
    return kvs_ocl_launch(dev, k, "gather_rows", 3, gws, lws, 11, args);
}

kvs_status kvs_ocl_scatter(kvs_device *dev, const kvs_rows_args *a) {
    kvs_ocl *o = dev->impl;
    size_t ws = a->convert ? 4 : word_size(a);
    cl_mem win = o->zero;
    int use_winner = a->n > 1;
    if (use_winner) {
        size_t nw = (size_t)(a->groups * a->dst_rows);
        KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_A, nw * 4, &win));
        KVS_TRY(kvs_ocl_fill32(dev, win, 0, 0xffffffffu, nw)); /* -1 */
        cl_kernel kw;
        KVS_TRY(rows_kernel(dev, ws, "scatter_winners", &kw));
        kvs_ocl_arg wargs[] = {ARG_MEM(kvs_ocl_mem(a->idx)), ARG_L(a->idx->offset / 4), ARG_MEM(win), ARG_I(a->n),
                               ARG_I(a->dst_rows), ARG_I(a->idx_shared)};
        size_t lws[2] = {kvs_ocl_wg(dev, 64), 1};
        size_t gws[2] = {(size_t)a->n, (size_t)a->groups};
        KVS_TRY(kvs_ocl_launch(dev, kw, "scatter_winners", 2, gws, lws, 6, wargs));
    }
    cl_kernel k;
    if (a->convert) {
        /* a qh8 cache's append (kvs_scatter_qh8): dst the upper plane, dst_lo the lower */
        const int dt = a->dst_lo ? KVS_OCL_QT_QH8 : kvs_ocl_qt(a->dst->dtype);
        const int64_t nv = a->dst->ne[0];
        char defs[64];
        snprintf(defs, sizeof defs, "#define WORD_T uint\n#define DT %d\n", dt);
        KVS_TRY(kvs_ocl_kernel(dev, "rows.cl", defs, "scatter_convert", &k));
        kvs_ocl_arg cargs[] = {ARG_MEM(kvs_ocl_mem(a->src)), ARG_L(a->src->offset / 4), ARG_MEM(kvs_ocl_mem(a->idx)),
                               ARG_L(a->idx->offset / 4), ARG_MEM(kvs_ocl_mem(a->dst)), ARG_L(a->dst->offset),
                               ARG_MEM(win), ARG_I(use_winner), ARG_I(nv), ARG_I(a->row_bytes), ARG_I(a->n),
                               ARG_I(a->groups), ARG_I(a->dst_rows), ARG_I(a->idx_shared), ARG_I(a->src_token_major),
                               ARG_MEM(a->dst_lo ? kvs_ocl_mem(a->dst_lo) : o->zero),
                               ARG_L(a->dst_lo ? (int64_t)a->dst_lo->offset : 0)};
        size_t units = (size_t)(kvs_dtype_is_quant(a->dst->dtype) ? nv / 32 : nv);
        size_t lws[3] = {kvs_ocl_pow2_floor(units < 64 ? units : 64), 1, 1};
        size_t gws[3] = {units, (size_t)a->n, (size_t)a->groups};
        return kvs_ocl_launch(dev, k, "scatter_convert", 3, gws, lws, 17, cargs);
    }
    KVS_TRY(rows_kernel(dev, ws, "scatter_rows", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->src)), ARG_L(a->src->offset / ws), ARG_MEM(kvs_ocl_mem(a->idx)),
                          ARG_L(a->idx->offset / 4), ARG_MEM(kvs_ocl_mem(a->dst)), ARG_L(a->dst->offset / ws),
                          ARG_MEM(win), ARG_I(use_winner), ARG_I(a->row_bytes / (int64_t)ws), ARG_I(a->n),
                          ARG_I(a->groups), ARG_I(a->dst_rows), ARG_I(a->idx_shared), ARG_I(a->src_token_major)};
    size_t gws[3], lws[3];
    rows_range(dev, a, ws, gws, lws);
    return kvs_ocl_launch(dev, k, "scatter_rows", 3, gws, lws, 14, args);
}

kvs_status kvs_ocl_compact(kvs_device *dev, const kvs_rows_args *a) {
    size_t ws = word_size(a);
    size_t rw = (size_t)a->row_bytes / ws;
    cl_mem tmp;
    KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_A, (size_t)(a->groups * a->n) * (size_t)a->row_bytes, &tmp));
    cl_kernel k;
    KVS_TRY(rows_kernel(dev, ws, "gather_rows", &k));
    size_t gws[3], lws[3];
    rows_range(dev, a, ws, gws, lws);
    {
        /* tmp[g][i] = t[g][idx[g][i]]: a gather into a [G][n][row] scratch. */
        kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->src)), ARG_L(a->src->offset / ws), ARG_MEM(kvs_ocl_mem(a->idx)),
                              ARG_L(a->idx->offset / 4), ARG_MEM(tmp), ARG_L(0), ARG_I(rw), ARG_I(a->n),
                              ARG_I(a->src_rows), ARG_I(a->n), ARG_I(a->idx_shared)};
        KVS_TRY(kvs_ocl_launch(dev, k, "gather_rows", 3, gws, lws, 11, args));
    }
    KVS_TRY(rows_kernel(dev, ws, "compact_back", &k));
    kvs_ocl_arg args[] = {ARG_MEM(tmp), ARG_MEM(kvs_ocl_mem(a->idx)), ARG_L(a->idx->offset / 4),
                          ARG_MEM(kvs_ocl_mem(a->dst)), ARG_L(a->dst->offset / ws), ARG_I(rw), ARG_I(a->n),
                          ARG_I(a->dst_rows), ARG_I(a->idx_shared)};
    return kvs_ocl_launch(dev, k, "compact_back", 3, gws, lws, 9, args);
}
