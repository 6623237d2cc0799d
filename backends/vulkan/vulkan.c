/* Vulkan backend: the kvs_backend_ops entry points (device count/describe/open/close/sync, buffers
 * and transfers) and the ops table. The work is in device.c (instance, device, caps), memory.c
 * (blocks, arenas), commands.c (recording, barriers, submit), pipelines.c (pipelines, descriptors)
 * and ops_*.c (the ops); vk_internal.h lists them.
 *
 * Transfers: on unified-memory devices tensors are mapped and an upload with no recorded work
 * pending copies directly; otherwise uploads are recorded copies from the staging arena (ordered
 * with the recorded ops, src reusable on return) and downloads submit the pending work first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

/* Only devices that report Vulkan >= 1.1 and have a compute queue count. Enumeration order. */
static kvs_status vk_device_count(int *count) {
    *count = 0;
    VkInstance inst;
    kvs_status s = kvs_vk_instance(&inst, 0, NULL);
    if (s != KVS_OK) {
        kvs_clear_error();
        return KVS_OK; /* no loader/driver: zero devices, not an error */
    }
    int n = 0;
    s = kvs_vk_physical(inst, -1, NULL, &n);
    vkDestroyInstance(inst, NULL);
    if (s != KVS_OK) {
        kvs_clear_error();
        n = 0;
    }
    *count = n;
    return KVS_OK;
}

static kvs_status vk_device_describe(int index, kvs_device_info *info) {
    VkInstance inst;
    KVS_TRY(kvs_vk_instance(&inst, 0, NULL));
    VkPhysicalDevice pd;
    int n;
    kvs_status s = kvs_vk_physical(inst, index, &pd, &n);
    if (s == KVS_OK) kvs_vk_fill_info(pd, info);
    vkDestroyInstance(inst, NULL);
    return s;
}

static void vk_device_close(kvs_device *dev) {
    kvs_vk *v = dev->impl;
    if (!v) return;
    kvs_vk_commands_destroy(v); /* submits pending work and waits for the device first */
    if (v->device) {
        kvs_vk_pipelines_destroy(v);
        kvs_vk_memory_destroy(v);
        vkDestroyDevice(v->device, NULL);
    }
    if (v->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT f =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(v->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (f) f(v->instance, v->messenger, NULL);
    }
    if (v->instance) vkDestroyInstance(v->instance, NULL);
    free(v->pipes);
    free(v->pools);
    free(v);
    dev->impl = NULL;
}

static kvs_status vk_setup(kvs_device *dev, kvs_vk *v, const kvs_device_params *p) {
    v->validation = kvs_vk_validation_wanted(p);
    KVS_TRY(kvs_vk_instance(&v->instance, v->validation, v));
    if (v->validation) KVS_TRY(kvs_vk_messenger(v));
    int n;
    KVS_TRY(kvs_vk_physical(v->instance, p->index, &v->phys, &n));
    KVS_TRY(kvs_vk_create_device(dev, v));
    KVS_TRY(kvs_vk_memory_init(dev, v));
    KVS_TRY(kvs_vk_commands_init(v));
    KVS_TRY(kvs_vk_pipelines_init(v));
    KVS_TRY(kvs_vk_alloc_mem(v, 0, 256, &v->dummy));
    return KVS_OK;
}

static kvs_status vk_device_open(kvs_device *dev, const kvs_device_params *p) {
    kvs_vk *v = calloc(1, sizeof *v);
    if (!v) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    dev->impl = v;
    kvs_status s = vk_setup(dev, v, p);
    if (s != KVS_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kvs_last_error());
        vk_device_close(dev);
        return kvs_error(s, "%s", msg);
    }
    return KVS_OK;
}

static kvs_status vk_device_sync(kvs_device *dev) {
    kvs_vk *v = dev->impl;
    KVS_TRY(kvs_vk_flush(v));
    return kvs_vk_check(v, "kvs_device_sync");
}

static kvs_status vk_buffer_alloc(kvs_device *dev, size_t nbytes, void **handle) {
    kvs_vk *v = dev->impl;
    kvs_vk_alloc *a;
    KVS_TRY(kvs_vk_alloc_mem(v, 0, nbytes, &a));
    *handle = a;
    return KVS_OK;
}

static void vk_buffer_free(kvs_device *dev, void *handle) {
    kvs_vk_release(dev->impl, handle);
}

static kvs_status vk_upload(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n) {
    kvs_vk *v = dev->impl;
    kvs_vk_alloc *a = handle;
    kvs_vk_end_op(v); /* not an op: its staging takes may flush */
    KVS_TRY(kvs_vk_check(v, "kvs_tensor_upload"));
    VkDeviceSize abs = a->offset + offset;
    if (v->device_mapped && !v->recording) {
        memcpy((char *)a->block->map + abs, src, n);
        return KVS_OK;
    }
    /* recorded copy from staging: ordered after earlier ops, src reusable on return */
    const char *s = src;
    while (n) {
        size_t chunk = n < KVS_VK_STAGING_DEFAULT ? n : (size_t)KVS_VK_STAGING_DEFAULT;
        kvs_vk_alloc *st;
        VkDeviceSize so;
        void *host;
        KVS_TRY(kvs_vk_stage(v, chunk, &st, &so, &host));
        memcpy(host, s, chunk);
        KVS_TRY(kvs_vk_copy_buffer(v, st->block->buf, so, a->block->buf, abs, chunk));
        s += chunk;
        abs += chunk;
        n -= chunk;
    }
    return KVS_OK;
}

static kvs_status vk_download(kvs_device *dev, void *handle, size_t offset, void *dst, size_t n) {
    kvs_vk *v = dev->impl;
    kvs_vk_alloc *a = handle;
    kvs_vk_end_op(v); /* not an op: its staging takes may flush */
    KVS_TRY(kvs_vk_flush(v));
    KVS_TRY(kvs_vk_check(v, "kvs_tensor_download"));
    VkDeviceSize abs = a->offset + offset;
    if (a->block->map) {
        memcpy(dst, (const char *)a->block->map + abs, n);
        return KVS_OK;
    }
    char *d = dst;
    while (n) {
        size_t chunk = n < KVS_VK_STAGING_DEFAULT ? n : (size_t)KVS_VK_STAGING_DEFAULT;
        kvs_vk_alloc *st;
        VkDeviceSize so;
        void *host;
        KVS_TRY(kvs_vk_stage(v, chunk, &st, &so, &host));
        KVS_TRY(kvs_vk_copy_buffer(v, a->block->buf, abs, st->block->buf, so, chunk));
        KVS_TRY(kvs_vk_flush(v));
        memcpy(d, host, chunk);
        d += chunk;
        abs += chunk;
        n -= chunk;
    }
    return kvs_vk_check(v, "kvs_tensor_download");
}

static kvs_status vk_fill32(kvs_device *dev, void *handle, size_t offset, uint32_t word, size_t n) {
    kvs_vk *v = dev->impl;
    kvs_vk_alloc *a = handle;
    KVS_TRY(kvs_vk_check(v, "kvs_tensor_fill"));
    return kvs_vk_fill(v, a->block->buf, a->offset + offset, (VkDeviceSize)n * 4, word);
}

const kvs_backend_ops kvs_vulkan_backend = {
    .id = KVS_BACKEND_VULKAN,
    .name = "vulkan",
    .device_count = vk_device_count,
    .device_describe = vk_device_describe,
    .device_open = vk_device_open,
    .device_close = vk_device_close,
    .device_sync = vk_device_sync,
    .set_threads = NULL,
    .buffer_alloc = vk_buffer_alloc,
    .buffer_free = vk_buffer_free,
    .upload = vk_upload,
    .download = vk_download,
    .fill32 = vk_fill32,
    .supports = kvs_vk_supports,
    .variants = kvs_vk_variants,
    .n_variants = KVS_VK_N_VARIANTS,
    KVS_OP_TABLE_ENTRIES(kvs_vk_)
};
