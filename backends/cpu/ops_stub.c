/* Placeholder ops: replaced by the real CPU ops (ops_*.c). */
#include "cpu.h"
#define STUB(name, ...) kvs_status name(__VA_ARGS__) { (void)dev; return kvs_error(KVS_ERR_UNSUPPORTED, #name " not implemented yet"); }
STUB(kvs_cpu_matmul, kvs_device *dev, const kvs_matmul_args *a)
STUB(kvs_cpu_add, kvs_device *dev, const kvs_tensor *a, const kvs_tensor *b, kvs_tensor *y, int64_t n)
STUB(kvs_cpu_copy, kvs_device *dev, const kvs_tensor *src, kvs_tensor *dst, int64_t n)
STUB(kvs_cpu_rmsnorm, kvs_device *dev, const kvs_tensor *x, const kvs_tensor *w, kvs_tensor *y, int64_t rows, int64_t dim, float eps)
STUB(kvs_cpu_swiglu, kvs_device *dev, const kvs_tensor *gate, const kvs_tensor *up, kvs_tensor *out, int64_t n)
STUB(kvs_cpu_softmax, kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, int64_t rows, int64_t n, float scale)
STUB(kvs_cpu_embedding, kvs_device *dev, const kvs_tensor *table, const int32_t *ids, int64_t n, kvs_tensor *out, int64_t dim)
STUB(kvs_cpu_rope, kvs_device *dev, const kvs_rope_args *a)
STUB(kvs_cpu_attention, kvs_device *dev, const kvs_attention_args *a)
STUB(kvs_cpu_dwt, kvs_device *dev, const kvs_dwt_args *a)
STUB(kvs_cpu_idwt, kvs_device *dev, const kvs_dwt_args *a)
STUB(kvs_cpu_topk, kvs_device *dev, const kvs_topk_args *a)
STUB(kvs_cpu_topk_global, kvs_device *dev, const kvs_topk_args *a)
STUB(kvs_cpu_gather, kvs_device *dev, const kvs_rows_args *a)
STUB(kvs_cpu_scatter, kvs_device *dev, const kvs_rows_args *a)
STUB(kvs_cpu_compact, kvs_device *dev, const kvs_rows_args *a)
