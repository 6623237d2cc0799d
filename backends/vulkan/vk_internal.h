/* Vulkan backend internals. Not installed. One kvs_vk per open device; not thread-safe (one device
 * per thread). The files:
 *   vulkan.c     the kvs_backend_ops entry points (open/close/sync, buffers, transfers) and the ops table
 *   device.c     instance, validation messages, physical-device enumeration, device creation, caps
 *   memory.c     block suballocation, the scratch/staging arenas and per-op reservations
 *   commands.c   command recording: automatic barriers, copies, fills, dispatches, submit (flush)
 *   pipelines.c  shader modules, pipelines per specialization, descriptor sets, bindings
 *   ops_*.c      the ops (dense, rope, attention, dwt, rows, topk): bindings, push constants, shapes
 * Host/shader interface (push-constant blocks, flags, modes): shaders/vulkan/vk_params.h. */
#ifndef KVS_VK_INTERNAL_H
#define KVS_VK_INTERNAL_H

#include <vulkan/vulkan.h>

#include "internal.h"
#include "vk_params.h"
#include "vk_shaders.h"

_Static_assert(KVS_VK_DT_F32 == KVS_F32 && KVS_VK_DT_F16 == KVS_F16 && KVS_VK_DT_BF16 == KVS_BF16 &&
                   KVS_VK_DT_I32 == KVS_I32 && KVS_VK_DT_Q8_0 == KVS_Q8_0 && KVS_VK_DT_Q4_0 == KVS_Q4_0 &&
                   KVS_VK_DT_Q4_1 == KVS_Q4_1 && KVS_VK_DT_Q5_0 == KVS_Q5_0 && KVS_VK_DT_Q5_1 == KVS_Q5_1 &&
                   KVS_VK_DT_IQ4_NL == KVS_IQ4_NL && KVS_VK_DT_Q2_K == KVS_Q2_K && KVS_VK_DT_Q3_K == KVS_Q3_K &&
                   KVS_VK_DT_Q4_K == KVS_Q4_K && KVS_VK_DT_Q5_K == KVS_Q5_K && KVS_VK_DT_Q6_K == KVS_Q6_K &&
                   KVS_VK_DT_IQ4_XS == KVS_IQ4_XS && KVS_QH8 == 16 && KVS_VK_DT_QH8 == KVS_QH8 && KVS_QH8_LO == 17 && KVS_DTYPE_COUNT == 18,
               "vk_params.h dtype codes differ from kvs_dtype");
/* KVS_QH8 / KVS_QH8_LO (QuantSpec's cache planes): a qh8 K or V reaches the shaders as its Q4_1
 * upper plane plus a QH8_LO lower plane bound as bytes (attn.comp / attn_stats.comp KLO, VLO;
 * scatter_cvt.comp DD = KVS_VK_DT_QH8); rows ops copy QH8_LO rows as bytes. */

/* Storage-buffer bindings in the one descriptor set layout every shader uses (set 0, bindings
 * 0..KVS_VK_BINDINGS-1, each `buffer { uint d[]; }`). Devices with fewer per-stage storage buffers
 * are refused at open. */
#define KVS_VK_BINDINGS 14 /* attn: 12, + a qh8 K's and V's lower planes */
/* Push-constant bytes every pipeline layout declares (the Vulkan minimum guaranteed size). */
#define KVS_VK_PUSH_BYTES KVS_VK_PC_MAX_BYTES
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

/* A linear per-submission arena inside one allocation (reset after every completed submit).
 * Inside an op, takes may not pass `limit` (what the op reserved with kvs_vk_reserve): see memory.c. */
typedef struct kvs_vk_arena {
    kvs_vk_alloc *a;
    VkDeviceSize used;
    VkDeviceSize limit;         /* inside an op: used may grow up to here */
} kvs_vk_arena;

typedef struct kvs_vk_pipeline {
    kvs_vk_shader_id shader;
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
    double *build_seconds; /* the device's kernel build time (kvs_device.build_seconds) */
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
    VkShaderModule modules[KVS_VK_SH_COUNT]; /* per shader, created lazily */
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

    /* the op being recorded (from kvs_vk_begin_op to the next op or kvs_vk_end_op), see memory.c */
    const char *op;             /* its name, NULL outside an op */
    int op_took;                /* it has taken scratch or staging memory */

    /* validation */
    int validation;
    char val_msg[2048];
    int val_pending;

    uint32_t max_groups[3];
} kvs_vk;

/* ---- device.c ---- */

/* A kvs_status for a failed Vulkan call `what`: KVS_ERR_OUT_OF_MEMORY for the out-of-memory
 * results, else KVS_ERR_BACKEND; both name `what` and the VkResult. */
kvs_status kvs_vk_fail(VkResult r, const char *what);
#define KVS_VKC(call, what)                                                                        \
    do {                                                                                           \
        VkResult vkc_r_ = (call);                                                                  \
        if (vkc_r_ != VK_SUCCESS) return kvs_vk_fail(vkc_r_, what);                                \
    } while (0)

/* Returns KVS_ERR_BACKEND with the pending validation message, if any (and clears it). */
kvs_status kvs_vk_check(kvs_vk *v, const char *op);
/* Whether the caller asked for the validation layer (params, else KVS_VULKAN_VALIDATION). */
int kvs_vk_validation_wanted(const kvs_device_params *p);
/* A Vulkan instance (1.1 or newer loader); with validation, the Khronos layer and the debug-utils
 * extension, messages going to v (NULL: none). KVS_ERR_UNSUPPORTED (old loader, no layer),
 * KVS_ERR_NO_DEVICE (no driver), or a vkCreateInstance failure. */
kvs_status kvs_vk_instance(VkInstance *out, int validation, kvs_vk *v);
/* With validation: the instance's messenger into v->messenger. */
kvs_status kvs_vk_messenger(kvs_vk *v);
/* Physical device `index` of inst into *out (index < 0: only *count). KVS_ERR_NO_DEVICE when absent. */
kvs_status kvs_vk_physical(VkInstance inst, int index, VkPhysicalDevice *out, int *count);
/* kvs_device_info from a physical device's properties. */
void kvs_vk_fill_info(VkPhysicalDevice pd, kvs_device_info *info);
/* Checks v->phys (Vulkan 1.1, enough storage bindings), creates v->device with one compute queue
 * and fills dev->caps (except the memory sizes, memory.c). */
kvs_status kvs_vk_create_device(kvs_device *dev, kvs_vk *v);

/* ---- memory.c ---- */

/* Default size of the staging arena, and the chunk size of staged transfers. */
#define KVS_VK_STAGING_DEFAULT ((VkDeviceSize)64 << 20)

/* Chooses the memory types, block size and binding alignment and fills the memory caps. */
kvs_status kvs_vk_memory_init(kvs_device *dev, kvs_vk *v);
/* nbytes (rounded up to v->align, 0 -> 4) of device (host = 0) or host-visible (host = 1) memory,
 * first fit in the blocks, else a new block (a dedicated one when larger than block_size).
 * KVS_ERR_OUT_OF_MEMORY beyond maxMemoryAllocationSize or when the driver refuses. */
kvs_status kvs_vk_alloc_mem(kvs_vk *v, int host, VkDeviceSize nbytes, kvs_vk_alloc **out);
/* Returns a's range to its block (empty blocks are released, one standard block kept); NULL ok. */
void kvs_vk_free_mem(kvs_vk *v, kvs_vk_alloc *a);
/* Frees the arenas' and dummy allocations and destroys every block (device close). */
void kvs_vk_memory_destroy(kvs_vk *v);

/* Scratch memory valid until the next submit completes: device-local (scratch) or host-visible
 * (staging; *host receives the mapped pointer). Offsets aligned for storage-buffer binding.
 * Inside an op (after kvs_vk_begin_op), takes come only from what the op reserved with
 * kvs_vk_reserve: a take that would pass it is KVS_ERR_INTERNAL, never a flush, because a flush
 * resets the arena while the op's recorded commands still read what it took before (split-K
 * partials, top-k state). Outside an op (transfers, after kvs_vk_end_op) a take that does not fit
 * submits the pending work and starts the arena afresh. */
/* Ensures that takes totalling `scratch` and `stage` bytes (up to 8 takes each) fit without a
 * flush, flushing first when needed. An op that takes memory calls it once, before its first
 * take; a second call after a take is KVS_ERR_INTERNAL (its flush could reset memory taken). */
kvs_status kvs_vk_reserve(kvs_vk *v, VkDeviceSize scratch, VkDeviceSize stage);
kvs_status kvs_vk_scratch(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off);
kvs_status kvs_vk_stage(kvs_vk *v, VkDeviceSize n, kvs_vk_alloc **a, VkDeviceSize *off, void **host);
/* Starts op `op` with nothing reserved (kvs_vk_begin_op calls it). */
void kvs_vk_op_start(kvs_vk *v, const char *op);
/* Ends the current op's reservation: the entry points that are not ops (upload, download) call it. */
void kvs_vk_end_op(kvs_vk *v);
/* Empties both arenas (kvs_vk_flush, once the submitted work has completed). */
void kvs_vk_arenas_reset(kvs_vk *v);

/* ---- commands.c ---- */

/* Called first by every op: the validation check, a submit when the command buffer is long
 * (never in the middle of an op, so staged data an op wrote stays owned by it until it runs), and
 * the start of the op's arena reservation (nothing reserved yet). */
kvs_status kvs_vk_begin_op(kvs_vk *v, const char *op);
/* Creates the command pool, command buffer and fence. */
kvs_status kvs_vk_commands_init(kvs_vk *v);

/* Records one dispatch of `shader` with specialization constants spec[0..n_spec-1]
 * (constant_id i), bindings args[0..n_args-1] (binding i), push constants, and a total of
 * groups_x * groups_y workgroups (split over the device's dispatch limits; shaders compute their
 * linear group id as gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y and bounds-check).
 * Pipeline barriers are inserted automatically against earlier unfinished writes/reads. */
kvs_status kvs_vk_dispatch(kvs_vk *v, kvs_vk_shader_id shader, const uint32_t *spec, int n_spec,
                           const kvs_vk_arg *args, int n_args, const void *pc, uint32_t pc_bytes,
                           uint64_t groups, const char *op);

/* Records a buffer copy / fill (tracked like dispatches). */
kvs_status kvs_vk_copy_buffer(kvs_vk *v, VkBuffer src, VkDeviceSize so, VkBuffer dst, VkDeviceSize dso,
                              VkDeviceSize n);
kvs_status kvs_vk_fill(kvs_vk *v, VkBuffer dst, VkDeviceSize off, VkDeviceSize n, uint32_t word);

/* Submits recorded work and waits; resets the arenas and descriptor pools. */
kvs_status kvs_vk_flush(kvs_vk *v);
/* Frees a now, or after the next flush when recorded commands may still use it (buffer_free). */
void kvs_vk_release(kvs_vk *v, kvs_vk_alloc *a);
/* Submits pending work, waits for the device, frees deferred allocations, destroys the fence and
 * command pool (device close; safe on a partly opened device). */
void kvs_vk_commands_destroy(kvs_vk *v);

/* ---- pipelines.c ---- */

/* Creates the descriptor set layout (KVS_VK_BINDINGS storage buffers), pipeline layout and cache. */
kvs_status kvs_vk_pipelines_init(kvs_vk *v);
/* The pipeline of `shader` with specialization constants spec[0..n_spec-1], created on first use
 * (KVS_ERR_COMPILE when the driver refuses it). */
kvs_status kvs_vk_get_pipeline(kvs_vk *v, kvs_vk_shader_id shader, const uint32_t *spec, int n_spec,
                           VkPipeline *out);
/* A descriptor set of the common layout from the current pool (new pools as needed). */
kvs_status kvs_vk_descriptor_set(kvs_vk *v, VkDescriptorSet *out);
/* Resets the descriptor pools (after a completed submit). */
void kvs_vk_descriptors_reset(kvs_vk *v);
/* Destroys pipelines, modules, pools and layouts. */
void kvs_vk_pipelines_destroy(kvs_vk *v);

/* Binding for tensor t: fills *arg (aligned range) and *unit_off (t's first element relative to the
 * binding start, in units of `unit` bytes). KVS_ERR_UNSUPPORTED when the tensor range exceeds
 * maxStorageBufferRange. */
kvs_status kvs_vk_bind(kvs_vk *v, const kvs_tensor *t, int write, uint32_t unit, kvs_vk_arg *arg,
                       uint32_t *unit_off, const char *op);
kvs_status kvs_vk_bind_alloc(kvs_vk *v, const kvs_vk_alloc *a, VkDeviceSize off, VkDeviceSize size,
                             int write, uint32_t unit, kvs_vk_arg *arg, uint32_t *unit_off,
                             const char *op);

/* ---- helpers for ops_*.c ---- */

/* Workgroup size of the element-wise shaders. */
#define KVS_VK_WG_ELEM 256u

/* Binding unit of a dtype: the shaders address f16/bf16 in 16-bit halves, block types in bytes. */
static inline uint32_t kvs_vk_unit(kvs_dtype d) {
    if (kvs_dtype_is_quant(d)) return 1;
    return d == KVS_F16 || d == KVS_BF16 ? 2 : 4;
}

/* Workgroup size for a shader that wants `want` invocations (power of two), capped by the device. */
static inline uint32_t kvs_vk_wg(const kvs_device *dev, uint32_t want) {
    uint32_t maxwg = (uint32_t)dev->caps.max_workgroup_size;
    while (want > maxwg && want > 1) want >>= 1;
    return want;
}

static inline uint64_t kvs_vk_ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* The dummy buffer as a read-only binding (for an absent optional tensor). */
static inline kvs_vk_arg kvs_vk_dummy_arg(const kvs_vk *v) {
    kvs_vk_arg a = {v->dummy->block->buf, v->dummy->offset, 256, 0};
    return a;
}

/* Optional tensor: binds t, or the dummy buffer (offset 0) when t is NULL. */
static inline kvs_status kvs_vk_bind_opt(kvs_vk *v, const kvs_tensor *t, int write, kvs_vk_arg *arg,
                                         uint32_t *off, const char *op) {
    if (!t) {
        *arg = kvs_vk_dummy_arg(v);
        *off = 0;
        return KVS_OK;
    }
    return kvs_vk_bind(v, t, write, kvs_vk_unit(t->dtype), arg, off, op);
}

/* Binds tensor t as args[i] (write: 0/1), its element offset into `off`; in an op with v, args, op. */
#define KVS_VK_BIND(t, wr, i, off)                                                                 \
    KVS_TRY(kvs_vk_bind(v, (t), (wr), kvs_vk_unit((t)->dtype), &args[i], &(off), op))

static inline kvs_vk *kvs_vk_of(kvs_device *dev) { return (kvs_vk *)dev->impl; }
static inline const kvs_vk_alloc *kvs_vk_alloc_of(const kvs_tensor *t) {
    return (const kvs_vk_alloc *)t->buf->handle;
}

/* ---- the ops (ops_*.c): kvs_vk_<op>(dev, const <args> *a) for every op of KVS_OP_LIST ---- */
KVS_OP_PROTOTYPES(kvs_vk_)

/* ---- ops_attention.c: the attn tiling and key splitting of one call ---- */
typedef struct kvs_vk_attn_plan {
    uint32_t R, TK;             /* query rows per workgroup, keys per shared-memory tile */
    uint64_t base;              /* workgroups of one pass over all keys */
    uint64_t nsplit, split_len; /* key ranges (split-K, merged by attn_combine; 1 = one pass), keys each */
} kvs_vk_attn_plan;
/* 1 and *pl for the variant in force; 0 with the reason in why[0..n-1] when the device cannot run
 * the call (shared memory; "single" on a CPU device past its loop limit). */
int kvs_vk_attention_plan(kvs_device *dev, const kvs_attention_args *a, kvs_vk_attn_plan *pl, char *why, size_t n);

/* ---- vk_supports.c: the ops table's supports() and kernel variants ---- */
int kvs_vk_supports(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n);
/* kvs_variant.code values (kvs_device_variant): matmul's two shaders, attention's key splitting. */
enum {
    KVS_VK_MATMUL_TILED = 1,   /* matmul.comp, 64x64 tiles (auto: n > 8 and 256-wide workgroups) */
    KVS_VK_MATMUL_VEC = 2,     /* matmul_vec.comp, up to 8 rows of x per dispatch (auto: otherwise) */
    KVS_VK_ATTN_SINGLE = 1,    /* one attn pass over all keys, never split-K */
    KVS_VK_ATTN_SPLIT4 = 2,    /* split-K into 4 key ranges (fewer if fewer key tiles) + attn_combine */
};
#define KVS_VK_N_VARIANTS 4
extern const kvs_variant kvs_vk_variants[KVS_VK_N_VARIANTS];

#endif
