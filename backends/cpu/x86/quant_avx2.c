/* CPU backend, x86 AVX2 + FMA + F16C kernels of the block-quantized weights (contracts: ../matmul.h):
 * core/quant/quant_blocks.h's decoders compiled for AVX2 (the compiler vectorises them), then the
 * decoded chunk dotted with up to 4 x rows by 8-wide FMA. Chosen per call by ops_quant.c (variant
 * "avx2", or automatically on a CPU with AVX2 but no AVX-512). */
#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "../matmul.h"
#include "quant/quant_blocks.h"

void kvs_cpu_qdecode_avx2(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

void kvs_cpu_qdot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    const int blk = kvs_dtype_block(dt);
    const size_t bbytes = kvs_dtype_bytes(dt, blk);
    float tmp[KVS_QCHUNK] __attribute__((aligned(32)));
    __m256 a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int64_t c = 0; c < k; c += KVS_QCHUNK) {
        const int64_t len = k - c < KVS_QCHUNK ? k - c : KVS_QCHUNK; /* a multiple of 32 */
        kvs_qb_decode_n(dt, (const uint8_t *)wrow + (size_t)(c / blk) * bbytes, len / blk, tmp);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * k + c;
            __m256 a0 = a[i][0], a1 = a[i][1];
            for (int64_t t = 0; t < len; t += 32) {
                a0 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t), _mm256_loadu_ps(xi + t), a0);
                a1 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t + 8), _mm256_loadu_ps(xi + t + 8), a1);
                a0 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t + 16), _mm256_loadu_ps(xi + t + 16), a0);
                a1 = _mm256_fmadd_ps(_mm256_load_ps(tmp + t + 24), _mm256_loadu_ps(xi + t + 24), a1);
            }
            a[i][0] = a0;
            a[i][1] = a1;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        __m256 s = _mm256_add_ps(a[i][0], a[i][1]);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        acc[i] = _mm_cvtss_f32(h);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
