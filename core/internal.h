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
    int64_t n_q, n_heads, n_kv_heads, head_dim, capacity, n_kv;
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

typedef struct kvs_rows_args {
    const kvs_tensor *src; kvs_tensor *dst;  /* compact: src == dst */
    const kvs_tensor *idx;
    int64_t groups, row_bytes, n;            /* n indices per group */
    int64_t src_rows, dst_rows;              /* rows per group in src / dst */
    int idx_shared;                          /* 1: idx is [n], shared by all groups */
    int src_token_major;                     /* scatter: src is [n][G][row] */
} kvs_rows_args;

/* One backend: a table of function pointers filled with designated initialisers.
 * Every slot is required unless marked optional; core/ validates all arguments before a call, so
 * a backend may assume valid, consistent input. Slots return KVS_ERR_UNSUPPORTED (with a message)
 * for variants the device cannot run. */
typedef struct kvs_backend_ops {
    kvs_backend id;
    const char *name;

    kvs_status (*device_count)(int *count);
    kvs_status (*device_describe)(int index, kvs_device_info *info);
    /* Fills dev->impl, dev->caps and dev->info. */
    kvs_status (*device_open)(kvs_device *dev, const kvs_device_params *p);
    void (*device_close)(kvs_device *dev);
    kvs_status (*device_sync)(kvs_device *dev);
    /* optional: NULL = KVS_ERR_UNSUPPORTED */
    kvs_status (*set_threads)(kvs_device *dev, int n_threads);

    kvs_status (*buffer_alloc)(kvs_device *dev, size_t nbytes, void **handle);
    void (*buffer_free)(kvs_device *dev, void *handle);
    kvs_status (*upload)(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n);
    kvs_status (*download)(kvs_device *dev, void *handle, size_t offset, void *dst, size_t n);
    /* Fill n 4-byte words at byte offset with the bit pattern `word`. */
    kvs_status (*fill32)(kvs_device *dev, void *handle, size_t offset, uint32_t word, size_t n);

    kvs_status (*matmul)(kvs_device *dev, const kvs_matmul_args *a);
    kvs_status (*add)(kvs_device *dev, const kvs_tensor *a, const kvs_tensor *b, kvs_tensor *y,
                      int64_t n);
    kvs_status (*copy)(kvs_device *dev, const kvs_tensor *src, kvs_tensor *dst, int64_t n);
    kvs_status (*rmsnorm)(kvs_device *dev, const kvs_tensor *x, const kvs_tensor *w, kvs_tensor *y,
                          int64_t rows, int64_t dim, float eps);
    kvs_status (*swiglu)(kvs_device *dev, const kvs_tensor *gate, const kvs_tensor *up,
                         kvs_tensor *out, int64_t n);
    kvs_status (*softmax)(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, int64_t rows,
                          int64_t n, float scale);
    /* ids are host values, already range-checked. */
    kvs_status (*embedding)(kvs_device *dev, const kvs_tensor *table, const int32_t *ids, int64_t n,
                            kvs_tensor *out, int64_t dim);
    kvs_status (*rope)(kvs_device *dev, const kvs_rope_args *a);
    kvs_status (*attention)(kvs_device *dev, const kvs_attention_args *a);
    kvs_status (*dwt)(kvs_device *dev, const kvs_dwt_args *a);
    kvs_status (*idwt)(kvs_device *dev, const kvs_dwt_args *a);
    kvs_status (*topk)(kvs_device *dev, const kvs_topk_args *a);
    kvs_status (*topk_global)(kvs_device *dev, const kvs_topk_args *a);
    kvs_status (*gather)(kvs_device *dev, const kvs_rows_args *a);
    kvs_status (*scatter)(kvs_device *dev, const kvs_rows_args *a);
    kvs_status (*compact)(kvs_device *dev, const kvs_rows_args *a);
} kvs_backend_ops;

struct kvs_device {
    const kvs_backend_ops *ops;
    void *impl;                 /* backend-private state */
    kvs_caps caps;
    kvs_device_info info;
    int64_t bytes_allocated;
};

/* The backends compiled into this build (backends/registry.c); NULL when not built. */
const kvs_backend_ops *kvs_backend_lookup(kvs_backend b);

/* Shared host helpers (core/tensor.c). */
int64_t kvs_tensor_rows(const kvs_tensor *t); /* nelements / ne[0] */

#endif
