/* CPU backend, x86 AVX2 kernels of attention (contracts: ../attention.h, the same as the AVX-512
 * ones): the register-blocked tile products over K in panels, the decoding products over row-major
 * K/V tiles, and the row max and exp-sum of the online softmax. This file alone is compiled with
 * -mavx2 -mfma -mf16c (backends/cpu/meson.build); ops_attention.c chooses its table
 * (kvs_cpu_att_avx2) only when kvs_cpu_avx2() says the CPU has those extensions. AVX2 has 16
 * vector registers of 8 floats, so every product works on blocks of 4 rows x 16 columns
 * (8 accumulators, 2 loads and 4 broadcasts per 8 FMAs). */
#include "../attention.h"

#if KVS_CPU_HAVE_AVX2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define ATT_INLINE static inline __attribute__((always_inline))

/* S[r][j] = scale * sum_t Qp[r][t] K[j][t] for r < Mp (multiple of 8), j < np (multiple of 32);
 * KP: K transposed in panels of 32 keys, [np/32][d][32]; S row stride ATT_BK. */
static void att_qk_avx2(const float *Qp, const float *KP, int64_t d, int64_t Mp, int64_t np, float scale, float *S) {
    const __m256 vs = _mm256_set1_ps(scale);
    for (int64_t r0 = 0; r0 < Mp; r0 += 4) {
        const float *q = Qp + r0 * d;
        for (int64_t j = 0; j < np; j += 16) {
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
                   a31 = a00;
            const float *kt = KP + (j / 32) * d * 32 + (j % 32);
            for (int64_t t = 0; t < d; t++) {
                const __m256 k0 = _mm256_loadu_ps(kt + t * 32), k1 = _mm256_loadu_ps(kt + t * 32 + 8);
                __m256 b;
#define ATT_QK_ROW(R)                                                                                  \
    b = _mm256_broadcast_ss(q + (R) * d + t);                                                          \
    a##R##0 = _mm256_fmadd_ps(b, k0, a##R##0);                                                         \
    a##R##1 = _mm256_fmadd_ps(b, k1, a##R##1);
                ATT_QK_ROW(0) ATT_QK_ROW(1) ATT_QK_ROW(2) ATT_QK_ROW(3)
#undef ATT_QK_ROW
            }
            float *s = S + r0 * ATT_BK + j;
#define ATT_QK_STORE(R)                                                                                \
    _mm256_storeu_ps(s + (R) * ATT_BK, _mm256_mul_ps(a##R##0, vs));                                     \
    _mm256_storeu_ps(s + (R) * ATT_BK + 8, _mm256_mul_ps(a##R##1, vs));
            ATT_QK_STORE(0) ATT_QK_STORE(1) ATT_QK_STORE(2) ATT_QK_STORE(3)
#undef ATT_QK_STORE
        }
    }
}

/* O[r][c..c+16) += sum_{j<n} P[r][j] V[j][c..c+16) for the R (<= 4, a constant after inlining)
 * rows from r0; P row stride ATT_BK, V [n][d], O [.][d]. */
ATT_INLINE void att_pv_block(int R, const float *p, int64_t n, const float *V, int64_t d, float *o, int64_t c) {
    __m256 acc[4][2];
    for (int r = 0; r < R; r++) {
        acc[r][0] = _mm256_loadu_ps(o + r * d + c);
        acc[r][1] = _mm256_loadu_ps(o + r * d + c + 8);
    }
    for (int64_t j = 0; j < n; j++) {
        const __m256 v0 = _mm256_loadu_ps(V + j * d + c), v1 = _mm256_loadu_ps(V + j * d + c + 8);
        for (int r = 0; r < R; r++) {
            const __m256 b = _mm256_broadcast_ss(p + r * ATT_BK + j);
            acc[r][0] = _mm256_fmadd_ps(b, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, v1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(o + r * d + c, acc[r][0]);
        _mm256_storeu_ps(o + r * d + c + 8, acc[r][1]);
    }
}

/* Rows [0, M) in blocks of 4 (the last block R = M % 4 rows), 16 columns a block, d % 16 == 0. */
static void att_pv_rows(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *p = P + r0 * ATT_BK;
        float *o = O + r0 * d;
        for (int64_t c = 0; c < d; c += 16) {
            switch (R) {
            case 4: att_pv_block(4, p, n, V, d, o, c); break;
            case 3: att_pv_block(3, p, n, V, d, o, c); break;
            case 2: att_pv_block(2, p, n, V, d, o, c); break;
            default: att_pv_block(1, p, n, V, d, o, c); break;
            }
        }
    }
}

/* O[r] += sum_j P[r][j] V[j] for r < Mp (multiple of 8), j < n; P row stride ATT_BK, V [n][d]. */
static void att_pv_avx2(const float *P, int64_t Mp, int64_t n, const float *V, int64_t d, float *O) {
    att_pv_rows(P, Mp, n, V, d, O);
}

/* Decoding: O[r] += sum_j P[r][j] V[j] for r < M (any); V [n][d] row-major. */
static void att_pv_dec_avx2(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O) {
    att_pv_rows(P, M, n, V, d, O);
}

/* The four row sums of a0..a3 (8 lanes each), as lanes 0..3. */
ATT_INLINE __m128 att_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* S[r][j] = scale * Qp[r] . K[j] for the R (<= 4, constant after inlining) rows of q, j < n;
 * d % 16 == 0. Each key row is loaded once for the R rows; the 4 dot products of a key reduce
 * together. */
ATT_INLINE void att_qk_dec_block(int R, const float *q, const float *K, int64_t d, int64_t n, float scale, float *s) {
    const __m128 vs = _mm_set1_ps(scale);
    for (int64_t j = 0; j < n; j++) {
        const float *k = K + j * d;
        __m256 a[4][2];
        for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int64_t t = 0; t < d; t += 16) {
            const __m256 k0 = _mm256_loadu_ps(k + t), k1 = _mm256_loadu_ps(k + t + 8);
            for (int r = 0; r < R; r++) {
                a[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d + t), k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d + t + 8), k1, a[r][1]);
            }
        }
        float out[4];
        _mm_storeu_ps(out, _mm_mul_ps(vs, att_hsum4(_mm256_add_ps(a[0][0], a[0][1]), _mm256_add_ps(a[1][0], a[1][1]),
                                                    _mm256_add_ps(a[2][0], a[2][1]), _mm256_add_ps(a[3][0], a[3][1]))));
        for (int r = 0; r < R; r++) s[r * ATT_BK + j] = out[r];
    }
}

/* Decoding (few rows, row-major K [n][d]): S[r][j] = scale * Qp[r] . K[j] for r < M, j < n. */
static void att_qk_dec_avx2(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale, float *S) {
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *q = Qp + r0 * d;
        float *s = S + r0 * ATT_BK;
        switch (R) {
        case 4: att_qk_dec_block(4, q, K, d, n, scale, s); break;
        case 3: att_qk_dec_block(3, q, K, d, n, scale, s); break;
        case 2: att_qk_dec_block(2, q, K, d, n, scale, s); break;
        default: att_qk_dec_block(1, q, K, d, n, scale, s); break;
        }
    }
}

/* max_t s[t] (-inf for n == 0). */
static float att_row_max_avx2(const float *s, int64_t n) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int64_t t = 0;
    for (; t + 32 <= n; t += 32) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + t));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(s + t + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(s + t + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(s + t + 24));
    }
    for (; t + 8 <= n; t += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + t));
    m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float m = _mm_cvtss_f32(h);
    for (; t < n; t++) m = s[t] > m ? s[t] : m;
    return m;
}

/* 8 lanes of kvs_expf (same range reduction and polynomial, FMA-evaluated). */
ATT_INLINE __m256 att_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.98412698412698413e-04f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.38888888888888889e-03f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.33333333333333333e-03f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.16666666666666667e-02f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.66666666666666667e-01f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

/* p[t] = exp(s[t] - m) in place; returns the sum (the last n % 8 through kvs_expf). */
static float att_exp_row_avx2(float *s, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
        const __m256 e0 = att_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
        const __m256 e1 = att_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t + 8), vm));
        _mm256_storeu_ps(s + t, e0);
        _mm256_storeu_ps(s + t + 8, e1);
        acc0 = _mm256_add_ps(acc0, e0);
        acc1 = _mm256_add_ps(acc1, e1);
    }
    for (; t + 8 <= n; t += 8) {
        const __m256 e = att_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
        _mm256_storeu_ps(s + t, e);
        acc0 = _mm256_add_ps(acc0, e);
    }
    acc0 = _mm256_add_ps(acc0, acc1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
    for (; t < n; t++) {
        const float e = kvs_expf(s[t] - m);
        s[t] = e;
        sum += e;
    }
    return sum;
}

const att_kernels kvs_cpu_att_avx2 = {
    .qk = att_qk_avx2,
    .pv = att_pv_avx2,
    .qk_dec = att_qk_dec_avx2,
    .pv_dec = att_pv_dec_avx2,
    .row_max = att_row_max_avx2,
    .exp_row = att_exp_row_avx2,
};
#endif
