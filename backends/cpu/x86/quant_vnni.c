/* CPU backend, x86 AVX512-VNNI (+BW, VL) kernels of the 8-bit activation GEMV (../matmul.h, "8-bit
 * activations"): quant_q8.h with vpdpbusd / vpdpwssd on 256-bit registers. Variant "avx512-vnni", or
 * automatic on a CPU with them (kvs_cpu_avx512_vnni; AMD Zen 4, Intel Ice Lake and later). */
#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "../attention_q8.h"
#include "../matmul.h"
#include "quant/quant_blocks.h"

#define Q8_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define Q8_DPWSSD(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#include "quant_q8.h"

void kvs_cpu_q8dot_vnni(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc) {
    q8_dot(wrow, dt, x, n, acc);
}

/* Decode attention's Q.K^T on 8-bit query codes (../attention_q8.h): att_q8.h with vpdpbusd. */
#define AQ8_VNNI 1
#define AQ8_ROWS 4
#include "att_q8.h"

int kvs_cpu_att_qk_q8_vnni(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                           float scale, float *S, int64_t lds) {
    return aq8_qk(dt, K, rb, Q, M, n, scale, S, lds);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
