/* kvsieve internals shared by core/ and backends/: object layouts, error helpers, the backend
 * ops table. Not installed. */
#ifndef KVS_CORE_INTERNAL_H
#define KVS_CORE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kvsieve/device.h"
#include "kvsieve/ops.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"
#include "kvsieve/version.h"

#if defined(__GNUC__)
#define KVS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KVS_PRINTF(a, b)
#endif

/* Sets this thread's last error message and returns s: `return kvs_error(KVS_ERR_SHAPE, "...")`. */
kvs_status kvs_error(kvs_status s, const char *fmt, ...) KVS_PRINTF(2, 3);
kvs_status kvs_verror(kvs_status s, const char *fmt, va_list ap);

/* Returns s unchanged if it is an error; used to propagate with context:
 * `KVS_TRY(call)` returns from the caller on failure. */
#define KVS_TRY(expr)                                                                              \
    do {                                                                                           \
        kvs_status kvs_try_s_ = (expr);                                                            \
        if (kvs_try_s_ != KVS_OK) return kvs_try_s_;                                               \
    } while (0)

/* ---- memory ------------------------------------------------------------------------------- */

/* A device allocation, reference-counted by the tensors and views that use it. */
typedef struct kvs_buffer {
    kvs_device *dev;
    void *handle;   /* backend handle (CPU: host pointer, OpenCL: cl_mem, Vulkan: its own struct) */
    size_t nbytes;
    int refs;
    int borrowed;   /* 1: host memory the buffer does not own (kvs_tensor_wrap_host): never freed */
} kvs_buffer;

struct kvs_tensor {
    kvs_device *dev;
    kvs_buffer *buf;
    size_t offset;              /* byte offset of element 0 within buf */
    kvs_dtype dtype;
    int ndim;
    int64_t ne[KVS_MAX_DIMS];   /* ne[i] = 1 for i >= ndim */
    size_t nbytes;
    char name[64];
};

/* A view of parent (the checks of kvs_tensor_view) written into caller storage *t, without a
 * reference on the buffer and without allocating: valid while parent lives, never passed to
 * kvs_tensor_destroy. For per-step views in reusable workspaces (the forward, the cache's writes).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL), those of kvs_tensor_view (shape, range). */
kvs_status kvs_tensor_view_into(kvs_tensor *t, const kvs_tensor *parent, int64_t offset_elems, int ndim, const int64_t *ne);

/* A read-only tensor over host memory the caller owns (CPU devices only: a model's weights used
 * from the model file's mapping, no copy). data must stay valid and unchanged until the tensor and
 * its views are destroyed, and be aligned for dtype (4 bytes F32/I32, 2 F16/BF16, 1 block types);
 * nothing may upload into it (the mapping is read-only). Errors: KVS_ERR_INVALID_ARGUMENT (NULL,
 * misaligned data), KVS_ERR_UNSUPPORTED (a device other than the CPU's), the shape checks of
 * kvs_tensor_create, KVS_ERR_OUT_OF_MEMORY. */
kvs_status kvs_tensor_wrap_host(kvs_tensor **out, kvs_device *dev, kvs_dtype dtype, int ndim, const int64_t *ne,
                                const void *data);

/* Element offset -> pointer for host-visible (CPU) tensors. */
static inline void *kvs_tensor_host_ptr(const kvs_tensor *t) {
    return (char *)t->buf->handle + t->offset;
}

/* ---- backends ------------------------------------------------------------------------------ */

/* Argument bundles: validated, with the derived sizes every backend needs. */
typedef struct kvs_matmul_args {
    const kvs_tensor *W, *x; kvs_tensor *y;
    int64_t m, k, n;            /* W [m][k], x [n][k], y [n][m] */
    int accumulate;
} kvs_matmul_args;

typedef struct kvs_rope_args {
    kvs_tensor *x;              /* rows of head_dim values: [n_vec][head_dim], F32 or F16 */
    const kvs_tensor *pos;      /* I32; vector r uses pos[r / pos_div] */
    int64_t n_vec, head_dim, pos_div;
    int64_t vec_stride_rows;    /* rope_shift only: rows per kv head (capacity); else 0 */
    int64_t n_rows;             /* rope_shift only: rows [0, n_rows) of every head; else 0 */
    kvs_rope_params p;          /* n_rot resolved (never 0) */
} kvs_rope_args;

typedef struct kvs_attention_args {
    const kvs_tensor *q, *k, *v; kvs_tensor *out;
    int64_t n_q, n_heads, n_kv_heads, head_dim, capacity, n_kv; /* head_dim: d_k (q, k) */
    int64_t head_dim_v;         /* d_v (v, out); may differ from head_dim */
    int64_t n_stat_rows;        /* rows in p.stat_rows (0 when NULL) */
    int64_t n_probe;            /* rows in p.probe_rows (0 when NULL) */
    kvs_attention_params p;     /* scale resolved (never 0), n_kv resolved */
} kvs_attention_args;

typedef struct kvs_dwt_args {
    const kvs_tensor *src; kvs_tensor *dst;  /* dwt: src = x, dst = y; idwt: src = y, dst = x */
    int64_t rows, n, ncoef;
    kvs_wavelet w;
    int levels;
} kvs_dwt_args;

typedef struct kvs_topk_args {
    const kvs_tensor *x; kvs_tensor *idx, *val;
    int64_t rows, n, k;        /* global: rows = 1, n = nelements */
    kvs_topk_params p;
} kvs_topk_args;

typedef struct kvs_topp_args {
    const kvs_tensor *x; kvs_tensor *count, *thr; /* thr may be NULL */
    int64_t rows, n;
    kvs_topp_params p;
} kvs_topp_args;

typedef struct kvs_rows_args {
    const kvs_tensor *src; kvs_tensor *dst;  /* compact: src == dst */
    const kvs_tensor *idx;
    int64_t groups, row_bytes, n;            /* n indices per group */
    int64_t src_rows, dst_rows;              /* rows per group in src / dst */
    int idx_shared;                          /* 1: idx is [n], shared by all groups */
    int src_token_major;                     /* scatter: src is [n][G][row] */
    int convert;                             /* scatter: src F32 rows converted to dst's dtype (F16, BF16,
                                              * or quantized per block: Q8_0, Q4_0, Q4_1, IQ4_NL) */
    kvs_tensor *dst_lo;                      /* scatter (convert) only, else NULL: a qh8 cache's append
                                              * (kvs_scatter_qh8): dst is the Q4_1 upper plane, dst_lo the
                                              * QH8_LO lower plane (same row indexing, row_bytes / 20 * 16
                                              * bytes per row), both written by kvs_qh8_encode_row's rule */
} kvs_rows_args;

typedef struct kvs_binary_args {        /* add: y = a + b; swiglu: y = silu(a) * b; log_mass:
                                          * y = b == 0 ? -inf : a + log(b) */
    const kvs_tensor *a, *b; kvs_tensor *y;
    int64_t n;                           /* elements of each */
} kvs_binary_args;

typedef struct kvs_copy_args {
    const kvs_tensor *src; kvs_tensor *dst;
    int64_t n;                           /* elements of each */
} kvs_copy_args;

typedef struct kvs_rmsnorm_args {
    const kvs_tensor *x, *w; kvs_tensor *y;
    int64_t rows, dim;
    float eps;
} kvs_rmsnorm_args;

typedef struct kvs_softmax_args {
    const kvs_tensor *x; kvs_tensor *y;
    int64_t rows, n;
    float scale;
} kvs_softmax_args;

typedef struct kvs_embedding_args {
    const kvs_tensor *table; kvs_tensor *out;
    const int32_t *ids;                  /* host values, already range-checked */
    int64_t n, dim;
} kvs_embedding_args;

/* The op list, spelled once: X(name, argument struct). It generates the op ids (KVS_OP_name), the
 * ops-table slots, each backend's prototypes (KVS_OP_PROTOTYPES) and table entries
 * (KVS_OP_TABLE_ENTRIES), the front-ends' dispatch (core/ops.c) and the open-time check that a
 * backend fills every slot (kvs_backend_check). Every op slot is required. An op's name is also
 * its name in variant specs ("attention:avx512"). */
#define KVS_OP_LIST(X, ctx)                                                                        \
    X(ctx, matmul, kvs_matmul_args)                                                                \
    X(ctx, add, kvs_binary_args)                                                                   \
    X(ctx, copy, kvs_copy_args)                                                                    \
    X(ctx, rmsnorm, kvs_rmsnorm_args)                                                              \
    X(ctx, swiglu, kvs_binary_args)                                                                \
    X(ctx, softmax, kvs_softmax_args)                                                              \
    X(ctx, embedding, kvs_embedding_args)                                                          \
    X(ctx, rope, kvs_rope_args)                                                                    \
    X(ctx, attention, kvs_attention_args)                                                          \
    X(ctx, dwt, kvs_dwt_args)                                                                      \
    X(ctx, idwt, kvs_dwt_args)                                                                     \
    X(ctx, topk, kvs_topk_args)                                                                    \
    X(ctx, topk_global, kvs_topk_args)                                                             \
    X(ctx, topp, kvs_topp_args)                                                                    \
    X(ctx, gather, kvs_rows_args)                                                                  \
    X(ctx, scatter, kvs_rows_args)                                                                 \
    X(ctx, compact, kvs_rows_args)                                                                 \
    X(ctx, log_mass, kvs_binary_args)

#define KVS_OP_ID_(ctx, name, args) KVS_OP_##name,
typedef enum kvs_op_id { KVS_OP_LIST(KVS_OP_ID_, ~) KVS_OP_COUNT } kvs_op_id;

/* "matmul", "attention", ... for op ids; NULL outside [0, KVS_OP_COUNT). Lookup by name: -1 if
 * unknown (core/device.c). */
const char *kvs_op_name(kvs_op_id op);
int kvs_op_from_name(const char *name, size_t len);

/* In a backend's header: `KVS_OP_PROTOTYPES(kvs_cpu_)` declares
 * kvs_status kvs_cpu_<name>(kvs_device *dev, const <args> *a) for every op; in its table:
 * `KVS_OP_TABLE_ENTRIES(kvs_cpu_)` fills every op slot with them. */
#define KVS_OP_PROTO_(pfx, name, args) kvs_status pfx##name(kvs_device *dev, const args *a);
#define KVS_OP_PROTOTYPES(pfx) KVS_OP_LIST(KVS_OP_PROTO_, pfx)
#define KVS_OP_ENTRY_(pfx, name, args) .name = pfx##name,
#define KVS_OP_TABLE_ENTRIES(pfx) KVS_OP_LIST(KVS_OP_ENTRY_, pfx)

/* A kernel variant of one op: data in the backend's variant table, chosen automatically from the
 * device caps and the op's arguments unless an expert or a test forces one (kvs_device_set_variants;
 * KVS_VARIANT at device open). `code` is the backend's own value for it (kvs_device_variant). */
typedef struct kvs_variant {
    kvs_op_id op;
    const char *name;          /* unique within the op, e.g. "portable", "avx512", "main-split4" */
    int code;                  /* backend-defined, != 0 */
    /* optional: 1 when this device can run the variant; else 0 with the reason in why[0..n-1].
     * NULL = always usable. */
    int (*usable)(const kvs_device *dev, char *why, size_t n);
} kvs_variant;

/* One backend: a table of function pointers filled with designated initialisers.
 * Every slot is required unless marked optional (with its default); kvs_device_open refuses a table
 * with a required slot left NULL (KVS_ERR_INTERNAL naming the slot, kvs_backend_check). core/
 * validates all arguments before a call, so a backend may assume valid, consistent input; it is
 * asked supports() first and only called for what it said it supports. */
typedef struct kvs_backend_ops {
    kvs_backend id;
    const char *name;

    kvs_status (*device_count)(int *count);
    kvs_status (*device_describe)(int index, kvs_device_info *info);
    /* Fills dev->impl, dev->caps and dev->info. */
    kvs_status (*device_open)(kvs_device *dev, const kvs_device_params *p);
    void (*device_close)(kvs_device *dev);
    kvs_status (*device_sync)(kvs_device *dev);
    /* optional: NULL = kvs_device_set_threads returns KVS_ERR_UNSUPPORTED */
    kvs_status (*set_threads)(kvs_device *dev, int n_threads);

    kvs_status (*buffer_alloc)(kvs_device *dev, size_t nbytes, void **handle);
    void (*buffer_free)(kvs_device *dev, void *handle);
    kvs_status (*upload)(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n);
    kvs_status (*download)(kvs_device *dev, void *handle, size_t offset, void *dst, size_t n);
    /* Fill n 4-byte words at byte offset with the bit pattern `word`. */
    kvs_status (*fill32)(kvs_device *dev, void *handle, size_t offset, uint32_t word, size_t n);

    /* optional (as ggml's supports_op): 1 when the device can run op `op` with the validated
     * arguments `args` (the op's argument struct) under the variant in force; else 0 and the reason
     * in why[0..n-1] (the front-end returns KVS_ERR_UNSUPPORTED with it). NULL = every valid call is
     * supported. Cheap and free of side effects: it is asked before every op call. */
    int (*supports)(kvs_device *dev, kvs_op_id op, const void *args, char *why, size_t n);

    /* optional: the kernel variants a test or an expert may force, n_variants entries (NULL/0: the
     * backend has one kernel per op). */
    const kvs_variant *variants;
    int n_variants;

#define KVS_OP_SLOT_(ctx, name, args) kvs_status (*name)(kvs_device *dev, const args *a);
    KVS_OP_LIST(KVS_OP_SLOT_, ~)
#undef KVS_OP_SLOT_
} kvs_backend_ops;

/* KVS_OK when every required slot of ops is set, else KVS_ERR_INTERNAL naming the first NULL one
 * (called by kvs_device_open; core/device.c). */
kvs_status kvs_backend_check(const kvs_backend_ops *ops);

struct kvs_device {
    const kvs_backend_ops *ops;
    void *impl;                 /* backend-private state */
    kvs_caps caps;
    kvs_device_info info;
    int64_t bytes_allocated;
    int64_t bytes_peak;         /* kvs_device_bytes_peak: the most bytes_allocated reached */
    int query;                  /* kvs_device_set_query: ops validate and ask supports(), run nothing */
    const kvs_variant *forced[KVS_OP_COUNT]; /* variant forced per op; NULL = automatic */
    struct kvs_profiler *prof;  /* kvs_device_profile: per-op timing table; NULL = off */
    double build_seconds;       /* kernel builds on first use (OpenCL programs, Vulkan pipelines), s:
                                 * the backends add to it, kvs_device_build_seconds reads it */
};

/* ---- profiling (core/profile.c; kvs_device_profile in device.h) ----------------------------- */

/* What the profiler times besides the ops (whose kinds are their kvs_op_id). */
enum { KVS_PROF_UPLOAD = KVS_OP_COUNT, KVS_PROF_DOWNLOAD, KVS_PROF_FILL, KVS_PROF_SYNC, KVS_PROF_KINDS };

/* Monotonic clock, s. */
double kvs_now_s(void);

/* Start of a timed piece of device work: on an asynchronous backend it first waits for the queue
 * (so the time is the piece's own); returns the monotonic clock, s. Call only when dev->prof. */
double kvs_profile_begin(kvs_device *dev);
/* End of it: waits again on an asynchronous backend, then adds the time since t0 (and bytes) to
 * kind's cell of the current layer. */
void kvs_profile_end(kvs_device *dev, int kind, double t0, int64_t bytes);
/* Frees the table (kvs_device_destroy). */
void kvs_profile_free(kvs_device *dev);

/* The code of the variant forced for op on dev, 0 when the backend chooses (core/device.c). */
static inline int kvs_device_variant(const kvs_device *dev, kvs_op_id op) {
    return dev->forced[op] ? dev->forced[op]->code : 0;
}

/* The backends compiled into this build (backends/registry.c); NULL when not built. */
const kvs_backend_ops *kvs_backend_lookup(kvs_backend b);

/* QuantSpec's hierarchical cache append (core/ops.c; used by kvs_cache_write_rows): f32 rows src
 * converted to qh8 and written into both planes, hi (Q4_1 [G][Nd][row], the upper plane: a valid
 * q4_1 cache) and lo (QH8_LO, the same shape: the lower nibbles), at the rows idx names, exactly as
 * kvs_scatter writes one tensor (src [G][n][row] or, src_token_major, [n][G][row]; idx [n] or
 * [G][n]; duplicates: the highest i wins). Each row is coded by kvs_qh8_encode_row's rule
 * (core/quant/quant_encode.c, format core/quant/quant_blocks.h): the CPU calls it, OpenCL
 * (shaders/opencl/rows.cl) and Vulkan (shaders/vulkan/scatter_cvt.comp) transcribe it operation by
 * operation on the device (bit-identical where single-precision division is correctly rounded).
 * Errors: those of kvs_scatter; KVS_ERR_DTYPE (src not F32, hi not Q4_1, lo not QH8_LO),
 * KVS_ERR_SHAPE (lo's shape differs from hi's), KVS_ERR_INVALID_ARGUMENT (lo NULL, of another
 * device, or overlapping src, idx or hi), KVS_ERR_UNSUPPORTED (a device without
 * kvs_caps.kv_hierarchical). */
kvs_status kvs_scatter_qh8(kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx, kvs_tensor *hi, kvs_tensor *lo,
                           int src_token_major);

/* Shared host helpers (core/tensor.c). */
int64_t kvs_tensor_rows(const kvs_tensor *t); /* nelements / ne[0] */

#endif
