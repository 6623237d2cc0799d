/* The dtype table and the reference row dequantizer (contracts: quant.h). */
#include "quant/quant.h"

#include "internal.h"
#include "quant/quant_blocks.h"

static const kvs_dtype_info dtype_table[KVS_DTYPE_COUNT] = {
    [KVS_F32] = {"f32", 1, 4, 0},           [KVS_F16] = {"f16", 1, 2, 1},
    [KVS_BF16] = {"bf16", 1, 2, 30},        [KVS_I32] = {"i32", 1, 4, 26},
    [KVS_Q8_0] = {"q8_0", 32, 34, 8},       [KVS_Q4_0] = {"q4_0", 32, 18, 2},
    [KVS_Q4_1] = {"q4_1", 32, 20, 3},       [KVS_Q5_0] = {"q5_0", 32, 22, 6},
    [KVS_Q5_1] = {"q5_1", 32, 24, 7},       [KVS_IQ4_NL] = {"iq4_nl", 32, 18, 20},
    [KVS_Q2_K] = {"q2_k", 256, 84, 10},     [KVS_Q3_K] = {"q3_k", 256, 110, 11},
    [KVS_Q4_K] = {"q4_k", 256, 144, 12},    [KVS_Q5_K] = {"q5_k", 256, 176, 13},
    [KVS_Q6_K] = {"q6_k", 256, 210, 14},    [KVS_IQ4_XS] = {"iq4_xs", 256, 136, 23},
    /* not GGUF types: the ggml number is one no file uses */
    [KVS_QH8] = {"qh8", 32, 36, UINT32_MAX}, [KVS_QH8_LO] = {"qh8_lo", 32, 16, UINT32_MAX},
};

const kvs_dtype_info *kvs_dtype_info_get(kvs_dtype dt) {
    return ((int)dt >= 0 && dt < KVS_DTYPE_COUNT) ? &dtype_table[dt] : NULL;
}

kvs_dtype kvs_dtype_from_ggml(uint32_t ggml_type) {
    for (int t = 0; t < KVS_DTYPE_COUNT; t++)
        if (t != KVS_I32 && t != KVS_QH8 && t != KVS_QH8_LO && dtype_table[t].ggml_type == ggml_type) return (kvs_dtype)t;
    return KVS_DTYPE_COUNT;
}

kvs_status kvs_dequant_row(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    const kvs_dtype_info *ti = kvs_dtype_info_get(dt);
    if (!ti || ti->block == 1)
        return kvs_error(KVS_ERR_DTYPE, "dequantize: dtype %s is not a block type", ti ? ti->name : "unknown");
    if (n < 0 || n % ti->block != 0)
        return kvs_error(KVS_ERR_DTYPE, "dequantize: %lld values of %s is not a multiple of its block of %d",
                         (long long)n, ti->name, ti->block);
    kvs_qb_decode_n(dt, src, n / ti->block, dst);
    return KVS_OK;
}
