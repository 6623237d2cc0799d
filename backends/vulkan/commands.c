/* Vulkan backend command recording. Every op records into one command buffer; a pipeline barrier is
 * inserted only when a command touches a buffer range that an earlier, not-yet-barriered command
 * wrote (or writes a range an earlier one read). The buffer is submitted (and waited on) only when
 * the host needs results (download, sync), when an op reserves more arena memory than is left, when
 * the command count runs full (checked between ops), or at device close. Uploads go through the
 * staging arena as recorded copies, so they are ordered with the recorded ops without a submit. */
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

#define VK_MAX_CMDS 1024

static kvs_status vk_begin(kvs_vk *v) {
    if (v->recording) return KVS_OK;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    KVS_VKC(vkBeginCommandBuffer(v->cmd, &bi), "vkBeginCommandBuffer");
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

/* Allocations freed while commands were pending can be reused once they completed. */
static void vk_release_deferred(kvs_vk *v) {
    for (int i = 0; i < v->n_deferred; i++) kvs_vk_free_mem(v, v->deferred[i]);
    v->n_deferred = 0;
}

static void vk_reset_frame(kvs_vk *v) {
    vk_release_deferred(v);
    kvs_vk_arenas_reset(v);
    kvs_vk_descriptors_reset(v);
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
    KVS_VKC(vkEndCommandBuffer(v->cmd), "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &v->cmd};
    KVS_VKC(vkResetFences(v->device, 1, &v->fence), "vkResetFences");
    KVS_VKC(vkQueueSubmit(v->queue, 1, &si, v->fence), "vkQueueSubmit");
    KVS_VKC(vkWaitForFences(v->device, 1, &v->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    KVS_VKC(vkResetCommandBuffer(v->cmd, 0), "vkResetCommandBuffer");
    vk_reset_frame(v);
    return KVS_OK;
}

static kvs_status vk_maybe_flush(kvs_vk *v) {
    if (v->recording && v->n_cmds >= VK_MAX_CMDS) return kvs_vk_flush(v);
    return KVS_OK;
}

kvs_status kvs_vk_begin_op(kvs_vk *v, const char *op) {
    KVS_TRY(kvs_vk_check(v, op));
    KVS_TRY(vk_maybe_flush(v));
    kvs_vk_op_start(v, op);
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

kvs_status kvs_vk_dispatch(kvs_vk *v, kvs_vk_shader_id shader, const uint32_t *spec, int n_spec, const kvs_vk_arg *args,
                           int n_args, const void *pc, uint32_t pc_bytes, uint64_t groups, const char *op) {
    if (groups == 0) return KVS_OK;
    KVS_TRY(kvs_vk_check(v, op));
    VkPipeline pipe = VK_NULL_HANDLE;
    KVS_TRY(kvs_vk_get_pipeline(v, shader, spec, n_spec, &pipe));
    KVS_TRY(vk_begin(v));
    VkDescriptorSet set;
    KVS_TRY(kvs_vk_descriptor_set(v, &set));
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

void kvs_vk_release(kvs_vk *v, kvs_vk_alloc *a) {
    /* pending commands may still use the memory: release it after they complete */
    if (v->recording) {
        if (v->n_deferred == v->cap_deferred) {
            int cap = v->cap_deferred ? 2 * v->cap_deferred : 64;
            kvs_vk_alloc **nd = realloc(v->deferred, (size_t)cap * sizeof *nd);
            if (!nd) {
                kvs_vk_flush(v);
                kvs_vk_free_mem(v, a);
                return;
            }
            v->deferred = nd;
            v->cap_deferred = cap;
        }
        v->deferred[v->n_deferred++] = a;
        return;
    }
    kvs_vk_free_mem(v, a);
}

kvs_status kvs_vk_commands_init(kvs_vk *v) {
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = v->queue_family};
    KVS_VKC(vkCreateCommandPool(v->device, &cpi, NULL, &v->cmdpool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = v->cmdpool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    KVS_VKC(vkAllocateCommandBuffers(v->device, &cai, &v->cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    KVS_VKC(vkCreateFence(v->device, &fi, NULL, &v->fence), "vkCreateFence");
    v->cap_acc = 512;
    v->acc = calloc((size_t)v->cap_acc, sizeof *v->acc);
    if (!v->acc) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    return KVS_OK;
}

void kvs_vk_commands_destroy(kvs_vk *v) {
    if (v->device) {
        if (v->recording) kvs_vk_flush(v);
        vkDeviceWaitIdle(v->device);
        vk_release_deferred(v);
        if (v->fence) vkDestroyFence(v->device, v->fence, NULL);
        if (v->cmdpool) vkDestroyCommandPool(v->device, v->cmdpool, NULL);
    }
    free(v->acc);
    free(v->deferred);
    v->acc = NULL;
    v->deferred = NULL;
}
