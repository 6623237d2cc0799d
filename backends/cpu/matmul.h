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

/* Narrower tiles of the small GEMM's last x rows, from zero, with the 8x32 tile's arithmetic (one
 * FMA chain per output over t = 0 .. K-1): C[8][16] and C[8][8] = A[8][K] . B[K][w]. */
void kvs_cpu_mm_kernel_8x16_avx512(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                   int64_t ldc);
void kvs_cpu_mm_kernel_8x16_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                 int64_t ldc);
void kvs_cpu_mm_kernel_8x8_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                int64_t ldc);

/* The small GEMM's data movement (x86/matmul_avx2.c; AVX2, so both x86 ISAs share them): x rows
 * [i0, i0 + 32) of x [n][k] into one panel [k][32] (rows >= n zero), and a finished tile Ct
 * [8][ldc] (8 W rows x 32 x rows) into y rows [0, ni) (row stride ldy), W rows [0, nr), added to y
 * when accumulate is set. */
void kvs_cpu_mm_pack_x32_avx2(const float *x, int64_t n, int64_t k, int64_t i0, float *panel);
void kvs_cpu_mm_store_t8x32_avx2(const float *Ct, int64_t ldc, float *y, int64_t ldy, int64_t ni, int64_t nr,
                                 int accumulate);

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
/* dst[0 .. 32 nblocks) = the 8-bit values of nblocks qh8 blocks: upper (q4_1) blocks at hi, 20 bytes
 * each, lower blocks at lo, 16 bytes each (core/quant/quant_blocks.h); bit for bit kvs_qb_qh8_n. */
typedef void (*kvs_cpu_qh8_decode_fn)(const void *hi, const void *lo, int64_t nblocks, float *dst);
void kvs_cpu_qh8_decode_portable(const void *hi, const void *lo, int64_t nblocks, float *dst);
void kvs_cpu_qh8_decode_avx2(const void *hi, const void *lo, int64_t nblocks, float *dst);
void kvs_cpu_qh8_decode_avx512(const void *hi, const void *lo, int64_t nblocks, float *dst);
void kvs_cpu_qh8_decode_neon(const void *hi, const void *lo, int64_t nblocks, float *dst);
/* The qh8 decoder of op's ISA on dev (the forced variant's, else the best this CPU runs). */
kvs_cpu_qh8_decode_fn kvs_cpu_qh8_decoder(const kvs_device *dev, kvs_op_id op);

/* ---- 8-bit activations (llama.cpp's CPU scheme; variants portable-q8, avx2-q8, avx512-vnni) ----
 * For products of a block-type W with up to 64 x rows (16 for the 32-value types; ops_dense.c
 * KVS_Q8_MAX_N: decoding, short prompts, small diffusion steps), x is quantized once per call
 * to 8-bit blocks and each W block is dotted with them in integers (llama.cpp: ggml's
 * quantize_row_q8_0 / q8_1 / q8_K and vec_dot_*; the scheme read there, this code our own):
 *   32-value W types (q4_0 ... iq4_nl): x blocks of 32, d = amax / 127 (kept rounded to f16, as
 *     block_q8_0/q8_1 store it), q = round(x / d) (the unrounded d), s = f16(d * sum q) (q8_1's s,
 *     for the types with a min: sum_i (d_w q_i + m) x_i ~ d_w d sum q_i y_i + m s);
 *   256-value W types (q2_K ... iq4_xs): x blocks of 256, d = 1 / (-127 / max) (max: the value of
 *     largest magnitude, signed; f32 as block_q8_K), q = min(127, rint(-127 / max * x)), and the
 *     integer sums of every 16 q (bsums) for the mins and offsets.
 * Error against the f32 product: |x - d q| <= 0.5 d (+ 127 |d - f16(d)| <= 0.062 d for the f16
 * scale) per value, so |y - y_exact| <= sum_blocks 0.57 d_b sum_{i in b} |w_i| (+ |m| |s| 2^-11 for
 * the min types) plus f32 rounding: the bound tests/test_ops_quant.c checks.
 * A block of x holding a NaN or an infinity is quantized to codes 0 with d (and s) NaN, so every
 * product with it is NaN, as the f32 product would be non-finite (rounding alone would turn a NaN
 * into finite codes and lose it). */
typedef struct kvs_q8_rows {
    const int8_t *q;   /* [n][k] the quantized x rows */
    const float *d;    /* [n][k / ba] block scales (ba = 32 or 256, as above) */
    const float *s;    /* [n][k / 32] f16(d * sum q) of the 32-value blocks; NULL for ba = 256 */
    const int16_t *bs; /* [n][k / 16] integer sums of every 16 q */
    int64_t k;         /* values per row */
} kvs_q8_rows;

/* Scratch bytes kvs_cpu_q8_quantize needs for n rows of k (k % 32 == 0; % 256 for the K types). */
size_t kvs_cpu_q8_bytes(int64_t k, int64_t n);
/* Quantizes x [n][k] for products with W of block type dt into scratch (kvs_cpu_q8_bytes), *out
 * pointing into it. Portable C (the quantizer is O(n k), W's traffic is what costs). */
void kvs_cpu_q8_quantize(kvs_dtype dt, const float *x, int64_t k, int64_t n, void *scratch, kvs_q8_rows *out);
/* acc[i] = W_row . x_i for i < n (n <= KVS_GEMV_MAX_N), W row of x->k values of block type dt, in
 * integers per block as above. _portable: every type, plain C (the reference of the other two);
 * _avx2: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q4_K, q5_K, q6_K by AVX2 maddubs; _vnni: the same
 * types by AVX512-VNNI dot products (the 32-value ones two blocks a 512-bit register, the K types
 * on 256-bit registers); q2_K, q3_K, iq4_xs fall back to the portable kernel in both. A row's
 * result does not depend on n or on the other rows (the same operations in the same order). */
typedef void (*kvs_cpu_q8dot_fn)(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc);
void kvs_cpu_q8dot_portable(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc);
void kvs_cpu_q8dot_avx2(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc);
void kvs_cpu_q8dot_vnni(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc);
/* The 8-bit kernel matmul's GEMV uses on dev for weights of type dt (the forced variant's:
 * portable-q8, avx2-q8, avx512-vnni, for every block type; automatic (KVS_CPU_Q8_DEFAULT): the
 * VNNI kernels on a CPU with AVX512-VNNI/BW/VL, else the AVX2 ones, for the types quant_q8.h has
 * SIMD kernels for), or NULL when the f32-activation kernels are chosen (a forced variant without
 * -q8/-vnni; q2_K, q3_K, iq4_xs under the automatic choice; aarch64's NEON; x86 without AVX2). */
kvs_cpu_q8dot_fn kvs_cpu_q8_kernel(const kvs_device *dev, kvs_op_id op, kvs_dtype dt);

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
