/* CPU backend internals: device state and op entry points (one per ops-table slot). */
#ifndef KVS_BACKENDS_CPU_H
#define KVS_BACKENDS_CPU_H

#include <stdio.h>

#include "internal.h"
#include "kvs_config.h"

typedef struct kvs_cpu {
    int n_threads;       /* worker threads for OpenMP regions and OpenBLAS */
    void *scratch;       /* grow-only scratch buffer (kvs_cpu_scratch) */
    size_t scratch_bytes;
} kvs_cpu;

/* Returns a scratch buffer of at least nbytes owned by the device (valid until the next call), or
 * NULL when out of memory. Not reentrant: one op at a time per device. */
void *kvs_cpu_scratch(kvs_device *dev, size_t nbytes);

static inline int kvs_cpu_threads(const kvs_device *dev) { return ((const kvs_cpu *)dev->impl)->n_threads; }

/* Sets OpenBLAS's (process-wide) thread count when it differs from the last value set; no-op for
 * other BLAS libraries. */
void kvs_cpu_blas_threads(int n);

/* 1 when kvs_matmul uses the backend's own AVX-512 GEMM instead of cblas_sgemm (the CPU has
 * AVX-512 and the BLAS has no AVX-512 kernels for it; env KVS_CPU_GEMM=blas|own overrides). */
int kvs_cpu_own_gemm(void);

/* "OpenBLAS core <name>, GEMM: ..." for device descriptions. */
const char *kvs_cpu_blas_name(void);

kvs_status kvs_cpu_matmul(kvs_device *dev, const kvs_matmul_args *a);
kvs_status kvs_cpu_add(kvs_device *dev, const kvs_tensor *a, const kvs_tensor *b, kvs_tensor *y, int64_t n);
kvs_status kvs_cpu_copy(kvs_device *dev, const kvs_tensor *src, kvs_tensor *dst, int64_t n);
kvs_status kvs_cpu_rmsnorm(kvs_device *dev, const kvs_tensor *x, const kvs_tensor *w, kvs_tensor *y, int64_t rows,
                           int64_t dim, float eps);
kvs_status kvs_cpu_swiglu(kvs_device *dev, const kvs_tensor *gate, const kvs_tensor *up, kvs_tensor *out, int64_t n);
kvs_status kvs_cpu_softmax(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, int64_t rows, int64_t n, float scale);
kvs_status kvs_cpu_embedding(kvs_device *dev, const kvs_tensor *table, const int32_t *ids, int64_t n, kvs_tensor *out,
                             int64_t dim);
kvs_status kvs_cpu_rope(kvs_device *dev, const kvs_rope_args *a);
kvs_status kvs_cpu_attention(kvs_device *dev, const kvs_attention_args *a);
kvs_status kvs_cpu_dwt(kvs_device *dev, const kvs_dwt_args *a);
kvs_status kvs_cpu_idwt(kvs_device *dev, const kvs_dwt_args *a);
kvs_status kvs_cpu_topk(kvs_device *dev, const kvs_topk_args *a);
kvs_status kvs_cpu_topk_global(kvs_device *dev, const kvs_topk_args *a);
kvs_status kvs_cpu_gather(kvs_device *dev, const kvs_rows_args *a);
kvs_status kvs_cpu_scatter(kvs_device *dev, const kvs_rows_args *a);
kvs_status kvs_cpu_compact(kvs_device *dev, const kvs_rows_args *a);

#endif
