/* Vulkan backend pipelines and descriptors: one descriptor set layout (KVS_VK_BINDINGS storage
 * buffers) and one pipeline layout (KVS_VK_PUSH_BYTES of push constants) shared by every shader;
 * shader modules created on first use from the embedded SPIR-V (kvs_vk_shader_table, indexed by
 * kvs_vk_shader_id); one pipeline per (shader, specialization constants), cached for the device's
 * life; descriptor sets from pools reset after every submit. A dispatch binds
 * [align_down(tensor offset), tensor end) of the tensor's block, with the tensor's element offset
 * within that range passed as a push constant (minStorageBufferOffsetAlignment respected). */
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

#define VK_POOL_SETS 256

static VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

kvs_status kvs_vk_pipelines_init(kvs_vk *v) {
    VkDescriptorSetLayoutBinding lb[KVS_VK_BINDINGS];
    for (int i = 0; i < KVS_VK_BINDINGS; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = KVS_VK_BINDINGS, .pBindings = lb};
    KVS_VKC(vkCreateDescriptorSetLayout(v->device, &li, NULL, &v->dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = KVS_VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &v->dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    KVS_VKC(vkCreatePipelineLayout(v->device, &pli, NULL, &v->playout), "vkCreatePipelineLayout");
    VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    KVS_VKC(vkCreatePipelineCache(v->device, &pci, NULL, &v->pcache), "vkCreatePipelineCache");
    return KVS_OK;
}

void kvs_vk_pipelines_destroy(kvs_vk *v) {
    if (!v->device) return;
    for (int i = 0; i < v->n_pipes; i++) vkDestroyPipeline(v->device, v->pipes[i].pipe, NULL);
    for (int i = 0; i < KVS_VK_SH_COUNT; i++)
        if (v->modules[i]) vkDestroyShaderModule(v->device, v->modules[i], NULL);
    for (int i = 0; i < v->n_pools; i++) vkDestroyDescriptorPool(v->device, v->pools[i], NULL);
    if (v->pcache) vkDestroyPipelineCache(v->device, v->pcache, NULL);
    if (v->playout) vkDestroyPipelineLayout(v->device, v->playout, NULL);
    if (v->dsl) vkDestroyDescriptorSetLayout(v->device, v->dsl, NULL);
    free(v->pipes);
    free(v->pools);
    v->pipes = NULL;
    v->pools = NULL;
    v->n_pipes = v->n_pools = 0;
}

kvs_status kvs_vk_get_pipeline(kvs_vk *v, kvs_vk_shader_id shader, const uint32_t *spec, int n_spec, VkPipeline *out) {
    if ((unsigned)shader >= KVS_VK_SH_COUNT || n_spec < 0 || n_spec > KVS_VK_MAX_SPEC)
        return kvs_error(KVS_ERR_INTERNAL, "vulkan: no shader %d, or %d specialization constants", (int)shader, n_spec);
    const int si = (int)shader;
    const char *name = kvs_vk_shader_table[si].name;
    for (int i = 0; i < v->n_pipes; i++) {
        kvs_vk_pipeline *p = &v->pipes[i];
        if (p->shader == shader && p->n_spec == n_spec && memcmp(p->spec, spec, (size_t)n_spec * 4) == 0) {
            *out = p->pipe;
            return KVS_OK;
        }
    }
    const double tb = kvs_now_s();
    if (!v->modules[si]) {
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = kvs_vk_shader_table[si].size,
                                       .pCode = kvs_vk_shader_table[si].code};
        KVS_VKC(vkCreateShaderModule(v->device, &mi, NULL, &v->modules[si]), "vkCreateShaderModule");
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
    if (v->build_seconds) *v->build_seconds += kvs_now_s() - tb;
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
    p->shader = shader;
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
    KVS_VKC(vkCreateDescriptorPool(v->device, &ci, NULL, &v->pools[v->n_pools]), "vkCreateDescriptorPool");
    v->n_pools++;
    return KVS_OK;
}

kvs_status kvs_vk_descriptor_set(kvs_vk *v, VkDescriptorSet *out) {
    for (;;) {
        if (v->cur_pool >= v->n_pools) KVS_TRY(vk_new_pool(v));
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = v->pools[v->cur_pool], .descriptorSetCount = 1,
                                          .pSetLayouts = &v->dsl};
        VkResult r = vkAllocateDescriptorSets(v->device, &ai, out);
        if (r == VK_SUCCESS) return KVS_OK;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) return kvs_vk_fail(r, "vkAllocateDescriptorSets");
        v->cur_pool++;
    }
}

void kvs_vk_descriptors_reset(kvs_vk *v) {
    for (int i = 0; i < v->n_pools; i++) vkResetDescriptorPool(v->device, v->pools[i], 0);
    v->cur_pool = 0;
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

