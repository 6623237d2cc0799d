/* Vulkan backend: instance and device, memory suballocation, staging, descriptor/pipeline caches,
 * command batching with automatic barriers, validation-layer reporting, and the ops table.
 *
 * Model: every op records dispatches into one command buffer; a pipeline barrier is inserted only
 * when a dispatch touches a buffer range that an earlier, not-yet-barriered command wrote (or
 * writes a range an earlier one read). The command buffer is submitted (and waited on) only when the
 * host needs results (download, sync), when the scratch/staging arenas or the command count run
 * full, or at device close. Uploads go through the staging arena as recorded copies, so they are
 * ordered with the recorded ops without a submit.
 *
 * Memory: tensors are sub-ranges of large blocks (block_size, default 256 MiB or less if the device
 * limits allocations), first-fit with coalescing free lists; one VkBuffer spans each block, and a
 * dispatch binds [align_down(tensor offset), tensor end) with the tensor's element offset within
 * that range passed as a push constant (minStorageBufferOffsetAlignment respected).
 * Unified-memory devices (integrated GPUs, CPU implementations such as lavapipe) use host-visible
 * device memory for tensors and copy directly when no work is pending. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"
#include "vk_shaders.h"

#define VK_BLOCK_DEFAULT ((VkDeviceSize)256 << 20)
#define VK_STAGING_DEFAULT ((VkDeviceSize)64 << 20)
#define VK_MAX_CMDS 1024
#define VK_POOL_SETS 256

static kvs_status vk_fail(VkResult r, const char *what) {
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: %s failed: out of memory (VkResult %d)", what, (int)r);
    return kvs_error(KVS_ERR_BACKEND, "vulkan: %s failed (VkResult %d)", what, (int)r);
}

#define VKC(call, what)                                                                            \
    do {                                                                                           \
        VkResult vkc_r_ = (call);                                                                  \
        if (vkc_r_ != VK_SUCCESS) return vk_fail(vkc_r_, what);                                    \
    } while (0)

static VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

/* ---- validation messages -------------------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL vk_debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                  VkDebugUtilsMessageTypeFlagsEXT type,
                                                  const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                  void *user) {
    (void)type;
    kvs_vk *v = user;
    if (!v || !(sev & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)))
        return VK_FALSE;
    size_t len = strlen(v->val_msg);
    if (len + 8 < sizeof v->val_msg)
        snprintf(v->val_msg + len, sizeof v->val_msg - len, "%s[%s] %s", len ? " | " : "",
                 (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning",
                 data && data->pMessage ? data->pMessage : "(no message)");
    v->val_pending = 1;
    return VK_FALSE;
}

static kvs_status vk_maybe_flush(kvs_vk *v);

kvs_status kvs_vk_begin_op(kvs_vk *v, const char *op) {
    KVS_TRY(kvs_vk_check(v, op));
    return vk_maybe_flush(v);
}

kvs_status kvs_vk_check(kvs_vk *v, const char *op) {
    if (!v->val_pending) return KVS_OK;
    v->val_pending = 0;
    kvs_status s = kvs_error(KVS_ERR_BACKEND, "%s: Vulkan validation: %s", op, v->val_msg);
    v->val_msg[0] = '\0';
    return s;
}

/* ---- instance and enumeration --------------------------------------------------------------- */

static int vk_validation_wanted(const kvs_device_params *p) {
    if (p && p->validation >= 0) return p->validation > 0;
    const char *e = getenv("KVS_VULKAN_VALIDATION");
    return e && e[0] && strcmp(e, "0") != 0;
}

static int vk_has_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkLayerProperties *l = calloc(n, sizeof *l);
    if (!l) return 0;
    int found = 0;
    if (vkEnumerateInstanceLayerProperties(&n, l) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(l[i].layerName, name) == 0) found = 1;
    free(l);
    return found;
}

/* The validation messenger: warnings and errors of every type go to vk_debug_cb (which turns them
 * into op errors). Used for instance creation (pNext) and the instance's own messenger. */
static VkDebugUtilsMessengerCreateInfoEXT vk_messenger_info(kvs_vk *v) {
    VkDebugUtilsMessengerCreateInfoEXT dci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = vk_debug_cb,
        .pUserData = v};
    return dci;
}

static kvs_status vk_instance(VkInstance *out, int validation, kvs_vk *v) {
    uint32_t api = VK_API_VERSION_1_0;
    PFN_vkEnumerateInstanceVersion ev =
        (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
    if (ev) ev(&api);
    if (api < VK_API_VERSION_1_1)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: the loader supports only Vulkan 1.0 (1.1 is required)");
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "kvsieve",
                             .pEngineName = "kvsieve",
                             .apiVersion = api >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : api};
    const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[1] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkDebugUtilsMessengerCreateInfoEXT dci = vk_messenger_info(v);
    if (validation) {
        if (!vk_has_layer(layers[0]))
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "vulkan: validation requested but VK_LAYER_KHRONOS_validation is not installed "
                             "(Debian: apt-get install vulkan-validationlayers)");
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = layers;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = exts;
        ci.pNext = &dci; /* also reports problems during instance creation */
    }
    VkResult r = vkCreateInstance(&ci, NULL, out);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return kvs_error(KVS_ERR_NO_DEVICE, "vulkan: no compatible driver (vkCreateInstance: incompatible driver)");
    VKC(r, "vkCreateInstance");
    return KVS_OK;
}

static kvs_status vk_physical(VkInstance inst, int index, VkPhysicalDevice *out, int *count) {
    uint32_t n = 0;
    VKC(vkEnumeratePhysicalDevices(inst, &n, NULL), "vkEnumeratePhysicalDevices");
    *count = (int)n;
    if (index < 0) return KVS_OK;
    if ((uint32_t)index >= n) return kvs_error(KVS_ERR_NO_DEVICE, "vulkan device %d does not exist (%u found)", index, n);
    VkPhysicalDevice *d = calloc(n, sizeof *d);
    if (!d) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    VkResult r = vkEnumeratePhysicalDevices(inst, &n, d);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(d);
        return vk_fail(r, "vkEnumeratePhysicalDevices");
    }
    *out = d[index];
    free(d);
    return KVS_OK;
}

/* Only devices that report Vulkan >= 1.1 and have a compute queue count. Enumeration order. */
static kvs_status vk_device_count(int *count) {
    *count = 0;
    VkInstance inst;
    kvs_status s = vk_instance(&inst, 0, NULL);
    if (s != KVS_OK) {
        kvs_clear_error();
        return KVS_OK; /* no loader/driver: zero devices, not an error */
    }
    int n = 0;
    s = vk_physical(inst, -1, NULL, &n);
    vkDestroyInstance(inst, NULL);
    if (s != KVS_OK) {
        kvs_clear_error();
        n = 0;
    }
    *count = n;
    return KVS_OK;
}

static void vk_fill_info(VkPhysicalDevice pd, kvs_device_info *info) {
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(pd, &pr);
    switch (pr.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info->type = KVS_DEVICE_GPU_DISCRETE; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info->type = KVS_DEVICE_GPU_INTEGRATED; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: info->type = KVS_DEVICE_CPU; break;
    default: info->type = KVS_DEVICE_OTHER; break;
    }
    snprintf(info->name, sizeof info->name, "%.127s", pr.deviceName);
    snprintf(info->vendor, sizeof info->vendor, "0x%04x", pr.vendorID);
    snprintf(info->driver, sizeof info->driver, "Vulkan %u.%u.%u, driver version 0x%x",
             VK_VERSION_MAJOR(pr.apiVersion), VK_VERSION_MINOR(pr.apiVersion), VK_VERSION_PATCH(pr.apiVersion),
             pr.driverVersion);
}

static kvs_status vk_device_describe(int index, kvs_device_info *info) {
    VkInstance inst;
    KVS_TRY(vk_instance(&inst, 0, NULL));
    VkPhysicalDevice pd;
    int n;
    kvs_status s = vk_physical(inst, index, &pd, &n);
    if (s == KVS_OK) vk_fill_info(pd, info);
    vkDestroyInstance(inst, NULL);
    return s;
}

/* ---- memory --------------------------------------------------------------------------------- */

static int vk_find_type(const kvs_vk *v, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) {
    for (uint32_t i = 0; i < v->memprops.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = v->memprops.memoryTypes[i].propertyFlags;
        if ((bits & (1u << i)) && (f & want) == want && !(f & avoid)) return (int)i;
    }
    return -1;
}

static kvs_status vk_block_new(kvs_vk *v, int host, VkDeviceSize size, int dedicated, kvs_vk_block **out) {
    kvs_vk_block *b = calloc(1, sizeof *b);
    if (!b) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(v->device, &bi, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return vk_fail(r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(v->device, b->buf, &req);
    int type = host ? v->mt_host : v->mt_device;
    if (!(req.memoryTypeBits & (1u << type))) {
        vkDestroyBuffer(v->device, b->buf, NULL);
        free(b);
        return kvs_error(KVS_ERR_BACKEND, "vulkan: buffer cannot live in memory type %d", type);
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                               .memoryTypeIndex = (uint32_t)type};
    r = vkAllocateMemory(v->device, &ai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(v->device, b->buf, NULL);
        free(b);
        if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: cannot allocate a %llu-byte memory block",
                             (unsigned long long)size);
        return vk_fail(r, "vkAllocateMemory");
    }
    vkBindBufferMemory(v->device, b->buf, b->mem, 0);
    if (host || v->device_mapped) {
        r = vkMapMemory(v->device, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
        if (r != VK_SUCCESS) {
            vkDestroyBuffer(v->device, b->buf, NULL);
            vkFreeMemory(v->device, b->mem, NULL);
            free(b);
            return vk_fail(r, "vkMapMemory");
        }
    }
    b->size = size;
    b->dedicated = dedicated;
    b->cap_free = 16;
    b->free_off = malloc(16 * sizeof *b->free_off);
    b->free_len = malloc(16 * sizeof *b->free_len);
    if (!b->free_off || !b->free_len) {
        free(b->free_off);
        free(b->free_len);
        vkDestroyBuffer(v->device, b->buf, NULL);
        vkFreeMemory(v->device, b->mem, NULL);
        free(b);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    }
    b->n_free = 1;
    b->free_off[0] = 0;
    b->free_len[0] = size;
    kvs_vk_block **head = host ? &v->blocks_host : &v->blocks_dev;
    b->next = *head;
    *head = b;
    *out = b;
    return KVS_OK;
}

static void vk_block_destroy(kvs_vk *v, kvs_vk_block *b) {
    if (b->map) vkUnmapMemory(v->device, b->mem);
    vkDestroyBuffer(v->device, b->buf, NULL);
    vkFreeMemory(v->device, b->mem, NULL);
    free(b->free_off);
    free(b->free_len);
    free(b);
}

static int vk_block_take(kvs_vk_block *b, VkDeviceSize n, VkDeviceSize *off) {
    for (int i = 0; i < b->n_free; i++) {
        if (b->free_len[i] >= n) {
            *off = b->free_off[i];
            b->free_off[i] += n;
            b->free_len[i] -= n;
            if (b->free_len[i] == 0) {
                memmove(b->free_off + i, b->free_off + i + 1, (size_t)(b->n_free - i - 1) * sizeof *b->free_off);
                memmove(b->free_len + i, b->free_len + i + 1, (size_t)(b->n_free - i - 1) * sizeof *b->free_len);
                b->n_free--;
            }
            return 1;
        }
    }
    return 0;
}

static void vk_block_give(kvs_vk_block *b, VkDeviceSize off, VkDeviceSize n) {
    int i = 0;
    while (i < b->n_free && b->free_off[i] < off) i++;
    /* merge with previous / next */
    int merged = 0;
    if (i > 0 && b->free_off[i - 1] + b->free_len[i - 1] == off) {
        b->free_len[i - 1] += n;
        merged = 1;
        if (i < b->n_free && b->free_off[i - 1] + b->free_len[i - 1] == b->free_off[i]) {
            b->free_len[i - 1] += b->free_len[i];
            memmove(b->free_off + i, b->free_off + i + 1, (size_t)(b->n_free - i - 1) * sizeof *b->free_off);
            memmove(b->free_len + i, b->free_len + i + 1, (size_t)(b->n_free - i - 1) * sizeof *b->free_len);
            b->n_free--;
        }
    } else if (i < b->n_free && off + n == b->free_off[i]) {
        b->free_off[i] = off;
        b->free_len[i] += n;
        merged = 1;
    }
    if (merged) return;
    if (b->n_free == b->cap_free) {
        int cap = b->cap_free * 2;
        VkDeviceSize *o = realloc(b->free_off, (size_t)cap * sizeof *o);
        if (o) b->free_off = o;
        VkDeviceSize *l = realloc(b->free_len, (size_t)cap * sizeof *l);
        if (l) b->free_len = l;
        if (!o || !l) return; /* leak the range rather than corrupt the list */
        b->cap_free = cap;
    }
    memmove(b->free_off + i + 1, b->free_off + i, (size_t)(b->n_free - i) * sizeof *b->free_off);
    memmove(b->free_len + i + 1, b->free_len + i, (size_t)(b->n_free - i) * sizeof *b->free_len);
    b->free_off[i] = off;
    b->free_len[i] = n;
    b->n_free++;
}

static kvs_status vk_alloc(kvs_vk *v, int host, VkDeviceSize nbytes, kvs_vk_alloc **out) {
    VkDeviceSize n = align_up(nbytes ? nbytes : 4, v->align);
    if (n > v->max_alloc)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY,
                         "vulkan: %llu bytes exceed the device's largest allocation (maxMemoryAllocationSize %llu bytes)",
                         (unsigned long long)nbytes, (unsigned long long)v->max_alloc);
    kvs_vk_alloc *a = calloc(1, sizeof *a);
    if (!a) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    VkDeviceSize off = 0;
    kvs_vk_block *b = host ? v->blocks_host : v->blocks_dev;
    for (; b; b = b->next)
        if (!b->dedicated && vk_block_take(b, n, &off)) break;
    if (!b) {
        int dedicated = n > v->block_size;
        kvs_status s = vk_block_new(v, host, dedicated ? n : v->block_size, dedicated, &b);
        if (s != KVS_OK) {
            free(a);
            return s;
        }
        vk_block_take(b, n, &off);
    }
    a->block = b;
    a->offset = off;
    a->size = n;
    *out = a;
    return KVS_OK;
}

static void vk_free(kvs_vk *v, kvs_vk_alloc *a) {
    if (!a) return;
    kvs_vk_block *b = a->block;
    vk_block_give(b, a->offset, a->size);
    if (b->n_free == 1 && b->free_len[0] == b->size) {
        /* release empty blocks (keep one standard device block around for reuse) */
        kvs_vk_block **head = b->map && !v->device_mapped ? &v->blocks_host : &v->blocks_dev;
        if (v->device_mapped && b->map) {
            /* unified: both lists hold mapped blocks; find the right one */
            head = &v->blocks_dev;
            kvs_vk_block *it = *head;
            while (it && it != b) it = it->next;
            if (!it) head = &v->blocks_host;
        }
        int keep = !b->dedicated && *head == b && b->next == NULL;
        if (!keep) {
            kvs_vk_block **pp = head;
            while (*pp && *pp != b) pp = &(*pp)->next;
            if (*pp) {
                *pp = b->next;
                vk_block_destroy(v, b);
            }
        }
    }
    free(a);
}

/* ---- command recording ---------------------------------------------------------------------- */

static kvs_status vk_begin(kvs_vk *v) {
    if (v->recording) return KVS_OK;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VKC(vkBeginCommandBuffer(v->cmd, &bi), "vkBeginCommandBuffer");
    v->recording = 1;
    v->n_cmds = 0;
    v->n_acc = 0;
    return KVS_OK;
}

static void vk_barrier(kvs_vk *v) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                           VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(v->cmd, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
    v->n_acc = 0;
}

/* Inserts a barrier if any access conflicts with an unbarriered earlier one, then records them. */
static void vk_track(kvs_vk *v, const kvs_vk_access *acc, int n) {
    int conflict = 0;
    for (int i = 0; i < n && !conflict; i++)
        for (int j = 0; j < v->n_acc; j++) {
            const kvs_vk_access *o = &v->acc[j];
            if (o->buf == acc[i].buf && o->lo < acc[i].hi && acc[i].lo < o->hi && (o->write || acc[i].write)) {
                conflict = 1;
                break;
            }
        }
    if (conflict || v->n_acc + n > v->cap_acc) vk_barrier(v);
    for (int i = 0; i < n && v->n_acc < v->cap_acc; i++) v->acc[v->n_acc++] = acc[i];
}

static void vk_free(kvs_vk *v, kvs_vk_alloc *a);

static void vk_reset_frame(kvs_vk *v) {
    /* allocations freed while commands were pending can be reused now */
    for (int i = 0; i < v->n_deferred; i++) vk_free(v, v->deferred[i]);
    v->n_deferred = 0;
    v->scratch.used = 0;
    v->staging.used = 0;
    for (int i = 0; i < v->n_pools; i++) vkResetDescriptorPool(v->device, v->pools[i], 0);
    v->cur_pool = 0;
}

kvs_status kvs_vk_flush(kvs_vk *v) {
    if (!v->recording) {
        vk_reset_frame(v);
        return KVS_OK;
    }
    /* make all writes visible to the host after the fence */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(v->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    v->recording = 0;
    VKC(vkEndCommandBuffer(v->cmd), "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &v->cmd};
    VKC(vkResetFences(v->device, 1, &v->fence), "vkResetFences");
    VKC(vkQueueSubmit(v->queue, 1, &si, v->fence), "vkQueueSubmit");
    VKC(vkWaitForFences(v->device, 1, &v->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    VKC(vkResetCommandBuffer(v->cmd, 0), "vkResetCommandBuffer");
    vk_reset_frame(v);
    return KVS_OK;
}

static kvs_status vk_maybe_flush(kvs_vk *v) {
    if (v->recording && v->n_cmds >= VK_MAX_CMDS) return kvs_vk_flush(v);
    return KVS_OK;
}

kvs_status kvs_vk_copy_buffer(kvs_vk *v, VkBuffer src, VkDeviceSize so, VkBuffer dst, VkDeviceSize dso, VkDeviceSize n) {
    if (!n) return KVS_OK;
    KVS_TRY(vk_begin(v));
    kvs_vk_access acc[2] = {{src, so, so + n, 0}, {dst, dso, dso + n, 1}};
    vk_track(v, acc, 2);
    VkBufferCopy r = {.srcOffset = so, .dstOffset = dso, .size = n};
    vkCmdCopyBuffer(v->cmd, src, dst, 1, &r);
    v->n_cmds++;
    return KVS_OK;
}

kvs_status kvs_vk_fill(kvs_vk *v, VkBuffer dst, VkDeviceSize off, VkDeviceSize n, uint32_t word) {
    if (!n) return KVS_OK;
    KVS_TRY(vk_begin(v));
    kvs_vk_access acc = {dst, off, off + n, 1};
    vk_track(v, &acc, 1);
    vkCmdFillBuffer(v->cmd, dst, off, n, word);
    v->n_cmds++;
    return KVS_OK;
}

/* ---- arenas --------------------------------------------------------------------------------- */

static kvs_status vk_arena_take(kvs_vk *v, kvs_vk_arena *ar, int host, VkDeviceSize n, VkDeviceSize def,
                                kvs_vk_alloc **a, VkDeviceSize *off) {
    n = align_up(n ? n : 4, v->align);
    if (!ar->a || ar->used + n > ar->a->size) {
        if (ar->used > 0) KVS_TRY(kvs_vk_flush(v)); /* frees the arena for reuse */
        if (!ar->a || n > ar->a->size) {
            if (ar->a) vk_free(v, ar->a);
            ar->a = NULL;
            VkDeviceSize want = n > def ? n : def;
            if (want > v->max_alloc) want = n;
            KVS_TRY(vk_alloc(v, host, want, &ar->a));
        }
    }
    *a = ar->a;
    *off = ar->a->offset + ar->used;
    ar->used += n;
    return KVS_OK;
}

static kvs_status vk_arena_grow(kvs_vk *v, kvs_vk_arena *ar, int host, VkDeviceSize n, VkDeviceSize def) {
    if (ar->a && n <= ar->a->size) return KVS_OK;
    if (ar->a) vk_free(v, ar->a);
    ar->a = NULL;
    VkDeviceSize want = n > def ? n : def;
    if (want > v->max_alloc) want = n;
    return vk_alloc(v, host, want, &ar->a);
}

kvs_status kvs_vk_reserve(kvs_vk *v, VkDeviceSize scratch, VkDeviceSize stage) {
    if (scratch) scratch = align_up(scratch, v->align) + 8 * v->align;
    if (stage) stage = align_up(stage, v->align) + 8 * v->align;
    int fit_s = !scratch || (v->scratch.a && v->scratch.used + scratch <= v->scratch.a->size);
    int fit_t = !stage || (v->staging.a && v->staging.used + stage <= v->staging.a->size);
    if (fit_s && fit_t) return KVS_OK;
    KVS_TRY(kvs_vk_flush(v));
    if (scratch) KVS_TRY(vk_arena_grow(v, &v->scratch, 0, scratch, v->block_size / 2));
    if (stage) KVS_TRY(vk_arena_grow(v, &v->staging, 1, stage, VK_STAGING_DEFAULT));
    return KVS_OK;
}

kvs_status kvs_vk_scratch(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off) {
    return vk_arena_take(v, &v->scratch, 0, n, v->block_size / 2, a, off);
}

kvs_status kvs_vk_stage(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off, void **host) {
    KVS_TRY(vk_arena_take(v, &v->staging, 1, n, VK_STAGING_DEFAULT, a, off));
    *host = (char *)(*a)->block->map + *off;
    return KVS_OK;
}

/* ---- pipelines and dispatch ----------------------------------------------------------------- */

static int vk_shader_index(const char *name) {
    for (int i = 0; kvs_vk_shader_table[i].name; i++)
        if (strcmp(kvs_vk_shader_table[i].name, name) == 0) return i;
    return -1;
}

static kvs_status vk_pipeline(kvs_vk *v, const char *name, const uint32_t *spec, int n_spec, VkPipeline *out) {
    int si = vk_shader_index(name);
    if (si < 0) return kvs_error(KVS_ERR_INTERNAL, "vulkan: no shader named '%s'", name);
    for (int i = 0; i < v->n_pipes; i++) {
        kvs_vk_pipeline *p = &v->pipes[i];
        if (p->shader == si && p->n_spec == n_spec && memcmp(p->spec, spec, (size_t)n_spec * 4) == 0) {
            *out = p->pipe;
            return KVS_OK;
        }
    }
    if (!v->modules[si]) {
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = kvs_vk_shader_table[si].size,
                                       .pCode = kvs_vk_shader_table[si].code};
        VKC(vkCreateShaderModule(v->device, &mi, NULL, &v->modules[si]), "vkCreateShaderModule");
    }
    VkSpecializationMapEntry me[KVS_VK_MAX_SPEC];
    for (int i = 0; i < n_spec; i++) {
        me[i].constantID = (uint32_t)i;
        me[i].offset = (uint32_t)i * 4;
        me[i].size = 4;
    }
    VkSpecializationInfo spi = {.mapEntryCount = (uint32_t)n_spec, .pMapEntries = me,
                                .dataSize = (size_t)n_spec * 4, .pData = spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = v->modules[si], .pName = "main", .pSpecializationInfo = n_spec ? &spi : NULL},
        .layout = v->playout};
    VkPipeline pipe;
    VkResult r = vkCreateComputePipelines(v->device, v->pcache, 1, &ci, NULL, &pipe);
    if (r != VK_SUCCESS) return kvs_error(KVS_ERR_COMPILE, "vulkan: pipeline for shader '%s' failed (VkResult %d)", name, (int)r);
    if (v->n_pipes == v->cap_pipes) {
        int cap = v->cap_pipes ? v->cap_pipes * 2 : 32;
        kvs_vk_pipeline *np = realloc(v->pipes, (size_t)cap * sizeof *np);
        if (!np) {
            vkDestroyPipeline(v->device, pipe, NULL);
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
        }
        v->pipes = np;
        v->cap_pipes = cap;
    }
    kvs_vk_pipeline *p = &v->pipes[v->n_pipes++];
    memset(p, 0, sizeof *p);
    p->shader = si;
    p->n_spec = n_spec;
    memcpy(p->spec, spec, (size_t)n_spec * 4);
    p->pipe = pipe;
    *out = pipe;
    return KVS_OK;
}

static kvs_status vk_new_pool(kvs_vk *v) {
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = VK_POOL_SETS * KVS_VK_BINDINGS};
    VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = VK_POOL_SETS,
                                     .poolSizeCount = 1, .pPoolSizes = &ps};
    VkDescriptorPool *np = realloc(v->pools, (size_t)(v->n_pools + 1) * sizeof *np);
    if (!np) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    v->pools = np;
    VKC(vkCreateDescriptorPool(v->device, &ci, NULL, &v->pools[v->n_pools]), "vkCreateDescriptorPool");
    v->n_pools++;
    return KVS_OK;
}

static kvs_status vk_descriptor_set(kvs_vk *v, VkDescriptorSet *out) {
    for (;;) {
        if (v->cur_pool >= v->n_pools) KVS_TRY(vk_new_pool(v));
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = v->pools[v->cur_pool], .descriptorSetCount = 1,
                                          .pSetLayouts = &v->dsl};
        VkResult r = vkAllocateDescriptorSets(v->device, &ai, out);
        if (r == VK_SUCCESS) return KVS_OK;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) return vk_fail(r, "vkAllocateDescriptorSets");
        v->cur_pool++;
    }
}

kvs_status kvs_vk_bind_alloc(kvs_vk *v, const kvs_vk_alloc *a, VkDeviceSize off, VkDeviceSize size, int write,
                             uint32_t unit, kvs_vk_arg *arg, uint32_t *unit_off, const char *op) {
    VkDeviceSize abs = off; /* offset within the block's VkBuffer */
    VkDeviceSize base = abs / v->align * v->align;
    VkDeviceSize range = abs + size - base;
    if (range > v->props.limits.maxStorageBufferRange)
        return kvs_error(KVS_ERR_UNSUPPORTED,
                         "%s: a tensor of %llu bytes exceeds this device's maxStorageBufferRange (%u bytes); "
                         "split it into smaller tensors",
                         op, (unsigned long long)size, v->props.limits.maxStorageBufferRange);
    arg->buf = a->block->buf;
    arg->off = base;
    arg->size = align_up(range, 4);
    if (base + arg->size > a->block->size) arg->size = a->block->size - base;
    arg->write = write;
    if (unit_off) *unit_off = (uint32_t)((abs - base) / unit);
    return KVS_OK;
}

kvs_status kvs_vk_bind(kvs_vk *v, const kvs_tensor *t, int write, uint32_t unit, kvs_vk_arg *arg, uint32_t *unit_off,
                       const char *op) {
    const kvs_vk_alloc *a = kvs_vk_alloc_of(t);
    return kvs_vk_bind_alloc(v, a, a->offset + t->offset, t->nbytes, write, unit, arg, unit_off, op);
}

kvs_status kvs_vk_dispatch(kvs_vk *v, const char *name, const uint32_t *spec, int n_spec, const kvs_vk_arg *args,
                           int n_args, const void *pc, uint32_t pc_bytes, uint64_t groups, const char *op) {
    if (groups == 0) return KVS_OK;
    KVS_TRY(kvs_vk_check(v, op));
    VkPipeline pipe = VK_NULL_HANDLE;
    KVS_TRY(vk_pipeline(v, name, spec, n_spec, &pipe));
    KVS_TRY(vk_begin(v));
    VkDescriptorSet set;
    KVS_TRY(vk_descriptor_set(v, &set));
    VkDescriptorBufferInfo bi[KVS_VK_BINDINGS];
    VkWriteDescriptorSet w[KVS_VK_BINDINGS];
    kvs_vk_access acc[KVS_VK_BINDINGS];
    for (int i = 0; i < KVS_VK_BINDINGS; i++) {
        if (i < n_args) {
            bi[i].buffer = args[i].buf;
            bi[i].offset = args[i].off;
            bi[i].range = args[i].size;
            acc[i].buf = args[i].buf;
            acc[i].lo = args[i].off;
            acc[i].hi = args[i].off + args[i].size;
            acc[i].write = args[i].write;
        } else {
            bi[i].buffer = v->dummy->block->buf;
            bi[i].offset = v->dummy->offset;
            bi[i].range = 16;
        }
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                      .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(v->device, KVS_VK_BINDINGS, w, 0, NULL);
    vk_track(v, acc, n_args);
    vkCmdBindPipeline(v->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(v->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, v->playout, 0, 1, &set, 0, NULL);
    if (pc_bytes) vkCmdPushConstants(v->cmd, v->playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes, pc);
    uint64_t gx = groups < v->max_groups[0] ? groups : v->max_groups[0];
    uint64_t gy = (groups + gx - 1) / gx;
    if (gy > v->max_groups[1])
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %llu workgroups exceed the device's dispatch limits", op,
                         (unsigned long long)groups);
    vkCmdDispatch(v->cmd, (uint32_t)gx, (uint32_t)gy, 1);
    v->n_cmds++;
    return KVS_OK;
}

/* ---- device --------------------------------------------------------------------------------- */

static void vk_device_close(kvs_device *dev) {
    kvs_vk *v = dev->impl;
    if (!v) return;
    if (v->device) {
        if (v->recording) kvs_vk_flush(v);
        vkDeviceWaitIdle(v->device);
        for (int i = 0; i < v->n_deferred; i++) vk_free(v, v->deferred[i]);
        v->n_deferred = 0;
        if (v->scratch.a) vk_free(v, v->scratch.a);
        if (v->staging.a) vk_free(v, v->staging.a);
        if (v->dummy) vk_free(v, v->dummy);
        for (int i = 0; i < v->n_pipes; i++) vkDestroyPipeline(v->device, v->pipes[i].pipe, NULL);
        for (int i = 0; i < v->n_shaders; i++)
            if (v->modules && v->modules[i]) vkDestroyShaderModule(v->device, v->modules[i], NULL);
        for (int i = 0; i < v->n_pools; i++) vkDestroyDescriptorPool(v->device, v->pools[i], NULL);
        if (v->pcache) vkDestroyPipelineCache(v->device, v->pcache, NULL);
        if (v->playout) vkDestroyPipelineLayout(v->device, v->playout, NULL);
        if (v->dsl) vkDestroyDescriptorSetLayout(v->device, v->dsl, NULL);
        if (v->fence) vkDestroyFence(v->device, v->fence, NULL);
        if (v->cmdpool) vkDestroyCommandPool(v->device, v->cmdpool, NULL);
        kvs_vk_block *lists[2] = {v->blocks_dev, v->blocks_host};
        for (int l = 0; l < 2; l++)
            for (kvs_vk_block *b = lists[l]; b;) {
                kvs_vk_block *n = b->next;
                vk_block_destroy(v, b);
                b = n;
            }
        vkDestroyDevice(v->device, NULL);
    }
    if (v->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT f =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(v->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (f) f(v->instance, v->messenger, NULL);
    }
    if (v->instance) vkDestroyInstance(v->instance, NULL);
    free(v->modules);
    free(v->pipes);
    free(v->pools);
    free(v->acc);
    free(v->deferred);
    free(v);
    dev->impl = NULL;
}

static kvs_status vk_open_device(kvs_vk *v) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, NULL);
    VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
    if (!qf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, qf);
    int fam = -1;
    for (uint32_t i = 0; i < nq && fam < 0; i++) /* prefer a compute queue without graphics */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) fam = (int)i;
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    free(qf);
    if (fam < 0) return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: device '%s' has no compute queue", v->props.deviceName);
    v->queue_family = (uint32_t)fam;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = (uint32_t)fam,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi};
    VKC(vkCreateDevice(v->phys, &di, NULL, &v->device), "vkCreateDevice");
    vkGetDeviceQueue(v->device, (uint32_t)fam, 0, &v->queue);
    return KVS_OK;
}

static kvs_status vk_setup(kvs_device *dev, kvs_vk *v, const kvs_device_params *p) {
    v->validation = vk_validation_wanted(p);
    KVS_TRY(vk_instance(&v->instance, v->validation, v));
    if (v->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT f =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(v->instance, "vkCreateDebugUtilsMessengerEXT");
        if (!f) return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: validation requested but VK_EXT_debug_utils is missing");
        VkDebugUtilsMessengerCreateInfoEXT dci = vk_messenger_info(v);
        VKC(f(v->instance, &dci, NULL, &v->messenger), "vkCreateDebugUtilsMessengerEXT");
    }
    int n;
    KVS_TRY(vk_physical(v->instance, p->index, &v->phys, &n));
    vk_fill_info(v->phys, &dev->info);
    vkGetPhysicalDeviceProperties(v->phys, &v->props);
    vkGetPhysicalDeviceMemoryProperties(v->phys, &v->memprops);
    v->api_version = v->props.apiVersion;
    if (v->api_version < VK_API_VERSION_1_1)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: device '%s' supports only Vulkan %u.%u (1.1 required)",
                         v->props.deviceName, VK_VERSION_MAJOR(v->api_version), VK_VERSION_MINOR(v->api_version));
    if (v->props.limits.maxPerStageDescriptorStorageBuffers < KVS_VK_BINDINGS)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: device '%s' allows %u storage buffers per stage, kvsieve needs %d",
                         v->props.deviceName, v->props.limits.maxPerStageDescriptorStorageBuffers, KVS_VK_BINDINGS);

    KVS_TRY(vk_open_device(v));
    /* capabilities */
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                 .pNext = &sg};
    VkPhysicalDeviceProperties2 pr2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vkGetPhysicalDeviceProperties2(v->phys, &pr2);
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16i8 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .pNext = &s16};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = v->api_version >= VK_API_VERSION_1_2 ? (void *)&f16i8 : (void *)&s16};
    vkGetPhysicalDeviceFeatures2(v->phys, &f2);

    kvs_caps *c = &dev->caps;
    memset(c, 0, sizeof *c);
    /* f16/bf16 tensors are read and written by every shader through packed 32-bit words
     * (unpackHalf2x16 / bit shifts), which every Vulkan 1.1 device supports. */
    c->fp16_storage = 1;
    c->bf16_storage = 1;
    c->fp16_arith = f16i8.shaderFloat16 ? 1 : 0;
    c->int8_arith = f16i8.shaderInt8 ? 1 : 0;
    int sg_compute = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    c->subgroup_size = sg_compute ? (int)sg.subgroupSize : 0;
    VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT |
                                  VK_SUBGROUP_FEATURE_BALLOT_BIT;
    c->subgroup_ops = sg_compute && (sg.supportedOperations & need) == need;
    c->shared_mem_bytes = v->props.limits.maxComputeSharedMemorySize;
    c->max_workgroup_size = (int)v->props.limits.maxComputeWorkGroupInvocations;
    c->max_binding_bytes = v->props.limits.maxStorageBufferRange;
    c->compute_units = 0;

    /* memory types */
    int unified = v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                  v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 4096,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer probe;
    VKC(vkCreateBuffer(v->device, &bi, NULL, &probe), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(v->device, probe, &req);
    vkDestroyBuffer(v->device, probe, NULL);
    const VkMemoryPropertyFlags HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    v->mt_device = -1;
    /* KVS_VULKAN_FORCE_STAGING=1 (a testing aid) takes the discrete-GPU path on unified devices too:
     * tensors unmapped, every transfer through the staging arena. */
    const char *fs = getenv("KVS_VULKAN_FORCE_STAGING");
    int force_staging = fs && fs[0] == '1';
    if (unified && !force_staging)
        v->mt_device = vk_find_type(v, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | HV, 0);
    v->device_mapped = v->mt_device >= 0;
    if (v->mt_device < 0) v->mt_device = vk_find_type(v, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (v->mt_device < 0) v->mt_device = vk_find_type(v, req.memoryTypeBits, 0, 0);
    v->mt_host = vk_find_type(v, req.memoryTypeBits, HV | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
    if (v->mt_host < 0) v->mt_host = vk_find_type(v, req.memoryTypeBits, HV, 0);
    if (v->mt_device < 0 || v->mt_host < 0)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: no usable memory types for storage buffers");
    VkDeviceSize heap = v->memprops.memoryHeaps[v->memprops.memoryTypes[v->mt_device].heapIndex].size;
    v->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : heap;
    if (v->max_alloc > heap) v->max_alloc = heap;
    v->block_size = VK_BLOCK_DEFAULT;
    if (v->block_size > v->max_alloc) v->block_size = v->max_alloc;
    if (v->block_size > heap / 4) v->block_size = heap / 4;
    v->align = v->props.limits.minStorageBufferOffsetAlignment;
    if (v->align < 16) v->align = 16;
    if (v->align < req.alignment) v->align = req.alignment;
    c->max_buffer_bytes = (int64_t)v->max_alloc - (int64_t)v->align;
    c->total_memory_bytes = (int64_t)heap;
    c->unified_memory = unified;
    for (int i = 0; i < 3; i++) v->max_groups[i] = v->props.limits.maxComputeWorkGroupCount[i];

    /* command recording, descriptors, pipelines */
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = v->queue_family};
    VKC(vkCreateCommandPool(v->device, &cpi, NULL, &v->cmdpool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = v->cmdpool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VKC(vkAllocateCommandBuffers(v->device, &cai, &v->cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VKC(vkCreateFence(v->device, &fi, NULL, &v->fence), "vkCreateFence");
    VkDescriptorSetLayoutBinding lb[KVS_VK_BINDINGS];
    for (int i = 0; i < KVS_VK_BINDINGS; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = KVS_VK_BINDINGS, .pBindings = lb};
    VKC(vkCreateDescriptorSetLayout(v->device, &li, NULL, &v->dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = KVS_VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &v->dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    VKC(vkCreatePipelineLayout(v->device, &pli, NULL, &v->playout), "vkCreatePipelineLayout");
    VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    VKC(vkCreatePipelineCache(v->device, &pci, NULL, &v->pcache), "vkCreatePipelineCache");
    while (kvs_vk_shader_table[v->n_shaders].name) v->n_shaders++;
    v->modules = calloc((size_t)v->n_shaders + 1, sizeof *v->modules);
    v->cap_acc = 512;
    v->acc = calloc((size_t)v->cap_acc, sizeof *v->acc);
    if (!v->modules || !v->acc) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    KVS_TRY(vk_alloc(v, 0, 256, &v->dummy));
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
    KVS_TRY(vk_alloc(v, 0, nbytes, &a));
    *handle = a;
    return KVS_OK;
}

static void vk_buffer_free(kvs_device *dev, void *handle) {
    kvs_vk *v = dev->impl;
    /* pending commands may still use the memory: release it after they complete */
    if (v->recording) {
        if (v->n_deferred == v->cap_deferred) {
            int cap = v->cap_deferred ? 2 * v->cap_deferred : 64;
            kvs_vk_alloc **nd = realloc(v->deferred, (size_t)cap * sizeof *nd);
            if (!nd) {
                kvs_vk_flush(v);
                vk_free(v, handle);
                return;
            }
            v->deferred = nd;
            v->cap_deferred = cap;
        }
        v->deferred[v->n_deferred++] = handle;
        return;
    }
    vk_free(v, handle);
}

static kvs_status vk_upload(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n) {
    kvs_vk *v = dev->impl;
    kvs_vk_alloc *a = handle;
    KVS_TRY(kvs_vk_check(v, "kvs_tensor_upload"));
    VkDeviceSize abs = a->offset + offset;
    if (v->device_mapped && !v->recording) {
        memcpy((char *)a->block->map + abs, src, n);
        return KVS_OK;
    }
    /* recorded copy from staging: ordered after earlier ops, src reusable on return */
    const char *s = src;
    while (n) {
        size_t chunk = n < VK_STAGING_DEFAULT ? n : (size_t)VK_STAGING_DEFAULT;
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
    KVS_TRY(kvs_vk_flush(v));
    KVS_TRY(kvs_vk_check(v, "kvs_tensor_download"));
    VkDeviceSize abs = a->offset + offset;
    if (a->block->map) {
        memcpy(dst, (const char *)a->block->map + abs, n);
        return KVS_OK;
    }
    char *d = dst;
    while (n) {
        size_t chunk = n < VK_STAGING_DEFAULT ? n : (size_t)VK_STAGING_DEFAULT;
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
    KVS_OP_TABLE_ENTRIES(kvs_vk_)
};
