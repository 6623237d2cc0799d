/* The one place that knows which backends were compiled in (meson sets KVS_HAVE_*). */
#include "kvs_config.h"
#include "internal.h"

extern const kvs_backend_ops kvs_cpu_backend;
#if KVS_HAVE_OPENCL
extern const kvs_backend_ops kvs_opencl_backend;
#endif
#if KVS_HAVE_VULKAN
extern const kvs_backend_ops kvs_vulkan_backend;
#endif

static const kvs_backend_ops *const kvs_backends[KVS_BACKEND_COUNT] = {
    [KVS_BACKEND_CPU] = &kvs_cpu_backend,
#if KVS_HAVE_OPENCL
    [KVS_BACKEND_OPENCL] = &kvs_opencl_backend,
#endif
#if KVS_HAVE_VULKAN
    [KVS_BACKEND_VULKAN] = &kvs_vulkan_backend,
#endif
};

const kvs_backend_ops *kvs_backend_lookup(kvs_backend b) {
    return (b >= 0 && b < KVS_BACKEND_COUNT) ? kvs_backends[b] : NULL;
}
