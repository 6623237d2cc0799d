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

void kvs_cpu_qh8_decode_avx2(const void *hi, const void *lo, int64_t nblocks, float *dst) {
    qf_decode_qh8(hi, lo, nblocks, dst);
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

/* Decode attention's O += P.V over a q8_0 / q4_0 V on AVX2 (the -q8 variant; contract:
 * ../attention_q8.h): the block scales folded into the weights, W[b][r][j] = P[r][j] d_v(j, b), each
 * V vector only its codes converted (q4_0's offset 8 taken out once per tile: - 8 sum_j W), 2 rows x
 * 32 columns (one block) of O in registers over the tile's keys (16 registers). */

static inline __attribute__((always_inline)) void aq8_pv_block2(const int q4, const int R, const uint8_t *V, int64_t rb,
                                                                const float *W, int64_t n, int64_t d, int64_t b,
                                                                float *O) {
    const int64_t bb = q4 ? 18 : 34;
    __m256 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < 4; u++) acc[r][u] = _mm256_loadu_ps(O + r * d + b * 32 + 8 * u);
    const float *wb = W + b * 4 * AQ8_PV_MAXN;
    const uint8_t *blk = V + b * bb + 2;
    for (int64_t j = 0; j < n; j++, blk += rb) {
        __m256 v[4];
        if (q4) {
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)blk));
            const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 8)));
            const __m256i m4 = _mm256_set1_epi32(15);
            v[0] = _mm256_cvtepi32_ps(_mm256_and_si256(lo, m4));
            v[1] = _mm256_cvtepi32_ps(_mm256_and_si256(hi, m4));
            v[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4));
            v[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4));
        } else {
            for (int u = 0; u < 4; u++) v[u] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 8 * u))));
        }
        for (int r = 0; r < R; r++) {
            const __m256 w = _mm256_broadcast_ss(wb + r * AQ8_PV_MAXN + j);
            for (int u = 0; u < 4; u++) acc[r][u] = _mm256_fmadd_ps(v[u], w, acc[r][u]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < 4; u++) _mm256_storeu_ps(O + r * d + b * 32 + 8 * u, acc[r][u]);
}

static int aq8_pv_f32(kvs_dtype dt, const void *V_, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                      int64_t d, float *O) {
    if ((dt != KVS_Q4_0 && dt != KVS_Q8_0) || d > AQ8_PV_MAXD || n > AQ8_PV_MAXN || d % 32) return 0;
    const uint8_t *V = V_;
    const int q4 = dt == KVS_Q4_0;
    const int64_t nb = d / 32, bb = q4 ? 18 : 34, ldw = (n + 7) & ~(int64_t)7;
    uint16_t dv16[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    float dv[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    float W[(AQ8_PV_MAXD / 32) * 4 * AQ8_PV_MAXN];
    for (int64_t j = 0; j < n; j++)
        for (int64_t b = 0; b < nb; b++) memcpy(&dv16[b][j], V + j * rb + b * bb, 2);
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t j = n; j < ldw; j++) dv16[b][j] = 0;
        for (int64_t j = 0; j < ldw; j += 8)
            _mm256_storeu_ps(&dv[b][j], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)&dv16[b][j])));
    }
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int R4 = M - r0 < 4 ? (int)(M - r0) : 4;
        for (int r = 0; r < R4; r++) {
            const float *p = P + (r0 + r) * ldp;
            for (int64_t b = 0; b < nb; b++) {
                float *w = W + (b * 4 + r) * AQ8_PV_MAXN;
                __m256 sum = _mm256_setzero_ps();
                int64_t j = 0;
                for (; j + 8 <= n; j += 8) {
                    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(&dv[b][j]));
                    _mm256_storeu_ps(w + j, x);
                    sum = _mm256_add_ps(sum, x);
                }
                float tail = 0.0f;
                for (; j < n; j++) tail += w[j] = p[j] * dv[b][j];
                if (q4) { /* the codes are 0..15: O -= 8 sum_j W over the block's columns */
                    __m128 h = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
                    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                    h = _mm_add_ss(h, _mm_movehdup_ps(h));
                    const __m256 off = _mm256_set1_ps(-8.0f * (_mm_cvtss_f32(h) + tail));
                    float *o = O + (r0 + r) * d + b * 32;
                    for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + 8 * u, _mm256_add_ps(_mm256_loadu_ps(o + 8 * u), off));
                }
            }
        }
        for (int r2 = 0; r2 < R4; r2 += 2) {
            const int R = R4 - r2 < 2 ? 1 : 2;
            float *o = O + (r0 + r2) * d;
            const float *w = W + r2 * AQ8_PV_MAXN;
            for (int64_t b = 0; b < nb; b++) {
                if (q4) {
                    if (R == 2) aq8_pv_block2(1, 2, V, rb, w, n, d, b, o);
                    else aq8_pv_block2(1, 1, V, rb, w, n, d, b, o);
                } else {
                    if (R == 2) aq8_pv_block2(0, 2, V, rb, w, n, d, b, o);
                    else aq8_pv_block2(0, 1, V, rb, w, n, d, b, o);
                }
            }
        }
    }
    return 1;
}

int kvs_cpu_att_pv_q8_avx2(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                           int64_t d, float *O) {
    return aq8_pv(dt, V, rb, P, ldp, M, n, d, O) || aq8_pv_f32(dt, V, rb, P, ldp, M, n, d, O);
}

int kvs_cpu_att_qk_q8_avx2(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                           float scale, float *S, int64_t lds) {
    return aq8_qk(dt, K, rb, Q, M, n, scale, S, lds);
}

/* qh8 (K_lo / V_lo given) and q4_1 K / V, repacked per tile (att_q8.h, aq8h_*; ../attention_q8.h) */
int kvs_cpu_att_qk_qh8_avx2(kvs_dtype dt, const void *K, const void *K_lo, int64_t rb, const kvs_att_q8 *Q, int64_t M,
                           int64_t n, float scale, float *S, int64_t lds, void *scratch) {
    return aq8h_qk(dt, K, K_lo, rb, Q, M, n, scale, S, lds, scratch);
}

int kvs_cpu_att_pv_qh8_avx2(kvs_dtype dt, const void *V, const void *V_lo, int64_t rb, const float *P, int64_t ldp,
                           int64_t M, int64_t n, int64_t d, float *O, void *scratch) {
    return aq8h_pv(dt, V, V_lo, rb, P, ldp, M, n, d, O, scratch, kvs_cpu_att_pv_q8_avx2);
}
#endif
