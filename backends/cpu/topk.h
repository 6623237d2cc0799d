/* CPU backend: what ops_topk.c (the top-k driver and portable kernels) shares with the
 * ISA-specific top-k kernels (x86/topk_avx512.c, x86/topk_avx2.c, arm/topk_neon.c): the
 * order-preserving key and the kernels' contracts. */
#ifndef KVS_BACKENDS_CPU_TOPK_H
#define KVS_BACKENDS_CPU_TOPK_H

#include <stdint.h>

#include "cpu_kernels.h"

#define TOPK_KEY_NINF 0x007fffffu /* topk_key(-INFINITY): the lowest key of a number */

static inline uint32_t topk_key(float v) {
    uint32_t u = kvs_f32_bits(v);
    uint32_t isnan = (u & 0x7fffffffu) > 0x7f800000u;
    u = u == 0x80000000u ? 0u : u; /* -0 == +0 */
    uint32_t key = u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
    return isnan ? 0u : key;
}

/* Appends base + i for every x[i] (i < n) with key >= t0; returns the count. ci holds n + 16
 * entries (whole-vector stores). Portable C and AVX-512F (t0 == 0 goes to the C kernel). */
int64_t kvs_cpu_topk_collect_c(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci);
int64_t kvs_cpu_topk_collect_avx512(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci);

/* ck[i] = key of x[ci[i]] for the c (>= 1) candidates, and their key range [*lo, *hi]. AVX-512F
 * (the C kernel is static in ops_topk.c). */
void kvs_cpu_topk_keys_avx512(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo, uint32_t *hi);

/* Copies the entries with key >= t, in order, to sk/si (each holding c + 16); returns the count. */
int64_t kvs_cpu_topk_above_c(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk, int32_t *si);
int64_t kvs_cpu_topk_above_avx512(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                  int32_t *si);

/* out_val[i] = x[out_idx[i]] for i < k. AVX-512F (the C kernel is static in ops_topk.c). */
void kvs_cpu_topk_values_avx512(const float *x, const int32_t *out_idx, int64_t k, float *out_val);

/* The same four kernels on AVX2 (x86/topk_avx2.c; tails shorter than 8 in scalar code). */
int64_t kvs_cpu_topk_collect_avx2(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci);
void kvs_cpu_topk_keys_avx2(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo, uint32_t *hi);
int64_t kvs_cpu_topk_above_avx2(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                int32_t *si);
void kvs_cpu_topk_values_avx2(const float *x, const int32_t *out_idx, int64_t k, float *out_val);

/* The same four kernels on aarch64 NEON (arm/topk_neon.c; tails shorter than 4 in scalar code). */
int64_t kvs_cpu_topk_collect_neon(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci);
void kvs_cpu_topk_keys_neon(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo, uint32_t *hi);
int64_t kvs_cpu_topk_above_neon(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                int32_t *si);
void kvs_cpu_topk_values_neon(const float *x, const int32_t *out_idx, int64_t k, float *out_val);

#endif
