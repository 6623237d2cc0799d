/* Ops not yet implemented on OpenCL: report KVS_ERR_UNSUPPORTED. */
#include "ocl.h"
#define TODO(name, ...) kvs_status name(__VA_ARGS__) { (void)dev; (void)a; return kvs_error(KVS_ERR_UNSUPPORTED, #name ": not implemented on OpenCL yet"); }
TODO(kvs_ocl_topk, kvs_device *dev, const kvs_topk_args *a)
TODO(kvs_ocl_topk_global, kvs_device *dev, const kvs_topk_args *a)
