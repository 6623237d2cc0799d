/* OpenCL backend internals: device state, program cache, launch helpers, op entry points.
 * One kvs_ocl per open device; like the device, it is used by one thread at a time. */
#ifndef KVS_BACKENDS_OPENCL_OCL_H
#define KVS_BACKENDS_OPENCL_OCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include "internal.h"

/* A compiled program: keyed by (kernel source file, generated #define prelude). */
typedef struct kvs_ocl_program {
    const char *file;      /* embedded file name, e.g. "dense.cl" (static string) */
    char *defines;         /* the prelude text (owned) */
    cl_program prog;
    int n_kernels;
    struct { char name[48]; cl_kernel k; } kernels[24];
} kvs_ocl_program;

/* Scratch buffers reused across ops (the queue is in-order, so reuse after enqueue is safe). */
enum {
    KVS_OCL_SCR_IDS = 0,   /* embedding ids, rope frequencies */
    KVS_OCL_SCR_W,         /* matmul: f32 copy of an f16 / bf16 weight for CLBlast */
    KVS_OCL_SCR_ML,        /* attention: per (row, head) max and sum */
    KVS_OCL_SCR_A,         /* dwt ping, topk state, compact rows, scatter winners */
    KVS_OCL_SCR_B,         /* dwt pong, topk histograms */
    KVS_OCL_SCR_C,         /* topk counts */
    KVS_OCL_SCR_D,         /* topk candidates */
    KVS_OCL_SCR_COUNT
};

typedef struct kvs_ocl {
    cl_platform_id platform;
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    int fp16_arith;
    size_t max_wg;           /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    size_t local_mem;        /* CL_DEVICE_LOCAL_MEM_SIZE */
    int is_cpu;              /* CL_DEVICE_TYPE_CPU */
    kvs_ocl_program *progs;
    int n_progs, cap_progs;
    cl_mem scratch[KVS_OCL_SCR_COUNT];
    size_t scratch_bytes[KVS_OCL_SCR_COUNT];
    cl_mem zero;             /* 4-byte dummy buffer bound for absent optional tensors */
} kvs_ocl;

/* "CL_OUT_OF_RESOURCES" etc. */
const char *kvs_ocl_errname(cl_int err);

/* Returns KVS_ERR_BACKEND "opencl: <call> failed: <CL error name> (<code>)" when err != CL_SUCCESS. */
kvs_status kvs_ocl_check(cl_int err, const char *call);

#define KVS_OCL_TRY(call_expr, what) KVS_TRY(kvs_ocl_check((call_expr), (what)))

/* The kernel `name` of embedded file `file` built with the given #define prelude (may be ""),
 * compiled on first use and cached per device. Errors: KVS_ERR_COMPILE with the build log,
 * KVS_ERR_BACKEND, KVS_ERR_INTERNAL (unknown file/kernel). */
kvs_status kvs_ocl_kernel(kvs_device *dev, const char *file, const char *defines, const char *name,
                          cl_kernel *out);

/* Kernel arguments: ARG_MEM(cl_mem), ARG_I(int), ARG_L(long), ARG_F(float), ARG_LOCAL(bytes). */
typedef struct kvs_ocl_arg {
    size_t size;
    const void *ptr;   /* NULL: local memory of `size` bytes */
    cl_mem mem;
    cl_int i;
    cl_long l;
    cl_float f;
    int kind;          /* 0 mem, 1 int, 2 long, 3 float, 4 local */
} kvs_ocl_arg;

static inline kvs_ocl_arg kvs_ocl_arg_mem(cl_mem m) { kvs_ocl_arg a = {.size = sizeof(cl_mem), .mem = m, .kind = 0}; return a; }
static inline kvs_ocl_arg kvs_ocl_arg_i(int64_t v) { kvs_ocl_arg a = {.size = sizeof(cl_int), .i = (cl_int)v, .kind = 1}; return a; }
static inline kvs_ocl_arg kvs_ocl_arg_l(int64_t v) { kvs_ocl_arg a = {.size = sizeof(cl_long), .l = (cl_long)v, .kind = 2}; return a; }
static inline kvs_ocl_arg kvs_ocl_arg_f(float v) { kvs_ocl_arg a = {.size = sizeof(cl_float), .f = v, .kind = 3}; return a; }
static inline kvs_ocl_arg kvs_ocl_arg_local(size_t bytes) { kvs_ocl_arg a = {.size = bytes, .kind = 4}; return a; }

#define ARG_MEM(m) kvs_ocl_arg_mem(m)
#define ARG_I(v) kvs_ocl_arg_i(v)
#define ARG_L(v) kvs_ocl_arg_l(v)
#define ARG_F(v) kvs_ocl_arg_f(v)
#define ARG_LOCAL(b) kvs_ocl_arg_local(b)

/* Sets args and enqueues an ndim-D range; gws is rounded up to a multiple of lws (lws NULL: the
 * driver picks). `what` names the kernel in error messages. */
kvs_status kvs_ocl_launch(kvs_device *dev, cl_kernel k, const char *what, int ndim, const size_t *gws,
                          const size_t *lws, int nargs, const kvs_ocl_arg *args);

/* A scratch buffer of at least nbytes in slot `slot`, grown as needed (contents undefined). */
kvs_status kvs_ocl_scratch(kvs_device *dev, int slot, size_t nbytes, cl_mem *out);

/* Blocking write/fill helpers on the device queue. */
kvs_status kvs_ocl_write(kvs_device *dev, cl_mem m, size_t offset, const void *src, size_t n);
kvs_status kvs_ocl_fill32(kvs_device *dev, cl_mem m, size_t offset, uint32_t word, size_t n_words);

/* Tensor helpers: its cl_mem and its offset in elements of `elem_bytes`. */
static inline cl_mem kvs_ocl_mem(const kvs_tensor *t) { return (cl_mem)t->buf->handle; }
static inline int64_t kvs_ocl_off(const kvs_tensor *t, size_t elem_bytes) {
    return (int64_t)(t->offset / elem_bytes);
}

/* Largest power of two <= v (v >= 1). */
static inline size_t kvs_ocl_pow2_floor(size_t v) {
    size_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}
static inline size_t kvs_ocl_round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

/* The type code of shaders/opencl/qblocks.cl (QT_F32 0, QT_F16 1, QT_BF16 2, QT_Q8_0 3, QT_Q4_0 4,
 * QT_Q4_1 5, QT_Q5_0 6, QT_Q5_1 7, QT_IQ4_NL 8, QT_Q2_K 9 .. QT_Q6_K 13, QT_IQ4_XS 14) of a dtype; -1
 * for the others (I32). */
int kvs_ocl_qt(kvs_dtype t);
/* qblocks.cl's QT_QH8: a qh8 cache plane pair (a Q4_1 upper plane read with its QH8_LO lower
 * plane: attention with k_lo / v_lo, the converting scatter with dst_lo); no kvs_dtype maps to it. */
#define KVS_OCL_QT_QH8 15

/* A default 1-D work-group size: min(256, max_wg), power of two. */
size_t kvs_ocl_wg(kvs_device *dev, size_t want);

/* Op entry points (ops_*.c): kvs_ocl_<op>(dev, const <args> *a) for every op of KVS_OP_LIST. */
KVS_OP_PROTOTYPES(kvs_ocl_)

/* The ops table's supports() and variant table (ops_supports.c); attention's part of supports()
 * (ops_attention.c). */
int kvs_ocl_attention_supported(kvs_device *dev, const kvs_attention_args *a, char *why, size_t n);
int kvs_ocl_supports(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n);
enum { KVS_OCL_ATTN_DEC = 1, KVS_OCL_ATTN_MAIN_SPLIT4 = 2 }; /* kvs_variant.code of attention */
enum { KVS_OCL_MM_GEMV = 3, KVS_OCL_MM_TILED = 4 };               /* kvs_variant.code of matmul */
#define KVS_OCL_N_VARIANTS 4
extern const kvs_variant kvs_ocl_variants[KVS_OCL_N_VARIANTS];

#endif
