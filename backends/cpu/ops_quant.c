/* CPU backend: the portable kernels of the block-quantized weights (contracts: matmul.h) and the
 * choice of the ISA variant per call. The block decoders are core/quant/quant_blocks.h's (written once
 * for every backend and the quantized KV cache); x86/quant_avx2.c, x86/quant_avx512.c and
 * arm/quant_neon.c compile the same decoders for their ISA (quant_fused.h) with intrinsic f32 FMA dot
 * products. */
#include "cpu_kernels.h"
#include "matmul.h"
#include "quant/quant_blocks.h"

KVS_CLONES
void kvs_cpu_qdecode_portable(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

KVS_CLONES
void kvs_cpu_qdot_rows_portable(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    const int blk = kvs_dtype_block(dt);
    const size_t bbytes = kvs_dtype_bytes(dt, blk);
    float tmp[KVS_QCHUNK];
    float s[KVS_GEMV_MAX_N][16] = {{0}};
    for (int64_t c = 0; c < k; c += KVS_QCHUNK) {
        const int64_t len = k - c < KVS_QCHUNK ? k - c : KVS_QCHUNK; /* a multiple of 32 */
        kvs_qb_decode_n(dt, (const uint8_t *)wrow + (size_t)(c / blk) * bbytes, len / blk, tmp);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * k + c;
            for (int64_t t = 0; t < len; t += 16)
                for (int l = 0; l < 16; l++) s[i][l] += tmp[t + l] * xi[t + l];
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float tot = 0.0f;
        for (int l = 0; l < 16; l++) tot += s[i][l];
        acc[i] = tot;
    }
}

void kvs_cpu_quant_kernels(const kvs_device *dev, kvs_op_id op, kvs_cpu_qdot_fn *dot, kvs_cpu_qdecode_fn *decode) {
    const int isa = kvs_cpu_isa(dev, op); /* the forced variant's, else the best this CPU runs */
    kvs_cpu_qdot_fn d = kvs_cpu_qdot_rows_portable;
    kvs_cpu_qdecode_fn c = kvs_cpu_qdecode_portable;
#if KVS_CPU_HAVE_AVX512
    if (isa == KVS_ISA_AVX512) {
        d = kvs_cpu_qdot_rows_avx512;
        c = kvs_cpu_qdecode_avx512;
    }
#endif
#if KVS_CPU_HAVE_AVX2
    if (isa == KVS_ISA_AVX2) {
        d = kvs_cpu_qdot_rows_avx2;
        c = kvs_cpu_qdecode_avx2;
    }
#endif
#if KVS_CPU_HAVE_NEON
    if (isa == KVS_ISA_NEON) {
        d = kvs_cpu_qdot_rows_neon;
        c = kvs_cpu_qdecode_neon;
    }
#endif
    (void)isa; /* builds without SIMD kernels */
    if (dot) *dot = d;
    if (decode) *decode = c;
}
