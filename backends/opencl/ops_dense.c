/* OpenCL backend: matmul (CLBlast SGEMM / native GEMV; block-type weights: qmatmul.cl's GEMV and
 * tiled GEMM reading the blocks), add, copy, rmsnorm, swiglu, softmax, embedding, rope. Kernels in
 * shaders/opencl/dense.cl and qmatmul.cl. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clblast_c.h>

#include "ocl.h"

/* dense.cl's storage code (SRC_T / DST_T) of a float type: f32 0, f16 1, bf16 2; -1 for the block
 * types, which qmatmul.cl reads. */
static int dtype_code(kvs_dtype t) {
    switch (t) {
    case KVS_F32: return 0;
    case KVS_F16: return 1;
    case KVS_BF16: return 2;
    default: return -1;
    }
}

/* Element offset of a tensor for kernels: block-type tensors get byte offsets. */
static int64_t elem_off(const kvs_tensor *t) {
    switch (t->dtype) {
    case KVS_F32: case KVS_I32: return (int64_t)(t->offset / 4);
    case KVS_F16: case KVS_BF16: return (int64_t)(t->offset / 2);
    default: return (int64_t)t->offset;
    }
}

/* A kernel of qmatmul.cl for block type dt (qgemv: work-group wg, nr rows per group). */
static kvs_status qmatmul_kernel(kvs_device *dev, kvs_dtype dt, size_t wg, int nr, const char *name, cl_kernel *k) {
    char defs[96];
    snprintf(defs, sizeof defs, "#define QT %d\n#define WG %zu\n#define NR %d\n", kvs_ocl_qt(dt), wg, nr);
    return kvs_ocl_kernel(dev, "qmatmul.cl", defs, name, k);
}

static kvs_status dense_kernel(kvs_device *dev, int src_t, int dst_t, size_t wg, const char *name, cl_kernel *k) {
    char defs[128];
    snprintf(defs, sizeof defs, "#define SRC_T %d\n#define DST_T %d\n#define WG %zu\n", src_t, dst_t, wg);
    return kvs_ocl_kernel(dev, "dense.cl", defs, name, k);
}

static size_t red_wg(kvs_device *dev) {
    kvs_ocl *o = dev->impl;
    /* CPU devices (PoCL) run a work-group as a loop: a small group keeps the per-row overhead low. */
    return kvs_ocl_wg(dev, o->is_cpu ? 64 : 256);
}

/* ---- element-wise ---------------------------------------------------------------------------- */

static kvs_status launch_1d(kvs_device *dev, cl_kernel k, const char *what, int64_t n, int nargs,
                            const kvs_ocl_arg *args) {
    size_t lws = kvs_ocl_wg(dev, 256);
    size_t gws = (size_t)n;
    return kvs_ocl_launch(dev, k, what, 1, &gws, &lws, nargs, args);
}

kvs_status kvs_ocl_add(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *a = oa->a, *b = oa->b;
    kvs_tensor *y = oa->y;
    const int64_t n = oa->n;
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, 0, 0, 256, "add_f32", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a)), ARG_L(elem_off(a)), ARG_MEM(kvs_ocl_mem(b)), ARG_L(elem_off(b)),
                          ARG_MEM(kvs_ocl_mem(y)), ARG_L(elem_off(y)), ARG_L(n)};
    return launch_1d(dev, k, "add_f32", n, 7, args);
}

kvs_status kvs_ocl_log_mass(kvs_device *dev, const kvs_binary_args *oa) {
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, 0, 0, 256, "log_mass_f32", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(oa->a)), ARG_L(elem_off(oa->a)), ARG_MEM(kvs_ocl_mem(oa->b)),
                          ARG_L(elem_off(oa->b)), ARG_MEM(kvs_ocl_mem(oa->y)), ARG_L(elem_off(oa->y)), ARG_L(oa->n)};
    return launch_1d(dev, k, "log_mass_f32", oa->n, 7, args);
}

kvs_status kvs_ocl_swiglu(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *gate = oa->a, *up = oa->b;
    kvs_tensor *out = oa->y;
    const int64_t n = oa->n;
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, 0, 0, 256, "swiglu_f32", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(gate)), ARG_L(elem_off(gate)), ARG_MEM(kvs_ocl_mem(up)),
                          ARG_L(elem_off(up)), ARG_MEM(kvs_ocl_mem(out)), ARG_L(elem_off(out)), ARG_L(n)};
    return launch_1d(dev, k, "swiglu_f32", n, 7, args);
}

kvs_status kvs_ocl_copy(kvs_device *dev, const kvs_copy_args *oa) {
    const kvs_tensor *src = oa->src;
    kvs_tensor *dst = oa->dst;
    const int64_t n = oa->n;
    kvs_ocl *o = dev->impl;
    if (src->dtype == dst->dtype) {
        /* Same dtype: a bit-exact copy. */
        return kvs_ocl_check(clEnqueueCopyBuffer(o->queue, kvs_ocl_mem(src), kvs_ocl_mem(dst), src->offset,
                                                 dst->offset, kvs_dtype_bytes(src->dtype, n), 0, NULL, NULL),
                             "clEnqueueCopyBuffer");
    }
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, dtype_code(src->dtype), dtype_code(dst->dtype), 256, "convert", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(src)), ARG_L(elem_off(src)), ARG_MEM(kvs_ocl_mem(dst)),
                          ARG_L(elem_off(dst)), ARG_L(n)};
    return launch_1d(dev, k, "convert", n, 5, args);
}

/* ---- row reductions -------------------------------------------------------------------------- */

kvs_status kvs_ocl_rmsnorm(kvs_device *dev, const kvs_rmsnorm_args *oa) {
    const kvs_tensor *x = oa->x, *w = oa->w;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, dim = oa->dim;
    const float eps = oa->eps;
    size_t wg = red_wg(dev);
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, 0, 0, wg, "rmsnorm_f32", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(x)), ARG_L(elem_off(x)), ARG_MEM(kvs_ocl_mem(w)), ARG_L(elem_off(w)),
                          ARG_MEM(kvs_ocl_mem(y)), ARG_L(elem_off(y)), ARG_I(dim), ARG_F(eps)};
    size_t gws = (size_t)rows * wg;
    return kvs_ocl_launch(dev, k, "rmsnorm_f32", 1, &gws, &wg, 8, args);
}

kvs_status kvs_ocl_softmax(kvs_device *dev, const kvs_softmax_args *oa) {
    const kvs_tensor *x = oa->x;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, n = oa->n;
    const float scale = oa->scale;
    size_t wg = red_wg(dev);
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, 0, 0, wg, "softmax_f32", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(x)), ARG_L(elem_off(x)), ARG_MEM(kvs_ocl_mem(y)), ARG_L(elem_off(y)),
                          ARG_I(n), ARG_F(scale)};
    size_t gws = (size_t)rows * wg;
    return kvs_ocl_launch(dev, k, "softmax_f32", 1, &gws, &wg, 6, args);
}

/* ---- embedding ------------------------------------------------------------------------------- */

kvs_status kvs_ocl_embedding(kvs_device *dev, const kvs_embedding_args *oa) {
    const kvs_tensor *table = oa->table;
    kvs_tensor *out = oa->out;
    const int32_t *ids = oa->ids;
    const int64_t n = oa->n, dim = oa->dim;
    cl_mem idm;
    KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_IDS, (size_t)n * 4, &idm));
    KVS_TRY(kvs_ocl_write(dev, idm, 0, ids, (size_t)n * 4));
    cl_kernel k;
    int64_t vocab = kvs_tensor_rows(table);
    if (kvs_dtype_is_quant(table->dtype)) {
        /* block rows: one item per 32-value chunk, decoded by qblocks.cl */
        KVS_TRY(qmatmul_kernel(dev, table->dtype, 64, 1, "qembedding", &k));
        kvs_ocl_arg qargs[] = {ARG_MEM(kvs_ocl_mem(table)), ARG_L(elem_off(table)), ARG_MEM(idm),
                               ARG_MEM(kvs_ocl_mem(out)), ARG_L(elem_off(out)), ARG_I(dim), ARG_I(vocab)};
        size_t gws[2] = {(size_t)(dim / 32), (size_t)n};
        return kvs_ocl_launch(dev, k, "qembedding", 2, gws, NULL, 7, qargs);
    }
    KVS_TRY(dense_kernel(dev, dtype_code(table->dtype), 0, 256, "embedding", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(table)), ARG_L(elem_off(table)), ARG_MEM(idm),
                          ARG_MEM(kvs_ocl_mem(out)), ARG_L(elem_off(out)), ARG_I(dim), ARG_I(vocab)};
    size_t lws[2] = {kvs_ocl_wg(dev, 64), 1};
    size_t gws[2] = {(size_t)dim, (size_t)n};
    return kvs_ocl_launch(dev, k, "embedding", 2, gws, lws, 7, args);
}

/* ---- rope ------------------------------------------------------------------------------------ */

kvs_status kvs_ocl_rope(kvs_device *dev, const kvs_rope_args *a) {
    int half = a->p.n_rot / 2;
    /* f64 frequency table (theta_base^(-2i/n_rot) * freq_scale), rounded to f32 once. */
    /* Each f64 frequency is passed as an unevaluated sum of two f32 (hi, lo). */
    float *freq = malloc((size_t)half * 2 * sizeof *freq);
    if (!freq) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_rope (opencl): out of host memory");
    for (int i = 0; i < half; i++) {
        double f = (double)a->p.freq_scale * pow((double)a->p.theta_base, -2.0 * i / (double)a->p.n_rot);
        freq[2 * i] = (float)f;
        freq[2 * i + 1] = (float)(f - (double)freq[2 * i]);
    }
    cl_mem fm;
    kvs_status s = kvs_ocl_scratch(dev, KVS_OCL_SCR_IDS, (size_t)half * 8, &fm);
    if (s == KVS_OK) s = kvs_ocl_write(dev, fm, 0, freq, (size_t)half * 8);
    free(freq);
    KVS_TRY(s);
    cl_kernel k;
    KVS_TRY(dense_kernel(dev, 0, a->x->dtype == KVS_F16 ? 1 : 0, 256, "rope", &k));
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->x)), ARG_L(elem_off(a->x)), ARG_MEM(kvs_ocl_mem(a->pos)),
                          ARG_L(elem_off(a->pos)), ARG_MEM(fm), ARG_I(a->head_dim), ARG_I(a->p.n_rot),
                          ARG_L(a->n_vec), ARG_I(a->pos_div), ARG_I(a->vec_stride_rows), ARG_I(a->n_rows),
                          ARG_I(a->p.mode == KVS_ROPE_NEOX)};
    size_t lws[2] = {(size_t)(half < 64 ? half : 64), 1};
    lws[0] = kvs_ocl_pow2_floor(lws[0]);
    size_t gws[2] = {(size_t)half, (size_t)a->n_vec};
    return kvs_ocl_launch(dev, k, "rope", 2, gws, lws, 12, args);
}

/* ---- matmul ---------------------------------------------------------------------------------- */

static const char *clblast_name(CLBlastStatusCode c) {
    switch (c) {
    case CLBlastNotImplemented: return "CLBlastNotImplemented";
    case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
    case CLBlastNoHalfPrecision: return "CLBlastNoHalfPrecision";
    case CLBlastInvalidVectorScalar: return "CLBlastInvalidVectorScalar";
    case CLBlastInsufficientMemoryScalar: return "CLBlastInsufficientMemoryScalar";
    case CLBlastDatabaseError: return "CLBlastDatabaseError";
    case CLBlastUnknownError: return "CLBlastUnknownError";
    case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
    case CLBlastInsufficientMemoryA: return "CLBlastInsufficientMemoryA";
    case CLBlastInsufficientMemoryB: return "CLBlastInsufficientMemoryB";
    case CLBlastInsufficientMemoryC: return "CLBlastInsufficientMemoryC";
    case CLBlastInvalidLeadDimA: return "CLBlastInvalidLeadDimA";
    case CLBlastInvalidLeadDimB: return "CLBlastInvalidLeadDimB";
    case CLBlastInvalidLeadDimC: return "CLBlastInvalidLeadDimC";
    default: return kvs_ocl_errname((cl_int)c);
    }
}

/* Batches up to this many rows use the GEMV kernels (weights read in their own dtype, one pass
 * over W per KVS_OCL_QGEMV_NR rows for the block types); more rows take the matrix-matrix path:
 * CLBlast SGEMM for float weights, qgemm (qmatmul.cl, blocks decoded tile by tile) for the block
 * types. The variants "gemv" / "tiled" force one path for every n. */
#define KVS_OCL_GEMV_MAX_N 4
#define KVS_OCL_QGEMV_NR 4

/* Block-type weight: qgemv or qgemm, reading the blocks (no dequantized copy of W). */
static kvs_status qmatmul(kvs_device *dev, const kvs_matmul_args *a, int gemv) {
    const int64_t nchunks = a->k / 32;
    cl_kernel k;
    kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->W)), ARG_L(elem_off(a->W)), ARG_MEM(kvs_ocl_mem(a->x)),
                          ARG_L(elem_off(a->x)), ARG_MEM(kvs_ocl_mem(a->y)), ARG_L(elem_off(a->y)),
                          ARG_I(a->m), ARG_I(a->k), ARG_I(a->n), ARG_I(a->accumulate)};
    if (gemv) {
        /* one work-group per output row: no more items than the row has 32-value chunks */
        size_t wg = red_wg(dev);
        while (wg > 1 && (int64_t)wg > nchunks) wg /= 2;
        KVS_TRY(qmatmul_kernel(dev, a->W->dtype, wg, KVS_OCL_QGEMV_NR, "qgemv", &k));
        size_t gws[2] = {(size_t)a->m * wg, (size_t)((a->n + KVS_OCL_QGEMV_NR - 1) / KVS_OCL_QGEMV_NR)};
        size_t lws[2] = {wg, 1};
        return kvs_ocl_launch(dev, k, "qgemv", 2, gws, lws, 10, args);
    }
    KVS_TRY(qmatmul_kernel(dev, a->W->dtype, 64, 1, "qgemm", &k));
    size_t gws[2] = {kvs_ocl_round_up((size_t)a->m, 64), (size_t)((a->n + 31) / 32)};
    size_t lws[2] = {64, 1};
    return kvs_ocl_launch(dev, k, "qgemm", 2, gws, lws, 10, args);
}

kvs_status kvs_ocl_matmul(kvs_device *dev, const kvs_matmul_args *a) {
    kvs_ocl *o = dev->impl;
    const int variant = kvs_device_variant(dev, KVS_OP_matmul);
    const int gemv = variant == KVS_OCL_MM_GEMV || (variant != KVS_OCL_MM_TILED && a->n <= KVS_OCL_GEMV_MAX_N);
    if (kvs_dtype_is_quant(a->W->dtype)) return qmatmul(dev, a, gemv);
    int wt = dtype_code(a->W->dtype);
    if (gemv) {
        size_t wg = red_wg(dev);
        cl_kernel k;
        KVS_TRY(dense_kernel(dev, wt, 0, wg, "gemv", &k));
        kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->W)), ARG_L(elem_off(a->W)), ARG_MEM(kvs_ocl_mem(a->x)),
                              ARG_L(elem_off(a->x)), ARG_MEM(kvs_ocl_mem(a->y)), ARG_L(elem_off(a->y)),
                              ARG_I(a->m), ARG_I(a->k), ARG_I(a->accumulate)};
        size_t gws[2] = {(size_t)a->m * wg, (size_t)a->n};
        size_t lws[2] = {wg, 1};
        return kvs_ocl_launch(dev, k, "gemv", 2, gws, lws, 9, args);
    }
    cl_mem wm = kvs_ocl_mem(a->W);
    size_t woff = (size_t)elem_off(a->W);
    if (wt != 0) {
        /* f16 / bf16 weight: convert to an f32 scratch copy, then SGEMM. */
        size_t nel = (size_t)(a->m * a->k);
        KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_W, nel * 4, &wm));
        cl_kernel k;
        KVS_TRY(dense_kernel(dev, wt, 0, 256, "convert", &k));
        kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(a->W)), ARG_L(elem_off(a->W)), ARG_MEM(wm), ARG_L(0),
                              ARG_L((int64_t)nel)};
        KVS_TRY(launch_1d(dev, k, "convert", (int64_t)nel, 5, args));
        woff = 0;
    }
    if (!a->accumulate) {
        /* beta = 0 may still read C (NaN * 0 = NaN): start from zeros. */
        KVS_TRY(kvs_ocl_fill32(dev, kvs_ocl_mem(a->y), a->y->offset, 0u, (size_t)(a->n * a->m)));
    }
    /* Row-major: Y[n][m] = X[n][k] * W[m][k]^T (+ Y). */
    CLBlastStatusCode st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes,
                                        (size_t)a->n, (size_t)a->m, (size_t)a->k, 1.0f,
                                        kvs_ocl_mem(a->x), (size_t)elem_off(a->x), (size_t)a->k,
                                        wm, woff, (size_t)a->k, 1.0f,
                                        kvs_ocl_mem(a->y), (size_t)elem_off(a->y), (size_t)a->m,
                                        &o->queue, NULL);
    if (st != CLBlastSuccess)
        return kvs_error(st == CLBlastInsufficientMemoryA || st == CLBlastInsufficientMemoryB ||
                                 st == CLBlastInsufficientMemoryC || st == CLBlastInvalidLeadDimA
                             ? KVS_ERR_INTERNAL : KVS_ERR_BACKEND,
                         "kvs_matmul (opencl): CLBlastSgemm(n=%lld, m=%lld, k=%lld) failed: %s (%d)",
                         (long long)a->n, (long long)a->m, (long long)a->k, clblast_name(st), (int)st);
    return KVS_OK;
}
