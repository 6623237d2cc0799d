/* kvsieve — tensors: device buffers with a dtype and a shape.
 *
 * Shape: up to 4 dimensions, ne[0] fastest (GGUF/ggml order). Comments throughout write shapes
 * slowest-first in brackets, so a tensor with ne = {d, n_heads, n_q} is written [n_q][n_heads][d].
 * Tensors are always dense (contiguous); a view is a dense sub-range of another tensor's bytes.
 *
 * Ownership: the caller owns every tensor it creates (kvs_tensor_create or kvs_tensor_view) and
 * destroys it with kvs_tensor_destroy. A view keeps its parent's memory alive; destroying the parent
 * first is allowed. Thread-safety: as the device (one device per thread).
 */
#ifndef KVSIEVE_TENSOR_H
#define KVSIEVE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/device.h"
#include "kvsieve/export.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_MAX_DIMS 4

typedef enum kvs_dtype {
    KVS_F32 = 0,   /* IEEE binary32 */
    KVS_F16 = 1,   /* IEEE binary16 */
    KVS_BF16 = 2,  /* bfloat16: upper 16 bits of binary32; converted with round-to-nearest-even */
    KVS_I32 = 3,   /* int32: token ids, positions, indices */
    KVS_Q8_0 = 4,  /* GGUF Q8_0: blocks of 32 values = f16 scale + 32 x int8 (34 bytes); ne[0] % 32 == 0 */
    /* llama.cpp's other block-quantized GGUF types (layouts: core/quant/quant_blocks.h). A tensor of a
     * block type has ne[0] % block == 0; its rows are whole blocks. Blocks of 32 values: */
    KVS_Q4_0 = 5,   /* 18 bytes */
    KVS_Q4_1 = 6,   /* 20 bytes */
    KVS_Q5_0 = 7,   /* 22 bytes */
    KVS_Q5_1 = 8,   /* 24 bytes */
    KVS_IQ4_NL = 9, /* 18 bytes */
    /* super-blocks of 256 values: */
    KVS_Q2_K = 10,   /* 84 bytes */
    KVS_Q3_K = 11,   /* 110 bytes */
    KVS_Q4_K = 12,   /* 144 bytes */
    KVS_Q5_K = 13,   /* 176 bytes */
    KVS_Q6_K = 14,   /* 210 bytes */
    KVS_IQ4_XS = 15, /* 136 bytes */
    /* QuantSpec's hierarchical 4/8-bit KV-cache type (Tiwari et al. 2025; layout: core/quant/
     * quant_blocks.h). KVS_QH8 names the cache type only (kvs_cache_params.type_k/type_v; 36 bytes
     * per 32 values): a qh8 cache stores each K or V as two tensors, the upper-nibble plane as a
     * KVS_Q4_1 tensor (a valid 4-bit cache on its own) and the lower-nibble plane as a KVS_QH8_LO
     * tensor. kvs_tensor_create refuses KVS_QH8; KVS_QH8_LO tensors hold bytes that only decode
     * together with their Q4_1 plane (no op but the attention's k_lo/v_lo and the row moves reads
     * them). Neither is a GGUF type. */
    KVS_QH8 = 16,    /* 36 bytes per 32 values (20 upper + 16 lower) */
    KVS_QH8_LO = 17, /* 16 bytes per 32 values: the lower nibbles */
    KVS_DTYPE_COUNT
} kvs_dtype;

/* "f32", "f16", "bf16", "i32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k",
 * "q4_k", "q5_k", "q6_k", "iq4_xs"; "unknown" otherwise. */
KVS_API const char *kvs_dtype_name(kvs_dtype t);

/* Values per block: 1 for F32/F16/BF16/I32, 32 or 256 for the block types; 0 for an unknown dtype. */
KVS_API int kvs_dtype_block(kvs_dtype t);

/* 1 for the block-quantized dtypes with a decoder of their own (Q8_0 .. IQ4_XS), else 0 (also for
 * the hierarchical cache planes KVS_QH8 / KVS_QH8_LO, which kvs_dtype_block reports as 32). */
KVS_API int kvs_dtype_is_quant(kvs_dtype t);

/* Bytes for n elements of dtype t (n must be a multiple of the block size for block types).
 * Returns 0 for an unknown dtype or a partial block. */
KVS_API size_t kvs_dtype_bytes(kvs_dtype t, int64_t n);

typedef struct kvs_tensor kvs_tensor;

/* Creates a dense tensor of ndim (1..4) dimensions ne[0..ndim-1] (each >= 1) on dev. Contents are
 * undefined until written.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, ndim out of 1..4, ne < 1, size overflow),
 * KVS_ERR_DTYPE (unknown dtype, KVS_QH8 (a cache type only), or a block type with ne[0] % block != 0), KVS_ERR_OUT_OF_MEMORY (including a
 * size above caps.max_buffer_bytes; the message names the limit), KVS_ERR_BACKEND. */
KVS_API kvs_status kvs_tensor_create(kvs_tensor **out, kvs_device *dev, kvs_dtype dtype, int ndim,
                                     const int64_t *ne);

/* Convenience: ne given as arguments, ne0 fastest; pass 0 for unused trailing dims (ndim is one
 * past the last dim > 0; a 0 before it counts as 1). Errors: as kvs_tensor_create. */
KVS_API kvs_status kvs_tensor_new(kvs_tensor **out, kvs_device *dev, kvs_dtype dtype, int64_t ne0,
                                  int64_t ne1, int64_t ne2, int64_t ne3);

/* A dense view of `parent`: ndim dims ne[], starting `offset_elems` elements into the parent
 * (counted in the parent's dtype, block-aligned for the block types). The view has the parent's dtype.
 * Typical use: rows [r0, r0+n) of a [rows][dim] tensor = offset r0*dim, ne = {dim, n}.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL), KVS_ERR_OUT_OF_RANGE (view exceeds parent). */
KVS_API kvs_status kvs_tensor_view(kvs_tensor **out, kvs_tensor *parent, int64_t offset_elems,
                                   int ndim, const int64_t *ne);

/* Destroys a tensor or view and sets *t = NULL. Accepts NULL and *t == NULL. */
KVS_API void kvs_tensor_destroy(kvs_tensor **t);

/* Copies nbytes from host memory src into the tensor at byte offset `offset`.
 * Errors: KVS_ERR_INVALID_ARGUMENT, KVS_ERR_OUT_OF_RANGE (offset + nbytes > kvs_tensor_nbytes),
 * KVS_ERR_BACKEND. Waits until the copy is complete (src may be reused on return). */
KVS_API kvs_status kvs_tensor_upload(kvs_tensor *t, const void *src, size_t offset, size_t nbytes);

/* Copies nbytes at byte offset `offset` of the tensor into host memory dst. Waits for all earlier
 * work on the device first. Errors: as kvs_tensor_upload. */
KVS_API kvs_status kvs_tensor_download(const kvs_tensor *t, void *dst, size_t offset, size_t nbytes);

/* Fills every element of an F32 or I32 tensor with `value` (converted to int32 for I32).
 * Errors: KVS_ERR_DTYPE for other dtypes, KVS_ERR_OUT_OF_RANGE (value does not fit an I32 tensor),
 * KVS_ERR_INVALID_ARGUMENT (NULL), KVS_ERR_BACKEND. */
KVS_API kvs_status kvs_tensor_fill(kvs_tensor *t, double value);

KVS_API kvs_dtype kvs_tensor_dtype(const kvs_tensor *t);
KVS_API int kvs_tensor_ndim(const kvs_tensor *t);
/* ne[i] for i < ndim, 1 beyond. */
KVS_API int64_t kvs_tensor_ne(const kvs_tensor *t, int i);
KVS_API int64_t kvs_tensor_nelements(const kvs_tensor *t);
KVS_API size_t kvs_tensor_nbytes(const kvs_tensor *t);
KVS_API kvs_device *kvs_tensor_device(const kvs_tensor *t);

/* Optional debug name (copied, truncated to 63 bytes), used in error messages. */
KVS_API void kvs_tensor_set_name(kvs_tensor *t, const char *name);
KVS_API const char *kvs_tensor_name(const kvs_tensor *t);

/* Host conversions, usable without a device. Round-to-nearest-even; NaN stays NaN. */
KVS_API uint16_t kvs_f32_to_f16(float f);
KVS_API float kvs_f16_to_f32(uint16_t h);
KVS_API uint16_t kvs_f32_to_bf16(float f);
KVS_API float kvs_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
