/* Vulkan backend internals shared by vulkan.c (device, memory, command recording) and vk_ops.c (the
 * ops). Not installed. One kvs_vk per open device; not thread-safe (one device per thread). */
#ifndef KVS_VK_INTERNAL_H
#define KVS_VK_INTERNAL_H

#include <vulkan/vulkan.h>

#include "internal.h"

/* Storage-buffer bindings in the one descriptor set layout every shader uses (set 0, bindings
 * 0..KVS_VK_BINDINGS-1, each `buffer { uint d[]; }`). Devices with fewer per-stage storage buffers
 * are refused at open. */
#define KVS_VK_BINDINGS 12
/* Push-constant bytes every pipeline layout declares (the Vulkan minimum guaranteed size). */
#define KVS_VK_PUSH_BYTES 128
#define KVS_VK_MAX_SPEC 12

/* A block of device memory with one VkBuffer spanning it; tensors are sub-ranges. */
typedef struct kvs_vk_block {
    VkDeviceMemory mem;
    VkBuffer buf;
    VkDeviceSize size;
    void *map;                  /* persistently mapped when host-visible, else NULL */
    /* free ranges sorted by offset: [off, off+len) */
    VkDeviceSize *free_off, *free_len;
    int n_free, cap_free;
    int dedicated;              /* one allocation larger than the standard block size */
    struct kvs_vk_block *next;
} kvs_vk_block;

/* What kvs_buffer.handle points to. */
typedef struct kvs_vk_alloc {
    kvs_vk_block *block;
    VkDeviceSize offset, size;
} kvs_vk_alloc;

/* A range of a VkBuffer one dispatch binds (or a copy touches). */
typedef struct kvs_vk_arg {
    VkBuffer buf;
    VkDeviceSize off, size;     /* descriptor range (aligned start) */
    int write;
} kvs_vk_arg;

/* A linear per-submission arena inside one allocation (reset after every completed submit). */
typedef struct kvs_vk_arena {
    kvs_vk_alloc *a;
    VkDeviceSize used;
} kvs_vk_arena;

typedef struct kvs_vk_pipeline {
    int shader;
    uint32_t spec[KVS_VK_MAX_SPEC];
    int n_spec;
    VkPipeline pipe;
} kvs_vk_pipeline;

typedef struct kvs_vk_access {
    VkBuffer buf;
    VkDeviceSize lo, hi;
    int write;
} kvs_vk_access;

typedef struct kvs_vk {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memprops;
    uint32_t api_version;

    /* memory */
    int mt_device;              /* memory type for tensors */
    int mt_host;                /* host-visible coherent type for staging */
    int device_mapped;          /* tensors' memory is host-visible (unified memory) */
    VkDeviceSize block_size, max_alloc, align;
    kvs_vk_block *blocks_dev, *blocks_host;

    /* descriptors and pipelines */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout playout;
    VkPipelineCache pcache;
    VkShaderModule *modules;    /* per shader of kvs_vk_shader_table, created lazily */
    int n_shaders;
    kvs_vk_pipeline *pipes;
    int n_pipes, cap_pipes;
    VkDescriptorPool *pools;
    int n_pools, cur_pool;

    /* command recording */
    VkCommandPool cmdpool;
    VkCommandBuffer cmd;
    VkFence fence;
    int recording;              /* cmd has begun and holds n_cmds commands */
    int n_cmds;
    kvs_vk_access *acc;
    int n_acc, cap_acc;

    kvs_vk_arena scratch;       /* device-local scratch (topk, compact, dwt levels, ...) */
    kvs_vk_arena staging;       /* host-visible: uploads, small host tables, downloads */
    kvs_vk_alloc *dummy;        /* bound to unused bindings */
    kvs_vk_alloc **deferred;    /* freed while commands were pending; released after the flush */
    int n_deferred, cap_deferred;

    /* validation */
    int validation;
    char val_msg[2048];
    int val_pending;

    uint32_t max_groups[3];
} kvs_vk;

/* ---- vulkan.c: infrastructure used by the ops ---- */

/* Returns KVS_ERR_BACKEND with the pending validation message, if any (and clears it). */
kvs_status kvs_vk_check(kvs_vk *v, const char *op);
/* Called first by every op: the validation check, plus a submit when the command buffer is long
 * (never in the middle of an op, so staged data an op wrote stays owned by it until it runs). */
kvs_status kvs_vk_begin_op(kvs_vk *v, const char *op);

/* Binding for tensor t: fills *arg (aligned range) and *unit_off (t's first element relative to the
 * binding start, in units of `unit` bytes). KVS_ERR_UNSUPPORTED when the tensor range exceeds
 * maxStorageBufferRange. */
kvs_status kvs_vk_bind(kvs_vk *v, const kvs_tensor *t, int write, uint32_t unit, kvs_vk_arg *arg,
                       uint32_t *unit_off, const char *op);
kvs_status kvs_vk_bind_alloc(kvs_vk *v, const kvs_vk_alloc *a, VkDeviceSize off, VkDeviceSize size,
                             int write, uint32_t unit, kvs_vk_arg *arg, uint32_t *unit_off,
                             const char *op);

/* Scratch memory valid until the next submit completes: device-local (scratch) or host-visible
 * (staging; *host receives the mapped pointer). Offsets aligned for storage-buffer binding. */
/* Ensures that takes totalling `scratch` and `stage` bytes (up to 8 takes each) fit without a
 * flush: an op that takes several pieces calls this first, because a flush between its takes would
 * let later ops reuse staging memory its recorded commands still read. */
kvs_status kvs_vk_reserve(kvs_vk *v, VkDeviceSize scratch, VkDeviceSize stage);
kvs_status kvs_vk_scratch(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off);
kvs_status kvs_vk_stage(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off, void **host);

/* Records one dispatch of shader `name` with specialization constants spec[0..n_spec-1]
 * (constant_id i), bindings args[0..n_args-1] (binding i), push constants, and a total of
 * groups_x * groups_y workgroups (split over the device's dispatch limits; shaders compute their
 * linear group id as gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y and bounds-check).
 * Pipeline barriers are inserted automatically against earlier unfinished writes/reads. */
kvs_status kvs_vk_dispatch(kvs_vk *v, const char *name, const uint32_t *spec, int n_spec,
                           const kvs_vk_arg *args, int n_args, const void *pc, uint32_t pc_bytes,
                           uint64_t groups, const char *op);

/* Records a buffer copy / fill (tracked like dispatches). */
kvs_status kvs_vk_copy_buffer(kvs_vk *v, VkBuffer src, VkDeviceSize so, VkBuffer dst, VkDeviceSize dso,
                              VkDeviceSize n);
kvs_status kvs_vk_fill(kvs_vk *v, VkBuffer dst, VkDeviceSize off, VkDeviceSize n, uint32_t word);

/* Submits recorded work and waits; resets the arenas and descriptor pools. */
kvs_status kvs_vk_flush(kvs_vk *v);

static inline kvs_vk *kvs_vk_of(kvs_device *dev) { return (kvs_vk *)dev->impl; }
static inline const kvs_vk_alloc *kvs_vk_alloc_of(const kvs_tensor *t) {
    return (const kvs_vk_alloc *)t->buf->handle;
}

/* ---- the ops (vk_ops.c): kvs_vk_<op>(dev, const <args> *a) for every op of KVS_OP_LIST ---- */
KVS_OP_PROTOTYPES(kvs_vk_)

/* ---- vk_supports.c: the ops table's supports() ---- */
int kvs_vk_supports(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n);

#endif
