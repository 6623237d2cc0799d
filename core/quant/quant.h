/* The dtype table (values per block, bytes per block, ggml type number) and the reference row
 * dequantizer of the block types. Block layouts and the per-block decoders: quant_blocks.h.
 * Part of the base room (tests/check_layers.py): backend-neutral, used by tensors, the GGUF loader,
 * every backend's quantized products and the quantized KV cache. Not installed. */
#ifndef KVS_CORE_QUANT_H
#define KVS_CORE_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

typedef struct kvs_dtype_info {
    const char *name;   /* kvs_dtype_name */
    int block;          /* values per block (1: a plain element type) */
    int bytes;          /* bytes per block */
    uint32_t ggml_type; /* the ggml / GGUF tensor type number */
} kvs_dtype_info;

/* The entry of dt, or NULL for a value outside the enum. */
const kvs_dtype_info *kvs_dtype_info_get(kvs_dtype dt);

/* The kvs_dtype of a ggml type number; KVS_DTYPE_COUNT when kvsieve has no dtype for it. */
kvs_dtype kvs_dtype_from_ggml(uint32_t ggml_type);

/* dst[0 .. n) = the n values of a block-type row segment src (n % block == 0; n / block whole blocks
 * read, no alignment needed), decoded by quant_blocks.h (bit-exact against gguf-py's dequantizers).
 * Errors: KVS_ERR_DTYPE (dt not a block type, or n not a multiple of its block; the message names
 * both). */
kvs_status kvs_dequant_row(kvs_dtype dt, const void *src, int64_t n, float *dst);

/* 1 when dt has a row quantizer (q8_0, q4_0, q4_1, iq4_nl: the quantized KV-cache types). */
int kvs_quant_can_encode(kvs_dtype dt);

/* dst = the n / 32 blocks of dtype dt coding src[0 .. n) (quant_encode.c states the scale rules,
 * after llama.cpp's reference quantizers; a block holding a NaN or an infinity codes as the NaN block:
 * f16 NaN scale (and min), zero codes, so every value decodes to NaN). Errors: KVS_ERR_DTYPE (dt without an encoder, or n not a
 * multiple of 32; the message names both). */
kvs_status kvs_quant_row(kvs_dtype dt, const float *src, int64_t n, void *dst);
/* The same without checks (dt encodable, n % 32 == 0): the CPU backend's scatter calls it per row. */
void kvs_quant_row_unchecked(kvs_dtype dt, const float *src, int64_t n, void *dst);

/* The qh8 encoder (QuantSpec's hierarchical 4/8-bit cache type; format and rule: quant_blocks.h):
 * src[0 .. n) -> n / 32 upper blocks at hi (q4_1 blocks, 20 bytes each) and n / 32 lower blocks at
 * lo (16 bytes each). n % 32 == 0 (not checked: the cache's write path, which checked head_dim). A
 * block of one repeated value codes exactly up to the f16 rounding of m; a block holding a NaN or an
 * infinity codes as the NaN block (upper plane: NaN d and m, zero nibbles; lower plane zeros). */
void kvs_qh8_encode_row(const float *src, int64_t n, void *hi, void *lo);

#endif
