/* CPU backend: what ops_wavelet.c (the DWT / IDWT driver, the wrapped ends and the portable level
 * kernels) shares with the ISA-specific level kernels (x86/wavelet_avx2.c). */
#ifndef KVS_BACKENDS_CPU_WAVELET_H
#define KVS_BACKENDS_CPU_WAVELET_H

#include <stdint.h>

#define KVS_DWT_MAX_TAPS 8

/* Analysis body: a[i] = sum_t lo[t] c[2i + t], d[i] = sum_t hi[t] c[2i + t] for i < the returned
 * count (body rounded down to a multiple of 8); every tap read lies inside c as long as
 * 2 (body - 1) + T - 1 < length of c. T even, <= KVS_DWT_MAX_TAPS. AVX2 + FMA. */
int64_t kvs_cpu_dwt_body_avx2(const float *c, int64_t body, float *a, float *d, const float *lo, const float *hi,
                              int T);

/* Synthesis body: c[2p] = sum_u lo[2u] a[p-u] + hi[2u] d[p-u], c[2p+1] = sum_u lo[2u+1] a[p-u] +
 * hi[2u+1] d[p-u] for p in [p0, returned) (8 pairs a step, stopping before p1); needs p0 >= T/2 - 1
 * and a, d readable up to p1 - 1. AVX2 + FMA. */
int64_t kvs_cpu_idwt_body_avx2(const float *a, const float *d, int64_t p0, int64_t p1, float *c, const float *lo,
                               const float *hi, int T);

/* The same two contracts on aarch64 NEON (arm/wavelet_neon.c): 4 outputs (pairs) a step, so the
 * analysis body is rounded down to a multiple of 4. */
int64_t kvs_cpu_dwt_body_neon(const float *c, int64_t body, float *a, float *d, const float *lo, const float *hi,
                              int T);
int64_t kvs_cpu_idwt_body_neon(const float *a, const float *d, int64_t p0, int64_t p1, float *c, const float *lo,
                               const float *hi, int T);

#endif
