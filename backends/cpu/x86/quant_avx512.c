/* CPU backend, x86 AVX-512F kernels of the block-quantized weights (contracts: ../matmul.h):
 * - GEMV (n <= 4 x rows): quant_fused.h's kernels with 16 lanes: 16 weights decoded into a register
 *   (the reference decoder's f32 operations: the reference values bit for bit), one FMA per x row;
 * - the GEMM tiles: the same register decoders, stored into the packed f32 tile.
 * Chosen per call by ops_quant.c (variants "avx512" / "avx512-blas", or automatically on a CPU with
 * AVX-512F and F16C). */
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

#define QF_L 16
typedef __m512 qf_vf;
typedef __m512i qf_vi;
#define QF_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define QF_I8(p) _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define QF_SRL(v, n) _mm512_srl_epi32((v), _mm_cvtsi32_si128(n))
#define QF_SLL(v, n) _mm512_sll_epi32((v), _mm_cvtsi32_si128(n))
#define QF_SRLV(v, c) _mm512_srlv_epi32((v), (c))
#define QF_AND(a, b) _mm512_and_si512((a), (b))
#define QF_OR(a, b) _mm512_or_si512((a), (b))
#define QF_ADDI(a, b) _mm512_add_epi32((a), (b))
#define QF_SUBI(a, b) _mm512_sub_epi32((a), (b))
#define QF_SETI(c) _mm512_set1_epi32(c)
#define QF_IOTA _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define QF_TABLE _mm512_setr_epi32(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
#define QF_LUT16(idx, t) _mm512_permutexvar_epi32((idx), (t))
#define QF_CVT(v) _mm512_cvtepi32_ps(v)
#define QF_SETF(f) _mm512_set1_ps(f)
#define QF_MULF(a, b) _mm512_mul_ps((a), (b))
#define QF_ADDF(a, b) _mm512_add_ps((a), (b))
#define QF_SUBF(a, b) _mm512_sub_ps((a), (b))
#define QF_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define QF_LOADF(p) _mm512_loadu_ps(p)
#define QF_STOREF(p, v) _mm512_storeu_ps((p), (v))
#define QF_ZERO _mm512_setzero_ps()
#define QF_HSUM(v) _mm512_reduce_add_ps(v)
#include "../quant_fused.h"
/* out[0..3] = the lane sums of a, b, c, d (512 -> 256 bits, then pairwise horizontal adds) */
static inline __attribute__((always_inline)) void hsum4_512(__m512 a, __m512 b, __m512 c, __m512 d, float *out) {
#define H256_(x) _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
    const __m256 ab = _mm256_hadd_ps(H256_(a), H256_(b)), cd = _mm256_hadd_ps(H256_(c), H256_(d));
#undef H256_
    const __m256 abcd = _mm256_hadd_ps(ab, cd);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
#define QF_QK_ROWS 4
#define QF_HSUM4(a, b, c, d, out) hsum4_512((a), (b), (c), (d), (out))
#include "att_quant_fused.h"

void kvs_cpu_qdecode_avx512(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    if (!qf_decode(dt, src, n, dst)) kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

void kvs_cpu_qh8_decode_avx512(const void *hi, const void *lo, int64_t nblocks, float *dst) {
    qf_decode_qh8(hi, lo, nblocks, dst);
}

int kvs_cpu_att_qk_q_avx512(kvs_dtype dt, const void *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n,
                            float scale, float *S, int64_t lds) {
    return qf_att_qk(dt, K, rb, Q, d, M, n, scale, S, lds);
}

int kvs_cpu_att_pv_q_avx512(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                         int64_t d, float *O) {
    return qf_att_pv(dt, V, rb, P, ldp, M, n, d, O);
}

void kvs_cpu_qdot_rows_avx512(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    qf_dot_fn f = qf_dot_for(dt, n);
    if (f) f(wrow, x, k, acc);
    else kvs_cpu_qdot_rows_portable(wrow, dt, x, k, n, acc); /* not reached: every block type has one */
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
