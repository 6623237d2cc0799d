/* CPU backend: what ops_dense.c (matmul's driver and portable kernels) shares with the ISA-specific
 * matmul kernels (x86/matmul_avx512.c, x86/matmul_avx2.c, x86/quant_*.c, arm/quant_neon.c; the other
 * NEON GEMV kernels: arm/neon.h). */
#ifndef KVS_BACKENDS_CPU_MATMUL_H
#define KVS_BACKENDS_CPU_MATMUL_H

#include <stdint.h>

#include "internal.h"

/* Few x rows (decoding: n <= KVS_GEMV_MAX_N): the op is bound by streaming W, so W is read once, in
 * its own dtype, and dotted with every x row (AVX-512 or AVX2 with F16C conversions where the CPU
 * has them, portable 16-lane C otherwise). Rows of W are split over the threads. */
#define KVS_GEMV_MAX_N 4

/* acc[i] = W_row . x_i for i < n (n <= KVS_GEMV_MAX_N); W row of k values in dtype dt (F32, F16,
 * BF16; k % 16 == 0). AVX-512F + F16C. */
void kvs_cpu_dot_rows_avx512(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);

/* C[8][32] (+)= A[8][K] . B[K][32]: A rows of stride lda, B rows of stride ldb, C rows of stride
 * ldc; load_c = 0 starts from zero. AVX-512F. */
void kvs_cpu_mm_kernel_8x32_avx512(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                   int64_t ldc, int load_c);

/* The same two contracts on AVX2 + FMA + F16C (x86/matmul_avx2.c): the GEMV takes F32, F16, BF16
 * rows of any k. */
void kvs_cpu_dot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
void kvs_cpu_mm_kernel_8x32_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                 int64_t ldc, int load_c);

/* ---- block-quantized weights (Q4_0 ... IQ4_XS, Q8_0 too; layouts: core/quant/quant_blocks.h) ----
 * Products read the blocks directly: a chunk of at most KVS_QCHUNK values of a W row is decoded (the
 * type's reference decoder, compiled for the ISA) into an L1-resident f32 buffer and dotted with the x
 * rows by f32 FMA. Activations stay f32 (no 8-bit quantization of x as llama.cpp's CPU path does), so
 * the only rounding is f32 accumulation: the same error budget as F16/BF16 weights. One variant of
 * each function per ISA: _portable (ops_quant.c, plain C), _avx2 (x86/quant_avx2.c, AVX2 + FMA +
 * F16C), _avx512 (x86/quant_avx512.c, AVX-512F), _neon (arm/quant_neon.c, aarch64 NEON); chosen per
 * call by kvs_cpu_quant_kernels. */
#define KVS_QCHUNK 256

/* acc[i] = W_row . x_i for i < n (n <= KVS_GEMV_MAX_N); W row of k values of block type dt (k % block
 * == 0), x rows of stride k. */
typedef void (*kvs_cpu_qdot_fn)(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
/* dst[0 .. n) = the n values (n % block == 0) of the block-type row segment src. */
typedef void (*kvs_cpu_qdecode_fn)(kvs_dtype dt, const void *src, int64_t n, float *dst);

void kvs_cpu_qdot_rows_portable(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
void kvs_cpu_qdecode_portable(kvs_dtype dt, const void *src, int64_t n, float *dst);
void kvs_cpu_qdot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
void kvs_cpu_qdecode_avx2(kvs_dtype dt, const void *src, int64_t n, float *dst);
void kvs_cpu_qdot_rows_avx512(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
void kvs_cpu_qdecode_avx512(kvs_dtype dt, const void *src, int64_t n, float *dst);
void kvs_cpu_qdot_rows_neon(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);
void kvs_cpu_qdecode_neon(kvs_dtype dt, const void *src, int64_t n, float *dst);

/* Attention over a quantized KV cache (x86/att_quant_fused.h): O[r][:] += sum_{j<n} P[r*ldp + j] V_j
 * for r < M, V_j row j (d values, d % 32 == 0, row stride rb bytes) of dtype dt, decoded in registers.
 * Returns 0 (nothing done) for a dtype without a fused kernel (q8_0, q4_0, q4_1, iq4_nl have one). */
/* S[r*lds + j] = scale * Q_r . K_j for r < M, j < n: Q [M][d] f32, K_j row j of dtype dt (row stride
 * rb bytes), decoded in registers, four keys at a time. 0 (nothing done) for a dtype without it. */
int kvs_cpu_att_qk_q_avx2(kvs_dtype dt, const void *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n,
                          float scale, float *S, int64_t lds);
int kvs_cpu_att_qk_q_avx512(kvs_dtype dt, const void *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n,
                            float scale, float *S, int64_t lds);
int kvs_cpu_att_pv_q_avx2(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                          int64_t d, float *O);
int kvs_cpu_att_pv_q_avx512(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                            int64_t d, float *O);

/* The kernels matmul / embedding use on dev: the forced variant's ISA (portable, avx2*, avx512*,
 * neon*), else the best this CPU runs (AVX-512F+F16C, else AVX2+FMA+F16C, else portable; NEON on
 * aarch64). dot or decode may be NULL. */
void kvs_cpu_quant_kernels(const kvs_device *dev, kvs_op_id op, kvs_cpu_qdot_fn *dot, kvs_cpu_qdecode_fn *decode);

#endif
