/* CPU backend, x86 AVX-512F kernels of the block-quantized weights (contracts: ../matmul.h):
 * core/quant/quant_blocks.h's decoders compiled for AVX-512 (the compiler vectorises them), then the
 * decoded chunk dotted with up to 4 x rows by 16-wide FMA. Chosen per call by ops_quant.c (variants
 * "avx512" / "avx512-blas", or automatically on a CPU with AVX-512F and F16C). */
#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "../matmul.h"
#include "quant/quant_blocks.h"

void kvs_cpu_qdecode_avx512(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

void kvs_cpu_qdot_rows_avx512(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    const int blk = kvs_dtype_block(dt);
    const size_t bbytes = kvs_dtype_bytes(dt, blk);
    float tmp[KVS_QCHUNK] __attribute__((aligned(64)));
    __m512 a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += KVS_QCHUNK) {
        const int64_t len = k - c < KVS_QCHUNK ? k - c : KVS_QCHUNK; /* a multiple of 32 */
        kvs_qb_decode_n(dt, (const uint8_t *)wrow + (size_t)(c / blk) * bbytes, len / blk, tmp);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * k + c;
            __m512 a0 = a[i][0], a1 = a[i][1];
            for (int64_t t = 0; t < len; t += 32) {
                a0 = _mm512_fmadd_ps(_mm512_load_ps(tmp + t), _mm512_loadu_ps(xi + t), a0);
                a1 = _mm512_fmadd_ps(_mm512_load_ps(tmp + t + 16), _mm512_loadu_ps(xi + t + 16), a1);
            }
            a[i][0] = a0;
            a[i][1] = a1;
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = _mm512_reduce_add_ps(_mm512_add_ps(a[i][0], a[i][1]));
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
