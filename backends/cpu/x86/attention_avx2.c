/* CPU backend, x86 AVX2 kernels of attention (contracts: ../attention.h, the same as the AVX-512
 * ones): the register-blocked tile products over K in panels, the decoding products over row-major
 * K/V tiles, and the row max and exp-sum of the online softmax. This file alone is compiled with
 * -mavx2 -mfma -mf16c (backends/cpu/meson.build); ops_attention.c chooses its table
 * (kvs_cpu_att_avx2) only when kvs_cpu_avx2() says the CPU has those extensions. AVX2 has 16
 * vector registers of 8 floats, so every product keeps 8 accumulators: the tile products blocks of
 * 4 rows x 16 columns (2 loads and 4 broadcasts per 8 FMAs), the decoding ones row pairs x 4 keys
 * or x 32 columns. */
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

/* O[r][c..c+8C) += sum_{j<n} P[r][j] V[j][c..c+8C) for the R rows from r0 (R * C <= 8
 * accumulators; R, C constants after inlining); P row stride ATT_BK, V [n][d], O [.][d]. */
ATT_INLINE void att_pv_block(int R, int C, const float *p, int64_t n, const float *V, int64_t d, float *o, int64_t c) {
    __m256 acc[4][8];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < C; u++) acc[r][u] = _mm256_loadu_ps(o + r * d + c + 8 * u);
    for (int64_t j = 0; j < n; j++) {
        __m256 v[8];
        for (int u = 0; u < C; u++) v[u] = _mm256_loadu_ps(V + j * d + c + 8 * u);
        for (int r = 0; r < R; r++) {
            const __m256 b = _mm256_broadcast_ss(p + r * ATT_BK + j);
            for (int u = 0; u < C; u++) acc[r][u] = _mm256_fmadd_ps(b, v[u], acc[r][u]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < C; u++) _mm256_storeu_ps(o + r * d + c + 8 * u, acc[r][u]);
}

/* Lanes [0, w) of an 8-lane mask for _mm256_maskload_ps / _mm256_maskstore_ps (0 < w < 8). */
ATT_INLINE __m256i att_mask8(int64_t w) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Columns [c, c+w) (0 < w < 8, lane mask tm = att_mask8(w)) of O's R rows += P . V, as
 * att_pv_block with one masked vector per row (loads and stores stay inside the rows). */
ATT_INLINE void att_pv_block_tail(int R, const float *p, int64_t n, const float *V, int64_t d, float *o, int64_t c,
                                  __m256i tm) {
    __m256 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_maskload_ps(o + r * d + c, tm);
    for (int64_t j = 0; j < n; j++) {
        const __m256 v = _mm256_maskload_ps(V + j * d + c, tm);
        for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * ATT_BK + j), v, acc[r]);
    }
    for (int r = 0; r < R; r++) _mm256_maskstore_ps(o + r * d + c, tm, acc[r]);
}

/* Columns [c, d) of O's R rows, fewer than 16 left: an 8-column block, then a masked one. */
ATT_INLINE void att_pv_cols_tail(int R, const float *p, int64_t n, const float *V, int64_t d, float *o, int64_t c) {
    if (c + 8 <= d) {
        att_pv_block(R, 1, p, n, V, d, o, c);
        c += 8;
    }
    if (c < d) att_pv_block_tail(R, p, n, V, d, o, c, att_mask8(d - c));
}

/* O[r] += sum_j P[r][j] V[j] for r < Mp (multiple of 8), j < n; P row stride ATT_BK, V [n][d],
 * any d: blocks of 4 rows x 16 columns (2 loads and 4 broadcasts per 8 FMAs), the last d % 16
 * columns as an 8-column block and a masked one. */
static void att_pv_avx2(const float *P, int64_t Mp, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < Mp; r0 += 4) {
        int64_t c = 0;
        for (; c + 16 <= d; c += 16) att_pv_block(4, 2, P + r0 * ATT_BK, n, V, d, O + r0 * d, c);
        if (c < d) att_pv_cols_tail(4, P + r0 * ATT_BK, n, V, d, O + r0 * d, c);
    }
}

/* Decoding: O[r] += sum_j P[r][j] V[j] for r < M (any, usually the few rows of one GQA group); V
 * [n][d] row-major, any d. Row pairs x 32 columns (4 loads and 2 broadcasts per 8 FMAs), a last
 * 16-column block where 16 <= d % 32; a last single row (M odd) x 64 columns; the last d % 16
 * columns as an 8-column block and a masked one. */
static void att_pv_dec_avx2(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < M; r0 += 2) {
        const float *p = P + r0 * ATT_BK;
        float *o = O + r0 * d;
        int64_t c = 0;
        if (M - r0 >= 2) {
            for (; c + 32 <= d; c += 32) att_pv_block(2, 4, p, n, V, d, o, c);
            if (c + 16 <= d) att_pv_block(2, 2, p, n, V, d, o, c), c += 16;
            if (c < d) att_pv_cols_tail(2, p, n, V, d, o, c);
        } else {
            for (; c + 64 <= d; c += 64) att_pv_block(1, 8, p, n, V, d, o, c);
            for (; c + 32 <= d; c += 32) att_pv_block(1, 4, p, n, V, d, o, c);
            if (c + 16 <= d) att_pv_block(1, 2, p, n, V, d, o, c), c += 16;
            if (c < d) att_pv_cols_tail(1, p, n, V, d, o, c);
        }
    }
}

/* 8 floats from p, or (full == 0) the lanes of mask tm, the others 0. */
ATT_INLINE __m256 att_ld(const float *p, int full, __m256i tm) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tm);
}

/* The four row sums of a0..a3 (8 lanes each), as lanes 0..3. */
ATT_INLINE __m128 att_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* S[r][j..j+4) = scale * Qp[r] . K[j..j+4) for the R (1 or 2, constant after inlining) rows of q,
 * keys in groups of 4 (8 accumulators: 4 key loads and R query loads per 4R FMAs; one horizontal
 * reduction per row gives the 4 dot products), the last n % 4 keys one at a time; any d (the last
 * d % 8 channels through masked loads). */
ATT_INLINE void att_qk_dec_rows(int R, const float *q, const float *K, int64_t d, int64_t n, float scale, float *s) {
    const __m128 vs = _mm_set1_ps(scale);
    const __m256i tm = att_mask8(d % 8 ? d % 8 : 1); /* used only where d - t < 8 */
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k = K + j * d;
        __m256 a[2][4];
        for (int r = 0; r < R; r++)
            for (int u = 0; u < 4; u++) a[r][u] = _mm256_setzero_ps();
        for (int64_t t = 0; t < d; t += 8) {
            const int full = t + 8 <= d;
            const __m256 k0 = att_ld(k + t, full, tm), k1 = att_ld(k + d + t, full, tm),
                         k2 = att_ld(k + 2 * d + t, full, tm), k3 = att_ld(k + 3 * d + t, full, tm);
            for (int r = 0; r < R; r++) {
                const __m256 qv = att_ld(q + r * d + t, full, tm);
                a[r][0] = _mm256_fmadd_ps(qv, k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(qv, k1, a[r][1]);
                a[r][2] = _mm256_fmadd_ps(qv, k2, a[r][2]);
                a[r][3] = _mm256_fmadd_ps(qv, k3, a[r][3]);
            }
        }
        for (int r = 0; r < R; r++)
            _mm_storeu_ps(s + r * ATT_BK + j, _mm_mul_ps(vs, att_hsum4(a[r][0], a[r][1], a[r][2], a[r][3])));
    }
    for (; j < n; j++) {
        const float *k = K + j * d;
        __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t t = 0; t < d; t += 8) {
            const int full = t + 8 <= d;
            const __m256 kv = att_ld(k + t, full, tm);
            for (int r = 0; r < R; r++) a[r] = _mm256_fmadd_ps(att_ld(q + r * d + t, full, tm), kv, a[r]);
        }
        float out[4];
        _mm_storeu_ps(out, _mm_mul_ps(vs, att_hsum4(a[0], R > 1 ? a[1] : a[0], a[0], a[0])));
        for (int r = 0; r < R; r++) s[r * ATT_BK + j] = out[r];
    }
}

/* Decoding (few rows, row-major K [n][d]): S[r][j] = scale * Qp[r] . K[j] for r < M, j < n;
 * rows in pairs. */
static void att_qk_dec_avx2(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale, float *S) {
    for (int64_t r0 = 0; r0 < M; r0 += 2) {
        if (M - r0 >= 2)
            att_qk_dec_rows(2, Qp + r0 * d, K, d, n, scale, S + r0 * ATT_BK);
        else
            att_qk_dec_rows(1, Qp + r0 * d, K, d, n, scale, S + r0 * ATT_BK);
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
    const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x)); /* NaN x stays NaN (max/min return the 2nd operand) */
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
    .h2f = kvs_cpu_h2f_row_f16c, /* every CPU of these kernels has F16C */
    .dec_align = 1, /* qk_dec / pv_dec mask the last lanes: any d_k, d_v */
    .dec_min = 16, /* below 16 (d_k 8: one lane-reduced dot per key and row) cblas is faster */
};
#endif
