/* CPU backend, x86 AVX-512 kernels of attention (contracts: ../attention.h): the register-blocked
 * tile products over K in panels, the decoding products over row-major K/V tiles, and the row max
 * and exp-sum of the online softmax. Compiled with target attributes; chosen per call by
 * ../attention_tiles.c. */
#include "../cpu_kernels.h"
#include "../attention.h"

#if KVS_CPU_HAVE_AVX512
#include <immintrin.h>

/* ---- AVX-512 register-blocked tile products (used when the CPU has AVX-512F; any d) ---- */

/* S[r][j] = scale * sum_t Qp[r][t] K[j][t] for r < Mp (multiple of 8), j < np (multiple of 32).
 * Qp: [Mp][d]; KP: K transposed in panels of 32 keys, [np/32][d][32] (contiguous streams; a
 * power-of-two row stride would alias in L1); S: row stride ATT_BK.
 * 8 rows x 32 keys per block: 16 accumulators, 2 loads + 8 broadcasts per 16 FMAs. */
__attribute__((target("avx512f")))
void kvs_cpu_att_qk_avx512(const float *Qp, const float *KP, int64_t d, int64_t Mp, int64_t np, float scale,
                          float *S) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t r0 = 0; r0 < Mp; r0 += 8) {
        const float *q = Qp + r0 * d;
        for (int64_t j = 0; j < np; j += 32) {
            __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
                   a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00, a61 = a00, a70 = a00, a71 = a00;
            const float *kt = KP + (j / 32) * d * 32;
            for (int64_t t = 0; t < d; t++) {
                __m512 k0 = _mm512_loadu_ps(kt + t * 32), k1 = _mm512_loadu_ps(kt + t * 32 + 16);
                __m512 b;
#define ATT_QK_ROW(R)                                                                                  \
    b = _mm512_set1_ps(q[(R) * d + t]);                                                                \
    a##R##0 = _mm512_fmadd_ps(b, k0, a##R##0);                                                         \
    a##R##1 = _mm512_fmadd_ps(b, k1, a##R##1);
                ATT_QK_ROW(0) ATT_QK_ROW(1) ATT_QK_ROW(2) ATT_QK_ROW(3)
                ATT_QK_ROW(4) ATT_QK_ROW(5) ATT_QK_ROW(6) ATT_QK_ROW(7)
#undef ATT_QK_ROW
            }
            float *s = S + r0 * ATT_BK + j;
#define ATT_QK_STORE(R)                                                                                \
    _mm512_storeu_ps(s + (R) * ATT_BK, _mm512_mul_ps(a##R##0, vs));                                     \
    _mm512_storeu_ps(s + (R) * ATT_BK + 16, _mm512_mul_ps(a##R##1, vs));
            ATT_QK_STORE(0) ATT_QK_STORE(1) ATT_QK_STORE(2) ATT_QK_STORE(3)
            ATT_QK_STORE(4) ATT_QK_STORE(5) ATT_QK_STORE(6) ATT_QK_STORE(7)
#undef ATT_QK_STORE
        }
    }
}

/* O[r][:] += sum_{j<n} P[r][j] V[j][:] for r < Mp (multiple of 8); P row stride ATT_BK, V [n][d],
 * O [Mp][d], any d. 8 rows x 32 columns per block (16 accumulators), then 8 rows x 16 columns, the
 * last d % 16 columns under a lane mask. */
__attribute__((target("avx512f")))
void kvs_cpu_att_pv_avx512(const float *P, int64_t Mp, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < Mp; r0 += 8) {
        const float *p = P + r0 * ATT_BK;
        float *o = O + r0 * d;
        int64_t c = 0;
        for (; c + 32 <= d; c += 32) {
#define ATT_PV_LOAD(R)                                                                                 \
    __m512 a##R##0 = _mm512_loadu_ps(o + (R) * d + c), a##R##1 = _mm512_loadu_ps(o + (R) * d + c + 16);
            ATT_PV_LOAD(0) ATT_PV_LOAD(1) ATT_PV_LOAD(2) ATT_PV_LOAD(3)
            ATT_PV_LOAD(4) ATT_PV_LOAD(5) ATT_PV_LOAD(6) ATT_PV_LOAD(7)
#undef ATT_PV_LOAD
            for (int64_t j = 0; j < n; j++) {
                __m512 v0 = _mm512_loadu_ps(V + j * d + c), v1 = _mm512_loadu_ps(V + j * d + c + 16);
                __m512 b;
#define ATT_PV_ROW(R)                                                                                  \
    b = _mm512_set1_ps(p[(R) * ATT_BK + j]);                                                           \
    a##R##0 = _mm512_fmadd_ps(b, v0, a##R##0);                                                         \
    a##R##1 = _mm512_fmadd_ps(b, v1, a##R##1);
                ATT_PV_ROW(0) ATT_PV_ROW(1) ATT_PV_ROW(2) ATT_PV_ROW(3)
                ATT_PV_ROW(4) ATT_PV_ROW(5) ATT_PV_ROW(6) ATT_PV_ROW(7)
#undef ATT_PV_ROW
            }
#define ATT_PV_STORE(R)                                                                                \
    _mm512_storeu_ps(o + (R) * d + c, a##R##0);                                                        \
    _mm512_storeu_ps(o + (R) * d + c + 16, a##R##1);
            ATT_PV_STORE(0) ATT_PV_STORE(1) ATT_PV_STORE(2) ATT_PV_STORE(3)
            ATT_PV_STORE(4) ATT_PV_STORE(5) ATT_PV_STORE(6) ATT_PV_STORE(7)
#undef ATT_PV_STORE
        }
        for (; c < d; c += 16) { /* 16 columns, the last d % 16 masked (loads and stores stay in the rows) */
            const __mmask16 k = (__mmask16)(d - c >= 16 ? 0xffff : (1u << (d - c)) - 1);
            __m512 a0 = _mm512_maskz_loadu_ps(k, o + c), a1 = _mm512_maskz_loadu_ps(k, o + d + c),
                   a2 = _mm512_maskz_loadu_ps(k, o + 2 * d + c), a3 = _mm512_maskz_loadu_ps(k, o + 3 * d + c),
                   a4 = _mm512_maskz_loadu_ps(k, o + 4 * d + c), a5 = _mm512_maskz_loadu_ps(k, o + 5 * d + c),
                   a6 = _mm512_maskz_loadu_ps(k, o + 6 * d + c), a7 = _mm512_maskz_loadu_ps(k, o + 7 * d + c);
            for (int64_t j = 0; j < n; j++) {
                __m512 v0 = _mm512_maskz_loadu_ps(k, V + j * d + c);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), v0, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(p[ATT_BK + j]), v0, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(p[2 * ATT_BK + j]), v0, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(p[3 * ATT_BK + j]), v0, a3);
                a4 = _mm512_fmadd_ps(_mm512_set1_ps(p[4 * ATT_BK + j]), v0, a4);
                a5 = _mm512_fmadd_ps(_mm512_set1_ps(p[5 * ATT_BK + j]), v0, a5);
                a6 = _mm512_fmadd_ps(_mm512_set1_ps(p[6 * ATT_BK + j]), v0, a6);
                a7 = _mm512_fmadd_ps(_mm512_set1_ps(p[7 * ATT_BK + j]), v0, a7);
            }
            _mm512_mask_storeu_ps(o + c, k, a0);
            _mm512_mask_storeu_ps(o + d + c, k, a1);
            _mm512_mask_storeu_ps(o + 2 * d + c, k, a2);
            _mm512_mask_storeu_ps(o + 3 * d + c, k, a3);
            _mm512_mask_storeu_ps(o + 4 * d + c, k, a4);
            _mm512_mask_storeu_ps(o + 5 * d + c, k, a5);
            _mm512_mask_storeu_ps(o + 6 * d + c, k, a6);
            _mm512_mask_storeu_ps(o + 7 * d + c, k, a7);
        }
    }
}

/* Decoding (few query rows, K/V row-major as stored): S[r][j] = scale * Qp[r] . K[j] for r < M,
 * j < n; K [n][d], S row stride ATT_BK, any d (the last d % 16 channels under a lane mask). Each
 * key row is loaded once for up to four query rows; the dot products reduce across lanes. */
__attribute__((target("avx512f")))
void kvs_cpu_att_qk_dec_avx512(const float *Qp, const float *K, int64_t d, int64_t M, int64_t n, float scale,
                              float *S) {
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *q = Qp + r0 * d;
        float *s = S + r0 * ATT_BK;
        for (int64_t j = 0; j < n; j++) {
            const float *k = K + j * d;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t t = 0; t < d; t += 16) {
                const __mmask16 m = (__mmask16)(d - t >= 16 ? 0xffff : (1u << (d - t)) - 1);
                __m512 kv = _mm512_maskz_loadu_ps(m, k + t);
                a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + t), kv, a0);
                if (R > 1) a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d + t), kv, a1);
                if (R > 2) a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + 2 * d + t), kv, a2);
                if (R > 3) a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + 3 * d + t), kv, a3);
            }
            s[j] = scale * _mm512_reduce_add_ps(a0);
            if (R > 1) s[ATT_BK + j] = scale * _mm512_reduce_add_ps(a1);
            if (R > 2) s[2 * ATT_BK + j] = scale * _mm512_reduce_add_ps(a2);
            if (R > 3) s[3 * ATT_BK + j] = scale * _mm512_reduce_add_ps(a3);
        }
    }
}

/* Decoding: O[r][:] += sum_{j<n} P[r][j] V[j][:] for r < M; P row stride ATT_BK, V [n][d], O [M][d],
 * any d. Blocks of up to 4 rows x 64 columns stay in registers over all n keys (the last d % 16
 * columns under a lane mask). */
__attribute__((target("avx512f")))
void kvs_cpu_att_pv_dec_avx512(const float *P, int64_t M, int64_t n, const float *V, int64_t d, float *O) {
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const int64_t R = M - r0 < 4 ? M - r0 : 4;
        const float *p = P + r0 * ATT_BK;
        for (int64_t c = 0; c < d; c += 64) {
            const int64_t C = d - c < 64 ? (d - c + 15) / 16 : 4; /* vectors in this column block */
            __mmask16 km[4];
            for (int64_t u = 0; u < 4; u++) {
                const int64_t w = d - c - 16 * u;
                km[u] = (__mmask16)(w >= 16 ? 0xffff : w > 0 ? (1u << w) - 1 : 0);
            }
            __m512 acc[4][4];
            for (int64_t r = 0; r < R; r++)
                for (int64_t u = 0; u < C; u++) acc[r][u] = _mm512_maskz_loadu_ps(km[u], O + (r0 + r) * d + c + 16 * u);
            for (int64_t j = 0; j < n; j++) {
                const float *v = V + j * d + c;
                __m512 v0 = _mm512_maskz_loadu_ps(km[0], v);
                __m512 v1 = C > 1 ? _mm512_maskz_loadu_ps(km[1], v + 16) : v0;
                __m512 v2 = C > 2 ? _mm512_maskz_loadu_ps(km[2], v + 32) : v0;
                __m512 v3 = C > 3 ? _mm512_maskz_loadu_ps(km[3], v + 48) : v0;
                for (int64_t r = 0; r < R; r++) {
                    __m512 b = _mm512_set1_ps(p[r * ATT_BK + j]);
                    acc[r][0] = _mm512_fmadd_ps(b, v0, acc[r][0]);
                    if (C > 1) acc[r][1] = _mm512_fmadd_ps(b, v1, acc[r][1]);
                    if (C > 2) acc[r][2] = _mm512_fmadd_ps(b, v2, acc[r][2]);
                    if (C > 3) acc[r][3] = _mm512_fmadd_ps(b, v3, acc[r][3]);
                }
            }
            for (int64_t r = 0; r < R; r++)
                for (int64_t u = 0; u < C; u++) _mm512_mask_storeu_ps(O + (r0 + r) * d + c + 16 * u, km[u], acc[r][u]);
        }
    }
}

/* max_t s[t] (-inf for n == 0). */
__attribute__((target("avx512f")))
float kvs_cpu_att_row_max_avx512(const float *s, int64_t n) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t t = 0;
    for (; t + 32 <= n; t += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + t));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(s + t + 16));
    }
    m0 = _mm512_max_ps(m0, m1);
    if (t < n) {
        __mmask16 k = (__mmask16)(n - t >= 16 ? 0xffff : (1u << (n - t)) - 1);
        m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + t));
        t += 16;
    }
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1);
        m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + t));
    }
    return _mm512_reduce_max_ps(m0);
}

/* 16 lanes of kvs_expf (same range reduction and polynomial, FMA-evaluated). */
__attribute__((target("avx512f")))
static inline __m512 att_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __m512 xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x)); /* NaN x stays NaN (max/min return the 2nd operand) */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.98412698412698413e-04f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888888888888889e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333333333333e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666666666666667e-02f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666666666666667e-01f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
}

/* p[t] = exp(s[t] - m) in place; returns the sum. */
__attribute__((target("avx512f")))
float kvs_cpu_att_exp_row_avx512(float *s, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    int64_t t = 0;
    for (; t + 32 <= n; t += 32) {
        __m512 e0 = att_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t), vm));
        __m512 e1 = att_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t + 16), vm));
        _mm512_storeu_ps(s + t, e0);
        _mm512_storeu_ps(s + t + 16, e1);
        acc0 = _mm512_add_ps(acc0, e0);
        acc1 = _mm512_add_ps(acc1, e1);
    }
    for (; t < n; t += 16) {
        __mmask16 k = (__mmask16)(n - t >= 16 ? 0xffff : (1u << (n - t)) - 1);
        __m512 e = att_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm));
        e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(s + t, k, e);
        acc0 = _mm512_add_ps(acc0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

const att_kernels kvs_cpu_att_avx512 = {
    .qk = kvs_cpu_att_qk_avx512,
    .pv = kvs_cpu_att_pv_avx512,
    .qk_dec = kvs_cpu_att_qk_dec_avx512,
    .pv_dec = kvs_cpu_att_pv_dec_avx512,
    .row_max = kvs_cpu_att_row_max_avx512,
    .exp_row = kvs_cpu_att_exp_row_avx512,
    .h2f = kvs_cpu_h2f_row_f16c, /* every CPU of these kernels has F16C */
    .dec_align = 1, /* qk_dec / pv_dec mask the last lanes: any d_k, d_v */
    .dec_min = 16, /* below 16 (d_k 8: one lane-reduced dot per key and row) cblas is faster */
};
#endif

