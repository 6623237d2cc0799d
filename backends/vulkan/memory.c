/* Vulkan backend memory: tensors are sub-ranges of large blocks (block_size, default 256 MiB or less
 * if the device limits allocations), first-fit with coalescing free lists; one VkBuffer spans each
 * block. Unified-memory devices (integrated GPUs, CPU implementations such as lavapipe) use
 * host-visible device memory for tensors, so transfers can copy directly when no work is pending.
 *
 * Two linear arenas live for one submission each: scratch (device-local: top-k state, split-K
 * partials, dwt levels, ...) and staging (host-visible: uploads, small host tables, downloads);
 * kvs_vk_flush resets both once the submitted work has completed.
 *
 * Per-op reservations. A take that does not fit could submit the pending work and so empty the
 * arena, but not inside an op: the op's earlier takes are still to be read
 * by commands it has recorded or will record, and after the reset its later takes get the same
 * memory (split-K partials overwritten before attn_combine reads them). So every op reserves what
 * it will take (kvs_vk_reserve, which may flush: nothing of the op is recorded yet), and inside an
 * op a take beyond the reservation is KVS_ERR_INTERNAL, a bug in that op's reservation, never a
 * silent reset. Transfers (upload, download) are not ops: their takes may still flush. */
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

#define VK_BLOCK_DEFAULT ((VkDeviceSize)256 << 20)

static VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

/* ---- memory types ---------------------------------------------------------------------------- */

static int vk_find_type(const kvs_vk *v, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) {
    for (uint32_t i = 0; i < v->memprops.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = v->memprops.memoryTypes[i].propertyFlags;
        if ((bits & (1u << i)) && (f & want) == want && !(f & avoid)) return (int)i;
    }
    return -1;
}

kvs_status kvs_vk_memory_init(kvs_device *dev, kvs_vk *v) {
    kvs_caps *c = &dev->caps;
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 pr2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vkGetPhysicalDeviceProperties2(v->phys, &pr2);
    int unified = v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                  v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 4096,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer probe;
    KVS_VKC(vkCreateBuffer(v->device, &bi, NULL, &probe), "vkCreateBuffer");
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
    return KVS_OK;
}

/* ---- blocks ---------------------------------------------------------------------------------- */

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
        return kvs_vk_fail(r, "vkCreateBuffer");
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
        return kvs_vk_fail(r, "vkAllocateMemory");
    }
    vkBindBufferMemory(v->device, b->buf, b->mem, 0);
    if (host || v->device_mapped) {
        r = vkMapMemory(v->device, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
        if (r != VK_SUCCESS) {
            vkDestroyBuffer(v->device, b->buf, NULL);
            vkFreeMemory(v->device, b->mem, NULL);
            free(b);
            return kvs_vk_fail(r, "vkMapMemory");
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

kvs_status kvs_vk_alloc_mem(kvs_vk *v, int host, VkDeviceSize nbytes, kvs_vk_alloc **out) {
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

void kvs_vk_free_mem(kvs_vk *v, kvs_vk_alloc *a) {
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

void kvs_vk_memory_destroy(kvs_vk *v) {
    if (v->scratch.a) kvs_vk_free_mem(v, v->scratch.a);
    if (v->staging.a) kvs_vk_free_mem(v, v->staging.a);
    if (v->dummy) kvs_vk_free_mem(v, v->dummy);
    v->scratch.a = v->staging.a = v->dummy = NULL;
    kvs_vk_block *lists[2] = {v->blocks_dev, v->blocks_host};
    for (int l = 0; l < 2; l++)
        for (kvs_vk_block *b = lists[l]; b;) {
            kvs_vk_block *n = b->next;
            vk_block_destroy(v, b);
            b = n;
        }
    v->blocks_dev = v->blocks_host = NULL;
}

/* ---- arenas and per-op reservations ---------------------------------------------------------- */

static kvs_status vk_arena_take(kvs_vk *v, kvs_vk_arena *ar, int host, VkDeviceSize n, VkDeviceSize def,
                                kvs_vk_alloc **a, VkDeviceSize *off) {
    n = align_up(n ? n : 4, v->align);
    if (v->op) {
        if (!ar->a || ar->used + n > ar->limit) {
            VkDeviceSize left = ar->a && ar->limit > ar->used ? ar->limit - ar->used : 0;
            return kvs_error(KVS_ERR_INTERNAL,
                             "%s: takes %llu bytes of Vulkan %s memory with %llu bytes left of what it reserved; "
                             "refused, since a flush here would reset memory its recorded commands still use "
                             "(the op's kvs_vk_reserve is too small)",
                             v->op, (unsigned long long)n, host ? "staging" : "scratch", (unsigned long long)left);
        }
        v->op_took = 1;
    } else if (!ar->a || ar->used + n > ar->a->size) {
        if (ar->used > 0) KVS_TRY(kvs_vk_flush(v)); /* frees the arena for reuse */
        if (!ar->a || n > ar->a->size) {
            if (ar->a) kvs_vk_free_mem(v, ar->a);
            ar->a = NULL;
            VkDeviceSize want = n > def ? n : def;
            if (want > v->max_alloc) want = n;
            KVS_TRY(kvs_vk_alloc_mem(v, host, want, &ar->a));
        }
    }
    *a = ar->a;
    *off = ar->a->offset + ar->used;
    ar->used += n;
    return KVS_OK;
}

static kvs_status vk_arena_grow(kvs_vk *v, kvs_vk_arena *ar, int host, VkDeviceSize n, VkDeviceSize def) {
    if (ar->a && n <= ar->a->size) return KVS_OK;
    if (ar->a) kvs_vk_free_mem(v, ar->a);
    ar->a = NULL;
    VkDeviceSize want = n > def ? n : def;
    if (want > v->max_alloc) want = n;
    return kvs_vk_alloc_mem(v, host, want, &ar->a);
}

kvs_status kvs_vk_reserve(kvs_vk *v, VkDeviceSize scratch, VkDeviceSize stage) {
    if (v->op && v->op_took)
        return kvs_error(KVS_ERR_INTERNAL,
                         "%s: reserves Vulkan scratch/staging memory after taking some; refused, since its flush "
                         "could reset what it took (reserve once, before the first take)",
                         v->op);
    if (scratch) scratch = align_up(scratch, v->align) + 8 * v->align;
    if (stage) stage = align_up(stage, v->align) + 8 * v->align;
    int fit_s = !scratch || (v->scratch.a && v->scratch.used + scratch <= v->scratch.a->size);
    int fit_t = !stage || (v->staging.a && v->staging.used + stage <= v->staging.a->size);
    if (!fit_s || !fit_t) {
        KVS_TRY(kvs_vk_flush(v));
        if (scratch) KVS_TRY(vk_arena_grow(v, &v->scratch, 0, scratch, v->block_size / 2));
        if (stage) KVS_TRY(vk_arena_grow(v, &v->staging, 1, stage, KVS_VK_STAGING_DEFAULT));
    }
    v->scratch.limit = v->scratch.used + scratch;
    v->staging.limit = v->staging.used + stage;
    return KVS_OK;
}

kvs_status kvs_vk_scratch(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off) {
    return vk_arena_take(v, &v->scratch, 0, n, v->block_size / 2, a, off);
}

kvs_status kvs_vk_stage(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off, void **host) {
    KVS_TRY(vk_arena_take(v, &v->staging, 1, n, KVS_VK_STAGING_DEFAULT, a, off));
    *host = (char *)(*a)->block->map + *off;
    return KVS_OK;
}

void kvs_vk_op_start(kvs_vk *v, const char *op) {
    v->op = op;
    v->op_took = 0;
    v->scratch.limit = v->scratch.used; /* nothing reserved yet */
    v->staging.limit = v->staging.used;
}

void kvs_vk_end_op(kvs_vk *v) {
    v->op = NULL;
    v->op_took = 0;
}

void kvs_vk_arenas_reset(kvs_vk *v) {
    v->scratch.used = v->scratch.limit = 0;
    v->staging.used = v->staging.limit = 0;
}
