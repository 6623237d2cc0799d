/* CPU backend, x86 AVX2 + FMA + F16C kernels of the block-quantized weights (contracts: ../matmul.h):
 * - GEMV (n <= 4 x rows): quant_fused.h's kernels with 8 lanes: 8 weights decoded into a register
 *   (the reference decoder's f32 operations: the reference values bit for bit), one FMA per x row;
 * - the GEMM tiles: the same register decoders, stored into the packed f32 tile.
 * Chosen per call by ops_quant.c (variant "avx2", or automatically on a CPU with AVX2 but no
 * AVX-512). Compiled, as every x86/AREA_avx2.c, with -mavx2 -mfma -mf16c (the static library in
 * backends/cpu/meson.build). */
#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_AVX2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "../attention_q8.h"
#include "../matmul.h"
#include "quant/quant_blocks.h"

/* 16-entry table lookup with 8-lane permutes: entries 0..7 and 8..15, chosen per lane */
static inline __attribute__((always_inline)) __m256i lut16_avx2(__m256i idx, const int32_t *t) {
    const __m256i lo = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)t), idx);
    const __m256i hi = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(t + 8)), idx);
    return _mm256_blendv_epi8(lo, hi, _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
}
static const int32_t iq4_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline __attribute__((always_inline)) float hsum256(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#define QF_L 8
typedef __m256 qf_vf;
typedef __m256i qf_vi;
#define QF_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define QF_I8(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define QF_SRL(v, n) _mm256_srl_epi32((v), _mm_cvtsi32_si128(n))
#define QF_SLL(v, n) _mm256_sll_epi32((v), _mm_cvtsi32_si128(n))
#define QF_SRLV(v, c) _mm256_srlv_epi32((v), (c))
#define QF_AND(a, b) _mm256_and_si256((a), (b))
#define QF_OR(a, b) _mm256_or_si256((a), (b))
#define QF_ADDI(a, b) _mm256_add_epi32((a), (b))
#define QF_SUBI(a, b) _mm256_sub_epi32((a), (b))
#define QF_SETI(c) _mm256_set1_epi32(c)
#define QF_IOTA _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define QF_TABLE iq4_table
#define QF_LUT16(idx, t) lut16_avx2((idx), (t))
#define QF_CVT(v) _mm256_cvtepi32_ps(v)
#define QF_SETF(f) _mm256_set1_ps(f)
#define QF_MULF(a, b) _mm256_mul_ps((a), (b))
#define QF_ADDF(a, b) _mm256_add_ps((a), (b))
#define QF_SUBF(a, b) _mm256_sub_ps((a), (b))
#define QF_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define QF_LOADF(p) _mm256_loadu_ps(p)
#define QF_STOREF(p, v) _mm256_storeu_ps((p), (v))
#define QF_ZERO _mm256_setzero_ps()
#define QF_HSUM(v) hsum256(v)
#include "../quant_fused.h"
/* out[0..3] = the lane sums of a, b, c, d (pairwise horizontal adds) */
static inline __attribute__((always_inline)) void hsum4_256(__m256 a, __m256 b, __m256 c, __m256 d, float *out) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
#define QF_QK_ROWS 2
#define QF_HSUM4(a, b, c, d, out) hsum4_256((a), (b), (c), (d), (out))
#include "att_quant_fused.h"

void kvs_cpu_qdecode_avx2(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    if (!qf_decode(dt, src, n, dst)) kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

int kvs_cpu_att_qk_q_avx2(kvs_dtype dt, const void *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n,
                          float scale, float *S, int64_t lds) {
    return qf_att_qk(dt, K, rb, Q, d, M, n, scale, S, lds);
}

int kvs_cpu_att_pv_q_avx2(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                         int64_t d, float *O) {
    return qf_att_pv(dt, V, rb, P, ldp, M, n, d, O);
}

void kvs_cpu_qdot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    qf_dot_fn f = qf_dot_for(dt, n);
    if (f) f(wrow, x, k, acc);
    else kvs_cpu_qdot_rows_portable(wrow, dt, x, k, n, acc); /* not reached: every block type has one */
}

/* The 8-bit activation GEMV (../matmul.h): quant_q8.h with vpmaddubsw + vpmaddwd. */
#define Q8_DPBUSD(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#define Q8_DPWSSD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#include "quant_q8.h"

void kvs_cpu_q8dot_avx2(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc) {
    q8_dot(wrow, dt, x, n, acc);
}

/* Decode attention's Q.K^T on 8-bit query codes (../attention_q8.h): att_q8.h with vpmaddubsw. */
#define AQ8_VNNI 0
#define AQ8_ROWS 2
#include "att_q8.h"

int kvs_cpu_att_qk_q8_avx2(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                           float scale, float *S, int64_t lds) {
    return aq8_qk(dt, K, rb, Q, M, n, scale, S, lds);
}
#endif
