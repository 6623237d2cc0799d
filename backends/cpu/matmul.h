/* CPU backend: what ops_dense.c (matmul's driver and portable kernels) shares with the ISA-specific
 * matmul kernels (x86/matmul_avx512.c). */
#ifndef KVS_BACKENDS_CPU_MATMUL_H
#define KVS_BACKENDS_CPU_MATMUL_H

#include <stdint.h>

#include "internal.h"

/* Q8_0 (GGUF): blocks of 32 values, each 34 bytes = f16 scale d + 32 int8 q; value = d * q. */
#define KVS_Q8_BLOCK 32
#define KVS_Q8_BYTES 34

/* Few x rows (decoding: n <= KVS_GEMV_MAX_N): the op is bound by streaming W, so W is read once, in
 * its own dtype, and dotted with every x row (AVX-512 or AVX2 with F16C conversions where the CPU
 * has them, portable 16-lane C otherwise). Rows of W are split over the threads. */
#define KVS_GEMV_MAX_N 4

/* acc[i] = W_row . x_i for i < n (n <= KVS_GEMV_MAX_N); W row of k values in dtype dt (k % 16 == 0;
 * q8_0: k % 32 == 0). AVX-512F + F16C. */
void kvs_cpu_dot_rows_avx512(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);

/* C[8][32] (+)= A[8][K] . B[K][32]: A rows of stride lda, B rows of stride ldb, C rows of stride
 * ldc; load_c = 0 starts from zero. AVX-512F. */
void kvs_cpu_mm_kernel_8x32_avx512(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                   int64_t ldc, int load_c);

/* The same two contracts on AVX2 + FMA + F16C (x86/matmul_avx2.c): the GEMV takes any k (q8_0:
 * k % 32 == 0). */
void kvs_cpu_dot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
void kvs_cpu_mm_kernel_8x32_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                 int64_t ldc, int load_c);

#endif
