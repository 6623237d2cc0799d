/* kvsieve — backends and devices.
 *
 * A kvs_device is one open backend instance: the CPU, one OpenCL device, or one Vulkan physical
 * device. Every tensor and op lives on one device. Opening a backend that is not compiled in
 * returns KVS_ERR_BACKEND_NOT_BUILT; an index with no device behind it returns KVS_ERR_NO_DEVICE.
 * kvsieve never substitutes another backend or device for the one asked for.
 *
 * Ownership: the caller owns the device and destroys it after every tensor made on it.
 * Thread-safety: one device per thread. Distinct devices may be used from distinct threads.
 * Ordering: ops are enqueued in call order and run in that order; kvs_tensor_download() and
 * kvs_device_sync() wait for all earlier work. On the CPU backend ops run synchronously.
 */
#ifndef KVSIEVE_DEVICE_H
#define KVSIEVE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_backend {
    KVS_BACKEND_CPU = 0,
    KVS_BACKEND_OPENCL = 1,
    KVS_BACKEND_VULKAN = 2,
    KVS_BACKEND_COUNT
} kvs_backend;

/* "cpu", "opencl", "vulkan"; "unknown" for anything else. */
KVS_API const char *kvs_backend_name(kvs_backend b);

/* Parses "cpu" | "opencl" | "vulkan" (case-insensitive).
 * Errors: KVS_ERR_INVALID_ARGUMENT for NULL pointers or an unknown name. */
KVS_API kvs_status kvs_backend_from_name(const char *name, kvs_backend *out);

/* 1 if the backend was compiled into this build, else 0. */
KVS_API int kvs_backend_built(kvs_backend b);

/* What a device can do, filled once when it is opened. A field of 0 means unsupported/unknown. */
typedef struct kvs_caps {
    int fp16_storage;          /* 1: f16 tensors can be read/written by kernels */
    int fp16_arith;            /* 1: kernels may compute in f16 (cl_khr_fp16, shaderFloat16) */
    int bf16_storage;          /* 1: bf16 tensors can be read by kernels */
    int int8_arith;            /* 1: 8-bit integer arithmetic in kernels */
    int subgroup_size;         /* subgroup/SIMD width used by kernels; 0: no subgroups */
    int subgroup_ops;          /* 1: subgroup arithmetic/shuffle/ballot available */
    int64_t shared_mem_bytes;  /* work-group local/shared memory, bytes */
    int max_workgroup_size;    /* max invocations per work-group */
    int64_t max_buffer_bytes;  /* largest single buffer/tensor the device accepts, bytes */
    int64_t max_binding_bytes; /* largest range one kernel may address in one buffer, bytes */
    int64_t total_memory_bytes;/* device memory (host RAM for CPU devices), bytes; 0: unknown */
    int compute_units;         /* cores (CPU), compute units (OpenCL: CL_DEVICE_MAX_COMPUTE_UNITS; PoCL
                                * reports the host's cores); 0: not reported (Vulkan has no such
                                * query; an OpenCL device whose query fails) */
    int unified_memory;        /* 1: device memory is host memory */
    int n_threads;             /* CPU backend: worker threads in use; else 0 */
    int kv_hierarchical;       /* 1: the attention op reads a hierarchical qh8 cache's lower plane
                                * (kvs_attention_params.k_lo / v_lo) and its scatter writes both
                                * planes, so kvs_cache_create makes qh8 caches (CPU, OpenCL and
                                * Vulkan: 1); 0: refused (KVS_ERR_UNSUPPORTED) */
} kvs_caps;

typedef enum kvs_device_type {
    KVS_DEVICE_CPU = 0,
    KVS_DEVICE_GPU_DISCRETE = 1,
    KVS_DEVICE_GPU_INTEGRATED = 2,
    KVS_DEVICE_OTHER = 3
} kvs_device_type;

/* Static description of a device, readable without opening it. Strings are NUL-terminated. */
typedef struct kvs_device_info {
    kvs_backend backend;
    int index;                 /* index within its backend, as given to kvs_device_open */
    kvs_device_type type;
    char name[128];            /* "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA H200", ... */
    char vendor[64];
    char driver[128];          /* driver / platform / API version text */
} kvs_device_info;

/* Number of devices the backend sees on this machine (may be 0).
 * Errors: KVS_ERR_BACKEND_NOT_BUILT; KVS_ERR_BACKEND if the driver/loader fails to enumerate
 * (e.g. no OpenCL ICD installed: reported as 0 devices, not an error). */
KVS_API kvs_status kvs_device_count(kvs_backend b, int *count);

/* Describes device `index` of backend `b` without opening it.
 * Errors: KVS_ERR_BACKEND_NOT_BUILT, KVS_ERR_NO_DEVICE (index out of range), KVS_ERR_INVALID_ARGUMENT. */
KVS_API kvs_status kvs_device_describe(kvs_backend b, int index, kvs_device_info *info);

/* Upper bound of kvs_device_params.n_threads and kvs_device_set_threads. */
#define KVS_MAX_THREADS 1024

typedef struct kvs_device_params {
    kvs_backend backend;  /* default KVS_BACKEND_CPU */
    int index;            /* device index within the backend, default 0 */
    int n_threads;        /* CPU backend worker threads, 0..KVS_MAX_THREADS; 0 (default) = all online
                           * cores */
    int validation;       /* Vulkan: 1 enables VK_LAYER_KHRONOS_validation and turns any
                           * validation message into an error; -1 (default) reads the
                           * KVS_VULKAN_VALIDATION environment variable. Ignored elsewhere. */
} kvs_device_params;

/* Defaults as documented on each field. */
KVS_API kvs_device_params kvs_device_params_default(void);

/* Parses a device spec "BACKEND[:INDEX]" ("cpu", "opencl:1", "vulkan") into p->backend/p->index,
 * leaving other fields alone. Errors: KVS_ERR_INVALID_ARGUMENT (unknown backend, bad index). */
KVS_API kvs_status kvs_device_params_parse(const char *spec, kvs_device_params *p);

typedef struct kvs_device kvs_device;

/* Opens a device. On success *out is the device; on failure *out is NULL.
 * Errors: KVS_ERR_BACKEND_NOT_BUILT, KVS_ERR_NO_DEVICE, KVS_ERR_BACKEND (driver failure, message
 * names the failing call), KVS_ERR_OUT_OF_MEMORY, KVS_ERR_INVALID_ARGUMENT. */
KVS_API kvs_status kvs_device_open(kvs_device **out, const kvs_device_params *p);

/* Destroys a device and sets *dev = NULL. Accepts NULL and *dev == NULL. All tensors created on the
 * device must have been destroyed first. */
KVS_API void kvs_device_destroy(kvs_device **dev);

KVS_API const kvs_caps *kvs_device_caps(const kvs_device *dev);
KVS_API const kvs_device_info *kvs_device_get_info(const kvs_device *dev);
KVS_API kvs_backend kvs_device_backend(const kvs_device *dev);

/* CPU backend: sets the worker thread count (>= 1). Other backends: KVS_ERR_UNSUPPORTED. */
KVS_API kvs_status kvs_device_set_threads(kvs_device *dev, int n_threads);

/* Waits until all enqueued work on the device is complete.
 * Errors: KVS_ERR_BACKEND if the device reports a failure of earlier work. */
KVS_API kvs_status kvs_device_sync(kvs_device *dev);

/* Bytes of device memory currently held by tensors of this device (live allocations). */
KVS_API int64_t kvs_device_bytes_allocated(const kvs_device *dev);
/* The most bytes kvs_device_bytes_allocated has reached since the device was opened or since the
 * last kvs_device_reset_peak (transients inside a call included, e.g. a cache's key layouts both
 * held while one replaces the other). 0 for NULL. */
KVS_API int64_t kvs_device_bytes_peak(const kvs_device *dev);
/* Restarts the peak from the bytes held now. No-op for NULL. */
KVS_API void kvs_device_reset_peak(kvs_device *dev);

/* Wall time spent building kernels since the device was opened, s: OpenCL programs (clBuildProgram,
 * per source and set of compile-time constants) and Vulkan pipelines (per shader and specialization),
 * each built on its first use; the CPU backend builds nothing (0). The decode loops report the share
 * of a generation in kvs_gen_stats.seconds_build. 0 for NULL. */
KVS_API double kvs_device_build_seconds(const kvs_device *dev);

/* ---- profiling ---------------------------------------------------------------------------- */

/* Layers the profile tells apart; work tagged with a higher layer counts as layer
 * KVS_PROFILE_MAX_LAYERS - 1. */
#define KVS_PROFILE_MAX_LAYERS 256
/* The layer tag of the token embedding (kvs_model_forward's lookup of the input tokens' rows, before
 * layer 0): its own cell, apart from layer 0 and from the work outside the layers (-1). */
#define KVS_PROFILE_EMBED (-2)

/* One cell of the profile: the device work of one kind done for one layer. */
typedef struct kvs_profile_entry {
    const char *kind;   /* an op's name ("matmul", "attention", "gather", ...: the op functions' names
                         * without "kvs_"), or "upload", "download", "fill" (kvs_tensor_upload/
                         * download/fill and the cache's clears), "sync" (kvs_device_sync) */
    int layer;          /* the model layer the work was for (kvs_model_forward tags them), in the order
                         * the forward runs: KVS_PROFILE_EMBED (-2): the token embedding; 0 ..
                         * n_layers-1: the layers (a KEEP_X cache's store of layer l's input counts as
                         * layer l); -1: outside any layer (the final norm and logits head, and work
                         * of other callers between forwards: plan uploads, sampling) */
    int64_t calls;
    double seconds;     /* wall time, s: on OpenCL and Vulkan each piece is bracketed by waits for the
                         * queue, so it is the piece's execution time (and the run is slower) */
    int64_t bytes;      /* transfers and fills: bytes moved; ops: 0 */
} kvs_profile_entry;

/* on = 1: starts (or restarts, from zero) timing every op, transfer and sync on dev, per kind and
 * per layer; on = 0: stops and forgets the table. Costs two clock reads per op on the CPU backend;
 * on asynchronous backends a wait for the queue around every op.
 * Errors: KVS_ERR_INVALID_ARGUMENT (dev NULL, on not 0/1), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_device_profile(kvs_device *dev, int on);
/* 1 while dev is profiling (0 for NULL). */
KVS_API int kvs_device_profiling(const kvs_device *dev);
/* Tags the work that follows as layer `layer` (KVS_PROFILE_EMBED: the token embedding; other values
 * < 0: outside any layer); a no-op when not profiling. */
KVS_API void kvs_device_profile_layer(kvs_device *dev, int layer);
/* Copies up to max non-empty cells, ordered by kind then layer (KVS_PROFILE_EMBED, then -1, then
 * 0, 1, ...), to out[] (NULL with max 0 to count) and returns how many there are; 0 when not
 * profiling or dev is NULL. */
KVS_API int64_t kvs_device_profile_read(const kvs_device *dev, kvs_profile_entry *out, int64_t max);

/* ---- support queries (as ggml's supports_op) ---------------------------------------------- */

/* on = 1: until it is set back to 0, every op called on dev (kvs_matmul ... kvs_compact) validates
 * its arguments exactly as a real call and asks the backend whether the device can run it (under
 * the variant in force), but runs nothing and reads or writes no tensor. The op then returns KVS_OK
 * (supported), KVS_ERR_UNSUPPORTED (message: the device's reason) or the validation error the real
 * call would return. Real calls ask the same question first, so a call the query accepted is never
 * refused as unsupported. Used by the tests to skip a case before running it.
 * Errors: KVS_ERR_INVALID_ARGUMENT (dev NULL). */
KVS_API kvs_status kvs_device_set_query(kvs_device *dev, int on);

/* ---- kernel variants (experts and tests) -------------------------------------------------- */

/* A backend may hold several kernels ("variants") for one op, e.g. the CPU backend's portable C and
 * AVX-512 attention, or split-key decoding forced on. It picks one per call from the device caps
 * and the op's arguments; these functions list the variants and force one, so that the tests can
 * check every variant against the reference in one run (checkasm-style) and experts can compare
 * them. Op names are the op functions' names without "kvs_": "matmul", "attention", "topk", ...
 *
 * Number of variants of `op` a test may force on dev (0: the backend has one kernel for it, or op is
 * not an op name); kvs_device_variant_name returns the i-th name (NULL when i is out of range). */
KVS_API int kvs_device_variant_count(const kvs_device *dev, const char *op);
KVS_API const char *kvs_device_variant_name(const kvs_device *dev, const char *op, int i);

/* Forces variants: spec is a comma-separated list of OP:VARIANT ("attention:avx512-split,
 * matmul:blas"); VARIANT "auto" returns that op to automatic choice; NULL or "" returns every op to
 * automatic choice. Applied in order; on error, entries before the bad one stay applied.
 * kvs_device_open applies the environment variable KVS_VARIANT the same way (an error there fails
 * the open), which is the one override of kernel choice for experts, except that one list serves
 * every backend: an entry naming a variant that another backend compiled into this build has but
 * the device's backend has not (KVS_VARIANT=attention:avx512 on an OpenCL device) is skipped there;
 * a variant no built backend has is still an error.
 * Errors: KVS_ERR_INVALID_ARGUMENT (dev NULL, malformed spec, unknown op or variant: the message
 * lists the op's variants; an op named twice in one spec); KVS_ERR_UNSUPPORTED (the device cannot run that variant, e.g. AVX-512
 * kernels on a CPU without AVX-512: the message says why). */
KVS_API kvs_status kvs_device_set_variants(kvs_device *dev, const char *spec);

#ifdef __cplusplus
}
#endif
#endif
